//! After the scenario: the final readings (proxy, audit log, the API server's counters, the
//! controller's `/metrics`), stopping the controller, and the report: the verdict with the
//! scenario's own checks, latency figures and plot, resources and API requests, as JSON.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Result;
use serde_json::{Map, Value, json};

use crate::args::Args;
use crate::controller::{self, ControllerProc};
use crate::launch::Controllers;
use crate::ledger::{Reload, State, Verdict};
use crate::objects::OwnRequests;
use crate::progress::log;
use crate::proxy::{Counts, Stats};
use crate::report::{self, Resources};
use crate::scenario::{Plan, Scenario};
use crate::setup::RunEnv;
use crate::{apimetrics, audit, churn, flapping, plot, sharded};

/// Timing slack of the rate-limit check: request latency jitter between the controller's limiter
/// and the proxy's clock on a shared 2-core machine (the strict excess is reported too).
const RATE_SLACK_S: f64 = 0.25;

/// What driving a scenario left: whether every expected reload was seen, the scenario's notes
/// for the report, the churn's outcome, and what the flapping check needs.
#[derive(Default)]
pub struct Driven {
    pub completed: bool,
    pub notes: Map<String, Value>,
    pub churn: Option<churn::Outcome>,
    pub flapping: Option<flapping::Flapped>,
    /// What fails the run besides the ledger's verdict (chaos: the checker, failed faults).
    pub problems: Vec<String>,
}

/// Counters read before the controller started.
pub struct Before {
    pub api: Option<Counts>,
    pub own: Counts,
}

/// Run-clock times (seconds since the epoch of the run) of the run's phases.
pub struct Times {
    pub changes: f64,
    pub reloaded: f64,
    pub end: f64,
    /// Wall clock when changes started (for the audit log).
    pub wall_changes: jiff::Timestamp,
}

/// What was read at the end of the run, the controller stopped.
pub struct Final {
    pub proxy_at_changes: Option<Stats>,
    pub proxy: Option<Stats>,
    pub audit: AuditCounts,
    pub api: Option<Counts>,
    pub own: Counts,
    /// Each scraped replica's `/metrics` (the last process only, unless sharded).
    pub metrics: Vec<Option<String>>,
    pub exits: Vec<String>,
    pub per_process: Vec<Resources>,
    pub timelines: Vec<Value>,
}

/// Reads the final figures and stops the controller (every replica at once when sharded, else
/// the last process: the earlier ones of `restart` were killed).
pub async fn final_readings(
    env: &RunEnv<'_>,
    ctl: &mut Controllers,
    own: &OwnRequests,
    proxy_at_changes: Option<Stats>,
    times: &Times,
    notes: &mut Map<String, Value>,
) -> Final {
    let proxy = ctl.proxy.as_ref().map(|p| p.stats());
    let audit = audit_counts(env.args, env.kubeconfig, ctl.wall_spawn, times.wall_changes);
    let api = apimetrics::scrape(env.client).await.ok();
    let own = own.snapshot();
    let metrics = scrape_metrics(env, ctl).await;
    let t_stop = Instant::now();
    let n_procs = ctl.procs.len();
    let sharded = ctl.sharded();
    let stopping = ctl
        .procs
        .iter_mut()
        .enumerate()
        .filter(|(i, _)| sharded || i + 1 == n_procs)
        .map(|(_, p)| p.terminate(Duration::from_secs(30), env.epoch));
    let exits = futures::future::join_all(stopping).await;
    notes.insert(
        "shutdown_s".into(),
        json!(report::round(t_stop.elapsed().as_secs_f64())),
    );
    let (mut per_process, mut timelines) = (Vec::new(), Vec::new());
    for (i, p) in ctl.procs.iter().enumerate() {
        // A process started later (restart) has its change phase from its own start.
        let changes_from = if i == 0 || sharded {
            times.changes
        } else {
            p.ready_at.unwrap_or(p.started_at)
        };
        let samples = p.samples();
        timelines.push(timeline(p, &samples));
        per_process.push(report::resources(
            &samples,
            p.ready_at,
            p.started_at,
            changes_from,
        ));
    }
    Final {
        proxy_at_changes,
        proxy,
        audit,
        api,
        own,
        metrics,
        exits,
        per_process,
        timelines,
    }
}

