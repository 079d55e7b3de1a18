//! sqlx's errors as the store's: each is classified once, here, into a
//! [`DatabaseError`] (its kind and message), so no sqlx type crosses the
//! crate's API. `.db()` converts a sqlx result where a statement runs.

use crate::{DatabaseError, DatabaseErrorKind, StoreError};

/// A sqlx result as the store's ([`classify`]).
pub(super) trait Db<T> {
    fn db(self) -> Result<T, StoreError>;
}

impl<T> Db<T> for Result<T, sqlx::Error> {
    fn db(self) -> Result<T, StoreError> {
        self.map_err(database_error)
    }
}

/// The store's error for a sqlx error.
pub(super) fn database_error(error: sqlx::Error) -> StoreError {
    StoreError::Database(DatabaseError::new(classify(&error), describe(&error)))
}

/// The driver's words, with Postgres's SQLSTATE (SQLite's code is in its
/// message already).
fn describe(error: &sqlx::Error) -> String {
    match error {
        sqlx::Error::Database(database) if database.try_downcast_ref::<sqlx::sqlite::SqliteError>().is_none() => {
            match database.code() {
                Some(code) => format!("{error} (SQLSTATE {code})"),
                None => error.to_string(),
            }
        }
        _ => error.to_string(),
    }
}

/// What kind of failure a sqlx error is.
fn classify(error: &sqlx::Error) -> DatabaseErrorKind {
    match error {
        sqlx::Error::Io(io) => match io.kind() {
            std::io::ErrorKind::StorageFull => DatabaseErrorKind::StorageFull,
            std::io::ErrorKind::ReadOnlyFilesystem => DatabaseErrorKind::ReadOnly,
            _ => DatabaseErrorKind::Unreachable,
        },
        sqlx::Error::Tls(_) | sqlx::Error::Protocol(_) | sqlx::Error::PoolClosed | sqlx::Error::WorkerCrashed => {
            DatabaseErrorKind::Unreachable
        }
        sqlx::Error::PoolTimedOut => DatabaseErrorKind::Busy,
        sqlx::Error::Database(database) => match database.try_downcast_ref::<sqlx::sqlite::SqliteError>() {
            Some(_) => database.code().and_then(|code| code.parse().ok()).map_or(DatabaseErrorKind::Other, sqlite_kind),
            None => database.code().map_or(DatabaseErrorKind::Other, |code| sqlstate_kind(&code)),
        },
        _ => DatabaseErrorKind::Other,
    }
}

/// The kind of a Postgres error by its SQLSTATE
/// (<https://www.postgresql.org/docs/current/errcodes-appendix.html>).
fn sqlstate_kind(code: &str) -> DatabaseErrorKind {
    match code {
        // Disk full (53100); out of memory or connections (the rest of 53).
        "53100" => DatabaseErrorKind::StorageFull,
        _ if code.starts_with("53") => DatabaseErrorKind::Busy,
        // Connection exceptions; the server shutting down or not yet up.
        _ if code.starts_with("08") || code.starts_with("57P") => DatabaseErrorKind::Unreachable,
        // A transaction rolled back (serialization failure, deadlock); a
        // statement cancelled.
        _ if code.starts_with("40") || code.starts_with("57") => DatabaseErrorKind::Busy,
        // A read-only transaction: a standby, or default_transaction_read_only.
        "25006" => DatabaseErrorKind::ReadOnly,
        // io_error.
        "58030" => DatabaseErrorKind::StorageFailed,
        // Integrity constraints; RAISE EXCEPTION, as the append-only triggers do.
        _ if code.starts_with("23") || code == "P0001" => DatabaseErrorKind::Constraint,
        _ => DatabaseErrorKind::Other,
    }
}

