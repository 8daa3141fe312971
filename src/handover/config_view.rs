//! Before writing during a shard handover, checks that the change about to be written is the
//! newest this replica knows and that this replica's view of the config is as new as the API
//! server's.
//!
//! In a handover two replicas act on one namespace for a moment, each from its own watch. The one
//! whose list or watch lags could write a config's older hash after the other wrote the newer one
//! (the workload would roll back and forth: A, B, A, B). So while settling, a write in a namespace
//! whose owner changed (`shard::Moves`) reads the
//! workload first, then compares, for each config it writes, the resourceVersion its index holds
//! with the server's (a metadata-only GET: no payload crosses the wire) and the change's hash with
//! the index's; it waits while either is behind, and the queue retries with the newer changes the
//! watch brings meanwhile. The order matters: another replica's newer write that lands before
//! our read of the workload implies a newer config, which this check sees; one that lands after
//! it fails our write's resourceVersion test. Outside handovers, and in namespaces whose owner
//! stayed the same, nothing is checked; once the Leases show every other live replica released
//! the move, only configs indexed at a version made before that are (`shard::Settling`): a newer
//! version is one no other replica can have acted on, so its write needs no GET.

use std::sync::Arc;
use std::time::{Duration, Instant};

use dashmap::DashMap;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::{Api, Client};
use tracing::warn;

use crate::digest::{ConfigSource, DigestPool};
use crate::index::{ConfigState, ReverseIndex};
use crate::model::{ConfigKey, ConfigKind};
use crate::reloader_format::hash::ConfigPayload;

use crate::reloader_format::template::TemplateChange;
use crate::rollout::{QueuedChange, ViewCheck, WriteError, classify};
use crate::shard::Settling;

/// How long a write waits for this replica's view of a config to catch up with the API server.
/// Past it, the change is written only if the server's content is the indexed one (a newer
/// version that changed only metadata); else not for that config: what the index holds is older
/// than what the server has, and writing it could roll a workload back over a newer value
/// another replica wrote (`chaos-medium-3r-c0e4b52`: a replica's start-up catch-up, its watch lagging, wrote
/// ten-minute-old hashes after this wait). Nothing is lost: when the watch delivers the newer
/// state, it queues its own reload; a config that never catches up (it left the label
/// selector) is no longer one this replica reloads for. Timed from the first time the view was
/// found behind, not from when the change was seen: a change held while this replica was paused
/// or fenced is that old already, and must still wait for the view it wakes up to.
const MAX_VIEW_WAIT: Duration = Duration::from_secs(20);

/// How an indexed config compares with the server's object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ViewLag {
    Current,
    /// The server has a newer version (or the index has not seen the object yet).
    Behind,
    /// The index still holds a config the server deleted: the delete event is on its way.
    DeletePending,
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

/// What a queued change becomes once compared with the index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Newest {
    /// Write this change (its hash replaced by the index's when the index holds a newer state).
    Write(TemplateChange),
    /// The change names a config the index does not hold (not listed yet here, or deleted).
    NotIndexed,
}

/// The newest this replica knows of a queued change's config. The index only ever moves
/// forward (an older state never replaces a newer one), so when it holds another state than the
/// change, that state is newer: writing the change's own hash would roll the workload back to a
/// value another replica may already have replaced. This happens to a change held while this
/// replica was paused or fenced: when it wakes up and writes, the newer change that superseded it
/// may have been written by another replica, and none is queued here.
pub fn newest(change: &TemplateChange, indexed: Option<&ConfigState>) -> Newest {
    match (indexed, &change.hash) {
        (Some(state), _) => Newest::Write(TemplateChange {
            hash: Some(state.value_for(&change.counted)),
            ..change.clone()
        }),
        (None, None) => Newest::Write(change.clone()),
        (None, Some(_)) => Newest::NotIndexed,
    }
}

pub struct ConfigViews {
    client: Client,
    index: Arc<ReverseIndex>,
    /// The watches' hashing threads: a config read whole is hashed there, as a watched one is.
    digests: DigestPool,
    /// When each config's view was first found behind the server (cleared once current).
    behind_since: DashMap<ConfigKey, Instant, ahash::RandomState>,
    max_wait: Duration,
}

impl ConfigViews {
    pub fn new(client: Client, index: Arc<ReverseIndex>, digests: DigestPool) -> Self {
        Self {
            client,
            index,
            digests,
            behind_since: Default::default(),
            max_wait: MAX_VIEW_WAIT,
        }
    }

    /// Another bound than [`MAX_VIEW_WAIT`] (tests).
    pub fn with_max_wait(self, max_wait: Duration) -> Self {
        Self { max_wait, ..self }
    }

