//! Bad input never stops the controller: bad annotation values are reported (log line and a
//! Warning Event on the workload) and the workload still reloads; missing, huge and vanishing
//! objects are handled; an invalid flag stops the process at start with a message naming it.
//!
//! After each bad input a canary reload proves the controller kept working.

mod common;

use std::time::Duration;

use kube::api::{DeleteParams, Preconditions};
use serde_json::json;

use common::objects::*;
use common::{Controller, TestNamespace, free_port, kubeconfig_path};

fn scoped(ns: &TestNamespace) -> String {
    format!("--namespaces={}", ns.name)
}

/// Deployment `name`'s bad annotation is reported by a log line and a Warning Event.
async fn assert_reported(ns: &TestNamespace, controller: &Controller, name: &str, needle: &str) {
    let note = wait_for_warning_event(
        &ns.client,
        &ns.name,
        "Deployment",
        name,
        "InvalidAnnotation",
    )
    .await;
    assert!(note.contains(needle), "event note: {note}");
    let workload = format!("Deployment/{}/{name}", ns.name);
    wait_for_log_line(controller, &["WARN", "bad annotation", &workload, needle]).await;
}

#[tokio::test]
async fn an_invalid_regex_in_a_reload_list_is_reported_and_skipped() {
    let ns = TestNamespace::new("bad-regex").await;
    let c = &ns.client;
    create(c, &ns.name, configmap("cfg-one", json!({"k": "v1"}))).await;
    create(c, &ns.name, configmap("named", json!({"k": "v1"}))).await;
    create(
        c,
        &ns.name,
        deployment(
            "listed",
            json!({"configmap.reloader.stakater.com/reload": "app-(, cfg-.*, named"}),
            pod_spec(json!({}), json!([])),
        ),
    )
    .await;
    let controller = Controller::start(&[&scoped(&ns)]).await;
    assert_reported(&ns, &controller, "listed", "app-(").await;

    // The valid entries still apply: the regex and the literal.
    set_configmap_data(c, &ns.name, "cfg-one", json!({"k": "v2"})).await;
    set_configmap_data(c, &ns.name, "named", json!({"k": "v2"})).await;
    let hash = configmap_hash(&[("k", "v2")]);
    for var in ["STAKATER_CFG_ONE_CONFIGMAP", "STAKATER_NAMED_CONFIGMAP"] {
        wait_for_env_state(c, &ns.name, "listed", var, Some(&hash), 15).await;
    }
}

#[tokio::test]
async fn an_unparsable_pause_period_is_reported_and_the_reload_still_happens() {
    let ns = TestNamespace::new("bad-pause").await;
    let c = &ns.client;
    create(c, &ns.name, configmap("cfg", json!({"k": "v1"}))).await;
    create(
        c,
        &ns.name,
        auto_deployment(
            "web",
            json!({"deployment.reloader.stakater.com/pause-period": "soon"}),
            env_from_configs(&["cfg"], &[]),
        ),
    )
    .await;
    let controller = Controller::start(&[&scoped(&ns)]).await;
    assert_reported(&ns, &controller, "web", "soon").await;

    set_configmap_data(c, &ns.name, "cfg", json!({"k": "v2"})).await;
    let hash = configmap_hash(&[("k", "v2")]);
    wait_for_env_state(
        c,
        &ns.name,
        "web",
        "STAKATER_CFG_CONFIGMAP",
        Some(&hash),
        15,
    )
    .await;
    let obj = get(c, &ns.name, "apps/v1", "Deployment", "web")
        .await
        .unwrap();
    assert_ne!(
        obj.pointer("/spec/paused"),
        Some(&json!(true)),
        "not paused"
    );
    assert_eq!(
        obj["metadata"]["annotations"].get("deployment.reloader.stakater.com/paused-at"),
        None
    );
}

#[tokio::test]
async fn an_unknown_rollout_strategy_is_reported_and_the_default_applies() {
    let ns = TestNamespace::new("bad-strategy").await;
    let c = &ns.client;
    create(c, &ns.name, configmap("cfg", json!({"k": "v1"}))).await;
    create(
        c,
        &ns.name,
        auto_deployment(
            "web",
            json!({"reloader.stakater.com/rollout-strategy": "sideways"}),
            env_from_configs(&["cfg"], &[]),
        ),
    )
    .await;
    let controller = Controller::start(&[&scoped(&ns)]).await;
    assert_reported(&ns, &controller, "web", "sideways").await;

    set_configmap_data(c, &ns.name, "cfg", json!({"k": "v2"})).await;
    let hash = configmap_hash(&[("k", "v2")]);
    wait_for_env_state(
        c,
        &ns.name,
        "web",
        "STAKATER_CFG_CONFIGMAP",
        Some(&hash),
        15,
    )
    .await;
}

