use super::*;
use crate::chaos::fixtures::{change, seen};

fn fault(kind: &str, target: &str, start_s: f64, end_s: f64) -> FaultRecord {
    FaultRecord {
        kind: kind.into(),
        target: target.into(),
        start_s,
        end_s,
        detail: String::new(),
    }
}

/// r0 writes in namespace `a`, r1 in `b`; r1 takes `a` over at 14.5 s.
fn writes() -> Vec<Vec<(f64, String)>> {
    vec![
        vec![(5.0, "a".into()), (9.0, "a".into())],
        vec![(6.0, "b".into()), (14.5, "a".into()), (15.0, "b".into())],
    ]
}

/// Changes at 10-12 s: one in `a` (reached after 4 s), two in `b` (0.1 s and 0.9 s after
/// their acks), and one in `b` folded into a later change (not a direct reload).
fn history() -> (Vec<Change>, Vec<Observation>) {
    let changes = vec![
        change(0, "x", &["a/w"], 10.0),
        change(1, "y", &["b/w"], 11.0),
        change(2, "z", &["b/v"], 12.0),
        change(3, "z", &["b/v"], 12.5),
    ];
    let observations = vec![
        seen("a/w", 0, 14.1),
        seen("b/w", 1, 11.2),
        seen("b/v", 3, 13.5),
    ];
    (changes, observations)
}

#[test]
fn a_replica_fault_reports_the_latency_of_the_namespaces_its_target_did_not_write_in() {
    let (changes, observations) = history();
    let log = [fault("kill", "r0", 10.0, 13.0)];
    let [kill] = RunImpact::new(&log, &changes, &observations, &writes(), 2.0)
        .each_fault()
        .try_into()
        .unwrap();
    // `a` is r0's (it wrote there at 9 s); `b`'s reloads of changes made during the kill count.
    assert_eq!(kill.untouched_reloads, Some(2));
    assert_eq!(kill.untouched_p50_ms.map(f64::round), Some(100.0));
    assert_eq!(kill.untouched_p99_ms.map(f64::round), Some(900.0));
    // r1's first write in `a` after the kill started.
    assert_eq!(kill.takeover_s, Some(4.5));
}

#[test]
fn a_replica_back_before_anyone_else_wrote_in_its_namespaces_was_not_taken_over() {
    let (changes, observations) = history();
    let mut back_first = writes();
    back_first[0].push((12.0, "a".into()));
    let log = [fault("stop", "r0", 10.0, 11.0)];
    let [stop] = RunImpact::new(&log, &changes, &observations, &back_first, 2.0)
        .each_fault()
        .try_into()
        .unwrap();
    assert_eq!(stop.takeover_s, None);
}

#[test]
fn a_webhook_touches_its_namespace_and_control_plane_faults_touch_every_one() {
    let (changes, observations) = history();
    let webhook_only = [fault("webhook", "a", 9.0, 13.0)];
    let [webhook] = RunImpact::new(&webhook_only, &changes, &observations, &writes(), 2.0)
        .each_fault()
        .try_into()
        .unwrap();
    assert_eq!(webhook.untouched_reloads, Some(2));
    assert_eq!(webhook.takeover_s, None, "no replica was taken away");
    let restart_only = [fault("api-restart", "control-plane", 9.0, 13.0)];
    let [restart] = RunImpact::new(&restart_only, &changes, &observations, &writes(), 2.0)
        .each_fault()
        .try_into()
        .unwrap();
    assert_eq!(restart.untouched_reloads, None);
    assert_eq!(restart.untouched_p99_ms, None);
}

#[test]
fn a_namespace_another_fault_touched_at_the_time_is_not_untouched() {
    let (changes, observations) = history();
    // The webhook on `a` alone leaves `b`'s two reloads untouched; with r1 (which wrote in `b`
    // within the margin of its stop) stopped at the same time, `b` was held up by the stop and
    // counts for neither.
    let log = [
        fault("webhook", "a", 9.0, 13.0),
        fault("stop", "r1", 11.0, 13.0),
    ];
    let [webhook, stop] = RunImpact::new(&log, &changes, &observations, &writes(), 2.0)
        .each_fault()
        .try_into()
        .unwrap();
    assert_eq!(webhook.untouched_reloads, Some(0));
    assert_eq!(
        stop.untouched_reloads,
        Some(0),
        "`a` is the webhook's, `b` the stop's"
    );
    // A fault that touches every namespace, in effect at the time, leaves nothing untouched.
    let log = [
        fault("webhook", "a", 9.0, 13.0),
        fault("api-restart", "control-plane", 9.0, 13.0),
    ];
    let [webhook, _] = RunImpact::new(&log, &changes, &observations, &writes(), 2.0)
        .each_fault()
        .try_into()
        .unwrap();
    assert_eq!(webhook.untouched_reloads, Some(0));
    // One that ended more than the margin before the change does not count.
    let log = [
        fault("webhook", "a", 9.0, 13.0),
        fault("api-restart", "control-plane", 2.0, 5.0),
    ];
    let [webhook, _] = RunImpact::new(&log, &changes, &observations, &writes(), 2.0)
        .each_fault()
        .try_into()
        .unwrap();
    assert_eq!(webhook.untouched_reloads, Some(2));
}

