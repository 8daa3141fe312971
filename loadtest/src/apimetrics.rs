//! The API server's own count of requests (`apiserver_request_total`), by verb and resource.
//! Cluster-wide: it includes the load generator, kube-controller-manager and anybody else using
//! the cluster, so it is a cross-check of the proxy's count, not the figure itself.

use std::collections::BTreeMap;

use anyhow::{Context, Result};

use crate::proxy::Counts;

/// Scrapes `/metrics` and sums `apiserver_request_total` over codes, keyed by the lower-case verb
/// (with WATCH/LIST/GET as the server names them) and `resource[/subresource]`.
pub async fn scrape(client: &kube::Client) -> Result<Counts> {
    let req = axum::http::Request::get("/metrics")
        .body(Vec::new())
        .expect("valid request");
    let text = client
        .request_text(req)
        .await
        .context("scraping the API server's /metrics")?;
    Ok(parse(&text))
}

pub fn parse(text: &str) -> Counts {
    let mut out = Counts::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("apiserver_request_total{") else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once("} ") else {
            continue;
        };
        let Ok(value) = value.trim().parse::<f64>() else {
            continue;
        };
        let labels = parse_labels(labels);
        let get = |k: &str| labels.get(k).map(String::as_str).unwrap_or("");
        let mut resource = get("resource").to_string();
        if resource.is_empty() {
            continue;
        }
        if !get("subresource").is_empty() {
            resource = format!("{resource}/{}", get("subresource"));
        }
        // The proxy's names (Kubernetes' RBAC verbs) for the server's HTTP-ish ones.
        let verb = match get("verb") {
            "POST" => "create".to_string(),
            "PUT" => "update".to_string(),
            v => v.to_lowercase(),
        };
        *out.entry((verb, resource)).or_default() += value as u64;
    }
    out
}

fn parse_labels(s: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut rest = s;
    while let Some((k, after)) = rest.split_once("=\"") {
        let mut value = String::new();
        let mut chars = after.char_indices();
        let mut end = after.len();
        while let Some((i, ch)) = chars.next() {
            match ch {
                '\\' => {
                    if let Some((_, n)) = chars.next() {
                        value.push(n);
                    }
                }
                '"' => {
                    end = i + 1;
                    break;
                }
                c => value.push(c),
            }
        }
        out.insert(k.trim_start_matches(',').to_string(), value);
        rest = &after[end..];
    }
    out
}

/// `after - before`, keeping the positive entries.
pub fn delta(before: &Counts, after: &Counts) -> Counts {
    after
        .iter()
        .filter_map(|(k, v)| {
            let d = v.saturating_sub(before.get(k).copied().unwrap_or(0));
            (d > 0).then(|| (k.clone(), d))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_request_total() {
        let text = r#"# HELP apiserver_request_total x
apiserver_request_total{code="200",component="apiserver",dry_run="",group="apps",resource="deployments",scope="resource",subresource="",verb="PATCH",version="v1"} 12
apiserver_request_total{code="409",component="apiserver",dry_run="",group="apps",resource="deployments",scope="resource",subresource="",verb="PATCH",version="v1"} 3
apiserver_request_total{code="200",component="apiserver",dry_run="",group="apps",resource="deployments",scope="resource",subresource="status",verb="PUT",version="v1"} 5
apiserver_request_total{code="0",component="apiserver",dry_run="",group="",resource="",scope="",subresource="/healthz",verb="GET",version=""} 7
"#;
        let c = parse(text);
        assert_eq!(c[&("patch".into(), "deployments".into())], 15);
        assert_eq!(c[&("update".into(), "deployments/status".into())], 5);
        assert_eq!(c.len(), 2);
    }
}
