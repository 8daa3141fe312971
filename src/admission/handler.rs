//! The webhook's answer to one admission review: the workload read, the configs it uses read
//! fresh and hashed (payloads dropped), the patch of `mutation` returned.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kube::Client;
use kube::api::{Api, ListParams};
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};
use tracing::{debug, warn};

use super::mutation::{Admitted, ReadConfig, rolls};
use crate::config::Settings;
use crate::digest::{ConfigSource, DigestPool};
use crate::model::{ConfigKey, ConfigKind, WorkloadKind};

/// Answers admission reviews of workloads.
pub struct Admission {
    client: Client,
    settings: Arc<Settings>,
    /// The watches' hashing threads (a 1 MiB Secret never stalls the runtime serving reviews).
    digests: DigestPool,
}

impl Admission {
    pub fn new(client: Client, settings: Arc<Settings>, digests: DigestPool) -> Self {
        Self {
            client,
            settings,
            digests,
        }
    }

    /// The answer to one review: always allowed; patched when the template lacks a current hash.
    pub async fn review(
        &self,
        review: AdmissionReview<DynamicObject>,
    ) -> AdmissionReview<DynamicObject> {
        let request: AdmissionRequest<DynamicObject> = match review.try_into() {
            Ok(request) => request,
            Err(e) => {
                warn!(error = %e, "admission review without a request");
                return AdmissionResponse::invalid(e.to_string()).into_review();
            }
        };
        let response = AdmissionResponse::from(&request);
        match self.patch(&request).await {
            Some(patch) => match response.clone().with_patch(patch) {
                Ok(patched) => patched.into_review(),
                Err(e) => {
                    warn!(error = %e, "admission patch could not be encoded; admitted unchanged");
                    response.into_review()
                }
            },
            None => response.into_review(),
        }
    }

    async fn patch(&self, request: &AdmissionRequest<DynamicObject>) -> Option<json_patch::Patch> {
        if !matches!(request.operation, Operation::Create | Operation::Update) {
            return None;
        }
        // By group and kind: a declared `Service` is not the core one.
        let kind = WorkloadKind::named(&request.kind.kind).filter(|k| {
            self.settings.handles_workload(*k)
                && crate::resources::api_resource(*k).group == request.kind.group
        })?;
        let namespace = request.namespace.as_deref()?;
        if !self.watches_namespace(namespace).await {
            return None;
        }
        let mut object = serde_json::to_value(request.object.as_ref()?).ok()?;
        if let Some(old) = &request.old_object {
            let old = serde_json::to_value(old).ok()?;
            if !rolls(kind, &old, &object) {
                return None;
            }
        }
        // A create's object may carry no namespace yet: the request names it.
        if let (Some(ns), Some(meta)) = (&request.namespace, object.get_mut("metadata")) {
            meta["namespace"] = serde_json::json!(ns);
        }
        if object
            .pointer("/metadata/name")
            .and_then(|n| n.as_str())
            .is_none_or(str::is_empty)
        {
            // generateName: any name will do for reading the template.
            object["metadata"]["name"] = serde_json::json!(request.name.clone() + "-admitted");
        }
        let workload = format!("{kind}/{namespace}/{}", request.name);
        let patch = match Admitted::read(kind, &object, &self.settings) {
            Ok(admitted) => {
                let wanted = admitted.configs_to_read(&self.settings);
                let read = self.read_configs(&wanted).await;
                let now = jiff::Timestamp::now().as_second();
                admitted.template_patch(&self.settings, &read, now)
            }
            Err(why) => Err(why),
        };
        match patch {
            Ok(ops) => {
                debug!(%workload, operations = ops.len(), "admission: current hashes written into the template");
                serde_json::from_value(serde_json::Value::Array(ops)).ok()
            }
            Err(why) => {
                debug!(%workload, ?why, "admission: nothing to write");
                None
            }
        }
    }

    /// The controller would reload workloads of `namespace`: `--namespaces`,
    /// `--namespaces-to-ignore` and `--namespace-selector` (asked of the API server).
    async fn watches_namespace(&self, namespace: &str) -> bool {
        let settings = &self.settings;
        if !settings.namespace_in_scope(namespace) || settings.namespace_ignored(namespace) {
            return false;
        }
        let Some(selector) = &settings.namespace_selector else {
            return true;
        };
        let api: Api<Namespace> = Api::all(self.client.clone());
        let params = ListParams::default()
            .fields(&format!("metadata.name={namespace}"))
            .labels(selector);
        match api.list(&params).await {
            Ok(list) => !list.items.is_empty(),
            Err(e) => {
                warn!(namespace, error = %e, "admission: namespace not read; admitted unchanged");
                false
            }
        }
    }

    /// The configs of `keys` that exist and that the controller watches (its
    /// `--resource-label-selector`, evaluated by the API server), hashed; payloads dropped.
    async fn read_configs(&self, keys: &[ConfigKey]) -> BTreeMap<ConfigKey, ReadConfig> {
        let mut read = BTreeMap::new();
        for key in keys {
            match self.read_config(key).await {
                Ok(Some(config)) => {
                    read.insert(key.clone(), config);
                }
                Ok(None) => {}
                Err(e) => {
                    warn!(config = %key, error = %e, "admission: config not read; its hash is not written")
                }
            }
        }
        read
    }

    async fn read_config(&self, key: &ConfigKey) -> Result<Option<ReadConfig>, kube::Error> {
        match key.kind {
            ConfigKind::ConfigMap => self.read_one::<ConfigMap>(key).await,
            ConfigKind::Secret => self.read_one::<Secret>(key).await,
            ConfigKind::SecretProviderClass => Ok(None),
        }
    }

    /// Config `key` as the controller's watch of `K` would see it (its label selector and, for
    /// Secrets, the ignored types as a field selector), hashed on the digest pool.
    async fn read_one<K>(&self, key: &ConfigKey) -> Result<Option<ReadConfig>, kube::Error>
    where
        K: ConfigSource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>,
    {
        let by_name = format!("metadata.name={}", key.name);
        let fields = match self.settings.config_field_selector(key.kind) {
            Some(types) => format!("{by_name},{types}"),
            None => by_name,
        };
        let mut params = ListParams::default().fields(&fields);
        if let Some(selector) = &self.settings.resource_label_selector {
            params = params.labels(selector);
        }
        let api: Api<K> = Api::namespaced(self.client.clone(), &key.namespace);
        let Some(config) = api.list(&params).await?.items.into_iter().next() else {
            return Ok(None);
        };
        let keys = &self.settings.keys;
        let annotations = config.meta().annotations.as_ref();
        let flag = |name: &String| {
            annotations
                .and_then(|a| a.get(name))
                .is_some_and(|v| v == "true")
        };
        let (ignore, matched) = (flag(&keys.ignore), flag(&keys.match_));
        let payload = config.into_payload();
        let digest = self.digests.digest(payload).await;
        Ok(digest.ok().map(|digest| ReadConfig {
            ignore,
            matched,
            hash: digest.reloader_hash(),
        }))
    }
}
