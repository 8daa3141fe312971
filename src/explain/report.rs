//! The answer to "would a change of this config reload this workload?", built from plain facts
//! with the controller's own functions: the index's workload entry (policy, uses, recorded
//! hashes), the decision table ([`evaluate_in_scope`]) and the container choice. Pure: the CLI
//! gathers the facts from the API server, `/debug/explain` from the live index.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::PodSpec;
use serde::Serialize;

use crate::config::{ReloadStrategy, Settings};
use crate::decide::{
    ConfigFacts, DecisionSwitches, NoReason, ReloadReason, ScopeFacts, Verdict, WorkloadFacts,
    evaluate, scope_verdict,
};
use crate::index::WorkloadEntry;
use crate::model::{ConfigKind, Counted, WorkloadKind};
use crate::references::{UseHow, choose_container, mounting_containers, visit_use_sites};
use crate::reload_policy::{AnnotationRead, NamePattern, Toggle};
use crate::reloader_format::naming::reload_env_var;

/// What is known of one config of the workload's namespace.
#[derive(Debug, Clone, Default)]
pub struct ConfigSeen {
    /// `ignore: "true"` on the config.
    pub ignore: bool,
    /// `match: "true"` on the config.
    pub matched: bool,
    /// Matches `--resource-label-selector` (true when there is none).
    pub selected: bool,
    /// Reloader's hash of its current content (None: not known, e.g. no CSI pod status yet).
    pub hash: Option<String>,
    /// Per-key digests of its content (with `--precise-keys` on), for key-precise values.
    pub keys: crate::reloader_format::precise::KeyDigests,
    /// What holds its workloads: a halted change rolled in waves (live, or kept in the
    /// cluster), the churn breaker (live only).
    pub held: Option<String>,
}

/// What is known of the workload's namespace.
#[derive(Debug, Clone, Default)]
pub struct NamespaceFacts {
    /// Selected by `--namespace-selector` (true when there is none).
    pub selected: bool,
    /// The configs that exist (CLI) or are indexed (live), by type and name.
    pub configs: BTreeMap<(ConfigKind, String), ConfigSeen>,
    /// Secrets that exist but the controller's watches exclude by type (`--ignore-secret-types`),
    /// by name, with their type (CLI only: the live index never sees them).
    pub unwatched_secret_types: BTreeMap<String, String>,
}

/// One place the pod template uses a config.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct UseReport {
    pub how: UseHow,
    /// The container reading it from env, or the volume holding it.
    pub place: String,
    /// Containers mounting the volume (volumes only); `init:` marks init containers.
    pub containers: Vec<String>,
    pub init_container: bool,
}

/// Whether the workload carries the config's current hash.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum HashState {
    /// The recorded hash is the current one.
    InSync,
    /// They differ and a change would reload: the controller rolls it now if it is running
    /// (and owns the namespace), else when it next starts.
    Pending,
    /// They differ but no reload will happen (see the verdict).
    Stale,
    /// Nothing recorded: never reloaded for this config; the next change will.
    NeverReloaded,
    /// The config does not exist (or, live, is not indexed).
    ConfigMissing,
    /// The current hash is not known.
    Unknown,
}

impl HashState {
    /// `reload`: the verdict, so that a config no change reloads is not promised a reload.
    pub fn describe(self, reload: bool) -> &'static str {
        match self {
            HashState::InSync => "in sync",
            HashState::Pending => {
                "a change is pending: a running controller reloads it now; otherwise it is \
                 reloaded when the controller next starts"
            }
            HashState::Stale => "differs, but no reload will happen (see the verdict)",
            HashState::NeverReloaded if reload => {
                "no hash recorded yet (never reloaded for it): the next change reloads it; a \
                 controller start leaves it alone"
            }
            HashState::NeverReloaded => "no hash recorded yet (never reloaded for it)",
            HashState::ConfigMissing => "the config does not exist",
            HashState::Unknown => "the config's current hash is not known",
        }
    }
}

