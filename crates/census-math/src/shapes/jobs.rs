//! Shape classes as engine jobs: text keys a worker counts alone, and the fold.
//!
//! A class key is `2x<c>:` and the representative's sets A_1 .. A_c as
//! three-digit hex masks joined by commas (`2x2:003,003`). Its count is
//! F(S). A class whose F takes long splits into part keys, the class key then
//! `/` and a first row as 2c hex digits, the digit of each column
//! (`2x2:003,003/0123`): [`part_keys`] lists them and their counts add up to
//! F(S).
//!
//! The total is sum over classes of weight x F^2, so **a class's parts must be
//! added before squaring**: fold the part sums, never the parts.

use num_bigint::BigUint;

use super::bands::{band_count, first_rows, part_count};
use super::classes::{ColumnSets, classes};
use super::{ShapeError, check_c};

/// One class of the 2 x c shape as a job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShapeJob {
    /// What a worker needs to count F alone, e.g. `2x3:007,007,007`.
    pub key: String,
    /// The class's index in [`classes`] order.
    pub group: usize,
    /// The class size: the number of tuples S with this F.
    pub weight: u128,
}

/// The jobs of the 2 x c shape, one per class.
pub fn jobs(c: usize) -> Result<Vec<ShapeJob>, ShapeError> {
    Ok(classes(c)?
        .into_iter()
        .enumerate()
        .map(|(group, class)| ShapeJob { key: class_key(&class.representative), group, weight: class.size })
        .collect())
}

/// Counts a class key (F(S)) or a part key (its share of F(S)).
pub fn count_job(key: &str) -> Result<u128, ShapeError> {
    let (sets, row) = parse_key(key)?;
    match row {
        None => Ok(band_count(&sets)),
        Some(row) => part_count(&sets, &row),
    }
}

/// The part keys of a class key; their counts add up to the class's F.
pub fn part_keys(key: &str) -> Result<Vec<String>, ShapeError> {
    let (sets, row) = parse_key(key)?;
    if row.is_some() {
        return Err(bad(key, "already a part key"));
    }
    let class = class_key(&sets);
    Ok(first_rows(&sets)
        .iter()
        .map(|row| format!("{class}/{}", row.iter().map(|d| char::from_digit(u32::from(*d), 16).unwrap()).collect::<String>()))
        .collect())
}

/// The number of 2 x c grids from (weight, F) per class: sum of weight x F^2.
/// `c` is only checked (it says which published total the sum is for).
pub fn fold(c: usize, results: &[(u128, u128)]) -> BigUint {
    debug_assert!(check_c(c).is_ok(), "fold for an unsupported c = {c}");
    results.iter().map(|&(weight, f)| BigUint::from(weight) * BigUint::from(f) * BigUint::from(f)).sum()
}

/// The number of 2 x c grids, every class counted here on this thread.
pub fn grids(c: usize) -> Result<BigUint, ShapeError> {
    let results: Vec<(u128, u128)> =
        classes(c)?.iter().map(|class| (class.size, band_count(&class.representative))).collect();
    Ok(fold(c, &results))
}

fn class_key(sets: &ColumnSets) -> String {
    let hex: Vec<String> = sets.sets().iter().map(|a| format!("{a:03x}")).collect();
    format!("2x{}:{}", sets.c(), hex.join(","))
}

fn bad(key: &str, reason: &str) -> ShapeError {
    ShapeError::BadKey { key: key.to_string(), reason: reason.to_string() }
}

fn parse_key(key: &str) -> Result<(ColumnSets, Option<Vec<u8>>), ShapeError> {
    let rest = key.strip_prefix("2x").ok_or_else(|| bad(key, "must start with 2x"))?;
    let (c, rest) = rest.split_once(':').ok_or_else(|| bad(key, "no ':' after the shape"))?;
    let c: usize = c.parse().map_err(|_| bad(key, "the shape's c is not a number"))?;
    let (sets, row) = match rest.split_once('/') {
        Some((sets, row)) => (sets, Some(row)),
        None => (rest, None),
    };
    let sets = sets
        .split(',')
        .map(|s| if s.len() == 3 { u16::from_str_radix(s, 16).ok() } else { None })
        .collect::<Option<Vec<u16>>>()
        .ok_or_else(|| bad(key, "sets are three-digit hex masks joined by commas"))?;
    let sets = ColumnSets::new(c, sets)?;
    let row = match row {
        None => None,
        Some(row) => Some(
            row.chars()
                .map(|ch| ch.to_digit(16).map(|d| d as u8))
                .collect::<Option<Vec<u8>>>()
                .ok_or_else(|| bad(key, "a first row is hex digits"))?,
        ),
    };
    Ok((sets, row))
}

#[cfg(test)]
mod tests {
    use super::super::PUBLISHED_GRIDS;
    use super::*;

    fn published(c: usize) -> String {
        PUBLISHED_GRIDS.iter().find(|(shape, _)| *shape == c).unwrap().1.to_string()
    }

    #[test]
    fn totals_2x2_2x3_2x4() {
        for c in 2..=4 {
            assert_eq!(grids(c).unwrap().to_string(), published(c), "2 x {c}");
        }
    }

    #[test]
    #[cfg_attr(debug_assertions, ignore = "seconds in release, minutes in debug")]
    fn total_2x5() {
        assert_eq!(grids(5).unwrap().to_string(), published(5));
    }

    #[test]
    fn jobs_fold_to_the_total_through_keys_and_parts() {
        let jobs = jobs(3).unwrap();
        let mut results = Vec::new();
        for job in &jobs {
            let parts: u128 = part_keys(&job.key).unwrap().iter().map(|key| count_job(key).unwrap()).sum();
            assert_eq!(parts, count_job(&job.key).unwrap(), "{}", job.key);
            results.push((job.weight, parts));
        }
        assert_eq!(fold(3, &results).to_string(), published(3));
        assert_eq!(jobs.iter().map(|job| job.group).collect::<Vec<_>>(), (0..jobs.len()).collect::<Vec<_>>());
    }

    #[test]
    fn bad_keys_are_refused() {
        for key in ["", "3x2:003,003", "2x2:003", "2x2:003,007", "2x2:03,003", "2x7:003", "2x2:003,003/01", "2x2:003,003/1023"] {
            assert!(count_job(key).is_err(), "{key}");
        }
        assert_eq!(count_job("2x2:003,003").unwrap(), 4);
        assert_eq!(count_job("2x2:003,003/0213").unwrap(), 2);
    }
}
