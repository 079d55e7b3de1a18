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
///
/// ```
/// let catalogue = census_math::catalogue::catalogue();
/// assert_eq!(catalogue.len(), 36_288);
/// assert_eq!(catalogue[0].to_string(), "123456789456789123789123456");
/// ```
pub fn catalogue() -> Vec<Band> {
    Indexed::new().bands
}

/// The lower digits of row 2 of a standard band (B1 holds 4, 5, 6 there).
const ROW_2_DIGITS: [u8; 6] = [1, 2, 3, 7, 8, 9];

/// The orders of three things, in increasing (lexicographic) order.
const ORDERS: [[usize; 3]; 6] = [[0, 1, 2], [0, 2, 1], [1, 0, 2], [1, 2, 0], [2, 0, 1], [2, 1, 0]];

/// The catalogue, and the position of any normal-form band in it without a
/// search.
///
/// A normal-form band's row 1 is 123 4xy and the other three of 4-9, B2's
/// top row holding 4 (10 choices of x < y); row 2 is 456 and an order of
/// 1, 2, 3, 7, 8, 9 (720, of which a row 1 allows a few dozen); these
/// fix the digits of each block's row 3, whose orders (6 x 6) all complete
/// the band. So the catalogue is 1,008 prefixes (rows 1 and 2) of 36 bands
/// each, and a band's position is 36 x its prefix's + the rank of its row
/// 3's orders.
pub(crate) struct Indexed {
    pub(crate) bands: Vec<Band>,
    /// `prefix[row 1 * 720 + rank of row 2]`: the prefix's number, or `u16::MAX`.
    prefix: Vec<u16>,
}

/// The rank, 0-9, of the row 1 whose B2 holds 4, x, y (x < y, from 5-9),
/// at `[mask of x and y >> 5]`.
const ROW_1_RANK: [u8; 32] = {
    let mut rank = [u8::MAX; 32];
    let mut n = 0;
    let mut x = 0;
    while x < 5 {
        let mut y = x + 1;
        while y < 5 {
            rank[1 << x | 1 << y] = n;
            n += 1;
            y += 1;
        }
        x += 1;
    }
    rank
};

/// The position of each of 1, 2, 3, 7, 8, 9 in [`ROW_2_DIGITS`] (16
/// entries, read with the digit masked to 4 bits: no bounds check).
const ROW_2_POSITION: [u8; 16] = [0, 0, 1, 2, 0, 0, 0, 3, 4, 5, 0, 0, 0, 0, 0, 0];

/// The rank of an order of three distinct digits among the six orders of
/// the same digits, in string order.
#[inline]
fn order_rank(a: u8, b: u8, c: u8) -> usize {
    2 * (usize::from(b < a) + usize::from(c < a)) + usize::from(c < b)
}

/// `FIRST_THREE_RANK[36 a + 6 b + c]`: the rank of the ordered triple
/// (a, b, c) of distinct numbers below 6 among the 120 such triples, in
/// string order.
const FIRST_THREE_RANK: [u8; 216] = {
    let mut rank = [u8::MAX; 216];
    let mut n = 0;
    let mut code = 0;
    while code < 216 {
        let (a, b, c) = (code / 36, code / 6 % 6, code % 6);
        if a != b && a != c && b != c {
            rank[code] = n;
            n += 1;
        }
        code += 1;
    }
    rank
};

/// The rank of row 2's lower six digits among the 720 orders of
/// 1, 2, 3, 7, 8, 9, in string order: its first three digits' rank among
/// the 120 ordered triples, then the order of the last three.
#[inline]
fn row_2_rank(digits: &[u8]) -> usize {
    let [a, b, c, d, e, f] = [0, 1, 2, 3, 4, 5].map(|i| ROW_2_POSITION[usize::from(digits[i] & 15)]);
    usize::from(FIRST_THREE_RANK[usize::from(36 * a + 6 * b + c)]) * 6 + order_rank(d, e, f)
}