/// The verdict for one config.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfigReport {
    pub kind: ConfigKind,
    pub name: String,
    /// The pod template mounts it or reads it from env.
    pub referenced: bool,
    pub uses: Vec<UseReport>,
    /// Reload-list entries naming it (`configmap.reloader.stakater.com/reload: 'app-.*'`).
    pub named_by: Vec<String>,
    /// The config exists (CLI), or is in the controller's index (live).
    pub exists: bool,
    /// Would a change of it reload the workload?
    pub reload: bool,
    /// `explicit_list`, `search`, `auto`, or the first rule that says no.
    pub reason: &'static str,
    pub because: String,
    /// What the decision table alone says (the annotations), whatever the controller's scope.
    pub table_reload: bool,
    /// The container that gets the env var (env-vars strategy, when known).
    pub container: Option<String>,
    pub env_var: Option<String>,
    pub recorded_hash: Option<String>,
    /// The value the workload would record now: Reloader's hash, or the key-precise value.
    pub current_hash: Option<String>,
    pub hash_state: HashState,
    /// The keys whose change rolls it (`None`: any key, the whole config counts).
    pub counted_keys: Option<Vec<String>>,
    /// The churn breaker holds reloads for this config: since when and until what.
    pub held: Option<String>,
}

/// The parsed policy, per config type.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TypePolicyReport {
    pub kind: ConfigKind,
    pub auto: &'static str,
    pub typed_auto: &'static str,
    pub search: bool,
    pub reload_list: Vec<String>,
    pub exclude: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyReport {
    pub by_type: Vec<TypePolicyReport>,
    pub rollout_strategy: &'static str,
    pub pause_period: Option<String>,
    /// `kube-reloader.io/reload-window` and `reload-delay` (the workload's own).
    pub reload_window: Option<String>,
    pub reload_delay: Option<String>,
    pub problems: Vec<String>,
}

/// Everything explain prints for one workload.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Explanation {
    pub kind: WorkloadKind,
    pub namespace: String,
    pub name: String,
    pub strategy: &'static str,
    pub auto_reload_all: bool,
    /// `--precise-keys`.
    pub precise_keys: crate::config::PreciseKeys,
    pub policy: PolicyReport,
    /// Where each annotation was read from (CLI only: the index keeps no raw annotations).
    pub annotations: Vec<AnnotationRead>,
    pub configs: Vec<ConfigReport>,
}

fn toggle(t: Toggle) -> &'static str {
    match t {
        Toggle::Unset => "unset",
        Toggle::True => "true",
        Toggle::False => "false",
    }
}

fn pattern_text(p: &NamePattern) -> String {
    match p {
        NamePattern::Literal(l) => l.to_string(),
        // Shown as written: the parser anchors entries as `^(?:entry)$`.
        NamePattern::Regex(r) => {
            let s = r.as_str();
            s.strip_prefix("^(?:")
                .and_then(|s| s.strip_suffix(")$"))
                .unwrap_or(s)
                .to_string()
        }
    }
}

pub fn policy_report(entry: &WorkloadEntry) -> PolicyReport {
    let p = &entry.policy;
    PolicyReport {
        by_type: ConfigKind::ALL
            .into_iter()
            .map(|kind| {
                let t = p.for_type(kind);
                TypePolicyReport {
                    kind,
                    auto: toggle(t.auto),
                    typed_auto: toggle(t.typed_auto),
                    search: t.search,
                    reload_list: t.explicit.iter().map(pattern_text).collect(),
                    exclude: p.excludes[crate::reload_policy::type_index(kind)]
                        .iter()
                        .map(|e| e.to_string())
                        .collect(),
                }
            })
            .collect(),
        rollout_strategy: match p.rollout_strategy {
            crate::reload_policy::RolloutStrategy::Rollout => "rollout",
            crate::reload_policy::RolloutStrategy::Restart => "restart",
        },
        pause_period: p.pause_period.map(|d| format!("{d:?}")),
        reload_window: p.timing.window.as_ref().map(|w| w.to_string()),
        reload_delay: p.timing.delay.map(crate::go_values::format_go_duration),
        problems: p.problems.iter().map(ToString::to_string).collect(),
    }
}

