//! What a user sees of a reload, each checked against a real receiver started by the test:
//! OTLP traces, Prometheus metrics, Kubernetes Events, alerts (every sink, the proxy, a failing
//! receiver) and JSON logs.

mod common;

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, ListParams};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use serde_json::json;

use common::objects::*;
use common::receiver::{Receiver, Reply};
use common::{Controller, TestNamespace, wait_for};

const VAR: &str = "STAKATER_APP_CONFIG_CONFIGMAP";

/// One auto Deployment `web` using ConfigMap `app-config`.
async fn setup(prefix: &str) -> TestNamespace {
    let ns = TestNamespace::new(prefix).await;
    create(
        &ns.client,
        &ns.name,
        configmap("app-config", json!({"k": "v1"})),
    )
    .await;
    create(
        &ns.client,
        &ns.name,
        deployment(
            "web",
            json!({"reloader.stakater.com/auto": "true"}),
            pod_spec(env_from_configmap("app-config"), json!([])),
        ),
    )
    .await;
    ns
}

async fn change_and_wait(ns: &TestNamespace, value: &str) -> String {
    merge_patch(
        &ns.client,
        &ns.name,
        "v1",
        "ConfigMap",
        "app-config",
        json!({"data": {"k": value}}),
    )
    .await;
    let expected = configmap_hash(&[("k", value)]);
    wait_for(
        "the Deployment to be rolled",
        Duration::from_secs(20),
        || async {
            let obj = get(&ns.client, &ns.name, "apps/v1", "Deployment", "web")
                .await
                .unwrap();
            match env_value(&obj, "/spec/template", VAR) {
                Some(v) if v == expected => Ok(v),
                other => Err(format!("env var is {other:?}")),
            }
        },
    )
    .await
}

fn attr(span: &Span, key: &str) -> Option<String> {
    span.attributes.iter().find(|a| a.key == key).and_then(|a| {
        match a.value.as_ref()?.value.as_ref()? {
            AnyValue::StringValue(s) => Some(s.clone()),
            AnyValue::IntValue(i) => Some(i.to_string()),
            AnyValue::BoolValue(b) => Some(b.to_string()),
            other => Some(format!("{other:?}")),
        }
    })
}

fn spans(receiver: &Receiver) -> Vec<Span> {
    receiver
        .requests()
        .iter()
        .filter(|r| r.target.ends_with("/v1/traces"))
        .flat_map(|r| {
            ExportTraceServiceRequest::decode(r.body.as_slice())
                .expect("valid OTLP protobuf")
                .resource_spans
        })
        .flat_map(|rs| rs.scope_spans)
        .flat_map(|ss| ss.spans)
        .collect()
}

async fn events_for(ns: &TestNamespace, name: &str) -> Vec<Event> {
    Api::<Event>::namespaced(ns.client.clone(), &ns.name)
        .list(&ListParams::default().fields(&format!("involvedObject.name={name}")))
        .await
        .unwrap()
        .items
}

