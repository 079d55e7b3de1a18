//! The plain backtracking counter: the reference.
//!
//! Fills the free cells of rows 4-7 one by one, row by row, with bit masks
//! for rows, columns and blocks, and counts the completions of each filling.
//! The last two rows are not searched cell by cell: once rows 4-7 are
//! filled, each column's two missing digits are known, so rows 8 and 9 are
//! one choice per column of which digit goes up (see [`last_two_rows`]).

use super::{ALL_DIGITS, Counter, seeded_grid};
use crate::band::Band;
use crate::seed::Seed;

/// The cell-by-cell counter; it visits every completion.
pub struct Enumerate;

/// The 32 searched cells: rows 4-7, columns 2-9, as (row, column, block).
const SEARCHED: [(u8, u8, u8); 32] = {
    let mut cells = [(0u8, 0u8, 0u8); 32];
    let mut k = 0;
    while k < 32 {
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
        return last_two_rows(masks);
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

/// The completions of rows 8 and 9 once rows 4-7 are filled. Each column
/// c = 2..9 misses two digits, its pair; column 1 is the seed's. The
/// bottom blocks hold their digits once exactly when the pairs of a block's
/// columns are disjoint and new to it, whichever way each pair is turned.
/// Each pair then sends one digit to row 8 and the other to row 9: every
/// digit appears in as many pairs as rows 8 and 9 miss it, so the ways are
/// the ways to give each pair a digit of row 8's missing set, each digit
/// once, with the pair's other digit missing from row 9.
fn last_two_rows(masks: &Masks) -> u64 {
    let mut pairs = [0u16; 8];
    for c in 1..9 {
        pairs[c - 1] = ALL_DIGITS & !masks.columns[c];
    }
    for block in 6..9 {
        let mut seen = masks.blocks[block];
        for c in (block - 6) * 3..(block - 6) * 3 + 3 {
            if c == 0 {
                continue; // fixed by the seed
            }
            if pairs[c - 1] & seen != 0 {
                return 0;
            }
            seen |= pairs[c - 1];
        }
    }
    let row8 = ALL_DIGITS & !masks.rows[7];
    let row9 = ALL_DIGITS & !masks.rows[8];
    let mut options = [0u16; 8];
    for (pair, option) in pairs.iter().zip(&mut options) {
        let mut up = pair & row8;
        while up != 0 {
            let bit = up & up.wrapping_neg();
            up ^= bit;
            if (pair ^ bit) & row9 != 0 {
                *option |= bit;
            }
        }
    }
    distinct_choices(&options, 0, 0)
}

/// The ways to pick one digit from each of `options[i..]`, no digit twice.
fn distinct_choices(options: &[u16; 8], i: usize, used: u16) -> u64 {
    if i == options.len() {
        return 1;
    }
    let mut left = options[i] & !used;
    let mut ways = 0;
    while left != 0 {
        let bit = left & left.wrapping_neg();
        left ^= bit;
        ways += distinct_choices(options, i + 1, used | bit);
    }
    ways
}
