//! Runs of stages (a `layers` census): a job of a stage is leased only when
//! every job of the stages below it is done (accepted by its quorum, not
//! merely voted on, and not failed), a job of a later stage keeps an
//! identity from being told idle, a failed job holds the stages after it
//! until it is requeued, a recount of a job reopens the stages after it,
//! and each stage's accepted counts are read back in job order. The run folds to the published 2x3 total with its map and
//! reduce jobs' made-up digests, which weigh nothing in the weighted sum.

use std::collections::BTreeSet;
use std::sync::Arc;

use census_math::census::Census;

use super::fixtures::{TTL, census, completion, jobs, spec};
use crate::{AcceptedCount, CompleteOutcome, Completion, JobSpec, JobStore, Lease, StoreError};

/// 2x3 by layers: map 1 (stage 0), reduce 1 (stage 1), two map jobs of
/// step 2 (stage 2), its reduce jobs (stage 3), the column-set classes
/// (stage 4).
const LAYERS: &str = "layers boxes=2x3 shards=2 parts=2";

/// What a job of [`LAYERS`] counts: for a class job the F of its class, by
/// the shape census's counter; for a map or reduce job a made-up digest
/// (the store never reads one; the data plane does).
fn layer_count(key: &str) -> u128 {
    match key.strip_prefix("2x3/class/") {
        Some(sets) => census("shape boxes=2x3").job_counter().count(&format!("2x3:{sets}")).unwrap(),
        None => u128::MAX - key.bytes().map(u128::from).sum::<u128>(),
    }
}

/// The jobs of `census` in a stage, by key.
fn keys_of_stage(census: Census, jobs: &[JobSpec], stage: u32) -> BTreeSet<String> {
    jobs.iter().filter(|job| census.stage(&job.key) == Ok(stage)).map(|job| job.key.clone()).collect()
}

fn keys(leases: &[Lease]) -> BTreeSet<String> {
    leases.iter().map(|lease| lease.key.clone()).collect()
}

async fn report(store: &Arc<dyn JobStore>, worker: &str, leases: &[Lease]) {
    let done: Vec<Completion> = leases.iter().map(|l| completion(l, worker, layer_count(&l.key))).collect();
    for outcome in store.complete_many(&done).await.unwrap() {
        assert_eq!(outcome.unwrap(), CompleteOutcome::Recorded);
    }
}

