//! The census's stateless worker.
//!
//! A worker leases a batch of jobs from a coordinator, counts them on a pool
//! of blocking threads while heartbeating their leases, reports the counts,
//! and leases more. It keeps nothing: a job whose lease is lost is dropped,
//! and a killed worker's leases expire and are handed out again.
//!
//! It is *not* a server and never touches the database; all it needs is the
//! coordinator's address, and, for a `layers` census, the directory of
//! layer files that every worker of the run shares
//! ([`WorkerConfig::layers_dir`]): such a job is counted by
//! `census_layers::Plane` from the accepted counts of the stage before,
//! which the coordinator gives (`AcceptedCounts`).
//!
//! [`mod@bench`] counts in this process with the same counters, with no
//! coordinator and no store, for `census bench`.

pub mod bench;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use census_layers::{Accepted, Plane, PlaneError};
use census_math::census::{Census, CensusError, JobCounter};
use census_proto::client::{AuthChannel, ClientConfig};
use census_proto::v1::job_outcome::Status as OutcomeStatus;
use census_proto::v1::worker_service_client::WorkerServiceClient;
use census_proto::v1::{
    AcceptedCountsRequest, CompleteJobsRequest, FailJobRequest, HeartbeatRequest, Job, JobResult, LeaseJobsRequest,
};
use tokio::sync::watch;

/// How a worker runs.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// The coordinator's URL (e.g. `http://127.0.0.1:50051`), the worker's
    /// token and TLS settings. The token's name is the worker's identity.
    pub coordinator: ClientConfig,
    /// A label for logs; the coordinator goes by the token's name instead.
    pub worker_id: String,
    /// Counting threads.
    pub threads: usize,
    /// Jobs per lease; `None` sizes each batch from the last one's rate
    /// (`batch_for_rate`): about a second of counting on all the threads,
    /// or the longer time the coordinator asks for.
    pub batch: Option<u32>,
    /// Exit once no run has jobs left, instead of waiting for new runs.
    pub exit_when_done: bool,
    /// Only this run's jobs.
    pub run: Option<i64>,
    /// Lease at most this many jobs in all, then exit once they are
    /// reported (a batch scheduler's time slot; a test's fair share).
    pub max_jobs: Option<u64>,
    /// Where a `layers` census's files live: the same directory (a shared
    /// volume, NFS) for every worker of the run, since a job reads the
    /// files that other workers' jobs of the stage before wrote. Without
    /// it, such a job fails with the reason.
    pub layers_dir: Option<std::path::PathBuf>,
}

/// Asks a worker to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Stop {
    /// Keep working.
    No,
    /// Lease nothing more; stop counting (a job being counted stops well
    /// within a second, its lease left to expire so that it is leased
    /// again), and report what is counted.
    Drain,
    /// Stop at once; leases in hand expire and are counted elsewhere.
    Now,
}

/// What a worker did, when it returns.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WorkerReport {
    pub jobs_counted: u64,
    pub jobs_recorded: u64,
    pub leases_lost: u64,
}

impl WorkerReport {
    fn add(&mut self, reported: WorkerReport) {
        self.jobs_counted += reported.jobs_counted;
        self.jobs_recorded += reported.jobs_recorded;
        self.leases_lost += reported.leases_lost;
    }
}

/// A worker's id when none is given: host name and process id.
pub fn default_worker_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "worker".into());
    format!("{host}-{}", std::process::id())
}

/// The largest batch a worker asks for, below the protocol's limit: a
/// worker killed mid-batch loses at most this many jobs' work, and one
/// report stays a few hundred kilobytes.
const LARGEST_BATCH: u32 = 2048;
const _: () = assert!(LARGEST_BATCH <= census_proto::limits::MAX_BATCH);
/// How long a batch should take to count, unless the coordinator asks for
/// longer: long enough that round trips are a small part of a job's cost,
/// short enough that a worker never holds a backlog while another is idle
/// (the run's last batches end together) and that a batch ends well within
/// its lease. The protocol's, so that the coordinator's pace starts there.
const BATCH_TARGET: Duration = census_proto::limits::SHORTEST_BATCH_TIME;

