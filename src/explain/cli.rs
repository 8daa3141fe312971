//! The `explain`, `lint`, `plan`, `resume` and `shadow report` subcommands of the kube-reloader binary (also run as the kubectl
//! plugin `kubectl-reloader`). Plain `kube-reloader --flags...` still runs the controller.

use clap::{Args, Parser, Subcommand};
use kube::Client;

use crate::config::{Flags, Settings};
use crate::model::{ConfigKind, WorkloadKind};

use super::gather::{self, ClusterFacts, GatherError, WorkloadView};
use super::lint::{config_unknown_annotations, lint_workload, workload_unknown_annotations};
use super::render;
use super::report::Explanation;
use super::{LastReload, Lint, Severity};

/// kube-reloader: rolls workloads when the ConfigMaps, Secrets or CSI secrets they use change.
/// Without a subcommand it runs the controller.
#[derive(Debug, Parser)]
#[command(name = "kube-reloader", version, about)]
pub struct Cli {
    #[command(flatten)]
    pub flags: Flags,
    #[command(subcommand)]
    pub tool: Option<Tool>,
}

#[derive(Debug, Subcommand)]
pub enum Tool {
    /// Why would (or wouldn't) a config change reload this workload? Takes the controller's
    /// flags (or --from-deployment) and the user's kubeconfig.
    Explain(ExplainArgs),
    /// Findings over the reload annotations of a namespace or the cluster; exit code 1 when any
    /// finding is an error.
    Lint(LintArgs),
    /// What a change of a config would roll now, and in which waves (docs/safe-reloads.md).
    Plan(PlanArgs),
    /// Releases the halted change of a config: the workloads it holds are rolled once.
    Resume(ResumeArgs),
    /// Shadow mode (`--shadow`) tools.
    Shadow(ShadowArgs),
}

#[derive(Debug, Args)]
pub struct ShadowArgs {
    #[command(subcommand)]
    pub command: ShadowCommand,
}

#[derive(Debug, Subcommand)]
pub enum ShadowCommand {
    /// The verdicts of a replica running with --shadow, from its /debug/shadow; exit code 1
    /// when any verdict is not `agree`.
    Report(ShadowReportArgs),
}

#[derive(Debug, Args)]
pub struct ShadowReportArgs {
    /// The replica's admin address (--metrics-addr), e.g. after `kubectl port-forward`.
    #[arg(long, default_value = "http://127.0.0.1:9090", conflicts_with = "pod")]
    pub url: String,
    /// Ask the replica through the API server's pod proxy instead (user's kubeconfig).
    #[arg(long, value_name = "NAMESPACE/NAME")]
    pub pod: Option<String>,
    /// The admin port, with --pod.
    #[arg(long, default_value_t = 9090)]
    pub port: u16,
    /// Output format: text or json.
    #[arg(short = 'o', long = "output", default_value = "text", value_parser = ["text", "json"])]
    pub output: String,
}

#[derive(Debug, Args)]
pub struct PlanArgs {
    /// The config: <configmap|secret>/<name>.
    pub target: String,
    /// Its namespace (default: the kubeconfig context's).
    #[arg(short = 'n', long = "namespace")]
    pub namespace: Option<String>,
    #[command(flatten)]
    pub common: Common,
}

#[derive(Debug, Args)]
pub struct ResumeArgs {
    /// The config: <configmap|secret>/<name>.
    pub target: String,
    /// Its namespace (default: the kubeconfig context's).
    #[arg(short = 'n', long = "namespace")]
    pub namespace: Option<String>,
}

#[derive(Debug, Args)]
pub struct Common {
    /// Output format: text or json.
    #[arg(short = 'o', long = "output", default_value = "text", value_parser = ["text", "json"])]
    pub output: String,
    /// Read the controller's flags from its Deployment (<namespace>/<name>) instead.
    #[arg(long, value_name = "NAMESPACE/NAME")]
    pub from_deployment: Option<String>,
    /// The controller's flags (as given to the controller).
    #[command(flatten)]
    pub flags: Flags,
}

#[derive(Debug, Args)]
pub struct ExplainArgs {
    /// The workload: <kind>/<name> (deployment/web, sts/db, cronjob/report ...).
    pub target: String,
    /// The workload's namespace (default: the kubeconfig context's).
    #[arg(short = 'n', long = "namespace")]
    pub namespace: Option<String>,
    /// Only this config: <configmap|secret|secretproviderclass>/<name>.
    #[arg(long = "for", value_name = "KIND/NAME")]
    pub for_config: Option<String>,
    #[command(flatten)]
    pub common: Common,
}

