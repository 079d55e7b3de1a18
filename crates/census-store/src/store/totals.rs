//! Totals: finishing a run when its last job is accepted (the census's fold
//! of the job counts, and the backend's sums checked against it), and
//! reading progress and answers. A finished answer is folded again and
//! checked once per store, then read from its row while the stored answer
//! and sum stay the same.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use census_math::census::{Answer, Census};
use num_bigint::BigUint;

use super::{Store, now_ms, read_census};
use crate::backend::{
    ClassPage, FinishedAnswer, FoldPage, FoldSource, PAGE, Recent, RunState, StorageBackend, contribution, parse_big,
};
use crate::{JobSpec, Progress, RunId, RunTotal, StoreError};

/// A run's answer, folded from its jobs' counts, with the sums the
/// backend must agree with.
struct Folded {
    answer: Answer,
    /// Sum over classes of weight x (count sum)^class_power.
    weighted_sum: BigUint,
    /// Per class label: its weight and the sum of its jobs' counts.
    class_sums: BTreeMap<String, (u128, BigUint)>,
}

/// A finished run's answer as [`Store::recheck_final`] verified it, kept
/// while the row still holds the same stored answer and sum (`key`): a
/// changed row is folded and verified again, so a tampered answer is still
/// refused. A finished run's results do not change: no report is accepted
/// once a run is final.
#[derive(Clone)]
pub(super) struct VerifiedFinal {
    key: (String, String),
    weighted_sum: BigUint,
    answer: Answer,
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

/// The fold of `counts` on the blocking pool (a census's fold may take a while).
async fn fold_blocking(
    census: Census,
    expected: Arc<Vec<JobSpec>>,
    jobs: Option<Vec<JobSpec>>,
    counts: Vec<u128>,
) -> Result<Folded, StoreError> {
    tokio::task::spawn_blocking(move || fold_counts(census, &expected, jobs.as_deref().unwrap_or(&expected), &counts))
        .await
        .map_err(|e| StoreError::Internal(format!("folding the answer panicked: {e}")))?
}

impl<B: StorageBackend> Store<B> {
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
    /// an answer. In `tx` when finishing a run; on their own (`None`) when
    /// rechecking a finished one.
    async fn fold_run(
        &self,
        mut tx: Option<&mut B::Tx>,
        census: Census,
        run: RunId,
        source: FoldSource,
    ) -> Result<Folded, StoreError> {
        let expected = self.expected_jobs(census).await?;
        let mut counts: Vec<Option<u128>> = vec![None; expected.len()];
        // The rows come in the census's order unless the run was made by an
        // older version; then a key is looked up.
        let mut by_key: Option<HashMap<&str, usize>> = None;
        let mut next = 0;
        let mut faithful = true;
        let mut page = FoldPage { run, source, after: (-1, -1), limit: PAGE };
        'pages: loop {
            let rows = self.backend.fold_page(tx.as_deref_mut(), &page).await?;
            let Some(last) = rows.last() else { break };
            page.after = (last.job_id, last.row_id);
            for row in rows {
                let position = if expected.get(next).is_some_and(|job| job.key == row.key) {
                    Some(next)
                } else {
                    by_key
                        .get_or_insert_with(|| {
                            expected.iter().enumerate().map(|(i, job)| (job.key.as_str(), i)).collect()
                        })
                        .get(row.key.as_str())
                        .copied()
                };
                let job = position.map(|i| (i, &expected[i]));
                let Some((i, job)) = job.filter(|(i, _)| counts[*i].is_none()) else {
                    faithful = false;
                    break 'pages;
                };
                if job.group != row.label || job.weight != row.weight {
                    faithful = false;
                    break 'pages;
                }
                counts[i] = Some(row.count);
                next = i + 1;
            }
        }
        if !faithful || counts.iter().any(Option::is_none) {
            return self.fold_every_row(tx, census, expected, run, source).await;
        }
        let counts: Vec<u128> = counts.into_iter().flatten().collect();
        fold_blocking(census, expected, None, counts).await
    }

    /// The fold of a run whose rows are not exactly its census's jobs: all
    /// of them, as stored, for the census's fold to say what is wrong.
    async fn fold_every_row(
        &self,
        mut tx: Option<&mut B::Tx>,
        census: Census,
        expected: Arc<Vec<JobSpec>>,
        run: RunId,
        source: FoldSource,
    ) -> Result<Folded, StoreError> {
        let (mut jobs, mut counts) = (Vec::new(), Vec::new());
        let mut page = FoldPage { run, source, after: (-1, -1), limit: PAGE };
        loop {
            let rows = self.backend.fold_page(tx.as_deref_mut(), &page).await?;
            let Some(last) = rows.last() else { break };
            page.after = (last.job_id, last.row_id);
            for row in rows {
                jobs.push(JobSpec { key: row.key, group: row.label, weight: row.weight });
                counts.push(row.count);
            }
        }
        fold_blocking(census, expected, Some(jobs), counts).await
    }

