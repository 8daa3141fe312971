//! The install artifacts: the Helm chart (lint, what each Reloader value renders to, the schema,
//! every rendered object accepted by the real API server), the plain manifests and kustomize
//! base generated from it, and the Dockerfile (its build step is `make binary`'s).
//!
//! Helm is built once from its Go module by hack/helm.sh; the server-side checks use the local
//! control plane like every integration test.

// The Reloader-shaped values document below is one large json! literal.
#![recursion_limit = "256"]

mod common;

use std::collections::BTreeSet;
use std::process::Command;

use serde_json::{Value, json};

use common::crds;
use common::helm::*;
use common::{TestNamespace, client};

const RELEASE: &str = "kr";
const NS: &str = "kube-reloader";

fn render(values: Value) -> Vec<Value> {
    template(RELEASE, NS, &values, &[])
}

fn has_arg(objects: &[Value], arg: &str) -> bool {
    args(objects).iter().any(|a| a == arg)
}

fn arg_with_prefix(objects: &[Value], prefix: &str) -> Option<String> {
    args(objects).into_iter().find(|a| a.starts_with(prefix))
}

/// Every (apiGroup, resource, resourceName, verb) a list of RBAC rules grants.
fn grants(rules: &Value) -> BTreeSet<(String, String, String, String)> {
    let mut out = BTreeSet::new();
    let strs = |v: &Value| -> Vec<String> {
        v.as_array()
            .map(|a| a.iter().map(|s| s.as_str().unwrap().to_string()).collect())
            .unwrap_or_default()
    };
    for rule in rules.as_array().into_iter().flatten() {
        let names = match strs(&rule["resourceNames"]) {
            n if n.is_empty() => vec![String::new()],
            n => n,
        };
        for g in strs(&rule["apiGroups"]) {
            for r in strs(&rule["resources"]) {
                for n in &names {
                    for v in strs(&rule["verbs"]) {
                        out.insert((g.clone(), r.clone(), n.clone(), v));
                    }
                }
            }
        }
    }
    out
}

fn grant_set(items: &[(&str, &str, &str, &[&str])]) -> BTreeSet<(String, String, String, String)> {
    let mut out = BTreeSet::new();
    for (g, r, n, verbs) in items {
        for v in *verbs {
            out.insert((g.to_string(), r.to_string(), n.to_string(), v.to_string()));
        }
    }
    out
}

fn resources_granted(rules: &Value) -> BTreeSet<String> {
    grants(rules)
        .into_iter()
        .map(|(g, r, _, _)| if g.is_empty() { r } else { format!("{r}.{g}") })
        .collect()
}

fn role_in<'a>(objects: &'a [Value], namespace: &str) -> Option<&'a Value> {
    of_kind(objects, "Role")
        .into_iter()
        .find(|r| r["metadata"]["namespace"] == namespace)
}

// ---- lint and defaults -----------------------------------------------------------------------

#[test]
fn helm_lint_passes_with_defaults_and_with_everything_on() {
    let chart = chart_dir();
    let out = run(helm(), &["lint", "--strict", chart.to_str().unwrap()], None);
    assert!(out.ok, "helm lint failed:\n{}{}", out.stdout, out.stderr);

    let path = std::env::temp_dir().join(format!("kr-lint-{}.json", std::process::id()));
    std::fs::write(&path, everything_on().to_string()).unwrap();
    let out = run(
        helm(),
        &[
            "lint",
            "--strict",
            chart.to_str().unwrap(),
            "-f",
            path.to_str().unwrap(),
        ],
        None,
    );
    let _ = std::fs::remove_file(&path);
    assert!(
        out.ok,
        "helm lint (everything on) failed:\n{}{}",
        out.stdout, out.stderr
    );
}

#[test]
fn defaults_render_a_hardened_single_replica_watching_everything() {
    let objects = render(json!({}));
    let got: BTreeSet<String> = kinds(&objects).into_iter().collect();
    let want: BTreeSet<String> = [
        "ServiceAccount/kube-reloader/kr-kube-reloader",
        "ClusterRole//kr-kube-reloader",
        "ClusterRoleBinding//kr-kube-reloader",
        "Role/kube-reloader/kr-kube-reloader",
        "RoleBinding/kube-reloader/kr-kube-reloader",
        "Deployment/kube-reloader/kr-kube-reloader",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    assert_eq!(got, want);

    let deployment = one(&objects, "Deployment");
    assert_eq!(deployment["spec"]["replicas"], 1);
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(pod["serviceAccountName"], "kr-kube-reloader");
    assert_eq!(pod["securityContext"]["runAsUser"], 65534);
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert!(
        pod.get("affinity").is_none(),
        "no anti-affinity for one replica"
    );
    let c = container(&objects);
    assert_eq!(c["image"], "ghcr.io/kube-reloader/kube-reloader:0.1.0");
    assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], false);
    assert_eq!(c["securityContext"]["capabilities"]["drop"], json!(["ALL"]));
    assert_eq!(c["ports"][0]["containerPort"], 9090);
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/live");
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/ready");
    assert_eq!(
        args(&objects),
        [
            "--log-level=info",
            "--max-patches-per-second=50",
            "--patch-burst=100",
            "--min-reload-interval=0s",
            "--max-retry-backoff=30s"
        ]
    );
    let env_names: Vec<String> = env(&objects).into_iter().map(|(n, _)| n).collect();
    assert_eq!(
        env_names,
        ["RELOADER_NAMESPACE", "RELOADER_DEPLOYMENT_NAME"]
    );

    // Cluster-wide: configs, workloads, batch, events; no namespaces, leases or CRD kinds.
    let cluster = &one(&objects, "ClusterRole")["rules"];
    assert_eq!(
        grants(cluster),
        grant_set(&[
            ("", "configmaps", "", &["get", "list", "watch"]),
            ("", "secrets", "", &["get", "list", "watch"]),
            (
                "apps",
                "deployments",
                "",
                &["get", "list", "watch", "patch"]
            ),
            ("apps", "daemonsets", "", &["get", "list", "watch", "patch"]),
            (
                "apps",
                "statefulsets",
                "",
                &["get", "list", "watch", "patch"]
            ),
            ("batch", "cronjobs", "", &["get", "list", "watch", "patch"]),
            ("batch", "cronjobs/finalizers", "", &["update"]),
            (
                "batch",
                "jobs",
                "",
                &["create", "delete", "get", "list", "watch"]
            ),
            ("", "events", "", &["create", "patch"]),
            ("events.k8s.io", "events", "", &["create", "patch"]),
        ])
    );
    // Own namespace: the meta-info ConfigMap and the kept halts only.
    let own = &role_in(&objects, NS).expect("a Role in the release namespace")["rules"];
    assert_eq!(
        grants(own),
        grant_set(&[
            ("", "configmaps", "", &["create"]),
            ("", "configmaps", "reloader-meta-info", &["get", "patch"]),
            ("", "configmaps", "kube-reloader-halts", &["get", "patch"]),
        ])
    );
}

// ---- namespaces ------------------------------------------------------------------------------

#[test]
fn scoped_mode_gets_one_role_per_watched_namespace_and_nothing_cluster_wide() {
    let objects = render(json!({"reloader": {
        "watchGlobally": false,
        "namespaces": ["team-b", " team-a ", "team-b"],
    }}));
    assert!(of_kind(&objects, "ClusterRole").is_empty());
    assert!(of_kind(&objects, "ClusterRoleBinding").is_empty());
    // As Reloader's chart (reloader-watchNamespaces): the release namespace is always watched.
    assert!(
        has_arg(&objects, &format!("--namespaces={NS},team-a,team-b")),
        "{:?}",
        args(&objects)
    );
    assert!(
        !env(&objects)
            .iter()
            .any(|(n, _)| n == "KUBERNETES_NAMESPACE")
    );
    for ns in ["team-a", "team-b", NS] {
        let role = role_in(&objects, ns).unwrap_or_else(|| panic!("no Role in {ns}"));
        let res = resources_granted(&role["rules"]);
        assert!(res.contains("configmaps") && res.contains("deployments.apps"));
        assert!(
            res.contains("jobs.batch") && res.contains("events"),
            "{ns}: {res:?}"
        );
        assert!(!res.contains("namespaces"), "{res:?}");
        let binding = of_kind(&objects, "RoleBinding")
            .into_iter()
            .find(|b| b["metadata"]["namespace"] == ns)
            .unwrap_or_else(|| panic!("no RoleBinding in {ns}"));
        assert_eq!(binding["subjects"][0]["namespace"], NS);
    }
    assert_eq!(of_kind(&objects, "Role").len(), 3);
    // reloader-meta-info is published in the release namespace only.
    let meta = (
        "".into(),
        "configmaps".into(),
        "reloader-meta-info".into(),
        "patch".into(),
    );
    assert!(grants(&role_in(&objects, NS).unwrap()["rules"]).contains(&meta));
    assert!(!grants(&role_in(&objects, "team-a").unwrap()["rules"]).contains(&meta));

    // A comma separated string works too (Reloader's chart accepts both); listing the release
    // namespace changes nothing; `namespace` moves the release namespace.
    let objects = render(json!({"reloader": {"watchGlobally": false, "namespaces": "y, x"}}));
    assert!(has_arg(&objects, &format!("--namespaces={NS},x,y")));
    let objects = render(json!({"reloader": {"watchGlobally": false, "namespaces": [NS, "a"]}}));
    assert!(has_arg(&objects, &format!("--namespaces=a,{NS}")));
    assert_eq!(of_kind(&objects, "Role").len(), 2);
    let objects = render(json!({"namespace": "ops",
        "reloader": {"watchGlobally": false, "namespaces": ["a"]}}));
    assert!(has_arg(&objects, "--namespaces=a,ops"));
    assert!(role_in(&objects, NS).is_none() && role_in(&objects, "ops").is_some());
}

#[test]
fn scoped_mode_without_a_list_watches_the_release_namespace_through_kubernetes_namespace() {
    let objects = render(json!({"reloader": {"watchGlobally": false}}));
    // Reloader's single-namespace mode: no --namespaces, the pod's own namespace.
    assert!(arg_with_prefix(&objects, "--namespaces").is_none());
    let (_, source) = env(&objects)
        .into_iter()
        .find(|(n, _)| n == "KUBERNETES_NAMESPACE")
        .expect("KUBERNETES_NAMESPACE");
    assert_eq!(
        source,
        json!({"fieldRef": {"fieldPath": "metadata.namespace"}})
    );
    assert!(of_kind(&objects, "ClusterRole").is_empty());
    assert_eq!(of_kind(&objects, "Role").len(), 1);
    let res = resources_granted(&role_in(&objects, NS).unwrap()["rules"]);
    assert!(res.contains("secrets") && res.contains("jobs.batch") && res.contains("events"));
    // Global mode never sets it (the binary would watch one namespace only).
    assert!(
        !env(&render(json!({})))
            .iter()
            .any(|(n, _)| n == "KUBERNETES_NAMESPACE")
    );
}

#[test]
fn ignore_namespaces_only_with_watch_globally() {
    let ignore = json!("kube-system,kube-public");
    let objects = render(json!({"reloader": {"ignoreNamespaces": ignore}}));
    assert!(has_arg(
        &objects,
        "--namespaces-to-ignore=kube-system,kube-public"
    ));
    for scoped in [
        json!({"ignoreNamespaces": ignore, "watchGlobally": false}),
        json!({"ignoreNamespaces": ignore, "watchGlobally": false, "namespaces": ["a"]}),
    ] {
        let objects = render(json!({ "reloader": scoped }));
        assert!(
            arg_with_prefix(&objects, "--namespaces-to-ignore").is_none(),
            "{scoped}: {:?}",
            args(&objects)
        );
    }
}

