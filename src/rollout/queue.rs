//! The single write path. Every reload goes through here:
//! - coalescing: a workload with several pending changes gets one write;
//! - at most one write per workload at a time, and at most one per `--min-reload-interval`;
//! - a `governor` limiter in front of the API server (`--max-patches-per-second`, `--patch-burst`),
//!   taken by the writer right before its mutating call (see [`WriteTurn`]);
//! - retries: 409 right away with a fresh read, 429/5xx with capped exponential backoff, so one
//!   failing workload occupies one slot and never stalls the others.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use tokio::sync::{Semaphore, mpsc};
use tracing::{Instrument, Span, debug, warn};

use crate::model::WorkloadKey;

use super::template::TemplateChange;

/// A change waiting for its workload's write, with where it came from.
#[derive(Debug, Clone)]
pub struct QueuedChange {
    pub change: TemplateChange,
    /// When the controller saw the config change (latency is measured from here).
    pub observed_at: Instant,
    /// This change's `reload` span, a child of the config event's span. Fields `result`,
    /// `coalesced_with` and `attempts` are recorded when the write ends.
    pub span: Span,
}

/// How one write attempt ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteOutcome {
    /// The workload was rolled for these changes.
    Reloaded,
    /// The template already carried every change (idempotent: nothing written).
    UpToDate,
    /// The workload is gone, or this replica no longer owns its namespace.
    Dropped(&'static str),
}

/// Why a write attempt failed, classified for the retry policy.
#[derive(Debug, Clone, thiserror::Error)]
pub enum WriteError {
    /// 409: someone else wrote first; retry at once with a fresh read.
    #[error("conflict: {0}")]
    Conflict(String),
    /// 429, 5xx, timeouts, broken connections: back off and retry.
    #[error("transient: {0}")]
    Transient(String),
    /// 4xx that a retry will not fix (forbidden, invalid).
    #[error("{0}")]
    Permanent(String),
    /// Not this replica's turn yet (a namespace it is taking over is still handled by the
    /// previous owner): retried shortly, not counted as a failure.
    #[error("waiting: {0}")]
    NotYet(String),
}

impl WriteError {
    pub fn metric_label(&self) -> &'static str {
        match self {
            WriteError::Conflict(_) => "conflict",
            WriteError::Transient(_) => "transient",
            WriteError::Permanent(_) => "permanent",
            WriteError::NotYet(_) => "not_yet",
        }
    }
}

/// Performs one write for a workload. Implemented against the API server by
/// [`super::KubeWriter`]; the queue only knows this trait.
pub trait WorkloadWriter: Send + Sync + 'static {
    /// Must call [`WriteTurn::take`] right before the call that changes the workload.
    fn write(
        &self,
        key: &WorkloadKey,
        changes: &[QueuedChange],
        turn: &WriteTurn<'_>,
    ) -> impl Future<Output = Result<WriteOutcome, WriteError>> + Send;
}

/// The rate limiter's turn for one write attempt.
///
/// The writer takes it just before the mutating call, not before the read that precedes it: that
/// way the limiter shapes the writes the API server receives (a turn taken before the GET let
/// PATCHes drift with GET latency past the envelope), and a write that finds the workload already
/// up to date costs no turn. Reads are bounded by the queue's `concurrency` instead. One turn
/// covers the attempt, even when a Job is re-created with a delete and a create.
pub struct WriteTurn<'a> {
    limiter: &'a DefaultDirectRateLimiter,
    /// Nanoseconds waited for the limiter, `u64::MAX` while the turn has not been taken.
    waited_nanos: AtomicU64,
}

impl<'a> WriteTurn<'a> {
    fn new(limiter: &'a DefaultDirectRateLimiter) -> Self {
        Self {
            limiter,
            waited_nanos: AtomicU64::new(u64::MAX),
        }
    }

    /// Waits for the limiter and returns how long; returns zero at once if this attempt already
    /// has its turn.
    pub async fn take(&self) -> Duration {
        if self.waited().is_some() {
            return Duration::ZERO;
        }
        let started = Instant::now();
        self.limiter.until_ready().await;
        let waited = started.elapsed();
        let nanos = u64::try_from(waited.as_nanos()).unwrap_or(u64::MAX - 1);
        self.waited_nanos.store(nanos, Ordering::Relaxed);
        waited
    }

    /// How long the turn waited, if it was taken.
    fn waited(&self) -> Option<Duration> {
        match self.waited_nanos.load(Ordering::Relaxed) {
            u64::MAX => None,
            nanos => Some(Duration::from_nanos(nanos)),
        }
    }
}

/// Observes what the queue does (metrics, events, alerts).
pub trait QueueObserver: Send + Sync + 'static {
    fn coalesced(&self, _key: &WorkloadKey) {}
    fn limiter_wait(&self, _waited: Duration) {}
    fn finished(
        &self,
        _key: &WorkloadKey,
        _changes: &[QueuedChange],
        _result: &Result<WriteOutcome, WriteError>,
        _attempts: u32,
    ) {
    }
    fn retry(&self, _key: &WorkloadKey, _error: &WriteError) {}
    fn depth(&self, _depth: usize) {}
}

