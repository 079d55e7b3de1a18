//! The column-set counter.
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
//! A stack's column sets can be chosen 56 ways, so a band has 56 x 56 x 56
//! terms; the seeds split stack 1's 56 into ten groups, together the 28 with
//! 2 in B4's column 1 (the other 28, with 2 in B7's, are the same
//! completions with M and L swapped).
//!
//! ways(p1, p2, p3) is read from the table ways(p0, p, q) of
//! [`partitions::ways_table`] after relabelling p2 and p3 by a map that sends
//! p1 to p0. Since B1 is always 123/456/789, stack 1's 28 choices, and so
//! those maps, are the same for every band: they are made once.
//!
//! Two sums, equal term by term:
//!
//! - one seed ([`Counter::count`]): for each of the seed's (at most 3)
//!   choices of stack 1, 56 x 56 products of two bytes gathered from the
//!   77 KB table;
//! - all ten seeds ([`Counter::count_seeds`]), once [`ColumnSets`] has
//!   counted a few hundred bands: for each of the 56 x 56 choices of stacks 2
//!   and 3, one 64-byte line holds ways(M) for all 28 choices of stack 1 and
//!   another ways(L), and the 28 products are one vector multiply-add. The
//!   lines (5 MB, about 12 ms) are made from the table once, when needed.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::partitions::{self, MaskMap, PARTITIONS, Partitions};
use super::{ALL_DIGITS, Counter};
use crate::band::Band;
use crate::seed::{SEEDS, Seed};

/// The choices of one stack's column sets in M, and of stack 1 with 2 in B4.
const CHOICES: usize = 56;
const FIRSTS: usize = 28;

/// B1's column sets: {1,4,7}, {2,5,8}, {3,6,9}.
const B1_COLUMNS: [u16; 3] = [0b1001_0010, 0b1_0010_0100, 0b10_0100_1000];

/// Bands whose seeds [`ColumnSets::count_seeds`] counts term by term before
/// it makes the lines: the lines cost about as much as 300 bands' seeds.
const BANDS_BEFORE_LINES: usize = 300;

/// The column-set counter; [`ColumnSets::new`] builds its tables (about
/// 180 KB, a quarter of a millisecond) and `count_seeds`, after a few
/// hundred bands, the lines (5 MB).
pub struct ColumnSets {
    partitions: Partitions,
    /// ways(p0, p, q) / 12 at `[p * 280 + q]`, then zeros to `WAYS_LEN`.
    ways: Vec<u8>,
    /// The 56 choices of stack 1 under B1, as masks: every stack's, relabelled.
    b1_choices: Vec<[u16; 3]>,
    /// Stack 1's choices with 2 in B4's column 1 (`firsts`), ordered by seed:
    /// seed i's are `seed_start[i]..seed_start[i + 1]`.
    seed_start: [usize; 11],
    /// `relabel[i * 280 + p]`: p relabelled by the map that sends M's
    /// partition of first choice i to p0 (i < 28), or L's of choice i - 28.
    relabel: Vec<u16>,
    /// How many bands `count_seeds` has counted term by term.
    bands_counted: AtomicUsize,
    lines: OnceLock<Lines>,
}

impl Default for ColumnSets {
    fn default() -> ColumnSets {
        ColumnSets::new()
    }
}

/// A choice of one stack's column sets in M, as the ids of M's and L's partitions.
#[derive(Clone, Copy, Default)]
struct StackChoice {
    middle: u16,
    bottom: u16,
}

/// A digit map sending each part of `from` to the same part of `to`, in
/// increasing order of digits.
fn map_between(from: &[u16; 3], to: &[u16; 3]) -> [u8; 10] {
    let mut map = [0u8; 10];
    for (&from, &to) in from.iter().zip(to) {
        let targets = (1..=9u8).filter(|&d| to & 1 << d != 0);
        for (d, target) in (1..=9).filter(|&d| from & 1 << d != 0).zip(targets) {
            map[d] = target;
        }
    }
    map
}

/// The 56 choices of a stack's column sets in M (column order kept) under
/// the top band's column sets `top`, as masks.
fn stack_choices(top: [u16; 3]) -> impl Iterator<Item = [u16; 3]> {
    partitions::TRIPLES.into_iter().filter(move |&a| a & top[0] == 0).flat_map(move |a| {
        partitions::TRIPLES.into_iter().filter(move |&b| b & (top[1] | a) == 0).filter_map(move |b| {
            let c = ALL_DIGITS ^ a ^ b;
            (c & top[2] == 0).then_some([a, b, c])
        })
    })
}

