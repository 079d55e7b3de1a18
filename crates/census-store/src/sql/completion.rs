//! Completions: the state machine that decides what a report does to its
//! job (a pure function, [`decide`]), and the transaction that applies a
//! batch of decisions, with failures, requeues and recounts.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use census_math::MAX_SEED_COUNT;
use sqlx::Row;

use super::{JobState, SqlStore, now_ms};
use crate::{CompleteOutcome, Completion, JobId, RunId, StoreError};

/// A job as the decision sees it: the row, locked, plus the votes of the
/// current round.
#[derive(Debug, Clone)]
pub(crate) struct JobView {
    pub run: RunId,
    pub class: i64,
    pub seed: u8,
    pub band: String,
    pub counter_version: String,
    pub state: JobState,
    pub attempt: i64,
    pub token: Option<String>,
    pub owner: Option<String>,
    pub expires_at: Option<i64>,
    pub redundancy: u32,
    pub cancelled: bool,
    pub round: i64,
    /// (identity, count) of every vote of this round, the accepted one included.
    pub votes: Vec<(String, u64)>,
}

/// A report, as the decision sees it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Report<'a> {
    pub worker: &'a str,
    pub token: &'a str,
    pub band: &'a str,
    pub seed: u8,
    pub counter_version: &'a str,
    pub count: u64,
    pub checked_count: Option<u64>,
}

/// What a report does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// The job is done with this count; `outvoted` reported other counts.
    Accept { outvoted: Vec<String> },
    /// A vote towards the quorum; the job goes back to the queue for another identity.
    Vote,
    /// This identity already reported this count this round: nothing changes.
    Repeat,
    /// Not the current lease of this identity: refused, nothing changes.
    Stale,
    /// The run is cancelled.
    Cancelled,
    /// The report is wrong (not the job's band, seed or counter version, a
    /// count that failed validation or contradicts the identity's own vote):
    /// recorded against the identity; the lease, if current, is released.
    Reject { reason: String, lease_is_current: bool },
    /// The votes cannot reach a quorum any more: the job fails with a conflict.
    NoQuorum { stored: u64 },
}

/// The most votes a job takes before it is declared a conflict: with
/// quorum k, 2k - 1 votes always hold k equal ones unless the identities
/// disagree beyond a majority.
pub(crate) fn max_votes(redundancy: u32) -> usize {
    (2 * redundancy.max(1) - 1) as usize
}

/// Decides what `report` does to `job` at time `now` (ms). Pure: the
/// caller applies the verdict.
pub(crate) fn decide(job: &JobView, report: &Report<'_>, now: i64) -> Verdict {
    if job.cancelled {
        return Verdict::Cancelled;
    }
    let holds_lease = job.state == JobState::Leased
        && job.token.as_deref() == Some(report.token)
        && job.owner.as_deref() == Some(report.worker)
        && job.expires_at.is_some_and(|expires| expires >= now);
    if let Some((_, earlier)) = job.votes.iter().find(|(worker, _)| worker == report.worker) {
        if *earlier == report.count {
            return Verdict::Repeat;
        }
        return Verdict::Reject {
            reason: format!("reported {} after reporting {earlier} for the same job", report.count),
            lease_is_current: holds_lease,
        };
    }
    if !holds_lease {
        return Verdict::Stale;
    }
    let reject = |reason: String| Verdict::Reject { reason, lease_is_current: true };
    if report.band != job.band {
        return reject(format!("counted band {:?}, but the job's band is {:?}", report.band, job.band));
    }
    if report.seed != job.seed {
        return reject(format!("counted seed {}, but the job's seed is {}", report.seed, job.seed));
    }
    if report.counter_version != job.counter_version {
        return reject(format!(
            "counted with {:?}, but the run uses {:?}",
            report.counter_version, job.counter_version
        ));
    }
    if report.count > MAX_SEED_COUNT {
        return reject(format!("count {} is impossible (at most {MAX_SEED_COUNT} for one job)", report.count));
    }
    if let Some(checked) = report.checked_count
        && checked != report.count
    {
        return reject(format!("count {} is wrong: an independent check counted {checked}", report.count));
    }
    let agreeing = 1 + job.votes.iter().filter(|(_, count)| *count == report.count).count();
    if agreeing >= job.redundancy as usize {
        let outvoted = job.votes.iter().filter(|(_, count)| *count != report.count).map(|(w, _)| w.clone()).collect();
        return Verdict::Accept { outvoted };
    }
    if job.votes.len() + 1 >= max_votes(job.redundancy) {
        return Verdict::NoQuorum { stored: job.votes.first().map(|(_, c)| *c).unwrap_or(report.count) };
    }
    Verdict::Vote
}

