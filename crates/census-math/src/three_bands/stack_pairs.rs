//! G by table reads over stack pairs: Silver's structure for 4 x 3 boxes
//! (github.com/GizmoBill/Sudoku4x3, `Sudoku3x4.cpp` and `log.pdf`; the
//! method only, see `/work/shared/twelve.md`), for any r of [`super`].
//!
//! b depends on a band's stacks only as *splits*: each stack's three
//! columns as an unordered partition of the n digits into r-sets (5,775
//! for r = 4). Relabelling the digits maps any band to one whose stack 0 is
//! the plain split ({0..r}, {r..2r}, {2r..3r}) and whose stack 1 is one of
//! a few *node* splits (the plain split's stabilizer acting on the second
//! stack leaves as many orbits as there are 3 x 3 intersection matrices up
//! to row and column order: 9 for r = 4). So
//!
//!   b(band) = table[node][split 2 renamed][split 3 renamed],
//!
//! a table of nodes x splits^2 (9 x 5,775^2 entries for r = 4, 16-bit
//! numbers of its distinct values: 600 MB). A row of it (node and split 2) is filled whole, by colouring
//! (`Colouring`: no class lookups and no per-class b), the first time a
//! term reads it; rows that a relabelling keeping the node maps onto each
//! other are coloured once (`NodeOrbits`). A term of G is then two reads
//! and a multiply-add: for each choice of the middle band's first two
//! stacks (and so the bottom band's) the renaming is found once, and
//! applied to the 346 choices of each of the last two stacks; the inner
//! loop runs over the last stack's choices along two table rows.
//!
//! Swapping the middle and bottom bands maps the choices onto themselves
//! without fixed points and keeps each term, so only the first-stack
//! choices whose middle columns precede their bottom columns are summed,
//! twice. For r = 4 the relabellings that keep a group's first three
//! stacks also map the choices of the first two onto each other
//! (`symmetry`): the rows are read once for each orbit.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use super::{MAX_DIGITS, MAX_R, Pattern, ThreeBandError, check_r};

mod blocks;
mod colouring;
mod group;
mod symmetry;
mod values;

use colouring::Colouring;

/// r! by r: the orders of a band's rows.
const ROW_ORDERS: [u32; MAX_R + 1] = [1, 1, 2, 6, 24];

/// A digit permutation: digit d goes to `perm[d]`.
type Perm = [u8; MAX_DIGITS];

/// The splits of n = 3r digits into three r-sets, their numbering and the
/// renamings that bring a pair of stacks to (plain split, node).
struct Splits {
    n: usize,
    /// Each split as each digit's column, columns numbered in order of the
    /// digits' first appearance (so digit 0 is in column 0).
    labels: Vec<[u8; MAX_DIGITS]>,
    /// Each split's columns as digit masks, in the order of `labels`.
    masks: Vec<[u16; 3]>,
    /// The split index from a split's first two columns: the rank of the
    /// first (by its mask without digit 0, every first column holds digit
    /// 0), the rank of the second among the digits left (by its mask within
    /// them, without their least digit, which it holds), and the index by
    /// the two ranks.
    first_rank: Vec<u16>,
    second_rank: Vec<u16>,
    seconds: usize,
    by_ranks: Vec<u16>,
    /// Per split X: a permutation taking X to the plain split (index 0).
    to_plain: Vec<Perm>,
    /// Per split Z: its node and a permutation fixing the plain split that
    /// takes Z to the node's split.
    to_node: Vec<(u8, Perm)>,
    /// Each node's split.
    nodes: Vec<u16>,
}

impl Splits {
    fn new(r: usize) -> Splits {
        let n = 3 * r;
        let mut labels = Vec::new();
        let mut current = [0u8; MAX_DIGITS];
        enumerate(r, n, 0, [0; 3], 0, &mut current, &mut labels);
        let masks: Vec<[u16; 3]> = labels.iter().map(|split| column_masks(n, split)).collect();
        let mut first_rank = vec![u16::MAX; 1 << (n - 1)];
        let mut second_rank = vec![u16::MAX; 1 << (2 * r - 1)];
        let (mut firsts, mut seconds) = (0u16, 0u16);
        for &[first, second, _] in &masks {
            let slot = &mut first_rank[usize::from(first >> 1)];
            if *slot == u16::MAX {
                *slot = firsts;
                firsts += 1;
            }
            let slot = &mut second_rank[usize::from(within(second, !first) >> 1)];
            if *slot == u16::MAX {
                *slot = seconds;
                seconds += 1;
            }
        }
        let seconds = usize::from(seconds);
        let mut by_ranks = vec![u16::MAX; usize::from(firsts) * seconds];
        for (i, &[first, second, _]) in masks.iter().enumerate() {
            let rank = usize::from(first_rank[usize::from(first >> 1)]) * seconds
                + usize::from(second_rank[usize::from(within(second, !first) >> 1)]);
            by_ranks[rank] = i as u16;
        }
        let mut splits = Splits {
            n,
            labels,
            masks,
            first_rank,
            second_rank,
            seconds,
            by_ranks,
            to_plain: Vec::new(),
            to_node: Vec::new(),
            nodes: Vec::new(),
        };
        splits.to_plain = splits.labels.iter().map(|split| plain_permutation(r, n, split)).collect();
        let mut matrices: Vec<[u8; 9]> = Vec::new();
        let mut to_node = Vec::with_capacity(splits.labels.len());
        for z in 0..splits.labels.len() {
            let (matrix, perm) = node_permutation(r, n, &splits.labels[z]);
            let node = match matrices.iter().position(|m| *m == matrix) {
                Some(node) => node,
                None => {
                    matrices.push(matrix);
                    splits.nodes.push(splits.apply(&perm, z as u16));
                    matrices.len() - 1
                }
            };
            to_node.push((node as u8, perm));
        }
        splits.to_node = to_node;
        splits
    }

