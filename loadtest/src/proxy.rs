//! A counting proxy between the controller and the API server: plain HTTP on loopback in front,
//! the real credentials behind (a kube `Client`). Every request the controller issues is counted
//! by verb and resource, and its writes to workloads are timestamped (the rate-limit check).
//! Watches stream through unbuffered.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::{Context, Result};
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderName, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use serde::Serialize;

/// Request counts by (verb, resource), Kubernetes' verb names (watch/list/get/create/...).
pub type Counts = BTreeMap<(String, String), u64>;

#[derive(Default, Clone, Serialize)]
pub struct Stats {
    #[serde(skip)]
    pub counts: Counts,
    pub status_codes: BTreeMap<u16, u64>,
    /// Run-clock times of create/update/patch requests on workload resources.
    pub workload_writes: Vec<f64>,
    /// Run-clock times of get requests on workload resources (a write is usually read first).
    pub workload_reads: Vec<f64>,
    /// Response codes of create/update/patch requests on workload resources (404: the workload
    /// was deleted meanwhile).
    pub workload_write_codes: BTreeMap<u16, u64>,
    pub upstream_errors: u64,
    /// Response body bytes sent to the controller, by resource (what it received from the API
    /// server; watches counted as their events stream through).
    #[serde(skip)]
    pub bytes_received: BTreeMap<String, u64>,
}

#[derive(Clone)]
struct ProxyState {
    client: kube::Client,
    stats: Arc<Mutex<Stats>>,
    epoch: Instant,
}

pub struct Proxy {
    pub addr: SocketAddr,
    stats: Arc<Mutex<Stats>>,
    task: tokio::task::JoinHandle<()>,
}

const WORKLOAD_RESOURCES: &[&str] = &[
    "deployments",
    "statefulsets",
    "daemonsets",
    "cronjobs",
    "jobs",
    "rollouts",
    "deploymentconfigs",
];

impl Proxy {
    pub async fn start(client: kube::Client, epoch: Instant) -> Result<Self> {
        let stats = Arc::new(Mutex::new(Stats::default()));
        let state = ProxyState {
            client,
            stats: stats.clone(),
            epoch,
        };
        let app = axum::Router::new().fallback(forward).with_state(state);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .context("binding the API proxy")?;
        let addr = listener.local_addr()?;
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Self { addr, stats, task })
    }

    pub fn stats(&self) -> Stats {
        self.stats.lock().unwrap().clone()
    }

    /// A kubeconfig that points at the proxy (no credentials: the proxy holds them).
    pub fn write_kubeconfig(&self, path: &Path) -> Result<()> {
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: loadtest-proxy\n  cluster:\n    server: http://{}\nusers:\n- name: loadtest-proxy\n  user: {{}}\ncontexts:\n- name: loadtest-proxy\n  context:\n    cluster: loadtest-proxy\n    user: loadtest-proxy\n    namespace: default\ncurrent-context: loadtest-proxy\n",
            self.addr
        );
        std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Kubernetes' request verb and resource for a path, as the API server names them.
