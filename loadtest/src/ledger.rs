//! What was asked for (config changes, each with the workloads that should roll and the hash they
//! should carry) and what was seen (template changes on the workload watch), and the verdict.

use std::collections::{BTreeMap, HashMap, HashSet};

use k8s_openapi::api::core::v1::PodTemplateSpec;
use serde::Serialize;

use crate::objects::ConfigRef;

const LAST_RELOADED_FROM: &str = "reloader.stakater.com/last-reloaded-from";

/// One config write made by the load generator.
#[derive(Debug, Clone, Serialize)]
pub struct Change {
    pub id: usize,
    pub config: ConfigRef,
    pub hash: String,
    /// Workload keys (`ns/name`) expected to roll to `hash`.
    pub expected: Vec<String>,
    /// Seconds since the run epoch.
    pub t_sent: f64,
    pub t_ack: Option<f64>,
    /// The resourceVersion the API server gave the config for this change. Changes of one
    /// config can be in flight at once, and the server may apply a later-registered one first:
    /// what is newer is this order, not the id's (`Change::newer_than`).
    pub applied: Option<u64>,
    pub error: Option<String>,
    pub tag: String,
}

impl Change {
    /// The config's order of its changes: by the resourceVersion the server applied them at,
    /// by registration where that is unknown.
    pub fn order(&self) -> (u64, usize) {
        (self.applied.unwrap_or(u64::MAX), self.id)
    }

    /// `self` was applied after `other` (both changes of one config).
    pub fn newer_than(&self, other: &Change) -> bool {
        self.order() > other.order()
    }
}

/// A reloader-managed field of a pod template that took a new value.
#[derive(Debug, Clone, Serialize)]
pub struct Observation {
    pub workload: String,
    /// Env var name, or `TYPE/name` from the annotations strategy's JSON.
    pub source: String,
    pub hash: String,
    pub t: f64,
    pub generation: i64,
}

#[derive(Debug, Clone, Default)]
struct FieldValue {
    raw: String,
    hash: String,
    source: String,
}

#[derive(Debug, Default)]
struct WorkloadState {
    generation: i64,
    /// A hash of the whole pod template: a new generation with the same template is a change
    /// elsewhere in the spec (`spec.paused` of a pause period, replicas), not a rollout.
    template: u64,
    fields: BTreeMap<String, FieldValue>,
}

fn template_hash(template: &PodTemplateSpec) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    serde_json::to_string(template)
        .unwrap_or_default()
        .hash(&mut h);
    h.finish()
}

/// Shared state of a run: the ledger of changes and the workload watch's findings.
#[derive(Default)]
pub struct State {
    pub changes: Vec<Change>,
    by_hash: HashMap<String, usize>,
    by_config: HashMap<ConfigRef, Vec<usize>>,
    workloads: HashMap<String, WorkloadState>,
    pub observations: Vec<Observation>,
    /// (workload, hash) -> indices into `observations`.
    seen: HashMap<(String, String), Vec<usize>>,
    /// Template changes (generation bumps) that changed no reloader field.
    pub foreign_template_changes: Vec<(String, f64)>,
    /// Reloader fields that disappeared from a template.
    pub removed_fields: Vec<(String, String, f64)>,
    /// Watches (one per workload kind) that finished their initial list.
    pub watches_synced: usize,
    /// Jobs created from CronJobs (by uid).
    jobs_seen: HashSet<String>,
    pub watch_errors: u64,
    pub watch_events: u64,
    /// Workloads created and deleted during the run (churn): key -> the configs it uses. No
    /// reload is expected of them; one to a change of a config they use is allowed.
    churned: HashMap<String, Vec<ConfigRef>>,
    /// Churned workloads whose deletion the watch saw.
    deleted: HashSet<String>,
    /// A churned workload that appeared again after the watch saw it deleted.
    pub resurrected: Vec<(String, f64)>,
}

impl State {
    /// Records a change before it is written (so a fast reload cannot be seen before it is known).
    pub fn register(
        &mut self,
        config: ConfigRef,
        hash: String,
        expected: Vec<String>,
        t_sent: f64,
        tag: &str,
    ) -> usize {
        let id = self.changes.len();
        self.by_hash.insert(hash.clone(), id);
        self.by_config.entry(config.clone()).or_default().push(id);
        self.changes.push(Change {
            id,
            config,
            hash,
            expected,
            t_sent,
            t_ack: None,
            applied: None,
            error: None,
            tag: tag.to_string(),
        });
        id
    }

