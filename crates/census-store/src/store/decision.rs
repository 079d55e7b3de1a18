//! The rules of the store, written once and free of any backend: what a
//! report does to its job ([`decide`], state by state), what a batch of
//! reports changes ([`plan_batch`]: votes, quorum, conflicts, the sums a
//! result adds, the rejections it records), when an identity is
//! quarantined ([`quarantine_reason`]) and when a job fails for good
//! ([`fails_for_good`]). Every function here is pure: the store loads the
//! rows they read and applies what they return (`completion.rs`,
//! `remedies.rs`, `fencing.rs`).

use std::collections::{BTreeMap, HashMap};

use crate::backend::{
    ClassChanges, ClassId, JobChange, JobState, LeaseFields, NewResult, Rejection, ResultOutcome, RunChange,
    WorkerTally,
};
use crate::{CompleteOutcome, Completion, JobId, RunId, StoreConfig, StoreError};

/// A job as the decision sees it: the row, locked, plus the votes of the
/// current round.
#[derive(Debug, Clone)]
pub(crate) struct JobView {
    pub run: RunId,
    pub class: ClassId,
    pub key: String,
    pub counter_version: String,
    pub lease: LeaseFields,
    pub attempt: i64,
    pub redundancy: u32,
    pub cancelled: bool,
    pub round: i64,
    /// Its expected cost (`Census::job_cost`), added to the run's cost done
    /// when it is accepted.
    pub cost: i64,
    /// (identity, count) of every vote of this round, the accepted one included.
    pub votes: Vec<(String, u128)>,
    /// Whether an open conflict is flagged on it: its identities disagree
    /// and no quorum has decided yet.
    pub conflict: bool,
}

/// A report, as the decision sees it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Report<'a> {
    pub worker: &'a str,
    pub token: &'a str,
    pub key: &'a str,
    pub counter_version: &'a str,
    pub count: u128,
    pub checked_count: Option<u128>,
}

