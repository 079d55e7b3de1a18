//! Lists the classes of top-band column sets for r x 3 boxes and times it:
//! `cargo run --release -p census-math --example gangsters -- 4`.
use census_math::three_bands::{band_count, column_set_tuples, gangsters, least};
use std::time::Instant;

fn main() {
    let r: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(4);
    let start = Instant::now();
    let classes = gangsters(r).expect("r is 2..=4");
    let sizes: u128 = classes.iter().map(|g| g.size).sum();
    println!(
        "r = {r}: {} classes, sizes sum {sizes} (tuples {}), {:.2} s",
        classes.len(),
        column_set_tuples(r),
        start.elapsed().as_secs_f64()
    );
    // least() of every class's pattern: the canonical form a term of G needs twice.
    let start = Instant::now();
    let unchanged = classes.iter().filter(|g| least(&g.pattern) == g.pattern).count();
    println!(
        "least() of all {unchanged} patterns: {:.2} us each",
        start.elapsed().as_secs_f64() * 1e6 / classes.len() as f64
    );
    // b for the first few classes, to time the band counter.
    let sample = std::env::args().nth(2).and_then(|a| a.parse().ok()).unwrap_or(0usize);
    if let Some(step) = classes.len().checked_div(sample) {
        let start = Instant::now();
        let bands: u128 = classes.iter().step_by(step.max(1)).take(sample).map(|g| band_count(&g.pattern)).sum();
        println!(
            "b of {sample} classes: sum {bands}, {:.3} ms each",
            start.elapsed().as_secs_f64() * 1e3 / sample as f64
        );
    }
}
