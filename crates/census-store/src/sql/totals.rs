//! Totals: finishing a run when its last job is accepted (the census's fold
//! of the job counts, its sums rechecked in SQL), and reading progress,
//! answers and the per-class sums.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use census_math::census::{Answer, Census};
use num_bigint::BigUint;
use sqlx::Row;
use sqlx::any::AnyRow;

use super::exact::contribution;
use super::{SqlStore, now_ms, parse_big, parse_count, read_census};
use crate::{ClassTotal, JobSpec, Progress, RunId, RunTotal, StoreError, WorkerProgress};

/// A run's answer, folded from its jobs' counts, with the sums the
/// database must agree with.
struct Folded {
    answer: Answer,
    /// Sum over classes of weight x (count sum)^class_power.
    weighted_sum: BigUint,
    /// Per class label: its weight and the sum of its jobs' counts.
    class_sums: BTreeMap<String, (u128, BigUint)>,
}

/// Where a fold reads a run's jobs and counts: the done jobs (finishing a
/// run), or the accepted results of the current rounds (rechecking a
/// finished one). Each is read a page at a time, never the whole run at
/// once, walking the run's done jobs in id order along the (run, state, id)
/// index, after the page key ($2, $3): the job id, and the result id, so a
/// job with two accepted results (a damaged file) is never cut between
/// pages. (Paging results by their own id sorted every result of the run
/// for each page.)
#[derive(Debug, Clone, Copy)]
enum Source {
    DoneJobs,
    AcceptedResults,
}

impl Source {
    /// A page of (job id, row id, job key, class label, weight, count) rows.
    fn page_sql(self) -> &'static str {
        match self {
            Source::DoneJobs => {
                "SELECT j.id, j.id, j.key, c.label, CAST(c.weight AS TEXT), CAST(j.count AS TEXT)
                 FROM jobs j JOIN classes c ON c.run_id = j.run_id AND c.class_id = j.class_id
                 WHERE j.run_id = $1 AND j.state = 'done' AND j.id >= $2 AND (j.id > $2 OR j.id > $3)
                 ORDER BY j.id LIMIT $4"
            }
            Source::AcceptedResults => {
                "SELECT j.id, x.id, j.key, c.label, CAST(c.weight AS TEXT), CAST(x.count AS TEXT)
                 FROM jobs j
                 JOIN results x ON x.job_id = j.id AND x.round = j.round AND x.outcome = 'accepted'
                 JOIN classes c ON c.run_id = j.run_id AND c.class_id = j.class_id
                 WHERE j.run_id = $1 AND j.state = 'done' AND j.id >= $2 AND (j.id > $2 OR x.id > $3)
                 ORDER BY j.id, x.id LIMIT $4"
            }
        }
    }

    /// One page of rows after the page key `after`.
    async fn page(
        self,
        connection: &mut sqlx::AnyConnection,
        run: RunId,
        after: (i64, i64),
    ) -> Result<Vec<AnyRow>, StoreError> {
        Ok(sqlx::query(self.page_sql()).bind(run).bind(after.0).bind(after.1).bind(PAGE).fetch_all(connection).await?)
    }
}

/// Rows a page of a fold or a check reads (a few MB at most).
const PAGE: i64 = 10_000;

/// The fold of `counts` (one per job of `jobs`), the census's own jobs being
/// `expected`, with its class sums and weighted sum.
fn fold_counts(census: Census, expected: &[JobSpec], jobs: &[JobSpec], counts: &[u128]) -> Result<Folded, StoreError> {
    let answer = census.fold_against(expected, jobs, counts).map_err(StoreError::Fold)?;
    let mut class_sums: BTreeMap<String, (u128, BigUint)> = BTreeMap::new();
    for (job, &count) in jobs.iter().zip(counts) {
        let class = class_sums.entry(job.group.clone()).or_insert_with(|| (job.weight, BigUint::default()));
        class.1 += count;
    }
    let weighted_sum =
        class_sums.values().map(|(weight, sum)| contribution(&BigUint::from(*weight), sum, census.class_power())).sum();
    Ok(Folded { answer, weighted_sum, class_sums })
}

impl SqlStore {
    /// The census's own jobs, built once per census (the 9x9 catalogue
    /// stage builds a class table for them).
    async fn expected_jobs(&self, census: Census) -> Result<Arc<Vec<JobSpec>>, StoreError> {
        if let Some(jobs) = self.expected.lock().expect("never poisoned").get(&census) {
            return Ok(jobs.clone());
        }
        let jobs = tokio::task::spawn_blocking(move || census.jobs())
            .await
            .map_err(|e| StoreError::Internal(format!("building the census's jobs panicked: {e}")))?
            .map_err(StoreError::Fold)?;
        let jobs = Arc::new(jobs);
        self.expected.lock().expect("never poisoned").insert(census, jobs.clone());
        Ok(jobs)
    }