impl<'a> Report<'a> {
    fn of(completion: &'a Completion) -> Report<'a> {
        Report {
            worker: &completion.worker,
            token: &completion.token,
            key: &completion.key,
            counter_version: &completion.counter_version,
            count: completion.count,
            checked_count: completion.checked_count,
        }
    }
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
    /// The report is wrong (not the job's key or counter version, a
    /// count that failed validation or contradicts the identity's own vote):
    /// recorded against the identity; the lease, if current, is released.
    Reject { reason: String, lease_is_current: bool },
    /// The votes cannot reach a quorum any more: the job fails with a conflict.
    NoQuorum { stored: u128 },
    /// The coordinator counted a job in conflict itself ([`ARBITER`]): its
    /// count is accepted, and every vote that differs is rejected.
    Decided,
}

/// Who the coordinator's own count of a job in conflict is recorded as: a
/// name no token can have (`check_identity` refuses parentheses).
pub const ARBITER: &str = "(coordinator)";

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
    let holds_lease = job.lease.held_by(report.worker, report.token, now);
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
    if report.key != job.key {
        return reject(format!("counted {:?}, but the job is {:?}", report.key, job.key));
    }
    if report.counter_version != job.counter_version {
        return reject(format!(
            "counted with {:?}, but the run uses {:?}",
            report.counter_version, job.counter_version
        ));
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

/// What the coordinator's own count does to `job` at `now`: it decides a
/// job in conflict that nobody is counting (not done, no live lease);
/// anything else is stale (the conflict was settled meanwhile, by a quorum
/// or another coordinator, or an identity is counting the job now).
fn decide_by_arbiter(job: &JobView, now: i64) -> Verdict {
    let counting = job.lease.state == JobState::Leased && job.lease.expires_at.is_some_and(|at| at > now);
    if !job.conflict || job.lease.state == JobState::Done || counting {
        return Verdict::Stale;
    }
    Verdict::Decided
}

/// Whether the votes of a round name more than one count.
fn disagree(votes: &[(String, u128)]) -> bool {
    votes.windows(2).any(|pair| pair[0].1 != pair[1].1)
}

/// Everything a batch of reports changes, decided before anything is
/// written: the store writes it in one transaction (`completion.rs`).
#[derive(Debug, Default)]
pub(crate) struct BatchPlan {
    /// One answer a report, in order.
    pub outcomes: Vec<Result<CompleteOutcome, StoreError>>,
    pub results: Vec<NewResult>,
    pub jobs: BTreeMap<JobId, JobChange>,
    /// Jobs newly flagged with a conflict, with every vote of the round:
    /// those whose votes cannot reach a quorum any more (failed), and
    /// those whose identities disagree and wait for another identity or
    /// the coordinator's own count (`disputed`).
    pub conflicts: BTreeMap<JobId, Vec<(String, u128)>>,
    pub disputed: BTreeMap<JobId, Vec<(String, u128)>>,
    pub classes: ClassChanges,
    pub runs: BTreeMap<RunId, RunChange>,
    pub workers: BTreeMap<(RunId, String), WorkerTally>,
    pub rejections: Vec<Rejection>,
}

/// Decides a batch of reports against the loaded `jobs` (locked, with the
/// votes of their round) at time `now` (ms), one after the other: a report
/// sees what the earlier ones of the batch did, so a job is accepted at
/// most once however often it is reported. Pure: the store applies the plan.
pub(crate) fn plan_batch(mut jobs: HashMap<JobId, JobView>, completions: &[Completion], now: i64) -> BatchPlan {
    let mut plan = BatchPlan { outcomes: Vec::with_capacity(completions.len()), ..BatchPlan::default() };
    for completion in completions {
        let outcome = match jobs.get_mut(&completion.job_id) {
            None => Err(StoreError::UnknownJob(completion.job_id)),
            Some(job) => {
                let verdict = decide(job, &Report::of(completion), now);
                plan.record(completion, job, verdict)
            }
        };
        plan.outcomes.push(outcome);
    }
    plan
}

/// What the coordinator's own `count` of job `id`, in conflict, changes
/// at `now` ([`Verdict::Decided`], or stale if the conflict was settled
/// meanwhile or an identity is counting the job). Pure, like [`plan_batch`];
/// the store applies the plan in the same way.
pub(crate) fn plan_decision(mut jobs: HashMap<JobId, JobView>, id: JobId, count: u128, now: i64) -> BatchPlan {
    let mut plan = BatchPlan::default();
    let Some(job) = jobs.get_mut(&id) else {
        plan.outcomes.push(Err(StoreError::UnknownJob(id)));
        return plan;
    };
    let arbiter = Completion {
        job_id: id,
        token: String::new(),
        worker: ARBITER.into(),
        key: job.key.clone(),
        counter_version: job.counter_version.clone(),
        count,
        elapsed: std::time::Duration::ZERO,
        checked_count: Some(count),
    };
    let verdict = decide_by_arbiter(job, now);
    let outcome = plan.record(&arbiter, job, verdict);
    plan.outcomes.push(outcome);
    plan
}

impl BatchPlan {
    /// Adds what `verdict` does to the plan, and to `job` as later reports
    /// of the batch see it; returns the report's answer.
    fn record(&mut self, c: &Completion, job: &mut JobView, verdict: Verdict) -> Result<CompleteOutcome, StoreError> {
        match verdict {
            Verdict::Cancelled => Err(StoreError::RunCancelled(job.run)),
            Verdict::Stale => Err(StoreError::StaleToken { job: c.job_id }),
            Verdict::Repeat => Ok(CompleteOutcome::AlreadyDone),
            Verdict::Reject { reason, lease_is_current } => {
                self.reject(c.job_id, job, &c.worker, c.count, reason.clone());
                if lease_is_current {
                    // Someone else counts it.
                    self.settle(c.job_id, job, JobState::Pending, None, None);
                }
                Err(StoreError::Rejected { job: c.job_id, reason })
            }
            Verdict::Vote => {
                self.append_result(c, job, ResultOutcome::Vote);
                self.settle(c.job_id, job, JobState::Pending, None, Some(c));
                // Distinct identities disagree: a conflict from now on, seen
                // in status and SQL, until a quorum or the coordinator decides.
                if !job.conflict && disagree(&job.votes) {
                    job.conflict = true;
                    self.disputed.insert(c.job_id, job.votes.clone());
                    self.runs.entry(job.run).or_default().conflicts_opened += 1;
                }
                Ok(CompleteOutcome::Recorded)
            }
            Verdict::Decided => {
                let failed = job.lease.state == JobState::Failed;
                let differing: Vec<(String, u128)> =
                    job.votes.iter().filter(|(_, count)| *count != c.count).cloned().collect();
                for (identity, theirs) in differing {
                    let reason = format!(
                        "reported {theirs}; the identities disagreed and no quorum formed, and the coordinator's own count is {}",
                        c.count
                    );
                    self.reject(c.job_id, job, &identity, theirs, reason);
                }
                self.accept(c, job);
                if failed {
                    self.runs.entry(job.run).or_default().failed_added -= 1;
                }
                Ok(CompleteOutcome::Recorded)
            }
            Verdict::Accept { outvoted } => {
                for loser in outvoted {
                    let theirs = job.votes.iter().find(|(w, _)| *w == loser).map(|(_, n)| *n).unwrap_or(0);
                    let reason = format!("reported {theirs}; a quorum of identities agreed on {}", c.count);
                    self.reject(c.job_id, job, &loser, theirs, reason);
                }
                self.accept(c, job);
                Ok(CompleteOutcome::Recorded)
            }
            Verdict::NoQuorum { stored } => {
                self.append_result(c, job, ResultOutcome::Conflict);
                self.settle(c.job_id, job, JobState::Failed, None, Some(c));
                self.conflicts.insert(c.job_id, job.votes.clone());
                let run = self.runs.entry(job.run).or_default();
                // A job disputed before is in conflict already.
                run.conflicts_opened += i64::from(!job.conflict);
                run.failed_added += 1;
                job.conflict = true;
                Ok(CompleteOutcome::Conflict { stored })
            }
        }
    }

    /// The job is done with `c`'s count: its class, run and identity add
    /// it, and a conflict open on it closes.
    fn accept(&mut self, c: &Completion, job: &mut JobView) {
        self.append_result(c, job, ResultOutcome::Accepted);
        self.settle(c.job_id, job, JobState::Done, Some(c.count), Some(c));
        let class = self.classes.entry((job.run, job.class)).or_default();
        class.0 += c.count;
        class.1 += 1;
        let run = self.runs.entry(job.run).or_default();
        run.done += 1;
        run.cost_done += job.cost;
        run.counted += c.count;
        if job.conflict {
            run.conflicts_opened -= 1;
            job.conflict = false;
        }
        let tally = self.workers.entry((job.run, c.worker.clone())).or_default();
        tally.jobs += 1;
        tally.completions += c.count;
    }

    /// The job leaves its lease for `state`, done with `count` if given,
    /// with the vote of `voter` if given.
    fn settle(
        &mut self,
        id: JobId,
        job: &mut JobView,
        state: JobState,
        count: Option<u128>,
        voter: Option<&Completion>,
    ) {
        job.lease.retire(state);
        let change = self.jobs.entry(id).or_insert(JobChange { state, count, votes_added: 0 });
        (change.state, change.count) = (state, count);
        if let Some(voter) = voter {
            job.votes.push((voter.worker.clone(), voter.count));
            change.votes_added += 1;
        }
    }

    fn append_result(&mut self, c: &Completion, job: &JobView, outcome: ResultOutcome) {
        self.results.push(NewResult {
            job: c.job_id,
            run: job.run,
            attempt: job.attempt,
            round: job.round,
            worker: c.worker.clone(),
            count: c.count,
            elapsed_ms: c.elapsed.as_secs_f64() * 1e3,
            counter_version: c.counter_version.clone(),
            outcome,
            cost: job.cost,
        });
    }

    fn reject(&mut self, id: JobId, job: &JobView, worker: &str, count: u128, reason: String) {
        self.rejections.push(Rejection {
            job: id,
            run: job.run,
            attempt: job.attempt,
            worker: worker.into(),
            count,
            reason,
        });
    }
}

/// What an identity did too often.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Offence {
    /// Results rejected (wrong, outvoted, contradicting, forged tokens).
    Rejected,
    /// Failures reported.
    Failed,
}

/// Why an identity with `so_far` offences of this kind is quarantined, or
/// `None` while it is under the configured limit.
pub(crate) fn quarantine_reason(offence: Offence, so_far: i64, config: &StoreConfig) -> Option<String> {
    let (limit, what) = match offence {
        Offence::Rejected => (config.quarantine_after, "results rejected"),
        Offence::Failed => (config.quarantine_after_failures, "failures reported"),
    };
    (so_far >= i64::from(limit)).then(|| format!("{so_far} {what}"))
}

/// Whether a job with `failures` failures (since it was last requeued),
/// reported by `identities` distinct identities, fails for good: after
/// `max_attempts` failures from at least `fail_quorum` identities (at most
/// `max_attempts` are asked for), so that one identity alone can delay a
/// job, never fail it.
pub(crate) fn fails_for_good(failures: i64, identities: i64, config: &StoreConfig) -> bool {
    let quorum = i64::from(config.fail_quorum.clamp(1, config.max_attempts.max(1)));
    failures >= i64::from(config.max_attempts) && identities >= quorum
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn leased_to(worker: &str) -> LeaseFields {
        LeaseFields {
            state: JobState::Leased,
            token: Some("t".into()),
            owner: Some(worker.into()),
            expires_at: Some(1_000),
        }
    }

    fn job(redundancy: u32) -> JobView {
        JobView {
            run: 1,
            class: 0,
            key: "k".into(),
            counter_version: "v".into(),
            lease: leased_to("w1"),
            attempt: 1,
            redundancy,
            cancelled: false,
            round: 0,
            cost: 1,
            votes: Vec::new(),
            conflict: false,
        }
    }

    fn report(worker: &str, count: u128) -> Report<'_> {
        Report { worker, token: "t", key: "k", counter_version: "v", count, checked_count: None }
    }

