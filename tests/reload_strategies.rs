//! The two ways a reload is written: `env-vars` (default) and `annotations`, and that neither
//! writes when the workload already carries the config's current hash.

mod common;

use std::time::Duration;

use serde_json::{Value, json};

use common::objects::*;
use common::{Controller, TestNamespace, wait_for};

const LAST_RELOADED_FROM: &str = "reloader.stakater.com/last-reloaded-from";
const GRACE: Duration = Duration::from_secs(1);

fn ns_flag(ns: &TestNamespace) -> String {
    format!("--namespaces={}", ns.name)
}

fn auto() -> Value {
    json!({"reloader.stakater.com/auto": "true"})
}

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// The parsed `last-reloaded-from` annotation of a Deployment's pod template, if any.
fn parsed_reload_annotation(deployment: &Value) -> Option<Value> {
    let raw = deployment
        .pointer("/spec/template/metadata/annotations")?
        .get(LAST_RELOADED_FROM)?
        .as_str()?;
    Some(serde_json::from_str(raw).expect("last-reloaded-from holds JSON"))
}

/// Waits until the Deployment's annotation records `hash` for config `name`; returns the
/// Deployment and the parsed annotation.
async fn wait_for_annotation(
    ns: &TestNamespace,
    deployment: &str,
    name: &str,
    hash: &str,
) -> (Value, Value) {
    wait_for(
        &format!("Deployment {deployment} to record {name} with hash {hash}"),
        Duration::from_secs(15),
        || async {
            let obj = get(&ns.client, &ns.name, "apps/v1", "Deployment", deployment)
                .await
                .ok_or("no such Deployment")?;
            match parsed_reload_annotation(&obj) {
                Some(r) if r["name"] == name && r["hash"] == hash => Ok((obj, r)),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await
}

/// What must not move when nothing is written: the spec's generation and the annotation text.
async fn written_state(ns: &TestNamespace, deployment: &str) -> (i64, Option<String>) {
    let obj = get(&ns.client, &ns.name, "apps/v1", "Deployment", deployment)
        .await
        .expect("the Deployment exists");
    let generation = obj["metadata"]["generation"]
        .as_i64()
        .expect("a generation");
    let annotation = obj
        .pointer("/spec/template/metadata/annotations")
        .and_then(|a| a.get(LAST_RELOADED_FROM))
        .and_then(Value::as_str)
        .map(String::from);
    (generation, annotation)
}

fn reloads_counted(metrics: &str) -> Option<u64> {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix("reloader_reload_executed_total{success=\"true\"} "))
        .and_then(|v| v.trim().parse().ok())
}

#[tokio::test]
async fn annotations_strategy_records_last_reloaded_from_as_json() {
    let ns = TestNamespace::new("strat-ann").await;
    let (c, n) = (&ns.client, ns.name.as_str());
    create(c, n, configmap("cfg", json!({"k": "v1"}))).await;
    create(c, n, secret("sec", json!({"p": "s1"}))).await;
    let spec = json!({
        "containers": [
            {"name": "app", "image": "registry.k8s.io/pause:3.10",
             "envFrom": [{"configMapRef": {"name": "cfg"}}]},
            {"name": "sidecar", "image": "registry.k8s.io/pause:3.10",
             "volumeMounts": [{"name": "sec", "mountPath": "/etc/sec"}]}
        ],
        "volumes": [{"name": "sec", "secret": {"secretName": "sec"}}]
    });
    create(c, n, deployment("web", auto(), spec)).await;
    let _controller = Controller::start(&[&ns_flag(&ns), "--reload-strategy=annotations"]).await;

    let before = unix_now();
    update_configmap(c, n, "cfg", json!({"k": "v2"})).await;
    let cm_hash = configmap_hash(&[("k", "v2")]);
    let (obj, recorded) = wait_for_annotation(&ns, "web", "cfg", &cm_hash).await;
    let after = unix_now();
    let observed_at = recorded["observedAt"]
        .as_i64()
        .expect("observedAt is unix seconds");
    assert!(
        (before..=after).contains(&observed_at),
        "observedAt {observed_at} not in [{before}, {after}]"
    );
    assert_eq!(
        recorded,
        json!({
            "type": "CONFIGMAP", "name": "cfg", "namespace": n, "hash": cm_hash,
            "containerRefs": ["app"], "observedAt": observed_at
        })
    );
    let vars = deployment_reload_vars(c, n, "web").await;
    assert!(
        vars.is_empty(),
        "the annotations strategy writes no env var: {vars:?}"
    );
    assert_eq!(obj["metadata"]["generation"], 2, "one write");

    update_secret(c, n, "sec", json!({"p": "s2"})).await;
    let secret_hash = secret_hash(&[("p", b"s2")]);
    let (_, recorded) = wait_for_annotation(&ns, "web", "sec", &secret_hash).await;
    assert_eq!(recorded["type"], "SECRET");
    assert_eq!(recorded["namespace"], n);
    assert_eq!(
        recorded["containerRefs"],
        json!(["sidecar"]),
        "the container that mounts it"
    );
}

#[tokio::test]
async fn annotations_strategy_writes_nothing_for_an_update_that_keeps_the_data() {
    let ns = TestNamespace::new("strat-ann-idem").await;
    let (c, n) = (&ns.client, ns.name.as_str());
    create(c, n, configmap("cfg", json!({"k": "v1"}))).await;
    create(c, n, configmap("canary-cfg", json!({"k": "v1"}))).await;
    let uses = |cm: &str| {
        pod_spec(
            json!({"envFrom": [{"configMapRef": {"name": cm}}]}),
            json!([]),
        )
    };
    create(c, n, deployment("web", auto(), uses("cfg"))).await;
    create(c, n, deployment("canary", auto(), uses("canary-cfg"))).await;
    let controller = Controller::start(&[&ns_flag(&ns), "--reload-strategy=annotations"]).await;

    update_configmap(c, n, "cfg", json!({"k": "v2"})).await;
    wait_for_annotation(&ns, "web", "cfg", &configmap_hash(&[("k", "v2")])).await;
    let written = written_state(&ns, "web").await;

    // An annotation-only edit, then a real change of another config in the same watch.
    merge_patch(
        c,
        n,
        "v1",
        "ConfigMap",
        "cfg",
        json!({"metadata": {"annotations": {"touched": "yes"}}}),
    )
    .await;
    update_configmap(c, n, "canary-cfg", json!({"k": "v2"})).await;
    wait_for_annotation(&ns, "canary", "canary-cfg", &configmap_hash(&[("k", "v2")])).await;

    tokio::time::sleep(GRACE).await;
    assert_eq!(written_state(&ns, "web").await, written);
    assert_eq!(
        reloads_counted(&controller.metrics().await),
        Some(2),
        "web once, canary once"
    );
}

#[tokio::test]
async fn annotations_strategy_restart_does_not_write_again() {
    let ns = TestNamespace::new("strat-ann-restart").await;
    let (c, n) = (&ns.client, ns.name.as_str());
    create(c, n, configmap("cfg", json!({"k": "v1"}))).await;
    create(c, n, configmap("canary-cfg", json!({"k": "v1"}))).await;
    let uses = |cm: &str| {
        pod_spec(
            json!({"envFrom": [{"configMapRef": {"name": cm}}]}),
            json!([]),
        )
    };
    create(c, n, deployment("web", auto(), uses("cfg"))).await;
    create(c, n, deployment("canary", auto(), uses("canary-cfg"))).await;
    let args = [ns_flag(&ns), "--reload-strategy=annotations".to_string()];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let first = Controller::start(&args).await;

    update_configmap(c, n, "cfg", json!({"k": "v2"})).await;
    update_configmap(c, n, "canary-cfg", json!({"k": "v2"})).await;
    wait_for_annotation(&ns, "web", "cfg", &configmap_hash(&[("k", "v2")])).await;
    wait_for_annotation(&ns, "canary", "canary-cfg", &configmap_hash(&[("k", "v2")])).await;
    let written = written_state(&ns, "web").await;
    assert!(first.terminate().success(), "a clean exit on SIGTERM");

    // While no controller runs, the canary's config changes. The new controller's start-up
    // reconcile must write that one, and find web's recorded hash current: nothing to write.
    update_configmap(c, n, "canary-cfg", json!({"k": "v3"})).await;
    let second = Controller::start(&args).await;
    wait_for_annotation(&ns, "canary", "canary-cfg", &configmap_hash(&[("k", "v3")])).await;

    tokio::time::sleep(GRACE).await;
    assert_eq!(written_state(&ns, "web").await, written);
    assert_eq!(
        reloads_counted(&second.metrics().await),
        Some(1),
        "only the canary is reloaded after the restart: {}",
        second.logs()
    );
}

#[tokio::test]
async fn env_vars_strategy_updates_the_var_in_place() {
    let ns = TestNamespace::new("strat-env").await;
    let (c, n) = (&ns.client, ns.name.as_str());
    create(c, n, configmap("cfg", json!({"k": "v1"}))).await;
    let container = json!({
        "env": [{"name": "USER_VAR", "value": "kept"}],
        "envFrom": [{"configMapRef": {"name": "cfg"}}]
    });
    create(
        c,
        n,
        deployment("web", auto(), pod_spec(container, json!([]))),
    )
    .await;
    let _controller = Controller::start(&[&ns_flag(&ns), "--reload-strategy=env-vars"]).await;

    update_configmap(c, n, "cfg", json!({"k": "v2"})).await;
    let first = configmap_hash(&[("k", "v2")]);
    wait_for_deployment_env(c, n, "web", "STAKATER_CFG_CONFIGMAP", &first).await;
    update_configmap(c, n, "cfg", json!({"k": "v3"})).await;
    let second = configmap_hash(&[("k", "v3")]);
    let obj = wait_for_deployment_env(c, n, "web", "STAKATER_CFG_CONFIGMAP", &second).await;

    assert_eq!(
        template_env(&obj, "/spec/template", 0),
        [
            ("STAKATER_CFG_CONFIGMAP".to_string(), second),
            ("USER_VAR".to_string(), "kept".to_string())
        ],
        "one var (first, as Reloader's merge patch leaves it), new value, the user's env untouched"
    );
    assert_eq!(obj["metadata"]["generation"], 3, "two writes");
    assert_eq!(
        parsed_reload_annotation(&obj),
        None,
        "env-vars writes no annotation"
    );
}

#[tokio::test]
async fn annotations_strategy_writes_nothing_when_the_pending_hash_is_already_recorded() {
    let ns = TestNamespace::new("strat-ann-revert").await;
    let (c, n) = (&ns.client, ns.name.as_str());
    create(c, n, configmap("cfg", json!({"k": "v1"}))).await;
    let spec = pod_spec(
        json!({"envFrom": [{"configMapRef": {"name": "cfg"}}]}),
        json!([]),
    );
    create(c, n, deployment("web", auto(), spec)).await;
    // The interval holds the next write back, so a change and its revert meet in the queue.
    let controller = Controller::start(&[
        &ns_flag(&ns),
        "--reload-strategy=annotations",
        "--min-reload-interval=5s",
    ])
    .await;

    update_configmap(c, n, "cfg", json!({"k": "v2"})).await;
    wait_for_annotation(&ns, "web", "cfg", &configmap_hash(&[("k", "v2")])).await;
    let written = written_state(&ns, "web").await;
    update_configmap(c, n, "cfg", json!({"k": "v3"})).await;
    update_configmap(c, n, "cfg", json!({"k": "v2"})).await;

    // The held write happens, finds hash(v2) recorded, and writes nothing.
    let no_change = "reloader_action_total{workload_kind=\"Deployment\",result=\"no_change\"} 1";
    wait_for(
        "the held write to find its hash already recorded",
        Duration::from_secs(15),
        || async {
            let metrics = controller.metrics().await;
            if metrics.contains(no_change) {
                Ok(())
            } else {
                Err(metrics
                    .lines()
                    .filter(|l| l.starts_with("reloader_action_total"))
                    .collect::<Vec<_>>()
                    .join("; "))
            }
        },
    )
    .await;
    assert_eq!(written_state(&ns, "web").await, written);
    assert_eq!(reloads_counted(&controller.metrics().await), Some(1));
}
