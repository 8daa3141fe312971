//! Whether a rolled workload is healthy on its new template, read from its status as its own
//! controller reports it (the conditions and counts `kubectl rollout status` reads). Pure.

use serde_json::Value;

use crate::model::WorkloadKind;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Health {
    /// Every replica runs the new template and is available.
    Healthy,
    /// Not there yet (the rollout goes on, or its controller has not seen the new template).
    Progressing(String),
    /// It will not get there by itself: the wave fails at once.
    Failed(String),
}

/// `obj` is the workload as the API server returns it (metadata, spec, status).
pub fn assess(kind: WorkloadKind, obj: &Value) -> Health {
    let generation = obj["metadata"]["generation"].as_i64().unwrap_or(0);
    let status = &obj["status"];
    let observed = status["observedGeneration"].as_i64().unwrap_or(0);
    match kind {
        WorkloadKind::Deployment | WorkloadKind::DeploymentConfig => {
            if let Some(reason) = failed_condition(status, "Progressing", "False") {
                return Health::Failed(reason);
            }
            if observed < generation {
                return Health::Progressing("its controller has not seen the new template".into());
            }
            replicas_ready(obj, "updatedReplicas", "availableReplicas")
        }
        WorkloadKind::StatefulSet => {
            if observed < generation {
                return Health::Progressing("its controller has not seen the new template".into());
            }
            let revisions = (
                status["currentRevision"].as_str(),
                status["updateRevision"].as_str(),
            );
            if let (Some(current), Some(update)) = revisions
                && current != update
                && obj["spec"]["updateStrategy"]["type"] != "OnDelete"
            {
                return Health::Progressing(format!("revision {current}, updating to {update}"));
            }
            replicas_ready(obj, "updatedReplicas", "readyReplicas")
        }
        WorkloadKind::DaemonSet => {
            if observed < generation {
                return Health::Progressing("its controller has not seen the new template".into());
            }
            let desired = count(status, "desiredNumberScheduled");
            let updated = count(status, "updatedNumberScheduled");
            let available = count(status, "numberAvailable");
            match updated >= desired && available >= desired {
                true => Health::Healthy,
                false => Health::Progressing(format!(
                    "{updated} of {desired} updated, {available} available"
                )),
            }
        }
        WorkloadKind::Rollout => match status["phase"].as_str() {
            Some("Healthy") => Health::Healthy,
            Some("Degraded") => Health::Failed(format!(
                "Degraded: {}",
                status["message"].as_str().unwrap_or("no message")
            )),
            phase => Health::Progressing(format!("phase {}", phase.unwrap_or("unknown"))),
        },
        WorkloadKind::Job => {
            if let Some(reason) = failed_condition(status, "Failed", "True") {
                return Health::Failed(reason);
            }
            match count(status, "succeeded") > 0 {
                true => Health::Healthy,
                false => Health::Progressing("no pod succeeded yet".into()),
            }
        }
        // A CronJob's next Job runs on its schedule: nothing to wait for. A pod reloaded is
        // evicted: what replaces it, if anything, is its owner's.
        WorkloadKind::CronJob | WorkloadKind::Pod => Health::Healthy,
        // A declared kind: its controller has seen the template, and its Ready condition (the
        // convention Knative and most operators follow), where it has one, is not False.
        WorkloadKind::Custom(_) => {
            if observed < generation {
                return Health::Progressing("its controller has not seen the new template".into());
            }
            match failed_condition(status, "Ready", "False") {
                Some(reason) => Health::Progressing(format!("not Ready: {reason}")),
                None => Health::Healthy,
            }
        }
    }
}

/// The reason of the condition `kind` whose status is `status`, if any.
fn failed_condition(status: &Value, kind: &str, value: &str) -> Option<String> {
    status["conditions"].as_array()?.iter().find_map(|c| {
        (c["type"] == kind && c["status"] == value).then(|| {
            c["reason"]
                .as_str()
                .or(c["message"].as_str())
                .unwrap_or(kind)
                .to_string()
        })
    })
}

fn count(status: &Value, field: &str) -> i64 {
    status[field].as_i64().unwrap_or(0)
}

