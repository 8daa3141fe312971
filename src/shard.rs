//! The one predicate that says whether this replica acts on a namespace. Everything the engine
//! keeps is keyed by namespace and filtered here, so sharding narrows this predicate without
//! reshaping the engine. Today: not ignored, and selected by the namespace selector if one is set.

use std::collections::HashSet;
use std::sync::Arc;

use dashmap::DashSet;

#[derive(Debug, Default)]
pub struct Ownership {
    ignored: HashSet<String>,
    /// `Some` when a namespace selector is set: the namespaces it currently selects.
    selected: Option<DashSet<Arc<str>, ahash::RandomState>>,
}

impl Ownership {
    pub fn new(ignored: impl IntoIterator<Item = String>, selector_active: bool) -> Self {
        Self {
            ignored: ignored.into_iter().collect(),
            selected: selector_active.then(DashSet::default),
        }
    }

    pub fn owns(&self, namespace: &str) -> bool {
        !self.ignored.contains(namespace)
            && self.selected.as_ref().is_none_or(|s| s.contains(namespace))
    }

    /// The namespace selector now matches `namespace`; true if that is news.
    pub fn select(&self, namespace: &str) -> bool {
        self.selected
            .as_ref()
            .is_some_and(|s| s.insert(Arc::from(namespace)))
    }

    /// The namespace selector no longer matches `namespace`; true if that is news.
    pub fn unselect(&self, namespace: &str) -> bool {
        self.selected
            .as_ref()
            .is_some_and(|s| s.remove(namespace).is_some())
    }

    pub fn uses_selector(&self) -> bool {
        self.selected.is_some()
    }

    pub fn owned_count(&self) -> Option<usize> {
        self.selected.as_ref().map(|s| s.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ignore_and_selector() {
        let o = Ownership::new(["kube-system".to_string()], false);
        assert!(o.owns("a") && !o.owns("kube-system"));
        let o = Ownership::new(Vec::new(), true);
        assert!(!o.owns("a"));
        assert!(o.select("a") && !o.select("a"));
        assert!(o.owns("a"));
        assert!(o.unselect("a") && !o.owns("a"));
    }
}
