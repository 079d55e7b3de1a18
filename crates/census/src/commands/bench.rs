//! `census bench`: count a whole stage in-process, with no store, and report
//! the speed. The counting is `census_worker::bench`'s; this file reads the
//! flags and prints.

use std::collections::HashSet;
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::RecvTimeoutError;
use std::time::{Duration, Instant};

use census_math::census::{Census, CensusError, Shape};
use census_math::three_bands::GANGSTERS_4X3;
use census_math::total::{PUBLISHED_S, thousands};
use census_math::{CounterKind, Stage};
use census_worker::bench;
use serde::Serialize;

use super::{UsageError, parse_counter, parse_stage};

#[derive(clap::Args)]
pub struct Args {
    #[arg(
        long,
        value_parser = super::CensusParser,
        conflicts_with_all = ["stage", "counter", "limit"],
        help = super::kinds_help(
            "Count another kind of census instead, whole, in-process (whole, 4x3 takes about 50 core-hours and 2x6 about a million: docs/twelve.md)"
        )
    )]
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
    /// jobs of the job list from a multiple of 256, about 1.3 CPU-s a
    /// gangster, more when the run crosses groups: 5-7 CPU-minutes a run
    /// of one or two groups, after about 25 CPU-s to fill the
    /// process's table; other kinds count a job alone). Prints the N jobs'
    /// results, each as its run finishes (--neighbours: the runs' other
    /// jobs too), and on stderr what the count will take before it starts
    /// and a progress line every 5 s while it counts.
    #[arg(long, requires = "census", value_name = "N", value_parser = parse_sample)]
    sample: Option<usize>,
    /// With --sample: the seed of the random choice (the same seed, the
    /// same jobs); without it a random seed is used and reported.
    #[arg(long, requires = "sample")]
    seed: Option<u64>,
    /// With --sample: count each chosen job alone, not with its run (a
    /// quick spot check of one 4x3 class: about 100 CPU-s after the table,
    /// not half an hour).
    #[arg(long, requires = "sample")]
    alone: bool,
    /// With --sample: also print the results of the jobs counted with the
    /// sampled ones (their runs' neighbours; "sampled": false in JSON).
    #[arg(long, requires = "sample", conflicts_with = "alone")]
    neighbours: bool,
    /// Print JSON: {"stage", "counter", "threads", "seconds", "jobs", "completions", "sum", "exact"};
    /// with --sample one line per sampled job: {"census", "seed", "class", "group", "key", "weight",
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
            let how = SampleArgs { n, seed: args.seed, alone: args.alone, neighbours: args.neighbours };
            return bench_sample(census, &how, args.threads, args.json);
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

/// What `--sample` asks for.
struct SampleArgs {
    n: usize,
    seed: Option<u64>,
    alone: bool,
    neighbours: bool,
}

/// `--sample N`: 1 or more (the census's job count is checked once its
/// jobs are listed).
fn parse_sample(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!("{text:?} is not a number of jobs, 1 or more")),
    }
}

/// How often a sample that is still counting says so on stderr.
const PROGRESS_EVERY: Duration = Duration::from_secs(5);

/// Counts `how.n` jobs of the census chosen at random, each in its run (or
/// alone), the runs spread over `threads` threads that share the census's
/// counter. Says on stderr what the count will take before it starts and
/// how far it is every 5 s, and prints the sampled jobs' results (with
/// `neighbours`, every job counted) as each run finishes.
fn bench_sample(census: Census, how: &SampleArgs, threads: usize, json: bool) -> anyhow::Result<ExitCode> {
    let too_many = |jobs: usize| UsageError(format!("--sample must be 1 to {jobs} for {census} (its jobs)"));
    if let Some(jobs) = jobs_known_unlisted(&census)
        && how.n > jobs
    {
        return Err(too_many(jobs).into());
    }
    eprintln!("bench: listing the jobs of {census}");
    let jobs = census.jobs()?;
    if how.n > jobs.len() {
        return Err(too_many(jobs.len()).into());
    }
    let together = if how.alone { 1 } else { census.jobs_counted_together() as usize };
    let sample = bench::Sample::choose(jobs.len(), how.n, how.seed.unwrap_or_else(bench::random_seed), together);
    let sampled: HashSet<usize> = sample.chosen.iter().copied().collect();
    eprintln!("bench: {}", plan_text(&census, &sample, threads));
    let started = Instant::now();
    let runs_done = AtomicUsize::new(0);
    let progress = || {
        let done = runs_done.load(Ordering::Relaxed);
        eprintln!(
            "bench: counting, {done}/{} runs done, {:.0} s elapsed",
            sample.runs.len(),
            started.elapsed().as_secs_f64()
        );
    };
    with_ticks(PROGRESS_EVERY, progress, || {
        bench::count_runs(&census, &jobs, &sample.runs, threads, |run| -> anyhow::Result<()> {
            let (first, len, cpu_seconds) = (run.first, run.jobs.len(), run.cpu_seconds);
            for report in run_reports(&census, sample.seed, run, &sampled, how.neighbours)? {
                print_sample_line(&report, json)?;
            }
            let done = runs_done.fetch_add(1, Ordering::Relaxed) + 1;
            if len > 1 {
                eprintln!(
                    "bench: run {done}/{} ({len} jobs from {first}) counted: {cpu_seconds:.3} CPU-s a job",
                    sample.runs.len()
                );
            }
            Ok(())
        })
    })?;
    Ok(ExitCode::SUCCESS)
}

