//! Completions: a batch of reports (one caller's, or a group of callers',
//! `groups.rs`), in one transaction, as load -> decide
//! -> apply. [`Store::load_jobs`] reads the batch's jobs (locked) and the
//! votes of their round; [`plan_batch`] decides every report (the rules,
//! `decision.rs`); [`Store::apply_plan`] writes the plan with the backend's
//! named operations: results and rejections appended, jobs and class sums
//! updated, and the run finished when its last job is.

use std::collections::{BTreeSet, HashMap};

use super::decision::{BatchPlan, JobView, Offence, plan_batch, plan_decision, quarantine_reason};
use super::groups::{Answer, Waiting};
use super::remedies::Quarantined;
use super::totals::VerifiedFinal;
use super::{Store, now_ms};
use crate::backend::{JobState, Rejection, ResultOutcome, StorageBackend};
use crate::{CompleteOutcome, Completion, DatabaseError, DatabaseErrorKind, JobId, RunId, StoreError};

/// What a plan's transaction did that is said, or kept, once it commits.
struct Applied {
    finished: Vec<(RunId, VerifiedFinal)>,
    quarantined: Vec<Quarantined>,
}

impl<B: StorageBackend> Store<B> {
    /// Writes `completions` in one transaction, together with the reports
    /// of other callers that wait meanwhile (`groups.rs`); this caller's
    /// answers, as if its reports had been written alone.
    pub(super) async fn complete_in_group(&self, completions: &[Completion]) -> Answer {
        let abandoned = |_| Err(StoreError::Internal("the transaction writing these reports was abandoned".into()));
        let mut answer = self.report_groups.wait(completions.to_vec());
        loop {
            tokio::select! {
                biased;
                answered = &mut answer => return answered.unwrap_or_else(abandoned),
                permit = self.report_groups.transactions.acquire() => {
                    let _permit = permit.expect("the report transactions' semaphore is never closed");
                    let group = self.report_groups.take();
                    if group.is_empty() {
                        // Another transaction took this caller's reports.
                        drop(_permit);
                        return answer.await.unwrap_or_else(abandoned);
                    }
                    self.write_group(group).await;
                }
            }
        }
    }

    /// Writes a group of callers' reports in one transaction and answers
    /// each caller. If that transaction fails for a reason that may pass,
    /// every caller is told to try again; otherwise each caller's reports
    /// are written alone.
    async fn write_group(&self, mut group: Vec<Waiting>) {
        if group.len() == 1 {
            let alone = group.pop().expect("one caller");
            let _ = alone.reply.send(self.complete_batch(&alone.completions).await);
            return;
        }
        let all: Vec<Completion> = group.iter().flat_map(|w| w.completions.iter().cloned()).collect();
        match self.complete_batch(&all).await {
            Ok(mut outcomes) => {
                for waiting in group {
                    let rest = outcomes.split_off(waiting.completions.len());
                    let _ = waiting.reply.send(Ok(std::mem::replace(&mut outcomes, rest)));
                }
            }
            // The database was unreachable, its pool exhausted, or the
            // transaction lost a race: nothing a caller sent, and each
            // caller's own transaction would most likely fail the same way,
            // one after the other while the group's permit waits. Every
            // caller is told at once, and tries again as it would alone.
            Err(error) if error.is_retryable() => {
                tracing::debug!(%error, callers = group.len(), "a group of reports failed; every caller may try again");
                let message = format!("the transaction writing these reports with others' failed: {}", error.report());
                let kind = match &error {
                    StoreError::Database(database) => database.kind(),
                    _ => DatabaseErrorKind::Unreachable,
                };
                let mut group = group.into_iter();
                if let Some(first) = group.next() {
                    let _ = first.reply.send(Err(error));
                }
                for waiting in group {
                    let _ = waiting.reply.send(Err(StoreError::Database(DatabaseError::new(kind, message.clone()))));
                }
            }
            // Anything else may be one caller's doing (the run's last job
            // failing its fold): each caller's reports alone.
            Err(error) => {
                tracing::debug!(%error, callers = group.len(), "a group of reports failed; writing each caller's alone");
                for waiting in group {
                    let _ = waiting.reply.send(self.complete_batch(&waiting.completions).await);
                }
            }
        }
    }

