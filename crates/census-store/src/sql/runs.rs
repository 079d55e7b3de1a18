//! Runs: creating one with its classes and jobs, finding and listing them,
//! cancelling and prioritising.

use std::collections::HashMap;
use std::sync::Arc;

use super::queue::HeldBy;
use super::{RunFacts, SqlStore, now_ms, read_census};
use crate::{JobSpec, JobStream, MAX_KEY_LEN, MAX_REDUNDANCY, RunId, RunSpec, RunSummary, StoreError};

/// How many jobs creating a run reads and stores at a time: what it holds
/// in memory besides one entry a class.
const JOBS_PER_CHUNK: usize = 10_000;

/// The statement that reads a [`RunRow`] (binds the run as $1).
pub(super) const RUN_ROW: &str = "SELECT finished_at, open_conflicts, CAST(weighted_sum AS TEXT) AS weighted_sum,
        CAST(answer AS TEXT) AS answer, jobs_total, jobs_remaining, failed_jobs, CAST(counted AS TEXT) AS counted, census
     FROM runs WHERE id = $1";

/// A run's counters and stored answer.
#[derive(sqlx::FromRow)]
pub(super) struct RunRow {
    pub finished_at: Option<i64>,
    pub open_conflicts: i64,
    /// Decimal text, once finished.
    pub weighted_sum: Option<String>,
    /// Decimal text, once finished.
    pub answer: Option<String>,
    pub jobs_total: i64,
    pub jobs_remaining: i64,
    pub failed_jobs: i64,
    /// Decimal text: the sum of the done jobs' counts.
    pub counted: String,
    pub census: String,
}

/// A run as listed.
#[derive(sqlx::FromRow)]
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

/// What [`RunFacts`] is made of.
#[derive(sqlx::FromRow)]
struct FactsRow {
    census: String,
    classes: i64,
}

/// A class while its run is created.
struct ClassEntry {
    /// Its number in the run, in order of first appearance.
    id: usize,
    weight: u128,
    /// Its jobs so far.
    jobs: i64,
    /// The job count its row was stored with.
    stored_jobs: i64,
}

impl SqlStore {
    pub(super) async fn run_facts(&self, run: RunId) -> Result<Arc<RunFacts>, StoreError> {
        if let Some(facts) = self.runs.lock().expect("the run cache is never poisoned").get(&run) {
            return Ok(facts.clone());
        }
        let row: FactsRow = sqlx::query_as(
            "SELECT census, (SELECT COUNT(*) FROM classes c WHERE c.run_id = r.id) AS classes FROM runs r WHERE id = $1",
        )
        .bind(run)
        .fetch_optional(&self.pool)
        .await?
        .ok_or(StoreError::UnknownRun(run))?;
        let census = read_census(run, &row.census)?;
        let facts = Arc::new(RunFacts { census, classes: row.classes as u64 });
        self.runs.lock().expect("the run cache is never poisoned").insert(run, facts.clone());
        Ok(facts)
    }

    pub(super) async fn runs_where(&self, condition: &str, run: Option<RunId>) -> Result<Vec<RunSummary>, StoreError> {
        let sql = format!(
            "SELECT r.id, r.census, r.counter_version, r.redundancy, r.jobs_total, r.jobs_remaining,
                    r.finished_at, r.open_conflicts, r.priority, r.cancelled_at
             FROM runs r WHERE {condition} ORDER BY r.id"
        );
        let mut query = sqlx::query_as::<_, SummaryRow>(&sql);
        if let Some(run) = run {
            query = query.bind(run);
        }
        let rows = query.fetch_all(&self.pool).await?;
        let mut runs = Vec::with_capacity(rows.len());
        for row in rows {
            runs.push(RunSummary {
                run_id: row.id,
                spec: RunSpec {
                    census: read_census(row.id, &row.census)?,
                    counter_version: row.counter_version,
                    redundancy: row.redundancy as u32,
                },
                classes: self.run_facts(row.id).await?.classes,
                jobs_total: row.jobs_total as u64,
                jobs_done: (row.jobs_total - row.jobs_remaining) as u64,
                is_final: row.finished_at.is_some() && row.open_conflicts == 0,
                priority: row.priority,
                cancelled: row.cancelled_at.is_some(),
            });
        }
        Ok(runs)
    }

    pub(super) async fn find_run(&self, spec: &RunSpec) -> Result<Option<RunId>, StoreError> {
        Ok(sqlx::query_scalar("SELECT id FROM runs WHERE census = $1 AND counter_version = $2 AND redundancy = $3")
            .bind(spec.census.to_string())
            .bind(&spec.counter_version)
            .bind(i64::from(spec.redundancy))
            .fetch_optional(&self.pool)
            .await?)
    }

