//! The API server's own record of the controller's requests, by user agent: the local control
//! plane (hack/cluster.sh) gives the controller under test its own client certificate and
//! audit-logs that user only, at Metadata level (no bodies). `apiserver_request_total` has no
//! client label, so the audit log is where the API server says who asked for what.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::Path;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

/// The fields of an `audit.k8s.io/v1` Event this count needs.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Event {
    stage: String,
    verb: String,
    #[serde(default)]
    user_agent: String,
    #[serde(default)]
    object_ref: Option<ObjectRef>,
    #[serde(default)]
    response_status: Option<Status>,
    request_received_timestamp: String,
}

#[derive(Deserialize)]
struct ObjectRef {
    #[serde(default)]
    resource: String,
    #[serde(default)]
    subresource: String,
}

#[derive(Deserialize)]
struct Status {
    #[serde(default)]
    code: u16,
}

/// One user agent's requests: by `verb resource[/subresource]`, and by response code.
#[derive(Debug, Default, Clone, Serialize)]
pub struct AgentCounts {
    pub total: u64,
    pub requests: BTreeMap<String, u64>,
    pub codes: BTreeMap<u16, u64>,
}

/// User agent -> its requests.
pub type ByAgent = BTreeMap<String, AgentCounts>;

/// An RFC 3339 timestamp with microseconds, as the API server writes them (so that the
/// audit log's timestamps compare as strings).
pub fn timestamp(t: jiff::Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%S.%6fZ").to_string()
}

/// Counts the requests received in `[from, to)` (timestamps from [`timestamp`]). Each request
/// is counted once: a watch at its `ResponseStarted` event, anything else at `ResponseComplete`.
pub fn count(log: &Path, from: &str, to: &str) -> Result<ByAgent> {
    let file = std::fs::File::open(log)
        .with_context(|| format!("opening the audit log {}", log.display()))?;
    let mut out = ByAgent::new();
    for line in BufReader::new(file).lines() {
        let line = line.context("reading the audit log")?;
        let Ok(ev) = serde_json::from_str::<Event>(&line) else {
            continue;
        };
        add(&mut out, &ev, from, to);
    }
    Ok(out)
}

fn add(out: &mut ByAgent, ev: &Event, from: &str, to: &str) {
    let counted_stage = if ev.verb == "watch" {
        "ResponseStarted"
    } else {
        "ResponseComplete"
    };
    if ev.stage != counted_stage
        || ev.request_received_timestamp.as_str() < from
        || ev.request_received_timestamp.as_str() >= to
    {
        return;
    }
    let resource = match &ev.object_ref {
        Some(o) if !o.subresource.is_empty() => format!("{}/{}", o.resource, o.subresource),
        Some(o) => o.resource.clone(),
        None => "(non-resource)".into(),
    };
    let agent = out.entry(ev.user_agent.clone()).or_default();
    agent.total += 1;
    *agent
        .requests
        .entry(format!("{} {resource}", ev.verb))
        .or_default() += 1;
    if let Some(s) = &ev.response_status {
        *agent.codes.entry(s.code).or_default() += 1;
    }
}

/// Requests answered 429 (Too Many Requests), over every agent.
pub fn throttled(by_agent: &ByAgent) -> u64 {
    by_agent
        .values()
        .map(|a| a.codes.get(&429).copied().unwrap_or(0))
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(stage: &str, verb: &str, at: &str, code: u16) -> Event {
        serde_json::from_value(serde_json::json!({
            "kind": "Event", "level": "Metadata", "stage": stage, "verb": verb,
            "userAgent": "kube-reloader/0.1", "requestReceivedTimestamp": at,
            "objectRef": {"resource": "deployments", "namespace": "a", "name": "b"},
            "responseStatus": {"code": code}
        }))
        .unwrap()
    }

    #[test]
    fn counts_each_request_once_within_the_window() {
        let mut out = ByAgent::new();
        let inside = "2026-11-30T12:00:01.000000Z";
        for ev in [
            event("ResponseStarted", "watch", inside, 200),
            event("ResponseComplete", "watch", inside, 200),
            event("ResponseComplete", "patch", inside, 200),
            event("ResponseComplete", "patch", inside, 429),
            event(
                "ResponseComplete",
                "patch",
                "2026-11-30T11:59:59.999999Z",
                200,
            ),
            event(
                "ResponseComplete",
                "patch",
                "2026-11-30T12:00:02.000000Z",
                200,
            ),
        ] {
            add(
                &mut out,
                &ev,
                "2026-11-30T12:00:00.000000Z",
                "2026-11-30T12:00:02.000000Z",
            );
        }
        let a = &out["kube-reloader/0.1"];
        assert_eq!(a.total, 3);
        assert_eq!(a.requests["watch deployments"], 1);
        assert_eq!(a.requests["patch deployments"], 2);
        assert_eq!(throttled(&out), 1);
    }

    #[test]
    fn timestamps_compare_like_the_api_servers() {
        let t: jiff::Timestamp = "2026-11-30T12:00:01.5Z".parse().unwrap();
        assert_eq!(timestamp(t), "2026-11-30T12:00:01.500000Z");
    }
}