#[tokio::test]
async fn a_workload_referencing_a_missing_config_is_fine_until_it_exists_and_changes() {
    let ns = TestNamespace::new("bad-missing").await;
    let c = &ns.client;
    create(c, &ns.name, configmap("canary", json!({"k": "v1"}))).await;
    create(
        c,
        &ns.name,
        auto_deployment(
            "web",
            json!({}),
            env_from_configs(&["absent", "canary"], &["absent-secret"]),
        ),
    )
    .await;
    let controller = Controller::start(&[&scoped(&ns)]).await;

    // Created with --reload-on-create off: nothing to do, nothing breaks.
    create(c, &ns.name, configmap("absent", json!({"k": "v1"}))).await;
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
        deployment_env(c, &ns.name, "web", "STAKATER_ABSENT_CONFIGMAP").await,
        None
    );

    // Changed: reloaded like any other.
    set_configmap_data(c, &ns.name, "absent", json!({"k": "v2"})).await;
    wait_for_env_state(
        c,
        &ns.name,
        "web",
        "STAKATER_ABSENT_CONFIGMAP",
        Some(&configmap_hash(&[("k", "v2")])),
        15,
    )
    .await;
    let logs = plain_logs(&controller);
    assert!(!logs.contains("panicked"), "{logs}");
}

/// Deterministic, non-UTF-8 filler.
fn pseudo_random_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

#[tokio::test]
async fn a_one_mib_secret_is_reloaded_with_the_right_sha1() {
    const MIB: usize = 1024 * 1024;
    let ns = TestNamespace::new("bad-big").await;
    let c = &ns.client;
    create(
        c,
        &ns.name,
        secret_bytes("big", &[("blob", &pseudo_random_bytes(MIB, 1))]),
    )
    .await;
    let spec = pod_spec(
        json!({"volumeMounts": [{"name": "big", "mountPath": "/big"}]}),
        json!([{"name": "big", "secret": {"secretName": "big"}}]),
    );
    create(
        c,
        &ns.name,
        deployment("web", json!({"reloader.stakater.com/auto": "true"}), spec),
    )
    .await;
    let controller = Controller::start(&[&scoped(&ns)]).await;
    // The 1 MiB Secret came in through a streaming list (objects one by one, not a page at once):
    // the local API server (1.37) serves them, so the probe must have chosen them.
    assert!(
        controller
            .logs()
            .contains("config and workload watches use streaming lists"),
        "the config watches did not use streaming lists:\n{}",
        controller.logs()
    );

    let changed = pseudo_random_bytes(MIB, 2);
    let data = secret_bytes("big", &[("blob", &changed)])["data"].clone();
    merge_patch(c, &ns.name, "v1", "Secret", "big", json!({ "data": data })).await;
    wait_for_env_state(
        c,
        &ns.name,
        "web",
        "STAKATER_BIG_SECRET",
        Some(&secret_hash(&[("blob", &changed)])),
        20,
    )
    .await;
}

#[tokio::test]
async fn a_workload_deleted_while_its_write_is_queued_is_dropped_and_the_others_reload() {
    const WORKLOADS: usize = 8;
    let ns = TestNamespace::new("bad-vanish").await;
    let c = &ns.client;
    create(c, &ns.name, configmap("cfg", json!({"k": "v1"}))).await;
    let names: Vec<String> = (0..WORKLOADS).map(|i| format!("web-{i}")).collect();
    for name in &names {
        create(
            c,
            &ns.name,
            auto_deployment(name, json!({}), env_from_configs(&["cfg"], &[])),
        )
        .await;
    }
    // One write a second: the fan-out to 8 workloads queues for about 8 s.
    let controller = Controller::start(&[
        &scoped(&ns),
        "--max-patches-per-second=1",
        "--patch-burst=1",
    ])
    .await;

    set_configmap_data(c, &ns.name, "cfg", json!({"k": "v2"})).await;
    let hash = configmap_hash(&[("k", "v2")]);
    let var = "STAKATER_CFG_CONFIGMAP";
    // Delete one that is still waiting: the precondition on its resourceVersion makes sure the
    // controller did not write it between our read and the delete.
    let deployments = api_for(c, &ns.name, "apps/v1", "Deployment");
    let mut victim = None;
    for name in &names {
        let Some(obj) = get(c, &ns.name, "apps/v1", "Deployment", name).await else {
            continue;
        };
        if env_value(&obj, "/spec/template", var).is_some() {
            continue;
        }
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                resource_version: obj["metadata"]["resourceVersion"]
                    .as_str()
                    .map(String::from),
                uid: None,
            }),
            ..DeleteParams::background()
        };
        match deployments.delete(name, &params).await {
            Ok(_) => {
                victim = Some(name.clone());
                break;
            }
            Err(kube::Error::Api(s)) if s.code == 409 => continue,
            Err(e) => panic!("deleting {name}: {e}"),
        }
    }
    let victim = victim.expect("every workload was written before one could be deleted");

    for name in names.iter().filter(|n| **n != victim) {
        wait_for_env_state(c, &ns.name, name, var, Some(&hash), 20).await;
    }
    let workload = format!("Deployment/{}/{victim}", ns.name);
    wait_for_log_line(&controller, &["vanished", &workload]).await;
    assert!(
        get(c, &ns.name, "apps/v1", "Deployment", &victim)
            .await
            .is_none(),
        "a dropped write must not re-create the workload"
    );
}

