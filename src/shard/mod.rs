//! Which namespaces this replica acts on. Everything the engine keeps is keyed by namespace and
//! filtered by [`Ownership::owns`]: not ignored, selected by the namespace selector (when set),
//! and assigned to this replica by the shard assignment (when sharding or HA is on).
//! Writes additionally need [`Ownership::may_write`]: a replica whose membership Lease is not
//! fresh is fenced and writes nothing until it has renewed and re-read the assignment.

mod assignment;
pub mod coordinator;
pub mod leader_lock;
pub mod lease;
mod liveness;
pub mod ranges;
pub mod ring;
pub mod server_sharding;
mod view;

pub use assignment::{Assignment, Scheme};
use server_sharding::SelectorFeed;
pub use view::{Moves, SETTLE_WINDOW, Settling, ShardView};

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use dashmap::DashSet;

#[derive(Debug)]
pub struct ShardState {
    pub me: String,
    view: RwLock<ShardView>,
    epoch: Instant,
    /// Milliseconds since `epoch` of the last successful membership renewal.
    last_renew_ms: AtomicU64,
    /// The assignments installed lately (changed under the view's lock): which namespaces'
    /// writes check their config view.
    moves: Mutex<Moves>,
    /// Past this without a renewal the replica is fenced (shorter than the Lease duration, so it
    /// stops before anyone else can take over its namespaces).
    renew_deadline: Duration,
    /// The selector the API server is asked for, kept equal to the view's ranges while
    /// `server_sharding` is on.
    selector: SelectorFeed,
    server_sharding: AtomicBool,
}

impl ShardState {
    pub fn new(me: String, renew_deadline: Duration) -> Self {
        Self::with_selector(me, renew_deadline, SelectorFeed::default())
    }

    /// `selector`: where this replica's shard selector is published for the client's requests.
    pub fn with_selector(me: String, renew_deadline: Duration, selector: SelectorFeed) -> Self {
        Self {
            me,
            view: RwLock::new(ShardView::default()),
            epoch: Instant::now(),
            last_renew_ms: AtomicU64::new(0),
            moves: Mutex::default(),
            renew_deadline,
            selector,
            server_sharding: AtomicBool::new(false),
        }
    }

    /// From now on the API server is asked to send only this replica's namespaces.
    pub fn use_server_sharding(&self) {
        self.server_sharding.store(true, Ordering::Release);
        let view = self.view.read().expect("shard view lock");
        self.selector
            .publish(server_sharding::selector_of(&view, &self.me));
    }

    /// The API server sends only this replica's namespaces (`--server-side-sharding`).
    pub fn server_sharding(&self) -> bool {
        self.server_sharding.load(Ordering::Acquire)
    }

    /// The selector sent with cluster-wide lists and watches now (`None`: none).
    pub fn selector(&self) -> Option<Arc<str>> {
        self.selector.current()
    }

    /// The selector that lists just `gained` of this replica's namespaces (see
    /// [`server_sharding::covering_selector`]); `None` unless the API server shards.
    pub fn gained_selector(&self, gained: &[String]) -> Option<String> {
        if !self.server_sharding() {
            return None;
        }
        let view = self.view.read().expect("shard view lock");
        server_sharding::covering_selector(&view, &self.me, gained)
    }

    fn assigned(&self, namespace: &str) -> bool {
        let view = self.view.read().expect("shard view lock");
        let previous = if view.released_previous {
            &None
        } else {
            &view.previous
        };
        [&view.current, previous]
            .into_iter()
            .flatten()
            .any(|a| a.owner(namespace) == Some(self.me.as_str()))
    }

    /// Whether writes in `namespace` check that this replica's view of their configs has caught
    /// up with the API server: another replica may have acted on it lately from its own view
    /// ([`Moves::moved`]).
    fn settling_in(&self, namespace: &str) -> Option<Settling> {
        let now_ms = self.epoch.elapsed().as_millis() as u64;
        self.moves
            .lock()
            .expect("moves lock")
            .moved(namespace, now_ms)
    }

