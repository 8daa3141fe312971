//! What the hand-over's backfill and catch-up use of the watches (`handover::gains`).

use std::sync::Arc;
use std::time::Duration;

use kube::api::DynamicObject;
use kube::{Client, Resource};
use serde::de::DeserializeOwned;

use crate::config::Settings;
use crate::digest::{ConfigSource, DigestPoolClosed};
use crate::engine::intake::Intake;
use crate::handover::gains::{BackfillStage, ListedPage, PageRequest, StreamedList, Watches};
use crate::index::{ConfigState, ReverseIndex, WorkloadObject};
use crate::model::{ConfigKey, ConfigKind, WorkloadKind};
use crate::shard::Ownership;

use super::context::WatchContext;

impl Watches for WatchContext {
    type Sink = Intake;

    fn sink(&self) -> &Arc<Intake> {
        &self.engine
    }

    fn client(&self) -> &Client {
        &self.client
    }

    fn settings(&self) -> &Settings {
        &self.settings
    }

    fn ownership(&self) -> &Ownership {
        &self.ownership
    }

    fn index(&self) -> &ReverseIndex {
        &self.index
    }

    fn lists_workloads(&self, kind: WorkloadKind) -> bool {
        WatchContext::lists_workloads(self, kind)
    }

    fn lists_configs(&self, kind: ConfigKind) -> bool {
        WatchContext::lists_configs(self, kind)
    }

    async fn apply_workload(&self, kind: WorkloadKind, obj: WorkloadObject) {
        WatchContext::apply_workload(self, kind, obj).await;
    }

    async fn config_state<K: ConfigSource>(&self, obj: K) -> Result<ConfigState, DigestPoolClosed> {
        WatchContext::config_state(self, obj).await
    }

    async fn prepare_spc(&self, obj: DynamicObject) -> Option<(ConfigKey, ConfigState)> {
        WatchContext::prepare_spc(self, obj).await
    }

    async fn list_page<K>(&self, page: PageRequest<'_, K>) -> Result<ListedPage<K>, kube::Error>
    where
        K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync,
    {
        WatchContext::list_page(self, page).await
    }

    fn streamed_list<K>(&self, page: &PageRequest<'_, K>) -> Option<StreamedList<K>>
    where
        K: Resource + Send + 'static,
    {
        WatchContext::streamed_list(self, page)
    }

    fn backfill_list_failed(&self, resource: &'static str) {
        self.observer.backfill_list_failed(resource);
    }

    fn caught_up(&self, result: &'static str, changed: usize) {
        self.observer.catch_up(result, changed);
    }

    fn in_flight(&self) -> usize {
        self.handover_in_flight()
    }

    fn backfill_stage(&self, stage: BackfillStage, took: Duration) {
        self.observer.backfill_stage(stage.as_str(), took);
    }
}
