//! The plain backtracking counter: the reference.
//!
//! Fills the free cells of rows 4-7 one by one with bit masks for rows,
//! columns and blocks, and counts the completions of each filling. Rows 4-6
//! are filled row by row. Row 7 is filled most constrained cell first: each
//! time, the cell with the fewest candidates left, so a cell left with none
//! ends the branch at once (in row-major order most of the search went into
//! the last cells of row 7, to find them blocked). The last two rows are not
//! searched cell by cell: once rows 4-7 are filled, each column's two missing
//! digits are known, and the ways to turn them into rows 8 and 9 are counted
//! directly (see [`last_two_rows`]).

use std::sync::atomic::{AtomicBool, Ordering};

use super::{ALL_DIGITS, Counter, seeded_grid};
use crate::band::Band;
use crate::seed::Seed;

/// The cell-by-cell counter; it visits every completion.
pub struct Enumerate;

/// The 24 searched cells of rows 4-6, columns 2-9, row by row, as (row,
/// column, block).
const MIDDLE: [(u8, u8, u8); 24] = {
    let mut cells = [(0u8, 0u8, 0u8); 24];
    let mut k = 0;
    while k < 24 {
        let row = 3 + k / 8;
        let column = 1 + k % 8;
        cells[k] = (row as u8, column as u8, (row / 3 * 3 + column / 3) as u8);
        k += 1;
    }
    cells
};

struct Masks {
    rows: [u16; 9],
    columns: [u16; 9],
    blocks: [u16; 9],
}

/// Row 7 while it is filled, with its cells' columns and blocks. Column
/// j = 0..8 here is grid column j + 2 (column 1 is the seed's), in block
/// (j + 1) / 3 of the bottom band: indices the compiler can see are in range.
struct Row7 {
    row: u16,
    columns: [u16; 8],
    blocks: [u16; 3],
}

/// A flag no one sets, for the plain count.
static NEVER: AtomicBool = AtomicBool::new(false);

impl Counter for Enumerate {
    fn count(&self, band: &Band, seed: &Seed) -> u64 {
        self.count_cancellable(band, seed, &NEVER).expect("never cancelled")
    }

    fn count_cancellable(&self, band: &Band, seed: &Seed, cancel: &AtomicBool) -> Option<u64> {
        let grid = seeded_grid(band, seed);
        let mut masks = Masks { rows: [0; 9], columns: [0; 9], blocks: [0; 9] };
        for (i, &d) in grid.iter().enumerate() {
            if d != 0 {
                let (r, c) = (i / 9, i % 9);
                masks.rows[r] |= 1 << d;
                masks.columns[c] |= 1 << d;
                masks.blocks[r / 3 * 3 + c / 3] |= 1 << d;
            }
        }
        let count = middle_band(&mut masks, 0, cancel);
        (!cancel.load(Ordering::Relaxed)).then_some(count)
    }
}

/// The middle cell at which the flag is read: the start of row 6, so each
/// read is followed by one row-6 search and its completions (microseconds).
const CANCEL_CHECK: usize = 16;

fn middle_band(masks: &mut Masks, k: usize, cancel: &AtomicBool) -> u64 {
    if k == CANCEL_CHECK && cancel.load(Ordering::Relaxed) {
        return 0;
    }
    if k == MIDDLE.len() {
        let mut row7 = Row7 {
            row: masks.rows[6],
            columns: std::array::from_fn(|j| masks.columns[j + 1]),
            blocks: [masks.blocks[6], masks.blocks[7], masks.blocks[8]],
        };
        return row_7(&mut row7, 0xff);
    }
    let (r, c, b) = MIDDLE[k];
    let (r, c, b) = (r as usize, c as usize, b as usize);
    let mut candidates = ALL_DIGITS & !(masks.rows[r] | masks.columns[c] | masks.blocks[b]);
    let mut found = 0;
    while candidates != 0 {
        let bit = candidates & candidates.wrapping_neg();
        candidates ^= bit;
        masks.rows[r] |= bit;
        masks.columns[c] |= bit;
        masks.blocks[b] |= bit;
        found += middle_band(masks, k + 1, cancel);
        masks.rows[r] ^= bit;
        masks.columns[c] ^= bit;
        masks.blocks[b] ^= bit;
    }
    found
}

/// Fills the cells of row 7 whose columns j are the bits of `left`, the one
/// with the fewest candidates first. Any order visits every filling; this
/// one tries a third as many cells of row 7 as row-major order did (27.6
/// against 74 million on the first Russell job).
fn row_7(row7: &mut Row7, left: u8) -> u64 {
    if left == 0 {
        return last_two_rows(&row7.columns);
    }
    let free = ALL_DIGITS & !row7.row;
    let (mut column, mut candidates, mut fewest) = (0, 0, u32::MAX);
    let mut scan = left;
    while scan != 0 {
        let j = (scan.trailing_zeros() & 7) as usize;
        scan &= scan - 1;
        let here = free & !(row7.columns[j] | row7.blocks[(j + 1) / 3]);
        if here.count_ones() < fewest {
            (column, candidates, fewest) = (j, here, here.count_ones());
            if fewest <= 1 {
                break; // none can have fewer
            }
        }
    }
    let mut found = 0;
    while candidates != 0 {
        let bit = candidates & candidates.wrapping_neg();
        candidates ^= bit;
        row7.row |= bit;
        row7.columns[column] |= bit;
        row7.blocks[(column + 1) / 3] |= bit;
        found += row_7(row7, left ^ (1 << column));
        row7.row ^= bit;
        row7.columns[column] ^= bit;
        row7.blocks[(column + 1) / 3] ^= bit;
    }
    found
}

