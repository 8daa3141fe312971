//! Every way a pod template can reference a config, which container receives the env var, how
//! the var is named, and the hash written: Reloader's SHA-1 recipes, pinned by fixed vectors.

mod common;

use serde_json::{Value, json};

use common::objects::*;
use common::{Controller, TestNamespace};

const IMAGE: &str = "registry.k8s.io/pause:3.10";

fn ns_flag(ns: &TestNamespace) -> String {
    format!("--namespaces={}", ns.name)
}

fn auto() -> Value {
    json!({"reloader.stakater.com/auto": "true"})
}

fn container(name: &str, extra: Value) -> Value {
    let mut c = json!({"name": name, "image": IMAGE});
    for (k, v) in extra.as_object().expect("an object") {
        c[k] = v.clone();
    }
    c
}

/// Container `index`'s `STAKATER_*` vars of a Deployment, sorted by name.
async fn vars_of_container(ns: &TestNamespace, name: &str, index: usize) -> Vec<(String, String)> {
    let mut vars: Vec<(String, String)> = deployment_reload_vars(&ns.client, &ns.name, name)
        .await
        .into_iter()
        .filter(|(i, _, _)| *i == index)
        .map(|(_, n, v)| (n, v))
        .collect();
    vars.sort();
    vars
}

#[tokio::test]
async fn env_value_from_key_refs_are_references() {
    let ns = TestNamespace::new("ref-valuefrom").await;
    let (c, n) = (&ns.client, ns.name.as_str());
    create(c, n, configmap("vf-cm", json!({"k": "v1"}))).await;
    create(c, n, secret("vf-secret", json!({"p": "s1"}))).await;
    let env = json!({"env": [
        {"name": "FROM_CM", "valueFrom": {"configMapKeyRef": {"name": "vf-cm", "key": "k"}}},
        {"name": "FROM_SECRET", "valueFrom": {"secretKeyRef": {"name": "vf-secret", "key": "p"}}}
    ]});
    create(c, n, deployment("web", auto(), pod_spec(env, json!([])))).await;
    let _controller = Controller::start(&[&ns_flag(&ns)]).await;

    update_configmap(c, n, "vf-cm", json!({"k": "v2"})).await;
    update_secret(c, n, "vf-secret", json!({"p": "s2"})).await;
    let cm_hash = configmap_hash(&[("k", "v2")]);
    let secret_hash = secret_hash(&[("p", b"s2")]);
    wait_for_deployment_env(c, n, "web", "STAKATER_VF_CM_CONFIGMAP", &cm_hash).await;
    let obj = wait_for_deployment_env(c, n, "web", "STAKATER_VF_SECRET_SECRET", &secret_hash).await;

    // The user's own env entries stay, in their order; the reload vars go ahead of them, as
    // Reloader's merge patch leaves them (newest first; which change came first depends on how
    // the two writes were timed, so their order is not asserted here: tests/reload_env_order.rs).
    let names: Vec<String> = template_env(&obj, "/spec/template", 0)
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(names[2..], ["FROM_CM", "FROM_SECRET"]);
    let mut added = names[..2].to_vec();
    added.sort();
    assert_eq!(
        added,
        ["STAKATER_VF_CM_CONFIGMAP", "STAKATER_VF_SECRET_SECRET"]
    );
    assert_eq!(
        obj.pointer("/spec/template/spec/containers/0/env/2/valueFrom/configMapKeyRef/name"),
        Some(&json!("vf-cm"))
    );
}

#[tokio::test]
async fn env_from_refs_are_references() {
    let ns = TestNamespace::new("ref-envfrom").await;
    let (c, n) = (&ns.client, ns.name.as_str());
    create(c, n, configmap("ef-cm", json!({"k": "v1"}))).await;
    create(c, n, secret("ef-secret", json!({"p": "s1"}))).await;
    let spec = pod_spec(
        json!({"envFrom": [{"configMapRef": {"name": "ef-cm"}}, {"secretRef": {"name": "ef-secret"}}]}),
        json!([]),
    );
    create(c, n, deployment("web", auto(), spec)).await;
    let _controller = Controller::start(&[&ns_flag(&ns)]).await;

    update_configmap(c, n, "ef-cm", json!({"k": "v2"})).await;
    update_secret(c, n, "ef-secret", json!({"p": "s2"})).await;
    wait_for_deployment_env(
        c,
        n,
        "web",
        "STAKATER_EF_CM_CONFIGMAP",
        &configmap_hash(&[("k", "v2")]),
    )
    .await;
    wait_for_deployment_env(
        c,
        n,
        "web",
        "STAKATER_EF_SECRET_SECRET",
        &secret_hash(&[("p", b"s2")]),
    )
    .await;
}

