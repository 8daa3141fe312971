use clap::Parser;

use super::*;
use crate::config::Flags;

fn settings(args: &[&str]) -> Settings {
    let argv = std::iter::once("kube-reloader").chain(args.iter().copied());
    Settings::try_from(Flags::try_parse_from(argv).unwrap()).unwrap()
}

fn rule(group: &'static str, resource: &'static str, verb: &'static str) -> Rule {
    Rule {
        group,
        resource,
        verb,
        namespace: None,
        name: None,
    }
}

/// Reloader 2.2.16's chart with default values, as (group, resource, verbs), cluster-wide.
const RELOADER_DEFAULT: &[(&str, &str, &[&str])] = &[
    ("", "secrets", &["list", "get", "watch"]),
    ("", "configmaps", &["list", "get", "watch"]),
    ("apps", "deployments", &["list", "get", "update", "patch"]),
    ("apps", "daemonsets", &["list", "get", "update", "patch"]),
    ("apps", "statefulsets", &["list", "get", "update", "patch"]),
    ("batch", "cronjobs", &["list", "get"]),
    ("batch", "jobs", &["create", "delete", "list", "get"]),
    ("", "events", &["create", "patch"]),
];

fn grants(granted: &'static [(&str, &str, &[&str])]) -> impl Fn(&Rule) -> bool {
    move |r: &Rule| {
        granted
            .iter()
            .any(|(g, res, verbs)| *g == r.group && *res == r.resource && verbs.contains(&r.verb))
    }
}

#[test]
fn everything_granted_is_the_preferred_mode() {
    let s = settings(&["--enable-ha", "--pod-name=a", "--pod-namespace=ns"]);
    let p = plan(&requirements(&s, Some("ns")), |_| true);
    assert_eq!(p, AccessPlan::full());
    assert!(p.listed_kinds().is_empty());
}

#[test]
fn reloader_default_rbac_lists_workloads_and_writes_core_events() {
    let s = settings(&[]);
    let p = plan(&requirements(&s, None), grants(RELOADER_DEFAULT));
    assert!(p.missing.is_empty(), "{:?}", p.missing);
    let listed: Vec<_> = p.listed_kinds().into_iter().collect();
    use WorkloadKind::*;
    assert_eq!(
        listed,
        vec![Deployment, StatefulSet, DaemonSet, CronJob, Job]
    );
    assert!(p.uses(Fallback::CoreEvents));
    assert!(p.lost.is_empty(), "core Events are granted: {:?}", p.lost);
}

#[test]
fn a_missing_write_or_config_watch_has_no_fallback() {
    let s = settings(&[]);
    let no_patch = |r: &Rule| !(r.resource == "deployments" && r.verb == "patch");
    let p = plan(&requirements(&s, None), no_patch);
    assert_eq!(p.missing, vec![rule("apps", "deployments", "patch")]);
    let no_watch = |r: &Rule| !(r.resource == "configmaps" && r.verb == "watch");
    let p = plan(&requirements(&s, None), no_watch);
    assert_eq!(p.missing, vec![rule("", "configmaps", "watch")]);
    assert_eq!(
        p.missing[0].to_string(),
        "watch configmaps in all namespaces"
    );
}

#[test]
fn enable_ha_with_only_the_leader_lease_runs_active_standby() {
    let s = settings(&["--enable-ha", "--pod-name=a", "--pod-namespace=rel"]);
    let leader_lease = |r: &Rule| {
        r.resource != "leases" && r.resource != "namespaces" && r.name != Some(SHARD_ASSIGNMENT)
            || r.name == Some(LEADER_LOCK)
    };
    let p = plan(&requirements(&s, None), leader_lease);
    assert!(p.missing.is_empty(), "{:?}", p.missing);
    assert_eq!(
        p.active_fallbacks(),
        BTreeSet::from([Fallback::LeaderLockOnly])
    );
    // Without the leader Lease itself nothing can run.
    let nothing = |r: &Rule| r.resource != "leases";
    let p = plan(&requirements(&s, None), nothing);
    let missing: Vec<String> = p.missing.iter().map(ToString::to_string).collect();
    assert!(
        missing.contains(
            &"update leases.coordination.k8s.io stakater-reloader-lock in namespace rel".into()
        ),
        "{missing:?}"
    );
}

