//! The layer recurrence ([`super::layers`]) as a census of jobs known up
//! front: what a layer run is made of, with no I/O.
//!
//! A plan for 2 x c with S shards and P parts has, for each step L -> L + 1
//! (L = 1..c-1):
//!
//! - **map** jobs `2xC/map/L/s`: shard s of layer L's parents (one shard at
//!   L = 1, whose layer is one state; S after), each emitting its children,
//!   summed by key within the job and split into P parts by a stable hash of
//!   the child ([`partition_of`]);
//! - **reduce** jobs `2xC/reduce/L/p`: part p of layer L + 1, the sum by key
//!   of part p of every map job of the step ([`sum_sorted_runs`]);
//!
//! and, after the last step, one **class** job `2xC/class/SETS` a column-set
//! class (SETS as in the shape census's keys), whose count is F = T / m of
//! its state in the last layer. The class jobs carry the shape census's
//! group labels and weights, so the fold is that census's sum of
//! weight x F^2 and every F compares with `shape boxes=2xC`'s.
//!
//! Each job has a *stage*: map of step L is stage 2(L - 1), its reduce
//! 2(L - 1) + 1, the class jobs 2(c - 1). A job reads only the outputs of
//! the stage before ([`LayerPlan::inputs`]), so it may start when that stage
//! is done.
//!
//! A state travels as a [`StateKey`]: each mask replaced by its rank among
//! the masks of L slots in distinct boxes (below 256 for c <= 6), one byte
//! a digit, packed so that keys sort as the masks do.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::ops::Range;

use super::classes::{ColumnSets, classes};
use super::jobs::{masks, parse_masks};
use super::layers::{MAX_SLOTS, Masks, class_state, mix};
use super::{MAX_C, ShapeError, check_c};

/// A state of one layer packed into 2c bytes (the low ones of the `u128`),
/// mask ranks in order, the first digit's the most significant: keys sort
/// as their masks do.
pub type StateKey = u128;

/// The most shards a plan may have for one step.
pub const MAX_SHARDS: u32 = 1 << 20;
/// The most parts a layer may be split into.
pub const MAX_PARTS: u32 = 1 << 16;

/// The jobs of a layer run of 2 x c: shards of each layer's parents, parts
/// of each layer's states.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LayerPlan {
    c: usize,
    shards: u32,
    parts: u32,
}

/// One job of a layer run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LayerJob {
    /// Step `step` -> `step + 1`: emit the children of shard `shard` of
    /// layer `step`'s parents, summed, in parts.
    Map { step: usize, shard: u32 },
    /// Step `step` -> `step + 1`: part `part` of layer `step + 1`, summed
    /// over the step's map jobs.
    Reduce { step: usize, part: u32 },
    /// F of one column-set class, read from the last layer.
    Class {
        /// The class's column sets, as in its key.
        sets: Vec<u16>,
        /// Its canonical complete state.
        state: Masks,
    },
}

/// One job as the census lists it: its key, the group its count adds to,
/// the group's weight in the fold and the stage it belongs to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedJob {
    pub key: String,
    pub group: String,
    pub weight: u128,
    pub stage: u32,
}

impl LayerPlan {
    /// A plan for 2 x c with `shards` shards of each layer's parents (one
    /// for the first layer) and `parts` parts of each layer.
    pub fn new(c: usize, shards: u32, parts: u32) -> Result<LayerPlan, ShapeError> {
        check_c(c)?;
        if !(1..=MAX_SHARDS).contains(&shards) {
            return Err(ShapeError::BadPlan { reason: format!("shards={shards}: shards are 1..={MAX_SHARDS}") });
        }
        if !(1..=MAX_PARTS).contains(&parts) {
            return Err(ShapeError::BadPlan { reason: format!("parts={parts}: parts are 1..={MAX_PARTS}") });
        }
        Ok(LayerPlan { c, shards, parts })
    }

