//! What a census is, for an engine that knows nothing of Sudoku: a list of
//! jobs (a text key a worker counts from alone, a group for auditing, an
//! exact weight), how to count one job, and how to fold the counts into the
//! exact answer and the named terms a person checks.
//!
//! Three kinds of count exist: the 9x9 count of Felgenhauer and Jarvis (jobs are a
//! class representative and a seed), the essentially different grids of
//! Russell and Jarvis (jobs are conjugacy classes of the rearrangement
//! group, or parts of one) and other box shapes: 2 x c (jobs are column-set
//! classes, or parts of one, counted by two bands) and 4 x 3 (jobs are
//! the 144,578 gangsters, counted by three bands). A fourth, `synthetic`,
//! counts nothing: made-up jobs for load testing the engine
//! ([`crate::synthetic`]). The formulas stay in their modules; this one
//! only gives them a common face. The store, the protocol and the worker see
//! nothing but this: a run is its census's text, parsed here, and every kind
//! travels the same path from job list to folded answer.
//!
//! ```
//! use census_math::census::Census;
//! let census: Census = "shape boxes=2x3".parse().unwrap();
//! let counter = census.job_counter();
//! let jobs = census.jobs().unwrap();
//! let counts: Vec<u128> = jobs.iter().map(|job| counter.count(&job.key).unwrap()).collect();
//! let answer = census.fold(&jobs, &counts).unwrap();
//! assert_eq!(answer.value.to_string(), "28200960");
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::sync::atomic::AtomicBool;

use num_bigint::BigUint;

mod folding;

pub use folding::Folding;

use crate::essentially_different as ed;
use crate::total::{factorize, kilfoil_estimate, n0_from_s, relative_error};
use crate::{Band, ClassTable, Counter, CounterKind, SEEDS, Seed, Stage, shapes, synthetic, three_bands};

/// A kind of exact count and its parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Census {
    /// All 9x9 grids, N0, from a class stage and a completion counter.
    Sudoku { stage: Stage, counter: CounterKind },
    /// 9x9 grids up to the 3,359,232 rearrangements and relabelling.
    EssentiallyDifferent,
    /// Grids with boxes of `rows` x `cols` (side rows x cols): 2 x c for
    /// c = 2..=6 (two bands, [`shapes`]) and 4 x 3 (three bands,
    /// [`three_bands`]). A transposed shape reads as the same census.
    /// `gangsters`: only that slice of a three-band shape's jobs (to try a
    /// cluster, or to spot-check classes against published counts): its
    /// answer is the slice's part of the sum, not the number of grids.
    Shape { rows: usize, cols: usize, gangsters: Option<Gangsters> },
    /// Not a count of anything: `jobs` made-up jobs whose counts are a hash
    /// of their number and `salt`, checked in O(1), for load testing the
    /// engine (`census simulate`); see [`synthetic`]. `heavy`: every
    /// K-th job costs [`synthetic::HEAVY_JOB_COST`] ([`Census::job_cost`]),
    /// to test progress weighted by cost; all cost 1 without it.
    Synthetic { jobs: u64, salt: u64, heavy: Option<u64> },
    /// 2 x c grids by the layer recurrence, as stages of jobs over files
    /// ([`shapes::layer_jobs`]): map and reduce jobs build each layer of
    /// partial bands in `parts` parts from `shards` shards of the layer
    /// before; then one job a column-set class reads its F from the last
    /// layer. Map and reduce jobs count nothing: their count is the digest
    /// of the files they wrote, which the next stage reads.
    Layers { c: usize, shards: u32, parts: u32 },
}

/// The gangsters `start..end` (in the order of [`three_bands::gangsters`]),
/// a slice of a three-band census: `gangsters=START..END` in its text.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Gangsters {
    pub start: u32,
    pub end: u32,
}

/// How a run's results are checked: see [`Census::default_check`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CheckPolicy {
    /// Distinct worker identities that must report the same count of a job
    /// before it is accepted (the run's redundancy), 1 to 5.
    pub quorum: u32,
    /// The share of results the coordinator counts again, 0 to 1, each
    /// drawn at random as it arrives.
    pub recount_fraction: f64,
}

impl CheckPolicy {
    /// Every result recounted by the coordinator; one identity suffices.
    pub const RECOUNT_ALL: CheckPolicy = CheckPolicy { quorum: 1, recount_fraction: 1.0 };
    /// Two identities must agree; one result in a hundred recounted.
    pub const QUORUM_AND_SAMPLE: CheckPolicy = CheckPolicy { quorum: 2, recount_fraction: 0.01 };
}

/// One job as an engine stores it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobSpec {
    /// All a worker needs to count the job (with the census's kind).
    pub key: String,
    /// What the job's count is added into, for auditing: a class.
    pub group: String,
    /// How much the group's count weighs in the answer (a class size); 0
    /// for a group whose count is no part of the answer (a layer job's
    /// digest).
    pub weight: u128,
}

/// The exact answer and the terms that lead to it, in reading order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answer {
    pub value: BigUint,
    pub terms: Vec<(String, String)>,
}

/// Why a census, a key or a set of results is refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CensusError {
    /// The kind or its parameters are not understood.
    BadCensus { text: String, reason: String },
    /// A job key is not one of this census's.
    BadKey { key: String, reason: String },
    /// The results cannot be folded: missing, repeated or foreign jobs,
    /// inconsistent weights, or a sum the formula refuses.
    BadResults(String),
    /// The count was stopped by its cancellation flag before it was done;
    /// nothing of it is kept.
    Cancelled,
}

impl fmt::Display for CensusError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CensusError::BadCensus { text, reason } => write!(f, "bad census {text:?}: {reason}"),
            CensusError::BadKey { key, reason } => write!(f, "bad job key {key:?}: {reason}"),
            CensusError::BadResults(reason) => write!(f, "the results cannot be folded: {reason}"),
            CensusError::Cancelled => write!(f, "the count was cancelled before it was done"),
        }
    }
}

impl std::error::Error for CensusError {}

impl fmt::Display for Census {
    /// The form [`Census::from_str`] reads back.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Census::Sudoku { stage, counter } => write!(f, "sudoku stage={} counter={}", stage.name(), counter),
            Census::EssentiallyDifferent => write!(f, "essentially-different"),
            Census::Shape { rows, cols, gangsters: None } => write!(f, "shape boxes={rows}x{cols}"),
            Census::Shape { rows, cols, gangsters: Some(Gangsters { start, end }) } => {
                write!(f, "shape boxes={rows}x{cols} gangsters={start}..{end}")
            }
            Census::Synthetic { jobs, salt, heavy: None } => write!(f, "synthetic jobs={jobs} salt={salt}"),
            Census::Synthetic { jobs, salt, heavy: Some(heavy) } => {
                write!(f, "synthetic jobs={jobs} salt={salt} heavy={heavy}")
            }
            Census::Layers { c, shards, parts } => write!(f, "layers boxes=2x{c} shards={shards} parts={parts}"),
        }
    }
}

impl FromStr for Census {
    type Err = CensusError;

