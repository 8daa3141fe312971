//! Reloads a maintenance window or a delay holds (`reload_windows`): a reload decided for a
//! workload whose window is closed, or whose change is younger than its delay, waits here
//! instead of the queue, one entry per workload whatever the number of its changes; when it is
//! due the workload rolls once, to each config's value then. What waits is kept beside the halts
//! (`HaltStore`), so a restarted replica or the namespace's next owner restores it with them
//! and rolls it when due: nothing waiting holds the acted version, which may be hours.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use jiff::Timestamp;
use tracing::{debug, info, warn};

use crate::model::{ConfigKey, WorkloadKey};
use crate::reload_policy::ReloadTiming;
use crate::reload_windows::{HeldReload, due};
use crate::rollout::wave_runner::WaveItem;
use crate::rollout::{Priority, QueueObserver, WorkloadWriter};
use crate::spans::ConfigCause;

use super::timing_state::Held;
use super::{ConfigObserver, Engine};

/// How often held reloads are looked at (a window opening, an annotation that changed).
const RELEASE_TICK: Duration = Duration::from_secs(1);

impl<W: WorkloadWriter, O: QueueObserver, C: ConfigObserver> Engine<W, O, C> {
    /// When `workload` may be reloaded: its own window and delay, else its namespace's, and
    /// with the admission webhook on, its settle time.
    pub fn timing_of(&self, workload: &WorkloadKey) -> ReloadTiming {
        let own = self.annotated_timing(workload);
        // The admission webhook's settle time, as a delay no annotation overrides downwards.
        match self.settings.admission_settle {
            Some(settle) if own.delay.is_none_or(|d| d < settle) => ReloadTiming {
                delay: Some(settle),
                ..own
            },
            _ => own,
        }
    }

    /// The workload's own window and delay, else its namespace's (annotations only).
    fn annotated_timing(&self, workload: &WorkloadKey) -> ReloadTiming {
        let own = self
            .index
            .workload(workload)
            .map(|e| e.policy.timing.clone())
            .unwrap_or_default();
        match self.timing.namespaces.get(&*workload.namespace) {
            Some(namespace) => own.or(&namespace),
            None => own,
        }
    }

    /// The configs whose changes `workload` holds and when they are due (`None`: nothing held).
    pub fn held_for(&self, workload: &WorkloadKey) -> Option<(Vec<ConfigKey>, Timestamp)> {
        let held = self.timing.held.get(workload)?.clone();
        let timing = self.timing_of(workload);
        let at = due(held.since, timing.window.as_deref(), timing.delay);
        Some((held.configs.into_iter().collect(), at))
    }

    /// The reloads of `items` that may go now; the others wait for their window or delay.
    pub(super) fn hold_untimely(&self, items: Vec<WaveItem>) -> Vec<WaveItem> {
        let now = Timestamp::now();
        items
            .into_iter()
            .filter(|item| !self.held_now(item, now))
            .collect()
    }

    /// Holds `item` if its workload already waits (it joins, one rollout when due) or its
    /// window or delay says not yet. A deletion's reload (`--reload-on-delete`) is never held:
    /// what waits is rolled to each config's value when due, and a deleted config has none.
    fn held_now(&self, item: &WaveItem, now: Timestamp) -> bool {
        if item.change.change.hash.is_none() {
            return false;
        }
        let workload = &item.candidate.key;
        let waiting = self.timing.held.get(workload).map(|h| h.since);
        let timing = self.timing_of(workload);
        if waiting.is_none() && timing.is_any_time() {
            return false;
        }
        let since = waiting.unwrap_or_else(|| wall_time_of(item.change.observed_at, now));
        let at = due(since, timing.window.as_deref(), timing.delay);
        if waiting.is_none() && at <= now {
            return false;
        }
        let config = &item.change.change.config;
        item.change.span.record("result", "held");
        // Held by the admission webhook's settle time alone: seconds, kept in memory only. A
        // restart or a hand-over meanwhile finds the workload's recorded hash behind its config
        // and rolls it (missed while down); a record per reload would be two writes of the
        // halts ConfigMap per reload, and a large fan-out would outgrow it.
        let kept = !self.annotated_timing(workload).is_any_time();
        match kept {
            true => info!(workload = %workload, config = %config, until = %at,
                "reload held by the workload's window or delay"),
            false => debug!(workload = %workload, config = %config, until = %at,
                "reload settling for the admission webhook"),
        }
        self.hold(workload, config, since, kept);
        true
    }

