//! The `flapping` scenario (issue #24, the churn breaker): `flap_secrets` Secrets, each used by
//! `flap_width` Deployments of their own namespace, are rewritten every `flap_period_s` for
//! `flap_for_s`; meanwhile one config of the standard population changes per period (the
//! bystanders, which must roll as usual: the breaker holds a config, not the controller).
//!
//! With `--churn-limit M` (the default M = 3) each workload of a flapping Secret must roll at
//! most M + 1 times — M before the breaker opens, one when it releases — at least once after
//! the Secret's last write, no earlier than `--churn-quiet` after it, and end up carrying the
//! Secret's final content. Rollouts are counted by `metadata.generation` (every spec write bumps
//! it; the watch may skip a version, the generation does not). `--churn-limit 0` runs the
//! controller without the breaker (results `flapping-<scale>-no-breaker`): the same figures,
//! without the bound, show what the breaker saves.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, ListParams};
use serde::Serialize;
use serde_json::{Value, json};

use crate::ctx::Ctx;
use crate::ledger::{State, Verdict};
use crate::objects::{ConfigRef, Kind, Population, WorkloadSpec};
use crate::progress::log;
use crate::report;
use crate::rng::Rng;
use crate::scenario::Plan;

/// A release seen this much earlier than the quiet period after the last write still counts
/// as on time: the load generator's and the controller's clocks are the same, but the
/// controller sees the write a little after the load generator sent it, never before.
const RELEASE_SLACK_S: f64 = 0.25;

const NAMESPACE_SUFFIX: &str = "flap";
const HELD: &str = "ReloadsHeld";
const RELEASED: &str = "ReloadsReleased";

/// The tag of a config's changes in the report: `flapping` or `bystander`.
pub fn tag(config: &ConfigRef) -> String {
    match config.namespace.ends_with(&format!("-{NAMESPACE_SUFFIX}")) {
        true => "flapping",
        false => "bystander",
    }
    .to_string()
}

/// The flapping Secrets and their Deployments, in a namespace of their own.
pub fn populate(pop: &mut Population, plan: &Plan) -> Vec<ConfigRef> {
    let ns = pop.add_namespace(NAMESPACE_SUFFIX);
    (0..plan.flap_secrets)
        .map(|k| {
            let secret = ConfigRef {
                namespace: ns.clone(),
                kind: Kind::Secret,
                name: format!("flap-{k}"),
            };
            pop.add_config(secret.clone(), format!("initial-flap-{k}").into_bytes());
            for j in 0..plan.flap_width {
                pop.add_workload(WorkloadSpec {
                    namespace: ns.clone(),
                    name: format!("flap-{k}-{j}"),
                    configs: vec![secret.clone()],
                    ..Default::default()
                });
            }
            secret
        })
        .collect()
}

/// What driving the scenario leaves for the check, which runs after the settle (a late extra
/// rollout counts).
pub struct Flapped {
    /// Each flapping Secret and the workloads that use it.
    pub secrets: Vec<(ConfigRef, Vec<String>)>,
    /// Each flapping workload's generation before the first write.
    pub generations_before: BTreeMap<String, i64>,
    /// Run clock at the first write.
    pub started_at: f64,
    /// From the first write to the last one acknowledged.
    pub flapped_s: f64,
    pub bystanders: usize,
    /// (Secret, Event reason) -> Events, for the breaker's two reasons.
    pub events: BTreeMap<(String, String), usize>,
}

