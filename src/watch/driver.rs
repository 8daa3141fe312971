//! The one watch driver: every watch (configs, pod statuses, workloads, namespaces) is a merged
//! set of `watcher` streams, one per namespace in scoped mode. The driver owns what they have in
//! common: which stream has finished its first list (start-up readiness), and the relist diff
//! after a watch broke (what the index holds that the relist no longer returned was deleted
//! while the watch was down). What an object means is the [`IndexVerbs`] of each watch.

use std::collections::HashSet;
use std::future::Future;
use std::hash::Hash;

use futures::{Stream, StreamExt};
use kube::runtime::watcher;

use crate::engine::Phase;
use crate::shard::ListMark;

use super::context::SyncGate;

/// What one watch does with its objects; the driver calls these in event order.
pub(super) trait IndexVerbs<T>: Send {
    /// What identifies an object in the relist diff.
    type Key: Eq + Hash + Send;

    /// Takes in one object; returns its key when the watch keeps track of it. `phase` is
    /// [`Phase::Startup`] during the stream's first list, [`Phase::Relisted`] for the objects of
    /// a later list, [`Phase::Live`] for watch events after the first list (a relist
    /// after a break included: differences found then are real changes).
    fn apply(&mut self, obj: T, phase: Phase) -> impl Future<Output = Option<Self::Key>> + Send;

    fn delete(&mut self, obj: T) -> impl Future<Output = ()> + Send;

    /// Taken when a list starts ([`crate::shard::Ownership::list_mark`]) and handed to `reset`.
    fn list_mark(&self) -> ListMark;

    /// A list of one of the streams starts; `reset` follows when it has finished.
    fn list_started(&mut self) {}

    /// Asked as a stream's first list starts: whether `reset` will read what it returns. A
    /// watch that knows nothing yet that the list could find gone says no, and the driver
    /// does not collect the list's keys (at 100,000 objects, 5-8 MiB held until the list
    /// ends, at start-up's peak).
    fn diffs_first_list(&self) -> bool {
        true
    }

    /// A list of `namespace` (`None`: every namespace) started at `mark` has finished and
    /// returned `seen`: forget what it did not return, in the namespaces it covered throughout.
    /// `first`: the stream's first list. `seen` is `None` when the list's keys were not
    /// collected ([`Self::diffs_first_list`] said no).
    fn reset(
        &mut self,
        namespace: Option<&str>,
        seen: Option<HashSet<Self::Key>>,
        first: bool,
        mark: ListMark,
    );

    /// The stream failed; the watcher's backoff retries it.
    fn failed(&mut self, error: &watcher::Error);
}

/// One event of stream `.0` among the merged streams.
pub(super) type StreamEvent<T> = (usize, Result<watcher::Event<T>, watcher::Error>);

/// Where one stream stands.
struct StreamState<K> {
    namespace: Option<String>,
    synced: bool,
    /// Keys returned by the list in progress (`None`: not collected), and when it started
    /// (`None`: no list in progress).
    relisting: Option<(Option<HashSet<K>>, ListMark)>,
}

/// Drives merged watch streams into `verbs` until they end. `namespaces[i]` is the namespace
/// stream `i` watches (`None`: cluster-wide); `gate` counts each stream's first list.
pub(super) async fn drive<T, V, S>(
    mut events: S,
    namespaces: Vec<Option<String>>,
    verbs: &mut V,
    gate: &SyncGate,
) where
    V: IndexVerbs<T>,
    S: Stream<Item = StreamEvent<T>> + Unpin,
{
    let mut streams: Vec<StreamState<V::Key>> = namespaces
        .into_iter()
        .map(|namespace| StreamState {
            namespace,
            synced: false,
            relisting: None,
        })
        .collect();
    while let Some((i, event)) = events.next().await {
        let stream = &mut streams[i];
        let phase = if stream.synced {
            Phase::Live
        } else {
            Phase::Startup
        };
        match event {
            Ok(watcher::Event::Init) => {
                if stream.relisting.is_none() {
                    verbs.list_started();
                }
                let collected = stream.synced || verbs.diffs_first_list();
                stream.relisting = Some((collected.then(HashSet::new), verbs.list_mark()));
            }
            Ok(watcher::Event::InitApply(obj)) => {
                // A relist after a break re-delivers every object: not each one a change.
                let phase = match phase {
                    Phase::Live => Phase::Relisted,
                    first => first,
                };
                if let Some(key) = verbs.apply(obj, phase).await
                    && let Some((Some(seen), _)) = stream.relisting.as_mut()
                {
                    seen.insert(key);
                }
            }
            Ok(watcher::Event::Apply(obj)) => {
                verbs.apply(obj, phase).await;
            }
            Ok(watcher::Event::Delete(obj)) => verbs.delete(obj).await,
            Ok(watcher::Event::InitDone) => {
                if let Some((seen, mark)) = stream.relisting.take() {
                    verbs.reset(stream.namespace.as_deref(), seen, !stream.synced, mark);
                }
                if !stream.synced {
                    stream.synced = true;
                    gate.done_one();
                }
            }
            Err(error) => verbs.failed(&error),
        }
    }
}

/// Maps the object of a watch event with `f(object, deleted)`, keeping the event's shape (so
/// that work such as hashing can run ahead of the driver, in order).
pub(super) async fn map_event<T, U, F, Fut>(
    event: Result<watcher::Event<T>, watcher::Error>,
    f: F,
) -> Result<watcher::Event<U>, watcher::Error>
where
    F: FnOnce(T, bool) -> Fut,
    Fut: Future<Output = U>,
{
    Ok(match event? {
        watcher::Event::Init => watcher::Event::Init,
        watcher::Event::InitApply(obj) => watcher::Event::InitApply(f(obj, false).await),
        watcher::Event::Apply(obj) => watcher::Event::Apply(f(obj, false).await),
        watcher::Event::Delete(obj) => watcher::Event::Delete(f(obj, true).await),
        watcher::Event::InitDone => watcher::Event::InitDone,
    })
}

#[cfg(test)]
mod tests;
