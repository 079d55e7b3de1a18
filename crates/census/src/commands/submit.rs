//! `census submit`: create a run on a running coordinator.

use std::process::ExitCode;

use census_proto::v1::CreateRunRequest;

use super::client::{Credentials, connect, status_error};
use super::roles::runtime;

#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("what").required(true).args(["census", "stage"])))]
pub struct Args {
    /// The coordinator's gRPC address.
    #[arg(long, env = "CENSUS_COORDINATOR", default_value = "http://127.0.0.1:50051")]
    coordinator: String,
    #[arg(long, env = "CENSUS_CENSUS", conflicts_with_all = ["stage", "counter"], help = super::census_help())]
    census: Option<String>,
    #[arg(long, env = "CENSUS_STAGE", help = super::STAGE_HELP)]
    stage: Option<String>,
    #[arg(long, env = "CENSUS_COUNTER", help = super::COUNTER_HELP)]
    counter: Option<String>,
    /// Distinct worker identities (tokens) that must agree on each job, 1 to 5 (default: the census's, 2 for 4x3, 2x6 and layers, 1 for the others: docs/operations.md#checked-results).
    #[arg(long, env = "CENSUS_REDUNDANCY", value_parser = clap::value_parser!(u32).range(1..=i64::from(census_store::MAX_REDUNDANCY)))]
    redundancy: Option<u32>,
    /// Runs with higher priority are leased first.
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    priority: i64,
    #[command(flatten)]
    credentials: Credentials,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    runtime()?.block_on(async move {
        let mut client = connect(&args.coordinator, &args.credentials).await?;
        let request = CreateRunRequest {
            census: args.census.unwrap_or_default(),
            stage: args.stage.unwrap_or_default(),
            counter: args.counter.unwrap_or_default(),
            redundancy: args.redundancy.unwrap_or(0),
            priority: args.priority,
        };
        let run = client.create_run(request).await.map_err(status_error)?.into_inner();
        println!(
            "run {}: {} ({}), redundancy {}, priority {}, {} classes, {} jobs ({} done){}",
            run.run_id,
            run.census,
            run.counter_version,
            run.redundancy,
            run.priority,
            run.classes,
            run.jobs_total,
            run.jobs_done,
            if run.r#final { ", final" } else { "" }
        );
        Ok(ExitCode::SUCCESS)
    })
}
