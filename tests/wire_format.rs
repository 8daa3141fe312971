//! The wire format of lists and watches (`--wire-format`, issue 42) against the real API
//! server, through the fault proxy (which sees what each request asked for): in protobuf and in
//! JSON every built-in kind reloads the same; a server that refuses protobuf for a resource is
//! read in JSON under `auto` and is an error, not a silent JSON, under `protobuf`.

mod common;

use std::time::Duration;

use serde_json::json;

use common::fault_proxy::FaultProxy;
use common::objects::*;
use common::{Controller, TestNamespace, wait_for};

/// A Deployment, a StatefulSet and a DaemonSet, each using a ConfigMap and a Secret (a
/// CronJob's reload is a Job made from it: `tests/reload_kinds.rs`, which runs in protobuf).
async fn workloads(ns: &TestNamespace) {
    let c = &ns.client;
    create(c, &ns.name, configmap("app-config", json!({"k": "v1"}))).await;
    create(c, &ns.name, secret("app-secret", json!({"s": "v1"}))).await;
    let spec = || {
        pod_spec(
            env_from_configs(&["app-config"], &["app-secret"]),
            json!([]),
        )
    };
    let auto = json!({"reloader.stakater.com/auto": "true"});
    create(c, &ns.name, deployment("web", auto.clone(), spec())).await;
    create(c, &ns.name, statefulset("db", auto.clone(), spec())).await;
    create(c, &ns.name, daemonset("agent", auto, spec())).await;
}

/// (api version, kind, name, template pointer) of each workload.
const WORKLOADS: [(&str, &str, &str, &str); 3] = [
    ("apps/v1", "Deployment", "web", "/spec/template"),
    ("apps/v1", "StatefulSet", "db", "/spec/template"),
    ("apps/v1", "DaemonSet", "agent", "/spec/template"),
];

async fn wait_for_every_workload(ns: &TestNamespace, var: &str, expected: &str) {
    for (api_version, kind, name, pointer) in WORKLOADS {
        wait_for(
            &format!("{kind} {name} to carry {var}={expected}"),
            Duration::from_secs(20),
            || async {
                let obj = get(&ns.client, &ns.name, api_version, kind, name).await;
                let value = env_value(&serde_json::to_value(&obj).unwrap(), pointer, var);
                match value.as_deref() == Some(expected) {
                    true => Ok(()),
                    false => Err(format!("{var}={value:?}")),
                }
            },
        )
        .await;
    }
}

/// Changes the ConfigMap and the Secret; every workload must carry both new hashes.
async fn change_both_and_see_every_kind_reload(ns: &TestNamespace) {
    set_configmap_data(&ns.client, &ns.name, "app-config", json!({"k": "v2"})).await;
    let cm_hash = configmap_hash(&[("k", "v2")]);
    wait_for_every_workload(ns, "STAKATER_APP_CONFIG_CONFIGMAP", &cm_hash).await;
    set_secret_data(&ns.client, &ns.name, "app-secret", json!({"s": "v2"})).await;
    let secret_hash = secret_hash(&[("s", b"v2")]);
    wait_for_every_workload(ns, "STAKATER_APP_SECRET_SECRET", &secret_hash).await;
}

fn wire_format_metric(format: &str, resource: &str) -> String {
    format!("kube_reloader_wire_format{{resource=\"{resource}\",format=\"{format}\"}}")
}

const RESOURCES: [(&str, &str); 5] = [
    ("configmap", "configmaps"),
    ("secret", "secrets"),
    ("Deployment", "deployments"),
    ("StatefulSet", "statefulsets"),
    ("DaemonSet", "daemonsets"),
];

async fn reloads_in(format: &str) {
    let ns = TestNamespace::new(&format!("wire-{format}")).await;
    workloads(&ns).await;
    let proxy = FaultProxy::start().await;
    let kubeconfig = proxy.kubeconfig().to_str().unwrap().to_string();
    let (scope, flag) = (
        format!("--namespaces={}", ns.name),
        format!("--wire-format={format}"),
    );
    let controller =
        Controller::start_with_env(&[&scope, &flag], &[("KUBECONFIG", kubeconfig.as_str())]).await;
    change_both_and_see_every_kind_reload(&ns).await;

    let protobuf = format == "auto";
    let read_in = if protobuf { "protobuf" } else { "json" };
    let asked = proxy.formats_asked();
    for (label, resource) in RESOURCES {
        let series = wire_format_metric(read_in, label);
        assert_eq!(controller.metric(&series).await, Some(1.0), "{series}");
        assert!(
            asked.contains(&(resource.to_string(), protobuf)),
            "{resource}: no request asked for {read_in}: {asked:?}"
        );
        assert!(
            !asked.contains(&(resource.to_string(), !protobuf)),
            "{resource}: a request asked for the other format: {asked:?}"
        );
    }
    let url = format!(
        "http://127.0.0.1:{}/debug/explain?kind=Deployment&namespace={}&name=web",
        controller.metrics_port, ns.name
    );
    let (code, body) = common::http_get(&url).await.unwrap();
    assert_eq!(code, 200, "{body}");
    let answer: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(answer["wireFormats"]["configmap"], read_in, "{body}");
    assert_eq!(answer["wireFormats"]["Deployment"], read_in, "{body}");
}

