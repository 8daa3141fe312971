//! Config watches: ConfigMaps, Secrets and (with CSI integration) SecretProviderClassPodStatus.
//! Each object is reduced to a digest on the worker pool and dropped; only the digest and two
//! annotation flags reach the index.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, DynamicObject};
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use tokio::task::JoinSet;
use tracing::{debug, warn};

use crate::config::PreciseKeys;
use crate::digest::{ConfigSource, DigestPoolClosed, Reservation};
use crate::engine::Phase;
use crate::handover::acted::ActedTracker;
use crate::index::{ConfigState, ConfigWaves};
use crate::model::{ConfigKey, ConfigKind};
use crate::reloader_format::hash::ConfigPayload;
use crate::resources::{spc_pod_status_resource, spc_resource};
use crate::shard::ListMark;

use super::context::{
    SyncGate, WatchContext, WatchError, dynamic_apis, scope_len, scoped_apis, stream_namespaces,
    watch_error, watch_streams,
};
use super::driver::{IndexVerbs, drive, map_event};
use crate::protobuf::Decode;
use crate::protobuf::FromProtobuf;
use crate::resources::OptionalApi;

pub(super) fn spawn_all(
    ctx: &Arc<WatchContext>,
    tasks: &mut JoinSet<Result<(), WatchError>>,
    streaming_lists: bool,
) -> SyncGate {
    let kinds: Vec<ConfigKind> = ConfigKind::ALL
        .into_iter()
        .filter(|k| ctx.settings.watches_config(*k))
        .collect();
    let gate = SyncGate::new(kinds.len() * scope_len(&ctx.settings.scope));
    let mut config = super::list_strategy::config_watch(streaming_lists);
    if let Some(selector) = &ctx.settings.resource_label_selector {
        config = config.labels(selector);
    }
    for kind in kinds {
        let (ctx, gate, mut config) = (ctx.clone(), gate.clone(), config.clone());
        if let Some(fields) = ctx.settings.config_field_selector(kind) {
            config = config.fields(&fields);
        }
        match kind {
            ConfigKind::ConfigMap => {
                tasks.spawn(async move { watch_kind::<ConfigMap>(ctx, config, gate).await });
            }
            ConfigKind::Secret => {
                tasks.spawn(async move { watch_kind::<Secret>(ctx, config, gate).await });
            }
            ConfigKind::SecretProviderClass => {
                // Pod statuses carry no user labels: the resource selector does not apply.
                let streams = scope_len(&ctx.settings.scope);
                let watcher = ctx.clone();
                let run = move |gate| watch_spc(watcher.clone(), gate);
                tasks.spawn(ctx.while_served(OptionalApi::CSI, gate, streams, run));
            }
        }
    }
    gate
}

async fn watch_kind<K>(
    ctx: Arc<WatchContext>,
    config: watcher::Config,
    gate: SyncGate,
) -> Result<(), WatchError>
where
    K: ConfigSource + FromProtobuf + Resource<Scope = k8s_openapi::NamespaceResourceScope>,
    K::DynamicType: Default,
{
    let apis: Vec<Api<K>> = scoped_apis(&ctx.client, &ctx.settings.scope);
    // Digests run on the pool while events keep their order.
    let workers = ctx.hashes_in_flight();
    let decode: Decode<K> = Arc::new(K::from_protobuf);
    let reduced = ctx
        .wire_streams(K::KIND.as_str(), apis, config, Some(decode))
        // The next event is taken once its payload fits the pool's byte budget: the configs
        // held decoded while they wait for a worker count too.
        .then(|(i, event)| {
            let ctx = ctx.clone();
            async move {
                let reserved = ctx.reserve_for(&event).await;
                (i, event, reserved)
            }
        })
        .map(|(i, event, reserved)| {
            let ctx = ctx.clone();
            async move {
                let reduce = |obj, deleted| ctx.reduce::<K>(obj, deleted, reserved);
                (i, map_event(event, reduce).await)
            }
        })
        .buffered(workers)
        .boxed();
    let mut verbs = ConfigVerbs {
        ctx: ctx.clone(),
        kind: K::KIND,
        lists: ListProgress::default(),
    };
    drive(
        reduced,
        stream_namespaces(&ctx.settings.scope),
        &mut verbs,
        &gate,
    )
    .await;
    Err(WatchError::Ended(K::KIND.to_string()))
}