#[derive(Debug, Args)]
pub struct LintArgs {
    /// Only this namespace (default: the kubeconfig context's).
    #[arg(short = 'n', long = "namespace", conflicts_with = "all_namespaces")]
    pub namespace: Option<String>,
    /// Every namespace.
    #[arg(short = 'A', long = "all-namespaces")]
    pub all_namespaces: bool,
    #[command(flatten)]
    pub common: Common,
}

/// What went wrong running a subcommand (exit code 2).
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    #[error(transparent)]
    Gather(#[from] GatherError),
    #[error("{0}")]
    Usage(String),
    #[error("kubeconfig: {0}")]
    Kubeconfig(String),
    #[error("reading the shadow report from {from}: {error}")]
    ShadowReport { from: String, error: String },
}

/// Parses `deployment/web`, `deploy/web`, `statefulsets/db` ...
pub fn parse_workload(target: &str) -> Result<(WorkloadKind, String), ToolError> {
    let usage = || {
        ToolError::Usage(format!(
            "'{target}': expected <kind>/<name>, e.g. deployment/web"
        ))
    };
    let (kind, name) = target.split_once('/').ok_or_else(usage)?;
    let kind = match kind.to_ascii_lowercase().as_str() {
        "deploy" => Some(WorkloadKind::Deployment),
        "sts" => Some(WorkloadKind::StatefulSet),
        "ds" => Some(WorkloadKind::DaemonSet),
        "cj" => Some(WorkloadKind::CronJob),
        "ro" => Some(WorkloadKind::Rollout),
        "dc" => Some(WorkloadKind::DeploymentConfig),
        other => super::live::parse_workload_kind(other),
    }
    .ok_or_else(usage)?;
    if name.is_empty() {
        return Err(usage());
    }
    Ok((kind, name.to_string()))
}

/// Parses `configmap/app`, `cm/app`, `secret/db`, `secretproviderclass/vault` ...
pub fn parse_config(target: &str) -> Result<(ConfigKind, String), ToolError> {
    let usage = || {
        ToolError::Usage(format!(
            "--for '{target}': expected <configmap|secret|secretproviderclass>/<name>"
        ))
    };
    let (kind, name) = target.split_once('/').ok_or_else(usage)?;
    let kind = match kind.to_ascii_lowercase().as_str() {
        "configmap" | "configmaps" | "cm" => ConfigKind::ConfigMap,
        "secret" | "secrets" => ConfigKind::Secret,
        "secretproviderclass" | "secretproviderclasses" | "spc" => ConfigKind::SecretProviderClass,
        _ => return Err(usage()),
    };
    if name.is_empty() {
        return Err(usage());
    }
    Ok((kind, name.to_string()))
}

async fn client() -> Result<(Client, String), ToolError> {
    let mut config = kube::Config::infer()
        .await
        .map_err(|e| ToolError::Kubeconfig(e.to_string()))?;
    config.headers.push((
        http::header::USER_AGENT,
        http::HeaderValue::from_static(concat!(
            "kube-reloader-explain/",
            env!("CARGO_PKG_VERSION")
        )),
    ));
    let namespace = config.default_namespace.clone();
    let client = Client::try_from(config).map_err(|e| ToolError::Kubeconfig(e.to_string()))?;
    Ok((client, namespace))
}

/// The controller's settings: from the given flags, or read from its Deployment.
async fn settings(client: &Client, common: &Common) -> Result<Settings, ToolError> {
    let mut flags = match &common.from_deployment {
        None => common.flags.clone(),
        Some(target) => {
            let args = gather::deployment_args(client, target).await?;
            let argv = std::iter::once("kube-reloader".to_string()).chain(args);
            let mut flags = Flags::try_parse_from(argv)
                .map_err(|e| ToolError::Usage(format!("the args of {target}: {e}")))?;
            // Its halts are kept in its own namespace.
            if let Some((namespace, _)) = target.split_once('/') {
                flags
                    .pod_namespace
                    .get_or_insert_with(|| namespace.to_string());
            }
            flags
        }
    };
    // HA and sharding need a replica identity, which explain does not have nor need.
    for slot in [&mut flags.pod_name, &mut flags.pod_namespace] {
        slot.get_or_insert_with(|| "kube-reloader-explain".into());
    }
    Settings::try_from(flags).map_err(|e| ToolError::Usage(e.to_string()))
}

