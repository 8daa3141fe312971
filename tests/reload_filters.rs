//! What the controller looks at: namespaces (`--namespaces`, `KUBERNETES_NAMESPACE`,
//! `--namespace-selector`, `--namespaces-to-ignore`), configs (`--resource-label-selector`,
//! `--resources-to-ignore`), workload types (`--ignored-workload-types`), the annotation keys
//! (override flags), and `--webhook-url` (call instead of rolling).
//!
//! A "not reloaded" is only asserted after a canary, changed by the same kind of event after the
//! filtered one, was seen reloaded. Cluster-wide controllers are narrowed by a namespace label no
//! other test uses, so they never touch other tests' workloads.

mod common;

use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use common::objects::*;
use common::{Controller, TestNamespace};

const VAR: &str = "STAKATER_CFG_CONFIGMAP";

/// A ConfigMap `cfg` and a Deployment `web` with `auto` reading it, in `ns`.
async fn auto_setup(ns: &TestNamespace, labels: Value) {
    create(
        &ns.client,
        &ns.name,
        with_labels(configmap("cfg", json!({"k": "v1"})), labels),
    )
    .await;
    create(
        &ns.client,
        &ns.name,
        auto_deployment("web", json!({}), env_from_configs(&["cfg"], &[])),
    )
    .await;
}

async fn change_cfg(ns: &TestNamespace, value: &str) {
    set_configmap_data(&ns.client, &ns.name, "cfg", json!({ "k": value })).await;
}

async fn wait_cfg_reloaded(ns: &TestNamespace, value: &str) {
    let hash = configmap_hash(&[("k", value)]);
    wait_for_env_state(&ns.client, &ns.name, "web", VAR, Some(&hash), 15).await;
}

async fn cfg_var(ns: &TestNamespace) -> Option<String> {
    deployment_env(&ns.client, &ns.name, "web", VAR).await
}

#[tokio::test]
async fn namespaces_flag_watches_only_the_listed_namespaces() {
    let a = TestNamespace::new("flt-nsl-a").await;
    let b = TestNamespace::new("flt-nsl-b").await;
    let other = TestNamespace::new("flt-nsl-c").await;
    for ns in [&a, &b, &other] {
        auto_setup(ns, json!({})).await;
    }
    let _controller = Controller::start(&[&format!("--namespaces={},{}", a.name, b.name)]).await;

    change_cfg(&other, "v2").await;
    change_cfg(&a, "v2").await;
    change_cfg(&b, "v2").await;
    wait_cfg_reloaded(&a, "v2").await;
    wait_cfg_reloaded(&b, "v2").await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(cfg_var(&other).await, None, "{} is not listed", other.name);
}

#[tokio::test]
async fn kubernetes_namespace_env_is_single_namespace_mode() {
    let mine = TestNamespace::new("flt-kns-a").await;
    let other = TestNamespace::new("flt-kns-b").await;
    for ns in [&mine, &other] {
        auto_setup(ns, json!({})).await;
    }
    let _controller =
        Controller::start_with_env(&[], &[("KUBERNETES_NAMESPACE", &mine.name)]).await;

    change_cfg(&other, "v2").await;
    change_cfg(&mine, "v2").await;
    wait_cfg_reloaded(&mine, "v2").await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(cfg_var(&other).await, None);
}

async fn set_namespace_label(ns: &TestNamespace, key: &str, value: Option<&str>) {
    use k8s_openapi::api::core::v1::Namespace;
    use kube::api::{Api, Patch, PatchParams};
    Api::<Namespace>::all(ns.client.clone())
        .patch(
            &ns.name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": { key: value }}})),
        )
        .await
        .unwrap_or_else(|e| panic!("labelling namespace {}: {e}", ns.name));
}

/// Two namespaces set up as `auto_setup` does, `selected` labelled `key=token` and
/// `unselected` not, and a controller on `--namespace-selector=key=token`.
struct Selection {
    key: &'static str,
    token: String,
    selected: TestNamespace,
    unselected: TestNamespace,
    controller: Controller,
}

async fn selected_and_not(prefix: &str, key: &'static str) -> Selection {
    let token = unique_token(prefix);
    let selected =
        TestNamespace::with_labels(&format!("flt-{prefix}-a"), json!({ key: token })).await;
    let unselected = TestNamespace::new(&format!("flt-{prefix}-b")).await;
    for ns in [&selected, &unselected] {
        auto_setup(ns, json!({})).await;
    }
    let controller = Controller::start(&[&format!("--namespace-selector={key}={token}")]).await;
    Selection {
        key,
        token,
        selected,
        unselected,
        controller,
    }
}

