//! Ownership as ranges of the namespace's 64-bit FNV-1a hash, the hash the API server's sharded
//! list and watch compare (`shardRange(object.metadata.namespace, start, end)`, KEP-5866), so a
//! replica's share can be sent to the server as a selector and the same ranges decide on arrival.
//!
//! The hash space is cut into [`QUANTILE_BUCKETS`] slots and each slot goes to a member by
//! rendezvous hashing (blake3 of member and slot, so every replica computes the same table from
//! the same member list), capped at a fair share: shares differ by a few percent, and a joining
//! or leaving member moves little more than its own share.
//!
//! FNV-1a does not spread names that differ in their last characters (`tenant-00001`,
//! `tenant-00002`, ...): its last step multiplies a small difference by a 2^40-sized prime, so
//! such names fall into tight clumps, and equal slices of the raw hash are off by 30-60 % at 4
//! and 16 members. The slots are therefore cut at the hash *quantiles* of the namespaces that
//! exist ([`Quantiles`], published by the leader with the assignment), so each slot holds an
//! equal share of the namespaces, not of the hash space. Without quantiles slots are equal
//! slices of the hash space.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

/// Quantile buckets the leader publishes (a power of two: a position's top bits pick one).
pub const QUANTILE_BUCKETS: usize = 1024;
/// How far above an equal share a member's slots may go.
const SHARE_SLACK_PERCENT: usize = 3;
/// The hash space's end, exclusive: 2^64.
const TOP: u128 = 1 << 64;

/// FNV-1a, 64 bits: what the API server hashes a shard selector's field with.
pub fn fnv1a64(value: &str) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    value
        .bytes()
        .fold(OFFSET, |h, b| (h ^ u64::from(b)).wrapping_mul(PRIME))
}

/// `start <= hash < end`, with `end` up to 2^64.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HashRange {
    pub start: u64,
    pub end: u128,
}

impl HashRange {
    pub fn contains(&self, hash: u64) -> bool {
        self.start <= hash && u128::from(hash) < self.end
    }
}

/// The hash values that split the namespaces seen into [`QUANTILE_BUCKETS`] equal shares:
/// `bounds[b]` starts bucket `b + 1` (bucket 0 starts at 0, the last ends at 2^64).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Quantiles {
    bounds: Vec<u64>,
    /// How many namespaces they were cut from.
    #[serde(default)]
    namespaces: usize,
}

impl Quantiles {
    /// The quantiles of `hashes` (`None` for none). With fewer namespaces than slots, runs of
    /// slots share a bound and all but the last of each run are empty: each namespace then
    /// falls in a slot of its own, which a clump of similar names needs to be split at all.
    pub fn of(mut hashes: Vec<u64>) -> Option<Self> {
        if hashes.is_empty() {
            return None;
        }
        hashes.sort_unstable();
        let n = hashes.len();
        let bounds = (1..QUANTILE_BUCKETS)
            .map(|b| hashes[b * n / QUANTILE_BUCKETS])
            .collect();
        Some(Self {
            bounds,
            namespaces: n,
        })
    }

    /// Whether these still describe a cluster of `namespaces`: cut from at least half and at
    /// most twice as many (past that, new quantiles are worth the namespaces they move).
    pub fn still_fit(&self, namespaces: usize) -> bool {
        self.namespaces * 2 >= namespaces && namespaces * 2 >= self.namespaces
    }

    /// Published quantiles are used only when well formed (sorted, the right count).
    pub fn is_valid(&self) -> bool {
        self.bounds.len() == QUANTILE_BUCKETS - 1 && self.bounds.is_sorted()
    }

    fn bound(&self, bucket: usize) -> u128 {
        match bucket {
            0 => 0,
            b if b >= QUANTILE_BUCKETS => TOP,
            b => u128::from(self.bounds[b - 1]),
        }
    }

    /// Equal slices of the hash space: what a slot is without published quantiles.
    fn uniform() -> Self {
        let width = TOP / QUANTILE_BUCKETS as u128;
        let bounds = (1..QUANTILE_BUCKETS as u128)
            .map(|b| (b * width) as u64)
            .collect();
        Self {
            bounds,
            namespaces: 0,
        }
    }
}

fn weight(member: &str, slot: usize) -> u64 {
    let mut h = blake3::Hasher::new();
    h.update(member.as_bytes());
    h.update(&[0]);
    h.update(&(slot as u64).to_le_bytes());
    u64::from_le_bytes(h.finalize().as_bytes()[..8].try_into().expect("8 bytes"))
}