#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct ExplainOutput<'a> {
    #[serde(flatten)]
    explanation: &'a Explanation,
    last_reload: &'a LastReload,
}

/// `kube-reloader explain`: returns the text to print.
pub async fn run_explain(args: &ExplainArgs) -> Result<String, ToolError> {
    let only = args.for_config.as_deref().map(parse_config).transpose()?;
    let (client, default_ns) = client().await?;
    let namespace = args.namespace.clone().unwrap_or(default_ns);
    // Settings first: they declare the custom kinds the target may name.
    let mut settings = settings(&client, &args.common).await?;
    let (kind, name) = parse_workload(&args.target)?;
    // The controller turns DeploymentConfigs on when the OpenShift API is served; it is, since
    // the object was read.
    settings.openshift |= kind == WorkloadKind::DeploymentConfig;
    let view = gather::workload(&client, kind, &namespace, &name, &settings.keys).await?;
    let cluster = gather::cluster(&client, &settings, Some(&namespace)).await?;
    let facts = cluster.namespace(&namespace);
    let only_ref = only.as_ref().map(|(k, n)| (*k, n.as_str()));
    let annotations = view.reading.annotations.clone();
    let explanation = view.explain(&settings, &facts, annotations, only_ref);
    let last = gather::last_reload(&client, &view, &settings.keys).await?;
    if args.common.output == "json" {
        let out = ExplainOutput {
            explanation: &explanation,
            last_reload: &last,
        };
        return Ok(serde_json::to_string_pretty(&out).unwrap_or_default() + "\n");
    }
    let mut text = String::new();
    if let Some(c) = explanation.configs.first().filter(|_| only.is_some()) {
        text.push_str(&render::verdict_line(c));
        text.push_str("\n\n");
    }
    text.push_str(&render::explanation_text(&explanation, Some(&last)));
    Ok(text)
}

/// Lints every workload with reload annotations in `facts`' namespaces, and every workload
/// and config for unknown keys under Reloader's names.
async fn lint_all(
    client: &Client,
    settings: &Settings,
    namespace: Option<&str>,
    facts: &ClusterFacts,
) -> Result<Vec<Lint>, ToolError> {
    let mut findings = Vec::new();
    for c in &facts.config_annotations {
        let keys = c.keys.iter().map(String::as_str);
        findings.extend(config_unknown_annotations(
            &settings.keys,
            c.kind,
            &c.namespace,
            &c.name,
            keys,
        ));
    }
    for kind in WorkloadKind::all() {
        for object in gather::workloads(client, kind, namespace).await? {
            let view = match WorkloadView::from_object(kind, &object, &settings.keys) {
                Ok(v) => v,
                Err(e) => {
                    tracing::debug!(%kind, error = %e, "workload not linted");
                    continue;
                }
            };
            findings.extend(workload_unknown_annotations(
                &settings.keys,
                &view.entry.key,
                &view.metadata_annotations,
                &view.template_annotations,
            ));
            if view.reading.annotations.is_empty() {
                continue;
            }
            let ns = facts.namespace(&view.entry.key.namespace);
            let explanation = view.explain(settings, &ns, Vec::new(), None);
            findings.extend(lint_workload(
                &view.entry,
                &view.reading.annotations,
                &explanation,
                &ns,
            ));
        }
    }
    Ok(findings)
}

/// What the controller Deployment's ServiceAccount may do, as the controller reviews it at start.
/// Needs `create` on subjectaccessreviews; without it the check is skipped with a warning.
async fn lint_access(
    client: &Client,
    settings: &Settings,
    target: &str,
) -> Result<Vec<Lint>, ToolError> {
    let (namespace, name) = target
        .split_once('/')
        .ok_or_else(|| ToolError::Usage(format!("--from-deployment '{target}'")))?;
    let account = gather::deployment_service_account(client, namespace, name).await?;
    let requirements = crate::access::requirements(settings, Some(namespace));
    let subject = crate::access::review::Subject::ServiceAccount {
        namespace,
        name: &account,
    };
    match crate::access::review::review_for(client, subject, &requirements).await {
        Ok(plan) => Ok(crate::explain::access_lint::access_findings(
            &plan, namespace, name,
        )),
        Err(e) => {
            eprintln!(
                "kube-reloader: the RBAC of {namespace}/{account} was not checked (a                  SubjectAccessReview needs create on subjectaccessreviews): {e}"
            );
            Ok(Vec::new())
        }
    }
}