    /// `sudoku [stage=S] [counter=C]`, `essentially-different`, or
    /// `shape boxes=RxC` with one side 2, or 4x3 (3x4); `3x3` is the sudoku
    /// count; `synthetic jobs=M [salt=S] [heavy=K]` is the load test's
    /// made-up census (every K-th job heavier, [`Census::job_cost`]);
    /// `layers boxes=2xC [shards=S] [parts=P]` is 2 x c by the layer
    /// recurrence (S and P default to 8).
    fn from_str(text: &str) -> Result<Census, CensusError> {
        let bad = |reason: String| CensusError::BadCensus { text: text.to_string(), reason };
        let mut words = text.split_whitespace();
        let kind = words.next().ok_or_else(|| bad("empty".into()))?;
        let mut parameters = BTreeMap::new();
        for word in words {
            let (name, value) = word.split_once('=').ok_or_else(|| bad(format!("{word:?} is not NAME=VALUE")))?;
            if parameters.insert(name, value).is_some() {
                return Err(bad(format!("{name} is given twice")));
            }
        }
        let mut take = |name: &str| parameters.remove(name);
        let census = match kind {
            "sudoku" => Census::Sudoku {
                stage: take("stage").map_or(Ok(Stage::Russell), str::parse).map_err(|e| bad(e.to_string()))?,
                counter: take("counter")
                    .map_or(Ok(CounterKind::ColumnSets), str::parse)
                    .map_err(|e| bad(e.to_string()))?,
            },
            "essentially-different" => Census::EssentiallyDifferent,
            "shape" => {
                let boxes = take("boxes").ok_or_else(|| bad("a shape needs boxes=RxC, e.g. boxes=2x4".into()))?;
                let (r, c) = boxes
                    .split_once('x')
                    .and_then(|(r, c)| Some((r.parse::<usize>().ok()?, c.parse::<usize>().ok()?)))
                    .ok_or_else(|| bad(format!("boxes={boxes} is not RxC")))?;
                match (r, c) {
                    (3, 3) => Census::Sudoku { stage: Stage::Russell, counter: CounterKind::ColumnSets },
                    // r x c and c x r boxes have the same grids (transpose).
                    (2, c) | (c, 2) if (shapes::MIN_C..=shapes::MAX_C).contains(&c) => {
                        Census::Shape { rows: 2, cols: c, gangsters: None }
                    }
                    (4, 3) | (3, 4) => {
                        let gangsters = take("gangsters")
                            .map(|range| parse_gangsters(range, three_bands::GANGSTERS_4X3).map_err(bad))
                            .transpose()?;
                        Census::Shape { rows: 4, cols: 3, gangsters }
                    }
                    _ => {
                        return Err(bad(format!(
                            "boxes={boxes}: the shapes are 2x2 to 2x6, their transposes, 3x3, and 4x3 (3x4)"
                        )));
                    }
                }
            }
            "synthetic" => {
                let number = |name: &str, value: &str| {
                    value.parse::<u64>().map_err(|_| bad(format!("{name}={value} is not a whole number")))
                };
                let jobs = take("jobs").ok_or_else(|| bad("a synthetic census needs jobs=M, e.g. jobs=1000".into()))?;
                let jobs = number("jobs", jobs)?;
                if !(1..=synthetic::MAX_JOBS).contains(&jobs) {
                    return Err(bad(format!("jobs={jobs}: a synthetic census has 1 to {} jobs", synthetic::MAX_JOBS)));
                }
                let salt = take("salt").map_or(Ok(0), |value| number("salt", value))?;
                let heavy = take("heavy").map(|value| number("heavy", value)).transpose()?;
                if heavy == Some(0) {
                    return Err(bad("heavy=0: every K-th job is heavy, K at least 1".into()));
                }
                Census::Synthetic { jobs, salt, heavy }
            }
            "layers" => {
                let boxes = take("boxes").ok_or_else(|| bad("layers needs boxes=2xC, e.g. boxes=2x5".into()))?;
                let c = match boxes.split_once('x').map(|(r, c)| (r.parse::<usize>(), c.parse::<usize>())) {
                    Some((Ok(2), Ok(c))) | Some((Ok(c), Ok(2))) if (shapes::MIN_C..=shapes::MAX_C).contains(&c) => c,
                    _ => return Err(bad(format!("boxes={boxes}: layers counts 2x2 to 2x6 (or their transposes)"))),
                };
                let mut number = |name: &str| {
                    take(name).map_or(Ok(DEFAULT_LAYER_SPLIT), |value| {
                        value.parse::<u32>().map_err(|_| bad(format!("{name}={value} is not a whole number")))
                    })
                };
                let (shards, parts) = (number("shards")?, number("parts")?);
                shapes::layer_jobs::LayerPlan::new(c, shards, parts).map_err(|e| bad(e.to_string()))?;
                Census::Layers { c, shards, parts }
            }
            other => {
                return Err(bad(format!(
                    "{other:?} is not a kind (sudoku, essentially-different, shape, layers; synthetic for load tests)"
                )));
            }
        };
        if let Some(name) = parameters.keys().next() {
            return Err(bad(format!("{kind} takes no {name}")));
        }
        Ok(census)
    }
}

/// `START..END`, a non-empty range of the `count` gangster numbers.
fn parse_gangsters(range: &str, count: usize) -> Result<Gangsters, String> {
    let (start, end) = range
        .split_once("..")
        .and_then(|(start, end)| Some((start.parse::<u32>().ok()?, end.parse::<u32>().ok()?)))
        .ok_or_else(|| format!("gangsters={range} is not START..END, e.g. gangsters=0..100"))?;
    if start >= end {
        return Err(format!("gangsters={range} is empty: START must be below END"));
    }
    if end as usize > count {
        return Err(format!("gangsters ..{end}: there are {count} gangsters"));
    }
    Ok(Gangsters { start, end })
}

/// Shards and parts of a layer census whose text does not give them.
pub const DEFAULT_LAYER_SPLIT: u32 = 8;

/// Russell and Jarvis (2006): the number of essentially different grids.
pub const PUBLISHED_ESSENTIALLY_DIFFERENT: u64 = 5_472_730_538;

impl Census {
    /// The published answer, where there is one: N0 (Felgenhauer and
    /// Jarvis), the essentially different grids (Russell and Jarvis), the
    /// 2 x c totals (docs/mathematics.md names their sources).
    pub fn published(&self) -> Option<BigUint> {
        match *self {
            Census::Sudoku { .. } => Some(n0_from_s(&BigUint::from(crate::total::PUBLISHED_S))),
            Census::EssentiallyDifferent => Some(BigUint::from(PUBLISHED_ESSENTIALLY_DIFFERENT)),
            Census::Shape { gangsters: Some(_), .. } => None,
            Census::Shape { rows: 2, cols: c, .. } | Census::Layers { c, .. } => {
                shapes::PUBLISHED_GRIDS.iter().find(|(side, _)| *side == c).and_then(|(_, grids)| grids.parse().ok())
            }
            Census::Shape { rows: 4, cols: 3, .. } => three_bands::PUBLISHED_4X3.parse().ok(),
            Census::Shape { .. } | Census::Synthetic { .. } => None,
        }
    }

    /// Whether this is the 9x9 count, N0 by the band method: the one census
    /// whose answer is shown as S, its factorization and N0 = 9! x 72^2 x S,
    /// and whose classes are band representatives with seeds. The page, the
    /// client and the coordinator ask this, never the text.
    ///
    /// ```
    /// use census_math::census::Census;
    /// let nine: Census = "sudoku stage=44 counter=banded".parse().unwrap();
    /// let boxes_3x3: Census = "shape boxes=3x3".parse().unwrap();
    /// let shape: Census = "shape boxes=2x3".parse().unwrap();
    /// assert!(nine.is_nine_by_nine() && boxes_3x3.is_nine_by_nine());
    /// assert!(!shape.is_nine_by_nine() && !Census::EssentiallyDifferent.is_nine_by_nine());
    /// ```
    pub fn is_nine_by_nine(&self) -> bool {
        matches!(self, Census::Sudoku { .. })
    }

    /// How many jobs, one after another in the job order, a worker's
    /// thread should count together: 4x3 gangsters next to each other
    /// share their first three stacks (runs of 403 on average), and a
    /// count of such a run reads each pair of table rows once for all of
    /// them ([`JobCounter::count_many`]): alone a gangster costs about 60
    /// core-seconds, in a run of 256 about 4 to 5 (BENCHMARKS.md). 256
    /// keeps a thread's run within half an hour. 1 for the other kinds.
    pub fn jobs_counted_together(&self) -> u32 {
        match self {
            Census::Shape { rows, .. } if *rows != 2 => 256,
            _ => 1,
        }
    }

