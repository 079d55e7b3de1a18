//! One module per subcommand. Each has an `Args` (clap) and a `run` that
//! returns the process exit code or an error.

use std::process::ExitCode;

use census_store::DatabaseLocation;

pub mod bench;
pub mod classes;
pub mod client;
pub mod coordinator;
pub mod count_band;
pub mod generate;
pub mod layers;
pub mod operate;
pub mod recount;
pub mod roles;
pub mod run;
pub mod simulate;
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

/// Why a command stopped printing: the reader of its output went away
/// (`census status | head -1`). Not a failure: `main` ends quietly, exit 0,
/// as the commands that only print do by SIGPIPE's default action.
#[derive(Debug)]
pub struct OutputClosed;

impl std::fmt::Display for OutputClosed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the reader of the output went away")
    }
}

impl std::error::Error for OutputClosed {}

/// Writes `text` to stdout and flushes it. For the commands that open
/// sockets and so keep SIGPIPE ignored (see `main.rs`): there `println!`
/// panics on a closed stdout, and this returns [`OutputClosed`] instead.
pub fn print(text: &str) -> anyhow::Result<()> {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(text.as_bytes()).and_then(|()| stdout.flush()) {
        Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => Err(OutputClosed.into()),
        written => Ok(written?),
    }
}

/// The stages, as every command's help names them.
pub const STAGE_HELP: &str = "The stage: 44|russell, 71|felgenhauer-jarvis, 174|rectangles, 416|rows, \
     2051|stacks-columns, 36288|catalogue (every band its own class)";

/// The counters, as every command's help describes them.
pub const COUNTER_HELP: &str = "The counter: column-sets (microseconds a job), banded (about 0.1 s a job) \
     or enumerate (the paper's plain backtracking, under a second a job)";

/// `--census`'s parser: the census's own error, its text shown short
/// (`census_math::census::shown`), where clap's own parser would echo the
/// whole value first (a 100 KB value was printed three times).
#[derive(Clone)]
pub struct CensusParser;

impl clap::builder::TypedValueParser for CensusParser {
    type Value = census_math::census::Census;