/// The last process's /metrics (every replica's, when sharded), saved next to the results.
async fn scrape_metrics(env: &RunEnv<'_>, ctl: &Controllers) -> Vec<Option<String>> {
    let scrape_from: Vec<usize> = match ctl.sharded() {
        true => (0..ctl.replicas.len()).collect(),
        false => vec![0],
    };
    let mut bodies = Vec::new();
    for i in scrape_from {
        let u = ctl.replicas[i].metrics_url.clone();
        let body = match u.as_str() {
            "none" => None,
            _ => match tokio::task::spawn_blocking(move || controller::http_get(&u)).await {
                Ok(Some((200, body))) => Some(body),
                _ => None,
            },
        };
        if let Some(b) = &body {
            let file = match ctl.sharded() {
                true => format!("{}.r{i}.controller-metrics.txt", env.name),
                false => format!("{}.controller-metrics.txt", env.name),
            };
            let _ = std::fs::write(env.results_dir.join(file), b);
        }
        bodies.push(body);
    }
    bodies
}

/// A compact timeline of one process (at most ~300 points): where the peak was, how RSS moved.
fn timeline(p: &ControllerProc, samples: &[controller::Sample]) -> Value {
    let step = samples.len().div_ceil(300).max(1);
    let pick = |f: &dyn Fn(&controller::Sample) -> f64| -> Vec<f64> {
        samples.iter().step_by(step).map(f).collect()
    };
    json!({
        "pid": p.pid,
        "started_s": report::round(p.started_at),
        "ready_s": p.ready_at.map(report::round),
        "t_s": pick(&|s| report::round(s.t)),
        "rss_mib": pick(&|s| report::round(s.rss_kib as f64 / 1024.0)),
        "hwm_mib": pick(&|s| report::round(s.hwm_kib as f64 / 1024.0)),
        "cpu_s": pick(&|s| (s.cpu_s * 100.0).round() / 100.0),
    })
}

/// The API server's count of the controller's requests (audit log), per phase.
pub struct AuditCounts {
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

/// Fails `verdict` when the churn went wrong: load-generator errors, failed health polls,
/// a resurrected workload, or reload failures and permanent errors the controller counted.
/// Returns the churn's section of the report.
fn churn_check(o: &churn::Outcome, f: &Final, verdict: &mut Verdict) -> Value {
    let errors = f
        .metrics
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
    let codes = f
        .proxy
        .as_ref()
        .map(|s| json!(s.workload_write_codes))
        .unwrap_or_default();
    json!({
        "outcome": o,
        "controller_errors_at_end": errors,
        "controller_workload_write_codes": codes,
        "note": "404 on a workload write: the controller wrote to a workload deleted meanwhile and the API server refused (nothing written); a churned workload seen again after its deletion fails the run (resurrected)",
    })
}

/// The controller's workload writes during the change phase: as the proxy saw them arrive, or
/// (direct) as the load generator's watch saw the template changes.
fn workload_write_times(f: &Final, st: &State, t_changes: f64) -> Vec<f64> {
    let all = match &f.proxy {
        Some(s) => s.workload_writes.clone(),
        None => st.template_change_times(),
    };
    all.into_iter().filter(|&t| t >= t_changes).collect()
}

/// The rate-limit check (ratelimit): the writes must stay inside the token bucket's envelope
/// and the API server must never have answered 429. Returns the figures for the notes.
fn ratelimit_check(
    plan: &Plan,
    f: &Final,
    write_times: &[f64],
    t_changes: f64,
    verdict: &mut Verdict,
) -> Value {
    let (rate, burst) = (f64::from(plan.limit_rate), f64::from(plan.limit_burst));
    let (violations, worst, max_1s) = report::rate_envelope(write_times, rate, burst, RATE_SLACK_S);
    // The same envelope for the reads that precede each write: the limiter's own output
    // when the controller takes its token before reading the workload.
    let read_times: Vec<f64> = f
        .proxy
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
    let ideal = (write_times.len() as f64 - burst).max(0.0) / rate;
    if violations > 0 {
        verdict.passed = false;
        verdict.examples.push(format!(
            "{violations} windows exceeded the rate limit's token bucket (worst +{worst})"
        ));
    }
    // The limiter is there to protect the API server: it must never have to push back.
    let throttled = f
        .proxy
        .as_ref()
        .and_then(|s| s.status_codes.get(&429).copied())
        .unwrap_or(0)
        .max(f.audit.throttled);
    if throttled > 0 {
        verdict.passed = false;
        verdict.examples.push(format!(
            "the API server answered 429 (too many requests) to {throttled} of the controller's requests"
        ));
    }
    json!({
        "limit": plan.limit_rate, "burst": plan.limit_burst,
        "writes": write_times.len(),
        "writes_measured_at": if f.proxy.is_some() { "proxy (request arrival)" } else { "workload watch (template change seen)" },
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
    })
}

/// The controller's requests as the counting proxy saw them: start-up and change phase.
fn api_requests_json(f: &Final, workload_writes: usize) -> Value {
    let (Some(a), Some(b)) = (&f.proxy_at_changes, &f.proxy) else {
        return json!({"method": "direct (no proxy): see apiserver_delta"});
    };
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
        "workload_writes_in_change_phase": workload_writes,
    })
}

