//! [`AnswerStorage`]: a fold's pages, the sums it checks, the answer, and
//! what progress shows.

use std::collections::BTreeMap;
use std::sync::Arc;

use num_bigint::BigUint;

use super::results::add;
use super::runs::all_classes;
use super::{BIG, CLASSES, NOW, decide, insert_run, jobs_of, keys, new_run, record, result, run_row, spec};
use crate::backend::{
    AcceptedPage, ClassPage, FinishedAnswer, FoldPage, FoldSource, JobState, Recent, Rejection, ResultOutcome,
    StorageBackend, WorkerTally, parse_big,
};
use crate::{JobId, RunId};

/// (job, class, key, label, weight, count) of each row of the page.
async fn fold<B: StorageBackend>(backend: &B, page: FoldPage) -> Vec<(JobId, i64, String, String, u128, u128)> {
    let rows = backend.fold_page(None, &page).await.unwrap();
    rows.into_iter().map(|r| (r.job_id, r.class_id, r.key, r.label, r.weight, r.count)).collect()
}

pub(super) async fn a_fold_reads_done_jobs_a_page_at_a_time<B: StorageBackend>(backend: Arc<B>) {
    let (run, ids) = new_run(&*backend, 1, 5).await;
    let done = [
        (ids[0], JobState::Done, Some(10), 1),
        (ids[2], JobState::Done, Some(BIG), 1),
        (ids[3], JobState::Done, Some(0), 1),
    ];
    decide(&*backend, &done).await;
    let page = |after, limit| FoldPage { run, source: FoldSource::DoneJobs, after, limit };
    let row = |i: usize, count| {
        let class = i as i64 % 2;
        let (label, weight) = if class == 0 { ("a", 2) } else { ("b", 3) };
        (ids[i], class, format!("k{i}"), label.to_string(), weight, count)
    };
    assert_eq!(fold(&*backend, page(-1, 2)).await, [row(0, 10), row(2, BIG)]);
    assert_eq!(fold(&*backend, page(ids[2], 2)).await, [row(3, 0)]);
    assert!(fold(&*backend, page(ids[3], 2)).await.is_empty());
    let mut tx = backend.begin().await.unwrap();
    assert_eq!(backend.fold_page(Some(&mut tx), &page(-1, 10)).await.unwrap().len(), 3, "in a transaction");
}

pub(super) async fn a_recheck_reads_the_accepted_results_of_the_current_rounds<B: StorageBackend>(backend: Arc<B>) {
    let (run, ids) = new_run(&*backend, 1, 3).await;
    let accepted = |job, count, round| result(job, run, "w", count, ResultOutcome::Accepted, round);
    // The first job accepted twice in its round (a damaged database): both
    // rows, in one page. The second recounted: its new round's only. The
    // third has votes only.
    let results = [
        accepted(ids[0], 7, 0),
        accepted(ids[0], 7, 0),
        accepted(ids[1], 10, 0),
        result(ids[2], run, "w", 4, ResultOutcome::Vote, 0),
    ];
    record(&*backend, &results, NOW).await;
    let mut tx = backend.begin().await.unwrap();
    backend.start_new_round(&mut tx, &[ids[1]], NOW).await.unwrap();
    backend.commit(tx).await.unwrap();
    record(&*backend, &[accepted(ids[1], 11, 1)], NOW).await;
    let done = [
        (ids[0], JobState::Done, Some(7), 1),
        (ids[1], JobState::Done, Some(11), 1),
        (ids[2], JobState::Done, Some(4), 1),
    ];
    decide(&*backend, &done).await;
    let page = |after, limit| FoldPage { run, source: FoldSource::AcceptedResults, after, limit };
    let counts = |rows: Vec<(JobId, i64, String, String, u128, u128)>| {
        rows.into_iter().map(|row| (row.0, row.5)).collect::<Vec<_>>()
    };
    assert_eq!(counts(fold(&*backend, page(-1, 1)).await), [(ids[0], 7), (ids[0], 7)]);
    assert_eq!(counts(fold(&*backend, page(ids[0], 10)).await), [(ids[1], 11)]);
}

pub(super) async fn class_sums_are_read_a_page_at_a_time<B: StorageBackend>(backend: Arc<B>) {
    let (run, _) = new_run(&*backend, 1, 4).await;
    add(&*backend, &[((run, 0), (BigUint::from(BIG), 2)), ((run, 1), (BigUint::from(4u32), 1))]).await;
    let mut tx = backend.begin().await.unwrap();
    let page = |after, limit| ClassPage { run, after, limit };
    let first = backend.class_sums_page(&mut tx, &page(-1, 1)).await.unwrap();
    let rest = backend.class_sums_page(&mut tx, &page(0, 5)).await.unwrap();
    let read: Vec<_> = first
        .iter()
        .chain(&rest)
        .map(|c| (c.class_id, c.label.as_str(), c.count_sum.clone(), c.contribution.clone()))
        .collect();
    let big = BigUint::from(BIG);
    assert_eq!(read, [(0, "a", big.clone(), big * 2u32), (1, "b", 4u32.into(), 12u32.into())]);
    assert!(backend.class_sums_page(&mut tx, &page(1, 5)).await.unwrap().is_empty());
}

