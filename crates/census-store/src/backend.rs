//! The seam between the store's rules and its storage: [`StorageBackend`],
//! the named operations a backend provides, the records and parameters
//! they pass, and the rules every backend keeps. The rules of the store
//! ([`crate::Store`]: votes, quorum, conflicts, the fold at finish and its
//! checks, quarantine, failing for good) are written once above it and
//! call only these operations; a backend decides only the three rules that
//! pick rows ("Who may vote, and which results count", below). SQL on Postgres
//! and SQLite is one backend ([`crate::SqlBackend`]); this page is what a
//! new one must do, without reading its migrations.
//!
//! The operations are grouped in traits by concern ([`Transactions`],
//! [`RunStorage`], [`QueueStorage`], [`ResultStorage`], [`AnswerStorage`],
//! [`RemedyStorage`], [`IdentityStorage`]); a backend implements each, and
//! is then a [`StorageBackend`]. Each operation's documentation is its
//! rule. `Store::open(backend, config)` makes it a [`crate::JobStore`];
//! `census_store::conformance::exercise_backend` checks each operation on
//! its own, then every property of that store.
//!
//! # What every operation keeps
//!
//! - **Transactions.** Operations that take a transaction (`tx`) run in
//!   it and see each other's writes; nothing of it is seen elsewhere until
//!   [`Transactions::commit`], and [`Transactions::rollback`] (or dropping
//!   it) undoes all of it. The store begins it, and commits only when
//!   every step succeeded. Operations without one run on their own,
//!   atomically; the few that take an `Option` of one do either. The store
//!   never runs an operation without a transaction while it holds one, so
//!   a backend may run one transaction at a time (SQLite does: one
//!   connection).
//! - **Locks.** Rows an operation locks stay locked to the end of its
//!   transaction, and are locked in the order given: identities first
//!   ([`Transactions::lock_identities`]), then jobs by id, classes by (run,
//!   class), runs by id, the order every transaction of the store takes,
//!   so that concurrent transactions cannot deadlock. A backend with one
//!   writer at a time has every lock already.
//! - **Time** is Unix milliseconds, always given by the caller (`now`,
//!   `expires_at`, ...): a backend never reads a clock, so every rule
//!   below is decided at the time the store says.
//! - **Numbers** are exact: counts up to 128 bits, weights too, sums of
//!   them far larger (Postgres adds NUMERIC in SQL, SQLite keeps decimal
//!   text and adds in Rust). A few stored sums are handed up as the decimal
//!   text the backend holds (a whole number, possibly with a fraction of
//!   zeros: [`parse_big`]).
//! - **Unknown ids** are left out of what a read returns (a job, a run);
//!   they are never an error, unless the operation says so.
//!
//! # A job and its lease
//!
//! A job is [`JobState::Pending`], `Leased`, `Done` or `Failed`. A leased
//! job has an owner (the identity), a token, the time its lease expires
//! and the time it started ([`LeaseFields`]); a lease whose expiry is
//! before `now` is *expired* but stays leased, and its job is leased
//! again only by [`QueueStorage::lease_jobs`] (`Waiting::Expired`). Every
//! operation that moves a job out of the leased state *retires* its
//! lease: no owner, no token, no expiry ([`ResultStorage::mark_decided`],
//! [`RemedyStorage::set_failures`], [`QueueStorage::release_leases`],
//! [`RemedyStorage::start_new_round`], [`RemedyStorage::requeue_failed_job`]),
//! so the old token is refused from then on. A job's `attempt` grows by
//! one with every lease; its `round` with every reopening (a recount, a
//! quarantine reaching back), and its failure epoch with every reopening
//! and requeue.
//!
//! # What the database keeps by itself
//!
//! The SQL backend keeps these with triggers (migrations `run_leases`,
//! `owner_leases`, `0001_census`, `0002_trust` and `refused_reports`), so that no statement,
//! present or future, can forget them; another backend keeps them however
//! it likes, as long as they hold after every operation:
//!
//! - **Each run's leased jobs**: [`AnswerStorage::leased_jobs`] is the
//!   number of the run's jobs in the leased state, expired or not.
//! - **Each identity's leased jobs**: [`QueueStorage::leases_counted`] is
//!   the number of jobs in the leased state owned by the identity, expired
//!   or not. A job leased again by another identity counts -1 for the old
//!   owner and +1 for the new; by the same identity, no change.
//!
//!   Both move with whatever moves a job into or out of its lease: a
//!   lease, a decided report, a failure, a release, a new round. (Postgres
//!   keeps each in slots summed on reading, so that concurrent statements
//!   do not queue on one row; SQLite in one row a run or identity.)
//! - **Results, rejections and refused reports are append-only**: no
//!   operation changes or deletes one, and the database refuses anyone who
//!   tries (a trigger raises `results are append-only`: a
//!   [`DatabaseErrorKind::Constraint`](crate::DatabaseErrorKind::Constraint)).
//!   A new round leaves its job's old results where they are; they stop
//!   counting because their round is not the job's.
//!
//! # Who may vote, and which results count
//!
//! A result is recorded with its job's round and an outcome
//! ([`ResultOutcome`]: a vote, the accepted count, or the vote that showed
//! a conflict). Three operations decide with these rules, in the backend
//! (the SQL backend in its statements), because they pick rows:
//!
//! - **Open to an identity** ([`OpenTo`]; [`QueueStorage::lease_jobs`],
//!   [`QueueStorage::has_job_open_to`]): a job is open to an identity that
//!   has no result of the job's current round (whatever its outcome: one
//!   vote an identity, job and round) and has failed the job fewer than
//!   `max_failures` times in its current failure epoch. Only open jobs are
//!   leased to it. A backend may trust a job's own counters here: a job
//!   whose votes are 0 (the `JobChange::votes_added` since its round
//!   began) has no result of its round, and one whose failures are 0
//!   (`FailureTally::failures`) was failed by nobody in its epoch, since
//!   the store counts both with the results and failures it writes; the
//!   SQL backend reads the results and failures of the other jobs only.
//! - **The votes** ([`ResultStorage::load_votes`]): the results whose
//!   outcome is a vote or the accepted count, of every round, in the order
//!   they were recorded; the store keeps the current round's and decides
//!   the quorum (`decision.rs`).
//! - **The results that count** ([`RemedyStorage::jobs_counted_by`], what
//!   a quarantine reopens): an identity's vote or accepted count of the
//!   job's current round, on a job that is pending or leased (a vote that
//!   waits for a quorum) or done with that same count (the accepted one,
//!   or a vote that agreed with it). An outvoted vote on a done job, a
//!   result on a failed job, a result of an earlier round and the vote of
//!   a conflict do not count.

