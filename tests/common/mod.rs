//! Shared fixture for integration tests: one real control plane per test run (started by the
//! project's own script), a fresh namespace per test, the controller as a real process, and
//! waits that say what they saw when they time out.
#![allow(dead_code)]

use std::future::Future;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DeleteParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use serde_json::json;

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Path of a kubeconfig for the local control plane, started once per test run.
pub fn kubeconfig_path() -> &'static PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        if let Ok(p) = std::env::var("KUBE_RELOADER_TEST_KUBECONFIG") {
            return PathBuf::from(p);
        }
        cluster_sh("kubeconfig", "the local control plane did not start")
    })
}

/// A second kube-apiserver on the same etcd with the ShardedListAndWatch gate off, as an older
/// or unconfigured server (`hack/cluster.sh gateless`): the kubeconfig to reach it.
pub fn gateless_kubeconfig_path() -> PathBuf {
    kubeconfig_path();
    cluster_sh("gateless", "the gateless kube-apiserver did not start")
}

/// A kube-apiserver on the test control plane's etcd under a key prefix of its own
/// (`hack/cluster.sh isolated`): an empty cluster where a test may delete and install CRDs
/// without touching what other tests share. The kubeconfig to reach it.
pub fn isolated_kubeconfig_path() -> PathBuf {
    kubeconfig_path();
    cluster_sh("isolated", "the isolated kube-apiserver did not start")
}

/// A kube-apiserver on the test control plane's etcd whose watch cache starts now (so a list at
/// an older resourceVersion goes to etcd: after [`compact_etcd`], a 410). Stopped on drop.
pub struct FreshApiserver {
    pub kubeconfig: PathBuf,
}

impl FreshApiserver {
    pub fn start() -> Self {
        kubeconfig_path();
        let kubeconfig = cluster_sh("fresh", "the fresh kube-apiserver did not start");
        Self { kubeconfig }
    }
}

impl Drop for FreshApiserver {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(repo_root().join("hack/cluster.sh"))
            .arg("fresh-stop")
            .status();
    }
}

/// Runs `hack/cluster.sh <command>` and returns the path its last stdout line names; panics
/// with `failure` if it fails (its progress goes to stderr, shown above).
fn cluster_sh(command: &str, failure: &str) -> PathBuf {
    let out = Command::new("bash")
        .arg(repo_root().join("hack/cluster.sh"))
        .arg(command)
        .stderr(Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("running hack/cluster.sh {command}: {e}"));
    assert!(
        out.status.success(),
        "{failure} (hack/cluster.sh {command} exited with {}); see its output above",
        out.status
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = stdout.lines().last().expect("cluster.sh printed a path");
    PathBuf::from(last.trim())
}

pub async fn client() -> Client {
    client_at(kubeconfig_path()).await
}

/// A client for the kube-apiserver `kubeconfig` names.
pub async fn client_at(kubeconfig: &std::path::Path) -> Client {
    let kubeconfig = Kubeconfig::read_from(kubeconfig).expect("reading the test kubeconfig");
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("building a client config");
    Client::try_from(config).expect("building a client")
}

/// A namespace for one test, deleted when dropped.
pub struct TestNamespace {
    pub name: String,
    pub client: Client,
    /// Where the namespace lives: Drop deletes it with a client of its own (one bound to the
    /// test's runtime cannot run while that runtime waits for the cleanup thread).
    kubeconfig: PathBuf,
}

impl TestNamespace {
    pub async fn new(prefix: &str) -> Self {
        Self::with_labels(prefix, json!({})).await
    }

    pub async fn with_labels(prefix: &str, labels: serde_json::Value) -> Self {
        Self::on(kubeconfig_path(), prefix, labels).await
    }

    /// A namespace on the API server `kubeconfig` reaches.
    pub async fn on(kubeconfig: &std::path::Path, prefix: &str, labels: serde_json::Value) -> Self {
        let client = client_at(kubeconfig).await;
        let suffix: u32 = rand_suffix();
        let name = format!("{}-{suffix:08x}", prefix.replace('_', "-"));
        let ns: Namespace = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": labels}
        }))
        .unwrap();
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .expect("creating the test namespace");
        Self {
            name,
            client,
            kubeconfig: kubeconfig.to_path_buf(),
        }
    }
}

fn rand_suffix() -> u32 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    nanos ^ std::process::id().rotate_left(16)
}

/// Runs `work` to completion on a thread with a runtime of its own and waits for it: cleanup
/// from `Drop`, which cannot await (and may run while the test's runtime shuts down).
pub fn block_on_detached<F>(work: F)
where
    F: Future<Output = ()> + Send + 'static,
{
    let _ = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(work);
    })
    .join();
}

