//! Credentials and quarantine. The store keeps each token's name, role and
//! hash; it never sees a secret, and it never decides who may call what
//! (that is the coordinator's job).

use super::queue::HeldBy;
use super::{SqlStore, now_ms};
use crate::{QuarantineEntry, Role, StoreError, TokenRecord, check_identity};

/// A stored credential, with its quarantine and how many of its results were rejected.
#[derive(sqlx::FromRow)]
struct TokenRow {
    name: String,
    role: String,
    created_at: i64,
    revoked_at: Option<i64>,
    quarantined: Option<String>,
    rejected: i64,
}

/// A quarantined identity.
#[derive(sqlx::FromRow)]
struct QuarantineRow {
    worker: String,
    quarantined_at: i64,
    reason: String,
}

/// A credential, as [`SqlStore::upsert_token`] compares it.
#[derive(sqlx::FromRow)]
struct StoredToken {
    role: String,
    hash: String,
    revoked_at: Option<i64>,
}

fn check_hash(hash: &str) -> Result<(), StoreError> {
    if hash.len() != 64 || !hash.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(StoreError::Invalid("a token hash is 64 hexadecimal digits".into()));
    }
    Ok(())
}

impl SqlStore {
    pub(crate) async fn insert_token(&self, name: &str, role: Role, hash: &str) -> Result<(), StoreError> {
        check_identity(name)?;
        check_hash(hash)?;
        let inserted = sqlx::query("INSERT INTO api_tokens (name, role, hash, created_at) VALUES ($1, $2, $3, $4)")
            .bind(name)
            .bind(role.as_str())
            .bind(hash)
            .bind(now_ms())
            .execute(&self.pool)
            .await;
        match inserted {
            Ok(_) => {
                tracing::info!(name, %role, "token created");
                Ok(())
            }
            Err(sqlx::Error::Database(error)) if error.is_unique_violation() => Err(StoreError::Invalid(format!(
                "a token named {name:?} exists already; revoke it or choose another name"
            ))),
            Err(error) => Err(error.into()),
        }
    }

    pub(crate) async fn upsert_token(&self, name: &str, role: Role, hash: &str) -> Result<(), StoreError> {
        check_identity(name)?;
        check_hash(hash)?;
        let existing =
            sqlx::query_as::<_, StoredToken>("SELECT role, hash, revoked_at FROM api_tokens WHERE name = $1")
                .bind(name)
                .fetch_optional(&self.pool)
                .await?;
        let Some(row) = existing else {
            return self.insert_token(name, role, hash).await;
        };
        if row.revoked_at.is_some() {
            tracing::warn!(name, "the token was revoked and stays revoked; give the secret another name");
            return Ok(());
        }
        if row.role != role.as_str() || row.hash != hash {
            sqlx::query("UPDATE api_tokens SET role = $2, hash = $3 WHERE name = $1")
                .bind(name)
                .bind(role.as_str())
                .bind(hash)
                .execute(&self.pool)
                .await?;
            tracing::info!(name, %role, "token replaced from its secret file");
        }
        Ok(())
    }

    pub(crate) async fn revoke(&self, name: &str) -> Result<bool, StoreError> {
        let revoked = sqlx::query("UPDATE api_tokens SET revoked_at = $2 WHERE name = $1 AND revoked_at IS NULL")
            .bind(name)
            .bind(now_ms())
            .execute(&self.pool)
            .await?;
        if revoked.rows_affected() > 0 {
            tracing::warn!(name, "token revoked");
            return Ok(true);
        }
        let exists =
            sqlx::query("SELECT 1 FROM api_tokens WHERE name = $1").bind(name).fetch_optional(&self.pool).await?;
        Ok(exists.is_some())
    }

