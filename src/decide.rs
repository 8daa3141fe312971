//! The reload decision for one (changed config, workload) pair: section 1 of the compatibility
//! spec as a pure function.

use crate::model::{ConfigKind, WorkloadKind};
use crate::reload_policy::{ReloadPolicy, Toggle};

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

/// The first rule that says no, in the words of the compatibility spec's decision order. The
/// controller counts them by their coarse [`SkipReason`]; explain and lint show them whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase", tag = "reason")]
pub enum NoReason {
    // ---- what the controller watches (the watches and the namespace filter) ----
    /// The namespace is in `--namespaces-to-ignore`.
    NamespaceIgnored,
    /// `--namespaces` (or `KUBERNETES_NAMESPACE`) does not list the namespace.
    NamespaceNotWatched,
    /// `--namespace-selector` does not select the namespace.
    NamespaceNotSelected,
    /// Argo Rollouts without `--is-Argo-Rollouts`, DeploymentConfigs without OpenShift.
    WorkloadKindNotWatched,
    /// `--resources-to-ignore`, or a SecretProviderClass without `--enable-csi-integration`.
    ConfigTypeNotWatched,
    /// A Secret whose type is in `--ignore-secret-types` (the watches' field selector).
    SecretTypeIgnored,
    /// `--resource-label-selector` does not match the config's labels.
    ConfigNotSelected,
    /// `--webhook-url`: config changes call the webhook instead of rolling workloads.
    WebhookMode,
    // ---- the decision table, in order ----
    /// 1. `--ignored-workload-types`.
    IgnoredWorkloadType,
    /// 2. `reloader.stakater.com/ignore: "true"` on the config.
    ConfigIgnored,
    /// 3. Named in the workload's exclude list for its type.
    Excluded,
    /// 5. `search` is on, but the config has no `match: "true"`.
    SearchWithoutMatch,
    /// 6. `auto: "false"` (or a value that is not a boolean) opts the workload out.
    AutoFalse,
    /// 6. The typed auto of the config's type is `"false"` (or not a boolean).
    TypedAutoFalse,
    /// 6. A typed auto is on, for another type only.
    TypedAutoOfAnotherType { on: ConfigKind },
    /// 4. The workload has a reload list for this type that does not name the config.
    NotInReloadList,
    /// 5./6. Opted in by `search`/`auto`, but the pod template does not use the config.
    NotReferenced,
    /// 7. No annotation asks for this config, and `--auto-reload-all` is off.
    NotOptedIn,
}

impl NoReason {
    /// Every reason, in the order the rules are applied (docs and their test).
    pub const ALL: [NoReason; 18] = [
        NoReason::NamespaceIgnored,
        NoReason::NamespaceNotWatched,
        NoReason::NamespaceNotSelected,
        NoReason::WorkloadKindNotWatched,
        NoReason::ConfigTypeNotWatched,
        NoReason::SecretTypeIgnored,
        NoReason::ConfigNotSelected,
        NoReason::WebhookMode,
        NoReason::IgnoredWorkloadType,
        NoReason::ConfigIgnored,
        NoReason::Excluded,
        NoReason::SearchWithoutMatch,
        NoReason::AutoFalse,
        NoReason::TypedAutoFalse,
        NoReason::TypedAutoOfAnotherType {
            on: ConfigKind::Secret,
        },
        NoReason::NotInReloadList,
        NoReason::NotReferenced,
        NoReason::NotOptedIn,
    ];

    /// The coarse reason the controller reports (metric label `reason` of skipped decisions).
    pub fn skip_reason(self) -> SkipReason {
        match self {
            NoReason::IgnoredWorkloadType | NoReason::WorkloadKindNotWatched => {
                SkipReason::IgnoredWorkloadType
            }
            NoReason::ConfigIgnored => SkipReason::ConfigIgnored,
            NoReason::Excluded => SkipReason::Excluded,
            NoReason::NotReferenced => SkipReason::NotReferenced,
            _ => SkipReason::NotOptedIn,
        }
    }

