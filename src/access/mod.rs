//! What this identity may do, asked of the API server at start, and what follows from it.
//!
//! Reloader's chart grants less than this controller prefers: workloads `list, get, update,
//! patch` but no `watch`, core Events but not `events.k8s.io`, Leases `create, get, update` but
//! no `list`. A user who swaps the image in a Reloader release gets those rules, and a pod that is
//! Ready but never reloads is the worst outcome. So each rule the settings need is one of:
//! - required: without it nothing works; the controller exits naming it;
//! - preferred, with a fallback that keeps Reloader's semantics at a stated cost;
//! - optional: only a side output (an Event, `reloader-meta-info`) is lost.
//!
//! This module is pure: [`requirements`] lists the rules, [`plan`] decides from the answers.
//! `review.rs` asks the API server.

pub mod review;

use std::collections::BTreeSet;
use std::fmt;

use crate::config::{NamespaceScope, Settings};
use crate::model::{ConfigKind, WorkloadKind};

/// The Lease `--enable-ha` campaigns on (Reloader's name).
pub const LEADER_LOCK: &str = crate::config::shard::DEFAULT_LEADER_LEASE;
/// Reloader's ConfigMap of build and option info.
pub const META_INFO: &str = "reloader-meta-info";
use crate::waves::HALTS_CONFIGMAP;
const SHARD_ASSIGNMENT: &str = crate::shard::coordinator::ASSIGNMENT_CONFIGMAP;

/// One verb on one resource, in one namespace (`None`: every namespace) or on one object.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Rule {
    pub group: &'static str,
    pub resource: &'static str,
    pub verb: &'static str,
    pub namespace: Option<String>,
    pub name: Option<&'static str>,
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let resource = match self.group {
            "" => self.resource.to_string(),
            group => format!("{}.{group}", self.resource),
        };
        write!(f, "{} {resource}", self.verb)?;
        if let Some(name) = self.name {
            write!(f, " {name}")?;
        }
        match &self.namespace {
            Some(ns) => write!(f, " in namespace {ns}"),
            None => write!(f, " in all namespaces"),
        }
    }
}

/// What the controller does instead when a preferred rule is missing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Fallback {
    /// Workloads of this kind are listed: once at start, periodically, and in the namespace of
    /// each config change before it is decided (what Reloader does on every event).
    ListWorkloads(WorkloadKind),
    /// Events are written as core/v1 Events (Reloader's API) instead of events.k8s.io/v1.
    CoreEvents,
    /// `--enable-ha` runs active/standby on the `stakater-reloader-lock` Lease alone: standbys
    /// wait, the leader acts on everything and exits when it loses the Lease.
    LeaderLockOnly,
    /// `reloader-meta-info` is written with get/create/update instead of server-side apply.
    MetaInfoByUpdate,
}