/// Who owns which hash range, for one member list and one set of quantiles.
#[derive(Debug, Clone)]
pub struct RangeTable {
    /// Sorted range starts, the first at 0; each range runs to the next start (the last to 2^64).
    starts: Vec<u64>,
    /// `owners[i]` indexes `members` for the range starting at `starts[i]`.
    owners: Vec<usize>,
    members: Vec<String>,
}

impl RangeTable {
    pub fn new(members: &[String], quantiles: Option<&Quantiles>) -> Self {
        let mut table = Self {
            starts: Vec::new(),
            owners: Vec::new(),
            members: members.to_vec(),
        };
        if members.is_empty() {
            return table;
        }
        let uniform = Quantiles::uniform();
        let quantiles = quantiles.unwrap_or(&uniform);
        for (slot, member) in slot_owners(members).into_iter().enumerate() {
            table.push(quantiles.bound(slot) as u64, member);
        }
        table
    }

    fn push(&mut self, start: u64, member: usize) {
        if self.owners.last() == Some(&member) {
            return;
        }
        if self.starts.last() == Some(&start) {
            // An empty range (two starts mapped to one hash): the later start wins.
            self.owners.pop();
            self.starts.pop();
            return self.push(start, member);
        }
        self.starts.push(start);
        self.owners.push(member);
    }

    /// The member owning `hash` (`None` without members).
    pub fn owner_of_hash(&self, hash: u64) -> Option<&str> {
        let i = self.starts.partition_point(|&s| s <= hash).checked_sub(1)?;
        Some(self.members[self.owners[i]].as_str())
    }

    pub fn owner(&self, namespace: &str) -> Option<&str> {
        self.owner_of_hash(fnv1a64(namespace))
    }

    /// The ranges `member` owns, sorted.
    pub fn ranges_of(&self, member: &str) -> Vec<HashRange> {
        (0..self.starts.len())
            .filter(|&i| self.members[self.owners[i]] == member)
            .map(|i| HashRange {
                start: self.starts[i],
                end: self.starts.get(i + 1).map_or(TOP, |&s| u128::from(s)),
            })
            .collect()
    }
}

/// The member (an index into `members`) of each slot: every slot goes to the first member of
/// its rendezvous ranking that holds fewer than its fair share (plus [`SHARE_SLACK_PERCENT`]),
/// so shares stay within that of each other, and a joining or leaving member moves little more
/// than its own share (the slack keeps a smaller cap from passing many slots on).
fn slot_owners(members: &[String]) -> Vec<usize> {
    let capacity = (QUANTILE_BUCKETS * (100 + SHARE_SLACK_PERCENT)).div_ceil(100 * members.len());
    let mut load = vec![0usize; members.len()];
    (0..QUANTILE_BUCKETS)
        .map(|slot| {
            let mut ranking: Vec<(u64, usize)> = members
                .iter()
                .enumerate()
                .map(|(m, name)| (weight(name, slot), m))
                .collect();
            ranking.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(members[a.1].cmp(&members[b.1])));
            let (_, m) = *ranking
                .iter()
                .find(|(_, m)| load[*m] < capacity)
                .expect("capacity times members covers every slot");
            load[m] += 1;
            m
        })
        .collect()
}

/// The union of `a` and `b` (each sorted), with overlapping and touching ranges merged.
pub fn union(a: &[HashRange], b: &[HashRange]) -> Vec<HashRange> {
    let mut all: Vec<HashRange> = a.iter().chain(b).copied().collect();
    all.sort_unstable_by_key(|r| r.start);
    let mut merged: Vec<HashRange> = Vec::with_capacity(all.len());
    for r in all {
        match merged.last_mut() {
            Some(last) if u128::from(r.start) <= last.end => last.end = last.end.max(r.end),
            _ => merged.push(r),
        }
    }
    merged
}

/// The shard selector the API server takes for `ranges` of `field`
/// (`None` for no ranges: such a replica selects nothing and must not ask for everything).
pub fn selector(field: &str, ranges: &[HashRange]) -> Option<String> {
    if ranges.is_empty() {
        return None;
    }
    let mut out = String::with_capacity(ranges.len() * 90);
    for (i, r) in ranges.iter().enumerate() {
        if i > 0 {
            out.push_str(" || ");
        }
        let _ = write!(
            out,
            "shardRange({field}, '0x{:016x}', '0x{:016x}')",
            r.start, r.end
        );
    }
    Some(out)
}

#[cfg(test)]
mod tests;
