//! The components of the stages without same column sets: orbits of the
//! stack, column and row moves, then the stage's other moves from the first
//! band of each orbit.

use super::UnionFind;
use super::moves::{Moves, for_each_column_swap, for_each_rectangle, for_each_row_subset_swap};
use crate::catalogue::{Indexed, normalize_cells};

/// The orders of three things.
const ORDERS: [[usize; 3]; 6] = [[0, 1, 2], [0, 2, 1], [1, 0, 2], [1, 2, 0], [2, 0, 1], [2, 1, 0]];

/// Each catalogue band's component under the stage's moves, as a number
/// below the catalogue's length.
///
/// Stacks, columns and (if the stage has them) rows first, as orbits. Then
/// rectangles, row subsets and column swaps from the first band of each
/// orbit only: where such a move applies to a band g(X) of X's orbit, the
/// same kind of move applies to X (moved back by g, the cells it exchanges
/// are cells of the same kind), and the two results are again one move of
/// the group apart, so they join the same two orbits.
pub(super) fn components(catalogue: &Indexed, moves: &Moves) -> Vec<u32> {
    debug_assert!(moves.stacks && moves.columns && !moves.same_column_sets);
    let (orbit_of, firsts) = orbits(catalogue, moves.rows);
    if !(moves.rectangles || moves.row_subsets || moves.column_swaps) {
        return orbit_of;
    }
    let mut joined = UnionFind::new(firsts.len());
    for (orbit, &first) in firsts.iter().enumerate() {
        let cells = catalogue.bands[first as usize].cells();
        let mut join = |moved: &[u8; 27]| {
            let other = orbit_of[catalogue.index_of(&normalize_cells(moved))];
            joined.union(orbit as u32, other);
        };
        if moves.rectangles {
            for_each_rectangle(cells, &mut join);
        }
        if moves.row_subsets {
            for_each_row_subset_swap(cells, &mut join);
        }
        if moves.column_swaps {
            for_each_column_swap(cells, &mut join);
        }
    }
    orbit_of.iter().map(|&orbit| firsts[joined.find(orbit) as usize]).collect()
}

/// The orbits of the catalogue under stack, column and (with `rows`) row
/// moves: each band's orbit number, and each orbit's first band.
///
/// An orbit is found whole from its first band X: every move of the group
/// is, after normalization, one of the 108 choices of which stack becomes
/// B1, in which column order, with the rows in which order (18 without row
/// moves); normalization undoes the rest (the order of the other two stacks
/// and of their columns).
fn orbits(catalogue: &Indexed, rows: bool) -> (Vec<u32>, Vec<u32>) {
    let row_orders = if rows { &ORDERS[..] } else { &ORDERS[..1] };
    let mut orbit_of = vec![u32::MAX; catalogue.bands.len()];
    let mut firsts = Vec::new();
    for (i, band) in catalogue.bands.iter().enumerate() {
        if orbit_of[i] != u32::MAX {
            continue;
        }
        let orbit = firsts.len() as u32;
        firsts.push(i as u32);
        let cells = band.cells();
        for rows_order in row_orders {
            let columns: [[u8; 3]; 9] = std::array::from_fn(|c| rows_order.map(|r| cells[9 * r + c]));
            for stack in 0..3 {
                for columns_order in ORDERS {
                    orbit_of[normal_index(catalogue, &columns, stack, columns_order)] = orbit;
                }
            }
        }
    }
    (orbit_of, firsts)
}

/// The position in the catalogue of the normal form of the band whose B1 is
/// stack `stack` of `columns` (the band's columns, top to bottom) with its
/// columns in `columns_order`.
fn normal_index(catalogue: &Indexed, columns: &[[u8; 3]; 9], stack: usize, columns_order: [usize; 3]) -> usize {
    // The relabelling that makes the new B1 read 123/456/789 (16 entries,
    // so that a digit masked to 4 bits needs no bounds check).
    let mut map = [0u8; 16];
    for (c, &k) in columns_order.iter().enumerate() {
        for (r, &digit) in columns[3 * stack + k].iter().enumerate() {
            map[usize::from(digit & 15)] = (3 * r + c + 1) as u8;
        }
    }
    // The other two stacks, relabelled, each with its columns sorted by
    // their top digits, the block with the least top first.
    let mut blocks = [[[0u8; 3]; 3]; 2];
    for (block, other) in blocks.iter_mut().zip([(stack + 1) % 3, (stack + 2) % 3]) {
        for (k, image) in block.iter_mut().enumerate() {
            *image = columns[3 * other + k].map(|digit| map[usize::from(digit & 15)]);
        }
        for (a, b) in [(0, 1), (1, 2), (0, 1)] {
            if block[b][0] < block[a][0] {
                block.swap(a, b);
            }
        }
    }
    if blocks[1][0][0] < blocks[0][0][0] {
        blocks.swap(0, 1);
    }
    let row = |r: usize| -> [u8; 6] { std::array::from_fn(|c| blocks[c / 3][c % 3][r]) };
    catalogue.index_of_lower_rows(row(0), row(1), row(2))
}
