//! Load test for kube-reloader, or any controller that speaks Reloader's protocol: creates
//! labelled namespaces, configs and Deployments on a real API server, starts the controller from
//! a command line, drives config changes, and measures reload latency (on the load generator's
//! clock), the controller's memory, CPU and API requests, and correctness (every expected reload
//! happened once, nothing else did). See loadtest/README.md.

mod apimetrics;
mod apiserver_cpu;
mod args;
mod audit;
mod chaos;
mod churn;
mod controller;
mod ctx;
mod custom_kind;
mod drive;
mod flapping;
mod hash;
mod launch;
mod ledger;
mod markdown;
mod mixed;
mod objects;
mod outcome;
mod pause;
mod plot;
mod progress;
mod proxy;
mod quiet;
mod repo;
mod report;
mod rng;
mod run;
mod running;
mod scaling;
mod scenario;
mod setup;
mod sharded;
mod tenancy;
mod waves;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use clap::Parser;

use args::Args;
use objects::RUN_LABEL;
use progress::log;
use scenario::Scenario;

#[tokio::main]
async fn main() -> ExitCode {
    progress::start_clock();
    let args = Args::parse();
    tokio::select! {
        r = run(args) => match r {
            Ok(true) => ExitCode::SUCCESS,
            Ok(false) => ExitCode::from(1),
            Err(e) => {
                log(&format!("ERROR: {e:#}"));
                ExitCode::from(2)
            }
        },
        _ = tokio::signal::ctrl_c() => {
            log("interrupted; the controller is stopped, namespaces are left (run with --cleanup)");
            ExitCode::from(130)
        }
    }
}

fn last_line_of(cmd: &mut std::process::Command, what: &str) -> Result<String> {
    let out = cmd
        .stderr(std::process::Stdio::inherit())
        .output()
        .with_context(|| format!("running {what}"))?;
    if !out.status.success() {
        bail!("{what} exited with {}", out.status);
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()
        .unwrap_or_default()
        .trim()
        .to_string())
}

async fn run(args: Args) -> Result<bool> {
    if let Some(out) = &args.scaling_plot {
        let md = scaling::run(out, &args.from)?;
        println!("{md}");
        log(&format!("plot: {}", out.display()));
        return Ok(true);
    }
    let kubeconfig = match &args.kubeconfig {
        Some(p) => p.clone(),
        None => PathBuf::from(last_line_of(
            std::process::Command::new("bash")
                .arg(repo::root().join("hack/cluster.sh"))
                .arg("kubeconfig"),
            "hack/cluster.sh kubeconfig",
        )?),
    };
    let client = objects::kube_client(&kubeconfig).await?;
    if args.cleanup {
        let n = objects::delete_namespaces(&client, RUN_LABEL, args.concurrency).await?;
        log(&format!("deleting {n} load-test namespaces"));
        return Ok(true);
    }
    let results_dir = args
        .results_dir
        .clone()
        .unwrap_or_else(|| repo::root().join("loadtest/results"));
    std::fs::create_dir_all(&results_dir)?;
    let bin = controller_bin(&args)?;
    let commit = checkout_commit();
    let scenarios: Vec<Scenario> = if args.scenario == Scenario::All {
        Scenario::EACH.to_vec()
    } else {
        vec![args.scenario]
    };
    let mut all_passed = true;
    let mut summary = Vec::new();
    for s in scenarios {
        let started = Instant::now();
        let (bin, commit) = (bin.as_deref(), commit.as_deref());
        let (passed, md_row) =
            run::run_one(&args, s, &kubeconfig, &results_dir, bin, commit, &client).await?;
        log(&format!(
            "{} / {}: {} in {:.0}s",
            s.name(),
            args.scale.name(),
            if passed { "PASS" } else { "FAIL" },
            started.elapsed().as_secs_f64()
        ));
        all_passed &= passed;
        summary.push(md_row);
    }
    if summary.len() > 1 {
        let name = format!(
            "summary-{}{}.md",
            args.scale.name(),
            setup::build_suffix(&args, commit.as_deref())
        );
        write_summary(&results_dir.join(name), &summary)?;
    }
    Ok(all_passed)
}

/// What `{bin}` stands for: `--controller-bin`, else what `make -s binary` built (None when
/// the command does not use it).
fn controller_bin(args: &Args) -> Result<Option<String>> {
    if !args.controller_cmd.contains("{bin}") {
        return Ok(None);
    }
    if let Some(b) = &args.controller_bin {
        return Ok(Some(b.clone()));
    }
    log("building the controller: make -s binary");
    let built = last_line_of(
        std::process::Command::new("make")
            .arg("-s")
            .arg("binary")
            .current_dir(repo::root()),
        "make -s binary",
    )?;
    Ok(Some(built))
}

/// The summary table of a run of several scenarios (one row each).
fn write_summary(path: &Path, rows: &[String]) -> Result<()> {
    let mut md = String::from(
        "| scenario | verdict | reloads | missing | unexpected | duplicates | p50 ms | p99 ms | max ms | ready s | peak RSS MiB | CPU s | controller requests |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for row in rows {
        md.push_str(row);
        md.push('\n');
    }
    std::fs::write(path, &md)?;
    println!("{md}");
    log(&format!("summary: {}", path.display()));
    Ok(())
}

/// The abbreviated commit of this checkout, `-dirty` when the code differs from it (results and
/// docs do not count); None outside a git checkout.
fn checkout_commit() -> Option<String> {
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .arg("-C")
            .arg(repo::root())
            .args(args)
            .stderr(std::process::Stdio::null())
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let commit = git(&["rev-parse", "--short=7", "HEAD"])?;
    let changed = git(&[
        "status",
        "--porcelain",
        "--untracked-files=no",
        "--",
        ".",
        ":(exclude)loadtest/results",
        ":(exclude)docs",
        ":(exclude)*.md",
    ])?;
    Some(if changed.is_empty() {
        commit
    } else {
        format!("{commit}-dirty")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_checkout_has_a_commit() {
        let c = checkout_commit().expect("the tests run in a git checkout");
        let hex = c.trim_end_matches("-dirty");
        assert_eq!(hex.len(), 7, "{c}");
        assert!(hex.chars().all(|c| c.is_ascii_hexdigit()), "{c}");
    }
}