/// Resources whose `apiserver_request_total` delta the report keeps.
const DELTA_RESOURCES: [&str; 10] = [
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
];

/// The API server's own request counts over the run (every client), the load generator's
/// writes, and the difference.
fn apiserver_delta_json(before: &Before, f: &Final) -> Value {
    let (Some(a), Some(b)) = (&before.api, &f.api) else {
        return json!(null);
    };
    let d = apimetrics::delta(a, b);
    let own_d = report::minus(&f.own, &before.own);
    let d_f: Counts = d
        .into_iter()
        .filter(|((_, r), _)| DELTA_RESOURCES.iter().any(|k| r.starts_with(k)))
        .collect();
    json!({
        "note": "apiserver_request_total delta from controller start to the end, whole cluster (includes kube-controller-manager, the load generator and any other user of the cluster); writes minus the load generator's own writes are an upper bound of the controller's writes",
        "delta": report::counts_json(&d_f),
        "load_generator_writes": report::counts_json(&own_d),
        "delta_minus_load_generator_writes": report::counts_json(&report::minus(&d_f, &own_d)),
    })
}

/// Latencies by tag, the CDF plot written next to the results, and the summaries.
fn latency_figures(env: &RunEnv<'_>, reloads: &[Reload]) -> Result<(Vec<f64>, Value, Value)> {
    let mut by_tag: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for r in reloads {
        by_tag.entry(r.tag.clone()).or_default().push(r.latency_s);
    }
    let all: Vec<f64> = reloads.iter().map(|r| r.latency_s).collect();
    let latency = report::summarize(&all);
    let by_tag_summary: BTreeMap<String, report::LatencySummary> = by_tag
        .iter()
        .map(|(k, v)| (k.clone(), report::summarize(v)))
        .collect();
    let series: Vec<(String, Vec<f64>)> = by_tag.into_iter().collect();
    let svg = plot::cdf_svg(&format!("{}: reload latency CDF", env.name), &series)?;
    std::fs::write(env.results_dir.join(format!("{}.svg", env.name)), svg)?;
    Ok((all, json!(latency), json!(by_tag_summary)))
}

/// Everything the report is made of, gathered during the run.
pub struct Gathered<'a> {
    pub state: &'a State,
    pub initial_hashes: &'a BTreeMap<String, crate::objects::ConfigRef>,
    pub driven: Driven,
    pub ctl: &'a Controllers,
    pub before: Before,
    pub fin: Final,
    pub times: Times,
    pub population: Value,
    /// The running share's rollouts, and whether (and after how many seconds) their first pods
    /// were all Ready before the controller started.
    pub running: Option<(&'a crate::running::Rollouts, Option<(bool, f64)>)>,
}