    #[test]
    fn only_the_current_holder_before_expiry_is_heard() {
        let job = job(1);
        assert_eq!(decide(&job, &report("w1", 5), 1_000), Verdict::Accept { outvoted: vec![] });
        assert_eq!(decide(&job, &report("w2", 5), 1_000), Verdict::Stale);
        assert_eq!(decide(&job, &Report { token: "x", ..report("w1", 5) }, 1_000), Verdict::Stale);
        assert_eq!(decide(&job, &report("w1", 5), 1_001), Verdict::Stale);
        let lease = LeaseFields { state: JobState::Done, token: None, owner: None, ..job.lease.clone() };
        let done = JobView { lease, votes: vec![("w1".into(), 5)], ..job };
        assert_eq!(decide(&done, &report("w1", 5), 0), Verdict::Repeat);
        assert_eq!(decide(&done, &report("w2", 6), 0), Verdict::Stale);
        assert!(matches!(decide(&done, &report("w1", 6), 0), Verdict::Reject { lease_is_current: false, .. }));
    }

    #[test]
    fn reports_must_name_the_job_and_pass_the_check() {
        let job = job(1);
        for wrong in [
            Report { key: "c", ..report("w1", 5) },
            Report { counter_version: "u", ..report("w1", 5) },
            Report { checked_count: Some(4), ..report("w1", 5) },
        ] {
            assert!(matches!(decide(&job, &wrong, 0), Verdict::Reject { lease_is_current: true, .. }), "{wrong:?}");
        }
    }

