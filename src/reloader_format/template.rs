//! What a reload writes into a workload, computed on an in-memory copy of the object. Pure: the
//! caller turns the touched paths into a JSON Patch (patched kinds) or creates the edited object
//! (CronJob -> Job, Job re-create).

use k8s_openapi::api::core::v1::PodSpec;
use serde_json::{Map, Value, json};

use super::hash::{DELETE_MARKER, reloader_sha1_hex};
use crate::config::{AnnotationKeys, ReloadStrategy};
use crate::model::{ConfigKey, WorkloadKind};
use crate::references::choose_container;
use crate::reload_policy::CronJobReloadStrategy;

use super::naming::reload_env_var;

/// One config change to write into a workload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateChange {
    pub config: ConfigKey,
    /// Reloader SHA-1 of the config (or its key-precise value), `None` when it was deleted.
    pub hash: Option<String>,
    /// The keys the hash covers.
    pub counted: crate::model::Counted,
    /// The workload names the config in an explicit list (it may not reference it).
    pub explicit: bool,
}

/// Why an object could not be edited.
#[derive(Debug, thiserror::Error)]
pub enum TemplateError {
    #[error("the object has no pod template at {0}")]
    NoTemplate(&'static str),
    #[error("the pod template cannot be read: {0}")]
    BadTemplate(#[from] serde_json::Error),
}

/// Where a new reload env var goes in its container's env list: where Reloader leaves it, kind by
/// kind, so that swapping controllers changes no pod template (GitOps tools diff lists by
/// position). An existing var is always updated in place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EnvPlacement {
    /// Reloader writes a strategic merge patch naming only the new var; the API server's merge
    /// puts patch entries the live list lacks ahead of the live ones, so several new vars end
    /// up newest first.
    First,
    /// Reloader edits its copy of the object (`append`) and updates or creates it whole.
    Last,
}

impl EnvPlacement {
    pub fn of(kind: WorkloadKind) -> Self {
        match kind {
            // DeploymentConfigs: the Reloader versions that still rolled them patched them so.
            WorkloadKind::Deployment
            | WorkloadKind::DaemonSet
            | WorkloadKind::StatefulSet
            | WorkloadKind::DeploymentConfig => EnvPlacement::First,
            // Rollouts are updated whole, Jobs created; declared kinds (which Reloader does not
            // roll) get the var appended.
            WorkloadKind::Rollout
            | WorkloadKind::CronJob
            | WorkloadKind::Job
            | WorkloadKind::Pod
            | WorkloadKind::Custom(_) => EnvPlacement::Last,
        }
    }

    /// Where a write of `kind` puts a new var: a CronJob patched in place
    /// (`cronjob-reload-strategy: patch`) gets Reloader's strategic merge patch of its job
    /// template, not a Job built from a copy.
    pub fn of_write(kind: WorkloadKind, cronjob: CronJobReloadStrategy) -> Self {
        match (kind, cronjob) {
            (WorkloadKind::CronJob, CronJobReloadStrategy::Patch) => EnvPlacement::First,
            _ => Self::of(kind),
        }
    }
}

/// What the edit changed: JSON pointers whose new value must be written.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct TemplateEdit {
    pub touched: Vec<String>,
    /// Names of the configs actually written (for events and alerts).
    pub written: Vec<ConfigKey>,
    /// Container names that received the change (annotations strategy's `containerRefs`).
    pub containers: Vec<String>,
}

impl TemplateEdit {
    pub fn is_empty(&self) -> bool {
        self.touched.is_empty()
    }

    fn touch(&mut self, path: String) {
        if !self.touched.contains(&path) {
            self.touched.push(path);
        }
    }
}

/// The value recorded in the reload annotation (annotations strategy).
#[derive(Debug, serde::Serialize, serde::Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct LastReloadedFrom {
    #[serde(rename = "type")]
    pub kind: String,
    pub name: String,
    pub namespace: String,
    pub hash: String,
    #[serde(default)]
    pub container_refs: Vec<String>,
    #[serde(default)]
    pub observed_at: i64,
}

fn ensure_object<'a>(parent: &'a mut Value, key: &str) -> &'a mut Map<String, Value> {
    let obj = parent.as_object_mut().expect("parent is an object");
    let slot = obj.entry(key.to_string()).or_insert_with(|| json!({}));
    if !slot.is_object() {
        *slot = json!({});
    }
    slot.as_object_mut().expect("just made an object")
}

