//! What users observe kube-reloader with, checked with the real tools (built from their Go
//! modules by hack/observe-tools.sh; a tool that cannot be built or started fails the test):
//! - `promtool test rules`: every alert rule fires on its series and stays quiet otherwise;
//! - Prometheus scrapes the controller while it reloads (success, permanent failure, retried
//!   failure, coalesced, skipped) and evaluates every query of the Grafana dashboard and every
//!   alert rule;
//! - Jaeger receives the controller's OTLP and shows one trace per config change.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;
use std::time::Duration;

use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

use common::objects::*;
use common::observe::{Jaeger, Prometheus, Sample, process_tag, tag, tool};
use common::{Controller, TestNamespace, client, free_port, wait_for};

fn repo_path(path: &str) -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(path)
}

// ---- alert rules: promtool ---------------------------------------------------------------

#[test]
fn alert_rules_pass_promtool_check_and_their_unit_tests() {
    let rules = repo_path("deployments/prometheus/kube-reloader-rules.yaml");
    let tests = repo_path("deployments/prometheus/kube-reloader-rules.test.yaml");
    let promtool = tool("promtool");
    for args in [
        vec!["check", "rules", rules.to_str().unwrap()],
        vec!["test", "rules", tests.to_str().unwrap()],
    ] {
        let out = Command::new(&promtool)
            .args(&args)
            .output()
            .unwrap_or_else(|e| panic!("running {}: {e}", promtool.display()));
        assert!(
            out.status.success(),
            "promtool {args:?} failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // Every alert has a unit test that expects it to fire.
    let rules_text = std::fs::read_to_string(&rules).unwrap();
    let tests_text = std::fs::read_to_string(&tests).unwrap();
    let alerts: Vec<&str> = rules_text
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- alert: "))
        .collect();
    assert_eq!(alerts.len(), 6, "{alerts:?}");
    for alert in alerts {
        let fires = tests_text
            .split(&format!("alertname: {alert}\n"))
            .skip(1)
            .any(|case| case.trim_start().starts_with("exp_alerts:\n"));
        assert!(fires, "no promtool test expects {alert} to fire");
    }
}

// ---- a scenario with every kind of outcome -----------------------------------------------

const DENY_LABEL: &str = "kube-reloader.test/deny-updates";
const FAIL_LABEL: &str = "kube-reloader.test/fail-writes";
const SECRET_VALUE: &str = "hunter2-observability-secret";

/// Cluster-scoped admission objects that make the API server refuse updates of labelled
/// Deployments in one namespace: a ValidatingAdmissionPolicy (403, a permanent failure) and a
/// webhook with `failurePolicy: Fail` on a closed loopback port (500, retried with backoff).
/// Deleted when dropped.
struct FailingWrites {
    objects: Vec<(ApiResource, String)>,
}

fn admission(kind: &str) -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk(
        "admissionregistration.k8s.io",
        "v1",
        kind,
    ))
}

impl FailingWrites {
    async fn install(ns: &TestNamespace) -> FailingWrites {
        let in_ns = json!({"matchLabels": {"kubernetes.io/metadata.name": ns.name}});
        let name = format!("kr-test-{}", ns.name);
        let policy = json!({
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": name},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {"resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"],
                    "operations": ["UPDATE"], "resources": ["deployments"]}]},
                "validations": [{
                    "expression": format!("!has(object.metadata.labels) || !('{DENY_LABEL}' in object.metadata.labels)"),
                    "message": "updates denied by the test policy", "reason": "Forbidden"}]
            }
        });
        let binding = json!({
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": name},
            "spec": {"policyName": name, "validationActions": ["Deny"],
                     "matchResources": {"namespaceSelector": in_ns}}
        });
        let webhook = json!({
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": name},
            "webhooks": [{
                "name": "fail.kube-reloader.test", "admissionReviewVersions": ["v1"],
                "sideEffects": "None", "failurePolicy": "Fail", "timeoutSeconds": 2,
                "clientConfig": {"url": format!("https://127.0.0.1:{}/unreachable", free_port())},
                "rules": [{"apiGroups": ["apps"], "apiVersions": ["v1"],
                           "operations": ["UPDATE"], "resources": ["deployments"]}],
                "namespaceSelector": in_ns,
                "objectSelector": {"matchLabels": {FAIL_LABEL: "true"}}
            }]
        });
        let mut objects = Vec::new();
        for value in [policy, binding, webhook] {
            let ar = admission(value["kind"].as_str().unwrap());
            let obj: DynamicObject = serde_json::from_value(value).unwrap();
            Api::<DynamicObject>::all_with(ns.client.clone(), &ar)
                .create(&PostParams::default(), &obj)
                .await
                .unwrap_or_else(|e| panic!("creating {}: {e}", ar.kind));
            objects.push((ar, name.clone()));
        }
        FailingWrites { objects }
    }
}

