//! What a chaos run is, from the command line: replicas, duration, timings, seed; the
//! controller flags and the result name's variant they give.

use crate::args::Args;
use crate::scenario::Scale;

/// The replicas' Lease timings: short, so a SIGSTOP past the lease is a short fault.
const LEASE_FLAGS: &str = "--lease-duration=4s --renew-deadline=3s --retry-period=1s";
pub const LEASE_S: f64 = 4.0;
/// Where the tail is read (`slow_reloads` in the result): 1 s, the floor of the untouched
/// goal, and the lease + 5 s, the overall p99 goal (a killed or stopped replica's namespaces
/// wait for the takeover; nothing else should).
pub const SLOW_RELOAD_THRESHOLDS_MS: [f64; 2] = [1_000.0, (LEASE_S + 5.0) * 1_000.0];
/// The seed of `make chaos` (Makefile `CHAOS_SEED`): its results carry no seed in their name.
const DEFAULT_SEED: u64 = 25;

/// What a chaos run is, from the command line.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Settings {
    pub duration_s: f64,
    pub enable_ha: bool,
    pub control_plane_faults: bool,
    /// `--chaos-control`: the schedule is recorded, not carried out.
    pub control: bool,
    pub replicas: usize,
    pub mean_gap_s: f64,
    pub recovery_s: f64,
    pub tail_s: f64,
    /// `--seed`: with it the run's changes and fault schedule are reproducible.
    pub seed: Option<u64>,
    /// `--fault-plan`: these faults instead of the seed's draw.
    pub fault_plan: Option<std::path::PathBuf>,
}

impl Settings {
    pub fn new(args: &Args) -> Self {
        let big = args.scale != Scale::Small;
        Self {
            duration_s: args.duration.unwrap_or(1200.0),
            enable_ha: args.enable_ha,
            control_plane_faults: args.control_plane_faults,
            control: args.chaos_control,
            replicas: usize::from(args.replicas).max(3),
            mean_gap_s: if big { 20.0 } else { 8.0 },
            // A medium replica lists 20k configs and 10k workloads before it is ready.
            recovery_s: if big { 45.0 } else { 10.0 },
            tail_s: if big { 60.0 } else { 15.0 },
            seed: args.seed,
            fault_plan: args.fault_plan.clone(),
        }
    }

    /// Processes the run may need at once: the scaling goes up by 2.
    pub fn max_replicas(&self) -> usize {
        self.replicas + 2
    }

    pub fn controller_flags(&self) -> String {
        let mode = if self.enable_ha {
            "--enable-ha"
        } else {
            "--sharding"
        };
        format!("{mode} {LEASE_FLAGS}")
    }

    /// `-<N>r`, `-<N>r-ha`, then `-seed<S>` for a seed other than `make chaos`'s default 25,
    /// in the result file names (a campaign runs several seeds on one build).
    pub fn variant(&self) -> String {
        let ha = if self.enable_ha { "-ha" } else { "" };
        let control = if self.control { "-control" } else { "" };
        let seed = match self.seed {
            Some(s) if s != DEFAULT_SEED => format!("-seed{s}"),
            _ => String::new(),
        };
        let plan = match self.fault_plan.as_deref().and_then(|p| p.file_stem()) {
            Some(stem) => format!("-plan-{}", stem.to_string_lossy()),
            None => String::new(),
        };
        format!("-{}r{ha}{control}{seed}{plan}", self.replicas)
    }
}