/// The CRD-backed kinds the settings turn on that the cluster does not serve: the controller
/// skips them (and checks again) rather than waiting, which a user should know.
async fn lint_optional_apis(
    client: &Client,
    settings: &Settings,
    target: Option<&str>,
) -> Vec<Lint> {
    use crate::watch::served::{Discovery, discover, optional_apis};
    let (namespace, name) = target.and_then(|t| t.split_once('/')).unwrap_or_default();
    let mut findings = Vec::new();
    for api in optional_apis(settings) {
        if discover(client, api).await == Discovery::NotServed {
            findings.push(Lint {
                severity: Severity::Warning,
                check: "api-not-served",
                kind: "Deployment",
                namespace: namespace.to_string(),
                name: name.to_string(),
                message: format!(
                    "{} is on but {} is not served (its CRD is not installed): the controller \
                     skips it and starts watching it once it is",
                    api.feature,
                    api.label()
                ),
            });
        }
    }
    findings
}

/// `kube-reloader lint`: the text to print and whether any finding is an error.
pub async fn run_lint(args: &LintArgs) -> Result<(String, bool), ToolError> {
    let (client, default_ns) = client().await?;
    let namespace = (!args.all_namespaces).then(|| args.namespace.clone().unwrap_or(default_ns));
    let settings = settings(&client, &args.common).await?;
    let facts = gather::cluster(&client, &settings, namespace.as_deref()).await?;
    let mut findings = lint_all(&client, &settings, namespace.as_deref(), &facts).await?;
    if let Some(target) = &args.common.from_deployment {
        findings.extend(lint_access(&client, &settings, target).await?);
    }
    findings.extend(
        lint_optional_apis(&client, &settings, args.common.from_deployment.as_deref()).await,
    );
    let failed = findings.iter().any(|f| f.severity == Severity::Error);
    let text = if args.common.output == "json" {
        serde_json::to_string_pretty(&findings).unwrap_or_default() + "\n"
    } else {
        render::lint_text(&findings)
    };
    Ok((text, failed))
}

/// `kube-reloader plan`: returns the text to print.
pub async fn run_plan(args: &PlanArgs) -> Result<String, ToolError> {
    let (kind, name) = parse_config(&args.target)?;
    let (client, default_ns) = client().await?;
    let namespace = args.namespace.clone().unwrap_or(default_ns);
    let settings = settings(&client, &args.common).await?;
    let plan = super::plan::plan(&client, &settings, kind, &name, &namespace).await?;
    Ok(match args.common.output.as_str() {
        "json" => serde_json::to_string_pretty(&plan).unwrap_or_default() + "\n",
        _ => super::plan::render(&plan),
    })
}

/// `kube-reloader resume`: returns the text to print.
/// The report of a shadow replica; `true` with it when some verdict is not `agree`.
pub async fn run_shadow_report(args: &ShadowReportArgs) -> Result<(String, bool), ToolError> {
    let (from, body) = match &args.pod {
        Some(pod) => {
            let (namespace, name) = pod.split_once('/').ok_or_else(|| {
                ToolError::Usage(format!("--pod '{pod}': expected <namespace>/<name>"))
            })?;
            let path = format!(
                "/api/v1/namespaces/{namespace}/pods/{name}:{}/proxy/debug/shadow",
                args.port
            );
            let (client, _) = client().await?;
            let request = http::Request::get(&path)
                .body(Vec::new())
                .map_err(|e| ToolError::Usage(e.to_string()))?;
            let body = client
                .request_text(request)
                .await
                .map_err(|e| ToolError::ShadowReport {
                    from: pod.clone(),
                    error: e.to_string(),
                })?;
            (pod.clone(), body)
        }
        None => {
            let url = format!("{}/debug/shadow", args.url.trim_end_matches('/'));
            let failed = |e: reqwest::Error| ToolError::ShadowReport {
                from: url.clone(),
                error: e.to_string(),
            };
            let response = reqwest::get(&url).await.map_err(failed)?;
            let response = response.error_for_status().map_err(failed)?;
            (url.clone(), response.text().await.map_err(failed)?)
        }
    };
    let report: crate::shadow::report::Report =
        serde_json::from_str(&body).map_err(|e| ToolError::ShadowReport {
            from,
            error: format!("not a shadow report: {e}"),
        })?;
    let text = match args.output.as_str() {
        "json" => serde_json::to_string_pretty(&report).unwrap_or_default() + "\n",
        _ => report.text(),
    };
    Ok((text, report.disagreements() > 0))
}

