//! `census classes`: the class table of a stage, the jobs of any census
//! (their keys, groups and weights: where to find a class to slice, audit
//! or spot-check), or the kinds of census there are.

use std::process::ExitCode;
use std::time::Instant;

use census_math::census::Census;
use census_math::{ClassTable, Stage};
use serde::Serialize;

use super::parse_stage;

#[derive(clap::Args)]
pub struct Args {
    /// The stage: a class count or a name (44|russell, 71|felgenhauer-jarvis,
    /// 174|rectangles, 416|rows, 2051|stacks-columns, 36288|catalogue).
    #[arg(long, value_parser = parse_stage, required_unless_present_any = ["census", "kinds"])]
    stage: Option<Stage>,
    /// List the jobs of a census instead, one line each: its number, group
    /// (class), weight and key, e.g. "shape boxes=4x3" (the gangster numbers
    /// that `gangsters=START..END` slices).
    #[arg(long, value_parser = super::CensusParser, conflicts_with = "stage")]
    census: Option<Census>,
    /// List the kinds of census instead (a Markdown table: each kind's
    /// text, what it counts and its published answer).
    #[arg(long, conflicts_with_all = ["stage", "census", "json"])]
    kinds: bool,
    /// Print a JSON array of {"id", "representative", "size"} (with --census:
    /// {"job", "group", "weight", "key"}) instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Serialize)]
struct JobRow {
    job: usize,
    group: String,
    /// Decimal: weights pass 2^64.
    weight: String,
    key: String,
}

/// The jobs of `census`, as `census classes --census` prints them.
fn print_jobs(census: Census, json: bool) -> anyhow::Result<ExitCode> {
    let jobs = census.jobs()?;
    let rows = jobs.into_iter().enumerate().map(|(job, spec)| JobRow {
        job,
        group: spec.group,
        weight: spec.weight.to_string(),
        key: spec.key,
    });
    if json {
        println!("{}", serde_json::to_string_pretty(&rows.collect::<Vec<_>>())?);
        return Ok(ExitCode::SUCCESS);
    }
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    use std::io::Write;
    writeln!(out, "job\tgroup\tweight\tkey")?;
    for row in rows {
        writeln!(out, "{}\t{}\t{}\t{}", row.job, row.group, row.weight, row.key)?;
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

#[derive(Serialize)]
struct ClassRow {
    id: u32,
    representative: String,
    size: u64,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if args.kinds {
        print!("{}", census_math::census::kinds_table());
        return Ok(ExitCode::SUCCESS);
    }
    let stage = match (args.census, args.stage) {
        (Some(census), _) => return print_jobs(census, args.json),
        (None, Some(stage)) => stage,
        (None, None) => unreachable!("clap requires --stage unless --census or --kinds is given"),
    };
    let started = Instant::now();
    let table = ClassTable::build(stage);
    let elapsed = started.elapsed();
    let rows: Vec<ClassRow> = table
        .classes()
        .iter()
        .map(|class| ClassRow { id: class.id, representative: class.representative.to_string(), size: class.size })
        .collect();
    if args.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!("{:>5}  {:<27}  {:>5}", "id", "representative", "size");
    for row in &rows {
        println!("{:>5}  {}  {:>5}", row.id, row.representative, row.size);
    }
    let total: u64 = rows.iter().map(|row| row.size).sum();
    println!(
        "stage {}: {} classes, sizes summing to {} catalogue bands, built in {:.1} ms",
        stage,
        rows.len(),
        total,
        elapsed.as_secs_f64() * 1e3
    );
    Ok(ExitCode::SUCCESS)
}
