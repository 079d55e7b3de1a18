//! The group G of validity-preserving rearrangements of a 9x9 grid and its
//! 275 conjugacy classes, computed (not typed in).
//!
//! An element is `(rows, columns, transpose)`: first transpose if asked,
//! then send row r to `rows(r)` and column c to `columns(c)`. `rows` and
//! `columns` each range over the 1,296 permutations of 9 lines that keep the
//! three bands (stacks) together, so |G| = 1,296^2 x 2 = 3,359,232.
//!
//! Elements are numbered `(transpose x 1,296 + rows) x 1,296 + columns`, with
//! a line permutation numbered `band order x 216 + the three in-band orders`
//! (each an index into the 6 permutations of three things in lexicographic
//! order). The identity is element 0. Conjugacy classes are the orbits of
//! conjugation by a generating set, found by a flood fill over all elements;
//! a class is represented by its least-numbered element and classes are
//! listed in the order of their representatives, so the identity is class 0.

use std::fmt;

/// |G| = 6^8 x 2.
pub const GROUP_ORDER: usize = 3_359_232;

/// The number of line permutations that keep bands together: 6^4.
const LINE_PERMUTATIONS: usize = 1_296;

/// The 6 permutations of {0, 1, 2}, in lexicographic order; index 0 is the identity.
const PERMUTATIONS_OF_3: [[u8; 3]; 6] = [[0, 1, 2], [0, 2, 1], [1, 0, 2], [1, 2, 0], [2, 0, 1], [2, 1, 0]];

fn index_of_3(p: [u8; 3]) -> usize {
    PERMUTATIONS_OF_3.iter().position(|&q| q == p).expect("a permutation of 0, 1, 2")
}

/// The line permutation with the given number (see the module doc).
fn line_permutation(index: usize) -> [u8; 9] {
    let bands = PERMUTATIONS_OF_3[index / 216];
    let mut lines = [0u8; 9];
    for band in 0..3 {
        let within = PERMUTATIONS_OF_3[index / 6usize.pow(2 - band as u32) % 6];
        for j in 0..3 {
            lines[band * 3 + j] = bands[band] * 3 + within[j];
        }
    }
    lines
}

/// The number of a line permutation that keeps bands together.
fn line_index(lines: &[u8; 9]) -> usize {
    let mut index = index_of_3([lines[0] / 3, lines[3] / 3, lines[6] / 3]) * 216;
    for band in 0..3 {
        let within = [lines[band * 3] % 3, lines[band * 3 + 1] % 3, lines[band * 3 + 2] % 3];
        index += index_of_3(within) * 6usize.pow(2 - band as u32);
    }
    index
}

/// One validity-preserving rearrangement of the grid's cells.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub struct Rearrangement {
    index: u32,
}

impl Rearrangement {
    /// The identity, element 0.
    pub const IDENTITY: Rearrangement = Rearrangement { index: 0 };

    /// The element with the given number, if it is below |G|.
    pub fn from_index(index: usize) -> Option<Rearrangement> {
        (index < GROUP_ORDER).then_some(Rearrangement { index: index as u32 })
    }

    /// Builds `(rows, columns, transpose)`; `None` unless both permutations
    /// are permutations of 0-8 that keep bands (stacks) together.
    pub fn new(rows: [u8; 9], columns: [u8; 9], transpose: bool) -> Option<Rearrangement> {
        let keeps_bands = |lines: &[u8; 9]| {
            let mut seen = 0u16;
            lines.iter().all(|&l| {
                l < 9 && seen & 1 << l == 0 && {
                    seen |= 1 << l;
                    true
                }
            }) && (0..3).all(|b| (0..3).all(|j| lines[b * 3 + j] / 3 == lines[b * 3] / 3))
        };
        if !keeps_bands(&rows) || !keeps_bands(&columns) {
            return None;
        }
        let index =
            (usize::from(transpose) * LINE_PERMUTATIONS + line_index(&rows)) * LINE_PERMUTATIONS + line_index(&columns);
        Rearrangement::from_index(index)
    }

    /// The element's number, 0 to |G| - 1.
    pub fn index(self) -> usize {
        self.index as usize
    }

    /// Whether the grid is transposed first.
    pub fn transposes(self) -> bool {
        self.index() >= LINE_PERMUTATIONS * LINE_PERMUTATIONS
    }

    /// Where each row goes: row r becomes row `rows()[r]` (after the transpose, if any).
    pub fn rows(self) -> [u8; 9] {
        line_permutation(self.index() / LINE_PERMUTATIONS % LINE_PERMUTATIONS)
    }

