//! Completions: a batch of reports, in one transaction, as load -> decide
//! -> apply. [`SqlStore::load_jobs`] reads the batch's jobs (locked) and the
//! votes of their round; [`plan_batch`] decides every report in Rust (the
//! rules, `decision.rs`); [`SqlStore::apply_plan`] writes the plan:
//! results and rejections appended, jobs and class sums updated, and the
//! run finished when its last job is.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use sqlx::FromRow;

use super::decision::{
    BatchPlan, ClassChanges, JobChange, JobView, NewResult, Offence, Rejection, ResultOutcome, RunChange, WorkerTally,
    plan_batch, quarantine_reason,
};
use super::exact::Direction;
use super::queue::RETIRE_LEASE;
use super::{LeaseColumns, SqlStore, bigint, now_ms, parse_count, text, values_rows};
use crate::{CompleteOutcome, Completion, JobId, RunId, StoreError};

/// A job of the batch as [`SqlStore::load_jobs`] reads it, with its run's
/// redundancy, cancellation and counter version.
#[derive(sqlx::FromRow)]
struct JobRow {
    id: JobId,
    run_id: RunId,
    class_id: i64,
    key: String,
    attempt: i64,
    #[sqlx(flatten)]
    lease: LeaseColumns,
    /// Votes the row has counted this round (none on a job that an earlier
    /// version finished at redundancy 1, when votes were not counted).
    votes: i64,
    redundancy: i64,
    cancelled_at: Option<i64>,
    round: i64,
    counter_version: String,
}

/// A vote or accepted result of a job, as [`SqlStore::load_jobs`] reads it.
#[derive(sqlx::FromRow)]
struct VoteRow {
    job_id: JobId,
    worker: String,
    /// Decimal text.
    count: String,
    round: i64,
    outcome: String,
}

impl SqlStore {
    pub(crate) async fn complete_batch(
        &self,
        completions: &[Completion],
    ) -> Result<Vec<Result<CompleteOutcome, StoreError>>, StoreError> {
        let now = now_ms();
        let mut tx = self.pool.begin().await?;
        // The reporting identities first (a quarantine in progress finishes
        // before their reports are weighed, and sees them if they commit first).
        self.lock_identities(&mut tx, completions.iter().map(|c| c.worker.as_str())).await?;
        let mut ids: Vec<JobId> = completions.iter().map(|c| c.job_id).collect();
        ids.sort_unstable();
        ids.dedup();
        let jobs = self.load_jobs(&mut tx, &ids).await?;
        let plan = plan_batch(jobs, completions, now);
        let finished = self.apply_plan(&mut tx, &plan, now).await?;
        tx.commit().await?;
        self.finished.lock().expect("never poisoned").extend(finished);
        Ok(plan.outcomes)
    }

    /// The jobs `ids` (sorted), locked in id order (so concurrent batches
    /// cannot deadlock), each with the votes of its current round.
    async fn load_jobs(
        &self,
        tx: &mut sqlx::Transaction<'_, sqlx::Any>,
        ids: &[JobId],
    ) -> Result<HashMap<JobId, JobView>, StoreError> {
        let rows = self
            .select_by_ids(tx, ids, |ids| {
                format!(
                    "SELECT j.id, j.run_id, j.class_id, j.key, j.state, j.attempt, j.lease_token, j.lease_owner,
                            j.lease_expires_at, j.votes, r.redundancy, r.cancelled_at, j.round, r.counter_version
                     FROM jobs j JOIN runs r ON r.id = j.run_id WHERE j.id IN ({ids}) ORDER BY j.id {}",
                    self.backend.for_update()
                )
            })
            .await?;
        let mut jobs = HashMap::with_capacity(rows.len());
        // Jobs with votes this round; and done jobs without (see `JobRow::votes`),
        // whose accepted result is the only vote, needed to recognise a repeat.
        let mut voted = Vec::new();
        for row in &rows {
            let row = JobRow::from_row(row)?;
            let lease = row.lease.fields()?;
            if row.votes > 0 || lease.state == super::JobState::Done {
                voted.push(row.id);
            }
            let job = JobView {
                run: row.run_id,
                class: row.class_id,
                key: row.key,
                counter_version: row.counter_version,
                lease,
                attempt: row.attempt,
                redundancy: row.redundancy as u32,
                cancelled: row.cancelled_at.is_some(),
                round: row.round,
                votes: Vec::new(),
            };
            jobs.insert(row.id, (job, row.votes));
        }
        let votes = self
            .select_by_ids(tx, &voted, |ids| {
                format!(
                    "SELECT job_id, worker, CAST(count AS TEXT) AS count, round, outcome FROM results
                     WHERE job_id IN ({ids}) AND outcome IN ('vote', 'accepted') ORDER BY id"
                )
            })
            .await?;
        for vote in &votes {
            let vote = VoteRow::from_row(vote)?;
            let Some((job, votes)) = jobs.get_mut(&vote.job_id) else { continue };
            // A job without votes counted is done: only its accepted result is a vote.
            if vote.round == job.round && (*votes > 0 || vote.outcome == ResultOutcome::Accepted.as_str()) {
                job.votes.push((vote.worker, parse_count(&vote.count)?));
            }
        }
        Ok(jobs.into_iter().map(|(id, (job, _))| (id, job)).collect())
    }

