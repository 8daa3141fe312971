//! The Kubernetes API resource of each kind kube-reloader reads or writes, in one place for the
//! watches, the writer, Events and explain. Argo Rollouts, OpenShift DeploymentConfigs and the
//! Secrets Store CSI driver's kinds are not in k8s-openapi: they are addressed dynamically.

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use kube::core::{ApiResource, GroupVersionKind};

use crate::model::{ConfigKind, WorkloadKey, WorkloadKind};

/// The API resource of each workload kind.
pub fn api_resource(kind: WorkloadKind) -> ApiResource {
    match kind {
        WorkloadKind::Deployment => ApiResource::erase::<Deployment>(&()),
        WorkloadKind::StatefulSet => ApiResource::erase::<StatefulSet>(&()),
        WorkloadKind::DaemonSet => ApiResource::erase::<DaemonSet>(&()),
        WorkloadKind::CronJob => ApiResource::erase::<CronJob>(&()),
        WorkloadKind::Job => ApiResource::erase::<Job>(&()),
        WorkloadKind::Pod => ApiResource::erase::<Pod>(&()),
        WorkloadKind::Rollout => ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("argoproj.io", "v1alpha1", "Rollout"),
            "rollouts",
        ),
        WorkloadKind::DeploymentConfig => ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("apps.openshift.io", "v1", "DeploymentConfig"),
            "deploymentconfigs",
        ),
        WorkloadKind::Custom(id) => {
            let declared = id.get();
            ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk(&declared.group, &declared.version, &declared.kind),
                &declared.plural,
            )
        }
    }
}

/// An API that is served only where its CRD is installed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct OptionalApi {
    pub group_version: &'static str,
    /// The resource's plural, as discovery lists it.
    pub resource: &'static str,
    /// What a user turned on, for log lines.
    pub feature: &'static str,
}

impl OptionalApi {
    pub const CSI: OptionalApi = OptionalApi {
        group_version: "secrets-store.csi.x-k8s.io/v1",
        resource: "secretproviderclasspodstatuses",
        feature: "CSI integration (--enable-csi-integration)",
    };
    pub const ARGO_ROLLOUTS: OptionalApi = OptionalApi {
        group_version: "argoproj.io/v1alpha1",
        resource: "rollouts",
        feature: "Argo Rollouts (--is-Argo-Rollouts)",
    };
    pub const DEPLOYMENT_CONFIGS: OptionalApi = OptionalApi {
        group_version: "apps.openshift.io/v1",
        resource: "deploymentconfigs",
        feature: "OpenShift DeploymentConfigs (--is-openshift)",
    };

    pub fn of_workload(kind: WorkloadKind) -> Option<OptionalApi> {
        match kind {
            WorkloadKind::Rollout => Some(Self::ARGO_ROLLOUTS),
            WorkloadKind::DeploymentConfig => Some(Self::DEPLOYMENT_CONFIGS),
            WorkloadKind::Custom(id) => {
                let declared = id.get();
                Some(OptionalApi {
                    group_version: &declared.api_version,
                    resource: &declared.plural,
                    feature: &declared.feature,
                })
            }
            _ => None,
        }
    }

    pub fn of_config(kind: ConfigKind) -> Option<OptionalApi> {
        match kind {
            ConfigKind::SecretProviderClass => Some(Self::CSI),
            _ => None,
        }
    }

    /// `group/version/resource`, the label of its metric and its name in explain.
    pub fn label(&self) -> String {
        format!("{}/{}", self.group_version, self.resource)
    }
}

/// `SecretProviderClassPodStatus`: the object versions one pod has mounted.
pub fn spc_pod_status_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(
            "secrets-store.csi.x-k8s.io",
            "v1",
            "SecretProviderClassPodStatus",
        ),
        "secretproviderclasspodstatuses",
    )
}

/// `SecretProviderClass`: carries the ignore/match annotations of a CSI-mounted secret.
pub fn spc_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("secrets-store.csi.x-k8s.io", "v1", "SecretProviderClass"),
        "secretproviderclasses",
    )
}

/// The `involvedObject` / `regarding` reference of an Event about a workload.
pub fn workload_reference(key: &WorkloadKey, uid: Option<String>) -> ObjectReference {
    let ar = api_resource(key.kind);
    ObjectReference {
        api_version: Some(ar.api_version),
        kind: Some(ar.kind),
        name: Some(key.name.to_string()),
        namespace: Some(key.namespace.to_string()),
        uid,
        ..Default::default()
    }
}

/// The reference of a config, for Events about it.
pub fn config_reference(key: &crate::model::ConfigKey) -> ObjectReference {
    let (api_version, kind) = match key.kind {
        ConfigKind::ConfigMap => ("v1".to_string(), "ConfigMap".to_string()),
        ConfigKind::Secret => ("v1".to_string(), "Secret".to_string()),
        ConfigKind::SecretProviderClass => {
            let ar = spc_resource();
            (ar.api_version, ar.kind)
        }
    };
    ObjectReference {
        api_version: Some(api_version),
        kind: Some(kind),
        name: Some(key.name.to_string()),
        namespace: Some(key.namespace.to_string()),
        ..Default::default()
    }
}

/// Configs per page when lists are paginated (configs can be up to 1 MiB each).
pub const CONFIG_PAGE_SIZE: u32 = 100;
/// Workloads per page when lists are paginated (watch fallback and hand-over backfill).
pub const WORKLOAD_PAGE_SIZE: u32 = 500;

/// The label that opts a pod in to reloads (`--restart-labelled-pods`). Pods are listed and
/// watched with it as their label selector: the API server sends only the pods opted in, so a
/// cluster's other pods (by far the most numerous objects) cost nothing.
pub const LABELLED_POD_SELECTOR: &str = "kube-reloader.io/restart-by=eviction";

/// The label selector every list and watch of `kind` carries.
pub fn workload_label_selector(kind: WorkloadKind) -> Option<&'static str> {
    (kind == WorkloadKind::Pod).then_some(LABELLED_POD_SELECTOR)
}

/// The first page of a list of `kind`'s workloads.
pub fn workload_list_params(kind: WorkloadKind) -> kube::api::ListParams {
    let params = kube::api::ListParams::default().limit(WORKLOAD_PAGE_SIZE);
    match workload_label_selector(kind) {
        Some(selector) => params.labels(selector),
        None => params,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_crd_backed_kind_has_its_api_and_built_in_kinds_have_none() {
        for kind in WorkloadKind::BUILT_IN {
            let api = OptionalApi::of_workload(kind);
            let crd_backed = matches!(kind, WorkloadKind::Rollout | WorkloadKind::DeploymentConfig);
            assert_eq!(api.is_some(), crd_backed, "{kind:?}");
            if let Some(api) = api {
                let ar = api_resource(kind);
                assert_eq!(api.group_version, ar.api_version);
                assert_eq!(api.resource, ar.plural);
            }
        }
        let spc = spc_pod_status_resource();
        assert_eq!(OptionalApi::CSI.group_version, spc.api_version);
        assert_eq!(OptionalApi::CSI.resource, spc.plural);
        assert_eq!(OptionalApi::of_config(ConfigKind::ConfigMap), None);
    }
}
