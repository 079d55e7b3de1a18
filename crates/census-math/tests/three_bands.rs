//! 4 x 3 boxes (the transpose of 3 x 4): the classes of top-band column
//! sets, Silver and Pettersen's gangsters.

use std::sync::atomic::AtomicBool;

use census_math::three_bands::{
    Pattern, SharedTable, band_count, column_set_tuples, gangsters, jobs, parse_key, parse_published_counts,
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
/// the source and the lines) reads back: 29 gangsters, the largest and the
/// smallest published counts among them, the `*` short forms multiplied
/// back by 64, every count above 2^64 (so a job's count needs u128).
#[test]
fn the_published_sample_reads_back() {
    let sample = parse_published_counts(include_str!("data/silver_4x3_gangster_counts.txt")).unwrap();
    assert_eq!(sample.len(), 29);
    assert_eq!(sample.iter().map(|&(_, count)| count).max(), Some(71_040_502_078_290_395_136));
    assert_eq!(sample.iter().map(|&(_, count)| count).min(), Some(60_653_215_712_706_427_392));
    assert!(sample.contains(&(86_407, 959_688_263_500_148_584 * 64)));
    assert!(sample.iter().all(|&(_, count)| count > u128::from(u64::MAX)));
    assert!(parse_published_counts("1 *x 0 1.0").unwrap_err().contains("line 1"));
    assert!(parse_published_counts("1 2 3").is_err());
}

/// Each digit's columns in the first three stacks, as a sorted list: equal
/// for the classes that are counted together as one group.
fn first_three_stacks(pattern: &Pattern) -> Vec<[u8; 3]> {
    let mut vectors: Vec<[u8; 3]> = pattern.digit_vectors().iter().map(|v| [v[0], v[1], v[2]]).collect();
    vectors.sort_unstable();
    vectors
}

/// 21 gangsters counted as a worker counts them, from an empty table, and
/// compared exactly with Silver's published counts (the sample file,
/// matched by value: his numbering is his own). Each count is b x G, and
/// G / 4!^2 (Silver fixes the order of the rows of bands 2 and 3) must be a
/// published count. Three groups of classes that share their first three
/// stacks, each counted together on one table that two threads share, each
/// thread half of every group (`SharedTable::count_part`):
///
/// - the nine whose first three stacks split the digits alike (the fourth
///   stack is one of the 9 nodes): Silver's gangsters 0 to 8, the largest
///   published count (his 0, the alike pattern) among them;
/// - the nine around the class of the smallest published count (his
///   144544; the sample's header says how it was found);
/// - three more of his last GangSet (144535, 144538, 144540).
///
/// About two CPU-minutes in release, on two threads sharing one table (BENCHMARKS.md): the
/// table rows these groups read are filled as they are first read.
#[test]
fn twenty_one_gangsters_have_silvers_published_counts() {
    let alike = parse_key("4x3:0000.0000.0000.0000.1111.1111.1111.1111.2222.2222.2222.2222").unwrap();
    let smallest = parse_key("4x3:0000.0000.0111.0222.1012.1111.1120.1201.2021.2102.2210.2222").unwrap();
    let third = parse_key("4x3:0000.0011.0102.0221.1012.1101.1110.1222.2020.2122.2201.2210").unwrap();
    let classes = gangsters(4).unwrap();
    let group_of = |anchor: &Pattern| -> Vec<Pattern> {
        let stacks = first_three_stacks(anchor);
        classes.iter().map(|class| class.pattern.clone()).filter(|p| first_three_stacks(p) == stacks).collect()
    };
    let groups = [group_of(&alike), group_of(&smallest), group_of(&third)];
    assert_eq!(groups.iter().map(Vec::len).collect::<Vec<_>>(), [9, 9, 3]);

    let sample = parse_published_counts(include_str!("data/silver_4x3_gangster_counts.txt")).unwrap();
    let published = |count: u128| sample.iter().find(|&&(_, c)| c == count).map(|&(index, _)| index);
    // Two threads share one table (filling its rows together) and each
    // counts half of every group: the halves add up to the counts.
    let table = SharedTable::new(4).unwrap();
    let never = AtomicBool::new(false);
    let halves: Vec<Vec<Vec<u128>>> = std::thread::scope(|scope| {
        let halves: Vec<_> = (0..2)
            .map(|part| {
                let (table, groups, never) = (&table, &groups, &never);
                scope.spawn(move || {
                    groups.iter().map(|group| table.count_part(group, part, 2, never).unwrap()).collect::<Vec<_>>()
                })
            })
            .collect();
        halves.into_iter().map(|half| half.join().unwrap()).collect()
    });
    let counts = halves[0].iter().zip(&halves[1]).map(|(a, b)| a.iter().zip(b).map(|(a, b)| a + b).collect::<Vec<_>>());
    let mut silver_counts = std::collections::HashMap::new();
    for (group, counts) in groups.iter().zip(counts) {
        for (pattern, count) in group.iter().zip(counts) {
            let b = band_count(pattern);
            assert!(count.is_multiple_of(b * 576), "{}", pattern.key());
            let silver = count / b / 576;
            let index = published(silver);
            assert!(index.is_some(), "{}: G / 576 = {silver} is not a published count of the sample", pattern.key());
            silver_counts.insert(pattern.clone(), (index.unwrap(), silver));
        }
    }
    assert_eq!(silver_counts.len(), 21);
    // Distinct classes, distinct published gangsters.
    let indexes: std::collections::HashSet<u32> = silver_counts.values().map(|&(index, _)| index).collect();
    assert_eq!(indexes.len(), 21);
    assert!((0..=8).all(|index| indexes.contains(&index)));
    assert_eq!(silver_counts[&alike], (0, 71_040_502_078_290_395_136));
    assert_eq!(silver_counts[&smallest], (144_544, 60_653_215_712_706_427_392));
    let all: Vec<u128> = sample.iter().map(|&(_, count)| count).collect();
    assert_eq!(all.iter().max(), Some(&71_040_502_078_290_395_136));
    assert_eq!(all.iter().min(), Some(&60_653_215_712_706_427_392));
}
