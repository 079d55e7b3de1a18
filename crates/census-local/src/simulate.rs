//! The load test of the coordinator and its store (`census simulate`):
//! simulated workers that speak gRPC to a [`crate::LocalCluster`], each
//! with its own credential. They lease, heartbeat and report as real
//! workers do (`census_worker`'s batch sizing, heartbeat cadence, retry
//! hint and backoff), without counting anything: their census is
//! `synthetic jobs=M`, whose counts the coordinator checks in O(1). What
//! is measured is what the coordinator and its store sustain: jobs a
//! second, the wait of each call ([`Calls`]), and ([`measure`]) the CPU of
//! the coordinator apart from the workers' and the process's memory.

pub mod flood;
pub mod measure;

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use census_math::census::{Census, CensusError, JobCounter};
use census_proto::v1::job_outcome::Status as OutcomeStatus;
use census_proto::v1::worker_service_client::WorkerServiceClient;
use census_proto::v1::{CompleteJobsRequest, HeartbeatRequest, Job, JobResult, LeaseJobsRequest};
use census_store::RunId;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::Interceptor;
use tonic::transport::{Channel, Endpoint};

use crate::Credential;

/// When a simulated worker heartbeats its leases.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Heartbeats {
    /// As `census worker` does: a batch's leases in one call every third of
    /// the lease TTL while the batch is held (counted, then reported); a
    /// batch done sooner sends none.
    Worker,
    /// One call for each batch as soon as it is leased: the most a worker
    /// could send.
    EveryBatch,
}

impl Heartbeats {
    /// Its name on the command line and in the summary.
    pub fn name(self) -> &'static str {
        match self {
            Heartbeats::Worker => "worker",
            Heartbeats::EveryBatch => "every-batch",
        }
    }
}

/// How many jobs a simulated worker leases at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Batch {
    /// This many, 1 to [`MAX_BATCH`].
    Fixed(u32),
    /// As `census worker`: from the last batch's rate and the coordinator's pace.
    Rate,
}

/// The largest fixed batch a simulated worker leases.
pub const MAX_BATCH: u32 = 2048;

impl std::str::FromStr for Batch {
    type Err = String;

    /// `rate`, or a number of jobs from 1 to [`MAX_BATCH`].
    fn from_str(text: &str) -> Result<Batch, String> {
        match text {
            "rate" => Ok(Batch::Rate),
            _ => match text.parse::<u32>() {
                Ok(n) if (1..=census_proto::limits::MAX_BATCH).contains(&n) && n <= MAX_BATCH => Ok(Batch::Fixed(n)),
                _ => Err(format!("{text:?} is neither `rate` nor a number of jobs from 1 to {MAX_BATCH}")),
            },
        }
    }
}

/// What the simulated workers are to do.
#[derive(Debug, Clone)]
pub struct Load {
    /// The coordinator's gRPC address (`http://127.0.0.1:PORT`).
    pub address: String,
    /// The run they work on.
    pub run_id: RunId,
    /// One simulated worker for each credential.
    pub workers: Vec<Credential>,
    /// HTTP/2 connections the workers share (one each, as separate
    /// machines would have, when there are as many as workers).
    pub connections: usize,
    pub batch: Batch,
    /// Milliseconds of made-up counting per job, between the lease and the report.
    pub count_ms: u64,
    pub heartbeats: Heartbeats,
    /// The run's census (synthetic: its counter makes up a count in O(1)).
    pub census: Census,
    /// One more identity that floods the coordinator with stale reports.
    pub flood: Option<flood::Flood>,
}

/// What a load test's workers did.
#[derive(Debug)]
pub struct Driven {
    /// What the honest workers' calls took.
    pub calls: Calls,
    /// Seconds until the honest workers found no work left (the first time).
    pub seconds: f64,
    /// What the flood measured, if there was one.
    pub flood: Option<flood::FloodReport>,
}

/// How far the workers got, for a progress line.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LoadProgress {
    /// Results the coordinator recorded.
    pub recorded: u64,
    /// Seconds since the workers started.
    pub seconds: f64,
    /// Workers that have not found the run's work done yet.
    pub working: usize,
}