    /// Where each column goes.
    pub fn columns(self) -> [u8; 9] {
        line_permutation(self.index() % LINE_PERMUTATIONS)
    }

    /// Where each cell goes, cells numbered row by row: cell p moves to `cells()[p]`.
    pub fn cells(self) -> [u8; 81] {
        let (rows, columns) = (self.rows(), self.columns());
        std::array::from_fn(|p| {
            let (r, c) = if self.transposes() { (p % 9, p / 9) } else { (p / 9, p % 9) };
            rows[r] * 9 + columns[c]
        })
    }
}

impl fmt::Display for Rearrangement {
    /// `rows 102345678 columns 012345678`, then ` transposed` when it transposes first.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let digits = |lines: [u8; 9]| lines.iter().map(|l| char::from(b'0' + l)).collect::<String>();
        write!(f, "rows {} columns {}", digits(self.rows()), digits(self.columns()))?;
        if self.transposes() {
            f.write_str(" transposed")?;
        }
        Ok(())
    }
}

/// The multiplication of G, from tables of the 1,296 line permutations.
pub struct Group {
    /// `line_products[a x 1,296 + b]` = a after b.
    line_products: Vec<u16>,
    line_inverses: Vec<u16>,
}

impl Default for Group {
    fn default() -> Self {
        Group::new()
    }
}

impl Group {
    /// Builds the line tables (1,296^2 products; a few milliseconds).
    pub fn new() -> Group {
        let lines: Vec<[u8; 9]> = (0..LINE_PERMUTATIONS).map(line_permutation).collect();
        let mut line_products = vec![0u16; LINE_PERMUTATIONS * LINE_PERMUTATIONS];
        let mut line_inverses = vec![0u16; LINE_PERMUTATIONS];
        for (a, outer) in lines.iter().enumerate() {
            for (b, inner) in lines.iter().enumerate() {
                let product: [u8; 9] = std::array::from_fn(|i| outer[inner[i] as usize]);
                let index = line_index(&product);
                line_products[a * LINE_PERMUTATIONS + b] = index as u16;
                if index == 0 {
                    line_inverses[a] = b as u16;
                }
            }
        }
        Group { line_products, line_inverses }
    }

    fn parts(g: Rearrangement) -> (bool, usize, usize) {
        let i = g.index();
        (g.transposes(), i / LINE_PERMUTATIONS % LINE_PERMUTATIONS, i % LINE_PERMUTATIONS)
    }

    fn join(transpose: bool, rows: usize, columns: usize) -> Rearrangement {
        Rearrangement {
            index: ((usize::from(transpose) * LINE_PERMUTATIONS + rows) * LINE_PERMUTATIONS + columns) as u32,
        }
    }

    fn line_product(&self, a: usize, b: usize) -> usize {
        usize::from(self.line_products[a * LINE_PERMUTATIONS + b])
    }

    /// `outer` after `inner`. A transpose turns row moves into column moves:
    /// transposing after (rows, columns) is (columns, rows) after transposing.
    pub fn compose(&self, outer: Rearrangement, inner: Rearrangement) -> Rearrangement {
        let (t1, r1, c1) = Group::parts(outer);
        let (t2, r2, c2) = Group::parts(inner);
        let (r2, c2) = if t1 { (c2, r2) } else { (r2, c2) };
        Group::join(t1 != t2, self.line_product(r1, r2), self.line_product(c1, c2))
    }

    /// The inverse element.
    pub fn inverse(&self, g: Rearrangement) -> Rearrangement {
        let (t, r, c) = Group::parts(g);
        let (ri, ci) = (usize::from(self.line_inverses[r]), usize::from(self.line_inverses[c]));
        if t { Group::join(true, ci, ri) } else { Group::join(false, ri, ci) }
    }

    /// A set of elements generating G: a swap and a 3-cycle of the first
    /// three lines, a swap and a 3-cycle of the bands, for rows and for
    /// columns, and the transpose.
    pub fn generators(&self) -> Vec<Rearrangement> {
        const IDENTITY: [u8; 9] = [0, 1, 2, 3, 4, 5, 6, 7, 8];
        let line_moves = [
            [1, 0, 2, 3, 4, 5, 6, 7, 8],
            [1, 2, 0, 3, 4, 5, 6, 7, 8],
            [3, 4, 5, 0, 1, 2, 6, 7, 8],
            [3, 4, 5, 6, 7, 8, 0, 1, 2],
        ];
        let mut generators = Vec::new();
        for lines in line_moves {
            generators.push(Rearrangement::new(lines, IDENTITY, false).expect("keeps bands"));
            generators.push(Rearrangement::new(IDENTITY, lines, false).expect("keeps stacks"));
        }
        generators.push(Rearrangement::new(IDENTITY, IDENTITY, true).expect("the transpose"));
        generators
    }

