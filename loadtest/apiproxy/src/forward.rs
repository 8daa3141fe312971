//! The one request handler: classify, let the hooks see or answer the request, send it on
//! through the kube `Client`, and hand the response back with hop-by-hop headers removed.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderName, StatusCode, header, request};
use axum::response::{IntoResponse, Response};

use crate::{Hooks, classify};

/// Request bodies are read whole before forwarding; no Kubernetes object comes near this.
const MAX_REQUEST_BODY: usize = 64 << 20;

#[derive(Clone)]
struct Upstream {
    name: &'static str,
    client: kube::Client,
    hooks: Arc<dyn Hooks>,
}

pub(crate) fn router(
    name: &'static str,
    client: kube::Client,
    hooks: Arc<dyn Hooks>,
) -> axum::Router {
    let upstream = Upstream {
        name,
        client,
        hooks,
    };
    axum::Router::new().fallback(forward).with_state(upstream)
}

async fn forward(State(up): State<Upstream>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let mut call = classify(&parts.method, parts.uri.path(), parts.uri.query());
    let accept = parts.headers.get(axum::http::header::ACCEPT);
    call.accept = accept.and_then(|v| v.to_str().ok()).map(str::to_string);
    if let Some(answer) = up.hooks.request(&call) {
        return answer;
    }
    let bytes = match axum::body::to_bytes(body, MAX_REQUEST_BODY).await {
        Ok(b) => b,
        Err(e) => return (StatusCode::BAD_REQUEST, e.to_string()).into_response(),
    };
    let out = match upstream_request(&parts, bytes) {
        Ok(r) => r,
        Err(e) => return (StatusCode::BAD_REQUEST, e.to_string()).into_response(),
    };
    match up.client.send(out).await {
        Ok(resp) => {
            let (mut head, body) = resp.into_parts();
            strip_hop_by_hop(&mut head.headers);
            let body = up.hooks.response(&call, &head, Body::new(body));
            Response::from_parts(head, body)
        }
        Err(e) => {
            up.hooks.upstream_error(&call);
            (StatusCode::BAD_GATEWAY, format!("{}: {e}", up.name)).into_response()
        }
    }
}

/// The client's request as the kube `Client` sends it: same method, path, query and end-to-end
/// headers; the body's length is set again from the bytes.
fn upstream_request(
    parts: &request::Parts,
    body: Bytes,
) -> axum::http::Result<axum::http::Request<kube::client::Body>> {
    let uri = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let mut out = axum::http::Request::builder()
        .method(parts.method.clone())
        .uri(uri);
    for (k, v) in &parts.headers {
        if !hop_by_hop(k) && k != header::CONTENT_LENGTH {
            out = out.header(k, v);
        }
    }
    out.body(kube::client::Body::from(body))
}

fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let names: Vec<HeaderName> = headers.keys().filter(|k| hop_by_hop(k)).cloned().collect();
    for n in names {
        headers.remove(n);
    }
}

