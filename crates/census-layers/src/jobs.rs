//! The three kinds of job, as methods of [`Plane`]: map (emit a shard of a
//! layer's parents into parts), reduce (sum one part over the step's map
//! jobs) and class (F of one class from the last layer).

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use census_math::shapes::layer_jobs::{LayerJob, StateCodec, StateKey, partition_of, shard_range, sum_sorted_runs};
use census_math::shapes::layers::{self, LayerError, Masks};
use rustc_hash::FxBuildHasher;

use crate::file::{FileEntry, LayerReader, LayerWriter};
use crate::trust::InputFile;
use crate::{Accepted, Manifest, Part, Plane, PlaneError};

type Run = Box<dyn Iterator<Item = Result<(StateKey, u128), PlaneError>>>;

/// A job's work in progress: removed unless published.
struct Temporary(PathBuf);

impl Drop for Temporary {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl Plane {
    pub(crate) fn map(
        &self,
        key: &str,
        step: usize,
        shard: u32,
        accepted: &Accepted,
        cancel: &AtomicBool,
    ) -> Result<u128, PlaneError> {
        let (c, parts) = (self.plan().c(), self.plan().parts() as usize);
        let inputs = self.input_manifests(key, &LayerJob::Map { step, shard }, accepted)?;
        let work = Temporary(self.temporary_dir(key)?);
        let spills = Temporary(self.temporary_dir(&format!("{key}.spill"))?);
        let (parent_codec, child_codec) = (StateCodec::new(c, step)?, StateCodec::new(c, step + 1)?);

        let mut sums: Vec<HashMap<StateKey, u128, FxBuildHasher>> = vec![HashMap::default(); parts];
        let mut spilled: Vec<Vec<PathBuf>> = vec![Vec::new(); parts];
        let (mut entries, mut emissions, mut parents, mut overflow) = (0usize, 0u64, 0u64, None);
        let mut expand = |masks: &Masks,
                          total: u128,
                          sums: &mut Vec<HashMap<StateKey, u128, FxBuildHasher>>|
         -> Result<(), PlaneError> {
            parents += 1;
            emissions += layers::emit(c, masks, total, cancel, &mut |child, weight| {
                let child = child_codec.pack(&child);
                match sums[partition_of(child, parts as u32) as usize].entry(child) {
                    Entry::Occupied(mut sum) => match sum.get().checked_add(weight) {
                        Some(added) => *sum.get_mut() = added,
                        None => overflow = Some(child),
                    },
                    Entry::Vacant(slot) => {
                        slot.insert(weight);
                        entries += 1;
                    }
                }
            })
            .map_err(|e| match e {
                LayerError::Cancelled => PlaneError::Cancelled,
                LayerError::Shape(e) => PlaneError::Shape(e),
            })?;
            if let Some(child) = overflow {
                return Err(PlaneError::Corrupt {
                    path: work.0.clone(),
                    reason: format!("the sum at child {child:#x} passes 128 bits"),
                });
            }
            if entries > self.spill_states {
                for (part, sums) in sums.iter_mut().enumerate() {
                    if !sums.is_empty() {
                        let path = spills.0.join(format!("spill-{part:05}-{:05}", spilled[part].len()));
                        write_sorted(&path, c, step + 1, part as u32, sums.drain())?;
                        spilled[part].push(path);
                    }
                }
                entries = 0;
            }
            Ok(())
        };

        self.parents_of_shard(step, shard, &inputs, &parent_codec, &mut |masks, total| {
            expand(masks, total, &mut sums)
        })?;
        let files = write_parts(&work.0, c, step + 1, sums, &spilled)?;
        let manifest = Manifest {
            census: self.census().to_string(),
            job: key.to_string(),
            inputs: inputs.iter().map(|(input, digest, _)| (input.clone(), *digest)).collect(),
            parents,
            emissions,
            files,
        };
        self.publish(key, &work.0, &manifest, step + 1)
    }

    /// Hands every parent state of `shard` of layer `step` to `expand`:
    /// the first layer's states at step 1, else the shard's range of the
    /// states of `inputs` (every byte of them read and hashed).
    fn parents_of_shard(
        &self,
        step: usize,
        shard: u32,
        inputs: &[(String, u128, Manifest)],
        parent_codec: &StateCodec,
        expand: &mut dyn FnMut(&Masks, u128) -> Result<(), PlaneError>,
    ) -> Result<(), PlaneError> {
        let c = self.plan().c();
        if step == 1 {
            for (masks, total) in layers::first_layer(c)?.states() {
                expand(masks, *total)?;
            }
            return Ok(());
        }
        let states: u64 = inputs.iter().flat_map(|(_, _, manifest)| &manifest.files).map(|f| f.states).sum();
        let range = shard_range(states, self.plan().shards_of_step(step), shard);
        let mut first = 0u64;
        for (input, digest, manifest) in inputs {
            for entry in &manifest.files {
                let (start, end) = (first, first + entry.states);
                first = end;
                if end <= range.start || start >= range.end {
                    continue;
                }
                let file = InputFile { input: input.clone(), digest: *digest, entry: entry.clone(), rows: step };
                let mut index = start;
                self.read_input(&file, |(state, total)| {
                    index += 1;
                    if range.contains(&(index - 1)) {
                        expand(&parent_codec.unpack(state)?, total)?;
                    }
                    Ok(())
                })?;
            }
        }
        Ok(())
    }

