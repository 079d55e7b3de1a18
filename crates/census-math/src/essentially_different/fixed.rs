//! A(g): the number of grids that a rearrangement g maps to a relabelling of
//! themselves, divided by 9!, counted exactly by a constrained search.
//!
//! Write X(p) for the digit of grid X at cell p. "g(X) is a relabelling of X"
//! means X(g p) = σ(X(p)) for every cell p, for some relabelling σ of the
//! digits, and σ is then unique (every digit occurs in X). So
//!
//! ```text
//! 9! x A(g) = sum over σ in S9 of F(g, σ),   F(g, σ) = #{X : X(g p) = σ(X(p)) for all p}.
//! ```
//!
//! Conjugating σ by a relabelling τ maps the solutions of σ onto those of
//! τστ⁻¹ (X becomes τX), so F depends only on the cycle type λ of σ, and
//! the 9!/z_λ relabellings of type λ contribute equally (z_λ is the order of
//! σ's centraliser C(σ)). Hence
//!
//! ```text
//! A(g) = sum over the 30 cycle types λ of F(g, σ_λ) / z_λ,
//! ```
//!
//! with σ_λ one fixed relabelling of each type. C(σ) maps solutions of σ to
//! solutions of σ and acts freely on them (τX = X forces τ = 1), so
//! F(g, σ) / z_λ is the number of C(σ)-orbits of solutions, and the search
//! counts exactly one solution per orbit:
//!
//! - **Cells come in g-orbits.** Choosing the digit d of the first cell p of
//!   an orbit of length L fixes the whole orbit, X(g^i p) = σ^i(d), and needs
//!   σ^L(d) = d: d's σ-cycle length must divide L; and two cells of the orbit
//!   in one row, column or box, i apart, need σ^i(d) ≠ d. The search assigns
//!   whole orbits (depth = orbits assigned), depth first.
//!   The digits allowed for an orbit are found at once with bit masks: d is
//!   blocked if σ^i(d) is already in a unit of the orbit's i-th cell, i.e. d
//!   is in σ^-i(used), read from a 512-entry table per power of σ. At the
//!   last orbit the allowed digits are counted, not visited.
//! - **Relabellings in C(σ) are broken by first touch.** σ_λ's cycles are
//!   runs of consecutive digits, longest first (`(0 1 2)(3 4 5)(6)(7)(8)` for
//!   3+3+1+1+1). C(σ) permutes cycles of equal length and rotates each cycle,
//!   so in every orbit exactly one solution has this form: the first time
//!   (in the search's fixed order of cells) a digit of an untouched cycle
//!   appears, it is the first digit of the lowest untouched cycle of that
//!   length. The search only tries such digits.
//! - **Equal states are counted once (memo).** Where the units shared by
//!   assigned and unassigned orbits (the frontier) are few (at most 15, and
//!   fewer than one orbit later: e.g. the 9 columns after the first band),
//!   the number of completions depends only on those units' digit masks and
//!   the first-touch state; it is stored in a hash map and reused. This is
//!   the generic form of the census's column-set trick and makes the slow
//!   classes 20 to 200 times faster. A memo is cleared when full, so memory
//!   stays near 100 MB.
//! - **Order.** Orbits are assigned in a fixed order chosen greedily: next
//!   is the orbit with the most peers (cells sharing a unit) among the cells
//!   already assigned, per cell of the orbit.
//!
//! A cycle type is tried only if σ^ord(g) = 1 (X(g^n p) = σ^n(X(p)) and
//! g^n = 1) and, for every length k, the cells whose g-orbit length is a
//! multiple of k can hold the 9 copies of each digit whose cycle length is a
//! multiple of k. The identity g is not counted here: A(1) = N0 / 9!, from
//! the 9x9 census (see the parent module).
//!
//! A count can be split into parts: the nodes the search reaches at a given
//! depth, across all cycle types in order, are numbered, and part i of n
//! keeps the nodes numbered i mod n. The parts add up to the whole exactly.
//! The memo is used only below the split depth (a memo hit above it would
//! skip numbering), so a split costs some sharing between parts.

use std::sync::atomic::{AtomicBool, Ordering};

use rustc_hash::FxHashMap;

use super::group::{Rearrangement, lcm, permutation_order};

/// The cycle types of S9 (the partitions of 9), each longest cycle first,
/// in descending lexicographic order: `[9]` first, `[1; 9]` last.
pub fn cycle_types() -> Vec<Vec<u8>> {
    fn partitions(rest: u8, largest: u8, prefix: &mut Vec<u8>, out: &mut Vec<Vec<u8>>) {
        if rest == 0 {
            out.push(prefix.clone());
            return;
        }
        for part in (1..=largest.min(rest)).rev() {
            prefix.push(part);
            partitions(rest - part, part, prefix, out);
            prefix.pop();
        }
    }
    let mut out = Vec::new();
    partitions(9, 9, &mut Vec::new(), &mut out);
    out
}

