//! The workloads linked to one config. Almost every config has exactly one user, so one is kept
//! inline and a set is only allocated for two or more: at 200k configs an empty-ish hash set per
//! config cost ~200 bytes each (40 MiB), the inline key costs nothing extra.

use std::collections::HashSet;

use ahash::RandomState;

use crate::model::WorkloadKey;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Users {
    One(WorkloadKey),
    // Boxed on purpose: inline, the set (with its hasher state) would make every entry 64
    // bytes instead of 40, for the rare config with several users.
    #[allow(clippy::box_collection)]
    Many(Box<HashSet<WorkloadKey, RandomState>>),
}

impl Users {
    pub fn insert(&mut self, key: WorkloadKey) {
        match self {
            Users::One(only) if *only == key => {}
            Users::One(only) => {
                let mut set = HashSet::with_capacity_and_hasher(2, RandomState::new());
                set.insert(only.clone());
                set.insert(key);
                *self = Users::Many(Box::new(set));
            }
            Users::Many(set) => {
                set.insert(key);
            }
        }
    }

    /// Removes `key`; true when no user is left (the caller drops the entry).
    pub fn remove(&mut self, key: &WorkloadKey) -> bool {
        match self {
            Users::One(only) => only == key,
            Users::Many(set) => {
                set.remove(key);
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

    pub fn iter(&self) -> impl Iterator<Item = &WorkloadKey> {
        let (one, many) = match self {
            Users::One(k) => (Some(k), None),
            Users::Many(set) => (None, Some(set.iter())),
        };
        one.into_iter().chain(many.into_iter().flatten())
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
        let mut u = Users::One(key("a"));
        u.insert(key("a"));
        assert_eq!(u, Users::One(key("a")));
        u.insert(key("b"));
        u.insert(key("c"));
        assert_eq!(u.len(), 3);
        let mut names: Vec<&str> = u.iter().map(|k| &*k.name).collect();
        names.sort();
        assert_eq!(names, ["a", "b", "c"]);
        assert!(!u.remove(&key("b")));
        assert!(!u.remove(&key("c")));
        assert_eq!(u, Users::One(key("a")));
        assert!(!u.remove(&key("zz")), "removing a stranger keeps the user");
        assert!(u.remove(&key("a")));
    }

    #[test]
    fn one_user_costs_no_allocation_beyond_the_key() {
        assert_eq!(
            std::mem::size_of::<Users>(),
            std::mem::size_of::<WorkloadKey>()
        );
    }
}
