//! Key-precise reloads (`--precise-keys`) and the churn breaker (`--churn-limit`), against the
//! real control plane: which keys count for each way a template reads a config, switching the
//! mode on a running workload, and a flapping Secret.

mod common;

use std::time::Duration;

use serde_json::{Value, json};

use common::objects::*;
use common::{Controller, TestNamespace, wait_for};
use kube_reloader::reloader_format::precise::KeyDigests;

const VAR: &str = "STAKATER_SHARED_CONFIGMAP";

fn auto(extra: Value) -> Value {
    let mut a = json!({"reloader.stakater.com/auto": "true"});
    for (k, v) in extra.as_object().expect("an object") {
        a[k] = v.clone();
    }
    a
}

fn key_ref(key: &str) -> Value {
    json!({"env": [{"name": "V", "valueFrom": {"configMapKeyRef": {"name": "shared", "key": key}}}]})
}

fn mounted() -> Value {
    json!({"volumeMounts": [{"name": "cfg", "mountPath": "/cfg"}]})
}

/// The key-precise value of the ConfigMap's `data` over `keys` (the recipe is pinned by
/// literals in src/reloader_format/precise.rs).
fn precise(data: &[(&str, &str)], keys: &[&str]) -> String {
    let digests = KeyDigests::of(data.iter().map(|(k, v)| (*k, v.as_bytes())));
    let keys: Vec<Box<str>> = keys.iter().map(|k| Box::from(*k)).collect();
    digests.precise_value(&keys).expect("digests given")
}

async fn generation(ns: &TestNamespace, name: &str) -> i64 {
    get(&ns.client, &ns.name, "apps/v1", "Deployment", name)
        .await
        .and_then(|d| d.pointer("/metadata/generation").and_then(Value::as_i64))
        .unwrap_or_else(|| panic!("Deployment {name} has no generation"))
}

/// Waits until `/debug/explain` says which keys of `shared` count for Deployment `name`
/// (`None`: the whole config): the controller has seen the workload as it is now.
async fn wait_for_counted(c: &Controller, ns: &str, name: &str, keys: Option<Vec<&str>>) {
    let url = format!(
        "http://127.0.0.1:{}/debug/explain?kind=Deployment&namespace={ns}&name={name}&config=configmap/shared",
        c.metrics_port
    );
    let want = json!(keys);
    wait_for(
        &format!("{name} counting {want}"),
        Duration::from_secs(20),
        || async {
            let (_, body) = common::http_get(&url).await.map_err(|e| e.to_string())?;
            let answer: Value = serde_json::from_str(&body).map_err(|e| e.to_string())?;
            let counted = &answer["explanation"]["configs"][0]["countedKeys"];
            match *counted == want {
                true => Ok(()),
                false => Err(format!("countedKeys {counted}")),
            }
        },
    )
    .await
}

const KEYS_UNCHANGED: &str = "reloader_skipped_total{reason=\"keys_unchanged\"}";

/// Waits until the controller has skipped `n` candidates because their keys did not change:
/// after that, a workload not rolled was decided about, not merely not reached yet.
async fn wait_for_skips(c: &Controller, n: f64) {
    wait_for(
        &format!("{n} keys_unchanged skips"),
        Duration::from_secs(20),
        || async {
            let seen = c.metric(KEYS_UNCHANGED).await.unwrap_or(0.0);
            match seen >= n {
                true => Ok(()),
                false => Err(format!("{seen}")),
            }
        },
    )
    .await
}

/// (name, container extra, volumes) of the workloads reading `shared`, and the keys each reads
/// (`None`: all of it).
fn readers() -> Vec<(&'static str, Value, Value, Option<Vec<&'static str>>)> {
    let items = |key: &str| json!([{"key": key, "path": key}]);
    vec![
        ("env-a", key_ref("a"), json!([]), Some(vec!["a"])),
        (
            "items-b",
            mounted(),
            json!([{"name": "cfg", "configMap": {"name": "shared", "items": items("b")}}]),
            Some(vec!["b"]),
        ),
        (
            "projected-a",
            mounted(),
            json!([{"name": "cfg", "projected": {"sources": [{"configMap": {"name": "shared", "items": items("a")}}]}}]),
            Some(vec!["a"]),
        ),
        ("env-from", env_from_configmap("shared"), json!([]), None),
    ]
}

