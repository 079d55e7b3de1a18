//! Totals: finishing a run when its last job is accepted (the census's fold
//! of the job counts, and the backend's sums checked against it), and
//! reading progress and answers. A finished answer is folded again and
//! checked once per store, then read from its row while the stored answer
//! and sum stay the same.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use census_math::census::{Answer, Census, Folding};
use num_bigint::BigUint;

use super::{Store, now_ms, read_census};
use crate::backend::{
    ClassId, ClassPage, FinishedAnswer, FoldPage, FoldRow, FoldSource, PAGE, Recent, RunState, StorageBackend,
    contribution, parse_big,
};
use crate::{JobSpec, Progress, RunId, RunTotal, StoreError};

/// A run's answer, folded from its jobs' counts, with the sums the
/// backend must agree with.
struct Folded {
    answer: Answer,
    /// Sum over classes of weight x (count sum)^class_power.
    weighted_sum: BigUint,
    /// Each class's weight and the sum of its jobs' counts.
    classes: ClassSums,
}

/// The classes of a run as its fold finds them in its jobs' rows, by class
/// number: the class's weight and the sum of its jobs' counts. One entry a
/// class, never one a job.
#[derive(Default)]
struct ClassSums(HashMap<ClassId, (u128, BigUint)>);

impl ClassSums {
    /// Adds a job's count to its class; false if its weight differs from
    /// the class's other jobs'.
    fn add(&mut self, class: ClassId, weight: u128, count: u128) -> bool {
        let (known, sum) = self.0.entry(class).or_insert_with(|| (weight, BigUint::default()));
        *sum += count;
        *known == weight
    }

    /// The class's weight and count sum, if any job of it was folded.
    fn get(&self, class: ClassId) -> Option<&(u128, BigUint)> {
        self.0.get(&class)
    }

    /// Sum over the classes of weight x count sum^power.
    fn weighted_sum(&self, power: u32) -> BigUint {
        self.0.values().map(|(weight, sum)| contribution(&BigUint::from(*weight), sum, power)).sum()
    }
}

/// A finished run's answer as the transaction that finished it folded and
/// wrote it, or as [`Store::recheck_final`] verified it against the
/// accepted results, kept while the row still holds the same stored answer
/// and sum (`key`): a changed row is folded and verified again, so a
/// tampered answer is still refused. A finished run's results do not
/// change: no report is accepted once a run is final.
#[derive(Clone)]
pub(super) struct VerifiedFinal {
    key: (String, String),
    weighted_sum: BigUint,
    answer: Answer,
}

/// The fold of a run's rows in order, as they are read: the census's fold
/// as its jobs come ([`Folding`]), and the class sums.
struct RowFold {
    folding: Folding,
    classes: ClassSums,
}

impl RowFold {
    /// Folds a page of rows; false at the first row that is not the
    /// census's next job or that the class sums refuse.
    fn add(&mut self, rows: &[FoldRow]) -> bool {
        rows.iter().all(|row| {
            self.folding.add(&row.key, &row.label, row.weight, row.count).is_ok()
                && self.classes.add(row.class_id, row.weight, row.count)
        })
    }
}

/// Runs `work` on the blocking pool (a census's fold, or comparing a page
/// with the census's next jobs, which are made as they are read).
async fn blocking<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> Result<T, StoreError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| StoreError::Internal(format!("folding the answer panicked: {e}")))
}

impl<B: StorageBackend> Store<B> {
    /// The census's own jobs in order, for a fold to compare a run's with:
    /// made as they are read where the census makes them so (the synthetic
    /// census's 10^7), else its list, built once per census and kept (the
    /// 9x9 catalogue stage builds a class table for it).
    async fn expected_jobs(&self, census: Census) -> Result<Box<dyn Iterator<Item = JobSpec> + Send>, StoreError> {
        if census.makes_jobs_as_read() {
            return census.job_stream().map_err(StoreError::Fold);
        }
        let kept = self.expected.lock().expect("never poisoned").get(&census).cloned();
        let jobs = match kept {
            Some(jobs) => jobs,
            None => {
                let jobs = Arc::new(blocking(move || census.jobs()).await?.map_err(StoreError::Fold)?);
                self.expected.lock().expect("never poisoned").insert(census, jobs.clone());
                jobs
            }
        };
        Ok(Box::new((0..jobs.len()).map(move |i| jobs[i].clone())))
    }

