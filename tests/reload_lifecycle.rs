//! The lifecycle of configs and of the controller itself, against the real API server: configs
//! created and deleted (`--reload-on-create`, `--reload-on-delete`, `--sync-after-restart`),
//! changes made while the controller was down, pause periods (also across a restart) and SIGTERM.
//!
//! Every "nothing happened" is checked only after a later event of the same kind, on the same
//! watch, was seen to take effect, so a slow controller cannot make a test pass.

mod common;

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use common::objects::*;
use common::{Controller, TestNamespace, wait_for};

/// `--namespaces=<ns>`: scoped to the test's namespace, so parallel tests do not interfere.
fn scoped(ns: &TestNamespace) -> String {
    format!("--namespaces={}", ns.name)
}

#[tokio::test]
async fn reload_on_create_rolls_when_a_referenced_config_appears() {
    let ns = TestNamespace::new("lc-create").await;
    let c = &ns.client;
    create(
        c,
        &ns.name,
        auto_deployment(
            "web",
            json!({}),
            env_from_configs(&["late"], &["late-secret"]),
        ),
    )
    .await;
    let _controller = Controller::start(&[&scoped(&ns), "--reload-on-create=true"]).await;

    create(c, &ns.name, configmap("late", json!({"k": "v1"}))).await;
    let expected = configmap_hash(&[("k", "v1")]);
    wait_for_env_state(
        c,
        &ns.name,
        "web",
        "STAKATER_LATE_CONFIGMAP",
        Some(&expected),
        15,
    )
    .await;

    create(c, &ns.name, secret_bytes("late-secret", &[("k", b"s1")])).await;
    let expected = secret_hash(&[("k", b"s1")]);
    wait_for_env_state(
        c,
        &ns.name,
        "web",
        "STAKATER_LATE_SECRET_SECRET",
        Some(&expected),
        15,
    )
    .await;
}

#[tokio::test]
async fn by_default_creating_and_deleting_configs_rolls_nothing() {
    let ns = TestNamespace::new("lc-default").await;
    let c = &ns.client;
    create(c, &ns.name, configmap("doomed", json!({"k": "v1"}))).await;
    create(c, &ns.name, configmap("canary", json!({"k": "v1"}))).await;
    create(
        c,
        &ns.name,
        auto_deployment(
            "web",
            json!({}),
            env_from_configs(&["doomed", "later", "canary"], &[]),
        ),
    )
    .await;
    let _controller = Controller::start(&[&scoped(&ns)]).await;

    // An update records a hash for `doomed`, so its deletion would have something to remove.
    set_configmap_data(c, &ns.name, "doomed", json!({"k": "v2"})).await;
    let doomed_hash = configmap_hash(&[("k", "v2")]);
    wait_for_env_state(
        c,
        &ns.name,
        "web",
        "STAKATER_DOOMED_CONFIGMAP",
        Some(&doomed_hash),
        15,
    )
    .await;

    delete_object(c, &ns.name, "v1", "ConfigMap", "doomed").await;
    create(c, &ns.name, configmap("later", json!({"k": "v1"}))).await;
    // The canary: a later event on the same watch, for the same workload. Writes to one workload
    // are coalesced in order, so once it shows, anything queued before it shows too.
    set_configmap_data(c, &ns.name, "canary", json!({"k": "v2"})).await;
    wait_for_env_state(
        c,
        &ns.name,
        "web",
        "STAKATER_CANARY_CONFIGMAP",
        Some(&configmap_hash(&[("k", "v2")])),
        15,
    )
    .await;
    assert_eq!(
        deployment_env(c, &ns.name, "web", "STAKATER_DOOMED_CONFIGMAP").await,
        Some(doomed_hash),
        "a delete must not touch the workload without --reload-on-delete"
    );
    assert_eq!(
        deployment_env(c, &ns.name, "web", "STAKATER_LATER_CONFIGMAP").await,
        None,
        "a create must not roll the workload without --reload-on-create"
    );
}

