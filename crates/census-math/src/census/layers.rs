//! `layers boxes=2xC [shards=S] [parts=P]`: 2 x c grids by the layer
//! recurrence, as stages of jobs over files
//! ([`crate::shapes::layer_jobs`]): map and reduce jobs build each layer of
//! partial bands in `parts` parts from `shards` shards of the layer before;
//! then one job a column-set class reads its F from the last layer. Map and
//! reduce jobs count nothing: their count is the digest of the files they
//! wrote, which the next stage reads, so their workers share a directory
//! (`census-layers`), and a counter of keys alone refuses them all.

use std::sync::atomic::AtomicBool;
use std::time::Duration;

use num_bigint::BigUint;

use super::kind::{CountKeys, Counts, FoldInput, KindInfo, Parameters, bad_key};
use super::{Answer, Census, CensusError, CensusKind, CheckPolicy, JobCounter, JobSpec};
use crate::shapes::{self, layer_jobs::LayerJob, layer_jobs::LayerPlan};

pub(super) const KIND: KindInfo = KindInfo {
    name: "layers",
    grammar: "layers boxes=2xC [shards=S] [parts=P]",
    help: "2 x c grids (2x2 to 2x6) by the layer recurrence: stages of jobs over layer files in a directory the \
           workers share (--layers-dir); S shards of a layer's parents and P parts of a layer, 8 by default",
    published: "as shape boxes=2xC",
    examples: &["layers boxes=2x5 shards=4 parts=16", "layers boxes=6x2"],
    parse,
};

/// Shards and parts of a layer census whose text does not give them.
pub const DEFAULT_LAYER_SPLIT: u32 = 8;

/// 2 x `c` grids by the layer recurrence, each layer from `shards` shards
/// of the layer before, in `parts` parts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Layers {
    pub c: usize,
    pub shards: u32,
    pub parts: u32,
}

fn parse(parameters: &mut Parameters<'_>) -> Result<Census, String> {
    let boxes = parameters.take("boxes").ok_or("layers needs boxes=2xC, e.g. boxes=2x5")?;
    let c = match boxes.split_once('x').map(|(r, c)| (r.parse::<usize>(), c.parse::<usize>())) {
        Some((Ok(2), Ok(c))) | Some((Ok(c), Ok(2))) if (shapes::MIN_C..=shapes::MAX_C).contains(&c) => c,
        _ => return Err(format!("boxes={boxes}: layers counts 2x2 to 2x6 (or their transposes)")),
    };
    let shards = parameters.take_number("shards")?.unwrap_or(DEFAULT_LAYER_SPLIT);
    let parts = parameters.take_number("parts")?.unwrap_or(DEFAULT_LAYER_SPLIT);
    Ok(Census::from(Layers { c, shards, parts }))
}

impl Layers {
    /// Its plan: jobs, keys, stages and inputs.
    pub fn plan(&self) -> Result<LayerPlan, CensusError> {
        LayerPlan::new(self.c, self.shards, self.parts)
            .map_err(|e| CensusError::BadCensus { text: self.to_string(), reason: e.to_string() })
    }
}

impl Census {
    /// The plan of a layer census (its jobs, keys and stages).
    pub fn layer_plan(&self) -> Result<LayerPlan, CensusError> {
        match self.as_kind::<Layers>() {
            Some(layers) => layers.plan(),
            None => Err(CensusError::BadCensus { text: self.to_string(), reason: "not a layers census".into() }),
        }
    }
}

impl std::fmt::Display for Layers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "layers boxes=2x{} shards={} parts={}", self.c, self.shards, self.parts)
    }
}

impl CensusKind for Layers {
    fn check(&self) -> Result<(), String> {
        LayerPlan::new(self.c, self.shards, self.parts).map(drop).map_err(|e| e.to_string())
    }

    /// The shape census's: the same grids.
    fn published(&self) -> Option<BigUint> {
        shapes::PUBLISHED_GRIDS.iter().find(|(side, _)| *side == self.c).and_then(|(_, grids)| grids.parse().ok())
    }

    fn jobs(&self) -> Result<Vec<JobSpec>, CensusError> {
        Ok(self
            .plan()?
            .jobs()
            .map_err(|e| CensusError::BadCensus { text: self.to_string(), reason: e.to_string() })?
            .into_iter()
            .map(|job| JobSpec { key: job.key, group: job.group, weight: job.weight })
            .collect())
    }

