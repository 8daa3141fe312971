//! Command-line flags (Reloader's names and defaults) and the validated settings built from them.

mod annotations;
mod flags;
mod selector;
pub mod shard;

pub use annotations::AnnotationKeys;
pub use flags::{DEFAULT_IGNORED_SECRET_TYPES, Environment, Flags, PreciseKeys, WireFormat};
pub use selector::reloader_selector_to_label_selector;

use std::time::Duration;

use crate::model::{ConfigKind, WorkloadKind};

/// An invalid flag value; the message names the flag so the operator can fix the manifest.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("--{flag}: {message}")]
    InvalidFlag { flag: &'static str, message: String },
}

fn invalid(flag: &'static str, message: impl Into<String>) -> ConfigError {
    ConfigError::InvalidFlag {
        flag,
        message: message.into(),
    }
}

/// How a reload is written into the pod template.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReloadStrategy {
    /// `STAKATER_<NAME>_<TYPE>` env var on the chosen container (Reloader's default).
    EnvVars,
    /// `reloader.stakater.com/last-reloaded-from` on the pod template.
    Annotations,
}

impl ReloadStrategy {
    pub fn as_str(self) -> &'static str {
        match self {
            ReloadStrategy::EnvVars => "env-vars",
            ReloadStrategy::Annotations => "annotations",
        }
    }
}

/// Which namespaces this controller looks at (before sharding narrows it further).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NamespaceScope {
    /// Every namespace of the cluster (`watchGlobally`).
    All,
    /// Only these (`--namespaces`, or `KUBERNETES_NAMESPACE`): watches are namespaced.
    Only(Vec<String>),
}

/// `--churn-limit`, `--churn-window`, `--churn-quiet`: the churn breaker (crate::engine::breaker).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BreakerSettings {
    /// More changes than this within `window` open the breaker.
    pub limit: u32,
    pub window: Duration,
    /// How long an open breaker's config must stay unchanged before its workloads roll.
    pub quiet: Duration,
}

/// Settings after validation: everything the engine reads, with parsed types.
#[derive(Debug, Clone)]
pub struct Settings {
    pub keys: AnnotationKeys,
    pub auto_reload_all: bool,
    pub strategy: ReloadStrategy,
    pub reload_on_create: bool,
    pub reload_on_delete: bool,
    pub sync_after_restart: bool,
    pub scope: NamespaceScope,
    pub namespace_selector: Option<String>,
    pub resource_label_selector: Option<String>,
    pub namespaces_to_ignore: Vec<String>,
    pub ignored_configs: Vec<ConfigKind>,
    pub ignored_workloads: Vec<WorkloadKind>,
    pub argo_rollouts: bool,
    pub openshift: bool,
    /// `--restart-labelled-pods`: pods opted in by their label are workloads.
    pub labelled_pods: bool,
    /// `--admission-settle`, with the admission webhook on (`--admission-addr`): every reload
    /// waits this long, as a `reload-delay` would.
    pub admission_settle: Option<Duration>,
    /// `--custom-kind`: the declared kinds this controller rolls (registered process-wide).
    pub custom_kinds: Vec<crate::custom_kinds::CustomKindId>,
    pub csi_integration: bool,
    pub webhook_url: Option<String>,
    pub min_reload_interval: Duration,
    pub max_patches_per_second: u32,
    pub patch_burst: u32,
    pub digest_workers: usize,
    /// `--ignore-secret-types`: excluded server-side from every Secret list and watch.
    pub ignored_secret_types: Vec<String>,
    /// `--tenant-label`: the namespace label grouping namespaces into tenants.
    pub tenant_label: Option<String>,
    /// `--max-patches-per-second-per-tenant`.
    pub per_tenant_rate: Option<f64>,
    pub max_retry_backoff: Duration,
    /// Leases and shard assignment, with `--sharding` or `--enable-ha`.
    pub shard: Option<shard::ShardSettings>,
    /// Workload kinds RBAC lets this replica list but not watch, found at start by the access
    /// review (`crate::access`); none until then.
    pub rbac_listed_kinds: std::collections::BTreeSet<WorkloadKind>,
    /// `--list-workloads`: every workload kind is found by LIST, whatever RBAC allows.
    pub list_workloads: bool,
    /// `--wire-format`.
    pub wire_format: WireFormat,
    /// `--precise-keys`.
    pub precise_keys: PreciseKeys,
    /// The churn breaker, with `--churn-limit` above 0.
    pub churn_breaker: Option<BreakerSettings>,
    /// `--waves`: the default wave policy (`None`: off unless a config says otherwise).
    pub waves: Option<crate::waves::PolicyText>,
    /// `--wave-poll-interval`.
    pub wave_poll_interval: std::time::Duration,
    /// `--optional-api-check-interval`.
    pub optional_api_check_interval: std::time::Duration,
    /// Where halts are kept (the `kube-reloader-halts` ConfigMap): POD_NAMESPACE, else
    /// RELOADER_NAMESPACE. `None`: halts live as long as the process (always in shadow mode).
    pub halts_namespace: Option<String>,
    /// `--shadow`: write nothing, judge the incumbent's writes (`crate::shadow`).
    pub shadow: Option<ShadowSettings>,
}

