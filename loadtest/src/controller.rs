//! The controller under test as a process started from a command line: readiness, and its
//! memory and CPU read from /proc (the whole process tree, in case the command wraps it).

use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde::Serialize;

/// One reading of the controller's process tree.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Sample {
    /// Seconds since the run epoch.
    pub t: f64,
    pub rss_kib: u64,
    /// Peak RSS (VmHWM), summed over the tree.
    pub hwm_kib: u64,
    /// utime + stime of the tree (and of its reaped children), seconds.
    pub cpu_s: f64,
}

pub struct ControllerProc {
    child: Child,
    pub pid: u32,
    pub started_at: f64,
    pub ready_at: Option<f64>,
    pub samples: Arc<Mutex<Vec<Sample>>>,
    sampler: tokio::task::JoinHandle<()>,
    pub log: PathBuf,
}

fn clk_tck() -> f64 {
    static TCK: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *TCK.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
            .unwrap_or(100.0)
    })
}

/// (ppid, utime+stime, cutime+cstime) in ticks, from /proc/<pid>/stat.
fn read_stat(pid: u32) -> Option<(u32, u64, u64)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &s[s.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let n = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok());
    Some((n(1)? as u32, n(11)? + n(12)?, n(13)? + n(14)?))
}

/// The local control plane's kube-apiserver: its pid and the CPU-seconds it has used so far
/// (its pid file sits next to the kubeconfig in `hack/cluster.sh`'s state dir; `None` for
/// another cluster).
pub fn apiserver_cpu_s(kubeconfig: &std::path::Path) -> Option<(u32, f64)> {
    let pid_file = kubeconfig.parent()?.join("pids/kube-apiserver.pid");
    let pid: u32 = std::fs::read_to_string(pid_file)
        .ok()?
        .trim()
        .parse()
        .ok()?;
    let (_, ticks, _) = read_stat(pid)?;
    Some((pid, ticks as f64 / clk_tck()))
}

fn read_status_kib(pid: u32, field: &str) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find(|l| l.starts_with(field))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// `root` and its descendants.
fn tree(root: u32) -> Vec<u32> {
    let mut parent: HashMap<u32, u32> = HashMap::new();
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for e in dir.flatten() {
            if let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok())
                && let Some((ppid, _, _)) = read_stat(pid)
            {
                parent.insert(pid, ppid);
            }
        }
    }
    let mut out = vec![root];
    let mut i = 0;
    while i < out.len() {
        let p = out[i];
        out.extend(parent.iter().filter(|&(_, &pp)| pp == p).map(|(&c, _)| c));
        i += 1;
    }
    out
}

pub fn sample(root: u32, t: f64) -> Option<Sample> {
    let (_, _, reaped) = read_stat(root)?;
    let mut s = Sample {
        t,
        rss_kib: 0,
        hwm_kib: 0,
        cpu_s: reaped as f64 / clk_tck(),
    };
    for pid in tree(root) {
        if let Some((_, ticks, _)) = read_stat(pid) {
            s.cpu_s += ticks as f64 / clk_tck();
        }
        s.rss_kib += read_status_kib(pid, "VmRSS:").unwrap_or(0);
        s.hwm_kib += read_status_kib(pid, "VmHWM:").unwrap_or(0);
    }
    Some(s)
}

