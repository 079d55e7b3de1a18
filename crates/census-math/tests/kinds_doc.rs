//! The kinds table of the docs (`docs/kinds.md`) is the registry's
//! (`census::kinds_table`, what `census classes --kinds` prints): a kind
//! added, or its help changed, changes the docs' copy too, or this fails.

use census_math::census::kinds_table;

const DOC: &str = include_str!("../../../docs/kinds.md");

#[test]
fn the_docs_kinds_table_is_the_registrys() {
    let table = kinds_table();
    assert!(
        DOC.contains(&table),
        "docs/kinds.md's table is not the registry's: put the output of `census classes --kinds` \
         in its place:\n{table}"
    );
}
