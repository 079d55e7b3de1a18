//! The data plane against the in-memory recurrence and the published
//! numbers (layer sizes and emissions of linche89/sudoku-enumeration,
//! `docs/reports/og2/c6-standalone-research-prompt-20260905.md`; totals
//! `shapes::PUBLISHED_GRIDS`), and against files that are missing,
//! truncated or altered.

use std::path::Path;
use std::sync::atomic::AtomicBool;

use census_layers::local::{self, LocalRun};
use census_layers::{Accepted, Plane, PlaneError};
use census_math::census::Census;
use census_math::shapes::{PUBLISHED_GRIDS, layer_jobs, layers};

fn plane(c: usize, shards: u32, parts: u32, root: &Path) -> Plane {
    let census: Census = format!("layers boxes=2x{c} shards={shards} parts={parts}").parse().unwrap();
    Plane::new(census, root).unwrap()
}

fn run_all(plane: &Plane, threads: usize) -> LocalRun {
    local::run(plane, plane.plan().c(), threads, &AtomicBool::new(false), &mut |_| {}).unwrap()
}

/// Every layer's states, emissions and every class's F through the files
/// equal the in-memory recurrence's, and the total is the published one.
fn check_against_memory(c: usize, shards: u32, parts: u32, threads: usize) {
    let root = tempfile::tempdir().unwrap();
    let plane = plane(c, shards, parts, root.path());
    let run = run_all(&plane, threads);
    let mut expected = Vec::new();
    let last = layers::layers(c, c, &AtomicBool::new(false), &mut |layer| {
        expected.push((layer.rows(), layer.states().len() as u64, layer.emissions()));
    })
    .unwrap();
    let found: Vec<(usize, u64, u64)> = run.layers.iter().map(|l| (l.layer, l.states, l.emissions)).collect();
    assert_eq!(found, expected, "2x{c}");
    let (classes, grids) = layers::finish(&last).unwrap();
    let answer = run.answer.unwrap();
    assert_eq!(answer.value, grids);
    assert_eq!(answer.value.to_string(), PUBLISHED_GRIDS.iter().find(|(pc, _)| *pc == c).unwrap().1);
    let found = run.classes.unwrap();
    assert_eq!(found.len(), classes.len());
    for (key, bands) in found {
        let layer_jobs::LayerJob::Class { state, .. } = plane.plan().parse(&key).unwrap() else { panic!("{key}") };
        let class = classes.iter().find(|class| class.masks == state).unwrap();
        assert_eq!(bands, class.bands, "F of {key}");
    }
}

#[test]
fn two_by_two_to_two_by_four_through_files() {
    check_against_memory(2, 1, 1, 1);
    check_against_memory(3, 2, 3, 2);
    check_against_memory(4, 3, 4, 2);
    check_against_memory(4, 1, 1, 3);
}

/// 2 x 5 through the files: 1, 107, 16,150, 17,120, 355 states;
/// 440,192, 2,324,325, 11,957,632, 462,403 emissions; Pettersen's total;
/// every class's F as the in-memory recurrence's (itself checked against
/// the search counter in census-math's tests/layers.rs).
#[test]
fn two_by_five_through_files() {
    check_against_memory(5, 4, 4, 2);
}

/// The files (and so every digest) do not depend on threads, nor on how
/// often a map job spills its sums to disk; a job counted again publishes
/// nothing new and returns the same digest.
#[test]
fn digests_do_not_depend_on_threads_or_memory() {
    let (one, two) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (a, b) = (plane(4, 3, 4, one.path()), plane(4, 3, 4, two.path()).with_spill_states(5));
    let (run_a, run_b) = (run_all(&a, 1), run_all(&b, 3));
    assert_eq!(
        run_a.layers.iter().map(|l| l.bytes).collect::<Vec<_>>(),
        run_b.layers.iter().map(|l| l.bytes).collect::<Vec<_>>()
    );
    let (log_a, log_b) = (accepted(&a), accepted(&b));
    assert_eq!(log_a, log_b);
    let key = "2x4/map/2/1";
    assert_eq!(b.count(key, &log_b, &AtomicBool::new(false)).unwrap(), log_b[key]);
    assert_eq!(std::fs::read_dir(b.output_dir(key, 0).parent().unwrap()).unwrap().count(), 1, "one output");
    let stale: Vec<_> = std::fs::read_dir(b.plan_dir().join("tmp")).unwrap().collect();
    assert!(stale.is_empty(), "nothing left behind: {stale:?}");
}

fn accepted(plane: &Plane) -> Accepted {
    let text = std::fs::read_to_string(plane.plan_dir().join("accepted")).unwrap();
    text.lines()
        .map(|line| {
            let (key, digest) = line.split_once(' ').unwrap();
            (key.to_string(), census_layers::manifest::parse_digest(digest).unwrap())
        })
        .collect()
}

/// What the quarantine holds, by name.
fn set_aside(plane: &Plane) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(plane.quarantine_dir()) else { return Vec::new() };
    let mut names: Vec<String> =
        entries.map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    names
}

