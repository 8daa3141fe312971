//! Tenants never wait on each other, against the real API server: a fan-out in one namespace does
//! not delay other namespaces' reloads, writes failing in one namespace (an admission webhook
//! that cannot be reached, real HTTP 500s) neither, and they are all written, once, when the
//! cause is gone. With `--tenant-label`, namespaces sharing the label's value share one turn.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::{Value, json};

use common::objects::*;
use common::{Controller, TestNamespace, metric_in, wait_for};

const VAR: &str = "STAKATER_SHARED_CONFIGMAP";

/// A Deployment with no pods (nothing for kube-controller-manager to start) reading `config`.
fn idle_deployment(name: &str, config: &str) -> Value {
    let mut d = auto_deployment(name, json!({}), env_from_configmap(config));
    d["spec"]["replicas"] = json!(0);
    d
}

/// Creates `count` Deployments `<prefix>-<i>` reading `config`, 16 at a time.
async fn create_deployments(client: &Client, ns: &str, prefix: &str, count: usize, config: &str) {
    let mut pending = FuturesUnordered::new();
    for i in 0..count {
        pending.push(create(
            client,
            ns,
            idle_deployment(&format!("{prefix}-{i}"), config),
        ));
        if pending.len() >= 16 {
            pending.next().await;
        }
    }
    while pending.next().await.is_some() {}
}

/// How many Deployments in `ns` carry `hash` in the reload variable, and their generations.
async fn rolled(client: &Client, ns: &str, hash: &str) -> (usize, BTreeMap<String, i64>) {
    let api = api_for(client, ns, "apps/v1", "Deployment");
    let list = api
        .list(&ListParams::default())
        .await
        .unwrap_or_else(|e| panic!("listing Deployments in {ns}: {e}"));
    let mut generations = BTreeMap::new();
    let mut count = 0;
    for d in list {
        let value = serde_json::to_value(&d).unwrap();
        if env_value(&value, "/spec/template", VAR).as_deref() == Some(hash) {
            count += 1;
        }
        let generation = d.metadata.generation.unwrap_or_default();
        generations.insert(d.metadata.name.unwrap_or_default(), generation);
    }
    (count, generations)
}

fn labelled(selector: &str, extra: Value) -> Value {
    let mut labels = json!({ "kube-reloader-tenancy": selector });
    if let (Some(l), Some(e)) = (labels.as_object_mut(), extra.as_object()) {
        l.extend(e.clone());
    }
    labels
}

/// Namespaces with one `shared` ConfigMap each, read by `per_namespace` Deployments.
async fn tenant_namespaces(
    prefix: &str,
    selector: &str,
    count: usize,
    per_namespace: usize,
    labels: Value,
) -> Vec<TestNamespace> {
    let mut out = Vec::new();
    for i in 0..count {
        let ns =
            TestNamespace::with_labels(&format!("{prefix}{i}"), labelled(selector, labels.clone()))
                .await;
        create(
            &ns.client,
            &ns.name,
            configmap("shared", json!({"k": "v1"})),
        )
        .await;
        create_deployments(&ns.client, &ns.name, "app", per_namespace, "shared").await;
        out.push(ns);
    }
    out
}

async fn change_all(namespaces: &[TestNamespace], value: &str) {
    for ns in namespaces {
        update_configmap(&ns.client, &ns.name, "shared", json!({"k": value})).await;
    }
}

