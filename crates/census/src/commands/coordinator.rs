//! `census coordinator`: serve the census over gRPC, with all state in a database.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use census_coordinator::auth::{hash_token, parse_token};
use census_coordinator::{AuthConfig, Coordinator, CoordinatorConfig, TlsFiles};
use census_math::{CounterKind, Stage};
use census_store::{DatabaseLocation, MAX_REDUNDANCY, Role, StoreConfig};

use super::UsageError;
use super::client::read_named;
use super::roles::{LogFormat, init_logging, runtime, signals};
use super::{parse_counter, parse_stage};

#[derive(clap::Args)]
pub struct Args {
    /// The database: postgres://user:password@host/db, or an SQLite file path.
    #[arg(long = "database", visible_alias = "database-url", env = "CENSUS_DATABASE_URL", value_parser = super::DatabaseParser)]
    database_url: DatabaseLocation,
    /// The address to serve gRPC on.
    #[arg(long, env = "CENSUS_LISTEN", default_value = "0.0.0.0:50051")]
    listen: SocketAddr,
    /// Create this census's run on start (idempotent); see `census run --help`.
    #[arg(long, value_parser = super::CensusParser, env = "CENSUS_CENSUS", conflicts_with_all = ["stage", "counter"])]
    census: Option<census_math::census::Census>,
    /// Create this stage's run on start (idempotent): 44|russell, 71|felgenhauer-jarvis,
    /// 174|rectangles, 416|rows, 2051|stacks-columns, 36288|catalogue.
    #[arg(long, env = "CENSUS_STAGE", value_parser = parse_stage)]
    stage: Option<Stage>,
    /// The counter of the run created with --stage (see `census run --help`).
    #[arg(long, env = "CENSUS_COUNTER", default_value = "column-sets", value_parser = parse_counter, help = super::COUNTER_HELP)]
    counter: CounterKind,
    /// Distinct worker identities (tokens) that must agree on each job of the run created with --stage or --census, 1 to 5 (default: the census's, 2 for 4x3, 2x6 and layers, 1 for the others: docs/operations.md#checked-results).
    #[arg(long, env = "CENSUS_REDUNDANCY", value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_REDUNDANCY)))]
    redundancy: Option<u32>,
    /// Seconds a lease lasts without a heartbeat, 1 to 3600.
    #[arg(long, env = "CENSUS_LEASE_TTL", default_value_t = CoordinatorConfig::default().lease_ttl.as_secs(), value_parser = clap::value_parser!(u64).range(1..=3600))]
    lease_ttl: u64,
    /// Seconds after which a lease ends however often it is heartbeated, 1 to 604800; a run whose census's jobs take hours (4x3: 4 h, 2x6: 12 h) keeps the longer of this and its own.
    #[arg(long, env = "CENSUS_MAX_LEASE_LIFETIME", default_value_t = StoreConfig::DEFAULT.max_lease_lifetime.as_secs(), value_parser = clap::value_parser!(u64).range(1..=604_800))]
    max_lease_lifetime: u64,
    /// The most leases one worker identity holds at once, 1 to 1000000.
    #[arg(long, env = "CENSUS_MAX_LEASES_PER_WORKER", default_value_t = StoreConfig::DEFAULT.max_leases_per_worker, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    max_leases_per_worker: u32,
    /// Failures after which a job is failed for good (until `census requeue`), 1 to 1000.
    #[arg(long, env = "CENSUS_MAX_ATTEMPTS", default_value_t = StoreConfig::DEFAULT.max_attempts, value_parser = clap::value_parser!(u32).range(1..=1000))]
    max_attempts: u32,
    /// Distinct worker identities whose failures a job needs before it is failed for good, 1 to 5.
    #[arg(long, env = "CENSUS_FAIL_QUORUM", default_value_t = StoreConfig::DEFAULT.fail_quorum, value_parser = clap::value_parser!(u32).range(1..=5))]
    fail_quorum: u32,
    /// Reported failures after which a worker identity is quarantined, 1 to 1000000.
    #[arg(long, env = "CENSUS_QUARANTINE_AFTER_FAILURES", default_value_t = StoreConfig::DEFAULT.quarantine_after_failures, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    quarantine_after_failures: u32,
    /// Rejected results after which a worker identity is quarantined, 1 to 1000.
    #[arg(long, env = "CENSUS_QUARANTINE_AFTER", default_value_t = StoreConfig::DEFAULT.quarantine_after, value_parser = clap::value_parser!(u32).range(1..=1000))]
    quarantine_after: u32,
    /// The share of results the coordinator counts again (0 to 1; 1 checks every result; default: each census's, 1, or 0.01 for 4x3 and 2x6 and 0 for layers, whose runs need 2 identities to agree instead: docs/operations.md#checked-results).
    #[arg(long, env = "CENSUS_VALIDATE_FRACTION", value_parser = parse_fraction)]
    validate_fraction: Option<f64>,
    /// Seconds a job whose worker identities disagree waits, unchanged, for
    /// another identity to make a quorum before the coordinator counts it
    /// itself and its count decides (the disagreeing votes are rejected), 1 to 604800.
    #[arg(long, env = "CENSUS_CONFLICT_WAIT", default_value_t = CoordinatorConfig::default().conflict_wait.as_secs(), value_parser = clap::value_parser!(u64).range(1..=604_800))]
    conflict_wait: u64,
    /// Let anyone read runs, progress and results without a token.
    #[arg(long, env = "CENSUS_PUBLIC_READ")]
    public_read: bool,
    /// Register the token in a file (a mounted secret) as ROLE:NAME:PATH, e.g.
    /// worker:node-7:/run/secrets/worker-token. Repeatable; a revoked name stays revoked.
    #[arg(long = "token-file", env = "CENSUS_TOKEN_FILES", value_delimiter = ',', value_parser = parse_token_file)]
    token_files: Vec<TokenFile>,
    /// Serve TLS with this certificate chain (PEM).
    #[arg(long, env = "CENSUS_TLS_CERT", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The TLS private key (PEM).
    #[arg(long, env = "CENSUS_TLS_KEY", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Require client certificates signed by this CA (PEM).
    #[arg(long, env = "CENSUS_TLS_CLIENT_CA", requires = "tls_cert")]
    tls_client_ca: Option<PathBuf>,
    #[arg(long, env = "CENSUS_MAX_CALLS_IN_FLIGHT", value_parser = clap::value_parser!(u32).range(1..=100_000), help = super::MAX_CALLS_IN_FLIGHT_HELP)]
    max_calls_in_flight: Option<u32>,
    #[arg(long, env = "CENSUS_DATABASE_CONNECTIONS", value_parser = clap::value_parser!(u32).range(1..=1000), help = super::DATABASE_CONNECTIONS_HELP)]
    database_connections: Option<u32>,
    /// Serve the live status page on this address (http://ADDRESS/, or
    /// /#token=TOKEN when reads need a token), with its JSON at /api/status.
    #[arg(long, env = "CENSUS_HTTP_LISTEN")]
    http_listen: Option<SocketAddr>,
    /// Serve Prometheus metrics (jobs by state, results by outcome, latencies,
    /// store errors, per-worker results) on this address, at /metrics. They
    /// need a reader or operator token, unless --public-metrics.
    #[arg(long, env = "CENSUS_METRICS_LISTEN")]
    metrics_listen: Option<SocketAddr>,
    /// Serve /metrics without a credential too (for a Prometheus scraper),
    /// leaving out the series that name worker identities; a reader or
    /// operator token still sees them.
    #[arg(long, env = "CENSUS_PUBLIC_METRICS")]
    public_metrics: bool,
    /// Log format.
    #[arg(long, env = "CENSUS_LOG_FORMAT", value_enum, default_value = "pretty")]
    log_format: LogFormat,
}

