//! Before writing during a shard handover, checks that the change about to be written is the
//! newest this replica knows and that this replica's view of the config is as new as the API
//! server's.
//!
//! In a handover two replicas act on one namespace for a moment, each from its own watch. The one
//! whose list or watch lags could write a config's older hash after the other wrote the newer one
//! (the workload would roll back and forth: A, B, A, B). So while settling, a write reads the
//! workload first, then compares, for each config it writes, the resourceVersion its index holds
//! with the server's (a metadata-only GET: no payload crosses the wire) and the change's hash with
//! the index's; it waits while either is behind, and the queue retries with the newer changes the
//! watch brings meanwhile. The order matters: another replica's newer write that lands before
//! our read of the workload implies a newer config, which this check sees; one that lands after
//! it fails our write's resourceVersion test. Outside handovers nothing is checked.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::{Api, Client};
use tracing::warn;

use crate::index::ReverseIndex;
use crate::model::{ConfigKey, ConfigKind};

use super::queue::{QueuedChange, WriteError};
use super::writer::classify;

/// A change older than this writes without waiting any longer for the view to catch up (a config
/// that left the label selector, say, never reaches the index again).
const MAX_VIEW_WAIT: Duration = Duration::from_secs(20);

/// How an indexed config compares with the server's object.
#[derive(Debug, PartialEq, Eq)]
pub enum ViewLag {
    Current,
    /// The server has a newer version (or the index has not seen the object yet).
    Behind,
    /// The index still holds a config the server deleted: the delete event is on its way.
    DeletePending,
    /// The index already holds a newer state than the change: the newer change is queued.
    Superseded,
}

/// Pure comparison of resourceVersions (`None`: absent on that side; 0: unknown, not compared).
pub fn view_lag(indexed: Option<u64>, server: Option<u64>) -> ViewLag {
    match (indexed, server) {
        (Some(_), None) => ViewLag::DeletePending,
        (None, Some(_)) => ViewLag::Behind,
        (Some(mine), Some(theirs)) if mine != 0 && theirs != 0 && mine < theirs => ViewLag::Behind,
        _ => ViewLag::Current,
    }
}

pub struct ConfigViews {
    client: Client,
    index: Arc<ReverseIndex>,
}

impl ConfigViews {
    pub fn new(client: Client, index: Arc<ReverseIndex>) -> Self {
        Self { client, index }
    }

    /// `Err(NotYet)` while a change is not the newest indexed one for its config, or the index is
    /// behind the server for that config.
    pub async fn ensure_current(&self, changes: &[QueuedChange]) -> Result<(), WriteError> {
        for queued in changes {
            let config = &queued.change.config;
            // CSI changes come from pod statuses, whose versions the watch already orders.
            if config.kind == ConfigKind::SecretProviderClass {
                continue;
            }
            let indexed = self.index.config(config);
            let superseded = match (&queued.change.hash, &indexed) {
                (Some(hash), Some(state)) => *hash != state.digest.reloader_hash(),
                (Some(_), None) | (None, Some(_)) => true,
                (None, None) => false,
            };
            let lag = if superseded {
                ViewLag::Superseded
            } else {
                match self.server_version(config).await? {
                    Some(server) => view_lag(indexed.map(|s| s.resource_version), server),
                    None => ViewLag::Current,
                }
            };
            if lag == ViewLag::Current {
                continue;
            }
            if queued.observed_at.elapsed() > MAX_VIEW_WAIT {
                warn!(config = %config, ?lag, "config view still behind after {MAX_VIEW_WAIT:?}; writing what this replica has");
                continue;
            }
            return Err(WriteError::NotYet(format!(
                "view of {config} behind ({lag:?}, indexed version {:?})",
                indexed.map(|s| s.resource_version)
            )));
        }
        Ok(())
    }

    /// The server's resourceVersion of `config`: `Ok(None)` when the kind is not checked,
    /// `Ok(Some(None))` when the object is gone.
    async fn server_version(&self, config: &ConfigKey) -> Result<Option<Option<u64>>, WriteError> {
        let meta = match config.kind {
            ConfigKind::ConfigMap => {
                Api::<ConfigMap>::namespaced(self.client.clone(), &config.namespace)
                    .get_metadata_opt(&config.name)
                    .await
                    .map(|m| m.map(|m| m.metadata))
            }
            ConfigKind::Secret => Api::<Secret>::namespaced(self.client.clone(), &config.namespace)
                .get_metadata_opt(&config.name)
                .await
                .map(|m| m.map(|m| m.metadata)),
            ConfigKind::SecretProviderClass => return Ok(None),
        }
        .map_err(classify)?;
        Ok(Some(meta.map(|m| crate::index::resource_version(&m))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_index_is_behind_when_the_server_is_newer_or_unknown_to_it() {
        assert_eq!(view_lag(Some(10), Some(10)), ViewLag::Current);
        assert_eq!(
            view_lag(Some(12), Some(10)),
            ViewLag::Current,
            "a read from a lagging cache"
        );
        assert_eq!(view_lag(Some(10), Some(12)), ViewLag::Behind);
        assert_eq!(view_lag(None, Some(12)), ViewLag::Behind);
        assert_eq!(view_lag(Some(10), None), ViewLag::DeletePending);
        assert_eq!(view_lag(None, None), ViewLag::Current);
        assert_eq!(
            view_lag(Some(0), Some(12)),
            ViewLag::Current,
            "unknown version: not compared"
        );
    }
}
