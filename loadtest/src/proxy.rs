//! The counting proxy between the controller and the API server (the forwarding itself is
//! `kube-reloader-apiproxy`'s). Every request the controller issues is counted by verb and
//! resource, and its writes to workloads are timestamped (the rate-limit check).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::{Context, Result};
use apiproxy::{ApiProxy, Call, Hooks};
use axum::body::Body;
use axum::http::response;
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

pub struct Proxy {
    counter: Arc<Counter>,
    proxy: ApiProxy,
}

/// The resources a reload writes (what counts as a workload write).
pub(crate) const WORKLOAD_RESOURCES: &[&str] = &[
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
        let counter = Arc::new(Counter {
            stats: Arc::default(),
            epoch,
        });
        let proxy = ApiProxy::start("loadtest-proxy", client, counter.clone())
            .await
            .context("binding the API proxy")?;
        Ok(Self { counter, proxy })
    }

    pub fn stats(&self) -> Stats {
        self.counter.stats.lock().unwrap().clone()
    }

    /// A kubeconfig that points at the proxy (no credentials: the proxy holds them).
    pub fn write_kubeconfig(&self, path: &Path) -> Result<()> {
        std::fs::write(path, self.proxy.kubeconfig())
            .with_context(|| format!("writing {}", path.display()))
    }
}

struct Counter {
    stats: Arc<Mutex<Stats>>,
    epoch: Instant,
}

fn on_workload(call: &Call) -> bool {
    WORKLOAD_RESOURCES.contains(&call.resource.as_str())
}

fn is_write(call: &Call) -> bool {
    matches!(call.verb.as_str(), "create" | "update" | "patch")
}

impl Hooks for Counter {
    fn request(&self, call: &Call) -> Option<axum::response::Response> {
        let mut s = self.stats.lock().unwrap();
        if on_workload(call) {
            let t = self.epoch.elapsed().as_secs_f64();
            if is_write(call) {
                s.workload_writes.push(t);
            } else if call.verb == "get" {
                s.workload_reads.push(t);
            }
        }
        let key = (call.verb.clone(), call.resource.clone());
        *s.counts.entry(key).or_default() += 1;
        None
    }

    fn response(&self, call: &Call, head: &response::Parts, body: Body) -> Body {
        {
            let mut s = self.stats.lock().unwrap();
            *s.status_codes.entry(head.status.as_u16()).or_default() += 1;
            if on_workload(call) && is_write(call) {
                *s.workload_write_codes
                    .entry(head.status.as_u16())
                    .or_default() += 1;
            }
        }
        let (stats, resource) = (self.stats.clone(), call.resource.clone());
        let counted = body.into_data_stream().map(move |chunk| {
            if let Ok(bytes) = &chunk {
                let mut s = stats.lock().unwrap();
                *s.bytes_received.entry(resource.clone()).or_default() += bytes.len() as u64;
            }
            chunk
        });
        Body::from_stream(counted)
    }

    fn upstream_error(&self, _call: &Call) {
        self.stats.lock().unwrap().upstream_errors += 1;
    }
}
