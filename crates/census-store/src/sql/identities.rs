//! Credentials and quarantine in SQL: `api_tokens` (name, role, hash of
//! the secret) and `quarantine`.

use async_trait::async_trait;

use super::results::rejected_of;
use super::{Db, SqlBackend, SqlTx};
use crate::backend::{Credential, IdentityStorage, Inserted, NewQuarantine, StoredToken, TokenFilter};
use crate::{QuarantineEntry, StoreError, TokenRecord};

/// A stored credential, with its quarantine and how many of its results
/// were rejected and reports refused.
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

/// A credential, as replacing it compares it.
#[derive(sqlx::FromRow)]
struct StoredTokenRow {
    role: String,
    hash: String,
    revoked_at: Option<i64>,
}

#[async_trait]
impl IdentityStorage for SqlBackend {
    async fn insert_token(&self, credential: &Credential<'_>, now: i64) -> Result<Inserted<()>, StoreError> {
        let inserted = sqlx::query("INSERT INTO api_tokens (name, role, hash, created_at) VALUES ($1, $2, $3, $4)")
            .bind(credential.name)
            .bind(credential.role.as_str())
            .bind(credential.hash)
            .bind(now)
            .execute(&self.pool)
            .await;
        match inserted {
            Ok(_) => Ok(Inserted::New(())),
            Err(sqlx::Error::Database(error)) if error.is_unique_violation() => {
                Ok(Inserted::Duplicate(error.message().to_string()))
            }
            Err(error) => Err(error).db(),
        }
    }

    async fn token_named(&self, name: &str) -> Result<Option<StoredToken>, StoreError> {
        let row = sqlx::query_as::<_, StoredTokenRow>("SELECT role, hash, revoked_at FROM api_tokens WHERE name = $1")
            .bind(name)
            .fetch_optional(&self.pool)
            .await
            .db()?;
        Ok(row.map(|row| StoredToken { role: row.role, hash: row.hash, revoked: row.revoked_at.is_some() }))
    }

    async fn replace_token(&self, credential: &Credential<'_>) -> Result<(), StoreError> {
        sqlx::query("UPDATE api_tokens SET role = $2, hash = $3 WHERE name = $1")
            .bind(credential.name)
            .bind(credential.role.as_str())
            .bind(credential.hash)
            .execute(&self.pool)
            .await
            .db()?;
        Ok(())
    }

    async fn revoke_token(&self, name: &str, now: i64) -> Result<bool, StoreError> {
        let revoked = sqlx::query("UPDATE api_tokens SET revoked_at = $2 WHERE name = $1 AND revoked_at IS NULL")
            .bind(name)
            .bind(now)
            .execute(&self.pool)
            .await
            .db()?;
        Ok(revoked.rows_affected() > 0)
    }

    async fn token_exists(&self, name: &str) -> Result<bool, StoreError> {
        let exists =
            sqlx::query("SELECT 1 FROM api_tokens WHERE name = $1").bind(name).fetch_optional(&self.pool).await.db()?;
        Ok(exists.is_some())
    }

    async fn tokens(&self, filter: TokenFilter<'_>) -> Result<Vec<TokenRecord>, StoreError> {
        let condition = match filter {
            TokenFilter::All => "1 = 1",
            TokenFilter::Hash(_) => "t.hash = $1",
        };
        let sql = format!(
            "SELECT t.name, t.role, t.created_at, t.revoked_at, q.worker AS quarantined, {} AS rejected
             FROM api_tokens t LEFT JOIN quarantine q ON q.worker = t.name
             WHERE {condition} ORDER BY t.name",
            rejected_of("t.name")
        );
        let mut query = sqlx::query_as::<_, TokenRow>(&sql);
        if let TokenFilter::Hash(hash) = filter {
            query = query.bind(hash);
        }
        let rows = query.fetch_all(&self.pool).await.db()?;
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

    async fn is_quarantined(&self, tx: Option<&mut SqlTx>, worker: &str) -> Result<bool, StoreError> {
        let query = sqlx::query("SELECT 1 FROM quarantine WHERE worker = $1").bind(worker);
        let row = match tx {
            Some(tx) => query.fetch_optional(&mut **tx).await.db()?,
            None => query.fetch_optional(&self.pool).await.db()?,
        };
        Ok(row.is_some())
    }

    async fn insert_quarantine(&self, tx: &mut SqlTx, quarantine: &NewQuarantine<'_>) -> Result<bool, StoreError> {
        let inserted = sqlx::query(
            "INSERT INTO quarantine (worker, quarantined_at, reason) VALUES ($1, $2, $3) ON CONFLICT (worker) DO NOTHING",
        )
        .bind(quarantine.worker)
        .bind(quarantine.since)
        .bind(quarantine.reason)
        .execute(&mut **tx)
        .await.db()?;
        Ok(inserted.rows_affected() > 0)
    }

    async fn quarantined(&self) -> Result<Vec<QuarantineEntry>, StoreError> {
        let rows =
            sqlx::query_as::<_, QuarantineRow>("SELECT worker, quarantined_at, reason FROM quarantine ORDER BY worker")
                .fetch_all(&self.pool)
                .await
                .db()?;
        Ok(rows
            .into_iter()
            .map(|row| QuarantineEntry {
                worker: row.worker,
                since_unix: row.quarantined_at / 1000,
                reason: row.reason,
            })
            .collect())
    }

    async fn release_quarantine(&self, worker: &str) -> Result<bool, StoreError> {
        let released =
            sqlx::query("DELETE FROM quarantine WHERE worker = $1").bind(worker).execute(&self.pool).await.db()?;
        Ok(released.rows_affected() > 0)
    }
}
