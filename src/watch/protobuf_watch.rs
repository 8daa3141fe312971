//! Lists and watches in protobuf, with the same states as kube-runtime's `watcher` (so the
//! driver, the backoff and the relist diff see no difference): a paginated or streaming initial
//! list, a watch resumed from the last resourceVersion or bookmark, a relist after 410 Gone.
//! What differs is the wire: `Accept: application/vnd.kubernetes.protobuf`, a list page decoded
//! item by item as it is handed on, a watch read as length-prefixed frames.
//!
//! A server that does not serve protobuf answers 406 or 415 (or JSON): under
//! `--wire-format=auto` the stream then goes on as kube-runtime's JSON watcher
//! ([`with_json_fallback`]); under `protobuf` it is an error, retried with backoff and logged.

use std::collections::VecDeque;
use std::time::Duration;

use bytes::Bytes;
use futures::stream::BoxStream;
use futures::{Stream, StreamExt, TryStreamExt};
use http::header::{ACCEPT, ACCEPT_ENCODING, CONTENT_TYPE};
use http_body_util::BodyExt;
use kube::api::{ListParams, VersionMatch, WatchParams};
use kube::core::Status;
use kube::runtime::watcher::{self, Event, InitialListStrategy, ListSemantic};
use kube::{Client, Resource};
use tokio_util::codec::{FramedRead, LengthDelimitedCodec};
use tokio_util::io::StreamReader;
use tracing::{debug, error, warn};

use futures::stream::SelectAll;
use kube::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::watcher;
use serde::de::DeserializeOwned;

use super::context::{TaggedWatch, WatchContext};
use crate::config::WireFormat;
use crate::handover::gains::ListedPage;
use crate::protobuf::{self, Decode, DecodeError, EventType, MEDIA_TYPE, RawEvent};
use crate::shard::server_sharding::with_selector;

/// A frame bigger than this is not an object the API server would store (etcd's limit is
/// 1.5 MiB); it ends the watch as an error rather than growing the buffer without bound.
const MAX_FRAME: usize = 16 * 1024 * 1024;

/// kube-runtime's margin over the server's watch timeout before a silent watch counts as dead.
const IDLE_MARGIN: Duration = Duration::from_secs(5);

/// A collection read in protobuf: its URL path and how one of its objects is decoded.
pub(super) struct ProtobufApi<T> {
    client: Client,
    request: kube::core::Request,
    decode: Decode<T>,
}

impl<T> ProtobufApi<T> {
    pub(super) fn new(client: Client, url_path: &str, decode: Decode<T>) -> Self {
        Self {
            client,
            request: kube::core::Request::new(url_path),
            decode,
        }
    }
}

type Frames = BoxStream<'static, Result<RawEvent, kube::Error>>;

enum State {
    Empty,
    Paging {
        continue_token: Option<String>,
        items: VecDeque<Bytes>,
        resource_version: Option<String>,
    },
    InitialWatch {
        frames: Frames,
    },
    Listed {
        resource_version: String,
    },
    Watching {
        resource_version: String,
        frames: Frames,
    },
}

/// Watches one collection in protobuf, forever, like `kube::runtime::watcher`.
pub(super) fn protobuf_watcher<T>(
    api: ProtobufApi<T>,
    config: watcher::Config,
) -> impl Stream<Item = watcher::Result<Event<T>>> + Send
where
    T: Resource + Send + 'static,
{
    futures::stream::unfold(
        (api, config, State::Empty),
        |(api, config, mut state)| async move {
            loop {
                let (event, next) = step(&api, &config, state).await;
                state = next;
                if let Some(event) = event {
                    return Some((event, (api, config, state)));
                }
            }
        },
    )
}