/// The next batch's size from the last one's measured rate (`jobs` counted
/// in `elapsed` on `threads` threads): what that rate counts in the time
/// the coordinator `asked` for (its pace: longer while a large fleet keeps
/// it busy; zero for a second), or in a third of the lease TTL if
/// that is shorter, at least one job a thread (a job of an hour is leased
/// one at a time) and at most `LARGEST_BATCH` (a job of microseconds).
/// Fair with any job length: every worker's batch lasts about the same
/// time. (A cap on its growth would spread a census whose first jobs are
/// far faster than the rest, but costs the 9x9 run a fifth of its time in
/// round trips: BENCHMARKS.md.)
///
/// ```
/// use std::time::Duration;
/// use census_worker::batch_for_rate;
/// let ttl = Duration::from_secs(30);
/// // 100 jobs a second on 2 threads: a second's worth...
/// assert_eq!(batch_for_rate(50, Duration::from_millis(500), 2, ttl, Duration::ZERO), 100);
/// // ...or four seconds' worth when the coordinator asks for batches of 4 s.
/// assert_eq!(batch_for_rate(50, Duration::from_millis(500), 2, ttl, Duration::from_secs(4)), 400);
/// ```
pub fn batch_for_rate(jobs: usize, elapsed: Duration, threads: usize, lease_ttl: Duration, asked: Duration) -> u32 {
    let smallest = threads.clamp(1, LARGEST_BATCH as usize) as f64;
    // A batch counted faster than the clock's resolution is as fast as it gets.
    let jobs_per_second = jobs as f64 / elapsed.as_secs_f64().max(1e-6);
    let wanted = if asked.is_zero() { BATCH_TARGET } else { asked };
    let target = wanted.min(lease_ttl / 3).as_secs_f64();
    (jobs_per_second * target).clamp(smallest, f64::from(LARGEST_BATCH)) as u32
}

/// The least batch for a census whose threads count `together` jobs at
/// once ([`Census::jobs_counted_together`]): that many a thread, however
/// long each takes, within the protocol's largest batch (above
/// `LARGEST_BATCH`, which bounds batches of short jobs: a 4x3 worker with
/// 16 threads asks for 4,096 gangsters, 256 a thread).
pub fn batch_counted_together(together: u32, threads: usize) -> u32 {
    (together as usize).saturating_mul(threads).clamp(1, census_proto::limits::MAX_BATCH as usize) as u32
}

const BACKOFF_START: Duration = Duration::from_millis(200);
const BACKOFF_CAP: Duration = Duration::from_secs(10);
/// How long a draining worker keeps trying to report the counts in hand.
const DRAIN_REPORT_DEADLINE: Duration = Duration::from_secs(30);
/// The deadline of a call that does no counting (lease, heartbeat, fail): a
/// coordinator that does not answer in this time (hung, stopped, behind a
/// dead link) is treated as unreachable, so nothing waits on it forever.
pub const CALL_DEADLINE: Duration = Duration::from_secs(20);
/// A report's deadline: the coordinator counts each result again before it
/// answers, which takes about as long as counting did; this much on top.
const REPORT_DEADLINE_BASE: Duration = Duration::from_secs(30);

/// `base` plus up to half of it again, at random, so that a fleet that lost
/// its coordinator does not come back in lockstep.
fn jittered(base: Duration) -> Duration {
    use std::hash::{BuildHasher, Hasher};
    let random = std::collections::hash_map::RandomState::new().build_hasher().finish();
    base + base.mul_f64((random % 1000) as f64 / 2000.0)
}

/// The pause before a failed `call` is tried again, said in the log: the
/// coordinator's retry hint when it gives one (it is busy, which is what
/// the hint is for, not a fault: [`census_proto::retry`]), else `backoff`,
/// which then doubles up to `BACKOFF_CAP`; jittered either way.
fn pause_after(call: &'static str, status: &tonic::Status, backoff: &mut Duration) -> Duration {
    metrics::counter!("census_worker_retries_total", "call" => call).increment(1);
    let error = status.message();
    match census_proto::retry::pushback(status) {
        Some(hint) => {
            let retry_in = jittered(hint);
            tracing::debug!(call, error, ?retry_in, "the coordinator is busy; trying again when it says");
            retry_in
        }
        None => {
            let retry_in = jittered(*backoff);
            *backoff = (*backoff * 2).min(BACKOFF_CAP);
            tracing::warn!(call, error, ?retry_in, "the call failed; retrying");
            retry_in
        }
    }
}

/// Refusals that retrying cannot fix: the credential is missing, unknown,
/// revoked, of the wrong role, or quarantined.
fn is_refusal(status: &tonic::Status) -> bool {
    matches!(status.code(), tonic::Code::Unauthenticated | tonic::Code::PermissionDenied)
}

/// Failures of a call that trying again may mend: the coordinator is
/// away, busy, or did not answer in time.
fn is_transient(status: &tonic::Status) -> bool {
    matches!(
        status.code(),
        tonic::Code::Unavailable | tonic::Code::Unknown | tonic::Code::DeadlineExceeded | tonic::Code::Cancelled
    )
}

/// Why a worker stopped before it was told to. Everything else (an
/// unreachable coordinator, a job it cannot count) it retries or reports.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// The worker's own settings cannot work (no threads, a bad URL or TLS file).
    #[error("{0}")]
    Config(String),
    /// The coordinator refused the credential: unknown, revoked, quarantined
    /// or of the wrong role. Retrying cannot help.
    #[error("the coordinator refuses this worker: {0}")]
    Refused(String),
    /// A counting thread panicked: a bug, not bad input.
    #[error("a counting thread failed")]
    CountingThread(#[source] tokio::task::JoinError),
}

