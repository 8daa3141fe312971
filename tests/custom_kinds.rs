//! Declared custom kinds (`--custom-kind`) against the real API server, with the CRDs their
//! projects publish (Knative Serving's Service, KEDA's ScaledJob; hack/custom-kind-crds.sh).
//! The operators do not run: what is checked is what kube-reloader writes into the objects,
//! and, for restarts by eviction, the pods kube-controller-manager and kwok keep running.
//!
//! Every "not rolled" is checked after a twin that uses the same config was seen to roll for
//! the same change, so a slow controller cannot pass a test.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::ListParams;
use serde_json::{Value, json};

use common::crds;
use common::kwok::Kwok;
use common::objects::*;
use common::{Controller, TestNamespace, wait_for};

const KNATIVE: &str = "serving.knative.dev/v1";
const KEDA: &str = "keda.sh/v1alpha1";
const AUTO: (&str, &str) = ("reloader.stakater.com/auto", "true");
const LAST_RELOADED: &str = "reloader.stakater.com/last-reloaded-from";
const WAIT: Duration = Duration::from_secs(20);

/// A Knative Service whose revision template reads ConfigMap `settings` through `envFrom`; its
/// template has no metadata, as in Knative's own examples.
fn knative_service(name: &str, annotations: Value) -> Value {
    json!({
        "apiVersion": KNATIVE, "kind": "Service",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {"template": {
            "spec": {"containerConcurrency": 10, "containers": [{
                "image": "registry.k8s.io/pause:3.10",
                "envFrom": [{"configMapRef": {"name": "settings"}}]
            }]}
        }}
    })
}

/// A KEDA ScaledJob whose job template reads Secret `queue` through a key ref.
fn scaled_job(name: &str, annotations: Value) -> Value {
    json!({
        "apiVersion": KEDA, "kind": "ScaledJob",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {
            "pollingInterval": 30,
            "triggers": [{"type": "cpu", "metadata": {"value": "50"}}],
            "jobTargetRef": {"parallelism": 1, "template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{
                    "name": "worker", "image": "registry.k8s.io/pause:3.10",
                    "env": [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "queue", "key": "token"}}}]
                }]
            }}}
        }
    })
}

/// In `ns`: ConfigMap `settings` and Knative Service `hello` (`auto`) reading it; the Knative
/// Service CRD installed.
async fn with_knative_hello(ns: &TestNamespace) {
    let c = &ns.client;
    crds::ensure(c, &[crds::KNATIVE_SERVICES]).await;
    create(c, &ns.name, configmap("settings", json!({"mode": "a"}))).await;
    create(
        c,
        &ns.name,
        knative_service("hello", json!({AUTO.0: AUTO.1})),
    )
    .await;
}

async fn read(ns: &TestNamespace, api_version: &str, kind: &str, name: &str) -> Value {
    get(&ns.client, &ns.name, api_version, kind, name)
        .await
        .unwrap_or_else(|| panic!("{kind}/{name} does not exist"))
}

async fn set_configmap(ns: &TestNamespace, name: &str, data: Value) {
    merge_patch(
        &ns.client,
        &ns.name,
        "v1",
        "ConfigMap",
        name,
        json!({"data": data}),
    )
    .await;
}

/// Waits until `pointer` in `kind/name` holds a string and returns it.
async fn wait_string(
    ns: &TestNamespace,
    api: &str,
    kind: &str,
    name: &str,
    pointer: &str,
) -> String {
    wait_for(&format!("{pointer} on {kind}/{name}"), WAIT, || async {
        let object = read(ns, api, kind, name).await;
        match object.pointer(pointer).and_then(Value::as_str) {
            Some(value) => Ok(value.to_string()),
            None => Err(format!("{kind}/{name}: {}", object["spec"])),
        }
    })
    .await
}

fn annotation_pointer(template: &str, key: &str) -> String {
    format!("{template}/metadata/annotations/{}", key.replace('/', "~1"))
}

