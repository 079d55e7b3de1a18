//! The terms of G for r = 4 as dense dot products.
//!
//! For one choice of the first two stacks, a member's terms are
//!
//!   sum over c2, c3 of Tm[x_m(c2)][y_m(c3)] x Tl[x_l(c2)][y_l(c3)],
//!
//! Tm and Tl the table slabs of the middle and bottom bands' nodes, x the
//! renamed splits of the third stack (shared by the group), y those of the
//! member's last stack. Read row by row (for each c2 two rows, then 346
//! scattered reads in each for every member) every term costs two random
//! loads. Read column by column, the sum over c2 is a dot product of two
//! vectors of 346 values, the columns y_m(c3) and y_l(c3) of the 346 rows:
//! the rows of a few c2 at a time are copied once into a [`Block`] per
//! split (`transpose`, or `gather` when the group meets few splits; shared
//! by the members), and each member's terms are then products of contiguous
//! blocks (`term_sums`), which the processor does eight at a time.

use super::values::CAPACITY;

/// The choices of the third stack a block holds.
pub(super) const WIDTH: usize = 8;

/// The values of one split (a column of the table) in the rows of
/// [`WIDTH`] choices of the third stack: half a cache line, aligned (16
/// choices, a whole line, measured slower: two sides' blocks then outgrow
/// the L2 cache).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C, align(32))]
pub(super) struct Block([u32; WIDTH]);

/// Blocks by a 16-bit position: reading one needs no check. Only the
/// positions in use take memory.
pub(super) type Blocks = [Block; 1 << 16];

/// Blocks for every 16-bit position, all 0.
pub(super) fn blocks() -> Box<Blocks> {
    vec![Block([0; WIDTH]); 1 << 16].into_boxed_slice().try_into().expect("2^16 blocks")
}

/// The number that reads 0 in a thread's value list ([`super::values`]
/// numbers fewer values): a row of it stands for a missing row in a block.
pub(super) const ZERO: u16 = u16::MAX;

/// For each (y, p) of `order`, `blocks[p]` = the values at y of the rows
/// (numbers of `values`). `order` ascends in y, so each row is read front
/// to back. For a few splits of many.
pub(super) fn gather(rows: &[&[u16]; WIDTH], values: &[u32; CAPACITY], order: &[(u16, u16)], blocks: &mut Blocks) {
    let k = rows[0].len();
    let rows: [&[u16]; WIDTH] = std::array::from_fn(|i| &rows[i][..k]);
    for &(y, p) in order {
        let y = usize::from(y);
        blocks[usize::from(p)] = Block(std::array::from_fn(|i| values[usize::from(rows[i][y])]));
    }
}

/// `blocks[y]` = the values at y of the rows (numbers of `values`), for
/// every y below the rows' length: the rows transposed. For most splits.
pub(super) fn transpose(rows: &[&[u16]; WIDTH], values: &[u32; CAPACITY], blocks: &mut Blocks) {
    let k = rows[0].len();
    let rows: [&[u16]; WIDTH] = std::array::from_fn(|i| &rows[i][..k]);
    let mut done = 0;
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the processor has AVX2 (just checked), all the
        // function asks of its caller.
        done = unsafe { transpose_avx2(&rows, values, blocks) };
    }
    for y in done..k {
        blocks[y] = Block(std::array::from_fn(|i| values[usize::from(rows[i][y])]));
    }
}

/// [`transpose`] of the first multiple of 8 splits with AVX2: for each 8
/// splits, each row's 8 numbers are read at once and their values gathered
/// from `values`, then the two 8 x 8 squares are transposed. Returns how
/// many splits it did.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn transpose_avx2(rows: &[&[u16]; WIDTH], values: &[u32; CAPACITY], blocks: &mut Blocks) -> usize {
    use std::arch::x86_64::{__m128i, __m256i, _mm_loadu_si128, _mm256_cvtepu16_epi32, _mm256_i32gather_epi32};
    let k = rows.iter().map(|row| row.len()).min().unwrap_or(0).min(blocks.len());
    let done = k - k % 8;
    for y in (0..done).step_by(8) {
        let columns: [__m256i; WIDTH] = std::array::from_fn(|i| {
            let numbers = &rows[i][y..y + 8];
            // SAFETY: `numbers` is 8 u16 (16 bytes) in bounds, read unaligned.
            let numbers = _mm256_cvtepu16_epi32(unsafe { _mm_loadu_si128(numbers.as_ptr().cast::<__m128i>()) });
            // SAFETY: each index is a u16, below CAPACITY: in `values`.
            unsafe { _mm256_i32gather_epi32::<4>(values.as_ptr().cast::<i32>(), numbers) }
        });
        let squares: [[__m256i; 8]; WIDTH / 8] =
            std::array::from_fn(|s| transpose_8x8(columns[8 * s..8 * s + 8].try_into().expect("8 rows")));
        for j in 0..8 {
            let vectors: [__m256i; WIDTH / 8] = std::array::from_fn(|s| squares[s][j]);
            // SAFETY: WIDTH / 8 vectors of eight u32 are WIDTH u32.
            blocks[y + j].0 = unsafe { std::mem::transmute::<[__m256i; WIDTH / 8], [u32; WIDTH]>(vectors) };
        }
    }
    done
}

