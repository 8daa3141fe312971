//! Secrets Store CSI integration against the real API server. The tests play the CSI driver:
//! they write the SecretProviderClassPodStatus of a (pretend) pod and bump its object versions,
//! as the driver does when it rotates a mounted secret.

mod common;

use std::time::Duration;

use serde_json::{Value, json};

use common::crds;
use common::objects::*;
use common::{Controller, TestNamespace, wait_for};

const CSI_API: &str = "secrets-store.csi.x-k8s.io/v1";
const TEMPLATE: &str = "/spec/template";
const WAIT: Duration = Duration::from_secs(20);
/// After a canary rolled, how long a workload the same watch must not touch is watched.
const SETTLE: Duration = Duration::from_millis(700);

async fn setup(prefix: &str) -> TestNamespace {
    let ns = TestNamespace::new(prefix).await;
    crds::ensure(
        &ns.client,
        &[
            crds::SECRET_PROVIDER_CLASSES,
            crds::SECRET_PROVIDER_CLASS_POD_STATUSES,
        ],
    )
    .await;
    ns
}

async fn start(ns: &TestNamespace) -> Controller {
    Controller::start(&[
        &format!("--namespaces={}", ns.name),
        "--enable-csi-integration=true",
    ])
    .await
}

fn provider_class(name: &str, annotations: Value) -> Value {
    json!({
        "apiVersion": CSI_API, "kind": "SecretProviderClass",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {"provider": "vault", "parameters": {"roleName": "app", "objects": "pw"}}
    })
}

/// The driver names a pod status `<pod>-<namespace>-<class>`.
fn status_name(ns: &TestNamespace, pod: &str, class: &str) -> String {
    format!("{pod}-{}-{class}", ns.name)
}

fn objects(versions: &[(&str, &str)]) -> Value {
    versions
        .iter()
        .map(|(id, version)| json!({"id": id, "version": version}))
        .collect()
}

async fn create_pod_status(ns: &TestNamespace, pod: &str, class: &str, versions: &[(&str, &str)]) {
    let status = json!({
        "apiVersion": CSI_API, "kind": "SecretProviderClassPodStatus",
        "metadata": {
            "name": status_name(ns, pod, class),
            "labels": {"internal.secrets-store.csi.k8s.io/node-name": "node-1"}
        },
        "status": {
            "secretProviderClassName": class,
            "podName": pod,
            "mounted": true,
            "targetPath": format!("/var/lib/kubelet/pods/{pod}/volumes/kubernetes.io~csi/secrets/mount"),
            "objects": objects(versions)
        }
    });
    create(&ns.client, &ns.name, status).await;
}

/// What the driver's rotation does: new versions in the pod's status (arrays are replaced).
async fn rotate(ns: &TestNamespace, pod: &str, class: &str, versions: &[(&str, &str)]) {
    merge_patch(
        &ns.client,
        &ns.name,
        CSI_API,
        "SecretProviderClassPodStatus",
        &status_name(ns, pod, class),
        json!({"status": {"objects": objects(versions)}}),
    )
    .await;
}

