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

/// A lease that expired while it waited for a vote is taken at once by the
/// next identity that may vote on it, even when the identity that looked
/// for expired leases just before could not take it (it had voted on the
/// job already): a fast worker that votes on everything must not keep the
/// expired job from a slower one (found by the state-machine proptest).
pub(super) async fn an_expired_lease_one_identity_cannot_take_goes_to_the_next(store: Arc<dyn JobStore>) {
    // Quorum 2: a votes on every job, so each waits for another identity.
    let run = store.create_run(&spec(QUEUE, 2), &jobs(QUEUE)).await.unwrap();
    let all = store.lease(Some(run), "a", 100, TTL).await.unwrap();
    assert_eq!(all.len(), 40);
    let votes: Vec<_> = all.iter().map(|lease| completion(lease, "a", true_count(lease))).collect();
    store.complete_many(&votes).await.unwrap().into_iter().for_each(|outcome| outcome.map(drop).unwrap());

    // b takes one for its vote, and goes away: its lease is born expired.
    let gone = store.lease(Some(run), "b", 1, std::time::Duration::ZERO).await.unwrap();
    assert_eq!(gone.len(), 1);
    // The store's clock is in milliseconds: past the lease's expiry.
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;

    // a looks for expired leases first (one granted here has expired) and
    // can take none; c, next, gets the expired job with the fresh ones.
    assert!(store.lease(Some(run), "a", 100, TTL).await.unwrap().is_empty(), "a voted on every job");
    let taken = store.lease(Some(run), "c", 100, TTL).await.unwrap();
    assert!(ids(&taken).contains(&gone[0].job_id), "the expired lease goes to c at once: {:?}", ids(&taken));
    assert_eq!(taken.len(), 40);
}

/// A job put back that the fronts no longer know of (after a requeue, a
/// restart, another coordinator) is found by a scan from the first pending
/// job; when the identity that makes that scan cannot take it (it voted on
/// it), the next identity's lease starts at it, rather than waiting for
/// the next full scan, which the same identity may make again (found by
/// the state-machine proptest).
pub(super) async fn a_job_a_full_scan_passed_goes_to_the_next_identity(store: Arc<dyn JobStore>) {
    // Quorum 3: b and a vote on the first job, which waits for a third.
    let run = store.create_run(&spec(QUEUE, 3), &jobs(QUEUE)).await.unwrap();
    let first = store.lease(Some(run), "b", 1, TTL).await.unwrap();
    store.complete(&completion(&first[0], "b", true_count(&first[0]))).await.unwrap();
    let again = store.lease(Some(run), "a", 1, TTL).await.unwrap();
    assert_eq!(ids(&again), ids(&first), "a job put back goes first");
    store.complete(&completion(&again[0], "a", true_count(&again[0]))).await.unwrap();

    // A requeue (of nothing failed) forgets where the queue's jobs are: a's
    // lease scans from the first pending job, past the one it voted on.
    store.requeue(run, None).await.unwrap();
    let by_a = store.lease(Some(run), "a", 5, TTL).await.unwrap();
    assert!(!ids(&by_a).contains(&first[0].job_id));
    assert_eq!(by_a.len(), 5);
    let by_c = store.lease(Some(run), "c", 5, TTL).await.unwrap();
    assert_eq!(by_c.first().map(|lease| lease.job_id), Some(first[0].job_id), "c gets it first: {:?}", ids(&by_c));
}
