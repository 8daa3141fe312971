//! The core promise against the real API server: a change to a referenced config rolls the
//! workload, with Reloader's env var and hash; nothing rolls at start or on metadata-only edits.

mod common;

use std::time::Duration;

use serde_json::json;

use common::objects::*;
use common::{Controller, TestNamespace, wait_for};

const TEMPLATE: &str = "/spec/template";

async fn env_of(ns: &TestNamespace, name: &str, var: &str) -> Option<String> {
    let obj = get(&ns.client, &ns.name, "apps/v1", "Deployment", name).await?;
    env_value(&obj, TEMPLATE, var)
}

#[tokio::test]
async fn configmap_change_rolls_auto_deployment_with_reloader_hash() {
    let ns = TestNamespace::new("basics").await;
    let c = &ns.client;
    create(c, &ns.name, configmap("my-app.config", json!({"k": "v1"}))).await;
    create(
        c,
        &ns.name,
        deployment(
            "auto",
            json!({"reloader.stakater.com/auto": "true"}),
            pod_spec(env_from_configmap("my-app.config"), json!([])),
        ),
    )
    .await;
    create(
        c,
        &ns.name,
        deployment(
            "plain",
            json!({}),
            pod_spec(env_from_configmap("my-app.config"), json!([])),
        ),
    )
    .await;
    let controller = Controller::start(&[&format!("--namespaces={}", ns.name)]).await;

    // Starting rolls nothing.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        env_of(&ns, "auto", "STAKATER_MY_APP_CONFIG_CONFIGMAP").await,
        None
    );

    // A label-only edit is not a change.
    merge_patch(
        c,
        &ns.name,
        "v1",
        "ConfigMap",
        "my-app.config",
        json!({"metadata": {"labels": {"x": "y"}}}),
    )
    .await;
    merge_patch(
        c,
        &ns.name,
        "v1",
        "ConfigMap",
        "my-app.config",
        json!({"data": {"k": "v2"}}),
    )
    .await;
    let expected = configmap_hash(&[("k", "v2")]);
    let seen = wait_for(
        "the auto deployment to be rolled",
        Duration::from_secs(20),
        || async {
            env_of(&ns, "auto", "STAKATER_MY_APP_CONFIG_CONFIGMAP")
                .await
                .ok_or_else(|| "no STAKATER env var yet".to_string())
        },
    )
    .await;
    assert_eq!(seen, expected);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        env_of(&ns, "plain", "STAKATER_MY_APP_CONFIG_CONFIGMAP").await,
        None,
        "not opted in"
    );

    let metrics = controller.metrics().await;
    assert!(
        metrics.contains("reloader_reload_executed_total{success=\"true\"} 1"),
        "{metrics}"
    );
}