impl ColumnSets {
    pub fn new() -> ColumnSets {
        let partitions = Partitions::new();
        let ways = partitions::ways_table(&partitions);
        let mut firsts: Vec<(usize, StackChoice)> = stack_choices(B1_COLUMNS)
            .filter(|[a, _, _]| a & 0b100 != 0)
            .map(|[a, b, c]| {
                let seed = SEEDS.iter().position(|s| s.b4.iter().fold(0, |m, &d| m | 1 << d) == a);
                let bottom =
                    [ALL_DIGITS ^ B1_COLUMNS[0] ^ a, ALL_DIGITS ^ B1_COLUMNS[1] ^ b, ALL_DIGITS ^ B1_COLUMNS[2] ^ c];
                let choice = StackChoice { middle: partitions.id(a, b), bottom: partitions.id(bottom[0], bottom[1]) };
                (seed.expect("B4's column 1 holds 2 and two of 3, 5, 6, 8, 9"), choice)
            })
            .collect();
        firsts.sort_by_key(|&(seed, _)| seed);
        let seed_start = std::array::from_fn(|i| firsts.partition_point(|&(seed, _)| seed < i));
        let firsts: [StackChoice; FIRSTS] = std::array::from_fn(|i| firsts[i].1);
        let relabel = firsts
            .iter()
            .map(|choice| choice.middle)
            .chain(firsts.iter().map(|choice| choice.bottom))
            .flat_map(|id| partitions.relabelling(&MaskMap::new(&partitions::map_to_p0(&partitions.parts(id)))))
            .collect();
        ColumnSets {
            partitions,
            ways,
            b1_choices: stack_choices(B1_COLUMNS).collect(),
            seed_start,
            relabel,
            bands_counted: AtomicUsize::new(0),
            lines: OnceLock::new(),
        }
    }

    /// Stacks 2 and 3 of M: each one's 56 choices.
    fn prepare(&self, band: &Band) -> [[StackChoice; CHOICES]; 2] {
        assert!(band.is_standard(), "counters take a band with B1 = 123/456/789; normalize {band} first");
        std::array::from_fn(|s| {
            let top: [u16; 3] = std::array::from_fn(|c| band.column_mask(3 * (s + 1) + c));
            // Stack 1's choices under B1 carried to this stack by a digit
            // map sending B1's column sets to the stack's, in order.
            let map = MaskMap::new(&map_between(&B1_COLUMNS, &top));
            std::array::from_fn(|k| {
                let [a, b, c] = self.b1_choices[k].map(|mask| map.mask(mask));
                let bottom = [ALL_DIGITS ^ top[0] ^ a, ALL_DIGITS ^ top[1] ^ b, ALL_DIGITS ^ top[2] ^ c];
                StackChoice { middle: self.partitions.id(a, b), bottom: self.partitions.id(bottom[0], bottom[1]) }
            })
        })
    }

    /// A row of the ways table, ways(p0, p, q) / 12 for every q.
    fn row(&self, p: u16) -> &[u8; 1 << 16] {
        self.ways[usize::from(p) * PARTITIONS..][..1 << 16].try_into().expect("the table holds a u16 after each row")
    }

    /// The sum over stacks 2 and 3 of ways(M) x ways(L) / 144 for one
    /// choice of stack 1 (`firsts[first]`).
    fn count_first(&self, first: usize, [second, third]: &[[StackChoice; CHOICES]; 2]) -> u64 {
        let middle_map = &self.relabel[first * PARTITIONS..][..PARTITIONS];
        let bottom_map = &self.relabel[(FIRSTS + first) * PARTITIONS..][..PARTITIONS];
        // Stack 3's relabelled partitions.
        let middle3: [u16; CHOICES] = std::array::from_fn(|k| middle_map[usize::from(third[k].middle)]);
        let bottom3: [u16; CHOICES] = std::array::from_fn(|k| bottom_map[usize::from(third[k].bottom)]);
        // Two choices of stack 2 at a time share each load of stack 3's
        // (four spill registers).
        let mut total = 0u64;
        for twos in second.chunks_exact(2) {
            let middle: [&[u8; 1 << 16]; 2] =
                std::array::from_fn(|i| self.row(middle_map[usize::from(twos[i].middle)]));
            let bottom: [&[u8; 1 << 16]; 2] =
                std::array::from_fn(|i| self.row(bottom_map[usize::from(twos[i].bottom)]));
            // At most 56 x 144 x 144 each: no overflow.
            let mut sums = [0u32; 2];
            for (&m, &b) in middle3.iter().zip(&bottom3) {
                for i in 0..2 {
                    sums[i] += u32::from(middle[i][usize::from(m)]) * u32::from(bottom[i][usize::from(b)]);
                }
            }
            total += sums.iter().map(|&sum| u64::from(sum)).sum::<u64>();
        }
        total
    }

