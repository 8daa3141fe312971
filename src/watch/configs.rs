//! Config watches: ConfigMaps, Secrets and (with CSI integration) SecretProviderClassPodStatus.
//! Each object is reduced to a digest on the worker pool and dropped; only the digest and two
//! annotation flags reach the index.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, DynamicObject};
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::task::JoinSet;
use tracing::{debug, warn};

use crate::digest::ConfigPayload;
use crate::engine::{ConfigObserver, Phase};
use crate::index::ConfigState;
use crate::model::{ConfigKey, ConfigKind};
use crate::rollout::{QueueObserver, WorkloadWriter};

use super::workloads::{dynamic_apis, scope_len, stream_namespace};
use super::{SyncGate, WatchContext, WatchObserver, scoped_apis, watch_error, watch_streams};

/// A watched config object, split into identity, annotations and payload.
pub trait ConfigSource:
    Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static
{
    const KIND: ConfigKind;
    fn into_payload(self) -> ConfigPayload;
}

impl ConfigSource for ConfigMap {
    const KIND: ConfigKind = ConfigKind::ConfigMap;
    fn into_payload(self) -> ConfigPayload {
        ConfigPayload::ConfigMap {
            data: self.data.unwrap_or_default(),
            binary_data: self
                .binary_data
                .unwrap_or_default()
                .into_iter()
                .map(|(k, v)| (k, v.0))
                .collect(),
        }
    }
}

impl ConfigSource for Secret {
    const KIND: ConfigKind = ConfigKind::Secret;
    fn into_payload(self) -> ConfigPayload {
        let mut data: BTreeMap<String, Vec<u8>> = self
            .data
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, v.0))
            .collect();
        // stringData is write-only, but a client may still send it back: it wins, as on write.
        for (k, v) in self.string_data.unwrap_or_default() {
            data.insert(k, v.into_bytes());
        }
        ConfigPayload::Secret { data }
    }
}

fn spc_pod_status_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(
            "secrets-store.csi.x-k8s.io",
            "v1",
            "SecretProviderClassPodStatus",
        ),
        "secretproviderclasspodstatuses",
    )
}

pub(crate) fn spc_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("secrets-store.csi.x-k8s.io", "v1", "SecretProviderClass"),
        "secretproviderclasses",
    )
}

pub(super) fn spawn_all<W, O, C, M>(
    ctx: &Arc<WatchContext<W, O, C, M>>,
    tasks: &mut JoinSet<anyhow::Result<()>>,
    streaming_lists: bool,
) -> SyncGate
where
    W: WorkloadWriter,
    O: QueueObserver,
    C: ConfigObserver,
    M: WatchObserver,
{
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
                tasks.spawn(
                    async move { watch_kind::<ConfigMap, _, _, _, _>(ctx, config, gate).await },
                );
            }
            ConfigKind::Secret => {
                tasks.spawn(
                    async move { watch_kind::<Secret, _, _, _, _>(ctx, config, gate).await },
                );
            }
            ConfigKind::SecretProviderClass => {
                // Pod statuses carry no user labels: the resource selector does not apply.
                tasks.spawn(async move { watch_spc(ctx, gate).await });
            }
        }
    }
    gate
}

