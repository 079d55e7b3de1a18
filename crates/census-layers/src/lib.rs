//! The layer recurrence's data plane: the parts of each layer as files in a
//! directory every worker reaches (a shared volume, NFS; an object store
//! later), and the map, reduce and class jobs of a `layers` census
//! ([`census_math::shapes::layer_jobs`]) run over it.
//!
//! Not the mathematics (`census_math::shapes::layers` emits and
//! canonicalises states), not the queue (the store leases the jobs and
//! keeps their accepted counts): a job here is given its key and the
//! accepted digests of the jobs it reads, and returns its count.
//!
//! **Trust.** A map or reduce job's count is the digest of its manifest
//! ([`manifest`]: census, job, inputs' digests, each file's SHA-256). Its
//! files are written under a temporary name, then the directory is renamed
//! to `ROOT/PLAN/JOB/DIGEST/`: two honest workers write the same bytes to
//! the same place (a quorum of two agrees on the digest), and nothing is
//! overwritten. A job reads only outputs whose digest the store accepted,
//! and checks every byte against them ([`Plane::manifest`],
//! [`file::LayerReader`]): a missing, truncated or altered file fails the
//! job with its path and the job that wrote it ([`PlaneError::Input`]),
//! before it publishes anything.
//!
//! **Tamper evidence.** Any worker may write the shared directory, so what
//! is found in an output's place is never trusted on its manifest alone:
//! publishing onto a taken place reads what is there in full, and a copy
//! that does not match is set aside in `ROOT/PLAN/quarantine/` (renamed,
//! never deleted) and replaced by this job's own; an accepted file that
//! fails its digest when read is set aside too, and recounting the job that
//! wrote it writes it again (`trust`).
//!
//! ```text
//! ROOT/2x5-s8-p8/map-2-3/<digest>/manifest          the job's manifest
//! ROOT/2x5-s8-p8/map-2-3/<digest>/part-00005.layer  its part 5
//! ROOT/2x5-s8-p8/reduce-2-5/<digest>/layer3-part00005.layer
//! ROOT/2x5-s8-p8/tmp/...                            work in progress
//! ROOT/2x5-s8-p8/quarantine/...                     set aside: did not match
//! ```

pub mod file;
mod jobs;
pub mod local;
pub mod manifest;
mod trust;

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use census_math::census::Census;
use census_math::shapes::ShapeError;
use census_math::shapes::layer_jobs::{LayerJob, LayerPlan, StateKey};

pub use manifest::{Manifest, digest_hex, digest_of};
use trust::InputFile;

/// The accepted count of each job a job reads, by key: for a map or reduce
/// job the digest of its manifest.
pub type Accepted = BTreeMap<String, u128>;

/// Why a job of the data plane failed.
#[derive(Debug)]
pub enum PlaneError {
    /// Reading or writing a path failed.
    Io { path: PathBuf, error: std::io::Error },
    /// An input file or manifest that should be there is not.
    Missing { path: PathBuf },
    /// A file or manifest is not what its accepted digest says.
    Corrupt { path: PathBuf, reason: String },
    /// The job reads a job whose accepted digest was not given.
    NoAcceptedInput { job: String, input: String },
    /// An accepted output of job `input` is missing or does not match its
    /// digest (`error`); what did not match was set aside (`set_aside`: by
    /// this reader, or by one before if it is missing). Recounting `input`
    /// writes it again.
    Input { input: String, error: Box<PlaneError>, set_aside: Option<PathBuf> },
    /// A key, plan or state the mathematics refuses.
    Shape(ShapeError),
    /// The census is not a `layers` census.
    NotLayers(String),
    /// The cancellation flag was set; nothing was published.
    Cancelled,
}

impl PlaneError {
    pub(crate) fn io(path: &Path, error: std::io::Error) -> PlaneError {
        PlaneError::Io { path: path.to_path_buf(), error }
    }

