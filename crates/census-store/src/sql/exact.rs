//! Exact sums on SQLite (migration 0006). SQLite's numbers are 64-bit
//! integers or doubles, so counts, weights and sums are canonical decimal
//! TEXT there and SQLite never adds them: the store reads a sum, adds in
//! Rust (`num-bigint`) and writes the new value, in the transaction that
//! records the results (SQLite has one writer at a time, so nothing can
//! change the sum in between). It keeps, per class, the count sum and the
//! contribution (weight x count sum^class_power), and per run the count of
//! done jobs' counts and the weighted sum so far, so the views only show
//! stored text. Postgres adds NUMERIC exactly in SQL and computes the same
//! columns in its views ([`super::dialect::Dialect::sums_in_sql`]).

use std::collections::BTreeMap;

use num_bigint::BigUint;
use sqlx::FromRow;
use sqlx::any::AnyRow;

use super::{Db, SqlBackend, SqlTx, bigint, plain, values_rows};
use crate::backend::{ClassChanges, PAGE, contribution, parse_big};
use crate::{RunId, StoreError};

/// Whether counts come in (results accepted) or go out (jobs reopened).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Direction {
    Add,
    TakeOut,
}

impl Direction {
    fn apply(self, old: &BigUint, amount: &BigUint, what: &dyn Fn() -> String) -> Result<BigUint, StoreError> {
        match self {
            Direction::Add => Ok(old + amount),
            Direction::TakeOut if amount <= old => Ok(old - amount),
            Direction::TakeOut => {
                Err(StoreError::Internal(format!("{}: taking {amount} out of {old} would go below zero", what())))
            }
        }
    }
}

/// The rows of `sql` for `run` after the page key `after`, a page at a time
/// (`sql` binds the run, the key and the page size as $1, $2 and $3, and
/// orders by the key): a run's rows are never all in memory at once.
async fn page_after<Row>(
    connection: &mut sqlx::AnyConnection,
    sql: &str,
    run: RunId,
    after: i64,
) -> Result<Vec<Row>, StoreError>
where
    Row: for<'r> FromRow<'r, AnyRow> + Send + Unpin,
{
    sqlx::query_as(sql).bind(run).bind(after).bind(PAGE).fetch_all(connection).await.db()
}

/// A class's sums as SQLite stores them (decimal text).
#[derive(FromRow)]
struct ClassSumsRow {
    class_id: i64,
    weight: String,
    count_sum: String,
    contribution: String,
}

/// A done job's count (decimal text).
#[derive(FromRow)]
struct DoneJobRow {
    id: i64,
    class_id: i64,
    count: Option<String>,
}

/// A class's weight (decimal text).
#[derive(FromRow)]
struct WeightRow {
    class_id: i64,
    weight: String,
}

/// An accepted result's identity and count (decimal text).
#[derive(FromRow)]
struct AcceptedRow {
    id: i64,
    worker: String,
    count: String,
}

