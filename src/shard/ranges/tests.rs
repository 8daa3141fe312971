use std::collections::HashMap;

use super::*;

fn members(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("kube-reloader-{i}")).collect()
}

/// Namespace names as clusters have them: sequential (the case FNV-1a clumps), prefixed by a
/// run id as the load test makes them, and random.
fn name_sets() -> Vec<(&'static str, Vec<String>)> {
    let random = (0..10_000u32)
        .map(|i| {
            let h = blake3::hash(&i.to_le_bytes()).to_hex();
            format!("team-{}", &h[..10])
        })
        .collect();
    vec![
        (
            "tenant-%05d",
            (0..10_000).map(|i| format!("tenant-{i:05}")).collect(),
        ),
        (
            "load test",
            (0..10_000)
                .map(|i| format!("kr-lt-3f9a2c-{i:05}"))
                .collect(),
        ),
        ("random", random),
    ]
}

fn table_for(names: &[String], members: &[String]) -> RangeTable {
    let quantiles = Quantiles::of(names.iter().map(|n| fnv1a64(n)).collect());
    RangeTable::new(members, quantiles.as_ref())
}

/// The largest relative deviation of a member's share from the mean.
fn worst_deviation(table: &RangeTable, names: &[String], n: usize) -> f64 {
    let mut counts: HashMap<&str, usize> = HashMap::new();
    for ns in names {
        *counts.entry(table.owner(ns).unwrap()).or_default() += 1;
    }
    assert_eq!(counts.len(), n, "every member owns something");
    let mean = names.len() as f64 / n as f64;
    counts
        .values()
        .map(|&c| (c as f64 - mean).abs() / mean)
        .fold(0.0, f64::max)
}

#[test]
fn fnv1a64_is_the_api_servers_hash() {
    // The values of Go's hash/fnv New64a, which k8s.io/apimachinery/pkg/sharding uses.
    assert_eq!(fnv1a64(""), 0xcbf2_9ce4_8422_2325);
    assert_eq!(fnv1a64("a"), 0xaf63_dc4c_8601_ec8c);
    assert_eq!(fnv1a64("foobar"), 0x8594_4171_f739_67e8);
}

#[test]
fn shares_are_within_15_percent_at_4_and_16_members_for_every_kind_of_name() {
    for (kind, names) in name_sets() {
        for n in [4, 16] {
            let worst = worst_deviation(&table_for(&names, &members(n)), &names, n);
            assert!(worst <= 0.15, "{kind} at {n} members: off by {worst:.3}");
        }
    }
}

#[test]
fn without_quantiles_sequential_names_clump() {
    // Why the quantiles exist: the raw FNV-1a ring is far from balanced for sequential names.
    let names: Vec<String> = (0..10_000).map(|i| format!("tenant-{i:05}")).collect();
    let raw = RangeTable::new(&members(16), None);
    assert!(worst_deviation(&raw, &names, 16) > 0.25);
}

#[test]
fn joining_moves_about_one_nth_and_only_to_the_newcomer_and_leaving_only_the_leavers() {
    for (kind, names) in name_sets() {
        for n in [3, 15] {
            let quantiles = Quantiles::of(names.iter().map(|n| fnv1a64(n)).collect());
            let before = RangeTable::new(&members(n), quantiles.as_ref());
            let after = RangeTable::new(&members(n + 1), quantiles.as_ref());
            let newcomer = format!("kube-reloader-{n}");
            let moved: Vec<&String> = names
                .iter()
                .filter(|ns| before.owner(ns) != after.owner(ns))
                .collect();
            let share = moved.len() as f64 / names.len() as f64;
            assert!(
                share <= 1.3 / (n + 1) as f64,
                "{kind} {n} -> {}: moved {share:.3}",
                n + 1
            );
            // Most of what moves goes to the newcomer; the rest is the fair-share cap
            // passing a slot on to its next choice (leaving is the same pair read backwards).
            let to_newcomer = moved
                .iter()
                .filter(|ns| after.owner(ns) == Some(&newcomer))
                .count();
            eprintln!(
                "{kind} {n}: moved {share:.3}, to newcomer {to_newcomer}/{}",
                moved.len()
            );
            assert!(to_newcomer as f64 >= 0.75 * moved.len() as f64);
        }
    }
}

