//! `noisy-neighbour` and `poisoned`: tenants never wait on each other.
//!
//! - `noisy-neighbour`: one tenant's ConfigMap used by `noisy_width` Deployments changes once;
//!   meanwhile each of `quiet_tenants` quiet tenants changes one ConfigMap per second until the
//!   fan-out is done. Figures: the quiet reloads' latency, the fan-out's finish against the
//!   limiter's ideal.
//! - `poisoned`: `poisoned_workloads` Deployments in one namespace behind an admission webhook
//!   that cannot be reached (`failurePolicy: Fail`: every write there is a 500) each get a change;
//!   the quiet tenants change configs for `poisoned_for_s`; then the webhook is removed and every
//!   poisoned Deployment must be reloaded once, within one maximum backoff.
//!
//! `--tenant-groups`: namespaces are grouped into tenants by a label and the controller runs
//! with `--tenant-label` (the noisy tenant is 4 namespaces, quiet tenants 2 each).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::Deployment;
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::ctx::Ctx;
use crate::objects::{ConfigRef, Kind, Population, WorkloadSpec};
use crate::objects::{RUN_LABEL, TENANT_LABEL};
use crate::progress::log;
use crate::report;
use crate::scenario::{Plan, Scenario};

/// The namespace label the poisoned webhook selects.
const POISONED_LABEL: &str = "kube-reloader-loadtest-poisoned";

/// What the scenario added to the standard population.
pub struct Tenancy {
    /// The noisy tenant's shared ConfigMaps, or the poisoned Deployments' ConfigMaps.
    pub special: Vec<ConfigRef>,
    /// Per quiet tenant, the ConfigMaps it changes in turn.
    pub quiet: Vec<Vec<ConfigRef>>,
}

/// The tag of a config's changes in the report: `noisy`, `poisoned` or `quiet`.
pub fn tag(config: &ConfigRef) -> String {
    ["noisy", "poisoned"]
        .into_iter()
        .find(|t| config.namespace.contains(&format!("-{t}")))
        .unwrap_or("quiet")
        .to_string()
}

pub fn populate(pop: &mut Population, scenario: Scenario, plan: &Plan) -> Tenancy {
    let quiet_namespaces: Vec<String> = pop
        .namespaces
        .iter()
        .take(plan.quiet_tenants * plan.namespaces_per_quiet_tenant())
        .cloned()
        .collect();
    let mut quiet: Vec<Vec<ConfigRef>> = Vec::new();
    for (i, ns) in quiet_namespaces.iter().enumerate() {
        let tenant = i / plan.namespaces_per_quiet_tenant();
        if plan.tenant_groups {
            pop.label_namespace(ns, TENANT_LABEL, &format!("quiet-{tenant}"));
        }
        if quiet.len() <= tenant {
            quiet.push(Vec::new());
        }
        let configs = pop
            .configs
            .keys()
            .filter(|c| &c.namespace == ns && c.kind == Kind::ConfigMap)
            .cloned();
        quiet[tenant].extend(configs);
    }
    let special = match scenario {
        Scenario::Poisoned => poisoned_population(pop, plan),
        _ => noisy_population(pop, plan),
    };
    Tenancy { special, quiet }
}

fn noisy_population(pop: &mut Population, plan: &Plan) -> Vec<ConfigRef> {
    let parts = if plan.tenant_groups { 4 } else { 1 };
    let mut shared = Vec::new();
    for part in 0..parts {
        let ns = pop.add_namespace(&format!("noisy{part}"));
        if plan.tenant_groups {
            pop.label_namespace(&ns, TENANT_LABEL, "noisy");
        }
        let config = ConfigRef {
            namespace: ns.clone(),
            kind: Kind::ConfigMap,
            name: "noisy-shared".into(),
        };
        pop.add_config(config.clone(), format!("initial-noisy-{part}").into_bytes());
        for k in (part..plan.noisy_width).step_by(parts) {
            pop.add_workload(WorkloadSpec {
                namespace: ns.clone(),
                name: format!("noisy-{k}"),
                configs: vec![config.clone()],
                ..Default::default()
            });
        }
        shared.push(config);
    }
    shared
}

fn poisoned_population(pop: &mut Population, plan: &Plan) -> Vec<ConfigRef> {
    let ns = pop.add_namespace("poisoned");
    pop.label_namespace(&ns, POISONED_LABEL, &pop.run_id.clone());
    if plan.tenant_groups {
        pop.label_namespace(&ns, TENANT_LABEL, "poisoned");
    }
    (0..plan.poisoned_workloads)
        .map(|k| {
            let config = ConfigRef {
                namespace: ns.clone(),
                kind: Kind::ConfigMap,
                name: format!("poisoned-{k}"),
            };
            pop.add_config(config.clone(), format!("initial-poisoned-{k}").into_bytes());
            pop.add_workload(WorkloadSpec {
                namespace: ns.clone(),
                name: format!("poisoned-{k}"),
                configs: vec![config.clone()],
                ..Default::default()
            });
            config
        })
        .collect()
}

