//! 4 x 3 boxes (the transpose of 3 x 4): the classes of top-band column
//! sets, Silver and Pettersen's gangsters.

use std::sync::atomic::AtomicBool;

use census_math::three_bands::{
    Pattern, TablePool, band_count, column_set_tuples, gangsters, jobs, parse_key, parse_published_counts,
};

/// 144,578 gangsters (Pettersen and Silver 2006; github.com/GizmoBill/Sudoku4x3),
/// whose sizes add up to the 34,650^4 top-band column-set tuples (each of
/// the four stacks splits the 12 digits into three ordered 4-sets:
/// 12! / 4!^3 = 34,650 ways).
#[test]
fn there_are_144578_gangsters_and_their_sizes_add_up() {
    let classes = gangsters(4).unwrap();
    assert_eq!(classes.len(), 144_578);
    assert_eq!(column_set_tuples(4), 34_650u128.pow(4));
    assert_eq!(classes.iter().map(|g| g.size).sum::<u128>(), 34_650u128.pow(4));
    // Sorted and strictly ascending: no class is listed twice.
    assert!(classes.windows(2).all(|pair| pair[0].pattern < pair[1].pattern));
    // The most symmetric class: every stack splits the digits alike. Its
    // stabilizer is 4!^3 digit maps x 3! column orders x 4! stack orders.
    let alike = Pattern::parse(4, "0000.0000.0000.0000.1111.1111.1111.1111.2222.2222.2222.2222").unwrap();
    let class = classes.iter().find(|g| g.pattern == alike).expect("the plain pattern is least");
    assert_eq!(class.size, 479_001_600 * 31_104 / (13_824 * 6 * 24));
}

/// Job keys name their class and read back to it; the jobs are the
/// classes, each once (in an order of their own: `jobs` puts the classes
/// counted together next to each other).
#[test]
fn gangster_keys_read_back() {
    let jobs = jobs(4).unwrap();
    let classes = gangsters(4).unwrap();
    assert_eq!(jobs.len(), classes.len());
    let sizes: std::collections::HashMap<&Pattern, u128> = classes.iter().map(|c| (&c.pattern, c.size)).collect();
    let mut seen = std::collections::HashSet::new();
    for job in &jobs {
        let pattern = parse_key(&job.key).unwrap();
        assert_eq!(sizes.get(&pattern), Some(&job.weight), "{}", job.key);
        assert!(seen.insert(pattern), "{} twice", job.key);
    }
    assert_eq!(jobs[0].group, "4x3 gangster 0");
}

/// The sample of Silver's published counts (tests/data, its header names
/// the source and the lines) reads back: 22 gangsters, the largest and the
/// smallest published counts among them, the `*` short forms multiplied
/// back by 64, every count above 2^64 (so a job's count needs u128).
#[test]
fn the_published_sample_reads_back() {
    let sample = parse_published_counts(include_str!("data/silver_4x3_gangster_counts.txt")).unwrap();
    assert_eq!(sample.len(), 22);
    assert_eq!(sample.iter().map(|&(_, count)| count).max(), Some(71_040_502_078_290_395_136));
    assert_eq!(sample.iter().map(|&(_, count)| count).min(), Some(60_653_215_712_706_427_392));
    assert!(sample.contains(&(86_407, 959_688_263_500_148_584 * 64)));
    assert!(sample.iter().all(|&(_, count)| count > u128::from(u64::MAX)));
    assert!(parse_published_counts("1 *x 0 1.0").unwrap_err().contains("line 1"));
    assert!(parse_published_counts("1 2 3").is_err());
}

/// Silver's published gangsters 0 to 7 (the sample file), counted as a
/// worker counts them, from an empty table, and compared exactly. The
/// classes whose first three stacks split the digits alike are nine (the
/// fourth stack is one of the 9 nodes): Silver's least representatives of
/// them have boxes 0, 0, 0 and a node code, so they are his first nine
/// gangsters, and they share their first three stacks, so they are counted
/// as one group (`TablePool::count_many`). Each count is b x G; G / 4!^2
/// (Silver fixes the order of the rows of bands 2 and 3) must equal his
/// published count, matched by value as his numbering is his own: all
/// eight published ones (0 to 7) are met, the largest published count
/// (his gangster 0, the alike pattern) among them. The ninth is his
/// gangster 8, not in the sample. About four CPU-minutes in release
/// (BENCHMARKS.md): the table rows this group reads are filled as they are
/// first read.
#[test]
fn silvers_first_eight_gangsters_have_their_published_counts() {
    let classes = gangsters(4).unwrap();
    let group: Vec<Pattern> = classes
        .iter()
        .map(|class| class.pattern.clone())
        .filter(|pattern| pattern.digit_vectors().iter().all(|v| v[0] == v[1] && v[1] == v[2]))
        .collect();
    assert_eq!(group.len(), 9);
    let never = AtomicBool::new(false);
    let counts = TablePool::new(4).unwrap().count_many(&group, &never).unwrap();
    let silver_counts: Vec<u128> = group
        .iter()
        .zip(&counts)
        .map(|(pattern, &count)| {
            let b = band_count(pattern);
            assert!(count.is_multiple_of(b * 576), "{}", pattern.key());
            count / b / 576
        })
        .collect();
    let sample = parse_published_counts(include_str!("data/silver_4x3_gangster_counts.txt")).unwrap();
    let first_eight: Vec<(u32, u128)> = sample.iter().copied().filter(|&(index, _)| index < 8).collect();
    assert_eq!(first_eight.len(), 8);
    for (index, published) in first_eight {
        assert!(
            silver_counts.contains(&published),
            "Silver's gangster {index} ({published}) is not among {silver_counts:?}"
        );
    }
    let alike = parse_key("4x3:0000.0000.0000.0000.1111.1111.1111.1111.2222.2222.2222.2222").unwrap();
    let at = group.iter().position(|pattern| *pattern == alike).expect("the alike pattern is in the group");
    assert_eq!(silver_counts[at], 71_040_502_078_290_395_136);
    assert_eq!(Some(&silver_counts[at]), sample.iter().map(|(_, count)| count).max());
}
