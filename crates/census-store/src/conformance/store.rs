//! The properties every store must have, one async function each, run by
//! [`super::exercise`]: leasing, heartbeats, completion, votes and
//! conflicts, failures, quarantine, bad input, exact big counts, progress.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use census_math::total::PUBLISHED_S;

use super::fixtures::{
    RUSSELL, SMALL, TTL, catch_lying, census, completion, drain, jobs, spec, true_count, weighted_sum,
};
use crate::{CompleteOutcome, Completion, JobSpec, JobStore, RunId, RunSpec, StoreError};

fn russell(redundancy: u32) -> RunSpec {
    spec(RUSSELL, redundancy)
}

/// The run's weighted sum so far (what `total` shows of an unfinished
/// run, and the store keeps in the run's row) is the sum of its classes'
/// contributions, weight x count sum^class_power, as its classes show
/// them.
async fn assert_weighted_sum_adds_up(store: &dyn JobStore, run: RunId, when: &str) {
    let total = store.total(run).await.unwrap();
    let power = total.census.class_power();
    let classes = store.class_totals(run).await.unwrap();
    let sum: num_bigint::BigUint =
        classes.iter().map(|class| num_bigint::BigUint::from(class.weight) * class.count_sum.pow(power)).sum();
    assert_eq!(total.weighted_sum, sum, "{when}");
}

pub(super) async fn idempotent_run_creation(store: Arc<dyn JobStore>) {
    let classes = jobs(RUSSELL);
    let first = store.create_run(&russell(1), &classes).await.unwrap();
    let again = store.create_run(&russell(1), &classes).await.unwrap();
    assert_eq!(first, again);
    let runs = store.list_runs().await.unwrap();
    assert_eq!(runs.len(), 1);
    assert_eq!((runs[0].classes, runs[0].jobs_total, runs[0].jobs_done), (44, 440, 0));
    let other = store.create_run(&russell(2), &classes).await.unwrap();
    assert_ne!(other, first);
}

