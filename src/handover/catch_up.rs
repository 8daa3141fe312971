//! Changes nobody acted on: a replica that crashed, was paused past its Lease or restarted left
//! a gap between the last change it acted on and the moment another replica (or itself, back)
//! indexed its namespaces. The index built then holds each config's current state; a workload
//! that records a hash of an older one is found by the recorded-hash reconcile, but one that was
//! never reloaded records nothing, and its config's change in the gap would be lost.
//!
//! So the configs are listed as they were at the version the previous owner had acted up to
//! (its Lease, `kube-reloader.io/acted-versions`), with `resourceVersionMatch=Exact`, and every
//! config whose indexed state differs is acted on as a change. Configs created in the gap are
//! not changes (they were not in that list). When etcd has compacted that history (410), the
//! configs are listed as they are now, and those written after their creation (their managed
//! fields say when: the API server stamps each writer's entry) at a resourceVersion newer than
//! the version are taken as changed. A config created in the gap and never written again is
//! not a change (unless `--reload-on-create`); one touched only in its metadata in the gap may
//! roll its never-reloaded workloads once, which beats losing a reload (warning and metric).

use std::collections::{BTreeSet, HashMap};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;
use kube::api::{Api, ListParams, VersionMatch};
use tracing::{debug, info, warn};

use crate::digest::ConfigSource;
use crate::index::ConfigState;
use crate::model::{ConfigKey, ConfigKind};
use crate::resources::CONFIG_PAGE_SIZE;

use super::acted::ActedVersions;
use super::backfill::{Indexing, KindList, ListTarget, ListedConfig, Pages};
use super::gains::{GainSink, Watches};

/// Configs as a list at a past version found them, hashed (payloads dropped), by key.
type StatesThen = HashMap<ConfigKey, ConfigState>;

/// Attempts at a catch-up list that fails for another reason than a compacted history.
const ATTEMPTS: u32 = 5;
const RETRY_BASE: std::time::Duration = std::time::Duration::from_millis(500);

/// How one kind's catch-up went (the metric's `result`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CatchUpResult {
    /// Listed at the version and compared.
    Compared,
    /// The history was compacted: configs newer than the version counted as changed.
    Compacted,
    /// The list kept failing: nothing beyond the recorded-hash reconcile.
    Failed,
}

impl CatchUpResult {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Compared => "compared",
            Self::Compacted => "compacted",
            Self::Failed => "failed",
        }
    }
}

