//! The `sharded` scenario: the controller runs as N replicas with `--sharding`, each a process of
//! its own (`POD_NAME=<run id>-r<i>`, `POD_NAMESPACE=` a namespace of the run that holds the
//! Leases and the assignment ConfigMap, outside the namespace selector). Ready when every replica
//! answers /ready, the assignment lists every replica and the replicas' owned namespaces add up to
//! the run's namespaces; then changes are driven as in `steady`.

use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::Client;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

use crate::controller::http_get;
use crate::objects::{OwnRequests, RUN_LABEL};
use crate::report::{self, Resources};

/// kube-reloader's assignment ConfigMap (src/shard/coordinator.rs).
pub const ASSIGNMENT_CONFIGMAP: &str = "kube-reloader-shard-assignment";
const OWNED_METRIC: &str = "kube_reloader_owned_namespaces";
/// Response bytes a replica received from the API server (all resources).
const RECEIVED_METRIC: &str = "kube_reloader_api_received_bytes_total";
/// 1 when the API server shards the replica's lists and watches (`--server-side-sharding`).
const SERVER_SIDE_METRIC: &str = "kube_reloader_shard_server_side";

/// The label value of the Lease namespace: `<run id>-leases`, so the controller's selector
/// (`<run id>`) does not pick it, while `--cleanup` (the label's presence) and the run's cleanup
/// (`in (<run id>, <run id>-leases)`) do.
pub fn lease_label_value(run_id: &str) -> String {
    format!("{run_id}-leases")
}

pub fn replica_name(run_id: &str, i: usize) -> String {
    format!("{run_id}-r{i}")
}

/// Creates the namespace for the Leases and the assignment; returns its name.
pub async fn create_lease_namespace(
    client: &Client,
    run_id: &str,
    own: &OwnRequests,
) -> Result<String> {
    let name = format!("krlt-{run_id}-leases");
    let ns: Namespace = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {RUN_LABEL: lease_label_value(run_id)}}
    }))?;
    own.add("create", "namespaces");
    let api: Api<Namespace> = Api::all(client.clone());
    let pp = PostParams::default();
    crate::objects::with_retry(&format!("creating namespace {name}"), || {
        api.create(&pp, &ns)
    })
    .await?;
    Ok(name)
}

/// Sum of the samples of `name` whose label set contains every `labels` pair (`k="v"`), from a
/// Prometheus/OpenMetrics text exposition; None when there is no such sample.
pub fn metric_sum(text: &str, name: &str, labels: &[&str]) -> Option<f64> {
    let mut found = None;
    for line in text.lines() {
        let Some(rest) = line.strip_prefix(name) else {
            continue;
        };
        let (label_set, value) = match rest.strip_prefix('{') {
            Some(r) => match r.split_once('}') {
                Some((l, v)) => (l, v),
                None => continue,
            },
            None if rest.starts_with(' ') => ("", rest),
            None => continue,
        };
        if !labels.iter().all(|l| label_set.split(',').any(|x| x == *l)) {
            continue;
        }
        if let Some(v) = value
            .split_whitespace()
            .next()
            .and_then(|v| v.parse::<f64>().ok())
        {
            *found.get_or_insert(0.0) += v;
        }
    }
    found
}

/// MiB a replica received from the API server, from its /metrics.
pub fn received_mib_of(metrics_text: &str) -> Option<f64> {
    metric_sum(metrics_text, RECEIVED_METRIC, &[]).map(|b| report::round(b / 1048576.0))
}

/// Owned namespaces reported by a replica's /metrics.
pub fn owned_namespaces(metrics_text: &str) -> Option<u64> {
    metric_sum(metrics_text, OWNED_METRIC, &[]).map(|v| v as u64)
}

async fn get_text(url: &str) -> Option<(u16, String)> {
    let u = url.to_string();
    tokio::task::spawn_blocking(move || http_get(&u))
        .await
        .ok()
        .flatten()
}

#[derive(serde::Deserialize)]
struct Assignment {
    generation: u64,
    members: Vec<String>,
}