    /// The server applied change `id` at resourceVersion `applied`.
    pub fn ack(&mut self, id: usize, t: f64, applied: Option<u64>) {
        self.changes[id].t_ack = Some(t);
        self.changes[id].applied = applied;
    }

    pub fn fail(&mut self, id: usize, error: String) {
        self.changes[id].error = Some(error);
    }

    /// A workload of the churn, before it is created.
    pub fn register_churned(&mut self, key: String, configs: Vec<ConfigRef>) {
        self.churned.insert(key, configs);
    }

    pub fn workloads_known(&self) -> usize {
        self.workloads.len()
    }

    /// The workload's `metadata.generation` as the watch saw it last: every spec write bumps
    /// it, so it counts rollouts even where the watch skipped an intermediate version.
    pub fn generation(&self, key: &str) -> Option<i64> {
        self.workloads.get(key).map(|w| w.generation)
    }

    /// The hash the workload's template carries now in a reloader field written from one of
    /// `sources` (an env var name, or `TYPE/name` of the annotations strategy).
    pub fn current_hash(&self, key: &str, sources: &[String]) -> Option<String> {
        self.workloads
            .get(key)?
            .fields
            .values()
            .find(|f| sources.contains(&f.source))
            .map(|f| f.hash.clone())
    }

    /// A workload as the watch saw it: `key` (`ns/name`, or another key for objects no change
    /// expects anything of), its generation and its pod template.
    pub fn apply(&mut self, key: String, generation: i64, template: &PodTemplateSpec, t: f64) {
        self.watch_events += 1;
        if self.deleted.contains(&key) {
            self.resurrected.push((key.clone(), t));
        }
        let fields = reloader_fields(template);
        let prev = self.workloads.remove(&key);
        let mut state = WorkloadState {
            generation,
            template: template_hash(template),
            fields,
        };
        match prev {
            None => {
                for f in state.fields.values() {
                    self.observe(&key, f, t, generation);
                }
            }
            Some(prev) if generation < prev.generation => state = prev,
            Some(prev) if generation == prev.generation => {}
            Some(prev) if state.template == prev.template => {}
            Some(prev) => {
                let mut changed = false;
                for (name, f) in &state.fields {
                    if prev.fields.get(name).is_none_or(|p| p.raw != f.raw) {
                        changed = true;
                        self.observe(&key, f, t, generation);
                    }
                }
                for name in prev.fields.keys() {
                    if !state.fields.contains_key(name) {
                        changed = true;
                        self.removed_fields.push((key.clone(), name.clone(), t));
                    }
                }
                if !changed {
                    self.foreign_template_changes.push((key.clone(), t));
                }
            }
        }
        self.workloads.insert(key, state);
    }

    /// A Job created from the CronJob `owner` (`ns/name`): the CronJob's reload. Each Job counts
    /// once (by `uid`), however often the watch delivers it.
    pub fn apply_job(&mut self, uid: String, owner: String, template: &PodTemplateSpec, t: f64) {
        self.watch_events += 1;
        if !self.jobs_seen.insert(uid) {
            return;
        }
        // A distinct pseudo-generation per Job (template_change_times counts template changes).
        let generation = -(self.jobs_seen.len() as i64);
        let fields = reloader_fields(template);
        if fields.is_empty() {
            self.foreign_template_changes.push((owner.clone(), t));
        }
        for f in fields.values() {
            self.observe(&owner, f, t, generation);
        }
    }

    pub fn delete(&mut self, key: &str) {
        self.workloads.remove(key);
        if self.churned.contains_key(key) {
            self.deleted.insert(key.to_string());
        }
    }

    fn observe(&mut self, key: &str, f: &FieldValue, t: f64, generation: i64) {
        let idx = self.observations.len();
        self.observations.push(Observation {
            workload: key.to_string(),
            source: f.source.clone(),
            hash: f.hash.clone(),
            t,
            generation,
        });
        self.seen
            .entry((key.to_string(), f.hash.clone()))
            .or_default()
            .push(idx);
    }

    fn pair_seen(&self, workload: &str, hash: &str) -> bool {
        self.seen
            .contains_key(&(workload.to_string(), hash.to_string()))
    }

