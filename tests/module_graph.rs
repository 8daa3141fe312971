//! The import graph of `src/` between top-level modules has no cycle, and neither has the
//! graph between the files of the load test (`loadtest/src`) or of `src/`. Read from the
//! sources (paths outside comments and test modules), no compiler needed.

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

// ---------------------------------------------------------------------------------------------
// File level: every file of a crate is a node, for any crate root (`src/lib.rs`,
// `loadtest/src/main.rs`). A file imports another when its production code names an item the
// other defines: `crate::a::b::Item`, `super::Item`, `self::child::Item` and paths that start at
// a child module, in `use` trees and in code alike, followed through `pub use` re-exports to the
// file that defines the item. Declaring `mod child;` is no import. Comments, string literals and
// `#[cfg(test)]` items (and the files only they declare) are left out. No compiler: a name the
// reader cannot place (a macro's, an inline module's) counts as its module's file.

/// One file's code with comments and the contents of string and char literals blanked (newlines
/// kept), so nothing in them reads as a path.
fn blank_comments_and_literals(source: &str) -> String {
    let c: Vec<char> = source.chars().collect();
    let mut out = String::with_capacity(source.len());
    let blank = |ch: char| if ch == '\n' { '\n' } else { ' ' };
    let ident = |ch: char| ch.is_alphanumeric() || ch == '_';
    let mut i = 0;
    while i < c.len() {
        let next = c.get(i + 1).copied();
        if c[i] == '/' && next == Some('/') {
            while i < c.len() && c[i] != '\n' {
                out.push(' ');
                i += 1;
            }
        } else if c[i] == '/' && next == Some('*') {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && c.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if c[i] == '*' && c.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(blank(c[i]));
                    i += 1;
                }
            }
        } else if c[i] == 'r'
            && (i == 0 || !ident(c[i - 1]) || (c[i - 1] == 'b' && (i < 2 || !ident(c[i - 2]))))
            && matches!(next, Some('"') | Some('#'))
            && {
                let hashes = c[i + 1..].iter().take_while(|&&h| h == '#').count();
                c.get(i + 1 + hashes) == Some(&'"')
            }
        {
            let hashes = c[i + 1..].iter().take_while(|&&h| h == '#').count();
            out.push('r');
            out.extend(std::iter::repeat_n('#', hashes));
            out.push('"');
            i += 2 + hashes;
            while i < c.len() {
                if c[i] == '"'
                    && c[i + 1..]
                        .iter()
                        .take(hashes)
                        .filter(|&&h| h == '#')
                        .count()
                        == hashes
                {
                    out.push('"');
                    out.extend(std::iter::repeat_n('#', hashes));
                    i += 1 + hashes;
                    break;
                }
                out.push(blank(c[i]));
                i += 1;
            }
        } else if c[i] == '"' {
            out.push('"');
            i += 1;
            while i < c.len() && c[i] != '"' {
                if c[i] == '\\' {
                    out.push(' ');
                    i += 1;
                }
                if i < c.len() {
                    out.push(blank(c[i]));
                    i += 1;
                }
            }
            out.push('"');
            i += 1;
        } else if c[i] == '\'' && (next == Some('\\') || c.get(i + 2) == Some(&'\'')) {
            // A char literal ('x', '\n', '\u{..}'); a lifetime has no closing quote.
            out.push('\'');
            i += 1;
            while i < c.len() && c[i] != '\'' {
                if c[i] == '\\' {
                    out.push(' ');
                    i += 1;
                }
                if i < c.len() {
                    out.push(blank(c[i]));
                    i += 1;
                }
            }
            out.push('\'');
            i += 1;
        } else {
            out.push(c[i]);
            i += 1;
        }
    }
    out
}

/// The code without its `#[cfg(test)]` items (a `mod tests { .. }`, a `mod fixtures;`, a test
/// helper), on blanked code.
fn without_test_items(code: &str) -> String {
    let mut c: Vec<char> = code.chars().collect();
    let attr: Vec<char> = "#[cfg(test)]".chars().collect();
    let mut from = 0;
    while let Some(start) =
        (from..c.len().saturating_sub(attr.len() - 1)).find(|&i| c[i..i + attr.len()] == attr[..])
    {
        let mut i = start + attr.len();
        let mut depth = 0i32;
        let mut end = c.len();
        while i < c.len() {
            match c[i] {
                '(' | '[' => depth += 1,
                ')' | ']' => depth -= 1,
                ';' if depth == 0 => {
                    end = i + 1;
                    break;
                }
                '{' if depth == 0 => {
                    let mut braces = 0;
                    while i < c.len() {
                        match c[i] {
                            '{' => braces += 1,
                            '}' => {
                                braces -= 1;
                                if braces == 0 {
                                    break;
                                }
                            }
                            _ => {}
                        }
                        i += 1;
                    }
                    end = (i + 1).min(c.len());
                    break;
                }
                _ => {}
            }
            i += 1;
        }
        for ch in &mut c[start..end] {
            if *ch != '\n' {
                *ch = ' ';
            }
        }
        from = end;
    }
    c.into_iter().collect()
}

