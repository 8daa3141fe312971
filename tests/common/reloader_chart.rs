//! The RBAC stakater/Reloader's chart 2.2.16 grants, written as facts (resources and verbs per
//! setting, read from that chart's templates), for tests that run kube-reloader with exactly it.
#![allow(dead_code)]

use serde_json::{Value, json};

/// The Reloader chart values a case sets (only those that change its RBAC, args or env).
#[derive(Default, Clone, Copy)]
pub struct Values {
    pub watch_globally_off: bool,
    pub enable_ha: bool,
    pub namespace_selector: bool,
    pub csi: bool,
    pub argo: bool,
}

pub fn rule(groups: &[&str], resources: &[&str], verbs: &[&str]) -> Value {
    json!({"apiGroups": groups, "resources": resources, "verbs": verbs})
}

/// The rules of Reloader 2.2.16's ClusterRole (watchGlobally) or Role (namespaced): the same
/// list, without namespaces in the namespaced Role.
pub fn reloader_rules(v: Values) -> Vec<Value> {
    let workload_verbs = ["list", "get", "update", "patch"];
    let mut rules = vec![rule(
        &[""],
        &["secrets", "configmaps"],
        &["list", "get", "watch"],
    )];
    if v.namespace_selector && !v.watch_globally_off {
        rules.push(rule(&[""], &["namespaces"], &["get", "list", "watch"]));
    }
    if v.argo {
        rules.push(rule(&["argoproj.io", ""], &["rollouts"], &workload_verbs));
    }
    rules.push(rule(
        &["apps"],
        &["deployments", "daemonsets", "statefulsets"],
        &workload_verbs,
    ));
    rules.push(rule(&["batch"], &["cronjobs"], &["list", "get"]));
    rules.push(rule(
        &["batch"],
        &["jobs"],
        &["create", "delete", "list", "get"],
    ));
    if v.enable_ha {
        rules.push(rule(
            &["coordination.k8s.io"],
            &["leases"],
            &["create", "get", "update"],
        ));
    }
    if v.csi {
        rules.push(rule(
            &["secrets-store.csi.x-k8s.io"],
            &["secretproviderclasspodstatuses", "secretproviderclasses"],
            &["list", "get", "watch"],
        ));
    }
    rules.push(rule(&[""], &["events"], &["create", "patch"]));
    rules
}

/// Reloader's `-metadata-role` in the release namespace.
pub fn metadata_rules() -> Vec<Value> {
    vec![rule(
        &[""],
        &["configmaps"],
        &["list", "get", "watch", "create", "update"],
    )]
}
