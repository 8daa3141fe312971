//! Lint: findings over workloads, from the same readings and verdicts explain prints. Pure.

use std::collections::BTreeMap;

use crate::config::AnnotationKeys;
use crate::decide::NoReason;
use crate::index::WorkloadEntry;
use crate::model::{ConfigKind, WorkloadKey};
use crate::reload_policy::{AnnotationRead, NamePattern, PolicyProblem, Toggle, type_index};

use super::report::{Explanation, NamespaceFacts};
use super::unknown_keys::unknown_key;
use super::{Lint, Severity};

/// Every check, as named in findings and in docs/troubleshooting.md.
pub const CHECKS: [&str; 25] = [
    "missing-config",
    "list-matches-nothing",
    "invalid-regex",
    "invalid-pause-period",
    "invalid-rollout-strategy",
    "invalid-cronjob-reload-strategy",
    "invalid-bool",
    "search-not-true",
    "annotation-not-read",
    "exclude-conflict",
    "nothing-to-act-on",
    "typed-auto-without-config",
    "search-without-match",
    "config-type-ignored",
    "rbac-missing",
    "rbac-fallback",
    "secret-type-ignored",
    "unknown-annotation",
    "precise-keys-off",
    "precise-keys-whole-config",
    "api-not-served",
    "invalid-reload-window",
    "invalid-reload-delay",
    "invalid-restart-by",
    "restart-by-not-possible",
];

struct Findings<'a> {
    entry: &'a WorkloadEntry,
    out: Vec<Lint>,
}

impl Findings<'_> {
    fn push(&mut self, severity: Severity, check: &'static str, message: String) {
        debug_assert!(CHECKS.contains(&check), "undocumented check {check}");
        self.out.push(Lint {
            severity,
            check,
            kind: self.entry.key.kind.as_str(),
            namespace: self.entry.key.namespace.to_string(),
            name: self.entry.key.name.to_string(),
            message,
        });
    }
}

/// Every finding for one workload. `annotations` is what the policy parser read
/// ([`crate::reload_policy::ReloadPolicy::read`]); `explanation` the verdict for each candidate config.
pub fn lint_workload(
    entry: &WorkloadEntry,
    annotations: &[AnnotationRead],
    explanation: &Explanation,
    ns: &NamespaceFacts,
) -> Vec<Lint> {
    let mut f = Findings {
        entry,
        out: Vec::new(),
    };
    if annotations.is_empty() {
        return f.out;
    }
    annotation_findings(&mut f, annotations);
    list_findings(&mut f, ns);
    verdict_findings(&mut f, explanation, ns);
    precise_key_findings(&mut f, explanation);
    // Only when nothing more precise says why.
    if f.out.is_empty() && !entry.policy.is_inert() && !explanation.configs.iter().any(|c| c.reload)
    {
        f.push(
            Severity::Warning,
            "nothing-to-act-on",
            "the reload annotations apply to no config this workload uses or names: no change \
             can reload it"
                .into(),
        );
    }
    f.out
}

/// `restart-by` asks for what cannot be done for this workload: `in-place` anywhere, or
/// `eviction` of a kind whose pods are not kept running by a controller that replaces them.
fn restart_not_possible(entry: &WorkloadEntry) -> Option<String> {
    use crate::pod_restart::{IN_PLACE_UNSUPPORTED, RestartBy, evicts_for};
    match entry.policy.restart_by {
        RestartBy::InPlace => Some(IN_PLACE_UNSUPPORTED.to_string()),
        RestartBy::Eviction if !evicts_for(entry.key.kind) => Some(format!(
            "restart-by: eviction is for workloads whose pods are replaced when evicted \
             (Deployment, StatefulSet, DaemonSet, Rollout, DeploymentConfig), not a {}",
            entry.key.kind
        )),
        _ => None,
    }
}