#[tokio::test]
async fn ignoring_configmaps_keeps_create_and_delete_of_secrets_working() {
    let ns = TestNamespace::new("lc-ign-cm").await;
    let c = &ns.client;
    create(
        c,
        &ns.name,
        auto_deployment("web", json!({}), env_from_configs(&["cm"], &["sec"])),
    )
    .await;
    let _controller = Controller::start(&[
        &scoped(&ns),
        "--reload-on-create=true",
        "--reload-on-delete=true",
        "--resources-to-ignore=configmaps",
    ])
    .await;

    create(c, &ns.name, configmap("cm", json!({"k": "v1"}))).await;
    create(c, &ns.name, secret_bytes("sec", &[("k", b"s1")])).await;
    wait_for_env_state(
        c,
        &ns.name,
        "web",
        "STAKATER_SEC_SECRET",
        Some(&secret_hash(&[("k", b"s1")])),
        15,
    )
    .await;
    // Different watches keep no order between them: give a ConfigMap watch, had there been one,
    // the same time again.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        deployment_env(c, &ns.name, "web", "STAKATER_CM_CONFIGMAP").await,
        None,
        "ConfigMaps are ignored"
    );

    // Carry a ConfigMap var, as if written earlier, to see that its deletion leaves it alone.
    let mut obj = get(c, &ns.name, "apps/v1", "Deployment", "web")
        .await
        .unwrap();
    let env = obj
        .pointer_mut("/spec/template/spec/containers/0/env")
        .and_then(Value::as_array_mut)
        .unwrap();
    env.push(json!({"name": "STAKATER_CM_CONFIGMAP", "value": "recorded"}));
    let env = Value::Array(env.clone());
    merge_patch(
        c,
        &ns.name,
        "apps/v1",
        "Deployment",
        "web",
        json!({"spec": {"template": {"spec": {"containers": [
            {"name": "app", "image": "registry.k8s.io/pause:3.10", "env": env,
             "envFrom": env_from_configs(&["cm"], &["sec"])["envFrom"]}
        ]}}}}),
    )
    .await;
    delete_object(c, &ns.name, "v1", "ConfigMap", "cm").await;
    delete_object(c, &ns.name, "v1", "Secret", "sec").await;
    wait_for_env_state(c, &ns.name, "web", "STAKATER_SEC_SECRET", None, 15).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        deployment_env(c, &ns.name, "web", "STAKATER_CM_CONFIGMAP").await,
        Some("recorded".into()),
        "ConfigMaps are ignored, deletions too"
    );
}

#[tokio::test]
async fn reload_on_delete_removes_the_env_var() {
    let ns = TestNamespace::new("lc-del-env").await;
    let c = &ns.client;
    create(c, &ns.name, configmap("gone", json!({"k": "v1"}))).await;
    create(c, &ns.name, secret_bytes("gone-secret", &[("k", b"s1")])).await;
    create(
        c,
        &ns.name,
        auto_deployment(
            "web",
            json!({}),
            env_from_configs(&["gone"], &["gone-secret"]),
        ),
    )
    .await;
    let _controller = Controller::start(&[&scoped(&ns), "--reload-on-delete=true"]).await;

    set_configmap_data(c, &ns.name, "gone", json!({"k": "v2"})).await;
    set_secret_data(c, &ns.name, "gone-secret", json!({"k": "s2"})).await;
    wait_for_env_state(
        c,
        &ns.name,
        "web",
        "STAKATER_GONE_CONFIGMAP",
        Some(&configmap_hash(&[("k", "v2")])),
        15,
    )
    .await;
    let secret_var = "STAKATER_GONE_SECRET_SECRET";
    let secret_value = secret_hash(&[("k", b"s2")]);
    wait_for_env_state(c, &ns.name, "web", secret_var, Some(&secret_value), 15).await;
    // One Normal Reloaded Event per reload, each naming its own config.
    for needle in [
        "'gone' of type 'CONFIGMAP'",
        "'gone-secret' of type 'SECRET'",
    ] {
        wait_for("a Reloaded Event", Duration::from_secs(10), || async {
            let events = events_about(c, &ns.name, "Deployment", "web").await;
            events
                .iter()
                .find(|e| e.type_ == "Normal" && e.reason == "Reloaded" && e.note.contains(needle))
                .map(|_| ())
                .ok_or_else(|| format!("none mentions {needle}: {events:?}"))
        })
        .await;
    }

    delete_object(c, &ns.name, "v1", "ConfigMap", "gone").await;
    wait_for_env_state(c, &ns.name, "web", "STAKATER_GONE_CONFIGMAP", None, 15).await;
    assert_eq!(
        deployment_env(c, &ns.name, "web", secret_var).await,
        Some(secret_value),
        "only the deleted config's var goes"
    );
    delete_object(c, &ns.name, "v1", "Secret", "gone-secret").await;
    wait_for_env_state(c, &ns.name, "web", secret_var, None, 15).await;
}