impl Indexed {
    pub(crate) fn new() -> Indexed {
        let orders_of_row_2 = orders_of(ROW_2_DIGITS);
        let mut bands = Vec::with_capacity(CATALOGUE_BANDS);
        let mut prefix = vec![u16::MAX; 10 * 720];
        let mut cells = [0u8; 27];
        for (r, row) in STANDARD_B1.iter().enumerate() {
            cells[r * 9..r * 9 + 3].copy_from_slice(row);
        }
        let mask = |digits: &[u8]| digits.iter().fold(0u16, |m, &d| m | 1 << d);
        for x in 5..=9u8 {
            for y in x + 1..=9 {
                let b2 = [4, x, y];
                let b3: Vec<u8> = (5..=9).filter(|&d| d != x && d != y).collect();
                cells[3..6].copy_from_slice(&b2);
                cells[6..9].copy_from_slice(&b3);
                let row_1 = usize::from(ROW_1_RANK[usize::from(mask(&b2[1..]) >> 5)]);
                for (rank, row_2) in orders_of_row_2.iter().enumerate() {
                    // Each block's rows 1 and 2 share no digit, and leave
                    // row 3 none of B1's 7, 8, 9.
                    let (b2_rows, b3_rows) = (mask(&b2) | mask(&row_2[..3]), mask(&b3) | mask(&row_2[3..]));
                    let row_3 = 0b11_1000_0000;
                    if b2_rows.count_ones() != 6 || b3_rows.count_ones() != 6 || (b2_rows & b3_rows) & row_3 != row_3 {
                        continue;
                    }
                    prefix[row_1 * 720 + rank] = (bands.len() / 36) as u16;
                    cells[12..18].copy_from_slice(row_2);
                    push_row_3_orders(&mut bands, &mut cells, [b2_rows, b3_rows]);
                }
            }
        }
        assert_eq!(bands.len(), CATALOGUE_BANDS);
        Indexed { bands, prefix }
    }

    /// The position in the catalogue of a band in normal form, from its cells.
    #[inline]
    pub(crate) fn index_of(&self, cells: &[u8; 27]) -> usize {
        let lower = |row: usize| -> [u8; 6] { std::array::from_fn(|c| cells[9 * row + 3 + c]) };
        self.index_of_lower_rows(lower(0), lower(1), lower(2))
    }

    /// The position in the catalogue of the band in normal form whose rows
    /// hold 123, 456, 789 in B1 and `row_1`, `row_2`, `row_3` in B2 and B3.
    #[inline]
    pub(crate) fn index_of_lower_rows(&self, row_1: [u8; 6], row_2: [u8; 6], row_3: [u8; 6]) -> usize {
        let row_1 = usize::from(ROW_1_RANK[usize::from((1u16 << row_1[1] | 1 << row_1[2]) >> 5) & 31]);
        let prefix = self.prefix[row_1 * 720 + row_2_rank(&row_2)];
        debug_assert_ne!(prefix, u16::MAX, "rows 1 and 2 of a normal-form band");
        usize::from(prefix) * 36
            + 6 * order_rank(row_3[0], row_3[1], row_3[2])
            + order_rank(row_3[3], row_3[4], row_3[5])
    }
}

/// The 720 orders of six digits, in string order.
fn orders_of(digits: [u8; 6]) -> Vec<[u8; 6]> {
    let mut orders = Vec::with_capacity(720);
    let mut order = digits;
    loop {
        orders.push(order);
        // The next order in string order, if any.
        let Some(i) = (0..5).rev().find(|&i| order[i] < order[i + 1]) else { return orders };
        let j = (i + 1..6).rev().find(|&j| order[j] > order[i]).expect("order[i + 1] is larger");
        order.swap(i, j);
        order[i + 1..].reverse();
    }
}

/// Pushes the 36 bands that complete rows 1 and 2 in `cells`, whose blocks
/// B2 and B3 hold `rows` in those rows: row 3 of each block holds the rest,
/// in every order, in string order.
fn push_row_3_orders(bands: &mut Vec<Band>, cells: &mut [u8; 27], rows: [u16; 2]) {
    let rest = rows.map(|mask| {
        let mut digits = (1..=9u8).filter(|&d| mask & 1 << d == 0);
        let rest: [u8; 3] = std::array::from_fn(|_| digits.next().expect("a block's row 3 holds three digits"));
        rest
    });
    for b2 in ORDERS {
        for b3 in ORDERS {
            for k in 0..3 {
                cells[21 + k] = rest[0][b2[k]];
                cells[24 + k] = rest[1][b3[k]];
            }
            bands.push(Band::from_valid_cells(*cells));
        }
    }
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

    /// The catalogue built by prefixes is the normal forms found by filling
    /// cells one by one, in the same order, and each band's index is its place.
    #[test]
    fn the_catalogue_by_prefixes_is_the_one_by_cells() {
        let mut by_cells = Vec::with_capacity(CATALOGUE_BANDS);
        fill_standard_bands(true, &mut |cells| by_cells.push(Band::from_cells(cells).unwrap()));
        let indexed = Indexed::new();
        assert_eq!(indexed.bands, by_cells);
        for (i, band) in indexed.bands.iter().enumerate() {
            assert_eq!(indexed.index_of(band.cells()), i, "{band}");
        }
    }

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
