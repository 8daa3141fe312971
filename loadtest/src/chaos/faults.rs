//! The fault proxy in front of one replica: the replica's kubeconfig points here, and this
//! proxy forwards to the run's counting proxy (so every request is still counted). Armed by the
//! chaos driver, each fault ends by itself at its deadline:
//!
//! - watch streams cut (they end after their last whole event, as when a connection drops);
//! - a share of writes answered 500 or 429 with a Kubernetes `Status` body (429 with
//!   `Retry-After`), as an overloaded API server answers;
//! - every response delayed (its body held back before the first byte);
//! - `410 Gone` on the first resume of each resource's watch (a watch from a resource version),
//!   as an API server answers when that version is no longer in its history.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use apiproxy::{ApiProxy, Call, Hooks, WatchFraming};
use axum::body::{Body, Bytes};
use axum::http::{StatusCode, header, response};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use serde::Serialize;

use crate::rng::Rng;

/// What is armed now; each until its deadline.
#[derive(Default)]
struct Armed {
    write_errors: Option<(u16, u8, Instant)>,
    latency: Option<(Duration, Instant)>,
    /// The deadline, and the resources whose resume was already refused.
    gone: Option<(Instant, HashSet<String>)>,
}

/// What the proxy injected, for the fault log.
#[derive(Debug, Default, Clone, Serialize)]
pub struct Injected {
    pub write_errors: u64,
    pub delayed: u64,
    pub gone: u64,
    pub watches_cut: u64,
}

struct State {
    armed: Mutex<(Armed, Rng)>,
    injected: Mutex<Injected>,
    /// When this replica tried to write a workload, and in which namespace: what it acted on.
    workload_writes: Mutex<Vec<(Instant, String)>>,
    /// Bumped to end every open watch.
    cuts: tokio::sync::watch::Sender<u64>,
}

/// One replica's fault proxy.
pub struct FaultProxy {
    state: Arc<State>,
    kubeconfig: PathBuf,
    _proxy: ApiProxy,
}

impl FaultProxy {
    /// Serves on a loopback port, forwarding through `upstream` (a client of the counting proxy);
    /// writes the replica's kubeconfig to `kubeconfig`.
    pub async fn start(upstream: kube::Client, kubeconfig: &Path, seed: u64) -> Result<Self> {
        let state = Arc::new(State {
            armed: Mutex::new((Armed::default(), Rng::new(seed))),
            injected: Mutex::default(),
            workload_writes: Mutex::default(),
            cuts: tokio::sync::watch::Sender::new(0),
        });
        let proxy = ApiProxy::start("chaos-proxy", upstream, state.clone())
            .await
            .context("binding a replica's fault proxy")?;
        std::fs::write(kubeconfig, proxy.kubeconfig())
            .with_context(|| format!("writing {}", kubeconfig.display()))?;
        Ok(Self {
            state,
            kubeconfig: kubeconfig.to_path_buf(),
            _proxy: proxy,
        })
    }

    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// Ends every watch open now.
    pub fn cut_watches(&self) {
        let open = self.state.cuts.receiver_count() as u64;
        self.state.injected.lock().unwrap().watches_cut += open;
        self.state.cuts.send_modify(|n| *n += 1);
    }

    pub fn write_errors(&self, code: u16, share_pct: u8, for_s: f64) {
        self.state.armed.lock().unwrap().0.write_errors = Some((code, share_pct, deadline(for_s)));
    }

    pub fn latency(&self, ms: u64, for_s: f64) {
        self.state.armed.lock().unwrap().0.latency =
            Some((Duration::from_millis(ms), deadline(for_s)));
    }

    /// Cuts the watches, and refuses the first resume of each resource for `for_s`.
    pub fn gone_on_resume(&self, for_s: f64) {
        self.state.armed.lock().unwrap().0.gone = Some((deadline(for_s), HashSet::new()));
        self.cut_watches();
    }

    pub fn injected(&self) -> Injected {
        self.state.injected.lock().unwrap().clone()
    }

    /// Every workload write this replica tried (refused ones included), with its namespace.
    pub fn workload_writes(&self) -> Vec<(Instant, String)> {
        self.state.workload_writes.lock().unwrap().clone()
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.kubeconfig);
    }
}

fn deadline(for_s: f64) -> Instant {
    Instant::now() + Duration::from_secs_f64(for_s)
}

/// What to do with one request.
#[derive(Debug, PartialEq)]
enum Verdict {
    Forward,
    Fail(u16),
    Gone,
}

