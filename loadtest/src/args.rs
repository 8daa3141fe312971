//! The command line.

use std::path::PathBuf;

use clap::Parser;

use crate::scenario::{Scale, Scenario};

const DEFAULT_CMD: &str =
    "{bin} --namespace-selector={selector} --metrics-addr={metrics_addr} {scenario_flags}";

/// Load test for kube-reloader (or another Reloader-compatible controller) against a real API
/// server. Exit code: 0 all correct, 1 a correctness check failed, 2 the run itself failed.
#[derive(Parser, Debug, Clone)]
#[command(name = "kube-reloader-loadtest", version)]
pub struct Args {
    #[arg(long, value_enum, default_value = "steady")]
    pub scenario: Scenario,

    #[arg(long, value_enum, default_value = "small")]
    pub scale: Scale,

    /// The controller under test, run as `bash -c "exec <cmd>"` in its own process group with
    /// KUBECONFIG set. Placeholders: {bin} {selector} (kube-reloader-loadtest=<run id>) {run_id}
    /// {metrics_addr} (127.0.0.1:<free port>) {metrics_port} {scenario_flags} {kubeconfig}.
    #[arg(long, env = "CONTROLLER_CMD", default_value = DEFAULT_CMD)]
    pub controller_cmd: String,

    /// What {bin} stands for (default: the last line of `make -s binary`).
    #[arg(long, env = "KUBE_RELOADER_BIN")]
    pub controller_bin: Option<String>,

    /// Name of the controller in the report and in the result file names.
    #[arg(long)]
    pub controller_label: Option<String>,

    /// Polled until it answers 200: the controller is ready (same placeholders). "none": do not
    /// wait (the time to ready is then not measured).
    #[arg(long, default_value = "http://{metrics_addr}/ready")]
    pub ready_url: String,

    /// Scraped once at the end and saved next to the results ("none" to skip).
    #[arg(long, default_value = "http://{metrics_addr}/metrics")]
    pub metrics_url: String,

    /// Kubeconfig of the cluster (default: the local control plane, `hack/cluster.sh kubeconfig`).
    #[arg(long, env = "LOADTEST_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,

    /// Credentials the controller under test uses (through the proxy or directly). Default: the
    /// local control plane's `loadtest-controller.kubeconfig` next to the kubeconfig (its own
    /// user, audit-logged), else the kubeconfig.
    #[arg(long, env = "LOADTEST_CONTROLLER_KUBECONFIG")]
    pub controller_kubeconfig: Option<PathBuf>,

    /// The API server's audit log of that user (default: `logs/audit.log` next to the kubeconfig,
    /// as hack/cluster.sh writes it; "none" to skip). Its requests are counted by user agent.
    #[arg(long, env = "LOADTEST_AUDIT_LOG")]
    pub audit_log: Option<PathBuf>,

    /// Where results go (default: loadtest/results).
    #[arg(long)]
    pub results_dir: Option<PathBuf>,

    /// Let the controller talk to the API server directly instead of through the counting proxy
    /// (its requests are then only visible in the API server's cluster-wide metrics).
    #[arg(long)]
    pub direct: bool,

    /// Keep the namespaces of the run (default: deleted at the end).
    #[arg(long)]
    pub keep: bool,

    /// Delete every namespace left by earlier runs (label kube-reloader-loadtest) and exit.
    #[arg(long)]
    pub cleanup: bool,

    /// Override the scale's number of namespaces.
    #[arg(long)]
    pub namespaces: Option<usize>,
    /// Override the scale's number of workloads (each with its own ConfigMap and Secret).
    #[arg(long)]
    pub workloads: Option<usize>,
    /// Override the number of changes.
    #[arg(long)]
    pub changes: Option<usize>,
    /// Override the change rate (changes per second).
    #[arg(long)]
    pub rate: Option<f64>,

    /// Controller replicas of the `sharded` scenario (each its own process with --sharding; the
    /// result files are named `sharded-<scale>-<N>r`). Other scenarios run one.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub replicas: u16,

    /// Requests in flight while creating objects.
    #[arg(long, default_value_t = 64)]
    pub concurrency: usize,

    /// Instead of a run: plot reload latency and RSS against workloads from the result files
    /// given with --from, to this SVG (and a Markdown table next to it).
    #[arg(long, requires = "from")]
    pub scaling_plot: Option<PathBuf>,
    /// Result files (`results/*.json`) for --scaling-plot.
    #[arg(long, num_args = 1..)]
    pub from: Vec<PathBuf>,

    /// Start the controller without waiting for kube-controller-manager to have rolled out
    /// every Deployment of the population and for the API server's write rate to drop below
    /// 20/s (default: wait, so the start-up is measured on a cluster at rest).
    #[arg(long)]
    pub no_wait_rollouts: bool,

