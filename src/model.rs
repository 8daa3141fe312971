//! Plain identities shared by every stage of the data path. No Kubernetes I/O here.

use std::fmt;
use std::sync::Arc;

/// The kinds of configuration whose changes roll workloads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
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

/// The workload kinds kube-reloader can roll.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum WorkloadKind {
    Deployment,
    StatefulSet,
    DaemonSet,
    CronJob,
    Job,
    Rollout,
    DeploymentConfig,
}

impl WorkloadKind {
    pub const ALL: [WorkloadKind; 7] = [
        WorkloadKind::Deployment,
        WorkloadKind::StatefulSet,
        WorkloadKind::DaemonSet,
        WorkloadKind::CronJob,
        WorkloadKind::Job,
        WorkloadKind::Rollout,
        WorkloadKind::DeploymentConfig,
    ];

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
        }
    }

    /// JSON pointer to the pod template inside the object.
    pub fn pod_template_pointer(self) -> &'static str {
        match self {
            WorkloadKind::CronJob => "/spec/jobTemplate/spec/template",
            _ => "/spec/template",
        }
    }
}

impl fmt::Display for WorkloadKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
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
}

impl fmt::Display for WorkloadKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}", self.kind, self.namespace, self.name)
    }
}
