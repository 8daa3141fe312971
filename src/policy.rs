//! A workload's reload policy, parsed once from its annotations when the workload is indexed,
//! so that a config event only evaluates plain data. Pure: no Kubernetes I/O.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use regex::Regex;

use crate::config::AnnotationKeys;
use crate::model::ConfigKind;

/// A tri-state bool annotation, as Reloader reads it: absent or empty is `Unset` (lets
/// `--auto-reload-all` apply); anything `ParseBool` rejects counts as `False`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Toggle {
    #[default]
    Unset,
    True,
    False,
}

impl Toggle {
    pub fn parse(value: Option<&str>) -> Toggle {
        match value {
            None | Some("") => Toggle::Unset,
            Some(v) => match crate::config::parse_go_bool(v) {
                Ok(true) => Toggle::True,
                _ => Toggle::False,
            },
        }
    }
}

/// One entry of a reload list: a literal name (indexed exactly) or an anchored regex.
#[derive(Debug, Clone)]
pub enum NamePattern {
    Literal(Arc<str>),
    Regex(Arc<Regex>),
}

impl NamePattern {
    pub fn matches(&self, name: &str) -> bool {
        match self {
            NamePattern::Literal(l) => &**l == name,
            NamePattern::Regex(r) => r.is_match(name),
        }
    }
}

/// Entries made only of these characters mean the same as a regex and as a literal, so they are
/// indexed by name instead of being tested against every config ('.' is a regex wildcard).
fn is_literal_name(entry: &str) -> bool {
    entry
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

/// Something wrong in a workload's annotations, reported once per distinct value.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum PolicyProblem {
    InvalidPattern {
        annotation: String,
        entry: String,
        error: String,
    },
    InvalidPausePeriod {
        value: String,
        error: String,
    },
    UnknownRolloutStrategy {
        value: String,
    },
}

impl std::fmt::Display for PolicyProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PolicyProblem::InvalidPattern {
                annotation,
                entry,
                error,
            } => write!(
                f,
                "annotation {annotation}: entry '{entry}' is not a valid regular expression and is skipped: {error}"
            ),
            PolicyProblem::InvalidPausePeriod { value, error } => {
                write!(
                    f,
                    "pause period '{value}' is not a duration and is ignored: {error}"
                )
            }
            PolicyProblem::UnknownRolloutStrategy { value } => write!(
                f,
                "rollout strategy '{value}' is unknown (rollout or restart); using rollout"
            ),
        }
    }
}

/// Parses a reload list: split on `,`, trim, each entry anchored `^entry$`. Invalid entries are
/// skipped and reported; the others still apply.
pub fn parse_name_list(
    annotation: &str,
    value: &str,
    problems: &mut Vec<PolicyProblem>,
) -> Vec<NamePattern> {
    let mut out = Vec::new();
    for entry in value.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        if is_literal_name(entry) {
            out.push(NamePattern::Literal(Arc::from(entry)));
            continue;
        }
        match Regex::new(&format!("^(?:{entry})$")) {
            Ok(re) => out.push(NamePattern::Regex(Arc::new(re))),
            Err(e) => problems.push(PolicyProblem::InvalidPattern {
                annotation: annotation.to_string(),
                entry: entry.to_string(),
                error: e
                    .to_string()
                    .lines()
                    .last()
                    .unwrap_or_default()
                    .trim()
                    .to_string(),
            }),
        }
    }
    out
}

/// The four annotations that are read per config type, from the workload's metadata or, when
/// none of the four is there, from its pod template (Reloader's fallback).
#[derive(Debug, Clone, Default)]
pub struct TypePolicy {
    pub auto: Toggle,
    pub typed_auto: Toggle,
    pub search: bool,
    pub explicit: Vec<NamePattern>,
}

/// How an Argo Rollout is reloaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum RolloutStrategy {
    /// Change the pod template (a normal rollout).
    #[default]
    Rollout,
    /// Set `spec.restartAt`: pods restart, the template (and GitOps drift) is untouched.
    Restart,
}

