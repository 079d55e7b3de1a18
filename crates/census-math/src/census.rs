//! What a census is, for an engine that knows nothing of Sudoku: a list of
//! jobs (a text key a worker counts from alone, a group for auditing, an
//! exact weight), how to count one job, and how to fold the counts into the
//! exact answer and the named terms a person checks.
//!
//! Each kind of count is one module behind one trait, [`CensusKind`]: the
//! 9x9 count of Felgenhauer and Jarvis ([`sudoku`]: jobs are a class
//! representative and a seed), the essentially different grids of Russell
//! and Jarvis ([`essentially_different`]: jobs are conjugacy classes of the
//! rearrangement group, or parts of one), other box shapes ([`shape`]:
//! 2 x c by two bands, 4 x 3 by three), 2 x c by the layer recurrence over
//! shared files ([`layers`]), and `synthetic`, which counts nothing:
//! made-up jobs for load testing the engine ([`synthetic`]). The formulas
//! stay in their own modules; a kind's module only gives them the common
//! face. The registry below lists the kinds, one line each, and
//! [`kinds`] reads it: the help of every command that takes a census, and
//! the kinds table of the docs ([`kinds_table`]), come from it.
//!
//! A [`Census`] is a kind's parameters, parsed once from its text: the
//! store, the protocol and the worker see nothing but this, and every kind
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

use std::fmt;
use std::str::FromStr;
use std::sync::atomic::AtomicBool;

use num_bigint::BigUint;

mod folding;
mod kind;

pub use folding::Folding;
pub use kind::{CensusKind, CountKeys, Counts, FoldInput, KindInfo, Parameters};

/// The registry: one line a kind, `module::Type`, in the order the help
/// lists them. Each line declares the kind's module (whose `KIND` is its
/// [`KindInfo`] and whose `Type` implements [`CensusKind`]) and lets a
/// [`Census`] hold it.
macro_rules! registry {
    ($($module:ident::$kind:ident),* $(,)?) => {
        $(pub mod $module;)*
        $(pub use $module::$kind;)*

        /// The parameters of a census, of one of the registered kinds.
        #[derive(Clone, Copy, PartialEq, Eq, Hash)]
        enum Kind {
            $($kind($kind),)*
        }

        impl Kind {
            fn census_kind(&self) -> &dyn CensusKind {
                match self {
                    $(Kind::$kind(kind) => kind,)*
                }
            }

            fn as_any(&self) -> &dyn std::any::Any {
                match self {
                    $(Kind::$kind(kind) => kind,)*
                }
            }

            fn info(&self) -> &'static KindInfo {
                match self {
                    $(Kind::$kind(_) => &$module::KIND,)*
                }
            }
        }

        $(impl From<$kind> for Census {
            fn from(kind: $kind) -> Census {
                Census(Kind::$kind(kind))
            }
        })*

        static KINDS: &[&KindInfo] = &[$(&$module::KIND),*];
    };
}

registry! {
    sudoku::Sudoku,
    essentially_different::EssentiallyDifferent,
    shape::Shape,
    layers::Layers,
    synthetic::Synthetic,
}

/// Every kind of census, in the order the help lists them.
///
/// ```
/// let names: Vec<&str> = census_math::census::kinds().map(|kind| kind.name).collect();
/// assert_eq!(names, ["sudoku", "essentially-different", "shape", "layers", "synthetic"]);
/// ```
pub fn kinds() -> impl Iterator<Item = &'static KindInfo> {
    KINDS.iter().copied()
}

/// The kinds as a Markdown table (kind, text, what it counts, published
/// answer), for the docs and `census classes --kinds`.
pub fn kinds_table() -> String {
    // A `|` in a cell (`44|russell`) would end it.
    let cell = |text: &str| text.replace('|', "\\|");
    let mut table = String::from("| kind | text | what it counts | published answer |\n| --- | --- | --- | --- |\n");
    for kind in kinds() {
        let (name, grammar, help, published) =
            (cell(kind.name), cell(kind.grammar), cell(kind.help), cell(kind.published));
        table += &format!("| `{name}` | `{grammar}` | {help} | {published} |\n");
    }
    table
}