/// Each quiet tenant changes one of its ConfigMaps every `period_s` (the tenants spread over the
/// period) until `done` says so, for at least `min_s`.
async fn drive_quiet(
    ctx: &Arc<Ctx>,
    quiet: &[Vec<ConfigRef>],
    period_s: f64,
    min_s: f64,
    max_s: f64,
    done: impl Fn() -> bool,
) -> usize {
    let start = tokio::time::Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    let mut tick = 0usize;
    let mut sent = 0;
    while (tick as f64 * period_s) < max_s && ((tick as f64 * period_s) < min_s || !done()) {
        for (i, configs) in quiet.iter().enumerate().filter(|(_, c)| !c.is_empty()) {
            let at = (tick as f64 + i as f64 / quiet.len() as f64) * period_s;
            tokio::time::sleep_until(start + Duration::from_secs_f64(at)).await;
            let config = configs[tick % configs.len()].clone();
            let ctx = ctx.clone();
            tasks.spawn(async move {
                ctx.change(&config, None).await;
            });
            sent += 1;
        }
        tick += 1;
    }
    while tasks.join_next().await.is_some() {}
    sent
}

/// When each (workload, hash) was first seen rolled.
fn first_seen(ctx: &Ctx) -> HashMap<(String, String), f64> {
    let st = ctx.state.lock().unwrap();
    let mut seen = HashMap::new();
    for o in &st.observations {
        seen.entry((o.workload.clone(), o.hash.clone()))
            .or_insert(o.t);
    }
    seen
}

/// Per change tagged `tag`: acknowledged at, and when its last expected workload rolled.
fn spans(ctx: &Ctx, tag: &str) -> Vec<(f64, Option<f64>)> {
    let seen = first_seen(ctx);
    let st = ctx.state.lock().unwrap();
    st.changes
        .iter()
        .filter(|c| c.tag == tag)
        .map(|c| {
            let ack = c.t_ack.unwrap_or(c.t_sent);
            let last = c
                .expected
                .iter()
                .map(|w| seen.get(&(w.clone(), c.hash.clone())).copied())
                .try_fold(f64::NAN, |acc, t| t.map(|t| acc.max(t)));
            (ack, last)
        })
        .collect()
}

fn all_rolled(ctx: &Ctx, tag: &str) -> bool {
    let spans = spans(ctx, tag);
    !spans.is_empty() && spans.iter().all(|(_, last)| last.is_some())
}

/// Reload latencies (seconds) of the changes tagged `tag` that rolled.
fn latencies(ctx: &Ctx, tag: &str) -> Vec<f64> {
    spans(ctx, tag)
        .into_iter()
        .filter_map(|(ack, last)| last.map(|l| l - ack))
        .collect()
}