#[tokio::test]
async fn a_reload_is_one_trace_linked_from_its_event_and_counted_in_metrics() {
    let collector = Receiver::start(Reply::Status(200)).await;
    let ns = setup("telemetry-trace").await;
    // A secret in the same namespace: its value must never reach a span.
    create(
        &ns.client,
        &ns.name,
        secret("db", json!({"password": "hunter2-very-secret"})),
    )
    .await;
    let endpoint = collector.url("");
    let controller = Controller::start_with_env(
        &[&format!("--namespaces={}", ns.name)],
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
            ("OTEL_SERVICE_NAME", "kr-test"),
        ],
    )
    .await;
    change_and_wait(&ns, "v2").await;

    let (root, child) = wait_for(
        "a config_change span and its reload child",
        Duration::from_secs(20),
        || async {
            let spans = spans(&collector);
            let child = spans
                .iter()
                .find(|s| s.name == "reload" && attr(s, "result").as_deref() == Some("reloaded"));
            let root = child.and_then(|c| spans.iter().find(|s| s.span_id == c.parent_span_id));
            match (root, child) {
                (Some(r), Some(c)) => Ok((r.clone(), c.clone())),
                _ => Err(format!(
                    "spans so far: {:?}",
                    spans.iter().map(|s| &s.name).collect::<Vec<_>>()
                )),
            }
        },
    )
    .await;
    assert_eq!(root.name, "config_change");
    assert_eq!(root.trace_id, child.trace_id);
    assert_eq!(attr(&root, "config.name").as_deref(), Some("app-config"));
    assert_eq!(
        attr(&root, "config.namespace").as_deref(),
        Some(ns.name.as_str())
    );
    assert_eq!(attr(&child, "workload.name").as_deref(), Some("web"));
    assert_eq!(attr(&child, "workload.kind").as_deref(), Some("Deployment"));
    assert_eq!(attr(&child, "strategy").as_deref(), Some("env-vars"));
    assert_eq!(attr(&child, "coalesced_with").as_deref(), Some("0"));
    assert!(child.end_time_unix_nano >= child.start_time_unix_nano);
    let trace_id: String = child.trace_id.iter().map(|b| format!("{b:02x}")).collect();

    // The Event names the trace, so `kubectl describe` leads to it.
    let note = wait_for("a Reloaded event", Duration::from_secs(10), || async {
        events_for(&ns, "web")
            .await
            .into_iter()
            .find(|e| e.reason.as_deref() == Some("Reloaded"))
            .and_then(|e| e.message)
            .ok_or_else(|| "no Reloaded event yet".to_string())
    })
    .await;
    assert!(
        note.starts_with(&format!(
            "Changes detected in 'app-config' of type 'CONFIGMAP' in namespace '{0}', Updated 'web' of type 'Deployment' in namespace '{0}'",
            ns.name
        )),
        "{note}"
    );
    assert!(
        note.contains(&trace_id),
        "event {note:?} does not name trace {trace_id}"
    );

    // Metrics, scraped from the real endpoint.
    let metrics = controller.metrics().await;
    for expected in [
        "reloader_reload_executed_total{success=\"true\"} 1",
        "reloader_reload_executed_total{success=\"false\"} 0",
        "reloader_action_total{workload_kind=\"Deployment\",result=\"success\"} 1",
        "kube_reloader_reload_latency_seconds_count 1",
        "kube_reloader_index_workloads 1",
        "kube_reloader_api_requests_total{verb=\"PATCH\",resource=\"deployments\",code=\"200\"} 1",
    ] {
        assert!(
            metrics.contains(expected),
            "missing {expected} in:\n{metrics}"
        );
    }

    // Shutdown flushes: a second reload right before SIGTERM still reaches the collector.
    change_and_wait(&ns, "v3").await;
    let before = spans(&collector)
        .iter()
        .filter(|s| s.name == "reload")
        .count();
    let log = controller.log.clone();
    assert!(controller.stop().await.success());
    let after = spans(&collector)
        .iter()
        .filter(|s| s.name == "reload")
        .count();
    assert_eq!(
        after,
        2,
        "spans before shutdown: {before}, after: {after}; log:\n{}",
        std::fs::read_to_string(log).unwrap_or_default()
    );
    for s in spans(&collector) {
        for a in &s.attributes {
            assert!(
                !format!("{:?}", a.value).contains("hunter2"),
                "secret value in span {}",
                s.name
            );
        }
    }
}

/// The first request `receiver` got, waiting up to 10 s for it.
async fn first_request(receiver: &Receiver, what: &str) -> common::receiver::Request {
    wait_for(what, Duration::from_secs(10), || async {
        receiver
            .requests()
            .into_iter()
            .next()
            .ok_or_else(|| format!("nothing received yet ({what})"))
    })
    .await
}

