//! Whether another replica's Lease is still being renewed, judged on this replica's own
//! monotonic clock.
//!
//! A Lease's `renewTime` is written with the holder's wall clock. Comparing it with ours would
//! let a clock skew decide liveness: a replica 30 s ahead looks alive 30 s after it died, one
//! 30 s behind looks dead while it renews every two seconds (two owners for its namespaces).
//! Like client-go's leader election, a record here counts as expired when it has not *changed*
//! for its lease duration, timed from when this replica first saw it in its current state.
//! The holder's timestamp is only used as an opaque version of the record.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// What identifies one renewal of a Lease: any change of it restarts the local timer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseRecord {
    pub holder: String,
    /// The `renewTime` exactly as written by the holder (compared, never interpreted).
    pub renew_time: Option<String>,
    pub duration: Duration,
}

#[derive(Debug)]
struct Observed {
    record: LeaseRecord,
    since: Instant,
}

/// The local observation history of a set of Leases, keyed by Lease name.
#[derive(Debug, Default)]
pub struct Liveness {
    observed: HashMap<String, Observed>,
}

impl Liveness {
    /// Records what `lease` holds now and says whether it is live: renewed (changed) less than
    /// its duration ago by the local clock. A record seen for the first time counts as just
    /// renewed, so a replica that has just started waits a full duration before calling
    /// anyone dead, as client-go does.
    pub fn observe(&mut self, lease: &str, record: LeaseRecord, now: Instant) -> bool {
        let entry = self
            .observed
            .entry(lease.to_string())
            .or_insert_with(|| Observed {
                record: record.clone(),
                since: now,
            });
        if entry.record != record {
            entry.record = record;
            entry.since = now;
        }
        if entry.record.renew_time.is_none() {
            return false;
        }
        now.saturating_duration_since(entry.since) < entry.record.duration
    }

    /// Forgets Leases that no longer exist, so the map stays as small as the membership.
    pub fn retain(&mut self, present: impl Fn(&str) -> bool) {
        self.observed.retain(|name, _| present(name));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(renew: &str) -> LeaseRecord {
        LeaseRecord {
            holder: "a".into(),
            renew_time: Some(renew.into()),
            duration: Duration::from_secs(15),
        }
    }

    #[test]
    fn a_record_that_keeps_changing_stays_live_whatever_its_timestamps_say() {
        let mut l = Liveness::default();
        let t0 = Instant::now();
        // Timestamps from a holder whose clock is an hour behind: irrelevant, they change.
        for i in 0..20u64 {
            let now = t0 + Duration::from_secs(2 * i);
            let stamp = format!("2000-01-01T00:00:{:02}.000000Z", i);
            assert!(l.observe("m", record(&stamp), now), "renewal {i}");
        }
    }

    #[test]
    fn a_record_that_stops_changing_expires_after_its_duration_on_the_local_clock() {
        let mut l = Liveness::default();
        let t0 = Instant::now();
        // A timestamp far in the future (a holder whose clock is ahead) buys nothing.
        let frozen = record("2999-01-01T00:00:00.000000Z");
        assert!(l.observe("m", frozen.clone(), t0));
        assert!(l.observe("m", frozen.clone(), t0 + Duration::from_millis(14_999)));
        assert!(!l.observe("m", frozen.clone(), t0 + Duration::from_secs(15)));
        // It renews again: live at once.
        assert!(l.observe(
            "m",
            record("2999-01-01T00:00:02.000000Z"),
            t0 + Duration::from_secs(16)
        ));
    }

    #[test]
    fn a_record_first_seen_counts_as_just_renewed() {
        let mut l = Liveness::default();
        let t0 = Instant::now();
        // An old timestamp (a holder 30 s behind, or dead long ago): a newcomer cannot tell
        // which, so it waits one duration.
        let old = record("2000-01-01T00:00:00.000000Z");
        assert!(l.observe("m", old.clone(), t0));
        assert!(!l.observe("m", old, t0 + Duration::from_secs(15)));
    }

    #[test]
    fn a_record_never_renewed_is_not_live() {
        let mut l = Liveness::default();
        let empty = LeaseRecord {
            renew_time: None,
            ..record("x")
        };
        assert!(!l.observe("m", empty, Instant::now()));
    }

    #[test]
    fn a_new_holder_restarts_the_timer() {
        let mut l = Liveness::default();
        let t0 = Instant::now();
        let same = record("2000-01-01T00:00:00.000000Z");
        l.observe("leader", same.clone(), t0);
        let taken = LeaseRecord {
            holder: "b".into(),
            ..same
        };
        assert!(l.observe("leader", taken, t0 + Duration::from_secs(14)));
        assert!(l.observe(
            "leader",
            LeaseRecord {
                holder: "b".into(),
                ..record("2000-01-01T00:00:00.000000Z")
            },
            t0 + Duration::from_secs(28)
        ));
    }

    #[test]
    fn forgotten_leases_start_over() {
        let mut l = Liveness::default();
        let t0 = Instant::now();
        let r = record("2000-01-01T00:00:00.000000Z");
        l.observe("m", r.clone(), t0);
        l.retain(|name| name != "m");
        assert!(l.observe("m", r, t0 + Duration::from_secs(60)));
    }
}
