//! Every counter whose jobs can run longer than a second stops when its
//! cancellation flag is set, and never hands back a partial count.
//!
//! Each test gives a counter a job of seconds to minutes with the flag
//! already set: a counter that read the flag only at the end would still
//! return `Cancelled`, but only after counting the whole job, so these
//! tests also keep the flag read as the count goes (they would take
//! minutes otherwise). No test measures time.

use std::sync::atomic::{AtomicBool, Ordering};

use census_math::census::{Census, CensusError, EssentiallyDifferent};

fn set() -> AtomicBool {
    AtomicBool::new(true)
}

/// The first job of `census` whose key satisfies `wanted`.
fn job_key(census: &str, wanted: impl Fn(&str) -> bool) -> String {
    let census: Census = census.parse().unwrap();
    census.jobs().unwrap().into_iter().map(|job| job.key).find(|key| wanted(key)).unwrap()
}

#[test]
fn the_enumerate_counter_stops_when_cancelled() {
    let census: Census = "sudoku stage=russell counter=enumerate".parse().unwrap();
    let key = job_key("sudoku stage=russell counter=enumerate", |_| true);
    let counter = census.job_counter();
    assert_eq!(counter.count_cancellable(&key, &set()), Err(CensusError::Cancelled));
}

#[test]
fn the_essentially_different_counter_stops_when_cancelled() {
    let census = Census::from(EssentiallyDifferent);
    let counter = census.job_counter();
    // Every part of a class but the identity is a search of the fixed counter.
    let jobs = census.jobs().unwrap();
    assert!(jobs.len() > 200);
    for job in jobs.iter().filter(|job| job.group != "class 0").take(40) {
        assert_eq!(counter.count_cancellable(&job.key, &set()), Err(CensusError::Cancelled), "{}", job.key);
    }
}

#[test]
fn the_shape_counters_stop_when_cancelled() {
    for boxes in ["2x5", "2x6"] {
        let census: Census = format!("shape boxes={boxes}").parse().unwrap();
        let key = job_key(&census.to_string(), |_| true);
        let counter = census.job_counter();
        assert_eq!(counter.count_cancellable(&key, &set()), Err(CensusError::Cancelled), "{key}");
    }
}

#[test]
fn a_flag_never_set_changes_nothing() {
    // The 2 x 3 total and a 9x9 per-seed checkpoint, through count_cancellable.
    let flag = AtomicBool::new(false);
    let census: Census = "shape boxes=2x3".parse().unwrap();
    let counter = census.job_counter();
    let jobs = census.jobs().unwrap();
    let counts: Vec<u128> = jobs.iter().map(|job| counter.count_cancellable(&job.key, &flag).unwrap()).collect();
    assert_eq!(census.fold(&jobs, &counts).unwrap().value.to_string(), "28200960", "2x3: Sudoku Players' Forum (2005)");
    let enumerate: Census = "sudoku stage=russell counter=enumerate".parse().unwrap();
    assert_eq!(
        enumerate.job_counter().count_cancellable("123456789456789123789123456 258/369", &flag),
        Ok(6_696_000),
        "the per-seed checkpoint of docs/mathematics.md"
    );
    assert!(!flag.load(Ordering::Relaxed));
}
