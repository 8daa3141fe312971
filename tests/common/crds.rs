//! CustomResourceDefinitions for the CRD-backed kinds (Argo Rollout, OpenShift DeploymentConfig,
//! Secrets Store CSI), installed from `tests/fixtures/crds/<name>.json`, and for the declared
//! custom kinds tested (Knative's Service, KEDA's ScaledJob), as their projects publish them
//! (hack/custom-kind-crds.sh). The control plane is
//! shared by every test process and CRDs are never deleted, so installing is idempotent: create,
//! accept "already exists", then wait until the resource is really served.
#![allow(dead_code)]

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};

use super::wait_for;

pub const ARGO_ROLLOUTS: &str = "rollouts.argoproj.io";
pub const DEPLOYMENT_CONFIGS: &str = "deploymentconfigs.apps.openshift.io";
pub const SECRET_PROVIDER_CLASSES: &str = "secretproviderclasses.secrets-store.csi.x-k8s.io";
pub const SECRET_PROVIDER_CLASS_POD_STATUSES: &str =
    "secretproviderclasspodstatuses.secrets-store.csi.x-k8s.io";

/// CRDs this process already saw served.
static SERVED: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());

/// The CRD `name`: a fixture of tests/fixtures/crds, or one its project publishes in its Go
/// module (hack/custom-kind-crds.sh copies those out).
fn fixture(name: &str) -> CustomResourceDefinition {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/crds")
        .join(format!("{name}.json"));
    if path.exists() {
        return read_crd(&path);
    }
    let dir = super::helm::script_last_line("hack/custom-kind-crds.sh", &[]);
    read_crd(&PathBuf::from(dir).join(format!("{name}.json")))
}

fn read_crd(path: &std::path::Path) -> CustomResourceDefinition {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("parsing {}: {e}", path.display()))
}

/// Installs the named CRDs (idempotent) and returns once each is Established and served,
/// including in API discovery (the controller detects OpenShift through discovery).
pub async fn ensure(client: &Client, names: &[&str]) {
    for name in names {
        if SERVED.lock().unwrap().contains(*name) {
            continue;
        }
        install(client, name).await;
        SERVED.lock().unwrap().insert(name.to_string());
    }
}

/// Installs the CRD `name` and waits until it is served (no cache: for an API server other
/// tests do not share, see [`super::isolated_kubeconfig_path`]).
pub async fn install(client: &Client, name: &str) {
    create_and_wait(client, &fixture(name)).await;
}

/// Creates `crd` (accepting "already exists") and waits until it is served.
async fn create_and_wait(client: &Client, crd: &CustomResourceDefinition) {
    let name = crd.metadata.name.as_deref().unwrap_or_default();
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    match api.create(&PostParams::default(), crd).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => panic!("creating CRD {name}: {e}"),
    }
    wait_served(client, crd).await;
}

/// Knative Serving's Service and KEDA's ScaledJob, as their Go modules publish them
/// (hack/custom-kind-crds.sh).
pub const KNATIVE_SERVICES: &str = "services.serving.knative.dev";
pub const KEDA_SCALED_JOBS: &str = "scaledjobs.keda.sh";

/// Waits until `crd` is Established and its resource served, in API discovery too.
async fn wait_served(client: &Client, crd: &CustomResourceDefinition) {
    let name = crd.metadata.name.as_deref().expect("a CRD has a name");
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let timeout = Duration::from_secs(30);
    wait_for(&format!("CRD {name} to be Established"), timeout, || {
        let api = api.clone();
        async move {
            let crd = api.get(name).await.map_err(|e| e.to_string())?;
            let established = crd
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .into_iter()
                .flatten()
                .any(|c| c.type_ == "Established" && c.status == "True");
            if established {
                Ok(())
            } else {
                Err(format!("conditions: {:?}", crd.status))
            }
        }
    })
    .await;

    let spec = &crd.spec;
    let version = &spec.versions[0].name;
    let group_version = format!("{}/{version}", spec.group);
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(&spec.group, version, &spec.names.kind),
        &spec.names.plural,
    );
    wait_for(&format!("{name} to be served"), timeout, || {
        let (client, ar, group_version) = (client.clone(), ar.clone(), group_version.clone());
        let group = spec.group.clone();
        let plural = spec.names.plural.clone();
        async move {
            let groups = client.list_api_groups().await.map_err(|e| e.to_string())?;
            if !groups.groups.iter().any(|g| g.name == group) {
                return Err(format!("group {group} not in discovery yet"));
            }
            let resources = client
                .list_api_group_resources(&group_version)
                .await
                .map_err(|e| e.to_string())?;
            if !resources.resources.iter().any(|r| r.name == plural) {
                return Err(format!("{plural} not in {group_version} discovery yet"));
            }
            Api::<DynamicObject>::namespaced_with(client, "default", &ar)
                .list(&ListParams::default().limit(1))
                .await
                .map(|_| ())
                .map_err(|e| format!("listing {plural}: {e}"))
        }
    })
    .await;
}

/// Deletes the CRD `name` (and so every object of it) and waits until discovery no longer lists
/// it. Only on an API server no other test shares ([`super::isolated_kubeconfig_path`]).
pub async fn remove(client: &Client, name: &str) {
    let crd = fixture(name);
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    match api.delete(name, &Default::default()).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        Err(e) => panic!("deleting CRD {name}: {e}"),
    }
    let group_version = format!("{}/{}", crd.spec.group, crd.spec.versions[0].name);
    let plural = crd.spec.names.plural.clone();
    wait_for(
        &format!("{name} gone from discovery"),
        Duration::from_secs(60),
        || {
            let (client, api, group_version, plural) = (
                client.clone(),
                api.clone(),
                group_version.clone(),
                plural.clone(),
            );
            async move {
                if api
                    .get_opt(name)
                    .await
                    .map_err(|e| e.to_string())?
                    .is_some()
                {
                    return Err("the CRD still exists".to_string());
                }
                match client.list_api_group_resources(&group_version).await {
                    Ok(list) if list.resources.iter().any(|r| r.name == plural) => {
                        Err(format!("{plural} still in {group_version} discovery"))
                    }
                    _ => Ok(()),
                }
            }
        },
    )
    .await;
}
