//! The checker of a chaos run: the whole recorded history (every config write and every
//! reloader field the workload watch saw change) against three properties, each violation shown
//! with the faults in effect around it.
//!
//! - **missed**: a change whose value never reached a workload that uses the config, neither
//!   itself nor through a later change of the same config (a folded change is allowed, as in
//!   the ledger's verdict; the last change of a config can only be reached by itself);
//! - **duplicate**: a workload rolled more than once to the same change;
//! - **stale**: a workload rolled to a change after it had rolled to a newer change of the same
//!   config (an older hash written over a newer one), at any point of the history, not only
//!   for the first sighting.

use std::collections::HashMap;

use serde::Serialize;

use crate::ledger::{Change, Observation};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Property {
    Missed,
    Duplicate,
    Stale,
}

/// One violation: what, where, and the span of the history that shows it (run clock).
#[derive(Debug, Clone, Serialize)]
pub struct Violation {
    pub property: Property,
    pub workload: String,
    pub change: usize,
    pub config: String,
    pub from_s: f64,
    pub to_s: f64,
    pub what: String,
    /// Faults in effect within the margin around `from_s..to_s`.
    pub faults: Vec<String>,
}

/// A fault as it was carried out (run clock).
#[derive(Debug, Clone, Serialize)]
pub struct FaultRecord {
    pub kind: String,
    pub target: String,
    pub start_s: f64,
    pub end_s: f64,
    pub detail: String,
}

/// Every violation of the history, in the order of the changes.
pub fn check(changes: &[Change], observations: &[Observation]) -> Vec<Violation> {
    let by_hash: HashMap<&str, &Change> = changes.iter().map(|c| (c.hash.as_str(), c)).collect();
    // (workload, config) -> the workload's sightings of that config's changes, in time order,
    // each with the change's place in the order the server applied the config's changes.
    let mut history: HashMap<(&str, String), Vec<Sighting>> = HashMap::new();
    for o in observations {
        if let Some(c) = by_hash.get(o.hash.as_str()) {
            let key = (o.workload.as_str(), c.config.to_string());
            history.entry(key).or_default().push(Sighting {
                t: o.t,
                id: c.id,
                order: c.order(),
            });
        }
    }
    for seen in history.values_mut() {
        seen.sort_by(|a, b| a.t.total_cmp(&b.t));
    }
    let mut out = missed(changes, &history);
    for ((workload, config), seen) in &history {
        out.extend(duplicates(workload, config, seen));
        out.extend(stale(workload, config, seen));
    }
    out.sort_by(|a, b| a.change.cmp(&b.change).then(a.workload.cmp(&b.workload)));
    out
}

/// A workload seen carrying a change's value.
#[derive(Debug, Clone, Copy)]
struct Sighting {
    t: f64,
    id: usize,
    /// [`Change::order`].
    order: (u64, usize),
}

/// Changes that reached an expected workload neither themselves nor through a later change.
fn missed(changes: &[Change], history: &HashMap<(&str, String), Vec<Sighting>>) -> Vec<Violation> {
    let mut out = Vec::new();
    for c in changes.iter().filter(|c| c.error.is_none()) {
        let config = c.config.to_string();
        for w in &c.expected {
            let reached = history
                .get(&(w.as_str(), config.clone()))
                .is_some_and(|seen| seen.iter().any(|s| s.order >= c.order()));
            if !reached {
                let ack = c.t_ack.unwrap_or(c.t_sent);
                out.push(Violation {
                    property: Property::Missed,
                    workload: w.clone(),
                    change: c.id,
                    config: config.clone(),
                    from_s: c.t_sent,
                    to_s: ack,
                    what: format!(
                        "{w} never rolled to change #{} of {config} or a later one",
                        c.id
                    ),
                    faults: Vec::new(),
                });
            }
        }
    }
    out
}

