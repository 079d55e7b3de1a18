//! `census simulate`: a load test of the real coordinator. It starts the
//! coordinator as `census run` does (same `Coordinator`, same gRPC server,
//! same store) on a made-up census, `synthetic jobs=M` (counts of nothing,
//! each checked by the coordinator in O(1): `census_math::synthetic`), and N
//! simulated workers that speak gRPC to it, each with its own token: they
//! lease, heartbeat and report as real workers do, without counting
//! anything. It measures what the coordinator and its store sustain: jobs a
//! second, the latency of each call, the process's memory and CPU.
//!
//! The coordinator and the simulated workers run on two runtimes of their
//! own (threads `coordinator` and `sim-worker`), so the CPU the workers
//! spend is told apart from the coordinator's. Memory cannot be: the
//! resident set is the process's, workers included.

use std::collections::HashSet;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use census_coordinator::auth::{generate_token, hash_token};
use census_coordinator::{AdmissionLimits, AuthConfig, Coordinator, CoordinatorConfig};
use census_math::census::{Census, JobCounter, Synthetic};
use census_proto::client::ClientConfig;
use census_proto::v1::job_outcome::Status as OutcomeStatus;
use census_proto::v1::worker_service_client::WorkerServiceClient;
use census_proto::v1::{CompleteJobsRequest, GetProgressRequest, GetResultRequest, HeartbeatRequest, JobResult};
use census_proto::v1::{Job, LeaseJobsRequest, Progress, RunResult};
use census_store::{Role, StoreConfig};
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::Interceptor;
use tonic::transport::{Channel, Endpoint};

use super::UsageError;
use super::client::{connect_with, status_error};
use super::roles::{LogFormat, cores, init_logging};

#[derive(clap::Args)]
pub struct Args {
    /// Simulated workers, 1 to 100,000, each with its own token.
    #[arg(long, value_parser = parse_workers)]
    workers: usize,
    /// Jobs of the synthetic census, 1 to 10,000,000 (made-up counts, for load testing only).
    #[arg(long)]
    jobs: u64,
    /// A postgres:// URL to run against (a new run in it, removed never:
    /// use a throw-away database). Default: an SQLite file in a new
    /// temporary directory, removed at the end.
    #[arg(long, env = "CENSUS_DATABASE_URL")]
    database: Option<String>,
    /// Jobs a simulated worker leases at once, 1 to 2,048, or `rate`: as
    /// `census worker` sizes its batches, to count for the time the
    /// coordinator asks (a second while it is not busy, longer as a large
    /// fleet fills it), from the rate of the last batch.
    #[arg(long, default_value = "1", value_parser = parse_batch)]
    batch: Batch,
    /// Seconds a lease lasts without a heartbeat (the coordinator's
    /// `--lease-ttl`, 1 to 3,600): the pace asks for batches of up to a
    /// quarter of it.
    #[arg(long, default_value_t = CoordinatorConfig::default().lease_ttl.as_secs(), value_parser = clap::value_parser!(u64).range(1..=3600))]
    lease_ttl: u64,
    /// Milliseconds of made-up counting per job, between the lease and
    /// the report (0: none, the heaviest load a worker can make).
    #[arg(long, default_value = "0")]
    count_ms: u64,
    /// When a simulated worker heartbeats its leases.
    #[arg(long, value_enum, default_value = "worker")]
    heartbeats: Heartbeats,
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=100_000), help = super::MAX_CALLS_IN_FLIGHT_HELP)]
    max_calls_in_flight: Option<u32>,
    #[arg(long, env = "CENSUS_DATABASE_CONNECTIONS", value_parser = clap::value_parser!(u32).range(1..=1000), help = super::DATABASE_CONNECTIONS_HELP)]
    database_connections: Option<u32>,
    /// HTTP/2 connections the simulated workers share (default: one each,
    /// as separate machines would have; fewer needs fewer file descriptors).
    #[arg(long, value_parser = parse_workers)]
    connections: Option<usize>,
    /// Print only the summary, as one JSON object.
    #[arg(long)]
    json: bool,
    /// Log format (logs go to stderr; RUST_LOG=info shows more).
    #[arg(long, env = "CENSUS_LOG_FORMAT", value_enum, default_value = "pretty")]
    log_format: LogFormat,
}