    /// A later change of the same config reached this workload (the controller may fold
    /// changes it has not written yet into one rollout).
    fn superseded(&self, c: &Change, workload: &str) -> bool {
        self.by_config[&c.config]
            .iter()
            .filter(|&&id| self.changes[id].newer_than(c))
            .any(|&id| self.pair_seen(workload, &self.changes[id].hash))
    }

    /// Expected reloads not seen yet (neither directly nor through a later change).
    pub fn pending(&self) -> usize {
        self.changes
            .iter()
            .filter(|c| c.error.is_none())
            .map(|c| {
                c.expected
                    .iter()
                    .filter(|w| !self.pair_seen(w, &c.hash) && !self.superseded(c, w))
                    .count()
            })
            .sum()
    }

    pub fn expected_pairs(&self) -> usize {
        self.changes
            .iter()
            .filter(|c| c.error.is_none())
            .map(|c| c.expected.len())
            .sum()
    }

    /// Times (run clock) at which workload templates were seen changing, in order.
    pub fn template_change_times(&self) -> Vec<f64> {
        let mut gens: BTreeMap<(String, i64), f64> = BTreeMap::new();
        for o in &self.observations {
            gens.entry((o.workload.clone(), o.generation))
                .or_insert(o.t);
        }
        for (w, t) in &self.foreign_template_changes {
            gens.insert((w.clone(), -1 - gens.len() as i64), *t);
        }
        let mut times: Vec<f64> = gens.into_values().collect();
        times.sort_by(f64::total_cmp);
        times
    }

    /// The verdict, and the latency of every reload that happened.
    pub fn evaluate(&self, initial: &BTreeMap<String, ConfigRef>) -> (Verdict, Vec<Reload>) {
        let mut v = Verdict {
            changes: self.changes.len(),
            ..Default::default()
        };
        let mut reloads = Vec::new();
        // Observations that are the reload of a change (the rest are checked afterwards).
        let mut explained: HashSet<usize> = HashSet::new();
        for c in &self.changes {
            if let Some(e) = &c.error {
                v.write_errors += 1;
                push_example(
                    &mut v.examples,
                    format!("write of {} failed: {e}", c.config),
                );
                continue;
            }
            for w in &c.expected {
                v.expected_reloads += 1;
                match self.seen.get(&(w.clone(), c.hash.clone())) {
                    Some(idxs) => {
                        explained.extend(idxs.iter().copied());
                        reloads.extend(self.check_reload(c, w, idxs, &mut v));
                    }
                    None if self.superseded(c, w) => v.coalesced += 1,
                    None => {
                        v.missing += 1;
                        push_example(
                            &mut v.examples,
                            format!(
                                "{w}: never rolled for change #{} of {} ({})",
                                c.id, c.config, c.tag
                            ),
                        );
                    }
                }
            }
        }
        v.churned_workloads = self.churned.len();
        self.check_unexplained(&explained, initial, &mut v);
        self.check_other_changes(&mut v);
        v.passed = v.write_errors == 0
            && v.resurrected == 0
            && v.missing == 0
            && v.unexpected == 0
            && v.duplicates == 0
            && v.stale == 0
            && v.wrong_field == 0;
        (v, reloads)
    }

    /// The reload of workload `w` for change `c`, seen as observations `idxs`: into the right
    /// field, once, and not after a newer change of the same config. Returns its latency (None
    /// when the write was never acknowledged).
    fn check_reload(&self, c: &Change, w: &str, idxs: &[usize], v: &mut Verdict) -> Option<Reload> {
        v.reloaded += 1;
        let first = &self.observations[idxs[0]];
        let expected_source = c.config.env_var();
        let annotation_source = format!("{}/{}", c.config.kind.env_suffix(), c.config.name);
        if first.source != expected_source && first.source != annotation_source {
            v.wrong_field += 1;
            push_example(
                &mut v.examples,
                format!("{w}: hash of {} written to {}", c.config, first.source),
            );
        }
        if idxs.len() > 1 {
            v.duplicates += idxs.len() - 1;
            push_example(
                &mut v.examples,
                format!(
                    "{w}: template changed {} times for change #{} of {}",
                    idxs.len(),
                    c.id,
                    c.config
                ),
            );
        }
        // A reload of an older change after a newer one: the workload went back.
        let newer_seen_before = self.by_config[&c.config]
            .iter()
            .filter(|&&id| self.changes[id].newer_than(c))
            .filter_map(|&id| {
                self.seen
                    .get(&(w.to_string(), self.changes[id].hash.clone()))
            })
            .flatten()
            .any(|&i| self.observations[i].t < first.t);
        if newer_seen_before {
            v.stale += 1;
            push_example(
                &mut v.examples,
                format!("{w}: rolled back to change #{} of {}", c.id, c.config),
            );
        }
        c.t_ack.map(|ack| Reload {
            change: c.id,
            workload: w.to_string(),
            latency_s: first.t - ack,
            tag: c.tag.clone(),
            t_seen: first.t,
            generation: first.generation,
        })
    }