impl ControllerProc {
    /// Starts `bash -c "exec <cmd>"` in its own process group with `KUBECONFIG=kubeconfig` and
    /// `env`, output appended to `log`, and samples it every `every`.
    pub fn spawn(
        cmd: &str,
        kubeconfig: &Path,
        env: &[(String, String)],
        log: &Path,
        epoch: Instant,
        every: Duration,
    ) -> Result<Self> {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .with_context(|| format!("opening {}", log.display()))?;
        writeln!(f, "---- load test: starting: {cmd}")?;
        let child = Command::new("bash")
            .arg("-c")
            .arg(format!("exec {cmd}"))
            .env("KUBECONFIG", kubeconfig)
            .env("NO_COLOR", "1")
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(f.try_clone()?)
            .stderr(f)
            .process_group(0)
            .spawn()
            .context("starting the controller")?;
        let pid = child.id();
        let started_at = epoch.elapsed().as_secs_f64();
        let samples = Arc::new(Mutex::new(Vec::new()));
        let sampler = {
            let samples = samples.clone();
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(every);
                loop {
                    tick.tick().await;
                    let t = epoch.elapsed().as_secs_f64();
                    match tokio::task::spawn_blocking(move || sample(pid, t)).await {
                        Ok(Some(s)) => samples.lock().unwrap().push(s),
                        _ => break,
                    }
                }
            })
        };
        Ok(Self {
            child,
            pid,
            started_at,
            ready_at: None,
            samples,
            sampler,
            log: log.to_path_buf(),
        })
    }

    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Polls `url` until it answers 200; returns the time to ready in seconds.
    pub async fn wait_ready(
        &mut self,
        url: &str,
        timeout: Duration,
        epoch: Instant,
    ) -> Result<f64> {
        let start = Instant::now();
        while start.elapsed() < timeout {
            if let Some(status) = self.exited() {
                bail!(
                    "the controller exited with {status} before it was ready; see {}",
                    self.log.display()
                );
            }
            let u = url.to_string();
            let code = tokio::task::spawn_blocking(move || http_status(&u))
                .await
                .ok()
                .flatten();
            if code == Some(200) {
                let now = epoch.elapsed().as_secs_f64();
                self.ready_at = Some(now);
                return Ok(now - self.started_at);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        bail!(
            "the controller was not ready ({url}) within {timeout:?}; see {}",
            self.log.display()
        )
    }

    /// A reading now (the last one before the process goes away).
    pub fn sample_now(&self, epoch: Instant) -> Option<Sample> {
        let s = sample(self.pid, epoch.elapsed().as_secs_f64())?;
        self.samples.lock().unwrap().push(s);
        Some(s)
    }

    pub fn samples(&self) -> Vec<Sample> {
        self.samples.lock().unwrap().clone()
    }

    pub fn signal_group(&self, sig: &str) {
        let _ = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg("--")
            .arg(format!("-{}", self.pid))
            .stderr(Stdio::null())
            .status();
    }

    /// SIGKILL to the process group (a crash, for the restart scenario).
    pub async fn kill_hard(&mut self, epoch: Instant) {
        self.sample_now(epoch);
        self.sampler.abort();
        self.signal_group("KILL");
        let _ = self.child.wait();
    }

    /// SIGTERM, then SIGKILL after `grace`; returns the exit status as text.
    pub async fn terminate(&mut self, grace: Duration, epoch: Instant) -> String {
        self.sample_now(epoch);
        self.sampler.abort();
        self.signal_group("TERM");
        let start = Instant::now();
        while start.elapsed() < grace {
            if let Some(s) = self.exited() {
                return s.to_string();
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.signal_group("KILL");
        match self.child.wait() {
            Ok(s) => format!("{s} (killed after {grace:?} without exiting on SIGTERM)"),
            Err(e) => format!("unknown ({e})"),
        }
    }
}

impl Drop for ControllerProc {
    fn drop(&mut self) {
        self.sampler.abort();
        if self.exited().is_none() {
            self.signal_group("KILL");
            let _ = self.child.wait();
        }
    }
}

/// Status code of `GET url` (plain HTTP), or None.
pub fn http_status(url: &str) -> Option<u16> {
    http_get(url).map(|(c, _)| c)
}

/// Minimal HTTP/1.0 GET on loopback: (status, body).
pub fn http_get(url: &str) -> Option<(u16, String)> {
    let rest = url.strip_prefix("http://")?;
    let (host, path) = rest
        .split_once('/')
        .map(|(h, p)| (h, format!("/{p}")))
        .unwrap_or((rest, "/".into()));
    let addr = std::net::ToSocketAddrs::to_socket_addrs(host)
        .ok()?
        .next()?;
    let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(300)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: {host}\r\n\r\n").as_bytes())
        .ok()?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).ok()?;
    let text = String::from_utf8_lossy(&buf);
    let code = text.split_whitespace().nth(1)?.parse().ok()?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Some((code, body))
}