/// Runs a worker until it is told to stop, or (with `exit_when_done`) until
/// no run has work left.
pub async fn run_worker(config: WorkerConfig, stop: watch::Receiver<Stop>) -> Result<WorkerReport, WorkerError> {
    if config.threads == 0 {
        return Err(WorkerError::Config("a worker needs at least one thread".into()));
    }
    let bad_settings = |e: census_proto::client::ConnectError| WorkerError::Config(e.to_string());
    // An http:// URL of a TLS port is refused once, here, instead of every
    // call failing with a broken pipe and being retried forever.
    census_proto::client::check_scheme(&config.coordinator).await.map_err(bad_settings)?;
    let channel = census_proto::client::connect_lazy(&config.coordinator).map_err(bad_settings)?;
    let client = WorkerServiceClient::new(channel).max_decoding_message_size(64 << 20);
    // Any stop cancels the counts under way: a job of an hour stops within
    // a second, and its lease, no longer heartbeated, expires and the job is
    // leased again (it is not failed).
    let cancel = Arc::new(AtomicBool::new(false));
    let mut watching = stop.clone();
    let flag = cancel.clone();
    let watcher = tokio::spawn(async move {
        if watching.wait_for(|s| *s != Stop::No).await.is_ok() {
            flag.store(true, Ordering::Relaxed);
        }
    });
    let leases = Arc::new(HeldLeases::default());
    let heartbeat = tokio::spawn(heartbeat(client.clone(), config.worker_id.clone(), leases.clone()));
    let mut worker = Worker {
        config,
        client,
        stop,
        cancel,
        leases,
        counters: HashMap::new(),
        report: WorkerReport::default(),
        leased: 0,
        together: 1,
    };
    let worked = worker.work().await;
    watcher.abort();
    heartbeat.abort();
    worked?;
    Ok(worker.report)
}

/// `request` with a deadline.
fn deadline<T>(message: T, limit: Duration) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request.set_timeout(limit);
    request
}

struct Worker {
    config: WorkerConfig,
    client: WorkerServiceClient<AuthChannel>,
    stop: watch::Receiver<Stop>,
    /// Set when the worker is told to stop: the counts under way give up.
    cancel: Arc<AtomicBool>,
    /// The leases held, which one task heartbeats.
    leases: Arc<HeldLeases>,
    /// One counter per census met, with its counter version.
    counters: HashMap<String, Arc<CensusCounter>>,
    report: WorkerReport,
    /// Jobs leased so far, against `max_jobs`.
    leased: u64,
    /// Jobs a thread counts together in the last batch's census
    /// ([`Census::jobs_counted_together`]): the next batch asks for at
    /// least that many a thread.
    together: u32,
}

impl Worker {
    fn stopping(&self) -> Stop {
        *self.stop.borrow()
    }

    /// Sleeps, unless told to stop harder than now meanwhile. Returns the
    /// stop level. (Waiting for "any stop" would return at once while
    /// draining, and a retry loop would spin.)
    async fn pause(&mut self, duration: Duration) -> Stop {
        pause(&self.stop, duration).await
    }

    async fn work(&mut self) -> Result<(), WorkerError> {
        let mut batch = self.config.batch.unwrap_or(self.config.threads as u32).max(1);
        let mut reporting: Option<InFlight> = None;
        let mut backoff = BACKOFF_START;
        let mut idle_polls = 0u32;
        while self.stopping() == Stop::No {
            let wanted = match self.config.max_jobs {
                Some(max) if self.leased >= max => {
                    tracing::info!(jobs = self.leased, "leased the jobs it was allowed (--max-jobs); the worker exits");
                    break;
                }
                Some(max) => u64::from(batch).min(max - self.leased) as u32,
                None => batch,
            };
            let request = LeaseJobsRequest {
                worker_id: self.config.worker_id.clone(),
                max_jobs: wanted,
                run_id: self.config.run.unwrap_or(0),
            };
            let response = match self.client.lease_jobs(deadline(request, CALL_DEADLINE)).await {
                Ok(response) => {
                    backoff = BACKOFF_START;
                    response.into_inner()
                }
                Err(status) if is_refusal(&status) => {
                    return Err(WorkerError::Refused(status.message().to_string()));
                }
                Err(status) => {
                    let retry_in = pause_after("lease", &status, &mut backoff);
                    self.pause(retry_in).await;
                    continue;
                }
            };
            if response.jobs.is_empty() {
                // Nothing new: let the last batch's report finish now, so
                // its leases stop being heartbeated (an idle worker would
                // otherwise hear "lost" about jobs long recorded).
                if let Some(previous) = reporting.take() {
                    self.finish_report(previous).await;
                }
                if response.idle && self.config.exit_when_done {
                    tracing::info!("no run has work left; the worker exits");
                    break;
                }
                // A stop that came while the lease was on its way would
                // not end the pause (it waits for a harder stop than now).
                if self.stopping() != Stop::No {
                    break;
                }
                idle_polls += 1;
                self.pause(Duration::from_millis(200 * u64::from(idle_polls.min(10)))).await;
                continue;
            }
            idle_polls = 0;
            self.leased += response.jobs.len() as u64;
            let ttl = Duration::from_secs(u64::from(response.lease_ttl_seconds.max(1)));
            let asked = Duration::from_millis(u64::from(response.batch_millis));
            let started = Instant::now();
            let jobs = response.jobs.len();
            let counted = self.count_batch(response.jobs, ttl).await?;
            let Some((results, tokens)) = counted else { break };
            if self.config.batch.is_none() {
                batch = batch_for_rate(jobs, started.elapsed(), self.config.threads, ttl, asked)
                    .max(batch_counted_together(self.together, self.config.threads));
            }
            // The coordinator checks results by counting them again, which
            // for slow jobs takes as long as counting did: the report goes
            // on (its leases heartbeating until it is answered) while the
            // next batch is counted, one report at a time.
            if let Some(previous) = reporting.take() {
                self.finish_report(previous).await;
            }
            // The batch's leases are heartbeated until its report is answered.
            let (reporter, leases) = (self.reporter(), self.leases.clone());
            reporting = Some(tokio::spawn(async move {
                let tally = reporter.report(results).await;
                leases.release(&tokens);
                tally
            }));
        }
        if let Some(previous) = reporting.take() {
            self.finish_report(previous).await;
        }
        Ok(())
    }

