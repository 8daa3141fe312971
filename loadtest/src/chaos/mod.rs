//! The `chaos` scenario: 3 replicas (`--sharding`, or `--enable-ha`), config changes at a
//! steady rate for `--duration`, and a fault schedule drawn from the run's seed
//! (schedule.rs) carried out against the replicas (fleet.rs), their fault proxies (faults.rs),
//! a namespace (the dead webhook of `poisoned`) and, with `--control-plane-faults`, the control
//! plane (plane.rs). Every fault is recorded with its real start, end and target; at the end the
//! whole history is checked (check.rs) and each violation shown with the faults around it.

pub mod check;
pub mod faults;
#[cfg(test)]
mod fixtures;
mod fleet;
pub mod impact;
mod plane;
pub mod schedule;
pub mod settings;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use serde_json::{Map, Value, json};

use crate::ctx::Ctx;
use crate::launch::Controllers;
use crate::objects::ConfigRef;
use crate::progress::log;
use crate::rng::Rng;
use crate::setup::RunEnv;
use check::FaultRecord;
use faults::FaultProxy;
use fleet::Fleet;
use plane::Plane;
use schedule::{Fault, Params, Scheduled};
use settings::{LEASE_S, Settings};

/// What the faults act on, shared by the concurrent fault tasks.
struct Effects<'a, 'c> {
    ctx: &'a Ctx,
    fleet: tokio::sync::Mutex<Fleet<'c>>,
    proxies: &'a [faults::FaultProxy],
    plane: Option<&'a Plane>,
    /// The load generator holds its writes while the API server restarts.
    hold: &'a AtomicBool,
    records: Mutex<Vec<FaultRecord>>,
    failures: Mutex<Vec<String>>,
    /// The schedule's lanes, held for a fault's whole course: a fault that ran late (a restart
    /// waiting for /ready at the medium scale) delays the next one of its lane instead of
    /// overlapping it.
    lanes: [tokio::sync::Mutex<()>; 3],
    /// No fault starts after this (run clock): what a late lane pushed past it is skipped.
    last_start_s: f64,
    /// `--chaos-control`: faults are recorded over their planned windows, not carried out.
    control: bool,
}

/// Drives the chaos run; returns whether every expected reload was seen, and the problems that
/// fail the run (the checker's violations, faults that could not be carried out); the fault
/// log and the findings go to `notes`.
pub async fn drive(
    env: &RunEnv<'_>,
    ctx: &Arc<Ctx>,
    ctl: &mut Controllers,
    rng: &mut Rng,
    standard: usize,
    notes: &mut Map<String, Value>,
) -> Result<(bool, Vec<String>)> {
    let s = Settings::new(env.args);
    let plane = match s.control_plane_faults {
        true => Some(Plane::own(env.kubeconfig)?),
        false => None,
    };
    let schedule_seed = rng.next_u64();
    let planned = match &s.fault_plan {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading the fault plan {}", path.display()))?;
            schedule::parse_plan(&text)
                .with_context(|| format!("parsing the fault plan {}", path.display()))?
        }
        None => schedule::schedule(schedule_seed, &params(&s, ctx.pop.namespaces.len())),
    };
    log(&format!(
        "chaos: {} faults {} over {:.0}s; changes at {}/s",
        planned.len(),
        match &s.fault_plan {
            Some(path) => format!("from {}", path.display()),
            None => format!("drawn (schedule seed {schedule_seed})"),
        },
        s.duration_s,
        env.plan.rate
    ));
    let configs = picks(ctx, rng, standard, (env.plan.rate * s.duration_s) as usize);
    let proxies = std::mem::take(&mut ctl.fault_proxies);
    let hold = AtomicBool::new(false);
    let fx = Effects {
        ctx,
        fleet: tokio::sync::Mutex::new(Fleet::new(ctl, env.epoch, s.enable_ha)),
        proxies: &proxies,
        plane: plane.as_ref(),
        hold: &hold,
        records: Mutex::default(),
        failures: Mutex::default(),
        lanes: Default::default(),
        last_start_s: ctx.now() + s.duration_s - s.tail_s,
        control: s.control,
    };
    let done = AtomicBool::new(false);
    let t0 = ctx.now();
    let run_faults = async {
        futures::future::join_all(planned.iter().map(|f| carry_out(f, t0, &fx))).await;
    };
    let changes = async {
        drive_changes(ctx, configs, env.plan.rate, &hold).await;
        done.store(true, Ordering::Relaxed);
    };
    tokio::join!(run_faults, changes, supervise(&fx, &done));
    let restored = fx.fleet.lock().await.restore(s.replicas).await;
    if let Err(e) = restored {
        fx.failures
            .lock()
            .unwrap()
            .push(format!("restoring the replicas: {e:#}"));
    }
    crate::tenancy::unpoison(&ctx.client, &ctx.run_id).await;
    let Effects {
        records, failures, ..
    } = fx;
    let injected: Vec<_> = proxies.iter().map(|p| p.injected()).collect();
    let writes = replica_writes(&proxies, ctx.epoch);
    ctl.fault_proxies = proxies;
    let timeout = Duration::from_secs_f64(env.plan.wait_base_s + 60.0);
    let completed = ctx.wait_reloads(timeout).await;
    // Late duplicates and stale writes land after the last expected reload.
    tokio::time::sleep(env.plan.settle()).await;
    let records = records.into_inner().unwrap();
    let failures = failures.into_inner().unwrap();
    let problems = verdict(
        ctx,
        &s,
        schedule_seed,
        &planned,
        &records,
        &failures,
        injected,
        &writes,
        notes,
    );
    Ok((completed, problems))
}

