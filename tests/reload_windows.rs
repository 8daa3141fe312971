//! Maintenance windows and delays (`kube-reloader.io/reload-window`, `reload-delay`) against
//! the real API server: a closed window holds a workload's reloads across changes and a
//! restart, and it rolls once when the window opens; a delay rolls two quick changes once,
//! after it.
//!
//! Every "not rolled yet" is checked after a workload without a window, using the same config,
//! was seen to roll for the same change, so a slow controller cannot make a test pass.

mod common;

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use serde_json::{Value, json};

use common::objects::*;
use common::{Controller, TestNamespace, wait_for};

const VAR: &str = "STAKATER_SETTINGS_CONFIGMAP";

/// A window that opens two hours from now: closed whatever the time the test runs.
fn window_closed_now() -> String {
    let hour = jiff::Timestamp::now()
        .as_second()
        .div_euclid(3600)
        .rem_euclid(24);
    format!(
        "mon-sun {:02}:00-{:02}:00",
        (hour + 2) % 24,
        (hour + 3) % 24
    )
}

async fn start(ns: &TestNamespace) -> Controller {
    Controller::start(&[
        &format!("--namespaces={}", ns.name),
        // What waits is kept in the test namespace's kube-reloader-halts ConfigMap.
        &format!("--pod-namespace={}", ns.name),
    ])
    .await
}

async fn change(ns: &TestNamespace, value: &str) -> String {
    merge_patch(
        &ns.client,
        &ns.name,
        "v1",
        "ConfigMap",
        "settings",
        json!({"data": {"k": value}}),
    )
    .await;
    configmap_hash(&[("k", value)])
}

async fn generation(ns: &TestNamespace, name: &str) -> i64 {
    let obj: Value = get(&ns.client, &ns.name, "apps/v1", "Deployment", name)
        .await
        .expect("the Deployment");
    obj.pointer("/metadata/generation")
        .and_then(Value::as_i64)
        .unwrap_or(0)
}

async fn held_record(ns: &TestNamespace, workload: &str) -> Option<String> {
    let api: Api<ConfigMap> = Api::namespaced(ns.client.clone(), &ns.name);
    let cm = api.get_opt("kube-reloader-halts").await.ok()??;
    cm.data?
        .remove(&format!("held.Deployment.{}.{workload}", ns.name))
}

async fn deployments(ns: &TestNamespace, windowed: &str, timing: Value) {
    let c = &ns.client;
    create(c, &ns.name, configmap("settings", json!({"k": "v1"}))).await;
    let uses = env_from_configs(&["settings"], &[]);
    create(
        c,
        &ns.name,
        auto_deployment("anytime", json!({}), uses.clone()),
    )
    .await;
    create(c, &ns.name, auto_deployment(windowed, timing, uses)).await;
}

#[tokio::test]
async fn a_closed_window_holds_reloads_through_a_restart_and_rolls_once_when_it_opens() {
    let ns = TestNamespace::new("win-closed").await;
    let closed = json!({"kube-reloader.io/reload-window": window_closed_now()});
    deployments(&ns, "windowed", closed).await;
    let controller = start(&ns).await;
    let (c, n) = (&ns.client, ns.name.as_str());

    change(&ns, "v2").await;
    let v3 = {
        let v2 = configmap_hash(&[("k", "v2")]);
        wait_for_env_state(c, n, "anytime", VAR, Some(&v2), 15).await;
        change(&ns, "v3").await
    };
    wait_for_env_state(c, n, "anytime", VAR, Some(&v3), 15).await;
    assert_eq!(deployment_env(c, n, "windowed", VAR).await, None, "held");
    wait_for("the held reload kept", Duration::from_secs(10), || async {
        held_record(&ns, "windowed")
            .await
            .ok_or("not kept yet".to_string())
    })
    .await;

    // A restart: the next process restores what waits from the kept record.
    controller.terminate();
    let _controller = start(&ns).await;
    assert_eq!(
        deployment_env(c, n, "windowed", VAR).await,
        None,
        "still held"
    );

    // The window opens (its annotation now spans the whole week).
    let open = json!({"metadata": {"annotations": {
        "kube-reloader.io/reload-window": "mon-sun 00:00-24:00"
    }}});
    merge_patch(c, n, "apps/v1", "Deployment", "windowed", open).await;
    wait_for_env_state(c, n, "windowed", VAR, Some(&v3), 15).await;
    // Created (1), annotated (2: a Deployment's annotations bump its generation), rolled once.
    assert_eq!(
        generation(&ns, "windowed").await,
        3,
        "one rollout for two changes"
    );
    wait_for(
        "the kept record removed",
        Duration::from_secs(10),
        || async {
            match held_record(&ns, "windowed").await {
                None => Ok(()),
                Some(record) => Err(record),
            }
        },
    )
    .await;
}

#[tokio::test]
async fn a_delay_rolls_two_quick_changes_once_after_it() {
    let ns = TestNamespace::new("win-delay").await;
    let delay = json!({"kube-reloader.io/reload-delay": "5s"});
    deployments(&ns, "delayed", delay).await;
    let _controller = start(&ns).await;
    let (c, n) = (&ns.client, ns.name.as_str());

    let first = Instant::now();
    let v2 = change(&ns, "v2").await;
    wait_for_env_state(c, n, "anytime", VAR, Some(&v2), 15).await;
    let v3 = change(&ns, "v3").await;
    wait_for_env_state(c, n, "anytime", VAR, Some(&v3), 15).await;
    assert_eq!(
        deployment_env(c, n, "delayed", VAR).await,
        None,
        "within its delay"
    );

    wait_for_env_state(c, n, "delayed", VAR, Some(&v3), 20).await;
    assert!(
        first.elapsed() >= Duration::from_secs(5),
        "rolled {:?} after the first change",
        first.elapsed()
    );
    assert_eq!(
        generation(&ns, "delayed").await,
        2,
        "one rollout for two changes"
    );
}

