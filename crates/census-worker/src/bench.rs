//! Counting in this process, with no coordinator and no store, for `census
//! bench`: the counters a worker runs, on threads that take their work
//! from a shared cursor. [`count_stage`] counts the 9x9 census of a stage
//! class by class (the fast counter shares work between a band's seeds);
//! [`count_census`] counts every job of any census and folds the answer;
//! [`count_runs`] counts chosen runs of jobs ([`Sample`]) as a worker's
//! thread counts them, together, and reports each run as it finishes.
//! Nothing here prints: the caller times and reports.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Instant;

use census_math::census::{Answer, Census, CensusError, JobSpec};
use census_math::total::s_from_classes;
use census_math::{ClassTable, CounterKind, SEEDS, Stage};
use num_bigint::BigUint;

/// Calls `work` for every index below `len` on `threads` threads (at
/// least one), each taking the next index from a shared cursor; what each
/// call returned, by index.
pub fn on_threads<R: Send>(threads: usize, len: usize, work: impl Fn(usize) -> R + Sync) -> Vec<R> {
    let next = AtomicUsize::new(0);
    let per_thread: Vec<Vec<(usize, R)>> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads.clamp(1, len.max(1)))
            .map(|_| {
                scope.spawn(|| {
                    let mut done = Vec::new();
                    loop {
                        let index = next.fetch_add(1, Ordering::Relaxed);
                        if index >= len {
                            break done;
                        }
                        done.push((index, work(index)));
                    }
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().expect("a counting thread panicked")).collect()
    });
    let mut results: Vec<(usize, R)> = per_thread.into_iter().flatten().collect();
    results.sort_unstable_by_key(|(index, _)| *index);
    results.into_iter().map(|(_, result)| result).collect()
}

/// The 9x9 count of a stage by one counter, or of its first jobs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StageCount {
    /// Jobs counted: (class, seed) pairs, in order.
    pub jobs: usize,
    /// Whether they are all the stage's jobs (S is then the census's S).
    pub whole: bool,
    /// S (partial unless `whole`): the sum of class size x seed counts.
    pub s: BigUint,
    /// The completions counted, every job's count added.
    pub completions: u64,
}

/// Counts the 9x9 census of `stage` with `counter` on `threads` threads,
/// or its first `limit` jobs (jobs are (class, seed) in order, so a limit
/// keeps whole classes and a prefix of the seeds of one more). Whole
/// classes go to one thread at a time, so the fast counter can share work
/// between a band's seeds.
pub fn count_stage(stage: Stage, counter: CounterKind, threads: usize, limit: Option<usize>) -> StageCount {
    let table = ClassTable::build(stage);
    let counter = counter.build();
    let classes = table.classes();
    let jobs = (classes.len() * SEEDS.len()).min(limit.unwrap_or(usize::MAX));
    let seeds_of = |class: usize| jobs.saturating_sub(class * SEEDS.len()).min(SEEDS.len());
    let counts: Vec<Vec<u64>> = on_threads(threads, jobs.div_ceil(SEEDS.len()), |class| {
        let band = &classes[class].representative;
        if seeds_of(class) == SEEDS.len() {
            counter.count_seeds(band).to_vec()
        } else {
            SEEDS.iter().take(seeds_of(class)).map(|seed| counter.count(band, seed)).collect()
        }
    });
    StageCount {
        jobs,
        whole: jobs == classes.len() * SEEDS.len(),
        s: s_from_classes(classes.iter().zip(&counts).map(|(class, seeds)| (class.size, seeds.iter().sum::<u64>()))),
        completions: counts.iter().flatten().sum(),
    }
}

/// Counts every job of `census` on `threads` threads with its counter and
/// folds the answer (checked as the coordinator checks a run's); the jobs
/// and the answer.
pub fn count_census(census: &Census, threads: usize) -> Result<(Vec<JobSpec>, Answer), CensusError> {
    let jobs = census.jobs()?;
    let counter = census.job_counter();
    let counts = on_threads(threads, jobs.len(), |i| counter.count(&jobs[i].key));
    let counts = counts.into_iter().collect::<Result<Vec<u128>, CensusError>>()?;
    let answer = census.fold(&jobs, &counts)?;
    Ok((jobs, answer))
}

/// Jobs of a census chosen at random, and the runs that count them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sample {
    /// The seed that chose them: the same seed, the same jobs.
    pub seed: u64,
    /// The chosen jobs' indexes in the census's job list, as drawn.
    pub chosen: Vec<usize>,
    /// The runs that count them, as first indexes and lengths in the job
    /// list: the `together` jobs from each multiple of `together` (a
    /// worker leases that many a thread, in job order), each run once, in
    /// the order their first chosen job was drawn.
    pub runs: Vec<(usize, usize)>,
}

impl Sample {
    /// `n` (at most `jobs`) distinct jobs of a list of `jobs` chosen by
    /// `seed`, counted `together` at a time.
    pub fn choose(jobs: usize, n: usize, seed: u64, together: usize) -> Sample {
        let chosen = choose(jobs, n, seed);
        let runs = runs_of(&chosen, together, jobs);
        Sample { seed, chosen, runs }
    }
}

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

