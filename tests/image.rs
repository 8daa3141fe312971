//! The container image, run for real with podman (hack/podman.sh) as a restricted pod would run
//! it: read-only root file system, user 65534, no capabilities, host network, the chart's default
//! args and env, in-cluster configuration (service host/port, a TokenRequest token of the chart's
//! ServiceAccount and the cluster CA mounted where a pod has them). It must answer /live and
//! /ready, reload a workload, count it in its metrics, and leave its file system untouched.
//!
//! The image: `KUBE_RELOADER_IMAGE` (`make image-test` passes the one `make image-local` built
//! from the release binary), else one built here by hack/image-local.sh from the binary
//! `cargo test` built. Needs podman and runc (`.ci/run` installs them); without them the test
//! fails and says what to install.

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use base64::Engine;
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, PostParams};
use kube::config::Kubeconfig;
use serde_json::{Value, json};

use common::helm::{self, ClusterScoped, Output, as_list, kubectl_admin, one, repo_root};
use common::objects::*;
use common::{TestNamespace, free_port, http_get, kubeconfig_path, wait_for};

const WAIT: Duration = Duration::from_secs(60);
const SA_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

fn podman(args: &[&str]) -> Output {
    let script = repo_root().join("hack/podman.sh");
    let mut all = vec![script.to_str().unwrap()];
    all.extend_from_slice(args);
    helm::run(Path::new("bash"), &all, None)
}

fn podman_ok(args: &[&str]) -> String {
    let out = podman(args);
    assert!(
        out.ok,
        "podman {args:?} failed (hack/podman.sh; needs podman and runc):\n{}",
        out.stderr
    );
    out.stdout
}

/// The image under test: the one named by KUBE_RELOADER_IMAGE, else one built from the binary
/// this test run built.
fn image_under_test() -> String {
    if let Ok(image) = std::env::var("KUBE_RELOADER_IMAGE") {
        return image;
    }
    let image = "localhost/kube-reloader:cargo-test";
    let out = helm::run(
        Path::new("bash"),
        &[
            repo_root().join("hack/image-local.sh").to_str().unwrap(),
            env!("CARGO_BIN_EXE_kube-reloader"),
            image,
        ],
        None,
    );
    assert!(
        out.ok,
        "hack/image-local.sh failed:\n{}{}",
        out.stdout, out.stderr
    );
    image.to_string()
}

/// A running container, removed when dropped.
struct Container(String);

impl Container {
    fn logs(&self) -> String {
        let out = podman(&["logs", &self.0]);
        format!("{}{}", out.stdout, out.stderr)
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        let _ = podman(&["rm", "--force", "--time", "2", &self.0]);
    }
}

/// `LABEL key="value"` pairs of the Dockerfile's runtime stage whose value is a literal.
fn dockerfile_labels() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(repo_root().join("Dockerfile")).unwrap();
    let runtime = text.rsplit("\nFROM ").next().unwrap().replace("\\\n", " ");
    let mut labels = Vec::new();
    for line in runtime
        .lines()
        .filter_map(|l| l.trim().strip_prefix("LABEL "))
    {
        for pair in line.split("\" ") {
            let (k, v) = pair.trim().split_once('=').expect("LABEL key=value");
            let v = v.trim_matches('"');
            if !v.contains('$') {
                labels.push((k.to_string(), v.to_string()));
            }
        }
    }
    assert!(
        !labels.is_empty(),
        "no LABEL in the Dockerfile's runtime stage"
    );
    labels
}

/// The image is configured as the Dockerfile's runtime stage says.
fn assert_image_config(image: &str) -> u64 {
    let inspect: Value = serde_json::from_str(&podman_ok(&["image", "inspect", image])).unwrap();
    let config = &inspect[0]["Config"];
    assert_eq!(config["User"], "65534:65534", "{config}");
    assert_eq!(config["Entrypoint"], json!(["/kube-reloader"]), "{config}");
    assert!(config["ExposedPorts"].get("9090/tcp").is_some(), "{config}");
    for (key, value) in dockerfile_labels() {
        assert_eq!(
            config["Labels"][&key],
            value.as_str(),
            "label {key}: {config}"
        );
    }
    inspect[0]["Size"].as_u64().expect("image size")
}