    pub fn c(&self) -> usize {
        self.c
    }

    pub fn shards(&self) -> u32 {
        self.shards
    }

    pub fn parts(&self) -> u32 {
        self.parts
    }

    /// How many map jobs step `step` -> `step + 1` has: one for the first
    /// layer (a single state), the plan's shards after.
    pub fn shards_of_step(&self, step: usize) -> u32 {
        if step == 1 { 1 } else { self.shards }
    }

    /// The number of stages: a map and a reduce a step, then the classes.
    pub fn stage_count(&self) -> u32 {
        2 * (self.c as u32 - 1) + 1
    }

    /// The stage of a job: the jobs of a stage read only the outputs of the
    /// stage before.
    pub fn stage(&self, job: &LayerJob) -> u32 {
        match *job {
            LayerJob::Map { step, .. } => 2 * (step as u32 - 1),
            LayerJob::Reduce { step, .. } => 2 * (step as u32 - 1) + 1,
            LayerJob::Class { .. } => 2 * (self.c as u32 - 1),
        }
    }

    /// The map and reduce jobs that build layers 2 to `to_layer`, in stage
    /// order (map jobs of step 1, its reduce jobs, map jobs of step 2, ...).
    pub fn data_jobs(&self, to_layer: usize) -> Vec<LayerJob> {
        let mut jobs = Vec::new();
        for step in 1..to_layer.min(self.c) {
            jobs.extend((0..self.shards_of_step(step)).map(|shard| LayerJob::Map { step, shard }));
            jobs.extend((0..self.parts).map(|part| LayerJob::Reduce { step, part }));
        }
        jobs
    }

    /// The class jobs, in the order of [`super::classes()`], with their shape
    /// census groups and weights.
    pub fn class_jobs(&self) -> Result<Vec<(LayerJob, String, u128)>, ShapeError> {
        classes(self.c)?
            .into_iter()
            .enumerate()
            .map(|(index, class)| {
                let sets = class.representative.sets().to_vec();
                let state = class_state_of_sets(&class.representative)?;
                Ok((LayerJob::Class { sets, state }, format!("2x{} class {index}", self.c), class.size))
            })
            .collect()
    }

    /// Every job of the run, in stage order. A map or reduce job is a group
    /// of its own (named by its key) of weight 0: its count is the digest of
    /// its output, which the audit shows as that group's sum and which adds
    /// nothing to the answer (so a store's weighted sum, weight x sum^2 over
    /// the groups, is the answer, as for the shape census).
    pub fn jobs(&self) -> Result<Vec<PlannedJob>, ShapeError> {
        let mut out: Vec<PlannedJob> = self
            .data_jobs(self.c)
            .into_iter()
            .map(|job| {
                let key = self.key(&job);
                PlannedJob { group: key.clone(), key, weight: 0, stage: self.stage(&job) }
            })
            .collect();
        for (job, group, weight) in self.class_jobs()? {
            out.push(PlannedJob { key: self.key(&job), group, weight, stage: self.stage(&job) });
        }
        Ok(out)
    }

    /// A job's key: `2xC/map/L/s`, `2xC/reduce/L/p` or `2xC/class/SETS`.
    pub fn key(&self, job: &LayerJob) -> String {
        let c = self.c;
        match job {
            LayerJob::Map { step, shard } => format!("2x{c}/map/{step}/{shard}"),
            LayerJob::Reduce { step, part } => format!("2x{c}/reduce/{step}/{part}"),
            LayerJob::Class { sets, .. } => format!("2x{c}/class/{}", masks(sets)),
        }
    }

