//! A fault-injecting proxy between one controller and the API server (the forwarding itself is
//! `kube-reloader-apiproxy`'s). While a fault is armed, requests it matches get a real HTTP 500
//! with a Kubernetes `Status` body, as an overloaded or failing API server would answer;
//! everything else (watches included) streams through.
//!
//! Watches can be frozen and then expired, the way a watch breaks for real: a frozen watch
//! delivers nothing more (its events are held back, then dropped), and on expiry it ends with
//! the `410 Expired` error event an API server sends when the client's resource version is no
//! longer in its watch cache, so the client has to list again.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use apiproxy::{ApiProxy, Call, Hooks, WatchFraming};
use axum::body::Body;
use axum::http::{StatusCode, header, response};
use axum::response::{IntoResponse, Response};

/// Which requests fail: a list of `resource` (e.g. "configmaps"), paginated (a GET without
/// `watch`) or streamed (a watch with `sendInitialEvents=true`), whose query contains none of
/// `spare` (e.g. "fieldSelector", to leave lists of one named object alone), up to `remaining`
/// times.
#[derive(Debug, Clone)]
pub struct ListFault {
    pub resource: &'static str,
    pub spare: &'static [&'static str],
    pub remaining: u64,
}

/// What happens to the watches of one resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WatchFault {
    None,
    Frozen(&'static str),
    Expired(&'static str),
}

/// A list answered from an older state, as a lagging watch cache may answer a list at
/// `resourceVersion=0` ("any version"): the body the test recorded earlier.
#[derive(Debug, Clone)]
struct StaleList {
    resource: &'static str,
    body: Vec<u8>,
}

/// The armed faults, shared by the proxy's handler and the test.
struct Faults {
    list: Mutex<Option<ListFault>>,
    failed: AtomicU64,
    watches: tokio::sync::watch::Sender<WatchFault>,
    /// Streaming lists (`sendInitialEvents`) refused, as a server without WatchList refuses them.
    refuse_streaming: AtomicBool,
    stale: Mutex<Option<StaleList>>,
    /// Patches of `resource` in these namespaces answered 429 with `Retry-After`, as API Priority
    /// and Fairness answers a flow over its share.
    throttled: Mutex<Option<Throttle>>,
    throttled_count: AtomicU64,
    /// Requests of this resource asking for protobuf answered 406, as a server (or a proxy in
    /// front of it) that serves only JSON.
    refuse_protobuf: Mutex<Option<&'static str>>,
    /// (resource, asked for protobuf) of every list and watch of a collection seen (not those of
    /// one object by name, such as the halts ConfigMap's, nor the streaming-list probe, which
    /// selects nothing).
    formats_asked: Mutex<std::collections::BTreeSet<(String, bool)>>,
    /// (namespace, resource, asked for protobuf) of every list inside a namespace, paginated or
    /// streamed.
    namespaced_lists: Mutex<std::collections::BTreeSet<(String, String, bool)>>,
    /// (namespace, resource) of every streaming list (a watch with `sendInitialEvents`) inside a
    /// namespace.
    streamed_lists: Mutex<std::collections::BTreeSet<(String, String)>>,
    /// (namespace, if inside one; resource) of every list at an exact past version
    /// (`resourceVersionMatch=Exact`).
    exact_lists: Mutex<std::collections::BTreeSet<(Option<String>, String)>>,
}

/// Writes (PATCH) of one resource in some namespaces answered 429 with `Retry-After`.
#[derive(Debug, Clone)]
pub struct Throttle {
    pub namespaces: Vec<String>,
    pub resource: &'static str,
    pub retry_after_s: u32,
}

pub struct FaultProxy {
    faults: Arc<Faults>,
    kubeconfig: PathBuf,
    _proxy: ApiProxy,
}

impl FaultProxy {
    pub async fn start() -> Self {
        let faults = Arc::new(Faults {
            list: Mutex::new(None),
            failed: AtomicU64::new(0),
            watches: tokio::sync::watch::Sender::new(WatchFault::None),
            refuse_streaming: AtomicBool::new(false),
            stale: Mutex::new(None),
            throttled: Mutex::new(None),
            throttled_count: AtomicU64::new(0),
            refuse_protobuf: Mutex::new(None),
            formats_asked: Default::default(),
            namespaced_lists: Default::default(),
            streamed_lists: Default::default(),
            exact_lists: Default::default(),
        });
        let proxy = ApiProxy::start("fault-proxy", super::client().await, faults.clone())
            .await
            .expect("binding the fault proxy");
        let kubeconfig = std::env::temp_dir().join(format!(
            "kube-reloader-fault-proxy-{}.yaml",
            proxy.addr().port()
        ));
        std::fs::write(&kubeconfig, proxy.kubeconfig()).expect("writing the proxy kubeconfig");
        Self {
            faults,
            kubeconfig,
            _proxy: proxy,
        }
    }

    /// A kubeconfig whose server is this proxy.
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    pub fn arm(&self, fault: ListFault) {
        *self.faults.list.lock().unwrap() = Some(fault);
    }

    /// Open and new watches of `resource` (e.g. "configmaps") deliver nothing from now on.
    pub fn freeze_watches(&self, resource: &'static str) {
        self.faults
            .watches
            .send_replace(WatchFault::Frozen(resource));
    }

    /// Frozen watches drop what they held and end with a `410 Expired` error event; watches
    /// opened after this stream normally.
    pub fn expire_watches(&self) {
        let expired = match *self.faults.watches.borrow() {
            WatchFault::Frozen(resource) | WatchFault::Expired(resource) => resource,
            WatchFault::None => return,
        };
        self.faults
            .watches
            .send_replace(WatchFault::Expired(expired));
    }

    /// Watches asking for initial events (streaming lists) get a 500 from now on, so the
    /// controller lists in pages, as against a server without the WatchList feature.
    pub fn refuse_streaming_lists(&self) {
        self.faults.refuse_streaming.store(true, Ordering::Relaxed);
    }

    /// Lists of `resource` at `resourceVersion=0` are answered with `body` (a list response
    /// recorded earlier) from now on; consistent lists still reach the API server.
    pub fn serve_stale_lists(&self, resource: &'static str, body: Vec<u8>) {
        *self.faults.stale.lock().unwrap() = Some(StaleList { resource, body });
    }

    /// Patches matching `throttle` get 429 with its `Retry-After` from now on.
    pub fn throttle(&self, throttle: Throttle) {
        *self.faults.throttled.lock().unwrap() = Some(throttle);
    }

    /// Requests of `resource` (e.g. "configmaps") asking for protobuf get 406 from now on.
    pub fn refuse_protobuf(&self, resource: &'static str) {
        *self.faults.refuse_protobuf.lock().unwrap() = Some(resource);
    }

    /// (resource, asked for protobuf) of every list and watch of a collection the proxy has seen.
    pub fn formats_asked(&self) -> std::collections::BTreeSet<(String, bool)> {
        self.faults.formats_asked.lock().unwrap().clone()
    }

    /// (resource, asked for protobuf) of every list (paginated or streamed) inside `namespace`
    /// so far.
    pub fn lists_in(&self, namespace: &str) -> std::collections::BTreeSet<(String, bool)> {
        let lists = self.faults.namespaced_lists.lock().unwrap();
        lists
            .iter()
            .filter(|(ns, _, _)| ns == namespace)
            .map(|(_, resource, protobuf)| (resource.clone(), *protobuf))
            .collect()
    }

    /// The resources streamed (a watch with `sendInitialEvents`) inside `namespace` so far.
    pub fn streamed_in(&self, namespace: &str) -> std::collections::BTreeSet<String> {
        let lists = self.faults.streamed_lists.lock().unwrap();
        lists
            .iter()
            .filter(|(ns, _)| ns == namespace)
            .map(|(_, resource)| resource.clone())
            .collect()
    }

    /// (namespace, if inside one; resource) of every list at an exact past version so far.
    pub fn exact_lists(&self) -> std::collections::BTreeSet<(Option<String>, String)> {
        self.faults.exact_lists.lock().unwrap().clone()
    }

    /// How many requests the throttle has answered 429 so far.
    pub fn throttled(&self) -> u64 {
        self.faults.throttled_count.load(Ordering::Relaxed)
    }

    /// How many requests the fault has failed so far.
    pub fn failed(&self) -> u64 {
        self.faults.failed.load(Ordering::Relaxed)
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.kubeconfig);
    }
}

