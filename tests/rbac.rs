//! Least privilege, proven against the real API server, one test per mode of the chart:
//! the chart's ServiceAccount and RBAC objects are applied, kube-reloader runs with a token of
//! that ServiceAccount (and the args and env the chart renders), a reload is driven and happens,
//! and a SelfSubjectRulesReview of that identity shows exactly what the mode needs: nothing more
//! than a ServiceAccount without any binding has, apart from the expected rules, per namespace
//! (the release namespace, a watched one and an unrelated one).

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::authorization::v1::SelfSubjectRulesReview;
use kube::Client;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

use common::helm::*;
use common::identity::identity_of;
use common::objects::*;
use common::{Controller, TestNamespace, client, crds, wait_for};

/// (apiGroup, resource, resourceName or "", verb)
type Grant = (String, String, String, String);

fn grant_set(items: &[(&str, &str, &str, &[&str])]) -> BTreeSet<Grant> {
    let mut out = BTreeSet::new();
    for (g, r, n, verbs) in items {
        for v in *verbs {
            out.insert((g.to_string(), r.to_string(), n.to_string(), v.to_string()));
        }
    }
    out
}

/// What a mode turns on, read from the values as an operator would (not from the templates).
struct Needs {
    scoped: bool,
    selector: bool,
    leases: bool,
    tenants: bool,
    argo: bool,
    openshift: bool,
    csi: bool,
    pod_restarts: bool,
    /// `podRestarts.labelledPods`: labelled pods watched, recorded on and evicted.
    labelled_pods: bool,
    /// Declared custom kinds: (API group, resource).
    custom_kinds: Vec<(String, String)>,
    jobs: bool,
    cronjobs: bool,
    configmaps: bool,
    secrets: bool,
}

impl Needs {
    fn of(values: &Value, openshift_served: bool) -> Self {
        let r = &values["reloader"];
        let on = |k: &str| r[k] == true;
        let replicas = r["deployment"]["replicas"].as_i64().unwrap_or(1);
        let sharding = match &r["sharding"]["enabled"] {
            Value::Bool(b) => *b,
            _ => replicas > 1,
        };
        Needs {
            scoped: r["watchGlobally"] == false,
            selector: r["watchGlobally"] != false
                && r["namespaceSelector"]
                    .as_str()
                    .is_some_and(|s| !s.is_empty()),
            leases: on("enableHA") || sharding,
            tenants: r["tenantLabel"].as_str().is_some_and(|s| !s.is_empty()),
            argo: on("isArgoRollouts"),
            openshift: on("isOpenshift") || openshift_served,
            csi: on("enableCSIIntegration"),
            pod_restarts: r["podRestarts"]["enabled"] == true
                || custom_kinds(r).iter().any(|k| k["reloadBy"] == "eviction"),
            labelled_pods: r["podRestarts"]["labelledPods"] == true,
            custom_kinds: custom_kinds(r)
                .iter()
                .map(|k| {
                    let group = k["apiVersion"].as_str().unwrap().split('/').next().unwrap();
                    let kind = k["kind"].as_str().unwrap().to_lowercase();
                    let resource = k["resource"]
                        .as_str()
                        .map_or(format!("{kind}s"), String::from);
                    (group.to_string(), resource)
                })
                .collect(),
            jobs: !on("ignoreJobs"),
            cronjobs: !on("ignoreCronJobs"),
            configmaps: !on("ignoreConfigMaps"),
            secrets: !on("ignoreSecrets"),
        }
    }

