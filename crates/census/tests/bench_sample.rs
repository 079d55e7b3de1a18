//! `census bench --census C --sample N [--seed S] --json`: N jobs chosen at
//! random, one JSON line each, reproducible by seed; bad arguments refused.
use std::process::Command;

use census_math::census::Census;

fn census(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_census")).args(args).output().expect("the census binary runs")
}

fn lines(output: &std::process::Output) -> Vec<serde_json::Value> {
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout.clone())
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).expect("one JSON object a line"))
        .collect()
}

/// 2x3 boxes (fast jobs): three lines, each job counted as the census's own
/// counter counts its key, its weight the job's; the same seed gives the
/// same jobs.
#[test]
fn a_seeded_sample_prints_one_json_line_per_job() {
    let args = ["bench", "--census", "shape boxes=2x3", "--sample", "3", "--seed", "11", "--threads", "2", "--json"];
    let first = lines(&census(&args));
    assert_eq!(first.len(), 3);
    let shape: Census = "shape boxes=2x3".parse().unwrap();
    let jobs = shape.jobs().unwrap();
    let counter = shape.job_counter();
    let mut classes = Vec::new();
    for line in &first {
        let keys: Vec<&String> = line.as_object().unwrap().keys().collect();
        // serde_json's Value keeps its keys sorted.
        assert_eq!(
            keys,
            [
                "census",
                "class",
                "count",
                "cpu_seconds",
                "group",
                "key",
                "run",
                "run_jobs",
                "sampled",
                "seconds",
                "seed",
                "weight"
            ]
        );
        // 2x3 jobs are counted alone: each its own run, each sampled.
        assert_eq!(
            (line["run"].clone(), line["run_jobs"].as_u64(), line["sampled"].as_bool()),
            (line["class"].clone(), Some(1), Some(true))
        );
        assert_eq!(line["seed"], 11);
        let class = line["class"].as_u64().unwrap() as usize;
        let job = &jobs[class];
        assert_eq!(line["key"], job.key.as_str());
        assert_eq!(line["group"], job.group.as_str());
        assert_eq!(line["weight"], job.weight.to_string().as_str());
        let count: u128 = line["count"].as_str().unwrap().parse().unwrap();
        assert_eq!(count, counter.count(&job.key).unwrap());
        assert!(line["seconds"].as_f64().unwrap() >= 0.0);
        classes.push(class);
    }
    classes.sort_unstable();
    classes.dedup();
    assert_eq!(classes.len(), 3, "a sample has no repeats");
    let mut again: Vec<u64> = lines(&census(&args)).iter().map(|l| l["class"].as_u64().unwrap()).collect();
    let mut before: Vec<u64> = first.iter().map(|l| l["class"].as_u64().unwrap()).collect();
    again.sort_unstable();
    before.sort_unstable();
    assert_eq!(again, before);
}

/// Without --seed the seed is chosen and reported, so the sample can be repeated.
#[test]
fn an_unseeded_sample_reports_its_seed() {
    let first = lines(&census(&["bench", "--census", "shape boxes=2x3", "--sample", "1", "--json"]));
    let seed = first[0]["seed"].as_u64().unwrap().to_string();
    let again = lines(&census(&["bench", "--census", "shape boxes=2x3", "--sample", "1", "--seed", &seed, "--json"]));
    assert_eq!(again[0]["class"], first[0]["class"]);
}

#[test]
fn bad_sample_arguments_are_refused_with_a_reason() {
    for (args, says) in [
        (&["bench", "--census", "shape boxes=2x3", "--sample", "0"][..], "\"0\" is not a number of jobs, 1 or more"),
        // Refused as it is read, before the 4x3 job list (9 s) is made.
        (&["bench", "--census", "shape boxes=4x3", "--sample", "0"][..], "\"0\" is not a number of jobs, 1 or more"),
        (&["bench", "--census", "shape boxes=2x3", "--sample", "1", "--alone", "--neighbours"][..], "--neighbours"),
        (&["bench", "--census", "shape boxes=2x3", "--sample", "1000000"][..], "--sample must be 1 to"),
        (&["bench", "--sample", "3"][..], "--census"),
        (&["bench", "--census", "shape boxes=2x3", "--seed", "3"][..], "--sample"),
        (&["bench", "--census", "shape boxes=2x3", "--alone"][..], "--sample"),
        (&["bench", "--census", "shape boxes=2x3", "--sample", "x"][..], "--sample"),
    ] {
        let output = census(args);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{args:?} succeeded");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
}

/// Before it counts, a sample says on stderr what it will count; it prints
/// one result a sampled job (issue 46).
#[test]
fn a_sample_says_what_it_will_count_before_it_starts() {
    let output = census(&["bench", "--census", "shape boxes=2x3", "--sample", "2", "--seed", "5"]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("bench: 2 job(s) chosen by --seed 5, on 1 thread(s)\n"), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&output.stdout).lines().count(), 2);
}
