//! Kept halts of changes rolled in waves: a halted change stays held across restarts and
//! hand-overs (restored before anything reconciles its workloads), and a new value of the
//! config's `kube-reloader.io/resume` releases it.

use tracing::info;

use super::{ConfigObserver, Engine, records_current};
use crate::index::ConfigState;
use crate::model::ConfigKey;
use crate::rollout::wave_runner::WaveItem;
use crate::rollout::{Priority, QueueObserver, WorkloadWriter};
use crate::spans::ConfigCause;
use crate::waves::HaltRecord;

impl<W: WorkloadWriter, O: QueueObserver, C: ConfigObserver> Engine<W, O, C> {
    /// A new value of the config's `kube-reloader.io/resume` releases its halted change.
    pub(super) fn release_if_resumed(
        &self,
        key: &ConfigKey,
        previous: Option<&ConfigState>,
        state: &ConfigState,
    ) {
        let resume = |s: &ConfigState| s.waves.as_ref().and_then(|w| w.resume.clone());
        let Some(runner) = &self.waves else { return };
        let now = resume(state);
        if now.is_some() && now != previous.and_then(resume) && runner.release(key) {
            info!(config = %key, "resume annotation changed: releasing the halted change");
        }
    }

    /// `key` is halted on its current value (its stale workloads are held, not rolled).
    pub(super) fn halted_now(&self, key: &ConfigKey, state: &ConfigState) -> bool {
        self.waves
            .as_ref()
            .is_some_and(|runner| runner.holds(key, &state.digest.reloader_hash()))
    }

    /// Holds again what the kept halts of configs in `namespaces` (`None`: every owned one)
    /// held, before anything reconciles them. A halt whose config changed, was released (its
    /// `kube-reloader.io/resume` changed) or is gone no longer holds: forgotten, and a release
    /// rolls what it held once. Returns the halts held again.
    pub fn restore_halts(
        &self,
        records: &[HaltRecord],
        namespaces: Option<&std::collections::HashSet<String>>,
    ) -> usize {
        let Some(runner) = &self.waves else { return 0 };
        let mut restored = 0;
        for record in records {
            let Ok(key) = record.config() else { continue };
            if namespaces.is_some_and(|set| !set.contains(&*key.namespace))
                || !self.ownership.owns(&key.namespace)
            {
                continue;
            }
            let Some(state) = self.index.config(&key) else {
                runner.forget(&key);
                continue;
            };
            if state.digest.reloader_hash() != record.hash {
                info!(config = %key, "a kept halt ended: the config changed since");
                runner.forget(&key);
                continue;
            }
            let items = self.held_items(&key, &state);
            let resume = state.waves.as_ref().and_then(|w| w.resume.clone());
            if resume.is_some() && resume != record.resume {
                info!(config = %key, held = items.len(), "a kept halt was released meanwhile: rolling what it held");
                runner.forget(&key);
                self.enqueue_all(items);
                continue;
            }
            runner.restore(record, key, items, self.wave_sink());
            restored += 1;
        }
        restored
    }

    /// The workloads a change of `key` to `state` would roll that are not on its value yet.
    pub(super) fn held_items(&self, key: &ConfigKey, state: &ConfigState) -> Vec<WaveItem> {
        let span = crate::spans::config_change(key, ConfigCause::HeldByHalt);
        let mut items = Vec::new();
        for entry in self.index.candidates(key) {
            if records_current(&entry, key, state) {
                continue;
            }
            let Some(reason) = self.decide(key, state, &entry) else {
                continue;
            };
            // The kept halt finds these again.
            items.push(self.unpinned_item(&entry, key, state, reason, &span, Priority::Live));
        }
        items
    }
}
