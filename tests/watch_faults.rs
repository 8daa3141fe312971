//! Watches that break for real, through the fault proxy: a frozen watch delivers nothing, then
//! ends with the API server's `410 Expired`, so the controller must list again. What changed or
//! was deleted meanwhile must be found by that relist and acted on, once.

mod common;

use std::time::Duration;

use serde_json::json;

use common::fault_proxy::FaultProxy;
use common::objects::*;
use common::{Controller, TestNamespace, wait_for};

#[tokio::test]
async fn a_change_and_a_deletion_made_while_the_watch_was_down_are_found_by_the_relist() {
    let ns = TestNamespace::new("wf-relist").await;
    let c = &ns.client;
    create(c, &ns.name, configmap("changed", json!({"k": "v1"}))).await;
    create(c, &ns.name, configmap("gone", json!({"k": "v1"}))).await;
    let container = env_from_configs(&["changed", "gone"], &[]);
    create(c, &ns.name, auto_deployment("web", json!({}), container)).await;
    let proxy = FaultProxy::start().await;
    let kubeconfig = proxy.kubeconfig().to_str().unwrap().to_string();
    let scope = format!("--namespaces={}", ns.name);
    let controller = Controller::start_with_env(
        &[&scope, "--reload-on-delete=true"],
        &[("KUBECONFIG", kubeconfig.as_str())],
    )
    .await;
    // A live change first: the watch flows through the proxy, and `gone` gets its env var.
    set_configmap_data(c, &ns.name, "gone", json!({"k": "v2"})).await;
    let gone_var = "STAKATER_GONE_CONFIGMAP";
    let gone_v2 = configmap_hash(&[("k", "v2")]);
    wait_for_env_state(c, &ns.name, "web", gone_var, Some(&gone_v2), 30).await;

    proxy.freeze_watches("configmaps");
    set_configmap_data(c, &ns.name, "changed", json!({"k": "v2"})).await;
    delete_object(c, &ns.name, "v1", "ConfigMap", "gone").await;
    // The watch is frozen: the controller cannot have seen either (this is what makes the
    // relist, not the live watch, the one that finds them below).
    tokio::time::sleep(Duration::from_secs(3)).await;
    let changed_var = "STAKATER_CHANGED_CONFIGMAP";
    assert_eq!(deployment_env(c, &ns.name, "web", changed_var).await, None);
    assert_eq!(
        deployment_env(c, &ns.name, "web", gone_var).await,
        Some(gone_v2)
    );

    proxy.expire_watches();
    let changed_v2 = configmap_hash(&[("k", "v2")]);
    wait_for_env_state(c, &ns.name, "web", changed_var, Some(&changed_v2), 30).await;
    wait_for_env_state(c, &ns.name, "web", gone_var, None, 30).await;
    wait_for(
        "the watch restart counted",
        Duration::from_secs(10),
        || async {
            let metrics = controller.metrics().await;
            metrics
                .lines()
                .find(|l| {
                    l.starts_with("kube_reloader_watch_restarts_total")
                        && l.contains("configmap")
                        && !l.ends_with(" 0")
                })
                .map(|_| ())
                .ok_or_else(|| "no configmap watch restart in /metrics".to_string())
        },
    )
    .await;

    // Once: the template does not move again (no second reload of what the relist found).
    let generation = || async {
        let web = get(c, &ns.name, "apps/v1", "Deployment", "web").await;
        web.expect("the Deployment")["metadata"]["generation"].as_i64()
    };
    let settled = generation().await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(generation().await, settled, "{}", plain_logs(&controller));
}

/// A paged start-up list is a consistent read. A list at "any version" may come from a watch
/// cache that lags (the proxy answers one with a list recorded before the change below); a
/// replica that read it would take the change made while it was down for the state its workload
/// records and, its watch delayed, miss the reload.
#[tokio::test]
async fn a_paged_start_up_list_is_a_consistent_read_never_a_lagging_cache() {
    let ns = TestNamespace::new("wf-stale").await;
    let c = &ns.client;
    create(c, &ns.name, configmap("cfg", json!({"k": "v1"}))).await;
    let container = env_from_configs(&["cfg"], &[]);
    create(c, &ns.name, auto_deployment("web", json!({}), container)).await;
    let scope = format!("--namespaces={}", ns.name);
    let first = Controller::start(&[&scope]).await;
    set_configmap_data(c, &ns.name, "cfg", json!({"k": "v2"})).await;
    let var = "STAKATER_CFG_CONFIGMAP";
    let v2 = configmap_hash(&[("k", "v2")]);
    wait_for_env_state(c, &ns.name, "web", var, Some(&v2), 30).await;
    first.stop().await;

    let path = format!("/api/v1/namespaces/{}/configmaps", ns.name);
    let request = http::Request::get(&path).body(Vec::new()).unwrap();
    let recorded = c
        .request_text(request)
        .await
        .expect("listing the ConfigMaps");
    set_configmap_data(c, &ns.name, "cfg", json!({"k": "v3"})).await;

    let proxy = FaultProxy::start().await;
    proxy.refuse_streaming_lists();
    proxy.serve_stale_lists("configmaps", recorded.into_bytes());
    proxy.freeze_watches("configmaps");
    let kubeconfig = proxy.kubeconfig().to_str().unwrap().to_string();
    let second =
        Controller::start_with_env(&[&scope], &[("KUBECONFIG", kubeconfig.as_str())]).await;
    assert!(
        second
            .logs()
            .contains("config and workload watches list in pages"),
        "the proxy did not make the controller list in pages:\n{}",
        plain_logs(&second)
    );
    let v3 = configmap_hash(&[("k", "v3")]);
    wait_for_env_state(c, &ns.name, "web", var, Some(&v3), 20).await;
}
