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
//! a table of nodes x splits^2 (9 x 5,775^2 entries of 32 bits for r = 4,
//! 1.2 GB), filled as terms meet its entries (each entry once per process,
//! from b of its class, [`BandCounts`]). A term of G is then two reads and a
//! multiply-add: for each choice of the middle band's first two stacks
//! (and so the bottom band's) the renaming is found once, and applied to
//! the 346 choices of each of the last two stacks; the inner loop runs over
//! the last stack's choices along two table rows.
//!
//! Swapping the middle and bottom bands maps the choices onto themselves
//! without fixed points and keeps each term, so only the first-stack
//! choices whose middle columns precede their bottom columns are summed,
//! twice.

use std::sync::atomic::{AtomicBool, Ordering};

use super::{BandCounts, MAX_DIGITS, MAX_R, Pattern, ThreeBandError, check_r};

/// A digit permutation: digit d goes to `perm[d]`.
type Perm = [u8; MAX_DIGITS];

/// The splits of n = 3r digits into three r-sets, their numbering and the
/// renamings that bring a pair of stacks to (plain split, node).
struct Splits {
    n: usize,
    /// Each split as each digit's column, columns numbered in order of the
    /// digits' first appearance (so digit 0 is in column 0).
    labels: Vec<[u8; MAX_DIGITS]>,
    /// Split index by the base-3 number of its canonical labels.
    index: Vec<u16>,
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
        let mut index = vec![u16::MAX; 3usize.pow(n as u32)];
        for (i, split) in labels.iter().enumerate() {
            index[base3(&split[..n])] = i as u16;
        }
        let mut splits = Splits { n, labels, index, to_plain: Vec::new(), to_node: Vec::new(), nodes: Vec::new() };
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
        let mut rename = [u8::MAX; 3];
        let mut next = 0u8;
        let mut code = 0usize;
        for &label in &labels[..self.n] {
            let slot = &mut rename[usize::from(label)];
            if *slot == u8::MAX {
                *slot = next;
                next += 1;
            }
            code = code * 3 + usize::from(*slot);
        }
        self.index[code]
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

fn base3(labels: &[u8]) -> usize {
    labels.iter().fold(0usize, |code, &l| code * 3 + usize::from(l))
}

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
/// columns come before the bottom's as label lists).
fn stack_choices(r: usize, top: &[u8], splits: &Splits) -> Vec<(u16, u16, bool)> {
    let n = top.len();
    let mut out = Vec::new();
    for moves in 0u32..(1 << n) {
        let mut per_column = [0usize; 3];
        let mut middle = [0u8; MAX_DIGITS];
        let mut bottom = [0u8; MAX_DIGITS];
        for d in 0..n {
            let shift = if moves & (1 << d) != 0 { 1 } else { 2 };
            middle[d] = (top[d] + shift) % 3;
            bottom[d] = 3 - top[d] - middle[d];
            per_column[usize::from(middle[d])] += 1;
        }
        if per_column == [r; 3] {
            out.push((splits.index_of(&middle), splits.index_of(&bottom), middle[..n] < bottom[..n]));
        }
    }
    out
}

/// b of every band by its node and the renamed splits of its other
/// stacks, filled as it is read: one per process, shared by every gangster
/// it counts.
pub struct StackPairTable {
    r: usize,
    splits: Splits,
    /// b by node, then the splits of stacks 2 .. r (row-major); 0 until
    /// computed (b is never 0: a regular bipartite graph always splits
    /// into perfect matchings).
    counts: Vec<u32>,
    bands: BandCounts,
    filled: u64,
}

impl StackPairTable {
    /// An empty table for r x 3 boxes. Its entries take memory only as they
    /// are filled (the allocation is zeroed lazily by the system): at most
    /// nodes x splits^(r - 2) x 4 bytes, 1.2 GB for r = 4.
    pub fn new(r: usize) -> Result<StackPairTable, ThreeBandError> {
        check_r(r)?;
        let splits = Splits::new(r);
        let size = splits.nodes.len() * splits.count().pow(r as u32 - 2);
        Ok(StackPairTable { r, splits, counts: vec![0u32; size], bands: BandCounts::new(), filled: 0 })
    }

    /// The number of splits of the digits into three r-sets (5,775 for r = 4).
    pub fn splits(&self) -> usize {
        self.splits.count()
    }

    /// The number of nodes: stack pairs up to relabelling (9 for r = 4).
    pub fn nodes(&self) -> usize {
        self.splits.nodes.len()
    }

    /// Entries computed so far (each from b of its class).
    pub fn filled(&self) -> u64 {
        self.filled
    }

    /// Classes whose b is known.
    pub fn classes(&self) -> usize {
        self.bands.len()
    }

    fn offset(&self, node: usize, rest: &[u16]) -> usize {
        let k = self.splits.count();
        rest.iter().fold(node, |at, &x| at * k + usize::from(x))
    }

    /// b of the band (plain split, node's split, rest...), computed from its
    /// class and stored under every key the same band has: each ordered
    /// pair of its stacks renamed to (plain, node), the other stacks in
    /// either order (up to 24 entries for r = 4 from one class lookup).
    fn fill(&mut self, node: usize, rest: &[u16]) -> u32 {
        let n = self.splits.n;
        let stacks: Vec<u16> = [0u16, self.splits.nodes[node]].into_iter().chain(rest.iter().copied()).collect();
        let mut vectors = vec![[0u8; MAX_R]; n];
        for (s, &split) in stacks.iter().enumerate() {
            let labels = &self.splits.labels[usize::from(split)];
            for d in 0..n {
                vectors[d][s] = labels[d];
            }
        }
        let pattern = Pattern::from_vectors(self.r, &vectors).expect("r splits are column sets");
        let b = u32::try_from(self.bands.get(&pattern)).expect("b of a band fits 32 bits for r <= 4");
        for a in 0..stacks.len() {
            for c in 0..stacks.len() {
                if a == c {
                    continue;
                }
                let (other_node, perm) = self.splits.renaming(stacks[a], stacks[c]);
                let mut others: Vec<u16> = (0..stacks.len())
                    .filter(|&s| s != a && s != c)
                    .map(|s| self.splits.apply(&perm, stacks[s]))
                    .collect();
                self.store(other_node, &others, b);
                others.reverse();
                self.store(other_node, &others, b);
            }
        }
        // The key asked for, whatever renaming the loop above chose for its pair.
        self.store(node, rest, b);
        b
    }