#[tokio::test]
async fn reload_on_delete_with_annotations_writes_the_delete_marker_hash() {
    let ns = TestNamespace::new("lc-del-ann").await;
    let c = &ns.client;
    create(c, &ns.name, configmap("gone", json!({"k": "v1"}))).await;
    create(
        c,
        &ns.name,
        auto_deployment("web", json!({}), env_from_configs(&["gone"], &[])),
    )
    .await;
    let _controller = Controller::start(&[
        &scoped(&ns),
        "--reload-strategy=annotations",
        "--reload-on-delete=true",
    ])
    .await;

    let recorded_hash = |expected: String| {
        let (c, ns) = (c.clone(), ns.name.clone());
        move || {
            let (c, ns, expected) = (c.clone(), ns.clone(), expected.clone());
            async move {
                let obj = get(&c, &ns, "apps/v1", "Deployment", "web")
                    .await
                    .ok_or("no Deployment")?;
                match last_reloaded_from(&obj, "/spec/template") {
                    Some(r) if r["hash"] == expected.as_str() => Ok(r),
                    other => Err(format!("last-reloaded-from: {other:?}")),
                }
            }
        }
    };
    set_configmap_data(c, &ns.name, "gone", json!({"k": "v2"})).await;
    wait_for(
        "the change to be recorded",
        Duration::from_secs(15),
        recorded_hash(configmap_hash(&[("k", "v2")])),
    )
    .await;

    delete_object(c, &ns.name, "v1", "ConfigMap", "gone").await;
    let marker = sha1_hex(b"__RELOADER_EMPTY_DELETE_MARKER__");
    let recorded = wait_for(
        "the delete marker's hash",
        Duration::from_secs(15),
        recorded_hash(marker),
    )
    .await;
    assert_eq!(recorded["type"], "CONFIGMAP");
    assert_eq!(recorded["name"], "gone");
    assert_eq!(recorded["namespace"], ns.name.as_str());
    assert_eq!(
        deployment_env(c, &ns.name, "web", "STAKATER_GONE_CONFIGMAP").await,
        None,
        "the annotations strategy writes no env var"
    );
}

#[tokio::test]
async fn sync_after_restart_treats_existing_configs_as_created() {
    let ns = TestNamespace::new("lc-sync").await;
    let c = &ns.client;
    create(c, &ns.name, configmap("cfg", json!({"k": "v1"}))).await;
    create(c, &ns.name, configmap("canary", json!({"k": "v1"}))).await;
    create(c, &ns.name, secret_bytes("sec", &[("k", b"s1")])).await;
    create(
        c,
        &ns.name,
        auto_deployment(
            "web",
            json!({}),
            env_from_configs(&["cfg", "canary"], &["sec"]),
        ),
    )
    .await;
    create(
        c,
        &ns.name,
        deployment(
            "plain",
            json!({}),
            pod_spec(env_from_configs(&["cfg"], &[]), json!([])),
        ),
    )
    .await;

    // --reload-on-create alone: configs found at start are not "created".
    let first = Controller::start(&[&scoped(&ns), "--reload-on-create=true"]).await;
    set_configmap_data(c, &ns.name, "canary", json!({"k": "v2"})).await;
    wait_for_env_state(
        c,
        &ns.name,
        "web",
        "STAKATER_CANARY_CONFIGMAP",
        Some(&configmap_hash(&[("k", "v2")])),
        15,
    )
    .await;
    assert_eq!(
        deployment_env(c, &ns.name, "web", "STAKATER_CFG_CONFIGMAP").await,
        None
    );
    assert!(first.terminate().success());

    let _second = Controller::start(&[
        &scoped(&ns),
        "--reload-on-create=true",
        "--sync-after-restart=true",
    ])
    .await;
    wait_for_env_state(
        c,
        &ns.name,
        "web",
        "STAKATER_CFG_CONFIGMAP",
        Some(&configmap_hash(&[("k", "v1")])),
        15,
    )
    .await;
    wait_for_env_state(
        c,
        &ns.name,
        "web",
        "STAKATER_SEC_SECRET",
        Some(&secret_hash(&[("k", b"s1")])),
        15,
    )
    .await;
    assert_eq!(
        deployment_env(c, &ns.name, "plain", "STAKATER_CFG_CONFIGMAP").await,
        None,
        "not opted in"
    );
}

