//! What happens after each write: metrics, and alerts for successful reloads and for failing ones
//! (sent on their own tasks, so the write queue never waits for them).

use std::sync::Arc;
use std::time::Duration;

use crate::alert::Alerter;
use crate::model::WorkloadKey;
use crate::rollout::{QueueObserver, QueueStats, QueuedChange, WriteError, WriteOutcome};

use super::metrics::Metrics;

pub struct Outcomes {
    pub metrics: Arc<Metrics>,
    pub alerter: Option<Alerter>,
}

impl QueueObserver for Arc<Outcomes> {
    fn coalesced(&self, key: &WorkloadKey) {
        self.metrics.coalesced(key);
    }

    fn limiter_wait(&self, waited: Duration) {
        self.metrics.limiter_wait(waited);
    }

    fn finished(
        &self,
        key: &WorkloadKey,
        changes: &[QueuedChange],
        result: &Result<WriteOutcome, WriteError>,
        attempts: u32,
    ) {
        self.metrics.finished(key, changes, result, attempts);
        super::tracing::record_finished(changes, result);
        match result {
            Ok(WriteOutcome::Reloaded) => {
                if let Some(alerter) = &self.alerter {
                    for change in changes {
                        alerter.reloaded(&change.change.config, key);
                    }
                }
            }
            // The writer publishes the ReloadFail Event and the queue logs the failure.
            Err(error) => {
                if let Some(alerter) = &self.alerter {
                    alerter.failed(key, &error.to_string());
                }
            }
            Ok(WriteOutcome::Dropped(reason)) => {
                tracing::info!(workload = %key, reason, "reload dropped");
            }
            // Shadow mode: no alert, since nothing was reloaded.
            Ok(WriteOutcome::UpToDate | WriteOutcome::Predicted) => {}
        }
    }

    fn retry(&self, key: &WorkloadKey, error: &WriteError) {
        self.metrics.retry(key, error);
    }

    fn failing(
        &self,
        key: &WorkloadKey,
        changes: &[QueuedChange],
        error: &WriteError,
        failures: u32,
    ) {
        self.metrics.failing(key, changes, error, failures);
        if let Some(alerter) = &self.alerter {
            alerter.failed(
                key,
                &format!("{error} ({failures} attempts, still retrying)"),
            );
        }
    }

    fn depth(&self, depth: usize) {
        self.metrics.depth(depth);
    }

    fn queue_wait(&self, waited: Duration) {
        self.metrics.queue_wait(waited);
    }

    fn queue_stats(&self, stats: &QueueStats) {
        self.metrics.queue_stats(stats);
    }
}
