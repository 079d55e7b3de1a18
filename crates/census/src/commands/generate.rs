//! `census generate`: files made from the command line's own definition,
//! so they say what this binary does: the man pages (the CLI reference,
//! checked in as `docs/man/`, where `tests/reference.rs` fails when they
//! differ from this binary's) and shell completions for bash, zsh and
//! fish (made on the machine that runs census, as `docs/guide.md` says).
//! Hidden from `census help`: it is for packagers and for refreshing
//! `docs/man/`.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    what: What,
}

#[derive(clap::Subcommand)]
enum What {
    /// Write the man pages into DIR: census.1, and census-COMMAND.1 for
    /// each command (census-token-issue.1 for a command's own commands).
    Man {
        /// The directory (made if missing); pages already there are
        /// overwritten, others left alone.
        dir: PathBuf,
    },
    /// Print the completion script for SHELL, e.g.
    /// `census generate completions bash > ~/.local/share/bash-completion/completions/census`.
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

/// Generates what `args` asks for, from `command`: the whole `census`
/// command line.
pub fn run(args: Args, mut command: clap::Command) -> anyhow::Result<ExitCode> {
    match args.what {
        What::Man { dir } => {
            std::fs::create_dir_all(&dir).with_context(|| format!("cannot make {}", dir.display()))?;
            clap_mangen::generate_to(command, &dir)
                .with_context(|| format!("cannot write the man pages into {}", dir.display()))?;
        }
        What::Completions { shell } => {
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut command, "census", &mut script);
            super::print(&String::from_utf8(script)?)?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