impl<W: Watches> Indexing<'_, W> {
    /// Acts on every config of `targets` (in namespaces `wanted` accepts) that changed after
    /// `since` and before it was indexed here; the kinds at once. Returns the workloads queued.
    pub(super) async fn catch_up(
        &self,
        targets: &[ListTarget],
        wanted: &(dyn Fn(&str) -> bool + Sync),
        since: &ActedVersions,
    ) -> usize {
        let mut queued = 0;
        for target in targets {
            let kinds = since
                .iter()
                .filter(|(kind, _)| self.watches.lists_configs(*kind))
                .map(|(kind, version)| self.catch_up_one(kind, target, wanted, version));
            queued += futures::future::join_all(kinds)
                .await
                .into_iter()
                .sum::<usize>();
        }
        queued
    }

    async fn catch_up_one(
        &self,
        kind: ConfigKind,
        target: &ListTarget,
        wanted: &(dyn Fn(&str) -> bool + Sync),
        version: u64,
    ) -> usize {
        match kind {
            ConfigKind::ConfigMap => {
                self.catch_up_kind::<ConfigMap>(target, wanted, version)
                    .await
            }
            ConfigKind::Secret => self.catch_up_kind::<Secret>(target, wanted, version).await,
            // Pod statuses carry the mounted versions themselves (not tracked).
            ConfigKind::SecretProviderClass => 0,
        }
    }

    async fn catch_up_kind<K>(
        &self,
        target: &ListTarget,
        wanted: &(dyn Fn(&str) -> bool + Sync),
        version: u64,
    ) -> usize
    where
        K: ListedConfig,
    {
        let before = self.configs_before::<K>(target, wanted, version).await;
        let (result, queued, changed) = match before {
            Ok(before) => {
                let changed = self.changed_since(K::KIND, wanted, &before);
                let queued = changed
                    .iter()
                    .map(|key| self.watches.sink().missed_change(key, before.get(key)))
                    .sum();
                (CatchUpResult::Compared, queued, changed.len())
            }
            Err(kube::Error::Api(status)) if status.code == 410 => {
                let newer = self.written_since::<K>(target, wanted, version).await;
                warn!(%target, kind = K::KIND.as_str(), version, configs = newer.len(),
                    "the history to catch up from is compacted: every config written since \
                     counts as changed (one touched only in its metadata may roll workloads \
                     never reloaded once)");
                let queued = newer
                    .iter()
                    .map(|key| self.watches.sink().missed_change(key, None))
                    .sum();
                (CatchUpResult::Compacted, queued, newer.len())
            }
            Err(error) => {
                warn!(%target, kind = K::KIND.as_str(), version, %error,
                    "catch-up list failed: changes made while nobody acted on these namespaces \
                     reach only workloads that recorded a hash");
                (CatchUpResult::Failed, 0, 0)
            }
        };
        self.watches.caught_up(result.as_str(), changed);
        info!(%target, kind = K::KIND.as_str(), since = version, result = result.as_str(),
            changed, queued, "caught up with changes nobody acted on");
        queued
    }

    /// Configs of `kind` the index holds whose state differs from the one they had at the
    /// version (not those created since: absent from `before`).
    fn changed_since(
        &self,
        kind: ConfigKind,
        wanted: &(dyn Fn(&str) -> bool + Sync),
        before: &StatesThen,
    ) -> Vec<ConfigKey> {
        before
            .iter()
            .filter(|(key, _)| key.kind == kind && wanted(&key.namespace))
            .filter(|(key, old)| {
                self.watches
                    .index()
                    .config(key)
                    .is_some_and(|now| now.digest != old.digest)
            })
            .map(|(key, _)| key.clone())
            .collect()
    }

    /// Configs of `target` written after their creation at a resourceVersion newer than
    /// `version` (any newer one with `--reload-on-create`), as listed now. If that list fails
    /// too, every indexed config newer than `version`: a spurious roll beats a lost one.
    async fn written_since<K>(
        &self,
        target: &ListTarget,
        wanted: &(dyn Fn(&str) -> bool + Sync),
        version: u64,
    ) -> Vec<ConfigKey>
    where
        K: ListedConfig,
    {
        let api = self.config_api::<K>(target);
        // In JSON: protobuf decoding drops the managedFields this reads.
        let list = KindList {
            decode: None,
            ..self.config_list(&api, ListParams::default())
        };
        let mut written = Vec::new();
        let mut pages = Pages::new(self.watches, list, target.shard_selector());
        while let Some(page) = pages.next().await {
            let page = match page {
                Ok(page) => page,
                Err(error) => {
                    warn!(%target, kind = K::KIND.as_str(), %error,
                        "listing configs after a compacted catch-up failed: every config newer \
                         than the version counts as changed");
                    return self.newer_than(K::KIND, wanted, version);
                }
            };
            let keys = page.iter().filter_map(|obj| {
                let namespace = obj.namespace().filter(|ns| wanted(ns))?;
                let meta = obj.meta();
                let changed = crate::index::resource_version(meta) > version
                    && (self.watches.settings().reload_on_create || written_since_creation(meta));
                changed.then(|| ConfigKey::interned(K::KIND, &namespace, &obj.name_any()))
            });
            written.extend(keys);
        }
        written
    }

    pub(super) fn config_api<K>(&self, target: &ListTarget) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        K::DynamicType: Default,
    {
        match target.namespace() {
            Some(ns) => Api::namespaced(self.watches.client().clone(), ns),
            None => Api::all(self.watches.client().clone()),
        }
    }

    /// `params` with the page size and the config selectors of `kind`.
    pub(super) fn config_list_params(&self, kind: ConfigKind, params: ListParams) -> ListParams {
        let settings = self.watches.settings();
        let mut params = params.limit(CONFIG_PAGE_SIZE);
        if let Some(selector) = &settings.resource_label_selector {
            params = params.labels(selector);
        }
        if let Some(fields) = settings.config_field_selector(kind) {
            params = params.fields(&fields);
        }
        params
    }

    /// Configs of `kind` the index holds at a resourceVersion newer than `version`.
    fn newer_than(
        &self,
        kind: ConfigKind,
        wanted: &(dyn Fn(&str) -> bool + Sync),
        version: u64,
    ) -> Vec<ConfigKey> {
        let index = self.watches.index();
        index
            .config_keys(kind, None)
            .into_iter()
            .filter(|key| wanted(&key.namespace))
            .filter(|key| {
                index
                    .config(key)
                    .is_some_and(|s| s.resource_version > version)
            })
            .collect()
    }

    /// The configs of `target` that may have changed since `version`, as they were then,
    /// hashed (payloads dropped). Across namespaces, only the namespaces holding a config the
    /// index has at a newer version are listed (`at_version_targets`): a config nobody wrote
    /// since is unchanged, and for a list at a past version the API server reads every object
    /// of the kind in the cluster (from etcd or a snapshot of its cache), however few it keeps.
    async fn configs_before<K>(
        &self,
        target: &ListTarget,
        wanted: &(dyn Fn(&str) -> bool + Sync),
        version: u64,
    ) -> Result<StatesThen, kube::Error>
    where
        K: ListedConfig,
    {
        let index = self.watches.index();
        let written = target
            .namespace()
            .is_none()
            .then(|| index.namespaces_written_since(K::KIND, version, wanted));
        let targets = at_version_targets(target, written);
        debug!(%target, kind = K::KIND.as_str(), version, lists = targets.len(),
            "catch-up lists at the acted version");
        let mut lists = futures::stream::iter(targets)
            .map(|at| async move { self.configs_at::<K>(&at, wanted, version).await })
            .buffer_unordered(AT_VERSION_LISTS_IN_FLIGHT);
        let mut before = HashMap::new();
        while let Some(listed) = lists.next().await {
            before.extend(listed?);
        }
        Ok(before)
    }

    /// The configs of `target` as they were at `version`, hashed (payloads dropped).
    async fn configs_at<K>(
        &self,
        target: &ListTarget,
        wanted: &(dyn Fn(&str) -> bool + Sync),
        version: u64,
    ) -> Result<StatesThen, kube::Error>
    where
        K: ListedConfig,
    {
        let api = self.config_api::<K>(target);
        let at = ListParams::default()
            .at(&version.to_string())
            .matching(VersionMatch::Exact);
        let list = self.config_list(&api, at);
        let mut backoff = RETRY_BASE;
        let mut attempt = 1;
        loop {
            match self.list_at(list.clone(), target, wanted).await {
                Err(kube::Error::Api(status)) if status.code != 410 && attempt < ATTEMPTS => {
                    warn!(%target, kind = K::KIND.as_str(), error = %status.message,
                        retry_in = ?backoff, "catch-up list failed, retrying");
                }
                Err(kube::Error::Api(status)) => return Err(kube::Error::Api(status)),
                Err(error) if attempt < ATTEMPTS => {
                    warn!(%target, kind = K::KIND.as_str(), %error, retry_in = ?backoff,
                        "catch-up list failed, retrying");
                }
                other => return other,
            }
            tokio::time::sleep(backoff).await;
            backoff *= 2;
            attempt += 1;
        }
    }

    async fn list_at<K>(
        &self,
        list: KindList<'_, K>,
        target: &ListTarget,
        wanted: &(dyn Fn(&str) -> bool + Sync),
    ) -> Result<StatesThen, kube::Error>
    where
        K: ListedConfig,
    {
        let mut before = HashMap::new();
        let mut pages = Pages::new(self.watches, list, target.shard_selector());
        while let Some(page) = pages.next().await {
            let changed = page?
                .into_iter()
                .filter_map(|obj| self.changed_candidate(obj, wanted));
            // Several at once on the digest pool, as the watches hash.
            let mut hashed = futures::stream::iter(changed)
                .map(|(key, obj)| async move { (key, self.watches.config_state(obj).await) })
                .buffer_unordered(self.watches.in_flight());
            while let Some((key, state)) = hashed.next().await {
                match state {
                    Ok(state) => {
                        before.insert(key, state);
                    }
                    Err(e) => warn!(config = %key, error = %e, "config not hashed"),
                }
            }
        }
        Ok(before)
    }

    /// A config listed at the catch-up's version, with its key, if it may have changed since:
    /// in a namespace `wanted` accepts, and indexed now at another version. One the index holds
    /// at the same version is unchanged (and one it does not hold was deleted meanwhile, which
    /// is no change to act on), so only what changed is hashed: O(what changed), not O(share).
    fn changed_candidate<K: ConfigSource>(
        &self,
        obj: K,
        wanted: &(dyn Fn(&str) -> bool + Sync),
    ) -> Option<(ConfigKey, K)> {
        let namespace = obj.namespace().filter(|ns| wanted(ns))?;
        let key = ConfigKey::interned(K::KIND, &namespace, &obj.name_any());
        let then = crate::index::resource_version(obj.meta());
        let now = self.watches.index().config_version(&key)?;
        (now != then).then_some((key, obj))
    }
}