/// `n` distinct indexes below `len`, by a partial Fisher-Yates shuffle
/// driven by splitmix64 from `seed` (a sample, not a secret).
fn choose(len: usize, n: usize, seed: u64) -> Vec<usize> {
    let n = n.min(len);
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
pub fn random_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos()));
    hasher.finish()
}

/// A run of jobs, counted together in one call as a worker's thread counts them.
#[derive(Debug)]
pub struct CountedRun<'a> {
    /// The index of the run's first job in the job list.
    pub first: usize,
    /// The run's jobs, and each one's count (a bad key fails alone).
    pub jobs: &'a [JobSpec],
    pub counts: Vec<Result<u128, CensusError>>,
    /// The run's wall time over its jobs (what a worker reports for each).
    pub seconds: f64,
    /// The counting thread's CPU time over the run, over its jobs.
    pub cpu_seconds: f64,
}

/// Counts the `runs` of `jobs` (first index, length) with `census`'s
/// counter on `threads` threads that share it, calling `report` with each
/// run as it finishes, one run at a time (so a long sample reports as it
/// goes); the first error `report` returns ends the count.
pub fn count_runs<E: Send>(
    census: &Census,
    jobs: &[JobSpec],
    runs: &[(usize, usize)],
    threads: usize,
    report: impl Fn(CountedRun<'_>) -> Result<(), E> + Sync,
) -> Result<(), E> {
    let counter = census.job_counter();
    let never = AtomicBool::new(false);
    let one_at_a_time = Mutex::new(());
    let failed = AtomicBool::new(false);
    let reported = on_threads(threads.min(runs.len()), runs.len(), |run| {
        if failed.load(Ordering::Relaxed) {
            return Ok(());
        }
        let (first, len) = runs[run];
        let run = &jobs[first..first + len];
        let keys: Vec<&str> = run.iter().map(|job| job.key.as_str()).collect();
        let (started, cpu) = (Instant::now(), thread_cpu_seconds());
        let counts = counter.count_many(&keys, &never);
        let seconds = started.elapsed().as_secs_f64() / len as f64;
        let cpu_seconds = (thread_cpu_seconds() - cpu) / len as f64;
        let _one_run_at_a_time = one_at_a_time.lock().unwrap_or_else(|p| p.into_inner());
        let reported = report(CountedRun { first, jobs: run, counts, seconds, cpu_seconds });
        failed.fetch_or(reported.is_err(), Ordering::Relaxed);
        reported
    });
    reported.into_iter().collect()
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

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use census_math::census::Census;
    use census_math::total::PUBLISHED_S;
    use census_math::{CounterKind, Stage};
    use num_bigint::BigUint;

    use super::{Sample, choose, count_census, count_runs, count_stage, on_threads, runs_of};

    #[test]
    fn every_index_is_worked_once_and_returned_in_order() {
        for threads in [1, 3, 64] {
            assert_eq!(on_threads(threads, 100, |i| i * i), (0..100).map(|i| i * i).collect::<Vec<_>>());
        }
        assert!(on_threads(4, 0, |i| i).is_empty());
    }

    /// Russell's 44 classes give the published S on any number of threads;
    /// a limit counts whole classes and a prefix of one more.
    #[test]
    fn a_stage_gives_the_published_s() {
        let whole = count_stage(Stage::Russell, CounterKind::ColumnSets, 2, None);
        assert_eq!((whole.jobs, whole.whole, &whole.s), (440, true, &BigUint::from(PUBLISHED_S)));
        let part = count_stage(Stage::Russell, CounterKind::ColumnSets, 3, Some(25));
        assert_eq!((part.jobs, part.whole), (25, false));
        assert_eq!(part, count_stage(Stage::Russell, CounterKind::ColumnSets, 1, Some(25)));
        assert!(part.s < whole.s && part.completions < whole.completions);
    }

    #[test]
    fn a_census_folds_to_its_published_answer() {
        let census: Census = "shape boxes=2x3".parse().unwrap();
        let (jobs, answer) = count_census(&census, 2).unwrap();
        assert_eq!(jobs.len(), 4);
        assert_eq!(Some(answer.value), census.published());
    }

    /// Runs counted together give each job the count it has alone, and
    /// are reported once each.
    #[test]
    fn runs_count_as_their_jobs_alone() {
        let census: Census = "shape boxes=2x3".parse().unwrap();
        let jobs = census.jobs().unwrap();
        let counter = census.job_counter();
        let sample = Sample::choose(jobs.len(), 3, 11, 2);
        let seen = Mutex::new(Vec::new());
        count_runs(&census, &jobs, &sample.runs, 2, |run| {
            for (job, count) in run.jobs.iter().zip(run.counts) {
                assert_eq!(count.unwrap(), counter.count(&job.key).unwrap());
            }
            seen.lock().unwrap().push(run.first);
            Ok::<(), ()>(())
        })
        .unwrap();
        let mut seen = seen.into_inner().unwrap();
        seen.sort_unstable();
        let mut firsts: Vec<usize> = sample.runs.iter().map(|run| run.0).collect();
        firsts.sort_unstable();
        assert_eq!(seen, firsts);
        assert_eq!(count_runs(&census, &jobs, &sample.runs, 2, |_| Err("stop")), Err("stop"));
    }

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
