//! Reads what explain and lint need from the API server, with the user's credentials: workloads,
//! the namespace's configs (hashed with the controller's recipes, then dropped), whether the
//! selectors select them (asked of the API server, which evaluates selectors for the controller's
//! watches too), and the workload's Events.

use std::collections::{BTreeMap, HashSet};

use k8s_openapi::api::core::v1::{ConfigMap, Event, Namespace, PodSpec, PodTemplateSpec, Secret};
use kube::api::{Api, DynamicObject, ListParams};
use kube::{Client, Resource, ResourceExt};
use serde::Deserialize;
use serde_json::Value;

use crate::config::PreciseKeys;
use crate::config::{AnnotationKeys, Settings};
use crate::digest::ConfigSource;
use crate::index::{WorkloadEntry, workload_entry};
use crate::model::{ConfigKey, ConfigKind, WorkloadKind};
use crate::reload_policy::{PolicyReading, ReloadPolicy, config_flag};
use crate::reloader_format::hash::{ConfigPayload, digest_payload};
use crate::reloader_format::precise::KeyDigests;
use crate::reloader_format::precise::key_digests;
use crate::reloader_format::template::{LastReloadedFrom, recorded_hash};
use crate::resources::api_resource;

use super::report::{ConfigSeen, NamespaceFacts};
use super::{EventLine, LastReload};

#[derive(Debug, thiserror::Error)]
pub enum GatherError {
    #[error("{what}: {source}")]
    Api {
        what: String,
        #[source]
        source: kube::Error,
    },
    #[error("{0} not found")]
    NotFound(String),
    #[error("{0}")]
    Invalid(String),
}

fn api_err(what: impl Into<String>) -> impl FnOnce(kube::Error) -> GatherError {
    let what = what.into();
    move |source| GatherError::Api { what, source }
}

/// A workload as explain reads it: the controller's index entry plus what the index drops.
pub struct WorkloadView {
    pub entry: WorkloadEntry,
    pub reading: PolicyReading,
    pub spec: PodSpec,
    pub metadata_annotations: BTreeMap<String, String>,
    pub template_annotations: BTreeMap<String, String>,
}

impl WorkloadView {
    /// Builds the view with the index's own builder (the entry the controller would hold).
    pub fn from_object(
        kind: WorkloadKind,
        object: &Value,
        keys: &AnnotationKeys,
    ) -> Result<Self, GatherError> {
        let entry =
            workload_entry(kind, object, keys).map_err(|e| GatherError::Invalid(e.to_string()))?;
        let template: PodTemplateSpec = object
            .pointer(kind.pod_template_pointer())
            .map(PodTemplateSpec::deserialize)
            .transpose()
            .map_err(|e| GatherError::Invalid(e.to_string()))?
            .unwrap_or_default();
        let template_annotations = template
            .metadata
            .and_then(|m| m.annotations)
            .unwrap_or_default();
        let metadata_annotations: BTreeMap<String, String> = object
            .pointer("/metadata/annotations")
            .cloned()
            .and_then(|v| serde_json::from_value(v).ok())
            .unwrap_or_default();
        let reading = ReloadPolicy::read(keys, &metadata_annotations, &template_annotations);
        Ok(Self {
            entry,
            reading,
            spec: template.spec.unwrap_or_default(),
            metadata_annotations,
            template_annotations,
        })
    }

    /// What `explain` says of this workload in its namespace (`facts`): of every config it
    /// uses, or `only` one.
    pub fn explain(
        &self,
        settings: &Settings,
        facts: &super::report::NamespaceFacts,
        annotations: Vec<crate::reload_policy::AnnotationRead>,
        only: Option<(ConfigKind, &str)>,
    ) -> super::report::Explanation {
        let recorded = |k: ConfigKind, n: &str| self.recorded(&settings.keys, k, n);
        let ctx = super::report::ExplainContext {
            settings,
            namespace: facts,
            spec: Some(&self.spec),
            recorded: &recorded,
        };
        super::report::explain(&ctx, &self.entry, annotations, only)
    }