use std::collections::{BTreeMap, HashSet};

use async_trait::async_trait;
use num_bigint::BigUint;

use crate::{
    AcceptedCount, ClassTotal, JobId, QuarantineEntry, Role, RunId, RunSpec, StoreError, TokenRecord, WorkerProgress,
};

/// What a class adds to its run's weighted sum: weight x count sum^power
/// (power is the census's `class_power`).
pub fn contribution(weight: &BigUint, count_sum: &BigUint, power: u32) -> BigUint {
    weight * count_sum.pow(power)
}

/// A whole number a backend gives as decimal text (Postgres may print a
/// NUMERIC with a fraction of zeros: "12.000").
pub fn parse_big(text: &str) -> Result<BigUint, StoreError> {
    whole_part(text)
        .and_then(|integer| integer.parse().ok())
        .ok_or_else(|| StoreError::Internal(format!("{text:?} is not a whole number")))
}

/// A count or weight a backend gives as decimal text.
pub fn parse_count(text: &str) -> Result<u128, StoreError> {
    whole_part(text)
        .and_then(|integer| integer.parse().ok())
        .ok_or_else(|| StoreError::Internal(format!("{text:?} is not a count")))
}

/// The digits of a whole number written with or without a fraction of
/// zeros ("12", "12.000"); anything else ("1.5", "6.67e+21") is not one.
fn whole_part(text: &str) -> Option<&str> {
    match text.split_once('.') {
        None => Some(text),
        Some((integer, zeros)) if zeros.bytes().all(|b| b == b'0') => Some(integer),
        Some(_) => None,
    }
}

/// How many rows a page of a walk over a run's jobs, results or classes
/// reads (a fold, its check, an exact rebuild): a few MB at most, so a run's
/// rows are never all in memory at once.
pub const PAGE: i64 = 10_000;

/// A class's number within its run, in order of first appearance.
pub type ClassId = i64;

/// An enum a backend stores as text: each variant with its one spelling,
/// `as_str` and `FromStr` (an unknown text is [`StoreError::Internal`]).
macro_rules! stored_as_text {
    ($(#[$meta:meta])* $name:ident, $what:literal, { $($(#[$doc:meta])* $variant:ident = $text:literal,)* }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum $name {
            $($(#[$doc])* $variant,)*
        }

        impl $name {
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)*
                }
            }
        }

        impl std::str::FromStr for $name {
            type Err = StoreError;
            fn from_str(text: &str) -> Result<$name, StoreError> {
                match text {
                    $($text => Ok($name::$variant),)*
                    _ => Err(StoreError::Internal(format!(concat!("{:?} is not ", $what), text))),
                }
            }
        }
    };
}

stored_as_text!(
    /// The state of a job.
    JobState, "a job state", {
        Pending = "pending",
        Leased = "leased",
        Done = "done",
        Failed = "failed",
    }
);

/// A job's lease as its row holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseFields {
    pub state: JobState,
    pub token: Option<String>,
    pub owner: Option<String>,
    /// Milliseconds since the Unix epoch.
    pub expires_at: Option<i64>,
}

impl LeaseFields {
    /// Whether `worker` holds the lease with `token` at time `now` (ms):
    /// the job is leased, with this token, to this identity, and the lease
    /// has not expired. The one test of a lease, for reports, failures and
    /// fencing alike.
    pub fn held_by(&self, worker: &str, token: &str, now: i64) -> bool {
        self.state == JobState::Leased
            && self.token.as_deref() == Some(token)
            && self.owner.as_deref() == Some(worker)
            && self.expires_at.is_some_and(|expires| expires >= now)
    }

    /// The lease retired: no token, no owner (the job was decided or
    /// released, so its old token is refused from then on).
    pub(crate) fn retire(&mut self, state: JobState) {
        self.state = state;
        self.token = None;
        self.owner = None;
    }
}

stored_as_text!(
    /// What an appended result says of its report (the `results.outcome` column).
    ResultOutcome, "a result outcome", {
        /// A vote towards the quorum.
        Vote = "vote",
        /// The count the job is done with.
        Accepted = "accepted",
        /// The vote that showed no quorum can be reached.
        Conflict = "conflict",
    }
);

/// What an insert found: a new row, or one with the same unique key
/// already there (the database's own words).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Inserted<T> {
    New(T),
    Duplicate(String),
}

// ---- runs ----

/// A run's row, before its classes and jobs.
#[derive(Debug, Clone, Copy)]
pub struct NewRun<'a> {
    pub spec: &'a RunSpec,
    pub created_at: i64,
    pub class_power: u32,
    /// The census's own longest lease, if it asks for one.
    pub max_lease_ms: Option<i64>,
}

/// A class of a run being created.
#[derive(Debug, Clone, Copy)]
pub struct NewClass<'a> {
    pub id: ClassId,
    pub label: &'a str,
    pub weight: u128,
    pub jobs_total: i64,
}

/// A job of a run being created (pending, attempt 0, round 0).
#[derive(Debug, Clone, Copy)]
pub struct NewJob<'a> {
    pub class: ClassId,
    pub key: &'a str,
    /// Its stage in a run of stages (`Census::stage`); `None` in a run of
    /// one stage.
    pub stage: Option<u32>,
    /// Its expected cost relative to the run's other jobs
    /// (`Census::job_cost`), at least 1.
    pub cost: i64,
}

/// A run as listed.
#[derive(Debug, Clone)]
pub struct RunRecord {
    pub id: RunId,
    /// The census as stored (text the store reads).
    pub census: String,
    pub counter_version: String,
    pub redundancy: u32,
    pub jobs_total: i64,
    pub jobs_remaining: i64,
    pub finished_at: Option<i64>,
    pub open_conflicts: i64,
    pub priority: i64,
    pub cancelled_at: Option<i64>,
}

