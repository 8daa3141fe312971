//! What the admission webhook writes into a workload being created or updated, pure: the
//! configs its template uses that the controller would reload it for, each with the hash the
//! controller would write, written as the controller writes them (the same template edit), as
//! JSON Patch operations on the object under admission.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::config::Settings;
use crate::decide::{
    ConfigFacts, DecisionSwitches, ReloadReason, Verdict, WorkloadFacts, evaluate,
};
use crate::index::WorkloadEntry;
use crate::model::{ConfigKey, ConfigKind, Counted, WorkloadKind};
use crate::pod_restart::RestartBy;
use crate::reload_policy::RolloutStrategy;
use crate::reloader_format::template::{
    EnvPlacement, TemplateChange, edit_template, json_patch_ops,
};

/// A config as the webhook read it from the API server (`None` in the map: absent, or not
/// selected by `--resource-label-selector`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadConfig {
    /// `reloader.stakater.com/ignore: "true"` on it.
    pub ignore: bool,
    /// `reloader.stakater.com/match: "true"` on it.
    pub matched: bool,
    /// Its Reloader hash.
    pub hash: String,
}

/// Whether an update changes the pod template (a rollout happens anyway): only then is a hash
/// written on update. An update that leaves the template alone (labels, replicas, the
/// controller's own annotations) must not become a rollout: a reload a window, a delay, a
/// halt or the churn breaker holds would go out with it.
pub fn rolls(kind: WorkloadKind, old: &Value, new: &Value) -> bool {
    let pointer = kind.pod_template_pointer();
    old.pointer(pointer) != new.pointer(pointer)
}

/// Why nothing is written into a workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NothingWritten {
    /// A kind whose reload is not a template edit (a CronJob's is a new Job, a Job is
    /// re-created), or the workload is restarted (eviction, a Rollout's `restartAt`).
    NotATemplateReload,
    /// No config it uses would reload it, or the template already carries every value.
    UpToDate,
    /// The object could not be read as a workload of its kind.
    Unreadable,
}

/// A workload under admission, read once as the index reads a workload.
pub struct Admitted<'a> {
    kind: WorkloadKind,
    object: &'a Value,
    entry: WorkloadEntry,
}

impl<'a> Admitted<'a> {
    pub fn read(
        kind: WorkloadKind,
        object: &'a Value,
        settings: &Settings,
    ) -> Result<Self, NothingWritten> {
        let entry = crate::index::workload_entry(kind, object, &settings.keys)
            .map_err(|_| NothingWritten::Unreadable)?;
        Ok(Self {
            kind,
            object,
            entry,
        })
    }

    /// The configs its template uses (or its reload lists name) that the webhook reads.
    pub fn configs_to_read(&self, settings: &Settings) -> Vec<ConfigKey> {
        let entry = &self.entry;
        entry
            .uses
            .iter()
            .filter(|u| {
                u.kind != ConfigKind::SecretProviderClass && settings.watches_config(u.kind)
            })
            .map(|u| ConfigKey::new(u.kind, &entry.key.namespace, &u.name))
            .collect()
    }