    /// How long a worker may keep a lease of this census alive by
    /// heartbeats, when that must be longer than the coordinator's
    /// `--max-lease-lifetime` (an hour by default): a lease covers the
    /// whole batch a thread counts, and its lifetime bounds how long a
    /// worker that heartbeats but never reports can hold jobs. None: the
    /// jobs take seconds at most, the coordinator's limit serves.
    ///
    /// A 4 x 3 thread leases [`Census::jobs_counted_together`] gangsters,
    /// about 5 s each counted together and about 120 s more to fill the
    /// process's table (BENCHMARKS.md): under an hour here, so four hours
    /// leaves room for a slower or busier machine. A 2 x 6 job by search takes an hour
    /// (median; 2.9 h at most in a sample of 50): twelve hours.
    ///
    /// ```
    /// use census_math::census::Census;
    /// use std::time::Duration;
    /// let twelve: Census = "shape boxes=4x3".parse().unwrap();
    /// assert_eq!(twelve.longest_lease(), Some(Duration::from_secs(4 * 3600)));
    /// let nine: Census = "sudoku stage=44 counter=banded".parse().unwrap();
    /// assert_eq!(nine.longest_lease(), None);
    /// ```
    pub fn longest_lease(&self) -> Option<std::time::Duration> {
        const HOUR: u64 = 3600;
        match *self {
            Census::Shape { rows: 2, cols, .. } if cols >= 6 => Some(std::time::Duration::from_secs(12 * HOUR)),
            Census::Layers { c, .. } if c >= 6 => Some(std::time::Duration::from_secs(12 * HOUR)),
            Census::Shape { rows, .. } if rows != 2 => Some(std::time::Duration::from_secs(4 * HOUR)),
            _ => None,
        }
    }

    /// How the results of this census are checked when the operator does
    /// not say (`--redundancy`, `--validate-fraction`).
    ///
    /// A recount costs the coordinator what the count cost the worker, and
    /// the coordinator is one machine. Where a job takes microseconds to a
    /// few seconds (the 9x9 count, the essentially different grids, 2x2 to
    /// 2x5), it recounts every result: a wrong count is never stored. Where
    /// a job takes seconds to hours (three-band shapes such as 4x3, and
    /// 2x6, whose classes are searched), recounting everything would make
    /// the coordinator as big as the cluster, so the check moves to the
    /// workers: two distinct identities must report the same count (a
    /// disagreement is settled by a third), and the coordinator recounts
    /// one result in a hundred, drawn at random, to catch two identities
    /// that lie alike. The cluster then counts each job twice, which is
    /// the price of not trusting any one worker.
    ///
    /// ```
    /// use census_math::census::{Census, CheckPolicy};
    /// let nine: Census = "sudoku stage=44 counter=banded".parse().unwrap();
    /// assert_eq!(nine.default_check(), CheckPolicy { quorum: 1, recount_fraction: 1.0 });
    /// let twelve: Census = "shape boxes=4x3".parse().unwrap();
    /// assert_eq!(twelve.default_check(), CheckPolicy { quorum: 2, recount_fraction: 0.01 });
    /// ```
    pub fn default_check(&self) -> CheckPolicy {
        match *self {
            Census::Shape { rows: 2, cols, .. } if cols < 6 => CheckPolicy::RECOUNT_ALL,
            Census::Shape { .. } => CheckPolicy::QUORUM_AND_SAMPLE,
            // A recount would need the shared files; two identities that
            // write the same files report the same digest.
            Census::Layers { .. } => CheckPolicy { quorum: 2, recount_fraction: 0.0 },
            Census::Sudoku { .. } | Census::EssentiallyDifferent | Census::Synthetic { .. } => CheckPolicy::RECOUNT_ALL,
        }
    }

