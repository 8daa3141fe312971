//! The shard handover protocol, end to end. Namespaces move between replicas with an overlap
//! and never a gap: the old owner keeps acting until the new owner has indexed what it gained.
//! During the overlap both may write; that is safe because a write is idempotent (the template
//! already holding the hash is left alone), guarded by a resourceVersion test, and, while the
//! view is settling, preceded by a check that the writer's view of the config is as new as the
//! API server's (`rollout/config_view.rs`).
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
//!                                      (`Moves`, rollout/config_view.rs)
//! ```
//! A newer generation installed at any step starts a new overlap from the last settled
//! assignment; each transition re-checks the generation under the view's lock, so a decision
//! taken from a stale snapshot never reverts a newer assignment.
//!
//! This module holds the protocol's state and decisions, free of I/O. The I/O around it:
//! `coordinator.rs` (membership Leases, the assignment watch, the loop that applies
//! [`next_step`]), `watch/backfill.rs` (indexing gained namespaces, then reporting the
//! generation synced), `rollout/config_view.rs` (the write-time check while settling).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use super::Assignment;
use super::acted::{ActedGuard, ActedVersions};
use super::lease::Member;

/// The assignments this replica acts on: the current one and, during a handover, the previous
/// one (the old owner keeps acting until the new owners have synced: overlap, never a gap).
#[derive(Debug, Default, Clone)]
pub struct ShardView {
    pub current: Option<Arc<Assignment>>,
    pub previous: Option<Arc<Assignment>>,
    /// This replica stopped acting on what only `previous` gave it (every member has synced
    /// `current`); `previous` is cleared once every previous owner has released it too.
    pub released_previous: bool,
}

/// How long after a handover writes keep checking that this replica's config view is current.
/// A replica's lists and watches lag the API server by well under a second normally and by a few
/// seconds under load; past this window only one replica acts on a namespace.
pub const SETTLE_WINDOW: Duration = Duration::from_secs(30);

/// View transitions, each applied under the view's lock by [`ShardState::update_view`]. The
/// handover loop decides from a snapshot taken before reading the Leases; each transition
/// re-checks the generation so an assignment installed meanwhile is never overwritten.
impl ShardView {
    pub fn generation(&self) -> Option<u64> {
        self.current.as_ref().map(|a| a.generation)
    }

    /// Installs a newer assignment (false if not newer). Keeps acting on what the last completed
    /// assignment gave: if generations follow each other before a handover completes, the older,
    /// completed one stays as `previous`; replacing it would leave namespaces with nobody acting.
    pub fn install(&mut self, next: Arc<Assignment>) -> bool {
        if self.generation().is_some_and(|g| g >= next.generation) {
            return false;
        }
        let previous = self.previous.take().or_else(|| self.current.take());
        *self = ShardView {
            current: Some(next),
            previous,
            released_previous: false,
        };
        true
    }

    /// Step 1 of a handover of `generation`: stop acting on what only `previous` gave. False if
    /// the current assignment is no longer `generation`.
    pub fn release_previous(&mut self, generation: u64) -> bool {
        if self.generation() != Some(generation) {
            return false;
        }
        if self.previous.is_some() {
            self.released_previous = true;
        }
        true
    }

    /// Step 2: every previous owner released `generation`; drop `previous`. False (and nothing
    /// changed) if a newer assignment was installed meanwhile: it keeps its own handover.
    pub fn complete_handover(&mut self, generation: u64) -> bool {
        if self.generation() != Some(generation) || !self.released_previous {
            return false;
        }
        self.previous = None;
        self.released_previous = false;
        true
    }
}

/// The assignments this replica installed, as (the one acted on before, the one installed)
/// pairs, each kept until [`SETTLE_WINDOW`] after the handover that followed it completed: which
/// namespaces another replica may have acted on from its own view meanwhile. Only those need the
/// write-time check; a namespace whose owner stayed the same had one replica acting on it
/// throughout, so its writes go ahead without a GET (issue 43: a handover anywhere made every
/// write of every replica check its view, and wait while the view lagged). Times are
/// milliseconds on the replica's monotonic clock.
#[derive(Debug, Default, Clone)]
pub struct Moves {
    steps: Vec<Move>,
}

#[derive(Debug, Clone)]
struct Move {
    before: Option<Arc<Assignment>>,
    installed: Arc<Assignment>,
    /// When the view next had no previous assignment (every handover up to this one complete);
    /// `None` while one is under way.
    settled_at_ms: Option<u64>,
}

impl Moves {
    pub fn record(&mut self, before: Option<Arc<Assignment>>, installed: Arc<Assignment>) {
        self.steps.push(Move {
            before,
            installed,
            settled_at_ms: None,
        });
    }

    /// The view has no previous assignment at `now_ms`: every move recorded so far has settled.
    /// Moves settled more than [`SETTLE_WINDOW`] ago are forgotten.
    pub fn settled(&mut self, now_ms: u64) {
        for step in &mut self.steps {
            step.settled_at_ms.get_or_insert(now_ms);
        }
        self.steps.retain(|step| step.live(now_ms));
    }

    /// Whether another replica may have acted on `namespace` lately: a move not yet settled for
    /// [`SETTLE_WINDOW`] gave it a different owner, or what happened before that move is not
    /// known (a first assignment: whoever acted before this replica started; a skipped
    /// generation: an assignment this replica never saw may have given it to another).
    pub fn moved(&self, namespace: &str, now_ms: u64) -> bool {
        self.steps
            .iter()
            .filter(|step| step.live(now_ms))
            .any(|step| match &step.before {
                None => true,
                Some(b) if step.installed.generation != b.generation + 1 => true,
                Some(b) => b.owner(namespace) != step.installed.owner(namespace),
            })
    }
}

impl Move {
    fn live(&self, now_ms: u64) -> bool {
        self.settled_at_ms
            .is_none_or(|at| now_ms.saturating_sub(at) < SETTLE_WINDOW.as_millis() as u64)
    }
}

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
    acted: &std::collections::HashMap<String, ActedVersions>,
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
