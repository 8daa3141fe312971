//! Rollouts as kube-controller-manager records them, watched for every run (the controller
//! under test starts once the cluster is at rest) and checked by the `pause` scenario: for each
//! Deployment with a pause period, when
//! `spec.paused` went true and back to false, whether `paused-at` is gone at the end, and the
//! Deployment's revision (kube-controller-manager bumps `deployment.kubernetes.io/revision` once
//! per rollout and not while the Deployment is paused, so several changes joined into one
//! rollout show as one bump).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use kube::runtime::watcher;
use kube::{Api, Client};
use serde::Serialize;
use serde_json::{Value, json};
use tokio::task::JoinHandle;

use crate::objects::{PAUSED_AT_ANNOTATION, RUN_LABEL};

const REVISION_ANNOTATION: &str = "deployment.kubernetes.io/revision";

/// What the watch saw of one Deployment.
#[derive(Debug, Default, Clone, Serialize)]
pub struct Trace {
    /// Times (run clock) `spec.paused` turned true, and back to false.
    pub paused: Vec<f64>,
    pub resumed: Vec<f64>,
    pub paused_now: bool,
    pub paused_at_annotation: bool,
    /// The Deployment's revision now, and when it was first paused (0: no ReplicaSet yet).
    pub revision: u64,
    pub revision_when_paused: Option<u64>,
}

impl Trace {
    /// Rollouts since the first pause.
    pub fn rollouts(&self) -> u64 {
        self.revision_when_paused
            .map_or(0, |r| self.revision.saturating_sub(r))
    }
}

pub type Traces = Arc<Mutex<BTreeMap<String, Trace>>>;

