//! The plain backtracking counter: the reference.
//!
//! Fills the 48 free cells of rows 4-9 one by one, row by row, with bit masks
//! for rows, columns and blocks, and counts every completion it reaches. Only
//! the last row is not searched: once rows 4-8 are filled each of its cells
//! is forced by its column, so the completion exists exactly when those
//! forced digits fit their row and blocks.

use super::{ALL_DIGITS, Counter, seeded_grid};
use crate::band::Band;
use crate::seed::Seed;

/// The cell-by-cell counter; it visits every completion.
pub struct Enumerate;

/// The 40 searched cells: rows 4-8, columns 2-9, as (row, column, block).
const SEARCHED: [(u8, u8, u8); 40] = {
    let mut cells = [(0u8, 0u8, 0u8); 40];
    let mut k = 0;
    while k < 40 {
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

impl Counter for Enumerate {
    fn count(&self, band: &Band, seed: &Seed) -> u64 {
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
        search(&mut masks, 0)
    }
}

fn search(masks: &mut Masks, k: usize) -> u64 {
    if k == SEARCHED.len() {
        return last_row_fits(masks) as u64;
    }
    let (r, c, b) = SEARCHED[k];
    let (r, c, b) = (r as usize, c as usize, b as usize);
    let mut candidates = ALL_DIGITS & !(masks.rows[r] | masks.columns[c] | masks.blocks[b]);
    let mut found = 0;
    while candidates != 0 {
        let bit = candidates & candidates.wrapping_neg();
        candidates ^= bit;
        masks.rows[r] |= bit;
        masks.columns[c] |= bit;
        masks.blocks[b] |= bit;
        found += search(masks, k + 1);
        masks.rows[r] ^= bit;
        masks.columns[c] ^= bit;
        masks.blocks[b] ^= bit;
    }
    found
}

/// Row 9's cells are forced by their columns; they must be distinct and new
/// to their blocks (the block check covers the row check within a block).
fn last_row_fits(masks: &Masks) -> bool {
    let mut row = masks.rows[8];
    for block in 6..9 {
        let mut block_mask = masks.blocks[block];
        for c in (block - 6) * 3..(block - 6) * 3 + 3 {
            if c == 0 {
                continue; // fixed by the seed
            }
            let forced = ALL_DIGITS & !masks.columns[c];
            if forced & (row | block_mask) != 0 {
                return false;
            }
            row |= forced;
            block_mask |= forced;
        }
    }
    true
}
