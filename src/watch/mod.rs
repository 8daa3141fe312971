//! Kubernetes watches feeding the index. Start-up runs in phases so that nothing is lost and
//! nothing is rolled just because the controller started:
//! namespaces (when a selector is set) -> workloads -> configs -> reconcile recorded hashes -> ready.
//! Every watch restarts with backoff when it breaks; a relist after a break is compared with
//! the index, so changes made while the watch was down are real changes, not lost ones.

mod configs;
mod namespaces;
mod workloads;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::StreamExt;
use futures::stream::{BoxStream, SelectAll};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher;
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use tokio::sync::Notify;
use tracing::{info, warn};

use crate::config::{NamespaceScope, Settings};
use crate::digest::DigestPool;
use crate::engine::{ConfigObserver, Engine};
use crate::rollout::pause::PauseKeeper;
use crate::rollout::{QueueObserver, WorkloadWriter};
use crate::telemetry::events::EventSink;

pub use configs::ConfigSource;

/// Hooks for watch health (metrics).
pub trait WatchObserver: Send + Sync + 'static {
    fn watch_restarted(&self, _resource: &'static str) {}
}

impl WatchObserver for () {}

/// Everything the watches share.
pub struct WatchContext<W, O, C, M = ()> {
    pub client: Client,
    pub engine: Arc<Engine<W, O, C>>,
    pub pool: DigestPool,
    pub settings: Arc<Settings>,
    pub events: EventSink,
    pub pauses: PauseKeeper,
    pub observer: M,
    /// Bad annotation values already reported, so each gets one Warning, not one per event.
    reported: dashmap::DashSet<
        (crate::model::WorkloadKey, crate::policy::PolicyProblem),
        ahash::RandomState,
    >,
    ready: AtomicBool,
    ready_notify: Notify,
}

impl<W, O, C, M> WatchContext<W, O, C, M>
where
    W: WorkloadWriter,
    O: QueueObserver,
    C: ConfigObserver,
    M: WatchObserver,
{
    pub fn new(
        client: Client,
        engine: Arc<Engine<W, O, C>>,
        pool: DigestPool,
        events: EventSink,
        pauses: PauseKeeper,
        observer: M,
    ) -> Arc<Self> {
        let settings = engine.settings.clone();
        Arc::new(Self {
            client,
            engine,
            pool,
            settings,
            events,
            pauses,
            observer,
            reported: Default::default(),
            ready: AtomicBool::new(false),
            ready_notify: Notify::new(),
        })
    }

    /// True once every watch has listed and the start-up reconcile has run.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    pub async fn wait_ready(&self) {
        while !self.is_ready() {
            let notified = self.ready_notify.notified();
            if self.is_ready() {
                return;
            }
            notified.await;
        }
    }

    /// Runs every watch until one of them ends for good (which is a bug: the caller exits).
    pub async fn run(self: Arc<Self>) -> anyhow::Result<()> {
        let mut tasks = tokio::task::JoinSet::new();
        if self.settings.namespace_selector.is_some() {
            let (synced_tx, synced_rx) = tokio::sync::oneshot::channel();
            tasks.spawn(namespaces::run(self.clone(), synced_tx));
            let _ = synced_rx.await;
            info!("namespace selection synced");
        }
        let workloads_synced = workloads::spawn_all(&self, &mut tasks);
        workloads_synced.wait().await;
        info!("workloads synced");
        let configs_synced = configs::spawn_all(&self, &mut tasks);
        configs_synced.wait().await;
        info!(sizes = ?self.engine.index.sizes(), "configs synced");
        self.engine.reconcile_recorded(None);
        self.ready.store(true, Ordering::Release);
        self.ready_notify.notify_waiters();
        info!("ready");
        match tasks.join_next().await {
            Some(Ok(Ok(()))) | None => anyhow::bail!("a watch ended unexpectedly"),
            Some(Ok(Err(e))) => Err(e),
            Some(Err(e)) => Err(e.into()),
        }
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
        self.pending.add_permits(1);
    }

    async fn wait(&self) {
        if self.total > 0 {
            let _ = self.pending.acquire_many(self.total).await;
        }
    }
}

/// One watch per namespace in scoped mode, one cluster-wide watch otherwise.
fn scoped_apis<K>(client: &Client, scope: &NamespaceScope) -> Vec<Api<K>>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope>,
    K::DynamicType: Default,
{
    match scope {
        NamespaceScope::All => vec![Api::all(client.clone())],
        NamespaceScope::Only(namespaces) => namespaces
            .iter()
            .map(|ns| Api::namespaced(client.clone(), ns))
            .collect(),
    }
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
fn watch_error<M: WatchObserver>(observer: &M, resource: &'static str, error: &watcher::Error) {
    warn!(resource, %error, "watch failed, retrying with backoff");
    observer.watch_restarted(resource);
}
