//! How far this replica has acted on config changes, per config kind, as a resourceVersion: every
//! change at or below it has been written (or found to need no write). A replica publishes it in
//! its membership Lease, so one that takes over namespaces after a crash (or restarts itself)
//! can list the configs as they were at that version and roll what changed since, including
//! workloads that were never reloaded and so record no hash to compare with.
//!
//! The version is the lowest of: what each config watch has delivered and the engine processed,
//! and, for every change still on its way (queued, in flight, retried, deferred during a
//! backfill, a takeover's catch-up in progress), the version just below it. Each of those holds
//! an [`ActedGuard`]; dropping it (the write ended, the change was absorbed by a newer one for
//! the same config) lets the version move on.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use crate::model::ConfigKind;

/// resourceVersions per config kind (the annotation `kube-reloader.io/acted-versions`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ActedVersions(BTreeMap<ConfigKind, u64>);

impl ActedVersions {
    pub fn get(&self, kind: ConfigKind) -> Option<u64> {
        self.0.get(&kind).copied()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = (ConfigKind, u64)> + '_ {
        self.0.iter().map(|(k, v)| (*k, *v))
    }

    /// The lower version of each kind; a kind only one side knows is kept as that side has it.
    pub fn min_with(&mut self, other: &ActedVersions) {
        for (kind, version) in other.iter() {
            self.0
                .entry(kind)
                .and_modify(|v| *v = (*v).min(version))
                .or_insert(version);
        }
    }