/// A Knative Service declared to roll by its template annotation: the opted-in one gets
/// Reloader's `last-reloaded-from` annotation in its revision template when the ConfigMap
/// changes (a new Knative revision), its twin without `auto` is left alone, and the reload is
/// reported as for any kind (an Event about the Service).
#[tokio::test]
async fn a_knative_service_rolls_by_its_revision_template_annotation() {
    let ns = TestNamespace::new("custom-knative").await;
    let c = &ns.client;
    with_knative_hello(&ns).await;
    create(c, &ns.name, knative_service("twin", json!({}))).await;
    let _controller = Controller::start(&[
        &format!("--namespaces={}", ns.name),
        "--custom-kind=serving.knative.dev/v1/Service,reload-by=annotations",
    ])
    .await;
    let twin_before = read(&ns, KNATIVE, "Service", "twin").await;

    set_configmap(&ns, "settings", json!({"mode": "b"})).await;
    let pointer = annotation_pointer("/spec/template", LAST_RELOADED);
    let reloaded = wait_string(&ns, KNATIVE, "Service", "hello", &pointer).await;
    let source: Value = serde_json::from_str(&reloaded).expect("last-reloaded-from is JSON");
    assert_eq!(source["type"], "CONFIGMAP", "{reloaded}");
    assert_eq!(source["name"], "settings", "{reloaded}");
    let hello = read(&ns, KNATIVE, "Service", "hello").await;
    let env = hello.pointer("/spec/template/spec/containers/0/env");
    assert!(
        env.is_none(),
        "reload-by=annotations adds no env var: {env:?}"
    );

    let twin_after = read(&ns, KNATIVE, "Service", "twin").await;
    assert_eq!(
        twin_after["spec"], twin_before["spec"],
        "a Service without auto must not be rolled"
    );
    let events = events_about(c, &ns.name, "Service", "hello").await;
    assert!(
        events.iter().any(|e| e.reason == "Reloaded"),
        "a Reloaded Event about the Service: {events:?}"
    );
}

/// A KEDA ScaledJob declared with its template at `spec.jobTargetRef.template` and rolled by
/// env var: the Secret its worker reads changes, the env var lands in that nested template
/// (nowhere else), and the next change of the Secret updates the same var.
#[tokio::test]
async fn a_keda_scaled_job_gets_the_env_var_in_its_nested_job_template() {
    let ns = TestNamespace::new("custom-keda").await;
    let c = &ns.client;
    crds::ensure(c, &[crds::KEDA_SCALED_JOBS]).await;
    create(c, &ns.name, secret("queue", json!({"token": "one"}))).await;
    create(c, &ns.name, scaled_job("worker", json!({AUTO.0: AUTO.1}))).await;
    let _controller = Controller::start(&[
        &format!("--namespaces={}", ns.name),
        "--custom-kind=keda.sh/v1alpha1/ScaledJob,resource=scaledjobs,template=/spec/jobTargetRef/template,reload-by=env-vars",
    ])
    .await;

    let var = "/spec/jobTargetRef/template/spec/containers/0/env";
    let env_value = |object: &Value| {
        object
            .pointer(var)
            .and_then(Value::as_array)
            .and_then(|env| {
                env.iter()
                    .find(|e| e["name"] == "STAKATER_QUEUE_SECRET")
                    .and_then(|e| e["value"].as_str())
                    .map(str::to_string)
            })
    };
    let changed_to = |token: &'static str| {
        merge_patch(
            c,
            &ns.name,
            "v1",
            "Secret",
            "queue",
            json!({"stringData": {"token": token}}),
        )
    };
    changed_to("two").await;
    let first = wait_for(
        "STAKATER_QUEUE_SECRET in the job template",
        WAIT,
        || async {
            let object = read(&ns, KEDA, "ScaledJob", "worker").await;
            env_value(&object).ok_or(format!("{}", object["spec"]))
        },
    )
    .await;
    let object = read(&ns, KEDA, "ScaledJob", "worker").await;
    assert!(
        object.pointer("/spec/template").is_none(),
        "nothing written outside the declared template: {}",
        object["spec"]
    );

    changed_to("three").await;
    let second = wait_for("the var to change with the Secret", WAIT, || async {
        let object = read(&ns, KEDA, "ScaledJob", "worker").await;
        match env_value(&object) {
            Some(v) if v != first => Ok(v),
            other => Err(format!("still {other:?}")),
        }
    })
    .await;
    let env = read(&ns, KEDA, "ScaledJob", "worker")
        .await
        .pointer(var)
        .cloned()
        .unwrap_or_default();
    let ours = env
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["name"] == "STAKATER_QUEUE_SECRET");
    assert_eq!(
        ours.count(),
        1,
        "one var, updated in place ({second}): {env}"
    );
}

