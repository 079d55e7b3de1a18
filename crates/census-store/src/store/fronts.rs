//! Where a run's fresh pending jobs begin: a hint that lets a lease start
//! its scan of the pending jobs there instead of at the run's first job.
//!
//! Why: a job that leaves the pending state leaves its entry behind in the
//! (run, state, id) index until the table is vacuumed (an update that
//! changes an indexed column is never HOT in Postgres), and jobs are leased
//! in id order, so every entry a run's leases left since the last vacuum
//! lies in front of its first pending job. A scan from the start visits
//! them all, a heap page for many: 14,000 to 20,000 buffers a lease call
//! was measured mid-run, and autovacuum (by default a table at most once a
//! minute, once a fifth of it changed) cannot keep up with a queue that
//! leases thousands of jobs a second (BENCHMARKS.md, "Dead entries in front
//! of the queue"). SQLite updates in place and has no such entries; the
//! hint costs it nothing.
//!
//! The hint never decides what is leased, only where the scan starts:
//! - a scan from the front that finds fewer jobs than wanted goes on from
//!   the run's first pending job (so no job is ever out of reach, and a run
//!   ends as before);
//! - every [`FULL_SCAN_EVERY`] a lease scans from the first pending job
//!   anyway, which finds jobs put back below the front by another
//!   coordinator, by a transaction that rolled back, or skipped by one
//!   identity because it already voted on them;
//! - a job this store puts back (a vote that needs another identity, a
//!   report rejected) moves the front back to it, and a rarer reopening (a
//!   failure, a recount, a requeue, a quarantine) forgets every front.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::{JobId, RunId};

/// How often a lease scans a run's pending jobs from the first anyway.
pub(super) const FULL_SCAN_EVERY: Duration = Duration::from_secs(2);

/// The fronts of the runs' queues (of each stage, in a run of stages).
#[derive(Default)]
pub(super) struct QueueFronts {
    fronts: Mutex<HashMap<(RunId, Option<u32>), Front>>,
}

#[derive(Debug, Clone, Copy)]
struct Front {
    /// No fresh pending job is expected below this id.
    from: JobId,
    /// When a lease last scanned from the first pending job.
    full_scan_at: Instant,
}

impl QueueFronts {
    /// Where a lease of `run`'s `stage` at `now` starts its scan: `None`
    /// for the first pending job (no front known, or a full scan is due).
    pub(super) fn start(&self, run: RunId, stage: Option<u32>, now: Instant) -> Option<JobId> {
        let fronts = self.fronts.lock().expect("never poisoned");
        let front = fronts.get(&(run, stage))?;
        (now.saturating_duration_since(front.full_scan_at) < FULL_SCAN_EVERY).then_some(front.from)
    }

    /// A lease scanned from `from` (`None`: from the first pending job) at
    /// `now` and leased the pending jobs `leased`.
    pub(super) fn scanned(
        &self,
        run: RunId,
        stage: Option<u32>,
        from: Option<JobId>,
        leased: impl IntoIterator<Item = JobId>,
        now: Instant,
    ) {
        let mut fronts = self.fronts.lock().expect("never poisoned");
        let past = leased.into_iter().max().map_or(0, |last| last + 1);
        match (fronts.get_mut(&(run, stage)), from) {
            (Some(front), Some(_)) => front.from = front.from.max(past),
            (Some(front), None) => *front = Front { from: front.from.max(past), full_scan_at: now },
            (None, _) => {
                fronts.insert((run, stage), Front { from: past, full_scan_at: now });
            }
        }
    }

    /// `job` of `run` is pending again: scans start no later than it.
    pub(super) fn put_back(&self, run: RunId, job: JobId) {
        let mut fronts = self.fronts.lock().expect("never poisoned");
        for ((of, _), front) in fronts.iter_mut() {
            if *of == run {
                front.from = front.from.min(job);
            }
        }
    }

    /// Jobs were reopened in ways not followed one by one: every lease
    /// scans from the first pending job until the fronts are found again.
    pub(super) fn forget_all(&self) {
        self.fronts.lock().expect("never poisoned").clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_front_is_used_until_a_full_scan_is_due() {
        let fronts = QueueFronts::default();
        let t0 = Instant::now();
        assert_eq!(fronts.start(1, None, t0), None, "no front yet: from the first pending job");
        fronts.scanned(1, None, None, [4, 5, 6], t0);
        assert_eq!(fronts.start(1, None, t0), Some(7));
        fronts.scanned(1, None, Some(7), [7, 9], t0 + Duration::from_millis(10));
        assert_eq!(fronts.start(1, None, t0 + Duration::from_millis(20)), Some(10));
        assert_eq!(fronts.start(1, None, t0 + FULL_SCAN_EVERY), None, "a full scan is due");
        assert_eq!(fronts.start(2, None, t0), None, "each run has its own front");
        assert_eq!(fronts.start(1, Some(0), t0), None, "and each stage of a run of stages");
    }

    #[test]
    fn a_full_scan_never_moves_the_front_back_and_restarts_the_clock() {
        let fronts = QueueFronts::default();
        let t0 = Instant::now();
        fronts.scanned(1, None, None, [50], t0);
        let later = t0 + FULL_SCAN_EVERY;
        fronts.scanned(1, None, None, [3], later);
        assert_eq!(fronts.start(1, None, later), Some(51));
        fronts.scanned(1, None, Some(51), [], later);
        assert_eq!(fronts.start(1, None, later), Some(51), "nothing leased: the front stays");
    }

    #[test]
    fn a_job_put_back_moves_every_front_of_its_run_and_forgetting_clears_all() {
        let fronts = QueueFronts::default();
        let t0 = Instant::now();
        fronts.scanned(1, Some(0), None, [10], t0);
        fronts.scanned(1, Some(1), None, [20], t0);
        fronts.scanned(2, None, None, [30], t0);
        fronts.put_back(1, 5);
        assert_eq!(fronts.start(1, Some(0), t0), Some(5));
        assert_eq!(fronts.start(1, Some(1), t0), Some(5));
        assert_eq!(fronts.start(2, None, t0), Some(31));
        fronts.forget_all();
        assert_eq!(fronts.start(2, None, t0), None);
    }
}
