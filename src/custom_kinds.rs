//! Declared custom kinds (`--custom-kind`): any namespaced resource whose objects hold a pod
//! template somewhere (a Knative Service, a KEDA ScaledJob, an operator's own kind) is rolled
//! like a built-in kind: indexed, decided, written, explained, linted.
//!
//! A declaration names the resource, where its pod template is, how to roll it and, for
//! restarts by eviction, how its pods are found:
//!
//! `serving.knative.dev/v1/Service,template=/spec/template,reload-by=annotations`
//!
//! Declared kinds are registered once, at start, in a process-wide table: a workload kind stays
//! two bytes (`WorkloadKind::Custom(id)`) in the index's keys rather than carrying the
//! declaration, and every stage reads the same declaration through its id.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

/// At most this many kinds can be declared in one process.
pub const MAX_CUSTOM_KINDS: usize = 64;

/// How a declared kind is rolled when a config it uses changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ReloadBy {
    /// A pod template annotation (`--reload-strategy=annotations`).
    Annotations,
    /// An env var in each container (`--reload-strategy=env-vars`).
    EnvVars,
    /// Its pods evicted one at a time (`kube-reloader.io/restart-by: eviction`), template untouched.
    Eviction,
}

impl ReloadBy {
    const CHOICES: [(&'static str, ReloadBy); 3] = [
        ("annotations", ReloadBy::Annotations),
        ("env-vars", ReloadBy::EnvVars),
        ("eviction", ReloadBy::Eviction),
    ];

    pub fn as_str(self) -> &'static str {
        Self::CHOICES
            .iter()
            .find(|(_, by)| *by == self)
            .map_or("", |(name, _)| name)
    }
}

/// How the pods of a declared kind's object are found (restarts by eviction).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PodSelection {
    /// A `LabelSelector` at this JSON pointer in the object (`selector=/spec/selector`).
    Selector(String),
    /// Pods whose label `key` is the object's name (`pod-label=serving.knative.dev/service`).
    NameLabel(String),
}

/// One declared kind.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CustomKind {
    pub group: String,
    pub version: String,
    pub kind: String,
    /// The resource's plural (`resource=`; the lower-case kind plus `s` by default).
    pub plural: String,
    /// JSON pointer to the pod template (`template=`; `/spec/template` by default).
    pub template: String,
    /// `None`: as `--reload-strategy` says.
    pub reload_by: Option<ReloadBy>,
    pub pods: PodSelection,
    /// `group/version`.
    pub api_version: String,
    /// What a user turned on, for log lines about the API not being served.
    pub feature: String,
}

/// Why a declaration was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeclarationError {
    #[error(
        "'{0}': expected <group>/<version>/<Kind>[,resource=..][,template=..][,reload-by=..][,selector=..|,pod-label=..]"
    )]
    Shape(String),
    #[error("'{declaration}': {problem}")]
    Invalid {
        declaration: String,
        problem: String,
    },
    #[error("more than {MAX_CUSTOM_KINDS} custom kinds declared")]
    TooMany,
}

impl CustomKind {
    /// Parses one declaration (see the module documentation).
    pub fn parse(declaration: &str) -> Result<CustomKind, DeclarationError> {
        let shape = || DeclarationError::Shape(declaration.to_string());
        let invalid = |problem: String| DeclarationError::Invalid {
            declaration: declaration.to_string(),
            problem,
        };
        let mut parts = declaration.split(',').map(str::trim);
        let gvk: Vec<&str> = parts.next().ok_or_else(shape)?.split('/').collect();
        let [group, version, kind] = gvk[..] else {
            return Err(shape());
        };
        if [group, version, kind].iter().any(|s| s.is_empty()) {
            return Err(shape());
        }
        let mut declared = CustomKind {
            group: group.to_string(),
            version: version.to_string(),
            kind: kind.to_string(),
            plural: format!("{}s", kind.to_ascii_lowercase()),
            template: "/spec/template".to_string(),
            reload_by: None,
            pods: PodSelection::Selector("/spec/selector".to_string()),
            api_version: format!("{group}/{version}"),
            feature: format!("custom kind {group}/{version} {kind} (--custom-kind)"),
        };
        for part in parts.filter(|p| !p.is_empty()) {
            let (key, value) = part.split_once('=').ok_or_else(shape)?;
            let value = value.trim();
            match key.trim() {
                "resource" if is_dns_label(value) => declared.plural = value.to_string(),
                "resource" => return Err(invalid(format!("resource '{value}' is not a plural"))),
                "template" => declared.template = template_pointer(value).map_err(invalid)?,
                "reload-by" => {
                    let by = ReloadBy::CHOICES.iter().find(|(name, _)| *name == value);
                    let by = by.ok_or_else(|| {
                        invalid(format!(
                            "reload-by '{value}' is not one of annotations, env-vars, eviction"
                        ))
                    })?;
                    declared.reload_by = Some(by.1);
                }
                "selector" if value.starts_with('/') => {
                    declared.pods = PodSelection::Selector(value.to_string())
                }
                "selector" => return Err(invalid("selector must be a JSON pointer".into())),
                "pod-label" if !value.is_empty() => {
                    declared.pods = PodSelection::NameLabel(value.to_string())
                }
                other => return Err(invalid(format!("unknown setting '{other}'"))),
            }
        }
        Ok(declared)
    }

    /// The field of `spec` that holds the pod template (`template` for `/spec/template`,
    /// `jobTargetRef` for `/spec/jobTargetRef/template`).
    pub fn template_field(&self) -> &str {
        self.template.split('/').nth(2).unwrap_or_default()
    }

