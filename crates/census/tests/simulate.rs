//! `census simulate`: the real coordinator and simulated gRPC workers on the
//! synthetic census, on SQLite and on Postgres. What is checked is what
//! cannot depend on the machine: every job done, each exactly once (the
//! answer is the sum of every job's made-up count, computed here without
//! the store, and the store's fold refuses a job twice), and a summary
//! whose fields are present and consistent. Never how fast.

use std::process::Command;

use census_math::census::{Census, Synthetic};
use serde_json::Value;

fn simulate(args: &[&str]) -> Value {
    let output = Command::new(env!("CARGO_BIN_EXE_census"))
        .arg("simulate")
        .args(args)
        .args(["--json"])
        .output()
        .expect("the census binary runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "census simulate {args:?} failed: {stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let last = stdout.lines().last().unwrap_or_else(|| panic!("no output: {stdout}"));
    serde_json::from_str(last).unwrap_or_else(|e| panic!("the last line is not JSON ({e}): {last}"))
}

/// The checks that hold on any machine for a simulation of `jobs` jobs by `workers` workers.
fn check_summary(summary: &Value, workers: u64, jobs: u64) {
    let number = |name: &str| summary[name].as_f64().unwrap_or_else(|| panic!("{name} is missing: {summary}"));
    let whole = |name: &str| summary[name].as_u64().unwrap_or_else(|| panic!("{name} is missing: {summary}"));
    assert_eq!(whole("workers"), workers);
    assert_eq!(whole("jobs"), jobs);
    assert_eq!(whole("jobs_done"), jobs, "{summary}");
    assert_eq!(summary["final"], true, "{summary}");

    // Each job exactly once: the answer is the sum of every job's count,
    // each once, computed here from the census alone.
    let census: Census = summary["census"].as_str().unwrap().parse().unwrap();
    let Some(&Synthetic { jobs: listed, salt, .. }) = census.as_kind() else {
        panic!("not the synthetic census: {census}")
    };
    assert_eq!(listed, jobs);
    let expected = census_math::synthetic::expected_answer(jobs, salt).to_string();
    assert_eq!(summary["answer"].as_str(), Some(expected.as_str()), "{summary}");
    assert_eq!(summary["answer_checked"], true);
    assert_eq!(whole("results_refused"), 0, "{summary}");
    // The workers' own tallies: no job recorded twice; and when no call had
    // to be tried again (a reply lost to a deadline), every job's record was seen.
    let recorded = whole("results_recorded");
    assert!(recorded <= jobs, "{summary}");
    if whole("calls_failed") == 0 {
        assert_eq!(recorded, jobs, "{summary}");
    }

    let mut answered = 0;
    for call in ["lease", "heartbeat", "complete"] {
        let stats = &summary[call];
        let calls = stats["calls"].as_u64().unwrap_or_else(|| panic!("{call}.calls is missing: {summary}"));
        let ms = |name: &str| stats[name].as_f64().unwrap_or_else(|| panic!("{call}.{name} is missing: {summary}"));
        let (p50, p99, max) = (ms("p50_ms"), ms("p99_ms"), ms("max_ms"));
        assert!(0.0 <= p50 && p50 <= p99 && p99 <= max, "{call}: {stats}");
        // The answered try is part of the wait.
        assert!(ms("answered_p50_ms") <= ms("answered_p99_ms") && ms("answered_p99_ms") <= max, "{call}: {stats}");
        // Heartbeats as a worker sends them: a third of the lease TTL into
        // a batch not yet reported, which a quick one never is.
        assert!(calls >= 1 || call == "heartbeat", "{call}: {stats}");
        answered += calls;
    }
    // At most `batch` jobs a lease (by rate: at most census-worker's largest batch, 2,048).
    let batch = if summary["batch"] == "rate" { 2048 } else { whole("batch") };
    if summary["heartbeats"] == "every-batch" {
        assert!(summary["heartbeat"]["calls"].as_u64().unwrap() >= jobs.div_ceil(batch), "{summary}");
    }
    // Admission: never more in flight than the limit; every answered call
    // was admitted; every refusal the workers heard, the coordinator made.
    let admission = &summary["admission"];
    let count =
        |name: &str| admission[name].as_u64().unwrap_or_else(|| panic!("admission.{name} is missing: {summary}"));
    assert!(count("most_in_flight") >= 1 && count("most_in_flight") <= whole("max_calls_in_flight"), "{summary}");
    assert!(count("admitted") >= answered, "{summary}");
    assert_eq!(count("refused_held") + count("refused_leases"), whole("calls_refused_busy"), "{summary}");
    // The pace asked of batches: from a second to a quarter of the lease TTL.
    let pace = count("batch_pace_ms");
    assert!(pace >= 1000 && pace <= (whole("lease_ttl_seconds") * 250).max(1000), "{summary}");
    assert!(number("mean_batch") <= batch as f64, "{summary}");
    // At least jobs / batch lease calls; at most a report per job.
    assert!(summary["lease"]["calls"].as_u64().unwrap() >= jobs.div_ceil(batch), "{summary}");
    assert!(summary["complete"]["calls"].as_u64().unwrap() <= jobs, "{summary}");
    assert!(number("jobs_per_second") > 0.0 && number("seconds") > 0.0);
    assert!(number("coordinator_cpu_seconds") > 0.0, "{summary}");
    assert!(number("workers_cpu_seconds") >= 0.0);
    assert!(number("process_peak_rss_mib") >= number("process_rss_mib") && number("process_rss_mib") > 0.0);
}

#[test]
fn twenty_simulated_workers_do_every_job_once_on_sqlite() {
    let summary = simulate(&["--workers", "20", "--jobs", "2000"]);
    check_summary(&summary, 20, 2000);
    assert_eq!(summary["database"], "sqlite (a temporary file)");
    assert_eq!(summary["connections"], 20);
}

/// Shared connections: many workers, each its own token, over a few HTTP/2
/// connections; a heartbeat for every batch; one call in flight at a time.
#[test]
fn workers_sharing_connections_keep_their_own_identities() {
    let summary = simulate(&[
        "--workers",
        "12",
        "--jobs",
        "300",
        "--connections",
        "3",
        "--batch",
        "4",
        "--heartbeats",
        "every-batch",
        "--max-calls-in-flight",
        "1",
    ]);
    check_summary(&summary, 12, 300);
    assert_eq!(summary["connections"], 3);
    assert_eq!(summary["admission"]["most_in_flight"], 1);
}

/// Workers that size their batches as `census worker` does: by the last
/// batch's rate (here a made-up millisecond a job: a second's worth is
/// 1,000 jobs) and the coordinator's pace.
#[test]
fn workers_that_batch_by_rate_do_every_job_once() {
    let summary =
        simulate(&["--workers", "10", "--jobs", "5000", "--batch", "rate", "--count-ms", "1", "--lease-ttl", "60"]);
    check_summary(&summary, 10, 5000);
    assert_eq!(summary["batch"], "rate");
    assert_eq!(summary["lease_ttl_seconds"], 60);
    // Each worker's first batch is a job, its next ones a second's worth
    // or more: 5,000 jobs in far fewer leases than jobs.
    assert!(summary["mean_batch"].as_f64().unwrap() > 10.0, "{summary}");
    assert!(summary["lease"]["calls"].as_u64().unwrap() < 500, "{summary}");
}

#[test]
fn twenty_simulated_workers_do_every_job_once_on_postgres() {
    let database = census_testpg::fresh_database();
    let summary = simulate(&["--workers", "20", "--jobs", "500", "--database", &database]);
    check_summary(&summary, 20, 500);
    // A second simulation in the same database is a run of its own (a new
    // salt), not the first one found finished.
    let again = simulate(&["--workers", "5", "--jobs", "500", "--database", &database]);
    check_summary(&again, 5, 500);
    assert_ne!(summary["census"], again["census"]);
}

/// A flood of stale reports (issue 44): its sender, a third identity, is
/// refused unread and then quarantined, and the run still ends with its
/// exact answer. How fast the workers went and how much memory the process
/// held are the benchmark's (BENCHMARKS.md), never asserted here.
#[test]
fn a_stale_flood_ends_with_its_sender_quarantined_and_the_exact_answer() {
    let summary = simulate(&[
        "--workers",
        "2",
        "--jobs",
        "2000",
        "--stale-flood",
        "12",
        "--flood-concurrency",
        "1",
        "--flood-after",
        "2",
    ]);
    check_summary(&summary, 2, 2000);
    let flood = &summary["flood"];
    let whole = |name: &str| flood[name].as_u64().unwrap_or_else(|| panic!("flood.{name} is missing: {summary}"));
    assert_eq!((whole("calls"), whole("results_per_call"), whole("concurrency")), (12, 10_000, 1), "{summary}");
    assert_eq!(whole("results_recorded"), 0, "{summary}");
    assert!(whole("first_refused_call") < whole("first_quarantined_call"), "{summary}");
    assert_eq!(whole("answered") + whole("refused") + whole("quarantined"), 12, "{summary}");
    for figure in ["honest_per_second_before", "honest_per_second_during", "rss_mib_began", "rss_mib_peak"] {
        assert!(flood[figure].as_f64().is_some_and(|x| x >= 0.0), "flood.{figure}: {summary}");
    }
}

#[test]
fn bad_simulations_are_refused_by_name() {
    for (args, says) in [
        (vec!["--workers", "0", "--jobs", "10"], "--workers"),
        (vec!["--workers", "2", "--jobs", "0"], "jobs=0"),
        (vec!["--workers", "2", "--jobs", "10", "--batch", "0"], "--batch"),
        (vec!["--workers", "2", "--jobs", "10", "--batch", "fast"], "--batch"),
        (vec!["--workers", "2", "--jobs", "10", "--lease-ttl", "0"], "--lease-ttl"),
        (vec!["--workers", "2", "--jobs", "10", "--max-calls-in-flight", "0"], "--max-calls-in-flight"),
        (vec!["--workers", "2", "--jobs", "10", "--heartbeats", "never"], "--heartbeats"),
        (vec!["--workers", "2", "--jobs", "10", "--stale-flood", "1", "--flood-tokens", "10001"], "--flood-tokens"),
        // The flood's settings without a flood.
        (vec!["--workers", "2", "--jobs", "10", "--flood-deadline-ms", "500"], "--stale-flood"),
        // An SQLite file has one connection.
        (vec!["--workers", "2", "--jobs", "10", "--database-connections", "4"], "--database-connections"),
    ] {
        let output = Command::new(env!("CARGO_BIN_EXE_census")).arg("simulate").args(&args).output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.starts_with("census: error: ") && stderr.contains(says), "{args:?}: {stderr}");
    }
}

/// The synthetic census is named, wherever a census can be given, as a load
/// test's and nothing else.
#[test]
fn the_synthetic_census_says_it_is_for_load_testing() {
    for command in ["run", "simulate"] {
        let output = Command::new(env!("CARGO_BIN_EXE_census")).args([command, "--help"]).output().unwrap();
        let help = String::from_utf8_lossy(&output.stdout).split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(help.contains("load testing"), "census {command} --help: {help}");
    }
}