    /// The run's [`RunRow`], or [`StoreError::UnknownRun`].
    pub(super) async fn ensure_run(&self, run: RunId) -> Result<RunRow, StoreError> {
        sqlx::query_as(RUN_ROW).bind(run).fetch_optional(&self.pool).await?.ok_or(StoreError::UnknownRun(run))
    }

    /// Refuses a spec the store cannot hold faithfully.
    fn check_new_spec(&self, spec: &RunSpec) -> Result<(), StoreError> {
        if spec.redundancy == 0 || spec.redundancy > MAX_REDUNDANCY {
            return Err(StoreError::Invalid(format!(
                "the redundancy factor must be 1 to {MAX_REDUNDANCY}, not {}",
                spec.redundancy
            )));
        }
        for (what, text) in [("census", &spec.census.to_string()), ("counter version", &spec.counter_version)] {
            if text.is_empty() || text.len() > MAX_KEY_LEN {
                return Err(StoreError::Invalid(format!("a {what} has 1 to {MAX_KEY_LEN} characters")));
            }
        }
        Ok(())
    }

    /// Refuses a job the store cannot hold faithfully.
    fn check_new_job(job: &JobSpec) -> Result<(), StoreError> {
        for (what, text) in [("job key", &job.key), ("class label", &job.group)] {
            if text.is_empty() || text.len() > MAX_KEY_LEN {
                return Err(StoreError::Invalid(format!("{what} {text:?}: 1 to {MAX_KEY_LEN} characters")));
            }
        }
        if job.weight == 0 {
            return Err(StoreError::Invalid(format!("job {:?}: weight 0: a class has at least one member", job.key)));
        }
        Ok(())
    }