/// One row of the append-only results table.
struct ResultRow {
    job: JobId,
    run: RunId,
    attempt: i64,
    round: i64,
    worker: String,
    count: i64,
    elapsed_ms: f64,
    counter_version: String,
    outcome: &'static str,
}

/// One row of the append-only rejections table.
struct RejectionRow {
    job: JobId,
    run: RunId,
    attempt: i64,
    worker: String,
    count: u64,
    reason: String,
}

/// Per-run changes of a batch.
#[derive(Default, Clone, Copy)]
struct RunDelta {
    done: i64,
    conflicts_opened: i64,
    failed_added: i64,
    counted: i64,
}

/// What a batch of completions changes.
#[derive(Default)]
struct Deltas {
    /// job -> (new state, accepted count, votes added, keep the token)
    jobs: BTreeMap<JobId, (JobState, Option<i64>, i64)>,
    /// Jobs newly flagged with a conflict.
    conflicted: BTreeSet<JobId>,
    /// (run, class) -> (count added, seeds done added)
    classes: BTreeMap<(RunId, i64), (u64, i64)>,
    runs: BTreeMap<RunId, RunDelta>,
    /// (run, worker) -> (results accepted, completions)
    workers: BTreeMap<(RunId, String), (i64, i64)>,
    rejections: Vec<RejectionRow>,
}

