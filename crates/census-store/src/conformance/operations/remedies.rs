//! [`RemedyStorage`]: reopening jobs for a new round, failures, requeues.

use std::sync::Arc;

use num_bigint::BigUint;

use super::results::add;
use super::runs::all_classes;
use super::{
    BIG, CLASSES, LeaseJobs, NOW, TTL, decide, insert_run, jobs_of, keys, lease, lease_of, new_run, record, result,
    row_of, run_row, spec,
};
use crate::backend::{
    ClassChanges, FailureTally, FinishedAnswer, JobState, NewFailure, NewJob, NewRun, ResultOutcome, RunChange,
    RunTakeOut, StorageBackend, parse_big,
};
use crate::conformance::fixtures;
use crate::{JobId, RunId};

/// Sets the job's state and failures, in a transaction of its own.
async fn tally<B: StorageBackend>(backend: &B, job: JobId, next: JobState, failures: i64) {
    let mut tx = backend.begin().await.unwrap();
    backend.set_failures(&mut tx, &FailureTally { job, next, failures }, NOW).await.unwrap();
    backend.commit(tx).await.unwrap();
}

/// Flags conflicts on `jobs`, in a transaction of their own.
async fn flag<B: StorageBackend>(backend: &B, jobs: &[JobId]) {
    let mut tx = backend.begin().await.unwrap();
    backend.flag_conflicts(&mut tx, jobs).await.unwrap();
    backend.commit(tx).await.unwrap();
}

/// Appends failures of (job, identity, epoch), in a transaction of their own.
async fn fail<B: StorageBackend>(backend: &B, failures: &[(JobId, &str, i64)]) {
    let mut tx = backend.begin().await.unwrap();
    for &(job, worker, epoch) in failures {
        let failure = NewFailure { job, attempt: 1, worker, reason: "cannot count", failed_at: NOW, epoch };
        backend.insert_failure(&mut tx, &failure).await.unwrap();
    }
    backend.commit(tx).await.unwrap();
}

pub(super) async fn jobs_to_reopen_are_read_with_their_counts<B: StorageBackend>(backend: Arc<B>) {
    let spec = spec(1, 1);
    let jobs = [
        NewJob { class: 1, key: "k0", stage: None, cost: 4 },
        NewJob { class: 0, key: "k1", stage: None, cost: 1 },
        NewJob { class: 0, key: "k2", stage: None, cost: 1 },
    ];
    let (run, ids) = insert_run(&*backend, run_row(&spec), &CLASSES, &jobs).await;
    decide(&*backend, &[(ids[0], JobState::Done, Some(BIG), 1)]).await;
    tally(&*backend, ids[2], JobState::Failed, 1).await;
    let mut tx = backend.begin().await.unwrap();
    backend.flag_conflicts(&mut tx, &[ids[1]]).await.unwrap();
    let rows = backend.lock_jobs_to_reopen(&mut tx, &[ids[0], ids[1], ids[2], ids[2] + 100]).await.unwrap();
    let read: Vec<_> = rows.iter().map(|r| (r.id, r.run, r.class, r.state, r.conflict, r.cost)).collect();
    assert_eq!(
        read,
        [
            (ids[0], run, 1, JobState::Done, false, 4),
            (ids[1], run, 0, JobState::Pending, true, 1),
            (ids[2], run, 0, JobState::Failed, false, 1)
        ]
    );
    assert_eq!(rows.iter().map(|row| row.count.clone()).collect::<Vec<_>>(), [Some(BIG.into()), None, None]);
}

