//! Every workload kind against the real API server: how a reload is written for each
//! (template patch, Job from a CronJob, Job re-created, Argo `restartAt`), and the CRD-backed
//! kinds behind their flags (Argo Rollouts, OpenShift DeploymentConfig with auto-detection).

mod common;

use std::time::Duration;

use serde_json::{Value, json};

use common::crds;
use common::objects::*;
use common::{Controller, TestNamespace, each_row, wait_for};

const TEMPLATE: &str = "/spec/template";
const ROLLOUT_API: &str = "argoproj.io/v1alpha1";
const DC_API: &str = "apps.openshift.io/v1";
const WAIT: Duration = Duration::from_secs(20);
/// After a canary rolled, how long a workload the same change must not touch is watched.
const SETTLE: Duration = Duration::from_millis(700);
const AUTO: (&str, &str) = ("reloader.stakater.com/auto", "true");

fn auto() -> Value {
    json!({AUTO.0: AUTO.1})
}

fn scope(ns: &TestNamespace) -> String {
    format!("--namespaces={}", ns.name)
}

async fn read(ns: &TestNamespace, api_version: &str, kind: &str, name: &str) -> Value {
    get(&ns.client, &ns.name, api_version, kind, name)
        .await
        .unwrap_or_else(|| panic!("{kind}/{name} does not exist"))
}

/// Waits until env var `var` appears in the pod template of `kind/name` and returns its value.
async fn wait_env(
    ns: &TestNamespace,
    api_version: &str,
    kind: &str,
    name: &str,
    var: &str,
) -> String {
    wait_for(&format!("{var} in {kind}/{name}"), WAIT, || async {
        let obj = get(&ns.client, &ns.name, api_version, kind, name)
            .await
            .ok_or_else(|| format!("{kind}/{name} does not exist"))?;
        env_value(&obj, TEMPLATE, var)
            .ok_or_else(|| format!("no {var} yet; template: {}", obj.pointer(TEMPLATE).unwrap()))
    })
    .await
}

async fn set_data(ns: &TestNamespace, kind: &str, name: &str, data: Value) {
    let field = if kind == "Secret" {
        "stringData"
    } else {
        "data"
    };
    merge_patch(
        &ns.client,
        &ns.name,
        "v1",
        kind,
        name,
        json!({ field: data }),
    )
    .await;
}

fn with_kind(mut obj: Value, api_version: &str, kind: &str) -> Value {
    obj["apiVersion"] = json!(api_version);
    obj["kind"] = json!(kind);
    obj
}

fn rollout(name: &str, annotations: Value, spec: Value) -> Value {
    with_kind(deployment(name, annotations, spec), ROLLOUT_API, "Rollout")
}

/// A DeploymentConfig's selector is a plain label map, not a LabelSelector.
fn deployment_config(name: &str, annotations: Value, spec: Value) -> Value {
    let mut dc = with_kind(
        deployment(name, annotations, spec),
        DC_API,
        "DeploymentConfig",
    );
    dc["spec"]["selector"] = json!({"app": name});
    dc
}

/// A kind whose reload is a patch of its pod template, reading the config one way.
struct PatchedKind {
    prefix: &'static str,
    build: fn(&str, Value, Value) -> Value,
    kind: &'static str,
    config_kind: &'static str,
    uses: Value,
    volumes: Value,
}

/// Each patched kind with another kind of reference: a mounted ConfigMap, a Secret key ref, an
/// envFrom ConfigMap.
fn patched_kinds() -> Vec<PatchedKind> {
    vec![
        PatchedKind {
            prefix: "kinds-deploy",
            build: deployment,
            kind: "Deployment",
            config_kind: "ConfigMap",
            uses: json!({"volumeMounts": [{"name": "creds", "mountPath": "/etc/creds"}]}),
            volumes: json!([{"name": "creds", "configMap": {"name": "app-creds"}}]),
        },
        PatchedKind {
            prefix: "kinds-sts",
            build: statefulset,
            kind: "StatefulSet",
            config_kind: "Secret",
            uses: json!({"env": [{"name": "PW", "valueFrom": {"secretKeyRef": {"name": "app-creds", "key": "pw"}}}]}),
            volumes: json!([]),
        },
        PatchedKind {
            prefix: "kinds-ds",
            build: daemonset,
            kind: "DaemonSet",
            config_kind: "ConfigMap",
            uses: env_from_configmap("app-creds"),
            volumes: json!([]),
        },
    ]
}

