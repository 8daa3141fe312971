//! What each fault did beyond its target: the reload latency, while it was in effect, of the
//! namespaces it did not touch, and for a replica taken away (kill, stop, skew), how long its
//! namespaces waited for another replica to write there (the takeover).
//!
//! Which namespaces a fault touched is read from the writes each replica's fault proxy saw
//! (a replica acts on the namespaces it writes workloads in), so this needs nothing of the
//! controller's own ownership function: a replica fault touches what its target wrote in around
//! the fault, a webhook its namespace; API server restarts, compactions and scaling touch every
//! namespace and have no untouched figure.
//!
//! A reload counts as untouched by a fault only if no fault in effect when its change was made
//! (within the recovery margin) touched its namespace: faults overlap (a stop of one replica
//! during write errors on another), and a namespace the other fault held up says nothing of
//! this one's reach. A change made while a fault that touches everything was in effect counts
//! for none.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use serde::Serialize;

use super::check::FaultRecord;
use crate::ledger::{Change, Observation};

/// How far back a taken-away replica's writes name the namespaces it owned.
const OWNED_LOOKBACK_S: f64 = 30.0;

/// Workload writes each replica tried: `(run clock, namespace)`, one list per replica index.
pub type ReplicaWrites = [Vec<(f64, String)>];

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FaultImpact {
    pub kind: String,
    pub target: String,
    pub start_s: f64,
    pub end_s: f64,
    /// Reloads of changes made during the fault in namespaces it did not touch (`None`: it
    /// touched every namespace).
    pub untouched_reloads: Option<usize>,
    pub untouched_p50_ms: Option<f64>,
    pub untouched_p99_ms: Option<f64>,
    /// kill, stop, skew: seconds from the start to the first write of another replica in a
    /// namespace the target had written in just before (`None` when the target wrote there
    /// again first: it came back before its namespaces moved).
    pub takeover_s: Option<f64>,
}

/// The same, pooled by fault kind.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct KindImpact {
    pub faults: usize,
    pub untouched_reloads: usize,
    pub untouched_p50_ms: Option<f64>,
    pub untouched_p99_ms: Option<f64>,
    pub takeover_max_s: Option<f64>,
}

/// One run's faults and reloads, read once (the reloads' latencies, the namespaces each fault
/// touched): every figure of this module is a view of it.
pub struct RunImpact<'a> {
    writes: &'a ReplicaWrites,
    margin_s: f64,
    reloads: Vec<Reload<'a>>,
    reach: Reach<'a>,
}

impl<'a> RunImpact<'a> {
    /// `margin_s`: how long around a fault it still touches what it touched (the recovery).
    pub fn new(
        log: &'a [FaultRecord],
        changes: &'a [Change],
        observations: &[Observation],
        writes: &'a ReplicaWrites,
        margin_s: f64,
    ) -> Self {
        RunImpact {
            writes,
            margin_s,
            reloads: reload_latencies(changes, observations),
            reach: Reach::new(log, writes, margin_s),
        }
    }

    /// Each fault's impact, in the order of the log.
    pub fn each_fault(&self) -> Vec<FaultImpact> {
        self.reach
            .faults()
            .map(|(f, touched)| {
                let during = touched.as_ref().map(|_| self.untouched_latencies(f));
                FaultImpact {
                    kind: f.kind.clone(),
                    target: f.target.clone(),
                    start_s: f.start_s,
                    end_s: f.end_s,
                    untouched_reloads: during.as_ref().map(Vec::len),
                    untouched_p50_ms: during.as_ref().and_then(|d| percentile(d, 50.0)),
                    untouched_p99_ms: during.as_ref().and_then(|d| percentile(d, 99.0)),
                    takeover_s: takeover(f, self.writes),
                }
            })
            .collect()
    }

    /// The faults' impacts pooled by kind (the latencies are recomputed over the pooled reloads).
    pub fn by_kind(&self) -> BTreeMap<String, KindImpact> {
        let mut pooled: BTreeMap<String, (usize, Vec<f64>, Option<f64>)> = BTreeMap::new();
        for (f, touched) in self.reach.faults() {
            let entry = pooled.entry(f.kind.clone()).or_default();
            entry.0 += 1;
            if touched.is_some() {
                entry.1.extend(self.untouched_latencies(f));
            }
            if let Some(s) = takeover(f, self.writes) {
                entry.2 = Some(entry.2.map_or(s, |m: f64| m.max(s)));
            }
        }
        pooled
            .into_iter()
            .map(|(kind, (faults, lat, takeover_max_s))| {
                let impact = KindImpact {
                    faults,
                    untouched_reloads: lat.len(),
                    untouched_p50_ms: percentile(&lat, 50.0),
                    untouched_p99_ms: percentile(&lat, 99.0),
                    takeover_max_s,
                };
                (kind, impact)
            })
            .collect()
    }
}

/// How long before a change a fault still counts as holding up its reload (its relists, its
/// takeover, the catch-up after it).
pub const AFTERMATH_S: f64 = 5.0;

