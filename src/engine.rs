//! The engine turns index events into queued writes: a config changed -> its candidate workloads
//! -> the decision -> the queue. It also finds, after a (re)sync, workloads whose recorded hash no
//! longer matches their config, so no change is lost while the controller was down. What the
//! watches decode reaches it through [`intake::Intake`], the only writer of controller state.

use std::sync::Arc;
use std::time::Instant;

use tracing::{Span, debug, info_span};

use crate::config::Settings;
use crate::decide::{
    ConfigFacts, DecisionSwitches, ReloadDecision, ReloadReason, WorkloadFacts, decide,
};
use crate::index::{ConfigState, ConfigTransition, ReverseIndex, WorkloadEntry};
use crate::model::{ConfigKey, Counted};
use crate::reload_policy::ReloadTiming;
use crate::reload_windows::HeldReload;
use crate::reloader_format::template::TemplateChange;
use crate::rollout::wave_runner::{Rolled, WaveItem, WaveRunner, WaveSink};
use crate::rollout::{Hold, Priority, QueueObserver, QueuedChange, ReloadQueue, WorkloadWriter};
use crate::shard::Ownership;
use crate::spans::ConfigCause;
use crate::waves::{Candidate, HaltRecord, PolicyText, WavePolicy};

mod breaker;
mod churn;
mod halts;
pub mod intake;
mod recovery;
mod timing;
mod timing_state;
use crate::handover::acted::ActedTracker;
pub use breaker::{BreakerNotice, ChurnBreaker};

/// Receives config-level notifications (the `--webhook-url` mode, metrics).
pub trait ConfigObserver: Send + Sync + 'static {
    /// A config change passed the filters; `affected` workloads were queued; handling it
    /// (candidates, decisions, queueing) took `took`.
    fn config_changed(&self, _config: &ConfigKey, _affected: usize, _took: std::time::Duration) {}
    /// A candidate was skipped, with the reason.
    fn skipped(&self, _config: &ConfigKey, _reason: &'static str) {}
    /// A churn breaker opened or closed.
    fn breaker(&self, _notice: &BreakerNotice) {}
}

impl ConfigObserver for () {}

pub struct Engine<W, O, C = ()> {
    pub index: Arc<ReverseIndex>,
    pub settings: Arc<Settings>,
    pub ownership: Arc<Ownership>,
    queue: ReloadQueue<W, O>,
    observer: C,
    /// `--webhook-url`: config changes call it instead of rolling workloads.
    webhook: Option<crate::alert::ReloadWebhook>,
    /// `--churn-limit`: holds the workloads of configs that change too often.
    breaker: Option<Arc<ChurnBreaker>>,
    breaker_notices: Option<tokio::sync::mpsc::UnboundedSender<BreakerNotice>>,
    /// How far this replica has acted (published in its membership Lease).
    acted: ActedTracker,
    /// Rolls large fan-outs in health-gated waves (`--waves`, or a config's own policy).
    waves: Option<Arc<WaveRunner>>,
    /// Namespaces' own wave policies (`kube-reloader.io/waves`), where namespaces are watched.
    namespace_waves: dashmap::DashMap<String, PolicyText, ahash::RandomState>,
    /// Maintenance windows and delays: the namespaces' own, and the reloads they hold.
    timing: timing_state::TimingState,
}

/// A config event as the fan-out sees it.
#[derive(Clone, Copy)]
struct ConfigEvent<'a> {
    key: &'a ConfigKey,
    state: &'a ConfigState,
    /// What the index held before this event (`None`: created, or deleted).
    previous: Option<&'a ConfigState>,
    deleted: bool,
    observed_at: Instant,
    /// Its reloads hold the published acted version below the config's resourceVersion until
    /// written (see [`Change::pins_acted`]).
    pins_acted: bool,
    /// A catch-up's change: a workload whose template already records the config's current
    /// value was rolled by whoever acted on it. Queued, it would write nothing and only hold the
    /// acted version for as long as the queue takes to reach it.
    skip_current: bool,
    /// `Live` for a change seen now; `Background` for a change nobody acted on that recovery
    /// found (a catch-up, a backfill list newer than the index): late already, it never delays
    /// a live change, in the scheduler or at the rate limiter.
    priority: Priority,
}

