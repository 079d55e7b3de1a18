//! Progress by cost: a run whose jobs differ in cost (`Census::job_cost`)
//! reports the cost of its jobs done exactly, through acceptance, a
//! failure and its requeue, a quarantine reaching back, and the end, and
//! its ETA is the cost left at the cost done a second, not the jobs left.

use std::sync::Arc;

use super::fixtures::{SMALL, TTL, catch_lying, completion, jobs, spec, true_count};
use crate::{Completion, JobStore, Lease, Progress, RunId};

/// 20 made-up jobs, every fifth of cost 100 and the others 1: 416 in all.
const HEAVY: &str = "synthetic jobs=20 salt=0 heavy=5";

/// The cost of the leased jobs, from their census.
fn cost_of(leases: &[Lease]) -> u64 {
    leases.iter().map(|lease| lease.census.job_cost(&lease.key).unwrap()).sum()
}

/// The run's progress, with its cost done and total as expected, its
/// fraction exact, and its ETA the cost left at the cost a second over the
/// results it walked (`recent` results, of jobs of cost `recent_cost`):
/// equalities that hold however fast or slow the machine is.
async fn assert_cost(
    store: &dyn JobStore,
    run: RunId,
    done: u64,
    recent: u64,
    recent_cost: u64,
    when: &str,
) -> Progress {
    let progress = store.progress(run).await.unwrap();
    assert_eq!((progress.cost_total, progress.cost_done), (416, done), "{when}: {progress:?}");
    assert_eq!(progress.cost_fraction_done(), done as f64 / 416.0, "{when}");
    // Speeds over the same results: cost a second / results a second is
    // their cost / their number (0 = 0 if none lies in the last minute).
    let (by_cost, by_jobs) = (progress.cost_per_second * recent as f64, progress.jobs_per_second * recent_cost as f64);
    assert!((by_cost - by_jobs).abs() <= 1e-9 * by_jobs.max(1.0), "{when}: {progress:?}");
    let left = (416 - done) as f64;
    match progress.eta {
        Some(eta) => {
            let at_that_speed = eta.as_secs_f64() * progress.cost_per_second;
            assert!((at_that_speed - left).abs() <= 1e-6 * left, "{when}: the ETA is by cost: {progress:?}");
        }
        None => assert!(left == 0.0 || progress.cost_per_second == 0.0, "{when}: {progress:?}"),
    }
    progress
}

pub(super) async fn progress_weighs_jobs_by_their_cost(store: Arc<dyn JobStore>) {
    let run = store.create_run(&spec(HEAVY, 1), &jobs(HEAVY)).await.unwrap();
    let progress = assert_cost(store.as_ref(), run, 0, 0, 0, "created").await;
    assert_eq!((progress.jobs_total, progress.eta), (20, None));

    // Five jobs accepted from an identity that lies later, nine from an
    // honest one, whose tenth fails for good (`one_failure`).
    let liar = store.lease(Some(run), "liar", 5, TTL).await.unwrap();
    let reports: Vec<Completion> = liar.iter().map(|l| completion(l, "liar", true_count(l))).collect();
    store.complete_many(&reports).await.unwrap().into_iter().for_each(|outcome| outcome.map(drop).unwrap());
    let mut honest = store.lease(Some(run), "honest", 10, TTL).await.unwrap();
    let failing = honest.pop().unwrap();
    let reports: Vec<Completion> = honest.iter().map(|l| completion(l, "honest", true_count(l))).collect();
    store.complete_many(&reports).await.unwrap().into_iter().for_each(|outcome| outcome.map(drop).unwrap());
    store.fail(failing.job_id, &failing.token, "honest", "cannot count it").await.unwrap();
    let accepted = cost_of(&liar) + cost_of(&honest);
    let progress = assert_cost(store.as_ref(), run, accepted, 14, accepted, "14 accepted, 1 failed").await;
    assert_eq!((progress.done, progress.failed), (14, 1));
    assert_ne!(progress.cost_fraction_done(), 14.0 / 20.0, "by cost, not by jobs");

    // A requeue reopens the failed job: nothing done is taken out.
    assert_eq!(store.requeue(run, Some(failing.job_id)).await.unwrap(), 1);
    assert_cost(store.as_ref(), run, accepted, 14, accepted, "requeued").await;

    // Caught lying elsewhere (three checked counts in another run): its
    // accepted jobs here are reopened, and their cost leaves the cost done.
    catch_lying(store.as_ref(), "liar", SMALL).await;
    let progress = assert_cost(store.as_ref(), run, cost_of(&honest), 14, accepted, "the liar's jobs reopened").await;
    assert_eq!(progress.done, 9);

    // The rest, counted: every cost done, fraction 1.
    let rest = store.lease(Some(run), "honest", 100, TTL).await.unwrap();
    assert_eq!(rest.len(), 11);
    let reports: Vec<Completion> = rest.iter().map(|l| completion(l, "honest", true_count(l))).collect();
    store.complete_many(&reports).await.unwrap().into_iter().for_each(|outcome| outcome.map(drop).unwrap());
    let progress = assert_cost(store.as_ref(), run, 416, 25, accepted + cost_of(&rest), "finished").await;
    assert_eq!((progress.cost_fraction_done(), progress.eta), (1.0, None));
    assert_eq!(store.total(run).await.unwrap().answer, Some(census_math::synthetic::expected_answer(20, 0)));
}
