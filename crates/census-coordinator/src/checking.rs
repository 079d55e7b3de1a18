//! Checking results by counting them again, and the bounds on that work.
//!
//! A recount costs what the count cost (seconds for some keys), so it is
//! the one thing a caller can make the coordinator spend. Three rules keep
//! it from being an amplifier:
//! - the store fences first ([`census_store::JobStore::check_leases`]): only a
//!   result whose lease its sender holds is counted again, and a made-up
//!   token is recorded against the sender (toward quarantine);
//! - every recount takes a permit of its identity (so one identity cannot
//!   take every thread) and then one of the coordinator (so all of them
//!   together cannot take more than the configured threads);
//! - at shutdown no new recount starts and waiting requests end at once with
//!   UNAVAILABLE; recounts already running are not waited for (the process
//!   stops its runtime with a timeout).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use census_math::census::{Census, JobCounter};
use census_store::Completion;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::sync::Semaphore;
use tonic::Status;

use crate::auth::Caller;
use crate::{Coordinator, status_of};

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
        if self.config.validate_fraction.is_some_and(|fraction| fraction <= 0.0) || completions.is_empty() {
            return Ok(completions);
        }
        let ids: Vec<i64> = completions.iter().map(|c| c.job_id).collect();
        let censuses = self.store.censuses_of(&ids).await.map_err(status_of)?;
        let identity = self.checking.identity_permits(&caller.name);
        let mut tasks = tokio::task::JoinSet::new();
        let count = completions.len();
        for (position, mut completion) in completions.into_iter().enumerate() {
            let census = censuses.get(&completion.job_id).copied();
            let fraction = census.map_or(1.0, |census| {
                self.config.validate_fraction.unwrap_or_else(|| census.default_check().recount_fraction)
            });
            let sampled = self.checking.sampled(fraction);
            let (coordinator, identity) = (self.clone(), identity.clone());
            tasks.spawn(async move {
                let Some(census) = census.filter(|_| sampled) else { return (position, completion) };
                let (Ok(mine), Ok(all)) =
                    (identity.acquire_owned().await, coordinator.checking.all.clone().acquire_owned().await)
                else {
                    return (position, completion);
                };
                let counted = tokio::task::spawn_blocking(move || {
                    // The permits are held until the count ends, even if the
                    // request that wanted it is gone.
                    let _permits = (mine, all);
                    let checking = &coordinator.checking;
                    if checking.cancel.load(Ordering::SeqCst) {
                        return completion;
                    }
                    let checker = checking.checker(census);
                    if only_independent && !checker.independent {
                        return completion;
                    }
                    checking.recounted.fetch_add(1, Ordering::Relaxed);
                    metrics::counter!("census_results_recounted_total").increment(1);
                    // Cancelled at shutdown, the request has already ended
                    // UNAVAILABLE: this completion is never stored.
                    if let Ok(count) = checker.counter.count_cancellable(&completion.key, &checking.cancel) {
                        completion.checked_count = Some(count);
                    }
                    completion
                });
                match counted.await {
                    Ok(completion) => (position, completion),
                    // A count that panicked is no count: the task's completion is lost with it.
                    Err(error) => std::panic::resume_unwind(error.into_panic()),
                }
            });
        }
        let mut stopping = self.checking.stopping.subscribe();
        let gather = async {
            let mut checked: Vec<Option<Completion>> = (0..count).map(|_| None).collect();
            while let Some(done) = tasks.join_next().await {
                let (position, completion) =
                    done.map_err(|e| Status::internal(format!("validating results failed: {e}")))?;
                checked[position] = Some(completion);
            }
            Ok(checked.into_iter().map(|c| c.expect("every task answers")).collect())
        };
        tokio::select! {
            checked = gather => checked,
            _ = stopping.wait_for(|stop| *stop) => {
                Err(Status::unavailable("the coordinator is shutting down; report the results again to another"))
            }
        }
    }
}
