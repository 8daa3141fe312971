//! Kubernetes' own wire format (`application/vnd.kubernetes.protobuf`), decoded straight into
//! what the watches hand on: configs as the k8s-openapi types the digest reads (a Secret's data
//! arrive as bytes, so no base64 is undone), workloads as the index's [`WorkloadObject`] with
//! their pod template decoded to the part the index reads. Pure: bytes in, values out; the
//! requests are `watch/protobuf_watch.rs`.
//!
//! What prost does not build is skipped at no cost: managedFields, status and the rest of a
//! spec are never allocated. Custom resources have no protobuf form (the API server serves them
//! as JSON only), so Argo Rollouts, DeploymentConfigs and CSI pod statuses stay on JSON.
//!
//! [`WorkloadObject`]: crate::index::WorkloadObject

mod envelope;
mod meta;
mod objects;
mod template;

pub use envelope::{
    Bookmark, EventType, ListPage, RawEvent, bookmark, list_page, status, status_body, watch_event,
};
pub use objects::{FromProtobuf, speaks_protobuf, workload};

/// The media type of protobuf objects and lists.
pub const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";

/// Why a protobuf message could not be read.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    #[error("not a Kubernetes protobuf object (no k8s\\0 envelope)")]
    NoEnvelope,
    #[error("the envelope holds no object")]
    Empty,
    #[error("unknown watch event type {0:?}")]
    EventType(String),
    #[error(transparent)]
    Prost(#[from] prost::DecodeError),
    #[error("{0} is a custom resource: the API server serves it in JSON only")]
    CustomResource(crate::model::WorkloadKind),
}

#[cfg(test)]
mod tests;
