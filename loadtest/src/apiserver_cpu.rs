//! kube-apiserver's CPU-seconds over a run in which it may be restarted (chaos): a reading of
//! /proc is per process, so "after minus before" across a restart subtracts the old process's
//! total from the new one's and can go negative. The meter samples the pid and its CPU every
//! [`SAMPLE_EVERY`] and sums over every process it saw.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Up to this much of a restarted process's last CPU (between its last sample and its exit) is
/// not counted; its graceful shutdown mostly waits.
pub const SAMPLE_EVERY: Duration = Duration::from_millis(250);

/// The sum over processes of (last reading - first reading); pure, fed by the sampler.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct CpuAcrossRestarts {
    /// CPU-seconds of the processes already replaced.
    finished_s: f64,
    /// (pid, reading when first seen during the run, latest reading).
    current: Option<(u32, f64, f64)>,
}

impl CpuAcrossRestarts {
    pub fn observe(&mut self, pid: u32, cpu_s: f64) {
        self.current = Some(match self.current {
            Some((seen, first, last)) if seen == pid => (pid, first, last.max(cpu_s)),
            Some((_, first, last)) => {
                self.finished_s += last - first;
                // Started during the run: all of its CPU belongs to the run.
                (pid, 0.0, cpu_s)
            }
            None => (pid, cpu_s, cpu_s),
        });
    }

    /// CPU-seconds since the first reading; `None` before any.
    pub fn total_s(&self) -> Option<f64> {
        self.current
            .map(|(_, first, last)| self.finished_s + last - first)
    }
}

/// A sampler task over the local control plane's kube-apiserver.
pub struct ApiserverCpuMeter {
    reading: Arc<Mutex<CpuAcrossRestarts>>,
    kubeconfig: PathBuf,
    task: tokio::task::JoinHandle<()>,
}

impl ApiserverCpuMeter {
    pub fn start(kubeconfig: &std::path::Path) -> Self {
        let reading = Arc::new(Mutex::new(CpuAcrossRestarts::default()));
        let kubeconfig = kubeconfig.to_path_buf();
        sample_into(&reading, &kubeconfig);
        let task = tokio::spawn({
            let (reading, kubeconfig) = (reading.clone(), kubeconfig.clone());
            async move {
                let mut tick = tokio::time::interval(SAMPLE_EVERY);
                loop {
                    tick.tick().await;
                    sample_into(&reading, &kubeconfig);
                }
            }
        });
        Self {
            reading,
            kubeconfig,
            task,
        }
    }

    /// Stops sampling; CPU-seconds from `start` to now, `None` when no kube-apiserver of the
    /// local control plane was found.
    pub fn finish(self) -> Option<f64> {
        self.task.abort();
        sample_into(&self.reading, &self.kubeconfig);
        self.reading.lock().expect("meter lock").total_s()
    }
}

fn sample_into(reading: &Mutex<CpuAcrossRestarts>, kubeconfig: &std::path::Path) {
    if let Some((pid, cpu_s)) = crate::controller::apiserver_cpu_s(kubeconfig) {
        reading.lock().expect("meter lock").observe(pid, cpu_s);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_process_counts_from_the_first_reading() {
        let mut m = CpuAcrossRestarts::default();
        assert_eq!(m.total_s(), None);
        m.observe(10, 100.0);
        m.observe(10, 112.5);
        assert_eq!(m.total_s(), Some(12.5));
    }

    #[test]
    fn a_restart_adds_the_new_process_from_zero_and_never_goes_negative() {
        let mut m = CpuAcrossRestarts::default();
        m.observe(10, 300.0);
        m.observe(10, 320.0);
        // Restarted: the new process has used 4 s so far, far below the old one's total.
        m.observe(11, 4.0);
        m.observe(11, 9.0);
        assert_eq!(m.total_s(), Some(29.0));
        m.observe(12, 1.0);
        assert_eq!(m.total_s(), Some(30.0));
    }

    #[test]
    fn a_reading_lower_than_the_last_of_the_same_process_is_ignored() {
        let mut m = CpuAcrossRestarts::default();
        m.observe(10, 50.0);
        m.observe(10, 55.0);
        m.observe(10, 54.0);
        assert_eq!(m.total_s(), Some(5.0));
    }
}