/// A run's counters and stored answer.
#[derive(Debug, Clone)]
pub struct RunState {
    pub finished_at: Option<i64>,
    pub open_conflicts: i64,
    /// Decimal text, once finished.
    pub weighted_sum: Option<String>,
    /// Decimal text, once finished.
    pub answer: Option<String>,
    pub jobs_total: i64,
    pub jobs_remaining: i64,
    pub failed_jobs: i64,
    /// The cost of all the run's jobs, and of its done jobs (each job's
    /// `Census::job_cost`; 1 a job in a run stored before costs were).
    pub cost_total: i64,
    pub cost_done: i64,
    /// Decimal text: the sum of the done jobs' counts.
    pub counted: String,
    /// The census as stored.
    pub census: String,
}

/// What never changes of a run: its census (as stored) and its number of classes.
#[derive(Debug, Clone)]
pub struct RunOutline {
    pub census: String,
    pub classes: u64,
}

/// A job's run and the run's census (as stored).
#[derive(Debug, Clone)]
pub struct JobCensus {
    pub job: JobId,
    pub run: RunId,
    pub census: String,
}

// ---- the queue ----

/// An unfinished, uncancelled run, as leasing walks them.
#[derive(Debug, Clone, Copy)]
pub struct OpenRun {
    pub id: RunId,
    /// The census's own longest lease, if it asked for one.
    pub max_lease_ms: Option<i64>,
}

/// Which jobs of a run [`QueueStorage::lease_jobs`] takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Waiting {
    /// Leased jobs whose lease expired before `now`.
    Expired,
    /// Pending jobs.
    Pending,
}

/// What [`QueueStorage::lease_jobs`] leases.
#[derive(Debug, Clone, Copy)]
pub struct LeaseJobs<'a> {
    pub run: RunId,
    pub waiting: Waiting,
    /// The most jobs to lease.
    pub wanted: i64,
    pub worker: &'a str,
    pub now: i64,
    pub expires_at: i64,
    /// Random for every lease call: each token is `{salt}-{job id}-{attempt}`.
    pub token_salt: &'a str,
    /// See [`OpenTo`].
    pub max_failures: u32,
    /// Only jobs of this stage (in a run of stages, the stage open now);
    /// `None`: any job of a run of one stage.
    pub stage: Option<u32>,
    /// Pending jobs: only those with this id or a higher one (where the
    /// fresh ones begin: a hint, `store/fronts.rs`); 0 for all.
    pub from: JobId,
    /// Expired leases: `Some(t)` takes this identity's own expired leases
    /// only if they expired before `t` (Unix ms), so that another identity
    /// waiting for the run gets them first (`store/shares.rs`); other
    /// identities' expired leases are taken whenever they expired. `None`:
    /// every expired lease.
    pub own_expired_by: Option<i64>,
}

/// Whether a job is open to an identity: the identity has not voted on it
/// this round (one vote an identity, job and round), and has not failed it
/// `max_failures` times since it was last requeued (its failure epoch).
#[derive(Debug, Clone, Copy)]
pub struct OpenTo<'a> {
    pub run: RunId,
    /// Pending or leased.
    pub state: JobState,
    pub worker: &'a str,
    pub max_failures: u32,
}

/// A job just leased.
#[derive(Debug, Clone)]
pub struct LeasedJob {
    pub id: JobId,
    pub run: RunId,
    pub key: String,
    pub attempt: u32,
    pub token: String,
}

/// What [`QueueStorage::extend_leases`] extends: the leases of `worker`
/// with these tokens (each with the job it names), still held at `now`, of
/// uncancelled runs, to `expires_at` but never past their start plus the
/// longest lifetime: the larger of the run's own and `max_lifetime_ms`, or,
/// for the runs in `contended` (another identity waits for their jobs,
/// `store/shares.rs`), `contended_lifetime_ms`.
#[derive(Debug, Clone, Copy)]
pub struct ExtendLeases<'a> {
    pub worker: &'a str,
    pub leases: &'a [(JobId, &'a str)],
    pub now: i64,
    pub expires_at: i64,
    pub max_lifetime_ms: i64,
    /// Runs whose leases live `contended_lifetime_ms` at most (or the
    /// run's own lifetime, where it is longer); sorted.
    pub contended: &'a [RunId],
    pub contended_lifetime_ms: i64,
}

/// Whose leases [`QueueStorage::release_leases`] gives back to the queue.
#[derive(Debug, Clone, Copy)]
pub enum HeldBy<'a> {
    /// Every lease of a run (it is cancelled).
    Run(RunId),
    /// Every lease of an identity (it is quarantined).
    Identity(&'a str),
}

/// The lowest stage of a run of stages that holds a job in each state
/// but done (`None`: no job in that state).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LowestStages {
    pub pending: Option<u32>,
    pub leased: Option<u32>,
    pub failed: Option<u32>,
}

/// What [`AnswerStorage::accepted_counts`] reads: the done jobs of a run
/// (of one stage of it, in a run of stages), in id order after `after`.
#[derive(Debug, Clone, Copy)]
pub struct AcceptedPage {
    pub run: RunId,
    /// The stage, in a run of stages; `None`: every job of a run of one.
    pub stage: Option<u32>,
    pub after: JobId,
    pub limit: i64,
}

/// A job's lease, as fencing reads it.
#[derive(Debug, Clone)]
pub struct LeaseRecord {
    pub id: JobId,
    pub run: RunId,
    pub attempt: i64,
    pub lease: LeaseFields,
}

// ---- results ----

/// A job of a batch as [`ResultStorage::load_jobs`] reads it, with its
/// run's redundancy, cancellation and counter version.
#[derive(Debug, Clone)]
pub struct JobRecord {
    pub id: JobId,
    pub run: RunId,
    pub class: ClassId,
    pub key: String,
    pub attempt: i64,
    pub lease: LeaseFields,
    /// Votes the row has counted this round (none on a job that an earlier
    /// version finished at redundancy 1, when votes were not counted).
    pub votes: i64,
    pub round: i64,
    pub redundancy: u32,
    pub cancelled: bool,
    pub counter_version: String,
    /// Its expected cost (`Census::job_cost`).
    pub cost: i64,
    /// Whether an open conflict is flagged on it.
    pub conflict: bool,
}

