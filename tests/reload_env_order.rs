//! Pod templates identical to Reloader's, kind by kind, down to the position of each env var:
//! literal expected env lists after three changes in a row (two configs new to the container,
//! one whose var it already carries), with the init container and a second container untouched.
//!
//! - Deployment, DaemonSet, StatefulSet: Reloader sends a strategic merge patch naming one var;
//!   the API server's merge puts a new var ahead of the existing ones (newest first) and updates
//!   an existing one in place. A twin the controller ignores gets Reloader's very patches from
//!   the test, and must end up with the same env as the reloaded workload.
//! - Argo Rollout (updated whole), Job re-created, Job created from a CronJob: appended.

mod common;

use std::time::Duration;

use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};

use common::crds;
use common::objects::*;
use common::{Controller, TestNamespace, each_row, wait_for};

const WAIT: Duration = Duration::from_secs(30);
const AUTO: &str = "reloader.stakater.com/auto";
const CM_VAR: &str = "STAKATER_APP_CONFIG_CONFIGMAP";
const SECRET_VAR: &str = "STAKATER_APP_SECRET_SECRET";
const OLD_VAR: &str = "STAKATER_OLD_CONFIGMAP";
const ROLLOUT_API: &str = "argoproj.io/v1alpha1";

fn pre() -> Value {
    json!({"name": "PRE_EXISTING", "value": "keep"})
}
fn g() -> Value {
    json!({"name": "G", "valueFrom": {"configMapKeyRef": {"name": "app-config", "key": "g"}}})
}
fn m() -> Value {
    json!({"name": "M", "valueFrom": {"secretKeyRef": {"name": "app-secret", "key": "m"}}})
}
fn var(name: &str, value: &str) -> Value {
    json!({"name": name, "value": value})
}

/// The hashes the three changes of every test write (`old` before and after its change).
struct Changes {
    cm: String,
    secret: String,
    old_before: String,
    old_after: String,
}

impl Changes {
    fn new() -> Self {
        Changes {
            cm: configmap_hash(&[("g", "2")]),
            secret: secret_hash(&[("m", b"2")]),
            old_before: configmap_hash(&[("o", "1")]),
            old_after: configmap_hash(&[("o", "2")]),
        }
    }
}

fn init_container() -> Value {
    json!({"name": "init", "image": "registry.k8s.io/pause:3.10",
           "envFrom": [{"configMapRef": {"name": "app-config"}}],
           "env": [{"name": "INIT_ONLY", "value": "1"}]})
}

fn side_container() -> Value {
    json!({"name": "side", "image": "registry.k8s.io/pause:3.10",
           "env": [{"name": "SIDE", "value": "1"}]})
}

/// Container `app` reads all three configs and already carries the var of `old`, at its current
/// hash (so the start-up reconcile has nothing to do).
fn pod(changes: &Changes) -> Value {
    let app = json!({
        "envFrom": [{"configMapRef": {"name": "app-config"}}, {"secretRef": {"name": "app-secret"}},
                    {"configMapRef": {"name": "old"}}],
        "env": [pre(), var(OLD_VAR, &changes.old_before), g(), m()]
    });
    let mut spec = pod_spec(app, json!([]));
    spec["initContainers"] = json!([init_container()]);
    spec["containers"]
        .as_array_mut()
        .unwrap()
        .push(side_container());
    spec
}

async fn create_configs(ns: &TestNamespace) {
    let c = &ns.client;
    create(c, &ns.name, configmap("app-config", json!({"g": "1"}))).await;
    create(c, &ns.name, secret("app-secret", json!({"m": "1"}))).await;
    create(c, &ns.name, configmap("old", json!({"o": "1"}))).await;
}

/// Change number `step`: app-config (new var), app-secret (new var), old (existing var).
async fn change(ns: &TestNamespace, step: usize) {
    match step {
        0 => set_configmap_data(&ns.client, &ns.name, "app-config", json!({"g": "2"})).await,
        1 => set_secret_data(&ns.client, &ns.name, "app-secret", json!({"m": "2"})).await,
        _ => set_configmap_data(&ns.client, &ns.name, "old", json!({"o": "2"})).await,
    }
}

fn step_var(changes: &Changes, step: usize) -> (&'static str, String) {
    match step {
        0 => (CM_VAR, changes.cm.clone()),
        1 => (SECRET_VAR, changes.secret.clone()),
        _ => (OLD_VAR, changes.old_after.clone()),
    }
}

