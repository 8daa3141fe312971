//! What OpenShift turns on that a plain cluster does not: the OwnerReferencesPermissionEnforcement
//! admission plugin. A Job created from a CronJob is owned by it with `blockOwnerDeletion`, which
//! that plugin allows only to who may update the CronJob's finalizers. Against an API server of
//! its own with the plugin on (`hack/cluster.sh isolated`), kube-reloader runs with the Role the
//! chart renders for the namespace: the CronJob's reload creates its Job; the same Role without
//! the `cronjobs/finalizers` rule is refused, as it was before the chart granted it.

mod common;

use std::time::Duration;

use serde_json::{Value, json};

use common::helm::template;
use common::identity::identity_at;
use common::objects::*;
use common::{Controller, TestNamespace, client_at, isolated_kubeconfig_path, wait_for};

const WAIT: Duration = Duration::from_secs(20);

/// The rules of the Role the chart renders for namespace `ns` (scoped mode).
fn chart_rules(ns: &str) -> Vec<Value> {
    let values = json!({"reloader": {"watchGlobally": false, "namespaces": [ns]}});
    let objects = template("kr", "kube-reloader", &values, &[]);
    let role = objects
        .iter()
        .find(|o| o["kind"] == "Role" && o["metadata"]["namespace"] == ns)
        .unwrap_or_else(|| panic!("the chart renders no Role in {ns}"));
    role["rules"].as_array().expect("rules").clone()
}

/// Runs a CronJob reload in a namespace of the isolated server as a ServiceAccount bound to
/// `rules`; returns the Jobs owned by the CronJob afterwards and the controller's log.
async fn cronjob_reload_with(prefix: &str, rules: impl Fn(&str) -> Vec<Value>) -> (usize, String) {
    let kubeconfig = isolated_kubeconfig_path();
    let admin = client_at(&kubeconfig).await;
    let ns = TestNamespace::on(&kubeconfig, prefix, json!({})).await;
    let c = &admin;
    let account = "kube-reloader";
    create(
        c,
        &ns.name,
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": account}}),
    )
    .await;
    create(
        c,
        &ns.name,
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": account}, "rules": rules(&ns.name)}),
    )
    .await;
    create(
        c,
        &ns.name,
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": account},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": account},
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": ns.name}]}),
    )
    .await;
    let identity = identity_at(c, &kubeconfig, &ns.name, account).await;
    wait_for("the binding in effect", WAIT, || async {
        api_for(&identity.client, &ns.name, "batch/v1", "CronJob")
            .list(&Default::default())
            .await
            .map(drop)
            .map_err(|e| e.to_string())
    })
    .await;
    create(c, &ns.name, configmap("job-config", json!({"k": "v1"}))).await;
    let auto = json!({"reloader.stakater.com/auto": "true"});
    let spec = pod_spec(env_from_configmap("job-config"), json!([]));
    create(c, &ns.name, cronjob("nightly", auto, spec)).await;
    let args = [format!("--namespaces={}", ns.name)];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let controller = Controller::start_as(&identity.kubeconfig, &args, &[]).await;
    set_configmap_data(c, &ns.name, "job-config", json!({"k": "v2"})).await;
    let jobs = api_for(c, &ns.name, "batch/v1", "Job");
    let created = tokio::time::timeout(WAIT, async {
        loop {
            let list = jobs.list(&Default::default()).await.unwrap();
            if !list.items.is_empty() {
                return list.items.len();
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await
    .unwrap_or(0);
    (created, plain_logs(&controller))
}

#[tokio::test]
async fn a_cronjob_reload_creates_its_job_where_owner_references_are_enforced() {
    let (jobs, logs) = cronjob_reload_with("os-finalizers", chart_rules).await;
    assert_eq!(
        jobs, 1,
        "the chart's Role lets the reload create the Job:\n{logs}"
    );

    let without_finalizers = |ns: &str| -> Vec<Value> {
        chart_rules(ns)
            .into_iter()
            .filter(|r| !r["resources"].to_string().contains("cronjobs/finalizers"))
            .collect()
    };
    let (jobs, logs) = cronjob_reload_with("os-no-finalizers", without_finalizers).await;
    assert_eq!(
        jobs, 0,
        "the plugin refuses the Job without the rule:\n{logs}"
    );
    assert!(
        logs.contains("blockOwnerDeletion"),
        "the refusal is logged with the API server's reason:\n{logs}"
    );
}
