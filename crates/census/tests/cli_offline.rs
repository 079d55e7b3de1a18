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
