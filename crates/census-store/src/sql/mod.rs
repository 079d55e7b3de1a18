//! The one implementation of [`JobStore`], on Postgres or SQLite through
//! sqlx's `Any` driver. The SQL is shared; the few places where the two
//! dialects differ are the methods of [`Backend`].

mod auth;
mod completion;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Once};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use census_math::total::{n0_from_s, s_from_classes};
use census_math::Band;
use num_bigint::BigUint;
use sqlx::any::{AnyPoolOptions, AnyRow};
use sqlx::{AnyPool, Row};

use crate::{
    ClassSpec, ClassTotal, CompleteOutcome, Completion, HeartbeatOutcome, JobId, JobStore, Lease, MAX_REDUNDANCY,
    Progress, QuarantineEntry, Role, RunId, RunSpec, RunSummary, RunTotal, StoreConfig, StoreError, TokenRecord,
    WorkerProgress,
};

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
            _ => Err(StoreError::Database(format!("{text:?} is not a job state"))),
        }
    }
}

static POSTGRES_MIGRATIONS: sqlx::migrate::Migrator = sqlx::migrate!("../../migrations/postgres");
static SQLITE_MIGRATIONS: sqlx::migrate::Migrator = sqlx::migrate!("../../migrations/sqlite");

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Backend {
    Postgres,
    Sqlite,
}

impl Backend {
    /// Row locks for the queue; SQLite has one writer at a time instead.
    fn skip_locked(self) -> &'static str {
        match self {
            Backend::Postgres => "FOR UPDATE SKIP LOCKED",
            Backend::Sqlite => "",
        }
    }

    /// `id` is one of the ids the subquery picks. Postgres plans `id IN
    /// (subquery)` of an UPDATE as a hash join over a scan of every job; an
    /// array built first (an InitPlan) makes it a primary-key lookup.
    fn id_among(self, subquery: &str) -> String {
        match self {
            Backend::Postgres => format!("id = ANY(ARRAY({subquery}))"),
            Backend::Sqlite => format!("id IN ({subquery})"),
        }
    }

    fn for_update(self) -> &'static str {
        match self {
            Backend::Postgres => "FOR UPDATE OF j",
            Backend::Sqlite => "",
        }
    }

    /// A decimal text parameter into a big-number column (NUMERIC in
    /// Postgres, TEXT in SQLite, where NUMERIC would round N0 to a float).
    fn big_number(self, parameter: &str) -> String {
        match self {
            Backend::Postgres => format!("CAST({parameter} AS NUMERIC)"),
            Backend::Sqlite => parameter.to_string(),
        }
    }

    /// The smaller of two numbers.
    fn least(self, a: &str, b: &str) -> String {
        match self {
            Backend::Postgres => format!("LEAST({a}, {b})"),
            Backend::Sqlite => format!("MIN({a}, {b})"),
        }
    }
}

/// Immutable facts about a run, cached so a lease needs no join.
struct RunFacts {
    counter: String,
    representatives: HashMap<u32, String>,
}

/// The job store on Postgres or SQLite.
pub struct SqlStore {
    pool: AnyPool,
    backend: Backend,
    config: StoreConfig,
    runs: Mutex<HashMap<RunId, Arc<RunFacts>>>,
}

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).expect("the clock is after 1970").as_millis() as i64
}

/// A lease token prefix, random for every lease call; the job id and
/// attempt number complete it, so two attempts never share a token.
fn token_salt() -> String {
    format!("{:032x}", rand::random::<u128>())
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
        return Err(format!("{path} is not an SQLite database (it does not start with the SQLite header); give a new file name or a census database"));
    }
    let length = file.metadata().map(|m| m.len()).unwrap_or(0);
    if length < 512 || length % 512 != 0 {
        return Err(format!("{path} is a damaged SQLite database: {length} bytes is not a whole number of pages (truncated?)"));
    }
    Ok(())
}