/// One namespace's ConfigMap used by 200 Deployments changes; then 5 other namespaces change
/// one ConfigMap each. With one FIFO they waited for the whole fan-out (20 s at 10 writes/s);
/// taking turns, each waits about one turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fan_out_in_one_namespace_does_not_delay_the_others() {
    const NOISY: usize = 200;
    let selector = unique_token("noisy");
    let noisy = tenant_namespaces("tenancy-noisy", &selector, 1, NOISY, json!({})).await;
    let quiet = tenant_namespaces("tenancy-quiet", &selector, 5, 1, json!({})).await;
    let controller = Controller::start(&[
        &format!("--namespace-selector=kube-reloader-tenancy={selector}"),
        "--max-patches-per-second=10",
        "--patch-burst=10",
    ])
    .await;
    let c = &noisy[0].client;

    change_all(&noisy, "v2").await;
    let noisy_hash = configmap_hash(&[("k", "v2")]);
    wait_for("the fan-out to start", Duration::from_secs(30), || async {
        match rolled(c, &noisy[0].name, &noisy_hash).await.0 {
            0 => Err("no noisy Deployment rolled yet".to_string()),
            _ => Ok(()),
        }
    })
    .await;
    change_all(&quiet, "v2").await;
    let quiet_hash = configmap_hash(&[("k", "v2")]);
    let noisy_done_when_quiet_done = wait_for(
        "every quiet namespace's reload",
        Duration::from_secs(60),
        || async {
            for ns in &quiet {
                if rolled(c, &ns.name, &quiet_hash).await.0 != 1 {
                    return Err(format!("{} not rolled yet", ns.name));
                }
            }
            Ok(rolled(c, &noisy[0].name, &noisy_hash).await.0)
        },
    )
    .await;
    // The limiter lets 10 writes/s out, at most 32 writes wait for it at once: the quiet
    // ones are behind those, not behind the 200.
    assert!(
        noisy_done_when_quiet_done < NOISY / 2,
        "the quiet namespaces were reloaded only after {noisy_done_when_quiet_done} of the \
         {NOISY} noisy Deployments"
    );
    // And the fan-out still completes, each Deployment rolled once.
    let generations = wait_for("the whole fan-out", Duration::from_secs(120), || async {
        match rolled(c, &noisy[0].name, &noisy_hash).await {
            (n, g) if n == NOISY => Ok(g),
            (n, _) => Err(format!("{n} of {NOISY} rolled")),
        }
    })
    .await;
    assert!(generations.values().all(|g| *g == 2), "{generations:?}");
    let metrics = controller.metrics().await;
    assert!(
        metrics.contains("kube_reloader_queue_wait_seconds_count"),
        "{metrics}"
    );
}

/// An admission webhook that cannot be reached, scoped to one namespace: every write there gets
/// a real HTTP 500 (`failurePolicy: Fail`).
fn unreachable_webhook(name: &str, selector: &str) -> ValidatingWebhookConfiguration {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "webhooks": [{
            "name": "unreachable.kube-reloader.test",
            // Port 1 on loopback: nothing listens, the connection is refused at once.
            "clientConfig": {"url": "https://127.0.0.1:1/validate"},
            "rules": [{
                "apiGroups": ["apps"], "apiVersions": ["v1"],
                "operations": ["UPDATE"], "resources": ["deployments"]
            }],
            "namespaceSelector": {"matchLabels": {"kube-reloader-poisoned": selector}},
            "failurePolicy": "Fail",
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            "timeoutSeconds": 2
        }]
    }))
    .unwrap()
}