/// Rewrites every flapping Secret `flap_rewrites` times, `flap_period_s` apart (the writes of
/// one Secret in order, each after the previous one was acknowledged), and changes one
/// bystander per period; then waits until every final content and bystander rolled.
pub async fn drive(
    ctx: &Arc<Ctx>,
    plan: &Plan,
    rng: &mut Rng,
    standard: usize,
    secrets: &[ConfigRef],
) -> (bool, Flapped) {
    let rewrites = plan.flap_rewrites();
    let bystanders = ctx.pick_configs(rng, rewrites.min(standard), standard);
    let secrets: Vec<(ConfigRef, Vec<String>)> = secrets
        .iter()
        .map(|s| (s.clone(), ctx.pop.users.get(s).cloned().unwrap_or_default()))
        .collect();
    let generations_before = generations(&ctx.state.lock().unwrap(), &secrets);
    announce(plan, secrets.len(), bystanders.len());
    let started_at = ctx.now();
    let start = tokio::time::Instant::now();
    let period = Duration::from_secs_f64(plan.flap_period_s);
    let n_bystanders = bystanders.len();
    let flapping = futures::future::join_all(
        secrets
            .iter()
            .map(|(s, _)| rewrite(ctx, s, rewrites, period, start)),
    );
    tokio::join!(
        flapping,
        ctx.drive_at_rate(bystanders, 1.0 / plan.flap_period_s, None)
    );
    let flapped_s = ctx.now() - started_at;
    log(&format!(
        "flapping stopped after {flapped_s:.1}s; waiting for the final contents"
    ));
    let finals = secrets.iter().map(|(_, u)| u.len()).sum::<usize>() + n_bystanders;
    let timeout = plan.wait_base_s + plan.churn_quiet_s + finals as f64 * 0.1;
    let ok = ctx.wait_reloads(Duration::from_secs_f64(timeout)).await;
    let events = match secrets.first() {
        Some((s, _)) if breaker_holds(plan) => {
            let held: Vec<String> = secrets.iter().map(|(s, _)| s.name.clone()).collect();
            breaker_events(ctx, &s.namespace, &held).await
        }
        _ => BTreeMap::new(),
    };
    let flapped = Flapped {
        secrets,
        generations_before,
        started_at,
        flapped_s,
        bystanders: n_bystanders,
        events,
    };
    (ok, flapped)
}

/// With a breaker, every flapping Secret is written often enough to open it.
fn breaker_holds(plan: &Plan) -> bool {
    plan.churn_limit > 0 && plan.flap_rewrites() > plan.churn_limit as usize
}

/// Each flapping workload's generation now.
fn generations(st: &State, secrets: &[(ConfigRef, Vec<String>)]) -> BTreeMap<String, i64> {
    secrets
        .iter()
        .flat_map(|(_, users)| users)
        .filter_map(|w| Some((w.clone(), st.generation(w)?)))
        .collect()
}

fn announce(plan: &Plan, secrets: usize, bystanders: usize) {
    if plan.churn_limit > 0 && plan.flap_period_s >= plan.churn_quiet_s {
        log(&format!(
            "WARNING: rewrites every {}s are not closer than the quiet period ({}s): the breaker \
             may release between two of them",
            plan.flap_period_s, plan.churn_quiet_s
        ));
    }
    log(&format!(
        "{secrets} Secrets, each used by {} Deployments, rewritten {} times every {}s; \
         {bystanders} bystander changes; {}",
        plan.flap_width,
        plan.flap_rewrites(),
        plan.flap_period_s,
        match plan.churn_limit {
            0 => "the controller runs without the churn breaker".to_string(),
            m => format!(
                "--churn-limit={m} --churn-window={}s --churn-quiet={}s",
                plan.churn_window_s, plan.churn_quiet_s
            ),
        }
    ));
}

async fn rewrite(
    ctx: &Ctx,
    secret: &ConfigRef,
    rewrites: usize,
    period: Duration,
    start: tokio::time::Instant,
) {
    for k in 0..rewrites {
        tokio::time::sleep_until(start + period * k as u32).await;
        ctx.change(secret, None).await;
    }
}

