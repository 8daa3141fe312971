//! Server-side sharding (Kubernetes' sharded list and watch, KEP-5866): a tower layer under the
//! kube client appends this replica's `shardSelector` to its cluster-wide lists and watches of
//! the namespaced kinds it indexes, so the API server sends each replica only its own namespaces.
//!
//! The selector follows the shard view ([`SelectorFeed::publish`]). When it changes, every watch
//! body opened with the old one ends at an event boundary; kube-runtime's watcher then watches
//! again from the last resourceVersion it saw, and that request carries the new selector. Nothing
//! is lost by ending early: the new watch starts where the old one stopped.
//!
//! Objects are still checked on arrival (`Ownership::owns`), for two reasons: a server without the
//! feature gate ignores the parameter and sends everything, and between a view change and the
//! re-watch the old selector's objects keep arriving.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response, Uri};
use http_body::{Body, Frame, SizeHint};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use tokio::sync::watch;
use tower::{Layer, Service};

use crate::model::WorkloadKind;
use crate::resources::{api_resource, spc_pod_status_resource};
use crate::shard::ShardView;
use crate::shard::ranges::{HashRange, fnv1a64, selector, union};

/// The field every selector hashes.
pub const NAMESPACE_FIELD: &str = "object.metadata.namespace";
/// The query parameter the API server reads the selector from.
const PARAMETER: &str = "shardSelector";

/// The namespaced kinds whose cluster-wide lists and watches are sharded (plural names): the
/// configs and workloads the controller indexes. Cluster-scoped kinds (Namespaces) have no
/// namespace to hash; Leases and the assignment are read per namespace and never match.
/// Declared custom kinds are looked up apart: they are registered at start, after the built-in
/// list may have been read.
fn is_sharded_resource(resource: &str) -> bool {
    static BUILT_IN: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    let built_in = BUILT_IN.get_or_init(|| {
        let configs = ["configmaps".to_string(), "secrets".to_string()];
        let workloads = WorkloadKind::BUILT_IN.map(|kind| api_resource(kind).plural);
        configs
            .into_iter()
            .chain([spc_pod_status_resource().plural])
            .chain(workloads)
            .collect()
    });
    built_in.iter().any(|r| r == resource)
        || crate::custom_kinds::registered().any(|id| id.get().plural == resource)
}

/// The selector this replica sends, published by the shard view and read by the layer.
#[derive(Clone, Debug)]
pub struct SelectorFeed {
    sender: Arc<watch::Sender<Option<Arc<str>>>>,
}

impl Default for SelectorFeed {
    fn default() -> Self {
        Self {
            sender: Arc::new(watch::Sender::new(None)),
        }
    }
}

impl SelectorFeed {
    /// Sets the selector (`None`: send none). Open watches end only when it really changed.
    pub fn publish(&self, selector: Option<String>) -> bool {
        self.sender.send_if_modified(|current| {
            if current.as_deref() == selector.as_deref() {
                return false;
            }
            *current = selector.map(Arc::from);
            true
        })
    }

    pub fn current(&self) -> Option<Arc<str>> {
        self.sender.borrow().clone()
    }

    pub fn layer(&self) -> ServerFilterLayer {
        ServerFilterLayer {
            selector: self.sender.subscribe(),
        }
    }
}

/// True for a GET of a whole collection of a sharded kind across namespaces
/// (`/api/v1/configmaps`, `/apis/apps/v1/deployments`), a list or a watch.
pub fn is_sharded_collection(method: &http::Method, path: &str) -> bool {
    if method != http::Method::GET {
        return false;
    }
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let resource = match segments.as_slice() {
        ["api", _version, resource] => resource,
        ["apis", _group, _version, resource] => resource,
        _ => return false,
    };
    is_sharded_resource(resource)
}

/// What `selector` must escape in a query value (everything but letters and digits is safe to
/// escape; the server decodes it).
const QUERY_VALUE: &AsciiSet = NON_ALPHANUMERIC;

/// `uri` with `shardSelector=<selector>` appended, unless it already carries one.
pub fn with_selector(uri: &Uri, selector: &str) -> Option<Uri> {
    let query = uri.query().unwrap_or("");
    if query
        .split('&')
        .any(|p| p.split('=').next() == Some(PARAMETER))
    {
        return None;
    }
    let encoded = utf8_percent_encode(selector, QUERY_VALUE);
    let separator = if query.is_empty() { "" } else { "&" };
    let path_and_query = format!("{}?{query}{separator}{PARAMETER}={encoded}", uri.path());
    let mut parts = uri.clone().into_parts();
    parts.path_and_query = Some(path_and_query.parse().ok()?);
    Uri::from_parts(parts).ok()
}