/// `--shadow-window` and `--shadow-late-after` (`crate::shadow`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShadowSettings {
    /// A prediction with no matching write after this is `not-done`, a write with no matching
    /// prediction `unpredicted`.
    pub window: std::time::Duration,
    /// An agreeing write this long after the config change is `late`.
    pub late_after: std::time::Duration,
}

impl Settings {
    pub fn watches_config(&self, kind: ConfigKind) -> bool {
        match kind {
            ConfigKind::SecretProviderClass => self.csi_integration,
            other => !self.ignored_configs.contains(&other),
        }
    }

    pub fn handles_workload(&self, kind: WorkloadKind) -> bool {
        match kind {
            WorkloadKind::Rollout => self.argo_rollouts,
            WorkloadKind::DeploymentConfig => self.openshift,
            WorkloadKind::Pod => self.labelled_pods,
            WorkloadKind::Custom(id) => self.custom_kinds.contains(&id),
            other => !self.ignored_workloads.contains(&other),
        }
    }

    /// How `kind`'s templates are edited: as its declaration says, else `--reload-strategy`.
    pub fn strategy_for(&self, kind: WorkloadKind) -> ReloadStrategy {
        use crate::custom_kinds::ReloadBy;
        match kind.custom().and_then(|c| c.reload_by) {
            Some(ReloadBy::Annotations) => ReloadStrategy::Annotations,
            Some(ReloadBy::EnvVars) => ReloadStrategy::EnvVars,
            Some(ReloadBy::Eviction) | None => self.strategy,
        }
    }

    /// The field selector every list and watch of `kind` carries (`type!=a,type!=b` for Secrets
    /// of ignored types), so the API server never sends what cannot matter.
    pub fn config_field_selector(&self, kind: ConfigKind) -> Option<String> {
        if kind != ConfigKind::Secret || self.ignored_secret_types.is_empty() {
            return None;
        }
        let clauses: Vec<String> = self
            .ignored_secret_types
            .iter()
            .map(|t| format!("type!={t}"))
            .collect();
        Some(clauses.join(","))
    }

    /// Workload kinds found by LIST rather than watched (RBAC, or `--list-workloads`).
    pub fn listed_workload_kinds(&self) -> std::collections::BTreeSet<WorkloadKind> {
        match self.list_workloads {
            true => WorkloadKind::all()
                .into_iter()
                .filter(|k| self.handles_workload(*k))
                .collect(),
            false => self.rbac_listed_kinds.clone(),
        }
    }

    pub fn namespace_ignored(&self, namespace: &str) -> bool {
        self.namespaces_to_ignore.iter().any(|n| n == namespace)
    }

    /// `--namespaces` (or `KUBERNETES_NAMESPACE`) lets the controller watch `namespace`.
    pub fn namespace_in_scope(&self, namespace: &str) -> bool {
        match &self.scope {
            NamespaceScope::All => true,
            NamespaceScope::Only(list) => list.iter().any(|n| n == namespace),
        }
    }
}

/// Splits Reloader's comma lists, trimming blanks and dropping empty entries.
pub(crate) fn split_list(values: &[String]) -> Vec<String> {
    values
        .iter()
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect()
}

impl TryFrom<Flags> for Settings {
    type Error = ConfigError;