impl Drop for FailingWrites {
    fn drop(&mut self) {
        let objects = std::mem::take(&mut self.objects);
        common::block_on_detached(async move {
            let c = client().await;
            for (ar, name) in objects {
                let api = Api::<DynamicObject>::all_with(c.clone(), &ar);
                let _ = api.delete(&name, &DeleteParams::default()).await;
            }
        });
    }
}

/// Workloads for every outcome, in one namespace:
/// `web` reloads; `bystander` (auto "false") is skipped; `denied` fails for good (403);
/// `stuck` fails with 500s and backs off; `pair` uses two ConfigMaps whose changes coalesce.
struct Scenario {
    ns: TestNamespace,
    _failing: FailingWrites,
}

fn labelled(mut deployment: Value, label: &str) -> Value {
    deployment["metadata"]["labels"] = json!({ label: "true" });
    deployment
}

impl Scenario {
    async fn setup(prefix: &str) -> Scenario {
        let ns = TestNamespace::new(prefix).await;
        let (c, n) = (&ns.client, ns.name.as_str());
        for cm in [
            "app-config",
            "denied-config",
            "stuck-config",
            "part-a",
            "part-b",
        ] {
            create(c, n, configmap(cm, json!({"k": "v1"}))).await;
        }
        // A Secret next to them: its value must never reach a trace.
        create(c, n, secret("db", json!({"password": SECRET_VALUE}))).await;
        let env = |names: &[&str]| env_from_configs(names, &["db"]);
        create(
            c,
            n,
            auto_deployment("web", json!({}), env(&["app-config"])),
        )
        .await;
        create(
            c,
            n,
            deployment(
                "bystander",
                json!({"reloader.stakater.com/auto": "false"}),
                pod_spec(env(&["app-config"]), json!([])),
            ),
        )
        .await;
        let denied = auto_deployment("denied", json!({}), env(&["denied-config"]));
        create(c, n, labelled(denied, DENY_LABEL)).await;
        let stuck = auto_deployment("stuck", json!({}), env(&["stuck-config"]));
        create(c, n, labelled(stuck, FAIL_LABEL)).await;
        create(
            c,
            n,
            auto_deployment("pair", json!({}), env(&["part-a", "part-b"])),
        )
        .await;
        let failing = FailingWrites::install(&ns).await;
        let scenario = Scenario {
            ns,
            _failing: failing,
        };
        scenario.wait_admission_effective().await;
        scenario
    }

    /// Admission configuration takes a moment to reach the API server's admission chain: wait
    /// until a dry-run update of each labelled Deployment is refused the way the controller's
    /// writes will be.
    async fn wait_admission_effective(&self) {
        let api = api_for(&self.ns.client, &self.ns.name, "apps/v1", "Deployment");
        for (name, code) in [("denied", 403), ("stuck", 500)] {
            wait_for(
                &format!("updates of {name} to fail with {code}"),
                Duration::from_secs(30),
                || async {
                    let patch = json!({"metadata": {"annotations": {"probe": "x"}}});
                    let params = PatchParams {
                        dry_run: true,
                        ..Default::default()
                    };
                    match api.patch(name, &params, &Patch::Merge(&patch)).await {
                        Err(kube::Error::Api(s)) if s.code == code => Ok(()),
                        other => Err(format!("{:?}", other.map(|_| "accepted"))),
                    }
                },
            )
            .await;
        }
    }

    fn controller_args(&self) -> Vec<String> {
        vec![
            format!("--namespaces={}", self.ns.name),
            // Changes that arrive while a workload's interval runs are written together.
            "--min-reload-interval=5s".into(),
        ]
    }

    async fn change(&self, configmap: &str, value: &str) {
        set_configmap_data(
            &self.ns.client,
            &self.ns.name,
            configmap,
            json!({"k": value}),
        )
        .await;
    }

