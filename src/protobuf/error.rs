//! What can go wrong reading protobuf, and its media type.

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
