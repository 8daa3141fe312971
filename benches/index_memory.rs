//! Memory of the reverse index per workload, counted by a wrapping global allocator (bytes the
//! index holds, not RSS): the load test's population (each Deployment using its own ConfigMap
//! and Secret through envFrom, 10 workloads per namespace) at 10k and 100k workloads.
//!
//! `cargo bench --bench index_memory` prints live bytes per workload and per config; the large
//! load test's RSS (docs/performance.md) is this plus the process's fixed part and allocator
//! slack.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::json;

use kube_reloader::config::AnnotationKeys;
use kube_reloader::digest::{ConfigPayload, digest_payload};
use kube_reloader::index::{ConfigState, ReverseIndex, workload_entry};
use kube_reloader::model::{ConfigKey, ConfigKind, WorkloadKind};

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

fn deployment(i: usize) -> serde_json::Value {
    json!({
        "metadata": {
            "name": format!("w-{i}"), "namespace": namespace(i),
            "annotations": {"reloader.stakater.com/auto": "true"}
        },
        "spec": {"template": {"spec": {"containers": [{
            "name": "app", "image": "registry.k8s.io/pause:3.10",
            "envFrom": [
                {"configMapRef": {"name": format!("cm-{i}")}},
                {"secretRef": {"name": format!("sec-{i}")}}
            ]
        }]}}}
    })
}

fn state(i: usize) -> ConfigState {
    let mut data = std::collections::BTreeMap::new();
    data.insert("value".to_string(), format!("initial-{i}"));
    ConfigState {
        keys: Default::default(),
        digest: digest_payload(ConfigPayload::ConfigMap {
            data,
            binary_data: Default::default(),
        }),
        ignore: false,
        matched: false,
        resource_version: 1000 + i as u64,
    }
}

/// Live bytes of an index holding `n` workloads and their `2n` configs.
fn measure(n: usize) -> usize {
    let keys = AnnotationKeys::default();
    let before = LIVE.load(Ordering::Relaxed);
    let index = ReverseIndex::new();
    for i in 0..n {
        // Built and dropped one by one, as the watchers do: only what the index keeps stays.
        index.apply_workload(
            workload_entry(WorkloadKind::Deployment, &deployment(i), &keys).unwrap(),
        );
    }
    let workloads = LIVE.load(Ordering::Relaxed) - before;
    // As the config watch does it (interned namespace), after the workloads (the index then
    // reuses the workloads' copy of each name too; in the other order only the namespace).
    for i in 0..n {
        let ns = namespace(i);
        index.apply_config(
            ConfigKey::interned(ConfigKind::ConfigMap, &ns, &format!("cm-{i}")),
            state(i),
        );
        index.apply_config(
            ConfigKey::interned(ConfigKind::Secret, &ns, &format!("sec-{i}")),
            state(i),
        );
    }
    let held = LIVE.load(Ordering::Relaxed) - before;
    println!(
        "index_memory/{n}: workloads and their edges {:.0} bytes per workload, configs {:.0} bytes per config",
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
    for &n in sizes {
        let held = measure(n);
        println!(
            "index_memory/{n} workloads, {} configs: {:.1} MiB held, {:.0} bytes per workload (with its 2 configs)",
            2 * n,
            held as f64 / (1024.0 * 1024.0),
            held as f64 / n as f64
        );
    }
}
