//! `census worker`: lease jobs from a coordinator, count them, report the counts.

use std::process::ExitCode;

use census_worker::{Stop, WorkerConfig, default_worker_id, run_worker};
use tokio::sync::watch;

use super::client::Credentials;
use super::roles::{LogFormat, cores, init_logging, runtime, signals};

#[derive(clap::Args)]
pub struct Args {
    /// The coordinator's gRPC address.
    #[arg(long, env = "CENSUS_COORDINATOR", default_value = "http://127.0.0.1:50051")]
    coordinator: String,
    /// Counting threads, 1 to 1024 (default: the number of cores).
    #[arg(long, env = "CENSUS_THREADS", value_parser = super::parse_threads)]
    threads: Option<usize>,
    /// Jobs per lease, 1 to 10000 (default: sized from the last batch's rate so that a batch, counted on all the
    /// threads, takes the time the coordinator asks: a second unless a large fleet keeps it busy, at most a third of
    /// the lease TTL; at least a job a thread, or the jobs a thread counts together, 256 gangsters for 4x3).
    #[arg(long, env = "CENSUS_BATCH", value_parser = clap::value_parser!(u32).range(1..=i64::from(census_proto::limits::MAX_BATCH)))]
    batch: Option<u32>,
    /// This worker's label in its logs (default: host name and process id);
    /// the coordinator knows it by its token's name.
    #[arg(long, env = "CENSUS_WORKER_ID")]
    worker_id: Option<String>,
    /// Exit 0 once no run has work left, instead of waiting for new runs.
    #[arg(long, env = "CENSUS_EXIT_WHEN_DONE")]
    exit_when_done: bool,
    /// Lease at most N jobs in all, then exit 0 once they are reported (a
    /// batch scheduler's time slot).
    #[arg(long, env = "CENSUS_MAX_JOBS", value_parser = clap::value_parser!(u64).range(1..))]
    max_jobs: Option<u64>,
    /// Where a `layers` census's files live (its jobs read and write the
    /// parts of each layer there): a directory every worker of the run
    /// shares, the same machine's or a shared filesystem's (NFS, a
    /// volume). Without it, this worker fails such jobs with the reason.
    #[arg(long, env = "CENSUS_LAYERS_DIR")]
    layers_dir: Option<std::path::PathBuf>,
    /// Serve Prometheus metrics (jobs counted, seconds a job, retries) on this address, at /metrics.
    #[arg(long, env = "CENSUS_METRICS_LISTEN")]
    metrics_listen: Option<std::net::SocketAddr>,
    /// Log format.
    #[arg(long, env = "CENSUS_LOG_FORMAT", value_enum, default_value = "pretty")]
    log_format: LogFormat,
    #[command(flatten)]
    credentials: Credentials,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    init_logging(args.log_format, "info");
    let coordinator = args.credentials.client_config(&args.coordinator)?;
    if coordinator.token.is_none() {
        tracing::warn!("no --token: the coordinator will refuse this worker unless it is told otherwise");
    }
    let config = WorkerConfig {
        coordinator,
        worker_id: args.worker_id.unwrap_or_else(default_worker_id),
        threads: args.threads.unwrap_or_else(cores),
        batch: args.batch,
        exit_when_done: args.exit_when_done,
        run: None,
        max_jobs: args.max_jobs,
        layers_dir: args.layers_dir,
    };
    if config.threads == 0 {
        return Err(super::UsageError("--threads must be at least 1".into()).into());
    }
    let metrics_listen = args.metrics_listen;
    runtime()?.block_on(async move {
        if let Some(address) = metrics_listen {
            super::roles::serve_metrics(address)?;
        }
        // Signals are listened for before the worker says it is starting.
        let mut signals = signals();
        tracing::info!(worker = %config.worker_id, coordinator = %config.coordinator.url, threads = config.threads, "worker starting");
        let (stop_sender, stop) = watch::channel(Stop::No);
        tokio::spawn(async move {
            // First signal: stop counting, report what is counted, exit;
            // a second one ends the process at once (`signals` does that).
            if signals.wait_for(|n| *n >= 1).await.is_ok() {
                tracing::info!("signal received: stopping (a second signal exits at once)");
                let _ = stop_sender.send(Stop::Drain);
            }
        });
        let report = run_worker(config, stop).await?;
        tracing::info!(counted = report.jobs_counted, recorded = report.jobs_recorded, lost = report.leases_lost, "worker stopped");
        Ok(ExitCode::SUCCESS)
    })
}