/// Applies `changes` to the pod template of `object` with `strategy`; `now` is unix seconds.
pub fn edit_template(
    object: &mut Value,
    kind: WorkloadKind,
    placement: EnvPlacement,
    strategy: ReloadStrategy,
    keys: &AnnotationKeys,
    changes: &[TemplateChange],
    now: i64,
) -> Result<TemplateEdit, TemplateError> {
    let pointer = kind.pod_template_pointer();
    let template = object
        .pointer_mut(pointer)
        .filter(|t| t.is_object())
        .ok_or(TemplateError::NoTemplate(pointer))?;
    let spec: PodSpec = serde_json::from_value(template.get("spec").cloned().unwrap_or(json!({})))?;
    let mut edit = TemplateEdit::default();
    match strategy {
        ReloadStrategy::EnvVars => {
            for change in changes {
                edit_env_var(template, pointer, &spec, change, placement, &mut edit);
            }
        }
        ReloadStrategy::Annotations => {
            edit_annotation(template, pointer, &spec, keys, changes, now, &mut edit);
        }
    }
    Ok(edit)
}

fn edit_env_var(
    template: &mut Value,
    pointer: &str,
    spec: &PodSpec,
    change: &TemplateChange,
    placement: EnvPlacement,
    edit: &mut TemplateEdit,
) {
    let var = reload_env_var(change.config.kind, &change.config.name);
    let containers = template
        .pointer_mut("/spec/containers")
        .and_then(Value::as_array_mut);
    let Some(containers) = containers else { return };
    match &change.hash {
        Some(hash) => {
            let Some(choice) = choose_container(
                spec,
                change.config.kind,
                &change.config.name,
                change.explicit,
            ) else {
                return;
            };
            let Some(container) = containers.get_mut(choice.index) else {
                return;
            };
            let env = container
                .as_object_mut()
                .map(|c| c.entry("env").or_insert_with(|| json!([])));
            let Some(env) = env.and_then(Value::as_array_mut) else {
                return;
            };
            match env
                .iter_mut()
                .find(|e| e.get("name").and_then(Value::as_str) == Some(var.as_str()))
            {
                Some(existing) if existing.get("value").and_then(Value::as_str) == Some(hash) => {
                    return;
                }
                Some(existing) => *existing = json!({"name": var, "value": hash}),
                None => {
                    let entry = json!({"name": var, "value": hash});
                    match placement {
                        EnvPlacement::First => env.insert(0, entry),
                        EnvPlacement::Last => env.push(entry),
                    }
                }
            }
            edit.touch(format!("{pointer}/spec/containers/{}/env", choice.index));
            edit.written.push(change.config.clone());
            if let Some(name) = container.get("name").and_then(Value::as_str) {
                edit.containers.push(name.to_string());
            }
        }
        None => {
            // Deleted config: the var goes from every container that carries it.
            let mut removed = false;
            for (i, container) in containers.iter_mut().enumerate() {
                let Some(env) = container.get_mut("env").and_then(Value::as_array_mut) else {
                    continue;
                };
                let before = env.len();
                env.retain(|e| e.get("name").and_then(Value::as_str) != Some(var.as_str()));
                if env.len() != before {
                    edit.touch(format!("{pointer}/spec/containers/{i}/env"));
                    removed = true;
                }
            }
            if removed {
                edit.written.push(change.config.clone());
            }
        }
    }
}