    /// Waits for a batch's report (which releases its leases).
    async fn finish_report(&mut self, report: InFlight) {
        match report.await {
            Ok(tally) => self.report.add(tally),
            Err(error) => tracing::error!(%error, "reporting a batch failed; its leases will expire"),
        }
    }

    fn reporter(&self) -> Reporter {
        Reporter { client: self.client.clone(), worker_id: self.config.worker_id.clone(), stop: self.stop.clone() }
    }

    /// The counter of a census, built the first time a job of it comes.
    /// A census this worker does not know is the job's failure reason.
    fn counter(&mut self, census: &str) -> Result<Arc<CensusCounter>, String> {
        if let Some(counter) = self.counters.get(census) {
            return Ok(counter.clone());
        }
        let parsed: Census = census.parse().map_err(|e| format!("this worker cannot count the census: {e}"))?;
        let counting = if parsed.needs_shared_files() {
            let dir = self.config.layers_dir.as_deref().ok_or_else(|| {
                format!(
                    "{parsed} reads and writes layer files in a directory that the run's workers share, \
                     and this worker has none (census worker --layers-dir)"
                )
            })?;
            Counting::Layers(Plane::new(parsed, dir).map_err(|e| e.to_string())?)
        } else {
            Counting::Keys(parsed.job_counter())
        };
        let counter = Arc::new(CensusCounter {
            census: parsed,
            counting,
            version: parsed.counter_version(),
            together: parsed.jobs_counted_together(),
        });
        self.counters.insert(census.to_string(), counter.clone());
        Ok(counter)
    }

    /// Counts a batch on `threads` blocking threads, its leases held (and
    /// heartbeated) meanwhile and until the caller releases the tokens it
    /// returns with the results. `None` when told to stop at once.
    async fn count_batch(
        &mut self,
        jobs: Vec<Job>,
        ttl: Duration,
    ) -> Result<Option<(Vec<JobResult>, Vec<String>)>, WorkerError> {
        let mut known = Vec::with_capacity(jobs.len());
        self.together = 1;
        for job in jobs {
            match self.counter(&job.census) {
                Ok(counter) => {
                    self.together = self.together.max(counter.together);
                    known.push((job, counter));
                }
                Err(reason) => self.fail(&job, &reason).await,
            }
        }
        let tokens: Vec<String> = known.iter().map(|(job, _)| job.token.clone()).collect();
        self.leases.hold(&tokens, ttl);
        // A layer job reads what the stage before accepted, asked once a
        // batch for each run and stage.
        let mut fetched = HashMap::new();
        let mut runnable = Vec::with_capacity(known.len());
        for (job, counter) in known {
            match self.inputs_of(&job, &counter, &mut fetched).await {
                Ok(Some(accepted)) => runnable.push(Task { job, counter, accepted }),
                // Told to stop: the job is left to its lease.
                Ok(None) => self.leases.release(std::slice::from_ref(&job.token)),
                Err(reason) => {
                    self.leases.release(std::slice::from_ref(&job.token));
                    self.fail(&job, &reason).await;
                }
            }
        }

        let threads = self.config.threads.min(runnable.len()).max(1);
        // Each thread takes a run of neighbouring jobs, which some censuses
        // count together (`count_chunk`).
        let mut chunks: Vec<Vec<Task>> = (0..threads).map(|_| Vec::new()).collect();
        let total = runnable.len();
        for (i, task) in runnable.into_iter().enumerate() {
            chunks[i * threads / total].push(task);
        }
        let tasks: Vec<_> = chunks
            .into_iter()
            .map(|chunk| {
                let (leases, cancel) = (self.leases.clone(), self.cancel.clone());
                tokio::task::spawn_blocking(move || count_chunk(chunk, &leases.lost, &cancel))
            })
            .collect();
        let mut results = Vec::new();
        let mut failures = Vec::new();
        let mut stop = self.stop.clone();
        for task in tasks {
            tokio::select! {
                joined = task => {
                    let (counted, failed) = joined.map_err(WorkerError::CountingThread)?;
                    results.extend(counted);
                    failures.extend(failed);
                }
                _ = stop.wait_for(|s| *s == Stop::Now) => {
                    self.leases.release(&tokens);
                    tracing::warn!("stopping at once; the leases in hand will expire and be counted elsewhere");
                    return Ok(None);
                }
            }
        }
        for (job, reason) in failures {
            // A job it gave up is no lease of its own to keep: the heartbeat
            // stops sending it (the coordinator would answer "lost").
            self.leases.release(std::slice::from_ref(&job.token));
            self.fail(&job, &reason).await;
        }
        if self.cancel.load(Ordering::Relaxed) {
            tracing::info!(
                counted = results.len(),
                "stopping: the jobs not counted yet are left to their leases, which expire and are leased again"
            );
        }
        self.report.jobs_counted += results.len() as u64;
        let lost = self.leases.lost.lock().expect("never poisoned");
        results.retain(|r| !lost.contains(&r.token));
        drop(lost);
        Ok(Some((results, tokens)))
    }

