//! Fair shares: no identity keeps a run's jobs from another that waits for
//! them, and reports of leases not held cost their sender, as a volunteer-
//! computing server bounds each host's work in progress by what it returns
//! (BOINC's limits on jobs in progress, PrimeNet's assignments sized to a
//! computer's measured throughput).
//!
//! Why: one worker token leased all 440 jobs of a run and heartbeated
//! them; when their lifetime ended it leased 439 of them again at once, and
//! an honest worker counted one job in 70 s (issue 44). At the defaults
//! (10,000 leases an identity, leases of up to an hour) one token could
//! hold any run of up to 10,000 open jobs for ever.
//!
//! **Waiting.** An identity waits for a run while, within [`WAITING_KEPT`],
//! it was told that work is left for it there (`has_work_for`) after a
//! lease that handed it none: jobs are open to it but held by others.
//! While *another* identity waits for a run, an identity
//! - is handed at most its allowance of the run's jobs, counting those it
//!   holds ([`Shares::allowance`]): the most of [`FLOOR`] (or the jobs its
//!   census counts together), twice the results it had recorded in the run
//!   in its last two lease lifetimes, and an equal share of the run's open
//!   jobs among the identities waiting and itself;
//! - if it holds more of the run's jobs than it may be expected to count
//!   (its allowance without the equal share: [`FLOOR`], or the jobs its
//!   census counts together, or twice its results recorded lately), has
//!   its leases of the run heartbeated only while they are younger than
//!   one lease TTL (the run's own lifetime where its census asks for
//!   longer): a hoarder's leases end within two TTLs instead of an hour.
//!   An identity that holds no more keeps its leases while it heartbeats
//!   them, however long its jobs take: two identities each counting a
//!   run's last jobs more slowly than one TTL (a quorum of two on a loaded
//!   machine) took them from each other for ever, and nothing was stored;
//! - does not take back its own leases of the run that expired within the
//!   last TTL: they go to another identity first, and come back to it only
//!   if nobody else takes them (a job all others voted on).
//!
//! Nobody waits while a run has pending jobs enough for everyone, so none
//! of this touches a run until its end, or a run smaller than its fleet.
//!
//! **Reports of leases not held.** A report of a lease its sender does not
//! hold (expired, retired, or of a job that does not exist) is refused
//! without being counted again, but each one still costs the store a read,
//! and such tokens are easy to make (any salt with an earlier attempt's
//! number): 2,000 reports of 10,000 each cost their sender nothing and the
//! honest worker 99 % of its results (issue 44). An honest identity reports
//! at most the leases it was granted as lost (and a repeat now and then):
//! so an identity that reported more of them in its last two lease
//! lifetimes than it may hold at once and twice what it was granted has its
//! reports refused unread, each refusal a rejection against it
//! ([`Shares::over_budget`]), toward its quarantine.
//!
//! All of this is kept in memory by each store: a bound, never a fact. With
//! several coordinators, each counts what it sees.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::RunId;

/// How long an identity told that work is left for it counts as waiting:
/// longer than a worker's slowest poll when idle (2 s).
pub(super) const WAITING_KEPT: Duration = Duration::from_secs(5);

/// The least allowance of a run's jobs: enough for a worker's first batch
/// on a few threads.
pub(super) const FLOOR: u64 = 32;

/// Counts of the current period and the one before it.
#[derive(Debug, Clone, Copy)]
struct Tally {
    since: Instant,
    current: u64,
    before: u64,
}

impl Tally {
    fn new(at: Instant) -> Tally {
        Tally { since: at, current: 0, before: 0 }
    }

    /// The tally at `at`, its periods moved on.
    fn at(self, at: Instant, period: Duration) -> Tally {
        let elapsed = at.saturating_duration_since(self.since);
        if elapsed < period {
            self
        } else if elapsed < period * 2 {
            Tally { since: self.since + period, current: 0, before: self.current }
        } else {
            Tally::new(at)
        }
    }

    fn total(self) -> u64 {
        self.current + self.before
    }
}

/// What the store keeps for fair shares.
pub(super) struct Shares {
    /// The length of a period of the tallies: the store's lease lifetime.
    period: Duration,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Who waits for each run, and when it was last told so.
    waiting: HashMap<RunId, HashMap<String, Instant>>,
    /// Results recorded, by run and identity.
    recorded: HashMap<(RunId, String), Tally>,
    /// Leases granted, by identity.
    granted: HashMap<String, Tally>,
    /// Reports of leases the identity did not hold.
    not_held: HashMap<String, Tally>,
    pruned: Option<Instant>,
}

