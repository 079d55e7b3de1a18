//! Totals: finishing a run when its last job is accepted (S and N0 from the
//! class sums, rechecked in SQL), and reading progress, totals and the
//! per-class sums.

use census_math::total::{n0_from_s, s_from_classes};
use num_bigint::BigUint;
use sqlx::Row;
use sqlx::any::AnyRow;

use std::time::Duration;

use super::{Backend, SqlStore, now_ms};
use crate::{ClassTotal, Progress, RunId, RunTotal, StoreError, WorkerProgress};

/// A decimal string from the database as a big integer.
fn big(text: &str) -> Result<BigUint, StoreError> {
    // Postgres may print a NUMERIC with a fractional part of zeros.
    let integer = text.split('.').next().unwrap_or(text);
    integer.parse().map_err(|_| StoreError::Database(format!("{text:?} is not a whole number")))
}

impl SqlStore {
    /// Recomputes a final total from the accepted results of the current
    /// rounds, and refuses a stored total that differs (a tampered or
    /// damaged database), so that no wrong answer is ever shown as final.
    pub(super) async fn recheck_final(&self, run: RunId, s: &BigUint, n0: &BigUint) -> Result<(), StoreError> {
        let rows = sqlx::query(
            "SELECT c.size, CAST(SUM(x.count) AS TEXT), COUNT(*) FROM results x
             JOIN jobs j ON j.id = x.job_id AND j.round = x.round AND j.state = 'done'
             JOIN classes c ON c.run_id = j.run_id AND c.class_id = j.class_id
             WHERE x.run_id = $1 AND x.outcome = 'accepted'
             GROUP BY c.class_id, c.size",
        )
        .bind(run)
        .fetch_all(&self.pool)
        .await?;
        let accepted: i64 = rows.iter().map(|row| row.try_get::<i64, _>(2)).sum::<Result<i64, _>>()?;
        let jobs: i64 = self.ensure_run(run).await?.try_get(4)?;
        let recomputed = Self::exact_s(&rows)?;
        if accepted != jobs || &recomputed != s || &n0_from_s(&recomputed) != n0 {
            tracing::error!(run, stored_s = %s, recomputed_s = %recomputed, accepted, jobs, "the stored total does not match the accepted results");
            return Err(StoreError::TotalMismatch {
                stored: format!("S = {s}, N0 = {n0}"),
                computed: format!("S = {recomputed} from {accepted} accepted results of {jobs} jobs"),
            });
        }
        Ok(())
    }

    /// S from the class sums, computed in Rust.
    pub(super) fn exact_s(rows: &[AnyRow]) -> Result<BigUint, StoreError> {
        let mut classes = Vec::with_capacity(rows.len());
        for row in rows {
            let size = row.try_get::<i64, _>(0)? as u64;
            let seed_sum: u64 = row.try_get::<String, _>(1)?.split('.').next().unwrap_or("").parse().map_err(|_| {
                StoreError::Database(format!("class seed sum {:?} is not a whole number", row.get::<String, _>(1)))
            })?;
            classes.push((size, seed_sum));
        }
        Ok(s_from_classes(classes))
    }

    /// Writes S and N0 if every job of the run is done and no conflict is
    /// open, inside the caller's transaction; true when it did. The sum is
    /// computed twice, by the database and by `num-bigint`, and a mismatch
    /// aborts the transaction.
    pub(super) async fn finish_if_complete(
        &self,
        tx: &mut sqlx::Transaction<'_, sqlx::Any>,
        run: RunId,
    ) -> Result<bool, StoreError> {
        let row = sqlx::query("SELECT jobs_remaining, open_conflicts, finished_at FROM runs WHERE id = $1")
            .bind(run)
            .fetch_one(&mut **tx)
            .await?;
        let (remaining, conflicts, finished): (i64, i64, Option<i64>) =
            (row.try_get(0)?, row.try_get(1)?, row.try_get(2)?);
        if remaining > 0 || conflicts > 0 || finished.is_some() {
            return Ok(false);
        }
        let classes = sqlx::query("SELECT size, CAST(seed_sum AS TEXT) FROM classes WHERE run_id = $1")
            .bind(run)
            .fetch_all(&mut **tx)
            .await?;
        let s = Self::exact_s(&classes)?;
        let n0 = n0_from_s(&s);
        let in_sql = sqlx::query("SELECT CAST(SUM(size * seed_sum) AS TEXT) FROM classes WHERE run_id = $1")
            .bind(run)
            .fetch_one(&mut **tx)
            .await?;
        let sql_s = big(&in_sql.try_get::<String, _>(0)?)?;
        if sql_s != s {
            return Err(StoreError::TotalMismatch { stored: sql_s.to_string(), computed: s.to_string() });
        }
        if self.backend == Backend::Postgres {
            let row = sqlx::query(
                "SELECT CAST(SUM(size * seed_sum) * 362880 * 72 * 72 AS TEXT) FROM classes WHERE run_id = $1",
            )
            .bind(run)
            .fetch_one(&mut **tx)
            .await?;
            let sql_n0 = big(&row.try_get::<String, _>(0)?)?;
            if sql_n0 != n0 {
                return Err(StoreError::TotalMismatch { stored: sql_n0.to_string(), computed: n0.to_string() });
            }
        }
        let update = format!(
            "UPDATE runs SET finished_at = $1, s = {}, n0 = {} WHERE id = $4",
            self.backend.big_number("$2"),
            self.backend.big_number("$3")
        );
        sqlx::query(&update)
            .bind(now_ms())
            .bind(s.to_string())
            .bind(n0.to_string())
            .bind(run)
            .execute(&mut **tx)
            .await?;
        tracing::info!(run, s = %s, n0 = %n0, "run finished");
        Ok(true)
    }

