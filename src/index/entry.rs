//! What the index keeps per config and per workload.

use std::sync::Arc;

use crate::digest::Digest;
use crate::model::{ConfigKey, ConfigKind, WorkloadKey};
use crate::policy::{NamePattern, ReloadPolicy};

/// A config reduced to what decisions need. 56 bytes; no payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConfigState {
    pub digest: Digest,
    pub ignore: bool,
    pub matched: bool,
    /// The object's resourceVersion as a number (0: unknown). Used only to order two views of
    /// the same object: a watch event older than a list already applied is not a change.
    pub resource_version: u64,
}

/// One config a workload's pod template uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexedUse {
    pub kind: ConfigKind,
    pub name: Arc<str>,
    /// The Reloader hash the template already carries for it (env var or annotation).
    pub recorded: Option<Box<str>>,
    /// The template mounts it or reads it from env (false: only named in a reload list).
    pub referenced: bool,
}

/// One workload, immutable once built (replaced whole on update).
#[derive(Debug, Clone)]
pub struct WorkloadEntry {
    pub key: WorkloadKey,
    /// Shared between workloads with the same simple policy ([`ReloadPolicy::shared`]).
    pub policy: Arc<ReloadPolicy>,
    pub uses: Vec<IndexedUse>,
    /// `paused-at` (unix seconds) while kube-reloader holds a pause on a Deployment.
    pub paused_at: Option<i64>,
    /// `spec.paused` of a Deployment.
    pub paused: bool,
}

impl WorkloadEntry {
    pub fn uses_config(&self, kind: ConfigKind, name: &str) -> Option<&IndexedUse> {
        self.uses
            .iter()
            .find(|u| u.kind == kind && &*u.name == name)
    }

    /// The pod template mounts the config or reads it from env.
    pub fn references(&self, kind: ConfigKind, name: &str) -> bool {
        self.uses_config(kind, name).is_some_and(|u| u.referenced)
    }

    /// Configs the index links to this workload: those it uses and literal list entries.
    pub fn edge_configs(&self) -> Vec<ConfigKey> {
        let ns = &self.key.namespace;
        let mut out: Vec<ConfigKey> = self
            .uses
            .iter()
            .map(|u| ConfigKey {
                kind: u.kind,
                namespace: ns.clone(),
                name: u.name.clone(),
            })
            .collect();
        for kind in ConfigKind::ALL {
            for pattern in &self.policy.for_type(kind).explicit {
                if let NamePattern::Literal(name) = pattern {
                    let key = ConfigKey {
                        kind,
                        namespace: ns.clone(),
                        name: name.clone(),
                    };
                    if !out.contains(&key) {
                        out.push(key);
                    }
                }
            }
        }
        out
    }

    pub fn has_patterns(&self) -> bool {
        ConfigKind::ALL.iter().any(|k| {
            self.policy
                .for_type(*k)
                .explicit
                .iter()
                .any(|p| matches!(p, NamePattern::Regex(_)))
        })
    }
}
