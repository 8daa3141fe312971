//! The hash recipes. The SHA-1 recipes must stay bit-identical to stakater/Reloader's, or
//! migrating to kube-reloader would restart every workload of a cluster; fixed vectors pin them.

use std::collections::BTreeMap;
use std::fmt;

use base64::Engine;
use sha1::Digest as _;

/// Reloader writes the hash of this marker when a config is deleted (annotations strategy).
pub const DELETE_MARKER: &str = "__RELOADER_EMPTY_DELETE_MARKER__";

/// A config's payload, moved in for hashing and dropped right after.
pub enum ConfigPayload {
    ConfigMap {
        data: BTreeMap<String, String>,
        binary_data: BTreeMap<String, Vec<u8>>,
    },
    Secret {
        data: BTreeMap<String, Vec<u8>>,
    },
    /// `SecretProviderClassPodStatus`: the mounted object versions of one SecretProviderClass.
    SecretProviderClass {
        class_name: String,
        objects: Vec<(String, String)>,
    },
}

impl ConfigPayload {
    /// The payload of a `SecretProviderClassPodStatus`'s `status`: the `(id, version)` of each
    /// mounted object (entries without both are skipped, as the CSI driver never writes them).
    pub fn secret_provider_class(class_name: String, status: &serde_json::Value) -> Self {
        let objects = status
            .get("objects")
            .and_then(serde_json::Value::as_array)
            .map(|objs| {
                objs.iter()
                    .filter_map(|o| {
                        let field = |name: &str| Some(o.get(name)?.as_str()?.to_string());
                        Some((field("id")?, field("version")?))
                    })
                    .collect()
            })
            .unwrap_or_default();
        ConfigPayload::SecretProviderClass {
            class_name,
            objects,
        }
    }
}

impl ConfigPayload {
    /// The bytes of its keys and values (what it holds in memory, less the maps' overhead).
    pub fn bytes(&self) -> usize {
        match self {
            ConfigPayload::ConfigMap { data, binary_data } => {
                pairs_bytes(data, String::len) + pairs_bytes(binary_data, Vec::len)
            }
            ConfigPayload::Secret { data } => pairs_bytes(data, Vec::len),
            ConfigPayload::SecretProviderClass {
                class_name,
                objects,
            } => class_name.len() + pairs_bytes(objects.iter().map(|(i, v)| (i, v)), String::len),
        }
    }
}

/// Bytes of the keys and values of key-value pairs, each value measured by `len`: what a
/// payload holds, counted the same way before the object becomes one
/// (`ConfigSource::payload_bytes`) and after.
pub fn pairs_bytes<'a, V: 'a>(
    pairs: impl IntoIterator<Item = (&'a String, &'a V)>,
    len: impl Fn(&V) -> usize,
) -> usize {
    pairs.into_iter().map(|(k, v)| k.len() + len(v)).sum()
}

// Hand-written so that a payload can never reach a log line through `{:?}`.
impl fmt::Debug for ConfigPayload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (kind, entries) = match self {
            ConfigPayload::ConfigMap { data, binary_data } => {
                ("ConfigMap", data.len() + binary_data.len())
            }
            ConfigPayload::Secret { data } => ("Secret", data.len()),
            ConfigPayload::SecretProviderClass { objects, .. } => {
                ("SecretProviderClass", objects.len())
            }
        };
        write!(f, "ConfigPayload::{kind}({entries} entries, redacted)")
    }
}

/// What the controller remembers of a config's content.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Digest {
    /// Change detector: the first 128 bits of blake3 over the same canonical bytes as the
    /// SHA-1. It only tells one version of a config from the next, where 128 bits leave a
    /// change unnoticed with a chance of 2^-128; the 16 bytes saved per config are 3 MiB of
    /// the index at 200,000 configs.
    pub blake3: [u8; 16],
    /// The Reloader hash (SHA-1), the value written into workloads.
    pub sha1: [u8; 20],
}

impl Digest {
    pub fn reloader_hash(&self) -> String {
        hex(&self.sha1)
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Digest(sha1={})", self.reloader_hash())
    }
}

/// The first 16 bytes of a blake3 hash.
pub(crate) fn truncated(hash: &[u8; 32]) -> [u8; 16] {
    hash[..16].try_into().expect("16 of 32 bytes")
}