#[tokio::test]
async fn a_change_made_while_down_is_applied_once_on_start() {
    let ns = TestNamespace::new("lc-down").await;
    let c = &ns.client;
    create(c, &ns.name, configmap("cfg", json!({"k": "v1"}))).await;
    create(
        c,
        &ns.name,
        auto_deployment("tracked", json!({}), env_from_configs(&["cfg"], &[])),
    )
    .await;
    let first = Controller::start(&[&scoped(&ns)]).await;
    set_configmap_data(c, &ns.name, "cfg", json!({"k": "v2"})).await;
    wait_for_env_state(
        c,
        &ns.name,
        "tracked",
        "STAKATER_CFG_CONFIGMAP",
        Some(&configmap_hash(&[("k", "v2")])),
        15,
    )
    .await;
    assert!(first.terminate().success());

    // While nobody watches: the config changes and a workload with no recorded hash appears.
    create(
        c,
        &ns.name,
        auto_deployment("untracked", json!({}), env_from_configs(&["cfg"], &[])),
    )
    .await;
    set_configmap_data(c, &ns.name, "cfg", json!({"k": "v3"})).await;
    let generation = |obj: &Value| obj["metadata"]["generation"].as_i64().unwrap();
    let before = generation(
        &get(c, &ns.name, "apps/v1", "Deployment", "tracked")
            .await
            .unwrap(),
    );

    let _second = Controller::start(&[&scoped(&ns)]).await;
    wait_for_env_state(
        c,
        &ns.name,
        "tracked",
        "STAKATER_CFG_CONFIGMAP",
        Some(&configmap_hash(&[("k", "v3")])),
        15,
    )
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after = generation(
        &get(c, &ns.name, "apps/v1", "Deployment", "tracked")
            .await
            .unwrap(),
    );
    assert_eq!(after, before + 1, "rolled exactly once");
    assert_eq!(
        deployment_env(c, &ns.name, "untracked", "STAKATER_CFG_CONFIGMAP").await,
        None,
        "a workload with no recorded hash is left alone at start"
    );
}

const PAUSE_PERIOD: &str = "deployment.reloader.stakater.com/pause-period";
const PAUSED_AT: &str = "deployment.reloader.stakater.com/paused-at";

/// Waits until the Deployment is paused by the controller; returns `paused-at` (unix seconds).
async fn wait_paused(ns: &TestNamespace, name: &str) -> i64 {
    wait_for(
        "the Deployment to be paused",
        Duration::from_secs(15),
        || async {
            let obj = get(&ns.client, &ns.name, "apps/v1", "Deployment", name)
                .await
                .ok_or("no Deployment")?;
            let paused = obj.pointer("/spec/paused").and_then(Value::as_bool);
            let at = obj["metadata"]["annotations"][PAUSED_AT].as_str();
            match (paused, at) {
                (Some(true), Some(at)) => at
                    .parse::<jiff::Timestamp>()
                    .map(|t| t.as_second())
                    .map_err(|e| format!("paused-at '{at}' is not RFC3339: {e}")),
                _ => Err(format!("spec.paused={paused:?}, paused-at={at:?}")),
            }
        },
    )
    .await
}

