//! The exact total: S, N0, the factorization of S, and Kilfoil's estimate.
//!
//! S = sum over classes C of |C| x (sum of the 10 seed counts of rep(C)),
//! N0 = 9! x 72 x 72 x S: 9! relabellings of B1, 72 catalogue-to-standard
//! band orders, and 72 orders of the seeds' rows and lower bands.

use std::fmt;

use num_bigint::BigUint;
use num_traits::{One, ToPrimitive, Zero};

/// 9! x 72 x 72: the number of grids each unit of S stands for.
pub const GRIDS_PER_UNIT: u64 = 362_880 * 72 * 72;

/// The published S (math.md): 3,546,146,300,288.
pub const PUBLISHED_S: u64 = 3_546_146_300_288;

/// S from (class size, sum of the class representative's 10 seed counts).
///
/// ```
/// use census_math::total::{s_from_classes, n0_from_s};
/// let s = s_from_classes([(2, 10u64), (3, 5)]);
/// assert_eq!(s.to_string(), "35");
/// assert_eq!(n0_from_s(&s).to_string(), (35u128 * 362_880 * 72 * 72).to_string());
/// ```
pub fn s_from_classes(classes: impl IntoIterator<Item = (u64, u64)>) -> BigUint {
    classes.into_iter().fold(BigUint::zero(), |s, (size, seed_sum)| s + BigUint::from(size) * seed_sum)
}

/// N0 = 9! x 72 x 72 x S.
pub fn n0_from_s(s: &BigUint) -> BigUint {
    s * GRIDS_PER_UNIT
}

/// The prime factorization of a number, as (prime, exponent) pairs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Factorization(pub Vec<(BigUint, u32)>);

/// Factorizes by trial division up to the square root (fine for S, whose
/// largest prime factor is about 2.8 x 10^10, since S / 2^7 is itself prime
/// and the loop stops once the cofactor's square root is passed).
pub fn factorize(n: &BigUint) -> Factorization {
    let mut factors = Vec::new();
    let mut rest = n.clone();
    if rest <= BigUint::one() {
        return Factorization(factors);
    }
    let mut p = BigUint::from(2u32);
    while &p * &p <= rest {
        let mut exponent = 0;
        while (&rest % &p).is_zero() {
            rest /= &p;
            exponent += 1;
        }
        if exponent > 0 {
            factors.push((p.clone(), exponent));
        }
        p += if p == BigUint::from(2u32) { 1u32 } else { 2u32 };
    }
    if rest > BigUint::one() {
        factors.push((rest, 1));
    }
    Factorization(factors)
}

impl fmt::Display for Factorization {
    /// `2^7 x 27,704,267,971`
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> =
            self.0.iter().map(|(p, e)| if *e == 1 { thousands(p) } else { format!("{}^{e}", thousands(p)) }).collect();
        f.write_str(&parts.join(" x "))
    }
}

/// Kilfoil's heuristic estimate (the paper's appendix):
/// 948,109,639,680^6 / (9!)^9, about 6.6571 x 10^21; not an integer.
pub fn kilfoil_estimate() -> f64 {
    let bands = BigUint::from(948_109_639_680u64).pow(6);
    let relabellings = BigUint::from(362_880u64).pow(9);
    // Keep 17 significant digits through the integer division.
    let scale = BigUint::from(10u64).pow(17);
    let scaled = bands * &scale / relabellings;
    scaled.to_f64().expect("finite") / 1e17
}

/// (estimate - exact) / exact, e.g. about -0.002 for Kilfoil's estimate of N0.
pub fn relative_error(estimate: f64, exact: &BigUint) -> f64 {
    let exact = exact.to_f64().expect("finite");
    (estimate - exact) / exact
}

/// A number with thousands separators: `6,670,903,752,021,072,936,960`.
///
/// ```
/// use census_math::total::thousands;
/// assert_eq!(thousands(&1234567u64), "1,234,567");
/// ```
pub fn thousands(n: &impl ToString) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() * 4 / 3);
    for (i, ch) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn published_s_factorizes_as_published() {
        let s = BigUint::from(PUBLISHED_S);
        assert_eq!(factorize(&s).to_string(), "2^7 x 27,704,267,971");
        assert_eq!(thousands(&n0_from_s(&s)), "6,670,903,752,021,072,936,960");
    }

    #[test]
    fn kilfoil_is_two_tenths_of_a_percent_low() {
        let estimate = kilfoil_estimate();
        assert!((estimate / 1e21 - 6.6571).abs() < 5e-4, "{estimate}");
        let error = relative_error(estimate, &n0_from_s(&BigUint::from(PUBLISHED_S)));
        assert!((-0.0025..-0.0015).contains(&error), "{error}");
    }
}
