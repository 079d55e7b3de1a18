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
//! split met (`gather`, shared by the members), and each member's terms are
//! then products of contiguous blocks (`pair_sums`), which the processor
//! does several at a time.

use super::values::CAPACITY;

/// The choices of the third stack a block holds.
pub(super) const WIDTH: usize = 8;

/// The values of one split (a column of the table) in the rows of
/// [`WIDTH`] choices of the third stack; aligned, so that reading one
/// reads one cache line, not two.
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

/// For each (y, p) of `order`, `blocks[p]` = the values at y of the rows
/// (numbers of `values`), 0 in the lanes past the rows given. `order`
/// ascends in y, so each row is read front to back. The rows are as long
/// as each other.
pub(super) fn gather(rows: &[&[u16]], values: &[u32; CAPACITY], order: &[(u16, u16)], blocks: &mut Blocks) {
    let Ok(rows) = <&[&[u16]; WIDTH]>::try_from(rows) else {
        for &(y, p) in order {
            let value = |row: &&[u16]| values[usize::from(row[usize::from(y)])];
            blocks[usize::from(p)] = Block(std::array::from_fn(|i| rows.get(i).map_or(0, value)));
        }
        return;
    };
    let k = rows[0].len();
    let rows: [&[u16]; WIDTH] = std::array::from_fn(|i| &rows[i][..k]);
    for &(y, p) in order {
        let y = usize::from(y);
        blocks[usize::from(p)] = Block(std::array::from_fn(|i| values[usize::from(rows[i][y])]));
    }
}

/// Adds to `lanes`, lane by lane, the products of `middle[p_m]` and
/// `bottom[p_l]` over the `pairs` (p_m in the low 16 bits, p_l in the
/// high). Each lane gathers the terms of one choice of the third stack.
///
/// The table's values are below 2^23 ([`super::StackPairTable`]), so a
/// product is below 2^46 and a lane of one choice of the first two stacks,
/// at most 346 x 44 products, stays below 2^60.
pub(super) fn pair_sums(middle: &Blocks, bottom: &Blocks, pairs: &[u32], lanes: &mut [u64; WIDTH]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the processor has AVX2 (just checked), all the
        // function asks of its caller.
        unsafe { pair_sums_avx2(middle, bottom, pairs, lanes) };
        return;
    }
    pair_sums_plain(middle, bottom, pairs, lanes);
}

/// [`pair_sums`] compiled for AVX2: the same code, four 64-bit products an instruction.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn pair_sums_avx2(middle: &Blocks, bottom: &Blocks, pairs: &[u32], lanes: &mut [u64; WIDTH]) {
    pair_sums_plain(middle, bottom, pairs, lanes);
}

#[inline(always)]
fn pair_sums_plain(middle: &Blocks, bottom: &Blocks, pairs: &[u32], lanes: &mut [u64; WIDTH]) {
    let mut sums = *lanes;
    for &pair in pairs {
        let m = &middle[usize::from(pair as u16)].0;
        let l = &bottom[usize::from((pair >> 16) as u16)].0;
        for i in 0..WIDTH {
            sums[i] += u64::from(m[i]) * u64::from(l[i]);
        }
    }
    *lanes = sums;
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

    /// Gathered blocks and their pair sums equal the terms read row by row,
    /// with the largest values the table may hold among them, for a whole
    /// block of rows and for fewer.
    #[test]
    fn block_sums_are_the_row_by_row_terms() {
        let k = 300;
        // The values, by number: number 0 the largest.
        let mut values = [0u32; CAPACITY];
        values[..1000].copy_from_slice(&super::tests::values(7, 1000));
        values[0] = (1 << 23) - 1;
        let numbers =
            |seed: u64| -> Vec<u16> { super::tests::values(seed, k).iter().map(|&v| (v % 1000) as u16).collect() };
        let rows_m: Vec<Vec<u16>> = (0..WIDTH as u64).map(numbers).collect();
        let mut rows_l: Vec<Vec<u16>> = (0..WIDTH as u64).map(|i| numbers(100 + i)).collect();
        rows_l[3] = vec![0; k];
        // The splits met: every third split, in a shuffled order of positions.
        let met: Vec<u16> = (0..k as u16).step_by(3).collect();
        let position = |p: usize| (p * 37) % met.len();
        let mut order: Vec<(u16, u16)> = met.iter().enumerate().map(|(p, &y)| (y, position(p) as u16)).collect();
        order.sort_unstable();
        let pairs: Vec<(usize, usize)> = (0..500).map(|t| ((t * 7) % met.len(), (t * 13 + 5) % met.len())).collect();
        let packed: Vec<u32> = pairs.iter().map(|&(a, b)| position(a) as u32 | (position(b) as u32) << 16).collect();
        for rows in [WIDTH, 3] {
            let m_refs: Vec<&[u16]> = rows_m.iter().take(rows).map(Vec::as_slice).collect();
            let l_refs: Vec<&[u16]> = rows_l.iter().take(rows).map(Vec::as_slice).collect();
            let (mut middle, mut bottom) = (blocks(), blocks());
            middle.fill(Block([9; WIDTH]));
            gather(&m_refs, &values, &order, &mut middle);
            gather(&l_refs, &values, &order, &mut bottom);
            let mut lanes = [0u64; WIDTH];
            pair_sums(&middle, &bottom, &packed, &mut lanes);
            let mut plain = [0u64; WIDTH];
            pair_sums_plain(&middle, &bottom, &packed, &mut plain);
            assert_eq!(lanes, plain);
            for (i, &lane) in lanes.iter().enumerate() {
                let value = |row: &[Vec<u16>], y: u16| u64::from(values[usize::from(row[i][usize::from(y)])]);
                let by_rows: u64 = if i < rows {
                    pairs.iter().map(|&(a, b)| value(&rows_m, met[a]) * value(&rows_l, met[b])).sum()
                } else {
                    0
                };
                assert_eq!(lane, by_rows, "lane {i} of {rows} rows");
            }
        }
    }
}
