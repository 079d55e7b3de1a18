//! b of every band whose first r - 1 stacks are given, whatever its last
//! stack, by colouring: a band is the rows' colours of each column's r
//! digits (a bijection per column) such that each digit takes r different
//! colours, one per stack. Colouring the first r - 1 stacks leaves each
//! digit one colour, and the digits missing colour c form a 3-set; the
//! last stack then has exactly one colouring, valid when each of those
//! r 3-sets is a transversal of its columns. So
//!
//!   b(prefix, Y) = sum over Y's transversal partitions Q of W(Q),
//!
//! W(Q) the colourings of the prefix whose missing colours split the
//! digits as Q. The colour names are fixed in the first column (every
//! colouring is one of r! relabellings of one so fixed), so W = r! x the
//! colourings counted.
//!
//! The colourings are counted in two steps. The columns before the
//! prefix's last stack are coloured and counted by the colours each digit
//! has then ([`States`]: many colourings share them, and for r = 4 they
//! depend only on the first two stacks, so a table computes them once a
//! node). Each state is then finished by the prefix's last stack, whose
//! three columns hold disjoint digits and so are coloured independently.

use super::{MAX_DIGITS, MAX_R, Splits, color_orders, partition_rank, partitions, transversal_partitions};

/// The most colour orders: r! for r = 4.
const MAX_ORDERS: usize = 24;

/// The colours each digit has (a bit per colour).
type Used = [u8; MAX_DIGITS];

/// The colourings of a prefix's columns before its last stack (the first
/// column's colours fixed), counted by the colours each digit then has.
pub(super) type States = Vec<(Used, u32)>;

pub(super) struct Colouring {
    r: usize,
    /// The r! colour orders.
    orders: Vec<[u8; MAX_R]>,
    /// For the colours already taken by a column's r digits (r bits each,
    /// digit i's at bits r i ..), the indexes in `orders` that give none of
    /// them a colour it has: `fits[starts[key]..starts[key + 1]]`.
    fits: Vec<u8>,
    starts: Vec<u32>,
    /// Per split, its transversal partitions' ranks.
    transversals: Vec<Vec<u16>>,
    partitions: usize,
}

impl Colouring {
    pub(super) fn new(r: usize, splits: &Splits) -> Colouring {
        let orders = color_orders(r);
        let mut fits = Vec::new();
        let mut starts = vec![0u32];
        for key in 0usize..1 << (r * r) {
            for (o, order) in orders.iter().enumerate() {
                if (0..r).all(|i| (key >> (r * i)) & (1 << order[i]) == 0) {
                    fits.push(o as u8);
                }
            }
            starts.push(fits.len() as u32);
        }
        let transversals = splits.labels.iter().map(|labels| transversal_partitions(r, labels)).collect();
        Colouring { r, orders, fits, starts, transversals, partitions: partitions(r) }
    }

    /// The prefix's columns, stack by stack, each as its r digits ascending.
    fn columns(&self, prefix: &[&[u8; MAX_DIGITS]]) -> Vec<[u8; MAX_R]> {
        let n = 3 * self.r;
        let mut columns: Vec<[u8; MAX_R]> = Vec::with_capacity(3 * prefix.len());
        for labels in prefix {
            for c in 0..3u8 {
                let mut column = [0u8; MAX_R];
                let digits = (0..n as u8).filter(|&d| labels[usize::from(d)] == c);
                for (slot, d) in column.iter_mut().zip(digits) {
                    *slot = d;
                }
                columns.push(column);
            }
        }
        columns
    }

    /// Where the columns of the prefix's last stack begin (after column 0,
    /// whose colours are fixed, when the prefix is one stack).
    fn last_stack(columns: &[[u8; MAX_R]]) -> usize {
        columns.len().saturating_sub(3).max(1)
    }

    /// The [`States`] of the prefix: they depend on its stacks before the
    /// last (and its first column) only.
    pub(super) fn states(&self, prefix: &[&[u8; MAX_DIGITS]]) -> States {
        let columns = self.columns(prefix);
        let mut used = [0u8; MAX_DIGITS];
        // The first column's colours fixed: 0, 1, .., r - 1 in order.
        for (i, &d) in columns[0][..self.r].iter().enumerate() {
            used[usize::from(d)] = 1 << i;
        }
        let mut states = rustc_hash::FxHashMap::default();
        self.colour(&columns[..Self::last_stack(&columns)], 1, &mut used, &mut states);
        states.into_iter().collect()
    }

