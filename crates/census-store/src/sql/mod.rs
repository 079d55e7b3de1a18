//! [`SqlBackend`]: the store's named operations ([`crate::backend`]) in SQL,
//! on Postgres or SQLite through sqlx's `Any` driver. It decides only what
//! picks rows (who may vote and which results count, as [`crate::backend`]
//! says); the other rules are above it, in [`crate::Store`]. The SQL is shared; the few
//! places where the two dialects differ are the methods of `Dialect`.
//! Rows are read by column name into `#[derive(sqlx::FromRow)]` structs,
//! never by position.
//!
//! One file a part of the seam: `runs`, `queue` (leases and heartbeats),
//! `results` (what a batch of reports writes), `answers` (the fold's pages,
//! sums, progress), `remedies` (reopening, failures, requeues) and
//! `identities` (tokens and quarantine); `exact` (SQLite's exact sums),
//! `dialect`, `location` (where a store lives, `DatabaseLocation`) and
//! `open` (connecting and migrating). This file holds the
//! backend, its transactions and the helpers the files share.

mod answers;
mod dialect;
mod error;
mod exact;
mod identities;
mod location;
mod open;
mod queue;
mod remedies;
mod results;
mod runs;

pub use location::{DatabaseLocation, MAX_CONNECTIONS, POSTGRES_CONNECTIONS, PostgresUrl};

use async_trait::async_trait;
use sqlx::AnyPool;
use sqlx::any::AnyRow;

use crate::StoreError;
use crate::backend::{LeaseFields, Transactions};
use dialect::Dialect;
use error::Db;

/// The store's storage on Postgres or SQLite.
pub struct SqlBackend {
    pool: AnyPool,
    /// One connection of its own for [`Transactions::ping`], so that health
    /// tells whether the database answers, not whether the pool is busy.
    health: AnyPool,
    dialect: Dialect,
    /// The pool's size ([`DatabaseLocation::pool_size`]).
    connections: u32,
}

impl SqlBackend {
    /// How many connections its pool opens at most (besides health's one).
    pub fn connections(&self) -> u32 {
        self.connections
    }
}

/// A transaction of the SQL backend: a connection of the pool between our
/// own `BEGIN` and `COMMIT`, rolled back when dropped. A connection whose
/// transaction did not end cleanly (a `BEGIN`, `COMMIT` or `ROLLBACK` that
/// failed) is closed, never handed to the next caller.
///
/// Why not `sqlx::Transaction`: sqlx counts a connection's transaction
/// depth itself and lowers it only when `COMMIT` or `ROLLBACK` succeeds.
/// On a full disk SQLite's `COMMIT` fails *and* rolls the transaction back,
/// the `ROLLBACK` sqlx sends next fails (no transaction is active), and the
/// depth stays 1, so sqlx began every later transaction with a `SAVEPOINT`
/// and committed it with a `RELEASE`. The first `RELEASE` that failed on the
/// full disk left its transaction open (SQLite keeps it, unlike `COMMIT`),
/// sqlx's `ROLLBACK TO` kept it open, and from then on every "commit" was a
/// savepoint released inside that one transaction, never written: leases
/// handed out, results, quarantines and a run's final answer, all seen by
/// this process on its one connection and lost when it closed or when the
/// next failure rolled the transaction back (issue 44's full-disk probe:
/// tokens refused as forged, an identity quarantined, N0 printed over a file
/// that did not hold it).
pub struct SqlTx {
    /// Until the transaction ends.
    connection: Option<sqlx::pool::PoolConnection<sqlx::Any>>,
}

/// Runs a statement that ends or begins a transaction on `connection`.
async fn execute(connection: &mut sqlx::AnyConnection, statement: &'static str) -> Result<(), sqlx::Error> {
    sqlx::query(statement).execute(connection).await.map(drop)
}

impl SqlTx {
    async fn begin(pool: &AnyPool) -> Result<SqlTx, StoreError> {
        let mut connection = pool.acquire().await.db()?;
        if let Err(error) = execute(&mut connection, "BEGIN").await {
            // A connection still inside a transaction (left open by a failure) is never reused.
            connection.close_on_drop();
            return Err(error::database_error(error));
        }
        Ok(SqlTx { connection: Some(connection) })
    }

    async fn commit(mut self) -> Result<(), StoreError> {
        let mut connection = self.connection.take().expect("a transaction holds its connection until it ends");
        if let Err(error) = execute(&mut connection, "COMMIT").await {
            // Rolled back, or still open: closing the connection ends it either way.
            connection.close_on_drop();
            return Err(error::database_error(error));
        }
        Ok(())
    }

