//! Fair shares (`store/shares.rs`): while another identity waits for a
//! run's jobs, an identity's expired leases go to it first, its leases
//! live one TTL at most if it holds more than it may be expected to count
//! (and while heartbeated if not), and it is handed no more than an equal
//! share; and
//! reports of leases not held past a bound are refused, each a rejection
//! or, when the report names no job that exists, a refused report
//! (issue 44: one token held all 440 jobs of a run and re-leased them the
//! moment their lifetime ended; one flooded the coordinator with stale
//! tokens at no cost).
//!
//! The sleeps below only let leases expire by the store's clock; whatever
//! the machine's speed, what each identity is handed is the same.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::fixtures::{TTL, completion, jobs, spec, true_count};
use crate::{Completion, JobStore, LeaseCheck, Role, StoreError};

/// 100 made-up jobs: more than twice the least allowance.
const HUNDRED: &str = "synthetic jobs=100 salt=11";

/// The lease's time a hoarder asks for, short so that its leases expire
/// within the test, long enough that they do not expire before the next
/// two calls on a loaded machine (at 50 ms, Postgres's took longer once).
const SHORT: Duration = Duration::from_secs(3);

/// Past the expired leases' next look (`store/fronts.rs`, a second) and `SHORT`.
const PAST_SHORT: Duration = Duration::from_millis(4100);

pub(super) async fn a_hoarders_expired_leases_go_first_to_who_waits_and_in_shares(store: Arc<dyn JobStore>) {
    let run = store.create_run(&spec(HUNDRED, 1), &jobs(HUNDRED)).await.unwrap();
    // Nobody waits yet: a is handed every job.
    assert_eq!(store.lease(Some(run), "a", 1000, SHORT).await.unwrap().len(), 100);
    assert!(store.lease(Some(run), "b", 100, TTL).await.unwrap().is_empty());
    assert!(store.has_work_for("b", Some(run)).await.unwrap(), "b waits for a's leases");
    tokio::time::sleep(PAST_SHORT).await;
    // b polls as an idle worker does, so it still waits however long the
    // calls above took (a wait is kept 5 s, `store/shares.rs`; the sleep
    // alone leaves 0.9 s of it, which a loaded machine can use up: the
    // likely cause of a landing CI's failure on both stores).
    assert!(store.has_work_for("b", Some(run)).await.unwrap(), "b still waits");

    // a's leases expired: a asks first, but they go to b first.
    let again = store.lease(Some(run), "a", 1000, TTL).await.unwrap();
    assert!(again.is_empty(), "a takes back none of its expired leases while b waits: {}", again.len());
    assert!(store.has_work_for("a", Some(run)).await.unwrap(), "a waits too");
    // With a waiting, b is handed half of what is open, not all of it.
    let taken = store.lease(Some(run), "b", 1000, TTL).await.unwrap();
    assert_eq!(taken.len(), 50, "an equal share of the 100 open jobs");
    let reports: Vec<_> = taken.iter().map(|lease| completion(lease, "b", true_count(lease))).collect();
    store.complete_many(&reports).await.unwrap().into_iter().for_each(|outcome| outcome.map(drop).unwrap());
}

pub(super) async fn a_contended_lease_lives_one_ttl_however_heartbeated(store: Arc<dyn JobStore>) {
    // Long enough that the leases outlive the next calls on a loaded
    // machine; b looks again well past their end.
    const LEASE: Duration = Duration::from_secs(3);
    let run = store.create_run(&spec(HUNDRED, 1), &jobs(HUNDRED)).await.unwrap();
    let leased_at = Instant::now();
    let held = store.lease(Some(run), "a", 1000, LEASE).await.unwrap();
    assert_eq!(held.len(), 100);
    assert!(store.lease(Some(run), "b", 100, TTL).await.unwrap().is_empty());
    assert!(store.has_work_for("b", Some(run)).await.unwrap(), "b waits for a's leases");
    // a heartbeats half-way: its leases are not extended past the first
    // TTL (without b waiting, they would be, to half a TTL later).
    tokio::time::sleep(LEASE / 2).await;
    assert!(store.has_work_for("b", Some(run)).await.unwrap(), "b still waits");
    let tokens: Vec<String> = held.iter().map(|lease| lease.token.clone()).collect();
    store.heartbeat("a", &tokens, LEASE).await.unwrap();
    tokio::time::sleep((LEASE + Duration::from_millis(1100)).saturating_sub(leased_at.elapsed())).await;
    let taken = store.lease(Some(run), "b", 1000, TTL).await.unwrap();
    assert_eq!(taken.len(), 100, "a's leases ended one TTL after they began");
    let lost = store.heartbeat("a", &tokens, LEASE).await.unwrap();
    assert!(lost.extended.is_empty(), "{lost:?}");
}

/// 4 made-up jobs: fewer than the least allowance.
const FOUR: &str = "synthetic jobs=4 salt=12";