    /// b of (prefix, y) for every split y, the prefix's r - 1 splits given
    /// as column labels and `states` as [`Colouring::states`] gives them.
    pub(super) fn row(&self, prefix: &[&[u8; MAX_DIGITS]], states: &States) -> Vec<u32> {
        let columns = self.columns(prefix);
        let tail = &columns[Self::last_stack(&columns)..];
        // W(Q) of a partition is at most b / r! of a band whose last stack
        // Q is a transversal partition of: below 2^23 (r <= 4).
        let mut w = vec![0u32; self.partitions];
        for (used, count) in states {
            self.finish(tail, used, *count, &mut w);
        }
        let factor = self.orders.len() as u32;
        self.transversals.iter().map(|ranks| factor * ranks.iter().map(|&q| w[usize::from(q)]).sum::<u32>()).collect()
    }

    /// Colours `columns` from `t` on, and counts the colourings by the
    /// colours each digit has at the end.
    fn colour(
        &self,
        columns: &[[u8; MAX_R]],
        t: usize,
        used: &mut Used,
        states: &mut rustc_hash::FxHashMap<Used, u32>,
    ) {
        let r = self.r;
        if t == columns.len() {
            *states.entry(*used).or_default() += 1;
            return;
        }
        let column = &columns[t];
        let key = (0..r).fold(0usize, |key, i| key | usize::from(used[usize::from(column[i])]) << (r * i));
        for &o in &self.fits[self.starts[key] as usize..self.starts[key + 1] as usize] {
            let order = &self.orders[usize::from(o)];
            for i in 0..r {
                used[usize::from(column[i])] |= 1 << order[i];
            }
            self.colour(columns, t + 1, used, states);
            for i in 0..r {
                used[usize::from(column[i])] &= !(1 << order[i]);
            }
        }
    }

    /// Adds `count` to W of each partition the colourings of the `tail`
    /// columns (the prefix's last stack, or its columns after the first)
    /// leave, each digit's colours so far in `used`: each column's
    /// colourings are listed as the missing colours they give its digits
    /// (the digits missing colour c in bits 16 c ..), and the partitions
    /// are their combinations.
    fn finish(&self, tail: &[[u8; MAX_R]], used: &Used, count: u32, w: &mut [u32]) {
        let r = self.r;
        let full = (1u8 << r) - 1;
        let missing = |d: u8, also: u8| u64::from((full & !(used[usize::from(d)] | also)).trailing_zeros());
        // The digits outside the tail miss one colour already.
        let mut base = 0u64;
        let in_tail = tail.iter().flat_map(|column| &column[..r]).fold(0u16, |mask, &d| mask | 1 << d);
        for d in (0..3 * r as u8).filter(|&d| in_tail & (1 << d) == 0) {
            base |= 1 << (16 * missing(d, 0) + u64::from(d));
        }
        // On the stack: this runs once a state of every coloured row, and
        // three vectors' allocations were a tenth of the fill.
        let mut options = [[0u64; MAX_ORDERS]; 3];
        let mut sizes = [0usize; 3];
        for ((column, options), size) in tail.iter().zip(&mut options).zip(&mut sizes) {
            let key = (0..r).fold(0usize, |key, i| key | usize::from(used[usize::from(column[i])]) << (r * i));
            for &o in &self.fits[self.starts[key] as usize..self.starts[key + 1] as usize] {
                let order = &self.orders[usize::from(o)];
                options[*size] = (0..r).fold(0u64, |blocks, i| {
                    blocks | 1 << (16 * missing(column[i], 1 << order[i]) + u64::from(column[i]))
                });
                *size += 1;
            }
        }
        if tail.len() < 3 {
            sizes[2] = 1;
        }
        for &a in &options[0][..sizes[0]] {
            for &b in &options[1][..sizes[1]] {
                for &c in &options[2][..sizes[2]] {
                    let blocks: [u16; MAX_R] =
                        std::array::from_fn(|colour| ((base | a | b | c) >> (16 * colour)) as u16);
                    w[partition_rank(&blocks[..r], 3 * r)] += count;
                }
            }
        }
    }
}