    /// Folds the run's jobs and counts from `source` with the run's census.
    /// The rows are read a page at a time and matched, as they come, with
    /// the census's own jobs (kept once per census): what is held besides
    /// is one count a job, never the rows. Anything but exactly the
    /// census's jobs, each once, is refused by the census's fold (which
    /// names what is wrong), so a partial or forged job list never gives
    /// an answer.
    async fn fold_run(
        &self,
        connection: &mut sqlx::AnyConnection,
        census: Census,
        run: RunId,
        source: Source,
    ) -> Result<Folded, StoreError> {
        let expected = self.expected_jobs(census).await?;
        let mut counts: Vec<Option<u128>> = vec![None; expected.len()];
        // The rows come in the census's order unless the run was made by an
        // older version; then a key is looked up.
        let mut by_key: Option<HashMap<&str, usize>> = None;
        let mut next = 0;
        let mut faithful = true;
        let mut after = (-1i64, -1i64);
        'pages: loop {
            let page = source.page(connection, run, after).await?;
            let Some(last) = page.last() else { break };
            after = (last.try_get(0)?, last.try_get(1)?);
            for row in &page {
                let key: String = row.try_get(2)?;
                let position = if expected.get(next).is_some_and(|job| job.key == key) {
                    Some(next)
                } else {
                    by_key
                        .get_or_insert_with(|| {
                            expected.iter().enumerate().map(|(i, job)| (job.key.as_str(), i)).collect()
                        })
                        .get(key.as_str())
                        .copied()
                };
                let job = position.map(|i| (i, &expected[i]));
                let Some((i, job)) = job.filter(|(i, _)| counts[*i].is_none()) else {
                    faithful = false;
                    break 'pages;
                };
                if job.group != row.try_get::<String, _>(3)?
                    || job.weight != parse_count(&row.try_get::<String, _>(4)?)?
                {
                    faithful = false;
                    break 'pages;
                }
                counts[i] = Some(parse_count(&row.try_get::<Option<String>, _>(5)?.unwrap_or_default())?);
                next = i + 1;
            }
        }
        if !faithful || counts.iter().any(Option::is_none) {
            return self.fold_every_row(connection, census, expected, run, source).await;
        }
        let counts: Vec<u128> = counts.into_iter().flatten().collect();
        tokio::task::spawn_blocking(move || fold_counts(census, &expected, &expected, &counts))
            .await
            .map_err(|e| StoreError::Internal(format!("folding the answer panicked: {e}")))?
    }

    /// The fold of a run whose rows are not exactly its census's jobs: all
    /// of them, as stored, for the census's fold to say what is wrong.
    async fn fold_every_row(
        &self,
        connection: &mut sqlx::AnyConnection,
        census: Census,
        expected: Arc<Vec<JobSpec>>,
        run: RunId,
        source: Source,
    ) -> Result<Folded, StoreError> {
        let (mut jobs, mut counts) = (Vec::new(), Vec::new());
        let mut after = (-1i64, -1i64);
        loop {
            let page = source.page(connection, run, after).await?;
            let Some(last) = page.last() else { break };
            after = (last.try_get(0)?, last.try_get(1)?);
            for row in &page {
                let weight = parse_count(&row.try_get::<String, _>(4)?)?;
                jobs.push(JobSpec { key: row.try_get(2)?, group: row.try_get(3)?, weight });
                counts.push(parse_count(&row.try_get::<Option<String>, _>(5)?.unwrap_or_default())?);
            }
        }
        tokio::task::spawn_blocking(move || fold_counts(census, &expected, &jobs, &counts))
            .await
            .map_err(|e| StoreError::Internal(format!("folding the answer panicked: {e}")))?
    }

    /// Folds a final answer again from the accepted results of the current
    /// rounds, and refuses a stored answer that differs (a tampered or
    /// damaged database), so that no wrong answer is ever shown as final.
    async fn recheck_final(&self, run: RunId, row: &AnyRow) -> Result<Folded, StoreError> {
        let census = read_census(run, &row.try_get::<String, _>(8)?)?;
        let stored_answer = parse_big(&row.try_get::<Option<String>, _>(3)?.unwrap_or_default())?;
        let stored_sum = parse_big(&row.try_get::<Option<String>, _>(2)?.unwrap_or_default())?;
        let refused = |computed: String| {
            tracing::error!(run, stored = %stored_answer, %computed, "the stored answer does not match the accepted results");
            StoreError::TotalMismatch {
                stored: format!("{stored_answer} (weighted sum {stored_sum})"),
                computed: format!("{computed}, from the accepted results"),
            }
        };
        let mut connection = self.pool.acquire().await?;
        let folded = self
            .fold_run(&mut connection, census, run, Source::AcceptedResults)
            .await
            .map_err(|e| refused(e.to_string()))?;
        if folded.answer.value != stored_answer || folded.weighted_sum != stored_sum {
            return Err(refused(format!("{} (weighted sum {})", folded.answer.value, folded.weighted_sum)));
        }
        Ok(folded)
    }

    /// Writes the answer if every job of the run is done and no conflict is
    /// open, inside the caller's transaction; true when it did. The census
    /// folds the jobs' counts in Rust; the database's class sums and
    /// contributions and its weighted sum so far must agree with the same
    /// counts, or the transaction aborts. (Postgres computes the
    /// contributions and their sum in NUMERIC in its views; SQLite stores
    /// those the store kept exactly in Rust, so this checks that no batch
    /// added wrongly.)
    pub(super) async fn finish_if_complete(
        &self,
        tx: &mut sqlx::Transaction<'_, sqlx::Any>,
        run: RunId,
    ) -> Result<bool, StoreError> {
        let row = sqlx::query("SELECT jobs_remaining, open_conflicts, finished_at, census FROM runs WHERE id = $1")
            .bind(run)
            .fetch_one(&mut **tx)
            .await?;
        let (remaining, conflicts, finished): (i64, i64, Option<i64>) =
            (row.try_get(0)?, row.try_get(1)?, row.try_get(2)?);
        if remaining > 0 || conflicts > 0 || finished.is_some() {
            return Ok(false);
        }
        let census = read_census(run, &row.try_get::<String, _>(3)?)?;
        let folded = self.fold_run(tx, census, run, Source::DoneJobs).await?;
        let power = census.class_power();
        let mut after = -1i64;
        loop {
            let page = sqlx::query(
                "SELECT class_id, label, CAST(count_sum AS TEXT), CAST(contribution AS TEXT) FROM group_totals
                 WHERE run_id = $1 AND class_id > $2 ORDER BY class_id LIMIT $3",
            )
            .bind(run)
            .bind(after)
            .bind(PAGE)
            .fetch_all(&mut **tx)
            .await?;
            let Some(last) = page.last() else { break };
            after = last.try_get(0)?;
            for class in &page {
                let label: String = class.try_get(1)?;
                let in_sql = parse_big(&class.try_get::<String, _>(2)?)?;
                let share_in_sql = parse_big(&class.try_get::<String, _>(3)?)?;
                let (weight, from_jobs) = folded.class_sums.get(&label).cloned().unwrap_or_default();
                let share = contribution(&BigUint::from(weight), &from_jobs, power);
                if in_sql != from_jobs || share_in_sql != share {
                    return Err(StoreError::TotalMismatch {
                        stored: format!("class {label:?}: count sum {in_sql}, contribution {share_in_sql}"),
                        computed: format!("{from_jobs} and {share} from its jobs"),
                    });
                }
            }
        }
        let in_sql = sqlx::query("SELECT CAST(weighted_sum_so_far AS TEXT) FROM run_progress WHERE run_id = $1")
            .bind(run)
            .fetch_one(&mut **tx)
            .await?;
        let sql_sum = parse_big(&in_sql.try_get::<String, _>(0)?)?;
        if sql_sum != folded.weighted_sum {
            return Err(StoreError::TotalMismatch {
                stored: format!("weighted sum {sql_sum}"),
                computed: folded.weighted_sum.to_string(),
            });
        }
        let update = format!(
            "UPDATE runs SET finished_at = $1, weighted_sum = {}, answer = {} WHERE id = $4",
            self.backend.big_number("$2"),
            self.backend.big_number("$3")
        );
        sqlx::query(&update)
            .bind(now_ms())
            .bind(folded.weighted_sum.to_string())
            .bind(folded.answer.value.to_string())
            .bind(run)
            .execute(&mut **tx)
            .await?;
        tracing::info!(run, %census, answer = %folded.answer.value, "run finished");
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
        progress.completions_counted = parse_big(&run_row.try_get::<String, _>(7)?)?.to_string();
        let rejected =
            sqlx::query("SELECT COUNT(*) FROM rejections WHERE run_id = $1").bind(run).fetch_one(&self.pool).await?;
        progress.rejected = rejected.try_get::<i64, _>(0)? as u64;

        // The speed over the last minute, or over the newest RECENT results
        // if the last minute holds more: a walk back along the (run_id,
        // finished_at) index of at most RECENT entries. Counting the whole
        // minute read every result of it on each poll (a fast run's minute is
        // hundreds of thousands), and `census run` polls 20 times a second.
        const RECENT: i64 = 10_000;
        let recent = sqlx::query(&format!(
            "SELECT COUNT(*), MIN(finished_at) FROM
               (SELECT finished_at FROM results WHERE run_id = $1 AND finished_at >= $2
                ORDER BY finished_at DESC LIMIT {RECENT}) AS newest"
        ))
        .bind(run)
        .bind(now - 60_000)
        .fetch_one(&self.pool)
        .await?;
        let recent_jobs: i64 = recent.try_get(0)?;
        if let Some(first) = recent.try_get::<Option<i64>, _>(1)? {
            progress.jobs_per_second = speed(recent_jobs, RECENT, now - first);
        }
        let remaining = progress.jobs_total.saturating_sub(progress.done);
        if progress.jobs_per_second > 0.0 && remaining > 0 {
            progress.eta = Some(Duration::from_secs_f64(remaining as f64 / progress.jobs_per_second));
        }
        let workers = sqlx::query(
            "SELECT worker, jobs, CAST(completions AS TEXT), last_seen FROM worker_stats WHERE run_id = $1 ORDER BY worker",
        )
        .bind(run)
        .fetch_all(&self.pool)
        .await?;
        for row in &workers {
            progress.workers.push(WorkerProgress {
                worker: row.try_get(0)?,
                jobs: row.try_get::<i64, _>(1)? as u64,
                completions: parse_big(&row.try_get::<String, _>(2)?)?.to_string(),
                last_seen_unix: row.try_get::<i64, _>(3)? / 1000,
            });
        }
        Ok(progress)
    }

    pub(super) async fn read_total(&self, run: RunId) -> Result<RunTotal, StoreError> {
        let row = self.ensure_run(run).await?;
        let finished: Option<i64> = row.try_get(0)?;
        let conflicts: i64 = row.try_get(1)?;
        let census = read_census(run, &row.try_get::<String, _>(8)?)?;
        if finished.is_some() {
            let folded = self.recheck_final(run, &row).await?;
            return Ok(RunTotal {
                run_id: run,
                census,
                is_final: conflicts == 0,
                weighted_sum: folded.weighted_sum,
                answer: Some(folded.answer.value),
                terms: folded.answer.terms,
            });
        }
        // One row: the sum the store keeps (SQLite) or Postgres adds up.
        let so_far = sqlx::query("SELECT CAST(weighted_sum_so_far AS TEXT) FROM run_progress WHERE run_id = $1")
            .bind(run)
            .fetch_one(&self.pool)
            .await?;
        let weighted_sum = parse_big(&so_far.try_get::<Option<String>, _>(0)?.unwrap_or_else(|| "0".into()))?;
        Ok(RunTotal { run_id: run, census, is_final: false, weighted_sum, answer: None, terms: Vec::new() })
    }

    pub(super) async fn read_class_totals(&self, run: RunId) -> Result<Vec<ClassTotal>, StoreError> {
        self.ensure_run(run).await?;
        let rows = sqlx::query(
            "SELECT class_id, label, CAST(weight AS TEXT), jobs_total, jobs_done, CAST(count_sum AS TEXT) FROM classes
             WHERE run_id = $1 ORDER BY class_id",
        )
        .bind(run)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                Ok(ClassTotal {
                    class_id: row.try_get::<i64, _>(0)? as u32,
                    label: row.try_get(1)?,
                    weight: parse_count(&row.try_get::<String, _>(2)?)?,
                    jobs_total: row.try_get::<i64, _>(3)? as u32,
                    jobs_done: row.try_get::<i64, _>(4)? as u32,
                    count_sum: parse_big(&row.try_get::<String, _>(5)?)?,
                })
            })
            .collect()
    }
}

