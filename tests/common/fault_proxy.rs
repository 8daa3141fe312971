//! A fault-injecting proxy between one controller and the API server: plain HTTP on loopback in
//! front, the admin credentials behind (a kube `Client`). While a fault is armed, requests it
//! matches get a real HTTP 500 with a Kubernetes `Status` body, as an overloaded or failing API
//! server would answer; everything else (watches included) streams through.
//!
//! Watches can be frozen and then expired, the way a watch breaks for real: a frozen watch
//! delivers nothing more (its events are held back, then dropped), and on expiry it ends with
//! the `410 Expired` error event an API server sends when the client's resource version is no
//! longer in its watch cache, so the client has to list again.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderName, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};

/// Which requests fail: a LIST (GET without `watch`) of `resource` (e.g. "configmaps") whose
/// query does not contain `spare` (e.g. "fieldSelector", to leave lists of one named object
/// alone), up to `remaining` times.
#[derive(Debug, Clone)]
pub struct ListFault {
    pub resource: &'static str,
    pub spare: &'static str,
    pub remaining: u64,
}

/// What happens to the watches of one resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WatchFault {
    None,
    Frozen(&'static str),
    Expired(&'static str),
}

#[derive(Clone)]
struct Shared {
    fault: Arc<Mutex<Option<ListFault>>>,
    failed: Arc<AtomicU64>,
    watches: Arc<tokio::sync::watch::Sender<WatchFault>>,
}

impl Default for Shared {
    fn default() -> Self {
        Self {
            fault: Default::default(),
            failed: Default::default(),
            watches: Arc::new(tokio::sync::watch::Sender::new(WatchFault::None)),
        }
    }
}

pub struct FaultProxy {
    shared: Shared,
    kubeconfig: PathBuf,
    task: tokio::task::JoinHandle<()>,
}

impl FaultProxy {
    pub async fn start() -> Self {
        let client = super::client().await;
        let shared = Shared::default();
        let app = axum::Router::new()
            .fallback(forward)
            .with_state((client, shared.clone()));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("binding the fault proxy");
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        let kubeconfig =
            std::env::temp_dir().join(format!("kube-reloader-fault-proxy-{}.yaml", addr.port()));
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: proxy\n  cluster:\n    server: http://{addr}\nusers:\n- name: proxy\n  user: {{}}\ncontexts:\n- name: proxy\n  context:\n    cluster: proxy\n    user: proxy\ncurrent-context: proxy\n"
        );
        std::fs::write(&kubeconfig, text).expect("writing the proxy kubeconfig");
        Self {
            shared,
            kubeconfig,
            task,
        }
    }

    /// A kubeconfig whose server is this proxy.
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    pub fn arm(&self, fault: ListFault) {
        *self.shared.fault.lock().unwrap() = Some(fault);
    }

    /// Open and new watches of `resource` (e.g. "configmaps") deliver nothing from now on.
    pub fn freeze_watches(&self, resource: &'static str) {
        self.shared
            .watches
            .send_replace(WatchFault::Frozen(resource));
    }

    /// Frozen watches drop what they held and end with a `410 Expired` error event; watches
    /// opened after this stream normally.
    pub fn expire_watches(&self) {
        let expired = match *self.shared.watches.borrow() {
            WatchFault::Frozen(resource) | WatchFault::Expired(resource) => resource,
            WatchFault::None => return,
        };
        self.shared
            .watches
            .send_replace(WatchFault::Expired(expired));
    }

    /// How many requests the fault has failed so far.
    pub fn failed(&self) -> u64 {
        self.shared.failed.load(Ordering::Relaxed)
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
        let _ = std::fs::remove_file(&self.kubeconfig);
    }
}

/// The resource of a request path (`/api/v1/namespaces/a/configmaps` -> `configmaps`), and
/// whether it names one object.
fn resource_of(path: &str) -> Option<(&str, bool)> {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let rest: &[&str] = match segs.as_slice() {
        ["api", _, rest @ ..] | ["apis", _, _, rest @ ..] => rest,
        _ => return None,
    };
    let rest = match rest {
        ["namespaces", _ns, more @ ..] if !more.is_empty() => more,
        other => other,
    };
    match rest {
        [r] => Some((r, false)),
        [r, ..] => Some((r, true)),
        [] => None,
    }
}

/// The resource of a watch request (`None`: not a watch).
fn watched_resource(path: &str, query: Option<&str>) -> Option<String> {
    let watch = query.is_some_and(|q| q.split('&').any(|kv| kv == "watch=true" || kv == "watch=1"));
    watch.then(|| resource_of(path).map(|(r, _)| r.to_string()))?
}

