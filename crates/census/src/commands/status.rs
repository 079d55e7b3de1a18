//! `census status`: a run's progress, or its result when it is done.

use std::fmt::Write as _;
use std::process::ExitCode;

use census_local::{Identities, LocalCluster};
use census_math::total::thousands;
use census_proto::v1::{
    GetProgressRequest, GetResultRequest, ListClassesRequest, ListRunsRequest, Progress, RunResult,
    WatchProgressRequest,
};
use serde::Serialize;

use super::client::{Client, Credentials, connect, progress_line, result_lines, status_error};
use super::roles::runtime;

#[derive(clap::Args)]
pub struct Args {
    /// The coordinator's gRPC address.
    #[arg(long, env = "CENSUS_COORDINATOR", default_value = "http://127.0.0.1:50051")]
    coordinator: String,
    /// Read an embedded census directly (the SQLite file or postgres:// URL
    /// of `census run --database`), instead of asking a coordinator.
    #[arg(long, env = "CENSUS_DATABASE_URL", conflicts_with = "coordinator", value_parser = super::DatabaseParser)]
    database: Option<census_store::DatabaseLocation>,
    /// The run (default: the latest).
    #[arg(long, conflicts_with = "census")]
    run: Option<i64>,
    /// The latest run of this census, e.g. "essentially-different".
    #[arg(long, value_parser = super::CensusParser, env = "CENSUS_CENSUS")]
    census: Option<census_math::census::Census>,
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
    /// The expected cost of all the jobs and of the done ones
    /// (`Census::job_cost`; the jobs' numbers where every job costs 1),
    /// and the share of it done.
    cost_total: u64,
    cost_done: u64,
    fraction_done: f64,
    r#final: bool,
    census: String,
    /// The exact answer once final.
    answer: String,
    /// For 9x9 runs: S and N0 (provisional until final).
    s: String,
    n0: String,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    runtime()?.block_on(async move {
        // A database is read through the same coordinator code, in this
        // process, on a loopback port that serves reads only.
        let (address, _cluster) = match &args.database {
            Some(database) => {
                // Reading never creates: a missing file is a wrong name, not an empty census.
                let store = super::open_existing_store(database).await?;
                let auth = census_coordinator::AuthConfig { public_read: true, ..Default::default() };
                let config = census_coordinator::CoordinatorConfig { auth, ..Default::default() };
                let cluster = LocalCluster::start(store, config, Identities::none()).await?;
                (cluster.address().to_string(), Some(cluster))
            }
            None => (args.coordinator.clone(), None),
        };
        let mut client = connect(&address, &args.credentials).await?;
        let run_id = run_of(&mut client, &args).await?;
        let mut progress = client.get_progress(GetProgressRequest { run_id }).await.map_err(status_error)?.into_inner();
        if args.watch && !progress.r#final {
            progress = watch(&mut client, progress, args.json).await?;
        }
        let result =
            client.get_result(GetResultRequest { run_id: progress.run_id }).await.map_err(status_error)?.into_inner();
        // Printed with `super::print`: `census status | head` ends quietly.
        if args.json {
            super::print(&format!("{}\n", serde_json::to_string_pretty(&StatusJson::new(&progress, result))?))?;
            return Ok(ExitCode::SUCCESS);
        }
        let status = status_lines(&mut client, &progress).await?;
        super::print(&(status + &result_lines(&result)))?;
        Ok(ExitCode::SUCCESS)
    })
}

/// The run asked for: `--run`, the latest of `--census`, or 0 (the latest).
async fn run_of(client: &mut Client, args: &Args) -> anyhow::Result<i64> {
    Ok(match (&args.run, &args.census) {
        (Some(run), _) => *run,
        (None, Some(census)) => {
            let runs = client.list_runs(ListRunsRequest {}).await.map_err(status_error)?.into_inner().runs;
            let text = census.to_string();
            runs.iter().rev().find(|run| run.census == text).map(|run| run.run_id).ok_or_else(|| {
                super::UsageError(format!("there is no run of {text}; `census submit --census {text:?}` makes one"))
            })?
        }
        (None, None) => 0,
    })
}

/// Prints the run's progress as it comes (but with --json) until it is
/// final; the last progress.
async fn watch(client: &mut Client, mut progress: Progress, json: bool) -> anyhow::Result<Progress> {
    let mut stream = client
        .watch_progress(WatchProgressRequest { run_id: progress.run_id, interval_ms: 1000 })
        .await
        .map_err(status_error)?
        .into_inner();
    while let Some(next) = stream.message().await.map_err(status_error)? {
        if !json {
            super::print(&format!("{}\n", progress_line(&next)))?;
        }
        progress = next;
    }
    Ok(progress)
}

