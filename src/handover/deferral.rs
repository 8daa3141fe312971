//! Config changes met in a namespace this replica is still indexing wait for the backfill's
//! list. Acting on such a change at once would fan out to workloads not indexed yet, or find a
//! config the index does not hold and take it for a creation; either way the index would hold
//! the new state, the backfill's list would find nothing changed, and the reload would be lost.
//! So the changes wait for the list, and those it did not cover (made after its snapshot) are
//! acted on after it. The engine's intake asks this at every config event; the backfill
//! (`backfill.rs`) opens and closes each namespace's wait.

use std::collections::HashMap;
use std::collections::hash_map::Entry;

use crate::handover::acted::ActedGuard;
use crate::index::ConfigState;
use crate::model::ConfigKey;

/// Namespaces gained whose configs the backfill has not listed yet, each with the changes of
/// its configs met meanwhile (the newest per config). One map entry per namespace, so deferring
/// a change and ending the wait never interleave.
#[derive(Default)]
pub struct Entering {
    waiting: dashmap::DashMap<String, HashMap<ConfigKey, Deferred>, ahash::RandomState>,
}

/// A config state met while its namespace is backfilled, waiting for the backfill's list.
#[derive(Debug, Clone)]
pub struct Deferred {
    pub state: ConfigState,
    /// A live event brought it (or an older state of it): the config changed. Otherwise it came
    /// from a relist after a broken watch, which re-delivers every object, changed or not.
    /// Applied after the list, a known change counts even if the index did not hold the config;
    /// a relisted state only when it is newer than what the list brought and differs from it.
    /// Dropping relisted states lost a change made after the list's snapshot whose live event
    /// the broken watch never delivered.
    pub changed: bool,
    /// Holds the acted version below the first deferred state until it is acted on.
    pub acted: ActedGuard,
}

impl Entering {
    /// The backfill of `namespace` starts: its changes wait from now on.
    pub fn started(&self, namespace: &str) {
        self.waiting.entry(namespace.to_string()).or_default();
    }

    /// Keeps `state` of `key` for the backfill's list if its namespace is being indexed, else
    /// hands both back to be acted on now. `hold` gives the guard that keeps the acted version
    /// below it. `live`: a watch event of a change, not a relist.
    pub fn defer(
        &self,
        key: ConfigKey,
        state: ConfigState,
        live: bool,
        hold: impl FnOnce() -> ActedGuard,
    ) -> Option<ConfigState> {
        let Some(mut waiting) = self.waiting.get_mut(&*key.namespace) else {
            return Some(state);
        };
        match waiting.entry(key) {
            Entry::Vacant(v) => {
                v.insert(Deferred {
                    state,
                    changed: live,
                    acted: hold(),
                });
            }
            Entry::Occupied(mut o) => {
                let kept = o.get_mut();
                kept.changed |= live;
                if state.resource_version >= kept.state.resource_version {
                    kept.state = state;
                }
            }
        }
        None
    }

    /// The backfill listed `state` of `key`: the state to apply (the newer of the listed one and
    /// one deferred, by resourceVersion) and what was deferred, if anything waited.
    pub fn listed(&self, key: &ConfigKey, state: ConfigState) -> (ConfigState, Option<Deferred>) {
        let deferred = self
            .waiting
            .get_mut(&*key.namespace)
            .and_then(|mut waiting| waiting.remove(key));
        match deferred {
            Some(deferred) => (newer(state, deferred.state.clone()), Some(deferred)),
            None => (state, None),
        }
    }

    /// The backfill has listed the configs of `namespace`: its wait ends, and what waited and
    /// the list did not bring is handed back to be acted on.
    pub fn ended(&self, namespace: &str) -> Option<Vec<(ConfigKey, Deferred)>> {
        let (_, waiting) = self.waiting.remove(namespace)?;
        Some(waiting.into_iter().collect())
    }

    /// `key` was deleted: a change of it deferred must not bring it back when the wait ends.
    pub fn forget(&self, key: &ConfigKey) {
        if let Some(mut waiting) = self.waiting.get_mut(&*key.namespace) {
            waiting.remove(key);
        }
    }
}

/// The newer of a listed state and a live one (by resourceVersion).
fn newer(listed: ConfigState, live: ConfigState) -> ConfigState {
    if live.resource_version > listed.resource_version {
        live
    } else {
        listed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handover::acted::ActedTracker;
    use crate::model::ConfigKind;

    fn at(version: u64) -> ConfigState {
        ConfigState {
            digest: crate::reloader_format::hash::digest_payload(
                crate::reloader_format::hash::ConfigPayload::ConfigMap {
                    data: [("k".to_string(), version.to_string())].into(),
                    binary_data: Default::default(),
                },
            ),
            keys: Default::default(),
            ignore: false,
            matched: false,
            resource_version: version,
            waves: None,
        }
    }

    #[test]
    fn a_namespace_being_indexed_keeps_the_newest_state_and_whether_it_changed() {
        let entering = Entering::default();
        let acted = ActedTracker::default();
        let key = ConfigKey::interned(ConfigKind::ConfigMap, "gained", "app");
        let hold = || acted.change_pending(ConfigKind::ConfigMap, 7);
        assert!(entering.defer(key.clone(), at(7), true, hold).is_some());

        entering.started("gained");
        assert!(entering.defer(key.clone(), at(7), true, hold).is_none());
        assert!(entering.defer(key.clone(), at(5), false, hold).is_none());
        let (state, deferred) = entering.listed(&key, at(6));
        assert_eq!(
            (state.resource_version, deferred.map(|d| d.changed)),
            (7, Some(true))
        );
        let (state, deferred) = entering.listed(&key, at(6));
        assert_eq!((state.resource_version, deferred.is_none()), (6, true));

        assert!(entering.defer(key.clone(), at(9), false, hold).is_none());
        entering.forget(&key);
        assert_eq!(entering.ended("gained").map(|w| w.len()), Some(0));
        assert!(entering.ended("gained").is_none());
    }
}