    /// Writes `completions` in one transaction: load, decide, apply.
    pub(super) async fn complete_batch(
        &self,
        completions: &[Completion],
    ) -> Result<Vec<Result<CompleteOutcome, StoreError>>, StoreError> {
        let now = now_ms();
        let mut tx = self.backend.begin().await?;
        // The reporting identities first (a quarantine in progress finishes
        // before their reports are weighed, and sees them if they commit first).
        self.lock_identities(&mut tx, completions.iter().map(|c| c.worker.as_str())).await?;
        let mut ids: Vec<JobId> = completions.iter().map(|c| c.job_id).collect();
        ids.sort_unstable();
        ids.dedup();
        let jobs = self.load_jobs(&mut tx, &ids).await?;
        let runs: HashMap<JobId, RunId> = jobs.iter().map(|(&id, job)| (id, job.run)).collect();
        let plan = plan_batch(jobs, completions, now);
        let applied = self.apply_plan(&mut tx, &plan, now).await?;
        self.backend.commit(tx).await?;
        // Jobs back in the queue (a vote that needs another identity, a
        // report rejected): the next lease's scan starts no later than them.
        let put_back_at = std::time::Instant::now();
        for (job, change) in &plan.jobs {
            if change.state == JobState::Pending
                && let Some(&run) = runs.get(job)
            {
                self.fronts.put_back(run, *job, put_back_at);
            }
        }
        // What each identity recorded in each run sizes its share while
        // others wait (`shares.rs`).
        let mut recorded: HashMap<(RunId, &str), u64> = HashMap::new();
        for (c, outcome) in completions.iter().zip(&plan.outcomes) {
            if let (Ok(CompleteOutcome::Recorded), Some(&run)) = (outcome, runs.get(&c.job_id)) {
                *recorded.entry((run, c.worker.as_str())).or_default() += 1;
            }
        }
        for ((run, worker), jobs) in recorded {
            self.shares.recorded(run, worker, jobs, put_back_at);
        }
        self.committed(&plan, applied);
        Ok(plan.outcomes)
    }

    /// Decides job `id`, in conflict, by the coordinator's own `count`, in
    /// one transaction (`plan_decision`); false if it was not in conflict
    /// or an identity is counting it now.
    pub(super) async fn decide_by_count(&self, id: JobId, count: u128) -> Result<bool, StoreError> {
        let now = now_ms();
        let mut tx = self.backend.begin().await?;
        let jobs = self.load_jobs(&mut tx, &[id]).await?;
        let plan = plan_decision(jobs, id, count, now);
        match plan.outcomes.first() {
            Some(Ok(_)) => {}
            Some(Err(StoreError::StaleToken { .. })) => return Ok(false),
            Some(Err(error)) => return Err(StoreError::Invalid(format!("job {id}: {error}"))),
            None => return Ok(false),
        }
        let applied = self.apply_plan(&mut tx, &plan, now).await?;
        self.backend.commit(tx).await?;
        tracing::warn!(
            job = id,
            count,
            rejected = plan.rejections.len(),
            "the coordinator's own count decided the conflict"
        );
        self.committed(&plan, applied);
        Ok(true)
    }

    /// What a committed transaction did: its rejections, conflicts and the
    /// identities it quarantined are said (never before the commit: a
    /// transaction that failed did none of it), the runs it finished are
    /// announced, and their answers (just folded and written) serve the
    /// first reads, which would otherwise fold every result of the run again.
    fn committed(&self, plan: &BatchPlan, applied: Applied) {
        for r in &plan.rejections {
            tracing::warn!(job = r.job, worker = %r.worker, count = r.count, reason = %r.reason, "result rejected");
        }
        for (job, votes) in &plan.conflicts {
            tracing::error!(job, ?votes, "no quorum: the job fails with a conflict");
        }
        for (job, votes) in &plan.disputed {
            tracing::warn!(
                job,
                ?votes,
                "the identities disagree: a conflict, until another identity makes a quorum or the coordinator counts the job itself"
            );
        }
        applied.quarantined.iter().for_each(Quarantined::say);
        let finished = applied.finished;
        self.finished.lock().expect("never poisoned").extend(finished.iter().map(|(run, _)| *run));
        self.verified_finals.lock().expect("never poisoned").extend(finished);
    }

