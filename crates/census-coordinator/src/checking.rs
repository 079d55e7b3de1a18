//! Checking results by counting them again, and the bounds on that work.
//!
//! A recount costs what the count cost (seconds for some keys), so it is
//! the one thing a caller can make the coordinator spend. Three rules keep
//! it from being an amplifier:
//! - the store fences first ([`census_store::JobStore::check_leases`]): only a
//!   result whose lease its sender holds is counted again, and a made-up
//!   token is recorded against the sender (toward quarantine);
//! - recounts run in slices of at most [`SLICE`] (or one recount, if
//!   longer), each under a permit of its identity (so one identity cannot
//!   take every thread) and then one of the coordinator (so all of them
//!   together cannot take more than the configured threads);
//! - at shutdown no new recount starts and waiting requests end at once with
//!   UNAVAILABLE; recounts already running are not waited for (the process
//!   stops its runtime with a timeout).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use census_math::census::{Census, JobCounter};
use census_store::Completion;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::sync::Semaphore;
use tonic::Status;

use crate::auth::Caller;
use crate::{Coordinator, status_of};

/// How long a runner keeps its permits for the recounts of one report
/// before it gives them back and queues again. Cheap recounts (a synthetic
/// job's, a small shape's) run many to a permit, so a report is not
/// queued once a result behind every other report's; a recount longer
/// than this still takes its permits alone, so another identity waits at
/// most one slice and one recount for a thread.
const SLICE: Duration = Duration::from_millis(20);

/// A result to count again: where it stands in its report, and its census.
struct Recount {
    position: usize,
    completion: Completion,
    census: Census,
}

/// The counter that checks a census's results, and whether it is another
/// algorithm than the one that counted them.
#[derive(Clone)]
struct Checker {
    counter: Arc<JobCounter>,
    independent: bool,
}

/// How many recounts may run at once: in all, and for one identity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckingLimits {
    /// Recounts running at once, all identities together (blocking threads).
    pub threads: usize,
    /// Recounts running at once for one identity.
    pub threads_per_identity: usize,
}

impl Default for CheckingLimits {
    /// One thread a core; one identity at most half of them (at least one).
    fn default() -> CheckingLimits {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        CheckingLimits { threads: cores, threads_per_identity: cores.div_ceil(2) }
    }
}

/// The coordinator's checking: counters, permits, the stop flag.
pub(crate) struct Checking {
    /// The counters that check results, one per census, built on first use
    /// (`Census::checking_counter`: for 9x9 runs the column-sets counter,
    /// whatever counter the run uses).
    checkers: Mutex<HashMap<Census, Checker>>,
    all: Arc<Semaphore>,
    per_identity: Mutex<HashMap<String, Arc<Semaphore>>>,
    threads_per_identity: usize,
    /// Set at shutdown: no recount starts after it, and running ones stop.
    cancel: Arc<AtomicBool>,
    stopping: tokio::sync::watch::Sender<bool>,
    recounted: AtomicU64,
    /// Draws which results are checked when only a share is
    /// ([`crate::CoordinatorConfig::validation_seed`]).
    sampler: Mutex<StdRng>,
}

impl Checking {
    pub(crate) fn new(limits: CheckingLimits, seed: Option<u64>) -> Checking {
        let sampler = match seed {
            Some(seed) => StdRng::seed_from_u64(seed),
            None => StdRng::from_os_rng(),
        };
        Checking {
            checkers: Mutex::default(),
            all: Arc::new(Semaphore::new(limits.threads.max(1))),
            per_identity: Mutex::default(),
            threads_per_identity: limits.threads_per_identity.max(1),
            cancel: Arc::new(AtomicBool::new(false)),
            stopping: tokio::sync::watch::Sender::new(false),
            recounted: AtomicU64::new(0),
            sampler: Mutex::new(sampler),
        }
    }

    /// Whether the next result is checked, with probability `fraction`:
    /// one draw a result, in the order the results arrive.
    fn sampled(&self, fraction: f64) -> bool {
        fraction >= 1.0 || self.sampler.lock().expect("never poisoned").random::<f64>() < fraction
    }

    /// Stops checking: waiting requests end, no recount starts.
    pub(crate) fn stop(&self) {
        self.cancel.store(true, Ordering::SeqCst);
        self.stopping.send_replace(true);
    }

    /// How many results were counted again since the coordinator started.
    pub(crate) fn recounted(&self) -> u64 {
        self.recounted.load(Ordering::Relaxed)
    }

    fn identity_permits(&self, identity: &str) -> Arc<Semaphore> {
        let mut map = self.per_identity.lock().expect("never poisoned");
        // Forget identities with nothing running, so the map stays as small as the active set.
        map.retain(|_, permits| Arc::strong_count(permits) > 1);
        map.entry(identity.to_string()).or_insert_with(|| Arc::new(Semaphore::new(self.threads_per_identity))).clone()
    }