async fn annotate_namespace(ns: &TestNamespace, annotations: Value) {
    use k8s_openapi::api::core::v1::Namespace;
    use kube::api::{Patch, PatchParams};
    let patch = json!({"metadata": {"annotations": annotations}});
    Api::<Namespace>::all(ns.client.clone())
        .patch(&ns.name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .expect("annotating the namespace");
}

/// Where namespaces are watched (here: a namespace selector), a namespace's window holds the
/// workloads without one of their own; a workload's own window wins.
#[tokio::test]
async fn a_namespace_window_holds_its_workloads_that_have_none_of_their_own() {
    let token = unique_token("win-ns");
    let ns = TestNamespace::with_labels("win-ns", json!({"kr-windows-test": token})).await;
    annotate_namespace(
        &ns,
        json!({"kube-reloader.io/reload-window": window_closed_now()}),
    )
    .await;
    // "anytime" has its own window, open all week; "windowed" has none: the namespace's holds it.
    let own = json!({"kube-reloader.io/reload-window": "mon-sun 00:00-24:00"});
    let (c, n) = (&ns.client, ns.name.as_str());
    create(c, n, configmap("settings", json!({"k": "v1"}))).await;
    let uses = env_from_configs(&["settings"], &[]);
    create(c, n, auto_deployment("anytime", own, uses.clone())).await;
    create(c, n, auto_deployment("windowed", json!({}), uses)).await;
    let _controller = Controller::start(&[
        &format!("--namespace-selector=kr-windows-test={token}"),
        &format!("--pod-namespace={n}"),
    ])
    .await;

    let v2 = change(&ns, "v2").await;
    wait_for_env_state(c, n, "anytime", VAR, Some(&v2), 15).await;
    assert_eq!(deployment_env(c, n, "windowed", VAR).await, None, "held");

    // The namespace's window goes: what it held rolls.
    annotate_namespace(&ns, json!({"kube-reloader.io/reload-window": null})).await;
    wait_for_env_state(c, n, "windowed", VAR, Some(&v2), 15).await;
}

/// What waits moves with the namespace: the owner holding it crashes, the other replica takes
/// the namespace over, restores the kept record and rolls once when the window opens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_reload_survives_a_shard_handover() {
    let token = unique_token("win-shard");
    let ns = TestNamespace::with_labels("win-shard", json!({"kr-windows-test": token})).await;
    let closed = json!({"kube-reloader.io/reload-window": window_closed_now()});
    deployments(&ns, "windowed", closed).await;
    let replica = |name: &'static str| {
        let selector = format!("--namespace-selector=kr-windows-test={token}");
        let home = ns.name.clone();
        async move {
            let args = [
                "--sharding",
                "--lease-duration=4s",
                "--renew-deadline=3s",
                "--retry-period=1s",
                &selector,
            ];
            let env = [("POD_NAME", name), ("POD_NAMESPACE", home.as_str())];
            Controller::start_with_env(&args, &env).await
        }
    };
    let (r0, r1) = (replica("r0").await, replica("r1").await);
    let owned = "kube_reloader_owned_namespaces";
    wait_for(
        "one owner of the namespace",
        Duration::from_secs(60),
        || async {
            let owned = (r0.metric(owned).await, r1.metric(owned).await);
            matches!(owned, (Some(1.0), Some(0.0)) | (Some(0.0), Some(1.0)))
                .then_some(())
                .ok_or(format!("{owned:?}"))
        },
    )
    .await;
    // Past the hand-over's settle check of a first assignment.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (c, n) = (&ns.client, ns.name.as_str());
    let v2 = change(&ns, "v2").await;
    wait_for_env_state(c, n, "anytime", VAR, Some(&v2), 30).await;
    wait_for("the held reload kept", Duration::from_secs(10), || async {
        held_record(&ns, "windowed")
            .await
            .ok_or("not kept yet".to_string())
    })
    .await;
    assert_eq!(deployment_env(c, n, "windowed", VAR).await, None, "held");

    let (owner, other) = match r0.metric(owned).await {
        Some(1.0) => (r0, r1),
        _ => (r1, r0),
    };
    owner.crash();
    let url = format!(
        "http://127.0.0.1:{}/debug/explain?kind=Deployment&namespace={n}&name=windowed",
        other.metrics_port
    );
    wait_for(
        "the other replica holding it",
        Duration::from_secs(60),
        || async {
            let (_, body) = common::http_get(&url).await.map_err(|e| e.to_string())?;
            let answer: Value = serde_json::from_str(&body).map_err(|e| format!("{e}: {body}"))?;
            let held = answer.pointer("/timing/held/0").and_then(Value::as_str);
            (held == Some("configmap/settings"))
                .then_some(())
                .ok_or(body)
        },
    )
    .await;
    assert_eq!(
        deployment_env(c, n, "windowed", VAR).await,
        None,
        "still held"
    );

    let open = json!({"metadata": {"annotations": {
        "kube-reloader.io/reload-window": "mon-sun 00:00-24:00"
    }}});
    merge_patch(c, n, "apps/v1", "Deployment", "windowed", open).await;
    wait_for_env_state(c, n, "windowed", VAR, Some(&v2), 15).await;
    // Created (1), annotated (2), rolled once (3).
    assert_eq!(generation(&ns, "windowed").await, 3, "one rollout");
}