    /// The hash the template records for a config (env var or annotation).
    pub fn recorded(&self, keys: &AnnotationKeys, kind: ConfigKind, name: &str) -> Option<String> {
        let key = ConfigKey::new(kind, &self.entry.key.namespace, name);
        recorded_hash(&self.spec, &self.template_annotations, keys, &key)
    }
}

pub async fn workload(
    client: &Client,
    kind: WorkloadKind,
    namespace: &str,
    name: &str,
    keys: &AnnotationKeys,
) -> Result<WorkloadView, GatherError> {
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), namespace, &api_resource(kind));
    let what = format!("{kind} {namespace}/{name}");
    let obj = api
        .get_opt(name)
        .await
        .map_err(api_err(format!("reading {what}")))?
        .ok_or_else(|| GatherError::NotFound(what))?;
    let value = serde_json::to_value(&obj).map_err(|e| GatherError::Invalid(e.to_string()))?;
    WorkloadView::from_object(kind, &value, keys)
}

/// Every workload of `kind` in `namespace` (or all), as JSON objects.
pub async fn workloads(
    client: &Client,
    kind: WorkloadKind,
    namespace: Option<&str>,
) -> Result<Vec<Value>, GatherError> {
    let ar = api_resource(kind);
    let api: Api<DynamicObject> = match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    };
    let list = match api.list(&ListParams::default()).await {
        Ok(l) => l,
        // The kind is not served (no Argo Rollouts, no OpenShift): nothing to lint.
        Err(kube::Error::Api(s)) if s.code == 404 => return Ok(Vec::new()),
        Err(e) => return Err(api_err(format!("listing {kind}s"))(e)),
    };
    list.items
        .into_iter()
        .map(|o| serde_json::to_value(o).map_err(|e| GatherError::Invalid(e.to_string())))
        .collect()
}

/// Names of the objects a list with `params` returns (`None`: no selector, everything is
/// selected). The API server evaluates the selectors, as it does for the controller's watches.
async fn selected_names<K>(
    api: &Api<K>,
    params: Option<ListParams>,
) -> Result<Option<HashSet<(String, String)>>, kube::Error>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let Some(params) = params else {
        return Ok(None);
    };
    let list = api.list_metadata(&params).await?;
    Ok(Some(
        list.items
            .iter()
            .map(|o| (o.namespace().unwrap_or_default(), o.name_any()))
            .collect(),
    ))
}

/// Namespaces `--namespace-selector` selects among `namespaces` (all of them without one).
pub async fn selected_namespaces(
    client: &Client,
    settings: &Settings,
) -> Result<Option<HashSet<String>>, GatherError> {
    let api: Api<Namespace> = Api::all(client.clone());
    let params = settings
        .namespace_selector
        .as_deref()
        .map(|s| ListParams::default().labels(s));
    let names = selected_names(&api, params)
        .await
        .map_err(api_err("listing namespaces with --namespace-selector"))?;
    Ok(names.map(|set| set.into_iter().map(|(_, n)| n).collect()))
}

/// The configs of kind `K`, as the controller's watches of `K` would see them: the resource label
/// selector and the kind's field selector ([`Settings::config_field_selector`], the ignored
/// Secret types) are the watches' own, evaluated by the API server. `type_of`: a Secret's type.
async fn add_configs<K>(
    client: &Client,
    settings: &Settings,
    namespace: Option<&str>,
    type_of: fn(&K) -> Option<String>,
    out: &mut ClusterFacts,
) -> Result<(), GatherError>
where
    K: ConfigSource + Resource<Scope = k8s_openapi::NamespaceResourceScope>,
    K::DynamicType: Default,
{
    let api: Api<K> = match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let what = format!("listing {}s", K::KIND);
    let labels = settings.resource_label_selector.as_deref();
    let selected = selected_names(&api, labels.map(|l| ListParams::default().labels(l)))
        .await
        .map_err(api_err(format!("{what} with --resource-label-selector")))?;
    let fields = settings.config_field_selector(K::KIND);
    let watched = selected_names(&api, fields.map(|f| ListParams::default().fields(&f)))
        .await
        .map_err(api_err(format!("{what} with --ignore-secret-types")))?;
    let list = api
        .list(&ListParams::default())
        .await
        .map_err(api_err(what))?;
    for obj in list.items {
        let id = (obj.namespace().unwrap_or_default(), obj.name_any());
        let annotations = obj.annotations().clone();
        out.note_annotations(K::KIND, &id, &annotations);
        let facts = out.namespaces.entry(id.0.clone()).or_default();
        if watched.as_ref().is_some_and(|w| !w.contains(&id)) {
            let secret_type = type_of(&obj).unwrap_or_default();
            facts
                .unwatched_secret_types
                .insert(id.1.clone(), secret_type);
        }
        let payload = obj.into_payload();
        let keys = match settings.precise_keys {
            PreciseKeys::Off => KeyDigests::default(),
            _ => key_digests(&payload),
        };
        let seen = ConfigSeen {
            ignore: config_flag(&annotations, &settings.keys.ignore),
            matched: config_flag(&annotations, &settings.keys.match_),
            selected: selected.as_ref().is_none_or(|s| s.contains(&id)),
            hash: Some(digest_payload(payload).reloader_hash()),
            keys,
            held: None,
        };
        facts.configs.insert((K::KIND, id.1), seen);
    }
    Ok(())
}

