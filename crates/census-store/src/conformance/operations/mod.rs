//! Each named operation of [`StorageBackend`] on its own, as River's
//! driver tests check a driver: one check a rule of an operation (its
//! documentation in [`crate::backend`]), on a new, empty backend, through
//! the trait alone, with rows the check writes with the backend's own
//! operations. A check's name is the rule; [`checks`] says which
//! operation each checks, and the crate's tests see that every operation
//! of the trait has one.
//!
//! The store's rules are not used here: what these checks ask of a
//! backend is what the module's rules say, whatever the store would do
//! with it. (The store's properties over the backend are the rest of the
//! suite.)

mod answers;
mod identities;
mod queue;
mod remedies;
mod results;
mod runs;
mod transactions;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use crate::backend::{
    Inserted, JobChange, JobState, LeaseJobs, LeaseRecord, LeasedJob, NewClass, NewJob, NewResult, NewRun,
    ResultOutcome, StorageBackend, Waiting,
};
use crate::conformance::fixtures;
use crate::{JobId, RunId, RunSpec};

/// A check's run on a backend.
type Check<B> = fn(Arc<B>) -> Pin<Box<dyn Future<Output = ()>>>;

/// One check of an operation's rule.
pub struct OperationCheck<B> {
    /// The part of the seam (`RunStorage`, ...) and the operation.
    pub part: &'static str,
    pub operation: &'static str,
    /// The name of the function that checks it: the rule.
    pub rule: &'static str,
    check: Check<B>,
}

impl<B> OperationCheck<B> {
    /// Checks the rule on `backend` (new and empty); panics if it does not hold.
    pub async fn check(&self, backend: Arc<B>) {
        (self.check)(backend).await
    }
}

/// The checks, each with its operation.
macro_rules! checks {
    ($($part:ident::$operation:ident => $module:ident::$rule:ident),* $(,)?) => {
        /// Every check of an operation, in the order [`exercise`] runs them.
        pub fn checks<B: StorageBackend>() -> Vec<OperationCheck<B>> {
            vec![$(OperationCheck {
                part: stringify!($part),
                operation: stringify!($operation),
                rule: stringify!($rule),
                check: |backend| Box::pin($module::$rule(backend)),
            }),*]
        }
    };
}