    async fn rollback(mut self) -> Result<(), StoreError> {
        let mut connection = self.connection.take().expect("a transaction holds its connection until it ends");
        if let Err(error) = execute(&mut connection, "ROLLBACK").await {
            connection.close_on_drop();
            return Err(error::database_error(error));
        }
        Ok(())
    }
}

impl Drop for SqlTx {
    /// Rolls back a transaction that was not committed (an error on the
    /// way) before its connection serves anyone else; the connection is
    /// closed instead if that fails or cannot be done.
    fn drop(&mut self) {
        let Some(mut connection) = self.connection.take() else { return };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move {
                    if execute(&mut connection, "ROLLBACK").await.is_err() {
                        connection.close_on_drop();
                    }
                });
            }
            Err(_) => connection.close_on_drop(),
        }
    }
}

impl std::ops::Deref for SqlTx {
    type Target = sqlx::AnyConnection;
    fn deref(&self) -> &sqlx::AnyConnection {
        self.connection.as_ref().expect("a transaction holds its connection until it ends")
    }
}

impl std::ops::DerefMut for SqlTx {
    fn deref_mut(&mut self) -> &mut sqlx::AnyConnection {
        self.connection.as_mut().expect("a transaction holds its connection until it ends")
    }
}

/// The lease columns of a job row, read by name: what [`LeaseFields`] is made of.
#[derive(sqlx::FromRow)]
struct LeaseColumns {
    state: String,
    lease_token: Option<String>,
    lease_owner: Option<String>,
    lease_expires_at: Option<i64>,
}

impl LeaseColumns {
    fn fields(self) -> Result<LeaseFields, StoreError> {
        Ok(LeaseFields {
            state: self.state.parse()?,
            token: self.lease_token,
            owner: self.lease_owner,
            expires_at: self.lease_expires_at,
        })
    }
}

/// The rows of a `VALUES` list: `rows` tuples of `columns`, each column an
/// expression around its parameter, numbered from `$first` row by row. (The
/// casts give both backends the column types; VALUES columns are column1,
/// column2, ... on both.)
fn values_rows(rows: usize, first: usize, columns: &[&dyn Fn(&str) -> String]) -> String {
    let row = |i: usize| {
        let cells: Vec<String> = columns
            .iter()
            .enumerate()
            .map(|(j, column)| column(&format!("${}", first + i * columns.len() + j)))
            .collect();
        format!("({})", cells.join(", "))
    };
    (0..rows).map(row).collect::<Vec<_>>().join(", ")
}

fn bigint(parameter: &str) -> String {
    format!("CAST({parameter} AS BIGINT)")
}

fn text(parameter: &str) -> String {
    format!("CAST({parameter} AS TEXT)")
}

/// A parameter as it is.
fn plain(parameter: &str) -> String {
    parameter.to_string()
}

/// `$first, $first + 1, ...`: `count` placeholders.
fn placeholders(first: usize, count: usize) -> String {
    (first..first + count).map(|i| format!("${i}")).collect::<Vec<_>>().join(", ")
}

impl SqlBackend {
    /// The rows of one select for every id of `ids`: `select` writes the
    /// statement around the placeholders (`$1, $2, ...`) of its
    /// `IN (...)`, and it runs once a chunk of as many ids as the backend
    /// binds at once (SQLite takes few parameters). Chunks go in the order
    /// of `ids`, so rows locked `FOR UPDATE` by sorted ids stay in order.
    async fn select_by_ids(
        &self,
        connection: &mut sqlx::AnyConnection,
        ids: &[i64],
        select: impl Fn(&str) -> String,
    ) -> Result<Vec<AnyRow>, StoreError> {
        let mut rows = Vec::with_capacity(ids.len());
        for chunk in ids.chunks(self.dialect.rows_per_statement(500, 1)) {
            let sql = select(&placeholders(1, chunk.len()));
            let mut query = sqlx::query(&sql);
            for id in chunk {
                query = query.bind(*id);
            }
            rows.extend(query.fetch_all(&mut *connection).await.db()?);
        }
        Ok(rows)
    }
}

#[async_trait]
impl Transactions for SqlBackend {
    type Tx = SqlTx;

    async fn begin(&self) -> Result<SqlTx, StoreError> {
        SqlTx::begin(&self.pool).await
    }

    async fn commit(&self, tx: SqlTx) -> Result<(), StoreError> {
        tx.commit().await
    }

    async fn rollback(&self, tx: SqlTx) -> Result<(), StoreError> {
        tx.rollback().await
    }

    /// Postgres takes an advisory lock keyed by the name (a hash collision
    /// only serializes two identities); SQLite has one writer at a time.
    async fn lock_identities(&self, tx: &mut SqlTx, workers: &[&str]) -> Result<(), StoreError> {
        let Some(lock) = self.dialect.identity_lock() else { return Ok(()) };
        for worker in workers {
            sqlx::query(lock).bind(*worker).execute(&mut **tx).await.db()?;
        }
        Ok(())
    }