    /// Creates the run from its jobs as they come, [`JOBS_PER_CHUNK`] at a
    /// time, in one transaction: what is held is one chunk and one entry a
    /// class (its number, weight and job count), never the job list. A key
    /// given twice within a chunk is named here; across chunks the
    /// database's unique key on (run, key) refuses it.
    pub(super) async fn insert_run(&self, spec: &RunSpec, jobs: JobStream) -> Result<RunId, StoreError> {
        self.check_new_spec(spec)?;
        if let Some(run) = self.find_run(spec).await? {
            let resumed = sqlx::query("UPDATE runs SET cancelled_at = NULL WHERE id = $1 AND cancelled_at IS NOT NULL")
                .bind(run)
                .execute(&self.pool)
                .await?;
            if resumed.rows_affected() > 0 {
                tracing::warn!(run, "a cancelled run was submitted again: it resumes");
            }
            return Ok(run);
        }
        let mut jobs = jobs.peekable();
        if jobs.peek().is_none() {
            return Err(StoreError::Invalid("a run needs at least one job".into()));
        }

        let now = now_ms();
        let mut tx = self.pool.begin().await?;
        // Classes numbered in order of first appearance. A class is stored
        // with the jobs of the chunk it first appears in; one whose jobs
        // reach later chunks has its job count set at the end.
        let mut classes: HashMap<String, ClassEntry> = HashMap::new();
        let mut total: u64 = 0;
        let mut created: Option<RunId> = None;
        loop {
            let chunk: Vec<JobSpec> = jobs.by_ref().take(JOBS_PER_CHUNK).collect();
            if chunk.is_empty() {
                break;
            }
            let mut keys = std::collections::HashSet::with_capacity(chunk.len());
            let mut new_classes: Vec<(usize, &str, u128)> = Vec::new();
            let mut job_classes: Vec<usize> = Vec::with_capacity(chunk.len());
            for job in &chunk {
                Self::check_new_job(job)?;
                if !keys.insert(job.key.as_str()) {
                    return Err(StoreError::Invalid(format!("job {:?} is given twice", job.key)));
                }
                let next = classes.len();
                let class = classes.entry(job.group.clone()).or_insert_with(|| {
                    new_classes.push((next, &job.group, job.weight));
                    ClassEntry { id: next, weight: job.weight, jobs: 0, stored_jobs: 0 }
                });
                if class.weight != job.weight {
                    return Err(StoreError::Invalid(format!("class {:?} is given two weights", job.group)));
                }
                class.jobs += 1;
                job_classes.push(class.id);
            }
            // The run's row, once its first chunk is known to be sound.
            let run = match created {
                Some(run) => run,
                None => {
                    // The job count is written when the last chunk is in.
                    let inserted = sqlx::query_scalar(
                        "INSERT INTO runs (census, counter_version, redundancy, jobs_total, jobs_remaining, created_at,
                                           class_power, max_lease_ms)
                         VALUES ($1, $2, $3, 0, 0, $4, $5, $6) RETURNING id",
                    )
                    .bind(spec.census.to_string())
                    .bind(&spec.counter_version)
                    .bind(i64::from(spec.redundancy))
                    .bind(now)
                    .bind(i64::from(spec.census.class_power()))
                    .bind(spec.census.longest_lease().map(|own| own.as_millis() as i64))
                    .fetch_one(&mut *tx)
                    .await;
                    let run: RunId = match inserted {
                        Ok(run) => run,
                        // Another coordinator created the same run first: use it.
                        Err(sqlx::Error::Database(error)) if error.is_unique_violation() => {
                            drop(tx);
                            return self
                                .find_run(spec)
                                .await?
                                .ok_or_else(|| StoreError::Database(sqlx::Error::Database(error)));
                        }
                        Err(error) => return Err(error.into()),
                    };
                    *created.insert(run)
                }
            };
            let per_statement = self.backend.rows_per_statement(1000, 4);
            for rows in new_classes.chunks(per_statement) {
                let values: Vec<String> = (0..rows.len())
                    .map(|i| {
                        let p = i * 4 + 2;
                        format!("($1, ${}, ${}, {}, ${})", p, p + 1, self.backend.count(&format!("${}", p + 2)), p + 3)
                    })
                    .collect();
                let sql = format!(
                    "INSERT INTO classes (run_id, class_id, label, weight, jobs_total) VALUES {}",
                    values.join(", ")
                );
                let mut query = sqlx::query(&sql).bind(run);
                for &(id, label, weight) in rows {
                    let class = classes.get_mut(label).expect("every new class is listed");
                    class.stored_jobs = class.jobs;
                    query = query.bind(id as i64).bind(label).bind(weight.to_string()).bind(class.jobs);
                }
                query.execute(&mut *tx).await?;
            }
            let per_statement = self.backend.rows_per_statement(1000, 2);
            for (rows, row_classes) in chunk.chunks(per_statement).zip(job_classes.chunks(per_statement)) {
                let values: Vec<String> =
                    (0..rows.len()).map(|i| format!("($1, ${}, ${}, $2, $2)", i * 2 + 3, i * 2 + 4)).collect();
                let sql = format!(
                    "INSERT INTO jobs (run_id, class_id, key, created_at, updated_at) VALUES {}",
                    values.join(", ")
                );
                let mut query = sqlx::query(&sql).bind(run).bind(now);
                for (job, &class) in rows.iter().zip(row_classes) {
                    query = query.bind(class as i64).bind(&job.key);
                }
                match query.execute(&mut *tx).await {
                    Ok(_) => {}
                    Err(sqlx::Error::Database(error)) if error.is_unique_violation() => {
                        return Err(StoreError::Invalid(format!(
                            "a job key is given twice (in different chunks of {JOBS_PER_CHUNK}): {}",
                            error.message()
                        )));
                    }
                    Err(error) => return Err(error.into()),
                }
            }
            total += chunk.len() as u64;
        }
        let run = created.expect("a run has at least one chunk");
        for class in classes.values().filter(|class| class.jobs != class.stored_jobs) {
            sqlx::query("UPDATE classes SET jobs_total = $3 WHERE run_id = $1 AND class_id = $2")
                .bind(run)
                .bind(class.id as i64)
                .bind(class.jobs)
                .execute(&mut *tx)
                .await?;
        }
        sqlx::query("UPDATE runs SET jobs_total = $2, jobs_remaining = $2 WHERE id = $1")
            .bind(run)
            .bind(total as i64)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        tracing::info!(run, census = %spec.census, classes = classes.len(), jobs = total, "run created");
        Ok(run)
    }

    pub(super) async fn cancel(&self, run: RunId) -> Result<(), StoreError> {
        self.ensure_run(run).await?;
        let now = now_ms();
        let mut tx = self.pool.begin().await?;
        sqlx::query("UPDATE runs SET cancelled_at = $2 WHERE id = $1 AND cancelled_at IS NULL")
            .bind(run)
            .bind(now)
            .execute(&mut *tx)
            .await?;
        self.release_leases(&mut tx, HeldBy::Run(run), now).await?;
        tx.commit().await?;
        tracing::warn!(run, "run cancelled");
        Ok(())
    }

    pub(super) async fn prioritize(&self, run: RunId, priority: i64) -> Result<(), StoreError> {
        self.ensure_run(run).await?;
        sqlx::query("UPDATE runs SET priority = $2 WHERE id = $1").bind(run).bind(priority).execute(&self.pool).await?;
        tracing::info!(run, priority, "run priority set");
        Ok(())
    }
}
