//! Indexing namespaces gained (a shard hand-over, or a namespace entering the selection): they
//! are listed as a start-up would list them (workloads, ConfigMaps, Secrets and, with CSI
//! integration, SecretProviderClassPodStatuses) and reconciled against recorded hashes; only
//! then is the generation reported synced (`follow.rs`), so the previous owner lets go of a
//! namespace only once it is fully indexed here. A failed LIST is retried with backoff (log line
//! and metric) rather than skipped: a namespace reported synced while half indexed would treat
//! its next config change as a creation and not reload.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::ResourceExt;
use kube::api::{Api, DynamicObject, ListParams};
use tokio::time::Instant;
use tracing::{debug, info, warn};

use crate::config::NamespaceScope;
use crate::digest::ConfigSource;
use crate::index::WorkloadObject;
use crate::model::{ConfigKey, ConfigKind, WorkloadKind};
use crate::protobuf::{Decode, FromProtobuf, workload_decoder};
use crate::resources::{
    CONFIG_PAGE_SIZE, api_resource, spc_pod_status_resource, workload_list_params,
};

use super::acted::{ActedTracker, ActedVersions};
use super::gains::{BackfillStage, GainSink, Listable, PageRequest, StreamedList, Watches};
use super::listed_through::ListedThrough;
use super::protocol::CatchUp;

/// The backfill and catch-up of gained namespaces, over the watches that decode what they list.
pub struct Indexing<'a, W> {
    pub(super) watches: &'a W,
}

impl<'a, W: Watches> Indexing<'a, W> {
    pub fn new(watches: &'a W) -> Self {
        Self { watches }
    }

    /// Lists what a newly selected namespace holds, as a start-up would, reconciles it, and
    /// acts on every config changed after `selected_at`, the resourceVersion of the namespace
    /// event that brought it into the selection (0: unknown, nothing to catch up). Reloader,
    /// checking the selector at each config event, rolls a change made between the label and
    /// this replica's list; the list alone reads it as the state the namespace entered with.
    pub async fn namespace_entered(&self, namespace: &str, selected_at: u64) {
        let catch_up = entry_catch_up(self.watches.sink().acted(), selected_at);
        self.namespaces_entered(&[namespace.to_string()], catch_up.as_ref())
            .await;
    }

    /// Indexes namespaces gained (selection or shard handover) as a start-up would, then
    /// reconciles their recorded hashes. A few namespaces are listed one by one; many at once
    /// (a handover) are listed with one paginated list per kind, so a takeover of thousands of
    /// namespaces costs a handful of LIST calls, not thousands. Namespaces gained from members
    /// that left are then caught up from the versions they had acted up to (`catch_up.rs`).
    pub(super) async fn namespaces_entered(
        &self,
        namespaces: &[String],
        catch_up: Option<&CatchUp>,
    ) {
        let namespaces = self.in_scope(namespaces);
        let namespaces = namespaces.as_slice();
        if namespaces.is_empty() {
            return;
        }
        info!(count = namespaces.len(), first = %namespaces[0], "indexing namespaces");
        let sink = self.watches.sink();
        sink.backfill_started(namespaces);
        let wanted: HashSet<&str> = namespaces.iter().map(String::as_str).collect();
        // Config states kept from before the namespace moved away (`Intake::namespace_moved_away`).
        let kept = self.watches.index().config_versions_in(&wanted);
        let listed = std::sync::Mutex::new(HashSet::new());
        let targets = self.list_targets(namespaces);
        let mut took = StageTimes::default();
        for target in &targets {
            let stage = Instant::now();
            self.list_workloads(target, &wanted).await;
            took.workloads += stage.elapsed();
            // After the workloads: a config change met here fans out to them (see Intake).
            let stage = Instant::now();
            self.list_all_configs(target, &wanted, &listed).await;
            took.configs += stage.elapsed();
            match target.namespace() {
                Some(ns) => sink.configs_backfilled([ns]),
                None => sink.configs_backfilled(namespaces.iter().map(String::as_str)),
            };
        }
        sink.configs_backfilled(namespaces.iter().map(String::as_str));
        let listed = listed.into_inner().expect("listed keys");
        self.forget_deleted_meanwhile(kept, &listed);
        let set: HashSet<String> = namespaces.iter().cloned().collect();
        sink.restore_halts(&set).await;
        if let Some(catch_up) = catch_up {
            let stage = Instant::now();
            let gained = |ns: &str| wanted.contains(ns);
            let since = self.written_kinds(&catch_up.since, &listed);
            self.catch_up(&targets, &gained, &since).await;
            took.catch_up = Some(stage.elapsed());
        }
        let queued = sink.reconcile_recorded(Some(&set));
        took.report(self.watches);
        info!(count = namespaces.len(), first = %namespaces[0], queued,
            workloads = ?took.workloads, configs = ?took.configs, catch_up = ?took.catch_up,
            "namespaces indexed");
    }

