//! Helm release Secrets (`type: helm.sh/release.v1`) are excluded server-side: the API server's
//! audit log of the controller's own user shows that every Secret list and watch carries the
//! field selector and that no request ever names an unreferenced release Secret; a change to one
//! reloads nothing; a workload that uses one gets one Warning (log line and Event); with
//! `--ignore-secret-types=` they are watched like any Secret (Reloader's behaviour).

mod common;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Value, json};

use common::objects::*;
use common::{Controller, TestNamespace, kubeconfig_path, wait_for};

const HELM: &str = "helm.sh/release.v1";
/// Unreferenced: no request of the controller may ever name it.
const RELEASE: &str = "sh.helm.release.v1.demo.v1";
/// Used by the `misuse` Deployment: warned about, never reloaded for.
const USED_RELEASE: &str = "sh.helm.release.v1.used.v1";
/// `type!=helm.sh/release.v1`, as it reads in a request URI once decoded.
const EXCLUSION: &str = "type!=helm.sh/release.v1";

fn helm_release_secret(name: &str, payload: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Secret", "type": HELM,
        "metadata": {"name": name, "labels": {"owner": "helm", "name": "demo", "version": "1"}},
        "stringData": {"release": payload},
    })
}

/// Creates the objects every test here uses: a plain Secret used by `app`, an unreferenced
/// release Secret, and a release Secret used by `misuse`.
async fn populate(ns: &TestNamespace) {
    let c = &ns.client;
    create(c, &ns.name, secret("app-creds", json!({"k": "v1"}))).await;
    create(c, &ns.name, helm_release_secret(RELEASE, "r1")).await;
    create(c, &ns.name, helm_release_secret(USED_RELEASE, "r1")).await;
    for (name, secret) in [("app", "app-creds"), ("misuse", USED_RELEASE)] {
        let workload = auto_deployment(name, json!({}), env_from_configs(&[], &[secret]));
        create(c, &ns.name, workload).await;
    }
}

/// Patches both release Secrets, then `app-creds` (the sentinel): once `app` carries the
/// sentinel's hash the controller has seen the earlier events too.
async fn change_releases_then_sentinel(ns: &TestNamespace, round: &str) {
    let c = &ns.client;
    set_secret_data(c, &ns.name, RELEASE, json!({"release": round})).await;
    set_secret_data(c, &ns.name, USED_RELEASE, json!({"release": round})).await;
    set_secret_data(c, &ns.name, "app-creds", json!({"k": round})).await;
    let hash = secret_hash(&[("k", round.as_bytes())]);
    wait_for_env_state(
        c,
        &ns.name,
        "app",
        "STAKATER_APP_CREDS_SECRET",
        Some(&hash),
        30,
    )
    .await;
}

/// One request of the audit log (Metadata level: no bodies).
#[derive(Debug)]
struct Request {
    verb: String,
    uri: String,
    name: Option<String>,
}

