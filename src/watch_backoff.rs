//! How long a broken watch (of configs, workloads, namespaces, the assignment) waits before it
//! tries again. kube-runtime's default, like client-go's, doubles from 0.8 s up to 30 s, each
//! delay jittered up to twice as long: through a 7 s API server restart (the chaos campaign's)
//! a watch failed three or four times, and its next attempt could come 5-12 s after the server
//! was back, every reload of its kind waiting for it. Here the doubling stops at 1.6 s (3.2 s
//! with the jitter): a replica's dozen watches then retry a few times a second together while
//! the server is away, and are back within 3.2 s of it (in `chaos-medium-3r-2b7818a` the
//! reloads over 9 s that only an API server restart touched fell from 64 to 4).

use std::time::Duration;

use kube::runtime::utils::{Backoff, ResetTimerBackoff};
use kube::runtime::watcher::ExponentialBackoff;

/// The first delay, as kube-runtime's and client-go's.
const FIRST: Duration = Duration::from_millis(800);
/// The longest delay before the jitter.
const LONGEST: Duration = Duration::from_millis(1600);
/// A backoff not used for this long starts again from the first delay, as kube-runtime's does
/// (any event received also starts it again).
const RESET_AFTER: Duration = Duration::from_secs(120);

/// The retry delays of one watch stream.
pub fn watch_backoff() -> impl Backoff + 'static {
    let delays = backon::ExponentialBuilder::default()
        .with_min_delay(FIRST)
        .with_max_delay(LONGEST)
        .with_factor(2.0)
        .with_jitter()
        .without_max_times();
    ResetTimerBackoff::new(ExponentialBackoff::from(delays), RESET_AFTER)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn delays_double_from_the_first_and_stay_within_twice_the_longest() {
        let mut backoff = watch_backoff();
        let delays: Vec<Duration> = (&mut backoff).take(20).collect();
        assert!((FIRST..FIRST * 2).contains(&delays[0]), "{delays:?}");
        assert!((FIRST * 2..FIRST * 4).contains(&delays[1]), "{delays:?}");
        assert!(delays.iter().all(|d| *d < LONGEST * 2), "{delays:?}");
        assert!(delays[2..].iter().all(|d| *d >= LONGEST), "{delays:?}");
        backoff.reset();
        let again = backoff.next().unwrap();
        assert!((FIRST..FIRST * 2).contains(&again), "{again:?}");
    }
}