pub(super) async fn conflicts_nobody_counts_are_found_once_unchanged_long_enough<B: StorageBackend>(backend: Arc<B>) {
    let (run, j) = new_run(&*backend, 1, 7).await;
    // j0 pending, j1 failed, j2 leased and expired by `now`, j3 leased
    // later and still held, j4 done, j6 changed late; j5 has no conflict.
    tally(&*backend, j[1], JobState::Failed, 1).await;
    lease(&*backend, &LeaseJobs { from: j[2], ..lease_of(run, "w") }).await;
    let later = NOW + 10;
    lease(&*backend, &LeaseJobs { from: j[3], now: later, expires_at: later + TTL, ..lease_of(run, "w") }).await;
    decide(&*backend, &[(j[4], JobState::Done, Some(1), 1)]).await;
    let mut tx = backend.begin().await.unwrap();
    let late = FailureTally { job: j[6], next: JobState::Pending, failures: 1 };
    backend.set_failures(&mut tx, &late, NOW + 100).await.unwrap();
    backend.commit(tx).await.unwrap();
    flag(&*backend, &[j[0], j[1], j[2], j[3], j[4], j[6]]).await;
    let (cancelled, theirs) = new_run(&*backend, 2, 1).await;
    flag(&*backend, &theirs).await;
    let mut tx = backend.begin().await.unwrap();
    backend.mark_cancelled(&mut tx, cancelled, NOW).await.unwrap();
    backend.commit(tx).await.unwrap();

    let now = NOW + TTL + 5;
    let found = backend.conflicts_waiting(later, now, 100).await.unwrap();
    let read: Vec<_> = found.iter().map(|job| (job.job, job.run, job.key.as_str(), job.census.as_str())).collect();
    let small = fixtures::SMALL;
    assert_eq!(read, [(j[0], run, "k0", small), (j[1], run, "k1", small), (j[2], run, "k2", small)]);
    let ids = |found: Vec<crate::backend::WaitingConflict>| found.iter().map(|job| job.job).collect::<Vec<_>>();
    assert_eq!(ids(backend.conflicts_waiting(later, now, 2).await.unwrap()), [j[0], j[1]], "at most the limit");
    assert_eq!(ids(backend.conflicts_waiting(NOW + 100, now, 100).await.unwrap()), [j[0], j[1], j[2], j[6]]);
    let at_expiry = backend.conflicts_waiting(NOW + 100, later + TTL, 100).await.unwrap();
    assert_eq!(ids(at_expiry), [j[0], j[1], j[2], j[6]], "a lease is held up to its expiry, as everywhere");
    let past_expiry = backend.conflicts_waiting(NOW + 100, later + TTL + 1, 100).await.unwrap();
    assert_eq!(ids(past_expiry), [j[0], j[1], j[2], j[3], j[6]]);
    assert!(backend.conflicts_waiting(NOW - 1, now, 100).await.unwrap().is_empty(), "all changed since");
}

pub(super) async fn a_runs_later_stages_with_anything_of_their_round_are_found<B: StorageBackend>(backend: Arc<B>) {
    let stages = [0, 1, 1, 2, 2, 2, 2];
    let (one, two) = (spec(1, 1), spec(2, 1));
    let (seven, single) = (keys(stages.len()), keys(1));
    let (run, j) = insert_run(&*backend, run_row(&one), &CLASSES, &jobs_of(&seven, |i| Some(stages[i]))).await;
    let (other, theirs) = insert_run(&*backend, run_row(&two), &CLASSES, &jobs_of(&single, |_| Some(2))).await;
    // j0 (stage 0) done; j1 leased, j2 untouched (stage 1); of stage 2,
    // j3 untouched, j4 pending with a failure, j5 pending with a vote,
    // j6 done; the other run's stage 2 job done.
    decide(&*backend, &[(j[0], JobState::Done, Some(1), 1)]).await;
    lease(&*backend, &LeaseJobs { from: j[1], stage: Some(1), ..lease_of(run, "w") }).await;
    tally(&*backend, j[4], JobState::Pending, 1).await;
    decide(
        &*backend,
        &[
            (j[5], JobState::Pending, None, 1),
            (j[6], JobState::Done, Some(1), 1),
            (theirs[0], JobState::Done, Some(1), 1),
        ],
    )
    .await;
    let mut tx = backend.begin().await.unwrap();
    assert_eq!(backend.jobs_after_stage(&mut tx, run, 0).await.unwrap(), [j[1], j[4], j[5], j[6]]);
    assert_eq!(backend.jobs_after_stage(&mut tx, run, 1).await.unwrap(), [j[4], j[5], j[6]]);
    assert!(backend.jobs_after_stage(&mut tx, run, 2).await.unwrap().is_empty(), "no later stage");
    assert_eq!(backend.jobs_after_stage(&mut tx, other, 0).await.unwrap(), [theirs[0]]);
}