    /// The membership Leases, listed at the API server's `revision`: the lowest generation
    /// every other live replica has released bounds the moves whose other owners are quiet
    /// ([`Moves::others_released`]). Without another live replica, nobody else acts at all.
    pub fn members_read(&self, members: &[lease::Member], revision: u64) {
        let released_by_others = members
            .iter()
            .filter(|m| m.live && m.identity != self.me)
            .map(|m| m.released_generation)
            .min()
            .unwrap_or(u64::MAX);
        self.moves
            .lock()
            .expect("moves lock")
            .others_released(released_by_others, revision);
    }

    pub fn view(&self) -> ShardView {
        self.view.read().expect("shard view lock").clone()
    }

    #[cfg(test)]
    fn set_view(&self, view: ShardView) {
        self.update_view(|current| *current = view);
    }

    /// Changes the view under its lock. Decisions taken from an earlier snapshot must re-check it
    /// here: an assignment installed meanwhile must never be overwritten by a stale one.
    pub fn update_view<R>(&self, change: impl FnOnce(&mut ShardView) -> R) -> R {
        let mut view = self.view.write().expect("shard view lock");
        let before = view.generation();
        let acted_on = view.current.clone();
        let result = change(&mut view);
        let mut moves = self.moves.lock().expect("moves lock");
        if view.generation() != before
            && let Some(installed) = view.current.clone()
        {
            moves.record(acted_on, installed);
        }
        if view.previous.is_none() {
            moves.settled(self.epoch.elapsed().as_millis() as u64);
        }
        drop(moves);
        // Under the lock, so two updates never publish out of order.
        if self.server_sharding() {
            self.selector
                .publish(server_sharding::selector_of(&view, &self.me));
        }
        result
    }

    pub fn renewed(&self) {
        let ms = self.epoch.elapsed().as_millis() as u64;
        self.last_renew_ms.store(ms.max(1), Ordering::Release);
    }

    /// Forgets the last renewal: writes stop until the next one.
    pub fn fence(&self) {
        self.last_renew_ms.store(0, Ordering::Release);
    }

    pub fn fresh(&self) -> bool {
        let last = self.last_renew_ms.load(Ordering::Acquire);
        last > 0
            && self
                .epoch
                .elapsed()
                .saturating_sub(Duration::from_millis(last))
                < self.renew_deadline
    }
}

#[derive(Debug, Default)]
pub struct Ownership {
    ignored: HashSet<String>,
    /// `Some` when a namespace watch decides the universe (a selector, or sharding): the
    /// namespaces that exist and are selected.
    selected: Option<DashSet<Arc<str>, ahash::RandomState>>,
    shard: Option<Arc<ShardState>>,
    /// Writes started and not finished, by namespace: a replica giving namespaces up announces it
    /// only once these are done, so the next owner never writes while an old write is in flight.
    writes_in_flight: dashmap::DashMap<Arc<str>, usize, ahash::RandomState>,
    /// Counts namespaces entering (selected, or gained in a handover), and the count at each
    /// namespace's last entry: a list can then tell which namespaces it covered from its start.
    entries: AtomicU64,
    entered_at: dashmap::DashMap<Arc<str>, u64, ahash::RandomState>,
}

/// Where the entry count stood when a list started ([`Ownership::list_mark`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct ListMark(u64);

/// Counts a write as in flight for its namespace until dropped.
pub struct WriteGuard<'a> {
    ownership: &'a Ownership,
    namespace: Arc<str>,
}

impl Drop for WriteGuard<'_> {
    fn drop(&mut self) {
        self.ownership
            .writes_in_flight
            .remove_if_mut(&self.namespace, |_, n| {
                *n -= 1;
                *n == 0
            });
    }
}

impl Ownership {
    pub fn new(ignored: impl IntoIterator<Item = String>, selector_active: bool) -> Self {
        Self {
            ignored: ignored.into_iter().collect(),
            selected: selector_active.then(DashSet::default),
            shard: None,
            writes_in_flight: Default::default(),
            entries: AtomicU64::new(0),
            entered_at: Default::default(),
        }
    }

    /// With sharding the namespace universe is always watched.
    pub fn sharded(ignored: impl IntoIterator<Item = String>, shard: Arc<ShardState>) -> Self {
        Self {
            ignored: ignored.into_iter().collect(),
            selected: Some(DashSet::default()),
            shard: Some(shard),
            writes_in_flight: Default::default(),
            entries: AtomicU64::new(0),
            entered_at: Default::default(),
        }
    }

