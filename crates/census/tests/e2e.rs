//! End to end, as users and operators run it: `census run` on SQLite, and a
//! coordinator with worker processes on a throw-away Postgres, with workers
//! killed and the coordinator restarted mid-run.

use std::net::TcpListener;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const N0: &str = "6670903752021072936960";
const N0_PRINTED: &str = "6,670,903,752,021,072,936,960";

fn census() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_census"));
    command.env_remove("RUST_LOG");
    command
}

/// An SQLite file for one test, new, and removed with its WAL files when
/// the test passes (kept for a look when it fails): a suite run again and
/// again must not fill the disk (a run of it left about 300 MB before).
struct TempDb(String);

impl std::ops::Deref for TempDb {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl Drop for TempDb {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            remove_db_files(&self.0);
        }
    }
}

fn remove_db_files(path: &str) {
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{path}{suffix}"));
    }
}

fn temp_db(name: &str) -> TempDb {
    let path = std::env::temp_dir().join(format!("census-e2e-{}-{name}.db", std::process::id()));
    let path = path.display().to_string();
    remove_db_files(&path);
    TempDb(path)
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn signal(child: &Child, signal: i32) {
    // SAFETY: kill has no memory-safety preconditions.
    unsafe {
        libc::kill(child.id() as i32, signal);
    }
}

/// How long [`Cluster::wait_for_worker`] waits without a new result
/// before it calls a worker hung.
const STALL: Duration = Duration::from_secs(300);

fn wait_with_timeout(child: &mut Child, limit: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("process {} did not finish within {limit:?}", child.id());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn text(output: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr))
}

#[test]
fn census_run_on_a_fresh_sqlite_file_prints_n0() {
    let db = temp_db("fresh");
    let output = census().args(["run", "--database", &db, "--threads", "2"]).output().unwrap();
    let printed = text(&output);
    assert!(output.status.success(), "{printed}");
    assert!(printed.contains(&format!("N0 = 9! x 72^2 x S = {N0_PRINTED}")), "{printed}");
    assert!(printed.contains("S  = 3,546,146,300,288 = 2^7 x 27,704,267,971"), "{printed}");
    assert!(printed.contains("Kilfoil's estimate: 6.6571e21"), "{printed}");

    // Run again: the stored answer, nothing recounted.
    let again = census().args(["run", "--database", &db]).output().unwrap();
    let printed = text(&again);
    assert!(again.status.success(), "{printed}");
    assert!(printed.contains("already finished") && printed.contains(N0_PRINTED), "{printed}");
}

/// Other kinds of census through `census run` on SQLite: the essentially
/// different grids (Russell and Jarvis, 2006) and 3x2 boxes (the transpose
/// of 2x3: 28,200,960 grids), into one file, each with its terms; then
/// `verify` compares the two shape runs of the same count.
#[test]
fn census_run_counts_other_kinds_on_sqlite() {
    let db = temp_db("kinds");
    let output = census().args(["run", "--database", &db, "--census", "essentially-different", "-q"]).output().unwrap();
    let printed = text(&output);
    assert!(output.status.success(), "{printed}");
    assert!(printed.contains("essentially-different: 5,472,730,538"), "{printed}");
    assert!(printed.contains("classes of G fixing some grid = 27"), "{printed}");
    assert!(printed.contains("class 0: size x A = 1 x 18383222420692992"), "{printed}");
    for boxes in ["3x2", "2x3"] {
        let census_text = format!("shape boxes={boxes}");
        let output = census().args(["run", "--database", &db, "--census", &census_text, "-q"]).output().unwrap();
        let printed = text(&output);
        assert!(output.status.success(), "{printed}");
        assert!(printed.contains("shape boxes=2x3: 28,200,960"), "{printed}");
    }
    let output = census().args(["verify", "--database", &db, "--census", "shape boxes=3x2"]).output().unwrap();
    let printed = text(&output);
    // 3x2 and 2x3 are one census (the transpose): one run, compared with
    // the published count (Sudoku Players' Forum, 2005).
    assert!(output.status.success(), "{printed}");
    assert!(printed.contains("run 2 (shape boxes=2x3): the answer = 28,200,960"), "{printed}");
    assert!(printed.contains("agree: the run gives the published count"), "{printed}");
    let output = census().args(["verify", "--database", &db, "--census", "essentially-different"]).output().unwrap();
    assert!(output.status.success(), "{}", text(&output));
    assert!(text(&output).contains("published: 5,472,730,538"), "{}", text(&output));
    let output = census().args(["status", "--database", &db, "--census", "essentially-different"]).output().unwrap();
    let printed = text(&output);
    assert!(output.status.success(), "{printed}");
    assert!(printed.contains("essentially-different: 5,472,730,538"), "{printed}");
    assert!(printed.contains("275 classes: too many to list here"), "{printed}");
}

/// `census run` of a layers census: its workers keep the layer files in a
/// directory next to the SQLite file, and the run ends with the published
/// 2x3 total (Sudoku Players' Forum, 2005).
#[test]
fn census_run_counts_by_layers_next_to_its_file() {
    let db = temp_db("layers");
    let beside = std::path::Path::new(&*db).with_extension("layers");
    let _ = std::fs::remove_dir_all(&beside);
    let output = census()
        .args(["run", "--database", &db, "--census", "layers boxes=2x3 shards=2 parts=3", "--threads", "2", "-q"])
        .output()
        .unwrap();
    let printed = text(&output);
    assert!(output.status.success(), "{printed}");
    assert!(printed.contains("layers boxes=2x3 shards=2 parts=3: 28,200,960"), "{printed}");
    assert!(beside.join("2x3-s2-p3").is_dir(), "{}", beside.display());
    let _ = std::fs::remove_dir_all(&beside);
}

#[test]
fn census_run_interrupted_resumes_and_ends_exact() {
    let db = temp_db("interrupted");
    // The banded counter takes about 0.1 s a job: a stage runs for tens of
    // seconds, long enough to interrupt. Not the default stage, so that the
    // hint must name it.
    // Interrupted once some jobs are done (asked, not waited for), so the
    // second run must resume.
    let (code, printed) =
        interrupt_run(&["run", "--database", &db, "--stage", "71", "--counter", "banded", "--threads", "2"], 0, 1);
    assert_eq!(code, Some(130), "{printed}");
    assert!(printed.contains("interrupted: nothing is lost"), "{printed}");

    // Do exactly what the hint says.
    let hint = printed.lines().find(|l| l.starts_with("interrupted:")).unwrap();
    let command = hint.split('`').nth(1).unwrap_or_else(|| panic!("no command in {hint:?}"));
    let words: Vec<&str> = command.split_whitespace().collect();
    assert_eq!(words[..2], ["census", "run"], "{hint}");
    let second = census().args(&words[1..]).output().unwrap();
    let printed = text(&second);
    assert!(second.status.success(), "{printed}");
    assert!(printed.contains("resuming at"), "the second run resumes: {printed}");
    assert!(
        printed.contains("sudoku stage=felgenhauer-jarvis counter=banded (71 classes)"),
        "the same run, not a new Russell run: {printed}"
    );
    assert!(printed.contains(N0_PRINTED), "{printed}");
}

/// A child process killed if the test gives up on it (a failed assertion
/// unwinds past it): a failed test must not leave a `census run` counting
/// for the rest of the suite.
struct KilledIfLeft(Child);

impl Drop for KilledIfLeft {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// Starts `census run` with `args`, waits until the run's own coordinator
/// reports at least `leased` jobs in hand and `done` jobs done (asked on the
/// loopback port the run prints), and interrupts it with SIGINT; what it
/// printed, and its exit status.
fn interrupt_run(args: &[&str], leased: u64, done: u64) -> (Option<i32>, String) {
    use std::io::BufRead;
    let mut reaped = KilledIfLeft(census().args(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap());
    let child = &mut reaped.0;
    let stdout = child.stdout.take().unwrap();
    let (lines, seen) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            let _ = lines.send(line);
        }
    });
    let mut printed = String::new();
    // Creating a 2x6 run builds and stores 947,985 jobs: minutes at most.
    let address = loop {
        match seen.recv_timeout(Duration::from_secs(600)) {
            Ok(line) => {
                printed.push_str(&format!("{line}\n"));
                if let Some(rest) = line.strip_prefix("serving on ") {
                    break rest.split_whitespace().next().unwrap().to_string();
                }
            }
            Err(error) => panic!("census run never started serving ({error}): {printed}"),
        }
    };
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let output = census().args(["status", "--coordinator", &address, "--json"]).output().unwrap();
        if let Ok(status) = serde_json::from_slice::<serde_json::Value>(&output.stdout)
            && status["leased"].as_u64().unwrap_or(0) >= leased
            && status["done"].as_u64().unwrap_or(0) >= done
        {
            break;
        }
        assert!(Instant::now() < deadline, "the run never got to {leased} leased, {done} done: {}", text(&output));
        std::thread::sleep(Duration::from_millis(200));
    }
    signal(child, libc::SIGINT);
    // Generous: what is checked is that it exits, not how fast.
    let status = wait_with_timeout(child, Duration::from_secs(120));
    while let Ok(line) = seen.recv_timeout(Duration::from_secs(5)) {
        printed.push_str(&format!("{line}\n"));
    }
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    (status.code(), printed + &stderr)
}