#[test]
fn sharding_requires_the_member_protocol() {
    let s = settings(&["--sharding", "--pod-name=a", "--pod-namespace=rel"]);
    let no_list = |r: &Rule| !(r.resource == "leases" && r.verb == "list");
    let p = plan(&requirements(&s, None), no_list);
    assert_eq!(p.missing.len(), 1, "{:?}", p.missing);
    assert!(p.fallbacks.is_empty());
}

#[test]
fn scoped_mode_asks_in_each_watched_namespace() {
    let s = settings(&["--namespaces=a,b"]);
    let reqs = requirements(&s, None);
    let watches: Vec<_> = reqs
        .iter()
        .filter(|r| r.rule.resource == "deployments" && r.rule.verb == "watch")
        .map(|r| r.rule.namespace.clone())
        .collect();
    assert_eq!(watches, vec![Some("a".to_string()), Some("b".to_string())]);
    // Denied in one namespace is denied.
    let only_a = |r: &Rule| {
        r.resource != "deployments" || r.verb != "watch" || r.namespace.as_deref() == Some("a")
    };
    let p = plan(&reqs, only_a);
    assert_eq!(p.listed_kinds(), BTreeSet::from([WorkloadKind::Deployment]));
}

#[test]
fn optional_rules_of_an_unused_fallback_are_not_reported_lost() {
    let s = settings(&[]);
    let no_core_events = |r: &Rule| !(r.group.is_empty() && r.resource == "events");
    let p = plan(&requirements(&s, None), no_core_events);
    assert!(p.lost.is_empty(), "events.k8s.io is granted: {:?}", p.lost);
    let no_events = |r: &Rule| r.resource != "events";
    let p = plan(&requirements(&s, None), no_events);
    assert_eq!(p.lost.len(), 1);
    assert_eq!(p.lost[0].1, "Kubernetes Events");
}

#[test]
fn meta_info_falls_back_to_update_under_reloader_rules() {
    let s = settings(&[]);
    // Reloader's metadata Role: configmaps list/get/watch/create/update in its namespace.
    let reloader = |r: &Rule| r.resource != "configmaps" || r.verb != "patch";
    let p = plan(&requirements(&s, Some("rel")), reloader);
    assert_eq!(
        p.active_fallbacks(),
        BTreeSet::from([Fallback::MetaInfoByUpdate])
    );
    assert!(p.lost.is_empty());
}

#[test]
fn rules_read_as_rbac_does() {
    let mut r = rule("apps", "deployments", "watch");
    r.namespace = Some("team-a".into());
    assert_eq!(r.to_string(), "watch deployments.apps in namespace team-a");
}

#[test]
fn shadow_mode_needs_only_reads_and_the_replica_sets_own_objects() {
    let s = settings(&[
        "--shadow",
        "--is-Argo-Rollouts=true",
        "--enable-ha",
        "--pod-name=a",
        "--pod-namespace=ns",
    ]);
    let writes = ["create", "update", "patch", "delete"];
    for requirement in requirements(&s, None) {
        let rule = &requirement.rule;
        let own = rule.group == "coordination.k8s.io"
            || (rule.resource == "configmaps" && rule.name == Some(SHARD_ASSIGNMENT));
        assert!(
            own || !writes.contains(&rule.verb),
            "shadow mode asks for {rule:?}"
        );
    }
    // Read-only RBAC is enough: nothing is missing, no fallback is taken for a write.
    let reads = |r: &Rule| !writes.contains(&r.verb) || r.group == "coordination.k8s.io";
    let p = plan(&requirements(&s, None), reads);
    assert!(
        p.missing.iter().all(|r| r.name == Some(SHARD_ASSIGNMENT)),
        "{:?}",
        p.missing
    );
}