/// The reloads slower than `threshold_ms` and the fault kinds that touched their namespace
/// from [`AFTERMATH_S`] before the change until the reload was seen: which faults hold the tail.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SlowReloads {
    pub threshold_ms: f64,
    pub reloads: usize,
    /// Per fault kind, the slow reloads it touched (one touched by two kinds counts for both).
    pub touched_by: BTreeMap<String, usize>,
    /// Per fault kind, the slow reloads it alone touched.
    pub only_by: BTreeMap<String, usize>,
    /// Slow reloads no fault touched: their time went elsewhere (the machine, the design).
    pub untouched: usize,
    /// The slowest of them (at most [`SLOWEST_LISTED`]), to follow in the controllers' logs.
    pub slowest: Vec<SlowReload>,
}

/// One slow reload: which workload, when its change was made (run clock), how long it took,
/// and the fault kinds that touched it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SlowReload {
    pub workload: String,
    pub t_sent: f64,
    pub latency_ms: f64,
    pub touched_by: Vec<String>,
}

pub const SLOWEST_LISTED: usize = 20;

impl RunImpact<'_> {
    /// [`SlowReloads`] for each threshold.
    pub fn slow_reloads(&self, thresholds_ms: &[f64]) -> Vec<SlowReloads> {
        // Each reload's kinds once, over the lowest threshold; the higher ones take their share.
        let lowest = thresholds_ms.iter().copied().fold(f64::INFINITY, f64::min);
        let mut slow: Vec<(&Reload<'_>, BTreeSet<&str>)> = self
            .reloads
            .iter()
            .filter(|r| r.latency_ms > lowest)
            .map(|r| (r, self.reach.kinds_touching(r)))
            .collect();
        slow.sort_by(|(a, _), (b, _)| b.latency_ms.total_cmp(&a.latency_ms));
        thresholds_ms
            .iter()
            .map(|&threshold_ms| {
                let mut out = SlowReloads {
                    threshold_ms,
                    reloads: 0,
                    touched_by: BTreeMap::new(),
                    only_by: BTreeMap::new(),
                    untouched: 0,
                    slowest: Vec::new(),
                };
                for (r, kinds) in slow.iter().filter(|(r, _)| r.latency_ms > threshold_ms) {
                    out.reloads += 1;
                    if out.slowest.len() < SLOWEST_LISTED {
                        out.slowest.push(SlowReload {
                            workload: r.workload.to_string(),
                            t_sent: r.t_sent,
                            latency_ms: r.latency_ms,
                            touched_by: kinds.iter().map(|k| k.to_string()).collect(),
                        });
                    }
                    for kind in kinds {
                        *out.touched_by.entry(kind.to_string()).or_default() += 1;
                    }
                    match (kinds.len(), kinds.first()) {
                        (0, _) => out.untouched += 1,
                        (1, Some(only)) => *out.only_by.entry(only.to_string()).or_default() += 1,
                        _ => {}
                    }
                }
                out
            })
            .collect()
    }
}

/// Every reload, split by whether a fault touched it (as [`SlowReloads`] reads it): what share
/// of the run the faults reached, and the latency of each part. Once more than a tenth of the
/// reloads were touched, the overall p90 is a touched reload's whatever the design does with
/// the others; the untouched part's p90 is then the one to hold against the control run's.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TouchSplit {
    pub touched: Latencies,
    pub untouched: Latencies,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Latencies {
    pub reloads: usize,
    pub p50_ms: Option<f64>,
    pub p90_ms: Option<f64>,
    pub p99_ms: Option<f64>,
}

impl Latencies {
    fn of(values: &[f64]) -> Self {
        Latencies {
            reloads: values.len(),
            p50_ms: percentile(values, 50.0),
            p90_ms: percentile(values, 90.0),
            p99_ms: percentile(values, 99.0),
        }
    }
}

impl RunImpact<'_> {
    /// [`TouchSplit`] of the run's reloads.
    pub fn touch_split(&self) -> TouchSplit {
        let mut touched = Vec::new();
        let mut untouched = Vec::new();
        for r in &self.reloads {
            match self.reach.touches(r) {
                true => touched.push(r.latency_ms),
                false => untouched.push(r.latency_ms),
            }
        }
        TouchSplit {
            touched: Latencies::of(&touched),
            untouched: Latencies::of(&untouched),
        }
    }

    /// Latencies of the reloads of changes made during `f` in namespaces it did not touch
    /// (for a fault that touched some, not all).
    fn untouched_latencies(&self, f: &FaultRecord) -> Vec<f64> {
        let margin_s = self.margin_s;
        // Every fault in effect at some time of `f`, with what it touched (None: everything).
        let around: Vec<&(&FaultRecord, Option<HashSet<String>>)> = self
            .reach
            .faults()
            .filter(|(g, _)| g.start_s - margin_s <= f.end_s && g.end_s + margin_s >= f.start_s)
            .collect();
        let touched_at = |t: f64, namespace: &str| {
            around.iter().any(|(g, set)| {
                t >= g.start_s - margin_s
                    && t <= g.end_s + margin_s
                    && set.as_ref().is_none_or(|s| s.contains(namespace))
            })
        };
        let during = self
            .reloads
            .iter()
            .filter(|r| r.t_sent >= f.start_s && r.t_sent <= f.end_s)
            .filter(|r| !touched_at(r.t_sent, r.namespace));
        during.map(|r| r.latency_ms).collect()
    }
}