/// What a pod finds in its ServiceAccount directory: token, ca.crt, namespace.
async fn service_account_dir(ns: &TestNamespace, service_account: &str) -> PathBuf {
    let request: TokenRequest = serde_json::from_value(json!({
        "spec": {"audiences": [], "expirationSeconds": 3600}
    }))
    .unwrap();
    let token = Api::<ServiceAccount>::namespaced(ns.client.clone(), &ns.name)
        .create_token_request(service_account, &PostParams::default(), &request)
        .await
        .unwrap_or_else(|e| panic!("TokenRequest for {service_account}: {e}"))
        .status
        .and_then(|s| s.token)
        .expect("a token in the TokenRequest status");
    let admin = Kubeconfig::read_from(kubeconfig_path()).expect("the admin kubeconfig");
    let cluster = admin.clusters[0].cluster.clone().expect("a cluster");
    let ca = base64::engine::general_purpose::STANDARD
        .decode(cluster.certificate_authority_data.expect("CA data"))
        .unwrap();
    let dir = std::env::temp_dir().join(format!("kube-reloader-image-sa-{}", ns.name));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("token"), token).unwrap();
    std::fs::write(dir.join("ca.crt"), ca).unwrap();
    std::fs::write(dir.join("namespace"), &ns.name).unwrap();
    // Readable by user 65534, as the kubelet makes them.
    let _ = std::process::Command::new("chmod")
        .args(["-R", "a+rX"])
        .arg(&dir)
        .status();
    dir
}

/// Host and port of the local API server (what KUBERNETES_SERVICE_HOST/PORT are in a pod).
fn api_server() -> (String, String) {
    let admin = Kubeconfig::read_from(kubeconfig_path()).expect("the admin kubeconfig");
    let server = admin.clusters[0].cluster.clone().unwrap().server.unwrap();
    let hostport = server.trim_start_matches("https://").trim_end_matches('/');
    let (host, port) = hostport.rsplit_once(':').expect("host:port");
    (host.to_string(), port.to_string())
}

/// Every file in the container's file system other than the binary, its libraries, the CA
/// bundle, passwd/group and mount points.
fn unexpected_files(container: &str) -> Vec<String> {
    let script = format!(
        "{} export {container} | tar -t",
        repo_root().join("hack/podman.sh").display()
    );
    let out = helm::run(Path::new("bash"), &["-c", &script], None);
    assert!(out.ok, "podman export: {}", out.stderr);
    let allowed_files = [
        "kube-reloader",
        "etc/passwd",
        "etc/group",
        "etc/ssl/certs/ca-certificates.crt",
        "etc/hosts",
        "etc/hostname",
        "etc/resolv.conf",
        "etc/mtab",
        // Where podman mounts its own container marker (it creates the mount point).
        "run/.containerenv",
    ];
    out.stdout
        .lines()
        .map(|l| l.trim_start_matches("./").to_string())
        .filter(|p| !p.is_empty() && !p.ends_with('/'))
        .filter(|p| !allowed_files.contains(&p.as_str()))
        .filter(|p| !(p.starts_with("lib") || p.starts_with("usr/lib")) || !p.contains(".so"))
        .collect()
}

