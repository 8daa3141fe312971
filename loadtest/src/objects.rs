//! The objects a run creates: labelled namespaces, ConfigMaps, Secrets and Deployments that use
//! them through `envFrom`, created concurrently; and their cleanup.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde::Serialize;
use serde_json::json;

use crate::hash;

/// Label put on every namespace and object of a run; its value is the run id.
pub const RUN_LABEL: &str = "kube-reloader-loadtest";
/// The one data key of every config.
pub const DATA_KEY: &str = "value";

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum Kind {
    ConfigMap,
    Secret,
}

impl Kind {
    pub fn env_suffix(self) -> &'static str {
        match self {
            Kind::ConfigMap => "CONFIGMAP",
            Kind::Secret => "SECRET",
        }
    }
}

/// A config, by namespace, kind and name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct ConfigRef {
    pub namespace: String,
    pub kind: Kind,
    pub name: String,
}

impl ConfigRef {
    /// The env var Reloader writes for this config.
    pub fn env_var(&self) -> String {
        format!(
            "STAKATER_{}_{}",
            hash::env_var_fragment(&self.name),
            self.kind.env_suffix()
        )
    }

    /// Reloader's hash of a config whose only entry is `value=<payload>`.
    pub fn hash_of(&self, payload: &[u8]) -> String {
        hash::reloader_sha1(&[(DATA_KEY, payload)])
    }
}

impl std::fmt::Display for ConfigRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let k = match self.kind {
            Kind::ConfigMap => "cm",
            Kind::Secret => "secret",
        };
        write!(f, "{k}:{}/{}", self.namespace, self.name)
    }
}

/// A workload: a Deployment and the configs it references.
#[derive(Debug, Clone)]
pub struct WorkloadSpec {
    pub namespace: String,
    pub name: String,
    pub configs: Vec<ConfigRef>,
}

impl WorkloadSpec {
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// Everything a run creates, and which workload uses which config.
#[derive(Default)]
pub struct Population {
    pub run_id: String,
    pub namespaces: Vec<String>,
    /// Config -> initial payload.
    pub configs: BTreeMap<ConfigRef, Vec<u8>>,
    pub workloads: Vec<WorkloadSpec>,
    /// Config -> workload keys using it.
    pub users: BTreeMap<ConfigRef, Vec<String>>,
}

impl Population {
    pub fn new(run_id: &str) -> Self {
        Self {
            run_id: run_id.to_string(),
            ..Default::default()
        }
    }

    pub fn ns_name(&self, suffix: &str) -> String {
        format!("krlt-{}-{suffix}", self.run_id)
    }

    pub fn add_namespace(&mut self, suffix: &str) -> String {
        let name = self.ns_name(suffix);
        self.namespaces.push(name.clone());
        name
    }

    pub fn add_config(&mut self, config: ConfigRef, payload: Vec<u8>) {
        self.configs.insert(config, payload);
    }

    pub fn add_workload(&mut self, w: WorkloadSpec) {
        for c in &w.configs {
            self.users.entry(c.clone()).or_default().push(w.key());
        }
        self.workloads.push(w);
    }

    /// The standard population: `workloads` Deployments spread over `namespaces` namespaces,
    /// each using its own ConfigMap and its own Secret.
    pub fn standard(&mut self, namespaces: usize, workloads: usize) {
        let ns: Vec<String> = (0..namespaces)
            .map(|i| self.add_namespace(&format!("{i:05}")))
            .collect();
        for j in 0..workloads {
            let namespace = ns[j % ns.len()].clone();
            let cm = ConfigRef {
                namespace: namespace.clone(),
                kind: Kind::ConfigMap,
                name: format!("cm-{j}"),
            };
            let sec = ConfigRef {
                namespace: namespace.clone(),
                kind: Kind::Secret,
                name: format!("sec-{j}"),
            };
            self.add_config(cm.clone(), format!("initial-{j}").into_bytes());
            self.add_config(sec.clone(), format!("initial-secret-{j}").into_bytes());
            self.add_workload(WorkloadSpec {
                namespace,
                name: format!("w-{j}"),
                configs: vec![cm, sec],
            });
        }
    }

