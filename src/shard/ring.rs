//! Which replica owns a namespace: rendezvous (highest-random-weight) hashing over the members of
//! an assignment. Every replica computes the same answer from the same member list, adding or
//! removing one of N members moves only ~1/N of the namespaces, and nothing needs a ring table.

/// The weight of `namespace` for `member`: blake3 is stable across processes and releases,
/// which an ownership function must be.
fn weight(member: &str, namespace: &str) -> u64 {
    let mut h = blake3::Hasher::new();
    h.update(member.as_bytes());
    h.update(&[0]);
    h.update(namespace.as_bytes());
    let bytes = h.finalize();
    u64::from_le_bytes(bytes.as_bytes()[..8].try_into().expect("8 bytes"))
}

/// The member that owns `namespace` (`None` when there are no members).
pub fn owner<'a>(namespace: &str, members: &'a [String]) -> Option<&'a str> {
    members
        .iter()
        .max_by_key(|m| (weight(m, namespace), m.as_str()))
        .map(String::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn members(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("kube-reloader-{i}")).collect()
    }

    fn namespaces(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("tenant-{i}")).collect()
    }

    #[test]
    fn three_members_share_300_namespaces_evenly() {
        let m = members(3);
        let mut counts: HashMap<&str, usize> = HashMap::new();
        for ns in namespaces(300) {
            *counts.entry(owner(&ns, &m).unwrap()).or_default() += 1;
        }
        assert_eq!(counts.len(), 3);
        for (member, n) in counts {
            assert!((80..=120).contains(&n), "{member} owns {n}");
        }
    }

    #[test]
    fn a_fourth_member_moves_about_a_quarter_and_only_to_itself() {
        let three = members(3);
        let four = members(4);
        let all = namespaces(10_000);
        let moved: Vec<&String> = all
            .iter()
            .filter(|ns| owner(ns, &three) != owner(ns, &four))
            .collect();
        let share = moved.len() as f64 / all.len() as f64;
        assert!((0.20..=0.30).contains(&share), "moved {share}");
        assert!(
            moved
                .iter()
                .all(|ns| owner(ns, &four) == Some("kube-reloader-3"))
        );
    }

    #[test]
    fn order_of_members_does_not_matter_and_empty_has_no_owner() {
        let mut m = members(5);
        let a = owner("ns", &m).map(String::from);
        m.reverse();
        assert_eq!(owner("ns", &m).map(String::from), a);
        assert_eq!(owner("ns", &[]), None);
    }

    proptest::proptest! {
        /// For any namespace and membership: the owner is a member, it does not depend on the
        /// members' order, and adding a member moves a namespace only to the new member.
        #[test]
        fn owners_are_members_order_free_and_only_move_to_a_newcomer(
            namespace in "[a-z0-9-]{1,63}",
            mut names in proptest::collection::btree_set("[a-z0-9-]{1,20}", 1..8),
            newcomer in "[a-z0-9-]{1,20}",
        ) {
            names.remove(&newcomer);
            proptest::prop_assume!(!names.is_empty());
            let list: Vec<String> = names.iter().cloned().collect();
            let reversed: Vec<String> = list.iter().rev().cloned().collect();
            let before = owner(&namespace, &list).expect("an owner");
            proptest::prop_assert!(list.iter().any(|m| m == before));
            proptest::prop_assert_eq!(Some(before), owner(&namespace, &reversed));
            let mut grown = list.clone();
            grown.push(newcomer.clone());
            let after = owner(&namespace, &grown).expect("an owner");
            proptest::prop_assert!(after == before || after == newcomer);
        }
    }
}
