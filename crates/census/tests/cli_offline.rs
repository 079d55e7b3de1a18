//! The offline commands, run as a user runs them.

use std::process::Command;

fn census(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_census")).args(args).output().expect("the census binary runs")
}

#[test]
fn classes_prints_the_russell_table_as_json() {
    let output = census(&["classes", "--stage", "44", "--json"]);
    assert!(output.status.success());
    let classes: Vec<serde_json::Value> = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(classes.len(), 44);
    let sizes: u64 = classes.iter().map(|c| c["size"].as_u64().unwrap()).sum();
    assert_eq!(sizes, 36_288);
    assert_eq!(classes[0]["id"], 0);
    assert_eq!(classes[0]["representative"], "123456789456789123789123456");
    let keys: Vec<&String> = classes[0].as_object().unwrap().keys().collect();
    assert_eq!(keys, ["id", "representative", "size"]);
}

/// `classes --census` lists any census's jobs, and a slice of the 4x3
/// gangsters is that part of the list, numbered as in the whole.
#[test]
fn classes_lists_the_jobs_of_any_census_and_of_a_slice() {
    let output = census(&["classes", "--census", "shape boxes=2x3", "--json"]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let jobs: Vec<serde_json::Value> = serde_json::from_slice(&output.stdout).unwrap();
    let weights: u64 = jobs.iter().map(|j| j["weight"].as_str().unwrap().parse::<u64>().unwrap()).sum();
    // As for 2x6 (924^6, shared/twelve.md): the class weights add up to C(2c, c)^c.
    assert_eq!((jobs.len(), weights), (4, 20u64.pow(3)));
    let output = census(&["classes", "--census", "shape boxes=4x3 gangsters=7..9"]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{stdout}");
    // The gangster whose four stacks split the digits alike, last of the
    // first group (those whose first three stacks do: Silver's 0 to 8).
    assert!(lines[2].starts_with("1\t4x3 gangster 8\t"), "{stdout}");
    assert!(lines[2].ends_with("\t4x3:0000.0000.0000.0000.1111.1111.1111.1111.2222.2222.2222.2222"), "{stdout}");
    let beyond = census(&["classes", "--census", "shape boxes=4x3 gangsters=0..144579"]);
    assert_ne!(beyond.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&beyond.stderr).contains("there are 144578 gangsters"));
    let both = census(&["classes", "--census", "shape boxes=2x3", "--stage", "44"]);
    assert_eq!(both.status.code(), Some(2));
}

#[test]
fn an_unknown_stage_is_a_usage_error() {
    let output = census(&["classes", "--stage", "45"]);
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("unknown stage \"45\"") && stderr.contains("44 (russell)"), "{stderr}");
}

#[test]
fn count_band_reproduces_the_per_seed_checkpoint() {
    let output = census(&["count-band", "123456789456789123789123456", "--json"]);
    assert!(output.status.success());
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let seeds = report["seeds"].as_array().unwrap();
    assert_eq!(seeds.len(), 10);
    for seed in seeds {
        let expected = if seed["seed"] == "258/369" { 6_696_000 } else { 11_297_664 };
        assert_eq!(seed["count"], expected, "{seed}");
    }
    assert_eq!(report["sum"], 9 * 11_297_664 + 6_696_000);
    assert_eq!(report["completions"], 72 * (9 * 11_297_664 + 6_696_000u64));
}

#[test]
fn count_band_normalizes_and_says_so() {
    // The checkpoint band with its rows reversed: same completions.
    let output = census(&["count-band", "789256134456139278123478569"]);
    assert!(output.status.success());
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("normalized 789256134456139278123478569 to"), "{stdout}");
    assert!(stdout.contains("7,053,225,408"), "{stdout}");
}

#[test]
fn an_invalid_band_names_what_is_wrong_and_exits_2() {
    for (band, message) in [
        ("123456789456789123789123455", "row 3 holds the digit 5 twice"),
        ("123456789123456789456789123", "block B1 holds the digit 1 twice"),
        ("12345", "found 5 characters"),
        ("12345678945678912378912345x", "row 3, column 9"),
    ] {
        let output = census(&["count-band", band]);
        assert_eq!(output.status.code(), Some(2), "{band}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(message), "{band}: {stderr}");
        assert!(!stderr.contains("panicked") && stderr.lines().count() == 1, "{stderr}");
    }
}

#[test]
fn bench_counts_the_russell_stage_exactly() {
    let output = census(&["bench", "--stage", "russell", "--counter", "column-sets", "--threads", "2", "--json"]);
    assert!(output.status.success());
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["jobs"], 440);
    assert_eq!(report["sum"], "3546146300288");
    assert_eq!(report["exact"], true);
    assert!(report["seconds"].as_f64().unwrap() > 0.0);
}