/// When a simulated worker heartbeats its leases.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Heartbeats {
    /// As `census worker` does: a batch's leases in one call every third of
    /// the lease TTL while the batch is held (counted, then reported); a
    /// batch done sooner sends none.
    Worker,
    /// One call for each batch as soon as it is leased: the most a worker
    /// could send (what this command did before it modelled the worker).
    EveryBatch,
}

/// How many jobs a simulated worker leases at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Batch {
    Fixed(u32),
    /// As `census worker`: from the last batch's rate and the coordinator's pace.
    Rate,
}

fn parse_batch(text: &str) -> Result<Batch, String> {
    match text {
        "rate" => Ok(Batch::Rate),
        _ => match text.parse::<u32>() {
            Ok(n) if (1..=census_proto::limits::MAX_BATCH).contains(&n) && n <= 2048 => Ok(Batch::Fixed(n)),
            _ => Err(format!("{text:?} is neither `rate` nor a number of jobs from 1 to 2048")),
        },
    }
}

impl Batch {
    fn to_json(self) -> serde_json::Value {
        match self {
            Batch::Fixed(n) => n.into(),
            Batch::Rate => "rate".into(),
        }
    }
}

/// The most simulated workers (and connections) one command starts.
const MAX_WORKERS: usize = 100_000;

fn parse_workers(text: &str) -> Result<usize, String> {
    match text.replace(['_', ','], "").parse::<usize>() {
        Ok(n) if (1..=MAX_WORKERS).contains(&n) => Ok(n),
        _ => Err(format!("{text:?} is not a number from 1 to {MAX_WORKERS}")),
    }
}

