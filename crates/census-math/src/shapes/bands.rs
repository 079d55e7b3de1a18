//! F(S): the number of bands (c rows x 2c columns) with given column sets.
//!
//! Join column i to the c digits of its set: a c-regular bipartite graph G.
//! A band is an ordered list of c perfect matchings (its rows) that use every
//! edge once, i.e. a proper c-edge-colouring of G by row numbers.
//!
//! The rows play equal parts, so fixing which row takes each of column 0's
//! k digits divides the count by exactly k!: call P_k(G) the number of
//! decompositions of a k-regular G in which row r takes column 0's r-th
//! smallest digit, so F_k(G) = k! P_k(G). Splitting the k rows into the first
//! a and the last k - a:
//!
//! ```text
//! P_k(G) = sum over a-regular spanning subgraphs K of G that take column 0's
//!          a smallest digits of P_a(K) x P_(k-a)(G - K)
//! ```
//!
//! (the first a rows are a decomposition of K, the others one of the rest,
//! each with column 0 fixed). With a = 2 (see `split`) the rows fall into
//! 2-factors: 2 x 4 needs only cycle counts, 2 x 5 a 2-factor, a perfect
//! matching and another 2-factor, 2 x 6 three 2-factors. The base cases are
//! P_1 = 1 and P_2(G) = 2^(cycles - 1): each even cycle alternates its two
//! rows in two ways, except column 0's, which is fixed.
//!
//! Peeling one row at a time (a = 1 throughout) visits each 2-factor once
//! per ordering of its rows; taking 2-factors whole visits it once.

use super::classes::ColumnSets;
use super::{MAX_C, ShapeError};

const MAX_COLS: usize = 2 * MAX_C;

/// A graph: the digits column i is joined to, as a mask (columns 0..n).
type Columns = [u16; MAX_COLS];

/// F(S): the number of bands whose column sets are `sets`.
///
/// ```
/// use census_math::shapes::{ColumnSets, band_count};
/// // 2 x 2 boxes: A_2 = A_1 gives 4 bands, a mixed pair 2 (docs/mathematics.md).
/// assert_eq!(band_count(&ColumnSets::new(2, vec![0b0011, 0b0011]).unwrap()), 4);
/// assert_eq!(band_count(&ColumnSets::new(2, vec![0b0011, 0b0101]).unwrap()), 2);
/// ```
pub fn band_count(sets: &ColumnSets) -> u128 {
    let (cols, n) = graph(sets);
    let k = sets.c();
    let mut sum = 0u128;
    top_factors(&cols, n, k, &[], &mut |factor, rest| {
        sum += fixed(factor, n, split(k)) * fixed(rest, n, k - split(k));
    });
    factorial(k) * sum
}

fn factorial(k: usize) -> u128 {
    (1..=k as u128).product()
}

/// How many leading columns a part fixes: a part is the set of top-level
/// factors K that agree with a given choice on columns 0..PART_COLUMNS.
pub const PART_COLUMNS: usize = 2;

/// The parts F(S) splits into: every choice of the top-level factor K (the
/// first a rows' digits, a = 2 from c = 4 on, else 1) on the first [`PART_COLUMNS`] columns, as one
/// digit mask per column, that passes the degree checks. F(S) is the sum of
/// [`part_count`] over them; some parts may count 0.
pub fn parts(sets: &ColumnSets) -> Vec<Vec<u16>> {
    prefixes(sets, PART_COLUMNS)
}

/// Like [`parts`] but fixing the first `columns` columns: finer parts, for
/// sampling the cost of a part (the `shapes` example's `--estimate`).
pub fn prefixes(sets: &ColumnSets, columns: usize) -> Vec<Vec<u16>> {
    let (cols, n) = graph(sets);
    let k = sets.c();
    let mut found = Vec::new();
    let mut state = FactorSearch::new(&cols, n, split(k));
    state.prefixes(0, columns.clamp(1, n), &mut Vec::new(), &mut found);
    found
}

