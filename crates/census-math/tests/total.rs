//! The full total from three stages: S = 3,546,146,300,288 and
//! N0 = 6,670,903,752,021,072,936,960 (docs/mathematics.md).

use census_math::total::{PUBLISHED_S, factorize, n0_from_s, s_from_classes, thousands};
use census_math::{ClassTable, CounterKind, Stage};

fn stage_s(stage: Stage) -> num_bigint::BigUint {
    let counter = CounterKind::ColumnSets.build();
    let table = ClassTable::build(stage);
    s_from_classes(
        table.classes().iter().map(|class| (class.size, counter.count_seeds(&class.representative).iter().sum())),
    )
}

fn assert_published(stage: Stage) {
    let s = stage_s(stage);
    assert_eq!(s, PUBLISHED_S.into(), "{stage}");
    assert_eq!(s.to_string(), "3546146300288");
    assert_eq!(thousands(&n0_from_s(&s)), "6,670,903,752,021,072,936,960");
    assert_eq!(n0_from_s(&s).to_string(), "6670903752021072936960");
    assert_eq!(factorize(&s).to_string(), "2^7 x 27,704,267,971");
}

#[test]
fn russell_stage_gives_the_published_total() {
    assert_published(Stage::Russell);
}

#[test]
fn felgenhauer_jarvis_stage_gives_the_published_total() {
    assert_published(Stage::FelgenhauerJarvis);
}

#[test]
fn the_whole_catalogue_gives_the_published_total() {
    assert_published(Stage::Catalogue);
}