#[test]
fn namespaces_with_watch_globally_is_an_error_not_a_surprise() {
    let err = template_yaml(
        RELEASE,
        NS,
        &json!({"reloader": {"namespaces": ["a"]}}),
        &[],
    )
    .unwrap_err();
    assert!(
        err.contains("reloader.namespaces is set but reloader.watchGlobally is true"),
        "{err}"
    );
}

#[test]
fn namespace_selector_adds_namespace_reads_only_in_global_mode() {
    let objects = render(json!({"reloader": {"namespaceSelector": "team=a, env in (prod,stage)"}}));
    assert!(has_arg(
        &objects,
        "--namespace-selector=team=a, env in (prod,stage)"
    ));
    let cluster = grants(&one(&objects, "ClusterRole")["rules"]);
    assert!(cluster.contains(&("".into(), "namespaces".into(), "".into(), "list".into())));
    assert!(cluster.contains(&("".into(), "namespaces".into(), "".into(), "watch".into())));
    assert!(!cluster.contains(&("".into(), "namespaces".into(), "".into(), "get".into())));

    // Scoped mode ignores the selector, as Reloader's chart does.
    let objects = render(json!({"reloader": {
        "namespaceSelector": "team=a", "watchGlobally": false, "namespaces": ["a"]}}));
    assert!(arg_with_prefix(&objects, "--namespace-selector").is_none());
    assert!(of_kind(&objects, "ClusterRole").is_empty());
}

/// What confines a controller to some configs and workloads does not change what it may do.
#[test]
fn label_selectors_and_annotation_names_do_not_change_rbac() {
    let rbac = |objects: Vec<Value>| -> Vec<Value> {
        objects
            .into_iter()
            .filter(|o| o["kind"].as_str().is_some_and(|k| k.contains("Role")))
            .collect()
    };
    let plain = rbac(render(json!({})));
    let confined = rbac(render(json!({"reloader": {
        "resourceLabelSelector": "team=a",
        "custom_annotations": {"auto": "acme.io/auto", "pausePeriod": "acme.io/pause"},
        "ignoreNamespaces": "kube-system"}})));
    assert_eq!(plain, confined);
}

// ---- replicas, HA and sharding ---------------------------------------------------------------