/// Identifiers and punctuation (`::` as one token).
fn tokenize(code: &str) -> Vec<String> {
    let c: Vec<char> = code.chars().collect();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < c.len() {
        if c[i].is_whitespace() {
            i += 1;
        } else if c[i].is_alphanumeric() || c[i] == '_' {
            let start = i;
            while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                i += 1;
            }
            tokens.push(c[start..i].iter().collect());
        } else if c[i] == ':' && c.get(i + 1) == Some(&':') {
            tokens.push("::".to_string());
            i += 2;
        } else {
            tokens.push(c[i].to_string());
            i += 1;
        }
    }
    tokens
}

fn is_ident(t: &str) -> bool {
    t.starts_with(|c: char| c.is_alphabetic() || c == '_')
}

/// One leaf of a `use` tree: the full path, the name it is bound to (`*` for a glob).
#[derive(Debug, Clone, PartialEq)]
struct UseLeaf {
    path: Vec<String>,
    name: String,
}

/// Parses a use tree at `tokens[*i]`, under `prefix`, into `out`.
fn use_tree(tokens: &[String], i: &mut usize, prefix: &[String], out: &mut Vec<UseLeaf>) {
    let mut path = prefix.to_vec();
    loop {
        match tokens.get(*i).map(String::as_str) {
            Some("{") => {
                *i += 1;
                while tokens.get(*i).is_some_and(|t| t != "}") {
                    use_tree(tokens, i, &path, out);
                    if tokens.get(*i).is_some_and(|t| t == ",") {
                        *i += 1;
                    }
                }
                *i += 1;
                return;
            }
            Some("*") => {
                *i += 1;
                out.push(UseLeaf {
                    path,
                    name: "*".to_string(),
                });
                return;
            }
            Some("::") => *i += 1,
            Some(t) if is_ident(t) && t != "as" => {
                path.push(t.to_string());
                *i += 1;
                if tokens.get(*i).is_some_and(|t| t == "::") {
                    continue;
                }
                let mut name = path.last().cloned().unwrap_or_default();
                if tokens.get(*i).is_some_and(|t| t == "as") {
                    name = tokens.get(*i + 1).cloned().unwrap_or_default();
                    *i += 2;
                }
                if path.last().is_some_and(|s| s == "self") {
                    path.pop();
                    if name == "self" {
                        name = path.last().cloned().unwrap_or_default();
                    }
                }
                out.push(UseLeaf { path, name });
                return;
            }
            _ => return,
        }
    }
}

/// What the reader takes from one file: its child modules, the names it defines at its top
/// level, its `use` leaves (and which are `pub`), and the other paths its code names.
#[derive(Debug, Default)]
struct FileFacts {
    children: Vec<String>,
    defines: BTreeSet<String>,
    uses: Vec<(UseLeaf, bool)>,
    paths: Vec<Vec<String>>,
}