/// Each fault of a run with the namespaces it touched (`None`: every one).
struct Reach<'a>(Vec<(&'a FaultRecord, Option<HashSet<String>>)>);

impl<'a> Reach<'a> {
    fn new(log: &'a [FaultRecord], writes: &ReplicaWrites, margin_s: f64) -> Self {
        Reach(
            log.iter()
                .map(|f| (f, touched(f, writes, margin_s)))
                .collect(),
        )
    }

    /// Each fault, in the order of the log, with what it touched.
    fn faults(&self) -> impl Iterator<Item = &(&'a FaultRecord, Option<HashSet<String>>)> {
        self.0.iter()
    }

    /// The faults that touched `r`'s namespace from [`AFTERMATH_S`] before its change until
    /// it was seen.
    fn touching<'r>(&'r self, r: &'r Reload<'_>) -> impl Iterator<Item = &'a FaultRecord> + 'r {
        let (from, to) = (r.t_sent - AFTERMATH_S, r.t_sent + r.latency_ms / 1000.0);
        self.0
            .iter()
            .filter(move |(f, _)| f.start_s <= to && f.end_s >= from)
            .filter(|(_, set)| set.as_ref().is_none_or(|s| s.contains(r.namespace)))
            .map(|(f, _)| *f)
    }

    fn kinds_touching(&self, r: &Reload<'_>) -> BTreeSet<&'a str> {
        self.touching(r).map(|f| f.kind.as_str()).collect()
    }

    fn touches(&self, r: &Reload<'_>) -> bool {
        self.touching(r).next().is_some()
    }
}

/// A change reaching one workload, seen directly (not folded into a later change).
struct Reload<'a> {
    workload: &'a str,
    namespace: &'a str,
    t_sent: f64,
    latency_ms: f64,
}

fn reload_latencies<'a>(changes: &'a [Change], observations: &[Observation]) -> Vec<Reload<'a>> {
    let mut first: HashMap<(&str, &str), f64> = HashMap::new();
    for o in observations {
        let t = first
            .entry((o.workload.as_str(), o.hash.as_str()))
            .or_insert(o.t);
        *t = t.min(o.t);
    }
    let mut out = Vec::new();
    for c in changes.iter().filter(|c| c.error.is_none()) {
        let ack = c.t_ack.unwrap_or(c.t_sent);
        for w in &c.expected {
            if let Some(&t) = first.get(&(w.as_str(), c.hash.as_str()))
                && t >= c.t_sent
            {
                let namespace = w.split_once('/').map_or(w.as_str(), |(ns, _)| ns);
                let latency_ms = (t - ack).max(0.0) * 1000.0;
                out.push(Reload {
                    workload: w,
                    namespace,
                    t_sent: c.t_sent,
                    latency_ms,
                });
            }
        }
    }
    out
}

/// The replica index of a target named `r<i>`.
fn replica(target: &str) -> Option<usize> {
    target.strip_prefix('r')?.parse().ok()
}

/// The namespaces `f` touched; `None` when it touched all of them.
fn touched(f: &FaultRecord, writes: &ReplicaWrites, margin_s: f64) -> Option<HashSet<String>> {
    if f.kind == "webhook" {
        return Some(HashSet::from([f.target.clone()]));
    }
    let i = replica(&f.target)?;
    let (from, to) = (f.start_s - margin_s, f.end_s + margin_s);
    let own = writes.get(i).map(Vec::as_slice).unwrap_or_default();
    Some(
        own.iter()
            .filter(|(t, _)| *t >= from && *t <= to)
            .map(|(_, ns)| ns.clone())
            .collect(),
    )
}

fn takeover(f: &FaultRecord, writes: &ReplicaWrites) -> Option<f64> {
    if !matches!(f.kind.as_str(), "kill" | "stop" | "skew") {
        return None;
    }
    let i = replica(&f.target)?;
    let owned: HashSet<&str> = writes
        .get(i)?
        .iter()
        .filter(|(t, _)| *t >= f.start_s - OWNED_LOOKBACK_S && *t < f.start_s)
        .map(|(_, ns)| ns.as_str())
        .collect();
    let first_in_owned = |w: &Vec<(f64, String)>| {
        w.iter()
            .filter(|(t, ns)| *t >= f.start_s && owned.contains(ns.as_str()))
            .map(|(t, _)| *t)
            .min_by(f64::total_cmp)
    };
    let own_return = first_in_owned(&writes[i]).unwrap_or(f64::INFINITY);
    let other = writes
        .iter()
        .enumerate()
        .filter(|(j, _)| *j != i)
        .filter_map(|(_, w)| first_in_owned(w))
        .min_by(f64::total_cmp)?;
    // Back before anyone else wrote there: it kept its namespaces, nothing was taken over.
    (other < own_return).then_some(other - f.start_s)
}

/// Nearest-rank percentile of unsorted values.
fn percentile(values: &[f64], p: f64) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

#[cfg(test)]
mod tests;
