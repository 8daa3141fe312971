//! The fault schedule of a chaos run, drawn from a seed: pure, so a seed printed by a failing
//! run replays the same faults at the same times against the same targets.
//!
//! Faults that take a replica away (SIGKILL, SIGSTOP, the restarts of a clock skew, scaling)
//! share one lane and never overlap, and scaling never goes below 2 replicas, so at least one
//! replica is always running. Control-plane faults share a lane of their own; the proxy faults
//! have one lane per replica and the webhook one lane, so each kind of impairment is alone on
//! its target and the checker can tell which fault was in effect.

use serde::{Deserialize, Serialize};

use crate::rng::Rng;

/// One fault and its target.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Fault {
    /// SIGKILL, started again after `down_s`.
    Kill { replica: usize, down_s: f64 },
    /// SIGSTOP for `for_s` (longer than the lease), then SIGCONT.
    Stop { replica: usize, for_s: f64 },
    /// Restarted under `faketime` `offset_s` off, and after `for_s` restarted with the true clock.
    Skew {
        replica: usize,
        offset_s: i64,
        for_s: f64,
    },
    /// Replicas started or stopped (SIGTERM, the graceful hand-over) until `to` run.
    Scale { to: usize },
    /// The replica's proxy ends every open watch stream.
    CutWatch { replica: usize },
    /// For `for_s`, `share_pct` % of the replica's writes are answered `code` (500 or 429).
    WriteErrors {
        replica: usize,
        code: u16,
        share_pct: u8,
        for_s: f64,
    },
    /// For `for_s`, every response to the replica is delayed by `ms`.
    Latency { replica: usize, ms: u64, for_s: f64 },
    /// The replica's watches are cut, and for `for_s` the first resume of each resource is
    /// answered `410 Gone` (the replica has to list again).
    GoneOnResume { replica: usize, for_s: f64 },
    /// For `for_s`, an admission webhook that cannot be reached refuses workload writes in the
    /// `namespace`-th namespace of the population.
    Webhook { namespace: usize, for_s: f64 },
    /// kube-apiserver restarted (SIGTERM, the same command line again).
    ApiRestart,
    /// etcd compacted to its current revision and every replica's watches cut, so resumes
    /// from before the compaction fail and the replicas list again.
    Compaction,
}

/// The kinds, in the order the bag is filled (the names of the result file).
pub const KINDS: [&str; 11] = [
    "kill",
    "stop",
    "skew",
    "scale",
    "cut-watch",
    "write-errors",
    "latency",
    "gone-on-resume",
    "webhook",
    "api-restart",
    "compaction",
];

impl Fault {
    pub fn kind(&self) -> &'static str {
        match self {
            Fault::Kill { .. } => "kill",
            Fault::Stop { .. } => "stop",
            Fault::Skew { .. } => "skew",
            Fault::Scale { .. } => "scale",
            Fault::CutWatch { .. } => "cut-watch",
            Fault::WriteErrors { .. } => "write-errors",
            Fault::Latency { .. } => "latency",
            Fault::GoneOnResume { .. } => "gone-on-resume",
            Fault::Webhook { .. } => "webhook",
            Fault::ApiRestart => "api-restart",
            Fault::Compaction => "compaction",
        }
    }

    /// How long the fault is in effect after it starts (0: an instant).
    pub fn lasts_s(&self) -> f64 {
        match *self {
            Fault::Kill { down_s, .. } => down_s,
            Fault::Stop { for_s, .. }
            | Fault::Skew { for_s, .. }
            | Fault::WriteErrors { for_s, .. }
            | Fault::Latency { for_s, .. }
            | Fault::GoneOnResume { for_s, .. }
            | Fault::Webhook { for_s, .. } => for_s,
            Fault::Scale { .. }
            | Fault::CutWatch { .. }
            | Fault::ApiRestart
            | Fault::Compaction => 0.0,
        }
    }

    /// The replica it is aimed at, if one.
    pub fn replica(&self) -> Option<usize> {
        match *self {
            Fault::Kill { replica, .. }
            | Fault::Stop { replica, .. }
            | Fault::Skew { replica, .. }
            | Fault::CutWatch { replica }
            | Fault::WriteErrors { replica, .. }
            | Fault::Latency { replica, .. }
            | Fault::GoneOnResume { replica, .. } => Some(replica),
            _ => None,
        }
    }

    pub fn control_plane(&self) -> bool {
        matches!(self, Fault::ApiRestart | Fault::Compaction)
    }

    /// Takes a replica away (SIGKILL, SIGSTOP, a restart): one at a time.
    pub fn disrupts_replicas(&self) -> bool {
        matches!(
            self,
            Fault::Kill { .. } | Fault::Stop { .. } | Fault::Skew { .. } | Fault::Scale { .. }
        )
    }
}

