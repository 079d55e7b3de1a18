//! Opening an SQL store: reading its URL (Postgres or an SQLite file),
//! checking an SQLite file, connecting, and migrating.

use std::sync::Once;
use std::time::Duration;

use sqlx::any::AnyPoolOptions;

use super::SqlBackend;
use super::dialect::Dialect;
use crate::StoreError;

static POSTGRES_MIGRATIONS: sqlx::migrate::Migrator = sqlx::migrate!("../../migrations/postgres");
static SQLITE_MIGRATIONS: sqlx::migrate::Migrator = sqlx::migrate!("../../migrations/sqlite");

/// Where a store lives, read from its URL before anything is opened.
#[derive(Debug, PartialEq, Eq)]
enum Location<'a> {
    Postgres,
    Sqlite(&'a str),
}

impl Location<'_> {
    /// The SQLite file's path (empty for Postgres).
    fn path(&self) -> &str {
        match self {
            Location::Postgres => "",
            Location::Sqlite(path) => path,
        }
    }
}

impl<'a> Location<'a> {
    /// `postgres://...`/`postgresql://...` (checked by the driver's own
    /// parser), `sqlite://PATH`, `sqlite:PATH` or a bare path.
    fn parse(url: &'a str) -> Result<Location<'a>, String> {
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            url.parse::<sqlx::postgres::PgConnectOptions>().map_err(|e| format!("not a valid Postgres URL: {e}"))?;
            return Ok(Location::Postgres);
        }
        // Another engine's URL (mysql://, mariadb://, ...) would otherwise be
        // taken for a file name and fail later as "unable to open database file".
        if let Some((scheme, _)) = url.split_once("://")
            && scheme != "sqlite"
            && !scheme.is_empty()
            && scheme.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
        {
            return Err(format!(
                "{scheme}:// is not a database census can use: give a postgres:// URL, or an SQLite file (a path or sqlite://PATH)"
            ));
        }
        let path = url.strip_prefix("sqlite://").or_else(|| url.strip_prefix("sqlite:")).unwrap_or(url);
        if path.is_empty() {
            return Err("no file name given".into());
        }
        // The path goes into an sqlx URL: these would change its meaning.
        if let Some(bad) = path.chars().find(|c| matches!(c, '?' | '#' | '\0')) {
            return Err(format!("an SQLite file name cannot hold {bad:?}"));
        }
        Ok(Location::Sqlite(path))
    }
}

/// The first bytes of every SQLite database file.
const SQLITE_HEADER: &[u8; 16] = b"SQLite format 3\0";

/// Refuses at once a file that exists but is not an SQLite database,
/// instead of letting the pool retry opening it until it times out.
fn check_sqlite_file(path: &str) -> Result<(), String> {
    use std::io::Read;
    let Ok(mut file) = std::fs::File::open(path) else { return Ok(()) };
    let mut header = [0u8; 16];
    let read = file.read(&mut header).map_err(|e| format!("cannot read {path}: {e}"))?;
    if read == 0 {
        return Ok(());
    }
    if read < header.len() || &header != SQLITE_HEADER {
        return Err(format!(
            "{path} is not an SQLite database (it does not start with the SQLite header); give a new file name or a census database"
        ));
    }
    let length = file.metadata().map(|m| m.len()).unwrap_or(0);
    if length < 512 || length % 512 != 0 {
        return Err(format!(
            "{path} is a damaged SQLite database: {length} bytes is not a whole number of pages (truncated?)"
        ));
    }
    Ok(())
}

/// The connections of a pool to a Postgres server unless told otherwise
/// ([`pool_size`]).
pub const POSTGRES_CONNECTIONS: u32 = 16;

/// The most connections one pool opens: far beyond what one process can
/// use, and within what a Postgres server can be configured to accept.
pub const MAX_CONNECTIONS: u32 = 1000;

