//! [`QueueStorage`]: leases and heartbeats.

use std::collections::HashSet;
use std::sync::Arc;

use super::{
    CLASSES, LeaseJobs, NOW, TTL, decide, insert_run, jobs_of, keys, lease, lease_of, new_run, record, result, row_of,
    run_row, spec,
};
use crate::backend::{
    ExtendLeases, FailureTally, FinishedAnswer, HeldBy, JobState, LowestStages, NewFailure, OpenTo, ResultOutcome,
    StorageBackend, Waiting,
};
use crate::{JobId, RunId};

pub(super) async fn open_runs_are_unfinished_and_uncancelled_by_priority<B: StorageBackend>(backend: Arc<B>) {
    let mut runs = Vec::new();
    for n in 1..=4 {
        runs.push(new_run(&*backend, n, 1).await.0);
    }
    backend.set_priority(runs[3], 2).await.unwrap();
    let mut tx = backend.begin().await.unwrap();
    backend.mark_cancelled(&mut tx, runs[1], NOW).await.unwrap();
    let zero = 0u32.into();
    let answer = FinishedAnswer { run: runs[2], finished_at: NOW, weighted_sum: &zero, answer: &zero };
    backend.write_answer(&mut tx, &answer).await.unwrap();
    let open: Vec<RunId> = backend.open_runs(Some(&mut tx), None).await.unwrap().iter().map(|r| r.id).collect();
    assert_eq!(open, [runs[3], runs[0]], "in the transaction");
    backend.commit(tx).await.unwrap();
    let open: Vec<RunId> = backend.open_runs(None, None).await.unwrap().iter().map(|r| r.id).collect();
    assert_eq!(open, [runs[3], runs[0]], "highest priority first, then oldest");
    let one: Vec<RunId> = backend.open_runs(None, Some(runs[0])).await.unwrap().iter().map(|r| r.id).collect();
    assert_eq!(one, [runs[0]]);
    assert!(backend.open_runs(None, Some(runs[1])).await.unwrap().is_empty(), "cancelled");
}

pub(super) async fn held_leases_are_the_unexpired_ones<B: StorageBackend>(backend: Arc<B>) {
    let (run, _) = new_run(&*backend, 1, 4).await;
    lease(&*backend, &LeaseJobs { wanted: 3, ..lease_of(run, "w") }).await;
    lease(&*backend, &lease_of(run, "x")).await;
    let mut tx = backend.begin().await.unwrap();
    for (worker, now, held) in
        [("w", NOW, 3), ("w", NOW + TTL, 3), ("w", NOW + TTL + 1, 0), ("x", NOW, 1), ("y", NOW, 0)]
    {
        assert_eq!(backend.held_leases(&mut tx, worker, None, now).await.unwrap(), held, "{worker} at {now}");
        assert_eq!(backend.held_leases(&mut tx, worker, Some(run), now).await.unwrap(), held, "{worker} in its run");
        assert_eq!(backend.held_leases(&mut tx, worker, Some(run + 1), now).await.unwrap(), 0, "{worker} elsewhere");
    }
}

/// What the database keeps by itself: each run's and each identity's
/// leased jobs, after every operation that moves a lease.
struct LeaseCounts {
    a: RunId,
    b: RunId,
}

impl LeaseCounts {
    /// (run a's, run b's, w's, x's) leased jobs.
    async fn read<B: StorageBackend>(&self, backend: &B) -> (i64, i64, i64, i64) {
        let (a, b) = (backend.leased_jobs(self.a).await.unwrap(), backend.leased_jobs(self.b).await.unwrap());
        let mut tx = backend.begin().await.unwrap();
        let w = backend.leases_counted(&mut tx, "w").await.unwrap();
        let x = backend.leases_counted(&mut tx, "x").await.unwrap();
        (a, b, w, x)
    }
}