impl SqlStore {
    pub(crate) async fn complete_batch(
        &self,
        completions: &[Completion],
    ) -> Result<Vec<Result<CompleteOutcome, StoreError>>, StoreError> {
        let now = now_ms();
        let mut tx = self.pool.begin().await?;

        // Lock the batch's jobs in id order (so concurrent batches cannot
        // deadlock), then decide every completion in Rust, then write in bulk.
        let mut ids: Vec<JobId> = completions.iter().map(|c| c.job_id).collect();
        ids.sort_unstable();
        ids.dedup();
        let mut jobs: HashMap<JobId, JobView> = HashMap::with_capacity(ids.len());
        for chunk in ids.chunks(500) {
            let placeholders: Vec<String> = (1..=chunk.len()).map(|i| format!("${i}")).collect();
            let sql = format!(
                "SELECT j.id, j.run_id, j.class_id, j.seed, j.state, j.attempt, j.lease_token, j.lease_owner,
                        j.lease_expires_at, j.votes, r.redundancy, r.cancelled_at, j.round, r.counter_version
                 FROM jobs j JOIN runs r ON r.id = j.run_id WHERE j.id IN ({}) ORDER BY j.id {}",
                placeholders.join(", "),
                self.backend.for_update()
            );
            let mut query = sqlx::query(&sql);
            for id in chunk {
                query = query.bind(*id);
            }
            for row in query.fetch_all(&mut *tx).await? {
                let run: RunId = row.try_get(1)?;
                let class: i64 = row.try_get(2)?;
                let band = self.run_facts(run).await?.representatives.get(&(class as u32)).cloned().unwrap_or_default();
                let job = JobView {
                    run,
                    class,
                    seed: row.try_get::<i64, _>(3)? as u8,
                    band,
                    state: row.try_get::<String, _>(4)?.parse()?,
                    attempt: row.try_get(5)?,
                    token: row.try_get(6)?,
                    owner: row.try_get(7)?,
                    expires_at: row.try_get(8)?,
                    redundancy: row.try_get::<i64, _>(10)? as u32,
                    cancelled: row.try_get::<Option<i64>, _>(11)?.is_some(),
                    round: row.try_get(12)?,
                    counter_version: row.try_get(13)?,
                    votes: Vec::new(),
                };
                let votes = row.try_get::<i64, _>(9)?;
                let id: JobId = row.try_get(0)?;
                jobs.insert(id, job);
                if votes == 0 {
                    continue;
                }
                // Earlier votes of this round: who voted, and what.
                let earlier = sqlx::query(
                    "SELECT worker, count, round FROM results WHERE job_id = $1 AND outcome IN ('vote', 'accepted') ORDER BY id",
                )
                .bind(id)
                .fetch_all(&mut *tx)
                .await?;
                let job = jobs.get_mut(&id).expect("just inserted");
                for vote in &earlier {
                    if vote.try_get::<i64, _>(2)? == job.round {
                        job.votes.push((vote.try_get(0)?, vote.try_get::<i64, _>(1)? as u64));
                    }
                }
            }
        }
        // Done jobs have no votes counted above when redundancy is 1: their
        // accepted result is the only vote, needed to recognise a repeat.
        for (id, job) in jobs.iter_mut().filter(|(_, job)| job.state == JobState::Done && job.votes.is_empty()) {
            let accepted = sqlx::query(
                "SELECT worker, count FROM results WHERE job_id = $1 AND round = $2 AND outcome = 'accepted' ORDER BY id",
            )
            .bind(*id)
            .bind(job.round)
            .fetch_all(&mut *tx)
            .await?;
            for vote in &accepted {
                job.votes.push((vote.try_get(0)?, vote.try_get::<i64, _>(1)? as u64));
            }
        }

        let mut outcomes = Vec::with_capacity(completions.len());
        let mut deltas = Deltas::default();
        let mut results: Vec<ResultRow> = Vec::new();
        for c in completions {
            let Some(job) = jobs.get_mut(&c.job_id) else {
                outcomes.push(Err(StoreError::UnknownJob(c.job_id)));
                continue;
            };
            let report = Report {
                worker: &c.worker,
                token: &c.token,
                band: &c.band,
                seed: c.seed,
                counter_version: &c.counter_version,
                count: c.count,
                checked_count: c.checked_count,
            };
            let verdict = decide(job, &report, now);
            let count = c.count.min(MAX_SEED_COUNT) as i64;
            let mut result = |outcome: &'static str, job: &JobView| {
                results.push(ResultRow {
                    job: c.job_id,
                    run: job.run,
                    attempt: job.attempt,
                    round: job.round,
                    worker: c.worker.clone(),
                    count,
                    elapsed_ms: c.elapsed.as_secs_f64() * 1e3,
                    counter_version: c.counter_version.clone(),
                    outcome,
                })
            };
            let outcome = match verdict {
                Verdict::Cancelled => Err(StoreError::RunCancelled(job.run)),
                Verdict::Stale => Err(StoreError::StaleToken { job: c.job_id }),
                Verdict::Repeat => Ok(CompleteOutcome::AlreadyDone),
                Verdict::Reject { reason, lease_is_current } => {
                    tracing::warn!(job = c.job_id, worker = %c.worker, count = c.count, %reason, "result rejected");
                    deltas.rejections.push(RejectionRow {
                        job: c.job_id,
                        run: job.run,
                        attempt: job.attempt,
                        worker: c.worker.clone(),
                        count: c.count,
                        reason: reason.clone(),
                    });
                    if lease_is_current {
                        // Someone else counts it.
                        job.state = JobState::Pending;
                        job.token = None;
                        job.owner = None;
                        deltas.jobs.insert(c.job_id, (JobState::Pending, None, 0));
                    }
                    Err(StoreError::Rejected { job: c.job_id, reason })
                }
                Verdict::Vote => {
                    result("vote", job);
                    job.votes.push((c.worker.clone(), c.count));
                    job.state = JobState::Pending;
                    job.token = None;
                    job.owner = None;
                    let entry = deltas.jobs.entry(c.job_id).or_insert((JobState::Pending, None, 0));
                    *entry = (JobState::Pending, None, entry.2 + 1);
                    Ok(CompleteOutcome::Recorded)
                }
                Verdict::Accept { outvoted } => {
                    result("accepted", job);
                    for loser in outvoted {
                        let theirs = job.votes.iter().find(|(w, _)| *w == loser).map(|(_, n)| *n).unwrap_or(0);
                        tracing::warn!(job = c.job_id, worker = %loser, reported = theirs, accepted = c.count, "outvoted by the quorum");
                        deltas.rejections.push(RejectionRow {
                            job: c.job_id,
                            run: job.run,
                            attempt: job.attempt,
                            worker: loser,
                            count: theirs,
                            reason: format!("reported {theirs}; a quorum of identities agreed on {}", c.count),
                        });
                    }
                    job.votes.push((c.worker.clone(), c.count));
                    job.state = JobState::Done;
                    job.token = None;
                    job.owner = None;
                    let entry = deltas.jobs.entry(c.job_id).or_insert((JobState::Done, Some(count), 0));
                    *entry = (JobState::Done, Some(count), entry.2 + 1);
                    let class = deltas.classes.entry((job.run, job.class)).or_default();
                    class.0 += c.count;
                    class.1 += 1;
                    let run = deltas.runs.entry(job.run).or_default();
                    run.done += 1;
                    run.counted += count;
                    let tally = deltas.workers.entry((job.run, c.worker.clone())).or_default();
                    tally.0 += 1;
                    tally.1 += count;
                    Ok(CompleteOutcome::Recorded)
                }
                Verdict::NoQuorum { stored } => {
                    result("conflict", job);
                    tracing::error!(job = c.job_id, votes = ?job.votes, reported = c.count, "no quorum: the job fails with a conflict");
                    job.votes.push((c.worker.clone(), c.count));
                    job.state = JobState::Failed;
                    job.token = None;
                    job.owner = None;
                    deltas.jobs.insert(c.job_id, (JobState::Failed, None, 1));
                    deltas.conflicted.insert(c.job_id);
                    let run = deltas.runs.entry(job.run).or_default();
                    run.conflicts_opened += 1;
                    run.failed_added += 1;
                    Ok(CompleteOutcome::Conflict { stored })
                }
            };
            outcomes.push(outcome);
        }