    /// The kinds of `since` of which a listed config is indexed at a newer resourceVersion (or
    /// an unknown one): only there can a config have changed since, so a namespace entering
    /// the selection, or a hand-over, whose configs nobody wrote meanwhile lists nothing more.
    fn written_kinds(&self, since: &ActedVersions, listed: &HashSet<ConfigKey>) -> ActedVersions {
        let index = self.watches.index();
        let written = |kind: ConfigKind, version: u64| {
            listed.iter().filter(|key| key.kind == kind).any(|key| {
                index
                    .config_version(key)
                    .is_some_and(|now| now == 0 || now > version)
            })
        };
        since
            .iter()
            .filter(|(kind, version)| written(*kind, *version))
            .collect()
    }

    /// Scoped mode: the shard assignment spans every namespace, but only the scope's can be read
    /// (anything else is a 403 and never watched).
    fn in_scope(&self, namespaces: &[String]) -> Vec<String> {
        match &self.watches.settings().scope {
            NamespaceScope::All => namespaces.to_vec(),
            NamespaceScope::Only(nss) => namespaces
                .iter()
                .filter(|n| nss.iter().any(|s| s == *n))
                .cloned()
                .collect(),
        }
    }

    /// Where a start-up lists everything it owns: across the cluster (sharded to this replica
    /// by the client when the server shards), or each namespace of the scope.
    pub(super) fn start_targets(&self) -> Vec<ListTarget> {
        match &self.watches.settings().scope {
            NamespaceScope::All => vec![ListTarget::All],
            NamespaceScope::Only(nss) => nss.iter().cloned().map(ListTarget::Namespace).collect(),
        }
    }

    /// Where to list. When the API server shards: the gained hash ranges, one list per kind
    /// (a handover receives the gained share and nothing else). Otherwise each namespace when
    /// they are few, else the whole scope at once.
    fn list_targets(&self, namespaces: &[String]) -> Vec<ListTarget> {
        let gained = match &self.watches.settings().scope {
            NamespaceScope::All => self
                .watches
                .ownership()
                .shard()
                .and_then(|s| s.gained_selector(namespaces)),
            NamespaceScope::Only(_) => None,
        };
        if let Some(selector) = gained {
            return vec![ListTarget::Ranges(selector)];
        }
        if namespaces.len() <= PER_NAMESPACE_LISTS {
            return namespaces
                .iter()
                .cloned()
                .map(ListTarget::Namespace)
                .collect();
        }
        self.start_targets()
    }

    /// Every handled workload kind in `target`, keeping `wanted`'s. The kinds at once, as the
    /// watches list them at start-up: a handover waits for the longest list, not for their sum.
    async fn list_workloads(&self, target: &ListTarget, wanted: &HashSet<&str>) {
        let kinds = WorkloadKind::all()
            .into_iter()
            .filter(|k| self.watches.lists_workloads(*k))
            .map(|kind| self.list_workload_kind(kind, target, wanted));
        futures::future::join_all(kinds).await;
    }

