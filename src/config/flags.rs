//! The command line. Names, defaults and env vars are Reloader's, so an existing manifest or Helm
//! values file keeps its meaning; kube-reloader's own flags come after them.

use std::time::Duration;

use clap::Parser;

use crate::go_values::{
    go_duration_arg, parse_go_bool, positive_go_duration_arg, serialize_go_duration,
};

/// `--precise-keys`: which workloads count only the keys of a config they read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PreciseKeys {
    #[default]
    Off,
    Annotated,
    All,
}

/// Helm's release records (`helm.sh/release.v1`): one per release revision, never mounted.
pub const DEFAULT_IGNORED_SECRET_TYPES: &str = "helm.sh/release.v1";

/// kube-reloader: rolls workloads when the ConfigMaps, Secrets or CSI secrets they use change.
#[derive(Debug, Clone, Parser, serde::Serialize)]
#[serde(rename_all = "camelCase")]
#[command(name = "kube-reloader", version, about)]
pub struct Flags {
    /// Reload every workload that references a changed config unless it opts out with auto: "false".
    #[arg(long, default_value = "false", num_args = 0..=1, default_missing_value = "true", value_parser = parse_go_bool)]
    pub auto_reload_all: bool,

    /// How a reload is written: env-vars or annotations.
    #[arg(long, default_value = "env-vars")]
    pub reload_strategy: String,

    /// Also reload when a referenced config is created.
    #[arg(long, default_value = "false", num_args = 0..=1, default_missing_value = "true", value_parser = parse_go_bool)]
    pub reload_on_create: bool,

    /// Also reload when a referenced config is deleted.
    #[arg(long, default_value = "false", num_args = 0..=1, default_missing_value = "true", value_parser = parse_go_bool)]
    pub reload_on_delete: bool,

    /// With --reload-on-create, treat the configs found at start as created.
    #[arg(long, default_value = "false", num_args = 0..=1, default_missing_value = "true", value_parser = parse_go_bool)]
    pub sync_after_restart: bool,

    /// Only watch these namespaces (comma list).
    #[arg(long, value_delimiter = ',')]
    pub namespaces: Vec<String>,

