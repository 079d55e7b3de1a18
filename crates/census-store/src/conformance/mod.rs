//! The conformance suite of a store: each named operation of a backend on
//! its own, and every property a store must have, as public functions any
//! backend runs.
//!
//! A new backend implements [`StorageBackend`] (its named operations, each
//! with its rule in [`crate::backend`]) and calls [`exercise_backend`] with
//! a function that opens a new, empty instance of it, with this crate's
//! `conformance` feature. The suite checks each operation's rules on the
//! backend alone ([`operations`], as River's driver tests check a driver),
//! then runs the store's rules ([`Store`]) over it and checks the store's
//! properties. SQLite and Postgres do so in `tests/conformance.rs`:
//!
//! ```no_run
//! # async fn demo() {
//! use std::sync::atomic::{AtomicUsize, Ordering};
//! static NEXT: AtomicUsize = AtomicUsize::new(0);
//! census_store::conformance::exercise_backend(|| async {
//!     // A new, empty database for every check.
//!     let path = std::env::temp_dir().join(format!("conformance-{}.db", NEXT.fetch_add(1, Ordering::Relaxed)));
//!     census_store::SqlBackend::connect(path.to_str().unwrap()).await.unwrap()
//! })
//! .await;
//! # }
//! ```
//!
//! A store that implements [`JobStore`] some other way runs [`exercise`]
//! on stores it opens with the configuration each property asks for.
//!
//! Each check and property gets a backend or store of its own, empty
//! (a property's made with the [`StoreConfig`] it needs); they run one
//! after the other, and a failing one panics after its name is printed.
//! The properties count real censuses with their own counters
//! ([`fixtures`]), and assert published totals exactly (N0 of the 9x9
//! count, the 2x4 shape's total).

mod costs;
pub mod fixtures;
pub mod operations;
mod queue;
mod shares;
mod staged;
mod store;
mod streamed;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use crate::backend::StorageBackend;
use crate::{JobStore, Store, StoreConfig};

/// A property's run on a store.
type Check = fn(Arc<dyn JobStore>) -> Pin<Box<dyn Future<Output = ()> + Send>>;

/// One property of the suite.
#[derive(Clone, Copy)]
pub struct Property {
    /// The name of the function that checks it.
    pub name: &'static str,
    /// The configuration of the store it runs on.
    pub config: fn() -> StoreConfig,
    check: Check,
}

impl Property {
    /// Checks the property on `store` (empty, configured with
    /// [`Property::config`]); panics if it does not hold.
    pub async fn check(&self, store: Arc<dyn JobStore>) {
        (self.check)(store).await
    }
}

/// A lease cap of 50 leases an identity.
fn capped() -> StoreConfig {
    StoreConfig { max_leases_per_worker: 50, ..StoreConfig::default() }
}

/// A job fails for good at its first failure.
fn one_failure() -> StoreConfig {
    StoreConfig { max_attempts: 1, fail_quorum: 1, ..StoreConfig::default() }
}

/// The properties, each with the name of its function and the
/// configuration it needs (the default unless named).
macro_rules! properties {
    ($($module:ident::$name:ident $(with $config:ident)?),* $(,)?) => {
        /// Every property of the suite, in the order [`exercise`] checks them.
        pub fn properties() -> Vec<Property> {
            vec![$(Property {
                name: stringify!($name),
                config: properties!(@config $($config)?),
                check: |store| Box::pin($module::$name(store)),
            }),*]
        }
    };
    (@config) => { StoreConfig::default };
    (@config $config:ident) => { $config };
}

properties!(
    store::idempotent_run_creation,
    store::concurrent_lessees_drain_the_run_exactly,
    store::an_expired_lease_is_leased_again_and_the_old_attempt_is_refused,
    store::heartbeats_keep_leases,
    store::duplicates_change_nothing_and_a_final_total_cannot_be_reopened,
    store::disagreeing_identities_open_a_conflict_that_a_recount_resolves,
    store::two_disagreeing_identities_are_a_conflict_the_coordinators_count_decides,
    store::a_failing_job_fails_for_good_only_after_distinct_identities,
    store::one_identity_failing_every_job_cannot_stall_a_run,
    store::quarantine_recounts_every_result_of_the_identity,
    store::quarantine_discards_the_identitys_votes,
    store::reports_of_many_callers_at_once_are_each_answered_as_their_own,
    store::the_lease_cap_holds_under_concurrent_calls with capped,
    store::a_worker_whose_leases_expired_is_under_its_cap_again with capped,
    store::redundant_runs_need_distinct_agreeing_workers,
    store::progress_lists_the_busiest_workers_and_counts_them_all,
    store::bad_input_gets_a_typed_error,
    store::a_forged_job_list_never_folds,
    store::progress_reports_the_speed_of_many_recent_results,
    store::counts_beyond_64_bits_are_exact,
    store::the_weighted_sum_so_far_follows_the_classes,
    streamed::a_streamed_run_is_stored_whole_and_counts_exactly,
    streamed::a_class_in_many_chunks_has_all_its_jobs,
    streamed::a_key_repeated_in_a_later_chunk_is_refused_and_nothing_is_stored,
    streamed::jobs_are_stored_in_the_order_given_and_any_order_folds,
    staged::a_stage_is_leased_once_every_job_below_it_is_done,
    staged::a_failed_job_holds_the_stages_after_it_until_a_requeue with one_failure,
    staged::a_recount_of_an_accepted_job_reopens_the_stages_after_it with one_failure,
    costs::progress_weighs_jobs_by_their_cost with one_failure,
    queue::jobs_put_back_are_leased_before_the_fresh_jobs_behind_them,
    queue::an_expired_lease_one_identity_cannot_take_goes_to_the_next,
    queue::a_job_a_full_scan_passed_goes_to_the_next_identity,
    shares::a_hoarders_expired_leases_go_first_to_who_waits_and_in_shares,
    shares::a_contended_lease_lives_one_ttl_however_heartbeated,
    shares::a_contended_lease_within_the_least_allowance_lives_while_heartbeated,
    shares::reports_of_leases_not_held_past_a_bound_are_refused_and_quarantine with capped,
    shares::made_up_job_ids_past_a_bound_are_refused_and_quarantine with capped,
);

/// Checks every property of the suite, each on a new empty store that
/// `make_store` opens with the property's configuration, one after the
/// other. Panics at the first property that does not hold, naming it.
pub async fn exercise<Make, Opened>(make_store: Make)
where
    Make: Fn(StoreConfig) -> Opened,
    Opened: Future<Output = Arc<dyn JobStore>>,
{
    for property in properties() {
        eprintln!("conformance: {}", property.name);
        let began = std::time::Instant::now();
        let store = make_store((property.config)()).await;
        property.check(store.clone()).await;
        store.close().await;
        eprintln!("conformance: {} held ({:.1} s)", property.name, began.elapsed().as_secs_f64());
    }
}

/// Each operation of backends that `make_backend` opens, each new and
/// empty ([`operations::exercise`]), then [`exercise`] on [`Store`]s over
/// them.
pub async fn exercise_backend<Make, Opened, B>(make_backend: Make)
where
    Make: Fn() -> Opened,
    Opened: Future<Output = B>,
    B: StorageBackend,
{
    operations::exercise(&make_backend).await;
    exercise(|config| {
        let backend = make_backend();
        async move {
            let store = Store::open(backend.await, config).await.expect("a store opens over an empty backend");
            Arc::new(store) as Arc<dyn JobStore>
        }
    })
    .await;
}
