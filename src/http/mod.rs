//! The admin endpoint: `/metrics` (Prometheus), `/live` and `/ready` (probes); CPU profiles on
//! their own address when enabled.

pub mod pprof;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
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

pub fn router(state: Arc<AdminState>) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/live", get(live))
        .route("/ready", get(ready))
        .with_state(state)
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
    tracing::info!(%addr, "serving /metrics, /live and /ready");
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
}
