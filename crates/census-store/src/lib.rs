//! The durable job store of the census: the queue of record.
//!
//! Everything the census knows lives in SQL: runs, their classes, one job per
//! (class, seed), an append-only table of results with provenance, and the
//! final total, written in the same transaction as the last result. Postgres
//! is the store for distributed runs, SQLite the embedded default; both
//! implement [`JobStore`] and pass the same conformance suite.
//!
//! This crate knows SQL and the census's mathematics (to validate bands and
//! bound counts); it knows nothing of gRPC, workers or the command line.
//!
//! ```no_run
//! # async fn demo() -> Result<(), census_store::StoreError> {
//! let store = census_store::connect("census.db", census_store::StoreConfig::default()).await?;
//! for run in store.list_runs().await? {
//!     println!("run {} ({}): {}/{} jobs done", run.run_id, run.spec.stage, run.jobs_done, run.jobs_total);
//! }
//! # Ok(()) }
//! ```

mod sql;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

pub use sql::SqlStore;

/// Settings that are not part of a run's identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreConfig {
    /// After this many attempts, a failing job is failed for good.
    pub max_attempts: u32,
}

impl Default for StoreConfig {
    fn default() -> StoreConfig {
        StoreConfig { max_attempts: 5 }
    }
}

/// Opens (creating if needed) the store at `url` and runs its migrations:
/// `postgres://...` or `postgresql://...` is Postgres; `sqlite://PATH`,
/// `sqlite:PATH` or a bare path is an SQLite file.
pub async fn connect(url: &str, config: StoreConfig) -> Result<Arc<dyn JobStore>, StoreError> {
    Ok(Arc::new(SqlStore::connect(url, config).await?))
}

/// A run as listed: its identity, its spec and how far it got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunSummary {
    pub run_id: RunId,
    pub spec: RunSpec,
    pub classes: u64,
    pub jobs_total: u64,
    pub jobs_done: u64,
    pub is_final: bool,
}

/// The identity of a run in the store.
pub type RunId = i64;
/// The identity of a job (one class representative and one seed) in the store.
pub type JobId = i64;

/// What a run computes. Two runs with equal specs are the same run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunSpec {
    /// The class stage's name, e.g. `russell` (44 classes) or `catalogue` (36,288).
    pub stage: String,
    /// The counter's name, e.g. `column-sets`.
    pub counter: String,
    /// The counter's version; results of different versions are never mixed.
    pub counter_version: String,
    /// How many distinct workers must agree on a job before it counts (1 = no redundancy).
    pub redundancy: u32,
}

/// One class of a run, as the coordinator hands it to the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClassSpec {
    /// The class number within its stage (0-based, in order of representatives).
    pub class_id: u32,
    /// The least band of the class, in 27-digit form.
    pub representative: String,
    /// The number of catalogue bands in the class.
    pub size: u64,
}

/// A job handed to a worker, with everything needed to count it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub job_id: JobId,
    pub run_id: RunId,
    pub class_id: u32,
    /// The class representative, 27 digits.
    pub band: String,
    /// The seed's index, 0-9, in the order of `census_math`'s seed list.
    pub seed: u8,
    /// 1 for the first lease of the job, incremented by every new lease.
    pub attempt: u32,
    /// Proves the holder owns this attempt; fresh for every lease.
    pub token: String,
    /// The counter the run uses.
    pub counter: String,
}

/// A finished job, as reported by a worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completion {
    pub job_id: JobId,
    pub token: String,
    pub worker: String,
    pub count: u64,
    pub elapsed: Duration,
    pub counter_version: String,
}

/// What the store did with a [`Completion`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CompleteOutcome {
    /// The result was recorded and counted.
    Recorded,
    /// The job was already done with the same count: nothing changed.
    AlreadyDone,
    /// The job was done with a different count: stored as a conflict, the job is flagged.
    Conflict { stored: u64 },
}

/// What a heartbeat found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HeartbeatOutcome {
    /// Tokens whose leases were extended.
    pub extended: Vec<String>,
    /// Tokens no longer held: the job was re-leased, finished, or is unknown. Drop them.
    pub lost: Vec<String>,
}