    fn count(&self) -> usize {
        self.labels.len()
    }

    /// The split `split` after relabelling digit d as perm[d].
    fn apply(&self, perm: &Perm, split: u16) -> u16 {
        let from = &self.labels[usize::from(split)];
        let mut moved = [0u8; MAX_DIGITS];
        for d in 0..self.n {
            moved[usize::from(perm[d])] = from[d];
        }
        self.index_of(&moved)
    }

    /// The index of a split given by any column labels.
    fn index_of(&self, labels: &[u8; MAX_DIGITS]) -> u16 {
        let [a, b, c] = column_masks(self.n, labels);
        self.index_of_masks(a, b, c)
    }

    /// The index of the split whose columns are the digit masks a, b, c (any order).
    #[inline]
    fn index_of_masks(&self, a: u16, b: u16, c: u16) -> u16 {
        // The column holding digit 0, then the one holding the least digit left.
        let (first, x, y) = if a & 1 != 0 {
            (a, b, c)
        } else if b & 1 != 0 {
            (b, a, c)
        } else {
            (c, a, b)
        };
        let second = if x.trailing_zeros() < y.trailing_zeros() { x } else { y };
        let rank = usize::from(self.first_rank[usize::from(first >> 1)]) * self.seconds
            + usize::from(self.second_rank[usize::from(within(second, !first) >> 1)]);
        self.by_ranks[rank]
    }

    /// A relabelling ready to apply to many splits ([`Renamer::apply`]).
    fn renamer(&self, perm: &Perm) -> Renamer<'_> {
        let mut low = [0u16; 64];
        let mut high = [0u16; 64];
        for bits in 0..64usize {
            for d in (0..6).filter(|d| bits & (1 << d) != 0) {
                if d < self.n {
                    low[bits] |= 1 << perm[d];
                }
                if d + 6 < self.n {
                    high[bits] |= 1 << perm[d + 6];
                }
            }
        }
        Renamer { splits: self, low, high }
    }

    /// The node of the stack pair (x, y) and a permutation taking x to the
    /// plain split and y to the node's split.
    fn renaming(&self, x: u16, y: u16) -> (usize, Perm) {
        let first = &self.to_plain[usize::from(x)];
        let y = self.apply(first, y);
        let (node, second) = &self.to_node[usize::from(y)];
        let mut perm = [0u8; MAX_DIGITS];
        for d in 0..self.n {
            perm[d] = second[usize::from(first[d])];
        }
        (usize::from(*node), perm)
    }
}

/// A relabelling of the digits as masks: a digit mask's image is the
/// images of its low six digits and of its high six, by table.
struct Renamer<'a> {
    splits: &'a Splits,
    low: [u16; 64],
    high: [u16; 64],
}

impl Renamer<'_> {
    /// The split `split` after the relabelling ([`Splits::apply`] with its permutation).
    #[inline]
    fn apply(&self, split: u16) -> u16 {
        let moved = |mask: u16| self.low[usize::from(mask & 63)] | self.high[usize::from(mask >> 6)];
        let [a, b, c] = self.splits.masks[usize::from(split)];
        self.splits.index_of_masks(moved(a), moved(b), moved(c))
    }
}

/// The digit masks of a split's three columns, by label.
fn column_masks(n: usize, labels: &[u8; MAX_DIGITS]) -> [u16; 3] {
    let mut masks = [0u16; 3];
    for (d, &label) in labels[..n].iter().enumerate() {
        masks[usize::from(label)] |= 1 << d;
    }
    masks
}

/// The digits of `mask` numbered within `among` (the i-th least digit of
/// `among` is digit i); `mask` lies within `among`.
#[inline]
fn within(mask: u16, among: u16) -> u16 {
    // Six digits at a time by table: every relabelled row's entry looks
    // up a split this way, and a loop over the digits was a tenth of the fill.
    let (low, high) = (usize::from(among & 63), usize::from((among >> 6) & 63));
    let packed_low = u16::from(WITHIN_SIX[low][usize::from(mask & 63)]);
    let packed_high = u16::from(WITHIN_SIX[high][usize::from((mask >> 6) & 63)]);
    packed_low | packed_high << ONES[low]
}

/// [`within`] of six digits: `WITHIN_SIX[among][mask]`.
static WITHIN_SIX: [[u8; 64]; 64] = {
    let mut table = [[0u8; 64]; 64];
    let mut among = 0;
    while among < 64 {
        let mut mask = 0;
        while mask < 64 {
            let (mut out, mut place, mut digit) = (0u8, 0, 0);
            while digit < 6 {
                if among & (1 << digit) != 0 {
                    out |= (((mask >> digit) & 1) as u8) << place;
                    place += 1;
                }
                digit += 1;
            }
            table[among][mask] = out;
            mask += 1;
        }
        among += 1;
    }
    table
};

