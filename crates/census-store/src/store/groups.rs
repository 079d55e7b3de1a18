//! Reports that arrive while the store's report transactions are busy wait
//! here and are then written together, in one transaction (group commit).
//!
//! Why: every report of a run updates the run's row and holds its lock to
//! the commit, so a run's reports are written one transaction at a time
//! whatever the pool. At 10,000 workers reporting batches of a few jobs,
//! the run took about 140 reports a second, 7 ms each, mostly waiting for
//! that lock (BENCHMARKS.md, "Reports written together"). A group of the
//! reports that waited takes the lock once.
//!
//! A group is the callers' reports in the order they arrived, planned as
//! one batch: each report sees the ones before it, as it would in
//! transactions one after the other, and each caller gets its own answers.
//! A group whose transaction fails for a reason that may be one caller's
//! (not the database's being unreachable or busy, or a lost race) is
//! written again caller by caller, so a caller gets the error its own
//! reports cause, as if it had been alone; otherwise every caller is told
//! at once to try again.

use std::sync::Mutex;

use tokio::sync::{Semaphore, oneshot};

use crate::{CompleteOutcome, Completion, StoreError};

/// What a caller of `complete_many` is answered.
pub(super) type Answer = Result<Vec<Result<CompleteOutcome, StoreError>>, StoreError>;

/// The most reports one group carries. A caller's reports are never split,
/// so a caller with more (up to `MAX_BATCH`) goes alone; this only bounds
/// how long one transaction holds the run's row.
pub(super) const GROUP_REPORTS: usize = 2_048;

/// How many report transactions run at once. More than one, so that one
/// group's reads and writes overlap with another's wait for the run's row;
/// few, so that reports wait in groups instead of each in its own
/// transaction.
pub(super) const REPORT_TRANSACTIONS: usize = 4;

/// One caller's reports, waiting for a transaction.
pub(super) struct Waiting {
    pub completions: Vec<Completion>,
    pub reply: oneshot::Sender<Answer>,
}

/// The reports waiting, and the permits of the transactions that write them.
pub(super) struct ReportGroups {
    waiting: Mutex<Vec<Waiting>>,
    pub transactions: Semaphore,
}

impl Default for ReportGroups {
    fn default() -> ReportGroups {
        ReportGroups::new(REPORT_TRANSACTIONS)
    }
}

impl ReportGroups {
    pub fn new(transactions: usize) -> ReportGroups {
        ReportGroups { waiting: Mutex::new(Vec::new()), transactions: Semaphore::new(transactions) }
    }

    /// Queues a caller's reports; the receiver gets its answer.
    pub fn wait(&self, completions: Vec<Completion>) -> oneshot::Receiver<Answer> {
        let (reply, answer) = oneshot::channel();
        self.waiting.lock().expect("never poisoned").push(Waiting { completions, reply });
        answer
    }

    /// The next group: the callers that waited longest, whole, up to
    /// [`GROUP_REPORTS`] reports (at least one caller). Empty when another
    /// transaction took them all.
    pub fn take(&self) -> Vec<Waiting> {
        let mut waiting = self.waiting.lock().expect("never poisoned");
        let mut reports = 0;
        let mut callers = 0;
        for next in waiting.iter() {
            if callers > 0 && reports + next.completions.len() > GROUP_REPORTS {
                break;
            }
            reports += next.completions.len();
            callers += 1;
        }
        waiting.drain(..callers).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::JobId;

    fn reports(first: JobId, n: usize) -> Vec<Completion> {
        (0..n as JobId)
            .map(|i| Completion {
                job_id: first + i,
                token: format!("t{}", first + i),
                worker: "w".into(),
                key: String::new(),
                counter_version: "v".into(),
                count: 1,
                elapsed: std::time::Duration::ZERO,
                checked_count: None,
            })
            .collect()
    }

    #[test]
    fn a_group_takes_callers_in_order_and_whole_up_to_its_size() {
        let groups = ReportGroups::new(1);
        let _a = groups.wait(reports(0, 1_000));
        let _b = groups.wait(reports(1_000, 1_000));
        let _c = groups.wait(reports(2_000, 100));
        let _d = groups.wait(reports(3_000, 5_000));
        let first: Vec<usize> = groups.take().iter().map(|w| w.completions.len()).collect();
        assert_eq!(first, [1_000, 1_000]);
        let second: Vec<JobId> = groups.take().iter().map(|w| w.completions[0].job_id).collect();
        assert_eq!(second, [2_000], "the next caller would pass the group's size");
        let third: Vec<usize> = groups.take().iter().map(|w| w.completions.len()).collect();
        assert_eq!(third, [5_000], "a caller larger than a group goes alone, whole");
        assert!(groups.take().is_empty());
    }
}
