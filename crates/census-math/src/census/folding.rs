//! A census's fold of its jobs' counts as they come, one job at a time, in
//! the order of its job list: what folds a run of 10^7 jobs without its job
//! list, or its counts, in memory.
//!
//! Each job given is compared with the census's next one (its key, group
//! and weight), so, as with [`Census::fold`], only exactly the census's own
//! jobs, each once, give an answer; here they must also come in the order
//! of [`Census::jobs`]. What is kept is what the kind's fold needs: the sum
//! of weight x count for the 9x9 count and the synthetic census, every job
//! and count for the others (whose lists are a few hundred thousand jobs at
//! most, and whose folds read them whole).
//!
//! ```
//! use census_math::census::Census;
//! let census: Census = "synthetic jobs=3".parse().unwrap();
//! let jobs = census.jobs().unwrap();
//! let counts = [5, 7, 11];
//! let mut folding = census.folding(census.job_stream().unwrap());
//! for (job, &count) in jobs.iter().zip(&counts) {
//!     folding.add(&job.key, &job.group, job.weight, count).unwrap();
//! }
//! assert_eq!(folding.finish().unwrap(), census.fold(&jobs, &counts).unwrap());
//! // Out of order, or short of a job, is refused.
//! let mut folding = census.folding(census.job_stream().unwrap());
//! assert!(folding.add(&jobs[1].key, &jobs[1].group, 1, 7).is_err());
//! let mut folding = census.folding(census.job_stream().unwrap());
//! folding.add(&jobs[0].key, &jobs[0].group, 1, 5).unwrap();
//! assert!(folding.finish().is_err());
//! ```

use num_bigint::BigUint;

use super::{Answer, Census, CensusError, Counts, FoldInput, JobSpec};

/// The fold of a census in progress: see the module's documentation.
pub struct Folding {
    census: Census,
    /// The census's jobs not yet given, in order.
    expected: Box<dyn Iterator<Item = JobSpec> + Send>,
    sums: Sums,
}

/// What a fold keeps of the jobs given so far.
enum Sums {
    /// The sum of weight x count, all a kind's fold reads where it says so
    /// ([`FoldInput::WeightedSum`]: the 9x9 count's S, the synthetic
    /// census's sum).
    Weighted(BigUint),
    /// Every job and its count, for the kinds whose folds read them whole.
    Listed { jobs: Vec<JobSpec>, counts: Vec<u128> },
}

impl Census {
    /// A fold of this census's counts given one job at a time
    /// ([`Folding::add`]), in the order of [`Census::jobs`]; `expected` is
    /// that list ([`Census::job_stream`], or a kept copy of
    /// [`Census::jobs`]).
    pub fn folding(&self, expected: Box<dyn Iterator<Item = JobSpec> + Send>) -> Folding {
        let sums = match self.kind().fold_input() {
            FoldInput::WeightedSum => Sums::Weighted(BigUint::default()),
            FoldInput::EveryJob => Sums::Listed { jobs: Vec::new(), counts: Vec::new() },
        };
        Folding { census: *self, expected, sums }
    }
}

impl Folding {
    /// Adds the count of the census's next job, which must be the job
    /// given (key, group and weight); anything else is refused, naming both.
    pub fn add(&mut self, key: &str, group: &str, weight: u128, count: u128) -> Result<(), CensusError> {
        let census = self.census;
        let Some(job) = self.expected.next() else {
            return Err(CensusError::BadResults(format!("job {key:?} is one more than the jobs of {census}")));
        };
        if job.key != key || job.group != group || job.weight != weight {
            return Err(CensusError::BadResults(format!(
                "job {key:?} (group {group:?}, weight {weight}) is not the next job of {census}, {:?} (group {:?}, \
                 weight {})",
                job.key, job.group, job.weight
            )));
        }
        match &mut self.sums {
            Sums::Weighted(sum) if weight == 1 => *sum += count,
            Sums::Weighted(sum) => *sum += BigUint::from(weight) * count,
            Sums::Listed { jobs, counts } => {
                jobs.push(job);
                counts.push(count);
            }
        }
        Ok(())
    }

    /// The answer, once every job of the census has its count; a job
    /// without one is refused, by name.
    pub fn finish(mut self) -> Result<Answer, CensusError> {
        if let Some(job) = self.expected.next() {
            return Err(CensusError::BadResults(format!("job {:?} has no count", job.key)));
        }
        match self.sums {
            Sums::Weighted(sum) => self.census.kind().answer(Counts::WeightedSum(sum)),
            Sums::Listed { jobs, counts } => self.census.fold_listed(&jobs, &counts),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Folds `counts` of the census's jobs one at a time.
    fn folded(census: Census, counts: &[u128]) -> Result<Answer, CensusError> {
        let jobs = census.jobs().unwrap();
        let mut folding = census.folding(census.job_stream().unwrap());
        for (job, &count) in jobs.iter().zip(counts) {
            folding.add(&job.key, &job.group, job.weight, count)?;
        }
        folding.finish()
    }

    #[test]
    fn the_fold_as_counts_come_is_the_fold_of_the_list() {
        for text in ["sudoku stage=russell counter=column-sets", "shape boxes=2x3", "synthetic jobs=25 salt=3"] {
            let census: Census = text.parse().unwrap();
            let jobs = census.jobs().unwrap();
            let counter = census.job_counter();
            let counts: Vec<u128> = jobs.iter().map(|job| counter.count(&job.key).unwrap()).collect();
            assert_eq!(folded(census, &counts).unwrap(), census.fold(&jobs, &counts).unwrap(), "{text}");
        }
        // The 9x9 count's published S, by the running sum.
        let russell: Census = "sudoku stage=russell counter=column-sets".parse().unwrap();
        let counter = russell.job_counter();
        let counts: Vec<u128> = russell.jobs().unwrap().iter().map(|job| counter.count(&job.key).unwrap()).collect();
        assert_eq!(Some(folded(russell, &counts).unwrap().value), russell.published());
    }

    #[test]
    fn a_job_out_of_order_reweighted_foreign_missing_or_extra_is_refused() {
        let census: Census = "synthetic jobs=4".parse().unwrap();
        let jobs = census.jobs().unwrap();
        let add = |folding: &mut Folding, job: &JobSpec| folding.add(&job.key, &job.group, job.weight, 1);
        let refused = |result: Result<(), CensusError>, says: &str| {
            let message = result.unwrap_err().to_string();
            assert!(message.contains(says), "{message}");
        };

        let mut folding = census.folding(census.job_stream().unwrap());
        refused(add(&mut folding, &jobs[1]), "not the next job");
        let mut folding = census.folding(census.job_stream().unwrap());
        refused(folding.add(&jobs[0].key, &jobs[0].group, 2, 1), "weight 2");
        let mut folding = census.folding(census.job_stream().unwrap());
        refused(folding.add("synthetic:0", "block 9", 1, 1), "block 9");
        let mut folding = census.folding(census.job_stream().unwrap());
        jobs[..3].iter().for_each(|job| add(&mut folding, job).unwrap());
        assert!(folding.finish().unwrap_err().to_string().contains("\"synthetic:3\" has no count"));
        let mut folding = census.folding(census.job_stream().unwrap());
        jobs.iter().for_each(|job| add(&mut folding, job).unwrap());
        refused(add(&mut folding, &jobs[0]), "one more than the jobs");
    }
}
