//! `census classes`: the class table of a stage.

use std::process::ExitCode;
use std::time::Instant;

use census_math::{ClassTable, Stage};
use serde::Serialize;

use super::parse_stage;

#[derive(clap::Args)]
pub struct Args {
    /// The stage: a class count or a name (44|russell, 71|felgenhauer-jarvis,
    /// 174|rectangles, 416|rows, 2051|stacks-columns, 36288|catalogue).
    #[arg(long, value_parser = parse_stage)]
    stage: Stage,
    /// Print a JSON array of {"id", "representative", "size"} instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Serialize)]
struct ClassRow {
    id: u32,
    representative: String,
    size: u64,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let started = Instant::now();
    let table = ClassTable::build(args.stage);
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
        args.stage,
        rows.len(),
        total,
        elapsed.as_secs_f64() * 1e3
    );
    Ok(ExitCode::SUCCESS)
}