#[test]
fn kinds_pool_their_faults() {
    let (changes, observations) = history();
    let log = [
        fault("latency", "r0", 10.5, 11.5),
        fault("latency", "r0", 11.5, 12.5),
        fault("kill", "r0", 10.0, 13.0),
    ];
    let pooled = RunImpact::new(&log, &changes, &observations, &writes(), 0.5).by_kind();
    assert_eq!(pooled["latency"].faults, 2);
    // r0 wrote nothing within 0.5 s of either window: every reload during them counts.
    assert_eq!(pooled["latency"].untouched_reloads, 2);
    assert_eq!(pooled["latency"].takeover_max_s, None);
    assert_eq!(pooled["kill"].takeover_max_s, Some(4.5));
}

#[test]
fn the_split_puts_each_reload_with_or_without_a_fault_that_touched_it() {
    let (changes, observations) = history();
    // The kill touches `a` (r0 wrote there), so a/w (4.0 s) is touched; b/w (0.1 s) and b/v
    // (0.9 s after the ack of its later change) are not.
    let log = [fault("kill", "r0", 10.0, 13.0)];
    let split = RunImpact::new(&log, &changes, &observations, &writes(), 2.0).touch_split();
    assert_eq!(split.touched.reloads, 1);
    assert_eq!(split.touched.p90_ms.map(f64::round), Some(4000.0));
    assert_eq!(split.untouched.reloads, 2);
    assert_eq!(split.untouched.p50_ms.map(f64::round), Some(100.0));
    assert_eq!(split.untouched.p90_ms.map(f64::round), Some(900.0));
    // A fault that touches every namespace while they waited leaves none untouched.
    let log = [fault("api-restart", "control-plane", 11.0, 11.1)];
    let split = RunImpact::new(&log, &changes, &observations, &writes(), 2.0).touch_split();
    assert_eq!((split.touched.reloads, split.untouched.reloads), (3, 0));
    assert_eq!(split.untouched.p90_ms, None);
}

#[test]
fn nearest_rank_percentiles() {
    let v: Vec<f64> = (1..=100).map(f64::from).collect();
    assert_eq!(percentile(&v, 50.0), Some(50.0));
    assert_eq!(percentile(&v, 99.0), Some(99.0));
    assert_eq!(percentile(&[7.0], 99.0), Some(7.0));
    assert_eq!(percentile(&[], 50.0), None);
}

#[test]
fn slow_reloads_name_the_fault_kinds_that_touched_them() {
    let (changes, observations) = history();
    let replica_writes = writes();
    let count = |pairs: &[(&str, usize)]| -> BTreeMap<String, usize> {
        pairs.iter().map(|(k, n)| (k.to_string(), *n)).collect()
    };
    // The kill touches `a` (r0 wrote there); the webhook on `b` ended long before b's change.
    let log = [
        fault("kill", "r0", 10.0, 13.0),
        fault("webhook", "b", 0.0, 1.0),
    ];
    let run = RunImpact::new(&log, &changes, &observations, &replica_writes, 2.0);
    let [over_half_s, over_1_s] = run.slow_reloads(&[500.0, 1000.0]).try_into().unwrap();
    assert_eq!(over_half_s.reloads, 2, "a/w (4.0 s) and b/v (0.9 s)");
    assert_eq!(over_half_s.only_by, count(&[("kill", 1)]));
    assert_eq!(over_half_s.untouched, 1, "b/v: no fault reached `b`");
    let slowest: Vec<(&str, f64)> = over_half_s
        .slowest
        .iter()
        .map(|r| (r.workload.as_str(), (r.latency_ms / 100.0).round() / 10.0))
        .collect();
    assert_eq!(slowest, [("a/w", 4.0), ("b/v", 0.9)], "slowest first");
    assert_eq!(over_half_s.slowest[0].touched_by, ["kill"]);
    assert_eq!(over_1_s.reloads, 1);
    assert_eq!(over_1_s.touched_by, count(&[("kill", 1)]));
    assert_eq!(over_1_s.untouched, 0);
    // An API server restart while both waited touches both; a/w is the kill's and the restart's.
    let log = [
        fault("kill", "r0", 10.0, 13.0),
        fault("api-restart", "control-plane", 13.2, 13.4),
    ];
    let run = RunImpact::new(&log, &changes, &observations, &replica_writes, 2.0);
    let [over_half_s] = run.slow_reloads(&[500.0]).try_into().unwrap();
    assert_eq!(
        over_half_s.touched_by,
        count(&[("api-restart", 2), ("kill", 1)])
    );
    assert_eq!(over_half_s.only_by, count(&[("api-restart", 1)]));
    assert_eq!(over_half_s.untouched, 0);
}
