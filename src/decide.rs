//! The reload decision for one (changed config, workload) pair: section 1 of the compatibility
//! spec as a pure function.

use crate::model::{ConfigKind, WorkloadKind};
use crate::policy::{ReloadPolicy, Toggle};

/// What the controller knows of the changed config.
#[derive(Debug, Clone, Copy)]
pub struct ConfigFacts<'a> {
    pub kind: ConfigKind,
    pub name: &'a str,
    /// `reloader.stakater.com/ignore: "true"` on the config.
    pub ignore: bool,
    /// `reloader.stakater.com/match: "true"` on the config.
    pub matched: bool,
}

/// What the controller knows of the workload.
#[derive(Debug, Clone, Copy)]
pub struct WorkloadFacts<'a> {
    pub kind: WorkloadKind,
    pub policy: &'a ReloadPolicy,
    /// The pod template mounts the config or reads it from env.
    pub referenced: bool,
}

/// Controller-wide switches that take part in the decision.
#[derive(Debug, Clone, Copy, Default)]
pub struct DecisionSwitches<'a> {
    pub auto_reload_all: bool,
    pub ignored_workloads: &'a [WorkloadKind],
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReloadReason {
    /// Named in the workload's reload list for its type (referenced or not).
    ExplicitList,
    /// `search` on the workload, `match` on the config.
    Search,
    /// `auto`, typed auto, or `--auto-reload-all`.
    Auto,
}