fn container<'a>(obj: &'a Value, template: &str, kind: &str, index: usize) -> &'a Value {
    obj.pointer(&format!("{template}/spec/{kind}/{index}"))
        .unwrap_or_else(|| panic!("no {kind}[{index}] in {obj}"))
}

/// Container `app` has the expected env, and the other containers are as created.
fn assert_template(obj: &Value, template: &str, expected: &[Value], what: &str) {
    assert_eq!(
        container(obj, template, "containers", 0)["env"],
        json!(expected),
        "{what}: env of container app"
    );
    assert_eq!(
        container(obj, template, "initContainers", 0)["env"],
        init_container()["env"],
        "{what}: the init container was touched"
    );
    assert_eq!(
        container(obj, template, "containers", 1)["env"],
        side_container()["env"],
        "{what}: container side was touched"
    );
}

async fn wait_var(ns: &TestNamespace, api: &str, kind: &str, name: &str, var: &str, hash: &str) {
    wait_for(&format!("{var}={hash} in {kind}/{name}"), WAIT, || async {
        let obj = get(&ns.client, &ns.name, api, kind, name)
            .await
            .ok_or_else(|| format!("{kind}/{name} does not exist"))?;
        match env_value(&obj, "/spec/template", var) {
            Some(v) if v == hash => Ok(()),
            other => Err(format!("{var} = {other:?}")),
        }
    })
    .await;
}

/// Reloader's strategic merge patch for one var, as it sends it.
fn reloader_patch(var: &str, hash: &str) -> Value {
    json!({"spec": {"template": {"spec": {"containers": [
        {"name": "app", "env": [{"name": var, "value": hash}]}
    ]}}}})
}

/// A kind Reloader reloads with a strategic merge patch; `twin` gets Reloader's patches by hand.
struct PatchedKind {
    prefix: &'static str,
    build: fn(&str, Value, Value) -> Value,
    kind: &'static str,
}

async fn patched_kind_matches_reloaders_merge(row: PatchedKind) {
    let PatchedKind {
        prefix,
        build,
        kind,
    } = row;
    let ns = TestNamespace::new(prefix).await;
    let changes = Changes::new();
    create_configs(&ns).await;
    create(
        &ns.client,
        &ns.name,
        build("reloaded", json!({AUTO: "true"}), pod(&changes)),
    )
    .await;
    create(
        &ns.client,
        &ns.name,
        build("twin", json!({}), pod(&changes)),
    )
    .await;
    let _controller = Controller::start(&[&format!("--namespaces={}", ns.name)]).await;
    let twin = api_for(&ns.client, &ns.name, "apps/v1", kind);

    for step in 0..3 {
        change(&ns, step).await;
        let (var, hash) = step_var(&changes, step);
        wait_var(&ns, "apps/v1", kind, "reloaded", var, &hash).await;
        twin.patch(
            "twin",
            &PatchParams::default(),
            &Patch::Strategic(reloader_patch(var, &hash)),
        )
        .await
        .unwrap_or_else(|e| panic!("Reloader's patch on the twin {kind}: {e}"));
    }

    let reloaded = get(&ns.client, &ns.name, "apps/v1", kind, "reloaded")
        .await
        .unwrap();
    let expected = [
        var(SECRET_VAR, &changes.secret),
        var(CM_VAR, &changes.cm),
        pre(),
        var(OLD_VAR, &changes.old_after),
        g(),
        m(),
    ];
    assert_template(&reloaded, "/spec/template", &expected, kind);
    let merged = get(&ns.client, &ns.name, "apps/v1", kind, "twin")
        .await
        .unwrap();
    assert_eq!(
        merged.pointer("/spec/template/spec"),
        reloaded.pointer("/spec/template/spec"),
        "{kind}: the API server's merge of Reloader's patches left another pod spec"
    );
}

#[tokio::test]
async fn patched_kinds_get_new_vars_first_newest_first_like_reloaders_merge_patch() {
    let rows = vec![
        PatchedKind {
            prefix: "order-deploy",
            build: deployment,
            kind: "Deployment",
        },
        PatchedKind {
            prefix: "order-ds",
            build: daemonset,
            kind: "DaemonSet",
        },
        PatchedKind {
            prefix: "order-sts",
            build: statefulset,
            kind: "StatefulSet",
        },
    ];
    each_row(
        rows,
        |r| r.kind.into(),
        patched_kind_matches_reloaders_merge,
    )
    .await;
}

/// After all three changes, on a kind Reloader updates whole: appended, existing in place.
fn appended(changes: &Changes) -> [Value; 6] {
    [
        pre(),
        var(OLD_VAR, &changes.old_after),
        g(),
        m(),
        var(CM_VAR, &changes.cm),
        var(SECRET_VAR, &changes.secret),
    ]
}