    /// The counter that checks results of `census`, built once (under the
    /// lock, so that concurrent checks wait for one build instead of making
    /// their own).
    fn checker(&self, census: Census) -> Checker {
        let mut checkers = self.checkers.lock().expect("never poisoned");
        checkers
            .entry(census)
            .or_insert_with(|| Checker {
                counter: Arc::new(census.checking_counter()),
                independent: census.has_independent_check(),
            })
            .clone()
    }

    /// Takes recounts from `queue` until it is empty or [`SLICE`] has
    /// passed, and counts each again (a blocking call).
    fn recount_slice(&self, queue: &Mutex<VecDeque<Recount>>, only_independent: bool) -> Vec<(usize, Completion)> {
        let started = Instant::now();
        let mut recounted = Vec::new();
        while started.elapsed() < SLICE {
            let Some(Recount { position, mut completion, census }) = queue.lock().expect("never poisoned").pop_front()
            else {
                break;
            };
            if !self.cancel.load(Ordering::SeqCst) {
                let checker = self.checker(census);
                if !only_independent || checker.independent {
                    self.recounted.fetch_add(1, Ordering::Relaxed);
                    metrics::counter!("census_results_recounted_total").increment(1);
                    // Cancelled at shutdown, the request has already ended
                    // UNAVAILABLE: this completion is never stored.
                    if let Ok(count) = checker.counter.count_cancellable(&completion.key, &self.cancel) {
                        completion.checked_count = Some(count);
                    }
                }
            }
            recounted.push((position, completion));
        }
        recounted
    }

    /// Builds the checker of `census` ahead of its first result.
    pub(crate) fn prepare(&self, census: Census) {
        self.checker(census);
    }
}