    /// In every watched namespace.
    fn watch(&self) -> BTreeSet<Grant> {
        let read: &[&str] = &["get", "list", "watch"];
        let roll: &[&str] = &["get", "list", "watch", "patch"];
        let mut g = grant_set(&[
            ("apps", "deployments", "", roll),
            ("apps", "daemonsets", "", roll),
            ("apps", "statefulsets", "", roll),
            ("", "events", "", &["create", "patch"]),
            ("events.k8s.io", "events", "", &["create", "patch"]),
        ]);
        if self.configmaps {
            g.extend(grant_set(&[("", "configmaps", "", read)]));
        }
        if self.secrets {
            g.extend(grant_set(&[("", "secrets", "", read)]));
        }
        if self.cronjobs {
            g.extend(grant_set(&[
                ("batch", "cronjobs", "", read),
                // cronjob-reload-strategy: patch, and the Job's blockOwnerDeletion.
                ("batch", "cronjobs", "", &["patch"]),
                ("batch", "cronjobs/finalizers", "", &["update"]),
            ]));
        }
        if self.jobs {
            g.extend(grant_set(&[(
                "batch",
                "jobs",
                "",
                &["create", "delete", "get", "list", "watch"],
            )]));
        } else if self.cronjobs {
            g.extend(grant_set(&[("batch", "jobs", "", &["create"])]));
        }
        if self.argo {
            g.extend(grant_set(&[("argoproj.io", "rollouts", "", roll)]));
        }
        if self.openshift {
            g.extend(grant_set(&[(
                "apps.openshift.io",
                "deploymentconfigs",
                "",
                roll,
            )]));
        }
        for (group, resource) in &self.custom_kinds {
            g.extend(grant_set(&[(group, resource, "", roll)]));
        }
        if self.labelled_pods {
            g.extend(grant_set(&[
                ("", "pods", "", &["get", "list", "watch", "patch"]),
                ("", "pods/eviction", "", &["create"]),
            ]));
        } else if self.pod_restarts {
            g.extend(grant_set(&[
                ("", "pods", "", &["list"]),
                ("", "pods/eviction", "", &["create"]),
            ]));
        }
        if self.csi {
            g.extend(grant_set(&[
                (
                    "secrets-store.csi.x-k8s.io",
                    "secretproviderclasses",
                    "",
                    read,
                ),
                (
                    "secrets-store.csi.x-k8s.io",
                    "secretproviderclasspodstatuses",
                    "",
                    read,
                ),
            ]));
        }
        g
    }

    /// In the release namespace (the halts of changes rolled in waves: any config can opt in
    /// with its annotation, so in every mode).
    fn release(&self) -> BTreeSet<Grant> {
        let mut g = grant_set(&[
            ("", "configmaps", "", &["create"]),
            ("", "configmaps", "reloader-meta-info", &["get", "patch"]),
            ("", "configmaps", "kube-reloader-halts", &["get", "patch"]),
        ]);
        if self.leases {
            g.extend(grant_set(&[
                (
                    "",
                    "configmaps",
                    "kube-reloader-shard-assignment",
                    &["get", "list", "watch", "patch"],
                ),
                (
                    "coordination.k8s.io",
                    "leases",
                    "",
                    &["get", "list", "create", "update", "patch", "delete"],
                ),
            ]));
        }
        g
    }

    /// Everything this identity may do in `namespace`.
    fn in_namespace(&self, namespace: &str, release: &str, watched: &[String]) -> BTreeSet<Grant> {
        let mut g = BTreeSet::new();
        if !self.scoped || watched.iter().any(|w| w == namespace) {
            g.extend(self.watch());
        }
        // Namespaces are read cluster-wide with a selector, with HA or sharding (replicas
        // split the cluster's namespaces), and with a tenant label, whatever the scope.
        if self.selector || self.leases || self.tenants {
            g.extend(grant_set(&[("", "namespaces", "", &["list", "watch"])]));
        }
        if namespace == release {
            g.extend(self.release());
        }
        g
    }
}

