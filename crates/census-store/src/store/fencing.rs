//! Fencing before any work: whether the identity that reports a result
//! holds its lease, asked before the coordinator spends seconds counting
//! the result again. A token the store never issued for the job to that
//! identity is a rejection against it, so made-up tokens lead to quarantine
//! instead of costing the coordinator for free; and an identity that
//! reported more results of leases it did not hold than it could honestly
//! have (`shares.rs`) has its reports refused unread, each a rejection (or,
//! of a job that does not exist, a refused report) against it.

use std::collections::HashMap;
use std::time::Instant;

use super::{Store, now_ms};
use crate::backend::{LeaseRecord, RefusedReport, Rejection, StorageBackend};
use crate::{Completion, JobId, LeaseCheck, StoreError};

/// Classifies one report against its job's row at time `now` (ms). Pure.
///
/// The store issues `{salt}-{job id}-{attempt}` (`queue.rs`), one token
/// an attempt. So a token that is not of that form, names another job or a
/// later attempt, differs from the current attempt's token, or is the token
/// of a lease another identity holds, was never this identity's. A token of
/// an earlier attempt, or of the current one after it expired or was
/// retired, may be an honest late report: refused, not held against anyone.
fn classify(job: &LeaseRecord, worker: &str, job_id: JobId, token: &str, now: i64) -> LeaseCheck {
    if job.lease.held_by(worker, token, now) {
        return LeaseCheck::Held;
    }
    let forged = |reason: String| LeaseCheck::Forged { reason };
    let mut parts = token.rsplitn(3, '-');
    let (attempt, id, salt) = (parts.next(), parts.next(), parts.next());
    let (Some(attempt), Some(id), Some(salt)) = (attempt, id, salt) else {
        return forged("the lease token is not one this store issues".into());
    };
    if salt.len() != 32 || !salt.bytes().all(|b| b.is_ascii_hexdigit()) {
        return forged("the lease token is not one this store issues".into());
    }
    if id.parse::<JobId>().ok() != Some(job_id) {
        return forged(format!("the lease token is not for job {job_id}"));
    }
    let Some(attempt) = attempt.parse::<i64>().ok().filter(|a| (1..=job.attempt).contains(a)) else {
        return forged(format!("the lease token names an attempt job {job_id} never had"));
    };
    if attempt == job.attempt
        && let Some(current) = &job.lease.token
    {
        if current != token {
            return forged(format!("the lease token is not the one issued for attempt {attempt} of job {job_id}"));
        }
        if job.lease.owner.as_deref() != Some(worker) {
            return forged(format!("the lease token of job {job_id} was issued to another identity"));
        }
    }
    LeaseCheck::NotHeld
}

impl<B: StorageBackend> Store<B> {
    pub(super) async fn fence(&self, completions: &[Completion]) -> Result<Vec<LeaseCheck>, StoreError> {
        let now = now_ms();
        self.refuse_past_the_budget(completions, now).await?;
        let mut ids: Vec<JobId> = completions.iter().map(|c| c.job_id).collect();
        ids.sort_unstable();
        ids.dedup();
        let jobs: HashMap<JobId, LeaseRecord> =
            self.backend.leases_of(&ids).await?.into_iter().map(|job| (job.id, job)).collect();
        let mut checks = Vec::with_capacity(completions.len());
        let mut rejections = Vec::new();
        for c in completions {
            let Some(job) = jobs.get(&c.job_id) else {
                checks.push(LeaseCheck::UnknownJob);
                continue;
            };
            let check = classify(job, &c.worker, c.job_id, &c.token, now);
            if let LeaseCheck::Forged { reason } = &check {
                tracing::warn!(job = c.job_id, worker = %c.worker, %reason, "result with a forged lease token refused");
                rejections.push(Rejection {
                    job: c.job_id,
                    run: job.run,
                    attempt: job.attempt,
                    worker: c.worker.clone(),
                    count: c.count,
                    reason: reason.clone(),
                });
            }
            checks.push(check);
        }
        if !rejections.is_empty() {
            let mut tx = self.backend.begin().await?;
            let quarantined = self.record_rejections(&mut tx, &rejections, now).await?;
            self.backend.commit(tx).await?;
            quarantined.iter().for_each(super::remedies::Quarantined::say);
        }
        let mut not_held: HashMap<&str, u64> = HashMap::new();
        for (c, check) in completions.iter().zip(&checks) {
            if matches!(check, LeaseCheck::NotHeld | LeaseCheck::UnknownJob) {
                *not_held.entry(c.worker.as_str()).or_default() += 1;
            }
        }
        let at = Instant::now();
        for (worker, results) in not_held {
            self.shares.not_held(worker, results, at);
        }
        Ok(checks)
    }

