//! The durable job store of the census: the queue of record.
//!
//! Everything a census knows lives in storage: runs, their classes (the
//! census's groups: a label and an exact weight), their jobs (a text key a
//! worker counts from), an append-only table of results with provenance,
//! and the final answer, written in the same transaction as the last
//! result. Postgres is the store for distributed runs, SQLite the embedded
//! default.
//!
//! The store is cut at a seam. Above it, [`Store`] holds the rules, written
//! once and free of any database: votes, quorum, conflicts, the fold at
//! finish and its checks, quarantine reaching back, failing for good, a
//! run of stages leased a stage at a time (the deciding functions are pure
//! and unit-tested). Below it, a
//! [`backend::StorageBackend`] is a set of named storage operations (lease
//! jobs, load jobs and votes, insert results, mark decided, add to classes,
//! page a run for a fold, write the answer, ...), each a verb, none a
//! decision. [`SqlBackend`] implements them for Postgres and SQLite (the
//! few dialect differences are its own). Every backend passes the same
//! conformance suite, `conformance::exercise_backend` (a public function,
//! with the `conformance` feature, that a new backend runs too).
//!
//! This crate knows SQL and, of the mathematics, only the seam
//! `census_math::census`: a run's census folds its job counts into the
//! answer. It knows nothing of what a key means (no bands, seeds or 9!),
//! nothing of gRPC, workers or the command line.
//!
//! ```no_run
//! # async fn demo() -> Result<(), census_store::StoreError> {
//! let store = census_store::connect("census.db", census_store::StoreConfig::default()).await?;
//! for run in store.list_runs().await? {
//!     println!("run {} ({}): {}/{} jobs done", run.run_id, run.spec.census, run.jobs_done, run.jobs_total);
//! }
//! # Ok(()) }
//! ```

pub mod backend;
#[cfg(feature = "conformance")]
pub mod conformance;
mod error;
mod sql;
mod store;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

pub use census_math::census::{Census, JobSpec};
pub use error::{DatabaseError, DatabaseErrorKind};
use num_bigint::BigUint;
pub use sql::{DatabaseLocation, MAX_CONNECTIONS, POSTGRES_CONNECTIONS, PostgresUrl, SqlBackend, SqlTx};
pub use store::Store;

/// The store on Postgres or SQLite.
pub type SqlStore = Store<SqlBackend>;

/// Settings that are not part of a run's identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreConfig {
    /// After this many failures (since the job was last requeued), from at
    /// least [`StoreConfig::fail_quorum`] distinct identities, a job is
    /// failed for good. An identity that failed a job this many times is not
    /// handed it again until it is requeued.
    pub max_attempts: u32,
    /// How many distinct identities must have failed a job before it is
    /// failed for good (at most `max_attempts` are asked for): one identity
    /// alone can delay a job, never fail it.
    pub fail_quorum: u32,
    /// After this many rejected results, an identity is quarantined.
    pub quarantine_after: u32,
    /// After this many reported failures, an identity is quarantined.
    pub quarantine_after_failures: u32,
    /// No heartbeat extends a lease past this time after it was granted,
    /// unless the run's census asks for longer (`Census::longest_lease`,
    /// which a run records when it is created): then the census's.
    pub max_lease_lifetime: Duration,
    /// The most leases one identity holds at once.
    pub max_leases_per_worker: u32,
}

impl StoreConfig {
    /// The defaults, which the command line's flags show as theirs.
    pub const DEFAULT: StoreConfig = StoreConfig {
        max_attempts: 5,
        fail_quorum: 2,
        quarantine_after: 3,
        quarantine_after_failures: 50,
        max_lease_lifetime: Duration::from_secs(3600),
        max_leases_per_worker: 10_000,
    };
}

impl Default for StoreConfig {
    fn default() -> StoreConfig {
        StoreConfig::DEFAULT
    }
}

/// The most distinct identities that must agree on a job.
pub const MAX_REDUNDANCY: u32 = 5;
/// The longest identity (token name) the store keeps.
pub const MAX_IDENTITY_LEN: usize = 64;

