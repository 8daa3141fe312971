//! The mutating admission webhook (`--admission-addr`) called by the real API server over TLS
//! on loopback: a workload created or updated is admitted with the current hash of each config
//! it would be reloaded for, and a `helm upgrade` changing a Deployment and its ConfigMap
//! together rolls it once (twice without the webhook, the control).

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine;
use serde_json::{Value, json};

use common::helm::{ClusterScoped, helm, kubectl_admin, run};
use common::objects::*;
use common::{Controller, TestNamespace, free_port, kubeconfig_path, wait_for};

const VAR: &str = "STAKATER_SETTINGS_CONFIGMAP";
/// Longer than `--admission-settle` and a reload's write: what the controller would do, done.
const SETTLED: Duration = Duration::from_secs(6);

/// A self-signed certificate for 127.0.0.1 (its own CA bundle), made by openssl.
struct Certificate {
    dir: PathBuf,
}

impl Certificate {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "kube-reloader-admission-{name}-{}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let out = std::process::Command::new("openssl")
            .args([
                "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
            ])
            .args([
                "-subj",
                "/CN=127.0.0.1",
                "-addext",
                "subjectAltName=IP:127.0.0.1",
            ])
            .arg("-keyout")
            .arg(dir.join("tls.key"))
            .arg("-out")
            .arg(dir.join("tls.crt"))
            .output()
            .expect("openssl makes the webhook's certificate (the test needs the openssl CLI)");
        assert!(
            out.status.success(),
            "openssl: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Certificate { dir }
    }

    fn cert(&self) -> PathBuf {
        self.dir.join("tls.crt")
    }

    fn key(&self) -> PathBuf {
        self.dir.join("tls.key")
    }

    fn ca_bundle(&self) -> String {
        base64::engine::general_purpose::STANDARD.encode(std::fs::read(self.cert()).unwrap())
    }
}

/// Registers the webhook at `port` for Deployments in `ns` (and `also`) only: other tests
/// share the API server. As the chart does: `failurePolicy: Ignore`, no side effects.
fn register(ns: &TestNamespace, port: u16, cert: &Certificate) -> ClusterScoped {
    register_for(ns, &[], port, cert)
}

fn register_for(
    ns: &TestNamespace,
    also: &[&TestNamespace],
    port: u16,
    cert: &Certificate,
) -> ClusterScoped {
    let namespaces: Vec<&str> = std::iter::once(ns)
        .chain(also.iter().copied())
        .map(|n| n.name.as_str())
        .collect();
    let name = format!("kube-reloader-test-{}", ns.name);
    let config = json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [{
            "name": "workloads.kube-reloader.io",
            "clientConfig": {"url": format!("https://127.0.0.1:{port}/mutate"), "caBundle": cert.ca_bundle()},
            "rules": [{"apiGroups": ["apps"], "apiVersions": ["v1"], "resources": ["deployments"],
                       "operations": ["CREATE", "UPDATE"], "scope": "Namespaced"}],
            "namespaceSelector": {"matchExpressions": [
                {"key": "kubernetes.io/metadata.name", "operator": "In", "values": namespaces}]},
            "failurePolicy": "Ignore", "sideEffects": "None", "admissionReviewVersions": ["v1"],
            "timeoutSeconds": 5, "reinvocationPolicy": "IfNeeded"
        }]
    });
    let out = kubectl_admin(&["apply", "-f", "-"], Some(&config.to_string()));
    assert!(out.ok, "registering the webhook: {}", out.stderr);
    ClusterScoped(vec![("MutatingWebhookConfiguration".into(), name)])
}

async fn start_with_webhook(ns: &TestNamespace, cert: &Certificate) -> (Controller, u16) {
    let port = free_port();
    let controller = Controller::start(&[
        &format!("--namespaces={}", ns.name),
        // Halts and held reloads kept in this namespace (the settle time's are not).
        &format!("--pod-namespace={}", ns.name),
        &format!("--admission-addr=127.0.0.1:{port}"),
        &format!("--admission-cert-file={}", cert.cert().display()),
        &format!("--admission-key-file={}", cert.key().display()),
    ])
    .await;
    (controller, port)
}

fn env_var(deployment: &Value) -> Option<String> {
    let env = deployment
        .pointer("/spec/template/spec/containers/0/env")?
        .as_array()?;
    let var = env.iter().find(|e| e["name"] == VAR)?;
    Some(var["value"].as_str()?.to_string())
}

async fn deployment_now(ns: &TestNamespace, name: &str) -> Value {
    get(&ns.client, &ns.name, "apps/v1", "Deployment", name)
        .await
        .unwrap_or_else(|| panic!("Deployment {name} does not exist"))
}

