//! The one implementation of [`JobStore`], on Postgres or SQLite through
//! sqlx's `Any` driver. The SQL is shared; the few places where the two
//! dialects differ are the methods of `Backend`.
//!
//! The rules are above the SQL, in `decision`: pure functions over named
//! types, with no database (what a report does, what a batch changes, when
//! an identity is quarantined, when a job fails for good, who holds a
//! lease). The SQL files load the rows the rules read and write what they
//! decide, as named steps with typed rows (`#[derive(sqlx::FromRow)]`
//! structs read by column name).
//!
//! One file a concern: `backend` (opening, dialects), `runs`, `queue`
//! (leases and heartbeats), `fencing` (whether a reporter holds its
//! leases), `decision` (the rules), `completion` (a batch of reports as
//! load -> decide -> apply), `remedies` (recount, fail, requeue), `totals`
//! (finishing a run, progress and sums), `exact` (SQLite's exact sums) and
//! `auth` (tokens and quarantine). This file holds the store, the helpers
//! the files share, and the trait's table of contents.

mod auth;
mod backend;
mod completion;
mod decision;
mod exact;
mod fencing;
mod queue;
mod remedies;
mod runs;
mod totals;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use census_math::census::Census;
use num_bigint::BigUint;
use sqlx::AnyPool;
use sqlx::any::AnyRow;

use backend::Backend;
pub(crate) use backend::JobState;

use crate::{
    ClassTotal, CompleteOutcome, Completion, HeartbeatOutcome, JobId, JobSpec, JobStore, JobStream, Lease, LeaseCheck,
    Progress, QuarantineEntry, Role, RunId, RunSpec, RunSummary, RunTotal, StoreConfig, StoreError, TokenRecord,
};

/// Immutable facts about a run, cached so a lease needs no join.
struct RunFacts {
    /// The run's census, handed to workers with each lease.
    census: Census,
    classes: u64,
}

/// The job store on Postgres or SQLite.
pub struct SqlStore {
    pool: AnyPool,
    /// One connection of its own for [`JobStore::ping`], so that health
    /// tells whether the database answers, not whether the pool is busy.
    health: AnyPool,
    backend: Backend,
    config: StoreConfig,
    runs: Mutex<HashMap<RunId, Arc<RunFacts>>>,
    /// Each census's own jobs, which a fold compares a run's jobs with.
    expected: Mutex<HashMap<Census, Arc<Vec<JobSpec>>>>,
    /// Runs finished by this value's committed transactions, not yet taken.
    finished: Mutex<Vec<RunId>>,
    /// Finished runs' answers, folded again from the accepted results and
    /// found equal to the stored answer and sum (which key them): a status
    /// poll of a finished run reads its row, not its every result.
    verified_finals: Mutex<HashMap<RunId, totals::VerifiedFinal>>,
}

/// How many rows a page of a walk over a run's jobs, results or classes
/// reads (a fold, its check, an exact rebuild): a few MB at most, so a run's
/// rows are never all in memory at once.
const PAGE: i64 = 10_000;

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).expect("the clock is after 1970").as_millis() as i64
}

/// A run's census as stored, read once at the row: text this code cannot
/// read is an error naming the run, never a default census.
fn read_census(run: RunId, text: &str) -> Result<Census, StoreError> {
    text.parse().map_err(|source| StoreError::UnreadableCensus { run, source })
}

/// A decimal from the database as a big integer (Postgres may print a
/// NUMERIC with a fractional part of zeros).
fn parse_big(text: &str) -> Result<BigUint, StoreError> {
    whole_part(text)
        .and_then(|integer| integer.parse().ok())
        .ok_or_else(|| StoreError::Internal(format!("{text:?} is not a whole number")))
}

