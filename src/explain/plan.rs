//! `kube-reloader plan <config> -n NS`: what a change of a config would roll now, and in which
//! waves, from the same decision and wave-planning code the controller runs; and
//! `kube-reloader resume`, which releases a halted change through the config's annotation.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Client;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::Value;

use crate::config::Settings;
use crate::model::{ConfigKind, WorkloadKey, WorkloadKind};
use crate::waves::{CANARY_LABEL, Candidate, PolicyText, WAVES_ANNOTATION, WavePolicy, plan_waves};

use super::gather::{self, ClusterFacts, GatherError, WorkloadView};

/// One workload a change would roll.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlannedWorkload {
    pub kind: WorkloadKind,
    pub name: String,
    pub replicas: i64,
    /// The namespace's tenant (`--tenant-label`), or the namespace.
    pub tenant: String,
    pub canary: bool,
    /// Why it rolls: `auto`, `explicit_list`, `search`.
    pub reason: &'static str,
    /// A change now would wait for its window or delay until then (RFC 3339).
    pub waits_until: Option<String>,
}

#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Plan {
    pub config: String,
    pub namespace: String,
    pub workloads: Vec<PlannedWorkload>,
    /// `None`: no wave policy applies, everything is queued at once.
    pub policy: Option<String>,
    /// Workload names per wave, in order (one wave when under the threshold or without policy).
    pub waves: Vec<Vec<String>>,
}

/// What a change of `kind/name` in `namespace` would roll, from the live objects.
pub async fn plan(
    client: &Client,
    settings: &Settings,
    kind: ConfigKind,
    name: &str,
    namespace: &str,
) -> Result<Plan, GatherError> {
    let facts = gather::cluster(client, settings, Some(namespace)).await?;
    let meta = namespace_meta(client, namespace).await;
    let tenant = tenant_of(settings, namespace, &meta);
    let mut workloads = Vec::new();
    for workload_kind in WorkloadKind::all() {
        for object in gather::workloads(client, workload_kind, Some(namespace)).await? {
            if let Some(mut w) = planned(settings, &facts, workload_kind, &object, kind, name) {
                w.tenant.clone_from(&tenant);
                w.waits_until = waits_until(settings, workload_kind, &object, &meta);
                workloads.push(w);
            }
        }
    }
    let own = config_policy(client, kind, name, namespace).await?;
    let of_namespace = namespace_policy(namespace, &meta)?;
    let policy =
        crate::waves::resolve(settings.waves.as_ref(), of_namespace.as_ref(), own.as_ref());
    Ok(assemble(kind, name, namespace, workloads, policy))
}

/// The workload in `object`, if a change of the config would roll it (the controller's
/// decision, as `explain` reports it).
fn planned(
    settings: &Settings,
    facts: &ClusterFacts,
    workload_kind: WorkloadKind,
    object: &Value,
    kind: ConfigKind,
    name: &str,
) -> Option<PlannedWorkload> {
    let view = WorkloadView::from_object(workload_kind, object, &settings.keys).ok()?;
    let ns = facts.namespace(&view.entry.key.namespace);
    let explanation = view.explain(settings, &ns, Vec::new(), Some((kind, name)));
    let report = explanation.configs.first().filter(|c| c.reload)?;
    let labels: BTreeMap<String, String> = object
        .pointer("/metadata/labels")
        .cloned()
        .and_then(|v| serde_json::from_value(v).ok())
        .unwrap_or_default();
    Some(PlannedWorkload {
        kind: workload_kind,
        name: view.entry.key.name.to_string(),
        replicas: object
            .pointer("/spec/replicas")
            .and_then(Value::as_i64)
            .unwrap_or(1),
        tenant: String::new(),
        canary: labels.get(CANARY_LABEL).is_some_and(|v| v == "true"),
        reason: report.reason,
        waits_until: None,
    })
}

/// When a change made now would roll the workload in `object`, if its window or delay (or its
/// namespace's) holds it (`None`: at once).
fn waits_until(
    settings: &Settings,
    workload_kind: WorkloadKind,
    object: &Value,
    namespace: &ObjectMeta,
) -> Option<String> {
    let view = WorkloadView::from_object(workload_kind, object, &settings.keys).ok()?;
    let of_namespace = namespace
        .annotations
        .as_ref()
        .map(|a| crate::reload_policy::ReloadTiming::read(&settings.keys, a).0)
        .unwrap_or_default();
    let timing = view.entry.policy.timing.or(&of_namespace);
    let now = jiff::Timestamp::now();
    let at = crate::reload_windows::due(now, timing.window.as_deref(), timing.delay);
    let at = at.round(jiff::Unit::Second).unwrap_or(at);
    (at > now).then(|| at.to_string())
}