/// Opens (creating an SQLite file if needed) the store at `location` and
/// runs its migrations, with a pool of `connections` to the database
/// (default and bounds: [`DatabaseLocation::pool_size`]; an SQLite file
/// has one).
pub async fn open(
    location: &DatabaseLocation,
    config: StoreConfig,
    connections: Option<u32>,
) -> Result<Arc<dyn JobStore>, StoreError> {
    Ok(Arc::new(Store::open(SqlBackend::open(location, connections).await?, config).await?))
}

/// [`open`] with the default pool, the location read from `url`
/// (`postgres://...` or `postgresql://...` is Postgres; `sqlite://PATH`,
/// `sqlite:PATH` or a bare path is an SQLite file): for tests and tools
/// that hold a location as text.
pub async fn connect(url: &str, config: StoreConfig) -> Result<Arc<dyn JobStore>, StoreError> {
    open(&url.parse()?, config, None).await
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
    /// Higher runs are leased first; equal ones oldest first.
    pub priority: i64,
    /// A cancelled run leases nothing and takes no results until it is submitted again.
    pub cancelled: bool,
}

/// The identity of a run in the store.
pub type RunId = i64;
/// The identity of a job in the store.
pub type JobId = i64;

/// What a run computes. Two runs with equal specs are the same run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunSpec {
    /// The census. It is stored as its text (`sudoku stage=russell
    /// counter=column-sets`, `essentially-different`) and read back at the
    /// row: a stored census this code cannot read is an error
    /// ([`StoreError::UnreadableCensus`]), never a default.
    pub census: Census,
    /// The counter's version; results of different versions are never mixed.
    pub counter_version: String,
    /// How many distinct workers must agree on a job before it counts (1 = no redundancy).
    pub redundancy: u32,
}

/// The longest job key, class label or census description the store keeps.
pub const MAX_KEY_LEN: usize = 200;

/// A job handed to a worker, with everything needed to count it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub job_id: JobId,
    pub run_id: RunId,
    /// The run's census ([`RunSpec::census`]): what the key means.
    pub census: Census,
    /// What to count, e.g. `123456789456789123789123456 235/689`.
    pub key: String,
    /// 1 for the first lease of the job, incremented by every new lease.
    pub attempt: u32,
    /// Proves the holder owns this attempt; fresh for every lease.
    pub token: String,
}

/// A finished job, as reported by a worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completion {
    pub job_id: JobId,
    /// The lease token: only the current lease's token, from the identity
    /// that holds it, is accepted.
    pub token: String,
    /// The authenticated identity that reports (never a field the client chose).
    pub worker: String,
    /// What was counted, compared with the job: a report for another key or
    /// counter version is rejected.
    pub key: String,
    pub counter_version: String,
    pub count: u128,
    pub elapsed: Duration,
    /// The count an independent check computed, when the coordinator
    /// validated this result; a different reported count is rejected.
    pub checked_count: Option<u128>,
}

/// What the store did with a [`Completion`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CompleteOutcome {
    /// The result was recorded: the job is done, or (with redundancy) the vote is counted.
    Recorded,
    /// This identity already reported this count for this job: nothing changed.
    AlreadyDone,
    /// Redundant identities disagreed past any quorum: the job is failed and
    /// flagged until an operator recounts it.
    Conflict { stored: u128 },
}

/// A job in conflict that has waited long enough for the coordinator's own
/// count ([`JobStore::conflicts_waiting`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConflictWaiting {
    pub job_id: JobId,
    pub run_id: RunId,
    pub census: Census,
    pub key: String,
}

pub use store::ARBITER;

/// Whether an identity holds the lease a result names, checked before any
/// costly work on the result ([`JobStore::check_leases`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseCheck {
    /// The identity holds this lease now: the result may be checked and recorded.
    Held,
    /// Not held now, but a token the store could have given this identity
    /// (a lease that expired or was retired): a late report, or a repeat
    /// of one already recorded. Refused without checking, not held against it.
    NotHeld,
    /// A token the store never gave this identity for this job: recorded as
    /// a rejection against the identity (it counts toward quarantine).
    Forged { reason: String },
    /// No such job.
    UnknownJob,
}