fn annotation_findings(f: &mut Findings<'_>, annotations: &[AnnotationRead]) {
    for problem in &f.entry.policy.problems {
        let check = match problem {
            PolicyProblem::InvalidPattern { .. } => "invalid-regex",
            PolicyProblem::InvalidPausePeriod { .. } => "invalid-pause-period",
            PolicyProblem::UnknownRolloutStrategy { .. } => "invalid-rollout-strategy",
            PolicyProblem::UnknownCronJobReloadStrategy { .. } => "invalid-cronjob-reload-strategy",
            PolicyProblem::InvalidWindow { .. } => "invalid-reload-window",
            PolicyProblem::InvalidDelay { .. } => "invalid-reload-delay",
            PolicyProblem::UnknownRestartBy { .. } => "invalid-restart-by",
        };
        f.push(Severity::Error, check, problem.to_string());
    }
    if let Some(why) = restart_not_possible(f.entry) {
        f.push(Severity::Error, "restart-by-not-possible", why);
    }
    for a in annotations {
        let is_bool = a.problem.as_deref().is_some_and(|p| p.contains("boolean"));
        if a.read && is_bool {
            let problem = a.problem.clone().unwrap_or_default();
            f.push(
                Severity::Error,
                "invalid-bool",
                format!("{}: {problem}", a.key),
            );
        } else if a.read && a.problem.as_deref().is_some_and(|p| p.contains("exactly")) {
            let problem = a.problem.clone().unwrap_or_default();
            f.push(
                Severity::Warning,
                "search-not-true",
                format!("{}: {problem}", a.key),
            );
        } else if !a.read {
            let note = a.note.clone().unwrap_or_default();
            f.push(
                Severity::Warning,
                "annotation-not-read",
                format!(
                    "{}={:?} on the {}: {note}",
                    a.key,
                    a.value,
                    a.source.as_str()
                ),
            );
        }
    }
}

fn list_findings(f: &mut Findings<'_>, ns: &NamespaceFacts) {
    let policy = f.entry.policy.clone();
    for kind in ConfigKind::ALL {
        let exists = |name: &str| ns.configs.contains_key(&(kind, name.to_string()));
        for pattern in &policy.for_type(kind).explicit {
            match pattern {
                NamePattern::Literal(name) if !exists(name) => f.push(
                    Severity::Error,
                    "missing-config",
                    format!("the {kind} reload list names '{name}', which does not exist"),
                ),
                NamePattern::Regex(re)
                    if !ns.configs.keys().any(|(k, n)| *k == kind && re.is_match(n)) =>
                {
                    f.push(
                        Severity::Warning,
                        "list-matches-nothing",
                        format!(
                            "the {kind} reload list entry '{}' matches no {kind} in the namespace",
                            re.as_str()
                        ),
                    )
                }
                _ => {}
            }
        }
        for excluded in &policy.excludes[type_index(kind)] {
            if let Some(p) = policy
                .for_type(kind)
                .explicit
                .iter()
                .find(|p| p.matches(excluded))
            {
                let entry = match p {
                    NamePattern::Literal(l) => l.to_string(),
                    NamePattern::Regex(r) => r.as_str().to_string(),
                };
                f.push(
                    Severity::Error,
                    "exclude-conflict",
                    format!(
                        "'{excluded}' is both excluded and named by the {kind} reload list \
                         ('{entry}'): the exclude wins, it never reloads"
                    ),
                );
            }
        }
    }
}

fn verdict_findings(f: &mut Findings<'_>, e: &Explanation, ns: &NamespaceFacts) {
    let policy = f.entry.policy.clone();
    for kind in ConfigKind::ALL {
        let t = policy.for_type(kind);
        let of_kind = || {
            e.configs
                .iter()
                .filter(move |c| c.kind == kind && c.referenced)
        };
        if t.typed_auto == Toggle::True && of_kind().next().is_none() {
            f.push(
                Severity::Warning,
                "typed-auto-without-config",
                format!("the {kind} auto annotation is on, but the pod template uses no {kind}"),
            );
        }
    }
    let search_kinds: Vec<ConfigKind> = ConfigKind::ALL
        .into_iter()
        .filter(|k| policy.for_type(*k).search)
        .collect();
    let matched = e.configs.iter().any(|c| {
        search_kinds.contains(&c.kind)
            && c.referenced
            && ns
                .configs
                .get(&(c.kind, c.name.clone()))
                .is_some_and(|s| s.matched)
    });
    if !search_kinds.is_empty() && !matched {
        f.push(
            Severity::Warning,
            "search-without-match",
            "search is on, but no config the pod template uses has match: \"true\"".into(),
        );
    }
    for c in e.configs.iter().filter(|c| c.table_reload) {
        if c.reason == NoReason::SecretTypeIgnored.as_str() {
            f.push(
                Severity::Error,
                "secret-type-ignored",
                format!("{}/{} is used, but {}", c.kind, c.name, c.because),
            );
        }
        if c.reason == NoReason::ConfigTypeNotWatched.as_str() {
            f.push(
                Severity::Error,
                "config-type-ignored",
                format!(
                    "{}/{} is used, but the controller does not watch {}s \
                     (--resources-to-ignore or --enable-csi-integration)",
                    c.kind, c.name, c.kind
                ),
            );
        }
    }
}

