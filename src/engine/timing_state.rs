//! What the engine keeps for maintenance windows and delays (`timing.rs` acts on it): the
//! namespaces' own timings and the reloads held, one entry per workload.

use std::collections::BTreeSet;

use jiff::Timestamp;

use crate::model::{ConfigKey, WorkloadKey};
use crate::reload_policy::ReloadTiming;

/// The namespaces' timings and the reloads held.
#[derive(Default)]
pub(super) struct TimingState {
    /// Namespaces' own (`kube-reloader.io/reload-window`, `reload-delay`), where namespaces are
    /// watched.
    pub(super) namespaces: dashmap::DashMap<String, ReloadTiming, ahash::RandomState>,
    pub(super) held: dashmap::DashMap<WorkloadKey, Held, ahash::RandomState>,
}

#[derive(Debug, Clone)]
pub(super) struct Held {
    pub(super) configs: BTreeSet<ConfigKey>,
    /// When the first held change was seen (the delay counts from it).
    pub(super) since: Timestamp,
    /// Kept in the halts ConfigMap (a window or delay holds it, not only the admission
    /// webhook's settle time).
    pub(super) kept: bool,
}

impl TimingState {
    pub(super) fn namespace(&self, namespace: &str, timing: ReloadTiming) {
        if timing.is_any_time() {
            self.namespaces.remove(namespace);
        } else {
            self.namespaces.insert(namespace.to_string(), timing);
        }
    }

    /// `namespace` moved away: what waits there is the next owner's (it restores it from the
    /// kept records).
    pub(super) fn forget_namespace(&self, namespace: &str) {
        self.held.retain(|w, _| &*w.namespace != namespace);
    }
}
