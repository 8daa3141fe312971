//! Keeps halts in the cluster (the `kube-reloader-halts` ConfigMap of the controller's
//! namespace, one data key per halted config), so that a restarted replica or the namespace's
//! next owner holds what this one held. One task writes, in the order halts and releases
//! happened: a release never lands before the halt it ends. Each write is a JSON merge patch of
//! one key, so replicas writing their own configs' keys never conflict.

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use tokio::sync::mpsc;
use tracing::{debug, info, warn};

use crate::model::ConfigKey;
use crate::waves::{HALTS_CONFIGMAP, HaltRecord, data_key, records_from};

enum Write {
    Save(HaltRecord),
    Remove(ConfigKey),
}

/// Attempts per write before it is given up (logged): the halt then lives in memory only.
const ATTEMPTS: u32 = 5;

#[derive(Clone)]
pub struct HaltStore {
    api: Api<ConfigMap>,
    writes: mpsc::UnboundedSender<Write>,
}

impl HaltStore {
    /// Starts the writer task.
    pub fn start(client: kube::Client, namespace: &str) -> Self {
        let api: Api<ConfigMap> = Api::namespaced(client, namespace);
        let (writes, pending) = mpsc::unbounded_channel();
        tokio::spawn(write_in_order(api.clone(), pending));
        info!(
            namespace,
            configmap = HALTS_CONFIGMAP,
            "halts are kept in the cluster"
        );
        Self { api, writes }
    }

    pub fn save(&self, record: HaltRecord) {
        let _ = self.writes.send(Write::Save(record));
    }

    pub fn remove(&self, config: &ConfigKey) {
        let _ = self.writes.send(Write::Remove(config.clone()));
    }

    /// Every halt kept (none when the ConfigMap does not exist); an entry that does not read
    /// as a halt is logged and left out.
    pub async fn load(&self) -> Result<Vec<HaltRecord>, kube::Error> {
        let Some(cm) = self.api.get_opt(HALTS_CONFIGMAP).await? else {
            return Ok(Vec::new());
        };
        let (records, bad) = records_from(cm.data.unwrap_or_default());
        for (key, e) in bad {
            warn!(key, error = %e, "ignoring an entry of {HALTS_CONFIGMAP}");
        }
        Ok(records)
    }
}

async fn write_in_order(api: Api<ConfigMap>, mut pending: mpsc::UnboundedReceiver<Write>) {
    while let Some(write) = pending.recv().await {
        let (config, value) = match &write {
            Write::Save(record) => match record.config() {
                Ok(config) => (config, json!(record.encode())),
                Err(_) => continue,
            },
            Write::Remove(config) => (config.clone(), serde_json::Value::Null),
        };
        let key = data_key(&config);
        let mut delay = Duration::from_millis(200);
        for attempt in 1..=ATTEMPTS {
            match write_key(&api, &key, &value).await {
                Ok(()) => {
                    debug!(config = %config, removed = value.is_null(), "halt record written");
                    break;
                }
                Err(e) if attempt == ATTEMPTS => {
                    warn!(config = %config, error = %e, attempts = ATTEMPTS,
                        "writing the halt record failed: the halt is kept in memory only");
                }
                Err(e) => {
                    debug!(config = %config, error = %e, attempt, "writing the halt record failed");
                    tokio::time::sleep(delay).await;
                    delay *= 2;
                }
            }
        }
    }
}

/// Sets (or, with `null`, removes) one data key; creates the ConfigMap when it is missing.
async fn write_key(
    api: &Api<ConfigMap>,
    key: &str,
    value: &serde_json::Value,
) -> Result<(), kube::Error> {
    let patch = json!({"data": {key: value}});
    match api
        .patch(
            HALTS_CONFIGMAP,
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 && value.is_null() => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => create(api, key, value).await,
        Err(e) => Err(e),
    }
}

async fn create(
    api: &Api<ConfigMap>,
    key: &str,
    value: &serde_json::Value,
) -> Result<(), kube::Error> {
    let cm: ConfigMap = serde_json::from_value(json!({
        "metadata": {
            "name": HALTS_CONFIGMAP,
            "labels": {"app.kubernetes.io/managed-by": "kube-reloader"},
        },
        "data": {key: value},
    }))
    .expect("a ConfigMap");
    // A 409 (another replica created it meanwhile) fails this attempt; the next one patches.
    api.create(&PostParams::default(), &cm).await.map(|_| ())
}
