//! What the controller tells the outside: logs and traces, Kubernetes Events, metrics.

pub mod events;
pub mod logging;
pub mod metrics;

/// The current span's OpenTelemetry trace id, when tracing is on (for logs and Event messages).
pub fn current_trace_id() -> Option<String> {
    None
}