    async fn wait_env(&self, deployment: &str, configmap: &str, value: &str) {
        let var = format!(
            "STAKATER_{}_CONFIGMAP",
            configmap.to_uppercase().replace('-', "_")
        );
        let hash = configmap_hash(&[("k", value)]);
        wait_for_env_state(
            &self.ns.client,
            &self.ns.name,
            deployment,
            &var,
            Some(&hash),
            30,
        )
        .await;
    }

    async fn wait_event(&self, deployment: &str, reason: &str, count: usize) -> Vec<String> {
        wait_for(
            &format!("{count} {reason} Event(s) on {deployment}"),
            Duration::from_secs(30),
            || async {
                let notes: Vec<String> =
                    events_about(&self.ns.client, &self.ns.name, "Deployment", deployment)
                        .await
                        .into_iter()
                        .filter(|e| e.reason == reason)
                        .map(|e| e.note)
                        .collect();
                if notes.len() >= count {
                    Ok(notes)
                } else {
                    Err(format!("{notes:?}"))
                }
            },
        )
        .await
    }

    /// `round` (1, 2, ...): web reloads (bystander skipped), denied fails, stuck backs off,
    /// then pair is written once for part-a and once more for two changes coalesced.
    async fn run_round(&self, round: usize, controller: &Controller) {
        let v = format!("v{}", round + 1);
        self.change("app-config", &v).await;
        self.wait_env("web", "app-config", &v).await;
        self.change("denied-config", &v).await;
        self.wait_event("denied", "ReloadFail", round).await;
        self.change("stuck-config", &v).await;
        wait_for_log_line(controller, &["write failed, backing off", "stuck"]).await;

        self.change("part-a", &format!("{v}-a1")).await;
        self.wait_env("pair", "part-a", &format!("{v}-a1")).await;
        // Within the 5 s interval that write started: both wait, then go out as one write.
        self.change("part-b", &format!("{v}-b")).await;
        self.change("part-a", &format!("{v}-a2")).await;
        self.wait_env("pair", "part-a", &format!("{v}-a2")).await;
        self.wait_env("pair", "part-b", &format!("{v}-b")).await;
    }
}

// ---- the dashboard's queries in a real Prometheus --------------------------------------------

/// What the scenario must show in one query's result: `Positive(labels)` needs a series with
/// those labels and a value > 0; `Finite` needs at least one series, every value a number.
#[derive(Debug)]
enum Expect {
    Positive(&'static [(&'static str, &'static str)]),
    Finite,
}

/// Per panel title, per target: what the scenario produced. A panel missing here fails the test,
/// so a new panel gets its expectation.
fn expectations() -> BTreeMap<&'static str, Vec<Vec<Expect>>> {
    use Expect::*;
    BTreeMap::from([
        (
            "Reloads per second",
            vec![vec![
                Positive(&[("success", "true")]),
                Positive(&[("success", "false")]),
            ]],
        ),
        (
            "Reload latency (config change observed -> write acknowledged)",
            vec![vec![Positive(&[])], vec![Positive(&[])]],
        ),
        (
            "Actions by workload kind and result",
            vec![vec![
                Positive(&[("workload_kind", "Deployment"), ("result", "success")]),
                Positive(&[("workload_kind", "Deployment"), ("result", "failed")]),
            ]],
        ),
        (
            "Failures and retries",
            vec![
                vec![
                    Positive(&[("type", "permanent")]),
                    Positive(&[("type", "transient")]),
                ],
                vec![Positive(&[])],
            ],
        ),
        ("Write queue", vec![vec![Finite], vec![Positive(&[])]]),
        ("Rate limiter wait (p99)", vec![vec![Finite]]),
        (
            "Skipped decisions by reason",
            vec![vec![Positive(&[("reason", "not_opted_in")])]],
        ),
        (
            "Namespaces owned per replica (sharding)",
            vec![vec![Finite]],
        ),
        (
            "Reverse index size",
            vec![
                vec![Positive(&[])],
                vec![Positive(&[])],
                vec![Positive(&[])],
            ],
        ),
        (
            "API requests by verb and code",
            vec![vec![
                Positive(&[("verb", "PATCH"), ("code", "200")]),
                Positive(&[("verb", "PATCH"), ("code", "403")]),
                Positive(&[("verb", "PATCH"), ("code", "500")]),
            ]],
        ),
        ("Watch restarts", vec![vec![Finite]]),
    ])
}

