//! What the watches hand over, per kind: applied, deleted, listed (the relist diff). The engine
//! is the only writer of controller state: the index, the namespace selection, the tenants,
//! pause timers, one-time warnings. The watch layer decodes objects and calls these; it reads
//! the index but never writes it.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use crate::config::Settings;
use crate::index::{
    ConfigState, ReverseIndex, WorkloadEntry, WorkloadObject, workload_entry_and_template,
};
use crate::model::{ConfigKey, ConfigKind, WorkloadKey, WorkloadKind};
use crate::reload_policy::{PolicyProblem, ReloadTiming};
use crate::resources::workload_reference;
use crate::rollout::Tenants;
use crate::rollout::events::EventSink;
use crate::rollout::pause::PauseKeeper;
use crate::rollout::{QueueObserver, WorkloadWriter};
use crate::shadow::Shadow;
use crate::shadow::observe::writes_seen;
use crate::shard::Ownership;

use super::{ConfigEvents, ConfigObserver, Engine, Phase};
use crate::handover::acted::ActedTracker;
use crate::handover::deferral::{Deferred, Entering};
use crate::handover::gains::GainSink;

/// A namespace that moved to another replica keeps its config states this long (its workloads
/// are forgotten at once), so that if it comes back meanwhile, its backfill compares with what
/// this replica last acted on.
pub const KEEP_LEFT_CONFIGS: Duration = Duration::from_secs(60);

/// A Secret a workload uses that the index did not hold, and when that was seen.
pub type SecretNotice = (ConfigKey, Instant);

pub struct Intake {
    configs: Arc<dyn ConfigEvents>,
    index: Arc<ReverseIndex>,
    ownership: Arc<Ownership>,
    tenants: Arc<Tenants>,
    settings: Arc<Settings>,
    events: EventSink,
    pauses: PauseKeeper,
    /// Bad annotation values already reported, so each gets one Warning, not one per event.
    reported: dashmap::DashSet<(WorkloadKey, PolicyProblem), ahash::RandomState>,
    /// Used Secrets not indexed, for the ignored-type check (`None`: no type is ignored).
    secret_notices: Option<mpsc::UnboundedSender<SecretNotice>>,
    secret_notice_receiver: Mutex<Option<mpsc::UnboundedReceiver<SecretNotice>>>,
    /// Namespaces gained whose configs the backfill has not listed yet, with the changes met
    /// there meanwhile (see `handover::deferral`).
    entering: Entering,
    /// Shadow mode: the incumbent's writes seen on the workloads are handed here.
    shadow: Option<Arc<Shadow>>,
}

impl Intake {
    pub fn new<W: WorkloadWriter, O: QueueObserver, C: ConfigObserver>(
        engine: Arc<Engine<W, O, C>>,
        events: EventSink,
        pauses: PauseKeeper,
    ) -> Self {
        let settings = engine.settings.clone();
        let check_types = !settings.ignored_secret_types.is_empty()
            && settings.watches_config(ConfigKind::Secret);
        let (secret_notices, receiver) = match check_types {
            true => {
                let (tx, rx) = mpsc::unbounded_channel();
                (Some(tx), Some(rx))
            }
            false => (None, None),
        };
        Self {
            index: engine.index.clone(),
            ownership: engine.ownership.clone(),
            tenants: engine.queue().tenants().clone(),
            configs: engine,
            settings,
            events,
            pauses,
            reported: Default::default(),
            secret_notices,
            secret_notice_receiver: Mutex::new(receiver),
            entering: Default::default(),
            shadow: None,
        }
    }

    /// Shadow mode: each write of the incumbent's seen on a workload goes to `shadow`.
    pub fn with_shadow(self, shadow: Arc<Shadow>) -> Self {
        Self {
            shadow: Some(shadow),
            ..self
        }
    }

    /// The index, to read.
    pub fn index(&self) -> &Arc<ReverseIndex> {
        &self.index
    }

    pub fn ownership(&self) -> &Arc<Ownership> {
        &self.ownership
    }

    pub fn settings(&self) -> &Arc<Settings> {
        &self.settings
    }

    /// The notices of used Secrets the index did not hold, for the ignored-type check (once;
    /// `None` when no Secret type is ignored).
    pub fn take_secret_notices(&self) -> Option<mpsc::UnboundedReceiver<SecretNotice>> {
        self.secret_notice_receiver
            .lock()
            .expect("secret notice receiver lock")
            .take()
    }

