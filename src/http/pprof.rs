//! `--enable-pprof`: CPU profiles on their own address (`--pprof-addr`, default `:6060`), never on
//! the metrics port. `GET /debug/pprof/profile?seconds=N` samples for N seconds (default 10,
//! at most 60) and answers an SVG flame graph.

use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::extract::Query;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::Deserialize;

#[derive(Deserialize)]
struct ProfileParams {
    seconds: Option<u64>,
}

/// Samples per second: Go's pprof default.
const FREQUENCY: i32 = 100;

async fn profile(Query(params): Query<ProfileParams>) -> Response {
    let seconds = params.seconds.unwrap_or(10).clamp(1, 60);
    let guard = match pprof::ProfilerGuardBuilder::default()
        .frequency(FREQUENCY)
        .blocklist(&["libc", "libgcc", "pthread", "vdso"])
        .build()
    {
        Ok(g) => g,
        Err(e) => {
            return (
                StatusCode::SERVICE_UNAVAILABLE,
                format!("profiler busy or unavailable: {e}"),
            )
                .into_response();
        }
    };
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    let report = match guard.report().build() {
        Ok(r) => r,
        Err(e) => return (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    };
    if report.data.is_empty() {
        // An idle process takes no samples, and an empty flame graph renders as nothing.
        let svg = format!(
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="600" height="40"><text x="10" y="25">no CPU samples in {seconds}s: the process was idle</text></svg>"#
        );
        return ([(header::CONTENT_TYPE, "image/svg+xml")], svg).into_response();
    }
    let mut svg = Vec::new();
    if let Err(e) = report.flamegraph(&mut svg) {
        return (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response();
    }
    ([(header::CONTENT_TYPE, "image/svg+xml")], svg).into_response()
}

pub fn router() -> Router {
    Router::new().route("/debug/pprof/profile", get(profile))
}

pub async fn serve(addr: SocketAddr) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    tracing::info!(%addr, "serving CPU profiles on /debug/pprof/profile");
    axum::serve(listener, router()).await
}