    /// What `job` reads besides its key: for a layer job of stage s > 0 the
    /// accepted counts of the run's stage s - 1 (kept in `fetched` for the
    /// batch's other jobs), for any other job nothing. `Ok(None)` when told
    /// to stop meanwhile; an error is the job's failure reason.
    async fn inputs_of(
        &mut self,
        job: &Job,
        counter: &CensusCounter,
        fetched: &mut HashMap<(i64, u32), Arc<StageInputs>>,
    ) -> Result<Option<Arc<StageInputs>>, String> {
        if !matches!(counter.counting, Counting::Layers(_)) {
            return Ok(Some(Arc::default()));
        }
        let stage = counter.census.stage(&job.key).map_err(|e| e.to_string())?;
        let Some(before) = stage.checked_sub(1) else { return Ok(Some(Arc::default())) };
        if let Some(accepted) = fetched.get(&(job.run_id, before)) {
            return Ok(Some(accepted.clone()));
        }
        let Some(accepted) = self.accepted_counts(job.run_id, before).await? else { return Ok(None) };
        let accepted = Arc::new(accepted);
        fetched.insert((job.run_id, before), accepted.clone());
        Ok(Some(accepted))
    }

    /// Every accepted count of a run's stage, a page at a time, asked again
    /// while the coordinator is away or busy; `Ok(None)` once told to stop.
    async fn accepted_counts(&mut self, run: i64, stage: u32) -> Result<Option<StageInputs>, String> {
        let mut accepted = StageInputs::default();
        let mut after = 0;
        let mut backoff = BACKOFF_START;
        while self.stopping() == Stop::No {
            let request = AcceptedCountsRequest { run_id: run, stage, after_job_id: after };
            match self.client.accepted_counts(deadline(request, CALL_DEADLINE)).await {
                Ok(response) => {
                    backoff = BACKOFF_START;
                    let page = response.into_inner();
                    for entry in &page.counts {
                        let count = entry.count.parse::<u128>().map_err(|_| {
                            format!("the accepted count of {} is not a count: {:?}", entry.key, entry.count)
                        })?;
                        accepted.counts.insert(entry.key.clone(), count);
                        accepted.ids.insert(entry.key.clone(), entry.job_id);
                    }
                    match page.counts.last() {
                        Some(last) if page.more => after = last.job_id,
                        _ => return Ok(Some(accepted)),
                    }
                }
                Err(status) if is_transient(&status) => {
                    let retry_in = pause_after("accepted counts", &status, &mut backoff);
                    self.pause(retry_in).await;
                }
                Err(status) => {
                    return Err(format!("the accepted counts of run {run}'s stage {stage}: {}", status.message()));
                }
            }
        }
        Ok(None)
    }

    async fn fail(&mut self, job: &Job, reason: &str) {
        tracing::error!(job = job.job_id, reason, "cannot count job");
        let request = FailJobRequest {
            worker_id: self.config.worker_id.clone(),
            job_id: job.job_id,
            token: job.token.clone(),
            reason: truncate(reason, census_proto::limits::MAX_REASON_LEN),
        };
        if let Err(status) = self.client.fail_job(deadline(request, CALL_DEADLINE)).await {
            tracing::warn!(job = job.job_id, error = %status.message(), "could not report the failure; the lease will expire");
        }
    }
}