    async fn list_workload_kind(
        &self,
        kind: WorkloadKind,
        target: &ListTarget,
        wanted: &HashSet<&str>,
    ) {
        let ar = api_resource(kind);
        let api: Api<WorkloadObject> = match target.namespace() {
            Some(ns) => Api::namespaced_with(self.watches.client().clone(), ns, &ar),
            None => Api::all_with(self.watches.client().clone(), &ar),
        };
        let list = KindList {
            api: &api,
            params: workload_list_params(kind),
            resource: kind.as_str(),
            decode: workload_decoder(kind),
        };
        let each = |obj: WorkloadObject| async move {
            let ns = obj.metadata.namespace.as_deref();
            if ns.is_some_and(|ns| wanted.contains(ns)) {
                self.watches.apply_workload(kind, obj).await;
            }
        };
        self.backfill_pages(list, target, wanted, None, each).await;
    }

    /// Every watched config kind in `target`, keeping `wanted`'s; `listed` collects their keys.
    /// The kinds at once, as the watches list them at start-up. Across namespaces, each one's
    /// config changes stop waiting as soon as every list has passed it (`listed_through.rs`).
    async fn list_all_configs(
        &self,
        target: &ListTarget,
        wanted: &HashSet<&str>,
        listed: &std::sync::Mutex<HashSet<ConfigKey>>,
    ) {
        let settings = self.watches.settings();
        let kinds = [
            settings.watches_config(ConfigKind::ConfigMap),
            settings.watches_config(ConfigKind::Secret),
            self.watches.lists_configs(ConfigKind::SecretProviderClass),
        ];
        // Across namespaces each list reports its pages; one namespace's lists end together,
        // and the caller releases it then.
        let through = target
            .namespace()
            .is_none()
            .then(|| ListedThrough::new(wanted.iter().copied(), kinds.len()));
        let passed = |list: usize| through.as_ref().map(|through| Passed { through, list });
        if let Some(through) = &through {
            for (list, _) in kinds.iter().enumerate().filter(|(_, listed)| !**listed) {
                self.release(through.done(list));
            }
        }
        let config_maps = async {
            if kinds[0] {
                let list = self.list_configs::<ConfigMap>(target, wanted, listed, passed(0));
                list.await;
            }
        };
        let secrets = async {
            if kinds[1] {
                let list = self.list_configs::<Secret>(target, wanted, listed, passed(1));
                list.await;
            }
        };
        let pod_statuses = async {
            if kinds[2] {
                self.list_pod_statuses(target, wanted, passed(2)).await;
            }
        };
        futures::join!(config_maps, secrets, pod_statuses);
    }

    /// Config changes in `namespaces` stop waiting: every config list has passed them.
    fn release(&self, namespaces: Vec<String>) {
        if namespaces.is_empty() {
            return;
        }
        let sink = self.watches.sink();
        let queued = sink.configs_backfilled(namespaces.iter().map(String::as_str));
        debug!(count = namespaces.len(), first = %namespaces[0], queued,
            "configs of gained namespaces listed");
    }

    /// SecretProviderClassPodStatuses, as their SecretProviderClass's state (CSI integration).
    async fn list_pod_statuses(
        &self,
        target: &ListTarget,
        wanted: &HashSet<&str>,
        passed: Option<Passed<'_>>,
    ) {
        let ar = spc_pod_status_resource();
        let api: Api<DynamicObject> = match target.namespace() {
            Some(ns) => Api::namespaced_with(self.watches.client().clone(), ns, &ar),
            None => Api::all_with(self.watches.client().clone(), &ar),
        };
        let list = KindList {
            api: &api,
            params: ListParams::default().limit(CONFIG_PAGE_SIZE),
            resource: "secretproviderclasspodstatus",
            decode: None,
        };
        let each = |obj: DynamicObject| async move {
            let in_gained = obj
                .namespace()
                .is_some_and(|ns| wanted.contains(ns.as_str()));
            if in_gained && let Some((key, state)) = self.watches.prepare_spc(obj).await {
                self.watches.sink().config_listed(key, state);
            }
        };
        self.backfill_pages(list, target, wanted, passed, each)
            .await;
    }