#[tokio::test]
async fn in_protobuf_every_built_in_kind_reloads_and_explain_and_the_metric_say_so() {
    reloads_in("auto").await;
}

#[tokio::test]
async fn in_json_every_built_in_kind_reloads_and_nothing_asks_for_protobuf() {
    reloads_in("json").await;
}

/// A namespace holding [`workloads`], behind a fault proxy that refuses protobuf for ConfigMaps.
struct Refusing {
    ns: TestNamespace,
    proxy: FaultProxy,
    /// `--namespaces=<ns>`.
    scope: String,
    /// The proxy's kubeconfig, for the controller's `KUBECONFIG`.
    kubeconfig: String,
}

async fn refusing_configmaps(prefix: &str) -> Refusing {
    let ns = TestNamespace::new(prefix).await;
    workloads(&ns).await;
    let proxy = FaultProxy::start().await;
    proxy.refuse_protobuf("configmaps");
    Refusing {
        scope: format!("--namespaces={}", ns.name),
        kubeconfig: proxy.kubeconfig().to_str().unwrap().to_string(),
        ns,
        proxy,
    }
}

#[tokio::test]
async fn a_server_refusing_protobuf_for_configmaps_is_read_in_json_for_them_only() {
    let Refusing {
        ns,
        proxy,
        scope,
        kubeconfig,
    } = refusing_configmaps("wire-refused").await;
    let controller =
        Controller::start_with_env(&[&scope], &[("KUBECONFIG", kubeconfig.as_str())]).await;
    change_both_and_see_every_kind_reload(&ns).await;
    let json = controller
        .metric(&wire_format_metric("json", "configmap"))
        .await;
    assert_eq!(json, Some(1.0));
    let protobuf = controller
        .metric(&wire_format_metric("protobuf", "Deployment"))
        .await;
    assert_eq!(protobuf, Some(1.0));
    wait_for_log_line(
        &controller,
        &["does not serve this resource in protobuf", "406"],
    )
    .await;
    let asked = proxy.formats_asked();
    assert!(
        asked.contains(&("configmaps".to_string(), false)),
        "{asked:?}"
    );
}

