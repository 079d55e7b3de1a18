//! The column-set counter as it was first written (a 280 x 280 table of
//! ways in u32, relabelled per choice of stack 1, one seed at a time): the
//! reference the faster [`super::ColumnSets`] is tested against.
//!
//! The old description:
//!
//! Below a top band T, the middle band M and the bottom band L each hold 1-9
//! in every block, so each stack of M splits 1-9 into three column sets, and
//! once M's column sets are chosen L's are forced: L_j = 1-9 minus T_j minus
//! M_j. The number of ways to order a band's columns so that every row holds
//! 1-9, ways(M), depends only on its three stack partitions, and is unchanged
//! by relabelling digits. So
//!
//!   c(T, s) = sum over M's column sets allowed by s of ways(M) x ways(L) / 36,
//!
//! the 36 being the 3! orders of column 1 in M and in L that the seed fixes.
//!
//! ways(p1, p2, p3) for the 280 partitions of 1-9 into three triples is read
//! from a 280 x 280 table W0 of ways(p0, p2, p3) with p0 = 123|456|789, after
//! relabelling all three partitions by a fixed map that sends p1 to p0.

use super::{ALL_DIGITS, Counter};
use crate::band::Band;
use crate::seed::{SEEDS, Seed};

/// The number of partitions of 1-9 into three unordered triples.
const PARTITIONS: usize = 280;

/// The column-set counter; [`ColumnSets::new`] builds its tables (about 1 MB).
pub(crate) struct ColumnSets {
    /// Partition id of the partition whose part holding 1 is `a` and whose
    /// part holding the least other digit is `b`, at `(a >> 1) * 512 + (b >> 1)`.
    partition_id: Vec<u16>,
    /// `relabelled[p1 * 280 + p]`: the id of p after the map sending p1 to p0.
    relabelled: Vec<u16>,
    /// `ways0[p2 * 280 + p3]` = ways(p0, p2, p3).
    ways0: Vec<u32>,
}

impl Default for ColumnSets {
    fn default() -> ColumnSets {
        ColumnSets::new()
    }
}

/// A choice of one stack's column sets in M, as the ids of M's and L's partitions.
#[derive(Clone, Copy)]
struct StackChoice {
    middle: u16,
    bottom: u16,
}

impl ColumnSets {
    pub(crate) fn new() -> ColumnSets {
        let partitions = all_partitions();
        let mut partition_id = vec![u16::MAX; 512 * 512];
        for (id, parts) in partitions.iter().enumerate() {
            partition_id[slot(parts[0], parts[1])] = id as u16;
        }
        let id_of = |parts: [u16; 3]| partition_id[slot_of(parts)];

        let relabelled = partitions
            .iter()
            .flat_map(|p1| {
                let map = MaskMap::new(&map_to_p0(p1));
                partitions.iter().map(move |p| map.partition(p))
            })
            .map(id_of)
            .collect();

        let ways0 = ways_table(&partitions, id_of);
        ColumnSets { partition_id, relabelled, ways0 }
    }

    fn id(&self, parts: [u16; 3]) -> u16 {
        self.partition_id[slot_of(parts)]
    }

    /// The choices of one stack (columns 3s..3s+3) of M under the top band's
    /// column sets `top`, with the first column's set fixed if `first` is given.
    fn stack_choices(&self, top: [u16; 3], first: Option<u16>) -> Vec<StackChoice> {
        let mut choices = Vec::with_capacity(56);
        let firsts: Vec<u16> = match first {
            Some(mask) => vec![mask],
            None => TRIPLES.iter().copied().filter(|&m| m & top[0] == 0).collect(),
        };
        for a in firsts {
            for &b in TRIPLES.iter().filter(|&&b| b & (top[1] | a) == 0) {
                let c = ALL_DIGITS ^ a ^ b;
                if c & top[2] != 0 {
                    continue;
                }
                let bottom = [ALL_DIGITS ^ top[0] ^ a, ALL_DIGITS ^ top[1] ^ b, ALL_DIGITS ^ top[2] ^ c];
                choices.push(StackChoice { middle: self.id([a, b, c]), bottom: self.id(bottom) });
            }
        }
        choices
    }