    /// A kept config the backfill did not list, and no watch event touched since, was deleted
    /// while the namespace was away.
    fn forget_deleted_meanwhile(&self, kept: Vec<(ConfigKey, u64)>, listed: &HashSet<ConfigKey>) {
        for (key, version) in kept {
            if !listed.contains(&key) {
                self.watches.sink().config_deleted_unobserved(&key, version);
            }
        }
    }

    async fn list_configs<K>(
        &self,
        target: &ListTarget,
        wanted: &HashSet<&str>,
        listed: &std::sync::Mutex<HashSet<ConfigKey>>,
        passed: Option<Passed<'_>>,
    ) where
        K: ListedConfig,
    {
        let api: Api<K> = self.config_api(target);
        let list = self.config_list(&api, ListParams::default());
        let each = |obj: K| self.backfill_config(obj, wanted, listed);
        self.backfill_pages(list, target, wanted, passed, each)
            .await;
    }

    /// A config kind's LIST with `params` (page size and the settings' selectors added), read
    /// in protobuf where the watches read it.
    pub(super) fn config_list<'l, K>(&self, api: &'l Api<K>, params: ListParams) -> KindList<'l, K>
    where
        K: ConfigSource + FromProtobuf,
    {
        KindList {
            api,
            params: self.config_list_params(K::KIND, params),
            resource: K::KIND.as_str(),
            decode: Some(Arc::new(K::from_protobuf)),
        }
    }

    /// Reads every page of one backfill LIST, handing each item to `each` (a few at once), and
    /// reporting each page's namespaces to `passed` when given. A failed page is retried with
    /// capped backoff, from the first page (its continue token may have expired: items seen
    /// twice are applied twice, which is idempotent), until the list succeeds or none of
    /// `wanted` is owned any more. The caller reports the generation synced only after every
    /// list returned, so a namespace is never reported synced while half indexed: a config
    /// missing from the index would make its next change look like a creation, not reloaded.
    async fn backfill_pages<K, F, Fut>(
        &self,
        list: KindList<'_, K>,
        target: &ListTarget,
        wanted: &HashSet<&str>,
        passed: Option<Passed<'_>>,
        mut each: F,
    ) where
        K: Listable,
        F: FnMut(K) -> Fut,
        Fut: std::future::Future<Output = ()>,
    {
        let resource = list.resource;
        let mut backoff = BACKFILL_RETRY_BASE;
        'list: loop {
            let mut pages = Pages::new(self.watches, list.clone(), target.shard_selector());
            while let Some(page) = pages.next().await {
                let error = match page {
                    Ok(items) => {
                        let namespaces: Vec<String> = match passed {
                            Some(_) => items.iter().filter_map(|o| o.namespace()).collect(),
                            None => Vec::new(),
                        };
                        // Several at once: each waits on the digest pool or the engine, and
                        // one by one a handover took several times as long as a start-up.
                        futures::stream::iter(items)
                            .for_each_concurrent(self.watches.in_flight(), &mut each)
                            .await;
                        if let Some(Passed { through, list }) = passed {
                            self.release(through.page(list, namespaces.iter().map(String::as_str)));
                        }
                        continue;
                    }
                    Err(e) => e,
                };
                if !wanted.iter().any(|ns| self.watches.ownership().owns(ns)) {
                    info!(%target, resource, "stopped listing: no longer owned");
                    return;
                }
                warn!(%target, resource, %error, retry_in = ?backoff,
                    "backfill list failed; retrying before the namespaces count as synced");
                self.watches.backfill_list_failed(resource);
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(BACKFILL_RETRY_CAP);
                if let Some(Passed { through, list }) = passed {
                    through.restarted(list);
                }
                continue 'list;
            }
            if let Some(Passed { through, list }) = passed {
                self.release(through.done(list));
            }
            return;
        }
    }

    /// Indexes one listed config if it is in a gained namespace (hashed on the digest pool).
    async fn backfill_config<K: ConfigSource>(
        &self,
        obj: K,
        wanted: &HashSet<&str>,
        listed: &std::sync::Mutex<HashSet<ConfigKey>>,
    ) {
        let Some(namespace) = obj.namespace().filter(|ns| wanted.contains(ns.as_str())) else {
            return;
        };
        let key = ConfigKey::interned(K::KIND, &namespace, &obj.name_any());
        listed.lock().expect("listed keys").insert(key.clone());
        match self.watches.config_state(obj).await {
            Ok(state) => {
                self.watches.sink().config_listed(key, state);
            }
            Err(e) => warn!(config = %key, error = %e, "config not hashed"),
        }
    }
}