impl ConfigEvent<'_> {
    /// A workload counting only some keys whose value this event leaves as it was: the keys
    /// it reads did not change (against the state before, or the value its template records).
    fn unchanged_for(&self, entry: &WorkloadEntry, counted: &Counted, value: Option<&str>) -> bool {
        if *counted == Counted::Whole {
            return false;
        }
        let recorded = entry
            .uses_config(self.key.kind, &self.key.name)
            .and_then(|u| u.recorded.as_deref());
        let before = self.previous.map(|p| p.value_for(counted));
        value.is_some() && (recorded == value || before.as_deref() == value)
    }
}

/// The workload's template records `state`'s current value for the config `key`.
fn records_current(entry: &WorkloadEntry, key: &ConfigKey, state: &ConfigState) -> bool {
    entry
        .uses_config(key.kind, &key.name)
        .and_then(|u| u.recorded.as_deref().map(|r| state.is_current(r, &u.reads)))
        == Some(true)
}

/// One config change for one workload, on its way to the queue.
struct Change<'a> {
    config: &'a ConfigKey,
    hash: Option<String>,
    /// What the hash covers (the writer recomputes it from a newer state with the same keys).
    counted: Counted,
    reason: ReloadReason,
    observed_at: Instant,
    /// The config's resourceVersion: the change holds the acted version below it until written.
    version: u64,
    /// False where holding it would not help a successor: a reload the recorded-hash reconcile
    /// finds again, or one a kept halt holds.
    pins_acted: bool,
}

/// What the watches feed into the engine. Object-safe, so the watch code does not carry the
/// engine's writer and observer types.
pub trait ConfigEvents: Send + Sync + 'static {
    /// A config was listed or changed; returns how many workloads were queued.
    fn config_applied(&self, key: ConfigKey, state: ConfigState, phase: Phase) -> usize;
    /// A config was deleted; returns how many workloads were queued.
    fn config_deleted(&self, key: &ConfigKey) -> usize;
    /// Reconciles recorded hashes in `namespaces` (`None`: all owned).
    fn reconcile_recorded(&self, namespaces: Option<&std::collections::HashSet<String>>) -> usize;
    /// A takeover's catch-up found the indexed config differing from `before`, its state at the
    /// version up to which the previous owner had acted; returns how many workloads were queued.
    fn missed_change(&self, key: &ConfigKey, before: Option<&ConfigState>) -> usize;
    /// How far this replica has acted.
    fn acted(&self) -> &ActedTracker;
    /// `namespace` moved to another replica: the changes rolling in waves there stop here.
    fn namespace_left(&self, namespace: &str);
    /// A namespace's own wave policy (`None`: it has none, or it is gone).
    fn namespace_waves(&self, namespace: &str, policy: Option<PolicyText>);
    /// A namespace's own window and delay (any time: none, or it is gone).
    fn namespace_timing(&self, namespace: &str, timing: ReloadTiming);
    /// Where halts are kept (`None`: nowhere but in memory).
    fn halts(&self) -> Option<crate::rollout::halts::HaltStore>;
    /// Holds again what the kept halts of `namespaces` (`None`: every owned one) held.
    fn restore_halts(
        &self,
        records: &[HaltRecord],
        namespaces: Option<&std::collections::HashSet<String>>,
    ) -> usize;
    /// Holds again what the kept held reloads of `namespaces` (`None`: every owned one) held.
    fn restore_held(
        &self,
        records: &[HeldReload],
        namespaces: Option<&std::collections::HashSet<String>>,
    ) -> usize;
}

impl<W: WorkloadWriter, O: QueueObserver, C: ConfigObserver> ConfigEvents for Engine<W, O, C> {
    fn config_applied(&self, key: ConfigKey, state: ConfigState, phase: Phase) -> usize {
        Engine::config_applied(self, key, state, phase)
    }

    fn config_deleted(&self, key: &ConfigKey) -> usize {
        Engine::config_deleted(self, key)
    }