fn is_write(call: &Call) -> bool {
    matches!(call.verb.as_str(), "create" | "update" | "patch")
}

/// A watch from a resource version the client had (not a fresh one after a list from "0").
fn is_resume(call: &Call) -> bool {
    call.verb == "watch"
        && call.query.as_deref().is_some_and(|q| {
            q.split('&').any(|kv| {
                kv.strip_prefix("resourceVersion=")
                    .is_some_and(|v| !v.is_empty() && v != "0")
            })
        })
}

/// The decision for `call` at `now`: pure but for the draw of the share.
fn decide(armed: &mut Armed, rng: &mut Rng, call: &Call, now: Instant) -> Verdict {
    if let Some((until, refused)) = &mut armed.gone
        && now < *until
        && is_resume(call)
        && refused.insert(call.resource.clone())
    {
        return Verdict::Gone;
    }
    if let Some((code, share, until)) = armed.write_errors
        && now < until
        && is_write(call)
        && rng.below(100) < usize::from(share)
    {
        return Verdict::Fail(code);
    }
    Verdict::Forward
}

fn status(code: u16, reason: &str, message: &str) -> Response {
    let body = serde_json::json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": format!("{message} (injected by the chaos proxy)"), "reason": reason, "code": code,
    });
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut r = (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response();
    if code == 429 {
        r.headers_mut()
            .insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
    }
    r
}

impl Hooks for State {
    fn request(&self, call: &Call) -> Option<Response> {
        if is_write(call)
            && crate::proxy::WORKLOAD_RESOURCES.contains(&call.resource.as_str())
            && let Some(ns) = &call.namespace
        {
            let mut writes = self.workload_writes.lock().unwrap();
            writes.push((Instant::now(), ns.clone()));
        }
        let verdict = {
            let (armed, rng) = &mut *self.armed.lock().unwrap();
            decide(armed, rng, call, Instant::now())
        };
        let mut injected = self.injected.lock().unwrap();
        match verdict {
            Verdict::Forward => None,
            Verdict::Fail(429) => {
                injected.write_errors += 1;
                Some(status(429, "TooManyRequests", "too many requests"))
            }
            Verdict::Fail(code) => {
                injected.write_errors += 1;
                Some(status(code, "InternalError", "internal error"))
            }
            Verdict::Gone => {
                injected.gone += 1;
                Some(status(410, "Expired", "too old resource version"))
            }
        }
    }

    fn response(&self, call: &Call, head: &response::Parts, body: Body) -> Body {
        let delay = {
            let armed = &self.armed.lock().unwrap().0;
            armed
                .latency
                .filter(|(_, until)| Instant::now() < *until)
                .map(|(d, _)| d)
        };
        if delay.is_some() {
            self.injected.lock().unwrap().delayed += 1;
        }
        let cut = (call.verb == "watch").then(|| (self.cuts.subscribe(), WatchFraming::of(head)));
        shaped(body, delay, cut)
    }
}

