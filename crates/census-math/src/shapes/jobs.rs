//! Shape classes as engine jobs: text keys a worker counts alone, and the fold.
//!
//! A class key is `2x<c>:` and the representative's sets A_1 .. A_c as
//! three-digit hex masks joined by commas (`2x2:003,003`); it counts F(S).
//! A part key adds `/` and the top-level factor's digit masks on the first
//! columns (`2x2:003,003/001,...`, see [`super::bands::parts`]); the parts of
//! a class add up to its F(S). Keys carry everything: a worker needs no table.
//!
//! The total is the sum over classes of weight x F^2, so **a class's parts
//! must be added before squaring**: [`fold`] groups results by their class
//! label and squares the group sums.

use std::collections::BTreeMap;

use num_bigint::BigUint;

use std::sync::atomic::AtomicBool;

use super::bands::{band_count, band_count_cancellable, part_count, part_count_cancellable, parts, prefixes};
use super::classes::{ColumnSets, classes};
use super::{ShapeError, check_c};

/// From this c on, [`jobs`] splits every class into its parts (15 per
/// 2 x 6 class). A 2 x 5 class is under a second whole, so it stays one
/// job; a 2 x 6 class is days of work with this counter and even its parts
/// take hours (BENCHMARKS.md, "Box shapes"), so the split is the coarsest
/// useful one and finer keys ([`sub_keys`]) exist for sampling.
pub const SPLIT_FROM_C: usize = 6;

/// One job of a 2 x c count: a whole class, or one part of one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShapeJob {
    /// What a worker needs to count alone, e.g. `2x3:007,007,007`.
    pub key: String,
    /// The class the job belongs to, e.g. `2x3 class 0`; the parts of a
    /// class share it and [`fold`] adds them before squaring.
    pub group: String,
    /// The class size: the number of column-set tuples S with this F.
    pub weight: u128,
}

/// The jobs of the 2 x c shape in class order: one per class, or for
/// c >= [`SPLIT_FROM_C`] one per part of each class.
pub fn jobs(c: usize) -> Result<Vec<ShapeJob>, ShapeError> {
    let mut out = Vec::new();
    for (index, class) in classes(c)?.into_iter().enumerate() {
        let key = class_key(&class.representative);
        let group = format!("2x{c} class {index}");
        if c >= SPLIT_FROM_C {
            for key in part_keys(&key)? {
                out.push(ShapeJob { key, group: group.clone(), weight: class.size });
            }
        } else {
            out.push(ShapeJob { key, group, weight: class.size });
        }
    }
    Ok(out)
}

/// Counts a class key (F(S)) or a part key (its share of F(S)).
///
/// ```
/// use census_math::shapes::count_job;
/// assert_eq!(count_job("2x2:003,003"), Ok(4));
/// assert!(count_job("2x2:003").is_err());
/// ```
pub fn count_job(key: &str) -> Result<u128, ShapeError> {
    let (sets, prefix) = parse_key(key)?;
    match prefix {
        None => Ok(band_count(&sets)),
        Some(prefix) => part_count(&sets, &prefix),
    }
}

/// [`count_job`], or `Ok(None)` when `cancel` is set before the count is
/// done (it is read often enough to stop within milliseconds).
pub fn count_job_cancellable(key: &str, cancel: &AtomicBool) -> Result<Option<u128>, ShapeError> {
    let (sets, prefix) = parse_key(key)?;
    match prefix {
        None => Ok(band_count_cancellable(&sets, cancel)),
        Some(prefix) => part_count_cancellable(&sets, &prefix, cancel),
    }
}

/// The part keys of a class key; their counts add up to the class's F.
pub fn part_keys(key: &str) -> Result<Vec<String>, ShapeError> {
    let (sets, prefix) = parse_key(key)?;
    if prefix.is_some() {
        return Err(bad(key, "already a part key"));
    }
    let class = class_key(&sets);
    Ok(parts(&sets).iter().map(|prefix| format!("{class}/{}", masks(prefix))).collect())
}

/// The keys of the parts of a class key that fix its first `columns`
/// columns (1..=2c); their counts add up to the class's F. [`part_keys`] is
/// this at [`super::PART_COLUMNS`]; deeper keys serve to sample the cost of
/// a part without counting it whole.
pub fn sub_keys(key: &str, columns: usize) -> Result<Vec<String>, ShapeError> {
    let (sets, prefix) = parse_key(key)?;
    if prefix.is_some() {
        return Err(bad(key, "already a part key"));
    }
    let class = class_key(&sets);
    Ok(prefixes(&sets, columns).iter().map(|prefix| format!("{class}/{}", masks(prefix))).collect())
}