pub(super) async fn a_stage_is_leased_once_every_job_below_it_is_done(store: Arc<dyn JobStore>) {
    let layers = census(LAYERS);
    let layer_jobs = jobs(LAYERS);
    // Two identities must agree on each job, as the census asks.
    let run = store.create_run(&spec(LAYERS, 2), &layer_jobs).await.unwrap();
    for stage in 0..layers.stage_count() {
        let wanted = keys_of_stage(layers, &layer_jobs, stage);
        let first = store.lease(Some(run), "a", 100, TTL).await.unwrap();
        assert_eq!(keys(&first), wanted, "stage {stage}: all of it and nothing after it");
        assert!(store.lease(Some(run), "b", 100, TTL).await.unwrap().is_empty(), "stage {stage} is all leased");
        assert!(store.has_work_for("b", Some(run)).await.unwrap());
        report(&store, "a", &first).await;
        // One vote is not done: the next stage waits for the quorum.
        assert!(store.lease(Some(run), "a", 100, TTL).await.unwrap().is_empty(), "stage {stage}: a voted");
        let last = stage + 1 == layers.stage_count();
        assert_eq!(store.has_work_for("a", Some(run)).await.unwrap(), !last, "stage {stage}: the stages to come");
        let page = store.accepted_counts(run, stage, 0, 1000).await.unwrap();
        assert!(page.is_empty(), "stage {stage}: nothing accepted on one vote");
        let second = store.lease(Some(run), "b", 100, TTL).await.unwrap();
        assert_eq!(keys(&second), wanted);
        report(&store, "b", &second).await;
        // What the stage accepted, in job order, a page at a time.
        let mut accepted: Vec<AcceptedCount> = Vec::new();
        let mut after = 0;
        loop {
            let page = store.accepted_counts(run, stage, after, 2).await.unwrap();
            let Some(last) = page.last() else { break };
            after = last.job_id;
            accepted.extend(page);
        }
        assert!(accepted.windows(2).all(|pair| pair[0].job_id < pair[1].job_id));
        assert_eq!(accepted.iter().map(|a| a.key.clone()).collect::<BTreeSet<_>>(), wanted);
        assert!(accepted.iter().all(|a| a.count == layer_count(&a.key)), "stage {stage}: {accepted:?}");
    }
    let total = store.total(run).await.unwrap();
    assert!(total.is_final);
    assert_eq!(total.answer, layers.published());
    assert_eq!(total.answer.unwrap().to_string(), "28200960");
    // The digests weigh nothing: the weighted sum is the answer.
    assert_eq!(total.weighted_sum.to_string(), "28200960");
    let beyond = store.accepted_counts(run, layers.stage_count(), 0, 10).await;
    assert!(matches!(beyond, Err(StoreError::Invalid(ref m)) if m.contains("stages 0 to 4")), "{beyond:?}");
    // A run of one stage has stage 0: every done job.
    let small = "shape boxes=2x2";
    let plain = store.create_run(&spec(small, 1), &jobs(small)).await.unwrap();
    let leases = store.lease(Some(plain), "a", 100, TTL).await.unwrap();
    let counter = census(small).job_counter();
    let done: Vec<Completion> = leases.iter().map(|l| completion(l, "a", counter.count(&l.key).unwrap())).collect();
    store.complete_many(&done).await.unwrap();
    assert_eq!(store.accepted_counts(plain, 0, 0, 100).await.unwrap().len(), leases.len());
    // A staged census's key that is none of its own is refused at creation.
    let mut foreign = layer_jobs.clone();
    foreign[0].key = "2x3/map/7/0".into();
    let refused = store.create_run(&spec(LAYERS, 1), &foreign).await;
    assert!(matches!(refused, Err(StoreError::Invalid(ref m)) if m.contains("2x3/map/7/0")), "{refused:?}");
}

/// A job failed for good holds every later stage: nothing is leased and
/// no identity is kept waiting, until an operator requeues it.
pub(super) async fn a_failed_job_holds_the_stages_after_it_until_a_requeue(store: Arc<dyn JobStore>) {
    let run = store.create_run(&spec(LAYERS, 1), &jobs(LAYERS)).await.unwrap();
    let map = store.lease(Some(run), "a", 100, TTL).await.unwrap();
    report(&store, "a", &map).await;
    let reduces = store.lease(Some(run), "a", 100, TTL).await.unwrap();
    assert_eq!(reduces.len(), 2);
    store.fail(reduces[0].job_id, &reduces[0].token, "a", "its input is gone").await.unwrap();
    report(&store, "a", &reduces[1..]).await;
    assert_eq!(store.progress(run).await.unwrap().failed, 1, "failed for good (max_attempts 1)");
    for worker in ["a", "b"] {
        assert!(store.lease(Some(run), worker, 100, TTL).await.unwrap().is_empty());
        assert!(!store.has_work_for(worker, Some(run)).await.unwrap(), "{worker}: waits for an operator");
    }
    assert_eq!(store.requeue(run, None).await.unwrap(), 1);
    assert!(store.has_work_for("b", Some(run)).await.unwrap());
    let again = store.lease(Some(run), "b", 100, TTL).await.unwrap();
    assert_eq!(keys(&again), keys(&reduces[..1]));
    report(&store, "b", &again).await;
    let next = store.lease(Some(run), "b", 100, TTL).await.unwrap();
    assert_eq!(keys(&next), keys_of_stage(census(LAYERS), &jobs(LAYERS), 2));
}