/// What a heartbeat found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HeartbeatOutcome {
    /// Tokens whose leases were extended.
    pub extended: Vec<String>,
    /// Tokens no longer held: the job was re-leased, finished, or is unknown. Drop them.
    pub lost: Vec<String>,
}

/// A done job's accepted count, as a job of the next stage reads it
/// ([`JobStore::accepted_counts`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcceptedCount {
    pub job_id: JobId,
    pub key: String,
    pub count: u128,
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
    /// Results refused as wrong (validation, outvoted, contradicting).
    pub rejected: u64,
    /// Sum of `count` over recorded results.
    pub completions_counted: String,
    /// The expected cost of all the run's jobs, and of its done jobs
    /// (`Census::job_cost`, summed: equal to `jobs_total` and `done`
    /// where every job costs 1). [`Progress::cost_fraction_done`] is the
    /// share of the work done.
    pub cost_total: u64,
    pub cost_done: u64,
    /// Results recorded a second over the last minute (or over the newest
    /// 10,000 results, if it holds more).
    pub jobs_per_second: f64,
    /// The cost of the jobs of those results, a second.
    pub cost_per_second: f64,
    /// The cost not yet done over the cost done a second; `None` when
    /// unknown, or when all that is left is conflicts nobody counts.
    pub eta: Option<Duration>,
    /// The identities with the most results for the run, most jobs first,
    /// at most [`WORKERS_LISTED`]: a poll of a run of 10,000 workers is not
    /// 10,000 lines (SQL's `worker_stats` has them all).
    pub workers: Vec<WorkerProgress>,
    /// How many identities have results for the run.
    pub workers_total: u64,
}

/// The most identities [`Progress::workers`] lists.
pub const WORKERS_LISTED: u32 = 100;

impl Progress {
    /// The share of the run's expected cost done, 0 to 1 (1 for a run of
    /// no cost): the share of its jobs done where every job costs 1.
    pub fn cost_fraction_done(&self) -> f64 {
        if self.cost_total == 0 { 1.0 } else { self.cost_done as f64 / self.cost_total as f64 }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WorkerProgress {
    pub worker: String,
    pub jobs: u64,
    pub completions: String,
    /// Seconds since the Unix epoch.
    pub last_seen_unix: i64,
}

/// One class (a group of jobs) with its sums, as the `group_totals` view shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClassTotal {
    pub class_id: u32,
    /// The census's name for the group (for the 9x9 count, the representative band).
    pub label: String,
    pub weight: u128,
    pub jobs_total: u32,
    pub jobs_done: u32,
    /// Sum of the counts of the class's done jobs so far.
    pub count_sum: BigUint,
}

impl ClassTotal {
    pub fn complete(&self) -> bool {
        self.jobs_done == self.jobs_total
    }
}

/// The run's answer, final only when every job is done and no conflict is open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunTotal {
    pub run_id: RunId,
    pub census: Census,
    pub is_final: bool,
    /// Sum over classes of weight x (count sum)^p, so far: p = 1 (for the
    /// 9x9 count this is S), or 2 for box shapes (then it is the answer).
    pub weighted_sum: BigUint,
    /// The census's exact answer, once final (folded by `census_math`).
    pub answer: Option<BigUint>,
    /// The named terms of the answer, in reading order, once final.
    pub terms: Vec<(String, String)>,
}