/// Why a load test stopped before its workers were done.
#[derive(Debug, thiserror::Error)]
pub enum SimulationError {
    /// The coordinator refused a worker's credential: retrying cannot help.
    #[error("the coordinator refused {worker}: {message}")]
    Refused { worker: String, message: String },
    /// A made-up count could not be made (a job that is not the census's).
    #[error(transparent)]
    Count(#[from] CensusError),
    #[error("the coordinator's address {address:?} is not a URI")]
    Address { address: String },
    #[error("a token cannot be sent in a header")]
    Token,
    #[error("a simulated worker's task failed")]
    Task(#[source] tokio::task::JoinError),
    #[error("the flooder found no job to lease (the run was done): more jobs are needed for a flood")]
    NothingToFlood,
}

/// The deadline of every call a simulated worker makes: as a real worker's.
const CALL_DEADLINE: Duration = census_worker::CALL_DEADLINE;

/// Runs the simulated workers of `load` until each finds no work left for
/// it, calling `progress` every 5 s, and its flood if it has one; what
/// their calls took, and the seconds they worked.
///
/// With a flood, the workers are started once more after it: the
/// flooder's quarantine reopens the results it had recorded, perhaps after
/// the workers had found the run done, and the run is to end exactly.
pub async fn drive(load: Load, mut progress: impl FnMut(LoadProgress)) -> Result<Driven, SimulationError> {
    let channels = (0..load.connections.max(1)).map(|_| connect(&load.address)).collect::<Result<Vec<_>, _>>()?;
    let recorded = Arc::new(AtomicU64::new(0));
    let flooder = match &load.flood {
        Some(flood) => {
            let client = WorkerServiceClient::with_interceptor(connect(&load.address)?, Bearer::new(&flood.flooder)?);
            let stale = flood::lease_and_report(flood, &client, load.census, load.run_id).await?;
            Some((flood.clone(), client, stale))
        }
        None => None,
    };
    let started = Instant::now();
    let flooding =
        flooder.map(|(flood, client, stale)| tokio::spawn(flood::run(flood, client, stale, recorded.clone(), started)));
    let mut calls = Calls::default();
    let mut workers = start_workers(&load, &channels, &recorded)?;
    let mut shown = Instant::now();
    loop {
        tokio::select! {
            joined = workers.join_next() => match joined {
                Some(worker) => calls.add(worker.map_err(SimulationError::Task)??),
                None => break,
            },
            _ = tokio::time::sleep(Duration::from_secs(1)) => {
                if shown.elapsed() >= Duration::from_secs(5) {
                    shown = Instant::now();
                    progress(LoadProgress {
                        recorded: recorded.load(Ordering::Relaxed),
                        seconds: started.elapsed().as_secs_f64(),
                        working: workers.len(),
                    });
                }
            }
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    let Some(flooding) = flooding else { return Ok(Driven { calls, seconds, flood: None }) };
    let flood = flooding.await.map_err(SimulationError::Task)??;
    let mut again = start_workers(&load, &channels, &recorded)?;
    while let Some(worker) = again.join_next().await {
        calls.add(worker.map_err(SimulationError::Task)??);
    }
    Ok(Driven { calls, seconds, flood: Some(flood) })
}

fn connect(address: &str) -> Result<Channel, SimulationError> {
    Endpoint::from_shared(address.to_string())
        .map(|endpoint| endpoint.tcp_nodelay(true).connect_timeout(Duration::from_secs(20)).connect_lazy())
        .map_err(|_| SimulationError::Address { address: address.to_string() })
}

/// Starts a simulated worker for each of `load`'s credentials, on `channels` in turn.
fn start_workers(
    load: &Load,
    channels: &[Channel],
    recorded: &Arc<AtomicU64>,
) -> Result<tokio::task::JoinSet<Result<Calls, SimulationError>>, SimulationError> {
    let mut workers = tokio::task::JoinSet::new();
    for (i, credential) in load.workers.iter().enumerate() {
        let client =
            WorkerServiceClient::with_interceptor(channels[i % channels.len()].clone(), Bearer::new(credential)?);
        let worker = SimulatedWorker {
            client,
            name: credential.name.clone(),
            run_id: load.run_id,
            batch: load.batch,
            count_ms: load.count_ms,
            heartbeats: load.heartbeats,
            counter: load.census.job_counter(),
            version: load.census.counter_version(),
            recorded: recorded.clone(),
            retry: Retry::default(),
        };
        workers.spawn(worker.work());
    }
    Ok(workers)
}

/// Presents one simulated worker's token on a connection others share.
#[derive(Clone)]
struct Bearer(MetadataValue<Ascii>);

impl Bearer {
    fn new(credential: &Credential) -> Result<Bearer, SimulationError> {
        Ok(Bearer(format!("Bearer {}", credential.token).parse().map_err(|_| SimulationError::Token)?))
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
    /// The pause (before jitter) after a failed `call` of `worker`, counted
    /// in `calls`: a refusal of the credential ends the simulation (nothing
    /// would change by retrying).
    fn next_pause(
        &mut self,
        calls: &mut Calls,
        worker: &str,
        call: Call,
        status: &tonic::Status,
    ) -> Result<Duration, SimulationError> {
        if matches!(status.code(), tonic::Code::Unauthenticated | tonic::Code::PermissionDenied) {
            return Err(SimulationError::Refused { worker: worker.to_string(), message: status.message().to_string() });
        }
        Ok(match census_proto::retry::pushback(status) {
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
        })
    }

    /// Pauses after a failed `call` of `worker` ([`Retry::next_pause`],
    /// jittered by up to a half).
    async fn pause(
        &mut self,
        calls: &mut Calls,
        worker: &str,
        call: Call,
        status: tonic::Status,
    ) -> Result<(), SimulationError> {
        let pause = self.next_pause(calls, worker, call, &status)?;
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
    ) -> Result<T, SimulationError>
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
pub enum Call {
    Lease = 0,
    Heartbeat = 1,
    Complete = 2,
}

impl Call {
    /// Its name in the summary.
    pub fn name(self) -> &'static str {
        match self {
            Call::Lease => "lease",
            Call::Heartbeat => "heartbeat",
            Call::Complete => "complete",
        }
    }
}

/// What the workers' calls took and what came of them.
#[derive(Debug, Default)]
pub struct Calls {
    /// Each call's wait, from its first try to its answer, by [`Call`].
    waits: [Vec<f32>; 3],
    /// The answered try's own time, by [`Call`].
    answered: [Vec<f32>; 3],
    pub recorded: u64,
    pub already_done: u64,
    pub lease_lost: u64,
    pub refused: u64,
    /// Calls that failed (unavailable, deadline) and were tried again.
    pub failed: u64,
    /// Tries the coordinator refused as busy, with a retry hint.
    pub refused_busy: u64,
    /// What the last failed call said, for the summary.
    pub last_failure: Option<String>,
    /// Leases that returned no job while other workers finished theirs.
    pub empty_leases: u64,
    /// Leases that returned jobs.
    pub batches: u64,
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

    /// The waits of `call` (nearest rank).
    pub fn latency(&self, call: Call) -> Latency {
        let waits = Ranks::of(self.waits[call as usize].clone());
        let answered = Ranks::of(self.answered[call as usize].clone());
        Latency {
            calls: waits.0.len(),
            p50_ms: waits.rank(0.50),
            p99_ms: waits.rank(0.99),
            max_ms: waits.rank(1.0),
            answered_p50_ms: answered.rank(0.50),
            answered_p99_ms: answered.rank(0.99),
        }
    }
}

/// How long one kind of call waited, from its first try to its answer,
/// and how long its answered try alone took, in ms (to a microsecond).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Latency {
    pub calls: usize,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    pub answered_p50_ms: f64,
    pub answered_p99_ms: f64,
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
        measure::round3(f64::from(self.0[index]))
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

/// A number in [0, 1) that differs from call to call (for jitter, not secrets).
fn rand_fraction() -> f32 {
    use std::hash::{BuildHasher, Hasher};
    let random = std::collections::hash_map::RandomState::new().build_hasher().finish();
    (random % 1000) as f32 / 1000.0
}

impl SimulatedWorker {
    async fn work(mut self) -> Result<Calls, SimulationError> {
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
            calls.add(self.hold(leased.jobs, ttl).await?);
        }
    }

    /// Holds a leased batch: heartbeats it as `heartbeats` says while its
    /// counts are made up and reported.
    async fn hold(&self, jobs: Vec<Job>, ttl: Duration) -> Result<Calls, SimulationError> {
        let mut calls = Calls::default();
        let tokens: Vec<String> = jobs.iter().map(|job| job.token.clone()).collect();
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
                return std::future::pending::<Result<Calls, SimulationError>>().await;
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
        let reporting = self.count_and_report(jobs, &lost);
        let reported = tokio::select! {
            reported = reporting => reported,
            failed = beating => failed,
        };
        calls.add(reported?);
        calls.add(beats.into_inner().expect("never poisoned"));
        Ok(calls)
    }

    /// Heartbeats `tokens` in one call until answered; the leases lost.
    async fn heartbeat(
        &self,
        retry: &mut Retry,
        calls: &mut Calls,
        tokens: &[String],
    ) -> Result<Vec<String>, SimulationError> {
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
    async fn count_and_report(&self, jobs: Vec<Job>, lost: &Mutex<HashSet<String>>) -> Result<Calls, SimulationError> {
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use census_coordinator::CoordinatorConfig;
    use census_math::census::Census;

    use super::flood::Flood;
    use super::{Batch, Call, Calls, Heartbeats, Load, Ranks, Retry, SimulationError, drive};
    use crate::{Identities, LocalCluster};

    /// Simulated workers do every job of a synthetic run once, through the
    /// real coordinator, to the run's exact answer.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn simulated_workers_do_every_job_once() {
        let dir = tempfile::tempdir().unwrap();
        let location = census_store::DatabaseLocation::Sqlite(dir.path().join("simulate.db"));
        let store = census_store::open(&location, census_store::StoreConfig::default(), None).await.unwrap();
        let cluster =
            LocalCluster::start(store, CoordinatorConfig::default(), Identities::named("sim", 4)).await.unwrap();
        let census: Census = "synthetic jobs=250 salt=3".parse().unwrap();
        let run = cluster.coordinator().create_run(census, 1).await.unwrap();
        for (batch, heartbeats) in [(Batch::Fixed(7), Heartbeats::EveryBatch), (Batch::Rate, Heartbeats::Worker)] {
            let load = Load {
                address: cluster.address().to_string(),
                run_id: run.run_id,
                workers: cluster.workers().to_vec(),
                connections: 2,
                batch,
                count_ms: 0,
                heartbeats,
                census,
                flood: None,
            };
            let super::Driven { calls, seconds, flood } = drive(load, |_| {}).await.unwrap();
            assert!(flood.is_none());
            assert!(seconds > 0.0);
            if batch == Batch::Fixed(7) {
                assert_eq!(calls.recorded, 250, "{calls:?}");
                assert!(calls.batches >= 250 / 7, "{calls:?}");
                assert!(calls.latency(Call::Heartbeat).calls as u64 >= calls.batches, "{calls:?}");
            } else {
                assert_eq!(calls.recorded, 0, "the run is done: {calls:?}");
            }
            assert_eq!(calls.latency(Call::Lease).calls as u64, calls.batches + calls.empty_leases + 4);
        }
        let total = cluster.coordinator().store().total(run.run_id).await.unwrap();
        assert!(total.is_final);
        assert_eq!(total.answer, Some(census_math::synthetic::expected_answer(250, 3)));
        cluster.stop().await;
    }

    /// A flood of stale reports through the real coordinator: its sender
    /// is refused unread, then quarantined, and the honest workers still
    /// end the run with its exact answer (the flooder's own results,
    /// reopened by its quarantine, done again). Nothing about time or
    /// memory is asserted: that is the benchmark's (BENCHMARKS.md).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_stale_flood_ends_with_its_sender_quarantined_and_the_exact_answer() {
        let dir = tempfile::tempdir().unwrap();
        let location = census_store::DatabaseLocation::Sqlite(dir.path().join("flood.db"));
        // A small budget of reports of leases not held, so that small calls exceed it.
        let config = census_store::StoreConfig { max_leases_per_worker: 50, ..census_store::StoreConfig::default() };
        let store = census_store::open(&location, config, None).await.unwrap();
        let cluster =
            LocalCluster::start(store, CoordinatorConfig::default(), Identities::named("sim", 3)).await.unwrap();
        let census: Census = "synthetic jobs=400 salt=5".parse().unwrap();
        let run = cluster.coordinator().create_run(census, 1).await.unwrap();
        let (honest, flooder) = cluster.workers().split_at(2);
        let flood = Flood {
            flooder: flooder[0].clone(),
            calls: 12,
            results_per_call: 100,
            concurrency: 1,
            deadline: Duration::from_secs(600),
            begins_after: Duration::ZERO,
            settle: Duration::ZERO,
        };
        let load = Load {
            address: cluster.address().to_string(),
            run_id: run.run_id,
            workers: honest.to_vec(),
            connections: 2,
            batch: Batch::Fixed(5),
            count_ms: 0,
            heartbeats: Heartbeats::Worker,
            census,
            flood: Some(flood),
        };
        let driven = drive(load, |_| {}).await.unwrap();
        let calls = driven.flood.expect("a flood was asked for").calls;
        let (refused, quarantined) = (calls.first_refused.unwrap(), calls.first_quarantined.unwrap());
        assert!(refused < quarantined, "{calls:?}");
        assert_eq!(calls.answered + calls.refused + calls.quarantined, 12, "{calls:?}");
        assert_eq!(calls.recorded, 0, "stale reports are never recorded: {calls:?}");
        assert_eq!(driven.calls.refused, 0, "the honest workers are never refused: {:?}", driven.calls);
        let total = cluster.coordinator().store().total(run.run_id).await.unwrap();
        assert!(total.is_final);
        assert_eq!(total.answer, Some(census_math::synthetic::expected_answer(400, 5)));
        cluster.stop().await;
    }

    #[test]
    fn batches_are_a_number_or_rate() {
        assert_eq!("rate".parse(), Ok(Batch::Rate));
        assert_eq!("64".parse(), Ok(Batch::Fixed(64)));
        for bad in ["0", "2049", "fast", ""] {
            assert!(bad.parse::<Batch>().unwrap_err().contains("neither `rate` nor"), "{bad}");
        }
    }

    /// Nearest rank: p50 of 1..=100 ms is 50, p99 is 99, the max 100; no
    /// calls are 0.
    #[test]
    fn latencies_are_nearest_ranks() {
        let ranks = Ranks::of((1..=100).rev().map(|ms| ms as f32).collect());
        assert_eq!((ranks.rank(0.5), ranks.rank(0.99), ranks.rank(1.0)), (50.0, 99.0, 100.0));
        assert_eq!(Ranks::of(vec![]).rank(0.5), 0.0);
        assert_eq!(Calls::default().latency(Call::Complete).calls, 0);
    }

    /// A failure without a hint doubles the pause up to 10 s, an answer
    /// starts it again, a hint is taken as it is, and a refused credential
    /// ends the simulation.
    #[test]
    fn retries_back_off_take_hints_and_stop_on_refusal() {
        let (mut retry, mut calls) = (Retry::default(), Calls::default());
        let unavailable = tonic::Status::unavailable("down");
        let pauses: Vec<u64> = (0..8)
            .map(|_| retry.next_pause(&mut calls, "w", Call::Lease, &unavailable).unwrap().as_millis() as u64)
            .collect();
        assert_eq!(pauses, [200, 400, 800, 1600, 3200, 6400, 10_000, 10_000]);
        assert_eq!((calls.failed, calls.last_failure.as_deref()), (8, Some("lease: down")));
        retry.answered();
        assert_eq!(retry.next_pause(&mut calls, "w", Call::Lease, &unavailable).unwrap(), Duration::from_millis(200));
        let mut busy = tonic::Status::unavailable("busy");
        busy.metadata_mut().insert("grpc-retry-pushback-ms", "750".parse().unwrap());
        assert_eq!(retry.next_pause(&mut calls, "w", Call::Complete, &busy).unwrap(), Duration::from_millis(750));
        assert_eq!(calls.refused_busy, 1);
        let refused = retry.next_pause(&mut calls, "w", Call::Lease, &tonic::Status::permission_denied("revoked"));
        assert!(matches!(refused, Err(SimulationError::Refused { .. })));
    }
}