pub async fn drive_noisy(
    ctx: &Arc<Ctx>,
    plan: &Plan,
    tenancy: &Tenancy,
    notes: &mut serde_json::Map<String, Value>,
) -> bool {
    log(&format!(
        "noisy tenant: {} Deployments; {} quiet tenants changing one ConfigMap every {}s each",
        plan.noisy_width,
        tenancy.quiet.len(),
        plan.quiet_period_s
    ));
    let t_noisy = ctx.now();
    futures::future::join_all(tenancy.special.iter().map(|c| ctx.change(c, None))).await;
    let max_s = plan.wait_base_s + plan.noisy_width as f64 / f64::from(plan.default_rate) * 2.0;
    let period = plan.quiet_period_s;
    let quiet_sent = drive_quiet(ctx, &tenancy.quiet, period, 3.0, max_s, || {
        all_rolled(ctx, "noisy")
    })
    .await;
    let ok = ctx
        .wait_reloads(Duration::from_secs_f64(
            plan.wait_base_s + plan.noisy_width as f64 * 0.2,
        ))
        .await;

    let noisy_done = spans(ctx, "noisy")
        .iter()
        .filter_map(|(_, last)| *last)
        .fold(f64::NAN, f64::max);
    let finish = noisy_done - t_noisy;
    let quiet = latencies(ctx, "quiet");
    let quiet_summary = report::summarize(&quiet);
    let quiet_p99 = quiet_summary.p99_ms / 1000.0;
    // Writes the limiter let out during the fan-out: the noisy ones and the quiet ones acked
    // before it finished. Taking turns must not waste the budget: the fan-out ends within 10 %
    // of what the limiter allows for all of them.
    let quiet_during = spans(ctx, "quiet")
        .iter()
        .filter(|(ack, _)| *ack < noisy_done)
        .count();
    let (rate, burst) = (f64::from(plan.default_rate), f64::from(plan.default_burst));
    let n = plan.noisy_width as f64;
    let ideal_alone = ((n - burst) / rate).max(0.0);
    let ideal_shared = ((n + quiet_during as f64 - burst) / rate).max(0.0);
    let finish_ok = finish <= ideal_shared * 1.1 + 1.0;
    // Ordering, not a wall-clock target: quiet reloads do not wait for the fan-out.
    let ordering_ok = quiet_p99 < finish / 2.0;
    log(&format!(
        "noisy fan-out of {} finished after {finish:.2}s (ideal alone {ideal_alone:.2}s, with the \
         {quiet_during} quiet writes {ideal_shared:.2}s); quiet p99 {quiet_p99:.3}s over {} reloads",
        plan.noisy_width,
        quiet.len()
    ));
    notes.insert(
        "tenancy".into(),
        json!({
            "noisy_workloads": plan.noisy_width,
            "noisy_finish_s": report::round(finish),
            "noisy_ideal_alone_s": report::round(ideal_alone),
            "noisy_ideal_with_quiet_writes_s": report::round(ideal_shared),
            "quiet_writes_during_fan_out": quiet_during,
            "quiet_changes": quiet_sent,
            "quiet_latency": quiet_summary,
            "quiet_p99_target_1s_met": quiet_p99 <= 1.0,
            "finish_within_10_percent": finish_ok,
            "quiet_p99_below_half_the_fan_out": ordering_ok,
        }),
    );
    // The finish is a figure, not a check: on a shared machine the API server, not the
    // limiter, may be what bounds the fan-out (CI's 2 cores take ~15 writes/s).
    ok && ordering_ok
}

fn webhook(run_id: &str) -> Result<ValidatingWebhookConfiguration> {
    Ok(serde_json::from_value(json!({
        "metadata": {"name": webhook_name(run_id), "labels": {RUN_LABEL: run_id}},
        "webhooks": [{
            "name": "unreachable.kube-reloader-loadtest.local",
            // Nothing listens on port 1 of loopback: refused at once, a 500 for the writer.
            "clientConfig": {"url": "https://127.0.0.1:1/validate"},
            "rules": [{
                "apiGroups": ["apps"], "apiVersions": ["v1"],
                "operations": ["UPDATE"], "resources": ["deployments"]
            }],
            "namespaceSelector": {"matchLabels": {POISONED_LABEL: run_id}},
            "failurePolicy": "Fail",
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            "timeoutSeconds": 2
        }]
    }))?)
}

fn webhook_name(run_id: &str) -> String {
    format!("krlt-{run_id}-unreachable")
}

