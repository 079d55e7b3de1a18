//! `synthetic jobs=M [salt=S] [heavy=K]`: not a count of anything. Made-up
//! jobs whose counts are a hash of their number and the salt, checked in
//! O(1), for load testing the engine (`census simulate`; the counts are
//! [`crate::synthetic`]'s). The jobs are made as they are read, so a run of
//! 10^7 is never a list in memory, and the fold keeps only their sum.

use std::sync::atomic::AtomicBool;
use std::time::Duration;

use num_bigint::BigUint;

use super::kind::{CountKeys, Counts, FoldInput, KindInfo, Parameters, bad_key};
use super::{Answer, Census, CensusError, CensusKind, CheckPolicy, JobCounter, JobSpec};
use crate::synthetic as made_up;

pub(super) const KIND: KindInfo = KindInfo {
    name: "synthetic",
    grammar: "synthetic jobs=M [salt=S] [heavy=K]",
    help: "counts nothing: made-up jobs for load testing only (census simulate); every K-th job costs 100",
    published: "none: its answer is the sum of its made-up counts",
    examples: &["synthetic jobs=9 salt=3 heavy=4", "synthetic jobs=5"],
    parse,
};

/// `jobs` made-up jobs whose counts are a hash of their number and `salt`.
/// `heavy`: every K-th job costs [`made_up::HEAVY_JOB_COST`]
/// ([`super::Census::job_cost`]), to test progress weighted by cost; all
/// cost 1 without it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Synthetic {
    pub jobs: u64,
    pub salt: u64,
    pub heavy: Option<u64>,
}

fn parse(parameters: &mut Parameters<'_>) -> Result<Census, String> {
    let jobs = parameters.take_number("jobs")?.ok_or("a synthetic census needs jobs=M, e.g. jobs=1000")?;
    let salt = parameters.take_number("salt")?.unwrap_or(0);
    let heavy = parameters.take_number("heavy")?;
    Ok(Census::from(Synthetic { jobs, salt, heavy }))
}

impl std::fmt::Display for Synthetic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "synthetic jobs={} salt={}", self.jobs, self.salt)?;
        match self.heavy {
            Some(heavy) => write!(f, " heavy={heavy}"),
            None => Ok(()),
        }
    }
}

impl CensusKind for Synthetic {
    fn check(&self) -> Result<(), String> {
        if !(1..=made_up::MAX_JOBS).contains(&self.jobs) {
            return Err(format!("jobs={}: a synthetic census has 1 to {} jobs", self.jobs, made_up::MAX_JOBS));
        }
        if self.heavy == Some(0) {
            return Err("heavy=0: every K-th job is heavy, K at least 1".into());
        }
        Ok(())
    }

    fn published(&self) -> Option<BigUint> {
        None
    }

    fn jobs(&self) -> Result<Vec<JobSpec>, CensusError> {
        Ok(self.job_stream()?.collect())
    }

    fn job_stream(&self) -> Result<Box<dyn Iterator<Item = JobSpec> + Send>, CensusError> {
        Ok(Box::new((0..self.jobs).map(|index| JobSpec {
            key: made_up::key(index),
            group: made_up::group(index),
            weight: 1,
        })))
    }

    fn makes_jobs_as_read(&self) -> bool {
        true
    }

    fn stage_count(&self) -> u32 {
        1
    }

    fn stage(&self, _key: &str) -> Result<u32, CensusError> {
        Ok(0)
    }

    /// With `heavy=K`, every K-th job costs [`made_up::HEAVY_JOB_COST`] (a
    /// key not one of its jobs is refused); without, every job 1.
    fn job_cost(&self, key: &str) -> Result<u64, CensusError> {
        match self.heavy {
            Some(every) => made_up::index_of(key, self.jobs)
                .map(|index| made_up::cost(index, Some(every)))
                .map_err(|reason| bad_key(key, reason)),
            None => Ok(1),
        }
    }

    fn knows_job_costs(&self) -> bool {
        self.heavy.is_some()
    }

    fn jobs_counted_together(&self) -> u32 {
        1
    }

    fn longest_lease(&self) -> Option<Duration> {
        None
    }

    fn default_check(&self) -> CheckPolicy {
        CheckPolicy::RECOUNT_ALL
    }

    fn counter_version(&self) -> String {
        "synthetic/1".to_string()
    }

    fn job_counter(&self) -> JobCounter {
        JobCounter::new(MadeUpCounter { jobs: self.jobs, salt: self.salt })
    }

    /// Its one counter.
    fn checking_counter(&self) -> JobCounter {
        self.job_counter()
    }

    fn has_independent_check(&self) -> bool {
        false
    }

    fn class_power(&self) -> u32 {
        1
    }

    fn group_completions(&self, _count_sum: &BigUint) -> Option<BigUint> {
        None
    }

    /// Its weights are all 1: the sum of its counts.
    fn fold_input(&self) -> FoldInput {
        FoldInput::WeightedSum
    }

    fn answer(&self, counts: Counts<'_>) -> Result<Answer, CensusError> {
        let value = counts.weighted_sum();
        let terms = vec![
            ("synthetic jobs (a load test: counts of nothing)".to_string(), self.jobs.to_string()),
            ("sum of their made-up counts".to_string(), value.to_string()),
        ];
        Ok(Answer { value, terms })
    }

    fn needs_postgres(&self) -> Option<&'static str> {
        None
    }

    fn needs_shared_files(&self) -> bool {
        false
    }
}

/// The made-up counts of `synthetic jobs=M salt=S` ([`made_up::count_key`]).
struct MadeUpCounter {
    jobs: u64,
    salt: u64,
}

impl CountKeys for MadeUpCounter {
    fn count_cancellable(&self, key: &str, _cancel: &AtomicBool) -> Result<u128, CensusError> {
        made_up::count_key(key, self.jobs, self.salt).map_err(|reason| bad_key(key, reason))
    }
}