async fn alert_body(
    sink: &str,
    additional_info: Option<&str>,
) -> (common::receiver::Request, String) {
    let receiver = Receiver::start(Reply::Status(200)).await;
    let ns = setup(&format!("telemetry-alert-{sink}")).await;
    let url = receiver.url("/hook");
    let mut env = vec![
        ("ALERT_ON_RELOAD", "true"),
        ("ALERT_SINK", sink),
        ("ALERT_WEBHOOK_URL", url.as_str()),
    ];
    if let Some(info) = additional_info {
        env.push(("ALERT_ADDITIONAL_INFO", info));
    }
    let _controller =
        Controller::start_with_env(&[&format!("--namespaces={}", ns.name)], &env).await;
    change_and_wait(&ns, "v2").await;
    let request = first_request(&receiver, "the alert").await;
    (request, ns.name.clone())
}

#[tokio::test]
async fn alerts_use_reloader_payloads_for_every_sink() {
    let text = |ns: &str| {
        format!(
            "Reloader detected changes in *app-config* of type *CONFIGMAP* in namespace *{ns}*. Hence reloaded *web* of type *Deployment* in namespace *{ns}*"
        )
    };
    let (req, ns) = alert_body("slack", Some("cluster-a")).await;
    assert_eq!(req.method, "POST");
    assert_eq!(
        serde_json::from_slice::<serde_json::Value>(&req.body).unwrap(),
        json!({"attachments": [{"color": "good", "author_name": "Reloader", "text": format!("cluster-a : {}", text(&ns))}]})
    );
    let (req, ns) = alert_body("teams", None).await;
    assert_eq!(
        serde_json::from_slice::<serde_json::Value>(&req.body).unwrap(),
        json!({"text": text(&ns)})
    );
    let (req, ns) = alert_body("gchat", None).await;
    assert_eq!(
        serde_json::from_slice::<serde_json::Value>(&req.body).unwrap(),
        json!({"text": text(&ns)})
    );
    let (req, ns) = alert_body("webhook", None).await;
    assert_eq!(req.text(), text(&ns).replace('*', ""));
    assert!(
        req.header("content-type")
            .unwrap_or_default()
            .starts_with("text/plain")
    );
}

#[tokio::test]
async fn alerts_go_through_the_configured_proxy() {
    let proxy = Receiver::start(Reply::Status(200)).await;
    let ns = setup("telemetry-proxy").await;
    let proxy_url = proxy.url("");
    let _controller = Controller::start_with_env(
        &[&format!("--namespaces={}", ns.name)],
        &[
            ("ALERT_ON_RELOAD", "true"),
            ("ALERT_WEBHOOK_URL", "http://alerts.example.invalid/hook"),
            ("ALERT_WEBHOOK_PROXY", &proxy_url),
        ],
    )
    .await;
    change_and_wait(&ns, "v2").await;
    let req = first_request(&proxy, "the alert at the proxy").await;
    // A forward proxy receives the absolute URL.
    assert_eq!(req.method, "POST");
    assert_eq!(req.target, "http://alerts.example.invalid/hook");
}