    fn try_from(f: Flags) -> Result<Self, ConfigError> {
        let strategy = reload_strategy(&f.reload_strategy)?;

        let ignored_configs = ignored_config_kinds(&f.resources_to_ignore)?;
        let ignored_workloads = ignored_workload_kinds(&f.ignored_workload_types)?;

        let scope = namespace_scope(&f);

        let ignored_secret_types = ignored_secret_types(&f.ignore_secret_types)?;

        let (namespace_selector, namespaces_to_ignore) = global_namespace_filters(&f, &scope)?;
        let resource_label_selector =
            reloader_selector_to_label_selector(&f.resource_label_selector)
                .map_err(|m| invalid("resource-label-selector", m))?;

        for (flag, value) in [
            ("max-patches-per-second", f.max_patches_per_second),
            ("patch-burst", f.patch_burst),
        ] {
            if value == 0 {
                return Err(invalid(flag, "must be at least 1"));
            }
        }
        let (tenant_label, per_tenant_rate) = tenancy(&f)?;

        let shard = shard_settings(&f)?;
        let custom_kinds = custom_kinds(&f.custom_kind)?;

        Ok(Settings {
            keys: AnnotationKeys::from_flags(&f),
            auto_reload_all: f.auto_reload_all,
            strategy,
            reload_on_create: f.reload_on_create,
            reload_on_delete: f.reload_on_delete,
            sync_after_restart: f.sync_after_restart,
            scope,
            namespace_selector,
            resource_label_selector,
            namespaces_to_ignore,
            ignored_configs,
            ignored_workloads,
            argo_rollouts: f.is_argo_rollouts,
            openshift: f.is_openshift,
            labelled_pods: f.restart_labelled_pods,
            custom_kinds,
            admission_settle: (!f.admission_addr.trim().is_empty()
                && !f.admission_settle.is_zero())
            .then_some(f.admission_settle),
            csi_integration: f.enable_csi_integration,
            webhook_url: f.webhook_url.filter(|u| !u.trim().is_empty()),
            min_reload_interval: f.min_reload_interval,
            max_patches_per_second: f.max_patches_per_second,
            patch_burst: f.patch_burst,
            digest_workers: f.digest_workers,
            ignored_secret_types,
            tenant_label,
            per_tenant_rate,
            max_retry_backoff: f.max_retry_backoff,
            shard,
            rbac_listed_kinds: Default::default(),
            list_workloads: f.list_workloads,
            wire_format: f.wire_format,
            precise_keys: f.precise_keys,
            churn_breaker: (f.churn_limit > 0).then_some(BreakerSettings {
                limit: f.churn_limit,
                window: f.churn_window,
                quiet: f.churn_quiet,
            }),
            waves: f
                .waves
                .as_deref()
                .and_then(|raw| crate::waves::PolicyText::parse(raw).ok()),
            wave_poll_interval: f.wave_poll_interval,
            optional_api_check_interval: f.optional_api_check_interval,
            halts_namespace: [&f.pod_namespace, &f.environment.reloader_namespace]
                .into_iter()
                .flatten()
                .find(|ns| !ns.is_empty() && !f.shadow)
                .cloned(),
            shadow: f.shadow.then_some(ShadowSettings {
                window: f.shadow_window,
                late_after: f.shadow_late_after,
            }),
        })
    }
}

/// `--custom-kind`: each declaration parsed and registered. A declared kind may not take a
/// built-in kind's name, nor another declared kind's: kept reloads and metrics name kinds by it.
fn custom_kinds(
    declarations: &[String],
) -> Result<Vec<crate::custom_kinds::CustomKindId>, ConfigError> {
    use crate::custom_kinds::{CustomKind, register};
    let mut ids: Vec<crate::custom_kinds::CustomKindId> = Vec::new();
    for declaration in declarations.iter().filter(|d| !d.trim().is_empty()) {
        let declared =
            CustomKind::parse(declaration).map_err(|e| invalid("custom-kind", e.to_string()))?;
        let taken = WorkloadKind::BUILT_IN
            .iter()
            .map(|k| k.as_str())
            .chain(ids.iter().map(|id| id.get().kind.as_str()))
            .any(|name| name == declared.kind);
        if taken {
            return Err(invalid(
                "custom-kind",
                format!(
                    "'{declaration}': a workload kind named {} is already rolled",
                    declared.kind
                ),
            ));
        }
        ids.push(register(declared).map_err(|e| invalid("custom-kind", e.to_string()))?);
    }
    Ok(ids)
}

fn reload_strategy(value: &str) -> Result<ReloadStrategy, ConfigError> {
    match value {
        "env-vars" => Ok(ReloadStrategy::EnvVars),
        "annotations" => Ok(ReloadStrategy::Annotations),
        other => Err(invalid(
            "reload-strategy",
            format!("'{other}' is not one of env-vars, annotations"),
        )),
    }
}

