//! `census recount`: count a job again, to resolve a conflict or, in a run
//! of stages (a `layers` census), to write again an output set aside
//! because it failed its digest.

use std::process::ExitCode;

use census_proto::v1::RecountJobRequest;

use super::client::{Credentials, connect, status_error};
use super::roles::runtime;

#[derive(clap::Args)]
pub struct Args {
    /// The coordinator's gRPC address.
    #[arg(long, env = "CENSUS_COORDINATOR", default_value = "http://127.0.0.1:50051")]
    coordinator: String,
    /// The job with a conflict (docs/audit.md, "Conflicts, failures and rejected results", lists them), or
    /// a done or failed job of a run of stages: it and every job of the
    /// stages after it are counted again (a worker's failure that blames a
    /// layers job's files names this command with the job that wrote them).
    #[arg(long)]
    job: i64,
    #[command(flatten)]
    credentials: Credentials,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    runtime()?.block_on(async move {
        let mut client = connect(&args.coordinator, &args.credentials).await?;
        client.recount_job(RecountJobRequest { job_id: args.job }).await.map_err(status_error)?;
        println!(
            "job {} goes back to the queue (in a run of stages, with the stages after it); the run's total is \
             provisional until they are counted again",
            args.job
        );
        Ok(ExitCode::SUCCESS)
    })
}