pub(super) async fn the_weighted_sum_so_far_is_read_in_a_transaction_or_alone<B: StorageBackend>(backend: Arc<B>) {
    let (run, _) = new_run(&*backend, 1, 4).await;
    assert_eq!(backend.weighted_sum_so_far(None, run).await.unwrap(), 0u32.into());
    add(&*backend, &[((run, 1), (BigUint::from(BIG), 1))]).await;
    let expected = BigUint::from(BIG) * 3u32;
    assert_eq!(backend.weighted_sum_so_far(None, run).await.unwrap(), expected);
    let mut tx = backend.begin().await.unwrap();
    assert_eq!(backend.weighted_sum_so_far(Some(&mut tx), run).await.unwrap(), expected);
}

pub(super) async fn a_written_answer_finishes_its_run<B: StorageBackend>(backend: Arc<B>) {
    let (run, _) = new_run(&*backend, 1, 2).await;
    let (weighted_sum, answer) = (BigUint::from(2u32).pow(150), BigUint::from(3u32).pow(200));
    let finished = FinishedAnswer { run, finished_at: NOW + 9, weighted_sum: &weighted_sum, answer: &answer };
    let mut tx = backend.begin().await.unwrap();
    backend.write_answer(&mut tx, &finished).await.unwrap();
    backend.commit(tx).await.unwrap();
    let state = backend.run_state(None, run).await.unwrap().unwrap();
    assert_eq!(state.finished_at, Some(NOW + 9));
    assert_eq!(parse_big(state.weighted_sum.as_deref().unwrap()).unwrap(), weighted_sum);
    assert_eq!(parse_big(state.answer.as_deref().unwrap()).unwrap(), answer);
    assert_eq!(backend.runs(Some(run)).await.unwrap()[0].finished_at, Some(NOW + 9));
    assert!(backend.open_runs(None, None).await.unwrap().is_empty(), "a finished run is not open");
}

pub(super) async fn each_runs_leased_jobs_are_counted_whatever_moves_them<B: StorageBackend>(backend: Arc<B>) {
    super::queue::lease_counts_follow_every_move(&*backend).await;
}

pub(super) async fn a_runs_rejections_are_counted<B: StorageBackend>(backend: Arc<B>) {
    let (first, one) = new_run(&*backend, 1, 1).await;
    let (second, two) = new_run(&*backend, 2, 1).await;
    let rejection = |job, run| Rejection { job, run, attempt: 1, worker: "w".into(), count: 1, reason: "wrong".into() };
    let mut tx = backend.begin().await.unwrap();
    let rejections = [rejection(one[0], first), rejection(one[0], first), rejection(two[0], second)];
    backend.insert_rejections(&mut tx, &rejections, NOW).await.unwrap();
    backend.commit(tx).await.unwrap();
    assert_eq!(backend.rejections_in(first).await.unwrap(), 2);
    assert_eq!(backend.rejections_in(second).await.unwrap(), 1);
}

pub(super) async fn recent_results_are_the_newest_since<B: StorageBackend>(backend: Arc<B>) {
    let (run, ids) = new_run(&*backend, 1, 3).await;
    let (other, theirs) = new_run(&*backend, 2, 1).await;
    let costing = |cost| super::NewResult { cost, ..result(ids[0], run, "w", 1, ResultOutcome::Vote, 0) };
    record(&*backend, &[costing(1), costing(1), costing(1)], NOW).await;
    record(&*backend, &[costing(2), costing(2)], NOW + 10).await;
    record(&*backend, &[costing(5)], NOW + 20).await;
    record(&*backend, &[result(theirs[0], other, "w", 1, ResultOutcome::Vote, 0)], NOW + 20).await;
    let recent = |since, limit| {
        let backend = backend.clone();
        async move {
            let recent = backend.recent_results(&Recent { run, since, limit }).await.unwrap();
            (recent.results, recent.cost, recent.oldest)
        }
    };
    assert_eq!(recent(NOW + 10, 10).await, (3, 9, Some(NOW + 10)), "since a time");
    assert_eq!(recent(NOW, 2).await, (2, 7, Some(NOW + 10)), "the newest, at most the limit");
    assert_eq!(recent(NOW + 21, 10).await, (0, 0, None));
}

