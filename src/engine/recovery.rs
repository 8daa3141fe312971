//! Changes nobody acted on: those a departed owner missed (found by a takeover's catch-up) and
//! workloads whose recorded hash is not their config's current one after a start or a gained
//! namespace (the recorded-hash reconcile, behind live changes).

use std::time::Instant;

use tracing::info;

use super::{ConfigEvent, ConfigObserver, Engine};
use crate::index::{ConfigState, WorkloadEntry};
use crate::model::ConfigKey;
use crate::rollout::wave_runner::WaveItem;
use crate::rollout::{Priority, QueueObserver, WorkloadWriter};
use crate::spans::ConfigCause;

impl<W: WorkloadWriter, O: QueueObserver, C: ConfigObserver> Engine<W, O, C> {
    /// A change the previous owner of the config's namespace had not acted on when it stopped
    /// (found by a takeover's catch-up): the indexed state differs from `before`, the state at
    /// the version it had acted up to (`None`: the config did not exist then, which is a
    /// creation unless the history was compacted and the caller cannot tell). Fans the indexed
    /// state out as a change would, behind live changes (it is late already); workloads already
    /// carrying its hash write nothing.
    pub fn missed_change(&self, key: &ConfigKey, before: Option<&ConfigState>) -> usize {
        let Some(state) = self.index.config(key) else {
            return 0;
        };
        if !self.ownership.owns(&key.namespace)
            || before.is_some_and(|b| b.digest == state.digest)
            || self.halted_now(key, &state)
        {
            return 0;
        }
        let event = ConfigEvent {
            key,
            state: &state,
            previous: before,
            deleted: false,
            observed_at: Instant::now(),
            // A roll after a compaction holds it too: its namespace may move before it is
            // written, and the next owner must then fall back to the same configs.
            pins_acted: true,
            skip_current: true,
            priority: Priority::Background,
        };
        match self.admitted(&event) {
            true => self.fan_out(event),
            false => 0,
        }
    }

    /// After a sync (start, a namespace entering the selection): queue workloads whose recorded
    /// hash differs from their config's current hash. Workloads with no recorded hash are left
    /// alone, so a start never rolls the cluster.
    pub fn reconcile_recorded(
        &self,
        namespaces: Option<&std::collections::HashSet<String>>,
    ) -> usize {
        // Per config, so that a config's stale workloads go through its wave policy as a
        // change would: a halt is found again after a restart or a handover (the canaries
        // still fail) instead of every held workload being rolled.
        let mut by_config: std::collections::HashMap<ConfigKey, (ConfigState, Vec<WaveItem>)> =
            Default::default();
        for entry in self.index.workloads_in(None) {
            if namespaces.is_some_and(|set| !set.contains(&*entry.key.namespace))
                || !self.ownership.owns(&entry.key.namespace)
            {
                continue;
            }
            for u in &entry.uses {
                if let Some((key, state, item)) = self.stale_use(&entry, u) {
                    let group = by_config.entry(key).or_insert_with(|| (state, Vec::new()));
                    group.1.push(item);
                }
            }
        }
        let mut queued = 0;
        for (key, (state, items)) in by_config {
            queued += items.len();
            self.dispatch(&key, &state, false, items);
        }
        if queued > 0 {
            info!(
                queued,
                "reloading workloads whose configs changed while they were not watched"
            );
        }
        queued
    }

    /// The reload of `entry` for the config `u` names, when the hash it records is not the
    /// config's current one (`None`: current, never recorded, or not reloaded by policy).
    fn stale_use(
        &self,
        entry: &WorkloadEntry,
        u: &crate::index::IndexedUse,
    ) -> Option<(ConfigKey, ConfigState, WaveItem)> {
        let recorded = u.recorded.as_deref()?;
        let key = ConfigKey {
            kind: u.kind,
            namespace: entry.key.namespace.clone(),
            name: u.name.clone(),
        };
        let state = self.index.config(&key)?;
        // Either form counts as current, whatever the mode now: switching it rolls nothing
        // while per-key digests are kept (docs/precise-reloads.md). A halt holds the rest.
        if state.is_current(recorded, &u.reads) || self.halted_now(&key, &state) {
            return None;
        }
        let reason = self.decide(&key, &state, entry)?;
        let span = crate::spans::config_change(&key, ConfigCause::MissedWhileDown);
        // Behind live changes: a start-up must not delay what users change now.
        let item = self.unpinned_item(entry, &key, &state, reason, &span, Priority::Background);
        Some((key, state, item))
    }
}
