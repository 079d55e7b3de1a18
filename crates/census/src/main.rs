//! The `census` command. Each subcommand lives in its own module under
//! `commands/`; this file only parses the command line and dispatches.

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

mod commands;

/// The process's allocator. glibc's kept the memory a burst of calls freed
/// in its per-thread arenas: after a flood of 1 MB reports a coordinator
/// stayed at 4-5 times its size before it, its work done (issue 44);
/// mimalloc gives freed pages back by itself (BENCHMARKS.md, "A flood of
/// stale reports").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Count every 9x9 Sudoku grid exactly, the way Felgenhauer and Jarvis did,
/// on one machine (`census run`) or across a cluster (`census coordinator`
/// and `census worker`).
///
/// Every setting of the long-running roles can also be given as an
/// environment variable (shown as [env: ...]).
#[derive(Parser)]
#[command(name = "census", version, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the whole census on this machine: coordinator and workers in one process.
    Run(commands::run::Args),
    /// Serve the census over gRPC, with its state in a database.
    Coordinator(commands::coordinator::Args),
    /// Lease jobs from a coordinator, count them and report the counts.
    Worker(commands::worker::Args),
    /// Create a run on a running coordinator.
    Submit(commands::submit::Args),
    /// Show a run's progress, or its result when it is done.
    Status(commands::status::Args),
    /// Compare finished runs of one count: S across the 9x9 stages, or a census's answer (--census).
    Verify(commands::verify::Args),
    /// Resolve a conflicting job by counting it again.
    Recount(commands::recount::Args),
    /// Put a run's failed jobs back in the queue.
    Requeue(commands::operate::RequeueArgs),
    /// Cancel a run: it leases nothing more until it is submitted again.
    Cancel(commands::operate::CancelArgs),
    /// Change a run's priority: higher runs are leased first.
    Priority(commands::operate::PriorityArgs),
    /// Issue, list and revoke credentials (tokens), and lift quarantines.
    Token(commands::token::Args),
    /// Print the class table of a stage, or the jobs of a census (--census).
    Classes(commands::classes::Args),
    /// Count the completions of one band, seed by seed.
    CountBand(commands::count_band::Args),
    /// Count a stage, a census (--census) or a sample of its jobs (--sample) with no store; report the speed.
    Bench(commands::bench::Args),
    /// Run the 2 x C layer recurrence here, printing each layer's states and emissions.
    Layers(commands::layers::Args),
    /// Load-test the coordinator: N simulated workers on made-up jobs (counts of nothing).
    Simulate(commands::simulate::Args),
    /// Write the man pages, or print shell completions (for packagers; docs/guide.md).
    #[command(hide = true)]
    Generate(commands::generate::Args),
}

