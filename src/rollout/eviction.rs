//! Restarts by eviction against the API server: one step per write attempt (see
//! `pod_restart` for the steps and why the record lives on the workload). Pods are evicted
//! through the Eviction API, never deleted, so a PodDisruptionBudget that allows no disruption
//! blocks the restart (429): the write is retried with backoff and reported like any failing
//! write, and goes on once the budget allows it.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::api::{Api, DynamicObject, EvictParams, ListParams, Patch, PatchParams};
use kube::core::Selector;
use serde_json::{Value, json};
use tracing::info;

use crate::config::AnnotationKeys;
use crate::model::{WorkloadKey, WorkloadKind};
use crate::pod_restart::{EvictionStep, PodView, RestartRecord, config_id, next_step};
use crate::reloader_format::template::TemplateChange;

use super::queue::{WriteError, WriteTurn, classify};

/// How a restart attempt ended, when it did not only make a step.
pub(super) enum Restarted {
    /// Every pod already ran the values.
    UpToDate,
    /// The last pod recorded when the restart began is gone and the record says so.
    Done,
}

/// One step of restarting `key`'s pods for `changes`; `Err(Progressing)` after a step that
/// leaves more to do.
pub(super) async fn restart_step(
    client: &kube::Client,
    workload: &Api<DynamicObject>,
    key: &WorkloadKey,
    object: &DynamicObject,
    changes: &[TemplateChange],
    keys: &AnnotationKeys,
    turn: &WriteTurn<'_>,
) -> Result<Restarted, WriteError> {
    let annotations = object.metadata.annotations.clone().unwrap_or_default();
    let record = RestartRecord::parse(annotations.get(&keys.restarted_for).map(String::as_str))
        .unwrap_or_else(|error| {
            tracing::warn!(workload = %key, %error, "bad restart record, starting afresh");
            RestartRecord::default()
        });
    let target: BTreeMap<String, String> = changes
        .iter()
        .map(|c| (config_id(&c.config), c.hash.clone().unwrap_or_default()))
        .collect();
    let pods_api: Api<Pod> = Api::namespaced(client.clone(), &key.namespace);
    let pods = match key.kind {
        WorkloadKind::Pod => vec![itself(key, object)?],
        _ => pods_of(&pods_api, key, object).await?,
    };
    let desired = desired_pods(key.kind, &object.data);
    let step = next_step(&record, &target, &pods, desired, jiff::Timestamp::now());
    tracing::debug!(workload = %key, step = step.name(), pods = pods.len(), desired, "restart step");
    match step {
        EvictionStep::UpToDate => Ok(Restarted::UpToDate),
        EvictionStep::Begin(record) => {
            turn.take().await;
            write_record(workload, key, object, keys, &record).await?;
            info!(workload = %key, configs = ?target.keys().collect::<Vec<_>>(),
                "restart by eviction begun");
            Err(WriteError::Progressing("restart begun".into()))
        }
        EvictionStep::Wait(why) => Err(WriteError::Progressing(why)),
        EvictionStep::Evict(pod) => {
            turn.take().await;
            evict(&pods_api, key, &pod).await?;
            match key.kind {
                // The pod was the workload: it is gone, and its record with it.
                WorkloadKind::Pod => Ok(Restarted::Done),
                _ => Err(WriteError::Progressing(format!("evicted pod {pod}"))),
            }
        }
        EvictionStep::Finish(record) => {
            turn.take().await;
            write_record(workload, key, object, keys, &record).await?;
            Ok(Restarted::Done)
        }
    }
}

/// Evicts one pod. A budget that allows no disruption answers 429: retried with backoff and
/// reported, never worked around. A pod already gone is a step done.
async fn evict(pods: &Api<Pod>, key: &WorkloadKey, pod: &str) -> Result<(), WriteError> {
    match pods.evict(pod, &EvictParams::default()).await {
        Ok(_) => {
            info!(workload = %key, pod, "pod evicted for a reload");
            Ok(())
        }
        Err(kube::Error::Api(s)) if s.code == 429 => Err(WriteError::Transient(format!(
            "eviction of pod {pod} blocked by a PodDisruptionBudget: {}",
            s.message
        ))),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(classify(e)),
    }
}

