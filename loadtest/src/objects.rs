//! The objects a run creates: labelled namespaces, ConfigMaps, Secrets and workloads (Deployments,
//! or in `mixed` also StatefulSets, DaemonSets and CronJobs) that use them through `envFrom` (or,
//! in `references`, `env[].valueFrom`, init container volumes and projected volumes), created
//! concurrently; and their cleanup.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::batch::v1::CronJob;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use serde::Serialize;
use serde_json::json;

use crate::hash;

/// Label on a running Deployment and on its pod template; its value is the run id.
pub const RUNNING_LABEL: &str = "kube-reloader-loadtest/running";

/// The pod template's scheduling of a running workload: a real node, neither a kwok node
/// (loadtest/kind/run.sh labels them `type=kwok`; their taint keeps pods off too) nor a control
/// plane.
pub fn running_affinity() -> serde_json::Value {
    json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "type", "operator": "NotIn", "values": ["kwok"]},
            {"key": "node-role.kubernetes.io/control-plane", "operator": "DoesNotExist"}
        ]}]
    }}})
}

/// Label put on every namespace and object of a run; its value is the run id.
pub const RUN_LABEL: &str = "kube-reloader-loadtest";
/// The namespace label grouping namespaces into tenants with `--tenant-groups`.
pub const TENANT_LABEL: &str = "kube-reloader-loadtest-tenant";
/// The one data key of every config.
pub const DATA_KEY: &str = "value";
/// Reloader's pause annotations (defaults of --pause-deployment-annotation and
/// --pause-deployment-time-annotation).
pub const PAUSE_PERIOD_ANNOTATION: &str = "deployment.reloader.stakater.com/pause-period";
pub const PAUSED_AT_ANNOTATION: &str = "deployment.reloader.stakater.com/paused-at";

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum Kind {
    ConfigMap,
    Secret,
}

impl Kind {
    /// The API resource (plural).
    pub fn resource(self) -> &'static str {
        match self {
            Kind::ConfigMap => "configmaps",
            Kind::Secret => "secrets",
        }
    }

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

/// The kind of a workload (`mixed` spreads the population over them; otherwise Deployments).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum WorkloadKind {
    /// `replicas: 0`, or 1 in the running share (`--running-share`).
    #[default]
    Deployment,
    /// `replicas: 0`.
    StatefulSet,
    /// A nodeSelector no node matches: no pods.
    DaemonSet,
    /// `suspend: true` (and a suspended job template); a reload creates a Job from it.
    CronJob,
    /// A Knative Service (`custom-kind`; not in `ALL`, which is `mixed`'s): its revision
    /// template, no Knative controller running it.
    KnativeService,
}

impl WorkloadKind {
    pub const ALL: [WorkloadKind; 4] = [
        WorkloadKind::Deployment,
        WorkloadKind::StatefulSet,
        WorkloadKind::DaemonSet,
        WorkloadKind::CronJob,
    ];

    /// The API resource (plural).
    pub fn resource(self) -> &'static str {
        match self {
            WorkloadKind::Deployment => "deployments",
            WorkloadKind::StatefulSet => "statefulsets",
            WorkloadKind::DaemonSet => "daemonsets",
            WorkloadKind::CronJob => "cronjobs",
            WorkloadKind::KnativeService => crate::custom_kind::RESOURCE,
        }
    }
}

/// How a workload's pod template references its configs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum RefStyle {
    /// `envFrom[].configMapRef` / `secretRef` in the container.
    #[default]
    EnvFrom,
    /// `env[].valueFrom.configMapKeyRef` / `secretKeyRef` in the container.
    ValueFrom,
    /// A `configMap` / `secret` volume mounted only by an init container.
    InitVolume,
    /// One projected volume with a `configMap` and a `secret` source, mounted by the container.
    Projected,
}

impl RefStyle {
    /// The styles of the `references` scenario (round robin over the workloads).
    pub const OTHERS: [RefStyle; 3] = [
        RefStyle::ValueFrom,
        RefStyle::InitVolume,
        RefStyle::Projected,
    ];

    pub fn name(self) -> &'static str {
        match self {
            RefStyle::EnvFrom => "envFrom",
            RefStyle::ValueFrom => "env.valueFrom",
            RefStyle::InitVolume => "initContainer volume",
            RefStyle::Projected => "projected volume",
        }
    }
}