    /// Share (0 to 1) of the Deployments that run one real replica (of --running-image) on a
    /// real node, neither a kwok node nor a control plane (loadtest/kind/run.sh's workers); the
    /// report then says when each reload of them finished rolling (new pod Ready, old pod gone)
    /// and fails a rollout that never finished. 0: every workload has `replicas: 0`.
    #[arg(long, default_value_t = 0.0, value_parser = share)]
    pub running_share: f64,
    /// The running share's container image; it must be on the nodes (default: kubeadm's pause
    /// image, which kubeadm nodes have).
    #[arg(long)]
    pub running_image: Option<String>,

    /// Seed of the choices of configs to change.
    #[arg(long)]
    pub seed: Option<u64>,

    /// noisy-neighbour / poisoned: group namespaces into tenants by a label and run the
    /// controller with --tenant-label (result files `<scenario>-<scale>-tenants`).
    #[arg(long)]
    pub tenant_groups: bool,

    /// flapping: how often each flapping Secret is rewritten (`2s`, `500ms`; default 2s).
    #[arg(long, value_parser = seconds)]
    pub flap_period: Option<f64>,
    /// flapping: for how long the Secrets are rewritten (`2m`, `1m30s`; default 2m, 20s at the
    /// small scale).
    #[arg(long, value_parser = seconds)]
    pub flap_for: Option<f64>,
    /// flapping: the controller's --churn-limit (default 3); 0 runs it without the breaker
    /// (result files `flapping-<scale>-no-breaker`).
    #[arg(long)]
    pub churn_limit: Option<u32>,

    /// chaos: how long changes and faults go on (20m, 90s; default 20m).
    #[arg(long, value_parser = seconds)]
    pub duration: Option<f64>,

    /// chaos: the replicas run with --enable-ha (one leader acts) instead of --sharding (result
    /// files `chaos-<scale>-<N>r-ha`).
    #[arg(long)]
    pub enable_ha: bool,

    /// chaos: also restart kube-apiserver and compact etcd. Only against a control plane of the
    /// run's own (`KUBE_RELOADER_CACHE=<dir> hack/cluster.sh up`, then --kubeconfig): refused for
    /// the shared one.
    #[arg(long)]
    pub control_plane_faults: bool,

    /// chaos: the control run. The seed's population, changes and fault schedule as in the
    /// chaos run, but no fault is carried out: each is recorded over its planned window, so
    /// that the "untouched namespaces" figures are taken over the same windows with nothing
    /// wrong (result files `chaos-<scale>-<N>r-control`). What is left of the tail then is
    /// the machine's load, not the faults'.
    #[arg(long)]
    pub chaos_control: bool,

    /// chaos: carry out the faults of this JSON file instead of the seed's draw, to replay the
    /// part of a run that went wrong: a list of faults as schedule.rs spells them, e.g.
    /// `[{"at_s": 30, "kind": "stop", "replica": 0, "for_s": 8.6}]` (result files
    /// `chaos-<scale>-<N>r-plan-<file stem>`).
    #[arg(long)]
    pub fault_plan: Option<PathBuf>,
}

/// A positive duration (`2s`, `1m30s`, `500ms`; jiff's friendly format, which reads Go's) in
/// seconds.
fn seconds(s: &str) -> Result<f64, String> {
    let d: jiff::SignedDuration = s.parse().map_err(|e| format!("{s:?}: {e}"))?;
    match d.as_secs_f64() {
        secs if secs > 0.0 => Ok(secs),
        _ => Err(format!("{s:?}: not a positive duration")),
    }
}

/// A share from 0 to 1.
fn share(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(x) if (0.0..=1.0).contains(&x) => Ok(x),
        _ => Err(format!("{s:?}: not a number from 0 to 1")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(extra: &[&str]) -> Args {
        Args::parse_from(["kube-reloader-loadtest"].iter().chain(extra))
    }

    #[test]
    fn durations_read_like_the_controllers_flags() {
        assert_eq!(seconds("2s"), Ok(2.0));
        assert_eq!(seconds("2m"), Ok(120.0));
        assert_eq!(seconds("1m30s"), Ok(90.0));
        assert_eq!(seconds("500ms"), Ok(0.5));
        assert!(seconds("0s").is_err());
        assert!(seconds("two").is_err());
        assert!(seconds("45").is_err(), "a unit is required");
        let a = args(&[
            "--flap-period",
            "1s",
            "--flap-for",
            "1m",
            "--duration",
            "20m",
        ]);
        assert_eq!((a.flap_period, a.flap_for), (Some(1.0), Some(60.0)));
        assert_eq!(a.duration, Some(1200.0));
    }
}
