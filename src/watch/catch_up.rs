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
//! configs whose resourceVersion is newer than the version are taken as changed: a config
//! created in the gap, or touched only in its metadata, may then roll its never-reloaded
//! workloads once, which beats losing a reload (warning and metric).

use std::collections::HashMap;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::ResourceExt;
use kube::api::{Api, ListParams, VersionMatch};
use tracing::{info, warn};

use crate::digest::ConfigSource;
use crate::index::ConfigState;
use crate::model::{ConfigKey, ConfigKind};
use crate::shard::acted::ActedVersions;

use super::WatchContext;
use super::backfill::{ListTarget, Pages};
use super::list_strategy::CONFIG_PAGE_SIZE;

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

impl WatchContext {
    /// Acts on every config of `targets` (in namespaces `wanted` accepts) that changed after
    /// `since` and before it was indexed here. Returns the workloads queued.
    pub(super) async fn catch_up(
        &self,
        targets: &[ListTarget],
        wanted: &(dyn Fn(&str) -> bool + Sync),
        since: &ActedVersions,
    ) -> usize {
        let mut queued = 0;
        for target in targets {
            for (kind, version) in since.iter() {
                if !self.settings.watches_config(kind) {
                    continue;
                }
                queued += match kind {
                    ConfigKind::ConfigMap => {
                        self.catch_up_kind::<ConfigMap>(target, wanted, version)
                            .await
                    }
                    ConfigKind::Secret => {
                        self.catch_up_kind::<Secret>(target, wanted, version).await
                    }
                    // Pod statuses carry the mounted versions themselves (not tracked).
                    ConfigKind::SecretProviderClass => 0,
                };
            }
        }
        queued
    }

    async fn catch_up_kind<K>(
        &self,
        target: &ListTarget,
        wanted: &(dyn Fn(&str) -> bool + Sync),
        version: u64,
    ) -> usize
    where
        K: ConfigSource + kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        K::DynamicType: Default,
    {
        let (result, queued, changed) = match self.configs_at::<K>(target, wanted, version).await {
            Ok(before) => {
                let changed = self.changed_since(K::KIND, wanted, &before);
                let queued = changed
                    .iter()
                    .map(|key| self.engine.missed_change(key, before.get(key)))
                    .sum();
                (CatchUpResult::Compared, queued, changed.len())
            }
            Err(kube::Error::Api(status)) if status.code == 410 => {
                let newer = self.newer_than(K::KIND, wanted, version);
                warn!(%target, kind = K::KIND.as_str(), version, configs = newer.len(),
                    "the history to catch up from is compacted: every config changed since \
                     counts as changed (a config created meanwhile may roll workloads never \
                     reloaded once)");
                let queued = newer
                    .iter()
                    .map(|key| self.engine.missed_change(key, None))
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
        self.observer.catch_up(result.as_str(), changed);
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
        before: &HashMap<ConfigKey, ConfigState>,
    ) -> Vec<ConfigKey> {
        before
            .iter()
            .filter(|(key, _)| key.kind == kind && wanted(&key.namespace))
            .filter(|(key, old)| {
                self.index
                    .config(key)
                    .is_some_and(|now| now.digest != old.digest)
            })
            .map(|(key, _)| key.clone())
            .collect()
    }

    /// Configs of `kind` the index holds at a resourceVersion newer than `version`.
    fn newer_than(
        &self,
        kind: ConfigKind,
        wanted: &(dyn Fn(&str) -> bool + Sync),
        version: u64,
    ) -> Vec<ConfigKey> {
        self.index
            .config_keys(kind, None)
            .into_iter()
            .filter(|key| wanted(&key.namespace))
            .filter(|key| {
                self.index
                    .config(key)
                    .is_some_and(|s| s.resource_version > version)
            })
            .collect()
    }

    /// The configs of `target` as they were at `version`, hashed (payloads dropped).
    async fn configs_at<K>(
        &self,
        target: &ListTarget,
        wanted: &(dyn Fn(&str) -> bool + Sync),
        version: u64,
    ) -> Result<HashMap<ConfigKey, ConfigState>, kube::Error>
    where
        K: ConfigSource + kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        K::DynamicType: Default,
    {
        let api: Api<K> = match target.namespace() {
            Some(ns) => Api::namespaced(self.client.clone(), ns),
            None => Api::all(self.client.clone()),
        };
        let mut params = ListParams::default()
            .at(&version.to_string())
            .matching(VersionMatch::Exact)
            .limit(CONFIG_PAGE_SIZE);
        if let Some(selector) = &self.settings.resource_label_selector {
            params = params.labels(selector);
        }
        if let Some(fields) = self.settings.config_field_selector(K::KIND) {
            params = params.fields(&fields);
        }
        let mut backoff = RETRY_BASE;
        let mut attempt = 1;
        loop {
            match self.list_at(&api, params.clone(), target, wanted).await {
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
        api: &Api<K>,
        params: ListParams,
        target: &ListTarget,
        wanted: &(dyn Fn(&str) -> bool + Sync),
    ) -> Result<HashMap<ConfigKey, ConfigState>, kube::Error>
    where
        K: ConfigSource + kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        K::DynamicType: Default,
    {
        let mut before = HashMap::new();
        let mut pages = Pages::new(api, params, target.shard_selector());
        while let Some(page) = pages.next().await {
            for obj in page? {
                let Some(namespace) = obj.namespace().filter(|ns| wanted(ns)) else {
                    continue;
                };
                let key = ConfigKey::interned(K::KIND, &namespace, &obj.name_any());
                match self.config_state(obj).await {
                    Ok(state) => {
                        before.insert(key, state);
                    }
                    Err(e) => warn!(config = %key, error = %e, "config not hashed"),
                }
            }
        }
        Ok(before)
    }
}
