//! Creating a run from a stream of jobs (`create_run_streaming`), read and
//! stored a chunk at a time: every job and class stored once with its job
//! count (and read a page at a time), even a class whose jobs come in
//! several chunks; a key given twice
//! in different chunks refused with nothing stored; creating the run again
//! finds it, mid-run, without reading the stream; and the run counts to the
//! synthetic census's exact answer. Jobs are stored (and leased) in the
//! order given, which the fold at finish walks in step with the census's
//! list; a run stored in another order still folds, the slower way.

use std::sync::Arc;

use census_math::census::Census;
use census_math::synthetic;

use super::fixtures::{TTL, completion, drain, true_count};
use crate::{JobSpec, JobStore, JobStream, RunSpec, StoreError};

/// More than two chunks of the store's (10,000 jobs), and not a multiple.
const JOBS: u64 = 25_001;

fn synthetic_census(jobs: u64) -> (Census, RunSpec) {
    let census: Census = format!("synthetic jobs={jobs}").parse().unwrap();
    let spec = RunSpec { census, counter_version: census.counter_version(), redundancy: 1 };
    (census, spec)
}

/// A stream that panics if read: creating an existing run must not read it.
fn unread() -> JobStream {
    Box::new(std::iter::from_fn(|| panic!("the jobs of an existing run were read")))
}

pub(super) async fn a_streamed_run_is_stored_whole_and_counts_exactly(store: Arc<dyn JobStore>) {
    let (census, spec) = synthetic_census(JOBS);
    let run = store.create_run_streaming(&spec, census.job_stream().unwrap()).await.unwrap();
    let summary = store.run(run).await.unwrap();
    assert_eq!((summary.jobs_total, summary.jobs_done), (JOBS, 0));
    let classes = store.class_totals(run).await.unwrap();
    assert_eq!(classes.len() as u64, JOBS.div_ceil(synthetic::JOBS_PER_GROUP));
    for (number, class) in classes.iter().enumerate() {
        let first = number as u64 * synthetic::JOBS_PER_GROUP;
        assert_eq!((class.class_id as usize, class.label.as_str()), (number, synthetic::group(first).as_str()));
        let jobs = synthetic::JOBS_PER_GROUP.min(JOBS - first);
        assert_eq!(u64::from(class.jobs_total), jobs, "class {}", class.label);
    }
    // A page of them: numbered from a class on, at most so many.
    let page = store.class_totals_from(run, 2490, Some(20)).await.unwrap();
    assert_eq!(page, classes[2490..]);
    assert_eq!(store.class_totals_from(run, 3, Some(2)).await.unwrap(), classes[3..5]);
    assert!(store.class_totals_from(run, 2501, None).await.unwrap().is_empty());

    // Half-way, created again (a restarted coordinator): the same run, its
    // progress kept, the stream not read.
    let mut done = 0u64;
    while done < JOBS / 2 {
        let leases = store.lease(Some(run), "w", 2048, TTL).await.unwrap();
        let reports: Vec<_> = leases.iter().map(|lease| completion(lease, "w", true_count(lease))).collect();
        store.complete_many(&reports).await.unwrap().into_iter().for_each(|outcome| outcome.map(drop).unwrap());
        done += leases.len() as u64;
    }
    assert_eq!(store.create_run_streaming(&spec, unread()).await.unwrap(), run);
    assert_eq!(store.list_runs().await.unwrap().len(), 1);
    assert_eq!(store.run(run).await.unwrap().jobs_done, done);

    done += drain(store.as_ref(), run, "w").await.len() as u64;
    assert_eq!(done, JOBS);
    let total = store.total(run).await.unwrap();
    assert!(total.is_final);
    assert_eq!(total.answer, Some(synthetic::expected_answer(JOBS, 0)));
}

pub(super) async fn a_class_in_many_chunks_has_all_its_jobs(store: Arc<dyn JobStore>) {
    // Three classes whose jobs alternate through three chunks.
    let (_, spec) = synthetic_census(JOBS);
    let jobs: JobStream = Box::new((0..JOBS).map(|index| JobSpec {
        key: synthetic::key(index),
        group: format!("residue {}", index % 3),
        weight: 1,
    }));
    let run = store.create_run_streaming(&spec, jobs).await.unwrap();
    let classes = store.class_totals(run).await.unwrap();
    let counts: Vec<(&str, u32)> = classes.iter().map(|class| (class.label.as_str(), class.jobs_total)).collect();
    assert_eq!(counts, [("residue 0", 8334), ("residue 1", 8334), ("residue 2", 8333)]);
    assert_eq!(store.run(run).await.unwrap().jobs_total, JOBS);
}

pub(super) async fn a_key_repeated_in_a_later_chunk_is_refused_and_nothing_is_stored(store: Arc<dyn JobStore>) {
    let (_, spec) = synthetic_census(JOBS);
    let jobs: JobStream = Box::new(
        (0..JOBS)
            .map(|index| JobSpec { key: synthetic::key(index), group: synthetic::group(index), weight: 1 })
            .chain(std::iter::once(JobSpec { key: synthetic::key(7), group: synthetic::group(7), weight: 1 })),
    );
    let refused = store.create_run_streaming(&spec, jobs).await;
    let message = refused.as_ref().unwrap_err().report();
    assert!(matches!(refused, Err(StoreError::Invalid(_))), "{message}");
    assert!(message.contains("given twice"), "{message}");
    assert!(store.list_runs().await.unwrap().is_empty(), "a refused run left rows behind");
    // The same run, given faithfully, is then created.
    let (census, _) = synthetic_census(JOBS);
    let run = store.create_run_streaming(&spec, census.job_stream().unwrap()).await.unwrap();
    assert_eq!(store.run(run).await.unwrap().jobs_total, JOBS);
}

pub(super) async fn jobs_are_stored_in_the_order_given_and_any_order_folds(store: Arc<dyn JobStore>) {
    // The census's own order: leased in it, and folded in step with it.
    let (census, spec) = synthetic_census(JOBS);
    let run = store.create_run_streaming(&spec, census.job_stream().unwrap()).await.unwrap();
    let leased = drain(store.as_ref(), run, "w").await;
    assert!(
        leased.iter().map(String::as_str).eq((0..JOBS)
            .map(synthetic::key)
            .collect::<Vec<_>>()
            .iter()
            .map(String::as_str))
    );
    assert_eq!(store.total(run).await.unwrap().answer, Some(synthetic::expected_answer(JOBS, 0)));

    // Another order (each chunk's jobs from all over the list), as a run
    // made by an older version may be: leased in that order, and folded
    // to the same answer.
    let (census, spec) = synthetic_census(JOBS - 1);
    let stride = 7919; // prime, and prime to the job count: a permutation
    let order: Vec<u64> = (0..JOBS - 1).map(|i| i * stride % (JOBS - 1)).collect();
    let given: Vec<JobSpec> = order
        .iter()
        .map(|&index| JobSpec { key: synthetic::key(index), group: synthetic::group(index), weight: 1 })
        .collect();
    let run = store.create_run_streaming(&spec, Box::new(given.clone().into_iter())).await.unwrap();
    let leased = drain(store.as_ref(), run, "w").await;
    assert!(leased.iter().eq(given.iter().map(|job| &job.key)), "the jobs were not leased in the order given");
    let total = store.total(run).await.unwrap();
    assert!(total.is_final);
    assert_eq!(total.answer, Some(synthetic::expected_answer(JOBS - 1, 0)));
    assert_eq!(census.jobs().unwrap().len() as u64, JOBS - 1);
}