    pub(crate) fn missing_or_io(path: &Path, error: std::io::Error) -> PlaneError {
        if error.kind() == std::io::ErrorKind::NotFound {
            PlaneError::Missing { path: path.to_path_buf() }
        } else {
            PlaneError::io(path, error)
        }
    }

    pub(crate) fn corrupt(path: &Path, reason: String) -> PlaneError {
        PlaneError::Corrupt { path: path.to_path_buf(), reason }
    }

    /// The job whose accepted output is missing or bad, if that is the
    /// error: the job an operator recounts.
    pub fn bad_input(&self) -> Option<&str> {
        match self {
            PlaneError::Input { input, .. } => Some(input),
            _ => None,
        }
    }
}

impl fmt::Display for PlaneError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PlaneError::Io { path, error } => write!(f, "{}: {error}", path.display()),
            PlaneError::Missing { path } => write!(f, "{}: missing (an accepted output is gone)", path.display()),
            PlaneError::Corrupt { path, reason } => {
                write!(f, "{}: does not match its accepted digest: {reason}", path.display())
            }
            PlaneError::NoAcceptedInput { job, input } => {
                write!(f, "job {job} reads {input}, whose accepted digest was not given")
            }
            PlaneError::Input { input, error, set_aside } => {
                write!(f, "{error}")?;
                if let Some(aside) = set_aside {
                    write!(f, "; set aside as {}", aside.display())?;
                }
                write!(f, "; written by job {input}, which a recount writes again")
            }
            PlaneError::Shape(error) => error.fmt(f),
            PlaneError::NotLayers(census) => write!(f, "{census} is not a layers census"),
            PlaneError::Cancelled => f.write_str("the job was cancelled; nothing was published"),
        }
    }
}

impl std::error::Error for PlaneError {}

impl From<ShapeError> for PlaneError {
    fn from(error: ShapeError) -> PlaneError {
        PlaneError::Shape(error)
    }
}

impl From<census_math::shapes::layer_jobs::RunError> for PlaneError {
    fn from(error: census_math::shapes::layer_jobs::RunError) -> PlaneError {
        PlaneError::Corrupt { path: PathBuf::from("(merged runs)"), reason: error.to_string() }
    }
}

/// How many states a map job sums in memory before it spills them to
/// sorted runs (about 40 bytes a state in its tables): the output is the
/// same whatever this is.
pub const DEFAULT_SPILL_STATES: usize = 1 << 25;

/// How many times publishing renames a job's output into its place, each
/// after setting aside what held it.
const PUBLISH_TRIES: usize = 4;

/// The data plane of one `layers` census over one root directory.
pub struct Plane {
    census: Census,
    plan: LayerPlan,
    root: PathBuf,
    spill_states: usize,
    /// Parts of the last layer read by class jobs, by path, kept once
    /// verified (a process answers many classes from one part).
    last_parts: Mutex<BTreeMap<PathBuf, Part>>,
}

/// The states of one part of a layer, in memory: (key, T), sorted.
pub(crate) type Part = Arc<Vec<(StateKey, u128)>>;

pub(crate) static TEMPORARY: AtomicU64 = AtomicU64::new(0);

impl Plane {
    /// The plane of `census` (a `layers` census) under `root`.
    pub fn new(census: Census, root: &Path) -> Result<Plane, PlaneError> {
        let plan = census.layer_plan().map_err(|_| PlaneError::NotLayers(census.to_string()))?;
        Ok(Plane {
            census,
            plan,
            root: root.to_path_buf(),
            spill_states: DEFAULT_SPILL_STATES,
            last_parts: Mutex::default(),
        })
    }

    /// Spill a map job's sums to disk past this many states (the files
    /// written are the same).
    pub fn with_spill_states(mut self, states: usize) -> Plane {
        self.spill_states = states.max(1);
        self
    }

    pub fn census(&self) -> Census {
        self.census
    }

