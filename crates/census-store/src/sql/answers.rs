//! Answers in SQL: the pages a fold reads, the sums it is checked against
//! (the `group_totals` and `run_progress` views), the answer written,
//! what progress shows, and what a stage accepted.

use async_trait::async_trait;
use num_bigint::BigUint;

use super::{Db, SqlBackend, SqlTx};
use crate::backend::{
    AcceptedPage, AnswerStorage, ClassPage, ClassSums, FinishedAnswer, FoldPage, FoldRow, FoldSource, Recent,
    RecentResults, parse_big, parse_count,
};
use crate::{AcceptedCount, ClassTotal, RunId, StoreError, WorkerProgress};

/// A job and its count, as a fold reads it.
#[derive(sqlx::FromRow)]
struct FoldColumns {
    job_id: i64,
    class_id: i64,
    key: String,
    label: String,
    /// Decimal text.
    weight: String,
    /// Decimal text.
    count: Option<String>,
}

/// A class's sums as the database has them (`group_totals`).
#[derive(sqlx::FromRow)]
struct ClassSumsRow {
    class_id: i64,
    label: String,
    count_sum: String,
    contribution: String,
}

/// A class as `class_totals` shows it.
#[derive(sqlx::FromRow)]
struct ClassRow {
    class_id: i64,
    label: String,
    weight: String,
    jobs_total: i64,
    jobs_done: i64,
    count_sum: String,
}

/// A done job's accepted count.
#[derive(sqlx::FromRow)]
struct AcceptedRow {
    id: i64,
    key: String,
    /// Decimal text.
    count: Option<String>,
}

/// An identity's statistics in a run.
#[derive(sqlx::FromRow)]
struct WorkerRow {
    worker: String,
    jobs: i64,
    completions: String,
    last_seen: i64,
}

/// The newest results of the last minute: how many, and when the oldest finished.
#[derive(sqlx::FromRow)]
struct RecentRow {
    results: i64,
    cost: i64,
    oldest: Option<i64>,
}

impl SqlBackend {
    /// The statement of a fold's page ([`FoldPage`]: $1 the run, $2 the
    /// job before the page, $3 its length): the page's jobs first, the
    /// next of the run's done jobs by id along the (run, state, id) index,
    /// then each job's count (its own, or its accepted results of the
    /// current round) and its class, looked up a row at a time
    /// ([`Dialect::join_each`](super::dialect::Dialect::join_each)), so a
    /// page reads its own rows whatever the plan: a fold of 10^7 jobs is
    /// linear. (Paging results by their own id sorted every result of the
    /// run for each page; a merge join from the first result read every
    /// result before the page's.)
    fn fold_page_sql(&self, source: FoldSource) -> String {
        let class = self.dialect.join_each("classes", "c", "c.run_id = j.run_id AND c.class_id = j.class_id");
        let jobs = "(SELECT id, run_id, class_id, key, round, count FROM jobs
                     WHERE run_id = $1 AND state = 'done' AND id > $2 ORDER BY id LIMIT $3) AS j";
        match source {
            FoldSource::DoneJobs => format!(
                "SELECT j.id AS job_id, j.class_id, j.key, c.label, CAST(c.weight AS TEXT) AS weight,
                        CAST(j.count AS TEXT) AS count
                 FROM {jobs} {class} ORDER BY j.id"
            ),
            FoldSource::AcceptedResults => {
                let accepted = self.dialect.join_each(
                    "results",
                    "x",
                    "x.job_id = j.id AND x.round = j.round AND x.outcome = 'accepted'",
                );
                format!(
                    "SELECT j.id AS job_id, j.class_id, j.key, c.label, CAST(c.weight AS TEXT) AS weight,
                            CAST(x.count AS TEXT) AS count
                     FROM {jobs} {accepted} {class} ORDER BY j.id, x.id"
                )
            }
        }
    }
}

