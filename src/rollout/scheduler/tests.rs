//! The scheduler driven step by step on an injected clock: no sleeps, no tasks.

use super::*;
use crate::model::WorkloadKind;

#[derive(Debug, Clone, PartialEq)]
struct Change {
    config: &'static str,
    hash: u32,
    observed: Instant,
}

impl Coalesce for Change {
    fn replaced_by(&self, newer: &Self) -> bool {
        self.config == newer.config
    }
    fn absorb(&mut self, newer: Self) {
        let observed = self.observed;
        *self = Change { observed, ..newer };
    }
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn wl(namespace: &str, name: &str) -> WorkloadKey {
    WorkloadKey::new(WorkloadKind::Deployment, namespace, name)
}

fn change(config: &'static str, hash: u32, observed: Instant) -> Change {
    Change {
        config,
        hash,
        observed,
    }
}

/// A scheduler whose jitter is always 0 (retry after exactly half the backoff step).
fn scheduler(settings: SchedulerSettings) -> Scheduler<Change> {
    Scheduler::new(settings, Box::new(|| 0.0))
}

fn many_slots() -> SchedulerSettings {
    SchedulerSettings {
        concurrency: 1000,
        ..SchedulerSettings::default()
    }
}

fn add(s: &mut Scheduler<Change>, ns: &str, name: &str, p: Priority, now: Instant) {
    s.enqueue(wl(ns, name), Arc::from(ns), p, change("cfg", 1, now), now);
}

/// Dispatches everything ready now, in order, as `namespace/name`.
fn drain_order(s: &mut Scheduler<Change>, now: Instant) -> Vec<String> {
    std::iter::from_fn(|| s.next(now))
        .map(|d| format!("{}/{}", d.key.namespace, d.key.name))
        .collect()
}

#[test]
fn tenants_take_turns_so_a_quiet_tenant_waits_one_turn_not_the_whole_fan_out() {
    let t0 = Instant::now();
    let mut s = scheduler(many_slots());
    for i in 0..100 {
        add(&mut s, "noisy", &format!("w{i}"), Priority::Live, t0);
    }
    add(&mut s, "quiet-a", "web", Priority::Live, t0 + ms(1));
    add(&mut s, "quiet-b", "web", Priority::Live, t0 + ms(2));
    add(&mut s, "quiet-a", "api", Priority::Live, t0 + ms(3));
    let order = drain_order(&mut s, t0 + ms(5));
    assert_eq!(
        order[..6],
        [
            "noisy/w0",
            "quiet-a/web",
            "quiet-b/web",
            "noisy/w1",
            "quiet-a/api",
            "noisy/w2"
        ]
    );
    assert_eq!(order.len(), 103);
    // FIFO inside a tenant.
    let noisy: Vec<_> = order.iter().filter(|k| k.starts_with("noisy/")).collect();
    assert_eq!(noisy[99], "noisy/w99");
}

#[test]
fn live_changes_go_before_background_work_and_tenants_take_turns_within_each() {
    let t0 = Instant::now();
    let mut s = scheduler(many_slots());
    for i in 0..3 {
        add(&mut s, "a", &format!("old{i}"), Priority::Background, t0);
    }
    add(&mut s, "b", "old", Priority::Background, t0);
    add(&mut s, "a", "live0", Priority::Live, t0 + ms(1));
    add(&mut s, "a", "live1", Priority::Live, t0 + ms(1));
    add(&mut s, "c", "live", Priority::Live, t0 + ms(2));
    assert_eq!(
        drain_order(&mut s, t0 + ms(3)),
        [
            "a/live0", "c/live", "a/live1", "a/old0", "b/old", "a/old1", "a/old2"
        ]
    );
}

#[test]
fn a_live_change_promotes_a_pending_background_write() {
    let t0 = Instant::now();
    let mut s = scheduler(many_slots());
    add(&mut s, "a", "x", Priority::Background, t0);
    add(&mut s, "a", "y", Priority::Background, t0);
    s.enqueue(
        wl("a", "y"),
        Arc::from("a"),
        Priority::Live,
        change("other", 2, t0 + ms(1)),
        t0 + ms(1),
    );
    let first = s.next(t0 + ms(2)).unwrap();
    assert_eq!(&*first.key.name, "y");
    assert_eq!(first.priority, Priority::Live);
    assert_eq!(first.changes.len(), 2);
    assert_eq!(drain_order(&mut s, t0 + ms(2)), ["a/x"]);
}

#[test]
fn one_write_per_workload_in_flight_and_what_arrives_meanwhile_goes_next() {
    let t0 = Instant::now();
    let mut s = scheduler(many_slots());
    s.enqueue(
        wl("a", "x"),
        "a".into(),
        Priority::Live,
        change("c1", 1, t0),
        t0,
    );
    let first = s.next(t0).unwrap();
    assert!(!s.enqueue(
        wl("a", "x"),
        "a".into(),
        Priority::Live,
        change("c2", 1, t0),
        t0
    ));
    assert!(s.enqueue(
        wl("a", "x"),
        "a".into(),
        Priority::Live,
        change("c2", 2, t0),
        t0
    ));
    assert!(
        s.next(t0).is_none(),
        "a second write of the same workload started"
    );
    let state = s.inspect(&wl("a", "x"), t0).unwrap();
    assert!(state.in_flight);
    assert_eq!(state.pending_changes, 1);
    assert_eq!(
        s.complete(
            &first.key,
            first.changes,
            Completion::Written { reloaded: true },
            t0
        ),
        None
    );
    let second = s.next(t0).unwrap();
    assert_eq!(second.changes, [change("c2", 2, t0)]);
    s.complete(&second.key, second.changes, Completion::Finished, t0);
    assert!(s.is_empty());
    assert_eq!(
        s.stats(),
        QueueStats {
            slots: 1000,
            ..QueueStats::default()
        }
    );
}

#[test]
fn a_failed_write_frees_its_slot_at_once_and_waits_out_its_backoff() {
    let t0 = Instant::now();
    let mut s = scheduler(SchedulerSettings {
        concurrency: 1,
        backoff_base: ms(200),
        ..SchedulerSettings::default()
    });
    add(&mut s, "poisoned", "x", Priority::Live, t0);
    add(&mut s, "quiet", "y", Priority::Live, t0);
    let failing = s.next(t0).unwrap();
    assert!(s.next(t0).is_none(), "only one slot");
    let step = s
        .complete(
            &failing.key,
            failing.changes,
            Completion::Failed {
                error: "500 webhook".into(),
            },
            t0 + ms(10),
        )
        .unwrap();
    // base 200 ms, first failure, jitter 0: half the step.
    assert_eq!(step.retry_in, ms(100));
    assert!(!step.report);
    assert_eq!(s.stats().in_backoff, 1);
    // The slot is free: the quiet workload goes out now.
    let quiet = s.next(t0 + ms(10)).unwrap();
    assert_eq!(&*quiet.key.namespace, "quiet");
    s.complete(
        &quiet.key,
        quiet.changes,
        Completion::Written { reloaded: true },
        t0 + ms(20),
    );
    assert!(
        s.next(t0 + ms(109)).is_none(),
        "retried before its backoff ended"
    );
    assert_eq!(s.next_wake(), Some(t0 + ms(110)));
    let state = s.inspect(&wl("poisoned", "x"), t0 + ms(60)).unwrap();
    assert_eq!(state.backoff_retry_in_seconds, Some(0.05));
    assert_eq!(state.last_error.as_deref(), Some("500 webhook"));
    assert_eq!(state.priority, Priority::Background);
    let retry = s.next(t0 + ms(110)).unwrap();
    assert_eq!(retry.attempt, 2);
    assert_eq!(s.stats().in_backoff, 0);
}

#[test]
fn a_failing_workloads_change_survives_and_newer_changes_coalesce_into_it() {
    let t0 = Instant::now();
    let mut s = scheduler(SchedulerSettings {
        backoff_base: ms(200),
        ..many_slots()
    });
    let key = wl("poisoned", "x");
    let tenant: TenantId = "poisoned".into();
    s.enqueue(
        key.clone(),
        tenant.clone(),
        Priority::Live,
        change("c1", 1, t0),
        t0,
    );
    let mut now = t0;
    let mut steps = Vec::new();
    for round in 0..6u32 {
        let d = s.next(now).expect("retried after its backoff");
        if round == 2 {
            // Arrives while the third attempt is in flight.
            s.enqueue(
                key.clone(),
                tenant.clone(),
                Priority::Live,
                change("c1", 2, now),
                now,
            );
        }
        if round == 4 {
            // Arrives while it is in flight: coalesces into the failed write that goes back.
            s.enqueue(
                key.clone(),
                tenant.clone(),
                Priority::Live,
                change("c2", 7, now),
                now,
            );
        }
        let failure = Completion::Failed {
            error: format!("500 attempt {}", d.attempt),
        };
        let step = s.complete(&d.key, d.changes, failure, now).unwrap();
        assert_eq!(step.failures, round + 1);
        steps.push((step.retry_in, step.report));
        now = s.next_wake().unwrap();
        // Arrives during the backoff: merged, not a second entry.
        s.enqueue(
            key.clone(),
            tenant.clone(),
            Priority::Live,
            change("c1", 3 + round, now),
            now,
        );
    }
    assert_eq!(s.len(), 1);
    let last = s.next(now).unwrap();
    assert_eq!(last.attempt, 7);
    assert_eq!(
        last.changes,
        [change("c1", 8, t0), change("c2", 7, t0 + ms(1500))],
        "the newest hash of c1, the first observation time kept"
    );
    // 200 ms doubling, jitter 0 (half the step); reported at the 3rd failure, then the 4th, 5th.
    let delays: Vec<_> = steps.iter().map(|(d, _)| d.as_millis()).collect();
    assert_eq!(delays, [100, 200, 400, 800, 1600, 3200]);
    let reports: Vec<_> = steps.iter().map(|(_, r)| *r).collect();
    assert_eq!(reports, [false, false, true, true, true, false]);
    s.complete(
        &last.key,
        last.changes,
        Completion::Written { reloaded: true },
        now,
    );
    assert!(s.is_empty(), "a success forgets the workload");
}

#[test]
fn backoff_is_capped_and_jittered_within_half_a_step() {
    let settings = SchedulerSettings::default();
    assert_eq!(backoff(&settings, 1, 0.0), ms(5));
    let almost_full = backoff(&settings, 1, 0.999_999);
    assert!(
        almost_full > Duration::from_micros(9_999) && almost_full < ms(10),
        "{almost_full:?}"
    );
    assert_eq!(backoff(&settings, 2, 0.0), ms(10));
    // Six failures in a row have waited 315-630 ms in all, not 6.3-12.6 s as from 200 ms.
    let six: Duration = (1..=6).map(|f| backoff(&settings, f, 0.0)).sum();
    assert_eq!(six, ms(315));
    assert_eq!(backoff(&settings, 12, 0.0), Duration::from_millis(10_240));
    assert_eq!(backoff(&settings, 13, 0.0), Duration::from_secs(15));
    assert_eq!(backoff(&settings, 40, 0.0), Duration::from_secs(15));
    assert_eq!(backoff(&settings, 40, 1.0), Duration::from_secs(30));
    let mut jitter = default_jitter();
    for _ in 0..1000 {
        let j = jitter();
        assert!((0.0..1.0).contains(&j), "{j}");
    }
}

#[test]
fn reports_are_spaced_out_as_failures_go_on() {
    let reported: Vec<u32> = (1..=40).filter(|f| should_report(*f, 3)).collect();
    assert_eq!(reported, [3, 4, 5, 7, 11, 19, 35]);
}

#[test]
fn a_handover_hold_is_not_a_failure() {
    let t0 = Instant::now();
    let mut s = scheduler(many_slots());
    add(&mut s, "a", "x", Priority::Live, t0);
    let d = s.next(t0).unwrap();
    let held = Completion::Held { retry_in: ms(100) };
    assert_eq!(s.complete(&d.key, d.changes, held, t0), None);
    let state = s.inspect(&wl("a", "x"), t0).unwrap();
    assert_eq!(state.handover_hold_in_seconds, Some(0.1));
    assert_eq!(state.failures, 0);
    assert!(s.next(t0 + ms(99)).is_none());
    let again = s.next(t0 + ms(100)).unwrap();
    assert_eq!((again.attempt, again.priority), (1, Priority::Live));
}

#[test]
fn a_step_made_ends_a_failing_streak_and_waits_for_the_next_step() {
    let t0 = Instant::now();
    let mut s = scheduler(many_slots());
    add(&mut s, "a", "x", Priority::Live, t0);
    let d = s.next(t0).unwrap();
    let failed = Completion::Failed {
        error: "blocked".into(),
    };
    assert!(s.complete(&d.key, d.changes, failed, t0).is_some());
    let t1 = t0 + Duration::from_secs(1);
    let d = s.next(t1).unwrap();
    assert_eq!(d.attempt, 2, "a retry");
    let step = Completion::Progressed {
        step: "evicted pod p-1".into(),
        next_in: Duration::from_secs(1),
    };
    assert_eq!(s.complete(&d.key, d.changes, step, t1), None);
    let state = s.inspect(&wl("a", "x"), t1).unwrap();
    assert_eq!(state.progress.as_deref(), Some("evicted pod p-1"));
    assert_eq!(state.next_step_in_seconds, Some(1.0));
    assert_eq!((state.failures, state.last_error), (0, None));
    assert!(
        s.next(t1 + ms(999)).is_none(),
        "not before the next step is due"
    );
    let next = s.next(t1 + Duration::from_secs(1)).unwrap();
    assert_eq!(next.attempt, 1, "no longer a failing write");
    s.complete(
        &next.key,
        next.changes,
        Completion::Written { reloaded: true },
        t1,
    );
    assert!(s.inspect(&wl("a", "x"), t1).is_none(), "done: nothing left");
}

#[test]
fn the_minimum_interval_holds_the_next_write_of_a_workload_only() {
    let t0 = Instant::now();
    let mut s = scheduler(SchedulerSettings {
        min_reload_interval: Duration::from_secs(10),
        ..many_slots()
    });
    add(&mut s, "a", "x", Priority::Live, t0);
    let d = s.next(t0).unwrap();
    s.complete(
        &d.key,
        d.changes,
        Completion::Written { reloaded: true },
        t0,
    );
    add(&mut s, "a", "x", Priority::Live, t0 + ms(1));
    add(&mut s, "a", "y", Priority::Live, t0 + ms(1));
    assert_eq!(drain_order(&mut s, t0 + ms(2)), ["a/y"]);
    let state = s.inspect(&wl("a", "x"), t0 + ms(2)).unwrap();
    let hold = state.min_interval_hold_in_seconds.unwrap();
    assert!((hold - 9.998).abs() < 1e-9, "{hold}");
    assert!(s.next(t0 + ms(9_999)).is_none());
    assert_eq!(drain_order(&mut s, t0 + ms(10_000)), ["a/x"]);
}

#[test]
fn the_per_tenant_rate_holds_one_tenant_and_not_the_others() {
    let t0 = Instant::now();
    let mut s = scheduler(SchedulerSettings {
        per_tenant_rate: Some(2.0),
        ..many_slots()
    });
    for i in 0..10 {
        add(&mut s, "noisy", &format!("w{i}"), Priority::Live, t0);
    }
    add(&mut s, "quiet", "web", Priority::Live, t0);
    // A burst of one second's worth (2), the quiet tenant in between.
    assert_eq!(
        drain_order(&mut s, t0),
        ["noisy/w0", "quiet/web", "noisy/w1"]
    );
    assert_eq!(s.next_wake(), Some(t0 + ms(500)));
    assert!(s.next(t0 + ms(499)).is_none());
    assert_eq!(drain_order(&mut s, t0 + ms(500)), ["noisy/w2"]);
    // Idle for longer than a second: still one second's worth, no more.
    assert_eq!(
        drain_order(&mut s, t0 + ms(2_000)),
        ["noisy/w3", "noisy/w4"]
    );
}

#[test]
fn the_concurrency_limit_counts_writes_in_flight() {
    let t0 = Instant::now();
    let mut s = scheduler(SchedulerSettings {
        concurrency: 2,
        ..SchedulerSettings::default()
    });
    for n in ["a", "b", "c"] {
        add(&mut s, n, "x", Priority::Live, t0);
    }
    let a = s.next(t0).unwrap();
    let _b = s.next(t0).unwrap();
    assert!(s.next(t0).is_none());
    assert_eq!(s.stats().in_flight, 2);
    assert_eq!(s.stats().tenants, 3);
    s.complete(&a.key, a.changes, Completion::Finished, t0);
    assert_eq!(&*s.next(t0).unwrap().key.namespace, "c");
    assert_eq!(s.inspect(&wl("a", "x"), t0), None);
}

#[test]
fn background_work_leaves_half_the_slots_to_live_changes() {
    let t0 = Instant::now();
    let mut s = scheduler(SchedulerSettings {
        concurrency: 4,
        ..SchedulerSettings::default()
    });
    for i in 0..10 {
        add(
            &mut s,
            "retrying",
            &format!("w{i}"),
            Priority::Background,
            t0,
        );
    }
    assert_eq!(
        drain_order(&mut s, t0).len(),
        2,
        "background took more than half"
    );
    assert!(!s.has_ready(t0));
    add(&mut s, "live", "a", Priority::Live, t0);
    add(&mut s, "live", "b", Priority::Live, t0);
    assert!(s.has_ready(t0));
    assert_eq!(drain_order(&mut s, t0), ["live/a", "live/b"]);
}

#[test]
fn a_tenant_holds_at_most_half_the_slots_so_others_start_at_once() {
    let t0 = Instant::now();
    let mut s = scheduler(SchedulerSettings {
        concurrency: 4,
        ..SchedulerSettings::default()
    });
    for i in 0..10 {
        add(&mut s, "slow", &format!("w{i}"), Priority::Live, t0);
    }
    let first = drain_order(&mut s, t0);
    assert_eq!(
        first,
        ["slow/w0", "slow/w1"],
        "one tenant took more than half"
    );
    add(&mut s, "quiet", "a", Priority::Live, t0);
    assert_eq!(drain_order(&mut s, t0), ["quiet/a"]);
    // A completion of the slow tenant gives it its next turn.
    let w0 = wl("slow", "w0");
    s.complete(&w0, vec![], Completion::Finished, t0);
    assert_eq!(drain_order(&mut s, t0), ["slow/w2"]);
}

/// Slow writes widen the slots for everyone; one tenant still gets half the floor, not half the
/// widened width (its own slow writes are what may have widened it).
#[test]
fn widened_slots_leave_each_tenant_half_the_floor() {
    let t0 = Instant::now();
    let mut s = scheduler(SchedulerSettings {
        concurrency: 4,
        widening: Some(Widening {
            max: 16,
            writes_per_second: 10.0,
        }),
        ..SchedulerSettings::default()
    });
    for _ in 0..100 {
        s.observe_write(Duration::from_secs(2), false, t0);
    }
    assert_eq!(s.stats().slots, 16, "10/s x 2 s = 20, capped at 16");
    for i in 0..10 {
        add(&mut s, "slow", &format!("w{i}"), Priority::Live, t0);
    }
    for i in 0..10 {
        add(&mut s, &format!("t{i}"), "w", Priority::Live, t0);
    }
    // Half of 16 would let "slow" fill the 6 slots the other 10 tenants leave.
    let started = drain_order(&mut s, t0);
    assert_eq!(started.len(), 12, "{started:?}");
    let slow = started.iter().filter(|k| k.starts_with("slow/")).count();
    assert_eq!(slow, 2, "half the floor of 4: {started:?}");
}
