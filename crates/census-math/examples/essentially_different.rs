//! Counts every job of the essentially different count on one thread and
//! prints each class's A, the slowest jobs and the answer:
//! `cargo run -p census-math --release --example essentially_different`.
//! With arguments, counts only the jobs of those classes.

use std::time::{Duration, Instant};

use census_math::essentially_different::{count_job, fold, jobs};

fn main() {
    let only: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("class numbers"))
        .collect();
    let start = Instant::now();
    let jobs: Vec<_> = jobs()
        .into_iter()
        .filter(|job| only.is_empty() || only.contains(&job.class))
        .collect();
    println!("{} jobs made in {:.2?}", jobs.len(), start.elapsed());
    let counting = Instant::now();
    let mut times: Vec<(Duration, &str)> = Vec::new();
    let counts: Vec<u128> = jobs
        .iter()
        .map(|job| {
            let t = Instant::now();
            let count = count_job(&job.key).expect("jobs() makes valid keys");
            times.push((t.elapsed(), &job.key));
            count
        })
        .collect();
    let counted = counting.elapsed();
    let fold = fold(&jobs, &counts);
    times.sort_by_key(|time| std::cmp::Reverse(time.0));
    match fold {
        Ok(fold) => {
            for term in fold.terms.iter().filter(|term| term.fixed != 0) {
                println!(
                    "class {:3} size {:6} A {}",
                    term.class, term.size, term.fixed
                );
            }
            println!("sum of size x A = {}, answer {}", fold.sum, fold.answer);
        }
        Err(error) => println!("fold refused: {error}"),
    }
    for (time, key) in times.iter().take(5) {
        println!("slow job {time:.2?} {key}");
    }
    println!("{} jobs counted in {counted:.2?} on one thread", jobs.len());
}