    /// Namespace-level filter: selected and assigned to this replica (fencing aside).
    pub fn owns(&self, namespace: &str) -> bool {
        self.selects(namespace) && self.shard.as_ref().is_none_or(|s| s.assigned(namespace))
    }

    /// In `--namespaces-to-ignore`.
    pub fn ignores(&self, namespace: &str) -> bool {
        self.ignored.contains(namespace)
    }

    /// Selected, whatever the shard assignment says.
    pub fn selects(&self, namespace: &str) -> bool {
        !self.ignores(namespace) && self.selected.as_ref().is_none_or(|s| s.contains(namespace))
    }

    /// `namespace` entered: it is being indexed by a backfill, not by lists already running.
    /// Recorded after it became owned, so a list started before this mark did not cover it.
    pub fn entered(&self, namespace: &str) {
        let mark = self.entries.fetch_add(1, Ordering::AcqRel) + 1;
        self.entered_at.insert(Arc::from(namespace), mark);
    }

    /// Taken when a list starts, for [`Ownership::listed_throughout`] when it ends.
    pub fn list_mark(&self) -> ListMark {
        ListMark(self.entries.load(Ordering::Acquire))
    }

    /// Whether a list started at `mark` covered `namespace` from its start and still does: only
    /// then may what it did not return be taken as deleted. A namespace that entered during the
    /// list was indexed by its backfill, which a list filtered on the old ownership did not see.
    pub fn listed_throughout(&self, namespace: &str, mark: ListMark) -> bool {
        self.owns(namespace)
            && self
                .entered_at
                .get(namespace)
                .is_none_or(|entry| *entry <= mark.0)
    }

    /// False while fenced: a replica that could not renew its membership writes nothing.
    pub fn may_write(&self) -> bool {
        self.shard.as_ref().is_none_or(|s| s.fresh())
    }