/// Waits until the Deployment is resumed; returns when that was seen (unix seconds).
async fn wait_resumed(ns: &TestNamespace, name: &str, secs: u64) -> i64 {
    wait_for(
        "the Deployment to be resumed",
        Duration::from_secs(secs),
        || async {
            let obj = get(&ns.client, &ns.name, "apps/v1", "Deployment", name)
                .await
                .ok_or("no Deployment")?;
            let paused = obj.pointer("/spec/paused").and_then(Value::as_bool);
            let at = obj["metadata"]["annotations"].get(PAUSED_AT).cloned();
            if paused != Some(true) && at.is_none() {
                Ok(jiff::Timestamp::now().as_second())
            } else {
                Err(format!("spec.paused={paused:?}, paused-at={at:?}"))
            }
        },
    )
    .await
}

#[tokio::test]
async fn pause_period_pauses_after_a_reload_then_resumes() {
    let ns = TestNamespace::new("lc-pause").await;
    let c = &ns.client;
    create(c, &ns.name, configmap("cfg", json!({"k": "v1"}))).await;
    create(
        c,
        &ns.name,
        auto_deployment(
            "web",
            json!({ PAUSE_PERIOD: "4s" }),
            env_from_configs(&["cfg"], &[]),
        ),
    )
    .await;
    let _controller = Controller::start(&[&scoped(&ns)]).await;

    set_configmap_data(c, &ns.name, "cfg", json!({"k": "v2"})).await;
    wait_for_env_state(
        c,
        &ns.name,
        "web",
        "STAKATER_CFG_CONFIGMAP",
        Some(&configmap_hash(&[("k", "v2")])),
        15,
    )
    .await;
    let paused_at = wait_paused(&ns, "web").await;
    let now = jiff::Timestamp::now().as_second();
    assert!(
        (now - paused_at).abs() <= 5,
        "paused-at {paused_at} is not about now ({now})"
    );
    let resumed = wait_resumed(&ns, "web", 15).await;
    assert!(
        resumed >= paused_at + 4 - 1,
        "resumed at {resumed}, before the 4s period from {paused_at} ended"
    );
}

#[tokio::test]
async fn a_pause_in_progress_is_resumed_on_time_after_a_restart() {
    let ns = TestNamespace::new("lc-pause-rs").await;
    let c = &ns.client;
    create(c, &ns.name, configmap("cfg", json!({"k": "v1"}))).await;
    create(
        c,
        &ns.name,
        auto_deployment(
            "web",
            json!({ PAUSE_PERIOD: "8s" }),
            env_from_configs(&["cfg"], &[]),
        ),
    )
    .await;
    let first = Controller::start(&[&scoped(&ns)]).await;
    set_configmap_data(c, &ns.name, "cfg", json!({"k": "v2"})).await;
    let paused_at = wait_paused(&ns, "web").await;
    assert!(first.terminate().success());

    let _second = Controller::start(&[&scoped(&ns)]).await;
    let resumed = wait_resumed(&ns, "web", 20).await;
    assert!(
        resumed >= paused_at + 8 - 1,
        "resumed at {resumed}, before the 8s period from {paused_at} ended"
    );
    assert!(
        resumed <= paused_at + 8 + 5,
        "resumed at {resumed}, late for the 8s period from {paused_at}"
    );
}

#[tokio::test]
async fn sigterm_exits_zero_promptly() {
    let ns = TestNamespace::new("lc-sigterm").await;
    let c = &ns.client;
    create(c, &ns.name, configmap("cfg", json!({"k": "v1"}))).await;
    create(
        c,
        &ns.name,
        auto_deployment("web", json!({}), env_from_configs(&["cfg"], &[])),
    )
    .await;
    let controller = Controller::start(&[&scoped(&ns)]).await;
    // It is doing work (a reload went through) when the signal comes.
    set_configmap_data(c, &ns.name, "cfg", json!({"k": "v2"})).await;
    wait_for_env_state(
        c,
        &ns.name,
        "web",
        "STAKATER_CFG_CONFIGMAP",
        Some(&configmap_hash(&[("k", "v2")])),
        15,
    )
    .await;
    let started = Instant::now();
    let status = controller.terminate();
    let took = started.elapsed();
    assert!(status.success(), "exit status {status}");
    assert!(took < Duration::from_secs(3), "took {took:?} to exit");
}
