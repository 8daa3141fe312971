use std::collections::{BTreeSet, HashSet};

use futures::stream;
use kube::runtime::watcher::{self, Event};

use super::*;

/// Records every verb call, in order.
#[derive(Default)]
struct Recorder {
    calls: Vec<String>,
    /// Answers `list_mark`; an object named `entering...` enters its namespace.
    ownership: crate::shard::Ownership,
    reset_marks: Vec<ListMark>,
    /// Answers `diffs_first_list`.
    blind_first_list: bool,
}

impl IndexVerbs<&'static str> for Recorder {
    type Key = &'static str;

    async fn apply(&mut self, obj: &'static str, phase: Phase) -> Option<&'static str> {
        self.calls.push(format!("apply {obj} {phase:?}"));
        if obj.starts_with("entering") {
            self.ownership.entered("ns");
        }
        // Objects of namespaces this replica does not own are not kept.
        (!obj.starts_with("unowned")).then_some(obj)
    }

    async fn delete(&mut self, obj: &'static str) {
        self.calls.push(format!("delete {obj}"));
    }

    fn list_mark(&self) -> ListMark {
        self.ownership.list_mark()
    }

    fn diffs_first_list(&self) -> bool {
        !self.blind_first_list
    }

    fn reset(
        &mut self,
        namespace: Option<&str>,
        seen: Option<HashSet<&'static str>>,
        first: bool,
        mark: ListMark,
    ) {
        let seen = match seen {
            Some(seen) => format!("{:?}", seen.into_iter().collect::<BTreeSet<_>>()),
            None => "(not collected)".into(),
        };
        self.calls
            .push(format!("reset {namespace:?} {seen} first={first}"));
        self.reset_marks.push(mark);
    }

    fn failed(&mut self, _error: &watcher::Error) {
        self.calls.push("failed".into());
    }
}

type Ev = StreamEvent<&'static str>;

fn on(i: usize, event: Event<&'static str>) -> Ev {
    (i, Ok(event))
}

fn broken(i: usize) -> Ev {
    (i, Err(watcher::Error::NoResourceVersion))
}

async fn run(events: Vec<Ev>, namespaces: Vec<Option<String>>) -> (Vec<String>, SyncGate) {
    let gate = SyncGate::new(namespaces.len());
    let mut recorder = Recorder::default();
    drive(stream::iter(events), namespaces, &mut recorder, &gate).await;
    (recorder.calls, gate)
}