/// What explain needs besides the entry: settings, the namespace, and (CLI) the pod spec.
pub struct ExplainContext<'a> {
    pub settings: &'a Settings,
    pub namespace: &'a NamespaceFacts,
    /// The pod spec (CLI): how each config is used and which container gets the env var.
    pub spec: Option<&'a PodSpec>,
    /// The hash recorded for a config the entry does not track (regex-listed configs; CLI).
    pub recorded: &'a dyn Fn(ConfigKind, &str) -> Option<String>,
}

/// The configs explain reports on: those the template uses, those the reload lists name
/// literally, and the namespace's configs a regex entry matches. Sorted by type and name.
pub fn candidate_configs(entry: &WorkloadEntry, ns: &NamespaceFacts) -> Vec<(ConfigKind, String)> {
    let mut out: Vec<(ConfigKind, String)> = entry
        .edge_configs()
        .into_iter()
        .map(|k| (k.kind, k.name.to_string()))
        .collect();
    for (kind, name) in ns.configs.keys() {
        let listed = entry
            .policy
            .for_type(*kind)
            .explicit
            .iter()
            .any(|p| p.matches(name));
        if listed && !out.iter().any(|(k, n)| k == kind && n == name) {
            out.push((*kind, name.clone()));
        }
    }
    out.sort();
    out
}

fn use_reports(spec: &PodSpec, kind: ConfigKind, name: &str) -> Vec<UseReport> {
    let mut out = Vec::new();
    visit_use_sites(spec, |site| {
        if site.kind != kind || site.name != name {
            return;
        }
        let volume = !matches!(site.how, UseHow::EnvFrom | UseHow::EnvValueFrom);
        let containers = if volume {
            mounting_containers(spec, site.place)
                .into_iter()
                .map(|(c, init)| if init { format!("init:{c}") } else { c.into() })
                .collect()
        } else {
            Vec::new()
        };
        out.push(UseReport {
            how: site.how,
            place: site.place.to_string(),
            containers,
            init_container: site.init,
        });
    });
    out
}

fn scope_facts(ctx: &ExplainContext<'_>, kind: WorkloadKind, namespace: &str) -> ScopeFacts {
    let s = ctx.settings;
    ScopeFacts {
        namespace_ignored: s.namespace_ignored(namespace),
        namespace_watched: s.namespace_in_scope(namespace),
        namespace_selected: ctx.namespace.selected,
        // Jobs and CronJobs in --ignored-workload-types are rule 1 of the decision table.
        workload_kind_watched: s.handles_workload(kind) || s.ignored_workloads.contains(&kind),
        config_type_watched: true,
        secret_type_watched: true,
        config_selected: true,
        webhook: s.webhook_url.is_some(),
    }
}

/// What the decision table alone says, and the whole verdict (the scope first, in the same
/// order as `evaluate_in_scope`), with the sentence explaining it.
fn verdicts(
    ctx: &ExplainContext<'_>,
    entry: &WorkloadEntry,
    kind: ConfigKind,
    name: &str,
) -> (Verdict, Verdict, String) {
    let seen = ctx.namespace.configs.get(&(kind, name.to_string()));
    let ignored_type = (kind == ConfigKind::Secret)
        .then(|| ctx.namespace.unwatched_secret_types.get(name))
        .flatten();
    let scope = ScopeFacts {
        config_type_watched: ctx.settings.watches_config(kind),
        secret_type_watched: ignored_type.is_none(),
        config_selected: seen.is_none_or(|s| s.selected),
        ..scope_facts(ctx, entry.key.kind, &entry.key.namespace)
    };
    let table = evaluate(
        ConfigFacts {
            kind,
            name,
            ignore: seen.is_some_and(|s| s.ignore),
            matched: seen.is_some_and(|s| s.matched),
        },
        WorkloadFacts {
            kind: entry.key.kind,
            policy: &entry.policy,
            referenced: entry.references(kind, name),
        },
        DecisionSwitches {
            auto_reload_all: ctx.settings.auto_reload_all,
            ignored_workloads: &ctx.settings.ignored_workloads,
        },
    );
    let verdict = scope_verdict(scope).map_or(table, Verdict::No);
    let because = match verdict {
        Verdict::Reload(r) => reload_because(r, kind),
        Verdict::No(NoReason::SecretTypeIgnored) => {
            secret_type_because(ignored_type.map(String::as_str))
        }
        Verdict::No(r) => r.explain(kind, &ctx.settings.keys),
    };
    (table, verdict, because)
}