/// A census: one kind of exact count and its parameters, parsed from its
/// text (`"shape boxes=2x4"`) or made from a kind's parameters
/// (`Census::from(Shape { .. })`, checked by [`Census::new`]). What a
/// census does is its kind's ([`Census::kind`]); a caller that needs a
/// kind's own parameters asks for them by type ([`Census::as_kind`]).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Census(Kind);

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
            CensusError::BadCensus { text, reason } => write!(f, "bad census {}: {reason}", shown(text)),
            CensusError::BadKey { key, reason } => write!(f, "bad job key {}: {reason}", shown(key)),
            CensusError::BadResults(reason) => write!(f, "the results cannot be folded: {reason}"),
            CensusError::Cancelled => write!(f, "the count was cancelled before it was done"),
        }
    }
}

impl std::error::Error for CensusError {}

/// The longest census text read: the longest a kind's grammar makes is
/// well under 200 bytes.
pub const MAX_CENSUS_TEXT: usize = 1024;

/// `text` quoted as an error shows it: whole when short, else its start and
/// its length, so that a 100 KB value is not echoed back whole.
///
/// ```
/// use census_math::census::shown;
/// assert_eq!(shown("shape boxes=2x3"), r#""shape boxes=2x3""#);
/// assert_eq!(shown(&"x".repeat(100_000)), format!("\"{}\"... (100000 bytes)", "x".repeat(40)));
/// ```
pub fn shown(text: &str) -> String {
    const WHOLE: usize = 80;
    if text.len() <= WHOLE {
        return format!("{text:?}");
    }
    let start: String = text.chars().take(40).collect();
    format!("{start:?}... ({} bytes)", text.len())
}

impl fmt::Display for Census {
    /// The form [`Census::from_str`] reads back.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self.kind(), f)
    }
}

impl fmt::Debug for Census {
    /// The kind's parameters, e.g. `Shape { rows: 2, cols: 4, gangsters: None }`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.kind(), f)
    }
}

impl FromStr for Census {
    type Err = CensusError;

    /// A kind's name and its parameters, `NAME=VALUE` each, as the kind's
    /// grammar says ([`kinds`]): `sudoku [stage=S] [counter=C]`,
    /// `essentially-different`, `shape boxes=RxC` with one side 2, or 4x3
    /// (3x4; `3x3` is the sudoku count), `layers boxes=2xC [shards=S]
    /// [parts=P]`, `synthetic jobs=M [salt=S] [heavy=K]`.
    fn from_str(text: &str) -> Result<Census, CensusError> {
        let bad = |reason: String| CensusError::BadCensus { text: text.to_string(), reason };
        if text.len() > MAX_CENSUS_TEXT {
            return Err(bad(format!("a census text is at most {MAX_CENSUS_TEXT} bytes")));
        }
        let mut words = text.split_whitespace();
        let name = words.next().ok_or_else(|| bad("empty".into()))?;
        let mut parameters = Parameters::read(words).map_err(bad)?;
        let Some(kind) = kinds().find(|kind| kind.name == name) else {
            let names: Vec<&str> = kinds().map(|kind| kind.name).collect();
            return Err(bad(format!("{} is not a kind ({})", shown(name), names.join(", "))));
        };
        let census = (kind.parse)(&mut parameters).map_err(bad)?;
        if let Some(left) = parameters.left_over() {
            return Err(bad(format!("{name} takes no {left}")));
        }
        census.kind().check().map_err(bad)?;
        Ok(census)
    }
}

impl Census {
    /// The census of a kind's parameters made in code, checked as a parsed
    /// one is ([`CensusKind::check`]): a value out of range is refused with
    /// the census's text, as if it had been parsed.
    ///
    /// ```
    /// use census_math::census::{Census, Synthetic};
    /// let census = Census::new(Synthetic { jobs: 5, salt: 7, heavy: None }).unwrap();
    /// assert_eq!(census, "synthetic jobs=5 salt=7".parse().unwrap());
    /// let none = Census::new(Synthetic { jobs: 0, salt: 7, heavy: None }).unwrap_err();
    /// assert_eq!(none, "synthetic jobs=0 salt=7".parse::<Census>().unwrap_err());
    /// ```
    pub fn new(kind: impl Into<Census>) -> Result<Census, CensusError> {
        let census = kind.into();
        census.kind().check().map_err(|reason| CensusError::BadCensus { text: census.to_string(), reason })?;
        Ok(census)
    }