impl SqlBackend {
    /// SQLite: adds (or takes out) `changes` in the classes' count sums and
    /// done jobs, with their contributions and their runs' weighted sums so
    /// far, exactly. Classes and runs are written in key order.
    pub(super) async fn change_classes_exactly(
        &self,
        tx: &mut SqlTx,
        changes: &ClassChanges,
        direction: Direction,
    ) -> Result<(), StoreError> {
        let mut by_run: BTreeMap<RunId, Vec<(i64, &BigUint, i64)>> = BTreeMap::new();
        for (&(run, class), (count, jobs)) in changes {
            by_run.entry(run).or_default().push((class, count, *jobs));
        }
        for (run, classes) in by_run {
            let power = self.class_power_in(tx, run).await?;
            let (mut added, mut removed) = (BigUint::default(), BigUint::default());
            for chunk in classes.chunks(self.dialect.rows_per_statement(500, 4)) {
                let placeholders: Vec<String> = (2..chunk.len() + 2).map(|i| format!("${i}")).collect();
                let sql = format!(
                    "SELECT class_id, weight, count_sum, contribution FROM classes
                     WHERE run_id = $1 AND class_id IN ({})",
                    placeholders.join(", ")
                );
                let mut query = sqlx::query_as::<_, ClassSumsRow>(&sql).bind(run);
                for (class, _, _) in chunk {
                    query = query.bind(*class);
                }
                let mut stored: BTreeMap<i64, (BigUint, BigUint, BigUint)> = BTreeMap::new();
                for row in query.fetch_all(&mut **tx).await.db()? {
                    let sums = (parse_big(&row.weight)?, parse_big(&row.count_sum)?, parse_big(&row.contribution)?);
                    stored.insert(row.class_id, sums);
                }
                let mut rows = Vec::with_capacity(chunk.len());
                for &(class, count, jobs) in chunk {
                    let (weight, sum, old) = stored
                        .get(&class)
                        .ok_or_else(|| StoreError::Internal(format!("run {run} has no class {class}")))?;
                    let sum = direction.apply(sum, count, &|| format!("run {run}, class {class}: count sum"))?;
                    let new = contribution(weight, &sum, power);
                    added += &new;
                    removed += old;
                    let jobs = if direction == Direction::Add { jobs } else { -jobs };
                    rows.push((class, sum.to_string(), new.to_string(), jobs));
                }
                let values = values_rows(rows.len(), 2, &[&bigint, &plain, &plain, &bigint]);
                let sql = format!(
                    "UPDATE classes SET count_sum = v.column2, contribution = v.column3,
                            jobs_done = classes.jobs_done + v.column4
                     FROM (VALUES {values}) AS v WHERE classes.run_id = $1 AND classes.class_id = v.column1"
                );
                let mut update = sqlx::query(&sql).bind(run);
                for (class, sum, contribution, jobs) in rows {
                    update = update.bind(class).bind(sum).bind(contribution).bind(jobs);
                }
                update.execute(&mut **tx).await.db()?;
            }
            let so_far: String = sqlx::query_scalar("SELECT weighted_sum_so_far FROM runs WHERE id = $1")
                .bind(run)
                .fetch_one(&mut **tx)
                .await
                .db()?;
            let so_far = parse_big(&so_far)? + added;
            let so_far = Direction::TakeOut.apply(&so_far, &removed, &|| format!("run {run}: weighted sum so far"))?;
            sqlx::query("UPDATE runs SET weighted_sum_so_far = $2 WHERE id = $1")
                .bind(run)
                .bind(so_far.to_string())
                .execute(&mut **tx)
                .await
                .db()?;
        }
        Ok(())
    }

    /// The run's new `counted` once `amount` is added or taken out: the
    /// value to bind at `parameter`, and the SQL expression of the new
    /// value. Postgres adds or subtracts in NUMERIC; SQLite is given the
    /// exact new value.
    pub(super) async fn new_counted(
        &self,
        tx: &mut SqlTx,
        run: RunId,
        amount: &BigUint,
        direction: Direction,
        parameter: &str,
    ) -> Result<(String, String), StoreError> {
        let bound = self.dialect.count(parameter);
        if self.dialect.sums_in_sql() {
            let sign = if direction == Direction::Add { "+" } else { "-" };
            return Ok((amount.to_string(), format!("counted {sign} {bound}")));
        }
        let counted: String = sqlx::query_scalar("SELECT counted FROM runs WHERE id = $1")
            .bind(run)
            .fetch_optional(&mut **tx)
            .await
            .db()?
            .ok_or(StoreError::UnknownRun(run))?;
        let counted = direction.apply(&parse_big(&counted)?, amount, &|| format!("run {run}: counted"))?;
        Ok((counted.to_string(), bound))
    }

    /// SQLite: a worker's completions in a run once `amount` is added.
    pub(super) async fn completions_after(
        &self,
        tx: &mut SqlTx,
        run: RunId,
        worker: &str,
        amount: &BigUint,
    ) -> Result<String, StoreError> {
        let stored: Option<String> =
            sqlx::query_scalar("SELECT completions FROM worker_stats WHERE run_id = $1 AND worker = $2")
                .bind(run)
                .bind(worker)
                .fetch_optional(&mut **tx)
                .await
                .db()?;
        let old = match stored {
            Some(completions) => parse_big(&completions)?,
            None => BigUint::default(),
        };
        Ok((old + amount).to_string())
    }

