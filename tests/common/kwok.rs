//! kwok plays the kubelet: one fake node per test, and pods bound to it become Running and
//! Ready within a second, unless their template records one of the "bad" config hashes (the
//! `reloader.stakater.com/last-reloaded-from` annotation of `--reload-strategy=annotations`):
//! those stay Pending forever, as pods of a broken config would never pass their readiness
//! probe. The Deployment controller of the real kube-controller-manager then reports the
//! rollout's progress (and `ProgressDeadlineExceeded`) as it would on a real cluster.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject, PostParams};
use serde_json::json;

use super::kubeconfig_path;

pub struct Kwok {
    child: Child,
    pub node: String,
    pub log: PathBuf,
}

/// The label kwok selects its node by (one kwok per test, each its own node).
const NODE_LABEL: &str = "kube-reloader.io/kwok-node";

fn kwok_binary() -> PathBuf {
    let out = Command::new("bash")
        .arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("hack/toolchain.sh"))
        .stderr(Stdio::inherit())
        .output()
        .expect("running hack/toolchain.sh");
    assert!(
        out.status.success(),
        "hack/toolchain.sh failed: kwok was not built"
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let bin = PathBuf::from(stdout.lines().last().expect("a bin dir").trim()).join("kwok");
    assert!(bin.exists(), "kwok is not at {}", bin.display());
    bin
}

/// The stages: the node is Ready; a pod becomes Running and Ready unless its template records
/// a bad hash; a deleted pod goes away.
fn stages(never_ready: &[String]) -> String {
    // `NotIn` needs at least one value: none bad is a value no hash has.
    let none = ["-".to_string()];
    let never_ready = if never_ready.is_empty() {
        &none[..]
    } else {
        never_ready
    };
    let bad = serde_json::to_string(never_ready).unwrap();
    format!(
        r#"apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: node-ready
spec:
  resourceRef:
    apiGroup: v1
    kind: Node
  selector:
    matchExpressions:
    - key: '.status.conditions.[] | select(.type == "Ready") | .status'
      operator: 'NotIn'
      values: ['True']
  next:
    statusTemplate: |
      conditions:
      - type: Ready
        status: "True"
        reason: KubeletReady
        message: kwok
        lastHeartbeatTime: {{{{ Now | Quote }}}}
        lastTransitionTime: {{{{ Now | Quote }}}}
      allocatable: {{cpu: "1000", memory: 1000Gi, pods: "10000"}}
      capacity: {{cpu: "1000", memory: 1000Gi, pods: "10000"}}
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: pod-ready
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: 'DoesNotExist'
    - key: '.status.phase'
      operator: 'NotIn'
      values: ['Running']
    - key: '.metadata.annotations["reloader.stakater.com/last-reloaded-from"] // "{{}}" | fromjson | .hash // ""'
      operator: 'NotIn'
      values: {bad}
  delay:
    durationMilliseconds: 200
  next:
    statusTemplate: |
      phase: Running
      hostIP: 10.0.0.1
      podIP: 10.0.0.2
      startTime: {{{{ Now | Quote }}}}
      conditions:
      - {{type: PodScheduled, status: "True", lastTransitionTime: {{{{ Now | Quote }}}}}}
      - {{type: Initialized, status: "True", lastTransitionTime: {{{{ Now | Quote }}}}}}
      - {{type: ContainersReady, status: "True", lastTransitionTime: {{{{ Now | Quote }}}}}}
      - {{type: Ready, status: "True", lastTransitionTime: {{{{ Now | Quote }}}}}}
      containerStatuses:
      {{{{ range .spec.containers }}}}
      - name: {{{{ .name | Quote }}}}
        image: {{{{ .image | Quote }}}}
        ready: true
        started: true
        restartCount: 0
        state: {{running: {{startedAt: {{{{ Now | Quote }}}}}}}}
      {{{{ end }}}}
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: pod-delete
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: 'Exists'
  next:
    delete: true
"#
    )
}

impl Kwok {
    /// Creates the fake node `node` and starts kwok for it; pods whose template records one of
    /// `never_ready` never become Ready.
    pub async fn start(client: &Client, node: &str, never_ready: &[String]) -> Kwok {
        let dir = std::env::temp_dir().join(format!("kube-reloader-kwok-{node}"));
        std::fs::create_dir_all(&dir).unwrap();
        let config = dir.join("stages.yaml");
        std::fs::write(&config, stages(never_ready)).unwrap();
        let nodes: Api<DynamicObject> = Api::all_with(
            client.clone(),
            &kube::discovery::ApiResource::erase::<k8s_openapi::api::core::v1::Node>(&()),
        );
        let object = json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": node, "labels": {NODE_LABEL: node}},
            "spec": {"taints": []}
        });
        let _ = nodes.delete(node, &DeleteParams::default()).await;
        nodes
            .create(
                &PostParams::default(),
                &serde_json::from_value(object).unwrap(),
            )
            .await
            .expect("creating the kwok node");
        let log = dir.join("kwok.log");
        let log_file = std::fs::File::create(&log).unwrap();
        let port = super::free_port();
        let child = Command::new(kwok_binary())
            .arg(format!("--kubeconfig={}", kubeconfig_path().display()))
            .arg(format!("--config={}", config.display()))
            .arg("--manage-all-nodes=false")
            .arg(format!(
                "--manage-nodes-with-label-selector={NODE_LABEL}={node}"
            ))
            .arg(format!("--server-address=127.0.0.1:{port}"))
            .stdout(log_file.try_clone().unwrap())
            .stderr(log_file)
            .spawn()
            .expect("starting kwok");
        let kwok = Kwok {
            child,
            node: node.to_string(),
            log,
        };
        kwok.wait_node_ready(&nodes).await;
        kwok
    }

    async fn wait_node_ready(&self, nodes: &Api<DynamicObject>) {
        let node = self.node.clone();
        let log = self.log.clone();
        super::wait_for(
            &format!("kwok to make node {node} Ready (log: {})", log.display()),
            std::time::Duration::from_secs(30),
            || async {
                let n = nodes.get(&node).await.map_err(|e| e.to_string())?;
                let ready = n.data["status"]["conditions"].as_array().is_some_and(|c| {
                    c.iter()
                        .any(|c| c["type"] == "Ready" && c["status"] == "True")
                });
                ready
                    .then_some(())
                    .ok_or_else(|| "not Ready yet".to_string())
            },
        )
        .await;
    }
}

impl Drop for Kwok {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // The node goes now, so kube-controller-manager's pod GC force-deletes the pods bound to
        // it (no kubelet is left to confirm their deletion, and the test's namespace would stay
        // Terminating).
        let node = self.node.clone();
        super::block_on_detached(async move {
            let nodes: Api<DynamicObject> = Api::all_with(
                super::client().await,
                &kube::discovery::ApiResource::erase::<k8s_openapi::api::core::v1::Node>(&()),
            );
            let _ = nodes.delete(&node, &DeleteParams::default()).await;
        });
    }
}