/// The deadline of every call a simulated worker makes: as a real worker's.
const CALL_DEADLINE: Duration = census_worker::CALL_DEADLINE;

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    init_logging(args.log_format, "warn");
    let census = Census::new(Synthetic { jobs: args.jobs, salt: salt(), heavy: None })
        .map_err(|e| UsageError(format!("--jobs {}: {e}", args.jobs)))?;
    let connections = args.connections.unwrap_or(args.workers).min(args.workers);
    // Each connection is two descriptors here (client and server end),
    // plus the store's pool and the runtime's own.
    let descriptors = allow_descriptors(2 * connections as u64 + 256)?;

    let temporary = match &args.database {
        Some(_) => None,
        None => Some(TempDir::new()?),
    };
    let database = match (&args.database, &temporary) {
        (Some(url), _) => url.clone(),
        (None, Some(dir)) => dir.0.join("simulate.db").display().to_string(),
        (None, None) => unreachable!("a temporary directory when no database is given"),
    };
    let shown_database = match &args.database {
        Some(url) => census_store::redact_url(url),
        None => "sqlite (a temporary file)".to_string(),
    };

    let coordinator_runtime = tokio::runtime::Builder::new_multi_thread()
        .thread_name(COORDINATOR_THREADS)
        .worker_threads(cores())
        .enable_all()
        .build()?;
    let workers_runtime = tokio::runtime::Builder::new_multi_thread()
        .thread_name(WORKER_THREADS)
        .worker_threads(cores())
        .enable_all()
        .build()?;

    let tokens: Vec<String> = (0..args.workers).map(|_| generate_token()).collect();
    let operator = generate_token();
    let created = Instant::now();
    let pool = super::pool_for(&database, args.database_connections)?;
    let admission = super::admission_for(pool, args.max_calls_in_flight.map(|n| n as usize));
    let lease_ttl = Duration::from_secs(args.lease_ttl);
    let served =
        coordinator_runtime.block_on(serve(&database, pool, census, &tokens, &operator, admission, lease_ttl))?;
    let create_seconds = created.elapsed().as_secs_f64();
    if !args.json {
        eprintln!(
            "census simulate: {} workers, {} jobs ({census}, a load test: counts of nothing) on {shown_database}, \
             coordinator at {}",
            args.workers, args.jobs, served.address
        );
    }

    let before = CpuSample::now();
    let plan = Plan {
        address: served.address.clone(),
        run_id: served.run_id,
        tokens,
        operator,
        connections,
        batch: args.batch,
        count_ms: args.count_ms,
        heartbeats: args.heartbeats,
        census,
        progress: !args.json,
    };
    let simulated = workers_runtime.block_on(async move { tokio::spawn(simulate(plan)).await })?;
    let after = CpuSample::now();
    let memory = Memory::now();
    let admitted = served.coordinator.admission();

    coordinator_runtime.block_on(async move {
        let _ = served.stop.send(());
        let _ = served.server.await;
        served.coordinator.store().close().await;
    });
    drop(workers_runtime);
    drop(coordinator_runtime);
    drop(temporary);
    let simulated = simulated?;

    let expected = census_math::synthetic::expected_answer(args.jobs, census_salt(census)).to_string();
    let answer_checked = simulated.result.r#final && simulated.result.answer == expected;
    let calls = simulated.calls;
    let seconds = simulated.seconds;
    let summary = serde_json::json!({
        "census": census.to_string(),
        "database": shown_database,
        "workers": args.workers,
        "connections": connections,
        "batch": args.batch.to_json(),
        "lease_ttl_seconds": args.lease_ttl,
        "count_ms": args.count_ms,
        "heartbeats": format!("{:?}", args.heartbeats).to_lowercase(),
        "max_calls_in_flight": admission.calls,
        "database_connections": pool,
        "jobs": args.jobs,
        "jobs_done": simulated.progress.done,
        "results_recorded": calls.recorded,
        "results_already_done": calls.already_done,
        "results_lease_lost": calls.lease_lost,
        "results_refused": calls.refused,
        "calls_failed": calls.failed,
        "calls_refused_busy": calls.refused_busy,
        "last_failure": calls.last_failure,
        "admission": {
            "admitted": admitted.admitted,
            "refused_held": admitted.refused_held,
            "refused_leases": admitted.refused_leases,
            "most_in_flight": admitted.most_in_flight,
            "batch_pace_ms": admitted.batch_pace.as_millis() as u64,
        },
        "mean_batch": round3(calls.recorded as f64 / calls.batches.max(1) as f64),
        "empty_leases": calls.empty_leases,
        "final": simulated.result.r#final,
        "answer": simulated.result.answer,
        "answer_checked": answer_checked,
        "create_run_seconds": round3(create_seconds),
        "seconds": round3(seconds),
        "jobs_per_second": round3(simulated.progress.done as f64 / seconds.max(1e-9)),
        "lease": latency(calls.waits[Call::Lease as usize].clone(), &calls.answered[Call::Lease as usize]),
        "heartbeat": latency(calls.waits[Call::Heartbeat as usize].clone(), &calls.answered[Call::Heartbeat as usize]),
        "complete": latency(calls.waits[Call::Complete as usize].clone(), &calls.answered[Call::Complete as usize]),
        "coordinator_cpu_seconds": round3(after.process - before.process - (after.workers - before.workers)),
        "workers_cpu_seconds": round3(after.workers - before.workers),
        "process_rss_mib": round3(memory.rss_kib as f64 / 1024.0),
        "process_peak_rss_mib": round3(memory.peak_kib as f64 / 1024.0),
        "file_descriptor_limit": descriptors,
        "cores": cores(),
    });
    if args.json {
        println!("{summary}");
    } else {
        let line = |name: &str| {
            let l = &summary[name];
            format!(
                "p50 {} ms, p99 {} ms, max {} ms ({} calls; the answered try alone: p50 {} ms, p99 {} ms)",
                l["p50_ms"], l["p99_ms"], l["max_ms"], l["calls"], l["answered_p50_ms"], l["answered_p99_ms"]
            )
        };
        println!(
            "{} of {} jobs done in {:.1} s by {} workers: {} jobs/s",
            simulated.progress.done, args.jobs, seconds, args.workers, summary["jobs_per_second"]
        );
        println!("lease:     {}", line("lease"));
        println!("heartbeat: {}", line("heartbeat"));
        println!("complete:  {}", line("complete"));
        println!(
            "admission: {} calls admitted, {} refused busy (new leases {}, held leases {}), at most {} in flight of {}",
            admitted.admitted,
            admitted.refused_held + admitted.refused_leases,
            admitted.refused_leases,
            admitted.refused_held,
            admitted.most_in_flight,
            admission.calls
        );
        println!(
            "coordinator CPU {} s, simulated workers CPU {} s; process memory {} MiB (peak {} MiB, workers included)",
            summary["coordinator_cpu_seconds"],
            summary["workers_cpu_seconds"],
            summary["process_rss_mib"],
            summary["process_peak_rss_mib"]
        );
        println!(
            "answer {} (the exact sum of made-up counts: {})",
            simulated.result.answer,
            match answer_checked {
                true => "as expected",
                false => "NOT as expected",
            }
        );
    }
    if !answer_checked || simulated.progress.done != args.jobs {
        return Err(anyhow::anyhow!(
            "the run did not end as it must: {} of {} jobs done, final {}, answer {:?} (expected {expected})",
            simulated.progress.done,
            args.jobs,
            simulated.result.r#final,
            simulated.result.answer
        ));
    }
    Ok(ExitCode::SUCCESS)
}