fn custom_kinds(reloader: &Value) -> Vec<Value> {
    reloader["customKinds"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// What `client` may do in `namespace`, per SelfSubjectRulesReview.
async fn rules_in(client: &Client, namespace: &str) -> Result<BTreeSet<Grant>, String> {
    let review: SelfSubjectRulesReview = serde_json::from_value(json!({
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectRulesReview",
        "spec": {"namespace": namespace}
    }))
    .unwrap();
    let answer = Api::<SelfSubjectRulesReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await
        .map_err(|e| format!("SelfSubjectRulesReview in {namespace}: {e}"))?;
    let status = answer.status.ok_or("no status")?;
    let mut out = BTreeSet::new();
    for rule in status.resource_rules {
        let groups = rule.api_groups.unwrap_or_default();
        let resources = rule.resources.unwrap_or_default();
        let names = match rule.resource_names.unwrap_or_default() {
            n if n.is_empty() => vec![String::new()],
            n => n,
        };
        for g in &groups {
            for r in &resources {
                for n in &names {
                    for v in &rule.verbs {
                        out.insert((g.clone(), r.clone(), n.clone(), v.clone()));
                    }
                }
            }
        }
    }
    Ok(out)
}

/// Waits until `identity` has exactly `expected` beyond what `baseline` (a ServiceAccount with no
/// binding) has in `namespace`; panics with the difference otherwise.
async fn assert_exact_rules(
    identity: &Client,
    baseline: &Client,
    namespace: &str,
    expected: &BTreeSet<Grant>,
    mode: &str,
) {
    wait_for(
        &format!("{mode}: exactly the expected permissions in namespace {namespace}"),
        Duration::from_secs(20),
        || async {
            let base = rules_in(baseline, namespace).await?;
            let got: BTreeSet<Grant> = rules_in(identity, namespace)
                .await?
                .difference(&base)
                .cloned()
                .collect();
            if &got == expected {
                Ok(())
            } else {
                Err(format!(
                    "beyond what is needed: {:?}; missing: {:?}",
                    got.difference(expected).collect::<Vec<_>>(),
                    expected.difference(&got).collect::<Vec<_>>()
                ))
            }
        },
    )
    .await;
}

/// One mode: render, apply the identity's objects, check its permissions, run kube-reloader as
/// that identity and drive reloads of every kind the mode handles.
async fn prove(mode: &str, reloader_values: Value) {
    prove_with(mode, reloader_values, Capabilities::AsServed).await
}

/// What `helm install` saw of the cluster's APIs.
#[derive(PartialEq)]
enum Capabilities {
    AsServed,
    /// The chart was installed before the DeploymentConfig CRD: it granted nothing for them.
    BeforeDeploymentConfigs,
}

async fn prove_with(mode: &str, reloader_values: Value, capabilities: Capabilities) {
    let admin = client().await;
    let release = TestNamespace::new(&format!("rbac-{mode}")).await;
    let workloads = TestNamespace::with_labels(
        &format!("rbac-{mode}-app"),
        json!({"kube-reloader-rbac": release.name}),
    )
    .await;
    let unrelated = TestNamespace::new(&format!("rbac-{mode}-other")).await;

    // The control plane is shared with other tests running now: kube-reloader only looks at
    // configs carrying this test's label and only at workloads using this test's annotation
    // names, so in cluster-wide mode it neither acts on other tests' objects nor lets their
    // controllers act on ours. Neither value changes the RBAC (tests/chart.rs checks that).
    let mut values = json!({ "reloader": reloader_values });
    let key = |what: &str| format!("{}.test/{what}", release.name);
    values["reloader"]["resourceLabelSelector"] =
        json!(format!("kube-reloader-rbac={}", release.name));
    values["reloader"]["custom_annotations"] = json!({
        "auto": key("auto"), "configmap": key("configmap"), "secret": key("secret"),
        "configmap_auto": key("configmap-auto"), "secret_auto": key("secret-auto"),
        "search": key("search"), "match": key("match"), "ignore": key("ignore"),
        "pausePeriod": key("pause-period"), "pauseTime": key("paused-at"),
    });
    // Scoped mode lists the workloads' namespace, except "scoped without a list" (`namespaces:
    // []`): then only the release namespace is watched, and the workloads live there.
    let scoped = values["reloader"]["watchGlobally"] == false;
    let listed = values["reloader"].get("namespaces").is_none();
    if scoped && listed {
        values["reloader"]["namespaces"] = json!([workloads.name]);
    }
    if values["reloader"]["namespaceSelector"] == "SELF" {
        values["reloader"]["namespaceSelector"] =
            json!(format!("kube-reloader-rbac={}", release.name));
    }
    // Capabilities as `helm install` sees them (DeploymentConfigs are served once a test has
    // installed their CRD, and kube-reloader then detects and watches them).
    let hide_openshift = capabilities == Capabilities::BeforeDeploymentConfigs;
    if hide_openshift {
        crds::ensure(&admin, &[crds::DEPLOYMENT_CONFIGS]).await;
    }
    let as_helm_saw = |mut served: Vec<String>| {
        served.retain(|v| !(hide_openshift && v == "apps.openshift.io/v1"));
        served
    };
    let served = as_helm_saw(served_api_versions());
    let openshift_served = served.iter().any(|v| v == "apps.openshift.io/v1");
    let needs = Needs::of(&values, openshift_served);
    if needs.argo || needs.openshift || needs.csi {
        let mut names = Vec::new();
        if needs.argo {
            names.push(crds::ARGO_ROLLOUTS);
        }
        if needs.openshift {
            names.push(crds::DEPLOYMENT_CONFIGS);
        }
        if needs.csi {
            names.push(crds::SECRET_PROVIDER_CLASSES);
            names.push(crds::SECRET_PROVIDER_CLASS_POD_STATUSES);
        }
        crds::ensure(&admin, &names).await;
    }
    for (group, _) in &needs.custom_kinds {
        let crd = match group.as_str() {
            "serving.knative.dev" => crds::KNATIVE_SERVICES,
            "keda.sh" => crds::KEDA_SCALED_JOBS,
            other => panic!("no published CRD known for {other}"),
        };
        crds::ensure(&admin, &[crd]).await;
    }
    // Read again after installing CRDs, and decide what is needed from the same list helm renders
    // with: a parallel test may have installed the DeploymentConfig CRD meanwhile.
    let served = as_helm_saw(served_api_versions());
    let needs = Needs::of(&values, served.iter().any(|v| v == "apps.openshift.io/v1"));
    let api_args = api_version_args(&served);
    let api_args: Vec<&str> = api_args.iter().map(String::as_str).collect();

    let release_name = release.name.clone();
    let objects = template(&release_name, &release.name, &values, &api_args);
    let identity_objects: Vec<&Value> = objects
        .iter()
        .filter(|o| {
            matches!(
                o["kind"].as_str(),
                Some(
                    "ServiceAccount"
                        | "ClusterRole"
                        | "ClusterRoleBinding"
                        | "Role"
                        | "RoleBinding"
                )
            )
        })
        .collect();
    let _cleanup = ClusterScoped(
        identity_objects
            .iter()
            .filter(|o| o["metadata"]["namespace"].is_null())
            .map(|o| {
                (
                    o["kind"].as_str().unwrap().to_string(),
                    o["metadata"]["name"].as_str().unwrap().to_string(),
                )
            })
            .collect(),
    );
    let applied = kubectl_admin(&["apply", "-f", "-"], Some(&as_list(&identity_objects)));
    assert!(
        applied.ok,
        "{mode}: applying the RBAC objects: {}",
        applied.stderr
    );

    // The identity, and a ServiceAccount without any binding to compare with.
    let service_account = one(&objects, "ServiceAccount")["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    create(
        &admin,
        &release.name,
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "unbound"}}),
    )
    .await;
    let me = identity_of(&admin, &release.name, &service_account).await;
    let nobody = identity_of(&admin, &release.name, "unbound").await;
    // As in Reloader's chart, scoped mode always watches the release namespace too.
    let watched = match listed {
        true => vec![workloads.name.clone(), release.name.clone()],
        false => vec![release.name.clone()],
    };
    for ns in [&release.name, &workloads.name, &unrelated.name] {
        let expected = needs.in_namespace(ns, &release.name, &watched);
        assert_exact_rules(&me.client, &nobody.client, ns, &expected, mode).await;
    }

    // Workloads of every kind the mode handles, all using one ConfigMap (or Secret).
    let c = &admin;
    let ns = if listed {
        &workloads.name
    } else {
        &release.name
    };
    let ours = json!({"kube-reloader-rbac": release.name});
    let (config_kind, config_name) = if needs.configmaps {
        let cm = with_labels(configmap("app-config", json!({"k": "v1"})), ours.clone());
        create(c, ns, cm).await;
        ("CONFIGMAP", "app-config")
    } else {
        let sec = with_labels(secret("app-config", json!({"k": "v1"})), ours.clone());
        create(c, ns, sec).await;
        ("SECRET", "app-config")
    };
    let uses = if needs.configmaps {
        env_from_configmap(config_name)
    } else {
        env_from_secret(config_name)
    };
    let auto = json!({ key("auto"): "true" });
    create(
        c,
        ns,
        deployment("web", auto.clone(), pod_spec(uses.clone(), json!([]))),
    )
    .await;
    if needs.cronjobs {
        create(
            c,
            ns,
            cronjob("nightly", auto.clone(), pod_spec(uses.clone(), json!([]))),
        )
        .await;
    }
    let job_uid = if needs.jobs {
        let j = create(
            c,
            ns,
            job("once", auto.clone(), pod_spec(uses.clone(), json!([]))),
        )
        .await;
        j.metadata.uid
    } else {
        None
    };
    if needs.argo {
        let mut rollout = deployment("canary", auto.clone(), pod_spec(uses.clone(), json!([])));
        rollout["apiVersion"] = json!("argoproj.io/v1alpha1");
        rollout["kind"] = json!("Rollout");
        create(c, ns, rollout).await;
    }

    // A labelled bare pod (never scheduled: evicted, it is deleted at once).
    if needs.labelled_pods {
        let mut pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "labelled", "annotations": auto.clone(),
                "labels": {"kube-reloader.io/restart-by": "eviction"}},
            "spec": pod_spec(uses.clone(), json!([]))});
        pod["metadata"]["labels"]["kube-reloader-rbac"] = json!(release.name);
        create(c, ns, pod).await;
    }

    // With a list, a workload in the release namespace is reloaded as well.
    let home = scoped && listed;
    if home {
        create_home(c, &release.name, &ours, &key("auto")).await;
    }

    // kube-reloader with the chart's args and env, as that ServiceAccount.
    let pod = format!("{service_account}-7d9f-x2x4q");
    let env = resolved_env(&objects, &pod, &release.name);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let args = args(&objects);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let controller = Controller::start_as(&me.kubeconfig, &args, &env).await;

    if needs.configmaps {
        set_configmap_data(c, ns, config_name, json!({"k": "v2"})).await;
    } else {
        set_secret_data(c, ns, config_name, json!({"k": "v2"})).await;
    }
    let var = format!("STAKATER_APP_CONFIG_{config_kind}");
    wait_for(
        &format!("{mode}: Deployment web rolled"),
        Duration::from_secs(20),
        || async {
            deployment_env(c, ns, "web", &var)
                .await
                .map(|_| ())
                .ok_or_else(|| format!("no {var} yet"))
        },
    )
    .await;
    if needs.cronjobs {
        wait_for(
            &format!("{mode}: a Job created from CronJob nightly"),
            Duration::from_secs(20),
            || async {
                let jobs = api_for(c, ns, "batch/v1", "Job")
                    .list(&Default::default())
                    .await
                    .map_err(|e| e.to_string())?;
                jobs.items
                    .iter()
                    .any(|j| {
                        j.metadata
                            .owner_references
                            .iter()
                            .flatten()
                            .any(|o| o.kind == "CronJob" && o.name == "nightly")
                    })
                    .then_some(())
                    .ok_or_else(|| format!("{} Jobs, none from nightly", jobs.items.len()))
            },
        )
        .await;
    }
    if needs.jobs {
        wait_for(
            &format!("{mode}: Job once re-created"),
            Duration::from_secs(20),
            || async {
                let j = get(c, ns, "batch/v1", "Job", "once")
                    .await
                    .ok_or("Job once is gone")?;
                let uid = j["metadata"]["uid"].as_str().map(String::from);
                (uid != job_uid)
                    .then_some(())
                    .ok_or_else(|| "still the original Job".to_string())
            },
        )
        .await;
    }
    if needs.argo {
        wait_for(
            &format!("{mode}: Rollout canary rolled"),
            Duration::from_secs(20),
            || async {
                let r = get(c, ns, "argoproj.io/v1alpha1", "Rollout", "canary")
                    .await
                    .ok_or("no Rollout")?;
                env_value(&r, "/spec/template", &var)
                    .map(|_| ())
                    .ok_or_else(|| format!("no {var} yet"))
            },
        )
        .await;
    }
    if needs.labelled_pods {
        wait_for(
            &format!("{mode}: the labelled pod evicted"),
            Duration::from_secs(20),
            || async {
                match get(c, ns, "v1", "Pod", "labelled").await {
                    None => Ok(()),
                    Some(_) => Err("still there".to_string()),
                }
            },
        )
        .await;
    }
    if home {
        set_configmap_data(c, &release.name, "home-config", json!({"k": "v2"})).await;
        let hash = configmap_hash(&[("k", "v2")]);
        wait_for_deployment_env(
            c,
            &release.name,
            "home",
            "STAKATER_HOME_CONFIG_CONFIGMAP",
            &hash,
        )
        .await;
    }
    // The Event about the reload was written (events create), and reloader-meta-info exists.
    wait_for(
        &format!("{mode}: a Reloaded Event on Deployment web"),
        Duration::from_secs(10),
        || async {
            let events = events_about(c, ns, "Deployment", "web").await;
            events
                .iter()
                .any(|e| e.reason == "Reloaded")
                .then_some(())
                .ok_or_else(|| format!("{events:?}"))
        },
    )
    .await;
    assert!(
        get(c, &release.name, "v1", "ConfigMap", "reloader-meta-info")
            .await
            .is_some(),
        "{mode}: reloader-meta-info was not published:\n{}",
        controller.logs()
    );
    if needs.leases {
        let leases = api_for(c, &release.name, "coordination.k8s.io/v1", "Lease")
            .list(&Default::default())
            .await
            .unwrap();
        assert!(
            !leases.items.is_empty(),
            "{mode}: no Lease in the release namespace:\n{}",
            controller.logs()
        );
    }

    // Nothing the controller tried was refused.
    let logs = controller.logs();
    let refused: Vec<&str> = logs
        .lines()
        .filter(|l| l.to_ascii_lowercase().contains("forbidden"))
        .collect();
    assert!(
        refused.is_empty(),
        "{mode}: kube-reloader was refused something:\n{}",
        refused.join("\n")
    );
    if hide_openshift {
        assert!(
            logs.contains("DeploymentConfigs will not be reloaded"),
            "{mode}: no warning that DeploymentConfigs are served but not granted:\n{logs}"
        );
    }
    controller.stop().await;
}