    /// `configmap=123,secret=456`.
    pub fn to_annotation(&self) -> String {
        self.0
            .iter()
            .map(|(kind, v)| format!("{}={v}", kind.as_str()))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Parses [`Self::to_annotation`]; unknown kinds and malformed parts are left out (an older
    /// or newer release may write what this one does not read).
    pub fn parse(raw: &str) -> ActedVersions {
        let kinds = raw.split(',').filter_map(|part| {
            let (kind, version) = part.trim().split_once('=')?;
            let kind = ConfigKind::ALL.into_iter().find(|k| k.as_str() == kind)?;
            Some((kind, version.parse().ok()?))
        });
        ActedVersions(kinds.collect())
    }
}

impl FromIterator<(ConfigKind, u64)> for ActedVersions {
    fn from_iter<I: IntoIterator<Item = (ConfigKind, u64)>>(iter: I) -> Self {
        ActedVersions(iter.into_iter().collect())
    }
}

#[derive(Default)]
struct Progress {
    /// The highest resourceVersion each config watch delivered and the engine processed.
    processed: BTreeMap<ConfigKind, u64>,
    /// Bounds held by changes still on their way: (kind, version) -> how many hold it.
    held: BTreeMap<(ConfigKind, u64), usize>,
}

/// Shared by the config watches (processed), the engine and the intake (guards) and the shard
/// coordinator (which publishes [`ActedTracker::acted`]).
#[derive(Default, Clone)]
pub struct ActedTracker {
    progress: Arc<Mutex<Progress>>,
}

impl ActedTracker {
    /// A config watch delivered `version` of a `kind` and the engine has processed it (queued
    /// what it rolls, each queued change holding a guard).
    pub fn processed(&self, kind: ConfigKind, version: u64) {
        if version == 0 {
            return;
        }
        let mut progress = self.progress.lock().expect("acted lock");
        let at = progress.processed.entry(kind).or_default();
        *at = (*at).max(version);
    }

    /// A change of a `kind` at `version` is on its way: until the guard drops, the acted version
    /// of that kind stays below it.
    pub fn change_pending(&self, kind: ConfigKind, version: u64) -> ActedGuard {
        self.hold(kind, version.saturating_sub(1))
    }

    /// Keeps the acted version at or below `versions` (a catch-up from them in progress).
    pub fn hold_at(&self, versions: &ActedVersions) -> Vec<ActedGuard> {
        versions.iter().map(|(k, v)| self.hold(k, v)).collect()
    }

    fn hold(&self, kind: ConfigKind, bound: u64) -> ActedGuard {
        let mut progress = self.progress.lock().expect("acted lock");
        *progress.held.entry((kind, bound)).or_default() += 1;
        ActedGuard(Arc::new(GuardInner {
            tracker: self.clone(),
            kind,
            bound,
        }))
    }

    fn release(&self, kind: ConfigKind, bound: u64) {
        let mut progress = self.progress.lock().expect("acted lock");
        if let std::collections::btree_map::Entry::Occupied(mut e) =
            progress.held.entry((kind, bound))
        {
            *e.get_mut() -= 1;
            if *e.get() == 0 {
                e.remove();
            }
        }
    }

    /// Some change is still on its way (queued, in flight, deferred or being caught up).
    pub fn pending(&self) -> bool {
        !self.progress.lock().expect("acted lock").held.is_empty()
    }

    /// How far this replica has acted, per kind it knows anything of: the processed version,
    /// lowered by every bound held. A kind with nothing processed yet but a bound held (a
    /// start-up catching up) reports the bound.
    pub fn acted(&self) -> ActedVersions {
        let progress = self.progress.lock().expect("acted lock");
        let mut acted: BTreeMap<ConfigKind, u64> = progress.processed.clone();
        for (kind, bound) in progress.held.keys() {
            acted
                .entry(*kind)
                .and_modify(|v| *v = (*v).min(*bound))
                .or_insert(*bound);
        }
        ActedVersions(acted)
    }
}

/// Keeps the acted version of one kind below a change until every clone of it is dropped.
#[derive(Clone)]
pub struct ActedGuard(Arc<GuardInner>);

struct GuardInner {
    tracker: ActedTracker,
    kind: ConfigKind,
    bound: u64,
}

impl Drop for GuardInner {
    fn drop(&mut self) {
        self.tracker.release(self.kind, self.bound);
    }
}

impl std::fmt::Debug for ActedGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ActedGuard({}<={})", self.0.kind.as_str(), self.0.bound)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ConfigKind::{ConfigMap, Secret};

    #[test]
    fn the_acted_version_is_what_was_processed_when_nothing_is_pending() {
        let t = ActedTracker::default();
        assert!(t.acted().is_empty(), "nothing known before the first list");
        t.processed(ConfigMap, 10);
        t.processed(ConfigMap, 7);
        t.processed(Secret, 12);
        assert_eq!(
            t.acted(),
            [(ConfigMap, 10), (Secret, 12)].into_iter().collect()
        );
    }

    #[test]
    fn a_pending_change_keeps_its_kind_below_it_until_every_clone_is_dropped() {
        let t = ActedTracker::default();
        let guard = t.change_pending(ConfigMap, 20);
        t.processed(ConfigMap, 25);
        t.processed(Secret, 30);
        assert_eq!(t.acted().get(ConfigMap), Some(19));
        assert_eq!(t.acted().get(Secret), Some(30), "another kind is not held");
        let clone = guard.clone();
        drop(guard);
        assert_eq!(t.acted().get(ConfigMap), Some(19), "a clone still holds it");
        assert!(t.pending());
        drop(clone);
        assert_eq!(t.acted().get(ConfigMap), Some(25));
        assert!(!t.pending());
    }

    #[test]
    fn the_lowest_of_several_bounds_holds_and_equal_bounds_count_separately() {
        let t = ActedTracker::default();
        t.processed(ConfigMap, 100);
        let a = t.change_pending(ConfigMap, 50);
        let b = t.change_pending(ConfigMap, 50);
        let c = t.change_pending(ConfigMap, 80);
        drop(a);
        assert_eq!(t.acted().get(ConfigMap), Some(49));
        drop(b);
        assert_eq!(t.acted().get(ConfigMap), Some(79));
        drop(c);
        assert_eq!(t.acted().get(ConfigMap), Some(100));
    }

    #[test]
    fn a_catch_up_in_progress_holds_even_before_anything_was_processed() {
        let t = ActedTracker::default();
        let inherited: ActedVersions = [(ConfigMap, 40), (Secret, 41)].into_iter().collect();
        let held = t.hold_at(&inherited);
        assert_eq!(t.acted(), inherited);
        t.processed(ConfigMap, 90);
        assert_eq!(t.acted().get(ConfigMap), Some(40));
        drop(held);
        assert_eq!(t.acted().get(ConfigMap), Some(90));
        assert_eq!(t.acted().get(Secret), None);
    }

    #[test]
    fn the_annotation_round_trips_and_ignores_what_it_does_not_know() {
        let v: ActedVersions = [(ConfigMap, 123), (Secret, 456)].into_iter().collect();
        assert_eq!(v.to_annotation(), "configmap=123,secret=456");
        assert_eq!(ActedVersions::parse(&v.to_annotation()), v);
        assert_eq!(
            ActedVersions::parse("configmap=5, widget=9,secret=x,=,secret"),
            [(ConfigMap, 5)].into_iter().collect()
        );
    }

    #[test]
    fn min_with_keeps_the_lower_version_of_each_kind() {
        let mut a: ActedVersions = [(ConfigMap, 10), (Secret, 50)].into_iter().collect();
        a.min_with(&[(ConfigMap, 20), (Secret, 5)].into_iter().collect());
        assert_eq!(a, [(ConfigMap, 10), (Secret, 5)].into_iter().collect());
        let mut b = ActedVersions::default();
        b.min_with(&a);
        assert_eq!(b, a);
    }
}