/// An 8 x 8 square of u32 transposed: vector j of the result holds lane j
/// of each input vector, in order.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn transpose_8x8(r: [std::arch::x86_64::__m256i; 8]) -> [std::arch::x86_64::__m256i; 8] {
    use std::arch::x86_64::{
        _mm256_permute2x128_si256, _mm256_unpackhi_epi32, _mm256_unpackhi_epi64, _mm256_unpacklo_epi32,
        _mm256_unpacklo_epi64,
    };
    // Pairs of rows interleaved by 32 bits, then by 64, then the 128-bit halves exchanged.
    let t = [
        _mm256_unpacklo_epi32(r[0], r[1]),
        _mm256_unpackhi_epi32(r[0], r[1]),
        _mm256_unpacklo_epi32(r[2], r[3]),
        _mm256_unpackhi_epi32(r[2], r[3]),
        _mm256_unpacklo_epi32(r[4], r[5]),
        _mm256_unpackhi_epi32(r[4], r[5]),
        _mm256_unpacklo_epi32(r[6], r[7]),
        _mm256_unpackhi_epi32(r[6], r[7]),
    ];
    let u = [
        _mm256_unpacklo_epi64(t[0], t[2]),
        _mm256_unpackhi_epi64(t[0], t[2]),
        _mm256_unpacklo_epi64(t[1], t[3]),
        _mm256_unpackhi_epi64(t[1], t[3]),
        _mm256_unpacklo_epi64(t[4], t[6]),
        _mm256_unpackhi_epi64(t[4], t[6]),
        _mm256_unpacklo_epi64(t[5], t[7]),
        _mm256_unpackhi_epi64(t[5], t[7]),
    ];
    [
        _mm256_permute2x128_si256::<0x20>(u[0], u[4]),
        _mm256_permute2x128_si256::<0x20>(u[1], u[5]),
        _mm256_permute2x128_si256::<0x20>(u[2], u[6]),
        _mm256_permute2x128_si256::<0x20>(u[3], u[7]),
        _mm256_permute2x128_si256::<0x31>(u[0], u[4]),
        _mm256_permute2x128_si256::<0x31>(u[1], u[5]),
        _mm256_permute2x128_si256::<0x31>(u[2], u[6]),
        _mm256_permute2x128_si256::<0x31>(u[3], u[7]),
    ]
}

/// A member's partial sums: the lanes are summed at the end (which lane
/// takes which product is the kernel's choice).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C, align(64))]
pub(super) struct Lanes(pub(super) [u64; WIDTH]);

/// Lanes by a 16-bit member index: reading one needs no check.
pub(super) type Sums = [Lanes; 1 << 16];

/// Lanes for every 16-bit member index, all 0.
pub(super) fn sums() -> Box<Sums> {
    vec![Lanes([0; WIDTH]); 1 << 16].into_boxed_slice().try_into().expect("2^16 lanes")
}

/// The products of blocks a group's count takes for each choice of the
/// first two stacks, member by member: each member's pairs of a middle
/// position and a bottom position. Made once a group: positions do not
/// change with the renaming.
pub(super) struct Terms {
    /// Where each member's terms start in `terms`, and the end.
    starts: Vec<u32>,
    /// A middle position in the low 16 bits, a bottom position in the high.
    terms: Vec<u32>,
}

impl Terms {
    /// The terms of `pairs`: each member's (middle position, bottom
    /// position) pairs. Panics past 2^16 members.
    pub(super) fn new(pairs: &[Vec<(u16, u16)>]) -> Terms {
        assert!(pairs.len() <= 1 << 16, "more than 2^16 members");
        let mut starts = vec![0u32];
        let mut terms = Vec::with_capacity(pairs.iter().map(Vec::len).sum());
        for member_pairs in pairs {
            terms.extend(member_pairs.iter().map(|&(m, l)| u32::from(m) | u32::from(l) << 16));
            starts.push(terms.len() as u32);
        }
        Terms { starts, terms }
    }

