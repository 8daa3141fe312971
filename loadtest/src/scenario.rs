//! Scenarios and scales: what population a run creates, which controller flags it needs, and
//! how it drives config changes.

use std::time::Duration;

use clap::ValueEnum;
use serde::Serialize;

use crate::objects::TENANT_LABEL;

/// How often the controller reads a wave's health in `waves` (`--wave-poll-interval`).
pub const WAVE_POLL: &str = "500ms";

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Scenario {
    /// Changes at a fixed rate spread over configs (the latency figure).
    Steady,
    /// Many configs changed at once.
    Burst,
    /// One ConfigMap used by 500 workloads, changed a few times.
    Fanout,
    /// Label/annotation-only updates of configs and workloads: zero reloads expected.
    Noop,
    /// 1 MiB Secrets.
    Large,
    /// Many workloads changed at once with a low --max-patches-per-second.
    Ratelimit,
    /// The controller is killed (SIGKILL) mid-run and restarted: no change lost.
    Restart,
    /// `steady` with --reload-strategy=annotations.
    Annotations,
    /// `steady` against N controller replicas with --sharding (--replicas N).
    Sharded,
    /// `steady` while extra workloads are created and deleted continuously.
    Churn,
    /// `steady` with workloads referencing configs through env valueFrom, init container
    /// volumes and projected volumes.
    References,
    /// `steady` with workloads spread over Deployments, StatefulSets, DaemonSets and CronJobs.
    Mixed,
    /// `steady` over many namespaces with one workload each (high cardinality: 10k namespaces
    /// at medium and large).
    Cardinality,
    /// Deployments with a pause period, each changed several times within one period: one
    /// pause, one rollout, resumed when the period ends.
    Pause,
    /// `steady` in namespaces that also hold what real ones do: Helm release history, a TLS
    /// Secret, ConfigMaps nobody references, kube-root-ca.crt.
    Realistic,
    /// One tenant's ConfigMap used by many Deployments changes once while 20 quiet tenants
    /// change one ConfigMap per second each: quiet reloads do not wait for the fan-out.
    NoisyNeighbour,
    /// Writes in one namespace fail (an unreachable admission webhook) while 20 quiet tenants
    /// change configs; once it is removed every poisoned workload is reloaded once.
    Poisoned,
    /// A few Secrets, each used by several Deployments, rewritten every 2 s for 2 minutes
    /// against the churn breaker (--churn-limit M): each workload rolls at most M times, and
    /// once more to the final content after the Secret went quiet.
    Flapping,
    /// One ConfigMap used by `fanout_width` Deployments, the controller run with --waves: each
    /// change rolls in health-gated waves; the first is superseded mid-sequence.
    Waves,
    /// `steady` with every workload a Knative Service, a custom kind the controller is told to
    /// roll with `--custom-kind` (kube-reloader only: Reloader rolls no custom kinds).
    CustomKind,
    /// 3+ replicas under a seeded random fault schedule for `--duration` (not part of `all`).
    Chaos,
    /// Every scenario above but `chaos`, one after the other.
    All,
}

