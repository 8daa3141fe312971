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
