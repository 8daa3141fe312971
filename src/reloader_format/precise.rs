//! The key-precise value (`--precise-keys`): this project's own variant of the hash, for a
//! workload that reads only some keys of a config. It covers only those keys, so a change to
//! another key leaves it as it was and rolls nothing. Never written with the mode off.
//!
//! Recipe (stable; docs/precise-reloads.md): for each counted key, in byte order of the key
//! names, the entry `<key>=<hex of the first 16 bytes of blake3(value)>` (or `<key>` alone when
//! the config has no such key); entries joined with `;`; the SHA-1 of that, lower-case hex. It
//! has the shape of Reloader's value but never its bytes for the same content, so a recorded
//! value says which form wrote it only through [`crate::index::ConfigState::is_current`].
//!
//! Only per-key digests are kept, never a value: 24 bytes a key.

use std::fmt;
use std::sync::Arc;

use sha1::Digest as _;

use super::hash::{ConfigPayload, hex};

/// The digest of one key of a config.
#[derive(Clone, Copy, PartialEq, Eq)]
struct KeyDigest {
    /// The first 8 bytes of blake3(key name): the lookup key.
    name: u64,
    /// The first 16 bytes of blake3(value).
    value: [u8; 16],
}

/// Per-key digests of one config, sorted by name digest. Empty (`None`) when the mode is off or
/// the config has no keys to count (a SecretProviderClass). A thin pointer (`Arc<Vec>`, not
/// `Arc<[_]>`): every config's state holds one, most of them empty.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct KeyDigests(Option<Arc<Vec<KeyDigest>>>);

impl fmt::Debug for KeyDigests {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "KeyDigests({} keys)", self.len())
    }
}

fn name_digest(key: &str) -> u64 {
    let hash = blake3::hash(key.as_bytes());
    u64::from_le_bytes(hash.as_bytes()[..8].try_into().expect("8 bytes"))
}

fn value_digest(value: &[u8]) -> [u8; 16] {
    super::hash::truncated(blake3::hash(value).as_bytes())
}

impl KeyDigests {
    /// Digests of `(key, value)` entries; the values are read once and not kept.
    pub fn of<'a>(entries: impl IntoIterator<Item = (&'a str, &'a [u8])>) -> Self {
        let mut digests: Vec<KeyDigest> = entries
            .into_iter()
            .map(|(k, v)| KeyDigest {
                name: name_digest(k),
                value: value_digest(v),
            })
            .collect();
        digests.sort_unstable_by_key(|d| d.name);
        Self(Some(Arc::new(digests)))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_none()
    }

    pub fn len(&self) -> usize {
        self.0.as_ref().map_or(0, |d| d.len())
    }

    fn value_of(&self, key: &str) -> Option<&[u8; 16]> {
        let digests = self.0.as_ref()?;
        let name = name_digest(key);
        let i = digests.binary_search_by_key(&name, |d| d.name).ok()?;
        Some(&digests[i].value)
    }

    /// The key-precise value over `counted` (see the module docs); `None` when no per-key
    /// digests are known, and the whole config's value applies.
    pub fn precise_value(&self, counted: &[Box<str>]) -> Option<String> {
        self.0.as_ref()?;
        let mut names: Vec<&str> = counted.iter().map(|k| &**k).collect();
        names.sort_unstable();
        names.dedup();
        let mut sha1 = sha1::Sha1::new();
        for (i, name) in names.iter().enumerate() {
            if i > 0 {
                sha1.update(b";");
            }
            sha1.update(name.as_bytes());
            if let Some(value) = self.value_of(name) {
                sha1.update(b"=");
                sha1.update(hex(value).as_bytes());
            }
        }
        Some(hex(&sha1.finalize()))
    }
}

/// Per-key digests of a payload, for key-precise values (none for a SecretProviderClass: its
/// objects are counted whole).
pub fn key_digests(payload: &ConfigPayload) -> KeyDigests {
    match payload {
        ConfigPayload::ConfigMap { data, binary_data } => KeyDigests::of(
            data.iter()
                .map(|(k, v)| (k.as_str(), v.as_bytes()))
                .chain(binary_data.iter().map(|(k, v)| (k.as_str(), v.as_slice()))),
        ),
        ConfigPayload::Secret { data } => {
            KeyDigests::of(data.iter().map(|(k, v)| (k.as_str(), v.as_slice())))
        }
        ConfigPayload::SecretProviderClass { .. } => KeyDigests::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn digests(entries: &[(&str, &str)]) -> KeyDigests {
        KeyDigests::of(entries.iter().map(|(k, v)| (*k, v.as_bytes())))
    }

    fn counted(keys: &[&str]) -> Vec<Box<str>> {
        keys.iter().map(|k| Box::from(*k)).collect()
    }

    // Literals, not computed by the code under test: changing the recipe would roll every
    // workload that ever had a key-precise value written. blake3("") is the official test
    // vector af1349b9f5f9a1a6a0404dea36dcc949...; the SHA-1s from `printf %s '<entries>' | sha1sum`.
    #[test]
    fn the_recipe_is_pinned() {
        let d = digests(&[("a", ""), ("c", "x")]);
        assert_eq!(
            d.precise_value(&counted(&["a"])).unwrap(),
            "e9eb49bbb1f61a7a66de306c626d64c13ebf2c80" // a=af1349b9f5f9a1a6a0404dea36dcc949
        );
        assert_eq!(
            d.precise_value(&counted(&["b", "a"])).unwrap(),
            "58cddb66f367d5808eff01303883ed032d30594b" // a=af1349b9f5f9a1a6a0404dea36dcc949;b
        );
        assert_eq!(
            d.precise_value(&counted(&["b"])).unwrap(),
            "e9d71f5ee7c92d6dc9e92ffdad17b8bd49418f98" // b
        );
    }

    #[test]
    fn only_the_counted_keys_matter() {
        let before = digests(&[("a", "1"), ("b", "2")]);
        let b_changed = digests(&[("a", "1"), ("b", "3")]);
        let a_changed = digests(&[("a", "9"), ("b", "2")]);
        let a = counted(&["a"]);
        assert_eq!(before.precise_value(&a), b_changed.precise_value(&a));
        assert_ne!(before.precise_value(&a), a_changed.precise_value(&a));
        let both = counted(&["b", "a", "a"]);
        assert_ne!(before.precise_value(&both), b_changed.precise_value(&both));
        assert_eq!(
            before.precise_value(&both),
            before.precise_value(&counted(&["a", "b"]))
        );
    }

    #[test]
    fn a_missing_key_differs_from_an_empty_one() {
        let empty = digests(&[("a", "")]);
        let missing = digests(&[("other", "x")]);
        let a = counted(&["a"]);
        assert_ne!(empty.precise_value(&a), missing.precise_value(&a));
        assert_eq!(
            missing.precise_value(&a),
            digests(&[]).precise_value(&a),
            "absent is absent, whatever else the config holds"
        );
    }

    #[test]
    fn no_digests_means_no_precise_value() {
        assert_eq!(KeyDigests::default().precise_value(&counted(&["a"])), None);
        assert!(KeyDigests::default().is_empty());
        assert_eq!(
            format!("{:?}", digests(&[("k", "secret")])),
            "KeyDigests(1 keys)"
        );
    }
}
