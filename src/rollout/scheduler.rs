//! Which write goes out next. A pure structure: no tasks, no clock of its own (every operation
//! takes `now`), so its policy is unit-tested step by step.
//!
//! - **Coalescing**: one entry per workload; a newer change of the same config replaces the
//!   older one ([`Coalesce`], merged in [`merge_into`] only).
//! - **Tenants**: each entry belongs to a tenant (a namespace, or a group of namespaces); ready
//!   entries wait in their tenant's FIFO, and tenants with ready work take turns (round robin),
//!   so a tenant with 10,000 pending writes delays another tenant's write by at most one turn.
//! - **Priorities**: live changes go before background work (start-up reconciliation and
//!   retries of failing writes), and background work holds at most half the slots; fairness
//!   holds within a priority.
//! - **At most one write per workload in flight**, at most `concurrency` in flight overall (more
//!   while writes are slow, with `widening`: [`super::width`]), at most half the `concurrency`
//!   per tenant, at most one reload per workload per `min_reload_interval`, and optionally at
//!   most `per_tenant_rate` writes per second per tenant.
//! - **Failures never hold a slot**: a failed write is put back with capped exponential backoff
//!   and jitter; its slot is free at once, newer changes coalesce into it meanwhile.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::width::{Widening, WriteWidth};
use crate::model::WorkloadKey;

/// A pending change that a newer change of the same thing replaces.
pub trait Coalesce {
    /// True when `newer` is about the same thing (the same config) and replaces `self`.
    fn replaced_by(&self, newer: &Self) -> bool;
    /// Takes `newer`'s content, keeping what must survive a merge (the first observation time).
    fn absorb(&mut self, newer: Self);
}

/// Adds `newer` to `pending`, replacing the change it supersedes. True when it was merged into
/// a change already pending (a coalesced write).
pub fn merge_into<C: Coalesce>(pending: &mut Vec<C>, newer: C) -> bool {
    match pending.iter_mut().find(|c| c.replaced_by(&newer)) {
        Some(same) => {
            same.absorb(newer);
            true
        }
        None => {
            pending.push(newer);
            false
        }
    }
}

/// A tenant's identity: the namespace, or `<label>=<value>` with `--tenant-label`.
pub type TenantId = Arc<str>;

/// Live config changes go before background work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Priority {
    /// A config change seen now: someone is waiting for it.
    Live,
    /// Start-up reconciliation of recorded hashes, changes nobody acted on that a takeover's
    /// catch-up or a backfill finds, and retries of failing writes.
    Background,
}

impl Priority {
    const ALL: [Priority; 2] = [Priority::Live, Priority::Background];

    fn index(self) -> usize {
        self as usize
    }
}

#[derive(Debug, Clone)]
pub struct SchedulerSettings {
    /// Writes in flight at once (the floor, with `widening`).
    pub concurrency: usize,
    /// More writes in flight while writes are slow ([`super::width`]); `None`: `concurrency`.
    pub widening: Option<Widening>,
    pub min_reload_interval: Duration,
    /// First retry delay; doubled per failed attempt up to `backoff_cap`.
    pub backoff_base: Duration,
    pub backoff_cap: Duration,
    /// Writes per second per tenant (`None`: only the global limiter).
    pub per_tenant_rate: Option<f64>,
    /// A failing write is reported (Event, metric, alert) from this many failed attempts on.
    pub report_after: u32,
}

impl Default for SchedulerSettings {
    fn default() -> Self {
        Self {
            concurrency: 32,
            widening: None,
            min_reload_interval: Duration::ZERO,
            backoff_base: DEFAULT_BACKOFF_BASE,
            backoff_cap: Duration::from_secs(30),
            per_tenant_rate: None,
            report_after: 3,
        }
    }
}

/// The first step of a failed write's backoff (its first retry comes after 5-10 ms), as the
/// Kubernetes controllers' work queues start at 5 ms. A write fails mostly for a moment (a 500
/// of a restarting API server or a flaky webhook, a 429, a conflict), and each step waits for
/// all the ones before it: from 200 ms, a write that failed once waited 100-200 ms, four times
/// in a row 1.5-3 s (`write-errors` in the chaos campaign answers 30% of a replica's writes 500
/// or 429). A write that keeps failing still reaches `--max-retry-backoff` after a dozen
/// attempts (8 of them in its first second).
const DEFAULT_BACKOFF_BASE: Duration = Duration::from_millis(10);

