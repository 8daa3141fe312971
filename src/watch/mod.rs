//! Kubernetes watches feeding the index. Start-up runs in phases so that nothing is lost and
//! nothing is rolled just because the controller started:
//! namespaces (with a namespace selector, sharding or `--tenant-label`) -> workloads -> configs ->
//! reconcile recorded hashes -> ready.
//! Every watch runs through one driver (`driver.rs`): it restarts with backoff when it breaks,
//! and a relist after a break is compared with the index, so changes made while the watch was
//! down are real changes, not lost ones. Namespaces gained later are indexed by the hand-over
//! (`handover::backfill`), through what this module gives it (`gains.rs`).

mod configs;
mod context;
mod driver;
mod gains;
mod ignored_secrets;
mod learned;
mod list_strategy;
mod listed;
mod namespaces;
mod protobuf_watch;
pub mod served;
mod wire_list;
mod workload_refs;
mod workloads;

use std::sync::Arc;
use std::sync::atomic::Ordering;

use kube::Resource;
use serde::de::DeserializeOwned;
use tracing::info;

use crate::handover::follow::{ShardLink, catch_up_at_start, follow_assignment};
use crate::model::ConfigKind;
use crate::shard::server_sharding::decide_server_sharding;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};

use context::{SyncGate, scoped_apis};
pub use context::{WatchContext, WatchError, WatchObserver};
pub use learned::{IgnoredSecretTypes, ServedApis, WireFormats};

impl WatchContext {
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
        let observed = self.clone();
        let report = Arc::new(move |on| observed.observer.server_side_sharding(on));
        decide_server_sharding(&self.client, &self.ownership, &self.settings, report).await;
        self.discover_optional_apis().await;
        // One empty watch request (milliseconds) decides how every list starts.
        let streaming = self.clone().probe_streaming_lists().await;
        self.streams_lists.store(streaming, Ordering::Release);
        let workloads_synced = workloads::spawn_all(&self, &mut tasks, streaming);
        workloads_synced.wait().await;
        info!("workloads synced");
        let configs_synced = configs::spawn_all(&self, &mut tasks, streaming);
        configs_synced.wait().await;
        info!(sizes = ?self.index.sizes(), "configs synced");
        // Before anything rolls stale workloads: what a kept halt holds stays held.
        self.engine.restore_halts(None).await;
        if let Some(inherited) = shard.as_ref().and_then(|l| l.handover.take_inherited()) {
            catch_up_at_start(&*self, &inherited.since).await;
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
            tasks.spawn(async move {
                follow_assignment(ctx, link, start_generation).await;
                Err(WatchError::CoordinatorStopped)
            });
        }
        match tasks.join_next().await {
            Some(Ok(Ok(()))) | None => Err(WatchError::Ended("watch task".into())),
            Some(Ok(Err(e))) => Err(e),
            Some(Err(e)) => Err(e.into()),
        }
    }
}

impl WatchContext {
    /// Whether config watches can use streaming lists, asked with the first config kind watched
    /// in the first namespace of the scope (the same permission the watch itself needs).
    async fn probe_streaming_lists(self: Arc<Self>) -> bool {
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
}