/// Lowercase hex, as Go's `%x` prints bytes.
pub(super) fn hex(bytes: &[u8]) -> String {
    use fmt::Write;
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(out, "{b:02x}");
    }
    out
}

/// Both hashers fed with the same canonical stream, so the payload is walked once and never
/// copied into one joined string (a 1 MiB Secret stays 1 MiB in memory, not 2).
struct DualHasher {
    blake3: blake3::Hasher,
    sha1: sha1::Sha1,
}

impl DualHasher {
    fn new() -> Self {
        Self {
            blake3: blake3::Hasher::new(),
            sha1: sha1::Sha1::new(),
        }
    }

    fn update(&mut self, bytes: &[u8]) {
        self.blake3.update(bytes);
        self.sha1.update(bytes);
    }

    fn finish(self) -> Digest {
        let sha1: [u8; 20] = self.sha1.finalize().into();
        Digest {
            blake3: truncated(self.blake3.finalize().as_bytes()),
            sha1,
        }
    }
}

/// Reloader's recipe: entries `key=value`, sorted as byte strings, joined with `;`.
fn hash_sorted_entries(mut entries: Vec<(Vec<u8>, &[u8])>) -> Digest {
    // Sorting (prefix, value) pairs by their concatenation: compare the joined bytes lazily.
    entries.sort_by(|a, b| a.0.iter().chain(a.1).cmp(b.0.iter().chain(b.1)));
    let mut hasher = DualHasher::new();
    for (i, (prefix, value)) in entries.iter().enumerate() {
        if i > 0 {
            hasher.update(b";");
        }
        hasher.update(prefix);
        hasher.update(value);
    }
    hasher.finish()
}

fn prefix(key: &str) -> Vec<u8> {
    let mut p = Vec::with_capacity(key.len() + 1);
    p.extend_from_slice(key.as_bytes());
    p.push(b'=');
    p
}

/// Digest of a payload, consuming it.
pub fn digest_payload(payload: ConfigPayload) -> Digest {
    match payload {
        ConfigPayload::ConfigMap { data, binary_data } => {
            let encoded: Vec<(String, String)> = binary_data
                .iter()
                .map(|(k, v)| {
                    (
                        k.clone(),
                        base64::engine::general_purpose::STANDARD.encode(v),
                    )
                })
                .collect();
            let entries = data
                .iter()
                .map(|(k, v)| (prefix(k), v.as_bytes()))
                .chain(encoded.iter().map(|(k, v)| (prefix(k), v.as_bytes())))
                .collect();
            hash_sorted_entries(entries)
        }
        ConfigPayload::Secret { data } => {
            let entries = data
                .iter()
                .map(|(k, v)| (prefix(k), v.as_slice()))
                .collect();
            hash_sorted_entries(entries)
        }
        ConfigPayload::SecretProviderClass {
            class_name,
            objects,
        } => {
            let entries = objects
                .iter()
                .map(|(id, version)| (prefix(id), version.as_bytes()))
                .chain(std::iter::once((
                    prefix("SecretProviderClassName"),
                    class_name.as_bytes(),
                )))
                .collect();
            hash_sorted_entries(entries)
        }
    }
}