/// A count or weight from the database.
fn parse_count(text: &str) -> Result<u128, StoreError> {
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

/// The lease columns of a job row, read by name: what
/// [`decision::LeaseFields`] is made of.
#[derive(sqlx::FromRow)]
struct LeaseColumns {
    state: String,
    lease_token: Option<String>,
    lease_owner: Option<String>,
    lease_expires_at: Option<i64>,
}

impl LeaseColumns {
    fn fields(self) -> Result<decision::LeaseFields, StoreError> {
        Ok(decision::LeaseFields {
            state: self.state.parse()?,
            token: self.lease_token,
            owner: self.lease_owner,
            expires_at: self.lease_expires_at,
        })
    }
}

/// The rows of a `VALUES` list: `rows` tuples of `columns`, each column an
/// expression around its parameter, numbered from `$first` row by row. (The
/// casts give both backends the column types; VALUES columns are column1,
/// column2, ... on both.)
pub(super) fn values_rows(rows: usize, first: usize, columns: &[&dyn Fn(&str) -> String]) -> String {
    let row = |i: usize| {
        let cells: Vec<String> = columns
            .iter()
            .enumerate()
            .map(|(j, column)| column(&format!("${}", first + i * columns.len() + j)))
            .collect();
        format!("({})", cells.join(", "))
    };
    (0..rows).map(row).collect::<Vec<_>>().join(", ")
}

pub(super) fn bigint(parameter: &str) -> String {
    format!("CAST({parameter} AS BIGINT)")
}

pub(super) fn text(parameter: &str) -> String {
    format!("CAST({parameter} AS TEXT)")
}

/// A parameter as it is.
pub(super) fn plain(parameter: &str) -> String {
    parameter.to_string()
}

/// A lease token prefix, random for every lease call; the job id and
/// attempt number complete it, so two attempts never share a token.
fn token_salt() -> String {
    format!("{:032x}", rand::random::<u128>())
}

impl SqlStore {
    /// The rows of one select for every id of `ids`: `select` writes the
    /// statement around the placeholders (`$1, $2, ...`) of its
    /// `IN (...)`, and it runs once a chunk of as many ids as the backend
    /// binds at once (SQLite takes few parameters). Chunks go in the order
    /// of `ids`, so rows locked `FOR UPDATE` by sorted ids stay in order.
    async fn select_by_ids(
        &self,
        connection: &mut sqlx::AnyConnection,
        ids: &[i64],
        select: impl Fn(&str) -> String,
    ) -> Result<Vec<AnyRow>, StoreError> {
        let mut rows = Vec::with_capacity(ids.len());
        for chunk in ids.chunks(self.backend.rows_per_statement(500, 1)) {
            let placeholders: Vec<String> = (1..=chunk.len()).map(|i| format!("${i}")).collect();
            let sql = select(&placeholders.join(", "));
            let mut query = sqlx::query(&sql);
            for id in chunk {
                query = query.bind(*id);
            }
            rows.extend(query.fetch_all(&mut *connection).await?);
        }
        Ok(rows)
    }
}

#[async_trait]
impl JobStore for SqlStore {
    async fn create_run_streaming(&self, spec: &RunSpec, jobs: JobStream) -> Result<RunId, StoreError> {
        self.insert_run(spec, jobs).await
    }

    async fn censuses_of(&self, jobs: &[JobId]) -> Result<HashMap<JobId, Census>, StoreError> {
        self.job_censuses(jobs).await
    }

    async fn lease(&self, run: Option<RunId>, worker: &str, max: u32, ttl: Duration) -> Result<Vec<Lease>, StoreError> {
        self.lease_jobs(run, worker, max, ttl).await
    }

    async fn has_work_for(&self, worker: &str, run: Option<RunId>) -> Result<bool, StoreError> {
        self.work_left_for(worker, run).await
    }

    async fn heartbeat(&self, worker: &str, tokens: &[String], ttl: Duration) -> Result<HeartbeatOutcome, StoreError> {
        self.extend_leases(worker, tokens, ttl).await
    }

    async fn cancel_run(&self, run: RunId) -> Result<(), StoreError> {
        self.cancel(run).await
    }

    async fn set_priority(&self, run: RunId, priority: i64) -> Result<(), StoreError> {
        self.prioritize(run, priority).await
    }

    async fn progress(&self, run: RunId) -> Result<Progress, StoreError> {
        self.read_progress(run).await
    }

    async fn total(&self, run: RunId) -> Result<RunTotal, StoreError> {
        self.read_total(run).await
    }

    async fn class_totals(&self, run: RunId) -> Result<Vec<ClassTotal>, StoreError> {
        self.read_class_totals(run).await
    }
    async fn list_runs(&self) -> Result<Vec<RunSummary>, StoreError> {
        self.runs_where("1 = 1", None).await
    }

    async fn run(&self, run: RunId) -> Result<RunSummary, StoreError> {
        self.runs_where("r.id = $1", Some(run)).await?.pop().ok_or(StoreError::UnknownRun(run))
    }

    async fn complete_many(
        &self,
        completions: &[Completion],
    ) -> Result<Vec<Result<CompleteOutcome, StoreError>>, StoreError> {
        self.complete_batch(completions).await
    }

    async fn check_leases(&self, completions: &[Completion]) -> Result<Vec<LeaseCheck>, StoreError> {
        self.fence(completions).await
    }

    async fn recount(&self, job: JobId) -> Result<(), StoreError> {
        self.recount_job(job).await
    }

    async fn fail(&self, job: JobId, token: &str, worker: &str, reason: &str) -> Result<(), StoreError> {
        self.fail_job(job, token, worker, reason).await
    }

    async fn requeue(&self, run: RunId, job: Option<JobId>) -> Result<u64, StoreError> {
        self.requeue_jobs(run, job).await
    }

    fn take_finished_runs(&self) -> Vec<RunId> {
        std::mem::take(&mut *self.finished.lock().expect("never poisoned"))
    }

    async fn ping(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1").execute(&self.health).await?;
        Ok(())
    }

    async fn answer_version(&self, run: RunId) -> Result<Option<String>, StoreError> {
        let row = self.ensure_run(run).await?;
        let Some(finished) = row.finished_at else { return Ok(None) };
        let (weighted_sum, answer) = (row.weighted_sum.unwrap_or_default(), row.answer.unwrap_or_default());
        Ok(Some(format!("{finished}/{}/{weighted_sum}/{answer}", row.open_conflicts)))
    }

    async fn close(&self) {
        if self.backend == Backend::Sqlite {
            let _ = sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)").execute(&self.pool).await;
        }
        self.pool.close().await;
        self.health.close().await;
    }

    async fn create_token(&self, name: &str, role: Role, hash: &str) -> Result<(), StoreError> {
        self.insert_token(name, role, hash).await
    }

    async fn import_token(&self, name: &str, role: Role, hash: &str) -> Result<(), StoreError> {
        self.upsert_token(name, role, hash).await
    }

    async fn list_tokens(&self) -> Result<Vec<TokenRecord>, StoreError> {
        self.tokens_where("1 = 1", None).await
    }

    async fn revoke_token(&self, name: &str) -> Result<bool, StoreError> {
        self.revoke(name).await
    }

    async fn find_token(&self, hash: &str) -> Result<Option<TokenRecord>, StoreError> {
        Ok(self.tokens_where("t.hash = $1", Some(hash)).await?.pop())
    }

    async fn is_quarantined(&self, worker: &str) -> Result<bool, StoreError> {
        let row =
            sqlx::query("SELECT 1 FROM quarantine WHERE worker = $1").bind(worker).fetch_optional(&self.pool).await?;
        Ok(row.is_some())
    }

    async fn quarantined(&self) -> Result<Vec<QuarantineEntry>, StoreError> {
        self.quarantine_list().await
    }

    async fn release_quarantine(&self, worker: &str) -> Result<bool, StoreError> {
        let released = sqlx::query("DELETE FROM quarantine WHERE worker = $1").bind(worker).execute(&self.pool).await?;
        if released.rows_affected() > 0 {
            tracing::warn!(worker, "released from quarantine");
        }
        Ok(released.rows_affected() > 0)
    }
}
