//! Times the 2 x c shape counts of `census_math::shapes` on one thread.
//!
//! ```text
//! cargo run --release -p census-math --example shapes -- 2x5
//! cargo run --release -p census-math --example shapes -- 2x6 --sample 50
//! cargo run --release -p census-math --example shapes -- classes
//! ```
//!
//! `2xC` enumerates the jobs, counts every one and checks the total against
//! the published number; `--sample N` counts only N jobs spread evenly over
//! the job list and projects the whole run from their mean; `classes`
//! counts the classes of c = 2..6.

use std::time::{Duration, Instant};

use census_math::shapes::{self, PUBLISHED_GRIDS, ShapeJob};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: shapes 2xC [--sample N] | shapes classes";
    let Some(shape) = args.first() else {
        eprintln!("{usage}");
        std::process::exit(2);
    };
    if shape == "classes" {
        for c in shapes::MIN_C..=shapes::MAX_C {
            let start = Instant::now();
            let classes = shapes::classes(c).expect("supported c");
            println!("2x{c}: {} classes ({:.2?})", classes.len(), start.elapsed());
        }
        return;
    }
    let c: usize = match shape.strip_prefix("2x").and_then(|c| c.parse().ok()) {
        Some(c) => c,
        None => {
            eprintln!("{usage}");
            std::process::exit(2);
        }
    };
    let sample: Option<usize> = match args.get(1).map(String::as_str) {
        None => None,
        Some("--sample") => Some(
            args.get(2)
                .and_then(|n| n.parse().ok())
                .filter(|&n| n > 0)
                .unwrap_or_else(|| {
                    eprintln!("{usage}");
                    std::process::exit(2)
                }),
        ),
        Some(_) => {
            eprintln!("{usage}");
            std::process::exit(2);
        }
    };

    let start = Instant::now();
    let jobs = shapes::jobs(c).unwrap_or_else(|e| {
        eprintln!("{e}");
        std::process::exit(2)
    });
    let classes = jobs
        .iter()
        .map(|job| &job.group)
        .collect::<std::collections::BTreeSet<_>>()
        .len();
    println!(
        "2x{c}: {classes} classes, {} jobs, enumerated in {:.2?}",
        jobs.len(),
        start.elapsed()
    );

    let picked: Vec<&ShapeJob> = match sample {
        Some(n) if n < jobs.len() => (0..n)
            .map(|i| &jobs[i * jobs.len() / n + jobs.len() / (2 * n)])
            .collect(),
        _ => jobs.iter().collect(),
    };
    let mut times = Vec::with_capacity(picked.len());
    let mut counts = Vec::with_capacity(picked.len());
    let all = Instant::now();
    for job in &picked {
        let start = Instant::now();
        let count = shapes::count_job(&job.key).expect("keys from jobs() parse");
        let took = start.elapsed();
        if sample.is_some() {
            println!("  {:<44} {:>24} {:>10.3?}", job.key, count, took);
        }
        times.push(took);
        counts.push(count);
    }
    let counted = all.elapsed();
    times.sort_unstable();
    let at = |q: f64| times[((times.len() - 1) as f64 * q).round() as usize];
    let mean = times.iter().sum::<Duration>() / times.len() as u32;
    println!(
        "{} jobs counted in {:.2?}: per job median {:.3?}, 99th percentile {:.3?}, max {:.3?}, mean {:.3?}",
        picked.len(),
        counted,
        at(0.5),
        at(0.99),
        at(1.0),
        mean
    );
    if picked.len() == jobs.len() {
        let total = shapes::fold(c, jobs.iter().zip(counts)).expect("consistent results");
        let published = PUBLISHED_GRIDS
            .iter()
            .find(|(shape, _)| *shape == c)
            .map(|p| p.1);
        let verdict = if published == Some(total.to_string().as_str()) {
            "matches"
        } else {
            "DOES NOT MATCH"
        };
        println!("2x{c} grids = {total} ({verdict} the published total)");
        println!("whole run on one thread: {:.2?}", start.elapsed());
    } else {
        let projected = mean.as_secs_f64() * jobs.len() as f64;
        println!(
            "projected whole run: {:.0} core-seconds = {:.1} core-hours ({} jobs x mean)",
            projected,
            projected / 3600.0,
            jobs.len()
        );
    }
}
