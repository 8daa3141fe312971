//! Keeps halts in the cluster (the `kube-reloader-halts` ConfigMap of the controller's
//! namespace, one data key per halted config), and the reloads a maintenance window or a delay
//! holds (one key per workload), so that a restarted replica or the namespace's next owner holds
//! what this one held. One task writes, in the order halts, holds and releases happened: a
//! release never lands before the halt it ends. Each write is a JSON merge patch of one key, so
//! replicas writing their own keys never conflict.

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use tokio::sync::mpsc;
use tracing::{debug, info, warn};

use crate::model::{ConfigKey, WorkloadKey};
use crate::reload_windows::HeldReload;
use crate::waves::{HALTS_CONFIGMAP, HELD_PREFIX, HaltRecord, data_key, records_from};

/// One data key set (`Some`) or removed (`None`).
struct Write {
    key: String,
    value: Option<String>,
}

/// What the ConfigMap keeps.
#[derive(Debug, Default)]
pub struct Kept {
    pub halts: Vec<HaltRecord>,
    pub held: Vec<HeldReload>,
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
        let Ok(config) = record.config() else { return };
        self.write(data_key(&config), Some(record.encode()));
    }

    pub fn remove(&self, config: &ConfigKey) {
        self.write(data_key(config), None);
    }

    /// Keeps `held` as the reloads `workload` waits with (replacing what was kept).
    pub fn hold(&self, workload: &WorkloadKey, held: &HeldReload) {
        let value = serde_json::to_string(held).expect("a held reload encodes");
        self.write(HeldReload::data_key(workload), Some(value));
    }

    pub fn release(&self, workload: &WorkloadKey) {
        self.write(HeldReload::data_key(workload), None);
    }

    fn write(&self, key: String, value: Option<String>) {
        let _ = self.writes.send(Write { key, value });
    }

    /// Every halt and held reload kept (none when the ConfigMap does not exist); an entry that
    /// does not read as one is logged and left out.
    pub async fn load(&self) -> Result<Kept, kube::Error> {
        let Some(cm) = self.api.get_opt(HALTS_CONFIGMAP).await? else {
            return Ok(Kept::default());
        };
        let data = cm.data.unwrap_or_default();
        let held = data
            .iter()
            .filter(|(key, _)| key.starts_with(HELD_PREFIX))
            .filter_map(|(key, text)| match serde_json::from_str(text) {
                Ok(held) => Some(held),
                Err(e) => {
                    warn!(key, error = %e, "ignoring an entry of {HALTS_CONFIGMAP}");
                    None
                }
            })
            .collect();
        let (halts, bad) = records_from(data);
        for (key, e) in bad {
            warn!(key, error = %e, "ignoring an entry of {HALTS_CONFIGMAP}");
        }
        Ok(Kept { halts, held })
    }
}

async fn write_in_order(api: Api<ConfigMap>, mut pending: mpsc::UnboundedReceiver<Write>) {
    while let Some(Write { key, value }) = pending.recv().await {
        let value = value.map_or(serde_json::Value::Null, |v| json!(v));
        let mut delay = Duration::from_millis(200);
        for attempt in 1..=ATTEMPTS {
            match write_key(&api, &key, &value).await {
                Ok(()) => {
                    debug!(key, removed = value.is_null(), "halt record written");
                    break;
                }
                Err(e) if attempt == ATTEMPTS => {
                    warn!(key, error = %e, attempts = ATTEMPTS,
                        "writing the halt record failed: it is kept in memory only");
                }
                Err(e) => {
                    debug!(key, error = %e, attempt, "writing the halt record failed");
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
