//! Safe reloads against the real control plane: kube-controller-manager rolls the Deployments,
//! kwok plays the kubelet (pods of a good template become Ready, pods recording a bad config
//! hash never do), and kube-reloader rolls a shared config's fan-out in waves.

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use kube::Api;
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;

use common::kwok::Kwok;
use common::objects::*;
use common::{Controller, TestNamespace, wait_for};

/// One history entry of a Deployment: when its template first recorded `hash`, and when it
/// was first seen healthy on it (every replica updated and available).
#[derive(Debug, Clone, Default)]
struct Rolled {
    /// hash -> when it was first recorded.
    written: Vec<(String, Instant)>,
    healthy: HashMap<String, Instant>,
}

#[derive(Clone, Default)]
struct History(Arc<Mutex<HashMap<String, Rolled>>>);

impl History {
    fn record(ns: &TestNamespace) -> History {
        let history = History::default();
        let sink = history.clone();
        let api: Api<Deployment> = Api::namespaced(ns.client.clone(), &ns.name);
        tokio::spawn(async move {
            let mut stream = watcher(api, Default::default()).applied_objects().boxed();
            while let Some(Ok(d)) = stream.next().await {
                sink.observe(&d);
            }
        });
        history
    }

    fn observe(&self, d: &Deployment) {
        let name = d.metadata.name.clone().unwrap_or_default();
        let value = serde_json::to_value(d).unwrap();
        let Some(hash) = last_reloaded_from(&value, "/spec/template")
            .and_then(|v| v["hash"].as_str().map(str::to_owned))
        else {
            return;
        };
        let mut all = self.0.lock().unwrap();
        let entry = all.entry(name).or_default();
        if entry.written.last().is_none_or(|(h, _)| *h != hash) {
            entry.written.push((hash.clone(), Instant::now()));
        }
        let status = d.status.clone().unwrap_or_default();
        let seen = status.observed_generation >= d.metadata.generation;
        let healthy = seen
            && status.updated_replicas == Some(1)
            && status.available_replicas == Some(1)
            && status.replicas == Some(1);
        if healthy {
            entry.healthy.entry(hash).or_insert_with(Instant::now);
        }
    }

    fn snapshot(&self) -> HashMap<String, Rolled> {
        self.0.lock().unwrap().clone()
    }

    /// Names of the Deployments whose last written hash is `hash`.
    fn on(&self, hash: &str) -> Vec<String> {
        let mut names: Vec<String> = self
            .snapshot()
            .into_iter()
            .filter(|(_, r)| r.written.last().is_some_and(|(h, _)| h == hash))
            .map(|(n, _)| n)
            .collect();
        names.sort();
        names
    }
}