/// Each replica's workload writes, on the run clock.
fn replica_writes(proxies: &[FaultProxy], epoch: std::time::Instant) -> Vec<Vec<(f64, String)>> {
    let at = |t: std::time::Instant| t.saturating_duration_since(epoch).as_secs_f64();
    proxies
        .iter()
        .map(|p| {
            p.workload_writes()
                .into_iter()
                .map(|(t, ns)| (at(t), ns))
                .collect()
        })
        .collect()
}

fn params(s: &Settings, namespaces: usize) -> Params {
    Params {
        duration_s: s.duration_s,
        mean_gap_s: s.mean_gap_s,
        lease_s: LEASE_S,
        initial_replicas: s.replicas,
        namespaces,
        control_plane: s.control_plane_faults,
        recovery_s: s.recovery_s,
        tail_s: s.tail_s,
    }
}

/// `n` configs of random workloads of the standard population; a config may come up again
/// (folding, and stale writes, need changes of one config close together).
fn picks(ctx: &Ctx, rng: &mut Rng, standard: usize, n: usize) -> Vec<ConfigRef> {
    (0..n)
        .map(|_| {
            let w = &ctx.pop.workloads[rng.below(standard)];
            w.configs[rng.below(w.configs.len())].clone()
        })
        .collect()
}