/// A token a coordinator registers from a file at start.
#[derive(Debug, Clone)]
pub struct TokenFile {
    role: Role,
    name: String,
    path: PathBuf,
}

fn parse_token_file(text: &str) -> Result<TokenFile, String> {
    let mut parts = text.splitn(3, ':');
    let (Some(role), Some(name), Some(path)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(format!("{text:?} is not ROLE:NAME:PATH"));
    };
    let role = role.parse().map_err(|_| format!("{role:?} is not a role: worker, operator or reader"))?;
    census_store::check_identity(name).map_err(|e| e.to_string())?;
    Ok(TokenFile { role, name: name.to_string(), path: PathBuf::from(path) })
}

fn parse_fraction(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(f) if (0.0..=1.0).contains(&f) => Ok(f),
        _ => Err(format!("{text:?} is not a fraction from 0 to 1")),
    }
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    init_logging(args.log_format, "info");
    if args.max_lease_lifetime < args.lease_ttl {
        return Err(UsageError("--max-lease-lifetime must be at least --lease-ttl".into()).into());
    }
    let runtime = runtime()?;
    let served = runtime.block_on(serve(args));
    // Recounts still running on blocking threads are not waited for (a
    // count can take seconds): their results are reported again elsewhere.
    runtime.shutdown_timeout(Duration::from_secs(1));
    served
}