/// Reloader v2's alert settings: `ALERT_STRUCTURED` sends its JSON body on the raw webhook sink
/// (`raw`, v2's name for it), and `ALERT_PROXY` is the proxy, winning over v1's
/// `ALERT_WEBHOOK_PROXY`.
#[tokio::test]
async fn structured_alerts_and_alert_proxy_are_reloader_v2s() {
    let receiver = Receiver::start(Reply::Status(200)).await;
    let ns = setup("telemetry-structured").await;
    let url = receiver.url("/hook");
    let controller = Controller::start_with_env(
        &[&format!("--namespaces={}", ns.name)],
        &[
            ("ALERT_ON_RELOAD", "true"),
            ("ALERT_SINK", "raw"),
            ("ALERT_WEBHOOK_URL", url.as_str()),
            ("ALERT_STRUCTURED", "true"),
            ("ALERT_ADDITIONAL_INFO", "cluster-a"),
        ],
    )
    .await;
    change_and_wait(&ns, "v2").await;
    let req = first_request(&receiver, "the alert").await;
    assert!(
        req.header("content-type")
            .unwrap_or_default()
            .starts_with("application/json")
    );
    let mut body: serde_json::Value = serde_json::from_slice(&req.body).unwrap();
    let timestamp = body["timestamp"].take();
    assert!(
        timestamp
            .as_str()
            .is_some_and(|t| t.parse::<jiff::Timestamp>().is_ok()),
        "{timestamp}"
    );
    assert_eq!(
        body,
        json!({"event": "reload", "workloadKind": "Deployment", "workloadName": "web",
            "workloadNamespace": ns.name, "resourceKind": "ConfigMap",
            "resourceName": "app-config", "resourceNamespace": ns.name,
            "timestamp": null, "additional": "cluster-a"})
    );
    controller.stop().await;

    let proxy = Receiver::start(Reply::Status(200)).await;
    let proxy_url = proxy.url("");
    let _controller = Controller::start_with_env(
        &[&format!("--namespaces={}", ns.name)],
        &[
            ("ALERT_ON_RELOAD", "true"),
            ("ALERT_WEBHOOK_URL", "http://alerts.example.invalid/hook"),
            ("ALERT_PROXY", &proxy_url),
            ("ALERT_WEBHOOK_PROXY", "http://127.0.0.1:1"),
        ],
    )
    .await;
    change_and_wait(&ns, "v3").await;
    let req = first_request(&proxy, "the alert at ALERT_PROXY").await;
    assert_eq!(req.target, "http://alerts.example.invalid/hook");
}

#[tokio::test]
async fn a_failing_or_hung_alert_receiver_does_not_slow_reloads() {
    for reply in [Reply::Status(500), Reply::Hang] {
        let receiver = Receiver::start(reply).await;
        let ns = setup("telemetry-slow").await;
        let url = receiver.url("/hook");
        let controller = Controller::start_with_env(
            &[&format!("--namespaces={}", ns.name)],
            &[("ALERT_ON_RELOAD", "true"), ("ALERT_WEBHOOK_URL", &url)],
        )
        .await;
        // Several reloads in a row, each waiting on the previous: with alerts on the write path
        // a hung receiver (5 s timeout, 3 attempts) would take 15 s per reload.
        let start = Instant::now();
        for v in ["v2", "v3", "v4"] {
            change_and_wait(&ns, v).await;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{reply:?}: reloads took {:?}",
            start.elapsed()
        );
        wait_for("the alert attempts", Duration::from_secs(10), || async {
            if receiver.requests().is_empty() {
                Err("no alert attempt".to_string())
            } else {
                Ok(())
            }
        })
        .await;
        let logs = controller.logs();
        assert!(!logs.contains(&url), "the alert URL leaked into the log");
    }
}

#[tokio::test]
async fn json_logs_carry_one_structured_line_per_reload() {
    let ns = setup("telemetry-json").await;
    let controller = Controller::start_with_env(
        &[&format!("--namespaces={}", ns.name), "--log-format=json"],
        &[("RUST_LOG", "info")],
    )
    .await;
    change_and_wait(&ns, "v2").await;
    let line = wait_for("the reload log line", Duration::from_secs(10), || async {
        controller
            .logs()
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find(|v| v["message"] == "reloaded")
            .ok_or_else(|| controller.logs())
    })
    .await;
    assert_eq!(line["workload"], format!("Deployment/{}/web", ns.name));
    assert_eq!(line["config"], format!("configmap/{}/app-config", ns.name));
    // Logged from the write attempt's span, inside the workload's reload span.
    assert_eq!(line["span"]["name"], "write");
    let reload = line["spans"]
        .as_array()
        .and_then(|spans| spans.iter().find(|s| s["name"] == "reload"))
        .unwrap_or_else(|| panic!("no reload span in {line}"));
    assert_eq!(reload["decision"], "auto");
    assert!(
        controller
            .logs()
            .lines()
            .all(|l| serde_json::from_str::<serde_json::Value>(l).is_ok())
    );
    let (code, _) = common::http_get(&format!(
        "http://127.0.0.1:{}/live",
        controller.metrics_port
    ))
    .await
    .unwrap();
    assert_eq!(code, 200);
}

