//! `shape boxes=RxC [gangsters=START..END]`: grids with boxes of another
//! shape. 2 x c (c = 2..=6) by two bands ([`crate::shapes`]): a job is a
//! column-set class, or a part of one, its count the band counter F, the
//! fold the sum of weight x F^2. 4 x 3 by three bands
//! ([`crate::three_bands`]): a job is a gangster (a class of top-band
//! column sets), its count b x G, the fold the sum of size x b x G. A
//! transposed shape is the same census; `3x3` is the 9x9 count
//! ([`super::sudoku`]).

use std::sync::atomic::AtomicBool;
use std::time::Duration;

use num_bigint::BigUint;

use super::kind::{CountKeys, Counts, FoldInput, KindInfo, Parameters, bad_key};
use super::{Answer, Census, CensusError, CensusKind, CheckPolicy, JobCounter, JobSpec};
use crate::{CounterKind, Stage, shapes, three_bands};

pub(super) const KIND: KindInfo = KindInfo {
    name: "shape",
    grammar: "shape boxes=RxC [gangsters=START..END]",
    help: "grids of another box shape: the shapes are 2x2 to 2x6, their transposes, 3x3, and 4x3 (3x4); \"shape \
           boxes=3x3\" is the 9x9 count itself, run as \"sudoku stage=russell counter=column-sets\"; 2x6 needs \
           Postgres; gangsters=START..END counts only those jobs of 4x3 (a slice, not the number of grids)",
    published: "2x2 to 2x6 (docs/mathematics.md names the sources) and 4x3 (Pettersen and Silver 2006); none for \
                a slice",
    examples: &["shape boxes=2x5", "shape boxes=4x2", "shape boxes=4x3", "shape boxes=4x3 gangsters=10..20"],
    parse,
};

/// Grids with boxes of `rows` x `cols` (side rows x cols): 2 x c for
/// c = 2..=6 (two bands, [`shapes`]) and 4 x 3 (three bands,
/// [`three_bands`]). A transposed shape reads as the same census.
/// `gangsters`: only that slice of a three-band shape's jobs (to try a
/// cluster, or to spot-check classes against published counts): its
/// answer is the slice's part of the sum, not the number of grids.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Shape {
    pub rows: usize,
    pub cols: usize,
    pub gangsters: Option<Gangsters>,
}

/// The gangsters `start..end` (in the order of [`three_bands::gangsters`]),
/// a slice of a three-band census: `gangsters=START..END` in its text.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Gangsters {
    pub start: u32,
    pub end: u32,
}

/// The shapes there are, as every refusal names them.
const SHAPES: &str = "the shapes are 2x2 to 2x6, their transposes, 3x3, and 4x3 (3x4)";

fn parse(parameters: &mut Parameters<'_>) -> Result<Census, String> {
    let boxes = parameters.take("boxes").ok_or("a shape needs boxes=RxC, e.g. boxes=2x4")?;
    let (r, c) = boxes
        .split_once('x')
        .and_then(|(r, c)| Some((r.parse::<usize>().ok()?, c.parse::<usize>().ok()?)))
        .ok_or_else(|| format!("boxes={boxes} is not RxC"))?;
    match (r, c) {
        (3, 3) => Ok(Census::sudoku(Stage::Russell, CounterKind::ColumnSets)),
        // r x c and c x r boxes have the same grids (transpose).
        (2, c) | (c, 2) if (shapes::MIN_C..=shapes::MAX_C).contains(&c) => {
            Ok(Census::from(Shape { rows: 2, cols: c, gangsters: None }))
        }
        (4, 3) | (3, 4) => {
            let gangsters = parameters
                .take("gangsters")
                .map(|range| parse_gangsters(range, three_bands::GANGSTERS_4X3))
                .transpose()?;
            Ok(Census::from(Shape { rows: 4, cols: 3, gangsters }))
        }
        _ => Err(format!("boxes={boxes}: {SHAPES}")),
    }
}

/// `START..END`, a range of the `count` gangster numbers: one past them is
/// refused as it is read, before their list (seconds of work) is made.
fn parse_gangsters(range: &str, count: usize) -> Result<Gangsters, String> {
    let (start, end) = range
        .split_once("..")
        .and_then(|(start, end)| Some((start.parse::<u32>().ok()?, end.parse::<u32>().ok()?)))
        .ok_or_else(|| format!("gangsters={range} is not START..END, e.g. gangsters=0..100"))?;
    if end as usize > count {
        return Err(format!("gangsters ..{end}: there are {count} gangsters"));
    }
    Ok(Gangsters { start, end })
}

impl Shape {
    /// Whether the shape is counted by two bands (2 x c), not three.
    fn two_bands(&self) -> bool {
        self.rows == 2
    }

    fn bad_census(&self, reason: impl std::fmt::Display) -> CensusError {
        CensusError::BadCensus { text: self.to_string(), reason: reason.to_string() }
    }
}

impl std::fmt::Display for Shape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "shape boxes={}x{}", self.rows, self.cols)?;
        match self.gangsters {
            Some(Gangsters { start, end }) => write!(f, " gangsters={start}..{end}"),
            None => Ok(()),
        }
    }
}

