//! Load test for kube-reloader, or any controller that speaks Reloader's protocol: creates
//! labelled namespaces, configs and Deployments on a real API server, starts the controller from
//! a command line, drives config changes, and measures reload latency (on the load generator's
//! clock), the controller's memory, CPU and API requests, and correctness (every expected reload
//! happened once, nothing else did). See loadtest/README.md.

mod apimetrics;
mod audit;
mod churn;
mod controller;
mod hash;
mod ledger;
mod markdown;
mod mixed;
mod objects;
mod pause;
mod proxy;
mod report;
mod scaling;
mod scenario;
mod sharded;
mod tenancy;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use base64::Engine as _;
use clap::Parser;
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use serde_json::{Value, json};

use controller::ControllerProc;
use ledger::State;
use objects::{
    ConfigRef, Kind, OwnRequests, Population, RUN_LABEL, RefStyle, WorkloadKind, WorkloadSpec,
};
use scenario::{Plan, Rng, Scale, Scenario};

static START: OnceLock<Instant> = OnceLock::new();

pub fn log(msg: &str) {
    let t = START.get_or_init(Instant::now).elapsed().as_secs_f64();
    eprintln!("[loadtest {t:>7.1}s] {msg}");
}

/// Timing slack of the rate-limit check: request latency jitter between the controller's limiter
/// and the proxy's clock on a shared 2-core machine (the strict excess is reported too).
const RATE_SLACK_S: f64 = 0.25;

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
    let bin = if args.controller_cmd.contains("{bin}") {
        Some(match &args.controller_bin {
            Some(b) => b.clone(),
            None => {
                log("building the controller: make -s binary");
                last_line_of(
                    std::process::Command::new("make")
                        .arg("-s")
                        .arg("binary")
                        .current_dir(repo_root()),
                    "make -s binary",
                )?
            }
        })
    } else {
        None
    };
    let scenarios: Vec<Scenario> = if args.scenario == Scenario::All {
        Scenario::EACH.to_vec()
    } else {
        vec![args.scenario]
    };
    let mut all_passed = true;
    let mut summary = Vec::new();
    for s in scenarios {
        let started = Instant::now();
        let (passed, md_row) =
            run_one(&args, s, &kubeconfig, &results_dir, bin.as_deref(), &client).await?;
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
        let mut md = String::from(
            "| scenario | verdict | reloads | missing | unexpected | duplicates | p50 ms | p99 ms | max ms | ready s | peak RSS MiB | CPU s | controller requests |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
        );
        for row in &summary {
            md.push_str(row);
            md.push('\n');
        }
        let path = results_dir.join(format!(
            "summary-{}{}.md",
            args.scale.name(),
            label_suffix(&args)
        ));
        std::fs::write(&path, &md)?;
        println!("{md}");
        log(&format!("summary: {}", path.display()));
    }
    Ok(all_passed)
}

/// `<scenario>-<scale>[-<N>r][-<label>]`: the stem of a run's result files.
fn result_name(args: &Args, scenario: Scenario) -> String {
    let replicas = match scenario {
        Scenario::Sharded => format!("-{}r", args.replicas),
        Scenario::NoisyNeighbour | Scenario::Poisoned if args.tenant_groups => "-tenants".into(),
        _ => String::new(),
    };
    format!(
        "{}-{}{replicas}{}",
        scenario.name(),
        args.scale.name(),
        label_suffix(args)
    )
}

fn label_suffix(args: &Args) -> String {
    args.controller_label
        .as_ref()
        .map(|l| {
            format!(
                "-{}",
                l.replace(
                    |c: char| !c.is_ascii_alphanumeric() && !".-".contains(c),
                    "_"
                )
            )
        })
        .unwrap_or_default()
}

/// Everything the change drivers share.
struct Ctx {
    client: Client,
    epoch: Instant,
    state: Arc<Mutex<State>>,
    own: Arc<OwnRequests>,
    run_id: String,
    pop: Population,
    concurrency: usize,
    nonce: AtomicUsize,
    /// Tag of the changes written now (restart: before-kill / while-down / after-restart).
    phase: Mutex<String>,
    /// Tag of the changes of a config, instead of the phase (references: how the workload
    /// references it; mixed: the workload's kind).
    config_tags: BTreeMap<ConfigRef, String>,
}

impl Ctx {
    fn now(&self) -> f64 {
        self.epoch.elapsed().as_secs_f64()
    }

    fn set_phase(&self, p: &str) {
        *self.phase.lock().unwrap() = p.to_string();
    }

    /// A new, unique payload (of `size` bytes if given).
    fn payload(&self, size: Option<usize>) -> Vec<u8> {
        let n = self.nonce.fetch_add(1, Ordering::Relaxed);
        let mut p = format!("{}-change-{n}-", self.run_id).into_bytes();
        if let Some(size) = size {
            let mut x: u64 = 0x9E37_79B9_7F4A_7C15 ^ n as u64;
            const ALNUM: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
            while p.len() < size {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                p.push(ALNUM[(x >> 33) as usize % ALNUM.len()]);
            }
        }
        p
    }

    /// Writes a new payload into `config` and records the change; returns its id.
    async fn change(&self, config: &ConfigRef, size: Option<usize>) -> usize {
        let payload = self.payload(size);
        let hash = config.hash_of(&payload);
        let expected = self.pop.users.get(config).cloned().unwrap_or_default();
        let tag = match self.config_tags.get(config) {
            Some(t) => t.clone(),
            None => self.phase.lock().unwrap().clone(),
        };
        let id =
            self.state
                .lock()
                .unwrap()
                .register(config.clone(), hash, expected, self.now(), &tag);
        let body = match config.kind {
            Kind::ConfigMap => {
                json!({"data": {objects::DATA_KEY: String::from_utf8_lossy(&payload)}})
            }
            Kind::Secret => json!({"data": {
                objects::DATA_KEY: base64::engine::general_purpose::STANDARD.encode(&payload)
            }}),
        };
        let r = self.patch_config(config, &body).await;
        let mut st = self.state.lock().unwrap();
        match r {
            Ok(()) => st.ack(id, self.now()),
            Err(e) => st.fail(id, format!("{e:#}")),
        }
        id
    }