    /// What this census does: its kind's behaviour, with its parameters.
    pub fn kind(&self) -> &dyn CensusKind {
        self.0.census_kind()
    }

    /// Its kind's registry entry: name, grammar, help.
    pub fn info(&self) -> &'static KindInfo {
        self.0.info()
    }

    /// The parameters of its kind, if that is `K`: the typed way to a
    /// kind's own values (`census.as_kind::<Layers>()`).
    ///
    /// ```
    /// use census_math::census::{Census, Shape, Sudoku};
    /// let shape: Census = "shape boxes=4x2".parse().unwrap();
    /// assert_eq!(shape.as_kind::<Shape>().map(|shape| (shape.rows, shape.cols)), Some((2, 4)));
    /// assert!(shape.as_kind::<Sudoku>().is_none());
    /// ```
    pub fn as_kind<K: CensusKind>(&self) -> Option<&K> {
        self.0.as_any().downcast_ref::<K>()
    }

    /// The published answer, where there is one: N0 (Felgenhauer and
    /// Jarvis), the essentially different grids (Russell and Jarvis), the
    /// 2 x c and 4 x 3 totals (docs/mathematics.md names their sources).
    pub fn published(&self) -> Option<BigUint> {
        self.kind().published()
    }

    /// How many jobs, one after another in the job order, a worker's
    /// thread should count together ([`CensusKind::jobs_counted_together`]):
    /// 256 for 4 x 3 (gangsters next to each other share table rows), 1
    /// for the other kinds.
    pub fn jobs_counted_together(&self) -> u32 {
        self.kind().jobs_counted_together()
    }

    /// How long a worker may keep a lease of this census alive by
    /// heartbeats, when that must be longer than the coordinator's
    /// `--max-lease-lifetime` (an hour by default): a lease covers the
    /// whole batch a thread counts, and its lifetime bounds how long a
    /// worker that heartbeats but never reports can hold jobs. None: the
    /// jobs take seconds at most, the coordinator's limit serves.
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
        self.kind().longest_lease()
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
        self.kind().default_check()
    }

    /// Every job of the census, in a fixed order.
    pub fn jobs(&self) -> Result<Vec<JobSpec>, CensusError> {
        self.kind().jobs()
    }

    /// How many stages the census's jobs fall into: a job of stage s may be
    /// leased only when every job of the stages before it is done. 1 for
    /// every kind but `layers` (map and reduce a step, then the classes).
    pub fn stage_count(&self) -> u32 {
        self.kind().stage_count()
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
        self.kind().stage(key)
    }

    /// The expected cost of one of the census's jobs (by its key),
    /// relative to its other jobs: what progress and its ETA weigh a job by
    /// (the store keeps it with the job). 1 for every job of a census
    /// whose jobs cost alike, or whose costs are not known: the 9x9 count,
    /// the essentially different grids, the shapes, 4 x 3, and `synthetic`
    /// (there every K-th job costs [`crate::synthetic::HEAVY_JOB_COST`]
    /// with `heavy=K`). A `layers` job's cost is in emissions, from the
    /// published layer sizes (estimates where 2 x 6's are not published):
    /// [`crate::shapes::layer_jobs::LayerPlan::job_cost`] says how. A key
    /// that is not one of the census's is refused where the cost reads it.
    ///
    /// ```
    /// use census_math::census::{Census, EssentiallyDifferent};
    /// let layers: Census = "layers boxes=2x5 shards=8 parts=8".parse().unwrap();
    /// let (map, reduce) = (layers.job_cost("2x5/map/3/0").unwrap(), layers.job_cost("2x5/reduce/3/0").unwrap());
    /// assert!(map > 70 * reduce && reduce > 400);
    /// let heavy: Census = "synthetic jobs=10 heavy=5".parse().unwrap();
    /// assert_eq!((heavy.job_cost("synthetic:3"), heavy.job_cost("synthetic:4")), (Ok(1), Ok(100)));
    /// assert!(heavy.job_cost("synthetic:10").is_err());
    /// let transposed = "ed1 rows=012345678 columns=012345678 transposed=yes part=0/8 depth=10";
    /// let ed = Census::from(EssentiallyDifferent);
    /// assert_eq!((ed.job_cost("ed1 identity"), ed.job_cost(transposed)), (Ok(25), Ok(3_156)));
    /// ```
    pub fn job_cost(&self, key: &str) -> Result<u64, CensusError> {
        self.kind().job_cost(key)
    }

    /// Whether the census's jobs differ in cost ([`Census::job_cost`]), so
    /// that progress by cost says more than progress by jobs.
    pub fn knows_job_costs(&self) -> bool {
        self.kind().knows_job_costs()
    }

    /// Every job of the census, in the order of [`Census::jobs`], made as
    /// they are read: the synthetic census's (up to 10^7) are never all in
    /// memory; the other kinds list theirs first (at most a few hundred
    /// thousand, and the 9x9 stages' class tables are built anyway).
    pub fn job_stream(&self) -> Result<Box<dyn Iterator<Item = JobSpec> + Send>, CensusError> {
        self.kind().job_stream()
    }

    /// Whether [`Census::job_stream`] makes the jobs as they are read (the
    /// synthetic census's, up to 10^7), rather than listing them first: a
    /// caller that folds runs of the others keeps their list.
    pub fn makes_jobs_as_read(&self) -> bool {
        self.kind().makes_jobs_as_read()
    }

    /// Names the counting code: results of different versions are never
    /// mixed in one run.
    pub fn counter_version(&self) -> String {
        self.kind().counter_version()
    }

    /// How a class's count sum enters the answer: a class contributes
    /// weight x (count sum)^power. 1 for the 9x9 count (size x seed sum)
    /// and the essentially different grids (class size x fixed count), 2
    /// for 2 x c box shapes (weight x F(S)^2: a class's parts add up to
    /// F(S) first), 1 for 4 x 3 (class size x b x G, one job a class). The
    /// store's audit view shows each class's contribution so.
    pub fn class_power(&self) -> u32 {
        self.kind().class_power()
    }

    /// A counter that checks a worker's result: for the 9x9 count the
    /// column-sets counter (independent of `banded` and `enumerate`), for the
    /// other kinds their one counter.
    pub fn checking_counter(&self) -> JobCounter {
        self.kind().checking_counter()
    }

    /// Whether [`Census::checking_counter`] is another algorithm than the
    /// runs' own counter, so that a recount also catches a counter's
    /// mistake, not only a lying worker: a 9x9 run with `banded` or
    /// `enumerate`.
    ///
    /// ```
    /// use census_math::census::{Census, EssentiallyDifferent};
    /// let banded: Census = "sudoku stage=44 counter=banded".parse().unwrap();
    /// let column_sets: Census = "sudoku stage=44 counter=column-sets".parse().unwrap();
    /// assert!(banded.has_independent_check());
    /// assert!(!column_sets.has_independent_check());
    /// assert!(!Census::from(EssentiallyDifferent).has_independent_check());
    /// ```
    pub fn has_independent_check(&self) -> bool {
        self.kind().has_independent_check()
    }

    /// What a group's count sum means to a reader, where it means more than
    /// the sum: for the 9x9 count, the completions of the class
    /// representative, 72 x the seed sum (the `class_totals` audit).
    pub fn group_completions(&self, count_sum: &BigUint) -> Option<BigUint> {
        self.kind().group_completions(count_sum)
    }

    /// A counter of this census's job keys, its tables built once.
    pub fn job_counter(&self) -> JobCounter {
        self.kind().job_counter()
    }

    /// Why only a Postgres store should hold a run of this census, if it
    /// should: 2 x 6 boxes, 947,985 jobs of about an hour each. (SQLite
    /// holds any count exactly, so 4 x 3 boxes, 144,578 jobs, run on a
    /// laptop's file.)
    ///
    /// ```
    /// use census_math::census::Census;
    /// let big: Census = "shape boxes=2x6".parse().unwrap();
    /// assert!(big.needs_postgres().is_some_and(|why| why.contains("about a million")));
    /// let twelve: Census = "shape boxes=4x3".parse().unwrap();
    /// assert_eq!(twelve.needs_postgres(), None);
    /// ```
    pub fn needs_postgres(&self) -> Option<&'static str> {
        self.kind().needs_postgres()
    }

    /// Whether the census's jobs are counted from files in a directory its
    /// workers share (a `layers` census: `census-layers`' `Plane`), not by
    /// [`Census::job_counter`] from their keys alone.
    pub fn needs_shared_files(&self) -> bool {
        self.kind().needs_shared_files()
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
    /// census's own (the caller has checked them), given to the kind's fold
    /// as it asks ([`CensusKind::fold_input`]).
    fn fold_listed(&self, jobs: &[JobSpec], counts: &[u128]) -> Result<Answer, CensusError> {
        let every_job = Counts::EveryJob { jobs, counts };
        match self.kind().fold_input() {
            FoldInput::WeightedSum => self.kind().answer(Counts::WeightedSum(every_job.weighted_sum())),
            FoldInput::EveryJob => self.kind().answer(every_job),
        }
    }
}