    /// Reads a key of this plan back, checked: the shape, a step of it, a
    /// shard or part within the plan, column sets of the shape.
    pub fn parse(&self, key: &str) -> Result<LayerJob, ShapeError> {
        let bad = |reason: String| ShapeError::BadKey { key: key.to_string(), reason };
        let c = self.c;
        let rest = key.strip_prefix(&format!("2x{c}/")).ok_or_else(|| bad(format!("not a 2x{c} layer job")))?;
        let (kind, rest) = rest.split_once('/').ok_or_else(|| bad("no '/' after the kind".into()))?;
        let number = |text: &str, what: &str| -> Result<u64, ShapeError> {
            if text.is_empty() || text.len() > 9 || !text.bytes().all(|b| b.is_ascii_digit()) {
                return Err(bad(format!("{what} {text:?} is not a small number")));
            }
            text.parse().map_err(|_| bad(format!("{what} {text:?} is not a number")))
        };
        let step_and = |rest: &str| -> Result<(usize, u64), ShapeError> {
            let (step, index) = rest.split_once('/').ok_or_else(|| bad("not KIND/STEP/INDEX".into()))?;
            let step = number(step, "step")? as usize;
            if !(1..c).contains(&step) {
                return Err(bad(format!("2x{c} has steps 1 to {}, not {step}", c - 1)));
            }
            Ok((step, number(index, "index")?))
        };
        match kind {
            "map" => {
                let (step, shard) = step_and(rest)?;
                let shards = self.shards_of_step(step);
                if shard >= u64::from(shards) {
                    return Err(bad(format!("step {step} has {shards} shards, not shard {shard}")));
                }
                Ok(LayerJob::Map { step, shard: shard as u32 })
            }
            "reduce" => {
                let (step, part) = step_and(rest)?;
                if part >= u64::from(self.parts) {
                    return Err(bad(format!("a layer has {} parts, not part {part}", self.parts)));
                }
                Ok(LayerJob::Reduce { step, part: part as u32 })
            }
            "class" => {
                let sets = parse_masks(key, rest, "sets")?;
                let representative = ColumnSets::new(c, sets.clone()).map_err(|e| bad(e.to_string()))?;
                let state = class_state_of_sets(&representative).map_err(|e| bad(e.to_string()))?;
                Ok(LayerJob::Class { sets, state })
            }
            other => Err(bad(format!("{other:?} is not a kind (map, reduce, class)"))),
        }
    }

    /// The jobs whose outputs `job` reads, all of the stage before: for a
    /// map job of step L >= 2 every reduce job of step L - 1 (its shard is
    /// a range of the whole layer), for a reduce job every map job of its
    /// step, for a class job the one reduce job of the last step whose
    /// part holds its state. A map job of step 1 reads nothing.
    pub fn inputs(&self, job: &LayerJob) -> Vec<LayerJob> {
        match *job {
            LayerJob::Map { step: 1, .. } => Vec::new(),
            LayerJob::Map { step, .. } => {
                (0..self.parts).map(|part| LayerJob::Reduce { step: step - 1, part }).collect()
            }
            LayerJob::Reduce { step, .. } => {
                (0..self.shards_of_step(step)).map(|shard| LayerJob::Map { step, shard }).collect()
            }
            LayerJob::Class { ref state, .. } => {
                let key = StateCodec::new(self.c, self.c).expect("a plan's c is valid").pack(state);
                vec![LayerJob::Reduce { step: self.c - 1, part: partition_of(key, self.parts) }]
            }
        }
    }
}