#[tokio::test]
async fn each_workload_rolls_only_when_a_key_it_reads_changes() {
    let ns = TestNamespace::new("precise-keys").await;
    let (c, n) = (&ns.client, ns.name.as_str());
    create(
        c,
        n,
        configmap("shared", json!({"a": "1", "b": "1", "c": "1"})),
    )
    .await;
    for (name, container, volumes, _) in readers() {
        create(
            c,
            n,
            deployment(name, auto(json!({})), pod_spec(container, volumes)),
        )
        .await;
    }
    let controller = Controller::start(&[&format!("--namespaces={n}"), "--precise-keys=all"]).await;
    // (change, data after it, skips expected so far)
    let steps = [
        (("c", "2"), [("a", "1"), ("b", "1"), ("c", "2")], 3.0),
        (("a", "2"), [("a", "2"), ("b", "1"), ("c", "2")], 4.0),
        (("b", "2"), [("a", "2"), ("b", "2"), ("c", "2")], 6.0),
    ];
    let mut expected: Vec<Option<String>> = vec![None; readers().len()];
    for ((key, value), data, skips) in steps {
        update_configmap(c, n, "shared", json!({key: value})).await;
        wait_for_skips(&controller, skips).await;
        for (i, (name, _, _, reads)) in readers().into_iter().enumerate() {
            let rolls = reads.as_ref().is_none_or(|keys| keys.contains(&key));
            if rolls {
                expected[i] = Some(match &reads {
                    Some(keys) => precise(&data, keys),
                    None => configmap_hash(&data),
                });
            }
            let want = expected[i].as_deref();
            wait_for_env_state(c, n, name, VAR, want, 20).await;
        }
    }
    // Rolled once per change of a key it reads (plus its creation), never for other keys.
    let rollouts = [
        ("env-a", 2),
        ("items-b", 2),
        ("projected-a", 2),
        ("env-from", 4),
    ];
    for (name, expected) in rollouts {
        assert_eq!(generation(&ns, name).await, expected, "{name}");
    }
    assert_eq!(controller.metric(KEYS_UNCHANGED).await.unwrap_or(0.0), 6.0);
}

/// The Deployment's pod template: what a rollout changes (its generation also moves with
/// annotation edits, which this test makes).
async fn template(ns: &TestNamespace, name: &str) -> Value {
    get(&ns.client, &ns.name, "apps/v1", "Deployment", name)
        .await
        .and_then(|d| d.pointer("/spec/template").cloned())
        .unwrap_or_else(|| panic!("Deployment {name} has no template"))
}

