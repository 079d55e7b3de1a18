//! Shared layer files that a hostile worker writes to (issue 44 item 3),
//! end to end: a coordinator on SQLite, honest `census worker` processes
//! sharing `--layers-dir`, and the operator's `census recount`.
//!
//! - A squatter plants correct outputs computed elsewhere, one byte of a
//!   map part flipped, before the honest workers publish: they check the
//!   copy in full, set it aside and publish their own, and the run ends
//!   with the published 2x3 total (Sudoku Players' Forum, 2005).
//! - A map part altered after it was accepted: the reduce job that reads it
//!   fails naming the file, which is set aside, until the run waits for an
//!   operator; `census recount --job N` of the map job (N as the workers'
//!   log says) counts it and the stages after it again, and the run ends
//!   with the published total.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const CENSUS: &str = "layers boxes=2x3 shards=2 parts=3";
const PLAN: &str = "2x3-s2-p3";
const PUBLISHED: &str = "28200960";

fn census() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_census"));
    command.env_remove("RUST_LOG");
    command
}

fn output_of(command: &mut Command) -> String {
    let output = command.output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "{command:?}: {text}");
    text
}

/// A hang detector, not a speed test: a 2x3 run takes seconds.
const HANG: Duration = Duration::from_secs(600);

/// A coordinator on an SQLite file in a directory of its own, its workers'
/// tokens and logs, and the shared layers directory.
struct Cluster {
    dir: tempfile::TempDir,
    address: String,
    coordinator: Child,
}

impl Cluster {
    fn start() -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let database = dir.path().join("census.db").display().to_string();
        for (role, name) in [("operator", "ops"), ("worker", "one"), ("worker", "two")] {
            let path = dir.path().join(format!("{name}.token"));
            output_of(
                census()
                    .args(["token", "create", "--role", role, "--name", name, "--database", &database])
                    .args(["--output".as_ref(), path.as_os_str()]),
            );
        }
        let address = format!("127.0.0.1:{port}");
        let coordinator = census()
            .args(["coordinator", "--database", &database, "--listen", &address, "--census", CENSUS])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("coordinator.log")).unwrap())
            .spawn()
            .unwrap();
        let started = Instant::now();
        while std::net::TcpStream::connect(&address).is_err() {
            assert!(started.elapsed() < HANG, "the coordinator did not start listening");
            std::thread::sleep(Duration::from_millis(100));
        }
        std::fs::create_dir(dir.path().join("layers")).unwrap();
        Cluster { dir, address, coordinator }
    }

    fn layers(&self) -> PathBuf {
        self.dir.path().join("layers").join(PLAN)
    }

    fn token(&self, name: &str) -> PathBuf {
        self.dir.path().join(format!("{name}.token"))
    }

    /// Runs the honest workers `one` and `two` (with `extra`) until both
    /// exit; returns what they logged.
    fn work(&self, extra: &[&str]) -> String {
        let workers: Vec<(Child, PathBuf)> = ["one", "two"]
            .iter()
            .map(|name| {
                let log = self.dir.path().join(format!("{name}.{}.log", std::process::id()));
                let log = (0..).map(|n| log.with_extension(format!("{n}.log"))).find(|log| !log.exists()).unwrap();
                let child = census()
                    .args(["worker", "--coordinator", &format!("http://{}", self.address), "--threads", "1"])
                    .arg("--token-file")
                    .arg(self.token(name))
                    .arg("--layers-dir")
                    .arg(self.dir.path().join("layers"))
                    .args(extra)
                    .stdout(Stdio::null())
                    .stderr(std::fs::File::create(&log).unwrap())
                    .spawn()
                    .unwrap();
                (child, log)
            })
            .collect();
        let mut logs = String::new();
        for (mut child, log) in workers {
            let started = Instant::now();
            let status = loop {
                if let Some(status) = child.try_wait().unwrap() {
                    break status;
                }
                if started.elapsed() > HANG {
                    let _ = child.kill();
                    panic!("worker {} hangs: {}", child.id(), std::fs::read_to_string(&log).unwrap());
                }
                std::thread::sleep(Duration::from_millis(100));
            };
            let text = std::fs::read_to_string(&log).unwrap();
            assert!(status.success(), "{status}: {text}");
            logs += &text;
        }
        logs
    }

    fn status(&self) -> serde_json::Value {
        let text = output_of(
            census().args(["status", "--coordinator", &self.address, "--json", "--token-file"]).arg(self.token("ops")),
        );
        serde_json::from_str(&text).unwrap()
    }

    fn sql(&self, query: &str) -> String {
        output_of(Command::new("sqlite3").arg(self.dir.path().join("census.db")).arg(query)).trim().to_string()
    }

    /// What the quarantine of the shared directory holds, by name.
    fn set_aside(&self) -> Vec<String> {
        let Ok(entries) = std::fs::read_dir(self.layers().join("quarantine")) else { return Vec::new() };
        let mut names: Vec<String> = entries.map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        names.sort();
        names
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = self.coordinator.kill();
        let _ = self.coordinator.wait();
    }
}

/// The one output directory of a job (`map-1-0`) in `plan`.
fn output_of_job(plan: &Path, job: &str) -> PathBuf {
    let outputs: Vec<PathBuf> = std::fs::read_dir(plan.join(job)).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(outputs.len(), 1, "{outputs:?}");
    outputs.into_iter().next().unwrap()
}