impl Drop for TestNamespace {
    fn drop(&mut self) {
        let (name, kubeconfig) = (self.name.clone(), self.kubeconfig.clone());
        block_on_detached(async move {
            let api = Api::<Namespace>::all(client_at(&kubeconfig).await);
            let _ = api.delete(&name, &DeleteParams::background()).await;
        });
    }
}

/// Polls `probe` until it returns `Ok`, or panics after `timeout` with the last `Err` it saw.
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let start = Instant::now();
    let mut last = String::from("(never probed)");
    while start.elapsed() < timeout {
        match probe().await {
            Ok(v) => return v,
            Err(seen) => last = seen,
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("timed out after {timeout:?} waiting for {what}; last seen: {last}");
}

/// Runs `check` on each row of a table in turn, each in a task of its own, so that a failing row
/// neither stops the rows after it nor hides which row failed; then fails listing every failed
/// row by its `label` with its panic message.
pub async fn each_row<R, Fut>(rows: Vec<R>, label: fn(&R) -> String, check: fn(R) -> Fut)
where
    R: Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let mut failed = Vec::new();
    for row in rows {
        let name = label(&row);
        if let Err(e) = tokio::spawn(check(row)).await {
            failed.push(format!("{name}: {}", panic_message(e)));
        }
    }
    assert!(
        failed.is_empty(),
        "{} row(s) failed:\n{}",
        failed.len(),
        failed.join("\n")
    );
}

fn panic_message(e: tokio::task::JoinError) -> String {
    let Ok(payload) = e.try_into_panic() else {
        return "cancelled".into();
    };
    match payload.downcast::<String>() {
        Ok(text) => *text,
        Err(payload) => payload
            .downcast_ref::<&str>()
            .map_or_else(|| "(a panic without a message)".into(), |s| s.to_string()),
    }
}

pub use apiproxy::ports::free_port;

/// The controller under test, as a real process against the local control plane.
pub struct Controller {
    child: Child,
    pub metrics_port: u16,
    /// `--health-addr`'s port (`/healthz`, `/readyz`): one per process, since the default
    /// `:8080` would be shared by every controller a test run starts.
    pub health_port: u16,
    pub log: PathBuf,
}

impl Controller {
    /// Starts kube-reloader with `args` and waits until `/ready` answers 200.
    pub async fn start(args: &[&str]) -> Self {
        Self::start_with_env(args, &[]).await
    }

    /// Starts kube-reloader with another identity: `kubeconfig` instead of the admin one (e.g.
    /// a ServiceAccount token, to prove the RBAC a mode needs is enough).
    pub async fn start_as(
        kubeconfig: &std::path::Path,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Self {
        let kubeconfig = kubeconfig.to_str().expect("a UTF-8 kubeconfig path");
        let mut all = vec![("KUBECONFIG", kubeconfig)];
        all.extend_from_slice(env);
        Self::start_with_env(args, &all).await
    }

    pub async fn start_with_env(args: &[&str], env: &[(&str, &str)]) -> Self {
        let mut controller = Self::launch(args, env);
        controller.wait_ready().await;
        controller
    }

    /// Starts kube-reloader without waiting for it to be ready (a standby never is).
    pub fn launch(args: &[&str], env: &[(&str, &str)]) -> Self {
        let port = free_port();
        let health_port = free_port();
        let log = std::env::temp_dir().join(format!("kube-reloader-test-{port}.log"));
        let log_file = std::fs::File::create(&log).unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_kube-reloader"));
        cmd.args(args)
            .arg(format!("--metrics-addr=127.0.0.1:{port}"));
        let health_given = args.iter().any(|a| a.starts_with("--health-addr"))
            || env.iter().any(|(k, _)| *k == "HEALTH_ADDR");
        if !health_given {
            cmd.arg(format!("--health-addr=127.0.0.1:{health_port}"));
        }
        cmd.env("KUBECONFIG", kubeconfig_path())
            .env("RUST_LOG", "info,kube_reloader=debug")
            .stdout(log_file.try_clone().unwrap())
            .stderr(log_file);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd.spawn().expect("starting kube-reloader");
        Self {
            child,
            metrics_port: port,
            health_port,
            log,
        }
    }

    /// Waits until `/ready` answers 200; panics if the process exits first.
    pub async fn wait_ready(&mut self) {
        let url = format!("http://127.0.0.1:{}/ready", self.metrics_port);
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(30) {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "kube-reloader exited with {status} before it was ready:\n{}",
                    self.logs()
                );
            }
            if http_get(&url).await.is_ok_and(|(code, _)| code == 200) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("kube-reloader was not ready within 30s:\n{}", self.logs());
    }