#[async_trait]
impl AnswerStorage for SqlBackend {
    async fn fold_page(&self, tx: Option<&mut SqlTx>, page: &FoldPage) -> Result<Vec<FoldRow>, StoreError> {
        let sql = self.fold_page_sql(page.source);
        let query = sqlx::query_as::<_, FoldColumns>(&sql).bind(page.run).bind(page.after).bind(page.limit);
        let rows = match tx {
            Some(tx) => query.fetch_all(&mut **tx).await.db()?,
            None => query.fetch_all(&self.pool).await.db()?,
        };
        rows.into_iter()
            .map(|row| {
                Ok(FoldRow {
                    job_id: row.job_id,
                    class_id: row.class_id,
                    key: row.key,
                    label: row.label,
                    weight: parse_count(&row.weight)?,
                    count: parse_count(&row.count.unwrap_or_default())?,
                })
            })
            .collect()
    }

    /// Postgres computes the contributions in NUMERIC in its view; SQLite
    /// shows those the backend kept exactly.
    async fn class_sums_page(&self, tx: &mut SqlTx, page: &ClassPage) -> Result<Vec<ClassSums>, StoreError> {
        let rows: Vec<ClassSumsRow> = sqlx::query_as(
            "SELECT class_id, label, CAST(count_sum AS TEXT) AS count_sum, CAST(contribution AS TEXT) AS contribution
             FROM group_totals
             WHERE run_id = $1 AND class_id > $2 ORDER BY class_id LIMIT $3",
        )
        .bind(page.run)
        .bind(page.after)
        .bind(page.limit)
        .fetch_all(&mut **tx)
        .await
        .db()?;
        rows.into_iter()
            .map(|row| {
                Ok(ClassSums {
                    class_id: row.class_id,
                    label: row.label,
                    count_sum: parse_big(&row.count_sum)?,
                    contribution: parse_big(&row.contribution)?,
                })
            })
            .collect()
    }

    /// One row: the sum the backend keeps (SQLite) or Postgres adds up.
    async fn weighted_sum_so_far(&self, tx: Option<&mut SqlTx>, run: RunId) -> Result<BigUint, StoreError> {
        let query = sqlx::query_scalar("SELECT CAST(weighted_sum_so_far AS TEXT) FROM run_progress WHERE run_id = $1")
            .bind(run);
        let so_far: Option<String> = match tx {
            Some(tx) => query.fetch_one(&mut **tx).await.db()?,
            None => query.fetch_one(&self.pool).await.db()?,
        };
        parse_big(so_far.as_deref().unwrap_or("0"))
    }

    async fn write_answer(&self, tx: &mut SqlTx, answer: &FinishedAnswer<'_>) -> Result<(), StoreError> {
        let update = format!(
            "UPDATE runs SET finished_at = $1, weighted_sum = {}, answer = {} WHERE id = $4",
            self.dialect.big_number("$2"),
            self.dialect.big_number("$3")
        );
        sqlx::query(&update)
            .bind(answer.finished_at)
            .bind(answer.weighted_sum.to_string())
            .bind(answer.answer.to_string())
            .bind(answer.run)
            .execute(&mut **tx)
            .await
            .db()?;
        Ok(())
    }

    /// The sum of the run's slots in `run_leases`, which a trigger keeps
    /// (migration `run_leases`): a few rows, where a count of the leased
    /// jobs read an index entry for every job leased since the last vacuum.
    async fn leased_jobs(&self, run: RunId) -> Result<i64, StoreError> {
        sqlx::query_scalar("SELECT CAST(COALESCE(SUM(leased), 0) AS BIGINT) FROM run_leases WHERE run_id = $1")
            .bind(run)
            .fetch_one(&self.pool)
            .await
            .db()
    }

    async fn rejections_in(&self, run: RunId) -> Result<i64, StoreError> {
        sqlx::query_scalar("SELECT COUNT(*) FROM rejections WHERE run_id = $1")
            .bind(run)
            .fetch_one(&self.pool)
            .await
            .db()
    }

