//! Swapping the image in a Reloader release: kube-reloader runs with exactly the RBAC that
//! stakater/Reloader's chart 2.2.16 grants (written below as facts: resources and verbs per
//! setting, read from that chart's templates), with the args and env that chart renders, as a
//! ServiceAccount token. Every kind the setting handles reloads and no request is refused after
//! start; where a rule that nothing can replace is missing, the process exits naming it.

mod common;

use std::time::{Duration, Instant};

use kube::Client;
use serde_json::{Value, json};

use common::identity::{Identity, identity_of};
use common::objects::*;
use common::reloader_chart::{Values, metadata_rules, reloader_rules};
use common::{Controller, TestNamespace, client, crds, wait_for};

const SERVICE_ACCOUNT: &str = "reloader-reloader";
/// The bar: a Deployment reloaded within this long of its ConfigMap's change.
const RELOAD_WITHIN: Duration = Duration::from_secs(2);

/// The args Reloader's chart renders for these values, plus the two this test adds to stay
/// out of other tests' way (a resource label selector and its own annotation names; neither
/// changes the RBAC).
fn reloader_args(v: Values, release: &str, key: &dyn Fn(&str) -> String) -> Vec<String> {
    let mut args = vec![
        format!("--resource-label-selector=kube-reloader-rbac={release}"),
        format!("--auto-annotation={}", key("auto")),
    ];
    if v.namespace_selector {
        // Reloader's chart wraps the selector in literal double quotes.
        args.push(format!(
            "--namespace-selector=\"kube-reloader-rbac={release}\""
        ));
        args.push("--reload-strategy=annotations".into());
    }
    if v.csi {
        args.push("--enable-csi-integration=true".into());
    }
    if v.argo {
        args.push("--is-Argo-Rollouts=true".into());
        args.push("--reload-on-create=true".into());
    }
    if v.enable_ha {
        args.push("--enable-ha=true".into());
    }
    args
}

/// The env Reloader's chart renders, as the downward API resolves it for `pod`.
fn reloader_env(v: Values, release: &str, pod: &str) -> Vec<(String, String)> {
    let mut env = vec![
        ("RELOADER_NAMESPACE".to_string(), release.to_string()),
        (
            "RELOADER_DEPLOYMENT_NAME".into(),
            "reloader-reloader".into(),
        ),
    ];
    if v.watch_globally_off {
        env.push(("KUBERNETES_NAMESPACE".into(), release.into()));
    }
    if v.enable_ha {
        env.push(("POD_NAME".into(), pod.into()));
        env.push(("POD_NAMESPACE".into(), release.into()));
    }
    env
}

/// The release's namespace, the workloads' namespace and the identity bound to the rules.
struct Release {
    ns: TestNamespace,
    workloads: Option<TestNamespace>,
    identity: Identity,
    cluster_objects: Vec<(String, String)>,
}

impl Release {
    fn workload_ns(&self) -> &str {
        self.workloads.as_ref().map_or(&self.ns.name, |w| &w.name)
    }

    fn key(&self) -> impl Fn(&str) -> String + '_ {
        move |what: &str| format!("{}.test/{what}", self.ns.name)
    }
}

impl Drop for Release {
    fn drop(&mut self) {
        for (kind, name) in &self.cluster_objects {
            let _ =
                common::helm::kubectl_admin(&["delete", kind, name, "--ignore-not-found"], None);
        }
    }
}