/// Replaces the dashboard's template variables with what Grafana would send; panics on a
/// variable it does not know.
fn substitute(expr: &str, variables: &BTreeMap<String, String>) -> String {
    let mut out = expr.to_string();
    let builtin = [
        ("__rate_interval", "1m"),
        ("__interval", "15s"),
        ("__range", "1h"),
    ];
    for (name, value) in variables
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .chain(builtin)
    {
        for form in [
            format!("${{{name}}}"),
            format!("[[{name}]]"),
            format!("${name}"),
        ] {
            out = out.replace(&form, value);
        }
    }
    assert!(
        !out.contains('$'),
        "unknown template variable in {expr:?} (after substitution: {out:?})"
    );
    out
}

fn check(samples: &[Sample], expect: &Expect) -> Result<(), String> {
    if samples.is_empty() {
        return Err("empty result".into());
    }
    match expect {
        Expect::Finite => match samples.iter().find(|s| !s.value.is_finite()) {
            Some(s) => Err(format!("not a number: {s:?}")),
            None => Ok(()),
        },
        Expect::Positive(labels) => {
            let matching: Vec<&Sample> = samples
                .iter()
                .filter(|s| {
                    labels
                        .iter()
                        .all(|(k, v)| s.labels.get(*k) == Some(&json!(v)))
                })
                .collect();
            if matching
                .iter()
                .any(|s| s.value > 0.0 && s.value.is_finite())
            {
                Ok(())
            } else {
                Err(format!(
                    "no series {labels:?} with a value > 0 in {samples:?}"
                ))
            }
        }
    }
}

#[tokio::test]
async fn every_dashboard_query_and_alert_rule_evaluates_in_a_real_prometheus() {
    let scenario = Scenario::setup("observe-dashboard").await;
    let args = scenario.controller_args();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let controller = Controller::start(&args).await;
    let prometheus = Prometheus::start(&[controller.metrics_port]).await;
    prometheus.wait_scrapes(2).await;
    // Two rounds: rate() only sees a counter's increments after the scrape that first saw its
    // series, and some series (a failed action, a 403) are created by their first increment.
    for round in 1..=2 {
        scenario.run_round(round, &controller).await;
    }
    prometheus.wait_scrapes(3).await;

    let dashboard: Value = serde_json::from_str(
        &std::fs::read_to_string(repo_path(
            "deployments/grafana/kube-reloader-dashboard.json",
        ))
        .unwrap(),
    )
    .unwrap();
    let variables: BTreeMap<String, String> = dashboard["templating"]["list"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|v| {
            let value = v["current"]["value"]
                .as_str()
                .unwrap_or(match v["type"].as_str() {
                    Some("datasource") => "prometheus",
                    _ => ".*",
                });
            (v["name"].as_str().unwrap().to_string(), value.to_string())
        })
        .collect();
    let mut expected = expectations();
    let mut failures = Vec::new();
    let mut evaluated = 0;
    for panel in dashboard["panels"].as_array().unwrap() {
        let title = panel["title"].as_str().unwrap();
        if panel["datasource"]["type"] != "prometheus" {
            // The traces panel: checked against Jaeger in every_config_change_is_one_trace_in_jaeger.
            continue;
        }
        let Some(per_target) = expected.remove(title) else {
            failures.push(format!(
                "panel {title:?}: no expectation in this test; add one"
            ));
            continue;
        };
        let targets = panel["targets"].as_array().unwrap();
        assert_eq!(targets.len(), per_target.len(), "targets of {title:?}");
        for (target, expects) in targets.iter().zip(per_target) {
            let expr = substitute(target["expr"].as_str().unwrap(), &variables);
            evaluated += 1;
            match prometheus.query(&expr).await {
                Err(e) => failures.push(format!("{title:?}: {expr}: {e}")),
                Ok(samples) => {
                    for expect in &expects {
                        if let Err(e) = check(&samples, expect) {
                            failures.push(format!("{title:?}: {expr}: {e}"));
                        }
                    }
                }
            }
        }
    }
    assert!(
        expected.is_empty(),
        "panels gone from the dashboard: {:?}",
        expected.keys()
    );
    assert!(
        failures.is_empty(),
        "dashboard queries that failed or showed no data:\n{}",
        failures.join("\n")
    );
    assert!(evaluated >= 14, "only {evaluated} queries evaluated");

    check_alert_rules(&prometheus).await;
}