/// Waits until the API server calls the webhook for this namespace: a probe Deployment is
/// created (and deleted) until it comes back with the hash (registration takes effect within
/// a second or so).
async fn wait_webhook_called(ns: &TestNamespace) {
    wait_for(
        "the API server to call the webhook",
        Duration::from_secs(20),
        || async {
            let name = format!("probe-{}", rand_suffix());
            let probe = deployment(
                &name,
                json!({"reloader.stakater.com/auto": "true"}),
                pod_spec(env_from_configmap("settings"), json!([])),
            );
            let created = create(&ns.client, &ns.name, probe).await;
            let value = serde_json::to_value(created).unwrap();
            let _ = kubectl_admin(
                &[
                    "-n",
                    &ns.name,
                    "delete",
                    "deployment",
                    &name,
                    "--wait=false",
                ],
                None,
            );
            env_var(&value)
                .map(|_| ())
                .ok_or("admitted without the hash".to_string())
        },
    )
    .await;
}

fn rand_suffix() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!("{nanos:x}")
}

/// A Deployment created after its ConfigMap is admitted with the ConfigMap's current hash (no
/// rollout needed later); one whose annotations do not opt in, or in a namespace the
/// controller does not watch, is admitted unchanged.
#[tokio::test]
async fn a_created_workload_is_admitted_with_the_current_hash() {
    let ns = TestNamespace::new("admission-create").await;
    let other = TestNamespace::new("admission-unwatched").await;
    let c = &ns.client;
    let cert = Certificate::new("create");
    create(c, &ns.name, configmap("settings", json!({"mode": "a"}))).await;
    create(c, &other.name, configmap("settings", json!({"mode": "a"}))).await;
    let (_controller, port) = start_with_webhook(&ns, &cert).await;
    let _registered = register_for(&ns, &[&other], port, &cert);
    wait_webhook_called(&ns).await;

    let uses = || pod_spec(env_from_configmap("settings"), json!([]));
    let web = create(
        c,
        &ns.name,
        deployment("web", json!({"reloader.stakater.com/auto": "true"}), uses()),
    )
    .await;
    let web = serde_json::to_value(web).unwrap();
    assert_eq!(
        env_var(&web),
        Some(configmap_hash(&[("mode", "a")])),
        "{}",
        web["spec"]
    );
    assert_eq!(web["metadata"]["generation"], 1);

    let plain = create(c, &ns.name, deployment("plain", json!({}), uses())).await;
    let plain = serde_json::to_value(plain).unwrap();
    assert_eq!(env_var(&plain), None, "not opted in: admitted unchanged");

    let unwatched = create(
        c,
        &other.name,
        deployment("web", json!({"reloader.stakater.com/auto": "true"}), uses()),
    )
    .await;
    let unwatched = serde_json::to_value(unwatched).unwrap();
    assert_eq!(
        env_var(&unwatched),
        None,
        "outside --namespaces: admitted unchanged"
    );
}

/// The chart of a release with a ConfigMap and a Deployment that reads it; the upgrade changes
/// both (the data and the image tag), as a `helm upgrade` of a new version does.
fn release_chart(dir: &Path) {
    std::fs::create_dir_all(dir.join("templates")).unwrap();
    std::fs::write(
        dir.join("Chart.yaml"),
        "apiVersion: v2\nname: shop\nversion: 0.1.0\n",
    )
    .unwrap();
    std::fs::write(dir.join("values.yaml"), "mode: a\ntag: \"3.9\"\n").unwrap();
    std::fs::write(
        dir.join("templates/app.yaml"),
        r#"apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
data:
  mode: {{ .Values.mode | quote }}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: shop
  annotations:
    reloader.stakater.com/auto: "true"
spec:
  replicas: 0
  selector:
    matchLabels: {app: shop}
  template:
    metadata:
      labels: {app: shop}
    spec:
      containers:
        - name: app
          image: registry.k8s.io/pause:{{ .Values.tag }}
          envFrom:
            - configMapRef: {name: settings}
"#,
    )
    .unwrap();
}

fn helm_release(ns: &TestNamespace, chart: &Path, verb: &str, set: &[&str]) {
    let kubeconfig = kubeconfig_path().to_str().unwrap().to_string();
    let chart = chart.to_str().unwrap().to_string();
    let mut args = vec![
        verb,
        "shop",
        chart.as_str(),
        "-n",
        ns.name.as_str(),
        "--kubeconfig",
        kubeconfig.as_str(),
    ];
    for s in set {
        args.extend_from_slice(&["--set", s]);
    }
    let out = run(helm(), &args, None);
    assert!(out.ok, "helm {verb}: {}", out.stderr);
}

/// How many times the release's Deployment rolled (its template changed) after an upgrade of
/// the Deployment and its ConfigMap together, and the hash its template ends with.
async fn rollouts_of_an_upgrade(ns: &TestNamespace) -> (i64, Option<String>) {
    let chart = std::env::temp_dir().join(format!("kube-reloader-chart-{}", ns.name));
    release_chart(&chart);
    helm_release(ns, &chart, "install", &[]);
    tokio::time::sleep(SETTLED).await;
    let installed = deployment_now(ns, "shop").await;
    let before = installed["metadata"]["generation"].as_i64().unwrap();
    helm_release(ns, &chart, "upgrade", &["mode=b", "tag=3.10"]);
    tokio::time::sleep(SETTLED).await;
    let upgraded = deployment_now(ns, "shop").await;
    let _ = std::fs::remove_dir_all(&chart);
    let after = upgraded["metadata"]["generation"].as_i64().unwrap();
    (after - before, env_var(&upgraded))
}