/// SecretProviderClasses: the hash of the versions their pods mount (as the controller's CSI
/// watch computes it); absent when the CSI driver's CRDs are not installed.
async fn add_spcs(
    client: &Client,
    settings: &Settings,
    namespace: Option<&str>,
    out: &mut ClusterFacts,
) -> Result<(), GatherError> {
    let gvk = |kind: &str, plural: &str| {
        kube::core::ApiResource::from_gvk_with_plural(
            &kube::core::GroupVersionKind::gvk("secrets-store.csi.x-k8s.io", "v1", kind),
            plural,
        )
    };
    let api = |ar: &kube::core::ApiResource| -> Api<DynamicObject> {
        match namespace {
            Some(ns) => Api::namespaced_with(client.clone(), ns, ar),
            None => Api::all_with(client.clone(), ar),
        }
    };
    let classes = match api(&gvk("SecretProviderClass", "secretproviderclasses"))
        .list(&ListParams::default())
        .await
    {
        Ok(l) => l.items,
        Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
        Err(e) => return Err(api_err("listing secretproviderclasses")(e)),
    };
    let statuses = api(&gvk(
        "SecretProviderClassPodStatus",
        "secretproviderclasspodstatuses",
    ))
    .list(&ListParams::default())
    .await
    .map(|l| l.items)
    .unwrap_or_default();
    for class in classes {
        let (ns, name) = (class.namespace().unwrap_or_default(), class.name_any());
        let status = statuses.iter().rev().find_map(|s| {
            let st = s.data.get("status")?;
            (s.namespace().as_deref() == Some(ns.as_str())
                && st.get("secretProviderClassName")?.as_str()? == name)
                .then_some(st)
        });
        let hash = status.map(|st| {
            digest_payload(ConfigPayload::secret_provider_class(name.clone(), st)).reloader_hash()
        });
        let annotations = class.annotations().clone();
        let id = (ns, name);
        out.note_annotations(ConfigKind::SecretProviderClass, &id, &annotations);
        out.namespaces.entry(id.0).or_default().configs.insert(
            (ConfigKind::SecretProviderClass, id.1),
            ConfigSeen {
                ignore: config_flag(&annotations, &settings.keys.ignore),
                matched: config_flag(&annotations, &settings.keys.match_),
                selected: true,
                hash,
                keys: KeyDigests::default(),
                held: None,
            },
        );
    }
    Ok(())
}

/// The annotation keys of one config (no values), for lint's `unknown-annotation` check.
#[derive(Debug, Clone)]
pub struct ConfigAnnotationKeys {
    pub kind: ConfigKind,
    pub namespace: String,
    pub name: String,
    pub keys: Vec<String>,
}

/// What explain and lint know of the namespaces they look at.
#[derive(Debug, Default)]
pub struct ClusterFacts {
    /// Namespaces holding configs, with them.
    pub namespaces: BTreeMap<String, NamespaceFacts>,
    /// What `--namespace-selector` selects (`None`: no selector).
    pub selected: Option<HashSet<String>>,
    /// Configs carrying annotations, with their keys.
    pub config_annotations: Vec<ConfigAnnotationKeys>,
}

