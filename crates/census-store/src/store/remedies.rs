//! An operator's and a worker's remedies, and quarantine: recounting a
//! conflicted job, failing a job a worker cannot count (and when it fails
//! for good), requeueing failed jobs, and quarantining an identity, which
//! reaches back and reopens every job whose current result it gave.

use std::collections::{BTreeMap, BTreeSet};

use super::decision::{Offence, fails_for_good, quarantine_reason};
use super::{Store, now_ms};
use crate::backend::{
    ClassChanges, FailureTally, HeldBy, JobState, NewFailure, NewQuarantine, RunTakeOut, StorageBackend,
};
use crate::{JobId, RunId, StoreError};

/// An identity a transaction quarantined, to be said once it has committed.
#[derive(Debug)]
pub(super) struct Quarantined {
    worker: String,
    reason: String,
    /// Jobs of its results reopened, and their runs.
    reopened: usize,
    runs: Vec<RunId>,
}

impl Quarantined {
    pub(super) fn say(&self) {
        let (worker, reason) = (&self.worker, &self.reason);
        tracing::error!(worker, %reason, "identity quarantined: its calls are refused until an operator releases it");
        if self.reopened > 0 {
            let (jobs, runs) = (self.reopened, &self.runs);
            tracing::error!(worker, jobs, ?runs, "the quarantined identity's results are counted again");
        }
    }
}

impl<B: StorageBackend> Store<B> {
    /// Reopens a job flagged with a conflict, or a done or failed job of a
    /// run of stages with every job of the stages after it that holds
    /// anything of its round, in the caller's transaction. (A later stage
    /// read what the job wrote: a layers job's output set aside because it
    /// failed its digest is written again by its recount, and read again by
    /// every job after it.)
    pub(super) async fn recount_in(&self, tx: &mut B::Tx, job: JobId) -> Result<RunId, StoreError> {
        let row = self.backend.lock_flagged_job(tx, job).await?.ok_or(StoreError::UnknownJob(job))?;
        if row.conflict {
            self.reopen_jobs(tx, &[job]).await?;
            tracing::warn!(job, run = row.run, "conflict resolved by recounting the job");
            return Ok(row.run);
        }
        let Some(stage) = row.stage.filter(|_| matches!(row.state, JobState::Done | JobState::Failed)) else {
            return Err(StoreError::Invalid(format!(
                "job {job} has no conflict to resolve (without one, only a done or failed job of a run of \
                 stages is recounted, with the stages after it)"
            )));
        };
        let mut jobs = self.backend.jobs_after_stage(tx, row.run, stage).await?;
        let later = jobs.len();
        jobs.push(job);
        self.reopen_jobs(tx, &jobs).await?;
        tracing::warn!(job, run = row.run, stage, later, "job recounted, with the jobs of the stages after it");
        Ok(row.run)
    }

    /// Puts `jobs` back in the queue for a new round, whatever their state:
    /// a done job's accepted count leaves its class and its run, the run's
    /// stored weighted sum and answer are cleared (it is unfinished again),
    /// an open conflict or a failure is closed, and every vote, lease and
    /// failure of the old round stops counting. The results table keeps
    /// every earlier result. Locks the jobs by id, then classes, then runs,
    /// the order every batch takes. Returns the runs touched.
    pub(super) async fn reopen_jobs(&self, tx: &mut B::Tx, jobs: &[JobId]) -> Result<BTreeSet<RunId>, StoreError> {
        let now = now_ms();
        let mut ids = jobs.to_vec();
        ids.sort_unstable();
        ids.dedup();
        let rows = self.backend.lock_jobs_to_reopen(tx, &ids).await?;
        if rows.len() != ids.len() {
            let found: BTreeSet<JobId> = rows.iter().map(|row| row.id).collect();
            let missing = ids.iter().find(|id| !found.contains(id)).copied().unwrap_or_default();
            return Err(StoreError::UnknownJob(missing));
        }
        // (run, class) -> (count taken out, jobs done taken out)
        let mut classes: ClassChanges = BTreeMap::new();
        let mut runs: BTreeMap<RunId, RunTakeOut> = BTreeMap::new();
        for row in rows {
            let entry = runs.entry(row.run).or_default();
            entry.conflicts_closed += i64::from(row.conflict);
            if row.state == JobState::Failed {
                entry.failures_closed += 1;
            }
            if row.state == JobState::Done {
                let count = row.count.unwrap_or_default();
                entry.done += 1;
                entry.cost_done += row.cost;
                entry.counted += &count;
                let class = classes.entry((row.run, row.class)).or_default();
                class.0 += count;
                class.1 += 1;
            }
        }
        self.backend.take_out_of_classes(tx, &classes).await?;
        for (&run, take_out) in &runs {
            self.backend.take_out_of_run(tx, run, take_out).await?;
        }
        // A new round: earlier votes, tokens and failures no longer count.
        self.backend.start_new_round(tx, &ids, now).await?;
        Ok(runs.into_keys().collect())
    }

    /// Every job whose current round holds a result of `worker` that counts
    /// goes back to the queue: what a quarantined identity said is counted
    /// again by someone else before any answer that includes it is final.
    /// Returns how many jobs, and their runs.
    async fn reopen_results_of(&self, tx: &mut B::Tx, worker: &str) -> Result<(usize, Vec<RunId>), StoreError> {
        let jobs = self.backend.jobs_counted_by(tx, worker).await?;
        if jobs.is_empty() {
            return Ok((0, Vec::new()));
        }
        let runs = self.reopen_jobs(tx, &jobs).await?;
        Ok((jobs.len(), runs.into_iter().collect()))
    }

