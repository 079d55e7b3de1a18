//! `census status`: a run's progress, or its result when it is done.

use std::process::ExitCode;

use census_proto::v1::{GetProgressRequest, GetResultRequest, ListClassesRequest, WatchProgressRequest};
use serde::Serialize;

use super::client::{Credentials, connect, print_result, progress_line, status_error};
use super::roles::runtime;

#[derive(clap::Args)]
pub struct Args {
    /// The coordinator's gRPC address.
    #[arg(long, env = "CENSUS_COORDINATOR", default_value = "http://127.0.0.1:50051")]
    coordinator: String,
    /// The run (default: the latest).
    #[arg(long)]
    run: Option<i64>,
    /// Keep printing progress until the run is final.
    #[arg(long)]
    watch: bool,
    /// Print one JSON object: progress and result.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    credentials: Credentials,
}

#[derive(Serialize)]
struct StatusJson {
    run_id: i64,
    jobs_total: u64,
    done: u64,
    leased: u64,
    pending: u64,
    failed: u64,
    conflicts: u64,
    r#final: bool,
    s: String,
    n0: String,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    runtime()?.block_on(async move {
        let mut client = connect(&args.coordinator, &args.credentials).await?;
        let run_id = args.run.unwrap_or(0);
        let mut progress = client.get_progress(GetProgressRequest { run_id }).await.map_err(status_error)?.into_inner();
        if args.watch && !progress.r#final {
            let mut stream = client
                .watch_progress(WatchProgressRequest { run_id: progress.run_id, interval_ms: 1000 })
                .await
                .map_err(status_error)?
                .into_inner();
            while let Some(next) = stream.message().await.map_err(status_error)? {
                if !args.json {
                    println!("{}", progress_line(&next));
                }
                progress = next;
            }
        }
        let result = client.get_result(GetResultRequest { run_id: progress.run_id }).await.map_err(status_error)?.into_inner();
        if args.json {
            let status = StatusJson {
                run_id: progress.run_id,
                jobs_total: progress.jobs_total,
                done: progress.done,
                leased: progress.leased,
                pending: progress.pending,
                failed: progress.failed,
                conflicts: progress.conflicts,
                r#final: result.r#final,
                s: result.s,
                n0: result.n0,
            };
            println!("{}", serde_json::to_string_pretty(&status)?);
            return Ok(ExitCode::SUCCESS);
        }
        println!("{}", progress_line(&progress));
        for name in &progress.quarantined {
            println!("  QUARANTINED: {name} (results rejected; `census token release {name}` lifts it)");
        }
        for worker in &progress.workers {
            println!("  worker {}: {} jobs, {} completions counted", worker.worker_id, worker.jobs, worker.completions);
        }
        let classes = client.list_classes(ListClassesRequest { run_id: progress.run_id }).await.map_err(status_error)?.into_inner().classes;
        if classes.len() <= 100 {
            for class in &classes {
                println!(
                    "  class {:>3} {} size {:>5}: {}/10 seeds, n = {}",
                    class.class_id, class.representative, class.size, class.seeds_done, class.completions
                );
            }
        }
        print_result(&result);
        Ok(ExitCode::SUCCESS)
    })
}
