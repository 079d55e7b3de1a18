//! An operator's and a worker's remedies: recounting a conflicted job,
//! failing a job a worker cannot count, requeueing failed jobs.

use std::collections::{BTreeMap, BTreeSet};

use num_bigint::BigUint;
use sqlx::FromRow;

use super::decision::{ClassChanges, Offence, fails_for_good, quarantine_reason};
use super::exact::Direction;
use super::queue::RETIRE_LEASE;
use super::{JobState, LeaseColumns, SqlStore, now_ms, parse_big};
use crate::{JobId, RunId, StoreError};

/// What a failure report reads of its job.
#[derive(FromRow)]
struct FailedJobRow {
    run_id: RunId,
    attempt: i64,
    /// Failures since the job was last requeued.
    failures: i64,
    /// Bumped by every requeue: the failures that count have this epoch.
    failure_epoch: i64,
    #[sqlx(flatten)]
    lease: LeaseColumns,
}

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
}

/// What reopening jobs takes out of one run's counters.
#[derive(Default)]
struct RunTakeOut {
    /// Done jobs reopened (so `jobs_remaining` goes up by as many).
    done: i64,
    conflicts_closed: i64,
    failures_closed: i64,
    /// The sum of the reopened jobs' counts.
    counted: BigUint,
}

/// A job that may need a conflict resolved.
#[derive(FromRow)]
struct ConflictRow {
    id: JobId,
    conflict: i64,
    run_id: RunId,
}

impl SqlStore {
    pub(crate) async fn recount_job(&self, job: JobId) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await?;
        self.recount_in(&mut tx, job).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn recount_in(&self, tx: &mut sqlx::Transaction<'_, sqlx::Any>, job: JobId) -> Result<RunId, StoreError> {
        let row: ConflictRow = sqlx::query_as(&format!(
            "SELECT j.id, j.conflict, j.run_id FROM jobs j WHERE j.id = $1 {}",
            self.backend.for_update()
        ))
        .bind(job)
        .fetch_optional(&mut **tx)
        .await?
        .ok_or(StoreError::UnknownJob(job))?;
        if row.conflict == 0 {
            return Err(StoreError::Invalid(format!("job {job} has no conflict to resolve")));
        }
        let run = row.run_id;
        self.reopen_jobs(tx, &[job]).await?;
        tracing::warn!(job, run, "conflict resolved by recounting the job");
        Ok(run)
    }

