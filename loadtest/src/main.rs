//! Load test for kube-reloader, or any controller that speaks Reloader's protocol: creates
//! labelled namespaces, configs and Deployments on a real API server, starts the controller from
//! a command line, drives config changes, and measures reload latency (on the load generator's
//! clock), the controller's memory, CPU and API requests, and correctness (every expected reload
//! happened once, nothing else did). See loadtest/README.md.

mod apimetrics;
mod audit;
mod chaos;
mod churn;
mod controller;
mod ctx;
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
mod proxy;
mod quiet;
mod report;
mod run;
mod scaling;
mod scenario;
mod setup;
mod sharded;
mod tenancy;
mod waves;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::OnceLock;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use clap::Parser;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

pub use ctx::Ctx;
use objects::RUN_LABEL;
use scenario::{Scale, Scenario};

static START: OnceLock<Instant> = OnceLock::new();

pub fn log(msg: &str) {
    let t = START.get_or_init(Instant::now).elapsed().as_secs_f64();
    eprintln!("[loadtest {t:>7.1}s] {msg}");
}

const DEFAULT_CMD: &str =
    "{bin} --namespace-selector={selector} --metrics-addr={metrics_addr} {scenario_flags}";

/// Load test for kube-reloader (or another Reloader-compatible controller) against a real API
/// server. Exit code: 0 all correct, 1 a correctness check failed, 2 the run itself failed.
#[derive(Parser, Debug, Clone)]
#[command(name = "kube-reloader-loadtest", version)]
struct Args {
    #[arg(long, value_enum, default_value = "steady")]
    scenario: Scenario,

    #[arg(long, value_enum, default_value = "small")]
    scale: Scale,

    /// The controller under test, run as `bash -c "exec <cmd>"` in its own process group with
    /// KUBECONFIG set. Placeholders: {bin} {selector} (kube-reloader-loadtest=<run id>) {run_id}
    /// {metrics_addr} (127.0.0.1:<free port>) {metrics_port} {scenario_flags} {kubeconfig}.
    #[arg(long, env = "CONTROLLER_CMD", default_value = DEFAULT_CMD)]
    controller_cmd: String,

    /// What {bin} stands for (default: the last line of `make -s binary`).
    #[arg(long, env = "KUBE_RELOADER_BIN")]
    controller_bin: Option<String>,

    /// Name of the controller in the report and in the result file names.
    #[arg(long)]
    controller_label: Option<String>,

    /// Polled until it answers 200: the controller is ready (same placeholders). "none": do not
    /// wait (the time to ready is then not measured).
    #[arg(long, default_value = "http://{metrics_addr}/ready")]
    ready_url: String,

    /// Scraped once at the end and saved next to the results ("none" to skip).
    #[arg(long, default_value = "http://{metrics_addr}/metrics")]
    metrics_url: String,

    /// Kubeconfig of the cluster (default: the local control plane, `hack/cluster.sh kubeconfig`).
    #[arg(long, env = "LOADTEST_KUBECONFIG")]
    kubeconfig: Option<PathBuf>,

    /// Credentials the controller under test uses (through the proxy or directly). Default: the
    /// local control plane's `loadtest-controller.kubeconfig` next to the kubeconfig (its own
    /// user, audit-logged), else the kubeconfig.
    #[arg(long, env = "LOADTEST_CONTROLLER_KUBECONFIG")]
    controller_kubeconfig: Option<PathBuf>,

    /// The API server's audit log of that user (default: `logs/audit.log` next to the kubeconfig,
    /// as hack/cluster.sh writes it; "none" to skip). Its requests are counted by user agent.
    #[arg(long, env = "LOADTEST_AUDIT_LOG")]
    audit_log: Option<PathBuf>,

    /// Where results go (default: loadtest/results).
    #[arg(long)]
    results_dir: Option<PathBuf>,

    /// Let the controller talk to the API server directly instead of through the counting proxy
    /// (its requests are then only visible in the API server's cluster-wide metrics).
    #[arg(long)]
    direct: bool,

    /// Keep the namespaces of the run (default: deleted at the end).
    #[arg(long)]
    keep: bool,

    /// Delete every namespace left by earlier runs (label kube-reloader-loadtest) and exit.
    #[arg(long)]
    cleanup: bool,

    /// Override the scale's number of namespaces.
    #[arg(long)]
    namespaces: Option<usize>,
    /// Override the scale's number of workloads (each with its own ConfigMap and Secret).
    #[arg(long)]
    workloads: Option<usize>,
    /// Override the number of changes.
    #[arg(long)]
    changes: Option<usize>,
    /// Override the change rate (changes per second).
    #[arg(long)]
    rate: Option<f64>,

