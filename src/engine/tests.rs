use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use clap::Parser;
use serde_json::json;

use super::intake::Intake;
use super::*;
use crate::config::Flags;
use crate::index::workload_entry;
use crate::model::{ConfigKind, WorkloadKey, WorkloadKind};
use crate::reloader_format::hash::{ConfigPayload, digest_payload};
use crate::rollout::Drained;
use crate::rollout::events::EventSink;
use crate::rollout::pause::PauseKeeper;
use crate::rollout::{WriteError, WriteOutcome, WriteTurn};

type WriteLog = Vec<(String, Vec<TemplateChange>)>;

#[derive(Default, Clone)]
struct Writes(Arc<Mutex<WriteLog>>);

impl WorkloadWriter for Writes {
    async fn write(
        &self,
        key: &WorkloadKey,
        changes: &[QueuedChange],
        turn: &WriteTurn<'_>,
    ) -> Result<WriteOutcome, WriteError> {
        turn.take().await;
        let c = changes.iter().map(|c| c.change.clone()).collect();
        self.0.lock().unwrap().push((key.name.to_string(), c));
        Ok(WriteOutcome::Reloaded)
    }
}

fn engine(args: &[&str]) -> (Engine<Writes, ()>, Writes) {
    let mut argv = vec!["kube-reloader"];
    argv.extend_from_slice(args);
    let settings = Arc::new(Settings::try_from(Flags::parse_from(argv)).unwrap());
    let writes = Writes::default();
    let queue = ReloadQueue::start(writes.clone(), (), Default::default());
    let ownership = Arc::new(Ownership::new(Vec::new(), false));
    (
        Engine::new(
            Arc::new(ReverseIndex::new()),
            settings,
            ownership,
            queue,
            (),
        ),
        writes,
    )
}

fn state(value: &str) -> ConfigState {
    let mut data = BTreeMap::new();
    data.insert("k".to_string(), value.to_string());
    ConfigState {
        keys: Default::default(),
        digest: digest_payload(ConfigPayload::ConfigMap {
            data,
            binary_data: BTreeMap::new(),
        }),
        ignore: false,
        matched: false,
        resource_version: 0,
        waves: None,
    }
}

fn deployment(
    e: &Engine<Writes, ()>,
    name: &str,
    annotations: serde_json::Value,
    env: serde_json::Value,
) {
    let obj = json!({
        "metadata": {"name": name, "namespace": "ns", "annotations": annotations},
        "spec": {"template": {"spec": {"containers": [{
            "name": "app", "envFrom": [{"configMapRef": {"name": "cfg"}}], "env": env
        }]}}}
    });
    let entry = workload_entry(WorkloadKind::Deployment, &obj, &e.settings.keys).unwrap();
    e.index.apply_workload(entry);
}

fn cfg() -> ConfigKey {
    ConfigKey::new(ConfigKind::ConfigMap, "ns", "cfg")
}

async fn settle(e: &Engine<Writes, ()>) {
    assert_eq!(
        e.queue().drain(Duration::from_secs(5)).await,
        Drained::Everything
    );
}

#[tokio::test]
async fn startup_list_reloads_nothing_and_changes_reload_opted_in_workloads() {
    let (e, writes) = engine(&[]);
    deployment(
        &e,
        "auto",
        json!({"reloader.stakater.com/auto": "true"}),
        json!([]),
    );
    deployment(&e, "plain", json!({}), json!([]));
    assert_eq!(e.config_applied(cfg(), state("v1"), Phase::Startup), 0);
    assert_eq!(
        e.config_applied(cfg(), state("v1"), Phase::Live),
        0,
        "same content"
    );
    assert_eq!(e.config_applied(cfg(), state("v2"), Phase::Live), 1);
    settle(&e).await;
    let w = writes.0.lock().unwrap().clone();
    assert_eq!(w.len(), 1);
    assert_eq!(w[0].0, "auto");
    assert_eq!(w[0].1[0].hash, Some(state("v2").digest.reloader_hash()));
}

#[tokio::test]
async fn create_and_delete_follow_their_flags() {
    let (e, _) = engine(&[]);
    deployment(
        &e,
        "auto",
        json!({"reloader.stakater.com/auto": "true"}),
        json!([]),
    );
    assert_eq!(e.config_applied(cfg(), state("v1"), Phase::Live), 0);
    assert_eq!(e.config_deleted(&cfg()), 0);
    let (e, writes) = engine(&["--reload-on-create=true", "--reload-on-delete=true"]);
    deployment(
        &e,
        "auto",
        json!({"reloader.stakater.com/auto": "true"}),
        json!([]),
    );
    assert_eq!(e.config_applied(cfg(), state("v1"), Phase::Live), 1);
    settle(&e).await;
    assert_eq!(e.config_deleted(&cfg()), 1);
    settle(&e).await;
    assert_eq!(writes.0.lock().unwrap()[1].1[0].hash, None);
}

#[tokio::test]
async fn sync_after_restart_treats_listed_configs_as_created() {
    let (e, _) = engine(&["--reload-on-create=true", "--sync-after-restart"]);
    deployment(
        &e,
        "auto",
        json!({"reloader.stakater.com/auto": "true"}),
        json!([]),
    );
    assert_eq!(e.config_applied(cfg(), state("v1"), Phase::Startup), 1);
}

