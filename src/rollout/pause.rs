//! `pause-period`: a Deployment rolled by kube-reloader is paused (`spec.paused`, `paused-at`) so
//! that changes during the period join one rollout; it is resumed when the period ends. Resume
//! times are derived from `paused-at`, so a restart of the controller resumes on time.

use crate::rollout::TurnPriority;
use std::sync::Arc;
use std::time::Duration;

use dashmap::DashMap;
use k8s_openapi::api::apps::v1::Deployment;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use tracing::{info, warn};

use crate::model::WorkloadKey;
use crate::shard::Ownership;

use super::WriteLimiter;

#[derive(Clone)]
pub struct PauseKeeper {
    inner: Arc<Inner>,
}

struct Inner {
    client: Client,
    ownership: Arc<Ownership>,
    /// The write limiter reloads use: a resume is a write like any other.
    limiter: WriteLimiter,
    paused_at_key: String,
    /// Resume time (unix seconds) per Deployment with a timer running.
    timers: DashMap<WorkloadKey, i64, ahash::RandomState>,
    /// Shadow mode: no pause is ever resumed (the incumbent resumes its own).
    muted: bool,
}

impl PauseKeeper {
    pub fn new(
        client: Client,
        ownership: Arc<Ownership>,
        limiter: WriteLimiter,
        paused_at_key: String,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                client,
                ownership,
                limiter,
                paused_at_key,
                timers: DashMap::default(),
                muted: false,
            }),
        }
    }

    /// `true` (shadow mode): [`Self::schedule`] does nothing. Set before the keeper is shared.
    pub fn muted(mut self, muted: bool) -> Self {
        Arc::get_mut(&mut self.inner)
            .expect("muted before the keeper is shared")
            .muted = muted;
        self
    }

    /// Makes sure `key` is resumed at `paused_at + period` (both unix seconds).
    pub fn schedule(&self, key: WorkloadKey, paused_at: i64, period: i64) {
        if self.inner.muted {
            return;
        }
        let resume_at = paused_at + period;
        if self.inner.timers.get(&key).is_some_and(|t| *t == resume_at) {
            return;
        }
        self.inner.timers.insert(key.clone(), resume_at);
        let inner = self.inner.clone();
        tokio::spawn(async move {
            let wait = (resume_at - jiff::Timestamp::now().as_second()).max(0) as u64;
            tokio::time::sleep(Duration::from_secs(wait)).await;
            if inner.timers.get(&key).is_some_and(|t| *t == resume_at) {
                inner.timers.remove(&key);
                resume(&inner, &key).await;
            }
        });
    }
}

async fn resume(inner: &Inner, key: &WorkloadKey) {
    let api: Api<Deployment> = Api::namespaced(inner.client.clone(), &key.namespace);
    let patch = json!({
        "spec": {"paused": false},
        "metadata": {"annotations": {inner.paused_at_key.as_str(): null}}
    });
    let mut attempt = 0u32;
    while attempt < 5 {
        // Checked before each attempt, as the write queue does: the namespace may have moved to
        // another replica (which resumes it from `paused-at`), or this one may be fenced, which
        // holds the resume without spending an attempt.
        if !inner.ownership.owns(&key.namespace) {
            return;
        }
        if !inner.ownership.may_write() {
            tokio::time::sleep(FENCED_RETRY).await;
            continue;
        }
        inner.limiter.until_ready(TurnPriority::Live).await;
        attempt += 1;
        match api
            .patch(&key.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {
                info!(workload = %key, "pause period ended, deployment resumed");
                return;
            }
            Err(kube::Error::Api(s)) if s.code == 404 => return,
            Err(e) => {
                warn!(workload = %key, error = %e, attempt, "could not resume the deployment");
                tokio::time::sleep(Duration::from_millis(500 * u64::from(attempt))).await;
            }
        }
    }
}

/// How often a fenced replica checks whether it may resume again.
const FENCED_RETRY: Duration = Duration::from_millis(500);