/// Watches the run's Deployments and records their pause transitions.
pub fn spawn(client: &Client, run_id: &str, epoch: Instant) -> (Traces, JoinHandle<()>) {
    let traces: Traces = Arc::default();
    let api: Api<Deployment> = Api::all(client.clone());
    let cfg = watcher::Config::default().labels(&format!("{RUN_LABEL}={run_id}"));
    let out = traces.clone();
    let task = tokio::spawn(async move {
        let mut stream = watcher::watcher(api, cfg).boxed();
        while let Some(ev) = stream.next().await {
            let t = epoch.elapsed().as_secs_f64();
            match ev {
                Ok(watcher::Event::Apply(d) | watcher::Event::InitApply(d)) => {
                    record(&mut out.lock().unwrap(), &d, t);
                }
                Ok(_) => {}
                Err(e) => {
                    crate::progress::log(&format!("pause watch error (retrying): {e}"));
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        }
    });
    (traces, task)
}

fn record(traces: &mut BTreeMap<String, Trace>, d: &Deployment, t: f64) {
    let (Some(ns), Some(name)) = (&d.metadata.namespace, &d.metadata.name) else {
        return;
    };
    let tr = traces.entry(format!("{ns}/{name}")).or_default();
    let annotations = d.metadata.annotations.as_ref();
    tr.revision = annotations
        .and_then(|a| a.get(REVISION_ANNOTATION))
        .and_then(|r| r.parse().ok())
        .unwrap_or(0);
    let paused = d.spec.paused.unwrap_or(false);
    if paused && !tr.paused_now {
        tr.paused.push(t);
        tr.revision_when_paused.get_or_insert(tr.revision);
    } else if !paused && tr.paused_now {
        tr.resumed.push(t);
    }
    tr.paused_now = paused;
    tr.paused_at_annotation = annotations.is_some_and(|a| a.contains_key(PAUSED_AT_ANNOTATION));
}

/// How many of `keys` kube-controller-manager has rolled out (revision 1 or more). Before
/// that, its first ReplicaSet could be mistaken for a rollout of a pause period, and its
/// catching up loads the API server while the controller under test starts.
pub fn rolled_out(traces: &Traces, keys: &[String]) -> usize {
    let t = traces.lock().unwrap();
    keys.iter()
        .filter(|k| t.get(*k).is_some_and(|tr| tr.revision >= 1))
        .count()
}

/// Whether every changed Deployment has been resumed and rolled out since.
pub fn all_settled(traces: &Traces, changed: &[String]) -> bool {
    let t = traces.lock().unwrap();
    changed.iter().all(|k| {
        t.get(k)
            .is_some_and(|tr| !tr.paused_now && !tr.resumed.is_empty() && tr.rollouts() >= 1)
    })
}

/// The verdict on the changed Deployments (each changed `changes_each` times within one period
/// of `period_s`) and the untouched ones: problems found, and figures for the report.
pub fn evaluate(
    traces: &Traces,
    changed: &[String],
    period_s: f64,
    changes_each: usize,
) -> (Vec<String>, Value) {
    let t = traces.lock().unwrap();
    let mut problems = Vec::new();
    let mut held_s = Vec::new();
    for key in changed {
        let Some(tr) = t.get(key) else {
            problems.push(format!("{key}: never seen by the pause watch"));
            continue;
        };
        if tr.paused.len() != 1 {
            problems.push(format!(
                "{key}: paused {} times for {changes_each} changes within one period (expected once)",
                tr.paused.len()
            ));
        }
        if tr.paused_now || tr.resumed.is_empty() {
            problems.push(format!("{key}: still paused at the end"));
        }
        if tr.paused_at_annotation {
            problems.push(format!("{key}: paused-at annotation left behind"));
        }
        if tr.rollouts() != 1 {
            problems.push(format!(
                "{key}: {} rollouts (revision {:?} -> {}) for {changes_each} changes within one pause period (expected 1; is kube-controller-manager running?)",
                tr.rollouts(),
                tr.revision_when_paused,
                tr.revision
            ));
        }
        if let (Some(p), Some(r)) = (tr.paused.first(), tr.resumed.first()) {
            let held = r - p;
            // Resuming early breaks the contract; resuming late only costs time (not asserted:
            // the small scale asserts correctness, never timings).
            // `paused-at` has a resolution of one second, hence the 1.5 s.
            if held < period_s - 1.5 {
                problems.push(format!(
                    "{key}: resumed after {held:.1}s, before its {period_s}s pause period ended"
                ));
            }
            held_s.push(held);
        }
    }
    let changed_set: std::collections::HashSet<&String> = changed.iter().collect();
    let paused_unchanged = t
        .iter()
        .filter(|(k, tr)| !changed_set.contains(k) && !tr.paused.is_empty())
        .count();
    if paused_unchanged > 0 {
        problems.push(format!(
            "{paused_unchanged} Deployments whose configs did not change were paused"
        ));
    }
    held_s.sort_by(f64::total_cmp);
    let pick = |q: f64| {
        held_s
            .get(((held_s.len() as f64 - 1.0) * q).round() as usize)
            .copied()
            .map(crate::report::round)
    };
    let figures = json!({
        "pause_period_s": period_s,
        "changes_per_deployment": changes_each,
        "deployments_changed": changed.len(),
        "paused_for_s": {"min": pick(0.0), "p50": pick(0.5), "max": pick(1.0)},
        "deployments_paused_without_a_change": paused_unchanged,
        "problems": problems.len(),
    });
    (problems, figures)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trace(paused: &[f64], resumed: &[f64], from: u64, to: u64) -> Trace {
        Trace {
            paused: paused.to_vec(),
            resumed: resumed.to_vec(),
            paused_now: paused.len() > resumed.len(),
            paused_at_annotation: false,
            revision: to,
            revision_when_paused: (!paused.is_empty()).then_some(from),
        }
    }

    #[test]
    fn one_pause_and_one_rollout_per_period_passes_anything_else_fails() {
        let traces: Traces = Arc::default();
        {
            let mut t = traces.lock().unwrap();
            t.insert("ns/good".into(), trace(&[10.0], &[18.1], 1, 2));
            // Rolled on every change, never paused: what a controller ignoring the period does.
            t.insert("ns/ignored".into(), trace(&[], &[], 1, 4));
            t.insert("ns/early".into(), trace(&[10.0], &[12.0], 1, 2));
            t.insert("ns/bystander".into(), trace(&[11.0], &[19.0], 1, 2));
        }
        let changed = |k: &str| vec![k.to_string()];
        let (p, _) = evaluate(&traces, &changed("ns/good"), 8.0, 3);
        // The others were paused without a change of their own.
        assert_eq!(
            p,
            vec!["2 Deployments whose configs did not change were paused".to_string()]
        );
        let all = ["ns/good", "ns/ignored", "ns/early", "ns/bystander"].map(String::from);
        let (p, figures) = evaluate(&traces, &all, 8.0, 3);
        assert!(
            p.iter().any(|e| e.contains("ns/ignored: paused 0 times")),
            "{p:?}"
        );
        assert!(
            p.iter().any(|e| e.contains("ns/ignored: 0 rollouts")),
            "{p:?}"
        );
        assert!(
            p.iter().any(|e| e.contains("ns/early: resumed after 2.0s")),
            "{p:?}"
        );
        assert!(!p.iter().any(|e| e.starts_with("ns/good")), "{p:?}");
        assert_eq!(figures["paused_for_s"]["max"], 8.1);
    }
}