/// Jobs a second from the newest `recent_jobs` results of the last minute,
/// the oldest of which finished `span_ms` ago; `walk` is the most results
/// the walk reads. A short span with fewer results than the walk reads is
/// too young to trust (it counts as a second); a span full of results is
/// the speed (down to a millisecond).
fn speed(recent_jobs: i64, walk: i64, span_ms: i64) -> f64 {
    let span = span_ms as f64 / 1e3;
    let span = if recent_jobs < walk { span.max(1.0) } else { span.max(1e-3) };
    recent_jobs as f64 / span
}

#[cfg(test)]
mod tests {
    use super::speed;

    #[test]
    fn a_walk_full_of_results_is_the_speed_over_their_span() {
        // 10,000 results in the last 2.5 s of a busy minute: 4,000 a second,
        // not 10,000 over the whole minute.
        assert_eq!(speed(10_000, 10_000, 2_500), 4_000.0);
        // All within one millisecond: as fast as the clock tells.
        assert_eq!(speed(10_000, 10_000, 0), 10_000_000.0);
    }

    #[test]
    fn a_few_recent_results_count_over_at_least_a_second() {
        assert_eq!(speed(50, 10_000, 200), 50.0);
        assert_eq!(speed(600, 10_000, 60_000), 10.0);
    }
}