/// The selector for what `member` acts on in `view`: its ranges in the current assignment and,
/// until it released them, in the previous one. `None` (send no selector) when an assignment is
/// not made of hash ranges (an older replica's rendezvous), or when `member` owns nothing.
pub fn selector_of(view: &ShardView, member: &str) -> Option<String> {
    selector(NAMESPACE_FIELD, &union(&acting_ranges(view, member)?, &[]))
}

/// `member`'s ranges in the current assignment and, until released, the previous one (not
/// merged: [`union`] merges); `None` when an assignment is not made of hash ranges.
fn acting_ranges(view: &ShardView, member: &str) -> Option<Vec<HashRange>> {
    let previous = view.previous.as_ref().filter(|_| !view.released_previous);
    let mut ranges = Vec::new();
    for assignment in [view.current.as_ref(), previous].into_iter().flatten() {
        ranges.extend(assignment.ranges_of(member)?);
    }
    Some(ranges)
}

/// A selector for the namespaces `member` gained: the ranges it acts on that hold any of
/// `namespaces`, merged. A handover's backfill lists each kind once with it, so the API server
/// sends just the gained share, not the replica's whole share again. `None` when an assignment
/// is not made of hash ranges, or when one of `namespaces` lies in none of those ranges (the
/// backfill then lists without it).
pub fn covering_selector(view: &ShardView, member: &str, namespaces: &[String]) -> Option<String> {
    let mine = acting_ranges(view, member)?;
    let mut hashes: Vec<u64> = namespaces.iter().map(|ns| fnv1a64(ns)).collect();
    hashes.sort_unstable();
    let merged = union(&mine, &[]);
    let inside = |h: u64| {
        let i = merged.partition_point(|r| r.start <= h);
        i > 0 && merged[i - 1].contains(h)
    };
    if !hashes.iter().all(|&h| inside(h)) {
        return None;
    }
    let covering: Vec<HashRange> = mine
        .into_iter()
        .filter(|range| {
            let first_inside = hashes.partition_point(|&h| h < range.start);
            hashes.get(first_inside).is_some_and(|&h| range.contains(h))
        })
        .collect();
    selector(NAMESPACE_FIELD, &union(&covering, &[]))
}

fn is_watch(uri: &Uri) -> bool {
    uri.query()
        .is_some_and(|q| q.split('&').any(|p| p == "watch=true" || p == "watch=1"))
}

#[derive(Clone)]
pub struct ServerFilterLayer {
    selector: watch::Receiver<Option<Arc<str>>>,
}

impl<S> Layer<S> for ServerFilterLayer {
    type Service = ServerFilter<S>;
    fn layer(&self, inner: S) -> Self::Service {
        ServerFilter {
            inner,
            selector: self.selector.clone(),
        }
    }
}

#[derive(Clone)]
pub struct ServerFilter<S> {
    inner: S,
    selector: watch::Receiver<Option<Arc<str>>>,
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for ServerFilter<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    S::Future: Send + 'static,
    ResBody: Body<Data = Bytes> + Send + 'static,
{
    type Response = Response<EndOnChange<ResBody>>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<ReqBody>) -> Self::Future {
        let sent = self.selector.borrow().clone();
        let mut watch_until_changed = None;
        if is_sharded_collection(req.method(), req.uri().path()) {
            // Also a watch opened without one: it re-opens once a selector is published.
            if is_watch(req.uri()) {
                watch_until_changed = Some(until_changed(self.selector.clone(), sent.clone()));
            }
            if let Some(uri) = sent.as_deref().and_then(|s| with_selector(req.uri(), s)) {
                *req.uri_mut() = uri;
            }
        }
        let fut = self.inner.call(req);
        Box::pin(async move {
            let response = fut.await?;
            let content_type = response.headers().get(http::header::CONTENT_TYPE);
            let framing = Framing::of(content_type.and_then(|v| v.to_str().ok()));
            Ok(response.map(|body| EndOnChange::new(body, watch_until_changed, framing)))
        })
    }
}

type Changed = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Resolves once the published selector differs from `sent` (never if the feed is gone).
fn until_changed(
    mut selector: watch::Receiver<Option<Arc<str>>>,
    sent: Option<Arc<str>>,
) -> Changed {
    Box::pin(async move {
        if selector.wait_for(|now| *now != sent).await.is_err() {
            std::future::pending::<()>().await;
        }
    })
}