/// Prometheus loaded deployments/prometheus/kube-reloader-rules.yaml: every rule evaluates
/// without error, and the permanent failures fire KubeReloaderReloadFailed.
async fn check_alert_rules(prometheus: &Prometheus) {
    let rules = wait_for(
        "KubeReloaderReloadFailed to fire",
        Duration::from_secs(30),
        || async {
            let (_, body) = common::http_get(&format!("{}/api/v1/rules", prometheus.url()))
                .await
                .map_err(|e| e.to_string())?;
            let reply: Value = serde_json::from_str(&body).map_err(|e| e.to_string())?;
            let rules: Vec<Value> = reply["data"]["groups"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
                .collect();
            let fired = rules
                .iter()
                .any(|r| r["name"] == "KubeReloaderReloadFailed" && r["state"] == "firing");
            if fired {
                Ok(rules)
            } else {
                Err(format!("{rules:?}"))
            }
        },
    )
    .await;
    assert_eq!(rules.len(), 6, "{rules:?}");
    for rule in &rules {
        assert_eq!(rule["health"], "ok", "rule evaluation failed: {rule}");
    }
}

// ---- traces in a real Jaeger -----------------------------------------------------------------

fn spans(traces: &[Value]) -> Vec<(&Value, &Value)> {
    traces
        .iter()
        .flat_map(|t| {
            t["spans"]
                .as_array()
                .into_iter()
                .flatten()
                .map(move |s| (t, s))
        })
        .collect()
}

fn parent_id(span: &Value) -> Option<String> {
    span["references"]
        .as_array()?
        .iter()
        .find(|r| r["refType"] == "CHILD_OF")
        .and_then(|r| r["spanID"].as_str().map(str::to_string))
}

fn is_error(span: &Value) -> bool {
    tag(span, "error").as_deref() == Some("true")
}

#[tokio::test]
async fn every_config_change_is_one_trace_in_jaeger() {
    let jaeger = Jaeger::start().await;
    let scenario = Scenario::setup("observe-traces").await;
    let endpoint = jaeger.otlp_endpoint();
    let args = scenario.controller_args();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let controller = Controller::start_with_env(
        &args,
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ],
    )
    .await;
    let prometheus = Prometheus::start(&[controller.metrics_port]).await;
    scenario.run_round(1, &controller).await;
    let ns = scenario.ns.name.as_str();

    // Traces by config: app-config, denied-config and part-b changed once, part-a twice.
    let traces = wait_for(
        "every finished change's trace in Jaeger",
        Duration::from_secs(30),
        || async {
            let traces = jaeger.traces("kube-reloader").await;
            let by_config = traces_by_config(&traces);
            let want = [
                ("app-config", 1),
                ("denied-config", 1),
                ("part-a", 2),
                ("part-b", 1),
            ];
            let complete = want
                .iter()
                .all(|(c, n)| by_config.get(*c).map(BTreeSet::len) == Some(*n))
                && writes_of(&traces, "pair").len() == 2;
            if complete {
                Ok(traces)
            } else {
                Err(format!("{by_config:?}"))
            }
        },
    )
    .await;
    let by_config = traces_by_config(&traces);
    for (config, ids) in &by_config {
        let want = if config == "part-a" { 2 } else { 1 };
        assert_eq!(ids.len(), want, "traces of {config}: {ids:?}");
    }
    let text = serde_json::to_string(&traces).unwrap();
    assert!(
        !text.contains(SECRET_VALUE),
        "a Secret value reached Jaeger"
    );
    assert!(!text.contains("v2-a1"), "a ConfigMap value reached Jaeger");

    // web: config_change -> decide, reload -> write, with the semantic-convention attributes.
    let web_trace = one_trace(&traces, &by_config["app-config"]);
    let (root, decide, reload, write) = (
        span_named(web_trace, "config_change"),
        span_named(web_trace, "decide"),
        span_named(web_trace, "reload"),
        span_named(web_trace, "write"),
    );
    assert_eq!(parent_id(root), None);
    assert_eq!(parent_id(decide), root["spanID"].as_str().map(String::from));
    assert_eq!(parent_id(reload), root["spanID"].as_str().map(String::from));
    assert_eq!(
        parent_id(write),
        reload["spanID"].as_str().map(String::from)
    );
    assert_eq!(tag(root, "config.kind").as_deref(), Some("configmap"));
    assert_eq!(tag(root, "config.name").as_deref(), Some("app-config"));
    assert_eq!(tag(root, "k8s.namespace.name").as_deref(), Some(ns));
    assert_eq!(tag(decide, "candidates").as_deref(), Some("2"));
    assert_eq!(tag(decide, "reloads").as_deref(), Some("1"));
    assert_eq!(tag(reload, "k8s.namespace.name").as_deref(), Some(ns));
    assert_eq!(tag(reload, "k8s.deployment.name").as_deref(), Some("web"));
    assert_eq!(tag(reload, "config.name").as_deref(), Some("app-config"));
    assert_eq!(tag(reload, "result").as_deref(), Some("reloaded"));
    assert_eq!(tag(reload, "coalesced").as_deref(), Some("false"));
    assert_eq!(tag(write, "result").as_deref(), Some("reloaded"));
    assert!(!is_error(reload) && !is_error(write));
    assert_eq!(
        process_tag(web_trace, reload, "service.name").as_deref(),
        Some("kube-reloader")
    );
    assert_eq!(
        process_tag(web_trace, reload, "service.version").as_deref(),
        Some(env!("CARGO_PKG_VERSION"))
    );

    // The trace id in the Reloaded Event and in the log line finds this trace.
    let trace_id = web_trace["traceID"].as_str().unwrap();
    let notes = scenario.wait_event("web", "Reloaded", 1).await;
    assert!(
        notes.iter().any(|n| n.contains(trace_id)),
        "no Reloaded event names trace {trace_id}: {notes:?}"
    );
    let line = wait_for_log_line(&controller, &["reloaded", "/web", "trace_id"]).await;
    assert!(
        line.contains(trace_id),
        "log line without the trace id: {line}"
    );
    let found = jaeger.trace(trace_id).await;
    assert_eq!(found.len(), 1, "Jaeger finds trace {trace_id} by its id");
    assert_eq!(found[0]["traceID"], trace_id);
    exemplars_lead_to_traces(&prometheus, &jaeger).await;
    slow_reloads_panel_finds_reload_traces(&jaeger, trace_id).await;

    // denied: the write and the reload are error spans, typed permanent.
    let denied = one_trace(&traces, &by_config["denied-config"]);
    for name in ["reload", "write"] {
        let span = span_named(denied, name);
        assert!(is_error(span), "{name} span of a failed write: {span}");
        assert_eq!(tag(span, "error.type").as_deref(), Some("permanent"));
    }

    // stuck: its reload is still retrying, yet each failed attempt is already an error span.
    let stuck_attempts: Vec<&Value> = spans(&traces)
        .into_iter()
        .map(|(_, s)| s)
        .filter(|s| {
            s["operationName"] == "write" && tag(s, "error.type").as_deref() == Some("transient")
        })
        .collect();
    assert!(
        !stuck_attempts.is_empty() && stuck_attempts.iter().all(|s| is_error(s)),
        "failed attempts of stuck: {stuck_attempts:?}"
    );

    // pair: the second write carried two changes. The change that rode along is marked
    // coalesced and links (FOLLOWS_FROM) to the span of the change whose write carried it.
    let pair_reloads: Vec<&Value> = spans(&traces)
        .into_iter()
        .map(|(_, s)| s)
        .filter(|s| {
            s["operationName"] == "reload"
                && tag(s, "k8s.deployment.name").as_deref() == Some("pair")
        })
        .collect();
    assert_eq!(pair_reloads.len(), 3, "{pair_reloads:?}");
    let riders: Vec<&&Value> = pair_reloads
        .iter()
        .filter(|s| tag(s, "coalesced").as_deref() == Some("true"))
        .collect();
    assert_eq!(riders.len(), 1, "{pair_reloads:?}");
    let link = riders[0]["references"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["refType"] == "FOLLOWS_FROM")
        .unwrap_or_else(|| panic!("no link on the coalesced span: {}", riders[0]));
    let carrier = pair_reloads
        .iter()
        .find(|s| s["spanID"] == link["spanID"])
        .expect("the link points at the reload that wrote");
    assert_eq!(tag(carrier, "coalesced_with").as_deref(), Some("1"));
    assert_ne!(carrier["traceID"], riders[0]["traceID"]);
    assert_eq!(writes_of(&traces, "pair").len(), 2);
}