/// Every split in canonical labels, in lexicographic order (the plain split first).
fn enumerate(
    r: usize,
    n: usize,
    d: usize,
    sizes: [usize; 3],
    opened: u8,
    current: &mut [u8; MAX_DIGITS],
    out: &mut Vec<[u8; MAX_DIGITS]>,
) {
    if d == n {
        out.push(*current);
        return;
    }
    for column in 0..=opened.min(2) {
        let c = usize::from(column);
        if sizes[c] == r {
            continue;
        }
        current[d] = column;
        let mut next = sizes;
        next[c] += 1;
        enumerate(r, n, d + 1, next, opened.max(column + 1), current, out);
    }
}

/// A permutation taking the split to the plain one: column c's digits, in
/// order, become c r, c r + 1, ...
fn plain_permutation(r: usize, n: usize, split: &[u8; MAX_DIGITS]) -> Perm {
    let mut perm = [0u8; MAX_DIGITS];
    let mut filled = [0usize; 3];
    for d in 0..n {
        let c = usize::from(split[d]);
        perm[d] = (c * r + filled[c]) as u8;
        filled[c] += 1;
    }
    perm
}

const ORDERS: [[usize; 3]; 6] = [[0, 1, 2], [0, 2, 1], [1, 0, 2], [1, 2, 0], [2, 0, 1], [2, 1, 0]];

/// The split's node (its intersection matrix with the plain split, least
/// over row and column orders) and a permutation fixing the plain split
/// that takes it to the node's split: the plain block `rows[a]` goes to
/// block a, and within each block the digits of column `columns[b]` go,
/// in order, to the places the node's split gives column b.
fn node_permutation(r: usize, n: usize, split: &[u8; MAX_DIGITS]) -> ([u8; 9], Perm) {
    let mut matrix = [[0u8; 3]; 3];
    for d in 0..n {
        matrix[d / r][usize::from(split[d])] += 1;
    }
    let mut best: Option<([u8; 9], [usize; 3], [usize; 3])> = None;
    for rows in &ORDERS {
        for columns in &ORDERS {
            let mut flat = [0u8; 9];
            for a in 0..3 {
                for b in 0..3 {
                    flat[3 * a + b] = matrix[rows[a]][columns[b]];
                }
            }
            if best.as_ref().is_none_or(|(least, _, _)| flat < *least) {
                best = Some((flat, *rows, *columns));
            }
        }
    }
    let (flat, rows, columns) = best.expect("36 orders");
    let mut perm = [0u8; MAX_DIGITS];
    for (a, &row) in rows.iter().enumerate() {
        // Block a of the node's split: its first flat[3a] digits in column
        // 0, the next flat[3a + 1] in column 1, the rest in column 2.
        let mut place = a * r;
        for &column in &columns {
            for d in row * r..(row + 1) * r {
                if usize::from(split[d]) == column {
                    perm[d] = place as u8;
                    place += 1;
                }
            }
        }
    }
    (flat, perm)
}

/// The middle band's choices in one stack given the top band's columns
/// there: each as (middle split, bottom split, whether the middle's
/// columns come before the bottom's as label lists), in the order of
/// [`stack_moves`].
fn stack_choices(r: usize, top: &[u8], splits: &Splits) -> Vec<(u16, u16, bool)> {
    let n = top.len();
    let mut out = Vec::new();
    for moves in stack_moves(r, top) {
        let mut middle = [0u8; MAX_DIGITS];
        let mut bottom = [0u8; MAX_DIGITS];
        for d in 0..n {
            middle[d] = (top[d] + shift(moves, d)) % 3;
            bottom[d] = 3 - top[d] - middle[d];
        }
        out.push((splits.index_of(&middle), splits.index_of(&bottom), middle[..n] < bottom[..n]));
    }
    out
}

/// The middle band's choices in one stack given the top band's columns
/// there, as *moves*: bit d set when digit d's middle column is one right
/// of its top column (mod 3), clear when two right. Ascending; the
/// bottom band's choice is the complement.
fn stack_moves(r: usize, top: &[u8]) -> Vec<u16> {
    let n = top.len();
    (0u16..(1 << n))
        .filter(|&moves| {
            let mut per_column = [0usize; 3];
            for d in 0..n {
                per_column[usize::from((top[d] + shift(moves, d)) % 3)] += 1;
            }
            per_column == [r; 3]
        })
        .collect()
}

/// How many columns right of its top column digit d's middle column is.
fn shift(moves: u16, d: usize) -> u8 {
    if moves & (1 << d) != 0 { 1 } else { 2 }
}

/// The partitions of the n = 3r digits into r unordered 3-sets, ranked
/// densely: the block of the least digit first (its other two digits as a
/// pair among the rest), then the block of the least digit left, and so on.
fn partitions(r: usize) -> usize {
    (0..r - 1).map(|t| pairs(3 * (r - t) - 1)).product()
}

/// C(m, 2).
fn pairs(m: usize) -> usize {
    m * (m - 1) / 2
}

