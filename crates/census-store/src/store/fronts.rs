//! Where a run's fresh pending jobs begin: a hint that lets a lease start
//! its scan of the pending jobs there instead of at the run's first job;
//! and when a lease looks for a run's expired leases
//! ([`QueueFronts::expired_look`]).
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
//! The hint never decides what is leased, only where the scan starts, and
//! no job stays out of reach for long:
//! - every [`FULL_SCAN_EVERY`] a lease scans from the first pending job
//!   anyway, which finds jobs put back below the front by another
//!   coordinator, by a transaction that rolled back, or skipped by one
//!   identity because it already voted on them. A scan from the front
//!   that comes up short does not go on from the first pending job: near a
//!   run's end every lease comes up short, and that scan walked all the
//!   dead entries on every call (BENCHMARKS.md, "A run's end");
//! - a job this store puts back (a vote that needs another identity, a
//!   report rejected, a failure) is kept in view: scans start no later than it until
//!   this store leases it again (an identity that voted on it skips it, so
//!   the front may pass it) or [`PUT_BACK_KEPT`] has passed (another
//!   coordinator leased it, perhaps), and a rarer reopening (a recount, a
//!   requeue, a quarantine) forgets every front.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::{JobId, RunId};

/// How often a lease scans a run's pending jobs from the first anyway.
pub(super) const FULL_SCAN_EVERY: Duration = Duration::from_secs(2);
/// How long a job put back keeps the scans of its run from passing it.
pub(super) const PUT_BACK_KEPT: Duration = Duration::from_secs(30);
/// How often a lease looks for a run's expired leases anyway.
pub(super) const EXPIRED_LOOK_EVERY: Duration = Duration::from_secs(1);

/// The fronts of the runs' queues (of each stage, in a run of stages), the
/// jobs put back behind them, and the runs' looks for expired leases.
#[derive(Default)]
pub(super) struct QueueFronts {
    fronts: Mutex<Fronts>,
}

#[derive(Default)]
struct Fronts {
    fronts: HashMap<(RunId, Option<u32>), Front>,
    /// Each run's jobs put back by this store, not leased again since, and
    /// when they were put back.
    put_back: HashMap<RunId, BTreeMap<JobId, Instant>>,
    /// Each run's last look for expired leases.
    expired: HashMap<RunId, ExpiredLook>,
}

#[derive(Debug, Clone, Copy)]
struct Front {
    /// No fresh pending job is expected below this id.
    from: JobId,
    /// When a lease last scanned from the first pending job.
    full_scan_at: Instant,
}

/// When a lease last looked for a run's expired leases, the earliest
/// expiry (Unix ms) of the leases this store granted since, and the
/// identities whose looks left expired leases they could not take.
#[derive(Debug, Clone, Default)]
struct ExpiredLook {
    at: Option<Instant>,
    next_expiry: Option<i64>,
    left_by: HashSet<String>,
}

impl Fronts {
    fn start(&mut self, run: RunId, stage: Option<u32>, now: Instant) -> Option<JobId> {
        // Only the lowest job put back matters: drop it while it is out of
        // view (amortized, not a pass over every job put back per lease).
        let oldest_put_back = self.put_back.get_mut(&run).and_then(|jobs| {
            while let Some((_, at)) = jobs.first_key_value()
                && now.saturating_duration_since(*at) >= PUT_BACK_KEPT
            {
                jobs.pop_first();
            }
            jobs.keys().next().copied()
        });
        let front = self.fronts.get(&(run, stage))?;
        let from = oldest_put_back.map_or(front.from, |job| job.min(front.from));
        (now.saturating_duration_since(front.full_scan_at) < FULL_SCAN_EVERY).then_some(from)
    }
}

impl QueueFronts {
    /// Where a lease of `run`'s `stage` at `now` would start its scan:
    /// `None` for the first pending job (no front known, or a full scan is
    /// due).
    #[cfg(test)]
    fn start(&self, run: RunId, stage: Option<u32>, now: Instant) -> Option<JobId> {
        self.fronts.lock().expect("never poisoned").start(run, stage, now)
    }

    /// Where a lease of `run`'s `stage` that wants `wanted` jobs at `now`
    /// starts its scan (`None`: from the first pending job); and it claims
    /// them: the next lease starts `wanted` jobs further on (concurrent
    /// leases from one front each scanned past every row the others had
    /// locked: thousands a call with a few dozen in flight), or, if this
    /// one scans from the first pending job, does not do so too until the
    /// next full scan is due. A scan that starts at a job put back claims
    /// nothing. Jobs a claim left (a lease that rolled back) are found by
    /// that full scan.
    pub(super) fn claim(&self, run: RunId, stage: Option<u32>, wanted: i64, now: Instant) -> Option<JobId> {
        let mut fronts = self.fronts.lock().expect("never poisoned");
        let from = fronts.start(run, stage, now);
        if let Some(front) = fronts.fronts.get_mut(&(run, stage)) {
            match from {
                // A scan from a job put back takes that job first: claiming
                // jobs past the front would leave them behind it.
                Some(from) if from < front.from => {}
                Some(_) => front.from = front.from.saturating_add(wanted.max(0)),
                None => front.full_scan_at = now,
            }
        }
        from
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
        let leased: Vec<JobId> = leased.into_iter().collect();
        if let Some(put_back) = fronts.put_back.get_mut(&run) {
            for job in &leased {
                put_back.remove(job);
            }
        }
        let past = leased.iter().max().map_or(0, |last| last + 1);
        match (fronts.fronts.get_mut(&(run, stage)), from) {
            (Some(front), Some(_)) => front.from = front.from.max(past),
            (Some(front), None) => *front = Front { from: front.from.max(past), full_scan_at: now },
            (None, _) => {
                fronts.fronts.insert((run, stage), Front { from: past, full_scan_at: now });
            }
        }
    }