/// A workload (a Deployment unless `kind` says otherwise) and the configs it references.
#[derive(Debug, Clone, Default)]
pub struct WorkloadSpec {
    pub namespace: String,
    pub name: String,
    pub configs: Vec<ConfigRef>,
    pub kind: WorkloadKind,
    pub refs: RefStyle,
    /// `deployment.reloader.stakater.com/pause-period` (Deployments; the `pause` scenario).
    pub pause_period: Option<String>,
    /// A Deployment of the running share (`--running-share`): one replica of this image on a
    /// real node. Otherwise no pods (`replicas: 0`).
    pub running_image: Option<String>,
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
    /// Labels some namespaces carry besides the run's (tenant groups, a webhook's selector).
    pub namespace_labels: BTreeMap<String, BTreeMap<String, String>>,
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

    pub fn label_namespace(&mut self, namespace: &str, key: &str, value: &str) {
        self.namespace_labels
            .entry(namespace.to_string())
            .or_default()
            .insert(key.to_string(), value.to_string());
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
                ..Default::default()
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

/// The pod template of a workload: one container (and an init container for `InitVolume`) that
/// references the workload's configs the way `w.refs` says.
pub fn pod_template(w: &WorkloadSpec) -> serde_json::Value {
    let mut container = json!({"name": "app", "image": "registry.k8s.io/pause:3.10"});
    let mut spec = serde_json::Map::new();
    match w.refs {
        RefStyle::EnvFrom => container["envFrom"] = env_from(&w.configs),
        RefStyle::ValueFrom => container["env"] = value_from(&w.configs),
        RefStyle::InitVolume => {
            let (volumes, init) = init_volumes(&w.configs);
            spec.insert("volumes".into(), volumes);
            spec.insert("initContainers".into(), init);
        }
        RefStyle::Projected => {
            spec.insert("volumes".into(), projected(&w.configs));
            container["volumeMounts"] = json!([{"name": "projected", "mountPath": "/cfg"}]);
        }
    }
    if let Some(image) = &w.running_image {
        container["image"] = json!(image);
        container["imagePullPolicy"] = json!("IfNotPresent");
        spec.insert("affinity".into(), running_affinity());
    }
    spec.insert("containers".into(), json!([container]));
    match w.kind {
        WorkloadKind::CronJob => {
            spec.insert("restartPolicy".into(), json!("Never"));
        }
        WorkloadKind::DaemonSet => {
            spec.insert(
                "nodeSelector".into(),
                json!({"kube-reloader-loadtest/no-such-node": "true"}),
            );
        }
        _ => {}
    }
    json!({"metadata": {"labels": {"app": w.name}}, "spec": spec})
}

fn env_from(configs: &[ConfigRef]) -> serde_json::Value {
    configs
        .iter()
        .map(|c| match c.kind {
            Kind::ConfigMap => json!({"configMapRef": {"name": c.name}}),
            Kind::Secret => json!({"secretRef": {"name": c.name}}),
        })
        .collect()
}

fn value_from(configs: &[ConfigRef]) -> serde_json::Value {
    configs
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let r = json!({"name": c.name, "key": DATA_KEY});
            match c.kind {
                Kind::ConfigMap => {
                    json!({"name": format!("CFG_{i}"), "valueFrom": {"configMapKeyRef": r}})
                }
                Kind::Secret => {
                    json!({"name": format!("CFG_{i}"), "valueFrom": {"secretKeyRef": r}})
                }
            }
        })
        .collect()
}

/// One volume per config and an init container mounting them all: (volumes, initContainers).
fn init_volumes(configs: &[ConfigRef]) -> (serde_json::Value, serde_json::Value) {
    let volumes: serde_json::Value = configs
        .iter()
        .enumerate()
        .map(|(i, c)| match c.kind {
            Kind::ConfigMap => json!({"name": format!("cfg-{i}"), "configMap": {"name": c.name}}),
            Kind::Secret => json!({"name": format!("cfg-{i}"), "secret": {"secretName": c.name}}),
        })
        .collect();
    let mounts: Vec<serde_json::Value> = (0..configs.len())
        .map(|i| json!({"name": format!("cfg-{i}"), "mountPath": format!("/cfg/{i}")}))
        .collect();
    let init =
        json!([{"name": "init", "image": "registry.k8s.io/pause:3.10", "volumeMounts": mounts}]);
    (volumes, init)
}