/// A job refuses inputs that are not exactly what the store accepted: a
/// file missing, altered, truncated, a manifest altered, a digest not
/// given, another job's output; nothing is published by a refused job. A
/// file or manifest that fails its digest is set aside (never deleted) and
/// the error names it and the job that wrote it.
#[test]
fn missing_or_altered_inputs_fail_with_their_path() {
    let root = tempfile::tempdir().unwrap();
    let plane = plane(3, 2, 2, root.path());
    local::run(&plane, 2, 1, &AtomicBool::new(false), &mut |_| {}).unwrap();
    let good = accepted(&plane);
    let never = AtomicBool::new(false);
    let reduce = "2x3/reduce/1/0";
    let map = "2x3/map/1/0";
    let manifest = plane.manifest(map, good[map]).unwrap();
    let file = plane.output_dir(map, good[map]).join(&manifest.files[0].name);
    let bytes = std::fs::read(&file).unwrap();
    let error = |plane: &Plane, accepted: &Accepted| plane.count(reduce, accepted, &never).unwrap_err();

    let mut altered = bytes.clone();
    altered[20] ^= 1;
    std::fs::write(&file, &altered).unwrap();
    let refused = error(&plane, &good);
    let message = refused.to_string();
    assert!(message.contains(&file.display().to_string()) && message.contains("SHA-256"), "{message}");
    assert_eq!(refused.bad_input(), Some(map), "{message}");
    let PlaneError::Input { set_aside: Some(aside), .. } = &refused else { panic!("{refused:?}") };
    assert!(message.contains(&aside.display().to_string()), "{message}");
    assert_eq!(std::fs::read(aside).unwrap(), altered, "set aside as it was, not deleted");
    assert!(!file.exists());
    assert_eq!(set_aside(&plane).len(), 1);
    let gone = plane.verify_inputs(reduce, &good).unwrap_err();
    assert!(
        matches!(&gone, PlaneError::Input { error, set_aside: Some(before), .. }
        if matches!(**error, PlaneError::Missing { ref path } if *path == file) && before == aside),
        "gone, and where to: {gone}"
    );
    assert_eq!(manifest.files.iter().map(|file| file.part).collect::<Vec<_>>(), [0, 1]);
    plane.verify_inputs("2x3/reduce/1/1", &good).expect("part 1 reads only its own file");

    std::fs::write(&file, &bytes[..bytes.len() - 1]).unwrap();
    assert!(error(&plane, &good).to_string().contains("bytes, its manifest says"));
    assert_eq!(set_aside(&plane).len(), 2);

    // Keys out of order are blamed on their file at once.
    let four = plane.output_dir(map, good[map]).join(&manifest.files[1].name);
    let four_bytes = std::fs::read(&four).unwrap();
    let mut disordered = four_bytes.clone();
    disordered[16] = 0xff;
    std::fs::write(&four, &disordered).unwrap();
    let message = plane.count("2x3/reduce/1/1", &good, &never).unwrap_err().to_string();
    assert!(message.contains(&four.display().to_string()) && message.contains("out of order"), "{message}");
    std::fs::write(&four, &four_bytes).unwrap();

    let missing = error(&plane, &good);
    assert!(
        matches!(&missing, PlaneError::Input { error, .. }
        if matches!(**error, PlaneError::Missing { ref path } if *path == file)),
        "{missing}"
    );
    std::fs::write(&file, &bytes).unwrap();

    let mut wrong = good.clone();
    wrong.insert(map.into(), good[map] ^ 1);
    assert!(error(&plane, &wrong).to_string().contains("missing"), "no output has that digest");
    let manifest_path = plane.output_dir(map, good[map]).join("manifest");
    let text = std::fs::read_to_string(&manifest_path).unwrap();
    std::fs::write(&manifest_path, text.replace("emissions 80", "emissions 81")).unwrap();
    let message = error(&plane, &good).to_string();
    assert!(message.contains("its digest is") && message.contains("set aside"), "{message}");
    assert!(!manifest_path.exists(), "the whole output is set aside");
    let aside = plane.quarantine_dir().join(set_aside(&plane).into_iter().find(|name| !name.contains("part")).unwrap());
    std::fs::rename(aside, plane.output_dir(map, good[map])).unwrap();
    std::fs::write(&manifest_path, &text).unwrap();

    let mut none = good.clone();
    none.remove(map);
    assert!(matches!(error(&plane, &none), PlaneError::NoAcceptedInput { .. }));
    // Another job's digest under this job's name: no such output.
    let mut foreign = good.clone();
    foreign.insert(map.into(), good[reduce]);
    assert!(
        matches!(error(&plane, &foreign), PlaneError::Input { error, .. } if matches!(*error, PlaneError::Missing { .. }))
    );

    assert_eq!(plane.count(reduce, &good, &never).unwrap(), good[reduce], "intact again");
    plane.verify_inputs(reduce, &good).unwrap();
    plane.verify_inputs("2x3/map/2/1", &good).unwrap();
    let stale: Vec<_> = std::fs::read_dir(plane.plan_dir().join("tmp")).unwrap().collect();
    assert!(stale.is_empty(), "refused jobs leave nothing: {stale:?}");
}

