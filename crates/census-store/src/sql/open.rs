//! Opening an SQL store at its [`DatabaseLocation`]: checking an SQLite
//! file and its directory, connecting, and migrating.

use std::path::Path;
use std::sync::Once;
use std::time::Duration;

use sqlx::AnyPool;
use sqlx::any::AnyPoolOptions;

use super::SqlBackend;
use super::dialect::Dialect;
use super::location::{DatabaseLocation, PostgresUrl, sqlite_url};
use crate::StoreError;

static POSTGRES_MIGRATIONS: sqlx::migrate::Migrator = sqlx::migrate!("../../migrations/postgres");
static SQLITE_MIGRATIONS: sqlx::migrate::Migrator = sqlx::migrate!("../../migrations/sqlite");

/// The first bytes of every SQLite database file.
const SQLITE_HEADER: &[u8; 16] = b"SQLite format 3\0";

/// Refuses at once a file that exists but is not an SQLite database,
/// instead of letting the pool retry opening it until it times out.
fn check_sqlite_file(path: &Path) -> Result<(), String> {
    use std::io::Read;
    let shown = path.display();
    let Ok(mut file) = std::fs::File::open(path) else { return Ok(()) };
    let mut header = [0u8; 16];
    let read = file.read(&mut header).map_err(|e| format!("cannot read {shown}: {e}"))?;
    if read == 0 {
        return Ok(());
    }
    if read < header.len() || &header != SQLITE_HEADER {
        return Err(format!(
            "{shown} is not an SQLite database (it does not start with the SQLite header); give a new file name or a census database"
        ));
    }
    let length = file.metadata().map(|m| m.len()).unwrap_or(0);
    if length < 512 || length % 512 != 0 {
        return Err(format!(
            "{shown} is a damaged SQLite database: {length} bytes is not a whole number of pages (truncated?)"
        ));
    }
    Ok(())
}

/// How long the first connection to a Postgres server may take.
const POSTGRES_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// One connection to the Postgres server at `url`, closed at once: `Err`
/// holds the server's (or the network's) own reason, and whether trying
/// again later may help (a refused connection or a server still starting
/// may; a missing database or a wrong password will not).
async fn probe_postgres(url: &str) -> Result<(), (String, bool)> {
    use sqlx::Connection;
    match tokio::time::timeout(POSTGRES_CONNECT_TIMEOUT, sqlx::AnyConnection::connect(url)).await {
        Ok(Ok(connection)) => {
            let _ = connection.close().await;
            Ok(())
        }
        Ok(Err(error)) => {
            let reason = error.to_string();
            Err((reason, super::error::database_error(error).is_retryable()))
        }
        Err(_) => Err((format!("no answer within {} s", POSTGRES_CONNECT_TIMEOUT.as_secs()), true)),
    }
}

impl SqlBackend {
    /// Opens the store at `url`, read as a [`DatabaseLocation`], with the
    /// default pool: for tests and tools that hold a location as text.
    pub async fn connect(url: &str) -> Result<SqlBackend, StoreError> {
        SqlBackend::open(&url.parse()?, None).await
    }

    /// Opens the store at `location` (an SQLite file is created if it does
    /// not exist) and migrates it, with a pool of `connections`
    /// ([`DatabaseLocation::pool_size`] says which numbers a location
    /// takes, and the default). SQLite runs whose sums migration 0006
    /// marked inexact are summed again.
    pub async fn open(location: &DatabaseLocation, connections: Option<u32>) -> Result<SqlBackend, StoreError> {
        let connections = location.pool_size(connections)?;
        static DRIVERS: Once = Once::new();
        DRIVERS.call_once(sqlx::any::install_default_drivers);
        let (dialect, pool, health_url) = match location {
            DatabaseLocation::Postgres(url) => {
                (Dialect::Postgres, open_postgres(location, url, connections).await?, url.with_password().to_string())
            }
            DatabaseLocation::Sqlite(path) => {
                let health_url = sqlite_url(path, "rw").map_err(|reason| bad_location(location, reason))?;
                (Dialect::Sqlite, open_sqlite(location, path).await?, health_url)
            }
        };
        // Health asks on a connection of its own: a pool busy with
        // requests is not a database that does not answer.
        let health = AnyPoolOptions::new()
            .max_connections(1)
            .min_connections(0)
            .acquire_timeout(Duration::from_secs(5))
            .connect_lazy(&health_url)
            .map_err(|e| failed(location, &e))?;
        let backend = SqlBackend { pool, health, dialect, connections };
        backend.rebuild_inexact_sums().await?;
        Ok(backend)
    }
}

/// `location` cannot be opened, for `reason`: retryable, unless the caller
/// knows better. The URL's password never reaches an error, nor a log line
/// made of one (sqlx's own messages may quote the URL).
fn failed(location: &DatabaseLocation, reason: &dyn std::fmt::Display) -> StoreError {
    StoreError::Connect { url: location.to_string(), reason: hide_password(location, reason), retryable: true }
}

fn hide_password(location: &DatabaseLocation, reason: &dyn std::fmt::Display) -> String {
    match location {
        DatabaseLocation::Postgres(url) => reason.to_string().replace(url.with_password(), &url.to_string()),
        DatabaseLocation::Sqlite(_) => reason.to_string(),
    }
}

/// `location` is no database census can use, for `reason`.
fn bad_location(location: &DatabaseLocation, reason: String) -> StoreError {
    StoreError::BadLocation { url: location.to_string(), reason }
}