fn projected(configs: &[ConfigRef]) -> serde_json::Value {
    let sources: Vec<serde_json::Value> = configs
        .iter()
        .map(|c| match c.kind {
            Kind::ConfigMap => json!({"configMap": {"name": c.name}}),
            Kind::Secret => json!({"secret": {"name": c.name}}),
        })
        .collect();
    json!([{"name": "projected", "projected": {"sources": sources}}])
}

/// The workload object (of `w.kind`) as JSON.
pub fn workload_json(run_id: &str, w: &WorkloadSpec) -> serde_json::Value {
    let mut annotations = json!({"reloader.stakater.com/auto": "true"});
    if let Some(period) = &w.pause_period {
        annotations[PAUSE_PERIOD_ANNOTATION] = json!(period);
    }
    let mut metadata = json!({
        "name": w.name,
        "namespace": w.namespace,
        "labels": {RUN_LABEL: run_id},
        "annotations": annotations
    });
    let mut template = pod_template(w);
    if w.running_image.is_some() {
        metadata["labels"][RUNNING_LABEL] = json!(run_id);
        template["metadata"]["labels"][RUNNING_LABEL] = json!(run_id);
    }
    let selector = json!({"matchLabels": {"app": w.name}});
    let spec = match w.kind {
        WorkloadKind::Deployment => json!({
            "replicas": i32::from(w.running_image.is_some()),
            "revisionHistoryLimit": 1,
            "selector": selector,
            "template": template
        }),
        WorkloadKind::StatefulSet => json!({
            "replicas": 0,
            "revisionHistoryLimit": 1,
            "serviceName": w.name,
            "selector": selector,
            "template": template
        }),
        WorkloadKind::DaemonSet => json!({
            "revisionHistoryLimit": 1,
            "selector": selector,
            "template": template
        }),
        WorkloadKind::CronJob => json!({
            "schedule": "0 0 1 1 *",
            "suspend": true,
            "jobTemplate": {
                "metadata": {"labels": {RUN_LABEL: run_id}},
                "spec": {"suspend": true, "template": template}
            }
        }),
        WorkloadKind::KnativeService => {
            return json!({
                "apiVersion": crate::custom_kind::API_VERSION,
                "kind": crate::custom_kind::KIND,
                "metadata": metadata,
                "spec": {"template": template}
            });
        }
    };
    json!({"metadata": metadata, "spec": spec})
}

pub fn deployment(run_id: &str, w: &WorkloadSpec) -> Deployment {
    serde_json::from_value(workload_json(run_id, w)).expect("valid deployment")
}

fn retriable(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => matches!(s.code, 429 | 500 | 502 | 503 | 504),
        _ => true,
    }
}

/// A client from a kubeconfig file.
pub async fn kube_client(path: &std::path::Path) -> Result<Client> {
    let kc = Kubeconfig::read_from(path).with_context(|| format!("reading {}", path.display()))?;
    let config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?;
    Ok(Client::try_from(config)?)
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
    let run_id = pop.run_id.as_str();
    let done = AtomicU64::new(0);
    let total = pop.namespaces.len() + pop.configs.len() + pop.workloads.len();
    let progress = log_progress(total, &done);
    let ns_api: Api<Namespace> = Api::all(client.clone());
    let namespaces = pop.namespaces.iter().map(|name| {
        let mut metadata = meta(run_id, None, name);
        if let (Some(labels), Some(extra)) = (&mut metadata.labels, pop.namespace_labels.get(name))
        {
            labels.extend(extra.clone());
        }
        let ns = Namespace {
            metadata,
            ..Default::default()
        };
        let create = create_one(ns_api.clone(), ns, format!("creating namespace {name}"));
        counted(own, &done, "namespaces", create)
    });
    let configs = pop.configs.iter().map(|(c, payload)| {
        let create = create_config(client, run_id, c, payload);
        counted(own, &done, c.kind.resource(), create)
    });
    let workloads = pop.workloads.iter().map(|w| {
        counted(
            own,
            &done,
            w.kind.resource(),
            create_workload(client, run_id, w),
        )
    });
    let result = async {
        all_of(namespaces, concurrency).await?;
        all_of(configs, concurrency).await?;
        all_of(workloads, concurrency).await
    };
    tokio::select! {
        r = result => r,
        () = progress => unreachable!("the progress log never ends"),
    }
}