    /// The changes to write: each with the newest hash this replica knows for its config.
    /// `Err(NotYet)` while this replica's view of a config is behind the server's. Configs
    /// `settling` does not check (their indexed version was made after every other replica
    /// stopped acting here) are not read from the server.
    pub async fn ensure_current(
        &self,
        changes: &[QueuedChange],
        settling: Settling,
    ) -> Result<Vec<TemplateChange>, WriteError> {
        let mut out = Vec::with_capacity(changes.len());
        for queued in changes {
            let config = &queued.change.config;
            // CSI changes come from pod statuses, whose versions the watch already orders.
            if config.kind == ConfigKind::SecretProviderClass {
                out.push(queued.change.clone());
                continue;
            }
            let indexed = self.index.config(config);
            let indexed_version = indexed.as_ref().map(|s| s.resource_version);
            let lag = match settling.checks(indexed_version) {
                true => match self.server_version(config).await? {
                    Some(server) => view_lag(indexed_version, server),
                    None => ViewLag::Current,
                },
                false => ViewLag::Current,
            };
            if lag != ViewLag::Current && !self.waited_enough(config) {
                return Err(WriteError::NotYet(format!(
                    "view of {config} behind ({lag:?}, indexed version {:?})",
                    indexed.as_ref().map(|s| s.resource_version)
                )));
            }
            self.behind_since.remove(config);
            if lag != ViewLag::Current && !self.same_content(config, lag, indexed.as_ref()).await? {
                warn!(config = %config, ?lag, max_wait = ?self.max_wait, "config view still behind; not writing its older hash (the watch brings the newer state, which queues its own reload)");
                continue;
            }
            match newest(&queued.change, indexed.as_ref()) {
                Newest::Write(change) => out.push(change),
                Newest::NotIndexed => {
                    warn!(config = %config, "config not in this replica's index; its change is not written")
                }
            }
        }
        Ok(out)
    }

    /// Past the wait: whether the server's content of `config` is the one the index holds. A
    /// newer resourceVersion may change only metadata (a label, an annotation); its watch event
    /// then queues nothing, so the write of the indexed hash must go ahead. The object is read
    /// whole (this is rare) and hashed off the async runtime; its data is dropped at once.
    async fn same_content(
        &self,
        config: &ConfigKey,
        lag: ViewLag,
        indexed: Option<&ConfigState>,
    ) -> Result<bool, WriteError> {
        let (ViewLag::Behind, Some(indexed)) = (lag, indexed) else {
            return Ok(false);
        };
        let payload = match config.kind {
            ConfigKind::ConfigMap => self.payload_of::<ConfigMap>(config).await?,
            ConfigKind::Secret => self.payload_of::<Secret>(config).await?,
            ConfigKind::SecretProviderClass => None,
        };
        let Some(payload) = payload else {
            return Ok(false);
        };
        let digest = self
            .digests
            .digest(payload)
            .await
            .map_err(|e| WriteError::Transient(format!("hashing {config}: {e}")))?;
        Ok(digest.blake3 == indexed.digest.blake3)
    }

    async fn payload_of<K>(&self, config: &ConfigKey) -> Result<Option<ConfigPayload>, WriteError>
    where
        K: ConfigSource + kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        K::DynamicType: Default,
    {
        let api = Api::<K>::namespaced(self.client.clone(), &config.namespace);
        let object = api.get_opt(&config.name).await.map_err(classify)?;
        Ok(object.map(ConfigSource::into_payload))
    }

    /// Starts the clock for `config` on the first call; true once it ran the maximum wait.
    fn waited_enough(&self, config: &ConfigKey) -> bool {
        let since = *self
            .behind_since
            .entry(config.clone())
            .or_insert_with(Instant::now);
        since.elapsed() > self.max_wait
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

/// The writer's check while a namespace settles (installed by the controller).
impl ViewCheck for ConfigViews {
    fn ensure_current<'a>(
        &'a self,
        changes: &'a [QueuedChange],
        settling: Settling,
    ) -> futures::future::BoxFuture<'a, Result<Vec<TemplateChange>, WriteError>> {
        Box::pin(ConfigViews::ensure_current(self, changes, settling))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reloader_format::hash::Digest;

    fn change(hash: Option<&str>) -> TemplateChange {
        TemplateChange {
            counted: Default::default(),
            config: ConfigKey::new(ConfigKind::ConfigMap, "ns", "app"),
            hash: hash.map(String::from),
            explicit: false,
        }
    }

    fn indexed(byte: u8) -> ConfigState {
        ConfigState {
            keys: Default::default(),
            digest: Digest {
                blake3: [byte; 16],
                sha1: [byte; 20],
            },
            ignore: false,
            matched: false,
            resource_version: 7,
            waves: None,
        }
    }

    /// A change held across a pause (v100) meets an index that has moved on (v_last, which
    /// another replica already wrote): writing v100 would roll the workload back for good.
    #[test]
    fn a_superseded_change_writes_the_newest_indexed_hash_never_its_own() {
        let newer = indexed(2);
        let old_hash = indexed(1).digest.reloader_hash();
        let Newest::Write(written) = newest(&change(Some(&old_hash)), Some(&newer)) else {
            panic!("the config is indexed");
        };
        assert_eq!(written.hash, Some(newer.digest.reloader_hash()));
        assert_ne!(written.hash, Some(old_hash));
        assert_eq!(written.config, change(None).config);
    }

    #[test]
    fn a_current_change_is_written_as_it_is_and_an_unindexed_one_not_at_all() {
        let state = indexed(3);
        let hash = state.digest.reloader_hash();
        assert_eq!(
            newest(&change(Some(&hash)), Some(&state)),
            Newest::Write(change(Some(&hash)))
        );
        assert_eq!(newest(&change(Some(&hash)), None), Newest::NotIndexed);
        assert_eq!(newest(&change(None), None), Newest::Write(change(None)));
        assert_eq!(
            newest(&change(None), Some(&state)),
            Newest::Write(change(Some(&hash))),
            "deleted, then created again: the new content"
        );
    }

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