/// A decimal string from the database as a big integer.
fn big(text: &str) -> Result<BigUint, StoreError> {
    // Postgres may print a NUMERIC with a fractional part of zeros.
    let integer = text.split('.').next().unwrap_or(text);
    integer.parse().map_err(|_| StoreError::Database(format!("{text:?} is not a whole number")))
}

impl SqlStore {
    /// Opens the store at `url` (see [`crate::connect`]) and migrates it.
    pub async fn connect(url: &str, config: StoreConfig) -> Result<SqlStore, StoreError> {
        static DRIVERS: Once = Once::new();
        DRIVERS.call_once(sqlx::any::install_default_drivers);
        let failed = |error: &dyn std::fmt::Display| StoreError::Connect { url: url.to_string(), reason: error.to_string() };

        let (backend, pool) = if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            let pool = AnyPoolOptions::new()
                .max_connections(16)
                // Fail fast while the database is down: callers get a
                // retryable UNAVAILABLE and health turns NOT_SERVING.
                .acquire_timeout(Duration::from_secs(5))
                .connect(url)
                .await
                .map_err(|e| failed(&e))?;
            (Backend::Postgres, pool)
        } else {
            let path = url.strip_prefix("sqlite://").or_else(|| url.strip_prefix("sqlite:")).unwrap_or(url);
            if path.is_empty() {
                return Err(failed(&"no file name given"));
            }
            check_sqlite_file(path).map_err(|e| failed(&e))?;
            {
                // One direct connection first: a damaged file fails here at
                // once with SQLite's own message.
                use sqlx::Connection;
                let mut probe = sqlx::AnyConnection::connect(&format!("sqlite://{path}?mode=rwc")).await.map_err(|e| failed(&e))?;
                sqlx::query("PRAGMA schema_version").execute(&mut probe).await.map_err(|e| failed(&e))?;
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
        };
        let migrations = match backend {
            Backend::Postgres => &POSTGRES_MIGRATIONS,
            Backend::Sqlite => &SQLITE_MIGRATIONS,
        };
        migrations.run(&pool).await.map_err(|e| failed(&format!("migrations failed: {e}")))?;
        Ok(SqlStore { pool, backend, config, runs: Mutex::new(HashMap::new()) })
    }

    async fn run_facts(&self, run: RunId) -> Result<Arc<RunFacts>, StoreError> {
        if let Some(facts) = self.runs.lock().expect("the run cache is never poisoned").get(&run) {
            return Ok(facts.clone());
        }
        let row = sqlx::query("SELECT counter FROM runs WHERE id = $1")
            .bind(run)
            .fetch_optional(&self.pool)
            .await?
            .ok_or(StoreError::UnknownRun(run))?;
        let classes = sqlx::query("SELECT class_id, representative FROM classes WHERE run_id = $1")
            .bind(run)
            .fetch_all(&self.pool)
            .await?;
        let representatives = classes
            .iter()
            .map(|row| Ok((row.try_get::<i64, _>(0)? as u32, row.try_get::<String, _>(1)?)))
            .collect::<Result<_, sqlx::Error>>()?;
        let facts = Arc::new(RunFacts {
            counter: row.try_get(0)?,
            representatives,
        });
        self.runs.lock().expect("the run cache is never poisoned").insert(run, facts.clone());
        Ok(facts)
    }

    async fn runs_where(&self, condition: &str, run: Option<RunId>) -> Result<Vec<RunSummary>, StoreError> {
        let sql = format!(
            "SELECT r.id, r.stage, r.counter, r.counter_version, r.redundancy, r.jobs_total, r.jobs_remaining,
                    r.finished_at, r.open_conflicts, r.priority, r.cancelled_at
             FROM runs r WHERE {condition} ORDER BY r.id"
        );
        let mut query = sqlx::query(&sql);
        if let Some(run) = run {
            query = query.bind(run);
        }
        let rows = query.fetch_all(&self.pool).await?;
        let mut runs = Vec::with_capacity(rows.len());
        for row in &rows {
            let run_id: RunId = row.try_get(0)?;
            let total: i64 = row.try_get(5)?;
            let remaining: i64 = row.try_get(6)?;
            runs.push(RunSummary {
                run_id,
                spec: RunSpec {
                    stage: row.try_get(1)?,
                    counter: row.try_get(2)?,
                    counter_version: row.try_get(3)?,
                    redundancy: row.try_get::<i64, _>(4)? as u32,
                },
                classes: self.run_facts(run_id).await?.representatives.len() as u64,
                jobs_total: total as u64,
                jobs_done: (total - remaining) as u64,
                is_final: row.try_get::<Option<i64>, _>(7)?.is_some() && row.try_get::<i64, _>(8)? == 0,
                priority: row.try_get(9)?,
                cancelled: row.try_get::<Option<i64>, _>(10)?.is_some(),
            });
        }
        Ok(runs)
    }