/// Runs the binary with `args`; it must exit non-zero within 10 s. Returns its stderr.
async fn run_to_failure(args: &[&str]) -> String {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_kube-reloader"));
    cmd.args(args)
        .arg(format!("--metrics-addr=127.0.0.1:{}", free_port()))
        .env("KUBECONFIG", kubeconfig_path())
        .env_remove("KUBERNETES_NAMESPACE")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    let child = cmd.spawn().expect("starting kube-reloader");
    let output = tokio::time::timeout(Duration::from_secs(10), child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("kube-reloader {args:?} was still running after 10s"))
        .expect("waiting for kube-reloader");
    let stderr = String::from_utf8_lossy(&output.stderr).to_string();
    assert!(
        !output.status.success(),
        "kube-reloader {args:?} exited with {}; stderr:\n{stderr}",
        output.status
    );
    stderr
}

#[tokio::test]
async fn an_invalid_flag_value_stops_the_process_at_start_naming_the_flag() {
    let cases: [(&[&str], &str); 8] = [
        (&["--reload-strategy=bogus"], "--reload-strategy"),
        (&["--resources-to-ignore=pods"], "--resources-to-ignore"),
        (
            &["--resources-to-ignore=configmaps,secrets"],
            "--resources-to-ignore",
        ),
        (
            &["--ignored-workload-types=deployments"],
            "--ignored-workload-types",
        ),
        (
            &["--namespace-selector=env in (a,b"],
            "--namespace-selector",
        ),
        (&["--min-reload-interval=soon"], "--min-reload-interval"),
        (&["--log-level=loud"], "--log-level"),
        (&["--reload-on-create=maybe"], "--reload-on-create"),
    ];
    for (args, flag) in cases {
        let stderr = run_to_failure(args).await;
        assert!(
            stderr.contains(flag),
            "kube-reloader {args:?}: stderr does not name {flag}:\n{stderr}"
        );
    }
}

#[tokio::test]
async fn the_controller_keeps_working_after_bad_annotations_on_other_workloads() {
    // Every kind of bad value at once on one workload, a clean one next to it: both reload.
    let ns = TestNamespace::new("bad-mixed").await;
    let c = &ns.client;
    create(c, &ns.name, configmap("cfg", json!({"k": "v1"}))).await;
    create(
        c,
        &ns.name,
        auto_deployment(
            "messy",
            json!({
                "configmap.reloader.stakater.com/reload": "[z-a]",
                "secret.reloader.stakater.com/reload": "*",
                "deployment.reloader.stakater.com/pause-period": "-5s",
                "reloader.stakater.com/rollout-strategy": "",
            }),
            env_from_configs(&["cfg"], &[]),
        ),
    )
    .await;
    create(
        c,
        &ns.name,
        auto_deployment("clean", json!({}), env_from_configs(&["cfg"], &[])),
    )
    .await;
    let controller = Controller::start(&[&scoped(&ns)]).await;
    assert_reported(&ns, &controller, "messy", "[z-a]").await;

    set_configmap_data(c, &ns.name, "cfg", json!({"k": "v2"})).await;
    let hash = configmap_hash(&[("k", "v2")]);
    for name in ["clean", "messy"] {
        wait_for_env_state(c, &ns.name, name, "STAKATER_CFG_CONFIGMAP", Some(&hash), 15).await;
    }
    let events = events_about(c, &ns.name, "Deployment", "messy").await;
    let notes: Vec<&str> = events
        .iter()
        .filter(|e| e.reason == "InvalidAnnotation")
        .map(|e| e.note.as_str())
        .collect();
    for needle in ["[z-a]", "'*'", "-5s"] {
        assert!(
            notes.iter().any(|n| n.contains(needle)),
            "no InvalidAnnotation event mentions {needle}: {notes:?}"
        );
    }
}

#[tokio::test]
async fn a_malformed_reload_window_is_reported_and_reloads_run_at_any_time() {
    let ns = TestNamespace::new("bad-window").await;
    let c = &ns.client;
    create(c, &ns.name, configmap("cfg", json!({"k": "v1"}))).await;
    create(
        c,
        &ns.name,
        auto_deployment(
            "web",
            json!({"kube-reloader.io/reload-window": "weekends"}),
            env_from_configs(&["cfg"], &[]),
        ),
    )
    .await;
    let controller = Controller::start(&[&scoped(&ns)]).await;
    assert_reported(&ns, &controller, "web", "weekends").await;

    set_configmap_data(c, &ns.name, "cfg", json!({"k": "v2"})).await;
    let hash = configmap_hash(&[("k", "v2")]);
    let var = "STAKATER_CFG_CONFIGMAP";
    wait_for_env_state(c, &ns.name, "web", var, Some(&hash), 15).await;
}
