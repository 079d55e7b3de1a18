//! The conformance suite (`census_store::conformance::exercise_backend`),
//! run against every backend: SQLite (a temporary file) and Postgres (a
//! throw-away server, or CENSUS_TEST_DATABASE_URL); and what only a
//! backend's own test can do (damage a stored row, name a file).

use census_store::conformance::exercise_backend;
use census_store::conformance::fixtures::{SMALL, TTL, completion, drain, jobs, spec, true_count};
use census_store::{SqlBackend, StoreConfig, StoreError, connect};

/// Every database the suite's backends opened, as sqlx connects to it.
static OPENED: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

async fn sqlite_backend() -> SqlBackend {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let dir = census_testpg::scratch_dir("census-store-test");
    let path = dir.join(format!("{}.db", NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)));
    let _ = std::fs::remove_file(&path);
    OPENED.lock().unwrap().push(format!("sqlite://{}", path.display()));
    SqlBackend::connect(path.to_str().unwrap()).await.unwrap()
}

async fn postgres_backend() -> SqlBackend {
    let url = tokio::task::spawn_blocking(census_testpg::fresh_database).await.unwrap();
    OPENED.lock().unwrap().push(url.clone());
    SqlBackend::connect(&url).await.unwrap()
}

/// After every property of the suite, each run's and each identity's
/// leased jobs as the triggers of migrations `run_leases` and
/// `owner_leases` counted them are the jobs in the leased state: every way the suite moves a job into or out of its lease
/// (leases, reports, failures, expiries, recounts, requeues, quarantines,
/// cancelled runs) keeps the count.
async fn the_lease_counts_agree_with_the_jobs(scheme: &str) {
    sqlx::any::install_default_drivers();
    let opened: Vec<String> = OPENED.lock().unwrap().iter().filter(|url| url.starts_with(scheme)).cloned().collect();
    assert!(!opened.is_empty());
    let (mut runs, mut owners_seen) = (0, 0);
    for url in opened {
        use sqlx::Connection;
        let mut connection = sqlx::AnyConnection::connect(&url).await.unwrap();
        let disagreeing: Vec<(i64, i64, i64)> = sqlx::query_as(
            "SELECT r.id,
                    (SELECT COUNT(*) FROM jobs j WHERE j.run_id = r.id AND j.state = 'leased'),
                    (SELECT CAST(COALESCE(SUM(l.leased), 0) AS BIGINT) FROM run_leases l WHERE l.run_id = r.id)
             FROM runs r",
        )
        .fetch_all(&mut connection)
        .await
        .unwrap();
        runs += disagreeing.len();
        let disagreeing: Vec<_> = disagreeing.into_iter().filter(|(_, jobs, counted)| jobs != counted).collect();
        assert!(disagreeing.is_empty(), "{url}: (run, leased jobs, counted) {disagreeing:?}");
        // And each identity's, as the trigger of migration `owner_leases`
        // counted them, expired or not.
        let mut by_owner = Vec::new();
        for sql in [
            "SELECT lease_owner, COUNT(*) FROM jobs WHERE state = 'leased' GROUP BY lease_owner",
            "SELECT owner, CAST(SUM(leased) AS BIGINT) FROM owner_leases GROUP BY owner",
        ] {
            let rows: Vec<(String, i64)> = sqlx::query_as(sql).fetch_all(&mut connection).await.unwrap();
            by_owner.push(rows.into_iter().filter(|(_, n)| *n != 0).collect::<std::collections::BTreeMap<_, _>>());
        }
        let (leased, counted) = (&by_owner[0], &by_owner[1]);
        assert_eq!(counted, leased, "{url}: each identity's leased jobs as the trigger counted them");
        owners_seen += leased.len();
        connection.close().await.unwrap();
    }
    assert!(runs > 0, "the suite made runs");
    assert!(owners_seen > 0, "the suite left leases held");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_conforms() {
    exercise_backend(sqlite_backend).await;
    the_lease_counts_agree_with_the_jobs("sqlite:").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_conforms() {
    exercise_backend(postgres_backend).await;
    the_lease_counts_agree_with_the_jobs("postgres").await;
}

#[tokio::test]
async fn an_unopenable_database_names_itself() {
    let error = connect("/nonexistent-dir/census.db", StoreConfig::default()).await.err().expect("cannot open");
    let message = error.to_string();
    assert!(message.contains("/nonexistent-dir/census.db"), "{message}");
}

/// A run whose stored census text this code cannot read (a damaged
/// database, or one a newer version wrote) is an error naming the run in
/// every read that needs its census, never a run of some default census.
/// `url` opens the store; `direct` is the same database for sqlx alone.
async fn a_stored_census_that_cannot_be_read_is_an_error(url: &str, direct: &str) {
    use sqlx::Connection;
    let store = connect(url, StoreConfig::default()).await.unwrap();
    let run = store.create_run(&spec(SMALL, 1), &jobs(SMALL)).await.unwrap();
    let lease = store.lease(Some(run), "w", 1, TTL).await.unwrap().remove(0);
    store.complete(&completion(&lease, "w", true_count(&lease))).await.unwrap();
    store.close().await;
    let mut connection = sqlx::AnyConnection::connect(direct).await.unwrap();
    sqlx::query("UPDATE runs SET census = 'shape boxes=2x99' WHERE id = $1")
        .bind(run)
        .execute(&mut connection)
        .await
        .unwrap();
    connection.close().await.unwrap();

    let store = connect(url, StoreConfig::default()).await.unwrap();
    fn unreadable<T: std::fmt::Debug>(run: i64, what: &str, result: Result<T, StoreError>) {
        let message = result.as_ref().err().map(StoreError::report).unwrap_or_default();
        assert!(
            matches!(result, Err(StoreError::UnreadableCensus { run: named, .. }) if named == run),
            "{what}: {result:?}"
        );
        assert!(message.contains(&format!("run {run}")) && message.contains("boxes=2x99"), "{what}: {message}");
    }
    unreadable(run, "list_runs", store.list_runs().await);
    unreadable(run, "run", store.run(run).await);
    unreadable(run, "total", store.total(run).await);
    unreadable(run, "lease", store.lease(Some(run), "w", 1, TTL).await);
    unreadable(run, "censuses_of", store.censuses_of(&[lease.job_id]).await);
    // What is stored is kept: the class sums still read.
    let classes = store.class_totals(run).await.unwrap();
    assert_eq!(classes.iter().map(|class| class.jobs_done).sum::<u32>(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_stored_census_that_cannot_be_read_is_an_error() {
    let path = std::env::temp_dir().join(format!("census-store-unreadable-{}.db", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let path = path.display().to_string();
    a_stored_census_that_cannot_be_read_is_an_error(&path, &format!("sqlite://{path}")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_stored_census_that_cannot_be_read_is_an_error() {
    let url = tokio::task::spawn_blocking(census_testpg::fresh_database).await.unwrap();
    a_stored_census_that_cannot_be_read_is_an_error(&url, &url).await;
}

/// A finished run of several pages (25,001 jobs: three of the fold's pages
/// of 10,000), read by a new store (a restarted coordinator), is folded
/// again from its accepted results, page by page, to the same answer; the
/// store that finished it answers from what it folded then.
async fn a_finished_run_of_many_pages_is_folded_again_by_a_new_store(url: &str) {
    use census_math::synthetic;
    const JOBS: u64 = 25_001;
    let census: census_store::Census = format!("synthetic jobs={JOBS}").parse().unwrap();
    let spec = census_store::RunSpec { census, counter_version: census.counter_version(), redundancy: 1 };
    let store = connect(url, StoreConfig::default()).await.unwrap();
    let run = store.create_run_streaming(&spec, census.job_stream().unwrap()).await.unwrap();
    assert_eq!(drain(store.as_ref(), run, "w").await.len() as u64, JOBS);
    let expected = Some(synthetic::expected_answer(JOBS, 0));
    assert_eq!(store.total(run).await.unwrap().answer, expected);
    store.close().await;
    let reopened = connect(url, StoreConfig::default()).await.unwrap();
    let total = reopened.total(run).await.unwrap();
    assert!(total.is_final);
    assert_eq!(total.answer, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_finished_run_of_many_pages_is_folded_again_by_a_new_store() {
    let path = std::env::temp_dir().join(format!("census-store-many-pages-{}.db", std::process::id()));
    let _ = std::fs::remove_file(&path);
    a_finished_run_of_many_pages_is_folded_again_by_a_new_store(&path.display().to_string()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_finished_run_of_many_pages_is_folded_again_by_a_new_store() {
    let url = tokio::task::spawn_blocking(census_testpg::fresh_database).await.unwrap();
    a_finished_run_of_many_pages_is_folded_again_by_a_new_store(&url).await;
}

/// A store opened over runs it has not read yet (a restarted
/// coordinator) leases from any of them: what it must learn of a run it
/// reads in the lease's own transaction, which holds SQLite's one
/// connection (reading it on another waited for the pool until it timed
/// out, five minutes).
async fn a_new_store_leases_from_runs_it_has_not_read(url: &str) {
    let store = connect(url, StoreConfig::default()).await.unwrap();
    let run = store.create_run(&spec(SMALL, 1), &jobs(SMALL)).await.unwrap();
    store.close().await;
    let reopened = connect(url, StoreConfig::default()).await.unwrap();
    let leases = reopened.lease(None, "w", 1, TTL).await.unwrap();
    assert_eq!(leases.iter().map(|lease| lease.run_id).collect::<Vec<_>>(), [run]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_new_store_leases_from_runs_it_has_not_read() {
    let path = std::env::temp_dir().join(format!("census-store-reopened-{}.db", std::process::id()));
    let _ = std::fs::remove_file(&path);
    a_new_store_leases_from_runs_it_has_not_read(&path.display().to_string()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_new_store_leases_from_runs_it_has_not_read() {
    let url = tokio::task::spawn_blocking(census_testpg::fresh_database).await.unwrap();
    a_new_store_leases_from_runs_it_has_not_read(&url).await;
}

/// Once a run is created, Postgres's planner knows how many jobs and
/// classes there are (the store analyzes them): a 10^7-job run planned on
/// the statistics of empty tables leased and reported at a tenth of its
/// speed until autovacuum sampled them a minute or two later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_new_runs_tables_are_analyzed() {
    use sqlx::Connection;
    let url = tokio::task::spawn_blocking(census_testpg::fresh_database).await.unwrap();
    let store = connect(&url, StoreConfig::default()).await.unwrap();
    store.create_run(&spec(SMALL, 1), &jobs(SMALL)).await.unwrap();
    let mut connection = sqlx::PgConnection::connect(&url).await.unwrap();
    for table in ["jobs", "classes"] {
        let rows: i64 =
            sqlx::query_scalar(&format!("SELECT COUNT(*) FROM {table}")).fetch_one(&mut connection).await.unwrap();
        // -1 until the table is first analyzed (Postgres 14 on).
        let planned: f32 = sqlx::query_scalar("SELECT reltuples FROM pg_class WHERE relname = $1")
            .bind(table)
            .fetch_one(&mut connection)
            .await
            .unwrap();
        assert!(rows > 1, "{rows} rows of {table}");
        assert_eq!(planned, rows as f32, "the planner's rows of {table}");
    }
}
