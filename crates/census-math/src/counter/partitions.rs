//! Partitions of the digits 1-9 into three triples, digit maps on them, and
//! the table ways(p0, p, q) that the column-set counter reads.
//!
//! A band whose three stacks split 1-9 into the column sets p1, p2, p3 can
//! order its columns in ways(p1, p2, p3) ways so that every row holds 1-9.
//! ways is unchanged by relabelling digits, so every value is read from
//! ways(p0, p, q) with p0 = 123|456|789, after a map that sends p1 to p0.

use super::ALL_DIGITS;

/// The number of partitions of 1-9 into three unordered triples.
pub(crate) const PARTITIONS: usize = 280;

/// The length of the ways table: its 280 rows of 280, and room after the
/// last row's start for any u16, so that a row seen as `[u8; 1 << 16]` is
/// indexed by a partition id with no bounds check (the counter's inner loop).
pub(crate) const WAYS_LEN: usize = (PARTITIONS - 1) * PARTITIONS + (1 << 16);

/// The 84 three-digit sets, as masks of bits 1-9, in increasing order.
pub(crate) const TRIPLES: [u16; 84] = {
    let mut triples = [0u16; 84];
    let mut n = 0;
    let mut mask = 0u16;
    while mask < 1 << 10 {
        if mask & 1 == 0 && mask.count_ones() == 3 {
            triples[n] = mask;
            n += 1;
        }
        mask += 1;
    }
    triples
};

/// `TRIPLE_INDEX[mask >> 1]`: the position of a triple in [`TRIPLES`]; 84
/// for a mask that is not a triple.
const TRIPLE_INDEX: [u8; 512] = {
    let mut index = [84u8; 512];
    let mut i = 0;
    while i < 84 {
        index[(TRIPLES[i] >> 1) as usize] = i as u8;
        i += 1;
    }
    index
};

/// The position of a triple in [`TRIPLES`].
#[inline]
pub(crate) fn triple_index(mask: u16) -> usize {
    usize::from(TRIPLE_INDEX[usize::from(mask >> 1) & 511])
}

/// An id for a partition that is never used.
const NO_ID: u16 = u16::MAX;

/// The 280 partitions and the lookup from any two of their parts to their id.
pub(crate) struct Partitions {
    /// The parts of each partition, ordered by least digit.
    parts: Vec<[u16; 3]>,
    /// `pair_id[i * 85 + j]`: the partition holding triples i and j (in
    /// either order), or [`NO_ID`]; row and column 84 stand for "no triple".
    pair_id: Vec<u16>,
}

impl Partitions {
    pub(crate) fn new() -> Partitions {
        let mut parts = Vec::with_capacity(PARTITIONS);
        let mut pair_id = vec![NO_ID; 85 * 85];
        for &a in TRIPLES.iter().filter(|&&a| a & 0b10 != 0) {
            let rest = ALL_DIGITS ^ a;
            let least = rest & rest.wrapping_neg();
            for &b in TRIPLES.iter().filter(|&&b| b & least != 0 && b & a == 0) {
                let c = rest ^ b;
                let id = parts.len() as u16;
                for (x, y) in [(a, b), (b, a), (a, c), (c, a), (b, c), (c, b)] {
                    pair_id[triple_index(x) * 85 + triple_index(y)] = id;
                }
                parts.push([a, b, c]);
            }
        }
        assert_eq!(parts.len(), PARTITIONS);
        Partitions { parts, pair_id }
    }

    /// The id of the partition two of whose parts are `a` and `b`.
    #[inline]
    pub(crate) fn id(&self, a: u16, b: u16) -> u16 {
        let id = self.pair_id[triple_index(a) * 85 + triple_index(b)];
        debug_assert_ne!(id, NO_ID, "{a:#b} and {b:#b} are not two parts of a partition");
        id
    }

    /// The parts of partition `id`, ordered by least digit.
    pub(crate) fn parts(&self, id: u16) -> [u16; 3] {
        self.parts[usize::from(id)]
    }

    /// The id of p0 = 123|456|789.
    pub(crate) fn p0(&self) -> u16 {
        self.id(0b1110, 0b111_0000)
    }