    /// Puts `jobs` back in the queue for a new round, whatever their state:
    /// a done job's accepted count leaves its class and its run, the run's
    /// stored weighted sum and answer are cleared (it is unfinished again),
    /// an open conflict or a failure is closed, and every vote, lease and
    /// failure of the old round stops counting. The results table keeps
    /// every earlier result. Locks the jobs by id, then classes, then runs,
    /// the order every batch takes. Returns the runs touched.
    pub(super) async fn reopen_jobs(
        &self,
        tx: &mut sqlx::Transaction<'_, sqlx::Any>,
        jobs: &[JobId],
    ) -> Result<BTreeSet<RunId>, StoreError> {
        let now = now_ms();
        let mut ids = jobs.to_vec();
        ids.sort_unstable();
        ids.dedup();
        // (run, class) -> (count taken out, jobs done taken out)
        let mut classes: ClassChanges = BTreeMap::new();
        let mut runs: BTreeMap<RunId, RunTakeOut> = BTreeMap::new();
        let rows = self
            .select_by_ids(tx, &ids, |ids| {
                format!(
                    "SELECT j.id, j.state, CAST(j.count AS TEXT) AS count, j.conflict, j.run_id, j.class_id FROM jobs j
                     WHERE j.id IN ({ids}) ORDER BY j.id {}",
                    self.backend.for_update()
                )
            })
            .await?;
        let rows: Vec<ReopenedRow> = rows.iter().map(ReopenedRow::from_row).collect::<Result<_, _>>()?;
        if rows.len() != ids.len() {
            let found: BTreeSet<JobId> = rows.iter().map(|row| row.id).collect();
            let missing = ids.iter().find(|id| !found.contains(id)).copied().unwrap_or_default();
            return Err(StoreError::UnknownJob(missing));
        }
        for row in rows {
            let state: JobState = row.state.parse()?;
            let entry = runs.entry(row.run_id).or_default();
            entry.conflicts_closed += i64::from(row.conflict != 0);
            if state == JobState::Failed {
                entry.failures_closed += 1;
            }
            if state == JobState::Done {
                let count = parse_big(row.count.as_deref().unwrap_or("0"))?;
                entry.done += 1;
                entry.counted += &count;
                let class = classes.entry((row.run_id, row.class_id)).or_default();
                class.0 += count;
                class.1 += 1;
            }
        }
        // Postgres subtracts in NUMERIC; SQLite in Rust, exactly.
        if self.backend.sums_in_sql() {
            for (&(run, class), (count, done)) in &classes {
                sqlx::query(&format!(
                    "UPDATE classes SET count_sum = count_sum - {}, jobs_done = jobs_done - $4 WHERE run_id = $1 AND class_id = $2",
                    self.backend.count("$3")
                ))
                .bind(run)
                .bind(class)
                .bind(count.to_string())
                .bind(*done)
                .execute(&mut **tx)
                .await?;
            }
        } else {
            self.change_classes_exactly(tx, &classes, Direction::TakeOut).await?;
        }
        for (&run, take_out) in &runs {
            // Postgres subtracts; SQLite is given the exact new value.
            let (counted, new_counted) = if self.backend.sums_in_sql() {
                (take_out.counted.to_string(), format!("counted - {}", self.backend.count("$5")))
            } else {
                (self.counted_after(tx, run, &take_out.counted, Direction::TakeOut).await?, self.backend.count("$5"))
            };
            // Unfinished again: the answer is folded anew when the last job is.
            sqlx::query(&format!(
                "UPDATE runs SET open_conflicts = open_conflicts - $2, jobs_remaining = jobs_remaining + $3,
                        failed_jobs = failed_jobs - $4, counted = {new_counted}, finished_at = NULL,
                        weighted_sum = NULL, answer = NULL
                 WHERE id = $1"
            ))
            .bind(run)
            .bind(take_out.conflicts_closed)
            .bind(take_out.done)
            .bind(take_out.failures_closed)
            .bind(counted)
            .execute(&mut **tx)
            .await?;
        }
        // A new round: earlier votes, tokens and failures no longer count.
        for chunk in ids.chunks(self.backend.rows_per_statement(500, 1)) {
            let placeholders: Vec<String> = (2..chunk.len() + 2).map(|i| format!("${i}")).collect();
            let sql = format!(
                "UPDATE jobs SET state = 'pending', count = NULL, votes = 0, conflict = 0, failures = 0,
                        round = round + 1, failure_epoch = failure_epoch + 1, {RETIRE_LEASE}, updated_at = $1
                 WHERE id IN ({})",
                placeholders.join(", ")
            );
            let mut query = sqlx::query(&sql).bind(now);
            for id in chunk {
                query = query.bind(*id);
            }
            query.execute(&mut **tx).await?;
        }
        Ok(runs.into_keys().collect())
    }

    /// Every job whose current round holds a result of `worker` that counts
    /// (its accepted result, or a vote that agrees with the accepted count
    /// or still waits for a quorum) goes back to the queue: what a
    /// quarantined identity said is counted again by someone else before
    /// any answer that includes it is final. Returns how many jobs.
    pub(super) async fn reopen_results_of(
        &self,
        tx: &mut sqlx::Transaction<'_, sqlx::Any>,
        worker: &str,
    ) -> Result<usize, StoreError> {
        let jobs: Vec<JobId> = sqlx::query_scalar(
            "SELECT DISTINCT j.id FROM results x JOIN jobs j ON j.id = x.job_id AND j.round = x.round
             WHERE x.worker = $1 AND x.outcome IN ('accepted', 'vote')
               AND (j.state IN ('pending', 'leased') OR (j.state = 'done' AND x.count = j.count))
             ORDER BY j.id",
        )
        .bind(worker)
        .fetch_all(&mut **tx)
        .await?;
        if jobs.is_empty() {
            return Ok(0);
        }
        let runs = self.reopen_jobs(tx, &jobs).await?;
        tracing::error!(worker, jobs = jobs.len(), ?runs, "the quarantined identity's results are counted again");
        Ok(jobs.len())
    }

