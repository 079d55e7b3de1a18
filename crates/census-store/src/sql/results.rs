//! What a batch of reports reads and writes in SQL: its jobs (locked) and
//! their votes; results, rejections and refused reports appended; jobs,
//! classes, identities' statistics and runs updated, a statement a chunk
//! of rows where it can.

use std::collections::BTreeMap;

use async_trait::async_trait;
use sqlx::FromRow;

use super::exact::Direction;
use super::queue::RETIRE_LEASE;
use super::runs::{RUN_STATE_COLUMNS, RunStateRow};
use super::{Db, LeaseColumns, SqlBackend, SqlTx, bigint, change_classes_sql, text, values_rows};
use crate::backend::{
    ClassChanges, JobChange, JobRecord, NewResult, RefusedReport, Rejection, ResultStorage, RunChange, RunState,
    VoteRecord, WorkerTally, parse_count,
};
use crate::{JobId, RunId, StoreError};

/// SQL for how many results of the identity `worker` (an SQL expression)
/// were rejected and reports refused, in every run: what its quarantine
/// counts (`ResultStorage::rejections_of`) and its credential shows.
pub(super) fn rejected_of(worker: &str) -> String {
    format!(
        "((SELECT COUNT(*) FROM rejections WHERE worker = {worker})
          + (SELECT COUNT(*) FROM refused_reports WHERE worker = {worker}))"
    )
}

/// A job of the batch as [`ResultStorage::load_jobs`] reads it.
#[derive(FromRow)]
struct JobRow {
    id: JobId,
    run_id: RunId,
    class_id: i64,
    key: String,
    attempt: i64,
    #[sqlx(flatten)]
    lease: LeaseColumns,
    votes: i64,
    redundancy: i64,
    cancelled_at: Option<i64>,
    round: i64,
    counter_version: String,
    cost: i64,
    conflict: i64,
}

/// A vote or accepted result of a job.
#[derive(FromRow)]
struct VoteRow {
    job_id: JobId,
    worker: String,
    /// Decimal text.
    count: String,
    round: i64,
    outcome: String,
}

#[async_trait]
impl ResultStorage for SqlBackend {
    async fn load_jobs(&self, tx: &mut SqlTx, ids: &[JobId]) -> Result<Vec<JobRecord>, StoreError> {
        let rows = self
            .select_by_ids(tx, ids, |ids| {
                format!(
                    "SELECT j.id, j.run_id, j.class_id, j.key, j.state, j.attempt, j.lease_token, j.lease_owner,
                            j.lease_expires_at, j.votes, r.redundancy, r.cancelled_at, j.round, r.counter_version, j.cost,
                            j.conflict
                     FROM jobs j JOIN runs r ON r.id = j.run_id WHERE j.id IN ({ids}) ORDER BY j.id {}",
                    self.dialect.for_update()
                )
            })
            .await?;
        rows.iter()
            .map(|row| {
                let row = JobRow::from_row(row).db()?;
                Ok(JobRecord {
                    id: row.id,
                    run: row.run_id,
                    class: row.class_id,
                    key: row.key,
                    attempt: row.attempt,
                    lease: row.lease.fields()?,
                    votes: row.votes,
                    round: row.round,
                    redundancy: row.redundancy as u32,
                    cancelled: row.cancelled_at.is_some(),
                    counter_version: row.counter_version,
                    cost: row.cost,
                    conflict: row.conflict != 0,
                })
            })
            .collect()
    }

    async fn load_votes(&self, tx: &mut SqlTx, ids: &[JobId]) -> Result<Vec<VoteRecord>, StoreError> {
        let rows = self
            .select_by_ids(tx, ids, |ids| {
                format!(
                    "SELECT job_id, worker, CAST(count AS TEXT) AS count, round, outcome FROM results
                     WHERE job_id IN ({ids}) AND outcome IN ('vote', 'accepted')
                       AND NOT EXISTS (SELECT 1 FROM quarantine q WHERE q.worker = results.worker)
                     ORDER BY id"
                )
            })
            .await?;
        rows.iter()
            .map(|row| {
                let row = VoteRow::from_row(row).db()?;
                Ok(VoteRecord {
                    job: row.job_id,
                    worker: row.worker,
                    count: parse_count(&row.count)?,
                    round: row.round,
                    outcome: row.outcome.parse()?,
                })
            })
            .collect()
    }

