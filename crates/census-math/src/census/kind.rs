//! The face of one kind of census ([`CensusKind`]), what the registry
//! knows of a kind before it has parameters ([`KindInfo`]), and the pieces
//! a kind's module works with: its parameters as given ([`Parameters`]),
//! the counts its fold reads ([`Counts`]) and its counter ([`CountKeys`]).
//!
//! A kind's module is an adapter: the mathematics stays in its own modules
//! (`crate::shapes`, `crate::three_bands`, ...); the kind says how a census
//! of it lists its jobs, counts one, checks a result and folds the answer.
//! Every method below but two ([`CensusKind::job_stream`],
//! [`CountKeys::count_many`], whose defaults are right for any kind) has no
//! default, so a new kind decides each one.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use num_bigint::BigUint;

use super::{Answer, Census, CensusError, CheckPolicy, JobCounter, JobSpec};

/// What a census of one kind is to the engine: its jobs and their stages
/// and costs, how one is counted and a result checked, and how the counts
/// fold into the answer. Implemented by the kind's parameters (for example
/// [`super::Sudoku`]: a stage and a counter); [`Census`] holds one of them.
///
/// `Display` writes the census's text, which the kind's parser
/// ([`KindInfo`]) reads back as the same value.
pub trait CensusKind: fmt::Display + fmt::Debug + Send + Sync + 'static {
    /// Whether these parameters make a census this kind can count (the
    /// ranges a value built in code, not parsed, may miss), or why not.
    /// Every parsed census has passed it.
    fn check(&self) -> Result<(), String>;

    /// The published answer, where there is one.
    fn published(&self) -> Option<BigUint>;

    /// Every job, in a fixed order.
    fn jobs(&self) -> Result<Vec<JobSpec>, CensusError>;

    /// Every job in the order of [`CensusKind::jobs`], made as they are
    /// read where [`CensusKind::makes_jobs_as_read`]; by default, the list.
    fn job_stream(&self) -> Result<Box<dyn Iterator<Item = JobSpec> + Send>, CensusError> {
        Ok(Box::new(self.jobs()?.into_iter()))
    }

    /// Whether [`CensusKind::job_stream`] makes the jobs as they are read,
    /// rather than listing them first: a caller that folds runs of the
    /// others keeps their list.
    fn makes_jobs_as_read(&self) -> bool;

    /// How many stages the jobs fall into: a job of stage s may be leased
    /// only when every job of the stages before it is done.
    fn stage_count(&self) -> u32;

    /// The stage (0..[`CensusKind::stage_count`]) of one of its jobs.
    fn stage(&self, key: &str) -> Result<u32, CensusError>;

    /// The expected cost of one of its jobs, relative to its other jobs
    /// (1 for every job where they cost alike or their costs are unknown):
    /// what progress and its ETA weigh a job by. Called once a job as a run
    /// is made: it allocates nothing.
    fn job_cost(&self, key: &str) -> Result<u64, CensusError>;

    /// Whether its jobs differ in cost ([`CensusKind::job_cost`]).
    fn knows_job_costs(&self) -> bool;

    /// How many jobs, one after another in the job order, a worker's
    /// thread counts together ([`JobCounter::count_many`]).
    fn jobs_counted_together(&self) -> u32;

    /// How long a worker may keep a lease alive by heartbeats, when that
    /// must be longer than the coordinator's limit; `None`: the jobs take
    /// seconds at most.
    fn longest_lease(&self) -> Option<Duration>;

    /// How its results are checked when the operator does not say.
    fn default_check(&self) -> CheckPolicy;

    /// Names the counting code: results of different versions are never
    /// mixed in one run.
    fn counter_version(&self) -> String;

    /// A counter of its job keys, its tables built once.
    fn job_counter(&self) -> JobCounter;

    /// A counter that checks a worker's result.
    fn checking_counter(&self) -> JobCounter;

    /// Whether [`CensusKind::checking_counter`] is another algorithm than
    /// [`CensusKind::job_counter`], so that a recount also catches a
    /// counter's mistake.
    fn has_independent_check(&self) -> bool;

    /// How a group's count sum enters the answer: a group contributes
    /// weight x (count sum)^power. The store's audit view shows each
    /// group's contribution so. 1 or 2: the store's running fold (and the
    /// `runs.class_power` column's CHECK) knows no other power.
    fn class_power(&self) -> u32;

    /// What a group's count sum means to a reader, where it means more
    /// than the sum.
    fn group_completions(&self, count_sum: &BigUint) -> Option<BigUint>;

    /// What the fold reads of the counts: the sum of weight x count alone,
    /// or every job and its count.
    fn fold_input(&self) -> FoldInput;

    /// The answer and its terms from the counts of exactly its own jobs
    /// (checked by the caller), given as [`CensusKind::fold_input`] asks.
    fn answer(&self, counts: Counts<'_>) -> Result<Answer, CensusError>;

    /// Why only a Postgres store should hold a run of it (a census too big
    /// for one machine's SQLite file), if it should: the reason `census
    /// run` gives when it refuses an SQLite file.
    fn needs_postgres(&self) -> Option<&'static str>;

    /// Whether its jobs are counted from files in a directory its workers
    /// share (`census-layers`' `Plane`), not from their keys alone by
    /// [`CensusKind::job_counter`].
    fn needs_shared_files(&self) -> bool;
}

