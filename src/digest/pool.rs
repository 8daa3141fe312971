//! A fixed pool of OS threads that hash payloads, so that a burst of 1 MiB Secrets never stalls
//! the async runtime that serves watches and patches.

use std::thread;

use crossbeam_channel::{Receiver, Sender, bounded};
use tokio::sync::oneshot;

use crate::reloader_format::hash::{ConfigPayload, Digest, digest_payload};
use crate::reloader_format::precise::KeyDigests;
use crate::reloader_format::precise::key_digests;

/// The pool is gone (the process is shutting down).
#[derive(Debug, thiserror::Error)]
#[error("the digest worker pool has shut down")]
pub struct DigestPoolClosed;

struct Job {
    payload: ConfigPayload,
    /// Per-key digests too (key-precise mode).
    keyed: bool,
    reply: oneshot::Sender<(Digest, KeyDigests)>,
}

fn run(job: Job) {
    let keys = match job.keyed {
        true => key_digests(&job.payload),
        false => KeyDigests::default(),
    };
    // The receiver may have given up (watch restarted): nothing to do then.
    let _ = job.reply.send((digest_payload(job.payload), keys));
}

/// Cloneable handle to the worker pool. Dropping the last handle stops the workers.
#[derive(Clone)]
pub struct DigestPool {
    jobs: Sender<Job>,
    workers: usize,
}

impl DigestPool {
    /// `workers` threads; the queue holds a few jobs per worker so producers feel backpressure
    /// instead of piling up payloads (each can be 1 MiB) in memory.
    pub fn new(workers: usize) -> Self {
        let workers = workers.max(1);
        let (jobs, rx) = bounded::<Job>(workers * 4);
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
        Self { jobs, workers }
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
        let (reply, done) = oneshot::channel();
        let jobs = self.jobs.clone();
        // A full queue blocks the sender: do that on the blocking pool, not on a runtime worker.
        let job = Job {
            payload,
            keyed,
            reply,
        };
        match jobs.try_send(job) {
            Ok(()) => {}
            Err(crossbeam_channel::TrySendError::Full(job)) => {
                tokio::task::spawn_blocking(move || jobs.send(job))
                    .await
                    .map_err(|_| DigestPoolClosed)?
                    .map_err(|_| DigestPoolClosed)?;
            }
            Err(crossbeam_channel::TrySendError::Disconnected(_)) => return Err(DigestPoolClosed),
        }
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
}
