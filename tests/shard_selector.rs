//! The ownership ranges of `kube_reloader::shard::ranges` against the real API server's sharded
//! list and watch (KEP-5866, gate `ShardedListAndWatch`, on in `hack/cluster.sh`): the server
//! returns exactly the namespaces the ranges give a member, so the same ranges can select on
//! the server and decide on arrival.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use kube::Client;
use kube_reloader::shard::ranges::{Quantiles, RangeTable, fnv1a64, selector, union};
use serde_json::{Value, json};

use common::objects::*;
use common::observe::encode;
use common::{TestNamespace, client};

const LABEL: &str = "kube-reloader-test/shard-selector";

fn members(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("r{i}")).collect()
}

/// Twelve namespaces, each with one ConfigMap labelled with `run`.
async fn namespaces(run: &str) -> Vec<TestNamespace> {
    let mut out = Vec::new();
    for i in 0..12 {
        let ns = TestNamespace::new(&format!("shard-sel-{i:02}")).await;
        let mut cm = configmap("cfg", json!({"k": "v"}));
        cm["metadata"]["labels"] = json!({ LABEL: run });
        create(&ns.client, &ns.name, cm).await;
        out.push(ns);
    }
    out
}

fn query(run: &str, shard: &str) -> String {
    format!(
        "labelSelector={}&shardSelector={}",
        encode(&format!("{LABEL}={run}")),
        encode(shard)
    )
}

async fn list(client: &Client, run: &str, shard: &str) -> Value {
    let req = http::Request::get(format!("/api/v1/configmaps?{}", query(run, shard)))
        .body(Vec::new())
        .unwrap();
    let text = client
        .request_text(req)
        .await
        .expect("a sharded list of ConfigMaps");
    serde_json::from_str(&text).unwrap()
}

fn item_namespaces(list: &Value) -> BTreeSet<String> {
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["namespace"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn the_server_lists_exactly_the_namespaces_a_members_ranges_own() {
    let run = format!("{:x}", std::process::id());
    let spaces = namespaces(&run).await;
    let names: Vec<String> = spaces.iter().map(|ns| ns.name.clone()).collect();
    let client = client().await;
    // Quantiles of more names than the test makes, so the slots are not cut around these alone.
    let mut hashes: Vec<u64> = names.iter().map(|n| fnv1a64(n)).collect();
    hashes.extend((0..2_000).map(|i| fnv1a64(&format!("tenant-{i:05}"))));
    let quantiles = Quantiles::of(hashes);
    let table = RangeTable::new(&members(3), quantiles.as_ref());
    let mut seen = BTreeSet::new();
    for member in members(3) {
        let shard = selector("object.metadata.namespace", &table.ranges_of(&member))
            .expect("every member owns some ranges");
        let listed = list(&client, &run, &shard).await;
        assert_eq!(
            listed["metadata"]["shardInfo"]["selector"].as_str(),
            Some(shard.as_str()),
            "the server echoes the selector it applied (is ShardedListAndWatch on?)"
        );
        let expected: BTreeSet<String> = names
            .iter()
            .filter(|n| table.owner(n) == Some(member.as_str()))
            .cloned()
            .collect();
        assert_eq!(item_namespaces(&listed), expected, "{member}");
        seen.extend(expected);
    }
    assert_eq!(seen.len(), names.len(), "every namespace has one owner");
}

#[tokio::test]
async fn a_handover_union_is_accepted_and_a_streaming_watch_applies_it() {
    let run = format!("{:x}w", std::process::id());
    let spaces = namespaces(&run).await;
    let names: Vec<String> = spaces.iter().map(|ns| ns.name.clone()).collect();
    let client = client().await;
    let three = RangeTable::new(&members(3), None);
    let four = RangeTable::new(&members(4), None);
    let both = union(&three.ranges_of("r0"), &four.ranges_of("r0"));
    let shard = selector("object.metadata.namespace", &both).unwrap();
    let expected: BTreeSet<String> = names
        .iter()
        .filter(|n| three.owner(n) == Some("r0") || four.owner(n) == Some("r0"))
        .cloned()
        .collect();
    assert_eq!(
        item_namespaces(&list(&client, &run, &shard).await),
        expected
    );

    // A streaming list (sendInitialEvents) with the same selector delivers the same objects.
    let req = http::Request::get(format!(
        "/api/v1/configmaps?watch=true&sendInitialEvents=true&allowWatchBookmarks=true\
         &resourceVersionMatch=NotOlderThan&timeoutSeconds=10&{}",
        query(&run, &shard)
    ))
    .body(Vec::new())
    .unwrap();
    let events = client.request_events::<Value>(req).await.unwrap();
    let watched = tokio::time::timeout(Duration::from_secs(15), async {
        let mut watched = BTreeSet::new();
        let mut events = events.boxed();
        while let Some(event) = events.try_next().await.unwrap() {
            match event {
                kube::api::WatchEvent::Added(obj) => {
                    watched.insert(obj["metadata"]["namespace"].as_str().unwrap().to_string());
                }
                kube::api::WatchEvent::Bookmark(_) => break,
                other => panic!("unexpected event {other:?}"),
            }
        }
        watched
    })
    .await
    .expect("the initial events and their bookmark within 15 s");
    assert_eq!(watched, expected);
}