/// A source of jitter in `[0, 1)`; injected so that tests are deterministic.
pub type Jitter = Box<dyn FnMut() -> f64 + Send>;

/// A small xorshift generator: jitter only has to spread retries, not be unpredictable.
pub fn default_jitter() -> Jitter {
    let mut state = ahash::RandomState::new().hash_one(Instant::now()) | 1;
    Box::new(move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state >> 11) as f64 / (1u64 << 53) as f64
    })
}

/// A write handed to a worker.
#[derive(Debug)]
pub struct Dispatch<C> {
    pub key: WorkloadKey,
    pub tenant: TenantId,
    pub changes: Vec<C>,
    pub priority: Priority,
    /// 1 for a first attempt, n for the n-th attempt after failures.
    pub attempt: u32,
    /// How long it waited ready in its tenant's queue (holds and backoff not counted).
    pub waited: Duration,
}

/// How a dispatched write ended, as the scheduler needs to know it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Completion {
    /// Written (`reloaded`: the workload was rolled, which starts its minimum interval).
    Written { reloaded: bool },
    /// Nothing more to do for these changes: up to date, the workload is gone, the namespace is
    /// no longer this replica's, or an error no retry will fix.
    Finished,
    /// Failed in a way a retry may fix (429, 5xx, timeout): put back with backoff.
    Failed { error: String },
    /// Not this replica's turn yet (a handover): put back for `retry_in`, not a failure.
    Held { retry_in: Duration },
    /// A write done in steps made `step` and has more to do: put back for `next_in`, not a
    /// failure (and the end of any failing streak).
    Progressed { step: String, next_in: Duration },
}

/// What a failed attempt led to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailureStep {
    /// Failed attempts in a row.
    pub failures: u32,
    pub retry_in: Duration,
    /// Report this step (Event, metric, alert): the `report_after`-th failure, then each time
    /// the number of failures since then reaches a power of two, so a write failing for hours is
    /// reported a handful of times, not once per attempt.
    pub report: bool,
}

/// Why a pending write is not ready.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wait {
    Backoff,
    MinInterval,
    Hold,
    NextStep,
}

struct Entry<C> {
    tenant: TenantId,
    /// Changes waiting for the next write (while one is in flight: the ones that came since).
    changes: Vec<C>,
    pending_since: Option<Instant>,
    /// `pending_since` of the changes in flight (restored if they are put back).
    flight_since: Option<Instant>,
    priority: Priority,
    in_flight: bool,
    /// The class its write in flight was started in.
    flight_class: Priority,
    failures: u32,
    last_error: Option<String>,
    /// A write done in steps (a restart by eviction): the last step made, while more remain.
    progress: Option<String>,
    /// Not before this time, and why.
    wait: Option<(Instant, Wait)>,
    /// The ticket of its current place (a tenant FIFO or the timers); stale places are skipped.
    ticket: u64,
    ready_since: Option<Instant>,
}

impl<C> Entry<C> {
    /// Retries run in the background class: a failing workload must not delay live changes.
    fn class(&self) -> Priority {
        if self.failures > 0 {
            Priority::Background
        } else {
            self.priority
        }
    }
}

/// Tenants with ready work in one priority class, taking turns.
#[derive(Default)]
struct Class {
    turns: VecDeque<TenantId>,
    fifos: HashMap<TenantId, VecDeque<(WorkloadKey, u64)>>,
}

/// A token bucket per tenant (`--max-patches-per-second-per-tenant`), one second of burst.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

/// Counts for metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct QueueStats {
    /// Workloads with a write pending or in flight.
    pub workloads: usize,
    /// Tenants with at least one of those.
    pub tenants: usize,
    pub in_flight: usize,
    /// Workloads waiting out a backoff after a failed write.
    pub in_backoff: usize,
    /// Writes that may be in flight now ([`super::width`]).
    pub slots: usize,
}