#[tokio::test]
async fn namespace_selector_follows_namespace_labels() {
    let Selection {
        key,
        token,
        selected: a,
        unselected: b,
        controller: _controller,
    } = selected_and_not("sel", "kube-reloader-test/selected").await;

    // One cluster-wide ConfigMap watch: events arrive in the order they were made.
    change_cfg(&b, "v2").await;
    change_cfg(&a, "v2").await;
    wait_cfg_reloaded(&a, "v2").await;
    assert_eq!(cfg_var(&b).await, None, "{} is not selected", b.name);

    // a leaves the selection, then b enters it; once b is watched, a's leaving was seen too
    // (one Namespace watch, in order). A change made once b is labelled is a change.
    set_namespace_label(&a, key, None).await;
    set_namespace_label(&b, key, Some(&token)).await;
    change_cfg(&b, "entered").await;
    wait_cfg_reloaded(&b, "entered").await;

    change_cfg(&a, "v3").await;
    change_cfg(&b, "v3").await;
    wait_cfg_reloaded(&b, "v3").await;
    assert_eq!(
        cfg_var(&a).await,
        Some(configmap_hash(&[("k", "v2")])),
        "{} left the selection",
        a.name
    );
}

/// A config changed in the moment its namespace enters the selection rolls, as in Reloader,
/// which checks the selector at each config event: the controller is stopped while the label
/// and the change are made, so on resuming its config watch may deliver the change before its
/// namespace watch delivers the label (and drop it, the namespace unselected then), and the
/// namespace's list reads the changed config. Its list at the label's resourceVersion tells.
#[tokio::test]
async fn a_config_changed_as_its_namespace_enters_the_selection_rolls() {
    let Selection {
        key,
        token,
        selected: a,
        unselected: b,
        controller,
    } = selected_and_not("ent", "kube-reloader-test/entering").await;
    change_cfg(&a, "v2").await;
    wait_cfg_reloaded(&a, "v2").await;

    controller.signal("STOP");
    set_namespace_label(&b, key, Some(&token)).await;
    change_cfg(&b, "v2").await;
    controller.signal("CONT");
    wait_cfg_reloaded(&b, "v2").await;
}

#[tokio::test]
async fn namespaces_to_ignore_are_never_reloaded() {
    // Both namespaces selected by a unique label (so this controller stays out of other tests'
    // namespaces); one of them ignored.
    let key = "kube-reloader-test/ignore-ns";
    let token = unique_token("ign");
    let ignored = TestNamespace::with_labels("flt-ign-a", json!({ key: token })).await;
    let watched = TestNamespace::with_labels("flt-ign-b", json!({ key: token })).await;
    for ns in [&ignored, &watched] {
        auto_setup(ns, json!({})).await;
    }
    let _controller = Controller::start(&[
        &format!("--namespace-selector={key}={token}"),
        &format!("--namespaces-to-ignore=kube-system,{}", ignored.name),
    ])
    .await;

    // One cluster-wide ConfigMap watch: events arrive in the order they were made.
    change_cfg(&ignored, "v2").await;
    change_cfg(&watched, "v2").await;
    wait_cfg_reloaded(&watched, "v2").await;
    assert_eq!(cfg_var(&ignored).await, None, "{} is ignored", ignored.name);
}

#[tokio::test]
async fn resource_label_selector_lets_only_labelled_configs_trigger() {
    let ns = TestNamespace::new("flt-rls").await;
    let c = &ns.client;
    create(c, &ns.name, configmap("plain", json!({"k": "v1"}))).await;
    create(
        c,
        &ns.name,
        with_labels(
            configmap("labelled", json!({"k": "v1"})),
            json!({"team": "a"}),
        ),
    )
    .await;
    create(c, &ns.name, secret_bytes("plain-secret", &[("k", b"s1")])).await;
    create(
        c,
        &ns.name,
        auto_deployment(
            "web",
            json!({}),
            env_from_configs(&["plain", "labelled"], &["plain-secret"]),
        ),
    )
    .await;
    let _controller = Controller::start(&[
        &format!("--namespaces={}", ns.name),
        "--resource-label-selector=team=a",
    ])
    .await;

    set_secret_data(c, &ns.name, "plain-secret", json!({"k": "s2"})).await;
    set_configmap_data(c, &ns.name, "plain", json!({"k": "v2"})).await;
    set_configmap_data(c, &ns.name, "labelled", json!({"k": "v2"})).await;
    wait_for_env_state(
        c,
        &ns.name,
        "web",
        "STAKATER_LABELLED_CONFIGMAP",
        Some(&configmap_hash(&[("k", "v2")])),
        15,
    )
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        deployment_env(c, &ns.name, "web", "STAKATER_PLAIN_CONFIGMAP").await,
        None
    );
    assert_eq!(
        deployment_env(c, &ns.name, "web", "STAKATER_PLAIN_SECRET_SECRET").await,
        None
    );
}