/// A job in conflict, as [`RemedyStorage::conflicts_waiting`] finds it.
#[derive(Debug, Clone)]
pub struct WaitingConflict {
    pub job: JobId,
    pub run: RunId,
    pub key: String,
    /// The run's census, as stored.
    pub census: String,
}

/// A vote or an accepted result of a job.
#[derive(Debug, Clone)]
pub struct VoteRecord {
    pub job: JobId,
    pub worker: String,
    pub count: u128,
    pub round: i64,
    pub outcome: ResultOutcome,
}

/// One row for the append-only results table.
#[derive(Debug, Clone, PartialEq)]
pub struct NewResult {
    pub job: JobId,
    pub run: RunId,
    pub attempt: i64,
    pub round: i64,
    pub worker: String,
    pub count: u128,
    pub elapsed_ms: f64,
    pub counter_version: String,
    pub outcome: ResultOutcome,
    /// The job's expected cost (`Census::job_cost`), kept with the result
    /// so that progress reads it without a lookup of the job.
    pub cost: i64,
}

/// One row for the append-only rejections table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    pub job: JobId,
    pub run: RunId,
    pub attempt: i64,
    pub worker: String,
    pub count: u128,
    pub reason: String,
}

/// One row for the append-only refused reports: a report refused unread
/// (its sender past its budget of results of leases not held) whose first
/// job does not exist, so that no rejection can name it. It counts against
/// its sender as a rejection does ([`ResultStorage::rejections_of`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefusedReport {
    pub worker: String,
    /// The first job id the report named, as it named it (no job has it).
    pub job_named: JobId,
    pub reason: String,
}

/// What a batch does to one job's row: its new state, the count it is done
/// with (if it is), and how many votes it gained. Its lease is retired.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobChange {
    pub state: JobState,
    pub count: Option<u128>,
    pub votes_added: i64,
}

/// Counts added to (or taken out of) classes: (run, class) -> (count, jobs done).
pub type ClassChanges = BTreeMap<(RunId, ClassId), (BigUint, i64)>;

/// What a batch adds to one run's counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunChange {
    /// Jobs done (so `jobs_remaining` goes down by as many).
    pub done: i64,
    /// Their cost (so `cost_done` goes up by as much).
    pub cost_done: i64,
    pub conflicts_opened: i64,
    pub failed_added: i64,
    /// The sum of the accepted counts.
    pub counted: BigUint,
}

/// What a batch adds to one identity's statistics in one run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WorkerTally {
    /// Results accepted.
    pub jobs: i64,
    /// The sum of their counts.
    pub completions: BigUint,
}

// ---- answers ----

/// Where a fold reads a run's jobs and counts: the done jobs (finishing a
/// run), or the accepted results of the current rounds (rechecking a
/// finished one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FoldSource {
    DoneJobs,
    AcceptedResults,
}

/// A page of a run's done jobs for a fold: the next `limit` of them by
/// id, after the job `after`, with all their rows (a job has one; with
/// [`FoldSource::AcceptedResults`] a damaged database may hold two
/// accepted results of one job, and both are given, in the same page).
#[derive(Debug, Clone, Copy)]
pub struct FoldPage {
    pub run: RunId,
    pub source: FoldSource,
    /// The last job of the previous page; -1 first.
    pub after: JobId,
    pub limit: i64,
}

/// A job and its count, as a fold reads it.
#[derive(Debug, Clone)]
pub struct FoldRow {
    pub job_id: JobId,
    pub class_id: ClassId,
    pub key: String,
    pub label: String,
    pub weight: u128,
    pub count: u128,
}

/// A class's sums as the backend keeps them: the sum of its done jobs'
/// counts, and its contribution, weight x count sum^class_power.
#[derive(Debug, Clone)]
pub struct ClassSums {
    pub class_id: ClassId,
    pub label: String,
    pub count_sum: BigUint,
    pub contribution: BigUint,
}

/// A finished run's answer, written in the transaction of its last job.
#[derive(Debug, Clone, Copy)]
pub struct FinishedAnswer<'a> {
    pub run: RunId,
    pub finished_at: i64,
    pub weighted_sum: &'a BigUint,
    pub answer: &'a BigUint,
}

/// A page of a run's classes, in class order, after the class `after` (-1 first).
#[derive(Debug, Clone, Copy)]
pub struct ClassPage {
    pub run: RunId,
    pub after: ClassId,
    pub limit: i64,
}

/// The newest results of a run finished at or after `since`, at most `limit` of them.
#[derive(Debug, Clone, Copy)]
pub struct Recent {
    pub run: RunId,
    pub since: i64,
    pub limit: i64,
}

/// The newest results of a run since a time, at most a limit of them: how
/// many, and when the oldest of them finished.
#[derive(Debug, Clone, Copy)]
pub struct RecentResults {
    pub results: i64,
    /// The sum of their jobs' costs (a job's each time it has a result).
    pub cost: i64,
    pub oldest: Option<i64>,
}

// ---- remedies ----

/// A job as reopening it reads it (locked).
#[derive(Debug, Clone)]
pub struct ReopenedJob {
    pub id: JobId,
    pub run: RunId,
    pub class: ClassId,
    pub state: JobState,
    pub count: Option<BigUint>,
    pub conflict: bool,
    /// Its expected cost (`Census::job_cost`).
    pub cost: i64,
}

/// What reopening jobs takes out of one run's counters; the run is
/// unfinished again (its stored weighted sum and answer are cleared).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunTakeOut {
    /// Done jobs reopened (so `jobs_remaining` goes up by as many).
    pub done: i64,
    /// Their cost (so `cost_done` goes down by as much).
    pub cost_done: i64,
    pub conflicts_closed: i64,
    pub failures_closed: i64,
    /// The sum of the reopened jobs' counts.
    pub counted: BigUint,
}