    fn reconcile_recorded(&self, namespaces: Option<&std::collections::HashSet<String>>) -> usize {
        Engine::reconcile_recorded(self, namespaces)
    }

    fn namespace_left(&self, namespace: &str) {
        if let Some(runner) = &self.waves {
            runner.abandon_namespace(namespace);
        }
        self.timing.forget_namespace(namespace);
    }

    fn namespace_timing(&self, namespace: &str, timing: ReloadTiming) {
        self.timing.namespace(namespace, timing);
    }

    fn namespace_waves(&self, namespace: &str, policy: Option<PolicyText>) {
        match policy {
            Some(policy) => {
                self.namespace_waves.insert(namespace.to_string(), policy);
            }
            None => {
                self.namespace_waves.remove(namespace);
            }
        }
    }

    fn halts(&self) -> Option<crate::rollout::halts::HaltStore> {
        self.waves.as_ref().and_then(|r| r.halts().cloned())
    }

    fn restore_halts(
        &self,
        records: &[HaltRecord],
        namespaces: Option<&std::collections::HashSet<String>>,
    ) -> usize {
        Engine::restore_halts(self, records, namespaces)
    }

    fn restore_held(
        &self,
        records: &[HeldReload],
        namespaces: Option<&std::collections::HashSet<String>>,
    ) -> usize {
        Engine::restore_held(self, records, namespaces)
    }

    fn missed_change(&self, key: &ConfigKey, before: Option<&ConfigState>) -> usize {
        Engine::missed_change(self, key, before)
    }

    fn acted(&self) -> &ActedTracker {
        &self.acted
    }
}

/// Why a config event arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// The first list after start: existing configs are not changes.
    Startup,
    /// A live event.
    Live,
    /// An object of a relist after a broken watch: differences then are real changes, as live
    /// ones, but the relist re-delivers every object, changed or not.
    Relisted,
    /// A list made while the watch keeps running (a namespace gained): the watch may already
    /// have delivered something newer than the list's snapshot, so it only fills gaps.
    Backfill,
    /// A backfill-listed config whose live change this replica deferred to that list (its
    /// namespace's workloads were not listed yet): it changed, even when the index did not hold
    /// it before. Counting it as a gap filled lost the reload of every workload that had not
    /// recorded a hash of it yet (`chaos-medium-3r-seed26-b35deca`).
    BackfillAfterChange,
}

impl Phase {
    /// A live event or a relisted object: anything after the stream's first list.
    pub fn after_startup(self) -> bool {
        matches!(self, Phase::Live | Phase::Relisted)
    }
}

impl<W: WorkloadWriter, O: QueueObserver, C: ConfigObserver> Engine<W, O, C> {
    pub fn new(
        index: Arc<ReverseIndex>,
        settings: Arc<Settings>,
        ownership: Arc<Ownership>,
        queue: ReloadQueue<W, O>,
        observer: C,
    ) -> Self {
        let breaker = settings
            .churn_breaker
            .map(|b| Arc::new(ChurnBreaker::new(b)));
        Self {
            index,
            settings,
            ownership,
            queue,
            observer,
            webhook: None,
            breaker,
            breaker_notices: None,
            acted: ActedTracker::default(),
            waves: None,
            namespace_waves: Default::default(),
            timing: Default::default(),
        }
    }

    /// Rolls large fan-outs through `runner` when a wave policy applies.
    pub fn with_waves(mut self, runner: Arc<WaveRunner>) -> Self {
        self.waves = Some(runner);
        self
    }

    /// The wave runner (`/debug/explain` shows its halts).
    pub fn wave_runner(&self) -> Option<&Arc<WaveRunner>> {
        self.waves.as_ref()
    }

    /// Shares `acted` with whoever publishes it (the shard coordinator).
    pub fn with_acted(mut self, acted: ActedTracker) -> Self {
        self.acted = acted;
        self
    }

