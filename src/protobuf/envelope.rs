//! The envelope around every object (`k8s\0` and a `runtime.Unknown`), list pages, watch
//! frames and the `Status` of an error.

use std::collections::BTreeMap;

use bytes::Bytes;
use kube::core::Status;
use prost::Message;

use super::error::DecodeError;

/// The four bytes kube-apiserver puts before a protobuf `runtime.Unknown`.
const MAGIC: &[u8; 4] = b"k8s\0";

/// `runtime.Unknown` without its type meta, content type and encoding (never set by the API
/// server for protobuf objects).
#[derive(Clone, PartialEq, Message)]
struct Unknown {
    #[prost(bytes = "bytes", optional, tag = "2")]
    raw: Option<Bytes>,
}

/// The object inside an envelope.
pub fn unwrap(mut wire: Bytes) -> Result<Bytes, DecodeError> {
    if !wire.starts_with(MAGIC) {
        return Err(DecodeError::NoEnvelope);
    }
    let unknown = Unknown::decode(wire.split_off(MAGIC.len()))?;
    unknown.raw.ok_or(DecodeError::Empty)
}

/// A list page: `metadata` and the items as bytes, each decoded only when it is handed on (a
/// list of messages and a list of bytes are the same on the wire).
#[derive(Clone, PartialEq, Message)]
struct ListWire {
    #[prost(message, optional, tag = "1")]
    metadata: Option<k8s_pb::apimachinery::pkg::apis::meta::v1::ListMeta>,
    #[prost(bytes = "bytes", repeated, tag = "2")]
    items: Vec<Bytes>,
}

/// One page of a LIST.
#[derive(Debug, Default)]
pub struct ListPage {
    pub resource_version: Option<String>,
    pub continue_token: Option<String>,
    /// Each item's bytes (no envelope: items are bare messages).
    pub items: Vec<Bytes>,
}

/// Reads a LIST response body.
pub fn list_page(body: Bytes) -> Result<ListPage, DecodeError> {
    let list = ListWire::decode(unwrap(body)?)?;
    let meta = list.metadata.unwrap_or_default();
    let non_empty = |s: Option<String>| s.filter(|s| !s.is_empty());
    Ok(ListPage {
        resource_version: non_empty(meta.resource_version),
        continue_token: non_empty(meta.r#continue),
        items: list.items,
    })
}

#[derive(Clone, PartialEq, Message)]
struct RawExtension {
    #[prost(bytes = "bytes", optional, tag = "1")]
    raw: Option<Bytes>,
}

/// `metav1.WatchEvent`: a watch stream's frames are these, without an envelope; the object
/// inside has one.
#[derive(Clone, PartialEq, Message)]
struct WatchEventWire {
    #[prost(string, optional, tag = "1")]
    r#type: Option<String>,
    #[prost(message, optional, tag = "2")]
    object: Option<RawExtension>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
    Bookmark,
    Error,
}

/// One watch event, its object still to decode (by its kind's decoder, [`bookmark`] or
/// [`status`]).
#[derive(Debug)]
pub struct RawEvent {
    pub kind: EventType,
    pub object: Bytes,
}

/// Reads one frame of a watch stream (the 4-byte length prefix already taken off).
pub fn watch_event(frame: Bytes) -> Result<RawEvent, DecodeError> {
    let event = WatchEventWire::decode(frame)?;
    let kind = match event.r#type.as_deref().unwrap_or_default() {
        "ADDED" => EventType::Added,
        "MODIFIED" => EventType::Modified,
        "DELETED" => EventType::Deleted,
        "BOOKMARK" => EventType::Bookmark,
        "ERROR" => EventType::Error,
        other => return Err(DecodeError::EventType(other.to_owned())),
    };
    let raw = event.object.and_then(|o| o.raw).ok_or(DecodeError::Empty)?;
    Ok(RawEvent {
        kind,
        object: unwrap(raw)?,
    })
}

/// The metadata of a bookmark: all it carries.
#[derive(Clone, PartialEq, Message)]
struct MetadataOnly {
    #[prost(message, optional, tag = "1")]
    metadata: Option<BookmarkMeta>,
}

#[derive(Clone, PartialEq, Message)]
struct BookmarkMeta {
    #[prost(string, optional, tag = "6")]
    resource_version: Option<String>,
    #[prost(btree_map = "string, string", tag = "12")]
    annotations: BTreeMap<String, String>,
}

/// What a bookmark says: how far the watch has got, and whether the initial events of a
/// streaming list are all sent.
#[derive(Debug, PartialEq, Eq)]
pub struct Bookmark {
    pub resource_version: String,
    pub initial_events_end: bool,
}

/// The annotation on the bookmark that ends a streaming list's initial events.
const INITIAL_EVENTS_END: &str = "k8s.io/initial-events-end";

/// Reads a bookmark's object (any kind: only its metadata is read).
pub fn bookmark(object: Bytes) -> Result<Bookmark, DecodeError> {
    let meta = MetadataOnly::decode(object)?.metadata.unwrap_or_default();
    Ok(Bookmark {
        resource_version: meta.resource_version.unwrap_or_default(),
        initial_events_end: meta.annotations.contains_key(INITIAL_EVENTS_END),
    })
}

/// Reads a `Status` (an error response's body, or an ERROR event's object) as kube's type.
pub fn status(object: Bytes) -> Result<Status, DecodeError> {
    let status = k8s_pb::apimachinery::pkg::apis::meta::v1::Status::decode(object)?;
    let code = status.code.unwrap_or_default();
    Ok(Status::failure(
        status.message.as_deref().unwrap_or_default(),
        status.reason.as_deref().unwrap_or_default(),
    )
    .with_code(u16::try_from(code).unwrap_or_default()))
}

/// A `Status` body in its envelope.
pub fn status_body(body: Bytes) -> Result<Status, DecodeError> {
    status(unwrap(body)?)
}