pub(super) async fn counts_taken_out_of_classes_leave_them_as_before<B: StorageBackend>(backend: Arc<B>) {
    let (run, _) = new_run(&*backend, 1, 4).await;
    let spec = spec(2, 1);
    let jobs = [NewJob { class: 0, key: "k", stage: None, cost: 1 }];
    let (squared, _) = insert_run(&*backend, NewRun { class_power: 2, ..run_row(&spec) }, &CLASSES, &jobs).await;
    let big = BigUint::from(BIG);
    add(&*backend, &[((run, 0), (big.clone(), 2)), ((run, 1), (5u32.into(), 1)), ((squared, 0), (10u32.into(), 1))])
        .await;
    let taken: ClassChanges =
        [((run, 0), (big, 1)), ((run, 1), (5u32.into(), 1)), ((squared, 0), (4u32.into(), 0))].into_iter().collect();
    let mut tx = backend.begin().await.unwrap();
    backend.take_out_of_classes(&mut tx, &taken).await.unwrap();
    backend.commit(tx).await.unwrap();
    let totals = backend.class_totals(&all_classes(run)).await.unwrap();
    let read: Vec<_> = totals.iter().map(|class| (class.count_sum.clone(), class.jobs_done)).collect();
    assert_eq!(read, [(0u32.into(), 1), (0u32.into(), 0)]);
    assert_eq!(backend.weighted_sum_so_far(None, run).await.unwrap(), 0u32.into());
    let mut tx = backend.begin().await.unwrap();
    let sums = backend.class_sums_page(&mut tx, &all_classes(squared)).await.unwrap();
    assert_eq!((sums[0].count_sum.clone(), sums[0].contribution.clone()), (6u32.into(), 72u32.into()), "2 x 6^2");
    assert_eq!(backend.weighted_sum_so_far(Some(&mut tx), squared).await.unwrap(), 72u32.into());
}

pub(super) async fn a_run_reopened_is_unfinished_again<B: StorageBackend>(backend: Arc<B>) {
    let (run, _) = new_run(&*backend, 1, 4).await;
    let change = RunChange { done: 3, cost_done: 3, conflicts_opened: 1, failed_added: 1, counted: 100u32.into() };
    let one = BigUint::from(1u32);
    let finished = FinishedAnswer { run, finished_at: NOW, weighted_sum: &one, answer: &one };
    let take_out = RunTakeOut { done: 1, cost_done: 1, conflicts_closed: 1, failures_closed: 1, counted: 40u32.into() };
    let mut tx = backend.begin().await.unwrap();
    backend.add_to_run(&mut tx, run, &change).await.unwrap();
    backend.write_answer(&mut tx, &finished).await.unwrap();
    backend.take_out_of_run(&mut tx, run, &take_out).await.unwrap();
    backend.commit(tx).await.unwrap();
    let state = backend.run_state(None, run).await.unwrap().unwrap();
    assert_eq!((state.jobs_remaining, state.cost_done, state.open_conflicts, state.failed_jobs), (2, 2, 0, 0));
    assert_eq!(parse_big(&state.counted).unwrap(), 60u32.into());
    assert_eq!((state.finished_at, state.weighted_sum, state.answer), (None, None, None), "unfinished again");
}

