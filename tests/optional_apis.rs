//! Kinds a flag turns on whose CRD a cluster may not have (a values file shared by clusters with
//! and without the Secrets Store CSI driver or Argo Rollouts). Against an API server of their
//! own (`hack/cluster.sh isolated`: the shared control plane's etcd under another prefix), since
//! these tests delete CRDs that other tests rely on. Each starts with the CRD absent: the
//! controller becomes ready, reloads what exists, says the API is not served (log line and
//! metric), and picks the kind up once the CRD is installed, without a restart.

mod common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use kube::Client;
use serde_json::{Value, json};

use common::identity::identity_at;
use common::objects::*;
use common::reloader_chart::{Values, reloader_rules};
use common::{Controller, TestNamespace, client_at, crds, isolated_kubeconfig_path, wait_for};

const WAIT: Duration = Duration::from_secs(20);
const CSI_API: &str = "secrets-store.csi.x-k8s.io/v1";
const SPCPS: &str = "secrets-store.csi.x-k8s.io/v1/secretproviderclasspodstatuses";
const ROLLOUTS: &str = "argoproj.io/v1alpha1/rollouts";
/// Each test deletes and installs CRDs on the one isolated server: one test at a time.
static SERVER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

struct Isolated {
    kubeconfig: PathBuf,
    admin: Client,
}

async fn isolated() -> Isolated {
    let kubeconfig = isolated_kubeconfig_path();
    let admin = client_at(&kubeconfig).await;
    Isolated { kubeconfig, admin }
}

impl Isolated {
    /// kube-reloader as the admin of the isolated server, checking optional APIs every second.
    async fn controller(&self, args: &[&str]) -> Controller {
        let mut all = args.to_vec();
        all.push("--optional-api-check-interval=1s");
        Controller::start_as(&self.kubeconfig, &all, &[]).await
    }
}

fn served_metric(api: &str) -> String {
    format!("kube_reloader_optional_api_served{{api=\"{api}\"}}")
}