fn first_list(i: usize, objs: &[&'static str]) -> Vec<Ev> {
    let mut events = vec![on(i, Event::Init)];
    events.extend(objs.iter().map(|o| on(i, Event::InitApply(*o))));
    events.push(on(i, Event::InitDone));
    events
}

#[tokio::test]
async fn the_first_list_is_startup_and_resets_with_what_it_returned() {
    let (calls, gate) = run(first_list(0, &["a", "unowned-b"]), vec![None]).await;
    assert_eq!(
        calls,
        [
            "apply a Startup",
            "apply unowned-b Startup",
            r#"reset None {"a"} first=true"#,
        ]
    );
    assert!(gate.is_open(), "the only stream listed once");
}

#[tokio::test]
async fn after_a_break_the_relist_is_relisted_and_reports_what_survived() {
    let mut events = first_list(0, &["a", "b"]);
    events.push(on(0, Event::Apply("c")));
    events.push(broken(0));
    events.extend(first_list(0, &["b", "c"]));
    let (calls, _) = run(events, vec![None]).await;
    assert_eq!(
        calls[3..],
        [
            "apply c Live",
            "failed",
            "apply b Relisted",
            "apply c Relisted",
            r#"reset None {"b", "c"} first=false"#,
        ]
    );
}

/// A watch that does not diff its first list gets none of its keys collected; its relists do.
#[tokio::test]
async fn keys_of_a_first_list_nobody_diffs_are_not_collected() {
    let mut events = first_list(0, &["a", "b"]);
    events.push(broken(0));
    events.extend(first_list(0, &["b"]));
    let gate = SyncGate::new(1);
    let mut recorder = Recorder {
        blind_first_list: true,
        ..Recorder::default()
    };
    drive(stream::iter(events), vec![None], &mut recorder, &gate).await;
    assert_eq!(
        recorder.calls,
        [
            "apply a Startup",
            "apply b Startup",
            "reset None (not collected) first=true",
            "failed",
            "apply b Relisted",
            r#"reset None {"b"} first=false"#,
        ]
    );
}

#[tokio::test]
async fn live_events_outside_a_list_are_not_part_of_any_relist() {
    let mut events = first_list(0, &[]);
    events.push(on(0, Event::Apply("x")));
    events.push(on(0, Event::Delete("y")));
    events.extend(first_list(0, &["z"]));
    let (calls, _) = run(events, vec![None]).await;
    assert_eq!(
        calls,
        [
            "reset None {} first=true",
            "apply x Live",
            "delete y",
            "apply z Relisted",
            r#"reset None {"z"} first=false"#,
        ]
    );
}

#[tokio::test]
async fn each_scoped_stream_resets_its_own_namespace_and_counts_once() {
    let namespaces = vec![Some("ns-a".to_string()), Some("ns-b".to_string())];
    // Stream 0 lists twice (a relist), stream 1 not at all yet: the gate stays shut.
    let stream_0 = || {
        first_list(0, &["a1"])
            .into_iter()
            .chain(first_list(0, &["a2"]))
    };
    let (calls, gate) = run(stream_0().collect(), namespaces.clone()).await;
    assert!(!gate.is_open(), "stream 1 has not listed: {calls:?}");
    let all = stream_0().chain(first_list(1, &["b1"])).collect();
    let (calls, gate) = run(all, namespaces).await;
    assert!(gate.is_open());
    let resets: Vec<&String> = calls.iter().filter(|c| c.starts_with("reset")).collect();
    assert_eq!(
        resets,
        [
            r#"reset Some("ns-a") {"a1"} first=true"#,
            r#"reset Some("ns-a") {"a2"} first=false"#,
            r#"reset Some("ns-b") {"b1"} first=true"#,
        ]
    );
}

#[tokio::test]
async fn an_init_done_without_init_resets_nothing() {
    let (calls, gate) = run(vec![on(0, Event::InitDone)], vec![None]).await;
    assert!(calls.is_empty(), "{calls:?}");
    assert!(gate.is_open());
}

#[tokio::test]
async fn map_event_keeps_the_shape_and_says_which_object_is_deleted() {
    let tag = |o: &'static str, deleted: bool| async move { format!("{o}:{deleted}") };
    let mapped = map_event(Ok(Event::Apply("a")), tag).await.unwrap();
    assert!(matches!(mapped, Event::Apply(ref s) if s == "a:false"));
    let mapped = map_event(Ok(Event::Delete("a")), tag).await.unwrap();
    assert!(matches!(mapped, Event::Delete(ref s) if s == "a:true"));
    let mapped = map_event(Ok(Event::<&str>::InitDone), tag).await.unwrap();
    assert!(matches!(mapped, Event::InitDone));
    let failed = map_event(
        Err::<Event<&str>, _>(watcher::Error::NoResourceVersion),
        tag,
    )
    .await;
    assert!(failed.is_err());
}

#[tokio::test]
async fn a_relist_is_reset_with_the_mark_taken_when_it_started() {
    let mut events = first_list(0, &["a"]);
    events.push(broken(0));
    events.extend(first_list(0, &["a", "entering-b"]));
    let gate = SyncGate::new(1);
    let mut recorder = Recorder::default();
    let at_start = recorder.ownership.list_mark();
    drive(stream::iter(events), vec![None], &mut recorder, &gate).await;
    assert_eq!(recorder.reset_marks, vec![at_start, at_start]);
    assert!(
        !recorder.ownership.listed_throughout("ns", at_start),
        "ns entered during the relist: what the relist missed there is not a deletion"
    );
    assert!(recorder.ownership.listed_throughout("other", at_start));
}