    pub fn plan(&self) -> &LayerPlan {
        &self.plan
    }

    /// `ROOT/2xC-sS-pP`: this plan's files.
    pub fn plan_dir(&self) -> PathBuf {
        let plan = &self.plan;
        self.root.join(format!("2x{}-s{}-p{}", plan.c(), plan.shards(), plan.parts()))
    }

    /// Where a job's output with a given digest lives.
    pub fn output_dir(&self, key: &str, digest: u128) -> PathBuf {
        let name = key.split_once('/').map_or(key, |(_, rest)| rest).replace('/', "-");
        self.plan_dir().join(name).join(digest_hex(digest))
    }

    /// A fresh directory for work in progress.
    pub(crate) fn temporary_dir(&self, key: &str) -> Result<PathBuf, PlaneError> {
        let tmp = self.plan_dir().join("tmp");
        std::fs::create_dir_all(&tmp).map_err(|e| PlaneError::io(&tmp, e))?;
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let name = format!(
            "{}.{}.{nanos}.{}",
            key.replace('/', "-"),
            std::process::id(),
            TEMPORARY.fetch_add(1, Ordering::Relaxed)
        );
        let dir = tmp.join(name);
        std::fs::create_dir(&dir).map_err(|e| PlaneError::io(&dir, e))?;
        Ok(dir)
    }

    /// Counts one job of the census: a map or reduce job writes its files
    /// and returns its digest; a class job returns its F. `accepted` holds
    /// the accepted digests of (at least) the jobs it reads.
    pub fn count(
        &self,
        key: &str,
        accepted: &Accepted,
        cancel: &std::sync::atomic::AtomicBool,
    ) -> Result<u128, PlaneError> {
        match self.plan.parse(key)? {
            LayerJob::Map { step, shard } => self.map(key, step, shard, accepted, cancel),
            LayerJob::Reduce { step, part } => self.reduce(key, step, part, accepted, cancel),
            LayerJob::Class { state, .. } => self.class(key, &state, accepted),
        }
    }

    /// The manifest of a job's accepted output, checked: it is there, its
    /// digest is the accepted one, and it names this census and job.
    pub fn manifest(&self, key: &str, digest: u128) -> Result<Manifest, PlaneError> {
        let path = self.output_dir(key, digest).join("manifest");
        let text = std::fs::read(&path).map_err(|e| PlaneError::missing_or_io(&path, e))?;
        let found = digest_of(&text);
        if found != digest {
            return Err(PlaneError::corrupt(
                &path,
                format!("its digest is {}, the accepted one {}", digest_hex(found), digest_hex(digest)),
            ));
        }
        let text = String::from_utf8(text).map_err(|_| PlaneError::corrupt(&path, "not UTF-8".into()))?;
        let manifest = Manifest::parse(&text).map_err(|reason| PlaneError::corrupt(&path, reason))?;
        if manifest.census != self.census.to_string() || manifest.job != key {
            return Err(PlaneError::corrupt(
                &path,
                format!("it is job {} of {}, not {key} of {}", manifest.job, manifest.census, self.census),
            ));
        }
        Ok(manifest)
    }

    /// Finds and checks every file job `key` would read, given the
    /// accepted digests of the stage before, without counting it: each
    /// input's manifest against its digest, then each file it needs in
    /// full (size, SHA-256, states). The first mismatch or missing file is
    /// the error, naming its path and the job that wrote it (a file that
    /// does not match is set aside, as a job's read does). (A job checks
    /// the same as it reads; this is for a worker that wants to know before
    /// it starts.)
    pub fn verify_inputs(&self, key: &str, accepted: &Accepted) -> Result<(), PlaneError> {
        let job = self.plan.parse(key)?;
        let c = self.plan.c();
        let (rows, wanted_part) = match job {
            LayerJob::Map { step, .. } => (step, None),
            LayerJob::Reduce { step, part } => (step + 1, Some(part)),
            LayerJob::Class { .. } => (c, None),
        };
        for (input, digest, manifest) in self.input_manifests(key, &job, accepted)? {
            for entry in manifest.files.iter().filter(|entry| wanted_part.is_none_or(|part| part == entry.part)) {
                let file = InputFile { input: input.clone(), digest, entry: entry.clone(), rows };
                self.read_input(&file, |_| Ok(()))?;
            }
        }
        Ok(())
    }

