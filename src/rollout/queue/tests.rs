use std::sync::atomic::{AtomicU32, Ordering};

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
}

fn change(config: &str, hash: &str) -> QueuedChange {
    QueuedChange {
        change: TemplateChange {
            config: ConfigKey::new(ConfigKind::ConfigMap, "ns", config),
            hash: Some(hash.into()),
            explicit: false,
        },
        observed_at: Instant::now(),
        span: Span::none(),
    }
}

fn wl(name: &str) -> WorkloadKey {
    WorkloadKey::new(WorkloadKind::Deployment, "ns", name)
}

fn fast() -> QueueSettings {
    QueueSettings {
        backoff_base: Duration::from_millis(5),
        backoff_cap: Duration::from_millis(20),
        ..QueueSettings::default()
    }
}

#[tokio::test]
async fn changes_arriving_during_a_write_are_coalesced_into_one_more_write() {
    let rec = Arc::new(Recorder {
        delay: Duration::from_millis(50),
        ..Default::default()
    });
    let q = ReloadQueue::start(rec.clone(), (), fast());
    q.enqueue(wl("a"), change("c1", "1"));
    tokio::time::sleep(Duration::from_millis(10)).await;
    // The first write is in flight: these three pile up and go out together.
    q.enqueue(wl("a"), change("c2", "1"));
    q.enqueue(wl("a"), change("c3", "1"));
    q.enqueue(wl("a"), change("c2", "2"));
    assert!(q.drain(Duration::from_secs(5)).await);
    let writes = rec.writes.lock().unwrap().clone();
    assert_eq!(writes.len(), 2, "{writes:?}");
    assert_eq!(writes[1].1, ["c2", "c3"]);
}

#[tokio::test]
async fn min_interval_delays_the_second_write() {
    let rec = Arc::new(Recorder::default());
    let settings = QueueSettings {
        min_reload_interval: Duration::from_millis(300),
        ..fast()
    };
    let q = ReloadQueue::start(rec.clone(), (), settings);
    let start = Instant::now();
    q.enqueue(wl("a"), change("c1", "1"));
    assert!(q.drain(Duration::from_secs(2)).await);
    q.enqueue(wl("a"), change("c1", "2"));
    q.enqueue(wl("a"), change("c1", "3"));
    assert!(q.drain(Duration::from_secs(2)).await);
    assert!(start.elapsed() >= Duration::from_millis(300));
    assert_eq!(rec.writes.lock().unwrap().len(), 2);
}

#[tokio::test]
async fn conflicts_and_throttling_are_retried_until_written() {
    let rec = Arc::new(Recorder::default());
    rec.fail_first.store(3, Ordering::SeqCst);
    *rec.failure.lock().unwrap() = Some(WriteError::Transient("429 Too Many Requests".into()));
    let q = ReloadQueue::start(rec.clone(), (), fast());
    q.enqueue(wl("a"), change("c1", "1"));
    assert!(q.drain(Duration::from_secs(5)).await);
    assert_eq!(rec.writes.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn a_permanently_failing_write_is_dropped_and_others_go_on() {
    let rec = Arc::new(Recorder::default());
    rec.fail_first.store(1, Ordering::SeqCst);
    *rec.failure.lock().unwrap() = Some(WriteError::Permanent("403 forbidden".into()));
    let q = ReloadQueue::start(rec.clone(), (), fast());
    q.enqueue(wl("bad"), change("c1", "1"));
    tokio::time::sleep(Duration::from_millis(20)).await;
    q.enqueue(wl("good"), change("c1", "1"));
    assert!(q.drain(Duration::from_secs(5)).await);
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
        ..fast()
    };
    let queue = ReloadQueue::start(recorder.clone(), (), settings);
    for name in ["a", "b", "c"] {
        queue.enqueue(wl(name), change("cfg", "h1"));
    }
    assert!(queue.drain(Duration::from_secs(5)).await);
    assert!(
        queue.inner.limiter.check().is_ok(),
        "up-to-date writes spent the only token"
    );

    recorder.up_to_date.store(false, Ordering::SeqCst);
    queue.enqueue(wl("d"), change("cfg", "h2"));
    assert!(queue.drain(Duration::from_secs(5)).await);
    assert_eq!(recorder.writes.lock().unwrap().len(), 1);
    assert!(
        queue.inner.limiter.check().is_err(),
        "a real write did not take the token"
    );
}