fn decoded(uri: &str) -> String {
    let mut out = Vec::new();
    let bytes = uri.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match (bytes[i], bytes.get(i + 1..i + 3)) {
            (b'%', Some(hex)) => {
                let hex = std::str::from_utf8(hex).unwrap_or("");
                match u8::from_str_radix(hex, 16) {
                    Ok(b) => {
                        out.push(b);
                        i += 3;
                        continue;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            (b'+', _) => out.push(b' '),
            (b, _) => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The audit log hack/cluster.sh writes next to the kubeconfig.
fn audit_log() -> PathBuf {
    kubeconfig_path().with_file_name("logs").join("audit.log")
}

/// The controller's requests about Secrets received at or after `since` (RFC 3339, as the
/// API server writes them, so they compare as strings).
fn secret_requests(since: &str) -> Vec<Request> {
    let log = audit_log();
    let text = std::fs::read_to_string(&log)
        .unwrap_or_else(|e| panic!("reading the audit log {}: {e}", log.display()));
    text.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["stage"] == "ResponseStarted" || e["stage"] == "ResponseComplete")
        .filter(|e| e["user"]["username"] == "kube-reloader-loadtest-controller")
        .filter(|e| e["objectRef"]["resource"] == "secrets")
        .filter(|e| e["requestReceivedTimestamp"].as_str().unwrap_or("") >= since)
        .map(|e| Request {
            verb: e["verb"].as_str().unwrap_or_default().to_string(),
            uri: decoded(e["requestURI"].as_str().unwrap_or_default()),
            name: e["objectRef"]["name"].as_str().map(String::from),
        })
        .collect()
}

/// Now, less a second of margin, as the audit log writes timestamps (UTC, microseconds).
fn audit_now() -> String {
    let t = jiff::Timestamp::now() - jiff::SignedDuration::from_secs(1);
    t.strftime("%Y-%m-%dT%H:%M:%S.%6fZ").to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_release_secrets_are_never_listed_or_watched_and_a_used_one_warns() {
    let as_controller = kubeconfig_path().with_file_name("loadtest-controller.kubeconfig");
    assert!(
        as_controller.exists(),
        "{} is missing: hack/cluster.sh makes it for the audit-logged controller user",
        as_controller.display()
    );
    let token = unique_token("ignored-types");
    let ns = TestNamespace::new("ignored-types").await;
    populate(&ns).await;
    let since = audit_now();

    // Scoped mode: namespaced watches (streaming lists).
    let scoped =
        Controller::start_as(&as_controller, &[&format!("--namespaces={}", ns.name)], &[]).await;
    let line = wait_for_log_line(&scoped, &["misuse", USED_RELEASE, HELM, "never watched"]).await;
    assert!(line.contains("WARN"), "{line}");
    let note = wait_for_warning_event(
        &ns.client,
        &ns.name,
        "Deployment",
        "misuse",
        "SecretTypeIgnored",
    )
    .await;
    assert!(note.contains(USED_RELEASE) && note.contains(HELM), "{note}");
    // /debug/explain says what the controller does: no, for a Secret of an ignored type.
    let url = format!(
        "http://127.0.0.1:{}/debug/explain?kind=Deployment&namespace={}&name=misuse&config=secret/{USED_RELEASE}",
        scoped.metrics_port, ns.name
    );
    let (code, body) = common::http_get(&url).await.expect("GET /debug/explain");
    let answer: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    let verdict = &answer["explanation"]["configs"][0];
    assert_eq!(code, 200, "{body}");
    assert_eq!(
        (&verdict["reload"], &verdict["reason"]),
        (&json!(false), &json!("secret_type_ignored")),
        "{body}"
    );
    change_releases_then_sentinel(&ns, "round-1").await;
    assert_eq!(
        deployment_reload_vars(&ns.client, &ns.name, "misuse").await,
        vec![],
        "a change of an ignored Secret reloaded its user"
    );
    let warnings = events_about(&ns.client, &ns.name, "Deployment", "misuse")
        .await
        .into_iter()
        .filter(|e| e.reason == "SecretTypeIgnored")
        .count();
    assert_eq!(warnings, 1, "one Warning per workload and Secret");
    scoped.stop().await;

    // Cluster-wide with a namespace selector; the namespace enters the selection after ready,
    // so it is indexed by the backfill list.
    let cluster_wide = Controller::start_as(
        &as_controller,
        &[&format!("--namespace-selector=kr-ignored-types={token}")],
        &[],
    )
    .await;
    let label = json!({"metadata": {"labels": {"kr-ignored-types": token}}});
    kube::Api::<k8s_openapi::api::core::v1::Namespace>::all(ns.client.clone())
        .patch(
            &ns.name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&label),
        )
        .await
        .expect("labelling the namespace");
    wait_for_log_line(&cluster_wide, &["indexing namespaces", &ns.name]).await;
    change_releases_then_sentinel(&ns, "round-2").await;
    assert_eq!(
        deployment_reload_vars(&ns.client, &ns.name, "misuse").await,
        vec![]
    );
    cluster_wide.stop().await;

    let namespaced = format!("/api/v1/namespaces/{}/secrets?", ns.name);
    let requests = wait_for(
        "the audit log to hold the cluster-wide controller's Secret requests",
        Duration::from_secs(15),
        || async {
            let requests = secret_requests(&since);
            let cluster_wide = requests
                .iter()
                .any(|r| r.uri.starts_with("/api/v1/secrets?"));
            // The backfill of the namespace that entered: one streaming list of its current
            // state (no resourceVersion), where a watch streams from any version (0).
            let backfill = requests.iter().any(|r| {
                r.verb == "watch"
                    && r.uri.starts_with(&namespaced)
                    && r.uri.split(['?', '&']).any(|p| p == "resourceVersion=")
            });
            if cluster_wide && backfill {
                Ok(requests)
            } else {
                Err(format!("{requests:#?}"))
            }
        },
    )
    .await;
    let mut verbs = BTreeSet::new();
    for r in &requests {
        assert!(
            !r.uri.contains(RELEASE) && r.name.as_deref() != Some(RELEASE),
            "a request named the unreferenced release Secret: {r:?}"
        );
        if r.name.is_some() {
            continue; // a GET of one named Secret (a config the controller watches)
        }
        // The one other collection request: whether the used Secret has an ignored type.
        let probe = format!("metadata.name={USED_RELEASE},type={HELM}");
        assert!(
            r.uri.contains(EXCLUSION) || (r.verb == "list" && r.uri.contains(&probe)),
            "a Secret {} without the exclusion: {}",
            r.verb,
            r.uri
        );
        verbs.insert(r.verb.clone());
    }
    assert!(verbs.contains("watch"), "{requests:#?}");
    assert!(
        requests
            .iter()
            .any(|r| r.verb == "watch" && r.uri.starts_with(&namespaced)),
        "no scoped watch in {requests:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_no_ignored_type_release_secrets_are_watched_like_any_other() {
    let ns = TestNamespace::new("all-types").await;
    populate(&ns).await;
    let controller = Controller::start(&[
        &format!("--namespaces={}", ns.name),
        "--ignore-secret-types=",
    ])
    .await;
    set_secret_data(&ns.client, &ns.name, USED_RELEASE, json!({"release": "r2"})).await;
    let hash = secret_hash(&[("release", b"r2")]);
    wait_for_env_state(
        &ns.client,
        &ns.name,
        "misuse",
        "STAKATER_SH_HELM_RELEASE_V1_USED_V1_SECRET",
        Some(&hash),
        30,
    )
    .await;
    assert!(
        !plain_logs(&controller).contains("never watched"),
        "no warning when nothing is ignored"
    );
}