/// The completions of rows 8 and 9 once rows 4-7 are filled, from the
/// digits of columns 2-9: 2 to the number of closed cycles the columns'
/// missing pairs form.
///
/// Each column misses two digits, its pair, and sends one of them up to row
/// 8 and the other down to row 9. Rows 8 and 9 hold only their seed digits
/// s8 and s9 (in column 1), so a digit other than those two is missing from
/// both rows and from two pairs (it is in column 1 above row 8): one pair
/// must send it up and the other down. s9 is missing from row 8 only and
/// from one pair, which must send it up; s8 from row 9 only, and one pair
/// sends it down. Seen as edges between digits, the pairs make one chain
/// from s9 to s8, along which every turn is forced (s9 up, its partner down,
/// so up from its other pair, and so on until s8 goes down), and closed
/// cycles, each of which turns one of two ways.
///
/// The bottom blocks need no check: a digit missing from row 7 of a bottom
/// block is in its stack's top and middle blocks, in two different columns,
/// so it is missing from the third column only, and lands in that block
/// once whichever way the pair turns.
fn last_two_rows(columns: &[u16; 8]) -> u64 {
    // end[d]: the other end of the chain of pairs seen so far that ends at
    // digit d (d itself while no pair holds d). A pair {a, b} joins the
    // chains ending at a and b, or closes a cycle when they are one chain.
    let mut end: [u8; 16] = std::array::from_fn(|d| d as u8);
    let mut cycles = 0;
    for &taken in columns {
        let pair = ALL_DIGITS & !taken;
        let a = (pair.trailing_zeros() & 15) as usize;
        let b = ((pair & pair.wrapping_sub(1)).trailing_zeros() & 15) as usize;
        let (end_a, end_b) = (end[a], end[b]);
        cycles += u32::from(usize::from(end_a) == b);
        end[usize::from(end_a & 15)] = end_b;
        end[usize::from(end_b & 15)] = end_a;
    }
    1 << cycles
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::seed::SEEDS;

    /// Rows 8 and 9 counted the slow way: each of the 2^8 ways to turn the
    /// columns' pairs, kept when rows 8 and 9 and the bottom blocks then hold
    /// every digit once.
    fn last_two_rows_by_trying(grid: &[u8; 81]) -> u64 {
        let pairs: [[u8; 2]; 8] = std::array::from_fn(|j| {
            let column: Vec<u8> = (0..7).map(|r| grid[r * 9 + j + 1]).collect();
            let missing: Vec<u8> = (1..=9).filter(|d| !column.contains(d)).collect();
            [missing[0], missing[1]]
        });
        let mut ways = 0;
        for turns in 0..256u32 {
            let mut full = *grid;
            for (j, pair) in pairs.iter().enumerate() {
                let up = (turns >> j & 1) as usize;
                full[7 * 9 + j + 1] = pair[up];
                full[8 * 9 + j + 1] = pair[1 - up];
            }
            let all_once = |cells: &mut dyn Iterator<Item = usize>| {
                let mut seen: Vec<u8> = cells.map(|i| full[i]).collect();
                seen.sort_unstable();
                seen == [1, 2, 3, 4, 5, 6, 7, 8, 9]
            };
            let rows = (7..9).all(|r| all_once(&mut (0..9).map(|c| r * 9 + c)));
            let blocks = (0..3).all(|s| all_once(&mut (6..9).flat_map(|r| (0..3).map(move |c| r * 9 + s * 3 + c))));
            ways += u64::from(rows && blocks);
        }
        ways
    }

    /// Fills rows 4-7 in plain row-major order and checks [`last_two_rows`]
    /// against the slow count on every `stride`-th filling, up to `limit`.
    fn check_fillings(grid: &mut [u8; 81], cell: usize, seen: &mut u64, stride: u64, limit: u64) {
        if *seen >= limit * stride {
            return;
        }
        if cell == 7 * 9 {
            *seen += 1;
            if seen.is_multiple_of(stride) {
                let columns: [u16; 8] =
                    std::array::from_fn(|j| (0..7).fold(0, |mask, r| mask | 1 << grid[r * 9 + j + 1]));
                assert_eq!(last_two_rows(&columns), last_two_rows_by_trying(grid), "{grid:?}");
            }
            return;
        }
        if grid[cell] != 0 {
            return check_fillings(grid, cell + 1, seen, stride, limit);
        }
        let (r, c) = (cell / 9, cell % 9);
        for d in 1..=9 {
            let clash = (0..9).any(|i| grid[r * 9 + i] == d || grid[i * 9 + c] == d)
                || (0..9).any(|i| grid[(r / 3 * 3 + i / 3) * 9 + c / 3 * 3 + i % 3] == d);
            if !clash {
                grid[cell] = d;
                check_fillings(grid, cell + 1, seen, stride, limit);
                grid[cell] = 0;
            }
        }
    }

    #[test]
    fn last_two_rows_agrees_with_trying_every_turn() {
        for (band, seed) in [("123456789456789123789123456", 0), ("123478569456139278789256134", 4)] {
            let mut grid = seeded_grid(&band.parse().unwrap(), &SEEDS[seed]);
            let mut seen = 0;
            check_fillings(&mut grid, 27, &mut seen, 11, 1_000);
            assert_eq!(seen, 11_000);
        }
    }
}
