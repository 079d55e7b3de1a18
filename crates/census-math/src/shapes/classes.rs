//! Classes of column-set tuples S = (A_1 .. A_c) of the 2 x c shape.
//!
//! The symmetries are digit relabelling (S_2c), stack order (S_c) and, per
//! stack, the swap A_j <-> complement (2^c). A tuple is described without
//! digit names by its *pattern*: digit d gets the c-bit row vector whose bit j
//! says d is in A_j, and the pattern is the multiset of the 2c rows. Digit
//! relabelling only reorders rows, so classes are the orbits of the
//! hyperoctahedral group B_c (permute bits, flip bits) on balanced patterns
//! (every bit set in exactly c rows).
//!
//! The canonical pattern is the smallest sorted row list over a set T of
//! transforms picked by invariants (Hamming-distance profiles of rows, and
//! per column the unordered pair of its two sides' profiles), so that T
//! commutes with the group. Every automorphism keeps T, so the transforms of
//! T reaching the minimum number exactly |Aut|, and the class size is
//!
//! ```text
//! (2c)! / prod(row multiplicities!) x |B_c| / |Aut|.
//! ```
//!
//! Classes are built a column at a time: every class of k + 1 columns is an
//! extension of (a relabelling of) a class of k columns.

use std::collections::HashSet;

use super::{ShapeError, check_c};

const MAX_DIGITS: usize = 2 * super::MAX_C;

/// The column sets of a band of the 2 x c shape: `sets()[j]` is A_j, the c
/// digits (bit d = digit d, digits 0..2c) of stack j's first column; the
/// second column holds the complement.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ColumnSets {
    c: usize,
    sets: Vec<u16>,
}

impl ColumnSets {
    /// Checks that there are c sets, each of c of the digits 0..2c.
    pub fn new(c: usize, sets: Vec<u16>) -> Result<ColumnSets, ShapeError> {
        check_c(c)?;
        if sets.len() != c {
            return Err(ShapeError::BadSets { reason: format!("{} sets for c = {c}", sets.len()) });
        }
        for (j, &set) in sets.iter().enumerate() {
            if set >> (2 * c) != 0 || set.count_ones() as usize != c {
                return Err(ShapeError::BadSets {
                    reason: format!("set {j} ({set:#x}) is not a {c}-subset of 0..{}", 2 * c),
                });
            }
        }
        Ok(ColumnSets { c, sets })
    }

    /// The shape's c (the band has c rows, 2c columns, 2c digits).
    pub fn c(&self) -> usize {
        self.c
    }

    /// A_1 .. A_c as digit masks.
    pub fn sets(&self) -> &[u16] {
        &self.sets
    }

    /// The 2c column masks: column 2j holds A_j, column 2j + 1 its complement.
    pub fn columns(&self) -> Vec<u16> {
        let all = (1u16 << (2 * self.c)) - 1;
        self.sets.iter().flat_map(|&a| [a, all ^ a]).collect()
    }
}

/// One class: its canonical representative and its exact number of tuples.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShapeClass {
    /// The tuple built from the canonical pattern (digit d = its d-th row).
    pub representative: ColumnSets,
    /// The number of tuples S in the class (all C(2c, c)^c tuples sum up).
    pub size: u128,
}

/// All classes of the 2 x c shape, in ascending order of canonical pattern
/// (so a class's index is stable and can label a job group).
pub fn classes(c: usize) -> Result<Vec<ShapeClass>, ShapeError> {
    check_c(c)?;
    let n = 2 * c;
    let mut first = [0u8; MAX_DIGITS];
    first[c..n].fill(1);
    let mut level: HashSet<[u8; MAX_DIGITS]> = HashSet::from([canonical(&first[..n], 1).0]);
    for k in 1..c {
        let mut next = HashSet::new();
        for rows in &level {
            extend(&rows[..n], k, c, &mut |extended| {
                next.insert(canonical(extended, k + 1).0);
            });
        }
        level = next;
    }
    let mut patterns: Vec<_> = level.into_iter().collect();
    patterns.sort_unstable();
    Ok(patterns.into_iter().map(|rows| class_of(&rows[..n], c)).collect())
}

/// The class of a tuple: canonical representative and size.
pub fn class_of_sets(sets: &ColumnSets) -> ShapeClass {
    let c = sets.c();
    let mut rows = [0u8; MAX_DIGITS];
    for (d, row) in rows.iter_mut().enumerate().take(2 * c) {
        *row = sets.sets().iter().enumerate().map(|(j, &a)| (((a >> d) & 1) as u8) << j).sum();
    }
    rows[..2 * c].sort_unstable();
    class_of(&canonical(&rows[..2 * c], c).0[..2 * c], c)
}

