//! The objects the watches read, from protobuf: configs and namespaces as k8s-openapi's types,
//! workloads as the index's [`WorkloadObject`].

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use prost::Message;

use super::error::DecodeError;
use super::meta::Meta;
use super::template::decode_pod_template;
use crate::index::{ProtobufTemplate, WorkloadObject};
use crate::model::WorkloadKind;

/// A kind the API server serves in protobuf, read from an object's bytes (no envelope).
pub trait FromProtobuf: Sized {
    fn from_protobuf(object: Bytes) -> Result<Self, DecodeError>;
}

#[derive(Clone, PartialEq, Message)]
struct ConfigMapWire {
    #[prost(message, optional, tag = "1")]
    metadata: Option<Meta>,
    #[prost(btree_map = "string, string", tag = "2")]
    data: BTreeMap<String, String>,
    #[prost(btree_map = "string, bytes", tag = "3")]
    binary_data: BTreeMap<String, Vec<u8>>,
}

impl FromProtobuf for ConfigMap {
    fn from_protobuf(object: Bytes) -> Result<Self, DecodeError> {
        let cm = ConfigMapWire::decode(object)?;
        Ok(ConfigMap {
            metadata: cm.metadata.unwrap_or_default().into(),
            data: (!cm.data.is_empty()).then_some(cm.data),
            binary_data: (!cm.binary_data.is_empty()).then(|| bytes_map(cm.binary_data)),
            immutable: None,
        })
    }
}

fn bytes_map(map: BTreeMap<String, Vec<u8>>) -> BTreeMap<String, ByteString> {
    map.into_iter().map(|(k, v)| (k, ByteString(v))).collect()
}

/// A Secret: its data are bytes on the wire (JSON has them in base64).
#[derive(Clone, PartialEq, Message)]
struct SecretWire {
    #[prost(message, optional, tag = "1")]
    metadata: Option<Meta>,
    #[prost(btree_map = "string, bytes", tag = "2")]
    data: BTreeMap<String, Vec<u8>>,
    #[prost(string, optional, tag = "3")]
    r#type: Option<String>,
    #[prost(btree_map = "string, string", tag = "4")]
    string_data: BTreeMap<String, String>,
}

impl FromProtobuf for Secret {
    fn from_protobuf(object: Bytes) -> Result<Self, DecodeError> {
        let s = SecretWire::decode(object)?;
        Ok(Secret {
            metadata: s.metadata.unwrap_or_default().into(),
            data: (!s.data.is_empty()).then(|| bytes_map(s.data)),
            string_data: (!s.string_data.is_empty()).then_some(s.string_data),
            type_: s.r#type,
            immutable: None,
        })
    }
}

/// A namespace: its metadata is all the namespace watch reads (labels, deletion).
#[derive(Clone, PartialEq, Message)]
struct NamespaceWire {
    #[prost(message, optional, tag = "1")]
    metadata: Option<Meta>,
}

impl FromProtobuf for Namespace {
    fn from_protobuf(object: Bytes) -> Result<Self, DecodeError> {
        let ns = NamespaceWire::decode(object)?;
        Ok(Namespace {
            metadata: ns.metadata.unwrap_or_default().into(),
            ..Default::default()
        })
    }
}

/// A workload's metadata and its spec's `S` (tags differ by kind).
macro_rules! workload_wire {
    ($name:ident, $spec:ty) => {
        #[derive(Clone, PartialEq, Message)]
        struct $name {
            #[prost(message, optional, tag = "1")]
            metadata: Option<Meta>,
            #[prost(message, optional, tag = "2")]
            spec: Option<$spec>,
        }
    };
}

/// Tags from k8s.io/api's `generated.proto`: the template (its bytes, decoded when the index
/// entry is built), and `paused` where it exists.
#[derive(Clone, PartialEq, Message)]
struct DeploymentSpec {
    #[prost(bytes = "bytes", optional, tag = "3")]
    template: Option<Bytes>,
    #[prost(bool, optional, tag = "7")]
    paused: Option<bool>,
}

