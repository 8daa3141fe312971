//! The single write path. Every reload goes through here; which write goes next is decided by
//! the [`Scheduler`] (coalescing, tenants taking turns, live changes before background work,
//! one write per workload, `--min-reload-interval`, backoff of failing writes), and this module
//! runs it:
//! - a dispatcher task starts every write the scheduler releases, each on its own task;
//! - a `governor` limiter in front of the API server (`--max-patches-per-second`,
//!   `--patch-burst`) stays the outer bound, taken by the writer right before its mutating call
//!   (see [`WriteTurn`]);
//! - a 409 is retried at once with a fresh read; a 429/5xx/timeout goes back to the scheduler with
//!   a backoff and frees its slot at once, so a failing workload never delays anyone else; a
//!   4xx that cannot succeed (403, 422) is reported once and dropped.

use std::future::Future;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use tokio::sync::Notify;
use tracing::{Instrument, Span, debug, warn};

use crate::model::WorkloadKey;

use super::limiter::{
    TokioRateLimiter, TurnPriority, WriteLimiter, tokio_rate_limiter, wait_for_cell, write_limiter,
};
use super::scheduler::{
    Coalesce, Completion, Dispatch, Priority, QueueStats, Scheduler, SchedulerSettings,
    WorkloadQueueState, default_jitter,
};
use super::tenants::Tenants;
use super::width::Widening;
use crate::reloader_format::template::TemplateChange;

/// A change waiting for its workload's write, with where it came from.
#[derive(Debug, Clone)]
pub struct QueuedChange {
    pub change: TemplateChange,
    /// When the controller saw the config change (latency is measured from here).
    pub observed_at: Instant,
    /// This change's `reload` span, a child of the config event's span. Fields `result`,
    /// `coalesced_with` and `attempts` are recorded when the write ends.
    pub span: Span,
    /// Keeps this replica's acted version below the change until the write ends (a newer
    /// change of the same config that absorbs it holds its own).
    pub acted: Option<Hold>,
}

/// What a queued change keeps alive until its write ends or a newer change absorbs it: the
/// hand-over's hold on this replica's acted version (`handover::acted::ActedGuard`). The queue
/// only carries it; dropping it is what lets the version move on.
#[derive(Clone)]
pub struct Hold {
    _held: std::sync::Arc<dyn Send + Sync>,
}

impl Hold {
    pub fn new(held: impl Send + Sync + 'static) -> Self {
        Hold {
            _held: std::sync::Arc::new(held),
        }
    }
}

impl std::fmt::Debug for Hold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Hold")
    }
}

impl Coalesce for QueuedChange {
    fn replaced_by(&self, newer: &Self) -> bool {
        self.change.config == newer.change.config
    }

    /// A newer hash for the same config replaces the older one (a write never carries a
    /// superseded value); latency still counts from the first change seen.
    fn absorb(&mut self, newer: Self) {
        let observed_at = self.observed_at;
        *self = QueuedChange {
            observed_at,
            ..newer
        };
    }
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
    /// Shadow mode: the write was computed and handed to the judge, not sent.
    Predicted,
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
    /// A write done in steps (a restart by eviction, one pod at a time) made a step or waits
    /// for the workload to settle: the next step in a second, not counted as a failure.
    #[error("in progress: {0}")]
    Progressing(String),
}

impl WriteError {
    pub fn metric_label(&self) -> &'static str {
        match self {
            WriteError::Conflict(_) => "conflict",
            WriteError::Transient(_) => "transient",
            WriteError::Permanent(_) => "permanent",
            WriteError::NotYet(_) => "not_yet",
            WriteError::Progressing(_) => "progressing",
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

    /// A write has failed `failures` times in a row and goes on being retried: tell the
    /// workload's owners (the `ReloadFail` Event). Called once per reported backoff step.
    fn report_failure(
        &self,
        _key: &WorkloadKey,
        _error: &WriteError,
        _failures: u32,
    ) -> impl Future<Output = ()> + Send {
        async {}
    }

    /// Waits, up to `deadline`, for what the writes finished left to send (their Events).
    fn flush(&self, _deadline: Duration) -> impl Future<Output = bool> + Send {
        async { true }
    }
}

/// The rate limiter's turn for one write attempt.
///
/// The writer takes it just before the mutating call, not before the read that precedes it: that
/// way the limiter shapes the writes the API server receives (a turn taken before the GET let
/// PATCHes drift with GET latency past the envelope), and a write that finds the workload already
/// up to date costs no turn. Reads are bounded by the queue's `concurrency` instead. One turn
/// covers the attempt, even when a Job is re-created with a delete and a create.
pub struct WriteTurn<'a> {
    limiter: &'a WriteLimiter,
    priority: TurnPriority,
    /// Nanoseconds waited for the limiter, `u64::MAX` while the turn has not been taken.
    waited_nanos: AtomicU64,
}

