//! The completion state machine under random interleavings: honest and
//! lying identities lease (some leases born expired), report with current,
//! stale and forged tokens, fail, and operators recount and requeue, in any
//! order. Whatever happens, no job is accepted twice in a round, a final
//! total is exact, and honest workers can always finish the run exactly.

use std::sync::Arc;
use std::time::Duration;

use census_store::{Completion, JobStore, Lease, StoreConfig, connect};
use proptest::prelude::*;

use census_store::conformance::fixtures::{SMALL, census, completion, jobs, spec, true_count, weighted_sum};

const IDENTITIES: [&str; 4] = ["a", "b", "c", "liar"];

#[derive(Debug, Clone)]
enum Step {
    /// An identity leases up to n jobs; `expired` leases are born expired.
    Lease {
        who: usize,
        n: u32,
        expired: bool,
    },
    /// The identity reports its i-th held lease; `lie` adds one to the count;
    /// `forge` uses a made-up token; `steal` reports another identity's lease.
    Report {
        who: usize,
        i: usize,
        lie: bool,
        forge: bool,
        steal: bool,
    },
    /// The identity reports the i-th held lease again (a repeat).
    Repeat {
        who: usize,
        i: usize,
    },
    Fail {
        who: usize,
        i: usize,
    },
    /// The identity heartbeats every lease it holds (and, with `foreign`, another's).
    Heartbeat {
        who: usize,
        foreign: bool,
    },
    Recount {
        job: usize,
    },
    Requeue,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        (0..4usize, 1..4u32, prop::bool::weighted(0.2)).prop_map(|(who, n, expired)| Step::Lease { who, n, expired }),
        (0..4usize, 0..4usize, any::<bool>(), prop::bool::weighted(0.1), prop::bool::weighted(0.1))
            .prop_map(|(who, i, lie, forge, steal)| Step::Report { who, i, lie, forge, steal }),
        (0..4usize, 0..4usize).prop_map(|(who, i)| Step::Repeat { who, i }),
        (0..4usize, 0..4usize).prop_map(|(who, i)| Step::Fail { who, i }),
        (0..4usize, any::<bool>()).prop_map(|(who, foreign)| Step::Heartbeat { who, foreign }),
        (0..10usize).prop_map(|job| Step::Recount { job }),
        Just(Step::Requeue),
    ]
}

/// A report as the coordinator sends it: the independent check attached.
fn checked_completion(lease: &Lease, worker: &str, count: u128) -> Completion {
    Completion { checked_count: Some(true_count(lease)), ..completion(lease, worker, count) }
}

