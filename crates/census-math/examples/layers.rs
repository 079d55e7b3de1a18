//! The layer recurrence for 2 x c boxes on one core, layer by layer:
//! `cargo run --release -p census-math --example layers -- C [TO_LAYER]`.
//! Prints each layer's states, emissions and seconds, and the grid total when
//! it reaches the last layer.

use std::sync::atomic::AtomicBool;
use std::time::Instant;

use census_math::shapes::layers;

fn main() {
    let args: Vec<usize> = std::env::args().skip(1).map(|a| a.parse().expect("C and TO_LAYER are numbers")).collect();
    let c = *args.first().expect("usage: layers C [TO_LAYER]");
    let to = args.get(1).copied().unwrap_or(c);
    let cancel = AtomicBool::new(false);
    let mut started = Instant::now();
    let last = layers::layers(c, to, &cancel, &mut |layer| {
        let seconds = started.elapsed().as_secs_f64();
        println!(
            "layer {}: {} states, {} emissions, {:.2} s ({:.0} ns an emission)",
            layer.rows(),
            layer.states().len(),
            layer.emissions(),
            seconds,
            seconds * 1e9 / layer.emissions().max(1) as f64
        );
        started = Instant::now();
    })
    .unwrap();
    if last.is_complete() {
        let (classes, grids) = layers::finish(&last).unwrap();
        println!("{} classes, {grids} grids", classes.len());
    }
}
