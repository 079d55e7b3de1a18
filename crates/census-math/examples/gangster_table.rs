//! Counts G for 4 x 3 gangsters by table reads over stack pairs
//! (`three_bands::stack_pairs`), one table for the whole process, and times
//! each: `cargo run --release -p census-math --example gangster_table -- [INDEX|alike ...]`
//! (indexes in the order of `three_bands::gangsters`; none: the gangster
//! whose four stacks split the digits alike, Silver's gangster 0).
//!
//! With `fill` first, fills the whole table before the first gangster and
//! says how long that took. `group INDEX COUNT` instead of indexes counts
//! together (`completions_of_many`) the first COUNT gangsters of the list
//! that share gangster INDEX's first three stacks, and gives the time of the
//! whole and per gangster.
//!
//! Prints, per gangster, G / 4!^2 (Silver's published form), whether that
//! value is in the sample of his published counts, the seconds taken, and
//! how many table entries are filled so far (rows coloured, rows
//! relabelled).
use census_math::three_bands::stack_pairs::StackPairTable;
use census_math::three_bands::{Pattern, gangsters, parse_published_counts};
use std::sync::atomic::AtomicBool;
use std::time::Instant;

fn main() {
    let mut words: Vec<String> = std::env::args().skip(1).collect();
    let fill = words.first().is_some_and(|word| word == "fill");
    if fill {
        words.remove(0);
    }
    let classes = gangsters(4).expect("r = 4");
    let alike = Pattern::parse(4, "0000.0000.0000.0000.1111.1111.1111.1111.2222.2222.2222.2222").expect("a pattern");
    let patterns: Vec<(String, Pattern)> = if words.first().is_some_and(|w| w == "group") {
        Vec::new()
    } else if words.is_empty() {
        vec![("alike".to_string(), alike.clone())]
    } else {
        words
            .iter()
            .map(|word| match word.as_str() {
                "alike" => (word.clone(), alike.clone()),
                index => {
                    (index.to_string(), classes[index.parse::<usize>().expect("an index or alike")].pattern.clone())
                }
            })
            .collect()
    };
    let published =
        parse_published_counts(include_str!("../tests/data/silver_4x3_gangster_counts.txt")).expect("the sample reads");
    let start = Instant::now();
    let table = StackPairTable::new(4).expect("r = 4");
    println!("table set up in {:.2} s", start.elapsed().as_secs_f64());
    let never = AtomicBool::new(false);
    if fill {
        let start = Instant::now();
        table.fill_all(&never).expect("never cancelled");
        println!(
            "table filled in {:.2} s: {} entries, {} rows coloured, {} relabelled",
            start.elapsed().as_secs_f64(),
            table.filled(),
            table.rows_coloured(),
            table.rows_relabelled()
        );
    }
    if let Some(("group", rest)) = words.split_first().map(|(a, b)| (a.as_str(), b)) {
        for pair in rest.chunks(2) {
            let count = pair.get(1).and_then(|w| w.parse::<usize>().ok()).expect("group INDEX COUNT [INDEX COUNT ...]");
            let first = match pair[0].as_str() {
                "alike" => classes.iter().position(|c| c.pattern == alike).expect("the alike pattern is listed"),
                index => index.parse::<usize>().expect("group INDEX COUNT [INDEX COUNT ...]"),
            };
            // The first COUNT gangsters (in list order) whose first three stacks are INDEX's.
            let prefix =
                |p: &Pattern| -> Vec<[u8; 3]> { p.digit_vectors().iter().map(|v| [v[0], v[1], v[2]]).collect() };
            let shared = prefix(&classes[first].pattern);
            let (indexes, members): (Vec<usize>, Vec<Pattern>) = classes
                .iter()
                .enumerate()
                .filter(|(_, c)| prefix(&c.pattern) == shared)
                .take(count)
                .map(|(i, c)| (i, c.pattern.clone()))
                .unzip();
            let count = members.len();
            let (start, cpu) = (Instant::now(), cpu_seconds());
            let counts = table.completions_of_many(&members, &never).expect("never cancelled");
            let (seconds, cpu) = (start.elapsed().as_secs_f64(), cpu_seconds() - cpu);
            for (i, g) in counts.iter().enumerate() {
                let known = published.iter().find(|&&(_, c)| c == g / 576 && g.is_multiple_of(576)).map(|(i, _)| *i);
                println!(
                    "gangster {}: G / 576 = {}{}",
                    indexes[i],
                    g / 576,
                    known.map(|i| format!(" (Silver's {i})")).unwrap_or_default()
                );
            }
            println!(
                "group of gangster {first}: {count} gangsters in {seconds:.2} s wall, {cpu:.2} s CPU, {:.2} CPU s a gangster ({} rows coloured so far)",
                cpu / count as f64,
                table.rows_coloured()
            );
        }
        return;
    }
    for (name, pattern) in patterns {
        let start = Instant::now();
        let g = table.completions(&pattern, &never).expect("never cancelled");
        let silver = g / 576;
        let known = published.iter().find(|&&(_, count)| count == silver && g.is_multiple_of(576)).map(|(i, _)| *i);
        println!(
            "gangster {name}: G / 576 = {silver}{}, {:.2} s, {} entries ({} rows coloured, {} relabelled)",
            match known {
                Some(i) => format!(" (Silver's {i})"),
                None => String::new(),
            },
            start.elapsed().as_secs_f64(),
            table.filled(),
            table.rows_coloured(),
            table.rows_relabelled()
        );
    }
}

/// The CPU time of this (single-threaded) process so far, from
/// /proc/self/schedstat (nanoseconds on a CPU); 0 where it cannot be read.
fn cpu_seconds() -> f64 {
    std::fs::read_to_string("/proc/self/schedstat")
        .ok()
        .and_then(|text| text.split_whitespace().next().and_then(|ns| ns.parse::<f64>().ok()))
        .map_or(0.0, |ns| ns / 1e9)
}
