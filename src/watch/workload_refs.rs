//! Argo Rollouts whose pod template lives in a Deployment (`spec.workloadRef`). The Rollout has
//! no template of its own, so it is indexed with its referenced Deployment's: what that template
//! uses reloads the Rollout (by `spec.restartAt`: the template is not the Rollout's to write).
//! The Deployment is read once when a Rollout first names it, then kept current from the
//! Deployment watch, so a template edited later is what the Rollout is indexed with. Only the
//! Rollouts that use a Deployment this way, and those Deployments, are kept.

use std::collections::BTreeMap;

use dashmap::DashMap;
use kube::Api;
use tracing::{debug, warn};

use crate::index::WorkloadObject;
use crate::model::WorkloadKind;
use crate::resources::api_resource;

use super::WatchContext;

/// (namespace, Deployment name).
type DeploymentId = (String, String);

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
    fn record(&self, namespace: &str, name: &str, deployment: &str, rollout: &WorkloadObject) {
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
    fn users_of(&self, deployment: &WorkloadObject) -> Vec<WorkloadObject> {
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

impl WatchContext {
    /// A Rollout as the index takes it: with its Deployment's template when it uses one.
    pub(super) async fn resolve_rollout(&self, rollout: WorkloadObject) -> WorkloadObject {
        let meta = &rollout.metadata;
        let (Some(ns), Some(name)) = (meta.namespace.clone(), meta.name.clone()) else {
            return rollout;
        };
        let Some(deployment) = rollout.template_deployment().map(String::from) else {
            self.workload_refs.forget(&ns, &name);
            return rollout;
        };
        self.workload_refs.record(&ns, &name, &deployment, &rollout);
        let id = (ns.clone(), deployment.clone());
        let known = self.workload_refs.deployments.get(&id).map(|d| d.clone());
        let template = match known {
            Some(d) => d,
            None => {
                let ar = api_resource(WorkloadKind::Deployment);
                let api: Api<WorkloadObject> = Api::namespaced_with(self.client.clone(), &ns, &ar);
                match api.get_opt(&deployment).await {
                    Ok(Some(d)) => {
                        self.workload_refs.deployments.insert(id, d.clone());
                        d
                    }
                    Ok(None) => {
                        warn!(rollout = %format!("{ns}/{name}"), deployment, "the Deployment of the Rollout's workloadRef does not exist: the Rollout uses no config until it does");
                        return rollout;
                    }
                    Err(error) => {
                        warn!(rollout = %format!("{ns}/{name}"), deployment, %error, "reading the Deployment of the Rollout's workloadRef failed: indexed without its template until the Deployment changes");
                        return rollout;
                    }
                }
            }
        };
        debug!(rollout = %format!("{ns}/{name}"), deployment, "Rollout indexed with its workloadRef's template");
        rollout.with_template_of(&template)
    }

    /// After a Deployment was taken in: the Rollouts using its template, indexed again with it.
    pub(super) async fn refresh_template_users(&self, deployment: &WorkloadObject) {
        for rollout in self.workload_refs.users_of(deployment) {
            let resolved = rollout.with_template_of(deployment);
            self.engine
                .workload_applied(WorkloadKind::Rollout, resolved, self.is_ready())
                .await;
        }
    }
}
