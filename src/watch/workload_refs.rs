//! Argo Rollouts whose pod template lives in a Deployment (`spec.workloadRef`). The Rollout has
//! no template of its own, so it is indexed with its referenced Deployment's: what that template
//! uses reloads the Rollout (by `spec.restartAt`: the template is not the Rollout's to write).
//! The Deployment is read once when a Rollout first names it, then kept current from the
//! Deployment watch, so a template edited later is what the Rollout is indexed with. Only the
//! Rollouts that use a Deployment this way, and those Deployments, are kept.

use kube::Api;
use tracing::{debug, warn};

use crate::index::WorkloadObject;
use crate::model::WorkloadKind;
use crate::resources::api_resource;

use super::context::WatchContext;

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
        let known = self.workload_refs.deployment(&id);
        let template = match known {
            Some(d) => d,
            None => {
                let ar = api_resource(WorkloadKind::Deployment);
                let api: Api<WorkloadObject> = Api::namespaced_with(self.client.clone(), &ns, &ar);
                match api.get_opt(&deployment).await {
                    Ok(Some(d)) => {
                        self.workload_refs.keep_deployment(id, d.clone());
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
