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
    #[arg(
        long,
        conflicts_with_all = ["stage", "counter", "limit"],
        help = super::kinds_help(
            "Count another kind of census instead, whole, in-process (2x6 and 4x3 take core-years whole)"
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

/// The runs that count the chosen jobs, as first indexes and lengths in
/// the job list: the `together` jobs from each multiple of `together` (a
/// worker leases that many a thread, in job order), each run once, in the
/// order their first chosen job was drawn.
fn runs_of(chosen: &[usize], together: usize, jobs: usize) -> Vec<(usize, usize)> {
    let together = together.max(1);
    let mut runs: Vec<(usize, usize)> = Vec::new();
    for &job in chosen {
        let start = job / together * together;
        if !runs.iter().any(|&(first, _)| first == start) {
            runs.push((start, together.min(jobs - start)));
        }
    }
    runs
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
    let seed = seed.unwrap_or_else(random_seed);
    let chosen = choose(jobs.len(), n, seed);
    let together = if alone { 1 } else { census.jobs_counted_together() as usize };
    let runs = runs_of(&chosen, together, jobs.len());
    let sampled: std::collections::HashSet<usize> = chosen.iter().copied().collect();
    let counter = census.job_counter();
    let next = AtomicUsize::new(0);
    let printed = std::sync::Mutex::new(());
    let never = std::sync::atomic::AtomicBool::new(false);
    let results: Vec<anyhow::Result<()>> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads.min(runs.len()))
            .map(|_| {
                scope.spawn(|| -> anyhow::Result<()> {
                    loop {
                        let Some(&(first, len)) = runs.get(next.fetch_add(1, Ordering::Relaxed)) else {
                            return Ok(());
                        };
                        let run = &jobs[first..first + len];
                        let keys: Vec<&str> = run.iter().map(|job| job.key.as_str()).collect();
                        let (started, cpu) = (Instant::now(), thread_cpu_seconds());
                        let counts = counter.count_many(&keys, &never);
                        let seconds = started.elapsed().as_secs_f64() / len as f64;
                        let cpu_seconds = (thread_cpu_seconds() - cpu) / len as f64;
                        let _one_run_at_a_time = printed.lock().unwrap_or_else(|p| p.into_inner());
                        for (offset, (job, count)) in run.iter().zip(counts).enumerate() {
                            let report = SampleReport {
                                census: census.to_string(),
                                seed,
                                class: first + offset,
                                group: job.group.clone(),
                                key: job.key.clone(),
                                weight: job.weight.to_string(),
                                count: count?.to_string(),
                                seconds,
                                cpu_seconds,
                                run: first,
                                run_jobs: len,
                                sampled: sampled.contains(&(first + offset)),
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
                                    if len > 1 { format!(", run of {len} from {first}") } else { String::new() }
                                );
                            }
                        }
                    }
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().expect("a counting thread panicked")).collect()
    });
    results.into_iter().collect::<anyhow::Result<Vec<()>>>()?;
    Ok(ExitCode::SUCCESS)
}

/// CPU seconds the calling thread has run (0 where the clock cannot be read).
fn thread_cpu_seconds() -> f64 {
    // SAFETY: clock_gettime writes into the struct it is given, which is ours.
    let time = unsafe {
        let mut time: libc::timespec = std::mem::zeroed();
        if libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut time) != 0 {
            return 0.0;
        }
        time
    };
    time.tv_sec as f64 + time.tv_nsec as f64 / 1e9
}

/// `n` distinct indexes below `len`, by a partial Fisher-Yates shuffle
/// driven by splitmix64 from `seed` (a sample, not a secret).
fn choose(len: usize, n: usize, seed: u64) -> Vec<usize> {
    let mut state = seed;
    let mut next = || {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    let mut indexes: Vec<usize> = (0..len).collect();
    for i in 0..n {
        let j = i + (next() % (len - i) as u64) as usize;
        indexes.swap(i, j);
    }
    indexes.truncate(n);
    indexes
}

/// A seed for an unseeded sample: the standard library's per-process random
/// hasher keys, mixed with the clock.
fn random_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos()));
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::{choose, runs_of};

    /// A chosen job is counted in the run a worker would count it in: the
    /// `together` jobs from a multiple of `together`, the last run cut at
    /// the end of the list; runs once each, in the order drawn.
    #[test]
    fn chosen_jobs_are_counted_in_their_runs() {
        assert_eq!(runs_of(&[700, 5, 300, 260], 256, 1000), [(512, 256), (0, 256), (256, 256)]);
        assert_eq!(runs_of(&[999, 768], 256, 1000), [(768, 232)]);
        assert_eq!(runs_of(&[3, 1], 1, 10), [(3, 1), (1, 1)]);
        assert_eq!(runs_of(&[3], 0, 10), [(3, 1)]);
    }

    #[test]
    fn a_sample_is_distinct_in_range_and_follows_its_seed() {
        let a = choose(1000, 50, 7);
        let mut sorted = a.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), 50);
        assert!(a.iter().all(|&i| i < 1000));
        assert_eq!(a, choose(1000, 50, 7));
        assert_ne!(a, choose(1000, 50, 8));
        let mut all = choose(10, 10, 3);
        all.sort_unstable();
        assert_eq!(all, (0..10).collect::<Vec<_>>());
    }
}
