//! The replicas of a chaos run as a fleet that faults act on: which process runs as which
//! replica, killing, stopping, restarting (with a skewed clock), scaling, and restarting a
//! replica whose process exited by itself, as the kubelet would.

use std::time::{Duration, Instant};

use anyhow::Result;

use crate::controller::ControllerProc;
use crate::launch::{Controllers, SAMPLE_EVERY};
use crate::progress::log;

/// Debian's `faketime` package.
const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

/// The grace of a SIGTERM (scale-down, the restarts of a skew), as a pod's default.
const GRACE: Duration = Duration::from_secs(30);

pub struct Fleet<'a> {
    ctl: &'a mut Controllers,
    /// Replica index -> its process in `ctl.procs`, while it should run.
    live: Vec<Option<usize>>,
    epoch: Instant,
    /// `--enable-ha`: a standby is never ready, so a start does not wait for /ready.
    ha: bool,
    /// Replicas the last scaling asked for: a fault that ends late (its restart waited for a
    /// scaling) does not start a replica the scaling stopped.
    wanted: usize,
}

impl<'a> Fleet<'a> {
    /// The fleet as `Controllers::start` left it: the first `ctl.initial` replicas running.
    pub fn new(ctl: &'a mut Controllers, epoch: Instant, ha: bool) -> Self {
        let live = (0..ctl.replicas.len())
            .map(|i| (i < ctl.procs.len()).then_some(i))
            .collect();
        let wanted = ctl.procs.len();
        Self {
            ctl,
            live,
            epoch,
            ha,
            wanted,
        }
    }

    pub fn running(&self) -> usize {
        self.live.iter().flatten().count()
    }

    fn proc(&mut self, i: usize) -> Option<&mut ControllerProc> {
        let idx = self.live.get(i).copied().flatten()?;
        self.ctl.procs.get_mut(idx)
    }

    pub async fn kill(&mut self, i: usize) {
        let epoch = self.epoch;
        if let Some(p) = self.proc(i) {
            p.kill_hard(epoch).await;
        }
        self.live[i] = None;
    }

    /// SIGSTOP (`cont` false) or SIGCONT to the replica's process group.
    pub fn pause(&mut self, i: usize, cont: bool) {
        if let Some(p) = self.proc(i) {
            p.signal_group(if cont { "CONT" } else { "STOP" });
        }
    }

    /// SIGTERM and the wait for the hand-over; returns how it exited.
    pub async fn terminate(&mut self, i: usize) -> String {
        let epoch = self.epoch;
        let exit = match self.proc(i) {
            Some(p) => p.terminate(GRACE, epoch).await,
            None => "not running".into(),
        };
        self.live[i] = None;
        exit
    }

    /// Starts replica `i` (with its clock `skew_s` off under faketime) and, unless HA, waits
    /// until it is ready; returns the seconds to ready.
    pub async fn start(&mut self, i: usize, skew_s: Option<i64>) -> Result<f64> {
        if i >= self.wanted {
            log(&format!(
                "chaos: r{i} not started again: scaled to {}",
                self.wanted
            ));
            return Ok(0.0);
        }
        // A scaling that ran while the replica was down (its fault waited) started it already.
        if self.live[i].is_some() {
            log(&format!("chaos: r{i} is running already"));
            return Ok(0.0);
        }
        let r = &self.ctl.replicas[i];
        let cmd = match skew_s {
            // Only the wall clock: the skew is what Lease timestamps see, not timers. The
            // library preloaded, not the `faketime` wrapper: the wrapper forks and exits on
            // SIGTERM while the controller still hands over, and the next start then finds
            // its port taken.
            Some(s) => format!(
                "env LD_PRELOAD={LIBFAKETIME} FAKETIME={s:+}s FAKETIME_DONT_FAKE_MONOTONIC=1 {}",
                r.cmd
            ),
            None => r.cmd.clone(),
        };
        let mut p = ControllerProc::spawn(
            &cmd,
            &r.kubeconfig,
            &r.env,
            &r.log_path,
            self.epoch,
            SAMPLE_EVERY,
        )?;
        let t = Instant::now();
        let ready = match self.ha || r.ready_url == "none" {
            true => Ok(0.0),
            false => {
                p.wait_ready(&r.ready_url, self.ctl.ready_timeout, self.epoch)
                    .await
            }
        };
        self.ctl.procs.push(p);
        self.live[i] = Some(self.ctl.procs.len() - 1);
        let ttr = ready?;
        self.ctl.ready_times.push(ttr);
        log(&format!(
            "chaos: replica r{i} started{} (ready after {:.1}s)",
            skew_s.map_or(String::new(), |s| format!(" with its clock {s:+}s off")),
            t.elapsed().as_secs_f64()
        ));
        Ok(ttr)
    }

    /// Starts or stops (SIGTERM, all at once) replicas until the first `to` run.
    pub async fn scale(&mut self, to: usize) -> Result<String> {
        let from = self.running();
        self.wanted = to;
        let stopping: Vec<usize> = (to..self.live.len())
            .filter(|&i| self.live[i].is_some())
            .collect();
        let epoch = self.epoch;
        let mut terms = Vec::new();
        for &i in &stopping {
            let idx = self.live[i].take().expect("running");
            terms.push(idx);
        }
        let procs = &mut self.ctl.procs;
        let exits = futures::future::join_all(
            procs
                .iter_mut()
                .enumerate()
                .filter(|(k, _)| terms.contains(k))
                .map(|(_, p)| p.terminate(GRACE, epoch)),
        )
        .await;
        for i in 0..to.min(self.live.len()) {
            if self.live[i].is_none() {
                self.start(i, None).await?;
            }
        }
        Ok(format!(
            "{from} -> {} replicas; stopped {stopping:?}: {exits:?}",
            self.running()
        ))
    }

    /// Replicas whose process exited although it should run (an HA leader that lost its Lease
    /// exits by design); each is started again. Returns them with their exit status.
    pub async fn revive_exited(&mut self) -> Vec<(usize, String)> {
        let mut exited = Vec::new();
        for i in 0..self.live.len() {
            if let Some(status) = self.proc(i).and_then(|p| p.exited()) {
                exited.push((i, status.to_string()));
            }
        }
        for (i, status) in &exited {
            log(&format!(
                "chaos: replica r{i} exited by itself ({status}); starting it again"
            ));
            self.live[*i] = None;
            if let Err(e) = self.start(*i, None).await {
                log(&format!("chaos: replica r{i} did not come back: {e:#}"));
            }
        }
        exited
    }

    /// Every replica that should run is running (and, unless HA, ready): the end of the faults.
    pub async fn restore(&mut self, to: usize) -> Result<()> {
        self.revive_exited().await;
        for i in 0..self.live.len() {
            self.pause(i, true);
        }
        self.scale(to).await.map(|_| ())
    }
}