    /// Breaker notices go to `notices` too (the controller turns them into Events and alerts).
    pub fn with_breaker_notices(
        mut self,
        notices: tokio::sync::mpsc::UnboundedSender<BreakerNotice>,
    ) -> Self {
        self.breaker_notices = Some(notices);
        self
    }

    /// The churn breaker, with `--churn-limit` (explain reads it).
    pub fn breaker(&self) -> Option<&Arc<ChurnBreaker>> {
        self.breaker.as_ref()
    }

    /// Config changes POST to `webhook` instead of rolling workloads.
    pub fn with_webhook(mut self, webhook: crate::alert::ReloadWebhook) -> Self {
        self.webhook = Some(webhook);
        self
    }

    pub fn queue(&self) -> &ReloadQueue<W, O> {
        &self.queue
    }

    /// A config was listed or changed. Returns how many workloads were queued.
    pub fn config_applied(&self, key: ConfigKey, state: ConfigState, phase: Phase) -> usize {
        if !self.ownership.owns(&key.namespace) {
            return 0;
        }
        let observed_at = Instant::now();
        // Only the Intake writes configs, so nothing replaces this between the read and the apply.
        let previous = self.index.config(&key);
        let event = ConfigEvent {
            key: &key,
            state: &state,
            previous: previous.as_ref(),
            deleted: false,
            observed_at,
            pins_acted: true,
            skip_current: false,
            priority: Priority::Live,
        };
        if matches!(phase, Phase::Backfill | Phase::BackfillAfterChange) {
            // Never replaces what the watch delivered with an older snapshot (that would
            // "change" the config back); a newer one is a change this replica has not acted on.
            // The replica that owned the namespace meanwhile mostly has: workloads the list
            // found on the new value are skipped here, in memory. Queued, each cost a GET and
            // a write turn to find it up to date, and ran ahead of the catch-up's real missed
            // changes: a leader demoted for 45 s and promoted again queued ~900 of them, and the
            // changes nobody had acted on waited up to a minute behind them (issue 43). Not
            // under a wave policy: a wave sequence counts the workloads already on the value (its
            // canaries) to know where it stands, and a kept halt holds the rest.
            let deferred = phase == Phase::BackfillAfterChange;
            let in_waves = self.waves.is_some() && self.wave_policy(&key, &state, false).is_some();
            return match self.index.backfill_config(key.clone(), state.clone()) {
                ConfigTransition::Changed if self.admitted(&event) => self.fan_out(ConfigEvent {
                    priority: Priority::Background,
                    skip_current: !in_waves,
                    ..event
                }),
                ConfigTransition::Created if deferred && self.admitted(&event) => {
                    self.fan_out(event)
                }
                outcome => {
                    let indexed = previous.as_ref().map(|p| p.resource_version);
                    debug!(config = %key, ?outcome, listed = state.resource_version, ?indexed,
                        "backfill list: nothing to act on");
                    0
                }
            };
        }
        if phase.after_startup() {
            self.release_if_resumed(&key, previous.as_ref(), &state);
        }
        match (self.index.apply_config(key.clone(), state.clone()), phase) {
            (ConfigTransition::Unchanged, _) => 0,
            (ConfigTransition::Changed, _) if self.admitted(&event) => self.fan_out(event),
            (ConfigTransition::Changed, _) => 0,
            (ConfigTransition::Created, Phase::Live | Phase::Relisted)
                if self.settings.reload_on_create =>
            {
                self.fan_out(event)
            }
            (ConfigTransition::Created, Phase::Startup)
                if self.settings.reload_on_create && self.settings.sync_after_restart =>
            {
                self.fan_out(event)
            }
            (ConfigTransition::Created, _) => 0,
        }
    }

    /// A config was deleted. Returns how many workloads were queued.
    pub fn config_deleted(&self, key: &ConfigKey) -> usize {
        if let Some(breaker) = &self.breaker {
            breaker.forget(key);
        }
        let Some(state) = self.index.delete_config(key) else {
            return 0;
        };
        if !self.settings.reload_on_delete || !self.ownership.owns(&key.namespace) {
            return 0;
        }
        self.fan_out(ConfigEvent {
            key,
            state: &state,
            previous: None,
            deleted: true,
            observed_at: Instant::now(),
            pins_acted: true,
            skip_current: false,
            priority: Priority::Live,
        })
    }