/// One part of F(S): the bands whose first a rows (a = 2 from c = 4 on,
/// else 1) take, in column i < `prefix.len()`, exactly the digits
/// `prefix[i]`, counted with column 0 fixed and multiplied by c! (so
/// `prefix[0]` must be column 0's a smallest digits, and the parts of all
/// prefixes add up to F(S)).
pub fn part_count(sets: &ColumnSets, prefix: &[u16]) -> Result<u128, ShapeError> {
    let (cols, n) = graph(sets);
    let k = sets.c();
    let a = split(k) as u32;
    if prefix.is_empty() || prefix.len() > n {
        return Err(ShapeError::BadPart { reason: format!("{} column masks for {n} columns", prefix.len()) });
    }
    let mut load = [0u32; MAX_COLS];
    for (i, &mask) in prefix.iter().enumerate() {
        if mask & !cols[i] != 0 || mask.count_ones() != a {
            return Err(ShapeError::BadPart {
                reason: format!("column {i}: {mask:#05x} is not {a} of the column's digits {:#05x}", cols[i]),
            });
        }
        for (d, l) in load.iter_mut().enumerate() {
            *l += u32::from((mask >> d) & 1 == 1);
        }
    }
    if prefix[0] != lowest(cols[0], a) {
        return Err(ShapeError::BadPart {
            reason: format!("column 0 is fixed to its {a} smallest digits {:#05x}", lowest(cols[0], a)),
        });
    }
    if let Some(d) = load.iter().position(|&l| l > a) {
        return Err(ShapeError::BadPart { reason: format!("digit {d} is taken more than {a} times") });
    }
    let mut sum = 0u128;
    top_factors(&cols, n, k, prefix, &mut |factor, rest| {
        sum += fixed(factor, n, split(k)) * fixed(rest, n, k - split(k));
    });
    Ok(factorial(k) * sum)
}

fn graph(sets: &ColumnSets) -> (Columns, usize) {
    let mut cols = [0u16; MAX_COLS];
    let listed = sets.columns();
    cols[..listed.len()].copy_from_slice(&listed);
    (cols, listed.len())
}

/// Visits every split(c)-factor K of the whole graph that takes column 0's
/// split(c) smallest digits and starts with `prefix`, with K and G - K.
fn top_factors(cols: &Columns, n: usize, k: usize, prefix: &[u16], visit: &mut impl FnMut(&Columns, &Columns)) {
    let mut search = FactorSearch::new(cols, n, split(k));
    for (i, &mask) in prefix.iter().enumerate() {
        search.take(i, mask);
    }
    search.run(prefix.len(), visit);
}

/// How many of k rows the first factor takes: 2 from k = 4 on (so a band
/// splits into 2-factors, each weighing 2^(cycles - 1) at once), else 1.
///
/// Every leaf of the search is one way of cutting the rows into blocks, and
/// each 2-row block stands for 2^(cycles - 1) decompositions; so the more
/// 2-row blocks, the fewer leaves: 2 + 2 + 2 for 2 x 6 has fewer leaves
/// than 3 + 3 (measured: BENCHMARKS.md).
fn split(k: usize) -> usize {
    if k >= 4 { 2 } else { 1 }
}

/// The `a` lowest bits of `mask`.
fn lowest(mask: u16, a: u32) -> u16 {
    let mut rest = mask;
    for _ in 0..a {
        rest &= rest.wrapping_sub(1);
    }
    mask & !rest
}

/// P_k: the decompositions of a k-regular graph in which row r takes column
/// 0's r-th smallest digit, i.e. F_k / k!.
fn fixed(cols: &Columns, n: usize, k: usize) -> u128 {
    match k {
        0 | 1 => 1,
        2 => 1u128 << (cycles(cols, n) - 1),
        3 => {
            // a = 1: the factors are perfect matchings; a plain search over
            // columns is several times faster than the general one.
            let first = lowest(cols[0], 1);
            let mut rest = *cols;
            rest[0] &= !first;
            matchings3(cols, n, 1, first, &mut rest)
        }
        _ => {
            let a = split(k);
            let mut sum = 0u128;
            let mut search = FactorSearch::new(cols, n, a);
            search.run(0, &mut |factor, rest| sum += fixed(factor, n, a) * fixed(rest, n, k - a));
            sum
        }
    }
}

