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
//! each with column 0 fixed). Applied again to the rest, this cuts the rows
//! into blocks of one or two rows: 1 + 1 for 2 x 2, 1 + 2, 2 + 2, 1 + 2 + 2
//! for 2 x 5 and 2 + 2 + 2 for 2 x 6 (see `split`). A 1-row block is a
//! perfect matching and P_1 = 1; a 2-row block is a 2-factor and
//! P_2 = 2^(cycles - 1): each even cycle alternates its two rows in two
//! ways, except column 0's, which is fixed. So F is c! times a sum over
//! the ways to cut G into the blocks' factors of 2^(sum of cycles - 1).
//!
//! How that sum is searched, and what each step bought (BENCHMARKS.md):
//!
//! - Blocks of two rows, not halves: each leaf stands for 2^(cycles - 1)
//!   decompositions at once, so there are fewer leaves than with 3 + 3.
//! - Cycles are counted as they close (`Walk`): each path of a block's
//!   edges knows its two ends, so an edge closes a cycle exactly when it
//!   joins the two ends of one path, and a leaf does not walk a graph.
//! - Columns are searched in an order where each next column's digits have
//!   been seen most (`Level::new`): digits run out of columns early, so a
//!   digit that must take a block's edge now is forced early and few
//!   branches die late. This halved the time on its own.
//! - For 2 x 5, 1 + (2 + 2) rather than 2 + (1 + 2): the inner 2 + 2
//!   search has forced choices on both sides.

use std::sync::atomic::{AtomicBool, Ordering};

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
    band_count_cancellable(sets, &NEVER).expect("never cancelled")
}

/// A flag no one sets: the plain counts are their cancellable forms with it.
static NEVER: AtomicBool = AtomicBool::new(false);

/// [`band_count`], or `None` when `cancel` is set before it is done. The
/// flag is read between the searches of the last level (for 2 x 5 and 2 x 6,
/// milliseconds apart), so a count stops well within a second.
pub fn band_count_cancellable(sets: &ColumnSets, cancel: &AtomicBool) -> Option<u128> {
    let (cols, n) = graph(sets);
    Decomposer::new(sets.c(), &[], cancel).count(&cols, n)
}

/// How many leading columns a part fixes: a part is the set of top-level
/// factors K that agree with a given choice on columns 0..PART_COLUMNS.
pub const PART_COLUMNS: usize = 2;

/// The parts F(S) splits into: every choice of the first block's factor K
/// (the first a rows' digits, a = 2 for c = 4 and 6, else 1, see `split`)
/// on the first [`PART_COLUMNS`] columns, as one digit mask per column,
/// that passes the degree checks. F(S) is the sum of [`part_count`] over
/// them; some parts may count 0.
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

/// One part of F(S): the bands whose first a rows (a = 2 for c = 4 and 6,
/// else 1) take, in column i < `prefix.len()`, exactly the digits
/// `prefix[i]`, counted with column 0 fixed and multiplied by c! (so
/// `prefix[0]` must be column 0's a smallest digits, and the parts of all
/// prefixes add up to F(S)).
pub fn part_count(sets: &ColumnSets, prefix: &[u16]) -> Result<u128, ShapeError> {
    part_count_cancellable(sets, prefix, &NEVER).map(|count| count.expect("never cancelled"))
}

/// [`part_count`], or `Ok(None)` when `cancel` is set before it is done.
pub fn part_count_cancellable(
    sets: &ColumnSets,
    prefix: &[u16],
    cancel: &AtomicBool,
) -> Result<Option<u128>, ShapeError> {
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
    Ok(Decomposer::new(k, prefix, cancel).count(&cols, n))
}

fn graph(sets: &ColumnSets) -> (Columns, usize) {
    let mut cols = [0u16; MAX_COLS];
    let listed = sets.columns();
    cols[..listed.len()].copy_from_slice(&listed);
    (cols, listed.len())
}

/// How many of k rows the first block takes, the block a part fixes: 2
/// for k = 4 and 6 (the rows then fall into 2-factors, each weighing
/// 2^(cycles - 1) at once), else 1 (a perfect matching, leaving an even
/// number of rows).
fn split(k: usize) -> usize {
    if k >= 4 && k.is_multiple_of(2) { 2 } else { 1 }
}

/// The `a` lowest bits of `mask`.
fn lowest(mask: u16, a: u32) -> u16 {
    let mut rest = mask;
    for _ in 0..a {
        rest &= rest.wrapping_sub(1);
    }
    mask & !rest
}