/// Counts one create of `resource` as the load generator's own request, sends it, and counts it
/// in the progress once it succeeded.
async fn counted(
    own: &OwnRequests,
    done: &AtomicU64,
    resource: &str,
    create: impl std::future::Future<Output = Result<()>>,
) -> Result<()> {
    own.add("create", resource);
    create.await?;
    done.fetch_add(1, Ordering::Relaxed);
    Ok(())
}

/// Runs `ops` with `concurrency` in flight; the first error ends it.
async fn all_of<F>(ops: impl Iterator<Item = F>, concurrency: usize) -> Result<()>
where
    F: std::future::Future<Output = Result<()>>,
{
    futures::stream::iter(ops)
        .buffer_unordered(concurrency)
        .try_collect::<Vec<_>>()
        .await?;
    Ok(())
}

/// Logs `done` of `total` every 10 s (never ends: dropped when the creates are done).
async fn log_progress(total: usize, done: &AtomicU64) {
    let started = Instant::now();
    loop {
        tokio::time::sleep(Duration::from_secs(10)).await;
        let n = done.load(Ordering::Relaxed);
        crate::progress::log(&format!(
            "  created {n}/{total} objects ({:.0}/s)",
            n as f64 / started.elapsed().as_secs_f64()
        ));
    }
}

async fn create_config(client: &Client, run_id: &str, c: &ConfigRef, payload: &[u8]) -> Result<()> {
    let obj = config_object_json(run_id, c, payload);
    let what = format!("creating {c}");
    let (client, ns) = (client.clone(), &c.namespace);
    match c.kind {
        Kind::ConfigMap => {
            let o: ConfigMap = serde_json::from_value(obj)?;
            create_one(Api::namespaced(client, ns), o, what).await
        }
        Kind::Secret => {
            let o: Secret = serde_json::from_value(obj)?;
            create_one(Api::namespaced(client, ns), o, what).await
        }
    }
}

async fn create_workload(client: &Client, run_id: &str, w: &WorkloadSpec) -> Result<()> {
    let obj = workload_json(run_id, w);
    let what = format!("creating {:?} {}", w.kind, w.key());
    let (client, ns) = (client.clone(), &w.namespace);
    match w.kind {
        WorkloadKind::Deployment => {
            let o: Deployment = serde_json::from_value(obj)?;
            create_one(Api::namespaced(client, ns), o, what).await
        }
        WorkloadKind::StatefulSet => {
            let o: StatefulSet = serde_json::from_value(obj)?;
            create_one(Api::namespaced(client, ns), o, what).await
        }
        WorkloadKind::DaemonSet => {
            let o: DaemonSet = serde_json::from_value(obj)?;
            create_one(Api::namespaced(client, ns), o, what).await
        }
        WorkloadKind::CronJob => {
            let o: CronJob = serde_json::from_value(obj)?;
            create_one(Api::namespaced(client, ns), o, what).await
        }
        WorkloadKind::KnativeService => {
            let o: kube::api::DynamicObject = serde_json::from_value(obj)?;
            let ar = crate::custom_kind::api_resource();
            create_one(Api::namespaced_with(client, ns, &ar), o, what).await
        }
    }
}

/// What every namespace of a real cluster holds besides the configs workloads use (the
/// `realistic` scenario): Helm release records (`releases` x `revisions` Secrets of type
/// `helm.sh/release.v1`, random bytes so compression flatters nothing), a TLS Secret and
/// ConfigMaps no workload references. `kube-root-ca.crt` is not created: kube-controller-
/// manager's root-CA publisher puts one in every namespace. None is ever changed or used:
/// whatever a controller spends on them is waste.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Background {
    pub helm_releases: usize,
    pub helm_revisions: usize,
    pub helm_secret_bytes: usize,
    pub tls_secret_bytes: usize,
    pub unreferenced_configmaps: usize,
}