/// What the registry knows of a kind before it has parameters: its name,
/// its text's grammar, a line of help, the published answer it checks
/// against, examples, and its parser. One registry line a kind
/// (`census.rs`); [`super::kinds`] lists them.
#[derive(Debug)]
pub struct KindInfo {
    /// The first word of its text, e.g. `shape`.
    pub name: &'static str,
    /// Its text with its parameters, e.g. `shape boxes=RxC [gangsters=START..END]`.
    pub grammar: &'static str,
    /// What it counts and how its parameters read, in one line.
    pub help: &'static str,
    /// The published answer it is checked against, and its source.
    pub published: &'static str,
    /// Censuses of the kind, as text: each reads back as it prints.
    pub examples: &'static [&'static str],
    /// Reads the parameters (those it takes, leaving the rest) into a
    /// census (of this kind, or the one the text names: `shape boxes=3x3`
    /// is the 9x9 count), or says why not.
    pub(super) parse: fn(&mut Parameters<'_>) -> Result<Census, String>,
}

/// A census text's `NAME=VALUE` words, each name once; a kind's parser
/// takes the ones it knows, and any left over is refused.
pub struct Parameters<'a> {
    values: BTreeMap<&'a str, &'a str>,
}

impl<'a> Parameters<'a> {
    /// The parameters of `words`, or why they are not `NAME=VALUE` words
    /// with distinct names.
    pub(super) fn read(words: impl Iterator<Item = &'a str>) -> Result<Parameters<'a>, String> {
        let mut values = BTreeMap::new();
        for word in words {
            let (name, value) =
                word.split_once('=').ok_or_else(|| format!("{} is not NAME=VALUE", super::shown(word)))?;
            if values.insert(name, value).is_some() {
                return Err(format!("{name} is given twice"));
            }
        }
        Ok(Parameters { values })
    }

    /// The value of `name`, taken out.
    pub fn take(&mut self, name: &str) -> Option<&'a str> {
        self.values.remove(name)
    }

    /// The value of `name` as a whole number, taken out; `None` if absent.
    pub fn take_number<T: std::str::FromStr>(&mut self, name: &str) -> Result<Option<T>, String> {
        self.take(name)
            .map(|value| value.parse::<T>().map_err(|_| format!("{name}={value} is not a whole number")))
            .transpose()
    }

    /// The first name no parser took.
    pub(super) fn left_over(&self) -> Option<&'a str> {
        self.values.keys().next().copied()
    }
}

/// What a kind's fold reads: see [`CensusKind::fold_input`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FoldInput {
    /// The sum of weight x count over its jobs, all its answer depends on
    /// (a run of 10^7 jobs folds without their list).
    WeightedSum,
    /// Every job and its count.
    EveryJob,
}

/// The counts a kind's fold is given ([`CensusKind::answer`]).
pub enum Counts<'a> {
    /// The sum of weight x count over the census's jobs.
    WeightedSum(BigUint),
    /// Each of the census's jobs, once, and its count (`counts[i]` is
    /// `jobs[i]`'s).
    EveryJob { jobs: &'a [JobSpec], counts: &'a [u128] },
}

impl<'a> Counts<'a> {
    /// The sum of weight x count, however the counts came.
    pub fn weighted_sum(self) -> BigUint {
        match self {
            Counts::WeightedSum(sum) => sum,
            Counts::EveryJob { jobs, counts } => {
                jobs.iter().zip(counts).map(|(job, &count)| BigUint::from(job.weight) * count).sum()
            }
        }
    }

    /// Every job and its count; refused when only their weighted sum came
    /// (a census, `census`, whose fold reads more than that).
    pub fn every_job(self, census: &dyn fmt::Display) -> Result<(&'a [JobSpec], &'a [u128]), CensusError> {
        match self {
            Counts::EveryJob { jobs, counts } => Ok((jobs, counts)),
            Counts::WeightedSum(_) => {
                Err(CensusError::BadResults(format!("{census} folds more than a weighted sum of its counts")))
            }
        }
    }
}

/// Counts the job keys of one kind of census: what [`JobCounter`] holds.
pub trait CountKeys: Send + Sync {
    /// The count of one job, or [`CensusError::Cancelled`] once `cancel`
    /// is set: see [`JobCounter::count_cancellable`].
    fn count_cancellable(&self, key: &str, cancel: &AtomicBool) -> Result<u128, CensusError>;

    /// The counts of several jobs: see [`JobCounter::count_many`]. By
    /// default one at a time.
    fn count_many(&self, keys: &[&str], cancel: &AtomicBool) -> Vec<Result<u128, CensusError>> {
        keys.iter().map(|key| self.count_cancellable(key, cancel)).collect()
    }
}

/// A [`CensusError::BadKey`] of `key`, for a reason.
pub(super) fn bad_key(key: &str, reason: impl fmt::Display) -> CensusError {
    CensusError::BadKey { key: key.to_string(), reason: reason.to_string() }
}