    pub(super) async fn read_progress(&self, run: RunId) -> Result<Progress, StoreError> {
        // Read from the run's counters and small index ranges, never a scan
        // of every job: progress is polled while the run is busiest.
        let run_row = self.ensure_run(run).await?;
        let mut progress = Progress { run_id: run, ..Progress::default() };
        progress.jobs_total = run_row.try_get::<i64, _>(4)? as u64;
        progress.done = progress.jobs_total - run_row.try_get::<i64, _>(5)? as u64;
        progress.failed = run_row.try_get::<i64, _>(6)? as u64;
        progress.conflicts = run_row.try_get::<i64, _>(1)? as u64;
        let now = now_ms();
        let leased = sqlx::query("SELECT COUNT(*) FROM jobs WHERE state = 'leased' AND run_id = $1")
            .bind(run)
            .fetch_one(&self.pool)
            .await?;
        progress.leased = leased.try_get::<i64, _>(0)? as u64;
        progress.pending = progress.jobs_total.saturating_sub(progress.done + progress.failed + progress.leased);
        progress.completions_counted = run_row.try_get::<i64, _>(7)?.to_string();
        let rejected =
            sqlx::query("SELECT COUNT(*) FROM rejections WHERE run_id = $1").bind(run).fetch_one(&self.pool).await?;
        progress.rejected = rejected.try_get::<i64, _>(0)? as u64;

        let recent = sqlx::query(
            // Results of every outcome: the (run_id, finished_at) index alone answers it.
            "SELECT COUNT(*), MIN(finished_at) FROM results WHERE run_id = $1 AND finished_at >= $2",
        )
        .bind(run)
        .bind(now - 60_000)
        .fetch_one(&self.pool)
        .await?;
        let recent_jobs: i64 = recent.try_get(0)?;
        if let Some(first) = recent.try_get::<Option<i64>, _>(1)? {
            let window = ((now - first) as f64 / 1e3).max(1.0);
            progress.jobs_per_second = recent_jobs as f64 / window;
        }
        let remaining = progress.jobs_total.saturating_sub(progress.done);
        if progress.jobs_per_second > 0.0 && remaining > 0 {
            progress.eta = Some(Duration::from_secs_f64(remaining as f64 / progress.jobs_per_second));
        }
        let workers = sqlx::query(
            "SELECT worker, jobs, completions, last_seen FROM worker_stats WHERE run_id = $1 ORDER BY worker",
        )
        .bind(run)
        .fetch_all(&self.pool)
        .await?;
        for row in &workers {
            progress.workers.push(WorkerProgress {
                worker: row.try_get(0)?,
                jobs: row.try_get::<i64, _>(1)? as u64,
                completions: row.try_get::<i64, _>(2)?.to_string(),
                last_seen_unix: row.try_get::<i64, _>(3)? / 1000,
            });
        }
        Ok(progress)
    }

    pub(super) async fn read_total(&self, run: RunId) -> Result<RunTotal, StoreError> {
        let row = self.ensure_run(run).await?;
        let finished: Option<i64> = row.try_get(0)?;
        let conflicts: i64 = row.try_get(1)?;
        if finished.is_some() {
            let s = big(&row.try_get::<Option<String>, _>(2)?.unwrap_or_default())?;
            let n0 = big(&row.try_get::<Option<String>, _>(3)?.unwrap_or_default())?;
            self.recheck_final(run, &s, &n0).await?;
            return Ok(RunTotal { run_id: run, is_final: conflicts == 0, s: s.to_string(), n0: n0.to_string() });
        }
        let classes = sqlx::query("SELECT size, CAST(seed_sum AS TEXT) FROM classes WHERE run_id = $1")
            .bind(run)
            .fetch_all(&self.pool)
            .await?;
        let s = Self::exact_s(&classes)?;
        Ok(RunTotal { run_id: run, is_final: false, n0: n0_from_s(&s).to_string(), s: s.to_string() })
    }

    pub(super) async fn read_class_totals(&self, run: RunId) -> Result<Vec<ClassTotal>, StoreError> {
        self.ensure_run(run).await?;
        let rows = sqlx::query(
            "SELECT class_id, representative, size, seeds_done, CAST(seed_sum AS TEXT) FROM classes
             WHERE run_id = $1 ORDER BY class_id",
        )
        .bind(run)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                let seeds_done = row.try_get::<i64, _>(3)? as u32;
                Ok(ClassTotal {
                    class_id: row.try_get::<i64, _>(0)? as u32,
                    representative: row.try_get(1)?,
                    size: row.try_get::<i64, _>(2)? as u64,
                    seeds_done,
                    seed_sum: big(&row.try_get::<String, _>(4)?)?.to_string(),
                    complete: seeds_done == 10,
                })
            })
            .collect()
    }
}