impl Background {
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// The objects of one namespace, as JSON (`kind` says which API).
    pub fn objects(&self, run_id: &str, namespace: &str) -> Vec<(Kind, serde_json::Value)> {
        let mut rng = crate::rng::Rng::new(
            namespace
                .bytes()
                .fold(7, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b))),
        );
        let mut random =
            |n: usize| -> ByteString { ByteString((0..n).map(|_| rng.next_u64() as u8).collect()) };
        let mut out = Vec::new();
        for r in 0..self.helm_releases {
            for v in 1..=self.helm_revisions {
                let release = format!("release-{r}");
                let status = if v == self.helm_revisions {
                    "deployed"
                } else {
                    "superseded"
                };
                let mut m = meta(
                    run_id,
                    Some(namespace),
                    &format!("sh.helm.release.v1.{release}.v{v}"),
                );
                m.labels.get_or_insert_default().extend([
                    ("owner".to_string(), "helm".to_string()),
                    ("name".to_string(), release),
                    ("status".to_string(), status.to_string()),
                    ("version".to_string(), v.to_string()),
                ]);
                let secret = Secret {
                    metadata: m,
                    type_: Some("helm.sh/release.v1".into()),
                    data: Some(BTreeMap::from([(
                        "release".into(),
                        random(self.helm_secret_bytes),
                    )])),
                    ..Default::default()
                };
                out.push((
                    Kind::Secret,
                    serde_json::to_value(secret).expect("serializable"),
                ));
            }
        }
        if self.tls_secret_bytes > 0 {
            let secret = Secret {
                metadata: meta(run_id, Some(namespace), "ingress-tls"),
                type_: Some("kubernetes.io/tls".into()),
                data: Some(BTreeMap::from([
                    ("tls.crt".into(), random(self.tls_secret_bytes)),
                    ("tls.key".into(), random(self.tls_secret_bytes / 2)),
                ])),
                ..Default::default()
            };
            out.push((
                Kind::Secret,
                serde_json::to_value(secret).expect("serializable"),
            ));
        }
        for k in 0..self.unreferenced_configmaps {
            let text: String = random(2048)
                .0
                .iter()
                .map(|b| char::from(b'a' + b % 26))
                .collect();
            let cm = ConfigMap {
                metadata: meta(run_id, Some(namespace), &format!("unused-{k}")),
                data: Some(BTreeMap::from([(DATA_KEY.to_string(), text)])),
                ..Default::default()
            };
            out.push((
                Kind::ConfigMap,
                serde_json::to_value(cm).expect("serializable"),
            ));
        }
        out
    }
}

