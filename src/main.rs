use clap::{CommandFactory, Parser};

use kube_reloader::explain::{
    self,
    cli::{Cli, invoked_as_kubectl_plugin},
};
use kube_reloader::telemetry;

// The runtime is built by hand so that the OTLP exporter (a blocking HTTP client on its own
// thread) is created and dropped outside of it.
fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let as_plugin = std::env::args_os()
        .next()
        .is_some_and(|argv0| invoked_as_kubectl_plugin(&argv0));
    match cli.tool {
        Some(tool) => return std::process::ExitCode::from(explain::cli::run(tool)),
        // As `kubectl reloader`, never start a controller: show what it can do.
        None if as_plugin => {
            let _ = Cli::command().name("kubectl reloader").print_help();
            return std::process::ExitCode::from(2);
        }
        None => {}
    }
    let flags = cli.flags;
    // kube, the alert client and the OTLP exporter share rustls: pin its crypto provider first.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let tracer = match telemetry::tracing::provider(&flags.environment) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("kube-reloader: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    if let Err(e) = telemetry::logging::init(&flags.log_format, &flags.log_level, tracer.as_ref()) {
        eprintln!("kube-reloader: {e}");
        return std::process::ExitCode::from(2);
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("kube-reloader: starting the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(kube_reloader::controller::run(flags));
    drop(runtime);
    // Flush pending spans before exiting.
    if let Some(tracer) = tracer
        && let Err(e) = tracer.shutdown()
    {
        tracing::warn!(error = %e, "flushing traces failed");
    }
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e:#}");
            eprintln!("kube-reloader: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