    /// Writes what [`plan_batch`] decided, in the caller's transaction;
    /// returns the runs it finished.
    async fn apply_plan(
        &self,
        tx: &mut sqlx::Transaction<'_, sqlx::Any>,
        plan: &BatchPlan,
        now: i64,
    ) -> Result<Vec<RunId>, StoreError> {
        for r in &plan.rejections {
            tracing::warn!(job = r.job, worker = %r.worker, count = r.count, reason = %r.reason, "result rejected");
        }
        for (job, votes) in &plan.conflicts {
            tracing::error!(job, ?votes, "no quorum: the job fails with a conflict");
        }
        self.insert_results(tx, &plan.results, now).await?;
        self.mark_decided(tx, &plan.jobs, now).await?;
        for job in plan.conflicts.keys() {
            sqlx::query("UPDATE jobs SET conflict = 1 WHERE id = $1").bind(*job).execute(&mut **tx).await?;
        }
        if self.backend.sums_in_sql() {
            self.add_to_classes(tx, &plan.classes).await?;
        } else {
            self.change_classes_exactly(tx, &plan.classes, Direction::Add).await?;
        }
        self.add_to_worker_stats(tx, &plan.workers, now).await?;
        self.record_rejections(tx, &plan.rejections, now).await?;
        self.add_to_runs(tx, &plan.runs).await
    }