#[tokio::test]
async fn meta_info_configmap_and_profiles_on_their_own_port() {
    let ns = setup("telemetry-meta").await;
    let pprof_port = common::free_port();
    let controller = Controller::start_with_env(
        &[
            &format!("--namespaces={}", ns.name),
            "--enable-pprof",
            &format!("--pprof-addr=127.0.0.1:{pprof_port}"),
        ],
        &[
            ("RELOADER_NAMESPACE", &ns.name),
            ("RELOADER_DEPLOYMENT_NAME", "reloader"),
        ],
    )
    .await;
    let cm = wait_for("reloader-meta-info", Duration::from_secs(10), || async {
        get(
            &ns.client,
            &ns.name,
            "v1",
            "ConfigMap",
            "reloader-meta-info",
        )
        .await
        .ok_or_else(|| "absent".to_string())
    })
    .await;
    assert_eq!(
        cm["metadata"]["labels"]["reloader.stakater.com/meta-info"],
        "reloader-oss"
    );
    let options: serde_json::Value =
        serde_json::from_str(cm["data"]["reloaderOptions"].as_str().unwrap()).unwrap();
    assert_eq!(options["reloadStrategy"], "env-vars");
    let deployment: serde_json::Value =
        serde_json::from_str(cm["data"]["deploymentInfo"].as_str().unwrap()).unwrap();
    assert_eq!(
        deployment,
        json!({"name": "reloader", "namespace": ns.name})
    );
    assert!(
        cm["data"]["buildInfo"]
            .as_str()
            .unwrap()
            .contains("releaseVersion")
    );

    let (code, body) = common::http_get(&format!(
        "http://127.0.0.1:{pprof_port}/debug/pprof/profile?seconds=1"
    ))
    .await
    .unwrap();
    assert_eq!(code, 200);
    assert!(
        body.contains("<svg"),
        "not a flame graph: {}",
        &body[..body.len().min(200)]
    );
    let (code, _) = common::http_get(&format!(
        "http://127.0.0.1:{}/debug/pprof/profile",
        controller.metrics_port
    ))
    .await
    .unwrap();
    assert_eq!(code, 404, "profiles must not be served on the metrics port");
}

/// Every metric the Grafana dashboard queries exists on the real endpoint.
#[tokio::test]
async fn every_dashboard_metric_is_exposed() {
    let ns = setup("telemetry-dashboard").await;
    let controller = Controller::start(&[&format!("--namespaces={}", ns.name)]).await;
    change_and_wait(&ns, "v2").await;
    // Families with no series yet are left out of the exposition, and the action counter is
    // counted after the write's response, which the Deployment can show before it is counted.
    let exposition = wait_for(
        "the reload to be counted",
        Duration::from_secs(10),
        || async {
            let text = controller.metrics().await;
            match text.contains("reloader_action_total{") {
                true => Ok(text),
                false => Err("reloader_action_total has no series yet".to_string()),
            }
        },
    )
    .await;
    let declared: Vec<&str> = exposition
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    let dashboard: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/deployments/grafana/kube-reloader-dashboard.json"
        ))
        .unwrap(),
    )
    .unwrap();
    let exprs: Vec<String> = dashboard["panels"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["datasource"]["type"] == "prometheus")
        .flat_map(|p| {
            p["targets"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t["expr"].as_str().unwrap().to_string())
        })
        .collect();
    assert!(exprs.len() >= 10);
    let mut checked = 0;
    for expr in &exprs {
        for token in expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
            if !(token.starts_with("reloader_") || token.starts_with("kube_reloader_")) {
                continue;
            }
            let family = ["_total", "_bucket", "_count", "_sum"]
                .iter()
                .find_map(|s| token.strip_suffix(s))
                .unwrap_or(token);
            assert!(
                declared.contains(&family) || declared.contains(&token),
                "the dashboard queries {token}, which /metrics does not expose"
            );
            checked += 1;
        }
    }
    assert!(checked >= 14, "only {checked} metric references found");
}
