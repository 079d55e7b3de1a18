//! The two migration folders, `migrations/postgres` and
//! `migrations/sqlite`, written by hand side by side, define the same
//! schema: every migration applied to a new SQLite file and to a new
//! Postgres database, the tables, the views and each one's columns, read
//! from the catalogs, are the same, but for the differences listed in
//! [`INTENDED`]. And the rule of `migrations/README.md` holds: from
//! [`FIRST_SHARED`] on, a migration has the same number and name on both.

use std::collections::{BTreeMap, BTreeSet};

use census_store::SqlBackend;
use census_store::backend::Transactions;
use sqlx::Connection;

/// What each store has that the other has not, on purpose: (store, table,
/// column).
const INTENDED: [(&str, &str, &str); 2] = [
    // SQLite cannot add its TEXT numbers in SQL, so the store keeps each
    // class's contribution (weight x count sum^class_power) in its row;
    // Postgres computes it in the group_totals view (migration 0006).
    ("sqlite", "classes", "contribution"),
    // Runs whose sums migration 0006 found inexact, rebuilt on opening.
    ("sqlite", "runs", "sums_exact"),
];

/// The first migration number the two stores share.
const FIRST_SHARED: u32 = 16;

/// Before the rule, each store numbered its own: the same change's file
/// on Postgres and on SQLite, or the store that alone has one (SQLite's
/// exact counts; Postgres's bulk jobs, and its weighted sum so far, which
/// SQLite's 0006 keeps already).
const BEFORE_THE_RULE: [(Option<&str>, Option<&str>); 16] = [
    (Some("0001_census"), Some("0001_census")),
    (Some("0002_trust"), Some("0002_trust")),
    (Some("0003_kinds"), Some("0003_kinds")),
    (Some("0004_lean_queue"), Some("0004_lean_queue")),
    (Some("0005_bounded_identities"), Some("0005_bounded_identities")),
    (None, Some("0006_exact_counts")),
    (Some("0006_lease_lifetime"), Some("0007_lease_lifetime")),
    (Some("0007_stages"), Some("0008_stages")),
    (Some("0008_bulk_jobs"), None),
    (Some("0009_weighted_sum_so_far"), None),
    (Some("0010_job_costs"), Some("0009_job_costs")),
    (Some("0011_lease_expiry"), Some("0010_lease_expiry")),
    (Some("0012_result_costs"), Some("0011_result_costs")),
    (Some("0013_lease_owner_expiry"), Some("0012_lease_owner_expiry")),
    (Some("0014_run_leases"), Some("0013_run_leases")),
    (Some("0015_owner_leases"), Some("0014_owner_leases")),
];

/// Each table's or view's kind and columns, by name.
type Schema = BTreeMap<String, (String, BTreeSet<String>)>;

/// The migrations of one store, by file name without `.sql`.
fn migrations(store: &str) -> Vec<String> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../migrations/").to_string() + store;
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{dir}: {e}"))
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .filter_map(|name| name.strip_suffix(".sql").map(str::to_string))
        .collect();
    names.sort();
    names
}

fn number(migration: &str) -> u32 {
    migration.split('_').next().and_then(|n| n.parse().ok()).unwrap_or_else(|| panic!("{migration}: no number"))
}

#[test]
fn migrations_keep_one_number_on_both_stores() {
    let (postgres, sqlite) = (migrations("postgres"), migrations("sqlite"));
    let before = |names: &[String]| -> Vec<String> {
        names.iter().filter(|name| number(name) < FIRST_SHARED).cloned().collect()
    };
    let listed =
        |names: Vec<Option<&str>>| -> Vec<String> { names.into_iter().flatten().map(str::to_string).collect() };
    let (old_postgres, old_sqlite): (Vec<_>, Vec<_>) = BEFORE_THE_RULE.into_iter().unzip();
    assert_eq!(before(&postgres), listed(old_postgres), "Postgres's migrations before the rule never change");
    assert_eq!(before(&sqlite), listed(old_sqlite), "SQLite's migrations before the rule never change");
    let after = |names: &[String]| -> Vec<String> {
        names.iter().filter(|name| number(name) >= FIRST_SHARED).cloned().collect()
    };
    assert_eq!(
        after(&postgres),
        after(&sqlite),
        "from {FIRST_SHARED:04} on, each migration has the same number and name in migrations/postgres and \
         migrations/sqlite (migrations/README.md)"
    );
}