/// Every way a job moves into or out of its lease, each followed by the
/// counts: a lease, an expired lease taken over by another identity and
/// by its own, a heartbeat, a decided report, a failure, a new round, a
/// release of an identity's and of a run's leases.
pub(super) async fn lease_counts_follow_every_move<B: StorageBackend>(backend: &B) {
    let (a, ids) = new_run(backend, 1, 4).await;
    let (b, _) = new_run(backend, 2, 2).await;
    let counts = LeaseCounts { a, b };
    assert_eq!(counts.read(backend).await, (0, 0, 0, 0));
    lease(backend, &LeaseJobs { wanted: 3, ..lease_of(a, "w") }).await;
    lease(backend, &lease_of(b, "w")).await;
    assert_eq!(counts.read(backend).await, (3, 1, 4, 0), "leased");
    let later = NOW + TTL + 1;
    let expired =
        |worker| LeaseJobs { waiting: Waiting::Expired, now: later, expires_at: later + TTL, ..lease_of(a, worker) };
    let taken = lease(backend, &expired("x")).await;
    assert_eq!(taken.iter().map(|job| job.id).collect::<Vec<_>>(), [ids[0]]);
    assert_eq!(counts.read(backend).await, (3, 1, 3, 1), "taken over by another identity");
    lease(backend, &expired("w")).await;
    assert_eq!(counts.read(backend).await, (3, 1, 3, 1), "taken again by its own");
    let token = taken[0].token.as_str();
    let extend = ExtendLeases {
        worker: "x",
        leases: &[(ids[0], token)],
        now: later,
        expires_at: later + 2 * TTL,
        max_lifetime_ms: 10 * TTL,
        contended: &[],
        contended_lifetime_ms: 0,
    };
    assert_eq!(backend.extend_leases(&extend).await.unwrap().len(), 1);
    assert_eq!(counts.read(backend).await, (3, 1, 3, 1), "heartbeated");
    decide(backend, &[(ids[1], JobState::Done, Some(5), 1)]).await;
    assert_eq!(counts.read(backend).await, (2, 1, 2, 1), "decided");
    let mut tx = backend.begin().await.unwrap();
    let tally = FailureTally { job: ids[2], next: JobState::Pending, failures: 1 };
    backend.set_failures(&mut tx, &tally, later).await.unwrap();
    backend.commit(tx).await.unwrap();
    assert_eq!(counts.read(backend).await, (1, 1, 1, 1), "failed");
    let mut tx = backend.begin().await.unwrap();
    backend.start_new_round(&mut tx, &[ids[0]], later).await.unwrap();
    backend.commit(tx).await.unwrap();
    assert_eq!(counts.read(backend).await, (0, 1, 1, 0), "a new round");
    let mut tx = backend.begin().await.unwrap();
    backend.release_leases(&mut tx, HeldBy::Identity("w"), later).await.unwrap();
    backend.commit(tx).await.unwrap();
    assert_eq!(counts.read(backend).await, (0, 0, 0, 0), "an identity's released");
    lease(backend, &LeaseJobs { wanted: 2, ..lease_of(b, "x") }).await;
    assert_eq!(counts.read(backend).await, (0, 2, 0, 2));
    let mut tx = backend.begin().await.unwrap();
    backend.release_leases(&mut tx, HeldBy::Run(b), later).await.unwrap();
    backend.commit(tx).await.unwrap();
    assert_eq!(counts.read(backend).await, (0, 0, 0, 0), "a run's released");
}

pub(super) async fn each_identitys_leased_jobs_are_counted_whatever_moves_them<B: StorageBackend>(backend: Arc<B>) {
    lease_counts_follow_every_move(&*backend).await;
}

pub(super) async fn pending_jobs_are_leased_in_id_order_from_the_front<B: StorageBackend>(backend: Arc<B>) {
    let (run, ids) = new_run(&*backend, 1, 6).await;
    let leased = lease(&*backend, &LeaseJobs { wanted: 2, ..lease_of(run, "w") }).await;
    assert_eq!(leased.iter().map(|job| job.id).collect::<Vec<_>>(), ids[..2]);
    for job in &leased {
        assert_eq!((job.run, job.attempt), (run, 1));
        assert_eq!(job.token, format!("0123456789abcdef0123456789abcdef-{}-1", job.id));
        let row = row_of(&*backend, job.id).await;
        assert_eq!(row.attempt, 1);
        assert_eq!(row.lease.state, JobState::Leased);
        assert_eq!(row.lease.owner.as_deref(), Some("w"));
        assert_eq!(row.lease.token.as_deref(), Some(job.token.as_str()));
        assert_eq!(row.lease.expires_at, Some(NOW + TTL));
    }
    assert_eq!(leased.iter().map(|job| job.key.as_str()).collect::<Vec<_>>(), ["k0", "k1"]);
    let from = lease(&*backend, &LeaseJobs { wanted: 5, from: ids[4], ..lease_of(run, "w") }).await;
    assert_eq!(from.iter().map(|job| job.id).collect::<Vec<_>>(), ids[4..], "from the front on");
    let rest = lease(&*backend, &LeaseJobs { wanted: 5, ..lease_of(run, "x") }).await;
    assert_eq!(rest.iter().map(|job| job.id).collect::<Vec<_>>(), ids[2..4], "pending jobs only");
}