    /// Template changes that are no expected reload: a churned workload's reload to a change of
    /// a config it uses is allowed once; anything else is unexpected.
    fn check_unexplained(
        &self,
        explained: &HashSet<usize>,
        initial: &BTreeMap<String, ConfigRef>,
        v: &mut Verdict,
    ) {
        let mut churn_pairs: HashMap<(&str, &str), usize> = HashMap::new();
        for (i, o) in self.observations.iter().enumerate() {
            if explained.contains(&i) {
                continue;
            }
            let churn_ok = self.churned.get(&o.workload).is_some_and(|configs| {
                self.by_hash
                    .get(&o.hash)
                    .is_some_and(|&id| configs.contains(&self.changes[id].config))
            });
            if churn_ok {
                v.churned_reloads += 1;
                let n = churn_pairs
                    .entry((o.workload.as_str(), o.hash.as_str()))
                    .or_default();
                *n += 1;
                if *n > 1 {
                    v.duplicates += 1;
                    push_example(
                        &mut v.examples,
                        format!(
                            "{}: churned workload rolled twice to {}",
                            o.workload, o.hash
                        ),
                    );
                }
                continue;
            }
            v.unexpected += 1;
            let why = if let Some(&id) = self.by_hash.get(&o.hash) {
                format!(
                    "{} rolled for change #{} of {} it does not use",
                    o.workload, id, self.changes[id].config
                )
            } else if let Some(c) = initial.get(&o.hash) {
                format!("{} rolled to the initial content of {c}", o.workload)
            } else {
                format!(
                    "{} rolled to unknown hash {} ({})",
                    o.workload, o.hash, o.source
                )
            };
            push_example(&mut v.examples, why);
        }
    }

    /// Template changes that touched no reloader field, removed fields, resurrected workloads.
    fn check_other_changes(&self, v: &mut Verdict) {
        for (w, _) in &self.foreign_template_changes {
            v.unexpected += 1;
            push_example(
                &mut v.examples,
                format!("{w}: template changed, no reloader field did"),
            );
        }
        for (w, f, _) in &self.removed_fields {
            v.unexpected += 1;
            push_example(&mut v.examples, format!("{w}: {f} removed"));
        }
        for (w, _) in &self.resurrected {
            v.resurrected += 1;
            push_example(
                &mut v.examples,
                format!("{w}: appeared again after it was deleted"),
            );
        }
    }
}

fn push_example(examples: &mut Vec<String>, s: String) {
    if examples.len() < 20 {
        examples.push(s);
    }
}

/// Correctness of a run.
#[derive(Debug, Default, Clone, Serialize)]
pub struct Verdict {
    pub changes: usize,
    pub write_errors: usize,
    /// (change, workload) pairs that should roll.
    pub expected_reloads: usize,
    pub reloaded: usize,
    /// Not rolled for this change, but for a later change of the same config (allowed).
    pub coalesced: usize,
    /// Expected reloads that did not happen.
    pub missing: usize,
    /// Reloads nobody asked for (unknown hash, initial content, a config the workload does
    /// not use, a template change without a reloader field change, a removed field).
    pub unexpected: usize,
    /// Extra template changes for one change of one workload.
    pub duplicates: usize,
    /// A workload rolled to an older change after a newer one.
    pub stale: usize,
    /// The hash was written to a variable (or annotation) of another config.
    pub wrong_field: usize,
    /// Workloads created and deleted during the run (churn); not part of `expected_reloads`.
    pub churned_workloads: usize,
    /// Reloads of churned workloads (to a change of a config they use; allowed, not counted as
    /// expected or unexpected).
    pub churned_reloads: usize,
    /// Churned workloads that came back after their deletion was seen (a write recreated them).
    pub resurrected: usize,
    pub passed: bool,
    pub examples: Vec<String>,
}

