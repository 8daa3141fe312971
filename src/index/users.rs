//! The workloads linked to one config. Almost every config has exactly one user, so one is kept
//! inline and a set is only allocated for two or more: at 200k configs an empty-ish hash set per
//! config cost ~200 bytes each (40 MiB), the inline user costs nothing extra.

use std::collections::HashSet;
use std::sync::Arc;

use ahash::RandomState;

use crate::model::{WorkloadKey, WorkloadKind};

/// A workload of the config's own namespace (a template only reads configs of its namespace), so
/// an edge keeps the kind and name and not a third copy of the namespace: 24 bytes, not 40, in
/// each of 200,000 edges.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct User {
    kind: WorkloadKind,
    name: Arc<str>,
}

impl User {
    fn of(key: &WorkloadKey) -> Self {
        Self {
            kind: key.kind,
            name: key.name.clone(),
        }
    }

    fn key(&self, namespace: &Arc<str>) -> WorkloadKey {
        WorkloadKey {
            kind: self.kind,
            namespace: namespace.clone(),
            name: self.name.clone(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Users {
    One(User),
    // Boxed on purpose: inline, the set (with its hasher state) would make every entry larger,
    // for the rare config with several users.
    #[allow(clippy::box_collection)]
    Many(Box<HashSet<User, RandomState>>),
}

impl Users {
    pub fn one(key: &WorkloadKey) -> Self {
        Users::One(User::of(key))
    }

    pub fn insert(&mut self, key: &WorkloadKey) {
        let user = User::of(key);
        match self {
            Users::One(only) if *only == user => {}
            Users::One(only) => {
                let mut set = HashSet::with_capacity_and_hasher(2, RandomState::new());
                set.insert(only.clone());
                set.insert(user);
                *self = Users::Many(Box::new(set));
            }
            Users::Many(set) => {
                set.insert(user);
            }
        }
    }

    /// Removes `key`; true when no user is left (the caller drops the entry).
    pub fn remove(&mut self, key: &WorkloadKey) -> bool {
        let user = User::of(key);
        match self {
            Users::One(only) => *only == user,
            Users::Many(set) => {
                set.remove(&user);
                match set.len() {
                    0 => true,
                    1 => {
                        let last = set.iter().next().cloned().expect("one element");
                        *self = Users::One(last);
                        false
                    }
                    _ => false,
                }
            }
        }
    }

    pub fn len(&self) -> usize {
        match self {
            Users::One(_) => 1,
            Users::Many(set) => set.len(),
        }
    }

    /// The users' keys, in `namespace` (the config's).
    pub fn keys<'a>(&'a self, namespace: &'a Arc<str>) -> impl Iterator<Item = WorkloadKey> + 'a {
        let (one, many) = match self {
            Users::One(user) => (Some(user), None),
            Users::Many(set) => (None, Some(set.iter())),
        };
        one.into_iter()
            .chain(many.into_iter().flatten())
            .map(|user| user.key(namespace))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::WorkloadKind;

    fn key(name: &str) -> WorkloadKey {
        WorkloadKey::new(WorkloadKind::Deployment, "ns", name)
    }

    #[test]
    fn grows_to_a_set_and_shrinks_back() {
        let mut u = Users::one(&key("a"));
        u.insert(&key("a"));
        assert_eq!(u, Users::one(&key("a")));
        u.insert(&key("b"));
        u.insert(&key("c"));
        assert_eq!(u.len(), 3);
        let namespace: Arc<str> = Arc::from("ns");
        let mut keys: Vec<WorkloadKey> = u.keys(&namespace).collect();
        keys.sort();
        assert_eq!(keys, [key("a"), key("b"), key("c")]);
        assert!(!u.remove(&key("b")));
        assert!(!u.remove(&key("c")));
        assert_eq!(u, Users::one(&key("a")));
        assert!(!u.remove(&key("zz")), "removing a stranger keeps the user");
        assert!(u.remove(&key("a")));
    }

    #[test]
    fn one_user_costs_its_kind_and_name_only() {
        assert_eq!(std::mem::size_of::<Users>(), std::mem::size_of::<User>());
        assert!(std::mem::size_of::<Users>() < std::mem::size_of::<WorkloadKey>());
    }
}