#[tokio::test]
async fn reconcile_reloads_only_stale_recorded_hashes() {
    let (e, writes) = engine(&[]);
    let current = state("v2").digest.reloader_hash();
    let auto = json!({"reloader.stakater.com/auto": "true"});
    deployment(
        &e,
        "stale",
        auto.clone(),
        json!([{"name": "STAKATER_CFG_CONFIGMAP", "value": "old"}]),
    );
    deployment(
        &e,
        "fresh",
        auto.clone(),
        json!([{"name": "STAKATER_CFG_CONFIGMAP", "value": current}]),
    );
    deployment(&e, "never", auto, json!([]));
    e.config_applied(cfg(), state("v2"), Phase::Startup);
    assert_eq!(e.reconcile_recorded(None), 1);
    settle(&e).await;
    let w = writes.0.lock().unwrap().clone();
    assert_eq!(
        w.iter().map(|w| w.0.as_str()).collect::<Vec<_>>(),
        ["stale"]
    );
}

#[tokio::test]
async fn ignored_namespace_is_not_indexed_or_reloaded() {
    let (mut e, _) = engine(&[]);
    e.ownership = Arc::new(Ownership::new(["ns".to_string()], false));
    deployment(
        &e,
        "auto",
        json!({"reloader.stakater.com/auto": "true"}),
        json!([]),
    );
    e.config_applied(cfg(), state("v1"), Phase::Live);
    assert_eq!(e.config_applied(cfg(), state("v2"), Phase::Live), 0);
    assert_eq!(e.index.config(&cfg()), None);
}

#[tokio::test]
async fn fan_out_coalesces_two_configs_of_one_workload() {
    let (e, writes) = engine(&[]);
    let obj = json!({
        "metadata": {"name": "two", "namespace": "ns", "annotations": {"reloader.stakater.com/auto": "true"}},
        "spec": {"template": {"spec": {"containers": [{
            "name": "app", "envFrom": [{"configMapRef": {"name": "a"}}, {"configMapRef": {"name": "b"}}]
        }]}}}
    });
    e.index
        .apply_workload(workload_entry(WorkloadKind::Deployment, &obj, &e.settings.keys).unwrap());
    for n in ["a", "b"] {
        e.config_applied(
            ConfigKey::new(ConfigKind::ConfigMap, "ns", n),
            state("1"),
            Phase::Startup,
        );
    }
    // Both change before the queue runs: one write carries both.
    e.config_applied(
        ConfigKey::new(ConfigKind::ConfigMap, "ns", "a"),
        state("2"),
        Phase::Live,
    );
    e.config_applied(
        ConfigKey::new(ConfigKind::ConfigMap, "ns", "b"),
        state("2"),
        Phase::Live,
    );
    settle(&e).await;
    let writes = writes.0.lock().unwrap();
    assert_eq!(
        writes.len(),
        1,
        "two changes queued together make one write"
    );
    assert_eq!(writes[0].1.len(), 2, "and that write carries both");
}

#[tokio::test]
async fn a_backfill_list_never_rolls_back_what_the_watch_delivered() {
    let (e, writes) = engine(&[]);
    deployment(
        &e,
        "auto",
        json!({"reloader.stakater.com/auto": "true"}),
        json!([]),
    );
    e.config_applied(cfg(), state("v1"), Phase::Startup);
    assert_eq!(e.config_applied(cfg(), state("v2"), Phase::Live), 1);
    // A list taken before v2 arrives late: it must not look like a change back to v1.
    assert_eq!(e.config_applied(cfg(), state("v1"), Phase::Backfill), 0);
    assert_eq!(e.index.config(&cfg()), Some(state("v2")));
    settle(&e).await;
    assert_eq!(writes.0.lock().unwrap().len(), 1);
    // For a config the watch has not delivered yet, the list fills the gap silently.
    let other = ConfigKey::new(ConfigKind::ConfigMap, "ns", "other");
    assert_eq!(
        e.config_applied(other.clone(), state("x"), Phase::Backfill),
        0
    );
    assert_eq!(e.index.config(&other), Some(state("x")));
}

/// A namespace handed back to this replica: its index still holds the config as it was before
/// the namespace left, and the change made meanwhile was acted on by nobody (the other replica
/// let go of the namespace before writing it). The backfill's newer snapshot is that change.
#[tokio::test]
async fn a_backfill_newer_than_the_index_is_a_change() {
    let (e, writes) = engine(&[]);
    deployment(
        &e,
        "auto",
        json!({"reloader.stakater.com/auto": "true"}),
        json!([]),
    );
    e.config_applied(cfg(), at("v1", 10), Phase::Startup);
    assert_eq!(e.config_applied(cfg(), at("v2", 20), Phase::Backfill), 1);
    assert_eq!(e.index.config(&cfg()), Some(at("v2", 20)));
    // The same snapshot listed again, or an older one, changes nothing.
    assert_eq!(e.config_applied(cfg(), at("v2", 20), Phase::Backfill), 0);
    assert_eq!(e.config_applied(cfg(), at("v1", 10), Phase::Backfill), 0);
    settle(&e).await;
    assert_eq!(writes.0.lock().unwrap().len(), 1);
}