/// `--ignore-secret-types`: each a type a field selector can name.
fn ignored_secret_types(value: &[String]) -> Result<Vec<String>, ConfigError> {
    let types = split_list(value);
    match types
        .iter()
        .find(|t| t.contains(|c: char| c.is_whitespace() || "=!\\".contains(c)))
    {
        Some(bad) => Err(invalid(
            "ignore-secret-types",
            format!("'{bad}' is not a Secret type (no spaces, '=', '!' or '\\')"),
        )),
        None => Ok(types),
    }
}

/// `--namespace-selector` and `--namespaces-to-ignore`. As in Reloader, both only apply when
/// every namespace is watched: in scoped mode the watched set is explicit, so they are dropped
/// (a namespace listed and ignored is watched).
fn global_namespace_filters(
    f: &Flags,
    scope: &NamespaceScope,
) -> Result<(Option<String>, Vec<String>), ConfigError> {
    let global = *scope == NamespaceScope::All;
    let selector = reloader_selector_to_label_selector(&f.namespace_selector)
        .map_err(|m| invalid("namespace-selector", m))?
        .filter(|_| global);
    let ignored = split_list(&f.namespaces_to_ignore);
    if !global && !ignored.is_empty() {
        tracing::warn!(
            "--namespaces-to-ignore is only honoured when watching every namespace; \
             ignoring it in scoped mode"
        );
    }
    Ok((selector, if global { ignored } else { Vec::new() }))
}

/// `--resources-to-ignore`: at most one of `configmaps`, `secrets`.
fn ignored_config_kinds(value: &[String]) -> Result<Vec<ConfigKind>, ConfigError> {
    let mut ignored_configs = Vec::new();
    for v in split_list(value) {
        match v.to_ascii_lowercase().as_str() {
            "configmaps" => ignored_configs.push(ConfigKind::ConfigMap),
            "secrets" => ignored_configs.push(ConfigKind::Secret),
            _ => {
                return Err(invalid(
                    "resources-to-ignore",
                    format!("only accepts 'configmaps' or 'secrets', not '{v}'"),
                ));
            }
        }
    }
    if ignored_configs.len() > 1 {
        return Err(invalid(
            "resources-to-ignore",
            "only accepts 'configmaps' or 'secrets', not both",
        ));
    }
    Ok(ignored_configs)
}

/// `--ignored-workload-types`: `jobs`, `cronjobs`, or both.
fn ignored_workload_kinds(value: &[String]) -> Result<Vec<WorkloadKind>, ConfigError> {
    let mut ignored_workloads = Vec::new();
    for v in split_list(value) {
        match v.as_str() {
            "jobs" => ignored_workloads.push(WorkloadKind::Job),
            "cronjobs" => ignored_workloads.push(WorkloadKind::CronJob),
            _ => {
                return Err(invalid(
                    "ignored-workload-types",
                    format!("accepts 'jobs', 'cronjobs', or both, not '{v}'"),
                ));
            }
        }
    }
    Ok(ignored_workloads)
}

/// `--namespaces`, else `KUBERNETES_NAMESPACE`, else every namespace.
fn namespace_scope(f: &Flags) -> NamespaceScope {
    let mut namespaces = split_list(&f.namespaces);
    if namespaces.is_empty()
        && let Some(ns) = f.kubernetes_namespace.as_deref().map(str::trim)
        && !ns.is_empty()
    {
        namespaces.push(ns.to_string());
    }
    if namespaces.is_empty() {
        NamespaceScope::All
    } else {
        NamespaceScope::Only(namespaces)
    }
}

/// `--tenant-label` and `--max-patches-per-second-per-tenant` (0: off).
fn tenancy(f: &Flags) -> Result<(Option<String>, Option<f64>), ConfigError> {
    let tenant_label = Some(f.tenant_label.trim().to_string()).filter(|l| !l.is_empty());
    if tenant_label
        .as_deref()
        .is_some_and(|l| l.contains(['=', ',', ' ', '!']))
    {
        return Err(invalid("tenant-label", "must be a label key"));
    }
    let per_tenant = f.max_patches_per_second_per_tenant;
    if !per_tenant.is_finite() || per_tenant < 0.0 {
        return Err(invalid(
            "max-patches-per-second-per-tenant",
            "must be 0 (off) or a positive rate",
        ));
    }
    let per_tenant_rate = (per_tenant > 0.0).then_some(per_tenant);
    Ok((tenant_label, per_tenant_rate))
}