/// The changes at `rate`, each write its own task; while `hold` is set (the API server is
/// restarting) the schedule waits and then goes on where it stopped, without a catch-up burst.
async fn drive_changes(ctx: &Arc<Ctx>, configs: Vec<ConfigRef>, rate: f64, hold: &AtomicBool) {
    let start = tokio::time::Instant::now();
    let mut lag = Duration::ZERO;
    let mut tasks = tokio::task::JoinSet::new();
    for (i, c) in configs.into_iter().enumerate() {
        tokio::time::sleep_until(start + lag + Duration::from_secs_f64(i as f64 / rate)).await;
        let held = tokio::time::Instant::now();
        while hold.load(Ordering::Relaxed) {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        lag += held.elapsed();
        let ctx = ctx.clone();
        tasks.spawn(async move {
            ctx.change(&c, None).await;
        });
    }
    while tasks.join_next().await.is_some() {}
}

/// Starts again, as the kubelet would, a replica whose process exited by itself, until `done`.
async fn supervise(fx: &Effects<'_, '_>, done: &AtomicBool) {
    while !done.load(Ordering::Relaxed) {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let t = fx.ctx.now();
        let exited = fx.fleet.lock().await.revive_exited().await;
        for (i, status) in exited {
            fx.record("exited", &format!("r{i}"), t, fx.ctx.now(), status);
        }
    }
}

impl Effects<'_, '_> {
    fn record(&self, kind: &str, target: &str, start_s: f64, end_s: f64, detail: String) {
        log(&format!(
            "chaos: {kind} {target} {start_s:.1}s..{end_s:.1}s {detail}"
        ));
        self.records.lock().unwrap().push(FaultRecord {
            kind: kind.into(),
            target: target.into(),
            start_s,
            end_s,
            detail,
        });
    }

    /// Waits while the API server restarts (the faults that use the load generator's client).
    async fn api_up(&self) {
        while self.hold.load(Ordering::Relaxed) {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn proxy(&self, replica: usize) -> Result<&faults::FaultProxy> {
        match self.proxies.get(replica) {
            Some(p) => Ok(p),
            None => bail!("no fault proxy for r{replica}"),
        }
    }
}

/// Waits for the fault's time, carries it out and records it (or why it could not be).
async fn carry_out(f: &Scheduled, t0: f64, fx: &Effects<'_, '_>) {
    let wait = (t0 + f.at_s - fx.ctx.now()).max(0.0);
    tokio::time::sleep(Duration::from_secs_f64(wait)).await;
    if fx.control {
        return record_planned(f, fx).await;
    }
    let lane = match &f.fault {
        x if x.disrupts_replicas() => Some(&fx.lanes[0]),
        x if x.control_plane() => Some(&fx.lanes[1]),
        Fault::Webhook { .. } => Some(&fx.lanes[2]),
        _ => None,
    };
    let _lane = match lane {
        Some(l) => Some(l.lock().await),
        None => None,
    };
    let mut start = fx.ctx.now();
    let target = target(&f.fault, fx.ctx);
    if start > fx.last_start_s {
        let what = format!("{} {target}", f.fault.kind());
        let why = format!("its lane was busy until {start:.1}s");
        fx.record("skipped", &what, start, start, why);
        return;
    }
    match apply(&f.fault, fx, &mut start).await {
        Ok(detail) => fx.record(f.fault.kind(), &target, start, fx.ctx.now(), detail),
        Err(e) => {
            let why = format!("{} {target} at {start:.1}s failed: {e:#}", f.fault.kind());
            fx.record(
                f.fault.kind(),
                &target,
                start,
                fx.ctx.now(),
                format!("FAILED: {e:#}"),
            );
            fx.failures.lock().unwrap().push(why);
        }
    }
}

/// The control run's stand-in for a fault: its kind and target over its planned window, with
/// nothing done (a fault of no duration gets the recovery window the impact adds anyway).
async fn record_planned(f: &Scheduled, fx: &Effects<'_, '_>) {
    let start = fx.ctx.now();
    tokio::time::sleep(Duration::from_secs_f64(f.fault.lasts_s())).await;
    let detail = format!(
        "control: not carried out ({:.1}s planned)",
        f.fault.lasts_s()
    );
    fx.record(
        f.fault.kind(),
        &target(&f.fault, fx.ctx),
        start,
        fx.ctx.now(),
        detail,
    );
}

fn target(f: &Fault, ctx: &Ctx) -> String {
    match f {
        Fault::Scale { to } => format!("replicas={to}"),
        Fault::Webhook { namespace, .. } => ctx.pop.namespaces[*namespace].clone(),
        Fault::ApiRestart | Fault::Compaction => "control-plane".into(),
        _ => f.replica().map_or(String::new(), |r| format!("r{r}")),
    }
}

/// The fault itself, until it is over; returns what it did. A fault on the fleet waits for
/// the one before it (a restart waiting for /ready): `start` is moved to when it took effect.
async fn apply(f: &Fault, fx: &Effects<'_, '_>, start: &mut f64) -> Result<String> {
    let sleep = |s: f64| tokio::time::sleep(Duration::from_secs_f64(s));
    let fleet = || async {
        let guard = fx.fleet.lock().await;
        (guard, fx.ctx.now())
    };
    Ok(match *f {
        Fault::Kill { replica, down_s } => {
            let (mut fleet, t) = fleet().await;
            *start = t;
            fleet.kill(replica).await;
            drop(fleet);
            sleep(down_s).await;
            let ttr = fx.fleet.lock().await.start(replica, None).await?;
            format!("SIGKILL, down {down_s:.1}s, ready {ttr:.1}s after its start")
        }
        Fault::Stop { replica, for_s } => {
            let (mut fleet, t) = fleet().await;
            *start = t;
            fleet.pause(replica, false);
            drop(fleet);
            sleep(for_s).await;
            fx.fleet.lock().await.pause(replica, true);
            format!("SIGSTOP for {for_s:.1}s (lease {LEASE_S}s), SIGCONT")
        }
        Fault::Skew {
            replica,
            offset_s,
            for_s,
        } => {
            *start = restart(fx, replica, Some(offset_s)).await?;
            sleep(for_s).await;
            restart(fx, replica, None).await?;
            format!("clock {offset_s:+}s for {for_s:.1}s, then restarted with the true clock")
        }
        Fault::Scale { to } => {
            let (mut fleet, t) = fleet().await;
            *start = t;
            fleet.scale(to).await?
        }
        Fault::CutWatch { .. }
        | Fault::WriteErrors { .. }
        | Fault::Latency { .. }
        | Fault::GoneOnResume { .. } => proxy_fault(f, fx).await?,
        Fault::Webhook { namespace, for_s } => webhook(fx, namespace, for_s).await?,
        Fault::ApiRestart => api_restart(fx).await?,
        Fault::Compaction => compaction(fx).await?,
    })
}

/// A fault of the replica's proxy, until it is over.
async fn proxy_fault(f: &Fault, fx: &Effects<'_, '_>) -> Result<String> {
    let sleep = |s: f64| tokio::time::sleep(Duration::from_secs_f64(s));
    let proxy = fx.proxy(f.replica().unwrap_or(usize::MAX))?;
    Ok(match *f {
        Fault::CutWatch { .. } => {
            proxy.cut_watches();
            "open watches ended".into()
        }
        Fault::WriteErrors {
            code,
            share_pct,
            for_s,
            ..
        } => {
            proxy.write_errors(code, share_pct, for_s);
            sleep(for_s).await;
            format!("{share_pct}% of writes answered {code}")
        }
        Fault::Latency { ms, for_s, .. } => {
            proxy.latency(ms, for_s);
            sleep(for_s).await;
            format!("+{ms} ms on every response")
        }
        Fault::GoneOnResume { for_s, .. } => {
            proxy.gone_on_resume(for_s);
            sleep(for_s).await;
            "watches cut, first resume of each resource answered 410".into()
        }
        _ => unreachable!("not a proxy fault: {f:?}"),
    })
}

/// etcd compacted, and every replica's watches cut so that they resume from before it.
async fn compaction(fx: &Effects<'_, '_>) -> Result<String> {
    let plane = fx
        .plane
        .ok_or_else(|| anyhow::anyhow!("no control plane of our own"))?;
    fx.api_up().await;
    let rev = plane.compact_etcd().await?;
    fx.proxies.iter().for_each(|p| p.cut_watches());
    Ok(match rev {
        Some(rev) => format!("etcd compacted at revision {rev}, every replica's watches cut"),
        None => "nothing written since the last compaction; every replica's watches cut".into(),
    })
}

/// SIGTERM and a start with the clock `skew_s` off (None: the true clock); returns when the
/// SIGTERM was sent.
async fn restart(fx: &Effects<'_, '_>, replica: usize, skew_s: Option<i64>) -> Result<f64> {
    let mut fleet = fx.fleet.lock().await;
    let t = fx.ctx.now();
    fleet.terminate(replica).await;
    fleet.start(replica, skew_s).await.map(|_| t)
}

async fn api_restart(fx: &Effects<'_, '_>) -> Result<String> {
    let plane = fx
        .plane
        .ok_or_else(|| anyhow::anyhow!("no control plane of our own"))?;
    fx.hold.store(true, Ordering::Relaxed);
    // The writes in flight finish first: their retries would not outlast the restart.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let away = plane.restart_apiserver(&fx.ctx.client).await;
    fx.hold.store(false, Ordering::Relaxed);
    Ok(format!(
        "kube-apiserver away {:.1}s (the load generator's writes held)",
        away?
    ))
}

/// The dead webhook of `poisoned` on one namespace for `for_s`.
async fn webhook(fx: &Effects<'_, '_>, namespace: usize, for_s: f64) -> Result<String> {
    let ns = &fx.ctx.pop.namespaces[namespace];
    let Some(probe) = fx.ctx.pop.workloads.iter().find(|w| &w.namespace == ns) else {
        bail!("no workload in {ns}");
    };
    let (client, run_id) = (&fx.ctx.client, fx.ctx.run_id.as_str());
    fx.api_up().await;
    crate::tenancy::label_poisoned(client, ns, Some(run_id)).await?;
    let poisoned = crate::tenancy::poison(client, run_id, probe).await;
    if poisoned.is_ok() {
        tokio::time::sleep(Duration::from_secs_f64(for_s)).await;
    }
    fx.api_up().await;
    let removed = crate::tenancy::unpoison(client, run_id).await;
    crate::tenancy::label_poisoned(client, ns, None).await?;
    poisoned?;
    Ok(format!(
        "workload writes refused (HTTP 500) for {for_s:.1}s; removed: {removed}"
    ))
}

/// Checks the history, puts the fault log and the findings in `notes`; returns what fails the
/// run.
#[allow(clippy::too_many_arguments)]
fn verdict(
    ctx: &Ctx,
    s: &Settings,
    schedule_seed: u64,
    planned: &[Scheduled],
    records: &[FaultRecord],
    failures: &[String],
    injected: Vec<faults::Injected>,
    writes: &impact::ReplicaWrites,
    notes: &mut Map<String, Value>,
) -> Vec<String> {
    let st = ctx.state.lock().unwrap();
    let mut violations = check::check(&st.changes, &st.observations);
    check::annotate(&mut violations, records, s.recovery_s);
    let [missed, duplicate, stale] = check::counts(&violations);
    let mut by_kind: BTreeMap<&str, usize> = BTreeMap::new();
    for r in records {
        *by_kind.entry(r.kind.as_str()).or_default() += 1;
    }
    log(&format!(
        "chaos: {} faults carried out {by_kind:?}, {} failed; missed {missed}, duplicate {duplicate}, stale {stale}",
        records.len(),
        failures.len()
    ));
    for v in violations.iter().take(10) {
        log(&format!(
            "  {:?}: {} (faults around: {:?})",
            v.property, v.what, v.faults
        ));
    }
    let (changes, seen) = (&st.changes, &st.observations);
    let run = impact::RunImpact::new(records, changes, seen, writes, s.recovery_s);
    let impact_by_kind = run.by_kind();
    for (kind, k) in &impact_by_kind {
        log(&format!("  {kind}: {k:?}"));
    }
    let slow = run.slow_reloads(&settings::SLOW_RELOAD_THRESHOLDS_MS);
    for t in &slow {
        log(&format!(
            "  reloads over {} ms: {}, touched by {:?}, by one kind only {:?}, by none {}",
            t.threshold_ms, t.reloads, t.touched_by, t.only_by, t.untouched
        ));
    }
    let split = run.touch_split();
    log(&format!(
        "  reloads a fault touched: {:?}; no fault touched: {:?}",
        split.touched, split.untouched
    ));
    notes.insert(
        "chaos".into(),
        json!({
            "settings": s,
            "schedule_seed": schedule_seed,
            "faults_planned": planned.len(),
            "faults_by_kind": by_kind,
            "faults_failed": failures,
            "proxy_injected": injected,
            "missed": missed,
            "duplicate": duplicate,
            "stale": stale,
            "violations": violations.iter().take(50).collect::<Vec<_>>(),
            "fault_log": records,
            "impact_by_kind": impact_by_kind,
            "impact": run.each_fault(),
            "slow_reloads": slow,
            "touch_split": split,
        }),
    );
    let shown = violations.iter().take(10).map(|v| {
        format!(
            "chaos {:?}: {} (faults around: {})",
            v.property,
            v.what,
            v.faults.join("; ")
        )
    });
    shown
        .chain(failures.iter().map(|f| format!("chaos fault failed: {f}")))
        .collect()
}