    /// Stable identifier (JSON, tests).
    pub fn as_str(self) -> &'static str {
        match self {
            NoReason::NamespaceIgnored => "namespace_ignored",
            NoReason::NamespaceNotWatched => "namespace_not_watched",
            NoReason::NamespaceNotSelected => "namespace_not_selected",
            NoReason::WorkloadKindNotWatched => "workload_kind_not_watched",
            NoReason::ConfigTypeNotWatched => "config_type_not_watched",
            NoReason::SecretTypeIgnored => "secret_type_ignored",
            NoReason::ConfigNotSelected => "config_not_selected",
            NoReason::WebhookMode => "webhook_mode",
            NoReason::IgnoredWorkloadType => "ignored_workload_type",
            NoReason::ConfigIgnored => "config_ignored",
            NoReason::Excluded => "excluded",
            NoReason::SearchWithoutMatch => "search_without_match",
            NoReason::AutoFalse => "auto_false",
            NoReason::TypedAutoFalse => "typed_auto_false",
            NoReason::TypedAutoOfAnotherType { .. } => "typed_auto_of_another_type",
            NoReason::NotInReloadList => "not_in_reload_list",
            NoReason::NotReferenced => "not_referenced",
            NoReason::NotOptedIn => "not_opted_in",
        }
    }

    /// One sentence for people, naming the annotation or flag that decides.
    pub fn explain(self, config: ConfigKind, keys: &crate::config::AnnotationKeys) -> String {
        let typed_auto = |k: ConfigKind| match k {
            ConfigKind::ConfigMap => keys.configmap_auto.clone(),
            ConfigKind::Secret => keys.secret_auto.clone(),
            ConfigKind::SecretProviderClass => keys.spc_auto.clone(),
        };
        match self {
            NoReason::NamespaceIgnored => "the namespace is in --namespaces-to-ignore".into(),
            NoReason::NamespaceNotWatched => {
                "the namespace is not in --namespaces (or KUBERNETES_NAMESPACE)".into()
            }
            NoReason::NamespaceNotSelected => {
                "the namespace's labels do not match --namespace-selector".into()
            }
            NoReason::WorkloadKindNotWatched => {
                "this workload kind is not watched (Rollouts need --is-Argo-Rollouts, \
                 DeploymentConfigs --is-openshift)"
                    .into()
            }
            NoReason::ConfigTypeNotWatched => format!(
                "{config}s are not watched (--resources-to-ignore, or --enable-csi-integration \
                 is off for secretproviderclasses)"
            ),
            NoReason::SecretTypeIgnored => "its type is in --ignore-secret-types (default \
                 helm.sh/release.v1): the controller never lists or watches Secrets of that type"
                .into(),
            NoReason::ConfigNotSelected => {
                "the config's labels do not match --resource-label-selector".into()
            }
            NoReason::WebhookMode => {
                "--webhook-url is set: a change calls the webhook instead of rolling workloads"
                    .into()
            }
            NoReason::IgnoredWorkloadType => {
                "the workload kind is in --ignored-workload-types".into()
            }
            NoReason::ConfigIgnored => format!("the {config} has {}: \"true\"", keys.ignore),
            NoReason::Excluded => format!("the workload excludes it ({config} exclude list)"),
            NoReason::SearchWithoutMatch => format!(
                "{}: \"true\" is on, but the {config} lacks {}: \"true\"",
                keys.search, keys.match_
            ),
            NoReason::AutoFalse => format!("{} is false: the workload opted out", keys.auto),
            NoReason::TypedAutoFalse => format!(
                "{} is false: the workload opted out for {config}s",
                typed_auto(config)
            ),
            NoReason::TypedAutoOfAnotherType { on } => format!(
                "only {} is on: {config}s are not auto-reloaded",
                typed_auto(on)
            ),
            NoReason::NotInReloadList => format!(
                "the workload's {config} reload list does not name it (and no auto or search \
                 applies)"
            ),
            NoReason::NotReferenced => format!(
                "auto/search only act on configs the pod template uses, and it does not use this \
                 {config}"
            ),
            NoReason::NotOptedIn => {
                "no reload annotation asks for it and --auto-reload-all is off".into()
            }
        }
    }
}

/// The decision with the first rule that says no (explain, lint); [`decide`] is its coarse form.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Reload(ReloadReason),
    No(NoReason),
}

/// The decision table (the compatibility spec's decision order). The controller calls it through
/// [`decide`]; explain and lint read the same verdict with its detailed reason.
pub fn evaluate(
    config: ConfigFacts<'_>,
    workload: WorkloadFacts<'_>,
    switches: DecisionSwitches<'_>,
) -> Verdict {
    use Verdict::{No, Reload};
    if switches.ignored_workloads.contains(&workload.kind) {
        return No(NoReason::IgnoredWorkloadType);
    }
    if config.ignore {
        return No(NoReason::ConfigIgnored);
    }
    if workload.policy.excludes(config.kind, config.name) {
        return No(NoReason::Excluded);
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
        return No(why_not_opted_in(config.kind, workload.policy));
    }
    if !workload.referenced {
        return No(NoReason::NotReferenced);
    }
    Reload(if search {
        ReloadReason::Search
    } else {
        ReloadReason::Auto
    })
}

