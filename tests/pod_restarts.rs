//! Restarts by eviction (`kube-reloader.io/restart-by: eviction`) against the real control
//! plane: kube-controller-manager runs the Deployments and the disruption controller (which
//! keeps each PodDisruptionBudget's allowed disruptions), kwok plays the kubelet. A budget
//! that allows no disruption holds the restart (retried and reported, no pod touched); once it
//! allows one, every pod is evicted exactly once, one at a time, and the template never
//! changes. `in-place` is refused with a clear error.
//!
//! Every "not restarted" is checked after a workload restarted the usual way, using the same
//! config, was seen to roll for the same change, so a slow controller cannot pass a test.

mod common;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;

use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::ListParams;
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::{Value, json};

use common::kwok::Kwok;
use common::objects::*;
use common::{Controller, TestNamespace, wait_for};

const VAR: &str = "STAKATER_SETTINGS_CONFIGMAP";

async fn start(ns: &TestNamespace) -> Controller {
    Controller::start(&[
        &format!("--namespaces={}", ns.name),
        &format!("--pod-namespace={}", ns.name),
    ])
    .await
}

/// A Deployment of `replicas` pods on the kwok node, reading ConfigMap `settings`.
fn on_node(name: &str, node: &str, replicas: i64, annotations: Value) -> Value {
    let mut spec = pod_spec(env_from_configmap("settings"), json!([]));
    spec["nodeName"] = json!(node);
    let mut d = deployment(name, annotations, spec);
    d["spec"]["replicas"] = json!(replicas);
    d
}

async fn pod_uids(ns: &TestNamespace, app: &str) -> BTreeSet<String> {
    let pods: Api<Pod> = Api::namespaced(ns.client.clone(), &ns.name);
    pods.list(&ListParams::default().labels(&format!("app={app}")))
        .await
        .expect("listing pods")
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter_map(|p| p.metadata.uid)
        .collect()
}

async fn wait_ready(ns: &TestNamespace, name: &str, replicas: i64) {
    wait_for(
        &format!("Deployment {name} to have {replicas} available pods"),
        Duration::from_secs(90),
        || async {
            let d = get(&ns.client, &ns.name, "apps/v1", "Deployment", name)
                .await
                .ok_or("no Deployment")?;
            let available = d
                .pointer("/status/availableReplicas")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            (available == replicas)
                .then_some(())
                .ok_or(format!("{available} available"))
        },
    )
    .await;
}

/// Every pod of `app` ever seen, from a watch started now (`name/uid`).
fn pods_seen(ns: &TestNamespace, app: &str) -> Arc<Mutex<BTreeSet<String>>> {
    let seen = Arc::new(Mutex::new(BTreeSet::new()));
    let sink = seen.clone();
    let api: Api<Pod> = Api::namespaced(ns.client.clone(), &ns.name);
    let config = watcher::Config::default().labels(&format!("app={app}"));
    tokio::spawn(async move {
        let mut stream = watcher(api, config).applied_objects().boxed();
        while let Some(Ok(pod)) = stream.next().await {
            if let (Some(name), Some(uid)) = (pod.metadata.name, pod.metadata.uid) {
                sink.lock().unwrap().insert(format!("{name}/{uid}"));
            }
        }
    });
    seen
}

/// The ReplicaSets of a Deployment: one as long as its template never changed (a metadata
/// annotation bumps a Deployment's generation, but rolls nothing).
async fn replica_sets(ns: &TestNamespace, app: &str) -> usize {
    let api: Api<ReplicaSet> = Api::namespaced(ns.client.clone(), &ns.name);
    api.list(&ListParams::default().labels(&format!("app={app}")))
        .await
        .expect("listing ReplicaSets")
        .items
        .len()
}

/// The value `kind`/`name`'s restart record says its pods were all restarted for.
async fn restarted_for_kind(
    ns: &TestNamespace,
    kind: &str,
    name: &str,
    config: &str,
) -> Option<String> {
    let w = get(&ns.client, &ns.name, "apps/v1", kind, name).await?;
    let record = w
        .pointer("/metadata/annotations/kube-reloader.io~1restarted-for")?
        .as_str()?;
    let record: Value = serde_json::from_str(record).ok()?;
    record["done"][config].as_str().map(str::to_owned)
}

/// The value the Deployment's restart record says its pods were all restarted for.
async fn restarted_for(ns: &TestNamespace, name: &str, config: &str) -> Option<String> {
    restarted_for_kind(ns, "Deployment", name, config).await
}