/// Two identities, each counting a run's last jobs (a quorum of two's)
/// more slowly than one TTL, took them from each other for ever while the
/// other waited, and nothing was stored (a 2x5 layers run on a loaded
/// machine, 300 s without a result). An identity that holds no more than
/// it may be expected to count keeps its leases while it heartbeats, with
/// another waiting.
pub(super) async fn a_contended_lease_within_the_least_allowance_lives_while_heartbeated(store: Arc<dyn JobStore>) {
    // Heartbeats every second are well within it on a loaded machine (a
    // stall of five seconds between two would fail the test, not the code).
    const LEASE: Duration = Duration::from_secs(6);
    let run = store.create_run(&spec(FOUR, 1), &jobs(FOUR)).await.unwrap();
    let leased_at = Instant::now();
    let held = store.lease(Some(run), "a", 1000, LEASE).await.unwrap();
    assert_eq!(held.len(), 4);
    let tokens: Vec<String> = held.iter().map(|lease| lease.token.clone()).collect();
    // Past the first TTL and one more heartbeat, b waiting all along.
    while leased_at.elapsed() < LEASE + Duration::from_secs(2) {
        assert!(store.lease(Some(run), "b", 100, TTL).await.unwrap().is_empty(), "a holds every job");
        assert!(store.has_work_for("b", Some(run)).await.unwrap(), "b waits for a's leases");
        let beat = store.heartbeat("a", &tokens, LEASE).await.unwrap();
        assert_eq!(beat.extended.len(), 4, "{:?} after it began", leased_at.elapsed());
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

pub(super) async fn reports_of_leases_not_held_past_a_bound_are_refused_and_quarantine(store: Arc<dyn JobStore>) {
    // `capped`: an identity may hold 50 leases.
    let run = store.create_run(&spec(HUNDRED, 1), &jobs(HUNDRED)).await.unwrap();
    let leases = store.lease(Some(run), "a", 3, TTL).await.unwrap();
    let reports: Vec<_> = leases.iter().map(|lease| completion(lease, "a", true_count(lease))).collect();
    store.complete_many(&reports).await.unwrap().into_iter().for_each(|outcome| outcome.map(drop).unwrap());

    // Repeats cost nothing up to the 50 it may hold and twice the 3 it was
    // granted: 57 repeats are answered, one by one, as not held.
    let flood: Vec<_> = reports.iter().cycle().take(57).cloned().collect();
    let checks = store.check_leases(&flood).await.unwrap();
    assert!(checks.iter().all(|check| *check == LeaseCheck::NotHeld), "{checks:?}");
    // Past the bound: refused unread, each a rejection, three quarantine.
    for _ in 0..3 {
        assert!(!store.is_quarantined("a").await.unwrap());
        let refused = store.check_leases(&reports[..1]).await;
        assert!(matches!(refused, Err(StoreError::Rejected { .. })), "{refused:?}");
    }
    assert!(store.is_quarantined("a").await.unwrap(), "three refused reports quarantine their sender");
    // Another identity's reports are not touched.
    let other = store.lease(Some(run), "b", 3, TTL).await.unwrap();
    let reports: Vec<_> = other.iter().map(|lease| completion(lease, "b", true_count(lease))).collect();
    let checks = store.check_leases(&reports).await.unwrap();
    assert!(checks.iter().all(|check| *check == LeaseCheck::Held), "{checks:?}");
}

/// A report of jobs that do not exist was refused past the bound but
/// recorded against nothing (a rejection names a job), so a flood of
/// made-up job ids never quarantined its sender (issue 44). Each refusal
/// is now a refused report against the sender: it counts toward the
/// quarantine and in the sender's standing, and no run is charged with
/// a rejection of a job the report never named.
pub(super) async fn made_up_job_ids_past_a_bound_are_refused_and_quarantine(store: Arc<dyn JobStore>) {
    // `capped`: an identity may hold 50 leases, and "a" was granted none.
    let run = store.create_run(&spec(HUNDRED, 1), &jobs(HUNDRED)).await.unwrap();
    store.create_token("a", Role::Worker, &"a".repeat(64)).await.unwrap();
    let made_up = |job_id| Completion {
        job_id,
        token: format!("0123456789abcdef0123456789abcdef-{job_id}-1"),
        worker: "a".into(),
        key: "k".into(),
        counter_version: "v".into(),
        count: 1,
        elapsed: Duration::from_micros(10),
        checked_count: None,
    };
    let flood: Vec<Completion> = (1_000_000..1_000_051).map(made_up).collect();
    let checks = store.check_leases(&flood).await.unwrap();
    assert!(checks.iter().all(|check| *check == LeaseCheck::UnknownJob), "{checks:?}");
    // Past the bound (51 of jobs that do not exist, more than 50): refused
    // unread, each counted against "a", three quarantine it.
    for _ in 0..3 {
        assert!(!store.is_quarantined("a").await.unwrap());
        let refused = store.check_leases(&flood[..1]).await;
        assert!(matches!(refused, Err(StoreError::Rejected { .. })), "{refused:?}");
    }
    assert!(store.is_quarantined("a").await.unwrap(), "three refused reports of made-up jobs quarantine their sender");
    let quarantined = store.quarantined().await.unwrap();
    assert_eq!(
        quarantined.iter().map(|q| (q.worker.as_str(), q.reason.as_str())).collect::<Vec<_>>(),
        [("a", "3 results rejected")]
    );
    let standing = store.list_tokens().await.unwrap();
    assert_eq!(standing.iter().map(|t| (t.name.as_str(), t.rejected)).collect::<Vec<_>>(), [("a", 3)]);
    // No run was charged with a job the reports never named.
    assert_eq!(store.progress(run).await.unwrap().rejected, 0);
}