/// One step of the state machine: an event to hand on (or `None`: step again) and the state
/// after it.
async fn step<T: Resource>(
    api: &ProtobufApi<T>,
    config: &watcher::Config,
    state: State,
) -> (Option<watcher::Result<Event<T>>>, State) {
    match state {
        State::Empty => match config.initial_list_strategy {
            InitialListStrategy::ListWatch => (Some(Ok(Event::Init)), paging(None, None)),
            InitialListStrategy::StreamingList => {
                match api.watch(&watch_params(config, true), "0").await {
                    Ok(frames) => (Some(Ok(Event::Init)), State::InitialWatch { frames }),
                    Err(e) => (Some(Err(watcher::Error::WatchStartFailed(e))), State::Empty),
                }
            }
        },
        State::Paging {
            continue_token,
            mut items,
            resource_version,
        } => {
            if let Some(item) = items.pop_front() {
                let event = api.object(item).map(|o| Ok(Event::InitApply(o)));
                let state = State::Paging {
                    continue_token,
                    items,
                    resource_version,
                };
                return (event, state);
            }
            if continue_token.is_none()
                && let Some(resource_version) = resource_version
            {
                return (
                    Some(Ok(Event::InitDone)),
                    State::Listed { resource_version },
                );
            }
            next_page(api, config, continue_token).await
        }
        State::InitialWatch { frames } => initial_watch(api, config, frames).await,
        State::Listed { resource_version } => {
            match api
                .watch(&watch_params(config, false), &resource_version)
                .await
            {
                Ok(frames) => (
                    None,
                    State::Watching {
                        resource_version,
                        frames,
                    },
                ),
                Err(e) => (
                    Some(Err(watcher::Error::WatchStartFailed(e))),
                    State::Listed { resource_version },
                ),
            }
        }
        State::Watching {
            resource_version,
            frames,
        } => watching(api, config, resource_version, frames).await,
    }
}

fn paging(continue_token: Option<String>, resource_version: Option<String>) -> State {
    State::Paging {
        continue_token,
        items: VecDeque::new(),
        resource_version,
    }
}

async fn next_page<T: Resource>(
    api: &ProtobufApi<T>,
    config: &watcher::Config,
    continue_token: Option<String>,
) -> (Option<watcher::Result<Event<T>>>, State) {
    let mut params = list_params(config);
    params.continue_token = continue_token;
    match api.list(&params).await {
        Ok(page) if page.resource_version.is_none() && page.continue_token.is_none() => {
            (Some(Err(watcher::Error::NoResourceVersion)), State::Empty)
        }
        Ok(page) => (
            None,
            State::Paging {
                continue_token: page.continue_token,
                items: page.items.into(),
                resource_version: page.resource_version,
            },
        ),
        Err(e) => (
            Some(Err(watcher::Error::InitialListFailed(e))),
            State::Empty,
        ),
    }
}

/// The initial events of a streaming list, up to the bookmark that ends them.
async fn initial_watch<T: Resource>(
    api: &ProtobufApi<T>,
    config: &watcher::Config,
    mut frames: Frames,
) -> (Option<watcher::Result<Event<T>>>, State) {
    let Some(frame) = next_frame(&mut frames, config.timeout).await else {
        return (None, State::Empty);
    };
    let event = match frame {
        Ok(event) => event,
        Err(e) => {
            let state = State::InitialWatch { frames };
            return (Some(Err(watcher::Error::WatchFailed(e))), state);
        }
    };
    match event.kind {
        EventType::Added | EventType::Modified => {
            let event = api.object(event.object).map(|o| Ok(Event::InitApply(o)));
            (event, State::InitialWatch { frames })
        }
        EventType::Deleted => {
            error!("a deletion among a streaming list's initial events: ignored");
            (None, State::InitialWatch { frames })
        }
        EventType::Bookmark => match protobuf::bookmark(event.object) {
            Ok(mark) if mark.initial_events_end => (
                Some(Ok(Event::InitDone)),
                State::Watching {
                    resource_version: mark.resource_version,
                    frames,
                },
            ),
            Ok(_) => (None, State::InitialWatch { frames }),
            Err(e) => (Some(Err(undecodable(e))), State::Empty),
        },
        EventType::Error => {
            let status = watch_status(event.object);
            let state = match status.code {
                410 => State::Empty,
                _ => State::InitialWatch { frames },
            };
            (Some(Err(watcher::Error::WatchError(status.boxed()))), state)
        }
    }
}