impl Command {
    /// Whether the command only computes and prints, opening no socket
    /// (no coordinator, worker, status page or database server).
    fn only_prints(&self) -> bool {
        match self {
            Command::Classes(_)
            | Command::CountBand(_)
            | Command::Bench(_)
            | Command::Layers(_)
            | Command::Generate(_) => true,
            Command::Run(_)
            | Command::Coordinator(_)
            | Command::Worker(_)
            | Command::Submit(_)
            | Command::Status(_)
            | Command::Verify(_)
            | Command::Recount(_)
            | Command::Requeue(_)
            | Command::Cancel(_)
            | Command::Priority(_)
            | Command::Token(_)
            | Command::Simulate(_) => false,
        }
    }
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => return commands::clap_error(error),
    };
    // Like other Unix tools, a command that only prints ends quietly when
    // the reader of its output goes away (`census classes ... | head -1`),
    // instead of panicking on EPIPE. Every other command keeps SIGPIPE
    // ignored (Rust's default): with the default action, writing to a
    // connection its peer has closed ends the process at once, without a
    // word. That was the coordinator's silent death (exit 141) right after
    // a run finished, when workers told `idle` exited while it still wrote
    // to them, or a status reader hung up (issue 26); now such a write is
    // an error of that one connection.
    if cli.command.only_prints() {
        // SAFETY: setting a signal's disposition to its default has no preconditions.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
    let outcome = match cli.command {
        Command::Run(args) => commands::run::run(args),
        Command::Coordinator(args) => commands::coordinator::run(args),
        Command::Worker(args) => commands::worker::run(args),
        Command::Submit(args) => commands::submit::run(args),
        Command::Status(args) => commands::status::run(args),
        Command::Verify(args) => commands::verify::run(args),
        Command::Recount(args) => commands::recount::run(args),
        Command::Requeue(args) => commands::operate::requeue(args),
        Command::Cancel(args) => commands::operate::cancel(args),
        Command::Priority(args) => commands::operate::priority(args),
        Command::Token(args) => commands::token::run(args),
        Command::Classes(args) => commands::classes::run(args),
        Command::CountBand(args) => commands::count_band::run(args),
        Command::Bench(args) => commands::bench::run(args),
        Command::Layers(args) => commands::layers::run(args),
        Command::Simulate(args) => commands::simulate::run(args),
        Command::Generate(args) => commands::generate::run(args, Cli::command()),
    };
    match outcome {
        Ok(code) => code,
        // The reader of the output went away: nothing to say, to no one.
        Err(error) if error.is::<commands::OutputClosed>() => ExitCode::SUCCESS,
        Err(error) => {
            // One line, no backtrace: the message names what was wrong.
            eprintln!("census: error: {error:#}");
            commands::exit_code_for(&error)
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use clap::CommandFactory;

    use super::Cli;

    /// A visible flag: the command it belongs to, its long name, its help,
    /// the environment variable that sets it.
    struct Flag {
        command: String,
        name: String,
        help: String,
        env: Option<String>,
    }

    fn flags_of(command: &clap::Command, path: &str, flags: &mut Vec<Flag>) {
        for arg in command.get_arguments().filter(|arg| !arg.is_hide_set()) {
            if let Some(name) = arg.get_long().filter(|name| !matches!(*name, "help" | "version")) {
                flags.push(Flag {
                    command: path.to_string(),
                    name: name.to_string(),
                    help: arg.get_help().map(ToString::to_string).unwrap_or_default(),
                    env: arg.get_env().map(|env| env.to_string_lossy().into_owned()),
                });
            }
        }
        for sub in command.get_subcommands() {
            flags_of(sub, &format!("{path} {}", sub.get_name()), flags);
        }
    }

    /// What a flag means where several names could say it, read from its
    /// help: its first clause names a count of threads (or the help the
    /// number of cores as its default), a database file or URL, or the log
    /// format; or the help speaks of a coordinator's address.
    fn meaning(help: &str) -> Option<&'static str> {
        let help = help.to_lowercase();
        let first = help.split(['.', ',', ';', '(']).next().unwrap_or_default();
        if first.contains("threads") || help.contains("the number of cores") {
            Some("a number of threads")
        } else if first.contains("sqlite file") || first.contains("postgres://") {
            Some("where the database is")
        } else if help.contains("coordinator's grpc address") || help.contains("coordinator's address") {
            Some("the coordinator's address")
        } else if first.starts_with("log format") {
            Some("the log format")
        } else {
            None
        }
    }

    /// One name for one thing across commands (issue 46: `run --workers`
    /// beside `worker --threads`): every visible flag of one meaning, and
    /// of one environment variable, has one name; old spellings are hidden
    /// aliases.
    #[test]
    fn one_thing_has_one_name_in_every_command() {
        let mut flags = Vec::new();
        flags_of(&Cli::command(), "census", &mut flags);
        assert!(flags.iter().any(|flag| flag.command == "census run" && flag.name == "threads"));
        let mut names: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for flag in &flags {
            let label = |name: &str| format!("--{name} ({})", flag.command);
            if let Some(meaning) = meaning(&flag.help) {
                names.entry(meaning.to_string()).or_default().insert(label(&flag.name));
            }
            if let Some(env) = &flag.env {
                names.entry(format!("${env}")).or_default().insert(label(&flag.name));
            }
        }
        let two_names: Vec<String> = names
            .iter()
            .filter(|(_, flags)| {
                let spelled: BTreeSet<&str> = flags.iter().map(|flag| flag.split(' ').next().unwrap()).collect();
                spelled.len() > 1
            })
            .map(|(meaning, flags)| format!("{meaning}: {flags:?}"))
            .collect();
        assert!(two_names.is_empty(), "two names for one thing:\n{}", two_names.join("\n"));
        assert!(names["a number of threads"].len() >= 4, "{:?}", names["a number of threads"]);
    }
}
