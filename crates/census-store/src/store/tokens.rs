//! Credentials: what a name and a hash may be, and a revoked name staying
//! revoked. The store never sees a secret, and it never decides who may
//! call what (that is the coordinator's job).

use super::{Store, now_ms};
use crate::backend::{Credential, Inserted, StorageBackend};
use crate::{Role, StoreError, check_identity};

fn check_hash(hash: &str) -> Result<(), StoreError> {
    if hash.len() != 64 || !hash.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(StoreError::Invalid("a token hash is 64 hexadecimal digits".into()));
    }
    Ok(())
}

impl<B: StorageBackend> Store<B> {
    pub(super) async fn insert_token(&self, name: &str, role: Role, hash: &str) -> Result<(), StoreError> {
        check_identity(name)?;
        check_hash(hash)?;
        match self.backend.insert_token(&Credential { name, role, hash }, now_ms()).await? {
            Inserted::New(()) => {
                tracing::info!(name, %role, "token created");
                Ok(())
            }
            Inserted::Duplicate(_) => Err(StoreError::Invalid(format!(
                "a token named {name:?} exists already; revoke it or choose another name"
            ))),
        }
    }

    pub(super) async fn upsert_token(&self, name: &str, role: Role, hash: &str) -> Result<(), StoreError> {
        check_identity(name)?;
        check_hash(hash)?;
        let Some(stored) = self.backend.token_named(name).await? else {
            return self.insert_token(name, role, hash).await;
        };
        if stored.revoked {
            tracing::warn!(name, "the token was revoked and stays revoked; give the secret another name");
            return Ok(());
        }
        if stored.role != role.as_str() || stored.hash != hash {
            self.backend.replace_token(&Credential { name, role, hash }).await?;
            tracing::info!(name, %role, "token replaced from its secret file");
        }
        Ok(())
    }

    pub(super) async fn revoke(&self, name: &str) -> Result<bool, StoreError> {
        if self.backend.revoke_token(name, now_ms()).await? {
            tracing::warn!(name, "token revoked");
            return Ok(true);
        }
        self.backend.token_exists(name).await
    }
}
