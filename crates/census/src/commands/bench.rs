//! `census bench`: count a whole stage in-process, with no store, and report
//! the speed. The counting is `census_worker::bench`'s; this file reads the
//! flags and prints.

use std::process::ExitCode;
use std::time::Instant;

use census_math::census::Census;
use census_math::total::{PUBLISHED_S, thousands};
use census_math::{CounterKind, Stage};
use census_worker::bench;
use serde::Serialize;

use super::{UsageError, parse_counter, parse_stage};

#[derive(clap::Args)]
pub struct Args {
    /// Count another kind of census instead, whole, in-process:
    /// "essentially-different", "shape boxes=2x4" (the shapes are 2x2 to
    /// 2x6, their transposes, 3x3, and 4x3 (3x4); whole, 4x3 takes
    /// hundreds of core-hours and 2x6 about a million: docs/twelve.md), or
    /// "sudoku stage=71 counter=banded".
    #[arg(long, conflicts_with_all = ["stage", "counter", "limit"])]
    census: Option<Census>,
    /// The stage to count (e.g. 44, 71, 36288).
    #[arg(long, default_value = "44", value_parser = parse_stage)]
    stage: Stage,
    #[arg(long, default_value = "column-sets", value_parser = parse_counter, help = super::COUNTER_HELP)]
    counter: CounterKind,
    /// Threads to count on, 1 to 1024.
    #[arg(long, default_value_t = 1, value_parser = super::parse_threads)]
    threads: usize,
    /// Count only the first N jobs (for the slow counters); S is then partial.
    #[arg(long)]
    limit: Option<usize>,
    /// With --census: count only N jobs chosen at random (without
    /// repeats), each as a worker counts it: with the run of neighbouring
    /// jobs a worker's thread counts together with it (for 4x3, the 256
    /// jobs of the job list from a multiple of 256: a random sample of the
    /// runs, whole; other kinds count a job alone). One report line per
    /// job as its run finishes, to spot-check classes against published
    /// counts and to time jobs as workers count them.
    #[arg(long, requires = "census", value_name = "N")]
    sample: Option<usize>,
    /// With --sample: the seed of the random choice (the same seed, the
    /// same jobs); without it a random seed is used and reported.
    #[arg(long, requires = "sample")]
    seed: Option<u64>,
    /// With --sample: count each chosen job alone, not with its run (a
    /// quick spot check of one 4x3 class: a minute or two, not half an hour).
    #[arg(long, requires = "sample")]
    alone: bool,
    /// Print JSON: {"stage", "counter", "threads", "seconds", "jobs", "completions", "sum", "exact"};
    /// with --sample one line per job counted: {"census", "seed", "class", "group", "key", "weight",
    /// "count", "seconds", "cpu_seconds", "run", "run_jobs", "sampled"}.
    #[arg(long)]
    json: bool,
}

#[derive(Serialize)]
struct BenchReport {
    stage: String,
    counter: String,
    threads: usize,
    seconds: f64,
    jobs: usize,
    completions: u64,
    sum: String,
    exact: Option<bool>,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if args.threads == 0 {
        return Err(UsageError("--threads must be at least 1".into()).into());
    }
    if let Some(census) = args.census {
        if let Some(n) = args.sample {
            return bench_sample(census, n, args.seed, args.alone, args.threads, args.json);
        }
        return bench_census(census, args.threads, args.json);
    }
    // Timed from the start: the tables are part of the cost.
    let started = Instant::now();
    let counted = bench::count_stage(args.stage, args.counter, args.threads, args.limit);
    let seconds = started.elapsed().as_secs_f64();
    let s = counted.s;
    let report = BenchReport {
        stage: args.stage.to_string(),
        counter: args.counter.to_string(),
        threads: args.threads,
        seconds,
        jobs: counted.jobs,
        completions: counted.completions,
        sum: s.to_string(),
        exact: counted.whole.then(|| s == PUBLISHED_S.into()),
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!(
            "stage {}, counter {}, {} thread(s): {} jobs in {:.3} s ({:.0} jobs/s, {:.3e} completions/s)",
            report.stage,
            report.counter,
            report.threads,
            report.jobs,
            seconds,
            report.jobs as f64 / seconds,
            report.completions as f64 / seconds
        );
        match report.exact {
            Some(true) => println!("S = {} (the published value)", thousands(&s)),
            Some(false) => println!("S = {} (NOT the published 3,546,146,300,288)", thousands(&s)),
            None => println!("partial S over the first {} jobs = {}", report.jobs, thousands(&s)),
        }
    }
    Ok(if report.exact == Some(false) { ExitCode::FAILURE } else { ExitCode::SUCCESS })
}