/// Everything that can go wrong in the store, each with a message a person can act on.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("unknown run {0}")]
    UnknownRun(RunId),
    #[error("unknown job {0}")]
    UnknownJob(JobId),
    #[error(
        "job {job}: the lease is not held with this token by this identity (it expired, was released, or the job was leased again)"
    )]
    StaleToken { job: JobId },
    #[error("job {job}: {reason}; the result is rejected")]
    Rejected { job: JobId, reason: String },
    #[error("run {0} is cancelled; submit it again to resume it")]
    RunCancelled(RunId),
    #[error("the run's results cannot be folded into its answer")]
    Fold(#[source] census_math::census::CensusError),
    /// A run's stored census text is not a census this code can read (a
    /// damaged database, or one written by a newer version): nothing of the
    /// run is shown or counted with a guessed census.
    #[error("run {run}: its stored census cannot be read")]
    UnreadableCensus {
        run: RunId,
        #[source]
        source: census_math::census::CensusError,
    },
    #[error("invalid input: {0}")]
    Invalid(String),
    #[error("the stored total {stored} does not equal the exact total {computed}")]
    TotalMismatch { stored: String, computed: String },
    /// The database cannot be opened: `reason` is the server's or the
    /// network's own (connection refused, no such database, ...);
    /// `retryable` says whether trying again later may help.
    #[error("the database {url} cannot be opened: {reason}")]
    Connect { url: String, reason: String, retryable: bool },
    /// The location itself is wrong (not a URL or file census can use, a
    /// file that is no SQLite database): bad input, never worth a retry.
    #[error("the database {url} cannot be used: {reason}")]
    BadLocation { url: String, reason: String },
    /// The database failed a statement or could not be reached: the kind
    /// of failure (whether a retry may help) and the database's own words.
    #[error("{}", .0.kind())]
    Database(#[source] DatabaseError),
    /// A stored value this code cannot read, or a task that panicked.
    #[error("internal error: {0}")]
    Internal(String),
}

impl StoreError {
    /// The error and its sources, one after the other: `the database is
    /// busy: error returned from database: ...`. (`Display` shows the first only,
    /// so that `anyhow`'s `{:#}` does not repeat the sources.)
    pub fn report(&self) -> String {
        let mut report = self.to_string();
        let mut source = std::error::Error::source(self);
        while let Some(error) = source {
            report.push_str(": ");
            report.push_str(&error.to_string());
            source = error.source();
        }
        report
    }

    /// Whether the same call may succeed later (the database was
    /// unreachable, busy or full: [`DatabaseErrorKind::is_retryable`]), as
    /// opposed to a permanent refusal.
    pub fn is_retryable(&self) -> bool {
        match self {
            StoreError::Database(error) => error.is_retryable(),
            StoreError::Connect { retryable, .. } => *retryable,
            _ => false,
        }
    }

    /// What failed in the database's storage, if that is why the call failed.
    pub fn storage_fault(&self) -> Option<StorageFault> {
        match self {
            StoreError::Database(error) => match error.kind() {
                DatabaseErrorKind::StorageFull => Some(StorageFault::Full),
                DatabaseErrorKind::ReadOnly => Some(StorageFault::ReadOnly),
                DatabaseErrorKind::StorageFailed => Some(StorageFault::Io),
                _ => None,
            },
            _ => None,
        }
    }
}

/// Why the database's storage refused a write: never the request's fault,
/// nor the caller's ([`StoreError::storage_fault`]). Nothing of the call was
/// stored, and the same call may succeed once the operator has mended it,
/// so callers wait and retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StorageFault {
    /// No space left (SQLite's SQLITE_FULL, Postgres's disk_full).
    Full,
    /// The file or database takes no writes (SQLITE_READONLY, Postgres's
    /// read_only_sql_transaction).
    ReadOnly,
    /// The storage failed a read or write (SQLITE_IOERR, Postgres's io_error).
    Io,
}

impl std::fmt::Display for StorageFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            StorageFault::Full => "its disk is full",
            StorageFault::ReadOnly => "it is read-only",
            StorageFault::Io => "its storage failed (I/O error)",
        })
    }
}

