//! Totals: finishing a run when its last job is accepted (the census's fold
//! of the job counts, its sums rechecked in SQL), and reading progress,
//! answers and the per-class sums.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use super::exact::contribution;
use super::runs::{RUN_ROW, RunRow};
use super::{PAGE, SqlStore, now_ms, parse_big, parse_count, read_census};
use crate::{ClassTotal, JobSpec, Progress, RunId, RunTotal, StoreError, WorkerProgress};
use census_math::census::{Answer, Census};
use num_bigint::BigUint;

/// A run's answer, folded from its jobs' counts, with the sums the
/// database must agree with.
struct Folded {
    answer: Answer,
    /// Sum over classes of weight x (count sum)^class_power.
    weighted_sum: BigUint,
    /// Per class label: its weight and the sum of its jobs' counts.
    class_sums: BTreeMap<String, (u128, BigUint)>,
}

/// A finished run's answer as [`SqlStore::recheck_final`] verified it,
/// kept while the row still holds the same stored answer and sum (`key`):
/// a changed row is folded and verified again, so a tampered answer is
/// still refused. A finished run's results do not change: no report is
/// accepted once a run is final.
#[derive(Clone)]
pub(super) struct VerifiedFinal {
    key: (String, String),
    weighted_sum: BigUint,
    answer: Answer,
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

/// A job and its count, as a fold reads it ([`Source`]).
#[derive(sqlx::FromRow)]
struct FoldRow {
    job_id: i64,
    /// The page key's second part: the job's id again, or its result's.
    row_id: i64,
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
    oldest: Option<i64>,
}

impl Source {
    /// A page of [`FoldRow`]s.
    fn page_sql(self) -> &'static str {
        match self {
            Source::DoneJobs => {
                "SELECT j.id AS job_id, j.id AS row_id, j.key, c.label, CAST(c.weight AS TEXT) AS weight,
                        CAST(j.count AS TEXT) AS count
                 FROM jobs j JOIN classes c ON c.run_id = j.run_id AND c.class_id = j.class_id
                 WHERE j.run_id = $1 AND j.state = 'done' AND j.id >= $2 AND (j.id > $2 OR j.id > $3)
                 ORDER BY j.id LIMIT $4"
            }
            Source::AcceptedResults => {
                "SELECT j.id AS job_id, x.id AS row_id, j.key, c.label, CAST(c.weight AS TEXT) AS weight,
                        CAST(x.count AS TEXT) AS count
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
    ) -> Result<Vec<FoldRow>, StoreError> {
        Ok(sqlx::query_as(self.page_sql())
            .bind(run)
            .bind(after.0)
            .bind(after.1)
            .bind(PAGE)
            .fetch_all(connection)
            .await?)
    }
}

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
            after = (last.job_id, last.row_id);
            for row in page {
                let key = row.key;
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
                if job.group != row.label || job.weight != parse_count(&row.weight)? {
                    faithful = false;
                    break 'pages;
                }
                counts[i] = Some(parse_count(&row.count.unwrap_or_default())?);
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
            after = (last.job_id, last.row_id);
            for row in page {
                let weight = parse_count(&row.weight)?;
                jobs.push(JobSpec { key: row.key, group: row.label, weight });
                counts.push(parse_count(&row.count.unwrap_or_default())?);
            }
        }
        tokio::task::spawn_blocking(move || fold_counts(census, &expected, &jobs, &counts))
            .await
            .map_err(|e| StoreError::Internal(format!("folding the answer panicked: {e}")))?
    }

