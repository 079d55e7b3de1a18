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

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use census_coordinator::auth::{generate_token, hash_token};
use census_coordinator::{AuthConfig, Coordinator, CoordinatorConfig};
use census_math::census::{Census, JobCounter};
use census_proto::client::ClientConfig;
use census_proto::v1::job_outcome::Status as OutcomeStatus;
use census_proto::v1::worker_service_client::WorkerServiceClient;
use census_proto::v1::{CompleteJobsRequest, GetProgressRequest, GetResultRequest, HeartbeatRequest, JobResult};
use census_proto::v1::{LeaseJobsRequest, Progress, RunResult};
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
    /// Jobs a simulated worker leases at once.
    #[arg(long, default_value = "1", value_parser = clap::value_parser!(u32).range(1..=2048))]
    batch: u32,
    /// Milliseconds of made-up counting per job, between the heartbeat and
    /// the report (0: none, the heaviest load a worker can make).
    #[arg(long, default_value = "0")]
    count_ms: u64,
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
    let census: Census = format!("synthetic jobs={} salt={}", args.jobs, salt())
        .parse()
        .map_err(|e: census_math::census::CensusError| UsageError(format!("--jobs {}: {e}", args.jobs)))?;
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
    let served = coordinator_runtime.block_on(serve(&database, census, &tokens, &operator))?;
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
        census,
        progress: !args.json,
    };
    let simulated = workers_runtime.block_on(async move { tokio::spawn(simulate(plan)).await })?;
    let after = CpuSample::now();
    let memory = Memory::now();

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
        "batch": args.batch,
        "count_ms": args.count_ms,
        "jobs": args.jobs,
        "jobs_done": simulated.progress.done,
        "results_recorded": calls.recorded,
        "results_already_done": calls.already_done,
        "results_lease_lost": calls.lease_lost,
        "results_refused": calls.refused,
        "calls_failed": calls.failed,
        "last_failure": calls.last_failure,
        "empty_leases": calls.empty_leases,
        "final": simulated.result.r#final,
        "answer": simulated.result.answer,
        "answer_checked": answer_checked,
        "create_run_seconds": round3(create_seconds),
        "seconds": round3(seconds),
        "jobs_per_second": round3(simulated.progress.done as f64 / seconds.max(1e-9)),
        "lease": latency(calls.lease_ms),
        "heartbeat": latency(calls.heartbeat_ms),
        "complete": latency(calls.complete_ms),
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
            format!("p50 {} ms, p99 {} ms, max {} ms ({} calls)", l["p50_ms"], l["p99_ms"], l["max_ms"], l["calls"])
        };
        println!(
            "{} of {} jobs done in {:.1} s by {} workers: {} jobs/s",
            simulated.progress.done, args.jobs, seconds, args.workers, summary["jobs_per_second"]
        );
        println!("lease:     {}", line("lease"));
        println!("heartbeat: {}", line("heartbeat"));
        println!("complete:  {}", line("complete"));
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
    match census {
        Census::Synthetic { salt, .. } => salt,
        _ => unreachable!("census simulate runs the synthetic census"),
    }
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
async fn serve(database: &str, census: Census, tokens: &[String], operator: &str) -> anyhow::Result<Served> {
    let store = super::open_store(database, StoreConfig::default()).await?;
    let mut auth = AuthConfig::default();
    auth.local.insert(hash_token(operator), ("simulate-operator".into(), Role::Operator));
    for (i, token) in tokens.iter().enumerate() {
        auth.local.insert(hash_token(token), (format!("sim-worker-{i}"), Role::Worker));
    }
    let config = CoordinatorConfig { auth, trust_local_workers: false, ..CoordinatorConfig::default() };
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
    batch: u32,
    count_ms: u64,
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
            counter: plan.census.job_counter(),
            version: plan.census.counter_version(),
            recorded: recorded.clone(),
            backoff: BACKOFF_START,
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

/// One simulated worker: leases, heartbeats each batch once (as a real
/// worker does when a batch takes a third of the lease time, the least it
/// would), makes up the counts with the census's own counter (O(1)) after
/// `count_ms` a job, and reports them; until the coordinator says no work
/// is left for it.
struct SimulatedWorker {
    client: WorkerServiceClient<tonic::service::interceptor::InterceptedService<Channel, Bearer>>,
    name: String,
    run_id: i64,
    batch: u32,
    count_ms: u64,
    counter: JobCounter,
    version: String,
    recorded: Arc<AtomicU64>,
    /// The pause before the next try of a failed call: doubled up to 10 s,
    /// jittered, as a real worker's, so that a saturated coordinator is not
    /// met by a storm of retries a real fleet would not make.
    backoff: Duration,
}

const BACKOFF_START: Duration = Duration::from_millis(200);
const BACKOFF_CAP: Duration = Duration::from_secs(10);

/// What the workers' calls took and what came of them.
#[derive(Default)]
struct Calls {
    lease_ms: Vec<f32>,
    heartbeat_ms: Vec<f32>,
    complete_ms: Vec<f32>,
    recorded: u64,
    already_done: u64,
    lease_lost: u64,
    refused: u64,
    /// Calls that failed (unavailable, deadline) and were tried again.
    failed: u64,
    /// What the last failed call said, for the summary.
    last_failure: Option<String>,
    /// Leases that returned no job while other workers finished theirs.
    empty_leases: u64,
}

impl Calls {
    fn add(&mut self, other: Calls) {
        self.lease_ms.extend(other.lease_ms);
        self.heartbeat_ms.extend(other.heartbeat_ms);
        self.complete_ms.extend(other.complete_ms);
        self.recorded += other.recorded;
        self.already_done += other.already_done;
        self.lease_lost += other.lease_lost;
        self.refused += other.refused;
        self.failed += other.failed;
        if other.last_failure.is_some() {
            self.last_failure = other.last_failure;
        }
        self.empty_leases += other.empty_leases;
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
        loop {
            // A call's latency is the worker's wait: from the first try to
            // the answer, failed tries and their pauses included.
            let started = Instant::now();
            let leased = loop {
                let request =
                    LeaseJobsRequest { worker_id: self.name.clone(), max_jobs: self.batch, run_id: self.run_id };
                match self.client.lease_jobs(timed(request)).await {
                    Ok(response) => break response.into_inner(),
                    Err(status) => self.failed(&mut calls, "lease", status).await?,
                }
            };
            self.backoff = BACKOFF_START;
            calls.lease_ms.push(ms_since(started));
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
            let tokens: Vec<String> = leased.jobs.iter().map(|job| job.token.clone()).collect();
            let started = Instant::now();
            let lost = loop {
                let request = HeartbeatRequest { worker_id: self.name.clone(), tokens: tokens.clone() };
                match self.client.heartbeat(timed(request)).await {
                    Ok(response) => break response.into_inner().cancel_tokens,
                    Err(status) => self.failed(&mut calls, "heartbeat", status).await?,
                }
            };
            self.backoff = BACKOFF_START;
            calls.heartbeat_ms.push(ms_since(started));
            if self.count_ms > 0 {
                tokio::time::sleep(Duration::from_millis(self.count_ms * leased.jobs.len() as u64)).await;
            }
            let mut results = Vec::with_capacity(leased.jobs.len());
            for job in leased.jobs.into_iter().filter(|job| !lost.contains(&job.token)) {
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
                continue;
            }
            let started = Instant::now();
            let outcomes = loop {
                let request = CompleteJobsRequest { worker_id: self.name.clone(), results: results.clone() };
                match self.client.complete_jobs(timed(request)).await {
                    Ok(response) => break response.into_inner().outcomes,
                    Err(status) => self.failed(&mut calls, "complete", status).await?,
                }
            };
            self.backoff = BACKOFF_START;
            calls.complete_ms.push(ms_since(started));
            for outcome in outcomes {
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
        }
    }

    /// A call that failed: a refusal of the credential ends the simulation
    /// (nothing would change by retrying); anything else is counted and
    /// retried after a pause, as a real worker would.
    async fn failed(&mut self, calls: &mut Calls, call: &str, status: tonic::Status) -> anyhow::Result<()> {
        if matches!(status.code(), tonic::Code::Unauthenticated | tonic::Code::PermissionDenied) {
            anyhow::bail!("the coordinator refused {}: {}", self.name, status.message());
        }
        calls.failed += 1;
        calls.last_failure = Some(format!("{call}: {}", status.message()));
        // Counted in the summary; one line each would drown the terminal.
        tracing::debug!(worker = %self.name, call, error = %status.message(), retry_in = ?self.backoff, "call failed");
        let jitter = self.backoff.mul_f64(f64::from(rand_fraction()) / 2.0);
        tokio::time::sleep(self.backoff + jitter).await;
        self.backoff = (self.backoff * 2).min(BACKOFF_CAP);
        Ok(())
    }
}

/// A number in [0, 1) that differs from call to call (for jitter, not secrets).
fn rand_fraction() -> f32 {
    use std::hash::{BuildHasher, Hasher};
    let random = std::collections::hash_map::RandomState::new().build_hasher().finish();
    (random % 1000) as f32 / 1000.0
}

/// Count, p50, p99 and max of a call's latencies (nearest rank).
fn latency(mut ms: Vec<f32>) -> serde_json::Value {
    ms.sort_by(f32::total_cmp);
    let rank = |p: f64| -> f64 {
        if ms.is_empty() {
            return 0.0;
        }
        let index = ((p * ms.len() as f64).ceil() as usize).clamp(1, ms.len()) - 1;
        round3(f64::from(ms[index]))
    };
    serde_json::json!({ "calls": ms.len(), "p50_ms": rank(0.50), "p99_ms": rank(0.99), "max_ms": rank(1.0) })
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
