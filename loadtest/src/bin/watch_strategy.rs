//! Measures the two ways a replica can watch the configs of the namespaces it owns, at a given
//! number of namespaces: one cluster-wide watch per kind that drops events of namespaces it does
//! not own (what kube-reloader does), or one watch per owned namespace.
//!
//! The parent creates the population once (labelled namespaces, each with ConfigMaps), then for
//! every (strategy, share) runs a child process that opens the watches, reports when the initial
//! lists are in, and counts the change events for its namespaces while the parent changes
//! ConfigMaps spread over all namespaces. Figures: time to sync, the child's RSS and CPU, the API
//! server's RSS, CPU, open watch requests and watch-event bytes (from its /metrics and /proc).
//!
//! ```sh
//! cargo build --release -p kube-reloader-loadtest --bin kube-reloader-watch-strategy
//! KUBECONFIG=$(bash hack/cluster.sh kubeconfig | tail -1) \
//!   $CARGO_TARGET_DIR/release/kube-reloader-watch-strategy --namespaces 10000
//! ```
//!
//! Each watch is its own HTTP/1.1 connection with kube-rs (as configured here and in
//! kube-reloader): per-namespace watches cost one socket each on both sides.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::{Parser, ValueEnum};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client, ResourceExt};
use serde::Serialize;
use serde_json::json;

const LABEL: &str = "kube-reloader-watch-strategy";

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
enum Strategy {
    /// One watch for all namespaces; events of namespaces not owned are dropped on arrival.
    ClusterWide,
    /// One watch per owned namespace.
    PerNamespace,
}

#[derive(Parser, Debug)]
#[command(about = "Cluster-wide vs per-namespace watches at many namespaces")]
struct Args {
    /// Namespaces in the population.
    #[arg(long, default_value_t = 10_000)]
    namespaces: usize,
    /// ConfigMaps per namespace.
    #[arg(long, default_value_t = 2)]
    configs_per_namespace: usize,
    /// Replica counts to measure: a replica owns 1/N of the namespaces.
    #[arg(long, value_delimiter = ',', default_value = "1,4")]
    replicas: Vec<usize>,
    /// ConfigMap changes made while each strategy watches (spread over all namespaces).
    #[arg(long, default_value_t = 2_000)]
    changes: usize,
    /// Where the report goes.
    #[arg(long, default_value = "loadtest/results")]
    out: PathBuf,
    /// Keep the population (the next run reuses it).
    #[arg(long)]
    keep: bool,
    /// Internal: run one measurement (child process).
    #[arg(long, hide = true)]
    measure: Option<Strategy>,
    /// Internal: the owned namespaces' share, 1/N (child process).
    #[arg(long, hide = true, default_value_t = 1)]
    share: usize,
}

fn ns_name(i: usize) -> String {
    format!("ws-{i:05}")
}

/// The namespaces replica 0 of `replicas` owns: a fixed 1/N subset.
fn owned(namespaces: usize, replicas: usize) -> Vec<String> {
    (0..namespaces)
        .filter(|i| i % replicas == 0)
        .map(ns_name)
        .collect()
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    match args.measure {
        Some(strategy) => child(&args, strategy).await,
        None => parent(&args).await,
    }
}

// ---------------------------------------------------------------- child: the watching side