/// The number of ones in each 12-bit mask. A table, not `count_ones`: the
/// portable x86-64 build has no popcount instruction, and its software
/// popcount was most of a table row's colouring (the ranks below).
static ONES: [u8; 1 << MAX_DIGITS] = {
    let mut ones = [0u8; 1 << MAX_DIGITS];
    let mut mask = 1;
    while mask < ones.len() {
        ones[mask] = ones[mask >> 1] + (mask & 1) as u8;
        mask += 1;
    }
    ones
};

/// The rank of the partition whose blocks are the disjoint 3-digit masks
/// `blocks` (any order), all n digits covered.
fn partition_rank(blocks: &[u16], n: usize) -> usize {
    let mut remaining: u16 = (1 << n) - 1;
    let mut left = n;
    let mut rank = 0;
    while left > 3 {
        let low = remaining & remaining.wrapping_neg();
        let block = *blocks.iter().find(|&&b| b & low != 0).expect("the blocks cover the digits");
        let rest = remaining & !low;
        let place = |digit: u16| usize::from(ONES[usize::from(rest & (digit - 1))]);
        let others = block & !low;
        let first = others & others.wrapping_neg();
        let (i, j) = (place(first), place(others & !first));
        rank = rank * pairs(left - 1) + j * (j - 1) / 2 + i;
        remaining &= !block;
        left -= 3;
    }
    rank
}

/// The ranks of a split's transversal partitions: r blocks, each taking
/// one digit of each of the split's three columns (r!^2 of them).
fn transversal_partitions(r: usize, labels: &[u8; MAX_DIGITS]) -> Vec<u16> {
    let n = 3 * r;
    let mut columns = [[0u8; MAX_R]; 3];
    let mut sizes = [0usize; 3];
    for (d, &label) in labels[..n].iter().enumerate() {
        let c = usize::from(label);
        columns[c][sizes[c]] = d as u8;
        sizes[c] += 1;
    }
    let orders = color_orders(r);
    let mut out = Vec::with_capacity(orders.len() * orders.len());
    for second in &orders {
        for third in &orders {
            let mut blocks = [0u16; MAX_R];
            for (i, block) in blocks.iter_mut().enumerate().take(r) {
                *block = 1 << columns[0][i]
                    | 1 << columns[1][usize::from(second[i])]
                    | 1 << columns[2][usize::from(third[i])];
            }
            out.push(partition_rank(&blocks[..r], n) as u16);
        }
    }
    out
}

/// The r! orders of 0..r.
fn color_orders(r: usize) -> Vec<[u8; MAX_R]> {
    let mut out = Vec::new();
    let mut order = [0u8; MAX_R];
    fn extend(r: usize, i: usize, used: u8, order: &mut [u8; MAX_R], out: &mut Vec<[u8; MAX_R]>) {
        if i == r {
            out.push(*order);
            return;
        }
        for c in 0..r as u8 {
            if used & (1 << c) == 0 {
                order[i] = c;
                extend(r, i + 1, used | (1 << c), order, out);
            }
        }
    }
    extend(r, 0, 0, &mut order, &mut out);
    out
}

/// The digit relabellings that keep the plain split and a node's split
/// (each as a partition): the orbits of the splits under them, and for
/// each split x a relabelling taking its orbit's first split to x.
struct NodeOrbits {
    first: Vec<u16>,
    to: Vec<Perm>,
}

impl NodeOrbits {
    fn new(r: usize, splits: &Splits, node_split: u16) -> NodeOrbits {
        let n = 3 * r;
        let node = &splits.labels[usize::from(node_split)];
        // cells[a][b]: the digits of plain block a in the node's column b.
        let mut cells: [[Vec<u8>; 3]; 3] = Default::default();
        for d in 0..n {
            cells[d / r][usize::from(node[d])].push(d as u8);
        }
        let identity: Perm = std::array::from_fn(|d| d as u8);
        let mut generators: Vec<Perm> = Vec::new();
        // Within a cell, any order: a transposition and a cycle.
        for cell in cells.iter().flatten().filter(|cell| cell.len() >= 2) {
            let mut swap = identity;
            swap.swap(usize::from(cell[0]), usize::from(cell[1]));
            generators.push(swap);
            let mut cycle = identity;
            for (i, &d) in cell.iter().enumerate() {
                cycle[usize::from(d)] = cell[(i + 1) % cell.len()];
            }
            generators.push(cycle);
        }
        // Blocks and columns reordered where the cells' sizes allow.
        for rows in &ORDERS {
            for columns in &ORDERS {
                if (0..3).all(|a| (0..3).all(|b| cells[rows[a]][columns[b]].len() == cells[a][b].len())) {
                    let mut perm = identity;
                    for a in 0..3 {
                        for b in 0..3 {
                            for (&from, &to) in cells[a][b].iter().zip(&cells[rows[a]][columns[b]]) {
                                perm[usize::from(from)] = to;
                            }
                        }
                    }
                    generators.push(perm);
                }
            }
        }
        let count = splits.count();
        let mut first = vec![u16::MAX; count];
        let mut to = vec![identity; count];
        let mut queue = Vec::new();
        for start in 0..count {
            if first[start] != u16::MAX {
                continue;
            }
            first[start] = start as u16;
            queue.push(start as u16);
            while let Some(z) = queue.pop() {
                for g in &generators {
                    let w = usize::from(splits.apply(g, z));
                    if first[w] == u16::MAX {
                        first[w] = start as u16;
                        let via = to[usize::from(z)];
                        to[w] = std::array::from_fn(|d| if d < n { g[usize::from(via[d])] } else { 0 });
                        queue.push(w as u16);
                    }
                }
            }
        }
        NodeOrbits { first, to }
    }
}

