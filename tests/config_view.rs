//! The handover guard of the write path (src/handover/config_view.rs) against the real API server:
//! while this replica's index is behind the server for a config, a write waits (`NotYet`), and a
//! write carries the newest hash the index holds, so a lagging replica never writes an older hash
//! after another wrote the newer one; a config indexed at a version made after the other replicas
//! were quiet is not read at all.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::ResourceExt;
use kube::api::DeleteParams;
use serde_json::json;
use tracing::Span;

use common::TestNamespace;
use common::objects::*;
use kube_reloader::digest::DigestPool;
use kube_reloader::handover::config_view::ConfigViews;
use kube_reloader::index::{ConfigState, ReverseIndex};
use kube_reloader::model::{ConfigKey, ConfigKind};
use kube_reloader::reloader_format::hash::{ConfigPayload, digest_payload};
use kube_reloader::reloader_format::template::TemplateChange;
use kube_reloader::rollout::{QueuedChange, WriteError};
use kube_reloader::shard::Settling;

fn state(value: &str, resource_version: u64) -> ConfigState {
    let data = BTreeMap::from([("k".to_string(), value.to_string())]);
    ConfigState {
        keys: Default::default(),
        digest: digest_payload(ConfigPayload::ConfigMap {
            data,
            binary_data: BTreeMap::new(),
        }),
        ignore: false,
        matched: false,
        resource_version,
        waves: None,
    }
}

fn queued(config: &ConfigKey, hash: Option<&str>, observed_at: Instant) -> QueuedChange {
    QueuedChange {
        change: TemplateChange {
            counted: Default::default(),
            config: config.clone(),
            hash: hash.map(str::to_owned),
            explicit: false,
        },
        observed_at,
        span: Span::none(),
        acted: None,
    }
}

async fn server_version(ns: &TestNamespace, name: &str) -> u64 {
    get(&ns.client, &ns.name, "v1", "ConfigMap", name)
        .await
        .expect("the ConfigMap exists")["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|v| v.parse().ok())
        .expect("a numeric resourceVersion")
}

fn assert_waits(result: Result<Vec<TemplateChange>, WriteError>, why: &str) {
    match result {
        Err(WriteError::NotYet(reason)) => assert!(reason.contains("behind"), "{reason}"),
        other => panic!("{why}: expected NotYet, got {other:?}"),
    }
}

#[tokio::test]
async fn a_write_waits_while_the_index_is_behind_the_api_server() {
    let ns = TestNamespace::new("view").await;
    let c = &ns.client;
    let created = create(c, &ns.name, configmap("cfg", json!({"k": "v1"}))).await;
    let key = ConfigKey::new(ConfigKind::ConfigMap, &ns.name, &created.name_any());
    let index = Arc::new(ReverseIndex::new());
    let max_wait = Duration::from_secs(1);
    let views =
        ConfigViews::new(c.clone(), index.clone(), DigestPool::new(1)).with_max_wait(max_wait);
    let now = Instant::now;
    let h1 = state("v1", 0).digest.reloader_hash();
    let h2 = state("v2", 0).digest.reloader_hash();
    let change = |hash: &str| queued(&key, Some(hash), now());

    assert_waits(
        views.ensure_current(&[change(&h1)], Settling::Every).await,
        "the server has a config the index has not listed yet",
    );
    let v1 = server_version(&ns, "cfg").await;
    index.apply_config(key.clone(), state("v1", v1));
    let hash_of = |written: Vec<TemplateChange>| written[0].hash.clone();
    let written = views.ensure_current(&[change(&h1)], Settling::Every).await;
    assert_eq!(
        hash_of(written.expect("the index is current")),
        Some(h1.clone())
    );

    merge_patch(
        c,
        &ns.name,
        "v1",
        "ConfigMap",
        "cfg",
        json!({"data": {"k": "v2"}}),
    )
    .await;
    assert_waits(
        views.ensure_current(&[change(&h1)], Settling::Every).await,
        "the server has a newer version than the index",
    );
    // The wait is bounded (the view may never catch up, e.g. a config that left the label
    // selector), and ends without a write; it is timed from when the view was first found behind: a change seen long ago (held
    // across a pause) still waits for the view it wakes up to.
    let long_ago = now() - Duration::from_secs(60);
    assert_waits(
        views
            .ensure_current(&[queued(&key, Some(&h1), long_ago)], Settling::Every)
            .await,
        "a change seen long ago, the view behind for a moment only",
    );
    tokio::time::sleep(max_wait + Duration::from_millis(100)).await;
    let written = views.ensure_current(&[change(&h1)], Settling::Every).await;
    assert_eq!(
        written.expect("no longer waits once the view was behind for max_wait"),
        vec![],
        "the older hash this replica has is never written; the watch's newer state queues its own"
    );
    let v2 = server_version(&ns, "cfg").await;
    index.apply_config(key.clone(), state("v2", v2));
    let written = views.ensure_current(&[change(&h1)], Settling::Every).await;
    assert_eq!(
        hash_of(written.expect("the index is current")),
        Some(h2.clone()),
        "the index already has a newer state than the change: the newer hash is written, never the older"
    );
    let written = views.ensure_current(&[change(&h2)], Settling::Every).await;
    assert_eq!(
        hash_of(written.expect("the newest change")),
        Some(h2.clone())
    );

    // A newer version that changed only metadata: past the wait, the content the index holds is
    // the server's, and its hash is written (the watch event of that version queues nothing).
    merge_patch(
        c,
        &ns.name,
        "v1",
        "ConfigMap",
        "cfg",
        json!({"metadata": {"annotations": {"team": "a"}}}),
    )
    .await;
    // Once every other replica was quiet at a revision before v2, v2 (indexed here) is not read
    // from the server: nobody can have written a newer hash from another view.
    let written = views
        .ensure_current(&[change(&h2)], Settling::ChangedUpTo(v2 - 1))
        .await;
    assert_eq!(
        hash_of(written.expect("made after the others were quiet: not compared")),
        Some(h2.clone())
    );
    assert_waits(
        views
            .ensure_current(&[change(&h2)], Settling::ChangedUpTo(v2))
            .await,
        "the server has a newer version (metadata only), and v2 is not after the quiet revision",
    );
    tokio::time::sleep(max_wait + Duration::from_millis(100)).await;
    let written = views.ensure_current(&[change(&h2)], Settling::Every).await;
    assert_eq!(
        hash_of(written.expect("past the wait")),
        Some(h2.clone()),
        "same content as the server's: written"
    );

    api_for(c, &ns.name, "v1", "ConfigMap")
        .delete("cfg", &DeleteParams::default())
        .await
        .expect("deleting the ConfigMap");
    assert_waits(
        views.ensure_current(&[change(&h2)], Settling::Every).await,
        "the index still has a config the server deleted",
    );
    index.delete_config(&key);
    views
        .ensure_current(&[queued(&key, None, now())], Settling::Every)
        .await
        .expect("both agree it is gone");
}
