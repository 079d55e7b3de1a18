//! `census count-band`: the completions of one band, seed by seed.

use std::process::ExitCode;
use std::time::Instant;

use census_math::catalogue::normalize;
use census_math::total::thousands;
use census_math::{Band, CounterKind, SEEDS};
use serde::Serialize;

use super::parse_counter;

#[derive(clap::Args)]
pub struct Args {
    /// The band: 27 digits, rows 1-3 left to right (any valid band; it is normalized first).
    band: String,
    /// The counter: column-sets (fast), banded, or enumerate (slow: seconds a seed).
    #[arg(long, default_value = "column-sets", value_parser = parse_counter)]
    counter: CounterKind,
    /// Print JSON: {"band", "seeds": [{"seed", "count"}], "sum", "completions"}.
    #[arg(long)]
    json: bool,
}

#[derive(Serialize)]
struct SeedCount {
    seed: String,
    count: u64,
}

#[derive(Serialize)]
struct BandCount {
    band: String,
    seeds: Vec<SeedCount>,
    sum: u64,
    completions: u64,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let given = Band::parse(args.band.trim())?;
    let band = normalize(&given);
    let counter = args.counter.build();
    let started = Instant::now();
    let counts = counter.count_seeds(&band);
    let elapsed = started.elapsed();
    let sum: u64 = counts.iter().sum();
    let report = BandCount {
        band: band.to_string(),
        seeds: SEEDS.iter().zip(counts).map(|(seed, count)| SeedCount { seed: seed.to_string(), count }).collect(),
        sum,
        completions: 72 * sum,
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(ExitCode::SUCCESS);
    }
    if band != given {
        println!("normalized {given} to {band}");
    }
    println!("band {band}, counter {}", args.counter);
    for seed in &report.seeds {
        println!("  seed {}  {:>12}", seed.seed, thousands(&seed.count));
    }
    println!("sum of the 10 seeds: {}", thousands(&sum));
    println!("completions n = 72 x sum = {}", thousands(&report.completions));
    println!("counted in {:.3} s", elapsed.as_secs_f64());
    Ok(ExitCode::SUCCESS)
}
