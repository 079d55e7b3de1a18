//! Tamper evidence in a directory that other workers write: what is found
//! in an output's place is checked byte for byte before it is trusted, and
//! what does not check is set aside in `ROOT/PLAN/quarantine/` (renamed,
//! never deleted), named in the log and in the job's error.
//!
//! - **Publishing** a job's output whose place is taken (another worker's
//!   copy, or one planted there) reads what is there in full: its manifest
//!   must be byte for byte this job's and every file must match its
//!   SHA-256, size and states. A copy that does not is set aside and this
//!   job's own copy is published in its place.
//! - **Reading** an accepted input that fails its digest (a file altered
//!   after it was accepted) sets that file (or, for a manifest, the whole
//!   output) aside and fails the job with [`PlaneError::Input`], naming the
//!   file and the job that wrote it: recounting that job writes it again.
//!
//! Before anything is set aside it is read again from its path: a file
//! that checks now (another worker put a good copy there meanwhile) stays.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use crate::file::{FileEntry, LayerReader};
use crate::{Manifest, Plane, PlaneError, TEMPORARY};

/// An accepted file a job reads: which job wrote it, under which digest.
pub(crate) struct InputFile {
    pub input: String,
    pub digest: u128,
    pub entry: FileEntry,
    /// The layer its states belong to.
    pub rows: usize,
}

/// Whether an error reading what should be a layer file or an output is
/// the fault of what is there (it cannot be what its manifest says: a
/// directory where a file should be, a file where a directory should be,
/// bytes that end early), not of this machine (no memory, too many open
/// files, a failing disk), which says nothing against it.
pub(crate) fn fault_of_what_is_there(error: &PlaneError) -> bool {
    use std::io::ErrorKind::{InvalidData, IsADirectory, NotADirectory, UnexpectedEof};
    match error {
        PlaneError::Corrupt { .. } | PlaneError::Missing { .. } | PlaneError::Shape(_) => true,
        PlaneError::Io { error, .. } => {
            matches!(error.kind(), NotADirectory | IsADirectory | UnexpectedEof | InvalidData)
        }
        _ => false,
    }
}

impl Plane {
    /// `ROOT/PLAN/quarantine`: outputs and files set aside because they did
    /// not match their manifests (kept for a look; an operator removes them).
    pub fn quarantine_dir(&self) -> PathBuf {
        self.plan_dir().join("quarantine")
    }

    pub(crate) fn input_path(&self, file: &InputFile) -> PathBuf {
        self.output_dir(&file.input, file.digest).join(&file.entry.name)
    }

    /// Reads a file in full against its entry.
    fn check_file(&self, path: &Path, entry: &FileEntry, rows: usize) -> Result<(), PlaneError> {
        for record in LayerReader::open(path, self.plan().c(), rows, Some(entry))? {
            record?;
        }
        Ok(())
    }

    /// Whether `dir` holds exactly the output `text` (a manifest) says:
    /// the same manifest, and every file in full.
    pub(crate) fn check_output(
        &self,
        dir: &Path,
        text: &str,
        manifest: &Manifest,
        rows: usize,
    ) -> Result<(), PlaneError> {
        let path = dir.join("manifest");
        let found = std::fs::read(&path).map_err(|e| PlaneError::missing_or_io(&path, e))?;
        if found != text.as_bytes() {
            return Err(PlaneError::corrupt(&path, "another manifest holds this digest's place".into()));
        }
        for entry in &manifest.files {
            self.check_file(&dir.join(&entry.name), entry, rows)?;
        }
        Ok(())
    }

    /// The name of `path` (in the plan's directory) in the quarantine, but
    /// for what makes it unique: `map-1-0-DIGEST-part-00002.layer`.
    fn aside_name(&self, path: &Path) -> String {
        let relative = path.strip_prefix(self.plan_dir()).unwrap_or(path);
        let name: Vec<String> = relative.iter().map(|part| part.to_string_lossy().into_owned()).collect();
        name.join("-")
    }

