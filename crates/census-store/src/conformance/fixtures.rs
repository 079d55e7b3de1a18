//! What the conformance suite, and the store's own tests, are made of:
//! runs of real censuses (the Russell stage of the 9x9 count, 440 jobs; the
//! 2x4 shape, 26 jobs), the true count of a leased job, a report of it as
//! the coordinator sends one, and a run counted to its end.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use census_math::census::{Census, JobCounter};

use crate::{Completion, JobSpec, JobStore, Lease, RunId, RunSpec};

/// The lease time of the suite's leases: longer than any property takes.
pub const TTL: Duration = Duration::from_secs(30);

/// The 9x9 count on the Russell stage: 44 classes, 440 jobs.
pub const RUSSELL: &str = "sudoku stage=russell counter=column-sets";
/// 2x4 boxes: 26 jobs, one per class; 29,136,487,207,403,520 grids.
pub const SMALL: &str = "shape boxes=2x4";

/// The census `text` names (the suite's own texts always parse).
pub fn census(text: &str) -> Census {
    text.parse().unwrap()
}

/// A run of `text` with its counter's version and `redundancy`.
pub fn spec(text: &str, redundancy: u32) -> RunSpec {
    RunSpec { census: census(text), counter_version: census(text).counter_version(), redundancy }
}

/// Every job of `text`.
pub fn jobs(text: &str) -> Vec<JobSpec> {
    census(text).jobs().unwrap()
}

/// The true count of a leased job, from its census's counter.
pub fn true_count(lease: &Lease) -> u128 {
    static COUNTERS: LazyLock<Mutex<HashMap<Census, Arc<JobCounter>>>> = LazyLock::new(Mutex::default);
    let counter =
        COUNTERS.lock().unwrap().entry(lease.census).or_insert_with(|| Arc::new(lease.census.job_counter())).clone();
    counter.count(&lease.key).unwrap()
}

/// Sum over classes of weight x (true count sum)^class_power: the run's
/// weighted sum.
pub fn weighted_sum(text: &str) -> num_bigint::BigUint {
    let census = census(text);
    let counter = census.job_counter();
    let mut classes: HashMap<String, (u128, num_bigint::BigUint)> = HashMap::new();
    for job in jobs(text) {
        let class = classes.entry(job.group.clone()).or_insert((job.weight, Default::default()));
        class.1 += counter.count(&job.key).unwrap();
    }
    classes.values().map(|(weight, sum)| num_bigint::BigUint::from(*weight) * sum.pow(census.class_power())).sum()
}

/// A report of `count` for the job of `lease`, with no independent check
/// attached.
pub fn completion(lease: &Lease, worker: &str, count: u128) -> Completion {
    Completion {
        job_id: lease.job_id,
        token: lease.token.clone(),
        worker: worker.into(),
        key: lease.key.clone(),
        count,
        elapsed: Duration::from_micros(10),
        counter_version: lease.census.counter_version(),
        checked_count: None,
    }
}

/// Catches `worker` lying: three of its counts in a new run of `text`
/// (a census no run of the caller's is), each refused by an independent
/// check, quarantine it (the default `quarantine_after`), which reaches
/// back into every run it counted in. Returns the new run.
pub async fn catch_lying(store: &dyn JobStore, worker: &str, text: &str) -> RunId {
    let other = store.create_run(&spec(text, 1), &jobs(text)).await.unwrap();
    for lease in store.lease(Some(other), worker, 3, TTL).await.unwrap() {
        let count = true_count(&lease);
        let checked = Completion { checked_count: Some(count), ..completion(&lease, worker, count + 1) };
        assert!(matches!(store.complete(&checked).await, Err(crate::StoreError::Rejected { .. })));
    }
    assert!(store.is_quarantined(worker).await.unwrap());
    other
}

/// Leases every job of `run` that `worker` can be handed, a batch at a
/// time, and reports its true count; the keys in the order they were
/// leased.
pub async fn drain(store: &dyn JobStore, run: RunId, worker: &str) -> Vec<String> {
    let mut leased = Vec::new();
    loop {
        let leases = store.lease(Some(run), worker, 2048, TTL).await.unwrap();
        if leases.is_empty() {
            return leased;
        }
        let reports: Vec<_> = leases.iter().map(|lease| completion(lease, worker, true_count(lease))).collect();
        store.complete_many(&reports).await.unwrap().into_iter().for_each(|outcome| outcome.map(drop).unwrap());
        leased.extend(leases.into_iter().map(|lease| lease.key));
    }
}