    #[test]
    fn a_quorum_of_distinct_identities_decides() {
        let mut job = job(2);
        assert_eq!(decide(&job, &report("w1", 5), 0), Verdict::Vote);
        job.votes.push(("w1".into(), 5));
        job.lease = leased_to("w2");
        assert_eq!(decide(&job, &report("w2", 6), 0), Verdict::Vote);
        job.votes.push(("w2".into(), 6));
        job.lease = leased_to("w3");
        assert_eq!(decide(&job, &report("w3", 5), 0), Verdict::Accept { outvoted: vec!["w2".into()] });
        assert_eq!(decide(&job, &report("w3", 7), 0), Verdict::NoQuorum { stored: 5 });
        job.lease = leased_to("w1");
        assert_eq!(decide(&job, &report("w1", 5), 0), Verdict::Repeat);
    }

    /// A report of `count` by `worker` for job `id`, with the job's key,
    /// counter version and token "t".
    fn completion(id: JobId, worker: &str, count: u128) -> Completion {
        Completion {
            job_id: id,
            token: "t".into(),
            worker: worker.into(),
            key: "k".into(),
            counter_version: "v".into(),
            count,
            elapsed: Duration::from_millis(3),
            checked_count: None,
        }
    }

    /// Jobs 1 and 2 of run 1, classes 0 and 1, costs 1 and 100, leased to w1.
    fn two_jobs(redundancy: u32) -> HashMap<JobId, JobView> {
        HashMap::from([(1, job(redundancy)), (2, JobView { class: 1, cost: 100, ..job(redundancy) })])
    }

