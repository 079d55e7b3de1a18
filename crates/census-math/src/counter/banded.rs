//! The banded counter.
//!
//! Backtracks over the middle band (rows 4-6) only. Each filling forces the
//! bottom band's column sets (L_j = 1-9 minus the digits already in column
//! j), and the number of ways to fill the bottom band depends only on those
//! sets; it is counted by backtracking once per distinct set of column sets
//! and remembered.

use std::collections::HashMap;

use super::{ALL_DIGITS, Counter, seeded_grid};
use crate::band::Band;
use crate::seed::Seed;

/// The middle-band counter with memoised bottom bands.
pub struct Banded;

impl Counter for Banded {
    fn count(&self, band: &Band, seed: &Seed) -> u64 {
        let grid = seeded_grid(band, seed);
        let mut columns = [0u16; 9];
        for (i, &d) in grid.iter().enumerate() {
            if d != 0 && i < 54 {
                columns[i % 9] |= 1 << d;
            }
        }
        let mut middle = Middle {
            rows: [0; 3],
            blocks: [0; 3],
            columns,
            bottom_first: [grid[54], grid[63], grid[72]],
            memo: HashMap::new(),
        };
        for r in 0..3 {
            let d = grid[(3 + r) * 9];
            middle.rows[r] |= 1 << d;
            middle.blocks[0] |= 1 << d;
        }
        middle.search(0)
    }
}

struct Middle {
    rows: [u16; 3],
    blocks: [u16; 3],
    /// Digits in each column from rows 1-6 so far.
    columns: [u16; 9],
    /// Column 1 of the bottom band, as the seed fixes it.
    bottom_first: [u8; 3],
    memo: HashMap<[u16; 9], u64>,
}

impl Middle {
    /// Cell k of the 24 free middle-band cells: row 4 + k / 8, column 2 + k % 8.
    fn search(&mut self, k: usize) -> u64 {
        if k == 24 {
            let sets: [u16; 9] = std::array::from_fn(|c| ALL_DIGITS & !self.columns[c]);
            if let Some(&known) = self.memo.get(&sets) {
                return known;
            }
            let ways = bottom_fillings(&sets, self.bottom_first);
            self.memo.insert(sets, ways);
            return ways;
        }
        let (r, c) = (k / 8, 1 + k % 8);
        let b = c / 3;
        let mut candidates = ALL_DIGITS & !(self.rows[r] | self.blocks[b] | self.columns[c]);
        let mut found = 0;
        while candidates != 0 {
            let bit = candidates & candidates.wrapping_neg();
            candidates ^= bit;
            self.rows[r] |= bit;
            self.blocks[b] |= bit;
            self.columns[c] |= bit;
            found += self.search(k + 1);
            self.rows[r] ^= bit;
            self.blocks[b] ^= bit;
            self.columns[c] ^= bit;
        }
        found
    }
}

/// The fillings of the bottom band whose column j holds exactly `sets[j]`,
/// with column 1 fixed. Blocks need no check: each stack's three sets
/// partition 1-9, so a block holds 1-9 once its columns do.
fn bottom_fillings(sets: &[u16; 9], first: [u8; 3]) -> u64 {
    fn fill(k: usize, rows: &mut [u16; 3], left: &mut [u16; 9]) -> u64 {
        if k == 24 {
            return 1;
        }
        let (r, c) = (k / 8, 1 + k % 8);
        let mut candidates = left[c] & !rows[r];
        let mut found = 0;
        while candidates != 0 {
            let bit = candidates & candidates.wrapping_neg();
            candidates ^= bit;
            rows[r] |= bit;
            left[c] ^= bit;
            found += fill(k + 1, rows, left);
            rows[r] ^= bit;
            left[c] ^= bit;
        }
        found
    }
    let mut rows = [1u16 << first[0], 1 << first[1], 1 << first[2]];
    let mut left = *sets;
    fill(0, &mut rows, &mut left)
}