/// A workload asking for key-precise values (`kube-reloader.io/precise-keys: "true"`) that does
/// not get them: the controller runs with the mode off, or a config is read whole.
fn precise_key_findings(f: &mut Findings<'_>, e: &Explanation) {
    if f.entry.policy.precise_keys != Toggle::True {
        return;
    }
    if e.precise_keys == crate::config::PreciseKeys::Off {
        f.push(
            Severity::Warning,
            "precise-keys-off",
            "kube-reloader.io/precise-keys is \"true\", but the controller runs with \
             --precise-keys=off: any change of a config it uses rolls it"
                .into(),
        );
        return;
    }
    let whole = e.configs.iter().filter(|c| {
        c.reload
            && c.referenced
            && c.counted_keys.is_none()
            && c.kind != ConfigKind::SecretProviderClass
    });
    for c in whole {
        f.push(
            Severity::Warning,
            "precise-keys-whole-config",
            format!(
                "kube-reloader.io/precise-keys is \"true\", but {}/{} is read whole (envFrom, \
                 or a volume without items): a change of any of its keys rolls the workload",
                c.kind, c.name
            ),
        );
    }
}

/// `unknown-annotation`: an error when a known key is near (a typo: the intended annotation is
/// not in effect), a warning otherwise (a key no version of the controller reads, or one of a
/// newer Reloader). `annotations`: (key, where it sits: "" or " on the pod template").
fn unknown_annotations<'a>(
    keys: &AnnotationKeys,
    annotations: impl IntoIterator<Item = (&'a str, &'static str)>,
    subject: (&'static str, &str, &str),
) -> Vec<Lint> {
    let (kind, namespace, name) = subject;
    annotations
        .into_iter()
        .filter_map(|(key, place)| {
            let unknown = unknown_key(key, keys)?;
            let severity = match unknown.nearest {
                Some(_) => Severity::Error,
                None => Severity::Warning,
            };
            Some(Lint {
                severity,
                check: "unknown-annotation",
                kind,
                namespace: namespace.to_string(),
                name: name.to_string(),
                message: unknown.message(place),
            })
        })
        .collect()
}

/// `unknown-annotation` findings on a workload's metadata and pod template.
pub fn workload_unknown_annotations(
    keys: &AnnotationKeys,
    workload: &WorkloadKey,
    metadata: &BTreeMap<String, String>,
    template: &BTreeMap<String, String>,
) -> Vec<Lint> {
    let on_metadata = metadata.keys().map(|k| (k.as_str(), ""));
    let on_template = template
        .keys()
        .map(|k| (k.as_str(), " on the pod template"));
    let subject = (
        workload.kind.as_str(),
        &*workload.namespace,
        &*workload.name,
    );
    unknown_annotations(keys, on_metadata.chain(on_template), subject)
}