/// Writes failing in one namespace hold no slot: the others reload meanwhile; once the webhook
/// is gone every poisoned Deployment is reloaded, once; a ReloadFail Warning was published.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_failing_in_one_namespace_do_not_stop_the_others_and_land_once_fixed() {
    const POISONED: usize = 40;
    let selector = unique_token("poisoned");
    let poisoned = tenant_namespaces(
        "tenancy-poisoned",
        &selector,
        1,
        POISONED,
        json!({"kube-reloader-poisoned": selector}),
    )
    .await;
    let quiet = tenant_namespaces("tenancy-ok", &selector, 3, 1, json!({})).await;
    let client = poisoned[0].client.clone();
    let webhooks: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let webhook_name = format!("{selector}-unreachable");
    webhooks
        .create(
            &PostParams::default(),
            &unreachable_webhook(&webhook_name, &selector),
        )
        .await
        .expect("creating the webhook");
    let _cleanup = WebhookGuard(webhook_name.clone());
    let controller = Controller::start(&[
        &format!("--namespace-selector=kube-reloader-tenancy={selector}"),
        "--max-retry-backoff=2s",
    ])
    .await;
    let ns = &poisoned[0].name;
    let hash = configmap_hash(&[("k", "v2")]);

    change_all(&poisoned, "v2").await;
    // The webhook answers every write with a 500 (seen in the controller's log).
    wait_for_log_line(&controller, &["failed calling webhook"]).await;
    let note = wait_for_warning_event(&client, ns, "Deployment", "app-0", "ReloadFail").await;
    assert!(note.contains("still retrying"), "{note}");

    let started = Instant::now();
    change_all(&quiet, "v2").await;
    for q in &quiet {
        wait_for(
            "a quiet namespace's reload",
            Duration::from_secs(30),
            || async {
                match rolled(&client, &q.name, &hash).await.0 {
                    1 => Ok(()),
                    _ => Err(format!("{} not rolled", q.name)),
                }
            },
        )
        .await;
    }
    let quiet_took = started.elapsed();
    assert_eq!(
        rolled(&client, ns, &hash).await.0,
        0,
        "the webhook let writes through"
    );
    let metrics = controller.metrics().await;
    let in_backoff =
        metric_in(&metrics, "kube_reloader_queue_writes_in_backoff").expect("exported");
    assert!(in_backoff > 0.0, "no write in backoff:\n{metrics}");

    webhooks
        .delete(&webhook_name, &DeleteParams::default())
        .await
        .expect("deleting the webhook");
    let fixed = Instant::now();
    let generations = wait_for(
        "every poisoned Deployment's reload",
        Duration::from_secs(60),
        || async {
            match rolled(&client, ns, &hash).await {
                (n, g) if n == POISONED => Ok(g),
                (n, _) => Err(format!("{n} of {POISONED} rolled")),
            }
        },
    )
    .await;
    eprintln!(
        "quiet reloads with the webhook failing: {quiet_took:?}; poisoned landed {:?} after \
         the webhook was removed",
        fixed.elapsed()
    );
    // Once: the rejected writes changed nothing, the accepted one changed the spec once.
    assert!(generations.values().all(|g| *g == 2), "{generations:?}");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (_, after) = rolled(&client, ns, &hash).await;
    assert_eq!(after, generations, "written again after the reload");
    let metrics = controller.metrics().await;
    assert_eq!(
        metric_in(&metrics, "kube_reloader_queue_writes_in_backoff").expect("exported"),
        0.0
    );
    assert!(
        metric_in(
            &metrics,
            "reloader_reload_executed_total{success=\"false\"}"
        )
        .expect("exported")
            > 0.0,
        "the failing writes were not counted:\n{metrics}"
    );
}

/// Two namespaces whose writes the API server throttles (429 with `Retry-After: 30`, as API
/// Priority and Fairness answers a flow over its share), each with more workloads than a tenant
/// may have in flight (half of the 32 write slots): the other namespaces' reloads still go out
/// at once. Throttled writes free their slot and wait in the queue's backoff; a client that
/// retried the 429 itself, honouring `Retry-After`, kept them in flight, the two namespaces
/// held every slot, and the others waited 30 s and more. They all land once the throttle ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn throttled_namespaces_do_not_hold_the_write_slots() {
    use common::fault_proxy::{FaultProxy, Throttle};
    const PER_NAMESPACE: usize = 20;
    let selector = unique_token("throttled");
    let throttled =
        tenant_namespaces("tenancy-throttled", &selector, 2, PER_NAMESPACE, json!({})).await;
    let quiet = tenant_namespaces("tenancy-unthrottled", &selector, 2, 1, json!({})).await;
    let client = throttled[0].client.clone();
    let proxy = FaultProxy::start().await;
    proxy.throttle(Throttle {
        namespaces: throttled.iter().map(|n| n.name.clone()).collect(),
        resource: "deployments",
        retry_after_s: 30,
    });
    let kubeconfig = proxy.kubeconfig().to_str().unwrap().to_string();
    let controller = Controller::start_with_env(
        &[
            &format!("--namespace-selector=kube-reloader-tenancy={selector}"),
            "--max-retry-backoff=2s",
        ],
        &[("KUBECONFIG", kubeconfig.as_str())],
    )
    .await;
    let hash = configmap_hash(&[("k", "v2")]);

    change_all(&throttled, "v2").await;
    // As many as there are write slots: enough to fill them all, were throttled writes to
    // keep theirs.
    let answered = 32;
    wait_for(
        "the throttled workloads' writes to be answered 429",
        Duration::from_secs(30),
        || async {
            let n = proxy.throttled();
            (n >= answered)
                .then_some(())
                .ok_or(format!("{n} answered 429"))
        },
    )
    .await;
    let started = Instant::now();
    change_all(&quiet, "v2").await;
    for q in &quiet {
        wait_for(
            "an unthrottled namespace's reload",
            Duration::from_secs(10),
            || async {
                match rolled(&client, &q.name, &hash).await.0 {
                    1 => Ok(()),
                    _ => Err(format!("{} not rolled", q.name)),
                }
            },
        )
        .await;
    }
    let quiet_took = started.elapsed();
    for t in &throttled {
        assert_eq!(
            rolled(&client, &t.name, &hash).await.0,
            0,
            "the throttle let writes through"
        );
    }

    proxy.throttle(Throttle {
        namespaces: Vec::new(),
        resource: "deployments",
        retry_after_s: 30,
    });
    for t in &throttled {
        wait_for(
            "every throttled Deployment's reload once the throttle ends",
            Duration::from_secs(60),
            || async {
                match rolled(&client, &t.name, &hash).await.0 {
                    n if n == PER_NAMESPACE => Ok(()),
                    n => Err(format!("{n} of {PER_NAMESPACE} rolled")),
                }
            },
        )
        .await;
    }
    eprintln!("unthrottled reloads while two namespaces were throttled: {quiet_took:?}");
    drop(controller);
}

