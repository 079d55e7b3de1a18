//! Remedies in SQL: reopening jobs for a new round (their counts taken out
//! of classes and runs), failures, requeues.

use async_trait::async_trait;
use sqlx::FromRow;

use super::exact::Direction;
use super::queue::RETIRE_LEASE;
use super::{Db, LeaseColumns, SqlBackend, SqlTx, change_classes_sql, placeholders};
use crate::backend::{
    ClassChanges, FailingJob, FailureTally, FlaggedJob, NewFailure, RemedyStorage, ReopenedJob, RunTakeOut,
    WaitingConflict, parse_big,
};
use crate::{JobId, RunId, StoreError};

/// A job as reopening it reads it.
#[derive(FromRow)]
struct ReopenedRow {
    id: JobId,
    state: String,
    /// Decimal text, when done.
    count: Option<String>,
    conflict: i64,
    run_id: RunId,
    class_id: i64,
    cost: i64,
}

/// A job that may need a conflict resolved, or be recounted.
#[derive(FromRow)]
struct FlaggedRow {
    id: JobId,
    conflict: i64,
    run_id: RunId,
    state: String,
    stage: Option<i64>,
}

/// The columns of a [`FlaggedRow`].
const FLAGGED: &str = "j.id, j.conflict, j.run_id, j.state, j.stage";

impl FlaggedRow {
    fn flagged(self) -> Result<FlaggedJob, StoreError> {
        let stage = self
            .stage
            .map(|stage| {
                u32::try_from(stage).map_err(|_| StoreError::Internal(format!("job {}: stage {stage}", self.id)))
            })
            .transpose()?;
        Ok(FlaggedJob {
            id: self.id,
            run: self.run_id,
            conflict: self.conflict != 0,
            state: self.state.parse()?,
            stage,
        })
    }
}

/// What a failure report reads of its job.
#[derive(FromRow)]
struct FailingRow {
    run_id: RunId,
    attempt: i64,
    failures: i64,
    failure_epoch: i64,
    #[sqlx(flatten)]
    lease: LeaseColumns,
}

#[async_trait]
impl RemedyStorage for SqlBackend {
    /// By the partial index of the jobs in conflict (migration 0016): a
    /// look costs what is in conflict, not the run's jobs.
    async fn conflicts_waiting(
        &self,
        unchanged_since: i64,
        now: i64,
        limit: u32,
    ) -> Result<Vec<WaitingConflict>, StoreError> {
        let rows: Vec<(JobId, RunId, String, String)> = sqlx::query_as(
            "SELECT j.id, j.run_id, j.key, r.census FROM jobs j JOIN runs r ON r.id = j.run_id
             WHERE j.conflict = 1 AND r.cancelled_at IS NULL AND j.updated_at <= $1
               AND (j.state IN ('pending', 'failed') OR (j.state = 'leased' AND j.lease_expires_at < $2))
             ORDER BY j.id LIMIT $3",
        )
        .bind(unchanged_since)
        .bind(now)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await
        .db()?;
        Ok(rows.into_iter().map(|(job, run, key, census)| WaitingConflict { job, run, key, census }).collect())
    }

    async fn lock_jobs_to_reopen(&self, tx: &mut SqlTx, ids: &[JobId]) -> Result<Vec<ReopenedJob>, StoreError> {
        let rows = self
            .select_by_ids(tx, ids, |ids| {
                format!(
                    "SELECT j.id, j.state, CAST(j.count AS TEXT) AS count, j.conflict, j.run_id, j.class_id, j.cost FROM jobs j
                     WHERE j.id IN ({ids}) ORDER BY j.id {}",
                    self.dialect.for_update()
                )
            })
            .await?;
        rows.iter()
            .map(|row| {
                let row = ReopenedRow::from_row(row).db()?;
                Ok(ReopenedJob {
                    id: row.id,
                    run: row.run_id,
                    class: row.class_id,
                    state: row.state.parse()?,
                    count: row.count.as_deref().map(parse_big).transpose()?,
                    conflict: row.conflict != 0,
                    cost: row.cost,
                })
            })
            .collect()
    }