    /// Controller replicas of the `sharded` scenario (each its own process with --sharding; the
    /// result files are named `sharded-<scale>-<N>r`). Other scenarios run one.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=64))]
    replicas: u16,

    /// Requests in flight while creating objects.
    #[arg(long, default_value_t = 64)]
    concurrency: usize,

    /// Instead of a run: plot reload latency and RSS against workloads from the result files
    /// given with --from, to this SVG (and a Markdown table next to it).
    #[arg(long, requires = "from")]
    scaling_plot: Option<PathBuf>,
    /// Result files (`results/*.json`) for --scaling-plot.
    #[arg(long, num_args = 1..)]
    from: Vec<PathBuf>,

    /// Start the controller without waiting for kube-controller-manager to have rolled out
    /// every Deployment of the population and for the API server's write rate to drop below
    /// 20/s (default: wait, so the start-up is measured on a cluster at rest).
    #[arg(long)]
    no_wait_rollouts: bool,

    /// Seed of the choices of configs to change.
    #[arg(long)]
    seed: Option<u64>,

    /// noisy-neighbour / poisoned: group namespaces into tenants by a label and run the
    /// controller with --tenant-label (result files `<scenario>-<scale>-tenants`).
    #[arg(long)]
    tenant_groups: bool,

    /// flapping: how often each flapping Secret is rewritten (`2s`, `500ms`; default 2s).
    #[arg(long, value_parser = seconds)]
    flap_period: Option<f64>,
    /// flapping: for how long the Secrets are rewritten (`2m`, `1m30s`; default 2m, 20s at the
    /// small scale).
    #[arg(long, value_parser = seconds)]
    flap_for: Option<f64>,
    /// flapping: the controller's --churn-limit (default 3); 0 runs it without the breaker
    /// (result files `flapping-<scale>-no-breaker`).
    #[arg(long)]
    churn_limit: Option<u32>,

    /// chaos: how long changes and faults go on (20m, 90s; default 20m).
    #[arg(long, value_parser = seconds)]
    duration: Option<f64>,

    /// chaos: the replicas run with --enable-ha (one leader acts) instead of --sharding (result
    /// files `chaos-<scale>-<N>r-ha`).
    #[arg(long)]
    enable_ha: bool,

    /// chaos: also restart kube-apiserver and compact etcd. Only against a control plane of the
    /// run's own (`KUBE_RELOADER_CACHE=<dir> hack/cluster.sh up`, then --kubeconfig): refused for
    /// the shared one.
    #[arg(long)]
    control_plane_faults: bool,
}

/// A positive duration (`2s`, `1m30s`, `500ms`; jiff's friendly format, which reads Go's) in
/// seconds.
fn seconds(s: &str) -> Result<f64, String> {
    let d: jiff::SignedDuration = s.parse().map_err(|e| format!("{s:?}: {e}"))?;
    match d.as_secs_f64() {
        secs if secs > 0.0 => Ok(secs),
        _ => Err(format!("{s:?}: not a positive duration")),
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    START.get_or_init(Instant::now);
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

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("loadtest/ is inside the repository")
        .to_path_buf()
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

async fn kube_client(path: &Path) -> Result<Client> {
    let kc = Kubeconfig::read_from(path).with_context(|| format!("reading {}", path.display()))?;
    let config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?;
    Ok(Client::try_from(config)?)
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
                .arg(repo_root().join("hack/cluster.sh"))
                .arg("kubeconfig"),
            "hack/cluster.sh kubeconfig",
        )?),
    };
    let client = kube_client(&kubeconfig).await?;
    if args.cleanup {
        let n = objects::delete_namespaces(&client, RUN_LABEL, args.concurrency).await?;
        log(&format!("deleting {n} load-test namespaces"));
        return Ok(true);
    }
    let results_dir = args
        .results_dir
        .clone()
        .unwrap_or_else(|| repo_root().join("loadtest/results"));
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
            build_suffix(&args, commit.as_deref())
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
            .current_dir(repo_root()),
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