#[tokio::test]
async fn resources_to_ignore_secrets_rolls_only_for_configmaps() {
    let ns = TestNamespace::new("flt-rti").await;
    let c = &ns.client;
    create(c, &ns.name, configmap("cfg", json!({"k": "v1"}))).await;
    create(c, &ns.name, secret_bytes("sec", &[("k", b"s1")])).await;
    create(
        c,
        &ns.name,
        auto_deployment("web", json!({}), env_from_configs(&["cfg"], &["sec"])),
    )
    .await;
    let _controller = Controller::start(&[
        &format!("--namespaces={}", ns.name),
        "--resources-to-ignore=secrets",
    ])
    .await;

    set_secret_data(c, &ns.name, "sec", json!({"k": "s2"})).await;
    set_configmap_data(c, &ns.name, "cfg", json!({"k": "v2"})).await;
    wait_for_env_state(
        c,
        &ns.name,
        "web",
        VAR,
        Some(&configmap_hash(&[("k", "v2")])),
        15,
    )
    .await;
    // Secrets and ConfigMaps are different watches: wait as long again for a Secret one.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        deployment_env(c, &ns.name, "web", "STAKATER_SEC_SECRET").await,
        None
    );
}

#[tokio::test]
async fn ignored_workload_types_leave_jobs_and_cronjobs_alone() {
    let ns = TestNamespace::new("flt-iwt").await;
    let c = &ns.client;
    let auto = json!({"reloader.stakater.com/auto": "true"});
    let container = env_from_configs(&["cfg"], &[]);
    auto_setup(&ns, json!({})).await;
    create(
        c,
        &ns.name,
        cronjob(
            "nightly",
            auto.clone(),
            pod_spec(container.clone(), json!([])),
        ),
    )
    .await;
    let created_job = create(
        c,
        &ns.name,
        job("batch", auto, pod_spec(container, json!([]))),
    )
    .await;
    let job_uid = created_job.metadata.uid.clone().unwrap();
    let _controller = Controller::start(&[
        &format!("--namespaces={}", ns.name),
        "--ignored-workload-types=jobs,cronjobs",
    ])
    .await;

    change_cfg(&ns, "v2").await;
    wait_cfg_reloaded(&ns, "v2").await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let jobs = api_for(c, &ns.name, "batch/v1", "Job")
        .list(&Default::default())
        .await
        .unwrap();
    let names: Vec<String> = jobs
        .items
        .iter()
        .map(|j| j.metadata.name.clone().unwrap_or_default())
        .collect();
    assert_eq!(names, ["batch"], "no Job created from the CronJob");
    let batch = serde_json::to_value(&jobs.items[0]).unwrap();
    assert_eq!(
        batch["metadata"]["uid"].as_str(),
        Some(job_uid.as_str()),
        "the Job was not re-created"
    );
    assert_eq!(env_value(&batch, "/spec/template", VAR), None);
    let cron = get(c, &ns.name, "batch/v1", "CronJob", "nightly")
        .await
        .unwrap();
    assert_eq!(
        env_value(&cron, "/spec/jobTemplate/spec/template", VAR),
        None
    );
}