/// Counts c! x P_c(G) by cutting the rows into blocks of two (one where the
/// count is odd, and the first block of one row below c = 4, see `split`):
/// each level is a depth-first search, column by column, for the a-factors
/// of what the levels above left (a = the block's rows) through column 0's
/// a smallest digits; when what is left is one last block of one or two
/// rows, a leaf only tallies its weight, the product of 2^(cycles - 1) over
/// the 2-row blocks. Cycles are counted as they close (see [`Walk`]), so no
/// leaf walks a graph.
struct Decomposer<'p> {
    c: usize,
    prefix: &'p [u16],
    cancel: &'p AtomicBool,
    /// Leaves by the exponent of their weight.
    tally: [u64; 4 * MAX_C],
}

impl<'p> Decomposer<'p> {
    fn new(c: usize, prefix: &'p [u16], cancel: &'p AtomicBool) -> Self {
        Decomposer { c, prefix, cancel, tally: [0; 4 * MAX_C] }
    }

    /// `None` when cancelled: the tally is then partial and is dropped.
    fn count(mut self, cols: &Columns, n: usize) -> Option<u128> {
        let (prefix, cancel, tally) = (self.prefix, self.cancel, &mut self.tally);
        let start = Walk::start();
        // The blocks, as (rows of the first, rows after it): 1 + 1, 1 + 2,
        // 2 + 2, 1 + (2 + 2), 2 + (2 + 2); `split` names the first.
        match self.c {
            2 => Level::<1, 1>::new(cols, n, prefix, cancel).search(0, start, 0, tally),
            3 => Level::<1, 2>::new(cols, n, prefix, cancel).search(0, start, 0, tally),
            4 => Level::<2, 2>::new(cols, n, prefix, cancel).search(0, start, 0, tally),
            5 => Level::<1, 4>::new(cols, n, prefix, cancel).search(0, start, 0, tally),
            _ => Level::<2, 4>::new(cols, n, prefix, cancel).search(0, start, 0, tally),
        }
        if cancel.load(Ordering::Relaxed) {
            return None;
        }
        let sum: u128 = self.tally.iter().enumerate().map(|(e, &leaves)| u128::from(leaves) << e).sum();
        let factorial: u128 = (1..=self.c as u128).product();
        Some(factorial * sum)
    }
}

/// One level of the search: the A-factors of an (A + LEFT)-regular graph
/// (constants, so each level's search is compiled for its block sizes).
struct Level<'p, const A: u32, const LEFT: u32> {
    cols: Columns,
    n: usize,
    /// Per column: its digits in no later column, and in exactly one.
    last: Columns,
    next_to_last: Columns,
    /// The factor's digits in the first `prefix.len()` columns (a part).
    prefix: &'p [u16],
    /// Read before each search of the level below: set, the search stops.
    cancel: &'p AtomicBool,
    /// The factor's digits per column, set on the way down.
    chosen: Columns,
}

/// A search's position: loads of the digits in this level's factor and
/// the paths of the 2-row blocks it tracks. `Copy`, passed down by value.
#[derive(Clone, Copy)]
struct Walk {
    /// Digits with the factor's a edges all placed, and (a = 2) with one.
    full: u16,
    half: u16,
    /// For a digit at the end of a path of the factor's edges (a = 2), the
    /// digit at the other end; an untouched digit is its own end. Closing a
    /// cycle is then one comparison, not a walk.
    own: [u8; MAX_COLS],
    /// The same for the last block, what the factor leaves, when that is
    /// a 2-factor.
    rest: [u8; MAX_COLS],
    cycles: u32,
}

impl Walk {
    fn start() -> Walk {
        let alone = std::array::from_fn(|d| d as u8);
        Walk { full: 0, half: 0, own: alone, rest: alone, cycles: 0 }
    }
}

/// Joins x and y in a path structure (see [`Walk::own`]); true when the
/// edge closes a cycle.
fn link(ends: &mut [u8; MAX_COLS], x: usize, y: usize) -> bool {
    if ends[x] as usize == y {
        return true;
    }
    let (ex, ey) = (ends[x], ends[y]);
    ends[ex as usize] = ey;
    ends[ey as usize] = ex;
    false
}

/// The two digits of a 2-digit mask.
fn pair(mask: u16) -> (usize, usize) {
    (mask.trailing_zeros() as usize, (mask & (mask - 1)).trailing_zeros() as usize)
}

impl<'p, const A: u32, const LEFT: u32> Level<'p, A, LEFT> {
    fn new(cols: &Columns, n: usize, prefix: &'p [u16], cancel: &'p AtomicBool) -> Self {
        // Column 0 and a part's columns stay first; then, greedily, the
        // column whose digits were seen most (the sum of the squares of
        // their times seen so far), so digits run out of columns early and
        // the forced choices prune early.
        let mut cols = *cols;
        let mut times = [0u32; MAX_COLS];
        for i in 0..n {
            if i > prefix.len().max(1) - 1 {
                let score = |j: usize| {
                    (0..MAX_COLS).filter(|&d| cols[j] >> d & 1 == 1).map(|d| times[d] * times[d]).sum::<u32>()
                };
                let best = (i..n).max_by_key(|&j| (score(j), std::cmp::Reverse(j))).unwrap();
                cols.swap(i, best);
            }
            for (d, t) in times.iter_mut().enumerate() {
                *t += u32::from(cols[i] >> d & 1 == 1);
            }
        }
        let cols = &cols;
        let (mut last, mut next_to_last) = ([0u16; MAX_COLS], [0u16; MAX_COLS]);
        let (mut once, mut twice) = (0u16, 0u16);
        for i in (0..n).rev() {
            last[i] = cols[i] & !once;
            next_to_last[i] = cols[i] & once & !twice;
            twice |= once & cols[i];
            once |= cols[i];
        }
        Level { cols: *cols, n, last, next_to_last, prefix, cancel, chosen: [0; MAX_COLS] }
    }