/// The sizes of each layer of 2 x c (orbits of states, layers 1 to c) and
/// the emissions of each step (into layers 2 to c), as [`LayerPlan::job_cost`]
/// reads them. c = 2..5, and for 2 x 6 layers 1, 2, 3, 5, 6 and steps 1 -> 2
/// and 2 -> 3, are exact: published by linche89/sudoku-enumeration
/// (`docs/reports/og2/c6-standalone-research-prompt-20260905.md`, "finite
/// anchors" and "C=6 exact facts"; `tests/layers.rs` checks c = 2..5 and
/// the first 2 x 6 step, BENCHMARKS.md the second). The rest of 2 x 6 are
/// estimates: layer 4 is at least 903,398,602 (the keys that run had seen;
/// not closed), steps 3 -> 4 and 4 -> 5 are that repository's projections
/// (2.13308e12 and 2.36323e12 emissions), and step 5 -> 6 is of the order
/// of 1e10 (BENCHMARKS.md, "Projected, full 2x6").
fn layer_sizes(c: usize) -> (&'static [u64], &'static [u64]) {
    match c {
        2 => (&[1, 2], &[4]),
        3 => (&[1, 5, 4], &[80, 29]),
        4 => (&[1, 23, 54, 26], &[4_752, 4_630, 712]),
        5 => (&[1, 107, 16_150, 17_120, 355], &[440_192, 2_324_325, 11_957_632, 462_403]),
        _ => (
            &[1, 772, 12_324_872, 903_398_602, 96_452_755, 63_199],
            &[59_245_120, 2_605_194_602, 2_133_080_000_000, 2_363_230_000_000, 10_000_000_000],
        ),
    }
}

impl LayerPlan {
    /// The expected cost of one job of the plan, relative to the others,
    /// in emissions: what a job of a layer run spends its time on (an
    /// emission, about 1.1-1.4 us of a core: BENCHMARKS.md). Reading,
    /// merging or writing a record of a layer file is counted as one too,
    /// an upper estimate (reading and hashing are a few per cent of a 2x5
    /// run: BENCHMARKS.md). From the layer sizes and emissions of
    /// `layer_sizes` (published, or estimates where 2 x 6's are not), each
    /// shard or part taken as an even share of its layer:
    ///
    /// - a map job of step L: its shard's parents read (1/S of layer L,
    ///   plus the parts its range reaches into, 1/P), its share of the
    ///   step's emissions, and its distinct children written (at most the
    ///   next layer);
    /// - a reduce job: part p of every map job's children read, part p of
    ///   the next layer written;
    /// - a class job: the one part of the last layer it reads in full.
    ///
    /// At least 1.
    pub fn job_cost(&self, job: &LayerJob) -> u64 {
        let (states, emissions) = layer_sizes(self.c);
        let parts = u128::from(self.parts);
        let share = |amount: u64, of: u128| u128::from(amount).div_ceil(of);
        let cost = match *job {
            LayerJob::Map { step, .. } => {
                let shards = u128::from(self.shards_of_step(step));
                let emitted = share(emissions[step - 1], shards);
                share(states[step - 1], shards)
                    + share(states[step - 1], parts)
                    + emitted
                    + emitted.min(u128::from(states[step]))
            }
            LayerJob::Reduce { step, .. } => {
                let shards = u128::from(self.shards_of_step(step));
                let children = share(emissions[step - 1], shards).min(u128::from(states[step]));
                (shards * children).div_ceil(parts) + share(states[step], parts)
            }
            LayerJob::Class { .. } => share(states[self.c - 1], parts),
        };
        u64::try_from(cost).unwrap_or(u64::MAX).max(1)
    }
}

/// The canonical complete state of a class given by its column sets (set b
/// holds the digits in the left column of stack b; a digit's word has bit
/// b set when it is in the right column).
pub fn class_state_of_sets(sets: &ColumnSets) -> Result<Masks, ShapeError> {
    let c = sets.c();
    let words: Vec<u16> =
        (0..2 * c).map(|d| (0..c).map(|b| u16::from((sets.sets()[b] >> d) & 1 == 0) << b).sum()).collect();
    class_state(c, &words)
}

/// Masks of one layer to [`StateKey`]s and back.
#[derive(Clone, Debug)]
pub struct StateCodec {
    c: usize,
    rows: usize,
    /// The masks of `rows` slots in distinct boxes, ascending.
    masks: Vec<u16>,
    /// rank + 1 of a mask, 0 for masks of another shape.
    ranks: Vec<u8>,
}