impl Coordinator {
    /// Counts a share of `completions` (whose leases their sender holds)
    /// again with their census's checking counter, within the permits, and
    /// attaches the checked counts. A key the counter cannot read is not
    /// the job's: the store rejects it. The coordinator's own workers are
    /// checked only by an independent counter
    /// ([`crate::CoordinatorConfig::trust_local_workers`]).
    pub(crate) async fn validate(
        self: &Arc<Self>,
        caller: &Caller,
        completions: Vec<Completion>,
    ) -> Result<Vec<Completion>, Status> {
        let only_independent = self.config.trust_local_workers && caller.local;
        if self.config.recounts_nothing() || completions.is_empty() {
            return Ok(completions);
        }
        let ids: Vec<i64> = completions.iter().map(|c| c.job_id).collect();
        let censuses = self.store.censuses_of(&ids).await.map_err(status_of)?;
        let count = completions.len();
        let mut checked: Vec<Option<Completion>> = (0..count).map(|_| None).collect();
        let mut queue = VecDeque::new();
        for (position, completion) in completions.into_iter().enumerate() {
            let census = censuses.get(&completion.job_id).copied();
            let fraction = census.map_or(1.0, |census| {
                self.config.validate_fraction.unwrap_or_else(|| census.default_check().recount_fraction)
            });
            match census.filter(|_| self.checking.sampled(fraction)) {
                Some(census) => queue.push_back(Recount { position, completion, census }),
                None => checked[position] = Some(completion),
            }
        }
        if queue.is_empty() {
            // Most reports of a sampled census (one result in a hundred is
            // counted again): no task, no permit, no wait for the stop.
            return Ok(checked.into_iter().map(|c| c.expect("every unsampled result is answered")).collect());
        }
        // One runner a thread this identity may use, each taking the next
        // recount from the report's queue: a report's recounts run as wide
        // as its permits allow, in a few tasks and permits instead of one of
        // each a result.
        let runners = self.checking.threads_per_identity.min(queue.len());
        let queue = Arc::new(Mutex::new(queue));
        let identity = self.checking.identity_permits(&caller.name);
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..runners {
            let (coordinator, identity, queue) = (self.clone(), identity.clone(), queue.clone());
            tasks.spawn(coordinator.run_recounts(identity, queue, only_independent));
        }
        let mut stopping = self.checking.stopping.subscribe();
        let gather = async {
            while let Some(done) = tasks.join_next().await {
                let recounted = done.map_err(|e| Status::internal(format!("validating results failed: {e}")))?;
                for (position, completion) in recounted {
                    checked[position] = Some(completion);
                }
            }
            // A runner stops early only when the permits are closed, which
            // they never are; a result left unchecked is never stored.
            checked
                .into_iter()
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| Status::unavailable("the coordinator could not check every result; report them again"))
        };
        tokio::select! {
            checked = gather => checked,
            _ = stopping.wait_for(|stop| *stop) => {
                Err(Status::unavailable("the coordinator is shutting down; report the results again to another"))
            }
        }
    }

    /// Counts the job `key` of `census` with its checking counter, under
    /// one of the coordinator's checking permits, on a blocking thread: the
    /// coordinator's own count of a job in conflict (`conflicts.rs`).
    pub(crate) async fn count_itself(self: &Arc<Self>, census: Census, key: String) -> Result<u128, String> {
        let permit = self.checking.all.clone().acquire_owned().await.map_err(|e| e.to_string())?;
        let coordinator = self.clone();
        let counted = tokio::task::spawn_blocking(move || {
            let _permit = permit;
            let checker = coordinator.checking.checker(census);
            coordinator.checking.recounted.fetch_add(1, Ordering::Relaxed);
            checker.counter.count_cancellable(&key, &coordinator.checking.cancel)
        });
        match counted.await {
            Ok(count) => count.map_err(|e| e.to_string()),
            Err(error) => Err(format!("counting panicked: {error}")),
        }
    }

    /// Counts again, within the permits, the results of `queue` that no
    /// other runner of the report has taken, and gives them back with their
    /// checked counts: a slice at a time ([`SLICE`]), each slice under one
    /// permit of the identity and one of the coordinator, on a blocking
    /// thread.
    async fn run_recounts(
        self: Arc<Self>,
        identity: Arc<Semaphore>,
        queue: Arc<Mutex<VecDeque<Recount>>>,
        only_independent: bool,
    ) -> Vec<(usize, Completion)> {
        let mut recounted = Vec::new();
        while !queue.lock().expect("never poisoned").is_empty() {
            let (Ok(mine), Ok(all)) =
                (identity.clone().acquire_owned().await, self.checking.all.clone().acquire_owned().await)
            else {
                break;
            };
            if queue.lock().expect("never poisoned").is_empty() {
                // Another runner of the report took the rest while this one waited.
                break;
            }
            let (coordinator, queue) = (self.clone(), queue.clone());
            let slice = tokio::task::spawn_blocking(move || {
                // The permits are held until the slice ends, even if the
                // request that wanted it is gone.
                let _permits = (mine, all);
                coordinator.checking.recount_slice(&queue, only_independent)
            });
            match slice.await {
                Ok(slice) => recounted.extend(slice),
                // A count that panicked is no count: the report fails with it.
                Err(error) => std::panic::resume_unwind(error.into_panic()),
            }
        }
        recounted
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queued(census: Census) -> Mutex<VecDeque<Recount>> {
        let jobs = census.job_stream().expect("a synthetic census lists its jobs");
        let queue = jobs
            .enumerate()
            .map(|(position, job)| Recount {
                position,
                completion: Completion {
                    job_id: position as i64 + 1,
                    token: String::new(),
                    worker: "w".into(),
                    key: job.key,
                    counter_version: census.counter_version(),
                    count: 0,
                    elapsed: Duration::ZERO,
                    checked_count: None,
                },
                census,
            })
            .collect();
        Mutex::new(queue)
    }

    /// However many slices a report takes (a slow machine takes more), each
    /// result comes back once, with its own count.
    #[test]
    fn every_result_of_a_report_comes_back_once_counted_again() {
        let census: Census = "synthetic jobs=500 salt=7".parse().expect("a census");
        let counter = census.checking_counter();
        let checking = Checking::new(CheckingLimits { threads: 1, threads_per_identity: 1 }, Some(1));
        let queue = queued(census);
        let mut back = Vec::new();
        while !queue.lock().unwrap().is_empty() {
            let slice = checking.recount_slice(&queue, false);
            assert!(!slice.is_empty(), "a slice counts at least one result");
            back.extend(slice);
        }
        back.sort_by_key(|(position, _)| *position);
        assert_eq!(back.iter().map(|(position, _)| *position).collect::<Vec<_>>(), (0..500).collect::<Vec<_>>());
        for (_, completion) in &back {
            assert_eq!(completion.checked_count, Some(counter.count(&completion.key).expect("a synthetic key")));
        }
        assert_eq!(checking.recounted(), 500);
    }

    /// After the stop no result is counted again; each still comes back,
    /// unchecked, for a request that ends UNAVAILABLE and stores nothing.
    #[test]
    fn after_the_stop_results_come_back_unchecked() {
        let census: Census = "synthetic jobs=40 salt=7".parse().expect("a census");
        let checking = Checking::new(CheckingLimits { threads: 1, threads_per_identity: 1 }, Some(1));
        checking.stop();
        let queue = queued(census);
        let mut back = Vec::new();
        while !queue.lock().unwrap().is_empty() {
            back.extend(checking.recount_slice(&queue, false));
        }
        assert_eq!(back.len(), 40);
        assert!(back.iter().all(|(_, completion)| completion.checked_count.is_none()));
        assert_eq!(checking.recounted(), 0);
    }
}