/// Where a config list of a backfill across namespaces reports its pages: its place among the
/// backfill's config lists.
#[derive(Clone, Copy)]
struct Passed<'a> {
    through: &'a ListedThrough,
    list: usize,
}

/// How long each stage of one backfill took (summed over its targets), for its log line and
/// the `backfill_duration_seconds` metric.
#[derive(Default)]
struct StageTimes {
    workloads: Duration,
    configs: Duration,
    /// `None`: nothing to catch up (namespaces entering the selection, or a planned handover).
    catch_up: Option<Duration>,
}

impl StageTimes {
    fn report(&self, watches: &impl Watches) {
        watches.backfill_stage(BackfillStage::Workloads, self.workloads);
        watches.backfill_stage(BackfillStage::Configs, self.configs);
        if let Some(took) = self.catch_up {
            watches.backfill_stage(BackfillStage::CatchUp, took);
        }
    }
}

/// Above this many namespaces gained at once, one cluster-wide list per kind is cheaper.
const PER_NAMESPACE_LISTS: usize = 8;

/// Backoff between attempts of a failed backfill list.
const BACKFILL_RETRY_BASE: std::time::Duration = std::time::Duration::from_millis(200);
const BACKFILL_RETRY_CAP: std::time::Duration = std::time::Duration::from_secs(10);

/// A one-shot list read one page at a time: the pages of a paginated LIST, or of one streaming
/// request where the server and the kind allow it (`Watches::streamed_list`). A handover once
/// listed each kind cluster-wide and kept only the gained namespaces: collecting every page
/// first held the whole cluster's configs and workloads at once (a replica went from 66 to
/// ~770 MiB in the 4-replica medium load test).
pub(super) struct Pages<'a, K, W> {
    watches: &'a W,
    list: KindList<'a, K>,
    /// The next page's parameters; `None` after the last page or an error.
    params: Option<ListParams>,
    /// Sent with every page (the API server shards the list to these ranges).
    shard_selector: Option<&'a str>,
    /// The list as one streaming request, when the server and the kind allow it.
    streamed: Option<StreamedList<K>>,
}

/// One kind's LIST: its collection, its parameters (with the page size, `limit`), its name (logs,
/// metrics, explain) and its protobuf decoder (`None`: read in JSON, a custom resource or a
/// list that needs what protobuf decoding drops, such as managedFields).
#[derive(Clone)]
pub(super) struct KindList<'a, K> {
    pub(super) api: &'a Api<K>,
    pub(super) params: ListParams,
    pub(super) resource: &'static str,
    pub(super) decode: Option<Decode<K>>,
}