    /// Marks a write to `namespace` as started; it ends when the guard is dropped.
    pub fn start_write(&self, namespace: &Arc<str>) -> WriteGuard<'_> {
        *self.writes_in_flight.entry(namespace.clone()).or_default() += 1;
        WriteGuard {
            ownership: self,
            namespace: namespace.clone(),
        }
    }

    /// True while a write to any of `namespaces` is in flight.
    pub fn writing_in(&self, namespaces: &[String]) -> bool {
        namespaces
            .iter()
            .any(|ns| self.writes_in_flight.contains_key(ns.as_str()))
    }

    /// True while writes in `namespace` must check their config view: another replica may have
    /// acted on it lately, its owner having changed in a handover not yet [`SETTLE_WINDOW`] past
    /// (`ShardState::settling_in`, [`Moves`]); which of their configs, the [`Settling`].
    pub fn settling_in(&self, namespace: &str) -> Option<Settling> {
        self.shard.as_ref().and_then(|s| s.settling_in(namespace))
    }

    pub fn shard(&self) -> Option<&Arc<ShardState>> {
        self.shard.as_ref()
    }

    /// The namespace watch selects `namespace`; true if that is news.
    pub fn select(&self, namespace: &str) -> bool {
        self.selected
            .as_ref()
            .is_some_and(|s| s.insert(Arc::from(namespace)))
    }

    /// The namespace watch no longer selects `namespace`; true if that is news.
    pub fn unselect(&self, namespace: &str) -> bool {
        self.selected
            .as_ref()
            .is_some_and(|s| s.remove(namespace).is_some())
    }

    /// True when a namespace watch has to run (selector or sharding).
    pub fn uses_selector(&self) -> bool {
        self.selected.is_some()
    }

    /// Selected namespaces (empty when every namespace is selected implicitly).
    pub fn selected_namespaces(&self) -> Vec<Arc<str>> {
        self.selected
            .as_ref()
            .map(|s| s.iter().map(|n| n.clone()).collect())
            .unwrap_or_default()
    }

    /// Selected namespaces (ignored ones left out), when that is a known set.
    pub fn selected_count(&self) -> Option<usize> {
        let selected = self.selected.as_ref()?;
        Some(selected.iter().filter(|ns| self.selects(ns)).count())
    }

    /// Namespaces this replica acts on, when that is a known set.
    pub fn owned_count(&self) -> Option<usize> {
        let selected = self.selected.as_ref()?;
        Some(selected.iter().filter(|ns| self.owns(ns)).count())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_covered_only_namespaces_owned_before_it_started() {
        let ownership = Ownership::new(vec!["ignored".to_string()], false);
        ownership.entered("early");
        let mark = ownership.list_mark();
        ownership.entered("late");
        assert!(
            ownership.listed_throughout("early", mark),
            "entered before the list"
        );
        assert!(ownership.listed_throughout("never-entered", mark));
        assert!(
            !ownership.listed_throughout("late", mark),
            "entered during the list"
        );
        assert!(!ownership.listed_throughout("ignored", mark), "not owned");
        ownership.entered("early");
        assert!(
            !ownership.listed_throughout("early", mark),
            "left and entered again during the list"
        );
        assert!(ownership.listed_throughout("late", ownership.list_mark()));
    }

    #[test]
    fn selected_count_leaves_ignored_namespaces_out() {
        assert_eq!(Ownership::new(Vec::new(), false).selected_count(), None);
        let o = Ownership::new(["kube-system".to_string()], true);
        for ns in ["a", "b", "kube-system"] {
            o.select(ns);
        }
        assert_eq!(o.selected_count(), Some(2));
        assert_eq!(o.owned_count(), Some(2));
    }

    #[test]
    fn ignore_and_selector() {
        let o = Ownership::new(["kube-system".to_string()], false);
        assert!(o.owns("a") && !o.owns("kube-system"));
        let o = Ownership::new(Vec::new(), true);
        assert!(!o.owns("a"));
        assert!(o.select("a") && !o.select("a"));
        assert!(o.owns("a"));
        assert!(o.unselect("a") && !o.owns("a"));
    }

    #[test]
    fn shard_assignment_and_handover_overlap() {
        let me = Arc::new(ShardState::new("r0".into(), Duration::from_secs(10)));
        let o = Ownership::sharded(Vec::new(), me.clone());
        let namespaces: Vec<String> = (0..50).map(|i| format!("ns-{i}")).collect();
        for ns in &namespaces {
            o.select(ns);
        }
        assert!(
            namespaces.iter().all(|ns| !o.owns(ns)),
            "no assignment yet: owns nothing"
        );
        let solo = Arc::new(Assignment {
            generation: 1,
            members: vec!["r0".into()],
            ..Default::default()
        });
        me.set_view(ShardView {
            current: Some(solo.clone()),
            previous: None,
            released_previous: false,
        });
        assert!(namespaces.iter().all(|ns| o.owns(ns)));
        let pair = Arc::new(Assignment {
            generation: 2,
            members: vec!["r0".into(), "r1".into()],
            ..Default::default()
        });
        me.set_view(ShardView {
            current: Some(pair.clone()),
            previous: Some(solo),
            released_previous: false,
        });
        assert!(
            namespaces.iter().all(|ns| o.owns(ns)),
            "during handover the old owner still acts"
        );
        me.set_view(ShardView {
            current: Some(pair),
            previous: None,
            released_previous: false,
        });
        let mine = namespaces.iter().filter(|ns| o.owns(ns)).count();
        assert!((10..40).contains(&mine), "{mine}");
    }

    fn assignment(generation: u64, members: &[&str]) -> Arc<Assignment> {
        Arc::new(Assignment::of_members(generation, members))
    }

    #[test]
    fn once_the_first_assignment_settled_only_namespaces_that_moved_check_their_view() {
        let namespaces: Vec<String> = (0..100).map(|i| format!("team-{i}")).collect();
        let me = Arc::new(ShardState::new("r0".into(), Duration::from_secs(10)));
        let o = Ownership::sharded(Vec::new(), me.clone());
        assert!(o.settling_in("team-0").is_none(), "nothing assigned yet");
        assert!(
            Ownership::new(Vec::<String>::new(), false)
                .settling_in("team-0")
                .is_none()
        );
        me.update_view(|v| v.install(assignment(1, &["r0", "r1"])));
        assert!(
            namespaces.iter().all(|ns| o.settling_in(ns).is_some()),
            "a first assignment: anyone may have acted before"
        );
        // The first assignment's window passes.
        let later = me.epoch.elapsed() + SETTLE_WINDOW + Duration::from_secs(1);
        me.moves.lock().unwrap().settled(later.as_millis() as u64);
        assert!(
            namespaces.iter().all(|ns| o.settling_in(ns).is_none()),
            "settled"
        );
        // r2 joins: only what it takes moves; r0's and r1's other namespaces write at once.
        let three = assignment(2, &["r0", "r1", "r2"]);
        me.update_view(|v| v.install(three.clone()));
        let two = me
            .view()
            .previous
            .expect("the overlap keeps the previous assignment");
        for ns in &namespaces {
            assert_eq!(
                o.settling_in(ns).is_some(),
                two.owner(ns) != three.owner(ns),
                "{ns}: checks its view exactly when its owner changed"
            );
        }
        assert!(namespaces.iter().any(|ns| o.settling_in(ns).is_some()));
        assert!(namespaces.iter().any(|ns| o.settling_in(ns).is_none()));
    }

    fn member(identity: &str, live: bool, released_generation: u64) -> lease::Member {
        lease::Member {
            identity: identity.into(),
            live,
            synced_generation: released_generation,
            released_generation,
            leaving: false,
            hash_ranges: true,
            acted: String::new(),
        }
    }

    #[test]
    fn writes_check_every_config_until_each_other_live_replica_released_the_move() {
        let me = Arc::new(ShardState::new("r0".into(), Duration::from_secs(10)));
        let o = Ownership::sharded(Vec::new(), me.clone());
        me.update_view(|v| v.install(assignment(1, &["r0", "r1"])));
        assert_eq!(o.settling_in("team-0"), Some(Settling::Every));
        // This replica's own release does not count; r1 has not released generation 1.
        me.members_read(&[member("r0", true, 1), member("r1", true, 0)], 100);
        assert_eq!(o.settling_in("team-0"), Some(Settling::Every));
        // r1 released it; r2's Lease expired (fenced, it writes nothing): quiet from 200 on.
        me.members_read(
            &[
                member("r0", true, 0),
                member("r1", true, 1),
                member("r2", false, 0),
            ],
            200,
        );
        assert_eq!(o.settling_in("team-0"), Some(Settling::ChangedUpTo(200)));
        // Alone, nobody else acts at all.
        let alone = Arc::new(ShardState::new("r0".into(), Duration::from_secs(10)));
        let o = Ownership::sharded(Vec::new(), alone.clone());
        alone.update_view(|v| v.install(assignment(1, &["r0"])));
        alone.members_read(&[member("r0", true, 0)], 300);
        assert_eq!(o.settling_in("team-0"), Some(Settling::ChangedUpTo(300)));
    }

    #[test]
    fn a_handover_completed_from_a_stale_snapshot_never_reverts_a_newer_assignment() {
        let mut view = ShardView::default();
        assert!(view.install(assignment(1, &["r0"])));
        assert!(view.install(assignment(2, &["r0", "r1", "r2"])));
        assert!(!view.install(assignment(2, &["r0"])), "not newer");
        assert!(view.release_previous(2));
        // Generation 3 arrives while the handover loop reads the Leases for generation 2...
        assert!(view.install(assignment(3, &["r0", "r1", "r2", "r3"])));
        assert_eq!(
            view.previous.as_ref().map(|a| a.generation),
            Some(1),
            "the last completed assignment stays previous"
        );
        assert!(!view.released_previous, "generation 3 has its own handover");
        // ...and the loop then completes generation 2: nothing changes (putting generation 2
        // back would leave the replica acting on it for good).
        assert!(!view.complete_handover(2));
        assert!(!view.release_previous(2));
        assert_eq!(view.generation(), Some(3));
        assert!(view.release_previous(3));
        assert!(view.complete_handover(3));
        assert!(view.previous.is_none());
        assert_eq!(view.generation(), Some(3));
    }

    #[test]
    fn fencing() {
        let me = ShardState::new("r0".into(), Duration::from_millis(50));
        assert!(!me.fresh());
        me.renewed();
        assert!(me.fresh());
        std::thread::sleep(Duration::from_millis(60));
        assert!(!me.fresh());
        me.renewed();
        me.fence();
        assert!(!me.fresh());
    }
}
