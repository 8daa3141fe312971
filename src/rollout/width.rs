//! How many writes may be in flight at once.
//!
//! A write holds its slot for its round trips to the API server (a GET, then a PATCH). At rest
//! those take a few milliseconds and 32 slots carry far more than the write limiter allows
//! (`--max-patches-per-second`, 50 by default). When every response is late, they do not: with
//! +1.7 s on each response, 32 slots carried 32 / 3.4 s = 9.4 writes a second, and a leader
//! that had to write 30 a second fell minutes behind (`chaos-medium-3r-ha-350cdef`: 517 reloads
//! over 9 s from the `latency` faults alone). By Little's law, writes in flight = rate x time
//! in flight, so the width follows the time a write takes now: enough for the limiter's rate,
//! never below the configured floor, never above a ceiling (each write in flight is an HTTP/1.1
//! connection to the API server). At rest it stays at the floor.
//!
//! Slow is not always far: an API server that is slow because it is busy (restarted, and every
//! client relisting at once) gets slower with more writes in flight. A fixed 128 slots made the
//! reloads that waited for an API server restart slower (`chaos-medium-3r-ha-a74c20e-write-slots-128`:
//! 148 over 9 s by that fault alone, 16 with 32 slots), and so did this width without a brake
//! (`chaos-medium-3r-3988fb6`: 109, against 0 in three runs with 32). A busy server answers some
//! writes with 429, 5xx or not at all, a far one does not: a write failing that way holds the
//! width at the floor for [`CALM`].
//!
//! Pure: the queue reports each write's time (without its wait for the limiter) and its
//! failures, with the time they happened, and reads the width back.

use std::time::{Duration, Instant};

/// Weight of the newest write time in the running mean: about the last 10 writes count, so the
/// width follows a slowdown within a second at 30 writes a second, and comes back as fast.
const WEIGHT: f64 = 0.1;

/// How long a write failing transiently (429, 5xx, a timeout, a broken connection) holds the
/// width at the floor: about what an API server restart and the relists after it take here.
pub const CALM: Duration = Duration::from_secs(30);

/// Widening: a ceiling and the rate the width is sized for.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Widening {
    /// Never more writes in flight than this.
    pub max: usize,
    /// The rate to sustain (the write limiter's).
    pub writes_per_second: f64,
}

#[derive(Debug, Clone)]
pub struct WriteWidth {
    floor: usize,
    widening: Option<Widening>,
    mean_secs: f64,
    /// The floor until then (the last transient failure + [`CALM`]).
    calm_until: Option<Instant>,
    slots: usize,
}

impl WriteWidth {
    /// `floor` slots always; with `widening`, more while writes are slow.
    pub fn new(floor: usize, widening: Option<Widening>) -> Self {
        Self {
            floor: floor.max(1),
            widening,
            mean_secs: 0.0,
            calm_until: None,
            slots: floor.max(1),
        }
    }

    /// A write's time in flight (round trips, not its wait for the limiter), ended at `now`.
    pub fn observe(&mut self, took: Duration, now: Instant) {
        self.mean_secs += WEIGHT * (took.as_secs_f64() - self.mean_secs);
        self.slots = self.sized(now);
    }

    /// A write failed transiently at `now`: the floor for [`CALM`].
    pub fn distress(&mut self, now: Instant) {
        self.calm_until = Some(now + CALM);
        self.slots = self.floor;
    }

    /// The slots as of the last write reported.
    pub fn slots(&self) -> usize {
        self.slots
    }

    fn sized(&self, now: Instant) -> usize {
        let Some(widening) = self.widening else {
            return self.floor;
        };
        if self.calm_until.is_some_and(|until| now < until) {
            return self.floor;
        }
        let needed = (widening.writes_per_second * self.mean_secs).ceil();
        // `as` saturates a float too large for usize; the clamp bounds it anyway.
        (needed as usize).clamp(self.floor, widening.max.max(self.floor))
    }

    /// The configured floor: what a single tenant's share is measured against, so that one slow
    /// tenant widening the width does not widen its own share.
    pub fn floor(&self) -> usize {
        self.floor
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn widening() -> Option<Widening> {
        Some(Widening {
            max: 128,
            writes_per_second: 50.0,
        })
    }

    fn after(width: &mut WriteWidth, took: Duration, writes: usize) -> usize {
        let now = Instant::now();
        for _ in 0..writes {
            width.observe(took, now);
        }
        width.slots()
    }

    #[test]
    fn fast_writes_keep_the_floor() {
        let mut width = WriteWidth::new(32, widening());
        assert_eq!(after(&mut width, Duration::from_millis(40), 100), 32);
    }

    #[test]
    fn slow_writes_widen_to_what_the_rate_needs_within_the_ceiling() {
        let mut width = WriteWidth::new(32, widening());
        // 50/s x 1.2 s = 60 writes in flight.
        assert_eq!(after(&mut width, Duration::from_millis(1200), 200), 60);
        // 50/s x 3.4 s = 170: capped.
        assert_eq!(after(&mut width, Duration::from_millis(3400), 200), 128);
    }

    #[test]
    fn the_width_comes_back_to_the_floor_once_writes_are_fast_again() {
        let mut width = WriteWidth::new(32, widening());
        after(&mut width, Duration::from_millis(3400), 200);
        let back = after(&mut width, Duration::from_millis(20), 60);
        assert_eq!(
            back, 32,
            "60 fast writes later the mean is far below 0.64 s"
        );
    }

    #[test]
    fn a_few_slow_writes_among_fast_ones_do_not_widen() {
        let mut width = WriteWidth::new(32, widening());
        for _ in 0..50 {
            after(&mut width, Duration::from_millis(20), 9);
            width.observe(Duration::from_secs(1), Instant::now());
        }
        assert_eq!(width.slots(), 32);
    }

    #[test]
    fn a_transient_failure_holds_the_floor_for_the_calm_period() {
        let mut width = WriteWidth::new(32, widening());
        let t0 = Instant::now();
        after(&mut width, Duration::from_millis(3400), 200);
        width.distress(t0);
        assert_eq!(width.slots(), 32);
        width.observe(
            Duration::from_millis(3400),
            t0 + CALM - Duration::from_secs(1),
        );
        assert_eq!(width.slots(), 32, "still calming down");
        width.observe(Duration::from_millis(3400), t0 + CALM);
        assert_eq!(width.slots(), 128);
    }

    #[test]
    fn without_widening_the_width_is_fixed() {
        let mut width = WriteWidth::new(4, None);
        assert_eq!(after(&mut width, Duration::from_secs(10), 100), 4);
    }
}