checks!(
    Transactions::begin => transactions::a_transaction_sees_its_writes_and_a_dropped_one_leaves_nothing,
    Transactions::commit => transactions::a_committed_transaction_is_seen_by_every_later_operation,
    Transactions::rollback => transactions::a_rolled_back_transaction_leaves_nothing_and_holds_no_row,
    Transactions::lock_identities => transactions::one_transaction_at_a_time_holds_an_identity,
    Transactions::ping => transactions::ping_answers_while_a_transaction_is_open,
    Transactions::close => transactions::after_close_every_call_fails,
    RunStorage::find_run => runs::a_run_is_found_by_its_whole_spec,
    RunStorage::resume_run => runs::only_a_cancelled_run_is_resumed,
    RunStorage::insert_run => runs::a_new_run_has_nothing_yet_and_a_second_of_its_spec_is_a_duplicate,
    RunStorage::insert_classes => runs::classes_are_stored_with_nothing_counted,
    RunStorage::insert_jobs => runs::jobs_are_pending_and_numbered_in_the_order_given,
    RunStorage::insert_jobs => runs::a_key_the_run_has_is_a_duplicate,
    RunStorage::insert_jobs => runs::a_job_of_a_class_the_run_does_not_have_is_refused,
    RunStorage::set_class_jobs_total => runs::a_class_takes_its_job_count,
    RunStorage::set_run_jobs_total => runs::a_run_takes_its_job_count_and_cost,
    RunStorage::refresh_statistics => runs::statistics_are_refreshed_once_a_run_is_committed,
    RunStorage::run_outline => runs::an_outline_is_the_census_and_its_classes,
    RunStorage::runs => runs::runs_are_listed_oldest_first,
    RunStorage::run_state => runs::a_runs_state_is_read_in_a_transaction_or_alone,
    RunStorage::job_censuses => runs::each_known_job_has_its_runs_census,
    RunStorage::mark_cancelled => runs::a_run_is_cancelled_once,
    RunStorage::set_priority => runs::a_run_takes_its_priority,
    QueueStorage::open_runs => queue::open_runs_are_unfinished_and_uncancelled_by_priority,
    QueueStorage::held_leases => queue::held_leases_are_the_unexpired_ones,
    QueueStorage::leases_counted => queue::each_identitys_leased_jobs_are_counted_whatever_moves_them,
    QueueStorage::lease_jobs => queue::pending_jobs_are_leased_in_id_order_from_the_front,
    QueueStorage::lease_jobs => queue::expired_leases_are_leased_again_oldest_first,
    QueueStorage::lease_jobs => queue::a_job_is_leased_only_to_an_identity_it_is_open_to,
    QueueStorage::lease_jobs => queue::only_the_stage_asked_for_is_leased,
    QueueStorage::has_expired_leases => queue::an_expired_lease_is_there_until_taken,
    QueueStorage::first_pending_below => queue::the_first_pending_job_below_is_found,
    QueueStorage::has_job_open_to => queue::a_job_open_to_an_identity_is_found_by_its_state,
    QueueStorage::lowest_stages => queue::the_lowest_stage_of_each_state_is_read,
    QueueStorage::extend_leases => queue::only_held_leases_are_extended,
    QueueStorage::extend_leases => queue::no_lease_outlives_its_lifetime_or_its_run,
    QueueStorage::release_leases => queue::released_leases_are_pending_again,
    QueueStorage::leases_of => queue::leases_are_read_as_their_rows_hold_them,
    ResultStorage::load_jobs => results::jobs_are_loaded_with_their_runs,
    ResultStorage::load_votes => results::votes_are_loaded_in_the_order_recorded,
    ResultStorage::insert_results => results::results_are_appended_exactly,
    ResultStorage::mark_decided => results::a_decided_job_takes_its_state_and_its_lease_is_retired,
    ResultStorage::flag_conflicts => results::a_flagged_job_has_a_conflict,
    ResultStorage::add_to_classes => results::counts_are_added_to_classes_and_their_runs_exactly,
    ResultStorage::add_to_worker_stats => results::an_identitys_statistics_add_up,
    ResultStorage::add_to_run => results::a_runs_counters_add_up,
    ResultStorage::insert_rejections => results::rejections_are_appended,
    ResultStorage::insert_refused_report => results::refused_reports_are_appended_against_their_sender,
    ResultStorage::rejections_of => results::an_identitys_rejections_are_counted_in_every_run,
    AnswerStorage::fold_page => answers::a_fold_reads_done_jobs_a_page_at_a_time,
    AnswerStorage::fold_page => answers::a_recheck_reads_the_accepted_results_of_the_current_rounds,
    AnswerStorage::class_sums_page => answers::class_sums_are_read_a_page_at_a_time,
    AnswerStorage::weighted_sum_so_far => answers::the_weighted_sum_so_far_is_read_in_a_transaction_or_alone,
    AnswerStorage::write_answer => answers::a_written_answer_finishes_its_run,
    AnswerStorage::leased_jobs => answers::each_runs_leased_jobs_are_counted_whatever_moves_them,
    AnswerStorage::rejections_in => answers::a_runs_rejections_are_counted,
    AnswerStorage::recent_results => answers::recent_results_are_the_newest_since,
    AnswerStorage::worker_stats => answers::identities_are_listed_by_their_jobs,
    AnswerStorage::workers_of => answers::a_runs_identities_are_counted,
    AnswerStorage::class_totals => answers::class_totals_are_read_a_page_at_a_time,
    AnswerStorage::accepted_counts => answers::a_stages_accepted_counts_are_read_a_page_at_a_time,
    RemedyStorage::conflicts_waiting => remedies::conflicts_nobody_counts_are_found_once_unchanged_long_enough,
    RemedyStorage::jobs_after_stage => remedies::a_runs_later_stages_with_anything_of_their_round_are_found,
    RemedyStorage::lock_jobs_to_reopen => remedies::jobs_to_reopen_are_read_with_their_counts,
    RemedyStorage::take_out_of_classes => remedies::counts_taken_out_of_classes_leave_them_as_before,
    RemedyStorage::take_out_of_run => remedies::a_run_reopened_is_unfinished_again,
    RemedyStorage::start_new_round => remedies::a_new_round_clears_the_job_and_keeps_its_results,
    RemedyStorage::jobs_counted_by => remedies::only_results_of_the_current_round_that_count_are_found,
    RemedyStorage::lock_flagged_job => remedies::a_flagged_job_is_read_with_its_conflict,
    RemedyStorage::lock_failed_jobs => remedies::a_runs_failed_jobs_are_read_by_id,
    RemedyStorage::job_state => remedies::a_jobs_state_is_read_within_its_run,
    RemedyStorage::requeue_failed_job => remedies::a_requeued_job_is_pending_in_a_new_epoch,
    RemedyStorage::add_failed_jobs => remedies::failed_jobs_are_added_and_taken_out,
    RemedyStorage::lock_failing_job => remedies::a_failing_job_is_read_with_its_failures,
    RemedyStorage::insert_failure => remedies::a_failure_is_appended_in_its_epoch,
    RemedyStorage::failing_identities => remedies::distinct_identities_are_counted_in_an_epoch,
    RemedyStorage::set_failures => remedies::a_failure_tally_sets_the_state_and_retires_the_lease,
    RemedyStorage::failures_of => remedies::an_identitys_failures_are_counted_in_every_run,
    IdentityStorage::insert_token => identities::a_name_is_stored_once,
    IdentityStorage::token_named => identities::a_credential_is_read_by_its_name,
    IdentityStorage::replace_token => identities::a_replaced_credential_has_its_new_role_and_hash,
    IdentityStorage::revoke_token => identities::a_credential_is_revoked_once,
    IdentityStorage::token_exists => identities::a_stored_name_exists_revoked_or_not,
    IdentityStorage::tokens => identities::credentials_are_listed_with_their_standing,
    IdentityStorage::is_quarantined => identities::a_quarantine_is_seen_in_a_transaction_or_alone,
    IdentityStorage::insert_quarantine => identities::the_first_quarantine_is_kept,
    IdentityStorage::quarantined => identities::quarantined_identities_are_listed_by_name,
    IdentityStorage::release_quarantine => identities::a_released_identity_is_no_longer_quarantined,
);