impl ClusterFacts {
    fn note_annotations(
        &mut self,
        kind: ConfigKind,
        (namespace, name): &(String, String),
        annotations: &BTreeMap<String, String>,
    ) {
        if annotations.is_empty() {
            return;
        }
        self.config_annotations.push(ConfigAnnotationKeys {
            kind,
            namespace: namespace.clone(),
            name: name.clone(),
            keys: annotations.keys().cloned().collect(),
        });
    }

    /// The facts of `namespace` (one with no config has none).
    pub fn namespace(&self, namespace: &str) -> NamespaceFacts {
        let mut facts = self.namespaces.get(namespace).cloned().unwrap_or_default();
        facts.selected = self.selected.as_ref().is_none_or(|s| s.contains(namespace));
        facts
    }
}

/// Facts of one namespace (`Some`) or every namespace (`None`).
pub async fn cluster(
    client: &Client,
    settings: &Settings,
    namespace: Option<&str>,
) -> Result<ClusterFacts, GatherError> {
    let mut facts = ClusterFacts::default();
    add_configs::<ConfigMap>(client, settings, namespace, |_| None, &mut facts).await?;
    add_configs::<Secret>(client, settings, namespace, |s| s.type_.clone(), &mut facts).await?;
    add_spcs(client, settings, namespace, &mut facts).await?;
    add_halts(client, settings, &mut facts).await;
    facts.selected = selected_namespaces(client, settings).await?;
    Ok(facts)
}

/// The halts the controller keeps (in the namespace of `--from-deployment`, or the given
/// POD_NAMESPACE) that still hold: the config has the value that halted. Unreadable: none.
async fn add_halts(client: &Client, settings: &Settings, facts: &mut ClusterFacts) {
    use crate::waves::{HALTS_CONFIGMAP, records_from};
    let Some(namespace) = &settings.halts_namespace else {
        return;
    };
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let data = match api.get_opt(HALTS_CONFIGMAP).await {
        Ok(cm) => cm.and_then(|cm| cm.data).unwrap_or_default(),
        Err(e) => {
            tracing::debug!(namespace, error = %e, "the kept halts are not readable");
            return;
        }
    };
    for record in records_from(data).0 {
        let Ok(key) = record.config() else { continue };
        let seen = facts
            .namespaces
            .get_mut(&*key.namespace)
            .and_then(|ns| ns.configs.get_mut(&(key.kind, key.name.to_string())));
        if let Some(seen) = seen.filter(|s| s.hash.as_deref() == Some(record.hash.as_str())) {
            seen.held = Some(format!(
                "reload halted: {}; workloads held until `kube-reloader resume {}/{} -n {}` or a \
                 new change (kept in {namespace}/{HALTS_CONFIGMAP})",
                record.describe(),
                record.kind,
                record.name,
                record.namespace
            ));
        }
    }
}

/// What the template records and the `Reloaded` / `ReloadFail` Events about the workload.
pub async fn last_reload(
    client: &Client,
    view: &WorkloadView,
    keys: &AnnotationKeys,
) -> Result<LastReload, GatherError> {
    let key = &view.entry.key;
    let mut recorded: Vec<String> = view
        .entry
        .uses
        .iter()
        .filter_map(|u| {
            let hash = u.recorded.as_deref()?;
            Some(format!("{}/{} = {hash}", u.kind, u.name))
        })
        .collect();
    if let Some(r) = view
        .template_annotations
        .get(&keys.last_reloaded_from)
        .and_then(|v| serde_json::from_str::<LastReloadedFrom>(v).ok())
    {
        let at = jiff::Timestamp::from_second(r.observed_at)
            .map(|t| t.to_string())
            .unwrap_or_default();
        recorded.push(format!(
            "{} annotation: {} {}/{} hash {} at {at}",
            keys.last_reloaded_from,
            r.kind.to_lowercase(),
            r.namespace,
            r.name,
            r.hash
        ));
    }
    let api: Api<Event> = Api::namespaced(client.clone(), &key.namespace);
    let fields = format!(
        "involvedObject.kind={},involvedObject.name={}",
        key.kind, key.name
    );
    let list = api
        .list(&ListParams::default().fields(&fields))
        .await
        .map_err(api_err("listing the workload's Events"))?;
    let mut events: Vec<EventLine> = list
        .items
        .into_iter()
        .filter(|e| matches!(e.reason.as_deref(), Some("Reloaded" | "ReloadFail")))
        .map(|e| {
            let time = e
                .last_timestamp
                .map(|t| t.0.to_string())
                .or_else(|| e.event_time.map(|t| t.0.to_string()))
                .unwrap_or_default();
            EventLine {
                time,
                reason: e.reason.unwrap_or_default(),
                message: e.message.unwrap_or_default(),
            }
        })
        .collect();
    events.sort_by(|a, b| a.time.cmp(&b.time));
    let skip = events.len().saturating_sub(5);
    events.drain(..skip);
    Ok(LastReload { recorded, events })
}