/// How many jobs a census has, where that is known before they are listed
/// (4 x 3: the gangsters, or a slice of them; listing them takes seconds).
fn jobs_known_unlisted(census: &Census) -> Option<usize> {
    match census.as_kind::<Shape>() {
        Some(Shape { rows: 4, gangsters, .. }) => {
            Some(gangsters.map_or(GANGSTERS_4X3, |slice| (slice.end - slice.start) as usize))
        }
        _ => None,
    }
}

/// What a sample will count, said before it starts: the jobs, their runs,
/// and what a run costs where that is long (4 x 3).
fn plan_text(census: &Census, sample: &bench::Sample, threads: usize) -> String {
    let counted: usize = sample.runs.iter().map(|&(_, len)| len).sum();
    let chosen = sample.chosen.len();
    let mut text = format!("{chosen} job(s) chosen by --seed {}", sample.seed);
    if counted > chosen {
        text += &format!(
            ", each counted in its run of neighbours as a worker counts it: {} run(s), {counted} jobs",
            sample.runs.len()
        );
    }
    text += &format!(", on {threads} thread(s)");
    if let Some(Shape { rows: 4, .. }) = census.as_kind::<Shape>() {
        // BENCHMARKS.md, "The 4x3 count": random runs, and the table fill.
        text += if counted > chosen {
            "; a run of 256 takes about 5-7 CPU-minutes (about 1.3 CPU-s a gangster, more when it crosses groups), after about 25 CPU-s \
             to fill the process's table (--alone: many times that a gangster, each paying its group's row moves)"
        } else {
            "; a gangster alone takes many times what it takes in its run (it pays its group's row moves alone), \
             after about 25 CPU-s to fill the process's table"
        };
    }
    text
}

/// Calls `tick` every `every` from a thread of its own while `work` runs
/// on this one; what `work` returned.
fn with_ticks<T>(every: Duration, tick: impl Fn() + Send, work: impl FnOnce() -> T) -> T {
    let (finished, wait) = std::sync::mpsc::channel::<()>();
    std::thread::scope(|scope| {
        scope.spawn(move || {
            while let Err(RecvTimeoutError::Timeout) = wait.recv_timeout(every) {
                tick();
            }
        });
        let result = work();
        drop(finished);
        result
    })
}

/// The lines of a counted run: its sampled jobs', or with `neighbours`
/// every job's.
fn run_reports(
    census: &Census,
    seed: u64,
    run: bench::CountedRun<'_>,
    sampled: &HashSet<usize>,
    neighbours: bool,
) -> Result<Vec<SampleReport>, CensusError> {
    let len = run.jobs.len();
    let mut reports = Vec::new();
    for (offset, (job, count)) in run.jobs.iter().zip(run.counts).enumerate() {
        let class = run.first + offset;
        let chosen = sampled.contains(&class);
        let count = count?;
        if !(chosen || neighbours) {
            continue;
        }
        reports.push(SampleReport {
            census: census.to_string(),
            seed,
            class,
            group: job.group.clone(),
            key: job.key.clone(),
            weight: job.weight.to_string(),
            count: count.to_string(),
            seconds: run.seconds,
            cpu_seconds: run.cpu_seconds,
            run: run.first,
            run_jobs: len,
            sampled: chosen,
        });
    }
    Ok(reports)
}