/// A Knative Service declared `reload-by=eviction` with its pods found by Knative's label: its
/// pods (kept by a ReplicaSet here, as Knative's Deployment would, on a kwok node) are evicted
/// and replaced, every one once, and the Service's template is never written.
#[tokio::test]
async fn a_declared_kind_restarts_its_pods_by_eviction() {
    let ns = TestNamespace::new("custom-evict").await;
    let c = &ns.client;
    with_knative_hello(&ns).await;
    let kwok = Kwok::start(c, &format!("{}-node", ns.name), &[]).await;
    let label = "serving.knative.dev/service";
    create(
        c,
        &ns.name,
        revision_pods("hello-00001", label, "hello", &kwok.node),
    )
    .await;
    let before = wait_for("2 ready pods of hello", Duration::from_secs(90), || async {
        let pods = ready_pods(&ns, &format!("{label}=hello")).await;
        (pods.len() == 2)
            .then_some(pods.clone())
            .ok_or(format!("{pods:?}"))
    })
    .await;
    let _controller = Controller::start(&[
        &format!("--namespaces={}", ns.name),
        &format!("--pod-namespace={}", ns.name),
        &format!(
            "--custom-kind=serving.knative.dev/v1/Service,reload-by=eviction,pod-label={label}"
        ),
    ])
    .await;
    let template_before = read(&ns, KNATIVE, "Service", "hello").await["spec"]["template"].clone();

    set_configmap(&ns, "settings", json!({"mode": "b"})).await;
    wait_for("both pods replaced", Duration::from_secs(90), || async {
        let now = ready_pods(&ns, &format!("{label}=hello")).await;
        let replaced = now.len() == 2 && now.is_disjoint(&before);
        replaced
            .then_some(())
            .ok_or(format!("before {before:?}, now {now:?}"))
    })
    .await;
    let hello = read(&ns, KNATIVE, "Service", "hello").await;
    assert_eq!(
        hello["spec"]["template"], template_before,
        "a restart by eviction leaves the template alone"
    );
    let record = hello
        .pointer("/metadata/annotations/kube-reloader.io~1restarted-for")
        .and_then(Value::as_str)
        .unwrap_or_default();
    assert!(
        record.contains("settings"),
        "the restart is recorded: {record:?}"
    );
}

/// A ReplicaSet of 2 pods labelled `label=value` on `node`: what Knative's revision Deployment
/// would keep running.
fn revision_pods(name: &str, label: &str, value: &str, node: &str) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": name},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {label: value}},
            "template": {
                "metadata": {"labels": {label: value}},
                "spec": {"nodeName": node, "containers": [{"name": "user-container", "image": "registry.k8s.io/pause:3.10"}]}
            }
        }
    })
}

async fn ready_pods(ns: &TestNamespace, selector: &str) -> BTreeSet<String> {
    let pods: Api<Pod> = Api::namespaced(ns.client.clone(), &ns.name);
    let list = pods
        .list(&ListParams::default().labels(selector))
        .await
        .expect("listing pods");
    list.items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| {
            let conditions = p.status.as_ref().and_then(|s| s.conditions.as_ref());
            conditions.is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        })
        .filter_map(|p| p.metadata.uid)
        .collect()
}

/// A malformed declaration stops the controller at start with what is wrong, before it
/// touches anything.
#[tokio::test]
async fn a_malformed_declaration_is_refused_at_start() {
    let mut controller = Controller::launch(
        &["--custom-kind=serving.knative.dev/v1/Service,template=/metadata/x"],
        &[],
    );
    let status = wait_for("the controller to exit", WAIT, || {
        let exited = controller.exited();
        async move { exited.ok_or("still running".to_string()) }
    })
    .await;
    assert!(!status.success());
    let logs = controller.logs();
    assert!(
        logs.contains("custom-kind") && logs.contains("must be a JSON pointer under /spec"),
        "{logs}"
    );
}

/// `kube-reloader explain` names a declared kind as `<kind>/<name>` (or its plural) once
/// `--custom-kind` declares it, and says what the controller would do: reload it, with the
/// declared strategy.
#[tokio::test]
async fn explain_reads_a_declared_kind() {
    let ns = TestNamespace::new("custom-explain").await;
    with_knative_hello(&ns).await;
    let declaration = "--custom-kind=serving.knative.dev/v1/Service,reload-by=annotations";
    for target in ["service/hello", "services/hello"] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_kube-reloader"))
            .args(["explain", target, "-n", &ns.name, declaration, "-o", "json"])
            .env("KUBECONFIG", common::kubeconfig_path())
            .output()
            .expect("running kube-reloader explain");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{target}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let explained: Value =
            serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"));
        assert_eq!(explained["kind"], "Service", "{stdout}");
        assert_eq!(explained["strategy"], "annotations", "{stdout}");
        let settings = explained["configs"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["name"] == "settings"))
            .unwrap_or_else(|| panic!("ConfigMap settings explained: {stdout}"));
        assert_eq!(settings["reload"], true, "{stdout}");
    }
    let undeclared = std::process::Command::new(env!("CARGO_BIN_EXE_kube-reloader"))
        .args(["explain", "service/hello", "-n", &ns.name])
        .env("KUBECONFIG", common::kubeconfig_path())
        .output()
        .expect("running kube-reloader explain");
    assert!(
        !undeclared.status.success(),
        "an undeclared kind is not a workload"
    );
}