/// Every wanted replica updated and ready or available, and no replica of an older template
/// left (`status.replicas` counts old and new).
fn replicas_ready(obj: &Value, updated: &str, ready: &str) -> Health {
    let wanted = obj["spec"]["replicas"].as_i64().unwrap_or(1);
    let status = &obj["status"];
    let (up, ok, all) = (
        count(status, updated),
        count(status, ready),
        count(status, "replicas"),
    );
    match up >= wanted && ok >= wanted && all <= up {
        true => Health::Healthy,
        false => Health::Progressing(format!(
            "{up} of {wanted} updated, {ok} {}, {all} in all",
            ready.trim_end_matches("Replicas")
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment(generation: i64, status: Value) -> Value {
        json!({"metadata": {"generation": generation}, "spec": {"replicas": 2}, "status": status})
    }

    #[test]
    fn a_declared_kind_is_healthy_once_seen_and_not_unready() {
        use crate::custom_kinds::{CustomKind, register};
        let declared = CustomKind::parse("serving.knative.dev/v1/Service").unwrap();
        let kind = WorkloadKind::Custom(register(declared).unwrap());
        let service = |observed: i64, ready: &str| {
            json!({"metadata": {"generation": 4}, "status": {"observedGeneration": observed,
                "conditions": [{"type": "Ready", "status": ready, "reason": "RevisionMissing"}]}})
        };
        assert!(matches!(
            assess(kind, &service(3, "True")),
            Health::Progressing(_)
        ));
        assert!(matches!(
            assess(kind, &service(4, "False")),
            Health::Progressing(m) if m.contains("RevisionMissing")
        ));
        assert_eq!(assess(kind, &service(4, "True")), Health::Healthy);
        let no_conditions =
            json!({"metadata": {"generation": 1}, "status": {"observedGeneration": 1}});
        assert_eq!(assess(kind, &no_conditions), Health::Healthy);
    }

    #[test]
    fn a_deployment_is_healthy_once_every_replica_is_updated_and_available() {
        let rolling = json!({"observedGeneration": 3, "replicas": 3, "updatedReplicas": 2,
            "availableReplicas": 2});
        assert!(matches!(
            assess(WorkloadKind::Deployment, &deployment(3, rolling)),
            Health::Progressing(m) if m.contains("3 in all")
        ));
        let unseen = json!({"observedGeneration": 2, "replicas": 2, "updatedReplicas": 2,
            "availableReplicas": 2});
        assert!(matches!(
            assess(WorkloadKind::Deployment, &deployment(3, unseen)),
            Health::Progressing(_)
        ));
        let done = json!({"observedGeneration": 3, "replicas": 2, "updatedReplicas": 2,
            "availableReplicas": 2});
        assert_eq!(
            assess(WorkloadKind::Deployment, &deployment(3, done)),
            Health::Healthy
        );
    }

    #[test]
    fn a_deployment_past_its_progress_deadline_has_failed() {
        let status = json!({"observedGeneration": 3, "conditions": [
            {"type": "Available", "status": "True"},
            {"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded"}]});
        assert_eq!(
            assess(WorkloadKind::Deployment, &deployment(3, status)),
            Health::Failed("ProgressDeadlineExceeded".into())
        );
    }

    #[test]
    fn statefulsets_daemonsets_rollouts_and_jobs_read_their_own_status() {
        let sts = json!({"metadata": {"generation": 2}, "spec": {"replicas": 1},
            "status": {"observedGeneration": 2, "currentRevision": "a", "updateRevision": "b",
                "replicas": 1, "updatedReplicas": 1, "readyReplicas": 1}});
        assert!(matches!(
            assess(WorkloadKind::StatefulSet, &sts),
            Health::Progressing(_)
        ));
        let ds = json!({"metadata": {"generation": 1}, "status": {"observedGeneration": 1,
            "desiredNumberScheduled": 3, "updatedNumberScheduled": 3, "numberAvailable": 3}});
        assert_eq!(assess(WorkloadKind::DaemonSet, &ds), Health::Healthy);
        let rollout = json!({"status": {"phase": "Degraded", "message": "bad pods"}});
        assert_eq!(
            assess(WorkloadKind::Rollout, &rollout),
            Health::Failed("Degraded: bad pods".into())
        );
        let job = json!({"status": {"conditions": [
            {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}]}});
        assert_eq!(
            assess(WorkloadKind::Job, &job),
            Health::Failed("BackoffLimitExceeded".into())
        );
        assert_eq!(assess(WorkloadKind::CronJob, &json!({})), Health::Healthy);
    }
}