    /// Single-namespace mode, as Reloader (used when --namespaces is empty).
    #[arg(
        long = "kubernetes-namespace",
        env = "KUBERNETES_NAMESPACE",
        hide = true
    )]
    pub kubernetes_namespace: Option<String>,

    /// Only namespaces whose labels match (`k=v`, `k:v`, `k:*`, `k in (a,b)`).
    #[arg(long)]
    pub namespace_selector: Vec<String>,

    /// Only ConfigMaps and Secrets whose labels match.
    #[arg(long)]
    pub resource_label_selector: Vec<String>,

    /// Namespaces never watched (comma list).
    #[arg(long, value_delimiter = ',')]
    pub namespaces_to_ignore: Vec<String>,

    /// configmaps or secrets: that type is not watched.
    #[arg(long, value_delimiter = ',')]
    pub resources_to_ignore: Vec<String>,

    /// jobs and/or cronjobs: those workload types are never reloaded.
    #[arg(long, value_delimiter = ',')]
    pub ignored_workload_types: Vec<String>,

    /// Roll Argo Rollouts (argoproj.io/v1alpha1).
    #[arg(long = "is-Argo-Rollouts", default_value = "false", num_args = 0..=1, default_missing_value = "true", value_parser = parse_go_bool)]
    pub is_argo_rollouts: bool,

    /// Roll OpenShift DeploymentConfigs (apps.openshift.io/v1).
    #[arg(long, default_value = "false", num_args = 0..=1, default_missing_value = "true", value_parser = parse_go_bool)]
    pub is_openshift: bool,

    /// Leader election through the Lease `stakater-reloader-lock`.
    #[arg(long, default_value = "false", num_args = 0..=1, default_missing_value = "true", value_parser = parse_go_bool)]
    pub enable_ha: bool,

    /// Watch SecretProviderClassPodStatus (Secrets Store CSI driver).
    #[arg(long, default_value = "false", num_args = 0..=1, default_missing_value = "true", value_parser = parse_go_bool)]
    pub enable_csi_integration: bool,

    /// POST here instead of rolling workloads.
    #[arg(long)]
    pub webhook_url: Option<String>,

    /// Log format: empty for text, or json.
    #[arg(long, default_value = "")]
    pub log_format: String,

    /// Log level: trace, debug, info, warning, error, fatal, panic.
    #[arg(long, default_value = "info")]
    pub log_level: String,

    /// Serve CPU profiles on --pprof-addr.
    #[arg(long, default_value = "false", num_args = 0..=1, default_missing_value = "true", value_parser = parse_go_bool)]
    pub enable_pprof: bool,

    #[arg(long, default_value = ":6060")]
    pub pprof_addr: String,

    #[arg(long, default_value = "reloader.stakater.com/auto")]
    pub auto_annotation: String,
    #[arg(long, default_value = "configmap.reloader.stakater.com/reload")]
    pub configmap_annotation: String,
    #[arg(long, default_value = "secret.reloader.stakater.com/reload")]
    pub secret_annotation: String,
    #[arg(long, default_value = "configmap.reloader.stakater.com/auto")]
    pub configmap_auto_annotation: String,
    #[arg(long, default_value = "secret.reloader.stakater.com/auto")]
    pub secret_auto_annotation: String,
    #[arg(long, default_value = "reloader.stakater.com/search")]
    pub auto_search_annotation: String,
    #[arg(long, default_value = "reloader.stakater.com/match")]
    pub search_match_annotation: String,
    #[arg(long, default_value = "reloader.stakater.com/ignore")]
    pub ignore_annotation: String,
    #[arg(long, default_value = "deployment.reloader.stakater.com/pause-period")]
    pub pause_deployment_annotation: String,
    #[arg(long, default_value = "deployment.reloader.stakater.com/paused-at")]
    pub pause_deployment_time_annotation: String,

    // ---- kube-reloader's own flags ----
    /// Address of /metrics, /live and /ready.
    #[arg(long, env = "METRICS_ADDR", default_value = "0.0.0.0:9090")]
    pub metrics_addr: String,

    /// At most one reload per workload per this period (Go duration; 0 turns it off).
    #[arg(long, default_value = "0s", value_parser = go_duration_arg)]
    #[serde(serialize_with = "serialize_go_duration")]
    pub min_reload_interval: Duration,

    /// Sustained patch rate towards the API server. 50/s stays well inside the default API
    /// priority-and-fairness share of a workload controller while rolling 3000 workloads a minute.
    #[arg(long, default_value_t = 50)]
    pub max_patches_per_second: u32,

    /// Patches allowed at once above the sustained rate (a fan-out to 100 workloads goes out at once).
    #[arg(long, default_value_t = 100)]
    pub patch_burst: u32,

    /// Split namespaces over all live replicas (each replica acts on its share). Needs POD_NAME
    /// and POD_NAMESPACE. Without it, --enable-ha makes one leader act on everything (Reloader).
    #[arg(long, env = "SHARDING", default_value = "false", num_args = 0..=1, default_missing_value = "true", value_parser = parse_go_bool)]
    pub sharding: bool,

    /// How long a membership or leader Lease lives without renewal (Go duration).
    #[arg(long, default_value = "15s", value_parser = positive_go_duration_arg)]
    #[serde(serialize_with = "serialize_go_duration")]
    pub lease_duration: Duration,

    /// A replica that could not renew its Lease for this long stops writing (before the Lease
    /// expires and another replica takes over, leaving room for clock skew).
    #[arg(long, default_value = "10s", value_parser = positive_go_duration_arg)]
    #[serde(serialize_with = "serialize_go_duration")]
    pub renew_deadline: Duration,

    /// How often Leases are renewed and leadership is tried.
    #[arg(long, default_value = "2s", value_parser = positive_go_duration_arg)]
    #[serde(serialize_with = "serialize_go_duration")]
    pub retry_period: Duration,

    /// With --sharding, ask the API server to send each replica only its namespaces (sharded
    /// list and watch, feature gate ShardedListAndWatch): `auto` when a probe list shows the
    /// server applies it, `on` always, `off` never (every replica receives everything and keeps
    /// its own namespaces).
    #[arg(long, value_enum, default_value = "auto")]
    pub server_side_sharding: crate::shard::ServerSharding,

    /// This replica's identity (the pod name, from the downward API).
    #[arg(long = "pod-name", env = "POD_NAME", hide = true)]
    pub pod_name: Option<String>,

    /// Where Leases and the shard assignment live (the pod's namespace).
    #[arg(long = "pod-namespace", env = "POD_NAMESPACE", hide = true)]
    pub pod_namespace: Option<String>,

    /// What Reloader (and OpenTelemetry) read from the environment.
    #[command(flatten)]
    #[serde(skip)]
    pub environment: Environment,

    /// Threads hashing config payloads (0: half the CPUs).
    #[arg(long, default_value_t = 0)]
    pub digest_workers: usize,

    /// Secret types never listed or watched (comma list; empty: every type). Helm's release
    /// records are most Secret bytes of a cluster and no pod can use them.
    #[arg(long, value_delimiter = ',', default_value = DEFAULT_IGNORED_SECRET_TYPES)]
    pub ignore_secret_types: Vec<String>,

    /// Group namespaces into tenants by this namespace label's value (tenants take turns for
    /// writes); a namespace without it is its own tenant. Empty: one tenant per namespace.
    #[arg(long, default_value = "")]
    pub tenant_label: String,

    /// At most this many writes per second per tenant, inside --max-patches-per-second (0: off).
    #[arg(long, default_value_t = 0.0)]
    pub max_patches_per_second_per_tenant: f64,

    /// Longest wait between retries of a failing write (Go duration).
    #[arg(long, default_value = "30s", value_parser = positive_go_duration_arg)]
    #[serde(serialize_with = "serialize_go_duration")]
    pub max_retry_backoff: Duration,

    /// Find workloads by LIST instead of watching them: once at start, every 5 minutes, and in
    /// a config's namespace before each change of it is decided (as Reloader does). Turned on
    /// per kind by itself when RBAC grants list but not watch (Reloader's chart); this forces
    /// it for every kind, to measure it.
    #[arg(long, default_value = "false", num_args = 0..=1, default_missing_value = "true", value_parser = parse_go_bool)]
    pub list_workloads: bool,

    /// Key-precise values (not Reloader's): `off` rolls a workload on any change of a config it
    /// uses, as Reloader; `annotated` makes workloads annotated `kube-reloader.io/precise-keys:
    /// "true"` count only the keys they read; `all` makes every workload do so unless annotated
    /// "false" (docs/precise-reloads.md).
    #[arg(long, value_enum, default_value = "off")]
    pub precise_keys: PreciseKeys,

    /// Churn breaker: a config whose content changes more than this many times within
    /// --churn-window stops rolling its workloads until it has been stable for --churn-quiet,
    /// then rolls them once (0 turns it off).
    #[arg(long, default_value_t = 0)]
    pub churn_limit: u32,

    /// The window --churn-limit counts changes in (Go duration).
    #[arg(long, default_value = "5m", value_parser = positive_go_duration_arg)]
    #[serde(serialize_with = "serialize_go_duration")]
    pub churn_window: Duration,

    /// How long a config held by the churn breaker must stay unchanged (Go duration).
    #[arg(long, default_value = "2m", value_parser = positive_go_duration_arg)]
    #[serde(serialize_with = "serialize_go_duration")]
    pub churn_quiet: Duration,

    /// Safe reloads (not Reloader's): the default wave policy, e.g.
    /// `threshold=20,canary=5%,growth=2,deadline=5m` (or `on` for the defaults). A change that
    /// affects more workloads than the threshold is rolled in waves, each only when the one
    /// before is healthy, and halted when a wave fails. Unset: off, unless a config or its
    /// namespace says otherwise (`kube-reloader.io/waves`; docs/safe-reloads.md).
    #[arg(long, value_parser = parse_wave_policy)]
    pub waves: Option<String>,

    /// How often the workloads of a rolling wave are read (Go duration).
    #[arg(long, default_value = "2s", value_parser = positive_go_duration_arg)]
    #[serde(serialize_with = "serialize_go_duration")]
    pub wave_poll_interval: Duration,

    /// How often the API of a CRD-backed kind a flag turns on (CSI, Argo Rollouts,
    /// DeploymentConfigs) is looked up in discovery: one not served is skipped until it is, one
    /// served is watched until it goes away (Go duration).
    #[arg(long, env = "OPTIONAL_API_CHECK_INTERVAL", default_value = "1m", value_parser = positive_go_duration_arg)]
    #[serde(serialize_with = "serialize_go_duration")]
    pub optional_api_check_interval: Duration,
}

