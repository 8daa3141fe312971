//! Following the assignment: each ownership change the coordinator's listener sends
//! (`listener.rs`) is indexed (`backfill.rs`, then `catch_up.rs` for what departed owners never
//! acted on) and forgotten where it left, and only then reported synced, which is what lets the
//! previous owners release (`steps.rs`).

use std::sync::Arc;

use tokio::sync::mpsc;
use tracing::info;

use crate::shard::coordinator::Coordinator;

use super::acted::ActedVersions;
use super::backfill::Indexing;
use super::gains::{GainSink, Watches};
use super::listener::Handover;
use super::protocol::OwnershipChange;

/// What the watches need from the replica set: the coordinator (the first assignment, synced
/// generations), the hand-over (what this replica inherited) and the ownership changes.
pub struct ShardLink {
    pub coordinator: Arc<Coordinator>,
    pub handover: Arc<Handover>,
    pub changes: mpsc::UnboundedReceiver<OwnershipChange>,
}

/// Indexes namespaces this replica gains and forgets those it loses, then reports each
/// generation synced (the previous owners let go only after that). Returns when the
/// coordinator stops sending.
pub async fn follow_assignment<W: Watches>(
    watches: Arc<W>,
    mut link: ShardLink,
    start_generation: u64,
) {
    let ownership = watches.ownership();
    while let Some(change) = link.changes.recv().await {
        // Gains up to the start generation were covered by the first lists.
        if change.generation > start_generation {
            let entered: Vec<String> = change
                .entered
                .iter()
                .filter(|ns| ownership.owns(ns))
                .cloned()
                .collect();
            Indexing::new(&*watches)
                .namespaces_entered(&entered, change.catch_up.as_ref())
                .await;
        }
        for ns in &change.left {
            if !ownership.owns(ns) {
                info!(namespace = %ns, "namespace moved to another replica, forgetting it");
                watches.sink().namespace_moved_away(ns);
            }
        }
        link.coordinator.synced(change.generation);
    }
}

/// At start-up, once the first lists are in: acts on what changed in the owned namespaces
/// after `since` (what this replica, or the members it took over from, had acted up to).
pub async fn catch_up_at_start<W: Watches>(watches: &W, since: &ActedVersions) {
    let indexing = Indexing::new(watches);
    let owned = |ns: &str| watches.ownership().owns(ns);
    indexing
        .catch_up(&indexing.start_targets(), &owned, since)
        .await;
}