const COORDINATOR_THREADS: &str = "coordinator";
const WORKER_THREADS: &str = "sim-worker";

/// A salt new for every simulation, so that a run in a Postgres database
/// that already holds one is a new run, not the old one resumed.
fn salt() -> u64 {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    (nanos as u64) ^ u64::from(std::process::id()).rotate_left(32)
}

fn census_salt(census: Census) -> u64 {
    census.as_kind::<Synthetic>().expect("census simulate runs the synthetic census").salt
}

/// The coordinator as this process serves it.
struct Served {
    coordinator: Arc<Coordinator>,
    address: String,
    run_id: i64,
    stop: tokio::sync::oneshot::Sender<()>,
    server: tokio::task::JoinHandle<Result<(), Box<dyn std::error::Error + Send + Sync>>>,
}

/// Opens the store, creates the run and serves it on a loopback port, as
/// `census run` does, except that the workers' results are all checked
/// (they are not trusted as this process's own: the check is what is measured).
async fn serve(
    database: &str,
    pool: u32,
    census: Census,
    tokens: &[String],
    operator: &str,
    admission: AdmissionLimits,
    lease_ttl: Duration,
) -> anyhow::Result<Served> {
    let store = super::open_store(database, StoreConfig::default(), pool).await?;
    let mut auth = AuthConfig::default();
    auth.local.insert(hash_token(operator), ("simulate-operator".into(), Role::Operator));
    for (i, token) in tokens.iter().enumerate() {
        auth.local.insert(hash_token(token), (format!("sim-worker-{i}"), Role::Worker));
    }
    let config =
        CoordinatorConfig { auth, trust_local_workers: false, admission, lease_ttl, ..CoordinatorConfig::default() };
    let coordinator = Coordinator::new(store, config);
    let run = coordinator.create_run(census, 1).await?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let address = format!("http://{}", listener.local_addr()?);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(coordinator.clone().serve(listener, async move {
        let _ = stopped.await;
    }));
    Ok(Served { coordinator, address, run_id: run.run_id, stop, server })
}

/// What the simulated workers are to do.
struct Plan {
    address: String,
    run_id: i64,
    tokens: Vec<String>,
    operator: String,
    connections: usize,
    batch: Batch,
    count_ms: u64,
    heartbeats: Heartbeats,
    census: Census,
    progress: bool,
}

struct Simulated {
    calls: Calls,
    seconds: f64,
    progress: Progress,
    result: RunResult,
}