    fn parse_ref(
        &self,
        command: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<Self::Value, clap::Error> {
        let flag = arg.map_or_else(|| "--census".to_string(), |arg| format!("--{}", arg.get_id()));
        let refused = |message: String| {
            clap::Error::raw(clap::error::ErrorKind::ValueValidation, format!("{flag}: {message}\n")).with_cmd(command)
        };
        let text = value.to_str().ok_or_else(|| refused("not UTF-8".into()))?;
        text.parse().map_err(|error: census_math::census::CensusError| refused(error.to_string()))
    }
}

/// The kinds of census, as every command's help names them: one line a
/// kind, from the registry (`census_math::census::kinds`).
pub fn census_help() -> String {
    kinds_help("Count another kind of census instead of the 9x9 count (--stage, --counter)")
}

/// `lead`, what a command does with `--census`, then the kinds from the
/// registry, one line a kind.
pub fn kinds_help(lead: &str) -> String {
    let kinds: Vec<String> =
        census_math::census::kinds().map(|kind| format!("\"{}\": {}", kind.grammar, kind.help)).collect();
    format!("{lead}. Kinds: {}", kinds.join(". "))
}

/// The census a command means: `--census`, or else the 9x9 count of
/// `--stage` and `--counter`.
pub fn census_of(
    census: Option<census_math::census::Census>,
    stage: census_math::Stage,
    counter: census_math::CounterKind,
) -> census_math::census::Census {
    census.unwrap_or(census_math::census::Census::sudoku(stage, counter))
}

/// A band as a person types it: digits, maybe grouped by spaces, '/' or '|'.
pub fn strip_separators(text: &str) -> String {
    text.chars().filter(|c| !(c.is_whitespace() || *c == '/' || *c == '|')).collect()
}

/// Parses a stage for clap: a class count or a name.
pub fn parse_stage(text: &str) -> Result<census_math::Stage, census_math::UnknownStage> {
    text.parse()
}

/// Parses a counter name for clap.
pub fn parse_counter(text: &str) -> Result<census_math::CounterKind, census_math::counter::UnknownCounter> {
    text.parse()
}

/// How long `census run` and `census coordinator` wait for a database server
/// that does not answer yet (it may still be starting, as under docker
/// compose or Kubernetes), unless `CENSUS_DATABASE_WAIT` gives other seconds.
pub const DATABASE_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

/// Opens the store at `location`, retrying a Postgres server that cannot be
/// reached yet until [`DATABASE_WAIT`] (or `CENSUS_DATABASE_WAIT` seconds)
/// has passed since the first try; an SQLite file's errors, and any error a
/// retry cannot help, are final at once. The one policy of every role.
/// `connections` is the pool's size, as [`pool_for`] gave it.
pub async fn open_store(
    location: &DatabaseLocation,
    config: census_store::StoreConfig,
    connections: u32,
) -> Result<std::sync::Arc<dyn census_store::JobStore>, census_store::StoreError> {
    let wait = match std::env::var("CENSUS_DATABASE_WAIT") {
        Ok(seconds) => seconds.trim().parse().map(std::time::Duration::from_secs).map_err(|_| {
            census_store::StoreError::Invalid(format!("CENSUS_DATABASE_WAIT={seconds:?} is not a number of seconds"))
        })?,
        Err(_) => DATABASE_WAIT,
    };
    let started = std::time::Instant::now();
    loop {
        match census_store::open(location, config.clone(), Some(connections)).await {
            Err(error) if location.is_server() && error.is_retryable() && started.elapsed() + RETRY_PAUSE < wait => {
                tracing::warn!(%error, "cannot open the database yet; retrying in 2 s");
                tokio::time::sleep(RETRY_PAUSE).await;
            }
            opened => return opened,
        }
    }
}

const RETRY_PAUSE: std::time::Duration = std::time::Duration::from_secs(2);

/// `--max-calls-in-flight`, as every role that serves a coordinator says it.
pub const MAX_CALLS_IN_FLIGHT_HELP: &str = "Workers' calls that use the database at once, 1 to 100000 (default: twice \
     the store's connections, at least 8: 32 on Postgres, 8 on SQLite). More wait in a short queue (at most 256 a \
     call in flight, and only while the wait they can expect is short); past it they are refused at once with \
     UNAVAILABLE and a retry hint (grpc-retry-pushback-ms), new leases before heartbeats and reports, which keep \
     a quarter of the slots";

/// `--database-connections`, as every role that opens a store for a
/// coordinator says it.
pub const DATABASE_CONNECTIONS_HELP: &str = "Connections of the store's pool to a Postgres server, 1 to 1000 (default: \
     16). An SQLite file has one. Each coordinator opens this many: keep coordinators x connections under the \
     server's max_connections (or behind pgbouncer)";

/// The size of the store's pool at `location` (`--database-connections`,
/// or the store's default: `DatabaseLocation::pool_size`), checked before
/// anything is opened: a number the database cannot take is bad input.
pub fn pool_for(location: &DatabaseLocation, asked: Option<u32>) -> anyhow::Result<u32> {
    location.pool_size(asked).map_err(|error| match error {
        census_store::StoreError::Invalid(reason) => UsageError(format!("--database-connections: {reason}")).into(),
        error => error.into(),
    })
}

/// The coordinator's admission for a store whose pool has `connections`:
/// `calls` in flight if given (`--max-calls-in-flight`), or the default
/// of that pool.
pub fn admission_for(connections: u32, calls: Option<usize>) -> census_coordinator::AdmissionLimits {
    match calls {
        Some(calls) => census_coordinator::AdmissionLimits::with_calls(calls),
        None => census_coordinator::AdmissionLimits::for_pool(connections as usize),
    }
}

/// Opens a store that must exist already, to read it or change what it
/// holds (`status`, `verify`, `token list|revoke|release`): a missing SQLite
/// file is a wrong name, refused as bad input, and never created.
pub async fn open_existing_store(
    location: &DatabaseLocation,
) -> anyhow::Result<std::sync::Arc<dyn census_store::JobStore>> {
    if let Some(path) = location.sqlite_file()
        && !path.exists()
    {
        let path = path.display();
        return Err(UsageError(format!(
            "there is no database file {path}; `census run --database {path}` (or `census coordinator`) makes one"
        ))
        .into());
    }
    Ok(census_store::open(location, census_store::StoreConfig::default(), None).await?)
}

/// `--database` as clap reads it: a [`DatabaseLocation`], parsed once here
/// and carried typed from there on. A location that cannot be used is
/// refused with the flag's name and the store's reason, its password
/// hidden (clap's own message would quote the value whole).
#[derive(Clone)]
pub struct DatabaseParser;

impl clap::builder::TypedValueParser for DatabaseParser {
    type Value = DatabaseLocation;