/// The run's report (the result JSON, without what `run_one` adds about the setup).
pub fn report(env: &RunEnv<'_>, g: Gathered<'_>) -> Result<Value> {
    let Gathered {
        state: st,
        ctl,
        fin: f,
        mut driven,
        ..
    } = g;
    let (verdict, reloads) = st.evaluate(g.initial_hashes);
    let mut verdict = with_drive_problems(verdict, &driven);
    let churn_json = driven
        .churn
        .as_ref()
        .map(|o| churn_check(o, &f, &mut verdict));
    let flapping_json = driven.flapping.as_ref().map(|fl| {
        let metrics = f.metrics.first().cloned().flatten();
        flapping::check(fl, st, &env.plan, metrics.as_deref(), &mut verdict)
    });
    let running_json = g.running.map(|(rollouts, initially)| {
        let mut r = rollouts.evaluate(&reloads, &mut verdict);
        r["share"] = json!(env.plan.running_share);
        r["image"] = json!(env.plan.running_image);
        r["first_pods_ready"] =
            json!(initially.map(|(done, s)| json!({"all": done, "waited_s": report::round(s)})));
        r
    });
    let sharding_json = sharding_report(ctl, &f, &g.population);
    let (all_lat, latency, latency_by_tag) = latency_figures(env, &reloads)?;
    let write_times = workload_write_times(&f, st, g.times.changes);
    if env.scenario == Scenario::Waves {
        let metrics = f.metrics.first().cloned().flatten();
        let notes = crate::waves::check(metrics.as_deref(), &mut verdict);
        driven.notes.insert("waves".into(), notes);
    }
    if env.scenario == Scenario::Ratelimit {
        let notes = ratelimit_check(&env.plan, &f, &write_times, g.times.changes, &mut verdict);
        driven.notes.insert("rate_limit".into(), notes);
    }
    let mut sorted_ms: Vec<f64> = all_lat.iter().map(|s| report::round(s * 1000.0)).collect();
    sorted_ms.sort_by(f64::total_cmp);
    let resources = match ctl.sharded() {
        true => sharded::totals(&f.per_process),
        false => f.per_process.last().cloned().unwrap_or_default(),
    };
    let first = &ctl.replicas[0];
    Ok(json!({
        "scenario": env.scenario.name(),
        "scale": env.args.scale.name(),
        "run": {
            "id": env.run_id,
            "unix_time": std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_secs(),
            "machine": machine(),
            "loadavg_end": loadavg(),
            "changes_started_s": report::round(g.times.changes),
            "reloads_done_s": report::round(g.times.reloaded),
            "ended_s": report::round(g.times.end),
        },
        "controller": {
            "label": env.args.controller_label,
            "commit": env.commit,
            "command": first.cmd,
            "replicas": env.plan.replicas,
            "binary_sha1": env.bin.and_then(file_sha1),
            "exit": f.exits,
            "log": first.log_path.display().to_string(),
            "through_proxy": ctl.proxy.is_some(),
        },
        "population": g.population,
        "plan": env.plan,
        "notes": driven.notes,
        "correctness": verdict,
        "latency_ms": latency,
        "latency_ms_by_tag": latency_by_tag,
        "latencies_ms_sorted": if sorted_ms.len() <= 20_000 { json!(sorted_ms) } else { json!(null) },
        "time_to_ready_s": ctl.ready_times.iter().map(|t| (t * 1000.0).round() / 1000.0).collect::<Vec<_>>(),
        "resources": resources,
        "resources_per_process": f.per_process,
        "sharding": sharding_json,
        "churn": churn_json,
        "flapping": flapping_json,
        "running": running_json,
        "resource_timeline": f.timelines,
        "api_requests": api_requests_json(&f, write_times.len()),
        "apiserver_delta": apiserver_delta_json(&g.before, &f),
        "api_requests_audit": f.audit.json,
        "watch": {"events": st.watch_events, "errors": st.watch_errors},
    }))
}

/// The ledger's verdict, failed too when the drive timed out or a scenario found problems.
fn with_drive_problems(mut verdict: Verdict, driven: &Driven) -> Verdict {
    if !driven.completed && verdict.missing == 0 {
        verdict.passed = false;
        verdict
            .examples
            .push("timed out waiting for reloads".into());
    }
    for p in &driven.problems {
        verdict.passed = false;
        verdict.examples.push(p.clone());
    }
    verdict
}

