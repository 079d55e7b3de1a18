//! What the long-running roles share: logging, signals, the runtime.

use tokio::sync::watch;

/// How log lines look.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Pretty,
    /// One JSON object per line, for log collectors.
    Json,
}

/// Starts logging: the census's own lines at `default_level`, other crates'
/// (sqlx's slow-statement warnings, h2, hyper) only when they are errors,
/// unless RUST_LOG says otherwise. Colours only on a terminal.
pub fn init_logging(format: LogFormat, default_level: &str) {
    use std::io::IsTerminal;
    let ours = ["census", "census_coordinator", "census_worker", "census_store", "census_math"];
    let directives: Vec<String> =
        std::iter::once("error".to_string()).chain(ours.iter().map(|c| format!("{c}={default_level}"))).collect();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(directives.join(",")));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    let _ = match format {
        LogFormat::Pretty => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}

pub fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread().enable_all().build()?)
}

/// Counts SIGINT and SIGTERM: the value is how many have arrived. The first
/// asks the command to stop in order; a second ends the process at once,
/// whatever it waits for (a hung coordinator, a database), exit code 130.
pub fn signals() -> watch::Receiver<u32> {
    use tokio::signal::unix::{SignalKind, signal};
    let (sender, receiver) = watch::channel(0u32);
    // Registered here, before this returns, not in the task: a signal that
    // came before the task first ran took its default action and ended the
    // process (a worker told to stop as it started).
    let (Ok(mut interrupt), Ok(mut terminate)) = (signal(SignalKind::interrupt()), signal(SignalKind::terminate()))
    else {
        tracing::error!("cannot listen for signals");
        return receiver;
    };
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = interrupt.recv() => {}
                _ = terminate.recv() => {}
            }
            sender.send_modify(|n| *n += 1);
            if *sender.borrow() >= 2 {
                eprintln!("census: a second signal: exiting at once");
                std::process::exit(130);
            }
        }
    });
    receiver
}

/// The number of cores, the default for threads and workers.
pub fn cores() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
}

/// Serves this process's metrics for Prometheus at `http://ADDRESS/metrics`.
pub fn serve_metrics(address: std::net::SocketAddr) -> anyhow::Result<()> {
    metrics_exporter_prometheus::PrometheusBuilder::new()
        .with_http_listener(address)
        .install()
        .map_err(|e| anyhow::anyhow!("cannot serve metrics on {address}: {e}"))?;
    tracing::info!(%address, "serving Prometheus metrics at /metrics");
    Ok(())
}