/// A namespace back after a while elsewhere: the replica that owned it meanwhile rolled the
/// workload to the config's new value, and the backfill's list shows it. Nothing to queue; a
/// workload still on the old value is queued.
#[tokio::test]
async fn a_backfill_newer_than_the_index_skips_workloads_already_on_the_new_value() {
    let (e, writes) = engine(&[]);
    let auto = json!({"reloader.stakater.com/auto": "true"});
    let v2 = at("v2", 20).digest.reloader_hash();
    deployment(
        &e,
        "rolled",
        auto.clone(),
        json!([{"name": "STAKATER_CFG_CONFIGMAP", "value": v2}]),
    );
    e.config_applied(cfg(), at("v1", 10), Phase::Startup);
    assert_eq!(e.config_applied(cfg(), at("v2", 20), Phase::Backfill), 0);
    assert_eq!(e.index.config(&cfg()), Some(at("v2", 20)));
    deployment(
        &e,
        "behind",
        auto,
        json!([{"name": "STAKATER_CFG_CONFIGMAP", "value": "v1-hash"}]),
    );
    assert_eq!(e.config_applied(cfg(), at("v3", 30), Phase::Backfill), 2);
    settle(&e).await;
    let mut written: Vec<_> = writes
        .0
        .lock()
        .unwrap()
        .iter()
        .map(|w| w.0.clone())
        .collect();
    written.sort();
    assert_eq!(written, ["behind", "rolled"]);
}

/// What recovery finds (a backfill list newer than the index, a departed owner's missed change)
/// is late already: it is queued behind live changes, never ahead of them (issue 43).
#[tokio::test]
async fn changes_recovery_finds_queue_behind_live_ones() {
    let (e, _writes) = engine(&[]);
    deployment(
        &e,
        "auto",
        json!({"reloader.stakater.com/auto": "true"}),
        json!([]),
    );
    let workload = WorkloadKey::new(WorkloadKind::Deployment, "ns", "auto");
    let priority = |e: &Engine<Writes, ()>| e.queue().inspect(&workload).map(|q| q.priority);
    e.config_applied(cfg(), at("v1", 10), Phase::Startup);
    assert_eq!(e.config_applied(cfg(), at("v2", 20), Phase::Live), 1);
    assert_eq!(priority(&e), Some(Priority::Live), "a change seen now");
    settle(&e).await;
    assert_eq!(e.config_applied(cfg(), at("v3", 30), Phase::Backfill), 1);
    assert_eq!(
        priority(&e),
        Some(Priority::Background),
        "a backfill's newer snapshot"
    );
    settle(&e).await;
    let before = at("v2", 20);
    assert_eq!(e.missed_change(&cfg(), Some(&before)), 1);
    assert_eq!(
        priority(&e),
        Some(Priority::Background),
        "a catch-up's missed change"
    );
}

/// A namespace gained with nothing kept of it: a live change of its config arrived while its
/// workloads were being listed, so it was left to the backfill's config list. That list brings
/// a config the index never held: it changed, and the workload (which recorded no hash of it
/// yet) is rolled; a config listed without such a change only fills the gap.
#[tokio::test]
async fn a_change_left_to_the_backfill_rolls_a_config_new_to_the_index() {
    let (e, writes) = engine(&[]);
    deployment(
        &e,
        "auto",
        json!({"reloader.stakater.com/auto": "true"}),
        json!([]),
    );
    assert_eq!(
        e.config_applied(cfg(), state("v2"), Phase::BackfillAfterChange),
        1
    );
    let other = ConfigKey::new(ConfigKind::ConfigMap, "ns", "other");
    assert_eq!(e.config_applied(other, state("x"), Phase::Backfill), 0);
    settle(&e).await;
    assert_eq!(writes.0.lock().unwrap().len(), 1);
}

/// An Intake over `e`, as the watches drive it. Its client is never reached: nothing here
/// publishes an Event or writes a pause.
fn intake_of(e: &Arc<Engine<Writes, ()>>) -> Intake {
    use std::num::NonZeroU32;
    let url = "http://127.0.0.1:9".parse().unwrap();
    let client = kube::Client::try_from(kube::Config::new(url)).unwrap();
    let one = NonZeroU32::new(1).unwrap();
    let limiter = crate::rollout::write_limiter(one, one);
    let pauses = PauseKeeper::new(client.clone(), e.ownership.clone(), limiter, "p".into());
    Intake::new(e.clone(), EventSink::new(client, None), pauses)
}

/// An engine holding one `auto` Deployment, and an Intake over it.
fn auto_deployment_with_intake() -> (Arc<Engine<Writes, ()>>, Writes, Intake) {
    let (e, writes) = engine(&[]);
    deployment(
        &e,
        "auto",
        json!({"reloader.stakater.com/auto": "true"}),
        json!([]),
    );
    let e = Arc::new(e);
    let intake = intake_of(&e);
    (e, writes, intake)
}

