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
//! split (`transpose_to`, or `gather` when the group meets few splits;
//! shared by the members), and each member's terms are then products of
//! contiguous blocks (`term_sums`), which the processor does eight at a
//! time. A block is written where its split's position in the group is,
//! whatever the renaming, so the terms are made once a group (once for each
//! relabelling of its members, `super::symmetry`), in tiles of the
//! positions that keep the blocks they read in the second-level cache.

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
/// every y below the rows' length: the rows transposed.
#[cfg(test)]
pub(super) fn transpose(rows: &[&[u16]; WIDTH], values: &[u32; CAPACITY], blocks: &mut Blocks) {
    transpose_to(rows, values, |y| y, blocks);
}

/// The rows transposed, the block of y written at `place(y)`: the block
/// of a renamed split where its position is, so that the terms need not
/// follow the renaming. For most splits.
pub(super) fn transpose_to(
    rows: &[&[u16]; WIDTH],
    values: &[u32; CAPACITY],
    place: impl Fn(usize) -> usize,
    blocks: &mut Blocks,
) {
    let k = rows[0].len();
    let rows: [&[u16]; WIDTH] = std::array::from_fn(|i| &rows[i][..k]);
    let mut done = 0;
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the processor has AVX2 (just checked), all the
        // function asks of its caller.
        done = unsafe { transpose_avx2(&rows, values, &place, blocks) };
    }
    for y in done..k {
        blocks[place(y)] = Block(std::array::from_fn(|i| values[usize::from(rows[i][y])]));
    }
}

