//! The CLI reference cannot drift: `census help` is the reference, and the
//! man pages made from it (`census generate man`, clap_mangen) are checked
//! in under `docs/man/` for readers without the binary. Here the pages are
//! made again from this build and must be the checked-in ones, page for
//! page; and the shell completions (`census generate completions`, not
//! checked in: each machine makes them from its own binary) are made for
//! bash, zsh and fish and know every command.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The command that refreshes `docs/man/`, run from the repository's root.
const REFRESH: &str = "rm -r docs/man && cargo run --release -p census -- generate man docs/man";

/// The commands of `census help`, each with its man page.
const COMMANDS: [&str; 16] = [
    "run",
    "coordinator",
    "worker",
    "submit",
    "status",
    "verify",
    "recount",
    "requeue",
    "cancel",
    "priority",
    "token",
    "classes",
    "count-band",
    "bench",
    "layers",
    "simulate",
];

fn census(args: &[&str]) -> std::process::Output {
    let output = Command::new(env!("CARGO_BIN_EXE_census")).args(args).output().expect("the census binary runs");
    assert!(output.status.success(), "census {args:?}: {}", String::from_utf8_lossy(&output.stderr));
    output
}

/// The `.1` files of `dir`, by name.
fn pages(dir: &Path) -> BTreeMap<String, String> {
    std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "1"))
        .map(|path| (path.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read_to_string(&path).unwrap()))
        .collect()
}

#[test]
fn the_checked_in_man_pages_are_this_binarys() {
    let made = tempfile::tempdir().unwrap();
    census(&["generate", "man", made.path().to_str().unwrap()]);
    let made = pages(made.path());
    let checked_in_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/man");
    let checked_in = pages(&checked_in_dir);
    for command in COMMANDS {
        assert!(made.contains_key(&format!("census-{command}.1")), "no man page for `census {command}`");
    }
    assert!(made.contains_key("census.1") && !made.contains_key("census-generate.1"), "{:?}", made.keys());
    let differ: BTreeSet<&str> = made
        .keys()
        .chain(checked_in.keys())
        .filter(|page| made.get(*page) != checked_in.get(*page))
        .map(String::as_str)
        .collect();
    assert!(
        differ.is_empty(),
        "docs/man/ is not what this binary's help says ({} differ: {}); refresh it with `{REFRESH}` and commit it",
        differ.len(),
        differ.into_iter().collect::<Vec<_>>().join(", ")
    );
}

#[test]
fn completions_are_made_for_bash_zsh_and_fish_and_know_every_command() {
    for shell in ["bash", "zsh", "fish"] {
        let script = String::from_utf8(census(&["generate", "completions", shell]).stdout).unwrap();
        for command in COMMANDS {
            assert!(script.contains(command), "{shell}: `census {command}` is not completed");
        }
        assert!(
            script.contains("tls-client-cert") && script.contains("allow-plaintext-token"),
            "{shell}: flags are completed"
        );
    }
    let refused =
        Command::new(env!("CARGO_BIN_EXE_census")).args(["generate", "completions", "tcsh"]).output().unwrap();
    assert_eq!(refused.status.code(), Some(2), "an unknown shell is bad input");
}

#[test]
fn generate_is_hidden_from_help() {
    let help = String::from_utf8(census(&["help"]).stdout).unwrap();
    assert!(help.contains("simulate") && !help.contains("generate"), "{help}");
}