/// The namespace's metadata, read once for its tenant and its policy (unreadable: none).
async fn namespace_meta(client: &Client, namespace: &str) -> ObjectMeta {
    use k8s_openapi::api::core::v1::Namespace;
    let api: Api<Namespace> = Api::all(client.clone());
    let found = api.get_opt(namespace).await.ok().flatten();
    found.map(|n| n.metadata).unwrap_or_default()
}

/// The namespace's tenant: its `--tenant-label` value, else the namespace (as the queue groups).
fn tenant_of(settings: &Settings, namespace: &str, meta: &ObjectMeta) -> String {
    settings
        .tenant_label
        .as_ref()
        .and_then(|label| meta.labels.as_ref()?.get(label).cloned())
        .unwrap_or_else(|| namespace.to_string())
}

/// The namespace's `kube-reloader.io/waves` (a malformed one is an error here: the user asked).
fn namespace_policy(namespace: &str, meta: &ObjectMeta) -> Result<Option<PolicyText>, GatherError> {
    let raw = meta
        .annotations
        .as_ref()
        .and_then(|a| a.get(WAVES_ANNOTATION));
    raw.map(|raw| {
        PolicyText::parse(raw).map_err(|e| {
            GatherError::Invalid(format!("namespace {namespace}: {WAVES_ANNOTATION}: {e}"))
        })
    })
    .transpose()
}

/// The config's own `kube-reloader.io/waves` (a malformed one is an error here: the user asked).
async fn config_policy(
    client: &Client,
    kind: ConfigKind,
    name: &str,
    namespace: &str,
) -> Result<Option<PolicyText>, GatherError> {
    let Some(object) = config_object(client, kind, name, namespace).await? else {
        return Ok(None);
    };
    let raw = object
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(WAVES_ANNOTATION));
    raw.map(|raw| {
        PolicyText::parse(raw).map_err(|e| GatherError::Invalid(format!("{WAVES_ANNOTATION}: {e}")))
    })
    .transpose()
}

async fn config_object(
    client: &Client,
    kind: ConfigKind,
    name: &str,
    namespace: &str,
) -> Result<Option<DynamicObject>, GatherError> {
    let api = config_api(client, kind, namespace)?;
    api.get_opt(name)
        .await
        .map_err(|e| GatherError::Invalid(format!("reading {}/{name}: {e}", kind.as_str())))
}

fn config_api(
    client: &Client,
    kind: ConfigKind,
    namespace: &str,
) -> Result<Api<DynamicObject>, GatherError> {
    use k8s_openapi::api::core::v1::{ConfigMap, Secret};
    use kube::discovery::ApiResource;
    let ar = match kind {
        ConfigKind::ConfigMap => ApiResource::erase::<ConfigMap>(&()),
        ConfigKind::Secret => ApiResource::erase::<Secret>(&()),
        ConfigKind::SecretProviderClass => {
            return Err(GatherError::Invalid(
                "waves apply to ConfigMaps and Secrets".into(),
            ));
        }
    };
    Ok(Api::namespaced_with(client.clone(), namespace, &ar))
}

/// The plan from the workloads found, pure.
pub fn assemble(
    kind: ConfigKind,
    name: &str,
    namespace: &str,
    mut workloads: Vec<PlannedWorkload>,
    policy: Option<WavePolicy>,
) -> Plan {
    workloads.sort_by(|a, b| (a.kind.as_str(), &a.name).cmp(&(b.kind.as_str(), &b.name)));
    let key = |w: &PlannedWorkload| WorkloadKey::new(w.kind, namespace, &w.name);
    let label = |k: &WorkloadKey| format!("{}/{}", k.kind.as_str().to_lowercase(), k.name);
    let waves = match &policy {
        Some(policy) => {
            let candidates = workloads
                .iter()
                .map(|w| Candidate {
                    key: key(w),
                    canary: w.canary,
                })
                .collect();
            plan_waves(candidates, policy)
                .into_iter()
                .map(|wave| wave.iter().map(label).collect())
                .collect()
        }
        None if workloads.is_empty() => Vec::new(),
        None => vec![workloads.iter().map(|w| label(&key(w))).collect()],
    };
    Plan {
        config: format!("{}/{name}", kind.as_str()),
        namespace: namespace.to_string(),
        workloads,
        policy: policy.map(|p| p.to_string()),
        waves,
    }
}