/// SHA-1 of a plain string, lower-case hex (used for the delete marker).
pub fn reloader_sha1_hex(text: &str) -> String {
    hex(&sha1::Sha1::digest(text.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pod_status_payload_keeps_objects_with_id_and_version_in_order() {
        let status = serde_json::json!({"objects": [
            {"id": "secret/a", "version": "2"},
            {"id": "secret/no-version"},
            {"id": "secret/b", "version": "7"},
        ]});
        let ConfigPayload::SecretProviderClass {
            class_name,
            objects,
        } = ConfigPayload::secret_provider_class("spc".into(), &status)
        else {
            panic!("not an SPC payload");
        };
        assert_eq!(class_name, "spc");
        assert_eq!(
            objects,
            [
                ("secret/a".into(), "2".into()),
                ("secret/b".into(), "7".into())
            ]
        );
        let empty = ConfigPayload::secret_provider_class("spc".into(), &serde_json::json!({}));
        assert!(
            matches!(empty, ConfigPayload::SecretProviderClass { objects, .. } if objects.is_empty())
        );
    }

    fn cm(data: &[(&str, &str)], binary: &[(&str, &[u8])]) -> ConfigPayload {
        ConfigPayload::ConfigMap {
            data: data
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            binary_data: binary
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_vec()))
                .collect(),
        }
    }

    #[test]
    fn empty_payload_is_sha1_of_empty_string() {
        let d = digest_payload(cm(&[], &[]));
        assert_eq!(
            d.reloader_hash(),
            "da39a3ee5e6b4b0d3255bfef95601890afd80709"
        );
        let s = digest_payload(ConfigPayload::Secret {
            data: BTreeMap::new(),
        });
        assert_eq!(
            s.reloader_hash(),
            "da39a3ee5e6b4b0d3255bfef95601890afd80709"
        );
    }

    // The expected hashes are literals (from `printf %s '<string>' | sha1sum`), not computed by
    // the code under test: changing the recipe would roll every workload Reloader ever annotated.
    #[test]
    fn configmap_recipe_sorts_and_joins_entries() {
        let d = digest_payload(cm(&[("b", "2"), ("a", "1")], &[]));
        assert_eq!(
            d.reloader_hash(),
            "f83e99e324ba68ccc373a58ef1eb42f8ab88646a"
        ); // sha1("a=1;b=2")
        assert_eq!(
            digest_payload(cm(&[("url", "https://example.com")], &[])).reloader_hash(),
            "36a960f672675355b30e2427a8985af796a627fd" // sha1("url=https://example.com")
        );
    }

    #[test]
    fn configmap_binary_data_is_base64_standard() {
        let d = digest_payload(cm(&[("a", "1")], &[("bin", &[0xff, 0x00, 0x10])]));
        assert_eq!(
            d.reloader_hash(),
            "6bb34427b980bfb994a564b93ed22b9dcef9903a"
        ); // sha1("a=1;bin=/wAQ")
    }

    #[test]
    fn sort_is_over_whole_entries_not_keys() {
        // "a=2" < "a.b=1" is false ('=' 0x3d > '.' 0x2e): the joined strings decide.
        let d = digest_payload(cm(&[("a", "2"), ("a.b", "1")], &[]));
        assert_eq!(
            d.reloader_hash(),
            "c87c4639e58c2507a118aa2de293217855efefa9"
        ); // sha1("a.b=1;a=2")
    }

    #[test]
    fn secret_recipe_uses_raw_bytes() {
        let mut data = BTreeMap::new();
        data.insert("password".to_string(), b"hunter2".to_vec());
        data.insert("user".to_string(), b"admin".to_vec());
        let d = digest_payload(ConfigPayload::Secret { data });
        assert_eq!(
            d.reloader_hash(),
            "40a4a8b97a438eafc2e54768f96e1d4895cf4a0c"
        ); // sha1("password=hunter2;user=admin")
    }

    #[test]
    fn spc_recipe_includes_class_name() {
        let d = digest_payload(ConfigPayload::SecretProviderClass {
            class_name: "vault".into(),
            objects: vec![("secret/pw".into(), "v2".into())],
        });
        assert_eq!(
            d.reloader_hash(),
            "1205f6e96060ae81090d4ad664f0c962a42a377c" // sha1("SecretProviderClassName=vault;secret/pw=v2")
        );
    }

    #[test]
    fn blake3_changes_with_content() {
        let a = digest_payload(cm(&[("k", "v1")], &[]));
        let b = digest_payload(cm(&[("k", "v2")], &[]));
        assert_ne!(a.blake3, b.blake3);
        assert_eq!(a, digest_payload(cm(&[("k", "v1")], &[])));
    }

    #[test]
    fn debug_output_never_shows_secret_bytes() {
        let mut data = BTreeMap::new();
        data.insert("token".to_string(), b"s3cr3t-value".to_vec());
        let payload = ConfigPayload::Secret { data };
        let shown = format!("{payload:?}");
        assert!(!shown.contains("s3cr3t"), "{shown}");
        assert!(!shown.contains("token"), "{shown}");
        let digest = digest_payload(payload);
        assert!(!format!("{digest:?}").contains("s3cr3t"));
    }

    #[test]
    fn delete_marker_hash_is_stable() {
        assert_eq!(
            reloader_sha1_hex(DELETE_MARKER),
            "aae45badef99284e4dae01d6046154ea9d99532f" // sha1("__RELOADER_EMPTY_DELETE_MARKER__")
        );
    }
}