/// Jobs of minutes (2x6 boxes) stop when the run is interrupted: the
/// counters read a cancellation flag, the process exits, and the run
/// resumes (the same run, its jobs back in the queue, none failed).
#[test]
fn ctrl_c_stops_a_run_of_long_jobs_and_it_resumes() {
    let db = temp_db("long-jobs");
    let refused = census().args(["run", "--database", &db, "--census", "shape boxes=2x6"]).output().unwrap();
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused));
    assert!(
        text(&refused).contains("needs Postgres") && text(&refused).contains("--allow-sqlite"),
        "{}",
        text(&refused)
    );

    let args = ["run", "--database", &db, "--census", "shape boxes=2x6", "--allow-sqlite", "--threads", "2"];
    let (code, printed) = interrupt_run(&args, 1, 0);
    assert_eq!(code, Some(130), "{printed}");
    assert!(printed.contains("interrupted: nothing is lost"), "{printed}");
    assert!(printed.contains("--census \"shape boxes=2x6\""), "{printed}");

    // Resumable: the same run again (not a second one), and stopped again.
    let (code, printed) = interrupt_run(&args, 1, 0);
    assert_eq!(code, Some(130), "{printed}");
    assert!(printed.contains("shape boxes=2x6 (63,199 classes), 947,985 jobs"), "{printed}");
    let status = census().args(["status", "--database", &db, "--json"]).output().unwrap();
    let status: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!((status["run_id"].as_i64(), status["failed"].as_i64()), (Some(1), Some(0)), "{status}");
}

/// The 12x12 count (4x3 boxes) runs on a laptop's SQLite file, which holds
/// its counts (past 2^64) exactly: `census run` creates its 144,578 jobs,
/// stops on Ctrl-C with its leased job back to the queue, and the same run
/// resumes. (Counting it takes hundreds of core-hours: never here.)
#[test]
fn a_4x3_run_is_created_on_sqlite_interrupted_and_resumed() {
    let db = temp_db("twelve");
    let args = ["run", "--database", &db, "--census", "shape boxes=4x3", "--threads", "1"];
    let (code, printed) = interrupt_run(&args, 1, 0);
    assert_eq!(code, Some(130), "{printed}");
    assert!(printed.contains("shape boxes=4x3 (144,578 classes), 144,578 jobs"), "{printed}");
    assert!(printed.contains("interrupted: nothing is lost"), "{printed}");

    let (code, printed) = interrupt_run(&args, 1, 0);
    assert_eq!(code, Some(130), "{printed}");
    assert!(printed.contains("shape boxes=4x3 (144,578 classes), 144,578 jobs"), "{printed}");
    let status = census().args(["status", "--database", &db, "--json"]).output().unwrap();
    let status: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!((status["run_id"].as_i64(), status["failed"].as_i64()), (Some(1), Some(0)), "{status}");
    assert_eq!(status["jobs_total"].as_i64(), Some(144_578), "{status}");
}

#[test]
fn a_bad_database_path_is_a_clear_error() {
    let output = census().args(["run", "--database", "/nonexistent-dir/census.db"]).output().unwrap();
    assert_eq!(output.status.code(), Some(1));
    let printed = text(&output);
    assert!(printed.contains("/nonexistent-dir/census.db") && printed.contains("cannot be opened"), "{printed}");
}

struct Cluster {
    database_url: String,
    address: String,
    port: u16,
    children: Vec<Child>,
    secrets: std::path::PathBuf,
    /// The stderr of its coordinators and workers, one file each, for
    /// [`Cluster::diagnosis`]: kept when the test fails.
    logs: std::path::PathBuf,
    /// Its SQLite file, if it has one: removed after the children are.
    database_file: Option<TempDb>,
}

impl Cluster {
    fn new() -> Cluster {
        Cluster::on(census_testpg::fresh_database())
    }

    fn on_file(database: TempDb) -> Cluster {
        let mut cluster = Cluster::on(database.to_string());
        cluster.database_file = Some(database);
        cluster
    }

    fn on(database_url: String) -> Cluster {
        let port = free_port();
        let secrets = std::env::temp_dir().join(format!("census-e2e-secrets-{}-{port}", std::process::id()));
        let _ = std::fs::remove_dir_all(&secrets);
        std::fs::create_dir_all(&secrets).unwrap();
        let logs = census_testpg::scratch_dir("census-e2e-logs").join(port.to_string());
        let _ = std::fs::remove_dir_all(&logs);
        std::fs::create_dir_all(&logs).unwrap();
        let cluster = Cluster {
            database_url,
            address: format!("127.0.0.1:{port}"),
            port,
            children: Vec::new(),
            secrets,
            logs,
            database_file: None,
        };
        cluster.create_token("operator", "ops");
        cluster
    }

    /// Issues a token with the CLI, as an operator does, into a secret file.
    fn create_token(&self, role: &str, name: &str) -> String {
        let path = self.secrets.join(name);
        let output = census()
            .args(["token", "create", "--role", role, "--name", name, "--database", &self.database_url, "--output"])
            .arg(&path)
            .output()
            .unwrap();
        assert!(output.status.success(), "{}", text(&output));
        path.display().to_string()
    }

    fn operator_token(&self) -> String {
        self.secrets.join("ops").display().to_string()
    }

    fn coordinator(&self, extra: &[&str]) -> Child {
        census()
            .args(["coordinator", "--database-url", &self.database_url, "--listen", &self.address])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(self.log("coordinator"))
            .spawn()
            .unwrap()
    }

    /// The file `name`'s stderr goes to, appended to: a coordinator
    /// restarted, or a worker started again, adds to its file.
    fn log(&self, name: &str) -> std::fs::File {
        let path = self.logs.join(format!("{name}.log"));
        std::fs::OpenOptions::new().create(true).append(true).open(path).unwrap()
    }

    fn worker(&self, name: &str) -> Child {
        self.worker_with(name, &[])
    }

    fn worker_with(&self, name: &str, extra: &[&str]) -> Child {
        let token = self.create_token("worker", name);
        census()
            .args([
                "worker",
                "--coordinator",
                &format!("http://{}", self.address),
                "--threads",
                "1",
                "--exit-when-done",
            ])
            .args(["--token-file", &token])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(self.log(&format!("worker-{name}")))
            .spawn()
            .unwrap()
    }

    fn status_json(&self) -> serde_json::Value {
        let output = census()
            .args(["status", "--coordinator", &self.address, "--json", "--token-file", &self.operator_token()])
            .output()
            .unwrap();
        assert!(output.status.success(), "{}", text(&output));
        serde_json::from_slice(&output.stdout).unwrap()
    }

