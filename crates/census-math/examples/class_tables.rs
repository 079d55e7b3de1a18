//! Times, in-process, the pieces of a stage's count: the catalogue, the
//! stage's class table, the column-sets counter's tables, the stage's S
//! (all ten seeds of each class at once, as `census bench` counts) and its
//! jobs one seed at a time (as workers count them). Each figure is the least
//! of 20 passes: on a shared, noisy machine the least is closest to the
//! piece's own time (the first pass also pays for page faults).
//! `cargo run --release -p census-math --example class_tables -- [STAGE]`.

use std::time::Instant;

use census_math::counter::ColumnSets;
use census_math::{ClassTable, Counter, SEEDS, Stage, catalogue};

const PASSES: usize = 20;

/// The least time of `PASSES` calls, in milliseconds, and the last result.
fn least_ms<T>(mut piece: impl FnMut() -> T) -> (f64, T) {
    let mut least = f64::MAX;
    let mut result = None;
    for _ in 0..PASSES {
        let started = Instant::now();
        result = Some(piece());
        least = least.min(started.elapsed().as_secs_f64() * 1e3);
    }
    (least, result.expect("at least one pass"))
}

fn main() {
    let stage: Stage = match std::env::args().nth(1).unwrap_or_else(|| "44".into()).parse() {
        Ok(stage) => stage,
        Err(error) => {
            eprintln!("class_tables: {error}");
            std::process::exit(2);
        }
    };
    let (catalogue_ms, bands) = least_ms(|| catalogue::catalogue().len());
    let (table_ms, table) = least_ms(|| ClassTable::build(stage));
    let (tables_ms, _) = least_ms(ColumnSets::new);
    // A fresh counter each pass, so that every pass counts term by term (a
    // counter makes its lines, for the catalogue, after 300 bands).
    let mut counters = (0..PASSES).map(|_| ColumnSets::new());
    let (s_ms, s) = least_ms(|| {
        let counter = counters.next().expect("a counter a pass");
        table
            .classes()
            .iter()
            .map(|class| class.size * counter.count_seeds(&class.representative).iter().sum::<u64>())
            .sum::<u64>()
    });
    let counter = ColumnSets::new();
    let jobs = table.classes().len() * SEEDS.len();
    let (jobs_ms, _) = least_ms(|| {
        let seeds = table.classes().iter().flat_map(|class| SEEDS.iter().map(move |seed| (class, seed)));
        seeds.map(|(class, seed)| counter.count(&class.representative, seed)).sum::<u64>()
    });
    println!(
        "catalogue: {bands} bands in {catalogue_ms:.2} ms; {stage}: {} classes in {table_ms:.2} ms (catalogue \
         included); column-sets tables {tables_ms:.2} ms; S = {s} in {s_ms:.2} ms; its {jobs} jobs one seed \
         at a time in {jobs_ms:.2} ms ({:.1} us a job)",
        table.classes().len(),
        jobs_ms * 1e3 / jobs as f64
    );
}
