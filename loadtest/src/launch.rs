//! Starting the controller under test: its credentials (through the counting proxy unless
//! `--direct`), one command line per replica from `--controller-cmd`, the processes, and the
//! wait until they are ready (and, sharded, until the replicas agree on who owns what).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Result;

use crate::args::Args;
use crate::chaos::faults::FaultProxy;
use crate::controller::ControllerProc;
use crate::objects::kube_client;
use crate::objects::{OwnRequests, RUN_LABEL};
use crate::progress::log;
use crate::proxy::Proxy;
use crate::scenario::Scenario;
use crate::setup::RunEnv;
use crate::sharded::{self, Converged};

/// How often the controller's memory and CPU are sampled.
pub const SAMPLE_EVERY: Duration = Duration::from_millis(500);

/// One controller process to run.
pub struct ReplicaCmd {
    pub cmd: String,
    pub ready_url: String,
    pub metrics_url: String,
    pub log_path: PathBuf,
    /// The kubeconfig it is given (chaos: its own fault proxy's).
    pub kubeconfig: PathBuf,
    /// POD_NAME and POD_NAMESPACE of a sharded replica.
    pub env: Vec<(String, String)>,
    /// POD_NAME of a sharded replica.
    pub name: Option<String>,
}

/// The controller under test: its replicas' commands and, once started, their processes.
pub struct Controllers {
    pub proxy: Option<Proxy>,
    /// The kubeconfig written for the proxy (deleted at the end).
    pub proxy_kubeconfig: PathBuf,
    pub replicas: Vec<ReplicaCmd>,
    /// Sharded: where the Leases and the assignment live.
    pub lease_ns: Option<String>,
    /// Every process started, in order (restart: the killed one, then its successor).
    pub procs: Vec<ControllerProc>,
    pub ready_times: Vec<f64>,
    pub converged: Option<Converged>,
    pub ready_timeout: Duration,
    /// When the processes were started: wall clock (the audit log's) and monotonic (set again
    /// by `start`).
    pub wall_spawn: jiff::Timestamp,
    pub t_spawn: Instant,
    /// Replicas started by `start` (chaos starts fewer than it may scale up to).
    pub initial: usize,
    /// `--enable-ha`: standbys are never ready, so `start` waits for one replica only.
    pub ha: bool,
    /// chaos: one fault proxy in front of each replica (in `replicas` order).
    pub fault_proxies: Vec<FaultProxy>,
}

impl Controllers {
    /// Starts the proxy and writes the command line of every replica; nothing runs yet.
    pub async fn prepare(env: &RunEnv<'_>, own: &OwnRequests) -> Result<Self> {
        let creds = controller_credentials(env.args, env.kubeconfig);
        let proxy = if env.args.direct {
            None
        } else {
            Some(Proxy::start(kube_client(&creds).await?, env.epoch).await?)
        };
        let proxy_kubeconfig =
            std::env::temp_dir().join(format!("kube-reloader-loadtest-{}.kubeconfig", env.run_id));
        let kubeconfig = match &proxy {
            Some(p) => {
                p.write_kubeconfig(&proxy_kubeconfig)?;
                proxy_kubeconfig.clone()
            }
            None => creds,
        };
        // One process per replica (sharded: N, each with its own metrics port and identity).
        let lease_ns = match env.scenario {
            Scenario::Sharded | Scenario::Chaos => {
                Some(sharded::create_lease_namespace(env.client, &env.run_id, own).await?)
            }
            _ => None,
        };
        let mut replicas = replica_cmds(env, &kubeconfig, lease_ns.as_deref())?;
        let (mut initial, mut ha, mut fault_proxies) = (replicas.len(), false, Vec::new());
        if env.scenario == Scenario::Chaos {
            let chaos = crate::chaos::settings::Settings::new(env.args);
            (initial, ha) = (chaos.replicas, chaos.enable_ha);
            fault_proxies = chaos_proxies(env, &kubeconfig, &mut replicas).await?;
        }
        Ok(Self {
            proxy,
            proxy_kubeconfig,
            replicas,
            lease_ns,
            procs: Vec::new(),
            ready_times: Vec::new(),
            converged: None,
            ready_timeout: Duration::from_secs_f64(env.plan.ready_timeout_s),
            wall_spawn: jiff::Timestamp::now(),
            t_spawn: Instant::now(),
            initial,
            ha,
            fault_proxies,
        })
    }

    pub fn sharded(&self) -> bool {
        self.lease_ns.is_some()
    }