pub(super) async fn expired_leases_are_leased_again_oldest_first<B: StorageBackend>(backend: Arc<B>) {
    let (run, ids) = new_run(&*backend, 1, 3).await;
    lease(&*backend, &LeaseJobs { expires_at: NOW + 20, ..lease_of(run, "w") }).await;
    lease(&*backend, &LeaseJobs { expires_at: NOW + 10, ..lease_of(run, "w") }).await;
    let expired = |now: i64, wanted| LeaseJobs {
        waiting: Waiting::Expired,
        wanted,
        now,
        expires_at: now + TTL,
        ..lease_of(run, "x")
    };
    assert!(lease(&*backend, &expired(NOW + 10, 5)).await.is_empty(), "a lease expiring now has not expired");
    let taken = lease(&*backend, &expired(NOW + 30, 1)).await;
    assert_eq!(taken.iter().map(|job| (job.id, job.attempt)).collect::<Vec<_>>(), [(ids[1], 2)], "the oldest");
    assert_eq!(taken[0].token, format!("0123456789abcdef0123456789abcdef-{}-2", ids[1]));
    assert_eq!(row_of(&*backend, ids[1]).await.lease.owner.as_deref(), Some("x"));
    let pending = lease(&*backend, &LeaseJobs { wanted: 5, now: NOW + 30, ..lease_of(run, "y") }).await;
    assert_eq!(pending.iter().map(|job| job.id).collect::<Vec<_>>(), [ids[2]], "a pending lease takes no expired one");
    let taken = lease(&*backend, &expired(NOW + 30, 5)).await;
    assert_eq!(taken.iter().map(|job| job.id).collect::<Vec<_>>(), [ids[0]], "the one still expired");
}

pub(super) async fn a_job_is_leased_only_to_an_identity_it_is_open_to<B: StorageBackend>(backend: Arc<B>) {
    let (run, ids) = new_run(&*backend, 1, 3).await;
    let take = |worker, max_failures| LeaseJobs { wanted: 1, max_failures, ..lease_of(run, worker) };
    // w voted on the first job this round: it is not w's to lease again.
    record(&*backend, &[result(ids[0], run, "w", 5, ResultOutcome::Vote, 0)], NOW).await;
    decide(&*backend, &[(ids[0], JobState::Pending, None, 1)]).await;
    // w failed the third job twice this epoch.
    let mut tx = backend.begin().await.unwrap();
    for _ in 0..2 {
        let failure = NewFailure { job: ids[2], attempt: 1, worker: "w", reason: "r", failed_at: NOW, epoch: 0 };
        backend.insert_failure(&mut tx, &failure).await.unwrap();
    }
    backend
        .set_failures(&mut tx, &FailureTally { job: ids[2], next: JobState::Pending, failures: 2 }, NOW)
        .await
        .unwrap();
    backend.commit(tx).await.unwrap();
    let leased = lease(&*backend, &LeaseJobs { wanted: 3, ..take("w", 2) }).await;
    assert_eq!(leased.iter().map(|job| job.id).collect::<Vec<_>>(), [ids[1]], "neither voted on nor failed out");
    let leased = lease(&*backend, &take("w", 3)).await;
    assert_eq!(leased.iter().map(|job| job.id).collect::<Vec<_>>(), [ids[2]], "failed fewer times than the limit");
    let leased = lease(&*backend, &take("x", 2)).await;
    assert_eq!(leased.iter().map(|job| job.id).collect::<Vec<_>>(), [ids[0]], "open to another identity");
    // A new round: w's vote is of the round before.
    let mut tx = backend.begin().await.unwrap();
    backend.start_new_round(&mut tx, &[ids[0]], NOW).await.unwrap();
    backend.commit(tx).await.unwrap();
    let leased = lease(&*backend, &take("w", 2)).await;
    assert_eq!(leased.iter().map(|job| job.id).collect::<Vec<_>>(), [ids[0]]);
}

