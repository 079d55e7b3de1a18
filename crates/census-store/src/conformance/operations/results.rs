//! [`ResultStorage`]: what a batch of reports reads and writes.

use std::collections::BTreeMap;
use std::sync::Arc;

use num_bigint::BigUint;

use super::runs::all_classes;
use super::{
    BIG, CLASSES, LeaseJobs, NOW, decide, insert_run, lease, lease_of, new_run, record, result, row_of, run_row, spec,
};
use crate::backend::{
    ClassChanges, JobState, NewJob, NewRun, Recent, RefusedReport, Rejection, ResultOutcome, RunChange, StorageBackend,
    WorkerTally, parse_big,
};
use crate::{RunId, StoreError};

pub(super) async fn jobs_are_loaded_with_their_runs<B: StorageBackend>(backend: Arc<B>) {
    let spec = spec(1, 3);
    let jobs =
        [NewJob { class: 0, key: "k0", stage: None, cost: 1 }, NewJob { class: 1, key: "k1", stage: None, cost: 4 }];
    let (run, ids) = insert_run(&*backend, run_row(&spec), &CLASSES, &jobs).await;
    let leased = lease(&*backend, &lease_of(run, "w")).await.remove(0);
    let mut tx = backend.begin().await.unwrap();
    let loaded = backend.load_jobs(&mut tx, &[ids[0], ids[1], ids[1] + 100]).await.unwrap();
    let read: Vec<_> = loaded.iter().map(|job| (job.id, job.run, job.class, job.key.as_str(), job.attempt)).collect();
    assert_eq!(read, [(ids[0], run, 0, "k0", 1), (ids[1], run, 1, "k1", 0)]);
    let read: Vec<_> =
        loaded.iter().map(|job| (job.votes, job.round, job.redundancy, job.cancelled, job.cost)).collect();
    assert_eq!(read, [(0, 0, 3, false, 1), (0, 0, 3, false, 4)]);
    assert!(loaded.iter().all(|job| job.counter_version == "check/1"));
    assert!(loaded[0].lease.held_by("w", &leased.token, NOW));
    assert_eq!(loaded[1].lease.state, JobState::Pending);
    backend.mark_cancelled(&mut tx, run, NOW).await.unwrap();
    assert!(backend.load_jobs(&mut tx, &ids).await.unwrap().iter().all(|job| job.cancelled), "its run cancelled");
}

pub(super) async fn votes_are_loaded_in_the_order_recorded<B: StorageBackend>(backend: Arc<B>) {
    let (run, ids) = new_run(&*backend, 1, 3).await;
    for (job, worker, count, outcome, round) in [
        (ids[0], "w", 5, ResultOutcome::Vote, 0),
        (ids[0], "x", 6, ResultOutcome::Conflict, 0),
        (ids[1], "y", BIG, ResultOutcome::Accepted, 0),
        (ids[2], "y", 1, ResultOutcome::Accepted, 0),
        (ids[0], "z", 7, ResultOutcome::Accepted, 1),
    ] {
        record(&*backend, &[result(job, run, worker, count, outcome, round)], NOW).await;
    }
    let mut tx = backend.begin().await.unwrap();
    let votes = backend.load_votes(&mut tx, &[ids[0], ids[1]]).await.unwrap();
    let read: Vec<_> = votes.iter().map(|v| (v.job, v.worker.as_str(), v.count, v.outcome, v.round)).collect();
    assert_eq!(
        read,
        [
            (ids[0], "w", 5, ResultOutcome::Vote, 0),
            (ids[1], "y", BIG, ResultOutcome::Accepted, 0),
            (ids[0], "z", 7, ResultOutcome::Accepted, 1)
        ]
    );
}

pub(super) async fn results_are_appended_exactly<B: StorageBackend>(backend: Arc<B>) {
    let (run, ids) = new_run(&*backend, 1, 2).await;
    let first = super::NewResult { cost: 3, ..result(ids[0], run, "w", BIG, ResultOutcome::Vote, 0) };
    record(&*backend, &[first, result(ids[1], run, "x", 0, ResultOutcome::Accepted, 0)], NOW + 5).await;
    let mut tx = backend.begin().await.unwrap();
    let votes = backend.load_votes(&mut tx, &ids).await.unwrap();
    assert_eq!(votes.iter().map(|vote| vote.count).collect::<Vec<_>>(), [BIG, 0]);
    backend.rollback(tx).await.unwrap();
    let recent = backend.recent_results(&Recent { run, since: NOW + 5, limit: 10 }).await.unwrap();
    assert_eq!((recent.results, recent.cost, recent.oldest), (2, 4, Some(NOW + 5)), "finished at now");
}

