//! `ObjectMeta` without `managedFields`: often the largest part of an object's metadata, and
//! nothing here reads it, so prost skips it without building it.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use k8s_pb::apimachinery::pkg::apis::meta::v1 as pb;
use prost::Message;

/// Tags from k8s.io/apimachinery's `generated.proto`; 17 (managedFields) is left out.
#[derive(Clone, PartialEq, Message)]
pub(super) struct Meta {
    #[prost(string, optional, tag = "1")]
    name: Option<String>,
    #[prost(string, optional, tag = "2")]
    generate_name: Option<String>,
    #[prost(string, optional, tag = "3")]
    namespace: Option<String>,
    #[prost(string, optional, tag = "4")]
    self_link: Option<String>,
    #[prost(string, optional, tag = "5")]
    uid: Option<String>,
    #[prost(string, optional, tag = "6")]
    resource_version: Option<String>,
    #[prost(int64, optional, tag = "7")]
    generation: Option<i64>,
    #[prost(message, optional, tag = "8")]
    creation_timestamp: Option<pb::Time>,
    #[prost(message, optional, tag = "9")]
    deletion_timestamp: Option<pb::Time>,
    #[prost(int64, optional, tag = "10")]
    deletion_grace_period_seconds: Option<i64>,
    #[prost(btree_map = "string, string", tag = "11")]
    labels: BTreeMap<String, String>,
    #[prost(btree_map = "string, string", tag = "12")]
    annotations: BTreeMap<String, String>,
    #[prost(message, repeated, tag = "13")]
    owner_references: Vec<pb::OwnerReference>,
    #[prost(string, repeated, tag = "14")]
    finalizers: Vec<String>,
}

/// An empty map or list is absent, as in JSON (the API server omits them).
fn some_map(map: BTreeMap<String, String>) -> Option<BTreeMap<String, String>> {
    (!map.is_empty()).then_some(map)
}

/// Go writes a string field that is not a pointer even when empty; JSON omits it.
fn some_text(text: Option<String>) -> Option<String> {
    text.filter(|t| !t.is_empty())
}

/// The zero time (never set) is absent, as in JSON.
fn time(t: pb::Time) -> Option<Time> {
    if t.seconds.unwrap_or_default() == 0 && t.nanos.unwrap_or_default() == 0 {
        return None;
    }
    let at = jiff::Timestamp::new(t.seconds.unwrap_or_default(), t.nanos.unwrap_or_default());
    at.ok().map(Time)
}

fn owner(o: pb::OwnerReference) -> OwnerReference {
    OwnerReference {
        api_version: o.api_version.unwrap_or_default(),
        block_owner_deletion: o.block_owner_deletion,
        controller: o.controller,
        kind: o.kind.unwrap_or_default(),
        name: o.name.unwrap_or_default(),
        uid: o.uid.unwrap_or_default(),
    }
}

impl From<Meta> for ObjectMeta {
    fn from(m: Meta) -> Self {
        ObjectMeta {
            annotations: some_map(m.annotations),
            creation_timestamp: m.creation_timestamp.and_then(time),
            deletion_grace_period_seconds: m.deletion_grace_period_seconds,
            deletion_timestamp: m.deletion_timestamp.and_then(time),
            finalizers: (!m.finalizers.is_empty()).then_some(m.finalizers),
            generate_name: some_text(m.generate_name),
            // `omitempty` in Go: 0 is not written in JSON.
            generation: m.generation.filter(|g| *g != 0),
            labels: some_map(m.labels),
            managed_fields: None,
            name: some_text(m.name),
            namespace: some_text(m.namespace),
            owner_references: (!m.owner_references.is_empty())
                .then(|| m.owner_references.into_iter().map(owner).collect()),
            resource_version: some_text(m.resource_version),
            self_link: some_text(m.self_link),
            uid: some_text(m.uid),
        }
    }
}
