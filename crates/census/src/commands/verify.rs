//! `census verify`: do finished runs of the same count agree? For the 9x9
//! count (the default), runs of different stages must give the same S; for
//! another census, runs must give the same answer.

use std::process::ExitCode;

use census_math::census::Census;
use census_math::total::thousands;
use census_proto::v1::{GetResultRequest, ListRunsRequest};
use census_store::DatabaseLocation;

use super::UsageError;
use super::client::{Credentials, connect, status_error};
use super::roles::runtime;

#[derive(clap::Args)]
pub struct Args {
    /// Read the runs from this database (postgres:// URL or SQLite path; default: census.db when it exists).
    #[arg(long, env = "CENSUS_DATABASE_URL", conflicts_with = "coordinator", value_parser = super::DatabaseParser)]
    database: Option<DatabaseLocation>,
    /// Or ask this coordinator.
    #[arg(long)]
    coordinator: Option<String>,
    /// The runs to compare, e.g. 1,2 (default: every finished run of the census).
    #[arg(long, value_delimiter = ',')]
    runs: Vec<i64>,
    /// Compare runs of this census and of any other that has the same
    /// answer, e.g. "shape boxes=2x3" and "shape boxes=3x2" (default: the
    /// 9x9 count, every stage and counter).
    #[arg(long, value_parser = super::CensusParser, env = "CENSUS_CENSUS")]
    census: Option<Census>,
    #[command(flatten)]
    credentials: Credentials,
}

enum Source {
    Database(DatabaseLocation),
    Coordinator(String),
}

/// (run, census, final, the compared number: S for 9x9 runs, else the answer)
type RunTotalLine = (i64, String, bool, String);

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    runtime()?.block_on(async move {
        // Without --database or --coordinator: the file `census run` writes by default.
        let source = match (&args.database, &args.coordinator) {
            (Some(database), _) => Source::Database(database.clone()),
            (None, Some(coordinator)) => Source::Coordinator(coordinator.clone()),
            (None, None) if std::path::Path::new("census.db").exists() => {
                Source::Database(DatabaseLocation::Sqlite("census.db".into()))
            }
            (None, None) => {
                return Err(UsageError("give --database or --coordinator (there is no census.db here)".into()).into());
            }
        };
        let lines = match &source {
            Source::Database(database) => lines_of_database(database).await?,
            Source::Coordinator(coordinator) => lines_of_coordinator(coordinator, &args.credentials).await?,
        };
        // Runs of the same count: those whose census has the same answer.
        let wanted =
            args.census.unwrap_or(Census::sudoku(census_math::Stage::Russell, census_math::CounterKind::ColumnSets));
        let chosen = choose(&lines, &args.runs, &wanted)?;
        // One finished run of a census with a published answer: compare it
        // with that (a second run of the same census cannot be made).
        if let ([line], Some(published)) = (chosen.as_slice(), wanted.published()) {
            return Ok(compare_with_published(line, &wanted, published));
        }
        if chosen.len() < 2 {
            let again = if wanted.is_nine_by_nine() {
                "--stage 71".to_string()
            } else {
                format!("--census {:?}", wanted.to_string())
            };
            let where_to = match &source {
                Source::Database(database) => format!("`census run {again} --database {database}`"),
                Source::Coordinator(_) => format!("`census submit {again}`"),
            };
            return Err(UsageError(format!(
                "verify compares finished runs of {wanted} (or of anything with the same answer) and found {}; count \
                 a run into the same database first, e.g. {where_to}",
                chosen.len()
            ))
            .into());
        }
        Ok(compare(&chosen, &wanted))
    })
}

/// Every run of a database, read through its store.
async fn lines_of_database(database: &DatabaseLocation) -> anyhow::Result<Vec<RunTotalLine>> {
    let store = super::open_existing_store(database).await?;
    let mut lines = Vec::new();
    for run in store.list_runs().await? {
        let total = store.total(run.run_id).await?;
        let compared = if run.spec.census.is_nine_by_nine() {
            total.weighted_sum.to_string()
        } else {
            total.answer.map(|answer| answer.to_string()).unwrap_or_default()
        };
        lines.push((run.run_id, run.spec.census.to_string(), total.is_final, compared));
    }
    Ok(lines)
}

/// Every run a coordinator lists, with its result.
async fn lines_of_coordinator(coordinator: &str, credentials: &Credentials) -> anyhow::Result<Vec<RunTotalLine>> {
    let mut client = connect(coordinator, credentials).await?;
    let runs = client.list_runs(ListRunsRequest {}).await.map_err(status_error)?.into_inner().runs;
    let mut lines = Vec::new();
    for run in runs {
        let result =
            client.get_result(GetResultRequest { run_id: run.run_id }).await.map_err(status_error)?.into_inner();
        let nine_by_nine = run.census.parse::<Census>().is_ok_and(|census| census.is_nine_by_nine());
        let compared = if nine_by_nine { result.s } else { result.answer };
        lines.push((run.run_id, run.census, result.r#final, compared));
    }
    Ok(lines)
}

/// The runs to compare: those asked for (each finished, and of the same
/// count as `wanted`), or every finished run of the same count.
fn choose<'a>(lines: &'a [RunTotalLine], runs: &[i64], wanted: &Census) -> anyhow::Result<Vec<&'a RunTotalLine>> {
    let same_count = |census: &str| census.parse::<Census>().is_ok_and(|c| c.published() == wanted.published());
    if runs.is_empty() {
        return Ok(lines.iter().filter(|line| line.2 && same_count(&line.1)).collect());
    }
    let mut chosen = Vec::new();
    for id in runs {
        let line =
            lines.iter().find(|line| line.0 == *id).ok_or_else(|| UsageError(format!("there is no run {id}")))?;
        if !line.2 {
            return Err(UsageError(format!("run {id} ({}) is not finished", line.1)).into());
        }
        if !same_count(&line.1) {
            return Err(UsageError(format!("run {id} ({}) is not a run of {wanted}", line.1)).into());
        }
        chosen.push(line);
    }
    Ok(chosen)
}

/// One run's answer against the published one.
fn compare_with_published(line: &RunTotalLine, wanted: &Census, published: num_bigint::BigUint) -> ExitCode {
    let (run, census, _, compared) = line;
    let value: num_bigint::BigUint = compared.parse().unwrap_or_default();
    let answer = if wanted.is_nine_by_nine() { census_math::total::n0_from_s(&value) } else { value };
    println!("run {run} ({census}): the answer = {}", thousands(&answer));
    println!("published: {} (docs/mathematics.md names the source)", thousands(&published));
    if answer == published {
        println!("agree: the run gives the published count");
        return ExitCode::SUCCESS;
    }
    println!("DISAGREE: the run does not give the published count");
    ExitCode::FAILURE
}

/// Two or more runs' totals against each other.
fn compare(chosen: &[&RunTotalLine], wanted: &Census) -> ExitCode {
    let number = |text: &str| thousands(&text.parse::<num_bigint::BigUint>().unwrap_or_default());
    let name = if wanted.is_nine_by_nine() { "S" } else { "the answer" };
    for (run, census, _, compared) in chosen {
        println!("run {run} ({census}): {name} = {}", number(compared));
    }
    if chosen.iter().all(|line| line.3 == chosen[0].3) {
        println!("agree: every run gives {name} = {}", number(&chosen[0].3));
        ExitCode::SUCCESS
    } else {
        println!("DISAGREE: the runs give different totals");
        ExitCode::FAILURE
    }
}