/// The pool of a Postgres store, after one direct connection that says
/// why a server cannot be used (connection refused, no such database,
/// password authentication failed), where the pool would retry until it
/// says only "pool timed out"; then its migrations.
async fn open_postgres(
    location: &DatabaseLocation,
    url: &PostgresUrl,
    connections: u32,
) -> Result<AnyPool, StoreError> {
    probe_postgres(url.with_password()).await.map_err(|(reason, retryable)| StoreError::Connect {
        url: location.to_string(),
        reason: hide_password(location, &reason),
        retryable,
    })?;
    let pool = AnyPoolOptions::new()
        .max_connections(connections)
        // Fail fast while the database is down: callers get a
        // retryable UNAVAILABLE and health turns NOT_SERVING.
        .acquire_timeout(Duration::from_secs(5))
        // The queue's statements are estimated far above the
        // JIT threshold (the planner cannot know that a LIMIT
        // stops the scan early), and compiling them took up to
        // 90 ms a lease: a third of the server's time at 1,000
        // workers (BENCHMARKS.md, "A run's end").
        .after_connect(|connection, _| {
            Box::pin(async move {
                sqlx::Executor::execute(&mut *connection, "SET jit = off").await?;
                Ok(())
            })
        })
        .connect(url.with_password())
        .await
        .map_err(|e| failed(location, &e))?;
    POSTGRES_MIGRATIONS.run(&pool).await.map_err(|e| failed(location, &format!("migrations failed: {e}")))?;
    Ok(pool)
}

/// The pool of an SQLite store: its directory and file checked first, then
/// migrated on one direct connection (a damaged file fails there at once
/// with SQLite's own message).
async fn open_sqlite(location: &DatabaseLocation, path: &Path) -> Result<AnyPool, StoreError> {
    // sqlx would say only "(code: 14) unable to open database file".
    check_directory(path).map_err(|reason| StoreError::Connect {
        url: location.to_string(),
        reason,
        retryable: false,
    })?;
    check_sqlite_file(path).map_err(|reason| bad_location(location, reason))?;
    let url = sqlite_url(path, "rwc").map_err(|reason| bad_location(location, reason))?;
    migrate_sqlite(&url).await.map_err(|e| failed(location, &e))?;
    // One connection: SQLite has one writer at a time, and queuing
    // here avoids busy errors on upgrading a read to a write.
    AnyPoolOptions::new()
        .max_connections(1)
        .acquire_timeout(Duration::from_secs(300))
        .after_connect(|connection, _| {
            Box::pin(async move {
                for pragma in [
                    "PRAGMA journal_mode = WAL",
                    "PRAGMA synchronous = NORMAL",
                    "PRAGMA foreign_keys = ON",
                    "PRAGMA busy_timeout = 30000",
                ] {
                    sqlx::query(pragma).execute(&mut *connection).await?;
                }
                Ok(())
            })
        })
        .connect(&url)
        .await
        .map_err(|e| failed(location, &e))
}

/// Runs the SQLite migrations on a connection of their own, then checks
/// that no row points at a row that does not exist.
async fn migrate_sqlite(url: &str) -> Result<(), String> {
    use sqlx::Connection;
    let mut probe = sqlx::AnyConnection::connect(url).await.map_err(|e| e.to_string())?;
    sqlx::query("PRAGMA schema_version").execute(&mut probe).await.map_err(|e| e.to_string())?;
    // Migrations that rebuild a table (0003) need foreign keys off, which
    // SQLite allows only outside a transaction; the keys are checked once
    // the migrations are in.
    sqlx::query("PRAGMA foreign_keys = OFF").execute(&mut probe).await.map_err(|e| e.to_string())?;
    SQLITE_MIGRATIONS.run(&mut probe).await.map_err(|e| format!("migrations failed: {e}"))?;
    let dangling = sqlx::query("PRAGMA foreign_key_check").fetch_all(&mut probe).await.map_err(|e| e.to_string())?;
    if !dangling.is_empty() {
        return Err(format!("{} rows point at rows that do not exist", dangling.len()));
    }
    let _ = probe.close().await;
    Ok(())
}

/// Refuses an SQLite file whose directory does not exist (or is no
/// directory), naming the directory.
fn check_directory(path: &Path) -> Result<(), String> {
    let Some(directory) = path.parent().filter(|parent| !parent.as_os_str().is_empty()) else { return Ok(()) };
    match std::fs::metadata(directory) {
        Ok(metadata) if metadata.is_dir() => Ok(()),
        Ok(_) => Err(format!("{} is not a directory", directory.display())),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            Err(format!("the directory {} does not exist", directory.display()))
        }
        Err(error) => Err(format!("cannot read the directory {}: {error}", directory.display())),
    }
}
#[cfg(test)]
mod tests {
    use super::check_directory;
    use crate::SqlBackend;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres_connections_never_compile_statements() {
        let url = tokio::task::spawn_blocking(census_testpg::fresh_database).await.unwrap();
        let backend = SqlBackend::connect(&url).await.unwrap();
        let jit: String = sqlx::query_scalar("SHOW jit").fetch_one(&backend.pool).await.unwrap();
        assert_eq!(jit, "off");
    }

    /// A missing directory is named as such, not as a file SQLite cannot open.
    #[test]
    fn a_missing_directory_is_named() {
        let path = std::path::Path::new("/nonexistent-dir/inner/census.db");
        assert_eq!(check_directory(path).unwrap_err(), "the directory /nonexistent-dir/inner does not exist");
        assert_eq!(check_directory(std::path::Path::new("census.db")), Ok(()));
        assert_eq!(check_directory(&std::env::temp_dir().join("census.db")), Ok(()));
        let file = std::env::current_exe().unwrap();
        assert!(check_directory(&file.join("census.db")).unwrap_err().ends_with("is not a directory"));
    }
}
