use std::collections::HashSet;
use std::sync::atomic::AtomicU32;

use super::*;
use crate::model::{ConfigKey, ConfigKind, WorkloadKind};

/// An in-memory writer: records what it was asked to write and fails on demand.
#[derive(Default)]
struct Recorder {
    writes: Mutex<Vec<(WorkloadKey, Vec<String>)>>,
    fail_first: AtomicU32,
    failure: Mutex<Option<WriteError>>,
    delay: Duration,
    /// Finds every workload already up to date (writes nothing, takes no turn).
    up_to_date: std::sync::atomic::AtomicBool,
    /// Its Events never finish sending (an API server that stopped answering them).
    events_stuck: std::sync::atomic::AtomicBool,
}

impl WorkloadWriter for Arc<Recorder> {
    async fn write(
        &self,
        key: &WorkloadKey,
        changes: &[QueuedChange],
        turn: &WriteTurn<'_>,
    ) -> Result<WriteOutcome, WriteError> {
        tokio::time::sleep(self.delay).await;
        if self.up_to_date.load(Ordering::SeqCst) {
            return Ok(WriteOutcome::UpToDate);
        }
        turn.take().await;
        if self.fail_first.load(Ordering::SeqCst) > 0 {
            self.fail_first.fetch_sub(1, Ordering::SeqCst);
            return Err(self.failure.lock().unwrap().clone().unwrap());
        }
        let names = changes
            .iter()
            .map(|c| c.change.config.name.to_string())
            .collect();
        self.writes.lock().unwrap().push((key.clone(), names));
        Ok(WriteOutcome::Reloaded)
    }

    async fn flush(&self, deadline: Duration) -> bool {
        if self.events_stuck.load(Ordering::SeqCst) {
            tokio::time::sleep(deadline).await;
            return false;
        }
        true
    }
}

fn change(config: &str, hash: &str) -> QueuedChange {
    QueuedChange {
        change: TemplateChange {
            counted: Default::default(),
            config: ConfigKey::new(ConfigKind::ConfigMap, "ns", config),
            hash: Some(hash.into()),
            explicit: false,
        },
        observed_at: Instant::now(),
        span: Span::none(),
        acted: None,
    }
}

fn wl(name: &str) -> WorkloadKey {
    WorkloadKey::new(WorkloadKind::Deployment, "ns", name)
}

/// Short backoffs, and a limiter that never makes anyone wait: governor runs on the real clock,
/// while these tests run on tokio's paused one (every sleep below is virtual and deterministic:
/// time only moves when every task waits).
fn fast() -> QueueSettings {
    QueueSettings {
        backoff_base: Duration::from_millis(5),
        backoff_cap: Duration::from_millis(20),
        max_per_second: NonZeroU32::new(100_000).unwrap(),
        burst: NonZeroU32::new(100_000).unwrap(),
        ..QueueSettings::default()
    }
}

#[tokio::test(start_paused = true)]
async fn changes_arriving_during_a_write_are_coalesced_into_one_more_write() {
    let rec = Arc::new(Recorder {
        delay: Duration::from_millis(50),
        ..Default::default()
    });
    let q = ReloadQueue::start(rec.clone(), (), fast());
    q.enqueue(wl("a"), change("c1", "1"));
    // Virtual time: at 10 ms the first write is inside its 50 ms at the API server.
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(q.stats().in_flight, 1);
    // The first write is in flight: these three pile up and go out together.
    q.enqueue(wl("a"), change("c2", "1"));
    q.enqueue(wl("a"), change("c3", "1"));
    q.enqueue(wl("a"), change("c2", "2"));
    assert_eq!(q.drain(Duration::from_secs(5)).await, Drained::Everything);
    let writes = rec.writes.lock().unwrap().clone();
    assert_eq!(writes.len(), 2, "{writes:?}");
    assert_eq!(writes[1].1, ["c2", "c3"]);
}