pub(super) async fn concurrent_lessees_drain_the_run_exactly(store: Arc<dyn JobStore>) {
    let run = store.create_run(&russell(1), &jobs(RUSSELL)).await.unwrap();
    let held: Arc<Mutex<HashSet<i64>>> = Arc::default();
    let seen: Arc<Mutex<HashSet<i64>>> = Arc::default();
    let mut tasks = Vec::new();
    for w in 0..8 {
        let (store, held, seen) = (store.clone(), held.clone(), seen.clone());
        tasks.push(tokio::spawn(async move {
            let worker = format!("worker-{w}");
            loop {
                let leases = store.lease(Some(run), &worker, 7, TTL).await.unwrap();
                if leases.is_empty() {
                    break;
                }
                for lease in &leases {
                    assert!(held.lock().unwrap().insert(lease.job_id), "job {} leased twice at once", lease.job_id);
                    assert!(
                        seen.lock().unwrap().insert(lease.job_id),
                        "job {} leased again after completion",
                        lease.job_id
                    );
                }
                let done: Vec<Completion> = leases.iter().map(|l| completion(l, &worker, true_count(l))).collect();
                for lease in &leases {
                    held.lock().unwrap().remove(&lease.job_id);
                }
                for outcome in store.complete_many(&done).await.unwrap() {
                    assert_eq!(outcome.unwrap(), CompleteOutcome::Recorded);
                }
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(seen.lock().unwrap().len(), 440);
    let progress = store.progress(run).await.unwrap();
    assert_eq!((progress.done, progress.pending, progress.leased, progress.failed), (440, 0, 0, 0));
    assert_eq!(progress.workers.iter().map(|w| w.jobs).sum::<u64>(), 440);
    let total = store.total(run).await.unwrap();
    assert!(total.is_final);
    assert_eq!(total.weighted_sum.to_string(), PUBLISHED_S.to_string());
    assert_eq!(total.answer.unwrap().to_string(), "6670903752021072936960");
    assert!(total.terms.contains(&("S".to_string(), PUBLISHED_S.to_string())), "{:?}", total.terms);
    let classes = store.class_totals(run).await.unwrap();
    assert_eq!(classes.len(), 44);
    assert!(classes.iter().all(|c| c.complete() && c.jobs_done == 10));
    assert!(store.lease(Some(run), "late", 10, TTL).await.unwrap().is_empty());
}

pub(super) async fn an_expired_lease_is_leased_again_and_the_old_attempt_is_refused(store: Arc<dyn JobStore>) {
    let run = store.create_run(&russell(1), &jobs(RUSSELL)).await.unwrap();
    let first = store.lease(Some(run), "slow", 1, Duration::from_millis(1)).await.unwrap().remove(0);
    tokio::time::sleep(Duration::from_millis(20)).await;
    let second = store.lease(Some(run), "fast", 1, TTL).await.unwrap().remove(0);
    assert_eq!(second.job_id, first.job_id);
    assert_eq!((first.attempt, second.attempt), (1, 2));
    assert_ne!(first.token, second.token);
    let heartbeat = store.heartbeat("slow", std::slice::from_ref(&first.token), TTL).await.unwrap();
    assert_eq!(heartbeat.lost, vec![first.token.clone()]);
    let late = store.complete(&completion(&first, "slow", true_count(&first))).await;
    assert!(matches!(late, Err(StoreError::StaleToken { .. })), "{late:?}");
    let current = store.complete(&completion(&second, "fast", true_count(&second))).await.unwrap();
    assert_eq!(current, CompleteOutcome::Recorded);
    assert_eq!(store.progress(run).await.unwrap().done, 1);
}

pub(super) async fn heartbeats_keep_leases(store: Arc<dyn JobStore>) {
    let run = store.create_run(&russell(1), &jobs(RUSSELL)).await.unwrap();
    // Long enough that the heartbeat comes before its end on a loaded
    // machine (200 ms left little room for two calls to a loaded Postgres).
    const LEASE: Duration = Duration::from_secs(2);
    let leased_at = std::time::Instant::now();
    let leases = store.lease(Some(run), "w", 3, LEASE).await.unwrap();
    let tokens: Vec<String> = leases.iter().map(|l| l.token.clone()).collect();
    let outcome = store.heartbeat("w", &tokens, TTL).await.unwrap();
    assert_eq!(outcome.extended, tokens);
    assert!(outcome.lost.is_empty());
    tokio::time::sleep((LEASE + Duration::from_millis(300)).saturating_sub(leased_at.elapsed())).await;
    // Extended past the original lease: nobody else gets them.
    let others = store.lease(Some(run), "other", 3, TTL).await.unwrap();
    assert!(others.iter().all(|l| !leases.iter().any(|m| m.job_id == l.job_id)));
    let foreign = store.heartbeat("other", &tokens, TTL).await.unwrap();
    assert_eq!(foreign.lost, tokens, "a lease is extended only by its holder");
}

pub(super) async fn duplicates_change_nothing_and_a_final_total_cannot_be_reopened(store: Arc<dyn JobStore>) {
    let run = store.create_run(&spec(SMALL, 1), &jobs(SMALL)).await.unwrap();
    let leases = store.lease(Some(run), "w", 100, TTL).await.unwrap();
    assert_eq!(leases.len(), 26);
    let done: Vec<Completion> = leases.iter().map(|l| completion(l, "w", true_count(l))).collect();
    store.complete_many(&done[..25]).await.unwrap();
    assert!(store.take_finished_runs().is_empty(), "not finished with a job to go");
    store.complete_many(&done[25..]).await.unwrap();
    let total = store.total(run).await.unwrap();
    assert!(total.is_final);
    assert_eq!(store.take_finished_runs(), vec![run], "the completion that finished the run says so");
    assert!(store.take_finished_runs().is_empty(), "once");

    let again = store.complete(&done[0]).await.unwrap();
    assert_eq!(again, CompleteOutcome::AlreadyDone);
    assert!(store.take_finished_runs().is_empty(), "a repeat finishes nothing again");
    assert_eq!(store.total(run).await.unwrap(), total, "a repeated completion changes nothing");

    // The holder contradicting itself is rejected; anyone else is stale.
    let mut wrong = done[1].clone();
    wrong.count += 1;
    assert!(matches!(store.complete(&wrong).await, Err(StoreError::Rejected { .. })));
    let mut other = wrong.clone();
    other.worker = "intruder".into();
    assert!(matches!(store.complete(&other).await, Err(StoreError::StaleToken { .. })));
    other.token = "made-up".into();
    assert!(matches!(store.complete(&other).await, Err(StoreError::StaleToken { .. })));
    assert_eq!(store.total(run).await.unwrap(), total, "a done job cannot be reopened from outside");
    assert_eq!(store.progress(run).await.unwrap().conflicts, 0);
    assert_eq!(store.progress(run).await.unwrap().rejected, 1);
    assert!(matches!(store.recount(done[2].job_id).await, Err(StoreError::Invalid(_))), "no conflict there");
}

pub(super) async fn disagreeing_identities_open_a_conflict_that_a_recount_resolves(store: Arc<dyn JobStore>) {
    let run = store.create_run(&spec(SMALL, 2), &jobs(SMALL)).await.unwrap();
    // Three identities, three different counts for one job: no quorum of 2 is possible.
    let mut job = None;
    for (i, worker) in ["a", "b", "c"].iter().enumerate() {
        let lease = store.lease(Some(run), worker, 1, TTL).await.unwrap().remove(0);
        let job_id = *job.get_or_insert(lease.job_id);
        assert_eq!(lease.job_id, job_id);
        let outcome = store.complete(&completion(&lease, worker, 1000 + i as u128)).await.unwrap();
        if i < 2 {
            assert_eq!(outcome, CompleteOutcome::Recorded);
        } else {
            assert_eq!(outcome, CompleteOutcome::Conflict { stored: 1000 });
        }
    }
    let job = job.unwrap();
    assert_eq!(store.progress(run).await.unwrap().conflicts, 1);
    // The rest of the run, by two agreeing identities.
    for worker in ["a", "b"] {
        let leases = store.lease(Some(run), worker, 100, TTL).await.unwrap();
        assert!(leases.iter().all(|l| l.job_id != job), "a conflicted job waits for a recount");
        let done: Vec<Completion> = leases.iter().map(|l| completion(l, worker, true_count(l))).collect();
        store.complete_many(&done).await.unwrap();
    }
    assert!(!store.total(run).await.unwrap().is_final, "an open conflict keeps the total provisional");
    store.recount(job).await.unwrap();
    for worker in ["a", "b"] {
        let lease = store.lease(Some(run), worker, 10, TTL).await.unwrap().remove(0);
        assert_eq!(lease.job_id, job, "a recount is a new round: the same identities vote again");
        store.complete(&completion(&lease, worker, true_count(&lease))).await.unwrap();
    }
    let total = store.total(run).await.unwrap();
    assert!(total.is_final);
    assert_eq!(total.weighted_sum, weighted_sum(SMALL));
    assert_eq!(total.answer, census(SMALL).published());
}

/// Issue 44: two identities that disagree make a conflict at once (a
/// quorum of two cannot form with them alone, and both are told nothing is
/// left); a third identity's quorum settles one job, the coordinator's own
/// count ([`JobStore::decide_conflict`]) the others, rejecting every vote
/// of another count, and the run finishes exactly.
pub(super) async fn two_disagreeing_identities_are_a_conflict_the_coordinators_count_decides(store: Arc<dyn JobStore>) {
    let run = store.create_run(&spec(SMALL, 2), &jobs(SMALL)).await.unwrap();
    let mut truth = std::collections::HashMap::new();
    for (worker, lie) in [("liar", 1), ("honest", 0)] {
        let leases = store.lease(Some(run), worker, 100, TTL).await.unwrap();
        assert_eq!(leases.len(), 26);
        truth.extend(leases.iter().map(|l| (l.job_id, true_count(l))));
        let votes: Vec<Completion> = leases.iter().map(|l| completion(l, worker, true_count(l) + lie)).collect();
        let outcomes = store.complete_many(&votes).await.unwrap();
        assert!(outcomes.iter().all(|o| matches!(o, Ok(CompleteOutcome::Recorded))), "{outcomes:?}");
        assert_eq!(store.progress(run).await.unwrap().conflicts, 26 * u64::from(lie == 0), "after {worker}");
    }
    for worker in ["liar", "honest"] {
        assert!(!store.has_work_for(worker, Some(run)).await.unwrap(), "{worker} voted on every job");
    }
    let progress = store.progress(run).await.unwrap();
    assert_eq!((progress.done, progress.conflicts, progress.rejected), (0, 26, 0), "{progress:?}");
    assert_eq!(progress.eta, None, "no rate of results ends conflicts that nobody counts: {progress:?}");
    assert!(store.conflicts_waiting(Duration::from_secs(3600), 100).await.unwrap().is_empty(), "not waited yet");
    let waiting = store.conflicts_waiting(Duration::ZERO, 100).await.unwrap();
    assert_eq!(waiting.len(), 26);
    assert!(waiting.iter().all(|c| c.run_id == run && c.census == census(SMALL)));

    // A third identity counting a job: the coordinator leaves it be; its quorum decides.
    let third = store.lease(Some(run), "third", 1, TTL).await.unwrap().remove(0);
    assert!(!store.decide_conflict(third.job_id, truth[&third.job_id]).await.unwrap(), "it is being counted");
    store.complete(&completion(&third, "third", true_count(&third))).await.unwrap();
    assert_eq!(store.progress(run).await.unwrap().conflicts, 25, "a quorum closed it");
    assert!(!store.decide_conflict(third.job_id, truth[&third.job_id]).await.unwrap(), "no conflict left on it");
    for conflict in store.conflicts_waiting(Duration::ZERO, 100).await.unwrap() {
        assert_ne!(conflict.job_id, third.job_id);
        assert!(store.decide_conflict(conflict.job_id, truth[&conflict.job_id]).await.unwrap());
        assert!(!store.decide_conflict(conflict.job_id, truth[&conflict.job_id]).await.unwrap(), "once");
    }
    let total = store.total(run).await.unwrap();
    assert!(total.is_final);
    assert_eq!(total.weighted_sum, weighted_sum(SMALL));
    assert_eq!(total.answer, census(SMALL).published());
    let progress = store.progress(run).await.unwrap();
    // The liar is rejected until it is quarantined (3 rejections); from then
    // on its votes no longer count, and the jobs it disputed stay in
    // conflict, with the honest votes, for the coordinator to decide.
    assert_eq!((progress.done, progress.conflicts, progress.rejected), (26, 0, 3), "{progress:?}");
    assert!(progress.workers.iter().any(|w| w.worker == crate::ARBITER && w.jobs == 25), "{:?}", progress.workers);
    let tokens: Vec<_> = store.quarantined().await.unwrap().into_iter().map(|q| q.worker).collect();
    assert_eq!(tokens, ["liar"], "the liar is quarantined; the honest identity is not");
    assert!(store.conflicts_waiting(Duration::ZERO, 100).await.unwrap().is_empty());
}

/// A job that keeps failing fails for good only once identities other
/// than the first have failed it too; meanwhile each worker is told
/// truthfully whether anything is left for it.
pub(super) async fn a_failing_job_fails_for_good_only_after_distinct_identities(store: Arc<dyn JobStore>) {
    let run = store.create_run(&spec(SMALL, 1), &jobs(SMALL)).await.unwrap();
    let mut job = None;
    for attempt in 1..=5 {
        let lease = store.lease(Some(run), "w", 1, TTL).await.unwrap().remove(0);
        assert_eq!(lease.attempt, attempt);
        *job.get_or_insert(lease.job_id) = lease.job_id;
        store.fail(lease.job_id, &lease.token, "w", "out of memory").await.unwrap();
    }
    let job = job.unwrap();
    assert_eq!(store.progress(run).await.unwrap().failed, 0, "one identity alone cannot fail a job");
    let rest = store.lease(Some(run), "w", 100, TTL).await.unwrap();
    assert_eq!(rest.len(), 25, "w, having failed the job 5 times, is not handed it again");
    assert!(rest.iter().all(|l| l.job_id != job));
    let done: Vec<Completion> = rest.iter().map(|l| completion(l, "w", true_count(l))).collect();
    store.complete_many(&done).await.unwrap();
    assert!(!store.has_work_for("w", Some(run)).await.unwrap(), "nothing is left for w");
    assert!(store.has_work_for("v", None).await.unwrap(), "the job waits for another identity");

    let lease = store.lease(None, "v", 10, TTL).await.unwrap().remove(0);
    assert_eq!((lease.job_id, lease.attempt), (job, 6));
    store.fail(job, &lease.token, "v", "out of memory").await.unwrap();
    let progress = store.progress(run).await.unwrap();
    assert_eq!((progress.failed, progress.done, progress.pending), (1, 25, 0), "two identities failed it: for good");
    for worker in ["w", "v", "u"] {
        assert!(!store.has_work_for(worker, None).await.unwrap(), "a failed job is no work for {worker}");
        assert!(store.lease(None, worker, 10, TTL).await.unwrap().is_empty());
    }
    assert!(!store.total(run).await.unwrap().is_final);

    assert_eq!(store.requeue(run, Some(job)).await.unwrap(), 1);
    assert!(store.has_work_for("w", None).await.unwrap(), "a requeue starts the job's failures afresh");
    let lease = store.lease(None, "w", 10, TTL).await.unwrap().remove(0);
    store.complete(&completion(&lease, "w", true_count(&lease))).await.unwrap();
    let total = store.total(run).await.unwrap();
    assert!(total.is_final);
    assert_eq!(total.answer, census(SMALL).published());
    assert!(!store.has_work_for("w", None).await.unwrap());
}

/// One token that leases and fails every job, again and again, is
/// quarantined after `quarantine_after_failures` failures, fails no job for
/// good, and leaves the whole run to an honest worker, which finishes it
/// exactly and is then told that nothing is left.
pub(super) async fn one_identity_failing_every_job_cannot_stall_a_run(store: Arc<dyn JobStore>) {
    let run = store.create_run(&russell(1), &jobs(RUSSELL)).await.unwrap();
    let mut failures = 0;
    'attack: for _ in 0..5 {
        for _ in 0..440 {
            let leases = store.lease(Some(run), "stall", 1, TTL).await.unwrap();
            let Some(lease) = leases.first() else { break 'attack };
            match store.fail(lease.job_id, &lease.token, "stall", "no").await {
                Ok(()) => failures += 1,
                Err(error) => panic!("{error}"),
            }
        }
    }
    assert_eq!(failures, 50, "the identity is quarantined at its 50th failure (the default limit)");
    assert!(store.is_quarantined("stall").await.unwrap());
    assert!(!store.has_work_for("stall", None).await.unwrap());
    let progress = store.progress(run).await.unwrap();
    assert_eq!((progress.failed, progress.leased, progress.done), (0, 0, 0), "{progress:?}");
    assert!(store.has_work_for("honest", None).await.unwrap());
    loop {
        let leases = store.lease(Some(run), "honest", 100, TTL).await.unwrap();
        if leases.is_empty() {
            break;
        }
        let done: Vec<Completion> = leases.iter().map(|l| completion(l, "honest", true_count(l))).collect();
        for outcome in store.complete_many(&done).await.unwrap() {
            assert_eq!(outcome.unwrap(), CompleteOutcome::Recorded);
        }
    }
    let total = store.total(run).await.unwrap();
    assert!(total.is_final);
    assert_eq!(total.answer.unwrap().to_string(), N0);
    assert!(!store.has_work_for("honest", None).await.unwrap(), "the worker is told the truth: nothing is left");
}

/// The issue 26 scenario: results that were not checked (validate fraction
/// below 1) made a run final with a wrong N0; the liar is then caught in
/// another run. Every job it counted goes back to the queue, the finished
/// run is unfinished again, and honest recounts make it final and exact.
pub(super) async fn quarantine_recounts_every_result_of_the_identity(store: Arc<dyn JobStore>) {
    let run = store.create_run(&russell(1), &jobs(RUSSELL)).await.unwrap();
    // Four lies that no check sampled, accepted.
    let lies = store.lease(Some(run), "liar", 4, TTL).await.unwrap();
    let lied: Vec<i64> = lies.iter().map(|l| l.job_id).collect();
    let reports: Vec<Completion> = lies.iter().map(|l| completion(l, "liar", true_count(l) + 1)).collect();
    for outcome in store.complete_many(&reports).await.unwrap() {
        assert_eq!(outcome.unwrap(), CompleteOutcome::Recorded);
    }
    let honest = store.lease(Some(run), "honest", 500, TTL).await.unwrap();
    assert_eq!(honest.len(), 436);
    let reports: Vec<Completion> = honest.iter().map(|l| completion(l, "honest", true_count(l))).collect();
    store.complete_many(&reports).await.unwrap();
    let wrong = store.total(run).await.unwrap();
    assert!(wrong.is_final, "unchecked lies can finish a run...");
    assert_ne!(wrong.answer.unwrap().to_string(), N0, "...with a wrong answer");

    // Caught: three sampled checks in another run disagree with it.
    catch_lying(store.as_ref(), "liar", SMALL).await;
    let reopened = store.total(run).await.unwrap();
    assert!(!reopened.is_final && reopened.answer.is_none(), "the liar's answer is final no more: {reopened:?}");
    assert!(!store.run(run).await.unwrap().is_final);
    let progress = store.progress(run).await.unwrap();
    assert_eq!((progress.done, progress.pending), (436, 4));
    assert_weighted_sum_adds_up(store.as_ref(), run, "the lies taken out").await;
    let classes = store.class_totals(run).await.unwrap();
    assert_eq!(classes.iter().map(|c| c.jobs_done).sum::<u32>(), 436, "the lies left their classes");
    assert!(store.lease(Some(run), "liar", 10, TTL).await.unwrap().is_empty(), "a quarantined identity leases nothing");

    let recount = store.lease(Some(run), "honest", 10, TTL).await.unwrap();
    let mut recounted: Vec<i64> = recount.iter().map(|l| l.job_id).collect();
    recounted.sort_unstable();
    assert_eq!(recounted, lied, "exactly the liar's jobs are counted again");
    let reports: Vec<Completion> = recount.iter().map(|l| completion(l, "honest", true_count(l))).collect();
    for outcome in store.complete_many(&reports).await.unwrap() {
        assert_eq!(outcome.unwrap(), CompleteOutcome::Recorded);
    }
    let total = store.total(run).await.unwrap();
    assert!(total.is_final);
    assert_eq!(total.weighted_sum.to_string(), PUBLISHED_S.to_string());
    assert_eq!(total.answer.unwrap().to_string(), N0);
}

/// With redundancy 2, a quarantined identity's votes stop counting: a job
/// it helped decide is decided again, without it.
pub(super) async fn quarantine_discards_the_identitys_votes(store: Arc<dyn JobStore>) {
    let run = store.create_run(&spec(SMALL, 2), &jobs(SMALL)).await.unwrap();
    for worker in ["colluder-a", "colluder-b"] {
        let leases = store.lease(Some(run), worker, 100, TTL).await.unwrap();
        let reports: Vec<Completion> = leases.iter().map(|l| completion(l, worker, true_count(l) + 1)).collect();
        store.complete_many(&reports).await.unwrap();
    }
    let wrong = store.total(run).await.unwrap();
    assert!(wrong.is_final, "two colluding identities at redundancy 2 agree on a wrong answer...");
    assert_ne!(wrong.answer, census(SMALL).published());
    // ...until one of them is caught (by a check in another run).
    let other = store.create_run(&russell(1), &jobs(RUSSELL)).await.unwrap();
    for lease in store.lease(Some(other), "colluder-a", 3, TTL).await.unwrap() {
        let checked = Completion { checked_count: Some(true_count(&lease)), ..completion(&lease, "colluder-a", 1) };
        assert!(store.complete(&checked).await.is_err());
    }
    assert!(store.is_quarantined("colluder-a").await.unwrap());
    assert_eq!(store.progress(run).await.unwrap().done, 0, "every job it voted on is decided again");
    // colluder-b's old votes belong to the old round: it would need a second identity to lie again.
    for worker in ["honest-a", "honest-b"] {
        let leases = store.lease(Some(run), worker, 100, TTL).await.unwrap();
        assert_eq!(leases.len(), 26);
        let reports: Vec<Completion> = leases.iter().map(|l| completion(l, worker, true_count(l))).collect();
        store.complete_many(&reports).await.unwrap();
    }
    let total = store.total(run).await.unwrap();
    assert!(total.is_final);
    assert_eq!(total.answer, census(SMALL).published());
}

/// Many concurrent lease calls of one identity never hold more than the
/// per-worker cap between them.
pub(super) async fn the_lease_cap_holds_under_concurrent_calls(store: Arc<dyn JobStore>) {
    let run = store.create_run(&russell(1), &jobs(RUSSELL)).await.unwrap();
    let calls: Vec<_> = (0..40)
        .map(|_| {
            let store = store.clone();
            tokio::spawn(async move { store.lease(Some(run), "greedy", 50, TTL).await.unwrap().len() })
        })
        .collect();
    let mut held = 0;
    for call in calls {
        held += call.await.unwrap();
    }
    assert_eq!(held, 50, "the cap is 50");
    assert_eq!(store.progress(run).await.unwrap().leased, 50);
    assert!(store.lease(Some(run), "greedy", 50, TTL).await.unwrap().is_empty());
    assert_eq!(store.lease(Some(run), "other", 50, TTL).await.unwrap().len(), 50, "the cap is per identity");
}

/// Reports of many callers at once (which a store may write together,
/// in one transaction) are each answered as if written alone: every
/// caller gets its own answers, in its own order, a refused report
/// refuses nothing else, and the run ends with the exact answer.
pub(super) async fn reports_of_many_callers_at_once_are_each_answered_as_their_own(store: Arc<dyn JobStore>) {
    let run = store.create_run(&russell(1), &jobs(RUSSELL)).await.unwrap();
    let mut batches = Vec::new();
    for w in 0..20 {
        let worker = format!("caller-{w}");
        let leases = store.lease(Some(run), &worker, 22, TTL).await.unwrap();
        assert_eq!(leases.len(), 22);
        batches.push((worker, leases));
    }
    let mut reports: Vec<Vec<Completion>> = batches
        .iter()
        .map(|(worker, leases)| leases.iter().map(|l| completion(l, worker, true_count(l))).collect())
        .collect();
    // caller-1: a made-up token; caller-2: a count an independent check
    // refutes; caller-3: a job twice; caller-4: a job caller-5 holds.
    reports[1][0].token = "made-up".into();
    let checked = reports[2][5].count;
    reports[2][5] = Completion { checked_count: Some(checked), count: checked + 1, ..reports[2][5].clone() };
    let twice = reports[3][7].clone();
    reports[3].push(twice);
    let foreign = Completion { worker: "caller-4".into(), ..reports[5][3].clone() };
    reports[4].push(foreign);
    let calls: Vec<_> = reports
        .iter()
        .map(|batch| {
            let (store, batch) = (store.clone(), batch.clone());
            tokio::spawn(async move { store.complete_many(&batch).await.unwrap() })
        })
        .collect();
    let mut answers = Vec::new();
    for call in calls {
        answers.push(call.await.unwrap());
    }
    for (w, answer) in answers.iter().enumerate() {
        assert_eq!(answer.len(), reports[w].len(), "caller-{w}: one answer a report");
        for (i, outcome) in answer.iter().enumerate() {
            let job = reports[w][i].job_id;
            match (w, i) {
                (1, 0) | (4, 22) => {
                    assert!(matches!(outcome, Err(StoreError::StaleToken { .. })), "caller-{w}: {outcome:?}")
                }
                (2, 5) => assert!(matches!(outcome, Err(StoreError::Rejected { .. })), "caller-{w}: {outcome:?}"),
                (3, 22) => {
                    assert_eq!(outcome.as_ref().unwrap(), &CompleteOutcome::AlreadyDone, "caller-{w}, job {job}")
                }
                _ => assert_eq!(outcome.as_ref().unwrap(), &CompleteOutcome::Recorded, "caller-{w}, job {job}"),
            }
        }
    }
    let progress = store.progress(run).await.unwrap();
    assert_eq!((progress.done, progress.pending, progress.leased, progress.rejected), (438, 1, 1, 1));
    // The job with the made-up token is still caller-1's; the refuted one is anyone's.
    let (_, held) = &batches[1];
    let right = completion(&held[0], "caller-1", true_count(&held[0]));
    assert_eq!(store.complete(&right).await.unwrap(), CompleteOutcome::Recorded);
    drain(&*store, run, "last").await;
    let total = store.total(run).await.unwrap();
    assert!(total.is_final);
    assert_eq!(total.answer.unwrap().to_string(), "6670903752021072936960");
}

/// A worker at its cap whose leases expired leases again: the cap counts
/// the leases it holds now, not the jobs still marked as its leases until
/// another identity takes them over (which the lease reads first, from a
/// count a trigger keeps), and each report makes room again.
pub(super) async fn a_worker_whose_leases_expired_is_under_its_cap_again(store: Arc<dyn JobStore>) {
    let run = store.create_run(&russell(1), &jobs(RUSSELL)).await.unwrap();
    assert_eq!(store.lease(Some(run), "slow", 50, Duration::from_millis(1)).await.unwrap().len(), 50);
    // Past the 1 ms TTL on the store's millisecond clock, however slow the machine.
    tokio::time::sleep(Duration::from_millis(20)).await;
    let again = store.lease(Some(run), "slow", 50, TTL).await.unwrap();
    assert_eq!(again.len(), 50, "expired leases are not held");
    assert!(store.lease(Some(run), "slow", 1, TTL).await.unwrap().is_empty(), "and now it is at its cap");
    let reports: Vec<Completion> = again[..10].iter().map(|l| completion(l, "slow", true_count(l))).collect();
    store.complete_many(&reports).await.unwrap();
    assert_eq!(store.lease(Some(run), "slow", 50, TTL).await.unwrap().len(), 10, "each report makes room");
}

/// Progress lists the identities with the most jobs, at most
/// [`crate::WORKERS_LISTED`], and says how many there are: a poll of a run
/// of 10,000 workers is not 10,000 lines.
pub(super) async fn progress_lists_the_busiest_workers_and_counts_them_all(store: Arc<dyn JobStore>) {
    let run = store.create_run(&russell(1), &jobs(RUSSELL)).await.unwrap();
    let listed = crate::WORKERS_LISTED as usize;
    let report = |worker: String| {
        let store = store.clone();
        async move {
            let lease = store.lease(Some(run), &worker, 1, TTL).await.unwrap().remove(0);
            store.complete(&completion(&lease, &worker, true_count(&lease))).await.unwrap();
        }
    };
    for n in 0..=listed {
        report(format!("w{n:03}")).await;
    }
    // The last by name has the most jobs.
    report(format!("w{listed:03}")).await;
    let progress = store.progress(run).await.unwrap();
    assert_eq!((progress.workers_total, progress.workers.len()), (listed as u64 + 1, listed));
    let first = &progress.workers[0];
    assert_eq!((first.worker.clone(), first.jobs), (format!("w{listed:03}"), 2), "most jobs first");
    let rest: Vec<String> = progress.workers[1..].iter().map(|w| w.worker.clone()).collect();
    assert_eq!(rest, (0..listed - 1).map(|n| format!("w{n:03}")).collect::<Vec<_>>(), "then by name");
}

pub(super) async fn redundant_runs_need_distinct_agreeing_workers(store: Arc<dyn JobStore>) {
    let run = store.create_run(&spec(SMALL, 2), &jobs(SMALL)).await.unwrap();
    let a = store.lease(Some(run), "a", 100, TTL).await.unwrap();
    let done: Vec<Completion> = a.iter().map(|l| completion(l, "a", true_count(l))).collect();
    store.complete_many(&done).await.unwrap();
    assert_eq!(store.progress(run).await.unwrap().done, 0, "one vote is not enough");
    assert!(store.lease(Some(run), "a", 100, TTL).await.unwrap().is_empty(), "a worker votes once per job");
    let b = store.lease(Some(run), "b", 100, TTL).await.unwrap();
    assert_eq!(b.len(), 26);
    let done: Vec<Completion> = b.iter().map(|l| completion(l, "b", true_count(l))).collect();
    store.complete_many(&done).await.unwrap();
    let total = store.total(run).await.unwrap();
    assert!(total.is_final);
    assert_eq!(total.weighted_sum, weighted_sum(SMALL));
    assert_eq!(total.answer, census(SMALL).published());
}

pub(super) async fn bad_input_gets_a_typed_error(store: Arc<dyn JobStore>) {
    let run = store.create_run(&russell(1), &jobs(RUSSELL)).await.unwrap();
    assert!(matches!(store.progress(run + 1000).await, Err(StoreError::UnknownRun(_))));
    assert!(matches!(store.lease(Some(run + 1000), "w", 1, TTL).await, Err(StoreError::UnknownRun(_))));
    let lease = store.lease(Some(run), "w", 1, TTL).await.unwrap().remove(0);
    let mut unknown = completion(&lease, "w", 1);
    unknown.job_id = 1_000_000;
    assert!(matches!(store.complete(&unknown).await, Err(StoreError::UnknownJob(1_000_000))));
    let foreign = store.complete(&Completion { key: "another job".into(), ..completion(&lease, "w", 1) }).await;
    let message = foreign.as_ref().unwrap_err().to_string();
    assert!(matches!(foreign, Err(StoreError::Rejected { .. })), "{message}");
    assert!(message.contains("but the job is"), "{message}");
    let lease = store.lease(Some(run), "w", 1, TTL).await.unwrap().remove(0);
    // Over 64 bits: both backends record it (NUMERIC; decimal TEXT in SQLite).
    let huge = store.complete(&completion(&lease, "w", u128::from(u64::MAX) + 1)).await;
    assert!(matches!(huge, Ok(CompleteOutcome::Recorded)), "{huge:?}");
    let lease = store.lease(Some(run), "w", 1, TTL).await.unwrap().remove(0);
    let mut stale = completion(&lease, "w", 1);
    stale.token = "not-a-token".into();
    assert!(matches!(store.complete(&stale).await, Err(StoreError::StaleToken { .. })));
    assert!(matches!(store.fail(lease.job_id, "not-a-token", "w", "x").await, Err(StoreError::StaleToken { .. })));
    let job = |key: &str, group: &str, weight: u128| JobSpec { key: key.into(), group: group.into(), weight };
    for (bad, says) in [
        (vec![], "at least one job"),
        (vec![job("a", "g", 1), job("a", "g", 1)], "given twice"),
        (vec![job("a", "g", 1), job("b", "g", 2)], "two weights"),
        (vec![job("", "g", 1)], "job key"),
        (vec![job(&"k".repeat(201), "g", 1)], "job key"),
    ] {
        let refused = store.create_run(&russell(2), &bad).await;
        let message = refused.as_ref().unwrap_err().report();
        assert!(matches!(refused, Err(StoreError::Invalid(_))), "{message}");
        assert!(message.contains(says), "{says}: {message}");
    }
    // Nothing stored was touched by the refusals.
    assert_eq!(store.list_runs().await.unwrap().len(), 1);
    assert!(store.progress(run).await.unwrap().done <= 1);
}

/// A run whose jobs are not its census's own never gets an answer: the
/// completion that would finish it is refused, naming the missing job.
pub(super) async fn a_forged_job_list_never_folds(store: Arc<dyn JobStore>) {
    let mut forged = jobs(SMALL);
    let dropped = forged.pop().unwrap();
    let run = store.create_run(&spec(SMALL, 1), &forged).await.unwrap();
    let leases = store.lease(Some(run), "w", 100, TTL).await.unwrap();
    let done: Vec<Completion> = leases.iter().map(|l| completion(l, "w", true_count(l))).collect();
    let refused = store.complete_many(&done).await;
    let message = refused.as_ref().err().map(StoreError::report).unwrap_or_default();
    assert!(matches!(refused, Err(StoreError::Fold(_))), "{refused:?}");
    assert!(message.contains(&dropped.key), "{message}");
    let total = store.total(run).await.unwrap();
    assert!(!total.is_final && total.answer.is_none());
}

/// Counts far beyond 64 bits are recorded, summed, reopened and folded
/// exactly: the 2x4 shape's 26 jobs, each reported with a count near 2^127
/// (its class sum squared, times the weight, passes 2^254), in batches that
/// put several such counts into one run's sums at once. What the store
/// says is compared with sums made here in `num-bigint`.
pub(super) async fn counts_beyond_64_bits_are_exact(store: Arc<dyn JobStore>) {
    use num_bigint::BigUint;
    let census = census(SMALL);
    let jobs = jobs(SMALL);
    let run = store.create_run(&spec(SMALL, 1), &jobs).await.unwrap();
    // A different count for every job, all above 2^126.
    let big = |key: &str| (1u128 << 126) + jobs.iter().position(|job| job.key == key).unwrap() as u128 * 1_000_003;
    let leases = store.lease(Some(run), "w", 100, TTL).await.unwrap();
    assert_eq!(leases.len(), jobs.len());
    let (first, rest) = leases.split_at(10);
    let done: Vec<Completion> = first.iter().map(|l| completion(l, "w", big(&l.key))).collect();
    store.complete_many(&done).await.unwrap().into_iter().for_each(|outcome| outcome.map(drop).unwrap());

    let expected_weighted = |done: &[&str]| -> BigUint {
        let mut sums: std::collections::BTreeMap<&str, (u128, BigUint)> = Default::default();
        for job in jobs.iter().filter(|job| done.contains(&job.key.as_str())) {
            let class = sums.entry(&job.group).or_insert((job.weight, BigUint::default()));
            class.1 += big(&job.key);
        }
        sums.values().map(|(weight, sum)| BigUint::from(*weight) * sum.pow(census.class_power())).sum()
    };
    let first_keys: Vec<&str> = first.iter().map(|l| l.key.as_str()).collect();
    let partial = store.total(run).await.unwrap();
    assert!(!partial.is_final);
    assert_eq!(partial.weighted_sum, expected_weighted(&first_keys));
    assert!(partial.weighted_sum > BigUint::from(u128::MAX), "{}", partial.weighted_sum);
    let progress = store.progress(run).await.unwrap();
    let counted: BigUint = first_keys.iter().map(|key| BigUint::from(big(key))).sum();
    assert_eq!(progress.completions_counted, counted.to_string());
    assert_eq!(progress.workers[0].completions, counted.to_string());

    let done: Vec<Completion> = rest.iter().map(|l| completion(l, "w", big(&l.key))).collect();
    store.complete_many(&done).await.unwrap().into_iter().for_each(|outcome| outcome.map(drop).unwrap());
    let all_keys: Vec<&str> = jobs.iter().map(|job| job.key.as_str()).collect();
    let total = store.total(run).await.unwrap();
    assert!(total.is_final);
    assert_eq!(total.weighted_sum, expected_weighted(&all_keys));
    let counts: Vec<u128> = jobs.iter().map(|job| big(&job.key)).collect();
    assert_eq!(total.answer, Some(census.fold(&jobs, &counts).unwrap().value));
    for class in store.class_totals(run).await.unwrap() {
        let sum: BigUint =
            jobs.iter().filter(|job| job.group == class.label).map(|job| BigUint::from(big(&job.key))).sum();
        assert_eq!(class.count_sum, sum, "class {}", class.label);
    }
}

/// The 9x9 count's N0 (Felgenhauer and Jarvis, 2006).
const N0: &str = "6670903752021072936960";

/// Progress reports a speed once a minute holds more results than the
/// speed's index walk reads (10,000): the stacks-and-columns stage, 20,510
/// jobs, counted by one worker in batches.
pub(super) async fn progress_reports_the_speed_of_many_recent_results(store: Arc<dyn JobStore>) {
    const STAGE: &str = "sudoku stage=stacks-columns counter=column-sets";
    let run = store.create_run(&spec(STAGE, 1), &jobs(STAGE)).await.unwrap();
    let mut done = 0;
    while done <= 12_000 {
        let leases = store.lease(Some(run), "w", 2048, TTL).await.unwrap();
        let reports: Vec<Completion> = leases.iter().map(|l| completion(l, "w", true_count(l))).collect();
        store.complete_many(&reports).await.unwrap();
        done += leases.len();
    }
    let progress = store.progress(run).await.unwrap();
    assert_eq!(progress.done, done as u64);
    // The walk reads the newest 10,000 results, which all lie in the last
    // minute: the speed is 10,000 over their span, a minute at most, so at
    // least 10,000 a minute whatever the machine's speed (the exact
    // arithmetic is `totals::speed`'s unit test), and a number.
    assert!(progress.jobs_per_second.is_finite(), "{progress:?}");
    assert!(progress.jobs_per_second >= 10_000.0 / 60.0, "{} jobs/s, below 10,000 a minute", progress.jobs_per_second);
    // The ETA is the jobs left at that speed.
    let left = (progress.jobs_total - progress.done) as f64;
    let eta = progress.eta.expect("jobs are left, at a speed").as_secs_f64();
    assert!((eta * progress.jobs_per_second - left).abs() <= 1e-6 * left, "{progress:?}");
    // Every job of the 9x9 count costs 1: progress by cost is progress by
    // jobs, and the ETA (by cost) is what it was by jobs.
    assert_eq!((progress.cost_total, progress.cost_done), (progress.jobs_total, progress.done));
    assert_eq!(progress.cost_per_second, progress.jobs_per_second);
    assert_eq!(progress.eta, Some(std::time::Duration::from_secs_f64(left / progress.jobs_per_second)));
}

/// The weighted sum so far follows every change of the classes' count
/// sums: results accepted, and results taken out again by a quarantine,
/// with class_power 2 (a class's contribution is weight x F^2, so taking
/// out part of F changes it by more than the part), to the exact total.
pub(super) async fn the_weighted_sum_so_far_follows_the_classes(store: Arc<dyn JobStore>) {
    let run = store.create_run(&spec(SMALL, 1), &jobs(SMALL)).await.unwrap();
    assert_weighted_sum_adds_up(store.as_ref(), run, "nothing counted").await;
    let lies = store.lease(Some(run), "liar", 5, TTL).await.unwrap();
    let reports: Vec<Completion> = lies.iter().map(|l| completion(l, "liar", true_count(l) + 7)).collect();
    store.complete_many(&reports).await.unwrap();
    let honest = store.lease(Some(run), "honest", 10, TTL).await.unwrap();
    let reports: Vec<Completion> = honest.iter().map(|l| completion(l, "honest", true_count(l))).collect();
    store.complete_many(&reports).await.unwrap();
    assert_eq!(store.progress(run).await.unwrap().done, 15);
    assert_weighted_sum_adds_up(store.as_ref(), run, "15 results in").await;

    // Caught in another run: its five results leave their classes.
    let other = catch_lying(store.as_ref(), "liar", RUSSELL).await;
    assert_eq!(store.progress(run).await.unwrap().done, 10);
    assert_weighted_sum_adds_up(store.as_ref(), run, "the liar's results taken out").await;
    assert_weighted_sum_adds_up(store.as_ref(), other, "nothing accepted in the other run").await;

    assert_eq!(drain(store.as_ref(), run, "honest").await.len(), 16);
    let total = store.total(run).await.unwrap();
    assert!(total.is_final);
    assert_eq!(total.weighted_sum, weighted_sum(SMALL));
    assert_eq!(total.answer, census(SMALL).published());
}
