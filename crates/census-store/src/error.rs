//! What the database said when it failed, in the store's own words: a
//! [`DatabaseError`] carries the kind of failure and the database's
//! message, never a driver's type, so callers decide from the kind
//! (retry, tell an operator, report a bug) and a backend of any kind can
//! say the same (`DatabaseError::new`).

/// What kind of failure a database error is. Whether a retry may help
/// follows from it ([`DatabaseErrorKind::is_retryable`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DatabaseErrorKind {
    /// The database could not be reached, or the connection was lost:
    /// the network, TLS, a server shutting down, a closed pool.
    Unreachable,
    /// The database is there but could not take the work now: a lost race
    /// (a serialization failure, a deadlock), a busy or locked SQLite file,
    /// every connection of the pool in use past the wait, the server short
    /// of memory or connections, a statement cancelled.
    Busy,
    /// The disk or the database is full.
    StorageFull,
    /// The database takes no writes: a read-only file or file system, a
    /// standby server.
    ReadOnly,
    /// The database's storage failed a read or write (an I/O error).
    StorageFailed,
    /// The database refused the change: a unique key, a foreign key, a
    /// check, or a trigger (results and rejections are append-only).
    Constraint,
    /// Anything else: a statement the database could not run, a value the
    /// store could not read.
    Other,
}

impl DatabaseErrorKind {
    /// Whether the same call may succeed later: the database comes back,
    /// the race is not lost again, or an operator mends its storage (frees
    /// space, makes it writable, replaces a disk: nothing of the call was
    /// stored, so waiting loses nothing). A refused change and anything
    /// else are permanent.
    pub fn is_retryable(self) -> bool {
        matches!(
            self,
            DatabaseErrorKind::Unreachable
                | DatabaseErrorKind::Busy
                | DatabaseErrorKind::StorageFull
                | DatabaseErrorKind::ReadOnly
                | DatabaseErrorKind::StorageFailed
        )
    }
}

impl std::fmt::Display for DatabaseErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            DatabaseErrorKind::Unreachable => "the database is unavailable",
            DatabaseErrorKind::Busy => "the database is busy",
            DatabaseErrorKind::StorageFull => "the database cannot be written: its disk is full",
            DatabaseErrorKind::ReadOnly => "the database cannot be written: it is read-only",
            DatabaseErrorKind::StorageFailed => "the database cannot be written: its storage failed (I/O error)",
            DatabaseErrorKind::Constraint => "the database refused the change",
            DatabaseErrorKind::Other => "database error",
        })
    }
}

/// A database's failure: its kind and the database's own message
/// (`error returned from database: results are append-only`).
///
/// ```
/// use census_store::{DatabaseError, DatabaseErrorKind, StoreError};
/// let error = StoreError::Database(DatabaseError::new(DatabaseErrorKind::Busy, "database is locked"));
/// assert!(error.is_retryable());
/// assert_eq!(error.report(), "the database is busy: database is locked");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct DatabaseError {
    kind: DatabaseErrorKind,
    message: String,
}

impl DatabaseError {
    pub fn new(kind: DatabaseErrorKind, message: impl Into<String>) -> DatabaseError {
        DatabaseError { kind, message: message.into() }
    }

    pub fn kind(&self) -> DatabaseErrorKind {
        self.kind
    }

    /// The database's (or the driver's) own words.
    pub fn message(&self) -> &str {
        &self.message
    }

    pub fn is_retryable(&self) -> bool {
        self.kind.is_retryable()
    }
}
