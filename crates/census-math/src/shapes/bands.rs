//! F(S): the number of bands (c rows x 2c columns) with given column sets.
//!
//! Join column i to the c digits of its set: a c-regular bipartite graph G.
//! A band is an ordered list of c perfect matchings (its rows) that use every
//! edge once. The rows are distinguishable but play equal parts, so for any
//! edge e of a k-regular remainder exactly 1/k of the ordered decompositions
//! have e in the first row, giving the exact recursion
//!
//! ```text
//! F_k(G) = k x sum over perfect matchings M of G through e of F_(k-1)(G - M),
//! ```
//!
//! with F_1 = 1 and F_2 = 2^(number of cycles) (a 2-regular graph's cycles
//! are even and each alternates its two rows in one of two ways).

use super::classes::ColumnSets;
use super::{MAX_C, ShapeError};

const MAX_COLS: usize = 2 * MAX_C;

/// The remainder graph: the digits column i may still take, as a mask.
type Columns = [u16; MAX_COLS];

/// F(S): the number of bands whose column sets are `sets`.
///
/// ```
/// use census_math::shapes::{ColumnSets, band_count};
/// // 2 x 2 boxes: A_2 = A_1 gives 4 bands, a mixed pair 2 (shared/shapes.md).
/// assert_eq!(band_count(&ColumnSets::new(2, vec![0b0011, 0b0011]).unwrap()), 4);
/// assert_eq!(band_count(&ColumnSets::new(2, vec![0b0011, 0b0101]).unwrap()), 2);
/// ```
pub fn band_count(sets: &ColumnSets) -> u128 {
    let (cols, n) = graph(sets);
    decompositions(&cols, n, sets.c())
}

/// The rows that split F(S) into parts: every perfect matching through
/// column 0's smallest digit, as the digit of each column. F(S) is the sum of
/// [`part_count`] over them.
pub fn first_rows(sets: &ColumnSets) -> Vec<Vec<u8>> {
    let (cols, n) = graph(sets);
    let mut rows = Vec::new();
    matchings(&cols, n, |_, row| rows.push(row[..n].to_vec()));
    rows
}

/// One part of F(S): the number of bands in which the row through column 0's
/// smallest digit is `row` (= c x the decompositions of the rest).
pub fn part_count(sets: &ColumnSets, row: &[u8]) -> Result<u128, ShapeError> {
    let (cols, n) = graph(sets);
    if row.len() != n {
        return Err(ShapeError::BadRow { reason: format!("{} digits for {n} columns", row.len()) });
    }
    if row[0] as u32 != cols[0].trailing_zeros() {
        return Err(ShapeError::BadRow { reason: "column 0 must take its smallest digit".into() });
    }
    let mut rest = cols;
    let mut used = 0u16;
    for (i, &d) in row.iter().enumerate() {
        let bit = 1u16.checked_shl(u32::from(d)).unwrap_or(0);
        if cols[i] & bit == 0 || used & bit != 0 {
            return Err(ShapeError::BadRow { reason: format!("column {i} cannot take digit {d}") });
        }
        used |= bit;
        rest[i] &= !bit;
    }
    Ok(sets.c() as u128 * decompositions(&rest, n, sets.c() - 1))
}

fn graph(sets: &ColumnSets) -> (Columns, usize) {
    let mut cols = [0u16; MAX_COLS];
    let listed = sets.columns();
    cols[..listed.len()].copy_from_slice(&listed);
    (cols, listed.len())
}

/// Ordered decompositions of a k-regular remainder into k perfect matchings.
fn decompositions(cols: &Columns, n: usize, k: usize) -> u128 {
    match k {
        0 | 1 => 1,
        2 => 1u128 << cycles(cols, n),
        _ => {
            let mut sum = 0u128;
            matchings(cols, n, |rest, _| sum += decompositions(rest, n, k - 1));
            k as u128 * sum
        }
    }
}

/// Calls `visit(remainder, row)` for every perfect matching through column
/// 0's smallest digit; columns are filled fewest-choices first.
fn matchings(cols: &Columns, n: usize, mut visit: impl FnMut(&Columns, &[u8; MAX_COLS])) {
    let first = cols[0].trailing_zeros() as u8;
    let mut rest = *cols;
    rest[0] &= !(1 << first);
    let mut row = [0u8; MAX_COLS];
    row[0] = first;
    let open = ((1u16 << n) - 1) & !1;
    extend_matching(cols, open, 1 << first, &mut rest, &mut row, &mut visit);
}

fn extend_matching(
    cols: &Columns,
    open: u16,
    used: u16,
    rest: &mut Columns,
    row: &mut [u8; MAX_COLS],
    visit: &mut impl FnMut(&Columns, &[u8; MAX_COLS]),
) {
    if open == 0 {
        visit(rest, row);
        return;
    }
    let (mut pick, mut choices, mut fewest) = (0usize, 0u16, u32::MAX);
    let mut scan = open;
    while scan != 0 {
        let i = scan.trailing_zeros() as usize;
        scan &= scan - 1;
        let free = cols[i] & !used;
        let count = free.count_ones();
        if count < fewest {
            (pick, choices, fewest) = (i, free, count);
            if count <= 1 {
                break;
            }
        }
    }
    let mut left = choices;
    while left != 0 {
        let d = left.trailing_zeros();
        left &= left - 1;
        rest[pick] = cols[pick] & !(1 << d);
        row[pick] = d as u8;
        extend_matching(cols, open & !(1 << pick), used | (1 << d), rest, row, visit);
    }
    rest[pick] = cols[pick];
}

/// Cycles of a 2-regular remainder (every column and digit of degree 2).
fn cycles(cols: &Columns, n: usize) -> u32 {
    let mut digit_cols = [0u16; MAX_COLS];
    for (i, &set) in cols[..n].iter().enumerate() {
        let mut s = set;
        while s != 0 {
            digit_cols[s.trailing_zeros() as usize] |= 1 << i;
            s &= s - 1;
        }
    }
    let mut unseen = (1u16 << n) - 1;
    let mut count = 0;
    while unseen != 0 {
        count += 1;
        let start = unseen.trailing_zeros() as usize;
        let (mut col, mut digit) = (start, cols[start].trailing_zeros() as usize);
        loop {
            unseen &= !(1 << col);
            col = (digit_cols[digit] & !(1 << col)).trailing_zeros() as usize;
            if col == start {
                break;
            }
            digit = (cols[col] & !(1 << digit)).trailing_zeros() as usize;
        }
    }
    count
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_by_two_hand_check() {
        // shared/shapes.md: with A_1 = {1,2}, A_2 = A_1 or its complement gives
        // F = 4, each of the four mixed pairs F = 2: 16 + 16 + 4 x 4 = 48.
        let mut sum = 0;
        for a2 in (0u16..16).filter(|s| s.count_ones() == 2) {
            let f = band_count(&ColumnSets::new(2, vec![0b0011, a2]).unwrap());
            assert_eq!(f, if a2 == 0b0011 || a2 == 0b1100 { 4 } else { 2 });
            sum += f * f;
        }
        assert_eq!(sum, 48);
    }

    #[test]
    fn parts_add_up_to_the_whole() {
        let sets = ColumnSets::new(4, vec![0x0f, 0x33, 0x55, 0x3c]).unwrap();
        let rows = first_rows(&sets);
        let parts: u128 = rows.iter().map(|row| part_count(&sets, row).unwrap()).sum();
        assert_eq!(parts, band_count(&sets));
        assert!(part_count(&sets, &[1, 0, 2, 3, 4, 5, 6, 7]).is_err());
    }
}