/// The same through the Intake, as the watches drive it: a live change met while the
/// namespace's workloads are listed is left to the backfill's config list, which then rolls
/// the workload although the index never held the config.
#[tokio::test]
async fn a_live_change_left_to_the_backfill_is_rolled_when_the_backfill_lists_it() {
    let (e, writes, intake) = auto_deployment_with_intake();
    intake.backfill_started(&["ns".to_string()]);
    assert_eq!(intake.config_applied(cfg(), state("v2"), Phase::Live), 0);
    assert_eq!(
        intake.config_applied(cfg(), state("v2"), Phase::Backfill),
        1
    );
    assert_eq!(intake.configs_backfilled(["ns"]), 0, "nothing left over");
    // A relist's objects in the meantime are not changes: listed later, they fill the gap.
    let relisted = ConfigKey::new(ConfigKind::ConfigMap, "ns", "other");
    intake.backfill_started(&["ns".to_string()]);
    let x = || state("x");
    assert_eq!(
        intake.config_applied(relisted.clone(), x(), Phase::Relisted),
        0
    );
    assert_eq!(intake.config_applied(relisted, x(), Phase::Backfill), 0);
    assert_eq!(intake.configs_backfilled(["ns"]), 0);
    settle(&e).await;
    assert_eq!(writes.0.lock().unwrap().len(), 1);
}

/// A live change that comes after the namespace's workloads were listed but before its configs
/// were: the config is not in the index yet. Taken at once it looked created (no reload), and
/// the backfill's list then found the index already on that state: the reload was lost (seen
/// in `with_the_gate_on_each_replica_receives_its_share_...`, 1 of 24 not rolled). It waits for
/// the list instead; and one that comes after the list took its snapshot of the config is
/// acted on when the backfill ends.
#[tokio::test]
async fn a_live_change_during_the_config_list_of_a_backfill_is_not_taken_for_a_creation() {
    let (e, writes, intake) = auto_deployment_with_intake();
    intake.backfill_started(&["ns".to_string()]);
    // The workloads are listed (the deployment above); the change arrives, then the list.
    assert_eq!(intake.config_applied(cfg(), at("v2", 20), Phase::Live), 0);
    assert_eq!(
        intake.config_applied(cfg(), at("v2", 20), Phase::Backfill),
        1
    );
    assert_eq!(intake.configs_backfilled(["ns"]), 0);
    settle(&e).await;
    assert_eq!(writes.0.lock().unwrap().len(), 1, "rolled once, to v2");

    // Listed first (at v2), then changed to v3 before the backfill ends.
    intake.backfill_started(&["ns".to_string()]);
    assert_eq!(
        intake.config_applied(cfg(), at("v2", 20), Phase::Backfill),
        0
    );
    assert_eq!(intake.config_applied(cfg(), at("v3", 30), Phase::Live), 0);
    assert_eq!(
        intake.configs_backfilled(["ns"]),
        1,
        "v3 acted on after the list"
    );
    assert_eq!(
        intake.config_applied(cfg(), at("v3", 30), Phase::Live),
        0,
        "the same event again is no change"
    );
    settle(&e).await;
    assert_eq!(writes.0.lock().unwrap().len(), 2);

    // Changed, then deleted, during a backfill: nothing is acted on when it ends.
    intake.backfill_started(&["ns".to_string()]);
    assert_eq!(intake.config_applied(cfg(), at("v4", 40), Phase::Live), 0);
    intake.config_deleted(&cfg());
    assert_eq!(
        intake.configs_backfilled(["ns"]),
        0,
        "a deleted config stays deleted"
    );
    assert!(e.index.config(&cfg()).is_none());
    settle(&e).await;
    assert_eq!(writes.0.lock().unwrap().len(), 2);
}

/// A watch that breaks during a backfill relists: the relist re-delivers every object, and one
/// may carry a change made after the backfill listed the config (its live event came while the
/// watch was down, so never). It was dropped, and the backfill's older snapshot stayed: the
/// change was lost. It waits like a live one, but counts only when it is newer than the list's
/// state and differs from it.
#[tokio::test]
async fn a_relisted_state_newer_than_the_backfill_list_is_acted_on_when_the_backfill_ends() {
    let (e, writes, intake) = auto_deployment_with_intake();
    intake.backfill_started(&["ns".to_string()]);
    assert_eq!(
        intake.config_applied(cfg(), at("v1", 10), Phase::Backfill),
        0
    );
    assert_eq!(
        intake.config_applied(cfg(), at("v2", 20), Phase::Relisted),
        0
    );
    assert_eq!(
        intake.configs_backfilled(["ns"]),
        1,
        "v2 is newer than the list's v1"
    );
    settle(&e).await;
    assert_eq!(writes.0.lock().unwrap().len(), 1);

    // Relisted before the list, at the state the list then brings: nothing changed.
    intake.backfill_started(&["ns".to_string()]);
    assert_eq!(
        intake.config_applied(cfg(), at("v2", 20), Phase::Relisted),
        0
    );
    assert_eq!(
        intake.config_applied(cfg(), at("v2", 20), Phase::Backfill),
        0
    );
    assert_eq!(intake.configs_backfilled(["ns"]), 0);
    settle(&e).await;
    assert_eq!(writes.0.lock().unwrap().len(), 1);
}