/// z_λ, the order of the centraliser of a permutation of cycle type λ:
/// the product over lengths k of k^(m_k) x m_k!.
pub fn centraliser_order(cycle_type: &[u8]) -> u64 {
    (1..=9u8)
        .map(|k| {
            let m = cycle_type.iter().filter(|&&len| len == k).count() as u64;
            u64::from(k).pow(m as u32) * (1..=m).product::<u64>()
        })
        .product()
}

/// Which part of a count to compute: the search nodes at `depth` (orbits
/// assigned), numbered in search order across all cycle types, whose number
/// is `part` mod `parts`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Split {
    pub depth: usize,
    pub part: u64,
    pub parts: u64,
}

impl Split {
    /// The whole count.
    pub const WHOLE: Split = Split { depth: usize::MAX, part: 0, parts: 1 };
}

/// The three unit numbers of each cell: rows 0-8, columns 9-17, boxes 18-26.
const UNITS: [[u8; 3]; 81] = {
    let mut units = [[0u8; 3]; 81];
    let mut p = 0;
    while p < 81 {
        let (r, c) = (p / 9, p % 9);
        units[p] = [r as u8, 9 + c as u8, 18 + (r / 3 * 3 + c / 3) as u8];
        p += 1;
    }
    units
};

fn peers(p: usize, q: usize) -> bool {
    p != q && UNITS[p].iter().zip(UNITS[q].iter()).any(|(a, b)| a == b)
}

/// A flag no one sets: the plain counts are their cancellable forms with it.
static NEVER: AtomicBool = AtomicBool::new(false);

/// Counts solutions of X(g p) = σ_λ(X(p)) up to C(σ_λ), for one g.
pub struct FixedCounter {
    /// g's cell orbits in search order, each listed p, g p, g^2 p, ...
    orbits: Vec<Vec<u8>>,
    /// For each depth: the units shared by the orbits before it and the
    /// orbits from it on (the frontier), if the search memoises there: where
    /// the frontier is at most [`MEMO_UNITS`] and smaller than at the next depth.
    frontiers: Vec<Option<Vec<u8>>>,
    /// The order of g.
    order: u64,
}

/// The most frontier units a memo key holds: 9 is the columns between two
/// bands; 12 to 15 are what a transposing g leaves after the first band and
/// stack (tried: 12 and 18 were slower for the transpose).
const MEMO_UNITS: usize = 15;

/// The most memo entries one search keeps, shared out among its memo depths
/// (about 100 MB; 2^22 made the transpose 15% faster for 130 MB more). A
/// depth's full memo is cleared, which keeps recent entries, the ones near
/// the current path.
const MEMO_CAPACITY: usize = 1 << 21;

impl FixedCounter {
    /// Prepares the search for g: its cell orbits, ordered greedily so that
    /// each next orbit is the one most tied (by shared rows, columns and
    /// boxes) to the cells already assigned, which prunes early.
    pub fn new(g: Rearrangement) -> FixedCounter {
        let cells = g.cells();
        let mut seen = [false; 81];
        let mut orbits = Vec::new();
        for start in 0..81 {
            let mut orbit = Vec::new();
            let mut p = start;
            while !seen[p] {
                seen[p] = true;
                orbit.push(p as u8);
                p = usize::from(cells[p]);
            }
            if !orbit.is_empty() {
                orbits.push(orbit);
            }
        }
        let orbits = search_order(orbits);
        let units_of = |orbits: &[Vec<u8>]| -> u32 {
            orbits.iter().flatten().flat_map(|&p| UNITS[usize::from(p)]).fold(0, |m, u| m | 1 << u)
        };
        let shared: Vec<Vec<u8>> = (0..orbits.len())
            .map(|d| {
                let shared = units_of(&orbits[..d]) & units_of(&orbits[d..]);
                (0..27).filter(|u| shared & 1 << u != 0).collect()
            })
            .collect();
        let frontiers = (0..orbits.len())
            .map(|d| {
                let size = shared[d].len();
                // A local minimum of the frontier's size, where a band or
                // a block of cells has just been finished.
                let minimal =
                    d > 0 && size <= shared[d - 1].len() && shared.get(d + 1).is_none_or(|next| size < next.len());
                (minimal && size <= MEMO_UNITS).then(|| shared[d].clone())
            })
            .collect();
        FixedCounter { orbits, frontiers, order: permutation_order(&cells) }
    }

