use clap::Parser;

use kube_reloader::config::Flags;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let flags = Flags::parse();
    if let Err(e) = kube_reloader::telemetry::logging::init(&flags.log_format, &flags.log_level) {
        eprintln!("kube-reloader: {e}");
        return std::process::ExitCode::from(2);
    }
    match kube_reloader::controller::run(flags).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e:#}");
            eprintln!("kube-reloader: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