/// The reload latency histogram carries exemplars whose trace ids Jaeger finds: a slow bucket
/// on the dashboard leads to the trace of a reload that fell in it.
async fn exemplars_lead_to_traces(prometheus: &Prometheus, jaeger: &Jaeger) {
    prometheus.wait_scrapes(2).await;
    let ids = prometheus
        .exemplar_trace_ids("kube_reloader_reload_latency_seconds_bucket")
        .await
        .unwrap_or_else(|e| panic!("query_exemplars: {e}\n{}", prometheus.log()));
    assert!(
        !ids.is_empty(),
        "no exemplar on kube_reloader_reload_latency_seconds; Prometheus log:\n{}",
        prometheus.log()
    );
    for id in ids.iter().collect::<BTreeSet<_>>() {
        let found = jaeger.trace(id).await;
        assert_eq!(
            found.len(),
            1,
            "exemplar trace id {id}: Jaeger has no such trace"
        );
        let names: BTreeSet<&str> = found[0]["spans"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s["operationName"].as_str())
            .collect();
        assert!(
            names.contains("write"),
            "exemplar trace {id} has no write span: {names:?}"
        );
    }
}

/// The dashboard's "Slow reloads (traces)" panel asks Jaeger what `jaeger.search` asks here (the
/// panel's service, operation and limit; its `$slow` threshold set to 1 µs so that this test's
/// fast reloads count as slow): the search answers with the reload traces, `web`'s among them.
async fn slow_reloads_panel_finds_reload_traces(jaeger: &Jaeger, web_trace: &str) {
    let dashboard: Value = serde_json::from_str(
        &std::fs::read_to_string(repo_path(
            "deployments/grafana/kube-reloader-dashboard.json",
        ))
        .unwrap(),
    )
    .unwrap();
    let panels: Vec<&Value> = dashboard["panels"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["datasource"]["type"] == "jaeger")
        .collect();
    assert_eq!(panels.len(), 1, "one traces panel");
    assert_eq!(panels[0]["datasource"]["uid"], "${traces}");
    let target = &panels[0]["targets"][0];
    assert_eq!(target["queryType"], "search");
    assert_eq!(target["minDuration"], "$slow");
    let query = [
        ("service", target["service"].as_str().unwrap().to_string()),
        (
            "operation",
            target["operation"].as_str().unwrap().to_string(),
        ),
        ("minDuration", "1us".to_string()),
        ("limit", target["limit"].to_string()),
    ];
    let found = jaeger.search(&query).await;
    let ids: BTreeSet<&str> = found.iter().filter_map(|t| t["traceID"].as_str()).collect();
    assert!(
        ids.contains(web_trace),
        "the traces panel's search misses web's reload {web_trace}: {ids:?}"
    );
    // A threshold no reload here reaches finds nothing: the panel filters on the duration.
    let mut slow = query.clone();
    slow[2].1 = "10m".to_string();
    assert!(jaeger.search(&slow).await.is_empty());
}