impl<'a, K, W> Pages<'a, K, W>
where
    K: Listable,
    W: Watches,
{
    pub(super) fn new(
        watches: &'a W,
        list: KindList<'a, K>,
        shard_selector: Option<&'a str>,
    ) -> Self {
        let mut pages = Self {
            watches,
            params: Some(list.params.clone()),
            list,
            shard_selector,
            streamed: None,
        };
        pages.streamed = watches.streamed_list(&pages.request(&pages.list.params));
        pages
    }

    fn request<'p>(&'p self, params: &'p ListParams) -> PageRequest<'p, K> {
        PageRequest {
            api: self.list.api,
            resource: self.list.resource,
            params,
            shard_selector: self.shard_selector,
            decode: self.list.decode.clone(),
        }
    }

    /// The next page; `None` after the last page or an error.
    pub(super) async fn next(&mut self) -> Option<Result<Vec<K>, kube::Error>> {
        if let Some(streamed) = &mut self.streamed {
            return streamed.next().await;
        }
        let params = self.params.take()?;
        let request = self.request(&params);
        match self.watches.list_page(request).await {
            Ok(page) => {
                self.params = page
                    .continue_token
                    .map(|token| params.continue_token(&token));
                Some(Ok(page.items))
            }
            Err(e) => Some(Err(e)),
        }
    }
}

/// A config kind the hand-over lists, by namespace or across them: a ConfigMap or a Secret.
pub(super) trait ListedConfig:
    ConfigSource
    + FromProtobuf
    + Sync
    + kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType: Default>
{
}

impl<K> ListedConfig for K where
    K: ConfigSource
        + FromProtobuf
        + Sync
        + kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType: Default>
{
}

/// Where a backfill lists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum ListTarget {
    /// One namespace.
    Namespace(String),
    /// Every namespace (still sharded to this replica's selector when the server shards).
    All,
    /// The namespaces of these hash ranges (a `shardSelector`), across the cluster.
    Ranges(String),
}

impl ListTarget {
    pub(super) fn namespace(&self) -> Option<&str> {
        match self {
            Self::Namespace(ns) => Some(ns),
            Self::All | Self::Ranges(_) => None,
        }
    }

    pub(super) fn shard_selector(&self) -> Option<&str> {
        match self {
            Self::Ranges(selector) => Some(selector),
            Self::Namespace(_) | Self::All => None,
        }
    }
}

impl std::fmt::Display for ListTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Namespace(ns) => write!(f, "namespace {ns}"),
            Self::All => f.write_str("all namespaces"),
            Self::Ranges(_) => f.write_str("the gained hash ranges"),
        }
    }
}

/// The catch-up of a namespace entering the selection at `selected_at` (0: unknown, none). It
/// holds this replica's acted version at the label until what it finds is queued: the config
/// watch may already have passed changes made there after the label (dropped, the namespace not
/// selected yet), and a successor taking the namespace over after a crash meanwhile catches up
/// from the published version, which must not be past them.
fn entry_catch_up(acted: &ActedTracker, selected_at: u64) -> Option<CatchUp> {
    (selected_at > 0).then(|| {
        let since: ActedVersions = [ConfigKind::ConfigMap, ConfigKind::Secret]
            .into_iter()
            .map(|kind| (kind, selected_at))
            .collect();
        CatchUp::holding(acted, since)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_holds_the_acted_version_at_the_label_until_its_catch_up_ends() {
        let acted = ActedTracker::default();
        acted.processed(ConfigKind::ConfigMap, 100);
        let catch_up = entry_catch_up(&acted, 150).expect("a selecting event's version");
        // The config watch delivers changes past the label meanwhile.
        acted.processed(ConfigKind::ConfigMap, 400);
        acted.processed(ConfigKind::Secret, 500);
        assert_eq!(acted.acted().get(ConfigKind::ConfigMap), Some(150));
        assert_eq!(acted.acted().get(ConfigKind::Secret), Some(150));
        drop(catch_up);
        assert_eq!(acted.acted().get(ConfigKind::ConfigMap), Some(400));
        assert_eq!(acted.acted().get(ConfigKind::Secret), Some(500));
    }

    #[test]
    fn an_entry_of_unknown_version_catches_nothing_up() {
        assert!(entry_catch_up(&ActedTracker::default(), 0).is_none());
    }
}
