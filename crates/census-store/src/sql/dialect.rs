//! The few places where Postgres and SQLite speak SQL differently: row
//! locks, binding limits, identity locks, big numbers, exact sums. Each is
//! a method of [`Dialect`]; everything else the backend writes is shared.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Dialect {
    Postgres,
    Sqlite,
}

impl Dialect {
    /// Row locks for the queue; SQLite has one writer at a time instead.
    pub(super) fn skip_locked(self) -> &'static str {
        match self {
            Dialect::Postgres => "FOR UPDATE SKIP LOCKED",
            Dialect::Sqlite => "",
        }
    }

    /// `id` is one of the ids the subquery picks. Postgres plans `id IN
    /// (subquery)` of an UPDATE as a hash join over a scan of every job; an
    /// array built first (an InitPlan) makes it a primary-key lookup.
    pub(super) fn id_among(self, subquery: &str) -> String {
        match self {
            Dialect::Postgres => format!("id = ANY(ARRAY({subquery}))"),
            Dialect::Sqlite => format!("id IN ({subquery})"),
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
            Dialect::Postgres => rows,
            Dialect::Sqlite => (128 / parameters_per_row).clamp(1, rows),
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
            Dialect::Postgres => Some("SELECT pg_advisory_xact_lock(1129270867, hashtext($1))"),
            Dialect::Sqlite => None,
        }
    }

    pub(super) fn for_update(self) -> &'static str {
        match self {
            Dialect::Postgres => "FOR UPDATE OF j",
            Dialect::Sqlite => "",
        }
    }

    /// A decimal text parameter into a big-number column (NUMERIC in
    /// Postgres, TEXT in SQLite, where NUMERIC would round N0 to a float).
    pub(super) fn big_number(self, parameter: &str) -> String {
        match self {
            Dialect::Postgres => format!("CAST({parameter} AS NUMERIC)"),
            Dialect::Sqlite => parameter.to_string(),
        }
    }

    /// A count, a sum or a weight bound as decimal text: NUMERIC in
    /// Postgres; canonical decimal TEXT in SQLite (migration 0006), whose
    /// 64-bit integers cannot hold 128-bit counts. SQLite does no
    /// arithmetic on it: the store keeps its sums in Rust
    /// ([`Dialect::sums_in_sql`]).
    pub(super) fn count(self, parameter: &str) -> String {
        match self {
            Dialect::Postgres => format!("CAST({parameter} AS NUMERIC)"),
            Dialect::Sqlite => format!("CAST({parameter} AS TEXT)"),
        }
    }

    /// Whether the database adds counts exactly itself (Postgres's
    /// NUMERIC: `count_sum = count_sum + $n`, views that multiply and sum).
    /// SQLite would overflow to REAL, so there the store reads a sum, adds
    /// in Rust and writes the new value, in the same transaction
    /// (`exact.rs`), and stores each class's contribution and the run's
    /// weighted sum so far.
    pub(super) fn sums_in_sql(self) -> bool {
        self == Dialect::Postgres
    }

    /// The smaller of two numbers.
    pub(super) fn least(self, a: &str, b: &str) -> String {
        match self {
            Dialect::Postgres => format!("LEAST({a}, {b})"),
            Dialect::Sqlite => format!("MIN({a}, {b})"),
        }
    }

    /// The larger of two values, as [`Dialect::least`] the smaller.
    pub(super) fn greatest(self, a: &str, b: &str) -> String {
        match self {
            Dialect::Postgres => format!("GREATEST({a}, {b})"),
            Dialect::Sqlite => format!("MAX({a}, {b})"),
        }
    }
}
