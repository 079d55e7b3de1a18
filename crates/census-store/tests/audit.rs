//! The README's SQL audit, run on real SQLite files with the `sqlite3`
//! shell (its exact `decimal_sum`/`decimal_mul`): every value the README's
//! SQLite queries print equals the store's own answer, and no view of any
//! file yields a float. The files hold a Russell 9x9 run, the whole 2x5
//! census (contributions past 2^100) and the 2x4 census with counts past
//! 2^126 (class sums past 2^64, contributions past 2^254).

use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use census_store::{Completion, JobStore, StoreConfig, StoreError, connect};
use num_bigint::BigUint;

use census_store::conformance::fixtures::{RUSSELL, SMALL, census, completion, jobs, spec, true_count};

const TTL: Duration = Duration::from_secs(3600);

/// The README's SQLite audit queries: each ```sql block whose first line
/// starts with `-- SQLite`, with what its heading says it is for.
fn readme_queries() -> Vec<(String, String)> {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md")).unwrap();
    let blocks: Vec<(String, String)> = readme
        .split("```sql\n")
        .skip(1)
        .filter_map(|block| block.split_once("\n```").map(|(sql, _)| sql))
        .filter(|sql| sql.starts_with("-- SQLite"))
        .map(|sql| (sql.lines().next().unwrap().to_string(), sql.to_string()))
        .collect();
    assert_eq!(blocks.len(), 3, "the README's three SQLite audit queries: {blocks:?}");
    blocks
}

/// What the `sqlite3` shell prints for `sql` on `file`: one line a row,
/// columns separated by `|`.
fn sqlite3(file: &str, sql: &str) -> String {
    use std::io::Write;
    // The SQL goes on standard input: an argument starting with "--" would be an option.
    let mut shell = Command::new("sqlite3")
        .args(["-batch", "-bail", file])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("the audit runs the sqlite3 shell (apt-get install sqlite3): {e}"));
    shell.stdin.take().unwrap().write_all(sql.as_bytes()).unwrap();
    let output = shell.wait_with_output().unwrap();
    assert!(output.status.success(), "sqlite3 {sql}: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout).unwrap().trim_end().to_string()
}

/// An SQLite store in a new file.
async fn sqlite_file(name: &str) -> (String, Arc<dyn JobStore>) {
    let dir = std::env::temp_dir().join(format!("census-audit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{name}.db")).display().to_string();
    let _ = std::fs::remove_file(&path);
    let store = connect(&path, StoreConfig::default()).await.unwrap();
    (path, store)
}

/// Leases every job of run 1 and reports `count` of each, on two threads.
async fn count_every_job(store: &Arc<dyn JobStore>, count: impl Fn(&census_store::Lease) -> u128 + Sync) {
    let leases = store.lease(Some(1), "w", 100_000, TTL).await.unwrap();
    let reports: Vec<Completion> = std::thread::scope(|scope| {
        let (left, right) = leases.split_at(leases.len() / 2);
        let count = &count;
        let other = scope.spawn(move || right.iter().map(|l| completion(l, "w", count(l))).collect::<Vec<_>>());
        let mut reports: Vec<Completion> = left.iter().map(|l| completion(l, "w", count(l))).collect();
        reports.extend(other.join().unwrap());
        reports
    });
    for outcome in store.complete_many(&reports).await.unwrap() {
        outcome.unwrap();
    }
}