    /// Every decided job takes its new state and loses its lease: the token
    /// is fenced off. One statement for many jobs (VALUES columns are
    /// column1.. on both backends), not one round trip a job.
    async fn mark_decided(
        &self,
        tx: &mut sqlx::Transaction<'_, sqlx::Any>,
        jobs: &BTreeMap<JobId, JobChange>,
        now: i64,
    ) -> Result<(), StoreError> {
        let decided: Vec<_> = jobs.iter().collect();
        let count = |p: &str| self.backend.count(p);
        for chunk in decided.chunks(self.backend.rows_per_statement(500, 4)) {
            let rows = values_rows(chunk.len(), 2, &[&bigint, &text, &count, &bigint]);
            let sql = format!(
                "UPDATE jobs SET state = v.column2, count = COALESCE(v.column3, jobs.count), votes = jobs.votes + v.column4,
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
            query.execute(&mut **tx).await?;
        }
        Ok(())
    }

    /// Adds each identity's accepted results and their counts to its
    /// statistics in the run: Postgres adds; SQLite is given the exact new sum.
    async fn add_to_worker_stats(
        &self,
        tx: &mut sqlx::Transaction<'_, sqlx::Any>,
        workers: &BTreeMap<(RunId, String), WorkerTally>,
        now: i64,
    ) -> Result<(), StoreError> {
        for ((run, worker), tally) in workers {
            let (completions, new_completions) = if self.backend.sums_in_sql() {
                (tally.completions.to_string(), "worker_stats.completions + excluded.completions")
            } else {
                (self.completions_after(tx, *run, worker, &tally.completions).await?, "excluded.completions")
            };
            sqlx::query(&format!(
                "INSERT INTO worker_stats (run_id, worker, jobs, completions, last_seen) VALUES ($1, $2, $3, {}, $5)
                 ON CONFLICT (run_id, worker) DO UPDATE SET jobs = worker_stats.jobs + excluded.jobs,
                     completions = {new_completions}, last_seen = excluded.last_seen",
                self.backend.count("$4")
            ))
            .bind(*run)
            .bind(worker.as_str())
            .bind(tally.jobs)
            .bind(completions)
            .bind(now)
            .execute(&mut **tx)
            .await?;
        }
        Ok(())
    }

    /// Adds each run's done jobs, conflicts, failures and counted sum, and
    /// finishes every run whose last job this was; returns those runs.
    async fn add_to_runs(
        &self,
        tx: &mut sqlx::Transaction<'_, sqlx::Any>,
        runs: &BTreeMap<RunId, RunChange>,
    ) -> Result<Vec<RunId>, StoreError> {
        let mut finished = Vec::new();
        for (&run, change) in runs {
            let (counted, new_counted) = if self.backend.sums_in_sql() {
                (change.counted.to_string(), format!("counted + {}", self.backend.count("$5")))
            } else {
                (self.counted_after(tx, run, &change.counted, Direction::Add).await?, self.backend.count("$5"))
            };
            sqlx::query(&format!(
                "UPDATE runs SET jobs_remaining = jobs_remaining - $2, open_conflicts = open_conflicts + $3,
                        failed_jobs = failed_jobs + $4, counted = {new_counted} WHERE id = $1"
            ))
            .bind(run)
            .bind(change.done)
            .bind(change.conflicts_opened)
            .bind(change.failed_added)
            .bind(counted)
            .execute(&mut **tx)
            .await?;
            if change.done > 0 && self.finish_if_complete(tx, run).await? {
                finished.push(run);
            }
        }
        Ok(finished)
    }

    /// Postgres: adds each class's counts and done jobs in NUMERIC: one
    /// statement per chunk of classes, not one a class (a batch of the 9x9
    /// catalogue touches about a hundred). It locks the chunk's rows in (run, class) order first,
    /// as the one-by-one updates did, so batches that share classes cannot
    /// deadlock. (SQLite: [`SqlStore::change_classes_exactly`].)
    async fn add_to_classes(
        &self,
        tx: &mut sqlx::Transaction<'_, sqlx::Any>,
        classes: &ClassChanges,
    ) -> Result<(), StoreError> {
        let classes: Vec<_> = classes.iter().collect();
        let count = |p: &str| self.backend.count(p);
        for chunk in classes.chunks(self.backend.rows_per_statement(500, 4)) {
            // A join with VALUES is an index probe a row; a row-value
            // IN list of a hundred pairs was planned as a scan (36 ms).
            let pairs = values_rows(chunk.len(), 1, &[&bigint, &bigint]);
            let sql = format!(
                "SELECT 1 FROM classes c JOIN (VALUES {pairs}) AS v ON c.run_id = v.column1 AND c.class_id = v.column2
                 ORDER BY c.run_id, c.class_id FOR UPDATE OF c"
            );
            let mut lock = sqlx::query(&sql);
            for &(&(run, class), _) in chunk {
                lock = lock.bind(run).bind(class);
            }
            lock.fetch_all(&mut **tx).await?;
            let rows = values_rows(chunk.len(), 1, &[&bigint, &bigint, &count, &bigint]);
            let sql = format!(
                "UPDATE classes SET count_sum = classes.count_sum + v.column3, jobs_done = classes.jobs_done + v.column4
                 FROM (VALUES {rows}) AS v WHERE classes.run_id = v.column1 AND classes.class_id = v.column2"
            );
            let mut update = sqlx::query(&sql);
            for &(&(run, class), (count, jobs_done)) in chunk {
                update = update.bind(run).bind(class).bind(count.to_string()).bind(*jobs_done);
            }
            update.execute(&mut **tx).await?;
        }
        Ok(())
    }

    async fn insert_results(
        &self,
        tx: &mut sqlx::Transaction<'_, sqlx::Any>,
        results: &[NewResult],
        now: i64,
    ) -> Result<(), StoreError> {
        const COLUMNS: usize = 9;
        for chunk in results.chunks(self.backend.rows_per_statement(300, COLUMNS)) {
            let rows: Vec<String> = (0..chunk.len())
                .map(|i| {
                    let p = i * COLUMNS + 2;
                    let params: Vec<String> = (p..p + COLUMNS)
                        .map(|n| if n == p + 5 { self.backend.count(&format!("${n}")) } else { format!("${n}") })
                        .collect();
                    format!("({}, $1)", params.join(", "))
                })
                .collect();
            let sql = format!(
                "INSERT INTO results (job_id, run_id, attempt, round, worker, count, elapsed_ms, counter_version, outcome, finished_at)
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
                    .bind(r.outcome.as_str());
            }
            query.execute(&mut **tx).await?;
        }
        Ok(())
    }

    /// Appends rejections and quarantines every identity that reached the
    /// limit: its leases are released at once and its results counted again.
    pub(super) async fn record_rejections(
        &self,
        tx: &mut sqlx::Transaction<'_, sqlx::Any>,
        rejections: &[Rejection],
        now: i64,
    ) -> Result<(), StoreError> {
        let insert = format!(
            "INSERT INTO rejections (job_id, run_id, attempt, worker, count, reason, rejected_at)
             VALUES ($1, $2, $3, $4, {}, $6, $7)",
            self.backend.big_number("$5")
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
                .await?;
        }
        let workers: BTreeSet<&str> = rejections.iter().map(|r| r.worker.as_str()).collect();
        for worker in workers {
            let rejected: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM rejections WHERE worker = $1")
                .bind(worker)
                .fetch_one(&mut **tx)
                .await?;
            if let Some(reason) = quarantine_reason(Offence::Rejected, rejected, &self.config) {
                self.quarantine_in(tx, worker, &reason, now).await?;
            }
        }
        Ok(())
    }
}
