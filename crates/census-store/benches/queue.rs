//! The queue's speed: creating the whole-catalogue run (362,880 jobs), then
//! draining it with batched lease + complete round trips from 2 clients.
//!
//! `cargo bench -p census-store --bench queue` (SQLite and a throw-away
//! Postgres; set CENSUS_TEST_DATABASE_URL to use your own server).
//! `QUEUE_BENCH_BACKEND=sqlite|postgres` runs only one backend.

use std::sync::Arc;
use std::time::{Duration, Instant};

use census_math::census::Census;
use census_store::{Completion, JobSpec, JobStore, RunSpec, StoreConfig, connect};

const CLIENTS: usize = 2;
const BATCH: u32 = 1024;

/// The whole 9x9 catalogue: 36,288 classes x 10 seeds.
const CATALOGUE: &str = "sudoku stage=catalogue counter=column-sets";

async fn bench(name: &str, store: Arc<dyn JobStore>, all_jobs: &[JobSpec]) {
    let spec = RunSpec { census: CATALOGUE.parse().unwrap(), counter_version: "bench".into(), redundancy: 1 };
    let started = Instant::now();
    let run = store.create_run(&spec, all_jobs).await.unwrap();
    let created = started.elapsed();
    let jobs = all_jobs.len();

    let started = Instant::now();
    let mut tasks = Vec::new();
    for client in 0..CLIENTS {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let worker = format!("bench-{client}");
            loop {
                let leases = store.lease(Some(run), &worker, BATCH, Duration::from_secs(60)).await.unwrap();
                if leases.is_empty() {
                    break;
                }
                let done: Vec<Completion> = leases
                    .iter()
                    .map(|l| Completion {
                        job_id: l.job_id,
                        token: l.token.clone(),
                        worker: worker.clone(),
                        key: l.key.clone(),
                        // Made-up counts: the queue's speed, not the census's.
                        count: 1000 + l.key.len() as u128,
                        elapsed: Duration::from_micros(10),
                        counter_version: "bench".into(),
                        checked_count: None,
                    })
                    .collect();
                store.complete_many(&done).await.unwrap();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let drained = started.elapsed();
    assert!(store.total(run).await.unwrap().is_final);
    println!(
        "{name}: create run of {jobs} jobs in {:.2} s; {CLIENTS} clients x batches of {BATCH}: drained in {:.2} s = {:.0} jobs/s",
        created.as_secs_f64(),
        drained.as_secs_f64(),
        jobs as f64 / drained.as_secs_f64()
    );
}

fn main() {
    let classes: Vec<JobSpec> = CATALOGUE.parse::<Census>().unwrap().jobs().unwrap();
    let only = std::env::var("QUEUE_BENCH_BACKEND").unwrap_or_default();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    if only.is_empty() || only == "sqlite" {
        let path = std::env::temp_dir().join(format!("census-queue-bench-{}.db", std::process::id()));
        runtime.block_on(async {
            let store = connect(path.to_str().unwrap(), StoreConfig::default()).await.unwrap();
            bench("sqlite", store, &classes).await;
        });
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
        }
    }
    if only.is_empty() || only == "postgres" {
        let url = census_testpg::fresh_database();
        runtime.block_on(async {
            let store = connect(&url, StoreConfig::default()).await.unwrap();
            bench("postgres", store, &classes).await;
        });
    }
}