    pub(crate) fn reduce(
        &self,
        key: &str,
        step: usize,
        part: u32,
        accepted: &Accepted,
        cancel: &AtomicBool,
    ) -> Result<u128, PlaneError> {
        let c = self.plan().c();
        let inputs = self.input_manifests(key, &LayerJob::Reduce { step, part }, accepted)?;
        let work = Temporary(self.temporary_dir(key)?);
        let files: Vec<InputFile> = inputs
            .iter()
            .flat_map(|(input, digest, manifest)| {
                manifest.files.iter().filter(|entry| entry.part == part).map(|entry| InputFile {
                    input: input.clone(),
                    digest: *digest,
                    entry: entry.clone(),
                    rows: step + 1,
                })
            })
            .collect();
        let merge = || -> Result<FileEntry, PlaneError> {
            let mut runs: Vec<Run> = Vec::new();
            for file in &files {
                runs.push(Box::new(LayerReader::open(&self.input_path(file), c, step + 1, Some(&file.entry))?));
            }
            if cancel.load(std::sync::atomic::Ordering::Relaxed) {
                return Err(PlaneError::Cancelled);
            }
            let path = work.0.join(format!("layer{}-part{part:05}.layer", step + 1));
            write_runs(&path, c, step + 1, part, runs)
        };
        let file = merge().map_err(|error| self.blame(error, &files))?;
        let manifest = Manifest {
            census: self.census().to_string(),
            job: key.to_string(),
            inputs: inputs.iter().map(|(input, digest, _)| (input.clone(), *digest)).collect(),
            parents: 0,
            emissions: 0,
            files: vec![file],
        };
        self.publish(key, &work.0, &manifest, step + 1)
    }

    pub(crate) fn class(&self, key: &str, state: &Masks, accepted: &Accepted) -> Result<u128, PlaneError> {
        let c = self.plan().c();
        let job = self.plan().parse(key)?;
        let inputs = self.input_manifests(key, &job, accepted)?;
        let (input, digest, manifest) = inputs.first().expect("a class job reads one part");
        let [entry] = &manifest.files[..] else {
            return Err(PlaneError::corrupt(
                &self.output_dir(input, *digest),
                format!("a reduce job writes one file, not {}", manifest.files.len()),
            ));
        };
        let file = InputFile { input: input.clone(), digest: *digest, entry: entry.clone(), rows: c };
        let path = self.input_path(&file);
        let states = self.last_part(&path, entry).map_err(|error| self.blame(error, std::slice::from_ref(&file)))?;
        let wanted = StateCodec::new(c, c)?.pack(state);
        let total = match states.binary_search_by_key(&wanted, |state| state.0) {
            Ok(index) => states[index].1,
            Err(_) => {
                return Err(PlaneError::corrupt(&path, format!("the state of class {key} is not in it")));
            }
        };
        let (_, _, bands) = layers::bands_of_class(c, state, total)?;
        Ok(bands)
    }

    /// A part of the last layer, read and checked once per process.
    fn last_part(&self, path: &Path, entry: &FileEntry) -> Result<Part, PlaneError> {
        let c = self.plan().c();
        if let Some(states) = self.last_parts.lock().expect("not poisoned").get(path) {
            return Ok(states.clone());
        }
        let states: Vec<(StateKey, u128)> = LayerReader::open(path, c, c, Some(entry))?.collect::<Result<_, _>>()?;
        let states = Arc::new(states);
        self.last_parts.lock().expect("not poisoned").insert(path.to_path_buf(), states.clone());
        Ok(states)
    }
}

/// Writes a map job's part files of layer `rows` in `dir`: each part's
/// sums in memory and its spilled runs, summed (a part with neither has
/// no file).
fn write_parts(
    dir: &Path,
    c: usize,
    rows: usize,
    sums: Vec<HashMap<StateKey, u128, FxBuildHasher>>,
    spilled: &[Vec<PathBuf>],
) -> Result<Vec<FileEntry>, PlaneError> {
    let mut files = Vec::new();
    for (part, sums) in sums.into_iter().enumerate() {
        let mut memory: Vec<(StateKey, u128)> = sums.into_iter().collect();
        if memory.is_empty() && spilled[part].is_empty() {
            continue;
        }
        memory.sort_unstable_by_key(|state| state.0);
        let mut runs: Vec<Run> = Vec::new();
        for path in &spilled[part] {
            runs.push(Box::new(LayerReader::open(path, c, rows, None)?));
        }
        runs.push(Box::new(memory.into_iter().map(Ok)));
        let path = dir.join(format!("part-{part:05}.layer"));
        files.push(write_runs(&path, c, rows, part as u32, runs)?);
    }
    Ok(files)
}

/// Writes states in any order, sorted, to a new file.
fn write_sorted(
    path: &Path,
    c: usize,
    rows: usize,
    part: u32,
    states: impl Iterator<Item = (StateKey, u128)>,
) -> Result<FileEntry, PlaneError> {
    let mut states: Vec<(StateKey, u128)> = states.collect();
    states.sort_unstable_by_key(|state| state.0);
    let mut writer = LayerWriter::create(path, c, rows)?;
    for (key, total) in states {
        writer.push(key, total)?;
    }
    writer.finish(part)
}

/// Sums sorted runs by key into a new file.
fn write_runs(path: &Path, c: usize, rows: usize, part: u32, runs: Vec<Run>) -> Result<FileEntry, PlaneError> {
    let mut writer = LayerWriter::create(path, c, rows)?;
    sum_sorted_runs(runs, |key, total| writer.push(key, total))?;
    writer.finish(part)
}
