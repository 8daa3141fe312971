//! A chaos campaign in one table: reads the result files (`.json`) of several `chaos` runs (one
//! per seed, `make chaos SEEDS="..."`) and writes markdown: each run's verdict and reload
//! latency, then per fault kind across the runs, how many were carried out, the reload latency
//! of the namespaces each fault did not touch while it lasted, and the longest takeover.
//!
//! ```sh
//! $CARGO_TARGET_DIR/release/kube-reloader-chaos-summary loadtest/results/<scenario>-<scale>-*<commit>.json
//! ```
//!
//! Per run, a kind's figures are pooled over its faults by the run itself (`impact_by_kind`);
//! across runs the table gives the median of the runs' p50 and the worst of their p99, and the
//! reloads they count.
//!
//! Control runs (`--chaos-control`: the same seeds with no fault carried out, each recorded
//! over its planned window) given among the files are set beside the fault runs: overall
//! p50/p90/p99, and per kind the untouched namespaces' p50/p99 over the same windows, with
//! issue 43's goal (untouched p99 <= max(1 s, 2 x the control's)).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::Parser;
use serde_json::Value;

#[derive(Parser)]
#[command(about = "Summarizes the result files of chaos runs as markdown")]
struct Args {
    /// Result files of `--scenario chaos` runs (`.json`).
    #[arg(required = true)]
    results: Vec<PathBuf>,
}

/// One run's verdict.
#[derive(Debug, Clone, PartialEq)]
struct Run {
    name: String,
    seed: Option<u64>,
    missed: u64,
    duplicate: u64,
    stale: u64,
    unexpected: u64,
    reloads: u64,
    p50_ms: Option<f64>,
    p90_ms: Option<f64>,
    p99_ms: Option<f64>,
    /// The reloads no fault touched (`touch_split` in the result): their p50, p90, p99.
    untouched: [Option<f64>; 3],
    /// The share of the reloads a fault touched.
    touched_share: Option<f64>,
    faults: u64,
    faults_failed: u64,
    /// A `--chaos-control` run: nothing was carried out.
    control: bool,
}

impl Run {
    fn clean(&self) -> bool {
        self.missed + self.duplicate + self.stale + self.unexpected == 0 && self.faults_failed == 0
    }
}

/// One fault kind in one run.
#[derive(Debug, Clone, PartialEq)]
struct KindImpact {
    faults: u64,
    takeover_max_s: Option<f64>,
    p50_ms: Option<f64>,
    p99_ms: Option<f64>,
    reloads: u64,
}

fn run_of(name: &str, report: &Value) -> Run {
    let chaos = &report["notes"]["chaos"];
    let correctness = &report["correctness"];
    let split = &chaos["touch_split"];
    let count = |v: &Value| v.as_u64().unwrap_or(0);
    let failed = match &chaos["faults_failed"] {
        Value::Array(a) => a.len() as u64,
        other => count(other),
    };
    Run {
        name: name.to_string(),
        seed: report["run"]["seed"].as_u64(),
        missed: count(&correctness["missing"]),
        duplicate: count(&correctness["duplicates"]),
        stale: count(&correctness["stale"]),
        unexpected: count(&correctness["unexpected"]),
        reloads: count(&correctness["reloaded"]),
        p50_ms: report["latency_ms"]["p50_ms"].as_f64(),
        p90_ms: report["latency_ms"]["p90_ms"].as_f64(),
        p99_ms: report["latency_ms"]["p99_ms"].as_f64(),
        untouched: ["p50_ms", "p90_ms", "p99_ms"].map(|p| split["untouched"][p].as_f64()),
        touched_share: touched_share(split),
        faults: chaos["fault_log"].as_array().map_or(0, |a| a.len() as u64),
        faults_failed: failed,
        control: chaos["settings"]["control"].as_bool().unwrap_or(false),
    }
}

fn touched_share(split: &Value) -> Option<f64> {
    let touched = split["touched"]["reloads"].as_f64()?;
    let all = touched + split["untouched"]["reloads"].as_f64()?;
    (all > 0.0).then(|| touched / all)
}

