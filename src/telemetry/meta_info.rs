//! Reloader's `reloader-meta-info` ConfigMap: build info, options and deployment info, published
//! in `RELOADER_NAMESPACE` at start so tooling that reads it keeps working.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::config::Flags;

pub const CONFIGMAP_NAME: &str = "reloader-meta-info";

pub struct MetaInfo {
    namespace: String,
    deployment: String,
    options: serde_json::Value,
}

impl MetaInfo {
    /// `None` unless `RELOADER_NAMESPACE` is set (as in Reloader).
    pub fn from_flags(flags: &Flags) -> Option<MetaInfo> {
        let env = &flags.environment;
        let namespace = env.reloader_namespace.clone().filter(|n| !n.is_empty())?;
        Some(MetaInfo {
            namespace,
            deployment: env.reloader_deployment_name.clone().unwrap_or_default(),
            options: serde_json::to_value(flags).unwrap_or_default(),
        })
    }

    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    pub fn configmap(&self) -> serde_json::Value {
        json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": CONFIGMAP_NAME,
                "namespace": self.namespace,
                "labels": {"reloader.stakater.com/meta-info": "reloader-oss"}
            },
            "data": {
                "buildInfo": json!({
                    "rustVersion": env!("CARGO_PKG_RUST_VERSION"),
                    "releaseVersion": env!("CARGO_PKG_VERSION"),
                    "commitHash": option_env!("KUBE_RELOADER_COMMIT").unwrap_or("unknown"),
                }).to_string(),
                "reloaderOptions": self.options.to_string(),
                "deploymentInfo": json!({"name": self.deployment, "namespace": self.namespace}).to_string(),
            }
        })
    }

    /// Creates or updates the ConfigMap; a failure is logged, never fatal. `by_update`: with
    /// get/create/update (what Reloader's RBAC grants) instead of server-side apply.
    pub async fn publish(&self, client: &Client, by_update: bool) {
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), &self.namespace);
        let result = match by_update {
            true => self.create_or_update(&api).await,
            false => {
                let params = PatchParams::apply("kube-reloader").force();
                let patch = Patch::Apply(self.configmap());
                api.patch(CONFIGMAP_NAME, &params, &patch).await.map(drop)
            }
        };
        match result {
            Ok(()) => tracing::info!(namespace = %self.namespace, "published {CONFIGMAP_NAME}"),
            Err(e) => {
                tracing::warn!(namespace = %self.namespace, error = %e, "could not publish {CONFIGMAP_NAME}")
            }
        }
    }

    async fn create_or_update(&self, api: &Api<ConfigMap>) -> Result<(), kube::Error> {
        let mut desired: ConfigMap =
            serde_json::from_value(self.configmap()).expect("a valid ConfigMap");
        match api.get_opt(CONFIGMAP_NAME).await? {
            Some(current) => {
                desired.metadata.resource_version = current.metadata.resource_version;
                api.replace(CONFIGMAP_NAME, &PostParams::default(), &desired)
                    .await
                    .map(drop)
            }
            None => api.create(&PostParams::default(), &desired).await.map(drop),
        }
    }
}