fn should_fail(shared: &Shared, method: &Method, path: &str, query: Option<&str>) -> bool {
    let watch = query.is_some_and(|q| q.split('&').any(|kv| kv.starts_with("watch=")));
    let is_list =
        *method == Method::GET && !watch && resource_of(path).is_some_and(|(_, named)| !named);
    if !is_list {
        return false;
    }
    let mut fault = shared.fault.lock().unwrap();
    let Some(f) = fault.as_mut() else {
        return false;
    };
    let spared = query.is_some_and(|q| q.contains(f.spare));
    if f.remaining == 0 || spared || resource_of(path).map(|(r, _)| r) != Some(f.resource) {
        return false;
    }
    f.remaining -= 1;
    shared.failed.fetch_add(1, Ordering::Relaxed);
    true
}

/// The error event an API server ends a watch with when it cannot resume it.
const EXPIRED_EVENT: &str = concat!(
    r#"{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"#,
    r#""status":"Failure","message":"too old resource version (injected by the test's fault proxy)","#,
    r#""reason":"Expired","code":410}}"#,
    "\n"
);

/// A watch response body that forwards whole event lines while its resource's watches flow,
/// holds them while frozen, and ends with [`EXPIRED_EVENT`] once expired.
fn faultable_watch(
    body: Body,
    resource: String,
    faults: tokio::sync::watch::Receiver<WatchFault>,
) -> Body {
    use futures::StreamExt;
    let watch = WatchBody {
        inner: body.into_data_stream(),
        pending: Vec::new(),
        faults,
        resource,
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
    /// Bytes of an event line not complete yet.
    pending: Vec<u8>,
    faults: tokio::sync::watch::Receiver<WatchFault>,
    resource: String,
    /// Held back at some point: only such a watch expires (those opened later flow).
    frozen: bool,
    ended: bool,
}

impl WatchBody {
    /// The next whole event line, and whether it is the last; `None` when the server ended.
    async fn next_line(&mut self) -> Option<(Vec<u8>, bool)> {
        use futures::StreamExt;
        loop {
            let fault = *self.faults.borrow_and_update();
            match fault {
                WatchFault::Expired(r) if r == self.resource && self.frozen => {
                    return Some((EXPIRED_EVENT.as_bytes().to_vec(), true));
                }
                WatchFault::Frozen(r) if r == self.resource => {
                    self.frozen = true;
                    self.faults.changed().await.ok()?;
                    continue;
                }
                _ => {}
            }
            if let Some(end) = self.pending.iter().position(|b| *b == b'\n') {
                return Some((self.pending.drain(..=end).collect(), false));
            }
            tokio::select! {
                chunk = self.inner.next() => self.pending.extend_from_slice(&chunk?.ok()?),
                changed = self.faults.changed() => changed.ok()?,
            }
        }
    }
}

fn hop_by_hop(name: &HeaderName) -> bool {
    matches!(
        name.as_str(),
        "connection"
            | "keep-alive"
            | "proxy-connection"
            | "transfer-encoding"
            | "te"
            | "trailer"
            | "upgrade"
            | "host"
    )
}

async fn forward(State((client, shared)): State<(kube::Client, Shared)>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    if should_fail(&shared, &parts.method, parts.uri.path(), parts.uri.query()) {
        let status = r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"injected by the test's fault proxy","reason":"InternalError","code":500}"#;
        return (
            StatusCode::INTERNAL_SERVER_ERROR,
            [(header::CONTENT_TYPE, "application/json")],
            status,
        )
            .into_response();
    }
    let bytes = match axum::body::to_bytes(body, 64 << 20).await {
        Ok(b) => b,
        Err(e) => return (StatusCode::BAD_REQUEST, e.to_string()).into_response(),
    };
    let uri = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "/".into());
    let mut out = axum::http::Request::builder().method(parts.method).uri(uri);
    for (k, v) in &parts.headers {
        if !hop_by_hop(k) && k != header::CONTENT_LENGTH {
            out = out.header(k, v);
        }
    }
    let out = match out.body(kube::client::Body::from(bytes)) {
        Ok(r) => r,
        Err(e) => return (StatusCode::BAD_REQUEST, e.to_string()).into_response(),
    };
    match client.send(out).await {
        Ok(resp) => {
            let (mut p, b) = resp.into_parts();
            let names: Vec<HeaderName> = p
                .headers
                .keys()
                .filter(|k| hop_by_hop(k))
                .cloned()
                .collect();
            for n in names {
                p.headers.remove(n);
            }
            let body = Body::new(b);
            match watched_resource(parts.uri.path(), parts.uri.query()) {
                Some(resource) => {
                    let faults = shared.watches.subscribe();
                    Response::from_parts(p, faultable_watch(body, resource, faults))
                }
                None => Response::from_parts(p, body),
            }
        }
        Err(e) => (StatusCode::BAD_GATEWAY, format!("fault proxy: {e}")).into_response(),
    }
}