/// Runs every check on a new, empty backend that `make_backend` opens,
/// one after the other, closing it after. Panics at the first rule that
/// does not hold, naming its operation.
pub async fn exercise<Make, Opened, B>(make_backend: &Make)
where
    Make: Fn() -> Opened,
    Opened: Future<Output = B>,
    B: StorageBackend,
{
    for check in checks::<B>() {
        eprintln!("conformance: {}::{}: {}", check.part, check.operation, check.rule);
        let backend = Arc::new(make_backend().await);
        check.check(backend.clone()).await;
        backend.close().await;
    }
}

/// The time the checks say it is (Unix ms); a backend never reads a clock.
const NOW: i64 = 1_700_000_000_000;
/// How long the checks' leases live.
const TTL: i64 = 60_000;
/// A count and a weight past 64 bits: kept exactly.
const BIG: u128 = u128::MAX - 7;

/// A run's spec; checks tell their runs apart by `n` (their counter version).
fn spec(n: u32, redundancy: u32) -> RunSpec {
    let census = fixtures::census(fixtures::SMALL);
    RunSpec { census, counter_version: format!("check/{n}"), redundancy }
}

/// The classes of [`new_run`]'s runs: `a` (weight 2) and `b` (weight 3).
const CLASSES: [NewClass<'static>; 2] = [
    NewClass { id: 0, label: "a", weight: 2, jobs_total: 1 },
    NewClass { id: 1, label: "b", weight: 3, jobs_total: 1 },
];

/// The row of a run of `spec`: class power 1, no lease lifetime of its own.
fn run_row(spec: &RunSpec) -> NewRun<'_> {
    NewRun { spec, created_at: NOW, class_power: 1, max_lease_ms: None }
}

