//! The catalogue and the class stages reproduce every published number
//! (docs/mathematics.md, "Classes" and "The total").

use census_math::catalogue::{self, CATALOGUE_BANDS, STANDARD_BANDS, normalize};
use census_math::{Band, ClassTable, Stage};
use std::collections::HashMap;

#[test]
fn there_are_2_612_736_standard_bands_and_each_catalogue_band_stands_for_72() {
    let standard = catalogue::standard_bands();
    assert_eq!(standard.len(), STANDARD_BANDS);
    assert_eq!(STANDARD_BANDS, 56 * 6usize.pow(6));
    let mut preimages: HashMap<Band, usize> = HashMap::new();
    for band in &standard {
        assert!(band.is_standard());
        *preimages.entry(normalize(band)).or_default() += 1;
    }
    assert_eq!(preimages.len(), CATALOGUE_BANDS);
    assert!(preimages.values().all(|&n| n == 72));
}

#[test]
fn the_catalogue_is_sorted_normal_and_fixed_by_normalize() {
    let catalogue = catalogue::catalogue();
    assert_eq!(catalogue.len(), 36_288);
    assert!(catalogue.is_sorted());
    for band in &catalogue {
        assert!(catalogue::is_normal_form(band));
        assert_eq!(normalize(band), *band);
    }
}

#[test]
fn every_stage_has_its_published_number_of_classes() {
    for stage in Stage::ALL {
        let table = ClassTable::build(stage);
        let classes = table.classes();
        assert_eq!(classes.len(), stage.published_classes(), "{stage}");
        assert_eq!(classes.iter().map(|c| c.size).sum::<u64>(), 36_288, "{stage}");
        for (i, class) in classes.iter().enumerate() {
            assert_eq!(class.id as usize, i);
            assert_eq!(table.class_of(&class.representative), class.id);
            let least = table.members(class.id).next().unwrap();
            assert_eq!(*least, class.representative, "{stage}: the representative is the least member");
        }
        assert!(
            classes.windows(2).all(|w| w[0].representative < w[1].representative),
            "{stage}: ids follow representatives"
        );
    }
}

#[test]
fn the_russell_and_felgenhauer_jarvis_size_lists_are_stable() {
    let sizes = |stage| ClassTable::build(stage).classes().iter().map(|c| c.size).collect::<Vec<_>>();
    assert_eq!(
        sizes(Stage::Russell),
        [
            4, 108, 72, 216, 432, 2592, 576, 516, 216, 216, 1296, 1512, 648, 756, 2484, 24, 12, 2052, 684, 756, 20,
            3240, 1188, 2592, 2808, 756, 1512, 324, 864, 864, 648, 1944, 432, 144, 432, 864, 324, 324, 252, 288, 288,
            360, 540, 108
        ]
    );
    assert_eq!(
        sizes(Stage::FelgenhauerJarvis),
        [
            4, 108, 72, 216, 216, 2592, 72, 510, 216, 216, 216, 1296, 1404, 540, 702, 270, 2214, 24, 108, 6, 504, 6,
            1350, 666, 756, 702, 18, 20, 2268, 1134, 2592, 2052, 486, 972, 270, 864, 270, 864, 540, 972, 1620, 432,
            144, 432, 864, 324, 540, 270, 270, 234, 540, 288, 288, 6, 216, 54, 18, 108, 108, 54, 378, 108, 108, 54,
            108, 36, 54, 108, 108, 54, 54
        ]
    );
}

#[test]
fn the_published_checkpoint_band_has_a_russell_class_of_2_484() {
    let table = ClassTable::build(Stage::Russell);
    let band: Band = "123478569456139278789256134".parse().unwrap();
    let class = &table.classes()[table.class_of(&band) as usize];
    assert_eq!(class.size, 2_484);
    assert_eq!(class.size * 72, 178_848);
}

#[test]
fn any_valid_band_finds_its_class_whatever_its_labels_and_order() {
    let table = ClassTable::build(Stage::Rows);
    let band: Band = "123478569456139278789256134".parse().unwrap();
    let expected = table.class_of(&band);
    // Rows reversed, stacks rotated, digits relabelled d -> 10 - d.
    let cells = band.cells();
    let mut moved = [0u8; 27];
    for r in 0..3 {
        for c in 0..9 {
            moved[(2 - r) * 9 + (c + 3) % 9] = 10 - cells[r * 9 + c];
        }
    }
    let moved = Band::from_cells(moved).unwrap();
    assert!(!moved.is_standard());
    assert_eq!(table.class_of(&moved), expected);
}