impl CensusKind for Shape {
    fn check(&self) -> Result<(), String> {
        match (self.rows, self.cols, self.gangsters) {
            (2, c, None) if (shapes::MIN_C..=shapes::MAX_C).contains(&c) => Ok(()),
            (4, 3, None) => Ok(()),
            (4, 3, Some(Gangsters { start, end })) if start >= end => {
                Err(format!("gangsters={start}..{end} is empty: START must be below END"))
            }
            (4, 3, Some(_)) => Ok(()),
            (2, _, Some(_)) => Err("shape takes no gangsters but for 4x3".into()),
            (rows, cols, _) => Err(format!("boxes={rows}x{cols}: {SHAPES}")),
        }
    }

    fn published(&self) -> Option<BigUint> {
        match *self {
            Shape { gangsters: Some(_), .. } => None,
            Shape { rows: 2, cols: c, .. } => {
                shapes::PUBLISHED_GRIDS.iter().find(|(side, _)| *side == c).and_then(|(_, grids)| grids.parse().ok())
            }
            Shape { rows: 4, cols: 3, .. } => three_bands::PUBLISHED_4X3.parse().ok(),
            Shape { .. } => None,
        }
    }

    fn jobs(&self) -> Result<Vec<JobSpec>, CensusError> {
        if self.two_bands() {
            return Ok(shapes::jobs(self.cols)
                .map_err(|e| self.bad_census(e))?
                .into_iter()
                .map(|job| JobSpec { key: job.key, group: job.group, weight: job.weight })
                .collect());
        }
        let all = three_bands::jobs(self.rows).map_err(|e| self.bad_census(e))?;
        let slice = match self.gangsters {
            None => 0..all.len(),
            Some(Gangsters { start, end }) if end as usize <= all.len() => start as usize..end as usize,
            Some(Gangsters { end, .. }) => {
                return Err(self.bad_census(format!("gangsters ..{end}: there are {} gangsters", all.len())));
            }
        };
        Ok(all
            .into_iter()
            .take(slice.end)
            .skip(slice.start)
            .map(|job| JobSpec { key: job.key, group: job.group, weight: job.weight })
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

    fn job_cost(&self, _key: &str) -> Result<u64, CensusError> {
        Ok(1)
    }

    fn knows_job_costs(&self) -> bool {
        false
    }

    /// 4x3 gangsters next to each other share their first three stacks
    /// (runs of 403 on average), and a count of such a run reads each pair
    /// of table rows once for all of them ([`JobCounter::count_many`]): in
    /// a run of 256 a gangster costs about 1.3 CPU-seconds (BENCHMARKS.md,
    /// "The 4x3 count"). 256 keeps a thread's run within a quarter of an
    /// hour. 1 for 2 x c.
    fn jobs_counted_together(&self) -> u32 {
        if self.two_bands() { 1 } else { 256 }
    }

    /// A 4 x 3 thread leases [`CensusKind::jobs_counted_together`]
    /// gangsters, about 1.3 CPU-s each counted together and about 30 s more
    /// to fill the process's table (BENCHMARKS.md): 5 to 7 minutes here,
    /// so four hours leaves room for a much slower or busier machine. A 2 x 6 job
    /// by search takes an hour (median; 2.9 h at most in a sample of 50):
    /// twelve hours.
    fn longest_lease(&self) -> Option<Duration> {
        const HOUR: u64 = 3600;
        match (self.rows, self.cols) {
            (2, cols) if cols >= 6 => Some(Duration::from_secs(12 * HOUR)),
            (2, _) => None,
            _ => Some(Duration::from_secs(4 * HOUR)),
        }
    }

    /// 2x2 to 2x5 take microseconds to seconds a job: every result
    /// recounted. 4x3 and 2x6 take seconds to hours: two identities, and
    /// one result in a hundred recounted ([`super::Census::default_check`]).
    fn default_check(&self) -> CheckPolicy {
        match (self.rows, self.cols) {
            (2, cols) if cols < 6 => CheckPolicy::RECOUNT_ALL,
            _ => CheckPolicy::QUORUM_AND_SAMPLE,
        }
    }

    fn counter_version(&self) -> String {
        let version = if self.two_bands() { "band-f/1" } else { "three-bands/1" };
        version.to_string()
    }

    fn job_counter(&self) -> JobCounter {
        if self.two_bands() {
            return JobCounter::new(TwoBandCounter { c: self.cols });
        }
        JobCounter::new(ThreeBandCounter {
            r: self.rows,
            table: three_bands::SharedTable::new(self.rows).expect("three-band shapes have 2 to 4 rows"),
        })
    }

    /// Its one counter.
    fn checking_counter(&self) -> JobCounter {
        self.job_counter()
    }

    fn has_independent_check(&self) -> bool {
        false
    }

    /// 2 x c: a class contributes weight x F(S)^2 (its parts add up to F(S)
    /// first); 4 x 3: class size x b x G, one job a class.
    fn class_power(&self) -> u32 {
        if self.two_bands() { 2 } else { 1 }
    }

    fn group_completions(&self, _count_sum: &BigUint) -> Option<BigUint> {
        None
    }

    fn fold_input(&self) -> FoldInput {
        FoldInput::EveryJob
    }

    fn answer(&self, counts: Counts<'_>) -> Result<Answer, CensusError> {
        let (jobs, counts) = counts.every_job(self)?;
        if self.two_bands() { self.two_band_answer(jobs, counts) } else { Ok(self.three_band_answer(jobs, counts)) }
    }

    /// 2 x 6: 947,985 jobs of about an hour each, work for a cluster.
    fn needs_postgres(&self) -> Option<&'static str> {
        (self.rows == 2 && self.cols >= 6)
            .then_some("its jobs number about a million, of about an hour each, work for a cluster")
    }

    fn needs_shared_files(&self) -> bool {
        false
    }
}

impl Shape {
    fn two_band_answer(&self, jobs: &[JobSpec], counts: &[u128]) -> Result<Answer, CensusError> {
        let c = self.cols;
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

    fn three_band_answer(&self, jobs: &[JobSpec], counts: &[u128]) -> Answer {
        let three_band_jobs: Vec<three_bands::ThreeBandJob> = jobs
            .iter()
            .map(|job| three_bands::ThreeBandJob { key: job.key.clone(), group: job.group.clone(), weight: job.weight })
            .collect();
        let value = three_bands::fold(three_band_jobs.iter().zip(counts.iter().copied()));
        let mut terms = vec![
            ("gangsters (classes of top-band column sets)".into(), jobs.len().to_string()),
            (
                "column-set tuples (sum of class sizes)".into(),
                jobs.iter().map(|job| BigUint::from(job.weight)).sum::<BigUint>().to_string(),
            ),
            (format!("grids({} x 3) = sum of size x b x G", self.rows), value.to_string()),
        ];
        if let Some(Gangsters { start, end }) = self.gangsters {
            terms[2].0 = format!("gangsters {start}..{end} (a slice, not the number of grids): sum of size x b x G");
        }
        Answer { value, terms }
    }
}

/// Counts a 2 x c key by two bands (F of its column-set class).
struct TwoBandCounter {
    c: usize,
}

impl CountKeys for TwoBandCounter {
    fn count_cancellable(&self, key: &str, cancel: &AtomicBool) -> Result<u128, CensusError> {
        let c = self.c;
        if !key.starts_with(&format!("2x{c}:")) {
            return Err(bad_key(key, format!("not a 2 x {c} key")));
        }
        shapes::count_job_cancellable(key, cancel).map_err(|e| bad_key(key, e))?.ok_or(CensusError::Cancelled)
    }
}

/// Counts r x 3 keys by three bands, with the stack-pair table of the
/// process ([`three_bands::SharedTable`]: one table a process, shared by
/// its threads).
pub struct ThreeBandCounter {
    pub r: usize,
    pub table: three_bands::SharedTable,
}

impl ThreeBandCounter {
    /// The gangster of a key of this r, or why the key is not one.
    fn pattern(&self, key: &str) -> Result<three_bands::Pattern, CensusError> {
        let r = self.r;
        match key.strip_prefix(&format!("{r}x3:")) {
            None => Err(bad_key(key, format!("not a {r} x 3 key"))),
            Some(_) => three_bands::parse_key(key).map_err(|e| bad_key(key, e)),
        }
    }
}

impl CountKeys for ThreeBandCounter {
    fn count_cancellable(&self, key: &str, cancel: &AtomicBool) -> Result<u128, CensusError> {
        let r = self.r;
        if !key.starts_with(&format!("{r}x3:")) {
            return Err(bad_key(key, format!("not a {r} x 3 key")));
        }
        match self.table.count_job(key, cancel) {
            Ok(count) => Ok(count),
            Err(three_bands::ThreeBandError::Cancelled) => Err(CensusError::Cancelled),
            Err(e) => Err(bad_key(key, e)),
        }
    }

    /// Gangsters that share their first three stacks read the same table
    /// rows: [`three_bands::SharedTable::count_many`].
    fn count_many(&self, keys: &[&str], cancel: &AtomicBool) -> Vec<Result<u128, CensusError>> {
        let mut counts: Vec<Result<u128, CensusError>> = Vec::with_capacity(keys.len());
        let mut readable = Vec::new();
        for key in keys {
            let pattern = self.pattern(key);
            if let Ok(pattern) = &pattern {
                readable.push((counts.len(), pattern.clone()));
            }
            counts.push(pattern.map(|_| 0));
        }
        let patterns: Vec<three_bands::Pattern> = readable.iter().map(|(_, pattern)| pattern.clone()).collect();
        match self.table.count_many(&patterns, cancel) {
            Ok(together) => {
                for ((index, _), count) in readable.iter().zip(together) {
                    counts[*index] = Ok(count);
                }
            }
            Err(error) => {
                for (index, _) in &readable {
                    counts[*index] = Err(match &error {
                        three_bands::ThreeBandError::Cancelled => CensusError::Cancelled,
                        other => bad_key(keys[*index], other),
                    });
                }
            }
        }
        counts
    }
}
