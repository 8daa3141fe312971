//! The `churn` scenario: while configs change at the steady rate, extra Deployments that use
//! configs of the run are created and deleted continuously (`churn_rate` creates per second, each
//! deleted `churn_lifetime_s` later, so as many deletes per second once under way). Each churned
//! workload uses the configs of the change scheduled at the middle (odd ones) or at the end (even
//! ones, racing the delete) of its life, so reloads of churned workloads and writes to workloads
//! deleted a moment ago both happen. The ledger keeps them apart from the standard workloads,
//! whose reloads are checked as in `steady`; the controller's /ready is polled throughout.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, DeleteParams, PostParams};
use serde::Serialize;

use crate::controller::http_status;
use crate::ctx::Ctx;
use crate::objects::{self, ConfigRef, WorkloadSpec};
use crate::scenario::Plan;

#[derive(Debug, Default, Serialize)]
pub struct Outcome {
    pub created: usize,
    pub deleted: usize,
    pub create_errors: usize,
    pub delete_errors: usize,
    /// /ready polls during the churn, and how many did not answer 200.
    pub health_polls: usize,
    pub health_failures: usize,
    pub errors: Vec<String>,
}

impl Outcome {
    pub fn failed(&self) -> bool {
        self.create_errors + self.delete_errors + self.health_failures > 0
    }
}

/// The standard workload that uses `c` (its configs are the churned workload's).
fn owner_of<'a>(ctx: &'a Ctx, c: &ConfigRef) -> Option<&'a WorkloadSpec> {
    ctx.pop.workloads.iter().find(|w| w.configs.contains(c))
}

/// Creates and deletes workloads for as long as `changes` take at `plan.rate`.
pub async fn run(ctx: &Arc<Ctx>, changes: &[ConfigRef], plan: &Plan, ready_url: &str) -> Outcome {
    let duration = changes.len() as f64 / plan.rate;
    let n = (duration * plan.churn_rate).ceil() as usize;
    let life = plan.churn_lifetime_s;
    crate::progress::log(&format!(
        "churn: {n} extra Deployments created at {}/s, each deleted {life}s later",
        plan.churn_rate
    ));
    let done = Arc::new(AtomicBool::new(false));
    let polls = Arc::new(AtomicUsize::new(0));
    let health = poll_ready(done.clone(), polls.clone(), ready_url.to_string());

    let start = tokio::time::Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for k in 0..n {
        let t_k = k as f64 / plan.churn_rate;
        tokio::time::sleep_until(start + Duration::from_secs_f64(t_k)).await;
        let target = t_k + if k % 2 == 0 { life } else { life / 2.0 };
        let i = (target * plan.rate).round() as usize;
        let config = changes.get(i).unwrap_or(&changes[k % changes.len()]);
        let Some(owner) = owner_of(ctx, config) else {
            continue;
        };
        let spec = WorkloadSpec {
            namespace: owner.namespace.clone(),
            name: format!("churn-{k}"),
            configs: owner.configs.clone(),
            ..Default::default()
        };
        ctx.state
            .lock()
            .unwrap()
            .register_churned(spec.key(), spec.configs.clone());
        let ctx = ctx.clone();
        tasks.spawn(async move { churn_one(&ctx, &spec, life).await });
    }
    let mut out = collect(tasks).await;
    done.store(true, Ordering::Relaxed);
    let failures = health.await.unwrap_or_default();
    out.health_polls = polls.load(Ordering::Relaxed);
    out.health_failures = failures.len();
    for f in failures {
        push(&mut out.errors, f);
    }
    crate::progress::log(&format!(
        "churn: {} created, {} deleted, {} /ready polls ({} failed)",
        out.created, out.deleted, out.health_polls, out.health_failures
    ));
    out
}

/// Polls `/ready` every 500 ms until `done`; returns the failed polls.
fn poll_ready(
    done: Arc<AtomicBool>,
    polls: Arc<AtomicUsize>,
    url: String,
) -> tokio::task::JoinHandle<Vec<String>> {
    tokio::spawn(async move {
        let mut failures = Vec::new();
        while !done.load(Ordering::Relaxed) && url != "none" {
            let u = url.clone();
            let code = tokio::task::spawn_blocking(move || http_status(&u))
                .await
                .ok()
                .flatten();
            polls.fetch_add(1, Ordering::Relaxed);
            if code != Some(200) {
                failures.push(format!("/ready answered {code:?}"));
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        failures
    })
}

/// Counts the churned workloads' creations and deletions as their tasks finish.
async fn collect(
    mut tasks: tokio::task::JoinSet<(Result<(), String>, Result<(), String>)>,
) -> Outcome {
    let mut out = Outcome::default();
    while let Some(r) = tasks.join_next().await {
        let (created, deleted) = match r {
            Ok(r) => r,
            Err(e) => (Err(e.to_string()), Err(String::new())),
        };
        match created {
            Ok(()) => out.created += 1,
            Err(e) => {
                out.create_errors += 1;
                push(&mut out.errors, e);
                continue;
            }
        }
        match deleted {
            Ok(()) => out.deleted += 1,
            Err(e) => {
                out.delete_errors += 1;
                push(&mut out.errors, e);
            }
        }
    }
    out
}

fn push(errors: &mut Vec<String>, e: String) {
    if errors.len() < 10 {
        errors.push(e);
    }
}

/// Creates the workload, waits `life` seconds, deletes it.
async fn churn_one(
    ctx: &Ctx,
    spec: &WorkloadSpec,
    life: f64,
) -> (Result<(), String>, Result<(), String>) {
    let api: Api<Deployment> = Api::namespaced(ctx.client.clone(), &spec.namespace);
    let d = objects::deployment(&ctx.run_id, spec);
    ctx.own.add("create", "deployments");
    let pp = PostParams::default();
    let created =
        objects::with_retry(&format!("creating {}", spec.key()), || api.create(&pp, &d)).await;
    if let Err(e) = created {
        return (Err(format!("{e:#}")), Ok(()));
    }
    tokio::time::sleep(Duration::from_secs_f64(life)).await;
    ctx.own.add("delete", "deployments");
    let dp = DeleteParams::background();
    let deleted = objects::with_retry(&format!("deleting {}", spec.key()), || {
        api.delete(&spec.name, &dp)
    })
    .await;
    let deleted = match deleted {
        Ok(_) => Ok(()),
        // A retried delete whose first attempt went through.
        Err(e)
            if e.downcast_ref::<kube::Error>()
                .is_some_and(|k| matches!(k, kube::Error::Api(s) if s.code == 404)) =>
        {
            Ok(())
        }
        Err(e) => Err(format!("{e:#}")),
    };
    (Ok(()), deleted)
}

/// The controller's own error counters at the end (Reloader's metric names).
pub fn controller_errors(metrics_text: &str) -> serde_json::Value {
    use crate::sharded::metric_sum;
    let get = |name: &str, labels: &[&str]| metric_sum(metrics_text, name, labels);
    serde_json::json!({
        "reload_failures": get("reloader_reload_executed_total", &["success=\"false\""]),
        "errors_permanent": get("reloader_errors_total", &["type=\"permanent\""]),
        "errors_transient": get("reloader_errors_total", &["type=\"transient\""]),
        "errors_conflict": get("reloader_errors_total", &["type=\"conflict\""]),
    })
}
