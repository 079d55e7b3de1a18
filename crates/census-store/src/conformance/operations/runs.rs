//! [`RunStorage`]: runs, their classes and jobs.

use std::sync::Arc;

use super::{BIG, CLASSES, LeaseJobs, NOW, insert_run, lease, lease_of, new_run, row_of, run_row, spec};
use crate::backend::{ClassPage, Inserted, JobState, NewClass, NewJob, NewRun, StorageBackend};
use crate::conformance::fixtures;
use crate::{RunId, RunSpec};

/// Every class of the run, in class order.
pub(super) fn all_classes(run: RunId) -> ClassPage {
    ClassPage { run, after: -1, limit: i64::MAX }
}

pub(super) async fn a_run_is_found_by_its_whole_spec<B: StorageBackend>(backend: Arc<B>) {
    let (run, _) = new_run(&*backend, 1, 2).await;
    assert_eq!(backend.find_run(&spec(1, 1)).await.unwrap(), Some(run));
    assert_eq!(backend.find_run(&spec(2, 1)).await.unwrap(), None, "another counter version");
    assert_eq!(backend.find_run(&spec(1, 2)).await.unwrap(), None, "another redundancy");
    let other = RunSpec { census: fixtures::census(fixtures::RUSSELL), ..spec(1, 1) };
    assert_eq!(backend.find_run(&other).await.unwrap(), None, "another census");
}

pub(super) async fn only_a_cancelled_run_is_resumed<B: StorageBackend>(backend: Arc<B>) {
    let (run, _) = new_run(&*backend, 1, 2).await;
    assert!(!backend.resume_run(run).await.unwrap(), "not cancelled");
    let mut tx = backend.begin().await.unwrap();
    backend.mark_cancelled(&mut tx, run, NOW).await.unwrap();
    backend.commit(tx).await.unwrap();
    assert!(backend.resume_run(run).await.unwrap());
    assert_eq!(backend.runs(Some(run)).await.unwrap()[0].cancelled_at, None);
    assert!(!backend.resume_run(run).await.unwrap(), "resumed already");
}

pub(super) async fn a_new_run_has_nothing_yet_and_a_second_of_its_spec_is_a_duplicate<B: StorageBackend>(
    backend: Arc<B>,
) {
    let (first, second) = (spec(1, 3), spec(2, 1));
    let mut tx = backend.begin().await.unwrap();
    let row = NewRun { spec: &first, created_at: NOW, class_power: 2, max_lease_ms: Some(7) };
    let Inserted::New(run) = backend.insert_run(&mut tx, &row).await.unwrap() else { panic!("a new run") };
    let row = NewRun { spec: &second, ..row };
    let Inserted::New(later) = backend.insert_run(&mut tx, &row).await.unwrap() else { panic!("a new run") };
    backend.commit(tx).await.unwrap();
    assert!(later > run, "a later run has a higher id");
    let listed = &backend.runs(Some(run)).await.unwrap()[0];
    assert_eq!((listed.census.as_str(), listed.counter_version.as_str()), (fixtures::SMALL, "check/1"));
    assert_eq!((listed.redundancy, listed.jobs_total, listed.jobs_remaining), (3, 0, 0));
    assert_eq!((listed.finished_at, listed.open_conflicts, listed.priority, listed.cancelled_at), (None, 0, 0, None));
    let open = backend.open_runs(None, Some(run)).await.unwrap();
    assert_eq!(open.iter().map(|open| (open.id, open.max_lease_ms)).collect::<Vec<_>>(), [(run, Some(7))]);

    let mut tx = backend.begin().await.unwrap();
    let row = NewRun { spec: &first, created_at: NOW, class_power: 1, max_lease_ms: None };
    assert!(matches!(backend.insert_run(&mut tx, &row).await.unwrap(), Inserted::Duplicate(_)));
    backend.rollback(tx).await.unwrap();
    assert_eq!(backend.runs(None).await.unwrap().len(), 2);
}