fn edit_annotation(
    template: &mut Value,
    pointer: &str,
    spec: &PodSpec,
    keys: &AnnotationKeys,
    changes: &[TemplateChange],
    now: i64,
    edit: &mut TemplateEdit,
) {
    let key = keys.last_reloaded_from.as_str();
    let recorded: Option<LastReloadedFrom> = template
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(key))
        .and_then(Value::as_str)
        .and_then(|s| serde_json::from_str(s).ok());
    // One annotation holds one config: write the last change that is not recorded yet.
    let pending = changes.iter().rev().find_map(|change| {
        let hash = change
            .hash
            .clone()
            .unwrap_or_else(|| reloader_sha1_hex(DELETE_MARKER));
        let kind = change.config.kind.env_suffix();
        let already = recorded
            .as_ref()
            .is_some_and(|r| r.kind == kind && r.name == *change.config.name && r.hash == hash);
        (!already).then_some((change, hash))
    });
    let Some((change, hash)) = pending else {
        return;
    };
    let choice = choose_container(
        spec,
        change.config.kind,
        &change.config.name,
        change.explicit,
    );
    if change.hash.is_some() && choice.is_none() {
        return;
    }
    let container_refs: Vec<String> = choice
        .and_then(|c| spec.containers.get(c.index))
        .map(|c| vec![c.name.clone()])
        .unwrap_or_default();
    let value = LastReloadedFrom {
        kind: change.config.kind.env_suffix().to_string(),
        name: change.config.name.to_string(),
        namespace: change.config.namespace.to_string(),
        hash,
        container_refs: container_refs.clone(),
        observed_at: now,
    };
    // A template without metadata (a Knative Service's may have none) gets it whole: a JSON
    // Patch `add` of the annotations alone would name a parent that does not exist.
    let had_metadata = template.get("metadata").is_some_and(Value::is_object);
    let metadata = ensure_object(template, "metadata");
    let annotations = metadata.entry("annotations").or_insert_with(|| json!({}));
    if !annotations.is_object() {
        *annotations = json!({});
    }
    annotations.as_object_mut().expect("object").insert(
        key.to_string(),
        Value::String(serde_json::to_string(&value).expect("serializable")),
    );
    edit.touch(match had_metadata {
        true => format!("{pointer}/metadata/annotations"),
        false => format!("{pointer}/metadata"),
    });
    edit.written.push(change.config.clone());
    edit.containers.extend(container_refs);
}

/// Turns touched paths into JSON Patch operations, guarded by the object's resourceVersion so a
/// concurrent writer makes the API server answer 409 instead of losing an update.
pub fn json_patch_ops(object: &Value, touched: &[String]) -> Vec<Value> {
    let mut ops = Vec::with_capacity(touched.len() + 1);
    if let Some(rv) = object.pointer("/metadata/resourceVersion") {
        ops.push(json!({"op": "test", "path": "/metadata/resourceVersion", "value": rv}));
    }
    for path in touched {
        let value = object.pointer(path).cloned().unwrap_or(Value::Null);
        ops.push(json!({"op": "add", "path": path, "value": value}));
    }
    ops
}