/// Headers that belong to one connection, not to the request (RFC 9110, 7.6.1), plus `host`,
/// which the kube `Client` sets for the API server.
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

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicU64, Ordering};

    use axum::http::{Method, response};
    use futures::StreamExt;

    use super::*;
    use crate::{ApiProxy, Call};

    /// Answers every request itself with the path it saw and whether a `te` header came along,
    /// on a connection it asks to close.
    async fn stub_api_server(hits: Arc<AtomicU64>) -> String {
        let app = axum::Router::new().fallback(move |req: Request| async move {
            hits.fetch_add(1, Ordering::Relaxed);
            let te = req.headers().get("te").is_some();
            let body = format!("{} te={te}", req.uri());
            ([(header::CONNECTION, "close")], body)
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        url
    }

    fn client_of(url: &str) -> kube::Client {
        kube::Client::try_from(kube::Config::new(url.parse().unwrap())).unwrap()
    }

    /// Fails every list, and records what it saw.
    #[derive(Default)]
    struct Recorder {
        verbs: Mutex<Vec<String>>,
        connection_headers: AtomicU64,
        body_bytes: Arc<AtomicU64>,
        upstream_errors: AtomicU64,
    }

    impl Hooks for Recorder {
        fn request(&self, call: &Call) -> Option<Response> {
            self.verbs.lock().unwrap().push(call.verb.clone());
            (call.verb == "list").then(|| StatusCode::INTERNAL_SERVER_ERROR.into_response())
        }

        fn response(&self, _call: &Call, head: &response::Parts, body: Body) -> Body {
            let connection = head.headers.get(header::CONNECTION).is_some();
            self.connection_headers
                .fetch_add(connection.into(), Ordering::Relaxed);
            let bytes = self.body_bytes.clone();
            Body::from_stream(body.into_data_stream().inspect(move |chunk| {
                let len = chunk.as_ref().map_or(0, |b| b.len());
                bytes.fetch_add(len as u64, Ordering::Relaxed);
            }))
        }

        fn upstream_error(&self, _call: &Call) {
            self.upstream_errors.fetch_add(1, Ordering::Relaxed);
        }
    }

    async fn send(proxy: &ApiProxy, method: Method, path: &str) -> (StatusCode, String) {
        let req = axum::http::Request::builder()
            .method(method)
            .uri(path)
            .header("te", "trailers")
            .body(kube::client::Body::empty())
            .unwrap();
        let resp = client_of(&format!("http://{}", proxy.addr()))
            .send(req)
            .await
            .unwrap();
        let status = resp.status();
        let bytes = axum::body::to_bytes(Body::new(resp.into_body()), 1 << 20)
            .await
            .unwrap();
        (status, String::from_utf8(bytes.to_vec()).unwrap())
    }

    /// A proxy with a [`Recorder`] in front of the stub API server, which counts its hits.
    async fn proxy_to_stub() -> (ApiProxy, Arc<Recorder>, Arc<AtomicU64>) {
        let hits = Arc::new(AtomicU64::new(0));
        let upstream = client_of(&stub_api_server(hits.clone()).await);
        let hooks = Arc::new(Recorder::default());
        let proxy = ApiProxy::start("test-proxy", upstream, hooks.clone())
            .await
            .unwrap();
        (proxy, hooks, hits)
    }

    #[tokio::test]
    async fn a_request_goes_through_without_its_hop_by_hop_headers_and_its_body_through_the_hook() {
        let (proxy, hooks, hits) = proxy_to_stub().await;

        let path = "/api/v1/namespaces/a/configmaps/c?resourceVersion=1";
        let (status, body) = send(&proxy, Method::GET, path).await;
        assert_eq!(
            (status, body.as_str()),
            (StatusCode::OK, &*format!("{path} te=false"))
        );
        assert_eq!(hits.load(Ordering::Relaxed), 1);
        assert_eq!(hooks.connection_headers.load(Ordering::Relaxed), 0);
        assert_eq!(hooks.body_bytes.load(Ordering::Relaxed), body.len() as u64);
        assert_eq!(*hooks.verbs.lock().unwrap(), ["get"]);
    }

    #[tokio::test]
    async fn a_request_the_hook_answers_never_reaches_the_api_server() {
        let (proxy, hooks, hits) = proxy_to_stub().await;

        let (status, _) = send(&proxy, Method::GET, "/api/v1/configmaps").await;
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(hits.load(Ordering::Relaxed), 0);
        assert_eq!(*hooks.verbs.lock().unwrap(), ["list"]);
    }

    #[tokio::test]
    async fn an_unreachable_api_server_is_a_502_from_the_proxy_by_name() {
        let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", closed.local_addr().unwrap());
        drop(closed);
        let hooks = Arc::new(Recorder::default());
        let proxy = ApiProxy::start("test-proxy", client_of(&url), hooks.clone())
            .await
            .unwrap();

        let (status, body) = send(&proxy, Method::GET, "/api/v1/namespaces/a").await;
        assert_eq!(status, StatusCode::BAD_GATEWAY);
        assert!(body.starts_with("test-proxy: "), "{body}");
        assert_eq!(hooks.upstream_errors.load(Ordering::Relaxed), 1);
    }
}