/// What a credential allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Role {
    /// Lease, heartbeat, complete and fail jobs.
    Worker,
    /// Create, cancel and prioritise runs, recount and requeue jobs; read everything.
    Operator,
    /// Read runs, progress, results and classes.
    Reader,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Worker => "worker",
            Role::Operator => "operator",
            Role::Reader => "reader",
        }
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Role {
    type Err = StoreError;
    fn from_str(text: &str) -> Result<Role, StoreError> {
        match text {
            "worker" => Ok(Role::Worker),
            "operator" => Ok(Role::Operator),
            "reader" => Ok(Role::Reader),
            _ => Err(StoreError::Invalid(format!("{text:?} is not a role (worker, operator or reader)"))),
        }
    }
}

/// A stored credential: its name (the identity), its role and its state.
/// The secret itself is never stored, only its hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenRecord {
    pub name: String,
    pub role: Role,
    pub created_unix: i64,
    pub revoked: bool,
    /// Set when the identity's results were rejected, or its failures
    /// reported, too often.
    pub quarantined: bool,
    /// Results of this identity rejected so far, and its reports refused
    /// unread that named no job that exists: what its quarantine counts.
    pub rejected: u64,
}

/// An identity in quarantine, as `census status` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuarantineEntry {
    pub worker: String,
    pub since_unix: i64,
    pub reason: String,
}

/// Checks an identity (a token's name): 1 to 64 letters, digits, `.`, `_` or `-`.
pub fn check_identity(name: &str) -> Result<(), StoreError> {
    if name.is_empty() || name.len() > MAX_IDENTITY_LEN {
        return Err(StoreError::Invalid(format!("a name has 1 to {MAX_IDENTITY_LEN} characters, not {}", name.len())));
    }
    if let Some(bad) = name.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))) {
        return Err(StoreError::Invalid(format!("a name holds letters, digits, '.', '_' and '-', not {bad:?}")));
    }
    Ok(())
}

/// A run's jobs as they are made (`Census::job_stream`), for
/// [`JobStore::create_run_streaming`].
pub type JobStream = Box<dyn Iterator<Item = JobSpec> + Send>;

/// The queue of record. See the crate documentation for the semantics.
#[async_trait]
pub trait JobStore: Send + Sync {
    /// Creates the run, its jobs and their classes (one per distinct
    /// [`JobSpec::group`], numbered in order of first appearance); returns
    /// the existing run if one with the same spec exists. The jobs are
    /// checked against the census only when the run finishes: its fold
    /// refuses any job list but the census's own.
    async fn create_run(&self, spec: &RunSpec, jobs: &[JobSpec]) -> Result<RunId, StoreError> {
        // The stream owns its jobs ('static), so they are copied once.
        let owned: Vec<JobSpec> = jobs.to_vec();
        self.create_run_streaming(spec, Box::new(owned.into_iter())).await
    }