    /// The number of g-orbits of cells, the depth of the search tree.
    pub fn depth(&self) -> usize {
        self.orbits.len()
    }

    /// The cycle types the search tries for g (see the module doc).
    pub fn admissible_cycle_types(&self) -> Vec<Vec<u8>> {
        cycle_types().into_iter().filter(|t| self.admits(t)).collect()
    }

    fn admits(&self, cycle_type: &[u8]) -> bool {
        let order = cycle_type.iter().fold(1u64, |o, &k| lcm(o, u64::from(k)));
        if !self.order.is_multiple_of(order) {
            return false;
        }
        (1..=9usize).all(|k| {
            let room: usize = self.orbits.iter().map(Vec::len).filter(|len| len.is_multiple_of(k)).sum();
            let digits: usize =
                cycle_type.iter().map(|&len| usize::from(len)).filter(|len| len.is_multiple_of(k)).sum();
            room >= 9 * digits
        })
    }

    /// A(g) restricted to one part of the split: the sum over admissible
    /// cycle types λ of the number of C(σ_λ)-orbits of solutions, within the part.
    pub fn count(&self, split: Split) -> u64 {
        self.count_cancellable(split, &NEVER).expect("never cancelled")
    }

    /// [`FixedCounter::count`], or `None` when `cancel` is set before it is
    /// done. The flag is read at every node of the search, so even the
    /// longest part (minutes) stops within microseconds of it.
    pub fn count_cancellable(&self, split: Split, cancel: &AtomicBool) -> Option<u64> {
        let mut numbered = 0u64;
        let mut total = 0;
        for t in self.admissible_cycle_types() {
            total += self.count_type(&t, split, &mut numbered, true, cancel);
            if cancel.load(Ordering::Relaxed) {
                return None;
            }
        }
        Some(total)
    }

    /// The number of search nodes at `depth` (orbits assigned), over all
    /// admissible cycle types: how finely a split at that depth can cut.
    pub fn nodes_at(&self, depth: usize) -> u64 {
        let mut numbered = 0u64;
        // No node is numbered u64::MAX - 1, so every node at `depth` is cut off.
        let split = Split { depth, part: u64::MAX - 1, parts: u64::MAX };
        for t in self.admissible_cycle_types() {
            self.count_type(&t, split, &mut numbered, true, &NEVER);
        }
        numbered
    }

    /// F(g, σ_λ) / z_λ for one cycle type, the whole count.
    pub fn count_cycle_type(&self, cycle_type: &[u8]) -> u64 {
        self.count_type(cycle_type, Split::WHOLE, &mut 0, true, &NEVER)
    }

    /// F(g, σ_λ) itself, without first touch: every solution is visited.
    /// Slow; for checking the first-touch reduction on small cases.
    pub fn count_cycle_type_unreduced(&self, cycle_type: &[u8]) -> u64 {
        self.count_type(cycle_type, Split::WHOLE, &mut 0, false, &NEVER)
    }

    /// A cancelled search returns a partial number: callers read `cancel` after.
    fn count_type(
        &self,
        cycle_type: &[u8],
        split: Split,
        numbered: &mut u64,
        first_touch: bool,
        cancel: &AtomicBool,
    ) -> u64 {
        let relabelling = Relabelling::of_type(cycle_type);
        let orbits: Vec<PlannedOrbit> = self.orbits.iter().map(|o| PlannedOrbit::new(o, &relabelling)).collect();
        let state = State {
            used: [0; 27],
            touched: if first_touch { 0 } else { 0x1ff },
            open: if first_touch { relabelling.firsts } else { 0x1ff },
        };
        // A memo hit at or above the split depth (nearer the root) would
        // skip the numbering of the split nodes under it.
        let memo_from = if split.parts == 1 { 0 } else { split.depth.saturating_add(1) };
        let frontiers: Vec<Option<&[u8]>> =
            self.frontiers.iter().enumerate().map(|(d, f)| f.as_deref().filter(|_| d >= memo_from)).collect();
        let mut search = Search {
            orbits: &orbits,
            relabelling: &relabelling,
            split,
            numbered,
            cancel,
            memo_capacity: (MEMO_CAPACITY / frontiers.iter().flatten().count().max(1)).max(1 << 12),
            frontiers: &frontiers,
            memo: (0..orbits.len()).map(|_| FxHashMap::default()).collect(),
        };
        search.run(0, &state)
    }
}

