//! `census bench`: count a whole stage in-process, with no store, and report the speed.

use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use census_math::census::Census;
use census_math::total::{PUBLISHED_S, s_from_classes, thousands};
use census_math::{ClassTable, CounterKind, SEEDS, Stage};
use serde::Serialize;

use super::{UsageError, parse_counter, parse_stage};

#[derive(clap::Args)]
pub struct Args {
    /// Count another kind of census instead, whole, in-process:
    /// "essentially-different", "shape boxes=2x4" (the shapes are 2x2 to
    /// 2x6, their transposes, 3x3, and 4x3 (3x4); 2x6 and 4x3 take
    /// core-years whole), or "sudoku stage=71 counter=banded".
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
    /// Print JSON: {"stage", "counter", "threads", "seconds", "jobs", "completions", "sum", "exact"}.
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
        return bench_census(census, args.threads, args.json);
    }
    // Timed from the start: the tables are part of the cost.
    let started = Instant::now();
    let table = ClassTable::build(args.stage);
    let counter = args.counter.build();
    let job_count = (table.classes().len() * SEEDS.len()).min(args.limit.unwrap_or(usize::MAX));
    // Jobs are (class, seed) in order, so a limit keeps whole classes and a
    // prefix of the seeds of one more.
    let seeds_of = |class: usize| job_count.saturating_sub(class * SEEDS.len()).min(SEEDS.len());

    // Whole classes go to one thread at a time so the fast counter can share
    // work between a band's seeds; classes are handed out from a shared cursor.
    let classes = table.classes();
    let mut counts = vec![[None::<u64>; 10]; classes.len()];
    let next = AtomicUsize::new(0);
    let per_thread: Vec<Vec<(usize, [Option<u64>; 10])>> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..args.threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut done = Vec::new();
                    loop {
                        let class = next.fetch_add(1, Ordering::Relaxed);
                        if class >= classes.len() || seeds_of(class) == 0 {
                            break done;
                        }
                        let band = &classes[class].representative;
                        let mut seeds = [None; 10];
                        if seeds_of(class) == SEEDS.len() {
                            for (slot, count) in seeds.iter_mut().zip(counter.count_seeds(band)) {
                                *slot = Some(count);
                            }
                        } else {
                            for (seed, slot) in SEEDS.iter().zip(seeds.iter_mut()).take(seeds_of(class)) {
                                *slot = Some(counter.count(band, seed));
                            }
                        }
                        done.push((class, seeds));
                    }
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().expect("a counting thread panicked")).collect()
    });
    for (class, seeds) in per_thread.into_iter().flatten() {
        counts[class] = seeds;
    }
    let seconds = started.elapsed().as_secs_f64();

    let s = s_from_classes(
        classes.iter().zip(&counts).map(|(class, seeds)| (class.size, seeds.iter().flatten().sum::<u64>())),
    );
    let completions: u64 = counts.iter().flatten().flatten().sum();
    let whole = job_count == classes.len() * SEEDS.len();
    let report = BenchReport {
        stage: args.stage.to_string(),
        counter: args.counter.to_string(),
        threads: args.threads,
        seconds,
        jobs: job_count,
        completions,
        sum: s.to_string(),
        exact: whole.then(|| s == PUBLISHED_S.into()),
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
            completions as f64 / seconds
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
    let jobs = census.jobs()?;
    let counter = census.job_counter();
    let next = AtomicUsize::new(0);
    let mut counts = vec![0u128; jobs.len()];
    let per_thread: Vec<anyhow::Result<Vec<(usize, u128)>>> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut done = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(job) = jobs.get(i) else { break Ok(done) };
                        done.push((i, counter.count(&job.key)?));
                    }
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().expect("a counting thread panicked")).collect()
    });
    for result in per_thread {
        for (i, count) in result? {
            counts[i] = count;
        }
    }
    let answer = census.fold(&jobs, &counts)?;
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
