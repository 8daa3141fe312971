//! The reverse index: config -> the workloads that use it or name it, plus what the controller
//! remembers of each config (its digest, never its payload) and each workload (its parsed policy
//! and the configs it uses). Fed by the watchers, read by the engine on every config event.
//!
//! Consistency without a global lock: each workload's data lives in one immutable
//! `Arc<WorkloadEntry>` swapped in one step; edges are only a candidate filter. An update adds
//! the new edges before swapping the entry and removes stale edges after, so edges always cover
//! the entry a reader sees, and a reader evaluates only that entry: it never sees half a workload.

mod build;
mod entry;
mod users;
mod wire;

pub use build::{
    BuildError, workload_entry, workload_entry_and_template, workload_entry_from_object,
};
pub use wire::{ProtobufTemplate, TemplateError, WorkloadObject};

pub use entry::{ConfigState, ConfigWaves, IndexedUse, WorkloadEntry};
use users::Users;

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use ahash::RandomState;
use dashmap::DashMap;

use crate::model::{ConfigKey, ConfigKind, WorkloadKey, WorkloadKind};

type Map<K, V> = DashMap<K, V, RandomState>;
type ConfigRef<'a> = dashmap::mapref::multiple::RefMulti<'a, ConfigKey, ConfigSlot>;

/// A resourceVersion as a number, 0 when it is not one (it is opaque by contract; the API
/// server backed by etcd hands out increasing revisions, which is what ordering relies on).
pub fn resource_version(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> u64 {
    meta.resource_version
        .as_deref()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// What an applied config event means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigTransition {
    /// Not known before.
    Created,
    /// The content changed (blake3 differs).
    Changed,
    /// Same content (a label or annotation edit, or a resync): never a reload.
    Unchanged,
}

/// One config: what is known of it and the workloads that use or name it, under one key (at
/// 200,000 configs, one map of both is 10 MiB less than a map of each). Either may be missing:
/// a config not yet seen (or of a type not watched) that a workload uses, a config nobody uses.
/// The entry goes when neither is left.
#[derive(Debug, Default)]
struct ConfigSlot {
    state: Option<ConfigState>,
    users: Option<Users>,
}

impl ConfigSlot {
    fn is_empty(&self) -> bool {
        self.state.is_none() && self.users.is_none()
    }
}

#[derive(Default)]
pub struct ReverseIndex {
    configs: Map<ConfigKey, ConfigSlot>,
    workloads: Map<WorkloadKey, Arc<WorkloadEntry>>,
    /// Workloads whose reload lists hold regex entries, by namespace: they are checked against
    /// every config event of their namespace because a regex cannot be looked up by name.
    pattern_holders: Map<Arc<str>, HashSet<WorkloadKey, RandomState>>,
    /// Workloads indexed per built-in kind, in [`WorkloadKind::BUILT_IN`]'s order.
    built_in_counts: [AtomicUsize; WorkloadKind::BUILT_IN.len()],
}

/// Counts for metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IndexSizes {
    pub configs: usize,
    pub workloads: usize,
    pub edges: usize,
}

impl ReverseIndex {
    pub fn new() -> Self {
        Self::default()
    }

    // ---- configs ----

    pub fn apply_config(&self, key: ConfigKey, state: ConfigState) -> ConfigTransition {
        // A late watch event older than what a list already gave us: not a change back.
        self.store_config(key, state, |old, new| {
            old.resource_version == 0
                || new.resource_version == 0
                || new.resource_version >= old.resource_version
        })
    }

    /// A config listed by a backfill (a namespace gained while the watch keeps running): stored
    /// when nothing is known of `key` (`Created`), or when what is known is older by resource
    /// version (`Changed` if the content differs: a change this replica's watch did not act on,
    /// e.g. one made while the namespace belonged to another replica that has since let go).
    /// Never replaces what the watch delivered with an older or equal snapshot.
    pub fn backfill_config(&self, key: ConfigKey, state: ConfigState) -> ConfigTransition {
        self.store_config(key, state, |old, new| {
            old.resource_version != 0 && new.resource_version > old.resource_version
        })
    }

    /// Stores `state` if nothing is known of `key` or `replaces(old, new)` says so.
    fn store_config(
        &self,
        key: ConfigKey,
        state: ConfigState,
        replaces: impl FnOnce(&ConfigState, &ConfigState) -> bool,
    ) -> ConfigTransition {
        // A config some workload uses keeps the key (and names) its users' entry holds.
        let mut slot = self.configs.entry(key).or_default();
        let Some(old) = &slot.state else {
            slot.state = Some(state);
            return ConfigTransition::Created;
        };
        if !replaces(old, &state) {
            return ConfigTransition::Unchanged;
        }
        let changed = old.digest.blake3 != state.digest.blake3;
        slot.state = Some(state);
        match changed {
            true => ConfigTransition::Changed,
            false => ConfigTransition::Unchanged,
        }
    }

