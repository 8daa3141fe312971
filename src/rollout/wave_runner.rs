//! Runs the changes rolled in waves: one task per change, which queues a wave through the one
//! write path (the fair, rate-limited queue: a wave never takes another tenant's turn), reads
//! its workloads until they are healthy on the new template, then queues the next; a failure
//! or a wave's deadline halts the change and holds the rest until it is released (the config's
//! `kube-reloader.io/resume` annotation changes) or the config changes again.

use std::sync::Arc;
use std::time::Duration;

use dashmap::DashMap;
use kube::api::{Api, DynamicObject};
use tokio::sync::{Notify, mpsc};
use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::halts::HaltStore;
use super::{Priority, QueuedChange};
use crate::config::AnnotationKeys;
use crate::index::{WorkloadObject, workload_entry_from_object};
use crate::model::{ConfigKey, WorkloadKey};
use crate::resources::api_resource;

use crate::waves::{
    Candidate, Halt, HaltRecord, Health, Sequence, Step, WavePolicy, assess, plan_waves,
};

/// Reads of a wave's workloads in flight at once.
const READS_IN_FLIGHT: usize = 8;

/// One workload of a change rolled in waves, with its queued change ready to go.
pub struct WaveItem {
    pub candidate: Candidate,
    pub change: QueuedChange,
    pub priority: Priority,
}

/// Queues one workload's change on the write path.
pub type WaveSink = Arc<dyn Fn(WorkloadKey, QueuedChange, Priority) + Send + Sync>;

/// Reads a workload as the API server has it now (`None`: it is gone).
pub trait WorkloadReader: Send + Sync + 'static {
    fn read(
        &self,
        key: &WorkloadKey,
    ) -> impl std::future::Future<Output = Result<Option<serde_json::Value>, kube::Error>> + Send;
}

/// [`WorkloadReader`] against the API server.
#[derive(Clone)]
pub struct KubeReader(pub kube::Client);

impl WorkloadReader for KubeReader {
    async fn read(&self, key: &WorkloadKey) -> Result<Option<serde_json::Value>, kube::Error> {
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.0.clone(), &key.namespace, &api_resource(key.kind));
        let obj = api.get_opt(&key.name).await?;
        Ok(obj.map(|o| serde_json::to_value(o).unwrap_or_default()))
    }
}

/// What the runner tells the controller (Events, alerts, metrics).
#[derive(Debug, Clone)]
pub enum WaveNotice {
    Halted(Halt),
    Released {
        config: ConfigKey,
        held: Vec<WorkloadKey>,
    },
    Completed {
        config: ConfigKey,
        waves: usize,
        took: Duration,
    },
}

/// Where a change rolled in waves stands (`/debug/explain`, `explain`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WaveStatus {
    Rolling { wave: usize, waves: usize },
    Halted { halt: Halt, at: jiff::Timestamp },
}

struct Active {
    id: u64,
    /// The Reloader hash of the config's value this sequence rolls.
    hash: String,
    status: WaveStatus,
    release: Arc<Notify>,
    task: tokio::task::AbortHandle,
}

pub struct WaveRunner<R = KubeReader> {
    reader: Arc<R>,
    keys: Arc<AnnotationKeys>,
    active: Arc<DashMap<ConfigKey, Active, ahash::RandomState>>,
    notices: mpsc::UnboundedSender<WaveNotice>,
    /// How often a rolling wave's workloads are read.
    poll: Duration,
    next_id: std::sync::atomic::AtomicU64,
    /// Keeps halts in the cluster (`None`: no namespace for them; they end with the process).
    halts: Option<HaltStore>,
}

/// The value a sequence rolls: what its halt record says it held.
#[derive(Debug, Clone)]
pub struct Rolled {
    /// The Reloader hash of the config's whole content.
    pub hash: String,
    /// The config's `kube-reloader.io/resume` when the sequence started.
    pub resume: Option<String>,
}

impl<R: WorkloadReader> WaveRunner<R> {
    pub fn new(
        reader: R,
        keys: AnnotationKeys,
        poll: Duration,
    ) -> (Self, mpsc::UnboundedReceiver<WaveNotice>) {
        let (notices, received) = mpsc::unbounded_channel();
        let runner = Self {
            reader: Arc::new(reader),
            keys: Arc::new(keys),
            active: Default::default(),
            notices,
            poll,
            next_id: Default::default(),
            halts: None,
        };
        (runner, received)
    }