    /// `job` of `run` was put back in the queue at `now`: scans start no
    /// later than it until it is leased again.
    pub(super) fn put_back(&self, run: RunId, job: JobId, now: Instant) {
        let mut fronts = self.fronts.lock().expect("never poisoned");
        fronts.put_back.entry(run).or_default().insert(job, now);
    }

    /// Jobs were reopened in ways not followed one by one: every lease
    /// scans from the first pending job until the fronts are found again.
    pub(super) fn forget_all(&self) {
        let mut fronts = self.fronts.lock().expect("never poisoned");
        fronts.fronts.clear();
        fronts.put_back.clear();
        fronts.expired.clear();
    }

    /// Whether a lease of `run` at `now` (`now_ms` in Unix ms) looks for
    /// its expired leases; if so it takes the look, and the run's other
    /// leases do not look until the next is due: after
    /// [`EXPIRED_LOOK_EVERY`], or at once when a lease this store granted
    /// since may have expired.
    ///
    /// Why not on every lease: a job that leaves its lease leaves an entry
    /// in the expiry index until vacuum, and once its old expiry has passed
    /// that entry lies in the range the look reads: 13,000 buffers a look
    /// at 10^7 jobs (BENCHMARKS.md, "A run's end"). A lease that expired
    /// under another coordinator waits at most a second more.
    ///
    /// Expired leases that an earlier look left because its identity could
    /// not take them ([`QueueFronts::looked_short`]) are looked for at once
    /// by the next lease of any other identity.
    pub(super) fn expired_look(&self, run: RunId, worker: &str, now: Instant, now_ms: i64) -> bool {
        let mut fronts = self.fronts.lock().expect("never poisoned");
        let look = fronts.expired.entry(run).or_default();
        let due = look.at.is_none_or(|at| now.saturating_duration_since(at) >= EXPIRED_LOOK_EVERY)
            || look.next_expiry.is_some_and(|expiry| expiry <= now_ms)
            || !look.left_by.is_empty() && !look.left_by.contains(worker);
        if due {
            look.at = Some(now);
            look.next_expiry = None;
        }
        due
    }

    /// A look for `run`'s expired leases found as many as it wanted: there
    /// may be more (a fleet that went away), so the next lease looks too.
    pub(super) fn more_expired(&self, run: RunId) {
        self.fronts.lock().expect("never poisoned").expired.remove(&run);
    }

    /// A look of `worker`'s for `run`'s expired leases found fewer than it
    /// wanted, and `left` says whether expired leases are still there: if
    /// so, they are not open to `worker` (or locked by another lease), and
    /// the next lease of another identity looks at once; if not, nobody
    /// looks before the next look is due.
    pub(super) fn looked_short(&self, run: RunId, worker: &str, left: bool) {
        let mut fronts = self.fronts.lock().expect("never poisoned");
        let look = fronts.expired.entry(run).or_default();
        if left {
            look.left_by.insert(worker.to_string());
        } else {
            look.left_by.clear();
        }
    }

