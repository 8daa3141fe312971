//! OpenTelemetry traces, configured by the standard `OTEL_*` environment variables
//! (`OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, `OTEL_SERVICE_NAME`,
//! `OTEL_TRACES_SAMPLER[_ARG]`, headers, timeout). Off when no endpoint is set: then no OTel layer
//! is installed and spans cost what a disabled `tracing` span costs.

use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_opentelemetry::OpenTelemetrySpanExt;

#[derive(Debug, thiserror::Error)]
pub enum TracingError {
    #[error("OTEL_EXPORTER_OTLP_PROTOCOL={0}: only http/protobuf is supported")]
    Protocol(String),
    #[error("building the OTLP exporter: {0}")]
    Exporter(String),
}

/// True when an OTLP endpoint is configured.
pub fn enabled() -> bool {
    [
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
    ]
    .iter()
    .any(|v| std::env::var(v).is_ok_and(|s| !s.trim().is_empty()))
}

/// Builds the tracer provider (batching, on its own thread) when tracing is enabled.
pub fn provider() -> Result<Option<SdkTracerProvider>, TracingError> {
    if !enabled() {
        return Ok(None);
    }
    let protocol = std::env::var("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        .or_else(|_| std::env::var("OTEL_EXPORTER_OTLP_PROTOCOL"))
        .unwrap_or_default();
    if !matches!(protocol.as_str(), "" | "http/protobuf") {
        return Err(TracingError::Protocol(protocol));
    }
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .build()
        .map_err(|e| TracingError::Exporter(e.to_string()))?;
    // OTEL_SERVICE_NAME, when set, wins over this default (resource detection reads it).
    let service = std::env::var("OTEL_SERVICE_NAME").unwrap_or_else(|_| "kube-reloader".into());
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(Resource::builder().with_service_name(service).build())
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

/// The current span's trace id (hex), when the span is being traced.
pub fn current_trace_id() -> Option<String> {
    let context = tracing::Span::current().context();
    let span = context.span();
    let span_context = span.span_context();
    span_context
        .is_valid()
        .then(|| span_context.trace_id().to_string())
}