    async fn insert_results(&self, tx: &mut SqlTx, results: &[NewResult], now: i64) -> Result<(), StoreError> {
        const COLUMNS: usize = 10;
        for chunk in results.chunks(self.dialect.rows_per_statement(300, COLUMNS)) {
            let rows: Vec<String> = (0..chunk.len())
                .map(|i| {
                    let p = i * COLUMNS + 2;
                    let params: Vec<String> = (p..p + COLUMNS)
                        .map(|n| if n == p + 5 { self.dialect.count(&format!("${n}")) } else { format!("${n}") })
                        .collect();
                    format!("({}, $1)", params.join(", "))
                })
                .collect();
            let sql = format!(
                "INSERT INTO results (job_id, run_id, attempt, round, worker, count, elapsed_ms, counter_version, outcome, cost, finished_at)
                 VALUES {}",
                rows.join(", ")
            );
            let mut query = sqlx::query(&sql).bind(now);
            for r in chunk {
                query = query
                    .bind(r.job)
                    .bind(r.run)
                    .bind(r.attempt)
                    .bind(r.round)
                    .bind(r.worker.clone())
                    .bind(r.count.to_string())
                    .bind(r.elapsed_ms)
                    .bind(r.counter_version.clone())
                    .bind(r.outcome.as_str())
                    .bind(r.cost);
            }
            query.execute(&mut **tx).await.db()?;
        }
        Ok(())
    }

    /// One statement for many jobs (VALUES columns are column1.. on both
    /// backends), not one round trip a job. A job done has no open conflict.
    async fn mark_decided(
        &self,
        tx: &mut SqlTx,
        jobs: &BTreeMap<JobId, JobChange>,
        now: i64,
    ) -> Result<(), StoreError> {
        let decided: Vec<_> = jobs.iter().collect();
        let count = |p: &str| self.dialect.count(p);
        for chunk in decided.chunks(self.dialect.rows_per_statement(500, 4)) {
            let rows = values_rows(chunk.len(), 2, &[&bigint, &text, &count, &bigint]);
            let sql = format!(
                "UPDATE jobs SET state = v.column2, count = COALESCE(v.column3, jobs.count), votes = jobs.votes + v.column4,
                        conflict = CASE WHEN v.column2 = 'done' THEN 0 ELSE jobs.conflict END,
                        {RETIRE_LEASE}, updated_at = $1
                 FROM (VALUES {rows}) AS v WHERE jobs.id = v.column1"
            );
            let mut query = sqlx::query(&sql).bind(now);
            for &(&job, change) in chunk {
                query = query
                    .bind(job)
                    .bind(change.state.as_str())
                    .bind(change.count.map(|count| count.to_string()))
                    .bind(change.votes_added);
            }
            query.execute(&mut **tx).await.db()?;
        }
        Ok(())
    }

    async fn flag_conflicts(&self, tx: &mut SqlTx, jobs: &[JobId]) -> Result<(), StoreError> {
        for job in jobs {
            sqlx::query("UPDATE jobs SET conflict = 1 WHERE id = $1").bind(*job).execute(&mut **tx).await.db()?;
        }
        Ok(())
    }

    /// Postgres adds in NUMERIC, one statement per chunk of classes, not
    /// one a class (a batch of the 9x9 catalogue touches about a hundred),
    /// which locks the chunk's rows in (run, class) order and adds the
    /// change of their contributions to their runs' weighted sums so far
    /// (`change_classes_sql`); SQLite adds in Rust (`exact.rs`).
    async fn add_to_classes(&self, tx: &mut SqlTx, changes: &ClassChanges) -> Result<(), StoreError> {
        if !self.dialect.sums_in_sql() {
            return self.change_classes_exactly(tx, changes, Direction::Add).await;
        }
        let classes: Vec<_> = changes.iter().collect();
        for chunk in classes.chunks(self.dialect.rows_per_statement(500, 4)) {
            let sql = change_classes_sql(chunk.len(), Direction::Add);
            let mut update = sqlx::query(&sql);
            for &(&(run, class), (count, jobs_done)) in chunk {
                update = update.bind(run).bind(class).bind(count.to_string()).bind(*jobs_done);
            }
            update.execute(&mut **tx).await.db()?;
        }
        Ok(())
    }