/// b of every band by its node and the renamed splits of its other stacks,
/// one per process and shared by every gangster it counts, on every
/// thread: its methods take `&self`. A row (node and the splits of stacks
/// 2 .. r-1) is filled whole when first read, by whichever thread reads it
/// first (the others wait for that row only): by colouring (`Colouring`)
/// for the first row of its orbit under the relabellings that keep the node
/// (`NodeOrbits`), by relabelling that row for the others. A filled row is
/// never written again, so reading it takes no lock.
pub struct StackPairTable {
    r: usize,
    splits: Splits,
    colouring: Colouring,
    /// For r = 4, per node.
    orbits: Vec<NodeOrbits>,
    /// b by row: for r = 4 a row is a node and the split of stack 2 and
    /// holds b for every split of stack 3; for r = 3 a row is a node and
    /// holds b for every split of stack 2; for r = 2 a row is a node and
    /// holds its one b. Entries are numbers of [`values::Values`].
    rows: Vec<OnceLock<Box<[u16]>>>,
    values: values::Values,
    /// The colourings of the rows' stacks but the last ([`colouring::States`]):
    /// for r = 4 one per node, made when a row of the node is first coloured.
    states: Vec<OnceLock<colouring::States>>,
    coloured: AtomicU64,
    relabelled: AtomicU64,
}

impl StackPairTable {
    /// An empty table for r x 3 boxes. Its rows take memory only as they
    /// are filled: at most nodes x splits^(r - 2) x 2 bytes, 600 MB for r = 4.
    pub fn new(r: usize) -> Result<StackPairTable, ThreeBandError> {
        check_r(r)?;
        let splits = Splits::new(r);
        let colouring = Colouring::new(r, &splits);
        let orbits = if r == 4 {
            splits.nodes.iter().map(|&node| NodeOrbits::new(r, &splits, node)).collect()
        } else {
            Vec::new()
        };
        let rows = if r == 4 { splits.nodes.len() * splits.count() } else { splits.nodes.len() };
        let prefixes = if r == 4 { splits.nodes.len() } else { 1 };
        Ok(StackPairTable {
            r,
            splits,
            colouring,
            orbits,
            rows: (0..rows).map(|_| OnceLock::new()).collect(),
            values: values::Values::new(),
            states: (0..prefixes).map(|_| OnceLock::new()).collect(),
            coloured: AtomicU64::new(0),
            relabelled: AtomicU64::new(0),
        })
    }

    /// The number of splits of the digits into three r-sets (5,775 for r = 4).
    pub fn splits(&self) -> usize {
        self.splits.count()
    }

    /// The number of nodes: stack pairs up to relabelling (9 for r = 4).
    pub fn nodes(&self) -> usize {
        self.splits.nodes.len()
    }

    /// Rows filled by colouring so far.
    pub fn rows_coloured(&self) -> u64 {
        self.coloured.load(Ordering::Relaxed)
    }

    /// Rows filled by relabelling a coloured row so far.
    pub fn rows_relabelled(&self) -> u64 {
        self.relabelled.load(Ordering::Relaxed)
    }

    /// Entries filled so far.
    pub fn filled(&self) -> u64 {
        self.rows.iter().filter_map(OnceLock::get).map(|row| row.len() as u64).sum()
    }

    /// Fills every row now (a worker that will count many gangsters pays
    /// the whole table once, up front). Reads `cancel` before each row.
    pub fn fill_all(&self, cancel: &AtomicBool) -> Result<(), ThreeBandError> {
        for row in 0..self.rows.len() {
            self.row(row, cancel)?;
        }
        Ok(())
    }

    fn row_of(&self, node: usize, x: u16) -> usize {
        if self.r == 4 { node * self.splits.count() + usize::from(x) } else { node }
    }

    /// A row, filled first if it is not yet.
    fn row(&self, row: usize, cancel: &AtomicBool) -> Result<&[u16], ThreeBandError> {
        if let Some(values) = self.rows[row].get() {
            return Ok(values);
        }
        // A coloured row takes tens of milliseconds: look at the flag before each.
        if cancel.load(Ordering::Relaxed) {
            return Err(ThreeBandError::Cancelled);
        }
        Ok(self.rows[row].get_or_init(|| self.fill(row)))
    }