    /// Indexes one workload object; returns its key when it was taken in. `ready`: the first
    /// lists are done, so Secrets it uses that the index does not hold are worth a check.
    pub async fn workload_applied(
        &self,
        kind: WorkloadKind,
        obj: WorkloadObject,
        ready: bool,
    ) -> Option<WorkloadKey> {
        let ns = obj.metadata.namespace.as_deref()?;
        if !self.ownership.owns(ns) {
            return None;
        }
        let (entry, template) = match workload_entry_and_template(kind, &obj, &self.settings.keys) {
            Ok(built) => built,
            Err(e) => {
                warn!(kind = kind.as_str(), error = %e, "workload skipped");
                return None;
            }
        };
        let key = entry.key.clone();
        self.report_problems(&entry, obj.metadata.uid.clone()).await;
        self.schedule_pause(&entry);
        debug!(workload = %key, uses = entry.uses.len(), "workload indexed");
        let secrets = match ready && self.secret_notices.is_some() {
            true => entry
                .edge_configs()
                .into_iter()
                .filter(|c| c.kind == ConfigKind::Secret)
                .collect(),
            false => Vec::new(),
        };
        if let Some(shadow) = &self.shadow {
            let old = self.index.workload(&key);
            let keys = &self.settings.keys;
            let seen = writes_seen(old.as_deref(), &entry, &obj, &template, keys, ready);
            for seen in seen {
                shadow.written(&seen.workload, &seen.config, seen.marks);
            }
        }
        self.index.apply_workload(entry);
        self.notice_unindexed_secrets(secrets);
        Some(key)
    }

    async fn report_problems(&self, entry: &WorkloadEntry, uid: Option<String>) {
        for problem in &entry.policy.problems {
            if self.reported.insert((entry.key.clone(), problem.clone())) {
                warn!(workload = %entry.key, %problem, "bad annotation");
                let reference = workload_reference(&entry.key, uid.clone());
                self.events
                    .bad_annotation(&reference, problem.to_string())
                    .await;
            }
        }
    }

    fn schedule_pause(&self, entry: &WorkloadEntry) {
        if let (Some(paused_at), Some(period)) = (entry.paused_at, entry.policy.pause_period)
            && entry.key.kind == WorkloadKind::Deployment
        {
            self.pauses
                .schedule(entry.key.clone(), paused_at, period.as_secs() as i64);
        }
    }

    /// Secrets the workload uses that the index does not hold go to the ignored-type check.
    fn notice_unindexed_secrets(&self, secrets: Vec<ConfigKey>) {
        let Some(notices) = &self.secret_notices else {
            return;
        };
        for key in secrets {
            if self.index.config(&key).is_none() {
                let _ = notices.send((key, Instant::now()));
            }
        }
    }

    pub fn workload_deleted(&self, key: &WorkloadKey) {
        self.index.delete_workload(key);
    }

    /// A list of `kind` in `namespace` (`None`: all) returned `seen`: the workloads it did not
    /// return were deleted meanwhile.
    pub fn workloads_listed(
        &self,
        kind: WorkloadKind,
        namespace: Option<&str>,
        seen: &HashSet<WorkloadKey>,
        covered: impl Fn(&str) -> bool,
    ) {
        self.index.retain_workloads(kind, |k| {
            seen.contains(k)
                || namespace.is_some_and(|ns| ns != &*k.namespace)
                || !covered(&k.namespace)
        });
    }

    /// A namespace was seen: its tenant follows from its labels, its own wave policy from its
    /// `kube-reloader.io/waves` annotation (a malformed one is logged and left out).
    pub fn namespace_seen(&self, namespace: &str, meta: &ObjectMeta) {
        self.tenants.namespace_seen(namespace, meta.labels.as_ref());
        let raw = meta
            .annotations
            .as_ref()
            .and_then(|a| a.get(crate::waves::WAVES_ANNOTATION));
        let policy = raw.and_then(|raw| match crate::waves::PolicyText::parse(raw) {
            Ok(policy) => Some(policy),
            Err(e) => {
                warn!(namespace, annotation = crate::waves::WAVES_ANNOTATION, error = %e,
                    "ignoring the namespace's wave policy");
                None
            }
        });
        self.configs.namespace_waves(namespace, policy);
        let (timing, problems) = match &meta.annotations {
            Some(annotations) => ReloadTiming::read(&self.settings.keys, annotations),
            None => Default::default(),
        };
        for problem in problems {
            warn!(namespace, %problem, "ignoring the namespace's reload timing");
        }
        self.configs.namespace_timing(namespace, timing);
    }

