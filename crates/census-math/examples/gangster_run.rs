//! Counts 4 x 3 gangsters as a worker and `census bench --sample 1 --seed S`
//! count them: the run of 256 neighbouring jobs that holds the job the seed
//! chooses, together, on one table that starts empty, and times it:
//! `cargo run --release -p census-math --example gangster_run -- [--parts P] [--fill] SEED...`
//! (`start=N` instead of a seed: the run from job N).
//!
//! `--parts P` counts part 0 of P of every group of the run
//! (`SharedTable::count_part`: every P-th choice of the first two stacks),
//! about 1/P of the work of the terms, for a quick estimate; the counts are
//! then partial, so only their checksum is printed. `--fill` fills the
//! whole table first and times it apart. `--list` only lists the groups
//! of each run.
//!
//! Prints per run: the groups it crosses (members of each), the thread's
//! CPU seconds (all and per gangster), a checksum of the counts (to compare
//! two builds), and at the end the process's CPU seconds and peak memory.
use census_math::three_bands::{Pattern, SharedTable, jobs, parse_key};
use std::sync::atomic::AtomicBool;
use std::time::Instant;

/// The run length of `Census::jobs_counted_together` for 4x3.
const RUN: usize = 256;

fn main() {
    let mut words: Vec<String> = std::env::args().skip(1).collect();
    let mut parts = 1usize;
    let mut fill = false;
    let mut list = false;
    while let Some(word) = words.first().cloned() {
        match word.as_str() {
            "--parts" => {
                parts = words.get(1).and_then(|w| w.parse().ok()).expect("--parts P");
                words.drain(..2);
            }
            "--fill" => {
                fill = true;
                words.remove(0);
            }
            "--list" => {
                list = true;
                words.remove(0);
            }
            _ => break,
        }
    }
    let cpu = thread_cpu_seconds();
    let listed = jobs(4).expect("r = 4");
    println!("job list: {:.1} CPU-s ({} gangsters)", thread_cpu_seconds() - cpu, listed.len());
    let table = SharedTable::new(4).expect("r = 4");
    let never = AtomicBool::new(false);
    if fill {
        let cpu = thread_cpu_seconds();
        table.table().fill_all(&never).expect("never cancelled");
        let filled = table.table();
        println!(
            "table filled: {:.1} CPU-s ({} rows coloured, {} relabelled)",
            thread_cpu_seconds() - cpu,
            filled.rows_coloured(),
            filled.rows_relabelled()
        );
    }
    for word in &words {
        let first = match word.strip_prefix("start=") {
            Some(start) => start.parse::<usize>().expect("start=N") / RUN * RUN,
            None => first_of_run(word.parse().expect("a seed"), listed.len()),
        };
        let run = &listed[first..(first + RUN).min(listed.len())];
        let patterns: Vec<Pattern> = run.iter().map(|job| parse_key(&job.key).expect("listed keys read")).collect();
        if list {
            println!("run {word} (jobs {first}..{}): groups {:?}", first + run.len(), group_sizes(&patterns));
            continue;
        }
        let (cpu, wall) = (thread_cpu_seconds(), Instant::now());
        let counts = table.count_part(&patterns, 0, parts, &never).expect("never cancelled");
        let cpu = thread_cpu_seconds() - cpu;
        let checksum = counts.iter().fold(0u128, |sum, &count| sum.wrapping_add(count));
        println!(
            "run {word} (jobs {first}..{}): groups {:?}, {cpu:.1} CPU-s ({:.3} a gangster{}), {:.1} s wall, checksum {checksum}",
            first + run.len(),
            group_sizes(&patterns),
            cpu / run.len() as f64,
            if parts > 1 { format!(", part 0 of {parts}") } else { String::new() },
            wall.elapsed().as_secs_f64(),
        );
    }
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let peak = status.lines().find(|line| line.starts_with("VmHWM")).unwrap_or("VmHWM: ?");
    println!("process: {:.1} CPU-s, {peak}", process_cpu_seconds());
}

/// The first job of the run `census bench --sample 1 --seed SEED` counts:
/// its first draw (splitmix64, as `choose` there) rounded down to a run.
fn first_of_run(seed: u64, len: usize) -> usize {
    let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z % len as u64) as usize / RUN * RUN
}

/// The members of each group (gangsters sharing their first three stacks) in the run, in order.
fn group_sizes(patterns: &[Pattern]) -> Vec<usize> {
    let prefix = |p: &Pattern| -> Vec<[u8; 3]> { p.digit_vectors().iter().map(|v| [v[0], v[1], v[2]]).collect() };
    let mut sizes: Vec<(Vec<[u8; 3]>, usize)> = Vec::new();
    for pattern in patterns {
        let key = prefix(pattern);
        match sizes.iter_mut().find(|(k, _)| *k == key) {
            Some((_, n)) => *n += 1,
            None => sizes.push((key, 1)),
        }
    }
    sizes.into_iter().map(|(_, n)| n).collect()
}

/// CPU seconds of the calling thread (/proc/thread-self/schedstat), 0 if unreadable.
fn thread_cpu_seconds() -> f64 {
    schedstat("/proc/thread-self/schedstat")
}

/// CPU seconds of the whole process, user and system (/proc/self/stat, in clock ticks of 1/100 s).
fn process_cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let fields: Vec<&str> = stat.rsplit(')').next().unwrap_or("").split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
}

fn schedstat(path: &str) -> f64 {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|text| text.split_whitespace().next().and_then(|ns| ns.parse::<f64>().ok()))
        .map_or(0.0, |ns| ns / 1e9)
}