/// Adds each (identity, jobs) to its statistics in the run.
async fn tally<B: StorageBackend>(backend: &B, run: RunId, workers: &[(&str, i64)]) {
    let workers: BTreeMap<(RunId, String), WorkerTally> = workers
        .iter()
        .map(|&(worker, jobs)| ((run, worker.to_string()), WorkerTally { jobs, completions: 1u32.into() }))
        .collect();
    let mut tx = backend.begin().await.unwrap();
    backend.add_to_worker_stats(&mut tx, &workers, NOW).await.unwrap();
    backend.commit(tx).await.unwrap();
}

pub(super) async fn identities_are_listed_by_their_jobs<B: StorageBackend>(backend: Arc<B>) {
    let (run, _) = new_run(&*backend, 1, 1).await;
    tally(&*backend, run, &[("w", 2), ("x", 5), ("y", 2)]).await;
    let listed = |limit| {
        let backend = backend.clone();
        async move {
            let stats = backend.worker_stats(run, limit).await.unwrap();
            stats.into_iter().map(|stats| (stats.worker, stats.jobs)).collect::<Vec<_>>()
        }
    };
    let named = |list: &[(&str, u64)]| list.iter().map(|&(w, jobs)| (w.to_string(), jobs)).collect::<Vec<_>>();
    assert_eq!(listed(10).await, named(&[("x", 5), ("w", 2), ("y", 2)]), "most jobs first, then by name");
    assert_eq!(listed(2).await, named(&[("x", 5), ("w", 2)]));
}

pub(super) async fn a_runs_identities_are_counted<B: StorageBackend>(backend: Arc<B>) {
    let (run, _) = new_run(&*backend, 1, 1).await;
    let (other, _) = new_run(&*backend, 2, 1).await;
    tally(&*backend, run, &[("w", 2), ("x", 5), ("y", 2)]).await;
    tally(&*backend, run, &[("w", 1)]).await;
    assert_eq!(backend.workers_of(run).await.unwrap(), 3);
    assert_eq!(backend.workers_of(other).await.unwrap(), 0);
}

pub(super) async fn class_totals_are_read_a_page_at_a_time<B: StorageBackend>(backend: Arc<B>) {
    let (run, _) = new_run(&*backend, 1, 5).await;
    add(&*backend, &[((run, 1), (BigUint::from(BIG) * 4u32, 2))]).await;
    let totals = backend.class_totals(&all_classes(run)).await.unwrap();
    let read: Vec<_> =
        totals.iter().map(|c| (c.class_id, c.label.as_str(), c.weight, c.jobs_total, c.jobs_done)).collect();
    assert_eq!(read, [(0, "a", 2, 3, 0), (1, "b", 3, 2, 2)]);
    assert_eq!(totals[1].count_sum, BigUint::from(BIG) * 4u32);
    assert!(totals[1].complete() && !totals[0].complete());
    let page = backend.class_totals(&ClassPage { run, after: 0, limit: 1 }).await.unwrap();
    assert_eq!(page.iter().map(|class| class.class_id).collect::<Vec<_>>(), [1]);
    let page = backend.class_totals(&ClassPage { run, after: -1, limit: 1 }).await.unwrap();
    assert_eq!(page.iter().map(|class| class.class_id).collect::<Vec<_>>(), [0]);
}

pub(super) async fn a_stages_accepted_counts_are_read_a_page_at_a_time<B: StorageBackend>(backend: Arc<B>) {
    let spec = spec(1, 1);
    let keys = keys(4);
    let stages = [0, 0, 1, 0];
    let (run, ids) = insert_run(&*backend, run_row(&spec), &CLASSES, &jobs_of(&keys, |i| Some(stages[i]))).await;
    let done = [
        (ids[0], JobState::Done, Some(5), 1),
        (ids[1], JobState::Done, Some(BIG), 1),
        (ids[2], JobState::Done, Some(3), 1),
    ];
    decide(&*backend, &done).await;
    let accepted = |stage, after, limit| {
        let backend = backend.clone();
        async move {
            let page = AcceptedPage { run, stage, after, limit };
            let counts = backend.accepted_counts(&page).await.unwrap();
            counts.into_iter().map(|count| (count.job_id, count.key, count.count)).collect::<Vec<_>>()
        }
    };
    let row = |i: usize, count| (ids[i], format!("k{i}"), count);
    assert_eq!(accepted(Some(0), -1, 10).await, [row(0, 5), row(1, BIG)], "done jobs of the stage");
    assert_eq!(accepted(Some(0), ids[0], 1).await, [row(1, BIG)]);
    assert_eq!(accepted(Some(1), -1, 10).await, [row(2, 3)]);
    let (plain, mine) = new_run(&*backend, 2, 2).await;
    decide(&*backend, &[(mine[1], JobState::Done, Some(8), 1)]).await;
    let page = AcceptedPage { run: plain, stage: None, after: -1, limit: 10 };
    let counts = backend.accepted_counts(&page).await.unwrap();
    assert_eq!(counts.iter().map(|count| (count.job_id, count.count)).collect::<Vec<_>>(), [(mine[1], 8)]);
}