/// The number of 2 x c grids from every job's count: the counts are added
/// per group (a class's parts) and the total is the sum of weight x F^2 over
/// groups, exactly. Every job of [`jobs`] must appear once; this cannot
/// check that without enumerating the classes again.
pub fn fold<'a>(c: usize, results: impl IntoIterator<Item = (&'a ShapeJob, u128)>) -> Result<BigUint, ShapeError> {
    check_c(c)?;
    let prefix = format!("2x{c}:");
    let mut groups: BTreeMap<&str, (u128, u128)> = BTreeMap::new();
    for (job, count) in results {
        if !job.key.starts_with(&prefix) {
            return Err(ShapeError::BadResults { reason: format!("key {:?} is not a 2 x {c} job", job.key) });
        }
        let entry = groups.entry(&job.group).or_insert((job.weight, 0));
        if entry.0 != job.weight {
            return Err(ShapeError::BadResults {
                reason: format!("group {:?} has weights {} and {}", job.group, entry.0, job.weight),
            });
        }
        entry.1 = entry.1.checked_add(count).ok_or_else(|| ShapeError::BadResults {
            reason: format!("group {:?}: the parts overflow 128 bits", job.group),
        })?;
    }
    Ok(groups.values().map(|&(weight, f)| BigUint::from(weight) * BigUint::from(f) * BigUint::from(f)).sum())
}

/// The number of 2 x c grids, every job counted here on this thread through
/// its key, as a worker would.
pub fn grids(c: usize) -> Result<BigUint, ShapeError> {
    let jobs = jobs(c)?;
    let counts = jobs.iter().map(|job| count_job(&job.key)).collect::<Result<Vec<_>, _>>()?;
    fold(c, jobs.iter().zip(counts))
}

pub(super) fn class_key(sets: &ColumnSets) -> String {
    format!("2x{}:{}", sets.c(), masks(sets.sets()))
}

pub(super) fn masks(masks: &[u16]) -> String {
    masks.iter().map(|m| format!("{m:03x}")).collect::<Vec<_>>().join(",")
}

fn bad(key: &str, reason: &str) -> ShapeError {
    ShapeError::BadKey { key: key.to_string(), reason: reason.to_string() }
}

pub(super) fn parse_masks(key: &str, text: &str, what: &str) -> Result<Vec<u16>, ShapeError> {
    text.split(',')
        .map(|s| {
            if s.len() == 3 && s.bytes().all(|b| b.is_ascii_hexdigit()) {
                u16::from_str_radix(s, 16).ok()
            } else {
                None
            }
        })
        .collect::<Option<Vec<u16>>>()
        .ok_or_else(|| bad(key, &format!("{what} are three-digit hex masks joined by commas")))
}

fn parse_key(key: &str) -> Result<(ColumnSets, Option<Vec<u16>>), ShapeError> {
    let rest = key.strip_prefix("2x").ok_or_else(|| bad(key, "must start with 2x"))?;
    let (c, rest) = rest.split_once(':').ok_or_else(|| bad(key, "no ':' after the shape"))?;
    if c.is_empty() || c.len() > 2 || !c.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad(key, "the shape's c is not a small number"));
    }
    let c: usize = c.parse().map_err(|_| bad(key, "the shape's c is not a number"))?;
    check_c(c)?;
    let (sets, prefix) = match rest.split_once('/') {
        Some((sets, prefix)) => (sets, Some(prefix)),
        None => (rest, None),
    };
    let sets = ColumnSets::new(c, parse_masks(key, sets, "sets")?)?;
    let prefix = prefix.map(|p| parse_masks(key, p, "part masks")).transpose()?;
    Ok((sets, prefix))
}

#[cfg(test)]
mod tests {
    use super::super::PUBLISHED_GRIDS;
    use super::*;

    /// The published total for 2 x c, from docs/mathematics.md.
    fn published(c: usize) -> String {
        PUBLISHED_GRIDS.iter().find(|(shape, _)| *shape == c).unwrap().1.to_string()
    }

