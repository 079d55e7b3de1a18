//! `census requeue` and `census cancel`: an operator's remedies for a run.

use std::process::ExitCode;

use census_proto::v1::{CancelRunRequest, RequeueJobsRequest, SetRunPriorityRequest};

use super::client::{Credentials, connect, status_error};
use super::roles::runtime;

#[derive(clap::Args)]
pub struct RequeueArgs {
    /// The coordinator's gRPC address.
    #[arg(long, env = "CENSUS_COORDINATOR", default_value = "http://127.0.0.1:50051")]
    coordinator: String,
    /// The run whose failed jobs go back to the queue.
    #[arg(long)]
    run: i64,
    /// Only this job.
    #[arg(long)]
    job: Option<i64>,
    #[command(flatten)]
    credentials: Credentials,
}

pub fn requeue(args: RequeueArgs) -> anyhow::Result<ExitCode> {
    runtime()?.block_on(async move {
        let mut client = connect(&args.coordinator, &args.credentials).await?;
        let request = RequeueJobsRequest { run_id: args.run, job_id: args.job.unwrap_or(0) };
        let requeued = client.requeue_jobs(request).await.map_err(status_error)?.into_inner().requeued;
        println!("run {}: {requeued} failed jobs back in the queue", args.run);
        Ok(ExitCode::SUCCESS)
    })
}

#[derive(clap::Args)]
pub struct CancelArgs {
    /// The coordinator's gRPC address.
    #[arg(long, env = "CENSUS_COORDINATOR", default_value = "http://127.0.0.1:50051")]
    coordinator: String,
    /// The run to cancel: it leases nothing more; `census submit` of the same census resumes it.
    #[arg(long)]
    run: i64,
    #[command(flatten)]
    credentials: Credentials,
}

pub fn cancel(args: CancelArgs) -> anyhow::Result<ExitCode> {
    runtime()?.block_on(async move {
        let mut client = connect(&args.coordinator, &args.credentials).await?;
        let run = client.cancel_run(CancelRunRequest { run_id: args.run }).await.map_err(status_error)?.into_inner();
        println!(
            "run {} ({}) cancelled at {}/{} jobs done; `{}` resumes it",
            run.run_id,
            run.census,
            run.jobs_done,
            run.jobs_total,
            super::client::resume_hint(&run)
        );
        Ok(ExitCode::SUCCESS)
    })
}

#[derive(clap::Args)]
pub struct PriorityArgs {
    /// The coordinator's gRPC address.
    #[arg(long, env = "CENSUS_COORDINATOR", default_value = "http://127.0.0.1:50051")]
    coordinator: String,
    /// The run.
    #[arg(long)]
    run: i64,
    /// Its new priority: higher runs are leased first.
    #[arg(long, allow_negative_numbers = true)]
    priority: i64,
    #[command(flatten)]
    credentials: Credentials,
}

pub fn priority(args: PriorityArgs) -> anyhow::Result<ExitCode> {
    runtime()?.block_on(async move {
        let mut client = connect(&args.coordinator, &args.credentials).await?;
        let request = SetRunPriorityRequest { run_id: args.run, priority: args.priority };
        let run = client.set_run_priority(request).await.map_err(status_error)?.into_inner();
        println!("run {} ({}): priority {}", run.run_id, run.census, run.priority);
        Ok(ExitCode::SUCCESS)
    })
}