async fn wait_served(controller: &Controller, api: &str, served: bool) {
    let series = served_metric(api);
    wait_for(&format!("{series} = {served}"), WAIT, || async {
        match controller.metric(&series).await {
            Some(v) if v == f64::from(u8::from(served)) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
}

/// A ConfigMap and an auto Deployment using it; changes the ConfigMap and waits for the reload.
async fn configmap_change_reloads(c: &Client, ns: &str, name: &str) {
    create(c, ns, configmap(name, json!({"k": "v1"}))).await;
    let auto = json!({"reloader.stakater.com/auto": "true"});
    let spec = pod_spec(env_from_configmap(name), json!([]));
    create(c, ns, deployment(name, auto, spec)).await;
    // Indexed before the change: a canary annotation round-trip is not needed, the watch of
    // Deployments delivers it before the ConfigMap's change, which is written after.
    tokio::time::sleep(Duration::from_millis(500)).await;
    set_configmap_data(c, ns, name, json!({"k": "v2"})).await;
    let var = format!(
        "STAKATER_{}_CONFIGMAP",
        name.to_uppercase().replace('-', "_")
    );
    let hash = configmap_hash(&[("k", "v2")]);
    wait_for(&format!("Deployment {name} reloaded"), WAIT, || async {
        let d = get(c, ns, "apps/v1", "Deployment", name)
            .await
            .ok_or("no Deployment")?;
        match env_value(&d, "/spec/template", &var) {
            Some(v) if v == hash => Ok(()),
            other => Err(format!("{var} is {other:?}")),
        }
    })
    .await;
}

#[tokio::test]
async fn csi_on_without_the_driver_is_ready_reloads_and_takes_the_driver_up_when_installed() {
    let _one = SERVER.lock().await;
    let server = isolated().await;
    let c = &server.admin;
    crds::remove(c, crds::SECRET_PROVIDER_CLASS_POD_STATUSES).await;
    crds::remove(c, crds::SECRET_PROVIDER_CLASSES).await;
    let ns = TestNamespace::on(&server.kubeconfig, "opt-csi", json!({})).await;

    // Without the change: /ready never answered 200 (the pod status watch never listed).
    let controller = server
        .controller(&[
            &format!("--namespaces={}", ns.name),
            "--enable-csi-integration=true",
        ])
        .await;
    wait_served(&controller, SPCPS, false).await;
    configmap_change_reloads(c, &ns.name, "app-config").await;
    let logs = plain_logs(&controller);
    assert!(
        logs.contains("API not served") && logs.contains("secretproviderclasspodstatuses"),
        "one clear line saying CSI is skipped:\n{logs}"
    );
    let restarts = logs.matches("watch failed, retrying").count();
    assert_eq!(restarts, 0, "no watch retries a 404 for ever:\n{logs}");

    crds::install(c, crds::SECRET_PROVIDER_CLASSES).await;
    crds::install(c, crds::SECRET_PROVIDER_CLASS_POD_STATUSES).await;
    wait_served(&controller, SPCPS, true).await;
    let spc = json!({"apiVersion": CSI_API, "kind": "SecretProviderClass",
        "metadata": {"name": "vault"}, "spec": {"provider": "vault", "parameters": {}}});
    create(c, &ns.name, spc).await;
    let spc_auto = json!({"secretproviderclass.reloader.stakater.com/auto": "true"});
    let volume = json!([{"name": "secrets", "csi": {"driver": "secrets-store.csi.k8s.io",
        "readOnly": true, "volumeAttributes": {"secretProviderClass": "vault"}}}]);
    let mount = json!({"volumeMounts": [{"name": "secrets", "mountPath": "/mnt/s"}]});
    create(
        c,
        &ns.name,
        deployment("csi-app", spc_auto, pod_spec(mount, volume)),
    )
    .await;
    let status_name = format!("web-0-{}-vault", ns.name);
    let status = |version: u32| {
        json!({"apiVersion": CSI_API, "kind": "SecretProviderClassPodStatus",
            "metadata": {"name": status_name},
            "status": {"secretProviderClassName": "vault", "podName": "web-0", "mounted": true,
                "targetPath": "/var/lib/kubelet/pods/web-0/volumes/kubernetes.io~csi/secrets/mount",
                "objects": [{"id": "secret/pw", "version": version.to_string()}]}})
    };
    create(c, &ns.name, status(1)).await;
    // The watch starts within a check interval of the CRD; rotate until a rotation is seen.
    let mut version = 1;
    wait_for(
        "a CSI rotation reloads once the CRD is installed",
        Duration::from_secs(30),
        || {
            version += 1;
            let patch = json!({"status": status(version)["status"].clone()});
            let (c, ns, name) = (c.clone(), ns.name.clone(), status_name.clone());
            async move {
                merge_patch(
                    &c,
                    &ns,
                    CSI_API,
                    "SecretProviderClassPodStatus",
                    &name,
                    patch,
                )
                .await;
                tokio::time::sleep(Duration::from_millis(500)).await;
                let d = get(&c, &ns, "apps/v1", "Deployment", "csi-app")
                    .await
                    .ok_or("no Deployment")?;
                env_value(&d, "/spec/template", "STAKATER_VAULT_SECRETPROVIDERCLASS")
                    .ok_or_else(|| "not reloaded yet".to_string())
            }
        },
    )
    .await;
    assert!(
        plain_logs(&controller).contains("API served: watching it"),
        "the controller says it took CSI up"
    );
}

/// Changes ConfigMap `config` every half second until `workload` (api version, kind, name)
/// shows the reload (`rolled`): a kind whose CRD was just installed is watched within a few
/// checks of the API.
async fn changes_until_rolled(
    c: &Client,
    ns: &str,
    config: &str,
    workload: (&str, &str, &str),
    rolled: impl Fn(&Value) -> bool,
) {
    let (api_version, kind, name) = workload;
    let mut value = 1;
    wait_for(
        &format!("{kind} {name} reloads once its CRD is installed"),
        Duration::from_secs(30),
        || {
            value += 1;
            let (c, ns) = (c.clone(), ns.to_string());
            let rolled = &rolled;
            async move {
                set_configmap_data(&c, &ns, config, json!({"k": value.to_string()})).await;
                tokio::time::sleep(Duration::from_millis(500)).await;
                let object = get(&c, &ns, api_version, kind, name)
                    .await
                    .ok_or(format!("no {kind} {name}"))?;
                rolled(&object)
                    .then_some(())
                    .ok_or_else(|| "not reloaded yet".to_string())
            }
        },
    )
    .await;
}

#[tokio::test]
async fn argo_on_without_rollouts_is_ready_reloads_and_rolls_rollouts_once_installed() {
    let _one = SERVER.lock().await;
    let server = isolated().await;
    let c = &server.admin;
    crds::remove(c, crds::ARGO_ROLLOUTS).await;
    let ns = TestNamespace::on(&server.kubeconfig, "opt-argo", json!({})).await;
    let controller = server
        .controller(&[
            &format!("--namespaces={}", ns.name),
            "--is-Argo-Rollouts=true",
        ])
        .await;
    wait_served(&controller, ROLLOUTS, false).await;
    configmap_change_reloads(c, &ns.name, "before").await;

    crds::install(c, crds::ARGO_ROLLOUTS).await;
    wait_served(&controller, ROLLOUTS, true).await;
    create(c, &ns.name, configmap("rollout-config", json!({"k": "v1"}))).await;
    let auto = json!({"reloader.stakater.com/auto": "true"});
    let mut rollout = deployment(
        "canary",
        auto,
        pod_spec(env_from_configmap("rollout-config"), json!([])),
    );
    rollout["apiVersion"] = json!("argoproj.io/v1alpha1");
    rollout["kind"] = json!("Rollout");
    create(c, &ns.name, rollout).await;
    changes_until_rolled(
        c,
        &ns.name,
        "rollout-config",
        ("argoproj.io/v1alpha1", "Rollout", "canary"),
        |r| env_value(r, "/spec/template", "STAKATER_ROLLOUT_CONFIG_CONFIGMAP").is_some(),
    )
    .await;
}

/// A declared custom kind whose CRD is not installed: the controller is ready and reloads the
/// built-in kinds; once the CRD is installed, its objects are watched and rolled.
#[tokio::test]
async fn a_declared_kind_not_served_waits_and_is_rolled_once_installed() {
    let _one = SERVER.lock().await;
    let server = isolated().await;
    let c = &server.admin;
    crds::remove(c, crds::KNATIVE_SERVICES).await;
    let ns = TestNamespace::on(&server.kubeconfig, "opt-custom", json!({})).await;
    let controller = server
        .controller(&[
            &format!("--namespaces={}", ns.name),
            "--custom-kind=serving.knative.dev/v1/Service,reload-by=annotations",
        ])
        .await;
    let services = "serving.knative.dev/v1/services";
    wait_served(&controller, services, false).await;
    configmap_change_reloads(c, &ns.name, "before").await;

    crds::install(c, crds::KNATIVE_SERVICES).await;
    wait_served(&controller, services, true).await;
    create(c, &ns.name, configmap("service-config", json!({"k": "v1"}))).await;
    let service = json!({
        "apiVersion": "serving.knative.dev/v1", "kind": "Service",
        "metadata": {"name": "hello", "annotations": {"reloader.stakater.com/auto": "true"}},
        "spec": {"template": {"spec": {"containers": [{"image": "registry.k8s.io/pause:3.10",
            "envFrom": [{"configMapRef": {"name": "service-config"}}]}]}}}
    });
    create(c, &ns.name, service).await;
    let annotation =
        "/spec/template/metadata/annotations/reloader.stakater.com~1last-reloaded-from";
    changes_until_rolled(
        c,
        &ns.name,
        "service-config",
        ("serving.knative.dev/v1", "Service", "hello"),
        |s| s.pointer(annotation).is_some(),
    )
    .await;
}

/// Reloader's chart with csi, argo, reloadOnCreate and syncAfterRestart, its RBAC bound (no
/// watch on workloads: they are found by LIST), on a cluster serving Argo Rollouts but not the
/// CSI driver. A ConfigMap and a Deployment created right after the start, then the ConfigMap
/// changed: reloaded every time. Before, the pod status watch retried its 404 for ever, start-up
/// never finished, and the LIST before each change waited for a start-up that never came: the
/// Deployment, created after the first list, was never in the index (4 of 5 runs missed).
#[tokio::test]
async fn csi_argo_create_sync_under_reloaders_rbac_reloads_every_time() {
    let _one = SERVER.lock().await;
    let server = isolated().await;
    let c = &server.admin;
    crds::remove(c, crds::SECRET_PROVIDER_CLASS_POD_STATUSES).await;
    crds::install(c, crds::ARGO_ROLLOUTS).await;
    let values = Values {
        csi: true,
        argo: true,
        ..Values::default()
    };
    const RUNS: usize = 5;
    for run in 0..RUNS {
        let ns = TestNamespace::on(&server.kubeconfig, &format!("opt-rbac-{run}"), json!({})).await;
        let account = "reloader-reloader";
        create(
            c,
            &ns.name,
            json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": account}}),
        )
        .await;
        let role = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "reloader"}, "rules": reloader_rules(values)});
        create(c, &ns.name, role).await;
        let binding = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": "reloader"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "reloader"},
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": ns.name}]});
        create(c, &ns.name, binding).await;
        let identity = identity_at(c, &server.kubeconfig, &ns.name, account).await;
        wait_for("the binding in effect", WAIT, || async {
            api_for(&identity.client, &ns.name, "apps/v1", "Deployment")
                .list(&Default::default())
                .await
                .map(drop)
                .map_err(|e| e.to_string())
        })
        .await;
        let kubeconfig = identity.kubeconfig.display().to_string();
        let args = [
            format!("--namespaces={}", ns.name),
            "--enable-csi-integration=true".into(),
            "--is-Argo-Rollouts=true".into(),
            "--reload-on-create=true".into(),
            "--sync-after-restart=true".into(),
        ];
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut controller = Controller::launch(&args, &[("KUBECONFIG", &kubeconfig)]);
        let started = Instant::now();
        create(c, &ns.name, configmap("app", json!({"k": "v1"}))).await;
        let auto = json!({"reloader.stakater.com/auto": "true"});
        let spec = pod_spec(env_from_configmap("app"), json!([]));
        create(c, &ns.name, deployment("web", auto, spec)).await;
        controller.wait_ready().await;
        set_configmap_data(c, &ns.name, "app", json!({"k": "v2"})).await;
        let hash = configmap_hash(&[("k", "v2")]);
        let reloaded = wait_for_reload(c, &ns.name, &hash).await;
        assert!(
            reloaded.is_ok(),
            "run {run} of {RUNS}: not reloaded within {WAIT:?} ({:?} after the start): {}\n{}",
            started.elapsed(),
            reloaded.unwrap_err(),
            plain_logs(&controller)
        );
    }
}

async fn wait_for_reload(c: &Client, ns: &str, hash: &str) -> Result<(), String> {
    let deadline = Instant::now() + WAIT;
    let mut last = String::new();
    while Instant::now() < deadline {
        let d: Option<Value> = get(c, ns, "apps/v1", "Deployment", "web").await;
        match d
            .as_ref()
            .and_then(|d| env_value(d, "/spec/template", "STAKATER_APP_CONFIGMAP"))
        {
            Some(v) if v == hash => return Ok(()),
            other => last = format!("STAKATER_APP_CONFIGMAP is {other:?}"),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Err(last)
}