/// The connections of the pool that a store at `url` opens: `asked` if
/// given, else [`POSTGRES_CONNECTIONS`] to a Postgres server. An SQLite
/// file has one (one writer at a time: a second connection would only wait
/// for the first, or fail busy), so any other number is refused, as is a
/// number outside 1 to [`MAX_CONNECTIONS`], or a location that is no
/// database census can use.
pub fn pool_size(url: &str, asked: Option<u32>) -> Result<u32, StoreError> {
    let location =
        Location::parse(url).map_err(|reason| StoreError::BadLocation { url: crate::redact_url(url), reason })?;
    match (location, asked) {
        (_, Some(n)) if !(1..=MAX_CONNECTIONS).contains(&n) => {
            Err(StoreError::Invalid(format!("a pool has 1 to {MAX_CONNECTIONS} connections, not {n}")))
        }
        (Location::Postgres, asked) => Ok(asked.unwrap_or(POSTGRES_CONNECTIONS)),
        (Location::Sqlite(_), None | Some(1)) => Ok(1),
        (Location::Sqlite(_), Some(n)) => Err(StoreError::Invalid(format!(
            "an SQLite file has one connection (one writer at a time), not {n}: give more to a Postgres store"
        ))),
    }
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
    /// Opens the store at `url` (see [`crate::connect`]) and migrates it,
    /// with the default pool ([`pool_size`]).
    pub async fn connect(url: &str) -> Result<SqlBackend, StoreError> {
        SqlBackend::connect_with(url, None).await
    }

    /// [`SqlBackend::connect`] with a pool of `connections` ([`pool_size`]
    /// says which numbers a location takes, and the default). SQLite runs
    /// whose sums migration 0006 marked inexact are summed again.
    pub async fn connect_with(url: &str, connections: Option<u32>) -> Result<SqlBackend, StoreError> {
        let connections = pool_size(url, connections)?;
        static DRIVERS: Once = Once::new();
        DRIVERS.call_once(sqlx::any::install_default_drivers);
        // The URL's password never reaches an error, nor a log line made of one
        // (sqlx's own messages may quote the URL too).
        let shown = crate::redact_url(url);
        let failed = |error: &dyn std::fmt::Display| StoreError::Connect {
            url: shown.clone(),
            reason: error.to_string().replace(url, &shown),
            retryable: true,
        };
        let bad_location = |reason: String| StoreError::BadLocation { url: shown.clone(), reason };

        let (dialect, pool) = match Location::parse(url).map_err(bad_location)? {
            Location::Postgres => {
                // One direct connection first: a server that cannot be used
                // says why (connection refused, no such database, password
                // authentication failed), where the pool would retry until
                // it says only "pool timed out".
                probe_postgres(url).await.map_err(|(reason, retryable)| StoreError::Connect {
                    url: shown.clone(),
                    reason: reason.replace(url, &shown),
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
                    .connect(url)
                    .await
                    .map_err(|e| failed(&e))?;
                (Dialect::Postgres, pool)
            }
            Location::Sqlite(path) => {
                check_sqlite_file(path).map_err(bad_location)?;
                {
                    // One direct connection first: a damaged file fails here at
                    // once with SQLite's own message.
                    use sqlx::Connection;
                    let mut probe = sqlx::AnyConnection::connect(&format!("sqlite://{path}?mode=rwc"))
                        .await
                        .map_err(|e| failed(&e))?;
                    sqlx::query("PRAGMA schema_version").execute(&mut probe).await.map_err(|e| failed(&e))?;
                    // Migrations that rebuild a table (0003) need foreign keys
                    // off, which SQLite allows only outside a transaction; the
                    // keys are checked once the migrations are in.
                    sqlx::query("PRAGMA foreign_keys = OFF").execute(&mut probe).await.map_err(|e| failed(&e))?;
                    SQLITE_MIGRATIONS.run(&mut probe).await.map_err(|e| failed(&format!("migrations failed: {e}")))?;
                    let dangling =
                        sqlx::query("PRAGMA foreign_key_check").fetch_all(&mut probe).await.map_err(|e| failed(&e))?;
                    if !dangling.is_empty() {
                        return Err(failed(&format!("{} rows point at rows that do not exist", dangling.len())));
                    }
                    let _ = probe.close().await;
                }
                // One connection: SQLite has one writer at a time, and queuing
                // here avoids busy errors on upgrading a read to a write.
                let pool = AnyPoolOptions::new()
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
                    .connect(&format!("sqlite://{path}?mode=rwc"))
                    .await
                    .map_err(|e| failed(&e))?;
                (Dialect::Sqlite, pool)
            }
        };
        if dialect == Dialect::Postgres {
            POSTGRES_MIGRATIONS.run(&pool).await.map_err(|e| failed(&format!("migrations failed: {e}")))?;
        }
        // Health asks on a connection of its own: a pool busy with
        // requests is not a database that does not answer.
        let health_url = match dialect {
            Dialect::Postgres => url.to_string(),
            Dialect::Sqlite => format!("sqlite://{}?mode=rw", Location::parse(url).map_err(|e| failed(&e))?.path()),
        };
        let health = AnyPoolOptions::new()
            .max_connections(1)
            .min_connections(0)
            .acquire_timeout(Duration::from_secs(5))
            .connect_lazy(&health_url)
            .map_err(|e| failed(&e))?;
        let backend = SqlBackend { pool, health, dialect, connections };
        backend.rebuild_inexact_sums().await?;
        Ok(backend)
    }
}

#[cfg(test)]
mod tests {
    use super::{Location, POSTGRES_CONNECTIONS, pool_size};
    use crate::{SqlBackend, StoreError};
    use proptest::prelude::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres_connections_never_compile_statements() {
        let url = tokio::task::spawn_blocking(census_testpg::fresh_database).await.unwrap();
        let backend = SqlBackend::connect(&url).await.unwrap();
        let jit: String = sqlx::query_scalar("SHOW jit").fetch_one(&backend.pool).await.unwrap();
        assert_eq!(jit, "off");
    }

    #[test]
    fn a_pool_is_sized_as_asked_where_the_database_allows() {
        let postgres = "postgres://u@localhost/db";
        assert_eq!(pool_size(postgres, None).unwrap(), POSTGRES_CONNECTIONS);
        assert_eq!(pool_size(postgres, Some(64)).unwrap(), 64);
        assert_eq!(pool_size("census.db", None).unwrap(), 1);
        assert_eq!(pool_size("sqlite://census.db", Some(1)).unwrap(), 1);
        let refused = pool_size("census.db", Some(4)).unwrap_err().to_string();
        assert!(refused.contains("one connection") && refused.contains("not 4"), "{refused}");
        for bad in [0, 1001] {
            let refused = pool_size(postgres, Some(bad)).unwrap_err().to_string();
            assert!(refused.contains(&format!("not {bad}")), "{refused}");
        }
        assert!(matches!(pool_size("mysql://localhost/db", Some(4)), Err(StoreError::BadLocation { .. })));
    }

    #[test]
    fn urls_name_their_backend() {
        assert_eq!(Location::parse("postgres://u:p@localhost/db"), Ok(Location::Postgres));
        assert_eq!(Location::parse("sqlite://census.db"), Ok(Location::Sqlite("census.db")));
        assert_eq!(Location::parse("census.db"), Ok(Location::Sqlite("census.db")));
        assert!(Location::parse("sqlite:").unwrap_err().contains("no file name"));
        assert!(Location::parse("a?mode=ro").unwrap_err().contains("'?'"));
        assert!(Location::parse("postgres://u@host:99999999/db").unwrap_err().contains("Postgres URL"));
        assert!(
            Location::parse("mysql://u:p@localhost/db")
                .unwrap_err()
                .contains("mysql:// is not a database census can use")
        );
        assert!(Location::parse("mariadb://localhost/db").unwrap_err().contains("mariadb://"));
    }

    proptest! {
        /// Whatever an operator types as a database URL, reading it never panics.
        #[test]
        fn any_url_is_parsed_or_refused(
            prefix in prop::sample::select(vec!["", "postgres://", "postgresql://", "sqlite:", "sqlite://"]),
            tail in ".{0,80}",
        ) {
            let _ = Location::parse(&format!("{prefix}{tail}"));
        }
    }
}
