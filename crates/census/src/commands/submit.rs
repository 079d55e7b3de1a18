//! `census submit`: create a run on a running coordinator.

use std::process::ExitCode;

use census_proto::v1::CreateRunRequest;

use super::client::{connect, status_error};
use super::roles::runtime;

#[derive(clap::Args)]
pub struct Args {
    /// The coordinator's gRPC address.
    #[arg(long, env = "CENSUS_COORDINATOR", default_value = "http://127.0.0.1:50051")]
    coordinator: String,
    /// The stage: 44|russell, 71|felgenhauer-jarvis, 174, 416, 2051, 36288|catalogue.
    #[arg(long, env = "CENSUS_STAGE")]
    stage: String,
    /// The counter: column-sets, banded or enumerate.
    #[arg(long, env = "CENSUS_COUNTER", default_value = "column-sets")]
    counter: String,
    /// Distinct workers that must agree on each job.
    #[arg(long, env = "CENSUS_REDUNDANCY", default_value_t = 1)]
    redundancy: u32,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    runtime()?.block_on(async move {
        let mut client = connect(&args.coordinator).await?;
        let request = CreateRunRequest { stage: args.stage, counter: args.counter, redundancy: args.redundancy };
        let run = client.create_run(request).await.map_err(status_error)?.into_inner();
        println!(
            "run {}: stage {}, counter {} ({}), redundancy {}, {} classes, {} jobs ({} done){}",
            run.run_id,
            run.stage,
            run.counter,
            run.counter_version,
            run.redundancy,
            run.classes,
            run.jobs_total,
            run.jobs_done,
            if run.r#final { ", final" } else { "" }
        );
        Ok(ExitCode::SUCCESS)
    })
}