impl StateCodec {
    /// The codec of layer `rows` (1..=c) of 2 x c.
    pub fn new(c: usize, rows: usize) -> Result<StateCodec, ShapeError> {
        check_c(c)?;
        if !(1..=c).contains(&rows) {
            return Err(ShapeError::BadSets { reason: format!("2 x {c} has layers 1..={c}, not {rows}") });
        }
        let n = 2 * c;
        let masks: Vec<u16> = (0..1u16 << n)
            .filter(|&mask| {
                let boxes = (mask | (mask >> 1)) & 0x555;
                mask.count_ones() as usize == rows && boxes.count_ones() as usize == rows
            })
            .collect();
        // At most C(6, 3) 2^3 = 160 (rows 3) or C(6, 4) 2^4 = 240 (rows 4).
        assert!(masks.len() < 256, "mask ranks fit a byte for c <= {MAX_C}");
        let mut ranks = vec![0u8; 1 << n];
        for (rank, &mask) in masks.iter().enumerate() {
            ranks[usize::from(mask)] = rank as u8 + 1;
        }
        Ok(StateCodec { c, rows, masks, ranks })
    }

    pub fn c(&self) -> usize {
        self.c
    }

    /// The layer: rows of the band written.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Bytes of a packed state: one a digit.
    pub fn key_bytes(&self) -> usize {
        2 * self.c
    }

    /// A state's key. The masks must be of this layer, as every state and
    /// child of [`super::layers`] is (checked in debug builds).
    pub fn pack(&self, masks: &Masks) -> StateKey {
        masks[..2 * self.c].iter().fold(0u128, |key, &mask| {
            let rank = self.ranks[usize::from(mask)];
            debug_assert!(rank > 0, "mask {mask:#x} is not of layer {}", self.rows);
            (key << 8) | u128::from(rank.wrapping_sub(1))
        })
    }

    /// The masks of a key, checked: every byte a rank of this layer, the
    /// masks ascending.
    pub fn unpack(&self, key: StateKey) -> Result<Masks, ShapeError> {
        let n = 2 * self.c;
        if n < 16 && key >> (8 * n) != 0 {
            return Err(ShapeError::BadSets { reason: format!("state key {key:#x} is wider than {n} bytes") });
        }
        let mut masks = [0u16; MAX_SLOTS];
        for (i, mask) in masks[..n].iter_mut().enumerate() {
            let rank = ((key >> (8 * (n - 1 - i))) & 0xff) as usize;
            *mask = *self.masks.get(rank).ok_or_else(|| ShapeError::BadSets {
                reason: format!("state key {key:#x}: byte {i} = {rank} is not a mask of layer {}", self.rows),
            })?;
        }
        if masks[..n].windows(2).any(|w| w[0] > w[1]) {
            return Err(ShapeError::BadSets { reason: format!("state key {key:#x}: masks not ascending") });
        }
        Ok(masks)
    }
}

/// The part (0..parts) a state belongs to: a fixed hash of its key, the
/// same on every machine and in every version (it decides where files are).
pub fn partition_of(key: StateKey, parts: u32) -> u32 {
    let hash = mix((key as u64) ^ mix((key >> 64) as u64 ^ 0x6c61_7965_7273));
    ((u128::from(hash) * u128::from(parts)) >> 64) as u32
}

/// The indices of shard `shard` of `states` states cut into `shards`:
/// contiguous, in order, sizes differing by at most one.
pub fn shard_range(states: u64, shards: u32, shard: u32) -> Range<u64> {
    let at = |s: u32| (u128::from(states) * u128::from(s) / u128::from(shards)) as u64;
    at(shard)..at(shard + 1)
}

/// Why sorted runs could not be summed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RunError {
    /// Run `run` does not have strictly ascending keys at `key`.
    NotAscending { run: usize, key: StateKey },
    /// The sum at `key` passes 128 bits.
    Overflow { key: StateKey },
}