    /// Postgres subtracts in NUMERIC (and from the runs' weighted sums so
    /// far); SQLite in Rust, exactly.
    async fn take_out_of_classes(&self, tx: &mut SqlTx, changes: &ClassChanges) -> Result<(), StoreError> {
        if !self.dialect.sums_in_sql() {
            return self.change_classes_exactly(tx, changes, Direction::TakeOut).await;
        }
        // One class a statement, in key order (their locks' order).
        let sql = change_classes_sql(1, Direction::TakeOut);
        for (&(run, class), (count, done)) in changes {
            sqlx::query(&sql)
                .bind(run)
                .bind(class)
                .bind(count.to_string())
                .bind(*done)
                .execute(&mut **tx)
                .await
                .db()?;
        }
        Ok(())
    }

    async fn take_out_of_run(&self, tx: &mut SqlTx, run: RunId, take_out: &RunTakeOut) -> Result<(), StoreError> {
        let (counted, new_counted) = self.new_counted(tx, run, &take_out.counted, Direction::TakeOut, "$5").await?;
        // Unfinished again: the answer is folded anew when the last job is.
        sqlx::query(&format!(
            "UPDATE runs SET open_conflicts = open_conflicts - $2, jobs_remaining = jobs_remaining + $3,
                    failed_jobs = failed_jobs - $4, counted = {new_counted}, cost_done = cost_done - $6,
                    finished_at = NULL, weighted_sum = NULL, answer = NULL
             WHERE id = $1"
        ))
        .bind(run)
        .bind(take_out.conflicts_closed)
        .bind(take_out.done)
        .bind(take_out.failures_closed)
        .bind(counted)
        .bind(take_out.cost_done)
        .execute(&mut **tx)
        .await
        .db()?;
        Ok(())
    }

    async fn start_new_round(&self, tx: &mut SqlTx, ids: &[JobId], now: i64) -> Result<(), StoreError> {
        for chunk in ids.chunks(self.dialect.rows_per_statement(500, 1)) {
            let sql = format!(
                "UPDATE jobs SET state = 'pending', count = NULL, votes = 0, conflict = 0, failures = 0,
                        round = round + 1, failure_epoch = failure_epoch + 1, {RETIRE_LEASE}, updated_at = $1
                 WHERE id IN ({})",
                placeholders(2, chunk.len())
            );
            let mut query = sqlx::query(&sql).bind(now);
            for id in chunk {
                query = query.bind(*id);
            }
            query.execute(&mut **tx).await.db()?;
        }
        Ok(())
    }

    async fn jobs_counted_by(&self, tx: &mut SqlTx, worker: &str) -> Result<Vec<JobId>, StoreError> {
        sqlx::query_scalar(
            "SELECT DISTINCT j.id FROM results x JOIN jobs j ON j.id = x.job_id AND j.round = x.round
             WHERE x.worker = $1 AND x.outcome IN ('accepted', 'vote')
               AND ((j.state IN ('pending', 'leased') AND j.conflict = 0) OR (j.state = 'done' AND x.count = j.count))
             ORDER BY j.id",
        )
        .bind(worker)
        .fetch_all(&mut **tx)
        .await
        .db()
    }

    async fn lock_flagged_job(&self, tx: &mut SqlTx, job: JobId) -> Result<Option<FlaggedJob>, StoreError> {
        let row: Option<FlaggedRow> =
            sqlx::query_as(&format!("SELECT {FLAGGED} FROM jobs j WHERE j.id = $1 {}", self.dialect.for_update()))
                .bind(job)
                .fetch_optional(&mut **tx)
                .await
                .db()?;
        row.map(FlaggedRow::flagged).transpose()
    }

    async fn jobs_after_stage(&self, tx: &mut SqlTx, run: RunId, stage: u32) -> Result<Vec<JobId>, StoreError> {
        Ok(sqlx::query_scalar(
            "SELECT j.id FROM jobs j
             WHERE j.run_id = $1 AND j.stage > $2 AND (j.state <> 'pending' OR j.votes > 0 OR j.failures > 0)
             ORDER BY j.id",
        )
        .bind(run)
        .bind(i64::from(stage))
        .fetch_all(&mut **tx)
        .await
        .db()?)
    }