fn file_facts(source: &str) -> FileFacts {
    let code = without_test_items(&blank_comments_and_literals(source));
    let tokens = tokenize(&code);
    let mut facts = FileFacts::default();
    let mut depth = 0i32;
    let mut i = 0;
    while i < tokens.len() {
        let t = tokens[i].as_str();
        let next = tokens.get(i + 1).map(String::as_str).unwrap_or("");
        let prev = if i > 0 { tokens[i - 1].as_str() } else { "" };
        match t {
            "{" => depth += 1,
            "}" => depth -= 1,
            "use" if prev != "::" => {
                // `pub use`, `pub(crate) use`, `pub(super) use`: a re-export.
                let mut k = i;
                if k > 0 && tokens[k - 1] == ")" {
                    while k > 0 && tokens[k - 1] != "(" {
                        k -= 1;
                    }
                    k = k.saturating_sub(1);
                }
                let public = k > 0 && tokens[k - 1] == "pub";
                let mut j = i + 1;
                let mut leaves = Vec::new();
                use_tree(&tokens, &mut j, &[], &mut leaves);
                facts.uses.extend(leaves.into_iter().map(|l| (l, public)));
                i = j;
                continue;
            }
            "mod"
                if depth == 0 && is_ident(next) && tokens.get(i + 2).is_some_and(|t| t == ";") =>
            {
                facts.children.push(next.to_string());
                facts.defines.insert(next.to_string());
            }
            "fn" | "struct" | "enum" | "union" | "trait" | "type" | "const" | "static" | "mod"
                if depth == 0 && is_ident(next) && !["fn", "mut", "_"].contains(&next) =>
            {
                facts.defines.insert(next.to_string());
            }
            "macro_rules" if next == "!" => {
                if let Some(name) = tokens.get(i + 2) {
                    facts.defines.insert(name.clone());
                }
            }
            _ if is_ident(t) && next == "::" && prev != "::" => {
                let mut path = vec![t.to_string()];
                let mut j = i + 1;
                while tokens.get(j).is_some_and(|t| t == "::")
                    && tokens.get(j + 1).is_some_and(|t| is_ident(t))
                {
                    path.push(tokens[j + 1].clone());
                    j += 2;
                }
                facts.paths.push(path);
                i = j;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    facts
}

/// The files of a crate from its root file, by module path (`[]` is the root).
struct CrateFiles {
    dir: std::path::PathBuf,
    files: BTreeMap<Vec<String>, (std::path::PathBuf, FileFacts)>,
}

impl CrateFiles {
    fn read(root: &Path) -> CrateFiles {
        let dir = root
            .parent()
            .expect("a crate root in a directory")
            .to_path_buf();
        let mut files = BTreeMap::new();
        let mut todo = vec![(Vec::<String>::new(), root.to_path_buf())];
        while let Some((module, file)) = todo.pop() {
            let source = std::fs::read_to_string(&file)
                .unwrap_or_else(|e| panic!("reading {}: {e}", file.display()));
            let facts = file_facts(&source);
            // Children of `a.rs` live in `a/`; of `mod.rs`, `lib.rs`, `main.rs` next to them.
            let stem = file.file_stem().and_then(|s| s.to_str()).unwrap_or("");
            let base = if module.is_empty() || stem == "mod" {
                file.parent().unwrap().to_path_buf()
            } else {
                file.parent().unwrap().join(stem)
            };
            for child in &facts.children {
                let flat = base.join(format!("{child}.rs"));
                let nested = base.join(child).join("mod.rs");
                let path = if flat.exists() { flat } else { nested };
                let mut m = module.clone();
                m.push(child.clone());
                todo.push((m, path));
            }
            files.insert(module, (file, facts));
        }
        CrateFiles { dir, files }
    }

    fn name(&self, module: &[String]) -> String {
        let file = &self.files[module].0;
        file.strip_prefix(&self.dir)
            .unwrap_or(file)
            .to_string_lossy()
            .into_owned()
    }

    /// The module a path's first segment starts from, seen from `module`, and the rest of it;
    /// `None` for a path outside the crate (std, a dependency, a local type).
    fn start<'p>(
        &self,
        module: &[String],
        path: &'p [String],
    ) -> Option<(Vec<String>, &'p [String])> {
        let (first, rest) = path.split_first()?;
        match first.as_str() {
            "crate" => Some((Vec::new(), rest)),
            "self" => Some((module.to_vec(), rest)),
            "super" => {
                let mut base = module[..module.len().saturating_sub(1)].to_vec();
                let mut rest = rest;
                while let Some(("super", more)) = rest.split_first().map(|(s, m)| (s.as_str(), m)) {
                    base.pop();
                    rest = more;
                }
                Some((base, rest))
            }
            name if self.files[module].1.children.iter().any(|c| c == name) => {
                let mut base = module.to_vec();
                base.push(name.to_string());
                Some((base, rest))
            }
            _ => None,
        }
    }

    /// The file that defines what `path` names, seen from `module`.
    fn resolve(&self, module: &[String], path: &[String], hops: usize) -> Option<Vec<String>> {
        let (mut at, rest) = self.start(module, path)?;
        let mut rest = rest.iter();
        let item = loop {
            match rest.next() {
                Some(seg) if self.files[&at].1.children.contains(seg) => at.push(seg.clone()),
                Some(seg) => break Some(seg.clone()),
                None => break None,
            }
            if !self.files.contains_key(&at) {
                at.pop();
                break None;
            }
        };
        let Some(item) = item else {
            return Some(at);
        };
        let facts = &self.files[&at].1;
        if facts.defines.contains(&item) || hops > 8 {
            return Some(at);
        }
        // A `pub use` of that name: the file it comes from.
        let reexport = facts
            .uses
            .iter()
            .find(|(leaf, public)| *public && leaf.name == item)
            .map(|(leaf, _)| leaf.path.clone());
        match reexport {
            Some(target) => self.resolve(&at, &target, hops + 1).or(Some(at)),
            None => Some(at),
        }
    }

    /// file -> the other files it imports from.
    fn graph(&self) -> BTreeMap<String, BTreeSet<String>> {
        let mut graph = BTreeMap::new();
        for (module, (_, facts)) in &self.files {
            let from = self.name(module);
            let imports: &mut BTreeSet<String> = graph.entry(from.clone()).or_default();
            let named = facts
                .uses
                .iter()
                .map(|(leaf, _)| &leaf.path)
                .chain(facts.paths.iter());
            for path in named {
                if let Some(target) = self.resolve(module, path, 0) {
                    let to = self.name(&target);
                    if to != from {
                        imports.insert(to);
                    }
                }
            }
        }
        graph
    }
}

/// The strongly connected components of more than one file: each is a set of files that import
/// each other, directly or around a circle.
fn import_circles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    // Tarjan's algorithm.
    struct State<'g> {
        graph: &'g BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'g str, usize>,
        low: BTreeMap<&'g str, usize>,
        stack: Vec<&'g str>,
        on_stack: BTreeSet<&'g str>,
        circles: Vec<Vec<String>>,
    }
    fn visit<'g>(s: &mut State<'g>, v: &'g str) {
        let n = s.index.len();
        s.index.insert(v, n);
        s.low.insert(v, n);
        s.stack.push(v);
        s.on_stack.insert(v);
        for w in s.graph.get(v).into_iter().flatten() {
            let w = w.as_str();
            if !s.graph.contains_key(w) {
                continue;
            }
            if !s.index.contains_key(w) {
                visit(s, w);
                let low = s.low[v].min(s.low[w]);
                s.low.insert(v, low);
            } else if s.on_stack.contains(w) {
                let low = s.low[v].min(s.index[w]);
                s.low.insert(v, low);
            }
        }
        if s.low[v] == s.index[v] {
            let mut component = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                component.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort();
                s.circles.push(component);
            }
        }
    }
    let mut s = State {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        circles: Vec::new(),
    };
    for v in graph.keys() {
        if !s.index.contains_key(v.as_str()) {
            visit(&mut s, v);
        }
    }
    s.circles.sort();
    s.circles
}