    async fn find_run(&self, spec: &RunSpec) -> Result<Option<RunId>, StoreError> {
        let row = sqlx::query(
            "SELECT id FROM runs WHERE stage = $1 AND counter = $2 AND counter_version = $3 AND redundancy = $4",
        )
        .bind(&spec.stage)
        .bind(&spec.counter)
        .bind(&spec.counter_version)
        .bind(i64::from(spec.redundancy))
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.map(|row| row.get(0)))
    }

    async fn ensure_run(&self, run: RunId) -> Result<AnyRow, StoreError> {
        sqlx::query(
            "SELECT finished_at, open_conflicts, CAST(s AS TEXT), CAST(n0 AS TEXT), jobs_total, jobs_remaining, failed_jobs, counted
             FROM runs WHERE id = $1",
        )
        .bind(run)
        .fetch_optional(&self.pool)
        .await?
        .ok_or(StoreError::UnknownRun(run))
    }

    /// Recomputes a final total from the accepted results of the current
    /// rounds, and refuses a stored total that differs (a tampered or
    /// damaged database), so that no wrong answer is ever shown as final.
    async fn recheck_final(&self, run: RunId, s: &BigUint, n0: &BigUint) -> Result<(), StoreError> {
        let rows = sqlx::query(
            "SELECT c.size, CAST(SUM(x.count) AS TEXT), COUNT(*) FROM results x
             JOIN jobs j ON j.id = x.job_id AND j.round = x.round AND j.state = 'done'
             JOIN classes c ON c.run_id = j.run_id AND c.class_id = j.class_id
             WHERE x.run_id = $1 AND x.outcome = 'accepted'
             GROUP BY c.class_id, c.size",
        )
        .bind(run)
        .fetch_all(&self.pool)
        .await?;
        let accepted: i64 = rows.iter().map(|row| row.try_get::<i64, _>(2)).sum::<Result<i64, _>>()?;
        let jobs: i64 = self.ensure_run(run).await?.try_get(4)?;
        let recomputed = Self::exact_s(&rows)?;
        if accepted != jobs || &recomputed != s || &n0_from_s(&recomputed) != n0 {
            tracing::error!(run, stored_s = %s, recomputed_s = %recomputed, accepted, jobs, "the stored total does not match the accepted results");
            return Err(StoreError::TotalMismatch {
                stored: format!("S = {s}, N0 = {n0}"),
                computed: format!("S = {recomputed} from {accepted} accepted results of {jobs} jobs"),
            });
        }
        Ok(())
    }

    /// S from the class sums, computed in Rust.
    fn exact_s(rows: &[AnyRow]) -> Result<BigUint, StoreError> {
        let mut classes = Vec::with_capacity(rows.len());
        for row in rows {
            let size = row.try_get::<i64, _>(0)? as u64;
            let seed_sum: u64 = row.try_get::<String, _>(1)?.split('.').next().unwrap_or("").parse().map_err(|_| {
                StoreError::Database(format!("class seed sum {:?} is not a whole number", row.get::<String, _>(1)))
            })?;
            classes.push((size, seed_sum));
        }
        Ok(s_from_classes(classes))
    }

    /// Writes S and N0 if every job of the run is done and no conflict is
    /// open, inside the caller's transaction. The sum is computed twice, by
    /// the database and by `num-bigint`, and a mismatch aborts the transaction.
    async fn finish_if_complete(&self, tx: &mut sqlx::Transaction<'_, sqlx::Any>, run: RunId) -> Result<(), StoreError> {
        let row = sqlx::query("SELECT jobs_remaining, open_conflicts, finished_at FROM runs WHERE id = $1")
            .bind(run)
            .fetch_one(&mut **tx)
            .await?;
        let (remaining, conflicts, finished): (i64, i64, Option<i64>) = (row.try_get(0)?, row.try_get(1)?, row.try_get(2)?);
        if remaining > 0 || conflicts > 0 || finished.is_some() {
            return Ok(());
        }
        let classes = sqlx::query("SELECT size, CAST(seed_sum AS TEXT) FROM classes WHERE run_id = $1")
            .bind(run)
            .fetch_all(&mut **tx)
            .await?;
        let s = Self::exact_s(&classes)?;
        let n0 = n0_from_s(&s);
        let in_sql = sqlx::query("SELECT CAST(SUM(size * seed_sum) AS TEXT) FROM classes WHERE run_id = $1")
            .bind(run)
            .fetch_one(&mut **tx)
            .await?;
        let sql_s = big(&in_sql.try_get::<String, _>(0)?)?;
        if sql_s != s {
            return Err(StoreError::TotalMismatch { stored: sql_s.to_string(), computed: s.to_string() });
        }
        if self.backend == Backend::Postgres {
            let row = sqlx::query(
                "SELECT CAST(SUM(size * seed_sum) * 362880 * 72 * 72 AS TEXT) FROM classes WHERE run_id = $1",
            )
            .bind(run)
            .fetch_one(&mut **tx)
            .await?;
            let sql_n0 = big(&row.try_get::<String, _>(0)?)?;
            if sql_n0 != n0 {
                return Err(StoreError::TotalMismatch { stored: sql_n0.to_string(), computed: n0.to_string() });
            }
        }
        let update = format!(
            "UPDATE runs SET finished_at = $1, s = {}, n0 = {} WHERE id = $4",
            self.backend.big_number("$2"),
            self.backend.big_number("$3")
        );
        sqlx::query(&update).bind(now_ms()).bind(s.to_string()).bind(n0.to_string()).bind(run).execute(&mut **tx).await?;
        tracing::info!(run, s = %s, n0 = %n0, "run finished");
        Ok(())
    }
}