fn tls_files(args: &Args) -> anyhow::Result<Option<TlsFiles>> {
    let (Some(cert), Some(key)) = (&args.tls_cert, &args.tls_key) else { return Ok(None) };
    Ok(Some(TlsFiles {
        certificate_pem: read_named("--tls-cert", cert)?,
        key_pem: read_named("--tls-key", key)?,
        client_ca_pem: args.tls_client_ca.as_deref().map(|p| read_named("--tls-client-ca", p)).transpose()?,
    }))
}

/// Runs a start-up step again while the database is unavailable (a pool
/// that timed out on a loaded machine, a database restarting), up to
/// [`super::DATABASE_WAIT`]: the steps are idempotent, and a coordinator
/// that exited here would rely on something restarting it.
async fn until_available<T, Step, Done>(what: &str, mut step: Step) -> Result<T, census_store::StoreError>
where
    Step: FnMut() -> Done,
    Done: std::future::Future<Output = Result<T, census_store::StoreError>>,
{
    const PAUSE: Duration = Duration::from_secs(2);
    let started = std::time::Instant::now();
    loop {
        match step().await {
            Err(error) if error.is_retryable() && started.elapsed() + PAUSE < super::DATABASE_WAIT => {
                tracing::warn!(error = %error.report(), "{what}: the database is unavailable; retrying in 2 s");
                tokio::time::sleep(PAUSE).await;
            }
            done => return done,
        }
    }
}

/// The Prometheus recorder, installed first so that nothing recorded before
/// /metrics is served is lost, and the listener of /metrics; none unless
/// --metrics-listen asks.
async fn metrics_recorder(
    args: &Args,
) -> anyhow::Result<Option<(tokio::net::TcpListener, metrics_exporter_prometheus::PrometheusHandle)>> {
    let Some(address) = args.metrics_listen else { return Ok(None) };
    let handle = metrics_exporter_prometheus::PrometheusBuilder::new()
        .install_recorder()
        .map_err(|e| anyhow::anyhow!("cannot record metrics: {e}"))?;
    // The exporter's upkeep (draining histograms), which its own listener would run.
    let upkeep = handle.clone();
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_secs(5)).await;
            upkeep.run_upkeep();
        }
    });
    let listener = tokio::net::TcpListener::bind(address)
        .await
        .map_err(|e| anyhow::anyhow!("cannot serve metrics on {address}: {e}"))?;
    Ok(Some((listener, handle)))
}

/// The tokens of the --token-file files, read and checked before anything
/// is opened, as hashes.
fn token_hashes(args: &Args) -> anyhow::Result<Vec<(&TokenFile, String)>> {
    let mut hashes = Vec::new();
    for file in &args.token_files {
        let text = String::from_utf8(read_named("--token-file", &file.path)?)
            .map_err(|_| UsageError(format!("--token-file {}: not text", file.path.display())))?;
        let token =
            parse_token(text.trim()).map_err(|e| UsageError(format!("--token-file {}: {e}", file.path.display())))?;
        hashes.push((file, hash_token(token)));
    }
    Ok(hashes)
}

/// Registers the token files' tokens, and warns when no credential at
/// all would let a call in.
async fn register_tokens(
    store: &std::sync::Arc<dyn census_store::JobStore>,
    token_hashes: &[(&TokenFile, String)],
    public_read: bool,
) -> anyhow::Result<()> {
    for (file, hash) in token_hashes {
        until_available("registering a token", || store.import_token(&file.name, file.role, hash)).await?;
        tracing::info!(name = %file.name, role = %file.role, "token registered from {}", file.path.display());
    }
    let tokens = until_available("reading the tokens", || store.list_tokens()).await?;
    if tokens.iter().all(|t| t.revoked) && !public_read {
        tracing::warn!(
            "no credentials: every call will be refused; create them with `census token create --role worker|reader|operator --name NAME --database URL`"
        );
    }
    Ok(())
}