/// One workload's place in the queue, for debugging (`/debug/explain`). Times are seconds from
/// the moment of the call (`*_in_seconds` ahead, `*_for_seconds` behind) so that the struct
/// needs no clock to make sense.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WorkloadQueueState {
    pub tenant: String,
    pub priority: Priority,
    /// Changes waiting for the next write.
    pub pending_changes: usize,
    /// How long the oldest pending change has been waiting.
    pub pending_for_seconds: Option<f64>,
    pub in_flight: bool,
    /// Failed attempts in a row.
    pub failures: u32,
    pub last_error: Option<String>,
    /// In backoff after a failure: retried in this many seconds.
    pub backoff_retry_in_seconds: Option<f64>,
    /// Held by `--min-reload-interval`: written in this many seconds.
    pub min_interval_hold_in_seconds: Option<f64>,
    /// Held during a namespace handover: checked again in this many seconds.
    pub handover_hold_in_seconds: Option<f64>,
    /// A write done in steps: the last step made, and the next in this many seconds.
    pub progress: Option<String>,
    pub next_step_in_seconds: Option<f64>,
}

pub struct Scheduler<C> {
    settings: SchedulerSettings,
    width: WriteWidth,
    jitter: Jitter,
    entries: HashMap<WorkloadKey, Entry<C>>,
    classes: [Class; 2],
    timers: BTreeMap<(Instant, u64), WorkloadKey>,
    last_write: HashMap<WorkloadKey, Instant>,
    buckets: HashMap<TenantId, Bucket>,
    /// Entries per tenant (pending or in flight).
    tenant_load: HashMap<TenantId, usize>,
    next_ticket: u64,
    in_flight: usize,
    /// Background writes in flight: at most half the slots, so retries of a failing namespace
    /// and a start-up reconcile always leave room for live changes.
    in_flight_background: usize,
    /// Writes in flight per tenant: at most half the slots each, so a tenant whose writes are
    /// slow (a failing admission webhook answers after the API server's own retries) cannot
    /// occupy every slot while other tenants' changes arrive.
    tenant_in_flight: HashMap<TenantId, usize>,
    in_backoff: usize,
    /// Earliest time a tenant skipped for its rate may go again.
    throttled_until: Option<Instant>,
}

impl<C: Coalesce> Scheduler<C> {
    pub fn new(settings: SchedulerSettings, jitter: Jitter) -> Self {
        Self {
            width: WriteWidth::new(settings.concurrency, settings.widening),
            settings,
            jitter,
            entries: HashMap::new(),
            classes: Default::default(),
            timers: BTreeMap::new(),
            last_write: HashMap::new(),
            buckets: HashMap::new(),
            tenant_load: HashMap::new(),
            next_ticket: 1,
            in_flight: 0,
            in_flight_background: 0,
            tenant_in_flight: HashMap::new(),
            in_backoff: 0,
            throttled_until: None,
        }
    }

    /// Adds a change for `key`. Returns true when it merged into a write already pending.
    pub fn enqueue(
        &mut self,
        key: WorkloadKey,
        tenant: TenantId,
        priority: Priority,
        change: C,
        now: Instant,
    ) -> bool {
        if !self.entries.contains_key(&key) {
            *self.tenant_load.entry(tenant.clone()).or_default() += 1;
            self.entries.insert(
                key.clone(),
                Entry {
                    tenant,
                    changes: Vec::new(),
                    pending_since: None,
                    flight_since: None,
                    priority,
                    in_flight: false,
                    flight_class: priority,
                    failures: 0,
                    last_error: None,
                    progress: None,
                    wait: None,
                    ticket: 0,
                    ready_since: None,
                },
            );
        }
        let entry = self.entries.get_mut(&key).expect("just inserted");
        let class_before = entry.class();
        if entry.changes.is_empty() {
            entry.pending_since = Some(now);
            entry.priority = priority;
        } else {
            entry.priority = entry.priority.min(priority);
        }
        let coalesced = merge_into(&mut entry.changes, change);
        let queued = entry.ticket != 0 && entry.wait.is_none();
        if queued && entry.class() < class_before {
            // Promoted (a live change joined a background write): take a place in the live class;
            // the old place becomes stale.
            self.push_ready(&key, now);
        } else if !queued && entry.wait.is_none() && !entry.in_flight {
            self.make_available(&key, now);
        }
        coalesced
    }

