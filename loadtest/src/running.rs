//! The running share (`--running-share`): Deployments with one real replica on real nodes (a
//! kind cluster's workers; elsewhere the workloads have none), and when each reload of them has
//! finished rolling: the Deployment reports the new template rolled out (observedGeneration at
//! least the reload's generation; updated, ready, available and total replicas all 1) and its
//! only pod left is Ready and not terminating, so the old pod is gone, not only being stopped.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::watcher;
use kube::{Api, Client};
use serde_json::{Value, json};
use tokio::task::JoinHandle;

use crate::ledger::{Reload, Verdict};
use crate::objects::{Population, RUNNING_LABEL, RefStyle, WorkloadKind};
use crate::report;

/// Above this a config cannot be a running pod's environment: one env string longer than
/// Linux's MAX_ARG_STRLEN (32 pages) makes the container's exec fail (E2BIG), so the pod never
/// starts. The `large` scenario's 1 MiB Secrets stay behind `replicas: 0`.
const MAX_ENV_BYTES: usize = 128 << 10;

/// Marks `share` of the population's Deployments (spread evenly over those whose pods can run:
/// configs a pod can take as its environment, and no init container, which is the pause image
/// too and would never exit) to run one replica of `image`. Returns how many were marked.
pub fn mark(pop: &mut Population, share: f64, image: &str) -> usize {
    let mut marked = 0;
    let configs = &pop.configs;
    let deployments = pop.workloads.iter_mut().filter(|w| {
        w.kind == WorkloadKind::Deployment
            && w.refs != RefStyle::InitVolume
            && w.configs
                .iter()
                .all(|c| configs.get(c).is_none_or(|p| p.len() <= MAX_ENV_BYTES))
    });
    for (i, w) in deployments.enumerate() {
        // Deployment i runs when the running count (share * i, rounded up) grows at i.
        if ((i + 1) as f64 * share).floor() > (i as f64 * share).floor() {
            w.running_image = Some(image.to_string());
            marked += 1;
        }
    }
    marked
}

#[derive(Debug, Default, Clone, Copy)]
struct PodState {
    ready: bool,
    terminating: bool,
}

/// One running Deployment as the two watches saw it.
#[derive(Debug, Default)]
struct Workload {
    generation: i64,
    observed_generation: i64,
    /// spec.replicas and the status's replicas, updated, ready and available replicas.
    want: i32,
    total: i32,
    updated: i32,
    ready: i32,
    available: i32,
    pods: BTreeMap<String, PodState>,
    /// (observedGeneration, run-clock time) each time the rollout was first seen complete at
    /// a newer generation.
    completions: Vec<(i64, f64)>,
}

impl Workload {
    fn complete(&self) -> bool {
        let want = self.want;
        self.observed_generation >= 1
            && self.observed_generation >= self.generation
            && want > 0
            && [self.total, self.updated, self.ready, self.available] == [want; 4]
            && self.pods.len() == want as usize
            && self.pods.values().all(|p| p.ready && !p.terminating)
    }

    fn check(&mut self, t: f64) {
        let newer = self
            .completions
            .last()
            .is_none_or(|&(g, _)| g < self.observed_generation);
        if newer && self.complete() {
            self.completions.push((self.observed_generation, t));
        }
    }

    /// When the rollout of `generation` (or a later one) was first complete.
    fn completed_at(&self, generation: i64) -> Option<f64> {
        self.completions
            .iter()
            .find(|&&(g, _)| g >= generation)
            .map(|&(_, t)| t)
    }
}

/// The running Deployments (by `ns/name`) and what the watches saw of them.
#[derive(Debug, Default)]
pub struct Rollouts {
    workloads: BTreeMap<String, Workload>,
    /// A pod relist is in progress: the pod sets are incomplete, nothing is judged.
    relisting: bool,
    relist: BTreeMap<String, BTreeMap<String, PodState>>,
    /// Node -> the running pods scheduled there (every pod seen with a node, once).
    pods_by_node: BTreeMap<String, std::collections::BTreeSet<String>>,
    pub watch_errors: u64,
}

impl Rollouts {
    pub fn new(keys: impl IntoIterator<Item = String>) -> Self {
        Self {
            workloads: keys.into_iter().map(|k| (k, Workload::default())).collect(),
            ..Default::default()
        }
    }

    pub fn len(&self) -> usize {
        self.workloads.len()
    }

    fn deployment(&mut self, d: &Deployment, t: f64) {
        let Some(w) = key_of(&d.metadata).and_then(|k| self.workloads.get_mut(&k)) else {
            return;
        };
        let status = d.status.clone().unwrap_or_default();
        w.generation = d.metadata.generation.unwrap_or(0);
        w.observed_generation = status.observed_generation.unwrap_or(0);
        w.want = d.spec.replicas.unwrap_or(1);
        w.total = status.replicas.unwrap_or(0);
        w.updated = status.updated_replicas.unwrap_or(0);
        w.ready = status.ready_replicas.unwrap_or(0);
        w.available = status.available_replicas.unwrap_or(0);
        if !self.relisting {
            w.check(t);
        }
    }