    fn hold(&self, workload: &WorkloadKey, config: &ConfigKey, since: Timestamp, kept: bool) {
        let mut held = self.timing.held.entry(workload.clone()).or_insert(Held {
            configs: BTreeSet::new(),
            since,
            kept,
        });
        held.kept |= kept;
        let added = held.configs.insert(config.clone());
        if let (true, true, Some(store)) = (added, held.kept, self.halt_store()) {
            store.hold(
                workload,
                &HeldReload::new(workload, &held.configs, held.since),
            );
        }
    }

    /// Holds again what the kept records of `namespaces` (`None`: every owned one) held.
    pub fn restore_held(
        &self,
        records: &[HeldReload],
        namespaces: Option<&std::collections::HashSet<String>>,
    ) -> usize {
        let mut restored = 0;
        for record in records {
            let Some(workload) = record.workload() else {
                continue;
            };
            let listed = namespaces.is_none_or(|set| set.contains(&*workload.namespace));
            if !listed || !self.ownership.owns(&workload.namespace) {
                continue;
            }
            let mut held = self.timing.held.entry(workload).or_insert(Held {
                configs: BTreeSet::new(),
                since: record.since,
                kept: true,
            });
            held.since = held.since.min(record.since);
            held.configs.extend(record.config_keys());
            restored += 1;
        }
        if restored > 0 {
            info!(restored, "held reloads restored");
        }
        restored
    }

    /// Rolls the held workloads that are due; returns how many.
    pub fn release_due_holds(&self) -> usize {
        let now = Timestamp::now();
        let ready: Vec<WorkloadKey> = self
            .timing
            .held
            .iter()
            .filter(|held| {
                let timing = self.timing_of(held.key());
                due(held.since, timing.window.as_deref(), timing.delay) <= now
            })
            .map(|held| held.key().clone())
            .collect();
        let mut rolled = 0;
        for workload in ready {
            let Some((_, held)) = self.timing.held.remove(&workload) else {
                continue;
            };
            // Not ours any more: the kept record is the next owner's to roll.
            if !self.ownership.owns(&workload.namespace) {
                continue;
            }
            if let (true, Some(store)) = (held.kept, self.halt_store()) {
                store.release(&workload);
            }
            rolled += usize::from(self.roll_held(&workload, held.configs));
        }
        rolled
    }

    /// Queues `workload`'s reload for each of `configs` at its value now; false when nothing
    /// is left to roll (the workload or the configs are gone, or it no longer opts in).
    fn roll_held(&self, workload: &WorkloadKey, configs: BTreeSet<ConfigKey>) -> bool {
        let Some(entry) = self.index.workload(workload) else {
            info!(workload = %workload, "a held reload's workload is gone");
            return false;
        };
        let mut items = Vec::new();
        for config in &configs {
            let Some(state) = self.index.config(config) else {
                warn!(workload = %workload, config = %config, "a held reload's config is gone: not rolled for it");
                continue;
            };
            let span = crate::spans::config_change(config, ConfigCause::HeldByTiming);
            if let Some(reason) = self.decide(config, &state, &entry) {
                items.push(self.unpinned_item(
                    &entry,
                    config,
                    &state,
                    reason,
                    &span,
                    Priority::Live,
                ));
            }
        }
        info!(workload = %workload, configs = items.len(), "held reload due: rolling");
        let any = !items.is_empty();
        self.enqueue_all(items);
        any
    }

    /// Releases held reloads as they fall due.
    pub async fn run_hold_releases(self: std::sync::Arc<Self>) {
        loop {
            tokio::time::sleep(RELEASE_TICK).await;
            if !self.timing.held.is_empty() {
                self.release_due_holds();
            }
        }
    }

    fn halt_store(&self) -> Option<&crate::rollout::halts::HaltStore> {
        self.waves.as_ref().and_then(|r| r.halts())
    }
}

/// The wall-clock time of `observed` (a monotonic instant), as seen `now`.
fn wall_time_of(observed: Instant, now: Timestamp) -> Timestamp {
    jiff::SignedDuration::try_from(observed.elapsed())
        .ok()
        .and_then(|ago| now.checked_sub(ago).ok())
        .unwrap_or(now)
}