    /// Reloader hashes of every config's initial content (a reload to one of them was not asked for).
    pub fn initial_hashes(&self) -> BTreeMap<String, ConfigRef> {
        self.configs
            .iter()
            .map(|(c, p)| (c.hash_of(p), c.clone()))
            .collect()
    }
}

/// Counts of the load generator's own requests, by (verb, resource).
#[derive(Default)]
pub struct OwnRequests {
    counts: std::sync::Mutex<BTreeMap<(String, String), u64>>,
}

impl OwnRequests {
    pub fn add(&self, verb: &str, resource: &str) {
        *self
            .counts
            .lock()
            .unwrap()
            .entry((verb.to_string(), resource.to_string()))
            .or_default() += 1;
    }

    pub fn snapshot(&self) -> BTreeMap<(String, String), u64> {
        self.counts.lock().unwrap().clone()
    }
}

fn labels(run_id: &str) -> BTreeMap<String, String> {
    BTreeMap::from([(RUN_LABEL.to_string(), run_id.to_string())])
}

fn meta(run_id: &str, namespace: Option<&str>, name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_string()),
        namespace: namespace.map(str::to_string),
        labels: Some(labels(run_id)),
        ..Default::default()
    }
}

pub fn config_object_json(run_id: &str, c: &ConfigRef, payload: &[u8]) -> serde_json::Value {
    match c.kind {
        Kind::ConfigMap => serde_json::to_value(ConfigMap {
            metadata: meta(run_id, Some(&c.namespace), &c.name),
            data: Some(BTreeMap::from([(
                DATA_KEY.to_string(),
                String::from_utf8_lossy(payload).into_owned(),
            )])),
            ..Default::default()
        }),
        Kind::Secret => serde_json::to_value(Secret {
            metadata: meta(run_id, Some(&c.namespace), &c.name),
            data: Some(BTreeMap::from([(
                DATA_KEY.to_string(),
                ByteString(payload.to_vec()),
            )])),
            type_: Some("Opaque".into()),
            ..Default::default()
        }),
    }
    .expect("serializable")
}

pub fn deployment(run_id: &str, w: &WorkloadSpec) -> Deployment {
    let env_from: Vec<serde_json::Value> = w
        .configs
        .iter()
        .map(|c| match c.kind {
            Kind::ConfigMap => json!({"configMapRef": {"name": c.name}}),
            Kind::Secret => json!({"secretRef": {"name": c.name}}),
        })
        .collect();
    serde_json::from_value(json!({
        "metadata": {
            "name": w.name,
            "namespace": w.namespace,
            "labels": {RUN_LABEL: run_id},
            "annotations": {"reloader.stakater.com/auto": "true"}
        },
        "spec": {
            "replicas": 0,
            "revisionHistoryLimit": 1,
            "selector": {"matchLabels": {"app": w.name}},
            "template": {
                "metadata": {"labels": {"app": w.name}},
                "spec": {"containers": [{
                    "name": "app",
                    "image": "registry.k8s.io/pause:3.10",
                    "envFrom": env_from
                }]}
            }
        }
    }))
    .expect("valid deployment")
}

fn retriable(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => matches!(s.code, 429 | 500 | 502 | 503 | 504),
        _ => true,
    }
}

/// Runs `op` with retries on throttling, server and transport errors (a few seconds at most).
pub async fn with_retry<T, F, Fut>(what: &str, mut op: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, kube::Error>>,
{
    let mut delay = Duration::from_millis(100);
    for attempt in 0.. {
        match op().await {
            Ok(v) => return Ok(v),
            Err(e) if attempt < 8 && retriable(&e) => {
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(3));
            }
            Err(e) => return Err(e).with_context(|| what.to_string()),
        }
    }
    unreachable!()
}

async fn create_one<K>(api: Api<K>, obj: K, what: String) -> Result<()>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + Serialize + std::fmt::Debug,
{
    let pp = PostParams::default();
    let r = with_retry(&what, || api.create(&pp, &obj)).await;
    match r {
        Ok(_) => Ok(()),
        // A retried create whose first attempt went through.
        Err(e)
            if e.downcast_ref::<kube::Error>()
                .is_some_and(|k| matches!(k, kube::Error::Api(s) if s.code == 409)) =>
        {
            Ok(())
        }
        Err(e) => Err(e),
    }
}

