//! What happens after each write: metrics, the `ReloadFail` Event for writes that gave up, and
//! alerts for successful reloads. Events and alerts are sent on their own tasks, so the write
//! queue never waits for them.

use std::sync::Arc;
use std::time::Duration;

use crate::alert::Alerter;
use crate::model::WorkloadKey;
use crate::rollout::{QueueObserver, QueuedChange, WriteError, WriteOutcome};

use super::events::{EventSink, failed_message, workload_reference};
use super::metrics::Metrics;

pub struct Outcomes {
    pub metrics: Arc<Metrics>,
    pub events: EventSink,
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
        match result {
            Ok(WriteOutcome::Reloaded) => {
                if let Some(alerter) = &self.alerter {
                    for change in changes {
                        alerter.reloaded(&change.change.config, key);
                    }
                }
            }
            Err(error) => {
                tracing::error!(workload = %key, %error, attempts, "reload failed");
                let events = self.events.clone();
                let reference = workload_reference(key, None);
                let note = failed_message(key, &error.to_string());
                tokio::spawn(async move { events.reload_failed(&reference, note).await });
            }
            Ok(WriteOutcome::Dropped(reason)) => {
                tracing::info!(workload = %key, reason, "reload dropped");
            }
            Ok(WriteOutcome::UpToDate) => {}
        }
    }

    fn retry(&self, key: &WorkloadKey, error: &WriteError) {
        self.metrics.retry(key, error);
    }

    fn depth(&self, depth: usize) {
        self.metrics.depth(depth);
    }
}