/// Creates the namespaces, the ServiceAccount, Reloader's roles with `rules` and their bindings.
async fn install(case: &str, v: Values, rules: Vec<Value>) -> Release {
    let admin = client().await;
    let ns = TestNamespace::new(&format!("rrbac-{case}")).await;
    let workloads = match v.watch_globally_off {
        true => None,
        false => Some(
            TestNamespace::with_labels(
                &format!("rrbac-{case}-app"),
                json!({"kube-reloader-rbac": ns.name}),
            )
            .await,
        ),
    };
    create(&admin, &ns.name, json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": SERVICE_ACCOUNT}})).await;
    let subject =
        json!([{"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": ns.name}]);
    let mut objects = vec![];
    let mut cluster_objects = vec![];
    let role_ref = |kind: &str, name: &str| json!({"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": name});
    if v.watch_globally_off {
        objects.push(
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "reloader-reloader-role", "namespace": ns.name}, "rules": rules}),
        );
        objects.push(
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": "reloader-reloader-role-binding", "namespace": ns.name},
            "roleRef": role_ref("Role", "reloader-reloader-role"), "subjects": subject}),
        );
    } else {
        let name = format!("{}-reloader-role", ns.name);
        objects.push(
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": name}, "rules": rules}),
        );
        objects.push(json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": name}, "roleRef": role_ref("ClusterRole", &name), "subjects": subject}));
        cluster_objects.push(("clusterrole".to_string(), name.clone()));
        cluster_objects.push(("clusterrolebinding".to_string(), name));
    }
    objects.push(json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "reloader-reloader-metadata-role", "namespace": ns.name}, "rules": metadata_rules()}));
    objects.push(
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "reloader-reloader-metadata-role-binding", "namespace": ns.name},
        "roleRef": role_ref("Role", "reloader-reloader-metadata-role"), "subjects": subject}),
    );
    let list = json!({"apiVersion": "v1", "kind": "List", "items": objects});
    let applied = common::helm::kubectl_admin(&["apply", "-f", "-"], Some(&list.to_string()));
    assert!(
        applied.ok,
        "{case}: applying Reloader's RBAC: {}",
        applied.stderr
    );
    let identity = identity_of(&admin, &ns.name, SERVICE_ACCOUNT).await;
    let release = Release {
        ns,
        workloads,
        identity,
        cluster_objects,
    };
    // RBAC is enforced from the authorizer's cache: wait until the binding is in effect.
    let configmaps = api_for(
        &release.identity.client,
        release.workload_ns(),
        "v1",
        "ConfigMap",
    );
    wait_for(
        &format!("{case}: the binding in effect"),
        Duration::from_secs(10),
        || async {
            configmaps
                .list(&Default::default())
                .await
                .map(drop)
                .map_err(|e| e.to_string())
        },
    )
    .await;
    release
}

/// Starts kube-reloader as Reloader's ServiceAccount with Reloader's args and env.
fn launch(release: &Release, v: Values, pod: &str) -> Controller {
    let key = release.key();
    let args = reloader_args(v, &release.ns.name, &key);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut env = reloader_env(v, &release.ns.name, pod);
    env.push((
        "KUBECONFIG".into(),
        release.identity.kubeconfig.display().to_string(),
    ));
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    Controller::launch(&args, &env)
}

/// Workloads of every kind the case handles, all reading ConfigMap `app-config`.
async fn create_workloads(c: &Client, release: &Release, v: Values) {
    let ns = release.workload_ns();
    let ours = json!({"kube-reloader-rbac": release.ns.name});
    create(
        c,
        ns,
        with_labels(configmap("app-config", json!({"k": "v1"})), ours),
    )
    .await;
    let auto = json!({ release.key()("auto"): "true" });
    let spec = || pod_spec(env_from_configmap("app-config"), json!([]));
    create(c, ns, deployment("web", auto.clone(), spec())).await;
    create(c, ns, statefulset("db", auto.clone(), spec())).await;
    create(c, ns, daemonset("agent", auto.clone(), spec())).await;
    create(c, ns, cronjob("nightly", auto.clone(), spec())).await;
    create(c, ns, job("once", auto.clone(), spec())).await;
    if v.argo {
        let mut rollout = deployment("canary", auto.clone(), spec());
        rollout["apiVersion"] = json!("argoproj.io/v1alpha1");
        rollout["kind"] = json!("Rollout");
        create(c, ns, rollout).await;
    }
}