    async fn ping(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1").execute(&self.health).await.db()?;
        Ok(())
    }

    /// For SQLite this folds the write-ahead log into the database file.
    async fn close(&self) {
        if self.dialect == Dialect::Sqlite {
            let _ = sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)").execute(&self.pool).await;
        }
        self.pool.close().await;
        self.health.close().await;
    }
}

/// Postgres: the statement that adds to (or takes out of) `rows` classes'
/// count sums and done jobs, and adds the change of their contributions
/// (weight x count sum^class_power) to their runs' weighted sums so far,
/// exactly, in NUMERIC, so that a read of a run's weighted sum so far is
/// its row, not a sum over its classes. Binds (run, class, count, jobs)
/// a class, from $1. The classes are locked first, in key order (the
/// `locked` step, which the update waits for: so concurrent reports cannot
/// deadlock on them), then the runs, in one round trip: these rows are
/// shared by every report of a run and stay locked to the commit.
fn change_classes_sql(rows: usize, direction: exact::Direction) -> String {
    let count = |p: &str| dialect::Dialect::Postgres.count(p);
    let values = values_rows(rows, 1, &[&bigint, &bigint, &count, &bigint]);
    let (apply, undo) = match direction {
        exact::Direction::Add => ("+", "-"),
        exact::Direction::TakeOut => ("-", "+"),
    };
    // The classes' keys again, from the same parameters.
    let keys =
        (0..rows).map(|i| format!("({}, {})", bigint(&format!("${}", i * 4 + 1)), bigint(&format!("${}", i * 4 + 2))));
    let keys = keys.collect::<Vec<_>>().join(", ");
    format!(
        // A join with VALUES is an index probe a row; a row-value IN list
        // of a hundred pairs was planned as a scan (36 ms). The count of
        // `locked` is an init plan: every lock is taken, in key order,
        // before the update changes (and so locks) any row.
        "WITH locked AS (
             SELECT c.run_id FROM classes c JOIN (VALUES {keys}) AS k ON c.run_id = k.column1 AND c.class_id = k.column2
             ORDER BY c.run_id, c.class_id FOR UPDATE OF c
         ),
         changed AS (
             UPDATE classes SET count_sum = classes.count_sum {apply} v.column3,
                                jobs_done = classes.jobs_done {apply} v.column4
             FROM (VALUES {values}) AS v
             WHERE classes.run_id = v.column1 AND classes.class_id = v.column2 AND (SELECT COUNT(*) FROM locked) > 0
             RETURNING classes.run_id, classes.weight, classes.count_sum AS after,
                       classes.count_sum {undo} v.column3 AS before
         ),
         change AS (
             SELECT c.run_id,
                    sum(CASE WHEN r.class_power = 2 THEN c.weight * (c.after * c.after - c.before * c.before)
                             ELSE c.weight * (c.after - c.before) END) AS amount
             FROM changed c JOIN runs r ON r.id = c.run_id GROUP BY c.run_id
         )
         UPDATE runs SET weighted_sum_so_far = runs.weighted_sum_so_far + change.amount
         FROM change WHERE runs.id = change.run_id"
    )
}

#[cfg(test)]
mod tests {
    use sqlx::Connection;

    use crate::StorageFault;

    /// A write to a database opened read-only is the storage's fault, said
    /// as such and worth a retry (once the operator makes it writable),
    /// never a refusal of the request. (A full disk: `tests/storage_faults.rs`.)
    #[tokio::test]
    async fn a_read_only_database_is_a_storage_fault() {
        sqlx::any::install_default_drivers();
        let path = std::env::temp_dir().join(format!("census-read-only-{}.db", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let url = |mode: &str| format!("sqlite://{}?mode={mode}", path.display());
        let mut writable = sqlx::AnyConnection::connect(&url("rwc")).await.unwrap();
        sqlx::query("CREATE TABLE t (x INTEGER)").execute(&mut writable).await.unwrap();
        writable.close().await.unwrap();
        let mut read_only = sqlx::AnyConnection::connect(&url("ro")).await.unwrap();
        let refused = sqlx::query("INSERT INTO t VALUES (1)").execute(&mut read_only).await.unwrap_err();
        let error = super::error::database_error(refused);
        assert_eq!(error.storage_fault(), Some(StorageFault::ReadOnly), "{}", error.report());
        assert!(error.is_retryable());
        assert!(error.to_string().contains("the database cannot be written: it is read-only"), "{error}");
        let _ = std::fs::remove_file(&path);
    }
}