/// One reload that happened, with its latency (config write acknowledged -> template change seen).
#[derive(Debug, Clone, Serialize)]
pub struct Reload {
    pub change: usize,
    pub workload: String,
    pub latency_s: f64,
    pub tag: String,
    pub t_seen: f64,
    /// The workload's `metadata.generation` when the change was seen in its template.
    pub generation: i64,
}

#[derive(serde::Deserialize)]
struct LastReloadedFrom {
    #[serde(rename = "type", default)]
    kind: String,
    #[serde(default)]
    name: String,
    #[serde(default)]
    hash: String,
}

/// The fields Reloader (and kube-reloader) write: `STAKATER_*` env vars in any container and
/// the `last-reloaded-from` template annotation.
fn reloader_fields(template: &PodTemplateSpec) -> BTreeMap<String, FieldValue> {
    let mut out = BTreeMap::new();
    if let Some(spec) = &template.spec {
        let containers = spec
            .init_containers
            .iter()
            .flatten()
            .chain(spec.containers.iter());
        for c in containers {
            for e in c.env.iter().flatten() {
                if e.name.starts_with("STAKATER_") {
                    let value = e.value.clone().unwrap_or_default();
                    out.insert(
                        format!("env/{}/{}", c.name, e.name),
                        FieldValue {
                            raw: value.clone(),
                            hash: value,
                            source: e.name.clone(),
                        },
                    );
                }
            }
        }
    }
    if let Some(raw) = template
        .metadata
        .as_ref()
        .and_then(|m| m.annotations.as_ref())
        .and_then(|a| a.get(LAST_RELOADED_FROM))
    {
        let parsed: Option<LastReloadedFrom> = serde_json::from_str(raw).ok();
        let (hash, source) = parsed
            .map(|p| (p.hash, format!("{}/{}", p.kind, p.name)))
            .unwrap_or_else(|| (raw.clone(), "annotation".into()));
        out.insert(
            "annotation".into(),
            FieldValue {
                raw: raw.clone(),
                hash,
                source,
            },
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::objects::Kind;

    #[test]
    fn a_job_counts_once_for_its_cronjob() {
        let config = ConfigRef {
            namespace: "ns".into(),
            kind: Kind::ConfigMap,
            name: "cm".into(),
        };
        let mut st = State::default();
        st.register(config.clone(), "h1".into(), vec!["ns/cj".into()], 0.0, "t");
        st.ack(0, 0.1, Some(10));
        let template: PodTemplateSpec = serde_json::from_value(serde_json::json!({
            "spec": {"containers": [{"name": "app", "env": [{"name": config.env_var(), "value": "h1"}]}]}
        }))
        .unwrap();
        st.apply_job("uid-1".into(), "ns/cj".into(), &template, 0.5);
        st.apply_job("uid-1".into(), "ns/cj".into(), &template, 0.6);
        assert_eq!(st.pending(), 0);
        let (v, _) = st.evaluate(&BTreeMap::new());
        assert!(v.passed, "{v:?}");
        // A second Job for the same change is a duplicate.
        st.apply_job("uid-2".into(), "ns/cj".into(), &template, 0.7);
        let (v, _) = st.evaluate(&BTreeMap::new());
        assert_eq!(v.duplicates, 1);
    }

    #[test]
    fn a_new_generation_with_the_same_template_is_no_rollout() {
        let mut st = State::default();
        let template = |v: &str| -> PodTemplateSpec {
            serde_json::from_value(serde_json::json!({
                "spec": {"containers": [{"name": "app", "image": v}]}
            }))
            .unwrap()
        };
        st.apply("ns/d".into(), 1, &template("a"), 0.0);
        // spec.paused flipped by a pause period: generation 2, same template.
        st.apply("ns/d".into(), 2, &template("a"), 0.1);
        assert!(st.foreign_template_changes.is_empty());
        // A template change that is not a reloader field is still caught.
        st.apply("ns/d".into(), 3, &template("b"), 0.2);
        assert_eq!(st.foreign_template_changes.len(), 1);
    }
}