impl std::fmt::Display for RunError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RunError::NotAscending { run, key } => write!(f, "run {run} is not strictly ascending at key {key:#x}"),
            RunError::Overflow { key } => write!(f, "the sum at key {key:#x} passes 128 bits"),
        }
    }
}

impl std::error::Error for RunError {}

/// Merges runs of (key, value), each strictly ascending by key, into one,
/// values of equal keys added: `sink` gets each key once, ascending. Stops
/// at the first error of a run, of the merge (a run out of order, a sum
/// past 128 bits) or of the sink.
pub fn sum_sorted_runs<E, I>(runs: Vec<I>, mut sink: impl FnMut(StateKey, u128) -> Result<(), E>) -> Result<(), E>
where
    E: From<RunError>,
    I: Iterator<Item = Result<(StateKey, u128), E>>,
{
    let mut runs = runs;
    let mut last: Vec<Option<StateKey>> = vec![None; runs.len()];
    let mut heap = BinaryHeap::with_capacity(runs.len());
    let mut pull = |run: usize, runs: &mut Vec<I>, heap: &mut BinaryHeap<Reverse<(StateKey, usize, u128)>>| {
        if let Some(item) = runs[run].next() {
            let (key, value) = item?;
            if last[run].is_some_and(|previous| previous >= key) {
                return Err(E::from(RunError::NotAscending { run, key }));
            }
            last[run] = Some(key);
            heap.push(Reverse((key, run, value)));
        }
        Ok(())
    };
    for run in 0..runs.len() {
        pull(run, &mut runs, &mut heap)?;
    }
    let mut current: Option<(StateKey, u128)> = None;
    while let Some(Reverse((key, run, value))) = heap.pop() {
        pull(run, &mut runs, &mut heap)?;
        current = match current {
            Some((held, sum)) if held == key => {
                Some((key, sum.checked_add(value).ok_or_else(|| E::from(RunError::Overflow { key }))?))
            }
            Some((held, sum)) => {
                sink(held, sum)?;
                Some((key, value))
            }
            None => Some((key, value)),
        };
    }
    if let Some((key, sum)) = current {
        sink(key, sum)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;

    use super::super::layers::{first_layer, next_layer};
    use super::*;

    #[test]
    fn keys_round_trip_and_sort_as_masks() {
        for c in 2..=4 {
            let mut layer = first_layer(c).unwrap();
            loop {
                let codec = StateCodec::new(c, layer.rows()).unwrap();
                let keys: Vec<StateKey> = layer.states().iter().map(|(masks, _)| codec.pack(masks)).collect();
                assert!(keys.windows(2).all(|w| w[0] < w[1]), "2x{c} layer {}", layer.rows());
                for ((masks, _), &key) in layer.states().iter().zip(&keys) {
                    assert_eq!(codec.unpack(key).unwrap(), *masks);
                }
                if layer.is_complete() {
                    break;
                }
                layer = next_layer(&layer, &AtomicBool::new(false)).unwrap();
            }
        }
        let codec = StateCodec::new(3, 2).unwrap();
        assert!(codec.unpack(0xff).is_err(), "rank 255 is no mask of 2x3 layer 2");
        assert!(codec.unpack(1 << 48).is_err(), "wider than 6 bytes");
        assert!(codec.unpack(0x0100_0000_0000).is_err(), "descending");
        assert!(StateCodec::new(3, 4).is_err());
    }

    #[test]
    fn parts_are_fixed_and_spread() {
        // The hash decides where files are: it must never change.
        assert_eq!(partition_of(0, 1), 0);
        assert_eq!([partition_of(0, 16), partition_of(1, 16), partition_of(u128::MAX, 16)], [12, 15, 0]);
        let mut seen = [0u32; 8];
        for key in 0..8000u128 {
            seen[partition_of(key * 0x0101, 8) as usize] += 1;
        }
        assert!(seen.iter().all(|&n| (800..1200).contains(&n)), "{seen:?}");
    }

    #[test]
    fn shards_cover_a_layer_once() {
        for (states, shards) in [(0u64, 3u32), (1, 4), (7, 3), (12_324_872, 16), (u64::MAX, 1000)] {
            let mut next = 0;
            for shard in 0..shards {
                let range = shard_range(states, shards, shard);
                assert_eq!(range.start, next);
                assert!(range.end - range.start <= states / u64::from(shards) + 1);
                next = range.end;
            }
            assert_eq!(next, states);
        }
    }

    fn run(items: &[(u128, u128)]) -> impl Iterator<Item = Result<(u128, u128), RunError>> + '_ {
        items.iter().map(|&item| Ok(item))
    }

    #[test]
    fn runs_sum_by_key() {
        let (a, b, c) = ([(1, 10), (3, 30), (9, 90)], [(2, 2), (3, 3)], [(3, 300), (10, 1)]);
        let mut out = Vec::new();
        sum_sorted_runs(vec![run(&a), run(&b), run(&c), run(&[])], |k, v| {
            out.push((k, v));
            Ok::<_, RunError>(())
        })
        .unwrap();
        assert_eq!(out, [(1, 10), (2, 2), (3, 333), (9, 90), (10, 1)]);
        let bad = [(2, 1), (2, 1)];
        let error = sum_sorted_runs(vec![run(&a), run(&bad)], |_, _| Ok(())).unwrap_err();
        assert_eq!(error, RunError::NotAscending { run: 1, key: 2 });
        let big = [(3, u128::MAX)];
        assert_eq!(sum_sorted_runs(vec![run(&a), run(&big)], |_, _| Ok(())), Err(RunError::Overflow { key: 3 }));
    }

    #[test]
    fn the_plan_lists_its_jobs_by_stage_and_reads_them_back() {
        let plan = LayerPlan::new(3, 2, 3).unwrap();
        let jobs = plan.jobs().unwrap();
        let keys: Vec<&str> = jobs.iter().map(|job| job.key.as_str()).collect();
        assert_eq!(
            keys[..11],
            [
                "2x3/map/1/0",
                "2x3/reduce/1/0",
                "2x3/reduce/1/1",
                "2x3/reduce/1/2",
                "2x3/map/2/0",
                "2x3/map/2/1",
                "2x3/reduce/2/0",
                "2x3/reduce/2/1",
                "2x3/reduce/2/2",
                "2x3/class/038,038,038",
                "2x3/class/026,038,038",
            ]
        );
        assert_eq!(jobs.len(), 9 + 4);
        let stages: Vec<u32> = jobs.iter().map(|job| job.stage).collect();
        assert_eq!(stages, [0, 1, 1, 1, 2, 2, 3, 3, 3, 4, 4, 4, 4]);
        assert_eq!(plan.stage_count(), 5);
        assert_eq!(jobs[9].group, "2x3 class 0");
        // The class weights are the shape census's: all C(6, 3)^3 tuples;
        // the data jobs weigh nothing.
        assert_eq!(jobs[9..].iter().map(|job| job.weight).sum::<u128>(), 20u128.pow(3));
        assert!(jobs[..9].iter().all(|job| job.weight == 0));
        for job in &jobs {
            let parsed = plan.parse(&job.key).unwrap();
            assert_eq!(plan.key(&parsed), job.key);
            assert_eq!(plan.stage(&parsed), job.stage);
            for input in plan.inputs(&parsed) {
                assert_eq!(plan.stage(&input) + 1, job.stage, "{} reads the stage before", job.key);
            }
        }
        assert_eq!(plan.inputs(&plan.parse("2x3/map/2/1").unwrap()).len(), 3);
        assert_eq!(plan.inputs(&plan.parse("2x3/reduce/2/1").unwrap()).len(), 2);
        assert_eq!(plan.inputs(&plan.parse("2x3/reduce/1/1").unwrap()).len(), 1);
    }

    /// Costs follow the published sizes: a step's map jobs add up to at
    /// least its emissions, and 2 x 5's step 3 -> 4 map jobs (1.5 M
    /// emissions each at S = 8) cost thousands of times a class job.
    #[test]
    fn job_costs_follow_the_published_layer_sizes() {
        let plan = LayerPlan::new(5, 8, 8).unwrap();
        let cost = |key: &str| plan.job_cost(&plan.parse(key).unwrap());
        // 16,150 / 8 parents and as many of the parts around them, 11,957,632 / 8
        // emissions, 17,120 children at most.
        assert_eq!(cost("2x5/map/3/0"), 2_019 + 2_019 + 1_494_704 + 17_120);
        // 8 map jobs' 17,120 children in 8 parts, and a part of layer 4 written.
        assert_eq!(cost("2x5/reduce/3/5"), 17_120 + 2_140);
        // One part of the 355 states of the last layer.
        let (class, _, _) = plan.class_jobs().unwrap().pop().unwrap();
        assert_eq!(plan.job_cost(&class), 45);
        assert_eq!(cost("2x5/map/1/0"), 1 + 1 + 440_192 + 107);
        for (step, emissions) in [(1, 440_192), (2, 2_324_325), (3, 11_957_632), (4, 462_403)] {
            let maps: u64 =
                (0..plan.shards_of_step(step)).map(|shard| plan.job_cost(&LayerJob::Map { step, shard })).sum();
            assert!(maps >= emissions, "step {step}: {maps}");
        }
        // The smallest jobs still cost something; 2 x 6's biggest fit easily.
        let tiny = LayerPlan::new(2, 8, 8).unwrap();
        assert!(tiny.jobs().unwrap().iter().all(|job| tiny.job_cost(&tiny.parse(&job.key).unwrap()) >= 1));
        // Every map job of a step costs the same, as every reduce job does.
        for (shards, parts) in [(MAX_SHARDS, 1), (MAX_SHARDS, MAX_PARTS), (1, 1)] {
            let six = LayerPlan::new(6, shards, parts).unwrap();
            let class = LayerJob::Class { sets: Vec::new(), state: [0; MAX_SLOTS] };
            let mut total = 63_199 * u128::from(six.job_cost(&class));
            for step in 1..6 {
                total +=
                    u128::from(six.shards_of_step(step)) * u128::from(six.job_cost(&LayerJob::Map { step, shard: 0 }));
                total += u128::from(parts) * u128::from(six.job_cost(&LayerJob::Reduce { step, part: 0 }));
            }
            assert!(total < 1 << 62, "a run's costs add up within 64 bits: {total}");
        }
    }

    #[test]
    fn bad_keys_and_plans_are_refused_with_a_reason() {
        let plan = LayerPlan::new(3, 2, 3).unwrap();
        for (key, says) in [
            ("2x4/map/1/0", "not a 2x3 layer job"),
            ("2x3/map", "no '/'"),
            ("2x3/map/1", "not KIND/STEP/INDEX"),
            ("2x3/map/0/0", "steps 1 to 2"),
            ("2x3/map/3/0", "steps 1 to 2"),
            ("2x3/map/1/1", "step 1 has 1 shards"),
            ("2x3/map/2/2", "step 2 has 2 shards"),
            ("2x3/map/2/+1", "not a small number"),
            ("2x3/reduce/2/3", "3 parts"),
            ("2x3/class/038,038", "2 sets for c = 3"),
            ("2x3/class/38,038,038", "three-digit hex"),
            ("2x3/fold/1/0", "not a kind"),
        ] {
            let error = plan.parse(key).unwrap_err().to_string();
            assert!(error.contains(says), "{key}: {error}");
        }
        assert!(LayerPlan::new(7, 1, 1).is_err());
        assert!(LayerPlan::new(3, 0, 1).is_err());
        assert!(LayerPlan::new(3, 1, MAX_PARTS + 1).is_err());
    }
}