    fn wait_until_serving(&self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(Instant::now() < deadline, "the coordinator did not start listening");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits for `worker` to end, however slow the machine, while the run
    /// moves: a hang detector, not a speed test. It fails only when no
    /// result has been stored for [`STALL`] (a busy 2-core machine counts
    /// slowly, but it counts).
    fn wait_for_worker(&self, worker: &mut Child) -> std::process::ExitStatus {
        let results = || {
            Command::new(census_testpg::binary("psql"))
                .args([&self.database_url, "-At", "-c", "SELECT COUNT(*) FROM results"])
                .output()
                .ok()
                .filter(|output| output.status.success())
                .map(|output| output.stdout)
        };
        let (mut seen, mut since) = (results(), Instant::now());
        loop {
            if let Some(status) = worker.try_wait().unwrap() {
                return status;
            }
            let now = results();
            // A database being restarted answers nothing: no progress, no failure.
            if now.is_some() && now != seen {
                (seen, since) = (now, Instant::now());
            } else if since.elapsed() > STALL {
                let _ = worker.kill();
                panic!(
                    "no result stored for {STALL:?}: worker {} hangs (hang detector)\n{}",
                    worker.id(),
                    self.diagnosis()
                );
            }
            std::thread::sleep(Duration::from_secs(1));
        }
    }

    /// What a hang detector prints before it fails: the end of each
    /// process's stderr, the coordinator's status, and the jobs as the
    /// store has them. Each part says why it is missing, if it is.
    fn diagnosis(&self) -> String {
        let mut said = String::new();
        let mut logs: Vec<_> = std::fs::read_dir(&self.logs).unwrap().flatten().map(|entry| entry.path()).collect();
        logs.sort();
        for log in logs {
            let log_text = std::fs::read_to_string(&log).unwrap_or_else(|e| format!("(unreadable: {e})"));
            let lines: Vec<&str> = log_text.lines().collect();
            let tail = lines[lines.len().saturating_sub(60)..].join("\n");
            said += &format!("--- the last {} lines of {}\n{tail}\n", lines.len().min(60), log.display());
        }
        let status = census()
            .args(["status", "--coordinator", &self.address, "--json", "--token-file", &self.operator_token()])
            .output();
        let status = status.map_or_else(|e| e.to_string(), |output| text(&output));
        said += &format!("--- census status --json\n{status}\n");
        for query in [
            "SELECT run_id, stage, state, COUNT(*), SUM(votes), MIN(id), MAX(id) FROM jobs GROUP BY 1, 2, 3 ORDER BY 1, 2, 3",
            "SELECT j.id, j.stage, j.state, j.round, j.votes, j.failures, j.lease_owner, j.lease_expires_at, \
             (SELECT string_agg(r.worker || ':' || r.outcome || ':r' || r.round, ',') FROM results r WHERE r.job_id = j.id) \
             FROM jobs j WHERE j.state <> 'done' ORDER BY j.id LIMIT 40",
            "SELECT (extract(epoch FROM now()) * 1000)::bigint AS now_ms",
        ] {
            let output =
                Command::new(census_testpg::binary("psql")).args([&self.database_url, "-A", "-c", query]).output();
            let output = output.map_or_else(|e| e.to_string(), |output| text(&output));
            said += &format!("--- {query}\n{output}\n");
        }
        said
    }

    fn sql(&self, query: &str) -> String {
        let output = Command::new(census_testpg::binary("psql"))
            .args([&self.database_url, "-At", "-c", query])
            .output()
            .unwrap();
        assert!(output.status.success(), "{}", text(&output));
        String::from_utf8(output.stdout).unwrap().trim().to_string()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.secrets);
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.logs);
        }
    }
}

/// The results table proves nothing was counted twice: exactly one accepted
/// result per job, and the class sums are the sums of those results.
fn assert_counted_once(cluster: &Cluster, jobs: u64) {
    assert_eq!(cluster.sql("SELECT COUNT(*) FROM results WHERE outcome = 'accepted'"), jobs.to_string());
    assert_eq!(cluster.sql("SELECT COUNT(DISTINCT job_id) FROM results WHERE outcome = 'accepted'"), jobs.to_string());
    assert_eq!(
        cluster.sql(
            "SELECT COUNT(*) FROM classes c WHERE c.count_sum <> (SELECT COALESCE(SUM(x.count), 0) FROM results x \
             JOIN jobs j ON j.id = x.job_id WHERE x.outcome = 'accepted' AND j.run_id = c.run_id AND j.class_id = c.class_id)"
        ),
        "0"
    );
}

/// The second kind of census through the same engine: a Postgres
/// coordinator and two workers count the essentially different grids, and
/// the generic audit view shows the 27 classes of G that fix some grid.
#[test]
fn a_postgres_cluster_counts_the_essentially_different_grids() {
    let mut cluster = Cluster::new();
    let coordinator = cluster.coordinator(&["--census", "essentially-different"]);
    cluster.children.push(coordinator);
    cluster.wait_until_serving();
    // Each worker has its share of the 282 jobs (--max-jobs), so both take
    // part whatever the machine: neither can lease the other's share.
    let mut workers =
        vec![cluster.worker_with("one", &["--max-jobs", "82"]), cluster.worker_with("two", &["--max-jobs", "200"])];
    for worker in &mut workers {
        assert!(cluster.wait_for_worker(worker).success());
    }
    let status = cluster.status_json();
    assert_eq!(status["final"], true, "{status}");
    assert_eq!(status["census"], "essentially-different");
    assert_eq!(status["answer"], "5472730538", "Russell and Jarvis (2006)");
    assert_eq!(status["done"], 282);
    assert_eq!(cluster.sql("SELECT answer FROM run_progress"), "5472730538");
    // Burnside: the class-size-weighted sum of fixed counts, 3,359,232 x the answer.
    assert_eq!(cluster.sql("SELECT SUM(contribution) FROM group_totals"), "18384171550626816");
    assert_eq!(cluster.sql("SELECT COUNT(*) FROM group_totals WHERE count_sum > 0 AND complete"), "27");
    assert_eq!(cluster.sql("SELECT count_sum FROM group_totals WHERE label = 'class 0'"), "18383222420692992");
    assert_counted_once(&cluster, 282);
    assert_eq!(
        cluster.sql("SELECT string_agg(worker || ':' || jobs, ',' ORDER BY worker) FROM worker_stats WHERE run_id = 1"),
        "one:82,two:200"
    );

    // A third kind on the same cluster: 2x4 boxes, submitted to the running
    // coordinator. Its classes contribute weight x F(S)^2 in the audit view.
    let output = census()
        .args(["submit", "--coordinator", &cluster.address, "--census", "shape boxes=2x4", "--token-file"])
        .arg(cluster.operator_token())
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", text(&output));
    assert!(wait_with_timeout(&mut cluster.worker("three"), Duration::from_secs(120)).success());
    let status = cluster.status_json();
    assert_eq!((status["census"].as_str(), status["final"].as_bool()), (Some("shape boxes=2x4"), Some(true)));
    assert_eq!(status["answer"], "29136487207403520", "the published count of 8x8 grids with 2x4 boxes");
    assert_eq!(cluster.sql("SELECT SUM(contribution) FROM group_totals WHERE run_id = 2"), "29136487207403520");
    assert_eq!(
        cluster.sql("SELECT weight || ' ' || count_sum || ' ' || contribution FROM group_totals WHERE run_id = 2 AND class_id = 0"),
        "560 331776 61642175938560",
        "class 0: weight 560, F = 331,776, contribution 560 x F^2"
    );
}

/// The layer recurrence through a coordinator (issue 22): 2x5 by layers,
/// map and reduce jobs stage by stage, their files in one directory that
/// the two workers share, each job counted by both identities (the
/// census's quorum of two, no recount; a second count of a map or reduce
/// job writes the same files to the same place and reports the same
/// digest), to the published total (`shapes::PUBLISHED_GRIDS`: Pettersen,
/// 2005).
#[test]
fn a_postgres_cluster_counts_2x5_by_layers_with_two_workers() {
    const JOBS: u64 = 384; // 1 + 4 map and 4 x (4 reduce) + 3 x 4 map jobs, 355 classes
    let published = census_math::shapes::PUBLISHED_GRIDS.iter().find(|(c, _)| *c == 5).unwrap().1;
    let mut cluster = Cluster::new();
    let shared = tempfile::tempdir().unwrap();
    let layers_dir = shared.path().display().to_string();
    let coordinator = cluster.coordinator(&["--census", "layers boxes=2x5 shards=4 parts=4"]);
    cluster.children.push(coordinator);
    cluster.wait_until_serving();
    let mut workers = vec![
        cluster.worker_with("one", &["--layers-dir", &layers_dir]),
        cluster.worker_with("two", &["--layers-dir", &layers_dir]),
    ];
    for worker in &mut workers {
        assert!(cluster.wait_for_worker(worker).success());
    }
    let status = cluster.status_json();
    assert_eq!(status["final"], true, "{status}");
    assert_eq!(status["census"], "layers boxes=2x5 shards=4 parts=4");
    assert_eq!(status["answer"], published, "{status}");
    assert_eq!(status["done"], JOBS);
    // The map and reduce jobs' digests weigh nothing: the weighted sum is
    // the answer, and their groups contribute 0.
    assert_eq!(cluster.sql("SELECT weighted_sum FROM run_progress"), published);
    assert_eq!(cluster.sql("SELECT COUNT(*) FROM group_totals WHERE weight = 0 AND contribution = 0"), "29");
    assert_counted_once(&cluster, JOBS);
    // Two identities agreed on every job: a vote, then the accepted count.
    assert_eq!(
        cluster.sql(
            "SELECT COUNT(*) FROM (SELECT job_id FROM results GROUP BY job_id HAVING COUNT(DISTINCT worker) = 2) agreed"
        ),
        JOBS.to_string()
    );
    // No job of a stage was counted before every job of the stages below
    // it was accepted: results are numbered as they are stored, and a job
    // is leased only once the accepted results of the stages below are in.
    assert_eq!(
        cluster.sql(
            "SELECT COUNT(*) FROM results later JOIN jobs l ON l.id = later.job_id, results earlier \
             JOIN jobs e ON e.id = earlier.job_id \
             WHERE earlier.outcome = 'accepted' AND e.stage < l.stage AND later.id < earlier.id"
        ),
        "0"
    );
    // Nor was one leased early: it would have failed, its inputs not accepted.
    assert_eq!(cluster.sql("SELECT COUNT(*) FROM failures"), "0");
    assert_eq!(cluster.sql("SELECT COUNT(DISTINCT stage) FROM jobs"), "9");
    assert!(shared.path().join("2x5-s4-p4").is_dir());
}