pub(super) async fn a_new_round_clears_the_job_and_keeps_its_results<B: StorageBackend>(backend: Arc<B>) {
    let (run, ids) = new_run(&*backend, 1, 2).await;
    tally(&*backend, ids[0], JobState::Pending, 3).await;
    record(&*backend, &[result(ids[0], run, "w", 5, ResultOutcome::Accepted, 0)], NOW).await;
    decide(&*backend, &[(ids[0], JobState::Done, Some(5), 2)]).await;
    let mut tx = backend.begin().await.unwrap();
    backend.flag_conflicts(&mut tx, &[ids[0]]).await.unwrap();
    backend.commit(tx).await.unwrap();
    lease(&*backend, &lease_of(run, "w")).await;
    let mut tx = backend.begin().await.unwrap();
    backend.start_new_round(&mut tx, &ids, NOW).await.unwrap();
    backend.commit(tx).await.unwrap();
    let mut tx = backend.begin().await.unwrap();
    let jobs = backend.load_jobs(&mut tx, &ids).await.unwrap();
    for job in &jobs {
        assert_eq!((job.lease.state, job.votes, job.round), (JobState::Pending, 0, 1), "job {}", job.id);
        assert_eq!((&job.lease.token, &job.lease.owner, job.lease.expires_at), (&None, &None, None), "retired");
    }
    let reopened = backend.lock_jobs_to_reopen(&mut tx, &ids).await.unwrap();
    assert!(reopened.iter().all(|job| job.count.is_none() && !job.conflict));
    let failing = backend.lock_failing_job(&mut tx, ids[0]).await.unwrap().unwrap();
    assert_eq!((failing.failures, failing.failure_epoch), (0, 1), "a new failure epoch");
    let votes = backend.load_votes(&mut tx, &ids).await.unwrap();
    assert_eq!(votes.iter().map(|vote| (vote.job, vote.count, vote.round)).collect::<Vec<_>>(), [(ids[0], 5, 0)]);
}

pub(super) async fn only_results_of_the_current_round_that_count_are_found<B: StorageBackend>(backend: Arc<B>) {
    let (run, j) = new_run(&*backend, 1, 8).await;
    let r = |job, worker, count, outcome| result(job, run, worker, count, outcome, 0);
    let (vote, accepted, conflict) = (ResultOutcome::Vote, ResultOutcome::Accepted, ResultOutcome::Conflict);
    let results = [
        r(j[0], "w", 2, vote),     // a vote that waits for a quorum: counts
        r(j[0], "w", 2, vote),     // (found once)
        r(j[1], "w", 9, accepted), // the accepted count: counts
        r(j[2], "w", 5, vote),     // agrees with the accepted count: counts
        r(j[2], "y", 5, accepted),
        r(j[3], "w", 6, vote), // outvoted: does not count
        r(j[3], "y", 5, accepted),
        r(j[4], "w", 3, vote),     // on a failed job: does not count
        r(j[5], "w", 1, accepted), // of an earlier round: does not count
        r(j[6], "w", 4, conflict), // the vote of a conflict: does not count
        r(j[7], "w", 8, vote),     // on a job leased since: counts
    ];
    record(&*backend, &results, NOW).await;
    let done = |job, count| (job, JobState::Done, Some(count), 1);
    let waiting = |job| (job, JobState::Pending, None, 1);
    decide(&*backend, &[waiting(j[0]), done(j[1], 9), done(j[2], 5), done(j[3], 5), waiting(j[6]), waiting(j[7])])
        .await;
    tally(&*backend, j[4], JobState::Failed, 1).await;
    let mut tx = backend.begin().await.unwrap();
    backend.start_new_round(&mut tx, &[j[5]], NOW).await.unwrap();
    backend.commit(tx).await.unwrap();
    lease(&*backend, &LeaseJobs { from: j[7], ..lease_of(run, "x") }).await;
    let mut tx = backend.begin().await.unwrap();
    assert_eq!(backend.jobs_counted_by(&mut tx, "w").await.unwrap(), [j[0], j[1], j[2], j[7]]);
    assert_eq!(backend.jobs_counted_by(&mut tx, "y").await.unwrap(), [j[2], j[3]]);
    assert!(backend.jobs_counted_by(&mut tx, "z").await.unwrap().is_empty());
}

pub(super) async fn a_flagged_job_is_read_with_its_conflict<B: StorageBackend>(backend: Arc<B>) {
    let (run, ids) = new_run(&*backend, 1, 2).await;
    let mut tx = backend.begin().await.unwrap();
    backend.flag_conflicts(&mut tx, &[ids[1]]).await.unwrap();
    let read = |job: Option<crate::backend::FlaggedJob>| job.map(|job| (job.id, job.run, job.conflict));
    assert_eq!(read(backend.lock_flagged_job(&mut tx, ids[0]).await.unwrap()), Some((ids[0], run, false)));
    assert_eq!(read(backend.lock_flagged_job(&mut tx, ids[1]).await.unwrap()), Some((ids[1], run, true)));
    assert_eq!(read(backend.lock_flagged_job(&mut tx, ids[1] + 100).await.unwrap()), None);
}