impl ReloadReason {
    pub fn as_str(self) -> &'static str {
        match self {
            ReloadReason::ExplicitList => "explicit_list",
            ReloadReason::Search => "search",
            ReloadReason::Auto => "auto",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SkipReason {
    IgnoredWorkloadType,
    ConfigIgnored,
    Excluded,
    NotReferenced,
    NotOptedIn,
}

impl SkipReason {
    pub fn as_str(self) -> &'static str {
        match self {
            SkipReason::IgnoredWorkloadType => "ignored_workload_type",
            SkipReason::ConfigIgnored => "config_ignored",
            SkipReason::Excluded => "excluded",
            SkipReason::NotReferenced => "not_referenced",
            SkipReason::NotOptedIn => "not_opted_in",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReloadDecision {
    Reload(ReloadReason),
    Skip(SkipReason),
}

impl ReloadDecision {
    pub fn is_reload(self) -> bool {
        matches!(self, ReloadDecision::Reload(_))
    }
}

pub fn decide(
    config: ConfigFacts<'_>,
    workload: WorkloadFacts<'_>,
    switches: DecisionSwitches<'_>,
) -> ReloadDecision {
    use ReloadDecision::{Reload, Skip};
    if switches.ignored_workloads.contains(&workload.kind) {
        return Skip(SkipReason::IgnoredWorkloadType);
    }
    if config.ignore {
        return Skip(SkipReason::ConfigIgnored);
    }
    if workload.policy.excludes(config.kind, config.name) {
        return Skip(SkipReason::Excluded);
    }
    let typed = workload.policy.for_type(config.kind);
    if typed.explicit.iter().any(|p| p.matches(config.name)) {
        return Reload(ReloadReason::ExplicitList);
    }
    let search = typed.search && config.matched;
    let auto = typed.auto == Toggle::True
        || typed.typed_auto == Toggle::True
        || (typed.auto == Toggle::Unset
            && typed.typed_auto == Toggle::Unset
            && switches.auto_reload_all);
    if !(search || auto) {
        return Skip(SkipReason::NotOptedIn);
    }
    if !workload.referenced {
        return Skip(SkipReason::NotReferenced);
    }
    Reload(if search {
        ReloadReason::Search
    } else {
        ReloadReason::Auto
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::AnnotationKeys;
    use std::collections::BTreeMap;

    fn policy(meta: &[(&str, &str)]) -> ReloadPolicy {
        let m: BTreeMap<String, String> = meta
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        ReloadPolicy::parse(&AnnotationKeys::default(), &m, &BTreeMap::new())
    }

    fn cm<'a>(name: &'a str) -> ConfigFacts<'a> {
        ConfigFacts {
            kind: ConfigKind::ConfigMap,
            name,
            ignore: false,
            matched: false,
        }
    }

    fn run(
        config: ConfigFacts<'_>,
        meta: &[(&str, &str)],
        referenced: bool,
        auto_all: bool,
    ) -> ReloadDecision {
        let p = policy(meta);
        decide(
            config,
            WorkloadFacts {
                kind: WorkloadKind::Deployment,
                policy: &p,
                referenced,
            },
            DecisionSwitches {
                auto_reload_all: auto_all,
                ignored_workloads: &[],
            },
        )
    }

    use ReloadDecision::{Reload, Skip};

    #[test]
    fn auto_needs_a_reference() {
        let auto = [("reloader.stakater.com/auto", "true")];
        assert_eq!(run(cm("c"), &auto, true, false), Reload(ReloadReason::Auto));
        assert_eq!(
            run(cm("c"), &auto, false, false),
            Skip(SkipReason::NotReferenced)
        );
    }

    #[test]
    fn explicit_list_reloads_even_unreferenced_and_supports_regex() {
        let list = [(
            "configmap.reloader.stakater.com/reload",
            "other, app-config-.*",
        )];
        assert_eq!(
            run(cm("app-config-1"), &list, false, false),
            Reload(ReloadReason::ExplicitList)
        );
        assert_eq!(
            run(cm("xapp-config-1"), &list, true, false),
            Skip(SkipReason::NotOptedIn)
        );
    }

    #[test]
    fn exclude_beats_explicit_list() {
        let meta = [
            ("configmap.reloader.stakater.com/reload", "c"),
            ("configmaps.exclude.reloader.stakater.com/reload", "c"),
        ];
        assert_eq!(run(cm("c"), &meta, true, false), Skip(SkipReason::Excluded));
    }

    #[test]
    fn ignore_on_config_wins() {
        let c = ConfigFacts {
            ignore: true,
            ..cm("c")
        };
        let meta = [("configmap.reloader.stakater.com/reload", "c")];
        assert_eq!(run(c, &meta, true, false), Skip(SkipReason::ConfigIgnored));
    }

    #[test]
    fn search_needs_match_and_reference() {
        let meta = [("reloader.stakater.com/search", "true")];
        let matched = ConfigFacts {
            matched: true,
            ..cm("c")
        };
        assert_eq!(
            run(matched, &meta, true, false),
            Reload(ReloadReason::Search)
        );
        assert_eq!(
            run(matched, &meta, false, false),
            Skip(SkipReason::NotReferenced)
        );
        assert_eq!(
            run(cm("c"), &meta, true, false),
            Skip(SkipReason::NotOptedIn)
        );
        // Only the exact string "true" turns search on.
        assert_eq!(
            run(
                matched,
                &[("reloader.stakater.com/search", "True")],
                true,
                false
            ),
            Skip(SkipReason::NotOptedIn)
        );
    }

    #[test]
    fn typed_auto() {
        let meta = [("secret.reloader.stakater.com/auto", "true")];
        let secret = ConfigFacts {
            kind: ConfigKind::Secret,
            ..cm("s")
        };
        assert_eq!(run(secret, &meta, true, false), Reload(ReloadReason::Auto));
        assert_eq!(
            run(cm("c"), &meta, true, false),
            Skip(SkipReason::NotOptedIn)
        );
    }

    #[test]
    fn auto_reload_all_and_opt_outs() {
        assert_eq!(run(cm("c"), &[], true, true), Reload(ReloadReason::Auto));
        assert_eq!(
            run(cm("c"), &[], false, true),
            Skip(SkipReason::NotReferenced)
        );
        let off = [("reloader.stakater.com/auto", "false")];
        assert_eq!(run(cm("c"), &off, true, true), Skip(SkipReason::NotOptedIn));
        // A typed "false" opts out of that type only.
        let typed_off = [("configmap.reloader.stakater.com/auto", "false")];
        assert_eq!(
            run(cm("c"), &typed_off, true, true),
            Skip(SkipReason::NotOptedIn)
        );
        let secret = ConfigFacts {
            kind: ConfigKind::Secret,
            ..cm("s")
        };
        assert_eq!(
            run(secret, &typed_off, true, true),
            Reload(ReloadReason::Auto)
        );
        // An unparsable value is false, and not empty: it opts out too.
        assert_eq!(
            run(
                cm("c"),
                &[("reloader.stakater.com/auto", "yes")],
                true,
                true
            ),
            Skip(SkipReason::NotOptedIn)
        );
    }

    #[test]
    fn auto_false_with_typed_true_still_reloads_that_type() {
        let meta = [
            ("reloader.stakater.com/auto", "false"),
            ("configmap.reloader.stakater.com/auto", "true"),
        ];
        assert_eq!(run(cm("c"), &meta, true, false), Reload(ReloadReason::Auto));
    }

    #[test]
    fn ignored_workload_types() {
        let p = policy(&[("reloader.stakater.com/auto", "true")]);
        let d = decide(
            cm("c"),
            WorkloadFacts {
                kind: WorkloadKind::CronJob,
                policy: &p,
                referenced: true,
            },
            DecisionSwitches {
                auto_reload_all: false,
                ignored_workloads: &[WorkloadKind::CronJob],
            },
        );
        assert_eq!(d, Skip(SkipReason::IgnoredWorkloadType));
    }
}