/// The part file of an output with the most bytes (so with more than one
/// state), and its bytes with the first key's first byte made the largest:
/// the keys are out of order and the SHA-256 differs.
fn tamper(output: &Path) -> (PathBuf, Vec<u8>) {
    let mut parts: Vec<PathBuf> = std::fs::read_dir(output)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "layer"))
        .collect();
    parts.sort_by_key(|path| std::fs::metadata(path).unwrap().len());
    let part = parts.pop().unwrap();
    let mut bytes = std::fs::read(&part).unwrap();
    bytes[16] = 0xff;
    std::fs::write(&part, &bytes).unwrap();
    (part, bytes)
}

fn assert_exact(cluster: &Cluster) {
    let status = cluster.status();
    assert_eq!(status["final"], true, "{status}");
    assert_eq!(status["answer"], PUBLISHED, "{status}");
    // Every job has one accepted result of its round, agreed by both.
    assert_eq!(cluster.sql("SELECT COUNT(*) FROM jobs WHERE state <> 'done'"), "0");
}

#[test]
fn a_squatted_layer_output_is_set_aside_and_the_run_finishes_exactly() {
    let cluster = Cluster::start();
    // The squatter: correct outputs computed elsewhere, planted in the
    // shared directory before any honest worker publishes, one byte of a
    // map part flipped.
    let elsewhere = tempfile::tempdir().unwrap();
    output_of(
        census().args(["layers", "--boxes", "2x3", "--shards", "2", "--parts", "3", "--dir"]).arg(elsewhere.path()),
    );
    let computed = elsewhere.path().join(PLAN);
    for job in std::fs::read_dir(&computed).unwrap().map(|e| e.unwrap()).filter(|e| e.path().is_dir()) {
        let name = job.file_name().to_string_lossy().into_owned();
        if name.starts_with("map-") || name.starts_with("reduce-") {
            let output = output_of_job(&computed, &name);
            let planted = cluster.layers().join(&name).join(output.file_name().unwrap());
            std::fs::create_dir_all(&planted).unwrap();
            for file in std::fs::read_dir(&output).unwrap().map(|e| e.unwrap()) {
                std::fs::copy(file.path(), planted.join(file.file_name())).unwrap();
            }
        }
    }
    let (part, tampered) = tamper(&output_of_job(&cluster.layers(), "map-1-0"));

    let logs = cluster.work(&["--exit-when-done"]);
    assert_exact(&cluster);
    assert_eq!(cluster.sql("SELECT COUNT(*) FROM failures"), "0", "{logs}");
    let aside = cluster.set_aside();
    assert_eq!(aside.len(), 1, "{aside:?}\n{logs}");
    assert!(aside[0].starts_with("map-1-0-"), "{aside:?}");
    let kept = cluster.layers().join("quarantine").join(&aside[0]).join(part.file_name().unwrap());
    assert_eq!(std::fs::read(kept).unwrap(), tampered, "the tampered copy is kept as it was");
    assert!(logs.contains(&aside[0]) && logs.contains("does not match its manifest"), "{logs}");
    assert_ne!(std::fs::read(&part).unwrap(), tampered, "the place holds an honest copy");
}

#[test]
fn a_corrupted_accepted_part_is_named_set_aside_and_a_recount_recovers_the_run() {
    let cluster = Cluster::start();
    // Stage 0, the one map job of step 1, accepted by both identities.
    cluster.work(&["--max-jobs", "1"]);
    assert_eq!(cluster.sql("SELECT state FROM jobs WHERE key = '2x3/map/1/0'"), "done");
    let map_id = cluster.sql("SELECT id FROM jobs WHERE key = '2x3/map/1/0'");
    // Then one of its parts is altered in place.
    let (part, corrupted) = tamper(&output_of_job(&cluster.layers(), "map-1-0"));

    let logs = cluster.work(&["--exit-when-done"]);
    let status = cluster.status();
    assert_eq!((status["final"].as_bool(), status["failed"].as_u64()), (Some(false), Some(1)), "{status}\n{logs}");
    assert!(logs.contains(&part.display().to_string()), "the file is named: {logs}");
    assert!(logs.contains(&format!("census recount --job {map_id}")), "the remedy is named: {logs}");
    let aside = cluster.set_aside();
    assert_eq!(aside.len(), 1, "{aside:?}");
    assert_eq!(std::fs::read(cluster.layers().join("quarantine").join(&aside[0])).unwrap(), corrupted);
    assert!(logs.contains(&aside[0]), "{logs}");
    let reduces_done = cluster.sql("SELECT COUNT(*) FROM jobs WHERE key LIKE '2x3/reduce/1/%' AND state = 'done'");
    assert_eq!(reduces_done, "2", "the other parts' reduce jobs were accepted");

    output_of(
        census()
            .args(["recount", "--coordinator", &cluster.address, "--job", &map_id, "--token-file"])
            .arg(cluster.token("ops")),
    );
    let reopened = cluster.sql("SELECT COUNT(*) FROM jobs WHERE key LIKE '2x3/%/1/%' AND state = 'pending'");
    assert_eq!(reopened, "4", "the map job and the three reduce jobs after it are pending again");
    cluster.work(&["--exit-when-done"]);
    assert_exact(&cluster);
    // The map job's output was written again, and checks.
    let rewritten = std::fs::read(&part).unwrap();
    assert_ne!(rewritten, corrupted);
    assert_eq!(cluster.set_aside().len(), 2, "the rest of the output it was part of, set aside at publishing");
}