        self.insert_results(&mut tx, &results, now).await?;
        for (&job, &(state, count, votes)) in &deltas.jobs {
            // Every decided job loses its lease: the token is fenced off.
            sqlx::query(
                "UPDATE jobs SET state = $2, count = COALESCE($3, count), votes = votes + $4, lease_owner = NULL,
                        lease_token = NULL, lease_expires_at = NULL, updated_at = $5 WHERE id = $1",
            )
            .bind(job)
            .bind(state.as_str())
            .bind(count)
            .bind(votes)
            .bind(now)
            .execute(&mut *tx)
            .await?;
        }
        for job in &deltas.conflicted {
            sqlx::query("UPDATE jobs SET conflict = 1 WHERE id = $1").bind(*job).execute(&mut *tx).await?;
        }
        for (&(run, class), &(count, seeds)) in &deltas.classes {
            sqlx::query(
                "UPDATE classes SET seed_sum = seed_sum + $3, seeds_done = seeds_done + $4 WHERE run_id = $1 AND class_id = $2",
            )
            .bind(run)
            .bind(class)
            .bind(count as i64)
            .bind(seeds)
            .execute(&mut *tx)
            .await?;
        }
        for ((run, worker), &(jobs, completions)) in &deltas.workers {
            sqlx::query(
                "INSERT INTO worker_stats (run_id, worker, jobs, completions, last_seen) VALUES ($1, $2, $3, $4, $5)
                 ON CONFLICT (run_id, worker) DO UPDATE SET jobs = worker_stats.jobs + excluded.jobs,
                     completions = worker_stats.completions + excluded.completions, last_seen = excluded.last_seen",
            )
            .bind(*run)
            .bind(worker.clone())
            .bind(jobs)
            .bind(completions)
            .bind(now)
            .execute(&mut *tx)
            .await?;
        }
        self.record_rejections(&mut tx, &deltas.rejections, now).await?;
        let mut finished = Vec::new();
        for (&run, delta) in &deltas.runs {
            sqlx::query(
                "UPDATE runs SET jobs_remaining = jobs_remaining - $2, open_conflicts = open_conflicts + $3,
                        failed_jobs = failed_jobs + $4, counted = counted + $5 WHERE id = $1",
            )
            .bind(run)
            .bind(delta.done)
            .bind(delta.conflicts_opened)
            .bind(delta.failed_added)
            .bind(delta.counted)
            .execute(&mut *tx)
            .await?;
            if delta.done > 0 && self.finish_if_complete(&mut tx, run).await? {
                finished.push(run);
            }
        }
        tx.commit().await?;
        self.finished.lock().expect("never poisoned").extend(finished);
        Ok(outcomes)
    }

    async fn insert_results(
        &self,
        tx: &mut sqlx::Transaction<'_, sqlx::Any>,
        results: &[ResultRow],
        now: i64,
    ) -> Result<(), StoreError> {
        const COLUMNS: usize = 9;
        for chunk in results.chunks(300) {
            let rows: Vec<String> = (0..chunk.len())
                .map(|i| {
                    let p = i * COLUMNS + 2;
                    let params: Vec<String> = (p..p + COLUMNS).map(|n| format!("${n}")).collect();
                    format!("({}, $1)", params.join(", "))
                })
                .collect();
            let sql = format!(
                "INSERT INTO results (job_id, run_id, attempt, round, worker, count, elapsed_ms, counter_version, outcome, finished_at)
                 VALUES {}",
                rows.join(", ")
            );
            let mut query = sqlx::query(&sql).bind(now);
            for r in chunk {
                query = query
                    .bind(r.job)
                    .bind(r.run)
                    .bind(r.attempt)
                    .bind(r.round)
                    .bind(r.worker.clone())
                    .bind(r.count)
                    .bind(r.elapsed_ms)
                    .bind(r.counter_version.clone())
                    .bind(r.outcome);
            }
            query.execute(&mut **tx).await?;
        }
        Ok(())
    }

    /// Appends rejections and quarantines every identity that reached the
    /// limit: its leases are released at once.
    async fn record_rejections(
        &self,
        tx: &mut sqlx::Transaction<'_, sqlx::Any>,
        rejections: &[RejectionRow],
        now: i64,
    ) -> Result<(), StoreError> {
        let insert = format!(
            "INSERT INTO rejections (job_id, run_id, attempt, worker, count, reason, rejected_at)
             VALUES ($1, $2, $3, $4, {}, $6, $7)",
            self.backend.big_number("$5")
        );
        for r in rejections {
            sqlx::query(&insert)
                .bind(r.job)
                .bind(r.run)
                .bind(r.attempt)
                .bind(r.worker.clone())
                .bind(r.count.to_string())
                .bind(r.reason.clone())
                .bind(now)
                .execute(&mut **tx)
                .await?;
        }
        let workers: BTreeSet<&str> = rejections.iter().map(|r| r.worker.as_str()).collect();
        for worker in workers {
            let rejected: i64 = sqlx::query("SELECT COUNT(*) FROM rejections WHERE worker = $1")
                .bind(worker)
                .fetch_one(&mut **tx)
                .await?
                .try_get(0)?;
            if rejected < i64::from(self.config.quarantine_after) {
                continue;
            }
            let reason = format!("{rejected} results rejected");
            let inserted = sqlx::query(
                "INSERT INTO quarantine (worker, quarantined_at, reason) VALUES ($1, $2, $3) ON CONFLICT (worker) DO NOTHING",
            )
            .bind(worker)
            .bind(now)
            .bind(&reason)
            .execute(&mut **tx)
            .await?;
            if inserted.rows_affected() > 0 {
                tracing::error!(worker, %reason, "identity quarantined: its calls are refused until an operator releases it");
            }
            sqlx::query(
                "UPDATE jobs SET state = 'pending', lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL,
                        updated_at = $2 WHERE state = 'leased' AND lease_owner = $1",
            )
            .bind(worker)
            .bind(now)
            .execute(&mut **tx)
            .await?;
        }
        Ok(())
    }

    pub(crate) async fn recount_job(&self, job: JobId) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await?;
        self.recount_in(&mut tx, job).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn recount_in(&self, tx: &mut sqlx::Transaction<'_, sqlx::Any>, job: JobId) -> Result<RunId, StoreError> {
        let now = now_ms();
        let row = sqlx::query(&format!(
            "SELECT j.state, j.count, j.conflict, j.run_id, j.class_id FROM jobs j WHERE j.id = $1 {}",
            self.backend.for_update()
        ))
        .bind(job)
        .fetch_optional(&mut **tx)
        .await?
        .ok_or(StoreError::UnknownJob(job))?;
        let state: JobState = row.try_get::<String, _>(0)?.parse()?;
        let count: Option<i64> = row.try_get(1)?;
        let run: RunId = row.try_get(3)?;
        let class: i64 = row.try_get(4)?;
        if row.try_get::<i64, _>(2)? == 0 {
            return Err(StoreError::Invalid(format!("job {job} has no conflict to resolve")));
        }
        let (done, failed) = (state == JobState::Done, state == JobState::Failed);
        if done {
            sqlx::query(
                "UPDATE classes SET seed_sum = seed_sum - $3, seeds_done = seeds_done - 1 WHERE run_id = $1 AND class_id = $2",
            )
            .bind(run)
            .bind(class)
            .bind(count.unwrap_or(0))
            .execute(&mut **tx)
            .await?;
        }
        sqlx::query(
            "UPDATE runs SET open_conflicts = open_conflicts - 1, jobs_remaining = jobs_remaining + $2,
                    failed_jobs = failed_jobs - $3, counted = counted - $4, finished_at = NULL, s = NULL, n0 = NULL
             WHERE id = $1",
        )
        .bind(run)
        .bind(i64::from(done))
        .bind(i64::from(failed))
        .bind(if done { count.unwrap_or(0) } else { 0 })
        .execute(&mut **tx)
        .await?;
        // A new round: earlier votes and tokens no longer count.
        sqlx::query(
            "UPDATE jobs SET state = 'pending', count = NULL, votes = 0, conflict = 0, failures = 0, round = round + 1,
                    lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL, updated_at = $2 WHERE id = $1",
        )
        .bind(job)
        .bind(now)
        .execute(&mut **tx)
        .await?;
        tracing::warn!(job, run, "conflict resolved by recounting the job");
        Ok(run)
    }

    pub(crate) async fn fail_job(&self, job: JobId, token: &str, worker: &str, reason: &str) -> Result<(), StoreError> {
        let now = now_ms();
        let mut tx = self.pool.begin().await?;
        let row = sqlx::query(&format!(
            "SELECT j.state, j.attempt, j.lease_token, j.run_id, j.lease_owner, j.lease_expires_at, j.failures
             FROM jobs j WHERE j.id = $1 {}",
            self.backend.for_update()
        ))
        .bind(job)
        .fetch_optional(&mut *tx)
        .await?
        .ok_or(StoreError::UnknownJob(job))?;
        let state: JobState = row.try_get::<String, _>(0)?.parse()?;
        let attempt: i64 = row.try_get(1)?;
        let current: Option<String> = row.try_get(2)?;
        let run: RunId = row.try_get(3)?;
        let owner: Option<String> = row.try_get(4)?;
        let expires: Option<i64> = row.try_get(5)?;
        let failures: i64 = row.try_get::<i64, _>(6)? + 1;
        if state != JobState::Leased
            || current.as_deref() != Some(token)
            || owner.as_deref() != Some(worker)
            || expires.is_none_or(|e| e < now)
        {
            return Err(StoreError::StaleToken { job });
        }
        sqlx::query("INSERT INTO failures (job_id, attempt, worker, reason, failed_at) VALUES ($1, $2, $3, $4, $5)")
            .bind(job)
            .bind(attempt)
            .bind(worker)
            .bind(reason)
            .bind(now)
            .execute(&mut *tx)
            .await?;
        let exhausted = failures >= i64::from(self.config.max_attempts);
        let next = if exhausted { JobState::Failed } else { JobState::Pending };
        sqlx::query(
            "UPDATE jobs SET state = $2, failures = $3, lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL,
                    updated_at = $4 WHERE id = $1",
        )
        .bind(job)
        .bind(next.as_str())
        .bind(failures)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        if exhausted {
            sqlx::query("UPDATE runs SET failed_jobs = failed_jobs + 1 WHERE id = $1")
                .bind(run)
                .execute(&mut *tx)
                .await?;
            tracing::error!(
                job,
                attempt,
                failures,
                worker,
                reason,
                "job failed for good; `census requeue` puts it back"
            );
        } else {
            tracing::warn!(job, attempt, failures, worker, reason, "job failed; it will be retried");
        }
        tx.commit().await?;
        Ok(())
    }

    pub(crate) async fn requeue_jobs(&self, run: RunId, job: Option<JobId>) -> Result<u64, StoreError> {
        self.ensure_run(run).await?;
        let now = now_ms();
        let mut tx = self.pool.begin().await?;
        let rows = sqlx::query(&format!(
            "SELECT j.id, j.conflict FROM jobs j WHERE j.run_id = $1 AND j.state = 'failed' AND ($2 < 0 OR j.id = $2)
             ORDER BY j.id {}",
            self.backend.for_update()
        ))
        .bind(run)
        .bind(job.unwrap_or(-1))
        .fetch_all(&mut *tx)
        .await?;
        if let Some(job) = job
            && rows.is_empty()
        {
            let exists = sqlx::query("SELECT state FROM jobs WHERE id = $1 AND run_id = $2")
                .bind(job)
                .bind(run)
                .fetch_optional(&mut *tx)
                .await?;
            return Err(match exists {
                None => StoreError::UnknownJob(job),
                Some(row) => StoreError::Invalid(format!(
                    "job {job} is {}, not failed: only failed jobs are requeued",
                    row.try_get::<String, _>(0)?
                )),
            });
        }
        let mut plain = 0i64;
        for row in &rows {
            let id: JobId = row.try_get(0)?;
            if row.try_get::<i64, _>(1)? != 0 {
                self.recount_in(&mut tx, id).await?;
                continue;
            }
            sqlx::query(
                "UPDATE jobs SET state = 'pending', failures = 0, lease_owner = NULL, lease_token = NULL,
                        lease_expires_at = NULL, updated_at = $2 WHERE id = $1",
            )
            .bind(id)
            .bind(now)
            .execute(&mut *tx)
            .await?;
            plain += 1;
        }
        sqlx::query("UPDATE runs SET failed_jobs = failed_jobs - $2 WHERE id = $1")
            .bind(run)
            .bind(plain)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        tracing::warn!(run, jobs = rows.len(), "failed jobs requeued");
        Ok(rows.len() as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(redundancy: u32) -> JobView {
        JobView {
            run: 1,
            class: 0,
            seed: 3,
            band: "b".into(),
            counter_version: "v".into(),
            state: JobState::Leased,
            attempt: 1,
            token: Some("t".into()),
            owner: Some("w1".into()),
            expires_at: Some(1_000),
            redundancy,
            cancelled: false,
            round: 0,
            votes: Vec::new(),
        }
    }

    fn report(worker: &str, count: u64) -> Report<'_> {
        Report { worker, token: "t", band: "b", seed: 3, counter_version: "v", count, checked_count: None }
    }

    #[test]
    fn only_the_current_holder_before_expiry_is_heard() {
        let job = job(1);
        assert_eq!(decide(&job, &report("w1", 5), 1_000), Verdict::Accept { outvoted: vec![] });
        assert_eq!(decide(&job, &report("w2", 5), 1_000), Verdict::Stale);
        assert_eq!(decide(&job, &Report { token: "x", ..report("w1", 5) }, 1_000), Verdict::Stale);
        assert_eq!(decide(&job, &report("w1", 5), 1_001), Verdict::Stale);
        let done = JobView { state: JobState::Done, token: None, owner: None, votes: vec![("w1".into(), 5)], ..job };
        assert_eq!(decide(&done, &report("w1", 5), 0), Verdict::Repeat);
        assert_eq!(decide(&done, &report("w2", 6), 0), Verdict::Stale);
        assert!(matches!(decide(&done, &report("w1", 6), 0), Verdict::Reject { lease_is_current: false, .. }));
    }

    #[test]
    fn reports_must_name_the_job_and_pass_the_check() {
        let job = job(1);
        for wrong in [
            Report { band: "c", ..report("w1", 5) },
            Report { seed: 4, ..report("w1", 5) },
            Report { counter_version: "u", ..report("w1", 5) },
            Report { checked_count: Some(4), ..report("w1", 5) },
            report("w1", MAX_SEED_COUNT + 1),
        ] {
            assert!(matches!(decide(&job, &wrong, 0), Verdict::Reject { lease_is_current: true, .. }), "{wrong:?}");
        }
    }

    #[test]
    fn a_quorum_of_distinct_identities_decides() {
        let mut job = job(2);
        assert_eq!(decide(&job, &report("w1", 5), 0), Verdict::Vote);
        job.votes.push(("w1".into(), 5));
        job.owner = Some("w2".into());
        assert_eq!(decide(&job, &report("w2", 6), 0), Verdict::Vote);
        job.votes.push(("w2".into(), 6));
        job.owner = Some("w3".into());
        assert_eq!(decide(&job, &report("w3", 5), 0), Verdict::Accept { outvoted: vec!["w2".into()] });
        assert_eq!(decide(&job, &report("w3", 7), 0), Verdict::NoQuorum { stored: 5 });
        job.owner = Some("w1".into());
        assert_eq!(decide(&job, &report("w1", 5), 0), Verdict::Repeat);
    }
}