/// `<scenario>-<scale>[-<variant>][-<build>]`: the stem of a run's result files. The variant
/// is what the scenario was run with (`<N>r` replicas, `tenants`); the build is
/// `--controller-label` when given (another controller: its name and version, e.g.
/// `reloader-v1.4.1`), else the commit of this checkout.
fn result_name(args: &Args, scenario: Scenario, commit: Option<&str>) -> String {
    let variant = match scenario {
        Scenario::Sharded => format!("-{}r", args.replicas),
        Scenario::Chaos => chaos::Settings::new(args).variant(),
        Scenario::NoisyNeighbour | Scenario::Poisoned if args.tenant_groups => "-tenants".into(),
        Scenario::Flapping if args.churn_limit == Some(0) => "-no-breaker".into(),
        _ => String::new(),
    };
    format!(
        "{}-{}{variant}{}",
        scenario.name(),
        args.scale.name(),
        build_suffix(args, commit)
    )
}

/// `-<label>` (characters a file name should not have replaced), else `-<commit>`, else empty.
fn build_suffix(args: &Args, commit: Option<&str>) -> String {
    let build = args.controller_label.as_deref().or(commit);
    build
        .map(|b| {
            let safe = b.replace(
                |c: char| !c.is_ascii_alphanumeric() && !".-".contains(c),
                "_",
            );
            format!("-{safe}")
        })
        .unwrap_or_default()
}

/// The abbreviated commit of this checkout, `-dirty` when the code differs from it (results and
/// docs do not count); None outside a git checkout.
fn checkout_commit() -> Option<String> {
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .arg("-C")
            .arg(repo_root())
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

    fn args(extra: &[&str]) -> Args {
        Args::parse_from(["kube-reloader-loadtest"].iter().chain(extra))
    }

    #[test]
    fn results_are_named_by_scenario_scale_variant_and_build() {
        let plain = args(&["--scale", "medium"]);
        assert_eq!(
            result_name(&plain, Scenario::Steady, Some("1a2b3c4")),
            "steady-medium-1a2b3c4"
        );
        assert_eq!(result_name(&plain, Scenario::Steady, None), "steady-medium");
        let four = args(&["--replicas", "4"]);
        assert_eq!(
            result_name(&four, Scenario::Sharded, Some("1a2b3c4-dirty")),
            "sharded-small-4r-1a2b3c4-dirty"
        );
        assert_eq!(
            result_name(&four, Scenario::Steady, Some("1a2b3c4")),
            "steady-small-1a2b3c4"
        );
        // Another controller: its label replaces the commit.
        let reloader = args(&["--tenant-groups", "--controller-label", "reloader v1.4.1/x"]);
        assert_eq!(
            result_name(&reloader, Scenario::Poisoned, Some("1a2b3c4")),
            "poisoned-small-tenants-reloader_v1.4.1_x"
        );
        let chaos = |extra: &[&str]| {
            let a = args(&[&["--scale", "medium"], extra].concat());
            result_name(&a, Scenario::Chaos, Some("1a2b3c4"))
        };
        assert_eq!(chaos(&["--seed", "25"]), "chaos-medium-3r-1a2b3c4");
        assert_eq!(
            chaos(&["--seed", "26", "--enable-ha"]),
            "chaos-medium-3r-ha-seed26-1a2b3c4"
        );
        let unbroken = args(&["--churn-limit", "0"]);
        assert_eq!(
            result_name(&unbroken, Scenario::Flapping, Some("1a2b3c4")),
            "flapping-small-no-breaker-1a2b3c4"
        );
        assert_eq!(
            result_name(&args(&["--churn-limit", "5"]), Scenario::Flapping, None),
            "flapping-small"
        );
    }

    #[test]
    fn durations_read_like_the_controllers_flags() {
        assert_eq!(seconds("2s"), Ok(2.0));
        assert_eq!(seconds("2m"), Ok(120.0));
        assert_eq!(seconds("1m30s"), Ok(90.0));
        assert_eq!(seconds("500ms"), Ok(0.5));
        assert!(seconds("0s").is_err());
        assert!(seconds("two").is_err());
        assert!(seconds("45").is_err(), "a unit is required");
        let a = args(&[
            "--flap-period",
            "1s",
            "--flap-for",
            "1m",
            "--duration",
            "20m",
        ]);
        assert_eq!((a.flap_period, a.flap_for), (Some(1.0), Some(60.0)));
        assert_eq!(a.duration, Some(1200.0));
    }

    #[test]
    fn this_checkout_has_a_commit() {
        let c = checkout_commit().expect("the tests run in a git checkout");
        let hex = c.trim_end_matches("-dirty");
        assert_eq!(hex.len(), 7, "{c}");
        assert!(hex.chars().all(|c| c.is_ascii_hexdigit()), "{c}");
    }
}