    async fn class_power_in(&self, tx: &mut SqlTx, run: RunId) -> Result<u32, StoreError> {
        let power: i64 = sqlx::query_scalar("SELECT class_power FROM runs WHERE id = $1")
            .bind(run)
            .fetch_one(&mut **tx)
            .await
            .db()?;
        Ok(power as u32)
    }

    /// SQLite, on opening: rebuilds the sums of every run that migration
    /// 0006 marked (`sums_exact = 0`): its sums were 64-bit INTEGERs that
    /// may have overflowed to REAL. Each is summed again exactly from the
    /// run's own rows (the done jobs' counts, which were exact 64-bit
    /// integers, and the accepted results), one run a transaction, walking
    /// the rows a page at a time.
    pub(super) async fn rebuild_inexact_sums(&self) -> Result<(), StoreError> {
        if self.dialect.sums_in_sql() {
            return Ok(());
        }
        let runs: Vec<RunId> = sqlx::query_scalar("SELECT id FROM runs WHERE sums_exact = 0 ORDER BY id")
            .fetch_all(&self.pool)
            .await
            .db()?;
        for run in runs {
            let mut tx = SqlTx::begin(&self.pool).await?;
            let power = self.class_power_in(&mut tx, run).await?;
            let mut class_sums: BTreeMap<i64, BigUint> = BTreeMap::new();
            let mut counted = BigUint::default();
            let mut after = -1i64;
            loop {
                let page: Vec<DoneJobRow> = page_after(
                    &mut tx,
                    "SELECT id, class_id, count FROM jobs WHERE run_id = $1 AND state = 'done' AND id > $2
                     ORDER BY id LIMIT $3",
                    run,
                    after,
                )
                .await?;
                let Some(last) = page.last() else { break };
                after = last.id;
                for row in page {
                    let count = parse_big(row.count.as_deref().unwrap_or("0"))?;
                    counted += &count;
                    *class_sums.entry(row.class_id).or_default() += count;
                }
            }
            let mut weighted = BigUint::default();
            let mut after = -1i64;
            loop {
                let page: Vec<WeightRow> = page_after(
                    &mut tx,
                    "SELECT class_id, weight FROM classes WHERE run_id = $1 AND class_id > $2 ORDER BY class_id LIMIT $3",
                    run,
                    after,
                )
                .await?;
                let Some(last) = page.last() else { break };
                after = last.class_id;
                for row in page {
                    let class = row.class_id;
                    let weight = parse_big(&row.weight)?;
                    let sum = class_sums.remove(&class).unwrap_or_default();
                    let share = contribution(&weight, &sum, power);
                    weighted += &share;
                    sqlx::query(
                        "UPDATE classes SET count_sum = $3, contribution = $4 WHERE run_id = $1 AND class_id = $2",
                    )
                    .bind(run)
                    .bind(class)
                    .bind(sum.to_string())
                    .bind(share.to_string())
                    .execute(&mut *tx)
                    .await
                    .db()?;
                }
            }
            let mut completions: BTreeMap<String, BigUint> = BTreeMap::new();
            let mut after = -1i64;
            loop {
                let page: Vec<AcceptedRow> = page_after(
                    &mut tx,
                    "SELECT id, worker, count FROM results WHERE run_id = $1 AND outcome = 'accepted' AND id > $2
                     ORDER BY id LIMIT $3",
                    run,
                    after,
                )
                .await?;
                let Some(last) = page.last() else { break };
                after = last.id;
                for row in page {
                    *completions.entry(row.worker).or_default() += parse_big(&row.count)?;
                }
            }
            for (worker, sum) in &completions {
                sqlx::query("UPDATE worker_stats SET completions = $3 WHERE run_id = $1 AND worker = $2")
                    .bind(run)
                    .bind(worker)
                    .bind(sum.to_string())
                    .execute(&mut *tx)
                    .await
                    .db()?;
            }
            sqlx::query("UPDATE runs SET counted = $2, weighted_sum_so_far = $3, sums_exact = 1 WHERE id = $1")
                .bind(run)
                .bind(counted.to_string())
                .bind(weighted.to_string())
                .execute(&mut *tx)
                .await
                .db()?;
            tx.commit().await?;
            tracing::info!(run, "the run's sums were rebuilt exactly (migration 0006)");
        }
        Ok(())
    }
}
