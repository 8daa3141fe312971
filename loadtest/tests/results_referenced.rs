//! `loadtest/results/` holds the runs the documentation reports, and the documentation names
//! only runs that are there: every result file is named in a document, every result a document
//! names exists, and every relative link of a document resolves. Pure file I/O, no cluster.
//!
//! A result is named by its stem (`steady-medium-9d4fb6e`) or file name, anywhere in the text.
//! A result no longer in the tree (a superseded run) has a row in `loadtest/results/HISTORY.md`
//! (its figures, commit, command, and the `git show` that brings it back); a page may name it
//! then. A page may also cite a file from git history as `git show <commit>:loadtest/results/<file>`,
//! which this check leaves alone. What stays in the tree is the latest run of each scenario,
//! scale and variant, and an older run only while a page names it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const SCALES: [&str; 3] = ["small", "medium", "large"];
const RESULT_EXTENSIONS: [&str; 3] = ["json", "md", "svg"];
/// The table of removed runs, in loadtest/results (not a run itself).
const HISTORY: &str = "HISTORY.md";
/// Its columns, in this order.
const HISTORY_COLUMNS: [&str; 16] = [
    "run",
    "scenario",
    "scale",
    "variant",
    "commit",
    "date",
    "verdict",
    "missed / duplicate / stale (checker) / unexpected (ledger)",
    "reloads seen / expected",
    "reload p50 / p99 ms",
    "RSS peak MiB",
    "CPU-s",
    "API requests startup / change phase",
    "faults carried out / planned (failed)",
    "command",
    "files",
];

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
                && !p.ends_with(HISTORY)
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

/// Every file name and stem the documents name (`loadtest/results/x-small-1.json` names
/// `x-small-1.json` and `x-small-1`).
fn named_in_documents() -> BTreeSet<String> {
    documents()
        .values()
        .flat_map(|t| tokens(t).map(str::to_string).collect::<Vec<_>>())
        .map(|t| t.rsplit('/').next().unwrap_or(&t).to_string())
        .flat_map(|t| {
            let stem = RESULT_EXTENSIONS
                .iter()
                .find_map(|e| t.strip_suffix(&format!(".{e}")))
                .map(str::to_string);
            [Some(t), stem].into_iter().flatten()
        })
        .collect()
}

/// The cells of each row of HISTORY.md's table, after checking its header.
fn history_rows() -> Vec<Vec<String>> {
    let path = repo().join("loadtest/results").join(HISTORY);
    let text = std::fs::read_to_string(&path).expect("loadtest/results/HISTORY.md");
    let cells = |line: &str| -> Vec<String> {
        line.trim()
            .trim_start_matches('|')
            .trim_end_matches('|')
            .split('|')
            .map(|c| c.trim().to_string())
            .collect()
    };
    let mut lines = text.lines().filter(|l| l.trim_start().starts_with('|'));
    let header = cells(lines.next().expect("HISTORY.md has a table"));
    assert_eq!(header, HISTORY_COLUMNS, "HISTORY.md's columns");
    let rule = cells(lines.next().expect("the table's rule line"));
    assert!(
        rule.len() == HISTORY_COLUMNS.len() && rule.iter().all(|c| c == "---"),
        "HISTORY.md: the line under the header is |---|... : {rule:?}"
    );
    lines.map(cells).collect()
}

/// The stem a HISTORY.md row is about (its first cell, in backticks).
fn history_stem(row: &[String]) -> &str {
    row[0].trim_matches('`')
}

/// A result's scenario, scale and variant: its stem without the commit (`<7 hex>[-dirty]` or
/// `build-<7 hex>`). A controller label stays: another controller is another family.
fn family(stem: &str) -> String {
    let is_commit = |w: &str| {
        w.len() == 7
            && w.chars()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
            && w.chars().any(|c| c.is_ascii_digit())
    };
    let words: Vec<&str> = stem.split('-').collect();
    let mut kept = Vec::new();
    let mut i = 0;
    while i < words.len() {
        if is_commit(words[i]) {
            i += 1 + usize::from(words.get(i + 1) == Some(&"dirty"));
            continue;
        }
        if words[i] == "build" && words.get(i + 1).is_some_and(|w| is_commit(w)) {
            i += 2;
            continue;
        }
        kept.push(words[i]);
        i += 1;
    }
    kept.join("-")
}

/// When the run started (`run.unix_time` of its `.json`), for runs that record it.
fn run_time(stem: &str) -> Option<u64> {
    let path = repo().join(format!("loadtest/results/{stem}.json"));
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()?;
    json.pointer("/run/unix_time")?.as_u64()
}