pub fn classify(method: &Method, path: &str, query: Option<&str>) -> (String, String) {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    // /api/v1/... or /apis/<group>/<version>/...
    let rest: &[&str] = match segs.as_slice() {
        ["api", _v, rest @ ..] => rest,
        ["apis", _g, _v, rest @ ..] => rest,
        _ => {
            return (
                method.as_str().to_lowercase(),
                format!("nonresource:{path}"),
            );
        }
    };
    let rest = match rest {
        ["namespaces", _ns, more @ ..] if !more.is_empty() => more,
        other => other,
    };
    let (resource, named) = match rest {
        [] => return ("get".into(), "discovery".into()),
        [r] => (r.to_string(), false),
        [r, _name] => (r.to_string(), true),
        [r, _name, sub, ..] => (format!("{r}/{sub}"), true),
    };
    let watch = query.is_some_and(|q| {
        q.split('&')
            .any(|kv| kv == "watch=true" || kv == "watch=1" || kv == "watch")
    });
    let verb = match *method {
        Method::GET if watch => "watch",
        Method::GET if named => "get",
        Method::GET => "list",
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE if named => "delete",
        Method::DELETE => "deletecollection",
        _ => method.as_str(),
    };
    (verb.to_lowercase(), resource)
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

async fn forward(State(st): State<ProxyState>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let (verb, resource) = classify(&parts.method, parts.uri.path(), parts.uri.query());
    let workload_write = WORKLOAD_RESOURCES.contains(&resource.as_str())
        && matches!(verb.as_str(), "create" | "update" | "patch");
    {
        let mut s = st.stats.lock().unwrap();
        if WORKLOAD_RESOURCES.contains(&resource.as_str()) {
            let t = st.epoch.elapsed().as_secs_f64();
            match verb.as_str() {
                "create" | "update" | "patch" => s.workload_writes.push(t),
                "get" => s.workload_reads.push(t),
                _ => {}
            }
        }
        *s.counts.entry((verb, resource.clone())).or_default() += 1;
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
    match st.client.send(out).await {
        Ok(resp) => {
            let (mut p, b) = resp.into_parts();
            {
                let mut s = st.stats.lock().unwrap();
                *s.status_codes.entry(p.status.as_u16()).or_default() += 1;
                if workload_write {
                    *s.workload_write_codes.entry(p.status.as_u16()).or_default() += 1;
                }
            }
            let names: Vec<HeaderName> = p
                .headers
                .keys()
                .filter(|k| hop_by_hop(k))
                .cloned()
                .collect();
            for n in names {
                p.headers.remove(n);
            }
            let stats = st.stats.clone();
            let counted = Body::new(b).into_data_stream().map(move |chunk| {
                if let Ok(bytes) = &chunk {
                    let mut s = stats.lock().unwrap();
                    *s.bytes_received.entry(resource.clone()).or_default() += bytes.len() as u64;
                }
                chunk
            });
            Response::from_parts(p, Body::from_stream(counted))
        }
        Err(e) => {
            st.stats.lock().unwrap().upstream_errors += 1;
            (StatusCode::BAD_GATEWAY, format!("load-test proxy: {e}")).into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(m: Method, p: &str, q: Option<&str>) -> (String, String) {
        let (v, r) = classify(&m, p, q);
        (v, r)
    }

    #[test]
    fn verbs_and_resources() {
        assert_eq!(
            c(
                Method::GET,
                "/api/v1/configmaps",
                Some("watch=true&resourceVersion=1")
            ),
            ("watch".into(), "configmaps".into())
        );
        assert_eq!(
            c(
                Method::GET,
                "/api/v1/namespaces/a/secrets",
                Some("limit=500")
            ),
            ("list".into(), "secrets".into())
        );
        assert_eq!(
            c(
                Method::PATCH,
                "/apis/apps/v1/namespaces/a/deployments/w",
                None
            ),
            ("patch".into(), "deployments".into())
        );
        assert_eq!(
            c(Method::GET, "/api/v1/namespaces/a", None),
            ("get".into(), "namespaces".into())
        );
        assert_eq!(
            c(Method::GET, "/api/v1/namespaces", Some("watch=1")),
            ("watch".into(), "namespaces".into())
        );
        assert_eq!(
            c(
                Method::PUT,
                "/apis/apps/v1/namespaces/a/deployments/w/status",
                None
            ),
            ("update".into(), "deployments/status".into())
        );
        assert_eq!(
            c(
                Method::POST,
                "/apis/events.k8s.io/v1/namespaces/a/events",
                None
            ),
            ("create".into(), "events".into())
        );
        assert_eq!(c(Method::GET, "/version", None).1, "nonresource:/version");
        assert_eq!(c(Method::GET, "/apis/apps/v1", None).1, "discovery");
    }
}
