//! The API server's write budget (`--max-patches-per-second`, `--patch-burst`), shared by
//! reloads, the Events written about them and pause-period resumes, and served by priority:
//! a live reload before a retry or a start-up reconciliation, those before a `ReloadFail` Event;
//! first come, first served within a priority.
//!
//! `governor` alone serves whichever waiter polls first once a cell frees up. In the `poisoned`
//! load test (100 Deployments behind a dead admission webhook, 20 quiet tenants changing
//! configs) the poisoned workloads' retries and their `ReloadFail` Events took most cells, and a
//! quiet tenant's reload waited behind them at the limiter for up to 2.4 s (quiet p99 2.0 and
//! 2.4 s in two runs, `rate_limiter_wait_seconds` 30 of 591 turns over 1 s). The scheduler's
//! fairness ends where the limiter begins unless the limiter keeps the order too.
//!
//! Both the limiter and the dispatch pacer run on tokio's clock ([`TokioClock`]), so tests with
//! `tokio::time::pause` drive them.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use governor::clock::Clock;
use governor::middleware::NoOpMiddleware;
use governor::state::{InMemoryState, NotKeyed};
use governor::{Quota, RateLimiter};
use tokio::sync::Notify;

/// What a write waits behind at the limiter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum TurnPriority {
    /// A live config change's reload (and the pause resume that completes one).
    Live = 0,
    /// A retry of a failed write, or start-up reconciliation.
    Retry = 1,
    /// A `ReloadFail` Event (and other notices): only what the writes leave over.
    Notice = 2,
}

const PRIORITIES: usize = 3;

/// Re-checks the more urgent waiters at least this often (a missed wake-up costs no more).
const RECHECK: Duration = Duration::from_millis(50);

/// governor's clock, read from tokio's (paused in tests, monotonic in production).
#[derive(Debug, Clone)]
pub struct TokioClock {
    epoch: tokio::time::Instant,
}

impl Default for TokioClock {
    fn default() -> Self {
        Self {
            epoch: tokio::time::Instant::now(),
        }
    }
}

impl Clock for TokioClock {
    type Instant = Duration;

    fn now(&self) -> Duration {
        self.epoch.elapsed()
    }
}

/// A governor rate limiter on tokio's clock.
pub type TokioRateLimiter =
    RateLimiter<NotKeyed, InMemoryState, TokioClock, NoOpMiddleware<Duration>>;

pub fn tokio_rate_limiter(per_second: NonZeroU32, burst: NonZeroU32) -> TokioRateLimiter {
    let quota = Quota::per_second(per_second).allow_burst(burst);
    RateLimiter::direct_with_clock(quota, TokioClock::default())
}

/// How long until `limiter` has a cell, if it has none now (taking it if it has one).
pub fn wait_for_cell(limiter: &TokioRateLimiter) -> Option<Duration> {
    limiter
        .check()
        .err()
        .map(|not_until| not_until.wait_time_from(limiter.clock().now()))
}

/// The shared write budget; see the module doc.
pub struct PriorityLimiter {
    rate: TokioRateLimiter,
    /// Waiters per priority (a guard decrements it, also when a waiting write is dropped).
    waiting: [AtomicUsize; PRIORITIES],
    /// One waiter per priority asks the rate limiter at a time, in arrival order.
    lanes: [tokio::sync::Mutex<()>; PRIORITIES],
    /// Signalled whenever a waiter leaves.
    left: Notify,
}

/// The write budget as shared by the queue, Events and pause resumes.
pub type WriteLimiter = Arc<PriorityLimiter>;

pub fn write_limiter(max_per_second: NonZeroU32, burst: NonZeroU32) -> WriteLimiter {
    Arc::new(PriorityLimiter {
        rate: tokio_rate_limiter(max_per_second, burst),
        waiting: Default::default(),
        lanes: Default::default(),
        left: Notify::new(),
    })
}

/// Counts one waiter of a priority for as long as it lives.
struct Waiting<'a>(&'a AtomicUsize, &'a Notify);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
        self.1.notify_waiters();
    }
}

impl PriorityLimiter {
    /// Waits for a cell: after every more urgent waiter, and after the earlier waiters of the
    /// same priority. Returns how long it waited.
    pub async fn until_ready(&self, priority: TurnPriority) -> Duration {
        let started = tokio::time::Instant::now();
        let class = priority as usize;
        self.waiting[class].fetch_add(1, Ordering::SeqCst);
        let _waiting = Waiting(&self.waiting[class], &self.left);
        let _lane = self.lanes[class].lock().await;
        loop {
            let left = self.left.notified();
            tokio::pin!(left);
            left.as_mut().enable();
            if self.more_urgent_waiting(class) {
                let _ = tokio::time::timeout(RECHECK, left).await;
                continue;
            }
            match wait_for_cell(&self.rate) {
                None => return started.elapsed(),
                Some(wait) => tokio::time::sleep(wait).await,
            }
        }
    }

    /// Takes a cell if one is free now and nobody is waiting for it. The tests' probe of the
    /// bucket: the write path always waits its turn with `take`.
    #[cfg(test)]
    pub(crate) fn try_take(&self) -> bool {
        !self.more_urgent_waiting(PRIORITIES) && self.rate.check().is_ok()
    }

    fn more_urgent_waiting(&self, class: usize) -> bool {
        self.waiting[..class]
            .iter()
            .any(|w| w.load(Ordering::SeqCst) > 0)
    }
}

#[cfg(test)]
mod tests;