/// `--sharding` or `--enable-ha`: the replica's identity and the Lease timings.
fn shard_settings(f: &Flags) -> Result<Option<shard::ShardSettings>, ConfigError> {
    let shard = if f.sharding || f.enable_ha {
        let flag = if f.sharding { "sharding" } else { "enable-ha" };
        let me = f
            .pod_name
            .clone()
            .filter(|s| !s.is_empty())
            .ok_or_else(|| {
                invalid(
                    flag,
                    "needs POD_NAME (the replica's identity) in the environment",
                )
            })?;
        // --leader-election-namespace, else the pod's own (Reloader v2 also needs POD_NAMESPACE
        // with --enable-ha, so it is required either way).
        let pod_namespace = f
            .pod_namespace
            .clone()
            .filter(|s| !s.is_empty())
            .ok_or_else(|| {
                invalid(
                    flag,
                    "needs POD_NAMESPACE (where the Leases live) in the environment",
                )
            })?;
        let namespace = f
            .leader_election_namespace
            .as_deref()
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map_or(pod_namespace, String::from);
        let leader_lease = f.leader_election_id.trim().to_string();
        if leader_lease.is_empty() {
            return Err(invalid("leader-election-id", "must name a Lease"));
        }
        let (lease_duration, renew_deadline, retry_period) =
            (f.lease_duration, f.renew_deadline, f.retry_period);
        // The Lease records its duration in whole seconds, and other replicas judge expiry from
        // that record: a fraction would be cut off there, so the Lease could run out for them
        // before this replica reaches its renew deadline (two leaders). Reloader refuses it too.
        if lease_duration.subsec_nanos() != 0 {
            return Err(invalid(
                "lease-duration",
                "(--leader-election-lease-duration) must be a whole number of seconds",
            ));
        }
        if renew_deadline >= lease_duration {
            return Err(invalid(
                "renew-deadline",
                "(--leader-election-renew-deadline) must be shorter than --lease-duration \
                 (--leader-election-lease-duration)",
            ));
        }
        if retry_period >= renew_deadline {
            return Err(invalid(
                "retry-period",
                "(--leader-election-retry-period) must be shorter than --renew-deadline \
                 (--leader-election-renew-deadline)",
            ));
        }
        Some(shard::ShardSettings {
            namespace,
            me,
            leader_lease,
            release_on_cancel: f.leader_election_release_on_cancel,
            sharding: f.sharding,
            server_sharding: f.server_side_sharding,
            lease_duration,
            renew_deadline,
            retry_period,
        })
    } else {
        None
    };
    Ok(shard)
}