fn temp_path(name: &str) -> std::path::PathBuf {
    let path = std::env::temp_dir().join(format!("census-offline-{}-{name}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    path
}

#[test]
fn absurd_numbers_are_refused_before_anything_starts() {
    for args in [
        &["bench", "--stage", "44", "--threads", "100000"][..],
        &["coordinator", "--database-url", "x.db", "--lease-ttl", "18446744073709551615"][..],
        &["coordinator", "--database-url", "x.db", "--redundancy", "4294967295"][..],
        &["coordinator", "--database-url", "x.db", "--validate-fraction", "2"][..],
        &["run", "--threads", "0"][..],
        &["worker", "--threads", "100000"][..],
    ] {
        let output = census(args);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {}", String::from_utf8_lossy(&output.stderr));
    }
}

#[test]
fn a_file_that_is_not_a_census_database_is_refused_at_once() {
    let not_sqlite = temp_path("not-sqlite.db");
    std::fs::write(&not_sqlite, "this is a text file, not a database\n".repeat(100)).unwrap();
    let text_file = not_sqlite.to_str().unwrap();
    // Every command that opens a database (it exited 1 for some: issue 25).
    for args in [
        &["run", "--database", text_file][..],
        &["coordinator", "--database", text_file, "--listen", "127.0.0.1:0"],
        &["status", "--database", text_file],
        &["verify", "--database", text_file],
        &["token", "list", "--database", text_file],
        &["token", "create", "--role", "reader", "--name", "r", "--database", text_file],
    ] {
        let output = census(args);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: bad input exits 2: {stderr}");
        assert!(stderr.contains("is not an SQLite database"), "{args:?}: {stderr}");
    }
    assert_eq!(std::fs::read_to_string(&not_sqlite).unwrap(), "this is a text file, not a database\n".repeat(100));

    // An SQLite file cut short.
    let whole = temp_path("whole.db");
    let made = census(&["token", "create", "--role", "reader", "--name", "r", "--database", whole.to_str().unwrap()]);
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    let bytes = std::fs::read(&whole).unwrap();
    let truncated = temp_path("truncated.db");
    std::fs::write(&truncated, &bytes[..bytes.len() - 1000]).unwrap();
    let output = census(&["run", "--database", truncated.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "a file that cannot be used is bad input: {stderr}");
    assert!(stderr.contains("damaged"), "{stderr}");
    for path in [not_sqlite, whole, truncated] {
        let _ = std::fs::remove_file(path);
    }
}

/// A database file in a directory that does not exist is refused with the
/// directory's name, in one line (not SQLite's "(code: 14) unable to open
/// database file"), and nothing is made (issue 46).
#[test]
fn a_database_in_a_missing_directory_names_the_directory() {
    let missing = std::env::temp_dir().join(format!("census-offline-{}-no-such-dir", std::process::id()));
    let database = missing.join("x.db");
    let database = database.to_str().unwrap();
    for args in [
        &["run", "--database", database][..],
        &["coordinator", "--database", database, "--listen", "127.0.0.1:0"],
        &["token", "create", "--role", "reader", "--name", "r", "--database", database],
    ] {
        let output = census(args);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{args:?}: {stderr}");
        let last = stderr.lines().last().unwrap_or_default();
        assert!(last.starts_with("census: error: "), "{args:?}: {stderr}");
        assert!(last.contains(&format!("the directory {} does not exist", missing.display())), "{args:?}: {stderr}");
        assert!(!stderr.contains("code: 14"), "{args:?}: {stderr}");
        assert!(!missing.exists(), "{args:?} made {}", missing.display());
    }
    let output = census(&["run", "--database", database]);
    assert_eq!(String::from_utf8_lossy(&output.stderr).lines().count(), 1, "one line");
}

#[test]
fn tokens_are_created_listed_revoked_and_stored_hashed() {
    let db = temp_path("tokens.db");
    let db = db.to_str().unwrap();
    let created = census(&["token", "create", "--role", "worker", "--name", "node-7", "--database", db]);
    assert!(created.status.success(), "{}", String::from_utf8_lossy(&created.stderr));
    let token = String::from_utf8(created.stdout).unwrap().trim().to_string();
    assert!(token.starts_with("census_") && token.len() == 71, "{token}");
    let again = census(&["token", "create", "--role", "worker", "--name", "node-7", "--database", db]);
    assert_ne!(again.status.code(), Some(0), "a name is issued once");
    let bad_name = census(&["token", "create", "--role", "worker", "--name", &"x".repeat(65), "--database", db]);
    assert_eq!(bad_name.status.code(), Some(2));
    let bad_role = census(&["token", "create", "--role", "admin", "--name", "n", "--database", db]);
    assert_eq!(bad_role.status.code(), Some(2));
    let listed = String::from_utf8(census(&["token", "list", "--database", db]).stdout).unwrap();
    assert!(listed.contains("node-7") && listed.contains("worker") && !listed.contains(&token), "{listed}");
    let file = std::fs::read(db).unwrap();
    assert!(!file.windows(token.len()).any(|w| w == token.as_bytes()), "the database holds only the hash");
    assert!(census(&["token", "revoke", "node-7", "--database", db]).status.success());
    let listed = String::from_utf8(census(&["token", "list", "--database", db]).stdout).unwrap();
    assert!(listed.lines().any(|l| l.starts_with("node-7") && l.contains("yes")), "{listed}");
    assert_eq!(census(&["token", "revoke", "nobody", "--database", db]).status.code(), Some(2));
    let _ = std::fs::remove_file(db);
}

/// Issue 44: `token create --output` on a full disk once stored the token
/// and left an empty file. Now the secret is written before the token is
/// stored: the command fails naming the file, leaves no file, and the name
/// is free. (A tmpfs of the test's own: needs root, never skipped.)
#[test]
fn a_token_that_cannot_be_written_to_its_file_is_not_created() {
    let disk = census_testpg::SmallDisk::mount("token-output", 1 << 20);
    disk.fill(0);
    let db = temp_path("token-output.db");
    let db = db.to_str().unwrap();
    let file = disk.path().join("worker.token");
    let args = ["token", "create", "--role", "worker", "--name", "node-1", "--database", db, "--output"];
    let full = census(&[&args[..], &[file.to_str().unwrap()]].concat());
    let said = String::from_utf8_lossy(&full.stderr);
    assert_eq!(full.status.code(), Some(1), "{said}");
    assert!(said.contains(&format!("--output {}", file.display())) && said.contains("no token was created"), "{said}");
    assert!(!file.exists(), "an empty or partial token file was left: {said}");
    let listed = String::from_utf8(census(&["token", "list", "--database", db]).stdout).unwrap();
    assert!(!listed.contains("node-1"), "{listed}");
    disk.free();
    let written = census(&[&args[..], &[file.to_str().unwrap()]].concat());
    assert!(written.status.success(), "{}", String::from_utf8_lossy(&written.stderr));
    let token = std::fs::read_to_string(&file).unwrap();
    assert!(token.trim().starts_with("census_") && token.trim().len() == 71, "{token:?}");
    let _ = std::fs::remove_file(db);
}

/// A worker told to stop while it cannot reach its coordinator exits
/// promptly instead of spinning on retries.
#[test]
fn a_worker_stops_on_sigterm_while_the_coordinator_is_down() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let token = format!("census_{}", "ab".repeat(32));
    let mut worker = Command::new(env!("CARGO_BIN_EXE_census"))
        .args(["worker", "--coordinator", &format!("http://127.0.0.1:{port}"), "--token", &token, "--threads", "1"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_secs(2));
    // SAFETY: kill has no memory-safety preconditions.
    unsafe {
        libc::kill(worker.id() as i32, libc::SIGTERM);
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let status = loop {
        if let Some(status) = worker.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = worker.kill();
            panic!("the worker did not stop within 20 s of SIGTERM");
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    assert!(status.success(), "{status:?}");
}

/// `census ... | head -1`: the reader goes away; census ends quietly.
#[test]
fn a_closed_pipe_ends_the_output_quietly() {
    use std::io::Read;
    for args in [&["classes", "--stage", "36288"][..], &["classes", "--stage", "44"][..]] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_census"))
            .args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut first = [0u8; 16];
        child.stdout.as_mut().unwrap().read_exact(&mut first).unwrap();
        drop(child.stdout.take());
        let mut stderr = String::new();
        child.stderr.as_mut().unwrap().read_to_string(&mut stderr).unwrap();
        let status = child.wait().unwrap();
        assert!(!stderr.contains("panicked") && !stderr.contains("Broken pipe"), "{args:?}: {stderr}");
        assert_ne!(status.code(), Some(101), "{args:?}: no panic exit");
    }
}

/// Issue 44: a 100 KB `--census` value was echoed three times (clap's
/// echo, the census's text, the word at fault): 300 KB of stderr. Now once,
/// short, with its length, in the one-line error, before any work.
#[test]
fn a_huge_census_value_is_refused_without_being_echoed() {
    let huge = format!("shape boxes=2x3 {}", "x".repeat(100_000));
    for command in ["run", "bench", "classes", "verify"] {
        let output = census(&[command, "--census", &huge]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{command}: {stderr}");
        assert!(stderr.len() < 2_000, "{command}: {} bytes of stderr:\n{}", stderr.len(), &stderr[..2_000]);
        let first = stderr.lines().next().unwrap();
        assert!(first.starts_with("census: error: --census: bad census \"shape boxes=2x3"), "{command}: {stderr}");
        assert!(first.contains("(100016 bytes): a census text is at most 1024 bytes"), "{command}: {stderr}");
    }
    // A short one is still shown whole, with the word at fault.
    let output = census(&["classes", "--census", "shape boxes=2x3 oops"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.starts_with(r#"census: error: --census: bad census "shape boxes=2x3 oops": "oops" is not NAME=VALUE"#),
        "{stderr}"
    );
}

#[test]
fn command_line_errors_look_like_every_other_error() {
    let output = census(&["classes", "--stage"]);
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.starts_with("census: error: "), "{stderr}");
    let unknown = census(&["frobnicate"]);
    assert_eq!(unknown.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&unknown.stderr).starts_with("census: error: "));
    assert!(census(&["--help"]).status.success());
}

#[test]
fn a_band_may_be_typed_with_separators() {
    let spaced = census(&["count-band", "123 456 789 456 789 123 789 123 456"]);
    let slashed = census(&["count-band", "123456789/456789123/789123456"]);
    let plain = census(&["count-band", "123456789456789123789123456"]);
    for output in [&spaced, &slashed] {
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        let tail = |o: &std::process::Output| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .filter(|l| l.contains("seed") || l.contains("sum"))
                .map(String::from)
                .collect::<Vec<_>>()
        };
        assert_eq!(tail(output).len(), tail(&plain).len());
    }
    let text = String::from_utf8_lossy(&plain.stdout);
    assert!(text.contains("seed = the first column of B4 and of B7"), "the seed notation is explained: {text}");
}

#[test]
fn an_embedded_run_is_readable_by_status_verify_and_sqlite_alone() {
    let dir = std::env::temp_dir().join(format!("census-offline-embedded-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let run =
        Command::new(env!("CARGO_BIN_EXE_census")).current_dir(&dir).args(["run", "--threads", "1"]).output().unwrap();
    let printed = String::from_utf8_lossy(&run.stdout);
    assert!(run.status.success(), "{printed}{}", String::from_utf8_lossy(&run.stderr));
    assert!(printed.contains("serving on http://127.0.0.1:"), "{printed}");
    assert!(!run.stderr.contains(&0x1b), "no colour codes when stderr is not a terminal");
    // The file alone holds the census: no write-ahead log left beside it.
    let wal = dir.join("census.db-wal");
    assert!(!wal.exists() || std::fs::metadata(&wal).unwrap().len() == 0, "the WAL was folded into census.db");
    let status = Command::new(env!("CARGO_BIN_EXE_census"))
        .current_dir(&dir)
        .args(["status", "--database", "census.db"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(status.status.success(), "{text}{}", String::from_utf8_lossy(&status.stderr));
    assert!(
        text.contains("run 1: sudoku stage=russell counter=column-sets")
            && text.contains("6,670,903,752,021,072,936,960"),
        "{text}"
    );
    assert!(text.contains("finished") && !text.contains("jobs/s"), "{text}");
    // `verify` reads census.db by default; one finished run of the 9x9
    // count is compared with the published N0 (Felgenhauer and Jarvis).
    let verify = Command::new(env!("CARGO_BIN_EXE_census")).current_dir(&dir).args(["verify"]).output().unwrap();
    let printed = String::from_utf8_lossy(&verify.stdout);
    assert!(verify.status.success(), "{printed}{}", String::from_utf8_lossy(&verify.stderr));
    assert!(printed.contains("published: 6,670,903,752,021,072,936,960"), "{printed}");
    assert!(printed.contains("agree: the run gives the published count"), "{printed}");
    let missing = Command::new(env!("CARGO_BIN_EXE_census"))
        .current_dir(&dir)
        .args(["status", "--database", "census.db", "--run", "9"])
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(2), "an unknown run is bad input, as for verify");
    status_into_a_closed_pipe_ends_quietly(&dir);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `census status | head -1`: status keeps SIGPIPE ignored (it opens
/// sockets), so a closed stdout is a write error, and it ends quietly, exit
/// 0, with no panic (it panicked in `println!`). The reader here goes away
/// before status prints anything, with and without `--json`.
fn status_into_a_closed_pipe_ends_quietly(dir: &std::path::Path) {
    for json in [false, true] {
        let mut args = vec!["status", "--database", "census.db"];
        if json {
            args.push("--json");
        }
        let mut child = Command::new(env!("CARGO_BIN_EXE_census"))
            .current_dir(dir)
            .args(&args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take());
        let output = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(0), "{args:?}: {stderr}");
        assert!(stderr.is_empty(), "{args:?}: nothing to say: {stderr}");
    }
}

/// `count-band --counter enumerate` takes seconds a seed: each seed's line
/// must arrive as it is counted, not all at the end.
#[test]
fn count_band_prints_each_seed_as_it_is_counted() {
    use std::io::BufRead;
    let mut child = Command::new(env!("CARGO_BIN_EXE_census"))
        .args(["count-band", "123456789456789123789123456", "--counter", "enumerate"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let first_seed = lines.by_ref().map(|l| l.unwrap()).find(|l| l.trim_start().starts_with("seed ")).unwrap();
    assert!(first_seed.contains("seed 235/689") || first_seed.contains("seed "), "{first_seed}");
    assert!(
        child.try_wait().unwrap().is_none(),
        "the first seed was printed while the other nine were still being counted"
    );
    let _ = child.kill();
    let _ = child.wait();
}

/// One variable names the database for every command (it was
/// CENSUS_DATABASE for `run` and CENSUS_DATABASE_URL elsewhere).
#[test]
fn census_database_url_names_the_database_everywhere() {
    let dir = std::env::temp_dir().join(format!("census-offline-env-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("from-env.db");
    let with_env = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_census"))
            .current_dir(&dir)
            .args(args)
            .env("CENSUS_DATABASE_URL", &file)
            .output()
            .unwrap()
    };
    let run = with_env(&["run", "--threads", "1", "--quiet"]);
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    // --quiet: the result alone, no header, serving line or timing.
    let printed = String::from_utf8_lossy(&run.stdout);
    assert!(printed.contains("N0 = 9! x 72^2 x S = 6,670,903,752,021,072,936,960"), "{printed}");
    for noise in ["census: sudoku", "serving on", "elapsed:"] {
        assert!(!printed.contains(noise), "--quiet printed {noise:?}: {printed}");
    }
    assert!(file.exists() && !dir.join("census.db").exists(), "run used CENSUS_DATABASE_URL");
    let status = with_env(&["status"]);
    assert!(status.status.success(), "{}", String::from_utf8_lossy(&status.stderr));
    assert!(String::from_utf8_lossy(&status.stdout).contains("6,670,903,752,021,072,936,960"));
    // verify finds the finished run there (census.db does not exist).
    let verify = with_env(&["verify"]);
    assert!(
        verify.status.success() && String::from_utf8_lossy(&verify.stdout).contains("run 1 (sudoku stage=russell"),
        "verify read the same file: {}{}",
        String::from_utf8_lossy(&verify.stdout),
        String::from_utf8_lossy(&verify.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Every counter is described the same way wherever it can be chosen
/// (`run --help` said "hours", the README "seconds a job", `count-band`
/// "seconds a seed"), and `run --help` names the stages as `classes` does.
#[test]
fn counters_and_stages_are_described_alike_everywhere() {
    let help = |command: &str| String::from_utf8_lossy(&census(&[command, "--help"]).stdout).into_owned();
    let enumerate = |text: &str| {
        let at = text.find("enumerate (")?;
        text[at..].split(')').next().map(String::from)
    };
    let reference = enumerate(&help("run")).expect("run --help describes enumerate");
    for command in ["count-band", "bench", "submit", "coordinator"] {
        assert_eq!(enumerate(&help(command)).as_deref(), Some(reference.as_str()), "census {command} --help");
    }
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md")).unwrap();
    assert!(
        readme.contains("`enumerate` (the paper's plain backtracking,\nunder a second a job"),
        "README: {reference}"
    );
    for name in ["russell", "felgenhauer-jarvis", "rectangles", "rows", "stacks-columns", "catalogue"] {
        assert!(help("run").contains(name) && help("classes").contains(name), "{name}");
    }
}

/// Other kinds of census through `bench --census`: the same jobs, counter
/// and fold an engine will run, checked against the published answers.
#[test]
fn bench_counts_other_kinds_of_census_exactly() {
    let shape = census(&["bench", "--census", "shape boxes=3x2", "--json"]);
    assert!(shape.status.success(), "{}", String::from_utf8_lossy(&shape.stderr));
    let report: serde_json::Value = serde_json::from_slice(&shape.stdout).unwrap();
    assert_eq!(report["census"], "shape boxes=2x3");
    assert_eq!(report["answer"], "28200960");
    assert_eq!(report["exact"], true);

    let different = census(&["bench", "--census", "essentially-different", "--threads", "2"]);
    let text = String::from_utf8_lossy(&different.stdout);
    assert!(different.status.success(), "{text}{}", String::from_utf8_lossy(&different.stderr));
    assert!(text.contains("classes of G fixing some grid: 27"), "{text}");
    assert!(text.contains("answer = 5,472,730,538 (the published value)"), "{text}");

    let unknown = census(&["bench", "--census", "shape boxes=3x5"]);
    assert_eq!(unknown.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("the shapes are 2x2 to 2x6"));
}

/// A database URL's password appears in no error and no log line: a dead
/// port, on every command that opens a database.
#[test]
fn a_database_password_is_never_printed() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let url = format!("postgres://census:hunter2-secret@127.0.0.1:{port}/census");
    for args in [
        vec!["run", "--database", url.as_str()],
        vec!["status", "--database", url.as_str()],
        vec!["token", "list", "--database", url.as_str()],
    ] {
        // No wait for a server that will never start (the policy itself is
        // tested in a_database_that_does_not_answer_is_waited_for_as_told).
        let output = Command::new(env!("CARGO_BIN_EXE_census"))
            .args(&args)
            .env("CENSUS_DATABASE_WAIT", "0")
            .output()
            .expect("the census binary runs");
        let printed = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
        assert!(!output.status.success(), "{args:?}: {printed}");
        assert!(!printed.contains("hunter2"), "{args:?}: {printed}");
        assert!(printed.contains(&format!("postgres://census:***@127.0.0.1:{port}/census")), "{args:?}: {printed}");
        // The real cause, not the pool's "timed out" after retrying it.
        assert!(printed.contains("Connection refused") && !printed.contains("timed out"), "{args:?}: {printed}");
    }
}

/// Reading a database (or revoking and releasing what it holds) never
/// creates one: a missing file is refused by name (exit 2) and stays
/// missing, whichever command and however the file is named.
#[test]
fn reading_a_missing_database_file_creates_nothing() {
    let missing = temp_path("missing.db");
    let _ = std::fs::remove_file(&missing);
    let path = missing.to_str().unwrap();
    let sqlite_url = format!("sqlite://{path}");
    for database in [path, sqlite_url.as_str()] {
        for args in [
            &["status", "--database", database][..],
            &["verify", "--database", database],
            &["token", "list", "--database", database],
            &["token", "revoke", "--database", database, "w1"],
            &["token", "release", "--database", database, "w1"],
        ] {
            let output = census(args);
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
            assert!(stderr.contains(&format!("there is no database file {path}")), "{args:?}: {stderr}");
            assert!(!missing.exists(), "{args:?} created {}", missing.display());
        }
    }
}

/// The box shapes are named in the same words by every command's help and
/// by the error for a shape that is not one; a shape that needs Postgres
/// is named as it is typed.
#[test]
fn the_shapes_are_named_alike_everywhere() {
    const SHAPES: &str = "2x2 to 2x6, their transposes, 3x3, and 4x3 (3x4)";
    for command in ["run", "bench", "submit"] {
        let help = String::from_utf8_lossy(&census(&[command, "--help"]).stdout).into_owned();
        assert!(help.contains(SHAPES), "census {command} --help: {help}");
    }
    for command in ["run", "bench"] {
        let refused = census(&[command, "--census", "shape boxes=2x7"]);
        assert_eq!(refused.status.code(), Some(2));
        assert!(String::from_utf8_lossy(&refused.stderr).contains(SHAPES), "{command}");
    }
    let db = temp_path("six-by-two.db");
    let refused = census(&["run", "--census", "shape boxes=6x2", "--database", db.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("census: error: shape boxes=2x6 needs Postgres (--database postgres://...)"), "{stderr}");
    assert!(!db.exists(), "nothing was created");
}

/// `census layers` for 2x4: the published layer sizes and emissions
/// (linche89/sudoku-enumeration, docs/reports/og2/c6-standalone-research-prompt-20260905.md)
/// and Russell's total.
#[test]
fn layers_2x4_prints_each_layer_and_the_total() {
    let output = census(&["layers", "--boxes", "4x2", "--json"]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let column =
        |key: &str| report["layers"].as_array().unwrap().iter().map(|l| l[key].as_u64().unwrap()).collect::<Vec<_>>();
    assert_eq!(column("layer"), [1, 2, 3, 4]);
    assert_eq!(column("states"), [1, 23, 54, 26]);
    assert_eq!(column("emissions"), [0, 4752, 4630, 712]);
    assert_eq!(report["classes"], 26);
    assert_eq!(report["grids"], "29136487207403520");
    assert_eq!(report["published"], true);

    let output = census(&["layers", "--boxes", "2x4", "--to-layer", "2"]);
    assert!(output.status.success());
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("layer 2: 23 states, 4,752 emissions"), "{stdout}");
    assert!(!stdout.contains("grids"), "no total before the last layer: {stdout}");
}

/// `census layers` through a directory it keeps: the same layers on 1 and
/// 3 threads, every layer's files counted in bytes, and a second run over
/// the directory counts nothing again (its jobs' digests are in the log).
#[test]
fn layers_keeps_its_files_in_dir_and_goes_on_from_them() {
    let dir = temp_path("layers-dir");
    let dir_text = dir.to_str().unwrap();
    let run = |threads: &str| {
        let output = census(&[
            "layers",
            "--boxes",
            "2x4",
            "--threads",
            threads,
            "--shards",
            "3",
            "--parts",
            "2",
            "--dir",
            dir_text,
            "--json",
        ]);
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        serde_json::from_slice::<serde_json::Value>(&output.stdout).unwrap()
    };
    let first = run("1");
    assert_eq!(first["census"], "layers boxes=2x4 shards=3 parts=2");
    assert_eq!(first["grids"], "29136487207403520");
    let bytes: Vec<u64> = first["layers"].as_array().unwrap().iter().map(|l| l["bytes"].as_u64().unwrap()).collect();
    assert_eq!(bytes[0], 0, "layer 1 is no file");
    assert!(bytes[1..].iter().all(|&b| b > 0), "{bytes:?}");
    let log = std::fs::read_to_string(dir.join("2x4-s3-p2").join("accepted")).unwrap();
    assert_eq!(log.lines().count(), (1 + 2) + 2 * (3 + 2), "every map and reduce job once: {log}");
    let again = run("3");
    assert_eq!(again["grids"], first["grids"]);
    assert_eq!(again["layers"].as_array().unwrap().iter().map(|l| &l["bytes"]).collect::<Vec<_>>(), {
        first["layers"].as_array().unwrap().iter().map(|l| &l["bytes"]).collect::<Vec<_>>()
    });
    assert_eq!(std::fs::read_to_string(dir.join("2x4-s3-p2").join("accepted")).unwrap(), log, "nothing counted again");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn layers_refuses_bad_shapes_and_layers_with_exit_2() {
    for (args, message) in [
        (&["layers", "--boxes", "3x3"][..], "is not 2xC or Cx2"),
        (&["layers", "--boxes", "2x4", "--to-layer", "5"][..], "2x4 has layers 1 to 4"),
        (&["layers", "--boxes", "2x4", "--parts", "0"][..], "parts=0: parts are 1..=65536"),
    ] {
        let output = census(args);
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(message), "{stderr}");
    }
}

/// `token create --output` refuses a file that exists before it stores a
/// token (a stored token nobody has would be a credential in the air), and
/// another engine's URL is refused by name.
#[test]
fn token_create_checks_its_output_first_and_mysql_is_refused_by_name() {
    let db = temp_path("output-first.db");
    let existing = temp_path("existing-token");
    std::fs::write(&existing, "keep me\n").unwrap();
    let db_text = db.to_str().unwrap();
    let create_into = |output: &std::path::Path| {
        census(&[
            "token",
            "create",
            "--role",
            "worker",
            "--name",
            "w1",
            "--database",
            db_text,
            "--output",
            output.to_str().unwrap(),
        ])
    };
    let refused = create_into(&existing);
    assert_eq!(refused.status.code(), Some(2), "{}", String::from_utf8_lossy(&refused.stderr));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--output"));
    assert_eq!(std::fs::read_to_string(&existing).unwrap(), "keep me\n");
    let fresh = temp_path("fresh-token");
    let made = create_into(&fresh);
    assert!(
        made.status.success(),
        "w1 was never stored, so it can be made now: {}",
        String::from_utf8_lossy(&made.stderr)
    );
    assert!(!std::fs::read_to_string(&fresh).unwrap().trim().is_empty(), "the token is in the file");
    let listed = census(&["token", "list", "--database", db_text]);
    let names = String::from_utf8_lossy(&listed.stdout).lines().filter(|line| line.starts_with("w1 ")).count();
    assert_eq!(names, 1, "w1 stored once: {}", String::from_utf8_lossy(&listed.stdout));

    let mysql = census(&["token", "list", "--database", "mysql://census:pw@127.0.0.1/census"]);
    assert_eq!(mysql.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&mysql.stderr);
    assert!(stderr.contains("mysql:// is not a database census can use"), "{stderr}");
    assert!(!stderr.contains("pw@"), "{stderr}");
    for path in [db, existing, fresh] {
        let _ = std::fs::remove_file(path);
    }
}

/// `census run` and `census coordinator` wait for a database server by one
/// policy: retries (each logged) while CENSUS_DATABASE_WAIT seconds have not
/// passed, then the error; a wait that is not a number is refused by name.
#[test]
fn a_database_that_does_not_answer_is_waited_for_as_told() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let url = format!("postgres://census:pw@127.0.0.1:{port}/census");
    let with_wait = |command: &[&str], wait: &str| {
        Command::new(env!("CARGO_BIN_EXE_census"))
            .args(command)
            .env("CENSUS_DATABASE_WAIT", wait)
            .output()
            .expect("the census binary runs")
    };
    // One attempt gives up after the pool's 5 s: 12 s leave room for a retry.
    let waited = with_wait(&["run", "--database", url.as_str()], "12");
    let stderr = String::from_utf8_lossy(&waited.stderr);
    assert!(!waited.status.success(), "{stderr}");
    assert!(stderr.contains("cannot open the database yet; retrying in 2 s"), "run retries: {stderr}");
    assert!(!stderr.contains(":pw@"), "{stderr}");
    // The coordinator opens its database through the same function.
    for command in [&["run", "--database", url.as_str()][..], &["coordinator", "--database-url", url.as_str()][..]] {
        let at_once = with_wait(command, "0");
        let stderr = String::from_utf8_lossy(&at_once.stderr);
        assert!(!at_once.status.success());
        assert!(!stderr.contains("retrying"), "{command:?} with no wait: {stderr}");
        let bad = with_wait(command, "soon");
        assert!(String::from_utf8_lossy(&bad.stderr).contains("CENSUS_DATABASE_WAIT=\"soon\" is not a number"));
    }
}

/// Every subcommand of `--help` has its place in the guide (`docs/guide.md`
/// names each as `census NAME`); its flags are the generated reference's.
#[test]
fn the_guide_names_every_command() {
    let guide = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/guide.md")).unwrap();
    let help = String::from_utf8_lossy(&census(&["--help"]).stdout).into_owned();
    let commands: Vec<&str> = help
        .lines()
        .skip_while(|line| !line.starts_with("Commands:"))
        .skip(1)
        .take_while(|line| line.starts_with("  "))
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| *name != "help")
        .collect();
    assert!(commands.len() >= 15, "{help}");
    let missing: Vec<&&str> = commands.iter().filter(|name| !guide.contains(&format!("census {name}"))).collect();
    assert!(missing.is_empty(), "docs/guide.md does not name {missing:?}");
}

/// `token list` prints the columns its help names (the help promised a
/// "created" column the list lacked: issue 25), the creation time as a UTC
/// date and minute.
#[test]
fn token_list_prints_the_columns_its_help_names() {
    let db = temp_path("columns.db");
    let db = db.to_str().unwrap();
    let made = census(&["token", "create", "--role", "reader", "--name", "watcher", "--database", db]);
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    let help = String::from_utf8_lossy(&census(&["token", "--help"]).stdout).into_owned();
    let promised: Vec<String> = help
        .lines()
        .find_map(|line| line.trim_start().strip_prefix("list "))
        .and_then(|line| line.split_once(": "))
        .unwrap_or_else(|| panic!("`token --help` lists the columns of `token list`: {help}"))
        .1
        .split(", ")
        .map(|column| column.split_whitespace().next().unwrap().to_string())
        .collect();
    assert_eq!(promised, ["name", "role", "created", "rejected", "revoked", "quarantined"], "{help}");
    let listed = String::from_utf8(census(&["token", "list", "--database", db]).stdout).unwrap();
    let header: Vec<&str> = listed.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["name", "role", "created", "(UTC)", "rejected", "revoked", "quarantined"], "{listed}");
    let row: Vec<&str> = listed.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!((row[0], row[1], row[4], row[5], row[6]), ("watcher", "reader", "0", "no", "no"), "{listed}");
    let digits = |text: &str, pattern: &str| {
        text.len() == pattern.len()
            && text.chars().zip(pattern.chars()).all(|(c, p)| if p == '9' { c.is_ascii_digit() } else { c == p })
    };
    assert!(digits(row[2], "9999-99-99") && digits(row[3], "99:99"), "created as YYYY-MM-DD HH:MM: {listed}");
    assert!(row[2] >= "2026-01-01", "the creation time, not the epoch: {listed}");
    let _ = std::fs::remove_file(db);
}

/// Where a run is chosen, `--census` is named beside `--stage`: `submit`
/// without either said only what clap said of `--stage` (issue 25), and
/// the coordinator's `--redundancy` spoke only of `--stage`.
#[test]
fn submit_and_the_coordinator_name_census_beside_stage() {
    let bare = census(&["submit", "--coordinator", "127.0.0.1:9"]);
    let stderr = String::from_utf8_lossy(&bare.stderr);
    assert_eq!(bare.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.starts_with("census: error: ") && stderr.contains("--census") && stderr.contains("--stage"),
        "{stderr}"
    );
    let help = String::from_utf8_lossy(&census(&["coordinator", "--help"]).stdout).into_owned();
    // The line under the flag: its description.
    let redundancy = help.lines().skip_while(|line| !line.trim_start().starts_with("--redundancy ")).nth(1);
    let redundancy = redundancy.unwrap_or_else(|| panic!("no --redundancy in {help}"));
    assert!(redundancy.contains("--stage") && redundancy.contains("--census"), "{redundancy}");
}

/// A second SIGTERM ends a worker at once, exit code 130, whatever the
/// first is waiting for: here a coordinator that takes the connection and
/// never answers (the worker's call would wait out its 20 s deadline). The
/// README promises it; signals were once ignored (issue 25).
#[test]
fn a_second_signal_ends_a_worker_whose_coordinator_never_answers() {
    use std::io::{BufRead, Read};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming().flatten() {
            // Read what comes, answer nothing, keep the connection open.
            let mut reader = stream.try_clone().unwrap();
            std::thread::spawn(move || while reader.read(&mut [0u8; 4096]).is_ok_and(|n| n > 0) {});
            held.push(stream);
        }
    });
    let token = format!("census_{}", "ab".repeat(32));
    let mut worker = Command::new(env!("CARGO_BIN_EXE_census"))
        .args(["worker", "--coordinator", &format!("http://{address}"), "--token", &token, "--threads", "1"])
        .env_remove("RUST_LOG")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(worker.stderr.take().unwrap()).lines();
    let mut seen = Vec::new();
    let mut wait_for = |wanted: &str, seen: &mut Vec<String>| {
        for line in lines.by_ref() {
            let line = line.unwrap();
            seen.push(line.clone());
            if line.contains(wanted) {
                return;
            }
        }
        panic!("the worker never logged {wanted:?}: {seen:?}");
    };
    wait_for("worker starting", &mut seen);
    let term = || {
        // SAFETY: kill has no memory-safety preconditions.
        unsafe {
            libc::kill(worker.id() as i32, libc::SIGTERM);
        }
    };
    term();
    wait_for("signal received: stopping (a second signal exits at once)", &mut seen);
    term();
    let mut rest = String::new();
    for line in lines {
        rest.push_str(&line.unwrap());
        rest.push('\n');
    }
    let status = worker.wait().unwrap();
    assert_eq!(status.code(), Some(130), "{seen:?} {rest}");
    assert!(rest.contains("census: a second signal: exiting at once"), "{seen:?} {rest}");
}

/// The kinds of census come from one registry: `classes --kinds` lists each
/// with its text, and the help of every command that takes a census names
/// each kind's text.
#[test]
fn every_kind_is_listed_and_named_in_the_help() {
    let output = census(&["classes", "--kinds"]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let table = String::from_utf8_lossy(&output.stdout).into_owned();
    assert_eq!(table, census_math::census::kinds_table());
    for command in ["run", "submit", "bench"] {
        let help = String::from_utf8_lossy(&census(&[command, "--help"]).stdout).into_owned();
        for kind in census_math::census::kinds() {
            assert!(table.contains(&format!("| `{}` | `{}` |", kind.name, kind.grammar)), "{table}");
            assert!(help.contains(kind.grammar), "census {command} --help names {}: {help}", kind.name);
        }
    }
}

/// A usage error is one line, `census: error: ...` with clap's tip on it,
/// then the command's usage: no blank lines, no "For more information"
/// (issue 46: they were four lines). A bad value is the one line.
#[test]
fn a_usage_error_is_one_line_then_the_usage() {
    for (args, says, usage) in [
        (&["run", "--no-such-flag"][..], "unexpected argument '--no-such-flag' found", Some("Usage: census run ")),
        (
            &["token", "create", "--role", "reader"],
            "not provided: --database <DATABASE> --name <NAME>",
            Some("Usage: census token create "),
        ),
        (&["run", "--threads", "0"], "\"0\" is not a thread count from 1 to 1024", None),
    ] {
        let output = census(args);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        let lines: Vec<&str> = stderr.lines().collect();
        assert!(lines[0].starts_with("census: error: ") && lines[0].contains(says), "{args:?}: {stderr}");
        match usage {
            Some(usage) => assert!(lines.len() == 2 && lines[1].starts_with(usage), "{args:?}: {stderr}"),
            None => assert_eq!(lines.len(), 1, "{args:?}: {stderr}"),
        }
    }
}