    /// Terms with no members.
    pub(super) fn empty() -> Terms {
        Terms { starts: vec![0], terms: Vec::new() }
    }

    /// These terms with each middle position p moved to `at_m[p]` and each
    /// bottom position to `at_l[p]`, into `out`: the terms of blocks that
    /// are where the maps say.
    pub(super) fn moved(&self, at_m: &At, at_l: &At, out: &mut Terms) {
        out.starts.clone_from(&self.starts);
        out.terms.resize(self.terms.len(), 0);
        for (slot, &term) in out.terms.iter_mut().zip(&self.terms) {
            *slot = u32::from(at_m[usize::from(term as u16)]) | u32::from(at_l[usize::from((term >> 16) as u16)]) << 16;
        }
    }
}

/// Adds to each member's lanes in `sums` the products of `middle[p_m]`
/// and `bottom[p_l]`, lane by lane, over its `terms`. A member's sums stay
/// in registers over its terms: two loads a term, no store.
///
/// The table's values are below 2^23 ([`super::StackPairTable`]), so a
/// product is below 2^46, and a lane of a member's sums over one choice of
/// the first two stacks (at most 346 terms a block, 44 blocks) stays below
/// 2^60.
pub(super) fn term_sums(middle: &Blocks, bottom: &Blocks, terms: &Terms, sums: &mut Sums) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the processor has AVX2 (just checked), all the
        // function asks of its caller.
        unsafe { term_sums_avx2(middle, bottom, terms, sums) };
        return;
    }
    term_sums_plain(middle, bottom, terms, sums);
}

/// Where each 16-bit position's block is.
pub(super) type At = [u16; 1 << 16];

/// Each position's block at the position itself.
pub(super) fn at() -> Box<At> {
    (0..=u16::MAX).collect::<Vec<u16>>().into_boxed_slice().try_into().expect("2^16 positions")
}

/// [`term_sums`] with AVX2: four 64-bit products of 32-bit values an
/// instruction, from the even 32-bit lanes of two vectors and then, shifted
/// down, from the odd ones.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn term_sums_avx2(middle: &Blocks, bottom: &Blocks, terms: &Terms, sums: &mut Sums) {
    use std::arch::x86_64::{__m256i, _mm256_add_epi64, _mm256_mul_epu32, _mm256_setzero_si256, _mm256_srli_epi64};
    const VECTORS: usize = WIDTH / 8;
    // SAFETY (all three): plain integers to vectors of the same size and back.
    let block = |block: &Block| unsafe { std::mem::transmute::<[u32; WIDTH], [__m256i; VECTORS]>(block.0) };
    let lanes = |lanes: &Lanes| unsafe { std::mem::transmute::<[u64; WIDTH], [__m256i; 2 * VECTORS]>(lanes.0) };
    let back = |vectors: [__m256i; 2 * VECTORS]| unsafe { std::mem::transmute::<_, [u64; WIDTH]>(vectors) };
    for (member, range) in terms.starts.windows(2).enumerate() {
        let mut s = [_mm256_setzero_si256(); 2 * VECTORS];
        for &term in &terms.terms[range[0] as usize..range[1] as usize] {
            let a = block(&middle[usize::from(term as u16)]);
            let b = block(&bottom[usize::from((term >> 16) as u16)]);
            for v in 0..VECTORS {
                s[2 * v] = _mm256_add_epi64(s[2 * v], _mm256_mul_epu32(a[v], b[v]));
                let odd = _mm256_mul_epu32(_mm256_srli_epi64(a[v], 32), _mm256_srli_epi64(b[v], 32));
                s[2 * v + 1] = _mm256_add_epi64(s[2 * v + 1], odd);
            }
        }
        let total = &mut sums[usize::from(member as u16)];
        let mut t = lanes(total);
        for (t, s) in t.iter_mut().zip(s) {
            *t = _mm256_add_epi64(*t, s);
        }
        total.0 = back(t);
    }
}

