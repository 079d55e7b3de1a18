//! Counts G (completions of bands 2 and 3) for one 4 x 3 pattern by the sum
//! over moves, and times it:
//! `cargo run --release -p census-math --example gangster_count -- [PATTERN]`
//! (default: the pattern whose four stacks split the digits alike).
//!
//! Silver publishes G / 4!^2 (the middle and bottom bands' rows in a fixed
//! order): the example looks that value up in the sample of his published
//! counts (tests/data/silver_4x3_gangster_counts.txt) and exits 1 if it is
//! not there. The default pattern is his gangster 0, the largest count.
use census_math::three_bands::{BandCounts, Pattern, band_count, completions, parse_published_counts};
use std::sync::atomic::AtomicBool;
use std::time::Instant;

fn main() {
    let text = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "0000.0000.0000.0000.1111.1111.1111.1111.2222.2222.2222.2222".to_string());
    let pattern = Pattern::parse(4, &text).unwrap_or_else(|e| {
        eprintln!("{e}");
        std::process::exit(2)
    });
    let start = Instant::now();
    let mut bands = BandCounts::new();
    let never = AtomicBool::new(false);
    let g = completions(&pattern, &mut bands, &never).expect("never cancelled");
    println!(
        "{text}: b = {}, G = {g}, {} classes' b tabulated, {:.1} s",
        band_count(&pattern),
        bands.len(),
        start.elapsed().as_secs_f64()
    );
    let published =
        parse_published_counts(include_str!("../tests/data/silver_4x3_gangster_counts.txt")).expect("the sample reads");
    let silver = g / 576;
    match published.iter().find(|&&(_, count)| count == silver && g.is_multiple_of(576)) {
        Some((index, _)) => println!("G / 4!^2 = {silver} = Silver's published count of his gangster {index}"),
        None => {
            println!("G / 4!^2 = {silver} is not in the sample of published counts");
            std::process::exit(1);
        }
    }
}