/// An identity's reports of leases it did not hold, past what it may make.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct OverBudget {
    pub not_held: u64,
    pub granted: u64,
    pub budget: u64,
}

impl Shares {
    /// Shares whose tallies count periods of `period` (the lease lifetime).
    pub(super) fn new(period: Duration) -> Shares {
        Shares { period: period.max(Duration::from_millis(1)), state: Mutex::default() }
    }

    fn state(&self, at: Instant) -> std::sync::MutexGuard<'_, State> {
        let mut state = self.state.lock().expect("never poisoned");
        state.prune(at, self.period);
        state
    }

    /// `worker` was told at `at` that work is left for it in `run`.
    pub(super) fn waits(&self, run: RunId, worker: &str, at: Instant) {
        self.state(at).waiting.entry(run).or_default().insert(worker.to_string(), at);
    }

    /// How many identities other than `worker` wait for `run` at `at`.
    pub(super) fn others_waiting(&self, run: RunId, worker: &str, at: Instant) -> usize {
        let state = self.state(at);
        let Some(waiting) = state.waiting.get(&run) else { return 0 };
        waiting
            .iter()
            .filter(|(who, since)| *who != worker && at.saturating_duration_since(**since) < WAITING_KEPT)
            .count()
    }

    /// The runs for which an identity other than `worker` waits at `at`.
    pub(super) fn runs_others_wait_for(&self, worker: &str, at: Instant) -> Vec<RunId> {
        let state = self.state(at);
        let mut runs: Vec<RunId> = state
            .waiting
            .iter()
            .filter(|(_, waiting)| {
                waiting.iter().any(|(who, since)| who != worker && at.saturating_duration_since(*since) < WAITING_KEPT)
            })
            .map(|(run, _)| *run)
            .collect();
        runs.sort_unstable();
        runs
    }

    /// How many of `run`'s jobs `worker` may hold at `at` while `others`
    /// identities wait for it: the most of `floor`, twice its results
    /// recorded in the run lately, and an equal share of the run's `open`
    /// jobs (not done) among those waiting and itself.
    pub(super) fn allowance(&self, run: RunId, worker: &str, floor: u64, open: u64, others: usize, at: Instant) -> u64 {
        let recorded = self
            .state(at)
            .recorded
            .get(&(run, worker.to_string()))
            .map_or(0, |tally| tally.at(at, self.period).total());
        floor.max(recorded.saturating_mul(2)).max(open / (others as u64 + 1))
    }

    /// `worker` had `jobs` results recorded in `run`.
    pub(super) fn recorded(&self, run: RunId, worker: &str, jobs: u64, at: Instant) {
        let period = self.period;
        let mut state = self.state(at);
        let tally = state.recorded.entry((run, worker.to_string())).or_insert_with(|| Tally::new(at));
        *tally = tally.at(at, period);
        tally.current += jobs;
    }

    /// `worker` was granted `jobs` leases.
    pub(super) fn granted(&self, worker: &str, jobs: u64, at: Instant) {
        self.add(|state| &mut state.granted, worker, jobs, at);
    }

    /// `worker` reported `results` of leases it did not hold.
    pub(super) fn not_held(&self, worker: &str, results: u64, at: Instant) {
        self.add(|state| &mut state.not_held, worker, results, at);
    }

    fn add(&self, tallies: impl FnOnce(&mut State) -> &mut HashMap<String, Tally>, worker: &str, n: u64, at: Instant) {
        let period = self.period;
        let mut state = self.state(at);
        let tally = tallies(&mut state).entry(worker.to_string()).or_insert_with(|| Tally::new(at));
        *tally = tally.at(at, period);
        tally.current += n;
    }

    /// Whether `worker` reported more results of leases it did not hold in
    /// its last two lease lifetimes than `most_held` (what it may hold at
    /// once) and twice the leases it was granted.
    pub(super) fn over_budget(&self, worker: &str, most_held: u64, at: Instant) -> Option<OverBudget> {
        let state = self.state(at);
        let total = |tallies: &HashMap<String, Tally>| tallies.get(worker).map_or(0, |t| t.at(at, self.period).total());
        let (not_held, granted) = (total(&state.not_held), total(&state.granted));
        let budget = most_held.saturating_add(granted.saturating_mul(2));
        (not_held > budget).then_some(OverBudget { not_held, granted, budget })
    }
}