    pub(crate) async fn fail_job(&self, job: JobId, token: &str, worker: &str, reason: &str) -> Result<(), StoreError> {
        let now = now_ms();
        let mut tx = self.pool.begin().await?;
        self.lock_identities(&mut tx, [worker]).await?;
        let row = sqlx::query(&format!(
            "SELECT j.state, j.attempt, j.lease_token, j.run_id, j.lease_owner, j.lease_expires_at, j.failures,
                    j.failure_epoch
             FROM jobs j WHERE j.id = $1 {}",
            self.backend.for_update()
        ))
        .bind(job)
        .fetch_optional(&mut *tx)
        .await?
        .ok_or(StoreError::UnknownJob(job))?;
        let row = FailedJobRow::from_row(&row)?;
        let (attempt, run, failures, epoch) = (row.attempt, row.run_id, row.failures + 1, row.failure_epoch);
        if !row.lease.fields()?.held_by(worker, token, now) {
            return Err(StoreError::StaleToken { job });
        }
        sqlx::query(
            "INSERT INTO failures (job_id, attempt, worker, reason, failed_at, epoch) VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(job)
        .bind(attempt)
        .bind(worker)
        .bind(reason)
        .bind(now)
        .bind(epoch)
        .execute(&mut *tx)
        .await?;
        // One identity alone can delay a job, never fail it (`fails_for_good`).
        let identities: i64 =
            sqlx::query_scalar("SELECT COUNT(DISTINCT worker) FROM failures WHERE job_id = $1 AND epoch = $2")
                .bind(job)
                .bind(epoch)
                .fetch_one(&mut *tx)
                .await?;
        let exhausted = fails_for_good(failures, identities, &self.config);
        let next = if exhausted { JobState::Failed } else { JobState::Pending };
        sqlx::query(&format!(
            "UPDATE jobs SET state = $2, failures = $3, {RETIRE_LEASE}, updated_at = $4 WHERE id = $1"
        ))
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
                identities,
                worker,
                reason,
                "job failed for good; `census requeue` puts it back"
            );
        } else {
            tracing::warn!(job, attempt, failures, identities, worker, reason, "job failed; it will be retried");
        }
        // Failures are bounded per identity: past the limit it is quarantined.
        let reported: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM failures WHERE worker = $1")
            .bind(worker)
            .fetch_one(&mut *tx)
            .await?;
        if let Some(reason) = quarantine_reason(Offence::Failed, reported, &self.config) {
            self.quarantine_in(&mut tx, worker, &reason, now).await?;
        }
        tx.commit().await?;
        Ok(())
    }

    pub(crate) async fn requeue_jobs(&self, run: RunId, job: Option<JobId>) -> Result<u64, StoreError> {
        self.ensure_run(run).await?;
        let now = now_ms();
        let mut tx = self.pool.begin().await?;
        let rows: Vec<ConflictRow> = sqlx::query_as(&format!(
            "SELECT j.id, j.conflict, j.run_id FROM jobs j WHERE j.run_id = $1 AND j.state = 'failed' AND ($2 < 0 OR j.id = $2)
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
            let state: Option<String> = sqlx::query_scalar("SELECT state FROM jobs WHERE id = $1 AND run_id = $2")
                .bind(job)
                .bind(run)
                .fetch_optional(&mut *tx)
                .await?;
            return Err(match state {
                None => StoreError::UnknownJob(job),
                Some(state) => {
                    StoreError::Invalid(format!("job {job} is {state}, not failed: only failed jobs are requeued"))
                }
            });
        }
        let mut plain = 0i64;
        for row in &rows {
            let id = row.id;
            if row.conflict != 0 {
                self.recount_in(&mut tx, id).await?;
                continue;
            }
            sqlx::query(&format!(
                "UPDATE jobs SET state = 'pending', failures = 0, failure_epoch = failure_epoch + 1, {RETIRE_LEASE},
                        updated_at = $2 WHERE id = $1"
            ))
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