/// P_3 below column `i`: the sum of P_2(G - M) over the perfect matchings
/// M that agree with the digits taken so far (`used`, removed from `rest`).
fn matchings3(cols: &Columns, n: usize, i: usize, used: u16, rest: &mut Columns) -> u128 {
    if i == n {
        return 1u128 << (cycles(rest, n) - 1);
    }
    let mut sum = 0;
    let mut free = cols[i] & !used;
    while free != 0 {
        let bit = free & free.wrapping_neg();
        free &= free - 1;
        rest[i] = cols[i] & !bit;
        sum += matchings3(cols, n, i + 1, used | bit, rest);
    }
    rest[i] = cols[i];
    sum
}

/// A depth-first search for the a-factors that take column 0's a smallest
/// digits: column by column, a of the column's digits, keeping every digit
/// able to reach a.
struct FactorSearch<'g> {
    cols: &'g Columns,
    n: usize,
    a: u32,
    /// Digits taken by K so far, per column.
    chosen: Columns,
    /// How many times K has taken each digit so far.
    load: [u32; MAX_COLS],
    /// later[i][d]: how many columns after i (i + 1..n) are joined to digit d.
    later: [[u32; MAX_COLS]; MAX_COLS],
}

impl<'g> FactorSearch<'g> {
    fn new(cols: &'g Columns, n: usize, a: usize) -> Self {
        let mut later = [[0u32; MAX_COLS]; MAX_COLS];
        for i in (0..n.saturating_sub(1)).rev() {
            later[i] = later[i + 1];
            let mut s = cols[i + 1];
            while s != 0 {
                later[i][s.trailing_zeros() as usize] += 1;
                s &= s - 1;
            }
        }
        FactorSearch { cols, n, a: a as u32, chosen: [0; MAX_COLS], load: [0; MAX_COLS], later }
    }

    fn take(&mut self, i: usize, mask: u16) {
        self.chosen[i] = mask;
        let mut s = mask;
        while s != 0 {
            self.load[s.trailing_zeros() as usize] += 1;
            s &= s - 1;
        }
    }

    fn give_back(&mut self, i: usize) {
        let mut s = self.chosen[i];
        while s != 0 {
            self.load[s.trailing_zeros() as usize] -= 1;
            s &= s - 1;
        }
        self.chosen[i] = 0;
    }

    /// The masks column i may take: (forced digits, allowed digits). A digit
    /// is forced when it needs every remaining column, allowed while it
    /// still needs one; column 0 takes exactly its a smallest digits.
    fn options(&self, i: usize) -> (u16, u16) {
        if i == 0 {
            let first = lowest(self.cols[0], self.a);
            return (first, first);
        }
        let (mut forced, mut allowed) = (0u16, 0u16);
        let mut s = self.cols[i];
        while s != 0 {
            let d = s.trailing_zeros() as usize;
            s &= s - 1;
            let need = self.a - self.load[d];
            if need > 0 {
                allowed |= 1 << d;
                if need > self.later[i][d] {
                    forced |= 1 << d;
                }
            }
        }
        (forced, allowed)
    }

    /// Every mask column i may take: `forced` plus enough of the rest.
    fn each_choice(&self, i: usize, mut visit: impl FnMut(u16)) {
        let (forced, allowed) = self.options(i);
        if forced & !allowed != 0 || forced.count_ones() > self.a {
            return;
        }
        let free = allowed & !forced;
        let want = self.a - forced.count_ones();
        if free.count_ones() < want {
            return;
        }
        // Every subset of `free` with `want` bits, by the usual submask walk.
        let mut sub = free;
        loop {
            if sub.count_ones() == want {
                visit(forced | sub);
            }
            if sub == 0 {
                break;
            }
            sub = (sub - 1) & free;
        }
    }

    fn run(&mut self, i: usize, visit: &mut impl FnMut(&Columns, &Columns)) {
        if i == self.n {
            let mut rest = *self.cols;
            for (r, &k) in rest.iter_mut().zip(&self.chosen) {
                *r &= !k;
            }
            visit(&self.chosen, &rest);
            return;
        }
        let mut masks = [0u16; 1 << 6];
        let mut count = 0;
        self.each_choice(i, |mask| {
            masks[count] = mask;
            count += 1;
        });
        for &mask in &masks[..count] {
            self.take(i, mask);
            self.run(i + 1, visit);
            self.give_back(i);
        }
    }