/// Each circle with the imports that close it (edges inside it), for the failure message.
fn describe_circles(graph: &BTreeMap<String, BTreeSet<String>>, circles: &[Vec<String>]) -> String {
    let mut text = String::new();
    for circle in circles {
        text.push_str(&format!(
            "\n{} files: {}\n",
            circle.len(),
            circle.join(", ")
        ));
        for from in circle {
            let inside: Vec<&str> = graph[from]
                .iter()
                .filter(|t| circle.contains(t))
                .map(String::as_str)
                .collect();
            text.push_str(&format!("  {from} -> {}\n", inside.join(", ")));
        }
    }
    text
}

/// Checks a crate's files for import circles; prints the layers when there is none.
fn assert_no_file_level_cycle(root: &Path, at_least: usize) {
    let graph = CrateFiles::read(root).graph();
    assert!(
        graph.len() >= at_least,
        "found only {} files from {}",
        graph.len(),
        root.display()
    );
    let circles = import_circles(&graph);
    assert!(
        circles.is_empty(),
        "files of {} importing each other around a circle:{}",
        root.display(),
        describe_circles(&graph, &circles)
    );
    let order = layers(&graph).expect("no circle, so an order");
    println!(
        "{} files, each importing only earlier ones: {}",
        order.len(),
        order.join(" < ")
    );
}

#[test]
fn the_files_of_the_load_test_import_each_other_without_a_cycle() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("loadtest/src/main.rs");
    assert_no_file_level_cycle(&root, 30);
}

/// The same check for `src/`: no file imports a file that imports it back, inside a module
/// as between modules (a parent `mod.rs` whose children use its types while it calls them was
/// the last kind of circle).
#[test]
fn the_files_of_src_import_each_other_without_a_cycle() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs");
    assert_no_file_level_cycle(&root, 80);
}