/// A kind updated whole (or re-created), so a new var lands after the existing ones.
struct AppendedKind {
    prefix: &'static str,
    crd: Option<&'static str>,
    flags: &'static [&'static str],
    api: &'static str,
    kind: &'static str,
    name: &'static str,
    build: fn(&str, Value, Value) -> Value,
}

fn rollout(name: &str, annotations: Value, spec: Value) -> Value {
    let mut rollout = deployment(name, annotations, spec);
    rollout["apiVersion"] = json!(ROLLOUT_API);
    rollout["kind"] = json!("Rollout");
    rollout
}

async fn appended_kind_carries_new_vars_appended(row: AppendedKind) {
    let ns = TestNamespace::new(row.prefix).await;
    if let Some(crd) = row.crd {
        crds::ensure(&ns.client, &[crd]).await;
    }
    let changes = Changes::new();
    create_configs(&ns).await;
    let workload = (row.build)(row.name, json!({AUTO: "true"}), pod(&changes));
    create(&ns.client, &ns.name, workload).await;
    let scope = format!("--namespaces={}", ns.name);
    let args: Vec<&str> = [scope.as_str()]
        .into_iter()
        .chain(row.flags.iter().copied())
        .collect();
    let _controller = Controller::start(&args).await;

    for step in 0..3 {
        change(&ns, step).await;
        let (var, hash) = step_var(&changes, step);
        wait_var(&ns, row.api, row.kind, row.name, var, &hash).await;
    }
    let obj = get(&ns.client, &ns.name, row.api, row.kind, row.name)
        .await
        .unwrap();
    assert_template(&obj, "/spec/template", &appended(&changes), row.kind);
}

/// An Argo Rollout (with its flag), and a Job, which is re-created on each change.
#[tokio::test]
async fn rollout_and_recreated_job_carry_new_vars_appended() {
    let rows = vec![
        AppendedKind {
            prefix: "order-argo",
            crd: Some(crds::ARGO_ROLLOUTS),
            flags: &["--is-Argo-Rollouts=true"],
            api: ROLLOUT_API,
            kind: "Rollout",
            name: "web",
            build: rollout,
        },
        AppendedKind {
            prefix: "order-job",
            crd: None,
            flags: &[],
            api: "batch/v1",
            kind: "Job",
            name: "migrate",
            build: job,
        },
    ];
    each_row(
        rows,
        |r| r.kind.into(),
        appended_kind_carries_new_vars_appended,
    )
    .await;
}

/// Each change makes a new Job from the unchanged CronJob: its template plus the one var.
#[tokio::test]
async fn job_from_cronjob_carries_the_var_appended() {
    let ns = TestNamespace::new("order-cron").await;
    let changes = Changes::new();
    create_configs(&ns).await;
    create(
        &ns.client,
        &ns.name,
        cronjob("nightly", json!({AUTO: "true"}), pod(&changes)),
    )
    .await;
    let _controller = Controller::start(&[&format!("--namespaces={}", ns.name)]).await;
    let jobs = api_for(&ns.client, &ns.name, "batch/v1", "Job");

    let expected: [Vec<Value>; 3] = [
        vec![
            pre(),
            var(OLD_VAR, &changes.old_before),
            g(),
            m(),
            var(CM_VAR, &changes.cm),
        ],
        vec![
            pre(),
            var(OLD_VAR, &changes.old_before),
            g(),
            m(),
            var(SECRET_VAR, &changes.secret),
        ],
        vec![pre(), var(OLD_VAR, &changes.old_after), g(), m()],
    ];
    let mut seen: Vec<String> = Vec::new();
    for (step, want) in expected.iter().enumerate() {
        change(&ns, step).await;
        let job = wait_for(&format!("Job number {}", step + 1), WAIT, || async {
            let list = jobs
                .list(&Default::default())
                .await
                .map_err(|e| e.to_string())?;
            let new: Vec<_> = list
                .items
                .into_iter()
                .filter(|j| !seen.contains(j.metadata.name.as_ref().unwrap()))
                .collect();
            match new.as_slice() {
                [job] => Ok(serde_json::to_value(job).unwrap()),
                other => Err(format!("{} new Jobs", other.len())),
            }
        })
        .await;
        seen.push(job["metadata"]["name"].as_str().unwrap().to_string());
        assert_template(
            &job,
            "/spec/template",
            want,
            &format!("Job of change {step}"),
        );
    }
}
