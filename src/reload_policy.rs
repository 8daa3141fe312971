//! A workload's reload policy, parsed once from its annotations when the workload is indexed,
//! so that a config event only evaluates plain data. Pure: no Kubernetes I/O.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use regex::Regex;

use crate::config::AnnotationKeys;
use crate::go_values::parse_go_duration;
use crate::model::ConfigKind;
use crate::pod_restart::RestartBy;
use crate::reload_windows::ReloadWindow;

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
            Some(v) => match crate::go_values::parse_go_bool(v) {
                Ok(true) => Toggle::True,
                _ => Toggle::False,
            },
        }
    }

    /// What is wrong with a non-empty value [`Toggle::parse`] reads as `False` without it being
    /// a false boolean (explain and lint report it; the controller reads it as Reloader does).
    pub fn problem(value: &str) -> Option<String> {
        (!value.is_empty() && crate::go_values::parse_go_bool(value).is_err()).then(|| {
            format!(
                "'{value}' is not a boolean (Go's ParseBool): it reads as false, which also opts \
                 the workload out of --auto-reload-all"
            )
        })
    }
}

/// Where an annotation was read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub enum AnnotationSource {
    Metadata,
    PodTemplate,
}

impl AnnotationSource {
    pub fn as_str(self) -> &'static str {
        match self {
            AnnotationSource::Metadata => "metadata",
            AnnotationSource::PodTemplate => "pod template",
        }
    }
}

/// One reload annotation found on a workload, as the policy parser read it (or did not).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AnnotationRead {
    pub key: String,
    pub value: String,
    pub source: AnnotationSource,
    /// The config types it was read for (empty for type-less ones: rollout strategy, pause).
    pub kinds: Vec<ConfigKind>,
    /// False when the parser did not read it; `note` says why.
    pub read: bool,
    pub note: Option<String>,
    /// What is wrong with the value, if anything.
    pub problem: Option<String>,
}

/// A policy with the record of every annotation it was read from (explain, lint).
#[derive(Debug, Clone)]
pub struct PolicyReading {
    pub policy: ReloadPolicy,
    pub annotations: Vec<AnnotationRead>,
}

/// Collects [`AnnotationRead`]s while parsing; a no-op for the controller (`None`).
struct Trace<'a>(Option<&'a mut Vec<AnnotationRead>>);

impl Trace<'_> {
    fn note(
        &mut self,
        key: &str,
        value: &str,
        source: AnnotationSource,
        kind: Option<ConfigKind>,
        unread: Option<String>,
    ) {
        let Some(reads) = self.0.as_deref_mut() else {
            return;
        };
        let read = unread.is_none();
        if let Some(same) = reads
            .iter_mut()
            .find(|r| r.key == key && r.source == source && r.read == read && r.note == unread)
        {
            same.kinds.extend(kind);
            return;
        }
        reads.push(AnnotationRead {
            key: key.to_string(),
            value: value.to_string(),
            source,
            kinds: kind.into_iter().collect(),
            read,
            note: unread,
            problem: None,
        });
    }
}

/// A config's `ignore` / `match` annotation: on only with exactly `"true"` (as Reloader reads
/// them). The watches and explain read config annotations through this one function.
pub fn config_flag(annotations: &BTreeMap<String, String>, key: &str) -> bool {
    annotations.get(key).map(String::as_str) == Some("true")
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
    UnknownCronJobReloadStrategy {
        value: String,
    },
    InvalidWindow {
        value: String,
        error: String,
    },
    InvalidDelay {
        value: String,
        error: String,
    },
    UnknownRestartBy {
        value: String,
    },
}

impl PolicyProblem {
    /// The annotation the problem is about.
    pub fn annotation<'a>(&'a self, keys: &'a AnnotationKeys) -> &'a str {
        match self {
            PolicyProblem::InvalidPattern { annotation, .. } => annotation,
            PolicyProblem::InvalidPausePeriod { .. } => &keys.pause_period,
            PolicyProblem::UnknownRolloutStrategy { .. } => &keys.rollout_strategy,
            PolicyProblem::UnknownCronJobReloadStrategy { .. } => &keys.cronjob_reload_strategy,
            PolicyProblem::InvalidWindow { .. } => &keys.reload_window,
            PolicyProblem::InvalidDelay { .. } => &keys.reload_delay,
            PolicyProblem::UnknownRestartBy { .. } => &keys.restart_by,
        }
    }
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
            PolicyProblem::UnknownCronJobReloadStrategy { value } => write!(
                f,
                "cronjob reload strategy '{value}' is unknown (patch, or unset to create a Job); creating a Job"
            ),
            PolicyProblem::InvalidWindow { value, error } => write!(
                f,
                "reload window '{value}' is not a window and is ignored (reloads run at any time): {error}"
            ),
            PolicyProblem::InvalidDelay { value, error } => write!(
                f,
                "reload delay '{value}' is not a duration and is ignored: {error}"
            ),
            PolicyProblem::UnknownRestartBy { value } => write!(
                f,
                "restart-by '{value}' is unknown (eviction, in-place, or template); the pod template is changed"
            ),
        }
    }
}