    #[test]
    fn accepted_counts_add_to_their_class_run_and_identity_once() {
        let batch = [completion(1, "w1", 5), completion(2, "w1", 7), completion(1, "w1", 5), completion(3, "w1", 1)];
        let plan = plan_batch(two_jobs(1), &batch, 0);
        assert!(matches!(
            plan.outcomes.as_slice(),
            [
                Ok(CompleteOutcome::Recorded),
                Ok(CompleteOutcome::Recorded),
                Ok(CompleteOutcome::AlreadyDone),
                Err(StoreError::UnknownJob(3))
            ]
        ));
        let done = |count| JobChange { state: JobState::Done, count: Some(count), votes_added: 1 };
        assert_eq!(plan.jobs, BTreeMap::from([(1, done(5)), (2, done(7))]));
        assert_eq!(plan.results.len(), 2, "the repeat appends nothing");
        assert!(plan.results.iter().all(|r| r.outcome == ResultOutcome::Accepted && r.elapsed_ms == 3.0));
        assert_eq!(plan.classes, BTreeMap::from([((1, 0), (5u32.into(), 1)), ((1, 1), (7u32.into(), 1))]));
        assert_eq!(
            plan.runs,
            BTreeMap::from([(1, RunChange { done: 2, cost_done: 101, counted: 12u32.into(), ..RunChange::default() })])
        );
        let tally = WorkerTally { jobs: 2, completions: 12u32.into() };
        assert_eq!(plan.workers, BTreeMap::from([((1, "w1".to_string()), tally)]));
        assert!(plan.rejections.is_empty() && plan.conflicts.is_empty());
    }

    #[test]
    fn a_vote_sends_the_job_back_and_adds_to_no_sum() {
        let plan = plan_batch(two_jobs(2), &[completion(1, "w1", 5), completion(1, "w1", 5)], 0);
        assert!(matches!(plan.outcomes.as_slice(), [Ok(CompleteOutcome::Recorded), Ok(CompleteOutcome::AlreadyDone)]));
        assert_eq!(
            plan.jobs,
            BTreeMap::from([(1, JobChange { state: JobState::Pending, count: None, votes_added: 1 })])
        );
        assert_eq!(plan.results.iter().map(|r| r.outcome).collect::<Vec<_>>(), [ResultOutcome::Vote]);
        assert!(plan.classes.is_empty() && plan.runs.is_empty() && plan.workers.is_empty());
    }

    /// Jobs 1 and 2 at redundancy 2; job 1 has votes 5 (w1) and 6 (w2) and
    /// is leased to w3, the third and last vote it takes.
    fn split_vote() -> HashMap<JobId, JobView> {
        let mut jobs = two_jobs(2);
        let job = jobs.get_mut(&1).unwrap();
        job.votes = vec![("w1".into(), 5), ("w2".into(), 6)];
        job.lease = leased_to("w3");
        jobs
    }

    #[test]
    fn the_quorum_accepts_and_the_outvoted_are_rejected() {
        let plan = plan_batch(split_vote(), &[completion(1, "w3", 5)], 0);
        assert!(matches!(plan.outcomes.as_slice(), [Ok(CompleteOutcome::Recorded)]));
        let outvoted = Rejection {
            job: 1,
            run: 1,
            attempt: 1,
            worker: "w2".into(),
            count: 6,
            reason: "reported 6; a quorum of identities agreed on 5".into(),
        };
        assert_eq!(plan.rejections, [outvoted]);
        assert_eq!(plan.classes, BTreeMap::from([((1, 0), (5u32.into(), 1))]));
    }