/// Reads a running controller's flags from its Deployment (`--from-deployment ns/name`): the
/// args of the container that runs kube-reloader (or Reloader), and `KUBERNETES_NAMESPACE`.
pub async fn deployment_args(client: &Client, target: &str) -> Result<Vec<String>, GatherError> {
    let (ns, name) = target.split_once('/').ok_or_else(|| {
        GatherError::Invalid(format!(
            "--from-deployment '{target}': expected <namespace>/<name>"
        ))
    })?;
    let spec = deployment(client, ns, name).await?.spec.template.spec;
    let spec = spec
        .ok_or_else(|| GatherError::Invalid(format!("Deployment {ns}/{name} has no pod spec")))?;
    Ok(controller_args(&spec, ns))
}

async fn deployment(
    client: &Client,
    namespace: &str,
    name: &str,
) -> Result<k8s_openapi::api::apps::v1::Deployment, GatherError> {
    let api: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(client.clone(), namespace);
    let what = format!("Deployment {namespace}/{name}");
    api.get_opt(name)
        .await
        .map_err(api_err(format!("reading {what}")))?
        .ok_or(GatherError::NotFound(what))
}

/// The ServiceAccount a Deployment's pods run as (`default` when none is named).
pub async fn deployment_service_account(
    client: &Client,
    namespace: &str,
    name: &str,
) -> Result<String, GatherError> {
    let account = deployment(client, namespace, name)
        .await?
        .spec
        .template
        .spec
        .and_then(|s| s.service_account_name)
        .filter(|s| !s.is_empty());
    Ok(account.unwrap_or_else(|| "default".into()))
}

/// The controller's args in a pod spec (pure, see [`deployment_args`]).
pub fn controller_args(spec: &PodSpec, namespace: &str) -> Vec<String> {
    let container = spec
        .containers
        .iter()
        .find(|c| c.name.contains("reloader"))
        .or_else(|| spec.containers.first());
    let Some(c) = container else {
        return Vec::new();
    };
    let mut args: Vec<String> = c.command.iter().flatten().skip(1).cloned().collect();
    args.extend(c.args.iter().flatten().cloned());
    for e in c
        .env
        .iter()
        .flatten()
        .filter(|e| e.name == "KUBERNETES_NAMESPACE")
    {
        let from_field = e
            .value_from
            .as_ref()
            .and_then(|v| v.field_ref.as_ref())
            .is_some_and(|f| f.field_path == "metadata.namespace");
        let value = e
            .value
            .clone()
            .or_else(|| from_field.then(|| namespace.to_string()));
        if let Some(v) = value.filter(|v| !v.is_empty()) {
            args.push(format!("--kubernetes-namespace={v}"));
        }
    }
    args
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn controller_args_from_a_reloader_deployment() {
        let spec: PodSpec = serde_json::from_value(json!({"containers": [
            {"name": "sidecar", "args": ["--x"]},
            {"name": "kube-reloader", "command": ["/kube-reloader", "--auto-reload-all"],
             "args": ["--reload-strategy=annotations"],
             "env": [{"name": "KUBERNETES_NAMESPACE",
                      "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}]}
        ]}))
        .unwrap();
        assert_eq!(
            controller_args(&spec, "ops"),
            [
                "--auto-reload-all",
                "--reload-strategy=annotations",
                "--kubernetes-namespace=ops"
            ]
        );
    }
}
