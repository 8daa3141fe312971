//! Runs the shard protocol for one replica:
//! - membership: renew this replica's Lease every retry period (fencing follows from it);
//! - leadership: every replica campaigns for `stakater-reloader-lock`; the leader publishes the
//!   assignment (live members with sharding, or only itself with plain `--enable-ha`) with an
//!   increasing generation in a ConfigMap every replica watches;
//! - the hand-over's steps against the Leases (release, complete), which `handover/` decides and
//!   drives; what an installed or released assignment means for the gained and lost namespaces
//!   goes to the [`OwnershipListener`] the controller installs
//!   (`handover::listener::Handover`).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::Client;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;
use tokio::sync::watch;
use tracing::{debug, info, warn};

use super::assignment::Scheme;
use super::lease::{self, Member};
use super::liveness::Liveness;
use super::ranges::{Quantiles, fnv1a64};
use super::{Assignment, Ownership, ShardState, ShardView};
use crate::config::shard::ShardSettings;
use std::collections::HashMap;

/// Namespaces per page when the leader lists them for the shard quantiles (names only).
const NAMESPACE_PAGE_SIZE: u32 = 1_000;

/// Why the coordinator stopped or a step of it failed. Its loops retry API errors, so a loop
/// that returns is a bug or a lost watch; the controller exits on it.
#[derive(Debug, thiserror::Error)]
pub enum ShardError {
    #[error(transparent)]
    Api(#[from] kube::Error),
    #[error("encoding the shard assignment: {0}")]
    Encode(#[from] serde_json::Error),
    #[error("the {0} ended")]
    Ended(&'static str),
    #[error("a coordinator task failed: {0}")]
    Task(#[from] tokio::task::JoinError),
    #[error("leadership ended: {0}")]
    LeaderLock(#[from] super::leader_lock::LeaderLockError),
}

pub const ASSIGNMENT_CONFIGMAP: &str = "kube-reloader-shard-assignment";

pub struct Coordinator {
    client: Client,
    settings: ShardSettings,
    ownership: Arc<Ownership>,
    /// `--namespace-selector`: the shard slots are cut at the quantiles of the namespaces the
    /// replicas select, not of every namespace in the cluster.
    namespace_selector: Option<String>,
    state: Arc<ShardState>,
    /// What the hand-over does when ownership moves, and the acted versions it publishes.
    listener: Arc<dyn OwnershipListener>,
    /// The generation whose gained namespaces are fully indexed here.
    synced: Arc<AtomicU64>,
    /// The generation whose previous assignment this replica no longer acts on.
    released: AtomicU64,
    first_assignment: watch::Sender<bool>,
    leader: std::sync::atomic::AtomicBool,
    /// Shutting down: hand our namespaces over before exiting.
    leaving: std::sync::atomic::AtomicBool,
    /// When each member Lease was last seen to change, on the local monotonic clock.
    member_liveness: std::sync::Mutex<Liveness>,
    /// The same for the leader Lease.
    leader_liveness: std::sync::Mutex<Liveness>,
    /// How far each member had acted (the acted-versions annotation), as last read from its
    /// Lease while it was live (a dead member's last renewal is what a takeover catches up from).
    members_acted: std::sync::Mutex<HashMap<String, String>>,
}

/// What the hand-over does with what the coordinator sees (implemented by
/// `handover::listener::Handover`). The coordinator owns the Leases and the assignment; the
/// meaning of the acted versions it carries, and what a replica does with namespaces gained or
/// lost, are the hand-over's.
pub trait OwnershipListener: Send + Sync {
    /// The acted-versions value each renewal publishes (empty: none known yet).
    fn acted(&self) -> String;
    /// Changes are still on their way (not written, not absorbed).
    fn changes_pending(&self) -> bool;
    /// What this replica's own Lease said it had acted up to before this process started,
    /// read before the first renewal overwrites it.
    fn restarted_from(&self, acted: &str);
    /// An assignment was installed; called before anything else can act on it.
    fn installed(&self, step: Installed<'_>);
    /// This replica released `generation`'s previous assignment: it no longer acts on `left`.
    fn released(&self, generation: u64, left: Vec<String>);
}

/// An installed assignment, with what it changed here.
pub struct Installed<'a> {
    pub me: &'a str,
    /// The view before the install.
    pub before: &'a ShardView,
    pub next: &'a Assignment,
    pub owned_before: &'a BTreeSet<String>,
    pub owned_after: &'a BTreeSet<String>,
    /// How far each member had acted (the annotation's value), as last seen in its Lease.
    pub members_acted: &'a HashMap<String, String>,
}

impl Coordinator {
    pub fn new(
        client: Client,
        settings: ShardSettings,
        ownership: Arc<Ownership>,
        namespace_selector: Option<String>,
        listener: Arc<dyn OwnershipListener>,
    ) -> Arc<Self> {
        let state = ownership.shard().expect("a sharded Ownership").clone();
        Arc::new(Self {
            client,
            settings,
            ownership,
            namespace_selector,
            state,
            listener,
            synced: Arc::new(AtomicU64::new(0)),
            released: AtomicU64::new(0),
            first_assignment: watch::channel(false).0,
            leader: Default::default(),
            leaving: Default::default(),
            member_liveness: Default::default(),
            leader_liveness: Default::default(),
            members_acted: Default::default(),
        })
    }

    /// Reads this replica's own Lease before the first renewal overwrites it, and the other
    /// members' (for the first assignment's catch-up).
    async fn inherit_acted(&self) {
        if let Err(e) = self.members().await {
            warn!(error = %e, "could not read the member Leases: namespaces taken over at start are not caught up");
        }
        match lease::acted_before_start(&self.leases(), &self.settings.me).await {
            Ok(acted) if !acted.is_empty() => self.listener.restarted_from(&acted),
            Ok(_) => {}
            Err(e) => {
                warn!(error = %e, "could not read this replica's Lease: changes made while it was down to workloads never reloaded are not caught up")
            }
        }
    }

    fn leases(&self) -> Api<Lease> {
        Api::namespaced(self.client.clone(), &self.settings.namespace)
    }

    /// The membership Leases, read now.
    pub async fn members(&self) -> Result<Vec<Member>, kube::Error> {
        let (members, revision) = lease::members(
            &self.leases(),
            &self.member_liveness,
            self.settings.lease_duration,
        )
        .await?;
        if revision != 0 {
            self.state.members_read(&members, revision);
        }
        let mut acted = self.members_acted.lock().expect("members acted lock");
        for m in members.iter().filter(|m| !m.acted.is_empty()) {
            // A member that stopped renewing keeps the value of its last renewal: after a pause
            // it may renew again with a version past the changes made while it was away.
            if m.live {
                acted.insert(m.identity.clone(), m.acted.clone());
            } else {
                acted
                    .entry(m.identity.clone())
                    .or_insert_with(|| m.acted.clone());
            }
        }
        Ok(members)
    }

    fn configmaps(&self) -> Api<ConfigMap> {
        Api::namespaced(self.client.clone(), &self.settings.namespace)
    }

    /// The watch side reports that everything gained in `generation` is indexed.
    pub fn synced(&self, generation: u64) {
        self.synced.fetch_max(generation, Ordering::AcqRel);
    }

    /// Resolves once a first assignment is known (start-up waits for it, so the first list
    /// indexes exactly the owned namespaces).
    pub async fn wait_for_assignment(&self) {
        let mut rx = self.first_assignment.subscribe();
        let _ = rx.wait_for(|known| *known).await;
    }

    /// Runs every loop until one fails for good (the caller exits the process). The hand-over's
    /// steps run beside them (`handover::steps`).
    pub async fn run(self: Arc<Self>) -> Result<(), ShardError> {
        self.inherit_acted().await;
        let mut tasks = tokio::task::JoinSet::new();
        tasks.spawn(self.clone().membership_loop());
        tasks.spawn(self.clone().leader_loop());
        tasks.spawn(self.clone().assignment_watch());
        match tasks.join_next().await {
            Some(Ok(r)) => r,
            Some(Err(e)) => Err(e.into()),
            None => Ok(()),
        }
    }

    /// Graceful exit, first half: ask to be left out of the assignment and keep acting until the
    /// replicas taking over our namespaces have synced them (or `deadline` passes), so a scale
    /// down leaves no gap.
    pub async fn hand_over(&self, deadline: Duration) {
        self.leaving.store(true, Ordering::Release);
        let until = Instant::now() + deadline;
        let me = self.settings.me.as_str();
        while Instant::now() < until {
            let view = self.state.view();
            let out = view
                .current
                .as_ref()
                .is_some_and(|a| !a.members.iter().any(|m| m == me));
            if out && view.previous.is_none() {
                info!("namespaces handed over");
                return;
            }
            // Nobody to hand over to (the last replica, or all of them stopping at once): waiting
            // would only delay the exit to the deadline. The next replica to start reconciles.
            if let Ok(members) = self.members().await
                && !members
                    .iter()
                    .any(|m| m.identity != me && m.live && !m.leaving)
            {
                info!("no other live replica to hand over to; leaving now");
                return;
            }
            // Renew now rather than at the next tick, so the leader sees `leaving` sooner.
            let _ = self.renew_once().await;
            tokio::time::sleep(self.settings.retry_period / 2).await;
        }
        warn!("hand-over not complete at the deadline; leaving anyway");
    }

    async fn renew_once(&self) -> Result<(), kube::Error> {
        let duration = self.settings.lease_duration.as_secs().max(1) as i32;
        let synced = self.synced.load(Ordering::Acquire);
        let released = self.released.load(Ordering::Acquire);
        let leaving = self.leaving.load(Ordering::Acquire);
        lease::renew_member(
            &self.leases(),
            &self.settings.me,
            duration,
            synced,
            released,
            leaving,
            &self.listener.acted(),
        )
        .await
    }

    /// Graceful exit, second half: leave the membership and resign, so others take over at once.
    pub async fn shutdown(&self) {
        self.state.fence();
        // Changes still on their way (the drain ran out of time): the Lease stays, with how far
        // this replica acted, and expires; whoever takes its namespaces over (or this replica,
        // restarted under its name) catches up from it.
        match self.listener.changes_pending() {
            true => warn!(acted = %self.listener.acted(),
                "leaving with changes not written: the membership Lease is left to expire so \
                 the next owner catches up from it"),
            false => lease::leave(&self.leases(), &self.settings.me).await,
        }
        if self.settings.release_on_cancel {
            let leader = &self.settings.leader_lease;
            lease::resign(&self.leases(), leader, &self.settings.me).await;
        }
    }

    async fn membership_loop(self: Arc<Self>) -> Result<(), ShardError> {
        let mut last_ok: Option<Instant> = None;
        loop {
            match self.renew_once().await {
                Ok(()) => {
                    // Back from the dead (a pause longer than the Lease): our namespaces may have
                    // moved. Re-read the assignment before writing anything again.
                    let was_dead =
                        last_ok.is_none_or(|t| t.elapsed() >= self.settings.lease_duration);
                    if was_dead && last_ok.is_some() {
                        warn!(
                            "membership had expired; re-reading the assignment before writing again"
                        );
                        if let Err(e) = self.refresh_assignment().await {
                            warn!(error = %e, "could not re-read the assignment; staying fenced");
                            tokio::time::sleep(self.settings.retry_period).await;
                            continue;
                        }
                    }
                    last_ok = Some(Instant::now());
                    self.state.renewed();
                    tokio::time::sleep(self.settings.retry_period).await;
                }
                Err(e) => {
                    warn!(error = %e, "could not renew the membership Lease");
                    tokio::time::sleep(retry_after_failure(self.settings.retry_period)).await;
                }
            }
        }
    }

    async fn leader_loop(self: Arc<Self>) -> Result<(), ShardError> {
        let duration = self.settings.lease_duration.as_secs().max(1) as i32;
        loop {
            match lease::try_lead(
                &self.leases(),
                &self.settings.leader_lease,
                &self.settings.me,
                duration,
                &self.leader_liveness,
            )
            .await
            {
                Ok(true) => {
                    if !self.leader.swap(true, Ordering::AcqRel) {
                        info!(lease = %self.settings.leader_lease, "became the leader");
                    }
                    if let Err(e) = self.publish_assignment().await {
                        warn!(error = %e, "could not publish the shard assignment");
                    }
                }
                Ok(false) => {
                    if self.leader.swap(false, Ordering::AcqRel) {
                        warn!("lost leadership");
                    }
                    // Keep observing the member Leases while following: liveness is timed from
                    // when a renewal was first seen here, so a replica that becomes leader with
                    // no history would count a crashed member live for one more Lease duration.
                    if let Err(e) = self.members().await {
                        debug!(error = %e, "listing members failed");
                    }
                }
                Err(e) => {
                    warn!(error = %e, "leader election round failed");
                    tokio::time::sleep(retry_after_failure(self.settings.retry_period)).await;
                    continue;
                }
            }
            tokio::time::sleep(self.settings.retry_period).await;
        }
    }

    /// The members the assignment should hold now.
    fn desired_members(&self, members: &[Member]) -> Vec<String> {
        let me_leaving = self.leaving.load(Ordering::Acquire);
        desired_members(
            members,
            &self.settings.me,
            me_leaving,
            self.settings.sharding,
        )
    }

    async fn publish_assignment(&self) -> Result<(), ShardError> {
        let members = self.members().await?;
        let desired = self.desired_members(&members);
        let scheme = scheme_for(&members, &desired, &self.settings.me);
        let current = self.read_assignment().await?;
        if current
            .as_ref()
            .is_some_and(|a| a.members == desired && a.scheme == scheme)
        {
            return Ok(());
        }
        let quantiles = match scheme {
            Scheme::Rendezvous => None,
            Scheme::HashRanges => self.quantiles(current.as_ref()).await,
        };
        let next = Assignment {
            generation: current.map_or(1, |a| a.generation + 1),
            members: desired,
            scheme,
            quantiles,
            ..Default::default()
        };
        let cm = json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": ASSIGNMENT_CONFIGMAP},
            "data": {"assignment": serde_json::to_string(&next)?}
        });
        self.configmaps()
            .patch(
                ASSIGNMENT_CONFIGMAP,
                &PatchParams::apply("kube-reloader").force(),
                &Patch::Apply(cm),
            )
            .await?;
        info!(generation = next.generation, members = ?next.members, scheme = ?next.scheme, "published the shard assignment");
        Ok(())
    }

    /// The quantiles of the next hash-range assignment: those of the current one while they
    /// still fit the number of namespaces (new quantiles would move namespaces between members
    /// that stay), else those of the namespaces listed now. A failed list keeps what there is.
    async fn quantiles(&self, current: Option<&Assignment>) -> Option<Quantiles> {
        let kept = current
            .filter(|a| a.scheme == Scheme::HashRanges)
            .and_then(|a| a.quantiles.clone());
        match self.selected_namespace_hashes().await {
            Ok(hashes) => match kept {
                Some(q) if q.still_fit(hashes.len()) => Some(q),
                _ => {
                    info!(
                        namespaces = hashes.len(),
                        "cutting the shard slots at the namespaces' hash quantiles"
                    );
                    Quantiles::of(hashes)
                }
            },
            Err(error) => {
                warn!(%error, kept = kept.is_some(), "listing namespaces for the shard quantiles failed: keeping the current ones, if any");
                kept
            }
        }
    }

    /// The hashes of the namespaces the replicas act on: those the label selector lists, less
    /// the ignored ones. Listed here rather than taken from the Namespace watch, which may not
    /// have synced when the leader makes the first assignment.
    async fn selected_namespace_hashes(&self) -> Result<Vec<u64>, kube::Error> {
        let selector = self.namespace_selector.as_deref();
        namespace_hashes(&self.client, selector, |ns| !self.ownership.ignores(ns)).await
    }

    async fn read_assignment(&self) -> Result<Option<Assignment>, ShardError> {
        let cm = self.configmaps().get_opt(ASSIGNMENT_CONFIGMAP).await?;
        Ok(cm.and_then(|cm| parse_assignment(&cm)))
    }

    async fn refresh_assignment(&self) -> Result<(), ShardError> {
        if let Some(a) = self.read_assignment().await? {
            self.apply_assignment(a);
        }
        Ok(())
    }

    async fn assignment_watch(self: Arc<Self>) -> Result<(), ShardError> {
        let config =
            watcher::Config::default().fields(&format!("metadata.name={ASSIGNMENT_CONFIGMAP}"));
        let mut stream = watcher(self.configmaps(), config)
            .backoff(crate::watch_backoff::watch_backoff())
            .applied_objects()
            .boxed();
        while let Some(event) = stream.next().await {
            match event {
                Ok(cm) => {
                    if let Some(a) = parse_assignment(&cm) {
                        self.apply_assignment(a);
                    }
                }
                Err(e) => warn!(error = %e, "assignment watch failed, retrying"),
            }
        }
        Err(ShardError::Ended("assignment watch"))
    }

    /// Installs a newer assignment and tells the hand-over what moved.
    fn apply_assignment(&self, next: Assignment) {
        let before = self.owned_now();
        let view = self.state.view();
        let next = Arc::new(next);
        let installed = self.state.update_view(|view| view.install(next.clone()));
        if !installed {
            return;
        }
        if view.current.is_none() {
            // A first assignment leaves nothing to release: this process never acted on any
            // other. Saying so at the next renewal lets the others' handovers complete and
            // their write-time checks narrow (`Moves::others_released`) without waiting for
            // the next generation.
            self.released.fetch_max(next.generation, Ordering::AcqRel);
        }
        let after = self.owned_now();
        info!(
            generation = next.generation,
            members = next.members.len(),
            gained = after.difference(&before).count(),
            "new shard assignment"
        );
        let members_acted = self
            .members_acted
            .lock()
            .expect("members acted lock")
            .clone();
        self.listener.installed(Installed {
            me: &self.settings.me,
            before: &view,
            next: &next,
            owned_before: &before,
            owned_after: &after,
            members_acted: &members_acted,
        });
        self.first_assignment.send_replace(true);
    }

    fn owned_now(&self) -> BTreeSet<String> {
        self.ownership
            .selected_namespaces()
            .iter()
            .filter(|ns| self.ownership.owns(ns))
            .map(|ns| ns.to_string())
            .collect()
    }

    /// `--retry-period`: how often the Leases are renewed and read.
    pub fn retry_period(&self) -> Duration {
        self.settings.retry_period
    }

    /// The view of the assignment acted on now (a snapshot).
    pub fn view(&self) -> ShardView {
        self.state.view()
    }

    /// Drops the previous assignment of `generation`'s hand-over, once every previous owner
    /// released it. False (nothing changed) if a newer assignment was installed meanwhile: it
    /// keeps its own hand-over.
    pub fn complete_handover(&self, generation: u64) -> bool {
        self.state.update_view(|v| v.complete_handover(generation))
    }

    /// Stops acting on what only the previous assignment gave, lets writes already started
    /// there finish, forgets those namespaces and reports `generation` released.
    pub async fn release_previous(&self, generation: u64) {
        let before = self.owned_now();
        // Only if the assignment did not change while the Leases were read.
        if !self.state.update_view(|v| v.release_previous(generation)) {
            return;
        }
        let left: Vec<String> = before.difference(&self.owned_now()).cloned().collect();
        let deadline = Instant::now() + self.settings.renew_deadline;
        while self.ownership.writing_in(&left) && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.released.fetch_max(generation, Ordering::AcqRel);
        info!(
            generation,
            released = left.len(),
            "gave up namespaces that moved"
        );
        self.listener.released(generation, left);
        let _ = self.renew_once().await;
    }
}

/// When to try again after a failed Lease renewal: a quarter of the retry period, so that a
/// replica whose writes fail for a moment (a 500, a 429) tries several times before its renew
/// deadline fences its writes (and before its Lease expires). At a fixed retry period, a replica
/// answered 500 on 30% of its writes failed 11 of ~27 renewals in a 29-s fault, was fenced and
/// expired once (`chaos-medium-3r-5f75c52`, lease 4 s, renew deadline 3 s, retry period 1 s: three
/// tries a deadline, now nine).
fn retry_after_failure(retry_period: Duration) -> Duration {
    retry_period / 4
}

/// The members an assignment should hold: the live ones that are not leaving (their namespaces
/// move while they still act, so the hand-over completes before they exit), the leader included
/// even if its Lease is a tick behind, unless it is leaving itself. A leaving member stays while
/// no other live member could take its namespaces. Leader-only mode (`--enable-ha` without
/// `--sharding`): the leader alone, or, when it is leaving, another live member.
fn desired_members(members: &[Member], me: &str, me_leaving: bool, sharding: bool) -> Vec<String> {
    let staying = |m: &&Member| m.live && !m.leaving && m.identity != me;
    if !sharding {
        return match me_leaving {
            true => members.iter().find(staying).map(|m| m.identity.clone()),
            false => None,
        }
        .map_or_else(|| vec![me.to_string()], |m| vec![m]);
    }
    let mut desired: BTreeSet<String> = members
        .iter()
        .filter(staying)
        .map(|m| m.identity.clone())
        .collect();
    if !me_leaving || desired.is_empty() {
        desired.insert(me.to_string());
    }
    desired.into_iter().collect()
}

fn parse_assignment(cm: &ConfigMap) -> Option<Assignment> {
    let raw = cm.data.as_ref()?.get("assignment")?;
    match serde_json::from_str(raw) {
        Ok(a) => Some(a),
        Err(e) => {
            warn!(error = %e, "the shard assignment ConfigMap is not readable");
            None
        }
    }
}

/// Hash ranges when every member of the next assignment says it computes them: a replica of an
/// older release would compute rendezvous owners from the same assignment. The leader (`me`)
/// computes them whether or not its own Lease is listed yet.
fn scheme_for(members: &[Member], desired: &[String], me: &str) -> Scheme {
    let ranges = |identity: &String| {
        identity == me
            || members
                .iter()
                .any(|m| &m.identity == identity && m.hash_ranges)
    };
    match desired.iter().all(ranges) {
        true => Scheme::HashRanges,
        false => Scheme::Rendezvous,
    }
}

/// FNV-1a hashes of the names of the namespaces `selector` selects (every namespace without
/// one) that `keep` says yes to, listed in pages of metadata.
async fn namespace_hashes(
    client: &Client,
    selector: Option<&str>,
    keep: impl Fn(&str) -> bool,
) -> Result<Vec<u64>, kube::Error> {
    let api: Api<Namespace> = Api::all(client.clone());
    let mut hashes = Vec::new();
    let mut params = ListParams::default().limit(NAMESPACE_PAGE_SIZE);
    if let Some(selector) = selector {
        params = params.labels(selector);
    }
    loop {
        let page = api.list_metadata(&params).await?;
        hashes.extend(
            page.items
                .iter()
                .filter_map(|n| n.metadata.name.as_deref())
                .filter(|name| keep(name))
                .map(fnv1a64),
        );
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(hashes),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Renewals tried between the last success and the renew deadline when every one fails:
    /// the regular tick one retry period after the success, then one per retry after failure.
    fn tries_before_fenced(retry_period: Duration, renew_deadline: Duration) -> u32 {
        let mut at = retry_period;
        let mut tries = 0;
        while at < renew_deadline {
            tries += 1;
            at += retry_after_failure(retry_period);
        }
        tries
    }

    #[test]
    fn a_failed_renewal_is_retried_often_enough_to_ride_out_transient_errors() {
        let s = Duration::from_secs;
        // The chaos campaign's timings (lease 4 s), then Reloader's defaults (15 s, 10 s, 2 s).
        for (retry_period, renew_deadline) in [(s(1), s(3)), (s(2), s(10))] {
            let tries = tries_before_fenced(retry_period, renew_deadline);
            assert!(tries >= 8, "{tries} tries within {renew_deadline:?}");
            // At 30% of writes failing, fenced about once in 50,000 deadlines, not once in 37.
            assert!(0.3_f64.powi(tries as i32) < 1e-4);
        }
    }

    fn member(identity: &str, hash_ranges: bool) -> Member {
        Member {
            identity: identity.into(),
            live: true,
            synced_generation: 0,
            released_generation: 0,
            leaving: false,
            hash_ranges,
            acted: Default::default(),
        }
    }

    #[test]
    fn leaving_members_are_left_out_of_the_assignment_while_someone_else_can_take_over() {
        let leaving = |id: &str| Member {
            leaving: true,
            ..member(id, true)
        };
        let dead = |id: &str| Member {
            live: false,
            ..member(id, true)
        };
        let members = [
            member("r0", true),
            leaving("r1"),
            dead("r2"),
            member("r3", true),
        ];
        assert_eq!(desired_members(&members, "r0", false, true), ["r0", "r3"]);
        // The leader leaving hands its namespaces over too.
        assert_eq!(desired_members(&members, "r0", true, true), ["r3"]);
        // Nobody else: it keeps them (and leaves at once, nothing to hand over to).
        assert_eq!(desired_members(&[leaving("r1")], "r1", true, true), ["r1"]);
        // Leader-only mode.
        assert_eq!(desired_members(&members, "r0", false, false), ["r0"]);
        assert_eq!(desired_members(&members, "r0", true, false), ["r3"]);
        assert_eq!(desired_members(&[], "r0", true, false), ["r0"]);
    }

    #[test]
    fn hash_ranges_only_when_every_member_of_the_assignment_computes_them() {
        let desired = vec!["a".to_string(), "b".to_string()];
        let both = [member("a", true), member("b", true), member("old", false)];
        assert_eq!(scheme_for(&both, &desired, "a"), Scheme::HashRanges);
        let mixed = [member("a", true), member("b", false)];
        assert_eq!(scheme_for(&mixed, &desired, "a"), Scheme::Rendezvous);
        let unseen = [member("a", true)];
        assert_eq!(scheme_for(&unseen, &desired, "a"), Scheme::Rendezvous);
        // The leader's own Lease may not be listed yet: it computes ranges all the same.
        let leader_unlisted = [member("b", true)];
        assert_eq!(
            scheme_for(&leader_unlisted, &desired, "a"),
            Scheme::HashRanges
        );
    }
}
