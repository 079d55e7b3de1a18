//! What the store's test suites share: runs of real censuses (the Russell
//! stage of the 9x9 count, 440 jobs; the 2x4 shape, 26 jobs), the true
//! count of a leased job, and a report of it as the coordinator sends one.

#![allow(dead_code)] // each suite uses its part

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use census_math::census::{Census, JobCounter};
use census_store::{Completion, JobSpec, Lease, RunSpec};

/// The 9x9 count on the Russell stage: 44 classes, 440 jobs.
pub const RUSSELL: &str = "sudoku stage=russell counter=column-sets";
/// 2x4 boxes: 26 jobs, one per class; 29,136,487,207,403,520 grids.
pub const SMALL: &str = "shape boxes=2x4";

pub fn census(text: &str) -> Census {
    text.parse().unwrap()
}

pub fn spec(text: &str, redundancy: u32) -> RunSpec {
    RunSpec { census: census(text), counter_version: census(text).counter_version(), redundancy }
}

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

/// A test of each named property on SQLite and on Postgres: the suite
/// defines `async fn property(store: Arc<dyn JobStore>)` for each, and the
/// stores they run on as `sqlite_store()` and `postgres_store()`.
#[allow(unused_macros)] // not every suite runs on both stores
macro_rules! on_both {
    ($($property:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $property() {
                    super::$property(super::sqlite_store().await).await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $property() {
                    super::$property(super::postgres_store().await).await;
                }
            )*
        }
    };
}
#[allow(unused_imports)]
pub(crate) use on_both;
