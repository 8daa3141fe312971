//! Driving a scenario: the config changes (and the controller's kill, the churn, the no-op
//! updates...) each scenario makes, up to the moment every expected reload was seen.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use base64::Engine as _;
use serde_json::{Map, Value, json};

use crate::ctx::{Ctx, timeout_for};
use crate::launch::Controllers;
use crate::ledger::State;
use crate::objects::{self, ConfigRef, Kind};
use crate::outcome::Driven;
use crate::pause::{self, Traces};
use crate::progress::log;
use crate::rng::Rng;
use crate::scenario::{Plan, Scenario};
use crate::setup::RunEnv;
use crate::setup::Targets;
use crate::{churn, flapping, report, tenancy};

/// Drives `env.scenario` and waits for its reloads.
pub async fn drive(
    env: &RunEnv<'_>,
    ctx: &Arc<Ctx>,
    ctl: &mut Controllers,
    rng: &mut Rng,
    targets: &Targets,
    rollouts: &Traces,
) -> Result<Driven> {
    let plan = &env.plan;
    let standard = targets.standard;
    let mut d = Driven::default();
    d.completed = match env.scenario {
        Scenario::Steady
        | Scenario::Annotations
        | Scenario::Sharded
        | Scenario::References
        | Scenario::Mixed
        | Scenario::Cardinality
        | Scenario::Realistic
        | Scenario::CustomKind => steady(ctx, plan, rng, standard).await,
        Scenario::Churn => {
            let ready_url = ctl.replicas[0].ready_url.clone();
            let (done, outcome) = churned(ctx, plan, rng, standard, &ready_url).await;
            d.churn = Some(outcome);
            done
        }
        Scenario::Burst | Scenario::Ratelimit => {
            burst(ctx, plan, rng, standard, &mut d.notes).await
        }
        Scenario::Fanout => fanout(ctx, plan, &targets.special[0], &mut d.notes).await,
        Scenario::Waves => {
            let metrics_url = &ctl.replicas[0].metrics_url;
            crate::waves::drive(ctx, plan, &targets.special[0], metrics_url, &mut d.notes).await
        }
        Scenario::Noop => noop(ctx, plan, rng, standard, &mut d.notes).await,
        Scenario::Pause => pause(ctx, plan, rng, standard, rollouts, &mut d.notes).await,
        Scenario::Large => large(ctx, plan, &targets.special).await,
        Scenario::Restart => restart(ctx, plan, rng, standard, ctl, env.epoch).await?,
        Scenario::NoisyNeighbour => {
            let tenancy = targets
                .tenancy
                .as_ref()
                .context("the noisy-neighbour population")?;
            tenancy::drive_noisy(ctx, plan, tenancy, &mut d.notes).await
        }
        Scenario::Poisoned => {
            let tenancy = targets
                .tenancy
                .as_ref()
                .context("the poisoned population")?;
            let pid = ctl.procs[0].pid;
            tenancy::drive_poisoned(ctx, plan, tenancy, pid, &mut d.notes).await?
        }
        Scenario::Flapping => {
            let (ok, flapped) = flapping::drive(ctx, plan, rng, standard, &targets.special).await;
            d.flapping = Some(flapped);
            ok
        }
        Scenario::Chaos => {
            let (done, problems) =
                crate::chaos::drive(env, ctx, ctl, rng, standard, &mut d.notes).await?;
            d.problems = problems;
            done
        }
        Scenario::All => unreachable!(),
    };
    Ok(d)
}

/// `plan.changes` changes of the standard configs at `plan.rate`.
async fn steady(ctx: &Arc<Ctx>, plan: &Plan, rng: &mut Rng, standard: usize) -> bool {
    let configs = ctx.pick_configs(rng, plan.changes, standard);
    log(&format!("{} changes at {}/s", configs.len(), plan.rate));
    ctx.drive_at_rate(configs, plan.rate, None).await;
    ctx.wait_reloads(timeout_for(plan, plan.changes)).await
}

/// `steady` while extra workloads are created and deleted.
async fn churned(
    ctx: &Arc<Ctx>,
    plan: &Plan,
    rng: &mut Rng,
    standard: usize,
    ready_url: &str,
) -> (bool, churn::Outcome) {
    let configs = ctx.pick_configs(rng, plan.changes, standard);
    log(&format!("{} changes at {}/s", configs.len(), plan.rate));
    let ((), outcome) = tokio::join!(
        ctx.drive_at_rate(configs.clone(), plan.rate, None),
        churn::run(ctx, &configs, plan, ready_url)
    );
    (
        ctx.wait_reloads(timeout_for(plan, plan.changes)).await,
        outcome,
    )
}

