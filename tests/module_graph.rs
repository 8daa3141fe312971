//! The import graph of `src/` between top-level modules has no cycle. Read from the sources
//! (`crate::<module>` paths outside comments and test modules), no compiler needed.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Top-level module of a file under `src/` (`None`: lib.rs, main.rs).
fn module_of(root: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(root).ok()?;
    let first = rel.components().next()?.as_os_str().to_str()?;
    let name = first.strip_suffix(".rs").unwrap_or(first);
    (!["lib", "main"].contains(&name)).then(|| name.to_string())
}

/// The source without comments and without its `#[cfg(test)] mod tests { .. }` tail.
fn production_code(source: &str) -> String {
    let code: String = source
        .lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n");
    match code.find("#[cfg(test)]\nmod tests") {
        Some(i) => code[..i].to_string(),
        None => code,
    }
}

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("reading src/") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// module -> the other top-level modules it names through `crate::`.
fn import_graph(root: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    rust_files(root, &mut files);
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in files {
        let Some(module) = module_of(root, &file) else {
            continue;
        };
        let code = production_code(&std::fs::read_to_string(&file).expect("reading a source"));
        let imports = graph.entry(module.clone()).or_default();
        for (i, _) in code.match_indices("crate::") {
            let target: String = code[i + 7..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if !target.is_empty() && target != module {
                imports.insert(target);
            }
        }
    }
    graph
}

/// The modules in an order where each imports only modules before it (Kahn's algorithm), or
/// `Err` with the modules left on cycles.
fn layers(graph: &BTreeMap<String, BTreeSet<String>>) -> Result<Vec<String>, Vec<String>> {
    let mut left: BTreeMap<&str, BTreeSet<&str>> = graph
        .iter()
        .map(|(m, imports)| (m.as_str(), imports.iter().map(String::as_str).collect()))
        .collect();
    let mut order = Vec::new();
    while !left.is_empty() {
        let ready: Vec<&str> = left
            .iter()
            .filter(|(_, imports)| imports.iter().all(|i| !left.contains_key(i)))
            .map(|(m, _)| *m)
            .collect();
        if ready.is_empty() {
            return Err(left.keys().map(|m| m.to_string()).collect());
        }
        for m in ready {
            left.remove(m);
            order.push(m.to_string());
        }
    }
    Ok(order)
}

#[test]
fn the_modules_of_src_import_each_other_without_a_cycle() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let graph = import_graph(&root);
    assert!(graph.len() >= 20, "found only {} modules", graph.len());
    match layers(&graph) {
        Ok(order) => println!(
            "modules, each importing only earlier ones: {}",
            order.join(" < ")
        ),
        Err(cycles) => panic!("modules on an import cycle (or importing one): {cycles:?}"),
    }
}

#[test]
fn the_reader_sees_a_cycle_when_there_is_one() {
    let dir = std::env::temp_dir().join(format!("kr-module-graph-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("b")).unwrap();
    std::fs::write(
        dir.join("a.rs"),
        "use crate::b::X; // crate::c in a comment\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("b/mod.rs"),
        "use crate::a::Y;\n#[cfg(test)]\nmod tests {\n use crate::c::Z;\n}\n",
    )
    .unwrap();
    let graph = import_graph(&dir);
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(graph["a"], BTreeSet::from(["b".to_string()]));
    assert_eq!(graph["b"], BTreeSet::from(["a".to_string()]));
    assert_eq!(layers(&graph), Err(vec!["a".to_string(), "b".to_string()]));
    let acyclic = BTreeMap::from([
        ("a".to_string(), BTreeSet::from(["b".to_string()])),
        ("b".to_string(), BTreeSet::new()),
    ]);
    assert_eq!(layers(&acyclic), Ok(vec!["b".to_string(), "a".to_string()]));
}