    /// The exit status, if the process has exited.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub async fn metrics(&self) -> String {
        let url = format!("http://127.0.0.1:{}/metrics", self.metrics_port);
        http_get(&url).await.expect("scraping /metrics").1
    }

    /// The value of one series of `/metrics` (`None`: not exported yet).
    pub async fn metric(&self, series: &str) -> Option<f64> {
        metric_in(&self.metrics().await, series)
    }

    /// Sends SIGTERM and waits for the exit status.
    pub fn terminate(mut self) -> std::process::ExitStatus {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        let status = self.child.wait().expect("waiting for kube-reloader");
        std::mem::forget(self);
        status
    }

    /// Sends a signal (`KILL`, `STOP`, `CONT`, ...) to the process.
    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.child.id().to_string())
            .status()
            .expect("running kill");
        assert!(status.success(), "kill -{signal} failed");
    }

    /// SIGKILL and reap (a crash).
    pub fn crash(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        std::mem::forget(self);
    }

    /// `terminate` without blocking the test's runtime, which may be serving receivers the
    /// controller talks to while it shuts down (a current-thread runtime would deadlock).
    pub async fn stop(self) -> std::process::ExitStatus {
        tokio::task::spawn_blocking(move || self.terminate())
            .await
            .expect("terminate task")
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!(
                "---- kube-reloader log ({}) ----\n{}",
                self.log.display(),
                self.logs()
            );
        }
    }
}

/// Minimal HTTP/1.0 GET on loopback (status code, body), to keep test dependencies small.
/// The value of `series` (name and labels, as exported) in a Prometheus text exposition.
pub fn metric_in(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
}

pub async fn http_get(url: &str) -> std::io::Result<(u16, String)> {
    http_request("GET", url, "").await
}

/// An HTTP/1.0 request on loopback (no client crate for the few plain-HTTP endpoints the tests
/// reach: metrics, health, etcd's gateway); the status and the body.
pub async fn http_request(method: &str, url: &str, body: &str) -> std::io::Result<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let rest = url.strip_prefix("http://").expect("http url");
    let (host, path) = rest
        .split_once('/')
        .map(|(h, p)| (h, format!("/{p}")))
        .unwrap_or((rest, "/".into()));
    let mut stream = tokio::net::TcpStream::connect(host).await?;
    let head = format!(
        "{method} {path} HTTP/1.0\r\nHost: {host}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body.as_bytes()).await?;
    let mut buf = Vec::new();
    stream.read_to_end(&mut buf).await?;
    let text = String::from_utf8_lossy(&buf).to_string();
    let code = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Ok((code, body))
}

/// Compacts the test control plane's etcd up to its current revision (through etcd's HTTP
/// gateway, on the port `hack/cluster.sh` wrote next to the kubeconfig): a list or watch at an
/// older resourceVersion is then answered 410. Returns the revision.
pub async fn compact_etcd() -> u64 {
    let ports = kubeconfig_path().with_file_name("ports.env");
    let text = std::fs::read_to_string(&ports)
        .unwrap_or_else(|e| panic!("reading {}: {e}", ports.display()));
    let port = text
        .lines()
        .find_map(|l| l.strip_prefix("ETCD_CLIENT_PORT="))
        .unwrap_or_else(|| panic!("no ETCD_CLIENT_PORT in {}", ports.display()))
        .trim()
        .to_string();
    let etcd = |path: &str| format!("http://127.0.0.1:{port}{path}");
    let (code, range) = http_request("POST", &etcd("/v3/kv/range"), r#"{"key":"AA==","limit":1}"#)
        .await
        .expect("etcd's gateway answers");
    assert_eq!(code, 200, "etcd range: {range}");
    let header: serde_json::Value = serde_json::from_str(&range).expect("etcd's answer is JSON");
    let revision: u64 = header["header"]["revision"]
        .as_str()
        .and_then(|r| r.parse().ok())
        .unwrap_or_else(|| panic!("no revision in etcd's answer: {range}"));
    let body = format!(r#"{{"revision":"{revision}","physical":true}}"#);
    let (code, answer) = http_request("POST", &etcd("/v3/kv/compaction"), &body)
        .await
        .expect("etcd's gateway answers");
    assert_eq!(code, 200, "etcd compaction: {answer}");
    revision
}
pub mod crds;
pub mod fault_proxy;
pub mod helm;
pub mod identity;
pub mod kwok;
pub mod objects;
pub mod observe;
pub mod receiver;
pub mod reloader_chart;