    fn store(&mut self, node: usize, rest: &[u16], b: u32) {
        let at = self.offset(node, rest);
        if self.counts[at] == 0 {
            self.counts[at] = b;
            self.filled += 1;
        }
    }

    fn get(&mut self, node: usize, rest: &[u16]) -> u32 {
        match self.counts[self.offset(node, rest)] {
            0 => self.fill(node, rest),
            b => b,
        }
    }

    /// G of the pattern's top band: the ways to complete it with a middle
    /// and a bottom band, the sum over the aligned middle bands of
    /// b(middle) x b(bottom). `cancel` is read once per choice of the first
    /// two stacks and while entries are being filled.
    pub fn completions(&mut self, pattern: &Pattern, cancel: &AtomicBool) -> Result<u128, ThreeBandError> {
        let r = self.r;
        if pattern.r() != r {
            return Err(ThreeBandError::UnsupportedShape { r: pattern.r() });
        }
        let top = pattern.digit_vectors();
        let choices: Vec<Vec<(u16, u16, bool)>> = (0..r)
            .map(|s| {
                let column: Vec<u8> = top.iter().map(|v| v[s]).collect();
                stack_choices(r, &column, &self.splits)
            })
            .collect();
        let k = self.splits.count();
        let last = &choices[r - 1];
        // The renamed splits of stacks 2 .. r-1 for the middle (m) and bottom (l) bands.
        let mut renamed_m: Vec<Vec<u16>> = choices[2..].iter().map(|c| vec![0; c.len()]).collect();
        let mut renamed_l = renamed_m.clone();
        let mut total = 0u128;
        for &(m0, l0, first) in &choices[0] {
            if !first {
                continue;
            }
            for &(m1, l1, _) in &choices[1] {
                if cancel.load(Ordering::Relaxed) {
                    return Err(ThreeBandError::Cancelled);
                }
                let (node_m, perm_m) = self.splits.renaming(m0, m1);
                let (node_l, perm_l) = self.splits.renaming(l0, l1);
                for (s, stack) in choices[2..].iter().enumerate() {
                    for (i, &(m, l, _)) in stack.iter().enumerate() {
                        renamed_m[s][i] = self.splits.apply(&perm_m, m);
                        renamed_l[s][i] = self.splits.apply(&perm_l, l);
                    }
                }
                match r {
                    2 => total += u128::from(self.get(node_m, &[])) * u128::from(self.get(node_l, &[])),
                    3 => {
                        for j in 0..last.len() {
                            let b_m = self.get(node_m, &[renamed_m[0][j]]);
                            let b_l = self.get(node_l, &[renamed_l[0][j]]);
                            total += u128::from(b_m) * u128::from(b_l);
                        }
                    }
                    _ => {
                        let (y_m, y_l) = (&renamed_m[1], &renamed_l[1]);
                        for i in 0..renamed_m[0].len() {
                            let (x_m, x_l) = (renamed_m[0][i], renamed_l[0][i]);
                            let row_m = self.offset(node_m, &[x_m]) * k;
                            let row_l = self.offset(node_l, &[x_l]) * k;
                            loop {
                                let (sum, missing) =
                                    row_sum(&self.counts[row_m..row_m + k], &self.counts[row_l..row_l + k], y_m, y_l);
                                if !missing {
                                    total += sum;
                                    break;
                                }
                                for j in 0..y_m.len() {
                                    // A new class's b takes milliseconds: look at the flag before each.
                                    if cancel.load(Ordering::Relaxed) {
                                        return Err(ThreeBandError::Cancelled);
                                    }
                                    self.get(node_m, &[x_m, y_m[j]]);
                                    self.get(node_l, &[x_l, y_l[j]]);
                                }
                            }
                        }
                    }
                }
            }
        }
        Ok(2 * total)
    }
}

/// The sum over j of a[x[j]] x b[y[j]], and whether an entry read was
/// still unknown (0).
#[inline]
fn row_sum(a: &[u32], b: &[u32], x: &[u16], y: &[u16]) -> (u128, bool) {
    let mut sum = 0u128;
    let mut missing = false;
    for (&i, &j) in x.iter().zip(y) {
        let (p, q) = (a[usize::from(i)], b[usize::from(j)]);
        missing |= p == 0 || q == 0;
        sum += u128::from(u64::from(p) * u64::from(q));
    }
    (sum, missing)
}

#[cfg(test)]
mod tests {
    use super::super::{completions_by_sum, gangsters};
    use super::*;

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

    /// G by the table equals the plain sum for every class of r = 2 and 3.
    #[test]
    fn agrees_with_the_plain_sum() {
        let never = AtomicBool::new(false);
        for r in [2, 3] {
            let mut table = StackPairTable::new(r).unwrap();
            for class in gangsters(r).unwrap() {
                let plain = completions_by_sum(&class.pattern, &never).unwrap();
                assert_eq!(table.completions(&class.pattern, &never).unwrap(), plain, "{}", class.pattern.key());
            }
        }
    }
}
