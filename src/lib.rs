//! kube-reloader: rolls Kubernetes workloads when the ConfigMaps, Secrets or CSI secrets they use
//! change. The data path, one module per stage:
//! watch -> digest -> index -> decide -> rollout (queue, limiter, patch).

pub mod access;
pub mod alert;
pub mod config;
pub mod controller;
pub mod decide;
pub mod digest;
pub mod engine;
pub mod explain;
pub mod go_values;
pub mod http;
pub mod index;
pub mod model;
pub mod policy;
pub mod references;
pub mod resources;
pub mod rollout;
pub mod shard;
pub mod telemetry;
pub mod watch;