/// A ConfigMap `cfg` with keys `a` and `b`, digested per key as with `--precise-keys` on.
fn keyed(a: &str, b: &str) -> ConfigState {
    let data: BTreeMap<String, String> = [("a", a), ("b", b)]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let payload = || ConfigPayload::ConfigMap {
        data: data.clone(),
        binary_data: BTreeMap::new(),
    };
    ConfigState {
        digest: digest_payload(payload()),
        keys: crate::reloader_format::precise::key_digests(&payload()),
        ignore: false,
        matched: false,
        resource_version: 0,
        waves: None,
    }
}

/// A Deployment reading only key `a` of `cfg`, through `configMapKeyRef`, with `recorded` as
/// the reload env var's value when given.
fn reads_key_a(
    e: &Engine<Writes, ()>,
    name: &str,
    annotations: serde_json::Value,
    recorded: Option<&str>,
) {
    let mut env =
        vec![json!({"name": "A", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "a"}}})];
    if let Some(v) = recorded {
        env.push(json!({"name": "STAKATER_CFG_CONFIGMAP", "value": v}));
    }
    let obj = json!({
        "metadata": {"name": name, "namespace": "ns", "annotations": annotations},
        "spec": {"template": {"spec": {"containers": [{"name": "app", "env": env}]}}}
    });
    let entry = workload_entry(WorkloadKind::Deployment, &obj, &e.settings.keys).unwrap();
    e.index.apply_workload(entry);
}

fn written(writes: &Writes) -> Vec<(String, Option<String>)> {
    let w = writes.0.lock().unwrap();
    w.iter()
        .flat_map(|(name, changes)| changes.iter().map(move |c| (name.clone(), c.hash.clone())))
        .collect()
}

#[tokio::test]
async fn a_key_precise_workload_rolls_only_when_a_key_it_reads_changes() {
    let (e, writes) = engine(&["--precise-keys=all"]);
    let auto = json!({"reloader.stakater.com/auto": "true"});
    reads_key_a(&e, "reads-a", auto.clone(), None);
    deployment(&e, "env-from", auto, json!([]));
    e.config_applied(cfg(), keyed("1", "1"), Phase::Startup);
    assert_eq!(
        e.config_applied(cfg(), keyed("1", "2"), Phase::Live),
        1,
        "b changed: only the envFrom workload"
    );
    settle(&e).await;
    assert_eq!(e.config_applied(cfg(), keyed("2", "2"), Phase::Live), 2);
    settle(&e).await;
    let precise = keyed("2", "2").value_for(&Counted::keys(vec!["a".into()]));
    assert_ne!(precise, keyed("2", "2").digest.reloader_hash());
    let mut w = written(&writes);
    w[1..].sort();
    assert_eq!(
        w,
        [
            (
                "env-from".to_string(),
                Some(keyed("1", "2").digest.reloader_hash())
            ),
            (
                "env-from".to_string(),
                Some(keyed("2", "2").digest.reloader_hash())
            ),
            ("reads-a".to_string(), Some(precise)),
        ]
    );
}

#[tokio::test]
async fn the_mode_follows_the_flag_and_the_workload_annotation() {
    let auto = |precise: Option<&str>| match precise {
        Some(v) => {
            json!({"reloader.stakater.com/auto": "true", "kube-reloader.io/precise-keys": v})
        }
        None => json!({"reloader.stakater.com/auto": "true"}),
    };
    // (flag, annotation) -> does a change of key b roll the workload reading key a?
    let cases = [
        ("off", None, true),
        ("off", Some("true"), true),
        ("annotated", None, true),
        ("annotated", Some("true"), false),
        ("all", None, false),
        ("all", Some("false"), true),
    ];
    for (flag, annotation, rolls) in cases {
        let (e, _) = engine(&[&format!("--precise-keys={flag}")]);
        reads_key_a(&e, "w", auto(annotation), None);
        e.config_applied(cfg(), keyed("1", "1"), Phase::Startup);
        let queued = e.config_applied(cfg(), keyed("1", "2"), Phase::Live);
        assert_eq!(
            queued == 1,
            rolls,
            "--precise-keys={flag}, annotation {annotation:?}"
        );
    }
}

#[tokio::test]
async fn switching_the_mode_rolls_nothing_at_start_while_per_key_digests_are_kept() {
    let a = Counted::keys(vec!["a".into()]);
    let full = keyed("1", "1").digest.reloader_hash();
    let precise = keyed("1", "1").value_for(&a);
    let auto = json!({"reloader.stakater.com/auto": "true"});
    // `annotated` with the workload not annotated decides as `off`, and keeps per-key digests.
    for (flag, recorded) in [("all", &full), ("annotated", &precise), ("all", &precise)] {
        let (e, _) = engine(&[&format!("--precise-keys={flag}")]);
        reads_key_a(&e, "w", auto.clone(), Some(recorded));
        e.config_applied(cfg(), keyed("1", "1"), Phase::Startup);
        assert_eq!(
            e.reconcile_recorded(None),
            0,
            "{flag} with {recorded} recorded"
        );
    }
}