    /// Folds the run's jobs and counts from `source` with the run's census.
    /// The rows are read a page at a time, in job order, and folded as they
    /// come, each compared with the census's next job ([`Folding`]): what
    /// is held is one page, one entry a class and what the census's fold
    /// keeps (a sum, for the synthetic census and the 9x9 count), never the
    /// run's rows or the census's job list. Rows that are not exactly the
    /// census's jobs in its order (a run stored in another order by an
    /// older version, or a damaged or forged one) are folded again whole
    /// by [`Store::fold_every_row`], whose census fold names what is wrong,
    /// so a partial or forged job list never gives an answer. In `tx` when
    /// finishing a run; on their own (`None`) when rechecking a finished
    /// one.
    async fn fold_run(
        &self,
        mut tx: Option<&mut B::Tx>,
        census: Census,
        run: RunId,
        source: FoldSource,
    ) -> Result<Folded, StoreError> {
        let folding = census.folding(self.expected_jobs(census).await?);
        let mut fold = RowFold { folding, classes: ClassSums::default() };
        let mut page = FoldPage { run, source, after: -1, limit: PAGE };
        let mut faithful = true;
        loop {
            let rows = self.backend.fold_page(tx.as_deref_mut(), &page).await?;
            let Some(last) = rows.last() else { break };
            page.after = last.job_id;
            let (back, ok) = blocking(move || {
                let ok = fold.add(&rows);
                (fold, ok)
            })
            .await?;
            fold = back;
            if !ok {
                faithful = false;
                break;
            }
        }
        let RowFold { folding, classes, .. } = fold;
        let answer = match faithful {
            true => blocking(move || folding.finish()).await?.ok(),
            false => None,
        };
        match answer {
            Some(answer) => {
                let weighted_sum = classes.weighted_sum(census.class_power());
                Ok(Folded { answer, weighted_sum, classes })
            }
            None => self.fold_every_row(tx, census, run, source).await,
        }
    }

    /// The fold of a run whose rows are not exactly its census's jobs in
    /// its order: all of them, as stored, for the census's fold to fold in
    /// any order or say what is wrong. (Only a run made by an older version
    /// in another order, or a damaged one, comes here: this holds the
    /// rows and the census's job list.)
    async fn fold_every_row(
        &self,
        mut tx: Option<&mut B::Tx>,
        census: Census,
        run: RunId,
        source: FoldSource,
    ) -> Result<Folded, StoreError> {
        let (mut jobs, mut counts, mut classes) = (Vec::new(), Vec::new(), ClassSums::default());
        let mut page = FoldPage { run, source, after: -1, limit: PAGE };
        loop {
            let rows = self.backend.fold_page(tx.as_deref_mut(), &page).await?;
            let Some(last) = rows.last() else { break };
            page.after = last.job_id;
            for row in rows {
                classes.add(row.class_id, row.weight, row.count);
                jobs.push(JobSpec { key: row.key, group: row.label, weight: row.weight });
                counts.push(row.count);
            }
        }
        let answer = blocking(move || census.fold(&jobs, &counts)).await?.map_err(StoreError::Fold)?;
        let weighted_sum = classes.weighted_sum(census.class_power());
        Ok(Folded { answer, weighted_sum, classes })
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
            self.fold_run(None, census, run, FoldSource::AcceptedResults).await.map_err(|e| refused(e.report()))?;
        if folded.answer.value != stored_answer || folded.weighted_sum != stored_sum {
            return Err(refused(format!("{} (weighted sum {})", folded.answer.value, folded.weighted_sum)));
        }
        Ok(folded)
    }