/// Counts of jobs by state, and what is known of the total.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Progress {
    pub run_id: RunId,
    pub jobs_total: u64,
    pub pending: u64,
    pub leased: u64,
    pub done: u64,
    pub failed: u64,
    pub conflicts: u64,
    /// Sum of `count` over recorded results.
    pub completions_counted: String,
    /// Jobs completed in the last minute, divided by 60.
    pub jobs_per_second: f64,
    pub eta: Option<Duration>,
    pub workers: Vec<WorkerProgress>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WorkerProgress {
    pub worker: String,
    pub jobs: u64,
    pub completions: String,
    /// Seconds since the Unix epoch.
    pub last_seen_unix: i64,
}

/// One class with its sums, as the `class_totals` view shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClassTotal {
    pub class_id: u32,
    pub representative: String,
    pub size: u64,
    pub seeds_done: u32,
    /// Sum of the class's seed counts so far (decimal).
    pub seed_sum: String,
    pub complete: bool,
}

/// The run's total, final only when every job is done and no conflict is open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunTotal {
    pub run_id: RunId,
    pub is_final: bool,
    /// S = sum over classes of size x seed_sum, decimal.
    pub s: String,
    /// N0 = 9! x 72^2 x S, decimal.
    pub n0: String,
}

/// Everything that can go wrong in the store, each with a message a person can act on.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("unknown run {0}")]
    UnknownRun(RunId),
    #[error("unknown job {0}")]
    UnknownJob(JobId),
    #[error("job {job}: the lease token is stale (the job was leased again)")]
    StaleToken { job: JobId },
    #[error("job {job}: count {count} is impossible (at most {max} completions for one job)")]
    AbsurdCount { job: JobId, count: u64, max: u64 },
    #[error("class {class_id}: {representative:?} is not a valid band: {reason}")]
    InvalidBand { class_id: u32, representative: String, reason: String },
    #[error("invalid input: {0}")]
    Invalid(String),
    #[error("the stored total {stored} does not equal the exact total {computed}")]
    TotalMismatch { stored: String, computed: String },
    #[error("the database {url} cannot be opened: {reason}")]
    Connect { url: String, reason: String },
    #[error("database error: {0}")]
    Database(String),
}

impl From<sqlx::Error> for StoreError {
    fn from(error: sqlx::Error) -> StoreError {
        StoreError::Database(error.to_string())
    }
}

/// The queue of record. See the crate documentation for the semantics.
#[async_trait]
pub trait JobStore: Send + Sync {
    /// Creates the run, its classes and one job per (class, seed); returns the
    /// existing run if one with the same spec exists.
    async fn create_run(&self, spec: &RunSpec, classes: &[ClassSpec]) -> Result<RunId, StoreError>;
    /// Every run, oldest first.
    async fn list_runs(&self) -> Result<Vec<RunSummary>, StoreError>;
    /// One run.
    async fn run(&self, run: RunId) -> Result<RunSummary, StoreError>;
    /// Leases up to `max` pending (or expired) jobs of any unfinished run, or of `run` only.
    async fn lease(&self, run: Option<RunId>, worker: &str, max: u32, ttl: Duration) -> Result<Vec<Lease>, StoreError>;
    /// Extends the leases still held by `worker`.
    async fn heartbeat(&self, worker: &str, tokens: &[String], ttl: Duration) -> Result<HeartbeatOutcome, StoreError>;
    /// Records a result, marks the job done and adds to its class, in one transaction.
    async fn complete(&self, completion: &Completion) -> Result<CompleteOutcome, StoreError> {
        let mut outcomes = self.complete_many(std::slice::from_ref(completion)).await?;
        outcomes.pop().expect("one outcome per completion")
    }
    /// Records a batch of results in one transaction. A completion that is
    /// refused (stale token, unknown job, absurd count) is refused alone:
    /// the others in the batch are still recorded.
    async fn complete_many(&self, completions: &[Completion]) -> Result<Vec<Result<CompleteOutcome, StoreError>>, StoreError>;
    /// Resolves a conflict by counting the job again: its accepted count is
    /// taken out of its class (and the total, if the run had finished) and
    /// the job goes back to the queue. Every earlier result stays in the
    /// results table. Only a job flagged with a conflict can be recounted.
    async fn recount(&self, job: JobId) -> Result<(), StoreError>;
    /// Records a failure; after the maximum attempts the job is failed.
    async fn fail(&self, job: JobId, token: &str, worker: &str, reason: &str) -> Result<(), StoreError>;
    async fn progress(&self, run: RunId) -> Result<Progress, StoreError>;
    async fn total(&self, run: RunId) -> Result<RunTotal, StoreError>;
    async fn class_totals(&self, run: RunId) -> Result<Vec<ClassTotal>, StoreError>;
}