    /// Keeps halts in the cluster through `store`.
    pub fn with_halts(mut self, store: HaltStore) -> Self {
        self.halts = Some(store);
        self
    }

    pub fn halts(&self) -> Option<&HaltStore> {
        self.halts.as_ref()
    }

    /// Starts rolling `items` in waves (a sequence of the same config still running or halted
    /// is superseded: the new change's waves cover its workloads with the newer value).
    pub fn start(
        &self,
        config: ConfigKey,
        rolled: Rolled,
        policy: WavePolicy,
        items: Vec<WaveItem>,
        sink: WaveSink,
    ) {
        self.supersede(&config);
        let candidates = items.iter().map(|i| i.candidate.clone()).collect();
        let waves = plan_waves(candidates, &policy);
        let id = self
            .next_id
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let release = Arc::new(Notify::new());
        let sequence = Sequence::start(config.clone(), waves, policy.deadline, Instant::now());
        let (wave, waves) = sequence.progress();
        info!(config = %config, workloads = items.len(), waves, %policy, "rolling the change in waves");
        let hashes = items
            .iter()
            .map(|i| (i.candidate.key.clone(), i.change.change.hash.clone()))
            .collect();
        let run = self.run(id, sequence, items, sink, &rolled, &release, hashes);
        let task = tokio::spawn(run.run()).abort_handle();
        let status = WaveStatus::Rolling { wave, waves };
        let hash = rolled.hash;
        self.active.insert(
            config,
            Active {
                id,
                hash,
                status,
                release,
                task,
            },
        );
    }

    /// Holds again what a halt kept in the cluster held (after a restart, or in a namespace
    /// gained from another replica): `items` are the workloads of the config not on its value.
    pub fn restore(
        &self,
        record: &HaltRecord,
        config: ConfigKey,
        items: Vec<WaveItem>,
        sink: WaveSink,
    ) {
        // Replaced, not superseded: the record stays.
        if let Some((_, stale)) = self.active.remove(&config) {
            stale.task.abort();
        }
        let id = self
            .next_id
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let halt = Halt {
            config: config.clone(),
            wave: record.wave,
            waves: record.waves,
            reason: record.reason.clone(),
            held: items.iter().map(|i| i.candidate.key.clone()).collect(),
        };
        info!(config = %config, held = halt.held.len(), "holding again what a kept halt held: {halt}");
        let at = record.at.parse().unwrap_or_else(|_| jiff::Timestamp::now());
        let release = Arc::new(Notify::new());
        let rolled = Rolled {
            hash: record.hash.clone(),
            resume: record.resume.clone(),
        };
        let sequence = Sequence::start(config.clone(), Vec::new(), Duration::ZERO, Instant::now());
        let run = self.run(
            id,
            sequence,
            items,
            sink,
            &rolled,
            &release,
            Default::default(),
        );
        let task = tokio::spawn(run.hold_until_released(halt.clone())).abort_handle();
        let status = WaveStatus::Halted { halt, at };
        self.active.insert(
            config,
            Active {
                id,
                hash: rolled.hash,
                status,
                release,
                task,
            },
        );
    }

    #[allow(clippy::too_many_arguments)]
    fn run(
        &self,
        id: u64,
        sequence: Sequence,
        items: Vec<WaveItem>,
        sink: WaveSink,
        rolled: &Rolled,
        release: &Arc<Notify>,
        hashes: std::collections::HashMap<WorkloadKey, Option<String>>,
    ) -> Run<R> {
        Run {
            id,
            sequence,
            items,
            sink,
            reader: self.reader.clone(),
            keys: self.keys.clone(),
            active: self.active.clone(),
            notices: self.notices.clone(),
            release: release.clone(),
            poll: self.poll,
            started: Instant::now(),
            hashes,
            rolled: rolled.clone(),
            halts: self.halts.clone(),
        }
    }

