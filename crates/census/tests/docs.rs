//! The documents stay true. Every ```console block of README.md and
//! docs/guide.md is run by `trycmd` (as cargo and clap check their docs):
//! each `$ ` line is a command, with this build's binary as `census` and the
//! `sqlite3` shell as `sqlite3`, and what it prints must be what the page
//! shows below it, where `[..]` stands for any text within a line and `...`
//! for any lines (a port, a time, the order of the workers). The commands of
//! one page run one after another in one empty directory, as a reader would
//! type them. And the README stays a door: at most 200 lines, and at most 120
//! characters a line outside code blocks.
//!
//! The ```sh blocks (Postgres, containers, Kubernetes) claim no output and
//! are not run here; their SQL is run on both stores by
//! `census-store/tests/audit.rs`, and `docker-compose.yml` by
//! `scripts/compose-check`.

use std::path::{Path, PathBuf};

/// The repository's root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The pages whose commands are run.
const PAGES: [&str; 2] = ["README.md", "docs/guide.md"];

#[test]
fn the_readme_is_at_most_200_lines_of_at_most_120_characters() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let lines: Vec<&str> = readme.lines().collect();
    assert!(lines.len() <= 200, "README.md has {} lines: at most 200, details go to docs/", lines.len());
    let mut in_code = false;
    let mut long = Vec::new();
    for (number, line) in lines.iter().enumerate() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
        } else if !in_code && line.chars().count() > 120 {
            long.push(format!("README.md:{}: {} characters", number + 1, line.chars().count()));
        }
    }
    assert!(long.is_empty(), "lines over 120 characters outside code blocks:\n{}", long.join("\n"));
}

/// Each page's commands run, and print what the page shows.
#[test]
fn the_commands_of_the_readme_and_the_guide_print_what_they_show() {
    // trycmd runs a page's commands in the directory named like the page
    // with `.in` for `.md`, next to it: a copy of each page goes into a
    // fresh directory of its own, so that the files its commands make
    // (census.db ...) land there. Line numbers in a failure are the page's.
    let sandbox = tempfile::tempdir().unwrap();
    let cases = trycmd::TestCases::new();
    cases.register_bin("census", PathBuf::from(env!("CARGO_BIN_EXE_census")));
    cases.register_bin("sqlite3", on_path("sqlite3"));
    for page in PAGES {
        let copy = sandbox.path().join(page);
        std::fs::create_dir_all(copy.with_extension("in")).unwrap();
        std::fs::copy(root().join(page), &copy).unwrap();
        let text = std::fs::read_to_string(&copy).unwrap();
        assert!(text.contains("```console\n$ census "), "{page} shows no command with its output");
        cases.case(copy);
    }
    cases.run();
}

/// A program on PATH, as the shell would find it.
fn on_path(name: &str) -> PathBuf {
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join(name))
        .find(|path| path.is_file())
        .unwrap_or_else(|| panic!("the pages' commands need `{name}` on PATH (Debian: apt-get install {name})"))
}