async fn watch_kind<K, W, O, C, M>(
    ctx: Arc<WatchContext<W, O, C, M>>,
    config: watcher::Config,
    gate: SyncGate,
) -> anyhow::Result<()>
where
    K: ConfigSource + Resource<Scope = k8s_openapi::NamespaceResourceScope>,
    K::DynamicType: Default,
    W: WorkloadWriter,
    O: QueueObserver,
    C: ConfigObserver,
    M: WatchObserver,
{
    let apis: Vec<Api<K>> = scoped_apis(&ctx.client, &ctx.settings.scope);
    let streams = apis.len();
    let mut synced = vec![false; streams];
    let mut relisting: Vec<Option<HashSet<ConfigKey>>> = vec![None; streams];
    // Digests run on the pool while events keep their order: two in flight per worker keeps
    // every worker busy (the flag's 0 means a pool sized to the machine, so ask the pool).
    let workers = ctx.pool.workers() * 2;
    let prepared = watch_streams(apis, config).map(|(i, event)| {
        let ctx = ctx.clone();
        async move { (i, ctx.prepare::<K>(event).await) }
    });
    let mut prepared = prepared.buffered(workers);
    while let Some((i, event)) = prepared.next().await {
        let phase = if synced[i] {
            Phase::Live
        } else {
            Phase::Startup
        };
        match event {
            Prepared::Init => relisting[i] = Some(HashSet::new()),
            Prepared::Applied {
                key,
                state,
                initial,
            } => {
                if initial && let Some(seen) = relisting[i].as_mut() {
                    seen.insert(key.clone());
                }
                ctx.engine.config_applied(key, state, phase);
            }
            Prepared::Deleted(key) => {
                ctx.engine.config_deleted(&key);
            }
            Prepared::InitDone => {
                if let Some(seen) = relisting[i].take()
                    && synced[i]
                {
                    // Deleted while the watch was down: real deletions.
                    let ns = stream_namespace(&ctx.settings.scope, i);
                    let gone: Vec<ConfigKey> = ctx
                        .engine
                        .index
                        .config_keys(K::KIND, ns)
                        .into_iter()
                        .filter(|k| !seen.contains(k))
                        .collect();
                    for key in gone {
                        ctx.engine.config_deleted(&key);
                    }
                }
                if !synced[i] {
                    synced[i] = true;
                    gate.done_one();
                }
            }
            Prepared::Skipped => {}
            Prepared::Failed(e) => watch_error(&ctx.observer, K::KIND.as_str(), &e),
        }
    }
    anyhow::bail!("the {} watch ended", K::KIND)
}

pub(super) enum Prepared {
    Init,
    Applied {
        key: ConfigKey,
        state: ConfigState,
        initial: bool,
    },
    Deleted(ConfigKey),
    InitDone,
    Skipped,
    Failed(watcher::Error),
}

impl<W, O, C, M> WatchContext<W, O, C, M>
where
    W: WorkloadWriter,
    O: QueueObserver,
    C: ConfigObserver,
    M: WatchObserver,
{
    fn flag(&self, annotations: &BTreeMap<String, String>, key: &str) -> bool {
        crate::policy::config_flag(annotations, key)
    }

    async fn prepare<K: ConfigSource>(
        &self,
        event: Result<watcher::Event<K>, watcher::Error>,
    ) -> Prepared {
        let (obj, initial) = match event {
            Ok(watcher::Event::Init) => return Prepared::Init,
            Ok(watcher::Event::InitDone) => return Prepared::InitDone,
            Ok(watcher::Event::InitApply(o)) => (o, true),
            Ok(watcher::Event::Apply(o)) => (o, false),
            Ok(watcher::Event::Delete(o)) => {
                let Some(ns) = o.namespace() else {
                    return Prepared::Skipped;
                };
                return Prepared::Deleted(ConfigKey::new(K::KIND, &ns, &o.name_any()));
            }
            Err(e) => return Prepared::Failed(e),
        };
        let Some(ns) = obj.namespace() else {
            return Prepared::Skipped;
        };
        if !self.engine.ownership.owns(&ns) {
            return Prepared::Skipped;
        }
        let key = ConfigKey::interned(K::KIND, &ns, &obj.name_any());
        let annotations = obj.annotations();
        let ignore = self.flag(annotations, &self.settings.keys.ignore);
        let matched = self.flag(annotations, &self.settings.keys.match_);
        let resource_version = crate::index::resource_version(obj.meta());
        match self.pool.digest(obj.into_payload()).await {
            Ok(digest) => Prepared::Applied {
                key,
                state: ConfigState {
                    digest,
                    ignore,
                    matched,
                    resource_version,
                },
                initial,
            },
            Err(e) => {
                warn!(config = %key, error = %e, "config not hashed");
                Prepared::Skipped
            }
        }
    }

    /// A SecretProviderClassPodStatus: the mounted versions of one SecretProviderClass in one pod.
    async fn prepare_spc(&self, obj: DynamicObject) -> Option<(ConfigKey, ConfigState)> {
        let ns = obj.namespace()?;
        if !self.engine.ownership.owns(&ns) {
            return None;
        }
        let status = obj.data.get("status")?;
        let class_name = status.get("secretProviderClassName")?.as_str()?.to_string();
        let objects: Vec<(String, String)> = status
            .get("objects")
            .and_then(Value::as_array)
            .map(|objs| {
                objs.iter()
                    .filter_map(|o| {
                        Some((
                            o.get("id")?.as_str()?.to_string(),
                            o.get("version")?.as_str()?.to_string(),
                        ))
                    })
                    .collect()
            })
            .unwrap_or_default();
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
        let digest = self
            .pool
            .digest(ConfigPayload::SecretProviderClass {
                class_name,
                objects,
            })
            .await
            .ok()?;
        let state = ConfigState {
            digest,
            ignore: self.flag(&annotations, &self.settings.keys.ignore),
            matched: self.flag(&annotations, &self.settings.keys.match_),
            // Pod statuses of one class come from several objects: their versions do not order.
            resource_version: 0,
        };
        Some((key, state))
    }
}

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
    by_status: HashMap<PodStatusId, [u8; 32]>,
}

