//! The queue: leasing pending (or expired) jobs and extending leases by
//! heartbeat, within the lease caps and the maximum lease lifetime.

use std::time::Duration;

use sqlx::FromRow;

use super::{SqlStore, now_ms, read_census, token_salt};
use crate::{Census, HeartbeatOutcome, Lease, RunId, StoreError};

/// The assignments that retire a job's lease: no owner, no token, no
/// expiry. Every statement that moves a job out of its lease (a decided
/// report, a failure, a requeue, a recount, a cancelled run, a quarantined
/// holder) sets them, so the old token is refused from then on.
pub(super) const RETIRE_LEASE: &str = "lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL";

/// A job just leased, as its `UPDATE ... RETURNING` gives it.
#[derive(FromRow)]
struct LeasedRow {
    id: crate::JobId,
    run_id: RunId,
    key: String,
    attempt: i64,
    lease_token: String,
}

/// A job's run and the run's census.
#[derive(FromRow)]
struct JobCensusRow {
    job_id: crate::JobId,
    run_id: RunId,
    census: String,
}

/// Whose leases [`SqlStore::release_leases`] gives back to the queue.
pub(super) enum HeldBy<'a> {
    /// Every lease of a run (it is cancelled).
    Run(RunId),
    /// Every lease of an identity (it is quarantined).
    Identity(&'a str),
}

impl SqlStore {
    /// The longest a lease of a run lives, heartbeated: the coordinator's
    /// limit, or the run's own (`runs.max_lease_ms`, its census's
    /// [`Census::longest_lease`], recorded when it was created) where that
    /// is longer. So an operator who raises `--max-lease-lifetime` raises
    /// it for every run.
    fn run_lease_lifetime(&self, max_lease_ms: Option<i64>) -> Duration {
        let own = Duration::from_millis(max_lease_ms.unwrap_or(0).max(0) as u64);
        own.max(self.config.max_lease_lifetime)
    }

