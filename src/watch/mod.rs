//! Kubernetes watches feeding the index. Start-up runs in phases so that nothing is lost and
//! nothing is rolled just because the controller started:
//! namespaces (with a namespace selector, sharding or `--tenant-label`) -> workloads -> configs ->
//! reconcile recorded hashes -> ready.
//! Every watch runs through one driver (`driver.rs`): it restarts with backoff when it breaks,
//! and a relist after a break is compared with the index, so changes made while the watch was
//! down are real changes, not lost ones. Namespaces gained later are listed by `backfill.rs`.

mod backfill;
mod catch_up;
mod configs;
mod driver;
mod ignored_secrets;
mod list_strategy;
mod listed;
mod namespaces;
pub mod served;
mod server_sharding;
mod workload_refs;
mod workloads;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::StreamExt;
use futures::stream::{BoxStream, SelectAll};
use kube::core::ApiResource;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher;
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use tracing::{info, warn};

use crate::config::{NamespaceScope, Settings};
use crate::digest::DigestPool;
use crate::engine::intake::Intake;
use crate::index::ReverseIndex;
use crate::shard::Ownership;

use crate::resources::OptionalApi;
pub use ignored_secrets::IgnoredSecretTypes;

/// Why the watches stopped. Each watch retries failures with backoff and runs forever, so any
/// of these is a bug or a shutdown; the controller exits on it.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    #[error("the {0} watch ended")]
    Ended(String),
    #[error("the shard coordinator stopped sending assignment changes")]
    CoordinatorStopped,
    #[error("a watch task failed: {0}")]
    Task(#[from] tokio::task::JoinError),
}