pub async fn run_resume(args: &ResumeArgs) -> Result<String, ToolError> {
    let (kind, name) = parse_config(&args.target)?;
    let (client, default_ns) = client().await?;
    let namespace = args.namespace.clone().unwrap_or(default_ns);
    Ok(super::plan::resume(&client, kind, &name, &namespace).await?)
}

/// Runs a subcommand to completion; the process exit code: 0, 1 (lint errors), 2 (failure).
pub fn run(tool: Tool) -> u8 {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("kube-reloader: starting the async runtime: {e}");
            return 2;
        }
    };
    let result = runtime.block_on(async {
        match &tool {
            Tool::Explain(args) => run_explain(args).await.map(|t| (t, false)),
            Tool::Lint(args) => run_lint(args).await,
            Tool::Plan(args) => run_plan(args).await.map(|t| (t, false)),
            Tool::Resume(args) => run_resume(args).await.map(|t| (t, false)),
            Tool::Shadow(ShadowArgs {
                command: ShadowCommand::Report(args),
            }) => run_shadow_report(args).await,
        }
    });
    match result {
        Ok((text, failed)) => {
            print!("{text}");
            u8::from(failed)
        }
        Err(e) => {
            eprintln!("kube-reloader: {e}");
            2
        }
    }
}

/// True when the binary runs as the kubectl plugin (`kubectl-reloader`, a link to it).
pub fn invoked_as_kubectl_plugin(argv0: &std::ffi::OsStr) -> bool {
    std::path::Path::new(argv0)
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with("kubectl-reloader"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_flags_still_run_the_controller() {
        let cli = Cli::try_parse_from(["kube-reloader", "--auto-reload-all", "--namespaces=a,b"])
            .unwrap();
        assert!(cli.tool.is_none());
        assert!(cli.flags.auto_reload_all);
        assert_eq!(cli.flags.namespaces, ["a", "b"]);
    }

    #[test]
    fn explain_takes_the_controller_flags() {
        let cli = Cli::try_parse_from([
            "kube-reloader",
            "explain",
            "deploy/web",
            "-n",
            "team-a",
            "--for",
            "cm/app",
            "-o",
            "json",
            "--reload-strategy=annotations",
            "--namespaces-to-ignore=kube-system",
        ])
        .unwrap();
        let Some(Tool::Explain(args)) = cli.tool else {
            panic!("not explain")
        };
        assert_eq!(args.namespace.as_deref(), Some("team-a"));
        assert_eq!(args.common.output, "json");
        assert_eq!(args.common.flags.reload_strategy, "annotations");
        assert_eq!(args.common.flags.namespaces_to_ignore, ["kube-system"]);
        assert_eq!(
            parse_workload(&args.target).unwrap(),
            (WorkloadKind::Deployment, "web".into())
        );
        assert_eq!(
            parse_config(args.for_config.as_deref().unwrap()).unwrap(),
            (ConfigKind::ConfigMap, "app".into())
        );
        assert!(parse_workload("web").is_err());
        assert!(parse_config("pod/x").is_err());
    }

    #[test]
    fn lint_namespace_or_all() {
        let cli = Cli::try_parse_from(["kube-reloader", "lint", "-A"]).unwrap();
        assert!(matches!(cli.tool, Some(Tool::Lint(ref a)) if a.all_namespaces));
        assert!(Cli::try_parse_from(["kube-reloader", "lint", "-A", "-n", "x"]).is_err());
    }

    #[test]
    fn kubectl_plugin_names() {
        assert!(invoked_as_kubectl_plugin(
            "/usr/local/bin/kubectl-reloader".as_ref()
        ));
        assert!(!invoked_as_kubectl_plugin("/kube-reloader".as_ref()));
    }
}