pub(super) async fn a_runs_failed_jobs_are_read_by_id<B: StorageBackend>(backend: Arc<B>) {
    let (run, ids) = new_run(&*backend, 1, 3).await;
    let (other, theirs) = new_run(&*backend, 2, 1).await;
    for job in [ids[2], ids[0], theirs[0]] {
        tally(&*backend, job, JobState::Failed, 1).await;
    }
    let mut tx = backend.begin().await.unwrap();
    backend.flag_conflicts(&mut tx, &[ids[2]]).await.unwrap();
    let read =
        |jobs: Vec<crate::backend::FlaggedJob>| jobs.iter().map(|job| (job.id, job.conflict)).collect::<Vec<_>>();
    assert_eq!(read(backend.lock_failed_jobs(&mut tx, run, None).await.unwrap()), [(ids[0], false), (ids[2], true)]);
    assert_eq!(read(backend.lock_failed_jobs(&mut tx, run, Some(ids[2])).await.unwrap()), [(ids[2], true)]);
    assert!(backend.lock_failed_jobs(&mut tx, run, Some(ids[1])).await.unwrap().is_empty(), "not failed");
    assert!(backend.lock_failed_jobs(&mut tx, run, Some(theirs[0])).await.unwrap().is_empty(), "another run's");
    assert_eq!(backend.lock_failed_jobs(&mut tx, other, None).await.unwrap().len(), 1);
}

pub(super) async fn a_jobs_state_is_read_within_its_run<B: StorageBackend>(backend: Arc<B>) {
    let (run, ids) = new_run(&*backend, 1, 2).await;
    let (other, _) = new_run(&*backend, 2, 1).await;
    decide(&*backend, &[(ids[1], JobState::Done, Some(1), 1)]).await;
    let mut tx = backend.begin().await.unwrap();
    assert_eq!(backend.job_state(&mut tx, run, ids[0]).await.unwrap().as_deref(), Some("pending"));
    assert_eq!(backend.job_state(&mut tx, run, ids[1]).await.unwrap().as_deref(), Some("done"));
    assert_eq!(backend.job_state(&mut tx, other, ids[0]).await.unwrap(), None, "not a job of that run");
    assert_eq!(backend.job_state(&mut tx, run, ids[1] + 100).await.unwrap(), None);
}

pub(super) async fn a_requeued_job_is_pending_in_a_new_epoch<B: StorageBackend>(backend: Arc<B>) {
    let (run, ids) = new_run(&*backend, 1, 1).await;
    lease(&*backend, &lease_of(run, "w")).await;
    tally(&*backend, ids[0], JobState::Failed, 3).await;
    let mut tx = backend.begin().await.unwrap();
    backend.requeue_failed_job(&mut tx, ids[0], NOW).await.unwrap();
    backend.commit(tx).await.unwrap();
    let row = row_of(&*backend, ids[0]).await;
    assert_eq!((row.lease.state, row.lease.token, row.lease.owner), (JobState::Pending, None, None));
    let mut tx = backend.begin().await.unwrap();
    let failing = backend.lock_failing_job(&mut tx, ids[0]).await.unwrap().unwrap();
    assert_eq!((failing.failures, failing.failure_epoch, failing.attempt), (0, 1, 1));
    assert_eq!(backend.load_jobs(&mut tx, &ids).await.unwrap()[0].round, 0, "the same round");
}

pub(super) async fn failed_jobs_are_added_and_taken_out<B: StorageBackend>(backend: Arc<B>) {
    let (run, _) = new_run(&*backend, 1, 3).await;
    let mut tx = backend.begin().await.unwrap();
    backend.add_failed_jobs(&mut tx, run, 2).await.unwrap();
    backend.add_failed_jobs(&mut tx, run, -1).await.unwrap();
    backend.commit(tx).await.unwrap();
    assert_eq!(backend.run_state(None, run).await.unwrap().unwrap().failed_jobs, 1);
}