impl Fallback {
    /// What the fallback costs, for the start-up log line and `/debug/explain`.
    pub fn cost(self) -> &'static str {
        match self {
            Fallback::ListWorkloads(_) => {
                "one LIST of the kind in the config's namespace per config change (as Reloader), \
                 plus a full LIST at start and every resync period"
            }
            Fallback::CoreEvents => "none (core/v1 Events, as Reloader writes them)",
            Fallback::LeaderLockOnly => {
                "no graceful hand-over: a standby takes over when the Lease expires (up to the \
                 lease duration) and rolls on start what changed meanwhile"
            }
            Fallback::MetaInfoByUpdate => "one GET more at start",
        }
    }

    pub fn metric_label(self) -> String {
        match self {
            Fallback::ListWorkloads(kind) => format!("list-{}", kind.as_str().to_lowercase()),
            Fallback::CoreEvents => "core-events".into(),
            Fallback::LeaderLockOnly => "leader-lock-only".into(),
            Fallback::MetaInfoByUpdate => "meta-info-by-update".into(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    Required,
    Preferred(Fallback),
    /// Only `what` is lost without it.
    Optional(&'static str),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requirement {
    pub rule: Rule,
    pub need: Need,
}

/// The controller's mode, decided from what it may do.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AccessPlan {
    /// Required rules that are not granted: the controller cannot do its job.
    pub missing: Vec<Rule>,
    /// Preferred rules not granted, and the fallback each turned on.
    pub fallbacks: Vec<(Rule, Fallback)>,
    /// Optional rules not granted, and what is lost.
    pub lost: Vec<(Rule, &'static str)>,
}

impl AccessPlan {
    /// Everything granted: the preferred mode.
    pub fn full() -> Self {
        Self::default()
    }

    /// Halts can be kept in the `kube-reloader-halts` ConfigMap.
    pub fn keeps_halts(&self) -> bool {
        !self.lost.iter().any(|(_, what)| *what == HALTS_LOST)
    }

    pub fn uses(&self, fallback: Fallback) -> bool {
        self.fallbacks.iter().any(|(_, f)| *f == fallback)
    }

    /// Workload kinds found by LIST instead of watched.
    pub fn listed_kinds(&self) -> BTreeSet<WorkloadKind> {
        self.fallbacks
            .iter()
            .filter_map(|(_, f)| match f {
                Fallback::ListWorkloads(kind) => Some(*kind),
                _ => None,
            })
            .collect()
    }

    /// The missing rules that turned `fallback` on, as RBAC reads them.
    pub fn missing_for(&self, fallback: Fallback) -> Vec<String> {
        self.fallbacks
            .iter()
            .filter(|(_, f)| *f == fallback)
            .map(|(r, _)| r.to_string())
            .collect()
    }

    /// Distinct fallbacks in use.
    pub fn active_fallbacks(&self) -> BTreeSet<Fallback> {
        self.fallbacks.iter().map(|(_, f)| *f).collect()
    }
}

/// Decides the mode from `allowed` (the API server's answer for each rule). A fallback whose own
/// rules are missing leaves its preferred rule missing as well.
pub fn plan(requirements: &[Requirement], allowed: impl Fn(&Rule) -> bool) -> AccessPlan {
    let mut out = AccessPlan::default();
    for r in requirements.iter().filter(|r| !allowed(&r.rule)) {
        match r.need {
            Need::Required => out.missing.push(r.rule.clone()),
            Need::Preferred(fallback) => out.fallbacks.push((r.rule.clone(), fallback)),
            Need::Optional(what) => out.lost.push((r.rule.clone(), what)),
        }
    }
    // Optional rules that only matter to an unused fallback are not lost.
    let active = out.active_fallbacks();
    out.lost.retain(|(rule, _)| match fallback_of(rule) {
        Some(f) => active.contains(&f),
        None => true,
    });
    out
}

/// The fallback an optional rule serves, if it serves one.
fn fallback_of(rule: &Rule) -> Option<Fallback> {
    match (rule.group, rule.resource, rule.name) {
        ("", "events", _) => Some(Fallback::CoreEvents),
        ("", "configmaps", Some(META_INFO)) => Some(Fallback::MetaInfoByUpdate),
        _ => None,
    }
}

/// Builds rules of one resource, in every namespace of the watch scope.
struct Rules<'a> {
    scope: Vec<Option<String>>,
    out: &'a mut Vec<Requirement>,
}

impl Rules<'_> {
    fn add(
        &mut self,
        group: &'static str,
        resource: &'static str,
        verbs: &[&'static str],
        need: Need,
    ) {
        for namespace in &self.scope {
            for verb in verbs {
                self.out.push(Requirement {
                    rule: Rule {
                        group,
                        resource,
                        verb,
                        namespace: namespace.clone(),
                        name: None,
                    },
                    need,
                });
            }
        }
    }
}

/// Every rule `settings` needs. `meta_info_namespace`: where `reloader-meta-info` is published.
pub fn requirements(settings: &Settings, meta_info_namespace: Option<&str>) -> Vec<Requirement> {
    let mut out = Vec::new();
    let scope = match &settings.scope {
        NamespaceScope::All => vec![None],
        NamespaceScope::Only(list) => list.iter().cloned().map(Some).collect(),
    };
    let mut rules = Rules {
        scope,
        out: &mut out,
    };
    config_rules(settings, &mut rules);
    workload_rules(settings, &mut rules);
    // Shadow mode writes nothing: no Event either.
    if settings.shadow.is_none() {
        rules.add(
            "events.k8s.io",
            "events",
            &["create"],
            Need::Preferred(Fallback::CoreEvents),
        );
        rules.add(
            "",
            "events",
            &["create"],
            Need::Optional("Kubernetes Events"),
        );
    }
    cluster_rules(settings, &mut out);
    replica_set_rules(settings, &mut out);
    if let Some(ns) = meta_info_namespace {
        meta_info_rules(ns, &mut out);
    }
    if let Some(ns) = &settings.halts_namespace {
        halt_rules(ns, &mut out);
    }
    out
}

/// What the `kube-reloader-halts` ConfigMap needs (`create` cannot be limited to its name).
fn halt_rules(namespace: &str, out: &mut Vec<Requirement>) {
    for (verb, name) in [
        ("get", Some(HALTS_CONFIGMAP)),
        ("patch", Some(HALTS_CONFIGMAP)),
        ("create", None),
    ] {
        out.push(Requirement {
            rule: Rule {
                group: "",
                resource: "configmaps",
                verb,
                namespace: Some(namespace.to_string()),
                name,
            },
            need: Need::Optional(HALTS_LOST),
        });
    }
}

/// What is lost without the halts' rules.
const HALTS_LOST: &str = "halts of changes rolled in waves kept across restarts and hand-overs";

fn config_rules(settings: &Settings, rules: &mut Rules<'_>) {
    let read = &["list", "watch"];
    if settings.watches_config(ConfigKind::ConfigMap) {
        rules.add("", "configmaps", read, Need::Required);
    }
    if settings.watches_config(ConfigKind::Secret) {
        rules.add("", "secrets", read, Need::Required);
    }
    if settings.csi_integration {
        let group = "secrets-store.csi.x-k8s.io";
        rules.add(
            group,
            "secretproviderclasspodstatuses",
            read,
            Need::Required,
        );
        let what = "the ignore/match annotations of SecretProviderClasses";
        rules.add(
            group,
            "secretproviderclasses",
            &["get"],
            Need::Optional(what),
        );
    }
}

fn workload_rules(settings: &Settings, rules: &mut Rules<'_>) {
    for kind in WorkloadKind::all()
        .into_iter()
        .filter(|k| settings.handles_workload(*k))
    {
        let (group, resource) = group_resource(kind);
        rules.add(group, resource, &["list", "get"], Need::Required);
        rules.add(
            group,
            resource,
            &["watch"],
            Need::Preferred(Fallback::ListWorkloads(kind)),
        );
        if settings.shadow.is_some() {
            continue;
        }
        match kind {
            WorkloadKind::CronJob => rules.add("batch", "jobs", &["create"], Need::Required),
            WorkloadKind::Job => rules.add("batch", "jobs", &["create", "delete"], Need::Required),
            _ => rules.add(group, resource, &["patch"], Need::Required),
        }
    }
}

/// Namespaces are read cluster-wide with a namespace selector or a tenant label.
fn cluster_rules(settings: &Settings, out: &mut Vec<Requirement>) {
    if settings.namespace_selector.is_some() || settings.tenant_label.is_some() {
        for verb in ["list", "watch"] {
            out.push(cluster_rule("", "namespaces", verb, Need::Required));
        }
    }
}

/// Sharding needs the member Leases, the assignment and the namespace universe; plain
/// The leader Lease's name as a rule names it. Rules name objects by `&'static str`; a name other
/// than the default comes from `--leader-election-id`, read once per process, so it is kept for
/// the life of the process.
fn leader_lease_name(name: &str) -> &'static str {
    match name {
        LEADER_LOCK => LEADER_LOCK,
        other => Box::leak(other.to_owned().into_boxed_str()),
    }
}

/// `--enable-ha` prefers the same protocol and falls back to the leader Lease alone.
fn replica_set_rules(settings: &Settings, out: &mut Vec<Requirement>) {
    let Some(shard) = &settings.shard else {
        return;
    };
    let protocol = match shard.sharding {
        true => Need::Required,
        false => Need::Preferred(Fallback::LeaderLockOnly),
    };
    let ns = || Some(shard.namespace.clone());
    let rule = |resource, verb, name| Rule {
        group: "coordination.k8s.io",
        resource,
        verb,
        namespace: ns(),
        name,
    };
    for verb in ["get", "create", "update"] {
        out.push(Requirement {
            rule: rule("leases", verb, Some(leader_lease_name(&shard.leader_lease))),
            need: Need::Required,
        });
    }
    for verb in ["list", "create", "patch", "delete"] {
        out.push(Requirement {
            rule: rule("leases", verb, None),
            need: protocol,
        });
    }
    for verb in ["get", "watch", "patch"] {
        let rule = Rule {
            group: "",
            resource: "configmaps",
            verb,
            namespace: ns(),
            name: Some(SHARD_ASSIGNMENT),
        };
        out.push(Requirement {
            rule,
            need: protocol,
        });
    }
    // Replicas split (or, leader-only, hand over) the selected namespaces: they list them.
    if settings.namespace_selector.is_none() && settings.tenant_label.is_none() {
        for verb in ["list", "watch"] {
            out.push(cluster_rule("", "namespaces", verb, protocol));
        }
    }
}

fn meta_info_rules(namespace: &str, out: &mut Vec<Requirement>) {
    let rule = |verb, name| Rule {
        group: "",
        resource: "configmaps",
        verb,
        namespace: Some(namespace.to_string()),
        name,
    };
    out.push(Requirement {
        rule: rule("patch", Some(META_INFO)),
        need: Need::Preferred(Fallback::MetaInfoByUpdate),
    });
    let lost = "the reloader-meta-info ConfigMap";
    // `create` cannot be limited to an object's name.
    for (verb, name) in [
        ("get", Some(META_INFO)),
        ("update", Some(META_INFO)),
        ("create", None),
    ] {
        out.push(Requirement {
            rule: rule(verb, name),
            need: Need::Optional(lost),
        });
    }
}

fn cluster_rule(
    group: &'static str,
    resource: &'static str,
    verb: &'static str,
    need: Need,
) -> Requirement {
    Requirement {
        rule: Rule {
            group,
            resource,
            verb,
            namespace: None,
            name: None,
        },
        need,
    }
}

/// The API group and plural of a workload kind.
pub fn group_resource(kind: WorkloadKind) -> (&'static str, &'static str) {
    match kind {
        WorkloadKind::Deployment => ("apps", "deployments"),
        WorkloadKind::StatefulSet => ("apps", "statefulsets"),
        WorkloadKind::DaemonSet => ("apps", "daemonsets"),
        WorkloadKind::CronJob => ("batch", "cronjobs"),
        WorkloadKind::Job => ("batch", "jobs"),
        WorkloadKind::Pod => ("", "pods"),
        WorkloadKind::Rollout => ("argoproj.io", "rollouts"),
        WorkloadKind::DeploymentConfig => ("apps.openshift.io", "deploymentconfigs"),
        WorkloadKind::Custom(id) => (&id.get().group, &id.get().plural),
    }
}

#[cfg(test)]
mod tests;