#[async_trait]
impl JobStore for SqlStore {
    async fn create_run(&self, spec: &RunSpec, classes: &[ClassSpec]) -> Result<RunId, StoreError> {
        if spec.redundancy == 0 || spec.redundancy > MAX_REDUNDANCY {
            return Err(StoreError::Invalid(format!(
                "the redundancy factor must be 1 to {MAX_REDUNDANCY}, not {}",
                spec.redundancy
            )));
        }
        if classes.is_empty() {
            return Err(StoreError::Invalid("a run needs at least one class".into()));
        }
        let mut ids = std::collections::HashSet::new();
        for class in classes {
            if let Err(error) = Band::parse(&class.representative) {
                return Err(StoreError::InvalidBand {
                    class_id: class.class_id,
                    representative: class.representative.clone(),
                    reason: error.to_string(),
                });
            }
            if class.size == 0 {
                return Err(StoreError::Invalid(format!("class {} has size 0", class.class_id)));
            }
            if !ids.insert(class.class_id) {
                return Err(StoreError::Invalid(format!("class {} is given twice", class.class_id)));
            }
        }
        if let Some(run) = self.find_run(spec).await? {
            let resumed = sqlx::query("UPDATE runs SET cancelled_at = NULL WHERE id = $1 AND cancelled_at IS NOT NULL")
                .bind(run)
                .execute(&self.pool)
                .await?;
            if resumed.rows_affected() > 0 {
                tracing::warn!(run, "a cancelled run was submitted again: it resumes");
            }
            return Ok(run);
        }

        let now = now_ms();
        let jobs = (classes.len() * 10) as i64;
        let mut tx = self.pool.begin().await?;
        let inserted = sqlx::query(
            "INSERT INTO runs (stage, counter, counter_version, redundancy, jobs_total, jobs_remaining, created_at)
             VALUES ($1, $2, $3, $4, $5, $5, $6) RETURNING id",
        )
        .bind(&spec.stage)
        .bind(&spec.counter)
        .bind(&spec.counter_version)
        .bind(i64::from(spec.redundancy))
        .bind(jobs)
        .bind(now)
        .fetch_one(&mut *tx)
        .await;
        let run: RunId = match inserted {
            Ok(row) => row.try_get(0)?,
            // Another coordinator created the same run first: use it.
            Err(sqlx::Error::Database(error)) if error.is_unique_violation() => {
                drop(tx);
                return self.find_run(spec).await?.ok_or_else(|| StoreError::Database(error.to_string()));
            }
            Err(error) => return Err(error.into()),
        };
        for chunk in classes.chunks(1000) {
            let mut sql = String::from("INSERT INTO classes (run_id, class_id, representative, size) VALUES ");
            for i in 0..chunk.len() {
                let p = i * 3 + 2;
                sql.push_str(&format!("{}($1, ${}, ${}, ${})", if i > 0 { ", " } else { "" }, p, p + 1, p + 2));
            }
            let mut query = sqlx::query(&sql).bind(run);
            for class in chunk {
                query = query.bind(i64::from(class.class_id)).bind(&class.representative).bind(class.size as i64);
            }
            query.execute(&mut *tx).await?;
        }
        let seeds = (0..10).map(|s| format!("SELECT {s} AS seed")).collect::<Vec<_>>().join(" UNION ALL ");
        sqlx::query(&format!(
            "INSERT INTO jobs (run_id, class_id, seed, created_at, updated_at)
             SELECT c.run_id, c.class_id, s.seed, $2, $2 FROM classes c CROSS JOIN ({seeds}) s
             WHERE c.run_id = $1 ORDER BY c.class_id, s.seed"
        ))
        .bind(run)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        tracing::info!(run, stage = %spec.stage, counter = %spec.counter, classes = classes.len(), jobs, "run created");
        Ok(run)
    }