    /// c(T, s) for every seed, term by term.
    fn count_seeds_by_terms(&self, stacks: &[[StackChoice; CHOICES]; 2]) -> [u64; 10] {
        // ways = 12 x the table's twelfths, so ways(M) x ways(L) / 36 = 4 x
        // the product of twelfths.
        std::array::from_fn(|i| {
            (self.seed_start[i]..self.seed_start[i + 1]).map(|first| 4 * self.count_first(first, stacks)).sum()
        })
    }

    /// c(T, s) for every seed, 28 choices of stack 1 at a time.
    fn count_seeds_by_lines(&self, lines: &Lines, stacks: &[[StackChoice; CHOICES]; 2]) -> [u64; 10] {
        let sums = lines.sums(stacks);
        std::array::from_fn(|i| {
            sums[self.seed_start[i]..self.seed_start[i + 1]].iter().map(|&s| 4 * u64::from(s)).sum()
        })
    }
}

/// The lines' sum for one band: per first choice, the sum over stacks 2 and
/// 3 of the products of twelfths (at most 56 x 56 x 144 x 144 < 2^32).
///
/// `inline(always)` so that each caller compiles it for its own target
/// features: the same loop becomes 32 lanes of byte widening and 16-bit
/// multiply-adds.
#[inline(always)]
fn lines_sums(lines: &[Line], [second, third]: &[[StackChoice; CHOICES]; 2]) -> [u32; 32] {
    // Four groups of eight lanes: the shape the vectorizer maps onto whole
    // registers (32 lanes as one array it split unevenly).
    let mut sums = [[0u32; 8]; 4];
    for two in second {
        let middle = &lines[usize::from(two.middle) * PARTITIONS..][..PARTITIONS];
        let bottom = &lines[usize::from(two.bottom) * PARTITIONS..][..PARTITIONS];
        for three in third {
            let middle = &middle[usize::from(three.middle)].0;
            let bottom = &bottom[usize::from(three.bottom)].0;
            for (group, sums) in sums.iter_mut().enumerate() {
                for (i, sum) in sums.iter_mut().enumerate() {
                    *sum += u32::from(middle[8 * group + i]) * u32::from(bottom[32 + 8 * group + i]);
                }
            }
        }
    }
    std::array::from_fn(|lane| sums[lane / 8][lane % 8])
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn lines_sums_avx2(lines: &[Line], stacks: &[[StackChoice; CHOICES]; 2]) -> [u32; 32] {
    lines_sums(lines, stacks)
}

/// For every pair of partitions (p, q) of stacks 2 and 3, a line of ways /
/// 12: bytes 0-27 for M's stack 1 as each of the 28 first choices (ways of
/// firsts[i].middle, p, q), bytes 32-59 for L's (firsts[i].bottom, p, q).
struct Lines {
    lines: Vec<Line>,
    /// Whether the processor has AVX2 (32-byte vectors), found at run time.
    avx2: bool,
}

#[derive(Clone, Copy)]
#[repr(align(64))]
struct Line([u8; 64]);

impl Lines {
    fn new(counter: &ColumnSets) -> Lines {
        // The relabelling of each used lane, and for each p and lane where
        // p's row of the table starts once relabelled, and where p falls in a row.
        let lanes: Vec<(usize, &[u16])> = (0..64)
            .filter(|lane| lane % 32 < FIRSTS)
            .map(|lane| (lane, &counter.relabel[(lane / 32 * FIRSTS + lane % 32) * PARTITIONS..][..PARTITIONS]))
            .collect();
        let at: Vec<[(u32, u16); 64]> = (0..PARTITIONS)
            .map(|p| {
                let mut at = [(0u32, 0u16); 64];
                for &(lane, relabel) in &lanes {
                    at[lane] = (u32::from(relabel[p]) * PARTITIONS as u32, relabel[p]);
                }
                at
            })
            .collect();
        let mut lines = vec![Line([0; 64]); PARTITIONS * PARTITIONS];
        for p in 0..PARTITIONS {
            for q in p..PARTITIONS {
                let mut line = Line([0; 64]);
                for (lane, value) in line.0.iter_mut().enumerate() {
                    if lane % 32 < FIRSTS {
                        *value = counter.ways[at[p][lane].0 as usize + usize::from(at[q][lane].1)];
                    }
                }
                // ways(p1, p, q) = ways(p1, q, p).
                lines[p * PARTITIONS + q] = line;
                lines[q * PARTITIONS + p] = line;
            }
        }
        Lines { lines, avx2: avx2() }
    }

    fn sums(&self, stacks: &[[StackChoice; CHOICES]; 2]) -> [u32; 32] {
        #[cfg(target_arch = "x86_64")]
        if self.avx2 {
            // SAFETY: the processor has AVX2 (`avx2()` asked it), which is
            // all that `lines_sums_avx2` requires beyond its safe body.
            return unsafe { lines_sums_avx2(&self.lines, stacks) };
        }
        lines_sums(&self.lines, stacks)
    }
}

fn avx2() -> bool {
    #[cfg(target_arch = "x86_64")]
    return std::arch::is_x86_feature_detected!("avx2");
    #[cfg(not(target_arch = "x86_64"))]
    return false;
}

impl Counter for ColumnSets {
    fn count(&self, band: &Band, seed: &Seed) -> u64 {
        let stacks = self.prepare(band);
        let i = seed.index();
        (self.seed_start[i]..self.seed_start[i + 1]).map(|first| 4 * self.count_first(first, &stacks)).sum()
    }

    fn count_seeds(&self, band: &Band) -> [u64; 10] {
        let stacks = self.prepare(band);
        if self.lines.get().is_none() && self.bands_counted.fetch_add(1, Ordering::Relaxed) < BANDS_BEFORE_LINES {
            return self.count_seeds_by_terms(&stacks);
        }
        let lines = self.lines.get_or_init(|| Lines::new(self));
        self.count_seeds_by_lines(lines, &stacks)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::LazyLock;

    use proptest::prelude::*;

    use super::*;
    use crate::counter::column_sets_reference;

    static COUNTER: LazyLock<ColumnSets> = LazyLock::new(ColumnSets::new);
    static REFERENCE: LazyLock<column_sets_reference::ColumnSets> =
        LazyLock::new(column_sets_reference::ColumnSets::new);
    static CATALOGUE: LazyLock<Vec<Band>> = LazyLock::new(crate::catalogue::catalogue);

    #[test]
    fn stack_1_has_28_choices_with_2_in_b4_split_by_seed() {
        assert_eq!(stack_choices(B1_COLUMNS).count(), 56);
        let per_seed: Vec<usize> = (0..10).map(|i| COUNTER.seed_start[i + 1] - COUNTER.seed_start[i]).collect();
        // 258/369 is the one seed whose B4 column leaves one way for B4's other columns.
        assert_eq!(per_seed, [3, 3, 3, 3, 3, 1, 3, 3, 3, 3]);
    }

    /// A catalogue band with the columns of B2 and B3 reordered and the two
    /// stacks swapped: standard, usually not in normal form.
    fn reordered(band: &Band, columns: [[usize; 3]; 2], swap: bool) -> Band {
        let mut cells = *band.cells();
        for r in 0..3 {
            for (s, order) in columns.iter().enumerate() {
                let from = if swap { 1 - s } else { s };
                for (c, &k) in order.iter().enumerate() {
                    cells[r * 9 + 3 + 3 * s + c] = band.cell(r, 3 + 3 * from + k);
                }
            }
        }
        Band::from_cells(cells).unwrap()
    }

    fn permutation3() -> impl Strategy<Value = [usize; 3]> {
        Just([0, 1, 2]).prop_shuffle()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        /// Both sums equal the first column-set counter's, seed by seed, on
        /// random standard bands.
        #[test]
        fn both_sums_equal_the_reference_counter(
            index in 0usize..36_288,
            columns in [permutation3(), permutation3()],
            swap in any::<bool>(),
            seed in 0usize..10,
        ) {
            let band = reordered(&CATALOGUE[index], columns, swap);
            let expected = REFERENCE.count_seeds(&band);
            prop_assert_eq!(COUNTER.count(&band, &SEEDS[seed]), expected[seed]);
            let stacks = COUNTER.prepare(&band);
            prop_assert_eq!(COUNTER.count_seeds_by_terms(&stacks), expected);
            let lines = COUNTER.lines.get_or_init(|| Lines::new(&COUNTER));
            prop_assert_eq!(COUNTER.count_seeds_by_lines(lines, &stacks), expected);
            // The portable loop too, whichever the processor runs.
            prop_assert_eq!(lines_sums(&lines.lines, &stacks), lines.sums(&stacks));
        }
    }

    /// `count_seeds` switches to the lines after a few hundred bands; the
    /// counts stay those of the reference on both sides of the switch.
    #[test]
    fn count_seeds_is_exact_before_and_after_the_lines() {
        let counter = ColumnSets::new();
        for band in CATALOGUE.iter().step_by(36_288 / (BANDS_BEFORE_LINES + 20)) {
            assert_eq!(counter.count_seeds(band), REFERENCE.count_seeds(band), "{band}");
        }
        assert!(counter.lines.get().is_some());
    }
}
