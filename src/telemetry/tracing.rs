//! OpenTelemetry traces, configured by the standard `OTEL_*` environment variables
//! (`OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, `OTEL_SERVICE_NAME`,
//! `OTEL_TRACES_SAMPLER[_ARG]`, headers, timeout). Off when no endpoint is set: then no OTel layer
//! is installed and spans cost what a disabled `tracing` span costs.
//!
//! One trace per config change: `config_change` (the event) -> `decide` (the fan-out) and one
//! `reload` per workload (queued to written) -> one `write` per attempt. Spans carry
//! OpenTelemetry's Kubernetes semantic-convention attributes (`k8s.namespace.name`,
//! `k8s.deployment.name`, ...) next to the config's kind and name, never a value.

use opentelemetry::KeyValue;
use opentelemetry::trace::{Status, TraceContextExt, TracerProvider as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::config::Environment;
use crate::rollout::{QueuedChange, WriteError, WriteOutcome};

#[derive(Debug, thiserror::Error)]
pub enum TracingError {
    #[error("OTEL_EXPORTER_OTLP_PROTOCOL={0}: only http/protobuf is supported")]
    Protocol(String),
    #[error("building the OTLP exporter: {0}")]
    Exporter(String),
}

/// True when an OTLP endpoint is configured.
pub fn enabled(env: &Environment) -> bool {
    [
        &env.otel_exporter_otlp_traces_endpoint,
        &env.otel_exporter_otlp_endpoint,
    ]
    .iter()
    .any(|v| v.as_deref().is_some_and(|s| !s.trim().is_empty()))
}

/// Builds the tracer provider (batching, on its own thread) when tracing is enabled. The
/// exporter reads the endpoint and headers from the environment itself (OTLP's convention).
pub fn provider(env: &Environment) -> Result<Option<SdkTracerProvider>, TracingError> {
    if !enabled(env) {
        return Ok(None);
    }
    let protocol = env
        .otel_exporter_otlp_traces_protocol
        .clone()
        .or_else(|| env.otel_exporter_otlp_protocol.clone())
        .unwrap_or_default();
    if !matches!(protocol.as_str(), "" | "http/protobuf") {
        return Err(TracingError::Protocol(protocol));
    }
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .build()
        .map_err(|e| TracingError::Exporter(e.to_string()))?;
    // OTEL_SERVICE_NAME, when set, wins over this default (resource detection reads it).
    let service = env
        .otel_service_name
        .clone()
        .unwrap_or_else(|| "kube-reloader".into());
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(
            Resource::builder()
                .with_service_name(service)
                .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
                .build(),
        )
        .build();
    Ok(Some(provider))
}

/// The `tracing` layer that turns spans into OpenTelemetry spans.
pub fn layer<S>(provider: &SdkTracerProvider) -> impl tracing_subscriber::Layer<S>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    tracing_opentelemetry::layer().with_tracer(provider.tracer("kube-reloader"))
}

/// After a write: changes that rode on the first change's write are marked `coalesced` and
/// linked to the span that wrote them; a failed write is an error in every change's trace.
pub fn record_finished(changes: &[QueuedChange], result: &Result<WriteOutcome, WriteError>) {
    let Some((first, riders)) = changes.split_first() else {
        return;
    };
    let written_by = first.span.context().span().span_context().clone();
    first.span.set_attribute("coalesced", false);
    for change in riders {
        change.span.set_attribute("coalesced", true);
        change.span.add_link(written_by.clone());
    }
    if let Err(error) = result {
        for change in changes {
            change
                .span
                .set_attribute("error.type", error.metric_label());
            change.span.set_status(Status::error(error.to_string()));
        }
    }
}