    fn count_with(&self, top: &[u16; 9], seed: &Seed, stacks: [&[StackChoice]; 2]) -> u64 {
        let b4 = seed.b4.iter().fold(0u16, |m, &d| m | 1 << d);
        let first = self.stack_choices([top[0], top[1], top[2]], Some(b4));
        let [second, third] = stacks;
        let mut total = 0u64;
        let mut middle3 = vec![0u16; third.len()];
        let mut bottom3 = vec![0u16; third.len()];
        for one in &first {
            let middle_row = &self.relabelled[one.middle as usize * PARTITIONS..][..PARTITIONS];
            let bottom_row = &self.relabelled[one.bottom as usize * PARTITIONS..][..PARTITIONS];
            for (k, choice) in third.iter().enumerate() {
                middle3[k] = middle_row[choice.middle as usize];
                bottom3[k] = bottom_row[choice.bottom as usize];
            }
            for two in second {
                let middle_ways = &self.ways0[middle_row[two.middle as usize] as usize * PARTITIONS..][..PARTITIONS];
                let bottom_ways = &self.ways0[bottom_row[two.bottom as usize] as usize * PARTITIONS..][..PARTITIONS];
                let sum: u64 = middle3
                    .iter()
                    .zip(&bottom3)
                    .map(|(&m, &b)| u64::from(middle_ways[m as usize]) * u64::from(bottom_ways[b as usize]))
                    .sum();
                total += sum;
            }
        }
        debug_assert_eq!(total % 36, 0);
        total / 36
    }

    fn prepare(&self, band: &Band) -> ([u16; 9], Vec<StackChoice>, Vec<StackChoice>) {
        assert!(band.is_standard(), "counters take a band with B1 = 123/456/789; normalize {band} first");
        let top: [u16; 9] = std::array::from_fn(|c| band.column_mask(c));
        let second = self.stack_choices([top[3], top[4], top[5]], None);
        let third = self.stack_choices([top[6], top[7], top[8]], None);
        (top, second, third)
    }
}

impl Counter for ColumnSets {
    fn count(&self, band: &Band, seed: &Seed) -> u64 {
        let (top, second, third) = self.prepare(band);
        self.count_with(&top, seed, [&second, &third])
    }

    fn count_seeds(&self, band: &Band) -> [u64; 10] {
        let (top, second, third) = self.prepare(band);
        std::array::from_fn(|i| self.count_with(&top, &SEEDS[i], [&second, &third]))
    }
}

/// The 84 three-digit sets, as masks.
const TRIPLES: [u16; 84] = {
    let mut triples = [0u16; 84];
    let mut n = 0;
    let mut a = 1;
    while a <= 9 {
        let mut b = a + 1;
        while b <= 9 {
            let mut c = b + 1;
            while c <= 9 {
                triples[n] = 1 << a | 1 << b | 1 << c;
                n += 1;
                c += 1;
            }
            b += 1;
        }
        a += 1;
    }
    triples
};

/// The 280 partitions, each as three masks ordered by least digit.
fn all_partitions() -> Vec<[u16; 3]> {
    let mut partitions = Vec::with_capacity(PARTITIONS);
    for &a in TRIPLES.iter().filter(|&&a| a & 0b10 != 0) {
        let rest = ALL_DIGITS ^ a;
        let least = rest & rest.wrapping_neg();
        for &b in TRIPLES.iter().filter(|&&b| b & least != 0 && b & a == 0) {
            partitions.push([a, b, rest ^ b]);
        }
    }
    assert_eq!(partitions.len(), PARTITIONS);
    partitions
}

fn slot(a: u16, b: u16) -> usize {
    usize::from(a >> 1) * 512 + usize::from(b >> 1)
}

/// The table slot of three masks in any order.
fn slot_of(parts: [u16; 3]) -> usize {
    let mut parts = parts;
    parts.sort_unstable_by_key(|m| m.trailing_zeros());
    slot(parts[0], parts[1])
}

/// A digit map sending the partition's parts to 123, 456, 789.
fn map_to_p0(parts: &[u16; 3]) -> [u8; 10] {
    let mut map = [0u8; 10];
    let mut next = 1;
    for &part in parts {
        for (d, image) in map.iter_mut().enumerate().skip(1) {
            if part & 1 << d != 0 {
                *image = next;
                next += 1;
            }
        }
    }
    map
}

/// A digit map applied to masks by two table lookups (digits 1-5, then 6-9),
/// since the tables relabel hundreds of thousands of masks.
struct MaskMap {
    low: [u16; 32],
    high: [u16; 16],
}

impl MaskMap {
    fn new(map: &[u8; 10]) -> MaskMap {
        let image = |bits: usize, first: usize, width: usize| {
            (0..width).filter(|&i| bits & 1 << i != 0).fold(0u16, |m, i| m | 1 << map[first + i])
        };
        MaskMap {
            low: std::array::from_fn(|bits| image(bits, 1, 5)),
            high: std::array::from_fn(|bits| image(bits, 6, 4)),
        }
    }

    fn mask(&self, mask: u16) -> u16 {
        self.low[usize::from(mask >> 1 & 31)] | self.high[usize::from(mask >> 6 & 15)]
    }

    fn partition(&self, parts: &[u16; 3]) -> [u16; 3] {
        parts.map(|part| self.mask(part))
    }
}

