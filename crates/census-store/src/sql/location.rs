//! [`DatabaseLocation`]: where an SQL store lives, read once from the text
//! a person typed (`--database`) and carried typed from there on.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use crate::StoreError;

/// Where an SQL store lives: an SQLite file or a Postgres server's database.
///
/// Parsed once, where the text comes in (a flag, a setting); nothing after
/// that looks at a URL's scheme again. `Display` shows what logs and errors
/// may show: the file's path, or the URL with its password replaced by
/// `***`.
///
/// ```
/// use census_store::DatabaseLocation;
/// let server: DatabaseLocation = "postgres://census:secret@db:5432/census".parse().unwrap();
/// assert_eq!(server.to_string(), "postgres://census:***@db:5432/census");
/// assert!(server.sqlite_file().is_none());
/// let file: DatabaseLocation = "sqlite://runs/census.db".parse().unwrap();
/// assert_eq!(file, DatabaseLocation::Sqlite("runs/census.db".into()));
/// assert_eq!(file.to_string(), "runs/census.db");
/// assert!("mysql://localhost/census".parse::<DatabaseLocation>().is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DatabaseLocation {
    /// An SQLite file (created when a store is opened, unless it exists).
    Sqlite(PathBuf),
    /// A Postgres server's database.
    Postgres(PostgresUrl),
}

/// A `postgres://` (or `postgresql://`) URL that the driver accepts. Its
/// `Display` and `Debug` hide the password; [`PostgresUrl::with_password`]
/// is for connecting only.
#[derive(Clone, PartialEq, Eq)]
pub struct PostgresUrl(String);

impl PostgresUrl {
    /// The URL as given, password included: what a connection needs, never
    /// what a log shows.
    pub fn with_password(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for PostgresUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&redact_url(&self.0))
    }
}

impl fmt::Debug for PostgresUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PostgresUrl({self})")
    }
}

impl fmt::Display for DatabaseLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DatabaseLocation::Sqlite(path) => write!(f, "{}", path.display()),
            DatabaseLocation::Postgres(url) => url.fmt(f),
        }
    }
}

impl FromStr for DatabaseLocation {
    type Err = StoreError;

    /// `postgres://...` or `postgresql://...` (checked by the driver's own
    /// parser), `sqlite://PATH`, `sqlite:PATH` or a bare path. Another
    /// engine's URL (`mysql://`, ...) is refused by name, where it would
    /// otherwise be taken for a file name and fail later as "unable to
    /// open database file".
    fn from_str(text: &str) -> Result<DatabaseLocation, StoreError> {
        parse(text).map_err(|reason| StoreError::BadLocation { url: redact_url(text), reason })
    }
}

fn parse(text: &str) -> Result<DatabaseLocation, String> {
    if text.starts_with("postgres://") || text.starts_with("postgresql://") {
        text.parse::<sqlx::postgres::PgConnectOptions>().map_err(|e| format!("not a valid Postgres URL: {e}"))?;
        return Ok(DatabaseLocation::Postgres(PostgresUrl(text.to_string())));
    }
    if let Some((scheme, _)) = text.split_once("://")
        && scheme != "sqlite"
        && !scheme.is_empty()
        && scheme.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
    {
        return Err(format!(
            "{scheme}:// is not a database census can use: give a postgres:// URL, or an SQLite file (a path or sqlite://PATH)"
        ));
    }
    let path = text.strip_prefix("sqlite://").or_else(|| text.strip_prefix("sqlite:")).unwrap_or(text);
    if path.is_empty() {
        return Err("no file name given".into());
    }
    sqlite_url(Path::new(path), "rwc")?;
    Ok(DatabaseLocation::Sqlite(PathBuf::from(path)))
}

/// The URL sqlx opens an SQLite file by, in `mode` (`rwc`, `rw`); refused
/// when the path would change the URL's meaning.
pub(crate) fn sqlite_url(path: &Path, mode: &str) -> Result<String, String> {
    let text = path.to_str().ok_or_else(|| format!("the file name {} is not UTF-8", path.display()))?;
    if let Some(bad) = text.chars().find(|c| matches!(c, '?' | '#' | '\0')) {
        return Err(format!("an SQLite file name cannot hold {bad:?}"));
    }
    Ok(format!("sqlite://{text}?mode={mode}"))
}

/// The connections of a pool to a Postgres server unless told otherwise
/// ([`DatabaseLocation::pool_size`]).
pub const POSTGRES_CONNECTIONS: u32 = 16;

/// The most connections one pool opens: far beyond what one process can
/// use, and within what a Postgres server can be configured to accept.
pub const MAX_CONNECTIONS: u32 = 1000;

impl DatabaseLocation {
    /// The SQLite file, or `None` for a server.
    pub fn sqlite_file(&self) -> Option<&Path> {
        match self {
            DatabaseLocation::Sqlite(path) => Some(path),
            DatabaseLocation::Postgres(_) => None,
        }
    }

    /// Whether the database is a server's (Postgres): one that may still
    /// be starting, and that several processes share.
    pub fn is_server(&self) -> bool {
        matches!(self, DatabaseLocation::Postgres(_))
    }

