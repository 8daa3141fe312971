//! The published shard assignment: a generation, the live members and how owners follow from
//! them. Owners are computed, not listed: the assignment's size does not grow with the number of
//! namespaces (rendezvous: the members; hash ranges: the members and 1,023 quantiles, ~20 KB).

use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

use super::ranges::{HashRange, Quantiles, RangeTable};
use super::ring;

/// How owners follow from the members. Every replica of a generation must use the same one, so
/// the leader picks it and publishes it: ranges only when every member says it computes them
/// (a replica of an older release reads an assignment without the field as rendezvous).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scheme {
    /// Highest blake3 weight of member and namespace ([`ring`]).
    #[default]
    Rendezvous,
    /// Ranges of the namespace's FNV-1a hash ([`super::ranges`]): what the API server's sharded
    /// list and watch can select.
    HashRanges,
}

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Assignment {
    /// Increases with every change; replicas ignore older generations.
    pub generation: u64,
    /// Sorted member identities (POD_NAME).
    pub members: Vec<String>,
    #[serde(default)]
    pub scheme: Scheme,
    /// The namespaces' hash quantiles the leader saw (hash ranges only): slots hold equal
    /// shares of the namespaces that exist, not of the hash space.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quantiles: Option<Quantiles>,
    /// Built on first use from the fields above, which never change after.
    #[serde(skip)]
    pub(super) table: OnceLock<RangeTable>,
}

impl PartialEq for Assignment {
    fn eq(&self, other: &Self) -> bool {
        self.generation == other.generation
            && self.members == other.members
            && self.scheme == other.scheme
            && self.quantiles == other.quantiles
    }
}

impl Eq for Assignment {}

impl Clone for Assignment {
    fn clone(&self) -> Self {
        Self {
            generation: self.generation,
            members: self.members.clone(),
            scheme: self.scheme,
            quantiles: self.quantiles.clone(),
            table: OnceLock::new(),
        }
    }
}

impl Assignment {
    /// Generation `generation` of `members`, with the default scheme and no quantiles.
    pub fn of_members(generation: u64, members: &[&str]) -> Self {
        Self {
            generation,
            members: members.iter().map(|m| m.to_string()).collect(),
            ..Default::default()
        }
    }

    pub fn owner(&self, namespace: &str) -> Option<&str> {
        match self.scheme {
            Scheme::Rendezvous => ring::owner(namespace, &self.members),
            Scheme::HashRanges => self.table().owner(namespace),
        }
    }

    /// The hash ranges `member` owns (`None` under rendezvous, which has no ranges).
    pub fn ranges_of(&self, member: &str) -> Option<Vec<HashRange>> {
        (self.scheme == Scheme::HashRanges).then(|| self.table().ranges_of(member))
    }

    fn table(&self) -> &RangeTable {
        self.table.get_or_init(|| {
            let quantiles = self.quantiles.as_ref().filter(|q| q.is_valid());
            RangeTable::new(&self.members, quantiles)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shard::ranges::fnv1a64;

    fn members() -> Vec<String> {
        vec!["a".into(), "b".into(), "c".into()]
    }

    #[test]
    fn an_assignment_of_an_older_release_reads_as_rendezvous() {
        let old: Assignment =
            serde_json::from_str(r#"{"generation": 4, "members": ["a", "b", "c"]}"#).unwrap();
        assert_eq!(old.scheme, Scheme::Rendezvous);
        assert_eq!(old.owner("tenant-1"), ring::owner("tenant-1", &members()));
        assert_eq!(old.ranges_of("a"), None);
    }

    #[test]
    fn hash_ranges_round_trip_with_their_quantiles_and_own_by_the_table() {
        let names: Vec<String> = (0..2_000).map(|i| format!("tenant-{i:05}")).collect();
        let published = Assignment {
            generation: 5,
            members: members(),
            scheme: Scheme::HashRanges,
            quantiles: Quantiles::of(names.iter().map(|n| fnv1a64(n)).collect()),
            ..Default::default()
        };
        let text = serde_json::to_string(&published).unwrap();
        assert!(text.contains(r#""scheme":"hash-ranges""#), "{text}");
        let read: Assignment = serde_json::from_str(&text).unwrap();
        assert_eq!(read, published);
        let table = RangeTable::new(&members(), published.quantiles.as_ref());
        for ns in &names {
            assert_eq!(read.owner(ns), table.owner(ns));
        }
        let mine = read.ranges_of("a").unwrap();
        assert!(
            names
                .iter()
                .filter(|n| read.owner(n) == Some("a"))
                .all(|n| mine.iter().any(|r| r.contains(fnv1a64(n))))
        );
    }
}
