//! Shadow mode beside a controller that reloads (the incumbent), on the local control plane:
//! every reload the incumbent makes over a table of kinds and annotation forms is judged
//! `agree`; a deliberately different setting on one side is reported as `differ`,
//! `unpredicted` or `not-done` with its detail; and the API server's audit log shows no write
//! from the shadow replicas.
//!
//! In `make test` the incumbent is kube-reloader itself (normal mode). `make shadow-test` runs
//! the same scenario beside stakater/Reloader v1.4.21, built from its source
//! (`hack/reloader-binary.sh`), under both strategies: it needs a Reloader clone, so it is its
//! own target (the test below is `#[ignore]`d in `make test` and run there by name).

mod common;

use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::Duration;

use serde_json::{Value, json};

use common::objects::*;
use common::{Controller, TestNamespace, http_get, kubeconfig_path, wait_for};

/// Short, so that the verdicts that wait for it (`differ`, `not-done`, `unpredicted`) come
/// within the test.
const WINDOW: &str = "12s";
const WINDOW_WAIT: Duration = Duration::from_secs(40);

/// One row: a config, a workload that uses it, and whether a change of the config reloads it.
struct Row {
    name: &'static str,
    config: fn(&str) -> Value,
    workload: fn(&str, &str) -> Value,
    reloads: bool,
}

fn cm(name: &str) -> Value {
    configmap(name, json!({"k": "v1"}))
}

fn secret_of(name: &str) -> Value {
    secret(name, json!({"k": "v1"}))
}

fn rows() -> Vec<Row> {
    vec![
        Row {
            name: "deployment-auto-configmap-env",
            config: cm,
            workload: |name, config| {
                deployment(
                    name,
                    json!({"reloader.stakater.com/auto": "true"}),
                    pod_spec(env_from_configmap(config), json!([])),
                )
            },
            reloads: true,
        },
        Row {
            name: "statefulset-named-secret",
            config: secret_of,
            workload: |name, config| {
                statefulset(
                    name,
                    json!({"secret.reloader.stakater.com/reload": config}),
                    pod_spec(env_from_secret(config), json!([])),
                )
            },
            reloads: true,
        },
        Row {
            name: "daemonset-typed-auto-volume",
            config: cm,
            workload: |name, config| {
                let container = json!({"name": "app", "image": "app",
                    "volumeMounts": [{"name": "c", "mountPath": "/c"}]});
                let volumes = json!([{"name": "c", "configMap": {"name": config}}]);
                daemonset(
                    name,
                    json!({"configmap.reloader.stakater.com/auto": "true"}),
                    pod_spec(container, volumes),
                )
            },
            reloads: true,
        },
        Row {
            name: "deployment-regex-list",
            config: cm,
            workload: |name, config| {
                let pattern = format!("{}-.*", config.rsplit_once('-').unwrap().0);
                deployment(
                    name,
                    json!({"configmap.reloader.stakater.com/reload": pattern}),
                    pod_spec(env_from_configmap(config), json!([])),
                )
            },
            reloads: true,
        },
        Row {
            name: "deployment-search-match",
            config: |name| {
                with_annotations(cm(name), json!({"reloader.stakater.com/match": "true"}))
            },
            workload: |name, config| {
                deployment(
                    name,
                    json!({"reloader.stakater.com/search": "true"}),
                    pod_spec(env_from_configmap(config), json!([])),
                )
            },
            reloads: true,
        },
        Row {
            name: "cronjob-auto-secret",
            config: secret_of,
            workload: |name, config| {
                cronjob(
                    name,
                    json!({"reloader.stakater.com/auto": "true"}),
                    pod_spec(env_from_secret(config), json!([])),
                )
            },
            reloads: true,
        },
        Row {
            name: "job-auto-configmap",
            config: cm,
            workload: |name, config| {
                job(
                    name,
                    json!({"reloader.stakater.com/auto": "true"}),
                    pod_spec(env_from_configmap(config), json!([])),
                )
            },
            reloads: true,
        },
        Row {
            name: "deployment-auto-excluded",
            config: cm,
            workload: |name, config| {
                deployment(
                    name,
                    json!({"reloader.stakater.com/auto": "true",
                    "configmaps.exclude.reloader.stakater.com/reload": config}),
                    pod_spec(env_from_configmap(config), json!([])),
                )
            },
            reloads: false,
        },
        Row {
            name: "deployment-auto-ignored-config",
            config: |name| {
                with_annotations(cm(name), json!({"reloader.stakater.com/ignore": "true"}))
            },
            workload: |name, config| {
                deployment(
                    name,
                    json!({"reloader.stakater.com/auto": "true"}),
                    pod_spec(env_from_configmap(config), json!([])),
                )
            },
            reloads: false,
        },
    ]
}