    pub(crate) async fn tokens_where(
        &self,
        condition: &str,
        hash: Option<&str>,
    ) -> Result<Vec<TokenRecord>, StoreError> {
        let sql = format!(
            "SELECT t.name, t.role, t.created_at, t.revoked_at, q.worker AS quarantined,
                    (SELECT COUNT(*) FROM rejections r WHERE r.worker = t.name) AS rejected
             FROM api_tokens t LEFT JOIN quarantine q ON q.worker = t.name
             WHERE {condition} ORDER BY t.name"
        );
        let mut query = sqlx::query_as::<_, TokenRow>(&sql);
        if let Some(hash) = hash {
            query = query.bind(hash);
        }
        let rows = query.fetch_all(&self.pool).await?;
        rows.into_iter()
            .map(|row| {
                Ok(TokenRecord {
                    name: row.name,
                    role: row.role.parse()?,
                    created_unix: row.created_at / 1000,
                    revoked: row.revoked_at.is_some(),
                    quarantined: row.quarantined.is_some(),
                    rejected: row.rejected as u64,
                })
            })
            .collect()
    }

    /// Takes the lock of each identity, in name order (see
    /// `Backend::identity_lock`), before any row: every transaction that
    /// takes identity locks takes them first, so they add no deadlock of
    /// their own (a quarantine of another identity inside a batch is the
    /// exception; Postgres breaks such a rare cycle and the call is retried).
    pub(super) async fn lock_identities<'a>(
        &self,
        tx: &mut sqlx::Transaction<'_, sqlx::Any>,
        workers: impl IntoIterator<Item = &'a str>,
    ) -> Result<(), StoreError> {
        let Some(lock) = self.backend.identity_lock() else { return Ok(()) };
        let workers: std::collections::BTreeSet<&str> = workers.into_iter().collect();
        for worker in workers {
            sqlx::query(lock).bind(worker).execute(&mut **tx).await?;
        }
        Ok(())
    }

    /// Quarantines `worker` inside the caller's transaction: its leases are
    /// released at once, and every job whose current result it gave goes
    /// back to the queue, in every run, finished or not (a finished run is
    /// unfinished again until others have counted those jobs). Under the
    /// identity's lock, so no result of it commits unseen meanwhile.
    pub(super) async fn quarantine_in(
        &self,
        tx: &mut sqlx::Transaction<'_, sqlx::Any>,
        worker: &str,
        reason: &str,
        now: i64,
    ) -> Result<(), StoreError> {
        self.lock_identities(tx, [worker]).await?;
        let inserted = sqlx::query(
            "INSERT INTO quarantine (worker, quarantined_at, reason) VALUES ($1, $2, $3) ON CONFLICT (worker) DO NOTHING",
        )
        .bind(worker)
        .bind(now)
        .bind(reason)
        .execute(&mut **tx)
        .await?;
        if inserted.rows_affected() > 0 {
            tracing::error!(worker, %reason, "identity quarantined: its calls are refused until an operator releases it");
        }
        self.release_leases(tx, HeldBy::Identity(worker), now).await?;
        self.reopen_results_of(tx, worker).await?;
        Ok(())
    }

    /// Reopens what every quarantined identity counted, as a quarantine
    /// does: a database written before quarantines reopened results may
    /// hold a finished run that includes them. Cheap when nothing is left.
    pub(super) async fn reopen_quarantined_results(&self) -> Result<(), StoreError> {
        let workers: Vec<String> =
            sqlx::query_scalar("SELECT worker FROM quarantine ORDER BY worker").fetch_all(&self.pool).await?;
        for worker in workers {
            let mut tx = self.pool.begin().await?;
            self.lock_identities(&mut tx, [worker.as_str()]).await?;
            self.reopen_results_of(&mut tx, &worker).await?;
            tx.commit().await?;
        }
        Ok(())
    }

    pub(crate) async fn quarantine_list(&self) -> Result<Vec<QuarantineEntry>, StoreError> {
        let rows =
            sqlx::query_as::<_, QuarantineRow>("SELECT worker, quarantined_at, reason FROM quarantine ORDER BY worker")
                .fetch_all(&self.pool)
                .await?;
        Ok(rows
            .into_iter()
            .map(|row| QuarantineEntry {
                worker: row.worker,
                since_unix: row.quarantined_at / 1000,
                reason: row.reason,
            })
            .collect())
    }
}