impl StatusJson {
    fn new(progress: &Progress, result: RunResult) -> StatusJson {
        StatusJson {
            run_id: progress.run_id,
            jobs_total: progress.jobs_total,
            done: progress.done,
            leased: progress.leased,
            pending: progress.pending,
            failed: progress.failed,
            conflicts: progress.conflicts,
            cost_total: progress.cost_total,
            cost_done: progress.cost_done,
            fraction_done: progress.fraction_done(),
            // A partial sum is no answer: S, N0 and the answer only once final.
            answer: if result.r#final { result.answer } else { String::new() },
            s: if result.r#final { result.s } else { String::new() },
            n0: if result.r#final { result.n0 } else { String::new() },
            r#final: result.r#final,
            census: result.census,
        }
    }
}

/// An identity's quarantine, with its reason (rejected results or
/// reported failures; none from an older coordinator) and its remedy.
fn quarantine_line(name: &str, reason: &str) -> String {
    let reason = if reason.is_empty() { String::new() } else { format!("{reason}; ") };
    format!("QUARANTINED: {name} ({reason}`census token release {name}` lifts it)")
}

/// The run, its progress, quarantines, workers and classes, as lines.
async fn status_lines(client: &mut Client, progress: &Progress) -> anyhow::Result<String> {
    let mut out = String::new();
    let runs = client.list_runs(ListRunsRequest {}).await.map_err(status_error)?.into_inner().runs;
    if let Some(run) = runs.iter().find(|r| r.run_id == progress.run_id) {
        writeln!(
            out,
            "run {}: {}, redundancy {}{}",
            run.run_id,
            run.census,
            run.redundancy,
            if run.cancelled { ", CANCELLED" } else { "" }
        )?;
    }
    writeln!(out, "{}", progress_line(progress))?;
    for warning in &progress.warnings {
        writeln!(out, "  WARNING: {warning}")?;
    }
    for (i, name) in progress.quarantined.iter().enumerate() {
        let reason = progress.quarantine_reasons.get(i).map_or("", String::as_str);
        writeln!(out, "  {}", quarantine_line(name, reason))?;
    }
    for worker in &progress.workers {
        // Jobs only: the sum of a worker's counts is no number of any
        // census (for the 9x9 count, not even completions: those are
        // 72 x a class's seed sum).
        writeln!(out, "  worker {}: {} jobs", worker.worker_id, thousands(&worker.jobs))?;
    }
    // A coordinator lists the workers with the most jobs, not all.
    if progress.workers_total > progress.workers.len() as u64 {
        writeln!(
            out,
            "  ... {} workers in all (the {} with the most jobs above; SQL's worker_stats has all)",
            thousands(&progress.workers_total),
            progress.workers.len()
        )?;
    }
    let class_count = runs.iter().find(|r| r.run_id == progress.run_id).map(|r| r.classes);
    class_lines(&mut out, client, progress.run_id, class_count).await?;
    Ok(out)
}

/// The run's classes, a line each, unless there are too many to list.
async fn class_lines(
    out: &mut String,
    client: &mut Client,
    run_id: i64,
    class_count: Option<u64>,
) -> anyhow::Result<()> {
    // One more than are listed, to know whether there are more: a run
    // may have 10^6 classes.
    const LISTED: u32 = 100;
    let classes = client
        .list_classes(ListClassesRequest { run_id, first_class_id: 0, limit: LISTED + 1 })
        .await
        .map_err(status_error)?
        .into_inner()
        .classes;
    let class_count = class_count.unwrap_or(classes.len() as u64);
    if classes.len() > LISTED as usize {
        writeln!(out, "  ({class_count} classes: too many to list here; SQL's group_totals view has every one)")?;
        return Ok(());
    }
    for class in &classes {
        let number = |text: &str| thousands(&text.parse::<num_bigint::BigUint>().unwrap_or_default());
        if class.completions.is_empty() {
            writeln!(
                out,
                "  {} (weight {}): {}/{} jobs, count = {}",
                class.representative,
                number(&class.weight),
                class.seeds_done,
                class.jobs_total,
                number(&class.seed_sum)
            )?;
        } else {
            writeln!(
                out,
                "  class {:>3} {} size {:>5}: {}/{} seeds, n = {}",
                class.class_id,
                class.representative,
                class.size,
                class.seeds_done,
                class.jobs_total,
                number(&class.completions)
            )?;
        }
    }
    Ok(())
}
