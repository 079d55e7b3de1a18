//! Ed Russell's classes (stacks, columns, rows and same column sets), as
//! orbits on the column sets of B2 and B3.
//!
//! Every Russell move keeps the column sets of a band up to a relabelling,
//! and no move sees more than those sets; so a band's class depends only on
//! the partitions of 1-9 into the column sets of B2 and of B3: a
//! configuration (p, q), one of 280 x 280. Written with B1's column sets
//! {1,4,7}, {2,5,8}, {3,6,9} relabelled to p0 = 123|456|789, the moves act
//! on configurations as:
//!
//! - same column sets, rows, and B1's columns: a digit map that keeps p0 (all
//!   1,296 of them: the 216 inside B1's columns are the first move, the row
//!   orders and column orders of B1 give the rest), applied to p and q;
//! - B2 and B3 swapped: (q, p);
//! - B2 made B1: (g p0, g q), g a map sending p to p0 (which one is
//!   immaterial, they differ by a map keeping p0);
//! - columns of B2 and B3 reordered: nothing (a partition has no order).

use super::UnionFind;
use crate::band::Band;
use crate::counter::partitions::{MaskMap, PARTITIONS, Partitions, map_to_p0, p0_generators};

/// The digit map sending B1's column sets {1,4,7}, {2,5,8}, {3,6,9} to
/// 123, 456, 789.
const B1_COLUMNS_TO_P0: [u8; 10] = [0, 1, 4, 7, 2, 5, 8, 3, 6, 9];

/// Each catalogue band's class, as a number below the catalogue's length.
///
/// The orbits of the configurations under the maps keeping p0 and the swap
/// are walked first; the move "B2 made B1" is then made from one
/// configuration of each orbit and its swap only: from (h p, h q), h a map
/// keeping p0, it gives (g' h p0, g' h q) with g' h sending p to p0, which
/// is (g p0, g q) moved by a map keeping p0, so in the same orbit.
pub(super) fn components(bands: &[Band]) -> Vec<u32> {
    let partitions = Partitions::new();
    let generators: Vec<Vec<u16>> =
        p0_generators().iter().map(|map| partitions.relabelling(&MaskMap::new(map))).collect();
    let (orbit_of, firsts) = orbits(&generators);
    let mut joined = UnionFind::new(firsts.len());
    let p0 = partitions.p0();
    for (orbit, &first) in firsts.iter().enumerate() {
        let (p, q) = (first as u16 / PARTITIONS as u16, first as u16 % PARTITIONS as u16);
        for (p, q) in [(p, q), (q, p)] {
            let map = MaskMap::new(&map_to_p0(&partitions.parts(p)));
            let moved = configuration(partitions.relabel(p0, &map), partitions.relabel(q, &map));
            joined.union(orbit as u32, u32::from(orbit_of[moved]));
        }
    }
    // The catalogue is 1,008 runs of 36 bands that share rows 1 and 2 and
    // take the 6 x 6 orders of B2's and B3's row 3 (B2's the outer loop):
    // B2's column sets change with i in band 6 i + j of a run, B3's with j.
    let to_p0 = partitions.relabelling(&MaskMap::new(&B1_COLUMNS_TO_P0));
    let partition = |band: &Band, block: usize| {
        let mask = |c: usize| band.column_mask(3 * block + c);
        to_p0[usize::from(partitions.id(mask(0), mask(1)))]
    };
    let mut components = Vec::with_capacity(bands.len());
    for run in bands.chunks_exact(36) {
        let b2: [u16; 6] = std::array::from_fn(|i| partition(&run[6 * i], 1));
        let b3: [u16; 6] = std::array::from_fn(|j| partition(&run[j], 2));
        for (n, band) in run.iter().enumerate() {
            let (p, q) = (b2[n / 6], b3[n % 6]);
            debug_assert_eq!((p, q), (partition(band, 1), partition(band, 2)));
            components.push(joined.find(u32::from(orbit_of[configuration(p, q)])));
        }
    }
    components
}

/// A configuration's number: `p * 280 + q`.
fn configuration(p: u16, q: u16) -> usize {
    usize::from(p) * PARTITIONS + usize::from(q)
}

/// The orbits of the 78,400 configurations under `generators` (acting on
/// both partitions) and the swap: each configuration's orbit number, and
/// each orbit's first configuration.
///
/// A configuration and its swap are always in one orbit, so the walk goes
/// through the configurations with p <= q only and numbers the others after.
fn orbits(generators: &[Vec<u16>]) -> (Vec<u16>, Vec<u32>) {
    let ordered = |p: u16, q: u16| if p <= q { configuration(p, q) } else { configuration(q, p) };
    let mut orbit_of = vec![u16::MAX; PARTITIONS * PARTITIONS];
    let mut firsts = Vec::new();
    let mut stack = Vec::new();
    for p in 0..PARTITIONS as u16 {
        for q in p..PARTITIONS as u16 {
            let start = configuration(p, q);
            if orbit_of[start] != u16::MAX {
                continue;
            }
            let orbit = u16::try_from(firsts.len()).expect("fewer than 65,535 orbits");
            firsts.push(start as u32);
            orbit_of[start] = orbit;
            stack.push((p, q));
            while let Some((p, q)) = stack.pop() {
                for g in generators {
                    let (p, q) = (g[usize::from(p)], g[usize::from(q)]);
                    let image = ordered(p, q);
                    if orbit_of[image] == u16::MAX {
                        orbit_of[image] = orbit;
                        stack.push((p.min(q), p.max(q)));
                    }
                }
            }
        }
    }
    for p in 0..PARTITIONS as u16 {
        for q in 0..p {
            orbit_of[configuration(p, q)] = orbit_of[configuration(q, p)];
        }
    }
    (orbit_of, firsts)
}