#[test]
fn a_postgres_cluster_counts_the_russell_census_exactly() {
    let mut cluster = Cluster::new();
    let coordinator = cluster.coordinator(&["--stage", "44"]);
    cluster.children.push(coordinator);
    cluster.wait_until_serving();
    // With microsecond jobs one worker could lease all 440 before the other
    // starts; each has its share (--max-jobs), so both take part on any
    // machine, and each counts exactly its share.
    let mut workers =
        vec![cluster.worker_with("one", &["--max-jobs", "40"]), cluster.worker_with("two", &["--max-jobs", "400"])];
    for worker in &mut workers {
        assert!(wait_with_timeout(worker, Duration::from_secs(120)).success());
    }
    let status = cluster.status_json();
    assert_eq!(status["final"], true, "{status}");
    assert_eq!(status["n0"], N0);
    assert_eq!(status["done"], 440);

    // The audit view agrees with the gRPC answer, class by class.
    assert_eq!(cluster.sql("SELECT answer FROM run_progress"), N0);
    assert_eq!(cluster.sql("SELECT weighted_sum FROM run_progress"), "3546146300288");
    assert_eq!(cluster.sql("SELECT SUM(contribution) FROM class_totals"), "3546146300288");
    assert_eq!(cluster.sql("SELECT COUNT(*) FROM class_totals WHERE complete"), "44");
    let output = census()
        .args(["status", "--coordinator", &cluster.address, "--token-file", &cluster.operator_token()])
        .output()
        .unwrap();
    let printed = text(&output);
    let sql_lines = cluster.sql("SELECT class_id || ' ' || representative || ' ' || size || ' ' || completions FROM class_totals ORDER BY class_id");
    for line in sql_lines.lines() {
        let parts: Vec<&str> = line.split(' ').collect();
        let n: u64 = parts[3].parse().unwrap();
        let expected =
            format!("{} size {:>5}: 10/10 seeds, n = {}", parts[1], parts[2], census_math::total::thousands(&n));
        assert!(printed.contains(&expected), "class {} as gRPC shows it: {expected}\n{printed}", parts[0]);
    }
    assert_counted_once(&cluster, 440);
    // Both workers took part, under their tokens' names, each its share.
    assert_eq!(
        cluster.sql("SELECT string_agg(worker || ':' || jobs, ',' ORDER BY worker) FROM worker_stats"),
        "one:40,two:400"
    );
    // A tampered stored total is refused, never printed as the answer.
    cluster.sql("UPDATE runs SET weighted_sum = weighted_sum + 1, answer = answer + 1");
    let tampered = census()
        .args(["status", "--coordinator", &cluster.address, "--token-file", &cluster.operator_token()])
        .output()
        .unwrap();
    assert_eq!(tampered.status.code(), Some(1), "{}", text(&tampered));
    assert!(text(&tampered).contains("does not equal the exact total"), "{}", text(&tampered));
    assert!(!text(&tampered).contains("6,670,903,752,021,072,936,961"), "{}", text(&tampered));
    cluster.sql("UPDATE runs SET weighted_sum = weighted_sum - 1, answer = answer - 1");
    // Without a token, nothing is answered.
    let anonymous = census().args(["status", "--coordinator", &cluster.address]).output().unwrap();
    assert_eq!(anonymous.status.code(), Some(1));
    assert!(text(&anonymous).contains("census token create"), "{}", text(&anonymous));
}

#[test]
fn a_killed_worker_and_a_restarted_coordinator_lose_nothing() {
    let mut cluster = Cluster::new();
    // The banded counter takes about 0.1 s a job: a run of tens of seconds.
    let coordinator = cluster.coordinator(&["--stage", "44", "--counter", "banded", "--lease-ttl", "3"]);
    cluster.children.push(coordinator);
    cluster.wait_until_serving();
    let victim = cluster.worker("victim");
    let mut survivor = cluster.worker("survivor");
    std::thread::sleep(Duration::from_secs(4));
    signal(&victim, libc::SIGKILL);
    cluster.children.push(victim);
    let mut replacement = cluster.worker("replacement");

    std::thread::sleep(Duration::from_secs(3));
    let mut coordinator = cluster.children.remove(0);
    signal(&coordinator, libc::SIGKILL);
    let _ = coordinator.wait();
    std::thread::sleep(Duration::from_secs(2));
    let restarted = cluster.coordinator(&["--lease-ttl", "3"]);
    cluster.children.push(restarted);

    assert!(cluster.wait_for_worker(&mut survivor).success());
    assert!(cluster.wait_for_worker(&mut replacement).success());
    let status = cluster.status_json();
    assert_eq!(status["final"], true, "{status}");
    assert_eq!(status["n0"], N0);
    assert_counted_once(&cluster, 440);
}

/// Workers killed with SIGKILL, the coordinator killed and restarted, and
/// PostgreSQL crashed (immediate shutdown) and restarted twice, once briefly
/// and once for longer than a lease: the exact N0, every job accepted once.
#[test]
fn chaos_of_workers_coordinator_and_postgres_loses_nothing() {
    let mut server = census_testpg::OwnServer::start("chaos");
    let mut cluster = Cluster::on(server.url().to_string());
    let coordinator = cluster.coordinator(&["--stage", "44", "--counter", "banded", "--lease-ttl", "3"]);
    cluster.children.push(coordinator);
    cluster.wait_until_serving();
    let first = cluster.worker("first");
    let second = cluster.worker("second");
    std::thread::sleep(Duration::from_secs(3));
    signal(&first, libc::SIGKILL);
    cluster.children.push(first);

    server.crash();
    std::thread::sleep(Duration::from_secs(2));
    server.restart();
    let mut third = cluster.worker("third");
    std::thread::sleep(Duration::from_secs(3));
    signal(&second, libc::SIGKILL);
    cluster.children.push(second);

    let mut coordinator = cluster.children.remove(0);
    signal(&coordinator, libc::SIGKILL);
    let _ = coordinator.wait();
    server.crash();
    std::thread::sleep(Duration::from_secs(6));
    server.restart();
    cluster.children.push(cluster.coordinator(&["--lease-ttl", "3"]));
    let mut fourth = cluster.worker("fourth");

    assert!(cluster.wait_for_worker(&mut third).success());
    assert!(cluster.wait_for_worker(&mut fourth).success());
    let status = cluster.status_json();
    assert_eq!(status["final"], true, "{status}");
    assert_eq!(status["n0"], N0);
    assert_counted_once(&cluster, 440);
    assert_eq!(cluster.sql("SELECT COUNT(*) FROM rejections"), "0", "nobody lied");
    // Nor was an honest report refused for what the crashes did (issue 44).
    assert_eq!(cluster.sql("SELECT COUNT(*) FROM refused_reports"), "0", "no report refused");
}

#[test]
fn verify_compares_the_totals_of_two_stages() {
    let db = temp_db("verify");
    for stage in ["44", "71"] {
        let output = census().args(["run", "--database", &db, "--stage", stage]).output().unwrap();
        assert!(output.status.success(), "{}", text(&output));
    }
    let output = census().args(["verify", "--database", &db]).output().unwrap();
    let printed = text(&output);
    assert!(output.status.success(), "{printed}");
    assert!(printed.contains("run 1 (sudoku stage=russell counter=column-sets): S = 3,546,146,300,288"), "{printed}");
    assert!(
        printed.contains("run 2 (sudoku stage=felgenhauer-jarvis counter=column-sets): S = 3,546,146,300,288"),
        "{printed}"
    );
    assert!(printed.contains("agree: every run gives S = 3,546,146,300,288"), "{printed}");

    let missing = census().args(["verify", "--database", &db, "--runs", "1,9"]).output().unwrap();
    assert_eq!(missing.status.code(), Some(2));
    assert!(text(&missing).contains("there is no run 9"));
}