    /// Starts every replica and waits until each is ready and, sharded, until they converged.
    pub async fn start(&mut self, env: &RunEnv<'_>, namespaces: usize) -> Result<()> {
        self.t_spawn = Instant::now();
        self.wall_spawn = jiff::Timestamp::now();
        for r in &self.replicas[..self.initial] {
            log(&format!("starting the controller: {}", r.cmd));
            self.procs.push(ControllerProc::spawn(
                &r.cmd,
                &r.kubeconfig,
                &r.env,
                &r.log_path,
                env.epoch,
                SAMPLE_EVERY,
            )?);
        }
        if self.ha && self.replicas[0].ready_url != "none" {
            let ttr = self.wait_one_ready(env.epoch).await?;
            log(&format!("the HA leader is ready after {ttr:.2}s"));
            self.ready_times.push(ttr);
        } else if self.replicas[0].ready_url != "none" {
            let waits = self
                .procs
                .iter_mut()
                .zip(&self.replicas)
                .map(|(p, r)| p.wait_ready(&r.ready_url, self.ready_timeout, env.epoch));
            for ttr in futures::future::try_join_all(waits).await? {
                log(&format!("controller ready after {ttr:.2}s"));
                self.ready_times.push(ttr);
            }
        }
        if let Some(ns) = self.lease_ns.as_ref().filter(|_| !self.ha) {
            let n = self.initial;
            let names = &self.names()[..n];
            let ready_urls: Vec<String> = self.replicas[..n]
                .iter()
                .map(|r| r.ready_url.clone())
                .collect();
            let metrics_urls = &self.metrics_urls()[..n];
            let replicas = sharded::Replicas {
                lease_ns: ns,
                names,
                ready_urls: &ready_urls,
                metrics_urls,
            };
            let c = sharded::wait_converged(
                env.client,
                &replicas,
                namespaces,
                self.ready_timeout,
                self.t_spawn,
            )
            .await?;
            log(&format!(
                "{} replicas converged after {:.2}s: owned namespaces {:?}",
                names.len(),
                c.after_s,
                c.owned
            ));
            self.converged = Some(c);
        }
        Ok(())
    }

    /// Starts the first replica's command again (restart: after its SIGKILL) and waits until it
    /// is ready.
    pub async fn restart_first(&mut self, epoch: Instant) -> Result<()> {
        let r = &self.replicas[0];
        let mut p = ControllerProc::spawn(
            &r.cmd,
            &r.kubeconfig,
            &r.env,
            &r.log_path,
            epoch,
            SAMPLE_EVERY,
        )?;
        if r.ready_url != "none" {
            let ttr = p
                .wait_ready(&r.ready_url, self.ready_timeout, epoch)
                .await?;
            log(&format!("controller ready again after {ttr:.2}s"));
            self.ready_times.push(ttr);
        }
        self.procs.push(p);
        Ok(())
    }