    fn pod(&mut self, p: &Pod, t: f64, deleted: bool) {
        let Some((key, name)) = pod_key(p) else {
            return;
        };
        if !self.workloads.contains_key(&key) {
            return;
        }
        if let Some(node) = p.spec.as_ref().and_then(|s| s.node_name.clone()) {
            self.pods_by_node
                .entry(node)
                .or_default()
                .insert(name.clone());
        }
        let state = PodState {
            ready: pod_ready(p),
            terminating: p.metadata.deletion_timestamp.is_some(),
        };
        if self.relisting {
            self.relist.entry(key).or_default().insert(name, state);
            return;
        }
        let w = self.workloads.get_mut(&key).expect("checked above");
        match deleted {
            true => w.pods.remove(&name),
            false => w.pods.insert(name, state),
        };
        w.check(t);
    }

    fn relist_started(&mut self) {
        self.relisting = true;
        self.relist.clear();
    }

    fn relist_done(&mut self, t: f64) {
        self.relisting = false;
        let mut listed = std::mem::take(&mut self.relist);
        for (key, w) in &mut self.workloads {
            w.pods = listed.remove(key).unwrap_or_default();
            w.check(t);
        }
    }

    /// Workloads not yet complete at their current generation (at least `min_generation`).
    pub fn unfinished(&self, min_generation: i64) -> Vec<String> {
        self.workloads
            .iter()
            .filter(|(_, w)| w.completed_at(w.generation.max(min_generation)).is_none())
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// The reloads of running workloads: their time to completed rollouts, or a failure in
    /// `verdict` for each that never completed. The report's `running` section.
    pub fn evaluate(&self, reloads: &[Reload], verdict: &mut Verdict) -> Value {
        let mut latencies = Vec::new();
        let mut not_completed = Vec::new();
        for r in reloads {
            let Some(w) = self.workloads.get(&r.workload) else {
                continue;
            };
            let ack = r.t_seen - r.latency_s;
            match w.completed_at(r.generation) {
                Some(t) => latencies.push(t - ack),
                None => not_completed.push(format!(
                    "{}: the rollout of change #{} (generation {}) never completed (new pod Ready, old pod gone)",
                    r.workload, r.change, r.generation
                )),
            }
        }
        if !not_completed.is_empty() {
            verdict.passed = false;
            verdict
                .examples
                .extend(not_completed.iter().take(5).cloned());
        }
        json!({
            "deployments": self.workloads.len(),
            "reloads": latencies.len() + not_completed.len(),
            "completed": latencies.len(),
            "not_completed": not_completed.len(),
            "rolled_ready_ms": report::summarize(&latencies),
            "method": "from the config write's acknowledgement to the first moment the Deployment's status had observedGeneration >= the reload's generation and replicas = updated = ready = available = 1, and the pod watch saw exactly one pod of it, Ready and not terminating (the old one deleted)",
            "pods_by_node": self.pods_by_node.iter().map(|(n, pods)| (n.clone(), pods.len())).collect::<BTreeMap<_, _>>(),
            "watch_errors": self.watch_errors,
        })
    }
}

fn key_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> Option<String> {
    Some(format!(
        "{}/{}",
        meta.namespace.as_deref()?,
        meta.name.as_deref()?
    ))
}

/// (`ns/<app label>`, pod name): the pod template labels a workload's pods `app=<name>`.
fn pod_key(p: &Pod) -> Option<(String, String)> {
    let app = p.metadata.labels.as_ref()?.get("app")?;
    Some((
        format!("{}/{app}", p.metadata.namespace.as_deref()?),
        p.metadata.name.clone()?,
    ))
}

fn pod_ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

pub type Shared = Arc<Mutex<Rollouts>>;

/// Watches the run's running Deployments and their pods (none when `rollouts` is empty).
pub fn spawn(
    client: &Client,
    run_id: &str,
    epoch: Instant,
    rollouts: &Shared,
) -> Vec<JoinHandle<()>> {
    if rollouts.lock().unwrap().len() == 0 {
        return Vec::new();
    }
    let cfg = watcher::Config::default().labels(&format!("{RUNNING_LABEL}={run_id}"));
    let deployments: Api<Deployment> = Api::all(client.clone());
    let pods: Api<Pod> = Api::all(client.clone());
    let (d_out, p_out) = (rollouts.clone(), rollouts.clone());
    let d_cfg = cfg.clone();
    let d_task = tokio::spawn(async move {
        let mut stream = watcher::watcher(deployments, d_cfg).boxed();
        while let Some(ev) = stream.next().await {
            let t = epoch.elapsed().as_secs_f64();
            match ev {
                Ok(watcher::Event::Apply(d) | watcher::Event::InitApply(d)) => {
                    d_out.lock().unwrap().deployment(&d, t);
                }
                Ok(_) => {}
                Err(e) => {
                    d_out.lock().unwrap().watch_errors += 1;
                    crate::progress::log(&format!("running-share watch error (retrying): {e}"));
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        }
    });
    let p_task = tokio::spawn(async move {
        let mut stream = watcher::watcher(pods, cfg).boxed();
        while let Some(ev) = stream.next().await {
            let t = epoch.elapsed().as_secs_f64();
            let ev = match ev {
                Ok(ev) => ev,
                Err(e) => {
                    p_out.lock().unwrap().watch_errors += 1;
                    crate::progress::log(&format!("running-share pod watch error (retrying): {e}"));
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
            };
            let mut r = p_out.lock().unwrap();
            match ev {
                watcher::Event::Init => r.relist_started(),
                watcher::Event::InitApply(p) | watcher::Event::Apply(p) => r.pod(&p, t, false),
                watcher::Event::Delete(p) => r.pod(&p, t, true),
                watcher::Event::InitDone => r.relist_done(t),
            }
        }
    });
    vec![d_task, p_task]
}

/// Waits until every running Deployment's rollout is complete at its current generation (and
/// at least `min_generation`); false (and says which) after `timeout`.
pub async fn wait_complete(
    rollouts: &Shared,
    min_generation: i64,
    timeout: Duration,
    what: &str,
) -> bool {
    let t = Instant::now();
    let mut last_log = Instant::now();
    loop {
        let (unfinished, n) = {
            let r = rollouts.lock().unwrap();
            (r.unfinished(min_generation), r.len())
        };
        if unfinished.is_empty() {
            crate::progress::log(&format!(
                "{what}: all {n} running Deployments rolled out, pods Ready ({:.1}s waited)",
                t.elapsed().as_secs_f64()
            ));
            return true;
        }
        if t.elapsed() > timeout {
            crate::progress::log(&format!(
                "{what}: {}/{n} running Deployments not rolled out after {:.0}s (e.g. {})",
                unfinished.len(),
                timeout.as_secs_f64(),
                unfinished
                    .iter()
                    .take(3)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
            return false;
        }
        if last_log.elapsed() > Duration::from_secs(10) {
            crate::progress::log(&format!(
                "  {what}: {}/{n} running Deployments still rolling",
                unfinished.len()
            ));
            last_log = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::objects::{self, WorkloadSpec};

    fn deployment(generation: i64, observed: i64, counts: [i32; 4]) -> Deployment {
        serde_json::from_value(json!({
            "metadata": {"namespace": "ns", "name": "w", "generation": generation},
            "spec": {"replicas": 1, "selector": {}, "template": {}},
            "status": {"observedGeneration": observed, "replicas": counts[0],
                "updatedReplicas": counts[1], "readyReplicas": counts[2],
                "availableReplicas": counts[3]}
        }))
        .unwrap()
    }

    fn pod(name: &str, ready: bool, terminating: bool) -> Pod {
        let mut p = json!({
            "metadata": {"namespace": "ns", "name": name, "labels": {"app": "w"}},
            "spec": {"containers": [], "nodeName": "worker"},
            "status": {"conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]}
        });
        if terminating {
            p["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        }
        serde_json::from_value(p).unwrap()
    }

    fn reload(generation: i64, ack: f64, seen: f64) -> Reload {
        Reload {
            change: 0,
            workload: "ns/w".into(),
            latency_s: seen - ack,
            tag: "t".into(),
            t_seen: seen,
            generation,
        }
    }

    #[test]
    fn the_share_is_spread_evenly_over_the_deployments_only() {
        let mut pop = Population::new("r");
        pop.standard(2, 200);
        pop.workloads[1].kind = WorkloadKind::StatefulSet;
        assert_eq!(mark(&mut pop, 0.1, "img"), 19, "10 % of 199 Deployments");
        let running: Vec<usize> = (0..pop.workloads.len())
            .filter(|&j| pop.workloads[j].running_image.is_some())
            .collect();
        assert!(
            running
                .iter()
                .all(|&j| pop.workloads[j].kind == WorkloadKind::Deployment)
        );
        assert!(running.windows(2).all(|w| w[1] - w[0] >= 9), "{running:?}");
        // A Deployment whose environment would take a 1 MiB Secret never runs.
        let mut large = Population::new("r");
        large.standard(1, 2);
        let big = large.workloads[0].configs[1].clone();
        large.configs.insert(big, vec![b'x'; 1 << 20]);
        assert_eq!(mark(&mut large, 1.0, "img"), 1);
        assert!(large.workloads[0].running_image.is_none());
        // Nor one whose init container (pause) never exits.
        let mut init = Population::new("r");
        init.standard(1, 2);
        init.workloads[1].refs = RefStyle::InitVolume;
        assert_eq!(mark(&mut init, 1.0, "img"), 1);
        assert!(init.workloads[1].running_image.is_none());
        let mut all = Population::new("r");
        all.standard(1, 7);
        assert_eq!(mark(&mut all, 1.0, "img"), 7);
        let mut none = Population::new("r");
        none.standard(1, 7);
        assert_eq!(mark(&mut none, 0.0, "img"), 0);
    }

    #[test]
    fn a_running_deployment_has_one_replica_of_the_image_on_a_real_node() {
        let mut w = WorkloadSpec {
            namespace: "ns".into(),
            name: "w".into(),
            ..Default::default()
        };
        let idle = objects::workload_json("run", &w);
        assert_eq!(idle["spec"]["replicas"], 0);
        assert!(idle["spec"]["template"]["spec"]["affinity"].is_null());
        w.running_image = Some("registry.k8s.io/pause:3.10.2".into());
        let o = objects::workload_json("run", &w);
        assert_eq!(o["spec"]["replicas"], 1);
        assert_eq!(o["metadata"]["labels"][RUNNING_LABEL], "run");
        let template = &o["spec"]["template"];
        assert_eq!(template["metadata"]["labels"][RUNNING_LABEL], "run");
        assert_eq!(template["metadata"]["labels"]["app"], "w");
        let c = &template["spec"]["containers"][0];
        assert_eq!(c["image"], "registry.k8s.io/pause:3.10.2");
        assert_eq!(c["imagePullPolicy"], "IfNotPresent");
        let terms = &template["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            ["nodeSelectorTerms"];
        assert_eq!(terms[0]["matchExpressions"][0]["values"], json!(["kwok"]));
    }

    #[test]
    fn a_rollout_completes_when_the_new_pod_is_ready_and_the_old_one_is_gone() {
        let mut r = Rollouts::new(["ns/w".to_string()]);
        r.relist_started();
        r.relist_done(0.0);
        r.deployment(&deployment(1, 1, [1; 4]), 0.1);
        r.pod(&pod("old", true, false), 0.2, false);
        assert_eq!(r.unfinished(1), Vec::<String>::new());
        // The reload: generation 2, the new pod starting beside the old one.
        r.deployment(&deployment(2, 1, [1; 4]), 1.0);
        assert_eq!(r.unfinished(1), vec!["ns/w".to_string()]);
        r.deployment(&deployment(2, 2, [1, 0, 1, 1]), 1.1);
        r.pod(&pod("new", false, false), 1.2, false);
        r.pod(&pod("new", true, false), 2.0, false);
        r.deployment(&deployment(2, 2, [1; 4]), 2.1);
        // The old pod is terminating, then gone.
        r.pod(&pod("old", true, true), 2.2, false);
        assert_eq!(r.unfinished(1), vec!["ns/w".to_string()]);
        r.pod(&pod("old", true, true), 3.0, true);
        assert!(r.unfinished(1).is_empty());
        let mut v = Verdict {
            passed: true,
            ..Default::default()
        };
        let out = r.evaluate(&[reload(2, 0.5, 0.9)], &mut v);
        assert!(v.passed);
        assert_eq!(out["completed"], 1);
        assert_eq!(out["rolled_ready_ms"]["max_ms"], 2500.0);
        assert_eq!(out["pods_by_node"], json!({"worker": 2}));
        // A later reload that never rolled fails the run.
        r.deployment(&deployment(3, 3, [1, 0, 1, 1]), 4.0);
        let out = r.evaluate(&[reload(2, 0.5, 0.9), reload(3, 3.5, 3.9)], &mut v);
        assert_eq!(out["not_completed"], 1);
        assert!(
            !v.passed && v.examples[0].contains("never completed"),
            "{v:?}"
        );
    }

    #[test]
    fn nothing_is_judged_during_a_pod_relist() {
        let mut r = Rollouts::new(["ns/w".to_string()]);
        r.deployment(&deployment(2, 2, [1; 4]), 0.0);
        r.pod(&pod("b", true, true), 0.1, false);
        r.pod(&pod("a", true, false), 0.1, false);
        assert!(
            r.workloads["ns/w"].completions.is_empty(),
            "b is terminating"
        );
        // The watch starts over; b's deletion happened while it was away.
        r.relist_started();
        r.pod(&pod("a", true, false), 0.5, false);
        assert!(
            r.workloads["ns/w"].completions.is_empty(),
            "b is still listed"
        );
        r.relist_done(0.6);
        assert_eq!(r.workloads["ns/w"].completions, vec![(2, 0.6)]);
    }
}
