//! `essentially-different`: 9x9 grids up to the 3,359,232 rearrangements
//! and relabelling, by Burnside's lemma (Russell and Jarvis 2006). A job is
//! a conjugacy class of the group, or a part of one; its count is the
//! class's fixed count; the fold is the class-size-weighted sum divided by
//! |G| ([`crate::essentially_different`]).

use std::sync::atomic::AtomicBool;
use std::time::Duration;

use num_bigint::BigUint;

use super::kind::{CountKeys, Counts, FoldInput, KindInfo, Parameters, bad_key};
use super::{Answer, Census, CensusError, CensusKind, CheckPolicy, JobCounter, JobSpec};
use crate::essentially_different as ed;

pub(super) const KIND: KindInfo = KindInfo {
    name: "essentially-different",
    grammar: "essentially-different",
    help: "9x9 grids up to symmetry (the 3,359,232 rearrangements and relabelling), by Burnside's lemma",
    published: "5,472,730,538 (Russell and Jarvis 2006)",
    examples: &["essentially-different"],
    parse,
};

/// Russell and Jarvis (2006): the number of essentially different grids.
pub const PUBLISHED_ESSENTIALLY_DIFFERENT: u64 = 5_472_730_538;

/// The count of essentially different 9x9 grids (no parameters).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct EssentiallyDifferent;

fn parse(_parameters: &mut Parameters<'_>) -> Result<Census, String> {
    Ok(Census::from(EssentiallyDifferent))
}

impl std::fmt::Display for EssentiallyDifferent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("essentially-different")
    }
}

impl CensusKind for EssentiallyDifferent {
    fn check(&self) -> Result<(), String> {
        Ok(())
    }

    fn published(&self) -> Option<BigUint> {
        Some(BigUint::from(PUBLISHED_ESSENTIALLY_DIFFERENT))
    }

    fn jobs(&self) -> Result<Vec<JobSpec>, CensusError> {
        Ok(ed::jobs()
            .into_iter()
            .map(|job| JobSpec { key: job.key, group: format!("class {}", job.class), weight: u128::from(job.weight) })
            .collect())
    }

    fn makes_jobs_as_read(&self) -> bool {
        false
    }

    fn stage_count(&self) -> u32 {
        1
    }

    fn stage(&self, _key: &str) -> Result<u32, CensusError> {
        Ok(0)
    }

    /// In CPU-milliseconds, from its class's measured time: its jobs take
    /// from microseconds to seconds ([`ed::jobs::job_cost`]).
    fn job_cost(&self, key: &str) -> Result<u64, CensusError> {
        ed::jobs::job_cost(key).map_err(|e| bad_key(key, e))
    }

    fn knows_job_costs(&self) -> bool {
        true
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
        format!("fixed-points/{}", ed::jobs::KEY_VERSION)
    }

    fn job_counter(&self) -> JobCounter {
        JobCounter::new(FixedCountCounter)
    }

    /// Its one counter.
    fn checking_counter(&self) -> JobCounter {
        self.job_counter()
    }

    fn has_independent_check(&self) -> bool {
        false
    }

    /// A class contributes its size x its fixed count.
    fn class_power(&self) -> u32 {
        1
    }

    fn group_completions(&self, _count_sum: &BigUint) -> Option<BigUint> {
        None
    }

    fn fold_input(&self) -> FoldInput {
        FoldInput::EveryJob
    }

    fn answer(&self, counts: Counts<'_>) -> Result<Answer, CensusError> {
        let (jobs, counts) = counts.every_job(self)?;
        let fixed_jobs: Vec<ed::FixedJob> = jobs
            .iter()
            .map(|job| {
                let class = job.group.strip_prefix("class ").and_then(|n| n.parse().ok());
                let weight = u64::try_from(job.weight).ok();
                match (class, weight) {
                    (Some(class), Some(weight)) => Ok(ed::FixedJob { key: job.key.clone(), class, weight }),
                    _ => Err(CensusError::BadResults(format!("job {:?} has a foreign group or weight", job.key))),
                }
            })
            .collect::<Result<_, _>>()?;
        let fold = ed::fold(&fixed_jobs, counts).map_err(|e| CensusError::BadResults(e.to_string()))?;
        // The classes that fix no grid add nothing; the 27 that do are the audit.
        let fixing: Vec<_> = fold.terms.iter().filter(|term| term.fixed > 0).collect();
        let mut terms = vec![("classes of G fixing some grid".to_string(), fixing.len().to_string())];
        terms.extend(
            fixing
                .iter()
                .map(|term| (format!("class {}: size x A", term.class), format!("{} x {}", term.size, term.fixed))),
        );
        terms.push(("sum of size x A".into(), fold.sum.to_string()));
        terms.push(("|G|".into(), ed::GROUP_ORDER.to_string()));
        terms.push(("essentially different = sum / |G|".into(), fold.answer.to_string()));
        Ok(Answer { value: fold.answer, terms })
    }

    fn needs_postgres(&self) -> Option<&'static str> {
        None
    }

    fn needs_shared_files(&self) -> bool {
        false
    }
}

/// Counts a class's (or part's) fixed grids from its key.
struct FixedCountCounter;

impl CountKeys for FixedCountCounter {
    fn count_cancellable(&self, key: &str, cancel: &AtomicBool) -> Result<u128, CensusError> {
        ed::count_job_cancellable(key, cancel).map_err(|e| bad_key(key, e))?.ok_or(CensusError::Cancelled)
    }
}