/// Runs the README's queries on the file of a finished run 1 and compares
/// them with the store's total; then checks that no view yields a float.
async fn audit(path: &str, store: Arc<dyn JobStore>, nine_by_nine: bool) {
    let total = store.total(1).await.unwrap();
    assert!(total.is_final);
    let (weighted, answer) = (total.weighted_sum.to_string(), total.answer.unwrap().to_string());
    store.close().await;
    for (heading, sql) in readme_queries() {
        let printed = sqlite3(path, &sql);
        if heading.contains("sum of the classes' contributions") {
            assert_eq!(printed, format!("{weighted}|{weighted}|{weighted}|{answer}"), "{heading}");
        } else if heading.contains("every stored sum checked") {
            assert_eq!(printed, "0|0|0", "{heading}");
        } else if heading.contains("a 9x9 run") {
            assert_eq!(printed, if nine_by_nine { answer.as_str() } else { "" }, "{heading}");
        } else {
            panic!("no expectation for the README's query {heading:?}");
        }
    }
    // No column of any view is a float, in any row.
    for view in ["group_totals", "class_totals", "run_progress"] {
        let columns = sqlite3(path, &format!("SELECT name FROM pragma_table_info('{view}')"));
        let checks: Vec<String> = columns.lines().map(|c| format!("typeof(\"{c}\") = 'real'")).collect();
        let floats = sqlite3(path, &format!("SELECT count(*) FROM {view} WHERE {}", checks.join(" OR ")));
        assert_eq!(floats, "0", "{view} yields floats");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_audit_adds_up_a_9x9_run_exactly() {
    let (path, store) = sqlite_file("russell").await;
    store.create_run(&spec(RUSSELL, 1), &jobs(RUSSELL)).await.unwrap();
    count_every_job(&store, true_count).await;
    audit(&path, store, true).await;
    // S, the Russell stage's seed sums times its class sizes (Felgenhauer and Jarvis).
    let s = sqlite3(&path, "SELECT decimal_sum(contribution) FROM class_totals WHERE run_id = 1");
    assert_eq!(s, census_math::total::PUBLISHED_S.to_string());
}

/// The 2x5 census (Pettersen's count, README "Other kinds of census"): each
/// class's contribution weight x F^2 passes 2^63, which SQLite's INTEGER
/// turned into a float; here it is the exact text the store folds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_audit_adds_up_a_2x5_run_exactly() {
    const SHAPE: &str = "shape boxes=2x5";
    let (path, store) = sqlite_file("shape-2x5").await;
    store.create_run(&spec(SHAPE, 1), &jobs(SHAPE)).await.unwrap();
    count_every_job(&store, true_count).await;
    let classes = store.class_totals(1).await.unwrap();
    audit(&path, store, false).await;
    assert_eq!(sqlite3(&path, "SELECT answer FROM run_progress WHERE run_id = 1"), "1903816047972624930994913280000");
    // Every class's contribution, as text, is weight x F^2 computed here.
    let shown =
        sqlite3(&path, "SELECT class_id || ' ' || contribution FROM group_totals WHERE run_id = 1 ORDER BY class_id");
    let expected: Vec<String> = classes
        .iter()
        .map(|class| format!("{} {}", class.class_id, BigUint::from(class.weight) * class.count_sum.pow(2)))
        .collect();
    assert_eq!(shown.lines().collect::<Vec<_>>(), expected);
    assert!(expected.iter().any(|line| line.len() > 25), "some contribution passes 2^63");
}

/// Counts far past 64 bits (synthetic: the 2x4 census's jobs reported with
/// counts above 2^126), audited in the file exactly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_audit_adds_up_counts_past_2_to_the_126_exactly() {
    let (path, store) = sqlite_file("big-counts").await;
    let jobs = jobs(SMALL);
    store.create_run(&spec(SMALL, 1), &jobs).await.unwrap();
    let big = |key: &str| (1u128 << 126) + jobs.iter().position(|job| job.key == key).unwrap() as u128 * 999_999_937;
    count_every_job(&store, |lease| big(&lease.key)).await;
    audit(&path, store, false).await;
    let counts: Vec<u128> = jobs.iter().map(|job| big(&job.key)).collect();
    let answer = census(SMALL).fold(&jobs, &counts).unwrap().value;
    assert_eq!(sqlite3(&path, "SELECT answer FROM runs WHERE id = 1"), answer.to_string());
    // Every class sum past 2^64 (20 digits and more), every contribution past 2^128 (40 digits and more).
    let past = sqlite3(&path, "SELECT min(length(count_sum)) >= 20, min(length(contribution)) >= 40 FROM group_totals");
    assert_eq!(past, "1|1");
}

/// A finished run's answer is folded again from its accepted results and
/// checked against the stored one once per store, then read from its row
/// (a status page polled at 10^7 jobs must not fold 10^7 results a poll).
/// A changed stored answer is folded and refused at once; a damaged result
/// under an answer already verified is refused by the next store that opens
/// the file (a restarted coordinator).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_answer_is_verified_once_per_store() {
    let (path, store) = sqlite_file("verified").await;
    store.create_run(&spec(RUSSELL, 1), &jobs(RUSSELL)).await.unwrap();
    count_every_job(&store, true_count).await;
    let verified = store.total(1).await.unwrap();
    assert!(verified.is_final);
    let answer = verified.answer.clone().unwrap();

    sqlite3(&path, "UPDATE runs SET answer = answer || '0' WHERE id = 1");
    let refused = store.total(1).await.unwrap_err();
    assert!(matches!(refused, StoreError::TotalMismatch { .. }), "{refused}");
    sqlite3(&path, &format!("UPDATE runs SET answer = '{answer}' WHERE id = 1"));
    assert_eq!(store.total(1).await.unwrap().answer, Some(answer.clone()));

    // Results are append-only: only a damaged file changes one.
    sqlite3(
        &path,
        "DROP TRIGGER IF EXISTS results_never_change;
         UPDATE results SET count = '1' WHERE id = (SELECT min(id) FROM results WHERE outcome = 'accepted')",
    );
    assert_eq!(store.total(1).await.unwrap().answer, Some(answer), "verified once, read from the row");
    store.close().await;
    let reopened = connect(&path, StoreConfig::default()).await.unwrap();
    let refused = reopened.total(1).await.unwrap_err();
    assert!(matches!(refused, StoreError::TotalMismatch { .. }), "{refused}");
}

/// A job with a second accepted result of its round (inserted behind the
/// store's back: results are append-only, not insert-proof) is not one job
/// counted once: the next store to read the finished run refuses its
/// answer, naming the job, however the fold pages the results.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_accepted_twice_is_refused_by_the_recheck() {
    let (path, store) = sqlite_file("accepted-twice").await;
    store.create_run(&spec(RUSSELL, 1), &jobs(RUSSELL)).await.unwrap();
    count_every_job(&store, true_count).await;
    assert!(store.total(1).await.unwrap().is_final);
    store.close().await;
    sqlite3(
        &path,
        "INSERT INTO results (job_id, run_id, attempt, worker, count, elapsed_ms, counter_version, outcome,
                              finished_at, round)
         SELECT job_id, run_id, attempt, worker, count, elapsed_ms, counter_version, outcome, finished_at, round
         FROM results WHERE id = (SELECT max(id) FROM results WHERE outcome = 'accepted')",
    );
    let reopened = connect(&path, StoreConfig::default()).await.unwrap();
    let refused = reopened.total(1).await.unwrap_err();
    let message = refused.report();
    assert!(matches!(refused, StoreError::TotalMismatch { .. }), "{message}");
    assert!(message.contains("appears twice"), "{message}");
}
