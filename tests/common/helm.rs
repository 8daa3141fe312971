//! The Helm chart under test: `helm` (built once by hack/helm.sh), `kubectl` (hack/toolchain.sh),
//! rendering with a values document, and reading the rendered objects as JSON.
#![allow(dead_code)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use serde_json::{Value, json};

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub fn chart_dir() -> PathBuf {
    repo_root().join("deployments/kubernetes/chart/kube-reloader")
}

/// Last stdout line of `bash <script> <args>`, panicking with its stderr on failure.
pub fn script_last_line(script: &str, args: &[&str]) -> String {
    let out = Command::new("bash")
        .arg(repo_root().join(script))
        .args(args)
        .stderr(Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("running {script}: {e}"));
    assert!(
        out.status.success(),
        "{script} {args:?} failed ({})",
        out.status
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()
        .unwrap_or_else(|| panic!("{script} printed nothing"))
        .trim()
        .to_string()
}

/// The helm binary (built from the Go module on first use, then cached).
pub fn helm() -> &'static PathBuf {
    static HELM: OnceLock<PathBuf> = OnceLock::new();
    HELM.get_or_init(|| PathBuf::from(script_last_line("hack/helm.sh", &[])).join("helm"))
}

pub fn kubectl() -> &'static PathBuf {
    static KUBECTL: OnceLock<PathBuf> = OnceLock::new();
    KUBECTL.get_or_init(|| {
        PathBuf::from(script_last_line("hack/toolchain.sh", &["--bin-dir"])).join("kubectl")
    })
}

/// Output of a finished command: success, stdout, stderr.
pub struct Output {
    pub ok: bool,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `program args`, feeding `stdin`.
pub fn run(program: &Path, args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = Command::new(program)
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("starting {}: {e}", program.display()));
    if let Some(input) = stdin {
        let mut pipe = child.stdin.take().unwrap();
        let input = input.to_string();
        // Written from a thread so a large input cannot deadlock against a full stdout pipe.
        std::thread::spawn(move || {
            let _ = pipe.write_all(input.as_bytes());
        });
    }
    let out = child.wait_with_output().expect("waiting for the command");
    Output {
        ok: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// A values file (JSON is YAML) in a fresh temporary path.
fn values_file(values: &Value) -> tempfile_like::TempPath {
    let path = tempfile_like::TempPath::new("values", "json");
    std::fs::write(&path.0, serde_json::to_vec_pretty(values).unwrap()).unwrap();
    path
}

/// `helm template <release> <chart> -n <namespace> -f <values> <extra>`: the YAML, or helm's
/// error output.
pub fn template_yaml(
    release: &str,
    namespace: &str,
    values: &Value,
    extra: &[&str],
) -> Result<String, String> {
    let file = values_file(values);
    let chart = chart_dir();
    let mut args = vec![
        "template",
        release,
        chart.to_str().unwrap(),
        "--namespace",
        namespace,
        "-f",
        file.0.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let out = run(helm(), &args, None);
    if out.ok {
        Ok(out.stdout)
    } else {
        Err(out.stderr)
    }
}

/// Rendered objects as JSON, in helm's install order.
pub fn template(release: &str, namespace: &str, values: &Value, extra: &[&str]) -> Vec<Value> {
    let yaml = template_yaml(release, namespace, values, extra)
        .unwrap_or_else(|e| panic!("helm template failed with values {values}:\n{e}"));
    yaml_to_json(&yaml)
}

/// Multi-document YAML to JSON objects, offline: `kubectl patch --local` with an empty merge
/// patch reads any kind without a server and prints each object unchanged.
pub fn yaml_to_json(yaml: &str) -> Vec<Value> {
    if !yaml.lines().any(|l| l.starts_with("kind:")) {
        return Vec::new();
    }
    let out = run(
        kubectl(),
        &[
            "patch",
            "--local",
            "-f",
            "-",
            "--type",
            "merge",
            "-p",
            "{}",
            "-o",
            "json",
            "--kubeconfig",
            "/dev/null",
        ],
        Some(yaml),
    );
    assert!(
        out.ok,
        "converting YAML to JSON failed: {}\n{yaml}",
        out.stderr
    );
    serde_json::Deserializer::from_str(&out.stdout)
        .into_iter::<Value>()
        .map(|v| v.expect("kubectl printed JSON"))
        .flat_map(|v| {
            if v["kind"] == "List" {
                v["items"].as_array().cloned().unwrap_or_default()
            } else {
                vec![v]
            }
        })
        .collect()
}

/// The objects of `kind`.
pub fn of_kind<'a>(objects: &'a [Value], kind: &str) -> Vec<&'a Value> {
    objects.iter().filter(|o| o["kind"] == kind).collect()
}

/// The one object of `kind`, panicking when there is none or several.
pub fn one<'a>(objects: &'a [Value], kind: &str) -> &'a Value {
    let found = of_kind(objects, kind);
    assert_eq!(
        found.len(),
        1,
        "expected exactly one {kind}, found {}: {:#?}",
        found.len(),
        kinds(objects)
    );
    found[0]
}

