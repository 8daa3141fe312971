//! The real observability tools as processes on loopback: Prometheus scraping the controller and
//! Jaeger (all-in-one, in-memory) receiving its OTLP, both built from their Go modules by
//! hack/observe-tools.sh. A tool that cannot be built or started fails the test, saying why.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::{free_port, http_get};

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `prometheus`, `promtool` or `jaeger`, built on first use (hack/observe-tools.sh).
pub fn tool(name: &str) -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let out = Command::new("bash")
            .arg(repo_root().join("hack/observe-tools.sh"))
            .stderr(Stdio::inherit())
            .output()
            .expect("running hack/observe-tools.sh");
        assert!(
            out.status.success(),
            "building Prometheus/Jaeger failed (hack/observe-tools.sh exited with {}); see its output above",
            out.status
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        PathBuf::from(stdout.lines().last().expect("a bin dir").trim())
    })
    .join(name)
}

/// Percent-encodes a query parameter.
pub fn encode(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A tool process with its own temp dir and log, killed when dropped (log printed on panic).
struct Tool {
    name: &'static str,
    child: Child,
    dir: PathBuf,
}

impl Tool {
    fn spawn(name: &'static str, dir: PathBuf, args: &[String], env: &[(&str, String)]) -> Tool {
        let log = std::fs::File::create(dir.join("log")).unwrap();
        let mut cmd = Command::new(tool(name));
        cmd.args(args)
            .current_dir(&dir)
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("starting {name} ({}): {e}", tool(name).display()));
        Tool { name, child, dir }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("log")).unwrap_or_default()
    }

    /// Waits until `url` answers 200; fails with the tool's log if it exits or never does.
    async fn wait_ready(&mut self, url: &str) {
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(60) {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "{} exited with {status} at start:\n{}",
                    self.name,
                    self.log()
                );
            }
            if http_get(url).await.is_ok_and(|(code, _)| code == 200) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!(
            "{} did not answer {url} within 60 s:\n{}",
            self.name,
            self.log()
        );
    }
}