    async fn list_runs(&self) -> Result<Vec<RunSummary>, StoreError> {
        self.runs_where("1 = 1", None).await
    }

    async fn run(&self, run: RunId) -> Result<RunSummary, StoreError> {
        self.runs_where("r.id = $1", Some(run)).await?.pop().ok_or(StoreError::UnknownRun(run))
    }


    async fn lease(&self, run: Option<RunId>, worker: &str, max: u32, ttl: Duration) -> Result<Vec<Lease>, StoreError> {
        crate::check_identity(worker)?;
        if max == 0 {
            return Ok(Vec::new());
        }
        if let Some(run) = run {
            self.run_facts(run).await?;
        }
        let now = now_ms();
        let held: i64 = sqlx::query(
            "SELECT COUNT(*) FROM jobs WHERE state = 'leased' AND lease_owner = $1 AND lease_expires_at >= $2",
        )
        .bind(worker)
        .bind(now)
        .fetch_one(&self.pool)
        .await?
        .try_get(0)?;
        let max = i64::from(max).min(i64::from(self.config.max_leases_per_worker) - held);
        if max <= 0 {
            return Ok(Vec::new());
        }
        let ttl = ttl.min(self.config.max_lease_lifetime);
        let salt = token_salt();
        let runs = sqlx::query(
            "SELECT id FROM runs WHERE finished_at IS NULL AND cancelled_at IS NULL AND ($1 < 0 OR id = $1)
             ORDER BY priority DESC, id",
        )
        .bind(run.unwrap_or(-1))
        .fetch_all(&self.pool)
        .await?;
        // Runs in priority order; in each, expired leases first (few), then
        // pending jobs in id order: short walks of the (run, state, id) index.
        let mut rows = Vec::new();
        'runs: for run in &runs {
            let run: RunId = run.try_get(0)?;
            for waiting in ["j.state = 'leased' AND j.lease_expires_at < $3", "j.state = 'pending'"] {
                let wanted = max - rows.len() as i64;
                if wanted <= 0 {
                    break 'runs;
                }
                let sql = format!(
                    "UPDATE jobs SET state = 'leased', attempt = attempt + 1, lease_owner = $1, lease_expires_at = $2,
                            lease_started_at = $3, updated_at = $3,
                            lease_token = $4 || '-' || CAST(id AS TEXT) || '-' || CAST(attempt + 1 AS TEXT)
                     WHERE {}
                     RETURNING id, run_id, class_id, seed, attempt, lease_token",
                    self.backend.id_among(&format!(
                        // The limit is literal: with a parameter there, Postgres's
                        // generic plan sorts every pending job of the run.
                        // An identity votes once per job and round. The check is
                        // a per-row index probe, made only for jobs with votes:
                        // as NOT EXISTS, Postgres hashes it from a scan of all results.
                        "SELECT j.id FROM jobs j
                         WHERE j.run_id = $5 AND {waiting}
                           AND CASE WHEN j.votes = 0 THEN 1 = 1
                                    ELSE (SELECT COUNT(*) FROM results x
                                          WHERE x.job_id = j.id AND x.worker = $1 AND x.round = j.round) = 0 END
                         ORDER BY j.id LIMIT {wanted} {}",
                        self.backend.skip_locked()
                    ))
                );
                rows.extend(
                    sqlx::query(&sql)
                        .bind(worker)
                        .bind(now + ttl.as_millis() as i64)
                        .bind(now)
                        .bind(&salt)
                        .bind(run)
                        .fetch_all(&self.pool)
                        .await?,
                );
            }
        }
        let mut leases = Vec::with_capacity(rows.len());
        for row in &rows {
            let run_id: RunId = row.try_get(1)?;
            let facts = self.run_facts(run_id).await?;
            let class_id = row.try_get::<i64, _>(2)? as u32;
            leases.push(Lease {
                job_id: row.try_get(0)?,
                run_id,
                class_id,
                band: facts.representatives.get(&class_id).cloned().unwrap_or_default(),
                seed: row.try_get::<i64, _>(3)? as u8,
                attempt: row.try_get::<i64, _>(4)? as u32,
                token: row.try_get(5)?,
                counter: facts.counter.clone(),
            });
        }
        leases.sort_by_key(|lease| lease.job_id);
        Ok(leases)
    }

    async fn heartbeat(&self, worker: &str, tokens: &[String], ttl: Duration) -> Result<HeartbeatOutcome, StoreError> {
        let mut outcome = HeartbeatOutcome::default();
        let now = now_ms();
        for chunk in tokens.chunks(1000) {
            let placeholders: Vec<String> = (0..chunk.len()).map(|i| format!("${}", i + 5)).collect();
            // A lease is extended while it is held, never past its maximum
            // lifetime, and never for a cancelled run.
            let sql = format!(
                "UPDATE jobs SET lease_expires_at = {}, updated_at = $2
                 WHERE state = 'leased' AND lease_owner = $3 AND lease_expires_at >= $2 AND lease_token IN ({})
                   AND lease_started_at + $4 > $2
                   AND run_id IN (SELECT id FROM runs WHERE cancelled_at IS NULL)
                 RETURNING lease_token",
                self.backend.least("$1", "lease_started_at + $4"),
                placeholders.join(", ")
            );
            let mut query = sqlx::query(&sql)
                .bind(now + ttl.as_millis() as i64)
                .bind(now)
                .bind(worker)
                .bind(self.config.max_lease_lifetime.as_millis() as i64);
            for token in chunk {
                query = query.bind(token);
            }
            let rows = query.fetch_all(&self.pool).await?;
            let extended: std::collections::HashSet<String> =
                rows.iter().map(|row| row.try_get::<String, _>(0)).collect::<Result<_, _>>()?;
            for token in chunk {
                if extended.contains(token) {
                    outcome.extended.push(token.clone());
                } else {
                    outcome.lost.push(token.clone());
                }
            }
        }
        Ok(outcome)
    }

    async fn complete_many(&self, completions: &[Completion]) -> Result<Vec<Result<CompleteOutcome, StoreError>>, StoreError> {
        self.complete_batch(completions).await
    }

    async fn recount(&self, job: JobId) -> Result<(), StoreError> {
        self.recount_job(job).await
    }

    async fn fail(&self, job: JobId, token: &str, worker: &str, reason: &str) -> Result<(), StoreError> {
        self.fail_job(job, token, worker, reason).await
    }

    async fn requeue(&self, run: RunId, job: Option<JobId>) -> Result<u64, StoreError> {
        self.requeue_jobs(run, job).await
    }

    async fn cancel_run(&self, run: RunId) -> Result<(), StoreError> {
        self.ensure_run(run).await?;
        let now = now_ms();
        let mut tx = self.pool.begin().await?;
        sqlx::query("UPDATE runs SET cancelled_at = $2 WHERE id = $1 AND cancelled_at IS NULL").bind(run).bind(now).execute(&mut *tx).await?;
        sqlx::query(
            "UPDATE jobs SET state = 'pending', lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL, updated_at = $2
             WHERE run_id = $1 AND state = 'leased'",
        )
        .bind(run)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        tracing::warn!(run, "run cancelled");
        Ok(())
    }

    async fn set_priority(&self, run: RunId, priority: i64) -> Result<(), StoreError> {
        self.ensure_run(run).await?;
        sqlx::query("UPDATE runs SET priority = $2 WHERE id = $1").bind(run).bind(priority).execute(&self.pool).await?;
        tracing::info!(run, priority, "run priority set");
        Ok(())
    }

    async fn progress(&self, run: RunId) -> Result<Progress, StoreError> {
        // Read from the run's counters and small index ranges, never a scan
        // of every job: progress is polled while the run is busiest.
        let run_row = self.ensure_run(run).await?;
        let mut progress = Progress { run_id: run, ..Progress::default() };
        progress.jobs_total = run_row.try_get::<i64, _>(4)? as u64;
        progress.done = progress.jobs_total - run_row.try_get::<i64, _>(5)? as u64;
        progress.failed = run_row.try_get::<i64, _>(6)? as u64;
        progress.conflicts = run_row.try_get::<i64, _>(1)? as u64;
        let now = now_ms();
        let leased = sqlx::query("SELECT COUNT(*) FROM jobs WHERE state = 'leased' AND run_id = $1")
            .bind(run)
            .fetch_one(&self.pool)
            .await?;
        progress.leased = leased.try_get::<i64, _>(0)? as u64;
        progress.pending = progress.jobs_total.saturating_sub(progress.done + progress.failed + progress.leased);
        progress.completions_counted = run_row.try_get::<i64, _>(7)?.to_string();
        let rejected = sqlx::query("SELECT COUNT(*) FROM rejections WHERE run_id = $1").bind(run).fetch_one(&self.pool).await?;
        progress.rejected = rejected.try_get::<i64, _>(0)? as u64;

        let recent = sqlx::query(
            // Results of every outcome: the (run_id, finished_at) index alone answers it.
            "SELECT COUNT(*), MIN(finished_at) FROM results WHERE run_id = $1 AND finished_at >= $2",
        )
        .bind(run)
        .bind(now - 60_000)
        .fetch_one(&self.pool)
        .await?;
        let recent_jobs: i64 = recent.try_get(0)?;
        if let Some(first) = recent.try_get::<Option<i64>, _>(1)? {
            let window = ((now - first) as f64 / 1e3).max(1.0);
            progress.jobs_per_second = recent_jobs as f64 / window;
        }
        let remaining = progress.jobs_total.saturating_sub(progress.done);
        if progress.jobs_per_second > 0.0 && remaining > 0 {
            progress.eta = Some(Duration::from_secs_f64(remaining as f64 / progress.jobs_per_second));
        }
        let workers = sqlx::query(
            "SELECT worker, jobs, completions, last_seen FROM worker_stats WHERE run_id = $1 ORDER BY worker",
        )
        .bind(run)
        .fetch_all(&self.pool)
        .await?;
        for row in &workers {
            progress.workers.push(WorkerProgress {
                worker: row.try_get(0)?,
                jobs: row.try_get::<i64, _>(1)? as u64,
                completions: row.try_get::<i64, _>(2)?.to_string(),
                last_seen_unix: row.try_get::<i64, _>(3)? / 1000,
            });
        }
        Ok(progress)
    }

    async fn total(&self, run: RunId) -> Result<RunTotal, StoreError> {
        let row = self.ensure_run(run).await?;
        let finished: Option<i64> = row.try_get(0)?;
        let conflicts: i64 = row.try_get(1)?;
        if finished.is_some() {
            let s = big(&row.try_get::<Option<String>, _>(2)?.unwrap_or_default())?;
            let n0 = big(&row.try_get::<Option<String>, _>(3)?.unwrap_or_default())?;
            self.recheck_final(run, &s, &n0).await?;
            return Ok(RunTotal { run_id: run, is_final: conflicts == 0, s: s.to_string(), n0: n0.to_string() });
        }
        let classes = sqlx::query("SELECT size, CAST(seed_sum AS TEXT) FROM classes WHERE run_id = $1")
            .bind(run)
            .fetch_all(&self.pool)
            .await?;
        let s = Self::exact_s(&classes)?;
        Ok(RunTotal { run_id: run, is_final: false, n0: n0_from_s(&s).to_string(), s: s.to_string() })
    }

    async fn class_totals(&self, run: RunId) -> Result<Vec<ClassTotal>, StoreError> {
        self.ensure_run(run).await?;
        let rows = sqlx::query(
            "SELECT class_id, representative, size, seeds_done, CAST(seed_sum AS TEXT) FROM classes
             WHERE run_id = $1 ORDER BY class_id",
        )
        .bind(run)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                let seeds_done = row.try_get::<i64, _>(3)? as u32;
                Ok(ClassTotal {
                    class_id: row.try_get::<i64, _>(0)? as u32,
                    representative: row.try_get(1)?,
                    size: row.try_get::<i64, _>(2)? as u64,
                    seeds_done,
                    seed_sum: big(&row.try_get::<String, _>(4)?)?.to_string(),
                    complete: seeds_done == 10,
                })
            })
            .collect()
    }

    async fn ping(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    async fn close(&self) {
        if self.backend == Backend::Sqlite {
            let _ = sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)").execute(&self.pool).await;
        }
        self.pool.close().await;
    }

    async fn create_token(&self, name: &str, role: Role, hash: &str) -> Result<(), StoreError> {
        self.insert_token(name, role, hash).await
    }

    async fn import_token(&self, name: &str, role: Role, hash: &str) -> Result<(), StoreError> {
        self.upsert_token(name, role, hash).await
    }

    async fn list_tokens(&self) -> Result<Vec<TokenRecord>, StoreError> {
        self.tokens_where("1 = 1", None).await
    }

    async fn revoke_token(&self, name: &str) -> Result<bool, StoreError> {
        self.revoke(name).await
    }

    async fn find_token(&self, hash: &str) -> Result<Option<TokenRecord>, StoreError> {
        Ok(self.tokens_where("t.hash = $1", Some(hash)).await?.pop())
    }

    async fn is_quarantined(&self, worker: &str) -> Result<bool, StoreError> {
        let row = sqlx::query("SELECT 1 FROM quarantine WHERE worker = $1").bind(worker).fetch_optional(&self.pool).await?;
        Ok(row.is_some())
    }

    async fn quarantined(&self) -> Result<Vec<QuarantineEntry>, StoreError> {
        self.quarantine_list().await
    }

    async fn release_quarantine(&self, worker: &str) -> Result<bool, StoreError> {
        let released = sqlx::query("DELETE FROM quarantine WHERE worker = $1").bind(worker).execute(&self.pool).await?;
        if released.rows_affected() > 0 {
            tracing::warn!(worker, "released from quarantine");
        }
        Ok(released.rows_affected() > 0)
    }
}