    /// Folds a final answer again from the accepted results of the current
    /// rounds, and refuses a stored answer that differs (a tampered or
    /// damaged database), so that no wrong answer is ever shown as final.
    async fn recheck_final(&self, run: RunId, row: &RunState) -> Result<Folded, StoreError> {
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
        let folded =
            self.fold_run(None, census, run, FoldSource::AcceptedResults).await.map_err(|e| refused(e.to_string()))?;
        if folded.answer.value != stored_answer || folded.weighted_sum != stored_sum {
            return Err(refused(format!("{} (weighted sum {})", folded.answer.value, folded.weighted_sum)));
        }
        Ok(folded)
    }

    /// Writes the answer if every job of the run is done and no conflict is
    /// open, inside the caller's transaction; true when it did. The census
    /// folds the jobs' counts; the backend's class sums and contributions
    /// and its weighted sum so far must agree with the same counts, or the
    /// transaction aborts (so no batch that added wrongly goes unnoticed).
    pub(super) async fn finish_if_complete(&self, tx: &mut B::Tx, run: RunId) -> Result<bool, StoreError> {
        let row = self.backend.run_state(Some(tx), run).await?.ok_or(StoreError::UnknownRun(run))?;
        if row.jobs_remaining > 0 || row.open_conflicts > 0 || row.finished_at.is_some() {
            return Ok(false);
        }
        let census = read_census(run, &row.census)?;
        let folded = self.fold_run(Some(&mut *tx), census, run, FoldSource::DoneJobs).await?;
        let power = census.class_power();
        let mut after = -1;
        loop {
            let page = self.backend.class_sums_page(tx, &ClassPage { run, after, limit: PAGE }).await?;
            let Some(last) = page.last() else { break };
            after = last.class_id;
            for class in page {
                let label = class.label;
                let (weight, from_jobs) = folded.class_sums.get(&label).cloned().unwrap_or_default();
                let share = contribution(&BigUint::from(weight), &from_jobs, power);
                if class.count_sum != from_jobs || class.contribution != share {
                    return Err(StoreError::TotalMismatch {
                        stored: format!(
                            "class {label:?}: count sum {}, contribution {}",
                            class.count_sum, class.contribution
                        ),
                        computed: format!("{from_jobs} and {share} from its jobs"),
                    });
                }
            }
        }
        let sum_so_far = self.backend.weighted_sum_so_far(Some(tx), run).await?;
        if sum_so_far != folded.weighted_sum {
            return Err(StoreError::TotalMismatch {
                stored: format!("weighted sum {sum_so_far}"),
                computed: folded.weighted_sum.to_string(),
            });
        }
        let answer = FinishedAnswer {
            run,
            finished_at: now_ms(),
            weighted_sum: &folded.weighted_sum,
            answer: &folded.answer.value,
        };
        self.backend.write_answer(tx, &answer).await?;
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
        progress.leased = self.backend.leased_jobs(run).await? as u64;
        progress.pending = progress.jobs_total.saturating_sub(progress.done + progress.failed + progress.leased);
        progress.completions_counted = parse_big(&run_row.counted)?.to_string();
        progress.rejected = self.backend.rejections_in(run).await? as u64;

        // The speed over the last minute, or over the newest RECENT results
        // if the last minute holds more: a walk back of at most RECENT
        // results. Counting the whole minute read every result of it on
        // each poll (a fast run's minute is hundreds of thousands), and
        // `census run` polls 20 times a second.
        const RECENT: i64 = 10_000;
        let recent = self.backend.recent_results(&Recent { run, since: now - 60_000, limit: RECENT }).await?;
        if let Some(oldest) = recent.oldest {
            progress.jobs_per_second = speed(recent.results, RECENT, now - oldest);
        }
        let remaining = progress.jobs_total.saturating_sub(progress.done);
        if progress.jobs_per_second > 0.0 && remaining > 0 {
            progress.eta = Some(Duration::from_secs_f64(remaining as f64 / progress.jobs_per_second));
        }
        progress.workers = self.backend.worker_stats(run).await?;
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
        let weighted_sum = self.backend.weighted_sum_so_far(None, run).await?;
        Ok(RunTotal { run_id: run, census, is_final: false, weighted_sum, answer: None, terms: Vec::new() })
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