fn kinds_of(report: &Value) -> BTreeMap<String, KindImpact> {
    let Some(kinds) = report["notes"]["chaos"]["impact_by_kind"].as_object() else {
        return BTreeMap::new();
    };
    kinds
        .iter()
        .map(|(kind, v)| {
            let impact = KindImpact {
                faults: v["faults"].as_u64().unwrap_or(0),
                takeover_max_s: v["takeover_max_s"].as_f64(),
                p50_ms: v["untouched_p50_ms"].as_f64(),
                p99_ms: v["untouched_p99_ms"].as_f64(),
                reloads: v["untouched_reloads"].as_u64().unwrap_or(0),
            };
            (kind.clone(), impact)
        })
        .collect()
}

/// A kind across the runs: faults and reloads summed, the median of the p50s, the worst p99
/// and takeover.
fn across(runs: &[&KindImpact]) -> KindImpact {
    KindImpact {
        faults: runs.iter().map(|k| k.faults).sum(),
        takeover_max_s: worst(runs.iter().map(|k| k.takeover_max_s)),
        p50_ms: median(runs.iter().map(|k| k.p50_ms)),
        p99_ms: worst(runs.iter().map(|k| k.p99_ms)),
        reloads: runs.iter().map(|k| k.reloads).sum(),
    }
}

fn ms(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.0} ms"))
}

/// The median of the runs' values.
fn median(values: impl Iterator<Item = Option<f64>>) -> Option<f64> {
    let mut v: Vec<f64> = values.flatten().collect();
    v.sort_by(f64::total_cmp);
    (!v.is_empty()).then(|| v[v.len() / 2])
}

/// The worst of the runs' values.
fn worst(values: impl Iterator<Item = Option<f64>>) -> Option<f64> {
    values.flatten().reduce(f64::max)
}

/// Issue 43's goal for a kind: untouched p99 <= max(1 s, 2 x the control's p99).
fn within_goal(fault_p99: Option<f64>, control_p99: Option<f64>) -> &'static str {
    match (fault_p99, control_p99) {
        (Some(f), Some(c)) if f <= (2.0 * c).max(1000.0) => "yes",
        (Some(_), Some(_)) => "no",
        _ => "-",
    }
}

/// The fault runs beside the control runs: overall, then per kind.
fn against_control(
    runs: &[Run],
    kinds: &[BTreeMap<String, KindImpact>],
    controls: &[Run],
    control_kinds: &[BTreeMap<String, KindImpact>],
) -> String {
    let mut out = format!(
        "\nAgainst the control runs ({} fault runs, {} control runs; median of the runs' p50 and p90, worst p99):\n\n",
        runs.len(),
        controls.len()
    );
    out += "| runs | p50 | p90 | p99 |\n|---|---|---|---|\n";
    for (label, set) in [("with faults", runs), ("control", controls)] {
        out += &format!(
            "| {label} | {} | {} | {} |\n",
            ms(median(set.iter().map(|r| r.p50_ms))),
            ms(median(set.iter().map(|r| r.p90_ms))),
            ms(worst(set.iter().map(|r| r.p99_ms)))
        );
    }
    if let Some(share) = median(runs.iter().map(|r| r.touched_share)) {
        out += &format!(
            "| with faults, the reloads no fault touched | {} | {} | {} |\n",
            ms(median(runs.iter().map(|r| r.untouched[0]))),
            ms(median(runs.iter().map(|r| r.untouched[1]))),
            ms(worst(runs.iter().map(|r| r.untouched[2])))
        );
        out += &format!(
            "\nA fault touched {:.1}% of the reloads (median of the runs): above 10%, the overall \
             p90 is a touched reload's.\n",
            share * 100.0
        );
    }
    out += "\nPer fault kind, the untouched namespaces over the same windows:\n\n";
    out += "| fault | p50 | p99 | control p50 | control p99 | p99 <= max(1 s, 2 x control) |\n";
    out += "|---|---|---|---|---|---|\n";
    let names: std::collections::BTreeSet<&String> = kinds.iter().flat_map(|k| k.keys()).collect();
    for name in names {
        let of = |set: &[BTreeMap<String, KindImpact>]| {
            across(&set.iter().filter_map(|k| k.get(name)).collect::<Vec<_>>())
        };
        let (f, c) = (of(kinds), of(control_kinds));
        out += &format!(
            "| {name} | {} | {} | {} | {} | {} |\n",
            ms(f.p50_ms),
            ms(f.p99_ms),
            ms(c.p50_ms),
            ms(c.p99_ms),
            within_goal(f.p99_ms, c.p99_ms)
        );
    }
    out
}

