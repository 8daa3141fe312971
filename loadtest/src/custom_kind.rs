//! The `custom-kind` scenario: `steady` with every workload a Knative Service (a custom kind the
//! controller rolls because `--custom-kind` declares it), its CRD as Knative Serving publishes it
//! in its Go module (hack/custom-kind-crds.sh). No Knative controller runs: a reload is the
//! controller's write of the Service's revision template, which this watch records like a
//! Deployment's.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, ListParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind, NamespaceResourceScope};
use kube::{Client, Resource};
use serde::{Deserialize, Serialize};

pub const API_VERSION: &str = "serving.knative.dev/v1";
pub const KIND: &str = "Service";
pub const RESOURCE: &str = "services";
const CRD_NAME: &str = "services.serving.knative.dev";
/// The declaration the controller runs with.
pub const CONTROLLER_FLAG: &str = "--custom-kind=serving.knative.dev/v1/Service";

/// The API resource, for creating Services as dynamic objects.
pub fn api_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("serving.knative.dev", "v1", KIND),
        RESOURCE,
    )
}

/// A Knative Service as the load generator's watch reads it: its revision template.
#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct KnativeService {
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: KnativeServiceSpec,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub struct KnativeServiceSpec {
    #[serde(default)]
    pub template: PodTemplateSpec,
}

impl Resource for KnativeService {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(_: &()) -> std::borrow::Cow<'_, str> {
        KIND.into()
    }
    fn group(_: &()) -> std::borrow::Cow<'_, str> {
        "serving.knative.dev".into()
    }
    fn version(_: &()) -> std::borrow::Cow<'_, str> {
        "v1".into()
    }
    fn plural(_: &()) -> std::borrow::Cow<'_, str> {
        RESOURCE.into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// Creates the Knative Service CRD (if missing) and waits until Services can be listed.
pub async fn install_crd(client: &Client) -> Result<()> {
    let script = crate::repo::root().join("hack/custom-kind-crds.sh");
    let out = std::process::Command::new("bash")
        .arg(&script)
        .stderr(std::process::Stdio::inherit())
        .output()
        .with_context(|| format!("running {}", script.display()))?;
    if !out.status.success() {
        bail!("{} failed ({})", script.display(), out.status);
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let dir = stdout
        .lines()
        .last()
        .context("hack/custom-kind-crds.sh printed nothing")?;
    let path = std::path::Path::new(dir.trim()).join(format!("{CRD_NAME}.json"));
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let crd: CustomResourceDefinition = serde_json::from_str(&text)?;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    match crds.create(&PostParams::default(), &crd).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => return Err(e).context("creating the Knative Service CRD"),
    }
    let services: Api<KnativeService> = Api::all(client.clone());
    let started = Instant::now();
    loop {
        match services.list(&ListParams::default().limit(1)).await {
            Ok(_) => return Ok(()),
            Err(e) if started.elapsed() > Duration::from_secs(60) => {
                return Err(e).context("the Knative Service CRD was not served within 60 s");
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
}
