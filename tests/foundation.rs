//! The chain the whole project relies on: a real API server reached through kube-rs.

mod common;

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;

use common::{TestNamespace, wait_for};

#[tokio::test]
async fn create_read_back_and_watch_an_update() {
    let ns = TestNamespace::new("foundation").await;
    let cms: Api<ConfigMap> = Api::namespaced(ns.client.clone(), &ns.name);
    let deployments: Api<Deployment> = Api::namespaced(ns.client.clone(), &ns.name);

    let cm: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "app-config"}, "data": {"greeting": "hello"}
    }))
    .unwrap();
    cms.create(&PostParams::default(), &cm).await.unwrap();
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "app"},
        "spec": {
            "selector": {"matchLabels": {"app": "app"}},
            "template": {"metadata": {"labels": {"app": "app"}}, "spec": {"containers": [{
                "name": "app", "image": "registry.k8s.io/pause:3.10",
                "envFrom": [{"configMapRef": {"name": "app-config"}}]
            }]}}
        }
    }))
    .unwrap();
    deployments
        .create(&PostParams::default(), &deployment)
        .await
        .unwrap();

    let read = cms.get("app-config").await.unwrap();
    assert_eq!(read.data.unwrap()["greeting"], "hello");
    let read = deployments.get("app").await.unwrap();
    assert_eq!(read.spec.template.spec.unwrap().containers[0].name, "app");

    let mut updates = watcher(
        cms.clone(),
        watcher::Config::default().fields("metadata.name=app-config"),
    )
    .applied_objects()
    .boxed();
    // The first object is the current state.
    let first = updates.next().await.unwrap().unwrap();
    assert_eq!(first.data.unwrap()["greeting"], "hello");
    cms.patch(
        "app-config",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"greeting": "bonjour"}})),
    )
    .await
    .unwrap();
    let seen = tokio::time::timeout(Duration::from_secs(10), updates.next())
        .await
        .expect("the update arrived on the watch")
        .unwrap()
        .unwrap();
    assert_eq!(seen.data.unwrap()["greeting"], "bonjour");

    // The controller-manager runs: the Deployment gets a ReplicaSet.
    let rs: Api<k8s_openapi::api::apps::v1::ReplicaSet> =
        Api::namespaced(ns.client.clone(), &ns.name);
    wait_for(
        "a ReplicaSet for the Deployment",
        Duration::from_secs(30),
        || async {
            let list = rs
                .list(&Default::default())
                .await
                .map_err(|e| e.to_string())?;
            if list.items.is_empty() {
                Err("no ReplicaSet yet".into())
            } else {
                Ok(())
            }
        },
    )
    .await;
}
