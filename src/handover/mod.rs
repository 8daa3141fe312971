//! The hand-over, end to end: how a replica gains and loses namespaces. Namespaces move between
//! replicas with an overlap and never a gap: the old owner keeps acting until the new owner has
//! indexed what it gained.
//! During the overlap both may write; that is safe because a write is idempotent (the template
//! already holding the hash is left alone), guarded by a resourceVersion test, and, while the
//! view is settling, preceded by a check that the writer's view of the config is as new as the
//! API server's (`config_view.rs`).
//!
//! ```text
//!            leader publishes generation G (ConfigMap kube-reloader-shard-assignment)
//!                                   |
//!                                   v
//!   +------------------+  install   +-----------------------------------------------+
//!   | Settled          | ---------> | Overlap: current = G, previous = last settled  |
//!   | current = G-1    |            | both act; new owners index what they gained    |
//!   | previous = none  |            +-----------------------------------------------+
//!   +------------------+                 |  every member of G reports synced >= G
//!            ^                           |  (after its backfill LISTs all succeeded)
//!            |                           v
//!            |             +-----------------------------------------------+
//!            |             | Released: stop acting on what only `previous`  |
//!            |             | gave; in-flight writes there finish; report    |
//!            |             | released >= G                                  |
//!            |             +-----------------------------------------------+
//!            |                           |  every live previous owner reports released >= G
//!            |        complete           v  (a dead one is fenced: it cannot write)
//!            +------------------------ previous = none; writes in the namespaces that
//!                                      moved check their view for SETTLE_WINDOW more
//!                                      (`shard::Moves`, config_view.rs)
//! ```
//! A newer generation installed at any step starts a new overlap from the last settled
//! assignment; each transition re-checks the generation under the view's lock, so a decision
//! taken from a stale snapshot never reverts a newer assignment.
//!
//! Ownership itself (the ring, the Leases, the assignment and the view of it) is `shard`'s;
//! everything a replica does because ownership moved is here. Its files, in the order a gained
//! namespace meets them:
//! - `listener.rs`: an installed assignment becomes an [`protocol::OwnershipChange`] (namespaces
//!   to index and to forget, versions to catch up from, held from the install on); the acted
//!   versions the membership Lease publishes;
//! - `follow.rs`: follows the changes, reports each generation synced once indexed;
//! - `backfill.rs`: lists what was gained as a start-up would; `deferral.rs`: config changes met
//!   there meanwhile wait for its list; `listed_through.rs`: until every list has passed their
//!   namespace;
//! - `catch_up.rs`: what a departed owner never acted on; `acted.rs`: how far each replica acted;
//! - `protocol.rs` (pure) and `steps.rs`: release the previous assignment, complete;
//! - `config_view.rs`: the write-time check in namespaces that moved lately.
//!
//! It sits between the write path and the engine. The coordinator, the writer and the queue
//! reach it through seams they define (`shard::coordinator::OwnershipListener`,
//! `rollout::ViewCheck`, `rollout::Hold`); the backfill and the catch-up reach the watches and
//! the engine through seams it defines (`gains.rs`).

pub mod acted;
pub mod backfill;
pub mod catch_up;
pub mod config_view;
pub mod deferral;
pub mod follow;
pub mod gains;
pub mod listed_through;
pub mod listener;
pub mod protocol;
pub mod steps;
