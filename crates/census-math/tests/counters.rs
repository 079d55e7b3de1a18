//! The three counters agree job by job and reproduce the published counts
//! (docs/mathematics.md, "Jobs" and "The total").

use census_math::counter::{Counter, count_seeds_of};
use census_math::{Band, ClassTable, CounterKind, MAX_SEED_COUNT, SEEDS, Seed, Stage};
use proptest::prelude::*;
use std::sync::LazyLock;

static COLUMN_SETS: LazyLock<Box<dyn Counter>> = LazyLock::new(|| CounterKind::ColumnSets.build());
static RUSSELL: LazyLock<ClassTable> = LazyLock::new(|| ClassTable::build(Stage::Russell));

fn band(text: &str) -> Band {
    text.parse().unwrap()
}

fn seed_with_b4(b4: [u8; 3]) -> Seed {
    *SEEDS.iter().find(|s| s.b4 == b4).unwrap()
}

#[test]
fn per_seed_checkpoint_with_column_sets_and_banded() {
    let band = band("123456789456789123789123456");
    let special = seed_with_b4([2, 5, 8]).index();
    for kind in [CounterKind::ColumnSets, CounterKind::Banded] {
        let counts = kind.build().count_seeds(&band);
        for (i, &count) in counts.iter().enumerate() {
            let expected = if i == special { 6_696_000 } else { 11_297_664 };
            assert_eq!(count, expected, "{kind}, seed {}", SEEDS[i]);
        }
    }
}

#[test]
fn per_seed_checkpoint_with_enumerate() {
    let band = band("123456789456789123789123456");
    let counter = CounterKind::Enumerate.build();
    assert_eq!(counter.count(&band, &seed_with_b4([2, 5, 8])), 6_696_000);
    assert_eq!(counter.count(&band, &seed_with_b4([2, 3, 5])), 11_297_664);
}

#[test]
fn the_checkpoint_band_has_72_x_97_961_464_completions() {
    let band = band("123478569456139278789256134");
    for kind in [CounterKind::ColumnSets, CounterKind::Banded] {
        let sum: u64 = kind.build().count_seeds(&band).iter().sum();
        assert_eq!(sum, 97_961_464, "{kind}");
        assert_eq!(72 * sum, 7_053_225_408);
    }
}

#[test]
fn column_sets_equals_banded_on_every_russell_job() {
    let banded = CounterKind::Banded.build();
    for class in RUSSELL.classes() {
        assert_eq!(
            COLUMN_SETS.count_seeds(&class.representative),
            banded.count_seeds(&class.representative),
            "class {} ({})",
            class.id,
            class.representative
        );
    }
}

#[test]
fn column_sets_equals_enumerate_on_a_sample_of_jobs() {
    let enumerate = CounterKind::Enumerate.build();
    // A small class, a large one, and the checkpoint band's, each with a different seed.
    for (class_id, seed) in [(16usize, 3usize), (21, 7), (14, 9)] {
        let rep = &RUSSELL.classes()[class_id].representative;
        assert_eq!(
            enumerate.count(rep, &SEEDS[seed]),
            COLUMN_SETS.count(rep, &SEEDS[seed]),
            "class {class_id}, seed {}",
            SEEDS[seed]
        );
    }
}

#[test]
fn max_seed_count_is_exact() {
    let table = ClassTable::build(Stage::Catalogue);
    let max = table.catalogue().iter().flat_map(|band| COLUMN_SETS.count_seeds(band)).max().unwrap();
    assert_eq!(max, MAX_SEED_COUNT);
}

#[test]
fn counters_reject_a_band_that_is_not_standard() {
    let result = std::panic::catch_unwind(|| COLUMN_SETS.count(&band("987654321654321987321987654"), &SEEDS[0]));
    assert!(result.is_err());
}

/// Moves that keep the number of completions: stacks, columns within blocks,
/// rows, and any relabelling of digits.
fn shuffled(band: &Band, stacks: [usize; 3], columns: [[usize; 3]; 3], rows: [usize; 3], digits: [u8; 9]) -> Band {
    let cells = band.cells();
    let mut moved = [0u8; 27];
    for r in 0..3 {
        for s in 0..3 {
            for c in 0..3 {
                let from = rows[r] * 9 + stacks[s] * 3 + columns[s][c];
                moved[r * 9 + s * 3 + c] = digits[cells[from] as usize - 1];
            }
        }
    }
    Band::from_cells(moved).unwrap()
}

fn permutation3() -> impl Strategy<Value = [usize; 3]> {
    Just([0, 1, 2]).prop_shuffle().prop_map(|v| v)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// A random member of a random Russell class, moved and relabelled, has
    /// the representative's number of completions.
    #[test]
    fn class_members_have_the_representatives_completions(
        class in 0u32..44,
        pick in 0usize..10_000,
        stacks in permutation3(),
        columns in [permutation3(), permutation3(), permutation3()],
        rows in permutation3(),
        digits in Just([1u8, 2, 3, 4, 5, 6, 7, 8, 9]).prop_shuffle(),
    ) {
        let members: Vec<&Band> = RUSSELL.members(class).collect();
        let member = members[pick % members.len()];
        let moved = shuffled(member, stacks, columns, rows, digits);
        let expected: u64 = COLUMN_SETS.count_seeds(&RUSSELL.classes()[class as usize].representative).iter().sum();
        let counted: u64 = count_seeds_of(COLUMN_SETS.as_ref(), &moved).iter().sum();
        prop_assert_eq!(counted, expected);
    }
}

#[test]
fn non_representative_members_counted_by_banded_match() {
    // The counter and the moves checked together with a second counter.
    let banded = CounterKind::Banded.build();
    for class in [2u32, 20, 33] {
        let rep = &RUSSELL.classes()[class as usize].representative;
        let member = RUSSELL.members(class).last().unwrap();
        assert_ne!(member, rep);
        let seeds = |b: &Band| banded.count_seeds(b).iter().sum::<u64>();
        assert_eq!(seeds(member), seeds(rep), "class {class}");
    }
}