/// The kind of an SQLite error by its (extended) result code, whose low
/// byte is the primary code (<https://sqlite.org/rescode.html>).
fn sqlite_kind(code: i32) -> DatabaseErrorKind {
    match code & 0xff {
        // SQLITE_BUSY, SQLITE_LOCKED.
        5 | 6 => DatabaseErrorKind::Busy,
        // SQLITE_READONLY.
        8 => DatabaseErrorKind::ReadOnly,
        // SQLITE_IOERR.
        10 => DatabaseErrorKind::StorageFailed,
        // SQLITE_FULL.
        13 => DatabaseErrorKind::StorageFull,
        // SQLITE_CONSTRAINT, a trigger's RAISE(ABORT) included.
        19 => DatabaseErrorKind::Constraint,
        _ => DatabaseErrorKind::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SqlBackend;
    use crate::backend::Transactions;
    use DatabaseErrorKind::*;

    #[test]
    fn postgres_errors_are_classified_by_their_sqlstate() {
        for (code, kind) in [
            ("53100", StorageFull),
            ("53200", Busy),
            ("53300", Busy),
            ("08006", Unreachable),
            ("57P01", Unreachable),
            ("57P03", Unreachable),
            ("40001", Busy),
            ("40P01", Busy),
            ("57014", Busy),
            ("25006", ReadOnly),
            ("23505", Constraint),
            ("23503", Constraint),
            ("P0001", Constraint),
            ("42P01", Other),
            ("22003", Other),
        ] {
            assert_eq!(sqlstate_kind(code), kind, "{code}");
        }
    }

    #[test]
    fn sqlite_errors_are_classified_by_their_primary_code() {
        for (code, kind) in [
            (5, Busy),
            (517, Busy), // SQLITE_BUSY_SNAPSHOT
            (6, Busy),
            (8, ReadOnly),
            (1032, ReadOnly), // SQLITE_READONLY_DBMOVED
            (13, StorageFull),
            (19, Constraint),
            (1811, Constraint), // SQLITE_CONSTRAINT_TRIGGER
            (2067, Constraint), // SQLITE_CONSTRAINT_UNIQUE
            (1, Other),
            (11, Other), // SQLITE_CORRUPT
        ] {
            assert_eq!(sqlite_kind(code), kind, "{code}");
        }
    }

    #[test]
    fn errors_of_the_connection_may_pass() {
        assert_eq!(classify(&sqlx::Error::PoolTimedOut), Busy);
        assert_eq!(classify(&sqlx::Error::PoolClosed), Unreachable);
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        assert_eq!(classify(&sqlx::Error::Io(refused)), Unreachable);
        assert_eq!(classify(&sqlx::Error::Io(std::io::ErrorKind::StorageFull.into())), StorageFull);
        assert_eq!(classify(&sqlx::Error::RowNotFound), Other);
        assert!(database_error(sqlx::Error::PoolTimedOut).is_retryable());
        assert!(!database_error(sqlx::Error::RowNotFound).is_retryable());
    }

    /// What `sql` fails with on `connection`.
    async fn failure(connection: &mut sqlx::AnyConnection, sql: &str) -> DatabaseError {
        match sqlx::query(sql).execute(connection).await.db() {
            Err(StoreError::Database(error)) => error,
            other => panic!("{sql}: {other:?}"),
        }
    }

    /// A run with one job, its result, a rejection and a refused report, and a token.
    const ROWS: [&str; 7] = [
        "INSERT INTO runs (census, counter_version, jobs_total, jobs_remaining, created_at) VALUES ('c', 'v', 1, 1, 1)",
        "INSERT INTO classes (run_id, class_id, label, weight, jobs_total) VALUES (1, 0, 'a', '1', 1)",
        "INSERT INTO jobs (run_id, class_id, key, created_at, updated_at) VALUES (1, 0, 'k', 1, 1)",
        "INSERT INTO results (job_id, run_id, attempt, worker, count, elapsed_ms, counter_version, outcome, finished_at)
         VALUES (1, 1, 1, 'w', '5', 0.5, 'v', 'accepted', 1)",
        "INSERT INTO rejections (job_id, run_id, attempt, worker, count, reason, rejected_at)
         VALUES (1, 1, 1, 'w', '5', 'wrong', 1)",
        "INSERT INTO refused_reports (worker, job_named, reason, refused_at) VALUES ('w', 9, 'unread', 1)",
        "INSERT INTO api_tokens (name, role, hash, created_at)
         VALUES ('w', 'worker', '0000000000000000000000000000000000000000000000000000000000000000', 1)",
    ];

    /// A change the schema refuses (the append-only triggers, a unique
    /// key) and a write to a read-only database are classified so, on a
    /// real database; `read_only` makes the connection's writes fail.
    async fn refusals_are_classified(backend: SqlBackend, read_only: &str, writable: &str) {
        let mut connection = backend.pool.acquire().await.unwrap();
        for row in ROWS {
            sqlx::query(row).execute(&mut *connection).await.unwrap();
        }
        for refused in [
            "UPDATE results SET worker = 'x'",
            "DELETE FROM results",
            "UPDATE rejections SET reason = 'x'",
            "DELETE FROM rejections",
            "UPDATE refused_reports SET reason = 'x'",
            "DELETE FROM refused_reports",
            ROWS[6],
        ] {
            let error = failure(&mut connection, refused).await;
            assert_eq!(error.kind(), Constraint, "{refused}: {error}");
        }
        sqlx::query(read_only).execute(&mut *connection).await.unwrap();
        let error = failure(&mut connection, "UPDATE runs SET priority = 1").await;
        assert_eq!(error.kind(), ReadOnly, "{error}");
        sqlx::query(writable).execute(&mut *connection).await.unwrap();
        drop(connection);
        backend.close().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sqlite_refusals_are_classified() {
        let path = std::env::temp_dir().join(format!("census-store-errors-{}.db", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let backend = SqlBackend::connect(path.to_str().unwrap()).await.unwrap();
        refusals_are_classified(backend, "PRAGMA query_only = ON", "PRAGMA query_only = OFF").await;
        // A second writer that does not wait finds the file busy.
        use sqlx::Connection;
        let url = format!("sqlite://{}", path.display());
        let mut holder = sqlx::SqliteConnection::connect(&url).await.unwrap();
        let mut other = sqlx::SqliteConnection::connect(&url).await.unwrap();
        sqlx::query("PRAGMA busy_timeout = 0").execute(&mut other).await.unwrap();
        sqlx::query("BEGIN IMMEDIATE").execute(&mut holder).await.unwrap();
        let busy = match sqlx::query("UPDATE runs SET priority = 2").execute(&mut other).await.db() {
            Err(StoreError::Database(error)) => error,
            other => panic!("{other:?}"),
        };
        assert_eq!(busy.kind(), Busy, "{busy}");
        assert!(busy.is_retryable());
        let _ = std::fs::remove_file(&path);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres_refusals_are_classified() {
        let url = tokio::task::spawn_blocking(census_testpg::fresh_database).await.unwrap();
        let backend = SqlBackend::connect(&url).await.unwrap();
        refusals_are_classified(
            backend,
            "SET default_transaction_read_only = on",
            "SET default_transaction_read_only = off",
        )
        .await;
        // A statement cancelled by its timeout; a connection the server ends.
        use sqlx::Connection;
        let mut connection = sqlx::AnyConnection::connect(&url).await.unwrap();
        sqlx::query("SET statement_timeout = 1").execute(&mut connection).await.unwrap();
        let cancelled = failure(&mut connection, "SELECT pg_sleep(1)").await;
        assert_eq!(cancelled.kind(), Busy, "{cancelled}");
        assert!(cancelled.message().contains("SQLSTATE 57014"), "{cancelled}");
        let ended =
            match sqlx::query("SELECT pg_terminate_backend(pg_backend_pid())").execute(&mut connection).await.db() {
                Err(StoreError::Database(error)) => error,
                other => panic!("{other:?}"),
            };
        assert_eq!(ended.kind(), Unreachable, "{ended}");
    }
}
