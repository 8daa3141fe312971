//! Lint findings about the controller's own identity: what its ServiceAccount may do, judged
//! with the requirements and the plan the controller itself uses at start (`crate::access`), so
//! lint and the controller cannot disagree about its mode. Pure.

use crate::access::AccessPlan;

use super::{Lint, Severity};

/// The findings for the controller Deployment `namespace/name` whose ServiceAccount has `plan`.
pub fn access_findings(plan: &AccessPlan, namespace: &str, name: &str) -> Vec<Lint> {
    let lint = |severity, check, message| Lint {
        severity,
        check,
        kind: "Deployment",
        namespace: namespace.to_string(),
        name: name.to_string(),
        message,
    };
    let mut out = Vec::new();
    if !plan.missing.is_empty() {
        let rules: Vec<String> = plan.missing.iter().map(ToString::to_string).collect();
        out.push(lint(
            Severity::Error,
            "rbac-missing",
            format!(
                "the controller's ServiceAccount may not {}: nothing can replace it, the \
                 controller exits at start",
                rules.join("; ")
            ),
        ));
    }
    for fallback in plan.active_fallbacks() {
        let rules = plan.missing_for(fallback);
        out.push(lint(
            Severity::Warning,
            "rbac-fallback",
            format!(
                "the controller's ServiceAccount may not {}: it runs with the {} fallback ({})",
                rules.join("; "),
                fallback.metric_label(),
                fallback.cost()
            ),
        ));
    }
    for (rule, lost) in &plan.lost {
        out.push(lint(
            Severity::Warning,
            "rbac-fallback",
            format!("the controller's ServiceAccount may not {rule}: no {lost}"),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::access::{Fallback, Rule};
    use crate::model::WorkloadKind;

    fn rule(resource: &'static str, verb: &'static str) -> Rule {
        Rule {
            group: "apps",
            resource,
            verb,
            namespace: None,
            name: None,
        }
    }

    #[test]
    fn one_finding_per_fallback_naming_its_rules_and_an_error_for_what_is_missing() {
        let plan = AccessPlan {
            missing: vec![rule("deployments", "patch")],
            fallbacks: vec![
                (
                    rule("deployments", "watch"),
                    Fallback::ListWorkloads(WorkloadKind::Deployment),
                ),
                (
                    rule("daemonsets", "watch"),
                    Fallback::ListWorkloads(WorkloadKind::DaemonSet),
                ),
            ],
            lost: vec![],
        };
        let found = access_findings(&plan, "ops", "reloader");
        assert_eq!(found.len(), 3);
        assert_eq!(
            (found[0].severity, found[0].check),
            (Severity::Error, "rbac-missing")
        );
        assert!(
            found[0]
                .message
                .contains("patch deployments.apps in all namespaces")
        );
        assert!(
            found[1].message.contains("list-deployment"),
            "{}",
            found[1].message
        );
        assert!(
            found
                .iter()
                .all(|l| l.namespace == "ops" && l.name == "reloader")
        );
        assert!(access_findings(&AccessPlan::full(), "ops", "reloader").is_empty());
    }
}