/// A job that may have a conflict to resolve, or be recounted (locked).
#[derive(Debug, Clone, Copy)]
pub struct FlaggedJob {
    pub id: JobId,
    pub run: RunId,
    pub conflict: bool,
    pub state: JobState,
    /// Its stage, in a run of stages.
    pub stage: Option<u32>,
}

/// What a failure report reads of its job (locked).
#[derive(Debug, Clone)]
pub struct FailingJob {
    pub run: RunId,
    pub attempt: i64,
    /// Failures since the job was last requeued.
    pub failures: i64,
    /// Bumped by every requeue: the failures that count have this epoch.
    pub failure_epoch: i64,
    pub lease: LeaseFields,
}

/// One row for the failures table.
#[derive(Debug, Clone, Copy)]
pub struct NewFailure<'a> {
    pub job: JobId,
    pub attempt: i64,
    pub worker: &'a str,
    pub reason: &'a str,
    pub failed_at: i64,
    pub epoch: i64,
}

/// What a failure report leaves its job with: its next state (pending, or
/// failed for good) and its failure count since it was last requeued.
#[derive(Debug, Clone, Copy)]
pub struct FailureTally {
    pub job: JobId,
    pub next: JobState,
    pub failures: i64,
}

// ---- identities ----

/// A credential: its name (the identity), its role and the hash of its secret.
#[derive(Debug, Clone, Copy)]
pub struct Credential<'a> {
    pub name: &'a str,
    pub role: Role,
    pub hash: &'a str,
}

/// A quarantine of an identity.
#[derive(Debug, Clone, Copy)]
pub struct NewQuarantine<'a> {
    pub worker: &'a str,
    pub reason: &'a str,
    pub since: i64,
}

/// A credential as stored: its role (as stored) and the hash of its secret.
#[derive(Debug, Clone)]
pub struct StoredToken {
    pub role: String,
    pub hash: String,
    pub revoked: bool,
}

/// Which credentials [`IdentityStorage::tokens`] reads.
#[derive(Debug, Clone, Copy)]
pub enum TokenFilter<'a> {
    All,
    Hash(&'a str),
}

/// Transactions, and the locks of identities within them.
#[async_trait]
pub trait Transactions: Send + Sync + 'static {
    /// A transaction: committed by [`Transactions::commit`], rolled back when dropped.
    type Tx: Send;
    /// A new transaction. (A backend that runs one at a time may wait here
    /// for the one before to end.)
    async fn begin(&self) -> Result<Self::Tx, StoreError>;
    /// Makes everything the transaction wrote seen by every later
    /// operation, at once and whole; on an error nothing of it is.
    async fn commit(&self, tx: Self::Tx) -> Result<(), StoreError>;
    /// Undoes everything the transaction wrote and ends it: its locks are
    /// released when this returns. (Dropping a transaction undoes it too,
    /// but a backend may finish that later: sqlx rolls back on the
    /// connection's next use, and until then its rows stay locked.)
    async fn rollback(&self, tx: Self::Tx) -> Result<(), StoreError>;
    /// Takes the lock of each identity, in the order given, until the
    /// transaction ends: another transaction that locks one of them waits
    /// until then, so one identity's leases, completions, failures and
    /// quarantine run one after another. (A backend with one writer at a
    /// time has it already.) Taking a lock the transaction holds is allowed.
    async fn lock_identities(&self, tx: &mut Self::Tx, workers: &[&str]) -> Result<(), StoreError>;
    /// Answers when the database does, on a connection of its own: a busy
    /// pool does not make it fail.
    async fn ping(&self) -> Result<(), StoreError>;
    /// Closes every connection; later calls fail.
    async fn close(&self);
}