impl Scenario {
    /// What `all` runs.
    pub const EACH: [Scenario; 20] = [
        Scenario::Steady,
        Scenario::Burst,
        Scenario::Fanout,
        Scenario::Noop,
        Scenario::Large,
        Scenario::Ratelimit,
        Scenario::Restart,
        Scenario::Annotations,
        Scenario::Sharded,
        Scenario::Churn,
        Scenario::References,
        Scenario::Mixed,
        Scenario::Cardinality,
        Scenario::Pause,
        Scenario::Realistic,
        Scenario::NoisyNeighbour,
        Scenario::Poisoned,
        Scenario::Flapping,
        Scenario::Waves,
        Scenario::CustomKind,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Scenario::Steady => "steady",
            Scenario::Burst => "burst",
            Scenario::Fanout => "fanout",
            Scenario::Noop => "noop",
            Scenario::Large => "large",
            Scenario::Ratelimit => "ratelimit",
            Scenario::Restart => "restart",
            Scenario::Annotations => "annotations",
            Scenario::Sharded => "sharded",
            Scenario::Churn => "churn",
            Scenario::References => "references",
            Scenario::Mixed => "mixed",
            Scenario::Cardinality => "cardinality",
            Scenario::Pause => "pause",
            Scenario::Realistic => "realistic",
            Scenario::NoisyNeighbour => "noisy-neighbour",
            Scenario::Poisoned => "poisoned",
            Scenario::Flapping => "flapping",
            Scenario::Waves => "waves",
            Scenario::CustomKind => "custom-kind",
            Scenario::Chaos => "chaos",
            Scenario::All => "all",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Scale {
    /// About 600 objects; correctness only, each scenario well under 3 minutes.
    Small,
    /// 10k workloads, 20k configs, 1000 namespaces.
    Medium,
    /// 100k workloads, 200k configs, 10k namespaces (run by hand).
    Large,
}

impl Scale {
    pub fn name(self) -> &'static str {
        match self {
            Scale::Small => "small",
            Scale::Medium => "medium",
            Scale::Large => "large",
        }
    }
}

/// The image of the running share's pods: kubeadm's pause image, which a kubeadm node (kind's
/// node image of hack/kind-node.sh) has preloaded, so nothing is pulled.
pub const DEFAULT_RUNNING_IMAGE: &str = "registry.k8s.io/pause:3.10.2";

/// The numbers of one run.
#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    pub namespaces: usize,
    /// Deployments of the standard population (each with its own ConfigMap and Secret).
    pub workloads: usize,
    /// Changes driven (steady, restart, annotations, burst, ratelimit, noop: updates; large).
    pub changes: usize,
    /// Changes per second (steady, restart, annotations, large, noop).
    pub rate: f64,
    pub fanout_width: usize,
    /// Deployments given a pause period, the period, and changes to each within it (pause).
    pub pause_workloads: usize,
    pub pause_period_s: u32,
    pub pause_changes_each: usize,
    pub fanout_changes: usize,
    pub large_secrets: usize,
    pub large_secret_bytes: usize,
    /// --max-patches-per-second and --patch-burst given to the controller (ratelimit).
    pub limit_rate: u32,
    pub limit_burst: u32,
    /// The controller is killed after this many changes (restart) ...
    pub kill_after: usize,
    /// ... and stays down this long.
    pub down_s: f64,
    /// Controller replicas (sharded; 1 otherwise).
    pub replicas: usize,
    /// Extra workloads created per second, each deleted `churn_lifetime_s` later (churn).
    pub churn_rate: f64,
    pub churn_lifetime_s: f64,
    /// Objects in every namespace that nothing uses (realistic).
    pub background: crate::objects::Background,
    /// noisy-neighbour / poisoned: quiet tenants (one ConfigMap change per second each), the
    /// noisy tenant's fan-out, the poisoned Deployments and how long they stay poisoned.
    pub quiet_tenants: usize,
    /// Each quiet tenant changes one ConfigMap every this many seconds.
    pub quiet_period_s: f64,
    pub noisy_width: usize,
    pub poisoned_workloads: usize,
    pub poisoned_for_s: f64,
    /// --max-retry-backoff given to the controller (poisoned).
    pub max_backoff_s: f64,
    /// flapping: `flap_secrets` Secrets, each used by `flap_width` Deployments, each rewritten
    /// every `flap_period_s` for `flap_for_s`.
    pub flap_secrets: usize,
    pub flap_width: usize,
    pub flap_period_s: f64,
    pub flap_for_s: f64,
    /// --churn-limit, --churn-window and --churn-quiet given to the controller (flapping; a
    /// limit of 0 runs it without the breaker). Not the workload churn of `churn`.
    pub churn_limit: u32,
    pub churn_window_s: f64,
    pub churn_quiet_s: f64,
    /// Namespaces grouped into tenants by a label, the controller run with --tenant-label.
    pub tenant_groups: bool,
    /// The controller's default --max-patches-per-second and --patch-burst.
    pub default_rate: u32,
    pub default_burst: u32,
    /// Wait for a cluster at rest (kube-controller-manager done, writes < 20/s) before starting
    /// the controller: medium and large, where start-up is measured; small checks correctness.
    pub wait_for_rest: bool,
    /// Wait after /ready before the first change.
    pub warmup_s: f64,
    /// Wait after the last expected reload, to catch late duplicates and unwanted reloads.
    pub settle_s: f64,
    pub ready_timeout_s: f64,
    /// Share of the Deployments given one real replica of `running_image` on real nodes
    /// (`--running-share`, `--running-image`; 0: every workload has `replicas: 0`).
    pub running_share: f64,
    pub running_image: String,
    /// Waiting for the expected reloads gives up after this plus 0.1 s per expected reload.
    pub wait_base_s: f64,
}

