//! The context every change driver shares: the client, the ledger of changes, the population,
//! and the writes that change a config (each recorded before it is sent).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Result;
use base64::Engine as _;
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

use crate::ledger::State;
use crate::objects::{self, ConfigRef, Kind, OwnRequests, Population, WorkloadSpec};
use crate::progress::log;
use crate::rng::Rng;
use crate::scenario::Plan;

/// Everything the change drivers share.
pub struct Ctx {
    pub(crate) client: Client,
    pub(crate) epoch: Instant,
    pub(crate) state: Arc<Mutex<State>>,
    pub(crate) own: Arc<OwnRequests>,
    pub(crate) run_id: String,
    pub(crate) pop: Population,
    pub(crate) concurrency: usize,
    pub(crate) nonce: AtomicUsize,
    /// Tag of the changes written now (restart: before-kill / while-down / after-restart).
    pub(crate) phase: Mutex<String>,
    /// Tag of the changes of a config, instead of the phase (references: how the workload
    /// references it; mixed: the workload's kind).
    pub(crate) config_tags: BTreeMap<ConfigRef, String>,
}

impl Ctx {
    pub(crate) fn now(&self) -> f64 {
        self.epoch.elapsed().as_secs_f64()
    }

    pub(crate) fn set_phase(&self, p: &str) {
        *self.phase.lock().unwrap() = p.to_string();
    }

    /// A new, unique payload (of `size` bytes if given).
    pub(crate) fn payload(&self, size: Option<usize>) -> Vec<u8> {
        let n = self.nonce.fetch_add(1, Ordering::Relaxed);
        let mut p = format!("{}-change-{n}-", self.run_id).into_bytes();
        if let Some(size) = size {
            let mut x: u64 = 0x9E37_79B9_7F4A_7C15 ^ n as u64;
            const ALNUM: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
            while p.len() < size {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                p.push(ALNUM[(x >> 33) as usize % ALNUM.len()]);
            }
        }
        p
    }

    /// Writes a new payload into `config` and records the change; returns its id.
    pub(crate) async fn change(&self, config: &ConfigRef, size: Option<usize>) -> usize {
        let payload = self.payload(size);
        let hash = config.hash_of(&payload);
        let expected = self.pop.users.get(config).cloned().unwrap_or_default();
        let tag = match self.config_tags.get(config) {
            Some(t) => t.clone(),
            None => self.phase.lock().unwrap().clone(),
        };
        let id =
            self.state
                .lock()
                .unwrap()
                .register(config.clone(), hash, expected, self.now(), &tag);
        let body = match config.kind {
            Kind::ConfigMap => {
                json!({"data": {objects::DATA_KEY: String::from_utf8_lossy(&payload)}})
            }
            Kind::Secret => json!({"data": {
                objects::DATA_KEY: base64::engine::general_purpose::STANDARD.encode(&payload)
            }}),
        };
        let r = self.patch_config(config, &body).await;
        let mut st = self.state.lock().unwrap();
        match r {
            Ok(applied) => st.ack(id, self.now(), applied),
            Err(e) => st.fail(id, format!("{e:#}")),
        }
        id
    }

    /// Patches a config; returns the resourceVersion the server gave it.
    pub(crate) async fn patch_config(&self, c: &ConfigRef, body: &Value) -> Result<Option<u64>> {
        let pp = PatchParams::default();
        let patch = Patch::Merge(body);
        let version = match c.kind {
            Kind::ConfigMap => {
                self.own.add("patch", "configmaps");
                let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), &c.namespace);
                objects::with_retry(&format!("patching {c}"), || api.patch(&c.name, &pp, &patch))
                    .await?
                    .metadata
                    .resource_version
            }
            Kind::Secret => {
                self.own.add("patch", "secrets");
                let api: Api<Secret> = Api::namespaced(self.client.clone(), &c.namespace);
                objects::with_retry(&format!("patching {c}"), || api.patch(&c.name, &pp, &patch))
                    .await?
                    .metadata
                    .resource_version
            }
        };
        Ok(version.and_then(|v| v.parse().ok()))
    }

    pub(crate) async fn patch_workload_metadata(
        &self,
        w: &WorkloadSpec,
        body: &Value,
    ) -> Result<()> {
        self.own.add("patch", "deployments");
        let api: Api<Deployment> = Api::namespaced(self.client.clone(), &w.namespace);
        let (pp, patch) = (PatchParams::default(), Patch::Merge(body));
        objects::with_retry(&format!("patching {}", w.key()), || {
            api.patch(&w.name, &pp, &patch)
        })
        .await?;
        Ok(())
    }

    /// Changes `configs` at `rate` per second (each write in its own task, so a slow write does
    /// not delay the schedule).
    pub(crate) async fn drive_at_rate(
        self: &Arc<Self>,
        configs: Vec<ConfigRef>,
        rate: f64,
        size: Option<usize>,
    ) {
        let start = tokio::time::Instant::now();
        let mut tasks = tokio::task::JoinSet::new();
        for (i, c) in configs.into_iter().enumerate() {
            tokio::time::sleep_until(start + Duration::from_secs_f64(i as f64 / rate)).await;
            let ctx = self.clone();
            tasks.spawn(async move {
                ctx.change(&c, size).await;
            });
        }
        while tasks.join_next().await.is_some() {}
    }

    /// Changes all `configs` at once (`concurrency` writes in flight).
    pub(crate) async fn drive_burst(&self, configs: Vec<ConfigRef>) {
        futures::stream::iter(configs.iter().map(|c| self.change(c, None)))
            .buffer_unordered(self.concurrency)
            .collect::<Vec<_>>()
            .await;
    }

    /// Waits until every expected reload happened (or was folded into a later one).
    pub(crate) async fn wait_reloads(&self, timeout: Duration) -> bool {
        let start = Instant::now();
        let mut last_log = Instant::now();
        loop {
            let (pending, total) = {
                let st = self.state.lock().unwrap();
                (st.pending(), st.expected_pairs())
            };
            if pending == 0 {
                return true;
            }
            if start.elapsed() > timeout {
                log(&format!(
                    "gave up waiting: {pending}/{total} expected reloads not seen after {timeout:?}"
                ));
                return false;
            }
            if last_log.elapsed() > Duration::from_secs(10) {
                log(&format!("  waiting for reloads: {pending}/{total} pending"));
                last_log = Instant::now();
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Distinct workloads of the standard population, one of their two configs each.
    pub(crate) fn pick_configs(&self, rng: &mut Rng, n: usize, standard: usize) -> Vec<ConfigRef> {
        rng.sample(standard, n)
            .into_iter()
            .map(|j| {
                let w = &self.pop.workloads[j];
                w.configs[rng.below(w.configs.len())].clone()
            })
            .collect()
    }
}

/// How long to wait for `pairs` expected (change, workload) reloads.
pub fn timeout_for(plan: &Plan, pairs: usize) -> Duration {
    Duration::from_secs_f64(plan.wait_base_s + pairs as f64 * 0.1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::{Scale, Scenario};

    #[test]
    fn timeouts_grow_with_the_expected_reloads() {
        let plan = Plan::new(Scenario::Steady, Scale::Small);
        let base = Duration::from_secs_f64(plan.wait_base_s);
        assert_eq!(timeout_for(&plan, 0), base);
        assert_eq!(timeout_for(&plan, 100), base + Duration::from_secs(10));
    }
}