/// A policy without lists, as a key of the shared ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct SimplePolicy {
    switches: [(Toggle, Toggle, bool); 3],
    rollout_strategy: RolloutStrategy,
    pause_period: Option<Duration>,
}

/// Everything a workload's annotations say about reloading it.
#[derive(Debug, Clone, Default)]
pub struct ReloadPolicy {
    pub by_type: [TypePolicy; 3],
    /// Exclude lists, exact names, read from metadata only.
    pub excludes: [Vec<Arc<str>>; 3],
    pub rollout_strategy: RolloutStrategy,
    pub pause_period: Option<Duration>,
    pub problems: Vec<PolicyProblem>,
}

pub fn type_index(kind: ConfigKind) -> usize {
    match kind {
        ConfigKind::ConfigMap => 0,
        ConfigKind::Secret => 1,
        ConfigKind::SecretProviderClass => 2,
    }
}

impl ReloadPolicy {
    pub fn for_type(&self, kind: ConfigKind) -> &TypePolicy {
        &self.by_type[type_index(kind)]
    }

    pub fn excludes(&self, kind: ConfigKind, name: &str) -> bool {
        self.excludes[type_index(kind)].iter().any(|e| &**e == name)
    }

    /// True when the workload's annotations can never cause a reload on their own and
    /// `--auto-reload-all` is off: such a workload needs no policy evaluation at all.
    pub fn is_inert(&self) -> bool {
        self.by_type.iter().all(|t| {
            t.auto == Toggle::Unset
                && t.typed_auto == Toggle::Unset
                && !t.search
                && t.explicit.is_empty()
        })
    }

    /// The policy in an `Arc`, shared with every workload whose policy is the same simple one
    /// (switches only: no name lists, excludes or problems), which is most of them: at 100k
    /// workloads one policy each cost ~20 MiB. Name lists stay per workload.
    pub fn shared(self) -> Arc<ReloadPolicy> {
        // Bounded: the switches have a few hundred combinations, times distinct pause periods.
        const MAX_SHARED: usize = 1024;
        static COMMON: std::sync::LazyLock<
            std::sync::Mutex<std::collections::HashMap<SimplePolicy, Arc<ReloadPolicy>>>,
        > = std::sync::LazyLock::new(Default::default);
        let Some(key) = self.simple() else {
            return Arc::new(self);
        };
        let mut common = COMMON.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(p) = common.get(&key) {
            return p.clone();
        }
        let p = Arc::new(self);
        if common.len() < MAX_SHARED {
            common.insert(key, p.clone());
        }
        p
    }

    /// Everything a simple policy is, as a key; None when it holds lists or problems.
    fn simple(&self) -> Option<SimplePolicy> {
        let lists = self.by_type.iter().any(|t| !t.explicit.is_empty())
            || self.excludes.iter().any(|e| !e.is_empty())
            || !self.problems.is_empty();
        (!lists).then(|| SimplePolicy {
            switches: self
                .by_type
                .each_ref()
                .map(|t| (t.auto, t.typed_auto, t.search)),
            rollout_strategy: self.rollout_strategy,
            pause_period: self.pause_period,
        })
    }

