use std::collections::BTreeMap;

use super::*;
use crate::config::AnnotationKeys;
use crate::model::ConfigKind;
use crate::reload_policy::ReloadPolicy;
use crate::reloader_format::hash::Digest;

fn entry(name: &str, uses: &[&str], annotations: &[(&str, &str)]) -> WorkloadEntry {
    let meta: BTreeMap<String, String> = annotations
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    WorkloadEntry {
        key: WorkloadKey::new(WorkloadKind::Deployment, "ns", name),
        policy: ReloadPolicy::parse(&AnnotationKeys::default(), &meta, &BTreeMap::new()).shared(),
        uses: uses
            .iter()
            .map(|u| IndexedUse {
                reads: Default::default(),
                kind: ConfigKind::ConfigMap,
                name: Arc::from(*u),
                recorded: None,
                referenced: true,
            })
            .collect(),
        paused_at: None,
        paused: false,
        canary: false,
    }
}

fn cm(name: &str) -> ConfigKey {
    ConfigKey::new(ConfigKind::ConfigMap, "ns", name)
}

fn names(v: Vec<Arc<WorkloadEntry>>) -> Vec<String> {
    let mut n: Vec<String> = v.iter().map(|e| e.key.name.to_string()).collect();
    n.sort();
    n
}

fn state(byte: u8) -> ConfigState {
    ConfigState {
        keys: Default::default(),
        digest: Digest {
            blake3: [byte; 16],
            sha1: [byte; 20],
        },
        ignore: false,
        matched: false,
        resource_version: 0,
        waves: None,
    }
}

#[test]
fn candidates_follow_uses_and_literal_lists() {
    let idx = ReverseIndex::new();
    idx.apply_workload(entry("a", &["c1"], &[]));
    idx.apply_workload(entry(
        "b",
        &[],
        &[("configmap.reloader.stakater.com/reload", "c1")],
    ));
    idx.apply_workload(entry("c", &["c2"], &[]));
    assert_eq!(names(idx.candidates(&cm("c1"))), ["a", "b"]);
    assert_eq!(names(idx.candidates(&cm("c2"))), ["c"]);
    assert!(idx.candidates(&cm("c3")).is_empty());
}

#[test]
fn update_replaces_edges_and_delete_removes_them() {
    let idx = ReverseIndex::new();
    idx.apply_workload(entry("a", &["c1"], &[]));
    idx.apply_workload(entry("a", &["c2"], &[]));
    assert!(idx.candidates(&cm("c1")).is_empty());
    assert_eq!(names(idx.candidates(&cm("c2"))), ["a"]);
    assert_eq!(idx.sizes().edges, 1);
    idx.delete_workload(&WorkloadKey::new(WorkloadKind::Deployment, "ns", "a"));
    assert!(idx.candidates(&cm("c2")).is_empty());
    assert_eq!(idx.sizes(), IndexSizes::default());
}

#[test]
fn regex_lists_are_candidates_for_every_config_of_their_namespace() {
    let idx = ReverseIndex::new();
    idx.apply_workload(entry(
        "r",
        &[],
        &[("configmap.reloader.stakater.com/reload", "app-.*")],
    ));
    assert_eq!(names(idx.candidates(&cm("anything"))), ["r"]);
    assert!(
        idx.candidates(&ConfigKey::new(ConfigKind::ConfigMap, "other", "app-1"))
            .is_empty()
    );
    idx.apply_workload(entry("r", &[], &[]));
    assert!(idx.candidates(&cm("anything")).is_empty());
}

