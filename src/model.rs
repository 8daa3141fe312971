//! Plain identities shared by every stage of the data path. No Kubernetes I/O here.

use std::fmt;
use std::sync::Arc;

use crate::custom_kinds::{CustomKind, CustomKindId};

/// The kinds of configuration whose changes roll workloads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ConfigKind {
    ConfigMap,
    Secret,
    SecretProviderClass,
}

impl ConfigKind {
    pub const ALL: [ConfigKind; 3] = [
        ConfigKind::ConfigMap,
        ConfigKind::Secret,
        ConfigKind::SecretProviderClass,
    ];

    /// Suffix of the `STAKATER_<NAME>_<SUFFIX>` env var and the `type` in the reload annotation.
    pub fn env_suffix(self) -> &'static str {
        match self {
            ConfigKind::ConfigMap => "CONFIGMAP",
            ConfigKind::Secret => "SECRET",
            ConfigKind::SecretProviderClass => "SECRETPROVIDERCLASS",
        }
    }

    /// Name used in Events, alerts and metrics (the reference's spelling).
    pub fn as_str(self) -> &'static str {
        match self {
            ConfigKind::ConfigMap => "configmap",
            ConfigKind::Secret => "secret",
            ConfigKind::SecretProviderClass => "secretproviderclass",
        }
    }
}

impl fmt::Display for ConfigKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which keys of a config a workload's pod template reads: what its key-precise value covers.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Counted {
    /// The whole config (`envFrom`, a volume without `items`, or the mode off).
    #[default]
    Whole,
    /// Only these keys (`env[].valueFrom` key refs, `items` of volumes), sorted, deduplicated.
    Keys(Arc<[Box<str>]>),
}

impl Counted {
    pub fn keys(mut keys: Vec<Box<str>>) -> Self {
        keys.sort_unstable();
        keys.dedup();
        Counted::Keys(keys.into())
    }
}

/// The workload kinds kube-reloader can roll (serialized as their Kubernetes `kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum WorkloadKind {
    Deployment,
    StatefulSet,
    DaemonSet,
    CronJob,
    Job,
    Rollout,
    DeploymentConfig,
    /// A pod opted in by its label `kube-reloader.io/restart-by=eviction`
    /// (`--restart-labelled-pods`): bare pods and pods whose owner ignores its template. The pod
    /// is its own template; it is reloaded by eviction.
    Pod,
    /// A kind declared with `--custom-kind` (`crate::custom_kinds`).
    Custom(CustomKindId),
}

impl WorkloadKind {
    pub const BUILT_IN: [WorkloadKind; 8] = [
        WorkloadKind::Deployment,
        WorkloadKind::StatefulSet,
        WorkloadKind::DaemonSet,
        WorkloadKind::CronJob,
        WorkloadKind::Job,
        WorkloadKind::Rollout,
        WorkloadKind::DeploymentConfig,
        WorkloadKind::Pod,
    ];

    /// The built-in kinds and every declared custom kind.
    pub fn all() -> Vec<WorkloadKind> {
        let custom = crate::custom_kinds::registered().map(WorkloadKind::Custom);
        Self::BUILT_IN.into_iter().chain(custom).collect()
    }

    /// The kind named `name` (its Kubernetes `kind`), built in or declared.
    pub fn named(name: &str) -> Option<WorkloadKind> {
        Self::all().into_iter().find(|k| k.as_str() == name)
    }