    /// The next write to start, if a slot is free and something is ready. Call until `None`.
    pub fn next(&mut self, now: Instant) -> Option<Dispatch<C>> {
        if self.slots_full() {
            return None;
        }
        self.fire_timers(now);
        self.throttled_until = None;
        let background_slots = self.background_slots();
        let background_busy = self.in_flight_background;
        let (key, priority) = Priority::ALL
            .into_iter()
            .filter(|p| *p == Priority::Live || background_busy < background_slots)
            .find_map(|p| self.pick(p, now).map(|k| (k, p)))?;
        if priority == Priority::Background {
            self.in_flight_background += 1;
        }
        let entry = self.entries.get_mut(&key).expect("picked entries exist");
        entry.in_flight = true;
        entry.flight_class = priority;
        entry.ticket = 0;
        entry.flight_since = entry.pending_since.take();
        let waited = entry
            .ready_since
            .take()
            .map(|t| now.saturating_duration_since(t))
            .unwrap_or_default();
        let tenant = entry.tenant.clone();
        *self.tenant_in_flight.entry(tenant.clone()).or_default() += 1;
        let dispatch = Dispatch {
            key,
            tenant: tenant.clone(),
            changes: std::mem::take(&mut entry.changes),
            priority,
            attempt: entry.failures + 1,
            waited,
        };
        self.in_flight += 1;
        if let Some(rate) = self.settings.per_tenant_rate {
            let bucket = self.bucket(&tenant, rate, now);
            bucket.tokens -= 1.0;
        }
        Some(dispatch)
    }

    /// Whether [`Self::next`] would start a write now (a slot free and a tenant with ready work;
    /// a tenant over its own rate may still make it return `None`).
    pub fn has_ready(&mut self, now: Instant) -> bool {
        if self.slots_full() {
            return false;
        }
        self.fire_timers(now);
        let background_slots = self.background_slots();
        !self.classes[Priority::Live.index()].turns.is_empty()
            || (self.in_flight_background < background_slots
                && !self.classes[Priority::Background.index()].turns.is_empty())
    }

    /// When [`Self::next`] may have something new without any other call: the earliest timer or
    /// the end of a tenant's rate wait (`None` while every slot is busy: a completion comes first).
    pub fn next_wake(&self) -> Option<Instant> {
        if self.slots_full() {
            // Nothing starts before a write completes, whatever the timers say.
            return None;
        }
        let timer = self.timers.keys().next().map(|(at, _)| *at);
        match (timer, self.throttled_until) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// A dispatched write ended. `changes` are the ones it carried (put back on failure). Returns
    /// the failure step when it failed.
    pub fn complete(
        &mut self,
        key: &WorkloadKey,
        changes: Vec<C>,
        completion: Completion,
        now: Instant,
    ) -> Option<FailureStep> {
        let settings = self.settings.clone();
        let entry = self.entries.get_mut(key)?;
        if std::mem::replace(&mut entry.in_flight, false) {
            self.in_flight -= 1;
            if entry.flight_class == Priority::Background {
                self.in_flight_background -= 1;
            }
            if let Some(n) = self.tenant_in_flight.get_mut(&entry.tenant) {
                *n -= 1;
                if *n == 0 {
                    self.tenant_in_flight.remove(&entry.tenant);
                }
            }
        }
        let mut step = None;
        match completion {
            Completion::Written { reloaded } => {
                entry.failures = 0;
                entry.last_error = None;
                entry.progress = None;
                if reloaded && !settings.min_reload_interval.is_zero() {
                    self.last_write.insert(key.clone(), now);
                }
            }
            Completion::Finished => {
                entry.failures = 0;
                entry.last_error = None;
                entry.progress = None;
            }
            Completion::Failed { error } => {
                entry.failures += 1;
                entry.last_error = Some(error);
                put_back(entry, changes);
                let retry_in = backoff(&settings, entry.failures, (self.jitter)());
                let failures = entry.failures;
                step = Some(FailureStep {
                    failures,
                    retry_in,
                    report: should_report(failures, settings.report_after),
                });
                self.in_backoff += 1;
                self.wait(key, now + retry_in, Wait::Backoff);
            }
            Completion::Held { retry_in } => {
                put_back(entry, changes);
                self.wait(key, now + retry_in, Wait::Hold);
            }
            Completion::Progressed { step, next_in } => {
                entry.failures = 0;
                entry.last_error = None;
                entry.progress = Some(step);
                put_back(entry, changes);
                self.wait(key, now + next_in, Wait::NextStep);
            }
        }
        self.settle(key, now);
        self.forget_old_writes(now);
        step
    }

    /// A write's time in flight, without its wait for the limiter, and whether it failed
    /// transiently (429, 5xx, a timeout): sizes the width ([`super::width`]).
    pub fn observe_write(&mut self, took: Duration, failed_transiently: bool, now: Instant) {
        match failed_transiently {
            true => self.width.distress(now),
            false => self.width.observe(took, now),
        }
    }

    fn slots_full(&self) -> bool {
        self.in_flight >= self.width.slots()
    }

    fn background_slots(&self) -> usize {
        (self.width.slots() / 2).max(1)
    }

    /// Workloads pending or in flight.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn stats(&self) -> QueueStats {
        QueueStats {
            workloads: self.entries.len(),
            tenants: self.tenant_load.len(),
            in_flight: self.in_flight,
            in_backoff: self.in_backoff,
            slots: self.width.slots(),
        }
    }