/// A response body that, for a watch, ends at the first event boundary after the selector it was
/// opened with changed: JSON watch events are newline-delimited, protobuf ones are frames of a
/// 4-byte length and that many bytes ([`Framing`]).
pub struct EndOnChange<B> {
    inner: Pin<Box<B>>,
    /// `None`: not a sharded watch, passed through untouched.
    changed: Option<Changed>,
    selector_changed: bool,
    /// Where the bytes passed on so far stand in the stream's events.
    framing: Framing,
    ended: bool,
}

impl<B> EndOnChange<B> {
    fn new(inner: B, changed: Option<Changed>, framing: Framing) -> Self {
        Self {
            inner: Box::pin(inner),
            changed,
            selector_changed: false,
            framing,
            ended: false,
        }
    }
}

/// How a watch body's events are delimited, and where the bytes seen so far stand.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Framing {
    /// JSON: one event per line; `true` when the last byte seen was a `\n` (or none was seen).
    Lines(bool),
    /// Protobuf: `header` holds the first `header_read` bytes of the next frame's length, then
    /// `body_left` bytes of its event follow.
    LengthPrefixed {
        header: [u8; 4],
        header_read: usize,
        body_left: usize,
    },
}

impl Framing {
    /// The framing of a response with this content type, at its start.
    pub fn of(content_type: Option<&str>) -> Self {
        match content_type.is_some_and(|t| t.contains("protobuf")) {
            true => Framing::LengthPrefixed {
                header: [0; 4],
                header_read: 0,
                body_left: 0,
            },
            false => Framing::Lines(true),
        }
    }

    /// Between two events.
    pub fn at_boundary(&self) -> bool {
        match self {
            Framing::Lines(at) => *at,
            Framing::LengthPrefixed {
                header_read,
                body_left,
                ..
            } => *header_read == 0 && *body_left == 0,
        }
    }

    /// Takes in `chunk`; returns the offset just after the first event that ends inside it.
    pub fn advance(&mut self, chunk: &[u8]) -> Option<usize> {
        let mut first_end = None;
        let mut at = 0;
        while at < chunk.len() {
            let taken = self.take(&chunk[at..]);
            at += taken;
            if self.at_boundary() && first_end.is_none() {
                first_end = Some(at);
            }
            if taken == 0 {
                break;
            }
        }
        first_end
    }

    /// Takes in what it can of `bytes` up to the end of the current event (or length).
    fn take(&mut self, bytes: &[u8]) -> usize {
        match self {
            Framing::Lines(at) => {
                let end = bytes.iter().position(|b| *b == b'\n');
                *at = end.is_some();
                end.map_or(bytes.len(), |i| i + 1)
            }
            Framing::LengthPrefixed {
                header,
                header_read,
                body_left,
            } => {
                if *body_left > 0 {
                    let n = (*body_left).min(bytes.len());
                    *body_left -= n;
                    return n;
                }
                let n = (4 - *header_read).min(bytes.len());
                header[*header_read..*header_read + n].copy_from_slice(&bytes[..n]);
                *header_read += n;
                if *header_read == 4 {
                    *header_read = 0;
                    *body_left = u32::from_be_bytes(*header) as usize;
                    // An empty frame ends where its length does; otherwise mid-event.
                }
                n
            }
        }
    }
}

impl<B: Body<Data = Bytes>> Body for EndOnChange<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = self.get_mut();
        if this.ended {
            return Poll::Ready(None);
        }
        if let Some(changed) = this.changed.as_mut()
            && !this.selector_changed
            && changed.as_mut().poll(cx).is_ready()
        {
            this.selector_changed = true;
        }
        if this.selector_changed && this.framing.at_boundary() {
            this.ended = true;
            tracing::debug!("the shard selector changed: the watch ends, to re-open with it");
            return Poll::Ready(None);
        }
        let frame = match this.inner.as_mut().poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => frame,
            other => return other,
        };
        let Some(data) = frame.data_ref() else {
            return Poll::Ready(Some(Ok(frame)));
        };
        let first_end = this.framing.advance(data);
        if this.selector_changed
            && let Some(cut) = first_end
        {
            this.ended = true;
            tracing::debug!("the shard selector changed: the watch ends, to re-open with it");
            return Poll::Ready(Some(Ok(Frame::data(data.slice(..cut)))));
        }
        Poll::Ready(Some(Ok(frame)))
    }

    fn is_end_stream(&self) -> bool {
        self.ended || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        match self.changed {
            Some(_) => SizeHint::default(),
            None => self.inner.size_hint(),
        }
    }
}

#[cfg(test)]
mod tests;