/// A workload's `rollout-strategy` (metadata only), with the problem of a value that is neither
/// `rollout` nor `restart` (which then means `rollout`). The one reading of it: the policy and
/// the writer (on the object it is about to write) both use it.
pub fn rollout_strategy_of(
    keys: &AnnotationKeys,
    metadata: &BTreeMap<String, String>,
) -> (RolloutStrategy, Option<PolicyProblem>) {
    let choices = [
        ("", RolloutStrategy::Rollout),
        ("rollout", RolloutStrategy::Rollout),
        ("restart", RolloutStrategy::Restart),
    ];
    choice_of(metadata.get(&keys.rollout_strategy), &choices, |value| {
        PolicyProblem::UnknownRolloutStrategy { value }
    })
}

/// A CronJob's `cronjob-reload-strategy` (metadata only): `patch` patches its job template (and
/// re-creates its running Jobs); anything else creates a Job at once, as Reloader does, an
/// unknown value being reported.
pub fn cronjob_reload_strategy_of(
    keys: &AnnotationKeys,
    metadata: &BTreeMap<String, String>,
) -> (CronJobReloadStrategy, Option<PolicyProblem>) {
    let choices = [
        ("", CronJobReloadStrategy::CreateJob),
        ("immediate-job", CronJobReloadStrategy::CreateJob),
        ("patch", CronJobReloadStrategy::Patch),
    ];
    choice_of(
        metadata.get(&keys.cronjob_reload_strategy),
        &choices,
        |value| PolicyProblem::UnknownCronJobReloadStrategy { value },
    )
}

/// How a workload's pods are restarted (`kube-reloader.io/restart-by`, metadata only); an
/// unknown value is reported and the template is changed, as without the annotation.
pub fn restart_by_of(
    keys: &AnnotationKeys,
    metadata: &BTreeMap<String, String>,
) -> (RestartBy, Option<PolicyProblem>) {
    choice_of(
        metadata.get(&keys.restart_by),
        &RestartBy::CHOICES,
        |value| PolicyProblem::UnknownRestartBy { value },
    )
}

/// As [`restart_by_of`] for a workload of `kind`: without the annotation, a kind declared with
/// `reload-by=eviction` is restarted by eviction; a pod always is (it has no template that
/// anything would roll).
pub fn restart_by_for(
    kind: crate::model::WorkloadKind,
    keys: &AnnotationKeys,
    metadata: &BTreeMap<String, String>,
) -> (RestartBy, Option<PolicyProblem>) {
    if kind == crate::model::WorkloadKind::Pod {
        return (RestartBy::Eviction, None);
    }
    let declared = kind.custom().and_then(|c| c.reload_by);
    match (metadata.contains_key(&keys.restart_by), declared) {
        (false, Some(crate::custom_kinds::ReloadBy::Eviction)) => (RestartBy::Eviction, None),
        _ => restart_by_of(keys, metadata),
    }
}

/// A value among `choices` (trimmed; absent reads as ""), or the first choice with the problem
/// `unknown` makes of it.
fn choice_of<T: Copy>(
    value: Option<&String>,
    choices: &[(&str, T)],
    unknown: impl FnOnce(String) -> PolicyProblem,
) -> (T, Option<PolicyProblem>) {
    let value = value.map_or("", |v| v.trim());
    match choices.iter().find(|(name, _)| *name == value) {
        Some((_, choice)) => (*choice, None),
        None => (choices[0].1, Some(unknown(value.to_string()))),
    }
}

/// How a CronJob is reloaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum CronJobReloadStrategy {
    /// A Job created from the (edited) job template at once; the CronJob is not modified.
    #[default]
    CreateJob,
    /// The CronJob's job template patched, so its next runs use the new value; its running Jobs
    /// are re-created.
    Patch,
}

