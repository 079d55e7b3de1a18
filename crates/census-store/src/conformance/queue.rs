//! The queue's order: pending jobs go in id order, and a job put back in
//! the queue (a vote that needs another identity, a failure, a requeue)
//! is leased before the fresh jobs behind it, however far the leases
//! before it went (the store may start its scans where the fresh jobs
//! begin: `store/fronts.rs`).

use std::sync::Arc;

use super::fixtures::{TTL, completion, jobs, spec, true_count};
use crate::{JobId, JobStore, Lease};

/// 40 made-up jobs.
const QUEUE: &str = "synthetic jobs=40 salt=7";

fn ids(leases: &[Lease]) -> Vec<JobId> {
    leases.iter().map(|lease| lease.job_id).collect()
}

pub(super) async fn jobs_put_back_are_leased_before_the_fresh_jobs_behind_them(store: Arc<dyn JobStore>) {
    // Quorum 2: a first vote puts its job back for another identity.
    let run = store.create_run(&spec(QUEUE, 2), &jobs(QUEUE)).await.unwrap();
    let first = store.lease(Some(run), "a", 3, TTL).await.unwrap();
    let all: Vec<JobId> = ids(&first);
    assert_eq!(all.len(), 3);
    assert!(all.windows(2).all(|pair| pair[0] < pair[1]), "in id order: {all:?}");
    let more = store.lease(Some(run), "a", 5, TTL).await.unwrap();
    assert!(ids(&more).iter().all(|id| *id > all[2]), "then the next ones: {:?}", ids(&more));

    // a votes on its first three: they are pending again, open to others
    // only, and b is handed them before any fresh job.
    let votes = first.iter().map(|lease| completion(lease, "a", true_count(lease))).collect::<Vec<_>>();
    store.complete_many(&votes).await.unwrap().into_iter().for_each(|outcome| outcome.map(drop).unwrap());
    let fresh = store.lease(Some(run), "a", 2, TTL).await.unwrap();
    assert!(ids(&fresh).iter().all(|id| !all.contains(id)), "a never votes twice: {:?}", ids(&fresh));
    let second = store.lease(Some(run), "b", 3, TTL).await.unwrap();
    assert_eq!(ids(&second), all, "b gets the jobs put back first");

    // A failure puts its job back too: the next lease starts there.
    let failing = &more[1];
    store.fail(failing.job_id, &failing.token, "a", "cannot count it").await.unwrap();
    let again = store.lease(Some(run), "c", 1, TTL).await.unwrap();
    assert_eq!(ids(&again), vec![failing.job_id], "the failed job is leased again before fresh ones");

    // And every job is reachable: the leases held are reported, and four
    // identities drain the run.
    let held = more.iter().filter(|lease| lease.job_id != failing.job_id).chain(&fresh).map(|lease| (lease, "a"));
    let held = held.chain(second.iter().map(|lease| (lease, "b"))).chain(again.iter().map(|lease| (lease, "c")));
    let reports = held.map(|(lease, worker)| completion(lease, worker, true_count(lease))).collect::<Vec<_>>();
    store.complete_many(&reports).await.unwrap().into_iter().for_each(|outcome| outcome.map(drop).unwrap());
    for worker in ["a", "b", "c", "d"] {
        loop {
            let leases = store.lease(Some(run), worker, 7, TTL).await.unwrap();
            if leases.is_empty() {
                break;
            }
            let reports = leases.iter().map(|lease| completion(lease, worker, true_count(lease))).collect::<Vec<_>>();
            store.complete_many(&reports).await.unwrap().into_iter().for_each(|outcome| outcome.map(drop).unwrap());
        }
    }
    let progress = store.progress(run).await.unwrap();
    assert_eq!(progress.done, progress.jobs_total, "{progress:?}");
}
