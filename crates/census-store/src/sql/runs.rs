//! Runs: creating one with its classes and jobs, finding and listing them,
//! cancelling and prioritising.

use std::sync::Arc;

use census_math::Band;
use sqlx::Row;
use sqlx::any::AnyRow;

use super::{RunFacts, SqlStore, now_ms};
use crate::{ClassSpec, MAX_REDUNDANCY, RunId, RunSpec, RunSummary, StoreError};

impl SqlStore {
    pub(super) async fn run_facts(&self, run: RunId) -> Result<Arc<RunFacts>, StoreError> {
        if let Some(facts) = self.runs.lock().expect("the run cache is never poisoned").get(&run) {
            return Ok(facts.clone());
        }
        let row = sqlx::query("SELECT counter FROM runs WHERE id = $1")
            .bind(run)
            .fetch_optional(&self.pool)
            .await?
            .ok_or(StoreError::UnknownRun(run))?;
        let classes = sqlx::query("SELECT class_id, representative FROM classes WHERE run_id = $1")
            .bind(run)
            .fetch_all(&self.pool)
            .await?;
        let representatives = classes
            .iter()
            .map(|row| Ok((row.try_get::<i64, _>(0)? as u32, row.try_get::<String, _>(1)?)))
            .collect::<Result<_, sqlx::Error>>()?;
        let facts = Arc::new(RunFacts { counter: row.try_get(0)?, representatives });
        self.runs.lock().expect("the run cache is never poisoned").insert(run, facts.clone());
        Ok(facts)
    }

    pub(super) async fn runs_where(&self, condition: &str, run: Option<RunId>) -> Result<Vec<RunSummary>, StoreError> {
        let sql = format!(
            "SELECT r.id, r.stage, r.counter, r.counter_version, r.redundancy, r.jobs_total, r.jobs_remaining,
                    r.finished_at, r.open_conflicts, r.priority, r.cancelled_at
             FROM runs r WHERE {condition} ORDER BY r.id"
        );
        let mut query = sqlx::query(&sql);
        if let Some(run) = run {
            query = query.bind(run);
        }
        let rows = query.fetch_all(&self.pool).await?;
        let mut runs = Vec::with_capacity(rows.len());
        for row in &rows {
            let run_id: RunId = row.try_get(0)?;
            let total: i64 = row.try_get(5)?;
            let remaining: i64 = row.try_get(6)?;
            runs.push(RunSummary {
                run_id,
                spec: RunSpec {
                    stage: row.try_get(1)?,
                    counter: row.try_get(2)?,
                    counter_version: row.try_get(3)?,
                    redundancy: row.try_get::<i64, _>(4)? as u32,
                },
                classes: self.run_facts(run_id).await?.representatives.len() as u64,
                jobs_total: total as u64,
                jobs_done: (total - remaining) as u64,
                is_final: row.try_get::<Option<i64>, _>(7)?.is_some() && row.try_get::<i64, _>(8)? == 0,
                priority: row.try_get(9)?,
                cancelled: row.try_get::<Option<i64>, _>(10)?.is_some(),
            });
        }
        Ok(runs)
    }

    pub(super) async fn find_run(&self, spec: &RunSpec) -> Result<Option<RunId>, StoreError> {
        let row = sqlx::query(
            "SELECT id FROM runs WHERE stage = $1 AND counter = $2 AND counter_version = $3 AND redundancy = $4",
        )
        .bind(&spec.stage)
        .bind(&spec.counter)
        .bind(&spec.counter_version)
        .bind(i64::from(spec.redundancy))
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.map(|row| row.get(0)))
    }

    pub(super) async fn ensure_run(&self, run: RunId) -> Result<AnyRow, StoreError> {
        sqlx::query(
            "SELECT finished_at, open_conflicts, CAST(s AS TEXT), CAST(n0 AS TEXT), jobs_total, jobs_remaining, failed_jobs, counted
             FROM runs WHERE id = $1",
        )
        .bind(run)
        .fetch_optional(&self.pool)
        .await?
        .ok_or(StoreError::UnknownRun(run))
    }

    pub(super) async fn insert_run(&self, spec: &RunSpec, classes: &[ClassSpec]) -> Result<RunId, StoreError> {
        if spec.redundancy == 0 || spec.redundancy > MAX_REDUNDANCY {
            return Err(StoreError::Invalid(format!(
                "the redundancy factor must be 1 to {MAX_REDUNDANCY}, not {}",
                spec.redundancy
            )));
        }
        if classes.is_empty() {
            return Err(StoreError::Invalid("a run needs at least one class".into()));
        }
        let mut ids = std::collections::HashSet::new();
        for class in classes {
            if let Err(error) = Band::parse(&class.representative) {
                return Err(StoreError::InvalidBand {
                    class_id: class.class_id,
                    representative: class.representative.clone(),
                    reason: error.to_string(),
                });
            }
            if class.size == 0 {
                return Err(StoreError::Invalid(format!("class {} has size 0", class.class_id)));
            }
            if !ids.insert(class.class_id) {
                return Err(StoreError::Invalid(format!("class {} is given twice", class.class_id)));
            }
        }
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

        let now = now_ms();
        let jobs = (classes.len() * 10) as i64;
        let mut tx = self.pool.begin().await?;
        let inserted = sqlx::query(
            "INSERT INTO runs (stage, counter, counter_version, redundancy, jobs_total, jobs_remaining, created_at)
             VALUES ($1, $2, $3, $4, $5, $5, $6) RETURNING id",
        )
        .bind(&spec.stage)
        .bind(&spec.counter)
        .bind(&spec.counter_version)
        .bind(i64::from(spec.redundancy))
        .bind(jobs)
        .bind(now)
        .fetch_one(&mut *tx)
        .await;
        let run: RunId = match inserted {
            Ok(row) => row.try_get(0)?,
            // Another coordinator created the same run first: use it.
            Err(sqlx::Error::Database(error)) if error.is_unique_violation() => {
                drop(tx);
                return self.find_run(spec).await?.ok_or_else(|| StoreError::Database(error.to_string()));
            }
            Err(error) => return Err(error.into()),
        };
        for chunk in classes.chunks(1000) {
            let mut sql = String::from("INSERT INTO classes (run_id, class_id, representative, size) VALUES ");
            for i in 0..chunk.len() {
                let p = i * 3 + 2;
                sql.push_str(&format!("{}($1, ${}, ${}, ${})", if i > 0 { ", " } else { "" }, p, p + 1, p + 2));
            }
            let mut query = sqlx::query(&sql).bind(run);
            for class in chunk {
                query = query.bind(i64::from(class.class_id)).bind(&class.representative).bind(class.size as i64);
            }
            query.execute(&mut *tx).await?;
        }
        let seeds = (0..10).map(|s| format!("SELECT {s} AS seed")).collect::<Vec<_>>().join(" UNION ALL ");
        sqlx::query(&format!(
            "INSERT INTO jobs (run_id, class_id, seed, created_at, updated_at)
             SELECT c.run_id, c.class_id, s.seed, $2, $2 FROM classes c CROSS JOIN ({seeds}) s
             WHERE c.run_id = $1 ORDER BY c.class_id, s.seed"
        ))
        .bind(run)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        tracing::info!(run, stage = %spec.stage, counter = %spec.counter, classes = classes.len(), jobs, "run created");
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
        sqlx::query(
            "UPDATE jobs SET state = 'pending', lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL, updated_at = $2
             WHERE run_id = $1 AND state = 'leased'",
        )
        .bind(run)
        .bind(now)
        .execute(&mut *tx)
        .await?;
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