/// `Kind/namespace/name` of every object (for messages and set comparisons).
pub fn kinds(objects: &[Value]) -> Vec<String> {
    objects
        .iter()
        .map(|o| {
            format!(
                "{}/{}/{}",
                o["kind"].as_str().unwrap_or("?"),
                o["metadata"]["namespace"].as_str().unwrap_or(""),
                o["metadata"]["name"].as_str().unwrap_or("?")
            )
        })
        .collect()
}

/// The kube-reloader container of the rendered Deployment.
pub fn container(objects: &[Value]) -> &Value {
    &one(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]
}

/// The container's args.
pub fn args(objects: &[Value]) -> Vec<String> {
    container(objects)["args"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|v| v.as_str().unwrap_or_default().to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// The container's env as `name -> value or valueFrom` (JSON).
pub fn env(objects: &[Value]) -> Vec<(String, Value)> {
    container(objects)["env"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|e| {
                    let v = if e.get("value").is_some() {
                        e["value"].clone()
                    } else {
                        e["valueFrom"].clone()
                    };
                    (e["name"].as_str().unwrap_or_default().to_string(), v)
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The env as a process would see it in a pod named `pod` in `namespace` (downward API fields
/// resolved; secret references are left out).
pub fn resolved_env(objects: &[Value], pod: &str, namespace: &str) -> Vec<(String, String)> {
    env(objects)
        .into_iter()
        .filter_map(|(name, v)| match v {
            Value::String(s) => Some((name, s)),
            other => match other["fieldRef"]["fieldPath"].as_str() {
                Some("metadata.name") => Some((name, pod.to_string())),
                Some("metadata.namespace") => Some((name, namespace.to_string())),
                _ => None,
            },
        })
        .collect()
}

/// A `v1/List` of `objects` (what `kubectl apply -f -` takes as JSON).
pub fn as_list(objects: &[&Value]) -> String {
    json!({"apiVersion": "v1", "kind": "List", "items": objects}).to_string()
}

/// `kubectl --kubeconfig <admin> <args>` with `stdin`.
pub fn kubectl_admin(args: &[&str], stdin: Option<&str>) -> Output {
    let kubeconfig = super::kubeconfig_path().to_str().unwrap().to_string();
    let mut all = vec!["--kubeconfig", kubeconfig.as_str()];
    all.extend_from_slice(args);
    run(kubectl(), &all, stdin)
}

/// Group/versions the local API server serves, as `helm install` would see them
/// (`.Capabilities.APIVersions`), for `helm template --api-versions`.
pub fn served_api_versions() -> Vec<String> {
    let out = kubectl_admin(&["api-versions"], None);
    assert!(out.ok, "kubectl api-versions: {}", out.stderr);
    out.stdout.lines().map(|l| l.trim().to_string()).collect()
}

/// `--api-versions X` for each served group/version.
pub fn api_version_args(versions: &[String]) -> Vec<String> {
    versions
        .iter()
        .flat_map(|v| ["--api-versions".to_string(), v.clone()])
        .collect()
}

/// Cluster-scoped objects a test applied, deleted when dropped (namespaced ones go with their
/// TestNamespace).
pub struct ClusterScoped(pub Vec<(String, String)>);

impl Drop for ClusterScoped {
    fn drop(&mut self) {
        for (kind, name) in &self.0 {
            let _ = kubectl_admin(
                &[
                    "delete",
                    &kind.to_lowercase(),
                    name,
                    "--ignore-not-found",
                    "--wait=false",
                ],
                None,
            );
        }
    }
}

/// Temporary files without a tempfile dependency: unique names under the system temp dir,
/// removed on drop.
pub mod tempfile_like {
    use std::path::PathBuf;
    use std::sync::atomic::{AtomicU32, Ordering};

    pub struct TempPath(pub PathBuf);

    impl TempPath {
        pub fn new(prefix: &str, ext: &str) -> Self {
            static N: AtomicU32 = AtomicU32::new(0);
            let n = N.fetch_add(1, Ordering::Relaxed);
            TempPath(std::env::temp_dir().join(format!(
                "kube-reloader-{prefix}-{}-{n}.{ext}",
                std::process::id()
            )))
        }
    }

    impl Drop for TempPath {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }
}
