//! `--enable-ha` on the leader Lease alone, for an identity that may only `get, create, update`
//! the leader Lease (`stakater-reloader-lock`, what Reloader's chart grants): active/standby as in Reloader.
//! A standby waits for the Lease and does nothing else; the leader acts on every namespace and
//! exits when another replica holds the Lease or it could not renew within the renew deadline.
//! Exiting is the fence: the renew deadline is shorter than the Lease, so the old leader has
//! stopped before a standby can take the Lease, and the new leader's start-up reconcile rolls
//! what changed in between.

use std::sync::Mutex;
use std::time::Instant;

use k8s_openapi::api::coordination::v1::Lease;
use kube::{Api, Client};
use tracing::{debug, info, warn};

use super::lease;
use super::liveness::Liveness;
use crate::config::shard::ShardSettings;

#[derive(Debug, thiserror::Error)]
pub enum LeaderLockError {
    #[error("another replica holds the leader Lease now")]
    Lost,
    #[error("the leader Lease could not be renewed within the renew deadline: {0}")]
    NotRenewed(kube::Error),
}

pub struct LeaderLock {
    leases: Api<Lease>,
    settings: ShardSettings,
    liveness: Mutex<Liveness>,
}

impl LeaderLock {
    pub fn new(client: Client, settings: ShardSettings) -> Self {
        Self {
            leases: Api::namespaced(client, &settings.namespace),
            settings,
            liveness: Default::default(),
        }
    }

    fn duration_secs(&self) -> i32 {
        self.settings.lease_duration.as_secs().max(1) as i32
    }

    async fn round(&self) -> Result<bool, kube::Error> {
        let me = &self.settings.me;
        let name = &self.settings.leader_lease;
        lease::try_lead(&self.leases, name, me, self.duration_secs(), &self.liveness).await
    }

    /// Returns once this replica holds the Lease.
    pub async fn acquire(&self) {
        info!(
            lease = %self.settings.leader_lease,
            "standby: waiting for the leader Lease"
        );
        loop {
            match self.round().await {
                Ok(true) => {
                    info!(lease = %self.settings.leader_lease, "became the leader");
                    return;
                }
                Ok(false) => debug!("another replica leads"),
                Err(e) => warn!(error = %e, "leader election round failed"),
            }
            tokio::time::sleep(self.settings.retry_period).await;
        }
    }

    /// Renews the Lease until it is lost (the caller exits the process).
    pub async fn hold(&self) -> LeaderLockError {
        let mut renewed = Instant::now();
        loop {
            tokio::time::sleep(self.settings.retry_period).await;
            match self.round().await {
                Ok(true) => renewed = Instant::now(),
                Ok(false) => return LeaderLockError::Lost,
                Err(e) if renewed.elapsed() >= self.settings.renew_deadline => {
                    return LeaderLockError::NotRenewed(e);
                }
                Err(e) => warn!(error = %e, "could not renew the leader Lease; retrying"),
            }
        }
    }

    /// Hands the Lease back so a standby takes over at its next round (unless
    /// `--leader-election-release-on-cancel=false`: then it expires).
    pub async fn resign(&self) {
        if !self.settings.release_on_cancel {
            return;
        }
        lease::resign(&self.leases, &self.settings.leader_lease, &self.settings.me).await;
    }
}
