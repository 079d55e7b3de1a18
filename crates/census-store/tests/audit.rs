//! The SQL of the documents, run on real runs of both stores: every ```sql
//! block of docs/audit.md, and every query the README's commands give
//! (`sqlite3 census.db "..."`, `psql ... -c "..."`), on SQLite files with
//! the `sqlite3` shell (its exact `decimal_sum`/`decimal_mul`) and on
//! Postgres with `psql` (the throw-away server of `census-testpg`). A block
//! whose first line starts with `-- SQLite` is for SQLite only, `-- Postgres`
//! for Postgres only; every other query must run on both and print the same
//! rows (`t`/`f` read as SQLite's 1/0). What a query says it shows is
//! checked: the README's shown output, the sums that must agree, N0, and
//! the classes of an essentially different run picked by its census on a
//! file where it is not run 1. The SQLite files hold a Russell 9x9 run, the
//! whole 2x5 census (contributions past 2^100) and the 2x4 census with counts
//! past 2^126 (class sums past 2^64, contributions past 2^254); no view of
//! any of them yields a float.

use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use census_store::{Completion, JobStore, RunId, StoreConfig, StoreError, connect};
use num_bigint::BigUint;

use census_store::conformance::fixtures::{RUSSELL, SMALL, census, completion, jobs, spec, true_count};

const TTL: Duration = Duration::from_secs(3600);

/// The stores a query of the documents is for.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Stores {
    SqliteOnly,
    PostgresOnly,
    Both,
}

/// A query of the documents: where it is, its first line (what it is for),
/// its text, the stores it is for, and the output the page shows, if any.
#[derive(Debug)]
struct Query {
    place: String,
    heading: String,
    sql: String,
    stores: Stores,
    shown: Option<String>,
}

impl Query {
    fn runs_on_sqlite(&self) -> bool {
        self.stores != Stores::PostgresOnly
    }
    fn runs_on_postgres(&self) -> bool {
        self.stores != Stores::SqliteOnly
    }
}

fn read(page: &str) -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../").to_string() + page).unwrap()
}

/// Every ```sql block of docs/audit.md, and every query in a command of the
/// README (the text between the double quotes that follow `sqlite3 FILE` or
/// `-c`), with the output a ```console block shows below it.
fn document_queries() -> Vec<Query> {
    let mut queries = Vec::new();
    let audit = read("docs/audit.md");
    for block in audit.split("```sql\n").skip(1) {
        let sql = block.split_once("\n```").expect("a closed ```sql block").0.to_string();
        let heading = sql.lines().next().unwrap_or_default().to_string();
        let stores = if heading.starts_with("-- SQLite") {
            Stores::SqliteOnly
        } else if heading.starts_with("-- Postgres") {
            Stores::PostgresOnly
        } else {
            Stores::Both
        };
        queries.push(Query { place: "docs/audit.md".into(), heading, sql, stores, shown: None });
    }
    let readme = read("README.md");
    let lines: Vec<&str> = readme.lines().collect();
    for (number, line) in lines.iter().enumerate() {
        let command = line.split(" # ").next().unwrap();
        let quoted = if command.starts_with("$ sqlite3 ") || command.contains("sqlite3 census.db \"") {
            command.find(" \"")
        } else if command.contains("psql ") {
            command.find(" -c \"").map(|at| at + 3)
        } else {
            None
        };
        let Some(at) = quoted else { continue };
        let (Some(open), Some(close)) = (command[at..].find('"').map(|q| at + q), command.rfind('"')) else {
            continue;
        };
        let sql = command[open + 1..close].to_string();
        // What a console block shows below a `$ ` command: its next lines,
        // up to an empty line or the end of the block.
        let shown = line.starts_with("$ ").then(|| {
            lines[number + 1..]
                .iter()
                .take_while(|l| !l.is_empty() && !l.starts_with("```"))
                .copied()
                .collect::<Vec<_>>()
                .join("\n")
        });
        queries.push(Query {
            place: format!("README.md:{}", number + 1),
            heading: sql.clone(),
            sql,
            stores: Stores::Both,
            shown,
        });
    }
    assert!(queries.iter().filter(|q| q.place.starts_with("README")).count() >= 2, "the README's queries: {queries:?}");
    assert!(queries.len() >= 15, "the documents' queries: {queries:?}");
    queries
}