impl State {
    /// Forgets, once a period at most, tallies with nothing in their last
    /// two periods and identities no longer waiting: the maps hold only
    /// the identities at work.
    fn prune(&mut self, at: Instant, period: Duration) {
        let every = period.min(WAITING_KEPT);
        if self.pruned.is_some_and(|pruned| at.saturating_duration_since(pruned) < every) {
            return;
        }
        self.pruned = Some(at);
        let live = |tally: &mut Tally| {
            *tally = tally.at(at, period);
            tally.total() > 0
        };
        self.recorded.retain(|_, tally| live(tally));
        self.granted.retain(|_, tally| live(tally));
        self.not_held.retain(|_, tally| live(tally));
        for waiting in self.waiting.values_mut() {
            waiting.retain(|_, since| at.saturating_duration_since(*since) < WAITING_KEPT);
        }
        self.waiting.retain(|_, waiting| !waiting.is_empty());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PERIOD: Duration = Duration::from_secs(60);

    #[test]
    fn a_tally_counts_the_last_two_periods() {
        let t0 = Instant::now();
        let mut tally = Tally::new(t0);
        tally.current = 5;
        assert_eq!(tally.at(t0 + PERIOD / 2, PERIOD).total(), 5);
        let next = tally.at(t0 + PERIOD, PERIOD);
        assert_eq!((next.current, next.before, next.since), (0, 5, t0 + PERIOD));
        assert_eq!(tally.at(t0 + PERIOD * 2, PERIOD).total(), 0, "two periods on: nothing");
    }

    #[test]
    fn others_wait_for_a_while_after_they_were_told() {
        let shares = Shares::new(PERIOD);
        let t0 = Instant::now();
        shares.waits(1, "b", t0);
        assert_eq!(shares.others_waiting(1, "a", t0), 1);
        assert_eq!(shares.others_waiting(1, "b", t0), 0, "nobody but itself");
        assert_eq!(shares.others_waiting(2, "a", t0), 0, "each run its own");
        assert_eq!(shares.runs_others_wait_for("a", t0), vec![1]);
        assert!(shares.runs_others_wait_for("b", t0).is_empty());
        assert_eq!(shares.others_waiting(1, "a", t0 + WAITING_KEPT), 0, "no longer");
        assert!(shares.state(t0 + WAITING_KEPT).waiting.is_empty(), "and forgotten");
    }

    #[test]
    fn an_allowance_is_the_floor_what_was_recorded_or_an_equal_share() {
        let shares = Shares::new(PERIOD);
        let t0 = Instant::now();
        assert_eq!(shares.allowance(1, "a", FLOOR, 10, 1, t0), FLOOR, "the floor");
        assert_eq!(shares.allowance(1, "a", FLOOR, 440, 1, t0), 220, "half of what is open, with one other waiting");
        assert_eq!(shares.allowance(1, "a", FLOOR, 440, 3, t0), 110);
        shares.recorded(1, "a", 300, t0);
        assert_eq!(shares.allowance(1, "a", FLOOR, 440, 1, t0), 600, "twice what it recorded lately");
        assert_eq!(shares.allowance(2, "a", FLOOR, 0, 1, t0), FLOOR, "in that run only");
        assert_eq!(shares.allowance(1, "a", FLOOR, 440, 1, t0 + PERIOD * 2), 220, "not two periods on");
    }

    #[test]
    fn reports_of_leases_not_held_past_the_budget_are_over_it() {
        let shares = Shares::new(PERIOD);
        let t0 = Instant::now();
        shares.granted("w", 100, t0);
        shares.not_held("w", 300, t0);
        assert_eq!(shares.over_budget("w", 100, t0), None, "100 it may hold and twice the 100 granted");
        shares.not_held("w", 1, t0);
        assert_eq!(shares.over_budget("w", 100, t0), Some(OverBudget { not_held: 301, granted: 100, budget: 300 }));
        assert_eq!(shares.over_budget("other", 100, t0), None);
        assert_eq!(shares.over_budget("w", 100, t0 + PERIOD * 2), None, "two periods on, forgotten");
    }
}
