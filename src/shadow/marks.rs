//! What a Reloader-style write leaves in a pod template for one config: its "marks". A reload
//! under `env-vars` leaves a `STAKATER_<NAME>_<KIND>` env var in a container; under
//! `annotations`, the `last-reloaded-from` annotation naming the config, its hash and the
//! containers. Shadow mode compares the marks kube-reloader would have written with those the
//! incumbent wrote. Pure: no I/O.

use std::collections::BTreeSet;
use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::config::{AnnotationKeys, ReloadStrategy};
use crate::model::ConfigKey;
use crate::reloader_format::naming::reload_env_var;
use crate::reloader_format::template::{LastReloadedFrom, TemplateChange};

/// One mark of one config in a pod template.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(tag = "field", rename_all = "kebab-case")]
pub enum Mark {
    /// The reload env var in one container (`env-vars` strategy).
    EnvVar {
        container: String,
        name: String,
        value: String,
    },
    /// The reload annotation naming this config (`annotations` strategy); its `observedAt` is a
    /// clock reading, never compared.
    Annotation {
        name: String,
        hash: String,
        containers: Vec<String>,
    },
}

impl Mark {
    /// The reload strategy that writes this mark.
    pub fn strategy(&self) -> &'static str {
        match self {
            Mark::EnvVar { .. } => "env-vars",
            Mark::Annotation { .. } => "annotations",
        }
    }

    /// The mark holds the change's value (never for a deletion).
    fn carries(&self, change: &TemplateChange) -> bool {
        let Some(hash) = change.hash.as_deref() else {
            return false;
        };
        match self {
            Mark::EnvVar { value, .. } => value == hash,
            Mark::Annotation { hash: recorded, .. } => recorded == hash,
        }
    }
}

impl fmt::Display for Mark {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Mark::EnvVar {
                container,
                name,
                value,
            } => write!(f, "env {name}={value} in container {container}"),
            Mark::Annotation {
                name,
                hash,
                containers,
            } => write!(
                f,
                "annotation {name} hash={hash} containers=[{}]",
                containers.join(",")
            ),
        }
    }
}

/// The marks of `config` in a pod template (`{metadata, spec}` as JSON).
pub fn marks_of(template: &Value, keys: &AnnotationKeys, config: &ConfigKey) -> BTreeSet<Mark> {
    let mut marks = BTreeSet::new();
    let var = reload_env_var(config.kind, &config.name);
    let containers = template
        .pointer("/spec/containers")
        .and_then(Value::as_array);
    for container in containers.into_iter().flatten() {
        let name = container.get("name").and_then(Value::as_str).unwrap_or("");
        let env = container.get("env").and_then(Value::as_array);
        for entry in env.into_iter().flatten() {
            if entry.get("name").and_then(Value::as_str) == Some(var.as_str()) {
                marks.insert(Mark::EnvVar {
                    container: name.to_string(),
                    name: var.clone(),
                    value: string_at(entry, "value"),
                });
            }
        }
    }
    let annotation = template
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(&keys.last_reloaded_from))
        .and_then(Value::as_str)
        .and_then(|text| serde_json::from_str::<LastReloadedFrom>(text).ok());
    if let Some(recorded) = annotation
        && recorded.kind == config.kind.env_suffix()
        && recorded.name == *config.name
    {
        marks.insert(Mark::Annotation {
            name: keys.last_reloaded_from.clone(),
            hash: recorded.hash,
            containers: recorded.container_refs,
        });
    }
    marks
}

/// The marks already carry the change's value (under either strategy). A deletion is never
/// "carried": what it leaves is decided by the edit.
pub fn carries(marks: &BTreeSet<Mark>, change: &TemplateChange) -> bool {
    marks.iter().any(|mark| mark.carries(change))
}

/// The marks kube-reloader's own write leaves, from a template read after the edit. The read
/// may come after the incumbent's write for the same change (it is often faster): a mark of
/// the other strategy that already carries the change's hash is the incumbent's, not ours, and
/// counting it would turn a plain strategy difference into a confusing partial one.
pub fn ours_after_edit(
    marks: BTreeSet<Mark>,
    change: &TemplateChange,
    ours: ReloadStrategy,
) -> BTreeSet<Mark> {
    marks
        .into_iter()
        .filter(|mark| mark.strategy() == ours.as_str() || !mark.carries(change))
        .collect()
}

