//! Building and reading test objects as JSON, for any kind (built-in or CRD).
#![allow(dead_code)]

use kube::Client;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

fn resource_of(value: &Value) -> ApiResource {
    let api_version = value["apiVersion"].as_str().expect("apiVersion");
    let kind = value["kind"].as_str().expect("kind");
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind))
}

pub fn api_for(client: &Client, ns: &str, api_version: &str, kind: &str) -> Api<DynamicObject> {
    let ar = resource_of(&json!({"apiVersion": api_version, "kind": kind}));
    Api::namespaced_with(client.clone(), ns, &ar)
}

/// Creates `value` (which names its apiVersion and kind) in `ns`.
pub async fn create(client: &Client, ns: &str, value: Value) -> DynamicObject {
    let ar = resource_of(&value);
    let obj: DynamicObject = serde_json::from_value(value).expect("a valid object");
    Api::<DynamicObject>::namespaced_with(client.clone(), ns, &ar)
        .create(&PostParams::default(), &obj)
        .await
        .unwrap_or_else(|e| {
            panic!(
                "creating {}/{}: {e}",
                ar.kind,
                obj.metadata.name.clone().unwrap_or_default()
            )
        })
}

/// Reads an object as JSON, or `None` when it does not exist.
pub async fn get(
    client: &Client,
    ns: &str,
    api_version: &str,
    kind: &str,
    name: &str,
) -> Option<Value> {
    api_for(client, ns, api_version, kind)
        .get_opt(name)
        .await
        .unwrap_or_else(|e| panic!("reading {kind}/{name}: {e}"))
        .map(|o| serde_json::to_value(o).unwrap())
}

pub async fn merge_patch(
    client: &Client,
    ns: &str,
    api_version: &str,
    kind: &str,
    name: &str,
    patch: Value,
) {
    api_for(client, ns, api_version, kind)
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap_or_else(|e| panic!("patching {kind}/{name}: {e}"));
}

pub fn configmap(name: &str, data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data})
}

pub fn secret(name: &str, string_data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "stringData": string_data})
}

/// A pod spec with one container `app` using the given env/envFrom/volumeMounts, plus volumes.
pub fn pod_spec(container: Value, volumes: Value) -> Value {
    let mut c = json!({"name": "app", "image": "registry.k8s.io/pause:3.10"});
    if let (Some(c), Some(extra)) = (c.as_object_mut(), container.as_object()) {
        for (k, v) in extra {
            c.insert(k.clone(), v.clone());
        }
    }
    json!({"containers": [c], "volumes": volumes})
}

pub fn env_from_configmap(name: &str) -> Value {
    json!({"envFrom": [{"configMapRef": {"name": name}}]})
}

pub fn env_from_secret(name: &str) -> Value {
    json!({"envFrom": [{"secretRef": {"name": name}}]})
}

pub fn deployment(name: &str, annotations: Value, spec: Value) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": spec}
        }
    })
}

pub fn statefulset(name: &str, annotations: Value, spec: Value) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {
            "serviceName": name,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": spec}
        }
    })
}

pub fn daemonset(name: &str, annotations: Value, spec: Value) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": spec}
        }
    })
}

pub fn cronjob(name: &str, annotations: Value, mut spec: Value) -> Value {
    spec["restartPolicy"] = json!("Never");
    json!({
        "apiVersion": "batch/v1", "kind": "CronJob",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {
            "schedule": "0 0 1 1 *",
            "jobTemplate": {"spec": {"template": {"spec": spec}}}
        }
    })
}

pub fn job(name: &str, annotations: Value, mut spec: Value) -> Value {
    spec["restartPolicy"] = json!("Never");
    json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {"template": {"spec": spec}}
    })
}