/// The controller that reloads, as a process stopped on drop.
enum Incumbent {
    KubeReloader(Controller),
    Reloader(ReloaderProcess),
}

struct ReloaderProcess {
    child: Child,
    log: PathBuf,
}

impl Drop for ReloaderProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Incumbent {
    fn logs(&self) -> String {
        match self {
            Incumbent::KubeReloader(c) => c.logs(),
            Incumbent::Reloader(r) => std::fs::read_to_string(&r.log).unwrap_or_default(),
        }
    }
}

/// stakater/Reloader's binary, as `make shadow-test` passes it.
fn reloader_binary() -> PathBuf {
    let bin = std::env::var_os("RELOADER_BIN").expect(
        "RELOADER_BIN is not set: run `make shadow-test`, which builds stakater/Reloader \
         (hack/reloader-binary.sh) and passes its path",
    );
    let bin = PathBuf::from(bin);
    assert!(
        bin.is_file(),
        "RELOADER_BIN={} is not a file",
        bin.display()
    );
    bin
}

async fn start_reloader(args: &[String]) -> Incumbent {
    let log = std::env::temp_dir().join(format!("stakater-reloader-{}.log", common::free_port()));
    let file = std::fs::File::create(&log).unwrap();
    let child = Command::new(reloader_binary())
        .args(args)
        .env("KUBECONFIG", kubeconfig_path())
        .stdout(file.try_clone().unwrap())
        .stderr(file)
        .spawn()
        .expect("starting stakater/Reloader");
    let process = ReloaderProcess { child, log };
    // Reloader has no readiness endpoint: its metrics server answers once it runs, and its
    // informers log as they start.
    wait_for(
        "stakater/Reloader to start its controllers",
        Duration::from_secs(30),
        || async {
            let text = std::fs::read_to_string(&process.log).unwrap_or_default();
            match text.contains("Starting Controller") {
                true => Ok(()),
                false => Err(text.lines().last().unwrap_or("(no log yet)").to_string()),
            }
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    Incumbent::Reloader(process)
}

async fn report(shadow: &Controller) -> Value {
    let url = format!("http://127.0.0.1:{}/debug/shadow", shadow.metrics_port);
    let (code, body) = http_get(&url).await.expect("reading /debug/shadow");
    assert_eq!(code, 200, "{body}");
    serde_json::from_str(&body).expect("a JSON report")
}

fn count(report: &Value, verdict: &str) -> u64 {
    report["counts"][verdict].as_u64().unwrap_or(0)
}

async fn wait_for_counts(shadow: &Controller, what: &str, expected: &[(&str, u64)]) -> Value {
    wait_for(what, WINDOW_WAIT, || async {
        let report = report(shadow).await;
        let reached =
            expected.iter().all(|(v, n)| count(&report, v) >= *n) && report["pending"] == 0;
        match reached {
            true => Ok(report),
            false => Err(report.to_string()),
        }
    })
    .await
}

/// Writes of the audit-logged identity (`loadtest-controller`, which only the shadow replicas
/// use in this test) since `since`, but those shadow mode may make (Leases, access reviews).
fn audited_writes(since: &str) -> Vec<String> {
    let log = kubeconfig_path().with_file_name("logs").join("audit.log");
    let text = std::fs::read_to_string(&log)
        .unwrap_or_else(|e| panic!("the API server's audit log {}: {e}", log.display()));
    text.lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|e| e["requestReceivedTimestamp"].as_str().unwrap_or("") >= since)
        .filter(|e| {
            e["userAgent"]
                .as_str()
                .unwrap_or("")
                .starts_with("kube-reloader/")
        })
        .filter(|e| {
            matches!(
                e["verb"].as_str(),
                Some("create" | "update" | "patch" | "delete" | "deletecollection")
            )
        })
        .filter(|e| {
            let resource = e["objectRef"]["resource"].as_str().unwrap_or("");
            !matches!(
                resource,
                "leases" | "selfsubjectaccessreviews" | "selfsubjectrulesreviews"
            )
        })
        .map(|e| {
            format!(
                "{} {} {}",
                e["verb"], e["objectRef"]["resource"], e["objectRef"]["name"]
            )
        })
        .collect()
}

fn audit_now() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%S%.6fZ")
        .to_string()
}

