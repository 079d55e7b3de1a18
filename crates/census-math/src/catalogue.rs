//! Standard bands, normal form, and the catalogue of 36,288 bands.
//!
//! A band is *standard* when B1 is 123/456/789. Its *normal form* sorts the
//! columns of B2 and of B3 by their top entry and then orders B2 and B3 by
//! their top-left entries; each normal-form band stands for 72 standard bands.

use crate::band::Band;

/// The number of standard bands: 56 x 6^6.
pub const STANDARD_BANDS: usize = 2_612_736;
/// The number of bands in the catalogue: 2,612,736 / 72.
pub const CATALOGUE_BANDS: usize = 36_288;

const STANDARD_B1: [[u8; 3]; 3] = [[1, 2, 3], [4, 5, 6], [7, 8, 9]];

/// Every valid band with B1 = 123/456/789, in string order.
///
/// ```
/// assert_eq!(census_math::catalogue::standard_bands().len(), 2_612_736);
/// ```
pub fn standard_bands() -> Vec<Band> {
    let mut bands = Vec::with_capacity(STANDARD_BANDS);
    for_each_standard_band(|cells| {
        bands.push(Band::from_cells(cells).expect("enumeration keeps rows and blocks valid"))
    });
    bands
}

/// The 36,288 normal-form standard bands, in string order.
pub fn catalogue() -> Vec<Band> {
    let mut bands = Vec::with_capacity(CATALOGUE_BANDS);
    fill_standard_bands(true, &mut |cells| {
        debug_assert!(is_normal(&cells));
        bands.push(Band::from_cells(cells).expect("enumeration keeps rows and blocks valid"));
    });
    bands
}

/// The position of a normal-form band in [`catalogue()`], by binary search.
/// `None` when the band is not in normal form.
pub fn catalogue_index(catalogue: &[Band], band: &Band) -> Option<usize> {
    catalogue.binary_search(band).ok()
}

/// Whether a band is standard and in normal form, i.e. in the catalogue.
pub fn is_normal_form(band: &Band) -> bool {
    band.is_standard() && is_normal(band.cells())
}

fn is_normal(cells: &[u8; 27]) -> bool {
    cells[3] < cells[4] && cells[4] < cells[5] && cells[6] < cells[7] && cells[7] < cells[8] && cells[3] < cells[6]
}

/// Fills B2 and B3 of a standard band cell by cell, row by row, trying digits
/// in ascending order, so bands come out in string order.
fn for_each_standard_band(mut visit: impl FnMut([u8; 27])) {
    fill_standard_bands(false, &mut visit);
}

/// The enumeration behind both lists. With `normal_only`, the first row's
/// B2 and B3 are filled in normal form's order (each block's top row
/// ascending, B2's first digit below B3's), which leaves 1 in 72 of the
/// standard bands without visiting the other 71.
fn fill_standard_bands(normal_only: bool, visit: &mut impl FnMut([u8; 27])) {
    let mut cells = [0u8; 27];
    for (r, row) in STANDARD_B1.iter().enumerate() {
        cells[r * 9..r * 9 + 3].copy_from_slice(row);
    }
    // Row masks start with B1's digits; block masks of B2, B3 start empty.
    let rows = [0b1110u16, 0b111_0000, 0b11_1000_0000];
    fill(&mut cells, 0, rows, [0, 0], normal_only, visit);

    fn fill(
        cells: &mut [u8; 27],
        k: usize,
        rows: [u16; 3],
        blocks: [u16; 2],
        normal_only: bool,
        visit: &mut impl FnMut([u8; 27]),
    ) {
        if k == 18 {
            visit(*cells);
            return;
        }
        let (row, column) = (k / 6, 3 + k % 6);
        let block = (column - 3) / 3;
        let used = rows[row] | blocks[block];
        // In normal form, row 1 of B2 and of B3 ascends and B3 starts above B2.
        let least = match (normal_only, k) {
            (true, 1 | 2 | 4 | 5) => cells[column - 1] + 1,
            (true, 3) => cells[3] + 1,
            _ => 1,
        };
        for digit in least..=9u8 {
            let bit = 1u16 << digit;
            if used & bit == 0 {
                cells[row * 9 + column] = digit;
                let mut rows = rows;
                let mut blocks = blocks;
                rows[row] |= bit;
                blocks[block] |= bit;
                fill(cells, k + 1, rows, blocks, normal_only, visit);
            }
        }
    }
}

/// The catalogue band of any valid band: relabel so B1 is standard, then
/// sort B2's and B3's columns by their top entries and order the two blocks.
///
/// ```
/// use census_math::{Band, catalogue::normalize};
/// let band: Band = "789123456123456789456789123".parse().unwrap();
/// assert_eq!(normalize(&band).to_string(), "123456789456789123789123456");
/// ```
pub fn normalize(band: &Band) -> Band {
    Band::from_cells(normalize_cells(band.cells())).expect("normal form keeps a band valid")
}

fn relabel_cells(src: &[u8; 27]) -> [u8; 27] {
    let mut map = [0u8; 10];
    for r in 0..3 {
        for c in 0..3 {
            map[src[r * 9 + c] as usize] = (r * 3 + c + 1) as u8;
        }
    }
    let mut cells = *src;
    for d in cells.iter_mut() {
        *d = map[*d as usize];
    }
    cells
}

/// [`normalize`] on raw cells, for the class builder's inner loops; the
/// caller guarantees the cells form a valid band.
pub(crate) fn normalize_cells(band: &[u8; 27]) -> [u8; 27] {
    let src = relabel_cells(band);
    let mut cells = src;
    let top_left = |block: usize| src[block * 3].min(src[block * 3 + 1]).min(src[block * 3 + 2]);
    let block_order = if top_left(1) > top_left(2) { [2, 1] } else { [1, 2] };
    for (target, &block) in [1usize, 2].iter().zip(&block_order) {
        let mut columns = [block * 3, block * 3 + 1, block * 3 + 2];
        columns.sort_unstable_by_key(|&c| src[c]);
        for (i, &c) in columns.iter().enumerate() {
            for r in 0..3 {
                cells[r * 9 + target * 3 + i] = src[r * 9 + c];
            }
        }
    }
    cells
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normal_form_is_idempotent_on_the_catalogue() {
        let catalogue = catalogue();
        assert_eq!(catalogue.len(), CATALOGUE_BANDS);
        assert!(catalogue.is_sorted());
        for band in catalogue.iter().step_by(97) {
            assert_eq!(normalize(band), *band);
            assert!(is_normal_form(band));
        }
    }
}
