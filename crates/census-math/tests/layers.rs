//! The 2 x c layer recurrence (`shapes::layers`) against published numbers.
//!
//! Layer sizes (orbits of states) and emission counts for c = 2..5 and the
//! 2 x 6 first emission count are those of the public repository
//! linche89/sudoku-enumeration, `docs/reports/og2/c6-standalone-research-prompt-20260905.md`
//! (2026); the grid totals are `shapes::PUBLISHED_GRIDS` (Russell, Pettersen).
//! Each class's F is also checked against the existing search counter
//! (`shapes::band_count`), which shares no code with the recurrence.

use std::sync::atomic::AtomicBool;

use census_math::shapes::{self, PUBLISHED_GRIDS, layers};

/// Runs every layer of 2 x c, returning (states per layer, emissions into
/// each layer after the first) and the last layer.
fn run(c: usize) -> (Vec<usize>, Vec<u64>, layers::Layer) {
    let (mut sizes, mut emissions) = (Vec::new(), Vec::new());
    let last = layers::layers(c, c, &AtomicBool::new(false), &mut |layer| {
        sizes.push(layer.states().len());
        if layer.rows() > 1 {
            emissions.push(layer.emissions());
        }
    })
    .unwrap();
    (sizes, emissions, last)
}

fn binomial(n: u128, k: u128) -> u128 {
    (0..k).fold(1, |acc, i| acc * (n - i) / (i + 1))
}

/// The layer sizes, emissions and total of one shape, and every class checked
/// against `shapes::classes` (same classes, m x ell = the class's tuples) and,
/// for the classes `check_band` picks, against the search counter's F.
fn check_shape(c: usize, sizes: &[usize], emissions: &[u64], check_band: impl Fn(usize) -> bool) {
    let (found_sizes, found_emissions, last) = run(c);
    assert_eq!(found_sizes, sizes, "2 x {c} layer sizes");
    assert_eq!(found_emissions, emissions, "2 x {c} emissions");
    let (classes, grids) = layers::finish(&last).unwrap();
    let published = PUBLISHED_GRIDS.iter().find(|(pc, _)| *pc == c).unwrap().1;
    assert_eq!(grids.to_string(), published, "2 x {c} grids");
    let weights: u128 = classes.iter().map(|q| u128::from(q.orbit) * q.labellings).sum();
    assert_eq!(weights, binomial(2 * c as u128, c as u128).pow(c as u32));

    let searched = shapes::classes(c).unwrap();
    assert_eq!(searched.len(), classes.len());
    for (index, class) in searched.iter().enumerate() {
        // Digit d's word: bit b set when d is in the second column of stack b.
        let words: Vec<u16> = (0..2 * c)
            .map(|d| (0..c).map(|b| u16::from((class.representative.sets()[b] >> d) & 1 == 0) << b).sum())
            .collect();
        let state = layers::class_state(c, &words).unwrap();
        let found = classes.iter().find(|q| q.masks == state).expect("every class is in the last layer");
        assert_eq!(u128::from(found.orbit) * found.labellings, class.size, "class {index} of 2 x {c}");
        if check_band(index) {
            assert_eq!(found.bands, shapes::band_count(&class.representative), "F of class {index} of 2 x {c}");
        }
    }
}

#[test]
fn two_by_two_to_two_by_four() {
    check_shape(2, &[1, 2], &[4], |_| true);
    check_shape(3, &[1, 5, 4], &[80, 29], |_| true);
    check_shape(4, &[1, 23, 54, 26], &[4752, 4630, 712], |_| true);
}

/// The F of one 2 x 5 class in eight by search is about 1.4 seconds of CPU in
/// all; `two_by_five_every_class_by_search` checks all 355.
#[test]
fn two_by_five() {
    check_shape(5, &[1, 107, 16_150, 17_120, 355], &[440_192, 2_324_325, 11_957_632, 462_403], |i| i % 8 == 0);
}

#[test]
#[ignore = "the search counter on all 355 classes: about a minute of CPU more than two_by_five"]
fn two_by_five_every_class_by_search() {
    check_shape(5, &[1, 107, 16_150, 17_120, 355], &[440_192, 2_324_325, 11_957_632, 462_403], |_| true);
}

/// 2 x 6: the 59,245,120 emissions of the first layer, counted without
/// canonicalising (the states of layers 2 and 3 take minutes: the `layers`
/// example, BENCHMARKS.md).
#[test]
fn two_by_six_first_emissions() {
    let first = layers::first_layer(6).unwrap();
    assert_eq!(first.states().len(), 1);
    assert_eq!(layers::emission_count(6, &first.states()[0].0, &AtomicBool::new(false)), Ok(59_245_120));
}

/// The two 2 x 6 classes whose F is published: their stabilizers and orbits.
#[test]
fn two_by_six_published_classes_stabilizers() {
    for (words, stabilizer, orbit) in [
        ([0, 5, 10, 19, 29, 30, 39, 43, 44, 48, 54, 57], 120, 384),
        ([0, 5, 10, 23, 27, 28, 35, 44, 47, 48, 54, 57], 8, 5760),
    ] {
        let state = layers::class_state(6, &words).unwrap();
        let (canon, found) = layers::canonical(6, &state);
        assert_eq!(canon, state);
        assert_eq!(found, stabilizer, "{words:?}");
        assert_eq!(layers::group_order(6) / found, orbit);
    }
}

#[test]
fn bad_shapes_and_layers_are_refused() {
    let cancel = AtomicBool::new(false);
    assert!(layers::layers(7, 2, &cancel, &mut |_| {}).is_err());
    assert!(layers::layers(4, 5, &cancel, &mut |_| {}).is_err());
    assert!(layers::layers(4, 0, &cancel, &mut |_| {}).is_err());
    let last = layers::layers(3, 3, &cancel, &mut |_| {}).unwrap();
    assert!(layers::next_layer(&last, &cancel).is_err());
    assert!(layers::finish(&layers::first_layer(3).unwrap()).is_err());
}