/// The leases a worker holds, heartbeated together by one task
/// ([`heartbeat`]): one call renews them all, sent when the lease renewed
/// longest ago is a third of its TTL old. A batch reported sooner costs no
/// heartbeat, and a worker whose batches overlap (one counted while the
/// last is reported) sends one call for both, not one a batch.
#[derive(Default)]
struct HeldLeases {
    /// Each held lease's token: when it was last renewed (leased or
    /// heartbeated), and its TTL.
    held: Mutex<HashMap<String, (Instant, Duration)>>,
    /// Leases the coordinator said are lost: their jobs are dropped, and
    /// they are said once, not at every beat while a long job goes on.
    lost: Mutex<HashSet<String>>,
    /// Wakes the heartbeat when leases come while it holds none.
    came: tokio::sync::Notify,
}

impl HeldLeases {
    fn hold(&self, tokens: &[String], ttl: Duration) {
        let now = Instant::now();
        self.held.lock().expect("never poisoned").extend(tokens.iter().map(|token| (token.clone(), (now, ttl))));
        self.came.notify_one();
    }

    /// Stops heartbeating `tokens` (reported, given up, or left to expire).
    fn release(&self, tokens: &[String]) {
        let mut held = self.held.lock().expect("never poisoned");
        let mut lost = self.lost.lock().expect("never poisoned");
        for token in tokens {
            held.remove(token);
            lost.remove(token);
        }
    }

    /// When the next heartbeat is due: a third of the TTL (at least 200 ms)
    /// after the lease renewed longest ago; `None` while none is held.
    fn due(&self) -> Option<Instant> {
        let held = self.held.lock().expect("never poisoned");
        held.values().map(|(renewed, ttl)| *renewed + (*ttl / 3).max(Duration::from_millis(200))).min()
    }

    fn tokens(&self) -> Vec<String> {
        self.held.lock().expect("never poisoned").keys().cloned().collect()
    }

    /// The heartbeat sent at `sent` renewed `tokens` but `lost`.
    fn renewed(&self, tokens: &[String], sent: Instant, lost: Vec<String>) {
        let mut held = self.held.lock().expect("never poisoned");
        for token in tokens {
            if let Some((renewed, _)) = held.get_mut(token) {
                *renewed = sent;
            }
        }
        for token in &lost {
            held.remove(token);
        }
        self.lost.lock().expect("never poisoned").extend(lost);
    }
}

/// Heartbeats the worker's `leases`, all in one call, whenever one is due;
/// a call that fails is tried again after the coordinator's retry hint or
/// the worker's backoff. Runs until aborted.
async fn heartbeat(mut client: WorkerServiceClient<AuthChannel>, worker_id: String, leases: Arc<HeldLeases>) {
    let mut backoff = BACKOFF_START;
    loop {
        let Some(due) = leases.due() else {
            leases.came.notified().await;
            continue;
        };
        tokio::time::sleep_until(due.into()).await;
        // Released or renewed meanwhile: wait for the next.
        if leases.due().is_none_or(|due| due > Instant::now()) {
            continue;
        }
        let tokens = leases.tokens();
        let sent = Instant::now();
        let request = HeartbeatRequest { worker_id: worker_id.clone(), tokens: tokens.clone() };
        match client.heartbeat(deadline(request, CALL_DEADLINE)).await {
            Ok(response) => {
                backoff = BACKOFF_START;
                let lost = response.into_inner().cancel_tokens;
                if !lost.is_empty() {
                    tracing::info!(jobs = lost.len(), "leases lost; dropping those jobs");
                }
                leases.renewed(&tokens, sent, lost);
            }
            Err(status) => {
                tokio::time::sleep(pause_after("heartbeat", &status, &mut backoff)).await;
            }
        }
    }
}

/// Sleeps, unless told to stop harder than at the start meanwhile. Returns
/// the stop level. (Waiting for "any stop" would return at once while
/// draining, and a retry loop would spin.)
async fn pause(stop: &watch::Receiver<Stop>, duration: Duration) -> Stop {
    let now = *stop.borrow();
    let mut stop = stop.clone();
    let _ = tokio::time::timeout(duration, stop.wait_for(|s| *s > now)).await;
    *stop.borrow()
}

/// A batch's report under way (its task also releases the batch's leases).
type InFlight = tokio::task::JoinHandle<WorkerReport>;

/// Reports a batch's counts, retrying while the coordinator is away; runs
/// beside the counting of the next batch.
struct Reporter {
    client: WorkerServiceClient<AuthChannel>,
    worker_id: String,
    stop: watch::Receiver<Stop>,
}

