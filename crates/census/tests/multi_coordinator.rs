//! Several coordinators, one database: the coordinator keeps no state that
//! is not in the database (docs/scaling.md), so two coordinator processes on
//! one Postgres, each behind its own address as a load balancer would spread
//! them, serve one run together. Both are told to create the same run at the
//! same time (it is created once); workers are spread over both, each with
//! its share of the jobs (`--max-jobs`), so both coordinators take part on
//! any machine; the run ends with the exact N0, every job accepted once, and
//! either coordinator answers it.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const N0: &str = "6670903752021072936960";

fn census() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_census"));
    command.env_remove("RUST_LOG");
    command
}

fn text(output: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr))
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Child processes that are killed when the test ends, however it ends.
struct Children(Vec<Child>, PathBuf);

impl Drop for Children {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.1);
    }
}

fn create_token(database: &str, secrets: &Path, role: &str, name: &str) -> PathBuf {
    let path = secrets.join(name);
    let output = census()
        .args(["token", "create", "--role", role, "--name", name, "--database", database, "--output"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", text(&output));
    path
}

fn wait_until_listening(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "the coordinator on port {port} did not start listening");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn wait_for_exit(child: &mut Child, limit: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(Instant::now() < deadline, "process {} did not finish within {limit:?}", child.id());
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn sql(database: &str, query: &str) -> String {
    let output = Command::new(census_testpg::binary("psql")).args([database, "-At", "-c", query]).output().unwrap();
    assert!(output.status.success(), "{}", text(&output));
    String::from_utf8(output.stdout).unwrap().trim().to_string()
}

#[test]
fn two_coordinators_on_one_postgres_count_one_run_exactly_once() {
    let database = census_testpg::fresh_database();
    let secrets = std::env::temp_dir().join(format!("census-multi-coordinator-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&secrets);
    std::fs::create_dir_all(&secrets).unwrap();
    let mut children = Children(Vec::new(), secrets.clone());
    let operator = create_token(&database, &secrets, "operator", "ops");

    // Both coordinators are told to create the run, at once: whichever
    // commits first creates it, the other finds it.
    let ports = [free_port(), free_port()];
    for port in ports {
        let coordinator = census()
            .args(["coordinator", "--database-url", &database, "--listen", &format!("127.0.0.1:{port}")])
            .args(["--stage", "44"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        children.0.push(coordinator);
    }
    for port in ports {
        wait_until_listening(port);
    }
    assert_eq!(sql(&database, "SELECT COUNT(*) || ' ' || SUM(jobs_total) FROM runs"), "1 440");
    assert_eq!(sql(&database, "SELECT COUNT(*) FROM jobs"), "440");

    // Four workers, two on each coordinator, each with its share of the 440
    // jobs: none can lease another's share, so each coordinator leases and
    // records exactly its workers' shares, on any machine.
    let shares = [("a1", 0, 100), ("a2", 0, 120), ("b1", 1, 100), ("b2", 1, 120)];
    let mut workers: Vec<Child> = shares
        .iter()
        .map(|&(name, coordinator, share)| {
            let token = create_token(&database, &secrets, "worker", name);
            census()
                .args(["worker", "--coordinator", &format!("http://127.0.0.1:{}", ports[coordinator])])
                .args(["--threads", "1", "--exit-when-done", "--max-jobs", &share.to_string(), "--token-file"])
                .arg(&token)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for worker in &mut workers {
        let status = wait_for_exit(worker, Duration::from_secs(300));
        assert!(status.success(), "a worker failed: {status}");
    }

    // Every job accepted exactly once, and the class sums are those results'.
    assert_eq!(sql(&database, "SELECT COUNT(*) FROM results WHERE outcome = 'accepted'"), "440");
    assert_eq!(sql(&database, "SELECT COUNT(DISTINCT job_id) FROM results WHERE outcome = 'accepted'"), "440");
    assert_eq!(sql(&database, "SELECT COUNT(*) FROM results WHERE outcome <> 'accepted'"), "0");
    assert_eq!(
        sql(
            &database,
            "SELECT COUNT(*) FROM classes c WHERE c.count_sum <> (SELECT COALESCE(SUM(x.count), 0) FROM results x \
             JOIN jobs j ON j.id = x.job_id WHERE x.outcome = 'accepted' AND j.run_id = c.run_id AND j.class_id = c.class_id)"
        ),
        "0"
    );
    assert_eq!(
        sql(&database, "SELECT string_agg(worker || ':' || jobs, ',' ORDER BY worker) FROM worker_stats"),
        "a1:100,a2:120,b1:100,b2:120",
        "the workers of both coordinators took part, each its share"
    );
    assert_eq!(sql(&database, "SELECT answer FROM run_progress"), N0);

    // Either coordinator answers the run: the answer is the database's, not
    // the memory of the one that recorded the last job.
    for port in ports {
        let output = census()
            .args(["status", "--coordinator", &format!("127.0.0.1:{port}"), "--json", "--token-file"])
            .arg(&operator)
            .output()
            .unwrap();
        assert!(output.status.success(), "{}", text(&output));
        let status: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
        assert_eq!(status["final"], true, "coordinator on port {port}: {status}");
        assert_eq!(status["n0"], N0, "coordinator on port {port}: {status}");
        assert_eq!(status["done"], 440, "coordinator on port {port}: {status}");
    }
}