#[tokio::test]
async fn the_image_runs_read_only_as_nobody_and_reloads_in_cluster() {
    let image = image_under_test();
    let size = assert_image_config(&image);
    let ns = TestNamespace::new("image").await;
    let c = &ns.client;

    // The chart's defaults, confined to this test's objects (a label on configs, annotation
    // names on workloads: neither changes args' meaning or RBAC; tests/chart.rs checks that) so
    // its cluster-wide watch acts on nothing of the tests running beside it.
    let key = |what: &str| format!("{}.test/{what}", ns.name);
    let values = json!({"reloader": {
        "resourceLabelSelector": format!("kube-reloader-image={}", ns.name),
        "custom_annotations": {"auto": key("auto")},
    }});
    let served = helm::served_api_versions();
    let api_args = helm::api_version_args(&served);
    let api_args: Vec<&str> = api_args.iter().map(String::as_str).collect();
    let objects = helm::template(&ns.name, &ns.name, &values, &api_args);
    let identity: Vec<&Value> = objects
        .iter()
        .filter(|o| {
            let kind = o["kind"].as_str().unwrap_or_default();
            kind == "ServiceAccount" || kind.contains("Role")
        })
        .collect();
    let _cleanup = ClusterScoped(
        identity
            .iter()
            .filter(|o| o["metadata"]["namespace"].is_null())
            .map(|o| {
                let name = o["metadata"]["name"].as_str().unwrap().to_string();
                (o["kind"].as_str().unwrap().to_string(), name)
            })
            .collect(),
    );
    let applied = kubectl_admin(&["apply", "-f", "-"], Some(&as_list(&identity)));
    assert!(applied.ok, "applying the chart's RBAC: {}", applied.stderr);
    let service_account = one(&objects, "ServiceAccount")["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    let sa_dir = service_account_dir(&ns, &service_account).await;

    create(c, &ns.name, {
        let cm = configmap("app-config", json!({"k": "v1"}));
        with_labels(cm, json!({"kube-reloader-image": ns.name}))
    })
    .await;
    let spec = pod_spec(env_from_configmap("app-config"), json!([]));
    create(
        c,
        &ns.name,
        deployment("web", json!({key("auto"): "true"}), spec),
    )
    .await;

    // With the host's network, the chart's :9090 could be taken: a free port instead.
    let port = free_port();
    let (host, api_port) = api_server();
    let name = format!("kr-{}", ns.name);
    let mut run: Vec<String> = [
        "run",
        "--detach",
        "--pull=never",
        "--name",
        &name,
        "--read-only",
        "--read-only-tmpfs=false",
        "--user",
        "65534",
        "--cap-drop=ALL",
        "--network=host",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    run.push(format!("--volume={}:{SA_DIR}:ro", sa_dir.display()));
    run.push(format!("--env=KUBERNETES_SERVICE_HOST={host}"));
    run.push(format!("--env=KUBERNETES_SERVICE_PORT={api_port}"));
    for (k, v) in helm::resolved_env(&objects, &format!("{name}-pod"), &ns.name) {
        run.push(format!("--env={k}={v}"));
    }
    run.push(image.clone());
    run.extend(helm::args(&objects));
    run.push(format!("--metrics-addr=127.0.0.1:{port}"));
    let run: Vec<&str> = run.iter().map(String::as_str).collect();
    let started = Instant::now();
    podman_ok(&run);
    let container = Container(name.clone());

    let url = |path: &str| format!("http://127.0.0.1:{port}{path}");
    let probe = |path: &'static str| {
        let url = url(path);
        let container = &container;
        async move {
            match http_get(&url).await {
                Ok((200, _)) => Ok(()),
                other => Err(format!("{path}: {other:?}; logs:\n{}", container.logs())),
            }
        }
    };
    wait_for("/live", WAIT, || probe("/live")).await;
    wait_for("/ready", WAIT, || probe("/ready")).await;
    let ready_after = started.elapsed();

    set_configmap_data(c, &ns.name, "app-config", json!({"k": "v2"})).await;
    wait_for_deployment_env(
        c,
        &ns.name,
        "web",
        "STAKATER_APP_CONFIG_CONFIGMAP",
        &configmap_hash(&[("k", "v2")]),
    )
    .await;
    let metrics = wait_for("the reload in /metrics", WAIT, || async {
        let (code, body) = http_get(&url("/metrics"))
            .await
            .map_err(|e| e.to_string())?;
        (code == 200 && body.contains("reloader_reload_executed_total{success=\"true\"} 1"))
            .then_some(body.clone())
            .ok_or_else(|| format!("{code}: {body}"))
    })
    .await;
    assert!(
        metrics.contains("reloader_reload_executed_total{success=\"false\"} 0"),
        "{metrics}"
    );

    let diff = podman_ok(&["diff", &name]);
    assert!(
        diff.trim().is_empty(),
        "the container changed its file system:\n{diff}"
    );
    let logs = container.logs();
    assert!(!logs.to_lowercase().contains("forbidden"), "{logs}");
    podman_ok(&["stop", "--time", "10", &name]);
    let extra = unexpected_files(&name);
    assert!(
        extra.is_empty(),
        "files besides the binary, its libraries, CA bundle and passwd/group: {extra:?}"
    );
    let _ = std::fs::remove_dir_all(&sa_dir);
    eprintln!(
        "image {image}: {:.1} MiB; container start to /ready: {:.2} s",
        size as f64 / 1048576.0,
        ready_after.as_secs_f64()
    );
}
