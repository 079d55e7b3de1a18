//! [`Transactions`]: what a transaction keeps and undoes, identities'
//! locks, health, closing.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::{LeaseJobs, NOW, lease, lease_of, new_run, spec};
use crate::backend::{Inserted, NewRun, StorageBackend};

pub(super) async fn a_transaction_sees_its_writes_and_a_dropped_one_leaves_nothing<B: StorageBackend>(backend: Arc<B>) {
    let spec = spec(1, 1);
    let row = NewRun { spec: &spec, created_at: NOW, class_power: 1, max_lease_ms: None };
    let mut tx = backend.begin().await.unwrap();
    let Inserted::New(run) = backend.insert_run(&mut tx, &row).await.unwrap() else { panic!("a new run") };
    assert!(backend.run_state(Some(&mut tx), run).await.unwrap().is_some(), "its own write");
    drop(tx);
    assert!(backend.runs(None).await.unwrap().is_empty(), "nothing of a dropped transaction");
    assert_eq!(backend.find_run(&spec).await.unwrap(), None);
}

pub(super) async fn a_committed_transaction_is_seen_by_every_later_operation<B: StorageBackend>(backend: Arc<B>) {
    let spec = spec(1, 1);
    let row = NewRun { spec: &spec, created_at: NOW, class_power: 1, max_lease_ms: None };
    let mut tx = backend.begin().await.unwrap();
    let Inserted::New(run) = backend.insert_run(&mut tx, &row).await.unwrap() else { panic!("a new run") };
    backend.commit(tx).await.unwrap();
    assert_eq!(backend.find_run(&spec).await.unwrap(), Some(run));
    assert_eq!(backend.runs(None).await.unwrap().len(), 1);
    let mut tx = backend.begin().await.unwrap();
    assert!(backend.run_state(Some(&mut tx), run).await.unwrap().is_some(), "in a later transaction");
}

pub(super) async fn a_rolled_back_transaction_leaves_nothing_and_holds_no_row<B: StorageBackend>(backend: Arc<B>) {
    let (run, ids) = new_run(&*backend, 1, 2).await;
    let mut tx = backend.begin().await.unwrap();
    let taken = backend.lease_jobs(&mut tx, &LeaseJobs { wanted: 2, ..lease_of(run, "w") }).await.unwrap();
    assert_eq!(taken.len(), 2);
    backend.rollback(tx).await.unwrap();
    let again = lease(&*backend, &LeaseJobs { wanted: 2, ..lease_of(run, "x") }).await;
    let read: Vec<_> = again.iter().map(|job| (job.id, job.attempt)).collect();
    assert_eq!(read, [(ids[0], 1), (ids[1], 1)], "neither leased nor held by the transaction undone");
}

/// A second transaction that locks an identity the first holds goes on
/// only once the first has ended (whatever the scheduler does meanwhile:
/// the wait only gives a wrong backend its chance to go first).
pub(super) async fn one_transaction_at_a_time_holds_an_identity<B: StorageBackend>(backend: Arc<B>) {
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut first = backend.begin().await.unwrap();
    // A lock the transaction holds may be taken again.
    backend.lock_identities(&mut first, &["w", "x", "w"]).await.unwrap();
    let second = tokio::spawn({
        let (backend, order) = (backend.clone(), order.clone());
        async move {
            let mut tx = backend.begin().await.unwrap();
            backend.lock_identities(&mut tx, &["w"]).await.unwrap();
            order.lock().unwrap().push("the second holds w");
            backend.commit(tx).await.unwrap();
        }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    order.lock().unwrap().push("the first ends");
    backend.commit(first).await.unwrap();
    second.await.unwrap();
    assert_eq!(*order.lock().unwrap(), ["the first ends", "the second holds w"]);
}

pub(super) async fn ping_answers_while_a_transaction_is_open<B: StorageBackend>(backend: Arc<B>) {
    let tx = backend.begin().await.unwrap();
    backend.ping().await.unwrap();
    drop(tx);
    backend.ping().await.unwrap();
}

pub(super) async fn after_close_every_call_fails<B: StorageBackend>(backend: Arc<B>) {
    backend.ping().await.unwrap();
    backend.close().await;
    assert!(backend.ping().await.is_err());
    assert!(backend.runs(None).await.is_err());
    assert!(backend.begin().await.is_err());
}