fn class_of(canon: &[u8], c: usize) -> ShapeClass {
    let (_, automorphisms) = canonical(canon, c);
    let factorial = |m: usize| (1..=m as u128).product::<u128>();
    let mut arrangements = factorial(canon.len());
    for run in canon.chunk_by(|a, b| a == b) {
        arrangements /= factorial(run.len());
    }
    let group = factorial(c) << c;
    let sets = (0..c)
        .map(|j| canon.iter().enumerate().filter(|(_, r)| (*r >> j) & 1 == 1).map(|(d, _)| 1u16 << d).sum())
        .collect();
    ShapeClass { representative: ColumnSets { c, sets }, size: arrangements * (group / automorphisms as u128) }
}

/// Calls `visit` with every balanced extension of a sorted pattern of k
/// columns by a column k: c of the rows get bit k. Rows with equal vectors are
/// interchangeable, so only how many of each run get the bit is chosen.
fn extend(rows: &[u8], k: usize, c: usize, visit: &mut impl FnMut(&[u8])) {
    let runs: Vec<(u8, usize)> = rows.chunk_by(|a, b| a == b).map(|r| (r[0], r.len())).collect();
    let mut out = Vec::with_capacity(rows.len());
    fn go(runs: &[(u8, usize)], left: usize, bit: u8, out: &mut Vec<u8>, visit: &mut impl FnMut(&[u8])) {
        let Some((&(v, m), rest)) = runs.split_first() else {
            if left == 0 {
                visit(out);
            }
            return;
        };
        let room: usize = rest.iter().map(|r| r.1).sum();
        for set in left.saturating_sub(room)..=m.min(left) {
            let len = out.len();
            out.extend(std::iter::repeat_n(v | bit, set));
            out.extend(std::iter::repeat_n(v, m - set));
            go(rest, left - set, bit, out, visit);
            out.truncate(len);
        }
    }
    go(&runs, c, 1 << k, &mut out, visit);
}

/// The canonical sorted rows of a pattern of k columns, and the order of its
/// automorphism group in B_k.
pub(crate) fn canonical(rows: &[u8], k: usize) -> ([u8; MAX_DIGITS], u64) {
    let n = rows.len();
    // Row profile: how many rows lie at each Hamming distance (4 bits each).
    let profile: Vec<u32> =
        rows.iter().map(|&v| rows.iter().fold(0u32, |p, &w| p + (1 << (4 * (v ^ w).count_ones())))).collect();
    let mix = |x: u32| (u64::from(x) ^ 0x9e37_79b9_7f4a_7c15).wrapping_mul(0xbf58_476d_1ce4_e5b9).rotate_left(31);
    let column_inv: Vec<(u64, u64)> = (0..k)
        .map(|j| {
            let (mut ones, mut zeros) = (0u64, 0u64);
            for (&v, &p) in rows.iter().zip(&profile) {
                if (v >> j) & 1 == 1 { ones = ones.wrapping_add(mix(p)) } else { zeros = zeros.wrapping_add(mix(p)) }
            }
            (ones.min(zeros), ones.max(zeros))
        })
        .collect();
    let mut sorted_inv = column_inv.clone();
    sorted_inv.sort_unstable();
    let min_profile = *profile.iter().min().expect("a pattern has rows");
    let mut zeroed: Vec<u8> = rows.iter().zip(&profile).filter(|(_, p)| **p == min_profile).map(|(v, _)| *v).collect();
    zeroed.dedup();

    let mut best = [u8::MAX; MAX_DIGITS];
    let mut ties = 0u64;
    let mut order = [0usize; 8];
    let mut search = |order: &[usize]| {
        let map = |v: u8| order.iter().enumerate().fold(0u8, |acc, (p, &col)| acc | (((v >> col) & 1) << p));
        let mut mapped = [0u8; MAX_DIGITS];
        for (m, &v) in mapped.iter_mut().zip(rows) {
            *m = map(v);
        }
        for &z in &zeroed {
            let mask = map(z);
            let mut image = [u8::MAX; MAX_DIGITS];
            for (i, &m) in image.iter_mut().zip(&mapped[..n]) {
                *i = m ^ mask;
            }
            image[..n].sort_unstable();
            match image.cmp(&best) {
                std::cmp::Ordering::Less => (best, ties) = (image, 1),
                std::cmp::Ordering::Equal => ties += 1,
                std::cmp::Ordering::Greater => {}
            }
        }
    };
    orders(&column_inv, &sorted_inv, 0, 0, &mut order[..k], &mut search);
    for b in &mut best[n..] {
        *b = 0;
    }
    (best, ties)
}