/// The report for one config of the workload.
pub fn config_report(
    ctx: &ExplainContext<'_>,
    entry: &WorkloadEntry,
    kind: ConfigKind,
    name: &str,
) -> ConfigReport {
    let seen = ctx.namespace.configs.get(&(kind, name.to_string()));
    let (table, verdict, because) = verdicts(ctx, entry, kind, name);
    let (reload, reason) = match verdict {
        Verdict::Reload(r) => (true, r.as_str()),
        Verdict::No(r) => (false, r.as_str()),
    };
    let explicit = matches!(verdict, Verdict::Reload(ReloadReason::ExplicitList));
    let strategy = ctx.settings.strategy_for(entry.key.kind);
    let container = (reload && strategy == ReloadStrategy::EnvVars)
        .then_some(ctx.spec)
        .flatten()
        .and_then(|spec| {
            let choice = choose_container(spec, kind, name, explicit)?;
            spec.containers.get(choice.index).map(|c| c.name.clone())
        });
    let recorded = entry
        .uses_config(kind, name)
        .and_then(|u| u.recorded.as_deref().map(String::from))
        .or_else(|| (ctx.recorded)(kind, name));
    let counted = entry.counted(kind, name, ctx.settings.precise_keys);
    let current = seen.and_then(|s| Some(current_value(s.hash.clone()?, &s.keys, &counted)));
    // A recorded value of either form is current (see ConfigState::is_current).
    let reads = entry
        .uses_config(kind, name)
        .map(|u| u.reads.clone())
        .unwrap_or_default();
    let in_either_form = seen.and_then(|s| {
        let full = s.hash.clone()?;
        let precise = current_value(full.clone(), &s.keys, &reads);
        Some([full, precise])
    });
    let recorded_as_current = match (&recorded, &in_either_form) {
        (Some(r), Some(forms)) if forms.contains(r) => current.clone(),
        _ => recorded.clone(),
    };
    let hash_state = hash_state(
        seen.is_some(),
        reload,
        recorded_as_current.as_deref(),
        current.as_deref(),
    );
    ConfigReport {
        kind,
        name: name.to_string(),
        referenced: entry.references(kind, name),
        uses: ctx
            .spec
            .map(|s| use_reports(s, kind, name))
            .unwrap_or_default(),
        named_by: entry
            .policy
            .for_type(kind)
            .explicit
            .iter()
            .filter(|p| p.matches(name))
            .map(|p| format!("'{}'", pattern_text(p)))
            .collect(),
        exists: seen.is_some(),
        reload,
        reason,
        because,
        table_reload: matches!(table, Verdict::Reload(_)),
        env_var: container.as_ref().map(|_| reload_env_var(kind, name)),
        container,
        recorded_hash: recorded,
        current_hash: current,
        hash_state,
        counted_keys: match counted {
            Counted::Whole => None,
            Counted::Keys(keys) => Some(keys.iter().map(|k| k.to_string()).collect()),
        },
        held: seen.and_then(|s| s.held.clone()),
    }
}