    /// A config event's reloads: decided for every workload using the config, then dispatched.
    fn fan_out(&self, event: ConfigEvent<'_>) -> usize {
        let ConfigEvent { key, state, .. } = event;
        let cause = match event.deleted {
            true => ConfigCause::Deleted,
            false => ConfigCause::Changed,
        };
        let span = crate::spans::config_change(key, cause);
        if let Some(webhook) = &self.webhook {
            if !state.ignore {
                span.in_scope(|| webhook.config_changed(key));
            }
            return 0;
        }
        // A newer change of the config replaces any it is still rolling in waves.
        if let Some(runner) = &self.waves {
            runner.supersede(key);
        }
        // The decision over every workload using the config: how many were looked at, how many
        // are reloaded (the others were skipped: not opted in, ignored, ...).
        let decision = info_span!(
            parent: &span,
            "decide",
            candidates = tracing::field::Empty,
            reloads = tracing::field::Empty,
        );
        let mut candidates = 0;
        let mut items = Vec::new();
        for entry in self.index.candidates(key) {
            candidates += 1;
            if let Some(change) = self.reload_for(&event, &entry) {
                items.push(WaveItem {
                    candidate: Candidate {
                        key: entry.key.clone(),
                        canary: entry.canary,
                    },
                    change: self.queued_change(&entry, change, &span),
                    priority: event.priority,
                });
            }
        }
        let affected = items.len();
        decision.record("candidates", candidates);
        decision.record("reloads", affected);
        drop(decision);
        self.dispatch(key, state, event.deleted, items);
        span.record("affected", affected);
        span.in_scope(|| debug!(config = %key, affected, "config change fanned out"));
        self.observer
            .config_changed(key, affected, event.observed_at.elapsed());
        affected
    }