    /// This store granted leases of `run` that expire at `expiry` (Unix ms)
    /// unless heartbeated.
    pub(super) fn granted(&self, run: RunId, expiry: i64) {
        let mut fronts = self.fronts.lock().expect("never poisoned");
        if let Some(look) = fronts.expired.get_mut(&run) {
            look.next_expiry = Some(look.next_expiry.map_or(expiry, |next| next.min(expiry)));
        }
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
    fn a_claim_moves_the_front_past_the_jobs_wanted_and_takes_a_full_scan_due() {
        let fronts = QueueFronts::default();
        let t0 = Instant::now();
        assert_eq!(fronts.claim(1, None, 10, t0), None, "no front yet");
        fronts.scanned(1, None, None, [1, 2], t0);
        assert_eq!(fronts.claim(1, None, 10, t0), Some(3));
        assert_eq!(fronts.claim(1, None, 10, t0), Some(13), "the next lease starts past the first one's claim");
        fronts.scanned(1, None, Some(3), 3..=12, t0);
        assert_eq!(fronts.start(1, None, t0), Some(23), "a lease within its claim leaves the front");
        fronts.scanned(1, None, Some(13), 13..=30, t0);
        assert_eq!(fronts.start(1, None, t0), Some(31), "one that went past it moves it");
        let due = t0 + FULL_SCAN_EVERY;
        assert_eq!(fronts.claim(1, None, 10, due), None, "a full scan is due");
        assert_eq!(fronts.claim(1, None, 10, due), Some(31), "and only one lease makes it");
        fronts.put_back(1, 20, due);
        assert_eq!(fronts.claim(1, None, 10, due), Some(20), "a job put back first");
        assert_eq!(fronts.start(1, None, due), Some(20), "and no claim past the front: the job may be taken alone");
        fronts.scanned(1, None, Some(20), [20], due);
        assert_eq!(fronts.claim(1, None, 10, due), Some(41), "back to the front (31, claimed to 41 above)");
    }

    #[test]
    fn expired_leases_are_looked_for_once_a_second_or_when_a_lease_granted_may_have_expired() {
        let fronts = QueueFronts::default();
        let t0 = Instant::now();
        assert!(fronts.expired_look(1, "a", t0, 1_000), "never looked");
        assert!(!fronts.expired_look(1, "b", t0, 1_000), "taken by the first lease");
        assert!(fronts.expired_look(2, "b", t0, 1_000), "each run has its own");
        fronts.granted(1, 1_500);
        fronts.granted(1, 1_200);
        assert!(!fronts.expired_look(1, "a", t0, 1_199));
        assert!(fronts.expired_look(1, "a", t0, 1_200), "a lease granted here may have expired");
        assert!(!fronts.expired_look(1, "a", t0, 1_600), "looked since: 1,500 is found by the next look anyway");
        assert!(fronts.expired_look(1, "a", t0 + EXPIRED_LOOK_EVERY, 1_600));
        fronts.more_expired(1);
        assert!(fronts.expired_look(1, "a", t0 + EXPIRED_LOOK_EVERY, 1_600), "a look that found all it wanted");
        fronts.forget_all();
        assert!(fronts.expired_look(1, "a", t0 + EXPIRED_LOOK_EVERY, 1_600));
    }

    #[test]
    fn expired_leases_a_look_could_not_take_are_looked_for_by_the_next_other_identity() {
        let fronts = QueueFronts::default();
        let t0 = Instant::now();
        assert!(fronts.expired_look(1, "a", t0, 1_000));
        fronts.looked_short(1, "a", true);
        assert!(!fronts.expired_look(1, "a", t0, 1_000), "a cannot take them: it waits for the next look");
        assert!(fronts.expired_look(1, "b", t0, 1_000), "another identity looks at once");
        fronts.looked_short(1, "b", true);
        assert!(!fronts.expired_look(1, "b", t0, 1_000));
        assert!(fronts.expired_look(1, "c", t0, 1_000), "and the next, while none could take them");
        fronts.looked_short(1, "c", false);
        assert!(!fronts.expired_look(1, "d", t0, 1_000), "none left: the next look is due in a second");
        assert!(fronts.expired_look(1, "d", t0 + EXPIRED_LOOK_EVERY, 1_000));
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
    fn scans_start_at_a_job_put_back_until_it_is_leased_again() {
        let fronts = QueueFronts::default();
        let t0 = Instant::now();
        fronts.scanned(1, Some(0), None, [10], t0);
        fronts.scanned(1, Some(1), None, [20], t0);
        fronts.scanned(2, None, None, [30], t0);
        fronts.put_back(1, 5, t0);
        fronts.put_back(1, 7, t0);
        assert_eq!(fronts.start(1, Some(0), t0), Some(5), "every stage of the run");
        assert_eq!(fronts.start(1, Some(1), t0), Some(5));
        assert_eq!(fronts.start(2, None, t0), Some(31), "not other runs");
        // An identity that voted on 5 and 7 skips them: the front passes
        // them, the scans still start at 5.
        fronts.scanned(1, Some(0), Some(5), [11, 12], t0);
        assert_eq!(fronts.start(1, Some(0), t0), Some(5));
        fronts.scanned(1, Some(0), Some(5), [5], t0);
        assert_eq!(fronts.start(1, Some(0), t0), Some(7), "5 leased again");
        assert_eq!(fronts.start(1, Some(0), t0 + PUT_BACK_KEPT.min(FULL_SCAN_EVERY) / 2), Some(7));
        fronts.scanned(1, Some(0), Some(7), [7], t0);
        assert_eq!(fronts.start(1, Some(0), t0), Some(13), "back to the front");
        fronts.forget_all();
        assert_eq!(fronts.start(2, None, t0), None);
    }

    #[test]
    fn a_job_put_back_is_out_of_view_after_a_while() {
        let fronts = QueueFronts::default();
        let t0 = Instant::now();
        fronts.put_back(1, 3, t0);
        fronts.put_back(1, 9, t0 + PUT_BACK_KEPT / 2);
        fronts.put_back(1, 6, t0 + PUT_BACK_KEPT);
        fronts.scanned(1, None, None, [40], t0 + PUT_BACK_KEPT);
        assert_eq!(fronts.start(1, None, t0 + PUT_BACK_KEPT), Some(6), "3 is out of view, 6 is not");
        let later = t0 + PUT_BACK_KEPT * 2;
        fronts.scanned(1, None, None, [41], later);
        assert_eq!(fronts.start(1, None, later), Some(42), "a full scan since would have found them");
    }
}