    fn prefixes(&mut self, i: usize, stop: usize, path: &mut Vec<u16>, found: &mut Vec<Vec<u16>>) {
        if i == stop {
            found.push(path.clone());
            return;
        }
        let mut masks = Vec::new();
        self.each_choice(i, |mask| masks.push(mask));
        for mask in masks {
            self.take(i, mask);
            path.push(mask);
            self.prefixes(i + 1, stop, path, found);
            path.pop();
            self.give_back(i);
        }
    }
}

/// Cycles of a 2-regular graph (every column and digit of degree 2).
///
/// Each column joins its two digits, so the digits with the columns as
/// edges form the same cycles; count them as n minus the columns that join
/// two different components (union-find on at most 12 digits). This is
/// the innermost loop of every count, hence no allocation and no branches
/// beyond the finds.
fn cycles(cols: &Columns, n: usize) -> u32 {
    let mut parent: [u8; MAX_COLS] = std::array::from_fn(|d| d as u8);
    let find = |parent: &mut [u8; MAX_COLS], mut d: usize| {
        while parent[d] as usize != d {
            let up = parent[parent[d] as usize];
            parent[d] = up;
            d = up as usize;
        }
        d
    };
    let mut merges = 0;
    for &set in &cols[..n] {
        let lo = set.trailing_zeros() as usize;
        let hi = (set & (set - 1)).trailing_zeros() as usize;
        let (a, b) = (find(&mut parent, lo), find(&mut parent, hi));
        if a != b {
            parent[a] = b as u8;
            merges += 1;
        }
    }
    (n - merges) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bands by brute force: fill the c x 2c array row by row, cell by cell.
    fn bands_by_rows(sets: &ColumnSets) -> u128 {
        fn go(cols: &mut [u16], c: usize, cell: usize, row_used: u16) -> u128 {
            let n = cols.len();
            if cell == c * n {
                return 1;
            }
            let i = cell % n;
            let used = if i == 0 { 0 } else { row_used };
            let mut total = 0;
            let mut free = cols[i] & !used;
            while free != 0 {
                let d = free.trailing_zeros();
                free &= free - 1;
                cols[i] &= !(1 << d);
                total += go(cols, c, cell + 1, used | (1 << d));
                cols[i] |= 1 << d;
            }
            total
        }
        let mut cols = sets.columns();
        go(&mut cols, sets.c(), 0, 0)
    }

    #[test]
    fn two_by_two_hand_check() {
        // docs/mathematics.md, the 2x2 hand check: with A_1 = {1,2}, A_2 = A_1 or its complement gives
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
    fn agrees_with_filling_the_band_cell_by_cell() {
        let cases: [(usize, &[u16]); 6] = [
            (3, &[0x07, 0x07, 0x07]),
            (3, &[0x07, 0x0b, 0x15]),
            (3, &[0x07, 0x38, 0x19]),
            (4, &[0x0f, 0x33, 0x55, 0x3c]),
            (4, &[0x0f, 0x0f, 0xf0, 0x0f]),
            (4, &[0x17, 0x2b, 0x4d, 0x8e]),
        ];
        for (c, sets) in cases {
            let sets = ColumnSets::new(c, sets.to_vec()).unwrap();
            assert_eq!(band_count(&sets), bands_by_rows(&sets), "{sets:?}");
        }
    }

    #[test]
    fn parts_add_up_to_the_whole() {
        for (c, sets) in [(2, vec![0x3, 0x5]), (3, vec![0x07, 0x0b, 0x15]), (4, vec![0x0f, 0x33, 0x55, 0x3c])] {
            let sets = ColumnSets::new(c, sets).unwrap();
            let parts = parts(&sets);
            assert!(parts.len() > 1, "{sets:?}");
            let sum: u128 = parts.iter().map(|prefix| part_count(&sets, prefix).unwrap()).sum();
            assert_eq!(sum, band_count(&sets), "{sets:?}");
        }
    }

    #[test]
    fn bad_parts_are_refused() {
        let sets = ColumnSets::new(4, vec![0x0f, 0x33, 0x55, 0x3c]).unwrap();
        // Column 0 holds 0x0f and is fixed to 0x03: 0x0c is not that, 0x07
        // has 3 bits, 0x30 is not in the column.
        for prefix in [&[][..], &[0x0c], &[0x07], &[0x30], &[0x03, 0x03, 0x03]] {
            assert!(part_count(&sets, prefix).is_err(), "{prefix:?}");
        }
    }
}