/// `plan.changes` changes at once.
async fn burst(
    ctx: &Ctx,
    plan: &Plan,
    rng: &mut Rng,
    standard: usize,
    notes: &mut Map<String, Value>,
) -> bool {
    let configs = ctx.pick_configs(rng, plan.changes, standard);
    log(&format!("{} changes at once", configs.len()));
    let t = Instant::now();
    ctx.drive_burst(configs).await;
    notes.insert(
        "writes_took_s".into(),
        json!(report::round(t.elapsed().as_secs_f64())),
    );
    ctx.wait_reloads(timeout_for(plan, plan.changes * 3)).await
}

/// `plan.changes` changes of the large Secrets at `plan.rate`.
async fn large(ctx: &Arc<Ctx>, plan: &Plan, special: &[ConfigRef]) -> bool {
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
    ctx.wait_reloads(timeout_for(plan, plan.changes)).await
}

/// `fanout_changes` changes of the shared ConfigMap, each after the previous one finished;
/// notes when the last of its workloads rolled.
async fn fanout(
    ctx: &Ctx,
    plan: &Plan,
    shared: &ConfigRef,
    notes: &mut Map<String, Value>,
) -> bool {
    let mut ok = true;
    let mut rounds = Vec::new();
    for i in 0..plan.fanout_changes {
        log(&format!(
            "fan-out change {}/{} ({} workloads)",
            i + 1,
            plan.fanout_changes,
            plan.fanout_width
        ));
        let id = ctx.change(shared, None).await;
        ok &= ctx
            .wait_reloads(timeout_for(plan, plan.fanout_width * 3))
            .await;
        let after = all_rolled_after(&ctx.state.lock().unwrap(), id);
        rounds.push(json!({"change": id, "all_rolled_after_s": (after * 100.0).round() / 100.0}));
    }
    notes.insert("fanout_rounds".into(), json!(rounds));
    ok
}

/// Seconds from change `id`'s acknowledgement until the last of its workloads was seen with its
/// hash (NaN when none was).
fn all_rolled_after(st: &State, id: usize) -> f64 {
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
    last - ack
}

/// The no-op update of round `i`: what it is, and its merge patch of a config (None: of the
/// workload's labels).
fn noop_update(i: usize, c: &ConfigRef, initial: &[u8]) -> (&'static str, Option<Value>) {
    let mark = format!("n{i}");
    match i % 4 {
        0 => (
            "config label",
            Some(json!({"metadata": {"labels": {"loadtest-noop": mark}}})),
        ),
        1 => (
            "config annotation",
            Some(json!({"metadata": {"annotations": {"loadtest/noop": mark}}})),
        ),
        2 => {
            let data = match c.kind {
                Kind::ConfigMap => json!({objects::DATA_KEY: String::from_utf8_lossy(initial)}),
                Kind::Secret => json!({
                    objects::DATA_KEY: base64::engine::general_purpose::STANDARD.encode(initial)
                }),
            };
            (
                "config label+annotation, same data re-sent",
                Some(json!({
                    "metadata": {"labels": {"loadtest-noop": mark.clone()}, "annotations": {"loadtest/noop": mark}},
                    "data": data
                })),
            )
        }
        _ => ("workload label", None),
    }
}