/// One opted-in workload of a patched kind gets the hash in its template; its twin without
/// the annotation, referencing the same config, is left alone by the same change.
async fn assert_template_patched(row: PatchedKind) {
    let PatchedKind {
        prefix,
        build,
        kind,
        config_kind,
        uses,
        volumes,
    } = row;
    let ns = TestNamespace::new(prefix).await;
    let c = &ns.client;
    let config = match config_kind {
        "Secret" => secret("app-creds", json!({"pw": "one"})),
        _ => configmap("app-creds", json!({"pw": "one"})),
    };
    create(c, &ns.name, config).await;
    let spec = pod_spec(uses, volumes);
    create(c, &ns.name, build("opted-in", auto(), spec.clone())).await;
    create(c, &ns.name, build("twin", json!({}), spec)).await;
    let _controller = Controller::start(&[&scope(&ns)]).await;
    let twin_before = read(&ns, "apps/v1", kind, "twin").await;

    set_data(&ns, config_kind, "app-creds", json!({"pw": "two"})).await;
    let var = format!("STAKATER_APP_CREDS_{}", config_kind.to_uppercase());
    let seen = wait_env(&ns, "apps/v1", kind, "opted-in", &var).await;
    // Same recipe for both types here: `k=v` of UTF-8 data, sorted, `;`-joined, SHA-1.
    assert_eq!(seen, configmap_hash(&[("pw", "two")]));

    tokio::time::sleep(SETTLE).await;
    let twin_after = read(&ns, "apps/v1", kind, "twin").await;
    assert_eq!(
        twin_after.pointer(TEMPLATE),
        twin_before.pointer(TEMPLATE),
        "the {kind} without an annotation was rolled"
    );
}

#[tokio::test]
async fn each_patched_kind_gets_the_hash_in_its_template_and_its_twin_is_left_alone() {
    each_row(patched_kinds(), |r| r.kind.into(), assert_template_patched).await;
}

#[tokio::test]
async fn cronjob_is_left_alone_and_a_manual_job_is_created_from_it() {
    let ns = TestNamespace::new("kinds-cron").await;
    let c = &ns.client;
    create(c, &ns.name, configmap("job-config", json!({"k": "v1"}))).await;
    create(
        c,
        &ns.name,
        cronjob(
            "nightly",
            auto(),
            pod_spec(env_from_configmap("job-config"), json!([])),
        ),
    )
    .await;
    let _controller = Controller::start(&[&scope(&ns)]).await;
    let before = read(&ns, "batch/v1", "CronJob", "nightly").await;
    let cronjob_uid = before["metadata"]["uid"].as_str().unwrap().to_string();

    set_data(&ns, "ConfigMap", "job-config", json!({"k": "v2"})).await;
    let jobs = api_for(c, &ns.name, "batch/v1", "Job");
    let job = wait_for("a Job created from the CronJob", WAIT, || async {
        let list = jobs
            .list(&Default::default())
            .await
            .map_err(|e| e.to_string())?;
        match list.items.as_slice() {
            [] => Err("no Job yet".to_string()),
            [job] => Ok(serde_json::to_value(job).unwrap()),
            more => Err(format!("{} Jobs, expected one", more.len())),
        }
    })
    .await;

    let meta = &job["metadata"];
    assert_eq!(meta["generateName"], "nightly-", "{job}");
    assert!(meta["name"].as_str().unwrap().starts_with("nightly-"));
    assert_eq!(
        meta["annotations"]["cronjob.kubernetes.io/instantiate"], "manual",
        "{job}"
    );
    let owners = meta["ownerReferences"].as_array().expect("ownerReferences");
    assert_eq!(owners.len(), 1, "{job}");
    let owner = &owners[0];
    assert_eq!(owner["apiVersion"], "batch/v1");
    assert_eq!(owner["kind"], "CronJob");
    assert_eq!(owner["name"], "nightly");
    assert_eq!(owner["uid"], cronjob_uid.as_str());
    assert_eq!(owner["controller"], true);
    assert_eq!(
        env_value(&job, TEMPLATE, "STAKATER_JOB_CONFIG_CONFIGMAP"),
        Some(configmap_hash(&[("k", "v2")])),
        "{job}"
    );

    tokio::time::sleep(SETTLE).await;
    let after = read(&ns, "batch/v1", "CronJob", "nightly").await;
    assert_eq!(
        after["metadata"]["resourceVersion"], before["metadata"]["resourceVersion"],
        "the CronJob itself was modified: {after}"
    );
    assert_eq!(
        after.pointer("/spec/jobTemplate"),
        before.pointer("/spec/jobTemplate")
    );
    let count = jobs.list(&Default::default()).await.unwrap().items.len();
    assert_eq!(count, 1, "one change, one Job");
}