    /// Takes the lock of each identity, in name order, before any row:
    /// every transaction that takes identity locks takes them first, so
    /// they add no deadlock of their own (a quarantine of another identity
    /// inside a batch is the exception; Postgres breaks such a rare cycle
    /// and the call is retried).
    pub(super) async fn lock_identities<'a>(
        &self,
        tx: &mut B::Tx,
        workers: impl IntoIterator<Item = &'a str>,
    ) -> Result<(), StoreError> {
        let workers: Vec<&str> = workers.into_iter().collect::<BTreeSet<_>>().into_iter().collect();
        self.backend.lock_identities(tx, &workers).await
    }

    /// The jobs `ids` (sorted), locked in id order (so concurrent batches
    /// cannot deadlock), each with the votes of its current round.
    async fn load_jobs(&self, tx: &mut B::Tx, ids: &[JobId]) -> Result<HashMap<JobId, JobView>, StoreError> {
        let rows = self.backend.load_jobs(tx, ids).await?;
        let mut jobs = HashMap::with_capacity(rows.len());
        // Jobs with votes this round; and done jobs without (see
        // `JobRecord::votes`), whose accepted result is the only vote,
        // needed to recognise a repeat.
        let mut voted = Vec::new();
        for row in rows {
            if row.votes > 0 || row.lease.state == JobState::Done {
                voted.push(row.id);
            }
            let job = JobView {
                run: row.run,
                class: row.class,
                key: row.key,
                counter_version: row.counter_version,
                lease: row.lease,
                attempt: row.attempt,
                redundancy: row.redundancy,
                cancelled: row.cancelled,
                round: row.round,
                cost: row.cost,
                votes: Vec::new(),
                conflict: row.conflict,
            };
            jobs.insert(row.id, (job, row.votes));
        }
        for vote in self.backend.load_votes(tx, &voted).await? {
            let Some((job, votes)) = jobs.get_mut(&vote.job) else { continue };
            // A job without votes counted is done: only its accepted result is a vote.
            if vote.round == job.round && (*votes > 0 || vote.outcome == ResultOutcome::Accepted) {
                job.votes.push((vote.worker, vote.count));
            }
        }
        Ok(jobs.into_iter().map(|(id, (job, _))| (id, job)).collect())
    }

    /// Writes what [`plan_batch`] decided, in the caller's transaction;
    /// returns the runs it finished, with their answers, and the
    /// identities it quarantined ([`Store::committed`] says and keeps them).
    async fn apply_plan(&self, tx: &mut B::Tx, plan: &BatchPlan, now: i64) -> Result<Applied, StoreError> {
        self.backend.insert_results(tx, &plan.results, now).await?;
        self.backend.mark_decided(tx, &plan.jobs, now).await?;
        let conflicts: Vec<JobId> = plan.conflicts.keys().chain(plan.disputed.keys()).copied().collect();
        self.backend.flag_conflicts(tx, &conflicts).await?;
        self.backend.add_to_worker_stats(tx, &plan.workers, now).await?;
        // The rows other reports wait for come last: a run's classes and
        // its row are shared by every report of the run and stay locked to
        // the commit, so the fewer round trips between their locks and the
        // commit, the more reports a second the run takes (BENCHMARKS.md,
        // "Dead entries in front of the queue, and the run's row locked last").
        self.backend.add_to_classes(tx, &plan.classes).await?;
        let quarantined = self.record_rejections(tx, &plan.rejections, now).await?;
        // Each run's counters, then its finish if this was its last job.
        let mut finished = Vec::new();
        for (&run, change) in &plan.runs {
            let state = self.backend.add_to_run(tx, run, change).await?;
            if change.done > 0
                && let Some(answer) = self.finish_if_complete(tx, run, state).await?
            {
                finished.push((run, answer));
            }
        }
        Ok(Applied { finished, quarantined })
    }

    /// Appends rejections and quarantines every identity that reached the
    /// limit: its leases are released at once and its results counted again.
    /// Returns the identities quarantined, to be said once committed.
    pub(super) async fn record_rejections(
        &self,
        tx: &mut B::Tx,
        rejections: &[Rejection],
        now: i64,
    ) -> Result<Vec<Quarantined>, StoreError> {
        self.backend.insert_rejections(tx, rejections, now).await?;
        let workers: BTreeSet<&str> = rejections.iter().map(|r| r.worker.as_str()).collect();
        let mut quarantined = Vec::new();
        for worker in workers {
            quarantined.extend(self.quarantine_if_rejected_enough(tx, worker, now).await?);
        }
        Ok(quarantined)
    }

    /// Quarantines `worker` if its rejections and refused reports reached
    /// the limit; the identity quarantined, to be said once committed.
    pub(super) async fn quarantine_if_rejected_enough(
        &self,
        tx: &mut B::Tx,
        worker: &str,
        now: i64,
    ) -> Result<Option<Quarantined>, StoreError> {
        let rejected = self.backend.rejections_of(tx, worker).await?;
        match quarantine_reason(Offence::Rejected, rejected, &self.config) {
            Some(reason) => self.quarantine_in(tx, worker, &reason, now).await,
            None => Ok(None),
        }
    }
}
