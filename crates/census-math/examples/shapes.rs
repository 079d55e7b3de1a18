//! Times the 2 x c shape counts of `census_math::shapes` on one thread.
//!
//! ```text
//! cargo run --release -p census-math --example shapes -- 2x5
//! cargo run --release -p census-math --example shapes -- 2x6 --sample 50
//! cargo run --release -p census-math --example shapes -- 2x6 --sample 50 --estimate 4 3
//! cargo run --release -p census-math --example shapes -- classes
//! ```
//!
//! `2xC` enumerates the jobs, counts every one and checks the total against
//! the published number; `--sample N` counts only N jobs spread evenly over
//! the job list and projects the whole run from their mean; `--estimate D M`
//! does not count a sampled job whole but times M of its finer parts (the
//! first D columns fixed, see `shapes::sub_keys`) spread over them and
//! scales by their number, for jobs too long to time whole. `classes` counts
//! the classes of c = 2..6.

use std::collections::BTreeSet;
use std::process::exit;
use std::time::{Duration, Instant};

use census_math::shapes::{self, PUBLISHED_GRIDS, ShapeJob};

const USAGE: &str = "usage: shapes 2xC [--sample N [--estimate D M]] | shapes classes";

fn usage() -> ! {
    eprintln!("{USAGE}");
    exit(2)
}

fn number(arg: Option<&String>) -> usize {
    arg.and_then(|n| n.parse().ok()).filter(|&n| n > 0).unwrap_or_else(|| usage())
}

/// `count` items spread evenly over `len`, centred in their stretches.
fn spread(len: usize, count: usize) -> Vec<usize> {
    if count >= len {
        return (0..len).collect();
    }
    (0..count).map(|i| i * len / count + len / (2 * count)).collect()
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(shape) = args.first() else { usage() };
    if shape == "classes" {
        for c in shapes::MIN_C..=shapes::MAX_C {
            let start = Instant::now();
            let classes = shapes::classes(c).expect("supported c");
            println!("2x{c}: {} classes ({:.2?})", classes.len(), start.elapsed());
        }
        return;
    }
    let Some(c) = shape.strip_prefix("2x").and_then(|c| c.parse::<usize>().ok()) else { usage() };
    let (mut sample, mut estimate) = (None, None);
    let mut rest = args[1..].iter();
    while let Some(flag) = rest.next() {
        match flag.as_str() {
            "--sample" => sample = Some(number(rest.next())),
            "--estimate" => estimate = Some((number(rest.next()), number(rest.next()))),
            _ => usage(),
        }
    }

    let start = Instant::now();
    let jobs = shapes::jobs(c).unwrap_or_else(|e| {
        eprintln!("{e}");
        exit(2)
    });
    let classes = jobs.iter().map(|job| &job.group).collect::<BTreeSet<_>>().len();
    println!("2x{c}: {classes} classes, {} jobs, enumerated in {:.2?}", jobs.len(), start.elapsed());

    let picked: Vec<&ShapeJob> =
        spread(jobs.len(), sample.unwrap_or(jobs.len())).into_iter().map(|i| &jobs[i]).collect();
    let mut times = Vec::with_capacity(picked.len());
    let mut counts = Vec::with_capacity(picked.len());
    let all = Instant::now();
    for job in &picked {
        let (took, count) = match estimate {
            None => {
                let start = Instant::now();
                let count = shapes::count_job(&job.key).expect("keys from jobs() parse");
                (start.elapsed(), Some(count))
            }
            Some((depth, m)) => (estimated(&job.key, depth, m), None),
        };
        if sample.is_some() {
            let count = count.map_or("(estimated)".to_string(), |n| n.to_string());
            println!("  {:<60} {:>20} {:>10.3?}", job.key, count, took);
        }
        times.push(took);
        counts.extend(count);
    }
    let counted = all.elapsed();
    times.sort_unstable();
    let at = |q: f64| times[((times.len() - 1) as f64 * q).round() as usize];
    let mean = times.iter().sum::<Duration>() / times.len() as u32;
    println!(
        "{} jobs {} in {:.2?}: per job median {:.3?}, 99th percentile {:.3?}, max {:.3?}, mean {:.3?}",
        picked.len(),
        if estimate.is_some() { "estimated" } else { "counted" },
        counted,
        at(0.5),
        at(0.99),
        at(1.0),
        mean
    );
    if counts.len() == jobs.len() {
        let total = shapes::fold(c, jobs.iter().zip(counts)).expect("consistent results");
        let published = PUBLISHED_GRIDS.iter().find(|(shape, _)| *shape == c).map(|p| p.1);
        let verdict = if published == Some(total.to_string().as_str()) { "matches" } else { "DOES NOT MATCH" };
        println!("2x{c} grids = {total} ({verdict} the published total)");
        println!("whole run on one thread: {:.2?}", start.elapsed());
    } else {
        let projected = mean.as_secs_f64() * jobs.len() as f64;
        println!(
            "projected whole run: {:.3e} core-seconds = {:.1} core-hours ({} jobs x mean)",
            projected,
            projected / 3600.0,
            jobs.len()
        );
    }
}

/// The time of a job from `m` of its finer parts (first `depth` columns
/// fixed), scaled by their number.
fn estimated(key: &str, depth: usize, m: usize) -> Duration {
    let class = key.split('/').next().expect("split yields one piece");
    let within = format!("{key},");
    let subs: Vec<String> = shapes::sub_keys(class, depth)
        .expect("keys from jobs() parse")
        .into_iter()
        .filter(|sub| !key.contains('/') || sub.starts_with(&within))
        .collect();
    if subs.is_empty() {
        return Duration::ZERO;
    }
    let picked = spread(subs.len(), m);
    let start = Instant::now();
    for &i in &picked {
        shapes::count_job(&subs[i]).expect("sub keys parse");
    }
    start.elapsed() / picked.len() as u32 * subs.len() as u32
}