/// Live events, resumed from `resource_version` when the watch ends.
async fn watching<T: Resource>(
    api: &ProtobufApi<T>,
    config: &watcher::Config,
    resource_version: String,
    mut frames: Frames,
) -> (Option<watcher::Result<Event<T>>>, State) {
    let Some(frame) = next_frame(&mut frames, config.timeout).await else {
        return (None, State::Listed { resource_version });
    };
    let event = match frame {
        Ok(event) => event,
        Err(e) => {
            let state = State::Watching {
                resource_version,
                frames,
            };
            return (Some(Err(watcher::Error::WatchFailed(e))), state);
        }
    };
    let applied = |object: T, deleted: bool, frames: Frames| {
        let version = object.meta().resource_version.clone().unwrap_or_default();
        if version.is_empty() {
            return (Some(Err(watcher::Error::NoResourceVersion)), State::Empty);
        }
        let event = match deleted {
            true => Event::Delete(object),
            false => Event::Apply(object),
        };
        let state = State::Watching {
            resource_version: version,
            frames,
        };
        (Some(Ok(event)), state)
    };
    match event.kind {
        EventType::Added | EventType::Modified | EventType::Deleted => {
            let deleted = event.kind == EventType::Deleted;
            match api.object(event.object) {
                Some(object) => applied(object, deleted, frames),
                None => (
                    None,
                    State::Watching {
                        resource_version,
                        frames,
                    },
                ),
            }
        }
        EventType::Bookmark => {
            let resource_version = match protobuf::bookmark(event.object) {
                Ok(mark) if !mark.resource_version.is_empty() => mark.resource_version,
                _ => resource_version,
            };
            (
                None,
                State::Watching {
                    resource_version,
                    frames,
                },
            )
        }
        EventType::Error => {
            let status = watch_status(event.object);
            let state = match status.code {
                410 => State::Empty,
                _ => State::Watching {
                    resource_version,
                    frames,
                },
            };
            (Some(Err(watcher::Error::WatchError(status.boxed()))), state)
        }
    }
}

async fn next_frame<S: Stream + Unpin>(frames: &mut S, timeout: Option<u32>) -> Option<S::Item> {
    if timeout == Some(0) {
        return frames.next().await;
    }
    let idle = Duration::from_secs(u64::from(timeout.unwrap_or(290))) + IDLE_MARGIN;
    tokio::time::timeout(idle, frames.next())
        .await
        .ok()
        .flatten()
}

fn watch_status(object: Bytes) -> Status {
    protobuf::status(object).unwrap_or_else(|e| {
        Status::failure(&format!("an ERROR event that could not be read: {e}"), "")
    })
}

fn undecodable(e: DecodeError) -> watcher::Error {
    watcher::Error::WatchFailed(kube::Error::Service(Box::new(e)))
}

/// `watcher::Config` as list parameters (what kube-runtime sends).
fn list_params(config: &watcher::Config) -> ListParams {
    let (resource_version, version_match) = match config.list_semantic {
        ListSemantic::Any => (Some("0".into()), Some(VersionMatch::NotOlderThan)),
        ListSemantic::MostRecent => (None, None),
    };
    ListParams {
        label_selector: config.label_selector.clone(),
        field_selector: config.field_selector.clone(),
        resource_version,
        version_match,
        limit: config.page_size,
        ..Default::default()
    }
}

/// `watcher::Config` as watch parameters; `initial`: the watch that streams the initial list.
fn watch_params(config: &watcher::Config, initial: bool) -> WatchParams {
    WatchParams {
        label_selector: config.label_selector.clone(),
        field_selector: config.field_selector.clone(),
        timeout: config.timeout,
        bookmarks: config.bookmarks,
        send_initial_events: initial
            && config.initial_list_strategy == InitialListStrategy::StreamingList,
    }
}