/// A recount of an accepted job of a run of stages (a layers job whose
/// output was set aside because it failed its digest) reopens it and every
/// job of the stages after it that holds anything of its round: their
/// accepted counts leave the answer, their leases and failures stop
/// counting, the job's stage is open again, and the run finishes exactly
/// once they are counted again. A leased job, or a done one of a run of
/// one stage, without a conflict, has nothing to recount.
pub(super) async fn a_recount_of_an_accepted_job_reopens_the_stages_after_it(store: Arc<dyn JobStore>) {
    let layers = census(LAYERS);
    let layer_jobs = jobs(LAYERS);
    let run = store.create_run(&spec(LAYERS, 1), &layer_jobs).await.unwrap();
    let mut first = Vec::new();
    for _ in 0..3 {
        let stage = store.lease(Some(run), "a", 100, TTL).await.unwrap();
        report(&store, "a", &stage).await;
        first.extend(stage);
    }
    // Stage 3: one job done, one failed for good (max_attempts 1), and a
    // lease of stage 4 can wait for neither.
    let reduces = store.lease(Some(run), "a", 100, TTL).await.unwrap();
    assert_eq!(reduces.len(), 2);
    report(&store, "a", &reduces[..1]).await;
    store.fail(reduces[1].job_id, &reduces[1].token, "a", "an input failed its digest").await.unwrap();
    let before = store.progress(run).await.unwrap();
    assert_eq!((before.done, before.failed), (first.len() as u64 + 1, 1));
    let pending = layer_jobs.iter().filter(|job| layers.stage(&job.key) == Ok(4)).count() as u64;
    assert_eq!(before.pending, pending);

    let map = &first[0];
    assert_eq!(layers.stage(&map.key), Ok(0));
    store.recount(map.job_id).await.unwrap();
    let after = store.progress(run).await.unwrap();
    assert_eq!((after.done, after.failed, after.leased), (0, 0, 0), "{after:?}");
    assert_eq!(after.pending, layer_jobs.len() as u64);
    for stage in 0..4 {
        assert!(store.accepted_counts(run, stage, 0, 100).await.unwrap().is_empty(), "stage {stage}");
    }
    let total = store.total(run).await.unwrap();
    assert!(!total.is_final && total.weighted_sum.to_string() == "0", "{total:?}");
    // The old round's result of a reopened job is refused.
    let stale = store.complete(&completion(&first[1], "a", layer_count(&first[1].key))).await;
    assert!(matches!(stale, Err(StoreError::StaleToken { .. })), "{stale:?}");
    let map_again = store.lease(Some(run), "b", 100, TTL).await.unwrap();
    assert_eq!(keys(&map_again), keys_of_stage(layers, &layer_jobs, 0), "stage 0 is open again");
    let refused = store.recount(map_again[0].job_id).await;
    assert!(matches!(refused, Err(StoreError::Invalid(ref m)) if m.contains("no conflict")), "leased: {refused:?}");
    report(&store, "b", &map_again).await;
    for stage in 1..layers.stage_count() {
        let leases = store.lease(Some(run), "b", 100, TTL).await.unwrap();
        assert_eq!(keys(&leases), keys_of_stage(layers, &layer_jobs, stage), "stage {stage}");
        report(&store, "b", &leases).await;
    }
    let total = store.total(run).await.unwrap();
    assert!(total.is_final);
    assert_eq!(total.answer.unwrap().to_string(), "28200960");
    assert_eq!(total.weighted_sum.to_string(), "28200960");
    // A class job recounted once the run is final: the run is unfinished
    // until it is counted again.
    let class = store.accepted_counts(run, 4, 0, 1).await.unwrap();
    store.recount(class[0].job_id).await.unwrap();
    assert!(!store.total(run).await.unwrap().is_final);
    let again = store.lease(Some(run), "b", 100, TTL).await.unwrap();
    assert_eq!(again.len(), 1);
    report(&store, "b", &again).await;
    assert_eq!(store.total(run).await.unwrap().answer.unwrap().to_string(), "28200960");
    // A run of one stage: without a conflict, nothing to recount.
    let small = "shape boxes=2x2";
    let plain = store.create_run(&spec(small, 1), &jobs(small)).await.unwrap();
    let leases = store.lease(Some(plain), "a", 1, TTL).await.unwrap();
    store
        .complete(&completion(&leases[0], "a", census(small).job_counter().count(&leases[0].key).unwrap()))
        .await
        .unwrap();
    let refused = store.recount(leases[0].job_id).await;
    assert!(matches!(refused, Err(StoreError::Invalid(ref m)) if m.contains("no conflict")), "{refused:?}");
}