    async fn patch_config(&self, c: &ConfigRef, body: &Value) -> Result<()> {
        let pp = PatchParams::default();
        let patch = Patch::Merge(body);
        match c.kind {
            Kind::ConfigMap => {
                self.own.add("patch", "configmaps");
                let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), &c.namespace);
                objects::with_retry(&format!("patching {c}"), || api.patch(&c.name, &pp, &patch))
                    .await?;
            }
            Kind::Secret => {
                self.own.add("patch", "secrets");
                let api: Api<Secret> = Api::namespaced(self.client.clone(), &c.namespace);
                objects::with_retry(&format!("patching {c}"), || api.patch(&c.name, &pp, &patch))
                    .await?;
            }
        }
        Ok(())
    }

    async fn patch_workload_metadata(&self, w: &WorkloadSpec, body: &Value) -> Result<()> {
        self.own.add("patch", "deployments");
        let api: Api<Deployment> = Api::namespaced(self.client.clone(), &w.namespace);
        let (pp, patch) = (PatchParams::default(), Patch::Merge(body));
        objects::with_retry(&format!("patching {}", w.key()), || {
            api.patch(&w.name, &pp, &patch)
        })
        .await?;
        Ok(())
    }

    /// Changes `configs` at `rate` per second (each write in its own task, so a slow write does
    /// not delay the schedule).
    async fn drive_at_rate(
        self: &Arc<Self>,
        configs: Vec<ConfigRef>,
        rate: f64,
        size: Option<usize>,
    ) {
        let start = tokio::time::Instant::now();
        let mut tasks = tokio::task::JoinSet::new();
        for (i, c) in configs.into_iter().enumerate() {
            tokio::time::sleep_until(start + Duration::from_secs_f64(i as f64 / rate)).await;
            let ctx = self.clone();
            tasks.spawn(async move {
                ctx.change(&c, size).await;
            });
        }
        while tasks.join_next().await.is_some() {}
    }

    /// Changes all `configs` at once (`concurrency` writes in flight).
    async fn drive_burst(&self, configs: Vec<ConfigRef>) {
        futures::stream::iter(configs.iter().map(|c| self.change(c, None)))
            .buffer_unordered(self.concurrency)
            .collect::<Vec<_>>()
            .await;
    }

    /// Waits until every expected reload happened (or was folded into a later one).
    async fn wait_reloads(&self, timeout: Duration) -> bool {
        let start = Instant::now();
        let mut last_log = Instant::now();
        loop {
            let (pending, total) = {
                let st = self.state.lock().unwrap();
                (st.pending(), st.expected_pairs())
            };
            if pending == 0 {
                return true;
            }
            if start.elapsed() > timeout {
                log(&format!(
                    "gave up waiting: {pending}/{total} expected reloads not seen after {timeout:?}"
                ));
                return false;
            }
            if last_log.elapsed() > Duration::from_secs(10) {
                log(&format!("  waiting for reloads: {pending}/{total} pending"));
                last_log = Instant::now();
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Distinct workloads of the standard population, one of their two configs each.
    fn pick_configs(&self, rng: &mut Rng, n: usize, standard: usize) -> Vec<ConfigRef> {
        rng.sample(standard, n)
            .into_iter()
            .map(|j| {
                let w = &self.pop.workloads[j];
                w.configs[rng.below(w.configs.len())].clone()
            })
            .collect()
    }
}

/// Below this many writes per second (cluster-wide, every client) the cluster is at rest.
const QUIET_WRITES_PER_S: f64 = 20.0;

/// Waits until the API server's write rate stays below [`QUIET_WRITES_PER_S`] for 5 s: after
/// its ReplicaSets, kube-controller-manager keeps updating the status of every new Deployment
/// (at the large scale ~300 writes/s for minutes), which would be measured as the controller's
/// start-up. Gives up (and says so) after `timeout`.
async fn wait_until_quiet(client: &Client, timeout: Duration) {
    let writes = |c: &proxy::Counts| -> u64 {
        c.iter()
            .filter(|((verb, _), _)| {
                matches!(
                    verb.as_str(),
                    "create" | "update" | "patch" | "delete" | "deletecollection"
                )
            })
            .map(|(_, n)| n)
            .sum()
    };
    let window = Duration::from_secs(5);
    let t = Instant::now();
    let Ok(mut before) = apimetrics::scrape(client).await else {
        log("WARNING: the API server's /metrics cannot be read: not waiting for a quiet cluster");
        return;
    };
    loop {
        tokio::time::sleep(window).await;
        let Ok(now) = apimetrics::scrape(client).await else {
            continue;
        };
        let rate = writes(&now).saturating_sub(writes(&before)) as f64 / window.as_secs_f64();
        if rate < QUIET_WRITES_PER_S {
            log(&format!(
                "the cluster is at rest ({rate:.0} writes/s; {:.0}s waited)",
                t.elapsed().as_secs_f64()
            ));
            return;
        }
        if t.elapsed() > timeout {
            log(&format!(
                "WARNING: still {rate:.0} writes/s after {:.0}s; starting anyway",
                t.elapsed().as_secs_f64()
            ));
            return;
        }
        log(&format!(
            "  waiting for a quiet cluster: {rate:.0} writes/s"
        ));
        before = now;
    }
}

/// The controller's credentials: `--controller-kubeconfig`, else the local control plane's
/// audit-logged identity if the kubeconfig has one next to it, else the kubeconfig itself.
fn controller_credentials(args: &Args, kubeconfig: &Path) -> PathBuf {
    if let Some(p) = &args.controller_kubeconfig {
        return p.clone();
    }
    let own = kubeconfig.with_file_name("loadtest-controller.kubeconfig");
    if own.exists() {
        own
    } else {
        kubeconfig.to_path_buf()
    }
}

/// The API server's count of the controller's requests (audit log), per phase.
struct AuditCounts {
    json: Value,
    throttled: u64,
}

fn audit_counts(
    args: &Args,
    kubeconfig: &Path,
    spawned: jiff::Timestamp,
    changes: jiff::Timestamp,
) -> AuditCounts {
    let log_path = match &args.audit_log {
        Some(p) if p.as_os_str() == "none" => {
            return AuditCounts {
                json: json!(null),
                throttled: 0,
            };
        }
        Some(p) => p.clone(),
        None => kubeconfig.with_file_name("logs").join("audit.log"),
    };
    let (from, mid, to) = (
        audit::timestamp(spawned),
        audit::timestamp(changes),
        audit::timestamp(jiff::Timestamp::now()),
    );
    let counted = audit::count(&log_path, &from, &mid)
        .and_then(|startup| Ok((startup, audit::count(&log_path, &mid, &to)?)));
    match counted {
        Ok((startup, change_phase)) => AuditCounts {
            throttled: audit::throttled(&startup) + audit::throttled(&change_phase),
            json: json!({
                "method": "the API server's audit log of the controller's own user (hack/cluster.sh), counted by user agent; one count per request (a watch when it starts)",
                "log": log_path.display().to_string(),
                "startup": startup,
                "change_phase": change_phase,
            }),
        },
        Err(e) => {
            log(&format!(
                "no audit-log count of the controller's requests: {e:#}"
            ));
            AuditCounts {
                json: json!({"error": format!("{e:#}")}),
                throttled: 0,
            }
        }
    }
}

/// `n` distinct free ports (the listeners are held until all are chosen).
fn free_ports(n: usize) -> Result<Vec<u16>> {
    let listeners = (0..n)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0"))
        .collect::<std::io::Result<Vec<_>>>()?;
    listeners
        .iter()
        .map(|l| Ok(l.local_addr()?.port()))
        .collect()
}

fn fill(template: &str, vars: &BTreeMap<&str, String>) -> String {
    let mut s = template.to_string();
    for (k, v) in vars {
        s = s.replace(&format!("{{{k}}}"), v);
    }
    s
}

fn file_sha1(path: &str) -> Option<String> {
    use sha1::Digest;
    let bytes = std::fs::read(path).ok()?;
    Some(
        sha1::Sha1::digest(&bytes)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect(),
    )
}

fn machine() -> Value {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, m)| m.trim().to_string())
        .unwrap_or_default();
    let mem_kib: u64 = std::fs::read_to_string("/proc/meminfo")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("MemTotal:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(0);
    json!({
        "cpus": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        "cpu_model": model,
        "mem_gib": (mem_kib as f64 / 1048576.0 * 10.0).round() / 10.0,
        "note": "shared with other work; see loadavg",
    })
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

#[allow(clippy::too_many_lines)]
async fn run_one(
    args: &Args,
    scenario: Scenario,
    kubeconfig: &Path,
    results_dir: &Path,
    bin: Option<&str>,
    client: &Client,
) -> Result<(bool, String)> {
    let epoch = Instant::now();
    let name = result_name(args, scenario);
    let mut plan = Plan::new(scenario, args.scale);
    if let Some(n) = args.namespaces {
        plan.namespaces = n.max(1);
    }
    if let Some(n) = args.workloads {
        plan.workloads = n.max(1);
    }
    if let Some(n) = args.changes {
        plan.changes = n;
        plan.kill_after = n / 3;
    }
    if let Some(r) = args.rate {
        plan.rate = r;
    }
    if scenario == Scenario::Sharded {
        plan.replicas = usize::from(args.replicas);
    }
    let tenancy_scenario = matches!(scenario, Scenario::NoisyNeighbour | Scenario::Poisoned);
    if tenancy_scenario {
        plan.tenant_groups = args.tenant_groups;
        plan.namespaces = plan
            .namespaces
            .max(plan.quiet_tenants * plan.namespaces_per_quiet_tenant());
    }
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_nanos() as u64;
    let run_id = format!(
        "{:06x}",
        (nanos ^ u64::from(std::process::id()).rotate_left(20)) & 0xff_ffff
    );
    let seed = args.seed.unwrap_or(nanos);
    let mut rng = Rng::new(seed);
    let loadavg_start = loadavg();
    log(&format!(
        "== {name}: run {run_id}, {} namespaces, {} workloads (load avg {loadavg_start})",
        plan.namespaces, plan.workloads
    ));

    // ---- population
    let mut pop = Population::new(&run_id);
    pop.standard(plan.namespaces, plan.workloads);
    let standard = pop.workloads.len();
    let mut special: Vec<ConfigRef> = Vec::new();
    let mut tenancy = None;
    match scenario {
        Scenario::NoisyNeighbour | Scenario::Poisoned => {
            tenancy = Some(tenancy::populate(&mut pop, scenario, &plan));
        }
        // The standard population, its workloads referencing their configs in Reloader's other
        // ways (round robin), or spread over the workload kinds.
        Scenario::References => {
            for (j, w) in pop.workloads.iter_mut().enumerate() {
                w.refs = RefStyle::OTHERS[j % RefStyle::OTHERS.len()];
            }
        }
        Scenario::Mixed => {
            for (j, w) in pop.workloads.iter_mut().enumerate() {
                w.kind = WorkloadKind::ALL[j % WorkloadKind::ALL.len()];
            }
        }
        // Every Deployment gets the period, so one paused without a change of its own shows.
        Scenario::Pause => {
            for w in &mut pop.workloads {
                w.pause_period = Some(format!("{}s", plan.pause_period_s));
            }
        }
        Scenario::Fanout => {
            let ns = pop.add_namespace("fanout");
            let shared = ConfigRef {
                namespace: ns.clone(),
                kind: Kind::ConfigMap,
                name: "shared-config".into(),
            };
            pop.add_config(shared.clone(), b"initial-shared".to_vec());
            for k in 0..plan.fanout_width {
                pop.add_workload(WorkloadSpec {
                    namespace: ns.clone(),
                    name: format!("fan-{k}"),
                    configs: vec![shared.clone()],
                    ..Default::default()
                });
            }
            special.push(shared);
        }
        Scenario::Large => {
            let ns = pop.add_namespace("large");
            for k in 0..plan.large_secrets {
                let c = ConfigRef {
                    namespace: ns.clone(),
                    kind: Kind::Secret,
                    name: format!("big-{k}"),
                };
                let mut p = format!("initial-{k}-").into_bytes();
                p.resize(plan.large_secret_bytes, b'x');
                pop.add_config(c.clone(), p);
                pop.add_workload(WorkloadSpec {
                    namespace: ns.clone(),
                    name: format!("big-{k}"),
                    configs: vec![c.clone()],
                    ..Default::default()
                });
                special.push(c);
            }
        }
        _ => {}
    }
    let initial_hashes = pop.initial_hashes();
    let own = Arc::new(OwnRequests::default());
    let t0 = Instant::now();
    let mut n_objects = pop.namespaces.len() + pop.configs.len() + pop.workloads.len();
    log(&format!(
        "creating {n_objects} objects, {} in flight",
        args.concurrency
    ));
    let mut created = objects::create_population(client, &pop, args.concurrency, &own).await;
    if created.is_ok() && !plan.background.is_empty() {
        let (b, nss) = (&plan.background, &pop.namespaces);
        created = objects::create_background(client, &run_id, nss, b, args.concurrency, &own)
            .await
            .map(|n| n_objects += n);
    }
    let setup_s = t0.elapsed().as_secs_f64();
    let cleanup = |client: Client, run_id: String, keep: bool, conc: usize| async move {
        if keep {
            log(&format!(
                "keeping namespaces of run {run_id} (label {RUN_LABEL}={run_id})"
            ));
        } else {
            // The run's namespaces and the sharded scenario's Lease namespace.
            let selector = format!(
                "{RUN_LABEL} in ({run_id},{})",
                sharded::lease_label_value(&run_id)
            );
            match objects::delete_namespaces(&client, &selector, conc).await {
                Ok(n) => log(&format!(
                    "deleting the run's {n} namespaces (in the background)"
                )),
                Err(e) => log(&format!("cleanup failed: {e:#}")),
            }
        }
    };
    if let Err(e) = created {
        cleanup(client.clone(), run_id.clone(), args.keep, args.concurrency).await;
        return Err(e);
    }
    log(&format!(
        "created {n_objects} objects in {setup_s:.1}s ({:.0}/s)",
        n_objects as f64 / setup_s
    ));

    let result = measure(
        args,
        scenario,
        &plan,
        kubeconfig,
        results_dir,
        bin,
        client,
        pop,
        own,
        epoch,
        &run_id,
        &mut rng,
        standard,
        special,
        tenancy.as_ref(),
        &initial_hashes,
    )
    .await;
    if scenario == Scenario::Poisoned {
        // Normally removed by the run; a failed run must not leave it refusing writes.
        tenancy::unpoison(client, &run_id).await;
    }
    cleanup(client.clone(), run_id.clone(), args.keep, args.concurrency).await;
    let mut report = result?;
    let passed = report["correctness"]["passed"].as_bool().unwrap_or(false);
    report["run"]["setup_s"] = json!(report::round(setup_s));
    report["run"]["objects_created"] = json!(n_objects);
    report["run"]["loadavg_start"] = json!(loadavg_start);
    report["run"]["seed"] = json!(seed);
    let md = markdown::markdown(&report);
    std::fs::write(
        results_dir.join(format!("{name}.json")),
        serde_json::to_string_pretty(&report)? + "\n",
    )?;
    std::fs::write(results_dir.join(format!("{name}.md")), &md)?;
    println!("{md}");
    log(&format!(
        "results: {}",
        results_dir
            .join(format!("{name}.{{json,md,svg}}"))
            .display()
    ));
    Ok((passed, markdown::summary_row(&report)))
}

#[allow(clippy::too_many_arguments, clippy::too_many_lines)]
async fn measure(
    args: &Args,
    scenario: Scenario,
    plan: &Plan,
    kubeconfig: &Path,
    results_dir: &Path,
    bin: Option<&str>,
    client: &Client,
    pop: Population,
    own: Arc<OwnRequests>,
    epoch: Instant,
    run_id: &str,
    rng: &mut Rng,
    standard: usize,
    special: Vec<ConfigRef>,
    tenancy: Option<&tenancy::Tenancy>,
    initial_hashes: &BTreeMap<String, ConfigRef>,
) -> Result<Value> {
    let name = result_name(args, scenario);
    let n_workloads = pop.workloads.len();
    let n_configs = pop.configs.len();
    let n_namespaces = pop.namespaces.len();

    // ---- the load generator's view of the workloads
    let state = Arc::new(Mutex::new(State::default()));
    let watches = mixed::spawn_watches(client, run_id, &state, epoch, scenario == Scenario::Mixed);
    let t_watch = Instant::now();
    loop {
        let (synced, known) = {
            let st = state.lock().unwrap();
            (st.watches_synced, st.workloads_known())
        };
        if synced >= watches.len() && known >= n_workloads {
            break;
        }
        if t_watch.elapsed() > Duration::from_secs(300) {
            watches.iter().for_each(|w| w.abort());
            bail!("the workload watch saw {known}/{n_workloads} workloads after 300s");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // ---- a cluster at rest: kube-controller-manager has rolled out every Deployment (at the
    // large scale it is still creating ReplicaSets minutes after the last create, which would
    // be measured as the controller's start-up)
    let (rollouts, rollouts_task) = pause::spawn(client, run_id, epoch);
    if plan.wait_for_rest && !args.no_wait_rollouts {
        let deployments: Vec<String> = pop
            .workloads
            .iter()
            .filter(|w| w.kind == WorkloadKind::Deployment)
            .map(WorkloadSpec::key)
            .collect();
        let t = Instant::now();
        let mut last_log = Instant::now();
        loop {
            let done = pause::rolled_out(&rollouts, &deployments);
            if done == deployments.len() {
                log(&format!(
                    "kube-controller-manager rolled out all {done} Deployments ({:.1}s waited)",
                    t.elapsed().as_secs_f64()
                ));
                break;
            }
            if t.elapsed().as_secs_f64() > plan.ready_timeout_s {
                log(&format!(
                    "WARNING: kube-controller-manager rolled out {done}/{} Deployments after {:.0}s; starting anyway",
                    deployments.len(),
                    plan.ready_timeout_s
                ));
                break;
            }
            if last_log.elapsed() > Duration::from_secs(10) {
                log(&format!(
                    "  waiting for kube-controller-manager: {done}/{} Deployments rolled out",
                    deployments.len()
                ));
                last_log = Instant::now();
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    if plan.wait_for_rest && !args.no_wait_rollouts {
        wait_until_quiet(client, Duration::from_secs_f64(plan.ready_timeout_s)).await;
    }

    // ---- proxy and controller
    let controller_creds = controller_credentials(args, kubeconfig);
    let proxy = if args.direct {
        None
    } else {
        Some(proxy::Proxy::start(kube_client(&controller_creds).await?, epoch).await?)
    };
    let proxy_kubeconfig =
        std::env::temp_dir().join(format!("kube-reloader-loadtest-{run_id}.kubeconfig"));
    let controller_kubeconfig = match &proxy {
        Some(p) => {
            p.write_kubeconfig(&proxy_kubeconfig)?;
            proxy_kubeconfig.clone()
        }
        None => controller_creds.clone(),
    };
    let scenario_flags = plan.controller_flags(scenario);
    if !scenario_flags.is_empty() && !args.controller_cmd.contains("{scenario_flags}") {
        log(&format!(
            "WARNING: --controller-cmd has no {{scenario_flags}}: the scenario's flags ({scenario_flags}) are not passed"
        ));
    }
    // One process per replica (sharded: N, each with its own metrics port and identity).
    let lease_ns = match scenario {
        Scenario::Sharded => Some(sharded::create_lease_namespace(client, run_id, &own).await?),
        _ => None,
    };
    let ports = free_ports(plan.replicas)?;
    let (mut cmds, mut ready_urls, mut metrics_urls, mut log_paths, mut envs, mut names) =
        (vec![], vec![], vec![], vec![], vec![], vec![]);
    for (i, port) in ports.into_iter().enumerate() {
        let vars: BTreeMap<&str, String> = BTreeMap::from([
            ("bin", bin.unwrap_or_default().to_string()),
            ("selector", format!("{RUN_LABEL}={run_id}")),
            ("run_id", run_id.to_string()),
            ("metrics_addr", format!("127.0.0.1:{port}")),
            ("metrics_port", port.to_string()),
            ("scenario_flags", scenario_flags.clone()),
            ("kubeconfig", controller_kubeconfig.display().to_string()),
        ]);
        cmds.push(fill(&args.controller_cmd, &vars));
        ready_urls.push(fill(&args.ready_url, &vars));
        metrics_urls.push(fill(&args.metrics_url, &vars));
        let (file, env) = match &lease_ns {
            Some(ns) => {
                let me = sharded::replica_name(run_id, i);
                names.push(me.clone());
                (
                    format!("{name}.r{i}"),
                    vec![
                        ("POD_NAME".into(), me),
                        ("POD_NAMESPACE".into(), ns.clone()),
                    ],
                )
            }
            None => (name.clone(), vec![]),
        };
        let log_path = results_dir.join(format!("{file}.controller.log"));
        let _ = std::fs::remove_file(&log_path);
        log_paths.push(log_path);
        envs.push(env);
    }
    let (cmd, ready_url, log_path) = (cmds[0].clone(), ready_urls[0].clone(), &log_paths[0]);
    let api_before = apimetrics::scrape(client).await.ok();
    let own_before = own.snapshot();
    let sample_every = Duration::from_millis(500);
    let t_spawn = Instant::now();
    let wall_spawn = jiff::Timestamp::now();
    let mut procs = Vec::new();
    for i in 0..cmds.len() {
        log(&format!("starting the controller: {}", cmds[i]));
        procs.push(ControllerProc::spawn(
            &cmds[i],
            &controller_kubeconfig,
            &envs[i],
            &log_paths[i],
            epoch,
            sample_every,
        )?);
    }
    let ready_timeout = Duration::from_secs_f64(plan.ready_timeout_s);
    let mut ready_times: Vec<f64> = Vec::new();
    if ready_url != "none" {
        let waits = procs
            .iter_mut()
            .zip(&ready_urls)
            .map(|(p, u)| p.wait_ready(u, ready_timeout, epoch));
        for ttr in futures::future::try_join_all(waits).await? {
            log(&format!("controller ready after {ttr:.2}s"));
            ready_times.push(ttr);
        }
    }
    let converged = match &lease_ns {
        Some(ns) => {
            let replicas = sharded::Replicas {
                lease_ns: ns,
                names: &names,
                ready_urls: &ready_urls,
                metrics_urls: &metrics_urls,
            };
            let c =
                sharded::wait_converged(client, &replicas, n_namespaces, ready_timeout, t_spawn)
                    .await?;
            log(&format!(
                "{} replicas converged after {:.2}s: owned namespaces {:?}",
                names.len(),
                c.after_s,
                c.owned
            ));
            Some(c)
        }
        None => None,
    };
    tokio::time::sleep(Duration::from_secs_f64(plan.warmup_s)).await;
    let proxy_at_changes = proxy.as_ref().map(|p| p.stats());
    let t_changes = epoch.elapsed().as_secs_f64();
    let wall_changes = jiff::Timestamp::now();

    let mut config_tags = BTreeMap::new();
    for w in &pop.workloads {
        for c in &w.configs {
            let tag = match scenario {
                Scenario::References => format!("{} {:?}", w.refs.name(), c.kind),
                Scenario::Mixed => format!("{:?}", w.kind),
                Scenario::NoisyNeighbour | Scenario::Poisoned => tenancy::tag(c),
                _ => break,
            };
            config_tags.insert(c.clone(), tag);
        }
    }
    let ctx = Arc::new(Ctx {
        client: client.clone(),
        epoch,
        state: state.clone(),
        own: own.clone(),
        run_id: run_id.to_string(),
        pop,
        concurrency: args.concurrency,
        nonce: AtomicUsize::new(0),
        phase: Mutex::new(scenario.name().to_string()),
        config_tags,
    });
    let mut notes = serde_json::Map::new();
    let mut churn_outcome: Option<churn::Outcome> = None;
    let timeout_for = |pairs: usize| Duration::from_secs_f64(plan.wait_base_s + pairs as f64 * 0.1);

    // ---- drive
    let completed = match scenario {
        Scenario::Steady
        | Scenario::Annotations
        | Scenario::Sharded
        | Scenario::References
        | Scenario::Mixed
        | Scenario::Cardinality
        | Scenario::Realistic => {
            let configs = ctx.pick_configs(rng, plan.changes, standard);
            log(&format!("{} changes at {}/s", configs.len(), plan.rate));
            ctx.drive_at_rate(configs, plan.rate, None).await;
            ctx.wait_reloads(timeout_for(plan.changes)).await
        }
        Scenario::Churn => {
            let configs = ctx.pick_configs(rng, plan.changes, standard);
            log(&format!("{} changes at {}/s", configs.len(), plan.rate));
            let ((), outcome) = tokio::join!(
                ctx.drive_at_rate(configs.clone(), plan.rate, None),
                churn::run(&ctx, &configs, plan, &ready_url)
            );
            churn_outcome = Some(outcome);
            ctx.wait_reloads(timeout_for(plan.changes)).await
        }
        Scenario::Burst | Scenario::Ratelimit => {
            let configs = ctx.pick_configs(rng, plan.changes, standard);
            log(&format!("{} changes at once", configs.len()));
            let t = Instant::now();
            ctx.drive_burst(configs).await;
            notes.insert(
                "writes_took_s".into(),
                json!(report::round(t.elapsed().as_secs_f64())),
            );
            ctx.wait_reloads(timeout_for(plan.changes * 3)).await
        }
        Scenario::Fanout => {
            let shared = special[0].clone();
            let mut ok = true;
            let mut rounds = Vec::new();
            for i in 0..plan.fanout_changes {
                log(&format!(
                    "fan-out change {}/{} ({} workloads)",
                    i + 1,
                    plan.fanout_changes,
                    plan.fanout_width
                ));
                let id = ctx.change(&shared, None).await;
                ok &= ctx.wait_reloads(timeout_for(plan.fanout_width * 3)).await;
                let st = state.lock().unwrap();
                let c = &st.changes[id];
                let ack = c.t_ack.unwrap_or(c.t_sent);
                let last = c
                    .expected
                    .iter()
                    .filter_map(|w| {
                        st.observations
                            .iter()
                            .filter(|o| &o.workload == w && o.hash == c.hash)
                            .map(|o| o.t)
                            .next()
                    })
                    .fold(f64::NAN, f64::max);
                rounds.push(json!({"change": id, "all_rolled_after_s": ((last - ack) * 100.0).round() / 100.0}));
            }
            notes.insert("fanout_rounds".into(), json!(rounds));
            ok
        }
        Scenario::Noop => {
            let picks = rng.sample(standard, plan.changes);
            log(&format!(
                "{} label/annotation-only updates at {}/s",
                picks.len(),
                plan.rate
            ));
            let start = tokio::time::Instant::now();
            let mut kinds: BTreeMap<&str, usize> = BTreeMap::new();
            let mut used = std::collections::HashSet::new();
            let mut tasks = tokio::task::JoinSet::new();
            for (i, &j) in picks.iter().enumerate() {
                tokio::time::sleep_until(start + Duration::from_secs_f64(i as f64 / plan.rate))
                    .await;
                let ctx2 = ctx.clone();
                let w = ctx.pop.workloads[j].clone();
                used.insert(j);
                let c = w.configs[i % w.configs.len()].clone();
                let initial = ctx.pop.configs[&c].clone();
                let what = match i % 4 {
                    0 => "config label",
                    1 => "config annotation",
                    2 => "config label+annotation, same data re-sent",
                    _ => "workload label",
                };
                *kinds.entry(what).or_default() += 1;
                tasks.spawn(async move {
                    let mark = format!("n{i}");
                    let r = match i % 4 {
                        0 => ctx2.patch_config(&c, &json!({"metadata": {"labels": {"loadtest-noop": mark}}})).await,
                        1 => ctx2.patch_config(&c, &json!({"metadata": {"annotations": {"loadtest/noop": mark}}})).await,
                        2 => {
                            let data = match c.kind {
                                Kind::ConfigMap => json!({objects::DATA_KEY: String::from_utf8_lossy(&initial)}),
                                Kind::Secret => json!({objects::DATA_KEY: base64::engine::general_purpose::STANDARD.encode(&initial)}),
                            };
                            ctx2.patch_config(&c, &json!({"metadata": {"labels": {"loadtest-noop": mark.clone()}, "annotations": {"loadtest/noop": mark}}, "data": data})).await
                        }
                        _ => ctx2.patch_workload_metadata(&w, &json!({"metadata": {"labels": {"loadtest-noop": mark}}})).await,
                    };
                    if let Err(e) = r {
                        log(&format!("no-op update failed: {e:#}"));
                    }
                });
            }
            while tasks.join_next().await.is_some() {}
            notes.insert("noop_updates".into(), json!(kinds));
            // Sentinels, after every no-op write was acknowledged: one real change per kind,
            // so "no reload" is only concluded after later events of both watches took effect.
            let free: Vec<usize> = (0..standard)
                .filter(|j| !used.contains(j))
                .take(1)
                .collect();
            let j = free.first().copied().unwrap_or(0);
            ctx.set_phase("sentinel");
            let w = ctx.pop.workloads[j].clone();
            for c in &w.configs {
                ctx.change(c, None).await;
            }
            ctx.wait_reloads(timeout_for(10)).await
        }
        Scenario::Pause => {
            let traces = rollouts.clone();
            let picks = rng.sample(standard, plan.pause_workloads.min(standard));
            let changed: Vec<String> = picks.iter().map(|&j| ctx.pop.workloads[j].key()).collect();
            // Each Deployment's ConfigMap, changed `pause_changes_each` times 1 s apart: all
            // within one period.
            let configs: Vec<ConfigRef> = picks
                .iter()
                .map(|&j| ctx.pop.workloads[j].configs[0].clone())
                .collect();
            let deadline = Instant::now() + Duration::from_secs_f64(plan.wait_base_s);
            while pause::rolled_out(&traces, &changed) < changed.len() && Instant::now() < deadline
            {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            log(&format!(
                "{} Deployments with a {}s pause period, each changed {} times 1s apart",
                configs.len(),
                plan.pause_period_s,
                plan.pause_changes_each
            ));
            for round in 0..plan.pause_changes_each {
                if round > 0 {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                ctx.drive_burst(configs.clone()).await;
            }
            let mut ok = ctx
                .wait_reloads(timeout_for(configs.len() * plan.pause_changes_each))
                .await;
            let period = f64::from(plan.pause_period_s);
            let deadline = Instant::now() + Duration::from_secs_f64(period + plan.wait_base_s);
            while !pause::all_settled(&traces, &changed) && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            let (problems, figures) =
                pause::evaluate(&traces, &changed, period, plan.pause_changes_each);
            log(&format!("pause: {} problems; {figures}", problems.len()));
            for p in problems.iter().take(5) {
                log(&format!("  {p}"));
            }
            ok &= problems.is_empty();
            notes.insert("pause".into(), figures);
            if !problems.is_empty() {
                notes.insert(
                    "pause_problems".into(),
                    json!(problems.iter().take(20).collect::<Vec<_>>()),
                );
            }
            ok
        }
        Scenario::Large => {
            let configs: Vec<ConfigRef> = (0..plan.changes)
                .map(|i| special[i % special.len()].clone())
                .collect();
            log(&format!(
                "{} changes of {} KiB Secrets at {}/s",
                configs.len(),
                plan.large_secret_bytes / 1024,
                plan.rate
            ));
            ctx.drive_at_rate(configs, plan.rate, Some(plan.large_secret_bytes))
                .await;
            ctx.wait_reloads(timeout_for(plan.changes)).await
        }
        Scenario::Restart => {
            let configs = ctx.pick_configs(rng, plan.changes, standard);
            // A workload that was never reloaded records no hash, so a change made while the
            // controller is down cannot be told from the initial state (Reloader's semantics
            // too): every config is changed once first, and only its second change counts.
            ctx.set_phase("prime");
            log(&format!("priming: {} changes at once", configs.len()));
            ctx.drive_burst(configs.clone()).await;
            if !ctx.wait_reloads(timeout_for(plan.changes * 3)).await {
                log("WARNING: not every priming change was reloaded");
            }
            log(&format!(
                "{} changes at {}/s; SIGKILL after {}, down {}s",
                configs.len(),
                plan.rate,
                plan.kill_after,
                plan.down_s
            ));
            ctx.set_phase("before-kill");
            let kill_at = Duration::from_secs_f64(plan.kill_after as f64 / plan.rate);
            let drive = ctx.drive_at_rate(configs, plan.rate, None);
            let chaos = async {
                tokio::time::sleep(kill_at).await;
                ctx.set_phase("while-down");
                log("SIGKILL to the controller");
                procs[0].kill_hard(epoch).await;
                tokio::time::sleep(Duration::from_secs_f64(plan.down_s)).await;
                log("restarting the controller");
                let mut p = ControllerProc::spawn(
                    &cmd,
                    &controller_kubeconfig,
                    &envs[0],
                    log_path,
                    epoch,
                    sample_every,
                )?;
                if ready_url != "none" {
                    let ttr = p.wait_ready(&ready_url, ready_timeout, epoch).await?;
                    log(&format!("controller ready again after {ttr:.2}s"));
                    ready_times.push(ttr);
                }
                ctx.set_phase("after-restart");
                procs.push(p);
                Ok::<_, anyhow::Error>(())
            };
            let ((), chaos) = tokio::join!(drive, chaos);
            chaos?;
            ctx.wait_reloads(timeout_for(plan.changes)).await
        }
        Scenario::NoisyNeighbour => {
            let tenancy = tenancy.context("the noisy-neighbour population")?;
            tenancy::drive_noisy(&ctx, plan, tenancy, &mut notes).await
        }
        Scenario::Poisoned => {
            let tenancy = tenancy.context("the poisoned population")?;
            let pid = procs[0].pid;
            tenancy::drive_poisoned(&ctx, plan, tenancy, pid, &mut notes).await?
        }
        Scenario::All => unreachable!(),
    };
    let t_reloaded = epoch.elapsed().as_secs_f64();
    log(&format!(
        "{} expected reloads seen; settling {}s",
        if completed { "all" } else { "NOT all" },
        plan.settle_s
    ));
    tokio::time::sleep(plan.settle()).await;
    let t_end = epoch.elapsed().as_secs_f64();

    // ---- final readings
    let proxy_final = proxy.as_ref().map(|p| p.stats());
    let audit = audit_counts(args, kubeconfig, wall_spawn, wall_changes);
    let api_after = apimetrics::scrape(client).await.ok();
    let own_after = own.snapshot();
    // The last process's /metrics (every replica's, when sharded), saved next to the results.
    let scrape_from: Vec<usize> = match lease_ns {
        Some(_) => (0..metrics_urls.len()).collect(),
        None => vec![0],
    };
    let mut final_metrics: Vec<Option<String>> = Vec::new();
    for i in scrape_from {
        let u = metrics_urls[i].clone();
        let body = match u.as_str() {
            "none" => None,
            _ => match tokio::task::spawn_blocking(move || controller::http_get(&u)).await {
                Ok(Some((200, body))) => Some(body),
                _ => None,
            },
        };
        if let Some(b) = &body {
            let file = match lease_ns {
                Some(_) => format!("{name}.r{i}.controller-metrics.txt"),
                None => format!("{name}.controller-metrics.txt"),
            };
            let _ = std::fs::write(results_dir.join(file), b);
        }
        final_metrics.push(body);
    }
    // Sharded: every replica stops at once (each hands over, then exits); otherwise the last
    // process (the earlier ones of `restart` were killed).
    let t_stop = Instant::now();
    let n_procs = procs.len();
    let stopping = procs
        .iter_mut()
        .enumerate()
        .filter(|(i, _)| lease_ns.is_some() || i + 1 == n_procs)
        .map(|(_, p)| p.terminate(Duration::from_secs(30), epoch));
    let exits = futures::future::join_all(stopping).await;
    notes.insert(
        "shutdown_s".into(),
        json!(report::round(t_stop.elapsed().as_secs_f64())),
    );
    let mut per_process = Vec::new();
    let mut timelines = Vec::new();
    for (i, p) in procs.iter_mut().enumerate() {
        let changes_from = if i == 0 || lease_ns.is_some() {
            t_changes
        } else {
            p.ready_at.unwrap_or(p.started_at)
        };
        let samples = p.samples();
        // A compact timeline (at most ~300 points): where the peak was, how RSS moved.
        let step = samples.len().div_ceil(300).max(1);
        timelines.push(json!({
            "pid": p.pid,
            "started_s": report::round(p.started_at),
            "ready_s": p.ready_at.map(report::round),
            "t_s": samples.iter().step_by(step).map(|s| report::round(s.t)).collect::<Vec<_>>(),
            "rss_mib": samples.iter().step_by(step).map(|s| report::round(s.rss_kib as f64 / 1024.0)).collect::<Vec<_>>(),
            "hwm_mib": samples.iter().step_by(step).map(|s| report::round(s.hwm_kib as f64 / 1024.0)).collect::<Vec<_>>(),
            "cpu_s": samples.iter().step_by(step).map(|s| (s.cpu_s * 100.0).round() / 100.0).collect::<Vec<_>>(),
        }));
        per_process.push(report::resources(
            &samples,
            p.ready_at,
            p.started_at,
            changes_from,
        ));
    }
    watches.iter().for_each(|w| w.abort());
    rollouts_task.abort();
    let _ = std::fs::remove_file(&proxy_kubeconfig);

    // ---- verdict and figures
    let st = state.lock().unwrap();
    let (mut verdict, reloads) = st.evaluate(initial_hashes);
    if !completed && verdict.missing == 0 {
        verdict.passed = false;
        verdict
            .examples
            .push("timed out waiting for reloads".into());
    }
    let (mut churn_json, mut sharding_json) = (None, None);
    if let Some(o) = &churn_outcome {
        let errors = final_metrics
            .first()
            .cloned()
            .flatten()
            .map(|m| churn::controller_errors(&m));
        let failed = o.failed()
            || errors.as_ref().is_some_and(|e| {
                e["reload_failures"].as_f64().unwrap_or(0.0) > 0.0
                    || e["errors_permanent"].as_f64().unwrap_or(0.0) > 0.0
            });
        if failed {
            verdict.passed = false;
            verdict.examples.push(format!(
                "churn: {} create / {} delete errors, {} failed /ready polls, controller errors {}: {}",
                o.create_errors,
                o.delete_errors,
                o.health_failures,
                errors.clone().unwrap_or_default(),
                o.errors.join("; ")
            ));
        }
        let codes = proxy_final
            .as_ref()
            .map(|s| json!(s.workload_write_codes))
            .unwrap_or_default();
        churn_json = Some(json!({
                "outcome": o,
                "controller_errors_at_end": errors,
                "controller_workload_write_codes": codes,
                "note": "404 on a workload write: the controller wrote to a workload deleted meanwhile and the API server refused (nothing written); a churned workload seen again after its deletion fails the run (resurrected)",
        }));
    }
    if let Some(c) = &converged {
        let owned_end: Vec<Option<u64>> = final_metrics
            .iter()
            .map(|m| m.as_deref().and_then(sharded::owned_namespaces))
            .collect();
        sharding_json = Some(sharded::report(
            &names,
            &per_process,
            c,
            &owned_end,
            n_namespaces,
        ));
    }
    let mut by_tag: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for r in &reloads {
        by_tag.entry(r.tag.clone()).or_default().push(r.latency_s);
    }
    let all_lat: Vec<f64> = reloads.iter().map(|r| r.latency_s).collect();
    let latency = report::summarize(&all_lat);
    let latency_by_tag: BTreeMap<&String, report::LatencySummary> = by_tag
        .iter()
        .map(|(k, v)| (k, report::summarize(v)))
        .collect();
    let svg = report::cdf_svg(
        &format!("{name}: reload latency CDF"),
        &by_tag
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect::<Vec<_>>(),
    );
    std::fs::write(results_dir.join(format!("{name}.svg")), svg)?;

    // Rate check (ratelimit): the controller's workload writes during the change phase.
    let write_times: Vec<f64> = match &proxy_final {
        Some(s) => s
            .workload_writes
            .iter()
            .copied()
            .filter(|&t| t >= t_changes)
            .collect(),
        None => st
            .template_change_times()
            .into_iter()
            .filter(|&t| t >= t_changes)
            .collect(),
    };
    if scenario == Scenario::Ratelimit {
        let (rate, burst) = (f64::from(plan.limit_rate), f64::from(plan.limit_burst));
        let (violations, worst, max_1s) =
            report::rate_envelope(&write_times, rate, burst, RATE_SLACK_S);
        // The same envelope for the reads that precede each write: the limiter's own output
        // when the controller takes its token before reading the workload.
        let read_times: Vec<f64> = proxy_final
            .as_ref()
            .map(|s| {
                s.workload_reads
                    .iter()
                    .copied()
                    .filter(|&t| t >= t_changes)
                    .collect()
            })
            .unwrap_or_default();
        let (_, read_worst, read_max_1s) = report::rate_envelope(&read_times, rate, burst, 0.0);
        let span = match (write_times.first(), write_times.last()) {
            (Some(a), Some(b)) => b - a,
            _ => 0.0,
        };
        let ideal = (write_times.len() as f64 - f64::from(plan.limit_burst)).max(0.0)
            / f64::from(plan.limit_rate);
        notes.insert(
            "rate_limit".into(),
            json!({
                "limit": plan.limit_rate, "burst": plan.limit_burst,
                "writes": write_times.len(),
                "writes_measured_at": if proxy_final.is_some() { "proxy (request arrival)" } else { "workload watch (template change seen)" },
                "max_writes_in_any_1s": max_1s,
                "allowed_in_any_1s": burst + rate,
                "envelope_slack_s": RATE_SLACK_S,
                "envelope_violations": violations,
                "worst_excess_over_bucket": worst,
                "reads": read_times.len(),
                "max_reads_in_any_1s": read_max_1s,
                "worst_read_excess_over_bucket": read_worst,
                "first_to_last_write_s": report::round(span),
                "ideal_s": report::round(ideal),
                "ratio_to_ideal": if ideal > 0.0 { (span / ideal * 100.0).round() / 100.0 } else { 0.0 },
            }),
        );
        if violations > 0 {
            verdict.passed = false;
            verdict.examples.push(format!(
                "{violations} windows exceeded the rate limit's token bucket (worst +{worst})"
            ));
        }
        // The limiter is there to protect the API server: it must never have to push back.
        let throttled = proxy_final
            .as_ref()
            .and_then(|s| s.status_codes.get(&429).copied())
            .unwrap_or(0)
            .max(audit.throttled);
        if throttled > 0 {
            verdict.passed = false;
            verdict.examples.push(format!(
                "the API server answered 429 (too many requests) to {throttled} of the controller's requests"
            ));
        }
    }

    // API requests.
    let api_json = match (&proxy_at_changes, &proxy_final) {
        (Some(a), Some(b)) => {
            let startup = a.counts.clone();
            let changes = report::minus(&b.counts, &a.counts);
            json!({
                "method": "counting proxy: the controller's kubeconfig points at a plain-HTTP proxy in the load generator that forwards to the API server with the real credentials and counts every request by verb and resource",
                "startup_total": report::total(&startup),
                "change_phase_total": report::total(&changes),
                "startup": report::counts_json(&startup),
                "change_phase": report::counts_json(&changes),
                "startup_bytes_received": a.bytes_received,
                "startup_bytes_received_total": a.bytes_received.values().sum::<u64>(),
                "change_phase_bytes_received_total": b.bytes_received.values().sum::<u64>() - a.bytes_received.values().sum::<u64>(),
                "status_codes": b.status_codes,
                "upstream_errors": b.upstream_errors,
                "workload_writes_in_change_phase": write_times.len(),
            })
        }
        _ => json!({"method": "direct (no proxy): see apiserver_delta"}),
    };
    let apiserver_delta = match (&api_before, &api_after) {
        (Some(a), Some(b)) => {
            let d = apimetrics::delta(a, b);
            let own_d = report::minus(&own_after, &own_before);
            let interesting = |r: &str| {
                [
                    "configmaps",
                    "secrets",
                    "deployments",
                    "statefulsets",
                    "daemonsets",
                    "cronjobs",
                    "jobs",
                    "namespaces",
                    "events",
                    "leases",
                ]
                .iter()
                .any(|k| r.starts_with(k))
            };
            let d_f: proxy::Counts = d.into_iter().filter(|((_, r), _)| interesting(r)).collect();
            json!({
                "note": "apiserver_request_total delta from controller start to the end, whole cluster (includes kube-controller-manager, the load generator and any other user of the cluster); writes minus the load generator's own writes are an upper bound of the controller's writes",
                "delta": report::counts_json(&d_f),
                "load_generator_writes": report::counts_json(&own_d),
                "delta_minus_load_generator_writes": report::counts_json(&report::minus(&d_f, &own_d)),
            })
        }
        _ => json!(null),
    };

    let mut sorted_ms: Vec<f64> = all_lat.iter().map(|s| report::round(s * 1000.0)).collect();
    sorted_ms.sort_by(f64::total_cmp);
    let resources = match lease_ns {
        Some(_) => sharded::totals(&per_process),
        None => per_process.last().cloned().unwrap_or_default(),
    };
    Ok(json!({
        "scenario": scenario.name(),
        "scale": args.scale.name(),
        "run": {
            "id": run_id,
            "unix_time": std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_secs(),
            "machine": machine(),
            "loadavg_end": loadavg(),
            "changes_started_s": report::round(t_changes),
            "reloads_done_s": report::round(t_reloaded),
            "ended_s": report::round(t_end),
        },
        "controller": {
            "label": args.controller_label,
            "command": cmd,
            "replicas": plan.replicas,
            "binary_sha1": bin.and_then(file_sha1),
            "exit": exits,
            "log": log_path.display().to_string(),
            "through_proxy": proxy.is_some(),
        },
        "population": {
            "namespaces": n_namespaces,
            "workloads": n_workloads,
            "configs": n_configs,
        },
        "plan": plan,
        "notes": notes,
        "correctness": verdict,
        "latency_ms": latency,
        "latency_ms_by_tag": latency_by_tag,
        "latencies_ms_sorted": if sorted_ms.len() <= 20_000 { json!(sorted_ms) } else { json!(null) },
        "time_to_ready_s": ready_times.iter().map(|t| (t * 1000.0).round() / 1000.0).collect::<Vec<_>>(),
        "resources": resources,
        "resources_per_process": per_process,
        "sharding": sharding_json,
        "churn": churn_json,
        "resource_timeline": timelines,
        "api_requests": api_json,
        "apiserver_delta": apiserver_delta,
        "api_requests_audit": audit.json,
        "watch": {"events": st.watch_events, "errors": st.watch_errors},
    }))
}
