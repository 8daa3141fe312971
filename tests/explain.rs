//! `kube-reloader explain`, `lint` and `/debug/explain` against the real control plane: every
//! verdict explain prints is checked against what the controller then does when the config
//! changes (reload, or none), with one controller for all the cases.
//!
//! Outputs are also written under `$KUBE_RELOADER_CACHE/explain-docs/` (docs/troubleshooting.md
//! shows them).

mod common;

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};

use common::objects::*;
use common::{Controller, TestNamespace, http_get, kubeconfig_path};

/// Where the outputs shown in the docs are written.
fn docs_dir() -> PathBuf {
    let cache = std::env::var("KUBE_RELOADER_CACHE").unwrap_or_else(|_| {
        format!(
            "{}/.cache/kube-reloader",
            std::env::var("HOME").unwrap_or_default()
        )
    });
    let dir = PathBuf::from(cache).join("explain-docs");
    std::fs::create_dir_all(&dir).expect("creating the docs output directory");
    dir
}

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

fn run_binary(program: &std::path::Path, args: &[&str]) -> Run {
    let out = Command::new(program)
        .args(args)
        .env("KUBECONFIG", kubeconfig_path())
        .output()
        .expect("running kube-reloader");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into(),
        stderr: String::from_utf8_lossy(&out.stderr).into(),
    }
}

fn kube_reloader(args: &[&str]) -> Run {
    run_binary(env!("CARGO_BIN_EXE_kube-reloader").as_ref(), args)
}

/// `explain ... -o json`, asserting it succeeded.
fn explain_json(args: &[&str]) -> Value {
    let mut all = vec!["explain"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["-o", "json"]);
    let r = kube_reloader(&all);
    assert_eq!(r.code, 0, "explain {args:?} failed: {}", r.stderr);
    serde_json::from_str(&r.stdout).unwrap_or_else(|e| panic!("{e}: {}", r.stdout))
}

/// One (workload, config) case: what explain must say, and so what the controller must do.
struct Case {
    workload: &'static str,
    config: &'static str,
    /// `explicit_list`, `auto`, `search`, or the no-reason.
    reason: &'static str,
}

impl Case {
    fn reloads(&self) -> bool {
        matches!(self.reason, "explicit_list" | "auto" | "search")
    }
    fn var(&self) -> String {
        format!(
            "STAKATER_{}_CONFIGMAP",
            self.config.to_uppercase().replace('-', "_")
        )
    }
}

const CASES: &[Case] = &[
    Case {
        workload: "auto-yes",
        config: "c-auto",
        reason: "auto",
    },
    Case {
        workload: "list-yes",
        config: "c-list",
        reason: "explicit_list",
    },
    Case {
        workload: "search-yes",
        config: "c-match",
        reason: "search",
    },
    Case {
        workload: "ignored",
        config: "c-ignored",
        reason: "config_ignored",
    },
    Case {
        workload: "excluded",
        config: "c-excl",
        reason: "excluded",
    },
    Case {
        workload: "search-no",
        config: "c-nomatch",
        reason: "search_without_match",
    },
    Case {
        workload: "auto-false",
        config: "c-autofalse",
        reason: "auto_false",
    },
    Case {
        workload: "typed-false",
        config: "c-typedfalse",
        reason: "typed_auto_false",
    },
    Case {
        workload: "typed-other",
        config: "c-typedother",
        reason: "typed_auto_of_another_type",
    },
    Case {
        workload: "not-listed",
        config: "c-notlisted",
        reason: "not_in_reload_list",
    },
    Case {
        workload: "unreferenced",
        config: "c-unref",
        reason: "not_referenced",
    },
    Case {
        workload: "plain",
        config: "c-plain",
        reason: "not_opted_in",
    },
    Case {
        workload: "unlabelled",
        config: "c-unlabelled",
        reason: "config_not_selected",
    },
];

/// The workload of each case, using its config as the case needs.
fn case_workload(case: &Case) -> Value {
    let uses = env_from_configs(&[case.config], &[]);
    let d = |annotations: Value, container: Value| {
        deployment(case.workload, annotations, pod_spec(container, json!([])))
    };
    match case.workload {
        "list-yes" => d(
            json!({"configmap.reloader.stakater.com/reload": "c-list"}),
            json!({}),
        ),
        "search-yes" | "search-no" => d(json!({"reloader.stakater.com/search": "true"}), uses),
        "excluded" => d(
            json!({"reloader.stakater.com/auto": "true",
                   "configmaps.exclude.reloader.stakater.com/reload": "c-excl"}),
            uses,
        ),
        "auto-false" => d(json!({"reloader.stakater.com/auto": "false"}), uses),
        "typed-false" => d(
            json!({"configmap.reloader.stakater.com/auto": "false"}),
            uses,
        ),
        "typed-other" => d(json!({"secret.reloader.stakater.com/auto": "true"}), uses),
        "not-listed" => d(
            json!({"configmap.reloader.stakater.com/reload": "other"}),
            uses,
        ),
        "unreferenced" => d(json!({"reloader.stakater.com/auto": "true"}), json!({})),
        "plain" => d(json!({}), uses),
        _ => d(json!({"reloader.stakater.com/auto": "true"}), uses),
    }
}

fn case_config(case: &Case, token: &str) -> Value {
    let labels = if case.config == "c-unlabelled" {
        json!({})
    } else {
        json!({ "explain-test": token })
    };
    let annotations = match case.config {
        "c-ignored" => json!({"reloader.stakater.com/ignore": "true"}),
        "c-match" => json!({"reloader.stakater.com/match": "true"}),
        _ => json!({}),
    };
    let mut cm = with_labels(configmap(case.config, json!({"k": "v1"})), labels);
    cm["metadata"]["annotations"] = annotations;
    cm
}