    /// Postgres adds; SQLite is given the exact new sum.
    async fn add_to_worker_stats(
        &self,
        tx: &mut SqlTx,
        workers: &BTreeMap<(RunId, String), WorkerTally>,
        now: i64,
    ) -> Result<(), StoreError> {
        for ((run, worker), tally) in workers {
            let (completions, new_completions) = if self.dialect.sums_in_sql() {
                (tally.completions.to_string(), "worker_stats.completions + excluded.completions")
            } else {
                (self.completions_after(tx, *run, worker, &tally.completions).await?, "excluded.completions")
            };
            sqlx::query(&format!(
                "INSERT INTO worker_stats (run_id, worker, jobs, completions, last_seen) VALUES ($1, $2, $3, {}, $5)
                 ON CONFLICT (run_id, worker) DO UPDATE SET jobs = worker_stats.jobs + excluded.jobs,
                     completions = {new_completions}, last_seen = excluded.last_seen",
                self.dialect.count("$4")
            ))
            .bind(*run)
            .bind(worker.as_str())
            .bind(tally.jobs)
            .bind(completions)
            .bind(now)
            .execute(&mut **tx)
            .await
            .db()?;
        }
        Ok(())
    }

    async fn add_to_run(&self, tx: &mut SqlTx, run: RunId, change: &RunChange) -> Result<RunState, StoreError> {
        let (counted, new_counted) = self.new_counted(tx, run, &change.counted, Direction::Add, "$5").await?;
        // The run's state after the change, in the same statement: the
        // run's row is the one every report of the run updates, so it is
        // locked from here to the commit, and one round trip less here is
        // one less for every other report waiting for it.
        let row: RunStateRow = sqlx::query_as(&format!(
            "UPDATE runs SET jobs_remaining = jobs_remaining - $2, open_conflicts = open_conflicts + $3,
                    failed_jobs = failed_jobs + $4, counted = {new_counted}, cost_done = cost_done + $6 WHERE id = $1
             RETURNING {RUN_STATE_COLUMNS}"
        ))
        .bind(run)
        .bind(change.done)
        .bind(change.conflicts_opened)
        .bind(change.failed_added)
        .bind(counted)
        .bind(change.cost_done)
        .fetch_optional(&mut **tx)
        .await
        .db()?
        .ok_or(StoreError::UnknownRun(run))?;
        Ok(row.into_state())
    }

    async fn insert_rejections(&self, tx: &mut SqlTx, rejections: &[Rejection], now: i64) -> Result<(), StoreError> {
        let insert = format!(
            "INSERT INTO rejections (job_id, run_id, attempt, worker, count, reason, rejected_at)
             VALUES ($1, $2, $3, $4, {}, $6, $7)",
            self.dialect.big_number("$5")
        );
        for r in rejections {
            sqlx::query(&insert)
                .bind(r.job)
                .bind(r.run)
                .bind(r.attempt)
                .bind(r.worker.clone())
                .bind(r.count.to_string())
                .bind(r.reason.clone())
                .bind(now)
                .execute(&mut **tx)
                .await
                .db()?;
        }
        Ok(())
    }

    async fn insert_refused_report(&self, tx: &mut SqlTx, report: &RefusedReport, now: i64) -> Result<(), StoreError> {
        sqlx::query("INSERT INTO refused_reports (worker, job_named, reason, refused_at) VALUES ($1, $2, $3, $4)")
            .bind(report.worker.clone())
            .bind(report.job_named)
            .bind(report.reason.clone())
            .bind(now)
            .execute(&mut **tx)
            .await
            .db()?;
        Ok(())
    }

    async fn rejections_of(&self, tx: &mut SqlTx, worker: &str) -> Result<i64, StoreError> {
        sqlx::query_scalar(&format!("SELECT {}", rejected_of("$1"))).bind(worker).fetch_one(&mut **tx).await.db()
    }
}
