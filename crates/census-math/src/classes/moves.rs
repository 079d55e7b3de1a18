//! The moves of the class stages, as functions from a band's cells to the
//! moved cells (not yet normalized).

use crate::stage::Stage;

/// Which kinds of move a stage allows.
#[derive(Default)]
pub(super) struct Moves {
    pub(super) stacks: bool,
    pub(super) columns: bool,
    pub(super) rows: bool,
    pub(super) rectangles: bool,
    pub(super) row_subsets: bool,
    pub(super) column_swaps: bool,
    pub(super) same_column_sets: bool,
}

impl Moves {
    pub(super) fn of(stage: Stage) -> Moves {
        let base = Moves { stacks: true, columns: true, ..Moves::default() };
        match stage {
            Stage::Catalogue => Moves::default(),
            Stage::StacksColumns => base,
            Stage::Rows => Moves { rows: true, ..base },
            Stage::Rectangles => Moves { rows: true, rectangles: true, ..base },
            Stage::FelgenhauerJarvis => Moves { rows: true, row_subsets: true, column_swaps: true, ..base },
            Stage::Russell => Moves { rows: true, same_column_sets: true, ..base },
        }
    }
}

pub(super) fn swap_columns(cells: &mut [u8; 27], a: usize, b: usize) {
    for r in 0..3 {
        cells.swap(r * 9 + a, r * 9 + b);
    }
}

pub(super) fn for_each_rectangle(cells: &[u8; 27], mut visit: impl FnMut(&[u8; 27])) {
    for (r1, r2) in [(0, 1), (0, 2), (1, 2)] {
        for c1 in 0..9 {
            for c2 in (c1 / 3 + 1) * 3..9 {
                let (a, b) = (cells[r1 * 9 + c1], cells[r1 * 9 + c2]);
                if cells[r2 * 9 + c2] == a && cells[r2 * 9 + c1] == b {
                    let mut moved = *cells;
                    moved.swap(r1 * 9 + c1, r2 * 9 + c1);
                    moved.swap(r1 * 9 + c2, r2 * 9 + c2);
                    visit(&moved);
                }
            }
        }
    }
}

/// Row-subset exchanges. The sets of columns on which two rows hold the same
/// digits are exactly the unions of cycles of the permutation "column c goes
/// to the column where the first row holds the second row's digit at c"; an
/// exchange on a union of cycles is a composition of exchanges on single
/// cycles, so the single cycles generate the same classes.
pub(super) fn for_each_row_subset_swap(cells: &[u8; 27], mut visit: impl FnMut(&[u8; 27])) {
    for (r1, r2) in [(0, 1), (0, 2), (1, 2)] {
        let mut column_of_digit = [0usize; 10];
        for c in 0..9 {
            column_of_digit[cells[r1 * 9 + c] as usize] = c;
        }
        let mut seen = 0u16;
        for start in 0..9 {
            if seen & 1 << start != 0 {
                continue;
            }
            let mut moved = *cells;
            let mut c = start;
            while seen & 1 << c == 0 {
                seen |= 1 << c;
                moved.swap(r1 * 9 + c, r2 * 9 + c);
                c = column_of_digit[cells[r2 * 9 + c] as usize];
            }
            visit(&moved);
        }
    }
}

pub(super) fn for_each_column_swap(cells: &[u8; 27], mut visit: impl FnMut(&[u8; 27])) {
    let mask = |c: usize| (0..3).fold(0u16, |m, r| m | 1 << cells[r * 9 + c]);
    for c1 in 0..9 {
        for c2 in (c1 / 3 + 1) * 3..9 {
            if mask(c1) == mask(c2) {
                let mut moved = *cells;
                swap_columns(&mut moved, c1, c2);
                visit(&moved);
            }
        }
    }
}