async fn play(redundancy: u32, steps: Vec<Step>) {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let dir = census_testpg::scratch_dir("census-state-machine");
    let path = dir.join(format!("{}.db", NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)));
    let _ = std::fs::remove_file(&path);
    let config = StoreConfig { quarantine_after: 1000, ..StoreConfig::default() };
    let store: Arc<dyn JobStore> = connect(path.to_str().unwrap(), config).await.unwrap();
    let run = store.create_run(&spec(SMALL, redundancy), &jobs(SMALL)).await.unwrap();
    let mut held: Vec<Vec<Lease>> = vec![Vec::new(); IDENTITIES.len()];
    let mut job_ids: Vec<i64> = Vec::new();

    for step in steps {
        match step {
            Step::Lease { who, n, expired } => {
                let ttl = if expired { Duration::ZERO } else { Duration::from_secs(60) };
                let leases = store.lease(Some(run), IDENTITIES[who], n, ttl).await.unwrap();
                for lease in &leases {
                    if !job_ids.contains(&lease.job_id) {
                        job_ids.push(lease.job_id);
                    }
                }
                held[who].extend(leases);
            }
            Step::Report { who, i, lie, forge, steal } => {
                let owner = if steal { (who + 1) % IDENTITIES.len() } else { who };
                let Some(lease) = held[owner].get(i).cloned() else { continue };
                let liar = IDENTITIES[who] == "liar";
                let count = true_count(&lease) + u128::from(lie || liar);
                let mut report = checked_completion(&lease, IDENTITIES[who], count);
                if forge {
                    report.token = "forged".into();
                }
                let _ = store.complete(&report).await;
            }
            Step::Repeat { who, i } => {
                let Some(lease) = held[who].get(i).cloned() else { continue };
                let _ = store.complete(&checked_completion(&lease, IDENTITIES[who], true_count(&lease))).await;
            }
            Step::Fail { who, i } => {
                let Some(lease) = held[who].get(i).cloned() else { continue };
                let _ = store.fail(lease.job_id, &lease.token, IDENTITIES[who], "random failure").await;
            }
            Step::Heartbeat { who, foreign } => {
                let owner = if foreign { (who + 1) % IDENTITIES.len() } else { who };
                let tokens: Vec<String> = held[owner].iter().map(|l| l.token.clone()).collect();
                let outcome = store.heartbeat(IDENTITIES[who], &tokens, Duration::from_secs(60)).await.unwrap();
                if foreign && owner != who {
                    assert!(outcome.extended.is_empty(), "only the holder extends a lease");
                }
            }
            Step::Recount { job } => {
                if let Some(id) = job_ids.get(job) {
                    let _ = store.recount(*id).await;
                }
            }
            Step::Requeue => {
                let _ = store.requeue(run, None).await;
            }
        }
        check(&store, run, &path).await;
    }

    // Honest identities can always finish the run, and it ends exact.
    let expected = weighted_sum(SMALL);
    for _ in 0..20 {
        store.requeue(run, None).await.unwrap();
        let progress = store.progress(run).await.unwrap();
        if progress.conflicts > 0 {
            for id in &job_ids {
                let _ = store.recount(*id).await;
            }
        }
        for who in ["a", "b", "c", "d", "e"] {
            let leases = store.lease(Some(run), who, 30, Duration::from_secs(60)).await.unwrap();
            let done: Vec<Completion> = leases.iter().map(|l| checked_completion(l, who, true_count(l))).collect();
            store.complete_many(&done).await.unwrap();
        }
        let total = store.total(run).await.unwrap();
        if total.is_final {
            assert_eq!(total.weighted_sum, expected);
            assert_eq!(total.answer, census(SMALL).published());
            // The case passed: its file goes, with the WAL files SQLite
            // keeps beside it (hundreds of cases a run left 45 MB of them).
            store.close().await;
            for suffix in ["", "-wal", "-shm"] {
                let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
            }
            return;
        }
        // Leases still held by the random phase expire within their ttl; shorten the wait by failing them.
        for (who, leases) in held.iter().enumerate() {
            for lease in leases {
                let _ = store.fail(lease.job_id, &lease.token, IDENTITIES[who], "given up").await;
            }
        }
    }
    panic!("honest identities could not finish the run: {:?}", store.progress(run).await.unwrap());
}

/// What holds after every step.
async fn check(store: &Arc<dyn JobStore>, run: i64, path: &std::path::Path) {
    let total = store.total(run).await.expect("the stored total always rechecks");
    let progress = store.progress(run).await.unwrap();
    // The leased jobs progress reports (kept by a trigger) are the jobs
    // in the leased state, whichever step moved them.
    let leased: i64 = {
        use sqlx::Connection;
        let mut connection = sqlx::SqliteConnection::connect(&format!("sqlite://{}", path.display())).await.unwrap();
        let leased = sqlx::query_scalar("SELECT COUNT(*) FROM jobs WHERE state = 'leased' AND run_id = $1")
            .bind(run)
            .fetch_one(&mut connection)
            .await
            .unwrap();
        // And each identity's, as the lease's cap reads them first.
        let owners: Vec<(String, i64, i64)> = sqlx::query_as(
            "SELECT o.owner, o.counted, (SELECT COUNT(*) FROM jobs j WHERE j.state = 'leased' AND j.lease_owner = o.owner)
             FROM (SELECT owner, SUM(leased) AS counted FROM owner_leases GROUP BY owner) o",
        )
        .fetch_all(&mut connection)
        .await
        .unwrap();
        for (owner, counted, leased) in owners {
            assert_eq!(counted, leased, "{owner}'s leased jobs as the trigger counted them");
        }
        let uncounted: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM jobs WHERE state = 'leased' AND lease_owner NOT IN (SELECT owner FROM owner_leases)",
        )
        .fetch_one(&mut connection)
        .await
        .unwrap();
        assert_eq!(uncounted, 0, "every leased job's identity has a count");
        connection.close().await.unwrap();
        leased
    };
    assert_eq!(progress.leased, leased as u64, "the leased jobs as progress counts them: {progress:?}");
    assert!(progress.done <= progress.jobs_total);
    if total.is_final {
        assert_eq!(progress.done, progress.jobs_total, "final only when every job is done");
        assert_eq!(progress.conflicts, 0, "final only with no open conflict");
    }
    let classes = store.class_totals(run).await.unwrap();
    assert_eq!(
        classes.iter().map(|c| c.jobs_done as u64).sum::<u64>(),
        progress.done,
        "one accepted count per done job"
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn any_interleaving_keeps_the_answer_exact(redundancy in 1..=3u32, steps in prop::collection::vec(step(), 1..60)) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(play(redundancy, steps));
    }
}
