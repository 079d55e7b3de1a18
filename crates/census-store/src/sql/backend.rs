//! What differs between Postgres and SQLite: opening the store (its URL,
//! checking an SQLite file, migrations) and the few SQL dialect differences
//! (the methods of [`Backend`]); and [`JobState`], the `jobs.state` column
//! both hold alike.

use std::collections::HashMap;
use std::sync::{Mutex, Once};
use std::time::Duration;

use sqlx::any::AnyPoolOptions;

use super::SqlStore;
use crate::{StoreConfig, StoreError};

/// The state of a job, as the `jobs.state` column holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum JobState {
    Pending,
    Leased,
    Done,
    Failed,
}

impl JobState {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            JobState::Pending => "pending",
            JobState::Leased => "leased",
            JobState::Done => "done",
            JobState::Failed => "failed",
        }
    }
}

impl std::str::FromStr for JobState {
    type Err = StoreError;
    fn from_str(text: &str) -> Result<JobState, StoreError> {
        match text {
            "pending" => Ok(JobState::Pending),
            "leased" => Ok(JobState::Leased),
            "done" => Ok(JobState::Done),
            "failed" => Ok(JobState::Failed),
            _ => Err(StoreError::Internal(format!("{text:?} is not a job state"))),
        }
    }
}

static POSTGRES_MIGRATIONS: sqlx::migrate::Migrator = sqlx::migrate!("../../migrations/postgres");
static SQLITE_MIGRATIONS: sqlx::migrate::Migrator = sqlx::migrate!("../../migrations/sqlite");

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Backend {
    Postgres,
    Sqlite,
}

impl Backend {
    /// Row locks for the queue; SQLite has one writer at a time instead.
    pub(super) fn skip_locked(self) -> &'static str {
        match self {
            Backend::Postgres => "FOR UPDATE SKIP LOCKED",
            Backend::Sqlite => "",
        }
    }

    /// `id` is one of the ids the subquery picks. Postgres plans `id IN
    /// (subquery)` of an UPDATE as a hash join over a scan of every job; an
    /// array built first (an InitPlan) makes it a primary-key lookup.
    pub(super) fn id_among(self, subquery: &str) -> String {
        match self {
            Backend::Postgres => format!("id = ANY(ARRAY({subquery}))"),
            Backend::Sqlite => format!("id IN ({subquery})"),
        }
    }

    /// How many rows one multi-row statement takes, `rows` on Postgres
    /// (fewer round trips). SQLite binds parameters by name, and finding a
    /// name scans the statement's list of them (`sqlite3_bind_parameter_name`
    /// through sqlx), so binding costs the square of the parameter count:
    /// with 2,700 parameters it was the largest cost of a whole-catalogue
    /// run. Its statements stay near 128 parameters; they are in-process,
    /// so more statements cost little.
    pub(super) fn rows_per_statement(self, rows: usize, parameters_per_row: usize) -> usize {
        match self {
            Backend::Postgres => rows,
            Backend::Sqlite => (128 / parameters_per_row).clamp(1, rows),
        }
    }

    /// A statement that takes a lock on one identity (`$1`) until the
    /// transaction ends, so that the same identity's leases, completions,
    /// failures and quarantine happen one after the other: the lease cap
    /// counts held leases and adds to them atomically, and a quarantine
    /// sees every result of the identity that committed before it (and any
    /// later report finds its leases released). Postgres takes an advisory
    /// lock keyed by the name (a hash collision only serializes two
    /// identities); SQLite has one writer at a time already.
    pub(super) fn identity_lock(self) -> Option<&'static str> {
        match self {
            // 1129270867 is "CENS": the census's own key space.
            Backend::Postgres => Some("SELECT pg_advisory_xact_lock(1129270867, hashtext($1))"),
            Backend::Sqlite => None,
        }
    }

    pub(super) fn for_update(self) -> &'static str {
        match self {
            Backend::Postgres => "FOR UPDATE OF j",
            Backend::Sqlite => "",
        }
    }

    /// A decimal text parameter into a big-number column (NUMERIC in
    /// Postgres, TEXT in SQLite, where NUMERIC would round N0 to a float).
    pub(super) fn big_number(self, parameter: &str) -> String {
        match self {
            Backend::Postgres => format!("CAST({parameter} AS NUMERIC)"),
            Backend::Sqlite => parameter.to_string(),
        }
    }

    /// A count, a sum or a weight bound as decimal text: NUMERIC in
    /// Postgres; canonical decimal TEXT in SQLite (migration 0006), whose
    /// 64-bit integers cannot hold 128-bit counts. SQLite does no
    /// arithmetic on it: the store keeps its sums in Rust
    /// ([`Backend::sums_in_sql`]).
    pub(super) fn count(self, parameter: &str) -> String {
        match self {
            Backend::Postgres => format!("CAST({parameter} AS NUMERIC)"),
            Backend::Sqlite => format!("CAST({parameter} AS TEXT)"),
        }
    }

    /// Whether the database adds counts exactly itself (Postgres's
    /// NUMERIC: `count_sum = count_sum + $n`, views that multiply and sum).
    /// SQLite would overflow to REAL, so there the store reads a sum, adds
    /// in Rust and writes the new value, in the same transaction
    /// (`exact.rs`), and stores each class's contribution and the run's
    /// weighted sum so far.
    pub(super) fn sums_in_sql(self) -> bool {
        self == Backend::Postgres
    }

    /// The smaller of two numbers.
    pub(super) fn least(self, a: &str, b: &str) -> String {
        match self {
            Backend::Postgres => format!("LEAST({a}, {b})"),
            Backend::Sqlite => format!("MIN({a}, {b})"),
        }
    }

    /// The larger of two values, as [`Backend::least`] the smaller.
    pub(super) fn greatest(self, a: &str, b: &str) -> String {
        match self {
            Backend::Postgres => format!("GREATEST({a}, {b})"),
            Backend::Sqlite => format!("MAX({a}, {b})"),
        }
    }
}

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
            Err((reason, StoreError::from(error).is_retryable()))
        }
        Err(_) => Err((format!("no answer within {} s", POSTGRES_CONNECT_TIMEOUT.as_secs()), true)),
    }
}