/// `n` Deployments using ConfigMap `shared`, one replica each, on the kwok node, each with a
/// progress deadline of `deadline_s` (short where a bad value must fail fast; long where a
/// loaded machine must not fail a good rollout).
async fn fleet(ns: &TestNamespace, node: &str, n: usize, deadline_s: u32) -> Vec<String> {
    create(&ns.client, &ns.name, configmap("shared", json!({"v": "0"}))).await;
    let names: Vec<String> = (0..n).map(|i| format!("w-{i:03}")).collect();
    futures::stream::iter(names.clone())
        .for_each_concurrent(16, |name| async move {
            let mut spec = pod_spec(env_from_configmap("shared"), json!([]));
            spec["nodeName"] = json!(node);
            let mut d = deployment(&name, json!({"reloader.stakater.com/auto": "true"}), spec);
            d["spec"]["progressDeadlineSeconds"] = json!(deadline_s);
            d["spec"]["strategy"] = json!({"type": "RollingUpdate",
                "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}});
            create(&ns.client, &ns.name, d).await;
        })
        .await;
    names
}

/// Waits until every Deployment of the namespace is available (kwok made its pod Ready).
async fn wait_available(ns: &TestNamespace, n: usize) {
    let api: Api<Deployment> = Api::namespaced(ns.client.clone(), &ns.name);
    wait_for(
        "every Deployment available",
        Duration::from_secs(120),
        || async {
            let list = api
                .list(&Default::default())
                .await
                .map_err(|e| e.to_string())?;
            let ready = list
                .items
                .iter()
                .filter(|d| d.status.as_ref().and_then(|s| s.available_replicas) == Some(1))
                .count();
            (ready == n)
                .then_some(())
                .ok_or(format!("{ready}/{n} available"))
        },
    )
    .await;
}

/// The wave sizes `canary=2,growth=2` cuts `n` workloads into (as `plan_waves` does).
fn wave_sizes(n: usize, canary: usize) -> Vec<usize> {
    let (mut sizes, mut left, mut size) = (Vec::new(), n, canary);
    while left > 0 {
        sizes.push(size.min(left));
        left -= size.min(left);
        size *= 2;
    }
    sizes
}

/// A namespace of its own, labelled so that only this test's controller acts on it (the tests
/// of this file run side by side).
async fn namespace(prefix: &str) -> TestNamespace {
    let ns = TestNamespace::new(prefix).await;
    label_for_selector(&ns, &ns.name).await;
    ns
}

async fn start_controller(ns: &TestNamespace, policy: &str) -> Controller {
    Controller::start(&[
        "--reload-strategy=annotations",
        &format!("--namespace-selector=kr-waves-test={}", ns.name),
        &format!("--waves={policy}"),
        "--wave-poll-interval=500ms",
        // Halts are kept in the test namespace's kube-reloader-halts ConfigMap.
        &format!("--pod-namespace={}", ns.name),
    ])
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_good_fan_out_rolls_in_waves_each_after_the_one_before_is_healthy() {
    // 60 in `make test`; `WAVES_TEST_WORKLOADS=200` for the figure in docs/safe-reloads.md.
    let n: usize = std::env::var("WAVES_TEST_WORKLOADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(60);
    let sizes = wave_sizes(n, 2);
    let ns = namespace("waves-good").await;
    let kwok = Kwok::start(&ns.client, &format!("{}-node", ns.name), &[]).await;
    fleet(&ns, &kwok.node, n, 120).await;
    wait_available(&ns, n).await;
    let history = History::record(&ns);
    let controller = start_controller(&ns, "threshold=5,canary=2,growth=2,deadline=60s").await;

    let started = Instant::now();
    set_configmap_data(&ns.client, &ns.name, "shared", json!({"v": "good"})).await;
    let good = configmap_hash(&[("v", "good")]);
    wait_for(
        "every Deployment rolled and healthy on the good value",
        Duration::from_secs(180),
        || async {
            let snap = history.snapshot();
            let done = snap
                .values()
                .filter(|r| r.healthy.contains_key(&good))
                .count();
            (done == n)
                .then_some(())
                .ok_or(format!("{done}/{n} healthy on it"))
        },
    )
    .await;
    let total = started.elapsed();

    // Each Deployment rolled exactly once, to the good value.
    let snap = history.snapshot();
    for (name, rolled) in &snap {
        let hashes: Vec<&str> = rolled.written.iter().map(|(h, _)| h.as_str()).collect();
        assert_eq!(hashes, [good.as_str()], "{name} rolled more than once");
    }
    // The waves (2, 4, 8, 16, 30 for 60): every Deployment of a wave was written only after
    // every Deployment of the wave before was healthy.
    let mut by_write: Vec<(&String, &Rolled)> = snap.iter().collect();
    by_write.sort_by_key(|(_, r)| r.written[0].1);
    let mut waves = Vec::new();
    let mut rest = by_write.as_slice();
    for size in sizes {
        let (wave, after) = rest.split_at(size);
        waves.push(wave);
        rest = after;
    }
    for pair in waves.windows(2) {
        let last_healthy = pair[0].iter().map(|(_, r)| r.healthy[&good]).max().unwrap();
        let first_written = pair[1].iter().map(|(_, r)| r.written[0].1).min().unwrap();
        assert!(
            first_written >= last_healthy,
            "a wave started {:?} before the one before it was healthy",
            last_healthy - first_written
        );
    }
    let mut report = Vec::new();
    for (i, wave) in waves.iter().enumerate() {
        let first = wave.iter().map(|(_, r)| r.written[0].1).min().unwrap();
        let healthy = wave.iter().map(|(_, r)| r.healthy[&good]).max().unwrap();
        report.push(format!(
            "wave {} ({}): {:.1}s",
            i + 1,
            wave.len(),
            (healthy - first).as_secs_f64()
        ));
    }
    eprintln!(
        "{n} Deployments in waves, {:.1}s in all: {}",
        total.as_secs_f64(),
        report.join(", ")
    );
    // The runner sees the last wave healthy at its next read (every 500 ms here).
    let series = "kube_reloader_wave_sequences_total{result=\"completed\"}";
    wait_for(
        "the completed sequence counted",
        Duration::from_secs(10),
        || async {
            let value = controller.metric(series).await;
            (value == Some(1.0))
                .then_some(())
                .ok_or(format!("{series} = {value:?}"))
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_annotation_rolls_its_configs_in_waves_without_the_flag() {
    const N: usize = 6;
    let ns = namespace("waves-ns").await;
    use k8s_openapi::api::core::v1::Namespace;
    use kube::api::{Patch, PatchParams};
    let policy = json!({"metadata": {"annotations": {
        "kube-reloader.io/waves": "threshold=2,canary=1,deadline=60s"}}});
    Api::<Namespace>::all(ns.client.clone())
        .patch(&ns.name, &PatchParams::default(), &Patch::Merge(policy))
        .await
        .expect("annotating the namespace");
    let kwok = Kwok::start(&ns.client, &format!("{}-node", ns.name), &[]).await;
    fleet(&ns, &kwok.node, N, 120).await;
    wait_available(&ns, N).await;
    let history = History::record(&ns);
    // No --waves: the namespace's annotation alone (read where namespaces are watched, here
    // through the selector) turns waves on.
    let controller = Controller::start(&[
        "--reload-strategy=annotations",
        &format!("--namespace-selector=kr-waves-test={}", ns.name),
        "--wave-poll-interval=500ms",
        &format!("--pod-namespace={}", ns.name),
    ])
    .await;
    set_configmap_data(&ns.client, &ns.name, "shared", json!({"v": "tenant"})).await;
    let value = configmap_hash(&[("v", "tenant")]);
    wait_for(
        "every Deployment on the new value",
        Duration::from_secs(120),
        || async {
            let on = history.on(&value).len();
            (on == N).then_some(()).ok_or(format!("{on}/{N}"))
        },
    )
    .await;
    wait_for(
        "the change's waves completed",
        Duration::from_secs(60),
        || async {
            let completed = controller
                .metric("kube_reloader_wave_sequences_total{result=\"completed\"}")
                .await;
            (completed == Some(1.0))
                .then_some(())
                .ok_or(format!("{completed:?}"))
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_tenants_rolling_in_waves_do_not_delay_a_third_tenants_reload() {
    const N: usize = 30;
    // Each namespace is a tenant of its own; one selector label takes in all three.
    let (a, b, c) = (
        namespace("waves-fair-a").await,
        TestNamespace::new("waves-fair-b").await,
        TestNamespace::new("waves-fair-c").await,
    );
    for ns in [&b, &c] {
        label_for_selector(ns, &a.name).await;
    }
    let kwok = Kwok::start(&a.client, &format!("{}-node", a.name), &[]).await;
    for ns in [&a, &b] {
        fleet(ns, &kwok.node, N, 120).await;
    }
    fleet(&c, &kwok.node, 1, 120).await;
    for (ns, n) in [(&a, N), (&b, N), (&c, 1)] {
        wait_available(ns, n).await;
    }
    let (history_a, history_b, history_c) = (
        History::record(&a),
        History::record(&b),
        History::record(&c),
    );
    let _controller = start_controller(&a, "threshold=5,canary=2,growth=2,deadline=60s").await;
    let value = configmap_hash(&[("v", "next")]);
    for ns in [&a, &b] {
        set_configmap_data(&ns.client, &ns.name, "shared", json!({"v": "next"})).await;
    }
    let changed = Instant::now();
    set_configmap_data(&c.client, &c.name, "shared", json!({"v": "next"})).await;
    let third = wait_for(
        "the third tenant's reload",
        Duration::from_secs(60),
        || async {
            (history_c.on(&value).len() == 1)
                .then(|| changed.elapsed())
                .ok_or("not yet".to_string())
        },
    )
    .await;
    let (rolled_a, rolled_b) = (history_a.on(&value).len(), history_b.on(&value).len());
    eprintln!(
        "third tenant reloaded {:.0} ms after its change; the fan-outs had rolled {rolled_a} and \
         {rolled_b} of {N} by then",
        third.as_secs_f64() * 1000.0
    );
    // It took its turn in the fair queue: no waiting for the fan-outs' waves (the rest of
    // each is held behind its canaries' health for seconds).
    assert!(rolled_a < N && rolled_b < N, "{rolled_a}, {rolled_b}");
    assert!(third < Duration::from_secs(3), "{third:?}");
    wait_for(
        "both fan-outs complete",
        Duration::from_secs(120),
        || async {
            let done = (history_a.on(&value).len(), history_b.on(&value).len());
            (done == (N, N)).then_some(()).ok_or(format!("{done:?}"))
        },
    )
    .await;
}

async fn label_for_selector(ns: &TestNamespace, value: &str) {
    use k8s_openapi::api::core::v1::Namespace;
    use kube::api::{Patch, PatchParams};
    let patch = json!({"metadata": {"labels": {"kr-waves-test": value}}});
    Api::<Namespace>::all(ns.client.clone())
        .patch(&ns.name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .expect("labelling the namespace");
}

/// `n` Deployments on a kwok node where pods recording the hash of `{"v": "bad"}` never become
/// Ready (a short progress deadline, so the bad value fails fast), recorded from now on, and a
/// controller with the wave `policy`.
async fn halting_fleet(
    prefix: &str,
    n: usize,
    policy: &str,
) -> (TestNamespace, Kwok, History, Controller) {
    let (ns, kwok, history) = halting_setup(prefix, n).await;
    let controller = start_controller(&ns, policy).await;
    (ns, kwok, history, controller)
}

/// [`halting_fleet`] without its controller.
async fn halting_setup(prefix: &str, n: usize) -> (TestNamespace, Kwok, History) {
    let bad = configmap_hash(&[("v", "bad")]);
    let ns = namespace(prefix).await;
    let node = format!("{}-node", ns.name);
    let kwok = Kwok::start(&ns.client, &node, std::slice::from_ref(&bad)).await;
    fleet(&ns, &kwok.node, n, 4).await;
    wait_available(&ns, n).await;
    let history = History::record(&ns);
    (ns, kwok, history)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_halt_survives_a_shard_handover() {
    const N: usize = 10;
    let bad = configmap_hash(&[("v", "bad")]);
    let (ns, _kwok, history) = halting_setup("waves-handover", N).await;
    // Two sharded replicas; the test namespace holds their Leases and the kept halts too.
    let replica = |name: &'static str| {
        let selector = format!("--namespace-selector=kr-waves-test={}", ns.name);
        let home = ns.name.clone();
        async move {
            let args = [
                "--sharding",
                "--lease-duration=4s",
                "--renew-deadline=3s",
                "--retry-period=1s",
                "--reload-strategy=annotations",
                &selector,
                "--waves=threshold=2,canary=1,deadline=60s",
                "--wave-poll-interval=500ms",
            ];
            let env = [("POD_NAME", name), ("POD_NAMESPACE", home.as_str())];
            Controller::start_with_env(&args, &env).await
        }
    };
    let (r0, r1) = (replica("r0").await, replica("r1").await);
    // The namespace settles on one of them before the change.
    wait_for(
        "one owner of the namespace",
        Duration::from_secs(60),
        || async {
            let owned = (
                r0.metric("kube_reloader_owned_namespaces").await,
                r1.metric("kube_reloader_owned_namespaces").await,
            );
            matches!(owned, (Some(1.0), Some(0.0)) | (Some(0.0), Some(1.0)))
                .then_some(())
                .ok_or(format!("{owned:?}"))
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    bad_change_halts(&ns).await;
    let halted = "kube_reloader_wave_sequences_total{result=\"halted\"}";
    let (owner, other) = match r0.metric(halted).await {
        Some(_) => (r0, r1),
        None => (r1, r0),
    };
    let kept = wait_for("the halt kept", Duration::from_secs(30), || async {
        halts_kept(&ns).await.ok_or("not yet".to_string())
    })
    .await;
    let at: serde_json::Value = serde_json::from_str(&kept).unwrap();
    let at = at["at"].as_str().unwrap().to_string();
    // The owner crashes; the other replica takes the namespace over and holds the same halt
    // (the one kept, not a new one found by rolling the canaries again).
    owner.crash();
    let url = format!(
        "http://127.0.0.1:{}/debug/explain?kind=Deployment&namespace={}&name=w-009",
        other.metrics_port, ns.name
    );
    wait_for(
        "the halt held by the other replica",
        Duration::from_secs(60),
        || async {
            let (_, body) = common::http_get(&url).await.map_err(|e| e.to_string())?;
            let held =
                format!("reload halted: wave 1 of 4 of the change of configmap/shared at {at}");
            body.contains(&held).then_some(()).ok_or(body)
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(history.on(&bad).len(), 1, "only the canary rolled");
    resume_rolls_each_held_workload_once(&ns, &history, &bad, N).await;
}

/// Changes the config to the bad value and waits for the halt's Event on it.
async fn bad_change_halts(ns: &TestNamespace) -> EventSummary {
    set_configmap_data(&ns.client, &ns.name, "shared", json!({"v": "bad"})).await;
    wait_for(
        "a ReloadHalted Event on the config",
        Duration::from_secs(60),
        || async {
            let events = events_about(&ns.client, &ns.name, "ConfigMap", "shared").await;
            events
                .into_iter()
                .find(|e| e.reason == "ReloadHalted")
                .ok_or("none yet".to_string())
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_value_rolls_only_the_first_wave_and_the_fix_rolls_everyone_once() {
    const N: usize = 20;
    let bad = configmap_hash(&[("v", "bad")]);
    let good = configmap_hash(&[("v", "good")]);
    let (ns, _kwok, history, controller) =
        halting_fleet("waves-bad", N, "threshold=5,canary=3,growth=2,deadline=60s").await;
    let halted = bad_change_halts(&ns).await;
    eprintln!("ReloadHalted: {}", halted.note);
    assert!(
        halted.note.contains("wave 1 of") && halted.note.contains("ProgressDeadlineExceeded"),
        "{}",
        halted.note
    );
    // Only the canaries carry the bad value, and stay there while the rest is held.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let canaries = history.on(&bad);
    assert_eq!(canaries.len(), 3, "canaries: {canaries:?}");
    let held: Vec<String> = (0..N)
        .map(|i| format!("w-{i:03}"))
        .filter(|n| !canaries.contains(n))
        .collect();
    let held_events = events_about(&ns.client, &ns.name, "Deployment", &held[0]).await;
    assert!(
        held_events.iter().any(|e| e.reason == "ReloadHalted"),
        "{held_events:?}"
    );
    assert_eq!(
        controller
            .metric("kube_reloader_wave_sequences_total{result=\"halted\"}")
            .await,
        Some(1.0)
    );

    // The short progress deadline made the bad value fail fast; the fix must not fail on a
    // loaded machine (changing it rolls nothing: the pod template stays as it is).
    for i in 0..N {
        let patch = json!({"spec": {"progressDeadlineSeconds": 120}});
        let name = format!("w-{i:03}");
        merge_patch(&ns.client, &ns.name, "apps/v1", "Deployment", &name, patch).await;
    }
    // The fix is a new change: a new sequence rolls everyone to it, the held ones once.
    set_configmap_data(&ns.client, &ns.name, "shared", json!({"v": "good"})).await;
    // Alone this takes ~13 s; each wave waits for the previous one's rollouts to be reported
    // healthy by kube-controller-manager, which a full CI run's other tests keep busy (one run
    // stood at 9/20, the third wave, after 120 s).
    wait_for(
        "every Deployment on the fixed value",
        Duration::from_secs(300),
        || async {
            let on = history.on(&good).len();
            (on == N).then_some(()).ok_or(format!("{on}/{N}"))
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let snap = history.snapshot();
    for name in &held {
        let hashes: Vec<&str> = snap[name].written.iter().map(|(h, _)| h.as_str()).collect();
        assert_eq!(
            hashes,
            [good.as_str()],
            "{name}: a held workload rolls once, to the fix"
        );
    }
    for name in &canaries {
        let hashes: Vec<&str> = snap[name].written.iter().map(|(h, _)| h.as_str()).collect();
        assert_eq!(hashes, [bad.as_str(), good.as_str()], "{name}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_halt_survives_a_restart_and_its_release_rolls_each_held_workload_once() {
    const N: usize = 10;
    const POLICY: &str = "threshold=2,canary=1,deadline=60s";
    let bad = configmap_hash(&[("v", "bad")]);
    let (ns, _kwok, history, controller) = halting_fleet("waves-resume", N, POLICY).await;
    bad_change_halts(&ns).await;
    let kept = wait_for(
        "the halt kept in kube-reloader-halts",
        Duration::from_secs(30),
        || async { halts_kept(&ns).await.ok_or("not yet".to_string()) },
    )
    .await;
    eprintln!("kept in kube-reloader-halts: {kept}");
    assert!(kept.contains("ProgressDeadlineExceeded"), "{kept}");

    // A restarted controller holds the same workloads: nothing more rolls.
    controller.stop().await;
    let controller = start_controller(&ns, POLICY).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(history.on(&bad).len(), 1, "only the canary rolled");
    // `/debug/explain` says what holds a held workload.
    let url = format!(
        "http://127.0.0.1:{}/debug/explain?kind=Deployment&namespace={}&name=w-009",
        controller.metrics_port, ns.name
    );
    let (code, body) = common::http_get(&url).await.unwrap();
    assert_eq!(code, 200, "{body}");
    assert!(
        body.contains("reload halted: wave 1 of") && body.contains("ProgressDeadlineExceeded"),
        "{body}"
    );
    // So does `explain`, from the kept halt (the controller's namespace: here the test's).
    let (code, text, err) = cli(&[
        "explain",
        "deployment/w-009",
        "-n",
        &ns.name,
        "--pod-namespace",
        &ns.name,
    ]);
    assert_eq!(code, 0, "{err}");
    eprintln!("{text}");
    assert!(
        text.contains("held:") && text.contains("reload halted: wave 1 of"),
        "{text}"
    );

    // Released (the annotation `kube-reloader resume` sets): everyone held rolls once.
    resume_rolls_each_held_workload_once(&ns, &history, &bad, N).await;
    let events = events_about(&ns.client, &ns.name, "ConfigMap", "shared").await;
    assert!(
        events.iter().any(|e| e.reason == "ReloadResumed"),
        "{events:?}"
    );
    wait_for(
        "the released halt forgotten",
        Duration::from_secs(30),
        || async {
            match halts_kept(&ns).await {
                None => Ok(()),
                Some(kept) => Err(kept),
            }
        },
    )
    .await;
}

/// Releases the halt of `shared` as `kube-reloader resume` does (its annotation): each of the
/// `n` Deployments ends on `bad`, each rolled exactly once.
async fn resume_rolls_each_held_workload_once(
    ns: &TestNamespace,
    history: &History,
    bad: &str,
    n: usize,
) {
    merge_patch(
        &ns.client,
        &ns.name,
        "v1",
        "ConfigMap",
        "shared",
        json!({"metadata": {"annotations": {"kube-reloader.io/resume": "1"}}}),
    )
    .await;
    wait_for(
        "every held Deployment rolled",
        Duration::from_secs(60),
        || async {
            let on = history.on(bad).len();
            (on == n).then_some(()).ok_or(format!("{on}/{n}"))
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    for (name, rolled) in history.snapshot() {
        assert_eq!(
            rolled.written.len(),
            1,
            "{name} rolled {:?}",
            rolled.written
        );
    }
}

/// The halt of the `shared` ConfigMap kept in the namespace's kube-reloader-halts, if any.
async fn halts_kept(ns: &TestNamespace) -> Option<String> {
    use k8s_openapi::api::core::v1::ConfigMap;
    let api: Api<ConfigMap> = Api::namespaced(ns.client.clone(), &ns.name);
    let cm = api.get_opt("kube-reloader-halts").await.ok()??;
    cm.data?.remove(&format!("configmap.{}.shared", ns.name))
}

/// Runs the kube-reloader binary's subcommand with the test kubeconfig; (exit code, stdout).
fn cli(args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kube-reloader"))
        .args(args)
        .env("KUBECONFIG", common::kubeconfig_path())
        .output()
        .expect("running kube-reloader");
    let text = |b: &[u8]| String::from_utf8_lossy(b).to_string();
    (
        out.status.code().unwrap_or(-1),
        text(&out.stdout),
        text(&out.stderr),
    )
}

#[tokio::test]
async fn plan_prints_the_waves_of_the_config_s_policy_and_resume_sets_the_annotation() {
    let ns = namespace("waves-plan").await;
    let c = &ns.client;
    let mut cm = configmap("shared", json!({"v": "0"}));
    cm["metadata"]["annotations"] = json!({"kube-reloader.io/waves": "threshold=10,growth=2"});
    create(c, &ns.name, cm).await;
    for i in 0..12 {
        let name = format!("w-{i:02}");
        let spec = pod_spec(env_from_configmap("shared"), json!([]));
        let mut d = deployment(&name, json!({"reloader.stakater.com/auto": "true"}), spec);
        if i == 7 {
            d["metadata"]["labels"] = json!({"kube-reloader.io/canary": "true"});
        }
        create(c, &ns.name, d).await;
    }
    // Not opted in: not in the plan.
    let plain = pod_spec(env_from_configmap("shared"), json!([]));
    create(c, &ns.name, deployment("plain", json!({}), plain)).await;

    let (code, out, err) = cli(&["plan", "configmap/shared", "-n", &ns.name, "-o", "json"]);
    assert_eq!(code, 0, "{err}");
    let plan: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(plan["workloads"].as_array().unwrap().len(), 12, "{out}");
    let sizes: Vec<usize> = plan["waves"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w.as_array().unwrap().len())
        .collect();
    assert_eq!(sizes, [1, 2, 4, 5], "{out}");
    assert_eq!(
        plan["waves"][0][0], "deployment/w-07",
        "the labelled canary first"
    );
    let (code, text, err) = cli(&["plan", "configmap/shared", "-n", &ns.name]);
    assert_eq!(code, 0, "{err}");
    eprintln!("{text}");
    assert!(
        text.contains("would roll 12 workloads (12 replicas)"),
        "{text}"
    );
    assert!(
        text.contains("Wave policy: threshold=10,canary=1,growth=2,deadline=5m0s"),
        "{text}"
    );

    let (code, out, err) = cli(&["resume", "configmap/shared", "-n", &ns.name]);
    assert_eq!(code, 0, "{err}");
    eprintln!("{out}");
    assert!(out.contains("kube-reloader.io/resume set to"), "{out}");
    let cm = get(c, &ns.name, "v1", "ConfigMap", "shared").await.unwrap();
    assert!(
        cm["metadata"]["annotations"]["kube-reloader.io/resume"].is_string(),
        "{cm}"
    );
}