/// Hooks for watch health (metrics).
pub trait WatchObserver: Send + Sync + 'static {
    fn watch_restarted(&self, _resource: &'static str) {}
    /// A LIST of a shard handover or namespace backfill failed and will be retried.
    fn backfill_list_failed(&self, _resource: &'static str) {}
    /// Whether the API server is asked to send only this replica's namespaces.
    fn server_side_sharding(&self, _on: bool) {}
    /// A catch-up of changes nobody acted on ran for one config kind (`catch_up.rs`): how it
    /// went and how many configs it found changed.
    fn catch_up(&self, _result: &'static str, _changed: usize) {}
    /// A check of an optional API (a CRD-backed kind a flag turns on) found it served or not.
    fn api_served(&self, _api: OptionalApi, _served: bool) {}
}

impl WatchObserver for () {}

/// Everything the watches share. What they decode goes to the engine's [`Intake`], the only
/// writer of controller state; the index is here to read.
pub struct WatchContext {
    client: Client,
    engine: Arc<Intake>,
    index: Arc<ReverseIndex>,
    ownership: Arc<Ownership>,
    pool: DigestPool,
    settings: Arc<Settings>,
    observer: Box<dyn WatchObserver>,
    ready: AtomicBool,
    /// Workload kinds found by LIST, not watched (RBAC or `--list-workloads`).
    listed: listed::ListedKinds,
    /// Used Secrets found to be of an ignored type (for `/debug/explain`).
    ignored_types: IgnoredSecretTypes,
    /// Which optional APIs (CRD-backed kinds) the cluster serves.
    served: served::ServedApis,
    /// Rollouts whose pod template is a Deployment's, and those Deployments.
    workload_refs: workload_refs::WorkloadRefs,
}

impl WatchContext {
    pub fn new(
        client: Client,
        engine: Arc<Intake>,
        pool: DigestPool,
        observer: impl WatchObserver,
    ) -> Arc<Self> {
        let settings = engine.settings().clone();
        let listed = listed::ListedKinds::new(settings.listed_workload_kinds());
        Arc::new(Self {
            client,
            index: engine.index().clone(),
            ownership: engine.ownership().clone(),
            engine,
            pool,
            settings,
            observer: Box::new(observer),
            ready: AtomicBool::new(false),
            listed,
            ignored_types: Default::default(),
            served: Default::default(),
            workload_refs: Default::default(),
        })
    }

    /// Used Secrets known to be of an ignored type, as the ignored-type check finds them.
    pub fn ignored_secret_types(&self) -> IgnoredSecretTypes {
        self.ignored_types.clone()
    }

    /// Which optional APIs the cluster serves, as last checked (for `/debug/explain`).
    pub fn served_apis(&self) -> served::ServedApis {
        self.served.clone()
    }

    /// True once every watch has listed and the start-up reconcile has run.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    /// Runs every watch until one of them ends for good (which is a bug: the caller exits).
    pub async fn run(self: Arc<Self>, shard: Option<ShardLink>) -> Result<(), WatchError> {
        let mut tasks = tokio::task::JoinSet::new();
        if self.ownership.uses_selector() {
            let synced = SyncGate::new(1);
            tasks.spawn(namespaces::run(self.clone(), synced.clone()));
            synced.wait().await;
            info!("namespace selection synced");
        } else if let Some(label) = self.settings.tenant_label.clone() {
            let synced = SyncGate::new(1);
            tasks.spawn(namespaces::run_tenants(self.clone(), label, synced.clone()));
            synced.wait().await;
        }
        // With shards, the first lists must already know which namespaces are ours.
        let start_generation = match &shard {
            Some(link) => {
                info!("waiting for the first shard assignment");
                link.coordinator.wait_for_assignment().await;
                let generation = self.current_generation();
                info!(generation, "shard assignment known");
                generation
            }
            None => 0,
        };
        self.decide_server_sharding().await;
        self.discover_optional_apis().await;
        // One empty watch request (milliseconds) decides how every list starts.
        let streaming = self.clone().probe_streaming_lists().await;
        let workloads_synced = workloads::spawn_all(&self, &mut tasks, streaming);
        workloads_synced.wait().await;
        info!("workloads synced");
        let configs_synced = configs::spawn_all(&self, &mut tasks, streaming);
        configs_synced.wait().await;
        info!(sizes = ?self.index.sizes(), "configs synced");
        // Before anything rolls stale workloads: what a kept halt holds stays held.
        self.engine.restore_halts(None).await;
        if let Some(inherited) = shard.as_ref().and_then(|l| l.coordinator.take_inherited()) {
            let owned = |ns: &str| self.ownership.owns(ns);
            self.catch_up(&self.start_targets(), &owned, &inherited.since)
                .await;
        }
        self.engine.reconcile_recorded(None);
        self.ready.store(true, Ordering::Release);
        info!("ready");
        if let Some(notices) = self.engine.take_secret_notices() {
            tasks.spawn(self.clone().check_ignored_secrets(notices));
        }
        if let Some(link) = shard {
            link.coordinator.synced(start_generation);
            let ctx = self.clone();
            tasks.spawn(async move { ctx.follow_assignment(link, start_generation).await });
        }
        match tasks.join_next().await {
            Some(Ok(Ok(()))) | None => Err(WatchError::Ended("watch task".into())),
            Some(Ok(Err(e))) => Err(e),
            Some(Err(e)) => Err(e.into()),
        }
    }
}

/// What the watches need from the shard coordinator.
pub struct ShardLink {
    pub coordinator: Arc<crate::shard::coordinator::Coordinator>,
    pub changes: tokio::sync::mpsc::UnboundedReceiver<crate::shard::coordinator::OwnershipChange>,
}

impl WatchContext {
    /// Whether config watches can use streaming lists, asked with the first config kind watched
    /// in the first namespace of the scope (the same permission the watch itself needs).
    async fn probe_streaming_lists(self: Arc<Self>) -> bool {
        use crate::model::ConfigKind;
        use k8s_openapi::api::core::v1::{ConfigMap, Secret};
        if self.settings.watches_config(ConfigKind::ConfigMap) {
            self.probe_with::<ConfigMap>(None).await
        } else if self.settings.watches_config(ConfigKind::Secret) {
            let fields = self.settings.config_field_selector(ConfigKind::Secret);
            self.probe_with::<Secret>(fields.as_deref()).await
        } else {
            false
        }
    }

    /// `fields`: the kind's field selector, so that even the probe asks only for what the
    /// watches will.
    async fn probe_with<K>(&self, fields: Option<&str>) -> bool
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + DeserializeOwned
            + std::fmt::Debug
            + Send
            + 'static,
        K::DynamicType: Default,
    {
        match scoped_apis::<K>(&self.client, &self.settings.scope)
            .into_iter()
            .next()
        {
            Some(api) => list_strategy::streaming_lists_served(api, fields).await,
            None => false,
        }
    }

    fn current_generation(&self) -> u64 {
        self.ownership
            .shard()
            .and_then(|s| s.view().current.map(|a| a.generation))
            .unwrap_or(0)
    }
}

/// Counts watch streams that have not finished their first list yet.
#[derive(Clone)]
pub(crate) struct SyncGate {
    pending: Arc<tokio::sync::Semaphore>,
    total: u32,
}

impl SyncGate {
    fn new(total: usize) -> Self {
        Self {
            pending: Arc::new(tokio::sync::Semaphore::new(0)),
            total: total as u32,
        }
    }

    fn done_one(&self) {
        self.done_many(1);
    }

    fn done_many(&self, streams: usize) {
        self.pending.add_permits(streams);
    }

    /// True once every stream has listed (tests only).
    #[cfg(test)]
    fn is_open(&self) -> bool {
        self.pending.available_permits() >= self.total as usize
    }

    async fn wait(&self) {
        if self.total > 0 {
            let _ = self.pending.acquire_many(self.total).await;
        }
    }
}

/// What each watch stream covers: one stream per namespace in scoped mode (`Some(ns)`), one
/// cluster-wide stream (`None`) otherwise. Stream `i` of every watch is `stream_namespaces[i]`.
fn stream_namespaces(scope: &NamespaceScope) -> Vec<Option<String>> {
    match scope {
        NamespaceScope::All => vec![None],
        NamespaceScope::Only(namespaces) => namespaces.iter().cloned().map(Some).collect(),
    }
}

fn scope_len(scope: &NamespaceScope) -> usize {
    match scope {
        NamespaceScope::All => 1,
        NamespaceScope::Only(namespaces) => namespaces.len(),
    }
}

/// One API per watch stream, for a typed resource.
fn scoped_apis<K>(client: &Client, scope: &NamespaceScope) -> Vec<Api<K>>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope>,
    K::DynamicType: Default,
{
    let api = |ns: Option<String>| match ns {
        Some(ns) => Api::namespaced(client.clone(), &ns),
        None => Api::all(client.clone()),
    };
    stream_namespaces(scope).into_iter().map(api).collect()
}

/// One API per watch stream, for a resource known at run time.
fn dynamic_apis<K>(client: &Client, scope: &NamespaceScope, ar: &ApiResource) -> Vec<Api<K>>
where
    K: Resource<DynamicType = ApiResource, Scope = kube::core::DynamicResourceScope>,
{
    let api = |ns: Option<String>| match ns {
        Some(ns) => Api::namespaced_with(client.clone(), &ns, ar),
        None => Api::all_with(client.clone(), ar),
    };
    stream_namespaces(scope).into_iter().map(api).collect()
}

/// One watch stream's events, tagged with the stream's index.
type TaggedWatch<K> = BoxStream<'static, (usize, Result<watcher::Event<K>, watcher::Error>)>;

/// Merged, backed-off watch streams; each item is tagged with its stream's index so start-up
/// sync is counted per stream.
fn watch_streams<K>(apis: Vec<Api<K>>, config: watcher::Config) -> SelectAll<TaggedWatch<K>>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let mut all = SelectAll::new();
    for (i, api) in apis.into_iter().enumerate() {
        let stream = watcher(api, config.clone())
            .default_backoff()
            .map(move |e| (i, e));
        all.push(stream.boxed());
    }
    all
}

/// Logs a watch error and counts it; the backoff in the stream retries.
fn watch_error(observer: &dyn WatchObserver, resource: &'static str, error: &watcher::Error) {
    warn!(resource, %error, "watch failed, retrying with backoff");
    observer.watch_restarted(resource);
}