    /// A row's values: b / r! of each band (the bands up to the order of
    /// their rows, which every band has r! of).
    fn fill(&self, row: usize) -> Box<[u16]> {
        let plain = &self.splits.labels[0];
        let node_split = |node: usize| &self.splits.labels[usize::from(self.splits.nodes[node])];
        match self.r {
            2 => {
                // b of (plain, node), the node's split as the last stack.
                let values = self.coloured(0, &[plain]);
                Box::new([values[usize::from(self.splits.nodes[row])]])
            }
            3 => self.coloured(0, &[plain, node_split(row)]),
            _ => {
                let k = self.splits.count();
                let (node, x) = (row / k, row % k);
                let (source, h) = self.source(node, x as u16);
                if source == row {
                    return self.coloured(node, &[plain, node_split(node), &self.splits.labels[x]]);
                }
                // b(plain, node, x, h y) = b(the source's three stacks, y).
                let never = AtomicBool::new(false);
                let source = self.row(source, &never).expect("never cancelled");
                let h = self.splits.renamer(&h);
                let mut values = vec![0u16; k].into_boxed_slice();
                for (y, &b) in source.iter().enumerate() {
                    values[usize::from(h.apply(y as u16))] = b;
                }
                self.relabelled.fetch_add(1, Ordering::Relaxed);
                values
            }
        }
    }

    /// The coloured row that row (node, x) is a relabelling of (r = 4), and
    /// a relabelling h with b(plain, node, x, h y) = that row's value at y.
    ///
    /// The row's values are b of the bands whose first three stacks are
    /// the plain split, the node's split and x, in any order (b does not
    /// change when stacks are permuted) and up to relabelling. Each ordered
    /// pair of the three is renamed to (plain, a node), the third split
    /// then to the first of its orbit under the relabellings that keep them
    /// ([`NodeOrbits`]): the least of the six rows so reached depends only
    /// on the three splits' class, and is the one row of the class that is
    /// coloured.
    fn source(&self, node: usize, x: u16) -> (usize, Perm) {
        let k = self.splits.count();
        let stacks = [0, self.splits.nodes[node], x];
        let mut best: Option<(usize, Perm, Perm)> = None;
        for (p, q, t) in [(0, 1, 2), (1, 0, 2), (0, 2, 1), (2, 0, 1), (1, 2, 0), (2, 1, 0)] {
            // to_pair takes stacks p, q to (plain, node n), t to third.
            let (n, to_pair) = self.splits.renaming(stacks[p], stacks[q]);
            let third = self.splits.apply(&to_pair, stacks[t]);
            let orbits = &self.orbits[n];
            let row = n * k + usize::from(orbits.first[usize::from(third)]);
            if best.as_ref().is_none_or(|&(least, ..)| row < least) {
                best = Some((row, to_pair, orbits.to[usize::from(third)]));
            }
        }
        let (row, to_pair, from_first) = best.expect("six orders");
        // from_first takes (plain, n, first) to (plain, n, third); undo to_pair.
        let mut back = [0u8; MAX_DIGITS];
        for (d, &image) in to_pair.iter().enumerate().take(self.splits.n) {
            back[usize::from(image)] = d as u8;
        }
        (row, std::array::from_fn(|d| if d < self.splits.n { back[usize::from(from_first[d])] } else { 0 }))
    }

    /// The numbers of b / r! of every band whose first r - 1 stacks are
    /// `prefix`, by colouring. Each b / r! is below 2^23 (the largest for
    /// r = 4 is 7,962,624), which keeps the sums of [`blocks`] within 64
    /// bits.
    /// The colourings of the prefix's stacks before its last are
    /// `self.states[node]` (r = 4; there is one for r = 2 and 3).
    fn coloured(&self, node: usize, prefix: &[&[u8; MAX_DIGITS]]) -> Box<[u16]> {
        self.coloured.fetch_add(1, Ordering::Relaxed);
        let orders = ROW_ORDERS[self.r];
        let states = self.states[node].get_or_init(|| self.colouring.states(prefix));
        let mut values = self.colouring.row(prefix, states);
        for value in &mut values {
            assert!(value.is_multiple_of(orders) && *value / orders < 1 << 23, "b = {value} for r = {}", self.r);
            *value /= orders;
        }
        self.values.numbers_of(&values)
    }

    /// G of the pattern's top band: the ways to complete it with a middle
    /// and a bottom band, the sum over the aligned middle bands of
    /// b(middle) x b(bottom). `cancel` is read once per choice of the first
    /// two stacks and before each row the table fills.
    pub fn completions(&self, pattern: &Pattern, cancel: &AtomicBool) -> Result<u128, ThreeBandError> {
        Ok(self.completions_of_group(std::slice::from_ref(pattern), 0, 1, cancel)?[0])
    }

    /// G of each pattern, the patterns counted together wherever their top
    /// bands share the first r - 1 stacks (Silver's grouping: the two
    /// table rows a term reads depend only on those stacks, so a row pair
    /// is brought into the cache once for the whole group and read for
    /// each member). Patterns listed by [`super::gangsters`] share them
    /// digit for digit when their first r - 1 stacks are one class (359
    /// such groups for r = 4, 403 gangsters each on average).
    pub fn completions_of_many(&self, patterns: &[Pattern], cancel: &AtomicBool) -> Result<Vec<u128>, ThreeBandError> {
        self.completions_in_part(patterns, 0, 1, cancel)
    }