/// Writes the record on the workload's metadata, guarded by the resourceVersion read (a
/// merge patch carrying it fails with 409 if the workload changed since). Metadata only: the
/// workload's controller rolls nothing.
async fn write_record(
    workload: &Api<DynamicObject>,
    key: &WorkloadKey,
    object: &DynamicObject,
    keys: &AnnotationKeys,
    record: &RestartRecord,
) -> Result<(), WriteError> {
    let patch = json!({"metadata": {
        "resourceVersion": object.metadata.resource_version,
        "annotations": {keys.restarted_for.as_str(): record.to_json()},
    }});
    workload
        .patch(&key.name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(classify)?;
    Ok(())
}

/// The workload's pods, by its selector. An empty or unreadable selector would select every pod
/// of the namespace: refused.
async fn pods_of(
    pods: &Api<Pod>,
    key: &WorkloadKey,
    object: &DynamicObject,
) -> Result<Vec<PodView>, WriteError> {
    let selector = selector_of(key.kind, &object.data, &key.name).ok_or_else(|| {
        WriteError::Permanent(format!(
            "{key} has no usable pod selector: its pods cannot be told apart for eviction"
        ))
    })?;
    let list = pods
        .list(&ListParams::default().labels_from(&selector))
        .await
        .map_err(classify)?;
    Ok(list.items.iter().filter_map(pod_view).collect())
}

fn selector_of(kind: WorkloadKind, data: &Value, name: &str) -> Option<Selector> {
    use crate::custom_kinds::PodSelection;
    let pointer = match kind.custom().map(|c| &c.pods) {
        // A declared kind whose pods carry its name in a label (Knative's
        // serving.knative.dev/service).
        Some(PodSelection::NameLabel(label)) => {
            return Some([(label.clone(), name.to_string())].into_iter().collect());
        }
        Some(PodSelection::Selector(pointer)) => pointer.as_str(),
        None => "/spec/selector",
    };
    let raw = data.pointer(pointer)?;
    let selector = match kind {
        // A DeploymentConfig's selector is a plain label map.
        WorkloadKind::DeploymentConfig => {
            serde_json::from_value::<BTreeMap<String, String>>(raw.clone())
                .ok()?
                .into_iter()
                .collect::<Selector>()
        }
        _ => Selector::try_from(serde_json::from_value::<LabelSelector>(raw.clone()).ok()?).ok()?,
    };
    (!selector.selects_all()).then_some(selector)
}

/// A labelled pod reloaded as a workload of its own: it is its only pod.
fn itself(key: &WorkloadKey, object: &DynamicObject) -> Result<PodView, WriteError> {
    let pod: Option<Pod> = object.clone().try_parse().ok();
    pod.as_ref().and_then(pod_view).ok_or_else(|| {
        WriteError::Permanent(format!(
            "{key} cannot be read as a pod (no name, uid or creation time)"
        ))
    })
}

fn pod_view(pod: &Pod) -> Option<PodView> {
    let ready = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    Some(PodView {
        name: pod.metadata.name.clone()?,
        uid: pod.metadata.uid.clone()?,
        created: pod.metadata.creation_timestamp.as_ref()?.0,
        terminating: pod.metadata.deletion_timestamp.is_some(),
        ready,
    })
}

/// How many Ready pods the workload wants: its replicas (1 when unset), or for a DaemonSet
/// the nodes it is scheduled to. A labelled pod is evicted whether Ready or not: nothing
/// replaces it that the eviction could wait for.
fn desired_pods(kind: WorkloadKind, data: &Value) -> usize {
    let count = match kind {
        WorkloadKind::Pod => return 0,
        WorkloadKind::DaemonSet => data.pointer("/status/desiredNumberScheduled"),
        _ => data.pointer("/spec/replicas"),
    };
    count
        .and_then(Value::as_u64)
        .map_or(1, |n| usize::try_from(n).unwrap_or(usize::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors_of_each_shape_and_no_empty_one() {
        let deployment = json!({"spec": {"selector": {"matchLabels": {"app": "web"}}}});
        let s = selector_of(WorkloadKind::Deployment, &deployment, "web").unwrap();
        assert_eq!(s.to_string(), "app=web");
        let dc = json!({"spec": {"selector": {"app": "legacy"}}});
        let s = selector_of(WorkloadKind::DeploymentConfig, &dc, "dc").unwrap();
        assert_eq!(s.to_string(), "app=legacy");
        let empty = json!({"spec": {"selector": {}}});
        assert!(selector_of(WorkloadKind::Deployment, &empty, "web").is_none());
        assert!(selector_of(WorkloadKind::StatefulSet, &json!({"spec": {}}), "db").is_none());
    }

    #[test]
    fn a_declared_kind_finds_its_pods_by_its_label_or_its_selector() {
        use crate::custom_kinds::{CustomKind, register};
        let declare =
            |d: &str| WorkloadKind::Custom(register(CustomKind::parse(d).unwrap()).unwrap());
        let knative =
            declare("serving.knative.dev/v1/Service,pod-label=serving.knative.dev/service");
        let s = selector_of(knative, &json!({"spec": {}}), "hello").unwrap();
        assert_eq!(s.to_string(), "serving.knative.dev/service=hello");
        let nodeset = declare("slinky.slurm.net/v1alpha1/NodeSet,selector=/spec/podSelector");
        let data = json!({"spec": {"podSelector": {"matchLabels": {"set": "gpu"}}}});
        assert_eq!(
            selector_of(nodeset, &data, "gpu").unwrap().to_string(),
            "set=gpu"
        );
        assert!(selector_of(nodeset, &json!({"spec": {}}), "gpu").is_none());
    }

    #[test]
    fn desired_pods_per_kind() {
        let scaled = json!({"spec": {"replicas": 3}});
        assert_eq!(desired_pods(WorkloadKind::Deployment, &scaled), 3);
        assert_eq!(
            desired_pods(WorkloadKind::StatefulSet, &json!({"spec": {}})),
            1
        );
        let ds = json!({"status": {"desiredNumberScheduled": 4}});
        assert_eq!(desired_pods(WorkloadKind::DaemonSet, &ds), 4);
        assert_eq!(desired_pods(WorkloadKind::Pod, &scaled), 0);
    }
}