    /// Every job of the census, in a fixed order.
    pub fn jobs(&self) -> Result<Vec<JobSpec>, CensusError> {
        match *self {
            Census::Sudoku { stage, .. } => {
                let table = ClassTable::build(stage);
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
            Census::EssentiallyDifferent => Ok(ed::jobs()
                .into_iter()
                .map(|job| JobSpec {
                    key: job.key,
                    group: format!("class {}", job.class),
                    weight: u128::from(job.weight),
                })
                .collect()),
            Census::Shape { rows: 2, cols, .. } => Ok(shapes::jobs(cols)
                .map_err(|e| CensusError::BadCensus { text: self.to_string(), reason: e.to_string() })?
                .into_iter()
                .map(|job| JobSpec { key: job.key, group: job.group, weight: job.weight })
                .collect()),
            Census::Shape { rows, gangsters, .. } => {
                let all = three_bands::jobs(rows)
                    .map_err(|e| CensusError::BadCensus { text: self.to_string(), reason: e.to_string() })?;
                let slice = match gangsters {
                    None => 0..all.len(),
                    Some(Gangsters { start, end }) if end as usize <= all.len() => start as usize..end as usize,
                    Some(Gangsters { end, .. }) => {
                        return Err(CensusError::BadCensus {
                            text: self.to_string(),
                            reason: format!("gangsters ..{end}: there are {} gangsters", all.len()),
                        });
                    }
                };
                Ok(all
                    .into_iter()
                    .take(slice.end)
                    .skip(slice.start)
                    .map(|job| JobSpec { key: job.key, group: job.group, weight: job.weight })
                    .collect())
            }
            Census::Synthetic { .. } => Ok(self.job_stream()?.collect()),
            Census::Layers { .. } => Ok(self
                .layer_plan()?
                .jobs()
                .map_err(|e| CensusError::BadCensus { text: self.to_string(), reason: e.to_string() })?
                .into_iter()
                .map(|job| JobSpec { key: job.key, group: job.group, weight: job.weight })
                .collect()),
        }
    }

    /// The plan of a layer census (its jobs, keys and stages).
    pub fn layer_plan(&self) -> Result<shapes::layer_jobs::LayerPlan, CensusError> {
        match *self {
            Census::Layers { c, shards, parts } => shapes::layer_jobs::LayerPlan::new(c, shards, parts)
                .map_err(|e| CensusError::BadCensus { text: self.to_string(), reason: e.to_string() }),
            _ => Err(CensusError::BadCensus { text: self.to_string(), reason: "not a layers census".into() }),
        }
    }

    /// How many stages the census's jobs fall into: a job of stage s may be
    /// leased only when every job of the stages before it is done. 1 for
    /// every kind but `layers` (map and reduce a step, then the classes).
    pub fn stage_count(&self) -> u32 {
        self.layer_plan().map_or(1, |plan| plan.stage_count())
    }

    /// The stage (0..[`Census::stage_count`]) of one of the census's jobs.
    ///
    /// ```
    /// use census_math::census::Census;
    /// let layers: Census = "layers boxes=2x3 shards=2 parts=3".parse().unwrap();
    /// assert_eq!(layers.stage_count(), 5);
    /// assert_eq!(layers.stage("2x3/map/1/0"), Ok(0));
    /// assert_eq!(layers.stage("2x3/reduce/2/2"), Ok(3));
    /// assert_eq!(layers.stage("2x3/class/038,038,038"), Ok(4));
    /// assert!(layers.stage("2x3/map/9/0").is_err());
    /// let shape: Census = "shape boxes=2x3".parse().unwrap();
    /// assert_eq!((shape.stage_count(), shape.stage("2x3:038,038,038")), (1, Ok(0)));
    /// ```
    pub fn stage(&self, key: &str) -> Result<u32, CensusError> {
        match self.layer_plan() {
            Ok(plan) => plan
                .parse(key)
                .map(|job| plan.stage(&job))
                .map_err(|e| CensusError::BadKey { key: key.to_string(), reason: e.to_string() }),
            Err(_) => Ok(0),
        }
    }

    /// The expected cost of one of the census's jobs (by its key),
    /// relative to its other jobs: what progress and its ETA weigh a job by
    /// (the store keeps it with the job). 1 for every job of a census
    /// whose jobs cost alike, or whose costs are not known: the 9x9 count,
    /// the shapes, 4 x 3, and `synthetic` (there every K-th job costs
    /// [`synthetic::HEAVY_JOB_COST`] with `heavy=K`). A `layers` job's cost
    /// is in emissions, from the published layer sizes (estimates where 2 x
    /// 6's are not published): [`shapes::layer_jobs::LayerPlan::job_cost`]
    /// says how. An essentially different job's is in CPU-milliseconds, from
    /// its class's measured time ([`ed::jobs::job_cost`]: its jobs take from
    /// microseconds to seconds). A key that is not one of the census's is
    /// refused where the cost reads it.
    ///
    /// ```
    /// use census_math::census::Census;
    /// let layers: Census = "layers boxes=2x5 shards=8 parts=8".parse().unwrap();
    /// let (map, reduce) = (layers.job_cost("2x5/map/3/0").unwrap(), layers.job_cost("2x5/reduce/3/0").unwrap());
    /// assert!(map > 70 * reduce && reduce > 400);
    /// let heavy: Census = "synthetic jobs=10 heavy=5".parse().unwrap();
    /// assert_eq!((heavy.job_cost("synthetic:3"), heavy.job_cost("synthetic:4")), (Ok(1), Ok(100)));
    /// assert!(heavy.job_cost("synthetic:10").is_err());
    /// let transposed = "ed1 rows=012345678 columns=012345678 transposed=yes part=0/8 depth=10";
    /// let ed = Census::EssentiallyDifferent;
    /// assert_eq!((ed.job_cost("ed1 identity"), ed.job_cost(transposed)), (Ok(25), Ok(3_156)));
    /// ```
    pub fn job_cost(&self, key: &str) -> Result<u64, CensusError> {
        let bad = |reason: String| CensusError::BadKey { key: key.to_string(), reason };
        match *self {
            Census::Layers { .. } => {
                let plan = self.layer_plan()?;
                plan.parse(key).map(|job| plan.job_cost(&job)).map_err(|e| bad(e.to_string()))
            }
            Census::Synthetic { jobs, heavy: Some(every), .. } => {
                synthetic::index_of(key, jobs).map(|index| synthetic::cost(index, Some(every))).map_err(bad)
            }
            Census::EssentiallyDifferent => ed::jobs::job_cost(key).map_err(|e| bad(e.to_string())),
            _ => Ok(1),
        }
    }

    /// Whether the census's jobs differ in cost ([`Census::job_cost`]), so
    /// that progress by cost says more than progress by jobs.
    pub fn knows_job_costs(&self) -> bool {
        matches!(self, Census::Layers { .. } | Census::Synthetic { heavy: Some(_), .. } | Census::EssentiallyDifferent)
    }

    /// Every job of the census, in the order of [`Census::jobs`], made as
    /// they are read: the synthetic census's (up to 10^7) are never all in
    /// memory; the other kinds list theirs first (at most a few hundred
    /// thousand, and the 9x9 stages' class tables are built anyway).
    pub fn job_stream(&self) -> Result<Box<dyn Iterator<Item = JobSpec> + Send>, CensusError> {
        match *self {
            Census::Synthetic { jobs, .. } => Ok(Box::new((0..jobs).map(|index| JobSpec {
                key: synthetic::key(index),
                group: synthetic::group(index),
                weight: 1,
            }))),
            _ => Ok(Box::new(self.jobs()?.into_iter())),
        }
    }

    /// Whether [`Census::job_stream`] makes the jobs as they are read (the
    /// synthetic census's, up to 10^7), rather than listing them first: a
    /// caller that folds runs of the others keeps their list.
    pub fn makes_jobs_as_read(&self) -> bool {
        matches!(self, Census::Synthetic { .. })
    }

    /// Names the counting code: results of different versions are never
    /// mixed in one run.
    pub fn counter_version(&self) -> String {
        match *self {
            Census::Sudoku { counter, .. } => counter.version().to_string(),
            Census::EssentiallyDifferent => format!("fixed-points/{}", ed::jobs::KEY_VERSION),
            Census::Shape { rows: 2, .. } => "band-f/1".to_string(),
            Census::Shape { .. } => "three-bands/1".to_string(),
            Census::Synthetic { .. } => "synthetic/1".to_string(),
            // 2: map and reduce jobs weigh 0 and runs are stage-gated (a run
            // made by layers/1 could not be counted through a store).
            Census::Layers { .. } => "layers/2".to_string(),
        }
    }

    /// How a class's count sum enters the answer: a class contributes
    /// weight x (count sum)^power. 1 for the 9x9 count (size x seed sum)
    /// and the essentially different grids (class size x fixed count), 2
    /// for 2 x c box shapes (weight x F(S)^2: a class's parts add up to
    /// F(S) first), 1 for 4 x 3 (class size x b x G, one job a class). The
    /// store's audit view shows each class's contribution so.
    pub fn class_power(&self) -> u32 {
        match self {
            Census::Shape { rows: 2, .. } | Census::Layers { .. } => 2,
            _ => 1,
        }
    }

    /// A counter that checks a worker's result: for the 9x9 count the
    /// column-sets counter (independent of `banded` and `enumerate`), for the
    /// other kinds their one counter.
    pub fn checking_counter(&self) -> JobCounter {
        match *self {
            Census::Sudoku { .. } => JobCounter::Sudoku(CounterKind::ColumnSets.build()),
            _ => self.job_counter(),
        }
    }

    /// Whether [`Census::checking_counter`] is another algorithm than the
    /// runs' own counter, so that a recount also catches a counter's
    /// mistake, not only a lying worker: a 9x9 run with `banded` or
    /// `enumerate`.
    ///
    /// ```
    /// use census_math::census::Census;
    /// let banded: Census = "sudoku stage=44 counter=banded".parse().unwrap();
    /// let column_sets: Census = "sudoku stage=44 counter=column-sets".parse().unwrap();
    /// assert!(banded.has_independent_check());
    /// assert!(!column_sets.has_independent_check());
    /// assert!(!Census::EssentiallyDifferent.has_independent_check());
    /// ```
    pub fn has_independent_check(&self) -> bool {
        matches!(*self, Census::Sudoku { counter, .. } if counter != CounterKind::ColumnSets)
    }

    /// What a group's count sum means to a reader, where it means more than
    /// the sum: for the 9x9 count, the completions of the class
    /// representative, 72 x the seed sum (the `class_totals` audit).
    pub fn group_completions(&self, count_sum: &BigUint) -> Option<BigUint> {
        match self {
            Census::Sudoku { .. } => Some(count_sum * 72u32),
            _ => None,
        }
    }

    /// A counter of this census's job keys, its tables built once.
    pub fn job_counter(&self) -> JobCounter {
        match *self {
            Census::Sudoku { counter, .. } => JobCounter::Sudoku(counter.build()),
            Census::EssentiallyDifferent => JobCounter::EssentiallyDifferent,
            Census::Shape { rows: 2, cols, .. } => JobCounter::Shape { c: cols },
            Census::Shape { rows, .. } => JobCounter::ThreeBands {
                r: rows,
                table: three_bands::SharedTable::new(rows).expect("three-band shapes have 2 to 4 rows"),
            },
            Census::Synthetic { jobs, salt, .. } => JobCounter::Synthetic { jobs, salt },
            Census::Layers { c, .. } => JobCounter::Layers { c },
        }
    }

    /// The answer from one count per job of [`Census::jobs`] (`counts[i]`
    /// is the count of `jobs[i]`). Refuses results that are not exactly
    /// those jobs, each once, so an answer is never folded from part of a
    /// census.
    pub fn fold(&self, jobs: &[JobSpec], counts: &[u128]) -> Result<Answer, CensusError> {
        self.fold_against(&self.jobs()?, jobs, counts)
    }

    /// [`Census::fold`] with the census's jobs given: `expected` must be
    /// what [`Census::jobs`] returns (a caller that folds often keeps them).
    pub fn fold_against(&self, expected: &[JobSpec], jobs: &[JobSpec], counts: &[u128]) -> Result<Answer, CensusError> {
        if jobs.len() != counts.len() {
            return Err(CensusError::BadResults(format!("{} counts for {} jobs", counts.len(), jobs.len())));
        }
        let mut given: Vec<&JobSpec> = jobs.iter().collect();
        given.sort_by(|a, b| a.key.cmp(&b.key));
        let mut wanted: Vec<&JobSpec> = expected.iter().collect();
        wanted.sort_by(|a, b| a.key.cmp(&b.key));
        if let Some(pair) = given.windows(2).find(|pair| pair[0].key == pair[1].key) {
            return Err(CensusError::BadResults(format!("job {:?} appears twice", pair[0].key)));
        }
        if given != wanted {
            let missing = wanted.iter().find(|job| !given.contains(job));
            let foreign = given.iter().find(|job| !wanted.contains(job));
            return Err(CensusError::BadResults(match (missing, foreign) {
                (_, Some(job)) => {
                    format!("job {:?} (group {:?}, weight {}) is not one of {self}", job.key, job.group, job.weight)
                }
                (Some(job), None) => format!("job {:?} has no count", job.key),
                (None, None) => "the jobs differ".into(),
            }));
        }
        self.fold_listed(jobs, counts)
    }

    /// The answer from one count per job of `jobs`, which are exactly the
    /// census's own (the caller has checked them).
    fn fold_listed(&self, jobs: &[JobSpec], counts: &[u128]) -> Result<Answer, CensusError> {
        match *self {
            Census::Sudoku { .. } | Census::Synthetic { .. } => {
                let weighted: BigUint =
                    jobs.iter().zip(counts).map(|(job, &count)| BigUint::from(job.weight) * count).sum();
                self.fold_weighted(weighted)
            }
            Census::EssentiallyDifferent => fold_essentially_different(jobs, counts),
            Census::Shape { rows, .. } if rows != 2 => {
                let three_band_jobs: Vec<three_bands::ThreeBandJob> = jobs
                    .iter()
                    .map(|job| three_bands::ThreeBandJob {
                        key: job.key.clone(),
                        group: job.group.clone(),
                        weight: job.weight,
                    })
                    .collect();
                let value = three_bands::fold(three_band_jobs.iter().zip(counts.iter().copied()));
                let mut terms = vec![
                    ("gangsters (classes of top-band column sets)".into(), jobs.len().to_string()),
                    (
                        "column-set tuples (sum of class sizes)".into(),
                        jobs.iter().map(|job| BigUint::from(job.weight)).sum::<BigUint>().to_string(),
                    ),
                    (format!("grids({rows} x 3) = sum of size x b x G"), value.to_string()),
                ];
                if let Census::Shape { gangsters: Some(Gangsters { start, end }), .. } = *self {
                    terms[2].0 =
                        format!("gangsters {start}..{end} (a slice, not the number of grids): sum of size x b x G");
                }
                Ok(Answer { value, terms })
            }
            Census::Layers { c, .. } => fold_layers(c, &self.layer_plan()?, jobs, counts),
            Census::Shape { cols: c, .. } => {
                let shape_jobs: Vec<shapes::ShapeJob> = jobs
                    .iter()
                    .map(|job| shapes::ShapeJob { key: job.key.clone(), group: job.group.clone(), weight: job.weight })
                    .collect();
                let value = shapes::fold(c, shape_jobs.iter().zip(counts.iter().copied()))
                    .map_err(|e| CensusError::BadResults(e.to_string()))?;
                let groups = jobs.iter().map(|job| &job.group).collect::<std::collections::BTreeSet<_>>().len();
                let terms = vec![
                    ("column-set classes".into(), groups.to_string()),
                    (format!("grids(2 x {c}) = sum of weight x F^2"), value.to_string()),
                ];
                Ok(Answer { value, terms })
            }
        }
    }

    /// The answer of the kinds that fold the sum of weight x count alone
    /// (the 9x9 count's S; the synthetic census's sum, its weights all 1),
    /// from that sum: what [`Folding`] keeps of them as their counts come.
    fn fold_weighted(&self, weighted: BigUint) -> Result<Answer, CensusError> {
        match *self {
            Census::Sudoku { .. } => {
                // S = sum of class size x seed count; N0 = 9! x 72^2 x S.
                let s = weighted;
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
            Census::Synthetic { jobs: listed, .. } => {
                let value = weighted;
                let terms = vec![
                    ("synthetic jobs (a load test: counts of nothing)".to_string(), listed.to_string()),
                    ("sum of their made-up counts".to_string(), value.to_string()),
                ];
                Ok(Answer { value, terms })
            }
            _ => Err(CensusError::BadResults(format!("{self} folds more than a weighted sum of its counts"))),
        }
    }
}

/// Counts job keys of one census; built once per worker (the 9x9
/// counters build tables).
pub enum JobCounter {
    Sudoku(Box<dyn Counter>),
    EssentiallyDifferent,
    Shape {
        c: usize,
    },
    /// r x 3 boxes by three bands, with the stack-pair table of the
    /// process ([`three_bands::SharedTable`]: one table a process, shared by its threads).
    ThreeBands {
        r: usize,
        table: three_bands::SharedTable,
    },
    /// The load test's made-up counts ([`synthetic::count_key`]).
    Synthetic {
        jobs: u64,
        salt: u64,
    },
    /// A layer census's jobs read and write files in a directory shared by
    /// the workers (the `census-layers` crate), which a counter of keys
    /// alone does not have: every count is refused with the reason.
    Layers {
        c: usize,
    },
}

impl JobCounter {
    /// The count of one job, from its key alone.
    pub fn count(&self, key: &str) -> Result<u128, CensusError> {
        static NEVER: AtomicBool = AtomicBool::new(false);
        self.count_cancellable(key, &NEVER)
    }

    /// The count of one job, or [`CensusError::Cancelled`] once `cancel` is
    /// set: every counter that can take a second or more reads the flag as
    /// it goes and stops well within a second; a partial count is never
    /// returned.
    pub fn count_cancellable(&self, key: &str, cancel: &AtomicBool) -> Result<u128, CensusError> {
        let bad = |reason: String| CensusError::BadKey { key: key.to_string(), reason };
        let count = match self {
            JobCounter::Sudoku(counter) => {
                let (band, seed) = key.split_once(' ').ok_or_else(|| bad("not BAND SEED".into()))?;
                let band: Band = band.parse().map_err(|e: crate::BandError| bad(e.to_string()))?;
                if !band.is_standard() {
                    return Err(bad("the band's B1 is not 123/456/789".into()));
                }
                let seed = parse_seed(seed).ok_or_else(|| bad(format!("{seed:?} is not a seed like 235/689")))?;
                counter.count_cancellable(&band, &seed, cancel).map(u128::from)
            }
            JobCounter::EssentiallyDifferent => {
                ed::count_job_cancellable(key, cancel).map_err(|e| bad(e.to_string()))?
            }
            JobCounter::Shape { c } => {
                if !key.starts_with(&format!("2x{c}:")) {
                    return Err(bad(format!("not a 2 x {c} key")));
                }
                shapes::count_job_cancellable(key, cancel).map_err(|e| bad(e.to_string()))?
            }
            JobCounter::ThreeBands { r, table } => {
                if !key.starts_with(&format!("{r}x3:")) {
                    return Err(bad(format!("not a {r} x 3 key")));
                }
                match table.count_job(key, cancel) {
                    Ok(count) => Some(count),
                    Err(three_bands::ThreeBandError::Cancelled) => None,
                    Err(e) => return Err(bad(e.to_string())),
                }
            }
            JobCounter::Synthetic { jobs, salt } => Some(synthetic::count_key(key, *jobs, *salt).map_err(bad)?),
            JobCounter::Layers { c } => {
                return Err(bad(format!(
                    "a 2x{c} layers job needs the layer data plane (census-layers: the shared directory of \
                     layer files and the accepted digests of the stage before), which this counter has not"
                )));
            }
        };
        count.ok_or(CensusError::Cancelled)
    }

    /// The counts of several jobs, each as [`JobCounter::count_cancellable`]
    /// would give it, counted together where that is cheaper (4x3
    /// gangsters that share their first three stacks read the same table
    /// rows: [`three_bands::SharedTable::count_many`]). A key that cannot be
    /// read fails alone; once `cancel` is set the jobs not yet counted are
    /// [`CensusError::Cancelled`].
    pub fn count_many(&self, keys: &[&str], cancel: &AtomicBool) -> Vec<Result<u128, CensusError>> {
        let JobCounter::ThreeBands { r, table } = self else {
            return keys.iter().map(|key| self.count_cancellable(key, cancel)).collect();
        };
        let mut counts: Vec<Result<u128, CensusError>> = Vec::with_capacity(keys.len());
        let mut readable = Vec::new();
        for key in keys {
            let bad = |reason: String| CensusError::BadKey { key: key.to_string(), reason };
            let pattern = match key.strip_prefix(&format!("{r}x3:")) {
                None => Err(bad(format!("not a {r} x 3 key"))),
                Some(_) => three_bands::parse_key(key).map_err(|e| bad(e.to_string())),
            };
            if let Ok(pattern) = &pattern {
                readable.push((counts.len(), pattern.clone()));
            }
            counts.push(pattern.map(|_| 0));
        }
        let patterns: Vec<three_bands::Pattern> = readable.iter().map(|(_, pattern)| pattern.clone()).collect();
        match table.count_many(&patterns, cancel) {
            Ok(together) => {
                for ((index, _), count) in readable.iter().zip(together) {
                    counts[*index] = Ok(count);
                }
            }
            Err(error) => {
                for (index, _) in &readable {
                    counts[*index] = Err(match &error {
                        three_bands::ThreeBandError::Cancelled => CensusError::Cancelled,
                        other => CensusError::BadKey { key: keys[*index].to_string(), reason: other.to_string() },
                    });
                }
            }
        }
        counts
    }
}

fn parse_seed(text: &str) -> Option<Seed> {
    SEEDS.iter().find(|seed| seed.to_string() == text).cloned()
}

/// The essentially different grids' answer from a count per job of its
/// jobs (the caller has checked them): sum of class size x A(g) over |G|.
fn fold_essentially_different(jobs: &[JobSpec], counts: &[u128]) -> Result<Answer, CensusError> {
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

/// A `layers` census's answer from a count per job of its jobs (the
/// caller has checked them): the class jobs fold as the shape census's
/// jobs; a map or reduce job's count is a digest, which adds nothing.
fn fold_layers(
    c: usize,
    plan: &shapes::layer_jobs::LayerPlan,
    jobs: &[JobSpec],
    counts: &[u128],
) -> Result<Answer, CensusError> {
    let mut shape_jobs = Vec::new();
    let mut class_counts = Vec::new();
    for (job, &count) in jobs.iter().zip(counts) {
        let parsed = plan.parse(&job.key).map_err(|e| CensusError::BadResults(format!("{}: {e}", job.key)))?;
        if matches!(parsed, shapes::layer_jobs::LayerJob::Class { .. }) {
            let sets = job.key.rsplit('/').next().unwrap_or_default();
            shape_jobs.push(shapes::ShapeJob {
                key: format!("2x{c}:{sets}"),
                group: job.group.clone(),
                weight: job.weight,
            });
            class_counts.push(count);
        }
    }
    let value =
        shapes::fold(c, shape_jobs.iter().zip(class_counts)).map_err(|e| CensusError::BadResults(e.to_string()))?;
    let terms = vec![
        ("map and reduce jobs (counts are digests of their files)".into(), {
            (jobs.len() - shape_jobs.len()).to_string()
        }),
        ("column-set classes".into(), shape_jobs.len().to_string()),
        (format!("grids(2 x {c}) = sum of weight x F^2"), value.to_string()),
    ];
    Ok(Answer { value, terms })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn count_all(census: Census) -> Answer {
        let counter = census.job_counter();
        let jobs = census.jobs().unwrap();
        let counts: Vec<u128> = jobs.iter().map(|job| counter.count(&job.key).unwrap()).collect();
        census.fold(&jobs, &counts).unwrap()
    }

    #[test]
    fn censuses_read_back_what_they_print() {
        for text in [
            "sudoku stage=russell counter=column-sets",
            "essentially-different",
            "shape boxes=2x5",
            "shape boxes=4x3",
            "shape boxes=4x3 gangsters=10..20",
            "layers boxes=2x5 shards=4 parts=16",
            "synthetic jobs=9 salt=3 heavy=4",
        ] {
            assert_eq!(text.parse::<Census>().unwrap().to_string(), text);
        }
        assert_eq!(
            "sudoku".parse::<Census>().unwrap(),
            Census::Sudoku { stage: Stage::Russell, counter: CounterKind::ColumnSets }
        );
        assert_eq!("shape boxes=4x2".parse::<Census>().unwrap(), Census::Shape { rows: 2, cols: 4, gangsters: None });
        assert_eq!("shape boxes=3x4".parse::<Census>().unwrap(), Census::Shape { rows: 4, cols: 3, gangsters: None });
        assert_eq!("shape boxes=3x4".parse::<Census>().unwrap().to_string(), "shape boxes=4x3");
        assert_eq!("shape boxes=3x3".parse::<Census>().unwrap(), "sudoku".parse().unwrap());
        assert_eq!("synthetic jobs=5".parse::<Census>().unwrap().to_string(), "synthetic jobs=5 salt=0");
        assert_eq!("layers boxes=6x2".parse::<Census>().unwrap(), Census::Layers { c: 6, shards: 8, parts: 8 });
        assert_eq!(
            "synthetic salt=7 jobs=5".parse::<Census>().unwrap(),
            Census::Synthetic { jobs: 5, salt: 7, heavy: None }
        );
        let heavy: Census = "synthetic jobs=5 heavy=2".parse().unwrap();
        assert_eq!(heavy, Census::Synthetic { jobs: 5, salt: 0, heavy: Some(2) });
        assert_eq!(heavy.to_string(), "synthetic jobs=5 salt=0 heavy=2");
        for (text, says) in [
            ("", "empty"),
            ("tetris", "not a kind"),
            ("shape", "boxes=RxC"),
            ("shape boxes=3x5", "2x2 to 2x6"),
            ("shape boxes=4x4", "4x3 (3x4)"),
            ("shape boxes=2x", "not RxC"),
            ("sudoku stage=45", "45"),
            ("sudoku stage=44 stage=71", "twice"),
            ("essentially-different boxes=2x2", "takes no boxes"),
            ("synthetic", "needs jobs=M"),
            ("synthetic jobs=0", "1 to 10000000"),
            ("synthetic jobs=x", "not a whole number"),
            ("synthetic jobs=5 salt=-1", "not a whole number"),
            ("synthetic jobs=5 boxes=2x2", "takes no boxes"),
            ("synthetic jobs=5 heavy=0", "heavy=0: every K-th job is heavy, K at least 1"),
            ("synthetic jobs=5 heavy=x", "heavy=x is not a whole number"),
            ("synthetic jobs=5 heavy=-2", "heavy=-2 is not a whole number"),
            ("synthetic jobs=5 heavy=1 heavy=2", "heavy is given twice"),
            ("shape boxes=2x4 gangsters=0..5", "takes no gangsters"),
            ("shape boxes=4x3 gangsters=5", "not START..END"),
            ("shape boxes=4x3 gangsters=5..5", "is empty"),
            ("shape boxes=4x3 gangsters=-1..5", "not START..END"),
            ("layers", "needs boxes=2xC"),
            ("layers boxes=3x3", "2x2 to 2x6"),
            ("layers boxes=2x7", "2x2 to 2x6"),
            ("layers boxes=2x4 shards=0", "1..=1048576 shards"),
            ("layers boxes=2x4 parts=x", "parts=x is not a whole number"),
            ("layers boxes=2x4 gangsters=0..5", "takes no gangsters"),
        ] {
            let error = text.parse::<Census>().unwrap_err().to_string();
            assert!(error.contains(says), "{text:?}: {error}");
        }
    }

    /// N0 through the common face, from the 440 jobs of the Russell stage.
    #[test]
    fn the_sudoku_census_folds_to_n0() {
        let census: Census = "sudoku".parse().unwrap();
        let answer = count_all(census);
        assert_eq!(answer.value.to_string(), "6670903752021072936960");
        assert_eq!(census.published().as_ref(), Some(&answer.value));
        assert!(answer.terms.contains(&("S".to_string(), "3546146300288".to_string())));
    }

    /// 2x2, 2x3 and 2x4 through the common face (published totals, see
    /// docs/mathematics.md), and their transposes by name.
    #[test]
    fn shape_censuses_fold_to_the_published_totals() {
        for (boxes, grids) in [("2x2", "288"), ("3x2", "28200960"), ("2x4", "29136487207403520")] {
            let census: Census = format!("shape boxes={boxes}").parse().unwrap();
            let answer = count_all(census);
            assert_eq!(answer.value.to_string(), grids, "{boxes}");
            assert_eq!(census.published(), Some(answer.value));
        }
    }

    /// 4 x 3 boxes: one job per gangster (144,578), weights the class sizes
    /// (adding up to the 34,650^4 top-band column-set tuples, which a fold
    /// of counts all 1 shows), class power 1, and the published total
    /// (Pettersen and Silver 2006). The jobs' real counts are b x G, tested
    /// in `three_bands` for r = 2 and 3.
    #[test]
    fn the_4x3_census_has_a_job_per_gangster() {
        let census: Census = "shape boxes=3x4".parse().unwrap();
        let jobs = census.jobs().unwrap();
        assert_eq!(jobs.len(), 144_578);
        assert_eq!(census.class_power(), 1);
        assert_eq!(census.counter_version(), "three-bands/1");
        let ones = vec![1u128; jobs.len()];
        let answer = census.fold(&jobs, &ones).unwrap();
        assert_eq!(answer.value, BigUint::from(34_650u128.pow(4)));
        assert_eq!(census.published().unwrap().to_string(), "81171437193104932746936103027318645818654720000");
        // A slice is those jobs, in order; its answer is their part of the
        // sum, and no published total is claimed for it.
        let slice: Census = "shape boxes=4x3 gangsters=100..103".parse().unwrap();
        let part = slice.jobs().unwrap();
        assert_eq!(part, jobs[100..103]);
        assert_eq!(slice.default_check(), census.default_check());
        assert_eq!(slice.counter_version(), census.counter_version());
        assert_eq!(slice.published(), None);
        let answer = slice.fold(&part, &[1, 1, 1]).unwrap();
        assert_eq!(answer.value, part.iter().map(|job| BigUint::from(job.weight)).sum::<BigUint>());
        assert!(answer.terms.iter().any(|(name, _)| name.contains("a slice, not the number of grids")), "{answer:?}");
        assert!(slice.fold(&jobs[100..102], &[1, 1]).is_err(), "a slice folds all its jobs");
        // A slice past the gangsters is refused as it is read, before their
        // list (seconds of work) is made (issue 46).
        let beyond = "shape boxes=4x3 gangsters=144000..144579".parse::<Census>().unwrap_err();
        assert!(beyond.to_string().contains("there are 144578 gangsters"), "{beyond}");
        assert!("shape boxes=3x4 gangsters=0..999999999".parse::<Census>().is_err());
        assert!("shape boxes=4x3 gangsters=144577..144578".parse::<Census>().is_ok());
    }

    /// A layer census: stages, the shape census's classes and weights, a
    /// check by two identities and no recount (the files are shared), a
    /// counter that refuses every key (the data plane counts them), and a
    /// fold of the class jobs' F to the published totals (2x3, 2x4; the F
    /// here by the shape census's search counter), whatever the digests.
    #[test]
    fn a_layers_census_folds_its_class_jobs_like_the_shape_census() {
        for (c, grids) in [(3, "28200960"), (4, "29136487207403520")] {
            let census: Census = format!("layers boxes=2x{c} shards=3 parts=2").parse().unwrap();
            let shape: Census = format!("shape boxes=2x{c}").parse().unwrap();
            let (jobs, shape_jobs) = (census.jobs().unwrap(), shape.jobs().unwrap());
            let classes: Vec<&JobSpec> = jobs.iter().filter(|job| job.key.contains("/class/")).collect();
            assert_eq!(classes.len(), shape_jobs.len());
            let counter = shape.job_counter();
            let mut counts = Vec::new();
            for (index, job) in jobs.iter().enumerate() {
                let stage = census.stage(&job.key).unwrap();
                if let Some(sets) = job.key.strip_prefix(&format!("2x{c}/class/")) {
                    let twin = shape_jobs.iter().find(|twin| twin.group == job.group).unwrap();
                    assert_eq!((twin.key.as_str(), twin.weight), (format!("2x{c}:{sets}").as_str(), job.weight));
                    assert_eq!(stage, census.stage_count() - 1);
                    counts.push(counter.count(&twin.key).unwrap());
                } else {
                    assert!(stage < census.stage_count() - 1);
                    counts.push(u128::MAX - index as u128);
                }
                let refused = census.job_counter().count(&job.key).unwrap_err().to_string();
                assert!(refused.contains("needs the layer data plane"), "{refused}");
            }
            let answer = census.fold(&jobs, &counts).unwrap();
            assert_eq!(answer.value.to_string(), grids);
            // The data jobs weigh 0: a store's weighted sum (weight x sum^2
            // over the groups, one job each) is the answer.
            let weighted: BigUint =
                jobs.iter().zip(&counts).map(|(job, &count)| BigUint::from(job.weight) * count * count).sum();
            assert_eq!(weighted, answer.value);
            assert_eq!(census.published(), Some(answer.value));
            assert_eq!(census.default_check(), CheckPolicy { quorum: 2, recount_fraction: 0.0 });
            assert_eq!((census.class_power(), census.counter_version().as_str()), (2, "layers/2"));
            assert!(census.fold(&jobs[1..], &counts[1..]).is_err(), "every job, the data jobs too");
        }
    }

    /// Only `layers`, the essentially different grids and a `synthetic
    /// heavy=K` tell jobs' costs apart; the other kinds cost 1 a job,
    /// whatever the key; a layers cost refuses a foreign key.
    #[test]
    fn job_costs_are_one_unless_the_census_knows_them() {
        for text in ["sudoku", "shape boxes=2x3", "synthetic jobs=4"] {
            let census: Census = text.parse().unwrap();
            assert!(!census.knows_job_costs(), "{text}");
            for job in census.jobs().unwrap().iter().take(50) {
                assert_eq!(census.job_cost(&job.key), Ok(1), "{text}: {}", job.key);
            }
        }
        // (Not listing 4 x 3's 144,578 jobs: its cost reads no key.)
        let twelve: Census = "shape boxes=4x3".parse().unwrap();
        assert_eq!((twelve.knows_job_costs(), twelve.job_cost("4x3:00.00")), (false, Ok(1)));
        let ed = Census::EssentiallyDifferent;
        assert!(ed.knows_job_costs());
        for job in ed.jobs().unwrap() {
            assert_eq!(ed.job_cost(&job.key).ok(), ed::jobs::job_cost(&job.key).ok(), "{}", job.key);
        }
        assert!(matches!(ed.job_cost("ed1 nothing"), Err(CensusError::BadKey { .. })));
        let heavy: Census = "synthetic jobs=12 heavy=4".parse().unwrap();
        assert!(heavy.knows_job_costs());
        let costs: Vec<u64> = heavy.jobs().unwrap().iter().map(|job| heavy.job_cost(&job.key).unwrap()).collect();
        assert_eq!(costs, [1, 1, 1, 100, 1, 1, 1, 100, 1, 1, 1, 100]);
        assert!(heavy.job_cost("2x2:003,003").unwrap_err().to_string().contains("not a synthetic key"));
        let layers: Census = "layers boxes=2x3 shards=2 parts=3".parse().unwrap();
        assert!(layers.knows_job_costs());
        let plan = layers.layer_plan().unwrap();
        for job in layers.jobs().unwrap() {
            assert_eq!(layers.job_cost(&job.key), Ok(plan.job_cost(&plan.parse(&job.key).unwrap())));
        }
        assert!(matches!(layers.job_cost("2x3/map/9/0"), Err(CensusError::BadKey { .. })));
    }

    /// The fold refuses anything but exactly the census's jobs, each once.
    #[test]
    fn partial_repeated_or_foreign_results_are_refused() {
        let census: Census = "shape boxes=2x3".parse().unwrap();
        let counter = census.job_counter();
        let jobs = census.jobs().unwrap();
        let counts: Vec<u128> = jobs.iter().map(|job| counter.count(&job.key).unwrap()).collect();
        let fold = |jobs: &[JobSpec], counts: &[u128]| census.fold(jobs, counts).unwrap_err().to_string();
        assert!(fold(&jobs[1..], &counts[1..]).contains("has no count"));
        let mut repeated = jobs.clone();
        repeated[1] = repeated[0].clone();
        assert!(fold(&repeated, &counts).contains("appears twice"));
        let mut heavier = jobs.clone();
        heavier[0].weight += 1;
        assert!(fold(&heavier, &counts).contains("is not one of shape boxes=2x3"));
        assert!(fold(&jobs, &counts[1..]).contains("counts for"));
    }

    /// The essentially different fold through the common face: a made-up
    /// identity count of k x |G| and zeros elsewhere gives k; a sum |G|
    /// does not divide is refused (the real counts are tested in
    /// tests/essentially_different.rs).
    #[test]
    fn the_essentially_different_fold_divides_by_the_group_order() {
        let census = Census::EssentiallyDifferent;
        let jobs = census.jobs().unwrap();
        assert_eq!(jobs.len(), 282);
        let identity = jobs.iter().position(|job| job.key == "ed1 identity").unwrap();
        let mut counts = vec![0u128; jobs.len()];
        counts[identity] = 7 * ed::GROUP_ORDER as u128;
        assert_eq!(census.fold(&jobs, &counts).unwrap().value, BigUint::from(7u32));
        counts[identity] += 1;
        assert!(census.fold(&jobs, &counts).unwrap_err().to_string().contains("not a multiple"));
    }

    /// Counting jobs together gives each its own count, a bad key fails
    /// alone, and a cancelled count gives no number (r = 2: the three
    /// gangsters of 6x6 grids with 2x3 boxes, whose counts fold to
    /// 28,200,960 in three_bands' tests).
    #[test]
    fn jobs_counted_together_count_as_alone() {
        let counter = JobCounter::ThreeBands { r: 2, table: three_bands::SharedTable::new(2).unwrap() };
        let jobs = three_bands::jobs(2).unwrap();
        let mut keys: Vec<&str> = jobs.iter().map(|job| job.key.as_str()).collect();
        keys.insert(1, "2x3:not a pattern");
        keys.push("4x3:00.00.11.11.22.22");
        let never = AtomicBool::new(false);
        let together = counter.count_many(&keys, &never);
        assert_eq!(together.len(), keys.len());
        for (key, count) in keys.iter().zip(&together) {
            match counter.count(key) {
                Ok(alone) => assert_eq!(count.as_ref().ok(), Some(&alone), "{key}"),
                Err(_) => assert!(matches!(count, Err(CensusError::BadKey { .. })), "{key}: {count:?}"),
            }
        }
        assert_eq!(together.iter().filter(|count| count.is_ok()).count(), jobs.len());
        let stopped = AtomicBool::new(true);
        assert!(counter.count_many(&keys[..1], &stopped).iter().all(|c| matches!(c, Err(CensusError::Cancelled))));
        assert_eq!(Census::Shape { rows: 4, cols: 3, gangsters: None }.jobs_counted_together(), 256);
        assert_eq!(Census::EssentiallyDifferent.jobs_counted_together(), 1);
    }

    #[test]
    fn keys_of_another_census_are_refused() {
        let sudoku = Census::Sudoku { stage: Stage::Russell, counter: CounterKind::ColumnSets }.job_counter();
        for key in ["", "123456789456789123789123456", "123456789456789123789123456 999/999", "2x2:003,003"] {
            assert!(matches!(sudoku.count(key), Err(CensusError::BadKey { .. })), "{key:?}");
        }
        assert_eq!(sudoku.count("123456789456789123789123456 235/689").map(|n| n > 0), Ok(true));
        let shape = Census::Shape { rows: 2, cols: 3, gangsters: None }.job_counter();
        assert!(shape.count("2x2:003,003").unwrap_err().to_string().contains("not a 2 x 3 key"));
        assert!(Census::EssentiallyDifferent.job_counter().count("2x2:003,003").is_err());
        let twelve = Census::Shape { rows: 4, cols: 3, gangsters: None }.job_counter();
        assert!(twelve.count("2x2:003,003").unwrap_err().to_string().contains("not a 4 x 3 key"));
        assert!(twelve.count("4x3:0000.0000").unwrap_err().to_string().contains("2 digits, not 12"));
    }

    /// The load test's census folds to the exact sum of its made-up counts,
    /// checks its keys, and shares none with a real census.
    #[test]
    fn the_synthetic_census_folds_to_the_sum_of_its_counts() {
        let census: Census = "synthetic jobs=25 salt=3".parse().unwrap();
        let jobs = census.jobs().unwrap();
        assert_eq!(jobs.len(), 25);
        assert_eq!(jobs.iter().map(|job| &job.group).collect::<std::collections::BTreeSet<_>>().len(), 3);
        let answer = count_all(census);
        assert_eq!(answer.value, synthetic::expected_answer(25, 3));
        assert_eq!(census.published(), None);
        assert_eq!(census.counter_version(), "synthetic/1");
        assert!(answer.terms[0].0.contains("load test"));
        let counter = census.job_counter();
        assert!(counter.count("synthetic:25").unwrap_err().to_string().contains("not below jobs=25"));
        assert!(counter.count("2x2:003,003").is_err());
        let shape = Census::Shape { rows: 2, cols: 3, gangsters: None }.job_counter();
        assert!(shape.count("synthetic:1").is_err());
        let mut wrong = jobs.clone();
        wrong[0].key = "synthetic:99".into();
        assert!(census.fold(&wrong, &vec![0; 25]).unwrap_err().to_string().contains("is not one of synthetic"));
    }
}