impl Hooks for Faults {
    fn request(&self, call: &Call) -> Option<Response> {
        let query = call.query.as_deref().unwrap_or_default();
        let one_object = query.contains("metadata.name") || query.contains("streaming-list-probe");
        if matches!(call.verb.as_str(), "list" | "watch") && !one_object {
            let protobuf = call
                .accept
                .as_deref()
                .is_some_and(|a| a.contains("protobuf"));
            let asked = (call.resource.clone(), protobuf);
            self.formats_asked.lock().unwrap().insert(asked);
            let streamed = call.verb == "watch" && query.contains("sendInitialEvents=true");
            if let (Some(ns), true) = (&call.namespace, call.verb == "list" || streamed) {
                let list = (ns.clone(), call.resource.clone(), protobuf);
                self.namespaced_lists.lock().unwrap().insert(list);
            }
            if let (Some(ns), true) = (&call.namespace, streamed) {
                let list = (ns.clone(), call.resource.clone());
                self.streamed_lists.lock().unwrap().insert(list);
            }
        }
        if call.verb == "list" && query.contains("resourceVersionMatch=Exact") {
            let list = (call.namespace.clone(), call.resource.clone());
            self.exact_lists.lock().unwrap().insert(list);
        }
        if self.refuses_streaming(call) || self.should_fail(call) {
            return Some(injected_failure());
        }
        if self.refuses_protobuf(call) {
            return Some(not_acceptable());
        }
        if let Some(retry_after_s) = self.throttles(call) {
            self.throttled_count.fetch_add(1, Ordering::Relaxed);
            return Some(too_many_requests(retry_after_s));
        }
        self.stale_answer(call)
    }