    pub(super) async fn lease_jobs(
        &self,
        run: Option<RunId>,
        worker: &str,
        max: u32,
        ttl: Duration,
    ) -> Result<Vec<Lease>, StoreError> {
        crate::check_identity(worker)?;
        if max == 0 {
            return Ok(Vec::new());
        }
        if let Some(run) = run {
            self.run_facts(run).await?;
        }
        let now = now_ms();
        // Counting the identity's leases and adding to them is one step
        // under its lock: concurrent calls of one identity cannot each see
        // room under the cap.
        let mut tx = self.pool.begin().await?;
        self.lock_identities(&mut tx, [worker]).await?;
        let quarantined =
            sqlx::query("SELECT 1 FROM quarantine WHERE worker = $1").bind(worker).fetch_optional(&mut *tx).await?;
        if quarantined.is_some() {
            return Ok(Vec::new());
        }
        let held: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM jobs WHERE state = 'leased' AND lease_owner = $1 AND lease_expires_at >= $2",
        )
        .bind(worker)
        .bind(now)
        .fetch_one(&mut *tx)
        .await?;
        let max = i64::from(max).min(i64::from(self.config.max_leases_per_worker) - held);
        if max <= 0 {
            return Ok(Vec::new());
        }
        let salt = token_salt();
        let runs: Vec<(RunId, Option<i64>)> = sqlx::query_as(
            "SELECT id, max_lease_ms FROM runs WHERE finished_at IS NULL AND cancelled_at IS NULL AND ($1 < 0 OR id = $1)
             ORDER BY priority DESC, id",
        )
        .bind(run.unwrap_or(-1))
        .fetch_all(&mut *tx)
        .await?;
        // Runs in priority order; in each, expired leases first (few), then
        // pending jobs in id order: short walks of the (run, state, id) index.
        let mut rows: Vec<LeasedRow> = Vec::new();
        'runs: for (run, max_lease_ms) in runs {
            let ttl = ttl.min(self.run_lease_lifetime(max_lease_ms));
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
                     RETURNING id, run_id, key, attempt, lease_token",
                    self.backend.id_among(&format!(
                        // The limit is literal: with a parameter there, Postgres's
                        // generic plan sorts every pending job of the run.
                        "SELECT j.id FROM jobs j
                         WHERE j.run_id = $5 AND {waiting} AND {}
                         ORDER BY j.id LIMIT {wanted} {}",
                        self.open_to("$1"),
                        self.backend.skip_locked()
                    ))
                );
                rows.extend(
                    sqlx::query_as(&sql)
                        .bind(worker)
                        .bind(now + ttl.as_millis() as i64)
                        .bind(now)
                        .bind(&salt)
                        .bind(run)
                        .fetch_all(&mut *tx)
                        .await?,
                );
            }
        }
        tx.commit().await?;
        let mut leases = Vec::with_capacity(rows.len());
        for row in rows {
            leases.push(Lease {
                job_id: row.id,
                run_id: row.run_id,
                census: self.run_facts(row.run_id).await?.census,
                key: row.key,
                attempt: row.attempt as u32,
                token: row.lease_token,
            });
        }
        leases.sort_by_key(|lease| lease.job_id);
        Ok(leases)
    }

    /// The condition that job `j` may be handed to the identity bound at
    /// `worker`: it has not voted on the job this round (an identity votes
    /// once per job and round), and has not failed it `max_attempts` times
    /// since it was last requeued. Each check is a per-row index probe,
    /// made only for jobs with votes or failures: as NOT EXISTS, Postgres
    /// hashes it from a scan of all results.
    fn open_to(&self, worker: &str) -> String {
        format!(
            "CASE WHEN j.votes = 0 THEN 1 = 1
                  ELSE (SELECT COUNT(*) FROM results x
                        WHERE x.job_id = j.id AND x.worker = {worker} AND x.round = j.round) = 0 END
             AND CASE WHEN j.failures = 0 THEN 1 = 1
                  ELSE (SELECT COUNT(*) FROM failures f
                        WHERE f.job_id = j.id AND f.worker = {worker} AND f.epoch = j.failure_epoch) < {} END",
            self.config.max_attempts.max(1)
        )
    }

    pub(super) async fn work_left_for(&self, worker: &str, run: Option<RunId>) -> Result<bool, StoreError> {
        let quarantined =
            sqlx::query("SELECT 1 FROM quarantine WHERE worker = $1").bind(worker).fetch_optional(&self.pool).await?;
        if quarantined.is_some() {
            return Ok(false);
        }
        let runs: Vec<RunId> = sqlx::query_scalar(
            "SELECT id FROM runs WHERE finished_at IS NULL AND cancelled_at IS NULL AND ($1 < 0 OR id = $1) ORDER BY id",
        )
        .bind(run.unwrap_or(-1))
        .fetch_all(&self.pool)
        .await?;
        for state in ["pending", "leased"] {
            let sql = format!(
                "SELECT j.id FROM jobs j WHERE j.run_id = $2 AND j.state = '{state}' AND {} LIMIT 1",
                self.open_to("$1")
            );
            for &run in &runs {
                if sqlx::query(&sql).bind(worker).bind(run).fetch_optional(&self.pool).await?.is_some() {
                    return Ok(true);
                }
            }
        }
        Ok(false)
    }

    /// Puts the leased jobs of a run or of an identity back in the queue,
    /// their leases retired ([`RETIRE_LEASE`]), inside the caller's
    /// transaction.
    pub(super) async fn release_leases(
        &self,
        tx: &mut sqlx::Transaction<'_, sqlx::Any>,
        held_by: HeldBy<'_>,
        now: i64,
    ) -> Result<(), StoreError> {
        let holder = match held_by {
            HeldBy::Run(_) => "run_id = $1",
            HeldBy::Identity(_) => "lease_owner = $1",
        };
        let sql = format!(
            "UPDATE jobs SET state = 'pending', {RETIRE_LEASE}, updated_at = $2 WHERE state = 'leased' AND {holder}"
        );
        let query = match held_by {
            HeldBy::Run(run) => sqlx::query(&sql).bind(run),
            HeldBy::Identity(worker) => sqlx::query(&sql).bind(worker),
        };
        query.bind(now).execute(&mut **tx).await?;
        Ok(())
    }

    pub(super) async fn job_censuses(
        &self,
        jobs: &[crate::JobId],
    ) -> Result<std::collections::HashMap<crate::JobId, Census>, StoreError> {
        let mut censuses = std::collections::HashMap::with_capacity(jobs.len());
        let mut connection = self.pool.acquire().await?;
        let rows = self
            .select_by_ids(&mut connection, jobs, |ids| {
                format!(
                    "SELECT j.id AS job_id, r.id AS run_id, r.census FROM jobs j JOIN runs r ON r.id = j.run_id
                     WHERE j.id IN ({ids})"
                )
            })
            .await?;
        for row in &rows {
            let row = JobCensusRow::from_row(row)?;
            censuses.insert(row.job_id, read_census(row.run_id, &row.census)?);
        }
        Ok(censuses)
    }

    pub(super) async fn extend_leases(
        &self,
        worker: &str,
        tokens: &[String],
        ttl: Duration,
    ) -> Result<HeartbeatOutcome, StoreError> {
        let mut outcome = HeartbeatOutcome::default();
        let now = now_ms();
        for chunk in tokens.chunks(self.backend.rows_per_statement(1000, 1)) {
            let placeholders: Vec<String> = (0..chunk.len()).map(|i| format!("${}", i + 5)).collect();
            // A lease is extended while it is held, never past its maximum
            // lifetime (the coordinator's, or its run's own where that is
            // longer: `run_lease_lifetime`), and never for a cancelled run.
            let lifetime = self
                .backend
                .greatest("$4", "COALESCE((SELECT r.max_lease_ms FROM runs r WHERE r.id = jobs.run_id), 0)");
            let sql = format!(
                "UPDATE jobs SET lease_expires_at = {}, updated_at = $2
                 WHERE state = 'leased' AND lease_owner = $3 AND lease_expires_at >= $2 AND lease_token IN ({})
                   AND lease_started_at + {lifetime} > $2
                   AND run_id IN (SELECT id FROM runs WHERE cancelled_at IS NULL)
                 RETURNING lease_token",
                self.backend.least("$1", &format!("lease_started_at + {lifetime}")),
                placeholders.join(", ")
            );
            let mut query = sqlx::query_scalar(&sql)
                .bind(now + ttl.as_millis() as i64)
                .bind(now)
                .bind(worker)
                .bind(self.config.max_lease_lifetime.as_millis() as i64);
            for token in chunk {
                query = query.bind(token);
            }
            let extended: std::collections::HashSet<String> = query.fetch_all(&self.pool).await?.into_iter().collect();
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
}
