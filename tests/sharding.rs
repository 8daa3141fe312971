//! Scale-out against the real API server with several controller processes: namespaces are
//! split by the published assignment, a new replica takes about 1/N, a crashed or paused replica's
//! namespaces are served again without missed or duplicate reloads.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Namespace;
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;

use common::objects::*;
use common::{Controller, FreshApiserver, client, compact_etcd, metric_in, wait_for};
use kube_reloader::shard::Assignment;

/// The scenarios run one at a time: each starts several controllers, and on a 2-core CI machine
/// running them side by side would measure the machine, not the protocol.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Test timings: short Leases so failover fits in a test (the defaults are Reloader's 15/10/2 s).
const LEASE: Duration = Duration::from_secs(4);
/// How long a crashed replica's namespaces may go unserved: its Lease runs out, the leader
/// notices within a retry period or two, and the new owner lists what it gained.
const FAILOVER: Duration = Duration::from_secs(LEASE.as_secs() + 2 + 6);
const SHARD_FLAGS: [&str; 3] = [
    "--lease-duration=4s",
    "--renew-deadline=3s",
    "--retry-period=1s",
];

/// A labelled set of namespaces plus the namespace holding the Leases, deleted together.
struct Fleet {
    client: Client,
    run: String,
    home: String,
    namespaces: Vec<String>,
}

impl Fleet {
    async fn new(tag: &str, count: usize) -> Fleet {
        let run = format!(
            "{tag}-{:x}",
            std::process::id() ^ Instant::now().elapsed().subsec_nanos()
        );
        Self::named(run, count).await
    }

    /// Fixed namespace names, so the rendezvous split over r0..r3 is the same in every run
    /// (with random names one of three shares falls outside 100 +/- 20 about 4 % of the time).
    /// An earlier run's namespaces of the same names are waited out first.
    async fn fixed(tag: &str, count: usize) -> Fleet {
        let api: Api<Namespace> = Api::all(client().await);
        wait_for(
            &format!("namespaces of an earlier {tag} run to be gone"),
            Duration::from_secs(180),
            || async {
                let left = api
                    .list(&ListParams::default().labels(&format!("kr-shard-run={tag}")))
                    .await
                    .map_err(|e| e.to_string())?
                    .items
                    .len();
                let home = api
                    .get_opt(&format!("{tag}-home"))
                    .await
                    .map_err(|e| e.to_string())?;
                (left == 0 && home.is_none())
                    .then_some(())
                    .ok_or_else(|| format!("{left} left"))
            },
        )
        .await;
        Self::named(tag.to_string(), count).await
    }

    async fn named(run: String, count: usize) -> Fleet {
        let client = client().await;
        let api: Api<Namespace> = Api::all(client.clone());
        let home = format!("{run}-home");
        let mk = |name: String, labelled: bool| {
            let labels = if labelled {
                json!({"kr-shard-run": run})
            } else {
                json!({"kr-shard-home": run})
            };
            serde_json::from_value::<Namespace>(
                json!({"metadata": {"name": name, "labels": labels}}),
            )
            .unwrap()
        };
        api.create(&PostParams::default(), &mk(home.clone(), false))
            .await
            .unwrap();
        let namespaces: Vec<String> = (0..count).map(|i| format!("{run}-{i}")).collect();
        futures::stream::iter(namespaces.clone())
            .map(|ns| {
                let api = api.clone();
                let obj = mk(ns, true);
                async move { api.create(&PostParams::default(), &obj).await.map(|_| ()) }
            })
            .buffer_unordered(32)
            .try_collect::<Vec<()>>()
            .await
            .unwrap();
        Fleet {
            client,
            run,
            home,
            namespaces,
        }
    }

    async fn replica(&self, name: &str, extra: &[&str]) -> Controller {
        self.replica_with_env(name, extra, &[]).await
    }

