//! What the store's test suites share: the Russell classes, the true count
//! of a leased job, and a report of it as the coordinator sends one.

use std::time::Duration;

use census_math::{ClassTable, CounterKind, SEEDS, Stage};
use census_store::{ClassSpec, Completion, Lease};

pub fn russell_classes() -> Vec<ClassSpec> {
    ClassTable::build(Stage::Russell)
        .classes()
        .iter()
        .map(|c| ClassSpec { class_id: c.id, representative: c.representative.to_string(), size: c.size })
        .collect()
}

/// The true count of a leased job, from the fast counter.
pub fn true_count(lease: &Lease) -> u64 {
    static COUNTER: std::sync::LazyLock<Box<dyn census_math::Counter>> =
        std::sync::LazyLock::new(|| CounterKind::ColumnSets.build());
    COUNTER.count(&lease.band.parse().unwrap(), &SEEDS[lease.seed as usize])
}

/// A report of `count` for the job of `lease`, with no independent check
/// attached.
pub fn completion(lease: &Lease, worker: &str, count: u64) -> Completion {
    Completion {
        job_id: lease.job_id,
        token: lease.token.clone(),
        worker: worker.into(),
        band: lease.band.clone(),
        seed: lease.seed,
        count,
        elapsed: Duration::from_micros(10),
        counter_version: "column-sets/1".into(),
        checked_count: None,
    }
}