/// Starts the workers, waits for them all to find no work left, and reads
/// the run's progress and result over gRPC, as an operator would.
async fn simulate(plan: Plan) -> anyhow::Result<Simulated> {
    let channels = (0..plan.connections)
        .map(|_| {
            Endpoint::from_shared(plan.address.clone())
                .map(|endpoint| endpoint.tcp_nodelay(true).connect_timeout(Duration::from_secs(20)).connect_lazy())
        })
        .collect::<Result<Vec<Channel>, _>>()?;
    let recorded = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut workers = tokio::task::JoinSet::new();
    for (i, token) in plan.tokens.iter().enumerate() {
        let client = WorkerServiceClient::with_interceptor(channels[i % channels.len()].clone(), Bearer::new(token)?);
        let worker = SimulatedWorker {
            client,
            name: format!("sim-worker-{i}"),
            run_id: plan.run_id,
            batch: plan.batch,
            count_ms: plan.count_ms,
            heartbeats: plan.heartbeats,
            counter: plan.census.job_counter(),
            version: plan.census.counter_version(),
            recorded: recorded.clone(),
            retry: Retry::default(),
        };
        workers.spawn(worker.work());
    }
    let mut calls = Calls::default();
    let mut shown = Instant::now();
    loop {
        tokio::select! {
            joined = workers.join_next() => match joined {
                Some(worker) => calls.add(worker??),
                None => break,
            },
            _ = tokio::time::sleep(Duration::from_secs(1)) => {
                if plan.progress && shown.elapsed() >= Duration::from_secs(5) {
                    shown = Instant::now();
                    eprintln!(
                        "progress: {} jobs recorded in {:.0} s, {} workers still working",
                        recorded.load(Ordering::Relaxed),
                        started.elapsed().as_secs_f64(),
                        workers.len()
                    );
                }
            }
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    let operator = ClientConfig { url: plan.address, token: Some(plan.operator), ..ClientConfig::default() };
    let mut client = connect_with(&operator).await?;
    let progress =
        client.get_progress(GetProgressRequest { run_id: plan.run_id }).await.map_err(status_error)?.into_inner();
    let result = client.get_result(GetResultRequest { run_id: plan.run_id }).await.map_err(status_error)?.into_inner();
    Ok(Simulated { calls, seconds, progress, result })
}

/// Presents one simulated worker's token on a connection others share.
#[derive(Clone)]
struct Bearer(MetadataValue<Ascii>);

impl Bearer {
    fn new(token: &str) -> anyhow::Result<Bearer> {
        Ok(Bearer(format!("Bearer {token}").parse()?))
    }
}

impl Interceptor for Bearer {
    fn call(&mut self, mut request: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        request.metadata_mut().insert("authorization", self.0.clone());
        Ok(request)
    }
}

type WorkerClient = WorkerServiceClient<tonic::service::interceptor::InterceptedService<Channel, Bearer>>;

/// One simulated worker: leases a batch, makes up its counts with the
/// census's own counter (O(1)) after `count_ms` a job, reports them, and
/// heartbeats the batch's leases meanwhile as `heartbeats` says; until the
/// coordinator says no work is left for it.
struct SimulatedWorker {
    client: WorkerClient,
    name: String,
    run_id: i64,
    batch: Batch,
    count_ms: u64,
    heartbeats: Heartbeats,
    counter: JobCounter,
    version: String,
    recorded: Arc<AtomicU64>,
    retry: Retry,
}

/// How a simulated worker waits before it tries a failed call again, as
/// `census worker` does: the coordinator's retry hint when it gives one
/// (a refusal of a busy coordinator), jittered; otherwise its own pause,
/// doubled from 200 ms up to 10 s and jittered, so that a saturated
/// coordinator is not met by a storm of retries a real fleet would not make.
struct Retry {
    backoff: Duration,
}

impl Default for Retry {
    fn default() -> Retry {
        Retry { backoff: BACKOFF_START }
    }
}

const BACKOFF_START: Duration = Duration::from_millis(200);
const BACKOFF_CAP: Duration = Duration::from_secs(10);

impl Retry {
    /// Pauses after a failed `call` of `worker`: a refusal of the credential
    /// ends the simulation (nothing would change by retrying); anything
    /// else is counted and tried again after the pause.
    async fn pause(
        &mut self,
        calls: &mut Calls,
        worker: &str,
        call: Call,
        status: tonic::Status,
    ) -> anyhow::Result<()> {
        if matches!(status.code(), tonic::Code::Unauthenticated | tonic::Code::PermissionDenied) {
            anyhow::bail!("the coordinator refused {worker}: {}", status.message());
        }
        let pause = match census_proto::retry::pushback(&status) {
            Some(hint) => {
                calls.refused_busy += 1;
                hint
            }
            None => {
                calls.failed += 1;
                calls.last_failure = Some(format!("{}: {}", call.name(), status.message()));
                let pause = self.backoff;
                self.backoff = (self.backoff * 2).min(BACKOFF_CAP);
                pause
            }
        };
        // Counted in the summary; one line each would drown the terminal.
        tracing::debug!(worker, call = call.name(), error = %status.message(), retry_in = ?pause, "call failed");
        tokio::time::sleep(pause + pause.mul_f64(f64::from(rand_fraction()) / 2.0)).await;
        Ok(())
    }

    /// The call was answered: the next failure starts the backoff again.
    fn answered(&mut self) {
        self.backoff = BACKOFF_START;
    }

    /// Makes the call until it is answered, pausing after each failure;
    /// records how long the worker waited (first try to answer) and how
    /// long the answered try took.
    async fn until_answered<T, Answer>(
        &mut self,
        calls: &mut Calls,
        worker: &str,
        call: Call,
        mut attempt: impl FnMut() -> Answer,
    ) -> anyhow::Result<T>
    where
        Answer: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let started = Instant::now();
        loop {
            let tried = Instant::now();
            match attempt().await {
                Ok(response) => {
                    calls.answered[call as usize].push(ms_since(tried));
                    calls.waits[call as usize].push(ms_since(started));
                    self.answered();
                    return Ok(response.into_inner());
                }
                Err(status) => self.pause(calls, worker, call, status).await?,
            }
        }
    }
}

/// The workers' calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Call {
    Lease = 0,
    Heartbeat = 1,
    Complete = 2,
}