/// `reloader.stakater.com/cronjob-reload-strategy: patch`: the CronJob's job template gets the
/// hash (its next runs read the new value), no Job is created at once, and a Job of it still
/// running is re-created; a finished one is left alone.
#[tokio::test]
async fn cronjob_with_the_patch_strategy_is_patched_and_its_running_job_recreated() {
    let ns = TestNamespace::new("kinds-cron-patch").await;
    let c = &ns.client;
    create(c, &ns.name, configmap("job-config", json!({"k": "v1"}))).await;
    let annotations =
        json!({AUTO.0: AUTO.1, "reloader.stakater.com/cronjob-reload-strategy": "patch"});
    let spec = pod_spec(env_from_configmap("job-config"), json!([]));
    let cron = create(c, &ns.name, cronjob("nightly", annotations, spec.clone())).await;
    let uid = cron.metadata.uid.clone().expect("a uid");
    let owned = |name: &str| {
        let mut job = job(name, json!({}), spec.clone());
        job["metadata"]["ownerReferences"] = json!([{"apiVersion": "batch/v1",
            "kind": "CronJob", "name": "nightly", "uid": uid, "controller": true}]);
        job
    };
    // kube-controller-manager creates the running Job's pod (Pending: no nodes), so it counts
    // as active; the finished one is suspended and never starts.
    create(c, &ns.name, owned("nightly-running")).await;
    let mut finished = owned("nightly-done");
    finished["spec"]["suspend"] = json!(true);
    create(c, &ns.name, finished).await;
    wait_for("the running Job active", WAIT, || async {
        let job = read(&ns, "batch/v1", "Job", "nightly-running").await;
        job.pointer("/status/active")
            .and_then(Value::as_i64)
            .filter(|n| *n > 0)
            .ok_or_else(|| format!("status: {}", job["status"]))
    })
    .await;
    let running_uid =
        read(&ns, "batch/v1", "Job", "nightly-running").await["metadata"]["uid"].clone();
    let done_uid = read(&ns, "batch/v1", "Job", "nightly-done").await["metadata"]["uid"].clone();
    let _controller = Controller::start(&[&scope(&ns)]).await;

    set_data(&ns, "ConfigMap", "job-config", json!({"k": "v2"})).await;
    let hash = configmap_hash(&[("k", "v2")]);
    wait_for("the CronJob's job template patched", WAIT, || async {
        let cron = read(&ns, "batch/v1", "CronJob", "nightly").await;
        match env_value(
            &cron,
            "/spec/jobTemplate/spec/template",
            "STAKATER_JOB_CONFIG_CONFIGMAP",
        ) {
            Some(v) if v == hash => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    wait_for("the running Job re-created", WAIT, || async {
        let job = get(c, &ns.name, "batch/v1", "Job", "nightly-running")
            .await
            .ok_or("between delete and create")?;
        (job["metadata"]["uid"] != running_uid)
            .then_some(())
            .ok_or_else(|| "still the old Job".to_string())
    })
    .await;
    tokio::time::sleep(SETTLE).await;
    let jobs = api_for(c, &ns.name, "batch/v1", "Job")
        .list(&Default::default())
        .await
        .unwrap();
    let names: Vec<_> = jobs
        .items
        .iter()
        .filter_map(|j| j.metadata.name.clone())
        .collect();
    assert_eq!(names.len(), 2, "no Job created at once: {names:?}");
    assert_eq!(
        read(&ns, "batch/v1", "Job", "nightly-done").await["metadata"]["uid"],
        done_uid,
        "a Job not running is left alone"
    );
}

#[tokio::test]
async fn job_is_recreated_with_the_same_name_and_the_new_template() {
    let ns = TestNamespace::new("kinds-job").await;
    let c = &ns.client;
    create(c, &ns.name, secret("job-secret", json!({"token": "a"}))).await;
    create(
        c,
        &ns.name,
        job(
            "migrate",
            auto(),
            pod_spec(env_from_secret("job-secret"), json!([])),
        ),
    )
    .await;
    let _controller = Controller::start(&[&scope(&ns)]).await;
    let before = read(&ns, "batch/v1", "Job", "migrate").await;
    let old_uid = before["metadata"]["uid"].as_str().unwrap().to_string();

    set_data(&ns, "Secret", "job-secret", json!({"token": "b"})).await;
    let job = wait_for("Job migrate re-created", WAIT, || async {
        let job = get(c, &ns.name, "batch/v1", "Job", "migrate")
            .await
            .ok_or_else(|| "no Job migrate (between delete and create)".to_string())?;
        if job["metadata"]["uid"] == old_uid.as_str() {
            return Err("still the old Job".to_string());
        }
        Ok(job)
    })
    .await;

    let new_uid = job["metadata"]["uid"].as_str().unwrap();
    assert_eq!(
        env_value(&job, TEMPLATE, "STAKATER_JOB_SECRET_SECRET"),
        Some(configmap_hash(&[("token", "b")])),
        "{job}"
    );
    assert_eq!(job["metadata"]["annotations"][AUTO.0], AUTO.1, "{job}");
    // The API server generated a fresh selector for the new uid: the old one was cleared.
    assert_eq!(
        job["spec"]["selector"]["matchLabels"]["batch.kubernetes.io/controller-uid"], new_uid,
        "{job}"
    );
    assert_eq!(
        job["spec"]["template"]["metadata"]["labels"]["batch.kubernetes.io/controller-uid"],
        new_uid,
        "{job}"
    );
}

#[tokio::test]
async fn ignored_workload_types_leave_jobs_and_cronjobs_alone() {
    let ns = TestNamespace::new("kinds-ignored").await;
    let c = &ns.client;
    create(c, &ns.name, configmap("shared", json!({"k": "v1"}))).await;
    let spec = pod_spec(env_from_configmap("shared"), json!([]));
    create(c, &ns.name, job("once", auto(), spec.clone())).await;
    create(c, &ns.name, cronjob("nightly", auto(), spec.clone())).await;
    create(c, &ns.name, deployment("canary", auto(), spec)).await;
    let _controller =
        Controller::start(&[&scope(&ns), "--ignored-workload-types=jobs,cronjobs"]).await;
    let job_before = read(&ns, "batch/v1", "Job", "once").await;

    set_data(&ns, "ConfigMap", "shared", json!({"k": "v2"})).await;
    wait_env(
        &ns,
        "apps/v1",
        "Deployment",
        "canary",
        "STAKATER_SHARED_CONFIGMAP",
    )
    .await;

    tokio::time::sleep(SETTLE).await;
    let jobs = api_for(c, &ns.name, "batch/v1", "Job")
        .list(&Default::default())
        .await
        .unwrap();
    let names: Vec<_> = jobs.items.iter().map(|j| j.metadata.name.clone()).collect();
    assert_eq!(names, [Some("once".to_string())], "no Job from the CronJob");
    let job_after = read(&ns, "batch/v1", "Job", "once").await;
    assert_eq!(
        job_after["metadata"]["uid"], job_before["metadata"]["uid"],
        "the Job was re-created"
    );
}

/// A CRD-backed kind the controller reloads through its template once it handles the kind: by
/// flag, or because the kind's API is served.
struct CrdKind {
    case: &'static str,
    prefix: &'static str,
    crd: &'static str,
    flags: &'static [&'static str],
    config: Value,
    /// The config's data after the change.
    change: Value,
    workload: Value,
    var: &'static str,
    hash: String,
    /// What else must hold once the var is there, on the workload or the controller.
    then: fn(&Value, &Controller),
}

fn crd_kinds() -> Vec<CrdKind> {
    vec![
        CrdKind {
            case: "Rollout with --is-Argo-Rollouts",
            prefix: "kinds-argo",
            crd: crds::ARGO_ROLLOUTS,
            flags: &["--is-Argo-Rollouts=true"],
            config: configmap("web-config", json!({"k": "v1"})),
            change: json!({"k": "v2"}),
            workload: rollout(
                "web",
                auto(),
                pod_spec(env_from_configmap("web-config"), json!([])),
            ),
            var: "STAKATER_WEB_CONFIG_CONFIGMAP",
            hash: configmap_hash(&[("k", "v2")]),
            then: |obj, _| assert!(obj.pointer("/spec/restartAt").is_none(), "{obj}"),
        },
        CrdKind {
            case: "DeploymentConfig with --is-openshift",
            prefix: "kinds-dc",
            crd: crds::DEPLOYMENT_CONFIGS,
            flags: &["--is-openshift=true"],
            config: secret("dc-secret", json!({"pw": "one"})),
            change: json!({"pw": "two"}),
            workload: deployment_config(
                "legacy",
                json!({"secret.reloader.stakater.com/reload": "dc-secret"}),
                pod_spec(
                    json!({"volumeMounts": [{"name": "s", "mountPath": "/s"}]}),
                    json!([{"name": "s", "secret": {"secretName": "dc-secret"}}]),
                ),
            ),
            var: "STAKATER_DC_SECRET_SECRET",
            hash: configmap_hash(&[("pw", "two")]),
            then: |_, _| {},
        },
        // The CRD makes `apps.openshift.io` appear in discovery, which the controller checks at
        // start.
        CrdKind {
            case: "DeploymentConfig without the flag, its API served",
            prefix: "kinds-dc-detect",
            crd: crds::DEPLOYMENT_CONFIGS,
            flags: &[],
            config: configmap("dc-config", json!({"k": "v1"})),
            change: json!({"k": "v2"}),
            workload: deployment_config(
                "legacy",
                auto(),
                pod_spec(env_from_configmap("dc-config"), json!([])),
            ),
            var: "STAKATER_DC_CONFIG_CONFIGMAP",
            hash: configmap_hash(&[("k", "v2")]),
            then: |_, controller| {
                let logs = controller.logs();
                assert!(logs.contains("apps.openshift.io is served"), "{logs}");
            },
        },
    ]
}

fn text(v: &Value) -> &str {
    v.as_str().unwrap_or_else(|| panic!("{v} is not a string"))
}

async fn assert_crd_kind_reloaded(row: CrdKind) {
    let ns = TestNamespace::new(row.prefix).await;
    let c = &ns.client;
    crds::ensure(c, &[row.crd]).await;
    create(c, &ns.name, row.config.clone()).await;
    create(c, &ns.name, row.workload.clone()).await;
    let scope = scope(&ns);
    let args: Vec<&str> = [scope.as_str()]
        .into_iter()
        .chain(row.flags.iter().copied())
        .collect();
    let controller = Controller::start(&args).await;

    let (config_kind, config) = (
        text(&row.config["kind"]),
        text(&row.config["metadata"]["name"]),
    );
    set_data(&ns, config_kind, config, row.change).await;
    let w = &row.workload;
    let (api, kind, name) = (
        text(&w["apiVersion"]),
        text(&w["kind"]),
        text(&w["metadata"]["name"]),
    );
    let seen = wait_env(&ns, api, kind, name, row.var).await;
    assert_eq!(seen, row.hash);
    (row.then)(&read(&ns, api, kind, name).await, &controller);
}

#[tokio::test]
async fn each_crd_kind_is_patched_once_handled() {
    each_row(crd_kinds(), |r| r.case.into(), assert_crd_kind_reloaded).await;
}

#[tokio::test]
async fn argo_rollout_restart_strategy_sets_restart_at_and_keeps_the_template() {
    let ns = TestNamespace::new("kinds-argo-restart").await;
    let c = &ns.client;
    crds::ensure(c, &[crds::ARGO_ROLLOUTS]).await;
    create(c, &ns.name, configmap("web-config", json!({"k": "v1"}))).await;
    create(
        c,
        &ns.name,
        rollout(
            "web",
            json!({AUTO.0: AUTO.1, "reloader.stakater.com/rollout-strategy": "restart"}),
            pod_spec(env_from_configmap("web-config"), json!([])),
        ),
    )
    .await;
    let _controller = Controller::start(&[&scope(&ns), "--is-Argo-Rollouts=true"]).await;
    let before = read(&ns, ROLLOUT_API, "Rollout", "web").await;
    let started = jiff::Timestamp::now() - jiff::SignedDuration::from_secs(5);

    set_data(&ns, "ConfigMap", "web-config", json!({"k": "v2"})).await;
    let after = wait_for("spec.restartAt on Rollout web", WAIT, || async {
        let obj = read(&ns, ROLLOUT_API, "Rollout", "web").await;
        match obj.pointer("/spec/restartAt") {
            Some(_) => Ok(obj),
            None => Err(format!("spec: {}", obj["spec"])),
        }
    })
    .await;
    let restart_at: jiff::Timestamp = after["spec"]["restartAt"]
        .as_str()
        .expect("restartAt is a string")
        .parse()
        .expect("restartAt is an RFC 3339 time");
    assert!(restart_at > started, "restartAt {restart_at} is not recent");
    assert_eq!(
        after.pointer(TEMPLATE),
        before.pointer(TEMPLATE),
        "the restart strategy must not touch the template"
    );
}

/// An Argo Rollout whose pod template is a Deployment's (`spec.workloadRef`): what that
/// template uses restarts the Rollout (`spec.restartAt`, no template written into it, the
/// Deployment untouched), including after the Deployment's template is edited to use another
/// config (upstream PR #1118).
#[tokio::test]
async fn argo_rollout_with_a_workload_ref_restarts_for_what_its_deployments_template_uses() {
    let ns = TestNamespace::new("kinds-argo-ref").await;
    let c = &ns.client;
    crds::ensure(c, &[crds::ARGO_ROLLOUTS]).await;
    create(c, &ns.name, configmap("first", json!({"k": "v1"}))).await;
    create(c, &ns.name, configmap("second", json!({"k": "v1"}))).await;
    let mut template = deployment(
        "web-template",
        json!({}),
        pod_spec(env_from_configmap("first"), json!([])),
    );
    template["spec"]["replicas"] = json!(0);
    create(c, &ns.name, template).await;
    let mut web = rollout("web", auto(), json!({}));
    web["spec"] = json!({"replicas": 1,
        "selector": {"matchLabels": {"app": "web"}},
        "workloadRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web-template"}});
    create(c, &ns.name, web).await;
    let _controller = Controller::start(&[&scope(&ns), "--is-Argo-Rollouts=true"]).await;
    let restarted_after = |since: Option<Value>| {
        let ns = &ns;
        async move {
            wait_for("spec.restartAt on Rollout web", WAIT, || async {
                let obj = read(ns, ROLLOUT_API, "Rollout", "web").await;
                match obj.pointer("/spec/restartAt") {
                    Some(at) if Some(at) != since.as_ref() => Ok(obj),
                    _ => Err(format!("spec: {}", obj["spec"])),
                }
            })
            .await
        }
    };

    set_data(&ns, "ConfigMap", "first", json!({"k": "v2"})).await;
    let after = restarted_after(None).await;
    assert!(
        after.pointer(TEMPLATE).is_none(),
        "no template written: {after}"
    );
    let deployment = read(&ns, "apps/v1", "Deployment", "web-template").await;
    assert_eq!(
        deployment["metadata"]["generation"], 1,
        "the Deployment is left alone"
    );

    // The Deployment's template now reads `second`: its change restarts the Rollout.
    merge_patch(c, &ns.name, "apps/v1", "Deployment", "web-template",
        json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10", "envFrom": [{"configMapRef": {"name": "second"}}]}]}}}})).await;
    tokio::time::sleep(SETTLE).await;
    set_data(&ns, "ConfigMap", "second", json!({"k": "v2"})).await;
    restarted_after(after.pointer("/spec/restartAt").cloned()).await;
}

#[tokio::test]
async fn argo_rollouts_are_left_alone_without_the_flag() {
    let ns = TestNamespace::new("kinds-argo-off").await;
    let c = &ns.client;
    crds::ensure(c, &[crds::ARGO_ROLLOUTS]).await;
    create(c, &ns.name, configmap("web-config", json!({"k": "v1"}))).await;
    let spec = pod_spec(env_from_configmap("web-config"), json!([]));
    create(c, &ns.name, rollout("web", auto(), spec.clone())).await;
    create(c, &ns.name, deployment("canary", auto(), spec)).await;
    let _controller = Controller::start(&[&scope(&ns)]).await;
    let before = read(&ns, ROLLOUT_API, "Rollout", "web").await;

    set_data(&ns, "ConfigMap", "web-config", json!({"k": "v2"})).await;
    wait_env(
        &ns,
        "apps/v1",
        "Deployment",
        "canary",
        "STAKATER_WEB_CONFIG_CONFIGMAP",
    )
    .await;

    tokio::time::sleep(SETTLE).await;
    let after = read(&ns, ROLLOUT_API, "Rollout", "web").await;
    assert_eq!(
        after["metadata"]["resourceVersion"], before["metadata"]["resourceVersion"],
        "a Rollout was written without --is-Argo-Rollouts: {after}"
    );
}
