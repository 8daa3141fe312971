//! Memory of the reverse index per workload, counted by a wrapping global allocator (bytes the
//! index holds, not RSS): the load test's population (each Deployment using its own ConfigMap
//! and Secret through envFrom, 10 workloads per namespace) at 10k and 100k workloads; and the
//! same with each Deployment reading two keys of each config through key refs, with
//! `--precise-keys` off and on (per-key digests of 4-key configs kept).
//!
//! `cargo bench --bench index_memory` prints live bytes per workload and per config; the large
//! load test's RSS (docs/performance.md) is this plus the process's fixed part and allocator
//! slack.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::json;

use kube_reloader::config::AnnotationKeys;
use kube_reloader::index::{ConfigState, ReverseIndex, workload_entry};
use kube_reloader::model::{ConfigKey, ConfigKind, WorkloadKind};
use kube_reloader::reloader_format::hash::{ConfigPayload, digest_payload};
use kube_reloader::reloader_format::precise::KeyDigests;
use kube_reloader::reloader_format::precise::key_digests;

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(new_size, Ordering::Relaxed);
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

fn namespace(i: usize) -> String {
    format!("krlt-abcdef-{:05}", i / 10)
}

/// How the population's Deployments read their configs, and whether per-key digests are kept.
#[derive(Clone, Copy)]
struct Population {
    name: &'static str,
    key_refs: bool,
    precise_keys: bool,
}

const POPULATIONS: [Population; 3] = [
    Population {
        name: "envFrom, --precise-keys=off",
        key_refs: false,
        precise_keys: false,
    },
    Population {
        name: "key refs, --precise-keys=off",
        key_refs: true,
        precise_keys: false,
    },
    Population {
        name: "key refs, --precise-keys=all",
        key_refs: true,
        precise_keys: true,
    },
];

fn container(i: usize, key_refs: bool) -> serde_json::Value {
    if !key_refs {
        return json!({"envFrom": [
            {"configMapRef": {"name": format!("cm-{i}")}},
            {"secretRef": {"name": format!("sec-{i}")}}
        ]});
    }
    let cm = |key: &str| json!({"name": key.to_uppercase(), "valueFrom": {"configMapKeyRef": {"name": format!("cm-{i}"), "key": key}}});
    let sec = |key: &str| json!({"name": key.to_uppercase(), "valueFrom": {"secretKeyRef": {"name": format!("sec-{i}"), "key": key}}});
    json!({"env": [cm("url"), cm("timeout"), sec("user"), sec("password")]})
}

fn deployment(i: usize, key_refs: bool) -> serde_json::Value {
    let mut app = container(i, key_refs);
    app["name"] = json!("app");
    app["image"] = json!("registry.k8s.io/pause:3.10");
    json!({
        "metadata": {
            "name": format!("w-{i}"), "namespace": namespace(i),
            "annotations": {"reloader.stakater.com/auto": "true"}
        },
        "spec": {"template": {"spec": {"containers": [app]}}}
    })
}

fn state(i: usize, precise_keys: bool) -> ConfigState {
    let data: std::collections::BTreeMap<String, String> = ["url", "timeout", "user", "password"]
        .iter()
        .map(|k| (k.to_string(), format!("{k}-{i}")))
        .collect();
    let payload = ConfigPayload::ConfigMap {
        data,
        binary_data: Default::default(),
    };
    let keys = match precise_keys {
        true => key_digests(&payload),
        false => KeyDigests::default(),
    };
    ConfigState {
        keys,
        digest: digest_payload(payload),
        ignore: false,
        matched: false,
        resource_version: 1000 + i as u64,
        waves: None,
    }
}

/// Live bytes of an index holding `n` workloads and their `2n` configs.
fn measure(n: usize, population: Population) -> usize {
    let keys = AnnotationKeys::default();
    let before = LIVE.load(Ordering::Relaxed);
    let index = ReverseIndex::new();
    for i in 0..n {
        // Built and dropped one by one, as the watchers do: only what the index keeps stays.
        let object = deployment(i, population.key_refs);
        index.apply_workload(workload_entry(WorkloadKind::Deployment, &object, &keys).unwrap());
    }
    let workloads = LIVE.load(Ordering::Relaxed) - before;
    // As the config watch does it (interned namespace), after the workloads (the index then
    // reuses the workloads' copy of each name too; in the other order only the namespace).
    for i in 0..n {
        let ns = namespace(i);
        for (kind, name) in [
            (ConfigKind::ConfigMap, format!("cm-{i}")),
            (ConfigKind::Secret, format!("sec-{i}")),
        ] {
            let key = ConfigKey::interned(kind, &ns, &name);
            index.apply_config(key, state(i, population.precise_keys));
        }
    }
    let held = LIVE.load(Ordering::Relaxed) - before;
    // A config's entry is made with its first user's edge: what the configs add after the
    // workloads is their states only.
    println!(
        "index_memory/{n} ({}): workloads and their edges {:.0} bytes per workload, config states {:.0} bytes per config",
        population.name,
        workloads as f64 / n as f64,
        (held - workloads) as f64 / (2 * n) as f64
    );
    let sizes = index.sizes();
    assert_eq!(
        (sizes.workloads, sizes.configs, sizes.edges),
        (n, 2 * n, 2 * n)
    );
    drop(index);
    held
}

fn main() {
    // `cargo test --benches` runs this too: keep it short there.
    let sizes: &[usize] = if std::env::args().any(|a| a == "--bench") {
        &[10_000, 100_000]
    } else {
        &[1_000]
    };
    for (&n, population) in sizes
        .iter()
        .flat_map(|n| POPULATIONS.iter().map(move |p| (n, *p)))
    {
        let held = measure(n, population);
        println!(
            "index_memory/{n} workloads, {} configs ({}): {:.1} MiB held, {:.0} bytes per workload (with its 2 configs)",
            2 * n,
            population.name,
            held as f64 / (1024.0 * 1024.0),
            held as f64 / n as f64
        );
    }
}