    /// Part `part` of `parts` of [`StackPairTable::completions_of_many`]:
    /// the terms of every `parts`-th choice of the first two stacks from
    /// the `part`-th. The parts 0 .. parts add up to G, so that several
    /// threads can share the count of one group (each its own part, all on
    /// this table). Panics unless part < parts.
    pub fn completions_in_part(
        &self,
        patterns: &[Pattern],
        part: usize,
        parts: usize,
        cancel: &AtomicBool,
    ) -> Result<Vec<u128>, ThreeBandError> {
        assert!(part < parts, "part {part} of {parts}");
        let r = self.r;
        let mut groups: Vec<(Vec<[u8; MAX_R]>, Vec<usize>)> = Vec::new();
        for (index, pattern) in patterns.iter().enumerate() {
            let prefix: Vec<[u8; MAX_R]> = pattern
                .digit_vectors()
                .iter()
                .map(|v| std::array::from_fn(|s| if s + 1 < r { v[s] } else { 0 }))
                .collect();
            match groups.iter_mut().find(|(p, _)| *p == prefix) {
                Some((_, members)) => members.push(index),
                None => groups.push((prefix, vec![index])),
            }
        }
        let mut out = vec![0u128; patterns.len()];
        for (_, members) in groups {
            let group: Vec<Pattern> = members.iter().map(|&i| patterns[i].clone()).collect();
            for (i, g) in members.into_iter().zip(self.completions_of_group(&group, part, parts, cancel)?) {
                out[i] = g;
            }
        }
        Ok(out)
    }
}

/// The sum over the index pairs of a[low 16 bits] x b[high 16 bits]. The
/// table's entries are below 2^24 and a row sum has at most 346 terms, so
/// it fits 64 bits.
#[inline]
fn row_sum(a: &[u32], b: &[u32], reads: &[u32]) -> u64 {
    let mut sum = 0u64;
    for &read in reads {
        sum += u64::from(a[(read & 0xffff) as usize]) * u64::from(b[(read >> 16) as usize]);
    }
    sum
}

#[cfg(test)]
mod tests {
    use super::super::{completions_by_sum, gangsters};
    use super::*;

    /// The tables behind `within` and `partition_rank` agree with the
    /// digit-by-digit definitions, for every 12-digit `among`.
    #[test]
    fn within_packs_a_masks_digits_in_order() {
        for among in 0u16..1 << 12 {
            assert_eq!(u32::from(ONES[usize::from(among)]), among.count_ones());
            for mask in [among, among & 0x555, among & 0xa3c, among & 0xf0f, among & 0x801, 0] {
                let digits = (0..12).filter(|d| among & (1 << d) != 0);
                let expected = digits.enumerate().fold(0u16, |out, (i, d)| out | ((mask >> d) & 1) << i);
                assert_eq!(within(mask, among), expected, "{mask:012b} within {among:012b}");
            }
        }
    }

    #[test]
    fn splits_and_nodes() {
        for (r, splits, nodes) in [(2, 15, 3), (3, 280, 5), (4, 5_775, 9)] {
            let table = StackPairTable::new(r).unwrap();
            assert_eq!((table.splits(), table.nodes()), (splits, nodes), "r = {r}");
        }
    }

    /// Renaming a pair of splits takes the first to the plain split and the
    /// second to its node's split.
    #[test]
    fn renaming_reaches_plain_and_node() {
        let splits = Splits::new(4);
        for x in (0..splits.count() as u16).step_by(97) {
            for y in (0..splits.count() as u16).step_by(89) {
                let (node, perm) = splits.renaming(x, y);
                assert_eq!(splits.apply(&perm, x), 0);
                assert_eq!(splits.apply(&perm, y), splits.nodes[node]);
            }
        }
    }

    /// Every split's labels read back to its index, in any column order,
    /// and a relabelling by masks ([`Renamer`]) gives the split that
    /// relabelling the labels gives.
    #[test]
    fn split_indexes_read_back_and_renamers_agree() {
        for r in [2, 3, 4] {
            let splits = Splits::new(r);
            for (i, labels) in splits.labels.iter().enumerate() {
                assert_eq!(usize::from(splits.index_of(labels)), i, "r = {r}");
                let rotated: [u8; MAX_DIGITS] = std::array::from_fn(|d| (labels[d] + 1) % 3);
                assert_eq!(usize::from(splits.index_of(&rotated)), i, "r = {r}");
            }
            let k = splits.count() as u16;
            for x in (0..k).step_by(37) {
                let (_, perm) = splits.renaming(x, k - 1 - x);
                let renamer = splits.renamer(&perm);
                for y in (0..k).step_by(7) {
                    assert_eq!(renamer.apply(y), splits.apply(&perm, y), "r = {r}");
                }
            }
        }
    }

    /// The partitions into 3-sets are ranked densely: 10, 280 and 15,400
    /// ranks, each met once over all partitions, and a split has r!^2
    /// distinct transversal partitions.
    #[test]
    fn partition_ranks_are_dense() {
        for (r, expected) in [(2, 10), (3, 280), (4, 15_400)] {
            assert_eq!(partitions(r), expected);
            let splits = Splits::new(r);
            // Every partition is the transversal partition of some split; collect them all.
            let mut seen = vec![false; expected];
            for labels in &splits.labels {
                let ranks = transversal_partitions(r, labels);
                let mut distinct = ranks.clone();
                distinct.sort_unstable();
                distinct.dedup();
                assert_eq!(distinct.len(), ranks.len(), "r = {r}");
                assert_eq!(ranks.len(), color_orders(r).len().pow(2));
                for q in ranks {
                    seen[usize::from(q)] = true;
                }
            }
            assert!(seen.iter().all(|&s| s), "r = {r}");
        }
    }