/// Creates the population with `concurrency` requests in flight: namespaces, then configs, then
/// workloads (so no workload ever references a config that does not exist yet).
pub async fn create_population(
    client: &Client,
    pop: &Population,
    concurrency: usize,
    own: &Arc<OwnRequests>,
) -> Result<()> {
    let run_id = pop.run_id.clone();
    let started = Instant::now();
    let done = Arc::new(AtomicU64::new(0));
    let total = pop.namespaces.len() + pop.configs.len() + pop.workloads.len();
    let progress = {
        let done = done.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(10)).await;
                crate::log(&format!(
                    "  created {}/{total} objects ({:.0}/s)",
                    done.load(Ordering::Relaxed),
                    done.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64()
                ));
            }
        })
    };

    let ns_api: Api<Namespace> = Api::all(client.clone());
    futures::stream::iter(pop.namespaces.iter().map(|name| {
        let ns = Namespace {
            metadata: meta(&run_id, None, name),
            ..Default::default()
        };
        let api = ns_api.clone();
        let done = done.clone();
        let own = own.clone();
        async move {
            own.add("create", "namespaces");
            create_one(api, ns, format!("creating namespace {name}")).await?;
            done.fetch_add(1, Ordering::Relaxed);
            Ok::<_, anyhow::Error>(())
        }
    }))
    .buffer_unordered(concurrency)
    .try_collect::<Vec<_>>()
    .await?;

    futures::stream::iter(pop.configs.iter().map(|(c, payload)| {
        let client = client.clone();
        let done = done.clone();
        let obj = config_object_json(&run_id, c, payload);
        let own = own.clone();
        async move {
            match c.kind {
                Kind::ConfigMap => {
                    own.add("create", "configmaps");
                    let o: ConfigMap = serde_json::from_value(obj)?;
                    create_one(
                        Api::namespaced(client, &c.namespace),
                        o,
                        format!("creating {c}"),
                    )
                    .await?
                }
                Kind::Secret => {
                    own.add("create", "secrets");
                    let o: Secret = serde_json::from_value(obj)?;
                    create_one(
                        Api::namespaced(client, &c.namespace),
                        o,
                        format!("creating {c}"),
                    )
                    .await?
                }
            }
            done.fetch_add(1, Ordering::Relaxed);
            Ok::<_, anyhow::Error>(())
        }
    }))
    .buffer_unordered(concurrency)
    .try_collect::<Vec<_>>()
    .await?;

    futures::stream::iter(pop.workloads.iter().map(|w| {
        let api: Api<Deployment> = Api::namespaced(client.clone(), &w.namespace);
        let d = deployment(&run_id, w);
        let done = done.clone();
        let own = own.clone();
        async move {
            own.add("create", "deployments");
            create_one(api, d, format!("creating deployment {}", w.key())).await?;
            done.fetch_add(1, Ordering::Relaxed);
            Ok::<_, anyhow::Error>(())
        }
    }))
    .buffer_unordered(concurrency)
    .try_collect::<Vec<_>>()
    .await?;
    progress.abort();
    Ok(())
}

/// Deletes the namespaces labelled `selector` (does not wait for them to go away).
pub async fn delete_namespaces(
    client: &Client,
    selector: &str,
    concurrency: usize,
) -> Result<usize> {
    let api: Api<Namespace> = Api::all(client.clone());
    let list = api
        .list_metadata(&ListParams::default().labels(selector))
        .await
        .context("listing load-test namespaces")?;
    let names: Vec<String> = list
        .items
        .into_iter()
        .filter(|n| n.metadata.deletion_timestamp.is_none())
        .filter_map(|n| n.metadata.name)
        .collect();
    let n = names.len();
    futures::stream::iter(names.into_iter().map(|name| {
        let api = api.clone();
        async move {
            match api.delete(&name, &DeleteParams::background()).await {
                Ok(_) => Ok(()),
                Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(()),
                Err(e) => Err(anyhow::Error::from(e).context(format!("deleting namespace {name}"))),
            }
        }
    }))
    .buffer_unordered(concurrency)
    .try_collect::<Vec<_>>()
    .await?;
    Ok(n)
}