/// `GET /metrics` from a Prometheus endpoint, as text.
/// `GET /metrics`, with a bearer token when one is given (the coordinator's
/// metrics need a reader or operator unless `--public-metrics`).
fn scrape(port: u16, token: Option<&str>) -> String {
    use std::io::{Read, Write};
    let deadline = Instant::now() + Duration::from_secs(30);
    let authorization = token.map(|t| format!("Authorization: Bearer {}\r\n", t.trim())).unwrap_or_default();
    loop {
        if let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", port)) {
            let request = format!("GET /metrics HTTP/1.0\r\nHost: localhost\r\n{authorization}\r\n");
            stream.write_all(request.as_bytes()).unwrap();
            let mut response = String::new();
            stream.read_to_string(&mut response).unwrap();
            return response;
        }
        assert!(Instant::now() < deadline, "nothing serves metrics on {port}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The value of one sample line, e.g. `census_results_total{outcome="recorded"}`.
fn sample(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

#[test]
fn prometheus_metrics_move_during_a_run() {
    let mut cluster = Cluster::new();
    let coordinator_metrics = free_port();
    let worker_metrics = free_port();
    let listen = format!("127.0.0.1:{coordinator_metrics}");
    cluster.children.push(cluster.coordinator(&["--stage", "44", "--counter", "banded", "--metrics-listen", &listen]));
    cluster.wait_until_serving();
    let listen = format!("127.0.0.1:{worker_metrics}");
    let mut worker = cluster.worker_with("metered", &["--metrics-listen", &listen]);
    let operator = std::fs::read_to_string(cluster.operator_token()).unwrap();
    let anonymous = scrape(coordinator_metrics, None);
    assert!(anonymous.starts_with("HTTP/1.0 401"), "the coordinator's metrics need a credential: {anonymous}");
    // Mid-run: some results recorded, not all.
    let deadline = Instant::now() + Duration::from_secs(120);
    let mid = loop {
        let text = scrape(coordinator_metrics, Some(&operator));
        if let Some(recorded) = sample(&text, r#"census_results_total{outcome="recorded"}"#) {
            break (recorded, text);
        }
        assert!(Instant::now() < deadline, "no results recorded: {text}");
        std::thread::sleep(Duration::from_millis(300));
    };
    assert!(mid.0 >= 1.0 && mid.0 < 440.0, "mid-run: {}", mid.1);
    assert!(mid.1.contains("census_lease_seconds"), "{}", mid.1);
    let counted = sample(&scrape(worker_metrics, None), "census_worker_jobs_counted_total").unwrap_or(0.0);
    assert!(counted >= 1.0, "the worker's own metrics count jobs");
    assert!(cluster.wait_for_worker(&mut worker).success());
    // After: every job recorded once, and the job gauges say so.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let text = scrape(coordinator_metrics, Some(&operator));
        let recorded = sample(&text, r#"census_results_total{outcome="recorded"}"#);
        let done = text
            .lines()
            .find(|l| l.starts_with("census_jobs{") && l.contains(r#"state="done""#))
            .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok());
        if recorded == Some(440.0) && done == Some(440.0) {
            assert!(text.contains(r#"census_worker_results_total{worker="metered"} 440"#), "{text}");
            break;
        }
        assert!(Instant::now() < deadline, "after the run: {text}");
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Headless Chromium, from Debian's `chromium` package (or `CENSUS_CHROMIUM`).
/// Missing, the test fails with the command that installs it: the status
/// page is checked in a real browser or not at all, never skipped.
fn chromium() -> String {
    if let Ok(path) = std::env::var("CENSUS_CHROMIUM") {
        return path;
    }
    for name in ["chromium", "chromium-browser", "google-chrome"] {
        if Command::new(name)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
        {
            return name.to_string();
        }
    }
    panic!(
        "this test opens the status page in headless Chromium, which is not installed: run `apt-get install -y chromium` (.ci/run does it for you)"
    );
}

/// The page's DOM after its script has polled the JSON for a few seconds.
fn page_dom(url: &str, screenshot: Option<&std::path::Path>) -> String {
    let profile = std::env::temp_dir().join(format!("census-e2e-chromium-{}-{}", std::process::id(), free_port()));
    let mut command = Command::new(chromium());
    command.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--hide-scrollbars",
        "--virtual-time-budget=4000",
    ]);
    command.arg(format!("--user-data-dir={}", profile.display()));
    match screenshot {
        Some(path) => command.arg("--window-size=1200,900").arg(format!("--screenshot={}", path.display())),
        None => command.arg("--dump-dom"),
    };
    let output = command.arg(url).stdin(Stdio::null()).output().unwrap();
    let _ = std::fs::remove_dir_all(&profile);
    assert!(output.status.success(), "chromium failed: {}", text(&output));
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
fn the_status_page_shows_a_run_finishing_with_n0() {
    let mut cluster = Cluster::new();
    let http_port = free_port();
    let http = format!("127.0.0.1:{http_port}");
    cluster.children.push(cluster.coordinator(&["--stage", "44", "--http-listen", &http]));
    cluster.wait_until_serving();
    let token = std::fs::read_to_string(cluster.operator_token()).unwrap();
    let page = format!("http://{http}/#token={}", token.trim());

    // Without a credential the page says why it shows nothing, and how to fix it.
    let dom = page_dom(&format!("http://{http}/"), None);
    assert!(dom.contains("cannot read the status: 401") && dom.contains("#token="), "{dom}");
    assert!(!dom.contains("run 1:"), "{dom}");

    // Before any worker: the run is there, nothing done yet.
    let dom = page_dom(&page, None);
    assert!(dom.contains("run 1: stage russell (44 classes), counter column-sets"), "{dom}");
    assert!(dom.contains("0 / 440 jobs done") && dom.contains(">running<"), "{dom}");

    let mut worker = cluster.worker("painter");
    assert!(cluster.wait_for_worker(&mut worker).success());
    let dom = page_dom(&page, None);
    assert!(dom.contains(">finished<"), "{dom}");
    assert!(dom.contains("440 / 440 jobs done"), "{dom}");
    assert!(dom.contains(&format!("N0 = {N0_PRINTED}")), "{dom}");
    assert!(dom.contains("S = 3,546,146,300,288 = 2^7 x 27,704,267,971"), "{dom}");
    assert!(dom.contains(">painter<"), "the workers table names the worker: {dom}");
    assert!(
        dom.contains("<td>10/10</td><td>7,802,998,272</td>"),
        "class 0 (the 'all stacks cyclic' band, n = 7,802,998,272) is in the table: {dom}"
    );
    assert!(dom.contains(r#"<div id="error"></div>"#), "no error shown: {dom}");

    // The screenshot kept in docs/ is refreshed by CENSUS_SCREENSHOT=docs/status-page.png.
    if let Ok(path) = std::env::var("CENSUS_SCREENSHOT") {
        page_dom(&page, Some(std::path::Path::new(&path)));
    }
}

/// A worker whose token is revoked stops at once with the reason and exit
/// code 1, instead of retrying forever.
#[test]
fn a_worker_with_a_revoked_token_exits_with_the_reason() {
    let mut cluster = Cluster::new();
    cluster.children.push(cluster.coordinator(&["--stage", "44"]));
    cluster.wait_until_serving();
    let token = cluster.create_token("worker", "revoked-node");
    let revoke =
        census().args(["token", "revoke", "revoked-node", "--database", &cluster.database_url]).output().unwrap();
    assert!(revoke.status.success(), "{}", text(&revoke));
    let mut worker = census()
        .args([
            "worker",
            "--coordinator",
            &format!("http://{}", cluster.address),
            "--token-file",
            &token,
            "--exit-when-done",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let status = wait_with_timeout(&mut worker, Duration::from_secs(60));
    let printed = text(&worker.wait_with_output().unwrap());
    assert_eq!(status.code(), Some(1), "{printed}");
    assert!(printed.contains("census: error: the coordinator refuses this worker"), "{printed}");
}

/// `cancel`, `priority` and the resume hint on every kind of census: each
/// names the census, and the hint, run as printed, resumes the same run.
#[test]
fn cancel_priority_and_resume_work_for_every_kind() {
    let mut cluster = Cluster::new();
    cluster.children.push(cluster.coordinator(&[]));
    cluster.wait_until_serving();
    let kinds = ["essentially-different", "shape boxes=2x4", "sudoku stage=rectangles counter=banded"];
    for (i, census_text) in kinds.iter().enumerate() {
        let run = (i + 1).to_string();
        let submit = |args: &[&str]| {
            let output = census()
                .args(["submit", "--coordinator", &cluster.address, "--token-file", &cluster.operator_token()])
                .args(args)
                .output()
                .unwrap();
            assert!(output.status.success(), "{}", text(&output));
            text(&output)
        };
        submit(&["--census", census_text]);
        let operate = |args: &[&str]| {
            let output = census()
                .args(args)
                .args(["--coordinator", &cluster.address, "--token-file", &cluster.operator_token(), "--run", &run])
                .output()
                .unwrap();
            assert!(output.status.success(), "{}", text(&output));
            text(&output)
        };
        let printed = operate(&["priority", "--priority", "3"]);
        assert!(printed.contains(&format!("run {run} ({census_text}): priority 3")), "{printed}");
        let printed = operate(&["cancel"]);
        assert!(printed.contains(&format!("run {run} ({census_text}) cancelled at 0/")), "{printed}");
        let hint = printed.split('`').nth(1).unwrap_or_else(|| panic!("no hint in {printed}"));
        assert_eq!(hint, format!("census submit --census {census_text:?}"), "{printed}");
        // The hint as a shell would pass it: the census text is one argument.
        let resumed = submit(&["--census", census_text]);
        assert!(resumed.contains(&format!("run {run}")), "the same run again: {resumed}");
        assert_eq!(cluster.sql(&format!("SELECT cancelled_at IS NULL FROM runs WHERE id = {run}")), "t", "{resumed}");
    }
    assert_eq!(cluster.sql("SELECT COUNT(*) FROM runs"), "3");
}

/// Readers that hang up while the coordinator writes to them (a status
/// poller closing its connection before the answer, like workers that exit
/// once told `idle`) are an error of their connection, never the end of the
/// process: it died of SIGPIPE (exit 141, not a word in its log) right
/// after a run finished (issue 26).
#[test]
fn peers_that_hang_up_do_not_end_the_coordinator() {
    use std::io::{Read, Write};
    use std::os::unix::process::ExitStatusExt;
    let database = temp_db("hang-up");
    let log = std::env::temp_dir().join(format!("census-e2e-{}-hang-up.log", std::process::id()));
    let http = format!("127.0.0.1:{}", free_port());
    let mut coordinator = census()
        .args(["coordinator", "--database", &database, "--stage", "44", "--public-read"])
        .args(["--listen", &format!("127.0.0.1:{}", free_port()), "--http-listen", &http])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let get_status = || -> Option<String> {
        let mut stream = std::net::TcpStream::connect(&http).ok()?;
        stream.write_all(b"GET /api/status HTTP/1.1\r\nHost: census\r\nConnection: close\r\n\r\n").ok()?;
        let mut response = String::new();
        stream.read_to_string(&mut response).ok()?;
        Some(response)
    };
    // The 120 s bound only detects a coordinator that never starts.
    let deadline = Instant::now() + Duration::from_secs(120);
    while get_status().is_none() {
        assert!(coordinator.try_wait().unwrap().is_none(), "{}", std::fs::read_to_string(&log).unwrap());
        assert!(Instant::now() < deadline, "the status page never answered (hang detector)");
        std::thread::sleep(Duration::from_millis(100));
    }
    // Each asks for the status twenty times in one go and hangs up without
    // reading: the coordinator's next writes meet a closed connection.
    for _ in 0..500 {
        // Refused: the coordinator is gone (said below, with its exit status).
        let Ok(mut stream) = std::net::TcpStream::connect(&http) else { break };
        let _ = stream.write_all(&b"GET /api/status HTTP/1.1\r\nHost: census\r\n\r\n".repeat(20));
        let _ = stream.shutdown(std::net::Shutdown::Both);
    }
    let answer = get_status();
    let status = coordinator.try_wait().unwrap();
    let _ = coordinator.kill();
    let _ = coordinator.wait();
    let printed = std::fs::read_to_string(&log).unwrap();
    assert!(
        status.is_none(),
        "the coordinator ended: {status:?} (signal {:?}): {printed}",
        status.and_then(|s| s.signal())
    );
    let answer = answer.expect("the status page answers after the hang-ups");
    assert!(answer.starts_with("HTTP/1.1 200") && answer.contains("\"jobs_total\":440"), "{answer}");
}

/// `http://` to a port that answers with TLS: the client says so once,
/// names the fix, and exits non-zero, instead of a broken pipe at the
/// first call and retries (issue 26). The server here answers every
/// connection as rustls answers a plaintext client: a fatal TLS alert
/// (the real coordinator's case is in census-coordinator's tests/tls.rs).
#[test]
fn a_client_pointed_at_a_tls_port_with_http_names_the_fix() {
    use std::io::{Read, Write};
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut preface = [0u8; 24];
            let _ = stream.read_exact(&mut preface);
            // A TLS 1.2 record: alert, fatal, decode_error.
            let _ = stream.write_all(&[0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x32]);
        }
    });
    let token = std::env::temp_dir().join(format!("census-e2e-{}-tls-port.token", std::process::id()));
    std::fs::write(&token, "census_0123456789abcdef").unwrap();
    let url = format!("http://{address}");
    let token = token.display().to_string();
    let fix = format!("the coordinator at {address} answered with TLS: use https://{address}");
    let status = census().args(["status", "--coordinator", &url, "--token-file", &token]).output().unwrap();
    assert_eq!(status.status.code(), Some(2), "{}", text(&status));
    assert!(text(&status).contains(&fix), "{}", text(&status));
    let mut worker = census()
        .args(["worker", "--coordinator", &url, "--token-file", &token, "--exit-when-done"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The 120 s bound only detects a worker that retries forever.
    let exit = wait_with_timeout(&mut worker, Duration::from_secs(120));
    let printed = text(&worker.wait_with_output().unwrap());
    assert!(!exit.success(), "{printed}");
    assert!(printed.contains(&fix), "{printed}");
}

/// `GET path` over HTTP/1.0, with a bearer token when one is given.
fn http_get(port: u16, path: &str, token: Option<&str>) -> String {
    use std::io::{Read, Write};
    let authorization = token.map(|t| format!("Authorization: Bearer {}\r\n", t.trim())).unwrap_or_default();
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream.write_all(format!("GET {path} HTTP/1.0\r\nHost: localhost\r\n{authorization}\r\n").as_bytes()).unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    response
}

/// A database URL's password appears in nothing census prints, logs or
/// serves (errors, the coordinator's and the worker's logs, status, metrics,
/// the status page's JSON), on a server that asks for it; and a database
/// that cannot be used says why (connection refused, no such database,
/// password authentication failed), never "pool timed out", and is waited
/// for only when waiting can help.
#[test]
fn a_database_password_appears_nowhere_and_failures_say_why() {
    const PASSWORD: &str = "Hunter2Secret";
    const WRONG: &str = "Wrong1Guess";
    let server = census_testpg::OwnServer::start_with_password("password", PASSWORD);
    let base = server.url().to_string();
    let database = |name: &str| format!("{}/{name}", &base[..base.rfind('/').unwrap()]);
    let dead = format!("postgres://census:{PASSWORD}@127.0.0.1:{}/census", free_port());
    let missing = database("nosuch");
    let wrong = database("postgres").replace(PASSWORD, WRONG);
    let clean = |what: &str, printed: &str| {
        assert!(!printed.contains(PASSWORD) && !printed.contains(WRONG), "{what} shows a password: {printed}");
    };
    let cases = [
        (&dead, "Connection refused"),
        (&missing, "database \"nosuch\" does not exist"),
        (&wrong, "password authentication failed for user \"census\""),
    ];
    for (url, cause) in cases {
        for command in [
            &["run", "--database", url.as_str()][..],
            &["coordinator", "--database", url],
            &["status", "--database", url],
            &["verify", "--database", url],
            &["token", "list", "--database", url],
        ] {
            let output = census().args(command).env("CENSUS_DATABASE_WAIT", "0").output().unwrap();
            let printed = text(&output);
            assert_eq!(output.status.code(), Some(1), "{command:?}: {printed}");
            clean(&format!("{command:?}"), &printed);
            assert!(printed.contains(cause), "{command:?} says why: {printed}");
            assert!(printed.contains("postgres://census:***@127.0.0.1:"), "{command:?}: {printed}");
            assert!(!printed.contains("timed out"), "{command:?}: {printed}");
        }
    }
    // Waiting cannot create a database or change a password: refused at once.
    for url in [&missing, &wrong] {
        for command in [&["run", "--database", url.as_str()][..], &["coordinator", "--database", url]] {
            let output = census().args(command).env("CENSUS_DATABASE_WAIT", "30").output().unwrap();
            assert!(!text(&output).contains("retrying"), "{command:?}: {}", text(&output));
        }
    }

    // A database that works: `census run`, then a coordinator and a worker,
    // with every log line they write at info level.
    let good = database("census");
    let created =
        Command::new(census_testpg::binary("psql")).args([&base, "-q", "-c", "CREATE DATABASE census"]).output();
    assert!(created.unwrap().status.success());
    let output =
        census().args(["run", "--database", &good, "--threads", "2"]).env("RUST_LOG", "info").output().unwrap();
    let printed = text(&output);
    assert!(output.status.success(), "{printed}");
    assert!(printed.contains(N0_PRINTED) && printed.contains("in postgres://census:***@127.0.0.1:"), "{printed}");
    clean("census run", &printed);
    let output = census().args(["status", "--database", &good]).output().unwrap();
    assert!(output.status.success(), "{}", text(&output));
    clean("census status --database", &text(&output));

    let cluster = Cluster::on(good.clone());
    let (http_port, metrics_port) = (free_port(), free_port());
    let log_path = std::env::temp_dir().join(format!("census-e2e-{}-password.log", std::process::id()));
    let log = std::fs::File::create(&log_path).unwrap();
    let mut coordinator = census()
        .args(["coordinator", "--database", &good, "--listen", &cluster.address, "--census", "shape boxes=2x3"])
        .args(["--http-listen", &format!("127.0.0.1:{http_port}")])
        .args(["--metrics-listen", &format!("127.0.0.1:{metrics_port}")])
        .env("RUST_LOG", "info")
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    cluster.wait_until_serving();
    let token = cluster.create_token("worker", "secretive");
    let worker = census()
        .args(["worker", "--coordinator", &format!("http://{}", cluster.address), "--token-file", &token])
        .args(["--exit-when-done", "--threads", "1"])
        .env("RUST_LOG", "info")
        .output()
        .unwrap();
    assert!(worker.status.success(), "{}", text(&worker));
    clean("the worker's log", &text(&worker));
    let operator = std::fs::read_to_string(cluster.operator_token()).unwrap();
    let status = census()
        .args(["status", "--coordinator", &cluster.address, "--run", "2", "--token-file", &cluster.operator_token()])
        .output()
        .unwrap();
    assert!(text(&status).contains("shape boxes=2x3: 28,200,960"), "{}", text(&status));
    clean("census status", &text(&status));
    let metrics = scrape(metrics_port, Some(&operator));
    assert!(metrics.contains("census_results_total"), "{metrics}");
    clean("the metrics", &metrics);
    let page = http_get(http_port, "/api/status", Some(&operator));
    assert!(page.contains("28200960"), "{page}");
    clean("the status page", &page);
    signal(&coordinator, libc::SIGTERM);
    wait_with_timeout(&mut coordinator, Duration::from_secs(60));
    let logged = std::fs::read_to_string(&log_path).unwrap();
    assert!(logged.contains("census finished: 28200960"), "{logged}");
    clean("the coordinator's log", &logged);
    let _ = std::fs::remove_file(&log_path);
}

/// Starts `census run` with `args`, its stderr not a terminal (a plain
/// line every few seconds), waits for its first progress line, interrupts
/// it; that line, then what `census status --database` says of the run.
fn first_progress_line(args: &[&str], database: &str) -> (String, String) {
    use std::io::BufRead;
    let mut child = census()
        .args(["run", "--database", database])
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut seen = Vec::new();
    let mut line = None;
    for next in stderr.lines() {
        let next = next.unwrap();
        if next.starts_with("progress: ") {
            line = Some(next);
            break;
        }
        seen.push(next);
    }
    let line = line.unwrap_or_else(|| panic!("no progress line: {seen:?}"));
    signal(&child, libc::SIGINT);
    let status = wait_with_timeout(&mut child, Duration::from_secs(300));
    assert_eq!(status.code(), Some(130), "{seen:?}");
    let output = census().args(["status", "--database", database]).output().unwrap();
    assert!(output.status.success(), "{}", text(&output));
    (line, text(&output))
}

/// The progress line of `census run`, and `census status` of the run it
/// leaves, on every kind of census: jobs out of the census's own number
/// (with separators), and no sum of counts presented as S or an answer.
#[test]
fn the_progress_line_is_right_for_every_kind() {
    let kinds: [(&[&str], &str, &str); 4] = [
        (&["--stage", "71", "--counter", "banded"], "sudoku stage=felgenhauer-jarvis counter=banded", "710"),
        (&["--census", "essentially-different"], "essentially-different", "282"),
        (&["--census", "shape boxes=2x5"], "shape boxes=2x5", "355"),
        // It cannot finish here (hundreds of core-hours): its line at the start.
        (&["--census", "shape boxes=4x3", "--allow-sqlite"], "shape boxes=4x3", "144,578"),
    ];
    for (args, census_text, jobs) in kinds {
        let db = temp_db(&format!("progress-{}", census_text.replace([' ', '='], "-")));
        let (line, status) = first_progress_line(&[args, &["--threads", "2"][..]].concat(), &db);
        let (done, rest) = line["progress: ".len()..].split_once('/').unwrap_or_else(|| panic!("{line}"));
        assert!(done.replace(',', "").parse::<u64>().is_ok(), "{census_text}: {line}");
        // Where jobs differ in cost (essentially different), the share of
        // the expected cost done follows the jobs.
        let after = rest.strip_prefix(&format!("{jobs} jobs")).unwrap_or_else(|| panic!("{census_text}: {line}"));
        assert!(
            after.starts_with(", ") || (after.starts_with(" (") && after.contains("% of the expected cost), ")),
            "{census_text}: {line}"
        );
        assert!(!line.contains("completions") && !line.contains("S ") && !line.contains("N0"), "{line}");
        assert!(status.contains(&format!("run 1: {census_text}, redundancy 1")), "{status}");
        assert!(status.contains(&format!("/{jobs} jobs done")), "{status}");
        assert!(status.contains("(provisional: the run is not finished)"), "{status}");
        assert!(status.contains(&format!("{census_text}: weighted sum so far = ")), "{status}");
        assert!(!status.contains("N0") && !status.contains("completions counted"), "{status}");
    }
}

/// Waits (polling) until `ready`; `what` names it if it never comes (a hang
/// detector: the bound is not what is tested).
fn wait_until(what: &str, mut ready: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(300);
    while !ready() {
        assert!(Instant::now() < deadline, "{what} never happened");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A worker left running after its run is finished (no `--exit-when-done`)
/// polls quietly: the heartbeat of its last batch ends with that batch's
/// report. It went on for ever, logging `leases lost; dropping those jobs
/// jobs=12` every 10 s about jobs long recorded (issue 25). The worker's
/// own idle lease calls (the coordinator's `census_lease_seconds_count`)
/// pace the test, not a clock: with 1 s leases a heartbeat left running
/// would beat every third of a second, a dozen times over the six idle
/// polls watched (0.2 s to 2 s apart).
#[test]
fn an_idle_worker_is_quiet_after_its_run_is_finished() {
    let mut cluster = Cluster::on_file(temp_db("idle-worker"));
    let metrics_port = free_port();
    let metrics = format!("127.0.0.1:{metrics_port}");
    cluster.children.push(cluster.coordinator(&[
        "--stage",
        "44",
        "--lease-ttl",
        "1",
        "--metrics-listen",
        &metrics,
        "--public-metrics",
    ]));
    cluster.wait_until_serving();
    let token = cluster.create_token("worker", "idler");
    let log_path = std::env::temp_dir().join(format!("census-e2e-{}-idle-worker.log", std::process::id()));
    let worker = census()
        .args(["worker", "--coordinator", &format!("http://{}", cluster.address), "--token-file", &token])
        .args(["--threads", "1"])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log_path).unwrap())
        .spawn()
        .unwrap();
    cluster.children.push(worker);
    wait_until("the run's end", || cluster.status_json()["final"] == true);
    let leases = || sample(&scrape(metrics_port, None), "census_lease_seconds_count").unwrap_or(0.0);
    let at_the_end = leases();
    // By the second empty lease after the end the last report is answered
    // (the worker waits for it when a lease brings nothing).
    wait_until("two idle polls", || leases() >= at_the_end + 2.0);
    let quiet_from = std::fs::read_to_string(&log_path).unwrap().len();
    wait_until("six more idle polls", || leases() >= at_the_end + 8.0);
    let log = std::fs::read_to_string(&log_path).unwrap();
    assert!(cluster.children[1].try_wait().unwrap().is_none(), "the worker keeps polling: {log}");
    let later = &log[quiet_from..];
    assert!(!later.contains("leases lost") && !later.contains("heartbeat"), "an idle worker heartbeats: {log}");
    assert_eq!(cluster.status_json()["done"], 440);
    let _ = std::fs::remove_file(&log_path);
}

/// Reads need a reader (or operator) token, and every refusal says how to
/// get one: the hint named `--role worker` (issue 25), whose token is
/// refused for reads. A run part done shows no S, N0 or factorization of
/// its partial sum, in `census status --json` or the status page's JSON.
#[test]
fn reads_name_the_reader_role_and_a_partial_sum_is_no_answer() {
    let mut cluster = Cluster::on_file(temp_db("reads"));
    let http_port = free_port();
    cluster.children.push(cluster.coordinator(&["--stage", "44", "--http-listen", &format!("127.0.0.1:{http_port}")]));
    cluster.wait_until_serving();
    wait_until("the status page", || std::net::TcpStream::connect(("127.0.0.1", http_port)).is_ok());

    let anonymous = census().args(["status", "--coordinator", &cluster.address]).output().unwrap();
    assert_eq!(anonymous.status.code(), Some(1), "{}", text(&anonymous));
    assert!(text(&anonymous).contains("`--role reader` to read progress and results"), "{}", text(&anonymous));
    let page = http_get(http_port, "/api/status", None);
    assert!(page.contains(" 401 ") && page.contains("`--role reader` to read"), "{page}");
    let unknown = census()
        .args(["status", "--coordinator", &cluster.address, "--token", &format!("census_{}", "cd".repeat(32))])
        .output()
        .unwrap();
    assert!(
        text(&unknown).contains("unknown token") && text(&unknown).contains("`--role reader`"),
        "{}",
        text(&unknown)
    );
    let counter = cluster.create_token("worker", "counter");
    let as_worker =
        census().args(["status", "--coordinator", &cluster.address, "--token-file", &counter]).output().unwrap();
    assert_eq!(as_worker.status.code(), Some(1), "{}", text(&as_worker));
    assert!(
        text(&as_worker).contains("the token \"counter\" has the role worker; this call needs reader or operator"),
        "{}",
        text(&as_worker)
    );

    // 5 of the 440 jobs, then a reader looks.
    let mut worker = cluster.worker_with("partial", &["--max-jobs", "5"]);
    assert!(wait_with_timeout(&mut worker, Duration::from_secs(120)).success());
    let reader = cluster.create_token("reader", "watcher");
    let status = census()
        .args(["status", "--coordinator", &cluster.address, "--json", "--token-file", &reader])
        .output()
        .unwrap();
    assert!(status.status.success(), "{}", text(&status));
    let status: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!((status["done"].as_u64(), status["final"].as_bool()), (Some(5), Some(false)), "{status}");
    assert_eq!(
        (status["s"].as_str(), status["n0"].as_str(), status["answer"].as_str()),
        (Some(""), Some(""), Some(""))
    );
    let reader = std::fs::read_to_string(&reader).unwrap();
    let page = http_get(http_port, "/api/status", Some(&reader));
    let json: serde_json::Value = serde_json::from_str(page.split("\r\n\r\n").nth(1).unwrap_or_default())
        .unwrap_or_else(|e| panic!("{e}: {page}"));
    let run = &json["runs"][0];
    assert_eq!((run["done"].as_u64(), run["final"].as_bool()), (Some(5), Some(false)), "{run}");
    for name in ["s", "n0", "factorization", "answer"] {
        assert_eq!(run[name], "", "{name} of a partial sum: {run}");
    }
    assert_ne!(run["weighted_sum"], "", "the sum so far is shown as what it is: {run}");
}

/// `--census "shape boxes=3x3"` is the 9x9 count itself, and says so: the
/// run's first line names the census it runs (it looked as if the default
/// ran silently instead: issue 25), and `verify` of the same text compares
/// it with the published N0.
#[test]
fn shape_boxes_3x3_is_the_9x9_count_and_says_so() {
    let db = temp_db("three-by-three");
    let output = census().args(["run", "--database", &db, "--census", "shape boxes=3x3"]).output().unwrap();
    let printed = text(&output);
    assert!(output.status.success(), "{printed}");
    assert!(
        printed.starts_with("census: sudoku stage=russell counter=column-sets (44 classes), 440 jobs in "),
        "{printed}"
    );
    assert!(printed.contains(N0_PRINTED), "{printed}");
    let verify = census().args(["verify", "--database", &db, "--census", "shape boxes=3x3"]).output().unwrap();
    assert!(verify.status.success(), "{}", text(&verify));
    assert!(text(&verify).contains("agree: the run gives the published count"), "{}", text(&verify));
}

/// A lease lost while its job is still being counted is said once, not at
/// every heartbeat until the job ends (for a job of an hour, a line every
/// 10 s). The run is cancelled under a worker counting one of the
/// essentially different census's first jobs (seconds each); with 1 s
/// leases the heartbeat beats every third of a second. The worker's own
/// lease calls after the cancel (the coordinator's metrics) say when its
/// job is over.
#[test]
fn a_lost_lease_is_logged_once() {
    let mut cluster = Cluster::on_file(temp_db("lost-once"));
    let metrics_port = free_port();
    let metrics = format!("127.0.0.1:{metrics_port}");
    let coordinator = ["--census", "essentially-different", "--lease-ttl", "1", "--metrics-listen", &metrics];
    cluster.children.push(cluster.coordinator(&[&coordinator[..], &["--public-metrics"]].concat()));
    cluster.wait_until_serving();
    let token = cluster.create_token("worker", "slow");
    let log_path = std::env::temp_dir().join(format!("census-e2e-{}-lost-once.log", std::process::id()));
    let worker = census()
        .args(["worker", "--coordinator", &format!("http://{}", cluster.address), "--token-file", &token])
        .args(["--threads", "1", "--batch", "1"])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log_path).unwrap())
        .spawn()
        .unwrap();
    cluster.children.push(worker);
    wait_until("a job leased", || cluster.status_json()["leased"].as_u64() >= Some(1));
    let cancel = census()
        .args(["cancel", "--run", "1", "--coordinator", &cluster.address, "--token-file", &cluster.operator_token()])
        .output()
        .unwrap();
    assert!(cancel.status.success(), "{}", text(&cancel));
    let leases = || sample(&scrape(metrics_port, None), "census_lease_seconds_count").unwrap_or(0.0);
    let at_the_cancel = leases();
    // The job under way ends (its count dropped, or refused if it ended
    // before a heartbeat heard of the cancel), and the worker asks for work
    // twice more (the run is cancelled: none).
    wait_until("two more lease calls", || leases() >= at_the_cancel + 2.0);
    let log = std::fs::read_to_string(&log_path).unwrap();
    assert!(log.matches("leases lost").count() <= 1, "said at every heartbeat: {log}");
    let _ = std::fs::remove_file(&log_path);
}

/// Issue 44: `census run` on a database whose disk fills mid-run (a small
/// tmpfs of the test's own, `SmallDisk`; mounting it needs root, and the
/// test fails saying so without it). The run is created first (an
/// interrupted run), then the disk is filled to `leave` bytes and the same
/// command run again: it must say that the database cannot be written and
/// wait, and once the disk is freed end with the exact answer, which the
/// database then holds, nothing refused as the worker's fault, no identity
/// quarantined, nothing reopened.
fn census_run_waits_out_a_full_disk(database: &str, disk: &census_testpg::SmallDisk, leave: u64) {
    use std::io::BufRead;
    let args = ["run", "--database", database, "--stage", "71", "--counter", "banded", "--workers", "2"];
    let (code, printed) = interrupt_run(&args, 0, 1);
    assert_eq!(code, Some(130), "{printed}");
    disk.fill(leave);
    let mut reaped = KilledIfLeft(census().args(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap());
    let child = &mut reaped.0;
    let stderr = child.stderr.take().unwrap();
    let (lines, seen) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            let _ = lines.send(line);
        }
    });
    let mut logged = String::new();
    loop {
        match seen.recv_timeout(Duration::from_secs(600)) {
            Ok(line) => {
                logged.push_str(&format!("{line}\n"));
                if line.contains("the database cannot be written: its disk is full") {
                    break;
                }
            }
            Err(error) => panic!("census run never said that its database's disk is full ({error}):\n{logged}"),
        }
    }
    disk.free();
    let status = wait_with_timeout(child, Duration::from_secs(600));
    while let Ok(line) = seen.recv_timeout(Duration::from_secs(5)) {
        logged.push_str(&format!("{line}\n"));
    }
    let mut printed = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().unwrap(), &mut printed).unwrap();
    assert!(status.success(), "{printed}{logged}");
    assert!(printed.contains(N0_PRINTED), "{printed}{logged}");
    assert!(logged.contains("the database takes writes again"), "{logged}");
    for never in ["forged", "quarantined", "counted again", "rejected"] {
        assert!(!logged.contains(never), "{never:?} in the log:\n{logged}");
    }

    // What the database holds, opened afresh.
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let store = census_store::connect(database, census_store::StoreConfig::default()).await.unwrap();
        let runs = store.list_runs().await.unwrap();
        assert_eq!(runs.len(), 1, "{runs:?}");
        let total = store.total(runs[0].run_id).await.unwrap();
        assert!(total.is_final);
        assert_eq!(total.answer.unwrap().to_string(), N0);
        let progress = store.progress(runs[0].run_id).await.unwrap();
        assert_eq!((progress.done, progress.rejected, progress.conflicts), (710, 0, 0), "{progress:?}");
        assert!(store.quarantined().await.unwrap().is_empty());
        store.close().await;
    });
}

#[test]
fn census_run_on_a_full_sqlite_disk_waits_and_ends_exact() {
    let disk = census_testpg::SmallDisk::mount("run-sqlite", 64 << 20);
    let database = disk.path().join("census.db").display().to_string();
    // About 50 pages of write-ahead log: the 710 jobs' leases and reports
    // take far more, a page or more each.
    census_run_waits_out_a_full_disk(&database, &disk, 200 << 10);
}

#[test]
fn census_run_on_a_full_postgres_disk_waits_and_ends_exact() {
    let disk = census_testpg::SmallDisk::mount("run-postgres", 256 << 20);
    let server = census_testpg::OwnServer::start_in("run-full-disk", disk.path());
    // Postgres extends a table a page at a time: nothing left, the next
    // page of results fails.
    census_run_waits_out_a_full_disk(server.url(), &disk, 0);
}