/// A Deployment's `pause-period` (metadata only): `None` when absent or zero.
pub fn pause_period_of(
    keys: &AnnotationKeys,
    metadata: &BTreeMap<String, String>,
) -> Result<Option<Duration>, PolicyProblem> {
    let Some(value) = metadata.get(keys.pause_period.as_str()) else {
        return Ok(None);
    };
    match parse_go_duration(value) {
        Ok(d) => Ok(Some(d).filter(|d| *d > Duration::ZERO)),
        Err(e) => Err(PolicyProblem::InvalidPausePeriod {
            value: value.clone(),
            error: e.to_string(),
        }),
    }
}

/// When a workload (or a namespace) may be reloaded: its maintenance window and the delay
/// after a change, each `None` when absent or malformed (a malformed one is a problem and
/// reloads run as if it were absent).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReloadTiming {
    pub window: Option<Arc<ReloadWindow>>,
    pub delay: Option<Duration>,
}

impl ReloadTiming {
    /// From `annotations` (a workload's metadata, or a namespace's).
    pub fn read(
        keys: &AnnotationKeys,
        annotations: &BTreeMap<String, String>,
    ) -> (ReloadTiming, Vec<PolicyProblem>) {
        let mut problems = Vec::new();
        let window = annotations.get(&keys.reload_window).and_then(|value| {
            ReloadWindow::parse(value)
                .map_err(|e| {
                    problems.push(PolicyProblem::InvalidWindow {
                        value: value.clone(),
                        error: e.to_string(),
                    })
                })
                .ok()
        });
        let delay =
            annotations
                .get(&keys.reload_delay)
                .and_then(|value| match parse_go_duration(value) {
                    Ok(d) => Some(d).filter(|d| *d > Duration::ZERO),
                    Err(e) => {
                        problems.push(PolicyProblem::InvalidDelay {
                            value: value.clone(),
                            error: e.to_string(),
                        });
                        None
                    }
                });
        let timing = ReloadTiming {
            window: window.map(Arc::new),
            delay,
        };
        (timing, problems)
    }

    /// No window and no delay: reloads go out as soon as they are decided.
    pub fn is_any_time(&self) -> bool {
        self.window.is_none() && self.delay.is_none()
    }