    /// Writes the answer if the run's state `row` (read under the run's
    /// lock, in the caller's transaction) says every job of the run is done
    /// and no conflict is open; the answer when it did (to be
    /// kept once the transaction commits). The census
    /// folds the jobs' counts; the backend's class sums and contributions
    /// and its weighted sum so far must agree with the same counts, or the
    /// transaction aborts (so no batch that added wrongly goes unnoticed).
    pub(super) async fn finish_if_complete(
        &self,
        tx: &mut B::Tx,
        run: RunId,
        row: RunState,
    ) -> Result<Option<VerifiedFinal>, StoreError> {
        if row.jobs_remaining > 0 || row.open_conflicts > 0 || row.finished_at.is_some() {
            return Ok(None);
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
                let (weight, from_jobs) = folded.classes.get(class.class_id).cloned().unwrap_or_default();
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
        let key = (folded.answer.value.to_string(), folded.weighted_sum.to_string());
        Ok(Some(VerifiedFinal { key, weighted_sum: folded.weighted_sum, answer: folded.answer }))
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
        progress.cost_total = run_row.cost_total as u64;
        progress.cost_done = run_row.cost_done as u64;

        // The speed over the last minute, or over the newest RECENT results
        // if the last minute holds more: a walk back of at most RECENT
        // results. Counting the whole minute read every result of it on
        // each poll (a fast run's minute is hundreds of thousands), and
        // `census run` polls 20 times a second.
        const RECENT: i64 = 10_000;
        let recent = self.backend.recent_results(&Recent { run, since: now - 60_000, limit: RECENT }).await?;
        if let Some(oldest) = recent.oldest {
            progress.jobs_per_second = speed(recent.results, recent.results, RECENT, now - oldest);
            progress.cost_per_second = speed(recent.cost, recent.results, RECENT, now - oldest);
        }
        // By cost, not by jobs: a run's jobs may differ in cost by orders
        // of magnitude (a layers census's map and class jobs). Where every
        // job costs 1 this is the jobs remaining over the jobs a second.
        // When all that is left is conflicts nobody counts, no rate ends
        // them (another identity's vote or the coordinator's own count
        // after its wait does): no ETA, rather than one of a second (issue 44).
        let remaining = progress.cost_total.saturating_sub(progress.cost_done);
        let only_conflicts_left = progress.leased == 0 && progress.pending <= progress.conflicts;
        if progress.cost_per_second > 0.0 && remaining > 0 && !only_conflicts_left {
            progress.eta = Some(Duration::from_secs_f64(remaining as f64 / progress.cost_per_second));
        }
        progress.workers = self.backend.worker_stats(run, crate::WORKERS_LISTED).await?;
        progress.workers_total = self.backend.workers_of(run).await? as u64;
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

/// `amount` (results, or their jobs' cost) a second, from the newest
/// `recent_results` results of the last minute, the oldest of which
/// finished `span_ms` ago; `walk` is the most results the walk reads. A
/// short span with fewer results than the walk reads is too young to trust
/// (it counts as a second); a span full of results is the speed (down to a
/// millisecond).
fn speed(amount: i64, recent_results: i64, walk: i64, span_ms: i64) -> f64 {
    let span = span_ms as f64 / 1e3;
    let span = if recent_results < walk { span.max(1.0) } else { span.max(1e-3) };
    amount as f64 / span
}

#[cfg(test)]
mod tests {
    use super::speed;

    #[test]
    fn a_walk_full_of_results_is_the_speed_over_their_span() {
        // 10,000 results in the last 2.5 s of a busy minute: 4,000 a second,
        // not 10,000 over the whole minute.
        assert_eq!(speed(10_000, 10_000, 10_000, 2_500), 4_000.0);
        // All within one millisecond: as fast as the clock tells.
        assert_eq!(speed(10_000, 10_000, 10_000, 0), 10_000_000.0);
        // Their jobs' cost over the same span.
        assert_eq!(speed(35_000, 10_000, 10_000, 2_500), 14_000.0);
    }

    #[test]
    fn a_few_recent_results_count_over_at_least_a_second() {
        assert_eq!(speed(50, 50, 10_000, 200), 50.0);
        assert_eq!(speed(600, 600, 10_000, 60_000), 10.0);
        assert_eq!(speed(5_000, 50, 10_000, 200), 5_000.0);
    }
}