    fn makes_jobs_as_read(&self) -> bool {
        false
    }

    /// Map and reduce a step, then the classes.
    fn stage_count(&self) -> u32 {
        self.plan().map_or(1, |plan| plan.stage_count())
    }

    fn stage(&self, key: &str) -> Result<u32, CensusError> {
        match self.plan() {
            Ok(plan) => plan.parse(key).map(|job| plan.stage(&job)).map_err(|e| bad_key(key, e)),
            Err(_) => Ok(0),
        }
    }

    /// In emissions, from the published layer sizes (estimates where 2 x
    /// 6's are not published): [`LayerPlan::job_cost`] says how.
    fn job_cost(&self, key: &str) -> Result<u64, CensusError> {
        let plan = self.plan()?;
        plan.parse(key).map(|job| plan.job_cost(&job)).map_err(|e| bad_key(key, e))
    }

    fn knows_job_costs(&self) -> bool {
        true
    }

    fn jobs_counted_together(&self) -> u32 {
        1
    }

    /// As the shape census's 2 x 6 jobs: twelve hours.
    fn longest_lease(&self) -> Option<Duration> {
        (self.c >= 6).then_some(Duration::from_secs(12 * 3600))
    }

    /// A recount would need the shared files; two identities that write
    /// the same files report the same digest.
    fn default_check(&self) -> CheckPolicy {
        CheckPolicy { quorum: 2, recount_fraction: 0.0 }
    }

    /// 2: map and reduce jobs weigh 0 and runs are stage-gated (a run made
    /// by layers/1 could not be counted through a store).
    fn counter_version(&self) -> String {
        "layers/2".to_string()
    }

    fn job_counter(&self) -> JobCounter {
        JobCounter::new(NeedsFiles { c: self.c })
    }

    fn checking_counter(&self) -> JobCounter {
        self.job_counter()
    }

    fn has_independent_check(&self) -> bool {
        false
    }

    /// As the shape census's: weight x F^2 (the data jobs weigh 0).
    fn class_power(&self) -> u32 {
        2
    }

    fn group_completions(&self, _count_sum: &BigUint) -> Option<BigUint> {
        None
    }

    fn fold_input(&self) -> FoldInput {
        FoldInput::EveryJob
    }

    /// The class jobs fold as the shape census's jobs; a map or reduce
    /// job's count is a digest, which adds nothing.
    fn answer(&self, counts: Counts<'_>) -> Result<Answer, CensusError> {
        let (jobs, counts) = counts.every_job(self)?;
        let (c, plan) = (self.c, self.plan()?);
        let mut shape_jobs = Vec::new();
        let mut class_counts = Vec::new();
        for (job, &count) in jobs.iter().zip(counts) {
            let parsed = plan.parse(&job.key).map_err(|e| CensusError::BadResults(format!("{}: {e}", job.key)))?;
            if matches!(parsed, LayerJob::Class { .. }) {
                let sets = job.key.rsplit('/').next().unwrap_or_default();
                shape_jobs.push(shapes::ShapeJob {
                    key: format!("2x{c}:{sets}"),
                    group: job.group.clone(),
                    weight: job.weight,
                });
                class_counts.push(count);
            }
        }
        let value = shapes::fold(c, shape_jobs.iter().zip(class_counts))
            .map_err(|e| CensusError::BadResults(e.to_string()))?;
        let terms = vec![
            ("map and reduce jobs (counts are digests of their files)".into(), (jobs.len() - shape_jobs.len()).to_string()),
            ("column-set classes".into(), shape_jobs.len().to_string()),
            (format!("grids(2 x {c}) = sum of weight x F^2"), value.to_string()),
        ];
        Ok(Answer { value, terms })
    }

    fn needs_postgres(&self) -> Option<&'static str> {
        None
    }

    fn needs_shared_files(&self) -> bool {
        true
    }
}

/// A layer census's jobs read and write files in a directory shared by
/// the workers (the `census-layers` crate), which a counter of keys alone
/// does not have: every count is refused with the reason.
struct NeedsFiles {
    c: usize,
}

impl CountKeys for NeedsFiles {
    fn count_cancellable(&self, key: &str, _cancel: &AtomicBool) -> Result<u128, CensusError> {
        Err(bad_key(
            key,
            format!(
                "a 2x{} layers job needs the layer data plane (census-layers: the shared directory of layer files \
                 and the accepted digests of the stage before), which this counter has not",
                self.c
            ),
        ))
    }
}
