//! [`IdentityStorage`]: credentials and quarantine.

use std::sync::Arc;

use super::{NOW, new_run};
use crate::backend::{Credential, Inserted, NewQuarantine, RefusedReport, Rejection, StorageBackend, TokenFilter};
use crate::{Role, TokenRecord};

/// A hash of a secret (64 hexadecimal digits), made of `digit`.
fn hash(digit: char) -> String {
    std::iter::repeat_n(digit, 64).collect()
}

/// Stores a credential, created at `now`.
async fn insert<B: StorageBackend>(backend: &B, name: &str, role: Role, hash: &str, now: i64) -> Inserted<()> {
    backend.insert_token(&Credential { name, role, hash }, now).await.unwrap()
}

/// Quarantines `worker`, in a transaction of its own; whether it was not already.
async fn quarantine<B: StorageBackend>(backend: &B, worker: &str, reason: &str, since: i64) -> bool {
    let mut tx = backend.begin().await.unwrap();
    let inserted = backend.insert_quarantine(&mut tx, &NewQuarantine { worker, reason, since }).await.unwrap();
    backend.commit(tx).await.unwrap();
    inserted
}

pub(super) async fn a_name_is_stored_once<B: StorageBackend>(backend: Arc<B>) {
    assert_eq!(insert(&*backend, "w", Role::Worker, &hash('a'), NOW).await, Inserted::New(()));
    let again = insert(&*backend, "w", Role::Reader, &hash('b'), NOW).await;
    assert!(matches!(again, Inserted::Duplicate(_)), "{again:?}");
    backend.revoke_token("w", NOW).await.unwrap();
    let revoked = insert(&*backend, "w", Role::Reader, &hash('b'), NOW).await;
    assert!(matches!(revoked, Inserted::Duplicate(_)), "a revoked name too");
    let stored = backend.token_named("w").await.unwrap().unwrap();
    assert_eq!((stored.role.as_str(), stored.hash), ("worker", hash('a')));
}

pub(super) async fn a_credential_is_read_by_its_name<B: StorageBackend>(backend: Arc<B>) {
    insert(&*backend, "op", Role::Operator, &hash('c'), NOW).await;
    let stored = backend.token_named("op").await.unwrap().unwrap();
    assert_eq!((stored.role.as_str(), stored.hash.as_str(), stored.revoked), ("operator", hash('c').as_str(), false));
    assert!(backend.token_named("other").await.unwrap().is_none());
    backend.revoke_token("op", NOW).await.unwrap();
    assert!(backend.token_named("op").await.unwrap().unwrap().revoked);
}

pub(super) async fn a_replaced_credential_has_its_new_role_and_hash<B: StorageBackend>(backend: Arc<B>) {
    insert(&*backend, "w", Role::Worker, &hash('a'), NOW).await;
    insert(&*backend, "x", Role::Worker, &hash('b'), NOW).await;
    backend.replace_token(&Credential { name: "w", role: Role::Reader, hash: &hash('d') }).await.unwrap();
    let stored = backend.token_named("w").await.unwrap().unwrap();
    assert_eq!((stored.role.as_str(), stored.hash), ("reader", hash('d')));
    assert_eq!(backend.token_named("x").await.unwrap().unwrap().hash, hash('b'), "another name's");
}

pub(super) async fn a_credential_is_revoked_once<B: StorageBackend>(backend: Arc<B>) {
    insert(&*backend, "w", Role::Worker, &hash('a'), NOW).await;
    assert!(backend.revoke_token("w", NOW).await.unwrap());
    assert!(!backend.revoke_token("w", NOW + 5).await.unwrap(), "revoked already");
    assert!(!backend.revoke_token("nobody", NOW).await.unwrap());
    let listed = backend.tokens(TokenFilter::All).await.unwrap();
    assert!(listed[0].revoked);
}

pub(super) async fn a_stored_name_exists_revoked_or_not<B: StorageBackend>(backend: Arc<B>) {
    insert(&*backend, "w", Role::Worker, &hash('a'), NOW).await;
    assert!(backend.token_exists("w").await.unwrap());
    backend.revoke_token("w", NOW).await.unwrap();
    assert!(backend.token_exists("w").await.unwrap());
    assert!(!backend.token_exists("x").await.unwrap());
}