/// `helm upgrade` changing a Deployment and its ConfigMap together: with the webhook the
/// Deployment rolls once, already carrying the new ConfigMap's hash, and the controller's reload
/// finds nothing to write; without it (the control, same chart and controller otherwise) it
/// rolls twice.
#[tokio::test]
async fn one_helm_upgrade_of_a_workload_and_its_config_rolls_it_once() {
    let new_hash = configmap_hash(&[("mode", "b")]);

    let ns = TestNamespace::new("admission-upgrade").await;
    let cert = Certificate::new("upgrade");
    let (controller, port) = start_with_webhook(&ns, &cert).await;
    let _registered = register(&ns, port, &cert);
    create(
        &ns.client,
        &ns.name,
        configmap("settings", json!({"mode": "a"})),
    )
    .await;
    wait_webhook_called(&ns).await;
    let _ = kubectl_admin(&["-n", &ns.name, "delete", "configmap", "settings"], None);
    let (rollouts, hash) = rollouts_of_an_upgrade(&ns).await;
    assert_eq!(
        hash.as_deref(),
        Some(new_hash.as_str()),
        "{}",
        controller.logs()
    );
    assert_eq!(rollouts, 1, "with the webhook, one rollout per upgrade");
    assert!(
        controller
            .logs()
            .contains("reload settling for the admission webhook"),
        "the reload waited the settle time"
    );
    // Nothing was written to the halts ConfigMap (its first write creates it).
    let halts = get(
        &ns.client,
        &ns.name,
        "v1",
        "ConfigMap",
        "kube-reloader-halts",
    )
    .await;
    assert!(
        halts.is_none(),
        "a settling reload is not kept in the cluster: {halts:?}"
    );

    let control = TestNamespace::new("admission-control").await;
    let _controller = Controller::start(&[&format!("--namespaces={}", control.name)]).await;
    let (rollouts, hash) = rollouts_of_an_upgrade(&control).await;
    assert_eq!(hash.as_deref(), Some(new_hash.as_str()));
    assert_eq!(
        rollouts, 2,
        "without the webhook: the upgrade's rollout and the reload's"
    );
}

/// Creates Deployment `name` reading `settings` and returns it as admitted, with how long the
/// API server took.
async fn create_timed(ns: &TestNamespace, name: &str) -> (Value, Duration) {
    let started = std::time::Instant::now();
    let created = create(
        &ns.client,
        &ns.name,
        deployment(
            name,
            json!({"reloader.stakater.com/auto": "true"}),
            pod_spec(env_from_configmap("settings"), json!([])),
        ),
    )
    .await;
    (serde_json::to_value(created).unwrap(), started.elapsed())
}

/// A webhook the API server cannot reach (a broken Service: nothing listens) or that hangs (its
/// process stopped) never blocks a write (`failurePolicy: Ignore`): the workload is admitted
/// unchanged, at once or after the call's timeout, and the controller's reload rolls it as
/// without the webhook, so nothing is lost but the saved rollout.
#[tokio::test]
async fn a_webhook_down_or_hanging_blocks_no_write_and_loses_no_reload() {
    let ns = TestNamespace::new("admission-down").await;
    let c = &ns.client;
    let cert = Certificate::new("down");
    create(c, &ns.name, configmap("settings", json!({"mode": "a"}))).await;
    let (controller, port) = start_with_webhook(&ns, &cert).await;
    let nobody = free_port();
    let registered = register(&ns, nobody, &cert);

    let (web, took) = create_timed(&ns, "web").await;
    assert_eq!(env_var(&web), None, "unreachable: admitted unchanged");
    assert!(took < Duration::from_secs(5), "refused at once: {took:?}");
    set_configmap_data(c, &ns.name, "settings", json!({"mode": "b"})).await;
    let hash = configmap_hash(&[("mode", "b")]);
    wait_for_deployment_env(c, &ns.name, "web", VAR, &hash).await;
    drop(registered);

    // The controller's own webhook, its process stopped: the call times out (5 s here), the
    // write goes on; once the process runs again it rolls the Deployment for the next change.
    let _registered = register(&ns, port, &cert);
    wait_webhook_called(&ns).await;
    controller.signal("STOP");
    let (hung, took) = create_timed(&ns, "hung").await;
    controller.signal("CONT");
    assert_eq!(env_var(&hung), None, "timed out: admitted unchanged");
    assert!(
        took >= Duration::from_secs(4) && took < Duration::from_secs(15),
        "the call's timeout, not longer: {took:?}"
    );
    set_configmap_data(c, &ns.name, "settings", json!({"mode": "c"})).await;
    let hash = configmap_hash(&[("mode", "c")]);
    wait_for_deployment_env(c, &ns.name, "hung", VAR, &hash).await;
    wait_for_deployment_env(c, &ns.name, "web", VAR, &hash).await;
}