    /// The connections of the pool that a store here opens: `asked` if
    /// given, else [`POSTGRES_CONNECTIONS`] to a Postgres server. An SQLite
    /// file has one (one writer at a time: a second connection would only
    /// wait for the first, or fail busy), so any other number is refused,
    /// as is a number outside 1 to [`MAX_CONNECTIONS`].
    pub fn pool_size(&self, asked: Option<u32>) -> Result<u32, StoreError> {
        match (self, asked) {
            (_, Some(n)) if !(1..=MAX_CONNECTIONS).contains(&n) => {
                Err(StoreError::Invalid(format!("a pool has 1 to {MAX_CONNECTIONS} connections, not {n}")))
            }
            (DatabaseLocation::Postgres(_), asked) => Ok(asked.unwrap_or(POSTGRES_CONNECTIONS)),
            (DatabaseLocation::Sqlite(_), None | Some(1)) => Ok(1),
            (DatabaseLocation::Sqlite(_), Some(n)) => Err(StoreError::Invalid(format!(
                "an SQLite file has one connection (one writer at a time), not {n}: give more to a Postgres store"
            ))),
        }
    }
}

/// `url` with the password of its user information replaced by `***`
/// (`postgres://census:***@db:5432/census`): what logs, errors and status
/// may show of a database URL.
pub(crate) fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else { return url.to_string() };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(authority_end);
    let Some((user_info, host)) = authority.rsplit_once('@') else { return url.to_string() };
    let user = user_info.split_once(':').map_or(user_info, |(user, _)| user);
    let password = if user_info.contains(':') { ":***" } else { "" };
    format!("{scheme}://{user}{password}@{host}{path}")
}

#[cfg(test)]
mod tests {
    use super::{DatabaseLocation, POSTGRES_CONNECTIONS, redact_url};
    use crate::StoreError;
    use proptest::prelude::*;

    fn parse(text: &str) -> Result<DatabaseLocation, String> {
        text.parse().map_err(|error: StoreError| error.to_string())
    }

    fn pool_size(text: &str, asked: Option<u32>) -> Result<u32, StoreError> {
        text.parse::<DatabaseLocation>()?.pool_size(asked)
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
        assert!(matches!(parse("postgres://u:p@localhost/db"), Ok(DatabaseLocation::Postgres(_))));
        assert_eq!(parse("sqlite://census.db"), Ok(DatabaseLocation::Sqlite("census.db".into())));
        assert_eq!(parse("sqlite:census.db"), Ok(DatabaseLocation::Sqlite("census.db".into())));
        assert_eq!(parse("census.db"), Ok(DatabaseLocation::Sqlite("census.db".into())));
        assert!(parse("sqlite:").unwrap_err().contains("no file name"));
        assert!(parse("a?mode=ro").unwrap_err().contains("'?'"));
        assert!(parse("postgres://u@host:99999999/db").unwrap_err().contains("Postgres URL"));
        assert!(parse("mysql://u:p@localhost/db").unwrap_err().contains("mysql:// is not a database census can use"));
        assert!(parse("mariadb://localhost/db").unwrap_err().contains("mariadb://"));
    }

    /// What a location shows never holds its password: not its `Display`,
    /// not its `Debug`, not the error of a URL that is refused.
    #[test]
    fn a_password_is_never_shown() {
        let server = "postgresql://census:hunter2@db:5432/census?sslmode=disable".parse::<DatabaseLocation>().unwrap();
        assert_eq!(server.to_string(), "postgresql://census:***@db:5432/census?sslmode=disable");
        assert!(!format!("{server:?}").contains("hunter2"), "{server:?}");
        let DatabaseLocation::Postgres(url) = &server else { panic!("{server:?} is a server") };
        assert!(url.with_password().contains("hunter2"));
        assert!(!parse("mysql://census:hunter2@db/census").unwrap_err().contains("hunter2"));
        assert!(!parse("postgres://census:hunter2@db:99999999/census").unwrap_err().contains("hunter2"));
        assert_eq!(redact_url("postgres://census@db/census"), "postgres://census@db/census");
        assert_eq!(redact_url("census.db"), "census.db");
    }

    #[test]
    fn a_location_says_what_it_is() {
        let file = parse("sqlite:data/run.db").unwrap();
        assert_eq!(file.sqlite_file(), Some(std::path::Path::new("data/run.db")));
        assert!(!file.is_server());
        let server = parse("postgres://census@db/census").unwrap();
        assert_eq!(server.sqlite_file(), None);
        assert!(server.is_server());
    }

    proptest! {
        /// Whatever an operator types as a database URL, reading it never panics.
        #[test]
        fn any_url_is_parsed_or_refused(
            prefix in prop::sample::select(vec!["", "postgres://", "postgresql://", "sqlite:", "sqlite://"]),
            tail in ".{0,80}",
        ) {
            let _ = format!("{prefix}{tail}").parse::<DatabaseLocation>();
        }
    }
}