pub(super) async fn classes_are_stored_with_nothing_counted<B: StorageBackend>(backend: Arc<B>) {
    let classes = [
        NewClass { id: 0, label: "a", weight: BIG, jobs_total: 2 },
        NewClass { id: 1, label: "b", weight: 0, jobs_total: 1 },
    ];
    let jobs = [
        NewJob { class: 0, key: "k0", stage: None, cost: 1 },
        NewJob { class: 0, key: "k1", stage: None, cost: 1 },
        NewJob { class: 1, key: "k2", stage: None, cost: 1 },
    ];
    let (run, _) = insert_run(&*backend, run_row(&spec(1, 1)), &classes, &jobs).await;
    let stored = backend.class_totals(&all_classes(run)).await.unwrap();
    let read: Vec<_> =
        stored.iter().map(|c| (c.class_id, c.label.as_str(), c.weight, c.jobs_total, c.jobs_done)).collect();
    assert_eq!(read, [(0, "a", BIG, 2, 0), (1, "b", 0, 1, 0)]);
    assert!(stored.iter().all(|class| class.count_sum == 0u32.into()));
    let mut tx = backend.begin().await.unwrap();
    let sums = backend.class_sums_page(&mut tx, &all_classes(run)).await.unwrap();
    assert!(sums.iter().all(|class| class.count_sum == 0u32.into() && class.contribution == 0u32.into()));
}

pub(super) async fn jobs_are_pending_and_numbered_in_the_order_given<B: StorageBackend>(backend: Arc<B>) {
    let jobs = [
        NewJob { class: 1, key: "z", stage: None, cost: 1 },
        NewJob { class: 0, key: "a", stage: None, cost: 5 },
        NewJob { class: 1, key: "m", stage: None, cost: 1 },
    ];
    let (run, ids) = insert_run(&*backend, run_row(&spec(1, 1)), &CLASSES, &jobs).await;
    assert_eq!(ids.len(), 3);
    assert!(ids.windows(2).all(|pair| pair[0] < pair[1]), "{ids:?}");
    let leased = lease(&*backend, &LeaseJobs { wanted: 3, ..lease_of(run, "w") }).await;
    let keys: Vec<&str> = leased.iter().map(|job| job.key.as_str()).collect();
    assert_eq!(keys, ["z", "a", "m"], "leased in id order, which is the order given");
    assert!(leased.iter().all(|job| job.attempt == 1), "attempt 0 before the first lease");
    let mut tx = backend.begin().await.unwrap();
    let loaded = backend.load_jobs(&mut tx, &ids).await.unwrap();
    let read: Vec<_> = loaded.iter().map(|job| (job.class, job.cost, job.votes, job.round)).collect();
    assert_eq!(read, [(1, 1, 0, 0), (0, 5, 0, 0), (1, 1, 0, 0)]);
    backend.rollback(tx).await.unwrap();
    let failing = {
        let mut tx = backend.begin().await.unwrap();
        backend.lock_failing_job(&mut tx, ids[0]).await.unwrap().unwrap()
    };
    assert_eq!((failing.failures, failing.failure_epoch), (0, 0));
}

pub(super) async fn a_key_the_run_has_is_a_duplicate<B: StorageBackend>(backend: Arc<B>) {
    let (run, _) = new_run(&*backend, 1, 2).await;
    let mut tx = backend.begin().await.unwrap();
    let again = [NewJob { class: 0, key: "k1", stage: None, cost: 1 }];
    assert!(matches!(backend.insert_jobs(&mut tx, run, &again, NOW).await.unwrap(), Inserted::Duplicate(_)));
    backend.rollback(tx).await.unwrap();
    // Another run may have the same key.
    let (other, ids) = new_run(&*backend, 2, 2).await;
    assert_ne!(other, run);
    assert_eq!(ids.len(), 2);
}

