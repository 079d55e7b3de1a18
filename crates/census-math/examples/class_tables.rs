//! Times the catalogue, a stage's class table, the column-sets counter's
//! tables and the stage's S in-process, a few times over (the first pass
//! pays for page faults):
//! `cargo run --release -p census-math --example class_tables -- [STAGE]`.

use std::time::Instant;

use census_math::counter::ColumnSets;
use census_math::{ClassTable, Counter, Stage, catalogue};

fn main() {
    let stage: Stage = match std::env::args().nth(1).unwrap_or_else(|| "44".into()).parse() {
        Ok(stage) => stage,
        Err(error) => {
            eprintln!("class_tables: {error}");
            std::process::exit(2);
        }
    };
    let ms = |started: Instant| started.elapsed().as_secs_f64() * 1e3;
    for _ in 0..3 {
        let started = Instant::now();
        let bands = catalogue::catalogue().len();
        let catalogue_time = ms(started);
        let started = Instant::now();
        let table = ClassTable::build(stage);
        let table_time = ms(started);
        let started = Instant::now();
        let counter = ColumnSets::new();
        let tables_time = ms(started);
        let started = Instant::now();
        let s: u64 = table
            .classes()
            .iter()
            .map(|class| class.size * counter.count_seeds(&class.representative).iter().sum::<u64>())
            .sum();
        println!(
            "catalogue: {bands} bands in {catalogue_time:.1} ms; {stage}: {} classes in {table_time:.1} ms \
             (catalogue included); column-sets tables {tables_time:.1} ms; S = {s} in {:.1} ms",
            table.classes().len(),
            ms(started)
        );
    }
}