impl Reporter {
    /// Reports until the coordinator answers, backing off while it is
    /// unreachable; what became of the results, for the worker's report.
    async fn report(mut self, results: Vec<JobResult>) -> WorkerReport {
        let mut tally = WorkerReport::default();
        if results.is_empty() {
            return tally;
        }
        let mut backoff = BACKOFF_START;
        let mut drain_deadline = None;
        let counting: f64 = results.iter().map(|r| r.elapsed_seconds).sum();
        let limit = REPORT_DEADLINE_BASE + Duration::from_secs_f64(2.0 * counting.min(86_400.0));
        loop {
            if *self.stop.borrow() == Stop::Drain {
                let deadline = *drain_deadline.get_or_insert_with(|| Instant::now() + DRAIN_REPORT_DEADLINE);
                if Instant::now() >= deadline {
                    tracing::error!(
                        jobs = results.len(),
                        "stopping: the coordinator did not take these counts; their leases will expire and be counted again"
                    );
                    return tally;
                }
            }
            let request = CompleteJobsRequest { worker_id: self.worker_id.clone(), results: results.clone() };
            match self.client.complete_jobs(deadline(request, limit)).await {
                Ok(response) => {
                    for outcome in response.into_inner().outcomes {
                        match OutcomeStatus::try_from(outcome.status).unwrap_or(OutcomeStatus::Rejected) {
                            OutcomeStatus::Recorded => tally.jobs_recorded += 1,
                            OutcomeStatus::AlreadyDone => {}
                            OutcomeStatus::LeaseLost => tally.leases_lost += 1,
                            _ => tracing::warn!(job = outcome.job_id, message = %outcome.message, "result not counted"),
                        }
                    }
                    return tally;
                }
                Err(status) if is_transient(&status) => {
                    if pause(&self.stop, pause_after("report", &status, &mut backoff)).await == Stop::Now {
                        return tally;
                    }
                }
                Err(status) => {
                    tracing::error!(error = %status.message(), "results refused");
                    return tally;
                }
            }
        }
    }
}

/// How a census's jobs are counted.
enum Counting {
    /// From the key alone.
    Keys(JobCounter),
    /// A `layers` census's jobs, by the data plane over the shared
    /// directory, from the accepted counts of the stage before.
    Layers(Plane),
}

/// A census's counting, the version its results carry, and how many of
/// its jobs a thread counts together.
struct CensusCounter {
    census: Census,
    counting: Counting,
    version: String,
    together: u32,
}

/// A job to count, with its census's counter and what it reads of the
/// stage before (empty but for a layer job).
struct Task {
    job: Job,
    counter: Arc<CensusCounter>,
    accepted: Arc<StageInputs>,
}

/// What a layer job reads of the stage before: the accepted counts by key,
/// and the jobs' ids, so that a failure that blames an input's files names
/// the job an operator recounts.
#[derive(Default)]
struct StageInputs {
    counts: Accepted,
    ids: HashMap<String, i64>,
}

/// A layer job's failure reason: the error, and if it blames an input's
/// files (missing, or set aside as not matching their digest), the remedy.
fn layer_failure(error: &PlaneError, inputs: &StageInputs) -> String {
    match error.bad_input().and_then(|input| inputs.ids.get(input)) {
        Some(id) => format!("{error} (census recount --job {id})"),
        None => error.to_string(),
    }
}

/// What became of one job's count.
enum Counted {
    Count(u128),
    /// Told to stop: nothing of it is kept.
    Cancelled,
    /// It cannot be counted, for this reason.
    Failed(String),
}

impl CensusCounter {
    /// Counts a group of this census's jobs, together where the census
    /// counts neighbours together ([`JobCounter::count_many`]).
    fn count(&self, group: &[Task], cancel: &AtomicBool) -> Vec<Counted> {
        match &self.counting {
            Counting::Keys(counter) => {
                let keys: Vec<&str> = group.iter().map(|task| task.job.key.as_str()).collect();
                let counts = counter.count_many(&keys, cancel);
                counts
                    .into_iter()
                    .map(|count| match count {
                        Ok(count) => Counted::Count(count),
                        Err(CensusError::Cancelled) => Counted::Cancelled,
                        Err(error) => Counted::Failed(error.to_string()),
                    })
                    .collect()
            }
            Counting::Layers(plane) => group
                .iter()
                .map(|task| match plane.count(&task.job.key, &task.accepted.counts, cancel) {
                    Ok(count) => Counted::Count(count),
                    Err(PlaneError::Cancelled) => Counted::Cancelled,
                    Err(error) => Counted::Failed(layer_failure(&error, &task.accepted)),
                })
                .collect(),
        }
    }
}