#[tokio::test]
async fn configmap_and_secret_volumes_are_references() {
    let ns = TestNamespace::new("ref-volumes").await;
    let (c, n) = (&ns.client, ns.name.as_str());
    create(c, n, configmap("vol-cm", json!({"k": "v1"}))).await;
    create(c, n, secret("vol-secret", json!({"p": "s1"}))).await;
    let spec = pod_spec(
        json!({"volumeMounts": [
            {"name": "cm", "mountPath": "/etc/cm"},
            {"name": "sec", "mountPath": "/etc/sec"}
        ]}),
        json!([
            {"name": "cm", "configMap": {"name": "vol-cm"}},
            {"name": "sec", "secret": {"secretName": "vol-secret"}}
        ]),
    );
    create(c, n, deployment("web", auto(), spec)).await;
    let _controller = Controller::start(&[&ns_flag(&ns)]).await;

    update_configmap(c, n, "vol-cm", json!({"k": "v2"})).await;
    update_secret(c, n, "vol-secret", json!({"p": "s2"})).await;
    wait_for_deployment_env(
        c,
        n,
        "web",
        "STAKATER_VOL_CM_CONFIGMAP",
        &configmap_hash(&[("k", "v2")]),
    )
    .await;
    wait_for_deployment_env(
        c,
        n,
        "web",
        "STAKATER_VOL_SECRET_SECRET",
        &secret_hash(&[("p", b"s2")]),
    )
    .await;
}

#[tokio::test]
async fn projected_volume_sources_are_references() {
    let ns = TestNamespace::new("ref-projected").await;
    let (c, n) = (&ns.client, ns.name.as_str());
    create(c, n, configmap("proj-cm", json!({"k": "v1"}))).await;
    create(c, n, secret("proj-secret", json!({"p": "s1"}))).await;
    let spec = pod_spec(
        json!({"volumeMounts": [{"name": "all", "mountPath": "/etc/all"}]}),
        json!([{"name": "all", "projected": {"sources": [
            {"configMap": {"name": "proj-cm"}},
            {"secret": {"name": "proj-secret"}}
        ]}}]),
    );
    create(c, n, deployment("web", auto(), spec)).await;
    let _controller = Controller::start(&[&ns_flag(&ns)]).await;

    update_configmap(c, n, "proj-cm", json!({"k": "v2"})).await;
    update_secret(c, n, "proj-secret", json!({"p": "s2"})).await;
    wait_for_deployment_env(
        c,
        n,
        "web",
        "STAKATER_PROJ_CM_CONFIGMAP",
        &configmap_hash(&[("k", "v2")]),
    )
    .await;
    wait_for_deployment_env(
        c,
        n,
        "web",
        "STAKATER_PROJ_SECRET_SECRET",
        &secret_hash(&[("p", b"s2")]),
    )
    .await;
}

#[tokio::test]
async fn init_container_references_put_the_var_in_the_first_container() {
    let ns = TestNamespace::new("ref-init").await;
    let (c, n) = (&ns.client, ns.name.as_str());
    create(c, n, configmap("init-cm", json!({"k": "v1"}))).await;
    create(c, n, secret("init-secret", json!({"p": "s1"}))).await;
    let spec = json!({
        "initContainers": [container("init", json!({
            "envFrom": [{"configMapRef": {"name": "init-cm"}}],
            "volumeMounts": [{"name": "sec", "mountPath": "/etc/sec"}]
        }))],
        "containers": [container("first", json!({})), container("second", json!({}))],
        "volumes": [{"name": "sec", "secret": {"secretName": "init-secret"}}]
    });
    create(c, n, deployment("web", auto(), spec)).await;
    let _controller = Controller::start(&[&ns_flag(&ns)]).await;

    update_configmap(c, n, "init-cm", json!({"k": "v2"})).await;
    update_secret(c, n, "init-secret", json!({"p": "s2"})).await;
    let cm_hash = configmap_hash(&[("k", "v2")]);
    let secret_hash = secret_hash(&[("p", b"s2")]);
    wait_for_deployment_env(c, n, "web", "STAKATER_INIT_CM_CONFIGMAP", &cm_hash).await;
    let obj =
        wait_for_deployment_env(c, n, "web", "STAKATER_INIT_SECRET_SECRET", &secret_hash).await;

    assert_eq!(
        vars_of_container(&ns, "web", 0).await,
        [
            ("STAKATER_INIT_CM_CONFIGMAP".to_string(), cm_hash),
            ("STAKATER_INIT_SECRET_SECRET".to_string(), secret_hash)
        ]
    );
    let second = vars_of_container(&ns, "web", 1).await;
    assert!(second.is_empty(), "{second:?}");
    assert_eq!(
        obj.pointer("/spec/template/spec/initContainers/0/env"),
        None,
        "the init container is never edited"
    );
}