fn duplicates(workload: &str, config: &str, seen: &[Sighting]) -> Vec<Violation> {
    let mut by_change: HashMap<usize, Vec<f64>> = HashMap::new();
    for s in seen {
        by_change.entry(s.id).or_default().push(s.t);
    }
    let mut out: Vec<Violation> = by_change
        .into_iter()
        .filter(|(_, times)| times.len() > 1)
        .map(|(id, times)| Violation {
            property: Property::Duplicate,
            workload: workload.to_string(),
            change: id,
            config: config.to_string(),
            from_s: times[0],
            to_s: times[times.len() - 1],
            what: format!(
                "{workload} rolled {} times to change #{id} of {config}",
                times.len()
            ),
            faults: Vec::new(),
        })
        .collect();
    out.sort_by_key(|v| v.change);
    out
}

/// Sightings of a change after a sighting of a newer change of the same config (newer in the
/// order the server applied them).
fn stale(workload: &str, config: &str, seen: &[Sighting]) -> Vec<Violation> {
    let mut out = Vec::new();
    let mut newest: Option<Sighting> = None;
    for &Sighting { t, id, order } in seen {
        match newest {
            Some(Sighting {
                t: t_new,
                id: newer,
                order: newer_order,
            }) if order < newer_order => out.push(Violation {
                property: Property::Stale,
                workload: workload.to_string(),
                change: id,
                config: config.to_string(),
                from_s: t_new,
                to_s: t,
                what: format!(
                    "{workload} rolled back to change #{id} of {config} at {t:.1}s after change #{newer} at {t_new:.1}s"
                ),
                faults: Vec::new(),
            }),
            Some(n) if order <= n.order => {}
            _ => newest = Some(Sighting { t, id, order }),
        }
    }
    out
}

/// Fills each violation's `faults` with the records in effect within `margin_s` of its span.
pub fn annotate(violations: &mut [Violation], log: &[FaultRecord], margin_s: f64) {
    for v in violations {
        v.faults = log
            .iter()
            .filter(|f| f.start_s <= v.to_s + margin_s && f.end_s >= v.from_s - margin_s)
            .map(|f| {
                format!(
                    "{} {} {:.1}s..{:.1}s {}",
                    f.kind, f.target, f.start_s, f.end_s, f.detail
                )
            })
            .collect();
    }
}