#[tokio::test]
async fn a_stale_value_of_either_form_rolls_once_at_start_in_the_modes_form() {
    let a = Counted::keys(vec!["a".into()]);
    let auto = json!({"reloader.stakater.com/auto": "true"});
    let old_full = keyed("1", "1").digest.reloader_hash();
    let old_precise = keyed("1", "1").value_for(&a);
    // With `off` no per-key digests are kept: a key-precise value cannot be told from a stale
    // one, and is rewritten once in Reloader's form (the documented cost of going straight off).
    let cases = [
        ("all", &old_full, keyed("9", "1").value_for(&a)),
        ("all", &old_precise, keyed("9", "1").value_for(&a)),
        ("off", &old_precise, keyed("1", "1").digest.reloader_hash()),
    ];
    for (flag, recorded, expected) in cases {
        let (e, writes) = engine(&[&format!("--precise-keys={flag}")]);
        reads_key_a(&e, "w", auto.clone(), Some(recorded));
        // The watch digests per key only with the mode on.
        let now = match flag {
            "off" => ConfigState {
                keys: Default::default(),
                ..keyed("1", "1")
            },
            _ => keyed("9", "1"),
        };
        e.config_applied(cfg(), now, Phase::Startup);
        assert_eq!(
            e.reconcile_recorded(None),
            1,
            "{flag} with {recorded} recorded"
        );
        settle(&e).await;
        assert_eq!(written(&writes), [("w".to_string(), Some(expected))]);
    }
}