#[tokio::test]
async fn switching_a_running_workload_to_precise_keys_and_back_rolls_it_at_most_once() {
    let ns = TestNamespace::new("precise-toggle").await;
    let (c, n) = (&ns.client, ns.name.as_str());
    create(c, n, configmap("shared", json!({"a": "1", "b": "1"}))).await;
    create(
        c,
        n,
        deployment("web", auto(json!({})), pod_spec(key_ref("a"), json!([]))),
    )
    .await;
    let args = [
        format!("--namespaces={n}"),
        "--precise-keys=annotated".to_string(),
    ];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let controller = Controller::start(&args).await;

    // Not annotated: Reloader's behaviour, any key rolls it.
    update_configmap(c, n, "shared", json!({"b": "2"})).await;
    let full = configmap_hash(&[("a", "1"), ("b", "2")]);
    wait_for_env_state(c, n, "web", VAR, Some(&full), 20).await;
    let rolled_once = template(&ns, "web").await;

    // Switched on: annotating rolls nothing; a change of b rolls nothing; a change of a rolls once.
    let on = json!({"metadata": {"annotations": {"kube-reloader.io/precise-keys": "true"}}});
    merge_patch(c, n, "apps/v1", "Deployment", "web", on).await;
    wait_for_counted(&controller, n, "web", Some(vec!["a"])).await;
    update_configmap(c, n, "shared", json!({"b": "3"})).await;
    wait_for_skips(&controller, 1.0).await;
    assert_eq!(
        template(&ns, "web").await,
        rolled_once,
        "switching on and b changing rolled nothing"
    );
    update_configmap(c, n, "shared", json!({"a": "2"})).await;
    let value = precise(&[("a", "2"), ("b", "3")], &["a"]);
    wait_for_env_state(c, n, "web", VAR, Some(&value), 20).await;
    let rolled_twice = template(&ns, "web").await;

    // Switched off and b changed while the controller was away: at its start the key-precise
    // value still counts as current, so nothing rolls.
    controller.stop().await;
    let off = json!({"metadata": {"annotations": {"kube-reloader.io/precise-keys": "false"}}});
    merge_patch(c, n, "apps/v1", "Deployment", "web", off).await;
    update_configmap(c, n, "shared", json!({"b": "4"})).await;
    let controller = Controller::start(&args).await;
    wait_for_counted(&controller, n, "web", None).await;
    assert_eq!(
        template(&ns, "web").await,
        rolled_twice,
        "the restart and switching off rolled nothing of their own"
    );
    // Switched off: the next change of any key rolls it once, in Reloader's form.
    update_configmap(c, n, "shared", json!({"b": "5"})).await;
    let full = configmap_hash(&[("a", "2"), ("b", "5")]);
    wait_for_env_state(c, n, "web", VAR, Some(&full), 20).await;
    // Three rollouts in all, one Reloaded Event each: none at the restart, none on switching.
    let reloaded = || async {
        let events = events_about(c, n, "Deployment", "web").await;
        events.iter().filter(|e| e.reason == "Reloaded").count()
    };
    wait_for("3 Reloaded Events", Duration::from_secs(10), || async {
        match reloaded().await {
            3 => Ok(()),
            seen => Err(format!("{seen}")),
        }
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(reloaded().await, 3);
    drop(controller);
}

#[tokio::test]
async fn a_flapping_secret_rolls_its_workload_limit_times_then_once_when_quiet() {
    let ns = TestNamespace::new("churn-breaker").await;
    let (c, n) = (&ns.client, ns.name.as_str());
    create(c, n, secret("cert", json!({"tls.crt": "v0"}))).await;
    create(
        c,
        n,
        deployment(
            "web",
            auto(json!({})),
            pod_spec(env_from_secret("cert"), json!([])),
        ),
    )
    .await;
    let controller = Controller::start(&[
        &format!("--namespaces={n}"),
        "--churn-limit=2",
        "--churn-window=1m",
        "--churn-quiet=4s",
    ])
    .await;
    for i in 1..=8 {
        update_secret(c, n, "cert", json!({"tls.crt": format!("v{i}")})).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let note = wait_for_warning_event(c, n, "Secret", "cert", "ReloadsHeld").await;
    assert!(note.contains("changed 3 times"), "{note}");
    let last = secret_hash(&[("tls.crt", b"v8")]);
    let var = "STAKATER_CERT_SECRET";
    wait_for_env_state(c, n, "web", var, Some(&last), 20).await;
    let rolled = generation(&ns, "web").await - 1;
    // Two changes let through may be written as one (coalesced), never more than two.
    assert!(
        (2..=3).contains(&rolled),
        "at most the limit (2) and once after; rolled {rolled} times"
    );
    let events = events_about(c, n, "Secret", "cert").await;
    assert!(
        events.iter().any(|e| e.reason == "ReloadsReleased"),
        "{events:?}"
    );
    assert_eq!(
        controller
            .metric("kube_reloader_churn_breaker_trips_total")
            .await
            .unwrap_or(0.0),
        1.0
    );
    assert_eq!(
        controller
            .metric("kube_reloader_churn_breakers_open")
            .await
            .unwrap_or(0.0),
        0.0
    );
    assert_eq!(
        controller
            .metric("kube_reloader_churn_breaker_held_changes_total")
            .await
            .unwrap_or(0.0),
        6.0
    );
}