fn markdown(runs: &[Run], kinds: &[BTreeMap<String, KindImpact>]) -> String {
    let clean = runs.iter().filter(|r| r.clean()).count();
    let mut out = format!(
        "{clean} of {} runs clean (0 missed, duplicate, stale, unexpected; every fault carried out)\n\n",
        runs.len()
    );
    out += "| run | seed | missed | duplicate | stale | unexpected | faults (failed) | reloads | p50 | p99 |\n";
    out += "|---|---|---|---|---|---|---|---|---|---|\n";
    for r in runs {
        let seed = r.seed.map_or("-".into(), |s| s.to_string());
        out += &format!(
            "| {} | {seed} | {} | {} | {} | {} | {} ({}) | {} | {} | {} |\n",
            r.name,
            r.missed,
            r.duplicate,
            r.stale,
            r.unexpected,
            r.faults,
            r.faults_failed,
            r.reloads,
            ms(r.p50_ms),
            ms(r.p99_ms)
        );
    }
    out += "\nPer fault kind, reloads of the namespaces the fault did not touch while it lasted \
            (median of the runs' p50, worst p99), and the longest takeover:\n\n";
    out += "| fault | carried out | untouched reloads | p50 | p99 | longest takeover |\n";
    out += "|---|---|---|---|---|---|\n";
    let names: std::collections::BTreeSet<&String> = kinds.iter().flat_map(|k| k.keys()).collect();
    for name in names {
        let per_run: Vec<&KindImpact> = kinds.iter().filter_map(|k| k.get(name)).collect();
        let k = across(&per_run);
        let takeover = k.takeover_max_s.map_or("-".into(), |s| format!("{s:.2} s"));
        out += &format!(
            "| {name} | {} | {} | {} | {} | {takeover} |\n",
            k.faults,
            k.reloads,
            ms(k.p50_ms),
            ms(k.p99_ms)
        );
    }
    out
}

fn read(path: &Path) -> Result<Value> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))
}