impl QueueObserver for () {}

#[derive(Debug, Clone)]
pub struct QueueSettings {
    pub min_reload_interval: Duration,
    pub max_per_second: NonZeroU32,
    pub burst: NonZeroU32,
    /// Writes in flight at once (each waits on the API server, not on the CPU).
    pub concurrency: usize,
    pub max_conflict_retries: u32,
    pub backoff_base: Duration,
    pub backoff_cap: Duration,
}

impl Default for QueueSettings {
    fn default() -> Self {
        Self {
            min_reload_interval: Duration::ZERO,
            max_per_second: NonZeroU32::new(50).expect("non-zero"),
            burst: NonZeroU32::new(100).expect("non-zero"),
            concurrency: 32,
            max_conflict_retries: 8,
            backoff_base: Duration::from_millis(200),
            backoff_cap: Duration::from_secs(30),
        }
    }
}

#[derive(Default)]
struct State {
    pending: HashMap<WorkloadKey, Vec<QueuedChange>>,
    in_flight: HashSet<WorkloadKey>,
    /// Keys already handed to the dispatcher (or sleeping until their interval ends).
    scheduled: HashSet<WorkloadKey>,
    last_write: HashMap<WorkloadKey, Instant>,
}

struct Inner<W, O> {
    state: Mutex<State>,
    ready: mpsc::UnboundedSender<WorkloadKey>,
    writer: W,
    observer: O,
    limiter: DefaultDirectRateLimiter,
    settings: QueueSettings,
}

/// Handle to the queue; cheap to clone.
pub struct ReloadQueue<W, O> {
    inner: Arc<Inner<W, O>>,
}

impl<W, O> Clone for ReloadQueue<W, O> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
        }
    }
}

impl<W: WorkloadWriter, O: QueueObserver> ReloadQueue<W, O> {
    /// Starts the dispatcher task; it runs until every queue handle is dropped.
    pub fn start(writer: W, observer: O, settings: QueueSettings) -> Self {
        let (ready, rx) = mpsc::unbounded_channel();
        let quota = Quota::per_second(settings.max_per_second).allow_burst(settings.burst);
        let inner = Arc::new(Inner {
            state: Mutex::new(State::default()),
            ready,
            writer,
            observer,
            limiter: RateLimiter::direct(quota),
            settings,
        });
        tokio::spawn(dispatch(Arc::downgrade(&inner), rx));
        Self { inner }
    }

    /// Queues a change. A change for a config already pending on that workload replaces it.
    pub fn enqueue(&self, key: WorkloadKey, change: QueuedChange) {
        let inner = &self.inner;
        let mut state = inner.state.lock().expect("queue lock");
        let pending = state.pending.entry(key.clone()).or_default();
        let coalesced = !pending.is_empty();
        if let Some(same) = pending
            .iter_mut()
            .find(|c| c.change.config == change.change.config)
        {
            // Keep the first observation time: latency counts from the first change seen.
            let observed_at = same.observed_at;
            *same = QueuedChange {
                observed_at,
                ..change
            };
        } else {
            pending.push(change);
        }
        if coalesced {
            inner.observer.coalesced(&key);
        }
        let depth = state.pending.len();
        if !state.in_flight.contains(&key) {
            schedule(inner, &mut state, key);
        }
        drop(state);
        inner.observer.depth(depth);
    }

    /// Changes waiting or being written.
    pub fn depth(&self) -> usize {
        let state = self.inner.state.lock().expect("queue lock");
        state.pending.len() + state.in_flight.len()
    }

    /// Whether changes wait for `key`, and whether its write is in flight (`/debug/explain`).
    pub fn key_state(&self, key: &WorkloadKey) -> (bool, bool) {
        let state = self.inner.state.lock().expect("queue lock");
        (
            state.pending.contains_key(key),
            state.in_flight.contains(key),
        )
    }

