//! What the watches learn about the cluster as they run, kept here apart from the code that
//! learns it so that [`super::context::WatchContext`] holds it without importing that code:
//! the workload kinds found by LIST (`listed.rs`), the optional APIs served (`served.rs`),
//! Rollouts whose template is a Deployment's (`workload_refs.rs`) and Secrets of an ignored type
//! (`ignored_secrets.rs`) and the wire format of each watch (`protobuf_watch.rs`).
//! `/debug/explain` reads the last three.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use dashmap::DashMap;

use crate::index::WorkloadObject;
use crate::model::{ConfigKey, WorkloadKind};
use crate::resources::OptionalApi;

/// The kinds found by LIST, each with the lock that orders its lists.
#[derive(Default)]
pub(super) struct ListedKinds {
    locks: HashMap<WorkloadKind, tokio::sync::Mutex<()>>,
}

impl ListedKinds {
    pub(super) fn new(kinds: BTreeSet<WorkloadKind>) -> Self {
        Self {
            locks: kinds.into_iter().map(|k| (k, Default::default())).collect(),
        }
    }

    pub(super) fn contains(&self, kind: WorkloadKind) -> bool {
        self.locks.contains_key(&kind)
    }

    pub(super) fn is_empty(&self) -> bool {
        self.locks.is_empty()
    }

    pub(super) fn kinds(&self) -> impl Iterator<Item = WorkloadKind> + '_ {
        self.locks.keys().copied()
    }

    /// The lock that orders `kind`'s lists (a kind not listed has none).
    pub(super) fn order(&self, kind: WorkloadKind) -> Option<&tokio::sync::Mutex<()>> {
        self.locks.get(&kind)
    }
}

/// What the last check of each optional API the settings turn on found (read by explain and the
/// backfills; written by the kinds' own tasks).
#[derive(Clone, Default)]
pub struct ServedApis {
    known: Arc<Mutex<BTreeMap<OptionalApi, bool>>>,
}

impl ServedApis {
    /// False only for an API found not served (or not yet found served after a failed check).
    pub fn allows(&self, api: Option<OptionalApi>) -> bool {
        api.is_none_or(|api| self.known.lock().unwrap().get(&api) != Some(&false))
    }

    /// The optional APIs checked so far and whether each is served.
    pub fn snapshot(&self) -> Vec<(OptionalApi, bool)> {
        self.known
            .lock()
            .unwrap()
            .iter()
            .map(|(api, served)| (*api, *served))
            .collect()
    }

    /// Records a check; true when it changed what was known.
    pub(super) fn record(&self, api: OptionalApi, served: bool) -> bool {
        self.known.lock().unwrap().insert(api, served) != Some(served)
    }
}

/// The format each watched resource is read in, as the watches settled it (`--wire-format`
/// and what the server answered); read by `/debug/explain`.
#[derive(Clone, Default)]
pub struct WireFormats {
    known: Arc<Mutex<BTreeMap<&'static str, &'static str>>>,
}

impl WireFormats {
    /// (resource, format) for every watched resource.
    pub fn snapshot(&self) -> Vec<(&'static str, &'static str)> {
        let known = self.known.lock().unwrap();
        known.iter().map(|(r, f)| (*r, *f)).collect()
    }

    pub(super) fn record(&self, resource: &'static str, format: &'static str) {
        self.known.lock().unwrap().insert(resource, format);
    }

    /// The server refused protobuf for `resource` (or the settings say JSON).
    pub(super) fn is_json(&self, resource: &str) -> bool {
        self.known.lock().unwrap().get(resource) == Some(&"json")
    }
}

/// (namespace, Deployment name).
pub(super) type DeploymentId = (String, String);

#[derive(Default)]
pub(super) struct WorkloadRefs {
    /// The Rollouts using each Deployment's template, as last seen, by name.
    users: DashMap<DeploymentId, BTreeMap<String, WorkloadObject>>,
    /// Each used Deployment as last seen.
    deployments: DashMap<DeploymentId, WorkloadObject>,
    /// Which Deployment each Rollout (namespace, name) uses.
    used_by: DashMap<(String, String), String>,
}

impl WorkloadRefs {
    /// Records that `rollout` uses `deployment`'s template (and forgets what it used before).
    pub(super) fn record(
        &self,
        namespace: &str,
        name: &str,
        deployment: &str,
        rollout: &WorkloadObject,
    ) {
        let id = (namespace.to_string(), name.to_string());
        if let Some(before) = self.used_by.insert(id, deployment.to_string())
            && before != deployment
        {
            self.drop_user(namespace, &before, name);
        }
        self.users
            .entry((namespace.to_string(), deployment.to_string()))
            .or_default()
            .insert(name.to_string(), rollout.clone());
    }

    /// The used Deployment `id` as last seen.
    pub(super) fn deployment(&self, id: &DeploymentId) -> Option<WorkloadObject> {
        self.deployments.get(id).map(|d| d.clone())
    }

    /// Keeps the used Deployment `id` as just read.
    pub(super) fn keep_deployment(&self, id: DeploymentId, deployment: WorkloadObject) {
        self.deployments.insert(id, deployment);
    }

    /// The Rollout `namespace/name` no longer uses a Deployment's template (or was deleted).
    pub(super) fn forget(&self, namespace: &str, name: &str) {
        if let Some((_, deployment)) = self
            .used_by
            .remove(&(namespace.to_string(), name.to_string()))
        {
            self.drop_user(namespace, &deployment, name);
        }
    }

    fn drop_user(&self, namespace: &str, deployment: &str, rollout: &str) {
        let id = (namespace.to_string(), deployment.to_string());
        let now_unused = self.users.get_mut(&id).is_some_and(|mut users| {
            users.remove(rollout);
            users.is_empty()
        });
        if now_unused {
            self.users.remove(&id);
            self.deployments.remove(&id);
        }
    }

    /// When `deployment` is used by Rollouts: keeps it and returns them, to be indexed again.
    pub(super) fn users_of(&self, deployment: &WorkloadObject) -> Vec<WorkloadObject> {
        // Every Deployment event passes here; almost no cluster has such Rollouts.
        if self.users.is_empty() {
            return Vec::new();
        }
        let meta = &deployment.metadata;
        let (Some(ns), Some(name)) = (meta.namespace.clone(), meta.name.clone()) else {
            return Vec::new();
        };
        let id = (ns, name);
        let Some(users) = self.users.get(&id).map(|u| u.values().cloned().collect()) else {
            return Vec::new();
        };
        self.deployments.insert(id, deployment.clone());
        users
    }
}

/// Secrets found to exist with an ignored type, and that type: what `/debug/explain` needs to
/// say no for them as the controller does. Written by the check, read by the explainer.
pub type IgnoredSecretTypes = Arc<dashmap::DashMap<ConfigKey, String, ahash::RandomState>>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_api_found_missing_is_not_listed() {
        let served = ServedApis::default();
        assert!(served.allows(None), "built-in kinds");
        assert!(served.allows(Some(OptionalApi::CSI)), "not checked yet");
        assert!(served.record(OptionalApi::CSI, false));
        assert!(!served.allows(Some(OptionalApi::CSI)));
        assert!(served.allows(Some(OptionalApi::ARGO_ROLLOUTS)));
        assert!(!served.record(OptionalApi::CSI, false), "no change");
        assert!(served.record(OptionalApi::CSI, true));
        assert!(served.allows(Some(OptionalApi::CSI)));
        assert_eq!(served.snapshot(), vec![(OptionalApi::CSI, true)]);
    }
}