    pub fn delete_config(&self, key: &ConfigKey) -> Option<ConfigState> {
        let mut deleted = None;
        self.configs.remove_if_mut(key, |_, slot| {
            deleted = slot.state.take();
            slot.is_empty()
        });
        deleted
    }

    pub fn config(&self, key: &ConfigKey) -> Option<ConfigState> {
        self.configs.get(key).and_then(|c| c.state.clone())
    }

    /// The resourceVersion the index holds `key` at (0: unknown), without copying its state.
    pub fn config_version(&self, key: &ConfigKey) -> Option<u64> {
        self.configs
            .get(key)
            .and_then(|c| c.state.as_ref().map(|s| s.resource_version))
    }

    /// The configs the index holds a state of (what the queries below read), with their
    /// resourceVersions.
    fn known_configs(&self) -> impl Iterator<Item = (ConfigRef<'_>, u64)> {
        self.configs.iter().filter_map(|c| {
            let version = c.state.as_ref()?.resource_version;
            Some((c, version))
        })
    }

    /// The namespaces `wanted` accepts that hold a config of `kind` indexed at a resourceVersion
    /// newer than `version`, or at an unknown one (0): the only ones where a config can have
    /// changed since `version` (every write moves an object's resourceVersion past it).
    pub fn namespaces_written_since(
        &self,
        kind: ConfigKind,
        version: u64,
        wanted: &(dyn Fn(&str) -> bool + Sync),
    ) -> BTreeSet<String> {
        self.known_configs()
            .filter(|(c, _)| c.key().kind == kind)
            .filter(|&(_, rv)| rv == 0 || rv > version)
            .filter(|(c, _)| wanted(&c.key().namespace))
            .map(|(c, _)| c.key().namespace.to_string())
            .collect()
    }

    /// Keys of the known configs of `kind`, in one namespace or all.
    pub fn config_keys(&self, kind: ConfigKind, namespace: Option<&str>) -> Vec<ConfigKey> {
        self.known_configs()
            .map(|(c, _)| c)
            .filter(|c| {
                c.key().kind == kind && namespace.is_none_or(|ns| &*c.key().namespace == ns)
            })
            .map(|c| c.key().clone())
            .collect()
    }

    /// ConfigMaps and Secrets of `namespaces` with their resourceVersions, in one pass.
    pub fn config_versions_in(&self, namespaces: &HashSet<&str>) -> Vec<(ConfigKey, u64)> {
        self.known_configs()
            .filter(|(c, _)| c.key().kind != ConfigKind::SecretProviderClass)
            .filter(|(c, _)| namespaces.contains(&*c.key().namespace))
            .map(|(c, version)| (c.key().clone(), version))
            .collect()
    }

    /// Configs of `kind` that some workload uses or names but the index holds nothing of (not
    /// created yet, or never watched: a Secret of an ignored type).
    pub fn unresolved_configs(&self, kind: ConfigKind) -> Vec<ConfigKey> {
        self.configs
            .iter()
            .filter(|c| c.key().kind == kind && c.state.is_none() && c.users.is_some())
            .map(|c| c.key().clone())
            .collect()
    }

    // ---- workloads ----