/// Rule 7 ("otherwise no") made precise: the annotation that was closest to saying yes.
fn why_not_opted_in(kind: ConfigKind, policy: &ReloadPolicy) -> NoReason {
    let typed = policy.for_type(kind);
    if typed.search {
        return NoReason::SearchWithoutMatch;
    }
    if typed.auto == Toggle::False {
        return NoReason::AutoFalse;
    }
    if typed.typed_auto == Toggle::False {
        return NoReason::TypedAutoFalse;
    }
    if !typed.explicit.is_empty() {
        return NoReason::NotInReloadList;
    }
    if let Some(on) = ConfigKind::ALL
        .into_iter()
        .find(|k| *k != kind && policy.for_type(*k).typed_auto == Toggle::True)
    {
        return NoReason::TypedAutoOfAnotherType { on };
    }
    NoReason::NotOptedIn
}

/// What the controller's watches and namespace filter make of a (config, workload) pair, before
/// the decision table: each false field is a reason the controller never sees the change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScopeFacts {
    pub namespace_ignored: bool,
    pub namespace_watched: bool,
    pub namespace_selected: bool,
    pub workload_kind_watched: bool,
    pub config_type_watched: bool,
    /// False for a Secret of a type in `--ignore-secret-types`.
    pub secret_type_watched: bool,
    pub config_selected: bool,
    pub webhook: bool,
}

impl Default for ScopeFacts {
    fn default() -> Self {
        Self {
            namespace_ignored: false,
            namespace_watched: true,
            namespace_selected: true,
            workload_kind_watched: true,
            config_type_watched: true,
            secret_type_watched: true,
            config_selected: true,
            webhook: false,
        }
    }
}

/// The first scope rule that says no, in the order the controller applies them: namespaces
/// (ignored, listed, selected), the watched workload kinds and config types, the ignored Secret
/// types, the resource label selector, then the webhook mode.
pub fn scope_verdict(scope: ScopeFacts) -> Option<NoReason> {
    let rules = [
        (scope.namespace_ignored, NoReason::NamespaceIgnored),
        (!scope.namespace_watched, NoReason::NamespaceNotWatched),
        (!scope.namespace_selected, NoReason::NamespaceNotSelected),
        (
            !scope.workload_kind_watched,
            NoReason::WorkloadKindNotWatched,
        ),
        (!scope.config_type_watched, NoReason::ConfigTypeNotWatched),
        (!scope.secret_type_watched, NoReason::SecretTypeIgnored),
        (!scope.config_selected, NoReason::ConfigNotSelected),
        (scope.webhook, NoReason::WebhookMode),
    ];
    rules
        .into_iter()
        .find(|(no, _)| *no)
        .map(|(_, reason)| reason)
}

/// The whole answer for one (config, workload): scope first, then the decision table.
pub fn evaluate_in_scope(
    scope: ScopeFacts,
    config: ConfigFacts<'_>,
    workload: WorkloadFacts<'_>,
    switches: DecisionSwitches<'_>,
) -> Verdict {
    match scope_verdict(scope) {
        Some(reason) => Verdict::No(reason),
        None => evaluate(config, workload, switches),
    }
}

