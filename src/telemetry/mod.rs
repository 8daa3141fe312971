//! What the controller tells the outside: logs, trace export, metrics, the meta-info
//! ConfigMap. Kubernetes Events are writes and go with them (`rollout::events`).

pub mod api_requests;
pub mod logging;
pub mod meta_info;
pub mod metrics;
pub mod outcomes;
pub mod tracing;