/// The shutdown drain says what it left: writes (the next owner's to make) apart from Events
/// that were still being sent once every write was done.
#[tokio::test(start_paused = true)]
async fn the_drain_tells_writes_left_from_events_left() {
    let slow = Arc::new(Recorder {
        delay: Duration::from_secs(10),
        ..Default::default()
    });
    let q = ReloadQueue::start(slow.clone(), (), fast());
    q.enqueue(wl("a"), change("c1", "1"));
    q.enqueue(wl("b"), change("c1", "1"));
    assert_eq!(
        q.drain(Duration::from_secs(1)).await,
        Drained::WritesLeft(2)
    );

    let stuck = Arc::new(Recorder::default());
    stuck.events_stuck.store(true, Ordering::SeqCst);
    let q = ReloadQueue::start(stuck.clone(), (), fast());
    q.enqueue(wl("a"), change("c1", "1"));
    assert_eq!(q.drain(Duration::from_secs(1)).await, Drained::EventsLeft);
    assert_eq!(stuck.writes.lock().unwrap().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn min_interval_delays_the_second_write() {
    let rec = Arc::new(Recorder::default());
    let settings = QueueSettings {
        min_reload_interval: Duration::from_millis(300),
        ..fast()
    };
    let q = ReloadQueue::start(rec.clone(), (), settings);
    let start = tokio::time::Instant::now();
    q.enqueue(wl("a"), change("c1", "1"));
    assert_eq!(q.drain(Duration::from_secs(2)).await, Drained::Everything);
    q.enqueue(wl("a"), change("c1", "2"));
    q.enqueue(wl("a"), change("c1", "3"));
    assert_eq!(q.drain(Duration::from_secs(2)).await, Drained::Everything);
    assert!(start.elapsed() >= Duration::from_millis(300));
    assert_eq!(rec.writes.lock().unwrap().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn conflicts_and_throttling_are_retried_until_written() {
    let rec = Arc::new(Recorder::default());
    rec.fail_first.store(3, Ordering::SeqCst);
    *rec.failure.lock().unwrap() = Some(WriteError::Transient("429 Too Many Requests".into()));
    let q = ReloadQueue::start(rec.clone(), (), fast());
    q.enqueue(wl("a"), change("c1", "1"));
    assert_eq!(q.drain(Duration::from_secs(5)).await, Drained::Everything);
    assert_eq!(rec.writes.lock().unwrap().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_permanently_failing_write_is_dropped_and_others_go_on() {
    let rec = Arc::new(Recorder::default());
    rec.fail_first.store(1, Ordering::SeqCst);
    *rec.failure.lock().unwrap() = Some(WriteError::Permanent("403 forbidden".into()));
    let q = ReloadQueue::start(rec.clone(), (), fast());
    q.enqueue(wl("bad"), change("c1", "1"));
    tokio::time::sleep(Duration::from_millis(20)).await;
    q.enqueue(wl("good"), change("c1", "1"));
    assert_eq!(q.drain(Duration::from_secs(5)).await, Drained::Everything);
    let writes = rec.writes.lock().unwrap().clone();
    assert_eq!(writes.len(), 1);
    assert_eq!(&*writes[0].0.name, "good");
}

/// The limiter is spent on writes only: a write that finds nothing to change keeps the token for
/// the next real write, and a real write takes one.
#[tokio::test]
async fn only_writes_that_change_something_take_a_limiter_turn() {
    let recorder = Arc::new(Recorder::default());
    recorder.up_to_date.store(true, Ordering::SeqCst);
    let settings = QueueSettings {
        max_per_second: NonZeroU32::new(1).unwrap(),
        burst: NonZeroU32::new(1).unwrap(),
        backoff_base: Duration::from_millis(5),
        backoff_cap: Duration::from_millis(20),
        ..QueueSettings::default()
    };
    let queue = ReloadQueue::start(recorder.clone(), (), settings);
    for name in ["a", "b", "c"] {
        queue.enqueue(wl(name), change("cfg", "h1"));
    }
    assert_eq!(
        queue.drain(Duration::from_secs(5)).await,
        Drained::Everything
    );
    assert!(
        queue.inner.limiter.try_take(),
        "up-to-date writes spent the only token"
    );

    recorder.up_to_date.store(false, Ordering::SeqCst);
    queue.enqueue(wl("d"), change("cfg", "h2"));
    assert_eq!(
        queue.drain(Duration::from_secs(5)).await,
        Drained::Everything
    );
    assert_eq!(recorder.writes.lock().unwrap().len(), 1);
    assert!(
        !queue.inner.limiter.try_take(),
        "a real write did not take the token"
    );
}

/// Fails every write of the workloads in `poisoned` with a 500, like an unreachable admission
/// webhook; counts what the queue reports.
#[derive(Default)]
struct Poisoned {
    poisoned: Mutex<HashSet<String>>,
    written: Mutex<Vec<String>>,
    attempts: AtomicU32,
    reported: Mutex<Vec<u32>>,
}

impl WorkloadWriter for Arc<Poisoned> {
    async fn write(
        &self,
        key: &WorkloadKey,
        _changes: &[QueuedChange],
        turn: &WriteTurn<'_>,
    ) -> Result<WriteOutcome, WriteError> {
        // A write takes a while at the API server (virtual time).
        tokio::time::sleep(Duration::from_millis(10)).await;
        turn.take().await;
        if self.poisoned.lock().unwrap().contains(&*key.namespace) {
            self.attempts.fetch_add(1, Ordering::SeqCst);
            return Err(WriteError::Transient("500 webhook unreachable".into()));
        }
        self.written.lock().unwrap().push(key.to_string());
        Ok(WriteOutcome::Reloaded)
    }

    async fn report_failure(&self, _key: &WorkloadKey, _error: &WriteError, failures: u32) {
        self.reported.lock().unwrap().push(failures);
    }
}

fn in_ns(namespace: &str, name: &str) -> WorkloadKey {
    WorkloadKey::new(WorkloadKind::Deployment, namespace, name)
}

/// Before: a failing write slept in its slot between retries, so 32 of them stopped everyone.
#[tokio::test(start_paused = true)]
async fn failing_writes_free_their_slots_and_are_written_once_the_cause_is_gone() {
    let writer = Arc::new(Poisoned::default());
    writer.poisoned.lock().unwrap().insert("poisoned".into());
    let settings = QueueSettings {
        concurrency: 4,
        // governor runs on the real clock: keep it out of this virtual-time test.
        max_per_second: NonZeroU32::new(100_000).unwrap(),
        burst: NonZeroU32::new(100_000).unwrap(),
        backoff_base: Duration::from_millis(200),
        backoff_cap: Duration::from_secs(2),
        ..QueueSettings::default()
    };
    let queue = ReloadQueue::start(writer.clone(), (), settings);
    for i in 0..40 {
        queue.enqueue(in_ns("poisoned", &format!("p{i}")), change("cfg", "1"));
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    for i in 0..10 {
        queue.enqueue(in_ns(&format!("quiet{i}"), "web"), change("cfg", "1"));
    }
    // Four slots, 40 failing workloads: the quiet ones still go out within a few writes' time.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let written = writer.written.lock().unwrap().clone();
    assert_eq!(written.len(), 10, "{written:?}");
    assert!(queue.stats().in_backoff > 0);
    let state = queue.inspect(&in_ns("poisoned", "p0")).unwrap();
    assert_eq!(
        state.last_error.as_deref(),
        Some("transient: 500 webhook unreachable")
    );
    assert!(state.failures >= 1);
    // A newer change of a failing workload joins its pending write.
    queue.enqueue(in_ns("poisoned", "p0"), change("cfg", "2"));
    assert_eq!(queue.depth(), 40);

    tokio::time::sleep(Duration::from_secs(20)).await;
    writer.poisoned.lock().unwrap().clear();
    // Within one maximum backoff (2 s) every poisoned workload is written, once.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let written = writer.written.lock().unwrap().clone();
    let poisoned: HashSet<_> = written
        .iter()
        .filter(|k| k.contains("/poisoned/"))
        .collect();
    assert_eq!(written.len(), 50, "{written:?}");
    assert_eq!(poisoned.len(), 40);
    assert_eq!(queue.depth(), 0);
    // Reported per backoff step, not per attempt: 3rd, 4th, 5th, 7th, 11th... failure.
    let reported = writer.reported.lock().unwrap().clone();
    let attempts = writer.attempts.load(Ordering::SeqCst) as usize;
    assert!(!reported.is_empty());
    assert!(
        reported.len() * 2 < attempts,
        "{} reports for {attempts} attempts",
        reported.len()
    );
    assert!(
        reported.iter().all(|f| [3, 4, 5, 7, 11, 19].contains(f)),
        "{reported:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn live_changes_overtake_start_up_reconciliation() {
    let writer = Arc::new(Poisoned::default());
    let settings = QueueSettings {
        concurrency: 1,
        ..QueueSettings::default()
    };
    let queue = ReloadQueue::start(writer.clone(), (), settings);
    for i in 0..5 {
        queue.enqueue_as(
            in_ns("a", &format!("old{i}")),
            change("cfg", "1"),
            Priority::Background,
        );
    }
    queue.enqueue(in_ns("b", "live"), change("cfg", "1"));
    assert_eq!(
        queue.drain(Duration::from_secs(5)).await,
        Drained::Everything
    );
    let written = writer.written.lock().unwrap().clone();
    assert_eq!(
        written,
        ["b/live", "a/old0", "a/old1", "a/old2", "a/old3", "a/old4"]
            .map(|k| format!("Deployment/{k}"))
    );
}

/// The most writes seen in flight while 64 writes of 2 s each (64 tenants) go out at 8 a second.
async fn most_in_flight_with(max_concurrency: Option<usize>) -> (usize, usize) {
    let writer = Arc::new(Recorder {
        delay: Duration::from_secs(2),
        ..Default::default()
    });
    let settings = QueueSettings {
        concurrency: 4,
        max_concurrency,
        max_per_second: NonZeroU32::new(8).unwrap(),
        burst: NonZeroU32::new(8).unwrap(),
        ..QueueSettings::default()
    };
    let queue = ReloadQueue::start(writer.clone(), (), settings);
    for i in 0..64 {
        queue.enqueue(in_ns(&format!("t{i}"), "w"), change("cfg", "1"));
    }
    let mut most = 0;
    while queue.depth() > 0 {
        most = most.max(queue.stats().in_flight);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(writer.writes.lock().unwrap().len(), 64);
    (most, queue.stats().slots)
}

/// 8 writes a second of 2 s each need 16 in flight (Little's law); 4 slots carry 2 a second.
#[tokio::test(start_paused = true)]
async fn slow_writes_widen_the_slots_up_to_the_ceiling_and_no_further() {
    let (fixed, _) = most_in_flight_with(None).await;
    assert_eq!(fixed, 4);
    let (widened, slots_after) = most_in_flight_with(Some(12)).await;
    assert_eq!(widened, 12, "16 needed, 12 allowed");
    assert_eq!(slots_after, 12, "the writes were slow to the end");
}