    fn response(&self, call: &Call, head: &response::Parts, body: Body) -> Body {
        if call.verb != "watch" {
            return body;
        }
        let framing = WatchFraming::of(head);
        faultable_watch(
            body,
            call.resource.clone(),
            self.watches.subscribe(),
            framing,
        )
    }
}

impl Faults {
    /// A request for `resource` asking for protobuf, while protobuf is refused for it.
    fn refuses_protobuf(&self, call: &Call) -> bool {
        let refused = self.refuse_protobuf.lock().unwrap();
        let asks = call
            .accept
            .as_deref()
            .is_some_and(|a| a.contains("protobuf"));
        asks && refused.as_deref() == Some(call.resource.as_str())
    }

    fn refuses_streaming(&self, call: &Call) -> bool {
        let query = call.query.as_deref().unwrap_or_default();
        self.refuse_streaming.load(Ordering::Relaxed)
            && call.verb == "watch"
            && query.contains("sendInitialEvents=true")
    }

    fn stale_answer(&self, call: &Call) -> Option<Response> {
        let stale = self.stale.lock().unwrap();
        let stale = stale.as_ref()?;
        let any_version = call
            .query
            .as_deref()
            .is_some_and(|q| q.split('&').any(|p| p == "resourceVersion=0"));
        if call.verb != "list" || call.resource != stale.resource || !any_version {
            return None;
        }
        let head = [(header::CONTENT_TYPE, "application/json")];
        Some((StatusCode::OK, head, stale.body.clone()).into_response())
    }

    fn throttles(&self, call: &Call) -> Option<u32> {
        let throttle = self.throttled.lock().unwrap();
        let t = throttle.as_ref()?;
        let hit = call.verb == "patch"
            && call.resource == t.resource
            && call
                .namespace
                .as_ref()
                .is_some_and(|ns| t.namespaces.contains(ns));
        hit.then_some(t.retry_after_s)
    }

    fn should_fail(&self, call: &Call) -> bool {
        let query = call.query.as_deref().unwrap_or("");
        let streamed = call.verb == "watch" && query.contains("sendInitialEvents=true");
        if call.verb != "list" && !streamed {
            return false;
        }
        let mut fault = self.list.lock().unwrap();
        let Some(f) = fault.as_mut() else {
            return false;
        };
        let spared = f.spare.iter().any(|spare| query.contains(spare));
        if f.remaining == 0 || spared || call.resource != f.resource {
            return false;
        }
        f.remaining -= 1;
        self.failed.fetch_add(1, Ordering::Relaxed);
        true
    }
}

/// What an API server (or a proxy in front of it) answers for a format it does not serve.
fn not_acceptable() -> Response {
    let status = r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"only application/json is served (injected by the test's fault proxy)","reason":"NotAcceptable","code":406}"#;
    (
        StatusCode::NOT_ACCEPTABLE,
        [(header::CONTENT_TYPE, "application/json")],
        status,
    )
        .into_response()
}

fn injected_failure() -> Response {
    let status = r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"injected by the test's fault proxy","reason":"InternalError","code":500}"#;
    (
        StatusCode::INTERNAL_SERVER_ERROR,
        [(header::CONTENT_TYPE, "application/json")],
        status,
    )
        .into_response()
}