pub(super) async fn only_the_stage_asked_for_is_leased<B: StorageBackend>(backend: Arc<B>) {
    let spec = spec(1, 1);
    let keys = keys(3);
    let (run, ids) = insert_run(&*backend, run_row(&spec), &CLASSES, &jobs_of(&keys, |i| Some(i as u32 / 2))).await;
    let stage = |stage| LeaseJobs { wanted: 5, stage: Some(stage), ..lease_of(run, "w") };
    let leased = lease(&*backend, &stage(1)).await;
    assert_eq!(leased.iter().map(|job| job.id).collect::<Vec<_>>(), [ids[2]]);
    let leased = lease(&*backend, &stage(0)).await;
    assert_eq!(leased.iter().map(|job| job.id).collect::<Vec<_>>(), ids[..2]);
}

pub(super) async fn an_expired_lease_is_there_until_taken<B: StorageBackend>(backend: Arc<B>) {
    let (run, _) = new_run(&*backend, 1, 2).await;
    lease(&*backend, &LeaseJobs { expires_at: NOW + 10, ..lease_of(run, "w") }).await;
    let mut tx = backend.begin().await.unwrap();
    assert!(!backend.has_expired_leases(&mut tx, run, NOW + 10).await.unwrap(), "expiring now");
    assert!(backend.has_expired_leases(&mut tx, run, NOW + 11).await.unwrap());
    let expired =
        LeaseJobs { waiting: Waiting::Expired, now: NOW + 11, expires_at: NOW + 11 + TTL, ..lease_of(run, "x") };
    assert_eq!(backend.lease_jobs(&mut tx, &expired).await.unwrap().len(), 1);
    assert!(!backend.has_expired_leases(&mut tx, run, NOW + 11).await.unwrap(), "taken");
}

pub(super) async fn the_first_pending_job_below_is_found<B: StorageBackend>(backend: Arc<B>) {
    let (run, ids) = new_run(&*backend, 1, 6).await;
    lease(&*backend, &LeaseJobs { wanted: 2, ..lease_of(run, "w") }).await;
    let mut tx = backend.begin().await.unwrap();
    assert_eq!(backend.first_pending_below(&mut tx, run, None, ids[5]).await.unwrap(), Some(ids[2]));
    assert_eq!(backend.first_pending_below(&mut tx, run, None, JobId::MAX).await.unwrap(), Some(ids[2]));
    assert_eq!(backend.first_pending_below(&mut tx, run, None, ids[2]).await.unwrap(), None, "below, not at");
    backend.rollback(tx).await.unwrap();
    let spec = spec(2, 1);
    let keys = keys(3);
    let (staged, ids) = insert_run(&*backend, run_row(&spec), &CLASSES, &jobs_of(&keys, |i| Some(i as u32 % 2))).await;
    let mut tx = backend.begin().await.unwrap();
    assert_eq!(backend.first_pending_below(&mut tx, staged, Some(1), JobId::MAX).await.unwrap(), Some(ids[1]));
    assert_eq!(backend.first_pending_below(&mut tx, staged, Some(0), JobId::MAX).await.unwrap(), Some(ids[0]));
}

/// Whether a job of the run in `state` is open to `worker` (2 failures at most).
async fn has_open<B: StorageBackend>(backend: &B, run: RunId, state: JobState, worker: &str) -> bool {
    backend.has_job_open_to(&OpenTo { run, state, worker, max_failures: 2 }).await.unwrap()
}

pub(super) async fn a_job_open_to_an_identity_is_found_by_its_state<B: StorageBackend>(backend: Arc<B>) {
    let (run, ids) = new_run(&*backend, 1, 2).await;
    assert!(has_open(&*backend, run, JobState::Pending, "w").await);
    assert!(!has_open(&*backend, run, JobState::Leased, "w").await);
    lease(&*backend, &LeaseJobs { wanted: 2, ..lease_of(run, "w") }).await;
    assert!(!has_open(&*backend, run, JobState::Pending, "w").await);
    assert!(has_open(&*backend, run, JobState::Leased, "x").await, "a leased job, open to another identity");
    record(&*backend, &[result(ids[0], run, "w", 5, ResultOutcome::Vote, 0)], NOW).await;
    decide(&*backend, &[(ids[0], JobState::Pending, None, 1)]).await;
    assert!(!has_open(&*backend, run, JobState::Pending, "w").await, "w voted on it");
    assert!(has_open(&*backend, run, JobState::Pending, "x").await);
    let mut tx = backend.begin().await.unwrap();
    for worker in ["x", "x"] {
        let failure = NewFailure { job: ids[0], attempt: 1, worker, reason: "r", failed_at: NOW, epoch: 0 };
        backend.insert_failure(&mut tx, &failure).await.unwrap();
    }
    backend
        .set_failures(&mut tx, &FailureTally { job: ids[0], next: JobState::Pending, failures: 2 }, NOW)
        .await
        .unwrap();
    backend.commit(tx).await.unwrap();
    assert!(!has_open(&*backend, run, JobState::Pending, "x").await, "x failed it as often as it may");
    assert!(has_open(&*backend, run, JobState::Pending, "y").await);
}