/// Runs: creating, finding, listing, cancelling and prioritising them.
#[async_trait]
pub trait RunStorage: Transactions {
    /// The run with this spec (its census's text, counter version and
    /// redundancy: all three must be equal), committed.
    async fn find_run(&self, spec: &RunSpec) -> Result<Option<RunId>, StoreError>;
    /// Clears the run's cancellation; true if it was cancelled.
    async fn resume_run(&self, run: RunId) -> Result<bool, StoreError>;
    /// Inserts the run's row with no jobs yet (its job counts and costs 0,
    /// nothing counted, unfinished, priority 0, not cancelled), its id
    /// higher than every run's before. A run with the same spec is
    /// [`Inserted::Duplicate`] (and the transaction may then be unusable:
    /// the store drops it).
    async fn insert_run(&self, tx: &mut Self::Tx, run: &NewRun<'_>) -> Result<Inserted<RunId>, StoreError>;
    /// Inserts the run's classes (each of at least one job) with nothing
    /// counted (no job done, count sum and contribution 0).
    async fn insert_classes(&self, tx: &mut Self::Tx, run: RunId, classes: &[NewClass<'_>]) -> Result<(), StoreError>;
    /// Inserts pending jobs (attempt 0, round 0, failure epoch 0, no votes,
    /// no count), their ids increasing in the order given (a fold walks a
    /// run's jobs by id, in step with its census's list). A key the run has
    /// already is [`Inserted::Duplicate`] (the transaction may then be
    /// unusable); a job whose class the run does not have is an error, and
    /// nothing of the chunk is inserted.
    async fn insert_jobs(
        &self,
        tx: &mut Self::Tx,
        run: RunId,
        jobs: &[NewJob<'_>],
        now: i64,
    ) -> Result<Inserted<()>, StoreError>;
    /// Sets each listed class's job count.
    async fn set_class_jobs_total(
        &self,
        tx: &mut Self::Tx,
        run: RunId,
        classes: &[(ClassId, i64)],
    ) -> Result<(), StoreError>;
    /// Sets the run's job count, and its jobs remaining to the same, and
    /// the cost of all its jobs (none of it done).
    async fn set_run_jobs_total(&self, tx: &mut Self::Tx, run: RunId, jobs: i64, cost: i64) -> Result<(), StoreError>;
    /// Brings the query planner's picture of the jobs and classes up to
    /// date once a run's rows are committed. A run of 10^7 jobs is most of
    /// its tables at once; until the server samples them again on its own a
    /// planner that still believes them small picks plans that read every
    /// row (Postgres leased and reported at a tenth of its speed for the
    /// first minute). A backend that needs nothing does nothing.
    async fn refresh_statistics(&self) -> Result<(), StoreError> {
        Ok(())
    }
    /// The run's census (as stored) and its number of classes, in `tx` or
    /// on its own; `None` for an unknown run.
    async fn run_outline(&self, tx: Option<&mut Self::Tx>, run: RunId) -> Result<Option<RunOutline>, StoreError>;
    /// Every run (or only `run`), oldest (lowest id) first.
    async fn runs(&self, run: Option<RunId>) -> Result<Vec<RunRecord>, StoreError>;
    /// The run's counters and answer, in `tx` or on its own; `None` for an
    /// unknown run.
    async fn run_state(&self, tx: Option<&mut Self::Tx>, run: RunId) -> Result<Option<RunState>, StoreError>;
    /// The census of each job's run (unknown jobs are left out).
    async fn job_censuses(&self, jobs: &[JobId]) -> Result<Vec<JobCensus>, StoreError>;
    /// Marks the run cancelled at `now`, unless it is already (then its
    /// first cancellation's time stays).
    async fn mark_cancelled(&self, tx: &mut Self::Tx, run: RunId, now: i64) -> Result<(), StoreError>;
    async fn set_priority(&self, run: RunId, priority: i64) -> Result<(), StoreError>;
}

/// The queue: leases and heartbeats.
#[async_trait]
pub trait QueueStorage: Transactions {
    /// Unfinished, uncancelled runs (or only `run`, if it is one), highest
    /// priority first, then oldest.
    async fn open_runs(&self, tx: Option<&mut Self::Tx>, run: Option<RunId>) -> Result<Vec<OpenRun>, StoreError>;
    /// How many leases the identity holds at `now` (of `run` only, if
    /// given): its leased jobs whose lease expires at `now` or later.
    async fn held_leases(
        &self,
        tx: &mut Self::Tx,
        worker: &str,
        run: Option<RunId>,
        now: i64,
    ) -> Result<i64, StoreError>;
    /// How many jobs the identity holds in the leased state, expired or
    /// not: the count the database keeps by itself (see the module's
    /// rules; SQL: migration `owner_leases`), a few rows to read, and never
    /// fewer than [`Self::held_leases`].
    async fn leases_counted(&self, tx: &mut Self::Tx, worker: &str) -> Result<i64, StoreError>;
    /// Leases up to `wanted` jobs of one run that are [`Waiting`] and
    /// [`OpenTo`] the identity (with `max_failures`), of `stage` only if
    /// given; pending jobs from id `from` on, in id order; expired leases
    /// oldest expiry first. Jobs other transactions hold are skipped, not
    /// waited for. Each becomes leased to `worker`, its attempt one more,
    /// its token `{token_salt}-{job id}-{attempt}`, started at `now`,
    /// expiring at `expires_at`. With [`LeaseJobs::own_expired_by`], the
    /// identity's own leases that expired since then are left to others.
    /// Returns them.
    async fn lease_jobs(&self, tx: &mut Self::Tx, lease: &LeaseJobs<'_>) -> Result<Vec<LeasedJob>, StoreError>;
    /// Whether any job of the run is leased with a lease expired before
    /// `now` (so not taken again yet), in `tx`: after a look that came
    /// back short, whether what it left is there for other identities.
    async fn has_expired_leases(&self, tx: &mut Self::Tx, run: RunId, now: i64) -> Result<bool, StoreError>;
    /// The lowest pending job of the run (of its `stage`, in a run of
    /// stages) with an id below `below`, skipping jobs other transactions
    /// hold, in `tx`: after a scan from the first pending job, one it
    /// passed (not open to its identity).
    async fn first_pending_below(
        &self,
        tx: &mut Self::Tx,
        run: RunId,
        stage: Option<u32>,
        below: JobId,
    ) -> Result<Option<JobId>, StoreError>;
    /// Whether any job of the run in the state ([`OpenTo::state`]) is
    /// [`OpenTo`] the identity.
    async fn has_job_open_to(&self, open: &OpenTo<'_>) -> Result<bool, StoreError>;
    /// The lowest stage of a run of stages holding a pending, a leased and
    /// a failed job (`None`: no such job, or a run of one stage), read at
    /// once (so the three agree), in `tx` or on its own.
    async fn lowest_stages(&self, tx: Option<&mut Self::Tx>, run: RunId) -> Result<LowestStages, StoreError>;
    /// Extends the leases [`ExtendLeases`] names that `worker` holds at
    /// `now` with that token (leased, its owner, not expired), of runs not
    /// cancelled, to `expires_at` but never past the lease's start plus
    /// the longest lifetime (the larger of `max_lifetime_ms` and the run's
    /// own; the shorter one of a contended run), and none whose start plus that lifetime is `now` or earlier.
    /// Returns the tokens extended; the rest are left as they are.
    async fn extend_leases(&self, extend: &ExtendLeases<'_>) -> Result<HashSet<String>, StoreError>;
    /// Puts every leased job of the run, or of the identity ([`HeldBy`]),
    /// expired or not, back to pending, their leases retired.
    async fn release_leases(&self, tx: &mut Self::Tx, held_by: HeldBy<'_>, now: i64) -> Result<(), StoreError>;
    /// The leases of these jobs, as their rows hold them, whatever their
    /// state (unknown jobs are left out).
    async fn leases_of(&self, jobs: &[JobId]) -> Result<Vec<LeaseRecord>, StoreError>;
}

/// Recording a batch of reports: what [`crate::Store`] loads to decide
/// and writes once it has.
#[async_trait]
pub trait ResultStorage: Transactions {
    /// The jobs `ids` (sorted), locked in that order, with their runs'
    /// redundancy, cancellation and counter version (unknown ones are left
    /// out).
    async fn load_jobs(&self, tx: &mut Self::Tx, ids: &[JobId]) -> Result<Vec<JobRecord>, StoreError>;
    /// Every vote and accepted result of the jobs `ids`, of any round, in
    /// the order they were recorded, but those of quarantined identities,
    /// which never count.
    async fn load_votes(&self, tx: &mut Self::Tx, ids: &[JobId]) -> Result<Vec<VoteRecord>, StoreError>;
    /// Appends the results, each finished at `now`. Never changed after.
    async fn insert_results(&self, tx: &mut Self::Tx, results: &[NewResult], now: i64) -> Result<(), StoreError>;
    /// Each job takes its new state, its count (if given; else it keeps
    /// the one it has) and `votes_added` more votes; its lease is retired.
    async fn mark_decided(
        &self,
        tx: &mut Self::Tx,
        jobs: &BTreeMap<JobId, JobChange>,
        now: i64,
    ) -> Result<(), StoreError>;
    /// Flags the jobs with an open conflict.
    async fn flag_conflicts(&self, tx: &mut Self::Tx, jobs: &[JobId]) -> Result<(), StoreError>;
    /// Adds counts and done jobs to classes (locked in key order), exactly,
    /// with their contributions (weight x count sum^class_power of their
    /// run) and their runs' weighted sums so far (the sum of their classes'
    /// contributions).
    async fn add_to_classes(&self, tx: &mut Self::Tx, changes: &ClassChanges) -> Result<(), StoreError>;
    /// Adds each identity's accepted jobs and their counts to its
    /// statistics in the run (a new row the first time), seen at `now`.
    async fn add_to_worker_stats(
        &self,
        tx: &mut Self::Tx,
        workers: &BTreeMap<(RunId, String), WorkerTally>,
        now: i64,
    ) -> Result<(), StoreError>;
    /// Adds to the run's counters: done jobs (taken from those
    /// remaining) and their cost, conflicts, failed jobs and the counted
    /// sum; returns the run's state after it. An unknown run is
    /// [`StoreError::UnknownRun`].
    async fn add_to_run(&self, tx: &mut Self::Tx, run: RunId, change: &RunChange) -> Result<RunState, StoreError>;
    /// Appends the rejections, each at `now`. Never changed after.
    async fn insert_rejections(&self, tx: &mut Self::Tx, rejections: &[Rejection], now: i64) -> Result<(), StoreError>;
    /// Appends the refused report, at `now`. Never changed after.
    async fn insert_refused_report(
        &self,
        tx: &mut Self::Tx,
        report: &RefusedReport,
        now: i64,
    ) -> Result<(), StoreError>;
    /// How many results of the identity were rejected, in every run, and
    /// how many of its reports were refused ([`RefusedReport`]): what its
    /// quarantine counts.
    async fn rejections_of(&self, tx: &mut Self::Tx, worker: &str) -> Result<i64, StoreError>;
}

/// Answers and what is shown of a run: the fold's pages, the sums it
/// checks, progress.
#[async_trait]
pub trait AnswerStorage: Transactions {
    /// A page of a fold ([`FoldPage`]), in `tx` (finishing a run) or on its
    /// own (rechecking a finished one: each page then sees the database's
    /// current statistics, where one long transaction may keep a plan made
    /// before the run's rows were counted).
    async fn fold_page(&self, tx: Option<&mut Self::Tx>, page: &FoldPage) -> Result<Vec<FoldRow>, StoreError>;
    /// A page of the run's classes with their sums, in class order.
    async fn class_sums_page(&self, tx: &mut Self::Tx, page: &ClassPage) -> Result<Vec<ClassSums>, StoreError>;
    /// The sum of the classes' contributions so far, in `tx` or on its own.
    async fn weighted_sum_so_far(&self, tx: Option<&mut Self::Tx>, run: RunId) -> Result<BigUint, StoreError>;
    /// Marks the run finished at `finished_at` with its weighted sum and answer.
    async fn write_answer(&self, tx: &mut Self::Tx, answer: &FinishedAnswer<'_>) -> Result<(), StoreError>;
    /// How many of the run's jobs are leased, expired or not: the count
    /// the database keeps by itself (see the module's rules; SQL:
    /// migration `run_leases`), without reading the jobs: a run's leases
    /// move on thousands of times a second.
    async fn leased_jobs(&self, run: RunId) -> Result<i64, StoreError>;
    /// How many results were rejected in the run.
    async fn rejections_in(&self, run: RunId) -> Result<i64, StoreError>;
    /// The run's newest results finished at `since` or later, at most
    /// `limit` of them ([`Recent`]): how many, their jobs' cost, and when
    /// the oldest of them finished.
    async fn recent_results(&self, recent: &Recent) -> Result<RecentResults, StoreError>;
    /// Each identity's statistics in the run, most jobs first (then by
    /// name), at most `limit` of them.
    async fn worker_stats(&self, run: RunId, limit: u32) -> Result<Vec<WorkerProgress>, StoreError>;
    /// How many identities have statistics in the run.
    async fn workers_of(&self, run: RunId) -> Result<i64, StoreError>;
    /// A page of the run's classes with their sums, in class order.
    async fn class_totals(&self, page: &ClassPage) -> Result<Vec<ClassTotal>, StoreError>;
    /// A page of the accepted counts of a run's done jobs ([`AcceptedPage`]).
    async fn accepted_counts(&self, page: &AcceptedPage) -> Result<Vec<AcceptedCount>, StoreError>;
}

/// Recounts, failures and requeues: reopening jobs for a new round.
#[async_trait]
pub trait RemedyStorage: Transactions {
    /// Jobs with an open conflict that nobody is counting (pending, failed,
    /// or leased past its expiry) and that have not changed since
    /// `unchanged_since` (ms), with their runs' census text, by id, at most
    /// `limit`; none of a cancelled run.
    async fn conflicts_waiting(
        &self,
        unchanged_since: i64,
        now: i64,
        limit: u32,
    ) -> Result<Vec<WaitingConflict>, StoreError>;
    /// The jobs `ids` (sorted), locked in that order, with what reopening
    /// them takes out (unknown ones are left out).
    async fn lock_jobs_to_reopen(&self, tx: &mut Self::Tx, ids: &[JobId]) -> Result<Vec<ReopenedJob>, StoreError>;
    /// Takes counts and done jobs out of classes, exactly (the reverse of
    /// [`ResultStorage::add_to_classes`], contributions and weighted sums
    /// so far included).
    async fn take_out_of_classes(&self, tx: &mut Self::Tx, changes: &ClassChanges) -> Result<(), StoreError>;
    /// Takes reopened jobs out of the run's counters ([`RunTakeOut`]); the
    /// run is unfinished again (no finish time, weighted sum or answer).
    async fn take_out_of_run(&self, tx: &mut Self::Tx, run: RunId, take_out: &RunTakeOut) -> Result<(), StoreError>;
    /// Each job is pending in a new round (its round one more): count,
    /// votes, conflict and failures cleared, a new failure epoch, its lease
    /// retired. Its results stay where they are.
    async fn start_new_round(&self, tx: &mut Self::Tx, ids: &[JobId], now: i64) -> Result<(), StoreError>;
    /// The jobs whose current round holds a result of the identity that
    /// counts (its accepted result, or a vote that agrees with the accepted
    /// count or still waits for a quorum), by id; not a job with an open
    /// conflict, which keeps its other identities' votes and is decided by
    /// a quorum of them or by the coordinator's own count (a quarantined
    /// identity's votes never count: [`ResultStorage::load_votes`]).
    async fn jobs_counted_by(&self, tx: &mut Self::Tx, worker: &str) -> Result<Vec<JobId>, StoreError>;
    /// The job, locked, with its conflict flag; `None` if unknown.
    async fn lock_flagged_job(&self, tx: &mut Self::Tx, job: JobId) -> Result<Option<FlaggedJob>, StoreError>;
    /// The jobs of `run`'s stages after `stage` that hold anything of their
    /// round (not pending, or pending with votes or failures), by id.
    async fn jobs_after_stage(&self, tx: &mut Self::Tx, run: RunId, stage: u32) -> Result<Vec<JobId>, StoreError>;
    /// The run's failed jobs (or only `job`, if it is one), locked by id.
    async fn lock_failed_jobs(
        &self,
        tx: &mut Self::Tx,
        run: RunId,
        job: Option<JobId>,
    ) -> Result<Vec<FlaggedJob>, StoreError>;
    /// The job's state as stored, if it is a job of the run.
    async fn job_state(&self, tx: &mut Self::Tx, run: RunId, job: JobId) -> Result<Option<String>, StoreError>;
    /// A failed job is pending again, its failures cleared (a new failure
    /// epoch, the same round), its lease retired.
    async fn requeue_failed_job(&self, tx: &mut Self::Tx, job: JobId, now: i64) -> Result<(), StoreError>;
    /// Adds `jobs` (or takes them out, when negative) to the run's failed jobs.
    async fn add_failed_jobs(&self, tx: &mut Self::Tx, run: RunId, jobs: i64) -> Result<(), StoreError>;
    /// The job, locked, as a failure report reads it; `None` if unknown.
    async fn lock_failing_job(&self, tx: &mut Self::Tx, job: JobId) -> Result<Option<FailingJob>, StoreError>;
    /// Appends a failure of the job, in its epoch.
    async fn insert_failure(&self, tx: &mut Self::Tx, failure: &NewFailure<'_>) -> Result<(), StoreError>;
    /// How many distinct identities failed the job in the epoch.
    async fn failing_identities(&self, tx: &mut Self::Tx, job: JobId, epoch: i64) -> Result<i64, StoreError>;
    /// The job takes its next state and failure count; its lease is retired.
    async fn set_failures(&self, tx: &mut Self::Tx, tally: &FailureTally, now: i64) -> Result<(), StoreError>;
    /// How many failures the identity reported, in every run and epoch.
    async fn failures_of(&self, tx: &mut Self::Tx, worker: &str) -> Result<i64, StoreError>;
}

/// Credentials and quarantine. The store keeps each token's name, role
/// and hash; it never sees a secret.
#[async_trait]
pub trait IdentityStorage: Transactions {
    /// Stores a new credential, created at `now`; a name already stored
    /// (revoked or not) is [`Inserted::Duplicate`].
    async fn insert_token(&self, credential: &Credential<'_>, now: i64) -> Result<Inserted<()>, StoreError>;
    /// The credential of that name, revoked or not.
    async fn token_named(&self, name: &str) -> Result<Option<StoredToken>, StoreError>;
    /// Gives the stored credential of that name this role and hash.
    async fn replace_token(&self, credential: &Credential<'_>) -> Result<(), StoreError>;
    /// Revokes the credential at `now` if it is not; true if it was revoked now.
    async fn revoke_token(&self, name: &str, now: i64) -> Result<bool, StoreError>;
    /// Whether a credential of that name is stored, revoked or not.
    async fn token_exists(&self, name: &str) -> Result<bool, StoreError>;
    /// Credentials by name, each with its quarantine and how many of its
    /// results were rejected (in every run) and reports refused: what
    /// [`ResultStorage::rejections_of`] counts.
    async fn tokens(&self, filter: TokenFilter<'_>) -> Result<Vec<TokenRecord>, StoreError>;
    /// Whether the identity is quarantined, in `tx` or on its own.
    async fn is_quarantined(&self, tx: Option<&mut Self::Tx>, worker: &str) -> Result<bool, StoreError>;
    /// Quarantines the identity; false (and the first quarantine kept) if
    /// it was already.
    async fn insert_quarantine(&self, tx: &mut Self::Tx, quarantine: &NewQuarantine<'_>) -> Result<bool, StoreError>;
    /// Every quarantined identity, by name.
    async fn quarantined(&self) -> Result<Vec<QuarantineEntry>, StoreError>;
    /// Ends the identity's quarantine; false if it was not quarantined.
    async fn release_quarantine(&self, worker: &str) -> Result<bool, StoreError>;
}

/// A backend: every named operation the store's rules use. Implemented by
/// whatever implements each of its parts.
pub trait StorageBackend:
    Transactions + RunStorage + QueueStorage + ResultStorage + AnswerStorage + RemedyStorage + IdentityStorage
{
}

impl<B> StorageBackend for B where
    B: Transactions + RunStorage + QueueStorage + ResultStorage + AnswerStorage + RemedyStorage + IdentityStorage
{
}