#[tokio::test(start_paused = true)]
async fn a_flapping_config_rolls_limit_times_then_once_when_quiet() {
    let (e, writes) = engine(&["--churn-limit=2", "--churn-window=1m", "--churn-quiet=30s"]);
    let e = Arc::new(e);
    deployment(
        &e,
        "web",
        json!({"reloader.stakater.com/auto": "true"}),
        json!([]),
    );
    e.config_applied(cfg(), state("v0"), Phase::Startup);
    let releases = tokio::spawn(e.clone().run_breaker_releases());
    let mut queued = Vec::new();
    for i in 1..=10 {
        tokio::time::advance(Duration::from_secs(2)).await;
        queued.push(e.config_applied(cfg(), state(&format!("v{i}")), Phase::Live));
        settle(&e).await;
    }
    assert_eq!(queued, [1, 1, 0, 0, 0, 0, 0, 0, 0, 0]);
    let open = e.breaker().unwrap().held(&cfg()).expect("open");
    assert_eq!(open.held_changes, 8);
    // Sleeping (not advancing) lets the release task run at its deadlines.
    tokio::time::sleep(Duration::from_secs(29)).await;
    assert!(
        e.breaker().unwrap().held(&cfg()).is_some(),
        "not quiet long enough"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    settle(&e).await;
    assert!(
        e.breaker().unwrap().held(&cfg()).is_none(),
        "released by the task"
    );
    let hashes: Vec<_> = written(&writes)
        .into_iter()
        .map(|(_, h)| h.unwrap())
        .collect();
    let expected: Vec<_> = ["v1", "v2", "v10"]
        .iter()
        .map(|v| state(v).digest.reloader_hash())
        .collect();
    assert_eq!(
        hashes, expected,
        "limit times, then once to the latest value"
    );
    releases.abort();
}

#[tokio::test(start_paused = true)]
async fn a_breaker_released_on_the_value_it_held_from_rolls_nothing() {
    let (e, writes) = engine(&["--churn-limit=1", "--churn-window=1m", "--churn-quiet=10s"]);
    deployment(
        &e,
        "web",
        json!({"reloader.stakater.com/auto": "true"}),
        json!([]),
    );
    e.config_applied(cfg(), state("a"), Phase::Startup);
    for v in ["b", "a", "b", "a"] {
        tokio::time::advance(Duration::from_secs(1)).await;
        e.config_applied(cfg(), state(v), Phase::Live);
        settle(&e).await;
    }
    tokio::time::advance(Duration::from_secs(11)).await;
    assert_eq!(
        e.release_due_breakers(),
        1,
        "held from b (the last rolled), now at a"
    );
    settle(&e).await;
    let (e2, writes2) = engine(&["--churn-limit=1", "--churn-window=1m", "--churn-quiet=10s"]);
    deployment(
        &e2,
        "web",
        json!({"reloader.stakater.com/auto": "true"}),
        json!([]),
    );
    e2.config_applied(cfg(), state("a"), Phase::Startup);
    for v in ["b", "a", "b"] {
        tokio::time::advance(Duration::from_secs(1)).await;
        e2.config_applied(cfg(), state(v), Phase::Live);
        settle(&e2).await;
    }
    tokio::time::advance(Duration::from_secs(11)).await;
    assert_eq!(
        e2.release_due_breakers(),
        0,
        "back at b, what the workloads have"
    );
    assert_eq!(written(&writes).len(), 2);
    assert_eq!(written(&writes2).len(), 1);
}

fn at(value: &str, resource_version: u64) -> ConfigState {
    ConfigState {
        resource_version,
        ..state(value)
    }
}

#[tokio::test]
async fn a_queued_change_holds_the_acted_version_below_it_until_its_write_ends() {
    let (e, writes, _intake) = auto_deployment_with_intake();
    e.config_applied(cfg(), at("v1", 10), Phase::Startup);
    e.acted.processed(ConfigKind::ConfigMap, 10);
    assert_eq!(e.config_applied(cfg(), at("v2", 20), Phase::Live), 1);
    e.acted.processed(ConfigKind::ConfigMap, 20);
    assert_eq!(
        e.acted.acted().get(ConfigKind::ConfigMap),
        Some(19),
        "the change at 20 is queued, not written"
    );
    settle(&e).await;
    assert_eq!(writes.0.lock().unwrap().len(), 1);
    assert_eq!(e.acted.acted().get(ConfigKind::ConfigMap), Some(20));
}

#[tokio::test]
async fn a_missed_change_rolls_a_workload_that_never_recorded_a_hash_and_only_a_real_one() {
    let (e, writes, _intake) = auto_deployment_with_intake();
    // Indexed as a start-up or a takeover's list does: a creation, nothing rolled.
    assert_eq!(e.config_applied(cfg(), at("v2", 20), Phase::Startup), 0);
    assert_eq!(
        e.missed_change(&cfg(), Some(&at("v2", 15))),
        0,
        "same content then"
    );
    assert_eq!(e.missed_change(&cfg(), Some(&at("v1", 15))), 1);
    settle(&e).await;
    let w = writes.0.lock().unwrap().clone();
    assert_eq!(w.len(), 1);
    assert_eq!(w[0].1[0].hash, Some(state("v2").digest.reloader_hash()));
    let unknown = ConfigKey::new(ConfigKind::ConfigMap, "ns", "gone");
    assert_eq!(
        e.missed_change(&unknown, None),
        0,
        "not indexed: nothing to roll"
    );
}

/// A catch-up that fell back after a compaction rolls as a compared one does: the roll holds
/// the published acted version until written, so that if its namespace moves first, the next
/// owner falls back to the same configs (chaos-medium-3r-ca25c71 missed 3 reloads without it).
#[tokio::test]
async fn a_roll_from_a_compacted_catch_up_holds_the_acted_version_until_written() {
    let (e, writes, _intake) = auto_deployment_with_intake();
    assert_eq!(e.config_applied(cfg(), at("v1", 10), Phase::Startup), 0);
    e.acted.processed(ConfigKind::ConfigMap, 50);
    assert_eq!(e.missed_change(&cfg(), None), 1, "no state before: rolled");
    assert_eq!(e.acted.acted().get(ConfigKind::ConfigMap), Some(9));
    settle(&e).await;
    assert_eq!(e.acted.acted().get(ConfigKind::ConfigMap), Some(50));
    assert_eq!(writes.0.lock().unwrap().len(), 1);
}

/// A catch-up finds every config written since an old version (after a compaction, since the
/// population's creation): a workload already on the config's value was rolled by whoever acted
/// on the change, so it is not queued, and holds nothing. In chaos-medium-3r-6db9746-dirty such
/// no-op reloads held the acted version for minutes and every later catch-up started there.
#[tokio::test]
async fn a_catch_up_skips_a_workload_already_on_the_configs_value_and_holds_nothing() {
    let (e, writes) = engine(&[]);
    let current = state("v2").digest.reloader_hash();
    let auto = json!({"reloader.stakater.com/auto": "true"});
    let env = json!([{"name": "STAKATER_CFG_CONFIGMAP", "value": current}]);
    deployment(&e, "rolled", auto.clone(), env);
    deployment(&e, "never", auto, json!([]));
    e.config_applied(cfg(), at("v2", 20), Phase::Startup);
    e.acted.processed(ConfigKind::ConfigMap, 50);
    assert_eq!(
        e.missed_change(&cfg(), None),
        1,
        "only the one never rolled"
    );
    settle(&e).await;
    let w = writes.0.lock().unwrap().clone();
    assert_eq!(
        w.iter().map(|w| w.0.as_str()).collect::<Vec<_>>(),
        ["never"]
    );
    // The test writer's write does not reach the index: `never` is queued again, and holds.
    assert_eq!(e.missed_change(&cfg(), Some(&at("v1", 15))), 1);
    assert_eq!(e.acted.acted().get(ConfigKind::ConfigMap), Some(19));
}

/// A change deferred to a backfill's list is not acted on yet: the acted version stays below
/// it until the backfill ends and the change is queued (and then until it is written).
#[tokio::test]
async fn a_change_deferred_during_a_backfill_holds_the_acted_version_until_it_is_queued() {
    let (e, writes, intake) = auto_deployment_with_intake();
    e.acted.processed(ConfigKind::ConfigMap, 10);
    intake.backfill_started(&["ns".to_string()]);
    assert_eq!(intake.config_applied(cfg(), at("v2", 20), Phase::Live), 0);
    e.acted.processed(ConfigKind::ConfigMap, 20);
    assert_eq!(e.acted.acted().get(ConfigKind::ConfigMap), Some(19));
    assert_eq!(intake.configs_backfilled(["ns"]), 1);
    settle(&e).await;
    assert_eq!(writes.0.lock().unwrap().len(), 1);
    assert_eq!(e.acted.acted().get(ConfigKind::ConfigMap), Some(20));
}

/// A window that opens two hours from now (closed now, whatever the time the test runs).
fn window_closed_now() -> String {
    let hour = jiff::Timestamp::now()
        .as_second()
        .div_euclid(3600)
        .rem_euclid(24);
    format!("{:02}:00-{:02}:00", (hour + 2) % 24, (hour + 3) % 24)
}

fn timed_deployment(e: &Engine<Writes, ()>, timing: serde_json::Value) {
    let mut annotations = json!({"reloader.stakater.com/auto": "true"});
    annotations
        .as_object_mut()
        .unwrap()
        .extend(timing.as_object().unwrap().clone());
    deployment(e, "timed", annotations, json!([]));
}

#[tokio::test]
async fn a_closed_window_holds_every_change_and_rolls_once_when_it_opens() {
    let (e, writes) = engine(&[]);
    let window = json!({"kube-reloader.io/reload-window": window_closed_now()});
    timed_deployment(&e, window);
    e.config_applied(cfg(), state("v1"), Phase::Startup);
    e.config_applied(cfg(), state("v2"), Phase::Live);
    e.config_applied(cfg(), state("v3"), Phase::Live);
    settle(&e).await;
    assert!(
        written(&writes).is_empty(),
        "held while the window is closed"
    );
    let workload = WorkloadKey::new(WorkloadKind::Deployment, "ns", "timed");
    let (configs, _) = e.held_for(&workload).expect("held");
    assert_eq!(configs, [cfg()]);
    assert_eq!(e.release_due_holds(), 0, "not due yet");

    // The window opens (here: the annotation goes; the release reads the policy as it is now).
    timed_deployment(&e, json!({}));
    assert_eq!(e.release_due_holds(), 1);
    settle(&e).await;
    assert_eq!(
        written(&writes),
        [(
            "timed".to_string(),
            Some(state("v3").digest.reloader_hash())
        )],
        "one rollout, to the value now"
    );
    assert!(e.held_for(&workload).is_none());
    assert_eq!(e.release_due_holds(), 0);
}

#[tokio::test]
async fn a_delay_holds_a_change_and_the_workloads_without_one_roll_at_once() {
    let (e, writes) = engine(&[]);
    timed_deployment(&e, json!({"kube-reloader.io/reload-delay": "1h"}));
    deployment(
        &e,
        "auto",
        json!({"reloader.stakater.com/auto": "true"}),
        json!([]),
    );
    e.config_applied(cfg(), state("v1"), Phase::Startup);
    e.config_applied(cfg(), state("v2"), Phase::Live);
    settle(&e).await;
    let names: Vec<String> = written(&writes).into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["auto"]);
    let workload = WorkloadKey::new(WorkloadKind::Deployment, "ns", "timed");
    let (_, due) = e.held_for(&workload).expect("held");
    let wait = due.duration_since(jiff::Timestamp::now());
    assert!(wait > jiff::SignedDuration::from_mins(59), "{wait:?}");
}