/// Whether `obj`'s pod template carries the reload of `app-config` at `hash`, in either
/// strategy.
fn rolled_to(obj: &Value, pointer: &str, hash: &str) -> bool {
    let by_env = env_value(obj, pointer, "STAKATER_APP_CONFIG_CONFIGMAP").as_deref() == Some(hash);
    let by_annotation = last_reloaded_from(obj, pointer)
        .is_some_and(|a| a["hash"] == hash && a["name"] == "app-config");
    by_env || by_annotation
}

/// Changes `app-config` to `value` and waits until every workload reloaded; returns how long the
/// Deployment took.
async fn change_and_wait(c: &Client, release: &Release, v: Values, value: &str) -> Duration {
    let ns = release.workload_ns();
    let hash = configmap_hash(&[("k", value)]);
    let jobs_before = jobs_of(c, ns, "nightly").await;
    let once_uid = get(c, ns, "batch/v1", "Job", "once")
        .await
        .map(|j| j["metadata"]["uid"].clone());
    let changed = Instant::now();
    set_configmap_data(c, ns, "app-config", json!({"k": value})).await;
    let deployment_took = wait_for(
        "Deployment web reloaded",
        Duration::from_secs(20),
        || async {
            let d = get(c, ns, "apps/v1", "Deployment", "web")
                .await
                .ok_or("no Deployment".to_string())?;
            rolled_to(&d, "/spec/template", &hash)
                .then(|| changed.elapsed())
                .ok_or_else(|| "not yet".to_string())
        },
    )
    .await;
    for (kind, name) in [("StatefulSet", "db"), ("DaemonSet", "agent")] {
        wait_for(
            &format!("{kind} {name} reloaded"),
            Duration::from_secs(20),
            || async {
                let o = get(c, ns, "apps/v1", kind, name)
                    .await
                    .ok_or("gone".to_string())?;
                rolled_to(&o, "/spec/template", &hash)
                    .then_some(())
                    .ok_or_else(|| "not yet".to_string())
            },
        )
        .await;
    }
    if v.argo {
        wait_for(
            "Rollout canary reloaded",
            Duration::from_secs(20),
            || async {
                let o = get(c, ns, "argoproj.io/v1alpha1", "Rollout", "canary")
                    .await
                    .ok_or("gone".to_string())?;
                rolled_to(&o, "/spec/template", &hash)
                    .then_some(())
                    .ok_or_else(|| "not yet".to_string())
            },
        )
        .await;
    }
    wait_for(
        "a Job from CronJob nightly",
        Duration::from_secs(20),
        || async {
            (jobs_of(c, ns, "nightly").await > jobs_before)
                .then_some(())
                .ok_or_else(|| "no new Job".to_string())
        },
    )
    .await;
    wait_for("Job once re-created", Duration::from_secs(20), || async {
        let j = get(c, ns, "batch/v1", "Job", "once")
            .await
            .ok_or("gone".to_string())?;
        (Some(j["metadata"]["uid"].clone()) != once_uid)
            .then_some(())
            .ok_or_else(|| "still the old Job".to_string())
    })
    .await;
    deployment_took
}

async fn jobs_of(c: &Client, ns: &str, cronjob: &str) -> usize {
    let jobs = api_for(c, ns, "batch/v1", "Job")
        .list(&Default::default())
        .await
        .unwrap();
    jobs.items
        .iter()
        .filter(|j| {
            j.metadata
                .owner_references
                .iter()
                .flatten()
                .any(|o| o.name == cronjob)
        })
        .count()
}

