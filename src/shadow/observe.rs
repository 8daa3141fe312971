//! The incumbent's writes, as the workload watch shows them: a workload whose recorded reload
//! hash for a config changed, or a Job created for a reload (Reloader creates one from a
//! CronJob, or re-creates a Job). Only the marks of the configs whose record changed are read,
//! from the template the watch already decoded: no extra request.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::PodTemplateSpec;

use super::marks::{Mark, marks_of};
use crate::config::AnnotationKeys;
use crate::index::{WorkloadEntry, WorkloadObject};
use crate::model::{ConfigKey, WorkloadKey, WorkloadKind};

/// Reloader's (and Kubernetes') annotation on a Job created by hand from a CronJob.
const INSTANTIATE: &str = "cronjob.kubernetes.io/instantiate";

/// One write seen: the workload it reloads (a CronJob for the Job made from it), the config,
/// and the config's marks after the write.
#[derive(Debug, PartialEq, Eq)]
pub struct Seen {
    pub workload: WorkloadKey,
    pub config: ConfigKey,
    pub marks: BTreeSet<Mark>,
}

/// The writes `object` (whose new entry is `new`, built from `template`) shows against the
/// entry it replaces. `ready`: the first lists are done, so a Job that appears was created now,
/// not found at start.
pub fn writes_seen(
    old: Option<&WorkloadEntry>,
    new: &WorkloadEntry,
    object: &WorkloadObject,
    template: &PodTemplateSpec,
    keys: &AnnotationKeys,
    ready: bool,
) -> Vec<Seen> {
    let (workload, changed): (WorkloadKey, Vec<ConfigKey>) = match old {
        Some(old) => (new.key.clone(), changed_records(old, new)),
        None if ready && new.key.kind == WorkloadKind::Job => match reloaded_through(object, new) {
            Some(workload) => (workload, recorded(new)),
            None => return Vec::new(),
        },
        None => return Vec::new(),
    };
    if changed.is_empty() {
        return Vec::new();
    }
    let template = serde_json::to_value(template).unwrap_or_default();
    changed
        .into_iter()
        .map(|config| Seen {
            workload: workload.clone(),
            marks: marks_of(&template, keys, &config),
            config,
        })
        .collect()
}

fn config_of(entry: &WorkloadEntry, kind: crate::model::ConfigKind, name: &str) -> ConfigKey {
    ConfigKey::new(kind, &entry.key.namespace, name)
}

/// Configs whose recorded hash differs between the two entries (set, changed or removed).
fn changed_records(old: &WorkloadEntry, new: &WorkloadEntry) -> Vec<ConfigKey> {
    let mut out = Vec::new();
    for u in &new.uses {
        let before = old
            .uses_config(u.kind, &u.name)
            .and_then(|o| o.recorded.as_deref());
        if before != u.recorded.as_deref() {
            out.push(config_of(new, u.kind, &u.name));
        }
    }
    for o in old.uses.iter().filter(|o| o.recorded.is_some()) {
        if new.uses_config(o.kind, &o.name).is_none() {
            out.push(config_of(new, o.kind, &o.name));
        }
    }
    out
}

/// Configs a new Job carries a reload hash for.
fn recorded(new: &WorkloadEntry) -> Vec<ConfigKey> {
    new.uses
        .iter()
        .filter(|u| u.recorded.is_some())
        .map(|u| config_of(new, u.kind, &u.name))
        .collect()
}

/// The workload a new Job reloads: the CronJob it was created from by hand, or the Job itself
/// (re-created with a new template; it has no owner). A Job a CronJob started on schedule
/// reloads nothing.
fn reloaded_through(object: &WorkloadObject, job: &WorkloadEntry) -> Option<WorkloadKey> {
    let meta = &object.metadata;
    let owner = meta
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true));
    match owner {
        None => Some(job.key.clone()),
        Some(o) if o.kind == "CronJob" => {
            let manual = meta
                .annotations
                .as_ref()
                .and_then(|a| a.get(INSTANTIATE))
                .is_some_and(|v| v == "manual");
            manual.then(|| WorkloadKey::new(WorkloadKind::CronJob, &job.key.namespace, &o.name))
        }
        Some(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::{workload_entry, workload_entry_and_template};
    use serde_json::{Value, json};

    fn object(kind: &str, env_value: Option<&str>, extra_meta: Value) -> Value {
        let env = match env_value {
            Some(v) => json!([{"name": "STAKATER_APP_CONFIGMAP", "value": v}]),
            None => json!([]),
        };
        let mut meta = json!({"name": "w", "namespace": "ns"});
        if let (Some(m), Some(extra)) = (meta.as_object_mut(), extra_meta.as_object()) {
            m.extend(extra.clone());
        }
        json!({"kind": kind, "metadata": meta, "spec": {"template": {"spec": {"containers": [
            {"name": "c", "env": env, "envFrom": [{"configMapRef": {"name": "app"}}]}
        ]}}}})
    }

    fn seen(kind: WorkloadKind, old: Option<Value>, new: Value, ready: bool) -> Vec<Seen> {
        let keys = AnnotationKeys::default();
        let old = old.map(|o| workload_entry(kind, &o, &keys).unwrap());
        let wire: WorkloadObject = serde_json::from_value(new).unwrap();
        let (new, template) = workload_entry_and_template(kind, &wire, &keys).unwrap();
        writes_seen(old.as_ref(), &new, &wire, &template, &keys, ready)
    }

    #[test]
    fn a_changed_hash_is_a_write_with_the_marks_after_it() {
        let deployment = WorkloadKind::Deployment;
        let before = object("Deployment", Some("h1"), json!({}));
        let seen = seen(
            deployment,
            Some(before.clone()),
            object("Deployment", Some("h2"), json!({})),
            true,
        );
        assert_eq!(seen.len(), 1);
        assert_eq!(seen[0].workload, WorkloadKey::new(deployment, "ns", "w"));
        assert_eq!(
            seen[0].config,
            ConfigKey::new(crate::model::ConfigKind::ConfigMap, "ns", "app")
        );
        assert!(matches!(seen[0].marks.first(), Some(Mark::EnvVar { value, .. }) if value == "h2"));
        // An update that leaves the hash alone is no write of the incumbent's.
        let same = super::tests::seen(deployment, Some(before.clone()), before, true);
        assert!(same.is_empty());
    }

    #[test]
    fn a_job_made_by_hand_from_a_cronjob_reloads_the_cronjob_and_a_scheduled_one_nothing() {
        let owner = |manual: bool| {
            let mut meta = json!({"ownerReferences": [{"apiVersion": "batch/v1", "kind": "CronJob",
                "name": "nightly", "uid": "u", "controller": true}]});
            if manual {
                meta["annotations"] = json!({INSTANTIATE: "manual"});
            }
            meta
        };
        let job = WorkloadKind::Job;
        let manual = seen(job, None, object("Job", Some("h"), owner(true)), true);
        assert_eq!(manual.len(), 1);
        assert_eq!(
            manual[0].workload,
            WorkloadKey::new(WorkloadKind::CronJob, "ns", "nightly")
        );
        assert!(seen(job, None, object("Job", Some("h"), owner(false)), true).is_empty());
        // Found by the first list: not a write.
        assert!(seen(job, None, object("Job", Some("h"), json!({})), false).is_empty());
        let recreated = seen(job, None, object("Job", Some("h"), json!({})), true);
        assert_eq!(recreated[0].workload, WorkloadKey::new(job, "ns", "w"));
    }
}