#[tokio::test]
async fn held_reloads_are_restored_for_owned_namespaces_only() {
    let (e, writes) = engine(&[]);
    timed_deployment(&e, json!({}));
    e.config_applied(cfg(), state("v1"), Phase::Startup);
    let workload = WorkloadKey::new(WorkloadKind::Deployment, "ns", "timed");
    let elsewhere = WorkloadKey::new(WorkloadKind::Deployment, "other", "timed");
    let since = jiff::Timestamp::now();
    let records = [
        HeldReload::new(&workload, &[cfg()], since),
        HeldReload::new(&elsewhere, &[cfg()], since),
    ];
    let only_ns: std::collections::HashSet<String> = ["ns".to_string()].into();
    assert_eq!(e.restore_held(&records, Some(&only_ns)), 1);
    // Due at once (the workload has no window now): it rolls to the config's value.
    assert_eq!(e.release_due_holds(), 1);
    settle(&e).await;
    assert_eq!(
        written(&writes),
        [(
            "timed".to_string(),
            Some(state("v1").digest.reloader_hash())
        )]
    );
}

#[tokio::test]
async fn a_namespace_timing_applies_where_the_workload_has_none() {
    let (e, _) = engine(&[]);
    timed_deployment(&e, json!({"kube-reloader.io/reload-delay": "5m"}));
    let workload = WorkloadKey::new(WorkloadKind::Deployment, "ns", "timed");
    let (timing, problems) = ReloadTiming::read(
        &e.settings.keys,
        &[
            (
                "kube-reloader.io/reload-window".to_string(),
                "sat 01:00-02:00".to_string(),
            ),
            (
                "kube-reloader.io/reload-delay".to_string(),
                "1h".to_string(),
            ),
        ]
        .into(),
    );
    assert!(problems.is_empty());
    ConfigEvents::namespace_timing(&e, "ns", timing);
    let applied = e.timing_of(&workload);
    assert_eq!(
        applied.delay,
        Some(Duration::from_secs(300)),
        "the workload's own"
    );
    assert_eq!(
        applied.window.map(|w| w.to_string()),
        Some("sat 01:00-02:00".into())
    );
}

#[tokio::test]
async fn a_deletions_reload_is_not_held_by_a_window() {
    let (e, writes) = engine(&["--reload-on-delete=true"]);
    timed_deployment(
        &e,
        json!({"kube-reloader.io/reload-window": window_closed_now()}),
    );
    e.config_applied(cfg(), state("v1"), Phase::Startup);
    e.config_deleted(&cfg());
    settle(&e).await;
    assert_eq!(written(&writes), [("timed".to_string(), None)]);
}