/// The value a workload counting `counted` records for content with Reloader hash `full`.
fn current_value(
    full: String,
    keys: &crate::reloader_format::precise::KeyDigests,
    counted: &Counted,
) -> String {
    match counted {
        Counted::Keys(k) => keys.precise_value(k).unwrap_or(full),
        Counted::Whole => full,
    }
}

/// The reason of [`NoReason::SecretTypeIgnored`], naming the Secret's type.
fn secret_type_because(secret_type: Option<&str>) -> String {
    match secret_type {
        Some(t) => format!(
            "the Secret has type {t}, which is in --ignore-secret-types: the controller never \
             lists or watches Secrets of that type, so its changes reload nothing"
        ),
        None => NoReason::SecretTypeIgnored.explain(ConfigKind::Secret, &Default::default()),
    }
}

fn reload_because(reason: ReloadReason, kind: ConfigKind) -> String {
    match reason {
        ReloadReason::ExplicitList => {
            format!("the workload's {kind} reload list names it (referenced or not)")
        }
        ReloadReason::Search => "search is on and the config has match: \"true\"".into(),
        ReloadReason::Auto => "auto (or the typed auto, or --auto-reload-all) and the pod \
                               template uses it"
            .into(),
    }
}

fn hash_state(
    exists: bool,
    reload: bool,
    recorded: Option<&str>,
    current: Option<&str>,
) -> HashState {
    match (exists, recorded, current) {
        (false, _, _) => HashState::ConfigMissing,
        (true, _, None) => HashState::Unknown,
        (true, None, Some(_)) => HashState::NeverReloaded,
        (true, Some(r), Some(c)) if r == c => HashState::InSync,
        (true, Some(_), Some(_)) if reload => HashState::Pending,
        _ => HashState::Stale,
    }
}