    /// Parses the policy from metadata and pod-template annotations.
    pub fn parse(
        keys: &AnnotationKeys,
        metadata: &BTreeMap<String, String>,
        template: &BTreeMap<String, String>,
    ) -> ReloadPolicy {
        let mut problems = Vec::new();
        let by_type = ConfigKind::ALL.map(|kind| {
            let (reload_key, typed_auto_key) = match kind {
                ConfigKind::ConfigMap => (&keys.configmap_reload, &keys.configmap_auto),
                ConfigKind::Secret => (&keys.secret_reload, &keys.secret_auto),
                ConfigKind::SecretProviderClass => (&keys.spc_reload, &keys.spc_auto),
            };
            let four = [reload_key, &keys.auto, typed_auto_key, &keys.search];
            let source = if four.iter().any(|k| metadata.contains_key(k.as_str())) {
                metadata
            } else {
                template
            };
            let get = |k: &String| source.get(k.as_str()).map(String::as_str);
            TypePolicy {
                auto: Toggle::parse(get(&keys.auto)),
                typed_auto: Toggle::parse(get(typed_auto_key)),
                search: get(&keys.search) == Some("true"),
                explicit: get(reload_key)
                    .map(|v| parse_name_list(reload_key, v, &mut problems))
                    .unwrap_or_default(),
            }
        });
        let excludes = ConfigKind::ALL.map(|kind| {
            let key = match kind {
                ConfigKind::ConfigMap => &keys.configmap_exclude,
                ConfigKind::Secret => &keys.secret_exclude,
                ConfigKind::SecretProviderClass => &keys.spc_exclude,
            };
            metadata
                .get(key.as_str())
                .map(|v| {
                    v.split(',')
                        .map(str::trim)
                        .filter(|e| !e.is_empty())
                        .map(Arc::from)
                        .collect()
                })
                .unwrap_or_default()
        });
        let rollout_strategy = match metadata
            .get(keys.rollout_strategy.as_str())
            .map(|s| s.trim())
        {
            None | Some("") | Some("rollout") => RolloutStrategy::Rollout,
            Some("restart") => RolloutStrategy::Restart,
            Some(other) => {
                problems.push(PolicyProblem::UnknownRolloutStrategy {
                    value: other.to_string(),
                });
                RolloutStrategy::Rollout
            }
        };
        let pause_period =
            metadata
                .get(keys.pause_period.as_str())
                .and_then(|v| match parse_go_duration(v) {
                    Ok(d) if d > Duration::ZERO => Some(d),
                    Ok(_) => None,
                    Err(e) => {
                        problems.push(PolicyProblem::InvalidPausePeriod {
                            value: v.clone(),
                            error: e.to_string(),
                        });
                        None
                    }
                });
        problems.dedup();
        ReloadPolicy {
            by_type,
            excludes,
            rollout_strategy,
            pause_period,
            problems,
        }
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("invalid duration '{0}' (expected a Go duration such as 30s, 5m or 1h30m)")]
pub struct DurationError(pub String);

/// Go's `time.ParseDuration` for non-negative durations (units ns, us, µs, ms, s, m, h).
pub fn parse_go_duration(input: &str) -> Result<Duration, DurationError> {
    let err = || DurationError(input.to_string());
    let s = input.trim();
    let s = s.strip_prefix('+').unwrap_or(s);
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    if s.is_empty() || s.starts_with('-') {
        return Err(err());
    }
    let mut total = 0f64;
    let mut rest = s;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(err)?;
        if num_len == 0 {
            return Err(err());
        }
        let number: f64 = rest[..num_len].parse().map_err(|_| err())?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let nanos_per_unit = match &rest[..unit_len] {
            "ns" => 1.0,
            "us" | "µs" | "μs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            _ => return Err(err()),
        };
        total += number * nanos_per_unit;
        rest = &rest[unit_len..];
    }
    Ok(Duration::from_nanos(total.round() as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn parse(meta: &[(&str, &str)], tmpl: &[(&str, &str)]) -> ReloadPolicy {
        ReloadPolicy::parse(&AnnotationKeys::default(), &map(meta), &map(tmpl))
    }

    #[test]
    fn simple_policies_are_shared_lists_are_not() {
        let auto = || parse(&[("reloader.stakater.com/auto", "true")], &[]).shared();
        assert!(Arc::ptr_eq(&auto(), &auto()));
        let off = parse(&[("reloader.stakater.com/auto", "false")], &[]).shared();
        assert!(!Arc::ptr_eq(&auto(), &off));
        let named = || parse(&[("configmap.reloader.stakater.com/reload", "a,b")], &[]).shared();
        let (a, b) = (named(), named());
        assert!(!Arc::ptr_eq(&a, &b));
        assert_eq!(a.for_type(ConfigKind::ConfigMap).explicit.len(), 2);
    }

    #[test]
    fn go_bool_values() {
        for t in ["1", "t", "T", "TRUE", "true", "True"] {
            assert_eq!(Toggle::parse(Some(t)), Toggle::True, "{t}");
        }
        for f in [
            "0", "f", "F", "FALSE", "false", "False", "yes", "on", "tRuE",
        ] {
            assert_eq!(Toggle::parse(Some(f)), Toggle::False, "{f}");
        }
        assert_eq!(Toggle::parse(Some("")), Toggle::Unset);
        assert_eq!(Toggle::parse(None), Toggle::Unset);
    }

    #[test]
    fn explicit_list_with_invalid_entry_keeps_the_valid_ones() {
        let p = parse(
            &[(
                "configmap.reloader.stakater.com/reload",
                "good, app-config-.*, bad[",
            )],
            &[],
        );
        let list = &p.for_type(ConfigKind::ConfigMap).explicit;
        assert_eq!(list.len(), 2);
        assert!(list[0].matches("good") && !list[0].matches("good2"));
        assert!(list[1].matches("app-config-x") && !list[1].matches("xapp-config-"));
        assert_eq!(p.problems.len(), 1);
        assert!(p.problems[0].to_string().contains("bad["));
    }

    #[test]
    fn template_fallback_only_when_none_of_the_four_is_on_metadata() {
        let p = parse(&[], &[("reloader.stakater.com/auto", "true")]);
        assert_eq!(p.for_type(ConfigKind::Secret).auto, Toggle::True);
        // A secret reload list on metadata hides the template for secrets, not for configmaps.
        let p = parse(
            &[("secret.reloader.stakater.com/reload", "s")],
            &[("reloader.stakater.com/auto", "true")],
        );
        assert_eq!(p.for_type(ConfigKind::Secret).auto, Toggle::Unset);
        assert_eq!(p.for_type(ConfigKind::ConfigMap).auto, Toggle::True);
    }

    #[test]
    fn excludes_are_metadata_only_and_exact() {
        let p = parse(
            &[("configmaps.exclude.reloader.stakater.com/reload", "a, b")],
            &[],
        );
        assert!(p.excludes(ConfigKind::ConfigMap, "a"));
        assert!(!p.excludes(ConfigKind::ConfigMap, "a.*"));
        assert!(!p.excludes(ConfigKind::Secret, "a"));
    }

    #[test]
    fn rollout_strategy_and_pause_period_problems() {
        let p = parse(
            &[
                ("reloader.stakater.com/rollout-strategy", "recreate"),
                ("deployment.reloader.stakater.com/pause-period", "5 minutes"),
            ],
            &[],
        );
        assert_eq!(p.rollout_strategy, RolloutStrategy::Rollout);
        assert_eq!(p.pause_period, None);
        assert_eq!(p.problems.len(), 2);
        let p = parse(
            &[
                ("reloader.stakater.com/rollout-strategy", "restart"),
                ("deployment.reloader.stakater.com/pause-period", "1h30m"),
            ],
            &[],
        );
        assert_eq!(p.rollout_strategy, RolloutStrategy::Restart);
        assert_eq!(p.pause_period, Some(Duration::from_secs(5400)));
    }

    #[test]
    fn go_durations() {
        assert_eq!(parse_go_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_go_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_go_duration("300ms"), Ok(Duration::from_millis(300)));
        assert_eq!(parse_go_duration("0"), Ok(Duration::ZERO));
        assert_eq!(parse_go_duration("2h45m10s"), Ok(Duration::from_secs(9910)));
        for bad in ["", "5", "m", "5x", "-5s", "5 m", "1h-5m"] {
            assert!(parse_go_duration(bad).is_err(), "{bad}");
        }
    }
}