#[test]
fn ranges_cover_the_hash_space_once_and_agree_with_owner() {
    let names: Vec<String> = (0..5_000).map(|i| format!("tenant-{i:05}")).collect();
    let m = members(5);
    let table = table_for(&names, &m);
    let mut all: Vec<HashRange> = m.iter().flat_map(|x| table.ranges_of(x)).collect();
    all.sort_unstable_by_key(|r| r.start);
    assert_eq!(all[0].start, 0);
    assert_eq!(all.last().unwrap().end, TOP);
    for pair in all.windows(2) {
        assert_eq!(pair[0].end, u128::from(pair[1].start), "gap or overlap");
    }
    for ns in &names {
        let owner = table.owner(ns).unwrap();
        let h = fnv1a64(ns);
        assert!(table.ranges_of(owner).iter().any(|r| r.contains(h)));
    }
}

#[test]
fn a_selector_fits_the_api_servers_limit_even_for_a_handover_union() {
    // The API server refuses CEL expressions over 100,000 characters.
    let names: Vec<String> = (0..10_000).map(|i| format!("tenant-{i:05}")).collect();
    let q = Quantiles::of(names.iter().map(|n| fnv1a64(n)).collect());
    let three = RangeTable::new(&members(3), q.as_ref());
    let four = RangeTable::new(&members(4), q.as_ref());
    let me = "kube-reloader-0";
    let both = union(&three.ranges_of(me), &four.ranges_of(me));
    let text = selector("object.metadata.namespace", &both).unwrap();
    assert!(text.len() < 100_000, "{} characters", text.len());
    assert!(text.starts_with("shardRange(object.metadata.namespace, '0x"));
}

#[test]
fn the_selector_writes_2_to_the_64_as_seventeen_digits_and_nothing_for_no_ranges() {
    let whole = [HashRange { start: 0, end: TOP }];
    assert_eq!(
        selector("object.metadata.namespace", &whole).unwrap(),
        "shardRange(object.metadata.namespace, '0x0000000000000000', '0x10000000000000000')"
    );
    assert_eq!(selector("object.metadata.namespace", &[]), None);
}

#[test]
fn union_merges_overlapping_and_touching_ranges() {
    let r = |start: u64, end: u128| HashRange { start, end };
    assert_eq!(
        union(&[r(0, 10), r(20, 30)], &[r(10, 15), r(25, 40), r(50, 60)]),
        vec![r(0, 15), r(20, 40), r(50, 60)]
    );
}

#[test]
fn quantiles_are_checked_and_refit_when_the_cluster_doubled_or_halved() {
    assert_eq!(Quantiles::of(Vec::new()), None);
    let q = Quantiles::of((0..5_000u64).map(|i| i * 7).collect()).unwrap();
    assert!(q.is_valid());
    assert!(q.still_fit(2_500) && q.still_fit(10_000));
    assert!(!q.still_fit(2_499) && !q.still_fit(10_001));
    let bad = Quantiles {
        bounds: vec![5, 1],
        namespaces: 2,
    };
    assert!(!bad.is_valid());
}

#[test]
fn a_few_similar_names_are_split_between_members() {
    // 24 names FNV-1a puts in two tight clumps: equal slices of the hash space give them all
    // to one or two members; quantiles cut from them give each its own slot.
    let names: Vec<String> = (0..24).map(|i| format!("shard-pause-6d8b-{i}")).collect();
    let m = members(3);
    let table = table_for(&names, &m);
    for member in &m {
        let owned = names
            .iter()
            .filter(|n| table.owner(n) == Some(member.as_str()))
            .count();
        assert!(owned >= 3, "{member} owns {owned} of 24");
    }
}

proptest::proptest! {
    /// For any members and quantiles: the ring's owner is a member, the same whatever the
    /// members' order, and a hash is in exactly its owner's ranges.
    #[test]
    fn owners_are_members_order_free_and_match_ranges(
        names in proptest::collection::btree_set("[a-z0-9-]{1,20}", 1..6),
        seeds in proptest::collection::vec(proptest::num::u64::ANY, 1024..1100),
        hash in proptest::num::u64::ANY,
    ) {
        let list: Vec<String> = names.iter().cloned().collect();
        let reversed: Vec<String> = list.iter().rev().cloned().collect();
        let q = Quantiles::of(seeds);
        let table = RangeTable::new(&list, q.as_ref());
        let owner = table.owner_of_hash(hash).expect("an owner").to_string();
        proptest::prop_assert!(list.contains(&owner));
        let other = RangeTable::new(&reversed, q.as_ref());
        proptest::prop_assert_eq!(other.owner_of_hash(hash), Some(owner.as_str()));
        for m in &list {
            let inside = table.ranges_of(m).iter().any(|r| r.contains(hash));
            proptest::prop_assert_eq!(inside, *m == owner);
        }
    }
}
