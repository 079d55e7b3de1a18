//! Times the catalogue and a stage's class table in-process, a few times
//! over (the first pass pays for page faults):
//! `cargo run --release -p census-math --example class_tables -- [STAGE]`.

use std::time::Instant;

use census_math::{ClassTable, Stage, catalogue};

fn main() {
    let stage: Stage = match std::env::args().nth(1).unwrap_or_else(|| "44".into()).parse() {
        Ok(stage) => stage,
        Err(error) => {
            eprintln!("class_tables: {error}");
            std::process::exit(2);
        }
    };
    for _ in 0..3 {
        let started = Instant::now();
        let bands = catalogue::catalogue().len();
        let catalogue_time = started.elapsed();
        let started = Instant::now();
        let classes = ClassTable::build(stage).classes().len();
        println!(
            "catalogue: {bands} bands in {:.1} ms; {stage}: {classes} classes in {:.1} ms (catalogue included)",
            catalogue_time.as_secs_f64() * 1e3,
            started.elapsed().as_secs_f64() * 1e3
        );
    }
}
