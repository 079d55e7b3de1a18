//! One job for each counter, and the whole Russell stage with column-sets.
//!
//! `cargo bench -p census-math --bench counters`

use census_math::{Band, ClassTable, CounterKind, SEEDS, Stage};
use criterion::{Criterion, criterion_group, criterion_main};
use std::time::Duration;

fn one_job(c: &mut Criterion) {
    let band: Band = "123478569456139278789256134".parse().unwrap();
    let mut group = c.benchmark_group("one job (123478569456139278789256134, seed 235/689)");
    group.sample_size(10).measurement_time(Duration::from_secs(10)).warm_up_time(Duration::from_secs(1));
    for kind in CounterKind::ALL {
        let counter = kind.build();
        group.bench_function(kind.name(), |b| b.iter(|| counter.count(&band, &SEEDS[0])));
    }
    group.finish();
}

fn russell_stage(c: &mut Criterion) {
    let table = ClassTable::build(Stage::Russell);
    let mut group = c.benchmark_group("whole Russell stage, column-sets");
    group.sample_size(20);
    group.bench_function("S with tables", |b| {
        b.iter(|| {
            let counter = CounterKind::ColumnSets.build();
            table
                .classes()
                .iter()
                .map(|class| class.size * counter.count_seeds(&class.representative).iter().sum::<u64>())
                .sum::<u64>()
        })
    });
    group.bench_function("class table (44)", |b| b.iter(|| ClassTable::build(Stage::Russell).classes().len()));
    group.finish();
}

criterion_group!(benches, one_job, russell_stage);
criterion_main!(benches);