    fn parse_ref(
        &self,
        _command: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<DatabaseLocation, clap::Error> {
        let flag = arg.and_then(clap::Arg::get_long).unwrap_or("database");
        let refused =
            |reason: String| clap::Error::raw(clap::error::ErrorKind::ValueValidation, format!("--{flag}: {reason}\n"));
        let text = value.to_str().ok_or_else(|| refused(format!("{} is not UTF-8", value.to_string_lossy())))?;
        text.parse().map_err(|error: census_store::StoreError| refused(error.to_string()))
    }
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

/// Prints a command-line error the way every other error is printed, one
/// line (`census: error: ...`, clap's tips on it), then the command's usage
/// where clap gives one, exit 2; help and version go to stdout, exit 0.
pub fn clap_error(error: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    if matches!(
        error.kind(),
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        let _ = error.print();
        return if error.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
            ExitCode::from(2)
        } else {
            ExitCode::SUCCESS
        };
    }
    let rendered = error.render().to_string();
    let (message, usage) = one_line_and_usage(&rendered);
    eprintln!("census: error: {message}");
    for line in usage {
        eprintln!("{line}");
    }
    ExitCode::from(2)
}

/// clap's rendered error as one line (the message, its indented
/// continuation and its tips) and the usage's lines; "For more
/// information, try '--help'." goes: the usage says as much.
fn one_line_and_usage(rendered: &str) -> (String, Vec<&str>) {
    let (mut message, mut usage) = (String::new(), Vec::new());
    let mut in_usage = false;
    for line in rendered.lines() {
        let text = line.trim();
        if text.is_empty() {
            in_usage = false;
            continue;
        }
        in_usage |= text.starts_with("Usage:");
        if in_usage {
            usage.push(line.trim_end());
        } else if text.starts_with("tip:") {
            message += &format!("; {text}");
        } else if !text.starts_with("For more information") {
            let text = text.trim_start_matches("error: ");
            message += &if message.is_empty() { text.to_string() } else { format!(" {text}") };
        }
    }
    if message.is_empty() {
        message = "invalid arguments".into();
    }
    (message, usage)
}

/// Bad input exits 2; anything else that went wrong exits 1.
pub fn exit_code_for(error: &anyhow::Error) -> ExitCode {
    let bad_input = |cause: &(dyn std::error::Error + 'static)| {
        cause.is::<UsageError>()
            || cause.is::<census_math::BandError>()
            || matches!(cause.downcast_ref(), Some(census_store::StoreError::BadLocation { .. }))
            || cause.downcast_ref::<census_proto::client::ConnectError>().is_some_and(|e| e.is_bad_settings())
    };
    if error.chain().any(bad_input) { ExitCode::from(2) } else { ExitCode::FAILURE }
}