#[test]
fn a_config_is_used_exactly_when_it_has_candidates() {
    let idx = ReverseIndex::new();
    let agree = |idx: &ReverseIndex| {
        for name in ["c1", "c2", "app-1"] {
            let key = cm(name);
            assert_eq!(
                idx.is_used(&key),
                !idx.candidates(&key).is_empty(),
                "{name}"
            );
        }
    };
    agree(&idx);
    assert!(!idx.is_used(&cm("c1")));
    idx.apply_workload(entry("a", &["c1"], &[]));
    idx.apply_workload(entry(
        "r",
        &[],
        &[("configmap.reloader.stakater.com/reload", "app-.*")],
    ));
    agree(&idx);
    assert!(idx.is_used(&cm("c1")) && idx.is_used(&cm("app-1")));
    idx.delete_workload(&WorkloadKey::new(WorkloadKind::Deployment, "ns", "a"));
    idx.apply_workload(entry("r", &[], &[]));
    agree(&idx);
    assert!(!idx.is_used(&cm("c1")) && !idx.is_used(&cm("app-1")));
}

#[test]
fn config_transitions() {
    let idx = ReverseIndex::new();
    assert_eq!(
        idx.apply_config(cm("c"), state(1)),
        ConfigTransition::Created
    );
    assert_eq!(
        idx.apply_config(cm("c"), state(1)),
        ConfigTransition::Unchanged
    );
    assert_eq!(
        idx.apply_config(cm("c"), state(2)),
        ConfigTransition::Changed
    );
    assert!(idx.delete_config(&cm("c")).is_some());
    assert_eq!(idx.config(&cm("c")), None);
}

#[test]
fn drop_namespace_and_retain() {
    let idx = ReverseIndex::new();
    idx.apply_workload(entry("a", &["c1"], &[]));
    idx.apply_config(cm("c1"), state(1));
    idx.apply_config(ConfigKey::new(ConfigKind::ConfigMap, "keep", "x"), state(1));
    idx.drop_namespace("ns");
    assert_eq!(
        idx.sizes(),
        IndexSizes {
            configs: 1,
            workloads: 0,
            edges: 0
        }
    );
    idx.apply_workload(entry("a", &["c1"], &[]));
    idx.apply_workload(entry("b", &["c1"], &[]));
    idx.retain_workloads(WorkloadKind::Deployment, |k| &*k.name == "b");
    assert_eq!(names(idx.candidates(&cm("c1"))), ["b"]);
}

/// A namespace that moved away keeps its config states (to be compared when it comes back):
/// its workloads go, and a later backfill of it is a change where the config moved on.
#[test]
fn a_namespace_that_left_keeps_its_config_states_for_the_backfill() {
    let idx = ReverseIndex::new();
    idx.apply_workload(entry("a", &["c1"], &[]));
    let mut kept = state(1);
    kept.resource_version = 10;
    idx.apply_config(cm("c1"), kept);
    idx.apply_config(
        ConfigKey::new(ConfigKind::ConfigMap, "other", "x"),
        state(1),
    );
    idx.drop_workloads_in("ns");
    assert_eq!(idx.sizes().workloads, 0);
    let versions = idx.config_versions_in(&std::collections::HashSet::from(["ns"]));
    assert_eq!(versions, vec![(cm("c1"), 10)]);
    let mut newer = state(2);
    newer.resource_version = 12;
    assert_eq!(
        idx.backfill_config(cm("c1"), newer),
        ConfigTransition::Changed
    );
}