pub(super) async fn a_decided_job_takes_its_state_and_its_lease_is_retired<B: StorageBackend>(backend: Arc<B>) {
    let (run, ids) = new_run(&*backend, 1, 2).await;
    lease(&*backend, &LeaseJobs { wanted: 2, ..lease_of(run, "w") }).await;
    decide(&*backend, &[(ids[0], JobState::Done, Some(BIG), 2), (ids[1], JobState::Pending, None, 1)]).await;
    for (job, state) in [(ids[0], JobState::Done), (ids[1], JobState::Pending)] {
        let row = row_of(&*backend, job).await;
        assert_eq!(row.lease.state, state);
        assert_eq!((row.lease.token, row.lease.owner, row.lease.expires_at), (None, None, None), "retired");
    }
    // No count given: the job keeps its own.
    decide(&*backend, &[(ids[0], JobState::Done, None, 0)]).await;
    let mut tx = backend.begin().await.unwrap();
    let loaded = backend.load_jobs(&mut tx, &ids).await.unwrap();
    assert_eq!(loaded.iter().map(|job| job.votes).collect::<Vec<_>>(), [2, 1]);
    let reopened = backend.lock_jobs_to_reopen(&mut tx, &ids).await.unwrap();
    assert_eq!(reopened[0].count, Some(BigUint::from(BIG)));
    assert_eq!(reopened[1].count, None);
}

pub(super) async fn a_flagged_job_has_a_conflict<B: StorageBackend>(backend: Arc<B>) {
    let (run, ids) = new_run(&*backend, 1, 2).await;
    let mut tx = backend.begin().await.unwrap();
    assert!(!backend.lock_flagged_job(&mut tx, ids[0]).await.unwrap().unwrap().conflict);
    backend.flag_conflicts(&mut tx, &[ids[0]]).await.unwrap();
    backend.commit(tx).await.unwrap();
    let mut tx = backend.begin().await.unwrap();
    let flagged = backend.lock_flagged_job(&mut tx, ids[0]).await.unwrap().unwrap();
    assert_eq!((flagged.id, flagged.run, flagged.conflict), (ids[0], run, true));
    assert!(!backend.lock_flagged_job(&mut tx, ids[1]).await.unwrap().unwrap().conflict);
}

/// A class's count sum, jobs done and contribution.
type Sums = (BigUint, u32, BigUint);

/// The run's classes' sums and its weighted sum so far.
async fn class_sums<B: StorageBackend>(backend: &B, run: RunId) -> (Vec<Sums>, BigUint) {
    let totals = backend.class_totals(&all_classes(run)).await.unwrap();
    let mut tx = backend.begin().await.unwrap();
    let sums = backend.class_sums_page(&mut tx, &all_classes(run)).await.unwrap();
    let classes = totals
        .into_iter()
        .zip(sums)
        .map(|(total, sums)| (total.count_sum, total.jobs_done, sums.contribution))
        .collect();
    (classes, backend.weighted_sum_so_far(Some(&mut tx), run).await.unwrap())
}

/// A count and jobs done added to (or taken out of) a run's class.
pub(super) type ClassChange = ((RunId, i64), (BigUint, i64));

/// Adds `changes` in a transaction of their own.
pub(super) async fn add<B: StorageBackend>(backend: &B, changes: &[ClassChange]) {
    let changes: ClassChanges = changes.iter().cloned().collect();
    let mut tx = backend.begin().await.unwrap();
    backend.add_to_classes(&mut tx, &changes).await.unwrap();
    backend.commit(tx).await.unwrap();
}

pub(super) async fn counts_are_added_to_classes_and_their_runs_exactly<B: StorageBackend>(backend: Arc<B>) {
    let big = |n: u128| BigUint::from(n);
    let (run, _) = new_run(&*backend, 1, 6).await;
    let spec = spec(2, 1);
    let row = NewRun { class_power: 2, ..run_row(&spec) };
    let jobs = [NewJob { class: 0, key: "k", stage: None, cost: 1 }];
    let (squared, _) = insert_run(&*backend, row, &CLASSES, &jobs).await;
    let huge = BigUint::from(2u32).pow(100);
    add(&*backend, &[((run, 0), (huge.clone(), 1)), ((run, 1), (big(5), 2)), ((squared, 0), (big(BIG), 1))]).await;
    add(&*backend, &[((run, 0), (big(1), 1))]).await;
    let (classes, so_far) = class_sums(&*backend, run).await;
    let a = &huge + 1u32;
    assert_eq!(classes, [(a.clone(), 2, &a * 2u32), (big(5), 2, big(15))]);
    assert_eq!(so_far, &a * 2u32 + 15u32);
    let (classes, so_far) = class_sums(&*backend, squared).await;
    let contribution = big(BIG) * big(BIG) * 2u32;
    assert_eq!(classes, [(big(BIG), 1, contribution.clone()), (big(0), 0, big(0))], "weight x sum^2");
    assert_eq!(so_far, contribution);
}