    async fn replica_with_env(
        &self,
        name: &str,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Controller {
        let mut args: Vec<String> = vec![
            "--sharding".into(),
            format!("--namespace-selector=kr-shard-run={}", self.run),
        ];
        args.extend(SHARD_FLAGS.iter().map(|s| s.to_string()));
        args.extend(extra.iter().map(|s| s.to_string()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut all = vec![("POD_NAME", name), ("POD_NAMESPACE", self.home.as_str())];
        all.extend_from_slice(env);
        Controller::start_with_env(&args, &all).await
    }

    async fn assignment(&self) -> Option<Assignment> {
        let cm = get(
            &self.client,
            &self.home,
            "v1",
            "ConfigMap",
            "kube-reloader-shard-assignment",
        )
        .await?;
        serde_json::from_str(cm["data"]["assignment"].as_str()?).ok()
    }

    async fn leader(&self) -> Option<String> {
        let lease = get(
            &self.client,
            &self.home,
            "coordination.k8s.io/v1",
            "Lease",
            "stakater-reloader-lock",
        )
        .await?;
        lease["spec"]["holderIdentity"].as_str().map(String::from)
    }

    /// Waits until the assignment lists exactly `members`.
    async fn wait_members(&self, members: &[&str], within: Duration) -> Assignment {
        let mut want: Vec<String> = members.iter().map(|s| s.to_string()).collect();
        want.sort();
        wait_for(&format!("an assignment of {want:?}"), within, || async {
            match self.assignment().await {
                Some(a) if a.members == want => Ok(a),
                other => Err(format!("{other:?}")),
            }
        })
        .await
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        let names: Vec<String> = self
            .namespaces
            .iter()
            .cloned()
            .chain([self.home.clone()])
            .collect();
        common::block_on_detached(async move {
            let api: Api<Namespace> = Api::all(client().await);
            futures::stream::iter(names)
                .for_each_concurrent(32, |n| {
                    let api = api.clone();
                    async move {
                        let _ = api.delete(&n, &DeleteParams::background()).await;
                    }
                })
                .await;
        });
    }
}

async fn owned(c: &Controller) -> usize {
    c.metric("kube_reloader_owned_namespaces")
        .await
        .unwrap_or(-1.0) as usize
}

/// Waits until the replicas' owned counts add up to `total` with no handover in progress.
async fn wait_owned(replicas: &[&Controller], total: usize, within: Duration) -> Vec<usize> {
    wait_for(
        &format!("owned namespaces to add up to {total}"),
        within,
        || async {
            let mut counts = Vec::new();
            for r in replicas {
                counts.push(owned(r).await);
            }
            if counts.iter().sum::<usize>() == total {
                Ok(counts)
            } else {
                Err(format!("{counts:?}"))
            }
        },
    )
    .await
}

/// Waits until each replica owns exactly what `assignment` gives it (the sum alone can match
/// while replicas still act on the previous generation, e.g. [150, 150, 0] for three members).
async fn wait_owned_as(
    fleet: &Fleet,
    replicas: &[(&str, &Controller)],
    assignment: &Assignment,
    within: Duration,
) -> Vec<usize> {
    let expected: Vec<usize> = replicas
        .iter()
        .map(|(name, _)| {
            fleet
                .namespaces
                .iter()
                .filter(|ns| assignment.owner(ns) == Some(*name))
                .count()
        })
        .collect();
    wait_for(
        &format!(
            "owned namespaces as generation {} gives them",
            assignment.generation
        ),
        within,
        || async {
            let mut counts = Vec::new();
            for (_, r) in replicas {
                counts.push(owned(r).await);
            }
            if counts == expected {
                Ok(counts)
            } else {
                Err(format!("{counts:?}, the assignment gives {expected:?}"))
            }
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespaces_split_evenly_a_new_replica_takes_a_quarter_and_leader_loss_does_not_churn() {
    let _serial = SERIAL.lock().await;
    let fleet = Fleet::fixed("shard-split", 300).await;
    let r0 = fleet.replica("r0", &[]).await;
    let r1 = fleet.replica("r1", &[]).await;
    let r2 = fleet.replica("r2", &[]).await;
    let three = fleet
        .wait_members(&["r0", "r1", "r2"], Duration::from_secs(60))
        .await;

    // 1. Each namespace owned by exactly one replica; each owns 100 +/- 20.
    let counts = wait_owned_as(
        &fleet,
        &[("r0", &r0), ("r1", &r1), ("r2", &r2)],
        &three,
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(counts.iter().sum::<usize>(), 300);
    for c in &counts {
        assert!((80..=120).contains(c), "uneven split {counts:?}");
    }
    let mut by_assignment: HashMap<String, usize> = HashMap::new();
    for ns in &fleet.namespaces {
        *by_assignment
            .entry(three.owner(ns).unwrap().to_string())
            .or_default() += 1;
    }
    let mut from_metrics: Vec<usize> = counts.clone();
    from_metrics.sort();
    let mut from_assignment: Vec<usize> = by_assignment.values().copied().collect();
    from_assignment.sort();
    assert_eq!(
        from_metrics, from_assignment,
        "metrics and the published assignment disagree"
    );

    // 6. A fourth replica moves about a quarter of the namespaces, nearly all to itself.
    let r3 = fleet.replica("r3", &[]).await;
    let four = fleet
        .wait_members(&["r0", "r1", "r2", "r3"], Duration::from_secs(60))
        .await;
    assert_eq!(four.generation, three.generation + 1);
    let moved = fleet
        .namespaces
        .iter()
        .filter(|ns| three.owner(ns) != four.owner(ns))
        .count();
    let share = moved as f64 / 300.0;
    eprintln!(
        "adding a 4th replica moved {moved}/300 namespaces ({:.1}%)",
        share * 100.0
    );
    // About a quarter, +/- 5 points as the issue asks; shard::ranges' unit tests pin the
    // property over 10k namespaces. The fair-share cap passes a few slots on between the
    // replicas that stay (under 1 % of the namespaces there).
    assert_eq!(four.scheme, kube_reloader::shard::Scheme::HashRanges);
    assert!((0.20..=0.30).contains(&share), "moved {share}");
    let to_r3 = fleet
        .namespaces
        .iter()
        .filter(|ns| three.owner(ns) != four.owner(ns) && four.owner(ns) == Some("r3"))
        .count();
    assert!(
        to_r3 as f64 >= 0.9 * moved as f64,
        "only {to_r3} of {moved} moved to r3"
    );
    let counts = wait_owned_as(
        &fleet,
        &[("r0", &r0), ("r1", &r1), ("r2", &r2), ("r3", &r3)],
        &four,
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(counts[3], to_r3, "r3 owns what moved to it");

    // 5. Kill the leader: another takes over within the lease duration (+ a retry period), and
    //    the assignment changes once (the dead member leaves), then stays put.
    let leader = fleet.leader().await.expect("a leader");
    let mut replicas: BTreeMap<String, Controller> =
        [("r0", r0), ("r1", r1), ("r2", r2), ("r3", r3)]
            .into_iter()
            .map(|(n, c)| (n.to_string(), c))
            .collect();
    let killed_at = Instant::now();
    replicas.remove(&leader).unwrap().crash();
    let new_leader = wait_for("a new leader", LEASE + Duration::from_secs(4), || async {
        match fleet.leader().await {
            Some(l) if l != leader => Ok(l),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    eprintln!(
        "leader {leader} killed; {new_leader} took over after {:?}",
        killed_at.elapsed()
    );
    let survivors: Vec<&str> = replicas.keys().map(String::as_str).collect();
    let after = fleet
        .wait_members(&survivors, Duration::from_secs(45))
        .await;
    assert_eq!(
        after.generation,
        four.generation + 1,
        "one change for one lost member"
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        fleet.assignment().await.unwrap().generation,
        after.generation,
        "the assignment churned"
    );
    let survivors: Vec<&Controller> = replicas.values().collect();
    wait_owned(&survivors, 300, Duration::from_secs(60)).await;
}

/// `n` namespaces, each with ConfigMap `cfg` and an auto Deployment `web` (annotations strategy
/// when `annotations`), labelled so one watch sees them all.
async fn workloads(fleet: &Fleet, n: usize) {
    futures::stream::iter(fleet.namespaces.iter().take(n).cloned())
        .for_each_concurrent(16, |ns| async move { workload_in(fleet, &ns).await })
        .await;
}

/// ConfigMap `cfg` and the auto Deployment `web` using it in `ns`.
async fn workload_in(fleet: &Fleet, ns: &str) {
    create(&fleet.client, ns, configmap("cfg", json!({"v": "0"}))).await;
    let mut d = deployment(
        "web",
        json!({"reloader.stakater.com/auto": "true"}),
        pod_spec(env_from_configmap("cfg"), json!([])),
    );
    d["metadata"]["labels"] = json!({"kr-shard-run": fleet.run});
    create(&fleet.client, ns, d).await;
}

/// Every pod-template change of the fleet's Deployments: namespace -> the hashes recorded, in
/// the order they were written.
#[derive(Clone)]
struct Rollouts(Arc<Mutex<HashMap<String, Vec<String>>>>);

impl Rollouts {
    fn record(fleet: &Fleet) -> Rollouts {
        let seen = Rollouts(Arc::default());
        let api: Api<Deployment> = Api::all(fleet.client.clone());
        let config = watcher::Config::default().labels(&format!("kr-shard-run={}", fleet.run));
        let sink = seen.clone();
        tokio::spawn(async move {
            let mut last: HashMap<String, Option<String>> = HashMap::new();
            let mut stream = watcher(api, config).applied_objects().boxed();
            while let Some(Ok(d)) = stream.next().await {
                let ns = d.metadata.namespace.clone().unwrap();
                let recorded = last_reloaded_from(&d);
                let previous = last.insert(ns.clone(), recorded.clone());
                // A template write changes the annotation (its observedAt at least): the same
                // hash twice in a row is a duplicate rollout.
                if let Some(annotation) =
                    recorded.filter(|r| previous.as_ref() != Some(&Some(r.clone())))
                {
                    sink.0
                        .lock()
                        .unwrap()
                        .entry(ns)
                        .or_default()
                        .push(hash_of(&annotation));
                }
            }
        });
        seen
    }

    fn snapshot(&self) -> HashMap<String, Vec<String>> {
        self.0.lock().unwrap().clone()
    }

    /// Waits until every namespace of `namespaces` has had a rollout to `hash`.
    async fn wait_rolled_to(
        &self,
        what: &str,
        namespaces: &[String],
        hash: &str,
        within: Duration,
    ) {
        wait_for(what, within, || async {
            let seen = self.snapshot();
            let missing: Vec<&String> = namespaces
                .iter()
                .filter(|ns| !seen.get(*ns).is_some_and(|h| h.iter().any(|x| x == hash)))
                .collect();
            missing.is_empty().then_some(()).ok_or(format!(
                "{}/{} not rolled: {missing:?}",
                missing.len(),
                namespaces.len()
            ))
        })
        .await;
    }

    /// Changes `cfg` in every namespace of the fleet to `value` and waits (60 s at most) until
    /// every workload was rolled to it.
    async fn change_everywhere_and_wait(&self, fleet: &Fleet, value: &str) {
        let hash = change_all(fleet, &fleet.namespaces, value).await;
        let what = format!("every workload reloaded to {value}");
        self.wait_rolled_to(&what, &fleet.namespaces, &hash, Duration::from_secs(60))
            .await;
    }

    /// No config change rolled a workload twice in a row (a duplicate rollout). Waits a moment
    /// first, so that a late duplicate write has time to show.
    async fn assert_no_duplicate(&self) {
        tokio::time::sleep(Duration::from_secs(2)).await;
        for (ns, hashes) in self.snapshot() {
            let mut dedup = hashes.clone();
            dedup.dedup();
            assert_eq!(
                dedup, hashes,
                "{ns}: a config change rolled the workload twice"
            );
        }
    }
}

/// A Deployment's `last-reloaded-from` template annotation, if it has one.
fn last_reloaded_from(d: &Deployment) -> Option<String> {
    let annotations = d.spec.template.metadata.as_ref()?.annotations.as_ref()?;
    annotations
        .get("reloader.stakater.com/last-reloaded-from")
        .cloned()
}

/// The `hash` that annotation records.
fn hash_of(annotation: &str) -> String {
    let value: serde_json::Value = serde_json::from_str(annotation).unwrap();
    value["hash"].as_str().unwrap().to_string()
}

/// Changes `cfg` in each namespace to `value`; returns the hash the workloads will record.
async fn change_all(fleet: &Fleet, namespaces: &[String], value: &str) -> String {
    for ns in namespaces {
        change(fleet, ns, value).await;
    }
    configmap_hash(&[("v", value)])
}

async fn change(fleet: &Fleet, ns: &str, value: &str) {
    merge_patch(
        &fleet.client,
        ns,
        "v1",
        "ConfigMap",
        "cfg",
        json!({"data": {"v": value}}),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_replicas_namespaces_are_served_again_and_gap_changes_reloaded_once() {
    let _serial = SERIAL.lock().await;
    let fleet = Fleet::new("shard-crash", 24).await;
    workloads(&fleet, 24).await;
    let rollouts = Rollouts::record(&fleet);
    let mut replicas = BTreeMap::new();
    // Server-side sharding off: with it, a taker's watches re-open with the gained ranges from
    // their last resourceVersion, and the API server replays the gap's events when that version
    // is recent; without it (and whenever the version is too old) only the catch-up finds them.
    let flags = [
        "--reload-strategy=annotations",
        "--server-side-sharding=off",
    ];
    for name in ["r0", "r1", "r2"] {
        replicas.insert(name, fleet.replica(name, &flags).await);
    }
    let assignment = fleet
        .wait_members(&["r0", "r1", "r2"], Duration::from_secs(60))
        .await;
    wait_owned(
        &replicas.values().collect::<Vec<_>>(),
        24,
        Duration::from_secs(60),
    )
    .await;
    // A first change in every other namespace: those workloads record a hash, the others were
    // never reloaded and record none (the takeover must catch their change up all the same,
    // from the version the crashed replica had acted up to).
    let reloaded: Vec<String> = fleet.namespaces.iter().step_by(2).cloned().collect();
    let h1 = change_all(&fleet, &reloaded, "1").await;
    rollouts
        .wait_rolled_to(
            "half the workloads reloaded",
            &reloaded,
            &h1,
            Duration::from_secs(60),
        )
        .await;
    // The acted version published after that change (renewed every retry period).
    tokio::time::sleep(Duration::from_secs(3)).await;

    // Crash the replica that owns the most namespaces (not necessarily the leader).
    let victim = ["r0", "r1", "r2"]
        .into_iter()
        .max_by_key(|r| {
            fleet
                .namespaces
                .iter()
                .filter(|ns| assignment.owner(ns) == Some(*r))
                .count()
        })
        .unwrap();
    let orphaned: Vec<String> = fleet
        .namespaces
        .iter()
        .filter(|ns| assignment.owner(ns) == Some(victim))
        .cloned()
        .collect();
    let crashed_at = Instant::now();
    replicas.remove(victim).unwrap().crash();
    // Changes in the gap, while nobody serves these namespaces.
    let h2 = change_all(&fleet, &orphaned, "2").await;
    rollouts
        .wait_rolled_to("the orphaned namespaces reloaded", &orphaned, &h2, FAILOVER)
        .await;
    eprintln!(
        "{} orphaned namespaces of {victim} served again after {:?}",
        orphaned.len(),
        crashed_at.elapsed()
    );
    rollouts.assert_no_duplicate().await;
    // The takers timed each stage of indexing what they gained, the catch-up included.
    let mut catch_ups = 0.0;
    for survivor in replicas.values() {
        let series = r#"kube_reloader_backfill_duration_seconds_count{stage="catch_up"}"#;
        catch_ups += survivor.metric(series).await.unwrap_or(0.0);
    }
    assert!(catch_ups >= 1.0, "no catch-up stage timed by the takers");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_replica_catches_up_changes_made_while_it_was_down() {
    let _serial = SERIAL.lock().await;
    let fleet = Fleet::new("shard-restart", 8).await;
    workloads(&fleet, 8).await;
    let rollouts = Rollouts::record(&fleet);
    acted_once_then_crashed(&fleet, &rollouts, 8).await;
    // Changes while nobody runs; seven of the eight workloads were never reloaded.
    let h2 = change_all(&fleet, &fleet.namespaces, "2").await;
    let _r0 = fleet.replica("r0", &RESTARTED).await;
    rollouts
        .wait_rolled_to(
            "every workload reloaded after the restart",
            &fleet.namespaces,
            &h2,
            FAILOVER,
        )
        .await;
    rollouts.assert_no_duplicate().await;
}

const RESTARTED: [&str; 1] = ["--reload-strategy=annotations"];

/// A catch-up costs what changed, not the share: a replica restarted owning twelve namespaces
/// (more than it backfills one by one) lists configs at the version it had acted up to only in
/// the two namespaces where a config was written meanwhile, and reloads both, once. It once
/// listed every ConfigMap of the cluster at that version, in pages, on every takeover.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_catch_up_lists_at_the_acted_version_only_the_namespaces_written_since() {
    use common::fault_proxy::FaultProxy;
    let _serial = SERIAL.lock().await;
    let fleet = Fleet::new("shard-narrow", 12).await;
    workloads(&fleet, 12).await;
    let rollouts = Rollouts::record(&fleet);
    acted_once_then_crashed(&fleet, &rollouts, 12).await;
    let written = &fleet.namespaces[3..5];
    let h2 = change_all(&fleet, written, "2").await;
    let proxy = FaultProxy::start().await;
    let kubeconfig = proxy.kubeconfig().to_str().unwrap().to_string();
    let _r0 = fleet
        .replica_with_env("r0", &RESTARTED, &[("KUBECONFIG", kubeconfig.as_str())])
        .await;
    rollouts
        .wait_rolled_to(
            "the workloads of the written configs",
            written,
            &h2,
            FAILOVER,
        )
        .await;
    rollouts.assert_no_duplicate().await;
    let expected: std::collections::BTreeSet<(Option<String>, String)> = written
        .iter()
        .map(|ns| (Some(ns.clone()), "configmaps".to_string()))
        .collect();
    assert_eq!(proxy.exact_lists(), expected);
}

/// Replica r0 alone owns the fleet's `owned` namespaces, rolls the first one's workload once (so
/// its Lease records an acted version past the setup), and is SIGKILLed.
async fn acted_once_then_crashed(fleet: &Fleet, rollouts: &Rollouts, owned: usize) {
    let r0 = fleet.replica("r0", &RESTARTED).await;
    fleet.wait_members(&["r0"], Duration::from_secs(60)).await;
    wait_owned(&[&r0], owned, Duration::from_secs(60)).await;
    let first = &fleet.namespaces[..1];
    let h1 = change_all(fleet, first, "1").await;
    let within = Duration::from_secs(60);
    rollouts
        .wait_rolled_to("the first workload reloaded", first, &h1, within)
        .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    r0.crash();
}

/// The same restart, with etcd compacted while the replica was down: the list at the version it
/// had acted up to is a 410, so it rolls the configs written since (all eight `cfg`), and not a
/// config that was only created meanwhile: before the managed-fields check, the Deployment using
/// it was rolled although its config never changed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_compaction_a_restarted_replica_rolls_what_was_written_and_not_what_was_created() {
    let _serial = SERIAL.lock().await;
    let fleet = Fleet::new("shard-compact", 9).await;
    workloads(&fleet, 8).await;
    let rollouts = Rollouts::record(&fleet);
    acted_once_then_crashed(&fleet, &rollouts, 9).await;
    let eight = &fleet.namespaces[..8];
    let h2 = change_all(&fleet, eight, "2").await;
    let created = &fleet.namespaces[8];
    workload_in(&fleet, created).await;
    compact_etcd().await;
    // The shared server's watch cache could still serve the old version from a snapshot.
    let fresh = FreshApiserver::start();
    let kubeconfig = fresh.kubeconfig.to_str().expect("a UTF-8 path");
    let r0 = fleet
        .replica_with_env("r0", &RESTARTED, &[("KUBECONFIG", kubeconfig)])
        .await;
    rollouts
        .wait_rolled_to("every changed workload reloaded", eight, &h2, FAILOVER)
        .await;
    let compacted = wait_for(
        "the catch-up fell back",
        Duration::from_secs(10),
        || async {
            let text = r0.metrics().await;
            metric_in(
                &text,
                r#"kube_reloader_catch_ups_total{result="compacted"}"#,
            )
            .filter(|n| *n > 0.0)
            .ok_or(
                text.lines()
                    .filter(|l| l.contains("catch_ups"))
                    .collect::<Vec<_>>()
                    .join("\n"),
            )
        },
    )
    .await;
    assert!(compacted > 0.0);
    rollouts.assert_no_duplicate().await;
    assert_eq!(
        rollouts.snapshot().get(created),
        None,
        "a workload whose config was only created in the gap was rolled"
    );
}

/// Whether a change of `ns` in `after` left its hash on the workload.
fn later_change_written(
    after: &[(String, u32, Instant)],
    ns: &str,
    seen: &HashMap<String, Vec<String>>,
) -> bool {
    let written = seen.get(ns);
    after.iter().filter(|(n, _, _)| n == ns).any(|(_, v, _)| {
        let hash = configmap_hash(&[("v", &v.to_string())]);
        written.is_some_and(|h| h.contains(&hash))
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scaling_1_4_1_under_continuous_changes_misses_nothing_and_duplicates_nothing() {
    let _serial = SERIAL.lock().await;
    let fleet = Fleet::new("shard-scale", 30).await;
    workloads(&fleet, 30).await;
    let rollouts = Rollouts::record(&fleet);
    let r0 = fleet
        .replica("r0", &["--reload-strategy=annotations"])
        .await;
    fleet.wait_members(&["r0"], Duration::from_secs(60)).await;

    // 20+ changes per second, round-robin, for the whole scale-up and scale-down: every 100 ms
    // a batch of five, sent concurrently so API latency does not slow the rate down.
    let driver = {
        let client = fleet.client.clone();
        let namespaces = fleet.namespaces.clone();
        tokio::spawn(async move {
            let mut history: Vec<(String, u32, Instant)> = Vec::new();
            let start = Instant::now();
            let mut i = 0u32;
            let mut tick = tokio::time::interval(Duration::from_millis(100));
            while start.elapsed() < Duration::from_secs(24) {
                tick.tick().await;
                let batch: Vec<(String, u32)> = (0..5)
                    .map(|_| {
                        i += 1;
                        (namespaces[i as usize % namespaces.len()].clone(), i + 10)
                    })
                    .collect();
                futures::future::join_all(batch.iter().map(|(ns, v)| {
                    merge_patch(
                        &client,
                        ns,
                        "v1",
                        "ConfigMap",
                        "cfg",
                        json!({"data": {"v": v.to_string()}}),
                    )
                }))
                .await;
                let now = Instant::now();
                history.extend(batch.into_iter().map(|(ns, v)| (ns, v, now)));
            }
            history
        })
    };
    tokio::time::sleep(Duration::from_secs(3)).await;
    let r1 = fleet
        .replica("r1", &["--reload-strategy=annotations"])
        .await;
    let r2 = fleet
        .replica("r2", &["--reload-strategy=annotations"])
        .await;
    let r3 = fleet
        .replica("r3", &["--reload-strategy=annotations"])
        .await;
    fleet
        .wait_members(&["r0", "r1", "r2", "r3"], Duration::from_secs(45))
        .await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(r1.stop().await.success());
    assert!(r2.stop().await.success());
    assert!(r3.stop().await.success());
    fleet.wait_members(&["r0"], Duration::from_secs(45)).await;
    let history = driver.await.unwrap();
    let changes = history.len();
    assert!(
        changes as f64 / 24.0 >= 20.0,
        "only {changes} changes in 24 s"
    );
    let last: HashMap<String, u32> = history.iter().map(|(ns, v, _)| (ns.clone(), *v)).collect();
    // Every workload ends on its config's last value...
    wait_for(
        "every workload on its last config value",
        Duration::from_secs(60),
        || async {
            let seen = rollouts.snapshot();
            let stale: Vec<&String> = last
                .iter()
                .filter(|(ns, v)| {
                    seen.get(*ns).and_then(|h| h.last())
                        != Some(&configmap_hash(&[("v", &v.to_string())]))
                })
                .map(|(ns, _)| ns)
                .collect();
            if stale.is_empty() {
                Ok(())
            } else {
                Err(format!("{} stale", stale.len()))
            }
        },
    )
    .await;
    // ...and no config change rolled a workload twice.
    rollouts.assert_no_duplicate().await;
    let seen = rollouts.snapshot();
    let total: usize = seen.values().map(Vec::len).sum();
    // No workload goes back to an older hash (A, B, A): during a handover a write waits while
    // its replica's view of the config is behind the API server (src/handover/config_view.rs).
    let rewrites: Vec<(&String, &Vec<String>)> = seen
        .iter()
        .filter(|(_, h)| h.len() != h.iter().collect::<std::collections::HashSet<_>>().len())
        .collect();
    eprintln!(
        "stale re-writes of an older hash during handovers: {}",
        rewrites.len()
    );
    assert!(
        rewrites.is_empty(),
        "workloads rolled back to an older hash: {rewrites:?}"
    );
    // Every change was reloaded, unless the next change of the same config came so soon that
    // both were coalesced into one write, which is by design. During a handover the gaining
    // replica holds its writes (up to a couple of seconds on a loaded 2-core machine) and a held
    // write takes in the newer changes queued meanwhile: 2 s is that coalescing window.
    let mut missed = Vec::new();
    for (k, (ns, v, at)) in history.iter().enumerate() {
        let next = history[k + 1..]
            .iter()
            .find(|(n, _, _)| n == ns)
            .map(|(_, _, t)| *t);
        let coalescible = next.is_some_and(|t| t.duration_since(*at) < Duration::from_secs(2));
        let hash = configmap_hash(&[("v", &v.to_string())]);
        if !coalescible && !seen.get(ns).is_some_and(|h| h.contains(&hash)) {
            // What tells a lost reload from one coalesced into a later change.
            let gap = next.map(|t| t.duration_since(*at));
            let later = later_change_written(&history[k + 1..], ns, &seen);
            missed.push(format!(
                "{ns} v{v}: next change after {gap:?}, a later change's hash written: {later}"
            ));
        }
    }
    assert!(missed.is_empty(), "changes never reloaded: {missed:#?}");
    eprintln!(
        "{changes} config changes, {total} rollouts across scale 1 -> 4 -> 1, none missed, no duplicate"
    );
    // The last replica has nobody to hand over to: it exits without waiting for the deadline.
    let stopping = Instant::now();
    assert!(r0.stop().await.success());
    assert!(
        stopping.elapsed() < Duration::from_secs(10),
        "the last replica took {:?} to stop",
        stopping.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_replica_writes_nothing_for_namespaces_it_lost() {
    let _serial = SERIAL.lock().await;
    let fleet = Fleet::new("shard-pause", 24).await;
    workloads(&fleet, 24).await;
    let rollouts = Rollouts::record(&fleet);
    let mut replicas = BTreeMap::new();
    for name in ["r0", "r1", "r2"] {
        replicas.insert(
            name,
            fleet
                .replica(name, &["--reload-strategy=annotations"])
                .await,
        );
    }
    let before = fleet
        .wait_members(&["r0", "r1", "r2"], Duration::from_secs(60))
        .await;
    wait_owned(
        &replicas.values().collect::<Vec<_>>(),
        24,
        Duration::from_secs(60),
    )
    .await;
    let leader = fleet.leader().await.unwrap();
    let paused = ["r0", "r1", "r2"]
        .into_iter()
        .find(|r| *r != leader)
        .unwrap();
    let lost: Vec<String> = fleet
        .namespaces
        .iter()
        .filter(|ns| before.owner(ns) == Some(paused))
        .cloned()
        .collect();
    replicas[paused].signal("STOP");
    // Longer than its Lease, with changes going on everywhere.
    let mut v = 100;
    let until = Instant::now() + LEASE + Duration::from_secs(3);
    while Instant::now() < until {
        for ns in &fleet.namespaces {
            change(&fleet, ns, &v.to_string()).await;
        }
        v += 1;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let survivors: Vec<&str> = ["r0", "r1", "r2"]
        .into_iter()
        .filter(|r| *r != paused)
        .collect();
    fleet
        .wait_members(&survivors, Duration::from_secs(10))
        .await;
    replicas[paused].signal("CONT");
    // More changes after it wakes up.
    for ns in &fleet.namespaces {
        change(&fleet, ns, &v.to_string()).await;
    }
    let h = configmap_hash(&[("v", &v.to_string())]);
    wait_for(
        "every workload on the last value",
        Duration::from_secs(60),
        || async {
            let seen = rollouts.snapshot();
            // Behind: namespace, its owner before the pause, and the last hashes it was rolled to.
            let behind: Vec<(&String, Option<&str>, Vec<&String>)> = fleet
                .namespaces
                .iter()
                .filter(|ns| seen.get(*ns).and_then(|x| x.last()) != Some(&h))
                .map(|ns| {
                    let rolled = seen.get(ns).map(|x| x.iter().rev().take(3).collect());
                    (ns, before.owner(ns), rolled.unwrap_or_default())
                })
                .collect();
            behind.is_empty().then_some(()).ok_or(format!(
                "{} of 24 not on {h} (paused: {paused}): {behind:?}",
                behind.len()
            ))
        },
    )
    .await;
    rollouts.assert_no_duplicate().await;
    // It noticed it had been dead and re-read the assignment before writing again.
    let logs = replicas[paused].logs();
    assert!(
        logs.contains("membership had expired"),
        "the paused replica did not notice it had been dead"
    );
    assert!(!lost.is_empty());
}

#[tokio::test]
async fn sharding_without_identity_exits_naming_what_is_missing() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kube-reloader"))
        .arg("--sharding")
        .env("KUBECONFIG", common::kubeconfig_path())
        .env_remove("POD_NAME")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("POD_NAME"));
}

/// libfaketime from Debian's `faketime` package: LD_PRELOADed, it shifts every clock the
/// process reads (wall and monotonic) by a fixed offset.
const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

/// A replica whose clocks read `offset` (e.g. "+30s") from the true time.
async fn skewed_replica(fleet: &Fleet, name: &str, offset: &str) -> Controller {
    assert!(
        std::path::Path::new(LIBFAKETIME).exists(),
        "{LIBFAKETIME} is missing: install Debian's faketime package (.ci/run does)"
    );
    fleet
        .replica_with_env(
            name,
            &["--reload-strategy=annotations"],
            &[("LD_PRELOAD", LIBFAKETIME), ("FAKETIME", offset)],
        )
        .await
}

/// Liveness is judged from renewals observed on each replica's own monotonic clock, so clocks
/// 30 s ahead and 30 s behind (each larger than the 4 s Lease) change nothing: all three replicas
/// stay members, no namespace is owned twice, every change reloads once, and a crashed replica
/// whose clock ran ahead is replaced within a Lease, not after its future `renewTime`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skewed_clocks_neither_kill_a_live_replica_nor_keep_a_dead_one() {
    let _serial = SERIAL.lock().await;
    let fleet = Fleet::new("shard-skew", 24).await;
    workloads(&fleet, 24).await;
    let rollouts = Rollouts::record(&fleet);
    let mut replicas = BTreeMap::new();
    replicas.insert("ahead", skewed_replica(&fleet, "ahead", "+30s").await);
    replicas.insert("behind", skewed_replica(&fleet, "behind", "-30s").await);
    replicas.insert(
        "true",
        fleet
            .replica("true", &["--reload-strategy=annotations"])
            .await,
    );
    let names = ["ahead", "behind", "true"];
    let assignment = fleet.wait_members(&names, Duration::from_secs(60)).await;
    let pairs: Vec<(&str, &Controller)> = names.iter().map(|n| (*n, &replicas[n])).collect();
    wait_owned_as(&fleet, &pairs, &assignment, Duration::from_secs(60)).await;

    // Three Lease durations with every replica live: membership must not flap and no namespace
    // may be owned twice.
    let hold = Instant::now();
    while hold.elapsed() < LEASE * 3 {
        let now = fleet.assignment().await.expect("an assignment");
        assert_eq!(
            now.members, assignment.members,
            "the membership changed although every replica kept renewing"
        );
        let mut counts = Vec::new();
        for (_, r) in &pairs {
            counts.push(owned(r).await);
        }
        assert_eq!(counts.iter().sum::<usize>(), 24, "owned counts {counts:?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    rollouts.change_everywhere_and_wait(&fleet, "1").await;

    // The replica whose clock runs ahead crashes: its last renewTime lies 30 s in the future.
    let orphaned: Vec<String> = fleet
        .namespaces
        .iter()
        .filter(|ns| assignment.owner(ns) == Some("ahead"))
        .cloned()
        .collect();
    assert!(!orphaned.is_empty(), "the split gave 'ahead' nothing");
    replicas.remove("ahead").unwrap().crash();
    let h2 = change_all(&fleet, &orphaned, "2").await;
    let crashed_at = Instant::now();
    rollouts
        .wait_rolled_to(
            "the crashed replica's namespaces reloaded",
            &orphaned,
            &h2,
            FAILOVER,
        )
        .await;
    eprintln!(
        "{} namespaces of the crashed replica served again after {:?}",
        orphaned.len(),
        crashed_at.elapsed()
    );
    rollouts.assert_no_duplicate().await;
}

/// A handover whose backfill LIST fails (real HTTP 500s from a proxy in front of the API server
/// for the replica taking over) is retried before the generation counts as synced: every
/// namespace it gained is fully indexed, so a change there afterwards reloads its workload.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_handover_list_is_retried_and_nothing_is_missed() {
    use common::fault_proxy::{FaultProxy, ListFault};
    let _serial = SERIAL.lock().await;
    let fleet = Fleet::new("shard-listfail", 12).await;
    workloads(&fleet, 12).await;
    let rollouts = Rollouts::record(&fleet);
    let r0 = fleet
        .replica("r0", &["--reload-strategy=annotations"])
        .await;
    fleet.wait_members(&["r0"], Duration::from_secs(60)).await;
    wait_owned(&[&r0], 12, Duration::from_secs(60)).await;

    let proxy = FaultProxy::start().await;
    // Only the handover's lists: the assignment watch lists its one ConfigMap by field selector,
    // and the start-up watches stream theirs from any version (`resourceVersion=0`), where the
    // backfill asks for the current state (no version).
    proxy.arm(ListFault {
        resource: "configmaps",
        spare: &["fieldSelector", "resourceVersion=0"],
        remaining: 4,
    });
    let kubeconfig = proxy.kubeconfig().to_str().unwrap().to_string();
    // The leader is paused while r1 starts, so r1 starts up owning nothing and gains its share
    // afterwards through a handover (otherwise its start-up watches may already see the new
    // assignment and index the share without any backfill LIST).
    r0.signal("STOP");
    let r1 = fleet
        .replica_with_env(
            "r1",
            &["--reload-strategy=annotations"],
            &[("KUBECONFIG", kubeconfig.as_str())],
        )
        .await;
    r0.signal("CONT");
    let assignment = fleet
        .wait_members(&["r0", "r1"], Duration::from_secs(60))
        .await;
    wait_owned_as(
        &fleet,
        &[("r0", &r0), ("r1", &r1)],
        &assignment,
        Duration::from_secs(60),
    )
    .await;
    assert!(
        proxy.failed() > 0,
        "the proxy failed no LIST: the handover did not list ConfigMaps through it"
    );
    let retried = r1
        .metric("kube_reloader_backfill_list_failures_total{resource=\"configmap\"}")
        .await
        .unwrap_or(0.0);
    assert!(retried >= 1.0, "no retried backfill list counted");

    rollouts.change_everywhere_and_wait(&fleet, "1").await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    for (ns, hashes) in rollouts.snapshot() {
        assert_eq!(hashes.len(), 1, "{ns}: rolled {hashes:?}");
    }
}

/// The size of the padding ConfigMap put in each namespace: the bytes a replica receives then
/// show which namespaces the API server sent it.
const PAD_BYTES: usize = 128 * 1024;

/// Writes (creates, or replaces the value of) ConfigMap `pad` of [`PAD_BYTES`] in every namespace.
async fn pad_everywhere(fleet: &Fleet, value: char) {
    let data = json!({"p": value.to_string().repeat(PAD_BYTES)});
    futures::stream::iter(fleet.namespaces.clone())
        .for_each_concurrent(16, |ns| {
            let data = data.clone();
            async move {
                let api: Api<k8s_openapi::api::core::v1::ConfigMap> =
                    Api::namespaced(fleet.client.clone(), &ns);
                let cm: k8s_openapi::api::core::v1::ConfigMap =
                    serde_json::from_value(json!({"metadata": {"name": "pad"}, "data": data}))
                        .unwrap();
                let pp = kube::api::PatchParams::apply("kube-reloader-test").force();
                api.patch("pad", &pp, &kube::api::Patch::Apply(&cm))
                    .await
                    .unwrap();
            }
        })
        .await;
}

async fn configmap_bytes(c: &Controller) -> f64 {
    c.metric("kube_reloader_api_received_bytes_total{resource=\"configmaps\"}")
        .await
        .unwrap_or(0.0)
}

async fn configmap_watches(c: &Controller) -> f64 {
    c.metric(
        "kube_reloader_api_requests_total{verb=\"WATCH\",resource=\"configmaps\",code=\"200\"}",
    )
    .await
    .unwrap_or(0.0)
}

/// The ConfigMap LIST requests a replica made.
async fn configmap_lists(c: &Controller) -> f64 {
    c.metric("kube_reloader_api_requests_total{verb=\"LIST\",resource=\"configmaps\",code=\"200\"}")
        .await
        .unwrap_or(0.0)
}

/// ConfigMap bytes each replica received while every namespace's padding was written once (the
/// watch events carry the objects), waiting until the one expected to get everything has.
async fn bytes_while_padding(fleet: &Fleet, replicas: &[&Controller], value: char) -> Vec<f64> {
    let mut before = Vec::new();
    for r in replicas {
        before.push(configmap_bytes(r).await);
    }
    pad_everywhere(fleet, value).await;
    // Events arrive within a moment; a few seconds leaves room for a loaded machine.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let mut delta = Vec::new();
    for (r, b) in replicas.iter().zip(before) {
        delta.push(configmap_bytes(r).await - b);
    }
    delta
}

/// Waits until the namespaces of earlier scenarios are gone: while they are deleted, their
/// ConfigMaps' deletion events would count in the bytes a replica receives.
async fn wait_earlier_fleets_gone() {
    let api: Api<Namespace> = Api::all(client().await);
    wait_for(
        "the namespaces of earlier scenarios to be deleted",
        Duration::from_secs(120),
        || async {
            let mut left = 0;
            for label in ["kr-shard-run", "kr-shard-home"] {
                left += api
                    .list_metadata(&ListParams::default().labels(label))
                    .await
                    .map_err(|e| e.to_string())?
                    .items
                    .len();
            }
            (left == 0).then_some(()).ok_or(format!("{left} left"))
        },
    )
    .await;
}

async fn server_side(c: &Controller) -> Option<f64> {
    c.metric("kube_reloader_shard_server_side").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_gate_on_each_replica_receives_its_share_and_a_handover_reopens_its_watches() {
    let _serial = SERIAL.lock().await;
    wait_earlier_fleets_gone().await;
    let fleet = Fleet::new("shard-server", 24).await;
    workloads(&fleet, 24).await;
    pad_everywhere(&fleet, 'a').await;
    let rollouts = Rollouts::record(&fleet);
    let annotations = "--reload-strategy=annotations";
    let r0 = fleet.replica("r0", &[annotations]).await;
    let r1 = fleet.replica("r1", &[annotations]).await;
    let off = fleet
        .replica("r2", &[annotations, "--server-side-sharding=off"])
        .await;
    let assignment = fleet
        .wait_members(&["r0", "r1", "r2"], Duration::from_secs(60))
        .await;
    let replicas = [("r0", &r0), ("r1", &r1), ("r2", &off)];
    wait_owned_as(&fleet, &replicas, &assignment, Duration::from_secs(60)).await;
    assert_eq!(
        server_side(&r0).await,
        Some(1.0),
        "auto, and the gate is on"
    );
    assert_eq!(server_side(&off).await, Some(0.0));

    let total = (fleet.namespaces.len() * PAD_BYTES) as f64;
    let bytes = bytes_while_padding(&fleet, &[&r0, &r1, &off], 'b').await;
    assert!(
        bytes[2] >= total,
        "off receives every namespace: {bytes:?} of {total}"
    );
    for (i, b) in bytes[..2].iter().enumerate() {
        assert!(
            *b < 0.6 * total,
            "r{i} owns about a third but received {b} of {total} bytes: {bytes:?}"
        );
    }

    // r2 leaves: r0 and r1 each gain namespaces, and their watches re-open with the new ranges.
    let watches_before = configmap_watches(&r0).await;
    let before = [configmap_lists(&r0).await, configmap_lists(&r1).await];
    let with_r2 = assignment;
    let _ = off.terminate();
    let assignment = fleet
        .wait_members(&["r0", "r1"], Duration::from_secs(60))
        .await;
    let replicas = [("r0", &r0), ("r1", &r1)];
    wait_owned_as(&fleet, &replicas, &assignment, Duration::from_secs(60)).await;
    // Two more ConfigMap watches on r0: its watch re-opened with the new selector, and the
    // backfill's list of the gained hash ranges, one streaming request (`sendInitialEvents`),
    // not a LIST per page. A watch is counted when its response comes back: ask until it is.
    wait_for(
        "r0's ConfigMap watch re-opened and its backfill streamed",
        Duration::from_secs(10),
        || async {
            let now = configmap_watches(&r0).await;
            (now >= watches_before + 2.0).then_some(()).ok_or(format!(
                "{now} watches, {watches_before} before the handover"
            ))
        },
    )
    .await;
    // So ConfigMap LISTs only for the catch-up of the member that left, at the version it had
    // acted up to (which a streaming list cannot ask for): one per gained namespace written
    // since that version at most, none per page. (Bytes say little here: the re-opened watches
    // also replay the gained namespaces' events since their last resourceVersion, among them
    // the padding just written.)
    let after = [configmap_lists(&r0).await, configmap_lists(&r1).await];
    let lists: Vec<f64> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
    let gained: Vec<f64> = ["r0", "r1"]
        .iter()
        .map(|me| {
            let from_r2 = fleet
                .namespaces
                .iter()
                .filter(|ns| with_r2.owner(ns) == Some("r2") && assignment.owner(ns) == Some(*me));
            from_r2.count() as f64
        })
        .collect();
    assert!(
        lists.iter().zip(&gained).all(|(n, g)| *n <= g.max(1.0)),
        "at most one catch-up ConfigMap list per namespace gained ({gained:?}): {lists:?}"
    );
    rollouts.change_everywhere_and_wait(&fleet, "1").await;
    rollouts.assert_no_duplicate().await;
    let bytes = bytes_while_padding(&fleet, &[&r0, &r1], 'c').await;
    for (i, b) in bytes.iter().enumerate() {
        assert!(
            *b < 0.8 * total,
            "r{i} owns about half but received {b} of {total} bytes: {bytes:?}"
        );
    }
    assert!(
        bytes.iter().sum::<f64>() >= total,
        "the two together got every namespace: {bytes:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_gate_replicas_filter_on_arrival_and_miss_nothing() {
    let _serial = SERIAL.lock().await;
    let gateless = common::gateless_kubeconfig_path();
    let gateless = gateless.to_str().unwrap();
    let fleet = Fleet::new("shard-gateless", 12).await;
    workloads(&fleet, 12).await;
    let rollouts = Rollouts::record(&fleet);
    let env = [("KUBECONFIG", gateless)];
    let annotations = "--reload-strategy=annotations";
    let r0 = fleet.replica_with_env("r0", &[annotations], &env).await;
    let r1 = fleet
        .replica_with_env("r1", &[annotations, "--server-side-sharding=on"], &env)
        .await;
    let assignment = fleet
        .wait_members(&["r0", "r1"], Duration::from_secs(60))
        .await;
    let replicas = [("r0", &r0), ("r1", &r1)];
    wait_owned_as(&fleet, &replicas, &assignment, Duration::from_secs(60)).await;
    assert_eq!(
        server_side(&r0).await,
        Some(0.0),
        "auto: the probe saw no shardInfo"
    );
    assert_eq!(server_side(&r1).await, Some(1.0), "on: sent even so");
    assert!(
        std::fs::read_to_string(&r1.log)
            .unwrap()
            .contains("did not apply the probe's shardSelector"),
        "on against a gateless server says so"
    );
    let total = (fleet.namespaces.len() * PAD_BYTES) as f64;
    let bytes = bytes_while_padding(&fleet, &[&r0, &r1], 'a').await;
    assert!(
        bytes.iter().all(|b| *b >= total),
        "the server ignores the selector: each replica receives everything: {bytes:?} of {total}"
    );
    rollouts.change_everywhere_and_wait(&fleet, "1").await;
    rollouts.assert_no_duplicate().await;
}
