//! Runs in SQL: their rows, classes and jobs, listing and cancelling.

use async_trait::async_trait;
use sqlx::FromRow;

use super::dialect::Dialect;
use super::{Db, SqlBackend, SqlTx};
use crate::backend::{Inserted, JobCensus, NewClass, NewJob, NewRun, RunOutline, RunRecord, RunState, RunStorage};
use crate::{JobId, RunId, RunSpec, StoreError};

/// The columns of a [`RunStateRow`], for a SELECT or an UPDATE's RETURNING.
pub(super) const RUN_STATE_COLUMNS: &str = "finished_at, open_conflicts, CAST(weighted_sum AS TEXT) AS weighted_sum,
        CAST(answer AS TEXT) AS answer, jobs_total, jobs_remaining, failed_jobs, cost_total, cost_done,
        CAST(counted AS TEXT) AS counted, census";

/// A run's counters and stored answer.
#[derive(FromRow)]
pub(super) struct RunStateRow {
    finished_at: Option<i64>,
    open_conflicts: i64,
    weighted_sum: Option<String>,
    answer: Option<String>,
    jobs_total: i64,
    jobs_remaining: i64,
    failed_jobs: i64,
    cost_total: i64,
    cost_done: i64,
    counted: String,
    census: String,
}

impl RunStateRow {
    pub(super) fn into_state(self) -> RunState {
        RunState {
            finished_at: self.finished_at,
            open_conflicts: self.open_conflicts,
            weighted_sum: self.weighted_sum,
            answer: self.answer,
            jobs_total: self.jobs_total,
            jobs_remaining: self.jobs_remaining,
            failed_jobs: self.failed_jobs,
            cost_total: self.cost_total,
            cost_done: self.cost_done,
            counted: self.counted,
            census: self.census,
        }
    }
}

/// A run as listed.
#[derive(FromRow)]
struct SummaryRow {
    id: RunId,
    census: String,
    counter_version: String,
    redundancy: i64,
    jobs_total: i64,
    jobs_remaining: i64,
    finished_at: Option<i64>,
    open_conflicts: i64,
    priority: i64,
    cancelled_at: Option<i64>,
}

/// What [`RunOutline`] is made of.
#[derive(FromRow)]
struct OutlineRow {
    census: String,
    classes: i64,
}

/// A job's run and the run's census.
#[derive(FromRow)]
struct JobCensusRow {
    job_id: JobId,
    run_id: RunId,
    census: String,
}

/// Rows as the JSON text a statement reads them from.
fn json<T: serde::Serialize>(rows: &T) -> Result<String, StoreError> {
    serde_json::to_string(rows).map_err(|e| StoreError::Internal(format!("rows cannot be written as JSON: {e}")))
}

/// The database's words for a duplicate key, or the error itself.
fn duplicate(error: sqlx::Error) -> Result<String, StoreError> {
    match error {
        sqlx::Error::Database(error) if error.is_unique_violation() => Ok(error.message().to_string()),
        error => Err(error).db(),
    }
}

#[async_trait]
impl RunStorage for SqlBackend {
    async fn find_run(&self, spec: &RunSpec) -> Result<Option<RunId>, StoreError> {
        sqlx::query_scalar("SELECT id FROM runs WHERE census = $1 AND counter_version = $2 AND redundancy = $3")
            .bind(spec.census.to_string())
            .bind(&spec.counter_version)
            .bind(i64::from(spec.redundancy))
            .fetch_optional(&self.pool)
            .await
            .db()
    }

    async fn resume_run(&self, run: RunId) -> Result<bool, StoreError> {
        let resumed = sqlx::query("UPDATE runs SET cancelled_at = NULL WHERE id = $1 AND cancelled_at IS NOT NULL")
            .bind(run)
            .execute(&self.pool)
            .await
            .db()?;
        Ok(resumed.rows_affected() > 0)
    }

