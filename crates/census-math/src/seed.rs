//! Job seeds: the first columns of B4 and B7.
//!
//! Column 1 of a standard grid holds 1, 4, 7 in the top band, so rows 4-9 of
//! column 1 hold {2,3,5,6,8,9}. Reordering rows 4-6, rows 7-9, and swapping
//! the two lower bands keep the top band and the number of completions (72
//! arrangements each), so only 10 arrangements need counting: B4's column
//! ascending, B7's ascending, and 2 in B4.

use std::fmt;

/// The digits rows 4-9 of column 1 hold in a standard grid.
pub const LOWER_FIRST_COLUMN: [u8; 6] = [2, 3, 5, 6, 8, 9];

/// One of the 10 seeds: column 1 of B4 (rows 4-6) and of B7 (rows 7-9), each ascending.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Seed {
    /// Column 1, rows 4-6, ascending; always starts with 2.
    pub b4: [u8; 3],
    /// Column 1, rows 7-9, ascending.
    pub b7: [u8; 3],
}

/// The 10 seeds in their fixed order: by B4's column, in ascending order.
/// A seed's position in this list is its index (0-9) everywhere: in jobs, in
/// the store and on the wire.
///
/// ```
/// use census_math::seed::SEEDS;
/// assert_eq!(SEEDS.len(), 10);
/// assert_eq!(SEEDS[0].to_string(), "235/689");
/// assert_eq!(SEEDS[9].to_string(), "289/356");
/// ```
pub const SEEDS: [Seed; 10] = {
    let mut seeds = [Seed { b4: [0; 3], b7: [0; 3] }; 10];
    let others = [3u8, 5, 6, 8, 9];
    let mut n = 0;
    let mut i = 0;
    while i < 5 {
        let mut j = i + 1;
        while j < 5 {
            let mut b7 = [0u8; 3];
            let mut k = 0;
            let mut m = 0;
            while m < 5 {
                if m != i && m != j {
                    b7[k] = others[m];
                    k += 1;
                }
                m += 1;
            }
            seeds[n] = Seed { b4: [2, others[i], others[j]], b7 };
            n += 1;
            j += 1;
        }
        i += 1;
    }
    seeds
};

impl Seed {
    /// The seed's index in [`SEEDS`].
    pub fn index(&self) -> usize {
        SEEDS.iter().position(|s| s == self).expect("every Seed value is one of SEEDS")
    }

    /// The seed with the given index, if it is 0-9.
    pub fn from_index(index: usize) -> Option<Seed> {
        SEEDS.get(index).copied()
    }

    /// Column 1, rows 4-9, as the seed fixes it.
    pub fn column(&self) -> [u8; 6] {
        [self.b4[0], self.b4[1], self.b4[2], self.b7[0], self.b7[1], self.b7[2]]
    }

    /// The seed an arrangement of rows 4-9 of column 1 reduces to, by sorting
    /// each lower band's three entries and putting the band holding 2 first.
    /// `None` if the arrangement is not a permutation of {2,3,5,6,8,9}.
    pub fn of_column(column: [u8; 6]) -> Option<Seed> {
        let mut sorted = column;
        sorted.sort_unstable();
        if sorted != LOWER_FIRST_COLUMN {
            return None;
        }
        let mut upper = [column[0], column[1], column[2]];
        let mut lower = [column[3], column[4], column[5]];
        upper.sort_unstable();
        lower.sort_unstable();
        let (b4, b7) = if upper[0] == 2 { (upper, lower) } else { (lower, upper) };
        Some(Seed { b4, b7 })
    }
}

impl fmt::Display for Seed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [a, b, c] = self.b4;
        let [d, e, g] = self.b7;
        write!(f, "{a}{b}{c}/{d}{e}{g}")
    }
}

impl fmt::Debug for Seed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Seed({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_are_distinct_and_well_formed() {
        for (i, seed) in SEEDS.iter().enumerate() {
            assert_eq!(seed.index(), i);
            assert_eq!(seed.b4[0], 2);
            assert!(seed.b4.is_sorted() && seed.b7.is_sorted());
            assert_eq!(Seed::of_column(seed.column()), Some(*seed));
        }
    }

    #[test]
    fn every_arrangement_maps_to_exactly_one_seed_72_times() {
        // All 720 orders of {2,3,5,6,8,9} in rows 4-9.
        let mut hits = [0usize; 10];
        let mut arrangements = 0;
        for_each_permutation(LOWER_FIRST_COLUMN, &mut |column| {
            arrangements += 1;
            let seed = Seed::of_column(column).expect("a permutation reduces to a seed");
            hits[seed.index()] += 1;
        });
        assert_eq!(arrangements, 720);
        assert_eq!(hits, [72; 10]);
    }

    fn for_each_permutation(items: [u8; 6], visit: &mut impl FnMut([u8; 6])) {
        fn go(items: &mut [u8; 6], k: usize, visit: &mut impl FnMut([u8; 6])) {
            if k == items.len() {
                visit(*items);
                return;
            }
            for i in k..items.len() {
                items.swap(k, i);
                go(items, k + 1, visit);
                items.swap(k, i);
            }
        }
        let mut items = items;
        go(&mut items, 0, visit);
    }

    #[test]
    fn rejects_columns_that_are_not_the_lower_digits() {
        assert_eq!(Seed::of_column([1, 3, 5, 6, 8, 9]), None);
    }
}