    /// Quarantines `worker` inside the caller's transaction: its leases are
    /// released at once, and every job whose current result it gave goes
    /// back to the queue, in every run, finished or not (a finished run is
    /// unfinished again until others have counted those jobs). Under the
    /// identity's lock, so no result of it commits unseen meanwhile. What it
    /// did is said once the caller's transaction has committed
    /// ([`Quarantined::say`]), never before: a transaction that fails to
    /// commit quarantined nobody.
    pub(super) async fn quarantine_in(
        &self,
        tx: &mut B::Tx,
        worker: &str,
        reason: &str,
        now: i64,
    ) -> Result<Option<Quarantined>, StoreError> {
        // Its leases released and its results reopened: jobs all over the queue.
        self.fronts.forget_all();
        self.lock_identities(tx, [worker]).await?;
        let new = self.backend.insert_quarantine(tx, &NewQuarantine { worker, reason, since: now }).await?;
        self.backend.release_leases(tx, HeldBy::Identity(worker), now).await?;
        let (reopened, runs) = self.reopen_results_of(tx, worker).await?;
        Ok(new.then(|| Quarantined { worker: worker.to_string(), reason: reason.to_string(), reopened, runs }))
    }

    /// Reopens what every quarantined identity counted, as a quarantine
    /// does: a database written before quarantines reopened results may
    /// hold a finished run that includes them. Cheap when nothing is left.
    pub(super) async fn reopen_quarantined_results(&self) -> Result<(), StoreError> {
        for entry in self.backend.quarantined().await? {
            let mut tx = self.backend.begin().await?;
            self.lock_identities(&mut tx, [entry.worker.as_str()]).await?;
            let (reopened, runs) = self.reopen_results_of(&mut tx, &entry.worker).await?;
            self.backend.commit(tx).await?;
            if reopened > 0 {
                let worker = &entry.worker;
                tracing::error!(worker, jobs = reopened, ?runs, "the quarantined identity's results are counted again");
            }
        }
        Ok(())
    }

    pub(super) async fn fail_job(&self, job: JobId, token: &str, worker: &str, reason: &str) -> Result<(), StoreError> {
        let now = now_ms();
        let mut tx = self.backend.begin().await?;
        self.lock_identities(&mut tx, [worker]).await?;
        let row = self.backend.lock_failing_job(&mut tx, job).await?.ok_or(StoreError::UnknownJob(job))?;
        let (attempt, run, failures, epoch) = (row.attempt, row.run, row.failures + 1, row.failure_epoch);
        if !row.lease.held_by(worker, token, now) {
            return Err(StoreError::StaleToken { job });
        }
        let failure = NewFailure { job, attempt, worker, reason, failed_at: now, epoch };
        self.backend.insert_failure(&mut tx, &failure).await?;
        // One identity alone can delay a job, never fail it (`fails_for_good`).
        let identities = self.backend.failing_identities(&mut tx, job, epoch).await?;
        let exhausted = fails_for_good(failures, identities, &self.config);
        let next = if exhausted { JobState::Failed } else { JobState::Pending };
        self.backend.set_failures(&mut tx, &FailureTally { job, next, failures }, now).await?;
        if exhausted {
            self.backend.add_failed_jobs(&mut tx, run, 1).await?;
            tracing::error!(
                job,
                attempt,
                failures,
                identities,
                worker,
                reason,
                "job failed for good; `census requeue` puts it back"
            );
        } else {
            tracing::warn!(job, attempt, failures, identities, worker, reason, "job failed; it will be retried");
        }
        // Failures are bounded per identity: past the limit it is quarantined.
        let reported = self.backend.failures_of(&mut tx, worker).await?;
        let mut quarantined = None;
        if let Some(reason) = quarantine_reason(Offence::Failed, reported, &self.config) {
            quarantined = self.quarantine_in(&mut tx, worker, &reason, now).await?;
        }
        self.backend.commit(tx).await?;
        quarantined.iter().for_each(Quarantined::say);
        if !exhausted {
            // Back in the queue: the next lease's scan starts no later than it.
            self.fronts.put_back(run, job, std::time::Instant::now());
        }
        Ok(())
    }

    pub(super) async fn requeue_jobs(&self, run: RunId, job: Option<JobId>) -> Result<u64, StoreError> {
        self.ensure_run(run).await?;
        let now = now_ms();
        let mut tx = self.backend.begin().await?;
        let rows = self.backend.lock_failed_jobs(&mut tx, run, job).await?;
        if let Some(job) = job
            && rows.is_empty()
        {
            return Err(match self.backend.job_state(&mut tx, run, job).await? {
                None => StoreError::UnknownJob(job),
                Some(state) => {
                    StoreError::Invalid(format!("job {job} is {state}, not failed: only failed jobs are requeued"))
                }
            });
        }
        let mut plain = 0i64;
        for row in &rows {
            if row.conflict {
                self.recount_in(&mut tx, row.id).await?;
                continue;
            }
            self.backend.requeue_failed_job(&mut tx, row.id, now).await?;
            plain += 1;
        }
        self.backend.add_failed_jobs(&mut tx, run, -plain).await?;
        self.backend.commit(tx).await?;
        tracing::warn!(run, jobs = rows.len(), "failed jobs requeued");
        Ok(rows.len() as u64)
    }
}
