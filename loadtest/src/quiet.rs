//! Before the controller starts: a cluster at rest, so its start-up is measured, not
//! kube-controller-manager's. Medium and large runs wait; small ones check correctness only.

use std::time::{Duration, Instant};

use kube::Client;

use crate::objects::{Population, WorkloadKind, WorkloadSpec};
use crate::pause::{self, Traces};
use crate::progress::log;
use crate::scenario::Plan;
use crate::{apimetrics, proxy};

/// Waits (when the plan asks for it) until kube-controller-manager has rolled out every
/// Deployment of the population and the API server's write rate has dropped: at the large scale
/// it is still creating ReplicaSets minutes after the last create, which would be measured as
/// the controller's start-up.
pub async fn wait_for_rest(client: &Client, plan: &Plan, pop: &Population, rollouts: &Traces) {
    let timeout = Duration::from_secs_f64(plan.ready_timeout_s);
    wait_rolled_out(pop, rollouts, timeout).await;
    wait_until_quiet(client, timeout).await;
}

/// Waits until every Deployment of `pop` has a `deployment.kubernetes.io/revision` (gives up,
/// and says so, after `timeout`).
async fn wait_rolled_out(pop: &Population, rollouts: &Traces, timeout: Duration) {
    let deployments: Vec<String> = pop
        .workloads
        .iter()
        .filter(|w| w.kind == WorkloadKind::Deployment)
        .map(WorkloadSpec::key)
        .collect();
    let t = Instant::now();
    let mut last_log = Instant::now();
    loop {
        let done = pause::rolled_out(rollouts, &deployments);
        if done == deployments.len() {
            log(&format!(
                "kube-controller-manager rolled out all {done} Deployments ({:.1}s waited)",
                t.elapsed().as_secs_f64()
            ));
            return;
        }
        if t.elapsed() > timeout {
            log(&format!(
                "WARNING: kube-controller-manager rolled out {done}/{} Deployments after {:.0}s; starting anyway",
                deployments.len(),
                timeout.as_secs_f64()
            ));
            return;
        }
        if last_log.elapsed() > Duration::from_secs(10) {
            log(&format!(
                "  waiting for kube-controller-manager: {done}/{} Deployments rolled out",
                deployments.len()
            ));
            last_log = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Below this many writes per second (cluster-wide, every client) the cluster is at rest.
const QUIET_WRITES_PER_S: f64 = 20.0;

/// Waits until the API server's write rate stays below [`QUIET_WRITES_PER_S`] for 5 s: after
/// its ReplicaSets, kube-controller-manager keeps updating the status of every new Deployment
/// (at the large scale ~300 writes/s for minutes), which would be measured as the controller's
/// start-up. Gives up (and says so) after `timeout`.
async fn wait_until_quiet(client: &Client, timeout: Duration) {
    let writes = |c: &proxy::Counts| -> u64 {
        c.iter()
            .filter(|((verb, _), _)| {
                matches!(
                    verb.as_str(),
                    "create" | "update" | "patch" | "delete" | "deletecollection"
                )
            })
            .map(|(_, n)| n)
            .sum()
    };
    let window = Duration::from_secs(5);
    let t = Instant::now();
    let Ok(mut before) = apimetrics::scrape(client).await else {
        log("WARNING: the API server's /metrics cannot be read: not waiting for a quiet cluster");
        return;
    };
    loop {
        tokio::time::sleep(window).await;
        let Ok(now) = apimetrics::scrape(client).await else {
            continue;
        };
        let rate = writes(&now).saturating_sub(writes(&before)) as f64 / window.as_secs_f64();
        if rate < QUIET_WRITES_PER_S {
            log(&format!(
                "the cluster is at rest ({rate:.0} writes/s; {:.0}s waited)",
                t.elapsed().as_secs_f64()
            ));
            return;
        }
        if t.elapsed() > timeout {
            log(&format!(
                "WARNING: still {rate:.0} writes/s after {:.0}s; starting anyway",
                t.elapsed().as_secs_f64()
            ));
            return;
        }
        log(&format!(
            "  waiting for a quiet cluster: {rate:.0} writes/s"
        ));
        before = now;
    }
}
