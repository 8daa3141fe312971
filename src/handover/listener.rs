//! What the coordinator's observations mean for this replica: an installed assignment becomes
//! an [`OwnershipChange`] (namespaces to index and to forget, and the versions to catch up
//! from, held from this moment), and the acted versions the membership Lease publishes are this
//! replica's [`ActedTracker`]'s.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::mpsc;
use tracing::info;

use crate::shard::Assignment;
use crate::shard::coordinator::{Installed, OwnershipListener};

use super::acted::{ActedTracker, ActedVersions};
use super::protocol::{CatchUp, OwnershipChange, catch_up_since};

/// This replica's side of the hand-over, installed in the coordinator.
pub struct Handover {
    /// How far this replica has acted (the engine and the config watches feed it, the
    /// renewals publish it).
    acted: ActedTracker,
    /// What this replica's Lease said before this process started (and, on the first
    /// assignment, what the other members had acted up to), held until the start-up has caught
    /// up from it (taken by [`Handover::take_inherited`]).
    inherited: Mutex<Option<CatchUp>>,
    changes: mpsc::UnboundedSender<OwnershipChange>,
}

impl Handover {
    /// The hand-over, and the ownership changes it sends to the backfill (`follow.rs`).
    pub fn new() -> (Arc<Self>, mpsc::UnboundedReceiver<OwnershipChange>) {
        let (changes, receiver) = mpsc::unbounded_channel();
        let handover = Arc::new(Self {
            acted: ActedTracker::default(),
            inherited: Mutex::default(),
            changes,
        });
        (handover, receiver)
    }

    pub fn acted(&self) -> &ActedTracker {
        &self.acted
    }

    /// What this replica had acted up to before a restart, with guards that keep the published
    /// version there until the start-up's catch-up has queued what it found (once).
    pub fn take_inherited(&self) -> Option<CatchUp> {
        self.inherited.lock().expect("inherited lock").take()
    }

    /// The versions the gained namespaces must be caught up from (the lowest any other member
    /// of the assignments known had acted up to), held from now on (before the backfill gets to
    /// them).
    fn catch_up_for(&self, step: &Installed<'_>) -> Option<CatchUp> {
        let before: Vec<&Assignment> = [&step.before.current, &step.before.previous]
            .into_iter()
            .flatten()
            .map(|a| a.as_ref())
            .collect();
        let acted: HashMap<String, ActedVersions> = step
            .members_acted
            .iter()
            .map(|(member, raw)| (member.clone(), ActedVersions::parse(raw)))
            .collect();
        if before.is_empty() {
            // The first assignment: every namespace was another member's (or this replica's
            // before a restart, which `restarted_from` read).
            let since = catch_up_since(&[step.next], step.me, &acted)?;
            info!(since = %since.to_annotation(), "catching up from what the other members had acted on");
            let gained = CatchUp::holding(&self.acted, since);
            let mut inherited = self.inherited.lock().expect("inherited lock");
            match inherited.as_mut() {
                Some(own) => {
                    own.since.min_with(&gained.since);
                    own.held.extend(gained.held);
                }
                None => *inherited = Some(gained),
            }
            return None;
        }
        let since = catch_up_since(&before, step.me, &acted)?;
        Some(CatchUp::holding(&self.acted, since))
    }
}

impl OwnershipListener for Handover {
    fn acted(&self) -> String {
        self.acted.acted().to_annotation()
    }

    fn changes_pending(&self) -> bool {
        self.acted.pending()
    }

    fn restarted_from(&self, acted: &str) {
        let since = ActedVersions::parse(acted);
        if since.is_empty() {
            return;
        }
        info!(since = %since.to_annotation(), "catching up from what this replica had acted on before it restarted");
        *self.inherited.lock().expect("inherited lock") =
            Some(CatchUp::holding(&self.acted, since));
    }

    fn installed(&self, step: Installed<'_>) {
        let mut change =
            OwnershipChange::between(step.next.generation, step.owned_before, step.owned_after);
        if !change.entered.is_empty() {
            change.catch_up = self.catch_up_for(&step);
        }
        let _ = self.changes.send(change);
    }

    fn released(&self, generation: u64, left: Vec<String>) {
        let _ = self.changes.send(OwnershipChange {
            generation,
            entered: vec![],
            left,
            catch_up: None,
        });
    }
}