    async fn lock_failed_jobs(
        &self,
        tx: &mut SqlTx,
        run: RunId,
        job: Option<JobId>,
    ) -> Result<Vec<FlaggedJob>, StoreError> {
        let rows: Vec<FlaggedRow> = sqlx::query_as(&format!(
            "SELECT {FLAGGED} FROM jobs j WHERE j.run_id = $1 AND j.state = 'failed' AND ($2 < 0 OR j.id = $2)
             ORDER BY j.id {}",
            self.dialect.for_update()
        ))
        .bind(run)
        .bind(job.unwrap_or(-1))
        .fetch_all(&mut **tx)
        .await
        .db()?;
        rows.into_iter().map(FlaggedRow::flagged).collect()
    }

    async fn job_state(&self, tx: &mut SqlTx, run: RunId, job: JobId) -> Result<Option<String>, StoreError> {
        sqlx::query_scalar("SELECT state FROM jobs WHERE id = $1 AND run_id = $2")
            .bind(job)
            .bind(run)
            .fetch_optional(&mut **tx)
            .await
            .db()
    }

    async fn requeue_failed_job(&self, tx: &mut SqlTx, job: JobId, now: i64) -> Result<(), StoreError> {
        sqlx::query(&format!(
            "UPDATE jobs SET state = 'pending', failures = 0, failure_epoch = failure_epoch + 1, {RETIRE_LEASE},
                    updated_at = $2 WHERE id = $1"
        ))
        .bind(job)
        .bind(now)
        .execute(&mut **tx)
        .await
        .db()?;
        Ok(())
    }

    async fn add_failed_jobs(&self, tx: &mut SqlTx, run: RunId, jobs: i64) -> Result<(), StoreError> {
        sqlx::query("UPDATE runs SET failed_jobs = failed_jobs + $2 WHERE id = $1")
            .bind(run)
            .bind(jobs)
            .execute(&mut **tx)
            .await
            .db()?;
        Ok(())
    }

    async fn lock_failing_job(&self, tx: &mut SqlTx, job: JobId) -> Result<Option<FailingJob>, StoreError> {
        let row: Option<FailingRow> = sqlx::query_as(&format!(
            "SELECT j.state, j.attempt, j.lease_token, j.run_id, j.lease_owner, j.lease_expires_at, j.failures,
                    j.failure_epoch
             FROM jobs j WHERE j.id = $1 {}",
            self.dialect.for_update()
        ))
        .bind(job)
        .fetch_optional(&mut **tx)
        .await
        .db()?;
        row.map(|row| {
            Ok(FailingJob {
                run: row.run_id,
                attempt: row.attempt,
                failures: row.failures,
                failure_epoch: row.failure_epoch,
                lease: row.lease.fields()?,
            })
        })
        .transpose()
    }

    async fn insert_failure(&self, tx: &mut SqlTx, failure: &NewFailure<'_>) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO failures (job_id, attempt, worker, reason, failed_at, epoch) VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(failure.job)
        .bind(failure.attempt)
        .bind(failure.worker)
        .bind(failure.reason)
        .bind(failure.failed_at)
        .bind(failure.epoch)
        .execute(&mut **tx)
        .await
        .db()?;
        Ok(())
    }

    async fn failing_identities(&self, tx: &mut SqlTx, job: JobId, epoch: i64) -> Result<i64, StoreError> {
        sqlx::query_scalar("SELECT COUNT(DISTINCT worker) FROM failures WHERE job_id = $1 AND epoch = $2")
            .bind(job)
            .bind(epoch)
            .fetch_one(&mut **tx)
            .await
            .db()
    }

    async fn set_failures(&self, tx: &mut SqlTx, tally: &FailureTally, now: i64) -> Result<(), StoreError> {
        sqlx::query(&format!(
            "UPDATE jobs SET state = $2, failures = $3, {RETIRE_LEASE}, updated_at = $4 WHERE id = $1"
        ))
        .bind(tally.job)
        .bind(tally.next.as_str())
        .bind(tally.failures)
        .bind(now)
        .execute(&mut **tx)
        .await
        .db()?;
        Ok(())
    }

    async fn failures_of(&self, tx: &mut SqlTx, worker: &str) -> Result<i64, StoreError> {
        sqlx::query_scalar("SELECT COUNT(*) FROM failures WHERE worker = $1")
            .bind(worker)
            .fetch_one(&mut **tx)
            .await
            .db()
    }
}