    /// Its declaration, for a custom kind.
    pub fn custom(self) -> Option<&'static CustomKind> {
        match self {
            WorkloadKind::Custom(id) => Some(id.get()),
            _ => None,
        }
    }

    /// The Kubernetes `kind` (also the reference's `ResourceType`).
    pub fn as_str(self) -> &'static str {
        match self {
            WorkloadKind::Deployment => "Deployment",
            WorkloadKind::StatefulSet => "StatefulSet",
            WorkloadKind::DaemonSet => "DaemonSet",
            WorkloadKind::CronJob => "CronJob",
            WorkloadKind::Job => "Job",
            WorkloadKind::Rollout => "Rollout",
            WorkloadKind::DeploymentConfig => "DeploymentConfig",
            WorkloadKind::Pod => "Pod",
            WorkloadKind::Custom(id) => id.get().kind.as_str(),
        }
    }

    /// JSON pointer to the pod template inside the object (a pod is its own: the whole object,
    /// whose `metadata` and `spec` are a template's).
    pub fn pod_template_pointer(self) -> &'static str {
        match self {
            WorkloadKind::CronJob => "/spec/jobTemplate/spec/template",
            WorkloadKind::Pod => "",
            WorkloadKind::Custom(id) => id.get().template.as_str(),
            _ => "/spec/template",
        }
    }
}

impl serde::Serialize for WorkloadKind {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl fmt::Display for WorkloadKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The one shared copy of a namespace's name: every key the index keeps for a namespace points
/// at it (at 10k namespaces and 300k objects, one copy per key cost ~14 MiB). Names nobody else
/// holds any more are swept whenever the set has doubled since the last sweep.
pub fn intern_namespace(namespace: &str) -> Arc<str> {
    struct Names {
        set: std::collections::HashSet<Arc<str>, ahash::RandomState>,
        sweep_at: usize,
    }
    static NAMES: std::sync::LazyLock<std::sync::Mutex<Names>> = std::sync::LazyLock::new(|| {
        std::sync::Mutex::new(Names {
            set: Default::default(),
            sweep_at: 1024,
        })
    });
    let mut names = NAMES.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(name) = names.set.get(namespace) {
        return name.clone();
    }
    if names.set.len() >= names.sweep_at {
        names.set.retain(|n| Arc::strong_count(n) > 1);
        names.sweep_at = (names.set.len() * 2).max(1024);
    }
    let name: Arc<str> = Arc::from(namespace);
    names.set.insert(name.clone());
    name
}

/// Identity of one config object. Namespaces and names are shared `Arc<str>` because the
/// reverse index holds each of them many times.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConfigKey {
    pub kind: ConfigKind,
    pub namespace: Arc<str>,
    pub name: Arc<str>,
}

impl ConfigKey {
    pub fn new(kind: ConfigKind, namespace: &str, name: &str) -> Self {
        Self {
            kind,
            namespace: Arc::from(namespace),
            name: Arc::from(name),
        }
    }

    /// A key the index keeps: its namespace is the shared copy ([`intern_namespace`]).
    pub fn interned(kind: ConfigKind, namespace: &str, name: &str) -> Self {
        Self {
            kind,
            namespace: intern_namespace(namespace),
            name: Arc::from(name),
        }
    }
}

impl fmt::Display for ConfigKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}", self.kind, self.namespace, self.name)
    }
}

/// Identity of one workload.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WorkloadKey {
    pub kind: WorkloadKind,
    pub namespace: Arc<str>,
    pub name: Arc<str>,
}

impl WorkloadKey {
    pub fn new(kind: WorkloadKind, namespace: &str, name: &str) -> Self {
        Self {
            kind,
            namespace: Arc::from(namespace),
            name: Arc::from(name),
        }
    }

    /// A key the index keeps: its namespace is the shared copy ([`intern_namespace`]).
    pub fn interned(kind: WorkloadKind, namespace: &str, name: &str) -> Self {
        Self {
            kind,
            namespace: intern_namespace(namespace),
            name: Arc::from(name),
        }
    }
}

impl fmt::Display for WorkloadKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}", self.kind, self.namespace, self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_of_one_namespace_share_its_name() {
        let a = ConfigKey::interned(ConfigKind::ConfigMap, "tenant-a", "x");
        let b = WorkloadKey::interned(WorkloadKind::Deployment, "tenant-a", "y");
        assert!(Arc::ptr_eq(&a.namespace, &b.namespace));
        assert_eq!(a, ConfigKey::new(ConfigKind::ConfigMap, "tenant-a", "x"));
    }
}