/// A Deployment holding the controller's flags, read back with `--from-deployment` (nothing
/// runs it: the test cluster has no kubelet).
fn controller_deployment(args: &[String]) -> Value {
    deployment(
        "kube-reloader",
        json!({}),
        json!({"containers": [{"name": "kube-reloader", "image": "kube-reloader:dev", "args": args}]}),
    )
}

fn verdict_of(explained: &Value, config: &str) -> (bool, String) {
    let c = explained["configs"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["name"] == config))
        .unwrap_or_else(|| panic!("no config {config} in {explained:#}"));
    (
        c["reload"].as_bool().unwrap(),
        c["reason"].as_str().unwrap().to_string(),
    )
}

#[tokio::test]
async fn verdicts_match_what_the_controller_does() {
    let token = unique_token("explain");
    let label = "kube-reloader-test/explain";
    let ns = TestNamespace::with_labels("explain-a", json!({ label: token })).await;
    let ignored = TestNamespace::with_labels("explain-ign", json!({ label: token })).await;
    let unselected = TestNamespace::new("explain-sel").await;
    let c = &ns.client;
    for case in CASES {
        create(c, &ns.name, case_config(case, &token)).await;
        create(c, &ns.name, case_workload(case)).await;
    }
    // A CronJob (--ignored-workload-types) and a Secret user (--resources-to-ignore=secrets).
    create(
        c,
        &ns.name,
        with_labels(
            configmap("c-cron", json!({"k": "v1"})),
            json!({"explain-test": token}),
        ),
    )
    .await;
    create(
        c,
        &ns.name,
        cronjob(
            "nightly",
            json!({"reloader.stakater.com/auto": "true"}),
            pod_spec(env_from_configs(&["c-cron"], &[]), json!([])),
        ),
    )
    .await;
    create(
        c,
        &ns.name,
        with_labels(
            secret_bytes("s-db", &[("k", b"v1")]),
            json!({"explain-test": token}),
        ),
    )
    .await;
    create(
        c,
        &ns.name,
        auto_deployment("secret-user", json!({}), env_from_configs(&[], &["s-db"])),
    )
    .await;
    for other in [&ignored, &unselected] {
        create(
            c,
            &other.name,
            with_labels(
                configmap("c-auto", json!({"k": "v1"})),
                json!({"explain-test": token}),
            ),
        )
        .await;
        create(
            c,
            &other.name,
            auto_deployment("auto-yes", json!({}), env_from_configs(&["c-auto"], &[])),
        )
        .await;
    }
    let args: Vec<String> = vec![
        format!("--namespace-selector={label}={token}"),
        format!("--namespaces-to-ignore=kube-system,{}", ignored.name),
        format!("--resource-label-selector=explain-test={token}"),
        "--ignored-workload-types=cronjobs".into(),
        "--resources-to-ignore=secrets".into(),
    ];
    create(c, &ns.name, controller_deployment(&args)).await;
    let from = format!("{}/kube-reloader", ns.name);
    let from_args = ["--from-deployment", from.as_str()];

    // 1. What explain says, before anything changes.
    let explain = |target: &str, namespace: &str, config: &str| {
        let mut a = vec![target, "-n", namespace, "--for", config];
        a.extend_from_slice(&from_args);
        explain_json(&a)
    };
    for case in CASES {
        let e = explain(
            &format!("deployment/{}", case.workload),
            &ns.name,
            &format!("configmap/{}", case.config),
        );
        let (reload, reason) = verdict_of(&e, case.config);
        assert_eq!(reason, case.reason, "{}: {e:#}", case.workload);
        assert_eq!(reload, case.reloads(), "{}", case.workload);
    }
    let scoped: [(&str, &str, &str, &str); 4] = [
        (
            "cronjob/nightly",
            &ns.name,
            "configmap/c-cron",
            "ignored_workload_type",
        ),
        (
            "deployment/secret-user",
            &ns.name,
            "secret/s-db",
            "config_type_not_watched",
        ),
        (
            "deployment/auto-yes",
            &ignored.name,
            "configmap/c-auto",
            "namespace_ignored",
        ),
        (
            "deployment/auto-yes",
            &unselected.name,
            "configmap/c-auto",
            "namespace_not_selected",
        ),
    ];
    for (target, namespace, config, reason) in scoped {
        let e = explain(target, namespace, config);
        let name = config.split_once('/').unwrap().1;
        assert_eq!(
            verdict_of(&e, name),
            (false, reason.to_string()),
            "{target} in {namespace}"
        );
    }
    // The verdicts the docs show.
    let text = kube_reloader(&[
        "explain",
        "deployment/excluded",
        "-n",
        &ns.name,
        "--from-deployment",
        &from,
    ]);
    assert_eq!(text.code, 0, "{}", text.stderr);
    assert!(
        text.stdout.contains("reload on change: no (excluded)"),
        "{}",
        text.stdout
    );
    std::fs::write(docs_dir().join("explain-excluded.txt"), &text.stdout).unwrap();

    // 2. What the controller does. "No" changes first: once the "yes" ones are seen reloaded,
    // the earlier events of the same watch were handled too.
    let controller = Controller::start(&args.iter().map(String::as_str).collect::<Vec<_>>()).await;
    debug_explain_matches_the_cli(&controller, &ns, &unselected, &from_args).await;
    for case in CASES.iter().filter(|c| !c.reloads()) {
        set_configmap_data(c, &ns.name, case.config, json!({"k": "v2"})).await;
    }
    set_configmap_data(c, &ns.name, "c-cron", json!({"k": "v2"})).await;
    set_secret_data(c, &ns.name, "s-db", json!({"k": "v2"})).await;
    for other in [&ignored, &unselected] {
        set_configmap_data(c, &other.name, "c-auto", json!({"k": "v2"})).await;
    }
    for case in CASES.iter().filter(|c| c.reloads()) {
        set_configmap_data(c, &ns.name, case.config, json!({"k": "v2"})).await;
    }
    let v2 = configmap_hash(&[("k", "v2")]);
    for case in CASES.iter().filter(|c| c.reloads()) {
        wait_for_env_state(c, &ns.name, case.workload, &case.var(), Some(&v2), 20).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    for case in CASES.iter().filter(|c| !c.reloads()) {
        assert!(
            deployment_reload_vars(c, &ns.name, case.workload)
                .await
                .is_empty(),
            "{} was reloaded, explain said no ({})",
            case.workload,
            case.reason
        );
    }
    assert!(
        deployment_reload_vars(c, &ns.name, "secret-user")
            .await
            .is_empty()
    );
    for other in [&ignored, &unselected] {
        assert!(
            deployment_reload_vars(c, &other.name, "auto-yes")
                .await
                .is_empty()
        );
    }
    let jobs = kube::Api::<k8s_openapi::api::batch::v1::Job>::namespaced(c.clone(), &ns.name)
        .list(&Default::default())
        .await
        .unwrap();
    assert!(jobs.items.is_empty(), "the ignored CronJob was run");

    // 3. After the reload: in sync, and the Reloaded event is shown.
    let e = explain("deployment/auto-yes", &ns.name, "configmap/c-auto");
    assert_eq!(e["configs"][0]["hashState"], "inSync", "{e:#}");
    assert_eq!(e["configs"][0]["container"], "app");
    let events = e["lastReload"]["events"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(events.iter().any(|ev| ev["reason"] == "Reloaded"), "{e:#}");
    let text = kube_reloader(&[
        "explain",
        "deployment/auto-yes",
        "-n",
        &ns.name,
        "--from-deployment",
        &from,
    ]);
    std::fs::write(docs_dir().join("explain-auto-yes.txt"), &text.stdout).unwrap();

    // 4. A change while the controller is down: pending, and rolled when it next starts.
    let _ = controller.stop().await;
    set_configmap_data(c, &ns.name, "c-auto", json!({"k": "v3"})).await;
    let e = explain("deployment/auto-yes", &ns.name, "configmap/c-auto");
    assert_eq!(e["configs"][0]["hashState"], "pending", "{e:#}");
    let text = kube_reloader(&[
        "explain",
        "deployment/auto-yes",
        "-n",
        &ns.name,
        "--for",
        "configmap/c-auto",
        "--from-deployment",
        &from,
    ]);
    std::fs::write(docs_dir().join("explain-pending.txt"), &text.stdout).unwrap();
    let _controller = Controller::start(&args.iter().map(String::as_str).collect::<Vec<_>>()).await;
    let v3 = configmap_hash(&[("k", "v3")]);
    wait_for_env_state(
        c,
        &ns.name,
        "auto-yes",
        "STAKATER_C_AUTO_CONFIGMAP",
        Some(&v3),
        20,
    )
    .await;
}

/// `/debug/explain` gives the CLI's verdicts for the configs the controller indexed, with the
/// shard and queue state; a namespace outside the selection is not indexed.
async fn debug_explain_matches_the_cli(
    controller: &Controller,
    ns: &TestNamespace,
    unselected: &TestNamespace,
    from_args: &[&str],
) {
    let get = |namespace: &str, name: &str| {
        format!(
            "http://127.0.0.1:{}/debug/explain?kind=Deployment&namespace={namespace}&name={name}",
            controller.metrics_port
        )
    };
    let get_for = |namespace: &str, name: &str, config: &str| {
        format!("{}&config=configmap/{config}", get(namespace, name))
    };
    for case in CASES.iter().filter(|c| c.config != "c-unlabelled") {
        let url = get_for(&ns.name, case.workload, case.config);
        let (code, body) = http_get(&url).await.unwrap();
        assert_eq!(code, 200, "{body}");
        let live: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(live["indexed"], true, "{body}");
        assert_eq!(live["shard"]["ownedHere"], true);
        assert_eq!(live["queue"]["state"], "idle", "{body}");
        let mut a = vec![
            format!("deployment/{}", case.workload),
            "-n".into(),
            ns.name.clone(),
            "--for".into(),
            format!("configmap/{}", case.config),
        ];
        a.extend(from_args.iter().map(|s| s.to_string()));
        let cli = explain_json(&a.iter().map(String::as_str).collect::<Vec<_>>());
        let live_explained = &live["explanation"];
        assert_eq!(
            verdict_of(live_explained, case.config),
            verdict_of(&cli, case.config),
            "{}: live {body}",
            case.workload
        );
        if case.workload == "excluded" {
            std::fs::write(docs_dir().join("debug-explain-excluded.json"), &body).unwrap();
        }
    }
    let (code, body) = http_get(&get(&unselected.name, "auto-yes")).await.unwrap();
    assert_eq!(code, 200);
    let live: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(live["indexed"], false, "{body}");
    assert_eq!(live["shard"]["selected"], false, "{body}");
    let (code, _) = http_get(&format!(
        "http://127.0.0.1:{}/debug/explain?kind=ReplicaSet&namespace=a&name=b",
        controller.metrics_port
    ))
    .await
    .unwrap();
    assert_eq!(code, 400);
}

#[tokio::test]
async fn lint_reports_each_finding_and_fails_on_errors() {
    let ns = TestNamespace::new("explain-lint").await;
    let c = &ns.client;
    create(c, &ns.name, configmap("cfg", json!({"k": "v"}))).await;
    create(c, &ns.name, secret_bytes("db", &[("k", b"v")])).await;
    let uses_cfg = || env_from_configs(&["cfg"], &[]);
    let workloads = [
        deployment(
            "missing",
            json!({"configmap.reloader.stakater.com/reload": "cfg,nope"}),
            pod_spec(json!({}), json!([])),
        ),
        deployment(
            "bad-regex",
            json!({"configmap.reloader.stakater.com/reload": "cfg,bad["}),
            pod_spec(json!({}), json!([])),
        ),
        auto_deployment(
            "bad-pause",
            json!({"deployment.reloader.stakater.com/pause-period": "5 minutes"}),
            uses_cfg(),
        ),
        deployment(
            "bad-bool",
            json!({"reloader.stakater.com/auto": "yes"}),
            pod_spec(uses_cfg(), json!([])),
        ),
        auto_deployment("nothing", json!({}), json!({})),
        deployment(
            "typed-no-config",
            json!({"secret.reloader.stakater.com/auto": "true"}),
            pod_spec(uses_cfg(), json!([])),
        ),
        deployment(
            "conflict",
            json!({"configmap.reloader.stakater.com/reload": "cfg",
                   "configmaps.exclude.reloader.stakater.com/reload": "cfg"}),
            pod_spec(json!({}), json!([])),
        ),
        deployment(
            "search",
            json!({"reloader.stakater.com/search": "true"}),
            pod_spec(uses_cfg(), json!([])),
        ),
        auto_deployment("secret-user", json!({}), env_from_configs(&[], &["db"])),
        deployment(
            "typo",
            json!({"reloader.stakater.com/atuo": "true"}),
            pod_spec(uses_cfg(), json!([])),
        ),
    ];
    let typo_config = with_annotations(
        configmap("typo-cfg", json!({"k": "v"})),
        json!({"reloader.stakater.com/ignor": "true"}),
    );
    create(c, &ns.name, typo_config).await;
    for w in workloads {
        create(c, &ns.name, w).await;
    }
    let r = kube_reloader(&[
        "lint",
        "-n",
        &ns.name,
        "--resources-to-ignore=secrets",
        "-o",
        "json",
    ]);
    assert_eq!(
        r.code, 1,
        "lint must fail on errors: {}{}",
        r.stdout, r.stderr
    );
    let findings: Vec<Value> = serde_json::from_str(&r.stdout).unwrap();
    let has = |workload: &str, check: &str, severity: &str| {
        findings
            .iter()
            .any(|f| f["name"] == workload && f["check"] == check && f["severity"] == severity)
    };
    let expected = [
        ("missing", "missing-config", "error"),
        ("bad-regex", "invalid-regex", "error"),
        ("bad-pause", "invalid-pause-period", "error"),
        ("bad-bool", "invalid-bool", "error"),
        ("nothing", "nothing-to-act-on", "warning"),
        ("typed-no-config", "typed-auto-without-config", "warning"),
        ("conflict", "exclude-conflict", "error"),
        ("search", "search-without-match", "warning"),
        ("secret-user", "config-type-ignored", "error"),
        ("typo", "unknown-annotation", "error"),
        ("typo-cfg", "unknown-annotation", "error"),
    ];
    for (workload, check, severity) in expected {
        assert!(
            has(workload, check, severity),
            "no {severity} {check} for {workload}: {:#}",
            json!(findings)
        );
    }
    let message = |name: &str| {
        findings
            .iter()
            .find(|f| f["name"] == name && f["check"] == "unknown-annotation")
            .map(|f| (f["kind"].clone(), f["message"].clone()))
    };
    assert_eq!(
        message("typo"),
        Some((
            json!("Deployment"),
            json!(
                "unknown annotation reloader.stakater.com/atuo: did you mean \
                 reloader.stakater.com/auto?"
            )
        ))
    );
    assert_eq!(
        message("typo-cfg"),
        Some((
            json!("ConfigMap"),
            json!(
                "unknown annotation reloader.stakater.com/ignor: did you mean \
                 reloader.stakater.com/ignore?"
            )
        ))
    );
    // Where each annotation is read from: the metadata's reload list hides the template's
    // annotations for ConfigMaps only; an exclude list on the template is never read.
    let shadowed = with_template_annotations(
        deployment(
            "shadowed",
            json!({"configmap.reloader.stakater.com/reload": "cfg-.*,bad["}),
            pod_spec(env_from_configs(&["cfg"], &["db"]), json!([])),
        ),
        json!({"reloader.stakater.com/auto": "yes",
               "configmaps.exclude.reloader.stakater.com/reload": "cfg"}),
    );
    create(c, &ns.name, shadowed).await;
    let e = explain_json(&["deployment/shadowed", "-n", &ns.name]);
    let reads = e["annotations"].as_array().unwrap();
    let read = |key: &str, read: bool| {
        reads
            .iter()
            .find(|a| a["key"] == key && a["read"] == read)
            .unwrap_or_else(|| panic!("{key} read={read}: {e:#}"))
    };
    let auto = read("reloader.stakater.com/auto", true);
    assert_eq!(auto["source"], "podTemplate");
    assert_eq!(auto["kinds"], json!(["secret", "secretproviderclass"]));
    assert!(auto["problem"].as_str().unwrap().contains("not a boolean"));
    assert_eq!(
        read("reloader.stakater.com/auto", false)["kinds"],
        json!(["configmap"])
    );
    assert!(
        read("configmap.reloader.stakater.com/reload", true)["problem"]
            .as_str()
            .unwrap()
            .contains("bad[")
    );
    assert_eq!(
        read("configmaps.exclude.reloader.stakater.com/reload", false)["source"],
        "podTemplate"
    );
    // auto "yes" reads as false for secrets; configmaps only follow the list, which misses cfg.
    assert_eq!(verdict_of(&e, "db"), (false, "auto_false".to_string()));
    assert_eq!(
        verdict_of(&e, "cfg"),
        (false, "not_in_reload_list".to_string())
    );
    let text = kube_reloader(&["explain", "deployment/shadowed", "-n", &ns.name]);
    std::fs::write(docs_dir().join("explain-shadowed.txt"), &text.stdout).unwrap();

    let text = kube_reloader(&["lint", "-n", &ns.name, "--resources-to-ignore=secrets"]);
    assert_eq!(text.code, 1);
    std::fs::write(docs_dir().join("lint.txt"), &text.stdout).unwrap();

    // A namespace whose annotations are fine: no finding, exit code 0.
    let clean = TestNamespace::new("explain-lint-ok").await;
    create(c, &clean.name, configmap("cfg", json!({"k": "v"}))).await;
    create(
        c,
        &clean.name,
        auto_deployment("web", json!({}), uses_cfg()),
    )
    .await;
    let r = kube_reloader(&["lint", "-n", &clean.name]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("0 finding(s)"), "{}", r.stdout);
}

#[tokio::test]
async fn works_as_a_kubectl_plugin() {
    let ns = TestNamespace::new("explain-plugin").await;
    let c = &ns.client;
    create(c, &ns.name, configmap("cfg", json!({"k": "v"}))).await;
    create(
        c,
        &ns.name,
        auto_deployment("web", json!({}), env_from_configs(&["cfg"], &[])),
    )
    .await;
    // The Makefile's target links the binary under test as the plugin.
    let dir = std::env::temp_dir().join(format!("kubectl-plugin-{}", std::process::id()));
    let make = Command::new("make")
        .args(["-s", "-C", env!("CARGO_MANIFEST_DIR"), "kubectl-plugin"])
        .arg(format!("BIN={}", env!("CARGO_BIN_EXE_kube-reloader")))
        .arg(format!("PLUGIN_DIR={}", dir.display()))
        .output()
        .expect("running make kubectl-plugin");
    assert!(
        make.status.success(),
        "{}",
        String::from_utf8_lossy(&make.stderr)
    );
    let link = dir.join("kubectl-reloader");
    assert!(
        String::from_utf8_lossy(&make.stdout)
            .trim()
            .ends_with("kubectl-reloader")
    );
    assert!(
        std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    let kubectl = common::helm::kubectl();
    let path = format!(
        "{}:{}",
        dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new(kubectl)
        .args([
            "reloader",
            "explain",
            "deployment/web",
            "-n",
            &ns.name,
            "--for",
            "configmap/cfg",
        ])
        .env("PATH", &path)
        .env("KUBECONFIG", kubeconfig_path())
        .output()
        .expect("running kubectl");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.starts_with("Would a change of configmap/cfg reload it? yes"),
        "{stdout}"
    );
    std::fs::write(
        docs_dir().join("kubectl-reloader-explain.txt"),
        stdout.as_bytes(),
    )
    .unwrap();
    // As a plugin, no subcommand shows the help instead of starting a controller.
    let out = Command::new(kubectl)
        .args(["reloader"])
        .env("PATH", &path)
        .env("KUBECONFIG", kubeconfig_path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stdout).contains("explain"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The scope reasons a `--namespaces` controller gives: a namespace it does not list, and a
/// workload kind it does not watch (Argo Rollouts without `--is-Argo-Rollouts`). The flags are
/// given to explain directly, as a user would.
#[tokio::test]
async fn scope_verdicts_of_a_namespaced_controller() {
    let ns = TestNamespace::new("explain-scope").await;
    let other = TestNamespace::new("explain-scope-b").await;
    let c = &ns.client;
    common::crds::ensure(c, &[common::crds::ARGO_ROLLOUTS]).await;
    for name in ["c-canary", "c-ro"] {
        create(c, &ns.name, configmap(name, json!({"k": "v1"}))).await;
    }
    create(c, &other.name, configmap("c-auto", json!({"k": "v1"}))).await;
    create(
        c,
        &ns.name,
        auto_deployment("canary", json!({}), env_from_configs(&["c-canary"], &[])),
    )
    .await;
    let mut rollout = auto_deployment("ro", json!({}), env_from_configs(&["c-ro"], &[]));
    rollout["apiVersion"] = json!("argoproj.io/v1alpha1");
    rollout["kind"] = json!("Rollout");
    create(c, &ns.name, rollout).await;
    create(
        c,
        &other.name,
        auto_deployment("web", json!({}), env_from_configs(&["c-auto"], &[])),
    )
    .await;
    let scope = format!("--namespaces={}", ns.name);
    let cases = [
        (
            "deployment/canary",
            &ns.name,
            "configmap/c-canary",
            true,
            "auto",
        ),
        (
            "rollout/ro",
            &ns.name,
            "configmap/c-ro",
            false,
            "workload_kind_not_watched",
        ),
        (
            "deployment/web",
            &other.name,
            "configmap/c-auto",
            false,
            "namespace_not_watched",
        ),
    ];
    for (target, namespace, config, reload, reason) in cases {
        let e = explain_json(&[target, "-n", namespace, "--for", config, &scope]);
        let name = config.split_once('/').unwrap().1;
        assert_eq!(
            verdict_of(&e, name),
            (reload, reason.to_string()),
            "{target}"
        );
    }
    // --webhook-url: changes call the webhook instead (its behaviour: tests/reload_filters.rs).
    let e = explain_json(&[
        "deployment/canary",
        "-n",
        &ns.name,
        "--for",
        "configmap/c-canary",
        &scope,
        "--webhook-url=http://127.0.0.1:1/hook",
    ]);
    assert_eq!(
        verdict_of(&e, "c-canary"),
        (false, "webhook_mode".to_string())
    );

    let _controller = Controller::start(&[&scope]).await;
    set_configmap_data(c, &ns.name, "c-ro", json!({"k": "v2"})).await;
    set_configmap_data(c, &other.name, "c-auto", json!({"k": "v2"})).await;
    set_configmap_data(c, &ns.name, "c-canary", json!({"k": "v2"})).await;
    let v2 = configmap_hash(&[("k", "v2")]);
    wait_for_env_state(
        c,
        &ns.name,
        "canary",
        "STAKATER_C_CANARY_CONFIGMAP",
        Some(&v2),
        20,
    )
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let ro = get(c, &ns.name, "argoproj.io/v1alpha1", "Rollout", "ro")
        .await
        .unwrap();
    assert_eq!(
        env_value(&ro, "/spec/template", "STAKATER_C_RO_CONFIGMAP"),
        None
    );
    assert!(
        deployment_reload_vars(c, &other.name, "web")
            .await
            .is_empty()
    );
}

// ---- Agreement: explain's verdict is what the controller does, row by row ----

/// The controller flags a row runs under; one controller per set, many rows per controller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FlagSet {
    /// Every namespace, with every filter: namespace selector, ignored namespace, resource label
    /// selector, ignored workload types, and the default `--ignore-secret-types`.
    Filters,
    /// `--namespaces=<one>`, `--auto-reload-all`, `--ignore-secret-types=kubernetes.io/tls`.
    Scoped,
}

/// Which namespace of the set a row lives in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    /// Selected (Filters) or listed (Scoped).
    Main,
    /// In `--namespaces-to-ignore` (Filters).
    Ignored,
    /// Neither selected nor listed.
    Outside,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Deployment,
    CronJob,
    Job,
}

/// One row: a config and the one workload that may use it, what explain must answer, and so
/// what the controller must do when the config changes.
struct Row {
    /// The workload's and the config's name.
    name: &'static str,
    set: FlagSet,
    place: Place,
    kind: Kind,
    annotations: Value,
    /// The pod template reads the config (envFrom); else it does not use it.
    uses: bool,
    /// `None`: a ConfigMap; else a Secret of this type.
    secret_type: Option<&'static str>,
    config_annotations: Value,
    /// Carries the label `--resource-label-selector` (Filters) asks for.
    labelled: bool,
    /// Explain's reason: `auto`, `search`, `explicit_list` (reloads) or the no-reason.
    reason: &'static str,
}

impl Row {
    fn new(name: &'static str, set: FlagSet, annotations: Value, reason: &'static str) -> Self {
        Row {
            name,
            set,
            place: Place::Main,
            kind: Kind::Deployment,
            annotations,
            uses: true,
            secret_type: None,
            config_annotations: json!({}),
            labelled: true,
            reason,
        }
    }
    fn secret(mut self, secret_type: &'static str) -> Self {
        self.secret_type = Some(secret_type);
        self
    }
    fn at(mut self, place: Place) -> Self {
        self.place = place;
        self
    }
    fn kind(mut self, kind: Kind) -> Self {
        self.kind = kind;
        self
    }
    fn config_annotations(mut self, annotations: Value) -> Self {
        self.config_annotations = annotations;
        self
    }
    fn unused(mut self) -> Self {
        self.uses = false;
        self
    }
    fn unlabelled(mut self) -> Self {
        self.labelled = false;
        self
    }
    fn reloads(&self) -> bool {
        matches!(self.reason, "explicit_list" | "auto" | "search")
    }
    fn target(&self) -> String {
        let kind = match self.kind {
            Kind::Deployment => "deployment",
            Kind::CronJob => "cronjob",
            Kind::Job => "job",
        };
        format!("{kind}/{}", self.name)
    }
    fn config_target(&self) -> String {
        let kind = if self.secret_type.is_some() {
            "secret"
        } else {
            "configmap"
        };
        format!("{kind}/{}", self.name)
    }
}

fn agreement_rows() -> Vec<Row> {
    use FlagSet::{Filters, Scoped};
    let auto = || json!({"reloader.stakater.com/auto": "true"});
    vec![
        Row::new("helm-auto", Filters, auto(), "secret_type_ignored").secret("helm.sh/release.v1"),
        Row::new("opaque-auto", Filters, auto(), "auto").secret("Opaque"),
        Row::new("tls-auto", Filters, auto(), "auto").secret("kubernetes.io/tls"),
        Row::new("cm-auto", Filters, auto(), "auto"),
        Row::new("cm-ignored", Filters, auto(), "config_ignored")
            .config_annotations(json!({"reloader.stakater.com/ignore": "true"})),
        Row::new(
            "excluded",
            Filters,
            json!({"reloader.stakater.com/auto": "true",
                   "configmaps.exclude.reloader.stakater.com/reload": "excluded"}),
            "excluded",
        ),
        Row::new(
            "list-unref",
            Filters,
            json!({"configmap.reloader.stakater.com/reload": "list-unref"}),
            "explicit_list",
        )
        .unused(),
        Row::new(
            "search-match",
            Filters,
            json!({"reloader.stakater.com/search": "true"}),
            "search",
        )
        .config_annotations(json!({"reloader.stakater.com/match": "true"})),
        Row::new(
            "search-nomatch",
            Filters,
            json!({"reloader.stakater.com/search": "true"}),
            "search_without_match",
        ),
        Row::new("label-miss", Filters, auto(), "config_not_selected").unlabelled(),
        Row::new("ns-unselected", Filters, auto(), "namespace_not_selected").at(Place::Outside),
        Row::new("ns-ignored", Filters, auto(), "namespace_ignored").at(Place::Ignored),
        Row::new("cron-ignored", Filters, auto(), "ignored_workload_type").kind(Kind::CronJob),
        Row::new("job-ignored", Filters, auto(), "ignored_workload_type").kind(Kind::Job),
        Row::new(
            "typed-other",
            Filters,
            json!({"secret.reloader.stakater.com/auto": "true"}),
            "typed_auto_of_another_type",
        ),
        // A typo is no annotation at all, for the controller as for explain.
        Row::new(
            "typo",
            Filters,
            json!({"reloader.stakater.com/atuo": "true"}),
            "not_opted_in",
        ),
        Row::new("helm-watched", Scoped, auto(), "auto").secret("helm.sh/release.v1"),
        Row::new("tls-ignored", Scoped, auto(), "secret_type_ignored").secret("kubernetes.io/tls"),
        Row::new("all-plain", Scoped, json!({}), "auto").secret("Opaque"),
        Row::new(
            "all-optout",
            Scoped,
            json!({"reloader.stakater.com/auto": "false"}),
            "auto_false",
        ),
        Row::new("cron-yes", Scoped, auto(), "auto").kind(Kind::CronJob),
        Row::new("ns-unlisted", Scoped, auto(), "namespace_not_watched").at(Place::Outside),
    ]
}

/// The namespaces of one run and the flags of each set.
struct Agreement {
    token: String,
    filters: TestNamespace,
    ignored: TestNamespace,
    scoped: TestNamespace,
    outside: TestNamespace,
}

impl Agreement {
    async fn new() -> Self {
        let token = unique_token("agree");
        let selected = json!({ "kube-reloader-test/agree": token });
        Agreement {
            filters: TestNamespace::with_labels("agree-filters", selected.clone()).await,
            ignored: TestNamespace::with_labels("agree-ignored", selected).await,
            scoped: TestNamespace::new("agree-scoped").await,
            outside: TestNamespace::new("agree-outside").await,
            token,
        }
    }

    fn namespace(&self, row: &Row) -> &str {
        match (row.place, row.set) {
            (Place::Main, FlagSet::Filters) => &self.filters.name,
            (Place::Main, FlagSet::Scoped) => &self.scoped.name,
            (Place::Ignored, _) => &self.ignored.name,
            (Place::Outside, _) => &self.outside.name,
        }
    }

    fn flags(&self, set: FlagSet) -> Vec<String> {
        match set {
            FlagSet::Filters => vec![
                format!(
                    "--namespace-selector=kube-reloader-test/agree={}",
                    self.token
                ),
                format!("--namespaces-to-ignore=kube-system,{}", self.ignored.name),
                format!("--resource-label-selector=agree={}", self.token),
                "--ignored-workload-types=jobs,cronjobs".into(),
            ],
            FlagSet::Scoped => vec![
                format!("--namespaces={}", self.scoped.name),
                "--auto-reload-all".into(),
                "--ignore-secret-types=kubernetes.io/tls".into(),
            ],
        }
    }

    fn config(&self, row: &Row, value: &str) -> Value {
        let mut data = json!({ "k": value });
        match row.secret_type {
            Some("kubernetes.io/tls") => {
                data["tls.crt"] = json!("crt");
                data["tls.key"] = json!("key");
            }
            Some(_) => data["release"] = json!("r"),
            None => {}
        }
        let mut config = match row.secret_type {
            None => configmap(row.name, data),
            Some(t) => {
                let mut s = secret(row.name, data);
                s["type"] = json!(t);
                s
            }
        };
        let labels = match row.labelled {
            true => json!({ "agree": self.token }),
            false => json!({}),
        };
        config = with_labels(config, labels);
        with_annotations(config, row.config_annotations.clone())
    }
}

fn agreement_workload(row: &Row) -> Value {
    let container = match (row.uses, row.secret_type) {
        (false, _) => json!({}),
        (true, None) => env_from_configs(&[row.name], &[]),
        (true, Some(_)) => env_from_configs(&[], &[row.name]),
    };
    let spec = pod_spec(container, json!([]));
    let annotations = row.annotations.clone();
    match row.kind {
        Kind::Deployment => deployment(row.name, annotations, spec),
        Kind::CronJob => cronjob(row.name, annotations, spec),
        Kind::Job => job(row.name, annotations, spec),
    }
}

/// Whether the controller rolled the row's workload: a `STAKATER_*` var in the template
/// (Deployment, re-created Job), or a Job created from the CronJob.
async fn rolled(c: &kube::Client, ns: &str, row: &Row) -> bool {
    let has_var = |obj: &Value, pointer: &str| {
        template_env(obj, pointer, 0)
            .iter()
            .any(|(n, _)| n.starts_with("STAKATER_"))
    };
    match row.kind {
        Kind::Deployment => !deployment_reload_vars(c, ns, row.name).await.is_empty(),
        Kind::Job => get(c, ns, "batch/v1", "Job", row.name)
            .await
            .is_some_and(|j| has_var(&j, "/spec/template")),
        Kind::CronJob => {
            let jobs = kube::Api::<k8s_openapi::api::batch::v1::Job>::namespaced(c.clone(), ns)
                .list(&Default::default())
                .await
                .unwrap();
            jobs.items.iter().any(|j| {
                j.metadata
                    .owner_references
                    .iter()
                    .flatten()
                    .any(|o| o.kind == "CronJob" && o.name == row.name)
            })
        }
    }
}

/// Explain's verdict for every row, the rows run in parallel (each is one process).
fn explain_rows(a: &Agreement, rows: &[Row]) -> Vec<(bool, String)> {
    std::thread::scope(|s| {
        let handles: Vec<_> = rows
            .iter()
            .map(|row| {
                let mut args = vec![
                    row.target(),
                    "-n".into(),
                    a.namespace(row).to_string(),
                    "--for".into(),
                    row.config_target(),
                ];
                args.extend(a.flags(row.set));
                s.spawn(move || {
                    let args: Vec<&str> = args.iter().map(String::as_str).collect();
                    verdict_of(&explain_json(&args), row.name)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_agrees_with_the_controller_on_every_row() {
    let start = std::time::Instant::now();
    let a = Agreement::new().await;
    let rows = agreement_rows();
    let c = &a.filters.client;
    for row in &rows {
        create(c, a.namespace(row), a.config(row, "v1")).await;
        create(c, a.namespace(row), agreement_workload(row)).await;
    }
    let verdicts = tokio::task::block_in_place(|| explain_rows(&a, &rows));
    for (row, (reload, reason)) in rows.iter().zip(&verdicts) {
        assert_eq!(
            (*reload, reason.as_str()),
            (row.reloads(), row.reason),
            "explain's verdict for {} ({:?})",
            row.name,
            row.set
        );
    }
    let helm = &rows[0];
    let mut args = vec!["explain".to_string(), helm.target(), "-n".into()];
    args.extend([
        a.namespace(helm).to_string(),
        "--for".into(),
        helm.config_target(),
    ]);
    args.extend(a.flags(helm.set));
    let text = kube_reloader(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(
        text.stdout
            .starts_with("Would a change of secret/helm-auto reload it? no")
    );
    std::fs::write(docs_dir().join("explain-helm-release.txt"), &text.stdout).unwrap();
    let flags: Vec<Vec<String>> = [FlagSet::Filters, FlagSet::Scoped]
        .map(|set| a.flags(set))
        .into();
    let mut controllers = Vec::new();
    for f in &flags {
        controllers
            .push(Controller::start(&f.iter().map(String::as_str).collect::<Vec<_>>()).await);
    }
    // "No" rows change first: each has "yes" rows of the same watch changed after it, so once
    // those are rolled, its own event was handled too (the positive barrier).
    let (yes, no): (Vec<&Row>, Vec<&Row>) = rows.iter().partition(|r| r.reloads());
    for row in no.iter().chain(&yes) {
        change_config(c, a.namespace(row), row).await;
    }
    let a = &a;
    let waits = yes.iter().map(|row| async move {
        let ns = a.namespace(row);
        common::wait_for(
            &format!("{} rolled ({})", row.name, row.reason),
            Duration::from_secs(30),
            move || async move {
                match rolled(c, ns, row).await {
                    true => Ok(()),
                    false => Err("not rolled".to_string()),
                }
            },
        )
        .await
    });
    futures::future::join_all(waits).await;
    for row in &no {
        assert!(
            !rolled(c, a.namespace(row), row).await,
            "{} was rolled, explain said no ({})",
            row.name,
            row.reason
        );
    }
    eprintln!(
        "{} rows, {} controllers, {:.1?}",
        rows.len(),
        controllers.len(),
        start.elapsed()
    );
}

async fn change_config(c: &kube::Client, ns: &str, row: &Row) {
    match row.secret_type {
        None => set_configmap_data(c, ns, row.name, json!({"k": "v2"})).await,
        Some(_) => set_secret_data(c, ns, row.name, json!({"k": "v2"})).await,
    }
}

/// Logs written to a pipe (as `kubectl logs` reads them) carry no colour escapes.
#[test]
fn logs_on_a_pipe_carry_no_colour_escapes() {
    let out = Command::new(env!("CARGO_BIN_EXE_kube-reloader"))
        .arg("--metrics-addr=127.0.0.1:0")
        .env("KUBECONFIG", "/nonexistent/kubeconfig")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("NO_COLOR")
        .env_remove("RUST_LOG")
        .output()
        .expect("running kube-reloader");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "{stdout}");
    assert!(stdout.contains("ERROR"), "an error is logged: {stdout}");
    assert!(!stdout.contains("\u{1b}["), "colour escapes: {stdout:?}");
}