    /// Renames `path` into the quarantine under a new name; `None` if it is
    /// gone already (someone else set it aside).
    fn move_aside(&self, path: &Path) -> Result<Option<PathBuf>, PlaneError> {
        let quarantine = self.quarantine_dir();
        std::fs::create_dir_all(&quarantine).map_err(|e| PlaneError::io(&quarantine, e))?;
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let aside = quarantine.join(format!(
            "{}.{}.{nanos}.{}",
            self.aside_name(path),
            std::process::id(),
            TEMPORARY.fetch_add(1, Ordering::Relaxed)
        ));
        match std::fs::rename(path, &aside) {
            Ok(()) => Ok(Some(aside)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(PlaneError::io(path, e)),
        }
    }

    /// Publishing found `target` holding something other than this output
    /// (`reason`): it is set aside. If what was moved checks after all (an
    /// honest worker's identical copy put there meanwhile), it is removed:
    /// this output, identical, takes its place.
    pub(crate) fn set_aside_output(
        &self,
        key: &str,
        target: &Path,
        (text, manifest, rows): (&str, &Manifest, usize),
        reason: &PlaneError,
    ) -> Result<(), PlaneError> {
        let Some(aside) = self.move_aside(target)? else { return Ok(()) };
        if self.check_output(&aside, text, manifest, rows).is_ok() {
            std::fs::remove_dir_all(&aside).map_err(|e| PlaneError::io(&aside, e))?;
            return Ok(());
        }
        tracing::error!(
            job = key,
            output = %target.display(),
            set_aside = %aside.display(),
            %reason,
            "an output in this job's place does not match its manifest: set aside, and this worker's own \
             copy published in its place"
        );
        Ok(())
    }

    /// The error of a job that failed while reading `files` (its accepted
    /// inputs): a file that fails its digest is set aside and named, with
    /// the job that wrote it ([`PlaneError::Input`]). An error no file is
    /// named in (a merge of several files that goes wrong, a record that is
    /// no state) is blamed on the first of `files` that does not check in
    /// full, if any.
    pub(crate) fn blame(&self, error: PlaneError, files: &[InputFile]) -> PlaneError {
        if !fault_of_what_is_there(&error) {
            return error;
        }
        let named = match &error {
            PlaneError::Corrupt { path, .. } | PlaneError::Missing { path } | PlaneError::Io { path, .. } => {
                files.iter().find(|file| self.input_path(file) == *path)
            }
            // A record that is no state of its layer: some file's bytes.
            _ => None,
        };
        let (file, error) = match (named, &error) {
            (Some(file), _) => (file, error),
            (None, PlaneError::Corrupt { .. } | PlaneError::Shape(_)) => {
                let Some((file, found)) = files.iter().find_map(|file| {
                    let path = self.input_path(file);
                    self.check_file(&path, &file.entry, file.rows).err().map(|found| (file, found))
                }) else {
                    return error;
                };
                (file, found)
            }
            (None, _) => return error,
        };
        let path = self.input_path(file);
        let set_aside = match &error {
            PlaneError::Missing { .. } => None,
            // Read again: a good copy put there meanwhile stays.
            _ if self.check_file(&path, &file.entry, file.rows).is_err() => self.move_aside(&path).unwrap_or(None),
            _ => None,
        };
        self.input_error(&file.input, error, set_aside)
    }

    /// A manifest of an accepted input that cannot be read or does not
    /// check: the whole output is set aside if it does not check when read
    /// again.
    pub(crate) fn blame_manifest(&self, input: &str, digest: u128, error: PlaneError) -> PlaneError {
        let set_aside = match &error {
            PlaneError::Missing { .. } => None,
            _ if !fault_of_what_is_there(&error) => return error,
            _ if self.manifest(input, digest).is_err() => {
                self.move_aside(&self.output_dir(input, digest)).unwrap_or(None)
            }
            _ => None,
        };
        self.input_error(input, error, set_aside)
    }

    /// Where a missing `path` was set aside before, if it was (the first
    /// such name).
    fn set_aside_before(&self, path: &Path) -> Option<PathBuf> {
        let prefix = format!("{}.", self.aside_name(path));
        let mut found: Vec<PathBuf> = std::fs::read_dir(self.quarantine_dir())
            .ok()?
            .filter_map(|entry| entry.ok())
            .filter(|entry| entry.file_name().to_string_lossy().starts_with(&prefix))
            .map(|entry| entry.path())
            .collect();
        found.sort();
        found.into_iter().next()
    }

    fn input_error(&self, input: &str, error: PlaneError, set_aside: Option<PathBuf>) -> PlaneError {
        if let (None, PlaneError::Missing { path }) = (&set_aside, &error) {
            // Gone because an earlier reader set it (or its whole output) aside.
            let output = path.parent().unwrap_or(path);
            let before = self.set_aside_before(path).or_else(|| self.set_aside_before(output));
            return PlaneError::Input { input: input.to_string(), error: Box::new(error), set_aside: before };
        }
        if let Some(aside) = &set_aside {
            tracing::error!(
                input,
                %error,
                set_aside = %aside.display(),
                "an accepted output does not match its digest: set aside; counting the job that wrote it \
                 again (census recount) writes it again"
            );
        }
        PlaneError::Input { input: input.to_string(), error: Box::new(error), set_aside }
    }
}