/// A config object reduced to what the index keeps: its key (`None`: not ours) and, unless it
/// was deleted or could not be hashed, its state.
pub(super) struct Reduced {
    key: Option<ConfigKey>,
    state: Option<ConfigState>,
    /// The object's resourceVersion, whoever owns it: how far the watch has delivered.
    version: u64,
}

/// ConfigMaps and Secrets into the index.
struct ConfigVerbs {
    ctx: Arc<WatchContext>,
    kind: ConfigKind,
    lists: ListProgress,
}

/// How far the lists in progress have delivered. A list comes in key order, not in
/// resourceVersion order: the highest version seen halfway through says nothing of the objects
/// still to come (an old object listed first, published as the acted version by a replica then
/// killed, sends every successor's catch-up back to it). So a list's versions count only once it
/// has finished, and while any list is in progress the acted version stays where it was when
/// the first one started.
#[derive(Default)]
struct ListProgress {
    in_progress: usize,
    highest: u64,
    held: Vec<crate::handover::acted::ActedGuard>,
}

impl ListProgress {
    fn started(&mut self, kind: ConfigKind, acted: &ActedTracker) {
        if self.in_progress == 0
            && let Some(version) = acted.acted().get(kind)
        {
            self.held = acted.hold_at(&[(kind, version)].into_iter().collect());
        }
        self.in_progress += 1;
    }

    /// An object a list delivered.
    fn listed(&mut self, version: u64) {
        self.highest = self.highest.max(version);
    }

    /// A list finished: with no other in progress, what they delivered counts as processed.
    fn finished(&mut self, kind: ConfigKind, acted: &ActedTracker) {
        self.in_progress = self.in_progress.saturating_sub(1);
        if self.in_progress == 0 {
            acted.processed(kind, std::mem::take(&mut self.highest));
            self.held.clear();
        }
    }
}

impl IndexVerbs<Reduced> for ConfigVerbs {
    type Key = ConfigKey;

    async fn apply(&mut self, obj: Reduced, phase: Phase) -> Option<ConfigKey> {
        let acted = self.ctx.engine.acted().clone();
        let version = obj.version;
        let applied = async {
            let (key, state) = (obj.key?, obj.state?);
            self.ctx.before_change(&key, &state, phase).await;
            self.ctx.engine.config_applied(key.clone(), state, phase);
            Some(key)
        }
        .await;
        // After the engine queued what it rolls (each queued change holds the version below it).
        match phase {
            Phase::Startup | Phase::Relisted => self.lists.listed(version),
            _ => acted.processed(self.kind, version),
        }
        applied
    }

    async fn delete(&mut self, obj: Reduced) {
        if let Some(key) = obj.key {
            if self.ctx.settings.reload_on_delete {
                self.ctx.refresh_listed(&key.namespace).await;
            }
            self.ctx.engine.config_deleted(&key);
        }
        self.ctx.engine.acted().processed(self.kind, obj.version);
    }

    fn list_mark(&self) -> ListMark {
        self.ctx.ownership.list_mark()
    }

    fn list_started(&mut self) {
        self.lists.started(self.kind, self.ctx.engine.acted());
    }

    /// The first list finds what exists; nothing was known to go missing.
    fn diffs_first_list(&self) -> bool {
        false
    }

    fn reset(
        &mut self,
        namespace: Option<&str>,
        seen: Option<HashSet<ConfigKey>>,
        first: bool,
        mark: ListMark,
    ) {
        self.lists.finished(self.kind, self.ctx.engine.acted());
        let Some(seen) = seen.filter(|_| !first) else {
            return;
        };
        // Deleted while the watch was down: real deletions.
        let (index, ownership) = (&self.ctx.index, &self.ctx.ownership);
        for key in index.config_keys(self.kind, namespace) {
            if !seen.contains(&key) && ownership.listed_throughout(&key.namespace, mark) {
                self.ctx.engine.config_deleted(&key);
            }
        }
    }

    fn failed(&mut self, error: &watcher::Error) {
        watch_error(self.ctx.observer.as_ref(), self.kind.as_str(), error);
    }
}

impl WatchContext {
    /// Workloads found by LIST are listed again in the config's namespace when its content
    /// changed, so the decision sees them as they are now.
    async fn before_change(&self, key: &ConfigKey, state: &ConfigState, phase: Phase) {
        let changed = self
            .index
            .config(key)
            .is_none_or(|indexed| indexed.digest != state.digest);
        if phase.after_startup() && changed {
            self.refresh_listed(&key.namespace).await;
        }
    }