/// Where a catch-up lists configs as they were at the acted version: one namespace as it is;
/// across namespaces (`written_since`: those holding a config indexed at a newer version), each
/// of those namespaces on its own, none at all when nothing was written since, and the whole
/// target once more than [`NAMESPACE_LISTS`] were (then one paginated list costs fewer
/// requests than one per namespace).
fn at_version_targets(
    target: &ListTarget,
    written_since: Option<BTreeSet<String>>,
) -> Vec<ListTarget> {
    match written_since {
        Some(namespaces) if namespaces.len() <= NAMESPACE_LISTS => {
            namespaces.into_iter().map(ListTarget::Namespace).collect()
        }
        _ => vec![target.clone()],
    }
}

/// Above this many namespaces written since the acted version, a catch-up lists its whole
/// target at that version instead of each namespace. A namespace list reads one namespace; a
/// list of the whole target at a past version reads every config of the kind in the cluster,
/// in pages one after the other (about 20 per kind at the medium scale's 20,000 configs, 200
/// at the large scale's). 256 namespace lists are 16 rounds of [`AT_VERSION_LISTS_IN_FLIGHT`],
/// each reading one namespace. (At 64, a replica back from a 7 s gap in
/// `chaos-medium-3r-2b7818a` had more and listed its share.)
const NAMESPACE_LISTS: usize = 256;