/// Label- and annotation-only updates at `rate`, then one real change of a ConfigMap and of a
/// Secret of an untouched workload (sentinels).
async fn noop(
    ctx: &Arc<Ctx>,
    plan: &Plan,
    rng: &mut Rng,
    standard: usize,
    notes: &mut Map<String, Value>,
) -> bool {
    let picks = rng.sample(standard, plan.changes);
    log(&format!(
        "{} label/annotation-only updates at {}/s",
        picks.len(),
        plan.rate
    ));
    let start = tokio::time::Instant::now();
    let mut kinds: BTreeMap<&str, usize> = BTreeMap::new();
    let mut used = HashSet::new();
    let mut tasks = tokio::task::JoinSet::new();
    for (i, &j) in picks.iter().enumerate() {
        tokio::time::sleep_until(start + Duration::from_secs_f64(i as f64 / plan.rate)).await;
        let ctx2 = ctx.clone();
        let w = ctx.pop.workloads[j].clone();
        used.insert(j);
        let c = w.configs[i % w.configs.len()].clone();
        let (what, config_patch) = noop_update(i, &c, &ctx.pop.configs[&c]);
        *kinds.entry(what).or_default() += 1;
        tasks.spawn(async move {
            let r = match config_patch {
                Some(body) => ctx2.patch_config(&c, &body).await.map(drop),
                None => {
                    let body = json!({"metadata": {"labels": {"loadtest-noop": format!("n{i}")}}});
                    ctx2.patch_workload_metadata(&w, &body).await
                }
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
    let j = (0..standard).find(|j| !used.contains(j)).unwrap_or(0);
    ctx.set_phase("sentinel");
    let w = ctx.pop.workloads[j].clone();
    for c in &w.configs {
        ctx.change(c, None).await;
    }
    ctx.wait_reloads(timeout_for(plan, 10)).await
}

/// `pause_workloads` Deployments with a pause period get their ConfigMap changed
/// `pause_changes_each` times 1 s apart (all within one period); then the pause semantics are
/// checked on their rollout traces.
async fn pause(
    ctx: &Ctx,
    plan: &Plan,
    rng: &mut Rng,
    standard: usize,
    traces: &Traces,
    notes: &mut Map<String, Value>,
) -> bool {
    let picks = rng.sample(standard, plan.pause_workloads.min(standard));
    let changed: Vec<String> = picks.iter().map(|&j| ctx.pop.workloads[j].key()).collect();
    let configs: Vec<ConfigRef> = picks
        .iter()
        .map(|&j| ctx.pop.workloads[j].configs[0].clone())
        .collect();
    let deadline = Instant::now() + Duration::from_secs_f64(plan.wait_base_s);
    while pause::rolled_out(traces, &changed) < changed.len() && Instant::now() < deadline {
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
        .wait_reloads(timeout_for(plan, configs.len() * plan.pause_changes_each))
        .await;
    let period = f64::from(plan.pause_period_s);
    let deadline = Instant::now() + Duration::from_secs_f64(period + plan.wait_base_s);
    while !pause::all_settled(traces, &changed) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (problems, figures) = pause::evaluate(traces, &changed, period, plan.pause_changes_each);
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

/// Priming (every config changed once), then changes at `rate`; after `kill_after` of them the
/// controller gets SIGKILL, stays down `down_s` and is started again with the same command.
async fn restart(
    ctx: &Arc<Ctx>,
    plan: &Plan,
    rng: &mut Rng,
    standard: usize,
    ctl: &mut Controllers,
    epoch: Instant,
) -> Result<bool> {
    let configs = ctx.pick_configs(rng, plan.changes, standard);
    // A workload that was never reloaded records no hash, so a change made while the
    // controller is down cannot be told from the initial state (Reloader's semantics
    // too): every config is changed once first, and only its second change counts.
    ctx.set_phase("prime");
    log(&format!("priming: {} changes at once", configs.len()));
    ctx.drive_burst(configs.clone()).await;
    if !ctx.wait_reloads(timeout_for(plan, plan.changes * 3)).await {
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
        ctl.procs[0].kill_hard(epoch).await;
        tokio::time::sleep(Duration::from_secs_f64(plan.down_s)).await;
        log("restarting the controller");
        ctl.restart_first(epoch).await?;
        ctx.set_phase("after-restart");
        Ok::<_, anyhow::Error>(())
    };
    let ((), chaos) = tokio::join!(drive, chaos);
    chaos?;
    Ok(ctx.wait_reloads(timeout_for(plan, plan.changes)).await)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn noop_updates_cycle_through_four_kinds_and_never_change_data() {
        let c = ConfigRef {
            namespace: "ns".into(),
            kind: Kind::Secret,
            name: "s".into(),
        };
        let kinds: Vec<&str> = (0..8).map(|i| noop_update(i, &c, b"x").0).collect();
        assert_eq!(kinds[0..4], kinds[4..8]);
        assert_eq!(kinds.iter().collect::<HashSet<_>>().len(), 4);
        // The only patch with data re-sends the initial payload, base64 for a Secret.
        let (_, p) = noop_update(2, &c, b"initial");
        assert_eq!(p.unwrap()["data"][objects::DATA_KEY], "aW5pdGlhbA==");
        assert!(noop_update(3, &c, b"x").1.is_none(), "a workload label");
        assert!(noop_update(0, &c, b"x").1.unwrap().get("data").is_none());
    }
}
