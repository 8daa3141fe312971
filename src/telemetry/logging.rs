//! Logging setup: Reloader's `--log-format` (text or json) and `--log-level`.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

#[derive(Debug, thiserror::Error)]
pub enum LoggingError {
    #[error("--log-level: '{0}' is not one of trace, debug, info, warning, error, fatal, panic")]
    Level(String),
    #[error("--log-format: '{0}' is not one of '' (text), json")]
    Format(String),
}

/// Maps logrus level names onto tracing's.
pub fn level_directive(level: &str) -> Result<&'static str, LoggingError> {
    Ok(match level.to_ascii_lowercase().as_str() {
        "trace" => "trace",
        "debug" => "debug",
        "info" | "" => "info",
        "warn" | "warning" => "warn",
        "error" | "fatal" | "panic" => "error",
        other => return Err(LoggingError::Level(other.to_string())),
    })
}

/// Colour escapes only for a person at a terminal: `kubectl logs` and log shippers read a pipe or
/// a file and would show them raw. `NO_COLOR` (any non-empty value, no-color.org) turns them off.
pub fn ansi_for(is_terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    is_terminal && no_color.is_none_or(|v| v.is_empty())
}

/// Installs the global subscriber, with the OpenTelemetry layer when `provider` is set.
/// `RUST_LOG` wins over `--log-level` when set.
pub fn init(
    format: &str,
    level: &str,
    provider: Option<&opentelemetry_sdk::trace::SdkTracerProvider>,
) -> Result<(), LoggingError> {
    let directive = level_directive(level)?;
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new(format!("{directive},kube_reloader={directive}")));
    let otel = provider.map(super::tracing::layer);
    let registry = tracing_subscriber::registry().with(otel).with(filter);
    match format {
        "json" => registry
            .with(
                tracing_subscriber::fmt::layer()
                    .with_ansi(false)
                    .json()
                    .flatten_event(true)
                    .with_current_span(true),
            )
            .init(),
        "" | "text" => {
            let ansi = ansi_for(
                std::io::stdout().is_terminal(),
                std::env::var_os("NO_COLOR").as_deref(),
            );
            registry
                .with(tracing_subscriber::fmt::layer().with_ansi(ansi))
                .init()
        }
        other => return Err(LoggingError::Format(other.to_string())),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        assert!(ansi_for(true, None));
        assert!(
            ansi_for(true, Some(OsStr::new(""))),
            "an empty NO_COLOR is unset"
        );
        assert!(!ansi_for(true, Some(OsStr::new("1"))));
        assert!(!ansi_for(false, None), "a pipe or a file (kubectl logs)");
        assert!(!ansi_for(false, Some(OsStr::new("1"))));
    }
}