/// The plan as text.
pub fn render(plan: &Plan) -> String {
    let mut out = format!(
        "A change of {} in {} would roll {} workloads ({} replicas).\n",
        plan.config,
        plan.namespace,
        plan.workloads.len(),
        plan.workloads.iter().map(|w| w.replicas).sum::<i64>()
    );
    let mut by_kind: BTreeMap<&str, usize> = BTreeMap::new();
    let mut by_tenant: BTreeMap<&str, usize> = BTreeMap::new();
    for w in &plan.workloads {
        *by_kind.entry(w.kind.as_str()).or_default() += 1;
        *by_tenant.entry(&w.tenant).or_default() += 1;
    }
    let counts = |m: &BTreeMap<&str, usize>| {
        m.iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    if !plan.workloads.is_empty() {
        out.push_str(&format!("  by kind:   {}\n", counts(&by_kind)));
        out.push_str(&format!("  by tenant: {}\n", counts(&by_tenant)));
    }
    match &plan.policy {
        Some(policy) => out.push_str(&format!("Wave policy: {policy}\n")),
        None => out.push_str("No wave policy: every workload is queued at once.\n"),
    }
    for (i, wave) in plan.waves.iter().enumerate() {
        out.push_str(&format!(
            "  wave {} ({}): {}\n",
            i + 1,
            wave.len(),
            wave.join(" ")
        ));
    }
    for w in &plan.workloads {
        if let Some(until) = &w.waits_until {
            out.push_str(&format!(
                "  {}/{} waits for its reload window or delay: rolls at {until}\n",
                w.kind.as_str().to_lowercase(),
                w.name
            ));
        }
    }
    out
}

/// `kube-reloader resume`: sets the config's `kube-reloader.io/resume` to a new value; the
/// controller releases the halted change of the config when it sees it.
pub async fn resume(
    client: &Client,
    kind: ConfigKind,
    name: &str,
    namespace: &str,
) -> Result<String, GatherError> {
    let api = config_api(client, kind, namespace)?;
    let value = jiff::Timestamp::now().to_string();
    let patch = serde_json::json!({"metadata": {"annotations": {
        crate::waves::RESUME_ANNOTATION: value
    }}});
    api.patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .map_err(|e| GatherError::Invalid(format!("annotating {}/{name}: {e}", kind.as_str())))?;
    Ok(format!(
        "{}/{name} in {namespace}: {} set to {value}; the controller rolls the workloads its \
         halted change holds.\n",
        kind.as_str(),
        crate::waves::RESUME_ANNOTATION
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workload(name: &str, canary: bool) -> PlannedWorkload {
        PlannedWorkload {
            kind: WorkloadKind::Deployment,
            name: name.into(),
            replicas: 2,
            tenant: "team-a".into(),
            canary,
            reason: "auto",
            waits_until: None,
        }
    }

    #[test]
    fn the_plan_says_which_workloads_wait_for_their_window_and_until_when() {
        let mut held = workload("nightly", false);
        held.waits_until = Some("2026-12-07T22:00:00Z".into());
        let plan = assemble(
            ConfigKind::ConfigMap,
            "shared",
            "ns",
            vec![workload("web", false), held],
            None,
        );
        let text = render(&plan);
        assert!(
            text.contains("deployment/nightly waits for its reload window or delay: rolls at 2026-12-07T22:00:00Z"),
            "{text}"
        );
        assert!(!text.contains("deployment/web waits"), "{text}");
    }

    #[test]
    fn the_plan_cuts_the_waves_the_controller_would() {
        let workloads: Vec<_> = (0..12)
            .map(|i| workload(&format!("w-{i:02}"), i == 7))
            .collect();
        let policy = PolicyText::parse("threshold=10,growth=2").unwrap();
        let plan = assemble(
            ConfigKind::ConfigMap,
            "shared",
            "ns",
            workloads,
            policy.over(WavePolicy::default()),
        );
        let sizes: Vec<usize> = plan.waves.iter().map(Vec::len).collect();
        assert_eq!(sizes, [1, 2, 4, 5]);
        assert_eq!(
            plan.waves[0],
            ["deployment/w-07"],
            "the labelled canary first"
        );
        let text = render(&plan);
        assert!(
            text.starts_with(
                "A change of configmap/shared in ns would roll 12 workloads (24 replicas)."
            ),
            "{text}"
        );
        assert!(text.contains("by tenant: team-a 12"), "{text}");
        assert!(text.contains("  wave 1 (1): deployment/w-07\n"), "{text}");
    }

    #[test]
    fn without_a_policy_everything_is_one_wave() {
        let plan = assemble(
            ConfigKind::Secret,
            "db",
            "ns",
            vec![workload("a", false)],
            None,
        );
        assert_eq!(plan.waves, [vec!["deployment/a".to_string()]]);
        assert!(render(&plan).contains("No wave policy"));
        let empty = assemble(ConfigKind::Secret, "db", "ns", Vec::new(), None);
        assert!(empty.waves.is_empty());
    }
}