pub(super) async fn credentials_are_listed_with_their_standing<B: StorageBackend>(backend: Arc<B>) {
    insert(&*backend, "x", Role::Worker, &hash('b'), NOW + 2000).await;
    insert(&*backend, "w", Role::Worker, &hash('a'), NOW).await;
    insert(&*backend, "op", Role::Operator, &hash('c'), NOW).await;
    backend.revoke_token("op", NOW).await.unwrap();
    quarantine(&*backend, "x", "lies", NOW).await;
    let (run, ids) = new_run(&*backend, 1, 1).await;
    let rejection = Rejection { job: ids[0], run, attempt: 1, worker: "x".into(), count: 1, reason: "wrong".into() };
    let mut tx = backend.begin().await.unwrap();
    backend.insert_rejections(&mut tx, &[rejection.clone(), rejection], NOW).await.unwrap();
    let refused = RefusedReport { worker: "x".into(), job_named: ids[0] + 100, reason: "unread".into() };
    backend.insert_refused_report(&mut tx, &refused, NOW).await.unwrap();
    backend.commit(tx).await.unwrap();
    let record = |name: &str, role, created_unix, revoked, quarantined, rejected| TokenRecord {
        name: name.into(),
        role,
        created_unix,
        revoked,
        quarantined,
        rejected,
    };
    assert_eq!(
        backend.tokens(TokenFilter::All).await.unwrap(),
        [
            record("op", Role::Operator, NOW / 1000, true, false, 0),
            record("w", Role::Worker, NOW / 1000, false, false, 0),
            record("x", Role::Worker, (NOW + 2000) / 1000, false, true, 3),
        ]
    );
    let found = backend.tokens(TokenFilter::Hash(&hash('a'))).await.unwrap();
    assert_eq!(found.iter().map(|token| token.name.as_str()).collect::<Vec<_>>(), ["w"]);
    assert!(backend.tokens(TokenFilter::Hash(&hash('e'))).await.unwrap().is_empty());
}

pub(super) async fn a_quarantine_is_seen_in_a_transaction_or_alone<B: StorageBackend>(backend: Arc<B>) {
    assert!(!backend.is_quarantined(None, "w").await.unwrap());
    let mut tx = backend.begin().await.unwrap();
    backend.insert_quarantine(&mut tx, &NewQuarantine { worker: "w", reason: "r", since: NOW }).await.unwrap();
    assert!(backend.is_quarantined(Some(&mut tx), "w").await.unwrap(), "its own write");
    assert!(!backend.is_quarantined(Some(&mut tx), "x").await.unwrap());
    backend.commit(tx).await.unwrap();
    assert!(backend.is_quarantined(None, "w").await.unwrap());
}

pub(super) async fn the_first_quarantine_is_kept<B: StorageBackend>(backend: Arc<B>) {
    assert!(quarantine(&*backend, "w", "first", NOW).await);
    assert!(!quarantine(&*backend, "w", "second", NOW + 5000).await, "quarantined already");
    let listed = backend.quarantined().await.unwrap();
    let read: Vec<_> = listed.iter().map(|q| (q.worker.as_str(), q.since_unix, q.reason.as_str())).collect();
    assert_eq!(read, [("w", NOW / 1000, "first")]);
}

pub(super) async fn quarantined_identities_are_listed_by_name<B: StorageBackend>(backend: Arc<B>) {
    assert!(backend.quarantined().await.unwrap().is_empty());
    quarantine(&*backend, "y", "too many failures", NOW + 3000).await;
    quarantine(&*backend, "b", "lies", NOW).await;
    let listed = backend.quarantined().await.unwrap();
    let read: Vec<_> = listed.iter().map(|q| (q.worker.as_str(), q.since_unix, q.reason.as_str())).collect();
    assert_eq!(read, [("b", NOW / 1000, "lies"), ("y", (NOW + 3000) / 1000, "too many failures")]);
}

pub(super) async fn a_released_identity_is_no_longer_quarantined<B: StorageBackend>(backend: Arc<B>) {
    quarantine(&*backend, "w", "lies", NOW).await;
    quarantine(&*backend, "x", "lies", NOW).await;
    assert!(backend.release_quarantine("w").await.unwrap());
    assert!(!backend.release_quarantine("w").await.unwrap(), "released already");
    assert!(!backend.is_quarantined(None, "w").await.unwrap());
    assert!(backend.is_quarantined(None, "x").await.unwrap());
    assert!(quarantine(&*backend, "w", "again", NOW).await, "may be quarantined again");
}