#[tokio::test]
async fn a_mounting_container_gets_the_var_before_an_env_reference() {
    let ns = TestNamespace::new("ref-choice").await;
    let (c, n) = (&ns.client, ns.name.as_str());
    for name in ["mounted-cm", "both-cm", "env-cm"] {
        create(c, n, configmap(name, json!({"k": "v1"}))).await;
    }
    // "first" reads both-cm from env; "second" mounts it (and mounted-cm) and reads env-cm.
    let spec = json!({
        "containers": [
            container("first", json!({"envFrom": [{"configMapRef": {"name": "both-cm"}}]})),
            container("second", json!({
                "envFrom": [{"configMapRef": {"name": "env-cm"}}],
                "volumeMounts": [
                    {"name": "mounted", "mountPath": "/etc/mounted"},
                    {"name": "both", "mountPath": "/etc/both"}
                ]
            }))
        ],
        "volumes": [
            {"name": "mounted", "configMap": {"name": "mounted-cm"}},
            {"name": "both", "configMap": {"name": "both-cm"}}
        ]
    });
    create(c, n, deployment("web", auto(), spec)).await;
    let _controller = Controller::start(&[&ns_flag(&ns)]).await;

    for name in ["mounted-cm", "both-cm", "env-cm"] {
        update_configmap(c, n, name, json!({"k": "v2"})).await;
    }
    let hash = configmap_hash(&[("k", "v2")]);
    for var in [
        "STAKATER_MOUNTED_CM_CONFIGMAP",
        "STAKATER_BOTH_CM_CONFIGMAP",
        "STAKATER_ENV_CM_CONFIGMAP",
    ] {
        wait_for_deployment_env(c, n, "web", var, &hash).await;
    }
    let first = vars_of_container(&ns, "web", 0).await;
    assert!(first.is_empty(), "{first:?}");
    let second: Vec<String> = vars_of_container(&ns, "web", 1)
        .await
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(
        second,
        [
            "STAKATER_BOTH_CM_CONFIGMAP",
            "STAKATER_ENV_CM_CONFIGMAP",
            "STAKATER_MOUNTED_CM_CONFIGMAP"
        ]
    );
}

#[tokio::test]
async fn env_var_names_and_configmap_hash_with_binary_data() {
    let ns = TestNamespace::new("ref-naming").await;
    let (c, n) = (&ns.client, ns.name.as_str());
    // blob = [00 01 02 fe ff], which is AAEC/v8= in standard base64.
    let cm = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "my-app.config"},
        "data": {"text": "hello, old"},
        "binaryData": {"blob": "AAEC/v8="}
    });
    create(c, n, cm).await;
    create(c, n, secret("db--creds.v2", json!({"p": "s1"}))).await;
    let spec = pod_spec(
        json!({"envFrom": [
            {"configMapRef": {"name": "my-app.config"}},
            {"secretRef": {"name": "db--creds.v2"}}
        ]}),
        json!([]),
    );
    create(c, n, deployment("web", auto(), spec)).await;
    let _controller = Controller::start(&[&ns_flag(&ns)]).await;

    update_configmap(c, n, "my-app.config", json!({"text": "hello"})).await;
    update_secret(c, n, "db--creds.v2", json!({"p": "s2"})).await;
    // sha1("blob=AAEC/v8=;text=hello"), computed outside this code base.
    let expected = "f90b4d20b73f8a3a4a80073f57d0d5e6e7204262";
    wait_for_deployment_env(c, n, "web", "STAKATER_MY_APP_CONFIG_CONFIGMAP", expected).await;
    wait_for_deployment_env(
        c,
        n,
        "web",
        "STAKATER_DB_CREDS_V2_SECRET",
        &secret_hash(&[("p", b"s2")]),
    )
    .await;
    assert_eq!(
        vars_of_container(&ns, "web", 0).await.len(),
        2,
        "one var per config, nothing else"
    );
}

#[tokio::test]
async fn secret_hash_is_reloaders_sha1_of_sorted_raw_entries() {
    let ns = TestNamespace::new("ref-secrethash").await;
    let (c, n) = (&ns.client, ns.name.as_str());
    create(
        c,
        n,
        secret_bytes("raw", &[("user", b"admin"), ("password", b"old")]),
    )
    .await;
    create(
        c,
        n,
        deployment(
            "web",
            auto(),
            pod_spec(
                json!({"envFrom": [{"secretRef": {"name": "raw"}}]}),
                json!([]),
            ),
        ),
    )
    .await;
    let _controller = Controller::start(&[&ns_flag(&ns)]).await;

    // A value that is not UTF-8: the recipe hashes the raw bytes, not base64, not lossy text.
    let password: &[u8] = b"s3cr\xffet";
    merge_patch(
        c,
        n,
        "v1",
        "Secret",
        "raw",
        json!({"data": {"password": "czNjcv9ldA=="}}),
    )
    .await;
    // sha1("password=s3cr\xffet;user=admin"), computed outside this code base.
    let expected = "9910314e69fc0797df164d6928f62d982c57c3af";
    assert_eq!(
        secret_hash(&[("user", b"admin"), ("password", password)]),
        expected
    );
    wait_for_deployment_env(c, n, "web", "STAKATER_RAW_SECRET", expected).await;

    // Back to empty data: the SHA-1 of the empty string.
    merge_patch(c, n, "v1", "Secret", "raw", json!({"data": null})).await;
    wait_for_deployment_env(
        c,
        n,
        "web",
        "STAKATER_RAW_SECRET",
        "da39a3ee5e6b4b0d3255bfef95601890afd80709",
    )
    .await;
}