async fn child(args: &Args, strategy: Strategy) -> Result<()> {
    let client = Client::try_default().await?;
    let mine = owned(args.namespaces, args.share);
    let owned_set: std::collections::HashSet<String> = mine.iter().cloned().collect();
    let apis: Vec<Api<ConfigMap>> = match strategy {
        Strategy::ClusterWide => vec![Api::all(client.clone())],
        Strategy::PerNamespace => mine
            .iter()
            .map(|ns| Api::namespaced(client.clone(), ns))
            .collect(),
    };
    let streams = apis.len();
    // Streaming lists, as kube-reloader's config watches use against servers that serve them.
    let config = watcher::Config::default().labels(LABEL).streaming_lists();
    let synced = Arc::new(AtomicUsize::new(0));
    let relevant = Arc::new(AtomicUsize::new(0));
    let dropped = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let merged = futures::stream::select_all(
        apis.into_iter()
            .map(|api| watcher::watcher(api, config.clone()).boxed()),
    );
    let counting = {
        let (synced, relevant, dropped) = (synced.clone(), relevant.clone(), dropped.clone());
        tokio::spawn(async move {
            let mut merged = merged;
            while let Some(event) = merged.next().await {
                match event {
                    Ok(Event::InitDone) => {
                        synced.fetch_add(1, Ordering::SeqCst);
                    }
                    Ok(Event::Apply(cm)) => {
                        if owned_set.contains(&cm.namespace().unwrap_or_default()) {
                            relevant.fetch_add(1, Ordering::SeqCst);
                        } else {
                            dropped.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                    Ok(_) => {}
                    Err(e) => eprintln!("[child] watch error: {e}"),
                }
            }
        })
    };
    while synced.load(Ordering::SeqCst) < streams {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let sync_s = started.elapsed().as_secs_f64();
    let at_sync = proc_stats(std::process::id());
    println!("synced {sync_s}");
    std::io::stdout().flush()?;
    // The parent writes how many owned changes it made, then we wait for them.
    let mut line = String::new();
    std::io::stdin().read_line(&mut line)?;
    let expected: usize = line
        .trim()
        .parse()
        .context("expected count from the parent")?;
    let deadline = Instant::now() + Duration::from_secs(300);
    while relevant.load(Ordering::SeqCst) < expected && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let end = proc_stats(std::process::id());
    counting.abort();
    let result = json!({
        "watch_streams": streams,
        "sync_s": sync_s,
        "events_relevant": relevant.load(Ordering::SeqCst),
        "events_expected": expected,
        "events_dropped": dropped.load(Ordering::SeqCst),
        "rss_at_sync_mib": at_sync.rss_mib,
        "rss_peak_mib": end.hwm_mib,
        "cpu_to_sync_s": at_sync.cpu_s,
        "cpu_total_s": end.cpu_s,
        "open_fds": end.fds,
    });
    println!("result {result}");
    Ok(())
}

// ---------------------------------------------------------------- parent: population, changes

#[derive(Serialize)]
struct Row {
    strategy: Strategy,
    replicas: usize,
    owned_namespaces: usize,
    child: serde_json::Value,
    apiserver_watch_requests: f64,
    apiserver_rss_mib: f64,
    apiserver_cpu_s: f64,
    apiserver_watch_event_mib: f64,
    changes_s: f64,
}

async fn parent(args: &Args) -> Result<()> {
    let client = Client::try_default().await?;
    let setup = Instant::now();
    populate(&client, args).await?;
    eprintln!(
        "[ws] population ready: {} namespaces x {} ConfigMaps in {:.1}s",
        args.namespaces,
        args.configs_per_namespace,
        setup.elapsed().as_secs_f64()
    );
    let apiserver_pid = apiserver_pid()?;
    let mut rows = Vec::new();
    let mut round = 0usize;
    for &replicas in &args.replicas {
        for strategy in [Strategy::ClusterWide, Strategy::PerNamespace] {
            round += 1;
            rows.push(measure(&client, args, strategy, replicas, apiserver_pid, round).await?);
            // Let the API server release the watches before the next round.
            tokio::time::sleep(Duration::from_secs(5)).await;
        }
    }
    let report = render(args, &rows);
    std::fs::create_dir_all(&args.out)?;
    let base = args
        .out
        .join(format!("watch-strategy-{}ns", args.namespaces));
    std::fs::write(base.with_extension("md"), &report)?;
    std::fs::write(
        base.with_extension("json"),
        serde_json::to_vec_pretty(&json!({"args": format!("{args:?}"), "rows": rows}))?,
    )?;
    println!("{report}");
    if !args.keep {
        cleanup(&client).await?;
    }
    Ok(())
}

async fn populate(client: &Client, args: &Args) -> Result<()> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let existing = namespaces
        .list(&ListParams::default().labels(LABEL))
        .await?
        .items
        .len();
    if existing == args.namespaces {
        return Ok(());
    }
    if existing > 0 {
        bail!(
            "{existing} namespaces labelled {LABEL} exist (another population): delete them first"
        );
    }
    let client = client.clone();
    let per = args.configs_per_namespace;
    futures::stream::iter(0..args.namespaces)
        .map(|i| {
            let client = client.clone();
            async move {
                let name = ns_name(i);
                let ns: Namespace = serde_json::from_value(json!({
                    "metadata": {"name": name, "labels": {LABEL: "true"}}
                }))?;
                Api::<Namespace>::all(client.clone())
                    .create(&PostParams::default(), &ns)
                    .await?;
                let cms: Api<ConfigMap> = Api::namespaced(client, &name);
                for c in 0..per {
                    let cm: ConfigMap = serde_json::from_value(json!({
                        "metadata": {"name": format!("cfg-{c}"), "labels": {LABEL: "true"}},
                        "data": {"v": "0", "pad": "x".repeat(512)}
                    }))?;
                    cms.create(&PostParams::default(), &cm).await?;
                }
                anyhow::Ok(())
            }
        })
        .buffer_unordered(64)
        .try_collect::<Vec<_>>()
        .await?;
    Ok(())
}

async fn cleanup(client: &Client) -> Result<()> {
    let api: Api<Namespace> = Api::all(client.clone());
    let names: Vec<String> = api
        .list(&ListParams::default().labels(LABEL))
        .await?
        .items
        .iter()
        .map(|n| n.name_any())
        .collect();
    futures::stream::iter(names)
        .for_each_concurrent(64, |n| {
            let api = api.clone();
            async move {
                let _ = api.delete(&n, &Default::default()).await;
            }
        })
        .await;
    Ok(())
}

async fn measure(
    client: &Client,
    args: &Args,
    strategy: Strategy,
    replicas: usize,
    apiserver_pid: u32,
    round: usize,
) -> Result<Row> {
    let owned_namespaces = owned(args.namespaces, replicas).len();
    eprintln!("[ws] {strategy:?}, 1/{replicas} of the namespaces ({owned_namespaces})");
    let before = ApiserverStats::read(client, apiserver_pid).await?;
    let mut child = Command::new(std::env::current_exe()?)
        .args([
            "--namespaces",
            &args.namespaces.to_string(),
            "--share",
            &replicas.to_string(),
            "--measure",
            match strategy {
                Strategy::ClusterWide => "cluster-wide",
                Strategy::PerNamespace => "per-namespace",
            },
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()?;
    let mut out = BufReader::new(child.stdout.take().expect("piped"));
    let mut line = String::new();
    out.read_line(&mut line)?;
    if !line.starts_with("synced") {
        bail!("the watching child did not sync: {line:?}");
    }
    let synced = ApiserverStats::read(client, apiserver_pid).await?;
    // Changes spread over all namespaces; the child waits for the ones in its share.
    let started = Instant::now();
    let expected = make_changes(client, args, replicas, round).await?;
    let mut stdin = child.stdin.take().expect("piped");
    writeln!(stdin, "{expected}")?;
    line.clear();
    out.read_line(&mut line)?;
    let changes_s = started.elapsed().as_secs_f64();
    let child_result: serde_json::Value = serde_json::from_str(
        line.strip_prefix("result ")
            .with_context(|| format!("child result: {line:?}"))?,
    )?;
    let _ = child.wait();
    let after = ApiserverStats::read(client, apiserver_pid).await?;
    Ok(Row {
        strategy,
        replicas,
        owned_namespaces,
        child: child_result,
        apiserver_watch_requests: synced.watch_requests - before.watch_requests,
        apiserver_rss_mib: synced.rss_mib - before.rss_mib,
        apiserver_cpu_s: after.cpu_s - before.cpu_s,
        apiserver_watch_event_mib: (after.watch_event_bytes - before.watch_event_bytes) / 1048576.0,
        changes_s,
    })
}

/// Patches `args.changes` ConfigMaps spread over all namespaces, each to a unique value (so
/// every one is a real change and one watch event); returns how many fall in the measured
/// share (every `replicas`-th namespace).
async fn make_changes(
    client: &Client,
    args: &Args,
    replicas: usize,
    round: usize,
) -> Result<usize> {
    let changes: Vec<(usize, usize, usize)> = (0..args.changes)
        .map(|k| {
            (
                (k * 7919) % args.namespaces,
                k % args.configs_per_namespace,
                k,
            )
        })
        .collect();
    let expected = changes
        .iter()
        .filter(|(ns, _, _)| ns % replicas == 0)
        .count();
    eprintln!(
        "[ws] synced; making {} changes ({expected} in the share)",
        args.changes
    );
    futures::stream::iter(changes)
        .map(|(ns, c, k)| {
            let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns_name(ns));
            async move {
                api.patch(
                    &format!("cfg-{c}"),
                    &PatchParams::default(),
                    &Patch::Merge(json!({"data": {"v": format!("{round}-{k}")}})),
                )
                .await
            }
        })
        .buffer_unordered(32)
        .try_collect::<Vec<_>>()
        .await?;
    Ok(expected)
}

fn render(args: &Args, rows: &[Row]) -> String {
    let mut s = format!(
        "# Watch strategy at {} namespaces ({} ConfigMaps each, {} changes spread over all)\n\n\
         | strategy | replicas (share) | owned ns | watch streams | sync s | client RSS at sync / peak MiB | client CPU s (sync / total) | client fds | events kept / dropped | API server: open watches | API server: RSS delta MiB | API server: CPU s | API server: watch-event MiB sent |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
        args.namespaces, args.configs_per_namespace, args.changes
    );
    for r in rows {
        let c = &r.child;
        s.push_str(&format!(
            "| {:?} | {} | {} | {} | {:.1} | {:.0} / {:.0} | {:.1} / {:.1} | {} | {} / {} | {:.0} | {:.0} | {:.1} | {:.1} |\n",
            r.strategy,
            r.replicas,
            r.owned_namespaces,
            c["watch_streams"],
            c["sync_s"].as_f64().unwrap_or(f64::NAN),
            c["rss_at_sync_mib"].as_f64().unwrap_or(f64::NAN),
            c["rss_peak_mib"].as_f64().unwrap_or(f64::NAN),
            c["cpu_to_sync_s"].as_f64().unwrap_or(f64::NAN),
            c["cpu_total_s"].as_f64().unwrap_or(f64::NAN),
            c["open_fds"],
            c["events_relevant"],
            c["events_dropped"],
            r.apiserver_watch_requests,
            r.apiserver_rss_mib,
            r.apiserver_cpu_s,
            r.apiserver_watch_event_mib,
        ));
    }
    s
}

// ---------------------------------------------------------------- measurements

struct ProcStats {
    rss_mib: f64,
    hwm_mib: f64,
    cpu_s: f64,
    fds: usize,
}

fn proc_stats(pid: u32) -> ProcStats {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kib = |key: &str| {
        status
            .lines()
            .find(|l| l.starts_with(key))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(f64::NAN)
    };
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may contain spaces) start after the last ')'.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // utime and stime are fields 14 and 15 (1-based), i.e. 11 and 12 after the ')'.
    let hz = 100.0;
    ProcStats {
        rss_mib: kib("VmRSS:") / 1024.0,
        hwm_mib: kib("VmHWM:") / 1024.0,
        cpu_s: (ticks(11) + ticks(12)) / hz,
        fds: std::fs::read_dir(format!("/proc/{pid}/fd"))
            .map(|d| d.count())
            .unwrap_or(0),
    }
}

fn apiserver_pid() -> Result<u32> {
    let home = std::env::var("HOME")?;
    let path = format!("{home}/.cache/kube-reloader/cluster/pids/kube-apiserver.pid");
    std::fs::read_to_string(&path)
        .with_context(|| format!("reading {path} (the local control plane of hack/cluster.sh)"))?
        .trim()
        .parse()
        .context("the kube-apiserver pid")
}

struct ApiserverStats {
    watch_requests: f64,
    rss_mib: f64,
    cpu_s: f64,
    watch_event_bytes: f64,
}

impl ApiserverStats {
    async fn read(client: &Client, pid: u32) -> Result<Self> {
        let text = client
            .request_text(axum::http::Request::get("/metrics").body(Vec::new())?)
            .await?;
        let sum = |name: &str, filter: &dyn Fn(&str) -> bool| -> f64 {
            text.lines()
                .filter(|l| l.starts_with(name) && filter(l))
                .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .sum()
        };
        let proc = proc_stats(pid);
        Ok(Self {
            watch_requests: sum("apiserver_longrunning_requests{", &|l| {
                l.contains("verb=\"WATCH\"") && l.contains("resource=\"configmaps\"")
            }),
            rss_mib: proc.rss_mib,
            cpu_s: proc.cpu_s,
            watch_event_bytes: sum("apiserver_watch_events_sizes_sum{", &|l| {
                l.contains("resource=\"configmaps\"")
            }),
        })
    }
}