impl<T> ProtobufApi<T> {
    /// Decodes one object; one that cannot be read is logged and skipped (a built-in kind
    /// the API server encoded: a bug on one side, not a reason to stop the watch).
    fn object(&self, bytes: Bytes) -> Option<T> {
        match (self.decode)(bytes) {
            Ok(object) => Some(object),
            Err(error) => {
                error!(url = self.request.url_path, %error, "an object could not be decoded from protobuf: skipped");
                None
            }
        }
    }

    async fn list(&self, params: &ListParams) -> Result<protobuf::ListPage, kube::Error> {
        let request = self
            .request
            .list(params)
            .map_err(kube::Error::BuildRequest)?;
        self.list_sent(request).await
    }

    async fn list_sent(
        &self,
        request: http::Request<Vec<u8>>,
    ) -> Result<protobuf::ListPage, kube::Error> {
        let body = self.send(request).await?.collect_bytes().await?;
        protobuf::list_page(body).map_err(|e| kube::Error::Service(Box::new(e)))
    }

    /// One page of a one-shot LIST (`request`, built by the caller), its objects decoded (one
    /// that cannot be read is logged and skipped, as in a watch).
    pub(super) async fn list_page(
        &self,
        request: http::Request<Vec<u8>>,
    ) -> Result<ListedPage<T>, kube::Error> {
        let page = self.list_sent(request).await?;
        Ok(ListedPage {
            items: page
                .items
                .into_iter()
                .filter_map(|o| self.object(o))
                .collect(),
            continue_token: page.continue_token,
        })
    }

    async fn watch(&self, params: &WatchParams, version: &str) -> Result<Frames, kube::Error> {
        self.watch_in(params, version, None).await
    }

    /// A watch, sent with its own `shardSelector` when given (the client's layer then adds
    /// none).
    async fn watch_in(
        &self,
        params: &WatchParams,
        version: &str,
        shard_selector: Option<&str>,
    ) -> Result<Frames, kube::Error> {
        let mut request = self
            .request
            .watch(params, version)
            .map_err(kube::Error::BuildRequest)?;
        if let Some(uri) = shard_selector.and_then(|s| with_selector(request.uri(), s)) {
            *request.uri_mut() = uri;
        }
        // As kube does for its watches: compressed watch streams are not decoded reliably.
        let identity = http::HeaderValue::from_static("identity");
        request.headers_mut().insert(ACCEPT_ENCODING, identity);
        let body = self.send(request).await?;
        Ok(watch_frames(body.into_data_stream()))
    }

    /// Sends a request asking for protobuf; an error status becomes `kube::Error::Api`, and
    /// an answer in another format a 406 (what the fallback looks for).
    async fn send(
        &self,
        request: http::Request<Vec<u8>>,
    ) -> Result<kube::client::Body, kube::Error> {
        let (mut parts, body) = request.into_parts();
        parts
            .headers
            .insert(ACCEPT, http::HeaderValue::from_static(MEDIA_TYPE));
        let request = http::Request::from_parts(parts, kube::client::Body::from(body));
        let response = self.client.send(request).await?;
        let status = response.status();
        let is_protobuf = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with(MEDIA_TYPE));
        if status.is_success() && is_protobuf {
            return Ok(response.into_body());
        }
        if status.is_success() {
            debug!(
                url = self.request.url_path,
                "answered in another format than protobuf"
            );
            let status =
                Status::failure("the API server answered in another format", "NotAcceptable");
            return Err(kube::Error::Api(status.with_code(406).boxed()));
        }
        let body = response.into_body().collect_bytes().await?;
        Err(kube::Error::Api(
            error_status(status, is_protobuf, body).boxed(),
        ))
    }
}