#[derive(Clone, PartialEq, Message)]
struct StatefulSetSpec {
    #[prost(bytes = "bytes", optional, tag = "3")]
    template: Option<Bytes>,
}

#[derive(Clone, PartialEq, Message)]
struct DaemonSetSpec {
    #[prost(bytes = "bytes", optional, tag = "2")]
    template: Option<Bytes>,
}

#[derive(Clone, PartialEq, Message)]
struct JobSpec {
    #[prost(bytes = "bytes", optional, tag = "6")]
    template: Option<Bytes>,
}

#[derive(Clone, PartialEq, Message)]
struct JobTemplate {
    #[prost(message, optional, tag = "2")]
    spec: Option<JobSpec>,
}

#[derive(Clone, PartialEq, Message)]
struct CronJobSpec {
    #[prost(message, optional, tag = "5")]
    job_template: Option<JobTemplate>,
}

/// A pod: its metadata; the pod is its own template. A `PodTemplateSpec` has a pod's tags for
/// `metadata` (1) and `spec` (2), so the pod's bytes are read as its template (its `status`,
/// tag 3, skipped as an unknown field).
#[derive(Clone, PartialEq, Message)]
struct PodWire {
    #[prost(message, optional, tag = "1")]
    metadata: Option<Meta>,
}

workload_wire!(DeploymentWire, DeploymentSpec);
workload_wire!(StatefulSetWire, StatefulSetSpec);
workload_wire!(DaemonSetWire, DaemonSetSpec);
workload_wire!(JobWire, JobSpec);
workload_wire!(CronJobWire, CronJobSpec);

/// Reads a workload of `kind` (a kind that [`speaks_protobuf`]).
pub fn workload(kind: WorkloadKind, object: Bytes) -> Result<WorkloadObject, DecodeError> {
    let parts = match kind {
        WorkloadKind::Deployment => DeploymentWire::decode(object).map(|w| {
            let spec = w.spec.unwrap_or_default();
            (w.metadata, spec.template, spec.paused == Some(true))
        }),
        WorkloadKind::StatefulSet => StatefulSetWire::decode(object)
            .map(|w| (w.metadata, w.spec.and_then(|s| s.template), false)),
        WorkloadKind::DaemonSet => DaemonSetWire::decode(object)
            .map(|w| (w.metadata, w.spec.and_then(|s| s.template), false)),
        WorkloadKind::Job => {
            JobWire::decode(object).map(|w| (w.metadata, w.spec.and_then(|s| s.template), false))
        }
        WorkloadKind::CronJob => CronJobWire::decode(object).map(|w| {
            let template = w.spec.and_then(|s| s.job_template?.spec?.template);
            (w.metadata, template, false)
        }),
        WorkloadKind::Pod => {
            let whole = object.clone();
            PodWire::decode(object).map(|w| (w.metadata, Some(whole), false))
        }
        WorkloadKind::Rollout | WorkloadKind::DeploymentConfig | WorkloadKind::Custom(_) => {
            return Err(DecodeError::CustomResource(kind));
        }
    }?;
    let (meta, template, paused) = parts;
    let metadata = meta.unwrap_or_default().into();
    let template = template.map(|bytes| ProtobufTemplate {
        bytes,
        decode: decode_pod_template,
    });
    Ok(WorkloadObject::decoded(metadata, template, paused))
}

/// Whether the API server serves `kind` in protobuf (built-in kinds; custom resources never).
pub fn speaks_protobuf(kind: WorkloadKind) -> bool {
    !matches!(
        kind,
        WorkloadKind::Rollout | WorkloadKind::DeploymentConfig | WorkloadKind::Custom(_)
    )
}

/// Decodes one object of a kind (no envelope), for a list or watch read in protobuf.
pub type Decode<T> = Arc<dyn Fn(Bytes) -> Result<T, DecodeError> + Send + Sync>;

/// The decoder of workloads of `kind`, when the API server serves it in protobuf.
pub fn workload_decoder(kind: WorkloadKind) -> Option<Decode<WorkloadObject>> {
    speaks_protobuf(kind).then(|| Arc::new(move |object| workload(kind, object)) as Decode<_>)
}
