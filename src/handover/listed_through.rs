//! How far the config lists of one backfill have come, so that each gained namespace's config
//! changes stop waiting (`deferral.rs`) as soon as every config list has passed it, not when
//! the last one ends: a takeover of 500 namespaces otherwise held every live change there for
//! the whole list (tens of seconds on a loaded control plane).
//!
//! A paginated LIST comes in the order of the API server's storage keys,
//! `<namespace>/<name>`: a continue token says "after this key", which only works in that
//! order. A streaming list's initial events come in the same order: the watch cache sends them
//! from its store ordered by key (`newCacheIntervalFromStore`: "sorted by Key", in every
//! release since streaming lists exist). So once a list delivered an object of namespace `b`,
//! every namespace whose key prefix `<ns>/` sorts before `b/` is complete in that list. A list
//! seen out of that order (a server that does not keep it) stops the early release for the
//! rest of the backfill, with a warning: the namespaces then wait for the end, as before.

use std::sync::Mutex;

use tracing::warn;

/// The gained namespaces a backfill's config lists have not all passed yet, and each list's
/// progress. Pure: the backfill reports pages, this says which namespaces they completed.
pub struct ListedThrough {
    state: Mutex<State>,
}

struct State {
    /// Namespaces not released yet, as key prefixes (`<ns>/`), the last in key order first.
    pending: Vec<String>,
    /// One per config list.
    lists: Vec<Progress>,
    /// False once a list was seen out of key order: nothing more is released early.
    in_order: bool,
}

/// How far one list has come.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Progress {
    /// Nothing delivered yet (or started over after a failed page).
    Started,
    /// Its last page ended in this namespace (a key prefix, `<ns>/`): everything before it
    /// is complete, that namespace may go on in the next page.
    Through(String),
    /// Every page delivered.
    Done,
}

impl ListedThrough {
    /// `namespaces` are gained; `lists` config lists will report their pages.
    pub fn new<'a>(namespaces: impl IntoIterator<Item = &'a str>, lists: usize) -> Self {
        let mut pending: Vec<String> = namespaces.into_iter().map(prefix).collect();
        pending.sort_unstable_by(|a, b| b.cmp(a));
        Self {
            state: Mutex::new(State {
                pending,
                lists: vec![Progress::Started; lists],
                in_order: true,
            }),
        }
    }

    /// List `list` delivered a page whose objects are in `namespaces` (in the page's order);
    /// returns the namespaces every list has now passed.
    pub fn page<'a>(
        &self,
        list: usize,
        namespaces: impl IntoIterator<Item = &'a str>,
    ) -> Vec<String> {
        let mut state = self.state.lock().expect("listed-through lock");
        let mut through = state.lists[list].clone();
        for namespace in namespaces {
            let next = Progress::Through(prefix(namespace));
            if next < through && state.in_order {
                warn!(
                    namespace,
                    "a backfill list came out of key order: its namespaces wait \
                    for the end of the list"
                );
                state.in_order = false;
            }
            through = through.max(next);
        }
        state.lists[list] = through;
        state.released()
    }

    /// List `list` starts over from its first page (a page failed).
    pub fn restarted(&self, list: usize) {
        self.state.lock().expect("listed-through lock").lists[list] = Progress::Started;
    }

    /// List `list` delivered its last page; returns the namespaces every list has now passed.
    pub fn done(&self, list: usize) -> Vec<String> {
        let mut state = self.state.lock().expect("listed-through lock");
        state.lists[list] = Progress::Done;
        state.released()
    }
}

impl State {
    /// Takes out the pending namespaces that every list has passed.
    fn released(&mut self) -> Vec<String> {
        let all_done = self.lists.iter().all(|l| *l == Progress::Done);
        if !self.in_order && !all_done {
            return Vec::new();
        }
        let slowest = self.lists.iter().min().cloned().unwrap_or(Progress::Done);
        let mut released = Vec::new();
        while let Some(next) = self.pending.last() {
            let passed = match &slowest {
                Progress::Started => false,
                Progress::Through(last) => next < last,
                Progress::Done => true,
            };
            if !passed {
                break;
            }
            let mut namespace = self.pending.pop().expect("checked above");
            namespace.pop();
            released.push(namespace);
        }
        released
    }
}

/// A namespace's key prefix: `<ns>/` sorts where its objects' keys do (`a-b/x` before `a/x`).
fn prefix(namespace: &str) -> String {
    format!("{namespace}/")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_namespace_is_released_once_every_list_has_passed_it() {
        let through = ListedThrough::new(["a", "b", "c", "d"], 2);
        assert!(
            through.page(0, ["a", "a", "b", "c"]).is_empty(),
            "list 1 has not begun"
        );
        assert_eq!(
            through.page(1, ["a", "b"]),
            ["a"],
            "b may go on in list 1's next page"
        );
        assert_eq!(through.page(1, ["d"]), ["b"], "list 0 is still in c");
        assert_eq!(through.done(0), ["c"]);
        assert_eq!(through.done(1), ["d"]);
    }

    #[test]
    fn namespaces_without_objects_are_released_when_a_later_one_is_passed() {
        let through = ListedThrough::new(["a", "b", "c"], 1);
        assert_eq!(through.page(0, ["c"]), ["a", "b"]);
        assert_eq!(through.done(0), ["c"]);
    }

    #[test]
    fn key_order_is_that_of_the_namespace_and_a_slash() {
        // `x-y/…` sorts before `x/…` ('-' < '/'), though "x" < "x-y".
        let through = ListedThrough::new(["x", "x-y"], 1);
        assert!(through.page(0, ["x-y"]).is_empty());
        assert_eq!(through.page(0, ["x"]), ["x-y"]);
    }

    #[test]
    fn a_restarted_list_releases_nothing_more_until_it_passes_them_again() {
        let through = ListedThrough::new(["a", "b", "c"], 1);
        assert_eq!(through.page(0, ["a", "b"]), ["a"]);
        through.restarted(0);
        assert!(
            through.page(0, ["a"]).is_empty(),
            "a re-listed: no disorder"
        );
        assert_eq!(through.page(0, ["c"]), ["b"]);
        assert_eq!(through.done(0), ["c"]);
    }

    #[test]
    fn a_list_out_of_key_order_releases_the_rest_only_at_the_end() {
        let through = ListedThrough::new(["a", "b", "c"], 1);
        assert_eq!(through.page(0, ["b"]), ["a"]);
        assert!(
            through.page(0, ["a", "c"]).is_empty(),
            "a after b: out of order"
        );
        assert!(through.page(0, ["c"]).is_empty());
        assert_eq!(through.done(0), ["b", "c"]);
    }

    #[test]
    fn without_config_lists_every_namespace_is_released_at_once() {
        let through = ListedThrough::new(["a", "b"], 0);
        assert!(through.state.lock().unwrap().lists.is_empty());
        assert_eq!(through.state.lock().unwrap().released(), ["a", "b"]);
    }
}