/// A one-shot list as one streaming request (`sendInitialEvents`, KEP-3157): the collection
/// as it is now (`resourceVersion` unset: as fresh as a quorum read), with `params`' selectors
/// and `shard_selector`, handed on in pages of up to `page_size` objects until the server's
/// end-of-initial-events bookmark. A paginated list pays one round trip per page; on a slow
/// connection (the chaos run's +0.6-1.7 s per response) a hand-over's pages were most of its
/// time. Any error, or a stream that ends before that bookmark, ends it with an error: the
/// caller lists again from the start.
pub(super) fn initial_events<T>(
    api: ProtobufApi<T>,
    params: &ListParams,
    shard_selector: Option<String>,
    page_size: usize,
) -> BoxStream<'static, Result<Vec<T>, kube::Error>>
where
    T: Send + 'static,
{
    let watch = WatchParams {
        label_selector: params.label_selector.clone(),
        field_selector: params.field_selector.clone(),
        timeout: None,
        bookmarks: true,
        send_initial_events: true,
    };
    let start = InitialEvents {
        api,
        watch,
        shard_selector,
        page_size,
        frames: None,
    };
    futures::stream::unfold(Some(start), |state| async move {
        let mut state = state?;
        match state.next_page().await {
            Ok(Some(page)) => Some((Ok(page), Some(state))),
            Ok(None) => None,
            Err(e) => Some((Err(e), None)),
        }
    })
    .boxed()
}

/// Where a streaming one-shot list is: its request and, once sent, its frames (`None` after
/// the end-of-initial-events bookmark).
struct InitialEvents<T> {
    api: ProtobufApi<T>,
    watch: WatchParams,
    shard_selector: Option<String>,
    page_size: usize,
    frames: Option<Option<Frames>>,
}

impl<T> InitialEvents<T> {
    /// The next page (the last one may be empty); `None` once every object was handed on.
    async fn next_page(&mut self) -> Result<Option<Vec<T>>, kube::Error> {
        let frames = match &mut self.frames {
            Some(Some(frames)) => frames,
            Some(None) => return Ok(None),
            None => {
                let sent = self
                    .api
                    .watch_in(&self.watch, "", self.shard_selector.as_deref());
                self.frames
                    .insert(Some(sent.await?))
                    .as_mut()
                    .expect("just sent")
            }
        };
        let mut page = Vec::new();
        while page.len() < self.page_size {
            let Some(frame) = next_frame(frames, self.watch.timeout).await else {
                let ended = Status::failure("the list ended before its last object", "Ended");
                return Err(kube::Error::Api(ended.with_code(500).boxed()));
            };
            let event = frame?;
            match event.kind {
                EventType::Added | EventType::Modified => {
                    page.extend(self.api.object(event.object))
                }
                EventType::Deleted => {
                    error!("a deletion among a streaming list's initial events: ignored")
                }
                EventType::Bookmark => {
                    let mark = protobuf::bookmark(event.object)
                        .map_err(|e| kube::Error::Service(Box::new(e)))?;
                    if mark.initial_events_end {
                        self.frames = Some(None);
                        return Ok(Some(page));
                    }
                }
                EventType::Error => {
                    return Err(kube::Error::Api(watch_status(event.object).boxed()));
                }
            }
        }
        Ok(Some(page))
    }
}

/// A watch body as its events. A body cut short (an API server restart, a proxy, a connection
/// reset mid-chunk, a frame that never finished) ends the events, as kube-client ends a JSON
/// watch: the watcher resumes from its last version at once, where an error would first wait
/// out the stream's backoff.
fn watch_frames<B, E>(body: B) -> Frames
where
    B: Stream<Item = Result<Bytes, E>> + Send + 'static,
    E: std::error::Error + Send + Sync + 'static,
{
    let bytes = body.map_err(|e| match ends_the_stream(&e) {
        true => std::io::Error::new(std::io::ErrorKind::UnexpectedEof, e),
        false => std::io::Error::other(e),
    });
    let codec = LengthDelimitedCodec::builder()
        .length_field_length(4)
        .max_frame_length(MAX_FRAME)
        .new_codec();
    FramedRead::new(StreamReader::new(bytes), WholeFrames(codec))
        .filter_map(|frame| async move {
            match frame {
                Ok(frame) => Some(
                    protobuf::watch_event(frame.freeze())
                        .map_err(|e| kube::Error::Service(Box::new(e))),
                ),
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                    debug!(error = %e, "watch body cut short: resuming");
                    None
                }
                Err(e) => Some(Err(kube::Error::ReadEvents(e))),
            }
        })
        .boxed()
}

