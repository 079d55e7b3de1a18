//! The few places where Postgres and SQLite speak SQL differently: row
//! locks, binding limits, identity locks, big numbers, exact sums. Each is
//! a method of [`Dialect`]; everything else the backend writes is shared.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Dialect {
    Postgres,
    Sqlite,
}

impl Dialect {
    /// The condition and order of a scan of run `run`'s jobs in `state`
    /// (from job `from` on, if given), in id order, along the (run, state,
    /// id) index.
    ///
    /// In Postgres, as a range of states ordered by state: with `state =
    /// 'pending'` the planner may take the primary key for the id order,
    /// and it does once the statistics (taken when the run was created)
    /// say every job is pending; a scan from a run's first job then reads
    /// every job of the database from id 0 (400,000 buffers with 300,000
    /// jobs, against 4,000 along the queue's index). The range is the
    /// same rows (a deterministic collation), but the primary key cannot
    /// give its order. A scan of one stage of a run of stages (`staged`)
    /// keeps the equality: its stage picks the index of staged jobs, where
    /// a range of states would leave the scan walking later stages.
    pub(super) fn queue_scan(self, run: &str, state: &str, from: Option<&str>, staged: bool) -> (String, &'static str) {
        let from = from.map_or(String::new(), |from| format!(" AND j.id >= {from}"));
        match self {
            Dialect::Postgres if !staged => {
                (format!("j.run_id = {run} AND j.state >= '{state}' AND j.state <= '{state}'{from}"), "j.state, j.id")
            }
            Dialect::Postgres | Dialect::Sqlite => (format!("j.run_id = {run} AND j.state = '{state}'{from}"), "j.id"),
        }
    }

    /// What a transaction says first so that a walk back along an index
    /// (`ORDER BY ... LIMIT`) is planned as that walk, whatever the
    /// statistics say. In Postgres, before a table's first analyze the
    /// planner took the newest 10,000 of a minute's million results as a
    /// bitmap scan of all of them and a sort (857 ms, against 3 ms along
    /// the index; BENCHMARKS.md, "The count of leased jobs"): without
    /// sorts, the index's own order is the only plan left. SQLite walks
    /// the index for such an order already.
    pub(super) fn walk_in_index_order(self) -> Option<&'static str> {
        match self {
            Dialect::Postgres => Some("SET LOCAL enable_sort = off"),
            Dialect::Sqlite => None,
        }
    }

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

    /// The rows of a JSON array of objects bound as `parameter` (text), as
    /// a table `x` with these columns (name and SQL type, each an object's
    /// field of that name) and `x.n`, each row's place in the array, to
    /// keep their order by. One parameter carries thousands of rows, where
    /// a `VALUES` list binds one a cell (and SQLite finds each by name):
    /// creating a run's jobs so is one statement a chunk.
    pub(super) fn json_rows(self, parameter: &str, columns: &[(&str, &str)]) -> String {
        let names: Vec<&str> = columns.iter().map(|&(name, _)| name).collect();
        match self {
            Dialect::Postgres => {
                let typed: Vec<String> = columns.iter().map(|(name, kind)| format!("{name} {kind}")).collect();
                format!(
                    "ROWS FROM (json_to_recordset(CAST({parameter} AS JSON)) AS ({})) WITH ORDINALITY AS x({}, n)",
                    typed.join(", "),
                    names.join(", ")
                )
            }
            Dialect::Sqlite => {
                let cells: Vec<String> = columns
                    .iter()
                    .map(|(name, kind)| format!("CAST(json_extract(j.value, '$.{name}') AS {kind}) AS {name}"))
                    .collect();
                format!("(SELECT {}, j.key AS n FROM json_each({parameter}) AS j) AS x", cells.join(", "))
            }
        }
    }

    /// A join of `table` (as `alias`) that finds each row's match by `on`,
    /// a row at a time (an index probe a row), whatever the planner
    /// believes of the tables' sizes: Postgres evaluates a lateral subquery
    /// for each row (`OFFSET 0` keeps it from being pulled up into a plain
    /// join, which it planned as a hash join over the whole table); SQLite
    /// is told the order with CROSS JOIN (left to its own choice, it put a
    /// run's classes outside and scanned a chunk's JSON rows for each: a
    /// new run's class lookup was quadratic, 144,578 4x3 classes not
    /// created in ten minutes). The fold's pages join so: a hash join read
    /// every result (or class: 10^6 at 10^7 jobs) of the run for every page.
    pub(super) fn join_each(self, table: &str, alias: &str, on: &str) -> String {
        match self {
            Dialect::Postgres => {
                format!("JOIN LATERAL (SELECT * FROM {table} {alias} WHERE {on} OFFSET 0) AS {alias} ON TRUE")
            }
            Dialect::Sqlite => format!("CROSS JOIN {table} {alias} ON {on}"),
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
