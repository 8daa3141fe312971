//! The Kubernetes API resource of each kind kube-reloader reads or writes, in one place for the
//! watches, the writer, Events and explain. Argo Rollouts, OpenShift DeploymentConfigs and the
//! Secrets Store CSI driver's kinds are not in k8s-openapi: they are addressed dynamically.

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::core::{ApiResource, GroupVersionKind};

use crate::model::{WorkloadKey, WorkloadKind};

/// The API resource of each workload kind.
pub fn api_resource(kind: WorkloadKind) -> ApiResource {
    match kind {
        WorkloadKind::Deployment => ApiResource::erase::<Deployment>(&()),
        WorkloadKind::StatefulSet => ApiResource::erase::<StatefulSet>(&()),
        WorkloadKind::DaemonSet => ApiResource::erase::<DaemonSet>(&()),
        WorkloadKind::CronJob => ApiResource::erase::<CronJob>(&()),
        WorkloadKind::Job => ApiResource::erase::<Job>(&()),
        WorkloadKind::Rollout => ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("argoproj.io", "v1alpha1", "Rollout"),
            "rollouts",
        ),
        WorkloadKind::DeploymentConfig => ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("apps.openshift.io", "v1", "DeploymentConfig"),
            "deploymentconfigs",
        ),
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
    use crate::model::ConfigKind;
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