/// Installs the webhook and waits until the API server enforces it (a dry-run write fails).
pub async fn poison(client: &Client, run_id: &str, probe: &WorkloadSpec) -> Result<()> {
    let api: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    api.create(&PostParams::default(), &webhook(run_id)?)
        .await
        .context("creating the unreachable webhook")?;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &probe.namespace);
    let params = PatchParams {
        dry_run: true,
        ..PatchParams::default()
    };
    let patch = json!({"metadata": {"annotations": {"loadtest/probe": "x"}}});
    for _ in 0..100 {
        if deployments
            .patch(&probe.name, &params, &Patch::Merge(&patch))
            .await
            .is_err()
        {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    anyhow::bail!("the webhook was not enforced after 10 s")
}

/// Puts the label the webhook selects on `namespace` (`Some(run id)`) or takes it off (`None`):
/// chaos poisons a namespace of the standard population for a while.
pub async fn label_poisoned(client: &Client, namespace: &str, run_id: Option<&str>) -> Result<()> {
    let api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let body = json!({"metadata": {"labels": {POISONED_LABEL: run_id}}});
    let (pp, patch) = (PatchParams::default(), Patch::Merge(&body));
    crate::objects::with_retry(&format!("labelling namespace {namespace}"), || {
        api.patch(namespace, &pp, &patch)
    })
    .await?;
    Ok(())
}

/// Removes the webhook (also when a run failed half-way: called from the cleanup).
pub async fn unpoison(client: &Client, run_id: &str) -> bool {
    let api: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    api.delete(&webhook_name(run_id), &DeleteParams::default())
        .await
        .is_ok()
}

fn rss_mib(pid: u32) -> f64 {
    crate::controller::sample(pid, 0.0).map_or(f64::NAN, |s| s.rss_kib as f64 / 1024.0)
}

/// The dead webhook on the poisoned namespace, installed once a dry-run write there is refused.
async fn install_poison(ctx: &Ctx, plan: &Plan, tenancy: &Tenancy) -> Result<()> {
    let probe = ctx
        .pop
        .workloads
        .iter()
        .find(|w| w.name.starts_with("poisoned-"))
        .context("no poisoned workload")?
        .clone();
    poison(&ctx.client, &ctx.run_id, &probe).await?;
    log(&format!(
        "webhook installed: {} poisoned Deployments changed; quiet tenants change configs for {}s",
        tenancy.special.len(),
        plan.poisoned_for_s
    ));
    Ok(())
}

pub async fn drive_poisoned(
    ctx: &Arc<Ctx>,
    plan: &Plan,
    tenancy: &Tenancy,
    controller_pid: u32,
    notes: &mut serde_json::Map<String, Value>,
) -> Result<bool> {
    install_poison(ctx, plan, tenancy).await?;
    let rss_start = rss_mib(controller_pid);
    futures::future::join_all(tenancy.special.iter().map(|c| ctx.change(c, None))).await;
    let (period, for_s) = (plan.quiet_period_s, plan.poisoned_for_s);
    let quiet_sent = drive_quiet(ctx, &tenancy.quiet, period, for_s, for_s, || false).await;
    // Let the last quiet ones land before judging them.
    let quiet_deadline = Instant::now() + Duration::from_secs_f64(plan.wait_base_s);
    while !all_rolled(ctx, "quiet") && Instant::now() < quiet_deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let rss_end = rss_mib(controller_pid);
    let rolled_while_poisoned = spans(ctx, "poisoned")
        .iter()
        .filter(|(_, last)| last.is_some())
        .count();
    let t_removed = ctx.now();
    let removed = unpoison(&ctx.client, &ctx.run_id).await;
    log("webhook removed; waiting for the poisoned Deployments");
    let ok = ctx
        .wait_reloads(Duration::from_secs_f64(
            plan.wait_base_s + plan.max_backoff_s,
        ))
        .await;
    let poisoned_done = spans(ctx, "poisoned")
        .iter()
        .filter_map(|(_, last)| *last)
        .fold(f64::NAN, f64::max);
    let after_removal = poisoned_done - t_removed;
    let quiet = latencies(ctx, "quiet");
    let quiet_summary = report::summarize(&quiet);
    let quiet_p99 = quiet_summary.p99_ms / 1000.0;
    // One maximum backoff, plus writing them all at 10/s (what CI's shared 2 cores sustain;
    // the limiter allows 50/s), plus 2 s.
    let allowed = plan.max_backoff_s + tenancy.special.len() as f64 / 10.0 + 2.0;
    let landed_ok = after_removal <= allowed;
    let rss_ok = rss_end <= rss_start * 1.25 + 8.0;
    // Isolation, not speed: a quiet reload held behind the poisoned namespace would wait for the
    // webhook's removal, i.e. the whole poisoned period. The 1 s target is reported in the notes;
    // over 40 quiet reloads on CI's 2 cores the slowest one varied from 1.0 to 4.9 s.
    let quiet_ok = quiet.len() == spans(ctx, "quiet").len() && quiet_p99 < plan.poisoned_for_s;
    log(&format!(
        "poisoned: quiet p99 {quiet_p99:.3}s over {} reloads; RSS {rss_start:.1} -> {rss_end:.1} MiB; \
         all {} poisoned reloaded {after_removal:.2}s after the webhook was removed (allowed {allowed:.1}s)",
        quiet.len(),
        tenancy.special.len()
    ));
    notes.insert(
        "tenancy".into(),
        json!({
            "poisoned_workloads": tenancy.special.len(),
            "poisoned_for_s": plan.poisoned_for_s,
            "rolled_while_webhook_present": rolled_while_poisoned,
            "webhook_removed": removed,
            "poisoned_all_rolled_after_removal_s": report::round(after_removal),
            "allowed_after_removal_s": report::round(allowed),
            "max_retry_backoff_s": plan.max_backoff_s,
            "quiet_changes": quiet_sent,
            "quiet_latency": quiet_summary,
            "quiet_p99_target_1s_met": quiet_p99 <= 1.0,
            "rss_mib_at_poisoning": report::round(rss_start),
            "rss_mib_before_removal": report::round(rss_end),
            "rss_flat": rss_ok,
        }),
    );
    Ok(ok && removed && rolled_while_poisoned == 0 && landed_ok && rss_ok && quiet_ok)
}