/// Every column order that lists the columns by ascending invariant.
fn orders(
    inv: &[(u64, u64)],
    sorted: &[(u64, u64)],
    pos: usize,
    used: u32,
    order: &mut [usize],
    visit: &mut impl FnMut(&[usize]),
) {
    if pos == order.len() {
        visit(order);
        return;
    }
    for col in 0..inv.len() {
        if used & (1 << col) == 0 && inv[col] == sorted[pos] {
            order[pos] = col;
            orders(inv, sorted, pos + 1, used | (1 << col), order, visit);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn binomial(n: u128, k: u128) -> u128 {
        (0..k).fold(1, |acc, i| acc * (n - i) / (i + 1))
    }

    #[test]
    fn two_by_two_has_two_classes_of_12_and_24() {
        let sizes: Vec<u128> = classes(2).unwrap().iter().map(|class| class.size).collect();
        assert_eq!(sizes.iter().sum::<u128>(), 36);
        let mut sorted = sizes.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, [12, 24]);
    }

    #[test]
    fn sizes_sum_to_all_tuples() {
        for c in 2..=5 {
            let total: u128 = classes(c).unwrap().iter().map(|class| class.size).sum();
            assert_eq!(total, binomial(2 * c as u128, c as u128).pow(c as u32), "c = {c}");
        }
    }

    #[test]
    fn class_counts() {
        let counts: Vec<usize> = (2..=5).map(|c| classes(c).unwrap().len()).collect();
        // 355 for 2 x 5: Pettersen (2005), quoted in docs/mathematics.md; 2, 4
        // and 26 as counted by `orbits_by_union_find`.
        assert_eq!(counts, [2, 4, 26, 355]);
    }

    /// The orbits of all C(2c, c)^c tuples under generators of the group
    /// (two digit permutations, two stack permutations, one swap), by
    /// union-find: shares nothing with the canonical form.
    fn orbits_by_union_find(c: usize) -> usize {
        let n = 2 * c;
        let subsets: Vec<u16> = (0u16..1 << n).filter(|s| s.count_ones() as usize == c).collect();
        let index = |s: u16| subsets.binary_search(&s).unwrap();
        let m = subsets.len();
        let total = m.pow(c as u32);
        let decode = |mut t: usize| {
            (0..c)
                .map(|_| {
                    let s = subsets[t % m];
                    t /= m;
                    s
                })
                .collect::<Vec<u16>>()
        };
        let encode = |sets: &[u16]| sets.iter().rev().fold(0, |t, &s| t * m + index(s));
        let relabel = |s: u16, p: &dyn Fn(usize) -> usize| {
            (0..n).filter(|&d| (s >> d) & 1 == 1).map(|d| 1u16 << p(d)).sum::<u16>()
        };
        let mut parent: Vec<u32> = (0..total as u32).collect();
        fn find(parent: &mut [u32], mut x: u32) -> u32 {
            while parent[x as usize] != x {
                parent[x as usize] = parent[parent[x as usize] as usize];
                x = parent[x as usize];
            }
            x
        }
        for t in 0..total {
            let sets = decode(t);
            let swap01 = |d: usize| [1, 0].get(d).copied().unwrap_or(d);
            let cycle = |d: usize| (d + 1) % n;
            let mut images = vec![
                sets.iter().map(|&s| relabel(s, &swap01)).collect::<Vec<_>>(),
                sets.iter().map(|&s| relabel(s, &cycle)).collect(),
            ];
            let mut swapped = sets.clone();
            swapped.swap(0, 1);
            images.push(swapped);
            let mut rotated = sets.clone();
            rotated.rotate_left(1);
            images.push(rotated);
            let mut flipped = sets.clone();
            flipped[0] ^= (1 << n) - 1;
            images.push(flipped);
            for image in images {
                let (a, b) = (find(&mut parent, t as u32), find(&mut parent, encode(&image) as u32));
                parent[a as usize] = b;
            }
        }
        (0..total as u32).filter(|&t| find(&mut parent, t) == t).count()
    }

    #[test]
    fn class_counts_agree_with_union_find() {
        for c in 2..=3 {
            assert_eq!(classes(c).unwrap().len(), orbits_by_union_find(c), "c = {c}");
        }
    }

    #[test]
    #[ignore = "24 million tuples: about a minute; run once by hand"]
    fn class_count_2x4_agrees_with_union_find() {
        assert_eq!(classes(4).unwrap().len(), orbits_by_union_find(4));
    }

    #[test]
    fn canonical_form_ignores_the_symmetries() {
        let mut seed = 0x1234_5678u64;
        let mut next = move |m: u64| {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            (seed >> 33) % m
        };
        for class in classes(4).unwrap().iter().step_by(3) {
            let sets = class.representative.sets().to_vec();
            for _ in 0..5 {
                let mut digits: Vec<u16> = (0..8).collect();
                for i in (1..8).rev() {
                    digits.swap(i, next(i as u64 + 1) as usize);
                }
                let mut moved: Vec<u16> = sets
                    .iter()
                    .map(|&a| {
                        let relabelled = (0..8).filter(|&d| (a >> d) & 1 == 1).map(|d| 1u16 << digits[d]).sum::<u16>();
                        if next(2) == 0 { relabelled } else { 0xff ^ relabelled }
                    })
                    .collect();
                moved.rotate_left(next(4) as usize);
                let found = class_of_sets(&ColumnSets::new(4, moved).unwrap());
                assert_eq!(&found, class);
            }
        }
    }
}
