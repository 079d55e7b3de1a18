//! `census verify`: do finished runs of different stages agree on S?

use std::process::ExitCode;

use census_math::total::thousands;
use census_proto::v1::{GetResultRequest, ListRunsRequest};
use census_store::StoreConfig;

use super::UsageError;
use super::client::{Credentials, connect, status_error};
use super::roles::runtime;

#[derive(clap::Args)]
pub struct Args {
    /// Read the runs from this database (postgres:// URL or SQLite path; default: census.db when it exists).
    #[arg(long, env = "CENSUS_DATABASE_URL", conflicts_with = "coordinator")]
    database: Option<String>,
    /// Or ask this coordinator.
    #[arg(long)]
    coordinator: Option<String>,
    /// The runs to compare, e.g. 1,2 (default: every finished run).
    #[arg(long, value_delimiter = ',')]
    runs: Vec<i64>,
    #[command(flatten)]
    credentials: Credentials,
}

enum Source {
    Database(String),
    Coordinator(String),
}

/// (run, stage, final, S)
type RunTotalLine = (i64, String, bool, String);

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    runtime()?.block_on(async move {
        // Without --database or --coordinator: the file `census run` writes by default.
        let source = match (&args.database, &args.coordinator) {
            (Some(database), _) => Source::Database(database.clone()),
            (None, Some(coordinator)) => Source::Coordinator(coordinator.clone()),
            (None, None) if std::path::Path::new("census.db").exists() => Source::Database("census.db".to_string()),
            (None, None) => {
                return Err(UsageError("give --database or --coordinator (there is no census.db here)".into()).into());
            }
        };
        let lines: Vec<RunTotalLine> = match &source {
            Source::Database(database) => {
                let store = census_store::connect(database, StoreConfig::default()).await?;
                let mut lines = Vec::new();
                for run in store.list_runs().await? {
                    let total = store.total(run.run_id).await?;
                    lines.push((run.run_id, run.spec.stage, total.is_final, total.s));
                }
                lines
            }
            Source::Coordinator(coordinator) => {
                let mut client = connect(coordinator, &args.credentials).await?;
                let runs = client.list_runs(ListRunsRequest {}).await.map_err(status_error)?.into_inner().runs;
                let mut lines = Vec::new();
                for run in runs {
                    let result = client
                        .get_result(GetResultRequest { run_id: run.run_id })
                        .await
                        .map_err(status_error)?
                        .into_inner();
                    lines.push((run.run_id, run.stage, result.r#final, result.s));
                }
                lines
            }
        };
        let chosen: Vec<&RunTotalLine> = if args.runs.is_empty() {
            lines.iter().filter(|line| line.2).collect()
        } else {
            let mut chosen = Vec::new();
            for id in &args.runs {
                let line = lines
                    .iter()
                    .find(|line| line.0 == *id)
                    .ok_or_else(|| UsageError(format!("there is no run {id}")))?;
                if !line.2 {
                    return Err(UsageError(format!("run {id} ({}) is not finished", line.1)).into());
                }
                chosen.push(line);
            }
            chosen
        };
        if chosen.len() < 2 {
            let where_to = match &source {
                Source::Database(database) => format!("`census run --stage 71 --database {database}`"),
                Source::Coordinator(_) => "`census submit --stage 71`".to_string(),
            };
            return Err(UsageError(format!(
                "verify compares finished runs of different stages and found {}; count a second stage into the same \
                 database first, e.g. {where_to}",
                chosen.len()
            ))
            .into());
        }
        let s_of = |text: &str| thousands(&text.parse::<num_bigint::BigUint>().unwrap_or_default());
        for (run, stage, _, s) in &chosen {
            println!("run {run} ({stage}): S = {}", s_of(s));
        }
        let agree = chosen.iter().all(|line| line.3 == chosen[0].3);
        if agree {
            println!("agree: every run gives S = {}", s_of(&chosen[0].3));
            Ok(ExitCode::SUCCESS)
        } else {
            println!("DISAGREE: the runs give different totals");
            Ok(ExitCode::FAILURE)
        }
    })
}