    /// The pointer to the template inside the [`Self::template_field`] value (empty when the
    /// field is the template).
    pub fn template_within_field(&self) -> &str {
        let prefix = 1 + "spec/".len() + self.template_field().len();
        &self.template[prefix..]
    }
}

/// A pod template pointer: under `/spec`, no escapes, no empty segments.
fn template_pointer(value: &str) -> Result<String, String> {
    let segments: Vec<&str> = value.split('/').skip(1).collect();
    let ok = value.starts_with("/spec/")
        && segments.len() >= 2
        && segments.iter().all(|s| !s.is_empty() && !s.contains('~'));
    match ok {
        true => Ok(value.to_string()),
        false => Err(format!(
            "template '{value}' must be a JSON pointer under /spec, e.g. /spec/template"
        )),
    }
}

fn is_dns_label(value: &str) -> bool {
    !value.is_empty()
        && value.len() <= 63
        && value
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

/// The id of a registered kind (its slot in the process-wide table).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CustomKindId(u8);

impl CustomKindId {
    /// Its declaration.
    pub fn get(self) -> &'static CustomKind {
        SLOTS[self.0 as usize]
            .get()
            .expect("a CustomKindId is only made for a filled slot")
    }
}

static SLOTS: [OnceLock<&'static CustomKind>; MAX_CUSTOM_KINDS] =
    [const { OnceLock::new() }; MAX_CUSTOM_KINDS];
static FILLED: AtomicUsize = AtomicUsize::new(0);
static REGISTERING: Mutex<()> = Mutex::new(());

/// Registers `kind` (the same declaration twice gets the same id). Each registration is kept
/// for the life of the process: there are few, and every key of the index may name one.
pub fn register(kind: CustomKind) -> Result<CustomKindId, DeclarationError> {
    let _one_at_a_time = REGISTERING.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(id) = registered().find(|id| *id.get() == kind) {
        return Ok(id);
    }
    let slot = FILLED.load(Ordering::Acquire);
    if slot >= MAX_CUSTOM_KINDS {
        return Err(DeclarationError::TooMany);
    }
    let kept: &'static CustomKind = Box::leak(Box::new(kind));
    let _ = SLOTS[slot].set(kept);
    FILLED.store(slot + 1, Ordering::Release);
    Ok(CustomKindId(slot as u8))
}

/// Every registered kind, in registration order.
pub fn registered() -> impl Iterator<Item = CustomKindId> {
    (0..FILLED.load(Ordering::Acquire)).map(|slot| CustomKindId(slot as u8))
}

/// Whether `field` of a workload's `spec` may hold a declared kind's pod template (not
/// `template`, which every kind's decoding keeps already): the decoding keeps it too.
pub fn is_template_field(field: &str) -> bool {
    registered().any(|id| {
        let declared = id.get();
        declared.template_field() == field && field != "template"
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_declaration_names_the_resource_its_template_and_how_to_roll_it() {
        let k = CustomKind::parse(
            "keda.sh/v1alpha1/ScaledJob, resource=scaledjobs, template=/spec/jobTargetRef/template, reload-by=env-vars",
        )
        .unwrap();
        assert_eq!(
            (k.group.as_str(), k.version.as_str(), k.kind.as_str()),
            ("keda.sh", "v1alpha1", "ScaledJob")
        );
        assert_eq!(k.plural, "scaledjobs");
        assert_eq!(k.api_version, "keda.sh/v1alpha1");
        assert_eq!(k.template_field(), "jobTargetRef");
        assert_eq!(k.template_within_field(), "/template");
        assert_eq!(k.reload_by, Some(ReloadBy::EnvVars));

        let knative = CustomKind::parse(
            "serving.knative.dev/v1/Service,pod-label=serving.knative.dev/service",
        )
        .unwrap();
        assert_eq!(knative.plural, "services");
        assert_eq!(knative.template, "/spec/template");
        assert_eq!(knative.template_within_field(), "");
        assert_eq!(knative.reload_by, None);
        assert_eq!(
            knative.pods,
            PodSelection::NameLabel("serving.knative.dev/service".into())
        );
    }

    #[test]
    fn a_malformed_declaration_says_what_is_wrong() {
        for (declaration, said) in [
            ("Service", "expected <group>/<version>/<Kind>"),
            ("a/v1/", "expected <group>/<version>/<Kind>"),
            (
                "a/v1/K,template=/metadata/x",
                "must be a JSON pointer under /spec",
            ),
            (
                "a/v1/K,template=/spec",
                "must be a JSON pointer under /spec",
            ),
            (
                "a/v1/K,reload-by=delete",
                "not one of annotations, env-vars, eviction",
            ),
            ("a/v1/K,resource=Ks", "is not a plural"),
            ("a/v1/K,colour=red", "unknown setting 'colour'"),
            ("a/v1/K,selector=spec.selector", "JSON pointer"),
        ] {
            let error = CustomKind::parse(declaration).unwrap_err().to_string();
            assert!(error.contains(said), "{declaration}: {error}");
        }
    }

    #[test]
    fn the_same_declaration_registers_once() {
        let kind = CustomKind::parse("example.com/v1/Widget,template=/spec/pod/template").unwrap();
        let a = register(kind.clone()).unwrap();
        let b = register(kind).unwrap();
        assert_eq!(a, b);
        assert_eq!(a.get().kind, "Widget");
        assert!(is_template_field("pod"));
        assert!(!is_template_field("template"));
        assert!(registered().any(|id| id == a));
    }
}