/// The settings these flags give (the program's name is added): for the tests of every module
/// whose behaviour follows from flags.
#[cfg(test)]
pub(crate) fn settings_from_flags(args: &[&str]) -> Result<Settings, ConfigError> {
    use clap::Parser;
    let mut argv = vec!["kube-reloader"];
    argv.extend_from_slice(args);
    Settings::try_from(Flags::try_parse_from(argv).expect("flags parse"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn settings(args: &[&str]) -> Result<Settings, ConfigError> {
        settings_from_flags(args)
    }

    #[test]
    fn defaults_match_reloader() {
        let s = settings(&[]).unwrap();
        assert_eq!(s.strategy, ReloadStrategy::EnvVars);
        assert!(!s.auto_reload_all && !s.reload_on_create && !s.reload_on_delete);
        assert_eq!(s.scope, NamespaceScope::All);
        assert_eq!(s.keys.auto, "reloader.stakater.com/auto");
        assert_eq!(s.min_reload_interval, Duration::ZERO);
    }

    #[test]
    fn unknown_strategy_names_the_flag() {
        let err = settings(&["--reload-strategy", "rolling"]).unwrap_err();
        assert!(err.to_string().contains("--reload-strategy"), "{err}");
    }

    #[test]
    fn resources_to_ignore_rejects_both_and_unknown() {
        assert!(settings(&["--resources-to-ignore", "configmaps,secrets"]).is_err());
        assert!(settings(&["--resources-to-ignore", "pods"]).is_err());
        let s = settings(&["--resources-to-ignore=ConfigMaps"]).unwrap();
        assert!(!s.watches_config(ConfigKind::ConfigMap));
        assert!(s.watches_config(ConfigKind::Secret));
    }

    #[test]
    fn ignored_workload_types() {
        let s = settings(&["--ignored-workload-types", "jobs,cronjobs"]).unwrap();
        assert!(!s.handles_workload(WorkloadKind::Job));
        assert!(!s.handles_workload(WorkloadKind::CronJob));
        assert!(s.handles_workload(WorkloadKind::Deployment));
        assert!(settings(&["--ignored-workload-types", "deployments"]).is_err());
    }

    #[test]
    fn go_style_bool_flags() {
        let s = settings(&[
            "--reload-on-create=true",
            "--auto-reload-all",
            "--is-Argo-Rollouts=false",
        ])
        .unwrap();
        assert!(s.reload_on_create && s.auto_reload_all && !s.argo_rollouts);
        let s = settings(&["--reload-on-delete", "true", "--sync-after-restart=0"]).unwrap();
        assert!(s.reload_on_delete && !s.sync_after_restart);
    }

    #[test]
    fn namespaces_scope() {
        let s = settings(&["--namespaces", "a, b"]).unwrap();
        assert_eq!(s.scope, NamespaceScope::Only(vec!["a".into(), "b".into()]));
    }

    #[test]
    fn ignore_list_and_namespace_selector_only_apply_in_global_mode() {
        let filters = [
            "--namespaces-to-ignore=a,kube-system",
            "--namespace-selector=team=x",
        ];
        let global = settings(&filters).unwrap();
        assert_eq!(global.namespaces_to_ignore, ["a", "kube-system"]);
        assert_eq!(global.namespace_selector.as_deref(), Some("team=x"));
        let scoped = settings(&[&filters[..], &["--namespaces=a,b"]].concat()).unwrap();
        assert!(scoped.namespaces_to_ignore.is_empty());
        assert_eq!(scoped.namespace_selector, None);
    }

    #[test]
    fn sharding_needs_identity_and_sane_timings() {
        // SAFETY-free: the flags are passed explicitly, no environment is read for these.
        let err = settings(&["--sharding"]).unwrap_err();
        assert!(err.to_string().contains("POD_NAME"), "{err}");
        let s = settings(&["--sharding", "--pod-name=r0", "--pod-namespace=ops"]).unwrap();
        let shard = s.shard.unwrap();
        assert_eq!(shard.lease_duration, Duration::from_secs(15));
        assert!(shard.sharding);
        let err = settings(&[
            "--enable-ha",
            "--pod-name=r0",
            "--pod-namespace=ops",
            "--renew-deadline=20s",
        ])
        .unwrap_err();
        assert!(err.to_string().contains("--renew-deadline"), "{err}");
    }

    #[test]
    fn helm_release_secrets_are_excluded_server_side_unless_asked_otherwise() {
        let s = settings(&[]).unwrap();
        assert_eq!(
            s.config_field_selector(ConfigKind::Secret).as_deref(),
            Some("type!=helm.sh/release.v1")
        );
        assert_eq!(s.config_field_selector(ConfigKind::ConfigMap), None);
        let s = settings(&["--ignore-secret-types="]).unwrap();
        assert_eq!(s.config_field_selector(ConfigKind::Secret), None);
        let s = settings(&["--ignore-secret-types=helm.sh/release.v1, kubernetes.io/tls"]).unwrap();
        assert_eq!(
            s.config_field_selector(ConfigKind::Secret).as_deref(),
            Some("type!=helm.sh/release.v1,type!=kubernetes.io/tls")
        );
        let err = settings(&["--ignore-secret-types=a=b"]).unwrap_err();
        assert!(err.to_string().contains("--ignore-secret-types"), "{err}");
    }

    #[test]
    fn zero_rate_is_rejected() {
        let err = settings(&["--max-patches-per-second", "0"]).unwrap_err();
        assert!(err.to_string().contains("max-patches-per-second"));
    }

    #[test]
    fn duration_flags_are_go_durations_shown_as_go_prints_them() {
        let flags = Flags::try_parse_from(["kube-reloader", "--min-reload-interval=90s"]).unwrap();
        assert_eq!(flags.min_reload_interval, Duration::from_secs(90));
        let shown = serde_json::to_value(&flags).unwrap();
        assert_eq!(shown["minReloadInterval"], "1m30s");
        assert_eq!(shown["leaseDuration"], "15s");
        for bad in [
            "--lease-duration=0s",
            "--max-retry-backoff=0",
            "--retry-period=soon",
        ] {
            assert!(
                Flags::try_parse_from(["kube-reloader", bad]).is_err(),
                "{bad}"
            );
        }
        assert!(Flags::try_parse_from(["kube-reloader", "--min-reload-interval=0s"]).is_ok());
    }

    /// #1206 and Reloader v2: `--leader-election-*` are the Lease settings kube-reloader has.
    #[test]
    fn reloaders_leader_election_flags_set_the_lease_settings() {
        let ha = ["--enable-ha", "--pod-name=r0", "--pod-namespace=ops"];
        let s = settings(
            &[
                &ha[..],
                &[
                    "--leader-election-lease-duration=30s",
                    "--leader-election-renew-deadline=20s",
                    "--leader-election-retry-period=4s",
                    "--leader-election-id=reloader-leader-election",
                    "--leader-election-namespace=locks",
                    "--leader-election-release-on-cancel=false",
                ],
            ]
            .concat(),
        )
        .unwrap();
        let shard = s.shard.unwrap();
        assert_eq!(
            (
                shard.lease_duration,
                shard.renew_deadline,
                shard.retry_period
            ),
            (
                Duration::from_secs(30),
                Duration::from_secs(20),
                Duration::from_secs(4)
            )
        );
        assert_eq!(shard.leader_lease, "reloader-leader-election");
        assert_eq!(shard.namespace, "locks");
        assert!(!shard.release_on_cancel && !shard.sharding);
        // Defaults: Reloader v1's Lease, in the pod's namespace, handed back on exit.
        let shard = settings(&ha).unwrap().shard.unwrap();
        assert_eq!(shard.leader_lease, "stakater-reloader-lock");
        assert_eq!(shard.namespace, "ops");
        assert!(shard.release_on_cancel);
        // One setting under two names: giving both is an error, not a silent pick.
        assert!(
            Flags::try_parse_from([
                "kube-reloader",
                "--lease-duration=20s",
                "--leader-election-lease-duration=30s",
            ])
            .is_err()
        );
    }

    #[test]
    fn leader_election_timings_are_checked_naming_reloaders_flag() {
        let ha = ["--enable-ha", "--pod-name=r0", "--pod-namespace=ops"];
        for (bad, flag) in [
            (
                "--leader-election-lease-duration=15500ms",
                "--leader-election-lease-duration",
            ),
            (
                "--leader-election-renew-deadline=15s",
                "--leader-election-renew-deadline",
            ),
            (
                "--leader-election-retry-period=10s",
                "--leader-election-retry-period",
            ),
        ] {
            let err = settings(&[&ha[..], &[bad]].concat()).unwrap_err();
            assert!(err.to_string().contains(flag), "{bad}: {err}");
        }
        let err = settings(&[&ha[..], &["--leader-election-id= "]].concat()).unwrap_err();
        assert!(err.to_string().contains("--leader-election-id"), "{err}");
        assert!(
            Flags::try_parse_from(["kube-reloader", "--leader-election-retry-period=0s"]).is_err()
        );
    }

    /// Reloader v2 makes the exclude and SecretProviderClass annotation keys configurable.
    #[test]
    fn reloader_v2_annotation_flags_set_the_keys() {
        let s = settings(&[
            "--configmap-exclude-annotation=acme.io/cm-exclude",
            "--secret-exclude-annotation=acme.io/secret-exclude",
            "--secretproviderclass-annotation=acme.io/spc",
            "--secretproviderclass-auto-annotation=acme.io/spc-auto",
            "--secretproviderclass-exclude-annotation=acme.io/spc-exclude",
        ])
        .unwrap();
        assert_eq!(s.keys.configmap_exclude, "acme.io/cm-exclude");
        assert_eq!(s.keys.secret_exclude, "acme.io/secret-exclude");
        assert_eq!(s.keys.spc_reload, "acme.io/spc");
        assert_eq!(s.keys.spc_auto, "acme.io/spc-auto");
        assert_eq!(s.keys.spc_exclude, "acme.io/spc-exclude");
        assert_eq!(settings(&[]).unwrap().keys, AnnotationKeys::default());
    }

    #[test]
    fn is_openshift_takes_reloader_v2s_auto() {
        for auto in ["--is-openshift=auto", "--is-openshift="] {
            assert!(!settings(&[auto]).unwrap().openshift, "{auto}");
        }
        assert!(settings(&["--is-openshift"]).unwrap().openshift);
        assert!(Flags::try_parse_from(["kube-reloader", "--is-openshift=sometimes"]).is_err());
    }

    /// Reloader v2 reads every flag from the environment too (viper: the flag's name upper-cased,
    /// `-` as `_`), a flag given on the command line winning. Each of its flags is accepted here
    /// under its name and reads that variable.
    #[test]
    fn every_reloader_v2_flag_is_accepted_and_settable_from_the_environment() {
        use clap::CommandFactory;
        const RELOADER_V2_FLAGS: &[&str] = &[
            "auto-reload-all",
            "reload-strategy",
            "is-Argo-Rollouts",
            "is-openshift",
            "enable-csi-integration",
            "reload-on-create",
            "reload-on-delete",
            "sync-after-restart",
            "enable-ha",
            "leader-election-id",
            "leader-election-namespace",
            "leader-election-lease-duration",
            "leader-election-renew-deadline",
            "leader-election-retry-period",
            "leader-election-release-on-cancel",
            "webhook-url",
            "resources-to-ignore",
            "ignored-workload-types",
            "namespaces-to-ignore",
            "namespace-selector",
            "resource-label-selector",
            "log-format",
            "log-level",
            "metrics-addr",
            "health-addr",
            "enable-pprof",
            "pprof-addr",
            "auto-annotation",
            "configmap-auto-annotation",
            "secret-auto-annotation",
            "configmap-annotation",
            "secret-annotation",
            "configmap-exclude-annotation",
            "secret-exclude-annotation",
            "secretproviderclass-auto-annotation",
            "secretproviderclass-annotation",
            "secretproviderclass-exclude-annotation",
            "auto-search-annotation",
            "search-match-annotation",
            "ignore-annotation",
            "pause-deployment-annotation",
            "pause-deployment-time-annotation",
            "namespaces",
            "alert-on-reload",
            "alert-webhook-url",
            "alert-sink",
            "alert-proxy",
            "alert-additional-info",
            "alert-structured",
        ];
        let command = Flags::command();
        for name in RELOADER_V2_FLAGS {
            let arg = command
                .get_arguments()
                .find(|a| {
                    a.get_long() == Some(*name)
                        || a.get_all_aliases().is_some_and(|all| all.contains(name))
                })
                .unwrap_or_else(|| panic!("--{name} is not a flag"));
            let want = name.to_ascii_uppercase().replace('-', "_");
            assert_eq!(
                arg.get_env().and_then(|e| e.to_str()),
                Some(want.as_str()),
                "--{name}"
            );
        }
    }

    #[test]
    fn alert_proxy_is_reloader_v2s_name_and_wins_over_the_v1_variable() {
        let flags = Flags::try_parse_from([
            "kube-reloader",
            "--alert-webhook-proxy=http://v1:3128",
            "--alert-proxy=http://v2:3128",
            "--alert-structured",
        ])
        .unwrap();
        let env = &flags.environment;
        assert_eq!(
            env.alert_var("ALERT_WEBHOOK_PROXY").as_deref(),
            Some("http://v2:3128")
        );
        assert_eq!(env.alert_var("ALERT_STRUCTURED").as_deref(), Some("true"));
        let flags =
            Flags::try_parse_from(["kube-reloader", "--alert-webhook-proxy=http://v1:3128"])
                .unwrap();
        assert_eq!(
            flags
                .environment
                .alert_var("ALERT_WEBHOOK_PROXY")
                .as_deref(),
            Some("http://v1:3128")
        );
    }

    #[test]
    fn reloaders_environment_is_read_by_the_flag_parser_and_kept_out_of_meta_info() {
        use clap::CommandFactory;
        crate::explain::cli::Cli::command().debug_assert();
        let flags = Flags::try_parse_from([
            "kube-reloader",
            "--alert-on-reload=true",
            "--alert-webhook-url=https://hooks.example/secret-token",
            "--metrics-count-by-namespace=enabled",
        ])
        .unwrap();
        let env = &flags.environment;
        assert!(env.counts_by_namespace());
        assert_eq!(
            env.alert_var("ALERT_WEBHOOK_URL").as_deref(),
            Some("https://hooks.example/secret-token")
        );
        assert_eq!(env.alert_var("ALERT_SINK"), None);
        let shown = serde_json::to_value(&flags).unwrap().to_string();
        assert!(!shown.contains("secret-token"), "{shown}");
    }
}