/// Creates `background` in every namespace (`concurrency` requests in flight).
pub async fn create_background(
    client: &Client,
    run_id: &str,
    namespaces: &[String],
    background: &Background,
    concurrency: usize,
    own: &Arc<OwnRequests>,
) -> Result<usize> {
    let objects: Vec<(String, Kind, serde_json::Value)> = namespaces
        .iter()
        .flat_map(|ns| {
            background
                .objects(run_id, ns)
                .into_iter()
                .map(move |(kind, o)| (ns.clone(), kind, o))
        })
        .collect();
    let n = objects.len();
    futures::stream::iter(objects.into_iter().map(|(ns, kind, obj)| {
        let client = client.clone();
        let own = own.clone();
        async move {
            let what = format!("creating {} in {ns}", obj["metadata"]["name"]);
            match kind {
                Kind::ConfigMap => {
                    own.add("create", "configmaps");
                    let o: ConfigMap = serde_json::from_value(obj)?;
                    create_one(Api::namespaced(client, &ns), o, what).await
                }
                Kind::Secret => {
                    own.add("create", "secrets");
                    let o: Secret = serde_json::from_value(obj)?;
                    create_one(Api::namespaced(client, &ns), o, what).await
                }
            }
        }
    }))
    .buffer_unordered(concurrency)
    .try_collect::<Vec<_>>()
    .await?;
    Ok(n)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(kind: WorkloadKind, refs: RefStyle) -> WorkloadSpec {
        let c = |kind, name: &str| ConfigRef {
            namespace: "ns".into(),
            kind,
            name: name.into(),
        };
        WorkloadSpec {
            namespace: "ns".into(),
            name: "w".into(),
            configs: vec![c(Kind::ConfigMap, "cm"), c(Kind::Secret, "sec")],
            kind,
            refs,
            pause_period: None,
            running_image: None,
        }
    }

    #[test]
    fn pause_period_is_an_annotation_of_the_workload() {
        let mut w = spec(WorkloadKind::Deployment, RefStyle::EnvFrom);
        assert!(
            workload_json("r", &w)["metadata"]["annotations"][PAUSE_PERIOD_ANNOTATION].is_null()
        );
        w.pause_period = Some("8s".into());
        assert_eq!(
            workload_json("r", &w)["metadata"]["annotations"][PAUSE_PERIOD_ANNOTATION],
            "8s"
        );
    }

    #[test]
    fn reference_styles() {
        let t = pod_template(&spec(WorkloadKind::Deployment, RefStyle::ValueFrom));
        let env = &t["spec"]["containers"][0]["env"];
        assert_eq!(env[0]["valueFrom"]["configMapKeyRef"]["name"], "cm");
        assert_eq!(env[1]["valueFrom"]["secretKeyRef"]["name"], "sec");

        let t = pod_template(&spec(WorkloadKind::Deployment, RefStyle::InitVolume));
        assert_eq!(t["spec"]["volumes"][0]["configMap"]["name"], "cm");
        assert_eq!(t["spec"]["volumes"][1]["secret"]["secretName"], "sec");
        let mounts = t["spec"]["initContainers"][0]["volumeMounts"].as_array();
        assert_eq!(mounts.map(Vec::len), Some(2));
        assert!(t["spec"]["containers"][0].get("volumeMounts").is_none());

        let t = pod_template(&spec(WorkloadKind::Deployment, RefStyle::Projected));
        let sources = &t["spec"]["volumes"][0]["projected"]["sources"];
        assert_eq!(sources[0]["configMap"]["name"], "cm");
        assert_eq!(sources[1]["secret"]["name"], "sec");
        assert_eq!(
            t["spec"]["containers"][0]["volumeMounts"][0]["name"],
            "projected"
        );
    }

    #[test]
    fn background_is_helm_history_a_tls_secret_and_unused_configmaps() {
        let b = Background {
            helm_releases: 2,
            helm_revisions: 3,
            helm_secret_bytes: 1000,
            tls_secret_bytes: 100,
            unreferenced_configmaps: 2,
        };
        let objects = b.objects("run", "ns");
        let secrets: Vec<Secret> = objects
            .iter()
            .filter(|(k, _)| *k == Kind::Secret)
            .map(|(_, o)| serde_json::from_value(o.clone()).unwrap())
            .collect();
        let helm: Vec<&Secret> = secrets
            .iter()
            .filter(|s| s.type_.as_deref() == Some("helm.sh/release.v1"))
            .collect();
        assert_eq!(helm.len(), 6);
        let payload = &helm[0].data.as_ref().unwrap()["release"].0;
        assert_eq!(payload.len(), 1000);
        assert!(
            payload
                .iter()
                .collect::<std::collections::HashSet<_>>()
                .len()
                > 200,
            "random bytes, not a compressible pattern"
        );
        assert!(
            secrets
                .iter()
                .any(|s| s.type_.as_deref() == Some("kubernetes.io/tls"))
        );
        let configmaps: Vec<String> = objects
            .iter()
            .filter(|(k, _)| *k == Kind::ConfigMap)
            .map(|(_, o)| o["metadata"]["name"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(configmaps, ["unused-0", "unused-1"]);
        assert!(Background::default().objects("run", "ns").is_empty());
    }

    #[test]
    fn every_kind_parses() {
        for kind in WorkloadKind::ALL
            .into_iter()
            .chain([WorkloadKind::KnativeService])
        {
            let o = workload_json("run", &spec(kind, RefStyle::EnvFrom));
            match kind {
                WorkloadKind::Deployment => {
                    serde_json::from_value::<Deployment>(o).unwrap();
                }
                WorkloadKind::StatefulSet => {
                    serde_json::from_value::<StatefulSet>(o).unwrap();
                }
                WorkloadKind::DaemonSet => {
                    serde_json::from_value::<DaemonSet>(o).unwrap();
                }
                WorkloadKind::CronJob => {
                    let c: CronJob = serde_json::from_value(o).unwrap();
                    assert_eq!(c.spec.suspend, Some(true));
                    let labels = c.spec.job_template.metadata.unwrap().labels.unwrap();
                    assert_eq!(labels[RUN_LABEL], "run");
                }
                WorkloadKind::KnativeService => {
                    let s: crate::custom_kind::KnativeService =
                        serde_json::from_value(o.clone()).unwrap();
                    assert_eq!(o["apiVersion"], crate::custom_kind::API_VERSION);
                    assert!(
                        o.pointer("/spec/template/spec/containers/0/envFrom")
                            .is_some()
                    );
                    assert_eq!(kube::Resource::meta(&s).name.as_deref(), Some("w"));
                }
            }
        }
    }
}