/// The backend refuses a chunk of jobs with a class its run does not have
/// (Postgres has no foreign key from jobs to classes: the backend looks
/// the chunk's classes up itself), and stores nothing of it.
pub(super) async fn a_job_of_a_class_the_run_does_not_have_is_refused<B: StorageBackend>(backend: Arc<B>) {
    let spec = spec(1, 1);
    let mut tx = backend.begin().await.unwrap();
    let row = NewRun { spec: &spec, created_at: 0, class_power: 2, max_lease_ms: None };
    let Inserted::New(run) = backend.insert_run(&mut tx, &row).await.unwrap() else { panic!("a new run") };
    let classes = [NewClass { id: 0, label: "a", weight: 1, jobs_total: 2 }];
    backend.insert_classes(&mut tx, run, &classes).await.unwrap();
    let good = [NewJob { class: 0, key: "k0", stage: None, cost: 1 }];
    assert_eq!(backend.insert_jobs(&mut tx, run, &good, 0).await.unwrap(), Inserted::New(()));
    let bad =
        [NewJob { class: 0, key: "k1", stage: None, cost: 1 }, NewJob { class: 7, key: "k2", stage: None, cost: 1 }];
    let refused = backend.insert_jobs(&mut tx, run, &bad, 0).await.unwrap_err().to_string();
    assert!(refused.contains("1 of the 2 classes") && refused.contains(&format!("run {run}")), "{refused}");
    backend.rollback(tx).await.unwrap();
    assert!(backend.runs(None).await.unwrap().is_empty(), "nothing of the run is stored");
}

pub(super) async fn a_class_takes_its_job_count<B: StorageBackend>(backend: Arc<B>) {
    let (run, _) = new_run(&*backend, 1, 3).await;
    let mut tx = backend.begin().await.unwrap();
    backend.set_class_jobs_total(&mut tx, run, &[(1, 9)]).await.unwrap();
    backend.commit(tx).await.unwrap();
    let totals: Vec<u32> =
        backend.class_totals(&all_classes(run)).await.unwrap().iter().map(|c| c.jobs_total).collect();
    assert_eq!(totals, [2, 9]);
}

pub(super) async fn a_run_takes_its_job_count_and_cost<B: StorageBackend>(backend: Arc<B>) {
    let (run, _) = new_run(&*backend, 1, 3).await;
    let mut tx = backend.begin().await.unwrap();
    backend.set_run_jobs_total(&mut tx, run, 40, 700).await.unwrap();
    backend.commit(tx).await.unwrap();
    let state = backend.run_state(None, run).await.unwrap().unwrap();
    assert_eq!((state.jobs_total, state.jobs_remaining, state.cost_total, state.cost_done), (40, 40, 700, 0));
}

pub(super) async fn statistics_are_refreshed_once_a_run_is_committed<B: StorageBackend>(backend: Arc<B>) {
    new_run(&*backend, 1, 3).await;
    backend.refresh_statistics().await.unwrap();
    assert_eq!(backend.runs(None).await.unwrap().len(), 1);
}

pub(super) async fn an_outline_is_the_census_and_its_classes<B: StorageBackend>(backend: Arc<B>) {
    let (run, _) = new_run(&*backend, 1, 3).await;
    let outline = backend.run_outline(None, run).await.unwrap().unwrap();
    assert_eq!((outline.census.as_str(), outline.classes), (fixtures::SMALL, 2));
    assert!(backend.run_outline(None, run + 1).await.unwrap().is_none());
    let mut tx = backend.begin().await.unwrap();
    assert_eq!(backend.run_outline(Some(&mut tx), run).await.unwrap().unwrap().classes, 2, "in a transaction");
}

pub(super) async fn runs_are_listed_oldest_first<B: StorageBackend>(backend: Arc<B>) {
    let (first, _) = new_run(&*backend, 1, 3).await;
    let (second, _) = new_run(&*backend, 2, 4).await;
    let listed: Vec<_> =
        backend.runs(None).await.unwrap().iter().map(|r| (r.id, r.jobs_total, r.jobs_remaining)).collect();
    assert_eq!(listed, [(first, 3, 3), (second, 4, 4)]);
    let one: Vec<_> = backend.runs(Some(second)).await.unwrap().iter().map(|r| r.id).collect();
    assert_eq!(one, [second]);
    assert!(backend.runs(Some(second + 1)).await.unwrap().is_empty());
}