impl<'a> WriteTurn<'a> {
    pub fn new(limiter: &'a WriteLimiter, priority: TurnPriority) -> Self {
        Self {
            limiter,
            priority,
            waited_nanos: AtomicU64::new(u64::MAX),
        }
    }

    /// Waits for the limiter and returns how long; returns zero at once if this attempt already
    /// has its turn.
    pub async fn take(&self) -> Duration {
        if self.waited().is_some() {
            return Duration::ZERO;
        }
        let waited = self.limiter.until_ready(self.priority).await;
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
    /// A write ended for good (written, nothing to do, dropped, or failed beyond retrying).
    fn finished(
        &self,
        _key: &WorkloadKey,
        _changes: &[QueuedChange],
        _result: &Result<WriteOutcome, WriteError>,
        _attempts: u32,
    ) {
    }
    /// An attempt failed and will be retried (each attempt).
    fn retry(&self, _key: &WorkloadKey, _error: &WriteError) {}
    /// A write keeps failing: reported once per backoff step (see
    /// [`super::scheduler::FailureStep::report`]), for the failure metric and alerts.
    fn failing(
        &self,
        _key: &WorkloadKey,
        _changes: &[QueuedChange],
        _error: &WriteError,
        _failures: u32,
    ) {
    }
    /// A change was queued; `depth` workloads are pending or in flight.
    fn depth(&self, _depth: usize) {}
    /// A write started after waiting `waited` in its tenant's queue.
    fn queue_wait(&self, _waited: Duration) {}
    /// The queue's counts after the dispatcher ran.
    fn queue_stats(&self, _stats: &QueueStats) {}
}

impl QueueObserver for () {}

#[derive(Debug, Clone)]
pub struct QueueSettings {
    pub min_reload_interval: Duration,
    pub max_per_second: NonZeroU32,
    pub burst: NonZeroU32,
    /// Writes in flight at once (each waits on the API server, not on the CPU).
    pub concurrency: usize,
    /// With `Some(max)`, up to `max` in flight while writes are slow, sized for `max_per_second`
    /// (`super::width`); `None`: `concurrency`, fixed.
    pub max_concurrency: Option<usize>,
    pub max_conflict_retries: u32,
    pub backoff_base: Duration,
    pub backoff_cap: Duration,
    /// `--max-patches-per-second-per-tenant` (`None`: off).
    pub per_tenant_rate: Option<f64>,
    /// A failing write is reported from this many failed attempts on.
    pub report_after: u32,
}

impl Default for QueueSettings {
    fn default() -> Self {
        let scheduler = SchedulerSettings::default();
        Self {
            min_reload_interval: scheduler.min_reload_interval,
            max_per_second: NonZeroU32::new(50).expect("non-zero"),
            burst: NonZeroU32::new(100).expect("non-zero"),
            concurrency: scheduler.concurrency,
            max_concurrency: None,
            max_conflict_retries: 8,
            backoff_base: scheduler.backoff_base,
            backoff_cap: scheduler.backoff_cap,
            per_tenant_rate: scheduler.per_tenant_rate,
            report_after: scheduler.report_after,
        }
    }
}

impl QueueSettings {
    fn scheduler(&self) -> SchedulerSettings {
        SchedulerSettings {
            concurrency: self.concurrency,
            widening: self.max_concurrency.map(|max| Widening {
                max,
                writes_per_second: f64::from(self.max_per_second.get()),
            }),
            min_reload_interval: self.min_reload_interval,
            backoff_base: self.backoff_base,
            backoff_cap: self.backoff_cap,
            per_tenant_rate: self.per_tenant_rate,
            report_after: self.report_after,
        }
    }
}

struct Inner<W, O> {
    scheduler: Mutex<Scheduler<QueuedChange>>,
    wake: Arc<Notify>,
    writer: W,
    observer: O,
    limiter: WriteLimiter,
    tenants: Arc<Tenants>,
    settings: QueueSettings,
    /// Paces dispatches at the limiter's rate (same quota). Without it, when the limiter is the
    /// bottleneck, up to `concurrency` writes would wait in the limiter, which serves whoever
    /// asked first: a quiet tenant's write would queue behind 32 noisy ones there. Paced, writes
    /// wait in the scheduler, where tenants take turns, and the limiter stays the outer bound.
    pacer: TokioRateLimiter,
}

/// The scheduler's clock: tokio's, so that tests with `tokio::time::pause` drive it.
fn now() -> Instant {
    tokio::time::Instant::now().into_std()
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
    /// Starts the dispatcher task (one tenant per namespace, a limiter of its own); it runs until
    /// every queue handle is dropped.
    pub fn start(writer: W, observer: O, settings: QueueSettings) -> Self {
        let limiter = write_limiter(settings.max_per_second, settings.burst);
        Self::start_with(
            writer,
            observer,
            settings,
            limiter,
            Arc::new(Tenants::default()),
        )
    }

    /// Starts the dispatcher with a limiter shared with other writers and a tenant map.
    pub fn start_with(
        writer: W,
        observer: O,
        settings: QueueSettings,
        limiter: WriteLimiter,
        tenants: Arc<Tenants>,
    ) -> Self {
        let wake = Arc::new(Notify::new());
        let pacer = tokio_rate_limiter(settings.max_per_second, settings.burst);
        let inner = Arc::new(Inner {
            scheduler: Mutex::new(Scheduler::new(settings.scheduler(), default_jitter())),
            wake: wake.clone(),
            writer,
            observer,
            limiter,
            tenants,
            settings,
            pacer,
        });
        tokio::spawn(dispatch(Arc::downgrade(&inner), wake));
        Self { inner }
    }

    /// Queues a live change. A change for a config already pending on that workload replaces it.
    pub fn enqueue(&self, key: WorkloadKey, change: QueuedChange) {
        self.enqueue_as(key, change, Priority::Live);
    }

    /// Queues a change in a priority class (start-up reconciliation is `Background`).
    pub fn enqueue_as(&self, key: WorkloadKey, change: QueuedChange, priority: Priority) {
        let inner = &self.inner;
        let tenant = inner.tenants.tenant_of(&key.namespace);
        let (coalesced, depth) = {
            let mut scheduler = inner.scheduler.lock().expect("queue lock");
            let coalesced = scheduler.enqueue(key.clone(), tenant, priority, change, now());
            (coalesced, scheduler.len())
        };
        if coalesced {
            inner.observer.coalesced(&key);
        }
        inner.observer.depth(depth);
        inner.wake.notify_one();
    }

    /// Workloads with a write pending or in flight.
    pub fn depth(&self) -> usize {
        self.inner.scheduler.lock().expect("queue lock").len()
    }

    pub fn stats(&self) -> QueueStats {
        self.inner.scheduler.lock().expect("queue lock").stats()
    }

    /// Where a workload's reload is: pending since, in flight, in backoff (and why), held by
    /// the minimum interval. `None` when nothing is queued for it.
    pub fn inspect(&self, key: &WorkloadKey) -> Option<WorkloadQueueState> {
        let scheduler = self.inner.scheduler.lock().expect("queue lock");
        scheduler.inspect(key, now())
    }

    /// The write limiter, shared with whatever else writes (pause resumes, Events).
    pub fn limiter(&self) -> &WriteLimiter {
        &self.inner.limiter
    }

    /// Which tenant each namespace belongs to (fed by the namespace watch with `--tenant-label`).
    pub fn tenants(&self) -> &Arc<Tenants> {
        &self.inner.tenants
    }

    /// Waits until nothing is pending or in flight and the writer has sent what they left
    /// (their Events), or `deadline` passes (shutdown drain); says which of the two was left.
    pub async fn drain(&self, deadline: Duration) -> Drained {
        let until = tokio::time::Instant::now() + deadline;
        while self.depth() > 0 {
            if tokio::time::Instant::now() >= until {
                return Drained::WritesLeft(self.depth());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let left = until.saturating_duration_since(tokio::time::Instant::now());
        match self.inner.writer.flush(left).await {
            true => Drained::Everything,
            false => Drained::EventsLeft,
        }
    }
}

/// What a shutdown drain ([`ReloadQueue::drain`]) left when its deadline came.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Drained {
    /// Every write done and every Event they left sent (or given up by the sink).
    Everything,
    /// Workloads still pending or in flight: their reloads are the next owner's to make.
    WritesLeft(usize),
    /// The writes are done; some of their `Reloaded` Events were still being sent.
    EventsLeft,
}

/// How long the dispatcher sleeps with nothing to do before checking the queue still exists.
const IDLE_CHECK: Duration = Duration::from_secs(1);

/// Starts every write the scheduler releases, then sleeps until something changes: a change
/// queued, a write done, a backoff or hold ending.
async fn dispatch<W: WorkloadWriter, O: QueueObserver>(
    inner: Weak<Inner<W, O>>,
    wake: Arc<Notify>,
) {
    loop {
        let next_wake = {
            let Some(inner) = inner.upgrade() else { return };
            start_ready(&inner)
        };
        let until = next_wake.map_or_else(
            || tokio::time::Instant::now() + IDLE_CHECK,
            tokio::time::Instant::from_std,
        );
        tokio::select! {
            _ = wake.notified() => {}
            _ = tokio::time::sleep_until(until) => {}
        }
    }
}

fn start_ready<W: WorkloadWriter, O: QueueObserver>(inner: &Arc<Inner<W, O>>) -> Option<Instant> {
    let (started, next_wake, stats) = {
        let mut scheduler = inner.scheduler.lock().expect("queue lock");
        let now = now();
        let mut started = Vec::new();
        let mut paced_until = None;
        while scheduler.has_ready(now) {
            if let Some(wait) = wait_for_cell(&inner.pacer) {
                paced_until = Some(now + wait);
                break;
            }
            let Some(job) = scheduler.next(now) else {
                break;
            };
            started.push(job);
        }
        let next_wake = match (scheduler.next_wake(), paced_until) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        (started, next_wake, scheduler.stats())
    };
    inner.observer.queue_stats(&stats);
    for job in started {
        inner.observer.queue_wait(job.waited);
        tokio::spawn(process(inner.clone(), job));
    }
    next_wake
}

/// One attempt of one workload's write (conflicts retried inline with a fresh read), then the
/// outcome goes back to the scheduler, which frees the slot.
async fn process<W: WorkloadWriter, O: QueueObserver>(
    inner: Arc<Inner<W, O>>,
    job: Dispatch<QueuedChange>,
) {
    let Dispatch {
        key,
        tenant,
        changes,
        priority,
        attempt,
        ..
    } = job;
    // Each change carries its own `reload` span (opened when it was queued, so it covers the
    // time spent waiting); the write runs in the first one and the others note that they rode on it.
    let span = changes
        .first()
        .map(|c| c.span.clone())
        .unwrap_or_else(Span::none);
    // A live change's first attempt goes before retries and reconciliation at the limiter too.
    let turn_priority = match (priority, attempt) {
        (Priority::Live, 1) => TurnPriority::Live,
        _ => TurnPriority::Retry,
    };
    let result = write_attempt(&inner, &key, &changes, turn_priority)
        .instrument(span.clone())
        .await;
    let retry = match &result {
        Err(WriteError::NotYet(reason)) => {
            debug!(workload = %key, reason, "holding the write");
            Some(Completion::Held {
                retry_in: HOLD_RETRY,
            })
        }
        Err(WriteError::Progressing(step)) => {
            debug!(workload = %key, step, "write in progress, next step shortly");
            Some(Completion::Progressed {
                step: step.clone(),
                next_in: PROGRESS_RETRY,
            })
        }
        Err(error @ (WriteError::Transient(_) | WriteError::Conflict(_))) => {
            inner.observer.retry(&key, error);
            Some(Completion::Failed {
                error: error.to_string(),
            })
        }
        _ => None,
    };
    let Some(completion) = retry else {
        finish(&inner, &key, changes, result, attempt);
        inner.wake.notify_one();
        return;
    };
    let Err(error) = result else { return };
    let reported = changes.clone();
    let step = {
        let mut scheduler = inner.scheduler.lock().expect("queue lock");
        scheduler.complete(&key, changes, completion, now())
    };
    inner.wake.notify_one();
    let Some(step) = step else { return };
    let retry_in = step.retry_in;
    if step.report {
        span.in_scope(|| {
            warn!(workload = %key, %tenant, %error, failures = step.failures, ?retry_in,
                "write keeps failing, retrying with backoff")
        });
        inner
            .observer
            .failing(&key, &reported, &error, step.failures);
        inner
            .writer
            .report_failure(&key, &error, step.failures)
            .await;
    } else {
        debug!(workload = %key, %tenant, %error, failures = step.failures, ?retry_in, "write failed, backing off");
    }
}

/// A write that ended for good: spans, observer, and the scheduler told.
fn finish<W: WorkloadWriter, O: QueueObserver>(
    inner: &Inner<W, O>,
    key: &WorkloadKey,
    changes: Vec<QueuedChange>,
    result: Result<WriteOutcome, WriteError>,
    attempts: u32,
) {
    let result_label = match &result {
        Ok(WriteOutcome::Reloaded) => "reloaded",
        Ok(WriteOutcome::UpToDate) => "up_to_date",
        Ok(WriteOutcome::Dropped(_)) => "dropped",
        Ok(WriteOutcome::Predicted) => "predicted",
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
        let span = changes.first().map(|c| c.span.clone());
        span.unwrap_or_else(Span::none)
            .in_scope(|| warn!(workload = %key, %error, attempts, "reload failed, not retried"));
    }
    inner.observer.finished(key, &changes, &result, attempts);
    let completion = match result {
        Ok(WriteOutcome::Reloaded | WriteOutcome::Predicted) => {
            Completion::Written { reloaded: true }
        }
        Ok(WriteOutcome::UpToDate) => Completion::Written { reloaded: false },
        _ => Completion::Finished,
    };
    let mut scheduler = inner.scheduler.lock().expect("queue lock");
    scheduler.complete(key, Vec::new(), completion, now());
}

/// One write attempt; a 409 is retried at once (the writer reads afresh), up to a bound.
async fn write_attempt<W: WorkloadWriter, O: QueueObserver>(
    inner: &Inner<W, O>,
    key: &WorkloadKey,
    changes: &[QueuedChange],
    priority: TurnPriority,
) -> Result<WriteOutcome, WriteError> {
    let mut conflicts = 0u32;
    loop {
        let turn = WriteTurn::new(&inner.limiter, priority);
        let started = tokio::time::Instant::now();
        let result = inner.writer.write(key, changes, &turn).await;
        let waited = turn.waited();
        if let Some(waited) = waited {
            inner.observer.limiter_wait(waited);
        }
        // A write held before any request (a hand-over, a fence) says nothing of the round trips;
        // a fixed width needs no report (and the lock stays off this path).
        let widens = inner.settings.max_concurrency.is_some();
        if widens && !matches!(result, Err(WriteError::NotYet(_))) {
            let took = started.elapsed().saturating_sub(waited.unwrap_or_default());
            let transient = matches!(result, Err(WriteError::Transient(_)));
            let mut scheduler = inner.scheduler.lock().expect("queue lock");
            scheduler.observe_write(took, transient, now());
        }
        match result {
            Err(error @ WriteError::Conflict(_))
                if conflicts < inner.settings.max_conflict_retries =>
            {
                conflicts += 1;
                inner.observer.retry(key, &error);
                debug!(workload = %key, %error, "conflict, retrying with a fresh read");
            }
            other => return other,
        }
    }
}

/// How often a held write checks again whether it may go out.
const HOLD_RETRY: Duration = Duration::from_millis(100);
/// The next step of a write done in steps: a pod evicted needs about this long to be replaced
/// and Ready, and polling sooner only costs API requests.
const PROGRESS_RETRY: Duration = Duration::from_secs(1);

/// Classifies an API error for the queue's retry policy.
pub fn classify(error: kube::Error) -> WriteError {
    match &error {
        kube::Error::Api(status) => match status.code {
            409 => WriteError::Conflict(status.message.clone()),
            // A failed JSON Patch `test` (the resourceVersion moved) is a conflict too.
            422 if status.message.contains("test") => WriteError::Conflict(status.message.clone()),
            429 | 500..=599 => WriteError::Transient(format!("{} {}", status.code, status.message)),
            _ => WriteError::Permanent(format!("{} {}", status.code, status.message)),
        },
        _ => WriteError::Transient(error.to_string()),
    }
}

#[cfg(test)]
mod tests;
