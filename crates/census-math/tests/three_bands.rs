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

/// Job keys name their class and read back to it.
#[test]
fn gangster_keys_read_back() {
    let jobs = jobs(4).unwrap();
    let classes = gangsters(4).unwrap();
    assert_eq!(jobs.len(), classes.len());
    for (job, class) in jobs.iter().zip(&classes).step_by(997) {
        assert_eq!(parse_key(&job.key).unwrap(), class.pattern);
        assert_eq!(job.weight, class.size);
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

/// One 4 x 3 gangster counted through its job key, as a worker counts it
/// (b x G, G by table reads over stack pairs), and checked against its
/// published count: the class whose four stacks split the digits alike.
/// G / 4!^2 (Silver fixes the order of the rows of bands 2 and 3) is the
/// largest published count, his gangster 0. A few minutes of one core
/// (BENCHMARKS.md): the table starts empty, and filling it (b of the 12,051
/// classes this gangster meets) is most of the cost.
#[test]
fn the_alike_gangster_has_the_largest_published_count() {
    let key = "4x3:0000.0000.0000.0000.1111.1111.1111.1111.2222.2222.2222.2222";
    let alike = parse_key(key).unwrap();
    let never = AtomicBool::new(false);
    let count = TablePool::new(4).unwrap().count_job(key, &never).unwrap();
    let b = band_count(&alike);
    assert!(count.is_multiple_of(b * 576));
    let g = count / b;
    let sample = parse_published_counts(include_str!("data/silver_4x3_gangster_counts.txt")).unwrap();
    assert!(sample.contains(&(0, g / 576)), "G / 576 = {} is not gangster 0's published count", g / 576);
    assert_eq!(g / 576, 71_040_502_078_290_395_136);
}