/// Counts job keys of one census; built once per worker (the 9x9
/// counters build tables). Each kind's module has its counter
/// ([`CountKeys`]); this is the one face they show.
pub struct JobCounter(Box<dyn CountKeys>);

impl JobCounter {
    /// The counter of a kind's keys.
    pub fn new(counter: impl CountKeys + 'static) -> JobCounter {
        JobCounter(Box::new(counter))
    }

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
        self.0.count_cancellable(key, cancel)
    }

    /// The counts of several jobs, each as [`JobCounter::count_cancellable`]
    /// would give it, counted together where that is cheaper (4x3
    /// gangsters that share their first three stacks read the same table
    /// rows: [`crate::three_bands::SharedTable::count_many`]). A key that
    /// cannot be read fails alone; once `cancel` is set the jobs not yet
    /// counted are [`CensusError::Cancelled`].
    pub fn count_many(&self, keys: &[&str], cancel: &AtomicBool) -> Vec<Result<u128, CensusError>> {
        self.0.count_many(keys, cancel)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::essentially_different as ed;
    use crate::{CounterKind, Stage, synthetic, three_bands};

    fn count_all(census: Census) -> Answer {
        let counter = census.job_counter();
        let jobs = census.jobs().unwrap();
        let counts: Vec<u128> = jobs.iter().map(|job| counter.count(&job.key).unwrap()).collect();
        census.fold(&jobs, &counts).unwrap()
    }

    /// The registry: each kind's examples read back as they print, as the
    /// kind they name, and pass its check; each kind has a grammar that
    /// starts with its name, one line of help and a published answer (or
    /// says it has none); names are distinct.
    #[test]
    fn every_kind_reads_back_its_examples_and_has_a_help_line() {
        let mut names = std::collections::BTreeSet::new();
        for kind in kinds() {
            assert!(names.insert(kind.name), "{} is registered twice", kind.name);
            assert!(kind.grammar.split_whitespace().next() == Some(kind.name), "{}: {}", kind.name, kind.grammar);
            for line in [kind.help, kind.published] {
                assert!(!line.trim().is_empty() && !line.contains('\n'), "{}: {line:?}", kind.name);
            }
            assert!(!kind.examples.is_empty(), "{} gives no example", kind.name);
            for text in kind.examples {
                let census: Census = text.parse().unwrap_or_else(|e| panic!("{}: {e}", kind.name));
                assert_eq!(census.info().name, kind.name, "{text}");
                assert_eq!(census.to_string().parse::<Census>(), Ok(census), "{text}");
                assert_eq!(Census::new(census), Ok(census), "{text}");
                assert!(kinds_table().contains(&format!("| `{}` | `{}` |", kind.name, kind.grammar)));
            }
        }
        // A row a kind, each of four cells: a `|` inside a cell is escaped.
        let table = kinds_table();
        let rows: Vec<&str> = table.lines().skip(2).collect();
        assert_eq!(rows.len(), names.len());
        for row in rows {
            assert_eq!(row.replace("\\|", "").matches('|').count(), 5, "{row}");
        }
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
            Census::from(Sudoku { stage: Stage::Russell, counter: CounterKind::ColumnSets })
        );
        assert_eq!(
            "shape boxes=4x2".parse::<Census>().unwrap(),
            Census::from(Shape { rows: 2, cols: 4, gangsters: None })
        );
        assert_eq!(
            "shape boxes=3x4".parse::<Census>().unwrap(),
            Census::from(Shape { rows: 4, cols: 3, gangsters: None })
        );
        assert_eq!("shape boxes=3x4".parse::<Census>().unwrap().to_string(), "shape boxes=4x3");
        assert_eq!("shape boxes=3x3".parse::<Census>().unwrap(), "sudoku".parse().unwrap());
        assert_eq!("synthetic jobs=5".parse::<Census>().unwrap().to_string(), "synthetic jobs=5 salt=0");
        assert_eq!("layers boxes=6x2".parse::<Census>().unwrap(), Census::from(Layers { c: 6, shards: 8, parts: 8 }));
        assert_eq!(
            "synthetic salt=7 jobs=5".parse::<Census>().unwrap(),
            Census::from(Synthetic { jobs: 5, salt: 7, heavy: None })
        );
        let heavy: Census = "synthetic jobs=5 heavy=2".parse().unwrap();
        assert_eq!(heavy, Census::from(Synthetic { jobs: 5, salt: 0, heavy: Some(2) }));
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
            ("layers boxes=2x4 shards=0", "bad layer plan: shards=0: shards are 1..=1048576"),
            ("layers boxes=2x4 parts=70000", "bad layer plan: parts=70000: parts are 1..=65536"),
            ("x".repeat(2_000).as_str(), "(2000 bytes): a census text is at most 1024 bytes"),
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
        let ed = Census::from(EssentiallyDifferent);
        assert!(ed.knows_job_costs());
        for job in ed.jobs().unwrap() {
            assert_eq!(
                ed.job_cost(&job.key).ok(),
                crate::essentially_different::jobs::job_cost(&job.key).ok(),
                "{}",
                job.key
            );
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
        let census = Census::from(EssentiallyDifferent);
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
        let counter =
            JobCounter::new(shape::ThreeBandCounter { r: 2, table: three_bands::SharedTable::new(2).unwrap() });
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
        assert_eq!(Census::from(Shape { rows: 4, cols: 3, gangsters: None }).jobs_counted_together(), 256);
        assert_eq!(Census::from(EssentiallyDifferent).jobs_counted_together(), 1);
    }

    #[test]
    fn keys_of_another_census_are_refused() {
        let sudoku = Census::from(Sudoku { stage: Stage::Russell, counter: CounterKind::ColumnSets }).job_counter();
        for key in ["", "123456789456789123789123456", "123456789456789123789123456 999/999", "2x2:003,003"] {
            assert!(matches!(sudoku.count(key), Err(CensusError::BadKey { .. })), "{key:?}");
        }
        assert_eq!(sudoku.count("123456789456789123789123456 235/689").map(|n| n > 0), Ok(true));
        let shape = Census::from(Shape { rows: 2, cols: 3, gangsters: None }).job_counter();
        assert!(shape.count("2x2:003,003").unwrap_err().to_string().contains("not a 2 x 3 key"));
        assert!(Census::from(EssentiallyDifferent).job_counter().count("2x2:003,003").is_err());
        let twelve = Census::from(Shape { rows: 4, cols: 3, gangsters: None }).job_counter();
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
        let shape = Census::from(Shape { rows: 2, cols: 3, gangsters: None }).job_counter();
        assert!(shape.count("synthetic:1").is_err());
        let mut wrong = jobs.clone();
        wrong[0].key = "synthetic:99".into();
        assert!(census.fold(&wrong, &vec![0; 25]).unwrap_err().to_string().contains("is not one of synthetic"));
    }
}