/// Orders orbits greedily: next is the orbit with the most (cell, assigned
/// peer) pairs per cell, ties to the lowest first cell.
fn search_order(mut rest: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
    let mut assigned: Vec<u8> = Vec::new();
    let mut ordered = Vec::with_capacity(rest.len());
    while !rest.is_empty() {
        let score = |orbit: &Vec<u8>| {
            orbit
                .iter()
                .map(|&p| assigned.iter().filter(|&&q| peers(usize::from(p), usize::from(q))).count())
                .sum::<usize>()
        };
        // Per cell, so that a fixed cell is not put off behind larger orbits.
        let best = (0..rest.len())
            .max_by(|&i, &j| {
                let by_score = (score(&rest[i]) * rest[j].len()).cmp(&(score(&rest[j]) * rest[i].len()));
                by_score.then(rest[j][0].cmp(&rest[i][0]))
            })
            .expect("not empty");
        let orbit = rest.remove(best);
        assigned.extend_from_slice(&orbit);
        ordered.push(orbit);
    }
    ordered
}

/// A relabelling σ_λ, its powers, and the first-touch bookkeeping of its centraliser.
struct Relabelling {
    /// `power[k][d]` = σ^k(d), for k below the order of σ.
    power: Vec<[u8; 9]>,
    /// `back[k][mask]` = the digits d with σ^k(d) in mask.
    back: Vec<[u16; 512]>,
    /// The length of d's cycle.
    cycle_length: [u8; 9],
    /// The digits of d's cycle, as a mask.
    cycle_mask: [u16; 9],
    /// For the first digit of a cycle: the first digit of the following
    /// cycle of the same length, as a mask (0 if there is none).
    next_first: [u16; 9],
    /// The first digit of the first cycle of each length, as a mask.
    firsts: u16,
}

impl Relabelling {
    fn of_type(cycle_type: &[u8]) -> Relabelling {
        let mut next = [0u8; 9];
        let mut cycle_length = [0u8; 9];
        let mut cycle_mask = [0u16; 9];
        let mut next_first = [0u16; 9];
        let mut firsts = 0u16;
        let mut start = 0usize;
        let mut previous: Option<(usize, u8)> = None;
        for &len in cycle_type {
            let n = usize::from(len);
            for i in 0..n {
                next[start + i] = (start + (i + 1) % n) as u8;
                cycle_length[start + i] = len;
                cycle_mask[start + i] = ((1u16 << n) - 1) << start;
            }
            match previous {
                Some((first, previous_len)) if previous_len == len => next_first[first] = 1 << start,
                _ => firsts |= 1 << start,
            }
            previous = Some((start, len));
            start += n;
        }
        let order = cycle_type.iter().fold(1u64, |o, &k| lcm(o, u64::from(k))) as usize;
        let mut power = vec![std::array::from_fn(|d| d as u8)];
        for k in 1..order {
            let previous: [u8; 9] = power[k - 1];
            power.push(std::array::from_fn(|d| next[usize::from(previous[d])]));
        }
        let back = power
            .iter()
            .map(|p| {
                std::array::from_fn(|mask| (0..9).filter(|&d| mask & 1 << p[d] != 0).fold(0u16, |m, d| m | 1 << d))
            })
            .collect();
        Relabelling { power, back, cycle_length, cycle_mask, next_first, firsts }
    }

    fn order(&self) -> usize {
        self.power.len()
    }
}

/// One g-orbit prepared for one relabelling.
struct PlannedOrbit {
    /// Each cell's three units and its position in the orbit mod the order of σ.
    cells: Vec<([u8; 3], u8)>,
    /// The digits the orbit's first cell may hold: d's cycle length divides
    /// the orbit's length, and cells of the orbit sharing a unit get different digits.
    allowed: u16,
}

impl PlannedOrbit {
    fn new(orbit: &[u8], relabelling: &Relabelling) -> PlannedOrbit {
        let len = orbit.len();
        let allowed = (0..9)
            .filter(|&d| {
                let cycle = usize::from(relabelling.cycle_length[d]);
                len.is_multiple_of(cycle)
                    && (0..len).all(|i| {
                        (i + 1..len).all(|j| {
                            !peers(usize::from(orbit[i]), usize::from(orbit[j])) || !(j - i).is_multiple_of(cycle)
                        })
                    })
            })
            .fold(0u16, |m, d| m | 1 << d);
        let cells =
            orbit.iter().enumerate().map(|(i, &p)| (UNITS[usize::from(p)], (i % relabelling.order()) as u8)).collect();
        PlannedOrbit { cells, allowed }
    }
}

/// The search state: digits used in each of the 27 units, and which digits
/// first touch still allows.
#[derive(Clone, Copy)]
struct State {
    used: [u16; 27],
    touched: u16,
    open: u16,
}