/// The shadow replicas' identity: the one the API server audit-logs.
fn audited_kubeconfig() -> PathBuf {
    let path = kubeconfig_path().with_file_name("loadtest-controller.kubeconfig");
    assert!(
        path.is_file(),
        "{} is missing (hack/cluster.sh up writes it)",
        path.display()
    );
    path
}

async fn start_shadow(selector: &str, strategy: &str) -> Controller {
    let args = [
        format!("--namespace-selector={selector}"),
        format!("--reload-strategy={strategy}"),
        "--shadow".to_string(),
        format!("--shadow-window={WINDOW}"),
    ];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Controller::start_as(&audited_kubeconfig(), &args, &[]).await
}

/// Creates each row's config and workload in `ns`; returns the configs to change (kind, name).
async fn create_rows(ns: &TestNamespace) -> Vec<(Value, String)> {
    let mut configs = Vec::new();
    for (i, row) in rows().iter().enumerate() {
        let config_name = format!("r{i}-cfg");
        let config = (row.config)(&config_name);
        create(&ns.client, &ns.name, config.clone()).await;
        create(
            &ns.client,
            &ns.name,
            (row.workload)(
                &format!("r{i}-{}", row.name.split('-').next().unwrap()),
                &config_name,
            ),
        )
        .await;
        configs.push((config, config_name));
    }
    configs
}

async fn change(ns: &TestNamespace, config: &Value, name: &str) {
    match config["kind"].as_str() {
        Some("Secret") => update_secret(&ns.client, &ns.name, name, json!({"k": "v2"})).await,
        _ => update_configmap(&ns.client, &ns.name, name, json!({"k": "v2"})).await,
    }
}