/// How many times the controller's log says it evicted `pod`.
fn evictions_of(logs: &str, pod: &str) -> usize {
    let named = format!("\"{pod}\"");
    logs.lines()
        .filter(|l| l.contains("pod evicted for a reload") && l.contains(&named))
        .count()
}

/// Changes `settings` and waits until `control` (rolled the usual way) records the new value.
async fn change_and_see_control_roll(ns: &TestNamespace, value: &str) -> String {
    merge_patch(
        &ns.client,
        &ns.name,
        "v1",
        "ConfigMap",
        "settings",
        json!({"data": {"k": value}}),
    )
    .await;
    let hash = configmap_hash(&[("k", value)]);
    wait_for(
        "the control Deployment to roll for the change",
        Duration::from_secs(30),
        || async {
            let env = deployment_env(&ns.client, &ns.name, "control", VAR).await;
            (env.as_deref() == Some(hash.as_str()))
                .then_some(())
                .ok_or(format!("control records {env:?}"))
        },
    )
    .await;
    hash
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eviction_restarts_every_pod_once_without_a_rollout_and_waits_for_the_budget() {
    let ns = TestNamespace::new("kr-evict").await;
    let kwok = Kwok::start(&ns.client, &format!("{}-node", ns.name), &[]).await;
    let c = &ns.client;
    create(c, &ns.name, configmap("settings", json!({"k": "v1"}))).await;
    let auto = json!({"reloader.stakater.com/auto": "true"});
    let evicted = json!({"reloader.stakater.com/auto": "true",
        "kube-reloader.io/restart-by": "eviction"});
    create(c, &ns.name, on_node("control", &kwok.node, 1, auto)).await;
    create(c, &ns.name, on_node("evicted", &kwok.node, 3, evicted)).await;
    // A budget that allows no disruption at all.
    let pdb = json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "evicted"},
        "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "evicted"}}}});
    create(c, &ns.name, pdb).await;
    wait_ready(&ns, "control", 1).await;
    wait_ready(&ns, "evicted", 3).await;
    let before = pod_uids(&ns, "evicted").await;
    assert_eq!(before.len(), 3, "{before:?}");
    assert_eq!(replica_sets(&ns, "evicted").await, 1);
    let seen = pods_seen(&ns, "evicted");

    let controller = start(&ns).await;
    let hash = change_and_see_control_roll(&ns, "v2").await;

    // Blocked: retried and reported, no pod evicted, nothing written into the template.
    let note = wait_for_warning_event(c, &ns.name, "Deployment", "evicted", "ReloadFail").await;
    assert!(note.contains("PodDisruptionBudget"), "{note}");
    assert_eq!(
        pod_uids(&ns, "evicted").await,
        before,
        "no pod evicted past the budget"
    );
    assert_eq!(
        restarted_for(&ns, "evicted", "configmap/settings").await,
        None
    );

    // The budget allows one disruption at a time: the restart goes on and finishes.
    merge_patch(
        c,
        &ns.name,
        "policy/v1",
        "PodDisruptionBudget",
        "evicted",
        json!({"spec": {"maxUnavailable": 1}}),
    )
    .await;
    wait_for(
        "the restart record to say every pod runs the new value",
        Duration::from_secs(120),
        || async {
            let done = restarted_for(&ns, "evicted", "configmap/settings").await;
            (done.as_deref() == Some(hash.as_str()))
                .then_some(())
                .ok_or(format!("restarted for {done:?}"))
        },
    )
    .await;
    let after = pod_uids(&ns, "evicted").await;
    assert!(
        after.is_disjoint(&before),
        "every pod older than the change was replaced: before {before:?}, after {after:?}"
    );
    assert_eq!(replica_sets(&ns, "evicted").await, 1, "no rollout");
    assert_eq!(
        deployment_env(c, &ns.name, "evicted", VAR).await,
        None,
        "the template is untouched"
    );
    let evictions = plain_logs(&controller)
        .lines()
        .filter(|l| l.contains("pod evicted for a reload"))
        .count();
    assert_eq!(evictions, 3, "each old pod evicted once");
    assert_eq!(
        seen.lock().unwrap().len(),
        6,
        "three pods replaced once each, no replacement evicted"
    );
    let events = events_about(c, &ns.name, "Deployment", "evicted").await;
    assert!(
        events
            .iter()
            .any(|e| e.type_ == "Normal" && e.reason == "Reloaded"),
        "{events:?}"
    );

    // The next change with the record in place: restarted again, once more per pod.
    let hash = change_and_see_control_roll(&ns, "v3").await;
    wait_for(
        "the second restart to finish",
        Duration::from_secs(120),
        || async {
            let done = restarted_for(&ns, "evicted", "configmap/settings").await;
            (done.as_deref() == Some(hash.as_str()))
                .then_some(())
                .ok_or(format!("restarted for {done:?}"))
        },
    )
    .await;
    assert!(pod_uids(&ns, "evicted").await.is_disjoint(&after));
    assert_eq!(replica_sets(&ns, "evicted").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_place_is_refused_with_a_clear_error_and_nothing_is_written() {
    let ns = TestNamespace::new("kr-inplace").await;
    let c = &ns.client;
    create(c, &ns.name, configmap("settings", json!({"k": "v1"}))).await;
    let uses = env_from_configmap("settings");
    create(
        c,
        &ns.name,
        auto_deployment("control", json!({}), uses.clone()),
    )
    .await;
    create(
        c,
        &ns.name,
        auto_deployment(
            "in-place",
            json!({"kube-reloader.io/restart-by": "in-place"}),
            uses,
        ),
    )
    .await;
    let _controller = start(&ns).await;
    change_and_see_control_roll(&ns, "v2").await;
    let note = wait_for_warning_event(c, &ns.name, "Deployment", "in-place", "ReloadFail").await;
    assert!(note.contains("in-place is not possible"), "{note}");
    assert_eq!(
        deployment_env(c, &ns.name, "in-place", VAR).await,
        None,
        "nothing written"
    );
}

/// A controller killed in the middle of a restart: the next one finds the restart unfinished
/// (recorded on the workload) and evicts only the pods still older than it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_cut_by_a_crash_is_finished_by_the_next_controller_once_per_pod() {
    let ns = TestNamespace::new("kr-evict-crash").await;
    let kwok = Kwok::start(&ns.client, &format!("{}-node", ns.name), &[]).await;
    let c = &ns.client;
    create(c, &ns.name, configmap("settings", json!({"k": "v1"}))).await;
    let auto = json!({"reloader.stakater.com/auto": "true"});
    let evicted = json!({"reloader.stakater.com/auto": "true",
        "kube-reloader.io/restart-by": "eviction"});
    create(c, &ns.name, on_node("control", &kwok.node, 1, auto)).await;
    create(c, &ns.name, on_node("evicted", &kwok.node, 3, evicted)).await;
    wait_ready(&ns, "control", 1).await;
    wait_ready(&ns, "evicted", 3).await;
    let before = pod_uids(&ns, "evicted").await;
    let seen = pods_seen(&ns, "evicted");

    let first = start(&ns).await;
    let hash = change_and_see_control_roll(&ns, "v2").await;
    wait_for(
        "the first pod to be evicted",
        Duration::from_secs(30),
        || async {
            let now = pod_uids(&ns, "evicted").await;
            let gone = before.difference(&now).count();
            (gone >= 1).then_some(()).ok_or(format!("{gone} replaced"))
        },
    )
    .await;
    first.crash();
    let done = restarted_for(&ns, "evicted", "configmap/settings").await;
    assert_eq!(done, None, "crashed mid-restart: {done:?}");

    let second = start(&ns).await;
    wait_for(
        "the next controller to finish the restart",
        Duration::from_secs(60),
        || async {
            let done = restarted_for(&ns, "evicted", "configmap/settings").await;
            (done.as_deref() == Some(hash.as_str()))
                .then_some(())
                .ok_or(format!("restarted for {done:?}"))
        },
    )
    .await;
    assert!(pod_uids(&ns, "evicted").await.is_disjoint(&before));
    assert_eq!(
        seen.lock().unwrap().len(),
        6,
        "three pods replaced once each across both controllers"
    );
    assert_eq!(replica_sets(&ns, "evicted").await, 1, "no rollout");
    drop(second);
}

/// A StatefulSet's pods come back with the same names: each is still evicted once (told apart
/// by UID, not by name), and the StatefulSet keeps its revision.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statefulset_is_restarted_pod_by_pod_under_the_same_names() {
    let ns = TestNamespace::new("kr-evict-sts").await;
    let kwok = Kwok::start(&ns.client, &format!("{}-node", ns.name), &[]).await;
    let c = &ns.client;
    create(c, &ns.name, configmap("settings", json!({"k": "v1"}))).await;
    let auto = json!({"reloader.stakater.com/auto": "true"});
    create(c, &ns.name, on_node("control", &kwok.node, 1, auto)).await;
    let mut spec = pod_spec(env_from_configmap("settings"), json!([]));
    spec["nodeName"] = json!(kwok.node);
    let mut sts = statefulset(
        "db",
        json!({"reloader.stakater.com/auto": "true", "kube-reloader.io/restart-by": "eviction"}),
        spec,
    );
    sts["spec"]["replicas"] = json!(3);
    create(c, &ns.name, sts).await;
    wait_ready(&ns, "control", 1).await;
    let revision = || async {
        let s = get(c, &ns.name, "apps/v1", "StatefulSet", "db").await?;
        let ready = s.pointer("/status/readyReplicas").and_then(Value::as_i64);
        let current = s.pointer("/status/currentRevision")?.as_str()?.to_string();
        (ready == Some(3)).then_some(current)
    };
    wait_for(
        "the StatefulSet to have 3 Ready pods",
        Duration::from_secs(90),
        || async {
            revision()
                .await
                .map(|_| ())
                .ok_or_else(|| "not ready".to_string())
        },
    )
    .await;
    let revision_before = revision().await;
    let before = pod_uids(&ns, "db").await;

    let controller = start(&ns).await;
    let hash = change_and_see_control_roll(&ns, "v2").await;
    wait_for(
        "the StatefulSet's restart to finish",
        Duration::from_secs(120),
        || async {
            let done = restarted_for_kind(&ns, "StatefulSet", "db", "configmap/settings").await;
            (done.as_deref() == Some(hash.as_str()))
                .then_some(())
                .ok_or(format!("restarted for {done:?}"))
        },
    )
    .await;
    assert!(pod_uids(&ns, "db").await.is_disjoint(&before));
    // Counted from the controller's log, not from the pods seen: the StatefulSet controller
    // now and then replaces a fresh pod once more by itself (seen on kwok with no eviction
    // logged for it).
    let logs = plain_logs(&controller);
    for pod in ["db-0", "db-1", "db-2"] {
        assert_eq!(evictions_of(&logs, pod), 1, "{pod} evicted once");
    }
    assert_eq!(
        revision().await,
        revision_before,
        "the template never changed"
    );
}