    fn search(&mut self, i: usize, at: Walk, base: u32, tally: &mut [u64; 4 * MAX_C]) {
        if i == self.n {
            // Each 2-row block weighs 2^(cycles - 1).
            let exponent = base + at.cycles - u32::from(A == 2) - u32::from(LEFT == 2);
            if LEFT <= 2 {
                tally[exponent as usize] += 1;
                return;
            }
            // The searches below are the bulk of a 2 x 5 or 2 x 6 count,
            // each milliseconds long: the place to notice a cancellation.
            if self.cancel.load(Ordering::Relaxed) {
                return;
            }
            let mut rest = self.cols;
            for (r, &taken) in rest.iter_mut().zip(&self.chosen) {
                *r &= !taken;
            }
            // Only 4 rows are ever left for another level: 2 + 2.
            Level::<2, 2>::new(&rest, self.n, &[], self.cancel).search(0, Walk::start(), exponent, tally);
            return;
        }
        let cols = self.cols[i];
        let allowed = cols & !at.full;
        let untouched = allowed & !at.half;
        let forced = if A == 1 {
            allowed & self.last[i]
        } else {
            (untouched & (self.last[i] | self.next_to_last[i])) | (at.half & self.last[i])
        };
        if i == 0 || i < self.prefix.len() {
            let mask = if i == 0 { lowest(cols, A) } else { self.prefix[i] };
            if mask & !allowed != 0 || forced & !mask != 0 {
                return;
            }
            if i == 0 && self.prefix.first().is_some_and(|&first| first != mask) {
                return;
            }
            self.take(i, mask, at, base, tally);
            return;
        }
        if i + 1 == self.n && LEFT <= 2 {
            // The last column takes every digit the factor still needs, so
            // count the leaf here instead of one call further down.
            // Its edges close the last cycle of each 2-row block: before
            // them, every digit but an edge's two has both of its edges, so
            // the block's one path runs between those two. The weight is
            // then 2^(cycles so far + one per 2-row block - one per 2-row
            // block).
            if allowed.count_ones() == A {
                tally[(base + at.cycles) as usize] += 1;
            }
            return;
        }
        let want = A as i32 - forced.count_ones() as i32;
        let free = allowed & !forced;
        if want < 0 || (free.count_ones() as i32) < want {
            return;
        }
        match want {
            0 => self.take(i, forced, at, base, tally),
            1 => {
                let mut bits = free;
                while bits != 0 {
                    let bit = bits & bits.wrapping_neg();
                    bits &= bits - 1;
                    self.take(i, forced | bit, at, base, tally);
                }
            }
            _ => {
                let mut first_bits = free;
                while first_bits != 0 {
                    let first = first_bits & first_bits.wrapping_neg();
                    first_bits &= first_bits - 1;
                    let mut second_bits = first_bits;
                    while second_bits != 0 {
                        let second = second_bits & second_bits.wrapping_neg();
                        second_bits &= second_bits - 1;
                        self.take(i, first | second, at, base, tally);
                    }
                }
            }
        }
    }

    /// Column i gives `mask` to the factor and the rest of its digits to
    /// what is left.
    fn take(&mut self, i: usize, mask: u16, at: Walk, base: u32, tally: &mut [u64; 4 * MAX_C]) {
        let mut next = at;
        if A == 1 {
            next.full |= mask;
        } else {
            next.full |= mask & at.half;
            next.half ^= mask;
            let (x, y) = pair(mask);
            next.cycles += u32::from(link(&mut next.own, x, y));
        }
        if LEFT == 2 {
            let (x, y) = pair(self.cols[i] & !mask);
            next.cycles += u32::from(link(&mut next.rest, x, y));
        }
        self.chosen[i] = mask;
        self.search(i + 1, next, base, tally);
    }
}

/// A depth-first search for the a-factors that take column 0's a smallest
/// digits: column by column, a of the column's digits, keeping every digit
/// able to reach a.
struct FactorSearch<'g> {
    cols: &'g Columns,
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
        FactorSearch { cols, a: a as u32, chosen: [0; MAX_COLS], load: [0; MAX_COLS], later }
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