/// SQLite's tables and views, from `sqlite_master` and `pragma_table_info`.
async fn sqlite_schema(url: &str) -> Schema {
    let mut connection = sqlx::SqliteConnection::connect(url).await.unwrap();
    let objects: Vec<(String, String)> = sqlx::query_as(
        "SELECT name, type FROM sqlite_master
         WHERE type IN ('table', 'view') AND name NOT LIKE 'sqlite_%' AND name <> '_sqlx_migrations'",
    )
    .fetch_all(&mut connection)
    .await
    .unwrap();
    let mut schema = Schema::new();
    for (name, kind) in objects {
        let columns: Vec<String> = sqlx::query_scalar("SELECT name FROM pragma_table_info($1)")
            .bind(&name)
            .fetch_all(&mut connection)
            .await
            .unwrap();
        schema.insert(name, (kind, columns.into_iter().collect()));
    }
    schema
}

/// Postgres's tables and views, from `information_schema`.
async fn postgres_schema(url: &str) -> Schema {
    let mut connection = sqlx::PgConnection::connect(url).await.unwrap();
    let objects: Vec<(String, String)> = sqlx::query_as(
        "SELECT table_name::TEXT, CASE table_type WHEN 'VIEW' THEN 'view' ELSE 'table' END
         FROM information_schema.tables WHERE table_schema = 'public' AND table_name <> '_sqlx_migrations'",
    )
    .fetch_all(&mut connection)
    .await
    .unwrap();
    let columns: Vec<(String, String)> = sqlx::query_as(
        "SELECT table_name::TEXT, column_name::TEXT FROM information_schema.columns WHERE table_schema = 'public'",
    )
    .fetch_all(&mut connection)
    .await
    .unwrap();
    let mut schema: Schema = objects.into_iter().map(|(name, kind)| (name, (kind, BTreeSet::new()))).collect();
    for (table, column) in columns {
        if let Some((_, columns)) = schema.get_mut(&table) {
            columns.insert(column);
        }
    }
    schema
}

/// `schema` less the columns [`INTENDED`] gives `store` alone.
fn shared(store: &str, mut schema: Schema) -> Schema {
    for (only, table, column) in INTENDED {
        if only == store {
            let (_, columns) = schema.get_mut(table).unwrap_or_else(|| panic!("{store} has no table {table}"));
            assert!(columns.remove(column), "{store}'s {table} has no column {column}: INTENDED is out of date");
        }
    }
    schema
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_stores_migrate_to_the_same_tables_views_and_columns() {
    let path = std::env::temp_dir().join(format!("census-schema-{}.db", std::process::id()));
    let _ = std::fs::remove_file(&path);
    SqlBackend::connect(path.to_str().unwrap()).await.unwrap().close().await;
    let sqlite = shared("sqlite", sqlite_schema(&format!("sqlite://{}", path.display())).await);
    let url = tokio::task::spawn_blocking(census_testpg::fresh_database).await.unwrap();
    SqlBackend::connect(&url).await.unwrap().close().await;
    let postgres = shared("postgres", postgres_schema(&url).await);
    let _ = std::fs::remove_file(&path);

    assert!(sqlite.contains_key("results") && sqlite.contains_key("group_totals"), "{sqlite:?}");
    let names = |schema: &Schema| schema.keys().cloned().collect::<BTreeSet<_>>();
    assert_eq!(names(&sqlite), names(&postgres), "the same tables and views");
    for (name, (kind, columns)) in &sqlite {
        let (other_kind, other_columns) = &postgres[name];
        assert_eq!(kind, other_kind, "{name} is a {kind} in SQLite, a {other_kind} in Postgres");
        let only_sqlite: Vec<_> = columns.difference(other_columns).collect();
        let only_postgres: Vec<_> = other_columns.difference(columns).collect();
        assert!(
            only_sqlite.is_empty() && only_postgres.is_empty(),
            "{name}: columns only SQLite has {only_sqlite:?}, only Postgres has {only_postgres:?}"
        );
    }
}