/// Violations counted by property.
pub fn counts(violations: &[Violation]) -> [usize; 3] {
    let n = |p| violations.iter().filter(|v| v.property == p).count();
    [
        n(Property::Missed),
        n(Property::Duplicate),
        n(Property::Stale),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chaos::fixtures::{change, seen};

    /// Two configs, three changes, two workloads on `a`, one on `b`: every change reached
    /// every user once, in order.
    fn clean() -> (Vec<Change>, Vec<Observation>) {
        let changes = vec![
            change(0, "a", &["ns/w1", "ns/w2"], 1.0),
            change(1, "b", &["ns/w3"], 2.0),
            change(2, "a", &["ns/w1", "ns/w2"], 3.0),
        ];
        let obs = vec![
            seen("ns/w1", 0, 1.5),
            seen("ns/w2", 0, 1.6),
            seen("ns/w3", 1, 2.5),
            seen("ns/w1", 2, 3.5),
            seen("ns/w2", 2, 3.6),
        ];
        (changes, obs)
    }

    #[test]
    fn a_clean_history_has_no_violation() {
        let (changes, obs) = clean();
        assert!(check(&changes, &obs).is_empty());
    }

    #[test]
    fn a_folded_change_is_no_miss_but_a_lost_last_change_is() {
        let (changes, mut obs) = clean();
        // w2 skipped change 0 and went straight to change 2: folded, allowed.
        obs.retain(|o| !(o.workload == "ns/w2" && o.hash == "h0"));
        assert!(check(&changes, &obs).is_empty());
        // w1 never saw change 2, the last of `a`: missed, although it saw change 0.
        obs.retain(|o| !(o.workload == "ns/w1" && o.hash == "h2"));
        let v = check(&changes, &obs);
        assert_eq!(counts(&v), [1, 0, 0], "{v:?}");
        assert_eq!((v[0].workload.as_str(), v[0].change), ("ns/w1", 2));
    }

    #[test]
    fn a_workload_rolled_twice_for_one_change_is_a_duplicate() {
        let (changes, mut obs) = clean();
        obs.push(seen("ns/w3", 1, 9.0));
        let v = check(&changes, &obs);
        assert_eq!(counts(&v), [0, 1, 0], "{v:?}");
        assert_eq!((v[0].from_s, v[0].to_s), (2.5, 9.0));
    }

    #[test]
    fn an_older_hash_after_a_newer_one_is_stale() {
        let (changes, mut obs) = clean();
        // w2 went back to change 0 after change 2: stale, and a second sighting of change 0.
        obs.push(seen("ns/w2", 0, 4.0));
        let v = check(&changes, &obs);
        assert_eq!(counts(&v), [0, 1, 1], "{v:?}");
        let s = v.iter().find(|v| v.property == Property::Stale).unwrap();
        assert_eq!((s.change, s.from_s, s.to_s), (0, 3.6, 4.0));
        // Out of order on the first sighting too: change 2 seen, then change 0 for the first time.
        let (changes, mut obs) = clean();
        obs.retain(|o| o.workload != "ns/w1");
        obs.push(seen("ns/w1", 2, 3.5));
        obs.push(seen("ns/w1", 0, 3.7));
        assert_eq!(counts(&check(&changes, &obs)), [0, 0, 1]);
    }

    /// Two changes of one config in flight at once: the server may apply the one registered
    /// later first. The value it applied last is the config's newest, whatever the ids say, and
    /// a workload ending on it went forward (`chaos-small-3r-9dcd77e` counted two such as stale).
    #[test]
    fn newer_is_the_order_the_server_applied_the_changes_in() {
        let (mut changes, mut obs) = clean();
        // Change 2 was applied before change 0 (both of config "a").
        changes[2].applied = Some(50);
        obs.retain(|o| o.workload == "ns/w3");
        obs.push(seen("ns/w1", 2, 3.5));
        obs.push(seen("ns/w1", 0, 3.7));
        obs.push(seen("ns/w2", 0, 3.6));
        assert_eq!(counts(&check(&changes, &obs)), [0, 0, 0]);
        // Ending on change 2, applied first, misses change 0.
        obs.retain(|o| !(o.workload == "ns/w1" && o.hash == "h0"));
        let v = check(&changes, &obs);
        assert_eq!(counts(&v), [1, 0, 0], "{v:?}");
        assert_eq!(v[0].change, 0);
    }

    #[test]
    fn a_failed_write_expects_nothing() {
        let (mut changes, obs) = clean();
        changes.push(change(3, "b", &["ns/w3"], 5.0));
        changes[3].error = Some("refused".into());
        assert!(check(&changes, &obs).is_empty());
    }

    #[test]
    fn violations_show_the_faults_around_them() {
        let (changes, mut obs) = clean();
        obs.push(seen("ns/w3", 1, 9.0));
        let mut v = check(&changes, &obs);
        let record = |kind: &str, start_s: f64, end_s: f64| FaultRecord {
            kind: kind.into(),
            target: "r0".into(),
            start_s,
            end_s,
            detail: String::new(),
        };
        let log = [
            record("kill", 0.0, 1.0),
            record("stop", 8.0, 12.0),
            record("latency", 30.0, 40.0),
        ];
        annotate(&mut v, &log, 1.0);
        assert_eq!(v[0].faults.len(), 1, "{:?}", v[0].faults);
        assert!(v[0].faults[0].starts_with("stop r0 8.0s..12.0s"));
        annotate(&mut v, &log, 2.0);
        assert_eq!(v[0].faults.len(), 2, "the kill ended 1.5 s before the span");
    }
}
