//! The state machine of completions: what a report does to its job, as one
//! pure function, [`decide`], unit-tested state by state. The store applies
//! its verdicts (`completion.rs`).

use super::JobState;
use crate::RunId;

/// A job as the decision sees it: the row, locked, plus the votes of the
/// current round.
#[derive(Debug, Clone)]
pub(crate) struct JobView {
    pub run: RunId,
    pub class: i64,
    pub key: String,
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
    pub votes: Vec<(String, u128)>,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn job(redundancy: u32) -> JobView {
        JobView {
            run: 1,
            class: 0,
            key: "k".into(),
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
        let done = JobView { state: JobState::Done, token: None, owner: None, votes: vec![("w1".into(), 5)], ..job };
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
