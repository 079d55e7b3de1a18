//! A layer census run on this machine: the same jobs as a cluster's, stage
//! by stage over one directory on T threads, with the accepted digests kept
//! in a file (`ROOT/PLAN/accepted`, a line `KEY DIGEST` a job) instead of a
//! store, so a run stopped part-way goes on from its last finished job (the
//! work in progress of the stopped jobs, under `ROOT/PLAN/tmp`, is removed:
//! a local run owns its directory, which a cluster's workers do not).

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Instant;

use census_math::census::Answer;
use census_math::shapes::layer_jobs::LayerJob;

use crate::manifest::parse_digest;
use crate::{Accepted, Plane, PlaneError, digest_hex};

/// One layer as built by its step's jobs.
#[derive(Clone, Debug, PartialEq)]
pub struct LayerSummary {
    /// L: band rows written.
    pub layer: usize,
    pub states: u64,
    /// Emissions that built it (0 for layer 1).
    pub emissions: u64,
    /// Bytes of its part files (what the next step reads).
    pub bytes: u64,
    /// Bytes the step's map jobs wrote (what the reduce jobs read: the
    /// shuffle).
    pub shuffle_bytes: u64,
    /// Wall seconds of the step here (0 when every job was done before).
    pub seconds: f64,
}

/// What a local run found.
#[derive(Clone, Debug)]
pub struct LocalRun {
    pub layers: Vec<LayerSummary>,
    /// At the last layer: every class job's key and F.
    pub classes: Option<Vec<(String, u128)>>,
    /// At the last layer: the census's fold of every job's count.
    pub answer: Option<Answer>,
}

/// Runs the jobs that build layers 1 to `to_layer` and, at the last layer,
/// the class jobs and the fold; `visit` sees each layer as it is done.
pub fn run(
    plane: &Plane,
    to_layer: usize,
    threads: usize,
    cancel: &AtomicBool,
    visit: &mut impl FnMut(&LayerSummary),
) -> Result<LocalRun, PlaneError> {
    let plan = *plane.plan();
    let c = plan.c();
    let dir = plane.plan_dir();
    std::fs::create_dir_all(&dir).map_err(|e| PlaneError::io(&dir, e))?;
    // Work in progress of a run that was stopped: a local run owns its
    // directory, so it is nobody's now.
    let stale = dir.join("tmp");
    if stale.exists() {
        std::fs::remove_dir_all(&stale).map_err(|e| PlaneError::io(&stale, e))?;
    }
    let log_path = dir.join("accepted");
    let mut accepted = read_accepted(plane, &log_path)?;
    let log = Mutex::new(
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(|e| PlaneError::io(&log_path, e))?,
    );
    let first = LayerSummary { layer: 1, states: 1, emissions: 0, bytes: 0, shuffle_bytes: 0, seconds: 0.0 };
    visit(&first);
    let mut summaries = vec![first];
    let jobs = plan.data_jobs(to_layer);
    for step in 1..to_layer.min(c) {
        let started = Instant::now();
        let maps: Vec<String> = jobs
            .iter()
            .filter(|job| matches!(job, LayerJob::Map { step: s, .. } if *s == step))
            .map(|job| plan.key(job))
            .collect();
        let reduces: Vec<String> = jobs
            .iter()
            .filter(|job| matches!(job, LayerJob::Reduce { step: s, .. } if *s == step))
            .map(|job| plan.key(job))
            .collect();
        for stage in [&maps, &reduces] {
            let counts = run_stage(plane, stage, &accepted, threads, cancel, &log)?;
            accepted.extend(counts);
        }
        let mut summary = LayerSummary {
            layer: step + 1,
            states: 0,
            emissions: 0,
            bytes: 0,
            shuffle_bytes: 0,
            seconds: started.elapsed().as_secs_f64(),
        };
        for key in &maps {
            let manifest = plane.manifest(key, accepted[key])?;
            summary.emissions += manifest.emissions;
            summary.shuffle_bytes += manifest.files.iter().map(|file| file.bytes).sum::<u64>();
        }
        for key in &reduces {
            let manifest = plane.manifest(key, accepted[key])?;
            summary.states += manifest.files.iter().map(|file| file.states).sum::<u64>();
            summary.bytes += manifest.files.iter().map(|file| file.bytes).sum::<u64>();
        }
        visit(&summary);
        summaries.push(summary);
    }
    if to_layer < c {
        return Ok(LocalRun { layers: summaries, classes: None, answer: None });
    }
    let class_keys: Vec<String> = plan.class_jobs()?.iter().map(|(job, _, _)| plan.key(job)).collect();
    let counts = run_stage(plane, &class_keys, &accepted, threads, cancel, &Mutex::new(std::io::sink()))?;
    let classes: Vec<(String, u128)> = class_keys.iter().map(|key| (key.clone(), counts[key])).collect();
    accepted.extend(counts);
    let census = plane.census();
    let jobs = census.jobs().map_err(|e| PlaneError::NotLayers(e.to_string()))?;
    let all_counts: Vec<u128> = jobs.iter().map(|job| accepted.get(&job.key).copied().unwrap_or_default()).collect();
    let answer = census.fold(&jobs, &all_counts).map_err(|e| PlaneError::NotLayers(e.to_string()))?;
    Ok(LocalRun { layers: summaries, classes: Some(classes), answer: Some(answer) })
}

