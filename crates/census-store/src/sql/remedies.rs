//! An operator's and a worker's remedies: recounting a conflicted job,
//! failing a job a worker cannot count, requeueing failed jobs.

use sqlx::Row;

use super::{JobState, SqlStore, now_ms};
use crate::{JobId, RunId, StoreError};

impl SqlStore {
    pub(crate) async fn recount_job(&self, job: JobId) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await?;
        self.recount_in(&mut tx, job).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn recount_in(&self, tx: &mut sqlx::Transaction<'_, sqlx::Any>, job: JobId) -> Result<RunId, StoreError> {
        let now = now_ms();
        let row = sqlx::query(&format!(
            "SELECT j.state, CAST(j.count AS TEXT), j.conflict, j.run_id, j.class_id FROM jobs j WHERE j.id = $1 {}",
            self.backend.for_update()
        ))
        .bind(job)
        .fetch_optional(&mut **tx)
        .await?
        .ok_or(StoreError::UnknownJob(job))?;
        let state: JobState = row.try_get::<String, _>(0)?.parse()?;
        let count = row.try_get::<Option<String>, _>(1)?.unwrap_or_else(|| "0".into());
        let run: RunId = row.try_get(3)?;
        let class: i64 = row.try_get(4)?;
        if row.try_get::<i64, _>(2)? == 0 {
            return Err(StoreError::Invalid(format!("job {job} has no conflict to resolve")));
        }
        let (done, failed) = (state == JobState::Done, state == JobState::Failed);
        if done {
            sqlx::query(&format!(
                "UPDATE classes SET count_sum = count_sum - {}, jobs_done = jobs_done - 1 WHERE run_id = $1 AND class_id = $2",
                self.backend.count("$3")
            ))
            .bind(run)
            .bind(class)
            .bind(&count)
            .execute(&mut **tx)
            .await?;
        }
        sqlx::query(&format!(
            "UPDATE runs SET open_conflicts = open_conflicts - 1, jobs_remaining = jobs_remaining + $2,
                    failed_jobs = failed_jobs - $3, counted = counted - {}, finished_at = NULL, weighted_sum = NULL,
                    answer = NULL
             WHERE id = $1",
            self.backend.count("$4")
        ))
        .bind(run)
        .bind(i64::from(done))
        .bind(i64::from(failed))
        .bind(if done { count.as_str() } else { "0" })
        .execute(&mut **tx)
        .await?;
        // A new round: earlier votes and tokens no longer count.
        sqlx::query(
            "UPDATE jobs SET state = 'pending', count = NULL, votes = 0, conflict = 0, failures = 0, round = round + 1,
                    lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL, updated_at = $2 WHERE id = $1",
        )
        .bind(job)
        .bind(now)
        .execute(&mut **tx)
        .await?;
        tracing::warn!(job, run, "conflict resolved by recounting the job");
        Ok(run)
    }

    pub(crate) async fn fail_job(&self, job: JobId, token: &str, worker: &str, reason: &str) -> Result<(), StoreError> {
        let now = now_ms();
        let mut tx = self.pool.begin().await?;
        let row = sqlx::query(&format!(
            "SELECT j.state, j.attempt, j.lease_token, j.run_id, j.lease_owner, j.lease_expires_at, j.failures
             FROM jobs j WHERE j.id = $1 {}",
            self.backend.for_update()
        ))
        .bind(job)
        .fetch_optional(&mut *tx)
        .await?
        .ok_or(StoreError::UnknownJob(job))?;
        let state: JobState = row.try_get::<String, _>(0)?.parse()?;
        let attempt: i64 = row.try_get(1)?;
        let current: Option<String> = row.try_get(2)?;
        let run: RunId = row.try_get(3)?;
        let owner: Option<String> = row.try_get(4)?;
        let expires: Option<i64> = row.try_get(5)?;
        let failures: i64 = row.try_get::<i64, _>(6)? + 1;
        if state != JobState::Leased
            || current.as_deref() != Some(token)
            || owner.as_deref() != Some(worker)
            || expires.is_none_or(|e| e < now)
        {
            return Err(StoreError::StaleToken { job });
        }
        sqlx::query("INSERT INTO failures (job_id, attempt, worker, reason, failed_at) VALUES ($1, $2, $3, $4, $5)")
            .bind(job)
            .bind(attempt)
            .bind(worker)
            .bind(reason)
            .bind(now)
            .execute(&mut *tx)
            .await?;
        let exhausted = failures >= i64::from(self.config.max_attempts);
        let next = if exhausted { JobState::Failed } else { JobState::Pending };
        sqlx::query(
            "UPDATE jobs SET state = $2, failures = $3, lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL,
                    updated_at = $4 WHERE id = $1",
        )
        .bind(job)
        .bind(next.as_str())
        .bind(failures)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        if exhausted {
            sqlx::query("UPDATE runs SET failed_jobs = failed_jobs + 1 WHERE id = $1")
                .bind(run)
                .execute(&mut *tx)
                .await?;
            tracing::error!(
                job,
                attempt,
                failures,
                worker,
                reason,
                "job failed for good; `census requeue` puts it back"
            );
        } else {
            tracing::warn!(job, attempt, failures, worker, reason, "job failed; it will be retried");
        }
        tx.commit().await?;
        Ok(())
    }

    pub(crate) async fn requeue_jobs(&self, run: RunId, job: Option<JobId>) -> Result<u64, StoreError> {
        self.ensure_run(run).await?;
        let now = now_ms();
        let mut tx = self.pool.begin().await?;
        let rows = sqlx::query(&format!(
            "SELECT j.id, j.conflict FROM jobs j WHERE j.run_id = $1 AND j.state = 'failed' AND ($2 < 0 OR j.id = $2)
             ORDER BY j.id {}",
            self.backend.for_update()
        ))
        .bind(run)
        .bind(job.unwrap_or(-1))
        .fetch_all(&mut *tx)
        .await?;
        if let Some(job) = job
            && rows.is_empty()
        {
            let exists = sqlx::query("SELECT state FROM jobs WHERE id = $1 AND run_id = $2")
                .bind(job)
                .bind(run)
                .fetch_optional(&mut *tx)
                .await?;
            return Err(match exists {
                None => StoreError::UnknownJob(job),
                Some(row) => StoreError::Invalid(format!(
                    "job {job} is {}, not failed: only failed jobs are requeued",
                    row.try_get::<String, _>(0)?
                )),
            });
        }
        let mut plain = 0i64;
        for row in &rows {
            let id: JobId = row.try_get(0)?;
            if row.try_get::<i64, _>(1)? != 0 {
                self.recount_in(&mut tx, id).await?;
                continue;
            }
            sqlx::query(
                "UPDATE jobs SET state = 'pending', failures = 0, lease_owner = NULL, lease_token = NULL,
                        lease_expires_at = NULL, updated_at = $2 WHERE id = $1",
            )
            .bind(id)
            .bind(now)
            .execute(&mut *tx)
            .await?;
            plain += 1;
        }
        sqlx::query("UPDATE runs SET failed_jobs = failed_jobs - $2 WHERE id = $1")
            .bind(run)
            .bind(plain)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        tracing::warn!(run, jobs = rows.len(), "failed jobs requeued");
        Ok(rows.len() as u64)
    }
}