/// A fault at its time (seconds after the first change).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Scheduled {
    pub at_s: f64,
    #[serde(flatten)]
    pub fault: Fault,
}

/// A plan written by hand (`--fault-plan`): the faults of a JSON list, in time order.
pub fn parse_plan(json: &str) -> Result<Vec<Scheduled>, serde_json::Error> {
    let mut plan: Vec<Scheduled> = serde_json::from_str(json)?;
    plan.sort_by(|a, b| a.at_s.total_cmp(&b.at_s));
    Ok(plan)
}

/// What the schedule is drawn for.
#[derive(Debug, Clone)]
pub struct Params {
    /// The change phase: every fault starts and ends within it.
    pub duration_s: f64,
    /// Mean time between two fault starts.
    pub mean_gap_s: f64,
    /// The replicas' lease duration: a SIGSTOP lasts longer.
    pub lease_s: f64,
    /// Replicas at the start (the scaling goes initial -> initial+2 -> 2 -> initial).
    pub initial_replicas: usize,
    /// Namespaces of the population (the webhook's targets).
    pub namespaces: usize,
    /// Draw kube-apiserver restarts and etcd compactions (only against a control plane of the
    /// run's own).
    pub control_plane: bool,
    /// After a replica comes back or the API server restarts: time to be ready and to hand
    /// namespaces over, during which its lane stays busy.
    pub recovery_s: f64,
    /// Nothing is in effect in the last this many seconds (the system settles before the end).
    pub tail_s: f64,
}

/// Busy intervals of one lane.
#[derive(Default)]
struct Lane(Vec<(f64, f64)>);

impl Lane {
    /// The earliest start at or after `from` for `len` seconds that overlaps nothing.
    fn earliest(&self, from: f64, len: f64) -> f64 {
        let mut busy = self.0.clone();
        busy.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut start = from;
        for (b0, b1) in busy {
            if start + len <= b0 {
                break;
            }
            if b1 > start {
                start = b1;
            }
        }
        start
    }

    fn take(&mut self, from: f64, len: f64) {
        self.0.push((from, from + len));
    }
}