    pub fn inspect(&self, key: &WorkloadKey, now: Instant) -> Option<WorkloadQueueState> {
        let entry = self.entries.get(key)?;
        let ahead = |wanted: Wait| {
            entry
                .wait
                .filter(|(_, why)| *why == wanted)
                .map(|(at, _)| at.saturating_duration_since(now).as_secs_f64())
        };
        Some(WorkloadQueueState {
            tenant: entry.tenant.to_string(),
            priority: entry.class(),
            pending_changes: entry.changes.len(),
            pending_for_seconds: entry
                .pending_since
                .filter(|_| !entry.changes.is_empty())
                .map(|t| now.saturating_duration_since(t).as_secs_f64()),
            in_flight: entry.in_flight,
            failures: entry.failures,
            last_error: entry.last_error.clone(),
            backoff_retry_in_seconds: ahead(Wait::Backoff),
            min_interval_hold_in_seconds: ahead(Wait::MinInterval),
            handover_hold_in_seconds: ahead(Wait::Hold),
            progress: entry.progress.clone(),
            next_step_in_seconds: ahead(Wait::NextStep),
        })
    }

    /// After a write: drops an entry with nothing left, or makes its new changes available.
    fn settle(&mut self, key: &WorkloadKey, now: Instant) {
        let Some(entry) = self.entries.get(key) else {
            return;
        };
        if entry.changes.is_empty() && !entry.in_flight && entry.wait.is_none() {
            let tenant = entry.tenant.clone();
            self.entries.remove(key);
            if let Some(load) = self.tenant_load.get_mut(&tenant) {
                *load -= 1;
                if *load == 0 {
                    self.tenant_load.remove(&tenant);
                }
            }
        } else if entry.wait.is_none() && !entry.in_flight && entry.ticket == 0 {
            self.make_available(key, now);
        }
    }

    /// Queues a pending entry, or holds it until its minimum interval has passed.
    fn make_available(&mut self, key: &WorkloadKey, now: Instant) {
        let interval = self.settings.min_reload_interval;
        let hold_until = self
            .last_write
            .get(key)
            .map(|t| *t + interval)
            .filter(|t| *t > now);
        match hold_until {
            Some(at) => self.wait(key, at, Wait::MinInterval),
            None => self.push_ready(key, now),
        }
    }

    fn push_ready(&mut self, key: &WorkloadKey, now: Instant) {
        let ticket = self.ticket();
        let entry = self.entries.get_mut(key).expect("queued entries exist");
        entry.ticket = ticket;
        entry.ready_since.get_or_insert(now);
        let class = &mut self.classes[entry.class().index()];
        let fifo = class.fifos.entry(entry.tenant.clone()).or_default();
        if fifo.is_empty() {
            class.turns.push_back(entry.tenant.clone());
        }
        fifo.push_back((key.clone(), ticket));
    }

    fn wait(&mut self, key: &WorkloadKey, until: Instant, why: Wait) {
        let ticket = self.ticket();
        let entry = self.entries.get_mut(key).expect("waiting entries exist");
        entry.ticket = ticket;
        entry.wait = Some((until, why));
        self.timers.insert((until, ticket), key.clone());
    }