    /// Entries of the r = 4 table, coloured rows and relabelled ones,
    /// equal b / 4! of their bands, b counted by perfect matchings.
    #[test]
    fn table_entries_are_band_counts() {
        let never = AtomicBool::new(false);
        let table = StackPairTable::new(4).unwrap();
        let k = table.splits();
        let mut known = values::Known::new();
        for node in 0..table.nodes() {
            for x in (node * 131..k).step_by(1_447) {
                let row = table.row(table.row_of(node, x as u16), &never).unwrap();
                table.values.update(&mut known);
                for y in (x % 7..k).step_by(1_931) {
                    let stacks = [0, table.splits.nodes[node], x as u16, y as u16];
                    let vectors: Vec<[u8; MAX_R]> = (0..12)
                        .map(|d| std::array::from_fn(|s| table.splits.labels[usize::from(stacks[s])][d]))
                        .collect();
                    let b = super::super::band_count(&Pattern::from_vectors(4, &vectors).unwrap());
                    assert_eq!(u128::from(known.values()[usize::from(row[y])]) * 24, b, "node {node}, x {x}, y {y}");
                }
            }
        }
        assert!(table.rows_relabelled() > 0 && table.rows_coloured() > 0);
    }

    /// A row filled by relabelling the coloured row of its class (the same
    /// three stacks in another order, up to relabelling) equals its own
    /// colouring, value for value, in every node.
    #[test]
    fn relabelled_rows_equal_their_own_colouring() {
        let never = AtomicBool::new(false);
        let table = StackPairTable::new(4).unwrap();
        let (k, labels) = (table.splits(), &table.splits.labels);
        let mut known = values::Known::new();
        for node in 0..table.nodes() {
            for x in (node * 613..k).step_by(1_291) {
                let row = table.row(table.row_of(node, x as u16), &never).unwrap();
                table.values.update(&mut known);
                let prefix = [&labels[0], &labels[usize::from(table.splits.nodes[node])], &labels[x]];
                let own = table.colouring.row(&prefix, &table.colouring.states(&prefix));
                let read: Vec<u32> = row.iter().map(|&number| known.values()[usize::from(number)] * 24).collect();
                assert!(read == own, "node {node}, x {x}");
            }
        }
        assert!(table.rows_relabelled() > 0 && table.rows_coloured() < table.rows_relabelled());
    }

    /// Counted together, the classes of r = 2 and 3 get the counts they get
    /// one by one (r = 3: 44 classes in groups that share their first two
    /// stacks), and a group whose members do not share them is refused.
    #[test]
    fn groups_count_as_their_members() {
        let never = AtomicBool::new(false);
        for r in [2, 3] {
            let table = StackPairTable::new(r).unwrap();
            let patterns: Vec<Pattern> = gangsters(r).unwrap().into_iter().map(|class| class.pattern).collect();
            let together = table.completions_of_many(&patterns, &never).unwrap();
            for (pattern, g) in patterns.iter().zip(together) {
                assert_eq!(table.completions(pattern, &never).unwrap(), g, "{}", pattern.key());
            }
        }
        let table = StackPairTable::new(3).unwrap();
        let patterns: Vec<Pattern> = gangsters(3).unwrap().into_iter().map(|class| class.pattern).collect();
        let prefix = |p: &Pattern| -> Vec<[u8; 2]> { p.digit_vectors().iter().map(|v| [v[0], v[1]]).collect() };
        let other = patterns.iter().find(|p| prefix(p) != prefix(&patterns[0])).expect("two groups at least");
        let error = table.completions_of_group(&[patterns[0].clone(), other.clone()], 0, 1, &never).unwrap_err();
        assert!(error.to_string().contains("does not share its first 2 stacks"), "{error}");
    }

    /// The parts of a count add up to it, in any number of parts (more
    /// parts than first-stack choices included).
    #[test]
    fn parts_add_up_to_the_count() {
        let never = AtomicBool::new(false);
        for r in [2, 3] {
            let table = StackPairTable::new(r).unwrap();
            let patterns: Vec<Pattern> = gangsters(r).unwrap().into_iter().map(|class| class.pattern).collect();
            let whole = table.completions_of_many(&patterns, &never).unwrap();
            for parts in [2, 3, 1000] {
                let mut sum = vec![0u128; patterns.len()];
                for part in 0..parts {
                    let share = table.completions_in_part(&patterns, part, parts, &never).unwrap();
                    sum.iter_mut().zip(share).for_each(|(total, g)| *total += g);
                }
                assert_eq!(sum, whole, "r = {r}, {parts} parts");
            }
        }
    }

    /// G by the table equals the plain sum for every class of r = 2 and 3.
    #[test]
    fn agrees_with_the_plain_sum() {
        let never = AtomicBool::new(false);
        for r in [2, 3] {
            let table = StackPairTable::new(r).unwrap();
            for class in gangsters(r).unwrap() {
                let plain = completions_by_sum(&class.pattern, &never).unwrap();
                assert_eq!(table.completions(&class.pattern, &never).unwrap(), plain, "{}", class.pattern.key());
            }
        }
    }
}