impl Plan {
    pub fn new(scenario: Scenario, scale: Scale) -> Self {
        let mut p = Self::base(scale);
        p.for_scenario(scenario, scale);
        p.kill_after = p.changes / 3;
        p
    }

    /// The scale's figures, before a scenario changes some.
    fn base(scale: Scale) -> Self {
        let (namespaces, workloads) = match scale {
            Scale::Small => (10, 200),
            Scale::Medium => (1_000, 10_000),
            Scale::Large => (10_000, 100_000),
        };
        let big = scale != Scale::Small;
        Plan {
            namespaces,
            workloads,
            changes: if big { 600 } else { 50 },
            // Small runs in CI: fast enough that every scenario fits in a few minutes.
            rate: if big { 10.0 } else { 25.0 },
            // 500 (the reference's fan-out) at medium and large; 100 keeps small under 3 min.
            fanout_width: if big { 500 } else { 100 },
            pause_workloads: if big { 200 } else { 20 },
            pause_period_s: if big { 8 } else { 5 },
            pause_changes_each: 3,
            fanout_changes: if big { 3 } else { 1 },
            large_secrets: if big { 50 } else { 10 },
            large_secret_bytes: 1 << 20,
            limit_rate: 10,
            limit_burst: 10,
            kill_after: 0,
            down_s: if big { 10.0 } else { 2.0 },
            replicas: 1,
            churn_rate: 5.0,
            churn_lifetime_s: 2.0,
            background: Default::default(),
            quiet_tenants: 20,
            // Small runs in CI on 2 shared cores, where the API server takes ~15 writes/s:
            // 20 quiet changes/s alone would exceed it.
            quiet_period_s: if big { 1.0 } else { 5.0 },
            noisy_width: if big { 10_000 } else { 500 },
            poisoned_workloads: 100,
            poisoned_for_s: if big { 60.0 } else { 10.0 },
            max_backoff_s: if big { 30.0 } else { 5.0 },
            // 2 Secrets x 5 Deployments at small; without the breaker every rewrite is a
            // rollout of each, which the shared 2 cores (and kube-controller-manager) must absorb.
            flap_secrets: match scale {
                Scale::Small => 2,
                Scale::Medium => 5,
                Scale::Large => 10,
            },
            flap_width: match scale {
                Scale::Small => 5,
                Scale::Medium => 10,
                Scale::Large => 20,
            },
            flap_period_s: 2.0,
            // The 2 minutes, but 20 s at small: `make test` runs every scenario.
            flap_for_s: if big { 120.0 } else { 20.0 },
            churn_limit: 3,
            churn_window_s: 60.0,
            churn_quiet_s: if big { 10.0 } else { 5.0 },
            tenant_groups: false,
            default_rate: 50,
            default_burst: 100,
            wait_for_rest: big,
            warmup_s: if big { 5.0 } else { 0.5 },
            settle_s: if big { 10.0 } else { 1.5 },
            ready_timeout_s: match scale {
                Scale::Small => 60.0,
                Scale::Medium => 600.0,
                Scale::Large => 1800.0,
            },
            wait_base_s: if big { 120.0 } else { 30.0 },
            running_share: 0.0,
            running_image: DEFAULT_RUNNING_IMAGE.into(),
        }
    }