    fn flag(&self, annotations: &BTreeMap<String, String>, key: &str) -> bool {
        crate::reload_policy::config_flag(annotations, key)
    }

    /// The pool's byte budget for the payload of an applied config (`None`: nothing to hash).
    async fn reserve_for<K: ConfigSource>(
        &self,
        event: &Result<watcher::Event<K>, watcher::Error>,
    ) -> Option<Reservation> {
        match event {
            Ok(watcher::Event::Apply(obj) | watcher::Event::InitApply(obj)) => {
                self.pool.reserve(obj.payload_bytes()).await.ok()
            }
            _ => None,
        }
    }

    /// Reduces one config object to its key and state (hashed on the digest pool, within
    /// `reserved` when given); a deleted one to its key only.
    async fn reduce<K: ConfigSource>(
        &self,
        obj: K,
        deleted: bool,
        reserved: Option<Reservation>,
    ) -> Reduced {
        let version = crate::index::resource_version(obj.meta());
        let Some(ns) = obj.namespace() else {
            return Reduced {
                key: None,
                state: None,
                version,
            };
        };
        if deleted {
            let key = ConfigKey::new(K::KIND, &ns, &obj.name_any());
            return Reduced {
                key: Some(key),
                state: None,
                version,
            };
        }
        if !self.ownership.owns(&ns) {
            return Reduced {
                key: None,
                state: None,
                version,
            };
        }
        let key = ConfigKey::interned(K::KIND, &ns, &obj.name_any());
        let state = match self.config_state_within(obj, reserved).await {
            Ok(state) => Some(state),
            Err(e) => {
                warn!(config = %key, error = %e, "config not hashed");
                None
            }
        };
        Reduced {
            key: Some(key),
            state,
            version,
        }
    }

    /// How many configs a watch or a list hands to the pool at once: enough that a worker
    /// finds the next one queued when it is done with one (the pool bounds their bytes).
    /// Two per worker kept the queue empty most of the time, and each config then cost a
    /// wake-up of the worker and one of the runtime.
    pub(super) fn hashes_in_flight(&self) -> usize {
        self.pool.workers() * HASHES_IN_FLIGHT_PER_WORKER
    }

    /// How many listed objects a backfill or a catch-up takes in at once. Fewer than a watch
    /// hands the pool: these run beside the live watches on the same runtime threads, and
    /// each poll of their one task walks every object in flight, so a wide one keeps a live
    /// change waiting longer.
    pub(super) fn handover_in_flight(&self) -> usize {
        self.pool.workers() * HANDOVER_IN_FLIGHT_PER_WORKER
    }

    /// The index state of one config object: digest (on the pool) and annotation flags.
    pub(super) async fn config_state<K: ConfigSource>(
        &self,
        obj: K,
    ) -> Result<ConfigState, DigestPoolClosed> {
        self.config_state_within(obj, None).await
    }

    /// [`Self::config_state`], its payload's bytes `reserved` on the pool already, when given.
    async fn config_state_within<K: ConfigSource>(
        &self,
        obj: K,
        reserved: Option<Reservation>,
    ) -> Result<ConfigState, DigestPoolClosed> {
        let annotations = obj.annotations();
        let ignore = self.flag(annotations, &self.settings.keys.ignore);
        let matched = self.flag(annotations, &self.settings.keys.match_);
        // Most configs have annotations, few have these: no key is built for the others.
        let waves = match obj.namespace() {
            Some(ns) if ConfigWaves::annotated(annotations) => {
                let key = ConfigKey::new(K::KIND, &ns, &obj.name_any());
                ConfigWaves::from_annotations(annotations, &key)
            }
            _ => None,
        };
        let resource_version = crate::index::resource_version(obj.meta());
        let keyed = self.settings.precise_keys != PreciseKeys::Off;
        let payload = obj.into_payload();
        let (digest, keys) = match reserved {
            Some(reserved) => self.pool.digest_reserved(payload, keyed, reserved).await?,
            None => self.pool.digest_keyed(payload, keyed).await?,
        };
        Ok(ConfigState {
            digest,
            keys,
            ignore,
            matched,
            resource_version,
            waves,
        })
    }