pub(super) async fn the_lowest_stage_of_each_state_is_read<B: StorageBackend>(backend: Arc<B>) {
    let spec = spec(1, 1);
    let keys = keys(4);
    let stages = [0, 1, 1, 2];
    let (run, ids) = insert_run(&*backend, run_row(&spec), &CLASSES, &jobs_of(&keys, |i| Some(stages[i]))).await;
    let lowest = |pending, leased, failed| LowestStages { pending, leased, failed };
    assert_eq!(backend.lowest_stages(None, run).await.unwrap(), lowest(Some(0), None, None));
    lease(&*backend, &LeaseJobs { stage: Some(0), ..lease_of(run, "w") }).await;
    let mut tx = backend.begin().await.unwrap();
    backend
        .set_failures(&mut tx, &FailureTally { job: ids[2], next: JobState::Failed, failures: 1 }, NOW)
        .await
        .unwrap();
    assert_eq!(backend.lowest_stages(Some(&mut tx), run).await.unwrap(), lowest(Some(1), Some(0), Some(1)));
    backend.commit(tx).await.unwrap();
    decide(&*backend, &[(ids[0], JobState::Done, Some(1), 1), (ids[1], JobState::Done, Some(1), 1)]).await;
    assert_eq!(backend.lowest_stages(None, run).await.unwrap(), lowest(Some(2), None, Some(1)));
    let (plain, _) = new_run(&*backend, 2, 2).await;
    assert_eq!(backend.lowest_stages(None, plain).await.unwrap(), lowest(None, None, None), "a run of one stage");
}

pub(super) async fn only_held_leases_are_extended<B: StorageBackend>(backend: Arc<B>) {
    let (run, ids) = new_run(&*backend, 1, 5).await;
    let mine = lease(&*backend, &LeaseJobs { wanted: 2, ..lease_of(run, "w") }).await;
    let theirs = lease(&*backend, &lease_of(run, "x")).await;
    let gone = lease(&*backend, &LeaseJobs { expires_at: NOW + 10, ..lease_of(run, "w") }).await;
    let now = NOW + 1000;
    let leases = [
        (ids[0], mine[0].token.as_str()),
        (ids[1], "made-up"),
        (ids[2], theirs[0].token.as_str()),
        (ids[3], gone[0].token.as_str()),
        (ids[4], "none"),
    ];
    let extend = ExtendLeases {
        worker: "w",
        leases: &leases,
        now,
        expires_at: now + TTL,
        max_lifetime_ms: 10 * TTL,
        contended: &[],
        contended_lifetime_ms: 0,
    };
    let extended = backend.extend_leases(&extend).await.unwrap();
    assert_eq!(extended, HashSet::from([mine[0].token.clone()]));
    assert_eq!(row_of(&*backend, ids[0]).await.lease.expires_at, Some(now + TTL));
    for (job, expires) in [(ids[1], NOW + TTL), (ids[2], NOW + TTL), (ids[3], NOW + 10)] {
        assert_eq!(row_of(&*backend, job).await.lease.expires_at, Some(expires), "job {job} as it was");
    }
}

/// How many of `leases` of `w` are extended at `now`, to `NOW + 100_000`,
/// with a longest lifetime of 30 s.
async fn extend_all<B: StorageBackend>(backend: &B, now: i64, leases: &[(JobId, &str)]) -> usize {
    let extend = ExtendLeases {
        worker: "w",
        leases,
        now,
        expires_at: NOW + 100_000,
        max_lifetime_ms: 30_000,
        contended: &[],
        contended_lifetime_ms: 0,
    };
    backend.extend_leases(&extend).await.unwrap().len()
}