async fn serve(args: Args) -> anyhow::Result<ExitCode> {
    let metrics = metrics_recorder(&args).await?;
    let config = StoreConfig {
        max_attempts: args.max_attempts,
        quarantine_after: args.quarantine_after,
        max_lease_lifetime: Duration::from_secs(args.max_lease_lifetime),
        max_leases_per_worker: args.max_leases_per_worker,
        fail_quorum: args.fail_quorum,
        quarantine_after_failures: args.quarantine_after_failures,
    };
    let tls = tls_files(&args)?;
    let token_hashes = token_hashes(&args)?;
    // A database server may still be starting (docker compose, Kubernetes).
    let connections = super::pool_for(&args.database_url, args.database_connections)?;
    let store = super::open_store(&args.database_url, config.clone(), connections).await?;
    tracing::info!("database ready, migrations applied");
    register_tokens(&store, &token_hashes, args.public_read).await?;
    let coordinator = Coordinator::new(
        store,
        CoordinatorConfig {
            lease_ttl: Duration::from_secs(args.lease_ttl),
            auth: AuthConfig { public_read: args.public_read, ..AuthConfig::default() },
            validate_fraction: args.validate_fraction,
            conflict_wait: Duration::from_secs(args.conflict_wait),
            // It has no tokens of its own: every worker is someone else's.
            trust_local_workers: false,
            tls,
            public_metrics: args.public_metrics,
            admission: super::admission_for(connections, args.max_calls_in_flight.map(|n| n as usize)),
            ..CoordinatorConfig::default()
        },
    );
    let census = match (args.census, args.stage) {
        (Some(census), _) => Some(census),
        (None, Some(stage)) => Some(super::census_of(None, stage, args.counter)),
        (None, None) => None,
    };
    if let Some(census) = census {
        let run = until_available("creating the run", || coordinator.create_run(census, args.redundancy.unwrap_or(0)))
            .await?;
        tracing::info!(run = run.run_id, census = %run.spec.census, jobs = run.jobs_total, done = run.jobs_done, "run ready");
    }
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", args.listen))?;
    tracing::info!(address = %listener.local_addr()?, tls = args.tls_cert.is_some(), "coordinator serving gRPC");
    let mut signals = signals();
    serve_pages(&args, &coordinator, metrics, &signals).await?;
    let shutdown = async move {
        let _ = signals.wait_for(|n| *n > 0).await;
        tracing::info!("shutting down");
    };
    coordinator.serve(listener, shutdown).await.map_err(|e| anyhow::anyhow!("gRPC server failed: {e}"))?;
    Ok(ExitCode::SUCCESS)
}

/// The status page and /metrics, when asked for, until a signal comes.
async fn serve_pages(
    args: &Args,
    coordinator: &std::sync::Arc<Coordinator>,
    metrics: Option<(tokio::net::TcpListener, metrics_exporter_prometheus::PrometheusHandle)>,
    signals: &tokio::sync::watch::Receiver<u32>,
) -> anyhow::Result<()> {
    if let Some(address) = args.http_listen {
        let listener = tokio::net::TcpListener::bind(address)
            .await
            .map_err(|e| anyhow::anyhow!("cannot serve the status page on {address}: {e}"))?;
        tracing::info!(address = %listener.local_addr()?, "status page at http://{}/", listener.local_addr()?);
        let mut stop = signals.clone();
        tokio::spawn(coordinator.clone().serve_status_page(listener, async move {
            let _ = stop.wait_for(|n| *n > 0).await;
        }));
    }
    if let Some((listener, handle)) = metrics {
        tracing::info!(address = %listener.local_addr()?, public = args.public_metrics, "serving Prometheus metrics at /metrics");
        let mut stop = signals.clone();
        let render: census_coordinator::RenderMetrics = std::sync::Arc::new(move || handle.render());
        tokio::spawn(coordinator.clone().serve_metrics(listener, render, async move {
            let _ = stop.wait_for(|n| *n > 0).await;
        }));
    }
    Ok(())
}