    /// Refuses, unread, the reports of an identity that reported more
    /// results of leases it did not hold lately than its budget
    /// (`shares.rs`). The refusal counts against it, toward its quarantine:
    /// a rejection of the report's first job (one row read), or, when no
    /// job has that id, a refused report (a rejection names its job and
    /// run, and must never name one the report did not), so that a flood
    /// of made-up job ids quarantines its sender too.
    async fn refuse_past_the_budget(&self, completions: &[Completion], now: i64) -> Result<(), StoreError> {
        let most_held = u64::from(self.config.max_leases_per_worker);
        let mut workers: Vec<&str> = completions.iter().map(|c| c.worker.as_str()).collect();
        workers.sort_unstable();
        workers.dedup();
        for worker in workers {
            let Some(over) = self.shares.over_budget(worker, most_held, Instant::now()) else { continue };
            let reason = format!(
                "{worker} reported {} results of leases it did not hold (expired, retired, or of jobs that do not \
                 exist) in its last two lease lifetimes, more than the {} it may ({most_held} and twice the {} \
                 leases it was granted): its reports are refused unread, each a rejection",
                over.not_held, over.budget, over.granted
            );
            let first = completions.iter().find(|c| c.worker == worker).expect("a worker of the report");
            tracing::warn!(
                worker,
                not_held = over.not_held,
                budget = over.budget,
                "a report of leases not held refused unread"
            );
            let job = self.backend.leases_of(&[first.job_id]).await?.pop();
            let mut tx = self.backend.begin().await?;
            let quarantined = match job {
                Some(job) => {
                    let rejection = Rejection {
                        job: job.id,
                        run: job.run,
                        attempt: job.attempt,
                        worker: worker.to_string(),
                        count: first.count,
                        reason: reason.clone(),
                    };
                    self.record_rejections(&mut tx, &[rejection], now).await?
                }
                None => {
                    let refused =
                        RefusedReport { worker: worker.to_string(), job_named: first.job_id, reason: reason.clone() };
                    self.backend.insert_refused_report(&mut tx, &refused, now).await?;
                    self.quarantine_if_rejected_enough(&mut tx, worker, now).await?.into_iter().collect()
                }
            };
            self.backend.commit(tx).await?;
            quarantined.iter().for_each(super::remedies::Quarantined::say);
            return Err(StoreError::Rejected { job: first.job_id, reason });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{JobState, LeaseFields};

    const SALT: &str = "0123456789abcdef0123456789abcdef";

    fn leased(attempt: i64, owner: &str, expires_at: i64) -> LeaseRecord {
        LeaseRecord {
            id: 7,
            run: 1,
            attempt,
            lease: LeaseFields {
                state: JobState::Leased,
                token: Some(format!("{SALT}-7-{attempt}")),
                owner: Some(owner.into()),
                expires_at: Some(expires_at),
            },
        }
    }

    fn is_forged(check: LeaseCheck) -> bool {
        matches!(check, LeaseCheck::Forged { .. })
    }

    #[test]
    fn the_holder_of_a_live_lease_holds_it() {
        assert_eq!(classify(&leased(2, "w", 100), "w", 7, &format!("{SALT}-7-2"), 50), LeaseCheck::Held);
    }

    #[test]
    fn an_expired_or_earlier_lease_is_late_not_forged() {
        assert_eq!(classify(&leased(2, "w", 100), "w", 7, &format!("{SALT}-7-2"), 150), LeaseCheck::NotHeld);
        let other_salt = "fedcba9876543210fedcba9876543210";
        assert_eq!(classify(&leased(2, "x", 100), "w", 7, &format!("{other_salt}-7-1"), 50), LeaseCheck::NotHeld);
        let lease = LeaseFields { state: JobState::Done, token: None, owner: None, expires_at: None };
        let retired = LeaseRecord { lease, ..leased(2, "w", 0) };
        assert_eq!(classify(&retired, "w", 7, &format!("{SALT}-7-2"), 50), LeaseCheck::NotHeld);
    }

    #[test]
    fn tokens_never_issued_to_the_sender_are_forged() {
        let job = leased(2, "w", 100);
        assert!(is_forged(classify(&job, "w", 7, "made-up", 50)));
        assert!(is_forged(classify(&job, "w", 7, &format!("{SALT}-8-2"), 50)), "another job's");
        assert!(is_forged(classify(&job, "w", 7, &format!("{SALT}-7-3"), 50)), "a later attempt");
        assert!(is_forged(classify(&job, "w", 7, &format!("{SALT}-7-0"), 50)), "attempt 0 is never issued");
        let other_salt = "fedcba9876543210fedcba9876543210";
        assert!(is_forged(classify(&job, "w", 7, &format!("{other_salt}-7-2"), 50)), "not the current token");
        assert!(is_forged(classify(&job, "x", 7, &format!("{SALT}-7-2"), 50)), "held by another identity");
    }
}