impl ReportedVersions {
    /// Records what `id` reports; true when it is new or reports other versions than before.
    fn changed(&mut self, id: PodStatusId, digest: [u8; 32]) -> bool {
        self.by_status.insert(id, digest) != Some(digest)
    }

    fn forget(&mut self, id: &PodStatusId) {
        self.by_status.remove(id);
    }

    /// After a relist of `namespace` (`None`: all): drops pod statuses deleted meanwhile.
    fn retain_listed(&mut self, namespace: Option<&str>, listed: &HashSet<PodStatusId>) {
        self.by_status
            .retain(|id, _| listed.contains(id) || namespace.is_some_and(|ns| ns != id.0));
    }
}

async fn watch_spc<W, O, C, M>(
    ctx: Arc<WatchContext<W, O, C, M>>,
    gate: SyncGate,
) -> anyhow::Result<()>
where
    W: WorkloadWriter,
    O: QueueObserver,
    C: ConfigObserver,
    M: WatchObserver,
{
    let ar = spc_pod_status_resource();
    let apis = dynamic_apis(&ctx.client, &ctx.settings.scope, &ar);
    let mut synced = vec![false; apis.len()];
    let mut relisting: Vec<Option<HashSet<PodStatusId>>> = vec![None; apis.len()];
    let mut reported = ReportedVersions::default();
    let mut stream = watch_streams(apis, watcher::Config::default().any_semantic());
    while let Some((i, event)) = stream.next().await {
        let phase = if synced[i] {
            Phase::Live
        } else {
            Phase::Startup
        };
        match event {
            Ok(watcher::Event::InitApply(obj) | watcher::Event::Apply(obj)) => {
                let id = pod_status_id(&obj);
                if let Some(seen) = relisting[i].as_mut() {
                    seen.insert(id.clone());
                }
                if let Some((key, state)) = ctx.prepare_spc(obj).await
                    && reported.changed(id, state.digest.blake3)
                {
                    ctx.engine.config_applied(key, state, phase);
                }
            }
            // One pod's status going away is not the SecretProviderClass being deleted.
            Ok(watcher::Event::Delete(obj)) => reported.forget(&pod_status_id(&obj)),
            Ok(watcher::Event::Init) => relisting[i] = Some(HashSet::new()),
            Ok(watcher::Event::InitDone) => {
                if let Some(seen) = relisting[i].take() {
                    reported.retain_listed(stream_namespace(&ctx.settings.scope, i), &seen);
                }
                if !synced[i] {
                    synced[i] = true;
                    gate.done_one();
                }
            }
            Err(e) => watch_error(&ctx.observer, "secretproviderclasspodstatus", &e),
        }
    }
    anyhow::bail!("the SecretProviderClassPodStatus watch ended")
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
        let (v1, v2) = ([1; 32], [2; 32]);
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
        reported.changed(id("kept"), [1; 32]);
        reported.changed(id("gone"), [1; 32]);
        reported.changed(("other".into(), "x".into()), [1; 32]);
        reported.retain_listed(Some("ns"), &HashSet::from([id("kept")]));
        assert!(!reported.changed(id("kept"), [1; 32]));
        assert!(reported.changed(id("gone"), [1; 32]));
        assert!(!reported.changed(("other".into(), "x".into()), [1; 32]));
        reported.retain_listed(None, &HashSet::new());
        assert!(reported.by_status.is_empty());
    }
}