    pub fn apply_workload(&self, entry: WorkloadEntry) {
        let entry = Arc::new(entry);
        let key = entry.key.clone();
        let new_edges = entry.edge_configs();
        for config in &new_edges {
            let mut slot = self.configs.entry(config.clone()).or_default();
            match &mut slot.users {
                Some(users) => users.insert(&key),
                None => slot.users = Some(Users::one(&key)),
            }
        }
        if entry.has_patterns() {
            self.pattern_holders
                .entry(key.namespace.clone())
                .or_default()
                .insert(key.clone());
        }
        let old = self.workloads.insert(key.clone(), entry.clone());
        if let (None, Some(count)) = (&old, self.count_of(key.kind)) {
            count.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(old) = old {
            for config in old.edge_configs() {
                if !new_edges.contains(&config) {
                    self.remove_edge(&config, &key);
                }
            }
            if old.has_patterns() && !entry.has_patterns() {
                self.remove_pattern_holder(&key);
            }
        }
    }

    pub fn delete_workload(&self, key: &WorkloadKey) -> Option<Arc<WorkloadEntry>> {
        let (_, old) = self.workloads.remove(key)?;
        if let Some(count) = self.count_of(key.kind) {
            count.fetch_sub(1, Ordering::Relaxed);
        }
        for config in old.edge_configs() {
            self.remove_edge(&config, key);
        }
        if old.has_patterns() {
            self.remove_pattern_holder(key);
        }
        Some(old)
    }

    pub fn workload(&self, key: &WorkloadKey) -> Option<Arc<WorkloadEntry>> {
        self.workloads.get(key).map(|w| w.clone())
    }

    /// Whether any workload of `kind` is indexed (always true of a custom kind: those are not
    /// counted).
    pub fn holds_workloads_of(&self, kind: WorkloadKind) -> bool {
        self.count_of(kind)
            .is_none_or(|count| count.load(Ordering::Relaxed) > 0)
    }

    /// The count of a built-in kind's indexed workloads (`None`: a custom kind).
    fn count_of(&self, kind: WorkloadKind) -> Option<&AtomicUsize> {
        let slot = WorkloadKind::BUILT_IN.iter().position(|k| *k == kind)?;
        Some(&self.built_in_counts[slot])
    }

    /// Removes the workloads of `kind` that `keep` rejects (after a relist).
    pub fn retain_workloads(&self, kind: WorkloadKind, mut keep: impl FnMut(&WorkloadKey) -> bool) {
        let stale: Vec<WorkloadKey> = self
            .workloads
            .iter()
            .filter(|w| w.key().kind == kind && !keep(w.key()))
            .map(|w| w.key().clone())
            .collect();
        for key in stale {
            self.delete_workload(&key);
        }
    }

    /// Forgets everything in a namespace (it left the selection or this shard).
    pub fn drop_namespace(&self, namespace: &str) {
        // The workloads first: they take their edges with them, and every user of a config
        // is in the config's namespace, so nothing of the namespace is left to keep.
        self.drop_workloads_in(namespace);
        self.configs.retain(|k, _| &*k.namespace != namespace);
    }

    /// Forgets the workloads of a namespace, keeping what is known of its configs.
    pub fn drop_workloads_in(&self, namespace: &str) {
        let keys: Vec<WorkloadKey> = self
            .workloads
            .iter()
            .filter(|w| &*w.key().namespace == namespace)
            .map(|w| w.key().clone())
            .collect();
        for key in keys {
            self.delete_workload(&key);
        }
    }

    /// Workloads that may be affected by a change of `config`: O(affected), no scan.
    pub fn candidates(&self, config: &ConfigKey) -> Vec<Arc<WorkloadEntry>> {
        let mut keys: Vec<WorkloadKey> = self
            .configs
            .get(config)
            .and_then(|c| Some(c.users.as_ref()?.keys(&c.key().namespace).collect()))
            .unwrap_or_default();
        if let Some(holders) = self.pattern_holders.get(&config.namespace) {
            keys.extend(
                holders
                    .iter()
                    .filter(|k| !keys.contains(k))
                    .cloned()
                    .collect::<Vec<_>>(),
            );
        }
        keys.iter().filter_map(|k| self.workload(k)).collect()
    }

    /// Whether a change of `config` may affect some workload ([`Self::candidates`] is not
    /// empty), without collecting them.
    pub fn is_used(&self, config: &ConfigKey) -> bool {
        let indexed = |k: &WorkloadKey| self.workload(k).is_some();
        let direct = self.configs.get(config).is_some_and(|c| {
            c.users
                .as_ref()
                .is_some_and(|users| users.keys(&c.key().namespace).any(|k| indexed(&k)))
        });
        direct
            || self
                .pattern_holders
                .get(&config.namespace)
                .is_some_and(|h| h.iter().any(indexed))
    }

    /// Every workload entry (startup reconcile, namespace takeover).
    pub fn workloads_in(&self, namespace: Option<&str>) -> Vec<Arc<WorkloadEntry>> {
        self.workloads
            .iter()
            .filter(|w| namespace.is_none_or(|ns| &*w.key().namespace == ns))
            .map(|w| w.value().clone())
            .collect()
    }

    /// Namespaces that hold at least one indexed config or workload.
    pub fn namespaces(&self) -> HashSet<Arc<str>> {
        let mut out: HashSet<Arc<str>> = self
            .configs
            .iter()
            .filter(|c| c.state.is_some())
            .map(|c| c.key().namespace.clone())
            .collect();
        out.extend(self.workloads.iter().map(|w| w.key().namespace.clone()));
        out
    }

    pub fn sizes(&self) -> IndexSizes {
        let (mut configs, mut edges) = (0, 0);
        for slot in self.configs.iter() {
            configs += usize::from(slot.state.is_some());
            edges += slot.users.as_ref().map_or(0, Users::len);
        }
        IndexSizes {
            configs,
            workloads: self.workloads.len(),
            edges,
        }
    }

    fn remove_edge(&self, config: &ConfigKey, key: &WorkloadKey) {
        self.configs.remove_if_mut(config, |_, slot| {
            if slot.users.as_mut().is_some_and(|users| users.remove(key)) {
                slot.users = None;
            }
            slot.is_empty()
        });
    }

    fn remove_pattern_holder(&self, key: &WorkloadKey) {
        self.pattern_holders
            .remove_if_mut(&key.namespace, |_, set| {
                set.remove(key);
                set.is_empty()
            });
    }
}

#[cfg(test)]
mod tests;