impl SqlStore {
    /// Opens the store at `url` (see [`crate::connect`]) and migrates it.
    pub async fn connect(url: &str, config: StoreConfig) -> Result<SqlStore, StoreError> {
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

        let (backend, pool) = match Location::parse(url).map_err(bad_location)? {
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
                    .max_connections(16)
                    // Fail fast while the database is down: callers get a
                    // retryable UNAVAILABLE and health turns NOT_SERVING.
                    .acquire_timeout(Duration::from_secs(5))
                    .connect(url)
                    .await
                    .map_err(|e| failed(&e))?;
                (Backend::Postgres, pool)
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
                (Backend::Sqlite, pool)
            }
        };
        if backend == Backend::Postgres {
            POSTGRES_MIGRATIONS.run(&pool).await.map_err(|e| failed(&format!("migrations failed: {e}")))?;
        }
        // Health asks on a connection of its own: a pool busy with
        // requests is not a database that does not answer.
        let health_url = match backend {
            Backend::Postgres => url.to_string(),
            Backend::Sqlite => format!("sqlite://{}?mode=rw", Location::parse(url).map_err(|e| failed(&e))?.path()),
        };
        let health = AnyPoolOptions::new()
            .max_connections(1)
            .min_connections(0)
            .acquire_timeout(Duration::from_secs(5))
            .connect_lazy(&health_url)
            .map_err(|e| failed(&e))?;
        let store = SqlStore {
            pool,
            health,
            backend,
            config,
            runs: Mutex::new(HashMap::new()),
            expected: Mutex::new(HashMap::new()),
            finished: Mutex::new(Vec::new()),
            verified_finals: Mutex::new(HashMap::new()),
        };
        store.rebuild_inexact_sums().await?;
        store.reopen_quarantined_results().await?;
        Ok(store)
    }
}

#[cfg(test)]
mod tests {
    use super::Location;
    use proptest::prelude::*;

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