#[test]
fn the_file_reader_places_each_path_in_the_file_that_defines_it() {
    let dir = std::env::temp_dir().join(format!("kr-file-graph-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("a")).unwrap();
    std::fs::create_dir_all(dir.join("b")).unwrap();
    let write = |p: &str, s: &str| std::fs::write(dir.join(p), s).unwrap();
    write(
        "main.rs",
        "mod a;\nmod b;\nmod c;\npub use c::Shared;\npub fn log() {}\nfn main() { a::run(); }\n",
    );
    // a/mod.rs re-exports its child's type and names a sibling through super.
    write(
        "a/mod.rs",
        "mod inner;\npub use inner::Thing;\npub fn run() { let _ = super::b::low(); }\n",
    );
    write(
        "a/inner.rs",
        "// crate::b::low in a comment\nuse crate::{log, Shared as S};\npub struct Thing;\n\
         fn f() { let _ = \"crate::c::x\"; let _ = '\"'; }\n",
    );
    // b.rs: a test module's imports are not the file's.
    write(
        "b.rs",
        "mod deep;\npub fn low() { self::deep::d(); }\n#[cfg(test)]\nmod tests {\n use crate::a::Thing;\n}\n\
         #[cfg(test)]\nmod fixtures;\n",
    );
    write("b/deep.rs", "pub fn d() { let _ = crate::a::Thing; }\n");
    write("c.rs", "pub struct Shared;\n");
    let files = CrateFiles::read(&dir.join("main.rs"));
    let graph = files.graph();
    std::fs::remove_dir_all(&dir).unwrap();
    let set = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
    assert_eq!(graph["main.rs"], set(&["a/mod.rs", "c.rs"]));
    assert_eq!(graph["a/mod.rs"], set(&["a/inner.rs", "b.rs"]));
    // crate::log is main.rs's; crate::Shared is re-exported there from c.rs.
    assert_eq!(graph["a/inner.rs"], set(&["main.rs", "c.rs"]));
    assert_eq!(graph["b.rs"], set(&["b/deep.rs"]));
    // crate::a::Thing: a/mod.rs re-exports it from a/inner.rs.
    assert_eq!(graph["b/deep.rs"], set(&["a/inner.rs"]));
    assert_eq!(graph.len(), 6, "b/fixtures.rs is declared for tests only");
    // main -> a/mod -> b -> b/deep -> a/inner -> main: one circle of five.
    let circle: Vec<String> = ["a/inner.rs", "a/mod.rs", "b.rs", "b/deep.rs", "main.rs"]
        .map(String::from)
        .to_vec();
    assert_eq!(import_circles(&graph), vec![circle]);
    let mut acyclic = graph.clone();
    acyclic.get_mut("a/inner.rs").unwrap().clear();
    assert!(import_circles(&acyclic).is_empty());
    assert!(layers(&acyclic).is_ok());
}

/// `pub mod m;` beside `pub use m::X;` gives X two paths (`parent::X` and `parent::m::X`), and
/// readers meet both (issue 44). A parent re-exports from a private child, or keeps the child
/// public and re-exports nothing from it.
fn modules_public_and_re_exported(source: &str) -> Vec<String> {
    let code = production_code(source);
    let public: Vec<&str> = code
        .lines()
        .filter_map(|l| l.trim().strip_prefix("pub mod "))
        .filter_map(|rest| rest.strip_suffix(';'))
        .collect();
    public
        .into_iter()
        .filter(|m| {
            code.lines().any(|l| {
                let l = l.trim();
                l.starts_with(&format!("pub use {m}::"))
                    || l.starts_with(&format!("pub use self::{m}::"))
            })
        })
        .map(str::to_string)
        .collect()
}

#[test]
fn no_item_has_a_second_path_through_a_public_child_module() {
    let mut files = Vec::new();
    rust_files(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        &mut files,
    );
    let found: Vec<String> = files
        .iter()
        .flat_map(|f| {
            let source = std::fs::read_to_string(f).expect("reading a file of src/");
            modules_public_and_re_exported(&source)
                .into_iter()
                .map(move |m| format!("{}: pub mod {m} and pub use {m}::", f.display()))
        })
        .collect();
    assert!(
        found.is_empty(),
        "public modules whose items the parent also re-exports:\n{}",
        found.join("\n")
    );
    assert_eq!(
        modules_public_and_re_exported("pub mod a;\nmod b;\npub use a::X;\npub use b::Y;\n"),
        vec!["a".to_string()],
        "the reader finds a public child that is re-exported"
    );
}
