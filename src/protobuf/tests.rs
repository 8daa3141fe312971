//! The protobuf decoders against what kube-apiserver really sends: the same objects captured in
//! both formats (`hack/wire-fixtures.sh`, `benches/fixtures/wire/`) must give the same index
//! entry, the same digest and the same metadata; envelopes, lists and watch events are built
//! with k8s-pb's own types, not with the slim messages under test.

use bytes::Bytes;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta_pb;
use k8s_pb::apimachinery::pkg::runtime as runtime_pb;
use kube::Resource;
use prost::Message;

use super::*;
use crate::config::AnnotationKeys;
use crate::digest::ConfigSource;
use crate::index::{WorkloadObject, workload_entry_from_object};
use crate::model::WorkloadKind;
use crate::reloader_format::hash::digest_payload;

fn fixture(name: &str) -> Bytes {
    let path = format!(
        "{}/benches/fixtures/wire/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    Bytes::from(std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}")))
}

/// The object inside a captured protobuf GET.
fn object(name: &str) -> Bytes {
    envelope::unwrap(fixture(name)).expect("an envelope")
}

fn entries_agree(name: &str) -> String {
    let keys = AnnotationKeys::default();
    let json: WorkloadObject = serde_json::from_slice(&fixture(&format!("{name}.json"))).unwrap();
    let pb = workload(WorkloadKind::Deployment, object(&format!("{name}.pb"))).unwrap();
    let from_json = workload_entry_from_object(WorkloadKind::Deployment, &json, &keys).unwrap();
    let from_pb = workload_entry_from_object(WorkloadKind::Deployment, &pb, &keys).unwrap();
    let (json_text, pb_text) = (format!("{from_json:?}"), format!("{from_pb:?}"));
    assert_eq!(json_text, pb_text, "{name}: the index entry differs");
    assert_eq!(json.metadata, pb.metadata, "{name}: the metadata differ");
    assert_eq!(json.paused(), pb.paused());
    pb_text
}

#[test]
fn a_deployment_gives_the_same_index_entry_in_both_formats() {
    let entry = entries_agree("deployment");
    assert!(
        entry.contains("cm-1005") && entry.contains("sec-1005"),
        "{entry}"
    );
}

/// Every way a template uses a config: env keys, envFrom, mounted volumes with and without
/// items, projected sources, CSI, init containers, a subPath mount, an unmounted volume, a
/// recorded hash in an env var; and `spec.paused`, labels and annotations.
#[test]
fn every_kind_of_reference_reads_the_same_in_both_formats() {
    let entry = entries_agree("references");
    for name in [
        "cm-key", "sec-key", "cm-env", "sec-env", "cm-vol", "sec-vol", "cm-proj", "sec-proj",
        "vault", "cm-sub", "sec-init", "cm-extra",
    ] {
        assert!(
            entry.contains(&format!("\"{name}\"")),
            "{name} missing: {entry}"
        );
    }
    assert!(entry.contains("0123abcd"), "the recorded hash: {entry}");
    assert!(
        entry.contains("paused: true") && entry.contains("canary: true"),
        "{entry}"
    );
    assert!(
        !entry.contains("sec-unmounted"),
        "an unmounted volume is no use: {entry}"
    );
}

#[test]
fn configs_give_the_same_object_and_digest_in_both_formats() {
    let cm_json: ConfigMap = serde_json::from_slice(&fixture("configmap.json")).unwrap();
    let cm_pb = ConfigMap::from_protobuf(object("configmap.pb")).unwrap();
    assert_eq!(cm_pb.data, cm_json.data);
    let without_managed = |mut m: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
        m.managed_fields = None;
        m
    };
    assert_eq!(cm_pb.metadata, without_managed(cm_json.metadata.clone()));
    assert!(cm_pb.meta().managed_fields.is_none());
    assert_eq!(
        digest_payload(cm_pb.into_payload()),
        digest_payload(cm_json.into_payload())
    );

    let secret_json: Secret = serde_json::from_slice(&fixture("secret.json")).unwrap();
    let secret_pb = Secret::from_protobuf(object("secret.pb")).unwrap();
    assert_eq!(secret_pb.type_, secret_json.type_);
    assert_eq!(
        secret_pb.metadata,
        without_managed(secret_json.metadata.clone())
    );
    assert_eq!(
        digest_payload(secret_pb.into_payload()),
        digest_payload(secret_json.into_payload())
    );
}