impl Drop for Tool {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("---- {} log ----\n{}", self.name, self.log());
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn temp_dir(name: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("kr-{name}-{}-{}", std::process::id(), free_port()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Prometheus scraping kube-reloader's `/metrics` every second.
pub struct Prometheus {
    tool: Tool,
    pub port: u16,
}

/// One sample of an instant query: labels and value (NaN and ±Inf as Prometheus writes them).
#[derive(Debug, Clone)]
pub struct Sample {
    pub labels: serde_json::Map<String, Value>,
    pub value: f64,
}

impl Prometheus {
    /// Scrapes `127.0.0.1:<port>/metrics` of each of `targets` as job `kube-reloader`.
    pub async fn start(targets: &[u16]) -> Prometheus {
        let dir = temp_dir("prometheus");
        let config = prometheus_config(targets);
        std::fs::write(dir.join("prometheus.yml"), config).unwrap();
        let port = free_port();
        let args = [
            "--config.file=prometheus.yml".to_string(),
            "--storage.tsdb.path=data".to_string(),
            // Exemplars (the trace id on reload latency samples) are kept only with this on;
            // it also makes Prometheus ask for the OpenMetrics text that carries them.
            "--enable-feature=exemplar-storage".to_string(),
            format!("--web.listen-address=127.0.0.1:{port}"),
        ];
        let mut tool = Tool::spawn("prometheus", dir, &args, &[]);
        tool.wait_ready(&format!("http://127.0.0.1:{port}/-/ready"))
            .await;
        Prometheus { tool, port }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// An instant query; `Err` carries Prometheus' error (a parse error, say).
    pub async fn query(&self, expr: &str) -> Result<Vec<Sample>, String> {
        let url = format!("{}/api/v1/query?query={}", self.url(), encode(expr));
        let (code, body) = http_get(&url).await.map_err(|e| e.to_string())?;
        let reply: Value = serde_json::from_str(&body)
            .map_err(|e| format!("HTTP {code}, not JSON ({e}): {body}"))?;
        if reply["status"] != "success" {
            return Err(format!("{}: {}", reply["errorType"], reply["error"]));
        }
        let data = &reply["data"];
        let parse = |v: &Value| v.as_str().and_then(|s| s.parse::<f64>().ok());
        match data["resultType"].as_str() {
            Some("vector") => Ok(data["result"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|s| Sample {
                    labels: s["metric"].as_object().cloned().unwrap_or_default(),
                    value: parse(&s["value"][1]).unwrap_or(f64::NAN),
                })
                .collect()),
            Some("scalar") => Ok(vec![Sample {
                labels: Default::default(),
                value: parse(&data["result"][1]).unwrap_or(f64::NAN),
            }]),
            other => Err(format!("unexpected result type {other:?}: {body}")),
        }
    }

    /// The trace ids of the exemplars Prometheus keeps for the series `selector` selects,
    /// over the last hour.
    pub async fn exemplar_trace_ids(&self, selector: &str) -> Result<Vec<String>, String> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let url = format!(
            "{}/api/v1/query_exemplars?query={}&start={}&end={}",
            self.url(),
            encode(selector),
            now - 3600,
            now + 60
        );
        let (code, body) = http_get(&url).await.map_err(|e| e.to_string())?;
        let reply: Value = serde_json::from_str(&body)
            .map_err(|e| format!("HTTP {code}, not JSON ({e}): {body}"))?;
        if reply["status"] != "success" {
            return Err(format!("{}: {}", reply["errorType"], reply["error"]));
        }
        Ok(reply["data"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|series| series["exemplars"].as_array().cloned().unwrap_or_default())
            .filter_map(|e| e["labels"]["trace_id"].as_str().map(String::from))
            .collect())
    }

    /// Waits until every target has been scraped successfully at least `scrapes` times more
    /// than now, so what the controller counted so far is in the TSDB.
    pub async fn wait_scrapes(&self, scrapes: usize) {
        let count = || async {
            self.query("min(count_over_time(up{job=\"kube-reloader\"}[1h]))")
                .await
                .ok()
                .and_then(|s| s.first().map(|s| s.value as usize))
                .unwrap_or(0)
        };
        let goal = count().await + scrapes;
        super::wait_for(
            "Prometheus to scrape the controller",
            Duration::from_secs(60),
            || async {
                let up = self
                    .query("min(up{job=\"kube-reloader\"})")
                    .await
                    .map_err(|e| e.to_string())?;
                let n = count().await;
                match up.first() {
                    Some(s) if s.value == 1.0 && n >= goal => Ok(()),
                    other => Err(format!("up = {other:?}, scrapes {n} of {goal}")),
                }
            },
        )
        .await
    }

    pub fn log(&self) -> String {
        self.tool.log()
    }
}

/// The scrape config for `targets` (also written by hack/observe.sh for `make observe`).
pub fn prometheus_config(targets: &[u16]) -> String {
    let list: Vec<String> = targets.iter().map(|p| format!("'127.0.0.1:{p}'")).collect();
    format!(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
         rule_files:\n  - {rules}\n\
         scrape_configs:\n  - job_name: kube-reloader\n    static_configs:\n      - targets: [{targets}]\n",
        rules = repo_root()
            .join("deployments/prometheus/kube-reloader-rules.yaml")
            .display(),
        targets = list.join(", ")
    )
}

/// Jaeger all-in-one with its OTLP/HTTP receiver and query API on loopback (hack/observe/jaeger.yaml).
pub struct Jaeger {
    tool: Tool,
    pub otlp_port: u16,
    pub query_port: u16,
}

impl Jaeger {
    pub async fn start() -> Jaeger {
        let dir = temp_dir("jaeger");
        let (otlp_port, query_port) = (free_port(), free_port());
        let config = repo_root().join("hack/observe/jaeger.yaml");
        let env = [
            ("JAEGER_OTLP_HTTP_PORT", otlp_port.to_string()),
            ("JAEGER_QUERY_PORT", query_port.to_string()),
            ("JAEGER_QUERY_GRPC_PORT", free_port().to_string()),
        ];
        let args = [format!("--config={}", config.display())];
        let mut tool = Tool::spawn("jaeger", dir, &args, &env);
        tool.wait_ready(&format!("http://127.0.0.1:{query_port}/api/services"))
            .await;
        Jaeger {
            tool,
            otlp_port,
            query_port,
        }
    }

    /// What `OTEL_EXPORTER_OTLP_ENDPOINT` is set to (the exporter appends `/v1/traces`).
    pub fn otlp_endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.otlp_port)
    }

    /// Traces of `service` (Jaeger's query API, the one its UI uses).
    pub async fn traces(&self, service: &str) -> Vec<Value> {
        let url = format!(
            "http://127.0.0.1:{}/api/traces?service={}&limit=1000&lookback=1h",
            self.query_port,
            encode(service)
        );
        self.get_data(&url).await
    }

    /// Jaeger's trace search (what Grafana's Jaeger data source sends for a search query).
    pub async fn search(&self, query: &[(&str, String)]) -> Vec<Value> {
        let params: Vec<String> = query
            .iter()
            .map(|(k, v)| format!("{k}={}", encode(v)))
            .collect();
        let url = format!(
            "http://127.0.0.1:{}/api/traces?{}",
            self.query_port,
            params.join("&")
        );
        self.get_data(&url).await
    }

    /// One trace by id, as the UI's search box finds it; empty when unknown.
    pub async fn trace(&self, trace_id: &str) -> Vec<Value> {
        let url = format!("http://127.0.0.1:{}/api/traces/{trace_id}", self.query_port);
        self.get_data(&url).await
    }

    async fn get_data(&self, url: &str) -> Vec<Value> {
        let (code, body) = http_get(url)
            .await
            .unwrap_or_else(|e| panic!("querying Jaeger ({url}): {e}"));
        if code == 404 {
            return Vec::new();
        }
        let reply: Value = serde_json::from_str(&body)
            .unwrap_or_else(|e| panic!("Jaeger answered HTTP {code}, not JSON ({e}): {body}"));
        reply["data"].as_array().cloned().unwrap_or_default()
    }

    pub fn log(&self) -> String {
        self.tool.log()
    }
}

/// A span's tag (Jaeger's `tags`: key, type, value) as a string.
pub fn tag(span: &Value, key: &str) -> Option<String> {
    span["tags"]
        .as_array()?
        .iter()
        .find(|t| t["key"] == key)
        .map(|t| match &t["value"] {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })
}

/// The process (resource) tags of a span's process, `service.name` included.
pub fn process_tag(trace: &Value, span: &Value, key: &str) -> Option<String> {
    let process = &trace["processes"][span["processID"].as_str()?];
    if key == "service.name" {
        return process["serviceName"].as_str().map(str::to_string);
    }
    tag(process, key)
}
