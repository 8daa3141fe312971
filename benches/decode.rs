//! The wire format's share of start-up (issue 42): one object as kube-apiserver serves it, in
//! JSON (what the watches read today) and in protobuf (`application/vnd.kubernetes.protobuf`,
//! what Kubernetes' own controllers read), decoded up to what the index and the digest need.
//! The fixtures (`fixtures/wire/`, captured by `hack/wire-fixtures.sh` from the local control
//! plane: the same resourceVersion read once in each format) are a Deployment after creation
//! (managedFields, status) and a ConfigMap and a Secret of 10 keys of 1 KiB.
//!
//! - `deployment/json`: today's path, a [`WorkloadObject`] (metadata, the pod template kept as
//!   raw text) and the template parsed into a `PodTemplateSpec`.
//! - `deployment/protobuf-typed`: the envelope (`k8s\0` + `runtime.Unknown`) and k8s-pb's whole
//!   `Deployment`.
//! - `deployment/protobuf-slim`: the envelope and a message of the few fields the index reads
//!   (name, namespace, uid, resourceVersion, labels, annotations, `spec.paused`, the template);
//!   prost skips the rest (managedFields, status) without building it; then the template
//!   decoded as k8s-pb's `PodTemplateSpec`.
//! - `configmap|secret/json`: today's path, k8s-openapi's type and its payload.
//! - `configmap|secret/protobuf`: the envelope and k8s-pb's type, then the same payload (a
//!   Secret's data arrive as bytes: no base64 to undo).

use std::collections::BTreeMap;
use std::hint::black_box;

use bytes::Bytes;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use k8s_openapi::api::core::v1::{ConfigMap, PodTemplateSpec, Secret};
use prost::Message;

use kube_reloader::digest::ConfigSource;
use kube_reloader::index::WorkloadObject;
use kube_reloader::model::WorkloadKind;
use kube_reloader::reloader_format::hash::{ConfigPayload, digest_payload};

/// The four bytes kube-apiserver puts before a protobuf `runtime.Unknown`.
const MAGIC: &[u8] = b"k8s\0";

/// The object's own bytes, out of the envelope.
fn raw_of(wire: &Bytes) -> Bytes {
    assert_eq!(&wire[..4], MAGIC, "not a Kubernetes protobuf envelope");
    let unknown =
        k8s_pb::apimachinery::pkg::runtime::Unknown::decode(wire.slice(4..)).expect("an envelope");
    Bytes::from(unknown.raw.expect("an object"))
}

/// `ObjectMeta` as the index reads it (tags from k8s.io/apimachinery's generated.proto).
#[derive(Clone, PartialEq, Message)]
struct SlimMeta {
    #[prost(string, optional, tag = "1")]
    name: Option<String>,
    #[prost(string, optional, tag = "3")]
    namespace: Option<String>,
    #[prost(string, optional, tag = "5")]
    uid: Option<String>,
    #[prost(string, optional, tag = "6")]
    resource_version: Option<String>,
    #[prost(btree_map = "string, string", tag = "11")]
    labels: BTreeMap<String, String>,
    #[prost(btree_map = "string, string", tag = "12")]
    annotations: BTreeMap<String, String>,
}

#[derive(Clone, PartialEq, Message)]
struct SlimDeploymentSpec {
    /// The template's bytes, decoded only where the index reads them.
    #[prost(bytes = "bytes", optional, tag = "3")]
    template: Option<Bytes>,
    #[prost(bool, optional, tag = "7")]
    paused: Option<bool>,
}

#[derive(Clone, PartialEq, Message)]
struct SlimDeployment {
    #[prost(message, optional, tag = "1")]
    metadata: Option<SlimMeta>,
    #[prost(message, optional, tag = "2")]
    spec: Option<SlimDeploymentSpec>,
}

fn json_deployment(json: &[u8]) -> (WorkloadObject, PodTemplateSpec) {
    let object: WorkloadObject = serde_json::from_slice(json).expect("a Deployment");
    let template = object
        .pod_template_json(WorkloadKind::Deployment)
        .map(|t| serde_json::from_str::<PodTemplateSpec>(t).expect("a template"))
        .unwrap_or_default();
    (object, template)
}

fn slim_deployment(wire: &Bytes) -> (SlimDeployment, k8s_pb::api::core::v1::PodTemplateSpec) {
    let object = SlimDeployment::decode(raw_of(wire)).expect("a Deployment");
    let template = object
        .spec
        .as_ref()
        .and_then(|s| s.template.clone())
        .map(|t| k8s_pb::api::core::v1::PodTemplateSpec::decode(t).expect("a template"))
        .unwrap_or_default();
    (object, template)
}