impl Call {
    fn name(self) -> &'static str {
        match self {
            Call::Lease => "lease",
            Call::Heartbeat => "heartbeat",
            Call::Complete => "complete",
        }
    }
}

/// What the workers' calls took and what came of them.
#[derive(Default)]
struct Calls {
    /// Each call's wait, from its first try to its answer, by [`Call`].
    waits: [Vec<f32>; 3],
    /// The answered try's own time, by [`Call`].
    answered: [Vec<f32>; 3],
    recorded: u64,
    already_done: u64,
    lease_lost: u64,
    refused: u64,
    /// Calls that failed (unavailable, deadline) and were tried again.
    failed: u64,
    /// Tries the coordinator refused as busy, with a retry hint.
    refused_busy: u64,
    /// What the last failed call said, for the summary.
    last_failure: Option<String>,
    /// Leases that returned no job while other workers finished theirs.
    empty_leases: u64,
    /// Leases that returned jobs.
    batches: u64,
}

impl Calls {
    fn add(&mut self, other: Calls) {
        for (mine, theirs) in self.waits.iter_mut().zip(other.waits) {
            mine.extend(theirs);
        }
        for (mine, theirs) in self.answered.iter_mut().zip(other.answered) {
            mine.extend(theirs);
        }
        self.recorded += other.recorded;
        self.already_done += other.already_done;
        self.lease_lost += other.lease_lost;
        self.refused += other.refused;
        self.failed += other.failed;
        self.refused_busy += other.refused_busy;
        if other.last_failure.is_some() {
            self.last_failure = other.last_failure;
        }
        self.empty_leases += other.empty_leases;
        self.batches += other.batches;
    }
}

fn timed<T>(message: T) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request.set_timeout(CALL_DEADLINE);
    request
}

fn ms_since(started: Instant) -> f32 {
    started.elapsed().as_secs_f32() * 1000.0
}

impl SimulatedWorker {
    async fn work(mut self) -> anyhow::Result<Calls> {
        let mut calls = Calls::default();
        let mut idle_polls = 0u32;
        // A worker that sizes its batches by rate starts as census-worker
        // does with one thread: a job.
        let mut max_jobs = match self.batch {
            Batch::Fixed(n) => n,
            Batch::Rate => 1,
        };
        loop {
            let (run_id, worker_id) = (self.run_id, self.name.clone());
            let client = self.client.clone();
            let leased = self
                .retry
                .until_answered(&mut calls, &self.name, Call::Lease, || {
                    let mut client = client.clone();
                    let request = LeaseJobsRequest { worker_id: worker_id.clone(), max_jobs, run_id };
                    async move { client.lease_jobs(timed(request)).await }
                })
                .await?;
            if leased.jobs.is_empty() {
                if leased.idle {
                    return Ok(calls);
                }
                // As a real worker: the last jobs are held by others; ask again soon.
                calls.empty_leases += 1;
                idle_polls += 1;
                tokio::time::sleep(Duration::from_millis(200 * u64::from(idle_polls.min(10)))).await;
                continue;
            }
            idle_polls = 0;
            calls.batches += 1;
            let ttl = Duration::from_secs(u64::from(leased.lease_ttl_seconds.max(1)));
            if self.batch == Batch::Rate {
                // The made-up counting's rate: count_ms a job (none: as fast as it gets).
                let (jobs, counting) =
                    (leased.jobs.len(), Duration::from_millis(self.count_ms * leased.jobs.len() as u64));
                let asked = Duration::from_millis(u64::from(leased.batch_millis));
                max_jobs = census_worker::batch_for_rate(jobs, counting, 1, ttl, asked);
            }
            let tokens: Vec<String> = leased.jobs.iter().map(|job| job.token.clone()).collect();
            let lost: Mutex<HashSet<String>> = Mutex::default();
            if self.heartbeats == Heartbeats::EveryBatch {
                let cancelled = self.heartbeat(&mut Retry::default(), &mut calls, &tokens).await?;
                lost.lock().expect("never poisoned").extend(cancelled);
            }
            // As census-worker: the batch's leases are heartbeated every
            // third of their TTL until the report is answered.
            let beats: Mutex<Calls> = Mutex::default();
            let beating = async {
                if self.heartbeats != Heartbeats::Worker {
                    return std::future::pending::<anyhow::Result<Calls>>().await;
                }
                let mut retry = Retry::default();
                loop {
                    tokio::time::sleep(ttl / 3).await;
                    let held: Vec<String> = {
                        let lost = lost.lock().expect("never poisoned");
                        tokens.iter().filter(|token| !lost.contains(*token)).cloned().collect()
                    };
                    let mut mine = Calls::default();
                    let cancelled = self.heartbeat(&mut retry, &mut mine, &held).await?;
                    beats.lock().expect("never poisoned").add(mine);
                    lost.lock().expect("never poisoned").extend(cancelled);
                }
            };
            let reporting = self.count_and_report(leased.jobs, &lost);
            let reported = tokio::select! {
                reported = reporting => reported,
                failed = beating => failed,
            };
            calls.add(reported?);
            calls.add(beats.into_inner().expect("never poisoned"));
        }
    }

