//! The view of the assignment this replica acts on, and the history of it the write-time check
//! reads. The hand-over (`handover/`) moves the view through its states: install, release the
//! previous assignment, complete; each transition is here, applied under the view's lock by
//! [`super::ShardState::update_view`].

use std::sync::Arc;
use std::time::Duration;

use super::Assignment;

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

/// View transitions, each applied under the view's lock by
/// [`super::ShardState::update_view`]. The hand-over's steps (`handover::steps`) are decided
/// from a snapshot taken before reading the Leases; each transition re-checks the generation so
/// an assignment installed meanwhile is never overwritten.
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
/// write of every replica check its view, and wait while the view lagged). Within the window,
/// once the membership Leases show every other live replica released the installed generation
/// (read at a known revision of the API server), only configs this replica last saw change at
/// or before that revision are checked: a later version was made after every other replica
/// stopped acting here, so no replica can have written anything newer from its own view. Times
/// are milliseconds on the replica's monotonic clock.
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
    /// The API server's revision of a Lease list in which every other live replica had
    /// released `installed`'s generation: none of them acts on what it gave this replica after
    /// that. `None` until such a list is read.
    others_quiet_at: Option<u64>,
}

/// Which configs a write in a namespace that moved lately checks against the API server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settling {
    /// Every config it writes: another replica may still act, or may have acted from a view of
    /// any age.
    Every,
    /// Only configs whose indexed resourceVersion is at or below this revision; newer versions
    /// were made after every other replica had stopped acting on the namespace.
    ChangedUpTo(u64),
}

impl Settling {
    /// Whether a config whose index holds `indexed_version` (0: unknown) must be compared with
    /// the server's.
    pub fn checks(self, indexed_version: Option<u64>) -> bool {
        match (self, indexed_version) {
            (Settling::ChangedUpTo(quiet_at), Some(version)) if version != 0 => version <= quiet_at,
            _ => true,
        }
    }
}

impl Moves {
    pub fn record(&mut self, before: Option<Arc<Assignment>>, installed: Arc<Assignment>) {
        self.steps.push(Move {
            before,
            installed,
            settled_at_ms: None,
            others_quiet_at: None,
        });
    }

    /// A Lease list read at `revision` shows every other live replica released
    /// `released_by_others` or later: moves up to that generation know when the others stopped.
    pub fn others_released(&mut self, released_by_others: u64, revision: u64) {
        for step in &mut self.steps {
            if step.installed.generation <= released_by_others {
                step.others_quiet_at.get_or_insert(revision);
            }
        }
    }

    /// The view has no previous assignment at `now_ms`: every move recorded so far has settled.
    /// Moves settled more than [`SETTLE_WINDOW`] ago are forgotten.
    pub fn settled(&mut self, now_ms: u64) {
        for step in &mut self.steps {
            step.settled_at_ms.get_or_insert(now_ms);
        }
        self.steps.retain(|step| step.live(now_ms));
    }

    /// Whether another replica may have acted on `namespace` lately, and so which configs its
    /// writes check (`None`: none). It may have when a move not yet settled for
    /// [`SETTLE_WINDOW`] gave it a different owner, or what happened before that move is not
    /// known (a first assignment: whoever acted before this replica started; a skipped
    /// generation: an assignment this replica never saw may have given it to another).
    pub fn moved(&self, namespace: &str, now_ms: u64) -> Option<Settling> {
        self.steps
            .iter()
            .filter(|step| step.live(now_ms) && step.moved(namespace))
            .fold(None, |settling, step| {
                Some(match (settling, step.others_quiet_at) {
                    (Some(Settling::Every), _) | (_, None) => Settling::Every,
                    (Some(Settling::ChangedUpTo(a)), Some(b)) => Settling::ChangedUpTo(a.max(b)),
                    (None, Some(b)) => Settling::ChangedUpTo(b),
                })
            })
    }
}

impl Move {
    fn moved(&self, namespace: &str) -> bool {
        match &self.before {
            None => true,
            Some(b) if self.installed.generation != b.generation + 1 => true,
            Some(b) => b.owner(namespace) != self.installed.owner(namespace),
        }
    }

    fn live(&self, now_ms: u64) -> bool {
        self.settled_at_ms
            .is_none_or(|at| now_ms.saturating_sub(at) < SETTLE_WINDOW.as_millis() as u64)
    }
}

#[cfg(test)]
mod tests;