    /// The partition `id` with its digits relabelled by `map`.
    #[inline]
    pub(crate) fn relabel(&self, id: u16, map: &MaskMap) -> u16 {
        let [a, b, _] = self.parts(id);
        self.id(map.mask(a), map.mask(b))
    }

    /// Every partition relabelled by `map`, as a table from id to id.
    pub(crate) fn relabelling(&self, map: &MaskMap) -> Vec<u16> {
        (0..PARTITIONS as u16).map(|id| self.relabel(id, map)).collect()
    }
}

/// A digit map sending the partition's parts to 123, 456, 789, in order.
pub(crate) fn map_to_p0(parts: &[u16; 3]) -> [u8; 10] {
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

/// A digit map applied to masks by two table lookups (digits 1-5, then 6-9).
pub(crate) struct MaskMap {
    low: [u16; 32],
    high: [u16; 16],
}

impl MaskMap {
    pub(crate) fn new(map: &[u8; 10]) -> MaskMap {
        let image = |bits: usize, first: usize, width: usize| {
            (0..width).filter(|&i| bits & 1 << i != 0).fold(0u16, |m, i| m | 1 << map[first + i])
        };
        MaskMap {
            low: std::array::from_fn(|bits| image(bits, 1, 5)),
            high: std::array::from_fn(|bits| image(bits, 6, 4)),
        }
    }

    #[inline]
    pub(crate) fn mask(&self, mask: u16) -> u16 {
        self.low[usize::from(mask >> 1 & 31)] | self.high[usize::from(mask >> 6 & 15)]
    }
}

/// Four digit maps that keep p0 = 123|456|789 and generate all 1,296 that
/// do (S3 wr S3): a transposition and a 3-cycle inside 123, and a
/// transposition and a 3-cycle of the three parts.
pub(crate) fn p0_generators() -> [[u8; 10]; 4] {
    let identity: [u8; 10] = std::array::from_fn(|d| d as u8);
    let (mut swap, mut cycle, mut swap_parts, mut cycle_parts) = (identity, identity, identity, identity);
    swap.swap(1, 2);
    (cycle[1], cycle[2], cycle[3]) = (2, 3, 1);
    for d in 1..=3 {
        swap_parts.swap(d, d + 3);
        (cycle_parts[d], cycle_parts[d + 3], cycle_parts[d + 6]) = (d as u8 + 3, d as u8 + 6, d as u8);
    }
    [swap, cycle, swap_parts, cycle_parts]
}

const ORDERS: [[usize; 3]; 6] = [[0, 1, 2], [0, 2, 1], [1, 0, 2], [1, 2, 0], [2, 0, 1], [2, 1, 0]];

/// The digits of each part, as single-bit masks in increasing order.
fn digits_of(parts: &[u16; 3]) -> [[u16; 3]; 3] {
    parts.map(|part| {
        let mut bits = (1..=9).filter(|&d| part & 1 << d != 0).map(|d| 1u16 << d);
        std::array::from_fn(|_| bits.next().expect("a part holds three digits"))
    })
}

/// The 216 ways to order a stack's three columns, as the masks of the
/// digits that land in rows 1 and 2.
fn row_splits(parts: &[u16; 3]) -> Vec<[u16; 2]> {
    let digits = digits_of(parts);
    let mut splits = Vec::with_capacity(216);
    for x in ORDERS {
        for y in ORDERS {
            for z in ORDERS {
                let row = |r: usize| digits[0][x[r]] | digits[1][y[r]] | digits[2][z[r]];
                splits.push([row(0), row(1)]);
            }
        }
    }
    splits
}

/// The 36 partitions transversal to a partition (each part of one meets
/// each part of the other in one digit): the rows a stack of these column
/// sets can have, as a partition, are exactly these.
fn transversals(partitions: &Partitions, parts: &[u16; 3]) -> [u16; 36] {
    let [x, y, z] = digits_of(parts);
    std::array::from_fn(|n| {
        let (ys, zs) = (ORDERS[n / 6], ORDERS[n % 6]);
        partitions.id(x[0] | y[ys[0]] | z[zs[0]], x[1] | y[ys[1]] | z[zs[1]])
    })
}

/// ways(p0, p, q) / 12 for every p, q, at `[p * 280 + q]` (then zeros to [`WAYS_LEN`]).
///
/// Every value is a multiple of 12 (from 96 to 1,728; the test
/// `ways_are_the_definition_and_multiples_of_12` checks seven rows in full
/// and a sample of the rest against the definition), and twelfths fit a
/// byte, so the counter's gathers stay in a 77 KB table.
///
/// A digit map g that keeps p0 gives ways(p0, g p, g q) = ways(p0, p, q),
/// so one row is counted for each orbit of p under the 1,296 such maps (5
/// orbits) and copied, relabelled, along the orbit's spanning tree.
pub(crate) fn ways_table(partitions: &Partitions) -> Vec<u8> {
    let generators: Vec<Vec<u16>> =
        p0_generators().iter().map(|map| partitions.relabelling(&MaskMap::new(map))).collect();
    let transversals: Vec<[u16; 36]> =
        (0..PARTITIONS as u16).map(|id| transversals(partitions, &partitions.parts(id))).collect();
    let p0_splits = row_splits(&partitions.parts(partitions.p0()));
    // Orders of p0's columns with 1, 2, 3 in rows 1, 2, 3: one of each
    // orbit of the row permutations, which change no count.
    let p0_splits: Vec<[u16; 2]> = p0_splits.into_iter().filter(|s| s[0] & 0b10 != 0 && s[1] & 0b100 != 0).collect();
    let mut ways = vec![0u8; WAYS_LEN];
    let mut filled = [false; PARTITIONS];
    let mut stack = Vec::with_capacity(PARTITIONS);
    for start in 0..PARTITIONS {
        if filled[start] {
            continue;
        }
        let row = &mut ways[start * PARTITIONS..][..PARTITIONS];
        let p_splits = row_splits(&partitions.parts(start as u16));
        ways_row(partitions, &p0_splits, &p_splits, &transversals, row);
        filled[start] = true;
        stack.push(start);
        while let Some(p) = stack.pop() {
            for generator in &generators {
                let image = usize::from(generator[p]);
                if filled[image] {
                    continue;
                }
                filled[image] = true;
                for q in 0..PARTITIONS {
                    ways[image * PARTITIONS + usize::from(generator[q])] = ways[p * PARTITIONS + q];
                }
                stack.push(image);
            }
        }
    }
    ways
}

/// One row, ways(p0, p, q) / 12 for every q.
///
/// Each pair of orders of stack 1 (p0, one per orbit of the row
/// permutations: 36) and stack 2 (p: 216) whose rows share no digit forces
/// stack 3's rows; `rows` counts them by the partition the three rows make.
/// Stack 3 with column sets q can take those rows in one way if the
/// partition is transversal to q, else none; so ways(p0, p, q) is 6 x the
/// sum of `rows` over q's 36 transversals.
fn ways_row(
    partitions: &Partitions,
    p0_splits: &[[u16; 2]],
    p_splits: &[[u16; 2]],
    transversals: &[[u16; 36]],
    row: &mut [u8],
) {
    let mut rows = [0u16; PARTITIONS];
    for &[a0, a1] in p0_splits {
        let a2 = ALL_DIGITS ^ a0 ^ a1;
        for &[b0, b1] in p_splits {
            let b2 = ALL_DIGITS ^ b0 ^ b1;
            if a0 & b0 == 0 && a1 & b1 == 0 && a2 & b2 == 0 {
                rows[usize::from(partitions.id(ALL_DIGITS ^ a0 ^ b0, ALL_DIGITS ^ a1 ^ b1))] += 1;
            }
        }
    }
    for (ways, transversals) in row.iter_mut().zip(transversals) {
        let sixths: u32 = transversals.iter().map(|&r| u32::from(rows[usize::from(r)])).sum();
        // ways = 6 x sixths, and a multiple of 12 (the test checks it).
        assert!(sixths.is_multiple_of(2) && sixths / 2 <= 255, "ways(p0, p, q) / 12 fits a byte");
        *ways = (sixths / 2) as u8;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// ways(p1, p2, p3) by its definition: orders of the nine columns, all
    /// 216 x 216 of stacks 1 and 2, each forcing stack 3's rows.
    pub(crate) fn ways_by_definition(p1: &[u16; 3], p2: &[u16; 3], p3: &[u16; 3]) -> u32 {
        let third: std::collections::HashSet<[u16; 2]> = row_splits(p3).into_iter().collect();
        let mut ways = 0;
        for [a0, a1] in row_splits(p1) {
            for [b0, b1] in row_splits(p2) {
                let (a2, b2) = (ALL_DIGITS ^ a0 ^ a1, ALL_DIGITS ^ b0 ^ b1);
                if a0 & b0 == 0 && a1 & b1 == 0 && a2 & b2 == 0 {
                    ways += u32::from(third.contains(&[ALL_DIGITS ^ a0 ^ b0, ALL_DIGITS ^ a1 ^ b1]));
                }
            }
        }
        ways
    }

    #[test]
    fn ids_name_each_partition_from_any_two_parts() {
        let partitions = Partitions::new();
        for id in 0..PARTITIONS as u16 {
            let [a, b, c] = partitions.parts(id);
            assert_eq!(a | b | c, ALL_DIGITS);
            for (x, y) in [(a, b), (b, a), (a, c), (c, a), (b, c), (c, b)] {
                assert_eq!(partitions.id(x, y), id);
            }
        }
    }

    /// The maps keeping p0 split the 280 partitions into the 5 orbits whose
    /// rows `ways_table` counts, and the four generators reach 1,296 maps.
    #[test]
    fn the_maps_keeping_p0_are_1296_with_7_orbits() {
        let compose = |a: &[u8; 10], b: &[u8; 10]| -> [u8; 10] { std::array::from_fn(|d| b[usize::from(a[d])]) };
        let identity: [u8; 10] = std::array::from_fn(|d| d as u8);
        let mut reached = std::collections::BTreeSet::from([identity]);
        let mut stack = vec![identity];
        while let Some(map) = stack.pop() {
            for generator in &p0_generators() {
                let next = compose(&map, generator);
                if reached.insert(next) {
                    stack.push(next);
                }
            }
        }
        assert_eq!(reached.len(), 1296);
        let partitions = Partitions::new();
        let p0 = partitions.p0();
        assert!(reached.iter().all(|map| partitions.relabel(p0, &MaskMap::new(map)) == p0));
        let orbits: std::collections::BTreeSet<u16> = (0..PARTITIONS as u16)
            .map(|p| reached.iter().map(|map| partitions.relabel(p, &MaskMap::new(map))).min().unwrap())
            .collect();
        assert_eq!(orbits.len(), 5);
    }

    #[test]
    fn ways_are_the_definition_and_multiples_of_12() {
        let partitions = Partitions::new();
        let ways = ways_table(&partitions);
        let p0 = partitions.parts(partitions.p0());
        let mut seen = std::collections::BTreeSet::new();
        for p in 0..PARTITIONS as u16 {
            // A few rows in full, and a stride through the rest (every value
            // by definition takes a minute in a release build).
            let step = if p % 40 == 0 { 1 } else { 37 };
            for q in (0..PARTITIONS as u16).step_by(step) {
                let expected = ways_by_definition(&p0, &partitions.parts(p), &partitions.parts(q));
                assert!(expected.is_multiple_of(12));
                assert_eq!(u32::from(ways[usize::from(p) * PARTITIONS + usize::from(q)]) * 12, expected, "{p}, {q}");
                seen.insert(expected);
            }
        }
        // Three stacks all split 123|456|789: three 3x3 Latin squares.
        assert_eq!(u32::from(ways[usize::from(partitions.p0()) * (PARTITIONS + 1)]) * 12, 12 * 12 * 12);
        assert_eq!(seen.first(), Some(&96));
        assert_eq!(seen.last(), Some(&1728));
    }
}