fn main() -> Result<()> {
    let args = Args::parse();
    let mut runs = Vec::new();
    let mut kinds = Vec::new();
    let (mut controls, mut control_kinds) = (Vec::new(), Vec::new());
    for path in &args.results {
        let report = read(path)?;
        let name = path.file_stem().and_then(|s| s.to_str()).unwrap_or("?");
        let run = run_of(name, &report);
        match run.control {
            true => {
                controls.push(run);
                control_kinds.push(kinds_of(&report));
            }
            false => {
                runs.push(run);
                kinds.push(kinds_of(&report));
            }
        }
    }
    print!("{}", markdown(&runs, &kinds));
    if !controls.is_empty() {
        print!(
            "{}",
            against_control(&runs, &kinds, &controls, &control_kinds)
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn report(missed: u64, p99: f64, takeover: Option<f64>) -> Value {
        json!({
            "run": {"seed": 25},
            "correctness": {"missing": missed, "duplicates": 0, "stale": 0, "unexpected": 0,
                            "reloaded": 100},
            "latency_ms": {"p50_ms": 300.0, "p99_ms": 900.0},
            "notes": {"chaos": {
                "fault_log": [{}, {}],
                "faults_failed": [],
                "impact_by_kind": {"kill": {"faults": 2, "takeover_max_s": takeover,
                    "untouched_p50_ms": 100.0, "untouched_p99_ms": p99, "untouched_reloads": 40}}
            }}
        })
    }

    #[test]
    fn a_run_with_a_missed_reload_is_not_clean() {
        assert!(run_of("a", &report(0, 1.0, None)).clean());
        assert!(!run_of("b", &report(1, 1.0, None)).clean());
    }

    #[test]
    fn across_runs_faults_add_up_and_the_worst_p99_and_takeover_count() {
        let a = kinds_of(&report(0, 500.0, Some(0.2)));
        let b = kinds_of(&report(0, 2000.0, None));
        let k = across(&[&a["kill"], &b["kill"]]);
        assert_eq!(k.faults, 4);
        assert_eq!(k.reloads, 80);
        assert_eq!(k.p99_ms, Some(2000.0));
        assert_eq!(k.takeover_max_s, Some(0.2));
        assert_eq!(k.p50_ms, Some(100.0));
    }

    fn control(p99: f64) -> Value {
        let mut r = report(0, p99, None);
        r["notes"]["chaos"]["settings"] = json!({"control": true});
        r["latency_ms"] = json!({"p50_ms": 50.0, "p90_ms": 80.0, "p99_ms": 300.0});
        r
    }

    /// One fault run beside one control run.
    fn beside(faulty: &Value, control: &Value) -> String {
        against_control(
            &[run_of("a", faulty)],
            &[kinds_of(faulty)],
            &[run_of("c", control)],
            &[kinds_of(control)],
        )
    }

    #[test]
    fn control_runs_are_set_beside_the_fault_runs_with_the_goal() {
        let c = control(400.0);
        assert!(run_of("c", &c).control);
        assert!(!run_of("a", &report(0, 1.0, None)).control);
        let mut faulty = report(0, 900.0, None);
        faulty["latency_ms"]["p90_ms"] = json!(700.0);
        let text = beside(&faulty, &c);
        assert!(
            text.contains("| with faults | 300 ms | 700 ms | 900 ms |"),
            "{text}"
        );
        assert!(
            text.contains("| control | 50 ms | 80 ms | 300 ms |"),
            "{text}"
        );
        // 900 ms is within max(1 s, 2 x 400 ms).
        assert!(
            text.contains("| kill | 100 ms | 900 ms | 100 ms | 400 ms | yes |"),
            "{text}"
        );
        assert!(
            !text.contains("no fault touched"),
            "no split in these results: {text}"
        );
        assert_eq!(within_goal(Some(2500.0), Some(1200.0)), "no");
        assert_eq!(within_goal(Some(2400.0), Some(1200.0)), "yes");
        assert_eq!(within_goal(Some(900.0), None), "-");
    }

    #[test]
    fn the_reloads_no_fault_touched_are_set_beside_the_control_with_the_share_touched() {
        let mut faulty = report(0, 900.0, None);
        faulty["notes"]["chaos"]["touch_split"] = json!({
            "touched": {"reloads": 15, "p90_ms": 4000.0},
            "untouched": {"reloads": 85, "p50_ms": 40.0, "p90_ms": 90.0, "p99_ms": 600.0}
        });
        let text = beside(&faulty, &control(400.0));
        assert!(
            text.contains("| with faults, the reloads no fault touched | 40 ms | 90 ms | 600 ms |"),
            "{text}"
        );
        assert!(
            text.contains("A fault touched 15.0% of the reloads"),
            "{text}"
        );
    }

    #[test]
    fn the_table_says_how_many_runs_were_clean() {
        let runs = [
            run_of("a", &report(0, 1.0, None)),
            run_of("b", &report(2, 1.0, None)),
        ];
        let text = markdown(&runs, &[]);
        assert!(text.starts_with("1 of 2 runs clean"), "{text}");
        assert!(
            text.contains("| b | 25 | 2 | 0 | 0 | 0 | 2 (0) | 100 | 300 ms | 900 ms |"),
            "{text}"
        );
    }
}