#[test]
fn custom_resources_are_not_read_in_protobuf() {
    for kind in WorkloadKind::BUILT_IN {
        let custom = matches!(kind, WorkloadKind::Rollout | WorkloadKind::DeploymentConfig);
        assert_eq!(speaks_protobuf(kind), !custom, "{kind:?}");
    }
    let error = workload(WorkloadKind::Rollout, object("deployment.pb")).unwrap_err();
    assert!(matches!(error, DecodeError::CustomResource(_)));
}

/// `k8s\0` and a `runtime.Unknown` around `raw`, as the API server writes them.
fn envelope_of(raw: Vec<u8>) -> Vec<u8> {
    let unknown = runtime_pb::Unknown {
        raw: Some(raw),
        ..Default::default()
    };
    [b"k8s\0".to_vec(), unknown.encode_to_vec()].concat()
}

#[test]
fn a_list_page_keeps_its_items_as_bytes_with_its_version_and_continue_token() {
    let item = object("configmap.pb").to_vec();
    let list = k8s_pb::api::core::v1::ConfigMapList {
        metadata: Some(meta_pb::ListMeta {
            resource_version: Some("42".into()),
            r#continue: Some("next".into()),
            ..Default::default()
        }),
        items: vec![k8s_pb::api::core::v1::ConfigMap::decode(&item[..]).unwrap(); 2],
    };
    let page = list_page(Bytes::from(envelope_of(list.encode_to_vec()))).unwrap();
    assert_eq!(page.resource_version.as_deref(), Some("42"));
    assert_eq!(page.continue_token.as_deref(), Some("next"));
    assert_eq!(page.items.len(), 2);
    let cm = ConfigMap::from_protobuf(page.items[1].clone()).unwrap();
    assert_eq!(cm.metadata.name.as_deref(), Some("app"));
    let last = k8s_pb::api::core::v1::ConfigMapList::default();
    let page = list_page(Bytes::from(envelope_of(last.encode_to_vec()))).unwrap();
    assert_eq!((page.resource_version, page.continue_token), (None, None));
    assert!(matches!(
        list_page(Bytes::from_static(b"{}")),
        Err(DecodeError::NoEnvelope)
    ));
}

/// The frames of a captured watch: a 4-byte big-endian length, then that many bytes.
fn frames(stream: &Bytes) -> Vec<Bytes> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < stream.len() {
        let len = u32::from_be_bytes(stream[at..at + 4].try_into().unwrap()) as usize;
        out.push(stream.slice(at + 4..at + 4 + len));
        at += 4 + len;
    }
    out
}

#[test]
fn a_captured_streaming_list_is_an_object_then_the_bookmark_that_ends_it() {
    let events: Vec<RawEvent> = frames(&fixture("watch-configmaps.pb"))
        .into_iter()
        .map(|f| watch_event(f).unwrap())
        .collect();
    let kinds: Vec<EventType> = events.iter().map(|e| e.kind).collect();
    assert_eq!(kinds, [EventType::Added, EventType::Bookmark]);
    let cm = ConfigMap::from_protobuf(events[0].object.clone()).unwrap();
    assert_eq!(cm.metadata.name.as_deref(), Some("app"));
    let mark = bookmark(events[1].object.clone()).unwrap();
    assert!(mark.initial_events_end);
    let listed: u64 = cm.metadata.resource_version.unwrap().parse().unwrap();
    assert!(mark.resource_version.parse::<u64>().unwrap() >= listed);
}

fn event_frame(kind: &str, raw: Vec<u8>) -> Bytes {
    let event = meta_pb::WatchEvent {
        r#type: Some(kind.into()),
        object: Some(runtime_pb::RawExtension {
            raw: Some(envelope_of(raw)),
        }),
    };
    Bytes::from(event.encode_to_vec())
}

#[test]
fn an_error_event_carries_its_status_and_code() {
    let gone = meta_pb::Status {
        message: Some("too old resource version: 1 (2)".into()),
        reason: Some("Expired".into()),
        code: Some(410),
        ..Default::default()
    };
    let event = watch_event(event_frame("ERROR", gone.encode_to_vec())).unwrap();
    assert_eq!(event.kind, EventType::Error);
    let status = status(event.object).unwrap();
    assert_eq!((status.code, status.reason.as_str()), (410, "Expired"));
    assert!(status.message.contains("too old"));
    let body = Bytes::from(envelope_of(gone.encode_to_vec()));
    assert_eq!(status_body(body).unwrap().code, 410);
    let unknown = watch_event(event_frame("RESTARTED", Vec::new()));
    assert!(matches!(unknown, Err(DecodeError::EventType(t)) if t == "RESTARTED"));
}

