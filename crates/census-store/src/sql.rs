//! The one implementation of [`JobStore`], on Postgres or SQLite through
//! sqlx's `Any` driver. The SQL is shared; the few places where the two
//! dialects differ are the methods of [`Backend`].

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, Once};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use census_math::total::{n0_from_s, s_from_classes};
use census_math::{Band, MAX_SEED_COUNT};
use num_bigint::BigUint;
use sqlx::any::{AnyPoolOptions, AnyRow};
use sqlx::{AnyPool, Row};

use crate::{
    ClassSpec, ClassTotal, CompleteOutcome, Completion, HeartbeatOutcome, JobId, JobStore, Lease, Progress, RunId,
    RunSpec, RunSummary, RunTotal, StoreConfig, StoreError, WorkerProgress,
};

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

/// A lease token prefix that differs between lease calls; the job id and
/// attempt number complete it, so two attempts never share a token.
fn token_salt() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0));
    format!("{:016x}", hasher.finish())
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
                .acquire_timeout(Duration::from_secs(30))
                .connect(url)
                .await
                .map_err(|e| failed(&e))?;
            (Backend::Postgres, pool)
        } else {
            let path = url.strip_prefix("sqlite://").or_else(|| url.strip_prefix("sqlite:")).unwrap_or(url);
            if path.is_empty() {
                return Err(failed(&"no file name given"));
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
                    r.finished_at, r.open_conflicts
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

/// A job as a batch of completions sees it.
struct JobRow {
    run: RunId,
    class: i64,
    state: String,
    attempt: i64,
    token: Option<String>,
    count: Option<i64>,
    votes: i64,
    redundancy: i64,
    conflict: bool,
}

/// One row of the append-only results table.
struct ResultRow {
    job: JobId,
    run: RunId,
    attempt: i64,
    worker: String,
    count: i64,
    elapsed_ms: f64,
    counter_version: String,
    outcome: &'static str,
}

/// What a batch of completions changes outside the job rows.
#[derive(Default)]
struct Deltas {
    /// Jobs newly flagged with a conflict.
    conflicted: Vec<JobId>,
    /// Jobs failed by a disagreement between redundant workers.
    failed: Vec<JobId>,
    /// (run, class) -> (count added, seeds done added)
    classes: BTreeMap<(RunId, i64), (u64, i64)>,
    /// run -> (jobs done, conflicts opened, failed jobs added, count of the jobs done)
    runs: BTreeMap<RunId, (i64, i64, i64, i64)>,
    /// (run, worker) -> (results accepted, completions)
    workers: BTreeMap<(RunId, String), (i64, i64)>,
}

#[async_trait]
impl JobStore for SqlStore {
    async fn create_run(&self, spec: &RunSpec, classes: &[ClassSpec]) -> Result<RunId, StoreError> {
        if spec.redundancy == 0 {
            return Err(StoreError::Invalid("the redundancy factor must be at least 1".into()));
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
        if worker.is_empty() {
            return Err(StoreError::Invalid("a lease needs a worker id".into()));
        }
        if max == 0 {
            return Ok(Vec::new());
        }
        if let Some(run) = run {
            self.run_facts(run).await?;
        }
        let now = now_ms();
        let salt = token_salt();
        // Expired leases first (few), then pending jobs in id order; each is
        // a short walk of the (state, id) index, however many jobs are done.
        let mut rows = Vec::new();
        for waiting in ["j.state = 'leased' AND j.lease_expires_at < $3", "j.state = 'pending'"] {
            let wanted = i64::from(max) - rows.len() as i64;
            if wanted <= 0 {
                break;
            }
            let sql = format!(
                "UPDATE jobs SET state = 'leased', attempt = attempt + 1, lease_owner = $1, lease_expires_at = $2,
                        updated_at = $3, lease_token = $4 || '-' || CAST(id AS TEXT) || '-' || CAST(attempt + 1 AS TEXT)
                 WHERE {}
                 RETURNING id, run_id, class_id, seed, attempt, lease_token",
                self.backend.id_among(&format!(
                    // The limit is literal: with a parameter there, Postgres's
                    // generic plan sorts every pending job of the run.
                    // A worker votes once per job. The check is a per-row
                    // index probe, made only for jobs with votes: as NOT
                    // EXISTS, Postgres hashes it from a scan of all results.
                    "SELECT j.id FROM jobs j
                     WHERE {waiting}
                       AND j.run_id IN (SELECT r.id FROM runs r WHERE r.finished_at IS NULL AND ($5 < 0 OR r.id = $5))
                       AND CASE WHEN j.votes = 0 THEN 1 = 1
                                ELSE (SELECT COUNT(*) FROM results x WHERE x.job_id = j.id AND x.worker = $1) = 0 END
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
                    .bind(run.unwrap_or(-1))
                    .fetch_all(&self.pool)
                    .await?,
            );
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
            let placeholders: Vec<String> = (0..chunk.len()).map(|i| format!("${}", i + 4)).collect();
            let sql = format!(
                "UPDATE jobs SET lease_expires_at = $1, updated_at = $2
                 WHERE state = 'leased' AND lease_owner = $3 AND lease_token IN ({}) RETURNING lease_token",
                placeholders.join(", ")
            );
            let mut query = sqlx::query(&sql).bind(now + ttl.as_millis() as i64).bind(now).bind(worker);
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
        let mut outcomes: Vec<Option<Result<CompleteOutcome, StoreError>>> = (0..completions.len()).map(|_| None).collect();
        let now = now_ms();
        let mut tx = self.pool.begin().await?;

        // Lock the batch's jobs in id order (so concurrent batches cannot
        // deadlock), then decide every completion in Rust, then write in bulk.
        let mut ids: Vec<JobId> = completions.iter().filter(|c| c.count <= MAX_SEED_COUNT).map(|c| c.job_id).collect();
        ids.sort_unstable();
        ids.dedup();
        let mut jobs: HashMap<JobId, JobRow> = HashMap::with_capacity(ids.len());
        for chunk in ids.chunks(500) {
            let placeholders: Vec<String> = (1..=chunk.len()).map(|i| format!("${i}")).collect();
            let sql = format!(
                "SELECT j.id, j.run_id, j.class_id, j.state, j.attempt, j.lease_token, j.count, j.votes, r.redundancy, j.conflict
                 FROM jobs j JOIN runs r ON r.id = j.run_id WHERE j.id IN ({}) ORDER BY j.id {}",
                placeholders.join(", "),
                self.backend.for_update()
            );
            let mut query = sqlx::query(&sql);
            for id in chunk {
                query = query.bind(*id);
            }
            for row in query.fetch_all(&mut *tx).await? {
                let job = JobRow {
                    run: row.try_get(1)?,
                    class: row.try_get(2)?,
                    state: row.try_get(3)?,
                    attempt: row.try_get(4)?,
                    token: row.try_get(5)?,
                    count: row.try_get(6)?,
                    votes: row.try_get(7)?,
                    redundancy: row.try_get(8)?,
                    conflict: row.try_get::<i64, _>(9)? != 0,
                };
                jobs.insert(row.try_get(0)?, job);
            }
        }

        let mut deltas = Deltas::default();
        let mut results: Vec<ResultRow> = Vec::new();
        let mut accepted: Vec<(JobId, &'static str, i64)> = Vec::new();
        for (i, c) in completions.iter().enumerate() {
            if c.count > MAX_SEED_COUNT {
                outcomes[i] = Some(Err(StoreError::AbsurdCount { job: c.job_id, count: c.count, max: MAX_SEED_COUNT }));
                continue;
            }
            let Some(job) = jobs.get_mut(&c.job_id) else {
                outcomes[i] = Some(Err(StoreError::UnknownJob(c.job_id)));
                continue;
            };
            let count = c.count as i64;
            let mut result = |outcome: &'static str, job: &JobRow| {
                results.push(ResultRow {
                    job: c.job_id,
                    run: job.run,
                    attempt: job.attempt,
                    worker: c.worker.clone(),
                    count,
                    elapsed_ms: c.elapsed.as_secs_f64() * 1e3,
                    counter_version: c.counter_version.clone(),
                    outcome,
                })
            };
            if job.state == "done" {
                if job.count == Some(count) {
                    outcomes[i] = Some(Ok(CompleteOutcome::AlreadyDone));
                } else {
                    result("conflict", job);
                    if !job.conflict {
                        job.conflict = true;
                        deltas.conflicted.push(c.job_id);
                        deltas.runs.entry(job.run).or_default().1 += 1;
                    }
                    tracing::warn!(job = c.job_id, stored = job.count, reported = count, worker = %c.worker, "conflicting count");
                    outcomes[i] = Some(Ok(CompleteOutcome::Conflict { stored: job.count.unwrap_or(0) as u64 }));
                }
                continue;
            }
            if job.token.as_deref() != Some(c.token.as_str()) {
                outcomes[i] = Some(Err(StoreError::StaleToken { job: c.job_id }));
                continue;
            }
            let was_failed = job.state == "failed";
            if job.votes > 0 && job.count != Some(count) {
                // Redundant workers disagree: the job is flagged and failed until recounted.
                result("conflict", job);
                deltas.conflicted.push(c.job_id);
                deltas.failed.push(c.job_id);
                let run_delta = deltas.runs.entry(job.run).or_default();
                run_delta.1 += 1;
                if !was_failed {
                    run_delta.2 += 1;
                }
                job.state = "failed".into();
                job.conflict = true;
                outcomes[i] = Some(Ok(CompleteOutcome::Conflict { stored: job.count.unwrap_or(0) as u64 }));
                continue;
            }
            let done = job.votes + 1 >= job.redundancy;
            result(if done { "accepted" } else { "vote" }, job);
            let tally = deltas.workers.entry((job.run, c.worker.clone())).or_default();
            tally.0 += 1;
            tally.1 += count;
            if was_failed {
                deltas.runs.entry(job.run).or_default().2 -= 1;
            }
            if done {
                let class_delta = deltas.classes.entry((job.run, job.class)).or_default();
                class_delta.0 += c.count;
                class_delta.1 += 1;
                let run_delta = deltas.runs.entry(job.run).or_default();
                run_delta.0 += 1;
                run_delta.3 += count;
            }
            accepted.push((c.job_id, if done { "done" } else { "pending" }, count));
            job.state = if done { "done".into() } else { "pending".into() };
            job.count = Some(count);
            job.votes += 1;
            // A second report with the same token in this batch is a duplicate, not a vote.
            if !done {
                job.token = None;
            }
            outcomes[i] = Some(Ok(CompleteOutcome::Recorded));
        }

        for chunk in results.chunks(300) {
            let mut sql = String::from(
                "INSERT INTO results (job_id, run_id, attempt, worker, count, elapsed_ms, counter_version, outcome, finished_at) VALUES ",
            );
            for i in 0..chunk.len() {
                let p = i * 8;
                sql.push_str(&format!(
                    "{}(${}, ${}, ${}, ${}, ${}, ${}, ${}, ${}, $0)",
                    if i > 0 { ", " } else { "" },
                    p + 2, p + 3, p + 4, p + 5, p + 6, p + 7, p + 8, p + 9
                ));
            }
            // $1 is the time; placeholders are renumbered so it comes first.
            let sql = sql.replace("$0)", "$1)");
            let mut query = sqlx::query(&sql).bind(now);
            for r in chunk {
                query = query
                    .bind(r.job)
                    .bind(r.run)
                    .bind(r.attempt)
                    .bind(r.worker.clone())
                    .bind(r.count)
                    .bind(r.elapsed_ms)
                    .bind(r.counter_version.clone())
                    .bind(r.outcome);
            }
            query.execute(&mut *tx).await?;
        }
        for chunk in accepted.chunks(500) {
            let values: Vec<String> =
                (0..chunk.len()).map(|i| format!("(${}, ${}, ${})", i * 3 + 2, i * 3 + 3, i * 3 + 4)).collect();
            let sql = format!(
                "UPDATE jobs SET state = v.column2, count = v.column3, votes = votes + 1, lease_owner = NULL,
                        lease_expires_at = NULL, updated_at = $1
                 FROM (VALUES {}) AS v WHERE jobs.id = v.column1",
                values.join(", ")
            );
            let mut query = sqlx::query(&sql).bind(now);
            for (job, state, count) in chunk {
                query = query.bind(*job).bind(*state).bind(*count);
            }
            query.execute(&mut *tx).await?;
        }
        for job in &deltas.conflicted {
            sqlx::query("UPDATE jobs SET conflict = 1, updated_at = $2 WHERE id = $1").bind(*job).bind(now).execute(&mut *tx).await?;
        }
        for job in &deltas.failed {
            sqlx::query("UPDATE jobs SET state = 'failed', lease_owner = NULL, updated_at = $2 WHERE id = $1")
                .bind(*job)
                .bind(now)
                .execute(&mut *tx)
                .await?;
        }
        for (&(run, class), &(count, seeds)) in &deltas.classes {
            sqlx::query(
                "UPDATE classes SET seed_sum = seed_sum + $3, seeds_done = seeds_done + $4 WHERE run_id = $1 AND class_id = $2",
            )
            .bind(run)
            .bind(class)
            .bind(count as i64)
            .bind(seeds)
            .execute(&mut *tx)
            .await?;
        }
        for ((run, worker), &(jobs, completions)) in &deltas.workers {
            sqlx::query(
                "INSERT INTO worker_stats (run_id, worker, jobs, completions, last_seen) VALUES ($1, $2, $3, $4, $5)
                 ON CONFLICT (run_id, worker) DO UPDATE SET jobs = worker_stats.jobs + excluded.jobs,
                     completions = worker_stats.completions + excluded.completions, last_seen = excluded.last_seen",
            )
            .bind(*run)
            .bind(worker.clone())
            .bind(jobs)
            .bind(completions)
            .bind(now)
            .execute(&mut *tx)
            .await?;
        }
        for (&run, &(done, conflicts, failed, counted)) in &deltas.runs {
            sqlx::query(
                "UPDATE runs SET jobs_remaining = jobs_remaining - $2, open_conflicts = open_conflicts + $3,
                        failed_jobs = failed_jobs + $4, counted = counted + $5 WHERE id = $1",
            )
            .bind(run)
            .bind(done)
            .bind(conflicts)
            .bind(failed)
            .bind(counted)
            .execute(&mut *tx)
            .await?;
            if done > 0 {
                self.finish_if_complete(&mut tx, run).await?;
            }
        }
        tx.commit().await?;
        Ok(outcomes.into_iter().map(|o| o.expect("every completion has an outcome")).collect())
    }

    async fn recount(&self, job: JobId) -> Result<(), StoreError> {
        let now = now_ms();
        let mut tx = self.pool.begin().await?;
        let row = sqlx::query(&format!(
            "SELECT j.state, j.count, j.conflict, j.run_id, j.class_id FROM jobs j WHERE j.id = $1 {}",
            self.backend.for_update()
        ))
        .bind(job)
        .fetch_optional(&mut *tx)
        .await?
        .ok_or(StoreError::UnknownJob(job))?;
        let state: String = row.try_get(0)?;
        let count: Option<i64> = row.try_get(1)?;
        let run: RunId = row.try_get(3)?;
        let class: i64 = row.try_get(4)?;
        if row.try_get::<i64, _>(2)? == 0 {
            return Err(StoreError::Invalid(format!("job {job} has no conflict to resolve")));
        }
        let (done, failed) = (state == "done", state == "failed");
        if done {
            sqlx::query("UPDATE classes SET seed_sum = seed_sum - $3, seeds_done = seeds_done - 1 WHERE run_id = $1 AND class_id = $2")
                .bind(run)
                .bind(class)
                .bind(count.unwrap_or(0))
                .execute(&mut *tx)
                .await?;
        }
        sqlx::query(
            "UPDATE runs SET open_conflicts = open_conflicts - 1, jobs_remaining = jobs_remaining + $2,
                    failed_jobs = failed_jobs - $3, counted = counted - $4, finished_at = NULL, s = NULL, n0 = NULL
             WHERE id = $1",
        )
        .bind(run)
        .bind(i64::from(done))
        .bind(i64::from(failed))
        .bind(if done { count.unwrap_or(0) } else { 0 })
        .execute(&mut *tx)
        .await?;
        sqlx::query(
            "UPDATE jobs SET state = 'pending', count = NULL, votes = 0, conflict = 0, lease_owner = NULL,
                    lease_expires_at = NULL, updated_at = $2 WHERE id = $1",
        )
        .bind(job)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        tracing::warn!(job, run, "conflict resolved by recounting the job");
        Ok(())
    }

    async fn fail(&self, job: JobId, token: &str, worker: &str, reason: &str) -> Result<(), StoreError> {
        let now = now_ms();
        let mut tx = self.pool.begin().await?;
        let row = sqlx::query(&format!(
            "SELECT j.state, j.attempt, j.lease_token, j.run_id FROM jobs j WHERE j.id = $1 {}",
            self.backend.for_update()
        ))
        .bind(job)
        .fetch_optional(&mut *tx)
        .await?
        .ok_or(StoreError::UnknownJob(job))?;
        let state: String = row.try_get(0)?;
        let attempt: i64 = row.try_get(1)?;
        let current: Option<String> = row.try_get(2)?;
        let run: RunId = row.try_get(3)?;
        if state != "leased" || current.as_deref() != Some(token) {
            return Err(StoreError::StaleToken { job });
        }
        sqlx::query("INSERT INTO failures (job_id, attempt, worker, reason, failed_at) VALUES ($1, $2, $3, $4, $5)")
            .bind(job)
            .bind(attempt)
            .bind(worker)
            .bind(reason)
            .bind(now)
            .execute(&mut *tx)
            .await?;
        let exhausted = attempt >= i64::from(self.config.max_attempts);
        sqlx::query("UPDATE jobs SET state = $2, lease_owner = NULL, lease_expires_at = NULL, updated_at = $3 WHERE id = $1")
            .bind(job)
            .bind(if exhausted { "failed" } else { "pending" })
            .bind(now)
            .execute(&mut *tx)
            .await?;
        if exhausted {
            sqlx::query("UPDATE runs SET failed_jobs = failed_jobs + 1 WHERE id = $1").bind(run).execute(&mut *tx).await?;
            tracing::error!(job, attempt, reason, "job failed for good");
        } else {
            tracing::warn!(job, attempt, reason, "job failed; it will be retried");
        }
        tx.commit().await?;
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
            let s = big(&row.try_get::<String, _>(2)?)?;
            let n0 = big(&row.try_get::<String, _>(3)?)?;
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
}