    /// `namespace` moved to another replica: its sequences stop here, their halts stay kept
    /// for the new owner, and their unwritten changes let go of the acted version (the new
    /// owner's catch-up starts below them and rolls what is left in waves of its own).
    pub fn abandon_namespace(&self, namespace: &str) {
        self.active.retain(|config, active| {
            let keep = &*config.namespace != namespace;
            if !keep {
                active.task.abort();
                info!(config = %config, "the namespace moved to another replica: its waves stop here");
            }
            keep
        });
    }

    /// A kept halt that no longer holds (the config changed, was released or deleted while
    /// nobody held it) is forgotten.
    pub fn forget(&self, config: &ConfigKey) {
        if let Some(halts) = &self.halts {
            halts.remove(config);
        }
    }

    /// `config` is halted on the value whose Reloader hash is `hash`.
    pub fn holds(&self, config: &ConfigKey, hash: &str) -> bool {
        self.active
            .get(config)
            .is_some_and(|a| a.hash == hash && matches!(a.status, WaveStatus::Halted { .. }))
    }

    /// A new change of `config` replaces whatever sequence it has (its held workloads are
    /// rolled by the new change instead). True when there was one.
    pub fn supersede(&self, config: &ConfigKey) -> bool {
        match self.active.remove(config) {
            Some((_, active)) => {
                active.task.abort();
                if matches!(active.status, WaveStatus::Halted { .. }) {
                    self.forget(config);
                }
                info!(config = %config, "a newer change supersedes the change rolling in waves");
                true
            }
            None => false,
        }
    }

    /// Releases a halt of `config` (its resume annotation changed): the held workloads are
    /// queued once. False when nothing of it is halted.
    pub fn release(&self, config: &ConfigKey) -> bool {
        match self.active.get(config) {
            Some(a) if matches!(a.status, WaveStatus::Halted { .. }) => {
                a.release.notify_one();
                true
            }
            _ => false,
        }
    }

    pub fn status(&self, config: &ConfigKey) -> Option<WaveStatus> {
        self.active.get(config).map(|a| a.status.clone())
    }
}

/// The task of one sequence.
struct Run<R> {
    id: u64,
    sequence: Sequence,
    items: Vec<WaveItem>,
    sink: WaveSink,
    reader: Arc<R>,
    keys: Arc<AnnotationKeys>,
    active: Arc<DashMap<ConfigKey, Active, ahash::RandomState>>,
    notices: mpsc::UnboundedSender<WaveNotice>,
    release: Arc<Notify>,
    poll: Duration,
    started: Instant,
    /// What each workload's change writes, kept after its item went to the queue.
    hashes: std::collections::HashMap<WorkloadKey, Option<String>>,
    rolled: Rolled,
    halts: Option<HaltStore>,
}

impl<R: WorkloadReader> Run<R> {
    async fn run(mut self) {
        let first = self.sequence.current_wave().to_vec();
        self.queue(&first);
        loop {
            tokio::time::sleep(self.poll).await;
            let health = self.read_wave().await;
            match self.sequence.observe(&health, Instant::now()) {
                Step::Wait => {}
                Step::Next(keys) => {
                    let (wave, waves) = self.sequence.progress();
                    info!(config = %self.sequence.config, wave, waves, workloads = keys.len(),
                        "wave healthy: rolling the next");
                    self.set_status(WaveStatus::Rolling { wave, waves });
                    self.queue(&keys);
                }
                Step::Done => {
                    let waves = self.sequence.progress().1 - 1;
                    let took = self.started.elapsed();
                    info!(config = %self.sequence.config, waves, ?took, "every wave healthy");
                    let _ = self.notices.send(WaveNotice::Completed {
                        config: self.sequence.config.clone(),
                        waves,
                        took,
                    });
                    break;
                }
                Step::Halt(halt) => {
                    self.halted(halt).await;
                    break;
                }
            }
        }
        self.active
            .remove_if(&self.sequence.config, |_, a| a.id == self.id);
    }

