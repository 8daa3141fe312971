//! Pod-level restarts, pure: a workload annotated `kube-reloader.io/restart-by: eviction` is
//! reloaded by evicting its pods one at a time through the Eviction API (so its
//! PodDisruptionBudgets are respected), not by changing its pod template. What it was restarted
//! for, and a restart in progress, are kept on the workload itself, in its metadata annotation
//! `kube-reloader.io/restarted-for` (metadata changes roll nothing), so a restarted or newly
//! owning replica carries on where the last one stopped. The I/O is `rollout::eviction`.
//!
//! One restart, step by step (one step per write attempt):
//! 1. `Begin`: the configs and values to restart for are recorded as pending, with the UIDs of
//!    the workload's pods at that moment: they may run the old values; a pod created later
//!    reads the new ones. UIDs, not a time: the API server's clock stamps pods, the controller's
//!    would stamp the restart, and the two may disagree (a skewed replica would evict the
//!    replacements again, or spare an old pod).
//! 2. `Wait` while the workload is not settled (a pod terminating, or fewer Ready pods than it
//!    wants): one pod at a time.
//! 3. `Evict` the oldest pod still left of those recorded; its owner replaces it.
//! 4. `Finish` when none is left: the pending values become the ones the workload records,
//!    which the index reads as a template's recorded hash.
//!
//! A newer value of a config while a restart runs begins it again (pods replaced meanwhile ran
//! the older value).

use std::collections::{BTreeMap, BTreeSet};

use crate::model::{ConfigKey, ConfigKind, WorkloadKind};

/// How a workload's pods are restarted when a config changes (`kube-reloader.io/restart-by`,
/// workload metadata).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum RestartBy {
    /// The pod template is changed and the workload's controller rolls it (Reloader's way).
    #[default]
    Template,
    /// Pods are evicted one at a time through the Eviction API; the template is untouched.
    Eviction,
    /// Containers restarted in place, pod kept. Kubernetes offers no API call for it (KEP-5532's
    /// `RestartAllContainers` is an action of a container's exit, not a request): refused with
    /// a clear error.
    InPlace,
}

impl RestartBy {
    /// The annotation's values, the default first.
    pub const CHOICES: [(&'static str, RestartBy); 4] = [
        ("", RestartBy::Template),
        ("template", RestartBy::Template),
        ("eviction", RestartBy::Eviction),
        ("in-place", RestartBy::InPlace),
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RestartBy::Template => "template",
            RestartBy::Eviction => "eviction",
            RestartBy::InPlace => "in-place",
        }
    }
}

/// Why `in-place` cannot be done (the writer's error, lint's finding).
pub const IN_PLACE_UNSUPPORTED: &str = "restart-by: in-place is not possible: the API server \
     offers no request that restarts a pod's containers in place (KEP-5532's \
     RestartAllContainers is triggered by a container's exit code, not by a client); use \
     `eviction`, or leave the annotation out for a rollout";

/// Kinds whose evicted pods are replaced by their controller. A CronJob's or Job's pod evicted
/// would fail the Job, not restart it.
pub fn evicts_for(kind: WorkloadKind) -> bool {
    !matches!(kind, WorkloadKind::CronJob | WorkloadKind::Job)
}

/// What a workload records for a config whose first restart has begun and not finished: no
/// config value is this, so it reads as not current and a controller started meanwhile finishes
/// the restart (with nothing recorded, nothing would tell it to).
pub const UNFINISHED: &str = "restart-unfinished";

/// `config kind/name`, the key of a config in the record (the namespace is the workload's).
pub fn config_id(config: &ConfigKey) -> String {
    format!("{}/{}", config.kind.as_str(), config.name)
}

/// The record kept in `kube-reloader.io/restarted-for`.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RestartRecord {
    /// config id -> the value the workload's pods were all restarted for.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub done: BTreeMap<String, String>,
    /// A restart in progress.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending: Option<PendingRestart>,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PendingRestart {
    /// config id -> value the restart is for.
    pub configs: BTreeMap<String, String>,
    /// When the restart began, as the controller's clock said (for people; decisions use
    /// `pods`).
    pub since: jiff::Timestamp,
    /// UIDs of the pods the workload had when the restart began: those still to replace.
    #[serde(default)]
    pub pods: BTreeSet<String>,
}

#[derive(Debug, thiserror::Error)]
#[error("the restarted-for record cannot be read ({0}); it is started afresh")]
pub struct BadRecord(String);