#[tokio::test]
async fn annotation_override_flags_replace_the_default_keys() {
    let ns = TestNamespace::new("flt-keys").await;
    let c = &ns.client;
    create(c, &ns.name, configmap("cfg", json!({"k": "v1"}))).await;
    let reads_cfg = || pod_spec(env_from_configs(&["cfg"], &[]), json!([]));
    let reads_nothing = || pod_spec(json!({}), json!([]));
    for (name, annotations, spec) in [
        (
            "custom-auto",
            json!({"example.com/auto": "true"}),
            reads_cfg(),
        ),
        (
            "default-auto",
            json!({"reloader.stakater.com/auto": "true"}),
            reads_cfg(),
        ),
        (
            "custom-list",
            json!({"example.com/cm-reload": "cfg"}),
            reads_nothing(),
        ),
        (
            "default-list",
            json!({"configmap.reloader.stakater.com/reload": "cfg"}),
            reads_nothing(),
        ),
    ] {
        create(c, &ns.name, deployment(name, annotations, spec)).await;
    }
    let _controller = Controller::start(&[
        &format!("--namespaces={}", ns.name),
        "--auto-annotation=example.com/auto",
        "--configmap-annotation=example.com/cm-reload",
    ])
    .await;

    change_cfg(&ns, "v2").await;
    let hash = configmap_hash(&[("k", "v2")]);
    for name in ["custom-auto", "custom-list"] {
        wait_for_env_state(c, &ns.name, name, VAR, Some(&hash), 15).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    for name in ["default-auto", "default-list"] {
        assert_eq!(
            deployment_env(c, &ns.name, name, VAR).await,
            None,
            "{name} uses a default key, which no longer counts"
        );
    }
}

/// Reloader v2's `--configmap-exclude-annotation` (here from its environment variable, as v2
/// reads every flag) replaces the exclude key: a workload excluding the config under the new key
/// is not reloaded, one using the default key is (the default no longer counts).
#[tokio::test]
async fn exclude_annotation_flags_replace_the_default_exclude_key() {
    let ns = TestNamespace::new("flt-exclude-keys").await;
    let c = &ns.client;
    create(c, &ns.name, configmap("cfg", json!({"k": "v1"}))).await;
    let reads_cfg = || env_from_configs(&["cfg"], &[]);
    for (name, annotations) in [
        ("custom-exclude", json!({"example.com/cm-exclude": "cfg"})),
        (
            "default-exclude",
            json!({"configmaps.exclude.reloader.stakater.com/reload": "cfg"}),
        ),
    ] {
        create(c, &ns.name, auto_deployment(name, annotations, reads_cfg())).await;
    }
    let _controller = Controller::start_with_env(
        &[&format!("--namespaces={}", ns.name)],
        &[("CONFIGMAP_EXCLUDE_ANNOTATION", "example.com/cm-exclude")],
    )
    .await;

    change_cfg(&ns, "v2").await;
    let hash = configmap_hash(&[("k", "v2")]);
    // The canary: the same change reached the workload using the default key.
    wait_for_env_state(c, &ns.name, "default-exclude", VAR, Some(&hash), 15).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        deployment_env(c, &ns.name, "custom-exclude", VAR).await,
        None,
        "excluded under the configured key"
    );
}

/// One HTTP request as the test receiver saw it.
#[derive(Debug)]
struct ReceivedRequest {
    request_line: String,
    headers: Vec<(String, String)>,
    body: String,
}

/// A minimal HTTP/1.1 receiver on loopback: every request is parsed, answered 200 and sent on.
async fn start_receiver() -> (u16, tokio::sync::mpsc::UnboundedReceiver<ReceivedRequest>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                return;
            };
            let tx = tx.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                let header_end = loop {
                    let n = stream.read(&mut chunk).await.unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        break i + 4;
                    }
                };
                let head = String::from_utf8_lossy(&buf[..header_end]).to_string();
                let mut lines = head.split("\r\n");
                let request_line = lines.next().unwrap_or_default().to_string();
                let headers: Vec<(String, String)> = lines
                    .filter_map(|l| l.split_once(':'))
                    .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
                    .collect();
                let length: usize = headers
                    .iter()
                    .find(|(k, _)| k == "content-length")
                    .and_then(|(_, v)| v.parse().ok())
                    .unwrap_or(0);
                while buf.len() < header_end + length {
                    let n = stream.read(&mut chunk).await.unwrap_or(0);
                    if n == 0 {
                        break;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                }
                let body = String::from_utf8_lossy(&buf[header_end..]).to_string();
                let _ = stream
                    .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                    .await;
                let _ = tx.send(ReceivedRequest {
                    request_line,
                    headers,
                    body,
                });
            });
        }
    });
    (port, rx)
}

#[tokio::test]
async fn webhook_url_is_called_instead_of_rolling() {
    let ns = TestNamespace::new("flt-hook").await;
    auto_setup(&ns, json!({})).await;
    let (port, mut received) = start_receiver().await;
    let controller = Controller::start(&[
        &format!("--namespaces={}", ns.name),
        &format!("--webhook-url=http://127.0.0.1:{port}/hook"),
    ])
    .await;

    change_cfg(&ns, "v2").await;
    let request = tokio::time::timeout(Duration::from_secs(15), received.recv())
        .await
        .expect("the webhook was not called within 15s")
        .expect("the receiver stopped");
    assert!(
        request.request_line.starts_with("POST /hook "),
        "{request:?}"
    );
    let body: Value = serde_json::from_str(&request.body)
        .unwrap_or_else(|e| panic!("the body is not JSON ({e}): {request:?}"));
    assert_eq!(body, json!({"webhook": "update successful"}));
    assert!(
        request
            .headers
            .iter()
            .any(|(k, v)| k == "content-type" && v.starts_with("application/json")),
        "{request:?}"
    );

    // The call is made where the rollout would have been queued; give a rollout time anyway.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(cfg_var(&ns).await, None, "the webhook replaces the rollout");
    let logs = plain_logs(&controller);
    assert!(
        !logs.contains(&format!("127.0.0.1:{port}")),
        "the webhook URL must not be logged:\n{logs}"
    );
}