    /// The reload `event` asks of `entry` (`None`: the decision skips it, or the keys it reads
    /// did not change, or a catch-up finds it already current).
    fn reload_for<'e>(&self, event: &ConfigEvent<'e>, entry: &WorkloadEntry) -> Option<Change<'e>> {
        let ConfigEvent { key, state, .. } = *event;
        let reason = self.decide(key, state, entry)?;
        if event.skip_current && records_current(entry, key, state) {
            self.observer.skipped(key, "already_current");
            return None;
        }
        let counted = entry.counted(key.kind, &key.name, self.settings.precise_keys);
        let hash = (!event.deleted).then(|| state.value_for(&counted));
        if hash.is_some() && event.unchanged_for(entry, &counted, hash.as_deref()) {
            self.observer.skipped(key, "keys_unchanged");
            return None;
        }
        Some(Change {
            config: key,
            hash,
            counted,
            reason,
            observed_at: event.observed_at,
            version: state.resource_version,
            pins_acted: event.pins_acted,
        })
    }

    /// The one way reloads leave the engine: those a workload's window or delay holds wait
    /// (`timing.rs`); the others go through the config's wave policy to the wave runner when it
    /// has one and they are more than its threshold, else to the queue now.
    fn dispatch(&self, key: &ConfigKey, state: &ConfigState, deleted: bool, items: Vec<WaveItem>) {
        let items = self.hold_untimely(items);
        let waves = self.waves.as_ref().and_then(|runner| {
            self.wave_policy(key, state, deleted)
                .map(|policy| (runner, policy))
        });
        match waves {
            Some((runner, policy)) if items.len() > policy.threshold => {
                let rolled = Rolled {
                    hash: state.digest.reloader_hash(),
                    resume: state.waves.as_ref().and_then(|w| w.resume.clone()),
                };
                runner.start(key.clone(), rolled, policy, items, self.wave_sink());
            }
            _ => self.enqueue_all(items),
        }
    }

    fn decide(
        &self,
        key: &ConfigKey,
        state: &ConfigState,
        entry: &WorkloadEntry,
    ) -> Option<ReloadReason> {
        let decision = decide(
            ConfigFacts {
                kind: key.kind,
                name: &key.name,
                ignore: state.ignore,
                matched: state.matched,
            },
            WorkloadFacts {
                kind: entry.key.kind,
                policy: &entry.policy,
                referenced: entry.references(key.kind, &key.name),
            },
            DecisionSwitches {
                auto_reload_all: self.settings.auto_reload_all,
                ignored_workloads: &self.settings.ignored_workloads,
            },
        );
        match decision {
            ReloadDecision::Reload(reason) => Some(reason),
            ReloadDecision::Skip(reason) => {
                self.observer.skipped(key, reason.as_str());
                None
            }
        }
    }

    /// The wave policy of a change of `key` (`None`: waves are off for it, or it is a deletion).
    fn wave_policy(
        &self,
        key: &ConfigKey,
        state: &ConfigState,
        deleted: bool,
    ) -> Option<WavePolicy> {
        if deleted {
            return None;
        }
        let own = state.waves.as_ref().and_then(|w| w.policy());
        if let Some(own) = &own {
            debug!(config = %key, policy = ?own, "the config's own wave policy");
        }
        let namespace = self.namespace_waves.get(&*key.namespace);
        crate::waves::resolve(
            self.settings.waves.as_ref(),
            namespace.as_deref(),
            own.as_ref(),
        )
    }

    fn enqueue_all(&self, items: Vec<WaveItem>) {
        for item in items {
            self.queue
                .enqueue_as(item.candidate.key, item.change, item.priority);
        }
    }

    /// The runner's way onto the write path.
    fn wave_sink(&self) -> WaveSink {
        let queue = self.queue.clone();
        Arc::new(move |workload, change, priority| queue.enqueue_as(workload, change, priority))
    }

    /// A reload of `entry` to `state`'s current value that holds no acted version: whoever owns
    /// the workload next finds it again (by the hash it records, or by a kept halt).
    fn unpinned_item(
        &self,
        entry: &WorkloadEntry,
        key: &ConfigKey,
        state: &ConfigState,
        reason: ReloadReason,
        span: &Span,
        priority: Priority,
    ) -> WaveItem {
        let counted = entry.counted(key.kind, &key.name, self.settings.precise_keys);
        let change = Change {
            config: key,
            hash: Some(state.value_for(&counted)),
            counted,
            reason,
            observed_at: Instant::now(),
            version: state.resource_version,
            pins_acted: false,
        };
        WaveItem {
            candidate: Candidate {
                key: entry.key.clone(),
                canary: entry.canary,
            },
            change: self.queued_change(entry, change, span),
            priority,
        }
    }

    /// The change as the queue takes it, with its `reload` span under `parent`.
    fn queued_change(
        &self,
        entry: &WorkloadEntry,
        change: Change<'_>,
        parent: &Span,
    ) -> QueuedChange {
        let Change {
            config: key,
            hash,
            counted,
            reason,
            observed_at,
            version,
            pins_acted,
        } = change;
        // A restart by eviction changes no template: say so rather than the template strategy.
        let strategy = match entry.policy.restart_by {
            crate::pod_restart::RestartBy::Eviction => "eviction",
            _ => self.settings.strategy_for(entry.key.kind).as_str(),
        };
        let span = info_span!(
            parent: parent,
            "reload",
            config.kind = %key.kind,
            config.namespace = %key.namespace,
            config.name = %key.name,
            workload.kind = %entry.key.kind,
            workload.namespace = %entry.key.namespace,
            workload.name = %entry.key.name,
            strategy,
            decision = reason.as_str(),
            result = tracing::field::Empty,
            coalesced_with = tracing::field::Empty,
            attempts = tracing::field::Empty,
        );
        crate::spans::annotate_workload(&span, &entry.key);
        QueuedChange {
            change: TemplateChange {
                config: key.clone(),
                hash,
                counted,
                explicit: reason == ReloadReason::ExplicitList,
            },
            observed_at,
            span,
            acted: pins_acted.then(|| Hold::new(self.acted.change_pending(key.kind, version))),
        }
    }
}

#[cfg(test)]
mod tests;
