//! Reloader's hash recipe and env var naming, written independently of the controller so the load
//! test checks the controller instead of trusting it.

use sha1::{Digest, Sha1};

/// Reloader's SHA-1: `key=value` strings (Secret values decoded, ConfigMap binaryData base64),
/// sorted as byte strings, joined with `;`, lower-case hex.
pub fn reloader_sha1(entries: &[(&str, &[u8])]) -> String {
    let mut items: Vec<Vec<u8>> = entries
        .iter()
        .map(|(k, v)| {
            let mut s = Vec::with_capacity(k.len() + 1 + v.len());
            s.extend_from_slice(k.as_bytes());
            s.push(b'=');
            s.extend_from_slice(v);
            s
        })
        .collect();
    items.sort();
    let mut hasher = Sha1::new();
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            hasher.update(b";");
        }
        hasher.update(item);
    }
    hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Reloader's `ConvertToEnvVarName`: upper-case, keep `[A-Z0-9]`, one `_` for each run of other
/// bytes that follows a kept byte.
pub fn env_var_fragment(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut last_kept = false;
    for b in name.bytes() {
        let up = b.to_ascii_uppercase();
        if up.is_ascii_uppercase() || up.is_ascii_digit() {
            out.push(up as char);
            last_kept = true;
        } else {
            if last_kept {
                out.push('_');
            }
            last_kept = false;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_is_sha1_of_nothing() {
        assert_eq!(
            reloader_sha1(&[]),
            "da39a3ee5e6b4b0d3255bfef95601890afd80709"
        );
    }

    #[test]
    fn entries_are_sorted_and_joined() {
        // sha1("a=1;b=2")
        let h = reloader_sha1(&[("b", b"2"), ("a", b"1")]);
        assert_eq!(h, reloader_sha1(&[("a", b"1"), ("b", b"2")]));
        let mut s = Sha1::new();
        s.update(b"a=1;b=2");
        let want: String = s.finalize().iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(h, want);
    }

    #[test]
    fn env_names() {
        assert_eq!(env_var_fragment("my-app.config"), "MY_APP_CONFIG");
        assert_eq!(env_var_fragment("--a..b--"), "A_B_");
    }
}