    /// A SecretProviderClassPodStatus: the mounted versions of one SecretProviderClass in one pod.
    pub(super) async fn prepare_spc(&self, obj: DynamicObject) -> Option<(ConfigKey, ConfigState)> {
        let ns = obj.namespace()?;
        if !self.ownership.owns(&ns) {
            return None;
        }
        let status = obj.data.get("status")?;
        let class_name = status.get("secretProviderClassName")?.as_str()?.to_string();
        let key = ConfigKey::new(ConfigKind::SecretProviderClass, &ns, &class_name);
        // ignore/match live on the SecretProviderClass itself, not on the pod status.
        let spc: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), &ns, &spc_resource());
        let annotations = match spc.get_opt(&class_name).await {
            Ok(Some(spc)) => spc.metadata.annotations.unwrap_or_default(),
            Ok(None) => BTreeMap::new(),
            Err(e) => {
                debug!(config = %key, error = %e, "SecretProviderClass not readable, no annotations");
                BTreeMap::new()
            }
        };
        let payload = ConfigPayload::secret_provider_class(class_name, status);
        let digest = self.pool.digest(payload).await.ok()?;
        let state = ConfigState {
            digest,
            keys: Default::default(),
            ignore: self.flag(&annotations, &self.settings.keys.ignore),
            matched: self.flag(&annotations, &self.settings.keys.match_),
            // Pod statuses of one class come from several objects: their versions do not order.
            resource_version: 0,
            waves: None,
        };
        Some((key, state))
    }
}

/// See [`WatchContext::hashes_in_flight`].
const HASHES_IN_FLIGHT_PER_WORKER: usize = 32;

/// See [`WatchContext::handover_in_flight`]; the width every in-flight figure had before the
/// watches' was raised to 32.
const HANDOVER_IN_FLIGHT_PER_WORKER: usize = 2;

/// Namespace and name of one SecretProviderClassPodStatus.
type PodStatusId = (String, String);

fn pod_status_id(obj: &DynamicObject) -> PodStatusId {
    (obj.namespace().unwrap_or_default(), obj.name_any())
}

/// The versions each pod status last reported (as a digest). Several pods report on one
/// SecretProviderClass, and during a rotation they disagree for a while; like Reloader, only a
/// pod status whose own versions changed is a change. Otherwise an older pod's status written
/// again (a relist, a metadata edit) would roll the workloads back to the older versions.
#[derive(Default)]
struct ReportedVersions {
    by_status: HashMap<PodStatusId, [u8; 16]>,
}

impl ReportedVersions {
    /// Records what `id` reports; true when it is new or reports other versions than before.
    fn changed(&mut self, id: PodStatusId, digest: [u8; 16]) -> bool {
        self.by_status.insert(id, digest) != Some(digest)
    }

    fn forget(&mut self, id: &PodStatusId) {
        self.by_status.remove(id);
    }

    /// After a relist of `namespace` (`None`: all): drops pod statuses deleted meanwhile.
    /// Forgets pod statuses a list of `namespace` did not return, in the namespaces `covered`.
    fn retain_listed(
        &mut self,
        namespace: Option<&str>,
        listed: &HashSet<PodStatusId>,
        covered: impl Fn(&str) -> bool,
    ) {
        self.by_status.retain(|id, _| {
            listed.contains(id) || namespace.is_some_and(|ns| ns != id.0) || !covered(&id.0)
        });
    }
}

async fn watch_spc(ctx: Arc<WatchContext>, gate: SyncGate) -> Result<(), WatchError> {
    let ar = spc_pod_status_resource();
    let apis = dynamic_apis(&ctx.client, &ctx.settings.scope, &ar);
    let stream = watch_streams(apis, watcher::Config::default());
    let mut verbs = PodStatusVerbs {
        ctx: ctx.clone(),
        reported: ReportedVersions::default(),
    };
    drive(
        stream,
        stream_namespaces(&ctx.settings.scope),
        &mut verbs,
        &gate,
    )
    .await;
    Err(WatchError::Ended("SecretProviderClassPodStatus".into()))
}

/// SecretProviderClassPodStatuses into the index, as their SecretProviderClass's state.
struct PodStatusVerbs {
    ctx: Arc<WatchContext>,
    reported: ReportedVersions,
}

impl IndexVerbs<DynamicObject> for PodStatusVerbs {
    type Key = PodStatusId;

    async fn apply(&mut self, obj: DynamicObject, phase: Phase) -> Option<PodStatusId> {
        let id = pod_status_id(&obj);
        if let Some((key, state)) = self.ctx.prepare_spc(obj).await
            && self.reported.changed(id.clone(), state.digest.blake3)
        {
            self.ctx.before_change(&key, &state, phase).await;
            self.ctx.engine.config_applied(key, state, phase);
        }
        Some(id)
    }