/// A Deployment in the release namespace using a ConfigMap there, both confined to this test.
async fn create_home(c: &Client, release: &str, ours: &Value, auto_key: &str) {
    let cm = with_labels(configmap("home-config", json!({"k": "v1"})), ours.clone());
    create(c, release, cm).await;
    let spec = pod_spec(env_from_configmap("home-config"), json!([]));
    create(
        c,
        release,
        deployment("home", json!({ auto_key: "true" }), spec),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn global_mode_needs_a_cluster_role_and_the_meta_info_configmap() {
    prove("global", json!({})).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scoped_mode_needs_nothing_cluster_wide() {
    prove("scoped", json!({"watchGlobally": false})).await;
}

/// Reloader's single-namespace mode: KUBERNETES_NAMESPACE, a Role in the release namespace only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scoped_mode_without_a_list_watches_the_release_namespace_only() {
    prove(
        "scoped-own",
        json!({"watchGlobally": false, "namespaces": []}),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_selector_adds_reading_namespaces() {
    prove("selector", json!({"namespaceSelector": "SELF"})).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_label_adds_only_reading_namespaces_cluster_wide() {
    prove(
        "scoped-tenants",
        json!({"watchGlobally": false, "tenantLabel": "kube-reloader-rbac"}),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sharding_adds_leases_in_the_release_namespace_only() {
    prove("sharded", json!({"deployment": {"replicas": 2}})).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scoped_sharding_adds_only_reading_namespaces_cluster_wide() {
    prove(
        "scoped-sharded",
        json!({"watchGlobally": false, "sharding": {"enabled": true}}),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enable_ha_adds_leases_in_the_release_namespace_only() {
    prove(
        "ha",
        json!({"enableHA": true, "sharding": {"enabled": false}}),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn argo_openshift_and_csi_add_their_kinds_only() {
    prove(
        "crd-kinds",
        json!({"isArgoRollouts": true, "isOpenshift": true, "enableCSIIntegration": true}),
    )
    .await;
}

/// A served API group the chart did not grant (CRD installed after the chart) is skipped with a
/// warning: the controller still becomes ready and reloads everything else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deployment_configs_served_but_not_granted_are_skipped() {
    prove_with(
        "dc-ungranted",
        json!({}),
        Capabilities::BeforeDeploymentConfigs,
    )
    .await;
}

/// `podRestarts.enabled`: listing pods and creating evictions, in the watched namespaces only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_restarts_add_listing_pods_and_evicting_them_only() {
    prove(
        "pod-restarts",
        json!({"watchGlobally": false, "podRestarts": {"enabled": true}}),
    )
    .await;
}

/// `podRestarts.labelledPods`: watching, getting and patching pods (the restart recorded on
/// each) and evicting them, in the watched namespaces only; a labelled pod is evicted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn labelled_pods_add_watching_recording_on_and_evicting_pods_only() {
    prove(
        "labelled-pods",
        json!({"watchGlobally": false, "podRestarts": {"labelledPods": true}}),
    )
    .await;
}

/// `customKinds`: reading and patching each declared resource, and with `reloadBy: eviction`
/// listing pods and evicting them, in the watched namespaces only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custom_kinds_add_their_resources_only() {
    prove(
        "custom-kinds",
        json!({"watchGlobally": false, "customKinds": [
            {"apiVersion": "serving.knative.dev/v1", "kind": "Service", "reloadBy": "eviction",
             "podLabel": "serving.knative.dev/service"},
            {"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledJob",
             "template": "/spec/jobTargetRef/template"}
        ]}),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ignoring_jobs_and_cronjobs_drops_batch_entirely() {
    prove(
        "no-batch",
        json!({"ignoreJobs": true, "ignoreCronJobs": true, "ignoreConfigMaps": true}),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cronjobs_without_jobs_need_only_job_create() {
    prove(
        "cron-only",
        json!({"ignoreJobs": true, "ignoreSecrets": true}),
    )
    .await;
}