/// libfaketime from Debian's `faketime` package: LD_PRELOADed, it shifts the clocks the
/// controller reads by a fixed offset.
const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

/// The pods to replace are told by UID, not by comparing the API server's creation times with
/// the controller's clock: a controller 30 s ahead would evict the replacements again and
/// again, one 30 s behind would find no pod older than its restart and evict none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_skewed_controller_clock_evicts_each_pod_once() {
    assert!(
        std::path::Path::new(LIBFAKETIME).exists(),
        "{LIBFAKETIME} is missing: install Debian's faketime package (.ci/run does)"
    );
    for offset in ["+30s", "-30s"] {
        let ns = TestNamespace::new("kr-evict-skew").await;
        let kwok = Kwok::start(&ns.client, &format!("{}-node", ns.name), &[]).await;
        let c = &ns.client;
        create(c, &ns.name, configmap("settings", json!({"k": "v1"}))).await;
        let auto = json!({"reloader.stakater.com/auto": "true"});
        let evicted = json!({"reloader.stakater.com/auto": "true",
            "kube-reloader.io/restart-by": "eviction"});
        create(c, &ns.name, on_node("control", &kwok.node, 1, auto)).await;
        create(c, &ns.name, on_node("evicted", &kwok.node, 2, evicted)).await;
        wait_ready(&ns, "control", 1).await;
        wait_ready(&ns, "evicted", 2).await;
        let before = pod_uids(&ns, "evicted").await;
        let seen = pods_seen(&ns, "evicted");
        let _controller = Controller::start_with_env(
            &[
                &format!("--namespaces={}", ns.name),
                &format!("--pod-namespace={}", ns.name),
            ],
            &[("LD_PRELOAD", LIBFAKETIME), ("FAKETIME", offset)],
        )
        .await;
        let hash = change_and_see_control_roll(&ns, "v2").await;
        wait_for(
            &format!("the restart to finish with the clock {offset}"),
            Duration::from_secs(60),
            || async {
                let done = restarted_for(&ns, "evicted", "configmap/settings").await;
                (done.as_deref() == Some(hash.as_str()))
                    .then_some(())
                    .ok_or(format!("restarted for {done:?}"))
            },
        )
        .await;
        assert!(
            pod_uids(&ns, "evicted").await.is_disjoint(&before),
            "clock {offset}: every old pod replaced"
        );
        // Settled: a controller evicting replacements again would have done so by now.
        tokio::time::sleep(Duration::from_secs(3)).await;
        let seen = seen.lock().unwrap().clone();
        assert_eq!(
            seen.len(),
            4,
            "clock {offset}: each pod evicted once: {seen:?}"
        );
    }
}