pub(super) async fn a_runs_state_is_read_in_a_transaction_or_alone<B: StorageBackend>(backend: Arc<B>) {
    let (run, _) = new_run(&*backend, 1, 3).await;
    let state = backend.run_state(None, run).await.unwrap().unwrap();
    assert_eq!((state.finished_at, state.open_conflicts, state.failed_jobs), (None, 0, 0));
    assert_eq!((state.weighted_sum, state.answer), (None, None));
    assert_eq!((state.jobs_total, state.jobs_remaining, state.cost_total, state.cost_done), (3, 3, 3, 0));
    assert_eq!(crate::backend::parse_big(&state.counted).unwrap(), 0u32.into());
    assert_eq!(state.census, fixtures::SMALL);
    assert!(backend.run_state(None, run + 1).await.unwrap().is_none());
    let mut tx = backend.begin().await.unwrap();
    let in_tx = backend.run_state(Some(&mut tx), run).await.unwrap().unwrap();
    assert_eq!(in_tx.jobs_remaining, 3);
}

pub(super) async fn each_known_job_has_its_runs_census<B: StorageBackend>(backend: Arc<B>) {
    let (first, one) = new_run(&*backend, 1, 1).await;
    let other = RunSpec { census: fixtures::census(fixtures::RUSSELL), ..spec(2, 1) };
    let job = [NewJob { class: 0, key: "k", stage: None, cost: 1 }];
    let (second, two) = insert_run(&*backend, run_row(&other), &CLASSES, &job).await;
    let mut found = backend.job_censuses(&[two[0], one[0], two[0] + 100]).await.unwrap();
    found.sort_by_key(|job| job.job);
    let read: Vec<_> = found.iter().map(|job| (job.job, job.run, job.census.as_str())).collect();
    assert_eq!(read, [(one[0], first, fixtures::SMALL), (two[0], second, fixtures::RUSSELL)]);
}

pub(super) async fn a_run_is_cancelled_once<B: StorageBackend>(backend: Arc<B>) {
    let (run, ids) = new_run(&*backend, 1, 2).await;
    for at in [NOW, NOW + 5] {
        let mut tx = backend.begin().await.unwrap();
        backend.mark_cancelled(&mut tx, run, at).await.unwrap();
        backend.commit(tx).await.unwrap();
    }
    assert_eq!(backend.runs(Some(run)).await.unwrap()[0].cancelled_at, Some(NOW), "the first time stays");
    assert!(backend.open_runs(None, None).await.unwrap().is_empty(), "a cancelled run is not open");
    let mut tx = backend.begin().await.unwrap();
    assert!(backend.load_jobs(&mut tx, &ids).await.unwrap().iter().all(|job| job.cancelled));
    backend.rollback(tx).await.unwrap();
    // Its jobs stay as they are: the store releases their leases.
    assert_eq!(row_of(&*backend, ids[0]).await.lease.state, JobState::Pending);
}

pub(super) async fn a_run_takes_its_priority<B: StorageBackend>(backend: Arc<B>) {
    let (first, _) = new_run(&*backend, 1, 2).await;
    let (second, _) = new_run(&*backend, 2, 2).await;
    backend.set_priority(second, 5).await.unwrap();
    backend.set_priority(first, -1).await.unwrap();
    let listed: Vec<_> = backend.runs(None).await.unwrap().iter().map(|run| run.priority).collect();
    assert_eq!(listed, [-1, 5]);
    let open: Vec<_> = backend.open_runs(None, None).await.unwrap().iter().map(|run| run.id).collect();
    assert_eq!(open, [second, first], "highest priority first");
}