async fn read_assignment(client: &Client, namespace: &str) -> Option<Assignment> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let cm = api.get_opt(ASSIGNMENT_CONFIGMAP).await.ok()??;
    serde_json::from_str(cm.data?.get("assignment")?).ok()
}

/// What the replicas agreed on when the run became ready.
pub struct Converged {
    /// Seconds from the first replica's start until every condition held.
    pub after_s: f64,
    pub generation: u64,
    pub owned: Vec<u64>,
    /// MiB each replica had received from the API server then.
    pub received_mib: Vec<Option<f64>>,
    /// Whether the API server shards each replica's watches.
    pub server_side: Vec<Option<bool>>,
}

/// The replicas of a run, by index.
pub struct Replicas<'a> {
    /// POD_NAMESPACE: where the Leases and the assignment live.
    pub lease_ns: &'a str,
    /// POD_NAME of each.
    pub names: &'a [String],
    pub ready_urls: &'a [String],
    pub metrics_urls: &'a [String],
}

/// Waits until every replica answers /ready, the assignment lists every member and the owned
/// namespaces of all replicas add up to `namespaces`.
pub async fn wait_converged(
    client: &Client,
    r: &Replicas<'_>,
    namespaces: usize,
    timeout: Duration,
    started: Instant,
) -> Result<Converged> {
    let (members, ready_urls, metrics_urls) = (r.names, r.ready_urls, r.metrics_urls);
    let mut last_log = Instant::now();
    loop {
        let mut why = String::new();
        let mut ready = 0;
        for u in ready_urls {
            if u == "none" || get_text(u).await.is_some_and(|(c, _)| c == 200) {
                ready += 1;
            }
        }
        if ready < ready_urls.len() {
            why = format!("{ready}/{} replicas ready", ready_urls.len());
        }
        let assignment = read_assignment(client, r.lease_ns).await;
        let listed = assignment.as_ref().map_or(0, |a| {
            members.iter().filter(|m| a.members.contains(m)).count()
        });
        if why.is_empty() && listed < members.len() {
            why = format!(
                "the assignment lists {listed}/{} replicas (generation {})",
                members.len(),
                assignment.as_ref().map_or(0, |a| a.generation)
            );
        }
        let (mut owned, mut received_mib, mut server_side) = (Vec::new(), Vec::new(), Vec::new());
        for u in metrics_urls {
            let text = get_text(u).await.filter(|(c, _)| *c == 200).map(|(_, t)| t);
            let text = text.as_deref();
            owned.push(text.and_then(owned_namespaces).unwrap_or(0));
            received_mib.push(text.and_then(received_mib_of));
            server_side.push(
                text.and_then(|t| metric_sum(t, SERVER_SIDE_METRIC, &[]))
                    .map(|v| v > 0.0),
            );
        }
        let sum: u64 = owned.iter().sum();
        if why.is_empty() && sum != namespaces as u64 {
            why = format!("owned namespaces {owned:?} add up to {sum}, not {namespaces}");
        }
        if why.is_empty() {
            return Ok(Converged {
                after_s: started.elapsed().as_secs_f64(),
                generation: assignment.map_or(0, |a| a.generation),
                owned,
                received_mib,
                server_side,
            });
        }
        if started.elapsed() > timeout {
            bail!("the replicas did not converge within {timeout:?}: {why}");
        }
        if last_log.elapsed() > Duration::from_secs(5) {
            crate::progress::log(&format!("  waiting for the replicas: {why}"));
            last_log = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Per-replica figures and their totals.
pub fn report(
    names: &[String],
    resources: &[Resources],
    converged: &Converged,
    owned_end: &[Option<u64>],
    received_end_mib: &[Option<f64>],
    namespaces: usize,
) -> Value {
    let replicas: Vec<Value> = names
        .iter()
        .enumerate()
        .map(|(i, n)| {
            json!({
                "name": n,
                "owned_namespaces_at_ready": converged.owned.get(i),
                "owned_namespaces_at_end": owned_end.get(i).copied().flatten(),
                "server_side_sharding": converged.server_side.get(i).copied().flatten(),
                "received_mib_at_ready": converged.received_mib.get(i).copied().flatten(),
                "received_mib_at_end": received_end_mib.get(i).copied().flatten(),
                "resources": resources.get(i),
            })
        })
        .collect();
    let end: Option<u64> = owned_end.iter().copied().sum();
    json!({
        "replicas": replicas,
        "namespaces": namespaces,
        "converged_after_s": report::round(converged.after_s),
        "assignment_generation": converged.generation,
        "owned_namespaces_sum_at_end": end,
        "totals": totals(resources),
    })
}

/// Sums over the replicas (peak: the sum of each replica's peak).
pub fn totals(resources: &[Resources]) -> Resources {
    let sum =
        |f: fn(&Resources) -> f64| (resources.iter().map(f).sum::<f64>() * 100.0).round() / 100.0;
    Resources {
        time_to_ready_s: resources
            .iter()
            .filter_map(|r| r.time_to_ready_s)
            .reduce(f64::max),
        rss_at_ready_mib: sum(|r| r.rss_at_ready_mib),
        rss_steady_mib: sum(|r| r.rss_steady_mib),
        rss_end_mib: sum(|r| r.rss_end_mib),
        rss_peak_mib: sum(|r| r.rss_peak_mib),
        cpu_s_to_ready: sum(|r| r.cpu_s_to_ready),
        cpu_s_change_phase: sum(|r| r.cpu_s_change_phase),
        cpu_s_total: sum(|r| r.cpu_s_total),
        samples: resources.iter().map(|r| r.samples).sum(),
    }
}

/// Markdown rows (key, value) for the per-replica figures.
pub fn markdown_rows(r: &Value) -> Vec<(String, String)> {
    let s = &r["sharding"];
    let mut rows = vec![(
        "replicas".to_string(),
        format!(
            "{} (converged after {} s: every /ready 200, assignment generation {} lists all, owned namespaces add up to {}; at the end {})",
            s["replicas"].as_array().map_or(0, Vec::len),
            s["converged_after_s"],
            s["assignment_generation"],
            s["namespaces"],
            s["owned_namespaces_sum_at_end"],
        ),
    )];
    for rep in s["replicas"].as_array().into_iter().flatten() {
        let res = &rep["resources"];
        rows.push((
            format!("  {}", rep["name"].as_str().unwrap_or("")),
            format!(
                "owns {} namespaces ({} at the end) · server-side sharding {} · received {} MiB by ready, {} MiB in all · RSS at ready {} MiB · steady {} MiB · peak {} MiB · CPU-s to ready {} · change phase {} · total {}",
                rep["owned_namespaces_at_ready"],
                rep["owned_namespaces_at_end"],
                rep["server_side_sharding"],
                rep["received_mib_at_ready"],
                rep["received_mib_at_end"],
                res["rss_at_ready_mib"],
                res["rss_steady_mib"],
                res["rss_peak_mib"],
                res["cpu_s_to_ready"],
                res["cpu_s_change_phase"],
                res["cpu_s_total"],
            ),
        ));
    }
    let t = &s["totals"];
    rows.push((
        "  all replicas".into(),
        format!(
            "RSS at ready {} MiB · steady {} MiB · peak {} MiB · CPU-s total {}",
            t["rss_at_ready_mib"], t["rss_steady_mib"], t["rss_peak_mib"], t["cpu_s_total"]
        ),
    ));
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_text() {
        let t = "# HELP kube_reloader_owned_namespaces x\n# TYPE kube_reloader_owned_namespaces gauge\nkube_reloader_owned_namespaces 7\nkube_reloader_owned_namespaces_other 3\nreloader_errors_total{type=\"conflict\"} 2\nreloader_errors_total{type=\"permanent\"} 1\n# EOF\n";
        assert_eq!(owned_namespaces(t), Some(7));
        assert_eq!(
            metric_sum(t, "reloader_errors_total", &["type=\"permanent\""]),
            Some(1.0)
        );
        assert_eq!(metric_sum(t, "reloader_errors_total", &[]), Some(3.0));
        assert_eq!(metric_sum(t, "nothing", &[]), None);
    }
}