    #[test]
    fn total_2x2_is_288() {
        assert_eq!(grids(2).unwrap().to_string(), "288");
    }

    #[test]
    fn total_2x3_sudoku_players_forum_2005() {
        assert_eq!(grids(3).unwrap().to_string(), "28200960");
        assert_eq!(published(3), "28200960");
    }

    #[test]
    fn total_2x4_russell_2005() {
        assert_eq!(grids(4).unwrap().to_string(), "29136487207403520");
        assert_eq!(published(4), "29136487207403520");
    }

    #[test]
    fn jobs_fold_to_the_total_through_part_keys() {
        for c in 3..=4 {
            let mut part_jobs = Vec::new();
            for job in jobs(c).unwrap() {
                for key in part_keys(&job.key).unwrap() {
                    part_jobs.push(ShapeJob { key, ..job.clone() });
                }
            }
            let counts: Vec<u128> = part_jobs.iter().map(|job| count_job(&job.key).unwrap()).collect();
            assert_eq!(fold(c, part_jobs.iter().zip(counts)).unwrap().to_string(), published(c), "2 x {c}");
        }
    }

    #[test]
    fn deeper_sub_keys_add_up_to_each_part() {
        let job = &jobs(4).unwrap()[7];
        let whole = count_job(&job.key).unwrap();
        let mut total = 0;
        for part in part_keys(&job.key).unwrap() {
            let subs = sub_keys(&job.key, 4).unwrap();
            let sum: u128 =
                subs.iter().filter(|k| k.starts_with(&format!("{part},"))).map(|k| count_job(k).unwrap()).sum();
            assert_eq!(sum, count_job(&part).unwrap(), "{part}");
            total += sum;
        }
        assert_eq!(total, whole);
    }

    #[test]
    fn fold_adds_parts_before_squaring() {
        let job = |key: &str| ShapeJob { key: key.into(), group: "g".into(), weight: 3 };
        let (a, b) = (job("2x2:003,003/003,00c"), job("2x2:003,003/001,00c"));
        // 3 x (1 + 2)^2, not 3 x (1 + 4).
        assert_eq!(fold(2, [(&a, 1), (&b, 2)]).unwrap(), BigUint::from(27u32));
        let other = ShapeJob { weight: 4, ..b.clone() };
        assert!(matches!(fold(2, [(&a, 1), (&other, 2)]), Err(ShapeError::BadResults { .. })));
        assert!(matches!(fold(3, [(&a, 1)]), Err(ShapeError::BadResults { .. })));
    }

    #[test]
    fn weights_sum_to_all_column_set_tuples() {
        for c in 2..=5 {
            let total: u128 = jobs(c).unwrap().iter().map(|job| job.weight).sum();
            let binomial = (0..c as u128).fold(1, |acc, i| acc * (2 * c as u128 - i) / (i + 1));
            assert_eq!(total, binomial.pow(c as u32), "2 x {c}");
        }
    }

    #[test]
    fn bad_keys_are_refused_with_a_reason() {
        let cases = [
            ("", "must start with 2x"),
            ("3x2:003,003", "must start with 2x"),
            ("2x2", "no ':'"),
            ("2x:003,003", "not a small number"),
            ("2x+2:003,003", "not a small number"),
            ("2x7:003", "c must be 2..=6"),
            ("2x2:003", "1 sets for c = 2"),
            ("2x2:003,007", "not a 2-subset"),
            ("2x2:03,003", "three-digit hex"),
            ("2x2:+03,003", "three-digit hex"),
            ("2x2:003,003/", "three-digit hex"),
            ("2x2:003,003/002", "fixed to its 1 smallest"),
            ("2x2:003,003/007", "is not 1 of"),
            ("2x2:003,003/001/001", "three-digit hex"),
        ];
        for (key, reason) in cases {
            let message = count_job(key).unwrap_err().to_string();
            assert!(message.contains(reason), "{key:?}: {message:?} lacks {reason:?}");
        }
        assert_eq!(count_job("2x2:003,003"), Ok(4));
        assert!(part_keys("2x2:003,003/001").is_err());
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_keys_never_panic(key in "\\PC{0,40}") {
            let _ = count_job(&key);
        }

        #[test]
        fn keyish_strings_never_panic(key in "2x[0-9]{1,2}:[0-9a-f,]{0,30}(/[0-9a-f,]{0,12})?") {
            let _ = count_job(&key);
        }
    }
}