fn configmap_payload_pb(wire: &Bytes) -> ConfigPayload {
    let cm = k8s_pb::api::core::v1::ConfigMap::decode(raw_of(wire)).expect("a ConfigMap");
    ConfigPayload::ConfigMap {
        data: cm.data,
        binary_data: cm.binary_data,
    }
}

fn secret_payload_pb(wire: &Bytes) -> ConfigPayload {
    let secret = k8s_pb::api::core::v1::Secret::decode(raw_of(wire)).expect("a Secret");
    let mut data = secret.data;
    for (k, v) in secret.string_data {
        data.insert(k, v.into_bytes());
    }
    ConfigPayload::Secret { data }
}

fn fixture(name: &str) -> Vec<u8> {
    let path = format!(
        "{}/benches/fixtures/wire/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Both formats carry the same object: the bench compares decoders, not inputs.
fn check_fixtures_agree(deployment: (&[u8], &Bytes), configs: [(&[u8], &Bytes); 2]) {
    let (json, _) = json_deployment(deployment.0);
    let (slim, template) = slim_deployment(deployment.1);
    let meta = slim.metadata.expect("metadata");
    assert_eq!(json.metadata.name, meta.name);
    assert_eq!(json.metadata.resource_version, meta.resource_version);
    assert_eq!(
        json.metadata.annotations.unwrap_or_default(),
        meta.annotations
    );
    let containers = template.spec.expect("a pod spec").containers;
    assert!(!containers.is_empty());
    // The same digest (Reloader's SHA-1 and the change detector) from either format.
    let cm: ConfigMap = serde_json::from_slice(configs[0].0).expect("a ConfigMap");
    let same =
        digest_payload(cm.into_payload()) == digest_payload(configmap_payload_pb(configs[0].1));
    assert!(
        same,
        "the ConfigMap's digest differs between JSON and protobuf"
    );
    let secret: Secret = serde_json::from_slice(configs[1].0).expect("a Secret");
    let same =
        digest_payload(secret.into_payload()) == digest_payload(secret_payload_pb(configs[1].1));
    assert!(
        same,
        "the Secret's digest differs between JSON and protobuf"
    );
}

fn bench_decode(c: &mut Criterion) {
    let deployment_json = fixture("deployment.json");
    let deployment_pb = Bytes::from(fixture("deployment.pb"));
    let configmap = (
        fixture("configmap.json"),
        Bytes::from(fixture("configmap.pb")),
    );
    let secret = (fixture("secret.json"), Bytes::from(fixture("secret.pb")));
    check_fixtures_agree(
        (&deployment_json, &deployment_pb),
        [(&configmap.0, &configmap.1), (&secret.0, &secret.1)],
    );

    let mut g = c.benchmark_group("decode/deployment");
    g.throughput(Throughput::Elements(1));
    g.bench_function("json", |b| {
        b.iter(|| json_deployment(black_box(&deployment_json)))
    });
    g.bench_function("protobuf-typed", |b| {
        b.iter(|| k8s_pb::api::apps::v1::Deployment::decode(raw_of(black_box(&deployment_pb))))
    });
    g.bench_function("protobuf-slim", |b| {
        b.iter(|| slim_deployment(black_box(&deployment_pb)))
    });
    g.finish();

    bench_config::<ConfigMap>(c, "configmap", &configmap, configmap_payload_pb);
    bench_config::<Secret>(c, "secret", &secret, secret_payload_pb);
}

/// One config kind: today's JSON path (k8s-openapi's type, then its payload) against protobuf.
fn bench_config<K: ConfigSource>(
    c: &mut Criterion,
    name: &str,
    (json, pb): &(Vec<u8>, Bytes),
    from_pb: fn(&Bytes) -> ConfigPayload,
) {
    let mut g = c.benchmark_group(format!("decode/{name}"));
    g.throughput(Throughput::Elements(1));
    g.bench_function("json", |b| {
        b.iter(|| {
            serde_json::from_slice::<K>(black_box(json))
                .expect("a config")
                .into_payload()
        })
    });
    g.bench_function("protobuf", |b| b.iter(|| from_pb(black_box(pb))));
    g.finish();
}

criterion_group!(benches, bench_decode);
criterion_main!(benches);
