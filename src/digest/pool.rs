//! A fixed pool of OS threads that hash payloads, so that a burst of 1 MiB Secrets never stalls
//! the async runtime that serves watches and patches.
//!
//! What waits for a worker is bounded in bytes, not in jobs: a start-up hands over tens of
//! thousands of configs of a KiB or two, and with a few jobs queued at a time each one cost a
//! wake-up of the worker and one of the runtime (a futex and an eventfd write: a third of the
//! CPU to ready at the medium scale went to context switches). With the budget the queue stays
//! full while a list streams in, the worker hashes job after job without parking, and a burst
//! of 1 MiB Secrets still holds at most [`QUEUED_BYTES`] of payloads.

use std::sync::Arc;
use std::thread;

use crossbeam_channel::{Receiver, Sender, unbounded};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, oneshot};

use crate::reloader_format::hash::{ConfigPayload, Digest, digest_payload};
use crate::reloader_format::precise::KeyDigests;
use crate::reloader_format::precise::key_digests;

/// The pool is gone (the process is shutting down).
#[derive(Debug, thiserror::Error)]
#[error("the digest worker pool has shut down")]
pub struct DigestPoolClosed;

/// Payload bytes queued for (or being hashed by) the workers at most; a larger payload waits
/// until it is alone.
pub const QUEUED_BYTES: usize = 4 << 20;

/// The budget is counted in units of this many bytes (a semaphore's permits are `u32`).
const UNIT: usize = 1 << 10;

struct Job {
    payload: ConfigPayload,
    /// Per-key digests too (key-precise mode).
    keyed: bool,
    reply: oneshot::Sender<(Digest, KeyDigests)>,
    /// Its share of [`QUEUED_BYTES`], given back once it is hashed and dropped.
    _budget: Reservation,
}

/// A payload's share of the pool's byte budget ([`DigestPool::reserve`]), held until the
/// payload is hashed and dropped.
pub struct Reservation {
    _permit: OwnedSemaphorePermit,
}

fn run(job: Job) {
    let keys = match job.keyed {
        true => key_digests(&job.payload),
        false => KeyDigests::default(),
    };
    let digest = digest_payload(job.payload);
    // The receiver may have given up (watch restarted): nothing to do then.
    let _ = job.reply.send((digest, keys));
}

/// Cloneable handle to the worker pool. Dropping the last handle stops the workers.
#[derive(Clone)]
pub struct DigestPool {
    jobs: Sender<Job>,
    budget: Arc<Semaphore>,
    workers: usize,
}

impl DigestPool {
    /// `workers` threads, fed by a queue bounded by [`QUEUED_BYTES`] of payloads.
    pub fn new(workers: usize) -> Self {
        let workers = workers.max(1);
        let (jobs, rx) = unbounded::<Job>();
        for i in 0..workers {
            let rx: Receiver<Job> = rx.clone();
            thread::Builder::new()
                .name(format!("digest-{i}"))
                .spawn(move || {
                    for job in rx {
                        run(job);
                    }
                })
                .expect("spawning a digest worker thread");
        }
        let budget = Arc::new(Semaphore::new(QUEUED_BYTES / UNIT));
        Self {
            jobs,
            budget,
            workers,
        }
    }

    /// The number of worker threads (callers size their in-flight batches from it).
    pub fn workers(&self) -> usize {
        self.workers
    }

    /// Pool sized to the machine, leaving the async runtime room.
    pub fn for_available_parallelism() -> Self {
        let n = thread::available_parallelism().map_or(1, |n| n.get());
        Self::new(n.div_ceil(2))
    }

    /// Hashes `payload` on a worker thread; the payload is dropped there.
    pub async fn digest(&self, payload: ConfigPayload) -> Result<Digest, DigestPoolClosed> {
        Ok(self.digest_keyed(payload, false).await?.0)
    }

    /// Hashes `payload`, and with `keyed` each of its keys too, on a worker thread.
    pub async fn digest_keyed(
        &self,
        payload: ConfigPayload,
        keyed: bool,
    ) -> Result<(Digest, KeyDigests), DigestPoolClosed> {
        let reserved = self.reserve(payload.bytes()).await?;
        self.digest_reserved(payload, keyed, reserved).await
    }

    /// Waits until `bytes` of payload fit in the budget. A watch reserves before it decodes
    /// further: the objects it holds decoded while they wait for the pool count too.
    pub async fn reserve(&self, bytes: usize) -> Result<Reservation, DigestPoolClosed> {
        let units = bytes.div_ceil(UNIT).clamp(1, QUEUED_BYTES / UNIT) as u32;
        let permit = self.budget.clone().acquire_many_owned(units).await;
        let permit = permit.map_err(|_| DigestPoolClosed)?;
        Ok(Reservation { _permit: permit })
    }

    /// [`Self::digest_keyed`] for a payload whose bytes are `reserved` already.
    pub async fn digest_reserved(
        &self,
        payload: ConfigPayload,
        keyed: bool,
        reserved: Reservation,
    ) -> Result<(Digest, KeyDigests), DigestPoolClosed> {
        let (reply, done) = oneshot::channel();
        let job = Job {
            payload,
            keyed,
            reply,
            _budget: reserved,
        };
        self.jobs.send(job).map_err(|_| DigestPoolClosed)?;
        done.await.map_err(|_| DigestPoolClosed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[tokio::test]
    async fn hashes_on_the_pool_like_inline() {
        let pool = DigestPool::new(2);
        let mut handles = Vec::new();
        for i in 0..50 {
            let pool = pool.clone();
            handles.push(tokio::spawn(async move {
                let mut data = BTreeMap::new();
                data.insert("k".to_string(), format!("v{i}"));
                let payload = ConfigPayload::ConfigMap {
                    data: data.clone(),
                    binary_data: BTreeMap::new(),
                };
                let from_pool = pool.digest(payload).await.unwrap();
                let inline = digest_payload(ConfigPayload::ConfigMap {
                    data,
                    binary_data: BTreeMap::new(),
                });
                assert_eq!(from_pool, inline);
            }));
        }
        for h in handles {
            h.await.unwrap();
        }
    }

    /// A Secret of `bytes` bytes, its one key's name included.
    fn payload_of(bytes: usize) -> ConfigPayload {
        let payload = ConfigPayload::Secret {
            data: BTreeMap::from([("k".to_string(), vec![7u8; bytes - 1])]),
        };
        assert_eq!(payload.bytes(), bytes);
        payload
    }

    #[tokio::test]
    async fn payloads_wait_while_the_queued_bytes_fill_the_budget() {
        let pool = DigestPool::new(1);
        let _held = pool.reserve(QUEUED_BYTES - 2 * UNIT).await.unwrap();
        let small = pool.reserve(UNIT).await.unwrap();
        // Two KiB do not fit beside the first KiB; they do once it is given back.
        let mut larger = std::pin::pin!(pool.digest(payload_of(2 * UNIT)));
        assert!(futures::poll!(larger.as_mut()).is_pending());
        drop(small);
        let digest = larger.await.unwrap();
        assert_eq!(digest, digest_payload(payload_of(2 * UNIT)));
    }

    #[tokio::test]
    async fn a_payload_larger_than_the_budget_is_hashed_alone() {
        let pool = DigestPool::new(1);
        let huge = payload_of(QUEUED_BYTES + 1);
        let digest = pool.digest(huge).await.unwrap();
        assert_eq!(digest, digest_payload(payload_of(QUEUED_BYTES + 1)));
        // Its reservation was given back: the whole budget is free again.
        let whole = pool.reserve(QUEUED_BYTES).await.unwrap();
        drop(whole);
    }
}