    /// What `scenario` runs differently from the scale's figures.
    fn for_scenario(&mut self, scenario: Scenario, scale: Scale) {
        let big = scale != Scale::Small;
        let p = self;
        match scenario {
            Scenario::Burst => p.changes = if big { 2_000 } else { 100 },
            Scenario::Noop => {
                p.changes = if big { 1_000 } else { 100 };
                p.rate = 50.0;
            }
            Scenario::Large => {
                p.changes = if big { 100 } else { 10 };
                p.rate = if big { 2.0 } else { 4.0 };
            }
            // 10k configs changed at once at 100 patches/s: about 100 s when the limiter works.
            Scenario::Ratelimit if big => {
                p.changes = 10_000.min(p.workloads);
                p.limit_rate = 100;
                p.limit_burst = 100;
            }
            Scenario::Ratelimit => p.changes = 30,
            Scenario::Cardinality => {
                p.namespaces = match scale {
                    Scale::Small => 200,
                    Scale::Medium | Scale::Large => 10_000,
                };
            }
            Scenario::Restart => p.changes = if big { 600 } else { 50 },
            // Helm keeps 10 revisions by default; 3 releases x 4 revisions x 16 KiB is a modest
            // namespace (192 KiB of release records; 190 MB over the medium scale's 1000).
            Scenario::Realistic => {
                p.background = crate::objects::Background {
                    helm_releases: if big { 3 } else { 1 },
                    helm_revisions: if big { 4 } else { 2 },
                    helm_secret_bytes: if big { 16 << 10 } else { 4 << 10 },
                    tls_secret_bytes: 2048,
                    unreferenced_configmaps: 2,
                };
            }
            // One namespace per quiet tenant at small (the standard 200 workloads over them).
            Scenario::NoisyNeighbour | Scenario::Poisoned if !big => p.namespaces = 20,
            // The steady rate; the changes are the rate times --duration (chaos.rs).
            Scenario::Chaos => p.rate = 30.0,
            _ => {}
        }
    }

    /// Controller flags the scenario needs (substituted for `{scenario_flags}`).
    pub fn controller_flags(&self, scenario: Scenario) -> String {
        match scenario {
            Scenario::Ratelimit => format!(
                "--max-patches-per-second={} --patch-burst={}",
                self.limit_rate, self.limit_burst
            ),
            Scenario::Annotations => "--reload-strategy=annotations".into(),
            Scenario::Sharded => {
                "--sharding --lease-duration=4s --renew-deadline=3s --retry-period=1s".into()
            }
            Scenario::NoisyNeighbour | Scenario::Poisoned => {
                let mut flags = Vec::new();
                if scenario == Scenario::Poisoned {
                    flags.push(format!("--max-retry-backoff={}s", self.max_backoff_s));
                }
                if self.tenant_groups {
                    flags.push(format!("--tenant-label={TENANT_LABEL}"));
                }
                flags.join(" ")
            }
            Scenario::Waves => self.wave_flags(),
            Scenario::CustomKind => crate::custom_kind::CONTROLLER_FLAG.into(),
            Scenario::Flapping if self.churn_limit > 0 => format!(
                "--churn-limit={} --churn-window={}s --churn-quiet={}s",
                self.churn_limit, self.churn_window_s, self.churn_quiet_s
            ),
            _ => String::new(),
        }
    }

    /// The controller's wave policy (`waves`): the fan-out is well above the threshold.
    fn wave_flags(&self) -> String {
        let canary = (self.fanout_width / 20).max(2);
        format!(
            "--waves=threshold={},canary={canary},growth=2,deadline=120s --wave-poll-interval={WAVE_POLL}",
            canary * 2
        )
    }

    /// Namespaces per quiet tenant: 2 with tenant groups.
    pub fn namespaces_per_quiet_tenant(&self) -> usize {
        if self.tenant_groups { 2 } else { 1 }
    }

    /// How many times each flapping Secret is written (at least once).
    pub fn flap_rewrites(&self) -> usize {
        ((self.flap_for_s / self.flap_period_s).round() as usize).max(1)
    }

    pub fn settle(&self) -> Duration {
        Duration::from_secs_f64(self.settle_s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flapping_runs_the_controller_with_the_breaker_unless_the_limit_is_0() {
        let mut p = Plan::new(Scenario::Flapping, Scale::Medium);
        assert_eq!(p.flap_rewrites(), 60, "every 2 s for 2 minutes");
        assert_eq!(
            p.controller_flags(Scenario::Flapping),
            "--churn-limit=3 --churn-window=60s --churn-quiet=10s"
        );
        assert_eq!(p.controller_flags(Scenario::Steady), "");
        p.churn_limit = 0;
        assert_eq!(p.controller_flags(Scenario::Flapping), "");
        p.flap_for_s = 1.0;
        assert_eq!(p.flap_rewrites(), 1, "written at least once");
    }

    #[test]
    fn the_policy_rolls_the_fan_out_in_several_waves() {
        let plan = Plan::new(Scenario::Waves, Scale::Small);
        let flags = plan.controller_flags(Scenario::Waves);
        assert!(flags.starts_with("--waves=threshold="), "{flags}");
        assert!(plan.fanout_width > (plan.fanout_width / 20).max(2) * 2);
    }
}