/// A bare pod on the kwok node reading `settings`, with `labels` and `annotations`.
fn bare_pod(name: &str, node: &str, labels: Value, annotations: Value) -> Value {
    let mut spec = pod_spec(env_from_configmap("settings"), json!([]));
    spec["nodeName"] = json!(node);
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": labels, "annotations": annotations},
        "spec": spec})
}

async fn pod_uid(ns: &TestNamespace, name: &str) -> Option<String> {
    let pod = get(&ns.client, &ns.name, "v1", "Pod", name).await?;
    let terminating = pod.pointer("/metadata/deletionTimestamp").is_some();
    let uid = pod.pointer("/metadata/uid")?.as_str()?.to_string();
    (!terminating).then_some(uid)
}

/// `--restart-labelled-pods`: a pod labelled `kube-reloader.io/restart-by=eviction` is a
/// workload of its own, reloaded by evicting it once. A bare pod under a budget that allows no
/// disruption is held (retried and reported) until the budget goes; one without a budget is
/// evicted at once; a bare pod with the same annotations and no label is never touched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn labelled_pods_are_evicted_once_each_and_unlabelled_ones_never() {
    let ns = TestNamespace::new("kr-evict-pods").await;
    let kwok = Kwok::start(&ns.client, &format!("{}-node", ns.name), &[]).await;
    let c = &ns.client;
    create(c, &ns.name, configmap("settings", json!({"k": "v1"}))).await;
    let auto = json!({"reloader.stakater.com/auto": "true"});
    let opted_in = |app: &str| json!({"app": app, "kube-reloader.io/restart-by": "eviction"});
    create(c, &ns.name, on_node("control", &kwok.node, 1, auto.clone())).await;
    for (name, labels) in [
        ("worker", opted_in("worker")),
        ("free", opted_in("free")),
        ("plain", json!({"app": "plain"})),
    ] {
        create(
            c,
            &ns.name,
            bare_pod(name, &kwok.node, labels, auto.clone()),
        )
        .await;
    }
    let pdb = json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "worker"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "worker"}}}});
    create(c, &ns.name, pdb).await;
    wait_ready(&ns, "control", 1).await;
    wait_for(
        "the budget to count the bare pod healthy",
        Duration::from_secs(90),
        || async {
            let pdb = get(c, &ns.name, "policy/v1", "PodDisruptionBudget", "worker").await;
            let healthy = pdb.and_then(|p| p.pointer("/status/currentHealthy")?.as_i64());
            (healthy == Some(1))
                .then_some(())
                .ok_or(format!("healthy {healthy:?}"))
        },
    )
    .await;
    let (worker, plain) = (pod_uid(&ns, "worker").await, pod_uid(&ns, "plain").await);

    let controller = Controller::start(&[
        &format!("--namespaces={}", ns.name),
        &format!("--pod-namespace={}", ns.name),
        "--restart-labelled-pods",
    ])
    .await;
    change_and_see_control_roll(&ns, "v2").await;

    let gone = |name: &'static str| {
        let ns = &ns;
        move || async move {
            match pod_uid(ns, name).await {
                None => Ok(()),
                Some(uid) => Err(format!("{name} {uid} still running")),
            }
        }
    };
    wait_for(
        "the pod without a budget evicted",
        Duration::from_secs(60),
        gone("free"),
    )
    .await;
    // The pod under its budget: held, reported, still there.
    let note = wait_for_warning_event(c, &ns.name, "Pod", "worker", "ReloadFail").await;
    assert!(note.contains("PodDisruptionBudget"), "{note}");
    assert_eq!(
        pod_uid(&ns, "worker").await,
        worker,
        "not evicted past the budget"
    );

    delete_object(c, &ns.name, "policy/v1", "PodDisruptionBudget", "worker").await;
    wait_for(
        "the pod evicted once its budget is gone",
        Duration::from_secs(60),
        gone("worker"),
    )
    .await;
    // The Event goes out after the eviction, off the write's slot: it may come a moment later.
    wait_for(
        "the Reloaded Event of the evicted pod",
        Duration::from_secs(30),
        || async {
            let events = events_about(c, &ns.name, "Pod", "worker").await;
            events
                .iter()
                .any(|e| e.type_ == "Normal" && e.reason == "Reloaded")
                .then_some(())
                .ok_or(format!("{events:?}"))
        },
    )
    .await;
    let logs = plain_logs(&controller);
    for pod in ["worker", "free"] {
        assert_eq!(evictions_of(&logs, pod), 1, "{pod} evicted once");
    }
    assert_eq!(
        pod_uid(&ns, "plain").await,
        plain,
        "an unlabelled pod is never evicted"
    );
}
