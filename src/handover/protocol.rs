//! The hand-over's decisions, free of I/O: what an installed assignment means here (namespaces
//! entered and left, and the versions to catch up from), and which step comes next. The loop
//! that applies them is `steps.rs`; the protocol end to end is in this module's parent.

use std::collections::{BTreeSet, HashMap};

use crate::shard::lease::Member;
use crate::shard::{Assignment, ShardView};

use super::acted::{ActedGuard, ActedTracker, ActedVersions};

/// Namespaces this replica must start or stop indexing, for an assignment generation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OwnershipChange {
    pub generation: u64,
    pub entered: Vec<String>,
    pub left: Vec<String>,
    /// Members dropped from the assignment (crashed, paused, or leaving) had acted up to these
    /// versions: what changed in the entered namespaces since was perhaps never acted on.
    pub catch_up: Option<CatchUp>,
}

impl OwnershipChange {
    /// What changed between the namespaces owned `before` and `after` installing `generation`.
    pub fn between(generation: u64, before: &BTreeSet<String>, after: &BTreeSet<String>) -> Self {
        Self {
            generation,
            entered: after.difference(before).cloned().collect(),
            left: before.difference(after).cloned().collect(),
            catch_up: None,
        }
    }
}

/// Config versions to catch up from, with guards that keep this replica's own acted version at
/// or below them until the catch-up has queued what it found (a second crash meanwhile must not
/// lose the first one's gap).
#[derive(Debug, Clone)]
pub struct CatchUp {
    pub since: ActedVersions,
    pub held: Vec<ActedGuard>,
}

impl CatchUp {
    /// A catch-up from `since`, holding `acted` at or below it until the catch-up is dropped.
    pub fn holding(acted: &ActedTracker, since: ActedVersions) -> Self {
        let held = acted.hold_at(&since);
        Self { since, held }
    }
}

impl PartialEq for CatchUp {
    fn eq(&self, other: &Self) -> bool {
        self.since == other.since
    }
}

impl Eq for CatchUp {}

/// The versions up to which every other member of `before` had acted (the lowest per config
/// kind), from `acted` (the last value seen in each member's Lease): what `me`, gaining
/// namespaces, catches up from. Members that stay count too: an assignment installed while
/// another's hand-over is still under way takes namespaces from a member that owned them only
/// in the generation in between, which stops acting on them at once, mid-backfill (the chaos
/// run of 9a13bf3: 164 missed). `None` when none of them published a version.
pub fn catch_up_since(
    before: &[&Assignment],
    me: &str,
    acted: &HashMap<String, ActedVersions>,
) -> Option<ActedVersions> {
    let mut since: Option<ActedVersions> = None;
    let others = before
        .iter()
        .flat_map(|a| a.members.iter())
        .filter(|m| *m != me);
    for member in others {
        if let Some(versions) = acted.get(member).filter(|v| !v.is_empty()) {
            since
                .get_or_insert_with(Default::default)
                .min_with(versions);
        }
    }
    since
}

/// What the handover loop does next, decided from a view snapshot and the member Leases.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HandoverStep {
    /// No handover, or its condition is not met yet.
    Wait,
    /// Every member of the current assignment has synced it: release what only the previous
    /// assignment gave.
    Release(u64),
    /// Every live previous owner has released the generation: the handover is complete.
    Complete(u64),
}

pub fn next_step(view: &ShardView, members: &[Member]) -> HandoverStep {
    let (Some(current), Some(previous)) = (&view.current, &view.previous) else {
        return HandoverStep::Wait;
    };
    let generation = current.generation;
    let member = |id: &String| members.iter().find(|m| &m.identity == id);
    if !view.released_previous {
        let synced_by_all = current
            .members
            .iter()
            .all(|id| member(id).is_some_and(|m| m.synced_generation >= generation));
        return if synced_by_all {
            HandoverStep::Release(generation)
        } else {
            HandoverStep::Wait
        };
    }
    // A previous owner that is no longer live is fenced: it cannot write.
    let released_by_all = previous
        .members
        .iter()
        .all(|id| member(id).is_none_or(|m| !m.live || m.released_generation >= generation));
    if released_by_all {
        HandoverStep::Complete(generation)
    } else {
        HandoverStep::Wait
    }
}

#[cfg(test)]
mod tests;