/// The run `row` with `classes` and `jobs`, written with the backend's own
/// operations and committed; the ids of its jobs, in the order given.
async fn insert_run<B: StorageBackend>(
    backend: &B,
    row: NewRun<'_>,
    classes: &[NewClass<'_>],
    jobs: &[NewJob<'_>],
) -> (RunId, Vec<JobId>) {
    let mut tx = backend.begin().await.unwrap();
    let Inserted::New(run) = backend.insert_run(&mut tx, &row).await.unwrap() else { panic!("a new run") };
    backend.insert_classes(&mut tx, run, classes).await.unwrap();
    assert_eq!(backend.insert_jobs(&mut tx, run, jobs, NOW).await.unwrap(), Inserted::New(()));
    let totals: Vec<(i64, i64)> = classes
        .iter()
        .map(|class| (class.id, jobs.iter().filter(|job| job.class == class.id).count() as i64))
        .filter(|&(_, jobs)| jobs > 0)
        .collect();
    backend.set_class_jobs_total(&mut tx, run, &totals).await.unwrap();
    let cost = jobs.iter().map(|job| job.cost).sum();
    backend.set_run_jobs_total(&mut tx, run, jobs.len() as i64, cost).await.unwrap();
    backend.commit(tx).await.unwrap();
    (run, pending_ids(backend, run).await)
}

/// `count` jobs `k0`, `k1`, ... of classes `a` and `b` in turn, each of
/// cost 1, of `stage(i)`.
fn jobs_of(keys: &[String], stage: impl Fn(usize) -> Option<u32>) -> Vec<NewJob<'_>> {
    keys.iter().enumerate().map(|(i, key)| NewJob { class: i as i64 % 2, key, stage: stage(i), cost: 1 }).collect()
}

/// The keys `k0`, `k1`, ...
fn keys(count: usize) -> Vec<String> {
    (0..count).map(|i| format!("k{i}")).collect()
}

/// A run of `spec(n, 1)`, class power 1, with `jobs` jobs `k0`, `k1`, ...
/// of classes `a` and `b` in turn, each of cost 1.
async fn new_run<B: StorageBackend>(backend: &B, n: u32, jobs: usize) -> (RunId, Vec<JobId>) {
    let spec = spec(n, 1);
    let keys = keys(jobs);
    insert_run(backend, run_row(&spec), &CLASSES, &jobs_of(&keys, |_| None)).await
}

/// The ids of the run's pending jobs, in id order: leased in a
/// transaction that is then dropped, so nothing changes.
async fn pending_ids<B: StorageBackend>(backend: &B, run: RunId) -> Vec<JobId> {
    let mut tx = backend.begin().await.unwrap();
    let lease = LeaseJobs { wanted: i64::from(u32::MAX), ..lease_of(run, "peek") };
    let ids = backend.lease_jobs(&mut tx, &lease).await.unwrap().into_iter().map(|job| job.id).collect();
    backend.rollback(tx).await.unwrap();
    ids
}

/// A lease of the run's pending jobs by `worker` at [`NOW`], for [`TTL`],
/// one job wanted, from the first: change what a check needs.
fn lease_of(run: RunId, worker: &str) -> LeaseJobs<'_> {
    LeaseJobs {
        run,
        waiting: Waiting::Pending,
        wanted: 1,
        worker,
        now: NOW,
        expires_at: NOW + TTL,
        token_salt: "0123456789abcdef0123456789abcdef",
        max_failures: 5,
        stage: None,
        from: 0,
        own_expired_by: None,
    }
}

/// Leases as `lease` says, in a transaction of its own.
async fn lease<B: StorageBackend>(backend: &B, lease: &LeaseJobs<'_>) -> Vec<LeasedJob> {
    let mut tx = backend.begin().await.unwrap();
    let leased = backend.lease_jobs(&mut tx, lease).await.unwrap();
    backend.commit(tx).await.unwrap();
    leased
}

/// The job's lease as its row holds it.
async fn row_of<B: StorageBackend>(backend: &B, job: JobId) -> LeaseRecord {
    backend.leases_of(&[job]).await.unwrap().pop().expect("a known job")
}

/// Gives each job its new state, count and votes, in a transaction of its own.
async fn decide<B: StorageBackend>(backend: &B, changes: &[(JobId, JobState, Option<u128>, i64)]) {
    let jobs = changes
        .iter()
        .map(|&(job, state, count, votes_added)| (job, JobChange { state, count, votes_added }))
        .collect();
    let mut tx = backend.begin().await.unwrap();
    backend.mark_decided(&mut tx, &jobs, NOW).await.unwrap();
    backend.commit(tx).await.unwrap();
}

/// A result of `job` of `run` by `worker`, in `round`.
fn result(job: JobId, run: RunId, worker: &str, count: u128, outcome: ResultOutcome, round: i64) -> NewResult {
    NewResult {
        job,
        run,
        attempt: 1,
        round,
        worker: worker.into(),
        count,
        elapsed_ms: 1.5,
        counter_version: "check/1".into(),
        outcome,
        cost: 1,
    }
}

/// Appends the results at `now`, in a transaction of their own.
async fn record<B: StorageBackend>(backend: &B, results: &[NewResult], now: i64) {
    let mut tx = backend.begin().await.unwrap();
    backend.insert_results(&mut tx, results, now).await.unwrap();
    backend.commit(tx).await.unwrap();
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use crate::SqlBackend;

    /// Every operation of the seam's traits has a check of its own: an
    /// operation added to `backend.rs` fails here until it has one.
    #[test]
    fn every_operation_of_the_seam_has_a_check() {
        let source = include_str!("../../backend.rs");
        let operations: BTreeSet<&str> = source
            .lines()
            .filter_map(|line| line.trim_start().strip_prefix("async fn "))
            .map(|rest| rest.split(['(', '<']).next().unwrap())
            .collect();
        assert!(operations.len() > 70, "{operations:?}");
        let checked: BTreeSet<&str> = super::checks::<SqlBackend>().iter().map(|check| check.operation).collect();
        let unchecked: Vec<_> = operations.difference(&checked).collect();
        assert!(unchecked.is_empty(), "operations without a check: {unchecked:?}");
        let unknown: Vec<_> = checked.difference(&operations).collect();
        assert!(unknown.is_empty(), "checks of no operation: {unknown:?}");
    }
}