    /// Folds a final answer again from the accepted results of the current
    /// rounds, and refuses a stored answer that differs (a tampered or
    /// damaged database), so that no wrong answer is ever shown as final.
    async fn recheck_final(&self, run: RunId, row: &RunRow) -> Result<Folded, StoreError> {
        let census = read_census(run, &row.census)?;
        let stored_answer = parse_big(row.answer.as_deref().unwrap_or_default())?;
        let stored_sum = parse_big(row.weighted_sum.as_deref().unwrap_or_default())?;
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
        let row: RunRow = sqlx::query_as(RUN_ROW).bind(run).fetch_one(&mut **tx).await?;
        if row.jobs_remaining > 0 || row.open_conflicts > 0 || row.finished_at.is_some() {
            return Ok(false);
        }
        let census = read_census(run, &row.census)?;
        let folded = self.fold_run(tx, census, run, Source::DoneJobs).await?;
        let power = census.class_power();
        let mut after = -1i64;
        loop {
            let page: Vec<ClassSumsRow> = sqlx::query_as(
                "SELECT class_id, label, CAST(count_sum AS TEXT) AS count_sum, CAST(contribution AS TEXT) AS contribution
                 FROM group_totals
                 WHERE run_id = $1 AND class_id > $2 ORDER BY class_id LIMIT $3",
            )
            .bind(run)
            .bind(after)
            .bind(PAGE)
            .fetch_all(&mut **tx)
            .await?;
            let Some(last) = page.last() else { break };
            after = last.class_id;
            for class in page {
                let label = class.label;
                let in_sql = parse_big(&class.count_sum)?;
                let share_in_sql = parse_big(&class.contribution)?;
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
        let in_sql: String =
            sqlx::query_scalar("SELECT CAST(weighted_sum_so_far AS TEXT) FROM run_progress WHERE run_id = $1")
                .bind(run)
                .fetch_one(&mut **tx)
                .await?;
        let sql_sum = parse_big(&in_sql)?;
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
        progress.jobs_total = run_row.jobs_total as u64;
        progress.done = progress.jobs_total - run_row.jobs_remaining as u64;
        progress.failed = run_row.failed_jobs as u64;
        progress.conflicts = run_row.open_conflicts as u64;
        let now = now_ms();
        let leased: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM jobs WHERE state = 'leased' AND run_id = $1")
            .bind(run)
            .fetch_one(&self.pool)
            .await?;
        progress.leased = leased as u64;
        progress.pending = progress.jobs_total.saturating_sub(progress.done + progress.failed + progress.leased);
        progress.completions_counted = parse_big(&run_row.counted)?.to_string();
        let rejected: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM rejections WHERE run_id = $1")
            .bind(run)
            .fetch_one(&self.pool)
            .await?;
        progress.rejected = rejected as u64;

        // The speed over the last minute, or over the newest RECENT results
        // if the last minute holds more: a walk back along the (run_id,
        // finished_at) index of at most RECENT entries. Counting the whole
        // minute read every result of it on each poll (a fast run's minute is
        // hundreds of thousands), and `census run` polls 20 times a second.
        const RECENT: i64 = 10_000;
        let recent: RecentRow = sqlx::query_as(&format!(
            "SELECT COUNT(*) AS results, MIN(finished_at) AS oldest FROM
               (SELECT finished_at FROM results WHERE run_id = $1 AND finished_at >= $2
                ORDER BY finished_at DESC LIMIT {RECENT}) AS newest"
        ))
        .bind(run)
        .bind(now - 60_000)
        .fetch_one(&self.pool)
        .await?;
        if let Some(oldest) = recent.oldest {
            progress.jobs_per_second = speed(recent.results, RECENT, now - oldest);
        }
        let remaining = progress.jobs_total.saturating_sub(progress.done);
        if progress.jobs_per_second > 0.0 && remaining > 0 {
            progress.eta = Some(Duration::from_secs_f64(remaining as f64 / progress.jobs_per_second));
        }
        let workers: Vec<WorkerRow> = sqlx::query_as(
            "SELECT worker, jobs, CAST(completions AS TEXT) AS completions, last_seen FROM worker_stats
             WHERE run_id = $1 ORDER BY worker",
        )
        .bind(run)
        .fetch_all(&self.pool)
        .await?;
        for row in workers {
            progress.workers.push(WorkerProgress {
                worker: row.worker,
                jobs: row.jobs as u64,
                completions: parse_big(&row.completions)?.to_string(),
                last_seen_unix: row.last_seen / 1000,
            });
        }
        Ok(progress)
    }

    pub(super) async fn read_total(&self, run: RunId) -> Result<RunTotal, StoreError> {
        let row = self.ensure_run(run).await?;
        let census = read_census(run, &row.census)?;
        if row.finished_at.is_some() {
            let key = (row.answer.clone().unwrap_or_default(), row.weighted_sum.clone().unwrap_or_default());
            let cached = self.verified_finals.lock().expect("never poisoned").get(&run).cloned();
            let verified = match cached {
                Some(verified) if verified.key == key => verified,
                _ => {
                    let folded = self.recheck_final(run, &row).await?;
                    let verified = VerifiedFinal { key, weighted_sum: folded.weighted_sum, answer: folded.answer };
                    self.verified_finals.lock().expect("never poisoned").insert(run, verified.clone());
                    verified
                }
            };
            return Ok(RunTotal {
                run_id: run,
                census,
                is_final: row.open_conflicts == 0,
                weighted_sum: verified.weighted_sum,
                answer: Some(verified.answer.value),
                terms: verified.answer.terms,
            });
        }
        // One row: the sum the store keeps (SQLite) or Postgres adds up.
        let so_far: Option<String> =
            sqlx::query_scalar("SELECT CAST(weighted_sum_so_far AS TEXT) FROM run_progress WHERE run_id = $1")
                .bind(run)
                .fetch_one(&self.pool)
                .await?;
        let weighted_sum = parse_big(so_far.as_deref().unwrap_or("0"))?;
        Ok(RunTotal { run_id: run, census, is_final: false, weighted_sum, answer: None, terms: Vec::new() })
    }

    pub(super) async fn read_class_totals(&self, run: RunId) -> Result<Vec<ClassTotal>, StoreError> {
        self.ensure_run(run).await?;
        let rows: Vec<ClassRow> = sqlx::query_as(
            "SELECT class_id, label, CAST(weight AS TEXT) AS weight, jobs_total, jobs_done,
                    CAST(count_sum AS TEXT) AS count_sum
             FROM classes WHERE run_id = $1 ORDER BY class_id",
        )
        .bind(run)
        .fetch_all(&self.pool)
        .await?;
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