#[test]
fn concurrent_updates_never_lose_edges() {
    let idx = Arc::new(ReverseIndex::new());
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let idx = idx.clone();
            std::thread::spawn(move || {
                for i in 0..500 {
                    let name = format!("w{t}-{}", i % 20);
                    let uses = if i % 2 == 0 {
                        vec!["shared"]
                    } else {
                        vec!["shared", "odd"]
                    };
                    idx.apply_workload(entry(&name, &uses, &[]));
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(idx.candidates(&cm("shared")).len(), 80);
    // Names with an odd suffix were last written with i odd, so they use "odd" too.
    assert_eq!(idx.candidates(&cm("odd")).len(), 40);
}

#[test]
fn an_event_older_than_what_is_stored_is_not_a_change() {
    let idx = ReverseIndex::new();
    let at = |byte, rv| ConfigState {
        keys: Default::default(),
        resource_version: rv,
        ..state(byte)
    };
    assert_eq!(
        idx.apply_config(cm("c"), at(2, 20)),
        ConfigTransition::Created
    );
    // A lagging watch delivers the older version after a list gave the newer one.
    assert_eq!(
        idx.apply_config(cm("c"), at(1, 10)),
        ConfigTransition::Unchanged
    );
    assert_eq!(idx.config(&cm("c")).unwrap().resource_version, 20);
    assert_eq!(
        idx.apply_config(cm("c"), at(3, 30)),
        ConfigTransition::Changed
    );
}

#[test]
fn a_backfill_replaces_only_older_snapshots() {
    let idx = ReverseIndex::new();
    let at = |byte, rv| ConfigState {
        keys: Default::default(),
        resource_version: rv,
        ..state(byte)
    };
    assert_eq!(
        idx.backfill_config(cm("c"), at(1, 10)),
        ConfigTransition::Created
    );
    assert_eq!(
        idx.backfill_config(cm("c"), at(2, 10)),
        ConfigTransition::Unchanged
    );
    assert_eq!(
        idx.backfill_config(cm("c"), at(2, 5)),
        ConfigTransition::Unchanged
    );
    assert_eq!(idx.config(&cm("c")).unwrap().resource_version, 10);
    assert_eq!(
        idx.backfill_config(cm("c"), at(1, 11)),
        ConfigTransition::Unchanged
    );
    assert_eq!(
        idx.backfill_config(cm("c"), at(3, 12)),
        ConfigTransition::Changed
    );
    // Without resource versions (pod statuses) what is stored stays.
    assert_eq!(
        idx.backfill_config(cm("s"), at(1, 0)),
        ConfigTransition::Created
    );
    assert_eq!(
        idx.backfill_config(cm("s"), at(2, 0)),
        ConfigTransition::Unchanged
    );
}

#[test]
fn unresolved_configs_are_those_used_but_never_indexed() {
    let index = ReverseIndex::new();
    index.apply_workload(entry("web", &["present", "absent"], &[]));
    index.apply_config(cm("present"), state(1));
    assert_eq!(
        index.unresolved_configs(ConfigKind::ConfigMap),
        vec![cm("absent")]
    );
    assert!(index.unresolved_configs(ConfigKind::Secret).is_empty());
    index.delete_workload(&WorkloadKey::new(WorkloadKind::Deployment, "ns", "web"));
    assert!(index.unresolved_configs(ConfigKind::ConfigMap).is_empty());
}

#[test]
fn a_config_state_is_64_bytes_and_holds_no_payload() {
    // The figure entry.rs documents; what a key adds is on the heap (24 bytes a key), and so
    // are the wave annotations of the few configs that have them.
    assert_eq!(std::mem::size_of::<ConfigState>(), 64);
}

#[test]
fn a_workload_entry_is_88_bytes_and_each_use_56() {
    // 100,000 workloads with two configs each: every 8 bytes here is 0.8-1.6 MiB, and 8 bytes
    // can take an allocation down one size class (16 bytes) of the allocator.
    assert_eq!(std::mem::size_of::<WorkloadEntry>(), 88);
    assert_eq!(std::mem::size_of::<IndexedUse>(), 56);
}

#[test]
fn only_namespaces_with_a_config_written_since_a_version_can_hold_a_change() {
    let idx = ReverseIndex::new();
    let at = |rv| ConfigState {
        resource_version: rv,
        ..state(1)
    };
    let key = |kind, ns: &str| ConfigKey::new(kind, ns, "c");
    idx.apply_config(key(ConfigKind::ConfigMap, "old"), at(10));
    idx.apply_config(key(ConfigKind::ConfigMap, "at"), at(20));
    idx.apply_config(key(ConfigKind::ConfigMap, "new"), at(21));
    idx.apply_config(key(ConfigKind::ConfigMap, "unknown"), at(0));
    idx.apply_config(key(ConfigKind::ConfigMap, "elsewhere"), at(30));
    idx.apply_config(key(ConfigKind::Secret, "secret-only"), at(30));
    let wanted = |ns: &str| ns != "elsewhere";
    let written = idx.namespaces_written_since(ConfigKind::ConfigMap, 20, &wanted);
    let written: Vec<&str> = written.iter().map(String::as_str).collect();
    assert_eq!(written, ["new", "unknown"]);
}

/// A config and its users share one entry: deleting either leaves the other, and the entry goes
/// with the last of them.
#[test]
fn a_config_and_its_users_share_one_entry_gone_with_the_last_of_them() {
    let idx = ReverseIndex::new();
    let a = WorkloadKey::new(WorkloadKind::Deployment, "ns", "a");
    idx.apply_workload(entry("a", &["c1"], &[]));
    assert_eq!(idx.unresolved_configs(ConfigKind::ConfigMap), [cm("c1")]);
    assert_eq!(
        idx.apply_config(cm("c1"), state(1)),
        ConfigTransition::Created
    );
    assert!(idx.unresolved_configs(ConfigKind::ConfigMap).is_empty());

    assert_eq!(idx.delete_config(&cm("c1")), Some(state(1)));
    assert_eq!(idx.config(&cm("c1")), None);
    assert_eq!(names(idx.candidates(&cm("c1"))), ["a"]);
    let sizes = IndexSizes {
        configs: 0,
        workloads: 1,
        edges: 1,
    };
    assert_eq!(idx.sizes(), sizes);
    idx.delete_workload(&a);
    assert_eq!(idx.configs.len(), 0, "nothing left of c1");

    idx.apply_config(cm("c2"), state(2));
    idx.apply_workload(entry("a", &["c2"], &[]));
    idx.delete_workload(&a);
    assert_eq!(idx.config(&cm("c2")), Some(state(2)), "kept without users");
    assert!(idx.candidates(&cm("c2")).is_empty());
    assert_eq!(idx.delete_config(&cm("c2")), Some(state(2)));
    assert_eq!(idx.configs.len(), 0);
}

#[test]
fn dropping_a_namespace_leaves_nothing_of_it_and_keeps_the_others() {
    let idx = ReverseIndex::new();
    idx.apply_workload(entry("a", &["c1", "c2"], &[]));
    idx.apply_config(cm("c1"), state(1));
    let elsewhere = ConfigKey::new(ConfigKind::ConfigMap, "other", "c1");
    idx.apply_config(elsewhere.clone(), state(3));
    idx.drop_namespace("ns");
    assert_eq!(idx.configs.len(), 1);
    assert_eq!(idx.config(&elsewhere), Some(state(3)));
    assert!(idx.workloads_in(None).is_empty());
}

#[test]
fn the_index_knows_which_built_in_kinds_it_holds() {
    let idx = ReverseIndex::new();
    assert!(!idx.holds_workloads_of(WorkloadKind::Deployment));
    idx.apply_workload(entry("a", &["c1"], &[]));
    idx.apply_workload(entry("a", &["c2"], &[]));
    assert!(idx.holds_workloads_of(WorkloadKind::Deployment));
    assert!(!idx.holds_workloads_of(WorkloadKind::StatefulSet));
    idx.delete_workload(&WorkloadKey::new(WorkloadKind::Deployment, "ns", "a"));
    assert!(
        !idx.holds_workloads_of(WorkloadKind::Deployment),
        "one added, one gone"
    );
    assert!(
        idx.delete_workload(&WorkloadKey::new(WorkloadKind::Deployment, "ns", "a"))
            .is_none()
    );
    assert!(!idx.holds_workloads_of(WorkloadKind::Deployment));
}
