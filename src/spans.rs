//! The span attributes every stage sets on the spans of a reload (OpenTelemetry semantic
//! conventions), and the trace id a written Event or log line links to. Exporting the spans is
//! `telemetry::tracing`'s.

use opentelemetry::trace::TraceContextExt;
use tracing::{Span, info_span};
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::model::{ConfigKey, WorkloadKey, WorkloadKind};

/// The current span's trace id (hex), when the span is being traced.
pub fn current_trace_id() -> Option<String> {
    trace_id_of(&tracing::Span::current())
}

/// `span`'s trace id (hex), when it is being traced.
pub fn trace_id_of(span: &Span) -> Option<String> {
    let context = span.context();
    let span = context.span();
    let span_context = span.span_context();
    span_context
        .is_valid()
        .then(|| span_context.trace_id().to_string())
}

/// The semantic-convention attribute naming a workload of `kind`, where OpenTelemetry has one.
pub fn workload_name_key(kind: WorkloadKind) -> Option<&'static str> {
    match kind {
        WorkloadKind::Deployment => Some("k8s.deployment.name"),
        WorkloadKind::StatefulSet => Some("k8s.statefulset.name"),
        WorkloadKind::DaemonSet => Some("k8s.daemonset.name"),
        WorkloadKind::CronJob => Some("k8s.cronjob.name"),
        WorkloadKind::Job => Some("k8s.job.name"),
        WorkloadKind::Pod => Some("k8s.pod.name"),
        WorkloadKind::Rollout | WorkloadKind::DeploymentConfig | WorkloadKind::Custom(_) => None,
    }
}

/// Why a `config_change` span (the root of a reload's trace) was opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigCause {
    /// The config was created or its value changed.
    Changed,
    /// The config was deleted (`--reload-on-delete`).
    Deleted,
    /// A kept halt is held again after a restart or a handover.
    HeldByHalt,
    /// Its workloads record an older value: it changed while nobody watched them.
    MissedWhileDown,
    /// A workload's maintenance window opened, or its delay passed, on a change it held.
    HeldByTiming,
}

impl ConfigCause {
    pub fn as_str(self) -> &'static str {
        match self {
            ConfigCause::Changed => "changed",
            ConfigCause::Deleted => "deleted",
            ConfigCause::HeldByHalt => "held_by_halt",
            ConfigCause::MissedWhileDown => "missed_while_down",
            ConfigCause::HeldByTiming => "held_by_timing",
        }
    }
}

/// The `config_change` span of `config`, built in this one place: the config's identity, why it
/// was opened, and `affected` (recorded once the fan-out knows it).
pub fn config_change(config: &ConfigKey, cause: ConfigCause) -> Span {
    let span = info_span!(
        "config_change",
        config.kind = %config.kind,
        config.namespace = %config.namespace,
        config.name = %config.name,
        cause = cause.as_str(),
        deleted = cause == ConfigCause::Deleted,
        affected = tracing::field::Empty,
    );
    annotate_config(&span, config);
    span
}

/// Semantic-convention attributes of a config event's span.
pub fn annotate_config(span: &Span, config: &ConfigKey) {
    span.set_attribute("k8s.namespace.name", config.namespace.to_string());
}

/// Semantic-convention attributes of a workload's `reload` span.
pub fn annotate_workload(span: &Span, workload: &WorkloadKey) {
    span.set_attribute("k8s.namespace.name", workload.namespace.to_string());
    if let Some(key) = workload_name_key(workload.kind) {
        span.set_attribute(key, workload.name.to_string());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn semantic_convention_names_for_the_kinds_that_have_one() {
        assert_eq!(
            workload_name_key(WorkloadKind::Deployment),
            Some("k8s.deployment.name")
        );
        assert_eq!(
            workload_name_key(WorkloadKind::CronJob),
            Some("k8s.cronjob.name")
        );
        assert_eq!(workload_name_key(WorkloadKind::Rollout), None);
        let named = WorkloadKind::BUILT_IN
            .iter()
            .filter(|k| workload_name_key(**k).is_some())
            .count();
        assert_eq!(named, 6);
    }
}
