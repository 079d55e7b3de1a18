//! A made-up census for load testing (`census simulate`): it counts
//! nothing. Job `i` of `synthetic jobs=M salt=S` has the key `synthetic:i`
//! and a "count" that is a hash of `i` and the salt, below 2^32, so a
//! worker and the coordinator's check both find it in O(1), and the store
//! and the protocol are exercised exactly as by a real census without any
//! counting cost. The answer is the exact sum of the counts.
//!
//! Its answer means nothing: the census's name, its terms and every help
//! text that mentions it say it is for load testing only. It never reads as
//! a real count: a key of another census is refused, and its keys are
//! refused by every other census.
//!
//! ```
//! use census_math::synthetic;
//! let count = synthetic::count(7, 0);
//! assert!(count < 1 << 32);
//! assert_eq!(synthetic::count_key("synthetic:7", 10, 0), Ok(count));
//! assert!(synthetic::count_key("synthetic:10", 10, 0).is_err());
//! ```

use num_bigint::BigUint;

/// The most jobs a synthetic census lists (`Census::job_stream` makes
/// them one at a time, for a run's creation and for the fold of a finished
/// run, `Census::folding`: never all in memory).
pub const MAX_JOBS: u64 = 10_000_000;

/// Jobs per group, as the 9x9 census has 10 seeds per class: results of
/// neighbouring jobs add into one class sum, as they do in real runs.
pub const JOBS_PER_GROUP: u64 = 10;

/// The cost of a heavy job of `synthetic jobs=M heavy=K` (every K-th job),
/// relative to the others' 1: a run whose jobs differ in cost, for testing
/// progress weighted by cost ([`crate::census::Census::job_cost`]). Its
/// counts are no dearer to make.
pub const HEAVY_JOB_COST: u64 = 100;

/// What every key starts with.
pub const KEY_PREFIX: &str = "synthetic:";

/// The made-up count of job `index` under `salt`: the top 32 bits of
/// SplitMix64 (Steele, Lea and Flood 2014) of the two, so that counts
/// differ from job to job and from salt to salt, and a sum of up to
/// [`MAX_JOBS`] of them stays far below 2^63 (SQLite's integers).
pub fn count(index: u64, salt: u64) -> u128 {
    let mut z = index.wrapping_add(salt.wrapping_mul(0x9E37_79B9_7F4A_7C15)).wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    u128::from(z >> 32)
}

/// The key of job `index`.
pub fn key(index: u64) -> String {
    format!("{KEY_PREFIX}{index}")
}

/// The group of job `index`.
pub fn group(index: u64) -> String {
    format!("block {}", index / JOBS_PER_GROUP)
}

/// The count of a key of the census with `jobs` jobs, or why the key is not
/// one of its keys.
pub fn count_key(key: &str, jobs: u64, salt: u64) -> Result<u128, String> {
    Ok(count(index_of(key, jobs)?, salt))
}

/// The cost of job `index` when every `heavy`-th job is heavy: jobs
/// K - 1, 2K - 1, ... cost [`HEAVY_JOB_COST`], the others 1.
pub fn cost(index: u64, heavy: Option<u64>) -> u64 {
    match heavy {
        Some(every) if every > 0 && index % every == every - 1 => HEAVY_JOB_COST,
        _ => 1,
    }
}

/// The job number of a key of the census with `jobs` jobs, or why the key
/// is not one of its keys.
pub fn index_of(key: &str, jobs: u64) -> Result<u64, String> {
    let digits = key.strip_prefix(KEY_PREFIX).ok_or_else(|| format!("not a synthetic key ({KEY_PREFIX}N)"))?;
    // Digits only, no sign or leading zero: one key per job.
    let canonical =
        digits == "0" || (!digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) && !digits.starts_with('0'));
    let index: u64 =
        digits.parse().ok().filter(|_| canonical).ok_or_else(|| format!("{digits:?} is not a job number"))?;
    if index >= jobs {
        return Err(format!("job {index} is not below jobs={jobs}"));
    }
    Ok(index)
}

/// The answer from every job's count: their exact sum.
pub fn fold(counts: &[u128]) -> BigUint {
    counts.iter().map(|&count| BigUint::from(count)).sum()
}

/// The answer a census of `jobs` jobs under `salt` must fold to, computed
/// here without any store: what `census simulate` checks the run against.
pub fn expected_answer(jobs: u64, salt: u64) -> BigUint {
    (0..jobs).map(|index| BigUint::from(count(index, salt))).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_canonical_and_within_the_census() {
        assert_eq!(count_key("synthetic:0", 1, 5), Ok(count(0, 5)));
        for key in ["synthetic:1", "synthetic:01", "synthetic:+0", "synthetic:", "synthetic:-1", "2x2:003", "0"] {
            assert!(count_key(key, 1, 5).is_err(), "{key:?}");
        }
    }

    #[test]
    fn counts_depend_on_the_job_and_the_salt_and_fit_32_bits() {
        let counts: std::collections::BTreeSet<u128> = (0..1000).map(|i| count(i, 0)).collect();
        assert_eq!(counts.len(), 1000);
        assert!(counts.iter().all(|&c| c < 1 << 32));
        assert_ne!(count(3, 0), count(3, 1));
        // Pinned, so that a change of the hash is a new counter version.
        assert_eq!(count(0, 0), u128::from(0xE220_A839_7B1D_CDAF_u64 >> 32));
    }

    #[test]
    fn every_kth_job_is_heavy() {
        let costs: Vec<u64> = (0..7).map(|i| cost(i, Some(3))).collect();
        assert_eq!(costs, [1, 1, HEAVY_JOB_COST, 1, 1, HEAVY_JOB_COST, 1]);
        assert!((0..7).all(|i| cost(i, None) == 1));
        assert!((0..7).all(|i| cost(i, Some(1)) == HEAVY_JOB_COST));
    }

    #[test]
    fn the_fold_is_the_exact_sum() {
        let counts: Vec<u128> = (0..100).map(|i| count(i, 9)).collect();
        assert_eq!(fold(&counts), expected_answer(100, 9));
        assert_eq!(fold(&counts), BigUint::from(counts.iter().sum::<u128>()));
    }
}