    /// Heartbeats `tokens` in one call until answered; the leases lost.
    async fn heartbeat(&self, retry: &mut Retry, calls: &mut Calls, tokens: &[String]) -> anyhow::Result<Vec<String>> {
        let answer = retry
            .until_answered(calls, &self.name, Call::Heartbeat, || {
                let mut client = self.client.clone();
                let request = HeartbeatRequest { worker_id: self.name.clone(), tokens: tokens.to_vec() };
                async move { client.heartbeat(timed(request)).await }
            })
            .await?;
        Ok(answer.cancel_tokens)
    }

    /// Makes up the counts of `jobs` (but those whose leases are `lost`)
    /// after `count_ms` a job, and reports them until answered.
    async fn count_and_report(&self, jobs: Vec<Job>, lost: &Mutex<HashSet<String>>) -> anyhow::Result<Calls> {
        let mut calls = Calls::default();
        if self.count_ms > 0 {
            tokio::time::sleep(Duration::from_millis(self.count_ms * jobs.len() as u64)).await;
        }
        let mut results = Vec::with_capacity(jobs.len());
        let held: Vec<Job> = {
            let lost = lost.lock().expect("never poisoned");
            jobs.into_iter().filter(|job| !lost.contains(&job.token)).collect()
        };
        for job in held {
            let count = self.counter.count(&job.key)?;
            results.push(JobResult {
                job_id: job.job_id,
                token: job.token,
                key: job.key,
                count: count.to_string(),
                elapsed_seconds: self.count_ms as f64 / 1000.0,
                counter_version: self.version.clone(),
            });
        }
        if results.is_empty() {
            return Ok(calls);
        }
        let mut retry = Retry::default();
        let answer = retry
            .until_answered(&mut calls, &self.name, Call::Complete, || {
                let mut client = self.client.clone();
                let request = CompleteJobsRequest { worker_id: self.name.clone(), results: results.clone() };
                async move { client.complete_jobs(timed(request)).await }
            })
            .await?;
        for outcome in answer.outcomes {
            match OutcomeStatus::try_from(outcome.status).unwrap_or(OutcomeStatus::Rejected) {
                OutcomeStatus::Recorded => {
                    calls.recorded += 1;
                    self.recorded.fetch_add(1, Ordering::Relaxed);
                }
                OutcomeStatus::AlreadyDone => calls.already_done += 1,
                OutcomeStatus::LeaseLost => calls.lease_lost += 1,
                _ => {
                    calls.refused += 1;
                    tracing::warn!(worker = %self.name, job = outcome.job_id, message = %outcome.message, "result refused");
                }
            }
        }
        Ok(calls)
    }
}

/// A number in [0, 1) that differs from call to call (for jitter, not secrets).
fn rand_fraction() -> f32 {
    use std::hash::{BuildHasher, Hasher};
    let random = std::collections::hash_map::RandomState::new().build_hasher().finish();
    (random % 1000) as f32 / 1000.0
}

