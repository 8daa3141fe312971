//! What every watch shares: the [`WatchContext`] (clients, the engine's intake, the index,
//! ownership, the digest pool and what the watches learn), the hooks they report to, how they
//! stop, and the helpers that turn a namespace scope into merged watch streams.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::StreamExt;
use futures::stream::{BoxStream, SelectAll};
use kube::core::ApiResource;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher;
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use tracing::warn;

use crate::config::{NamespaceScope, Settings};
use crate::digest::DigestPool;
use crate::engine::intake::Intake;
use crate::index::ReverseIndex;
use crate::resources::OptionalApi;
use crate::shard::Ownership;

use super::learned::{IgnoredSecretTypes, ListedKinds, ServedApis, WireFormats, WorkloadRefs};

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
    /// A catch-up of changes nobody acted on ran for one config kind (`handover/catch_up.rs`): how it
    /// went and how many configs it found changed.
    fn catch_up(&self, _result: &'static str, _changed: usize) {}
    /// One stage of indexing gained namespaces (`handover::gains::BackfillStage`) took `took`.
    fn backfill_stage(&self, _stage: &'static str, _took: std::time::Duration) {}
    /// A check of an optional API (a CRD-backed kind a flag turns on) found it served or not.
    fn api_served(&self, _api: OptionalApi, _served: bool) {}
    /// The watches of `resource` read `format` (`protobuf` or `json`) from now on.
    fn wire_format(&self, _resource: &'static str, _format: &'static str) {}
}

impl WatchObserver for () {}

/// Everything the watches share. What they decode goes to the engine's [`Intake`], the only
/// writer of controller state; the index is here to read.
pub struct WatchContext {
    pub(super) client: Client,
    pub(super) engine: Arc<Intake>,
    pub(super) index: Arc<ReverseIndex>,
    pub(super) ownership: Arc<Ownership>,
    pub(super) pool: DigestPool,
    pub(super) settings: Arc<Settings>,
    pub(super) observer: Arc<dyn WatchObserver>,
    pub(super) ready: AtomicBool,
    /// Workload kinds found by LIST, not watched (RBAC or `--list-workloads`).
    pub(super) listed: ListedKinds,
    /// Used Secrets found to be of an ignored type (for `/debug/explain`).
    pub(super) ignored_types: IgnoredSecretTypes,
    /// Which optional APIs (CRD-backed kinds) the cluster serves.
    pub(super) served: ServedApis,
    /// Rollouts whose pod template is a Deployment's, and those Deployments.
    pub(super) workload_refs: WorkloadRefs,
    /// The format each watched resource is read in.
    pub(super) wire_formats: WireFormats,
    /// Whether the API server streams lists (`sendInitialEvents`), as probed at start.
    pub(super) streams_lists: AtomicBool,
}

impl WatchContext {
    pub fn new(
        client: Client,
        engine: Arc<Intake>,
        pool: DigestPool,
        observer: impl WatchObserver,
    ) -> Arc<Self> {
        let settings = engine.settings().clone();
        let listed = ListedKinds::new(settings.listed_workload_kinds());
        Arc::new(Self {
            client,
            index: engine.index().clone(),
            ownership: engine.ownership().clone(),
            engine,
            pool,
            settings,
            observer: Arc::new(observer),
            ready: AtomicBool::new(false),
            listed,
            ignored_types: Default::default(),
            served: Default::default(),
            workload_refs: Default::default(),
            wire_formats: Default::default(),
            streams_lists: AtomicBool::new(false),
        })
    }

    /// Used Secrets known to be of an ignored type, as the ignored-type check finds them.
    pub fn ignored_secret_types(&self) -> IgnoredSecretTypes {
        self.ignored_types.clone()
    }

    /// The format each watched resource is read in (for `/debug/explain`).
    pub fn wire_formats(&self) -> WireFormats {
        self.wire_formats.clone()
    }

    /// Which optional APIs the cluster serves, as last checked (for `/debug/explain`).
    pub fn served_apis(&self) -> ServedApis {
        self.served.clone()
    }

    /// True once every watch has listed and the start-up reconcile has run.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }
}

impl WatchContext {
    /// The shard assignment generation this replica acts on now (0: not sharded).
    pub(super) fn current_generation(&self) -> u64 {
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
    pub(super) fn new(total: usize) -> Self {
        Self {
            pending: Arc::new(tokio::sync::Semaphore::new(0)),
            total: total as u32,
        }
    }

    pub(super) fn done_one(&self) {
        self.done_many(1);
    }

    pub(super) fn done_many(&self, streams: usize) {
        self.pending.add_permits(streams);
    }

    /// True once every stream has listed (tests only).
    #[cfg(test)]
    pub(super) fn is_open(&self) -> bool {
        self.pending.available_permits() >= self.total as usize
    }

    pub(super) async fn wait(&self) {
        if self.total > 0 {
            let _ = self.pending.acquire_many(self.total).await;
        }
    }
}

/// What each watch stream covers: one stream per namespace in scoped mode (`Some(ns)`), one
/// cluster-wide stream (`None`) otherwise. Stream `i` of every watch is `stream_namespaces[i]`.
pub(super) fn stream_namespaces(scope: &NamespaceScope) -> Vec<Option<String>> {
    match scope {
        NamespaceScope::All => vec![None],
        NamespaceScope::Only(namespaces) => namespaces.iter().cloned().map(Some).collect(),
    }
}

pub(super) fn scope_len(scope: &NamespaceScope) -> usize {
    match scope {
        NamespaceScope::All => 1,
        NamespaceScope::Only(namespaces) => namespaces.len(),
    }
}

/// One API per watch stream, for a typed resource.
pub(super) fn scoped_apis<K>(client: &Client, scope: &NamespaceScope) -> Vec<Api<K>>
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
pub(super) fn dynamic_apis<K>(
    client: &Client,
    scope: &NamespaceScope,
    ar: &ApiResource,
) -> Vec<Api<K>>
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
pub(super) type TaggedWatch<K> =
    BoxStream<'static, (usize, Result<watcher::Event<K>, watcher::Error>)>;

/// Merged, backed-off watch streams; each item is tagged with its stream's index so start-up
/// sync is counted per stream.
pub(super) fn watch_streams<K>(
    apis: Vec<Api<K>>,
    config: watcher::Config,
) -> SelectAll<TaggedWatch<K>>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let mut all = SelectAll::new();
    for (i, api) in apis.into_iter().enumerate() {
        let stream = watcher(api, config.clone())
            .backoff(crate::watch_backoff::watch_backoff())
            .map(move |e| (i, e));
        all.push(stream.boxed());
    }
    all
}

/// Logs a watch error and counts it; the backoff in the stream retries.
pub(super) fn watch_error(
    observer: &dyn WatchObserver,
    resource: &'static str,
    error: &watcher::Error,
) {
    warn!(resource, %error, "watch failed, retrying with backoff");
    observer.watch_restarted(resource);
}