/// Copies a directory's files (one level).
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
    }
}

/// A copy planted in a job's place before it publishes (correct outputs
/// computed elsewhere, one byte of a part flipped) is not trusted on its
/// manifest: the job reads it in full, sets it aside and publishes its own
/// copy, so the digest it reports names files that check. An intact copy
/// is kept; a different manifest, or a file, in the place is set aside too.
#[test]
fn a_squatted_output_is_set_aside_when_a_job_publishes() {
    let (elsewhere, shared) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (source, plane) = (plane(3, 2, 2, elsewhere.path()), plane(3, 2, 2, shared.path()));
    local::run(&source, 3, 1, &AtomicBool::new(false), &mut |_| {}).unwrap();
    let good = accepted(&source);
    let never = AtomicBool::new(false);
    let map = "2x3/map/1/0";
    let place = plane.output_dir(map, good[map]);
    copy_dir(&source.output_dir(map, good[map]), &place);
    let part = place.join("part-00000.layer");
    let mut tampered = std::fs::read(&part).unwrap();
    tampered[24] ^= 0x40;
    std::fs::write(&part, &tampered).unwrap();

    assert_eq!(plane.count(map, &good, &never).unwrap(), good[map]);
    let aside = set_aside(&plane);
    assert_eq!(aside.len(), 1, "{aside:?}");
    let kept = plane.quarantine_dir().join(&aside[0]).join("part-00000.layer");
    assert_eq!(std::fs::read(kept).unwrap(), tampered, "the tampered copy is kept, as it was");
    plane.verify_inputs("2x3/reduce/1/0", &good).expect("the place holds the job's own copy");

    // An intact copy is the job's own output: kept, nothing set aside.
    let reduce = "2x3/reduce/1/1";
    copy_dir(&source.output_dir(reduce, good[reduce]), &plane.output_dir(reduce, good[reduce]));
    assert_eq!(plane.count(reduce, &good, &never).unwrap(), good[reduce]);
    assert_eq!(set_aside(&plane).len(), 1);

    // A manifest not the job's in its place, and a plain file there.
    let other = "2x3/reduce/1/0";
    let place = plane.output_dir(other, good[other]);
    copy_dir(&source.output_dir(other, good[other]), &place);
    let text = std::fs::read_to_string(place.join("manifest")).unwrap();
    std::fs::write(place.join("manifest"), text.replace("parents 0", "parents 1")).unwrap();
    assert_eq!(plane.count(other, &good, &never).unwrap(), good[other]);
    assert_eq!(set_aside(&plane).len(), 2);
    let map = "2x3/map/2/0";
    std::fs::create_dir_all(plane.output_dir(map, good[map]).parent().unwrap()).unwrap();
    std::fs::write(plane.output_dir(map, good[map]), b"squatter").unwrap();
    assert_eq!(plane.count(map, &good, &never).unwrap(), good[map]);
    assert_eq!(set_aside(&plane).len(), 3);
    let run = run_all(&plane, 2);
    assert_eq!(run.answer.unwrap().value.to_string(), "28200960");
    assert_eq!(set_aside(&plane).len(), 3);
}

/// A local run stopped part-way goes on from the jobs its log accepted.
#[test]
fn a_run_goes_on_from_its_log() {
    let root = tempfile::tempdir().unwrap();
    let plane = plane(3, 2, 2, root.path());
    local::run(&plane, 2, 1, &AtomicBool::new(false), &mut |_| {}).unwrap();
    let first = accepted(&plane);
    let stopped = plane.plan_dir().join("tmp").join("2x3-map-2-0.1.2.3");
    std::fs::create_dir_all(&stopped).unwrap();
    std::fs::write(stopped.join("part-00000.layer"), b"half a file").unwrap();
    let run = run_all(&plane, 2);
    assert!(!stopped.exists(), "a stopped job's work in progress is removed");
    assert_eq!(run.answer.unwrap().value.to_string(), "28200960");
    let all = accepted(&plane);
    assert_eq!(all.len(), first.len() + 2 + 2, "only the second step's jobs were counted");
    // A part set aside (it failed its digest): its job is counted again.
    let map = "2x3/map/2/1";
    std::fs::remove_file(plane.output_dir(map, all[map]).join("part-00001.layer")).unwrap();
    assert_eq!(run_all(&plane, 2).answer.unwrap().value.to_string(), "28200960");
    assert_eq!(std::fs::read_to_string(plane.plan_dir().join("accepted")).unwrap().lines().count(), all.len() + 1);
    plane.verify_inputs("2x3/reduce/2/1", &all).unwrap();
    let fresh = self::plane(3, 2, 2, &root.path().join("fresh"));
    let cancelled = local::run(&fresh, 3, 2, &AtomicBool::new(true), &mut |_| {});
    assert!(matches!(cancelled, Err(PlaneError::Cancelled)), "{cancelled:?}");
    assert!(std::fs::read_to_string(fresh.plan_dir().join("accepted")).unwrap().is_empty());
}