fn parse_wave_policy(raw: &str) -> Result<String, String> {
    crate::waves::PolicyText::parse(raw)
        .map(|_| raw.to_string())
        .map_err(|e| e.to_string())
}

/// Settings Reloader reads from environment variables (its chart sets them), and the
/// OpenTelemetry exporter's. Hidden flags, so that clap reads the environment in one place with
/// everything else. Never written into the meta-info ConfigMap: a webhook URL is a credential.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct Environment {
    /// Where the meta-info ConfigMap is published (unset: not published).
    #[arg(long, env = "RELOADER_NAMESPACE", hide = true)]
    pub reloader_namespace: Option<String>,
    #[arg(long, env = "RELOADER_DEPLOYMENT_NAME", hide = true)]
    pub reloader_deployment_name: Option<String>,
    /// `enabled`: the reload counters carry a namespace label.
    #[arg(long, env = "METRICS_COUNT_BY_NAMESPACE", hide = true)]
    pub metrics_count_by_namespace: Option<String>,
    #[arg(long, env = "ALERT_ON_RELOAD", hide = true)]
    pub alert_on_reload: Option<String>,
    #[arg(long, env = "ALERT_SINK", hide = true)]
    pub alert_sink: Option<String>,
    #[arg(long, env = "ALERT_WEBHOOK_URL", hide = true)]
    pub alert_webhook_url: Option<String>,
    #[arg(long, env = "ALERT_WEBHOOK_PROXY", hide = true)]
    pub alert_webhook_proxy: Option<String>,
    #[arg(long, env = "ALERT_ADDITIONAL_INFO", hide = true)]
    pub alert_additional_info: Option<String>,
    #[arg(long, env = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", hide = true)]
    pub otel_exporter_otlp_traces_endpoint: Option<String>,
    #[arg(long, env = "OTEL_EXPORTER_OTLP_ENDPOINT", hide = true)]
    pub otel_exporter_otlp_endpoint: Option<String>,
    #[arg(long, env = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", hide = true)]
    pub otel_exporter_otlp_traces_protocol: Option<String>,
    #[arg(long, env = "OTEL_EXPORTER_OTLP_PROTOCOL", hide = true)]
    pub otel_exporter_otlp_protocol: Option<String>,
    #[arg(long, env = "OTEL_SERVICE_NAME", hide = true)]
    pub otel_service_name: Option<String>,
}

impl Environment {
    /// An alert variable by its name (`ALERT_*`), as the alert settings read them.
    pub fn alert_var(&self, name: &str) -> Option<String> {
        match name {
            "ALERT_ON_RELOAD" => self.alert_on_reload.clone(),
            "ALERT_SINK" => self.alert_sink.clone(),
            "ALERT_WEBHOOK_URL" => self.alert_webhook_url.clone(),
            "ALERT_WEBHOOK_PROXY" => self.alert_webhook_proxy.clone(),
            "ALERT_ADDITIONAL_INFO" => self.alert_additional_info.clone(),
            _ => None,
        }
    }

    pub fn counts_by_namespace(&self) -> bool {
        self.metrics_count_by_namespace.as_deref() == Some("enabled")
    }
}
