//! What the controller tells the outside: logs and traces, Kubernetes Events, metrics.

pub mod api_requests;
pub mod events;
pub mod logging;
pub mod meta_info;
pub mod metrics;
pub mod outcomes;
pub mod tracing;

pub use self::tracing::current_trace_id;