    #[test]
    fn votes_past_any_quorum_fail_the_job_with_a_conflict() {
        let plan = plan_batch(split_vote(), &[completion(1, "w3", 7)], 0);
        assert!(matches!(plan.outcomes.as_slice(), [Ok(CompleteOutcome::Conflict { stored: 5 })]));
        assert_eq!(
            plan.jobs,
            BTreeMap::from([(1, JobChange { state: JobState::Failed, count: None, votes_added: 1 })])
        );
        let votes = vec![("w1".to_string(), 5), ("w2".to_string(), 6), ("w3".to_string(), 7)];
        assert_eq!(plan.conflicts, BTreeMap::from([(1, votes)]));
        let run = RunChange { conflicts_opened: 1, failed_added: 1, ..RunChange::default() };
        assert_eq!(plan.runs, BTreeMap::from([(1, run)]));
        assert_eq!(plan.results.iter().map(|r| r.outcome).collect::<Vec<_>>(), [ResultOutcome::Conflict]);
        assert!(plan.classes.is_empty() && plan.workers.is_empty() && plan.rejections.is_empty());
    }

    /// Issue 44: two identities that disagree make a conflict at once, seen
    /// in status and SQL, though the job still waits for a third identity.
    #[test]
    fn disagreeing_identities_open_a_conflict_at_once_and_a_quorum_closes_it() {
        let mut jobs = two_jobs(2);
        jobs.get_mut(&1).unwrap().votes = vec![("w2".into(), 6)];
        let plan = plan_batch(jobs.clone(), &[completion(1, "w1", 5)], 0);
        assert!(matches!(plan.outcomes.as_slice(), [Ok(CompleteOutcome::Recorded)]));
        let votes = vec![("w2".to_string(), 6), ("w1".to_string(), 5)];
        assert_eq!(plan.disputed, BTreeMap::from([(1, votes)]));
        assert_eq!(plan.jobs[&1].state, JobState::Pending, "it waits for another identity");
        let run = RunChange { conflicts_opened: 1, ..RunChange::default() };
        assert_eq!(plan.runs, BTreeMap::from([(1, run)]));
        assert!(plan.rejections.is_empty(), "nobody is wrong yet");

        // Flagged already: a third identity's quorum closes it and rejects the liar.
        let job = jobs.get_mut(&1).unwrap();
        job.votes.push(("w1".into(), 5));
        (job.conflict, job.lease) = (true, leased_to("w3"));
        let plan = plan_batch(jobs.clone(), &[completion(1, "w3", 5)], 0);
        assert_eq!(plan.jobs[&1].state, JobState::Done);
        assert_eq!(plan.runs[&1].conflicts_opened, -1);
        assert_eq!(plan.rejections.iter().map(|r| r.worker.as_str()).collect::<Vec<_>>(), ["w2"]);
        // Or a third count: it fails, a conflict opened once, not twice.
        let plan = plan_batch(jobs, &[completion(1, "w3", 7)], 0);
        assert!(plan.disputed.is_empty());
        assert_eq!(plan.conflicts.len(), 1);
        assert_eq!((plan.runs[&1].conflicts_opened, plan.runs[&1].failed_added), (0, 1));
    }