/// Removes the webhook even when the test fails, so that other tests' writes are not refused.
struct WebhookGuard(String);

impl Drop for WebhookGuard {
    fn drop(&mut self) {
        let name = self.0.clone();
        common::block_on_detached(async move {
            let api: Api<ValidatingWebhookConfiguration> = Api::all(common::client().await);
            let _ = api.delete(&name, &DeleteParams::default()).await;
        });
    }
}

/// `--tenant-label`: namespaces sharing the label's value share one turn. Tenant `big` has eight
/// namespaces with a 25-Deployment fan-out each, tenant `small` one: taking turns per tenant,
/// `small` finishes when `big` has written about as much; per namespace it would have had a
/// ninth of the turns and finished with the others (200 big writes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_tenant_label_namespaces_of_one_tenant_share_its_turn() {
    const PER_NAMESPACE: usize = 25;
    const BIG_NAMESPACES: usize = 8;
    let selector = unique_token("grouped");
    let label = "kube-reloader-tenancy-team";
    let big = tenant_namespaces(
        "tenancy-big",
        &selector,
        BIG_NAMESPACES,
        PER_NAMESPACE,
        json!({ label: "big" }),
    )
    .await;
    let small = tenant_namespaces(
        "tenancy-small",
        &selector,
        1,
        PER_NAMESPACE,
        json!({ label: "small" }),
    )
    .await;
    let _controller = Controller::start(&[
        &format!("--namespace-selector=kube-reloader-tenancy={selector}"),
        &format!("--tenant-label={label}"),
        "--max-patches-per-second=20",
        "--patch-burst=1",
    ])
    .await;
    let client = small[0].client.clone();
    let hash = configmap_hash(&[("k", "v2")]);
    // The small tenant first: what the test measures is the share of turns, not who was first.
    change_all(&small, "v2").await;
    change_all(&big, "v2").await;
    let big_done = wait_for(
        "the small tenant's fan-out",
        Duration::from_secs(90),
        || async {
            let done = rolled(&client, &small[0].name, &hash).await.0;
            if done < PER_NAMESPACE {
                return Err(format!("{done} of {PER_NAMESPACE} rolled"));
            }
            let mut big_done = 0;
            for ns in &big {
                big_done += rolled(&client, &ns.name, &hash).await.0;
            }
            Ok(big_done)
        },
    )
    .await;
    // Per tenant: about 25, plus what went out before the small change arrived, the writes
    // waiting for the limiter and what was written while this test listed. Per namespace it
    // would be about 200.
    eprintln!("the big tenant wrote {big_done} while the small one wrote {PER_NAMESPACE}");
    assert!(
        big_done < 4 * PER_NAMESPACE,
        "the big tenant wrote {big_done} while the small one wrote {PER_NAMESPACE}"
    );
}