fn print_sample_line(report: &SampleReport, json: bool) -> anyhow::Result<()> {
    if json {
        println!("{}", serde_json::to_string(report)?);
    } else {
        let len = report.run_jobs;
        println!(
            "{} (class {}, weight {}): {} in {:.3} s ({:.3} CPU-s){}{}",
            report.group,
            report.class,
            thousands(&report.weight),
            thousands(&report.count),
            report.seconds,
            report.cpu_seconds,
            if len > 1 { format!(", run of {len} from {}", report.run) } else { String::new() },
            if report.sampled { "" } else { ", a neighbour" }
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use census_math::census::Census;
    use census_worker::bench::{CountedRun, Sample};

    use super::{jobs_known_unlisted, plan_text, run_reports, with_ticks};

    /// A sample of N prints N results: the neighbours counted with them
    /// only when asked (issue 46: 2 asked, 512 printed).
    #[test]
    fn a_sample_prints_its_jobs_and_their_neighbours_only_when_asked() {
        let census: Census = "shape boxes=2x4".parse().unwrap();
        let jobs = census.jobs().unwrap();
        let sample = Sample::choose(jobs.len(), 2, 7, 4);
        let sampled: HashSet<usize> = sample.chosen.iter().copied().collect();
        let lines = |neighbours: bool| -> Vec<(usize, bool)> {
            let mut lines = Vec::new();
            for &(first, len) in &sample.runs {
                let counts = (0..len).map(|i| Ok(i as u128)).collect();
                let run = CountedRun { first, jobs: &jobs[first..first + len], counts, seconds: 1.0, cpu_seconds: 1.0 };
                let reports = run_reports(&census, 7, run, &sampled, neighbours).unwrap();
                lines.extend(reports.iter().map(|report| (report.class, report.sampled)));
            }
            lines
        };
        let mut only = lines(false);
        only.sort_unstable();
        let mut chosen: Vec<(usize, bool)> = sample.chosen.iter().map(|&class| (class, true)).collect();
        chosen.sort_unstable();
        assert_eq!(only, chosen);
        let all = lines(true);
        assert_eq!(all.len(), sample.runs.iter().map(|run| run.1).sum::<usize>());
        assert!(all.len() > 2 && all.iter().filter(|line| line.1).count() == 2);
    }

    /// A 4 x 3 sample too big is refused before the job list is made.
    #[test]
    fn the_4x3_jobs_are_counted_before_they_are_listed() {
        let count = |text: &str| jobs_known_unlisted(&text.parse().unwrap());
        assert_eq!(count("shape boxes=4x3"), Some(144_578));
        assert_eq!(count("shape boxes=3x4 gangsters=10..25"), Some(15));
        assert_eq!(count("shape boxes=2x4"), None);
    }

    /// Before a long count starts, the user is told what a run costs.
    #[test]
    fn the_plan_says_what_a_4x3_run_takes() {
        let census: Census = "shape boxes=4x3".parse().unwrap();
        let together = Sample::choose(144_578, 2, 7, 256);
        let text = plan_text(&census, &together, 2);
        assert!(text.starts_with("2 job(s) chosen by --seed 7, each counted in its run of neighbours"), "{text}");
        assert!(text.contains("512 jobs") && text.contains("a run of 256 takes about 5-7 CPU-minutes"), "{text}");
        let alone = plan_text(&census, &Sample::choose(144_578, 1, 7, 1), 1);
        assert!(alone.contains("a gangster alone takes many times what it takes in its run"), "{alone}");
        let shape: Census = "shape boxes=2x3".parse().unwrap();
        assert_eq!(plan_text(&shape, &Sample::choose(4, 2, 7, 1), 1), "2 job(s) chosen by --seed 7, on 1 thread(s)");
    }

    /// Ticks come while the work runs (it waits for three), and stop with it.
    #[test]
    fn ticks_come_while_the_work_runs_and_stop_with_it() {
        let (tick, ticked) = std::sync::mpsc::channel();
        let tick = Mutex::new(tick);
        let ticks = AtomicUsize::new(0);
        let result = with_ticks(
            Duration::from_millis(1),
            || {
                ticks.fetch_add(1, Ordering::SeqCst);
                let _ = tick.lock().unwrap().send(());
            },
            || {
                for _ in 0..3 {
                    ticked.recv().unwrap();
                }
                42
            },
        );
        assert_eq!(result, 42);
        // The ticking thread has ended (it is joined before the result is
        // returned): no tick can follow.
        assert!(ticks.load(Ordering::SeqCst) >= 3);
    }
}
