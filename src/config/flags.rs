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
    #[arg(long, env = "AUTO_RELOAD_ALL", default_value = "false", num_args = 0..=1, default_missing_value = "true", value_parser = parse_go_bool)]
    pub auto_reload_all: bool,

    /// How a reload is written: env-vars or annotations.
    #[arg(long, env = "RELOAD_STRATEGY", default_value = "env-vars")]
    pub reload_strategy: String,

    /// Also reload when a referenced config is created.
    #[arg(long, env = "RELOAD_ON_CREATE", default_value = "false", num_args = 0..=1, default_missing_value = "true", value_parser = parse_go_bool)]
    pub reload_on_create: bool,

    /// Also reload when a referenced config is deleted.
    #[arg(long, env = "RELOAD_ON_DELETE", default_value = "false", num_args = 0..=1, default_missing_value = "true", value_parser = parse_go_bool)]
    pub reload_on_delete: bool,

    /// With --reload-on-create, treat the configs found at start as created.
    #[arg(long, env = "SYNC_AFTER_RESTART", default_value = "false", num_args = 0..=1, default_missing_value = "true", value_parser = parse_go_bool)]
    pub sync_after_restart: bool,

    /// Only watch these namespaces (comma list).
    #[arg(long, env = "NAMESPACES", value_delimiter = ',')]
    pub namespaces: Vec<String>,

    /// Single-namespace mode, as Reloader (used when --namespaces is empty).
    #[arg(
        long = "kubernetes-namespace",
        env = "KUBERNETES_NAMESPACE",
        hide = true
    )]
    pub kubernetes_namespace: Option<String>,

    /// Only namespaces whose labels match (`k=v`, `k:v`, `k:*`, `k in (a,b)`).
    #[arg(long, env = "NAMESPACE_SELECTOR")]
    pub namespace_selector: Vec<String>,

    /// Only ConfigMaps and Secrets whose labels match.
    #[arg(long, env = "RESOURCE_LABEL_SELECTOR")]
    pub resource_label_selector: Vec<String>,

    /// Namespaces never watched (comma list).
    #[arg(long, env = "NAMESPACES_TO_IGNORE", value_delimiter = ',')]
    pub namespaces_to_ignore: Vec<String>,

    /// configmaps or secrets: that type is not watched.
    #[arg(long, env = "RESOURCES_TO_IGNORE", value_delimiter = ',')]
    pub resources_to_ignore: Vec<String>,

    /// jobs and/or cronjobs: those workload types are never reloaded.
    #[arg(long, env = "IGNORED_WORKLOAD_TYPES", value_delimiter = ',')]
    pub ignored_workload_types: Vec<String>,

    /// Roll a custom kind whose objects hold a pod template (repeatable; `;` between
    /// declarations in the env var): `<group>/<version>/<Kind>[,resource=<plural>]
    /// [,template=<JSON pointer>][,reload-by=annotations|env-vars|eviction]
    /// [,selector=<JSON pointer>|,pod-label=<label key>]` (docs/custom-kinds.md).
    #[arg(long, env = "CUSTOM_KINDS", value_delimiter = ';')]
    pub custom_kind: Vec<String>,

    /// Reload pods labelled `kube-reloader.io/restart-by=eviction` (bare pods, pods whose owner
    /// ignores its template) by evicting them when a config they use changes. Only labelled
    /// pods are watched (docs/pod-restarts.md).
    #[arg(long, env = "RESTART_LABELLED_PODS", default_value = "false", num_args = 0..=1, default_missing_value = "true", value_parser = parse_go_bool)]
    pub restart_labelled_pods: bool,

    /// Roll Argo Rollouts (argoproj.io/v1alpha1).
    #[arg(long = "is-Argo-Rollouts", env = "IS_ARGO_ROLLOUTS", default_value = "false", num_args = 0..=1, default_missing_value = "true", value_parser = parse_go_bool)]
    pub is_argo_rollouts: bool,

    /// Roll OpenShift DeploymentConfigs (apps.openshift.io/v1). `auto` (or empty), Reloader v2's
    /// word for "detect the API", is false here: DeploymentConfigs are rolled whenever the API is
    /// served anyway.
    #[arg(long, env = "IS_OPENSHIFT", default_value = "false", num_args = 0..=1, default_missing_value = "true", value_parser = parse_openshift)]
    pub is_openshift: bool,

    /// Leader election through the Lease `--leader-election-id`.
    #[arg(long, env = "ENABLE_HA", default_value = "false", num_args = 0..=1, default_missing_value = "true", value_parser = parse_go_bool)]
    pub enable_ha: bool,

    /// Watch SecretProviderClassPodStatus (Secrets Store CSI driver).
    #[arg(long, env = "ENABLE_CSI_INTEGRATION", default_value = "false", num_args = 0..=1, default_missing_value = "true", value_parser = parse_go_bool)]
    pub enable_csi_integration: bool,

    /// POST here instead of rolling workloads.
    #[arg(long, env = "WEBHOOK_URL")]
    pub webhook_url: Option<String>,

    /// Log format: empty for text, or json.
    #[arg(long, env = "LOG_FORMAT", default_value = "")]
    pub log_format: String,

    /// Log level: trace, debug, info, warning, error, fatal, panic.
    #[arg(long, env = "LOG_LEVEL", default_value = "info")]
    pub log_level: String,

    /// Serve CPU profiles on --pprof-addr.
    #[arg(long, env = "ENABLE_PPROF", default_value = "false", num_args = 0..=1, default_missing_value = "true", value_parser = parse_go_bool)]
    pub enable_pprof: bool,

    #[arg(long, env = "PPROF_ADDR", default_value = ":6060")]
    pub pprof_addr: String,

    #[arg(
        long,
        env = "AUTO_ANNOTATION",
        default_value = "reloader.stakater.com/auto"
    )]
    pub auto_annotation: String,
    #[arg(
        long,
        env = "CONFIGMAP_ANNOTATION",
        default_value = "configmap.reloader.stakater.com/reload"
    )]
    pub configmap_annotation: String,
    #[arg(
        long,
        env = "SECRET_ANNOTATION",
        default_value = "secret.reloader.stakater.com/reload"
    )]
    pub secret_annotation: String,
    #[arg(
        long,
        env = "CONFIGMAP_AUTO_ANNOTATION",
        default_value = "configmap.reloader.stakater.com/auto"
    )]
    pub configmap_auto_annotation: String,
    #[arg(
        long,
        env = "SECRET_AUTO_ANNOTATION",
        default_value = "secret.reloader.stakater.com/auto"
    )]
    pub secret_auto_annotation: String,
    #[arg(
        long,
        env = "AUTO_SEARCH_ANNOTATION",
        default_value = "reloader.stakater.com/search"
    )]
    pub auto_search_annotation: String,
    #[arg(
        long,
        env = "SEARCH_MATCH_ANNOTATION",
        default_value = "reloader.stakater.com/match"
    )]
    pub search_match_annotation: String,
    #[arg(
        long,
        env = "IGNORE_ANNOTATION",
        default_value = "reloader.stakater.com/ignore"
    )]
    pub ignore_annotation: String,
    #[arg(
        long,
        env = "PAUSE_DEPLOYMENT_ANNOTATION",
        default_value = "deployment.reloader.stakater.com/pause-period"
    )]
    pub pause_deployment_annotation: String,
    #[arg(
        long,
        env = "PAUSE_DEPLOYMENT_TIME_ANNOTATION",
        default_value = "deployment.reloader.stakater.com/paused-at"
    )]
    pub pause_deployment_time_annotation: String,
    // Reloader v2's annotation overrides (the keys were fixed before).
    #[arg(
        long,
        env = "CONFIGMAP_EXCLUDE_ANNOTATION",
        default_value = "configmaps.exclude.reloader.stakater.com/reload"
    )]
    pub configmap_exclude_annotation: String,
    #[arg(
        long,
        env = "SECRET_EXCLUDE_ANNOTATION",
        default_value = "secrets.exclude.reloader.stakater.com/reload"
    )]
    pub secret_exclude_annotation: String,
    #[arg(
        long,
        env = "SECRETPROVIDERCLASS_ANNOTATION",
        default_value = "secretproviderclass.reloader.stakater.com/reload"
    )]
    pub secretproviderclass_annotation: String,
    #[arg(
        long,
        env = "SECRETPROVIDERCLASS_AUTO_ANNOTATION",
        default_value = "secretproviderclass.reloader.stakater.com/auto"
    )]
    pub secretproviderclass_auto_annotation: String,
    #[arg(
        long,
        env = "SECRETPROVIDERCLASS_EXCLUDE_ANNOTATION",
        default_value = "secretproviderclasses.exclude.reloader.stakater.com/reload"
    )]
    pub secretproviderclass_exclude_annotation: String,

    // ---- Reloader v2's leader election (with --enable-ha) ----
    /// Name of the leader Lease. Reloader v1 (and its chart 2.2.16) uses `stakater-reloader-lock`,
    /// kept as the default; Reloader v2's default is `reloader-leader-election`.
    #[arg(long, env = "LEADER_ELECTION_ID", default_value = super::shard::DEFAULT_LEADER_LEASE)]
    pub leader_election_id: String,

    /// Namespace of the leader Lease (and, with --sharding, of the membership Leases and the
    /// shard assignment). Default: POD_NAMESPACE.
    #[arg(long, env = "LEADER_ELECTION_NAMESPACE")]
    pub leader_election_namespace: Option<String>,

    /// Hand the leader Lease back on a graceful exit, so a standby takes over at once instead of
    /// after the Lease expires.
    #[arg(long, env = "LEADER_ELECTION_RELEASE_ON_CANCEL", default_value = "true", num_args = 0..=1, default_missing_value = "true", value_parser = parse_go_bool)]
    pub leader_election_release_on_cancel: bool,

    // ---- kube-reloader's own flags ----
    /// Address of /metrics, /live and /ready.
    #[arg(long, env = "METRICS_ADDR", default_value = "0.0.0.0:9090")]
    pub metrics_addr: String,

    /// Address of /healthz and /readyz (Reloader v2's probe server; the same answers as /live and
    /// /ready). `0` or empty: not served.
    #[arg(long, env = "HEALTH_ADDR", default_value = ":8080")]
    pub health_addr: String,

    /// Serve the mutating admission webhook on this `host:port` (empty: off): a workload created
    /// or updated gets the current hash of each config it would be reloaded for, so one
    /// `helm upgrade` of a workload and its config rolls it once (docs/admission-webhook.md).
    #[arg(long, env = "ADMISSION_ADDR", default_value = "")]
    pub admission_addr: String,

    /// The webhook's serving certificate (PEM, leaf first).
    #[arg(long, default_value = "/etc/kube-reloader/admission/tls.crt")]
    pub admission_cert_file: std::path::PathBuf,

    /// The webhook's private key (PEM).
    #[arg(long, default_value = "/etc/kube-reloader/admission/tls.key")]
    pub admission_key_file: std::path::PathBuf,

    /// With the webhook on, every reload waits this long (Go duration), so that a workload
    /// applied right after its config (Helm applies configs first) is admitted, with the new
    /// hash, before the reload looks at it.
    #[arg(long, default_value = "2s", value_parser = go_duration_arg)]
    #[serde(serialize_with = "serialize_go_duration")]
    pub admission_settle: Duration,

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

    /// How long a membership or leader Lease lives without renewal (Go duration, whole seconds:
    /// the Lease records seconds). Reloader's name: --leader-election-lease-duration.
    #[arg(long, alias = "leader-election-lease-duration", env = "LEADER_ELECTION_LEASE_DURATION", default_value = "15s", value_parser = positive_go_duration_arg)]
    #[serde(serialize_with = "serialize_go_duration")]
    pub lease_duration: Duration,

    /// A replica that could not renew its Lease for this long stops writing (before the Lease
    /// expires and another replica takes over, leaving room for clock skew). Reloader's name:
    /// --leader-election-renew-deadline.
    #[arg(long, alias = "leader-election-renew-deadline", env = "LEADER_ELECTION_RENEW_DEADLINE", default_value = "10s", value_parser = positive_go_duration_arg)]
    #[serde(serialize_with = "serialize_go_duration")]
    pub renew_deadline: Duration,

    /// How often Leases are renewed and leadership is tried. Reloader's name:
    /// --leader-election-retry-period.
    #[arg(long, alias = "leader-election-retry-period", env = "LEADER_ELECTION_RETRY_PERIOD", default_value = "2s", value_parser = positive_go_duration_arg)]
    #[serde(serialize_with = "serialize_go_duration")]
    pub retry_period: Duration,

    /// With --sharding, ask the API server to send each replica only its namespaces (sharded
    /// list and watch, feature gate ShardedListAndWatch): `auto` when a probe list shows the
    /// server applies it, `on` always, `off` never (every replica receives everything and keeps
    /// its own namespaces).
    #[arg(long, value_enum, default_value = "auto")]
    pub server_side_sharding: super::shard::ServerSharding,

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

    /// The format the watches read: `auto` asks for protobuf for built-in kinds and reads JSON
    /// where the server does not serve it (custom resources always, a 406 or 415 otherwise);
    /// `protobuf` insists (a refusal is an error, retried); `json` never asks for protobuf.
    #[arg(
        long,
        value_enum,
        default_value = "auto",
        env = "KUBE_RELOADER_WIRE_FORMAT"
    )]
    pub wire_format: WireFormat,

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

    /// Shadow mode (not Reloader's): decide every reload as usual and write nothing (no patch,
    /// Job, Event, alert, meta-info or halts; only the replica set's own Leases), and judge
    /// each write of the controller that does reload (stakater/Reloader) against the one this
    /// one would have made: `/debug/shadow`, `kube-reloader shadow report`
    /// (docs/migration.md).
    #[arg(long, env = "SHADOW", default_value = "false", num_args = 0..=1, default_missing_value = "true", value_parser = parse_go_bool)]
    pub shadow: bool,

    /// Shadow mode: how long a predicted write waits for the incumbent's (then `not-done`),
    /// and an incumbent's write for a prediction (then `unpredicted`) (Go duration).
    #[arg(long, env = "SHADOW_WINDOW", default_value = "60s", value_parser = positive_go_duration_arg)]
    #[serde(serialize_with = "serialize_go_duration")]
    pub shadow_window: Duration,

    /// Shadow mode: an agreeing write this long after the config change is `late` (Go
    /// duration).
    #[arg(long, env = "SHADOW_LATE_AFTER", default_value = "10s", value_parser = positive_go_duration_arg)]
    #[serde(serialize_with = "serialize_go_duration")]
    pub shadow_late_after: Duration,
}