    /// [`JobStore::create_run`] from jobs as they are made: they are read
    /// and stored a chunk at a time, in one transaction (a run appears
    /// whole or not at all), so a run of 10^7 jobs never has its job list in
    /// memory. An existing run with the same spec is returned without
    /// reading `jobs`.
    async fn create_run_streaming(&self, spec: &RunSpec, jobs: JobStream) -> Result<RunId, StoreError>;
    /// The census of each of `jobs`' runs (unknown jobs are left out), so
    /// a result can be checked with its census's counter.
    async fn censuses_of(&self, jobs: &[JobId]) -> Result<std::collections::HashMap<JobId, Census>, StoreError>;
    /// Every run, oldest first.
    async fn list_runs(&self) -> Result<Vec<RunSummary>, StoreError>;
    /// One run.
    async fn run(&self, run: RunId) -> Result<RunSummary, StoreError>;
    /// Leases up to `max` pending (or expired) jobs of any unfinished run, or of `run` only.
    /// In a run of stages (`Census::stage_count` > 1) only jobs of its open
    /// stage are leased: the lowest stage that holds a job not done, since
    /// a job reads what the stage before it accepted. While another
    /// identity waits for a run's jobs (it was told [`JobStore::has_work_for`]),
    /// `worker` is handed at most its fair share of them, and none of its
    /// own leases that expired within `ttl` (`store/shares.rs`).
    async fn lease(&self, run: Option<RunId>, worker: &str, max: u32, ttl: Duration) -> Result<Vec<Lease>, StoreError>;
    /// Whether any unfinished, uncancelled run (or `run` only) holds a job
    /// that `worker` could still be handed: pending or leased (a lease may
    /// expire), not already voted on by it this round, not failed by it too
    /// often, and the identity not quarantined. False means nothing is left
    /// for this worker, though the run may not be finished (its remaining
    /// jobs wait for other identities or for an operator's requeue). In a
    /// run of stages a job of a later stage counts (it is handed out once
    /// the stages below are done, by whoever counts them), but nothing does
    /// while the open stage holds only failed jobs (they wait for a requeue).
    async fn has_work_for(&self, worker: &str, run: Option<RunId>) -> Result<bool, StoreError>;
    /// Extends the leases still held by `worker`; where another identity
    /// waits for a run's jobs, never past one `ttl` after they began (or the
    /// run's own lifetime, where it is longer).
    async fn heartbeat(&self, worker: &str, tokens: &[String], ttl: Duration) -> Result<HeartbeatOutcome, StoreError>;
    /// Records a result, marks the job done and adds to its class, in one
    /// transaction; the last job's transaction folds the answer.
    async fn complete(&self, completion: &Completion) -> Result<CompleteOutcome, StoreError> {
        let mut outcomes = self.complete_many(std::slice::from_ref(completion)).await?;
        outcomes.pop().expect("one outcome per completion")
    }
    /// Records a batch of results in one transaction. A completion that is
    /// refused (stale token, unknown job, absurd count) is refused alone:
    /// the others in the batch are still recorded.
    async fn complete_many(
        &self,
        completions: &[Completion],
    ) -> Result<Vec<Result<CompleteOutcome, StoreError>>, StoreError>;
    /// Whether `completions`' identity holds each named lease now, one
    /// answer a completion, in order: cheap, so the coordinator asks it
    /// before it counts a result again. A token the store never issued for
    /// that job to that identity ([`LeaseCheck::Forged`]) is recorded as a
    /// rejection against the identity in the same call, so a sender of
    /// made-up tokens ends quarantined like a sender of wrong counts. An
    /// identity that reported more results of leases it did not hold than it
    /// honestly could has its reports refused unread
    /// ([`StoreError::Rejected`]), each refusal a rejection against it (a
    /// refused report, when the report's first job does not exist), toward
    /// its quarantine.
    async fn check_leases(&self, completions: &[Completion]) -> Result<Vec<LeaseCheck>, StoreError>;
    /// Resolves a conflict by counting the job again: its accepted count is
    /// taken out of its class (and the total, if the run had finished) and
    /// the job goes back to the queue. Every earlier result stays in the
    /// results table. Only a job flagged with a conflict can be recounted,
    /// or a done or failed job of a run of stages: then every job of the
    /// stages after it goes back to the queue too (a new round: their
    /// accepted counts, votes and failures no longer count), since they
    /// read what it wrote.
    async fn recount(&self, job: JobId) -> Result<(), StoreError>;
    /// Jobs with an open conflict (distinct identities disagree, no quorum
    /// has decided) that no identity is counting now and that have not
    /// changed for `wait`, at most `limit`, by id: what the coordinator
    /// counts itself ([`JobStore::decide_conflict`]).
    async fn conflicts_waiting(&self, wait: Duration, limit: u32) -> Result<Vec<ConflictWaiting>, StoreError>;
    /// Decides a job in conflict by the coordinator's own `count`: the job
    /// is done with it (recorded as [`ARBITER`]'s accepted result), the
    /// conflict closes, and every vote of another count is rejected
    /// against its identity. False, and nothing changes, if the job is no
    /// longer in conflict (a quorum or another coordinator decided it) or
    /// an identity holds a live lease of it.
    async fn decide_conflict(&self, job: JobId, count: u128) -> Result<bool, StoreError>;
    /// Records a failure. After `max_attempts` failures from at least
    /// `fail_quorum` distinct identities the job is failed; an identity
    /// that reported `quarantine_after_failures` failures is quarantined.
    async fn fail(&self, job: JobId, token: &str, worker: &str, reason: &str) -> Result<(), StoreError>;
    /// Puts failed jobs of `run` (or only `job`) back in the queue with
    /// fresh attempts; a job with a conflict is recounted. Returns how many.
    async fn requeue(&self, run: RunId, job: Option<JobId>) -> Result<u64, StoreError>;
    /// Cancels a run: it leases nothing more, its leases are dropped, and
    /// results for it are refused. Creating the same run again resumes it.
    async fn cancel_run(&self, run: RunId) -> Result<(), StoreError>;
    /// Sets a run's priority: higher runs are leased first.
    async fn set_priority(&self, run: RunId, priority: i64) -> Result<(), StoreError>;
    async fn progress(&self, run: RunId) -> Result<Progress, StoreError>;
    /// The run's answer. A final answer is folded again from the accepted
    /// results before it is returned; a mismatch is an error, never an answer.
    async fn total(&self, run: RunId) -> Result<RunTotal, StoreError>;
    /// Every class of the run, in class order.
    async fn class_totals(&self, run: RunId) -> Result<Vec<ClassTotal>, StoreError> {
        self.class_totals_from(run, 0, None).await
    }
    /// The run's classes numbered `first` on, in class order, at most
    /// `limit` of them (all with `None`): a page of a run's classes, which
    /// may number 10^6.
    async fn class_totals_from(
        &self,
        run: RunId,
        first: u32,
        limit: Option<u32>,
    ) -> Result<Vec<ClassTotal>, StoreError>;
    /// The accepted counts of the run's done jobs of `stage` (0 in a run of
    /// one stage), in job order: the jobs after `after`, at most `limit`.
    /// What a job of the next stage reads (for a layers census, the
    /// digests of the files it reads).
    async fn accepted_counts(
        &self,
        run: RunId,
        stage: u32,
        after: JobId,
        limit: u32,
    ) -> Result<Vec<AcceptedCount>, StoreError>;
    /// The runs this store value finished (wrote the answer of) since the
    /// last call, each once, after their transactions committed. Lets the
    /// caller announce a finished run without asking for every run after
    /// every completion.
    fn take_finished_runs(&self) -> Vec<RunId>;
    /// Answers when the database does (for health checks), on a
    /// connection of its own: a busy pool does not make it fail.
    async fn ping(&self) -> Result<(), StoreError>;
    /// A text that changes whenever the run's stored answer may have (it
    /// finished, was reopened by a recount and finished again, gained or
    /// lost a conflict, or its stored sums differ); `None` while it has no
    /// answer. Cheap (one row), so a reader can cache what it folded from
    /// a finished run and fold again only when this changes.
    async fn answer_version(&self, run: RunId) -> Result<Option<String>, StoreError>;
    /// Closes every connection; for SQLite this folds the write-ahead log
    /// into the database file. Later calls fail.
    async fn close(&self);

    /// Stores a new credential: `hash` is the SHA-256 (hex) of its secret.
    async fn create_token(&self, name: &str, role: Role, hash: &str) -> Result<(), StoreError>;
    /// Stores or replaces the credential `name` (a token given to the
    /// coordinator from a secret file); a revoked name stays revoked.
    async fn import_token(&self, name: &str, role: Role, hash: &str) -> Result<(), StoreError>;
    async fn list_tokens(&self) -> Result<Vec<TokenRecord>, StoreError>;
    /// Revokes a credential at once. False if there is no such name.
    async fn revoke_token(&self, name: &str) -> Result<bool, StoreError>;
    /// The credential with this hash, if any (revoked or not).
    async fn find_token(&self, hash: &str) -> Result<Option<TokenRecord>, StoreError>;
    async fn is_quarantined(&self, worker: &str) -> Result<bool, StoreError>;
    async fn quarantined(&self) -> Result<Vec<QuarantineEntry>, StoreError>;
    /// Lets a quarantined identity work again. False if it was not quarantined.
    async fn release_quarantine(&self, worker: &str) -> Result<bool, StoreError>;
}