    /// The JSON Patch operations that put the current value of each config it would be
    /// reloaded for into its template; `now` is unix seconds (the annotation's `observedAt`).
    pub fn template_patch(
        &self,
        settings: &Settings,
        read: &BTreeMap<ConfigKey, ReadConfig>,
        now: i64,
    ) -> Result<Vec<Value>, NothingWritten> {
        let (kind, object, entry) = (self.kind, self.object, &self.entry);

        if matches!(kind, WorkloadKind::CronJob | WorkloadKind::Job) {
            return Err(NothingWritten::NotATemplateReload);
        }
        let restarted = entry.policy.restart_by != RestartBy::Template
            || (kind == WorkloadKind::Rollout
                && entry.policy.rollout_strategy == RolloutStrategy::Restart);
        if restarted {
            return Err(NothingWritten::NotATemplateReload);
        }
        let switches = DecisionSwitches {
            auto_reload_all: settings.auto_reload_all,
            ignored_workloads: &settings.ignored_workloads,
        };
        let changes: Vec<TemplateChange> = entry
            .uses
            .iter()
            .filter_map(|u| {
                let key = ConfigKey::new(u.kind, &entry.key.namespace, &u.name);
                let config = read.get(&key)?;
                let facts = ConfigFacts {
                    kind: u.kind,
                    name: &u.name,
                    ignore: config.ignore,
                    matched: config.matched,
                };
                let workload = WorkloadFacts {
                    kind,
                    policy: &entry.policy,
                    referenced: u.referenced,
                };
                let Verdict::Reload(reason) = evaluate(facts, workload, switches) else {
                    return None;
                };
                Some(TemplateChange {
                    config: key,
                    hash: Some(config.hash.clone()),
                    counted: Counted::Whole,
                    explicit: reason == ReloadReason::ExplicitList,
                })
            })
            .collect();
        let mut edited = object.clone();
        let strategy = settings.strategy_for(kind);
        let edit = edit_template(
            &mut edited,
            kind,
            EnvPlacement::of(kind),
            strategy,
            &settings.keys,
            &changes,
            now,
        )
        .map_err(|_| NothingWritten::Unreadable)?;
        if edit.is_empty() {
            return Err(NothingWritten::UpToDate);
        }
        // The object under admission has no resourceVersion to guard (a create) or the server
        // applies the patch to exactly this object (an update): no `test` operation.
        let ops = json_patch_ops(&edited, &edit.touched);
        Ok(ops.into_iter().filter(|op| op["op"] != "test").collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use serde_json::json;

    fn settings(args: &[&str]) -> Settings {
        let argv = std::iter::once("kube-reloader").chain(args.iter().copied());
        Settings::try_from(crate::config::Flags::parse_from(argv)).unwrap()
    }

    fn deployment(annotations: Value) -> Value {
        json!({
            "metadata": {"name": "web", "namespace": "shop", "annotations": annotations},
            "spec": {"template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [
                {"name": "app", "envFrom": [{"configMapRef": {"name": "settings"}}]}
            ]}}}
        })
    }

    fn read(hash: &str) -> BTreeMap<ConfigKey, ReadConfig> {
        let key = ConfigKey::new(ConfigKind::ConfigMap, "shop", "settings");
        let config = ReadConfig {
            ignore: false,
            matched: false,
            hash: hash.into(),
        };
        BTreeMap::from([(key, config)])
    }

    fn template_patch(
        kind: WorkloadKind,
        object: &Value,
        s: &Settings,
        read: &BTreeMap<ConfigKey, ReadConfig>,
        now: i64,
    ) -> Result<Vec<Value>, NothingWritten> {
        Admitted::read(kind, object, s)?.template_patch(s, read, now)
    }

    fn configs_to_read(kind: WorkloadKind, object: &Value, s: &Settings) -> Vec<ConfigKey> {
        Admitted::read(kind, object, s).unwrap().configs_to_read(s)
    }

    fn apply(object: &Value, ops: Vec<Value>) -> Value {
        let patch: json_patch::Patch = serde_json::from_value(Value::Array(ops)).unwrap();
        let mut patched = object.clone();
        json_patch::patch(&mut patched, &patch).unwrap();
        patched
    }

    #[test]
    fn an_opted_in_workload_gets_the_current_hash_as_the_controller_writes_it() {
        let s = settings(&[]);
        let object = deployment(json!({"reloader.stakater.com/auto": "true"}));
        assert_eq!(
            configs_to_read(WorkloadKind::Deployment, &object, &s),
            [ConfigKey::new(ConfigKind::ConfigMap, "shop", "settings")]
        );
        let ops = template_patch(WorkloadKind::Deployment, &object, &s, &read("h1"), 7).unwrap();
        assert!(ops.iter().all(|op| op["op"] == "add"), "{ops:?}");
        let patched = apply(&object, ops);
        let env = &patched["spec"]["template"]["spec"]["containers"][0]["env"];
        assert_eq!(
            env,
            &json!([{"name": "STAKATER_SETTINGS_CONFIGMAP", "value": "h1"}])
        );
        // Admitted again (the next update of the same workload): nothing more to write.
        let again = template_patch(WorkloadKind::Deployment, &patched, &s, &read("h1"), 8);
        assert_eq!(again, Err(NothingWritten::UpToDate));
    }

    #[test]
    fn only_an_update_that_changes_the_template_gets_a_hash() {
        let old = deployment(json!({"reloader.stakater.com/auto": "true"}));
        let mut scaled = old.clone();
        scaled["spec"]["replicas"] = json!(5);
        scaled["metadata"]["labels"] = json!({"team": "a"});
        assert!(!rolls(WorkloadKind::Deployment, &old, &scaled));
        let mut upgraded = old.clone();
        upgraded["spec"]["template"]["spec"]["containers"][0]["image"] = json!("app:2");
        assert!(rolls(WorkloadKind::Deployment, &old, &upgraded));
    }

    #[test]
    fn the_annotations_strategy_writes_the_annotation() {
        let s = settings(&["--reload-strategy=annotations"]);
        let object = deployment(json!({"reloader.stakater.com/auto": "true"}));
        let ops = template_patch(WorkloadKind::Deployment, &object, &s, &read("h2"), 7).unwrap();
        let patched = apply(&object, ops);
        let annotation = &patched["spec"]["template"]["metadata"]["annotations"]["reloader.stakater.com/last-reloaded-from"];
        assert!(
            annotation.as_str().unwrap().contains("\"hash\":\"h2\""),
            "{annotation}"
        );
    }

    #[test]
    fn nothing_is_written_where_the_controller_would_not_reload() {
        let s = settings(&[]);
        let not_opted_in = deployment(json!({}));
        let none = template_patch(WorkloadKind::Deployment, &not_opted_in, &s, &read("h"), 7);
        assert_eq!(none, Err(NothingWritten::UpToDate));
        let ignored = BTreeMap::from([(
            ConfigKey::new(ConfigKind::ConfigMap, "shop", "settings"),
            ReadConfig {
                ignore: true,
                matched: false,
                hash: "h".into(),
            },
        )]);
        let object = deployment(json!({"reloader.stakater.com/auto": "true"}));
        let none = template_patch(WorkloadKind::Deployment, &object, &s, &ignored, 7);
        assert_eq!(none, Err(NothingWritten::UpToDate));
        let missing = template_patch(WorkloadKind::Deployment, &object, &s, &BTreeMap::new(), 7);
        assert_eq!(missing, Err(NothingWritten::UpToDate));
        let evicted = deployment(json!({"reloader.stakater.com/auto": "true",
            "kube-reloader.io/restart-by": "eviction"}));
        let none = template_patch(WorkloadKind::Deployment, &evicted, &s, &read("h"), 7);
        assert_eq!(none, Err(NothingWritten::NotATemplateReload));
    }
}
