//! Shadow mode (`--shadow`): run beside the incumbent (stakater/Reloader), decide every reload
//! as usual, write nothing, and judge each write the incumbent makes against the one
//! kube-reloader would have made.
//!
//! - The writer ([`crate::rollout::writer`]) reads the workload and edits its template in memory
//!   as for a real write, then hands the marks it would have left ([`marks`]) to [`Shadow`]
//!   instead of patching.
//! - The intake ([`crate::engine::intake::Intake`]) sees the incumbent's writes on the workload watch: a
//!   workload whose recorded reload hash changed, or a Job created for a reload ([`observe`]).
//! - The [`judge`] pairs both halves and gives the verdicts; [`report`] is what
//!   `/debug/shadow` and `kube-reloader shadow report` show.
//! - [`guard`] refuses, in the client itself, every write but the replica set's own Leases and
//!   shard assignment: nothing else reaches the API server, whatever a code path attempts.

pub mod guard;
pub mod judge;
pub mod marks;
pub mod observe;
pub mod report;

use std::collections::BTreeSet;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tracing::{debug, info, warn};

use crate::config::ShadowSettings;
use crate::model::{ConfigKey, WorkloadKey, WorkloadKind};
use judge::{Judge, Judgement, Prediction, Verdict, Written};
use marks::Mark;

/// Called once per verdict (the metric).
pub type VerdictSink = Box<dyn Fn(Verdict, WorkloadKind) + Send + Sync>;

/// How often open pairs are checked against the window.
const EXPIRY_TICK: Duration = Duration::from_secs(1);

/// The shadow's state: the judge, behind one lock (held for map operations only).
pub struct Shadow {
    judge: Mutex<Judge>,
    on_verdict: VerdictSink,
    /// Predicted writes that cannot be judged from the pod template (`spec.restartAt`).
    unjudged: std::sync::atomic::AtomicU64,
}

fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

impl Shadow {
    pub fn new(settings: ShadowSettings, on_verdict: VerdictSink) -> Self {
        Self {
            judge: Mutex::new(Judge::new(settings)),
            on_verdict,
            unjudged: Default::default(),
        }
    }

    fn judge(&self) -> std::sync::MutexGuard<'_, Judge> {
        self.judge.lock().expect("shadow judge lock")
    }

    /// kube-reloader would have left `marks` for `config` in `workload`.
    pub fn predicted(
        &self,
        workload: &WorkloadKey,
        config: &ConfigKey,
        marks: BTreeSet<Mark>,
        changed_at: Instant,
    ) {
        debug!(workload = %workload, config = %config, marks = %list(&marks),
            "shadow: reload predicted, not written");
        let prediction = Prediction { marks, changed_at };
        let pair = (workload.clone(), config.clone());
        let judged = self.judge().predict(pair, prediction, now());
        judged.into_iter().for_each(|j| self.judged(j));
    }

    /// The incumbent left `marks` for `config` in `workload`.
    pub fn written(&self, workload: &WorkloadKey, config: &ConfigKey, marks: BTreeSet<Mark>) {
        let written = Written { marks, at: now() };
        let pair = (workload.clone(), config.clone());
        let judged = self.judge().observe(pair, written, now());
        judged.into_iter().for_each(|j| self.judged(j));
    }

    /// A restart kube-reloader would have made (an Argo Rollout's `spec.restartAt`): counted,
    /// not judged.
    pub fn unjudged(&self, workload: &WorkloadKey) {
        info!(workload = %workload, "shadow: restart predicted, not written (not judged)");
        self.unjudged
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    pub fn report(&self) -> report::Report {
        let unjudged = self.unjudged.load(std::sync::atomic::Ordering::Relaxed);
        report::Report::of(&self.judge(), unjudged)
    }

    /// Closes the pairs whose window is over, every second, for the life of the process.
    pub async fn run_expiry(self: std::sync::Arc<Self>) {
        let mut tick = tokio::time::interval(EXPIRY_TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let judged = self.judge().expire(now());
            judged.into_iter().for_each(|j| self.judged(j));
        }
    }

    fn judged(&self, j: Judgement) {
        (self.on_verdict)(j.verdict, j.workload.kind);
        let verdict = j.verdict.as_str();
        match j.verdict {
            Verdict::Agree => {
                info!(verdict, workload = %j.workload, config = %j.config, delay_ms = j.delay_ms,
                    "shadow verdict")
            }
            _ => warn!(verdict, workload = %j.workload, config = %j.config,
                delay_ms = j.delay_ms, detail = %j.detail, "shadow verdict"),
        }
    }
}

fn list(marks: &BTreeSet<Mark>) -> String {
    let items: Vec<String> = marks.iter().map(Mark::to_string).collect();
    items.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ConfigKind;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};

    #[tokio::test(start_paused = true)]
    async fn a_prediction_left_alone_is_not_done_once_the_window_is_over() {
        let not_done = Arc::new(AtomicU64::new(0));
        let counter = not_done.clone();
        let sink: VerdictSink = Box::new(move |verdict, _| {
            if verdict == Verdict::NotDone {
                counter.fetch_add(1, Ordering::Relaxed);
            }
        });
        let settings = ShadowSettings {
            window: Duration::from_secs(60),
            late_after: Duration::from_secs(10),
        };
        let shadow = Arc::new(Shadow::new(settings, sink));
        tokio::spawn(shadow.clone().run_expiry());
        let workload = WorkloadKey::new(WorkloadKind::StatefulSet, "ns", "db");
        let config = ConfigKey::new(ConfigKind::Secret, "ns", "creds");
        shadow.predicted(&workload, &config, BTreeSet::new(), now());
        tokio::time::sleep(Duration::from_secs(59)).await;
        assert_eq!(not_done.load(Ordering::Relaxed), 0);
        assert_eq!(shadow.report().pending, 1);
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(not_done.load(Ordering::Relaxed), 1);
        let report = shadow.report();
        assert_eq!(report.pending, 0);
        assert_eq!(report.counts["not-done"], 1);
        assert_eq!(report.latest["not-done"][0].workload, "StatefulSet/ns/db");
    }
}