/// A memo key: depth, then the frontier units' masks, touched and open.
type MemoKey = [u16; MEMO_UNITS + 3];

struct Search<'a> {
    orbits: &'a [PlannedOrbit],
    relabelling: &'a Relabelling,
    split: Split,
    numbered: &'a mut u64,
    /// Set, every node answers 0 at once: the count is abandoned.
    cancel: &'a AtomicBool,
    /// The frontier units at depths where subtree counts are memoised.
    frontiers: &'a [Option<&'a [u8]>],
    /// Subtree counts by state: two nodes at one depth whose frontier units,
    /// touched and open digits agree have the same completions, since every
    /// other unit a later orbit touches is still empty.
    memo: Vec<FxHashMap<MemoKey, u64>>,
    /// The most entries one depth's memo keeps.
    memo_capacity: usize,
}

impl Search<'_> {
    fn run(&mut self, depth: usize, state: &State) -> u64 {
        if depth == self.orbits.len() {
            return 1;
        }
        // One relaxed load a node, against hashing and a memo lookup: free.
        if self.cancel.load(Ordering::Relaxed) {
            return 0;
        }
        if depth == self.split.depth {
            let number = *self.numbered;
            *self.numbered += 1;
            if number % self.split.parts != self.split.part {
                return 0;
            }
        }
        let key = self.frontiers[depth].map(|units| {
            let mut key: MemoKey = [0; MEMO_UNITS + 3];
            key[0] = depth as u16;
            key[1] = state.touched;
            key[2] = state.open;
            for (slot, &u) in key[3..].iter_mut().zip(units) {
                *slot = state.used[usize::from(u)];
            }
            key
        });
        if let Some(key) = &key
            && let Some(&count) = self.memo[depth].get(key)
        {
            return count;
        }
        let total = self.expand(depth, state);
        if let Some(key) = key {
            let memo = &mut self.memo[depth];
            if memo.len() >= self.memo_capacity {
                memo.clear();
            }
            memo.insert(key, total);
        }
        total
    }

    fn expand(&mut self, depth: usize, state: &State) -> u64 {
        let orbit = &self.orbits[depth];
        let r = self.relabelling;
        let mut blocked = 0u16;
        for &([a, b, c], k) in &orbit.cells {
            let used = state.used[usize::from(a)] | state.used[usize::from(b)] | state.used[usize::from(c)];
            blocked |= r.back[usize::from(k)][usize::from(used)];
        }
        let mut candidates = orbit.allowed & state.open & !blocked;
        if depth + 1 == self.orbits.len() {
            return u64::from(candidates.count_ones());
        }
        let mut total = 0;
        while candidates != 0 {
            let d = candidates.trailing_zeros() as usize;
            candidates &= candidates - 1;
            let mut next = *state;
            if next.touched & 1 << d == 0 {
                next.touched |= r.cycle_mask[d];
                next.open |= r.cycle_mask[d] | r.next_first[d];
            }
            for &([a, b, c], k) in &orbit.cells {
                let bit = 1u16 << r.power[usize::from(k)][d];
                next.used[usize::from(a)] |= bit;
                next.used[usize::from(b)] |= bit;
                next.used[usize::from(c)] |= bit;
            }
            total += self.run(depth + 1, &next);
        }
        total
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn there_are_30_cycle_types_with_centralisers_summing_to_one() {
        let types = cycle_types();
        assert_eq!(types.len(), 30);
        assert!(types.iter().all(|t| t.iter().map(|&k| u32::from(k)).sum::<u32>() == 9));
        // The class sizes 9!/z_λ add up to 9!.
        assert_eq!(types.iter().map(|t| 362_880 / centraliser_order(t)).sum::<u64>(), 362_880);
        assert_eq!(centraliser_order(&[1; 9]), 362_880);
        assert_eq!(centraliser_order(&[3, 3, 1, 1, 1]), 9 * 2 * 6);
    }

    #[test]
    fn relabelling_cycles_are_runs_longest_first() {
        let r = Relabelling::of_type(&[3, 3, 1, 1, 1]);
        assert_eq!(r.power[1], [1, 2, 0, 4, 5, 3, 6, 7, 8]);
        assert_eq!(r.power[2], [2, 0, 1, 5, 3, 4, 6, 7, 8]);
        assert_eq!(r.order(), 3);
        assert_eq!(r.back[1][1 << 1], 1 << 0);
        assert_eq!(r.firsts, 1 << 0 | 1 << 6);
        assert_eq!(r.next_first[0], 1 << 3);
        assert_eq!(r.next_first[3], 0);
        assert_eq!(r.next_first[6], 1 << 7);
    }
}
