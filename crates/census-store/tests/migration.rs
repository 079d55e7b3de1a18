//! Databases of earlier versions open with this one. A 9x9 database of the
//! second version (stage, counter, classes of bands, one job per class and
//! seed): migration 0003 keeps every run, class, job and result, a finished
//! run's answer rechecks, and an unfinished run resumes and finishes
//! exactly, on both backends. An SQLite database of the fifth version (64-bit
//! INTEGER counts, whose sums had overflowed to REAL): migration 0006 keeps
//! every count, and the store rebuilds every sum exactly.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use census_math::total::PUBLISHED_S;
use census_math::{ClassTable, CounterKind, SEEDS, Stage};
use census_store::{StoreConfig, connect};
use sqlx::Connection;

use census_store::conformance::fixtures::{self, completion, true_count};

const N0: &str = "6670903752021072936960";

/// The migrations of an earlier version only (`files`), in a directory of
/// their own.
async fn earlier_migrations(backend: &str, files: &[&str]) -> sqlx::migrate::Migrator {
    let source = concat!(env!("CARGO_MANIFEST_DIR"), "/../../migrations/");
    let dir = std::env::temp_dir().join(format!("census-migrations-{backend}-{}-{}", files.len(), std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for file in files {
        std::fs::copy(format!("{source}{backend}/{file}"), dir.join(file)).unwrap();
    }
    sqlx::migrate::Migrator::new(dir).await.unwrap()
}

/// Run 1: the Russell stage, finished, with S and N0 stored as the previous
/// version stored them. Run 2: the same stage with the banded counter, half
/// counted, its results recorded at `recent` (ms).
fn previous_rows(recent: i64) -> Vec<String> {
    let table = ClassTable::build(Stage::Russell);
    let counter = CounterKind::ColumnSets.build();
    let mut sql = vec![
        format!(
            "INSERT INTO runs (id, stage, counter, counter_version, jobs_total, jobs_remaining, created_at, finished_at, s, n0)
             VALUES (1, 'russell', 'column-sets', 'column-sets/1', 440, 0, 1, 2, '{PUBLISHED_S}', '{N0}')"
        ),
        "INSERT INTO runs (id, stage, counter, counter_version, jobs_total, jobs_remaining, created_at)
         VALUES (2, 'russell', 'banded', 'banded/1', 440, 220, 1)"
            .to_string(),
    ];
    let mut job = 0;
    for run in [1, 2] {
        for class in table.classes() {
            let counts: Vec<u64> = SEEDS.iter().map(|seed| counter.count(&class.representative, seed)).collect();
            let done = if run == 1 { 10 } else { 5 };
            let sum: u64 = counts[..done].iter().sum();
            sql.push(format!(
                "INSERT INTO classes (run_id, class_id, representative, size, seed_sum, seeds_done)
                 VALUES ({run}, {}, '{}', {}, {sum}, {done})",
                class.id, class.representative, class.size
            ));
            for (seed, count) in counts.iter().enumerate() {
                job += 1;
                if seed < done {
                    sql.push(format!(
                        "INSERT INTO jobs (id, run_id, class_id, seed, state, attempt, votes, count, created_at, updated_at)
                         VALUES ({job}, {run}, {}, {seed}, 'done', 1, 1, {count}, 1, 2)",
                        class.id
                    ));
                    sql.push(format!(
                        "INSERT INTO results (job_id, run_id, attempt, worker, count, elapsed_ms, counter_version, outcome, finished_at)
                         VALUES ({job}, {run}, 1, 'old-worker', {count}, 0.5, 'column-sets/1', 'accepted', {})",
                        if run == 1 { 2 } else { recent }
                    ));
                } else if class.id == 0 && seed == done {
                    // Leased by a worker that has gone: its lease expired.
                    sql.push(format!(
                        "INSERT INTO jobs (id, run_id, class_id, seed, state, attempt, lease_owner, lease_token,
                                           lease_expires_at, created_at, updated_at)
                         VALUES ({job}, {run}, {}, {seed}, 'leased', 1, 'old-worker', 'old-token', 1, 1, 1)",
                        class.id
                    ));
                } else {
                    sql.push(format!(
                        "INSERT INTO jobs (id, run_id, class_id, seed, created_at, updated_at) VALUES ({job}, {run}, {}, {seed}, 1, 1)",
                        class.id
                    ));
                }
            }
        }
    }
    sql
}

/// `url` as the store takes it; `direct` as sqlx connects to it.
async fn a_previous_database_migrates_and_resumes(url: &str, direct: &str, backend: &str) {
    sqlx::any::install_default_drivers();
    let recorded;
    {
        let mut connection = sqlx::AnyConnection::connect(direct).await.unwrap();
        earlier_migrations(backend, &["0001_census.sql", "0002_trust.sql"]).await.run(&mut connection).await.unwrap();
        let second_ago = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as i64 - 1000;
        recorded = Instant::now();
        for statement in previous_rows(second_ago) {
            sqlx::query(&statement).execute(&mut connection).await.unwrap();
        }
        // Postgres's sequences follow explicit ids only when told.
        if backend == "postgres" {
            for table in ["runs", "jobs", "results"] {
                sqlx::query(&format!("SELECT setval('{table}_id_seq', (SELECT MAX(id) FROM {table}))"))
                    .execute(&mut connection)
                    .await
                    .unwrap();
            }
        }
        connection.close().await.unwrap();
    }

    let store = connect(url, StoreConfig::default()).await.unwrap();
    let runs = store.list_runs().await.unwrap();
    assert_eq!(runs.len(), 2);
    assert_eq!(runs[0].spec.census.to_string(), "sudoku stage=russell counter=column-sets");
    assert_eq!(runs[1].spec.census.to_string(), "sudoku stage=russell counter=banded");
    assert_eq!((runs[0].classes, runs[0].jobs_total, runs[0].jobs_done, runs[0].is_final), (44, 440, 440, true));
    assert_eq!((runs[1].jobs_done, runs[1].is_final), (220, false));
    // Jobs stored before costs were cost 1 each: progress by cost is
    // progress by jobs.
    for (run, done) in [(1, 440), (2, 220)] {
        let progress = store.progress(run).await.unwrap();
        assert_eq!((progress.cost_total, progress.cost_done), (440, done), "run {run}");
    }
    // Run 2's results were recorded a second before the migration, without
    // their jobs' costs: the speed by cost looks up each one's job (cost 1
    // here), so it is the speed by jobs.
    let progress = store.progress(2).await.unwrap();
    // The job leased before the migration is counted leased (migration
    // `run_leases` counts what it finds).
    assert_eq!((progress.leased, progress.pending), (1, 219), "{progress:?}");
    // And counted as its identity's (migration `owner_leases`).
    assert_eq!(leases_counted(direct).await, vec![("old-worker".to_string(), 1)]);
    assert_eq!(progress.cost_per_second, progress.jobs_per_second, "{progress:?}");
    // The speed is over the last minute's results: unless this machine took
    // most of a minute to get here, they are all in it.
    if recorded.elapsed() < Duration::from_secs(50) {
        assert!(progress.jobs_per_second > 0.0, "{progress:?}");
    }

    // The finished run's answer folds again from its migrated results.
    let total = store.total(1).await.unwrap();
    assert!(total.is_final);
    assert_eq!(total.answer.unwrap().to_string(), N0);
    assert_eq!(total.weighted_sum.to_string(), PUBLISHED_S.to_string());
    let classes = store.class_totals(1).await.unwrap();
    assert!(classes.iter().all(|class| class.complete() && class.label.len() == 27 && class.jobs_total == 10));

    // The unfinished run resumes: its jobs have keys a worker counts from.
    // (Counting 220 jobs with the banded counter takes minutes on a busy
    // machine: the leases last the longest a lease may, not a minute.)
    let leases = store.lease(Some(2), "new-worker", 1000, Duration::from_secs(3600)).await.unwrap();
    assert_eq!(leases.len(), 220);
    assert!(leases.iter().all(|lease| lease.census.to_string() == "sudoku stage=russell counter=banded"));
    assert!(leases[0].key.len() == 27 + 1 + 7, "{:?}", leases[0].key);
    let done: Vec<_> = leases.iter().map(|lease| completion(lease, "new-worker", true_count(lease))).collect();
    for outcome in store.complete_many(&done).await.unwrap() {
        outcome.unwrap();
    }
    let total = store.total(2).await.unwrap();
    assert!(total.is_final);
    assert_eq!(total.answer.unwrap().to_string(), N0);
    let progress = store.progress(2).await.unwrap();
    assert_eq!((progress.cost_done, progress.leased), (440, 0), "{progress:?}");
    // The expired lease taken over moved from its old identity to the new.
    assert_eq!(leases_counted(direct).await, vec![("new-worker".to_string(), 0), ("old-worker".to_string(), 0)]);
}

/// Each identity's leased jobs as the trigger of migration `owner_leases`
/// counted them, by identity.
async fn leases_counted(direct: &str) -> Vec<(String, i64)> {
    let mut connection = sqlx::AnyConnection::connect(direct).await.unwrap();
    let counted =
        sqlx::query_as("SELECT owner, CAST(SUM(leased) AS BIGINT) FROM owner_leases GROUP BY owner ORDER BY owner")
            .fetch_all(&mut connection)
            .await
            .unwrap();
    connection.close().await.unwrap();
    counted
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sqlite_file_of_the_previous_version_migrates() {
    let path = std::env::temp_dir().join(format!("census-migration-{}.db", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let file = path.display().to_string();
    a_previous_database_migrates_and_resumes(&file, &format!("sqlite://{file}?mode=rwc"), "sqlite").await;
    let _ = std::fs::remove_file(&path);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_database_of_the_previous_version_migrates() {
    let url = tokio::task::spawn_blocking(census_testpg::fresh_database).await.unwrap();
    a_previous_database_migrates_and_resumes(&url, &url, "postgres").await;
}

/// The fifth version's SQLite schema (migrations 0001-0005).
const FIFTH_VERSION: [&str; 5] =
    ["0001_census.sql", "0002_trust.sql", "0003_kinds.sql", "0004_lean_queue.sql", "0005_bounded_identities.sql"];

/// The synthetic count of job `index` of the 2x4 census in the fifth
/// version's database: each below 2^62, so each was a valid 64-bit INTEGER,
/// but their sums pass 2^63 and their contributions (weight x F^2) 2^124.
fn fifth_version_count(index: usize) -> u128 {
    (1u128 << 62) - 1 - index as u128 * 7
}

/// Writes, as the fifth version's store did (its SQL arithmetic included),
/// run 1: the 2x4 census finished by one worker, and run 2: the same census
/// with redundancy 2, half counted by two workers.
#[allow(clippy::too_many_lines)] // A test's fixture: the 100-line rule is for non-test code.
async fn fifth_version_rows(connection: &mut sqlx::AnyConnection) {
    let census = fixtures::census(fixtures::SMALL);
    let jobs = fixtures::jobs(fixtures::SMALL);
    let version = census.counter_version();
    let counts: Vec<u128> = (0..jobs.len()).map(fifth_version_count).collect();
    let answer = census.fold(&jobs, &counts).unwrap().value;
    let weighted: num_bigint::BigUint = weighted_sum_of(&jobs, &counts, jobs.len());
    let n = jobs.len();
    let statements = vec![
        format!(
            "INSERT INTO runs (id, census, counter_version, redundancy, jobs_total, jobs_remaining, created_at,
                               finished_at, weighted_sum, answer, class_power)
             VALUES (1, '{}', '{version}', 1, {n}, {n}, 1, NULL, NULL, NULL, 2)",
            fixtures::SMALL
        ),
        format!(
            "INSERT INTO runs (id, census, counter_version, redundancy, jobs_total, jobs_remaining, created_at, class_power)
             VALUES (2, '{}', '{version}', 2, {n}, {n}, 1, 2)",
            fixtures::SMALL
        ),
    ];
    for statement in statements {
        sqlx::query(&statement).execute(&mut *connection).await.unwrap();
    }
    let mut job_id = 0;
    for run in [1i64, 2] {
        let mut class_of = std::collections::HashMap::new();
        for job in &jobs {
            if !class_of.contains_key(&job.group) {
                let class = class_of.len();
                class_of.insert(job.group.clone(), class);
                let jobs_in_class = jobs.iter().filter(|other| other.group == job.group).count();
                sqlx::query(
                    "INSERT INTO classes (run_id, class_id, label, weight, jobs_total) VALUES ($1, $2, $3, $4, $5)",
                )
                .bind(run)
                .bind(class as i64)
                .bind(&job.group)
                .bind(job.weight as i64)
                .bind(jobs_in_class as i64)
                .execute(&mut *connection)
                .await
                .unwrap();
            }
        }
        for (index, job) in jobs.iter().enumerate() {
            job_id += 1;
            let class = class_of[&job.group] as i64;
            sqlx::query(
                "INSERT INTO jobs (id, run_id, class_id, key, created_at, updated_at) VALUES ($1, $2, $3, $4, 1, 1)",
            )
            .bind(job_id)
            .bind(run)
            .bind(class)
            .bind(&job.key)
            .execute(&mut *connection)
            .await
            .unwrap();
            let done = run == 1 || index % 2 == 0;
            if !done {
                continue;
            }
            let count = counts[index].to_string();
            let workers: &[(&str, &str)] =
                if run == 1 { &[("old", "accepted")] } else { &[("a", "vote"), ("b", "accepted")] };
            for (worker, outcome) in workers {
                sqlx::query(
                    "INSERT INTO results (job_id, run_id, attempt, worker, count, elapsed_ms, counter_version, outcome,
                                          finished_at)
                     VALUES ($1, $2, 1, $3, CAST($4 AS INTEGER), 0.5, $5, $6, 2)",
                )
                .bind(job_id)
                .bind(run)
                .bind(*worker)
                .bind(&count)
                .bind(&version)
                .bind(*outcome)
                .execute(&mut *connection)
                .await
                .unwrap();
            }
            // The fifth version's arithmetic, in SQLite's 64-bit integers.
            for statement in [
                "UPDATE jobs SET state = 'done', count = CAST($2 AS INTEGER), votes = $3, attempt = 1 WHERE id = $1",
                "UPDATE classes SET count_sum = count_sum + CAST($2 AS INTEGER), jobs_done = jobs_done + 1
                 WHERE run_id = (SELECT run_id FROM jobs WHERE id = $1) AND class_id = (SELECT class_id FROM jobs WHERE id = $1) AND $3 > 0",
                "UPDATE runs SET jobs_remaining = jobs_remaining - 1, counted = counted + CAST($2 AS INTEGER)
                 WHERE id = (SELECT run_id FROM jobs WHERE id = $1) AND $3 > 0",
            ] {
                sqlx::query(statement)
                    .bind(job_id)
                    .bind(&count)
                    .bind(workers.len() as i64)
                    .execute(&mut *connection)
                    .await
                    .unwrap();
            }
            let accepting = workers.last().unwrap().0;
            sqlx::query(
                "INSERT INTO worker_stats (run_id, worker, jobs, completions, last_seen) VALUES ($1, $2, 1, CAST($3 AS INTEGER), 2)
                 ON CONFLICT (run_id, worker) DO UPDATE SET jobs = worker_stats.jobs + 1,
                     completions = worker_stats.completions + excluded.completions",
            )
            .bind(run)
            .bind(accepting)
            .bind(&count)
            .execute(&mut *connection)
            .await
            .unwrap();
        }
    }
    sqlx::query("UPDATE runs SET finished_at = 3, weighted_sum = $1, answer = $2 WHERE id = 1")
        .bind(weighted.to_string())
        .bind(answer.to_string())
        .execute(&mut *connection)
        .await
        .unwrap();
}

/// Sum over classes of weight x (sum of the counts of the jobs below
/// `done`, or of every other job for a half-counted run)^2.
fn weighted_sum_of(jobs: &[census_store::JobSpec], counts: &[u128], done: usize) -> num_bigint::BigUint {
    use num_bigint::BigUint;
    let mut classes: std::collections::BTreeMap<&str, (u128, BigUint)> = Default::default();
    for (index, job) in jobs.iter().enumerate() {
        let class = classes.entry(&job.group).or_insert((job.weight, BigUint::default()));
        if done == jobs.len() || index % 2 == 0 {
            class.1 += counts[index];
        }
    }
    classes.values().map(|(weight, sum)| BigUint::from(*weight) * sum * sum).sum()
}

/// `SELECT column FROM rest` on the file: its SQLite type and its value.
async fn typed(connection: &mut sqlx::AnyConnection, sql: &str) -> (String, String) {
    use sqlx::Row;
    let (column, rest) = sql.strip_prefix("SELECT ").and_then(|s| s.split_once(" FROM ")).unwrap();
    let row = sqlx::query(&format!("SELECT typeof({column}), CAST({column} AS TEXT) FROM {rest}"))
        .fetch_one(&mut *connection)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    (row.get(0), row.get(1))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sqlite_file_of_the_fifth_version_keeps_every_count_and_sums_exactly() {
    use num_bigint::BigUint;
    sqlx::any::install_default_drivers();
    let path = std::env::temp_dir().join(format!("census-migration-v5-{}.db", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let file = path.display().to_string();
    let direct = format!("sqlite://{file}?mode=rwc");
    let jobs = fixtures::jobs(fixtures::SMALL);
    let counts: Vec<u128> = (0..jobs.len()).map(fifth_version_count).collect();
    let all: BigUint = counts.iter().map(|&count| BigUint::from(count)).sum();
    {
        let mut connection = sqlx::AnyConnection::connect(&direct).await.unwrap();
        earlier_migrations("sqlite", &FIFTH_VERSION).await.run(&mut connection).await.unwrap();
        fifth_version_rows(&mut connection).await;
        // What the fifth version showed: sums overflowed to REAL.
        let (kind, _) = typed(&mut connection, "SELECT counted FROM runs WHERE id = 1").await;
        assert_eq!(kind, "real", "the old database's sum of counts overflowed");
        let (kind, _) = typed(&mut connection, "SELECT weighted_sum_so_far FROM run_progress WHERE run_id = 1").await;
        assert_eq!(kind, "real");
        connection.close().await.unwrap();
    }

    let store = connect(&file, StoreConfig::default()).await.unwrap();
    // Run 1: every count kept; the finished answer folds again from them.
    let total = store.total(1).await.unwrap();
    assert!(total.is_final);
    let answer = fixtures::census(fixtures::SMALL).fold(&jobs, &counts).unwrap().value;
    assert_eq!(total.answer, Some(answer));
    assert_eq!(total.weighted_sum, weighted_sum_of(&jobs, &counts, jobs.len()));
    let progress = store.progress(1).await.unwrap();
    assert_eq!(progress.completions_counted, all.to_string());
    assert_eq!(progress.workers[0].completions, all.to_string());
    for class in store.class_totals(1).await.unwrap() {
        let sum: BigUint =
            jobs.iter().zip(&counts).filter(|(job, _)| job.group == class.label).map(|(_, &c)| BigUint::from(c)).sum();
        assert_eq!(class.count_sum, sum);
    }
    // Run 2: its partial sums exact, it resumes and finishes exactly.
    let half = weighted_sum_of(&jobs, &counts, 0);
    assert_eq!(store.total(2).await.unwrap().weighted_sum, half);
    let mut connection = sqlx::AnyConnection::connect(&direct).await.unwrap();
    for (sql, value) in [
        ("SELECT counted FROM runs WHERE id = 1", all.to_string()),
        ("SELECT weighted_sum_so_far FROM run_progress WHERE run_id = 1", total.weighted_sum.to_string()),
        ("SELECT weighted_sum_so_far FROM run_progress WHERE run_id = 2", half.to_string()),
        ("SELECT completions FROM worker_stats WHERE run_id = 1", all.to_string()),
        ("SELECT count FROM results WHERE id = 1", counts[0].to_string()),
        ("SELECT count FROM jobs WHERE id = 1", counts[0].to_string()),
    ] {
        assert_eq!(typed(&mut connection, sql).await, ("text".to_string(), value), "{sql}");
    }
    connection.close().await.unwrap();

    for worker in ["a", "b"] {
        let leases = store.lease(Some(2), worker, 100, Duration::from_secs(600)).await.unwrap();
        assert_eq!(leases.len(), jobs.len() / 2, "{worker}");
        let reports: Vec<_> = leases
            .iter()
            .map(|lease| {
                let index = jobs.iter().position(|job| job.key == lease.key).unwrap();
                completion(lease, worker, counts[index])
            })
            .collect();
        for outcome in store.complete_many(&reports).await.unwrap() {
            outcome.unwrap();
        }
    }
    let resumed = store.total(2).await.unwrap();
    assert!(resumed.is_final);
    assert_eq!(resumed.answer, total.answer);
    assert_eq!(resumed.weighted_sum, total.weighted_sum);
    store.close().await;
    let _ = std::fs::remove_file(&path);
}
