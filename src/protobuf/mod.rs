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
mod error;
mod meta;
mod objects;
mod template;
mod template_wire;

pub use envelope::{
    Bookmark, EventType, ListPage, RawEvent, bookmark, list_page, status, status_body, unwrap,
    watch_event,
};
pub use error::{DecodeError, MEDIA_TYPE};
pub use objects::{Decode, FromProtobuf, speaks_protobuf, workload, workload_decoder};

#[cfg(test)]
mod tests;
