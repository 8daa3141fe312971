//! `loadtest/results/` holds the runs the documentation reports, and the documentation names
//! only runs that are there: every result file is named in a document, every result a document
//! names exists, and every relative link of a document resolves. Pure file I/O, no cluster.
//!
//! A result is named by its stem (`steady-medium-9d4fb6e`) or file name, anywhere in the text.
//! A name of a result no longer in the tree (a superseded run) is cited from git history, as
//! `git show <commit>:loadtest/results/<file>`, which this check leaves alone.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const SCALES: [&str; 3] = ["small", "medium", "large"];
const RESULT_EXTENSIONS: [&str; 3] = ["json", "md", "svg"];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("loadtest/ is inside the repository")
        .to_path_buf()
}

/// The documents: README.md, docs/*.md, loadtest/README.md, loadtest/kind/README.md.
fn documents() -> BTreeMap<PathBuf, String> {
    let root = repo();
    let mut paths = vec![
        root.join("README.md"),
        root.join("loadtest/README.md"),
        root.join("loadtest/kind/README.md"),
    ];
    for e in std::fs::read_dir(root.join("docs")).expect("docs/") {
        let p = e.expect("docs/ entry").path();
        if p.extension().is_some_and(|x| x == "md") {
            paths.push(p);
        }
    }
    paths
        .into_iter()
        .filter(|p| p.exists())
        .map(|p| {
            let text = std::fs::read_to_string(&p).expect("a readable document");
            (p, text)
        })
        .collect()
}

/// Result file stems in loadtest/results (controller logs and metrics are not committed).
fn result_stems() -> BTreeSet<String> {
    let dir = repo().join("loadtest/results");
    std::fs::read_dir(&dir)
        .expect("loadtest/results")
        .map(|e| e.expect("results entry").path())
        .filter(|p| {
            p.extension()
                .is_some_and(|x| RESULT_EXTENSIONS.iter().any(|e| x == *e))
        })
        .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
        .collect()
}

/// Words of a text as far as a file path goes; `git show <rev>:<path>` and URLs (with `:`)
/// are left out.
fn tokens(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || "._/:-".contains(c)))
        .filter(|t| !t.contains(':'))
        .map(|t| t.trim_end_matches('.'))
        .filter(|t| !t.is_empty())
}

/// The stem a token names if it is a result name (`<scenario>-<scale>-<more>`, with or
/// without a directory and an extension).
fn result_reference(token: &str) -> Option<&str> {
    let name = token.rsplit('/').next()?;
    let stem = RESULT_EXTENSIONS
        .iter()
        .find_map(|e| name.strip_suffix(&format!(".{e}")))
        .unwrap_or(name);
    let (scenario, rest) = SCALES
        .iter()
        .find_map(|s| stem.split_once(&format!("-{s}-")))?;
    let scenario_like = scenario.starts_with(|c: char| c.is_ascii_lowercase())
        && scenario.chars().all(|c| c.is_ascii_lowercase() || c == '-');
    (scenario_like && !rest.is_empty()).then_some(stem)
}

#[test]
fn every_result_is_named_in_a_document() {
    let docs = documents();
    let named: BTreeSet<&str> = docs
        .values()
        .flat_map(|t| tokens(t))
        .map(|t| t.rsplit('/').next().unwrap_or(t))
        .flat_map(|t| {
            let stem = RESULT_EXTENSIONS
                .iter()
                .find_map(|e| t.strip_suffix(&format!(".{e}")));
            [Some(t), stem].into_iter().flatten()
        })
        .collect();
    let unnamed: Vec<String> = result_stems()
        .into_iter()
        .filter(|s| !named.contains(s.as_str()))
        .collect();
    assert!(
        unnamed.is_empty(),
        "loadtest/results files no document names (say what they show in docs/performance.md, \
         docs/multi-tenancy.md, docs/sharding.md or loadtest/README.md, or git rm them): {unnamed:?}"
    );
}

#[test]
fn every_result_a_document_names_exists() {
    let stems = result_stems();
    let mut missing = BTreeSet::new();
    for (path, text) in documents() {
        for t in tokens(&text) {
            let exists = match result_reference(t) {
                Some(stem) => stems.contains(stem),
                // A file under loadtest/results (a directory named as a place to write to is not).
                None if t.contains("loadtest/results/") && !t.ends_with('/') => {
                    let rel = &t[t.find("loadtest/results/").unwrap()..];
                    repo().join(rel).exists()
                }
                None => true,
            };
            if !exists {
                missing.insert(format!("{}: {t}", path.display()));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "documents name results that are not in loadtest/results (rename the reference, or cite \
         git history as `git show <commit>:loadtest/results/<file>`): {missing:#?}"
    );
}

#[test]
fn every_relative_link_of_a_document_resolves() {
    let mut broken = Vec::new();
    for (path, text) in documents() {
        for link in text.split("](").skip(1) {
            let Some(target) = link.split(')').next() else {
                continue;
            };
            let target = target.split('#').next().unwrap_or("").trim();
            if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let dir = path.parent().expect("a document in a directory");
            if !dir.join(target).exists() {
                broken.push(format!("{}: {target}", path.display()));
            }
        }
    }
    assert!(broken.is_empty(), "broken links: {broken:#?}");
}

#[test]
fn result_names_are_recognised() {
    assert_eq!(
        result_reference("../loadtest/results/steady-small-01224d8.svg"),
        Some("steady-small-01224d8")
    );
    assert_eq!(
        result_reference("noisy-neighbour-small-tenants-ed533b8"),
        Some("noisy-neighbour-small-tenants-ed533b8")
    );
    assert_eq!(
        result_reference("steady-small"),
        None,
        "a scenario and scale"
    );
    assert_eq!(result_reference("--scale-small-x"), None);
    let t: Vec<&str> =
        tokens("see `git show 1a2b3c4:loadtest/results/x-small-1.md`, and y-small-2.").collect();
    assert_eq!(t, ["see", "git", "show", "and", "y-small-2"]);
}
