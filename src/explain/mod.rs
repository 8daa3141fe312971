//! "Why did (or didn't) it reload?": `kube-reloader explain`, `kube-reloader lint` and the live
//! `/debug/explain` endpoint. Every verdict comes from the controller's own pure code (policy
//! parser, references, decision table, container choice); this module only gathers facts
//! (`gather`: the API server; `live`: the running controller's index) and presents them.

pub mod access_lint;
pub mod cli;
pub mod gather;
pub mod lint;
pub mod live;
pub mod plan;
pub mod render;
pub mod report;
pub mod unknown_keys;

use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Severity {
    Error,
    Warning,
}

/// One lint finding about one workload (or, for `unknown-annotation`, one config).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Lint {
    pub severity: Severity,
    /// Stable identifier of the check (`missing-config`, `invalid-regex`, ...).
    pub check: &'static str,
    /// The Kubernetes kind: `Deployment`, ..., or `ConfigMap`, `Secret`, `SecretProviderClass`.
    pub kind: &'static str,
    pub namespace: String,
    pub name: String,
    pub message: String,
}

/// One Kubernetes Event about the workload.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EventLine {
    pub time: String,
    pub reason: String,
    pub message: String,
}

/// The last reload as the workload and its Events tell it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LastReload {
    /// What the pod template records (env vars or the `last-reloaded-from` annotation).
    pub recorded: Vec<String>,
    /// `Reloaded` / `ReloadFail` Events, oldest first (the API server keeps them ~1 h).
    pub events: Vec<EventLine>,
}

#[cfg(test)]
mod tests {
    use crate::decide::NoReason;

    const DOC: &str = include_str!("../../docs/troubleshooting.md");

    #[test]
    fn the_troubleshooting_guide_names_every_reason_and_check() {
        let mut ids: Vec<&str> = NoReason::ALL.iter().map(|r| r.as_str()).collect();
        ids.dedup();
        assert_eq!(ids.len(), NoReason::ALL.len(), "distinct ids");
        for id in ids.iter().chain(super::lint::CHECKS.iter()) {
            assert!(
                DOC.contains(&format!("| `{id}` |")),
                "docs/troubleshooting.md lacks {id}"
            );
        }
    }
}
