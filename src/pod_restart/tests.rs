use super::*;

fn at(second: i64) -> jiff::Timestamp {
    jiff::Timestamp::from_second(second).unwrap()
}

fn pod(name: &str, created: i64) -> PodView {
    PodView {
        name: name.into(),
        uid: format!("uid-{name}"),
        created: at(created),
        terminating: false,
        ready: true,
    }
}

fn target(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// A restart begun at `since` when the workload had `pods` (names; their UIDs are recorded).
fn pending(configs: &[(&str, &str)], since: i64, pods: &[&str]) -> RestartRecord {
    RestartRecord {
        done: BTreeMap::new(),
        pending: Some(PendingRestart {
            configs: target(configs),
            since: at(since),
            pods: pods.iter().map(|p| format!("uid-{p}")).collect(),
        }),
    }
}

#[test]
fn a_value_already_restarted_for_is_up_to_date() {
    let record = RestartRecord {
        done: target(&[("configmap/app", "h1")]),
        pending: None,
    };
    let step = next_step(
        &record,
        &target(&[("configmap/app", "h1")]),
        &[pod("a", 10)],
        1,
        at(100),
    );
    assert_eq!(step, EvictionStep::UpToDate);
}

#[test]
fn a_new_value_begins_a_restart_recording_the_pods_there_are() {
    let record = RestartRecord {
        done: target(&[("configmap/app", "h1")]),
        pending: None,
    };
    let mut going = pod("going", 5);
    going.terminating = true;
    let step = next_step(
        &record,
        &target(&[("configmap/app", "h2")]),
        &[pod("a", 10), pod("b", 11), going],
        2,
        at(100),
    );
    let EvictionStep::Begin(next) = step else {
        panic!("expected Begin, got {step:?}")
    };
    assert_eq!(
        next.done, record.done,
        "done kept until every pod is replaced"
    );
    assert_eq!(
        next.pending,
        pending(&[("configmap/app", "h2")], 100, &["a", "b"]).pending,
        "a pod already terminating goes away by itself"
    );
}

#[test]
fn evicts_the_oldest_pod_left_of_those_recorded_one_at_a_time() {
    let record = pending(&[("configmap/app", "h2")], 100, &["a", "b"]);
    let pods = [pod("b", 50), pod("a", 20), pod("fresh", 10)];
    let step = next_step(
        &record,
        &target(&[("configmap/app", "h2")]),
        &pods,
        3,
        at(140),
    );
    assert_eq!(
        step,
        EvictionStep::Evict("a".into()),
        "`fresh` was not there when the restart began, whatever its clock says"
    );
}

#[test]
fn waits_while_a_pod_terminates_or_too_few_are_ready() {
    let record = pending(&[("configmap/app", "h2")], 100, &["a", "b"]);
    let wanted = target(&[("configmap/app", "h2")]);
    let mut going = pod("a", 20);
    going.terminating = true;
    let step = next_step(&record, &wanted, &[going, pod("b", 20)], 1, at(140));
    assert!(
        matches!(step, EvictionStep::Wait(ref why) if why.contains("terminating")),
        "{step:?}"
    );
    let mut starting = pod("new", 120);
    starting.ready = false;
    let step = next_step(&record, &wanted, &[starting, pod("b", 20)], 2, at(140));
    assert_eq!(step, EvictionStep::Wait("1 of 2 pods Ready".into()));
}

#[test]
fn finishes_when_no_pod_recorded_at_the_start_is_left() {
    let mut record = pending(&[("configmap/app", "h2")], 100, &["a", "b"]);
    record.done = target(&[("secret/db", "s1"), ("configmap/app", "h1")]);
    // Replacements, even under the same names (a StatefulSet's), have new UIDs.
    let mut a_again = pod("a", 102);
    a_again.uid = "uid-a-2".into();
    let step = next_step(
        &record,
        &target(&[("configmap/app", "h2")]),
        &[a_again, pod("y", 105)],
        2,
        at(140),
    );
    let EvictionStep::Finish(done) = step else {
        panic!("expected Finish, got {step:?}")
    };
    assert_eq!(done.pending, None);
    assert_eq!(
        done.done,
        target(&[("secret/db", "s1"), ("configmap/app", "h2")])
    );
}

#[test]
fn a_newer_value_while_restarting_begins_again_with_every_pod_now() {
    let record = pending(&[("configmap/app", "h2"), ("secret/db", "s2")], 100, &["a"]);
    let step = next_step(
        &record,
        &target(&[("configmap/app", "h3")]),
        &[pod("a", 20), pod("replaced", 110)],
        1,
        at(140),
    );
    let EvictionStep::Begin(next) = step else {
        panic!("expected Begin, got {step:?}")
    };
    let again = next.pending.expect("pending");
    assert_eq!(again.since, at(140));
    assert_eq!(
        again.configs,
        target(&[("configmap/app", "h3"), ("secret/db", "s2")])
    );
    let uids: Vec<&str> = again.pods.iter().map(String::as_str).collect();
    assert_eq!(
        uids,
        ["uid-a", "uid-replaced"],
        "the replacement ran h2: it goes too"
    );
}

#[test]
fn the_record_round_trips_and_reads_what_was_done() {
    let mut record = pending(&[("configmap/app", "h2")], 100, &["a"]);
    record.done = target(&[("secret/db", "s1")]);
    let read = RestartRecord::parse(Some(&record.to_json())).unwrap();
    assert_eq!(read, record);
    assert_eq!(read.recorded(ConfigKind::Secret, "db"), Some("s1"));
    assert_eq!(
        read.recorded(ConfigKind::ConfigMap, "app"),
        Some(UNFINISHED),
        "a first restart begun is not done, and not nothing either"
    );
    assert_eq!(read.recorded(ConfigKind::ConfigMap, "other"), None);
    assert_eq!(
        RestartRecord::parse(None).unwrap(),
        RestartRecord::default()
    );
    assert!(RestartRecord::parse(Some("{not json")).is_err());
}