/// Explains the workload: every candidate config (or only `only`, with `--for`).
pub fn explain(
    ctx: &ExplainContext<'_>,
    entry: &WorkloadEntry,
    annotations: Vec<AnnotationRead>,
    only: Option<(ConfigKind, &str)>,
) -> Explanation {
    let configs = match only {
        Some((kind, name)) => vec![config_report(ctx, entry, kind, name)],
        None => candidate_configs(entry, ctx.namespace)
            .into_iter()
            .map(|(kind, name)| config_report(ctx, entry, kind, &name))
            .collect(),
    };
    Explanation {
        kind: entry.key.kind,
        namespace: entry.key.namespace.to_string(),
        name: entry.key.name.to_string(),
        strategy: ctx.settings.strategy_for(entry.key.kind).as_str(),
        auto_reload_all: ctx.settings.auto_reload_all,
        precise_keys: ctx.settings.precise_keys,
        policy: policy_report(entry),
        annotations,
        configs,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{AnnotationKeys, Flags};
    use crate::index::workload_entry;
    use clap::Parser;
    use serde_json::json;

    fn settings(args: &[&str]) -> Settings {
        let argv = std::iter::once("kube-reloader").chain(args.iter().copied());
        Settings::try_from(Flags::try_parse_from(argv).unwrap()).unwrap()
    }

    fn seen(hash: &str) -> ConfigSeen {
        ConfigSeen {
            selected: true,
            hash: Some(hash.into()),
            ..Default::default()
        }
    }

    fn web() -> (WorkloadEntry, PodSpec) {
        let obj = json!({
            "metadata": {"name": "web", "namespace": "ns", "annotations": {
                "reloader.stakater.com/auto": "true",
                "configmap.reloader.stakater.com/reload": "feature-.*"
            }},
            "spec": {"template": {"spec": {
                "containers": [
                    {"name": "app", "env": [{"name": "STAKATER_CFG_CONFIGMAP", "value": "h1"}]},
                    {"name": "side", "volumeMounts": [{"name": "v", "mountPath": "/v"}]}
                ],
                "initContainers": [{"name": "init", "envFrom": [{"secretRef": {"name": "db"}}]}],
                "volumes": [{"name": "v", "configMap": {"name": "cfg"}}]
            }}}
        });
        entry_and_spec(&obj)
    }

    fn entry_and_spec(obj: &serde_json::Value) -> (WorkloadEntry, PodSpec) {
        let entry =
            workload_entry(WorkloadKind::Deployment, obj, &AnnotationKeys::default()).unwrap();
        let spec = serde_json::from_value(obj["spec"]["template"]["spec"].clone()).unwrap();
        (entry, spec)
    }

    /// Per-key digests of a config holding a=1, b=2.
    fn digests_ab() -> crate::reloader_format::precise::KeyDigests {
        crate::reloader_format::precise::KeyDigests::of([
            ("a", b"1".as_slice()),
            ("b", b"2".as_slice()),
        ])
    }

    /// A workload reading key `a` of `cfg`, recording `recorded`; the config holds a=1, b=2.
    fn precise_case(flag: &str, recorded: &str) -> ConfigReport {
        let obj = json!({
            "metadata": {"name": "web", "namespace": "ns", "annotations": {"reloader.stakater.com/auto": "true"}},
            "spec": {"template": {"spec": {"containers": [{"name": "app", "env": [
                {"name": "A", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "a"}}},
                {"name": "STAKATER_CFG_CONFIGMAP", "value": recorded}
            ]}]}}}
        });
        let (entry, spec) = entry_and_spec(&obj);
        let keys = digests_ab();
        let mut ns = NamespaceFacts {
            selected: true,
            ..Default::default()
        };
        let config = ConfigSeen {
            keys,
            ..seen("full")
        };
        ns.configs
            .insert((ConfigKind::ConfigMap, "cfg".into()), config);
        let s = settings(&[flag]);
        let none = |_: ConfigKind, _: &str| None;
        let ctx = ExplainContext {
            settings: &s,
            namespace: &ns,
            spec: Some(&spec),
            recorded: &none,
        };
        explain(&ctx, &entry, Vec::new(), None).configs.remove(0)
    }

    #[test]
    fn a_key_precise_report_names_the_counted_keys_and_accepts_either_form() {
        let precise = digests_ab().precise_value(&["a".into()]).unwrap();
        let on = precise_case("--precise-keys=all", &precise);
        assert_eq!(on.counted_keys, Some(vec!["a".to_string()]));
        assert_eq!(on.current_hash.as_deref(), Some(precise.as_str()));
        assert_eq!(on.hash_state, HashState::InSync);
        let mut text = String::new();
        crate::explain::render::config_text(&mut text, &on);
        assert!(text.contains("counts:   keys a only"), "{text}");
        // Reloader's form recorded, the mode on: current too (switching rolls nothing).
        assert_eq!(
            precise_case("--precise-keys=all", "full").hash_state,
            HashState::InSync
        );
        // The mode off: Reloader's value, any key counts.
        let off = precise_case("--precise-keys=off", "full");
        assert_eq!(
            (off.counted_keys, off.current_hash.as_deref()),
            (None, Some("full"))
        );
        assert_eq!(
            precise_case("--precise-keys=all", "stale").hash_state,
            HashState::Pending
        );
    }

    #[test]
    fn verdicts_containers_and_hash_states() {
        let (entry, spec) = web();
        let mut ns = NamespaceFacts {
            selected: true,
            ..Default::default()
        };
        ns.configs
            .insert((ConfigKind::ConfigMap, "cfg".into()), seen("h2"));
        ns.configs
            .insert((ConfigKind::Secret, "db".into()), seen("s1"));
        ns.configs
            .insert((ConfigKind::ConfigMap, "feature-x".into()), seen("f1"));
        ns.configs
            .insert((ConfigKind::ConfigMap, "unrelated".into()), seen("u1"));
        let s = settings(&[]);
        let none = |_: ConfigKind, _: &str| None;
        let ctx = ExplainContext {
            settings: &s,
            namespace: &ns,
            spec: Some(&spec),
            recorded: &none,
        };
        let e = explain(&ctx, &entry, Vec::new(), None);
        let names: Vec<&str> = e.configs.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(
            names,
            ["cfg", "feature-x", "db"],
            "regex-listed, not unrelated"
        );
        let cfg = &e.configs[0];
        assert!(cfg.reload && cfg.reason == "auto");
        assert_eq!(
            cfg.container.as_deref(),
            Some("side"),
            "the mounting container"
        );
        assert_eq!(
            cfg.hash_state,
            HashState::Pending,
            "recorded h1, current h2"
        );
        assert_eq!(cfg.uses[0].containers, ["side"]);
        let feature = &e.configs[1];
        assert_eq!(feature.reason, "explicit_list");
        assert_eq!(feature.named_by, ["'feature-.*'"]);
        assert_eq!(feature.container.as_deref(), Some("app"), "containers[0]");
        assert_eq!(feature.hash_state, HashState::NeverReloaded);
        let db = &e.configs[2];
        assert!(db.uses[0].init_container);
        assert_eq!(
            db.container.as_deref(),
            Some("app"),
            "init use -> containers[0]"
        );
        // The same configs under other controller flags.
        let s = settings(&[
            "--resources-to-ignore=secrets",
            "--reload-strategy=annotations",
        ]);
        let ctx = ExplainContext {
            settings: &s,
            ..ctx
        };
        let db = config_report(&ctx, &entry, ConfigKind::Secret, "db");
        assert_eq!(
            (db.reload, db.reason, db.table_reload),
            (false, "config_type_not_watched", true)
        );
        let cfg = config_report(&ctx, &entry, ConfigKind::ConfigMap, "cfg");
        assert_eq!(
            cfg.container, None,
            "no env var with the annotations strategy"
        );
        let gone = config_report(&ctx, &entry, ConfigKind::ConfigMap, "gone");
        assert_eq!(gone.hash_state, HashState::ConfigMissing);
        assert_eq!(gone.reason, "not_referenced");
    }

    #[test]
    fn a_secret_of_an_ignored_type_says_no_naming_the_type() {
        let (entry, spec) = web();
        let mut ns = NamespaceFacts {
            selected: true,
            ..Default::default()
        };
        ns.configs
            .insert((ConfigKind::Secret, "db".into()), seen("s1"));
        ns.unwatched_secret_types
            .insert("db".into(), "helm.sh/release.v1".into());
        let s = settings(&[]);
        let none = |_: ConfigKind, _: &str| None;
        let ctx = ExplainContext {
            settings: &s,
            namespace: &ns,
            spec: Some(&spec),
            recorded: &none,
        };
        let db = config_report(&ctx, &entry, ConfigKind::Secret, "db");
        assert_eq!(
            (db.reload, db.reason, db.table_reload, db.exists),
            (false, "secret_type_ignored", true, true)
        );
        assert!(db.because.contains("helm.sh/release.v1"), "{}", db.because);
        assert!(
            db.because.contains("--ignore-secret-types"),
            "{}",
            db.because
        );
        // --resources-to-ignore=secrets is the rule that comes first.
        let s = settings(&["--resources-to-ignore=secrets"]);
        let ctx = ExplainContext {
            settings: &s,
            ..ctx
        };
        let db = config_report(&ctx, &entry, ConfigKind::Secret, "db");
        assert_eq!(db.reason, "config_type_not_watched");
    }

    #[test]
    fn hash_states() {
        assert_eq!(
            hash_state(true, true, Some("a"), Some("a")),
            HashState::InSync
        );
        assert_eq!(
            hash_state(true, false, Some("a"), Some("b")),
            HashState::Stale
        );
        assert_eq!(
            hash_state(true, true, Some("a"), Some("b")),
            HashState::Pending
        );
        assert_eq!(hash_state(true, true, None, None), HashState::Unknown);
        assert_eq!(
            hash_state(false, true, None, None),
            HashState::ConfigMissing
        );
    }
}