impl RestartRecord {
    /// Reads the annotation's value (absent: an empty record).
    pub fn parse(value: Option<&str>) -> Result<RestartRecord, BadRecord> {
        match value {
            None => Ok(RestartRecord::default()),
            Some(text) => serde_json::from_str(text).map_err(|e| BadRecord(e.to_string())),
        }
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a record serializes")
    }

    /// The value the workload's pods were all restarted for, for `kind/name`; [`UNFINISHED`]
    /// for a config whose first restart has begun and not finished.
    pub fn recorded(&self, kind: ConfigKind, name: &str) -> Option<&str> {
        let id = format!("{}/{name}", kind.as_str());
        let pending = self
            .pending
            .as_ref()
            .is_some_and(|p| p.configs.contains_key(&id));
        self.done
            .get(&id)
            .map(String::as_str)
            .or(pending.then_some(UNFINISHED))
    }
}

/// A pod of the workload, as far as a restart cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodView {
    pub name: String,
    pub uid: String,
    pub created: jiff::Timestamp,
    pub terminating: bool,
    pub ready: bool,
}

/// What the next write attempt does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EvictionStep {
    /// Every pod already runs these values.
    UpToDate,
    /// Record the restart as pending (the new record to write).
    Begin(RestartRecord),
    /// The workload is not settled: try again later.
    Wait(String),
    /// Evict this pod.
    Evict(String),
    /// No pod recorded when the restart began is left: record it as done (the new record to write).
    Finish(RestartRecord),
}

/// The next step of restarting for `target` (config id -> value), given the record, the
/// workload's pods now, how many Ready pods it wants, and the time now. Pure.
pub fn next_step(
    record: &RestartRecord,
    target: &BTreeMap<String, String>,
    pods: &[PodView],
    desired: usize,
    now: jiff::Timestamp,
) -> EvictionStep {
    let done = |id: &String, value: &String| record.done.get(id) == Some(value);
    let open: BTreeMap<String, String> = target
        .iter()
        .filter(|(id, value)| !done(id, value))
        .map(|(id, value)| (id.clone(), value.clone()))
        .collect();
    let Some(pending) = &record.pending else {
        if open.is_empty() {
            return EvictionStep::UpToDate;
        }
        return EvictionStep::Begin(begin(record, open, pods, now));
    };
    // A value the pending restart is not for (a newer one, or another config): begin again,
    // keeping what was pending. Pods replaced meanwhile ran the older value: all are recorded.
    if open
        .iter()
        .any(|(id, value)| pending.configs.get(id) != Some(value))
    {
        let mut configs = pending.configs.clone();
        configs.extend(open);
        return EvictionStep::Begin(begin(record, configs, pods, now));
    }
    if let Some(pod) = pods.iter().find(|p| p.terminating) {
        return EvictionStep::Wait(format!("pod {} is terminating", pod.name));
    }
    let ready = pods.iter().filter(|p| p.ready).count();
    if ready < desired {
        return EvictionStep::Wait(format!("{ready} of {desired} pods Ready"));
    }
    let oldest = pods
        .iter()
        .filter(|p| pending.pods.contains(&p.uid))
        .min_by(|a, b| a.created.cmp(&b.created).then(a.name.cmp(&b.name)));
    match oldest {
        Some(pod) => EvictionStep::Evict(pod.name.clone()),
        None => {
            let mut finished = record.clone();
            finished.done.extend(pending.configs.clone());
            finished.pending = None;
            EvictionStep::Finish(finished)
        }
    }
}

impl EvictionStep {
    /// For logs: the step without the record (which lists every pod's UID).
    pub fn name(&self) -> &'static str {
        match self {
            EvictionStep::UpToDate => "up to date",
            EvictionStep::Begin(_) => "begin",
            EvictionStep::Wait(_) => "wait",
            EvictionStep::Evict(_) => "evict",
            EvictionStep::Finish(_) => "finish",
        }
    }
}

fn begin(
    record: &RestartRecord,
    configs: BTreeMap<String, String>,
    pods: &[PodView],
    now: jiff::Timestamp,
) -> RestartRecord {
    let pods = pods
        .iter()
        .filter(|p| !p.terminating)
        .map(|p| p.uid.clone())
        .collect();
    RestartRecord {
        done: record.done.clone(),
        pending: Some(PendingRestart {
            configs,
            since: now,
            pods,
        }),
    }
}

#[cfg(test)]
mod tests;