/// The breaker's Events on the Secrets of `namespace`, by (Secret, reason); polled for up to
/// 10 s until each of `held` has both (they are published while its workloads roll).
async fn breaker_events(
    ctx: &Ctx,
    namespace: &str,
    held: &[String],
) -> BTreeMap<(String, String), usize> {
    let api: Api<Event> = Api::namespaced(ctx.client.clone(), namespace);
    let params = ListParams::default().fields("involvedObject.kind=Secret");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        ctx.own.add("list", "events");
        let mut counts = BTreeMap::new();
        match api.list(&params).await {
            Ok(list) => {
                for e in list.items {
                    let reason = e.reason.unwrap_or_default();
                    if reason == HELD || reason == RELEASED {
                        let name = e.involved_object.name.unwrap_or_default();
                        *counts.entry((name, reason)).or_default() += 1;
                    }
                }
            }
            Err(e) => log(&format!("listing the breaker's Events: {e}")),
        }
        let complete = held.iter().all(|s| {
            [HELD, RELEASED]
                .iter()
                .all(|r| counts.contains_key(&(s.clone(), r.to_string())))
        });
        if complete || Instant::now() > deadline {
            return counts;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// One flapping workload after the run.
#[derive(Debug, Clone, Serialize)]
struct Row {
    workload: String,
    secret: String,
    /// Generations since the first write: its rollouts.
    rollouts: i64,
    /// Template changes the watch saw since the first write (a lower bound of `rollouts`).
    template_changes_seen: usize,
    /// Template changes seen after the Secret's last write was sent.
    after_last_write: usize,
    /// Last write sent -> first template change seen after it.
    first_after_last_write_s: Option<f64>,
    /// The template carries the hash of the Secret's final content.
    final_content: bool,
    /// The breaker is expected to hold this Secret (it is written more than the limit).
    held: bool,
}

/// What `rows` got wrong: more than `limit + 1` rollouts (with a breaker), none after the last
/// write, a release sooner than `quiet_s` after it, another content than the final one.
fn problems(rows: &[Row], limit: u32, quiet_s: f64) -> Vec<String> {
    let mut out = Vec::new();
    for r in rows {
        let w = &r.workload;
        if limit > 0 && r.rollouts > i64::from(limit) + 1 {
            out.push(format!(
                "{w}: rolled {} times, at most {limit} + 1 with --churn-limit {limit}",
                r.rollouts
            ));
        }
        match r.first_after_last_write_s {
            None => out.push(format!("{w}: not rolled after the last write of {}", r.secret)),
            Some(t) if limit > 0 && r.held && t < quiet_s - RELEASE_SLACK_S => out.push(format!(
                "{w}: rolled {t:.2}s after the last write of {}, before the quiet period ({quiet_s}s)",
                r.secret
            )),
            Some(_) => {}
        }
        if !r.final_content {
            out.push(format!(
                "{w}: does not carry the final content of {}",
                r.secret
            ));
        }
    }
    out
}

/// The rows of every flapping workload, from the ledger and the watch's last state.
fn rows(fl: &Flapped, st: &State, limit: u32) -> Vec<Row> {
    let mut rows = Vec::new();
    for (secret, users) in &fl.secrets {
        let writes: Vec<_> = st.changes.iter().filter(|c| &c.config == secret).collect();
        let Some(last) = writes.last() else {
            continue;
        };
        let held = limit > 0 && writes.len() > limit as usize;
        let sources = [
            secret.env_var(),
            format!("{}/{}", secret.kind.env_suffix(), secret.name),
        ];
        for w in users {
            let mut since_start = std::collections::BTreeSet::new();
            let mut after = BTreeMap::new();
            for o in st.observations.iter().filter(|o| &o.workload == w) {
                if o.t >= fl.started_at {
                    since_start.insert(o.generation);
                }
                if o.t > last.t_sent {
                    after.entry(o.generation).or_insert(o.t);
                }
            }
            let first_after = after.values().copied().reduce(f64::min);
            let rollouts = match (st.generation(w), fl.generations_before.get(w)) {
                (Some(now), Some(before)) => now - before,
                _ => since_start.len() as i64,
            };
            rows.push(Row {
                workload: w.clone(),
                secret: secret.to_string(),
                rollouts,
                template_changes_seen: since_start.len(),
                after_last_write: after.len(),
                first_after_last_write_s: first_after.map(|t| t - last.t_sent),
                final_content: st.current_hash(w, &sources).as_deref() == Some(&last.hash),
                held,
            });
        }
    }
    rows
}

/// The breaker's counters in the controller's final `/metrics` (None: not there).
fn breaker_metrics(text: &str) -> Option<(f64, f64, f64)> {
    use crate::sharded::metric_sum;
    Some((
        metric_sum(text, "kube_reloader_churn_breaker_trips_total", &[])?,
        metric_sum(text, "kube_reloader_churn_breakers_open", &[])?,
        metric_sum(text, "kube_reloader_churn_breaker_held_changes_total", &[])?,
    ))
}

/// min / median / max / mean of whole numbers.
fn spread(values: &[i64]) -> Value {
    let mut v = values.to_vec();
    v.sort_unstable();
    if v.is_empty() {
        return json!(null);
    }
    let mean = v.iter().sum::<i64>() as f64 / v.len() as f64;
    json!({"min": v[0], "median": v[v.len() / 2], "max": v[v.len() - 1], "mean": report::round(mean)})
}

/// The scenario's checks after the settle (failing `verdict` on a problem); returns its section
/// of the report.
pub fn check(
    fl: &Flapped,
    st: &State,
    plan: &Plan,
    metrics: Option<&str>,
    verdict: &mut Verdict,
) -> Value {
    let limit = plan.churn_limit;
    let rows = rows(fl, st, limit);
    let held: Vec<&str> = match breaker_holds(plan) {
        true => fl.secrets.iter().map(|(s, _)| s.name.as_str()).collect(),
        false => Vec::new(),
    };
    let counters = metrics.and_then(breaker_metrics);
    let mut problems = problems(&rows, limit, plan.churn_quiet_s);
    problems.extend(breaker_problems(fl, &held, limit, counters));
    if !problems.is_empty() {
        verdict.passed = false;
        verdict
            .examples
            .extend(problems.iter().take(5).map(|p| format!("flapping: {p}")));
        log(&format!("flapping: {} problems", problems.len()));
    }
    let mut out = figures(fl, plan, &rows);
    out["breaker_metrics"] = json!(counters.map(|(trips, open, held_changes)| json!({
        "trips": trips, "open_at_end": open, "held_changes": held_changes,
    })));
    let held_changes = held.len() * plan.flap_rewrites().saturating_sub(limit as usize);
    out["expected"] = json!({"trips": held.len(), "held_changes": held_changes});
    out["problems"] = json!(problems.len());
    out["problem_examples"] = json!(problems.iter().take(20).collect::<Vec<_>>());
    out
}

/// The breaker's own account: one trip per `held` Secret, none open at the end (when the
/// counters were scraped), a `ReloadsHeld` and a `ReloadsReleased` Event on each.
fn breaker_problems(
    fl: &Flapped,
    held: &[&str],
    limit: u32,
    counters: Option<(f64, f64, f64)>,
) -> Vec<String> {
    let mut out = Vec::new();
    if let (true, Some((trips, open, _))) = (limit > 0, counters) {
        if trips != held.len() as f64 {
            out.push(format!(
                "the controller counted {trips} breaker trips, expected {}",
                held.len()
            ));
        }
        if open != 0.0 {
            out.push(format!("{open} breakers still open at the end"));
        }
    }
    for s in held {
        for r in [HELD, RELEASED] {
            if !fl.events.contains_key(&(s.to_string(), r.to_string())) {
                out.push(format!("no {r} Event on Secret {s}"));
            }
        }
    }
    out
}

/// Rollouts per workload, the release, the Events: the figures of the report.
fn figures(fl: &Flapped, plan: &Plan, rows: &[Row]) -> Value {
    let limit = plan.churn_limit;
    let rollouts: Vec<i64> = rows.iter().map(|r| r.rollouts).collect();
    let mut histogram: BTreeMap<String, usize> = BTreeMap::new();
    for r in &rollouts {
        *histogram.entry(r.to_string()).or_default() += 1;
    }
    let releases: Vec<f64> = rows
        .iter()
        .filter(|r| r.held)
        .filter_map(|r| r.first_after_last_write_s)
        .collect();
    let events: BTreeMap<String, usize> = fl
        .events
        .iter()
        .map(|((s, r), n)| (format!("{s} {r}"), *n))
        .collect();
    let mut events_by_reason: BTreeMap<&str, usize> = BTreeMap::new();
    for ((_, r), n) in &fl.events {
        *events_by_reason.entry(r.as_str()).or_default() += n;
    }
    let hundredths = |x: f64| (x * 100.0).round() / 100.0;
    json!({
        "secrets": fl.secrets.len(),
        "workloads": rows.len(),
        "writes_per_secret": plan.flap_rewrites(),
        "flap_period_s": plan.flap_period_s,
        "flapped_s": report::round(fl.flapped_s),
        "bystander_changes": fl.bystanders,
        "churn_limit": limit,
        "churn_window_s": plan.churn_window_s,
        "churn_quiet_s": plan.churn_quiet_s,
        "rollouts_bound": (limit > 0).then(|| i64::from(limit) + 1),
        "rollouts_per_workload": spread(&rollouts),
        "rollouts_histogram": histogram,
        "template_changes_seen": rows.iter().map(|r| r.template_changes_seen).sum::<usize>(),
        "rollouts_total": rollouts.iter().sum::<i64>(),
        "rolled_after_last_write": rows.iter().filter(|r| r.after_last_write > 0).count(),
        "with_final_content": rows.iter().filter(|r| r.final_content).count(),
        "release_after_last_write_s": releases.iter().copied().reduce(f64::min).map(|lo| {
            let hi = releases.iter().copied().fold(lo, f64::max);
            json!({"min": hundredths(lo), "max": hundredths(hi)})
        }),
        "events": events,
        "events_by_reason": events_by_reason,
        "per_workload": rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::{Scale, Scenario};

    fn row(rollouts: i64, after: Option<f64>, final_content: bool) -> Row {
        Row {
            workload: "ns/w".into(),
            secret: "Secret ns/s".into(),
            rollouts,
            template_changes_seen: rollouts as usize,
            after_last_write: usize::from(after.is_some()),
            first_after_last_write_s: after,
            final_content,
            held: true,
        }
    }

    #[test]
    fn a_held_workload_rolls_at_most_limit_plus_one_times_the_last_after_the_quiet_period() {
        assert!(problems(&[row(4, Some(5.3), true)], 3, 5.0).is_empty());
        assert!(problems(&[row(1, Some(5.0), true)], 3, 5.0).is_empty());
        let p = problems(&[row(5, Some(5.3), true)], 3, 5.0);
        assert!(p[0].contains("rolled 5 times"), "{p:?}");
        let p = problems(&[row(4, Some(1.0), true)], 3, 5.0);
        assert!(p[0].contains("before the quiet period"), "{p:?}");
        let p = problems(&[row(4, None, false)], 3, 5.0);
        assert_eq!(p.len(), 2, "{p:?}");
        assert!(p[0].contains("not rolled after") && p[1].contains("final content"));
    }

    #[test]
    fn without_the_breaker_only_the_final_content_counts() {
        assert!(problems(&[row(10, Some(0.2), true)], 0, 5.0).is_empty());
        assert_eq!(problems(&[row(10, Some(0.2), false)], 0, 5.0).len(), 1);
    }

    #[test]
    fn rows_count_generations_and_find_the_final_content() {
        let plan = Plan::new(Scenario::Flapping, Scale::Small);
        let mut pop = Population::new("abc");
        let secrets = populate(&mut pop, &plan);
        let s = secrets[0].clone();
        let w = pop.users[&s][0].clone();
        let template = |hash: &str| -> k8s_openapi::api::core::v1::PodTemplateSpec {
            serde_json::from_value(json!({"spec": {"containers": [{"name": "app",
                "env": [{"name": s.env_var(), "value": hash}]}]}}))
            .unwrap()
        };
        let mut st = State::default();
        st.apply(w.clone(), 1, &template("h0"), 0.0);
        for (i, t) in [1.0, 3.0, 5.0].into_iter().enumerate() {
            st.register(
                s.clone(),
                format!("h{}", i + 1),
                vec![w.clone()],
                t,
                "flapping",
            );
        }
        // Rolled to the first change, then (a version the watch skipped) to the second, then
        // released to the last one 5.5 s after it was sent.
        st.apply(w.clone(), 2, &template("h1"), 1.1);
        st.apply(w.clone(), 4, &template("h3"), 10.5);
        let fl = Flapped {
            secrets: vec![(s.clone(), vec![w.clone()])],
            generations_before: BTreeMap::from([(w.clone(), 1)]),
            started_at: 0.5,
            flapped_s: 4.5,
            bystanders: 0,
            events: BTreeMap::new(),
        };
        let r = &rows(&fl, &st, 2)[0];
        assert_eq!((r.rollouts, r.template_changes_seen), (3, 2));
        assert_eq!(r.after_last_write, 1);
        assert_eq!(r.first_after_last_write_s, Some(5.5));
        assert!(r.final_content && r.held);
        assert!(
            !rows(&fl, &st, 3)[0].held,
            "3 writes are within a limit of 3"
        );
    }

    #[test]
    fn the_breaker_accounts_for_one_trip_and_both_events_per_held_secret() {
        let mut fl = Flapped {
            secrets: vec![],
            generations_before: BTreeMap::new(),
            started_at: 0.0,
            flapped_s: 0.0,
            bystanders: 0,
            events: BTreeMap::new(),
        };
        for r in [HELD, RELEASED] {
            fl.events.insert(("flap-0".into(), r.into()), 1);
        }
        let held = ["flap-0"];
        assert!(breaker_problems(&fl, &held, 3, Some((1.0, 0.0, 7.0))).is_empty());
        assert!(
            breaker_problems(&fl, &held, 3, None).is_empty(),
            "not scraped"
        );
        let p = breaker_problems(&fl, &held, 3, Some((2.0, 1.0, 7.0)));
        assert!(
            p[0].contains("2 breaker trips") && p[1].contains("still open"),
            "{p:?}"
        );
        fl.events.remove(&("flap-0".into(), RELEASED.into()));
        let p = breaker_problems(&fl, &held, 3, None);
        assert_eq!(p, ["no ReloadsReleased Event on Secret flap-0"]);
        // Without the breaker nothing is held and its counters are not judged.
        assert!(breaker_problems(&fl, &[], 0, Some((0.0, 0.0, 0.0))).is_empty());
    }

    #[test]
    fn the_breakers_counters_are_read_from_the_metrics() {
        let text = "kube_reloader_churn_breaker_trips_total 2\n\
                    kube_reloader_churn_breakers_open 0\n\
                    kube_reloader_churn_breaker_held_changes_total 14\n";
        assert_eq!(breaker_metrics(text), Some((2.0, 0.0, 14.0)));
        assert_eq!(breaker_metrics("reloader_reload_executed_total 3\n"), None);
    }

    #[test]
    fn flapping_secrets_live_in_their_own_namespace_and_are_tagged() {
        let plan = Plan::new(Scenario::Flapping, Scale::Small);
        let mut pop = Population::new("abc");
        pop.standard(2, 4);
        let secrets = populate(&mut pop, &plan);
        assert_eq!(secrets.len(), plan.flap_secrets);
        for s in &secrets {
            assert_eq!(pop.users[s].len(), plan.flap_width);
            assert_eq!(tag(s), "flapping");
        }
        let standard = pop.workloads[0].configs[0].clone();
        assert_eq!(tag(&standard), "bystander");
    }
}