/// Nothing the controller asked was refused: no 403 counted, no "forbidden" logged.
async fn assert_nothing_refused(case: &str, controller: &Controller) {
    // The control plane is shared with tests running now: a cluster-wide controller also sees
    // their workloads (and may report their bad annotations in an Event), and the API server
    // answers 403 to a write into a namespace being deleted. That refusal is not RBAC's.
    let logs = controller.logs();
    let (terminating, forbidden): (Vec<&str>, Vec<&str>) = logs
        .lines()
        .filter(|l| l.to_lowercase().contains("forbidden"))
        .partition(|l| l.contains("because it is being terminated"));
    assert!(
        forbidden.is_empty(),
        "{case}: refused:\n{}",
        forbidden.join("\n")
    );
    let metrics = controller.metrics().await;
    let refused: u64 = metrics
        .lines()
        .filter(|l| l.starts_with("kube_reloader_api_requests_total") && l.contains("code=\"403\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum();
    assert!(
        refused <= terminating.len() as u64,
        "{case}: {refused} requests refused, {} of them into terminating namespaces:\n{metrics}",
        terminating.len()
    );
}

/// One case: Reloader's RBAC, args and env; every kind reloads; nothing refused.
async fn prove(case: &str, v: Values) {
    let c = &client().await;
    if v.argo || v.csi {
        crds::ensure(
            c,
            &[
                crds::ARGO_ROLLOUTS,
                crds::SECRET_PROVIDER_CLASSES,
                crds::SECRET_PROVIDER_CLASS_POD_STATUSES,
            ],
        )
        .await;
    }
    let release = install(case, v, reloader_rules(v)).await;
    create_workloads(c, &release, v).await;
    let mut controller = launch(&release, v, "reloader-reloader-7d9f-a");
    controller.wait_ready().await;
    let took = change_and_wait(c, &release, v, "v2").await;
    eprintln!("{case}: Deployment reloaded {took:?} after the change");
    assert!(
        took <= RELOAD_WITHIN,
        "{case}: the Deployment took {took:?}:\n{}",
        controller.logs()
    );
    if v.argo {
        // --reload-on-create: a config created after its user is a change.
        let ns = release.workload_ns();
        let auto = json!({ release.key()("auto"): "true" });
        create(
            c,
            ns,
            deployment(
                "late",
                auto,
                pod_spec(env_from_configmap("late-config"), json!([])),
            ),
        )
        .await;
        let ours = json!({"kube-reloader-rbac": release.ns.name});
        create(
            c,
            ns,
            with_labels(configmap("late-config", json!({"k": "v1"})), ours),
        )
        .await;
        wait_for_deployment_env(
            c,
            ns,
            "late",
            "STAKATER_LATE_CONFIG_CONFIGMAP",
            &configmap_hash(&[("k", "v1")]),
        )
        .await;
    }
    let metrics = controller.metrics().await;
    assert!(
        metrics.contains("kube_reloader_access_fallback{fallback=\"list-deployment\"} 1"),
        "{case}: the list fallback is not exported:\n{metrics}"
    );
    assert!(
        get(c, &release.ns.name, "v1", "ConfigMap", "reloader-meta-info")
            .await
            .is_some(),
        "{case}: no reloader-meta-info:\n{}",
        controller.logs()
    );
    wait_for(
        &format!("{case}: a Reloaded Event"),
        Duration::from_secs(10),
        || async {
            let events = events_about(c, release.workload_ns(), "Deployment", "web").await;
            events
                .iter()
                .any(|e| e.reason == "Reloaded")
                .then_some(())
                .ok_or(format!("{events:?}"))
        },
    )
    .await;
    assert_nothing_refused(case, &controller).await;
    controller.stop().await;
    if case == "default" {
        let findings = lint_controller(&release, v).await;
        let fallbacks: Vec<&str> = findings
            .iter()
            .filter(|f| f["check"] == "rbac-fallback")
            .filter_map(|f| f["message"].as_str())
            .collect();
        assert!(
            fallbacks.iter().any(|m| m.contains("list-deployment")),
            "lint does not report the list fallback: {findings:?}"
        );
        assert!(
            !findings.iter().any(|f| f["check"] == "rbac-missing"),
            "{findings:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn reloader_default_values() {
    prove("default", Values::default()).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn reloader_watch_globally_false() {
    prove(
        "scoped",
        Values {
            watch_globally_off: true,
            ..Default::default()
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn reloader_namespace_selector_with_annotations_strategy() {
    prove(
        "selector",
        Values {
            namespace_selector: true,
            ..Default::default()
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn reloader_csi_argo_and_reload_on_create() {
    prove(
        "csi-argo",
        Values {
            csi: true,
            argo: true,
            ..Default::default()
        },
    )
    .await;
}

/// `enableHA`: Leases `create, get, update` only. One replica leads, the other waits; the
/// leader stopping hands the Lease over and the standby reloads the next change.
#[tokio::test(flavor = "multi_thread")]
async fn reloader_enable_ha_runs_active_standby_on_the_leader_lease() {
    let v = Values {
        enable_ha: true,
        ..Default::default()
    };
    let c = &client().await;
    let release = install("ha", v, reloader_rules(v)).await;
    create_workloads(c, &release, v).await;
    let mut first = launch(&release, v, "reloader-reloader-7d9f-a");
    first.wait_ready().await;
    let mut second = launch(&release, v, "reloader-reloader-7d9f-b");
    let took = change_and_wait(c, &release, v, "v2").await;
    assert!(
        took <= RELOAD_WITHIN,
        "ha: the Deployment took {took:?}:\n{}",
        first.logs()
    );
    // The second replica reviews its access first: on a busy machine after the change landed.
    wait_for_log_line(&second, &["standby"]).await;
    assert_nothing_refused("ha leader", &first).await;
    first.stop().await;
    second.wait_ready().await;
    change_and_wait(c, &release, v, "v3").await;
    assert_nothing_refused("ha standby turned leader", &second).await;
    assert!(
        second.exited().is_none(),
        "the new leader exited:\n{}",
        second.logs()
    );
    second.stop().await;
}

/// A rule no fallback covers (here `patch` and `update` on Deployments): the process exits
/// non-zero naming it instead of running Ready and idle.
#[tokio::test(flavor = "multi_thread")]
async fn a_missing_rule_without_fallback_exits_naming_it() {
    let v = Values::default();
    let mut rules = reloader_rules(v);
    for r in rules.iter_mut() {
        if r["resources"]
            .as_array()
            .unwrap()
            .iter()
            .any(|x| x == "deployments")
        {
            r["verbs"] = json!(["list", "get"]);
        }
    }
    let release = install("missing", v, rules).await;
    let mut controller = launch(&release, v, "reloader-reloader-7d9f-a");
    let started = Instant::now();
    let status = loop {
        if let Some(status) = controller.exited() {
            break status;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "still running:\n{}",
            controller.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        !status.success(),
        "it exited with success:\n{}",
        controller.logs()
    );
    let logs = controller.logs();
    assert!(
        logs.contains("patch deployments.apps in all namespaces"),
        "the missing rule is not named:\n{logs}"
    );
    // lint says the same of the controller's Deployment, from an admin's kubeconfig.
    let findings = lint_controller(&release, v).await;
    let missing = findings.iter().find(|f| f["check"] == "rbac-missing");
    assert!(
        missing.is_some_and(|f| f["severity"] == "error"
            && f["message"]
                .as_str()
                .unwrap()
                .contains("patch deployments.apps")),
        "{findings:?}"
    );
}

/// `kube-reloader lint --from-deployment` on a Deployment of the controller running as Reloader's
/// ServiceAccount with Reloader's args: its findings (JSON).
async fn lint_controller(release: &Release, v: Values) -> Vec<Value> {
    let c = &client().await;
    let key = release.key();
    let args = reloader_args(v, &release.ns.name, &key);
    let mut spec = pod_spec(json!({}), json!([]));
    spec["serviceAccountName"] = json!(SERVICE_ACCOUNT);
    spec["containers"][0]["args"] = json!(args);
    create(
        c,
        &release.ns.name,
        deployment("reloader-reloader", json!({}), spec),
    )
    .await;
    let target = format!("{}/reloader-reloader", release.ns.name);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kube-reloader"))
        .args([
            "lint",
            "-n",
            &release.ns.name,
            "--from-deployment",
            &target,
            "-o",
            "json",
        ])
        .env("KUBECONFIG", common::kubeconfig_path())
        .output()
        .expect("running kube-reloader lint");
    let stdout = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!(
            "lint output is not JSON ({e}): {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}