    /// The workload's own where it has one, else the namespace's, each part on its own.
    pub fn or(&self, namespace: &ReloadTiming) -> ReloadTiming {
        ReloadTiming {
            window: self.window.clone().or_else(|| namespace.window.clone()),
            delay: self.delay.or(namespace.delay),
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
    precise_keys: Toggle,
    rollout_strategy: RolloutStrategy,
    pause_period: Option<Duration>,
    restart_by: RestartBy,
}

/// Everything a workload's annotations say about reloading it.
#[derive(Debug, Clone, Default)]
pub struct ReloadPolicy {
    pub by_type: [TypePolicy; 3],
    /// Exclude lists, exact names, read from metadata only.
    pub excludes: [Vec<Arc<str>>; 3],
    pub rollout_strategy: RolloutStrategy,
    pub pause_period: Option<Duration>,
    /// `kube-reloader.io/precise-keys` (metadata): this workload counts only the keys it reads
    /// (`true`), or the whole config (`false`), whatever `--precise-keys` says.
    pub precise_keys: Toggle,
    /// `kube-reloader.io/reload-window` and `reload-delay` (metadata): when it may be reloaded.
    pub timing: ReloadTiming,
    /// `kube-reloader.io/restart-by` (metadata): how its pods are restarted.
    pub restart_by: RestartBy,
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

    /// The workload counts only the keys of a config it reads (key-precise values).
    pub fn counts_keys(&self, mode: crate::config::PreciseKeys) -> bool {
        use crate::config::PreciseKeys;
        match mode {
            PreciseKeys::Off => false,
            PreciseKeys::Annotated => self.precise_keys == Toggle::True,
            PreciseKeys::All => self.precise_keys != Toggle::False,
        }
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
            || !self.problems.is_empty()
            || !self.timing.is_any_time();
        (!lists).then(|| SimplePolicy {
            switches: self
                .by_type
                .each_ref()
                .map(|t| (t.auto, t.typed_auto, t.search)),
            precise_keys: self.precise_keys,
            rollout_strategy: self.rollout_strategy,
            pause_period: self.pause_period,
            restart_by: self.restart_by,
        })
    }

    /// Parses the policy from metadata and pod-template annotations.
    pub fn parse(
        keys: &AnnotationKeys,
        metadata: &BTreeMap<String, String>,
        template: &BTreeMap<String, String>,
    ) -> ReloadPolicy {
        Self::parse_traced(keys, metadata, template, Trace(None))
    }

    /// [`ReloadPolicy::parse`], also recording where each annotation was read from, which ones
    /// were not read and why, and the problem of each malformed value.
    pub fn read(
        keys: &AnnotationKeys,
        metadata: &BTreeMap<String, String>,
        template: &BTreeMap<String, String>,
    ) -> PolicyReading {
        let mut annotations = Vec::new();
        let policy = Self::parse_traced(keys, metadata, template, Trace(Some(&mut annotations)));
        for read in &mut annotations {
            let bool_key = read.key == keys.auto
                || [&keys.configmap_auto, &keys.secret_auto, &keys.spc_auto].contains(&&read.key);
            read.problem = if !read.read {
                None
            } else if bool_key {
                Toggle::problem(&read.value)
            } else if read.key == keys.search && read.value != "true" {
                Some(format!(
                    "search is on only with exactly \"true\"; '{}' leaves it off",
                    read.value
                ))
            } else {
                let found: Vec<String> = policy
                    .problems
                    .iter()
                    .filter(|p| p.annotation(keys) == read.key)
                    .map(ToString::to_string)
                    .collect();
                (!found.is_empty()).then(|| found.join("; "))
            };
        }
        PolicyReading {
            policy,
            annotations,
        }
    }

    fn parse_traced(
        keys: &AnnotationKeys,
        metadata: &BTreeMap<String, String>,
        template: &BTreeMap<String, String>,
        mut trace: Trace<'_>,
    ) -> ReloadPolicy {
        let mut problems = Vec::new();
        let by_type = ConfigKind::ALL.map(|kind| {
            let (reload_key, typed_auto_key) = match kind {
                ConfigKind::ConfigMap => (&keys.configmap_reload, &keys.configmap_auto),
                ConfigKind::Secret => (&keys.secret_reload, &keys.secret_auto),
                ConfigKind::SecretProviderClass => (&keys.spc_reload, &keys.spc_auto),
            };
            let four = [reload_key, &keys.auto, typed_auto_key, &keys.search];
            let on_metadata = four.iter().find(|k| metadata.contains_key(k.as_str()));
            let source = if on_metadata.is_some() {
                metadata
            } else {
                template
            };
            if trace.0.is_some() {
                trace_type_source(&mut trace, kind, &four, metadata, template, on_metadata);
            }
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
            trace_metadata_only(&mut trace, key, Some(kind), metadata, template);
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
        trace_metadata_only(&mut trace, &keys.rollout_strategy, None, metadata, template);
        trace_metadata_only(&mut trace, &keys.pause_period, None, metadata, template);
        let (rollout_strategy, problem) = rollout_strategy_of(keys, metadata);
        problems.extend(problem);
        problems.extend(cronjob_reload_strategy_of(keys, metadata).1);
        let pause_period = pause_period_of(keys, metadata).unwrap_or_else(|problem| {
            problems.push(problem);
            None
        });
        trace_metadata_only(&mut trace, &keys.precise_keys, None, metadata, template);
        let precise_keys = Toggle::parse(metadata.get(&keys.precise_keys).map(String::as_str));
        trace_metadata_only(&mut trace, &keys.reload_window, None, metadata, template);
        trace_metadata_only(&mut trace, &keys.reload_delay, None, metadata, template);
        let (timing, timing_problems) = ReloadTiming::read(keys, metadata);
        problems.extend(timing_problems);
        trace_metadata_only(&mut trace, &keys.restart_by, None, metadata, template);
        let (restart_by, problem) = restart_by_of(keys, metadata);
        problems.extend(problem);
        problems.dedup();
        ReloadPolicy {
            by_type,
            excludes,
            rollout_strategy,
            pause_period,
            precise_keys,
            timing,
            restart_by,
            problems,
        }
    }
}

/// Records the four per-type annotations of `kind`: read from the chosen place, and the ones in
/// the other place not read (Reloader reads the four from one place only).
fn trace_type_source(
    trace: &mut Trace<'_>,
    kind: ConfigKind,
    four: &[&String; 4],
    metadata: &BTreeMap<String, String>,
    template: &BTreeMap<String, String>,
    on_metadata: Option<&&String>,
) {
    use AnnotationSource::{Metadata, PodTemplate};
    let (read_from, unread_from, why) = match on_metadata {
        Some(key) => (
            (Metadata, metadata),
            (PodTemplate, template),
            format!(
                "not read for {kind}s: the metadata has {key}, and the four {kind} annotations \
                 are read from one place"
            ),
        ),
        None => ((PodTemplate, template), (Metadata, metadata), String::new()),
    };
    for key in four {
        if let Some(v) = read_from.1.get(key.as_str()) {
            trace.note(key, v, read_from.0, Some(kind), None);
        }
        if on_metadata.is_some()
            && let Some(v) = unread_from.1.get(key.as_str())
        {
            trace.note(key, v, unread_from.0, Some(kind), Some(why.clone()));
        }
    }
}

/// Records an annotation read from the metadata only (and the same key on the pod template,
/// which is not read).
fn trace_metadata_only(
    trace: &mut Trace<'_>,
    key: &str,
    kind: Option<ConfigKind>,
    metadata: &BTreeMap<String, String>,
    template: &BTreeMap<String, String>,
) {
    if trace.0.is_none() {
        return;
    }
    if let Some(v) = metadata.get(key) {
        trace.note(key, v, AnnotationSource::Metadata, kind, None);
    }
    if let Some(v) = template.get(key) {
        let why = "not read: this annotation is read from the workload's metadata only".to_string();
        trace.note(key, v, AnnotationSource::PodTemplate, kind, Some(why));
    }
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
    fn the_rollout_strategy_is_read_trimmed_as_the_writer_reads_it() {
        let keys = AnnotationKeys::default();
        let meta = |v: &str| BTreeMap::from([(keys.rollout_strategy.clone(), v.to_string())]);
        assert_eq!(
            rollout_strategy_of(&keys, &meta(" restart")).0,
            RolloutStrategy::Restart
        );
        assert_eq!(
            rollout_strategy_of(&keys, &meta("rollout ")).0,
            RolloutStrategy::Rollout
        );
        let (strategy, problem) = rollout_strategy_of(&keys, &meta("Restart"));
        assert_eq!(strategy, RolloutStrategy::Rollout);
        assert!(problem.is_some(), "an unknown value is reported");
        let cron =
            |v: &str| BTreeMap::from([(keys.cronjob_reload_strategy.clone(), v.to_string())]);
        assert_eq!(
            cronjob_reload_strategy_of(&keys, &cron(" patch")),
            (CronJobReloadStrategy::Patch, None)
        );
        assert_eq!(
            cronjob_reload_strategy_of(&keys, &BTreeMap::new()),
            (CronJobReloadStrategy::CreateJob, None)
        );
        let (strategy, problem) = cronjob_reload_strategy_of(&keys, &cron("Patch"));
        assert_eq!(strategy, CronJobReloadStrategy::CreateJob);
        assert!(problem.is_some(), "an unknown value is reported");
        let pause = |v: &str| BTreeMap::from([(keys.pause_period.clone(), v.to_string())]);
        assert_eq!(pause_period_of(&keys, &pause("0s")), Ok(None));
        assert_eq!(
            pause_period_of(&keys, &pause("90s")),
            Ok(Some(Duration::from_secs(90)))
        );
        assert!(pause_period_of(&keys, &pause("soon")).is_err());
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
    fn a_window_and_a_delay_are_read_from_metadata_and_a_bad_one_is_a_problem() {
        let p = parse(
            &[
                ("kube-reloader.io/reload-window", "sat,sun 01:00-05:00"),
                ("kube-reloader.io/reload-delay", "2m"),
            ],
            &[],
        );
        assert_eq!(p.timing.delay, Some(Duration::from_secs(120)));
        let window = p.timing.window.as_ref().map(|w| w.to_string());
        assert_eq!(window.as_deref(), Some("sat,sun 01:00-05:00"));
        assert!(
            p.problems.is_empty() && p.simple().is_none(),
            "not shared: it has timing"
        );
        let p = parse(
            &[
                ("kube-reloader.io/reload-window", "weekends"),
                ("kube-reloader.io/reload-delay", "soon"),
            ],
            &[],
        );
        assert!(p.timing.is_any_time(), "malformed: reloads run at any time");
        let problems: Vec<String> = p.problems.iter().map(ToString::to_string).collect();
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[0].starts_with("reload window 'weekends' is not a window"));
        // Read from metadata only, as the pause period.
        let p = parse(&[], &[("kube-reloader.io/reload-delay", "2m")]);
        assert!(p.timing.is_any_time());
    }

    #[test]
    fn restart_by_is_read_from_metadata_and_an_unknown_value_changes_the_template() {
        let by = |meta: &[(&str, &str)], template: &[(&str, &str)]| {
            let p = parse(meta, template);
            let problems: Vec<String> = p.problems.iter().map(ToString::to_string).collect();
            (p.restart_by, problems)
        };
        let key = "kube-reloader.io/restart-by";
        assert_eq!(by(&[(key, "eviction")], &[]), (RestartBy::Eviction, vec![]));
        assert_eq!(by(&[(key, "in-place")], &[]), (RestartBy::InPlace, vec![]));
        assert_eq!(
            by(&[(key, " template ")], &[]),
            (RestartBy::Template, vec![])
        );
        let (restart_by, problems) = by(&[(key, "evict")], &[]);
        assert_eq!(restart_by, RestartBy::Template);
        assert_eq!(
            problems,
            [
                "restart-by 'evict' is unknown (eviction, in-place, or template); the pod template is changed"
            ]
        );
        assert_eq!(
            by(&[], &[(key, "eviction")]),
            (RestartBy::Template, vec![]),
            "metadata only"
        );
        // Shared like any simple policy, but never with a policy that changes templates.
        let evicted = parse(&[(key, "eviction")], &[]).shared();
        let templated = parse(&[], &[]).shared();
        assert!(!Arc::ptr_eq(&evicted, &templated));
    }

    #[test]
    fn reading_records_where_each_annotation_came_from() {
        let keys = AnnotationKeys::default();
        let r = ReloadPolicy::read(
            &keys,
            &map(&[
                ("secret.reloader.stakater.com/reload", "db, bad["),
                ("configmaps.exclude.reloader.stakater.com/reload", "x"),
                ("deployment.reloader.stakater.com/pause-period", "5 minutes"),
            ]),
            &map(&[
                ("reloader.stakater.com/auto", "yes"),
                ("reloader.stakater.com/search", "True"),
                ("reloader.stakater.com/rollout-strategy", "restart"),
            ]),
        );
        let find = |key: &str, source| {
            r.annotations
                .iter()
                .filter(|a| a.key == key && a.source == source)
                .cloned()
                .collect::<Vec<_>>()
        };
        use AnnotationSource::{Metadata, PodTemplate};
        let list = find("secret.reloader.stakater.com/reload", Metadata);
        assert_eq!(list.len(), 1);
        assert_eq!(list[0].kinds, [ConfigKind::Secret]);
        assert!(list[0].problem.as_deref().unwrap().contains("bad["));
        // The template's auto is read for configmaps and CSI, not for secrets.
        let auto = find("reloader.stakater.com/auto", PodTemplate);
        assert_eq!(auto.len(), 2, "{auto:?}");
        let read = auto.iter().find(|a| a.read).unwrap();
        assert_eq!(
            read.kinds,
            [ConfigKind::ConfigMap, ConfigKind::SecretProviderClass]
        );
        assert!(read.problem.as_deref().unwrap().contains("not a boolean"));
        let unread = auto.iter().find(|a| !a.read).unwrap();
        assert_eq!(unread.kinds, [ConfigKind::Secret]);
        assert!(
            unread
                .note
                .as_deref()
                .unwrap()
                .contains("secret.reloader.stakater.com/reload")
        );
        let search = find("reloader.stakater.com/search", PodTemplate);
        assert!(search[0].problem.as_deref().unwrap().contains("exactly"));
        let pause = find("deployment.reloader.stakater.com/pause-period", Metadata);
        assert!(pause[0].problem.as_deref().unwrap().contains("5 minutes"));
        // Metadata-only annotations on the template are not read.
        let strategy = find("reloader.stakater.com/rollout-strategy", PodTemplate);
        assert!(!strategy[0].read);
        assert_eq!(r.policy.rollout_strategy, RolloutStrategy::Rollout);
        assert_eq!(
            find("configmaps.exclude.reloader.stakater.com/reload", Metadata)[0].kinds,
            [ConfigKind::ConfigMap]
        );
    }

    #[test]
    fn reading_gives_the_policy_parse_gives() {
        let meta = map(&[("reloader.stakater.com/auto", "true")]);
        let tmpl = map(&[("configmap.reloader.stakater.com/reload", "a.*")]);
        let keys = AnnotationKeys::default();
        let parsed = ReloadPolicy::parse(&keys, &meta, &tmpl);
        let read = ReloadPolicy::read(&keys, &meta, &tmpl).policy;
        assert_eq!(format!("{parsed:?}"), format!("{read:?}"));
        assert_eq!(Toggle::problem("false"), None);
        assert_eq!(Toggle::problem(""), None);
    }
}