/// `unknown-annotation` findings on a ConfigMap, Secret or SecretProviderClass.
pub fn config_unknown_annotations<'a>(
    keys: &AnnotationKeys,
    kind: ConfigKind,
    namespace: &str,
    name: &str,
    annotation_keys: impl IntoIterator<Item = &'a str>,
) -> Vec<Lint> {
    let kind_name = match kind {
        ConfigKind::ConfigMap => "ConfigMap",
        ConfigKind::Secret => "Secret",
        ConfigKind::SecretProviderClass => "SecretProviderClass",
    };
    let annotations = annotation_keys.into_iter().map(|k| (k, ""));
    unknown_annotations(keys, annotations, (kind_name, namespace, name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{AnnotationKeys, Flags, Settings};
    use crate::explain::report::{ConfigSeen, ExplainContext, explain};
    use crate::index::workload_entry;
    use crate::model::WorkloadKind;
    use crate::reload_policy::ReloadPolicy;
    use clap::Parser;
    use serde_json::{Value, json};
    use std::collections::BTreeMap;

    fn lint(annotations: Value, container: Value, flags: &[&str]) -> Vec<&'static str> {
        let mut app = container;
        app["name"] = json!("app");
        let obj = json!({
            "metadata": {"name": "w", "namespace": "ns", "annotations": annotations},
            "spec": {"template": {"spec": {"containers": [app]}}}
        });
        let keys = AnnotationKeys::default();
        let entry = workload_entry(WorkloadKind::Deployment, &obj, &keys).unwrap();
        let meta: BTreeMap<String, String> =
            serde_json::from_value(obj["metadata"]["annotations"].clone()).unwrap();
        let reading = ReloadPolicy::read(&keys, &meta, &BTreeMap::new());
        let mut ns = NamespaceFacts {
            selected: true,
            ..Default::default()
        };
        for (kind, name) in [(ConfigKind::ConfigMap, "cfg"), (ConfigKind::Secret, "db")] {
            ns.configs.insert(
                (kind, name.into()),
                ConfigSeen {
                    selected: true,
                    hash: Some("h".into()),
                    ..Default::default()
                },
            );
        }
        let argv = std::iter::once("kube-reloader").chain(flags.iter().copied());
        let settings = Settings::try_from(Flags::try_parse_from(argv).unwrap()).unwrap();
        let spec = serde_json::from_value(obj["spec"]["template"]["spec"].clone()).unwrap();
        let none = |_: ConfigKind, _: &str| None;
        let ctx = ExplainContext {
            settings: &settings,
            namespace: &ns,
            spec: Some(&spec),
            recorded: &none,
        };
        let e = explain(&ctx, &entry, Vec::new(), None);
        lint_workload(&entry, &reading.annotations, &e, &ns)
            .into_iter()
            .map(|l| l.check)
            .collect()
    }

    #[test]
    fn each_check() {
        let cfg = json!({"envFrom": [{"configMapRef": {"name": "cfg"}}]});
        let db = json!({"envFrom": [{"secretRef": {"name": "db"}}]});
        let none = json!({});
        let cases = [
            (
                json!({"configmap.reloader.stakater.com/reload": "cfg,nope"}),
                &none,
                vec![],
                "missing-config",
            ),
            (
                json!({"configmap.reloader.stakater.com/reload": "x-.*"}),
                &none,
                vec![],
                "list-matches-nothing",
            ),
            (
                json!({"configmap.reloader.stakater.com/reload": "cfg,bad["}),
                &none,
                vec![],
                "invalid-regex",
            ),
            (
                json!({"reloader.stakater.com/auto": "true", "deployment.reloader.stakater.com/pause-period": "5 min"}),
                &cfg,
                vec![],
                "invalid-pause-period",
            ),
            (
                json!({"reloader.stakater.com/auto": "yes"}),
                &cfg,
                vec![],
                "invalid-bool",
            ),
            (
                json!({"reloader.stakater.com/auto": "true"}),
                &none,
                vec![],
                "nothing-to-act-on",
            ),
            (
                json!({"secret.reloader.stakater.com/auto": "true"}),
                &cfg,
                vec![],
                "typed-auto-without-config",
            ),
            (
                json!({"configmap.reloader.stakater.com/reload": "cfg", "configmaps.exclude.reloader.stakater.com/reload": "cfg"}),
                &none,
                vec![],
                "exclude-conflict",
            ),
            (
                json!({"reloader.stakater.com/search": "true"}),
                &cfg,
                vec![],
                "search-without-match",
            ),
            (
                json!({"reloader.stakater.com/auto": "true"}),
                &db,
                vec!["--resources-to-ignore=secrets"],
                "config-type-ignored",
            ),
            (
                json!({"reloader.stakater.com/auto": "true", "kube-reloader.io/reload-window": "sat 25:00-26:00"}),
                &cfg,
                vec![],
                "invalid-reload-window",
            ),
            (
                json!({"reloader.stakater.com/auto": "true", "kube-reloader.io/reload-delay": "soon"}),
                &cfg,
                vec![],
                "invalid-reload-delay",
            ),
            (
                json!({"reloader.stakater.com/auto": "true", "kube-reloader.io/restart-by": "evict"}),
                &cfg,
                vec![],
                "invalid-restart-by",
            ),
            (
                json!({"reloader.stakater.com/auto": "true", "kube-reloader.io/restart-by": "in-place"}),
                &cfg,
                vec![],
                "restart-by-not-possible",
            ),
        ];
        for (annotations, container, flags, check) in cases {
            let found = lint(annotations.clone(), container.clone(), &flags);
            assert!(found.contains(&check), "{annotations}: {found:?}");
        }
        let evicted = json!({"reloader.stakater.com/auto": "true", "kube-reloader.io/restart-by": "eviction"});
        assert_eq!(lint(evicted, cfg.clone(), &[]), Vec::<&str>::new());
        assert_eq!(
            lint(json!({"reloader.stakater.com/auto": "true"}), cfg, &[]),
            Vec::<&str>::new()
        );
    }

    #[test]
    fn a_workload_asking_for_precise_keys_is_told_when_it_does_not_get_them() {
        let env_from = json!({"envFrom": [{"configMapRef": {"name": "cfg"}}]});
        let key_ref = json!({"env": [{"name": "V", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "k"}}}]});
        let precise =
            json!({"reloader.stakater.com/auto": "true", "kube-reloader.io/precise-keys": "true"});
        let cases = [
            (&env_from, "--precise-keys=off", vec!["precise-keys-off"]),
            (&key_ref, "--precise-keys=off", vec!["precise-keys-off"]),
            (
                &env_from,
                "--precise-keys=annotated",
                vec!["precise-keys-whole-config"],
            ),
            // A key ref is what key-precise values are for.
            (&key_ref, "--precise-keys=annotated", vec![]),
            (&key_ref, "--precise-keys=all", vec![]),
        ];
        for (container, flag, expected) in cases {
            let found = lint(precise.clone(), container.clone(), &[flag]);
            assert_eq!(found, expected, "{container} with {flag}");
        }
    }

    #[test]
    fn unknown_annotations_on_workloads_and_configs() {
        let keys = AnnotationKeys::default();
        let key = WorkloadKey::new(WorkloadKind::Deployment, "ns", "w");
        let map = |pairs: &[&str]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|k| (k.to_string(), "true".into()))
                .collect()
        };
        let found = workload_unknown_annotations(
            &keys,
            &key,
            &map(&["reloader.stakater.com/atuo", "reloader.stakater.com/auto"]),
            &map(&["team.reloader.stakater.com/x", "example.com/y"]),
        );
        let summary: Vec<(Severity, &str)> = found
            .iter()
            .map(|f| (f.severity, f.message.as_str()))
            .collect();
        assert_eq!(
            summary,
            [
                (
                    Severity::Error,
                    "unknown annotation reloader.stakater.com/atuo: did you mean \
                     reloader.stakater.com/auto?"
                ),
                (
                    Severity::Warning,
                    "unknown annotation team.reloader.stakater.com/x on the pod template: no key \
                     of that name is read (it has no effect)"
                ),
            ]
        );
        assert!(found.iter().all(|f| f.check == "unknown-annotation"));
        let found = config_unknown_annotations(
            &keys,
            ConfigKind::Secret,
            "ns",
            "db",
            ["reloader.stakater.com/ignor", "reloader.stakater.com/match"],
        );
        assert_eq!(found.len(), 1);
        assert_eq!((found[0].kind, found[0].name.as_str()), ("Secret", "db"));
        assert!(
            found[0]
                .message
                .ends_with("did you mean reloader.stakater.com/ignore?")
        );
    }
}