    /// A walk back along the (run_id, finished_at) index of at most
    /// `limit` entries, with the cost each result carries (migration
    /// `result_costs`); only a result recorded before has its job looked up,
    /// by its id. Never a read of the run's jobs.
    async fn recent_results(&self, recent: &Recent) -> Result<RecentResults, StoreError> {
        let mut tx = SqlTx::begin(&self.pool).await?;
        if let Some(walk) = self.dialect.walk_in_index_order() {
            sqlx::query(walk).execute(&mut *tx).await.db()?;
        }
        let row: RecentRow = sqlx::query_as(&format!(
            "SELECT COUNT(*) AS results,
                    COALESCE(CAST(SUM(COALESCE(newest.cost, (SELECT j.cost FROM jobs j WHERE j.id = newest.job_id))) AS BIGINT), 0) AS cost,
                    MIN(newest.finished_at) AS oldest FROM
               (SELECT job_id, finished_at, cost FROM results WHERE run_id = $1 AND finished_at >= $2
                ORDER BY finished_at DESC LIMIT {}) AS newest",
            recent.limit,
        ))
        .bind(recent.run)
        .bind(recent.since)
        .fetch_one(&mut *tx)
        .await.db()?;
        tx.commit().await?;
        Ok(RecentResults { results: row.results, cost: row.cost, oldest: row.oldest })
    }

    async fn worker_stats(&self, run: RunId, limit: u32) -> Result<Vec<WorkerProgress>, StoreError> {
        let rows: Vec<WorkerRow> = sqlx::query_as(
            "SELECT worker, jobs, CAST(completions AS TEXT) AS completions, last_seen FROM worker_stats
             WHERE run_id = $1 ORDER BY jobs DESC, worker LIMIT $2",
        )
        .bind(run)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await
        .db()?;
        rows.into_iter()
            .map(|row| {
                Ok(WorkerProgress {
                    worker: row.worker,
                    jobs: row.jobs as u64,
                    completions: parse_big(&row.completions)?.to_string(),
                    last_seen_unix: row.last_seen / 1000,
                })
            })
            .collect()
    }

    async fn workers_of(&self, run: RunId) -> Result<i64, StoreError> {
        sqlx::query_scalar("SELECT COUNT(*) FROM worker_stats WHERE run_id = $1")
            .bind(run)
            .fetch_one(&self.pool)
            .await
            .db()
    }

    async fn class_totals(&self, page: &ClassPage) -> Result<Vec<ClassTotal>, StoreError> {
        let rows: Vec<ClassRow> = sqlx::query_as(
            "SELECT class_id, label, CAST(weight AS TEXT) AS weight, jobs_total, jobs_done,
                    CAST(count_sum AS TEXT) AS count_sum
             FROM classes WHERE run_id = $1 AND class_id > $2 ORDER BY class_id LIMIT $3",
        )
        .bind(page.run)
        .bind(page.after)
        .bind(page.limit)
        .fetch_all(&self.pool)
        .await
        .db()?;
        rows.into_iter()
            .map(|row| {
                Ok(ClassTotal {
                    class_id: row.class_id as u32,
                    label: row.label,
                    weight: parse_count(&row.weight)?,
                    jobs_total: row.jobs_total as u32,
                    jobs_done: row.jobs_done as u32,
                    count_sum: parse_big(&row.count_sum)?,
                })
            })
            .collect()
    }

    /// Along the (run, state, stage, id) index of staged jobs, or the
    /// (run, state, id) index of a run of one stage.
    async fn accepted_counts(&self, page: &AcceptedPage) -> Result<Vec<AcceptedCount>, StoreError> {
        let stage = page.stage.map_or(String::new(), |stage| format!("AND stage = {stage}"));
        let rows: Vec<AcceptedRow> = sqlx::query_as(&format!(
            "SELECT id, key, CAST(count AS TEXT) AS count FROM jobs
             WHERE run_id = $1 AND state = 'done' {stage} AND id > $2 ORDER BY id LIMIT $3"
        ))
        .bind(page.run)
        .bind(page.after)
        .bind(page.limit)
        .fetch_all(&self.pool)
        .await
        .db()?;
        rows.into_iter()
            .map(|row| {
                Ok(AcceptedCount { job_id: row.id, key: row.key, count: parse_count(&row.count.unwrap_or_default())? })
            })
            .collect()
    }
}