/// Count, p50, p99 and max of a call's waits, and p50 and p99 of its
/// answered tries alone (nearest rank).
fn latency(waits: Vec<f32>, answered: &[f32]) -> serde_json::Value {
    let waits = Ranks::of(waits);
    let answered = Ranks::of(answered.to_vec());
    serde_json::json!({
        "calls": waits.0.len(),
        "p50_ms": waits.rank(0.50),
        "p99_ms": waits.rank(0.99),
        "max_ms": waits.rank(1.0),
        "answered_p50_ms": answered.rank(0.50),
        "answered_p99_ms": answered.rank(0.99),
    })
}

/// Latencies, sorted.
struct Ranks(Vec<f32>);

impl Ranks {
    fn of(mut ms: Vec<f32>) -> Ranks {
        ms.sort_by(f32::total_cmp);
        Ranks(ms)
    }

    /// The nearest-rank percentile `p` (0 to 1), in ms; 0 for no calls.
    fn rank(&self, p: f64) -> f64 {
        if self.0.is_empty() {
            return 0.0;
        }
        let index = ((p * self.0.len() as f64).ceil() as usize).clamp(1, self.0.len()) - 1;
        round3(f64::from(self.0[index]))
    }
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// CPU seconds so far: the whole process (getrusage), and the simulated
/// workers' threads alone (/proc/self/task/*/stat, by thread name).
struct CpuSample {
    process: f64,
    workers: f64,
}

impl CpuSample {
    fn now() -> CpuSample {
        // SAFETY: getrusage writes into the struct it is given, which is ours.
        let usage = unsafe {
            let mut usage: libc::rusage = std::mem::zeroed();
            libc::getrusage(libc::RUSAGE_SELF, &mut usage);
            usage
        };
        let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
        CpuSample { process: seconds(usage.ru_utime) + seconds(usage.ru_stime), workers: thread_cpu(WORKER_THREADS) }
    }
}

/// CPU seconds of this process's live threads named `name`.
fn thread_cpu(name: &str) -> f64 {
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return 0.0 };
    let mut total = 0u64;
    for task in tasks.flatten() {
        let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else { continue };
        // "tid (comm) state ppid ...": comm may hold spaces; fields 14 and 15 (utime, stime) follow it.
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else { continue };
        if &stat[open + 1..close] != name {
            continue;
        }
        let fields: Vec<&str> = stat[close + 1..].split_whitespace().collect();
        let field = |n: usize| fields.get(n - 3).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        total += field(14) + field(15);
    }
    total as f64 / ticks
}

/// The process's resident memory now and at its peak (/proc/self/status).
struct Memory {
    rss_kib: u64,
    peak_kib: u64,
}

impl Memory {
    fn now() -> Memory {
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let kib = |name: &str| {
            status
                .lines()
                .find_map(|line| line.strip_prefix(name))
                .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
                .unwrap_or(0)
        };
        Memory { rss_kib: kib("VmRSS:"), peak_kib: kib("VmHWM:") }
    }
}

/// Raises the soft limit on open files to `wanted` if the hard limit allows;
/// returns the limit in force, or says what to do when it is too low.
fn allow_descriptors(wanted: u64) -> anyhow::Result<u64> {
    // SAFETY: getrlimit and setrlimit read and write the struct given, which is ours.
    unsafe {
        let mut limit: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return Ok(0);
        }
        if limit.rlim_cur as u64 >= wanted {
            return Ok(limit.rlim_cur as u64);
        }
        if (limit.rlim_max as u64) < wanted {
            return Err(UsageError(format!(
                "this many connections need about {wanted} open files, and the hard limit is {}: \
                 share connections (--connections N) or raise the limit (ulimit -Hn)",
                limit.rlim_max
            ))
            .into());
        }
        limit.rlim_cur = wanted as libc::rlim_t;
        if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
            return Err(anyhow::anyhow!(
                "cannot raise the open-file limit to {wanted}: {}",
                std::io::Error::last_os_error()
            ));
        }
        Ok(wanted)
    }
}

/// A directory of our own under the system's temporary directory, removed
/// when dropped.
struct TempDir(std::path::PathBuf);

impl TempDir {
    fn new() -> anyhow::Result<TempDir> {
        let path = std::env::temp_dir().join(format!("census-simulate-{}-{}", std::process::id(), salt()));
        std::fs::create_dir(&path).map_err(|e| anyhow::anyhow!("cannot create {}: {e}", path.display()))?;
        Ok(TempDir(path))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