    /// Issue 44: a conflict no quorum settles is decided by the
    /// coordinator's own count: the job is done with it, every vote of
    /// another count is rejected, the conflict (and a failure) closes.
    #[test]
    fn the_coordinators_own_count_decides_a_conflict() {
        let mut jobs = two_jobs(2);
        let job = jobs.get_mut(&1).unwrap();
        job.votes = vec![("w1".into(), 5), ("w2".into(), 6)];
        job.conflict = true;
        job.lease = LeaseFields { state: JobState::Pending, token: None, owner: None, expires_at: None };
        let plan = plan_decision(jobs.clone(), 1, 5, 0);
        assert!(matches!(plan.outcomes.as_slice(), [Ok(CompleteOutcome::Recorded)]), "{:?}", plan.outcomes);
        assert_eq!(plan.jobs[&1], JobChange { state: JobState::Done, count: Some(5), votes_added: 1 });
        assert_eq!(plan.results.len(), 1);
        assert_eq!((plan.results[0].worker.as_str(), plan.results[0].outcome), (ARBITER, ResultOutcome::Accepted));
        assert_eq!(plan.rejections.iter().map(|r| (r.worker.as_str(), r.count)).collect::<Vec<_>>(), [("w2", 6)]);
        assert_eq!(plan.classes, BTreeMap::from([((1, 0), (5u32.into(), 1))]));
        let run = &plan.runs[&1];
        assert_eq!((run.done, run.conflicts_opened, run.failed_added), (1, -1, 0));

        // A failed conflict (no quorum possible) closes its failure too.
        let job = jobs.get_mut(&1).unwrap();
        job.lease.state = JobState::Failed;
        let plan = plan_decision(jobs.clone(), 1, 7, 0);
        assert_eq!(plan.rejections.len(), 2, "both votes differ from the coordinator's count");
        assert_eq!((plan.runs[&1].conflicts_opened, plan.runs[&1].failed_added), (-1, -1));

        // Nothing to decide: no conflict, or an identity counting it now.
        let stale = |plan: BatchPlan| matches!(plan.outcomes.as_slice(), [Err(StoreError::StaleToken { .. })]);
        assert!(stale(plan_decision(two_jobs(2), 1, 5, 0)), "not in conflict");
        let job = jobs.get_mut(&1).unwrap();
        job.lease = leased_to("w3");
        assert!(stale(plan_decision(jobs.clone(), 1, 5, 999)), "w3 holds a live lease");
        let plan = plan_decision(jobs, 1, 5, 1_001);
        assert!(matches!(plan.outcomes.as_slice(), [Ok(_)]), "w3's lease expired");
    }

    #[test]
    fn a_wrong_report_is_recorded_against_its_identity_and_frees_the_job() {
        let wrong = Completion { checked_count: Some(4), ..completion(1, "w1", 5) };
        // The job is free again: the second report is stale.
        let plan = plan_batch(two_jobs(1), &[wrong, completion(1, "w1", 4)], 0);
        assert!(matches!(
            plan.outcomes.as_slice(),
            [Err(StoreError::Rejected { job: 1, .. }), Err(StoreError::StaleToken { job: 1 })]
        ));
        assert_eq!(
            plan.jobs,
            BTreeMap::from([(1, JobChange { state: JobState::Pending, count: None, votes_added: 0 })])
        );
        assert_eq!(plan.rejections.len(), 1);
        assert_eq!((plan.rejections[0].worker.as_str(), plan.rejections[0].count), ("w1", 5));
        assert!(plan.results.is_empty() && plan.classes.is_empty() && plan.runs.is_empty());
    }

    #[test]
    fn a_cancelled_run_changes_nothing() {
        let jobs = HashMap::from([(1, JobView { cancelled: true, ..job(1) })]);
        let plan = plan_batch(jobs, &[completion(1, "w1", 5)], 0);
        assert!(matches!(plan.outcomes.as_slice(), [Err(StoreError::RunCancelled(1))]));
        assert!(plan.jobs.is_empty() && plan.results.is_empty() && plan.rejections.is_empty());
    }

    #[test]
    fn identities_are_quarantined_at_their_limits_and_jobs_fail_by_several() {
        let config = StoreConfig { quarantine_after: 3, quarantine_after_failures: 50, ..StoreConfig::default() };
        assert_eq!(quarantine_reason(Offence::Rejected, 2, &config), None);
        assert_eq!(quarantine_reason(Offence::Rejected, 3, &config).as_deref(), Some("3 results rejected"));
        assert_eq!(quarantine_reason(Offence::Failed, 49, &config), None);
        assert_eq!(quarantine_reason(Offence::Failed, 50, &config).as_deref(), Some("50 failures reported"));
        let config = StoreConfig { max_attempts: 5, fail_quorum: 2, ..StoreConfig::default() };
        assert!(!fails_for_good(4, 2, &config));
        assert!(!fails_for_good(9, 1, &config), "one identity alone never fails a job");
        assert!(fails_for_good(5, 2, &config));
        // A quorum larger than the attempts asks for no more identities than attempts.
        let config = StoreConfig { max_attempts: 1, fail_quorum: 3, ..StoreConfig::default() };
        assert!(fails_for_good(1, 1, &config));
    }
}