    fn fire_timers(&mut self, now: Instant) {
        while let Some(entry) = self.timers.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let ((_, ticket), key) = entry.remove_entry();
            let Some(e) = self.entries.get_mut(&key).filter(|e| e.ticket == ticket) else {
                continue;
            };
            if matches!(e.wait.take(), Some((_, Wait::Backoff))) {
                self.in_backoff -= 1;
            }
            e.ticket = 0;
            self.make_available(&key, now);
        }
    }

    /// The next ready workload of a class: tenants take turns; a tenant over its rate is skipped.
    fn pick(&mut self, priority: Priority, now: Instant) -> Option<WorkloadKey> {
        let rate = self.settings.per_tenant_rate;
        let mut skipped = 0;
        loop {
            let class = &mut self.classes[priority.index()];
            if skipped >= class.turns.len() {
                return None;
            }
            let tenant = class.turns.pop_front()?;
            // Measured against the floor: a tenant whose own writes are slow widens the width
            // for everyone, and must not widen its own share with it.
            let tenant_slots = (self.width.floor() / 2).max(1);
            if self.tenant_in_flight.get(&tenant).copied().unwrap_or(0) >= tenant_slots {
                // Its turn comes back when one of its writes completes.
                self.classes[priority.index()].turns.push_back(tenant);
                skipped += 1;
                continue;
            }
            if let Some(rate) = rate {
                let bucket = *self.bucket(&tenant, rate, now);
                if bucket.tokens < 1.0 {
                    let ready_at = now + Duration::from_secs_f64((1.0 - bucket.tokens) / rate);
                    self.throttled_until = Some(
                        self.throttled_until
                            .map_or(ready_at, |t: Instant| t.min(ready_at)),
                    );
                    self.classes[priority.index()].turns.push_back(tenant);
                    skipped += 1;
                    continue;
                }
            }
            let class = &mut self.classes[priority.index()];
            let fifo = class
                .fifos
                .get_mut(&tenant)
                .expect("a tenant's turn has a FIFO");
            let mut picked = None;
            while let Some((key, ticket)) = fifo.pop_front() {
                if self.entries.get(&key).is_some_and(|e| e.ticket == ticket) {
                    picked = Some(key);
                    break;
                }
            }
            if fifo.is_empty() {
                class.fifos.remove(&tenant);
            } else {
                class.turns.push_back(tenant);
            }
            if picked.is_some() {
                return picked;
            }
        }
    }

    fn bucket(&mut self, tenant: &TenantId, rate: f64, now: Instant) -> &mut Bucket {
        let burst = rate.max(1.0);
        let bucket = self.buckets.entry(tenant.clone()).or_insert(Bucket {
            tokens: burst,
            at: now,
        });
        let elapsed = now.saturating_duration_since(bucket.at).as_secs_f64();
        bucket.tokens = (bucket.tokens + elapsed * rate).min(burst);
        bucket.at = now;
        bucket
    }

    fn ticket(&mut self) -> u64 {
        self.next_ticket += 1;
        self.next_ticket
    }

    /// Write times and full buckets only matter for a while: bound the maps.
    fn forget_old_writes(&mut self, now: Instant) {
        const KEEP: usize = 10_000;
        if self.last_write.len() > KEEP {
            let horizon = self.settings.min_reload_interval;
            self.last_write
                .retain(|_, t| now.saturating_duration_since(*t) < horizon);
        }
        if self.buckets.len() > KEEP {
            let load = &self.tenant_load;
            self.buckets.retain(|tenant, b| {
                load.contains_key(tenant)
                    || now.saturating_duration_since(b.at) < Duration::from_secs(1)
            });
        }
    }
}

/// A failed write's changes go back in front of what arrived meanwhile, so each newer change
/// replaces the one it supersedes.
fn put_back<C: Coalesce>(entry: &mut Entry<C>, failed: Vec<C>) {
    let newer = std::mem::replace(&mut entry.changes, failed);
    for change in newer {
        merge_into(&mut entry.changes, change);
    }
    entry.pending_since = match (entry.flight_since.take(), entry.pending_since) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
}

/// Capped exponential backoff with "equal jitter": half the step is fixed, half random, so
/// retries of a fan-out that failed together spread out but never come back too early.
pub fn backoff(settings: &SchedulerSettings, failures: u32, jitter: f64) -> Duration {
    let doublings = failures.saturating_sub(1).min(30);
    let step = settings
        .backoff_base
        .saturating_mul(1 << doublings)
        .min(settings.backoff_cap);
    step / 2 + step.mul_f64(jitter.clamp(0.0, 1.0) / 2.0)
}

fn should_report(failures: u32, report_after: u32) -> bool {
    let report_after = report_after.max(1);
    failures >= report_after && {
        let since = failures - report_after;
        since == 0 || since.is_power_of_two()
    }
}

#[cfg(test)]
mod tests;
