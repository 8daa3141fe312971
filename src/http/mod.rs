//! The admin endpoint: `/metrics` (Prometheus), `/live` and `/ready` (probes),
//! `/debug/explain?kind=&namespace=&name=[&config=]` (JSON verdicts from the live index),
//! `/debug/shadow` (shadow mode's report); CPU profiles on
//! their own address when enabled; on `--health-addr`, Reloader v2's probe paths `/healthz` and
//! `/readyz`, answered as `/live` and `/ready` are.

pub mod pprof;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Query, State};
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;

use crate::index::ReverseIndex;
use crate::shard::Ownership;
use crate::telemetry::metrics::Metrics;

/// What the endpoints read.
pub struct AdminState {
    pub metrics: Arc<Metrics>,
    pub index: Arc<ReverseIndex>,
    pub ownership: Arc<Ownership>,
    pub ready: Box<dyn Fn() -> bool + Send + Sync>,
    pub explain: Option<crate::explain::live::LiveExplainer>,
    /// Shadow mode's judge (`/debug/shadow`), with `--shadow`.
    pub shadow: Option<Arc<crate::shadow::Shadow>>,
}

async fn metrics(State(s): State<Arc<AdminState>>) -> impl IntoResponse {
    s.metrics
        .set_state((s.ready)(), s.ownership.selected_count());
    let body = s.metrics.render(&s.index, s.ownership.owned_count());
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        body,
    )
}

async fn live() -> &'static str {
    "ok"
}

async fn ready(State(s): State<Arc<AdminState>>) -> (StatusCode, &'static str) {
    if (s.ready)() {
        (StatusCode::OK, "ok")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "caches not synced yet")
    }
}

#[derive(serde::Deserialize)]
struct ExplainQuery {
    kind: String,
    namespace: String,
    name: String,
    /// `configmap/app`: the verdict for this config alone (as `explain --for`).
    config: Option<String>,
}

async fn debug_explain(
    State(s): State<Arc<AdminState>>,
    Query(q): Query<ExplainQuery>,
) -> impl IntoResponse {
    let json = || [(header::CONTENT_TYPE, "application/json")];
    let error = |code, message: String| {
        let body = serde_json::json!({ "error": message }).to_string();
        (code, json(), body)
    };
    let Some(explainer) = &s.explain else {
        return error(StatusCode::NOT_FOUND, "explain is not served".into());
    };
    let Some(kind) = crate::explain::live::parse_workload_kind(&q.kind) else {
        return error(
            StatusCode::BAD_REQUEST,
            format!("unknown workload kind '{}'", q.kind),
        );
    };
    let only = match q.config.as_deref().map(crate::explain::cli::parse_config) {
        None => None,
        Some(Ok(only)) => Some(only),
        Some(Err(e)) => return error(StatusCode::BAD_REQUEST, e.to_string()),
    };
    let only = only.as_ref().map(|(k, n)| (*k, n.as_str()));
    let answer = explainer.answer(kind, &q.namespace, &q.name, only);
    let body = serde_json::to_string_pretty(&answer).unwrap_or_default();
    (StatusCode::OK, json(), body)
}

/// The shadow report as JSON; 404 when the replica is not in shadow mode.
async fn debug_shadow(State(s): State<Arc<AdminState>>) -> impl IntoResponse {
    let json = [(header::CONTENT_TYPE, "application/json")];
    match &s.shadow {
        Some(shadow) => {
            let body = serde_json::to_string_pretty(&shadow.report()).unwrap_or_default();
            (StatusCode::OK, json, body)
        }
        None => {
            let body = serde_json::json!({"error": "not in shadow mode (--shadow)"}).to_string();
            (StatusCode::NOT_FOUND, json, body)
        }
    }
}

pub fn router(state: Arc<AdminState>) -> Router {
    Router::new()
        .route("/debug/explain", get(debug_explain))
        .route("/debug/shadow", get(debug_shadow))
        .route("/metrics", get(metrics))
        .route("/live", get(live))
        .route("/ready", get(ready))
        .with_state(state)
}

/// Reloader v2's probe server (controller-runtime's paths): `/healthz` as `/live`, `/readyz` as
/// `/ready`, each also under its check's name (`/healthz/healthz`, `/readyz/readyz`), as
/// controller-runtime serves a named check. Nothing else is served there.
pub fn health_router(state: Arc<AdminState>) -> Router {
    Router::new()
        .route("/healthz", get(live))
        .route("/healthz/healthz", get(live))
        .route("/readyz", get(ready))
        .route("/readyz/readyz", get(ready))
        .with_state(state)
}

/// `--health-addr`: `None` when it turns the probe server off (`0` or empty, as in
/// controller-runtime), else the address.
pub fn parse_health_addr(addr: &str) -> Result<Option<SocketAddr>, std::net::AddrParseError> {
    match addr.trim() {
        "" | "0" => Ok(None),
        addr => parse_listen_addr(addr).map(Some),
    }
}

/// Binds `--health-addr` and serves the probe paths until the process ends.
pub async fn serve_health(addr: SocketAddr, state: Arc<AdminState>) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    tracing::info!(%addr, "serving /healthz and /readyz");
    axum::serve(listener, health_router(state)).await
}

/// Accepts Go-style `:9090` as well as `host:port`.
pub fn parse_listen_addr(addr: &str) -> Result<SocketAddr, std::net::AddrParseError> {
    if let Some(port) = addr.strip_prefix(':') {
        format!("0.0.0.0:{port}").parse()
    } else {
        addr.parse()
    }
}

/// Binds and serves until the process ends.
pub async fn serve(addr: SocketAddr, state: Arc<AdminState>) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    tracing::info!(%addr, "serving /metrics, /live, /ready and /debug/explain");
    axum::serve(listener, router(state)).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_style_addresses() {
        assert_eq!(parse_listen_addr(":9090").unwrap().port(), 9090);
        assert_eq!(
            parse_listen_addr("127.0.0.1:1").unwrap().to_string(),
            "127.0.0.1:1"
        );
        assert!(parse_listen_addr("nope").is_err());
    }

    #[test]
    fn health_addr_zero_or_empty_turns_the_probe_server_off() {
        assert_eq!(parse_health_addr("0").unwrap(), None);
        assert_eq!(parse_health_addr("").unwrap(), None);
        assert_eq!(parse_health_addr(":8080").unwrap().unwrap().port(), 8080);
        assert!(parse_health_addr("eighty").is_err());
    }
}
