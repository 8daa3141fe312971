//! The wire format's share of start-up (issue 42): one object as kube-apiserver serves it, in
//! JSON and in protobuf (`application/vnd.kubernetes.protobuf`), decoded by the controller's
//! own code up to what the index and the digest keep. The fixtures (`fixtures/wire/`, captured
//! by `hack/wire-fixtures.sh` from the local control plane: the same resourceVersion read once
//! in each format; `src/protobuf/tests.rs` checks both give the same entry and digest) are a
//! Deployment after creation (managedFields, status), a Deployment using configs in every way
//! the index reads (`references`), and a ConfigMap and a Secret of 10 keys of 1 KiB.
//!
//! - `<deployment>/json`: the JSON path, a [`WorkloadObject`] (the template kept as raw text),
//!   then the index entry (the template parsed once).
//! - `<deployment>/protobuf`: `kube_reloader::protobuf::workload` (prost skips managedFields,
//!   status and the rest of the spec; the template to the part the index reads), then the entry.
//! - `configmap|secret/json` and `/protobuf`: the object, then its payload for the digest (a
//!   Secret's data arrive as bytes in protobuf: no base64 to undo).

use std::hint::black_box;

use bytes::Bytes;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};

use kube_reloader::config::AnnotationKeys;
use kube_reloader::digest::ConfigSource;
use kube_reloader::index::{WorkloadObject, workload_entry_from_object};
use kube_reloader::model::WorkloadKind;
use kube_reloader::protobuf::{self, FromProtobuf};

fn fixture(name: &str) -> Vec<u8> {
    let path = format!(
        "{}/benches/fixtures/wire/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The object's bytes as a list page or a watch event hands them on (no envelope).
fn object_of(name: &str) -> Bytes {
    protobuf::unwrap(Bytes::from(fixture(name))).expect("a protobuf envelope")
}

fn bench_deployment(c: &mut Criterion, name: &str) {
    let keys = AnnotationKeys::default();
    let json = fixture(&format!("{name}.json"));
    let pb = object_of(&format!("{name}.pb"));
    let kind = WorkloadKind::Deployment;
    let mut g = c.benchmark_group(format!("decode/{name}"));
    g.throughput(Throughput::Elements(1));
    g.bench_function("json", |b| {
        b.iter(|| {
            let object: WorkloadObject = serde_json::from_slice(black_box(&json)).unwrap();
            workload_entry_from_object(kind, &object, &keys).unwrap()
        })
    });
    g.bench_function("protobuf", |b| {
        b.iter(|| {
            let object = protobuf::workload(kind, black_box(pb.clone())).unwrap();
            workload_entry_from_object(kind, &object, &keys).unwrap()
        })
    });
    g.finish();
}

/// One config kind: k8s-openapi's type from JSON, or from protobuf, then its payload.
fn bench_config<K: ConfigSource + FromProtobuf>(c: &mut Criterion, name: &str) {
    let json = fixture(&format!("{name}.json"));
    let pb = object_of(&format!("{name}.pb"));
    let mut g = c.benchmark_group(format!("decode/{name}"));
    g.throughput(Throughput::Elements(1));
    g.bench_function("json", |b| {
        b.iter(|| {
            serde_json::from_slice::<K>(black_box(&json))
                .unwrap()
                .into_payload()
        })
    });
    g.bench_function("protobuf", |b| {
        b.iter(|| {
            K::from_protobuf(black_box(pb.clone()))
                .unwrap()
                .into_payload()
        })
    });
    g.finish();
}

fn bench_decode(c: &mut Criterion) {
    bench_deployment(c, "deployment");
    bench_deployment(c, "references");
    bench_config::<ConfigMap>(c, "configmap");
    bench_config::<Secret>(c, "secret");
}

criterion_group!(benches, bench_decode);
criterion_main!(benches);