    /// Polls every started replica's /ready until one answers 200 (HA: the leader); returns its
    /// time to ready.
    async fn wait_one_ready(&mut self, epoch: Instant) -> Result<f64> {
        let started = Instant::now();
        while started.elapsed() < self.ready_timeout {
            for (p, r) in self.procs.iter_mut().zip(&self.replicas) {
                if let Some(status) = p.exited() {
                    anyhow::bail!("a replica exited with {status}; see {}", p.log.display());
                }
                let u = r.ready_url.clone();
                let code = tokio::task::spawn_blocking(move || crate::controller::http_status(&u));
                if code.await.ok().flatten() == Some(200) {
                    p.ready_at = Some(epoch.elapsed().as_secs_f64());
                    return Ok(p.ready_at.unwrap_or_default() - p.started_at);
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        anyhow::bail!("no replica was ready within {:?}", self.ready_timeout)
    }

    pub fn names(&self) -> Vec<String> {
        self.replicas
            .iter()
            .filter_map(|r| r.name.clone())
            .collect()
    }

    pub fn metrics_urls(&self) -> Vec<String> {
        self.replicas
            .iter()
            .map(|r| r.metrics_url.clone())
            .collect()
    }
}

/// The command line, URLs, log file and environment of each replica.
fn replica_cmds(
    env: &RunEnv<'_>,
    kubeconfig: &Path,
    lease_ns: Option<&str>,
) -> Result<Vec<ReplicaCmd>> {
    let scenario_flags = match env.scenario {
        Scenario::Chaos => crate::chaos::settings::Settings::new(env.args).controller_flags(),
        _ => env.plan.controller_flags(env.scenario),
    };
    if !scenario_flags.is_empty() && !env.args.controller_cmd.contains("{scenario_flags}") {
        log(&format!(
            "WARNING: --controller-cmd has no {{scenario_flags}}: the scenario's flags ({scenario_flags}) are not passed"
        ));
    }
    let ports = free_ports(env.plan.replicas)?;
    let mut replicas = Vec::new();
    for (i, port) in ports.into_iter().enumerate() {
        let vars: BTreeMap<&str, String> = BTreeMap::from([
            ("bin", env.bin.unwrap_or_default().to_string()),
            ("selector", format!("{RUN_LABEL}={}", env.run_id)),
            ("run_id", env.run_id.clone()),
            ("metrics_addr", format!("127.0.0.1:{port}")),
            ("metrics_port", port.to_string()),
            ("scenario_flags", scenario_flags.clone()),
            ("kubeconfig", kubeconfig.display().to_string()),
        ]);
        let (file, mut pod_env, name) = match lease_ns {
            Some(ns) => {
                let me = sharded::replica_name(&env.run_id, i);
                let pod_env = vec![
                    ("POD_NAME".into(), me.clone()),
                    ("POD_NAMESPACE".into(), ns.to_string()),
                ];
                (format!("{}.r{i}", env.name), pod_env, Some(me))
            }
            None => (env.name.clone(), vec![], None),
        };
        // No probe server (`--health-addr`, default :8080): replicas on one host would all want
        // that port. An environment variable, so a controller without the flag ignores it.
        pod_env.push(("HEALTH_ADDR".into(), "0".into()));
        let log_path = env.results_dir.join(format!("{file}.controller.log"));
        let _ = std::fs::remove_file(&log_path);
        replicas.push(ReplicaCmd {
            cmd: fill(&env.args.controller_cmd, &vars),
            ready_url: fill(&env.args.ready_url, &vars),
            metrics_url: fill(&env.args.metrics_url, &vars),
            log_path,
            kubeconfig: kubeconfig.to_path_buf(),
            env: pod_env,
            name,
        });
    }
    Ok(replicas)
}

/// chaos: a fault proxy in front of each replica, forwarding to `upstream` (the counting proxy's
/// kubeconfig, or the credentials with `--direct`); each replica is given its proxy's kubeconfig.
async fn chaos_proxies(
    env: &RunEnv<'_>,
    upstream: &Path,
    replicas: &mut [ReplicaCmd],
) -> Result<Vec<FaultProxy>> {
    let mut proxies = Vec::new();
    for (i, r) in replicas.iter_mut().enumerate() {
        let path = std::env::temp_dir().join(format!(
            "kube-reloader-loadtest-{}.r{i}.kubeconfig",
            env.run_id
        ));
        let p = FaultProxy::start(kube_client(upstream).await?, &path, i as u64 + 1).await?;
        // A command that names {kubeconfig} gets the replica's own too.
        let own = p.kubeconfig().display().to_string();
        r.cmd = r.cmd.replace(&upstream.display().to_string(), &own);
        r.kubeconfig = p.kubeconfig().to_path_buf();
        proxies.push(p);
    }
    Ok(proxies)
}

/// The controller's credentials: `--controller-kubeconfig`, else the local control plane's
/// audit-logged identity if the kubeconfig has one next to it, else the kubeconfig itself.
fn controller_credentials(args: &Args, kubeconfig: &Path) -> PathBuf {
    if let Some(p) = &args.controller_kubeconfig {
        return p.clone();
    }
    let own = kubeconfig.with_file_name("loadtest-controller.kubeconfig");
    if own.exists() {
        own
    } else {
        kubeconfig.to_path_buf()
    }
}

/// `n` distinct free ports, below the ephemeral range: a replica a scale fault starts binds
/// its port minutes after it was chosen.
fn free_ports(n: usize) -> Result<Vec<u16>> {
    Ok((0..n).map(|_| apiproxy::ports::free_port()).collect())
}

/// `template` with every `{name}` of `vars` replaced.
fn fill(template: &str, vars: &BTreeMap<&str, String>) -> String {
    let mut s = template.to_string();
    for (k, v) in vars {
        s = s.replace(&format!("{{{k}}}"), v);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fill_replaces_every_placeholder_and_leaves_unknown_ones() {
        let vars = BTreeMap::from([("bin", "/b".to_string()), ("metrics_addr", "h:1".into())]);
        assert_eq!(
            fill("{bin} --a={metrics_addr} --b={metrics_addr} {other}", &vars),
            "/b --a=h:1 --b=h:1 {other}"
        );
    }

    #[test]
    fn free_ports_are_distinct() {
        let p = free_ports(4).unwrap();
        let distinct: std::collections::BTreeSet<_> = p.iter().collect();
        assert_eq!(distinct.len(), 4);
    }
}