fn uniform(rng: &mut Rng, lo: f64, hi: f64) -> f64 {
    lo + (hi - lo) * (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64
}

/// The lanes of a schedule being drawn.
struct Lanes {
    replicas: Lane,
    plane: Lane,
    webhook: Lane,
    proxies: Vec<Lane>,
    /// (time, replicas running from then on).
    scale: Vec<(f64, usize)>,
}

impl Lanes {
    fn running_at(&self, t: f64, initial: usize) -> usize {
        running_at(&self.scale, t, initial)
    }
}

/// Replicas running at `t` after the scaling steps `scale` (time, replicas from then on).
fn running_at(scale: &[(f64, usize)], t: f64, initial: usize) -> usize {
    // In time order: the last step at or before `t` holds.
    scale
        .iter()
        .rev()
        .find(|(at, _)| *at <= t)
        .map_or(initial, |&(_, n)| n)
}

/// The seeded schedule, sorted by time.
pub fn schedule(seed: u64, p: &Params) -> Vec<Scheduled> {
    let mut rng = Rng::new(seed ^ 0xC4A0_5EED);
    let max = p.initial_replicas + 2;
    let mut lanes = Lanes {
        replicas: Lane::default(),
        plane: Lane::default(),
        webhook: Lane::default(),
        proxies: (0..max).map(|_| Lane::default()).collect(),
        scale: Vec::new(),
    };
    let mut out = scaling(&mut rng, p, &mut lanes);
    let end = p.duration_s - p.tail_s;
    let mut bag: Vec<&str> = Vec::new();
    let mut t = uniform(&mut rng, 0.2, 0.8) * p.mean_gap_s;
    while t < end {
        if bag.is_empty() {
            bag = KINDS
                .iter()
                .copied()
                .filter(|k| *k != "scale")
                .filter(|k| p.control_plane || !matches!(*k, "api-restart" | "compaction"))
                .collect();
        }
        let kind = bag.swap_remove(rng.below(bag.len()));
        if let Some(s) = place(kind, t, &mut rng, p, &mut lanes)
            && s.at_s + s.fault.lasts_s() <= end
        {
            out.push(s);
        }
        t += uniform(&mut rng, 0.5, 1.5) * p.mean_gap_s;
    }
    out.sort_by(|a, b| a.at_s.total_cmp(&b.at_s));
    out
}

/// initial -> initial+2 -> 2 -> initial, around a quarter, a half and three quarters of the run.
fn scaling(rng: &mut Rng, p: &Params, lanes: &mut Lanes) -> Vec<Scheduled> {
    let steps = [p.initial_replicas + 2, 2, p.initial_replicas];
    let mut out = Vec::new();
    for (i, to) in steps.into_iter().enumerate() {
        let at = p.duration_s * (0.25 * (i + 1) as f64 + uniform(rng, -0.05, 0.05));
        if at + p.recovery_s > p.duration_s - p.tail_s {
            continue;
        }
        lanes.replicas.take(at, p.recovery_s);
        lanes.scale.push((at, to));
        out.push(Scheduled {
            at_s: at,
            fault: Fault::Scale { to },
        });
    }
    out
}

/// `kind` at the earliest time from `t` its lane allows, with its target and parameters.
fn place(kind: &str, t: f64, rng: &mut Rng, p: &Params, lanes: &mut Lanes) -> Option<Scheduled> {
    let fault = draw(kind, rng, p, lanes.running_at(t, p.initial_replicas))?;
    let scale = std::mem::take(&mut lanes.scale);
    let lane = if fault.disrupts_replicas() {
        &mut lanes.replicas
    } else if fault.control_plane() {
        &mut lanes.plane
    } else if let Some(r) = fault.replica() {
        &mut lanes.proxies[r]
    } else {
        &mut lanes.webhook
    };
    // Replica faults keep their lane until the replica is back (and a skew's second restart);
    // the control plane until the API server is ready again.
    let hold = match fault {
        Fault::Stop { .. } | Fault::Kill { .. } | Fault::Skew { .. } => {
            fault.lasts_s() + p.recovery_s
        }
        Fault::ApiRestart | Fault::Compaction => p.recovery_s,
        _ => fault.lasts_s().max(1.0),
    };
    let at = lane.earliest(t, hold);
    // The target was drawn among the replicas running at `t`: it must still run at `at`.
    let gone = fault
        .replica()
        .is_some_and(|r| r >= running_at(&scale, at, p.initial_replicas));
    if !gone {
        lane.take(at, hold);
    }
    lanes.scale = scale;
    (!gone).then_some(Scheduled { at_s: at, fault })
}

/// The fault `kind` against one of `running` replicas (or the population, the control plane).
fn draw(kind: &str, rng: &mut Rng, p: &Params, running: usize) -> Option<Fault> {
    let replica = rng.below(running);
    Some(match kind {
        "kill" => Fault::Kill {
            replica,
            down_s: uniform(rng, 1.0, 10.0),
        },
        "stop" => Fault::Stop {
            replica,
            for_s: p.lease_s + uniform(rng, 1.0, 8.0),
        },
        "skew" => Fault::Skew {
            replica,
            offset_s: if rng.below(2) == 0 { 30 } else { -30 },
            for_s: uniform(rng, 30.0, 90.0),
        },
        "cut-watch" => Fault::CutWatch { replica },
        "write-errors" => Fault::WriteErrors {
            replica,
            code: if rng.below(2) == 0 { 500 } else { 429 },
            share_pct: 30,
            for_s: uniform(rng, 10.0, 40.0),
        },
        "latency" => Fault::Latency {
            replica,
            ms: 200 + rng.below(1800) as u64,
            for_s: uniform(rng, 10.0, 40.0),
        },
        "gone-on-resume" => Fault::GoneOnResume {
            replica,
            for_s: uniform(rng, 5.0, 20.0),
        },
        "webhook" => Fault::Webhook {
            namespace: rng.below(p.namespaces.max(1)),
            for_s: uniform(rng, 15.0, 45.0),
        },
        "api-restart" => Fault::ApiRestart,
        "compaction" => Fault::Compaction,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(duration_s: f64, control_plane: bool) -> Params {
        Params {
            duration_s,
            mean_gap_s: 20.0,
            lease_s: 4.0,
            initial_replicas: 3,
            namespaces: 1000,
            control_plane,
            recovery_s: 20.0,
            tail_s: 30.0,
        }
    }

    #[test]
    fn a_plan_is_read_in_time_order_and_names_its_faults_as_the_draw_does() {
        let plan = parse_plan(
            r#"[{"at_s": 80, "kind": "kill", "replica": 1, "down_s": 5},
                {"at_s": 30, "kind": "stop", "replica": 0, "for_s": 8.6}]"#,
        )
        .expect("a valid plan");
        assert_eq!(
            plan,
            vec![
                Scheduled {
                    at_s: 30.0,
                    fault: Fault::Stop {
                        replica: 0,
                        for_s: 8.6
                    }
                },
                Scheduled {
                    at_s: 80.0,
                    fault: Fault::Kill {
                        replica: 1,
                        down_s: 5.0
                    }
                },
            ]
        );
        // What the draw writes, a plan reads back (times to the last bit aside).
        let drawn = schedule(42, &params(1200.0, true));
        let json = serde_json::to_string(&drawn).expect("serializable");
        let read = parse_plan(&json).expect("round trip");
        assert_eq!(read.len(), drawn.len());
        for (r, d) in read.iter().zip(&drawn) {
            assert_eq!(r.fault.kind(), d.fault.kind());
            assert_eq!(r.fault.replica(), d.fault.replica());
            assert!((r.at_s - d.at_s).abs() < 1e-9, "{r:?} vs {d:?}");
        }
        assert!(parse_plan(r#"[{"at_s": 1, "kind": "meteor"}]"#).is_err());
    }

    #[test]
    fn the_same_seed_draws_the_same_schedule() {
        let p = params(1200.0, true);
        assert_eq!(schedule(42, &p), schedule(42, &p));
        assert_ne!(schedule(42, &p), schedule(43, &p));
    }

    #[test]
    fn every_kind_appears_over_a_long_run() {
        for seed in 1..=20 {
            let s = schedule(seed, &params(1200.0, true));
            for kind in KINDS {
                assert!(
                    s.iter().any(|f| f.fault.kind() == kind),
                    "seed {seed}: no {kind} in {s:#?}"
                );
            }
        }
    }

    #[test]
    fn control_plane_faults_only_when_asked_for() {
        for seed in 1..=20 {
            let s = schedule(seed, &params(1200.0, false));
            assert!(s.iter().all(|f| !f.fault.control_plane()), "seed {seed}");
            assert!(s.iter().any(|f| f.fault.kind() == "webhook"), "seed {seed}");
        }
    }

    #[test]
    fn every_fault_starts_and_ends_within_the_run() {
        for seed in 1..=50 {
            let p = params(300.0, true);
            for f in schedule(seed, &p) {
                assert!(f.at_s >= 0.0, "seed {seed}: {f:?}");
                assert!(
                    f.at_s + f.fault.lasts_s() <= p.duration_s - p.tail_s,
                    "{f:?}"
                );
            }
        }
    }

    #[test]
    fn the_scaling_goes_3_5_2_3() {
        let s = schedule(7, &params(1200.0, false));
        let steps: Vec<usize> = s
            .iter()
            .filter_map(|f| match f.fault {
                Fault::Scale { to } => Some(to),
                _ => None,
            })
            .collect();
        assert_eq!(steps, [5, 2, 3]);
    }

    /// Replicas running and not taken away by a fault, at time `t`.
    fn alive_at(s: &[Scheduled], t: f64, recovery_s: f64) -> (usize, Vec<usize>) {
        let mut running = 3;
        for f in s.iter().filter(|f| f.at_s <= t) {
            if let Fault::Scale { to } = f.fault {
                running = to;
            }
        }
        let mut away = Vec::new();
        for f in s {
            let (a, len) = (f.at_s, f.fault.lasts_s());
            let gone = match f.fault {
                Fault::Kill { replica, .. } if t >= a && t < a + len + recovery_s => Some(replica),
                Fault::Stop { replica, .. } if t >= a && t < a + len => Some(replica),
                // Down while restarting, at the start and at the end of the skew.
                Fault::Skew { replica, .. }
                    if (t >= a && t < a + recovery_s)
                        || (t >= a + len && t < a + len + recovery_s) =>
                {
                    Some(replica)
                }
                _ => None,
            };
            away.extend(gone);
        }
        (running, away)
    }

    #[test]
    fn at_least_one_replica_is_always_alive_and_targets_run() {
        for seed in 1..=50 {
            let p = params(1200.0, true);
            let s = schedule(seed, &p);
            let mut t = 0.0;
            while t < p.duration_s {
                let (running, away) = alive_at(&s, t, p.recovery_s);
                assert!(away.len() <= 1, "seed {seed} t {t}: {away:?} away at once");
                assert!(
                    running >= 2 && running - away.len() >= 1,
                    "seed {seed} t {t}"
                );
                t += 0.5;
            }
            for f in &s {
                if let Some(r) = f.fault.replica() {
                    let (running, _) = alive_at(&s, f.at_s, p.recovery_s);
                    assert!(r < running, "seed {seed}: {f:?} aims at a stopped replica");
                }
            }
        }
    }

    #[test]
    fn a_stop_outlasts_the_lease_and_a_skew_is_30_s() {
        let p = params(1200.0, false);
        for seed in 1..=20 {
            for f in schedule(seed, &p) {
                match f.fault {
                    Fault::Stop { for_s, .. } => assert!(for_s > p.lease_s),
                    Fault::Skew { offset_s, .. } => assert_eq!(offset_s.abs(), 30),
                    _ => {}
                }
            }
        }
    }

    #[test]
    fn a_lane_finds_the_first_gap_that_fits() {
        let mut lane = Lane::default();
        lane.take(10.0, 5.0);
        lane.take(20.0, 5.0);
        assert_eq!(lane.earliest(0.0, 5.0), 0.0);
        assert_eq!(lane.earliest(0.0, 11.0), 25.0);
        assert_eq!(lane.earliest(12.0, 5.0), 15.0);
        assert_eq!(lane.earliest(16.0, 5.0), 25.0);
    }
}
