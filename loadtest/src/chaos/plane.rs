//! Faults of the control plane itself, only against one the run may break: a control plane of
//! `hack/cluster.sh` started for it (its state directory holds the kubeconfig, `pids/` and
//! `ports.env`), never the shared one other work uses. kube-apiserver is restarted with the
//! command line it runs with; etcd is compacted through its HTTP gateway.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// The control plane of `hack/cluster.sh` whose kubeconfig the run uses.
pub struct Plane {
    state: PathBuf,
}

impl Plane {
    /// The plane of `kubeconfig`, refused when it is the shared one (`$HOME/.cache/kube-reloader`
    /// unless `KUBE_RELOADER_CACHE` says otherwise) or not one of `hack/cluster.sh`.
    pub fn own(kubeconfig: &Path) -> Result<Self> {
        let state = kubeconfig
            .parent()
            .context("the kubeconfig has no directory")?
            .canonicalize()?;
        let home = std::env::var("HOME").unwrap_or_default();
        let shared = Path::new(&home).join(".cache/kube-reloader/cluster");
        if shared.canonicalize().is_ok_and(|s| s == state) {
            bail!(
                "--control-plane-faults against the shared control plane ({}): start one of the \
                 run's own (KUBE_RELOADER_CACHE=<dir> hack/cluster.sh up) and point --kubeconfig at it",
                state.display()
            );
        }
        let plane = Self { state };
        plane.pid("kube-apiserver")?;
        plane.etcd_port()?;
        Ok(plane)
    }

    fn pid(&self, name: &str) -> Result<u32> {
        let f = self.state.join(format!("pids/{name}.pid"));
        let text =
            std::fs::read_to_string(&f).with_context(|| format!("reading {}", f.display()))?;
        Ok(text.trim().parse()?)
    }

    fn etcd_port(&self) -> Result<u16> {
        let f = self.state.join("ports.env");
        let text =
            std::fs::read_to_string(&f).with_context(|| format!("reading {}", f.display()))?;
        text.lines()
            .find_map(|l| l.strip_prefix("ETCD_CLIENT_PORT="))
            .context("no ETCD_CLIENT_PORT in ports.env")?
            .trim()
            .parse()
            .context("ETCD_CLIENT_PORT")
    }

    /// SIGTERM to kube-apiserver (SIGKILL after 5 s: its graceful shutdown waits up to a minute
    /// for open watches), the same command line started again (its pid recorded where
    /// `hack/cluster.sh` keeps it), and the wait until it answers; returns the seconds it was away.
    pub async fn restart_apiserver(&self, client: &kube::Client) -> Result<f64> {
        let pid = self.pid("kube-apiserver")?;
        let argv: Vec<String> = std::fs::read(format!("/proc/{pid}/cmdline"))?
            .split(|b| *b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        if argv.first().is_none_or(|a| !a.ends_with("kube-apiserver")) {
            bail!("pid {pid} is not kube-apiserver: {argv:?}");
        }
        let t = Instant::now();
        signal(pid, "TERM");
        let gone = || exited(pid);
        while !gone() && t.elapsed() < Duration::from_secs(5) {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        if !gone() {
            signal(pid, "KILL");
        }
        while !gone() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let log = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(self.state.join("logs/kube-apiserver.log"))?;
        let pidfile = self.state.join("pids/kube-apiserver.pid");
        // As hack/cluster.sh launches it: its own session, the pid written by the wrapper.
        // `-f`: forked, so it is not this process's child (nobody here would reap it).
        std::process::Command::new("setsid")
            .arg("-f")
            .arg("bash")
            .arg("-c")
            .arg(r#"echo $$ >"$1"; shift; exec "$@""#)
            .arg("_")
            .arg(&pidfile)
            .args(&argv)
            .stdin(std::process::Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("starting kube-apiserver again")?;
        while client.apiserver_version().await.is_err() {
            if t.elapsed() > Duration::from_secs(120) {
                bail!("kube-apiserver did not answer within 120 s of its restart");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Ok(t.elapsed().as_secs_f64())
    }

    /// Compacts etcd's history up to its current revision; returns that revision, None when
    /// nothing was written since the last compaction.
    pub async fn compact_etcd(&self) -> Result<Option<u64>> {
        let port = self.etcd_port()?;
        tokio::task::spawn_blocking(move || {
            let range = post(port, "/v3/kv/range", r#"{"key":"AA==","limit":1}"#)?;
            let v: serde_json::Value = serde_json::from_str(&range)?;
            let rev: u64 = v["header"]["revision"]
                .as_str()
                .context("no revision in etcd's answer")?
                .parse()?;
            let body = format!(r#"{{"revision":"{rev}","physical":true}}"#);
            match post(port, "/v3/kv/compaction", &body) {
                Ok(_) => Ok(Some(rev)),
                Err(e) if e.to_string().contains("has been compacted") => Ok(None),
                Err(e) => Err(e),
            }
        })
        .await?
    }
}

/// The process is gone, or a zombie nobody reaped yet (then it serves nothing either).
fn exited(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z')),
        Err(_) => true,
    }
}

fn signal(pid: u32, sig: &str) {
    let _ = std::process::Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status();
}

/// A JSON POST over plain HTTP on loopback; the body of a 200.
fn post(port: u16, path: &str, body: &str) -> Result<String> {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    write!(
        s,
        "POST {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )?;
    let mut buf = String::new();
    s.read_to_string(&mut buf)?;
    let (head, rest) = buf.split_once("\r\n\r\n").unwrap_or((&buf, ""));
    if head.split_whitespace().nth(1).is_none_or(|c| c != "200") {
        bail!("etcd {path}: {head} {rest}");
    }
    Ok(rest.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_zombie_counts_as_exited() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        // `true` exits at once, but a loaded machine may take a while to run it.
        let t = Instant::now();
        while !exited(pid) && t.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(exited(pid), "a child not reaped yet is a zombie");
        child.wait().unwrap();
        assert!(exited(pid));
        assert!(!exited(std::process::id()));
    }

    #[test]
    fn the_shared_control_plane_is_refused() {
        let home = std::env::var("HOME").unwrap();
        let shared = Path::new(&home).join(".cache/kube-reloader/cluster/kubeconfig");
        if shared.exists() {
            let e = Plane::own(&shared).err().expect("refused");
            assert!(e.to_string().contains("shared control plane"), "{e}");
        }
        let e = Plane::own(Path::new("/nonexistent/kubeconfig")).err();
        assert!(e.is_some(), "no plane there");
    }
}