/// The whole scenario beside the incumbent `start_incumbent` starts, under `strategy`.
async fn beside(start_incumbent: impl AsyncFnOnce(Vec<String>) -> Incumbent, strategy: &str) {
    let run = format!("{:x}", std::process::id() ^ common::free_port() as u32);
    let selector = format!("shadow-run={run}");
    let main = TestNamespace::with_labels(
        "shadow",
        json!({"shadow-run": run, "shadow-incumbent": "yes"}),
    )
    .await;
    // Selected by the shadows only: what they predict there is never written.
    let unwatched =
        TestNamespace::with_labels("shadow-unwatched", json!({"shadow-run": run})).await;
    let other = match strategy {
        "env-vars" => "annotations",
        _ => "env-vars",
    };
    // Everything exists before the controllers start: a creation is then never a reload.
    let configs = create_rows(&main).await;
    create(&unwatched.client, &unwatched.name, cm("lonely")).await;
    create(
        &unwatched.client,
        &unwatched.name,
        auto_deployment("lonely", json!({}), env_from_configmap("lonely")),
    )
    .await;
    // A workload whose config does not exist yet: the incumbent reloads it on creation.
    create(
        &main.client,
        &main.name,
        auto_deployment(
            "waiting",
            json!({}),
            env_from_configs(&["created-later"], &[]),
        ),
    )
    .await;
    let incumbent = start_incumbent(vec![
        format!("--namespace-selector={selector},shadow-incumbent=yes"),
        format!("--reload-strategy={strategy}"),
        // On the incumbent only: a config created for a workload is `unpredicted`.
        "--reload-on-create=true".into(),
    ])
    .await;
    let since = audit_now();
    let same = start_shadow(&selector, strategy).await;
    let differing = start_shadow(&selector, other).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    for (config, name) in &configs {
        change(&main, config, name).await;
    }
    update_configmap(
        &unwatched.client,
        &unwatched.name,
        "lonely",
        json!({"k": "v2"}),
    )
    .await;
    create(&main.client, &main.name, cm("created-later")).await;

    let reloading = rows().iter().filter(|r| r.reloads).count() as u64;
    let expected = [("agree", reloading), ("not-done", 1), ("unpredicted", 1)];
    let report_same = wait_for_counts(
        &same,
        "the shadow with the same settings to judge every write",
        &expected,
    )
    .await;
    let logs = incumbent.logs();
    assert_eq!(
        count(&report_same, "agree"),
        reloading,
        "{report_same:#}\nincumbent:\n{logs}"
    );
    for verdict in ["late", "differ"] {
        assert_eq!(
            count(&report_same, verdict),
            0,
            "{verdict}: {report_same:#}"
        );
    }
    let not_done = &report_same["latest"]["not-done"][0];
    assert!(
        not_done["workload"]
            .as_str()
            .unwrap()
            .contains(&unwatched.name),
        "{not_done}"
    );
    let unpredicted = &report_same["latest"]["unpredicted"][0];
    assert!(
        unpredicted["config"]
            .as_str()
            .unwrap()
            .ends_with("created-later"),
        "{unpredicted}"
    );

    let expected = [("differ", reloading), ("not-done", 1), ("unpredicted", 1)];
    let report_other = wait_for_counts(
        &differing,
        "the shadow with the other strategy to report each write as differ",
        &expected,
    )
    .await;
    assert_eq!(count(&report_other, "agree"), 0, "{report_other:#}");
    for example in report_other["latest"]["differ"].as_array().unwrap() {
        let detail = example["detail"].as_str().unwrap();
        assert!(
            detail.starts_with(&format!("strategy: predicted {other}")),
            "{detail}"
        );
        assert!(detail.contains(&format!("written {strategy}")), "{detail}");
    }
    let writes = audited_writes(&since);
    assert!(
        writes.is_empty(),
        "shadow replicas wrote to the API server: {writes:?}"
    );
    for shadow in [&same, &differing] {
        let (code, text) = text_report(shadow).await;
        assert_eq!(code, Some(1), "a disagreement exits 1:\n{text}");
    }
    println!(
        "kube-reloader shadow report, beside the incumbent ({strategy}):\n{}",
        text_report(&same).await.1
    );
    drop(incumbent);
}

/// `kube-reloader shadow report` against `shadow`: its exit code and what it printed.
async fn text_report(shadow: &Controller) -> (Option<i32>, String) {
    let url = format!("http://127.0.0.1:{}", shadow.metrics_port);
    let out = Command::new(env!("CARGO_BIN_EXE_kube-reloader"))
        .args(["shadow", "report", "--url", &url])
        .output()
        .expect("running kube-reloader shadow report");
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code(), text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn beside_kube_reloader_every_write_agrees_and_each_induced_difference_is_reported() {
    let start = async |args: Vec<String>| {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        Incumbent::KubeReloader(Controller::start(&args).await)
    };
    beside(start, "env-vars").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs stakater/Reloader's binary: `make shadow-test` builds it and runs this"]
async fn beside_stakater_reloader_every_write_agrees_under_both_strategies() {
    for strategy in ["env-vars", "annotations"] {
        beside(
            async |args: Vec<String>| start_reloader(&args).await,
            strategy,
        )
        .await;
    }
}

#[tokio::test]
async fn the_report_command_exits_0_with_nothing_to_disagree_and_2_without_a_shadow() {
    let nothing = "kube-reloader-shadow-none=1";
    let shadow = start_shadow(nothing, "env-vars").await;
    let (code, text) = text_report(&shadow).await;
    assert_eq!(code, Some(0), "{text}");
    assert!(
        text.starts_with("shadow report: 0 judged, 0 pending"),
        "{text}"
    );
    // A replica not in shadow mode answers 404: the command says so and exits 2.
    let plain = Controller::start(&[&format!("--namespace-selector={nothing}")]).await;
    let (code, text) = text_report(&plain).await;
    assert_eq!(code, Some(2), "{text}");
    assert!(text.contains("/debug/shadow"), "{text}");
}
