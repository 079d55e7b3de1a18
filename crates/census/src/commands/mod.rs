//! One module per subcommand. Each has an `Args` (clap) and a `run` that
//! returns the process exit code or an error.

use std::process::ExitCode;

pub mod bench;
pub mod classes;
pub mod client;
pub mod coordinator;
pub mod count_band;
pub mod operate;
pub mod recount;
pub mod roles;
pub mod run;
pub mod status;
pub mod submit;
pub mod token;
pub mod verify;
pub mod worker;

/// A user error (bad input): exit code 2, as clap uses for bad arguments.
#[derive(Debug)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// Parses a stage for clap: a class count or a name.
pub fn parse_stage(text: &str) -> Result<census_math::Stage, census_math::UnknownStage> {
    text.parse()
}

/// Parses a counter name for clap.
pub fn parse_counter(text: &str) -> Result<census_math::CounterKind, census_math::counter::UnknownCounter> {
    text.parse()
}

/// The most threads (or workers) one process starts: far more than any
/// machine has cores, and far fewer than would exhaust the process.
pub const MAX_THREADS: usize = 1024;

/// Parses a thread count for clap: 1 to [`MAX_THREADS`].
pub fn parse_threads(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(n) if (1..=MAX_THREADS).contains(&n) => Ok(n),
        _ => Err(format!("{text:?} is not a thread count from 1 to {MAX_THREADS}")),
    }
}

/// Bad input exits 2; anything else that went wrong exits 1.
pub fn exit_code_for(error: &anyhow::Error) -> ExitCode {
    if error.chain().any(|cause| cause.is::<UsageError>() || cause.is::<census_math::BandError>()) {
        ExitCode::from(2)
    } else {
        ExitCode::FAILURE
    }
}