#[test]
fn every_result_is_named_in_a_document() {
    let named = named_in_documents();
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
    let removed: BTreeSet<String> = history_rows()
        .iter()
        .map(|r| history_stem(r).to_string())
        .collect();
    let mut missing = BTreeSet::new();
    for (path, text) in documents() {
        for t in tokens(&text) {
            let exists = match result_reference(t) {
                Some(stem) => stems.contains(stem) || removed.contains(stem),
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
        "documents name results that are not in loadtest/results and have no row in its \
         HISTORY.md (rename the reference, add the row, or cite git history as \
         `git show <commit>:loadtest/results/<file>`): {missing:#?}"
    );
}

#[test]
fn every_row_of_history_is_a_removed_run_with_its_figures() {
    let stems = result_stems();
    let rows = history_rows();
    assert!(!rows.is_empty(), "HISTORY.md lists no run");
    let mut seen = BTreeSet::new();
    let mut wrong = Vec::new();
    for row in &rows {
        if row.len() != HISTORY_COLUMNS.len() {
            wrong.push(format!(
                "{} cells, not {}: {row:?}",
                row.len(),
                HISTORY_COLUMNS.len()
            ));
            continue;
        }
        let stem = history_stem(row);
        let commit = row[4].trim_matches('`');
        let hex = commit.strip_suffix("-dirty").unwrap_or(commit);
        let date = row[5].strip_suffix(" *").unwrap_or(&row[5]);
        let date_ok = date.len() == 10
            && date.char_indices().all(|(i, c)| {
                if i == 4 || i == 7 {
                    c == '-'
                } else {
                    c.is_ascii_digit()
                }
            });
        let checks = [
            (
                result_reference(stem) == Some(stem),
                "the run is not a result name",
            ),
            (seen.insert(stem.to_string()), "a second row of the run"),
            (
                !stems.contains(stem),
                "the run is still in loadtest/results",
            ),
            (
                stem.starts_with(&format!("{}-{}-", row[1], row[2])),
                "scenario and scale are not the run's",
            ),
            (
                hex.len() == 7
                    && hex.chars().all(|c| c.is_ascii_hexdigit())
                    && stem.contains(commit),
                "the commit is not the run's",
            ),
            (date_ok, "the date is not YYYY-MM-DD"),
            (
                ["**PASS**", "**FAIL**"].contains(&row[6].as_str()),
                "the verdict is not **PASS** or **FAIL**",
            ),
            (
                row[7..14]
                    .iter()
                    .all(|c| c.chars().any(|c| c.is_ascii_digit())),
                "a figure is missing",
            ),
            (row[14].contains("make "), "no command"),
            (
                row[15].contains("git show ")
                    && row[15].contains(&format!(":loadtest/results/{stem}.json")),
                "no `git show <commit>:loadtest/results/<run>.json`",
            ),
            (
                stems.iter().any(|s| family(s) == family(stem)),
                "no run of the same scenario, scale and variant is left in the tree",
            ),
        ];
        for (ok, what) in checks {
            if !ok {
                wrong.push(format!("{stem}: {what}"));
            }
        }
    }
    assert!(wrong.is_empty(), "loadtest/results/HISTORY.md: {wrong:#?}");
}

#[test]
fn every_run_kept_is_the_latest_of_its_family_or_named_in_a_document() {
    let named = named_in_documents();
    let mut latest: BTreeMap<String, (u64, String)> = BTreeMap::new();
    let stems = result_stems();
    for stem in &stems {
        if let Some(t) = run_time(stem) {
            let entry = latest.entry(family(stem)).or_insert((t, stem.clone()));
            if t > entry.0 {
                *entry = (t, stem.clone());
            }
        }
    }
    let superseded: Vec<&String> = stems
        .iter()
        .filter(|s| run_time(s).is_some())
        .filter(|s| latest[&family(s)].1 != **s && !named.contains(s.as_str()))
        .collect();
    assert!(
        superseded.is_empty(),
        "runs a later run of their scenario, scale and variant supersedes, named in no page \
         (git rm them and add a row to loadtest/results/HISTORY.md): {superseded:?}"
    );
}

#[test]
fn a_family_is_a_result_without_its_commit() {
    assert_eq!(
        family("chaos-medium-3r-seed26-ec81f7c"),
        "chaos-medium-3r-seed26"
    );
    assert_eq!(family("chaos-medium-3r-6db9746-dirty"), "chaos-medium-3r");
    assert_eq!(
        family("sharded-medium-1r-build-159f792"),
        "sharded-medium-1r"
    );
    assert_eq!(
        family("sharded-medium-1r-1d01b06-server-side-off"),
        "sharded-medium-1r-server-side-off"
    );
    assert_eq!(
        family("steady-small-kind-binary-514eb69"),
        "steady-small-kind-binary"
    );
    assert_eq!(
        family("steady-medium-reloader-v1.4.21"),
        "steady-medium-reloader-v1.4.21"
    );
    assert_eq!(
        family("noisy-neighbour-small-tenants-369d117"),
        "noisy-neighbour-small-tenants"
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
