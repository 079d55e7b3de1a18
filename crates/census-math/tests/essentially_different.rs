//! Essentially different grids: the group, its classes, the fixed counts and
//! the Burnside total (Russell and Jarvis, "Mathematics of Sudoku II", 2006).

use census_math::essentially_different::{GROUP_ORDER, Group};

#[test]
fn the_group_has_275_conjugacy_classes_that_add_up_to_its_order() {
    let classes = Group::new().conjugacy_classes();
    assert_eq!(classes.classes().len(), 275);
    assert_eq!(
        classes.classes().iter().map(|c| c.size).sum::<u64>(),
        GROUP_ORDER as u64
    );
    assert_eq!(GROUP_ORDER, 6usize.pow(8) * 2);
    assert_eq!(classes.classes()[0].size, 1);
}