/// The accepted digests a run stopped part-way left, each checked against
/// its manifest and its files' sizes (a line that does not check is
/// counted again: a file set aside because it failed its digest is written
/// again so).
fn read_accepted(plane: &Plane, path: &std::path::Path) -> Result<Accepted, PlaneError> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Accepted::new()),
        Err(e) => return Err(PlaneError::io(path, e)),
    };
    let mut accepted = Accepted::new();
    for line in text.lines() {
        if let Some((key, digest)) = line.split_once(' ')
            && let Some(digest) = parse_digest(digest)
            && let Ok(manifest) = plane.manifest(key, digest)
            && manifest.files.iter().all(|file| {
                let path = plane.output_dir(key, digest).join(&file.name);
                std::fs::metadata(path).is_ok_and(|found| found.len() == file.bytes)
            })
        {
            accepted.insert(key.to_string(), digest);
        }
    }
    Ok(accepted)
}

/// Counts the jobs of one stage not yet accepted on `threads` threads,
/// logging each digest as it comes; the first error stops the others (the
/// jobs watch one flag, raised by a failure or by `cancel`, seen between
/// jobs).
fn run_stage(
    plane: &Plane,
    keys: &[String],
    accepted: &Accepted,
    threads: usize,
    cancel: &AtomicBool,
    log: &Mutex<impl Write + Send>,
) -> Result<BTreeMap<String, u128>, PlaneError> {
    let todo: Vec<&String> = keys.iter().filter(|key| !accepted.contains_key(*key)).collect();
    let mut counts: BTreeMap<String, u128> =
        keys.iter().filter_map(|key| accepted.get(key).map(|digest| (key.clone(), *digest))).collect();
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let results = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..threads.max(1) {
            scope.spawn(|| {
                loop {
                    if cancel.load(Ordering::Relaxed) {
                        stop.store(true, Ordering::Relaxed);
                    }
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let Some(key) = todo.get(next.fetch_add(1, Ordering::Relaxed)) else { break };
                    let result = plane.count(key, accepted, &stop);
                    match &result {
                        Ok(count) => {
                            let mut log = log.lock().expect("not poisoned");
                            let _ = writeln!(log, "{key} {}", digest_hex(*count)).and_then(|()| log.flush());
                        }
                        Err(_) => stop.store(true, Ordering::Relaxed),
                    }
                    results.lock().expect("not poisoned").push(((*key).clone(), result));
                }
            });
        }
    });
    let mut results = results.into_inner().expect("not poisoned");
    // The first failure in job order, rather than a cancellation it caused.
    results.sort_by(|a, b| a.0.cmp(&b.0));
    if let Some(failure) =
        results.iter().position(|(_, result)| matches!(result, Err(e) if !matches!(e, PlaneError::Cancelled)))
    {
        return Err(results.swap_remove(failure).1.unwrap_err());
    }
    if stop.load(Ordering::Relaxed) {
        return Err(PlaneError::Cancelled);
    }
    for (key, result) in results {
        counts.insert(key, result?);
    }
    Ok(counts)
}
