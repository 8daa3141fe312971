//! The loop that takes the hand-over's steps: each decided by [`next_step`] from a view snapshot
//! and the membership Leases, and taken through the coordinator, which owns both.

use std::sync::Arc;

use tracing::{debug, info};

use crate::shard::coordinator::{Coordinator, ShardError};

use super::protocol::{HandoverStep, next_step};

/// Runs the coordinator and the hand-over's steps beside it until either stops (the caller
/// exits the process).
pub async fn coordinate(coordinator: Arc<Coordinator>) -> Result<(), ShardError> {
    tokio::select! {
        result = coordinator.clone().run() => result,
        () = take_steps(coordinator) => Err(ShardError::Ended("hand-over loop")),
    }
}

/// Completes hand-overs: releases the previous assignment once every member synced the
/// current one, and completes once every live previous owner released it.
async fn take_steps(coordinator: Arc<Coordinator>) {
    let pause = coordinator.retry_period() / 2;
    loop {
        tokio::time::sleep(pause).await;
        let view = coordinator.view();
        if view.previous.is_none() {
            continue;
        }
        let members = match coordinator.members().await {
            Ok(m) => m,
            Err(e) => {
                debug!(error = %e, "listing members for the handover failed");
                continue;
            }
        };
        match next_step(&view, &members) {
            HandoverStep::Wait => {}
            HandoverStep::Release(generation) => coordinator.release_previous(generation).await,
            HandoverStep::Complete(generation) => {
                // A newer assignment installed while the Leases were read keeps its own
                // handover: completing the older one would put the older assignment back.
                if coordinator.complete_handover(generation) {
                    info!(generation, "handover complete");
                }
            }
        }
    }
}
