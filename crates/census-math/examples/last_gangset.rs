//! Finds Silver's last GangSet among our 4 x 3 classes, counts it, and
//! matches it with his published counts by value:
//! `cargo run --release -p census-math --example last_gangset -- [gridCount_8.txt] [--list]`
//!
//! Silver's `2022 Data/gridCount_8.txt` (github.com/GizmoBill/Sudoku4x3)
//! holds the 53 gangsters (his 144525 to 144577) whose second box is his
//! last node. Here they are the classes in which all six pairs of stacks meet
//! alike, as the 3 x 3 matrix 1 1 2 / 1 2 1 / 2 1 1 (a stack's columns
//! against the other's, digits in common, up to the order of rows and
//! columns). The example lists how many classes have all six pairs alike
//! for each matrix, then (unless `--list`) counts those 53 classes, group by
//! group on two threads (`SharedTable::count_many`), and prints each one's
//! G / 576 next to the published line it equals. With no file it compares
//! with the sample in tests/data, which holds 12 of the 53. Exits 1 if a
//! count is not published. Both threads share one table (600 MB at most).
use census_math::three_bands::{Pattern, SharedTable, band_count, gangsters, parse_published_counts};
use std::collections::BTreeMap;
use std::sync::atomic::AtomicBool;

type Meeting = [u8; 9];

/// How two stacks' columns meet, up to the order of rows and columns and
/// to which stack is first.
fn meeting(vectors: &[[u8; 4]], s: usize, t: usize) -> Meeting {
    const ORDERS: [[usize; 3]; 6] = [[0, 1, 2], [0, 2, 1], [1, 0, 2], [1, 2, 0], [2, 0, 1], [2, 1, 0]];
    let mut matrix = [[0u8; 3]; 3];
    for v in vectors {
        matrix[usize::from(v[s])][usize::from(v[t])] += 1;
    }
    let mut least = [u8::MAX; 9];
    for transposed in [false, true] {
        for rows in ORDERS {
            for columns in ORDERS {
                let mut flat = [0u8; 9];
                for (i, &row) in rows.iter().enumerate() {
                    for (j, &column) in columns.iter().enumerate() {
                        flat[3 * i + j] = if transposed { matrix[column][row] } else { matrix[row][column] };
                    }
                }
                least = least.min(flat);
            }
        }
    }
    least
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let list_only = args.iter().any(|a| a == "--list");
    let text = match args.iter().find(|a| !a.starts_with("--")) {
        Some(path) => std::fs::read_to_string(path).unwrap_or_else(|e| {
            eprintln!("{path}: {e}");
            std::process::exit(2)
        }),
        None => include_str!("../tests/data/silver_4x3_gangster_counts.txt").to_string(),
    };
    let published = parse_published_counts(&text).unwrap_or_else(|e| {
        eprintln!("{e}");
        std::process::exit(2)
    });

    let classes = gangsters(4).expect("r = 4");
    let mut all_alike: BTreeMap<Meeting, Vec<Pattern>> = BTreeMap::new();
    for class in &classes {
        let vectors = class.pattern.digit_vectors();
        let meetings: Vec<Meeting> =
            [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)].iter().map(|&(s, t)| meeting(&vectors, s, t)).collect();
        if meetings.iter().all(|m| *m == meetings[0]) {
            all_alike.entry(meetings[0]).or_default().push(class.pattern.clone());
        }
    }
    for (m, members) in &all_alike {
        println!("all six pairs meet as {m:?}: {} classes", members.len());
    }
    let last = &all_alike[&[1, 1, 2, 1, 2, 1, 2, 1, 1]];
    if list_only {
        return;
    }

    // Groups of classes that share their first three stacks, split over two threads.
    let mut groups: BTreeMap<Vec<[u8; 3]>, Vec<Pattern>> = BTreeMap::new();
    for pattern in last {
        let mut stacks: Vec<[u8; 3]> = pattern.digit_vectors().iter().map(|v| [v[0], v[1], v[2]]).collect();
        stacks.sort_unstable();
        groups.entry(stacks).or_default().push(pattern.clone());
    }
    let groups: Vec<Vec<Pattern>> = groups.into_values().collect();
    let table = SharedTable::new(4).expect("r = 4");
    let never = AtomicBool::new(false);
    let unmatched = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for half in [0, 1] {
            let (groups, table, never, published, unmatched) = (&groups, &table, &never, &published, &unmatched);
            scope.spawn(move || {
                for group in groups.iter().skip(half).step_by(2) {
                    let started = std::time::Instant::now();
                    let counts = table.count_many(group, never).expect("never cancelled");
                    let seconds = started.elapsed().as_secs_f64();
                    for (pattern, count) in group.iter().zip(counts) {
                        let silver = count / band_count(pattern) / 576;
                        let found = published.iter().find(|&&(_, c)| c == silver);
                        if found.is_none() {
                            unmatched.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                        let found = found.map_or("not published".to_string(), |(i, _)| format!("Silver's {i}"));
                        println!(
                            "4x3:{} G/576 = {silver}: {found} (group of {}, {seconds:.0} s)",
                            pattern.key(),
                            group.len()
                        );
                    }
                }
            });
        }
    });
    let unmatched = unmatched.into_inner();
    println!("{} of {} counted classes are published counts", last.len() - unmatched, last.len());
    if unmatched > 0 {
        std::process::exit(1);
    }
}