#[test]
fn more_than_one_replica_turns_on_sharding_with_pod_identity_and_anti_affinity() {
    let objects = render(json!({"reloader": {"deployment": {"replicas": 3}}}));
    assert_eq!(one(&objects, "Deployment")["spec"]["replicas"], 3);
    for arg in [
        "--sharding=true",
        "--lease-duration=15s",
        "--renew-deadline=10s",
        "--retry-period=2s",
        "--server-side-sharding=auto",
    ] {
        assert!(
            has_arg(&objects, arg),
            "{arg} missing: {:?}",
            args(&objects)
        );
    }
    assert!(!has_arg(&objects, "--enable-ha=true"));
    let env = env(&objects);
    for (name, path) in [
        ("POD_NAME", "metadata.name"),
        ("POD_NAMESPACE", "metadata.namespace"),
    ] {
        let (_, v) = env
            .iter()
            .find(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("{name} missing"));
        assert_eq!(v["fieldRef"]["fieldPath"], path);
    }
    let anti = &one(&objects, "Deployment")["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
        ["preferredDuringSchedulingIgnoredDuringExecution"][0];
    assert_eq!(
        anti["podAffinityTerm"]["topologyKey"],
        "kubernetes.io/hostname"
    );
    assert_eq!(
        anti["podAffinityTerm"]["labelSelector"]["matchLabels"]["app.kubernetes.io/instance"],
        RELEASE
    );
    // Leases and the shard assignment, in the release namespace only.
    let own = grants(&role_in(&objects, NS).unwrap()["rules"]);
    for verb in ["get", "list", "create", "update", "patch", "delete"] {
        assert!(own.contains(&(
            "coordination.k8s.io".into(),
            "leases".into(),
            "".into(),
            verb.into()
        )));
    }
    assert!(own.contains(&(
        "".into(),
        "configmaps".into(),
        "kube-reloader-shard-assignment".into(),
        "watch".into()
    )));
    // Replicas split the cluster's namespaces: each reads the Namespace list (and leases stay
    // namespaced).
    let cluster = resources_granted(&one(&objects, "ClusterRole")["rules"]);
    assert!(!cluster.contains("leases.coordination.k8s.io"));
    assert!(cluster.contains("namespaces"));
    // Scoped mode with sharding: reading Namespaces is the only cluster-wide grant.
    let objects = render(
        json!({"reloader": {"watchGlobally": false, "namespaces": ["a", "b"],
        "deployment": {"replicas": 2}}}),
    );
    assert_eq!(
        grants(&one(&objects, "ClusterRole")["rules"]),
        grant_set(&[("", "namespaces", "", &["list", "watch"])])
    );

    // Custom lease timings; sharding forced off or on.
    let objects = render(json!({"reloader": {"deployment": {"replicas": 2},
        "sharding": {"leaseDuration": "30s", "renewDeadline": "20s", "retryPeriod": "5s"}}}));
    assert!(has_arg(&objects, "--lease-duration=30s"));
    assert!(has_arg(&objects, "--renew-deadline=20s"));
    assert!(has_arg(&objects, "--retry-period=5s"));
    // An unquoted on/off reaches the template as a YAML boolean.
    for (value, arg) in [
        (json!("off"), "--server-side-sharding=off"),
        (json!(false), "--server-side-sharding=off"),
        (json!(true), "--server-side-sharding=on"),
    ] {
        let objects = render(json!({"reloader": {"deployment": {"replicas": 2},
            "sharding": {"serverSide": value}}}));
        assert!(has_arg(&objects, arg), "{arg}: {:?}", args(&objects));
    }
    let objects = render(json!({"reloader": {"deployment": {"replicas": 2},
        "sharding": {"enabled": false}}}));
    assert!(arg_with_prefix(&objects, "--sharding").is_none());
    assert!(
        !resources_granted(&role_in(&objects, NS).unwrap()["rules"])
            .contains("leases.coordination.k8s.io")
    );
    let objects = render(json!({"reloader": {"sharding": {"enabled": true}}}));
    assert!(has_arg(&objects, "--sharding=true"));
    let objects = render(json!({"reloader": {"deployment": {"replicas": 1}}}));
    assert!(arg_with_prefix(&objects, "--sharding").is_none());
}

#[test]
fn enable_ha_keeps_reloaders_meaning_with_leases_and_pod_identity() {
    let objects = render(
        json!({"reloader": {"enableHA": true, "deployment": {"replicas": 2},
        "sharding": {"enabled": false}}}),
    );
    assert!(has_arg(&objects, "--enable-ha=true"));
    assert!(arg_with_prefix(&objects, "--sharding").is_none());
    assert!(env(&objects).iter().any(|(n, _)| n == "POD_NAME"));
    assert!(
        resources_granted(&role_in(&objects, NS).unwrap()["rules"])
            .contains("leases.coordination.k8s.io")
    );
    assert!(
        one(&objects, "Deployment")["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
            .is_object()
    );
}

/// `shadow.enabled`: the flags, and RBAC that reads only, in every mode: writes only to the
/// replica set's own Leases and shard assignment (with HA or sharding), nothing else.
#[test]
fn shadow_mode_renders_its_flags_and_only_read_rules() {
    let writes = ["create", "update", "patch", "delete"];
    let everything =
        json!({"isArgoRollouts": true, "isOpenshift": true, "enableCSIIntegration": true});
    let modes = [
        json!({"shadow": {"enabled": true}, "reloader": everything}),
        json!({"shadow": {"enabled": true, "window": "2m", "lateAfter": "30s"},
            "reloader": {"watchGlobally": false, "namespaces": "a,b"}}),
        json!({"shadow": {"enabled": true}, "reloader": {"deployment": {"replicas": 3}}}),
    ];
    for values in modes {
        let objects = render(values.clone());
        assert!(has_arg(&objects, "--shadow=true"), "{values}");
        let window = values["shadow"]["window"].as_str().unwrap_or("60s");
        assert!(
            has_arg(&objects, &format!("--shadow-window={window}")),
            "{values}"
        );
        let mut roles = of_kind(&objects, "ClusterRole");
        roles.extend(of_kind(&objects, "Role"));
        for role in roles {
            for (group, resource, name, verb) in grants(&role["rules"]) {
                let own = group == "coordination.k8s.io"
                    || (resource == "configmaps" && name == "kube-reloader-shard-assignment");
                assert!(
                    own || !writes.contains(&verb.as_str()),
                    "{values}: {verb} {resource}.{group} {name}"
                );
            }
        }
    }
    // Reads stay: the same objects as in normal mode.
    let objects = render(json!({"shadow": {"enabled": true}, "reloader": everything}));
    let granted = resources_granted(&one(&objects, "ClusterRole")["rules"]);
    for resource in [
        "deployments.apps",
        "jobs.batch",
        "rollouts.argoproj.io",
        "secrets",
    ] {
        assert!(granted.contains(resource), "{resource}: {granted:?}");
    }
}

/// Reloader's #1206 values: `reloader.leaderElection.*` become its `--leader-election-*` flags,
/// each only when set and only with enableHA, as Reloader's chart renders them (aliases of the
/// Lease timings here: with sharding on too, a timing set there replaces sharding's flag).
#[test]
fn reloaders_leader_election_values_render_its_flags_with_enable_ha_only() {
    let le = json!({"leaseDuration": "30s", "renewDeadline": "20s", "retryPeriod": "4s"});
    let all = [
        "--leader-election-lease-duration=30s",
        "--leader-election-renew-deadline=20s",
        "--leader-election-retry-period=4s",
    ];
    let objects = render(json!({"reloader": {"enableHA": true, "leaderElection": le}}));
    for arg in all {
        assert!(has_arg(&objects, arg), "{arg}: {:?}", args(&objects));
    }
    let objects = render(json!({"reloader": {"enableHA": true,
        "leaderElection": {"leaseDuration": "30s"}}}));
    assert!(has_arg(&objects, all[0]));
    assert!(arg_with_prefix(&objects, "--leader-election-renew-deadline").is_none());
    assert!(arg_with_prefix(&objects, "--leader-election-retry-period").is_none());
    let objects = render(json!({"reloader": {"enableHA": false, "leaderElection": le}}));
    assert!(arg_with_prefix(&objects, "--leader-election").is_none());
    // The defaults (empty) and null render nothing but --enable-ha.
    for le in [json!(null), json!({}), json!({"leaseDuration": ""})] {
        let objects = render(json!({"reloader": {"enableHA": true, "leaderElection": le}}));
        assert!(has_arg(&objects, "--enable-ha=true"), "{le}");
        assert!(
            arg_with_prefix(&objects, "--leader-election").is_none(),
            "{le}"
        );
    }
    // Sharding on as well: one flag per timing, Reloader's where it is set.
    let objects = render(
        json!({"reloader": {"enableHA": true, "deployment": {"replicas": 2},
        "leaderElection": {"leaseDuration": "30s"}}}),
    );
    let got = args(&objects);
    assert!(has_arg(&objects, "--sharding=true"), "{got:?}");
    assert!(has_arg(&objects, all[0]), "{got:?}");
    assert!(
        arg_with_prefix(&objects, "--lease-duration").is_none(),
        "{got:?}"
    );
    assert!(has_arg(&objects, "--renew-deadline=10s"), "{got:?}");
    assert!(has_arg(&objects, "--retry-period=2s"), "{got:?}");
}

/// Reloader's chart 3.0 adds five `custom_annotations` keys; each renders the flag that chart
/// renders for it (as `--flag=value`, one argument, like the other annotation flags here).
#[test]
fn reloader_chart_3_custom_annotations_render_their_flags() {
    let objects = render(json!({"reloader": {"custom_annotations": {
        "configmap_exclude": "acme.io/cm-exclude",
        "secret_exclude": "acme.io/secret-exclude",
        "secretproviderclass": "acme.io/spc",
        "secretproviderclass_auto": "acme.io/spc-auto",
        "secretproviderclass_exclude": "acme.io/spc-exclude"}}}));
    for arg in [
        "--configmap-exclude-annotation=acme.io/cm-exclude",
        "--secret-exclude-annotation=acme.io/secret-exclude",
        "--secretproviderclass-annotation=acme.io/spc",
        "--secretproviderclass-auto-annotation=acme.io/spc-auto",
        "--secretproviderclass-exclude-annotation=acme.io/spc-exclude",
    ] {
        assert!(has_arg(&objects, arg), "{arg}: {:?}", args(&objects));
    }
}

/// A values file written for Reloader's chart 3.0.0-beta (its keys for the enterprise console
/// and gateway included) installs: the schema accepts it, nothing of those keys is rendered, and
/// the keys kube-reloader knows keep their meaning. NOTES.txt names the ignored keys (the helm
/// unittest suite in the chart's tests/ checks that text).
#[test]
fn a_values_file_for_reloaders_chart_3_installs() {
    let values = json!({
        "global": {"imageRegistry": "", "imagePullSecrets": [], "host": "",
                   "gatewayBasePath": "/gateway", "ingressScheme": "https"},
        "kubernetes": {"host": "https://kubernetes.default"},
        "nameOverride": "", "fullnameOverride": "",
        "image": {"name": "stakater/reloader", "repository": "ghcr.io/kube-reloader/kube-reloader",
                  "tag": "", "pullPolicy": "IfNotPresent"},
        "enterprise": {"enabled": false, "console": {"enabled": true},
                       "gateway": {"enabled": true, "dragonfly": {"enabled": true}},
                       "dragonfly": {"fullnameOverride": "reloader-enterprise-dragonfly"}},
        "reloader": {
            "autoReloadAll": false, "watchGlobally": true, "namespaces": [], "enableHA": false,
            "leaderElection": {"leaseDuration": "", "renewDeadline": "", "retryPeriod": ""},
            "deployment": {"labels": {"provider": "stakater", "group": "com.stakater.platform",
                                      "version": "v1.4.19"}},
            "custom_annotations": {
                "configmap_exclude": "my.company.com/configmap-exclude",
                "secretproviderclass_auto": "my.company.com/secretproviderclass-auto"}
        }
    });
    let objects = render(values);
    let mut plain = kinds(&render(json!({})));
    plain.sort();
    let mut got = kinds(&objects);
    got.sort();
    assert_eq!(
        got, plain,
        "no object of the enterprise components is rendered"
    );
    assert!(has_arg(
        &objects,
        "--configmap-exclude-annotation=my.company.com/configmap-exclude"
    ));
    assert_eq!(
        container(&objects)["image"],
        "ghcr.io/kube-reloader/kube-reloader:0.1.0"
    );
}

// ---- workload kinds and RBAC that follows them -------------------------------------------------

/// `admissionWebhook.enabled`: the webhook's flags, port, certificate volume and Service; a
/// MutatingWebhookConfiguration that fails open, calls that Service, trusts the chart's CA (or
/// cert-manager's, injected) and covers the kinds the controller rolls, in the namespaces it
/// watches.
#[test]
fn the_admission_webhook_renders_its_server_service_and_configuration() {
    let objects = render(json!({"admissionWebhook": {"enabled": true},
        "reloader": {"watchGlobally": false, "namespaces": "a,b", "isArgoRollouts": true,
            "customKinds": [{"apiVersion": "serving.knative.dev/v1", "kind": "Service"}]}}));
    for arg in ["--admission-addr=:9443", "--admission-settle=2s"] {
        assert!(
            has_arg(&objects, arg),
            "{arg} missing: {:?}",
            args(&objects)
        );
    }
    let secret = objects
        .iter()
        .find(|o| o["kind"] == "Secret" && o["type"] == "kubernetes.io/tls")
        .expect("the webhook's TLS Secret");
    let mounted = one(&objects, "Deployment")["spec"]["template"]["spec"]["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .any(|v| v["secret"]["secretName"] == secret["metadata"]["name"]);
    assert!(mounted, "the TLS Secret is mounted");
    let config = one(&objects, "MutatingWebhookConfiguration");
    let webhook = &config["webhooks"][0];
    assert_eq!(webhook["failurePolicy"], "Ignore");
    assert_eq!(webhook["sideEffects"], "None");
    assert_eq!(
        webhook["clientConfig"]["caBundle"],
        secret["data"]["ca.crt"]
    );
    let service = &webhook["clientConfig"]["service"];
    assert!(
        objects
            .iter()
            .any(|o| o["kind"] == "Service" && o["metadata"]["name"] == service["name"]),
        "the webhook calls a Service of the chart: {service}"
    );
    let resources: Vec<&str> = webhook["rules"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| {
            r["resources"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(Value::as_str)
        })
        .collect();
    assert_eq!(
        resources,
        [
            "deployments",
            "statefulsets",
            "daemonsets",
            "rollouts",
            "services"
        ]
    );
    // The namespaces the controller is given (--namespaces), no more.
    let watched = args(&objects)
        .into_iter()
        .find_map(|a| a.strip_prefix("--namespaces=").map(str::to_string))
        .expect("--namespaces");
    let watched: Vec<&str> = watched.split(',').collect();
    assert_eq!(
        webhook["namespaceSelector"]["matchExpressions"][0]["values"],
        json!(watched)
    );

    let managed =
        render(json!({"admissionWebhook": {"enabled": true, "certManager": {"enabled": true}}}));
    let config = one(&managed, "MutatingWebhookConfiguration");
    assert!(config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"].is_string());
    assert!(config["webhooks"][0]["clientConfig"]["caBundle"].is_null());
    assert_eq!(
        one(&managed, "Certificate")["spec"]["secretName"],
        secret["metadata"]["name"]
    );
    assert!(
        !has_arg(&render(json!({})), "--admission-addr=:9443"),
        "off by default"
    );
}

/// `customKinds`: one `--custom-kind` flag per entry with the settings given, reading and
/// patching each declared resource, and the pod rules of restarts by eviction when an entry
/// asks for them; an entry the controller would refuse is refused by the schema first.
#[test]
fn custom_kinds_render_their_flags_and_only_their_rules() {
    let knative = json!({"apiVersion": "serving.knative.dev/v1", "kind": "Service"});
    let keda = json!({"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledJob",
        "resource": "scaledjobs", "template": "/spec/jobTargetRef/template", "reloadBy": "eviction",
        "selector": "/spec/jobTargetRef/selector"});
    let objects = render(json!({"reloader": {"customKinds": [knative, keda]}}));
    for arg in [
        "--custom-kind=serving.knative.dev/v1/Service",
        "--custom-kind=keda.sh/v1alpha1/ScaledJob,resource=scaledjobs,template=/spec/jobTargetRef/template,reload-by=eviction,selector=/spec/jobTargetRef/selector",
    ] {
        assert!(
            has_arg(&objects, arg),
            "{arg} missing: {:?}",
            args(&objects)
        );
    }
    let g = grants(&one(&objects, "ClusterRole")["rules"]);
    let roll: &[&str] = &["get", "list", "watch", "patch"];
    for (group, resource) in [
        ("serving.knative.dev", "services"),
        ("keda.sh", "scaledjobs"),
    ] {
        for verb in roll {
            let grant = (
                group.to_string(),
                resource.to_string(),
                String::new(),
                verb.to_string(),
            );
            assert!(g.contains(&grant), "{grant:?} missing");
        }
    }
    let evicts = (
        String::new(),
        "pods/eviction".to_string(),
        String::new(),
        "create".to_string(),
    );
    assert!(g.contains(&evicts), "reloadBy: eviction grants evictions");
    let plain = render(json!({"reloader": {"customKinds": [knative]}}));
    let g = grants(&one(&plain, "ClusterRole")["rules"]);
    assert!(!g.contains(&evicts), "no eviction asked for, none granted");

    for bad in [
        json!({"apiVersion": "v1", "kind": "Service"}),
        json!({"apiVersion": "a.io/v1", "kind": "K", "reloadBy": "delete"}),
        json!({"apiVersion": "a.io/v1", "kind": "K", "template": "/metadata/x"}),
        json!({"apiVersion": "a.io/v1"}),
    ] {
        let values = json!({"reloader": {"customKinds": [bad]}});
        template_yaml(RELEASE, NS, &values, &[])
            .expect_err(&format!("{values} should be rejected"));
    }
}

/// `podRestarts.labelledPods`: the flag, and pods read, watched and patched (the restart
/// recorded on each) and evicted; off by default, and `podRestarts.enabled` alone lists pods
/// only.
#[test]
fn labelled_pods_render_their_flag_and_pod_rules() {
    let objects = render(json!({"reloader": {"podRestarts": {"labelledPods": true}}}));
    assert!(
        has_arg(&objects, "--restart-labelled-pods=true"),
        "{:?}",
        args(&objects)
    );
    let g = grants(&one(&objects, "ClusterRole")["rules"]);
    let pods = grant_set(&[
        ("", "pods", "", &["get", "list", "watch", "patch"]),
        ("", "pods/eviction", "", &["create"]),
    ]);
    assert!(pods.is_subset(&g), "{:?} missing", pods.difference(&g));
    let listing = render(json!({"reloader": {"podRestarts": {"enabled": true}}}));
    let g = grants(&one(&listing, "ClusterRole")["rules"]);
    let watch = grant_set(&[("", "pods", "", &["watch"])]);
    assert!(
        watch.is_disjoint(&g),
        "podRestarts.enabled alone watches no pod"
    );
    assert!(!has_arg(&listing, "--restart-labelled-pods=true"));
    assert!(!has_arg(&render(json!({})), "--restart-labelled-pods=true"));
}

#[test]
fn argo_openshift_and_csi_add_their_flags_and_only_their_rules() {
    let objects = render(json!({"reloader": {
        "isArgoRollouts": true, "isOpenshift": true, "enableCSIIntegration": true}}));
    for arg in [
        "--is-Argo-Rollouts=true",
        "--is-openshift=true",
        "--enable-csi-integration=true",
    ] {
        assert!(has_arg(&objects, arg), "{arg} missing");
    }
    let g = grants(&one(&objects, "ClusterRole")["rules"]);
    let extra = grant_set(&[
        (
            "argoproj.io",
            "rollouts",
            "",
            &["get", "list", "watch", "patch"],
        ),
        (
            "apps.openshift.io",
            "deploymentconfigs",
            "",
            &["get", "list", "watch", "patch"],
        ),
        (
            "secrets-store.csi.x-k8s.io",
            "secretproviderclasses",
            "",
            &["get", "list", "watch"],
        ),
        (
            "secrets-store.csi.x-k8s.io",
            "secretproviderclasspodstatuses",
            "",
            &["get", "list", "watch"],
        ),
    ]);
    assert!(extra.is_subset(&g), "missing: {:?}", extra.difference(&g));
    let base = grants(&one(&render(json!({})), "ClusterRole")["rules"]);
    assert_eq!(g.difference(&base).cloned().collect::<BTreeSet<_>>(), extra);

    // A cluster that serves DeploymentConfigs gets their RBAC even without isOpenshift, since
    // kube-reloader detects the API at start (as Reloader does) and then watches them; the flag
    // itself is not passed.
    let objects = template(
        RELEASE,
        NS,
        &json!({}),
        &["--api-versions", "apps.openshift.io/v1"],
    );
    assert!(arg_with_prefix(&objects, "--is-openshift").is_none());
    assert!(
        resources_granted(&one(&objects, "ClusterRole")["rules"])
            .contains("deploymentconfigs.apps.openshift.io")
    );
}

#[test]
fn openshift_leaves_the_user_and_group_to_the_cluster() {
    let pod = |objects: &[Value]| one(objects, "Deployment")["spec"]["template"]["spec"].clone();
    let default = pod(&render(json!({})));
    assert_eq!(default["securityContext"]["runAsUser"], 65534);
    assert_eq!(default["securityContext"]["runAsGroup"], 65534);
    let detected = template(
        RELEASE,
        NS,
        &json!({}),
        &["--api-versions", "apps.openshift.io/v1"],
    );
    for objects in [render(json!({"reloader": {"isOpenshift": true}})), detected] {
        let sc = &pod(&objects)["securityContext"];
        assert!(sc.get("runAsUser").is_none(), "{sc}");
        assert!(sc.get("runAsGroup").is_none(), "{sc}");
        assert_eq!(sc["runAsNonRoot"], true, "the restricted SCC allows it");
        assert_eq!(sc["seccompProfile"]["type"], "RuntimeDefault");
    }
    // An id chosen on purpose is the user's to keep.
    let chosen = render(json!({"reloader": {"isOpenshift": true,
        "deployment": {"securityContext": {"runAsUser": 1000700000}}}}));
    assert_eq!(pod(&chosen)["securityContext"]["runAsUser"], 1000700000);
}

#[test]
fn ignoring_jobs_and_cronjobs_drops_their_flags_and_rules() {
    let batch = |objects: &[Value]| -> BTreeSet<(String, String, String, String)> {
        grants(&one(objects, "ClusterRole")["rules"])
            .into_iter()
            .filter(|(g, _, _, _)| g == "batch")
            .collect()
    };
    let both = render(json!({"reloader": {"ignoreJobs": true, "ignoreCronJobs": true}}));
    assert!(has_arg(&both, "--ignored-workload-types=jobs,cronjobs"));
    assert!(batch(&both).is_empty(), "{:?}", batch(&both));

    // CronJobs still reloaded: they are read, and a reload creates a Job (nothing more on Jobs).
    // A CronJob annotated cronjob-reload-strategy: patch is patched; the Job's owner reference
    // blocks the CronJob's deletion, which needs update on its finalizers where
    // OwnerReferencesPermissionEnforcement runs (OpenShift).
    let jobs = render(json!({"reloader": {"ignoreJobs": true}}));
    assert!(has_arg(&jobs, "--ignored-workload-types=jobs"));
    assert_eq!(
        batch(&jobs),
        grant_set(&[
            ("batch", "cronjobs", "", &["get", "list", "watch", "patch"]),
            ("batch", "cronjobs/finalizers", "", &["update"]),
            ("batch", "jobs", "", &["create"]),
        ])
    );

    let cron = render(json!({"reloader": {"ignoreCronJobs": true}}));
    assert!(has_arg(&cron, "--ignored-workload-types=cronjobs"));
    assert_eq!(
        batch(&cron),
        grant_set(&[(
            "batch",
            "jobs",
            "",
            &["create", "delete", "get", "list", "watch"]
        )])
    );
}

#[test]
fn ignored_secret_types_default_to_helm_releases_and_can_be_changed_or_emptied() {
    let default = render(json!({}));
    assert!(
        !args(&default)
            .iter()
            .any(|a| a.starts_with("--ignore-secret-types")),
        "the default is the controller's own: {:?}",
        args(&default)
    );
    let all = render(json!({"reloader": {"ignoreSecretTypes": ""}}));
    assert!(has_arg(&all, "--ignore-secret-types="));
    let two =
        render(json!({"reloader": {"ignoreSecretTypes": "helm.sh/release.v1,example.com/x"}}));
    assert!(has_arg(
        &two,
        "--ignore-secret-types=helm.sh/release.v1,example.com/x"
    ));
}

#[test]
fn ignoring_secrets_or_configmaps_drops_them_and_both_is_refused() {
    let objects = render(json!({"reloader": {"ignoreSecrets": true}}));
    assert!(has_arg(&objects, "--resources-to-ignore=secrets"));
    let res = resources_granted(&one(&objects, "ClusterRole")["rules"]);
    assert!(!res.contains("secrets") && res.contains("configmaps"));

    let objects = render(json!({"reloader": {"ignoreConfigMaps": true}}));
    assert!(has_arg(&objects, "--resources-to-ignore=configMaps"));
    assert!(resources_granted(&one(&objects, "ClusterRole")["rules"]).contains("secrets"));

    let err = template_yaml(
        RELEASE,
        NS,
        &json!({"reloader": {"ignoreSecrets": true, "ignoreConfigMaps": true}}),
        &[],
    )
    .unwrap_err();
    assert!(err.contains("cannot both be true"), "{err}");
}

// ---- every Reloader value means what it means in Reloader's chart ------------------------------

#[test]
fn every_reloader_value_renders_reloaders_flag() {
    let cases: Vec<(Value, &[&str])> = vec![
        (json!({"autoReloadAll": true}), &["--auto-reload-all=true"]),
        (
            json!({"reloadStrategy": "annotations"}),
            &["--reload-strategy=annotations"],
        ),
        (
            json!({"reloadStrategy": "env-vars"}),
            &["--reload-strategy=env-vars"],
        ),
        (
            json!({"reloadOnCreate": true}),
            &["--reload-on-create=true"],
        ),
        (
            json!({"reloadOnDelete": true}),
            &["--reload-on-delete=true"],
        ),
        (
            json!({"syncAfterRestart": true}),
            &["--sync-after-restart=true"],
        ),
        (
            json!({"ignoreNamespaces": "kube-system,kube-public"}),
            &["--namespaces-to-ignore=kube-system,kube-public"],
        ),
        (
            json!({"resourceLabelSelector": "reload=yes"}),
            &["--resource-label-selector=reload=yes"],
        ),
        (json!({"logFormat": "json"}), &["--log-format=json"]),
        (json!({"logLevel": "debug"}), &["--log-level=debug"]),
        (
            json!({"enablePProf": true, "pprofAddr": ":7070"}),
            &["--enable-pprof=true", "--pprof-addr=:7070"],
        ),
        // Without any custom annotation (Reloader's chart once dropped it in that case).
        (
            json!({"webhookUrl": "https://hooks.example.com/x?a=b#c"}),
            &["--webhook-url=https://hooks.example.com/x?a=b#c"],
        ),
        (
            json!({"custom_annotations": {
                "auto": "acme.io/auto", "configmap": "acme.io/cm", "secret": "acme.io/secret",
                "configmap_auto": "acme.io/cm-auto", "secret_auto": "acme.io/secret-auto",
                "search": "acme.io/search", "match": "acme.io/match", "ignore": "acme.io/ignore",
                "pausePeriod": "acme.io/pause", "pauseTime": "acme.io/paused-at"}}),
            &[
                "--auto-annotation=acme.io/auto",
                "--configmap-annotation=acme.io/cm",
                "--secret-annotation=acme.io/secret",
                "--configmap-auto-annotation=acme.io/cm-auto",
                "--secret-auto-annotation=acme.io/secret-auto",
                "--auto-search-annotation=acme.io/search",
                "--search-match-annotation=acme.io/match",
                "--ignore-annotation=acme.io/ignore",
                "--pause-deployment-annotation=acme.io/pause",
                "--pause-deployment-time-annotation=acme.io/paused-at",
            ],
        ),
        (
            json!({"rateLimit": {"maxPatchesPerSecond": 10, "patchBurst": 20,
                "minReloadInterval": "1m30s", "maxPatchesPerSecondPerTenant": 2,
                "maxRetryBackoff": "1m"}, "digestWorkers": 3, "tenantLabel": "team", "wireFormat": "json",
                "preciseKeys": "annotated", "churnBreaker": {"limit": 3, "window": "10m", "quiet": "1m"},
                "waves": {"policy": "threshold=20,canary=5%", "pollInterval": "5s"}}),
            &[
                "--waves=threshold=20,canary=5%",
                "--wave-poll-interval=5s",
                "--precise-keys=annotated",
                "--churn-limit=3",
                "--churn-window=10m",
                "--churn-quiet=1m",
                "--max-patches-per-second=10",
                "--patch-burst=20",
                "--min-reload-interval=1m30s",
                "--max-patches-per-second-per-tenant=2",
                "--max-retry-backoff=1m",
                "--tenant-label=team",
                "--digest-workers=3",
                "--wire-format=json",
            ],
        ),
    ];
    for (reloader, want) in cases {
        let objects = render(json!({ "reloader": reloader }));
        let got = args(&objects);
        for arg in want {
            assert!(
                got.iter().any(|a| a == arg),
                "{reloader}: {arg} missing from {got:?}"
            );
        }
    }
    // `default` is Reloader's way of saying "the binary's default".
    assert!(arg_with_prefix(&render(json!({})), "--reload-strategy").is_none());
}

#[test]
fn env_values_metrics_by_namespace_and_opentelemetry_become_env_vars() {
    let objects = render(json!({"reloader": {
        "enableMetricsByNamespace": true,
        "openTelemetry": {"endpoint": "http://otel-collector.obs:4318", "serviceName": "reloader-prod"},
        "deployment": {"env": {
            "open": {"ALERT_ON_RELOAD": "true", "ALERT_SINK": "slack", "UNSET": null},
            "secret": {"ALERT_WEBHOOK_URL": "https://hooks.slack.com/services/x"},
            "field": {"NODE": "spec.nodeName"},
            "existing": {"alerts": {"ALERT_ADDITIONAL_INFO": "info-key"}}
        }}
    }}));
    let env = env(&objects);
    let get = |name: &str| -> Value {
        env.iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
            .unwrap_or_else(|| panic!("{name} missing from {env:?}"))
    };
    assert_eq!(get("METRICS_COUNT_BY_NAMESPACE"), "enabled");
    assert_eq!(
        get("OTEL_EXPORTER_OTLP_ENDPOINT"),
        "http://otel-collector.obs:4318"
    );
    assert_eq!(get("OTEL_SERVICE_NAME"), "reloader-prod");
    assert_eq!(get("ALERT_ON_RELOAD"), "true");
    assert_eq!(get("ALERT_SINK"), "slack");
    assert!(!env.iter().any(|(n, _)| n == "UNSET"));
    assert_eq!(
        get("ALERT_WEBHOOK_URL")["secretKeyRef"],
        json!({"name": "kr-kube-reloader", "key": "ALERT_WEBHOOK_URL"})
    );
    assert_eq!(get("NODE")["fieldRef"]["fieldPath"], "spec.nodeName");
    assert_eq!(
        get("ALERT_ADDITIONAL_INFO")["secretKeyRef"],
        json!({"name": "alerts", "key": "info-key"})
    );
    // The chart's Secret holds the secret values (never the Deployment).
    let secret = one(&objects, "Secret");
    assert!(secret["data"]["ALERT_WEBHOOK_URL"].is_string());
    assert!(
        !serde_json::to_string(one(&objects, "Deployment"))
            .unwrap()
            .contains("hooks.slack.com")
    );
}

#[test]
fn grafana_dashboard_is_a_sidecar_configmap_with_the_repository_dashboard() {
    assert!(of_kind(&render(json!({})), "ConfigMap").is_empty());
    let objects = render(json!({"reloader": {"grafanaDashboard": {
        "enabled": true, "namespace": "monitoring", "annotations": {"grafana_folder": "Platform"}}}}));
    let cm = one(&objects, "ConfigMap");
    assert_eq!(cm["metadata"]["namespace"], "monitoring");
    assert_eq!(cm["metadata"]["labels"]["grafana_dashboard"], "1");
    assert_eq!(cm["metadata"]["annotations"]["grafana_folder"], "Platform");
    let shipped: Value = serde_json::from_str(
        &std::fs::read_to_string(
            repo_root().join("deployments/grafana/kube-reloader-dashboard.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let rendered: Value =
        serde_json::from_str(cm["data"]["kube-reloader-dashboard.json"].as_str().unwrap())
            .expect("the ConfigMap holds valid dashboard JSON");
    assert_eq!(rendered, shipped);
}

#[test]
fn prometheus_rule_is_off_by_default_and_ships_the_repository_rules() {
    assert!(of_kind(&render(json!({})), "PrometheusRule").is_empty());
    let objects = render(json!({"reloader": {"prometheusRule": {
        "enabled": true, "namespace": "monitoring", "labels": {"release": "prom"}}}}));
    let rule = one(&objects, "PrometheusRule");
    assert_eq!(rule["metadata"]["namespace"], "monitoring");
    assert_eq!(rule["metadata"]["labels"]["release"], "prom");
    // The same rules as the plain rule file (the promtool tests run against that file).
    let file = std::fs::read_to_string(
        repo_root().join("deployments/prometheus/kube-reloader-rules.yaml"),
    )
    .unwrap();
    let as_object = format!(
        "apiVersion: monitoring.coreos.com/v1\nkind: PrometheusRule\nmetadata:\n  name: f\nspec:\n{}",
        file.lines().map(|l| format!("  {l}\n")).collect::<String>()
    );
    assert_eq!(rule["spec"], yaml_to_json(&as_object)[0]["spec"]);
    let alerts: Vec<&str> = rule["spec"]["groups"][0]["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["alert"].as_str().unwrap())
        .collect();
    assert_eq!(alerts.len(), 6, "{alerts:?}");
}

#[test]
fn monitors_pdb_netpol_vpa_service_and_images_follow_reloaders_values() {
    let objects = render(everything_on());
    for kind in [
        "Service",
        "ServiceMonitor",
        "PodMonitor",
        "PodDisruptionBudget",
        "NetworkPolicy",
        "VerticalPodAutoscaler",
    ] {
        one(&objects, kind);
    }
    assert_eq!(
        one(&objects, "PodDisruptionBudget")["spec"]["maxUnavailable"],
        1
    );
    assert_eq!(one(&objects, "Service")["spec"]["ports"][0]["port"], 8080);
    assert_eq!(
        one(&objects, "PodMonitor")["metadata"]["namespace"],
        "monitoring"
    );
    let c = container(&objects);
    assert_eq!(
        c["image"],
        "mirror.example.com/kube-reloader/kube-reloader@sha256:0000000000000000000000000000000000000000000000000000000000000000"
    );
    assert_eq!(c["imagePullPolicy"], "Always");
    assert_eq!(c["resources"]["limits"]["memory"], "256Mi");
    // readOnlyRootFileSystem: /tmp is an emptyDir, plus the extra volumes of both places.
    let mounts: Vec<&str> = c["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["mountPath"].as_str().unwrap())
        .collect();
    assert_eq!(mounts, ["/tmp/", "/extra", "/legacy"]);
    let pod = &one(&objects, "Deployment")["spec"]["template"]["spec"];
    assert_eq!(
        pod["imagePullSecrets"],
        json!([{"name": "global-pull"}, {"name": "deploy-pull"}])
    );
    assert_eq!(pod["priorityClassName"], "system-cluster-critical");
    assert_eq!(pod["nodeSelector"]["kubernetes.io/os"], "linux");

    // An older Reloader values file that sets the image under reloader.deployment.image.
    let objects = render(json!({"reloader": {"deployment": {"image": {
        "name": "registry.example.com/kube-reloader", "tag": "1.2.3", "pullPolicy": "Never"}}}}));
    assert_eq!(
        container(&objects)["image"],
        "registry.example.com/kube-reloader:1.2.3"
    );
    assert_eq!(container(&objects)["imagePullPolicy"], "Never");
}

// ---- values added for Reloader's chart 2.2.16 --------------------------------------------------

#[test]
fn runtime_class_scheduler_and_host_users_go_on_the_pod_only_when_set() {
    let pod =
        |values: Value| one(&render(values), "Deployment")["spec"]["template"]["spec"].clone();
    let defaults = pod(json!({}));
    for field in ["runtimeClassName", "schedulerName", "hostUsers"] {
        assert!(defaults.get(field).is_none(), "{field} rendered by default");
    }
    let set = pod(json!({"reloader": {"deployment": {
        "runtimeClassName": "gvisor", "schedulerName": "bin-packer", "hostUsers": false}}}));
    assert_eq!(set["runtimeClassName"], "gvisor");
    assert_eq!(set["schedulerName"], "bin-packer");
    assert_eq!(set["hostUsers"], false);
    assert_eq!(
        pod(json!({"reloader": {"deployment": {"hostUsers": true}}}))["hostUsers"],
        true
    );
    // Reloader's values file carries "" and null for them: nothing rendered.
    let empty = pod(json!({"reloader": {"deployment": {
        "runtimeClassName": "", "schedulerName": "", "hostUsers": null}}}));
    for field in ["runtimeClassName", "schedulerName", "hostUsers"] {
        assert!(empty.get(field).is_none(), "{field}: {empty}");
    }
}

#[test]
fn service_takes_ip_families_reloaders_labels_and_a_selector_from_deployment_labels() {
    let service = |reloader: Value| -> Option<Value> {
        of_kind(&render(json!({ "reloader": reloader })), "Service")
            .first()
            .map(|s| (*s).clone())
    };
    // Rendered when reloader.service has any key, as in Reloader's chart (or for a ServiceMonitor).
    assert!(service(json!({})).is_none());
    assert!(service(json!({"service": null})).is_none());
    let only_policy = service(json!({"service": {"ipFamilyPolicy": "PreferDualStack"}})).unwrap();
    assert_eq!(only_policy["spec"]["ipFamilyPolicy"], "PreferDualStack");
    assert!(only_policy["spec"].get("ipFamilies").is_none());
    assert_eq!(only_policy["spec"]["ports"][0]["port"], 9090);
    let plain = service(json!({"service": {"port": 9091}})).unwrap();
    assert!(plain["spec"].get("ipFamilyPolicy").is_none());
    assert!(plain["spec"].get("ipFamilies").is_none());
    for (policy, families) in [
        ("SingleStack", json!(["IPv6"])),
        ("PreferDualStack", json!(["IPv4", "IPv6"])),
        ("RequireDualStack", json!(["IPv6", "IPv4"])),
    ] {
        let s = service(json!({"service": {"ipFamilyPolicy": policy, "ipFamilies": families}}))
            .unwrap();
        assert_eq!(s["spec"]["ipFamilyPolicy"], policy);
        assert_eq!(s["spec"]["ipFamilies"], families, "order kept");
    }
    let s = service(json!({"service": {"ipFamilies": ["IPv4"]}})).unwrap();
    assert_eq!(s["spec"]["ipFamilies"], json!(["IPv4"]));
    assert!(s["spec"].get("ipFamilyPolicy").is_none());

    // Metadata as Reloader's chart renders it: app/release labels, Helm's release annotations,
    // user labels and annotations through tpl.
    let s = service(json!({"service": {
        "labels": {"monitoring": "on", "owner": "{{ .Release.Name }}-team"},
        "annotations": {"prometheus.io/scrape": "true", "origin": "{{ .Release.Namespace }}"}}}))
    .unwrap();
    let labels = &s["metadata"]["labels"];
    assert_eq!(labels["app"], "kr-kube-reloader");
    assert_eq!(labels["release"], RELEASE);
    assert_eq!(labels["app.kubernetes.io/name"], "kube-reloader");
    assert_eq!(labels["monitoring"], "on");
    assert_eq!(labels["owner"], "kr-team");
    let annotations = &s["metadata"]["annotations"];
    assert_eq!(annotations["meta.helm.sh/release-name"], RELEASE);
    assert_eq!(annotations["meta.helm.sh/release-namespace"], NS);
    assert_eq!(annotations["prometheus.io/scrape"], "true");
    assert_eq!(annotations["origin"], NS);

    // The selector: the chart's own selector labels, plus deployment.labels and matchLabels (as
    // in Reloader's chart); every one of them is on the pods, so the Service selects them.
    let objects = render(json!({"reloader": {"service": {"port": 9090},
        "deployment": {"labels": {"tier": "backend", "rel": "{{ .Release.Name }}"}},
        "matchLabels": {"environment": "production"}}}));
    let selector = one(&objects, "Service")["spec"]["selector"].clone();
    assert_eq!(
        selector,
        json!({"app.kubernetes.io/name": "kube-reloader", "app.kubernetes.io/instance": RELEASE,
               "tier": "backend", "rel": RELEASE, "environment": "production"})
    );
    let pod_labels = &one(&objects, "Deployment")["spec"]["template"]["metadata"]["labels"];
    for (k, v) in selector.as_object().unwrap() {
        assert_eq!(&pod_labels[k], v, "pod label {k}");
    }
    // The pods keep the chart's labels: no app/release on the pod template (docs/migration.md).
    assert!(pod_labels.get("app").is_none() && pod_labels.get("release").is_none());
}

#[test]
fn labels_annotations_and_monitor_namespaces_go_through_tpl() {
    let objects = render(json!({"reloader": {
        "matchLabels": {"part-of": "{{ .Release.Name }}"},
        "deployment": {"labels": {"rel": "{{ .Release.Name }}"},
                       "annotations": {"ns": "{{ .Release.Namespace }}"},
                       "pod": {"annotations": {"chart": "{{ .Chart.Name }}"}}},
        "serviceAccount": {"labels": {"sa-rel": "{{ .Release.Name }}"},
                           "annotations": {"sa-ns": "{{ .Release.Namespace }}"}},
        "serviceMonitor": {"enabled": true, "namespace": "{{ .Release.Namespace }}-mon",
                           "labels": {"sm": "{{ .Release.Name }}"},
                           "metricRelabelings": [{"action": "replace", "targetLabel": "release",
                                                  "replacement": "{{ .Release.Name }}"}]},
        "podMonitor": {"enabled": true, "namespace": "{{ .Release.Namespace }}-mon",
                       "annotations": {"pm": "{{ .Release.Name }}"}}
    }}));
    let d = one(&objects, "Deployment");
    assert_eq!(d["metadata"]["labels"]["rel"], RELEASE);
    assert_eq!(d["metadata"]["annotations"]["ns"], NS);
    assert_eq!(d["spec"]["selector"]["matchLabels"]["part-of"], RELEASE);
    assert_eq!(d["spec"]["template"]["metadata"]["labels"]["rel"], RELEASE);
    assert_eq!(
        d["spec"]["template"]["metadata"]["annotations"]["chart"],
        "kube-reloader"
    );
    let sa = one(&objects, "ServiceAccount");
    assert_eq!(sa["metadata"]["labels"]["sa-rel"], RELEASE);
    assert_eq!(sa["metadata"]["labels"]["part-of"], RELEASE);
    assert_eq!(sa["metadata"]["annotations"]["sa-ns"], NS);
    let sm = one(&objects, "ServiceMonitor");
    assert_eq!(sm["metadata"]["namespace"], format!("{NS}-mon"));
    assert_eq!(sm["metadata"]["labels"]["sm"], RELEASE);
    assert_eq!(
        sm["spec"]["endpoints"][0]["metricRelabelings"][0]["replacement"],
        RELEASE
    );
    let pm = one(&objects, "PodMonitor");
    assert_eq!(pm["metadata"]["namespace"], format!("{NS}-mon"));
    assert_eq!(pm["metadata"]["annotations"]["pm"], RELEASE);
}

#[test]
fn service_account_takes_automount_and_the_global_pull_secrets() {
    let sa = |values: Value| one(&render(values), "ServiceAccount").clone();
    let defaults = sa(json!({}));
    assert!(defaults.get("automountServiceAccountToken").is_none());
    assert!(defaults.get("imagePullSecrets").is_none());
    for automount in [false, true] {
        assert_eq!(
            sa(
                json!({"reloader": {"serviceAccount": {"automountServiceAccountToken": automount}}})
            )["automountServiceAccountToken"],
            automount
        );
    }
    // Names or {name} objects, as for the pod; the deployment's own pull secrets stay on the pod.
    let objects = render(json!({"global": {"imagePullSecrets": ["a", {"name": "b"}]},
        "reloader": {"deployment": {"imagePullSecrets": [{"name": "c"}]}}}));
    assert_eq!(
        one(&objects, "ServiceAccount")["imagePullSecrets"],
        json!([{"name": "a"}, {"name": "b"}])
    );
    assert_eq!(
        one(&objects, "Deployment")["spec"]["template"]["spec"]["imagePullSecrets"],
        json!([{"name": "a"}, {"name": "b"}, {"name": "c"}])
    );
}

// ---- schema ----------------------------------------------------------------------------------

#[test]
fn schema_rejects_typos_and_wrong_types_with_the_path_in_the_message() {
    let cases = [
        (
            json!({"reloader": {"autoReloadAl": true}}),
            "at '/reloader': additional properties 'autoReloadAl' not allowed",
        ),
        (
            json!({"reloader": {"deployment": {"replica": 2}}}),
            "additional properties 'replica' not allowed",
        ),
        (
            json!({"relaoder": {}}),
            "additional properties 'relaoder' not allowed",
        ),
        (
            json!({"reloader": {"enableHA": "yes"}}),
            "at '/reloader/enableHA': got string, want boolean",
        ),
        (
            json!({"reloader": {"deployment": {"replicas": "2"}}}),
            "at '/reloader/deployment/replicas': got string, want integer",
        ),
        (
            json!({"reloader": {"reloadStrategy": "rolling"}}),
            "at '/reloader/reloadStrategy'",
        ),
        (
            json!({"reloader": {"sharding": {"enabled": "sometimes"}}}),
            "at '/reloader/sharding/enabled'",
        ),
        (
            json!({"reloader": {"rateLimit": {"minReloadInterval": "5 minutes"}}}),
            "at '/reloader/rateLimit/minReloadInterval'",
        ),
        (
            json!({"reloader": {"rateLimit": {"maxPatchesPerSecond": 0}}}),
            "at '/reloader/rateLimit/maxPatchesPerSecond'",
        ),
        (
            json!({"reloader": {"custom_annotations": {"autoo": "x"}}}),
            "additional properties 'autoo' not allowed",
        ),
        (
            json!({"reloader": {"leaderElection": {"leaseDuration": "30"}}}),
            "at '/reloader/leaderElection/leaseDuration'",
        ),
        (
            json!({"reloader": {"leaderElection": {"leaseDurations": "30s"}}}),
            "additional properties 'leaseDurations' not allowed",
        ),
        // The Service's IP families, as Reloader's chart constrains them.
        (
            json!({"reloader": {"service": {"ipFamilyPolicy": "DualStack"}}}),
            "at '/reloader/service/ipFamilyPolicy'",
        ),
        (
            json!({"reloader": {"service": {"ipFamilies": ["IPv5"]}}}),
            "at '/reloader/service/ipFamilies/0'",
        ),
        (
            json!({"reloader": {"service": {"ipFamilies": ["IPv4", "IPv4"]}}}),
            "at '/reloader/service/ipFamilies'",
        ),
        (
            json!({"reloader": {"service": {"ipFamilyPolicy": "SingleStack",
                "ipFamilies": ["IPv4", "IPv6"]}}}),
            "at '/reloader/service/ipFamilies'",
        ),
        (
            json!({"reloader": {"service": {"ipFamilyPolicy": "RequireDualStack",
                "ipFamilies": ["IPv4"]}}}),
            "at '/reloader/service/ipFamilies'",
        ),
        (
            json!({"reloader": {"deployment": {"hostUsers": "false"}}}),
            "at '/reloader/deployment/hostUsers'",
        ),
        (
            json!({"reloader": {"serviceAccount": {"automountServiceAccountToken": "no"}}}),
            "at '/reloader/serviceAccount/automountServiceAccountToken'",
        ),
    ];
    for (values, want) in cases {
        let err = template_yaml(RELEASE, NS, &values, &[])
            .expect_err(&format!("{values} should be rejected"));
        assert!(
            err.contains("values don't meet the specifications of the schema")
                && err.contains(want),
            "{values}: expected '{want}' in:\n{err}"
        );
    }
}

/// The shape of stakater/Reloader's chart values file (chart 2.2.16, Chart.yaml's
/// kube-reloader.io/reloader-chart-version): every key it has, with its kind of default
/// (including the keys it leaves null). A Reloader values file must render.
#[test]
fn a_values_file_shaped_like_reloaders_renders() {
    let values = json!({
        "global": {"imageRegistry": "", "imagePullSecrets": []},
        "kubernetes": {"host": "https://kubernetes.default"},
        "nameOverride": "", "fullnameOverride": "",
        "image": {"name": "kube-reloader", "repository": "ghcr.io/kube-reloader/kube-reloader",
                  "tag": "0.1.0", "pullPolicy": "IfNotPresent"},
        "reloader": {
            "autoReloadAll": false, "isArgoRollouts": false, "isOpenshift": false,
            "ignoreSecrets": false, "ignoreConfigMaps": false, "ignoreJobs": false,
            "ignoreCronJobs": false, "reloadOnCreate": false, "reloadOnDelete": false,
            "syncAfterRestart": false, "reloadStrategy": "default", "ignoreNamespaces": "",
            "namespaceSelector": "", "resourceLabelSelector": "", "logFormat": "", "logLevel": "info",
            "watchGlobally": true, "enableHA": false, "enablePProf": false, "pprofAddr": ":6060",
            "readOnlyRootFileSystem": false, "legacy": {"rbac": false}, "matchLabels": {},
            "enableMetricsByNamespace": false,
            "deployment": {
                "dnsConfig": {}, "replicas": 1, "revisionHistoryLimit": 2, "hostUsers": null,
                "nodeSelector": null,
                "affinity": {}, "volumeMounts": [], "volumes": [],
                "securityContext": {"runAsNonRoot": true, "runAsUser": 65534,
                                    "seccompProfile": {"type": "RuntimeDefault"}},
                "containerSecurityContext": {}, "tolerations": [], "topologySpreadConstraints": [],
                "annotations": {}, "labels": {"provider": "acme", "group": "com.acme.platform"},
                "env": {"open": null, "secret": null, "field": null, "existing": null},
                "livenessProbe": {}, "readinessProbe": {}, "resources": {},
                "pod": {"annotations": {}}, "priorityClassName": "", "runtimeClassName": "",
                "schedulerName": "", "gomaxprocsOverride": "", "gomemlimitOverride": ""
            },
            "service": {},
            "rbac": {"enabled": true, "labels": {}},
            "serviceAccount": {"create": true, "labels": {}, "annotations": {}, "name": null},
            "custom_annotations": {},
            "serviceMonitor": {"enabled": false, "labels": {}, "annotations": {}, "honorLabels": true,
                               "metricRelabelings": [], "relabelings": [], "targetLabels": []},
            "podMonitor": {"enabled": false, "labels": {}, "annotations": {}, "honorLabels": true,
                           "metricRelabelings": [], "relabelings": [], "podTargetLabels": []},
            "podDisruptionBudget": {"enabled": false},
            "netpol": {"enabled": false, "from": [], "to": []},
            "verticalPodAutoscaler": {"enabled": false, "controlledResources": [], "maxAllowed": {},
                                      "minAllowed": {}, "updatePolicy": {"updateMode": "Auto"}},
            "volumeMounts": [], "volumes": [],
            "webhookUrl": ""
        }
    });
    let objects = render(values);
    one(&objects, "Deployment");
    // Reloader's default container security context is `{}`; Helm merges maps, so kube-reloader's
    // hardened defaults stay (set it to null to drop them).
    assert_eq!(
        container(&objects)["securityContext"]["readOnlyRootFilesystem"],
        true
    );
    assert_eq!(
        one(&objects, "Deployment")["metadata"]["labels"]["provider"],
        "acme"
    );
}

/// Every key Reloader's chart 2.2.16 reads that its values file only names in comments (or not
/// at all), set as its comments describe: accepted by the schema, and each one rendered.
#[test]
fn every_key_reloaders_chart_reads_is_accepted_and_rendered() {
    let values = json!({
        "image": {"repository": "ghcr.io/kube-reloader/kube-reloader", "tag": "0.1.0",
                  "digest": "sha256:1111111111111111111111111111111111111111111111111111111111111111"},
        "reloader": {
            "deployment": {
                "imagePullSecrets": [{"name": "myregistrykey"}],
                "automountServiceAccountToken": false,
                "hostUsers": false, "runtimeClassName": "gvisor", "schedulerName": "my-scheduler",
                "livenessProbe": {"timeoutSeconds": 5, "failureThreshold": 5, "periodSeconds": 10,
                                  "successThreshold": 1, "initialDelaySeconds": 10},
                "readinessProbe": {"timeoutSeconds": 15, "failureThreshold": 5, "periodSeconds": 10,
                                   "successThreshold": 1, "initialDelaySeconds": 10},
                "env": {"secret": {"ALERT_ON_RELOAD": "true", "ALERT_SINK": "slack",
                                   "ALERT_WEBHOOK_URL": "https://hooks.example.com/x",
                                   "ALERT_ADDITIONAL_INFO": "prod"},
                        "existing": {"alerts": {"ALERT_SINK": "alert_sink_key"}}}
            },
            "service": {"labels": {}, "annotations": {}, "port": 9090,
                        "ipFamilyPolicy": "SingleStack", "ipFamilies": ["IPv4"]},
            "serviceAccount": {"automountServiceAccountToken": true},
            "custom_annotations": {"configmap": "my.company.com/configmap",
                                   "secret": "my.company.com/secret",
                                   "ignore": "my.company.com/reloader-ignore"},
            "serviceMonitor": {"enabled": true, "namespace": "monitoring", "interval": "10s",
                               "scheme": "https", "tlsConfig": {"insecureSkipVerify": true},
                               "bearerTokenFile": "/var/run/token", "timeout": "30s"},
            "podMonitor": {"enabled": true, "namespace": "monitoring", "interval": "10s",
                           "scheme": "https", "tlsConfig": {"insecureSkipVerify": true},
                           "bearerTokenSecret": {"name": "token", "key": "t"}, "timeout": "30s"},
            "podDisruptionBudget": {"enabled": true, "minAvailable": 1},
            "verticalPodAutoscaler": {"enabled": true,
                                      "recommenders": [{"name": "custom-recommender-performance"}],
                                      "controlledValues": "RequestsAndLimits",
                                      "updatePolicy": {"minReplicas": 1, "updateMode": "Auto"}}
        }
    });
    let objects = render(values);
    let d = one(&objects, "Deployment");
    let pod = &d["spec"]["template"]["spec"];
    assert_eq!(pod["imagePullSecrets"], json!([{"name": "myregistrykey"}]));
    assert_eq!(pod["automountServiceAccountToken"], false);
    assert_eq!(pod["hostUsers"], false);
    assert_eq!(pod["runtimeClassName"], "gvisor");
    assert_eq!(pod["schedulerName"], "my-scheduler");
    let c = container(&objects);
    assert_eq!(
        c["image"],
        "ghcr.io/kube-reloader/kube-reloader@sha256:1111111111111111111111111111111111111111111111111111111111111111"
    );
    assert_eq!(c["livenessProbe"]["initialDelaySeconds"], 10);
    assert_eq!(c["readinessProbe"]["timeoutSeconds"], 15);
    let secret = one(&objects, "Secret");
    for key in [
        "ALERT_ON_RELOAD",
        "ALERT_SINK",
        "ALERT_WEBHOOK_URL",
        "ALERT_ADDITIONAL_INFO",
    ] {
        assert!(
            secret["data"][key].is_string(),
            "{key} missing from the Secret"
        );
    }
    assert!(
        env(&objects)
            .iter()
            .any(|(n, v)| n == "ALERT_SINK" && v["secretKeyRef"]["name"] == "alerts")
    );
    let svc = one(&objects, "Service");
    assert_eq!(svc["spec"]["ipFamilyPolicy"], "SingleStack");
    assert_eq!(svc["spec"]["ipFamilies"], json!(["IPv4"]));
    assert_eq!(
        one(&objects, "ServiceAccount")["automountServiceAccountToken"],
        true
    );
    for arg in [
        "--configmap-annotation=my.company.com/configmap",
        "--secret-annotation=my.company.com/secret",
        "--ignore-annotation=my.company.com/reloader-ignore",
    ] {
        assert!(has_arg(&objects, arg), "{arg}: {:?}", args(&objects));
    }
    let sm = &one(&objects, "ServiceMonitor")["spec"]["endpoints"][0];
    assert_eq!(sm["interval"], "10s");
    assert_eq!(sm["scheme"], "https");
    assert_eq!(sm["tlsConfig"]["insecureSkipVerify"], true);
    assert_eq!(sm["bearerTokenFile"], "/var/run/token");
    assert_eq!(sm["scrapeTimeout"], "30s");
    let pm = &one(&objects, "PodMonitor")["spec"]["podMetricsEndpoints"][0];
    assert_eq!(
        pm["bearerTokenSecret"],
        json!({"name": "token", "key": "t"})
    );
    assert_eq!(pm["scrapeTimeout"], "30s");
    assert_eq!(
        one(&objects, "PodDisruptionBudget")["spec"]["minAvailable"],
        1
    );
    let vpa = &one(&objects, "VerticalPodAutoscaler")["spec"];
    assert_eq!(
        vpa["recommenders"],
        json!([{"name": "custom-recommender-performance"}])
    );
    assert_eq!(
        vpa["resourcePolicy"]["containerPolicies"][0]["controlledValues"],
        "RequestsAndLimits"
    );
    assert_eq!(vpa["updatePolicy"]["minReplicas"], 1);
}

/// The Reloader chart version this chart matches is written once, in Chart.yaml, and the docs
/// and `make reloader-chart-tests` (its default ref) follow it.
#[test]
fn the_matched_reloader_chart_version_is_recorded_in_chart_yaml_and_the_docs() {
    let chart = std::fs::read_to_string(chart_dir().join("Chart.yaml")).unwrap();
    let version = chart
        .lines()
        .find_map(|l| {
            l.trim()
                .strip_prefix("kube-reloader.io/reloader-chart-version:")
        })
        .expect("Chart.yaml annotation kube-reloader.io/reloader-chart-version")
        .trim()
        .trim_matches('"')
        .to_string();
    assert_eq!(version, "2.2.16");
    for doc in ["docs/install.md", "docs/migration.md"] {
        let text = std::fs::read_to_string(repo_root().join(doc)).unwrap();
        assert!(
            text.contains(&format!("chart **{version}**")),
            "{doc} does not name Reloader's chart {version}"
        );
    }
    let script = std::fs::read_to_string(repo_root().join("hack/reloader-chart-tests.sh")).unwrap();
    assert!(
        script.contains("reloader-chart-version"),
        "the script reads the annotation"
    );
}

/// Every flag the chart can render is one the binary accepts, with a value it parses.
#[test]
fn every_rendered_flag_is_accepted_by_the_binary() {
    for values in [
        everything_on(),
        json!({"reloader": {"watchGlobally": false, "namespaces": ["a", "b"], "ignoreConfigMaps": true,
            "reloadStrategy": "env-vars", "ignoreCronJobs": true}}),
        json!({"reloader": {"deployment": {"replicas": 2}, "ignoreSecrets": true,
            "custom_annotations": {"configmap": "a/cm", "secret": "a/s", "configmap_auto": "a/ca",
                "secret_auto": "a/sa", "search": "a/search", "match": "a/match", "ignore": "a/i",
                "pausePeriod": "a/p"}}}),
        // Reloader's newer values: #1206's timings (with sharding on too) and chart 3.0's keys.
        json!({"reloader": {"enableHA": true, "deployment": {"replicas": 2},
            "leaderElection": {"leaseDuration": "30s", "renewDeadline": "20s", "retryPeriod": "4s"},
            "custom_annotations": {"configmap_exclude": "a/ce", "secret_exclude": "a/se",
                "secretproviderclass": "a/spc", "secretproviderclass_auto": "a/spca",
                "secretproviderclass_exclude": "a/spce"}}}),
    ] {
        let args = args(&render(values.clone()));
        // clap reads every argument before acting on --help: an unknown flag, a repeated one or a
        // value that does not parse fails here, without contacting any cluster.
        let out = Command::new(env!("CARGO_BIN_EXE_kube-reloader"))
            .args(&args)
            .arg("--help")
            .output()
            .expect("running kube-reloader --help");
        assert!(
            out.status.success(),
            "kube-reloader rejected the chart's args {args:?}:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// Values that turn on everything optional (used by lint, the render checks and the dry run).
fn everything_on() -> Value {
    json!({
        "global": {"imageRegistry": "mirror.example.com", "imagePullSecrets": ["global-pull"]},
        "image": {"repository": "kube-reloader/kube-reloader",
                  "digest": "sha256:0000000000000000000000000000000000000000000000000000000000000000",
                  "pullPolicy": "Always"},
        "reloader": {
            "autoReloadAll": true, "reloadStrategy": "annotations", "reloadOnCreate": true,
            "reloadOnDelete": true, "syncAfterRestart": true, "ignoreJobs": true,
            "ignoreNamespaces": "kube-system", "namespaceSelector": "team=a",
            "resourceLabelSelector": "reload=yes", "logFormat": "json", "logLevel": "debug",
            "isArgoRollouts": true, "isOpenshift": true, "enableCSIIntegration": true,
            "enableHA": true, "enablePProf": true, "readOnlyRootFileSystem": true,
            "enableMetricsByNamespace": true, "webhookUrl": "https://hooks.example.com/x",
            "matchLabels": {"team": "platform"},
            "custom_annotations": {"auto": "acme.io/auto", "pauseTime": "acme.io/paused-at"},
            "deployment": {
                "replicas": 2,
                "resources": {"requests": {"cpu": "10m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}},
                "nodeSelector": {"kubernetes.io/os": "linux"},
                "tolerations": [{"key": "infra", "operator": "Exists", "effect": "NoSchedule"}],
                "priorityClassName": "system-cluster-critical",
                "imagePullSecrets": [{"name": "deploy-pull"}],
                "annotations": {"owner": "platform"}, "labels": {"tier": "ops"},
                "pod": {"annotations": {"prometheus.io/scrape": "true"}},
                "livenessProbe": {"timeoutSeconds": 3}, "readinessProbe": {"periodSeconds": 7},
                "env": {"open": {"ALERT_ON_RELOAD": "true"}, "secret": {"ALERT_WEBHOOK_URL": "https://hooks"}},
                "volumeMounts": [{"name": "extra", "mountPath": "/extra"}],
                "volumes": [{"name": "extra", "emptyDir": {}}],
                "runtimeClassName": "gvisor", "schedulerName": "default-scheduler", "hostUsers": false
            },
            "serviceAccount": {"automountServiceAccountToken": true},
            "volumeMounts": [{"name": "legacy", "mountPath": "/legacy"}],
            "volumes": [{"name": "legacy", "emptyDir": {}}],
            "service": {"port": 8080, "labels": {"svc": "yes"}, "annotations": {"a": "{{ .Release.Name }}"},
                        "ipFamilyPolicy": "SingleStack", "ipFamilies": ["IPv4"]},
            "serviceMonitor": {"enabled": true, "interval": "30s", "timeout": "10s",
                               "metricRelabelings": [{"action": "keep", "regex": "reloader_.*",
                                                      "sourceLabels": ["__name__"]}]},
            "podMonitor": {"enabled": true, "namespace": "monitoring", "interval": "30s",
                           "podTargetLabels": ["app.kubernetes.io/name"]},
            "podDisruptionBudget": {"enabled": true, "minAvailable": 1, "maxUnavailable": 1},
            "netpol": {"enabled": true, "from": [{"podSelector": {"matchLabels": {"app": "prometheus"}}}]},
            "verticalPodAutoscaler": {"enabled": true, "controlledResources": ["cpu", "memory"],
                                      "maxAllowed": {"memory": "1Gi"}, "updatePolicy": {"updateMode": "Off"}},
            "sharding": {"enabled": "auto"},
            "rateLimit": {"maxPatchesPerSecond": 20, "patchBurst": 40, "minReloadInterval": "30s"},
            "openTelemetry": {"endpoint": "http://otel:4318"},
            "grafanaDashboard": {"enabled": true},
            "prometheusRule": {"enabled": true, "labels": {"release": "prom"}}
        }
    })
}

// ---- generated manifests ---------------------------------------------------------------------

#[test]
fn plain_manifests_and_kustomize_base_match_the_chart() {
    let out = Command::new("bash")
        .arg(repo_root().join("hack/helm-manifests.sh"))
        .arg("--check")
        .output()
        .expect("running hack/helm-manifests.sh --check");
    assert!(
        out.status.success(),
        "deployments/kubernetes drifted from the chart; run `make manifests`:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    // The kustomize base builds (kubectl's built-in kustomize) to the same objects as the single
    // file, and an overlay can move everything, RBAC subjects included, to another namespace.
    let base = repo_root().join("deployments/kubernetes");
    let built = run(kubectl(), &["kustomize", base.to_str().unwrap()], None);
    assert!(built.ok, "kubectl kustomize: {}", built.stderr);
    let plain =
        std::fs::read_to_string(base.join("kube-reloader.yaml")).expect("kube-reloader.yaml");
    let sorted = |mut v: Vec<Value>| {
        v.sort_by_key(|o| kinds(std::slice::from_ref(o)));
        v
    };
    assert_eq!(
        sorted(yaml_to_json(&built.stdout)),
        sorted(yaml_to_json(&plain))
    );

    // (kustomize only takes relative paths to a base)
    let overlay = std::env::temp_dir().join(format!("kr-overlay-{}", std::process::id()));
    std::fs::create_dir_all(&overlay).unwrap();
    let up = "../".repeat(overlay.components().count() - 1);
    let relative = format!("{up}{}", base.display().to_string().trim_start_matches('/'));
    std::fs::write(
        overlay.join("kustomization.yaml"),
        format!(
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nnamespace: ops\nresources:\n  - {relative}\n"
        ),
    )
    .unwrap();
    let built = run(kubectl(), &["kustomize", overlay.to_str().unwrap()], None);
    let _ = std::fs::remove_dir_all(&overlay);
    assert!(built.ok, "kubectl kustomize (overlay): {}", built.stderr);
    let objects = yaml_to_json(&built.stdout);
    assert_eq!(one(&objects, "Namespace")["metadata"]["name"], "ops");
    assert_eq!(one(&objects, "Deployment")["metadata"]["namespace"], "ops");
    assert_eq!(
        one(&objects, "ClusterRoleBinding")["subjects"][0]["namespace"],
        "ops"
    );
    assert_eq!(one(&objects, "RoleBinding")["metadata"]["namespace"], "ops");
}

// ---- the API server accepts what the chart renders ---------------------------------------------

/// Renders `values` for a release in a fresh namespace and has the API server validate every
/// object (`kubectl apply --dry-run=server`, strict field validation): schemas, RBAC rules,
/// Deployment spec. ServiceMonitor, PodMonitor and VerticalPodAutoscaler need their CRDs: the
/// test installs minimal ones (tests/fixtures/crds) with the upstream types of the fields the
/// chart renders, so a misspelt field is still rejected.
async fn dry_run(name: &str, values: Value, extra_namespaces: &[&TestNamespace]) {
    let release_ns = TestNamespace::new(&format!("chart-{name}")).await;
    let mut values = values;
    if values["reloader"]["watchGlobally"] == false {
        let list: Vec<&str> = extra_namespaces.iter().map(|n| n.name.as_str()).collect();
        values["reloader"]["namespaces"] = json!(list);
    }
    // Every namespace the objects go to must exist (the monitors' and the dashboard's too).
    for key in [
        "podMonitor",
        "serviceMonitor",
        "grafanaDashboard",
        "prometheusRule",
    ] {
        if values["reloader"][key]["namespace"].is_string() {
            values["reloader"][key]["namespace"] = json!(release_ns.name);
        }
    }
    let objects = template(&format!("kr-{name}"), &release_ns.name, &values, &[]);
    let refs: Vec<&Value> = objects.iter().collect();
    let out = kubectl_admin(
        &[
            "apply",
            "--dry-run=server",
            "--validate=strict",
            "-o",
            "name",
            "-f",
            "-",
        ],
        Some(&as_list(&refs)),
    );
    assert!(
        out.ok,
        "the API server rejected the chart's objects ({name}):\n{}\nobjects: {:#?}",
        out.stderr,
        kinds(&objects)
    );
    let accepted = out.stdout.lines().count();
    assert_eq!(
        accepted,
        objects.len(),
        "{name}: accepted {accepted} of {}:\n{}",
        objects.len(),
        out.stdout
    );
}

#[tokio::test]
async fn the_api_server_accepts_every_rendered_object_in_each_mode() {
    let c = client().await;
    crds::ensure(
        &c,
        &[
            "servicemonitors.monitoring.coreos.com",
            "podmonitors.monitoring.coreos.com",
            "prometheusrules.monitoring.coreos.com",
            "verticalpodautoscalers.autoscaling.k8s.io",
        ],
    )
    .await;
    let a = TestNamespace::new("chart-watched-a").await;
    let b = TestNamespace::new("chart-watched-b").await;
    dry_run("defaults", json!({}), &[]).await;
    dry_run(
        "scoped",
        json!({"reloader": {"watchGlobally": false}}),
        &[&a, &b],
    )
    .await;
    dry_run("single", json!({"reloader": {"watchGlobally": false}}), &[]).await;
    dry_run(
        "sharded",
        json!({"reloader": {"deployment": {"replicas": 3}, "podDisruptionBudget": {"enabled": true}}}),
        &[],
    )
    .await;
    dry_run(
        "ha",
        json!({"reloader": {"enableHA": true, "deployment": {"replicas": 2},
            "sharding": {"enabled": false}}}),
        &[],
    )
    .await;
    dry_run(
        "crd-kinds",
        json!({"reloader": {"isArgoRollouts": true, "isOpenshift": true, "enableCSIIntegration": true}}),
        &[],
    )
    .await;
    dry_run(
        "no-batch",
        json!({"reloader": {"ignoreJobs": true, "ignoreCronJobs": true, "namespaceSelector": "x=y"}}),
        &[],
    )
    .await;
    dry_run("everything", everything_on(), &[]).await;
    dry_run(
        "admission-webhook",
        json!({"admissionWebhook": {"enabled": true}, "reloader": {"watchGlobally": false}}),
        &[&a],
    )
    .await;
}

// ---- the image -------------------------------------------------------------------------------

/// Dockerfile instructions with continuation lines joined and comments dropped.
fn dockerfile_instructions() -> Vec<String> {
    let text = std::fs::read_to_string(repo_root().join("Dockerfile")).expect("Dockerfile");
    let mut out = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let t = line.trim();
        if t.starts_with('#') || t.is_empty() && current.is_empty() {
            continue;
        }
        if let Some(stripped) = t.strip_suffix('\\') {
            current.push_str(stripped);
            current.push(' ');
        } else {
            current.push_str(t);
            out.push(std::mem::take(&mut current));
        }
    }
    out
}

/// The words of the first `cargo build ...` command in `text`, up to `&&`, `;`, `>` or the end.
fn cargo_build_words(text: &str) -> Option<Vec<String>> {
    let start = text.find("cargo build")?;
    let words = text[start..]
        .split_whitespace()
        .take_while(|w| !matches!(*w, "&&" | ";" | "||") && !w.starts_with('>'))
        .map(String::from)
        .collect();
    Some(words)
}

#[test]
fn the_dockerfile_builds_what_make_binary_builds() {
    let instructions = dockerfile_instructions();
    let build = instructions
        .iter()
        .filter(|i| i.starts_with("RUN "))
        .find_map(|i| cargo_build_words(i))
        .expect("a RUN ... cargo build step in the Dockerfile");
    let makefile = std::fs::read_to_string(repo_root().join("Makefile")).unwrap();
    let recipe = makefile
        .split("\nbinary:")
        .nth(1)
        .expect("a `binary:` target in the Makefile");
    let make = cargo_build_words(recipe.split("\n\n").next().unwrap())
        .expect("`make binary` runs cargo build");
    assert_eq!(
        build, make,
        "the Dockerfile's build step and `make binary` diverged"
    );
    assert!(build.contains(&"--locked".to_string()) && build.contains(&"--release".to_string()));

    // Static facts the issue asks for: stages, user, port, entrypoint.
    let from: Vec<&String> = instructions
        .iter()
        .filter(|i| i.starts_with("FROM "))
        .collect();
    assert_eq!(from.len(), 2, "{from:?}");
    assert!(
        from[0].contains("rust:")
            && from[0].contains("-bookworm")
            && from[0].ends_with(" AS build")
    );
    assert_eq!(from[1], "FROM gcr.io/distroless/cc-debian12:nonroot");
    let last_stage: Vec<&String> = instructions
        .iter()
        .skip_while(|i| !i.starts_with("FROM gcr.io/distroless"))
        .collect();
    for want in [
        "COPY --from=build /kube-reloader /kube-reloader",
        "USER 65534:65534",
        "EXPOSE 9090",
        "ENTRYPOINT [\"/kube-reloader\"]",
    ] {
        assert!(
            last_stage.iter().any(|i| *i == want),
            "`{want}` missing from the runtime stage: {last_stage:?}"
        );
    }

    // The builder's Rust is at least the crate's rust-version.
    let version = |s: &str| -> (u32, u32) {
        let mut it = s.split('.').map(|p| p.parse::<u32>().unwrap());
        (it.next().unwrap(), it.next().unwrap())
    };
    let image_rust = from[0]
        .split("rust:")
        .nth(1)
        .unwrap()
        .split('-')
        .next()
        .unwrap();
    let cargo_toml = std::fs::read_to_string(repo_root().join("Cargo.toml")).unwrap();
    let msrv = cargo_toml
        .lines()
        .find_map(|l| l.strip_prefix("rust-version = "))
        .expect("rust-version in Cargo.toml")
        .trim_matches('"');
    assert!(
        version(image_rust) >= version(msrv),
        "the build image's Rust {image_rust} is older than rust-version {msrv}"
    );
}

/// The build context the Dockerfile sees (its COPY sources, minus what .dockerignore drops)
/// is enough for cargo to resolve the workspace with the lock file as it is.
#[test]
fn the_docker_build_context_resolves_the_locked_workspace() {
    let root = repo_root();
    let ignore = std::fs::read_to_string(root.join(".dockerignore")).expect(".dockerignore");
    let patterns: Vec<&str> = ignore
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    assert_eq!(patterns.first(), Some(&"*"), "the context is an allow-list");
    let allowed: Vec<&str> = patterns[1..]
        .iter()
        .map(|p| {
            p.strip_prefix('!')
                .expect("only re-includes after `*`")
                .trim_end_matches('/')
        })
        .collect();

    let ctx = std::env::temp_dir().join(format!("kr-docker-ctx-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&ctx);
    for instruction in dockerfile_instructions()
        .iter()
        .filter(|i| i.starts_with("COPY ") && !i.contains("--from="))
    {
        let words: Vec<&str> = instruction.split_whitespace().skip(1).collect();
        let (sources, dest) = words.split_at(words.len() - 1);
        for src in sources {
            assert!(
                allowed.contains(src),
                "COPY {src}: excluded by .dockerignore (allowed: {allowed:?})"
            );
            let target = if dest[0].ends_with('/') && sources.len() > 1 || dest[0] == "./" {
                ctx.join(src)
            } else {
                ctx.join(dest[0].trim_start_matches("./"))
            };
            copy_tree(&root.join(src), &target);
        }
    }
    let out = Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1", "--locked", "--offline"])
        // Only the packages a Linux build needs are in the local registry cache.
        .args([
            "--filter-platform",
            &format!("{}-unknown-linux-gnu", std::env::consts::ARCH),
        ])
        .arg("--manifest-path")
        .arg(ctx.join("Cargo.toml"))
        .output()
        .expect("running cargo metadata");
    let _ = std::fs::remove_dir_all(&ctx);
    assert!(
        out.status.success(),
        "cargo cannot resolve the workspace from the Docker build context:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn copy_tree(src: &std::path::Path, dst: &std::path::Path) {
    if src.is_dir() {
        std::fs::create_dir_all(dst).unwrap();
        for entry in std::fs::read_dir(src).unwrap() {
            let entry = entry.unwrap();
            copy_tree(&entry.path(), &dst.join(entry.file_name()));
        }
    } else {
        std::fs::create_dir_all(dst.parent().unwrap()).unwrap();
        std::fs::copy(src, dst).unwrap_or_else(|e| panic!("copying {}: {e}", src.display()));
    }
}

/// The runtime image has glibc, libgcc and libstdc++ and nothing else (distroless/cc): the
/// binary must not need any other shared library (no OpenSSL: TLS is rustls).
#[test]
fn the_binary_needs_only_what_distroless_cc_ships() {
    let out = Command::new("ldd")
        .arg(env!("CARGO_BIN_EXE_kube-reloader"))
        .output()
        .expect("running ldd");
    assert!(out.status.success(), "ldd failed");
    let text = String::from_utf8_lossy(&out.stdout);
    let allowed = [
        "linux-vdso.so",
        "libc.so",
        "libm.so",
        "libgcc_s.so",
        "libstdc++.so",
        "libpthread.so",
        "libdl.so",
        "librt.so",
        "ld-linux",
    ];
    for line in text.lines() {
        let lib = line.split_whitespace().next().unwrap_or_default();
        let lib = lib.rsplit('/').next().unwrap_or(lib);
        assert!(
            allowed.iter().any(|a| lib.starts_with(a)),
            "kube-reloader links {lib}, which distroless/cc-debian12 does not ship:\n{text}"
        );
    }
}
