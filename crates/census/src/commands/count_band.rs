//! `census count-band`: the completions of one band, seed by seed.

use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::Instant;

use census_math::catalogue::normalize;
use census_math::total::thousands;
use census_math::{Band, CounterKind, SEEDS};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

use super::parse_counter;

#[derive(clap::Args)]
pub struct Args {
    /// The band: 27 digits, rows 1-3 left to right (any valid band; it is
    /// normalized first). Spaces, '/' and '|' between digits are ignored.
    band: String,
    #[arg(long, default_value = "column-sets", value_parser = parse_counter, help = super::COUNTER_HELP)]
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
    let given = Band::parse(&super::strip_separators(&args.band))?;
    let band = normalize(&given);
    let counter = args.counter.build();
    if !args.json {
        if band != given {
            println!("normalized {given} to {band}");
        }
        println!("band {band}, counter {}", args.counter);
        println!(
            "seed = the first column of B4 and of B7 (rows 4-6 / rows 7-9), e.g. 235/689; SQL numbers them 0-9 in this order"
        );
    }
    // Seed by seed, each line as soon as it is counted (the enumerate
    // counter takes seconds a seed), under a bar on a terminal.
    let bar = (!args.json && std::io::stderr().is_terminal()).then(|| {
        let bar = ProgressBar::new(SEEDS.len() as u64);
        bar.set_style(
            ProgressStyle::with_template("{bar:30} {pos}/{len} seeds  {elapsed} elapsed, ETA {eta}")
                .expect("a valid template")
                .progress_chars("=> "),
        );
        bar
    });
    let started = Instant::now();
    let mut seeds = Vec::with_capacity(SEEDS.len());
    for seed in &SEEDS {
        let count = counter.count(&band, seed);
        if !args.json {
            let line = format!("  seed {seed}  {:>12}", thousands(&count));
            match &bar {
                Some(bar) => {
                    bar.suspend(|| println!("{line}"));
                    bar.inc(1);
                }
                None => println!("{line}"),
            }
        }
        seeds.push(SeedCount { seed: seed.to_string(), count });
    }
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    let elapsed = started.elapsed();
    let sum: u64 = seeds.iter().map(|s| s.count).sum();
    let report = BandCount { band: band.to_string(), seeds, sum, completions: 72 * sum };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!("sum of the 10 seeds: {}", thousands(&sum));
    println!("completions n = 72 x sum = {}", thousands(&report.completions));
    println!("counted in {:.3} s", elapsed.as_secs_f64());
    Ok(ExitCode::SUCCESS)
}