/// Counts jobs on the current (blocking) thread, neighbours of one census
/// together; a job cancelled by a lost lease is skipped; once `cancel` is
/// set, the jobs under way give up and the rest are left uncounted.
fn count_chunk(
    chunk: Vec<Task>,
    cancelled: &Mutex<HashSet<String>>,
    cancel: &AtomicBool,
) -> (Vec<JobResult>, Vec<(Job, String)>) {
    let mut results = Vec::with_capacity(chunk.len());
    let mut failures = Vec::new();
    let mut rest = chunk.into_iter().peekable();
    while let Some(task) = rest.next() {
        let counter = task.counter.clone();
        let mut group = vec![task];
        while group.len() < counter.together as usize
            && let Some(next) = rest.peek()
            && Arc::ptr_eq(&next.counter, &counter)
        {
            group.push(rest.next().expect("peeked"));
        }
        if cancel.load(Ordering::Relaxed) {
            break;
        }
        let lost = cancelled.lock().expect("never poisoned");
        group.retain(|task| !lost.contains(&task.job.token));
        drop(lost);
        if group.is_empty() {
            continue;
        }
        let started = Instant::now();
        let counts = counter.count(&group, cancel);
        // Counted together, the jobs share the time.
        let seconds = started.elapsed().as_secs_f64() / group.len() as f64;
        for (task, count) in group.into_iter().zip(counts) {
            let job = task.job;
            let count = match count {
                Counted::Count(count) => count,
                Counted::Cancelled => return (results, failures),
                Counted::Failed(reason) => {
                    failures.push((job, reason));
                    continue;
                }
            };
            metrics::counter!("census_worker_jobs_counted_total").increment(1);
            metrics::histogram!("census_worker_job_seconds").record(seconds);
            results.push(JobResult {
                job_id: job.job_id,
                token: job.token,
                key: job.key,
                count: count.to_string(),
                elapsed_seconds: seconds,
                counter_version: counter.version.clone(),
            });
        }
    }
    (results, failures)
}

/// At most `max` bytes of `text`, cut at a character boundary.
fn truncate(text: &str, max: usize) -> String {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use census_math::census::EssentiallyDifferent;

    const TTL: Duration = Duration::from_secs(30);

    #[test]
    fn a_batch_lasts_about_a_second_at_the_measured_rate() {
        // 500 jobs in half a second on 4 threads: 1,000 jobs a second.
        assert_eq!(batch_for_rate(500, Duration::from_millis(500), 4, TTL, Duration::ZERO), 1000);
        // The same rate measured on a batch of 125.
        assert_eq!(batch_for_rate(125, Duration::from_millis(125), 4, TTL, Duration::ZERO), 1000);
    }

    /// 4x3 gangsters are counted a few hundred at a time on each thread
    /// however long they take; other kinds as their rate says.
    #[test]
    fn jobs_counted_together_are_leased_together() {
        let twelve: Census = "shape boxes=4x3".parse().unwrap();
        let slow = batch_for_rate(2, Duration::from_secs(200), 2, TTL, Duration::ZERO);
        assert_eq!(slow, 2);
        assert_eq!(slow.max(batch_counted_together(twelve.jobs_counted_together(), 2)), 512);
        assert_eq!(batch_counted_together(twelve.jobs_counted_together(), 16), 4096);
        assert_eq!(batch_counted_together(Census::from(EssentiallyDifferent).jobs_counted_together(), 2), 2);
        assert_eq!(batch_counted_together(256, 1024), census_proto::limits::MAX_BATCH);
        assert_eq!(batch_counted_together(0, 0), 1);
    }

    #[test]
    fn long_jobs_are_leased_one_a_thread() {
        // One job of an hour on each of 4 threads.
        assert_eq!(batch_for_rate(4, Duration::from_secs(3600), 4, TTL, Duration::ZERO), 4);
        // Jobs of 0.4 s on 3 threads: 7.5 a second, 7 jobs a batch.
        assert_eq!(batch_for_rate(3, Duration::from_millis(400), 3, TTL, Duration::ZERO), 7);
    }

    #[test]
    fn fast_jobs_fill_the_largest_batch() {
        assert_eq!(batch_for_rate(2048, Duration::from_millis(2), 2, TTL, Duration::ZERO), LARGEST_BATCH);
        assert_eq!(batch_for_rate(64, Duration::ZERO, 1, TTL, Duration::ZERO), LARGEST_BATCH);
    }

    #[test]
    fn a_short_lease_shortens_the_batch_to_a_third_of_it() {
        // 1,000 jobs a second and a 1.5 s TTL: half a second of jobs.
        assert_eq!(batch_for_rate(1000, Duration::from_secs(1), 2, Duration::from_millis(1500), Duration::ZERO), 500);
    }

    #[test]
    fn the_coordinators_pace_lengthens_the_batch_within_a_third_of_the_lease() {
        // 1,000 jobs a second, the coordinator asking for batches of 4 s.
        assert_eq!(batch_for_rate(500, Duration::from_millis(500), 4, TTL, Duration::from_secs(4)), LARGEST_BATCH);
        assert_eq!(batch_for_rate(50, Duration::from_millis(500), 4, TTL, Duration::from_secs(4)), 400);
        // Asked for 20 s with a lease of 30 s: 10 s, a third of it.
        assert_eq!(batch_for_rate(50, Duration::from_millis(500), 4, TTL, Duration::from_secs(20)), 1000);
        // Jobs of an hour stay one a thread.
        assert_eq!(batch_for_rate(4, Duration::from_secs(3600), 4, TTL, Duration::from_secs(7)), 4);
    }

    #[test]
    fn more_threads_than_the_largest_batch_still_ask_for_a_valid_batch() {
        assert_eq!(batch_for_rate(1, Duration::from_secs(60), 10_000, TTL, Duration::ZERO), LARGEST_BATCH);
    }
}
