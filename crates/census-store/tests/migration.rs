//! A database of the previous version (9x9 runs only: stage, counter,
//! classes of bands, one job per class and seed) opens with this version:
//! migration 0003 keeps every run, class, job and result, a finished run's
//! answer rechecks, and an unfinished run resumes and finishes exactly. On
//! both backends.

use std::time::Duration;

use census_math::total::PUBLISHED_S;
use census_math::{ClassTable, CounterKind, SEEDS, Stage};
use census_store::{StoreConfig, connect};
use sqlx::Connection;

mod common;
use common::{completion, true_count};

const N0: &str = "6670903752021072936960";

/// The migrations of the previous version only, in a directory of their own.
async fn previous_migrations(backend: &str) -> sqlx::migrate::Migrator {
    let source = concat!(env!("CARGO_MANIFEST_DIR"), "/../../migrations/");
    let dir = std::env::temp_dir().join(format!("census-migrations-{backend}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for file in ["0001_census.sql", "0002_trust.sql"] {
        std::fs::copy(format!("{source}{backend}/{file}"), dir.join(file)).unwrap();
    }
    sqlx::migrate::Migrator::new(dir).await.unwrap()
}

/// Run 1: the Russell stage, finished, with S and N0 stored as the previous
/// version stored them. Run 2: the same stage with the banded counter, half
/// counted.
fn previous_rows() -> Vec<String> {
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
                         VALUES ({job}, {run}, 1, 'old-worker', {count}, 0.5, 'column-sets/1', 'accepted', 2)"
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
    {
        let mut connection = sqlx::AnyConnection::connect(direct).await.unwrap();
        previous_migrations(backend).await.run(&mut connection).await.unwrap();
        for statement in previous_rows() {
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
    assert_eq!(runs[0].spec.census, "sudoku stage=russell counter=column-sets");
    assert_eq!(runs[1].spec.census, "sudoku stage=russell counter=banded");
    assert_eq!((runs[0].classes, runs[0].jobs_total, runs[0].jobs_done, runs[0].is_final), (44, 440, 440, true));
    assert_eq!((runs[1].jobs_done, runs[1].is_final), (220, false));

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
    assert!(leases.iter().all(|lease| lease.census == "sudoku stage=russell counter=banded"));
    assert!(leases[0].key.len() == 27 + 1 + 7, "{:?}", leases[0].key);
    let done: Vec<_> = leases.iter().map(|lease| completion(lease, "new-worker", true_count(lease))).collect();
    for outcome in store.complete_many(&done).await.unwrap() {
        outcome.unwrap();
    }
    let total = store.total(2).await.unwrap();
    assert!(total.is_final);
    assert_eq!(total.answer.unwrap().to_string(), N0);
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
