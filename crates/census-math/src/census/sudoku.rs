//! `sudoku [stage=S] [counter=C]`: all 9x9 grids, N0, by the band method
//! of Felgenhauer and Jarvis (2006). A job is a class representative of
//! the stage and one of the 10 seeds; its count is the seed's completions
//! ([`crate::counter`]); the fold is S = sum of class size x seed count and
//! N0 = 9! x 72^2 x S ([`crate::total`]).

use std::sync::atomic::AtomicBool;
use std::time::Duration;

use num_bigint::BigUint;

use super::kind::{CountKeys, Counts, FoldInput, KindInfo, Parameters, bad_key};
use super::{Answer, Census, CensusError, CensusKind, CheckPolicy, JobCounter, JobSpec};
use crate::total::{PUBLISHED_S, factorize, kilfoil_estimate, n0_from_s, relative_error};
use crate::{Band, ClassTable, Counter, CounterKind, SEEDS, Seed, Stage};

pub(super) const KIND: KindInfo = KindInfo {
    name: "sudoku",
    grammar: "sudoku [stage=S] [counter=C]",
    help: "all 9x9 grids, N0, by the band method: a stage (44|russell by default, 71, 174, 416, 2051, 36288) and a \
           counter (column-sets by default, banded, enumerate), e.g. \"sudoku stage=71 counter=banded\"",
    published: "N0 = 6,670,903,752,021,072,936,960 (Felgenhauer and Jarvis 2006)",
    examples: &["sudoku stage=russell counter=column-sets", "sudoku stage=71 counter=banded", "sudoku"],
    parse,
};

/// The 9x9 count of a class stage by a completion counter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Sudoku {
    pub stage: Stage,
    pub counter: CounterKind,
}

fn parse(parameters: &mut Parameters<'_>) -> Result<Census, String> {
    let stage = parameters.take("stage").map_or(Ok(Stage::Russell), str::parse).map_err(|e| e.to_string())?;
    let counter =
        parameters.take("counter").map_or(Ok(CounterKind::ColumnSets), str::parse).map_err(|e| e.to_string())?;
    Ok(Census::sudoku(stage, counter))
}

impl Census {
    /// The 9x9 count of `stage` by `counter`: what `--stage` and
    /// `--counter` (and a request's stage and counter) name.
    pub fn sudoku(stage: Stage, counter: CounterKind) -> Census {
        Census::from(Sudoku { stage, counter })
    }

    /// Whether this is the 9x9 count, N0 by the band method: the one census
    /// whose answer is shown as S, its factorization and N0 = 9! x 72^2 x S,
    /// and whose classes are band representatives with seeds. The page, the
    /// client and the coordinator ask this, never the text.
    ///
    /// ```
    /// use census_math::census::{Census, EssentiallyDifferent};
    /// let nine: Census = "sudoku stage=44 counter=banded".parse().unwrap();
    /// let boxes_3x3: Census = "shape boxes=3x3".parse().unwrap();
    /// let shape: Census = "shape boxes=2x3".parse().unwrap();
    /// assert!(nine.is_nine_by_nine() && boxes_3x3.is_nine_by_nine());
    /// assert!(!shape.is_nine_by_nine() && !Census::from(EssentiallyDifferent).is_nine_by_nine());
    /// ```
    pub fn is_nine_by_nine(&self) -> bool {
        self.as_kind::<Sudoku>().is_some()
    }
}

impl std::fmt::Display for Sudoku {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "sudoku stage={} counter={}", self.stage.name(), self.counter)
    }
}

impl CensusKind for Sudoku {
    fn check(&self) -> Result<(), String> {
        Ok(())
    }

    fn published(&self) -> Option<BigUint> {
        Some(n0_from_s(&BigUint::from(PUBLISHED_S)))
    }

    fn jobs(&self) -> Result<Vec<JobSpec>, CensusError> {
        let table = ClassTable::build(self.stage);
        let mut jobs = Vec::with_capacity(table.classes().len() * SEEDS.len());
        for class in table.classes() {
            for seed in &SEEDS {
                // The group is the class's representative, which the
                // 9x9 audit (`class_totals`) shows.
                jobs.push(JobSpec {
                    key: format!("{} {seed}", class.representative),
                    group: class.representative.to_string(),
                    weight: u128::from(class.size),
                });
            }
        }
        Ok(jobs)
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

    fn job_cost(&self, _key: &str) -> Result<u64, CensusError> {
        Ok(1)
    }

    fn knows_job_costs(&self) -> bool {
        false
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
        self.counter.version().to_string()
    }

    fn job_counter(&self) -> JobCounter {
        JobCounter::new(SeedCounter(self.counter.build()))
    }

    /// The column-sets counter, independent of `banded` and `enumerate`.
    fn checking_counter(&self) -> JobCounter {
        JobCounter::new(SeedCounter(CounterKind::ColumnSets.build()))
    }

    fn has_independent_check(&self) -> bool {
        self.counter != CounterKind::ColumnSets
    }

    /// A class contributes size x seed sum.
    fn class_power(&self) -> u32 {
        1
    }

    /// The completions of the class representative, 72 x the seed sum.
    fn group_completions(&self, count_sum: &BigUint) -> Option<BigUint> {
        Some(count_sum * 72u32)
    }

    fn fold_input(&self) -> FoldInput {
        FoldInput::WeightedSum
    }

    fn answer(&self, counts: Counts<'_>) -> Result<Answer, CensusError> {
        // S = sum of class size x seed count; N0 = 9! x 72^2 x S.
        let s = counts.weighted_sum();
        let n0 = n0_from_s(&s);
        let kilfoil = kilfoil_estimate();
        let terms = vec![
            ("S".to_string(), s.to_string()),
            ("S factorized".to_string(), factorize(&s).to_string()),
            ("N0 = 9! x 72^2 x S".to_string(), n0.to_string()),
            (
                "Kilfoil's estimate".to_string(),
                format!("{kilfoil:.4e} ({:+.3}% from N0)", 100.0 * relative_error(kilfoil, &n0)),
            ),
        ];
        Ok(Answer { value: n0, terms })
    }

    fn needs_postgres(&self) -> Option<&'static str> {
        None
    }

    fn needs_shared_files(&self) -> bool {
        false
    }
}

/// Counts the completions of a key `BAND SEED` with one of the three
/// completion counters.
struct SeedCounter(Box<dyn Counter>);

impl CountKeys for SeedCounter {
    fn count_cancellable(&self, key: &str, cancel: &AtomicBool) -> Result<u128, CensusError> {
        let (band, seed) = key.split_once(' ').ok_or_else(|| bad_key(key, "not BAND SEED"))?;
        let band: Band = band.parse().map_err(|e: crate::BandError| bad_key(key, e))?;
        if !band.is_standard() {
            return Err(bad_key(key, "the band's B1 is not 123/456/789"));
        }
        let seed = parse_seed(seed).ok_or_else(|| bad_key(key, format!("{seed:?} is not a seed like 235/689")))?;
        self.0.count_cancellable(&band, &seed, cancel).map(u128::from).ok_or(CensusError::Cancelled)
    }
}

fn parse_seed(text: &str) -> Option<Seed> {
    SEEDS.iter().find(|seed| seed.to_string() == text).cloned()
}