/// Reloader's SHA-1 for a pod status, computed independently: `id=version` of each object plus
/// `SecretProviderClassName=<class>`, sorted, joined with `;`.
fn spc_hash(class: &str, versions: &[(&str, &str)]) -> String {
    use sha1::Digest;
    let mut entries: Vec<String> = versions.iter().map(|(i, v)| format!("{i}={v}")).collect();
    entries.push(format!("SecretProviderClassName={class}"));
    entries.sort();
    let digest = sha1::Sha1::digest(entries.join(";").as_bytes());
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// A container mounting a CSI volume of SecretProviderClass `class`.
fn csi_pod_spec(class: &str) -> Value {
    pod_spec(
        json!({"volumeMounts": [{"name": "secrets", "mountPath": "/mnt/secrets", "readOnly": true}]}),
        json!([{
            "name": "secrets",
            "csi": {
                "driver": "secrets-store.csi.k8s.io",
                "readOnly": true,
                "volumeAttributes": {"secretProviderClass": class}
            }
        }]),
    )
}

async fn deployment_env(ns: &TestNamespace, name: &str, var: &str) -> Option<String> {
    let obj = get(&ns.client, &ns.name, "apps/v1", "Deployment", name)
        .await
        .unwrap_or_else(|| panic!("Deployment/{name} does not exist"));
    env_value(&obj, TEMPLATE, var)
}

async fn wait_env(ns: &TestNamespace, name: &str, var: &str, expected: &str) {
    wait_for(
        &format!("{var}={expected} in Deployment/{name}"),
        WAIT,
        || async {
            match deployment_env(ns, name, var).await {
                Some(v) if v == expected => Ok(()),
                other => Err(format!("{var} is {other:?}")),
            }
        },
    )
    .await;
}

async fn generation(ns: &TestNamespace, name: &str) -> i64 {
    let obj = get(&ns.client, &ns.name, "apps/v1", "Deployment", name)
        .await
        .unwrap_or_else(|| panic!("Deployment/{name} does not exist"));
    obj["metadata"]["generation"].as_i64().expect("generation")
}

const VAULT_VAR: &str = "STAKATER_VAULT_SECRETPROVIDERCLASS";

#[tokio::test]
async fn rotated_versions_roll_deployments_opted_in_by_auto_typed_auto_and_list() {
    let ns = setup("csi-optin").await;
    let c = &ns.client;
    create(c, &ns.name, provider_class("vault", json!({}))).await;
    let spc_auto = json!({"secretproviderclass.reloader.stakater.com/auto": "true"});
    create(
        c,
        &ns.name,
        deployment("typed-auto", spc_auto, csi_pod_spec("vault")),
    )
    .await;
    let auto = json!({"reloader.stakater.com/auto": "true"});
    create(c, &ns.name, deployment("auto", auto, csi_pod_spec("vault"))).await;
    // An explicit list rolls even when no container mounts the class.
    let listed = json!({"secretproviderclass.reloader.stakater.com/reload": "vault"});
    let unrelated = pod_spec(json!({}), json!([]));
    create(c, &ns.name, deployment("listed", listed, unrelated)).await;
    let cm_auto = json!({"configmap.reloader.stakater.com/auto": "true"});
    create(
        c,
        &ns.name,
        deployment("configmap-auto", cm_auto, csi_pod_spec("vault")),
    )
    .await;
    create(
        c,
        &ns.name,
        deployment("plain", json!({}), csi_pod_spec("vault")),
    )
    .await;
    create_pod_status(&ns, "web-0", "vault", &[("secret/pw", "1")]).await;
    let _controller = start(&ns).await;

    rotate(&ns, "web-0", "vault", &[("secret/pw", "2")]).await;
    let expected = spc_hash("vault", &[("secret/pw", "2")]);
    for name in ["typed-auto", "auto", "listed"] {
        wait_env(&ns, name, VAULT_VAR, &expected).await;
    }
    let listed = get(c, &ns.name, "apps/v1", "Deployment", "listed")
        .await
        .unwrap();
    assert_eq!(
        template_env(&listed, TEMPLATE, 0),
        [(VAULT_VAR.to_string(), expected.clone())],
        "the explicit list falls back to containers[0]"
    );

    tokio::time::sleep(SETTLE).await;
    for name in ["configmap-auto", "plain"] {
        assert_eq!(
            deployment_env(&ns, name, VAULT_VAR).await,
            None,
            "Deployment/{name} is not opted in for SecretProviderClasses"
        );
    }
}

#[tokio::test]
async fn hash_covers_every_mounted_object_and_the_class_name() {
    let ns = setup("csi-hash").await;
    let c = &ns.client;
    create(c, &ns.name, provider_class("vault", json!({}))).await;
    let spc_auto = json!({"secretproviderclass.reloader.stakater.com/auto": "true"});
    create(
        c,
        &ns.name,
        deployment("web", spc_auto, csi_pod_spec("vault")),
    )
    .await;
    create_pod_status(
        &ns,
        "web-0",
        "vault",
        &[("secret/pw", "1"), ("secret/user", "1")],
    )
    .await;
    let _controller = start(&ns).await;

    // The driver writes objects in map order: the hash must not depend on it.
    let rotated = [("secret/user", "7"), ("secret/pw", "1")];
    rotate(&ns, "web-0", "vault", &rotated).await;
    wait_env(&ns, "web", VAULT_VAR, &spc_hash("vault", &rotated)).await;
    let gen_rolled = generation(&ns, "web").await;

    // Same versions, other order: not a change.
    rotate(
        &ns,
        "web-0",
        "vault",
        &[("secret/pw", "1"), ("secret/user", "7")],
    )
    .await;
    // Canary on the same watch: a real change afterwards.
    let later = [("secret/pw", "2"), ("secret/user", "7")];
    rotate(&ns, "web-0", "vault", &later).await;
    wait_env(&ns, "web", VAULT_VAR, &spc_hash("vault", &later)).await;
    assert_eq!(
        generation(&ns, "web").await,
        gen_rolled + 1,
        "a reordered object list rolled the Deployment"
    );
}

#[tokio::test]
async fn ignored_secret_provider_class_rolls_nothing() {
    let ns = setup("csi-ignore").await;
    let c = &ns.client;
    let ignore = json!({"reloader.stakater.com/ignore": "true"});
    create(c, &ns.name, provider_class("vault", ignore)).await;
    create(c, &ns.name, provider_class("kv", json!({}))).await;
    let auto = json!({"secretproviderclass.reloader.stakater.com/auto": "true"});
    create(
        c,
        &ns.name,
        deployment("uses-vault", auto.clone(), csi_pod_spec("vault")),
    )
    .await;
    create(c, &ns.name, deployment("uses-kv", auto, csi_pod_spec("kv"))).await;
    create_pod_status(&ns, "a-0", "vault", &[("secret/pw", "1")]).await;
    create_pod_status(&ns, "b-0", "kv", &[("secret/pw", "1")]).await;
    let _controller = start(&ns).await;

    rotate(&ns, "a-0", "vault", &[("secret/pw", "2")]).await;
    rotate(&ns, "b-0", "kv", &[("secret/pw", "2")]).await;
    let kv_hash = spc_hash("kv", &[("secret/pw", "2")]);
    wait_env(&ns, "uses-kv", "STAKATER_KV_SECRETPROVIDERCLASS", &kv_hash).await;

    tokio::time::sleep(SETTLE).await;
    assert_eq!(
        deployment_env(&ns, "uses-vault", VAULT_VAR).await,
        None,
        "an ignored SecretProviderClass rolled a Deployment"
    );
}

#[tokio::test]
async fn another_pods_status_with_older_versions_does_not_roll_back() {
    let ns = setup("csi-pods").await;
    let c = &ns.client;
    create(c, &ns.name, provider_class("vault", json!({}))).await;
    create(c, &ns.name, provider_class("kv", json!({}))).await;
    let auto = json!({"secretproviderclass.reloader.stakater.com/auto": "true"});
    create(
        c,
        &ns.name,
        deployment("web", auto.clone(), csi_pod_spec("vault")),
    )
    .await;
    create(c, &ns.name, deployment("canary", auto, csi_pod_spec("kv"))).await;
    create_pod_status(&ns, "web-a", "vault", &[("secret/pw", "1")]).await;
    create_pod_status(&ns, "web-b", "vault", &[("secret/pw", "1")]).await;
    create_pod_status(&ns, "canary-0", "kv", &[("secret/pw", "1")]).await;
    let _controller = start(&ns).await;

    // The driver rotates one pod first.
    rotate(&ns, "web-a", "vault", &[("secret/pw", "2")]).await;
    let v2 = spc_hash("vault", &[("secret/pw", "2")]);
    wait_env(&ns, "web", VAULT_VAR, &v2).await;
    let gen_rolled = generation(&ns, "web").await;

    // The other pod's status is written again with its (older) versions unchanged, and a new
    // pod of the rollout reports the current ones: neither is a change of what is mounted.
    merge_patch(
        c,
        &ns.name,
        CSI_API,
        "SecretProviderClassPodStatus",
        &status_name(&ns, "web-b", "vault"),
        json!({"metadata": {"labels": {"touched": "yes"}}}),
    )
    .await;
    create_pod_status(&ns, "web-c", "vault", &[("secret/pw", "2")]).await;
    // Canary: a later event of the same watch.
    rotate(&ns, "canary-0", "kv", &[("secret/pw", "2")]).await;
    let kv = spc_hash("kv", &[("secret/pw", "2")]);
    wait_env(&ns, "canary", "STAKATER_KV_SECRETPROVIDERCLASS", &kv).await;

    tokio::time::sleep(SETTLE).await;
    assert_eq!(
        deployment_env(&ns, "web", VAULT_VAR).await.as_deref(),
        Some(v2.as_str()),
        "rolled back to the older pod's versions"
    );
    assert_eq!(generation(&ns, "web").await, gen_rolled, "rolled again");
}

/// A namespace entering the selection after start-up is listed as a start-up would list it,
/// pod statuses included: its next rotation is a change, not the creation of an unknown class.
#[tokio::test]
async fn a_namespace_entering_the_selection_has_its_pod_statuses_indexed() {
    use k8s_openapi::api::core::v1::Namespace;
    use kube::api::{Api, Patch, PatchParams};
    let ns = setup("csi-enter").await;
    let c = &ns.client;
    create(c, &ns.name, provider_class("vault", json!({}))).await;
    let auto = json!({"reloader.stakater.com/auto": "true"});
    create(c, &ns.name, deployment("auto", auto, csi_pod_spec("vault"))).await;
    create_pod_status(&ns, "web-0", "vault", &[("secret/pw", "1")]).await;
    let key = "kube-reloader-test-csi-enter";
    let token = unique_token("csi");
    let controller = Controller::start(&[
        &format!("--namespace-selector={key}={token}"),
        "--enable-csi-integration=true",
    ])
    .await;

    Api::<Namespace>::all(c.clone())
        .patch(
            &ns.name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": { key: token }}})),
        )
        .await
        .expect("labelling the namespace");
    wait_for_log_line(&controller, &["namespaces indexed", &ns.name]).await;
    rotate(&ns, "web-0", "vault", &[("secret/pw", "2")]).await;
    let expected = spc_hash("vault", &[("secret/pw", "2")]);
    wait_env(&ns, "auto", VAULT_VAR, &expected).await;
}