/// What the `sqlite3` shell prints for `sql` on `file`: one line a row,
/// columns separated by `|`.
fn sqlite3(file: &str, sql: &str) -> String {
    use std::io::Write;
    // The SQL goes on standard input: an argument starting with "--" would be an option.
    // A closing store's last connection checkpoints and removes the
    // write-ahead log under an exclusive lock; the shell waits it out
    // (`.timeout`) instead of failing with "database is locked".
    let mut shell = Command::new("sqlite3")
        .args(["-batch", "-bail", "-cmd", ".timeout 10000", file])
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

/// What `psql` prints for `sql` on the database at `url`, in the same form
/// as [`sqlite3`]: unaligned, no header, columns separated by `|`.
fn psql(url: &str, sql: &str) -> String {
    use std::io::Write;
    let mut shell = Command::new(census_testpg::binary("psql"))
        .args([url, "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-P", "pager=off"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    shell.stdin.take().unwrap().write_all(sql.as_bytes()).unwrap();
    let output = shell.wait_with_output().unwrap();
    assert!(output.status.success(), "psql {sql}: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout).unwrap().trim_end().to_string()
}

/// Postgres's booleans as SQLite prints them, so the two stores' rows compare.
fn as_sqlite_prints(rows: &str) -> String {
    let field = |f: &str| match f {
        "t" => "1".to_string(),
        "f" => "0".to_string(),
        other => other.to_string(),
    };
    rows.lines().map(|row| row.split('|').map(field).collect::<Vec<_>>().join("|")).collect::<Vec<_>>().join("\n")
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

/// Leases every job of `run` and reports `count` of each, on two threads.
async fn count_every_job(store: &Arc<dyn JobStore>, run: RunId, count: impl Fn(&census_store::Lease) -> u128 + Sync) {
    let leases = store.lease(Some(run), "w", 100_000, TTL).await.unwrap();
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

/// What a query that checks a finished latest run must print, by what its
/// first line says it is for (`weighted` and `answer`: the latest run's;
/// `n0`: the latest 9x9 run's answer, if the database holds one); None for
/// a query that only lists rows.
fn expected(heading: &str, weighted: &str, answer: &str, n0: Option<&str>) -> Option<String> {
    if heading.contains("the sum of the classes' contributions") {
        Some(format!("{weighted}|{weighted}|{weighted}|{answer}"))
    } else if heading.contains("every stored sum checked") {
        Some("0|0|0".into())
    } else if heading.contains("a 9x9 run: N0") {
        Some(n0.unwrap_or_default().to_string())
    } else {
        None
    }
}

/// Runs every SQLite query of the documents on the file of a finished run
/// 1, checks what they claim against the store's total, then checks that no
/// view yields a float.
async fn audit(path: &str, store: Arc<dyn JobStore>, nine_by_nine: bool) {
    let total = store.total(1).await.unwrap();
    assert!(total.is_final);
    let (weighted, answer) = (total.weighted_sum.to_string(), total.answer.unwrap().to_string());
    store.close().await;
    for query in document_queries().iter().filter(|q| q.runs_on_sqlite()) {
        let printed = sqlite3(path, &query.sql);
        let n0 = nine_by_nine.then_some(answer.as_str());
        if let Some(expected) = expected(&query.heading, &weighted, &answer, n0) {
            assert_eq!(printed, expected, "{}: {}", query.place, query.heading);
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

/// |G|, the rearrangements of a 9x9 grid: an essentially different run's
/// weighted sum is |G| times its answer.
const GROUP_ORDER: u128 = 3_359_232;

/// One store of each kind, holding the same runs.
struct BothStores {
    sqlite: (String, Arc<dyn JobStore>),
    postgres: (String, Arc<dyn JobStore>),
}

impl BothStores {
    async fn new() -> BothStores {
        let sqlite = sqlite_file("both-stores").await;
        let url = tokio::task::spawn_blocking(census_testpg::fresh_database).await.unwrap();
        let postgres = (url.clone(), connect(&url, StoreConfig::default()).await.unwrap());
        BothStores { sqlite, postgres }
    }

    /// A run of `text` in both stores, each job reported with `count` of it.
    async fn count(&self, text: &str, count: impl Fn(&census_store::Lease) -> u128 + Sync + Copy) -> RunId {
        let mut ids = Vec::new();
        for store in [&self.sqlite.1, &self.postgres.1] {
            let run = store.create_run(&spec(text, 1), &jobs(text)).await.unwrap();
            count_every_job(store, run, count).await;
            assert!(store.total(run).await.unwrap().is_final, "{text}");
            ids.push(run);
        }
        assert_eq!(ids[0], ids[1], "the two stores number their runs alike");
        ids[0]
    }

    /// Runs every query of the documents on the stores it is for: a query
    /// for both prints the same rows on both, and, with `as_shown`, a query
    /// whose output the README shows prints that. Returns each query's rows
    /// (SQLite's, or Postgres's as SQLite prints them), with the query.
    fn run_every_query(&self, queries: &[Query], as_shown: bool) -> Vec<(String, String)> {
        let mut printed = Vec::new();
        for query in queries {
            let on_sqlite = query.runs_on_sqlite().then(|| sqlite3(&self.sqlite.0, &query.sql));
            let on_postgres = query.runs_on_postgres().then(|| as_sqlite_prints(&psql(&self.postgres.0, &query.sql)));
            if let (Some(sqlite), Some(postgres)) = (&on_sqlite, &on_postgres) {
                assert_eq!(sqlite, postgres, "{}: the two stores differ on {}", query.place, query.heading);
            }
            let rows = on_sqlite.or(on_postgres).unwrap();
            if let Some(shown) = query.shown.as_ref().filter(|_| as_shown) {
                assert_eq!(&rows, shown, "{}: not what the README shows", query.place);
            }
            printed.push((query.heading.clone(), rows));
        }
        printed
    }
}

/// Every query of the documents on a Postgres database and an SQLite file
/// holding the same runs: first the 9x9 count alone (what `census run`
/// leaves, and what the README shows), then a 2x4 run and an essentially
/// different run after it, which the queries of those kinds must find by
/// their census (the essentially different run is run 3, not run 1 or 2).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_query_of_the_documents_runs_alike_on_both_stores() {
    let queries = document_queries();
    let stores = BothStores::new().await;
    let nine = stores.count(RUSSELL, true_count).await;
    let total = stores.postgres.1.total(nine).await.unwrap();
    let (weighted, answer) = (total.weighted_sum.to_string(), total.answer.unwrap().to_string());
    for (heading, rows) in stores.run_every_query(&queries, true) {
        if let Some(expected) = expected(&heading, &weighted, &answer, Some(&answer)) {
            assert_eq!(rows, expected, "{heading}");
        }
    }

    stores.count(SMALL, true_count).await;
    // Made-up counts for the essentially different census (the true ones
    // take half a minute of CPU): |G| for the first job of each of two
    // classes, 0 for every other job, so that Burnside's sum is a multiple
    // of |G| and exactly those two classes fix a grid.
    let ed_jobs = jobs("essentially-different");
    let second = ed_jobs.iter().position(|job| job.group != ed_jobs[0].group).unwrap();
    let fixing = [&ed_jobs[0], &ed_jobs[second]];
    let fixing_keys: Vec<String> = fixing.iter().map(|job| job.key.clone()).collect();
    let ed = stores
        .count("essentially-different", |lease| if fixing_keys.contains(&lease.key) { GROUP_ORDER } else { 0 })
        .await;
    assert_eq!(ed, 3);
    let printed = stores.run_every_query(&queries, false);
    let rows_of = |what: &str| {
        printed
            .iter()
            .find(|(heading, _)| heading.contains(what))
            .unwrap_or_else(|| panic!("no query {what:?}"))
            .1
            .clone()
    };
    let mut classes: Vec<String> = rows_of("The classes that fix some grid").lines().map(String::from).collect();
    classes.sort();
    let mut fixing_rows: Vec<String> = fixing
        .iter()
        .map(|job| format!("{}|{}|{GROUP_ORDER}|{}", job.group, job.weight, GROUP_ORDER * job.weight))
        .collect();
    fixing_rows.sort();
    assert_eq!(classes, fixing_rows, "the essentially different run's classes that fix a grid");
    let ed_answer = fixing.iter().map(|job| job.weight).sum::<u128>();
    let burnside = GROUP_ORDER * ed_answer;
    assert_eq!(rows_of("Burnside's sum"), format!("{burnside}|{ed_answer}|{burnside}"));
    // The shape query finds the 2x4 run (run 2), every one of its 26 classes.
    assert_eq!(rows_of("Every column-set class of the latest shape run").lines().count(), 26);
    // The 9x9 queries still read the 9x9 run, the other queries the latest.
    assert!(rows_of("Every class of the latest 9x9 run").starts_with("0|123456789456789123789123456|4|10|"));
    let n0 = answer;
    let latest = stores.postgres.1.total(ed).await.unwrap();
    let (weighted, answer) = (latest.weighted_sum.to_string(), latest.answer.unwrap().to_string());
    for (heading, rows) in &printed {
        if let Some(expected) = expected(heading, &weighted, &answer, Some(&n0)) {
            assert_eq!(rows, &expected, "{heading}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documents_audit_adds_up_a_9x9_run_exactly() {
    let (path, store) = sqlite_file("russell").await;
    store.create_run(&spec(RUSSELL, 1), &jobs(RUSSELL)).await.unwrap();
    count_every_job(&store, 1, true_count).await;
    audit(&path, store, true).await;
    // S, the Russell stage's seed sums times its class sizes (Felgenhauer and Jarvis).
    let s = sqlite3(&path, "SELECT decimal_sum(contribution) FROM class_totals WHERE run_id = 1");
    assert_eq!(s, census_math::total::PUBLISHED_S.to_string());
}

/// The 2x5 census (Pettersen's count, docs/audit.md "Other kinds of census"): each
/// class's contribution weight x F^2 passes 2^63, which SQLite's INTEGER
/// turned into a float; here it is the exact text the store folds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documents_audit_adds_up_a_2x5_run_exactly() {
    const SHAPE: &str = "shape boxes=2x5";
    let (path, store) = sqlite_file("shape-2x5").await;
    store.create_run(&spec(SHAPE, 1), &jobs(SHAPE)).await.unwrap();
    count_every_job(&store, 1, true_count).await;
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
async fn the_documents_audit_adds_up_counts_past_2_to_the_126_exactly() {
    let (path, store) = sqlite_file("big-counts").await;
    let jobs = jobs(SMALL);
    store.create_run(&spec(SMALL, 1), &jobs).await.unwrap();
    let big = |key: &str| (1u128 << 126) + jobs.iter().position(|job| job.key == key).unwrap() as u128 * 999_999_937;
    count_every_job(&store, 1, |lease| big(&lease.key)).await;
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
    count_every_job(&store, 1, true_count).await;
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
    count_every_job(&store, 1, true_count).await;
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