fn string_at(value: &Value, key: &str) -> String {
    value
        .get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

/// What differs between the marks predicted and those written, in one line: the field, the
/// container, the value, the strategy.
pub fn difference(predicted: &BTreeSet<Mark>, written: &BTreeSet<Mark>) -> String {
    let strategies = |marks: &BTreeSet<Mark>| -> BTreeSet<&'static str> {
        marks.iter().map(Mark::strategy).collect()
    };
    let (ours, theirs) = (strategies(predicted), strategies(written));
    if !ours.is_empty() && !theirs.is_empty() && ours.is_disjoint(&theirs) {
        return format!(
            "strategy: predicted {} ({}), written {} ({})",
            join(&ours),
            list(predicted),
            join(&theirs),
            list(written)
        );
    }
    let only_predicted: BTreeSet<_> = predicted.difference(written).cloned().collect();
    let only_written: BTreeSet<_> = written.difference(predicted).cloned().collect();
    format!(
        "predicted but not written: {}; written but not predicted: {}",
        list(&only_predicted),
        list(&only_written)
    )
}

fn join(strategies: &BTreeSet<&'static str>) -> String {
    strategies.iter().copied().collect::<Vec<_>>().join("+")
}

fn list(marks: &BTreeSet<Mark>) -> String {
    match marks.is_empty() {
        true => "nothing".to_string(),
        false => marks
            .iter()
            .map(Mark::to_string)
            .collect::<Vec<_>>()
            .join(", "),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ConfigKind;
    use serde_json::json;

    fn config() -> ConfigKey {
        ConfigKey::new(ConfigKind::ConfigMap, "ns", "app-config")
    }

    #[test]
    fn reads_env_vars_in_every_container_and_the_annotation_naming_the_config() {
        let keys = AnnotationKeys::default();
        let annotation = json!({"type": "CONFIGMAP", "name": "app-config", "namespace": "ns",
            "hash": "h2", "containerRefs": ["app"], "observedAt": 5});
        let template = json!({
            "metadata": {"annotations": {(keys.last_reloaded_from.clone()): annotation.to_string()}},
            "spec": {"containers": [
                {"name": "app", "env": [{"name": "STAKATER_APP_CONFIG_CONFIGMAP", "value": "h1"}]},
                {"name": "side", "env": [{"name": "OTHER", "value": "x"}]}
            ]}
        });
        let marks: Vec<_> = marks_of(&template, &keys, &config()).into_iter().collect();
        assert_eq!(
            marks,
            vec![
                Mark::EnvVar {
                    container: "app".into(),
                    name: "STAKATER_APP_CONFIG_CONFIGMAP".into(),
                    value: "h1".into()
                },
                Mark::Annotation {
                    name: keys.last_reloaded_from.clone(),
                    hash: "h2".into(),
                    containers: vec!["app".into()]
                },
            ]
        );
        let other = ConfigKey::new(ConfigKind::Secret, "ns", "app-config");
        assert!(marks_of(&template, &keys, &other).is_empty());
    }

    #[test]
    fn names_a_different_strategy_and_a_different_value() {
        let env = |value: &str| Mark::EnvVar {
            container: "app".into(),
            name: "STAKATER_A_CONFIGMAP".into(),
            value: value.into(),
        };
        let annotation = Mark::Annotation {
            name: "reloader.stakater.com/last-reloaded-from".into(),
            hash: "h".into(),
            containers: vec!["app".into()],
        };
        let strategy = difference(&[env("h")].into(), &[annotation].into());
        assert!(
            strategy.starts_with("strategy: predicted env-vars"),
            "{strategy}"
        );
        let value = difference(&[env("h1")].into(), &[env("h2")].into());
        assert_eq!(
            value,
            "predicted but not written: env STAKATER_A_CONFIGMAP=h1 in container app; \
             written but not predicted: env STAKATER_A_CONFIGMAP=h2 in container app"
        );
    }

    #[test]
    fn the_incumbents_mark_for_the_same_change_is_not_counted_as_ours() {
        let env = |value: &str| Mark::EnvVar {
            container: "app".into(),
            name: "STAKATER_APP_CONFIG_CONFIGMAP".into(),
            value: value.into(),
        };
        let annotation = |hash: &str| Mark::Annotation {
            name: AnnotationKeys::default().last_reloaded_from,
            hash: hash.into(),
            containers: vec!["app".into()],
        };
        let change = TemplateChange {
            config: config(),
            hash: Some("new".into()),
            counted: Default::default(),
            explicit: false,
        };
        // Read after the incumbent (env-vars) wrote this change: only our annotation is ours.
        let read: BTreeSet<Mark> = [env("new"), annotation("new")].into();
        let ours = ours_after_edit(read.clone(), &change, ReloadStrategy::Annotations);
        assert_eq!(ours, [annotation("new")].into());
        // Under our own strategy, the same mark is ours whoever wrote it first.
        let ours = ours_after_edit(read, &change, ReloadStrategy::EnvVars);
        assert_eq!(ours, [env("new")].into());
        // An older mark of the other strategy is left in the template by both writes: kept.
        let stale: BTreeSet<Mark> = [env("old"), annotation("new")].into();
        assert_eq!(
            ours_after_edit(stale.clone(), &change, ReloadStrategy::Annotations),
            stale
        );
    }
}
