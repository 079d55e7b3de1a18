//! A full disk under the store, for real: a run counted while its
//! database's disk (a small tmpfs of the test's own, `SmallDisk`) fills,
//! stays full, and is freed, on SQLite and on Postgres (a server whose data
//! directory is on the small disk). What the store answered must be what
//! the database holds: every lease it handed out is stored (read back on a
//! connection of its own), every call it refused is refused as the
//! storage's fault (retryable, never the caller's), and once space returns
//! the same store counts the run to its exact answer with no rejection, no
//! quarantine and every job accepted once (issue 44: sqlx's transactions
//! went on inside one that was never committed, and the store handed out
//! leases it never saved).
//!
//! Mounting the disk needs root: without it these tests fail with the reason.

use std::time::Duration;

use census_store::conformance::fixtures::{RUSSELL, completion, jobs, spec, true_count, weighted_sum};
use census_store::{Completion, StoreConfig, StoreError, connect};
use census_testpg::SmallDisk;
use sqlx::Connection;

const WORKER: &str = "honest";
/// Long enough that no lease expires while the test holds it.
const TTL: Duration = Duration::from_secs(3600);

/// A call the store refused while its disk was full: never the caller's
/// fault, and worth retrying; true if it names the full disk.
fn refused_for_the_storage(error: &StoreError, backend: &str) -> bool {
    eprintln!("{backend}: refused: {}", error.report());
    assert!(error.is_retryable(), "{backend}: a full disk is worth a retry, not a refusal: {}", error.report());
    error.storage_fault() == Some(census_store::StorageFault::Full)
}

/// Counts the Russell run as one honest worker through a full disk:
/// `fill` fills it after the first batches, `free` frees it once the store
/// has refused a few calls. Every lease the store hands out is read back
/// from the database by `reader`.
async fn count_through_a_full_disk(
    url: &str,
    reader_url: &str,
    backend: &str,
    fill: impl FnOnce(),
    free: impl FnOnce(),
) {
    let store = connect(url, StoreConfig::default()).await.unwrap();
    let run = store.create_run(&spec(RUSSELL, 1), &jobs(RUSSELL)).await.unwrap();
    let mut reader = sqlx::AnyConnection::connect(reader_url).await.unwrap();
    let (mut fill, mut free) = (Some(fill), Some(free));
    let mut reports: Vec<Completion> = Vec::new();
    let (mut batches, mut refused, mut named_the_disk) = (0, 0, false);
    loop {
        if batches == 3
            && let Some(fill) = fill.take()
        {
            fill();
        }
        if refused >= 5
            && let Some(free) = free.take()
        {
            free();
        }
        // A refused report is sent again, as a worker does.
        if !reports.is_empty() {
            match store.complete_many(&reports).await {
                Ok(outcomes) => {
                    for (report, outcome) in reports.drain(..).zip(outcomes) {
                        assert!(outcome.is_ok(), "{backend}: job {}: {outcome:?}", report.job_id);
                    }
                    batches += 1;
                }
                Err(error) => {
                    named_the_disk |= refused_for_the_storage(&error, backend);
                    refused += 1;
                }
            }
            continue;
        }
        let leases = match store.lease(Some(run), WORKER, 8, TTL).await {
            Ok(leases) => leases,
            Err(error) => {
                named_the_disk |= refused_for_the_storage(&error, backend);
                refused += 1;
                continue;
            }
        };
        if leases.is_empty() {
            break;
        }
        for lease in &leases {
            let stored: Option<String> = sqlx::query_scalar("SELECT lease_token FROM jobs WHERE id = $1")
                .bind(lease.job_id)
                .fetch_one(&mut reader)
                .await
                .unwrap();
            assert_eq!(stored.as_deref(), Some(lease.token.as_str()), "{backend}: a lease handed out is stored");
        }
        reports = leases.iter().map(|lease| completion(lease, WORKER, true_count(lease))).collect();
    }
    assert!(free.is_none(), "{backend}: the disk filled and the store refused calls ({refused} so far)");
    assert!(named_the_disk, "{backend}: a refusal says the database's disk is full");
    let total = store.total(run).await.unwrap();
    assert!(total.is_final, "{backend}");
    assert_eq!(total.weighted_sum, weighted_sum(RUSSELL), "{backend}: S");
    assert!(!store.is_quarantined(WORKER).await.unwrap(), "{backend}");
    store.close().await;

    // What the database holds, read on a connection of its own.
    assert_eq!(
        count(&mut reader, "SELECT COUNT(*) FROM rejections").await,
        0,
        "{backend}: nothing refused as the worker's fault"
    );
    assert_eq!(count(&mut reader, "SELECT COUNT(*) FROM refused_reports").await, 0, "{backend}");
    assert_eq!(count(&mut reader, "SELECT COUNT(*) FROM quarantine").await, 0, "{backend}");
    assert_eq!(count(&mut reader, "SELECT COUNT(*) FROM jobs WHERE state = 'done'").await, 440, "{backend}");
    assert_eq!(count(&mut reader, "SELECT COUNT(*) FROM results WHERE outcome = 'accepted'").await, 440, "{backend}");
    assert_eq!(count(&mut reader, "SELECT COUNT(DISTINCT job_id) FROM results").await, 440, "{backend}: each job once");
    assert_eq!(count(&mut reader, "SELECT COUNT(*) FROM runs WHERE finished_at IS NOT NULL").await, 1, "{backend}");
    reader.close().await.unwrap();

    // A store opened afresh on the database gives the same answer.
    let again = connect(url, StoreConfig::default()).await.unwrap();
    assert_eq!(again.total(run).await.unwrap(), total, "{backend}");
    again.close().await;
}

async fn count(reader: &mut sqlx::AnyConnection, sql: &str) -> i64 {
    sqlx::query_scalar(sql).fetch_one(reader).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_on_a_full_disk_stores_what_it_answers_and_resumes_exact() {
    sqlx::any::install_default_drivers();
    let disk = SmallDisk::mount("store-sqlite", 32 << 20);
    let path = disk.path().join("census.db").display().to_string();
    // The write-ahead log grows a page a write until the full disk stops it.
    let (fill, free) = (|| disk.fill(64 << 10), || disk.free());
    count_through_a_full_disk(&path, &format!("sqlite://{path}?mode=ro"), "sqlite", fill, free).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_on_a_full_disk_stores_what_it_answers_and_resumes_exact() {
    sqlx::any::install_default_drivers();
    let disk = SmallDisk::mount("store-postgres", 256 << 20);
    let server = tokio::task::spawn_blocking({
        let parent = disk.path().to_path_buf();
        move || census_testpg::OwnServer::start_in("full-disk", &parent)
    })
    .await
    .unwrap();
    let url = server.url().to_string();
    // Postgres writes its log into segments it made before, and tables a
    // page at a time: nothing is left, so the next new page fails.
    let (fill, free) = (|| disk.fill(0), || disk.free());
    count_through_a_full_disk(&url, &url, "postgres", fill, free).await;
    drop(server);
}