/// [`transpose_to`] of the first multiple of 8 splits with AVX2: for each 8
/// splits, each row's 8 numbers are read at once and their values gathered
/// from `values`, then the two 8 x 8 squares are transposed. Returns how
/// many splits it did.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn transpose_avx2(
    rows: &[&[u16]; WIDTH],
    values: &[u32; CAPACITY],
    place: &impl Fn(usize) -> usize,
    blocks: &mut Blocks,
) -> usize {
    use std::arch::x86_64::{__m128i, __m256i, _mm_loadu_si128, _mm256_cvtepu16_epi32, _mm256_i32gather_epi32};
    let k = rows.iter().map(|row| row.len()).min().unwrap_or(0);
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
            blocks[place(y + j)].0 = unsafe { std::mem::transmute::<[__m256i; WIDTH / 8], [u32; WIDTH]>(vectors) };
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
/// position and a bottom position. Made once a group for each relabelling
/// of its members: positions do not change with the renaming.
///
/// A position p is kept as 4 p, its block's offset in 64-bit words, in two
/// lists of 16-bit numbers, so that the kernel reads a term as two loads
/// of an offset and two loads of a block, scaled by the processor's
/// addressing (fewer instructions a term: the kernel is bound by how many
/// the processor issues as much as by the cache).
#[derive(Clone)]
pub(super) struct Terms {
    /// Where each segment (a run of one member's terms) starts in
    /// `middle` and `bottom`, and the end.
    starts: Vec<u32>,
    /// Each segment's member.
    members: Vec<u16>,
    /// Each term's middle block, as 4 x its position.
    middle: Vec<u16>,
    /// Each term's bottom block, as 4 x its position.
    bottom: Vec<u16>,
}

/// The highest position a term can name: 4 x a position is 16 bits.
const POSITIONS: usize = 1 << 14;

/// A position's block offset in 64-bit words (see [`Terms`]).
fn offset(position: u16) -> u16 {
    assert!(usize::from(position) < POSITIONS, "a block position past 2^14");
    position << 2
}

impl Terms {
    /// The terms of `pairs`: each member's (middle position, bottom
    /// position) pairs, member by member. Panics past 2^16 members or 2^14
    /// positions.
    #[cfg(test)]
    pub(super) fn new(pairs: &[Vec<(u16, u16)>]) -> Terms {
        Terms::tiled(pairs, |pair| pair, 1 << 14, 1 << 14)
    }

    /// [`Terms::new`] of the pairs moved by `at`, in tiles: first the
    /// terms whose middle position is below `tile_m` and bottom position
    /// below `tile_l` (member by member), then the next tile, so that the
    /// blocks a tile reads stay in the second-level cache while it is
    /// summed.
    pub(super) fn tiled(
        pairs: &[Vec<(u16, u16)>],
        at: impl Fn((u16, u16)) -> (u16, u16),
        tile_m: usize,
        tile_l: usize,
    ) -> Terms {
        let members = pairs.len();
        assert!(members <= 1 << 16, "more than 2^16 members");
        let (tile_m, tile_l) = (tile_m.max(1), tile_l.max(1));
        let moved: Vec<(u16, u16)> = pairs.iter().flatten().map(|&pair| at(pair)).collect();
        let tiles_l = moved.iter().map(|&(_, l)| usize::from(l) / tile_l + 1).max().unwrap_or(1);
        let tiles = tiles_l * moved.iter().map(|&(m, _)| usize::from(m) / tile_m + 1).max().unwrap_or(1);
        // A counting sort by (tile, member): each segment's terms in the
        // order the member lists them.
        let key = |member: usize, (m, l): (u16, u16)| {
            (usize::from(m) / tile_m * tiles_l + usize::from(l) / tile_l) * members + member
        };
        let mut starts = vec![0u32; tiles * members + 1];
        let mut moved_terms = moved.iter();
        for (member, member_pairs) in pairs.iter().enumerate() {
            for &pair in moved_terms.by_ref().take(member_pairs.len()) {
                starts[key(member, pair) + 1] += 1;
            }
        }
        for i in 1..starts.len() {
            starts[i] += starts[i - 1];
        }
        let len = moved.len();
        let (mut middle, mut bottom) = (vec![0u16; len], vec![0u16; len]);
        let mut next = starts.clone();
        let mut moved_terms = moved.iter();
        for (member, member_pairs) in pairs.iter().enumerate() {
            for &(m, l) in moved_terms.by_ref().take(member_pairs.len()) {
                let slot = &mut next[key(member, (m, l))];
                middle[*slot as usize] = offset(m);
                bottom[*slot as usize] = offset(l);
                *slot += 1;
            }
        }
        let mut terms = Terms { starts: vec![0], members: Vec::new(), middle, bottom };
        for (segment, range) in starts.windows(2).enumerate() {
            if range[1] > range[0] {
                terms.starts.push(range[1]);
                terms.members.push((segment % members) as u16);
            }
        }
        terms
    }

    /// Terms with no members.
    #[cfg(test)]
    pub(super) fn empty() -> Terms {
        Terms { starts: vec![0], members: Vec::new(), middle: Vec::new(), bottom: Vec::new() }
    }

    /// These terms with each middle position p moved to `at_m[p]` and each
    /// bottom position to `at_l[p]`, into `out`: the terms of blocks that
    /// are where the maps say. Panics if a map sends a position past 2^14.
    #[cfg(test)]
    pub(super) fn moved(&self, at_m: &At, at_l: &At, out: &mut Terms) {
        out.starts.clone_from(&self.starts);
        out.members.clone_from(&self.members);
        let moved = |offsets: &[u16], at: &At, out: &mut Vec<u16>| {
            out.clear();
            out.extend(offsets.iter().map(|&o| offset(at[usize::from(o >> 2)])));
        };
        moved(&self.middle, at_m, &mut out.middle);
        moved(&self.bottom, at_l, &mut out.bottom);
    }
}

/// Adds to each member's lanes in `sums` the products of `middle[p_m]`
/// and `bottom[p_l]`, lane by lane, over its `terms`. A member's sums stay
/// in registers over each run of its terms: two loads a term, no store.
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
#[cfg(test)]
pub(super) type At = [u16; 1 << 16];

/// Each position's block at the position itself.
#[cfg(test)]
pub(super) fn at() -> Box<At> {
    (0..=u16::MAX).collect::<Vec<u16>>().into_boxed_slice().try_into().expect("2^16 positions")
}

/// [`term_sums`] with AVX2: four 64-bit products of 32-bit values an
/// instruction, from the even 32-bit lanes of two vectors and then, shifted
/// down, from the odd ones.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn term_sums_avx2(middle: &Blocks, bottom: &Blocks, terms: &Terms, sums: &mut Sums) {
    use std::arch::x86_64::{
        __m256i, _mm256_add_epi64, _mm256_loadu_si256, _mm256_mul_epu32, _mm256_setzero_si256, _mm256_srli_epi64,
    };
    const VECTORS: usize = WIDTH / 8;
    // A block is one vector: read at once below.
    const _: () = assert!(VECTORS == 1);
    // SAFETY (both): plain integers to vectors of the same size and back.
    let lanes = |lanes: &Lanes| unsafe { std::mem::transmute::<[u64; WIDTH], [__m256i; 2 * VECTORS]>(lanes.0) };
    let back = |vectors: [__m256i; 2 * VECTORS]| unsafe { std::mem::transmute::<_, [u64; WIDTH]>(vectors) };
    // A term's offsets are 16 bits: 4 x 2^16 words at most, within the
    // 2^16 blocks of 4 words, so every load below is in bounds.
    let (middle, bottom) = (middle.as_ptr().cast::<u64>(), bottom.as_ptr().cast::<u64>());
    for (&member, range) in terms.members.iter().zip(terms.starts.windows(2)) {
        let range = range[0] as usize..range[1] as usize;
        let mut s = [_mm256_setzero_si256(); 2 * VECTORS];
        for (&m, &l) in terms.middle[range.clone()].iter().zip(&terms.bottom[range]) {
            // SAFETY: in bounds (above); unaligned loads of whole blocks.
            let (a, b) = unsafe {
                (
                    _mm256_loadu_si256(middle.add(usize::from(m)).cast::<__m256i>()),
                    _mm256_loadu_si256(bottom.add(usize::from(l)).cast::<__m256i>()),
                )
            };
            s[0] = _mm256_add_epi64(s[0], _mm256_mul_epu32(a, b));
            let odd = _mm256_mul_epu32(_mm256_srli_epi64(a, 32), _mm256_srli_epi64(b, 32));
            s[1] = _mm256_add_epi64(s[1], odd);
        }
        let total = &mut sums[usize::from(member)];
        let mut t = lanes(total);
        for (t, s) in t.iter_mut().zip(s) {
            *t = _mm256_add_epi64(*t, s);
        }
        total.0 = back(t);
    }
}

fn term_sums_plain(middle: &Blocks, bottom: &Blocks, terms: &Terms, sums: &mut Sums) {
    for (&member, range) in terms.members.iter().zip(terms.starts.windows(2)) {
        let total = &mut sums[usize::from(member)].0;
        let range = range[0] as usize..range[1] as usize;
        for (&m, &l) in terms.middle[range.clone()].iter().zip(&terms.bottom[range]) {
            let a = &middle[usize::from(m >> 2)].0;
            let b = &bottom[usize::from(l >> 2)].0;
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