/// True when `error`, or one it wraps, is an unexpected end of the connection.
fn ends_the_stream(error: &(dyn std::error::Error + 'static)) -> bool {
    // The chunked decoder says so in its text only; TLS nests an `UnexpectedEof`.
    if error.to_string().contains("unexpected EOF during chunk") {
        return true;
    }
    let mut current = Some(error);
    // HTTP and TLS stack a handful of errors; the bound guards against a `source` cycle.
    for _ in 0..16 {
        let Some(e) = current else { return false };
        let Some(io) = e.downcast_ref::<std::io::Error>() else {
            current = e.source();
            continue;
        };
        if io.kind() == std::io::ErrorKind::UnexpectedEof {
            return true;
        }
        // An `io::Error`'s `source` skips the error it wraps: look at that one itself.
        current = match io.get_ref() {
            Some(inner) => Some(inner as &(dyn std::error::Error + 'static)),
            None => std::error::Error::source(io),
        };
    }
    false
}

/// The length-delimited codec, but a frame left unfinished when the body ends is an
/// `UnexpectedEof` (the codec's own answer is an error of no particular kind).
struct WholeFrames(LengthDelimitedCodec);

impl tokio_util::codec::Decoder for WholeFrames {
    type Item = bytes::BytesMut;
    type Error = std::io::Error;

    fn decode(&mut self, src: &mut bytes::BytesMut) -> Result<Option<Self::Item>, Self::Error> {
        self.0.decode(src)
    }

    fn decode_eof(&mut self, src: &mut bytes::BytesMut) -> Result<Option<Self::Item>, Self::Error> {
        match self.0.decode(src)? {
            Some(frame) => Ok(Some(frame)),
            None if src.is_empty() => Ok(None),
            None => Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!("{} bytes of an unfinished frame", src.len()),
            )),
        }
    }
}

/// The `Status` of an error response, whatever format it came in.
fn error_status(code: http::StatusCode, is_protobuf: bool, body: Bytes) -> Status {
    let decoded = match is_protobuf {
        true => protobuf::status_body(body.clone()).ok(),
        false => serde_json::from_slice::<Status>(&body).ok(),
    };
    decoded
        .unwrap_or_else(|| {
            let text = String::from_utf8_lossy(&body);
            let reason = code.canonical_reason().unwrap_or_default();
            Status::failure(text.trim(), reason)
        })
        .with_code(code.as_u16())
}

/// True for the error of a server that does not serve protobuf for this resource.
pub(super) fn is_not_acceptable(error: &watcher::Error) -> bool {
    let api_error = match error {
        watcher::Error::InitialListFailed(e)
        | watcher::Error::WatchStartFailed(e)
        | watcher::Error::WatchFailed(e) => e,
        _ => return false,
    };
    matches!(api_error, kube::Error::Api(status) if matches!(status.code, 406 | 415))
}

/// Runs `protobuf` until the server shows it does not serve protobuf, then `json` from the
/// start (its first event is an `Init`, so the driver takes it as a fresh list). `switched`
/// is told when that happens.
pub(super) fn with_json_fallback<T, P, J>(
    protobuf: P,
    json: impl FnOnce() -> J + Send + 'static,
    switched: impl FnOnce() + Send + 'static,
) -> impl Stream<Item = watcher::Result<Event<T>>> + Send
where
    T: Send + 'static,
    P: Stream<Item = watcher::Result<Event<T>>> + Send + 'static,
    J: Stream<Item = watcher::Result<Event<T>>> + Send + 'static,
{
    type Events<T> = BoxStream<'static, watcher::Result<Event<T>>>;
    type Switch<T> = Box<dyn FnOnce() -> Events<T> + Send>;
    enum Reading<T> {
        Protobuf(Events<T>, Switch<T>),
        Json(Events<T>),
    }
    let switch: Switch<T> = Box::new(move || {
        switched();
        json().boxed()
    });
    let start = Reading::Protobuf(protobuf.boxed(), switch);
    futures::stream::unfold(start, |reading| async move {
        match reading {
            Reading::Json(mut stream) => {
                let item = stream.next().await?;
                Some((item, Reading::Json(stream)))
            }
            Reading::Protobuf(mut stream, switch) => {
                let item = stream.next().await?;
                match &item {
                    Err(e) if is_not_acceptable(e) => {
                        warn!(error = %e, "the API server does not serve this resource in protobuf: reading it in JSON");
                        let mut json = switch();
                        let first = json.next().await?;
                        Some((first, Reading::Json(json)))
                    }
                    _ => Some((item, Reading::Protobuf(stream, switch))),
                }
            }
        }
    })
}

impl WatchContext {
    /// Merged, backed-off watch streams of `resource`, one per API, in the format the settings
    /// and the server allow: protobuf when `decode` is given (a built-in kind) and the settings
    /// do not say JSON. The format settled is recorded for explain and the metric.
    pub(super) fn wire_streams<K>(
        &self,
        resource: &'static str,
        apis: Vec<Api<K>>,
        config: watcher::Config,
        decode: Option<Decode<K>>,
    ) -> SelectAll<TaggedWatch<K>>
    where
        K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
    {
        let format = self.settings.wire_format;
        let decode = decode.filter(|_| format != WireFormat::Json);
        self.record_wire_format(resource, decode.is_some());
        let mut all = SelectAll::new();
        for (i, api) in apis.into_iter().enumerate() {
            let stream = match &decode {
                None => watcher(api, config.clone()).boxed(),
                Some(decode) => {
                    let url = api.resource_url().to_owned();
                    let protobuf_api = ProtobufApi::new(self.client.clone(), &url, decode.clone());
                    let protobuf = protobuf_watcher(protobuf_api, config.clone());
                    match format {
                        WireFormat::Auto => {
                            let (formats, observer) =
                                (self.wire_formats.clone(), self.observer.clone());
                            let json_config = config.clone();
                            let json = move || watcher(api, json_config);
                            let switched = move || {
                                formats.record(resource, "json");
                                observer.wire_format(resource, "json");
                            };
                            with_json_fallback(protobuf, json, switched).boxed()
                        }
                        _ => protobuf.boxed(),
                    }
                }
            };
            let stream = stream.backoff(crate::watch_backoff::watch_backoff());
            all.push(stream.map(move |e| (i, e)).boxed());
        }
        all
    }

    fn record_wire_format(&self, resource: &'static str, protobuf: bool) {
        let format = if protobuf { "protobuf" } else { "json" };
        self.wire_formats.record(resource, format);
        self.observer.wire_format(resource, format);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A captured streaming list of one ConfigMap: two whole frames (ADDED, then the bookmark).
    fn captured_watch() -> Bytes {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/benches/fixtures/wire/watch-configmaps.pb"
        );
        Bytes::from(std::fs::read(path).expect("the captured watch"))
    }

    /// The events of a body of `chunks`, then of `end` (`None`: the body ends cleanly).
    async fn events_of(chunks: Vec<Bytes>, end: Option<std::io::Error>) -> Vec<String> {
        let mut body: Vec<Result<Bytes, std::io::Error>> = chunks.into_iter().map(Ok).collect();
        body.extend(end.map(Err));
        watch_frames(futures::stream::iter(body))
            .map(|event| match event {
                Ok(event) => format!("{:?}", event.kind),
                Err(e) => format!("error: {e}"),
            })
            .collect()
            .await
    }

    fn cut(message: &str) -> std::io::Error {
        std::io::Error::other(message.to_string())
    }

    #[tokio::test]
    async fn a_body_cut_mid_chunk_ends_the_events_without_an_error() {
        let events = events_of(
            vec![captured_watch()],
            Some(cut(
                "error reading a body from connection: unexpected EOF during chunk size line",
            )),
        )
        .await;
        assert_eq!(events, ["Added", "Bookmark"]);
    }

    #[tokio::test]
    async fn a_nested_unexpected_eof_ends_the_events_too() {
        let tls = std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "peer closed");
        let events = events_of(vec![captured_watch()], Some(std::io::Error::other(tls))).await;
        assert_eq!(events, ["Added", "Bookmark"]);
    }

    #[tokio::test]
    async fn a_frame_left_unfinished_at_the_end_is_dropped_not_an_error() {
        let stream = captured_watch();
        let first_frame = 4 + u32::from_be_bytes(stream[..4].try_into().unwrap()) as usize;
        let events = events_of(vec![stream.slice(..first_frame + 10)], None).await;
        assert_eq!(events, ["Added"]);
    }

    #[tokio::test]
    async fn any_other_read_error_is_still_an_error() {
        let events = events_of(
            vec![captured_watch()],
            Some(cut("connection reset by peer")),
        )
        .await;
        assert_eq!(events.len(), 3, "{events:?}");
        assert!(events[2].starts_with("error: "), "{events:?}");
    }

    /// An API server that answers every request with `body` in protobuf and keeps the URIs.
    #[derive(Clone)]
    struct Canned {
        body: Bytes,
        uris: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    }

    impl tower::Service<http::Request<kube::client::Body>> for Canned {
        type Response = http::Response<http_body_util::Full<Bytes>>;
        type Error = std::convert::Infallible;
        type Future = std::future::Ready<Result<Self::Response, Self::Error>>;

        fn poll_ready(
            &mut self,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Result<(), Self::Error>> {
            std::task::Poll::Ready(Ok(()))
        }

        fn call(&mut self, request: http::Request<kube::client::Body>) -> Self::Future {
            self.uris.lock().unwrap().push(request.uri().to_string());
            let response = http::Response::builder()
                .header(CONTENT_TYPE, MEDIA_TYPE)
                .body(http_body_util::Full::new(self.body.clone()))
                .unwrap();
            std::future::ready(Ok(response))
        }
    }

    /// The pages of a streamed list of the ConfigMaps whose server answers `body`, and the URIs
    /// it was asked.
    async fn streamed(body: Bytes) -> (Vec<Result<usize, String>>, Vec<String>) {
        use crate::protobuf::FromProtobuf;
        use k8s_openapi::api::core::v1::ConfigMap;
        let server = Canned {
            body,
            uris: Default::default(),
        };
        let client = Client::new(server.clone(), "default");
        let decode: Decode<ConfigMap> = std::sync::Arc::new(ConfigMap::from_protobuf);
        let api = ProtobufApi::new(client, "/api/v1/configmaps", decode);
        let params = ListParams::default().labels("team=a");
        let pages = initial_events(api, &params, Some("gained".into()), 100)
            .map(|page| page.map(|p| p.len()).map_err(|e| e.to_string()))
            .collect()
            .await;
        let uris = server.uris.lock().unwrap().clone();
        (pages, uris)
    }

    #[tokio::test]
    async fn a_streamed_list_is_one_request_for_the_current_state_that_ends_at_the_bookmark() {
        let (pages, uris) = streamed(captured_watch()).await;
        assert_eq!(pages, [Ok(1)], "the one ConfigMap, then the end");
        assert_eq!(uris.len(), 1, "{uris:?}");
        for part in [
            "watch=true",
            "sendInitialEvents=true",
            "resourceVersionMatch=NotOlderThan",
            "labelSelector=team%3Da",
            "shardSelector=gained",
        ] {
            assert!(uris[0].contains(part), "{part} not in {}", uris[0]);
        }
        let version = uris[0]
            .split(['?', '&'])
            .find(|p| p.starts_with("resourceVersion="));
        assert_eq!(
            version,
            Some("resourceVersion="),
            "unset: as fresh as a quorum read"
        );
    }

    #[tokio::test]
    async fn a_streamed_list_that_ends_before_its_bookmark_is_an_error() {
        let stream = captured_watch();
        let first_frame = 4 + u32::from_be_bytes(stream[..4].try_into().unwrap()) as usize;
        let (pages, _) = streamed(stream.slice(..first_frame)).await;
        assert_eq!(pages.len(), 1, "{pages:?}");
        let error = pages[0].as_ref().unwrap_err();
        assert!(error.contains("ended before its last object"), "{error}");
    }
}
