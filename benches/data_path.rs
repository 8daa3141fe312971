//! The in-memory data path, stage by stage: digest (1 KiB and 1 MiB payloads), index update,
//! decision, and one config event fanning out to 1, 100 and 10k workloads up to the queue.

use std::collections::BTreeMap;
use std::hint::black_box;
use std::sync::Arc;

use clap::Parser;
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use serde_json::json;

use kube_reloader::config::{AnnotationKeys, Flags, Settings};
use kube_reloader::decide::{ConfigFacts, DecisionSwitches, WorkloadFacts, decide};
use kube_reloader::engine::{Engine, Phase};
use kube_reloader::index::{ConfigState, ReverseIndex, workload_entry};
use kube_reloader::model::{ConfigKey, ConfigKind, WorkloadKey, WorkloadKind};
use kube_reloader::reloader_format::hash::{ConfigPayload, digest_payload};
use kube_reloader::rollout::{
    QueuedChange, ReloadQueue, WorkloadWriter, WriteError, WriteOutcome, WriteTurn,
};
use kube_reloader::shard::Ownership;

fn secret(bytes: usize) -> ConfigPayload {
    let mut data = BTreeMap::new();
    data.insert("payload".to_string(), vec![b'x'; bytes]);
    data.insert("user".to_string(), b"admin".to_vec());
    ConfigPayload::Secret { data }
}

fn bench_digest(c: &mut Criterion) {
    let mut g = c.benchmark_group("digest");
    for (label, size) in [("1KiB", 1024), ("1MiB", 1 << 20)] {
        g.throughput(Throughput::Bytes(size as u64));
        g.bench_function(label, |b| {
            b.iter_batched(
                || secret(size),
                |p| black_box(digest_payload(p)),
                criterion::BatchSize::LargeInput,
            )
        });
    }
    g.finish();
}

fn deployment(i: usize, config: &str) -> serde_json::Value {
    json!({
        "metadata": {"name": format!("w{i}"), "namespace": "ns", "annotations": {"reloader.stakater.com/auto": "true"}},
        "spec": {"template": {"spec": {"containers": [{
            "name": "app", "envFrom": [{"configMapRef": {"name": config}}],
            "volumeMounts": [{"name": "s", "mountPath": "/s"}]
        }], "volumes": [{"name": "s", "secret": {"secretName": format!("s{i}")}}]}}}
    })
}

fn bench_index(c: &mut Criterion) {
    let keys = AnnotationKeys::default();
    let index = ReverseIndex::new();
    for i in 0..10_000 {
        index.apply_workload(
            workload_entry(WorkloadKind::Deployment, &deployment(i, "shared"), &keys).unwrap(),
        );
    }
    let obj = deployment(42, "other");
    c.bench_function("index/parse+update one workload (10k indexed)", |b| {
        b.iter(|| {
            let e = workload_entry(WorkloadKind::Deployment, black_box(&obj), &keys).unwrap();
            index.apply_workload(e);
        })
    });
    let entry = workload_entry(WorkloadKind::Deployment, &deployment(1, "shared"), &keys).unwrap();
    c.bench_function("decide/auto referenced", |b| {
        b.iter(|| {
            decide(
                ConfigFacts {
                    kind: ConfigKind::ConfigMap,
                    name: black_box("shared"),
                    ignore: false,
                    matched: false,
                },
                WorkloadFacts {
                    kind: WorkloadKind::Deployment,
                    policy: &entry.policy,
                    referenced: true,
                },
                DecisionSwitches::default(),
            )
        })
    });
}

/// Writes nothing: the bench measures the path up to the queue.
#[derive(Clone)]
struct NoWrite;

impl WorkloadWriter for NoWrite {
    async fn write(
        &self,
        _: &WorkloadKey,
        _: &[QueuedChange],
        _: &WriteTurn<'_>,
    ) -> Result<WriteOutcome, WriteError> {
        Ok(WriteOutcome::UpToDate)
    }
}

fn bench_fan_out(c: &mut Criterion) {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let _guard = runtime.enter();
    let mut g = c.benchmark_group("fan_out");
    for n in [1usize, 100, 10_000] {
        let settings = Arc::new(Settings::try_from(Flags::parse_from(["kube-reloader"])).unwrap());
        let index = Arc::new(ReverseIndex::new());
        for i in 0..n {
            index.apply_workload(
                workload_entry(
                    WorkloadKind::Deployment,
                    &deployment(i, "shared"),
                    &settings.keys,
                )
                .unwrap(),
            );
        }
        let queue = ReloadQueue::start(NoWrite, (), Default::default());
        let engine = Engine::new(index, settings, Arc::new(Ownership::default()), queue, ());
        let key = ConfigKey::new(ConfigKind::ConfigMap, "ns", "shared");
        let states: Vec<ConfigState> = (0..2)
            .map(|v| {
                let mut data = BTreeMap::new();
                data.insert("k".to_string(), format!("v{v}"));
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
            })
            .collect();
        engine.config_applied(key.clone(), states[0].clone(), Phase::Startup);
        let mut flip = 0;
        g.throughput(Throughput::Elements(n as u64));
        g.bench_with_input(BenchmarkId::from_parameter(n), &n, |b, _| {
            b.iter(|| {
                flip ^= 1;
                black_box(engine.config_applied(key.clone(), states[flip].clone(), Phase::Live))
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench_digest, bench_index, bench_fan_out);
criterion_main!(benches);