/// Each replica's share at the end, with `--sharding` (`None`: one unsharded controller).
fn sharding_report(ctl: &Controllers, f: &Final, population: &Value) -> Option<Value> {
    let c = ctl.converged.as_ref()?;
    let owned_end: Vec<Option<u64>> = f
        .metrics
        .iter()
        .map(|m| m.as_deref().and_then(sharded::owned_namespaces))
        .collect();
    let received_end: Vec<Option<f64>> = f
        .metrics
        .iter()
        .map(|m| m.as_deref().and_then(sharded::received_mib_of))
        .collect();
    let n_namespaces = population["namespaces"].as_u64().unwrap_or(0) as usize;
    Some(sharded::report(
        &ctl.names(),
        &f.per_process,
        c,
        &owned_end,
        &received_end,
        n_namespaces,
    ))
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

/// The 1, 5 and 15-minute load averages.
pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::Scale;

    fn fin(proxy: Stats) -> Final {
        Final {
            proxy_at_changes: Some(Stats::default()),
            proxy: Some(proxy),
            audit: AuditCounts {
                json: json!(null),
                throttled: 0,
            },
            api: None,
            own: Counts::new(),
            metrics: vec![],
            exits: vec![],
            per_process: vec![],
            timelines: vec![],
        }
    }

    #[test]
    fn the_rate_check_fails_on_writes_above_the_bucket_and_on_a_429() {
        let plan = Plan::new(Scenario::Ratelimit, Scale::Small);
        let (rate, burst) = (f64::from(plan.limit_rate), plan.limit_burst as usize);
        // The burst at once, then one write per token: inside the envelope.
        let mut paced: Vec<f64> = vec![10.0; burst];
        paced.extend((1..=20).map(|i| 10.0 + f64::from(i) / rate));
        let mut v = Verdict {
            passed: true,
            ..Default::default()
        };
        let notes = ratelimit_check(&plan, &fin(Stats::default()), &paced, 10.0, &mut v);
        assert!(v.passed, "{notes}");
        assert_eq!(notes["envelope_violations"], 0);
        assert_eq!(notes["writes"], paced.len());
        // Twice the burst at once: over the bucket.
        let flood = vec![10.0; 2 * burst + 2];
        let notes = ratelimit_check(&plan, &fin(Stats::default()), &flood, 10.0, &mut v);
        assert!(!v.passed && notes["envelope_violations"].as_u64().unwrap() > 0);
        // A 429 from the API server fails a run whose writes were paced.
        let mut throttled = Stats::default();
        throttled.status_codes.insert(429, 1);
        let mut v = Verdict {
            passed: true,
            ..Default::default()
        };
        ratelimit_check(&plan, &fin(throttled), &paced, 10.0, &mut v);
        assert!(!v.passed && v.examples[0].contains("429"));
    }

    #[test]
    fn the_apiserver_delta_keeps_the_resources_involved_and_subtracts_own_writes() {
        let key = |v: &str, r: &str| (v.to_string(), r.to_string());
        let before = Before {
            api: Some(Counts::from([(key("patch", "configmaps"), 5)])),
            own: Counts::new(),
        };
        let mut f = fin(Stats::default());
        f.api = Some(Counts::from([
            (key("patch", "configmaps"), 15),
            (key("get", "nodes"), 7),
            (key("patch", "deployments"), 4),
        ]));
        f.own = Counts::from([(key("patch", "configmaps"), 10)]);
        let d = apiserver_delta_json(&before, &f);
        assert_eq!(
            d["delta"],
            json!({"patch configmaps": 10, "patch deployments": 4})
        );
        assert_eq!(
            d["delta_minus_load_generator_writes"],
            json!({"patch deployments": 4})
        );
        assert_eq!(
            apiserver_delta_json(
                &Before {
                    api: None,
                    own: Counts::new()
                },
                &f
            ),
            json!(null)
        );
    }
}