#[test]
fn a_bookmark_without_the_end_annotation_only_moves_the_version() {
    let mark = k8s_pb::api::core::v1::ConfigMap {
        metadata: Some(meta_pb::ObjectMeta {
            resource_version: Some("77".into()),
            ..Default::default()
        }),
        ..Default::default()
    };
    let event = watch_event(event_frame("BOOKMARK", mark.encode_to_vec())).unwrap();
    assert_eq!(
        bookmark(event.object).unwrap(),
        Bookmark {
            resource_version: "77".into(),
            initial_events_end: false
        }
    );
}

/// A pod is its own template: read from protobuf (its bytes read as a `PodTemplateSpec`, whose
/// `metadata` and `spec` tags are a pod's; `status` skipped) and from JSON (the spec fields the
/// index reads), it gives the same index entry: the same configs, annotations and labels.
#[test]
fn a_pod_is_read_as_its_own_template_in_both_formats() {
    use k8s_pb::api::core::v1 as core_pb;
    let keys = AnnotationKeys::default();
    let json = serde_json::json!({
        "metadata": {"name": "worker", "namespace": "ns", "uid": "u1",
            "labels": {"kube-reloader.io/restart-by": "eviction"},
            "annotations": {"reloader.stakater.com/auto": "true"}},
        "spec": {"nodeName": "n1",
            "containers": [{"name": "c", "image": "i", "envFrom": [{"secretRef": {"name": "creds"}}],
                "volumeMounts": [{"name": "v", "mountPath": "/etc/files"}]}],
            "volumes": [{"name": "v", "configMap": {"name": "files"}}]},
        "status": {"phase": "Running"}
    });
    let reference = |name: &str| {
        Some(core_pb::LocalObjectReference {
            name: Some(name.into()),
        })
    };
    let pod = core_pb::Pod {
        metadata: Some(meta_pb::ObjectMeta {
            name: Some("worker".into()),
            namespace: Some("ns".into()),
            uid: Some("u1".into()),
            labels: [("kube-reloader.io/restart-by".into(), "eviction".into())].into(),
            annotations: [("reloader.stakater.com/auto".into(), "true".into())].into(),
            ..Default::default()
        }),
        spec: Some(core_pb::PodSpec {
            node_name: Some("n1".into()),
            containers: vec![core_pb::Container {
                name: Some("c".into()),
                image: Some("i".into()),
                env_from: vec![core_pb::EnvFromSource {
                    secret_ref: Some(core_pb::SecretEnvSource {
                        local_object_reference: reference("creds"),
                        ..Default::default()
                    }),
                    ..Default::default()
                }],
                volume_mounts: vec![core_pb::VolumeMount {
                    name: Some("v".into()),
                    mount_path: Some("/etc/files".into()),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            volumes: vec![core_pb::Volume {
                name: Some("v".into()),
                volume_source: Some(core_pb::VolumeSource {
                    config_map: Some(core_pb::ConfigMapVolumeSource {
                        local_object_reference: reference("files"),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
            }],
            ..Default::default()
        }),
        status: Some(core_pb::PodStatus {
            phase: Some("Running".into()),
            ..Default::default()
        }),
    };
    let from_pb = workload(WorkloadKind::Pod, Bytes::from(pod.encode_to_vec())).unwrap();
    let from_json: WorkloadObject = serde_json::from_value(json).unwrap();
    let entry = |w: &WorkloadObject| workload_entry_from_object(WorkloadKind::Pod, w, &keys);
    let (pb_entry, json_entry) = (entry(&from_pb).unwrap(), entry(&from_json).unwrap());
    assert_eq!(format!("{pb_entry:?}"), format!("{json_entry:?}"));
    let text = format!("{json_entry:?}");
    for used in ["creds", "files"] {
        assert!(text.contains(used), "{used} not in {text}");
    }
    let template = from_json.pod_template(WorkloadKind::Pod).unwrap().unwrap();
    let labels = template.metadata.unwrap().labels.unwrap();
    assert_eq!(labels["kube-reloader.io/restart-by"], "eviction");
}