    /// Holds the rest until released; then queues each held workload once.
    async fn halted(&mut self, halt: Halt) {
        warn!(config = %halt.config, wave = halt.wave, waves = halt.waves, reason = %halt.reason,
            held = halt.held.len(), "reload halted: {halt}");
        let at = jiff::Timestamp::now();
        self.set_status(WaveStatus::Halted {
            halt: halt.clone(),
            at,
        });
        if let Some(halts) = &self.halts {
            let (hash, resume) = (self.rolled.hash.clone(), self.rolled.resume.clone());
            halts.save(HaltRecord::new(&halt, hash, resume, at));
            // Kept, the halt is found again by whoever owns the namespace next: its held
            // changes need not pin the published acted version for as long as it lasts.
            for item in &mut self.items {
                item.change.acted = None;
            }
        }
        let _ = self.notices.send(WaveNotice::Halted(halt.clone()));
        self.wait_for_release(halt).await;
    }

    /// The task of a restored halt.
    async fn hold_until_released(mut self, halt: Halt) {
        let config = halt.config.clone();
        self.wait_for_release(halt).await;
        self.active.remove_if(&config, |_, a| a.id == self.id);
    }

    async fn wait_for_release(&mut self, halt: Halt) {
        self.release.notified().await;
        info!(config = %halt.config, held = halt.held.len(), "halt released: rolling the held workloads");
        self.queue(&halt.held);
        if let Some(halts) = &self.halts {
            halts.remove(&halt.config);
        }
        let _ = self.notices.send(WaveNotice::Released {
            config: halt.config,
            held: halt.held,
        });
    }

    fn set_status(&self, status: WaveStatus) {
        if let Some(mut a) = self.active.get_mut(&self.sequence.config)
            && a.id == self.id
        {
            a.status = status;
        }
    }

    /// Hands the changes of `keys` to the write path (each once: taken out of `items`).
    fn queue(&mut self, keys: &[WorkloadKey]) {
        let (now, later): (Vec<WaveItem>, Vec<WaveItem>) = std::mem::take(&mut self.items)
            .into_iter()
            .partition(|i| keys.contains(&i.candidate.key));
        self.items = later;
        for item in now {
            (self.sink)(item.candidate.key, item.change, item.priority);
        }
    }

    /// The health of the current wave's workloads; one not yet carrying the change's value is
    /// not healthy yet (its write may still wait its turn in the queue).
    /// A few reads at once: a late wave holds hundreds of workloads.
    async fn read_wave(&self) -> Vec<(WorkloadKey, Health)> {
        use futures::StreamExt;
        let reads = self.sequence.current_wave().to_vec().into_iter();
        let read: Vec<Option<(WorkloadKey, Health)>> =
            futures::stream::iter(reads.map(|key| self.read_one(key)))
                .buffer_unordered(READS_IN_FLIGHT)
                .collect()
                .await;
        read.into_iter().flatten().collect()
    }

    /// `None`: the read failed (not healthy yet).
    async fn read_one(&self, key: WorkloadKey) -> Option<(WorkloadKey, Health)> {
        let key = &key;
        let state = match self.reader.read(key).await {
            Ok(Some(obj)) => self.health_of(key, &obj),
            // Gone: nothing to wait for.
            Ok(None) => Health::Healthy,
            Err(e) => {
                debug!(workload = %key, error = %e, "reading a wave's workload failed");
                return None;
            }
        };
        debug!(config = %self.sequence.config, workload = %key, ?state, "wave workload");
        Some((key.clone(), state))
    }

    fn health_of(&self, key: &WorkloadKey, obj: &serde_json::Value) -> Health {
        if !self.carries_value(key, obj) {
            return Health::Progressing("its write has not landed yet".into());
        }
        assess(key.kind, obj)
    }

    /// The workload's template records the hash this change writes.
    fn carries_value(&self, key: &WorkloadKey, obj: &serde_json::Value) -> bool {
        let config = &self.sequence.config;
        let Some(hash) = self.hash_for(key) else {
            return true;
        };
        let Ok(wire) = serde_json::from_value::<WorkloadObject>(obj.clone()) else {
            return false;
        };
        workload_entry_from_object(key.kind, &wire, &self.keys)
            .ok()
            .and_then(|entry| {
                entry
                    .uses_config(config.kind, &config.name)
                    .and_then(|u| u.recorded.clone())
            })
            .is_some_and(|recorded| *recorded == *hash)
    }

    /// The hash the change of `key` writes (`None`: a deletion, nothing to look for).
    fn hash_for(&self, key: &WorkloadKey) -> Option<&str> {
        self.hashes.get(key).and_then(|h| h.as_deref())
    }
}