pub(super) async fn a_failing_job_is_read_with_its_failures<B: StorageBackend>(backend: Arc<B>) {
    let (run, ids) = new_run(&*backend, 1, 1).await;
    lease(&*backend, &lease_of(run, "w")).await;
    fail(&*backend, &[(ids[0], "w", 0)]).await;
    tally(&*backend, ids[0], JobState::Pending, 1).await;
    let leased = lease(&*backend, &lease_of(run, "x")).await.remove(0);
    let mut tx = backend.begin().await.unwrap();
    let failing = backend.lock_failing_job(&mut tx, ids[0]).await.unwrap().unwrap();
    assert_eq!((failing.run, failing.attempt, failing.failures, failing.failure_epoch), (run, 2, 1, 0));
    assert!(failing.lease.held_by("x", &leased.token, NOW));
    assert!(backend.lock_failing_job(&mut tx, ids[0] + 100).await.unwrap().is_none());
}

pub(super) async fn a_failure_is_appended_in_its_epoch<B: StorageBackend>(backend: Arc<B>) {
    let (_, ids) = new_run(&*backend, 1, 1).await;
    fail(&*backend, &[(ids[0], "w", 2)]).await;
    let mut tx = backend.begin().await.unwrap();
    assert_eq!(backend.failures_of(&mut tx, "w").await.unwrap(), 1);
    assert_eq!(backend.failing_identities(&mut tx, ids[0], 2).await.unwrap(), 1);
    assert_eq!(backend.failing_identities(&mut tx, ids[0], 0).await.unwrap(), 0, "another epoch");
}

pub(super) async fn distinct_identities_are_counted_in_an_epoch<B: StorageBackend>(backend: Arc<B>) {
    let (_, ids) = new_run(&*backend, 1, 2).await;
    fail(&*backend, &[(ids[0], "w", 0), (ids[0], "w", 0), (ids[0], "x", 0), (ids[0], "y", 1), (ids[1], "z", 0)]).await;
    let mut tx = backend.begin().await.unwrap();
    assert_eq!(backend.failing_identities(&mut tx, ids[0], 0).await.unwrap(), 2);
    assert_eq!(backend.failing_identities(&mut tx, ids[0], 1).await.unwrap(), 1);
    assert_eq!(backend.failing_identities(&mut tx, ids[1], 1).await.unwrap(), 0);
}

pub(super) async fn a_failure_tally_sets_the_state_and_retires_the_lease<B: StorageBackend>(backend: Arc<B>) {
    let (run, ids) = new_run(&*backend, 1, 2).await;
    lease(&*backend, &LeaseJobs { wanted: 2, ..lease_of(run, "w") }).await;
    tally(&*backend, ids[0], JobState::Failed, 4).await;
    tally(&*backend, ids[1], JobState::Pending, 1).await;
    for (job, state, failures) in [(ids[0], JobState::Failed, 4), (ids[1], JobState::Pending, 1)] {
        let row = row_of(&*backend, job).await;
        assert_eq!((row.lease.state, row.lease.token, row.lease.owner), (state, None, None), "job {job}");
        let mut tx = backend.begin().await.unwrap();
        assert_eq!(backend.lock_failing_job(&mut tx, job).await.unwrap().unwrap().failures, failures);
    }
}

pub(super) async fn an_identitys_failures_are_counted_in_every_run<B: StorageBackend>(backend: Arc<B>) {
    let (_, one): (RunId, _) = new_run(&*backend, 1, 1).await;
    let (_, two) = new_run(&*backend, 2, 1).await;
    fail(&*backend, &[(one[0], "w", 0), (two[0], "w", 3), (two[0], "x", 3)]).await;
    let mut tx = backend.begin().await.unwrap();
    for (worker, failures) in [("w", 2), ("x", 1), ("y", 0)] {
        assert_eq!(backend.failures_of(&mut tx, worker).await.unwrap(), failures, "{worker}");
    }
}
