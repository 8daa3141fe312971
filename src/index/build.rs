//! Builds a [`WorkloadEntry`] from a workload object as the API server sent it. Pure.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{PodSpec, PodTemplateSpec};
use serde::Deserialize;
use serde_json::Value;

use crate::config::AnnotationKeys;
use crate::model::{ConfigKey, ConfigKind, Counted, WorkloadKey, WorkloadKind};
use crate::pod_restart::{RestartBy, RestartRecord};
use crate::references::{config_uses, counted_keys};
use crate::reload_policy::{NamePattern, ReloadPolicy};
use crate::reloader_format::template::recorded_hash;

use super::wire::WorkloadObject;
use super::{IndexedUse, WorkloadEntry};

#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("the object has no metadata.name or metadata.namespace")]
    NoIdentity,
    #[error("the pod template cannot be read: {0}")]
    BadTemplate(#[from] serde_json::Error),
    #[error("the pod template cannot be read: {0}")]
    BadWireTemplate(#[from] super::wire::TemplateError),
}

fn string_map(value: Option<&Value>) -> BTreeMap<String, String> {
    value
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

/// A workload restarted by eviction records what its pods were restarted for on its metadata
/// (`pod_restart`): that is its recorded value, before its template's. A record that cannot be
/// read is reported and read as empty (the next restart writes a good one).
fn restart_record(
    policy: &ReloadPolicy,
    metadata: &BTreeMap<String, String>,
    keys: &AnnotationKeys,
    namespace: &str,
    name: &str,
) -> Option<RestartRecord> {
    if policy.restart_by != RestartBy::Eviction {
        return None;
    }
    let value = metadata.get(&keys.restarted_for).map(String::as_str);
    RestartRecord::parse(value)
        .map_err(|error| {
            tracing::warn!(namespace, name, %error, annotation = %keys.restarted_for,
            "bad restart record on the workload")
        })
        .ok()
}

/// Builds the entry of a workload given as one JSON object (tests, benches, tools).
pub fn workload_entry(
    kind: WorkloadKind,
    object: &Value,
    keys: &AnnotationKeys,
) -> Result<WorkloadEntry, BuildError> {
    let name = object.pointer("/metadata/name").and_then(Value::as_str);
    let namespace = object
        .pointer("/metadata/namespace")
        .and_then(Value::as_str);
    let (Some(name), Some(namespace)) = (name, namespace) else {
        return Err(BuildError::NoIdentity);
    };
    let metadata = string_map(object.pointer("/metadata/annotations"));
    let template = object
        .pointer(kind.pod_template_pointer())
        .map(PodTemplateSpec::deserialize)
        .transpose()?
        .map(Cow::Owned)
        .unwrap_or_default();
    let paused = object.pointer("/spec/paused").and_then(Value::as_bool) == Some(true);
    let workload = Workload {
        kind,
        namespace,
        name,
        annotations: &metadata,
        template,
        paused,
    };
    entry_from_parts(workload, keys)
}

/// Builds the entry of a workload as the watchers receive it (see [`super::wire`]).
pub fn workload_entry_from_object(
    kind: WorkloadKind,
    object: &WorkloadObject,
    keys: &AnnotationKeys,
) -> Result<WorkloadEntry, BuildError> {
    workload_entry_and_template(kind, object, keys).map(|(entry, _)| entry)
}

/// As [`workload_entry_from_object`], with the pod template the entry was built from, for a
/// caller that reads it too (the shadow's observer): the template is decoded once.
pub fn workload_entry_and_template(
    kind: WorkloadKind,
    object: &WorkloadObject,
    keys: &AnnotationKeys,
) -> Result<(WorkloadEntry, PodTemplateSpec), BuildError> {
    let meta = &object.metadata;
    let (Some(name), Some(namespace)) = (meta.name.as_deref(), meta.namespace.as_deref()) else {
        return Err(BuildError::NoIdentity);
    };
    let empty = BTreeMap::new();
    let template = object.pod_template(kind)?.unwrap_or_default();
    let workload = Workload {
        kind,
        namespace,
        name,
        annotations: meta.annotations.as_ref().unwrap_or(&empty),
        template: Cow::Borrowed(&template),
        paused: object.paused(),
    };
    let mut entry = entry_from_parts(workload, keys)?;
    entry.canary = meta
        .labels
        .as_ref()
        .and_then(|l| l.get(crate::waves::CANARY_LABEL))
        .is_some_and(|v| v == "true");
    Ok((entry, template))
}

/// What an entry is built from, however the workload was decoded.
struct Workload<'a> {
    kind: WorkloadKind,
    namespace: &'a str,
    name: &'a str,
    annotations: &'a BTreeMap<String, String>,
    template: Cow<'a, PodTemplateSpec>,
    paused: bool,
}

fn entry_from_parts(
    workload: Workload<'_>,
    keys: &AnnotationKeys,
) -> Result<WorkloadEntry, BuildError> {
    let Workload {
        kind,
        namespace,
        name,
        annotations: metadata,
        template,
        paused,
    } = workload;
    let key = WorkloadKey::interned(kind, namespace, name);
    let template_annotations = template
        .metadata
        .as_ref()
        .and_then(|m| m.annotations.clone())
        .unwrap_or_default();
    let mut policy = ReloadPolicy::parse(keys, metadata, &template_annotations);
    policy.restart_by = crate::reload_policy::restart_by_for(kind, keys, metadata).0;
    let no_spec = PodSpec::default();
    let spec = template.spec.as_ref().unwrap_or(&no_spec);

    let restarts = restart_record(&policy, metadata, keys, namespace, name);
    let recorded = |kind: ConfigKind, name: &str| {
        let restarted = restarts.as_ref().and_then(|r| r.recorded(kind, name));
        restarted
            .map(str::to_string)
            .or_else(|| {
                recorded_hash(
                    spec,
                    &template_annotations,
                    keys,
                    &ConfigKey::new(kind, namespace, name),
                )
            })
            .map(String::into_boxed_str)
    };
    let mut uses: Vec<IndexedUse> = config_uses(spec)
        .into_iter()
        .map(|u| IndexedUse {
            recorded: recorded(u.kind, &u.name),
            referenced: true,
            reads: counted_keys(spec, u.kind, &u.name),
            kind: u.kind,
            name: Arc::from(u.name),
        })
        .collect();
    // Literal list entries the template does not use still carry a recorded hash once rolled.
    for kind in ConfigKind::ALL {
        for pattern in &policy.for_type(kind).explicit {
            if let NamePattern::Literal(name) = pattern
                && !uses.iter().any(|u| u.kind == kind && u.name == *name)
                && let Some(hash) = recorded(kind, name)
            {
                uses.push(IndexedUse {
                    kind,
                    name: name.clone(),
                    recorded: Some(hash),
                    referenced: false,
                    reads: Counted::Whole,
                });
            }
        }
    }

    let paused_at = metadata
        .get(&keys.paused_at)
        .and_then(|v| v.parse::<jiff::Timestamp>().ok())
        .map(|t| t.as_second());
    Ok(WorkloadEntry {
        key,
        policy: policy.shared(),
        uses: uses.into_boxed_slice(),
        paused_at,
        paused,
        canary: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn builds_uses_recorded_hashes_and_pause_state() {
        let obj = json!({
            "metadata": {"name": "web", "namespace": "ns", "annotations": {
                "reloader.stakater.com/auto": "true",
                "secret.reloader.stakater.com/reload": "listed",
                "deployment.reloader.stakater.com/paused-at": "2026-01-01T00:00:00Z"
            }},
            "spec": {"paused": true, "template": {"spec": {"containers": [{
                "name": "app",
                "envFrom": [{"configMapRef": {"name": "cfg"}}],
                "env": [
                    {"name": "STAKATER_CFG_CONFIGMAP", "value": "h1"},
                    {"name": "STAKATER_LISTED_SECRET", "value": "h2"}
                ]
            }]}}}
        });
        let e = workload_entry(WorkloadKind::Deployment, &obj, &AnnotationKeys::default()).unwrap();
        // The watchers' path reads the same object in its wire form.
        let wire: super::super::wire::WorkloadObject =
            serde_json::from_str(&obj.to_string()).unwrap();
        let d =
            workload_entry_from_object(WorkloadKind::Deployment, &wire, &AnnotationKeys::default())
                .unwrap();
        assert_eq!(
            (&d.key, &d.uses, d.paused, d.paused_at),
            (&e.key, &e.uses, e.paused, e.paused_at)
        );
        assert_eq!(e.key.to_string(), "Deployment/ns/web");
        assert_eq!(e.uses.len(), 2);
        assert_eq!(e.uses[0].recorded.as_deref(), Some("h1"));
        assert!(e.uses[0].referenced);
        assert_eq!(e.uses[1].recorded.as_deref(), Some("h2"));
        assert!(!e.uses[1].referenced);
        assert!(e.paused);
        assert_eq!(e.paused_at, Some(1767225600));
    }

    #[test]
    fn a_workload_restarted_by_eviction_records_what_its_metadata_says() {
        let record = r#"{"done":{"configmap/cfg":"evicted-h"},"pending":{"configs":{"secret/s":"p"},"since":"2026-01-01T00:00:00Z"}}"#;
        let obj = |restart_by: &str| {
            json!({
                "metadata": {"name": "web", "namespace": "ns", "annotations": {
                    "reloader.stakater.com/auto": "true",
                    "kube-reloader.io/restart-by": restart_by,
                    "kube-reloader.io/restarted-for": record
                }},
                "spec": {"template": {"spec": {"containers": [{
                    "name": "app",
                    "envFrom": [{"configMapRef": {"name": "cfg"}}, {"secretRef": {"name": "s"}}],
                    "env": [{"name": "STAKATER_S_SECRET", "value": "from-template"}]
                }]}}}
            })
        };
        let keys = AnnotationKeys::default();
        let e = workload_entry(WorkloadKind::Deployment, &obj("eviction"), &keys).unwrap();
        let recorded = |kind, name| e.uses_config(kind, name).unwrap().recorded.clone();
        assert_eq!(
            recorded(ConfigKind::ConfigMap, "cfg").as_deref(),
            Some("evicted-h")
        );
        assert_eq!(
            recorded(ConfigKind::Secret, "s").as_deref(),
            Some(crate::pod_restart::UNFINISHED),
            "a first restart begun and not finished reads as stale"
        );
        // The record is read only while the workload is restarted by eviction.
        let t = workload_entry(WorkloadKind::Deployment, &obj("template"), &keys).unwrap();
        assert_eq!(
            t.uses_config(ConfigKind::ConfigMap, "cfg")
                .unwrap()
                .recorded,
            None
        );
    }

    #[test]
    fn cronjob_template_path() {
        let obj = json!({
            "metadata": {"name": "cj", "namespace": "ns"},
            "spec": {"jobTemplate": {"spec": {"template": {"spec": {"containers": [{
                "name": "c", "volumeMounts": [{"name": "v", "mountPath": "/v"}]
            }], "volumes": [{"name": "v", "secret": {"secretName": "s"}}]}}}}}
        });
        let e = workload_entry(WorkloadKind::CronJob, &obj, &AnnotationKeys::default()).unwrap();
        assert_eq!(&*e.uses[0].name, "s");
        assert_eq!(e.uses[0].kind, ConfigKind::Secret);
    }
}