    pub fn namespace_deleted(&self, namespace: &str) {
        self.tenants.namespace_gone(namespace);
        self.configs.namespace_waves(namespace, None);
        self.configs.namespace_timing(namespace, Default::default());
    }

    /// A namespace list returned `seen`: the tenants of the others are forgotten. Returns how
    /// many namespaces are grouped by the tenant label.
    pub fn namespaces_listed(&self, seen: &HashSet<String>) -> usize {
        self.tenants.retain(seen);
        self.tenants.grouped_namespaces()
    }

    /// The namespace selector selects `namespace`; true if that is news.
    pub fn namespace_selected(&self, namespace: &str) -> bool {
        self.ownership.select(namespace)
    }

    /// The namespace selector no longer selects `namespace`: everything of it is forgotten.
    pub fn namespace_unselected(&self, namespace: &str) {
        if self.ownership.unselect(namespace) {
            info!(namespace, "namespace left the selection, forgetting it");
            self.index.drop_namespace(namespace);
        }
    }

    /// A namespace moved to another replica: its workloads are forgotten now, its configs after
    /// [`KEEP_LEFT_CONFIGS`] unless it came back. A namespace that moves away and back within
    /// seconds (a paused replica returning) is then backfilled against the config states this
    /// replica last acted on, so a change made meanwhile is a change, not a creation: a workload
    /// that was never reloaded records no hash for the reconcile to compare, and such a change
    /// would be lost.
    pub fn namespace_moved_away(self: &Arc<Self>, namespace: &str) {
        self.index.drop_workloads_in(namespace);
        self.configs.namespace_left(namespace);
        let intake = self.clone();
        let namespace = namespace.to_string();
        tokio::spawn(async move {
            tokio::time::sleep(KEEP_LEFT_CONFIGS).await;
            if !intake.ownership.owns(&namespace) {
                intake.index.drop_namespace(&namespace);
            }
        });
    }

    /// A config kept from before its namespace moved away, not listed when it came back and not
    /// touched since (`version` unchanged), was deleted while this replica did not watch it:
    /// forgotten without a reload, as that happened unobserved.
    pub fn config_deleted_unobserved(&self, key: &ConfigKey, version: u64) {
        let untouched = self
            .index
            .config(key)
            .is_some_and(|s| s.resource_version == version);
        if untouched && self.ownership.owns(&key.namespace) {
            self.index.delete_config(key);
        }
    }

    /// Warns on `workload` (an Event) that it uses a Secret whose type is never watched.
    pub async fn warn_ignored_secret(&self, workload: &ObjectReference, message: String) {
        self.events.ignored_secret_type(workload, message).await;
    }
}

/// Configs go straight to the engine's decision path.
impl Intake {
    /// A config was listed or changed; returns how many workloads were queued.
    pub fn config_applied(&self, key: ConfigKey, state: ConfigState, phase: Phase) -> usize {
        // A deferred change's guard is held until the changes it leads to are queued.
        let state = match phase.after_startup() {
            true => {
                let (kind, version) = (key.kind, state.resource_version);
                let hold = || self.acted().change_pending(kind, version);
                let live = phase == Phase::Live;
                let Some(state) = self.entering.defer(key.clone(), state, live, hold) else {
                    debug!(config = %key, ?phase, "changed while its namespace is backfilled: left to the backfill's list");
                    return 0;
                };
                state
            }
            false => state,
        };
        let (state, phase, _deferred_guard) = match phase {
            Phase::Backfill => match self.entering.listed(&key, state) {
                (state, Some(deferred)) => {
                    (state, after_list(deferred.changed), Some(deferred.acted))
                }
                (state, None) => (state, phase, None),
            },
            _ => (state, phase, None),
        };
        self.configs.config_applied(key, state, phase)
    }

    /// How far this replica has acted (the engine's tracker).
    pub fn acted(&self) -> &ActedTracker {
        self.configs.acted()
    }

