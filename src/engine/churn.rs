//! The engine's side of the churn breaker (`--churn-limit`): whether a config change may roll
//! its workloads now, and rolling once, to the latest state, what a quiet breaker held.

use std::sync::Arc;
use std::time::Instant;

use tracing::{debug, info, warn};

use super::breaker::Admit;
use super::{BreakerNotice, ConfigEvent, ConfigObserver, Engine};
use crate::rollout::{Priority, QueueObserver, WorkloadWriter};

impl<W: WorkloadWriter, O: QueueObserver, C: ConfigObserver> Engine<W, O, C> {
    /// The churn breaker lets this content change roll the workloads (no breaker: always).
    pub(super) fn admitted(&self, event: &ConfigEvent<'_>) -> bool {
        let Some(breaker) = &self.breaker else {
            return true;
        };
        // Only configs some workload uses count: an unused one rolls nothing anyway.
        if !self.index.is_used(event.key) {
            return true;
        }
        let now = tokio::time::Instant::now();
        match breaker.admit(event.key, now, event.previous) {
            Admit::Pass => true,
            Admit::Hold => {
                debug!(config = %event.key, "churn breaker open: change held");
                false
            }
            Admit::Trip { changes } => {
                let b = breaker.settings();
                warn!(config = %event.key, changes, window = ?b.window, quiet = ?b.quiet,
                    "churn breaker opened: the config changes too often, its workloads are held \
                     until it has been stable for the quiet period");
                self.notify(BreakerNotice::Opened {
                    config: event.key.clone(),
                    changes,
                });
                false
            }
        }
    }

    pub(super) fn notify(&self, notice: BreakerNotice) {
        self.observer.breaker(&notice);
        if let Some(notices) = &self.breaker_notices {
            let _ = notices.send(notice);
        }
    }

    /// Rolls, once, the workloads of configs whose breaker has been quiet long enough, to the
    /// config's latest state. Returns how many workloads were queued.
    pub fn release_due_breakers(&self) -> usize {
        let Some(breaker) = &self.breaker else {
            return 0;
        };
        let mut queued = 0;
        for (key, held) in breaker.due(tokio::time::Instant::now()) {
            let state = self.index.config(&key);
            let affected = match &state {
                Some(state) if self.ownership.owns(&key.namespace) => {
                    let back_where_it_was = held
                        .before
                        .as_ref()
                        .is_some_and(|b| b.digest == state.digest);
                    match back_where_it_was {
                        true => 0,
                        false => self.fan_out(ConfigEvent {
                            key: &key,
                            state,
                            previous: held.before.as_ref(),
                            deleted: false,
                            observed_at: Instant::now(),
                            pins_acted: true,
                            skip_current: false,
                            priority: Priority::Live,
                        }),
                    }
                }
                _ => 0,
            };
            info!(config = %key, held = held.held_changes, affected, "churn breaker closed: the config was stable for the quiet period");
            self.notify(BreakerNotice::Released {
                config: key,
                held: held.held_changes,
                affected,
            });
            queued += affected;
        }
        queued
    }

    /// Releases quiet breakers as they fall due; returns at once without `--churn-limit`.
    pub async fn run_breaker_releases(self: Arc<Self>) {
        let Some(breaker) = self.breaker.clone() else {
            return;
        };
        loop {
            // Without an open breaker, still wake once a window to forget quiet configs.
            let wake = breaker
                .next_release()
                .unwrap_or_else(|| tokio::time::Instant::now() + breaker.settings().window);
            tokio::select! {
                _ = tokio::time::sleep_until(wake) => {}
                _ = breaker.opened() => {}
            }
            self.release_due_breakers();
        }
    }
}
