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
    let filter =
        tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| default_filter(default_level));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    let _ = match format {
        LogFormat::Pretty => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}

/// The filter without RUST_LOG. A directive's target is a prefix: `census`
/// is every crate of ours (`census_layers`, `census_store`, ...), and only
/// ours (third-party crates' names do not start with it).
fn default_filter(default_level: &str) -> tracing_subscriber::EnvFilter {
    tracing_subscriber::EnvFilter::new(format!("error,census={default_level}"))
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

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    /// What a subscriber wrote.
    #[derive(Clone, Default)]
    struct Written(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Written {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn every_crate_of_ours_logs_at_the_default_level_and_others_only_errors() {
        let written = Written::default();
        let writer = written.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_env_filter(super::default_filter("warn"))
            .with_writer(move || writer.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            tracing::warn!(target: "census_layers::trust", "a part set aside");
            tracing::warn!(target: "census_local::simulate", "a result refused");
            tracing::info!(target: "census_coordinator", "below the default level");
            tracing::warn!(target: "sqlx::query", "a slow statement");
            tracing::error!(target: "h2::codec", "a broken connection");
        });
        let text = String::from_utf8(written.0.lock().unwrap().clone()).unwrap();
        for shown in ["a part set aside", "a result refused", "a broken connection"] {
            assert!(text.contains(shown), "{shown:?} is logged: {text}");
        }
        for hidden in ["below the default level", "a slow statement"] {
            assert!(!text.contains(hidden), "{hidden:?} is not: {text}");
        }
    }
}