    /// The conjugacy classes of G (a flood fill over all 3,359,232 elements).
    pub fn conjugacy_classes(&self) -> ConjugacyClasses {
        const UNSEEN: u16 = u16::MAX;
        let conjugators: Vec<(Rearrangement, Rearrangement)> =
            self.generators().into_iter().map(|h| (h, self.inverse(h))).collect();
        let mut class_of = vec![UNSEEN; GROUP_ORDER];
        let mut classes = Vec::new();
        let mut stack = Vec::new();
        for start in 0..GROUP_ORDER {
            if class_of[start] != UNSEEN {
                continue;
            }
            let id = u16::try_from(classes.len()).expect("fewer than 65,535 classes");
            class_of[start] = id;
            stack.push(start as u32);
            let mut size = 0u64;
            while let Some(g) = stack.pop() {
                size += 1;
                let g = Rearrangement { index: g };
                for &(h, h_inverse) in &conjugators {
                    let conjugate = self.compose(self.compose(h, g), h_inverse).index();
                    if class_of[conjugate] == UNSEEN {
                        class_of[conjugate] = id;
                        stack.push(conjugate as u32);
                    }
                }
            }
            classes.push(ConjugacyClass {
                index: classes.len(),
                representative: Rearrangement { index: start as u32 },
                size,
            });
        }
        ConjugacyClasses { classes, class_of }
    }
}

/// One conjugacy class of G.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConjugacyClass {
    /// The class's position in [`ConjugacyClasses::classes`]; 0 is the identity.
    pub index: usize,
    /// The least-numbered element of the class.
    pub representative: Rearrangement,
    /// The number of elements in the class.
    pub size: u64,
}

/// The conjugacy classes of G, and the class of every element.
pub struct ConjugacyClasses {
    classes: Vec<ConjugacyClass>,
    class_of: Vec<u16>,
}

impl ConjugacyClasses {
    /// The classes, in the order of their representatives.
    pub fn classes(&self) -> &[ConjugacyClass] {
        &self.classes
    }

    /// The class of an element.
    pub fn class_of(&self, g: Rearrangement) -> &ConjugacyClass {
        &self.classes[usize::from(self.class_of[g.index()])]
    }
}

/// The order of a permutation of n points.
pub fn permutation_order(points: &[u8]) -> u64 {
    cycle_lengths(points).into_iter().fold(1, |order, len| lcm(order, len as u64))
}

/// The lengths of a permutation's cycles, longest first.
pub fn cycle_lengths(points: &[u8]) -> Vec<usize> {
    let mut seen = vec![false; points.len()];
    let mut lengths = Vec::new();
    for start in 0..points.len() {
        let mut len = 0;
        let mut p = start;
        while !seen[p] {
            seen[p] = true;
            p = points[p] as usize;
            len += 1;
        }
        if len > 0 {
            lengths.push(len);
        }
    }
    lengths.sort_unstable_by(|a, b| b.cmp(a));
    lengths
}

pub(super) fn lcm(a: u64, b: u64) -> u64 {
    fn gcd(a: u64, b: u64) -> u64 {
        if b == 0 { a } else { gcd(b, a % b) }
    }
    a / gcd(a, b) * b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_numbers_round_trip() {
        for index in 0..LINE_PERMUTATIONS {
            assert_eq!(line_index(&line_permutation(index)), index);
        }
        assert_eq!(line_permutation(0), [0, 1, 2, 3, 4, 5, 6, 7, 8]);
    }

    #[test]
    fn composition_is_composition_of_cell_maps() {
        let group = Group::new();
        let sample: Vec<Rearrangement> =
            (0..GROUP_ORDER).step_by(7_919).map(|i| Rearrangement::from_index(i).unwrap()).collect();
        for &a in &sample {
            let inverse = group.inverse(a);
            assert_eq!(group.compose(a, inverse), Rearrangement::IDENTITY);
            assert_eq!(group.compose(inverse, a), Rearrangement::IDENTITY);
            for &b in sample.iter().step_by(37) {
                let (ca, cb, cab) = (a.cells(), b.cells(), group.compose(a, b).cells());
                assert!((0..81).all(|p| cab[p] == ca[cb[p] as usize]), "{a} after {b}");
            }
        }
    }
}