    async fn insert_run(&self, tx: &mut SqlTx, run: &NewRun<'_>) -> Result<Inserted<RunId>, StoreError> {
        let inserted = sqlx::query_scalar(
            "INSERT INTO runs (census, counter_version, redundancy, jobs_total, jobs_remaining, created_at,
                               class_power, max_lease_ms)
             VALUES ($1, $2, $3, 0, 0, $4, $5, $6) RETURNING id",
        )
        .bind(run.spec.census.to_string())
        .bind(&run.spec.counter_version)
        .bind(i64::from(run.spec.redundancy))
        .bind(run.created_at)
        .bind(i64::from(run.class_power))
        .bind(run.max_lease_ms)
        .fetch_one(&mut **tx)
        .await;
        match inserted {
            Ok(id) => Ok(Inserted::New(id)),
            Err(error) => Ok(Inserted::Duplicate(duplicate(error)?)),
        }
    }

    /// One statement for the chunk's classes, and one for its jobs, each
    /// the rows as one JSON parameter (`Dialect::json_rows`):
    /// a run of 10^7 jobs is 1,000 statements, not 10,000 of 1,000 rows
    /// bound a cell at a time.
    async fn insert_classes(&self, tx: &mut SqlTx, run: RunId, classes: &[NewClass<'_>]) -> Result<(), StoreError> {
        if classes.is_empty() {
            return Ok(());
        }
        #[derive(serde::Serialize)]
        struct Row<'a> {
            class_id: i64,
            label: &'a str,
            /// Decimal text: a weight may pass 2^64.
            weight: String,
            jobs_total: i64,
        }
        let rows: Vec<Row<'_>> = classes
            .iter()
            .map(|class| Row {
                class_id: class.id,
                label: class.label,
                weight: class.weight.to_string(),
                jobs_total: class.jobs_total,
            })
            .collect();
        let from = self.dialect.json_rows(
            "$2",
            &[("class_id", "BIGINT"), ("label", "TEXT"), ("weight", "TEXT"), ("jobs_total", "BIGINT")],
        );
        let sql = format!(
            "INSERT INTO classes (run_id, class_id, label, weight, jobs_total)
             SELECT $1, x.class_id, x.label, {}, x.jobs_total FROM {from} ORDER BY x.n",
            self.dialect.count("x.weight")
        );
        sqlx::query(&sql).bind(run).bind(json(&rows)?).execute(&mut **tx).await.db()?;
        Ok(())
    }

    async fn insert_jobs(
        &self,
        tx: &mut SqlTx,
        run: RunId,
        jobs: &[NewJob<'_>],
        now: i64,
    ) -> Result<Inserted<()>, StoreError> {
        if jobs.is_empty() {
            return Ok(Inserted::New(()));
        }
        #[derive(serde::Serialize)]
        struct Row<'a> {
            class_id: i64,
            key: &'a str,
            stage: Option<i64>,
            cost: i64,
        }
        // Every job's class is the run's (Postgres has no foreign key from
        // jobs to classes: migration 0008): the chunk's classes, each once,
        // looked up a row at a time, a tenth of the jobs' lookups for the
        // synthetic census (a lookup a job was a third of the insert).
        #[derive(serde::Serialize)]
        struct Class {
            class_id: i64,
        }
        let classes: std::collections::BTreeSet<i64> = jobs.iter().map(|job| job.class).collect();
        let named: Vec<Class> = classes.iter().map(|&class_id| Class { class_id }).collect();
        let found: i64 = sqlx::query_scalar(&format!(
            "SELECT COUNT(*) FROM {} {}",
            self.dialect.json_rows("$2", &[("class_id", "BIGINT")]),
            self.dialect.join_each("classes", "c", "c.run_id = $1 AND c.class_id = x.class_id")
        ))
        .bind(run)
        .bind(json(&named)?)
        .fetch_one(&mut **tx)
        .await
        .db()?;
        if found != classes.len() as i64 {
            return Err(StoreError::Internal(format!(
                "{} of the {} classes of a chunk of jobs are not classes of run {run}",
                classes.len() as i64 - found,
                classes.len()
            )));
        }
        let rows: Vec<Row<'_>> = jobs
            .iter()
            .map(|job| Row { class_id: job.class, key: job.key, stage: job.stage.map(i64::from), cost: job.cost })
            .collect();
        // In the order given: a job's id is its place in the census's list,
        // which the fold at finish walks in step with the rows.
        let from = self
            .dialect
            .json_rows("$3", &[("class_id", "BIGINT"), ("key", "TEXT"), ("stage", "BIGINT"), ("cost", "BIGINT")]);
        let sql = format!(
            "INSERT INTO jobs (run_id, class_id, key, stage, cost, created_at, updated_at)
             SELECT $1, x.class_id, x.key, x.stage, x.cost, $2, $2 FROM {from} ORDER BY x.n"
        );
        match sqlx::query(&sql).bind(run).bind(now).bind(json(&rows)?).execute(&mut **tx).await {
            Ok(_) => Ok(Inserted::New(())),
            Err(error) => Ok(Inserted::Duplicate(duplicate(error)?)),
        }
    }

    async fn set_class_jobs_total(&self, tx: &mut SqlTx, run: RunId, classes: &[(i64, i64)]) -> Result<(), StoreError> {
        for &(class, jobs) in classes {
            sqlx::query("UPDATE classes SET jobs_total = $3 WHERE run_id = $1 AND class_id = $2")
                .bind(run)
                .bind(class)
                .bind(jobs)
                .execute(&mut **tx)
                .await
                .db()?;
        }
        Ok(())
    }

    async fn set_run_jobs_total(&self, tx: &mut SqlTx, run: RunId, jobs: i64, cost: i64) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE runs SET jobs_total = $2, jobs_remaining = $2, cost_total = $3, cost_done = 0 WHERE id = $1",
        )
        .bind(run)
        .bind(jobs)
        .bind(cost)
        .execute(&mut **tx)
        .await
        .db()?;
        Ok(())
    }

    async fn refresh_statistics(&self) -> Result<(), StoreError> {
        // SQLite plans these tables' statements well without statistics
        // (and its ANALYZE reads whole indexes); Postgres samples a few
        // thousand rows a table.
        if self.dialect == Dialect::Postgres {
            sqlx::query("ANALYZE jobs, classes").execute(&self.pool).await.db()?;
        }
        Ok(())
    }

    async fn run_outline(&self, tx: Option<&mut SqlTx>, run: RunId) -> Result<Option<RunOutline>, StoreError> {
        let query = sqlx::query_as::<_, OutlineRow>(
            "SELECT census, (SELECT COUNT(*) FROM classes c WHERE c.run_id = r.id) AS classes FROM runs r WHERE id = $1",
        )
        .bind(run);
        let row = match tx {
            Some(tx) => query.fetch_optional(&mut **tx).await.db()?,
            None => query.fetch_optional(&self.pool).await.db()?,
        };
        Ok(row.map(|row| RunOutline { census: row.census, classes: row.classes as u64 }))
    }

    async fn runs(&self, run: Option<RunId>) -> Result<Vec<RunRecord>, StoreError> {
        let condition = if run.is_some() { "r.id = $1" } else { "1 = 1" };
        let sql = format!(
            "SELECT r.id, r.census, r.counter_version, r.redundancy, r.jobs_total, r.jobs_remaining,
                    r.finished_at, r.open_conflicts, r.priority, r.cancelled_at
             FROM runs r WHERE {condition} ORDER BY r.id"
        );
        let mut query = sqlx::query_as::<_, SummaryRow>(&sql);
        if let Some(run) = run {
            query = query.bind(run);
        }
        let rows = query.fetch_all(&self.pool).await.db()?;
        Ok(rows
            .into_iter()
            .map(|row| RunRecord {
                id: row.id,
                census: row.census,
                counter_version: row.counter_version,
                redundancy: row.redundancy as u32,
                jobs_total: row.jobs_total,
                jobs_remaining: row.jobs_remaining,
                finished_at: row.finished_at,
                open_conflicts: row.open_conflicts,
                priority: row.priority,
                cancelled_at: row.cancelled_at,
            })
            .collect())
    }

    async fn run_state(&self, tx: Option<&mut SqlTx>, run: RunId) -> Result<Option<RunState>, StoreError> {
        let sql = format!("SELECT {RUN_STATE_COLUMNS} FROM runs WHERE id = $1");
        let query = sqlx::query_as::<_, RunStateRow>(&sql).bind(run);
        let row = match tx {
            Some(tx) => query.fetch_optional(&mut **tx).await.db()?,
            None => query.fetch_optional(&self.pool).await.db()?,
        };
        Ok(row.map(RunStateRow::into_state))
    }

    async fn job_censuses(&self, jobs: &[JobId]) -> Result<Vec<JobCensus>, StoreError> {
        let mut connection = self.pool.acquire().await.db()?;
        let rows = self
            .select_by_ids(&mut connection, jobs, |ids| {
                format!(
                    "SELECT j.id AS job_id, r.id AS run_id, r.census FROM jobs j JOIN runs r ON r.id = j.run_id
                     WHERE j.id IN ({ids})"
                )
            })
            .await?;
        rows.iter()
            .map(|row| {
                let row = JobCensusRow::from_row(row).db()?;
                Ok(JobCensus { job: row.job_id, run: row.run_id, census: row.census })
            })
            .collect()
    }

    async fn mark_cancelled(&self, tx: &mut SqlTx, run: RunId, now: i64) -> Result<(), StoreError> {
        sqlx::query("UPDATE runs SET cancelled_at = $2 WHERE id = $1 AND cancelled_at IS NULL")
            .bind(run)
            .bind(now)
            .execute(&mut **tx)
            .await
            .db()?;
        Ok(())
    }

    async fn set_priority(&self, run: RunId, priority: i64) -> Result<(), StoreError> {
        sqlx::query("UPDATE runs SET priority = $2 WHERE id = $1")
            .bind(run)
            .bind(priority)
            .execute(&self.pool)
            .await
            .db()?;
        Ok(())
    }
}
