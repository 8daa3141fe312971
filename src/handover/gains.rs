//! What indexing gained namespaces needs from the layers above the hand-over: the watches, which
//! know how to decode and hash what a list brings ([`Watches`], implemented by
//! `watch::WatchContext`), and the engine's intake, where it all goes ([`GainSink`], implemented
//! by `engine::intake::Intake`). The backfill and the catch-up are written against these two, so
//! the hand-over sits below the engine and the watches and they call into it.

use std::collections::HashSet;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use kube::api::{Api, DynamicObject, ListParams};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;

use crate::config::Settings;
use crate::digest::{ConfigSource, DigestPoolClosed};
use crate::index::{ConfigState, ReverseIndex, WorkloadObject};
use crate::model::{ConfigKey, ConfigKind, WorkloadKind};
use crate::protobuf::Decode;
use crate::shard::Ownership;

use super::acted::ActedTracker;

/// One page of a LIST: its objects, and the token of the next page (`None`: the last).
pub struct ListedPage<K> {
    pub items: Vec<K>,
    pub continue_token: Option<String>,
}

/// What a one-shot list holds: an API object, read in JSON or protobuf, handed across tasks.
pub trait Listable:
    Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static
{
}

impl<K> Listable for K where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static
{
}

/// A one-shot list read as one streaming request, page by page (`Watches::streamed_list`).
pub type StreamedList<K> = futures::stream::BoxStream<'static, Result<Vec<K>, kube::Error>>;

/// What to list: `api`'s collection with `params`, as `resource` (its name in metrics and
/// explain), with a `shardSelector` of its own when given (the client's layer adds the
/// replica's selector only to a request that carries none), decoded from protobuf by `decode`
/// (`None`: a kind the API server serves in JSON only).
pub struct PageRequest<'a, K> {
    pub api: &'a Api<K>,
    pub resource: &'static str,
    pub params: &'a ListParams,
    pub shard_selector: Option<&'a str>,
    pub decode: Option<Decode<K>>,
}

/// Where what a backfill or catch-up finds goes: the engine's intake.
pub trait GainSink: Send + Sync + 'static {
    /// A backfill of `namespaces` starts: their workloads and configs are not indexed yet, and
    /// config changes met there wait for its list (`deferral.rs`).
    fn backfill_started(&self, namespaces: &[String]);
    /// A config the backfill listed; returns the workloads queued.
    fn config_listed(&self, key: ConfigKey, state: ConfigState) -> usize;
    /// The backfill has listed the workloads and then the configs of `namespaces`; returns the
    /// workloads queued for changes that waited.
    fn configs_backfilled<'a>(&self, namespaces: impl IntoIterator<Item = &'a str>) -> usize;
    /// A config kept from before its namespace moved away was not listed when it came back.
    fn config_deleted_unobserved(&self, key: &ConfigKey, version: u64);
    /// Holds again what kept halts of `namespaces` held (before the reconcile).
    fn restore_halts(&self, namespaces: &HashSet<String>) -> impl Future<Output = usize> + Send;
    /// Reconciles recorded hashes in `namespaces` (`None`: every owned one); returns the
    /// workloads queued.
    fn reconcile_recorded(&self, namespaces: Option<&HashSet<String>>) -> usize;
    /// A change nobody acted on, found by a catch-up; returns the workloads queued.
    fn missed_change(&self, key: &ConfigKey, before: Option<&ConfigState>) -> usize;
    /// A namespace moved to another replica.
    fn namespace_moved_away(self: &Arc<Self>, namespace: &str);
    /// How far this replica has acted (what it publishes for a successor to catch up from).
    fn acted(&self) -> &ActedTracker;
}

/// What the backfill needs from the watches: the client and settings they list with, what they
/// know about the cluster, and how they decode what a list brings.
pub trait Watches: Send + Sync + 'static {
    type Sink: GainSink;
    fn sink(&self) -> &Arc<Self::Sink>;
    fn client(&self) -> &Client;
    fn settings(&self) -> &Settings;
    fn ownership(&self) -> &Ownership;
    fn index(&self) -> &ReverseIndex;
    /// Whether workloads of `kind` can be listed now (handled, and their API served).
    fn lists_workloads(&self, kind: WorkloadKind) -> bool;
    /// The same for configs of `kind`.
    fn lists_configs(&self, kind: ConfigKind) -> bool;
    /// Hands one listed workload to the engine, as its watch would.
    fn apply_workload(
        &self,
        kind: WorkloadKind,
        obj: WorkloadObject,
    ) -> impl Future<Output = ()> + Send;
    /// The index state of one config (hashed on the digest pool; the payload is dropped).
    fn config_state<K: ConfigSource>(
        &self,
        obj: K,
    ) -> impl Future<Output = Result<ConfigState, DigestPoolClosed>> + Send;
    /// A SecretProviderClassPodStatus as its SecretProviderClass's state (CSI integration).
    fn prepare_spc(
        &self,
        obj: DynamicObject,
    ) -> impl Future<Output = Option<(ConfigKey, ConfigState)>> + Send;
    /// One page of a backfill LIST, in the wire format the watches read (protobuf for a kind
    /// that has a decoder, unless the settings or the server say JSON).
    fn list_page<K>(
        &self,
        page: PageRequest<'_, K>,
    ) -> impl Future<Output = Result<ListedPage<K>, kube::Error>> + Send
    where
        K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync;
    /// `page`'s list as one streaming request, when the server streams lists and the kind is
    /// read in protobuf (one round trip, not one per page); `None`: list it page by page.
    fn streamed_list<K>(&self, page: &PageRequest<'_, K>) -> Option<StreamedList<K>>
    where
        K: Resource + Send + 'static;
    /// A backfill LIST failed and will be retried (metric).
    fn backfill_list_failed(&self, resource: &'static str);
    /// A catch-up of one config kind ran: how it went and how many configs it found changed.
    fn caught_up(&self, result: &'static str, changed: usize);
    /// How many listed objects are taken in at once: several, so a handover does not hash one
    /// by one, and fewer than a watch, so the live watches beside it are not kept waiting.
    fn in_flight(&self) -> usize;
    /// One stage of indexing gained namespaces took `took` (metric).
    fn backfill_stage(&self, stage: BackfillStage, took: Duration);
}

/// The stages of indexing gained namespaces, in order; live config changes there wait for the
/// first two (`deferral.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackfillStage {
    /// Listing the workloads of every handled kind.
    Workloads,
    /// Listing (and hashing) the configs.
    Configs,
    /// Comparing the configs with the versions the previous owners acted up to (`catch_up.rs`).
    CatchUp,
}

impl BackfillStage {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Workloads => "workloads",
            Self::Configs => "configs",
            Self::CatchUp => "catch_up",
        }
    }
}