/// The 1,296 digit maps that keep p0 = 123|456|789: any order of its three
/// parts, and any order within each part.
fn p0_symmetries() -> Vec<MaskMap> {
    const ORDERS: [[u8; 3]; 6] = [[0, 1, 2], [0, 2, 1], [1, 0, 2], [1, 2, 0], [2, 0, 1], [2, 1, 0]];
    let mut maps = Vec::with_capacity(1296);
    for parts in ORDERS {
        for first in ORDERS {
            for second in ORDERS {
                for third in ORDERS {
                    let within = [first, second, third];
                    let mut map = [0u8; 10];
                    for (part, order) in within.iter().enumerate() {
                        for (j, &k) in order.iter().enumerate() {
                            map[1 + 3 * part + j] = 1 + 3 * parts[part] + k;
                        }
                    }
                    maps.push(MaskMap::new(&map));
                }
            }
        }
    }
    maps
}

/// An assignment of the 9 digits of one stack to the band's 3 rows, as the
/// masks of the digits in rows 1 and 2 (row 3 holds the rest).
#[derive(Clone, Copy)]
struct RowSplit {
    first: u16,
    second: u16,
}

impl RowSplit {
    fn code(self) -> usize {
        usize::from(self.first >> 1) << 9 | usize::from(self.second >> 1)
    }
}

/// The 216 ways to order a stack's three columns, as row splits.
fn row_splits(parts: &[u16; 3]) -> Vec<RowSplit> {
    const ORDERS: [[usize; 3]; 6] = [[0, 1, 2], [0, 2, 1], [1, 0, 2], [1, 2, 0], [2, 0, 1], [2, 1, 0]];
    let digits: Vec<[u16; 3]> = parts
        .iter()
        .map(|&part| {
            let bits: Vec<u16> = (1..=9).filter(|&d| part & 1 << d != 0).map(|d| 1 << d).collect();
            [bits[0], bits[1], bits[2]]
        })
        .collect();
    let mut splits = Vec::with_capacity(216);
    for x in ORDERS {
        for y in ORDERS {
            for z in ORDERS {
                let row = |r: usize| digits[0][x[r]] | digits[1][y[r]] | digits[2][z[r]];
                splits.push(RowSplit { first: row(0), second: row(1) });
            }
        }
    }
    splits
}

/// ways(p0, p2, p3) for every p2, p3: orderings of the three stacks such that
/// each row takes three disjoint triples, i.e. holds 1-9.
///
/// A digit map g that keeps p0 gives ways(p0, g p2, g p3) = ways(p0, p2, p3),
/// so one row is counted for each orbit of p2 under the 1,296 such maps (a
/// handful of orbits) and copied, relabelled, to the rest of its orbit.
fn ways_table(partitions: &[[u16; 3]], id_of: impl Fn([u16; 3]) -> u16) -> Vec<u32> {
    let p0 = usize::from(id_of([0b1110, 0b111_0000, 0b11_1000_0000]));
    let splits: Vec<Vec<RowSplit>> = partitions.iter().map(row_splits).collect();
    let symmetries = p0_symmetries();
    let mut forced = vec![0u32; 1 << 18];
    let mut ways = vec![0u32; PARTITIONS * PARTITIONS];
    let mut filled = [false; PARTITIONS];
    let mut row = [0u32; PARTITIONS];
    for p2 in 0..PARTITIONS {
        if filled[p2] {
            continue;
        }
        ways_row(&splits, p0, p2, &mut forced, &mut row);
        for g in &symmetries {
            let image = usize::from(id_of(g.partition(&partitions[p2])));
            if filled[image] {
                continue;
            }
            filled[image] = true;
            for (p3, &w) in row.iter().enumerate() {
                ways[image * PARTITIONS + usize::from(id_of(g.partition(&partitions[p3])))] = w;
            }
        }
    }
    ways
}

/// One row, ways(p0, p2, p3) for every p3. The pairs of stack-1 and stack-2
/// orderings with disjoint rows leave a forced row split for stack 3;
/// `forced` counts them (and is left all zero), and ways sums it over stack
/// 3's own splits.
fn ways_row(splits: &[Vec<RowSplit>], p0: usize, p2: usize, forced: &mut [u32], row: &mut [u32; PARTITIONS]) {
    let mut touched = Vec::new();
    for one in &splits[p0] {
        let third_one = ALL_DIGITS ^ one.first ^ one.second;
        for two in &splits[p2] {
            let third_two = ALL_DIGITS ^ two.first ^ two.second;
            if one.first & two.first == 0 && one.second & two.second == 0 && third_one & third_two == 0 {
                let rest = RowSplit {
                    first: ALL_DIGITS ^ one.first ^ two.first,
                    second: ALL_DIGITS ^ one.second ^ two.second,
                };
                let code = rest.code();
                if forced[code] == 0 {
                    touched.push(code);
                }
                forced[code] += 1;
            }
        }
    }
    for (p3, ways) in row.iter_mut().enumerate() {
        *ways = splits[p3].iter().map(|split| forced[split.code()]).sum();
    }
    for code in touched {
        forced[code] = 0;
    }
}