/// How many namespace lists of one catch-up are in flight at once. Their time is the API
/// round trip, not hashing (each list's configs still go to the digest pool at its width):
/// at the pool's width (4 on 2 cores) 64 lists under a +0.6-0.9 s response delay took 8-20 s
/// (`chaos-medium-3r-2b7818a`). The API server sees a short burst of small reads (one
/// namespace each) once per hand-over.
const AT_VERSION_LISTS_IN_FLIGHT: usize = 16;

/// Whether the object was written after its creation, as its managed fields tell: the API
/// server stamps each writer's entry with the time of its last change (to the second, so a
/// write in the second of the creation is not seen). Without them it cannot tell: written.
fn written_since_creation(meta: &ObjectMeta) -> bool {
    let (Some(created), Some(fields)) = (&meta.creation_timestamp, &meta.managed_fields) else {
        return true;
    };
    fields.is_empty()
        || fields
            .iter()
            .any(|f| f.time.as_ref().is_none_or(|t| t.0 > created.0))
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, Time};

    use super::*;

    fn meta(created: i64, written: &[Option<i64>]) -> ObjectMeta {
        let time = |s: i64| Time(jiff::Timestamp::from_second(s).unwrap());
        ObjectMeta {
            creation_timestamp: Some(time(created)),
            managed_fields: Some(
                written
                    .iter()
                    .map(|t| ManagedFieldsEntry {
                        time: t.map(time),
                        ..Default::default()
                    })
                    .collect(),
            ),
            ..Default::default()
        }
    }

    fn namespaces(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    #[test]
    fn a_catch_up_across_namespaces_lists_only_those_written_since() {
        let ranges = ListTarget::Ranges("range(0,10)".into());
        let targets = at_version_targets(&ranges, Some(namespaces(&["b", "a"])));
        let expected = ["a", "b"].map(|ns| ListTarget::Namespace(ns.into()));
        assert_eq!(targets, expected);
        assert_eq!(
            at_version_targets(&ListTarget::All, Some(namespaces(&[]))),
            []
        );
    }

    #[test]
    fn a_catch_up_with_many_namespaces_written_since_lists_its_whole_target() {
        let many: Vec<String> = (0..=NAMESPACE_LISTS).map(|i| format!("ns-{i}")).collect();
        let many = many.iter().map(String::as_str).collect::<Vec<_>>();
        let ranges = ListTarget::Ranges("range(0,10)".into());
        let targets = at_version_targets(&ranges, Some(namespaces(&many)));
        assert_eq!(targets, [ranges]);
    }

    #[test]
    fn a_catch_up_of_one_namespace_lists_it() {
        let one = ListTarget::Namespace("a".into());
        assert_eq!(
            at_version_targets(&one, None),
            [ListTarget::Namespace("a".into())]
        );
    }

    #[test]
    fn a_config_only_created_was_not_written_since() {
        assert!(!written_since_creation(&meta(100, &[Some(100)])));
        assert!(!written_since_creation(&meta(100, &[Some(100), Some(100)])));
    }

    #[test]
    fn a_later_stamp_of_any_writer_is_a_write_since_creation() {
        assert!(written_since_creation(&meta(100, &[Some(100), Some(130)])));
        assert!(written_since_creation(&meta(100, &[Some(101)])));
    }

    #[test]
    fn without_managed_fields_or_their_time_a_config_counts_as_written() {
        assert!(written_since_creation(&meta(100, &[])));
        assert!(written_since_creation(&meta(100, &[None])));
        let bare = ObjectMeta {
            creation_timestamp: meta(100, &[]).creation_timestamp,
            ..Default::default()
        };
        assert!(written_since_creation(&bare));
    }
}
