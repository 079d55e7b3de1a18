//! `census coordinator`: serve the census over gRPC, with all state in a database.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use census_coordinator::Coordinator;
use census_math::{CounterKind, Stage};
use census_store::StoreConfig;

use super::roles::{LogFormat, init_logging, runtime, signals};
use super::{parse_counter, parse_stage};

#[derive(clap::Args)]
pub struct Args {
    /// The database: postgres://user:password@host/db, or an SQLite file path.
    #[arg(long, env = "CENSUS_DATABASE_URL")]
    database_url: String,
    /// The address to serve gRPC on.
    #[arg(long, env = "CENSUS_LISTEN", default_value = "0.0.0.0:50051")]
    listen: SocketAddr,
    /// Create this stage's run on start (idempotent), e.g. 44 or russell.
    #[arg(long, env = "CENSUS_STAGE", value_parser = parse_stage)]
    stage: Option<Stage>,
    /// The counter of the run created with --stage.
    #[arg(long, env = "CENSUS_COUNTER", default_value = "column-sets", value_parser = parse_counter)]
    counter: CounterKind,
    /// Distinct workers that must agree on each job of the run created with --stage.
    #[arg(long, env = "CENSUS_REDUNDANCY", default_value_t = 1)]
    redundancy: u32,
    /// Seconds a lease lasts without a heartbeat.
    #[arg(long, env = "CENSUS_LEASE_TTL", default_value_t = 30)]
    lease_ttl: u64,
    /// Attempts after which a failing job is failed for good.
    #[arg(long, env = "CENSUS_MAX_ATTEMPTS", default_value_t = 5)]
    max_attempts: u32,
    /// Log format.
    #[arg(long, env = "CENSUS_LOG_FORMAT", value_enum, default_value = "pretty")]
    log_format: LogFormat,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    init_logging(args.log_format, "info");
    runtime()?.block_on(serve(args))
}

async fn serve(args: Args) -> anyhow::Result<ExitCode> {
    let config = StoreConfig { max_attempts: args.max_attempts };
    // The database may still be starting (docker compose, Kubernetes): retry for a minute.
    let mut attempt = 0;
    let store = loop {
        match census_store::connect(&args.database_url, config.clone()).await {
            Ok(store) => break store,
            Err(error) if attempt < 30 => {
                attempt += 1;
                tracing::warn!(%error, "cannot open the database yet; retrying in 2 s");
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
            Err(error) => return Err(error.into()),
        }
    };
    tracing::info!("database ready, migrations applied");
    let coordinator = Coordinator::new(store, Duration::from_secs(args.lease_ttl.max(1)));
    if let Some(stage) = args.stage {
        let run = coordinator.create_run(stage, args.counter, args.redundancy).await?;
        tracing::info!(run = run.run_id, stage = %run.spec.stage, counter = %run.spec.counter, jobs = run.jobs_total, done = run.jobs_done, "run ready");
    }
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", args.listen))?;
    tracing::info!(address = %listener.local_addr()?, "coordinator serving gRPC");
    let mut signals = signals();
    let shutdown = async move {
        let _ = signals.wait_for(|n| *n > 0).await;
        tracing::info!("shutting down");
    };
    coordinator.serve(listener, shutdown).await.map_err(|e| anyhow::anyhow!("gRPC server failed: {e}"))?;
    Ok(ExitCode::SUCCESS)
}
