//! Unknown annotation keys under Reloader's names (`reloader.stakater.com/atuo`): the controller
//! reads no such key, so the intent is silently lost. Pure: lint reports what this finds.

use crate::config::AnnotationKeys;

/// An annotation key the controller does not read, and the known key it is nearest to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownKey {
    pub key: String,
    pub nearest: Option<String>,
}

/// The part before `/` (Kubernetes' key prefix); empty for a key without one.
fn prefix(key: &str) -> &str {
    key.split_once('/').map_or("", |(p, _)| p)
}

/// `key` lives under the domain of a known key: the same prefix
/// (`reloader.stakater.com/...`), or a subdomain of one (`typo.reloader.stakater.com/...`,
/// `x.foo.io/...` when `--auto-annotation=foo.io/auto`).
pub fn under_known_domain(key: &str, known: &[&str]) -> bool {
    let p = prefix(key);
    !p.is_empty()
        && known.iter().map(|k| prefix(k)).any(|d| {
            !d.is_empty() && (p == d || p.strip_suffix(d).is_some_and(|rest| rest.ends_with('.')))
        })
}

/// Edits allowed between a key and a known key for it to count as a typo of it: one per eight
/// characters of the known key, between 1 and 3. Proportional, so that `bar.io/auto` is not
/// taken for a typo of an overridden `foo.io/auto`, while the 26 characters of
/// `reloader.stakater.com/auto` allow a transposition plus two slips.
fn max_distance(known: &str) -> usize {
    (known.len() / 8).clamp(1, 3)
}

/// The known key nearest to `key` (Damerau-Levenshtein: a transposition counts as one edit),
/// if it is within [`max_distance`]; on a tie, the first in `known`.
pub fn nearest_key<'a>(key: &str, known: &[&'a str]) -> Option<&'a str> {
    known
        .iter()
        .map(|k| (strsim::damerau_levenshtein(key, k), *k))
        .filter(|(d, k)| *d <= max_distance(k))
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

/// `key` if it is not a key the controller reads or writes and looks like one: under a known
/// key's domain, or a near miss of a known key (a typo in the domain itself).
pub fn unknown_key(key: &str, keys: &AnnotationKeys) -> Option<UnknownKey> {
    let known = keys.all();
    if known.contains(&key) {
        return None;
    }
    let nearest = nearest_key(key, &known);
    (nearest.is_some() || under_known_domain(key, &known)).then(|| UnknownKey {
        key: key.to_string(),
        nearest: nearest.map(String::from),
    })
}

impl UnknownKey {
    /// The finding's text; `place` says where it sits ("" on the metadata).
    pub fn message(&self, place: &str) -> String {
        match &self.nearest {
            Some(n) => format!("unknown annotation {}{place}: did you mean {n}?", self.key),
            None => format!(
                "unknown annotation {}{place}: no key of that name is read (it has no effect)",
                self.key
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Flags;
    use clap::Parser;

    fn keys(args: &[&str]) -> AnnotationKeys {
        let argv = std::iter::once("kube-reloader").chain(args.iter().copied());
        AnnotationKeys::from_flags(&Flags::try_parse_from(argv).unwrap())
    }

    fn nearest(key: &str) -> Option<String> {
        unknown_key(key, &keys(&[])).and_then(|u| u.nearest)
    }

    #[test]
    fn typos_get_the_nearest_known_key() {
        let cases = [
            ("reloader.stakater.com/atuo", "reloader.stakater.com/auto"),
            ("reloader.stakater.com/Auto", "reloader.stakater.com/auto"),
            (
                "reloader.stakater.com/ignor",
                "reloader.stakater.com/ignore",
            ),
            (
                "reloader.stakater.com/serach",
                "reloader.stakater.com/search",
            ),
            (
                "secrets.reloader.stakater.com/reload",
                "secret.reloader.stakater.com/reload",
            ),
            (
                "configmap.reloader.stakater.com/reloads",
                "configmap.reloader.stakater.com/reload",
            ),
            (
                "configmap.exclude.reloader.stakater.com/reload",
                "configmaps.exclude.reloader.stakater.com/reload",
            ),
            (
                "deployment.reloader.stakater.com/pause-periods",
                "deployment.reloader.stakater.com/pause-period",
            ),
            // A typo in the domain itself is still a near miss.
            ("reloader.stakter.com/auto", "reloader.stakater.com/auto"),
        ];
        for (typo, want) in cases {
            assert_eq!(nearest(typo).as_deref(), Some(want), "{typo}");
        }
    }

    #[test]
    fn known_keys_and_foreign_keys_are_not_reported() {
        let k = keys(&[]);
        for key in k.all() {
            assert_eq!(unknown_key(key, &k), None, "{key}");
        }
        for foreign in [
            "deployment.kubernetes.io/revision",
            "kubectl.kubernetes.io/last-applied-configuration",
            "example.com/auto",
            "auto",
            "stakater.com/auto",
        ] {
            assert_eq!(unknown_key(foreign, &k), None, "{foreign}");
        }
    }

    #[test]
    fn far_keys_under_reloader_domains_are_unknown_without_a_suggestion() {
        let k = keys(&[]);
        for key in [
            "reloader.stakater.com/reload-everything",
            "team.reloader.stakater.com/x",
            "configmap.reloader.stakater.com/exclude",
        ] {
            assert_eq!(
                unknown_key(key, &k),
                Some(UnknownKey {
                    key: key.into(),
                    nearest: None
                }),
                "{key}"
            );
        }
    }

    #[test]
    fn overridden_keys_bring_their_domain() {
        let k = keys(&["--auto-annotation=foo.io/auto"]);
        let typo = unknown_key("foo.io/atuo", &k).unwrap();
        assert_eq!(typo.nearest.as_deref(), Some("foo.io/auto"));
        assert_eq!(
            typo.message(""),
            "unknown annotation foo.io/atuo: did you mean foo.io/auto?"
        );
        assert_eq!(
            unknown_key("x.foo.io/whatever", &k).map(|u| u.nearest),
            Some(None)
        );
        assert_eq!(unknown_key("foo.io/auto", &k), None);
        // Not a typo of foo.io/auto: three edits on an 11-character key.
        assert_eq!(unknown_key("bar.io/auto", &k), None);
        // With the override the default auto key is not read: unknown, under the domain the
        // other (default) keys keep, and near none of them.
        let old = unknown_key("reloader.stakater.com/auto", &k).unwrap();
        assert_eq!(old.nearest, None);
    }

    #[test]
    fn domains_match_whole_labels_only() {
        let known = ["reloader.stakater.com/auto"];
        assert!(under_known_domain("reloader.stakater.com/x", &known));
        assert!(under_known_domain("a.reloader.stakater.com/x", &known));
        assert!(!under_known_domain("myreloader.stakater.com/x", &known));
        assert!(!under_known_domain("reloader.stakater.com", &known));
    }
}
