//! `waves`: one ConfigMap used by `fanout_width` Deployments, the controller run with a wave
//! policy (`--waves`), so each change of it rolls in health-gated waves. The first change is
//! superseded by a second one as soon as its canaries rolled (the second rolls everyone, the
//! first's held workloads once); a third rolls through every wave undisturbed. The ledger's
//! checker proves nothing was missed, doubled or stale; this adds that the controller did roll
//! in waves (a sequence completed, none halted: `replicas: 0` Deployments are healthy once
//! their controller saw the new template) and the per-change timeline for the result.

use std::time::Duration;

use serde_json::{Map, Value, json};

use crate::ctx::{Ctx, timeout_for};
use crate::ledger::{State, Verdict};
use crate::objects::ConfigRef;
use crate::progress::log;
use crate::scenario::Plan;

/// Template changes of one change further apart than this count as separate waves in the
/// timeline (the controller reads a wave's health every `scenario::WAVE_POLL`).
const WAVE_GAP_S: f64 = 0.3;

pub async fn drive(
    ctx: &Ctx,
    plan: &Plan,
    shared: &ConfigRef,
    metrics_url: &str,
    notes: &mut Map<String, Value>,
) -> bool {
    let wait = timeout_for(plan, plan.fanout_width * 3);
    log(&format!(
        "waves: change 1 of {} workloads",
        plan.fanout_width
    ));
    let first = ctx.change(shared, None).await;
    let canaries_seen = first_rolled(ctx, first, wait).await;
    log("waves: change 2, superseding change 1 after its first wave");
    let second = ctx.change(shared, None).await;
    let mut ok = canaries_seen && ctx.wait_reloads(wait).await;
    log("waves: change 3, rolled through every wave");
    let third = ctx.change(shared, None).await;
    ok &= ctx.wait_reloads(wait).await;
    // Its last wave is written; the sequence completes when the runner saw it healthy.
    ok &= sequence_completed(metrics_url, wait).await;
    let st = ctx.state.lock().unwrap();
    let rounds: Vec<Value> = [first, second, third]
        .into_iter()
        .map(|id| timeline(&st, id))
        .collect();
    notes.insert("wave_rounds".into(), json!(rounds));
    ok
}

async fn sequence_completed(metrics_url: &str, wait: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + wait;
    while tokio::time::Instant::now() < deadline {
        let url = metrics_url.to_string();
        let body = tokio::task::spawn_blocking(move || crate::controller::http_get(&url))
            .await
            .ok()
            .flatten();
        if let Some((200, body)) = body
            && sequences(&body, "completed").is_some_and(|n| n >= 1.0)
        {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    log(&format!("waves: no sequence completed in {wait:?}"));
    false
}

fn sequences(metrics: &str, result: &str) -> Option<f64> {
    let series = format!("kube_reloader_wave_sequences_total{{result=\"{result}\"}}");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(series.as_str()))
        .and_then(|v| v.trim().parse::<f64>().ok())
}

/// Waits until some workload carries change `id`'s hash.
async fn first_rolled(ctx: &Ctx, id: usize, wait: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + wait;
    while tokio::time::Instant::now() < deadline {
        if !rolled_times(&ctx.state.lock().unwrap(), id).is_empty() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    log(&format!("waves: change {id} rolled nothing in {wait:?}"));
    false
}

/// When each workload was first seen with change `id`'s hash, sorted.
fn rolled_times(st: &State, id: usize) -> Vec<f64> {
    let hash = &st.changes[id].hash;
    let mut seen = std::collections::HashMap::new();
    for o in st.observations.iter().filter(|o| &o.hash == hash) {
        seen.entry(o.workload.as_str()).or_insert(o.t);
    }
    let mut times: Vec<f64> = seen.into_values().collect();
    times.sort_by(f64::total_cmp);
    times
}

/// Sizes of the runs of `times` separated by more than `WAVE_GAP_S`.
fn clusters(times: &[f64]) -> Vec<usize> {
    let mut sizes: Vec<usize> = Vec::new();
    for (i, t) in times.iter().enumerate() {
        match i > 0 && t - times[i - 1] <= WAVE_GAP_S {
            true => *sizes.last_mut().expect("a run") += 1,
            false => sizes.push(1),
        }
    }
    sizes
}

fn timeline(st: &State, id: usize) -> Value {
    let c = &st.changes[id];
    let ack = c.t_ack.unwrap_or(c.t_sent);
    let times = rolled_times(st, id);
    let round = |s: f64| (s * 100.0).round() / 100.0;
    json!({
        "change": id,
        "rolled": times.len(),
        "first_rolled_after_s": times.first().map(|t| round(t - ack)),
        "last_rolled_after_s": times.last().map(|t| round(t - ack)),
        "runs_more_than_0_3s_apart": clusters(&times),
    })
}

/// The controller's wave counters: at least one sequence completed, none halted.
pub fn check(metrics: Option<&str>, verdict: &mut Verdict) -> Value {
    let count = |result: &str| metrics.and_then(|m| sequences(m, result));
    let (completed, halted) = (count("completed"), count("halted"));
    let problem = match (completed, halted) {
        (None, _) => Some("no wave sequence completed (kube_reloader_wave_sequences_total)"),
        (_, Some(h)) if h > 0.0 => Some("a wave sequence halted"),
        _ => None,
    };
    if let Some(p) = problem {
        verdict.passed = false;
        verdict.examples.push(format!("waves: {p}"));
    }
    json!({"sequences_completed": completed, "sequences_halted": halted.unwrap_or(0.0)})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_split_where_template_changes_are_far_apart() {
        assert_eq!(clusters(&[]), Vec::<usize>::new());
        assert_eq!(clusters(&[1.0, 1.1, 1.2, 2.0, 2.05, 3.5]), vec![3, 2, 1]);
    }

    #[test]
    fn the_check_fails_without_a_completed_sequence_or_with_a_halt() {
        let ok = "kube_reloader_wave_sequences_total{result=\"completed\"} 2\n";
        let mut v = Verdict {
            passed: true,
            ..Default::default()
        };
        check(Some(ok), &mut v);
        assert!(v.passed);
        check(Some("other 1\n"), &mut v);
        assert!(!v.passed);
        let mut v = Verdict {
            passed: true,
            ..Default::default()
        };
        let halted = format!("{ok}kube_reloader_wave_sequences_total{{result=\"halted\"}} 1\n");
        check(Some(&halted), &mut v);
        assert!(!v.passed, "{:?}", v.examples);
    }
}
