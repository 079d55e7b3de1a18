//! Essentially different grids: the group, its classes, the fixed counts and
//! the Burnside total (Russell and Jarvis, "Mathematics of Sudoku II", 2006).

use census_math::essentially_different::fixed::{FixedCounter, Split, centraliser_order};
use census_math::essentially_different::{
    ClassTerm, FixedJob, GROUP_ORDER, Group, JobKey, Rearrangement, count_job, fold, jobs, parse_key,
};
use census_math::total::{PUBLISHED_S, n0_from_s};
use num_bigint::BigUint;

/// (class size, A) for the 27 classes with A non-zero: Russell and Jarvis,
/// "Mathematics of Sudoku II" (2006), the table of conjugacy classes, as
/// quoted in the enjoysudoku.com forum thread "Unique Sudokus (Russell &
/// Jarvis)" (http://forum.enjoysudoku.com/unique-sudokus-russell-jarvis-t34383-15.html).
const PUBLISHED: [(u64, u128); 27] = [
    (1, 18_383_222_420_692_992),
    (96, 21_233_664),
    (16, 107_495_424),
    (192, 4_204_224),
    (64, 2_508_084),
    (5184, 323_928),
    (20736, 162),
    (20736, 288),
    (144, 14_837_760),
    (1728, 2_592),
    (288, 5_184),
    (864, 2_085_120),
    (3456, 1_296),
    (1728, 294_912),
    (2304, 648),
    (1152, 6_342_480),
    (1296, 30_258_432),
    (10368, 1_854),
    (93312, 288),
    (2916, 155_492_352),
    (69984, 13_056),
    (972, 449_445_888),
    (3888, 27_648),
    (31104, 6_480),
    (15552, 1_728),
    (15552, 3_456),
    (7776, 13_824),
];

/// The number of essentially different grids (Russell and Jarvis, 2006).
const ESSENTIALLY_DIFFERENT: u64 = 5_472_730_538;

#[test]
fn the_group_has_275_conjugacy_classes_that_add_up_to_its_order() {
    let classes = Group::new().conjugacy_classes();
    assert_eq!(classes.classes().len(), 275);
    assert_eq!(classes.classes().iter().map(|c| c.size).sum::<u64>(), GROUP_ORDER as u64);
    assert_eq!(GROUP_ORDER, 6usize.pow(8) * 2);
    assert_eq!(classes.classes()[0].size, 1);
}

#[test]
fn the_published_table_adds_up_to_the_published_answer() {
    let sum: u128 = PUBLISHED.iter().map(|&(size, fixed)| u128::from(size) * fixed).sum();
    assert_eq!(sum, 18_384_171_550_626_816);
    assert_eq!(sum, u128::from(ESSENTIALLY_DIFFERENT) * GROUP_ORDER as u128);
}

#[test]
fn the_identity_job_counts_n0_over_9_factorial_with_the_census_code() {
    let fixed = count_job("ed1 identity").unwrap();
    assert_eq!(fixed, 18_383_222_420_692_992);
    assert_eq!(BigUint::from(fixed) * 362_880u32, n0_from_s(&BigUint::from(PUBLISHED_S)));
}

#[test]
fn every_class_has_the_published_fixed_count_and_burnside_gives_5_472_730_538() {
    let jobs = jobs();
    let counts: Vec<u128> = jobs.iter().map(|job| count_job(&job.key).unwrap()).collect();
    let fold = fold(&jobs, &counts).unwrap();
    assert_eq!(fold.terms.len(), 275);
    let mut non_zero: Vec<(u64, u128)> =
        fold.terms.iter().filter(|term| term.fixed != 0).map(|term| (term.size, term.fixed)).collect();
    let mut published = PUBLISHED.to_vec();
    non_zero.sort_unstable();
    published.sort_unstable();
    assert_eq!(non_zero, published);
    assert_eq!(fold.terms[0], ClassTerm { class: 0, size: 1, fixed: 18_383_222_420_692_992 });
    assert_eq!(fold.sum, BigUint::from(18_384_171_550_626_816u128));
    assert_eq!(fold.sum, BigUint::from(GROUP_ORDER) * ESSENTIALLY_DIFFERENT);
    assert_eq!(fold.answer, BigUint::from(ESSENTIALLY_DIFFERENT));
}

#[test]
fn jobs_cover_every_class_once_with_its_size_and_valid_keys() {
    let classes = Group::new().conjugacy_classes();
    let jobs: Vec<FixedJob> = jobs();
    assert_eq!(jobs.iter().filter(|job| job.key == "ed1 identity").count(), 1);
    for class in classes.classes() {
        let of_class: Vec<&FixedJob> = jobs.iter().filter(|job| job.class == class.index).collect();
        assert!(!of_class.is_empty(), "class {}", class.index);
        let mut parts = Vec::new();
        for job in of_class {
            assert_eq!(job.weight, class.size);
            match parse_key(&job.key).unwrap() {
                JobKey::Identity => assert_eq!(class.representative, Rearrangement::IDENTITY),
                JobKey::Part(g, split) => {
                    assert_eq!(g, class.representative);
                    parts.push((split.part, split.parts, split.depth));
                }
            }
        }
        // Parts 0..n of one split, each once.
        parts.sort_unstable();
        assert!(parts.iter().enumerate().all(|(i, &(part, parts_n, depth))| part == i as u64
            && parts_n == parts.len() as u64
            && depth == parts[0].2));
    }
}

fn representative(name: &str) -> Rearrangement {
    let classes = Group::new().conjugacy_classes();
    classes.classes().iter().map(|c| c.representative).find(|g| g.to_string() == name).expect(name)
}

#[test]
fn the_parts_of_a_split_add_up_to_the_whole() {
    // 449,445,888 fixed grids: swap two rows in each band and two stacks.
    let counter = FixedCounter::new(representative("rows 021354687 columns 012678345"));
    let whole = counter.count(Split::WHOLE);
    assert_eq!(whole, 449_445_888);
    for depth in [3, 8] {
        let parts: u64 = (0..7).map(|part| counter.count(Split { depth, part, parts: 7 })).sum();
        assert_eq!(parts, whole, "depth {depth}");
    }
}

#[test]
fn first_touch_counts_each_relabelling_orbit_exactly_once() {
    // Without first touch every solution of X(g p) = σ(X(p)) is visited, so
    // F = z_λ x the reduced count, cycle type by cycle type.
    for name in [
        "rows 345678120 columns 345678120",
        "rows 345678012 columns 345678120",
        "rows 012345678 columns 345678012 transposed",
        "rows 012345786 columns 345678120",
    ] {
        let counter = FixedCounter::new(representative(name));
        let mut total = 0;
        for cycle_type in counter.admissible_cycle_types() {
            let reduced = counter.count_cycle_type(&cycle_type);
            let unreduced = counter.count_cycle_type_unreduced(&cycle_type);
            assert_eq!(unreduced, reduced * centraliser_order(&cycle_type), "{name} {cycle_type:?}");
            total += reduced;
        }
        assert!(total > 0, "{name}");
        assert_eq!(total, counter.count(Split::WHOLE));
    }
}