    /// Waits until nothing is pending or in flight, or `deadline` passes (shutdown drain).
    pub async fn drain(&self, deadline: Duration) -> bool {
        let until = Instant::now() + deadline;
        while Instant::now() < until {
            if self.depth() == 0 {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.depth() == 0
    }
}

/// Hands `key` to the dispatcher now, or once its minimum interval has passed.
fn schedule<W, O>(inner: &Arc<Inner<W, O>>, state: &mut State, key: WorkloadKey) {
    if !state.scheduled.insert(key.clone()) {
        return;
    }
    let not_before = state
        .last_write
        .get(&key)
        .map(|t| *t + inner.settings.min_reload_interval)
        .filter(|t| *t > Instant::now());
    match not_before {
        None => {
            let _ = inner.ready.send(key);
        }
        Some(at) => {
            let ready = inner.ready.clone();
            tokio::spawn(async move {
                tokio::time::sleep_until(at.into()).await;
                let _ = ready.send(key);
            });
        }
    }
}

async fn dispatch<W: WorkloadWriter, O: QueueObserver>(
    inner: std::sync::Weak<Inner<W, O>>,
    mut rx: mpsc::UnboundedReceiver<WorkloadKey>,
) {
    let mut slots: Option<Arc<Semaphore>> = None;
    while let Some(key) = rx.recv().await {
        let Some(inner) = inner.upgrade() else { return };
        let slots = slots
            .get_or_insert_with(|| Arc::new(Semaphore::new(inner.settings.concurrency.max(1))))
            .clone();
        let Ok(permit) = slots.acquire_owned().await else {
            return;
        };
        tokio::spawn(async move {
            process(&inner, key).await;
            drop(permit);
        });
    }
}

async fn process<W: WorkloadWriter, O: QueueObserver>(inner: &Arc<Inner<W, O>>, key: WorkloadKey) {
    let mut changes = {
        let mut state = inner.state.lock().expect("queue lock");
        state.scheduled.remove(&key);
        let Some(changes) = state.pending.remove(&key) else {
            return;
        };
        state.in_flight.insert(key.clone());
        changes
    };
    // Each change carries its own `reload` span (opened when it was queued, so it covers the
    // time spent waiting); the write runs in the first one and the others note that they rode on it.
    let span = changes
        .first()
        .map(|c| c.span.clone())
        .unwrap_or_else(Span::none);
    let (result, attempts) = write_with_retries(inner, &key, &mut changes)
        .instrument(span.clone())
        .await;
    let result_label = match &result {
        Ok(WriteOutcome::Reloaded) => "reloaded",
        Ok(WriteOutcome::UpToDate) => "up_to_date",
        Ok(WriteOutcome::Dropped(_)) => "dropped",
        Err(e) => e.metric_label(),
    };
    for change in &changes {
        change.span.record("result", result_label);
        change
            .span
            .record("coalesced_with", changes.len().saturating_sub(1));
        change.span.record("attempts", attempts);
    }
    if let Err(error) = &result {
        span.in_scope(|| warn!(workload = %key, %error, attempts, "reload failed, not retried"));
    }
    inner.observer.finished(&key, &changes, &result, attempts);
    let mut state = inner.state.lock().expect("queue lock");
    state.in_flight.remove(&key);
    if matches!(result, Ok(WriteOutcome::Reloaded)) {
        state.last_write.insert(key.clone(), Instant::now());
    }
    // Forget old write times so the map does not grow with every workload ever rolled.
    if state.last_write.len() > 10_000 {
        let horizon = inner.settings.min_reload_interval;
        state.last_write.retain(|_, t| t.elapsed() < horizon);
    }
    if state.pending.contains_key(&key) {
        schedule(inner, &mut state, key);
    }
}

async fn write_with_retries<W: WorkloadWriter, O: QueueObserver>(
    inner: &Inner<W, O>,
    key: &WorkloadKey,
    changes: &mut Vec<QueuedChange>,
) -> (Result<WriteOutcome, WriteError>, u32) {
    let settings = &inner.settings;
    let mut attempts = 0u32;
    let mut conflicts = 0u32;
    let mut backoff = settings.backoff_base;
    loop {
        // A retried or held write takes in what arrived meanwhile: a newer hash for the same
        // config replaces the older one, so a retry never writes a superseded value.
        if attempts > 0 {
            absorb_pending(inner, key, changes);
        }
        attempts += 1;
        let turn = WriteTurn::new(&inner.limiter);
        let result = inner.writer.write(key, changes, &turn).await;
        if let Some(waited) = turn.waited() {
            inner.observer.limiter_wait(waited);
        }
        let error = match result {
            Ok(outcome) => return (Ok(outcome), attempts),
            Err(WriteError::Permanent(m)) => return (Err(WriteError::Permanent(m)), attempts),
            Err(WriteError::NotYet(reason)) => {
                debug!(workload = %key, reason, "holding the write");
                tokio::time::sleep(HOLD_RETRY).await;
                continue;
            }
            Err(e) => e,
        };
        inner.observer.retry(key, &error);
        match &error {
            WriteError::Conflict(_) if conflicts < settings.max_conflict_retries => {
                conflicts += 1;
                debug!(workload = %key, %error, "conflict, retrying with a fresh read");
            }
            _ => {
                warn!(workload = %key, %error, retry_in = ?backoff, "write failed, backing off");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(settings.backoff_cap);
            }
        }
    }
}

fn absorb_pending<W, O>(inner: &Inner<W, O>, key: &WorkloadKey, changes: &mut Vec<QueuedChange>) {
    let newer = inner.state.lock().expect("queue lock").pending.remove(key);
    for change in newer.into_iter().flatten() {
        match changes
            .iter_mut()
            .find(|c| c.change.config == change.change.config)
        {
            Some(same) => {
                let observed_at = same.observed_at;
                *same = QueuedChange {
                    observed_at,
                    ..change
                };
            }
            None => changes.push(change),
        }
    }
}

/// How often a held write checks again whether it may go out.
const HOLD_RETRY: Duration = Duration::from_millis(100);

#[cfg(test)]
mod tests;