#[derive(Serialize)]
struct CensusReport {
    census: String,
    threads: usize,
    seconds: f64,
    jobs: usize,
    answer: String,
    terms: Vec<(String, String)>,
    exact: Option<bool>,
}

/// Any kind of census through its common face, every job on `threads`
/// threads, then the checked fold.
fn bench_census(census: Census, threads: usize, json: bool) -> anyhow::Result<ExitCode> {
    let started = Instant::now();
    let (jobs, answer) = bench::count_census(&census, threads)?;
    let seconds = started.elapsed().as_secs_f64();
    let report = CensusReport {
        census: census.to_string(),
        threads,
        seconds,
        jobs: jobs.len(),
        answer: answer.value.to_string(),
        terms: answer.terms,
        exact: census.published().map(|published| published == answer.value),
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!("{}, {} thread(s): {} jobs in {:.3} s", report.census, threads, report.jobs, seconds);
        for (name, value) in &report.terms {
            let value = if value.bytes().all(|b| b.is_ascii_digit()) { thousands(value) } else { value.clone() };
            println!("  {name}: {value}");
        }
        match report.exact {
            Some(true) => println!("answer = {} (the published value)", thousands(&report.answer)),
            Some(false) => println!("answer = {} (NOT the published value)", thousands(&report.answer)),
            None => println!("answer = {}", thousands(&report.answer)),
        }
    }
    Ok(if report.exact == Some(false) { ExitCode::FAILURE } else { ExitCode::SUCCESS })
}

/// One line of `bench --census C --sample N`: a job (a class of the census),
/// counted with its run.
#[derive(Serialize)]
struct SampleReport {
    census: String,
    /// The seed that chose the sample: the same seed, the same jobs.
    seed: u64,
    /// The job's index in the census's job list (for 4x3, the gangster's
    /// index in `three_bands::jobs` order, not Silver's numbering).
    class: usize,
    group: String,
    key: String,
    /// Decimal strings: both can exceed 2^64.
    weight: String,
    count: String,
    /// The run's wall time over its jobs (what a worker reports for each).
    seconds: f64,
    /// The counting thread's CPU time over the run, over its jobs.
    cpu_seconds: f64,
    /// The index of the run's first job, and how many jobs it holds.
    run: usize,
    run_jobs: usize,
    /// Whether the sample chose this job (the others came with its run).
    sampled: bool,
}

/// Counts `n` jobs of the census chosen at random, each in its run (or
/// alone), the runs spread over `threads` threads that share the census's
/// counter, and prints a line per job as its run finishes (so a long
/// sample reports as it goes).
fn bench_sample(
    census: Census,
    n: usize,
    seed: Option<u64>,
    alone: bool,
    threads: usize,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let jobs = census.jobs()?;
    if n == 0 || n > jobs.len() {
        return Err(UsageError(format!("--sample must be 1 to {} for {census} (its jobs)", jobs.len())).into());
    }
    let together = if alone { 1 } else { census.jobs_counted_together() as usize };
    let sample = bench::Sample::choose(jobs.len(), n, seed.unwrap_or_else(bench::random_seed), together);
    let sampled: std::collections::HashSet<usize> = sample.chosen.iter().copied().collect();
    bench::count_runs(&census, &jobs, &sample.runs, threads, |run| -> anyhow::Result<()> {
        let len = run.jobs.len();
        for (offset, (job, count)) in run.jobs.iter().zip(run.counts).enumerate() {
            let report = SampleReport {
                census: census.to_string(),
                seed: sample.seed,
                class: run.first + offset,
                group: job.group.clone(),
                key: job.key.clone(),
                weight: job.weight.to_string(),
                count: count?.to_string(),
                seconds: run.seconds,
                cpu_seconds: run.cpu_seconds,
                run: run.first,
                run_jobs: len,
                sampled: sampled.contains(&(run.first + offset)),
            };
            if json {
                println!("{}", serde_json::to_string(&report)?);
            } else {
                println!(
                    "{} (class {}, weight {}): {} in {:.3} s ({:.3} CPU-s){}",
                    report.group,
                    report.class,
                    thousands(&report.weight),
                    thousands(&report.count),
                    report.seconds,
                    report.cpu_seconds,
                    if len > 1 { format!(", run of {len} from {}", run.first) } else { String::new() }
                );
            }
        }
        Ok(())
    })?;
    Ok(ExitCode::SUCCESS)
}