pub(super) async fn no_lease_outlives_its_lifetime_or_its_run<B: StorageBackend>(backend: Arc<B>) {
    let (short, ids) = new_run(&*backend, 1, 1).await;
    let spec = spec(2, 1);
    let keys = keys(1);
    let row = crate::backend::NewRun { max_lease_ms: Some(200_000), ..run_row(&spec) };
    let (long, own) = insert_run(&*backend, row, &CLASSES, &jobs_of(&keys, |_| None)).await;
    let a = lease(&*backend, &lease_of(short, "w")).await.remove(0);
    let b = lease(&*backend, &lease_of(long, "w")).await.remove(0);
    assert_eq!(extend_all(&*backend, NOW + 1000, &[(ids[0], &a.token), (own[0], &b.token)]).await, 2);
    assert_eq!(row_of(&*backend, ids[0]).await.lease.expires_at, Some(NOW + 30_000), "the lifetime at most");
    assert_eq!(row_of(&*backend, own[0]).await.lease.expires_at, Some(NOW + 100_000), "the run's own is longer");
    assert_eq!(extend_all(&*backend, NOW + 30_000, &[(ids[0], &a.token)]).await, 0, "at the end of its lifetime");
    let mut tx = backend.begin().await.unwrap();
    backend.mark_cancelled(&mut tx, long, NOW).await.unwrap();
    backend.commit(tx).await.unwrap();
    assert_eq!(extend_all(&*backend, NOW + 2000, &[(own[0], &b.token)]).await, 0, "a cancelled run's");
}

pub(super) async fn released_leases_are_pending_again<B: StorageBackend>(backend: Arc<B>) {
    let (a, ids) = new_run(&*backend, 1, 3).await;
    let (b, other) = new_run(&*backend, 2, 1).await;
    lease(&*backend, &LeaseJobs { wanted: 2, expires_at: NOW - 1, ..lease_of(a, "w") }).await;
    lease(&*backend, &lease_of(a, "x")).await;
    lease(&*backend, &lease_of(b, "w")).await;
    let mut tx = backend.begin().await.unwrap();
    backend.release_leases(&mut tx, HeldBy::Run(a), NOW).await.unwrap();
    backend.commit(tx).await.unwrap();
    for job in &ids {
        let row = row_of(&*backend, *job).await;
        assert_eq!(row.lease.state, JobState::Pending, "job {job}");
        assert_eq!((row.lease.token, row.lease.owner, row.lease.expires_at), (None, None, None), "retired");
    }
    assert_eq!(row_of(&*backend, other[0]).await.lease.state, JobState::Leased, "another run's");
    let mut tx = backend.begin().await.unwrap();
    backend.release_leases(&mut tx, HeldBy::Identity("x"), NOW).await.unwrap();
    backend.commit(tx).await.unwrap();
    assert_eq!(row_of(&*backend, other[0]).await.lease.state, JobState::Leased, "another identity's");
    let mut tx = backend.begin().await.unwrap();
    backend.release_leases(&mut tx, HeldBy::Identity("w"), NOW).await.unwrap();
    backend.commit(tx).await.unwrap();
    assert_eq!(row_of(&*backend, other[0]).await.lease.state, JobState::Pending);
}

pub(super) async fn leases_are_read_as_their_rows_hold_them<B: StorageBackend>(backend: Arc<B>) {
    let (run, ids) = new_run(&*backend, 1, 3).await;
    let leased = lease(&*backend, &lease_of(run, "w")).await.remove(0);
    decide(&*backend, &[(ids[1], JobState::Done, Some(3), 1)]).await;
    let mut rows = backend.leases_of(&[ids[2], ids[0], ids[1], ids[2] + 100]).await.unwrap();
    rows.sort_by_key(|row| row.id);
    assert_eq!(
        rows.iter().map(|row| (row.id, row.run, row.attempt)).collect::<Vec<_>>(),
        [(ids[0], run, 1), (ids[1], run, 0), (ids[2], run, 0)]
    );
    assert_eq!(rows[0].lease.token.as_deref(), Some(leased.token.as_str()));
    assert!(rows[0].lease.held_by("w", &leased.token, NOW));
    assert_eq!(rows[1].lease.state, JobState::Done);
    assert_eq!(rows[2].lease.state, JobState::Pending);
    assert_eq!((&rows[2].lease.token, &rows[2].lease.owner, rows[2].lease.expires_at), (&None, &None, None));
}