    /// Reads one accepted input file in full, record by record, into
    /// `visit`; a file that fails its digest is blamed ([`Plane::blame`]).
    pub(crate) fn read_input(
        &self,
        file: &InputFile,
        mut visit: impl FnMut((StateKey, u128)) -> Result<(), PlaneError>,
    ) -> Result<(), PlaneError> {
        let path = self.input_path(file);
        let mut read = || -> Result<(), PlaneError> {
            for record in file::LayerReader::open(&path, self.plan.c(), file.rows, Some(&file.entry))? {
                visit(record?)?;
            }
            Ok(())
        };
        read().map_err(|error| self.blame(error, std::slice::from_ref(file)))
    }

    /// The manifests of the jobs `job` reads, in the plan's order, each
    /// with its key and accepted digest.
    pub(crate) fn input_manifests(
        &self,
        key: &str,
        job: &LayerJob,
        accepted: &Accepted,
    ) -> Result<Vec<(String, u128, Manifest)>, PlaneError> {
        self.plan
            .inputs(job)
            .iter()
            .map(|input| {
                let input = self.plan.key(input);
                let digest = *accepted
                    .get(&input)
                    .ok_or_else(|| PlaneError::NoAcceptedInput { job: key.to_string(), input: input.clone() })?;
                let manifest = self.manifest(&input, digest).map_err(|e| self.blame_manifest(&input, digest, e))?;
                Ok((input, digest, manifest))
            })
            .collect()
    }

    /// Publishes a finished temporary directory (files and manifest text)
    /// as the job's output, its files of layer `rows`: the manifest is
    /// written, the directory renamed to its digest's place. Another
    /// writer's identical output there already is success, once every byte
    /// of it is checked; anything else there is set aside and this output
    /// takes its place (`trust`).
    pub(crate) fn publish(&self, key: &str, dir: &Path, manifest: &Manifest, rows: usize) -> Result<u128, PlaneError> {
        let text = manifest.render();
        let digest = digest_of(text.as_bytes());
        let path = dir.join("manifest");
        std::fs::write(&path, &text).map_err(|e| PlaneError::io(&path, e))?;
        let target = self.output_dir(key, digest);
        let parent = target.parent().expect("an output dir has a parent");
        std::fs::create_dir_all(parent).map_err(|e| PlaneError::io(parent, e))?;
        // A few tries: each one that fails has set aside what was there,
        // unless another worker's copy took the place meanwhile.
        let mut last = None;
        for _ in 0..PUBLISH_TRIES {
            match std::fs::rename(dir, &target) {
                Ok(()) => return Ok(digest),
                Err(e) => last = Some(e),
            }
            match std::fs::symlink_metadata(&target) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(PlaneError::io(&target, e)),
                Ok(_) => {}
            }
            match self.check_output(&target, &text, manifest, rows) {
                Ok(()) => {
                    std::fs::remove_dir_all(dir).map_err(|e| PlaneError::io(dir, e))?;
                    return Ok(digest);
                }
                Err(reason) if trust::fault_of_what_is_there(&reason) => {
                    self.set_aside_output(key, &target, (&text, manifest, rows), &reason)?;
                }
                // Unreadable for a reason of this machine's: nothing is
                // known against the copy there.
                Err(error) => return Err(error),
            }
        }
        let error = last.unwrap_or_else(|| std::io::Error::other("the place stays taken"));
        Err(PlaneError::io(&target, error))
    }
}
