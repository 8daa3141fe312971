//! What one config costs the controller on arrival, split by stage, to decide which waste is
//! worth removing (docs/performance.md, "Waste that was measured"): decoding the watch event's
//! JSON (paid even for an object dropped right after as unowned), and the digest, whose two
//! hashes (blake3 change detector + Reloader's SHA-1) are also timed apart. Shapes: a 1 KiB
//! ConfigMap (`kube-root-ca.crt` is ~1.1 KiB), a 16 KiB Secret (a small Helm release record)
//! and a 1 MiB Secret.
//!
//! And what one workload costs on arrival: a Deployment as kube-apiserver sends it after a few
//! rollouts (`fixtures/deployment.json`, 3.4 KiB: managedFields 1.9 KiB, status 0.5 KiB, pod
//! template 0.6 KiB), decoded as a `DynamicObject` with the template decoded again from its JSON
//! tree (the watches' former way, kept as the baseline) and as a [`WorkloadObject`] (theirs now).

use std::hint::black_box;

use base64::Engine as _;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use k8s_openapi::api::core::v1::Secret;
use sha1::Digest as _;

use k8s_openapi::api::core::v1::PodTemplateSpec;
use kube_reloader::config::AnnotationKeys;
use kube_reloader::digest::ConfigSource;
use kube_reloader::index::{WorkloadObject, workload_entry_from_object};
use kube_reloader::model::WorkloadKind;
use kube_reloader::reloader_format::hash::digest_payload;
use serde::Deserialize as _;

/// Pseudo-random bytes (incompressible, like a gzipped Helm release).
fn random_bytes(n: usize) -> Vec<u8> {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// A watch event's object as the API server sends it.
fn secret_json(size: usize) -> Vec<u8> {
    let data = base64::engine::general_purpose::STANDARD.encode(random_bytes(size));
    serde_json::to_vec(&serde_json::json!({
        "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
        "metadata": {
            "name": "sh.helm.release.v1.app.v3", "namespace": "team-a",
            "uid": "6f1c2b0e-8a51-4c1e-9d7e-0b7f1f0c2a11", "resourceVersion": "123456",
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "labels": {"owner": "helm", "name": "app", "status": "superseded", "version": "3"}
        },
        "data": {"release": data}
    }))
    .expect("serializable")
}

fn bench_config_cost(c: &mut Criterion) {
    for (label, size) in [("1KiB", 1 << 10), ("16KiB", 16 << 10), ("1MiB", 1 << 20)] {
        let mut g = c.benchmark_group(format!("config_cost/{label}"));
        g.throughput(Throughput::Bytes(size as u64));
        let json = secret_json(size);
        g.bench_function("decode watch event (JSON -> Secret)", |b| {
            b.iter(|| black_box(serde_json::from_slice::<Secret>(&json).expect("decodes")))
        });
        let secret: Secret = serde_json::from_slice(&json).expect("decodes");
        g.bench_function("digest (blake3 + SHA-1, today)", |b| {
            b.iter_batched(
                || secret.clone().into_payload(),
                |p| black_box(digest_payload(p)),
                criterion::BatchSize::LargeInput,
            )
        });
        let bytes = random_bytes(size);
        g.bench_function("blake3 alone", |b| {
            b.iter(|| black_box(blake3::hash(&bytes)))
        });
        g.bench_function("SHA-1 alone", |b| {
            b.iter(|| black_box(sha1::Sha1::digest(&bytes)))
        });
        g.finish();
    }
}

fn bench_workload_cost(c: &mut Criterion) {
    let json = include_bytes!("fixtures/deployment.json");
    let mut g = c.benchmark_group("workload_cost/deployment");
    g.throughput(Throughput::Bytes(json.len() as u64));
    g.bench_function(
        "DynamicObject, then the template from its tree (before)",
        |b| {
            b.iter(|| {
                let d: kube::api::DynamicObject = serde_json::from_slice(json).expect("decodes");
                let template = d.data.pointer("/spec/template").expect("a template");
                black_box(PodTemplateSpec::deserialize(template).expect("a pod template"))
            })
        },
    );
    g.bench_function(
        "WorkloadObject, then the template from its text (now)",
        |b| {
            b.iter(|| {
                let w: WorkloadObject = serde_json::from_slice(json).expect("decodes");
                let template = w
                    .pod_template_json(WorkloadKind::Deployment)
                    .expect("a template");
                black_box(
                    serde_json::from_str::<PodTemplateSpec>(template).expect("a pod template"),
                )
            })
        },
    );
    let keys = AnnotationKeys::default();
    g.bench_function("WorkloadObject to index entry (now, all of it)", |b| {
        b.iter(|| {
            let w: WorkloadObject = serde_json::from_slice(json).expect("decodes");
            black_box(
                workload_entry_from_object(WorkloadKind::Deployment, &w, &keys).expect("an entry"),
            )
        })
    });
    g.finish();
}

criterion_group!(benches, bench_config_cost, bench_workload_cost);
criterion_main!(benches);