fn too_many_requests(retry_after_s: u32) -> Response {
    let status = format!(
        r#"{{"kind":"Status","apiVersion":"v1","metadata":{{}},"status":"Failure","message":"too many requests (injected by the test's fault proxy)","reason":"TooManyRequests","details":{{"retryAfterSeconds":{retry_after_s}}},"code":429}}"#
    );
    (
        StatusCode::TOO_MANY_REQUESTS,
        [
            (header::CONTENT_TYPE, "application/json".to_string()),
            (header::RETRY_AFTER, retry_after_s.to_string()),
        ],
        status,
    )
        .into_response()
}

/// The error event an API server ends a watch with when it cannot resume it.
const EXPIRED_EVENT: &str = concat!(
    r#"{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"#,
    r#""status":"Failure","message":"too old resource version (injected by the test's fault proxy)","#,
    r#""reason":"Expired","code":410}}"#,
    "\n"
);

/// The same error event as a protobuf watch frame: a 4-byte length, then a `WatchEvent` whose
/// object is the `Status` in its envelope (`k8s\0` and a `runtime.Unknown`).
fn expired_frame() -> Vec<u8> {
    use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
    use k8s_pb::apimachinery::pkg::runtime as rt;
    use prost::Message;
    let status = meta::Status {
        status: Some("Failure".into()),
        message: Some("too old resource version (injected by the test's fault proxy)".into()),
        reason: Some("Expired".into()),
        code: Some(410),
        ..Default::default()
    };
    let unknown = rt::Unknown {
        type_meta: Some(rt::TypeMeta {
            api_version: Some("v1".into()),
            kind: Some("Status".into()),
        }),
        raw: Some(status.encode_to_vec()),
        ..Default::default()
    };
    let event = meta::WatchEvent {
        r#type: Some("ERROR".into()),
        object: Some(rt::RawExtension {
            raw: Some([b"k8s\0".to_vec(), unknown.encode_to_vec()].concat()),
        }),
    };
    let event = event.encode_to_vec();
    [(event.len() as u32).to_be_bytes().to_vec(), event].concat()
}

/// The error event that ends an expired watch, in the watch's format.
fn expired_event(framing: WatchFraming) -> Vec<u8> {
    match framing {
        WatchFraming::Lines => EXPIRED_EVENT.as_bytes().to_vec(),
        WatchFraming::LengthPrefixed => expired_frame(),
    }
}

/// A watch response body that forwards whole events while its resource's watches flow, holds
/// them while frozen, and ends with [`EXPIRED_EVENT`] (or its protobuf frame) once expired.
fn faultable_watch(
    body: Body,
    resource: String,
    faults: tokio::sync::watch::Receiver<WatchFault>,
    framing: WatchFraming,
) -> Body {
    use futures::StreamExt;
    let watch = WatchBody {
        inner: body.into_data_stream(),
        pending: Vec::new(),
        faults,
        resource,
        framing,
        frozen: false,
        ended: false,
    };
    let lines = futures::stream::unfold(watch, |mut watch| async move {
        if watch.ended {
            return None;
        }
        let (line, last) = watch.next_line().await?;
        watch.ended = last;
        Some((
            Ok::<_, std::io::Error>(axum::body::Bytes::from(line)),
            watch,
        ))
    });
    Body::from_stream(lines.boxed())
}

struct WatchBody {
    inner: axum::body::BodyDataStream,
    /// Bytes of an event not complete yet.
    pending: Vec<u8>,
    faults: tokio::sync::watch::Receiver<WatchFault>,
    resource: String,
    framing: WatchFraming,
    /// Held back at some point: only such a watch expires (those opened later flow).
    frozen: bool,
    ended: bool,
}

impl WatchBody {
    /// The next whole event, and whether it is the last; `None` when the server ended.
    async fn next_line(&mut self) -> Option<(Vec<u8>, bool)> {
        use futures::StreamExt;
        loop {
            let fault = *self.faults.borrow_and_update();
            match fault {
                WatchFault::Expired(r) if r == self.resource && self.frozen => {
                    return Some((expired_event(self.framing), true));
                }
                WatchFault::Frozen(r) if r == self.resource => {
                    self.frozen = true;
                    self.faults.changed().await.ok()?;
                    continue;
                }
                _ => {}
            }
            if let Some(end) = self.framing.event_end(&self.pending) {
                return Some((self.pending.drain(..end).collect(), false));
            }
            tokio::select! {
                chunk = self.inner.next() => self.pending.extend_from_slice(&chunk?.ok()?),
                changed = self.faults.changed() => changed.ok()?,
            }
        }
    }
}