    // One pod's status going away is not the SecretProviderClass being deleted.
    async fn delete(&mut self, obj: DynamicObject) {
        self.reported.forget(&pod_status_id(&obj));
    }

    fn list_mark(&self) -> ListMark {
        self.ctx.ownership.list_mark()
    }

    fn reset(
        &mut self,
        namespace: Option<&str>,
        seen: Option<HashSet<PodStatusId>>,
        _first: bool,
        mark: ListMark,
    ) {
        let Some(seen) = seen else { return };
        let ownership = &self.ctx.ownership;
        self.reported
            .retain_listed(namespace, &seen, |ns| ownership.listed_throughout(ns, mark));
    }

    fn failed(&mut self, error: &watcher::Error) {
        watch_error(
            self.ctx.observer.as_ref(),
            "secretproviderclasspodstatus",
            error,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(name: &str) -> PodStatusId {
        ("ns".into(), name.into())
    }

    #[test]
    fn a_pod_status_is_a_change_only_when_its_own_versions_change() {
        let mut reported = ReportedVersions::default();
        let (v1, v2) = ([1; 16], [2; 16]);
        assert!(reported.changed(id("a"), v1), "new pod status");
        assert!(reported.changed(id("b"), v1), "new pod status");
        assert!(reported.changed(id("a"), v2), "a rotated");
        assert!(!reported.changed(id("b"), v1), "b written again, still v1");
        assert!(!reported.changed(id("a"), v2));
        reported.forget(&id("b"));
        assert!(reported.changed(id("b"), v1), "re-created");
    }

    #[test]
    fn a_relist_drops_pod_statuses_deleted_meanwhile_in_its_namespace_only() {
        let mut reported = ReportedVersions::default();
        reported.changed(id("kept"), [1; 16]);
        reported.changed(id("gone"), [1; 16]);
        reported.changed(("other".into(), "x".into()), [1; 16]);
        reported.retain_listed(Some("ns"), &HashSet::from([id("kept")]), |_| true);
        assert!(!reported.changed(id("kept"), [1; 16]));
        assert!(reported.changed(id("gone"), [1; 16]));
        assert!(!reported.changed(("other".into(), "x".into()), [1; 16]));
        reported.changed(("entered".into(), "y".into()), [1; 16]);
        reported.retain_listed(None, &HashSet::new(), |ns| ns != "entered");
        assert_eq!(
            reported.by_status.len(),
            1,
            "a namespace the list did not cover throughout keeps what its backfill found"
        );
    }
}

#[cfg(test)]
mod list_progress_tests {
    use super::*;
    use ConfigKind::ConfigMap;

    #[test]
    fn a_list_in_progress_moves_the_acted_version_only_when_it_has_finished() {
        let acted = ActedTracker::default();
        acted.processed(ConfigMap, 100);
        let mut lists = ListProgress::default();
        lists.started(ConfigMap, &acted);
        lists.listed(5000);
        lists.listed(385);
        acted.processed(ConfigMap, 6000); // a live event of another stream
        assert_eq!(acted.acted().get(ConfigMap), Some(100));
        lists.finished(ConfigMap, &acted);
        assert_eq!(acted.acted().get(ConfigMap), Some(6000));
    }

    #[test]
    fn the_first_list_publishes_nothing_until_it_has_finished() {
        let acted = ActedTracker::default();
        let mut lists = ListProgress::default();
        lists.started(ConfigMap, &acted);
        lists.listed(385);
        assert_eq!(
            acted.acted().get(ConfigMap),
            None,
            "not the oldest object's version"
        );
        lists.listed(80_000);
        lists.finished(ConfigMap, &acted);
        assert_eq!(acted.acted().get(ConfigMap), Some(80_000));
    }

    #[test]
    fn overlapping_lists_count_when_the_last_one_has_finished() {
        let acted = ActedTracker::default();
        acted.processed(ConfigMap, 10);
        let mut lists = ListProgress::default();
        lists.started(ConfigMap, &acted);
        lists.started(ConfigMap, &acted);
        lists.listed(50);
        lists.finished(ConfigMap, &acted);
        assert_eq!(acted.acted().get(ConfigMap), Some(10));
        lists.finished(ConfigMap, &acted);
        assert_eq!(acted.acted().get(ConfigMap), Some(50));
    }
}