fn term_sums_plain(middle: &Blocks, bottom: &Blocks, terms: &Terms, sums: &mut Sums) {
    for (member, range) in terms.starts.windows(2).enumerate() {
        let total = &mut sums[usize::from(member as u16)].0;
        for &term in &terms.terms[range[0] as usize..range[1] as usize] {
            let a = &middle[usize::from(term as u16)].0;
            let b = &bottom[usize::from((term >> 16) as u16)].0;
            for i in 0..WIDTH {
                total[i] += u64::from(a[i]) * u64::from(b[i]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small generator of test values (splitmix64), below 2^23 like the table's.
    fn values(seed: u64, len: usize) -> Vec<u32> {
        let mut state = seed;
        (0..len)
            .map(|_| {
                state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
                let mut z = state;
                z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
                ((z ^ (z >> 31)) % (1 << 23)) as u32
            })
            .collect()
    }

    /// Blocks gathered (by position) or transposed (by split), with rows
    /// missing (read as [`ZERO`]), and the sums of their products, equal the
    /// terms read row by row, with the largest value the table may hold.
    #[test]
    fn block_sums_are_the_row_by_row_terms() {
        let k = 301;
        // The values, by number: number 0 the largest.
        let mut values = [0u32; CAPACITY];
        values[..1000].copy_from_slice(&super::tests::values(7, 1000));
        values[0] = (1 << 23) - 1;
        let numbers =
            |seed: u64| -> Vec<u16> { super::tests::values(seed, k).iter().map(|&v| (v % 1000) as u16).collect() };
        let mut rows_m: Vec<Vec<u16>> = (0..WIDTH as u64).map(numbers).collect();
        let mut rows_l: Vec<Vec<u16>> = (0..WIDTH as u64).map(|i| numbers(100 + i)).collect();
        rows_l[3] = vec![0; k];
        // The splits met: every third split, their positions shuffled.
        let met: Vec<u16> = (0..k as u16).step_by(3).collect();
        let position = |p: usize| (p * 37) % met.len();
        let mut order: Vec<(u16, u16)> = met.iter().enumerate().map(|(p, &y)| (y, position(p) as u16)).collect();
        order.sort_unstable();
        // Three members' (middle, bottom) pairs of met splits, by index in `met`.
        let pairs: Vec<Vec<(usize, usize)>> = (0..3)
            .map(|member| (0..200).map(|t| ((t * 7 + member) % met.len(), (t * 13 + 5 * member) % met.len())).collect())
            .collect();
        let terms = Terms::new(
            &pairs
                .iter()
                .map(|member| member.iter().map(|&(a, b)| (position(a) as u16, position(b) as u16)).collect())
                .collect::<Vec<_>>(),
        );
        // Where a position's block is when blocks are by split.
        let mut by_split = at();
        for (p, &y) in met.iter().enumerate() {
            by_split[position(p)] = y;
        }
        for missing in [0, 5] {
            for row in rows_m.iter_mut().chain(rows_l.iter_mut()).skip(WIDTH - missing).take(missing) {
                row.fill(ZERO);
            }
            let m_rows: &[&[u16]; WIDTH] = &std::array::from_fn(|i| rows_m[i].as_slice());
            let l_rows: &[&[u16]; WIDTH] = &std::array::from_fn(|i| rows_l[i].as_slice());
            let by_rows: Vec<u64> = pairs
                .iter()
                .map(|member| {
                    let value = |row: &[u16], y: u16| u64::from(values[usize::from(row[usize::from(y)])]);
                    let term = |i: usize, &(a, b): &(usize, usize)| value(m_rows[i], met[a]) * value(l_rows[i], met[b]);
                    (0..WIDTH).map(|i| member.iter().map(|pair| term(i, pair)).sum::<u64>()).sum()
                })
                .collect();
            let (mut gathered, mut transposed) = ((blocks(), blocks()), (blocks(), blocks()));
            gather(m_rows, &values, &order, &mut gathered.0);
            gather(l_rows, &values, &order, &mut gathered.1);
            transpose(m_rows, &values, &mut transposed.0);
            transpose(l_rows, &values, &mut transposed.1);
            let (mut fast, mut plain, mut by_splits) = (sums(), sums(), sums());
            term_sums(&gathered.0, &gathered.1, &terms, &mut fast);
            term_sums_plain(&gathered.0, &gathered.1, &terms, &mut plain);
            let mut moved = Terms::empty();
            terms.moved(&by_split, &by_split, &mut moved);
            term_sums(&transposed.0, &transposed.1, &moved, &mut by_splits);
            for (member, &expected) in by_rows.iter().enumerate() {
                let total = |sums: &Sums| sums[member].0.iter().sum::<u64>();
                let got = (total(&fast), total(&plain), total(&by_splits));
                assert_eq!(got, (expected, expected, expected), "member {member}, {missing} rows missing");
            }
        }
    }
}