/// The body, delayed by `delay` before its first byte and, for a watch, ended after its last
/// whole event (a JSON line or a protobuf frame) once the cut counter moves.
fn shaped(
    body: Body,
    delay: Option<Duration>,
    cut: Option<(tokio::sync::watch::Receiver<u64>, WatchFraming)>,
) -> Body {
    let inner = body.into_data_stream();
    let Some((mut cut, framing)) = cut else {
        let delayed = futures::stream::once(async move {
            if let Some(d) = delay {
                tokio::time::sleep(d).await;
            }
            futures::stream::empty::<std::result::Result<Bytes, axum::Error>>()
        })
        .flatten()
        .chain(inner);
        return Body::from_stream(delayed);
    };
    cut.mark_unchanged();
    let state = (inner, Vec::<u8>::new(), cut, delay, false);
    let lines = futures::stream::unfold(
        state,
        move |(mut inner, mut pending, mut cut, delay, ended)| async move {
            if ended {
                return None;
            }
            if let Some(d) = delay {
                tokio::time::sleep(d).await;
            }
            loop {
                if let Some(end) = framing.event_end(&pending) {
                    let line: Vec<u8> = pending.drain(..end).collect();
                    return Some((
                        Ok::<_, std::io::Error>(Bytes::from(line)),
                        (inner, pending, cut, None, false),
                    ));
                }
                tokio::select! {
                    chunk = inner.next() => match chunk {
                        Some(Ok(bytes)) => pending.extend_from_slice(&bytes),
                        _ => return None,
                    },
                    changed = cut.changed() => {
                        let _ = changed;
                        return None;
                    }
                }
            }
        },
    );
    Body::from_stream(lines.boxed())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(verb: &str, resource: &str, query: Option<&str>) -> Call {
        Call {
            verb: verb.into(),
            resource: resource.into(),
            namespace: Some("ns".into()),
            query: query.map(str::to_string),
            accept: None,
        }
    }

    #[test]
    fn a_share_of_writes_fails_and_nothing_else_while_armed() {
        let mut armed = Armed::default();
        let mut rng = Rng::new(1);
        let now = Instant::now();
        armed.write_errors = Some((429, 30, now + Duration::from_secs(10)));
        let patch = call("patch", "deployments", None);
        let failed = (0..1000)
            .filter(|_| decide(&mut armed, &mut rng, &patch, now) == Verdict::Fail(429))
            .count();
        assert!((200..400).contains(&failed), "{failed} of 1000");
        let list = call("list", "configmaps", Some("limit=500"));
        assert_eq!(decide(&mut armed, &mut rng, &list, now), Verdict::Forward);
        // Past its deadline the fault is gone.
        let later = now + Duration::from_secs(11);
        assert!((0..100).all(|_| decide(&mut armed, &mut rng, &patch, later) == Verdict::Forward));
    }

    #[test]
    fn gone_refuses_the_first_resume_of_each_resource_only() {
        let mut armed = Armed::default();
        let mut rng = Rng::new(1);
        let now = Instant::now();
        armed.gone = Some((now + Duration::from_secs(10), HashSet::new()));
        let resume = call(
            "watch",
            "configmaps",
            Some("watch=true&resourceVersion=812"),
        );
        let fresh = call("watch", "secrets", Some("watch=true&resourceVersion=0"));
        assert_eq!(decide(&mut armed, &mut rng, &fresh, now), Verdict::Forward);
        assert_eq!(decide(&mut armed, &mut rng, &resume, now), Verdict::Gone);
        // After the relist the watch resumes from the list's version: not refused again.
        assert_eq!(decide(&mut armed, &mut rng, &resume, now), Verdict::Forward);
        let other = call("watch", "deployments", Some("resourceVersion=9&watch=1"));
        assert_eq!(decide(&mut armed, &mut rng, &other, now), Verdict::Gone);
    }

    #[tokio::test]
    async fn a_cut_watch_ends_after_its_last_whole_event() {
        let (tx, rx) = tokio::sync::mpsc::channel::<std::result::Result<Bytes, std::io::Error>>(4);
        let body = Body::from_stream(tokio_stream_from(rx));
        let cuts = tokio::sync::watch::Sender::new(0u64);
        let shaped = shaped(body, None, Some((cuts.subscribe(), WatchFraming::Lines)));
        let mut stream = shaped.into_data_stream();
        tx.send(Ok(Bytes::from_static(b"{\"type\":\"ADDED\"}\n{\"ty")))
            .await
            .unwrap();
        assert_eq!(
            stream.next().await.unwrap().unwrap(),
            &b"{\"type\":\"ADDED\"}\n"[..]
        );
        cuts.send_modify(|n| *n += 1);
        assert!(
            stream.next().await.is_none(),
            "the half event is dropped, the stream ends"
        );
    }

    #[tokio::test]
    async fn a_cut_protobuf_watch_ends_after_its_last_whole_frame() {
        let (tx, rx) = tokio::sync::mpsc::channel::<std::result::Result<Bytes, std::io::Error>>(4);
        let body = Body::from_stream(tokio_stream_from(rx));
        let cuts = tokio::sync::watch::Sender::new(0u64);
        let framing = WatchFraming::LengthPrefixed;
        let mut stream = shaped(body, None, Some((cuts.subscribe(), framing))).into_data_stream();
        // A frame of 3 bytes (one of them a newline), then half of the next one.
        tx.send(Ok(Bytes::from_static(&[
            0, 0, 0, 3, b'a', b'\n', b'b', 0, 0, 0, 9, b'c',
        ])))
        .await
        .unwrap();
        assert_eq!(
            stream.next().await.unwrap().unwrap(),
            &[0, 0, 0, 3, b'a', b'\n', b'b'][..]
        );
        cuts.send_modify(|n| *n += 1);
        assert!(stream.next().await.is_none(), "the half frame is dropped");
    }

    fn tokio_stream_from<T: Send + 'static>(
        mut rx: tokio::sync::mpsc::Receiver<T>,
    ) -> impl futures::Stream<Item = T> + Send + 'static {
        futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
    }
}