/// The env of container `index` of an object's pod template.
pub fn template_env(obj: &Value, template_pointer: &str, index: usize) -> Vec<(String, String)> {
    obj.pointer(&format!("{template_pointer}/spec/containers/{index}/env"))
        .and_then(Value::as_array)
        .map(|env| {
            env.iter()
                .map(|e| {
                    (
                        e["name"].as_str().unwrap_or_default().to_string(),
                        e["value"].as_str().unwrap_or_default().to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The value of env var `var` anywhere in the pod template's containers.
pub fn env_value(obj: &Value, template_pointer: &str, var: &str) -> Option<String> {
    let containers = obj
        .pointer(&format!("{template_pointer}/spec/containers"))?
        .as_array()?;
    containers.iter().enumerate().find_map(|(i, _)| {
        template_env(obj, template_pointer, i)
            .into_iter()
            .find(|(n, _)| n == var)
            .map(|(_, v)| v)
    })
}

/// Reloader's SHA-1 recipe for a ConfigMap's `data`, computed independently for assertions.
pub fn configmap_hash(data: &[(&str, &str)]) -> String {
    use sha1::Digest;
    let mut entries: Vec<String> = data.iter().map(|(k, v)| format!("{k}={v}")).collect();
    entries.sort();
    let digest = sha1::Sha1::digest(entries.join(";").as_bytes());
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

// ---- waits on workloads and Events (annotations, references, strategies tests) ----

/// A secret from raw bytes (`data`, base64 on the wire), for payloads that are not UTF-8.
pub fn secret_bytes(name: &str, data: &[(&str, &[u8])]) -> Value {
    use base64::Engine;
    let data: serde_json::Map<String, Value> = data
        .iter()
        .map(|(k, v)| {
            let encoded = base64::engine::general_purpose::STANDARD.encode(v);
            (k.to_string(), Value::String(encoded))
        })
        .collect();
    json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "data": data})
}

/// Reloader's SHA-1 recipe for a Secret's `data` (raw bytes), computed independently.
pub fn secret_hash(data: &[(&str, &[u8])]) -> String {
    use sha1::Digest;
    let mut entries: Vec<Vec<u8>> = data
        .iter()
        .map(|(k, v)| [k.as_bytes(), b"=", v].concat())
        .collect();
    entries.sort();
    let digest = sha1::Sha1::digest(entries.join(&b';'));
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// The env var `var` of container `index` of a Deployment's pod template.
pub async fn deployment_container_env(
    client: &Client,
    ns: &str,
    name: &str,
    index: usize,
    var: &str,
) -> Option<String> {
    let obj = get(client, ns, "apps/v1", "Deployment", name).await?;
    template_env(&obj, "/spec/template", index)
        .into_iter()
        .find(|(n, _)| n == var)
        .map(|(_, v)| v)
}

/// Waits until env var `var` of a Deployment's pod template (any container) has `expected`, and
/// returns the Deployment as read then.
pub async fn wait_for_deployment_env(
    client: &Client,
    ns: &str,
    name: &str,
    var: &str,
    expected: &str,
) -> Value {
    super::wait_for(
        &format!("Deployment {name} to carry {var}={expected}"),
        std::time::Duration::from_secs(15),
        || async {
            let obj = get(client, ns, "apps/v1", "Deployment", name)
                .await
                .ok_or_else(|| "no such Deployment".to_string())?;
            match env_value(&obj, "/spec/template", var) {
                Some(v) if v == expected => Ok(obj),
                other => Err(format!(
                    "{var}={other:?}; env of the containers: {:?}",
                    obj.pointer("/spec/template/spec/containers")
                        .and_then(Value::as_array)
                        .map(|cs| cs.iter().map(|c| c["env"].clone()).collect::<Vec<_>>())
                )),
            }
        },
    )
    .await
}

/// Every `STAKATER_*` env var in a Deployment's pod template, as (container index, name, value).
pub async fn deployment_reload_vars(
    client: &Client,
    ns: &str,
    name: &str,
) -> Vec<(usize, String, String)> {
    let Some(obj) = get(client, ns, "apps/v1", "Deployment", name).await else {
        return Vec::new();
    };
    let count = obj
        .pointer("/spec/template/spec/containers")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    (0..count)
        .flat_map(|i| {
            template_env(&obj, "/spec/template", i)
                .into_iter()
                .filter(|(n, _)| n.starts_with("STAKATER_"))
                .map(move |(n, v)| (i, n, v))
        })
        .collect()
}

/// One Kubernetes Event about an object, from either Events API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventSummary {
    pub type_: String,
    pub reason: String,
    pub note: String,
}

/// Events in `ns` about the object `kind`/`name`, from events.k8s.io/v1 (`regarding`) and core
/// v1 (`involvedObject`); both show the same stored Events, so duplicates are dropped.
pub async fn events_about(client: &Client, ns: &str, kind: &str, name: &str) -> Vec<EventSummary> {
    use k8s_openapi::api::core::v1::Event as CoreEvent;
    use k8s_openapi::api::events::v1::Event;
    use kube::api::ListParams;
    let mut out: Vec<EventSummary> = Vec::new();
    let new_api: Api<Event> = Api::namespaced(client.clone(), ns);
    for e in new_api
        .list(&ListParams::default())
        .await
        .unwrap_or_else(|e| panic!("listing events.k8s.io/v1 Events in {ns}: {e}"))
    {
        let about = e.regarding.as_ref();
        if about.and_then(|r| r.kind.as_deref()) == Some(kind)
            && about.and_then(|r| r.name.as_deref()) == Some(name)
        {
            out.push(EventSummary {
                type_: e.type_.unwrap_or_default(),
                reason: e.reason.unwrap_or_default(),
                note: e.note.unwrap_or_default(),
            });
        }
    }
    let core_api: Api<CoreEvent> = Api::namespaced(client.clone(), ns);
    for e in core_api
        .list(&ListParams::default())
        .await
        .unwrap_or_else(|e| panic!("listing core v1 Events in {ns}: {e}"))
    {
        if e.involved_object.kind.as_deref() == Some(kind)
            && e.involved_object.name.as_deref() == Some(name)
        {
            let summary = EventSummary {
                type_: e.type_.unwrap_or_default(),
                reason: e.reason.unwrap_or_default(),
                note: e.message.unwrap_or_default(),
            };
            if !out.contains(&summary) {
                out.push(summary);
            }
        }
    }
    out
}

// ---- lifecycle, filters and bad-input tests ----

/// Lower-case hex SHA-1 of `bytes` (Reloader's written hash format).
pub fn sha1_hex(bytes: &[u8]) -> String {
    use sha1::Digest;
    sha1::Sha1::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A config (ConfigMap or Secret) with labels, built from one of the constructors above.
pub fn with_labels(mut object: Value, labels: Value) -> Value {
    object["metadata"]["labels"] = labels;
    object
}

/// Replaces a ConfigMap's `data` entries (merge patch): a real change for the controller.
pub async fn set_configmap_data(client: &Client, ns: &str, name: &str, data: Value) {
    merge_patch(client, ns, "v1", "ConfigMap", name, json!({ "data": data })).await;
}

/// Replaces a Secret's entries through `stringData`.
pub async fn set_secret_data(client: &Client, ns: &str, name: &str, string_data: Value) {
    merge_patch(
        client,
        ns,
        "v1",
        "Secret",
        name,
        json!({ "stringData": string_data }),
    )
    .await;
}

/// Deletes an object (background propagation); returns the object as the API server last had
/// it when it answers with the object, `None` when it answers with a Status.
pub async fn delete_object(
    client: &Client,
    ns: &str,
    api_version: &str,
    kind: &str,
    name: &str,
) -> Option<Value> {
    let answer = api_for(client, ns, api_version, kind)
        .delete(name, &kube::api::DeleteParams::background())
        .await
        .unwrap_or_else(|e| panic!("deleting {kind}/{name}: {e}"));
    answer.left().map(|o| serde_json::to_value(o).unwrap())
}

/// Env var `var` of a Deployment's pod template (any container); `None` also when the
/// Deployment does not exist.
pub async fn deployment_env(client: &Client, ns: &str, name: &str, var: &str) -> Option<String> {
    let obj = get(client, ns, "apps/v1", "Deployment", name).await?;
    env_value(&obj, "/spec/template", var)
}

/// Waits up to `secs` until a Deployment's env var `var` is `expected` (`None`: absent).
pub async fn wait_for_env_state(
    client: &Client,
    ns: &str,
    name: &str,
    var: &str,
    expected: Option<&str>,
    secs: u64,
) {
    super::wait_for(
        &format!("Deployment {ns}/{name}: {var} = {expected:?}"),
        std::time::Duration::from_secs(secs),
        || async {
            let seen = deployment_env(client, ns, name, var).await;
            if seen.as_deref() == expected {
                Ok(())
            } else {
                Err(format!("{var} = {seen:?}"))
            }
        },
    )
    .await
}

/// The `reloader.stakater.com/last-reloaded-from` annotation of a pod template, parsed.
pub fn last_reloaded_from(obj: &Value, template_pointer: &str) -> Option<Value> {
    let raw = obj
        .pointer(&format!("{template_pointer}/metadata/annotations"))?
        .get("reloader.stakater.com/last-reloaded-from")?
        .as_str()?;
    serde_json::from_str(raw).ok()
}

/// The controller's log without ANSI colour codes, so field values can be searched.
pub fn plain_logs(controller: &super::Controller) -> String {
    let raw = controller.logs();
    let mut out = String::with_capacity(raw.len());
    let mut chars = raw.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' && chars.peek() == Some(&'[') {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Waits until one line of the controller's log contains every one of `needles`; returns it.
pub async fn wait_for_log_line(controller: &super::Controller, needles: &[&str]) -> String {
    super::wait_for(
        &format!("a log line containing all of {needles:?}"),
        std::time::Duration::from_secs(15),
        || async {
            plain_logs(controller)
                .lines()
                .find(|l| needles.iter().all(|n| l.contains(n)))
                .map(String::from)
                .ok_or_else(|| "no such line yet".to_string())
        },
    )
    .await
}

/// Waits until a Warning Event with `reason` about `kind`/`name` exists; returns its note.
pub async fn wait_for_warning_event(
    client: &Client,
    ns: &str,
    kind: &str,
    name: &str,
    reason: &str,
) -> String {
    super::wait_for(
        &format!("a Warning {reason} Event about {kind} {ns}/{name}"),
        std::time::Duration::from_secs(15),
        || async {
            let events = events_about(client, ns, kind, name).await;
            events
                .iter()
                .find(|e| e.type_ == "Warning" && e.reason == reason)
                .map(|e| e.note.clone())
                .ok_or_else(|| format!("events: {events:?}"))
        },
    )
    .await
}

/// Replaces keys of a ConfigMap's `data` (merge patch).
pub async fn update_configmap(client: &Client, ns: &str, name: &str, data: Value) {
    merge_patch(client, ns, "v1", "ConfigMap", name, json!({"data": data})).await;
}

/// Replaces keys of a Secret through `stringData` (merge patch).
pub async fn update_secret(client: &Client, ns: &str, name: &str, string_data: Value) {
    merge_patch(
        client,
        ns,
        "v1",
        "Secret",
        name,
        json!({"stringData": string_data}),
    )
    .await;
}

/// `value` with `annotations` on its metadata (configs, workloads).
pub fn with_annotations(mut value: Value, annotations: Value) -> Value {
    value["metadata"]["annotations"] = annotations;
    value
}

/// A workload with `annotations` on its pod template's metadata.
pub fn with_template_annotations(mut value: Value, annotations: Value) -> Value {
    value["spec"]["template"]["metadata"]["annotations"] = annotations;
    value
}

/// A container reading every listed ConfigMap and Secret through `envFrom`.
pub fn env_from_configs(configmaps: &[&str], secrets: &[&str]) -> Value {
    let mut from: Vec<Value> = configmaps
        .iter()
        .map(|n| json!({"configMapRef": {"name": n}}))
        .collect();
    from.extend(secrets.iter().map(|n| json!({"secretRef": {"name": n}})));
    json!({ "envFrom": from })
}

/// A Deployment opted in with `reloader.stakater.com/auto: "true"` plus `annotations`, whose one
/// container is `container` (see [`pod_spec`]).
pub fn auto_deployment(name: &str, annotations: Value, container: Value) -> Value {
    let mut all = json!({"reloader.stakater.com/auto": "true"});
    if let (Some(all), Some(extra)) = (all.as_object_mut(), annotations.as_object()) {
        for (k, v) in extra {
            all.insert(k.clone(), v.clone());
        }
    }
    deployment(name, all, pod_spec(container, json!([])))
}

/// A label value no other test uses (for selectors in cluster-wide mode).
pub fn unique_token(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!(
        "{prefix}-{:x}",
        (nanos as u64) ^ u64::from(std::process::id())
    )
}