pub(super) async fn an_identitys_statistics_add_up<B: StorageBackend>(backend: Arc<B>) {
    let (run, _) = new_run(&*backend, 1, 2).await;
    let tally = |jobs, completions: u128| WorkerTally { jobs, completions: completions.into() };
    for (now, workers) in [
        (NOW, vec![((run, "w"), tally(2, BIG)), ((run, "x"), tally(1, 5))]),
        (NOW + 5000, vec![((run, "w"), tally(1, BIG))]),
    ] {
        let workers: BTreeMap<(RunId, String), WorkerTally> =
            workers.into_iter().map(|((run, worker), tally)| ((run, worker.to_string()), tally)).collect();
        let mut tx = backend.begin().await.unwrap();
        backend.add_to_worker_stats(&mut tx, &workers, now).await.unwrap();
        backend.commit(tx).await.unwrap();
    }
    let stats = backend.worker_stats(run, 10).await.unwrap();
    let read: Vec<_> =
        stats.iter().map(|s| (s.worker.as_str(), s.jobs, s.completions.clone(), s.last_seen_unix)).collect();
    let twice = (BigUint::from(BIG) * 2u32).to_string();
    assert_eq!(read, [("w", 3, twice, (NOW + 5000) / 1000), ("x", 1, "5".to_string(), NOW / 1000)]);
}

pub(super) async fn a_runs_counters_add_up<B: StorageBackend>(backend: Arc<B>) {
    let (run, _) = new_run(&*backend, 1, 6).await;
    let counted = BigUint::from(2u32).pow(70);
    let change = RunChange { done: 2, cost_done: 3, conflicts_opened: 1, failed_added: 1, counted: counted.clone() };
    let mut tx = backend.begin().await.unwrap();
    backend.add_to_run(&mut tx, run, &change).await.unwrap();
    let state = backend.add_to_run(&mut tx, run, &change).await.unwrap();
    assert_eq!((state.jobs_total, state.jobs_remaining, state.cost_done), (6, 2, 6), "the state after it");
    assert_eq!((state.open_conflicts, state.failed_jobs, state.finished_at), (2, 2, None));
    assert_eq!(parse_big(&state.counted).unwrap(), counted * 2u32);
    let unknown = backend.add_to_run(&mut tx, run + 1, &change).await.unwrap_err();
    assert!(matches!(unknown, StoreError::UnknownRun(r) if r == run + 1), "{unknown}");
}

pub(super) async fn rejections_are_appended<B: StorageBackend>(backend: Arc<B>) {
    let (run, ids) = new_run(&*backend, 1, 2).await;
    let rejection = |job, worker: &str| Rejection {
        job,
        run,
        attempt: 1,
        worker: worker.into(),
        count: BIG,
        reason: "wrong".into(),
    };
    let mut tx = backend.begin().await.unwrap();
    backend.insert_rejections(&mut tx, &[rejection(ids[0], "w"), rejection(ids[1], "w")], NOW).await.unwrap();
    backend.commit(tx).await.unwrap();
    assert_eq!(backend.rejections_in(run).await.unwrap(), 2);
    let mut tx = backend.begin().await.unwrap();
    assert_eq!(backend.rejections_of(&mut tx, "w").await.unwrap(), 2);
}

/// A refused report names a job that does not exist: it is kept against
/// its sender, in no run.
pub(super) async fn refused_reports_are_appended_against_their_sender<B: StorageBackend>(backend: Arc<B>) {
    let (run, _) = new_run(&*backend, 1, 1).await;
    let refused = |worker: &str| RefusedReport { worker: worker.into(), job_named: 1_000_000, reason: "unread".into() };
    let mut tx = backend.begin().await.unwrap();
    backend.insert_refused_report(&mut tx, &refused("w"), NOW).await.unwrap();
    backend.insert_refused_report(&mut tx, &refused("w"), NOW).await.unwrap();
    assert_eq!(backend.rejections_of(&mut tx, "w").await.unwrap(), 2, "its own writes");
    backend.commit(tx).await.unwrap();
    let mut tx = backend.begin().await.unwrap();
    assert_eq!(backend.rejections_of(&mut tx, "w").await.unwrap(), 2);
    assert_eq!(backend.rejections_of(&mut tx, "x").await.unwrap(), 0);
    backend.rollback(tx).await.unwrap();
    assert_eq!(backend.rejections_in(run).await.unwrap(), 0, "no run's rejection");
}

pub(super) async fn an_identitys_rejections_are_counted_in_every_run<B: StorageBackend>(backend: Arc<B>) {
    let (first, one) = new_run(&*backend, 1, 1).await;
    let (second, two) = new_run(&*backend, 2, 1).await;
    let rejection = |job, run, worker: &str| Rejection {
        job,
        run,
        attempt: 1,
        worker: worker.into(),
        count: 1,
        reason: "wrong".into(),
    };
    let rejections = [
        rejection(one[0], first, "w"),
        rejection(two[0], second, "w"),
        rejection(two[0], second, "w"),
        rejection(one[0], first, "x"),
    ];
    let mut tx = backend.begin().await.unwrap();
    backend.insert_rejections(&mut tx, &rejections, NOW).await.unwrap();
    // And its refused reports, which name no job.
    let refused = RefusedReport { worker: "x".into(), job_named: two[0] + 100, reason: "unread".into() };
    backend.insert_refused_report(&mut tx, &refused, NOW).await.unwrap();
    for (worker, rejected) in [("w", 3), ("x", 2), ("y", 0)] {
        assert_eq!(backend.rejections_of(&mut tx, worker).await.unwrap(), rejected, "{worker}");
    }
}