/// `--is-openshift`: a Go boolean, or Reloader v2's `auto` / empty (detect the API: false here,
/// since the API is detected whatever the flag says).
fn parse_openshift(raw: &str) -> Result<bool, String> {
    match raw.trim() {
        "" | "auto" => Ok(false),
        other => parse_go_bool(other),
    }
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
    /// Send an alert after each reload (`true`).
    #[arg(long, env = "ALERT_ON_RELOAD", num_args = 0..=1, default_missing_value = "true")]
    pub alert_on_reload: Option<String>,
    /// slack, teams, gchat, or anything else (raw, webhook) for a plain webhook.
    #[arg(long, env = "ALERT_SINK")]
    pub alert_sink: Option<String>,
    #[arg(long, env = "ALERT_WEBHOOK_URL")]
    pub alert_webhook_url: Option<String>,
    /// Proxy for alerts (Reloader v1's variable; ALERT_PROXY / --alert-proxy wins).
    #[arg(long, env = "ALERT_WEBHOOK_PROXY", hide = true)]
    pub alert_webhook_proxy: Option<String>,
    /// Proxy for alerts (Reloader v2's name; ALERT_WEBHOOK_PROXY is read too).
    #[arg(long, env = "ALERT_PROXY")]
    pub alert_proxy: Option<String>,
    /// Text put in front of every alert (e.g. the cluster's name).
    #[arg(long, env = "ALERT_ADDITIONAL_INFO")]
    pub alert_additional_info: Option<String>,
    /// The raw webhook sink sends JSON (Reloader v2's fields) instead of plain text.
    #[arg(long, env = "ALERT_STRUCTURED", num_args = 0..=1, default_missing_value = "true")]
    pub alert_structured: Option<String>,
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
            // Reloader v2 binds both names to one setting, ALERT_PROXY first.
            "ALERT_WEBHOOK_PROXY" | "ALERT_PROXY" => [&self.alert_proxy, &self.alert_webhook_proxy]
                .into_iter()
                .flatten()
                .find(|p| !p.trim().is_empty())
                .cloned(),
            "ALERT_STRUCTURED" => self.alert_structured.clone(),
            "ALERT_ADDITIONAL_INFO" => self.alert_additional_info.clone(),
            _ => None,
        }
    }

    pub fn counts_by_namespace(&self) -> bool {
        self.metrics_count_by_namespace.as_deref() == Some("enabled")
    }
}

/// The wire format of lists and watches (`--wire-format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum WireFormat {
    /// Protobuf where the API server serves it, JSON elsewhere.
    #[default]
    Auto,
    /// Protobuf for every built-in kind; a server that refuses it is an error.
    Protobuf,
    /// JSON only.
    Json,
}