fn span_named<'a>(trace: &'a Value, name: &str) -> &'a Value {
    trace["spans"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["operationName"] == name)
        .unwrap_or_else(|| panic!("no {name} span in {trace}"))
}

/// Trace ids per `config.name` of their spans.
fn traces_by_config(traces: &[Value]) -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (trace, span) in spans(traces) {
        if let Some(config) = tag(span, "config.name") {
            out.entry(config)
                .or_default()
                .insert(trace["traceID"].as_str().unwrap().to_string());
        }
    }
    out
}

fn one_trace<'a>(traces: &'a [Value], ids: &BTreeSet<String>) -> &'a Value {
    assert_eq!(ids.len(), 1, "{ids:?}");
    let id = ids.first().unwrap();
    traces
        .iter()
        .find(|t| t["traceID"].as_str() == Some(id.as_str()))
        .unwrap()
}

/// Successful `write` spans under the `reload` spans of `deployment`.
fn writes_of<'a>(traces: &'a [Value], deployment: &str) -> Vec<&'a Value> {
    let all = spans(traces);
    let reloads: BTreeSet<&str> = all
        .iter()
        .filter(|(_, s)| tag(s, "k8s.deployment.name").as_deref() == Some(deployment))
        .filter_map(|(_, s)| s["spanID"].as_str())
        .collect();
    all.into_iter()
        .map(|(_, s)| s)
        .filter(|s| {
            s["operationName"] == "write"
                && tag(s, "result").as_deref() == Some("reloaded")
                && parent_id(s).is_some_and(|p| reloads.contains(p.as_str()))
        })
        .collect()
}