/// Hashes recorded in a pod template: env vars and the reload annotation. Used at start to find
/// workloads whose config changed while the controller was down.
pub fn recorded_hash(
    spec: &PodSpec,
    template_annotations: &std::collections::BTreeMap<String, String>,
    keys: &AnnotationKeys,
    config: &ConfigKey,
) -> Option<String> {
    let var = reload_env_var(config.kind, &config.name);
    let from_env = spec
        .containers
        .iter()
        .flat_map(|c| c.env.iter().flatten())
        .find(|e| e.name == var)
        .and_then(|e| e.value.clone());
    from_env.or_else(|| {
        let r: LastReloadedFrom =
            serde_json::from_str(template_annotations.get(&keys.last_reloaded_from)?).ok()?;
        (r.kind == config.kind.env_suffix() && r.name == *config.name).then_some(r.hash)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ConfigKind;

    fn deployment() -> Value {
        json!({
            "metadata": {"name": "web", "namespace": "ns", "resourceVersion": "7"},
            "spec": {"template": {"metadata": {"labels": {"app": "web"}}, "spec": {
                "containers": [
                    {"name": "app", "envFrom": [{"configMapRef": {"name": "my-app.config"}}]},
                    {"name": "side"}
                ]
            }}}
        })
    }

    fn change(name: &str, hash: Option<&str>) -> TemplateChange {
        TemplateChange {
            counted: Default::default(),
            config: ConfigKey::new(ConfigKind::ConfigMap, "ns", name),
            hash: hash.map(String::from),
            explicit: false,
        }
    }

    /// A template without metadata (a Knative Service's, a CronJob's) gets its metadata in the
    /// patch, not an `add` under a parent the object lacks (which the API server refuses).
    #[test]
    fn the_annotation_patch_applies_to_a_template_without_metadata() {
        let original = json!({
            "metadata": {"name": "hello", "namespace": "ns", "resourceVersion": "3"},
            "spec": {"template": {"spec": {"containers": [
                {"envFrom": [{"configMapRef": {"name": "my-app.config"}}]}
            ]}}}
        });
        let mut edited = original.clone();
        let done = edit(
            &mut edited,
            ReloadStrategy::Annotations,
            &[change("my-app.config", Some("h1"))],
        );
        assert_eq!(done.touched, ["/spec/template/metadata"]);
        let ops = json_patch_ops(&edited, &done.touched);
        let patch: json_patch::Patch = serde_json::from_value(Value::Array(ops)).unwrap();
        let mut patched = original;
        json_patch::patch(&mut patched, &patch).expect("the patch applies to the object read");
        let annotation = patched["spec"]["template"]["metadata"]["annotations"]
            ["reloader.stakater.com/last-reloaded-from"]
            .as_str()
            .unwrap();
        assert!(annotation.contains("\"hash\":\"h1\""), "{annotation}");
    }

    fn edit(obj: &mut Value, strategy: ReloadStrategy, changes: &[TemplateChange]) -> TemplateEdit {
        edit_template(
            obj,
            WorkloadKind::Deployment,
            EnvPlacement::First,
            strategy,
            &AnnotationKeys::default(),
            changes,
            100,
        )
        .unwrap()
    }

    #[test]
    fn env_var_is_added_then_idempotent() {
        let mut obj = deployment();
        let e = edit(
            &mut obj,
            ReloadStrategy::EnvVars,
            &[change("my-app.config", Some("abc"))],
        );
        assert_eq!(e.touched, ["/spec/template/spec/containers/0/env"]);
        assert_eq!(
            obj.pointer("/spec/template/spec/containers/0/env/0")
                .unwrap(),
            &json!({"name": "STAKATER_MY_APP_CONFIG_CONFIGMAP", "value": "abc"})
        );
        let again = edit(
            &mut obj,
            ReloadStrategy::EnvVars,
            &[change("my-app.config", Some("abc"))],
        );
        assert!(again.is_empty());
        let ops = json_patch_ops(&obj, &e.touched);
        assert_eq!(
            ops[0],
            json!({"op": "test", "path": "/metadata/resourceVersion", "value": "7"})
        );
        assert_eq!(ops[1]["op"], "add");
    }

    /// Env var names of container 0 after applying `rounds` (one write each) to a workload of
    /// `kind` whose container starts with `PRE` and `STAKATER_OLD_CONFIGMAP`.
    fn names_after(kind: WorkloadKind, rounds: &[&[(&str, &str)]]) -> Vec<String> {
        let mut obj = deployment();
        if kind == WorkloadKind::CronJob {
            let template = obj["spec"]["template"].take();
            obj["spec"] = json!({"jobTemplate": {"spec": {"template": template}}});
        }
        let pointer = format!("{}/spec/containers/0/env", kind.pod_template_pointer());
        *obj.pointer_mut(&pointer.replace("/env", "")).unwrap() = json!({
            "name": "app",
            "envFrom": [{"configMapRef": {"name": "a"}}, {"configMapRef": {"name": "b"}},
                        {"configMapRef": {"name": "old"}}],
            "env": [{"name": "PRE", "value": "p"}, {"name": "STAKATER_OLD_CONFIGMAP", "value": "1"}]
        });
        for round in rounds {
            let changes: Vec<_> = round.iter().map(|(n, h)| change(n, Some(h))).collect();
            let keys = AnnotationKeys::default();
            edit_template(
                &mut obj,
                kind,
                EnvPlacement::of(kind),
                ReloadStrategy::EnvVars,
                &keys,
                &changes,
                1,
            )
            .unwrap();
        }
        obj.pointer(&pointer)
            .unwrap()
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                format!(
                    "{}={}",
                    e["name"].as_str().unwrap(),
                    e["value"].as_str().unwrap()
                )
            })
            .collect()
    }

    #[test]
    fn patched_kinds_put_new_vars_first_newest_first_and_update_in_place() {
        // What the API server's strategic merge leaves after Reloader's one-var patches.
        let expected = [
            "STAKATER_B_CONFIGMAP=hb",
            "STAKATER_A_CONFIGMAP=ha",
            "PRE=p",
            "STAKATER_OLD_CONFIGMAP=2",
        ];
        for kind in [
            WorkloadKind::Deployment,
            WorkloadKind::DaemonSet,
            WorkloadKind::StatefulSet,
            WorkloadKind::DeploymentConfig,
        ] {
            // Separate writes and one coalesced write of the same changes agree.
            let rounds: [&[(&str, &str)]; 3] = [&[("a", "ha")], &[("old", "2")], &[("b", "hb")]];
            assert_eq!(names_after(kind, &rounds), expected, "{kind}");
            let coalesced: [&[(&str, &str)]; 1] = [&[("a", "ha"), ("old", "2"), ("b", "hb")]];
            assert_eq!(names_after(kind, &coalesced), expected, "{kind} coalesced");
        }
    }

    #[test]
    fn updated_and_created_kinds_append_new_vars() {
        let rounds: [&[(&str, &str)]; 2] = [&[("a", "ha"), ("old", "2")], &[("b", "hb")]];
        for kind in [
            WorkloadKind::Rollout,
            WorkloadKind::CronJob,
            WorkloadKind::Job,
        ] {
            assert_eq!(
                names_after(kind, &rounds),
                [
                    "PRE=p",
                    "STAKATER_OLD_CONFIGMAP=2",
                    "STAKATER_A_CONFIGMAP=ha",
                    "STAKATER_B_CONFIGMAP=hb"
                ],
                "{kind}"
            );
        }
    }

    #[test]
    fn unreferenced_config_writes_nothing_unless_explicit() {
        let mut obj = deployment();
        assert!(
            edit(
                &mut obj,
                ReloadStrategy::EnvVars,
                &[change("other", Some("h"))]
            )
            .is_empty()
        );
        let explicit = TemplateChange {
            counted: Default::default(),
            explicit: true,
            ..change("other", Some("h"))
        };
        let e = edit(&mut obj, ReloadStrategy::EnvVars, &[explicit]);
        assert_eq!(e.containers, ["app"]);
    }

    #[test]
    fn delete_removes_the_var() {
        let mut obj = deployment();
        edit(
            &mut obj,
            ReloadStrategy::EnvVars,
            &[change("my-app.config", Some("abc"))],
        );
        let e = edit(
            &mut obj,
            ReloadStrategy::EnvVars,
            &[change("my-app.config", None)],
        );
        assert_eq!(e.touched.len(), 1);
        assert_eq!(
            obj.pointer("/spec/template/spec/containers/0/env").unwrap(),
            &json!([])
        );
    }

    #[test]
    fn annotation_strategy_records_json_and_is_idempotent() {
        let mut obj = deployment();
        let e = edit(
            &mut obj,
            ReloadStrategy::Annotations,
            &[change("my-app.config", Some("abc"))],
        );
        assert_eq!(e.touched, ["/spec/template/metadata/annotations"]);
        let raw = obj
            .pointer(
                "/spec/template/metadata/annotations/reloader.stakater.com~1last-reloaded-from",
            )
            .and_then(Value::as_str)
            .unwrap();
        let v: Value = serde_json::from_str(raw).unwrap();
        assert_eq!(
            v,
            json!({"type": "CONFIGMAP", "name": "my-app.config", "namespace": "ns", "hash": "abc",
                   "containerRefs": ["app"], "observedAt": 100})
        );
        assert!(
            edit(
                &mut obj,
                ReloadStrategy::Annotations,
                &[change("my-app.config", Some("abc"))]
            )
            .is_empty()
        );
        // Deleting writes the hash of the marker.
        let e = edit(
            &mut obj,
            ReloadStrategy::Annotations,
            &[change("my-app.config", None)],
        );
        assert!(!e.is_empty());
        assert!(obj.to_string().contains(&reloader_sha1_hex(DELETE_MARKER)));
    }

    #[test]
    fn recorded_hash_reads_env_and_annotation() {
        let mut obj = deployment();
        edit(
            &mut obj,
            ReloadStrategy::EnvVars,
            &[change("my-app.config", Some("abc"))],
        );
        let spec: PodSpec =
            serde_json::from_value(obj.pointer("/spec/template/spec").unwrap().clone()).unwrap();
        let key = ConfigKey::new(ConfigKind::ConfigMap, "ns", "my-app.config");
        let keys = AnnotationKeys::default();
        assert_eq!(
            recorded_hash(&spec, &Default::default(), &keys, &key),
            Some("abc".into())
        );
        assert_eq!(
            recorded_hash(
                &spec,
                &Default::default(),
                &keys,
                &ConfigKey::new(ConfigKind::Secret, "ns", "my-app.config")
            ),
            None
        );
    }
}