pub fn decide(
    config: ConfigFacts<'_>,
    workload: WorkloadFacts<'_>,
    switches: DecisionSwitches<'_>,
) -> ReloadDecision {
    match evaluate(config, workload, switches) {
        Verdict::Reload(reason) => ReloadDecision::Reload(reason),
        Verdict::No(reason) => ReloadDecision::Skip(reason.skip_reason()),
    }
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

    const fn cm<'a>(name: &'a str) -> ConfigFacts<'a> {
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

    fn verdict(config: ConfigFacts<'_>, meta: &[(&str, &str)], referenced: bool) -> Verdict {
        let p = policy(meta);
        evaluate(
            config,
            WorkloadFacts {
                kind: WorkloadKind::Deployment,
                policy: &p,
                referenced,
            },
            DecisionSwitches::default(),
        )
    }

    /// A config, the workload's annotations and whether its pod template uses the config, and
    /// the first rule of the decision table that says no to them.
    #[derive(Clone, Copy)]
    struct NoRow {
        config: ConfigFacts<'static>,
        meta: &'static [(&'static str, &'static str)],
        referenced: bool,
        want: NoReason,
    }

    const AUTO: &[(&str, &str)] = &[("reloader.stakater.com/auto", "true")];

    /// Every reason of the table but the first (the workload's kind, not the rows' Deployment).
    const NO_ROWS: &[NoRow] = &[
        NoRow {
            config: ConfigFacts {
                ignore: true,
                ..cm("c")
            },
            meta: AUTO,
            referenced: true,
            want: NoReason::ConfigIgnored,
        },
        NoRow {
            config: cm("c"),
            meta: &[
                ("reloader.stakater.com/auto", "true"),
                ("configmaps.exclude.reloader.stakater.com/reload", "c"),
            ],
            referenced: true,
            want: NoReason::Excluded,
        },
        NoRow {
            config: cm("c"),
            meta: &[("reloader.stakater.com/search", "true")],
            referenced: true,
            want: NoReason::SearchWithoutMatch,
        },
        NoRow {
            config: cm("c"),
            meta: &[("reloader.stakater.com/auto", "false")],
            referenced: true,
            want: NoReason::AutoFalse,
        },
        NoRow {
            config: cm("c"),
            meta: &[("reloader.stakater.com/auto", "yes")],
            referenced: true,
            want: NoReason::AutoFalse,
        },
        NoRow {
            config: cm("c"),
            meta: &[("configmap.reloader.stakater.com/auto", "false")],
            referenced: true,
            want: NoReason::TypedAutoFalse,
        },
        NoRow {
            config: cm("c"),
            meta: &[("secret.reloader.stakater.com/auto", "true")],
            referenced: true,
            want: NoReason::TypedAutoOfAnotherType {
                on: ConfigKind::Secret,
            },
        },
        NoRow {
            config: cm("c"),
            meta: &[("configmap.reloader.stakater.com/reload", "other")],
            referenced: true,
            want: NoReason::NotInReloadList,
        },
        // A Secret named in the ConfigMap list: not this type's list.
        NoRow {
            config: ConfigFacts {
                kind: ConfigKind::Secret,
                ..cm("s")
            },
            meta: &[("configmap.reloader.stakater.com/reload", "s")],
            referenced: true,
            want: NoReason::NotOptedIn,
        },
        NoRow {
            config: cm("c"),
            meta: AUTO,
            referenced: false,
            want: NoReason::NotReferenced,
        },
        NoRow {
            config: cm("c"),
            meta: &[],
            referenced: true,
            want: NoReason::NotOptedIn,
        },
    ];

    #[test]
    fn each_no_reason_of_the_decision_table() {
        for &NoRow {
            config,
            meta,
            referenced,
            want,
        } in NO_ROWS
        {
            let row = format!("{meta:?} referenced={referenced}");
            assert_eq!(
                verdict(config, meta, referenced),
                Verdict::No(want),
                "{row}"
            );
            // The controller's coarse decision is the same verdict.
            let coarse = run(config, meta, referenced, false);
            assert_eq!(coarse, Skip(want.skip_reason()), "{row}");
            let keys = AnnotationKeys::default();
            assert!(!want.explain(config.kind, &keys).is_empty(), "{row}");
        }
        let p = policy(AUTO);
        let cron = WorkloadFacts {
            kind: WorkloadKind::CronJob,
            policy: &p,
            referenced: true,
        };
        let switches = DecisionSwitches {
            auto_reload_all: false,
            ignored_workloads: &[WorkloadKind::CronJob],
        };
        assert_eq!(
            evaluate(cm("c"), cron, switches),
            Verdict::No(NoReason::IgnoredWorkloadType)
        );
    }

    #[test]
    fn search_without_match_comes_before_auto_false() {
        let meta = [
            ("reloader.stakater.com/search", "true"),
            ("reloader.stakater.com/auto", "false"),
        ];
        assert_eq!(
            verdict(cm("c"), &meta, true),
            Verdict::No(NoReason::SearchWithoutMatch)
        );
    }

    #[test]
    fn scope_rules_come_first_in_the_controllers_order() {
        let p = policy(&[("reloader.stakater.com/auto", "true")]);
        let w = WorkloadFacts {
            kind: WorkloadKind::Deployment,
            policy: &p,
            referenced: true,
        };
        let run = |scope| evaluate_in_scope(scope, cm("c"), w, DecisionSwitches::default());
        assert_eq!(
            run(ScopeFacts::default()),
            Verdict::Reload(ReloadReason::Auto)
        );
        let all_no = ScopeFacts {
            namespace_ignored: true,
            namespace_watched: false,
            namespace_selected: false,
            workload_kind_watched: false,
            config_type_watched: false,
            secret_type_watched: false,
            config_selected: false,
            webhook: true,
        };
        let mut scope = all_no;
        let order = [
            NoReason::NamespaceIgnored,
            NoReason::NamespaceNotWatched,
            NoReason::NamespaceNotSelected,
            NoReason::WorkloadKindNotWatched,
            NoReason::ConfigTypeNotWatched,
            NoReason::SecretTypeIgnored,
            NoReason::ConfigNotSelected,
            NoReason::WebhookMode,
        ];
        for (i, want) in order.into_iter().enumerate() {
            assert_eq!(run(scope), Verdict::No(want), "rule {i}");
            match i {
                0 => scope.namespace_ignored = false,
                1 => scope.namespace_watched = true,
                2 => scope.namespace_selected = true,
                3 => scope.workload_kind_watched = true,
                4 => scope.config_type_watched = true,
                5 => scope.secret_type_watched = true,
                6 => scope.config_selected = true,
                _ => scope.webhook = false,
            }
        }
        assert_eq!(run(scope), Verdict::Reload(ReloadReason::Auto));
    }
}