#[tokio::test]
async fn insisting_on_protobuf_against_a_refusal_is_an_error_not_a_silent_json() {
    let Refusing {
        ns: _ns,
        proxy,
        scope,
        kubeconfig,
    } = refusing_configmaps("wire-strict").await;
    let controller = Controller::launch(
        &[&scope, "--wire-format=protobuf"],
        &[("KUBECONFIG", kubeconfig.as_str())],
    );
    wait_for_log_line(&controller, &["watch failed", "configmap", "406"]).await;
    let restarts = "kube_reloader_watch_restarts_total{resource=\"configmap\"}";
    wait_for(
        "the refused watch counted",
        Duration::from_secs(15),
        || async {
            match controller.metric(restarts).await {
                Some(n) if n >= 1.0 => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    let ready = format!("http://127.0.0.1:{}/ready", controller.metrics_port);
    let (code, _) = common::http_get(&ready).await.unwrap();
    assert_ne!(code, 200, "ready without its ConfigMaps");
    let asked = proxy.formats_asked();
    assert!(
        !asked.contains(&("configmaps".to_string(), false)),
        "{asked:?}"
    );
}

/// What the controller asked for in `ns`'s LISTs: every one of `resources` (built-in kinds) in
/// protobuf and never in JSON. Custom resources (DeploymentConfigs, Rollouts, when another test
/// installed their CRDs) are listed in JSON, as the API server requires.
fn assert_listed_in_protobuf(proxy: &FaultProxy, ns: &str, resources: &[&str]) {
    let lists = proxy.lists_in(ns);
    for resource in resources {
        assert!(
            lists.contains(&(resource.to_string(), true)),
            "{resource}: not listed in protobuf in {ns}: {lists:?}"
        );
        assert!(
            !lists.contains(&(resource.to_string(), false)),
            "{resource}: listed in JSON in {ns}: {lists:?}"
        );
    }
}

/// A namespace that enters the selection is backfilled by LISTs in that namespace, in protobuf
/// like the watches (a hand-over lists the same way, across the gained hash ranges).
#[tokio::test]
async fn a_namespace_entering_the_selection_is_backfilled_in_protobuf() {
    let (proxy, ns) = backfilled("wire-enter", None).await;
    let resources = [
        "configmaps",
        "secrets",
        "deployments",
        "statefulsets",
        "daemonsets",
    ];
    assert_listed_in_protobuf(&proxy, &ns.name, &resources);
}

/// The backfill of a resource the server refuses in protobuf is listed in JSON, the others
/// still in protobuf.
#[tokio::test]
async fn a_backfill_refused_protobuf_for_configmaps_lists_them_in_json() {
    let (proxy, ns) = backfilled("wire-enter-refused", Some("configmaps")).await;
    let lists = proxy.lists_in(&ns.name);
    assert!(
        lists.contains(&("configmaps".to_string(), false)),
        "{lists:?}"
    );
    assert!(lists.contains(&("secrets".to_string(), true)), "{lists:?}");
    assert!(
        lists.contains(&("deployments".to_string(), true)),
        "{lists:?}"
    );
}

/// A controller selecting namespaces by label, then a namespace holding [`workloads`] labelled
/// into the selection: once its backfill listed it, both its configs change and every kind
/// reloads. `refused`: the resource the proxy refuses protobuf for.
async fn backfilled(prefix: &str, refused: Option<&'static str>) -> (FaultProxy, TestNamespace) {
    let selector = unique_token(prefix);
    let proxy = FaultProxy::start().await;
    if let Some(resource) = refused {
        proxy.refuse_protobuf(resource);
    }
    let kubeconfig = proxy.kubeconfig().to_str().unwrap().to_string();
    let flag = format!("--namespace-selector=kube-reloader-wire={selector}");
    let controller =
        Controller::start_with_env(&[&flag], &[("KUBECONFIG", kubeconfig.as_str())]).await;
    let ns = TestNamespace::new(prefix).await;
    workloads(&ns).await;
    label_namespace(&ns, &selector).await;
    wait_for("the backfill's LISTs", Duration::from_secs(30), || async {
        let lists = proxy.lists_in(&ns.name);
        match lists.iter().any(|(resource, _)| resource == "secrets") {
            true => Ok(()),
            false => Err(format!("{lists:?}")),
        }
    })
    .await;
    change_both_and_see_every_kind_reload(&ns).await;
    drop(controller);
    (proxy, ns)
}

/// Workloads found by LIST (`--list-workloads`, the fallback without watch permission) are
/// listed in protobuf: in full at start, and in a config's namespace before each change.
#[tokio::test]
async fn listed_workloads_are_listed_in_protobuf() {
    let ns = TestNamespace::new("wire-listed").await;
    workloads(&ns).await;
    let proxy = FaultProxy::start().await;
    let kubeconfig = proxy.kubeconfig().to_str().unwrap().to_string();
    let scope = format!("--namespaces={}", ns.name);
    let _controller = Controller::start_with_env(
        &[&scope, "--list-workloads"],
        &[("KUBECONFIG", kubeconfig.as_str())],
    )
    .await;
    change_both_and_see_every_kind_reload(&ns).await;
    assert_listed_in_protobuf(
        &proxy,
        &ns.name,
        &["deployments", "statefulsets", "daemonsets"],
    );
}

/// A namespace entering the selection is backfilled with one streaming list per watched kind,
/// but a workload kind found by LIST (`--list-workloads`, as for an identity that may list it
/// and not watch it) in pages: a streaming list is a watch.
#[tokio::test]
async fn a_listed_workload_kind_is_backfilled_in_pages_the_watched_configs_streamed() {
    let selector = unique_token("wire-enter-listed");
    let proxy = FaultProxy::start().await;
    let kubeconfig = proxy.kubeconfig().to_str().unwrap().to_string();
    let flag = format!("--namespace-selector=kube-reloader-wire={selector}");
    let _controller = Controller::start_with_env(
        &[&flag, "--list-workloads"],
        &[("KUBECONFIG", kubeconfig.as_str())],
    )
    .await;
    let ns = TestNamespace::new("wire-enter-listed").await;
    workloads(&ns).await;
    label_namespace(&ns, &selector).await;
    // As in `backfilled`: a change counts once the backfill listed the namespace (before,
    // the list reads the changed config as the state the namespace enters with).
    wait_for(
        "the configs' backfill, streamed",
        Duration::from_secs(30),
        || async {
            let streamed = proxy.streamed_in(&ns.name);
            match streamed.contains("configmaps") && streamed.contains("secrets") {
                true => Ok(()),
                false => Err(format!("{streamed:?}")),
            }
        },
    )
    .await;
    change_both_and_see_every_kind_reload(&ns).await;
    let streamed = proxy.streamed_in(&ns.name);
    for kind in ["deployments", "statefulsets", "daemonsets"] {
        assert!(!streamed.contains(kind), "{kind} streamed: {streamed:?}");
    }
}

async fn label_namespace(ns: &TestNamespace, selector: &str) {
    use k8s_openapi::api::core::v1::Namespace;
    use kube::api::{Api, Patch, PatchParams};
    let labels = json!({"metadata": {"labels": {"kube-reloader-wire": selector}}});
    Api::<Namespace>::all(ns.client.clone())
        .patch(&ns.name, &PatchParams::default(), &Patch::Merge(&labels))
        .await
        .expect("labelling the namespace");
}