    /// See [`Engine::missed_change`].
    pub fn missed_change(&self, key: &ConfigKey, before: Option<&ConfigState>) -> usize {
        self.configs.missed_change(key, before)
    }

    /// A backfill of `namespaces` starts: their workloads and configs are not indexed yet.
    pub fn backfill_started(&self, namespaces: &[String]) {
        for namespace in namespaces {
            self.ownership.entered(namespace);
            self.entering.started(namespace);
        }
    }

    /// The backfill has listed the workloads and then the configs of `namespaces`: live changes
    /// count again, and those met during the backfill that its list did not bring (made after
    /// its snapshot, or of configs it did not list) are acted on now. Returns the workloads
    /// queued.
    pub fn configs_backfilled<'a>(&self, namespaces: impl IntoIterator<Item = &'a str>) -> usize {
        let mut queued = 0;
        for namespace in namespaces {
            let Some(waiting) = self.entering.ended(namespace) else {
                continue;
            };
            for (key, deferred) in waiting {
                // Never replaces a newer state (a live event may have come in since).
                let phase = after_list(deferred.changed);
                let Deferred { state, acted, .. } = deferred;
                queued += self.configs.config_applied(key, state, phase);
                drop(acted);
            }
        }
        queued
    }

    /// A config was deleted; returns how many workloads were queued.
    pub fn config_deleted(&self, key: &ConfigKey) -> usize {
        // A change of it deferred during a backfill must not bring it back when the backfill ends.
        self.entering.forget(key);
        self.configs.config_deleted(key)
    }

    /// Reads the kept halts and holds again what those of `namespaces` (`None`: every owned
    /// one) held; before the reconcile, which would otherwise roll what they hold. A failed read
    /// is logged: the reconcile then rolls the stale workloads in waves anew.
    pub async fn restore_halts(&self, namespaces: Option<&HashSet<String>>) -> usize {
        let Some(store) = self.configs.halts() else {
            return 0;
        };
        match store.load().await {
            Ok(kept) => {
                self.configs.restore_held(&kept.held, namespaces);
                match kept.halts.is_empty() {
                    true => 0,
                    false => self.configs.restore_halts(&kept.halts, namespaces),
                }
            }
            Err(e) => {
                warn!(error = %e, "reading the kept halts failed: halted changes start over in waves");
                0
            }
        }
    }

    /// Reconciles recorded hashes in `namespaces` (`None`: all owned).
    pub fn reconcile_recorded(&self, namespaces: Option<&HashSet<String>>) -> usize {
        self.configs.reconcile_recorded(namespaces)
    }
}

/// What the hand-over's backfill and catch-up put in (`handover::gains`).
impl GainSink for Intake {
    fn acted(&self) -> &ActedTracker {
        Intake::acted(self)
    }

    fn backfill_started(&self, namespaces: &[String]) {
        Intake::backfill_started(self, namespaces);
    }

    fn config_listed(&self, key: ConfigKey, state: ConfigState) -> usize {
        self.config_applied(key, state, Phase::Backfill)
    }

    fn configs_backfilled<'a>(&self, namespaces: impl IntoIterator<Item = &'a str>) -> usize {
        Intake::configs_backfilled(self, namespaces)
    }

    fn config_deleted_unobserved(&self, key: &ConfigKey, version: u64) {
        Intake::config_deleted_unobserved(self, key, version);
    }

    async fn restore_halts(&self, namespaces: &HashSet<String>) -> usize {
        Intake::restore_halts(self, Some(namespaces)).await
    }

    fn reconcile_recorded(&self, namespaces: Option<&HashSet<String>>) -> usize {
        Intake::reconcile_recorded(self, namespaces)
    }

    fn missed_change(&self, key: &ConfigKey, before: Option<&ConfigState>) -> usize {
        Intake::missed_change(self, key, before)
    }

    fn namespace_moved_away(self: &Arc<Self>, namespace: &str) {
        Intake::namespace_moved_away(self, namespace);
    }
}

/// How a state that waited for a backfill's list is applied after it: a known change counts
/// even if the index did not hold the config; a relisted state only when it is newer than what
/// the list brought and differs from it.
fn after_list(changed: bool) -> Phase {
    match changed {
        true => Phase::BackfillAfterChange,
        false => Phase::Backfill,
    }
}
