//! The queue in SQL: leasing pending (or expired) jobs along the (run,
//! state, id) index (a run of stages: the (run, state, stage, id) index of
//! its jobs), the lowest stage holding a job in some state, extending
//! leases, releasing them.

use std::collections::HashSet;

use async_trait::async_trait;
use sqlx::FromRow;

use super::{Db, LeaseColumns, SqlBackend, SqlTx, placeholders};
use crate::backend::{
    ExtendLeases, HeldBy, JobState, LeaseJobs, LeaseRecord, LeasedJob, LowestStages, OpenRun, OpenTo, QueueStorage,
    Waiting,
};
use crate::{JobId, RunId, StoreError};

/// The assignments that retire a job's lease: no owner, no token, no
/// expiry. Every statement that moves a job out of its lease (a decided
/// report, a failure, a requeue, a recount, a cancelled run, a quarantined
/// holder) sets them, so the old token is refused from then on.
pub(super) const RETIRE_LEASE: &str = "lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL";

/// A job just leased, as its `UPDATE ... RETURNING` gives it.
#[derive(FromRow)]
struct LeasedRow {
    id: JobId,
    run_id: RunId,
    key: String,
    attempt: i64,
    lease_token: String,
}

/// An open run.
#[derive(FromRow)]
struct OpenRunRow {
    id: RunId,
    max_lease_ms: Option<i64>,
}

/// A state's lowest stage in a run.
#[derive(FromRow)]
struct LowestRow {
    state: String,
    stage: Option<i64>,
}

/// A job's lease, as fencing reads it.
#[derive(FromRow)]
struct FenceRow {
    id: JobId,
    run_id: RunId,
    attempt: i64,
    #[sqlx(flatten)]
    lease: LeaseColumns,
}

/// The condition that job `j` is open to the identity bound at `worker`
/// ([`OpenTo`]). Each check is a per-row index probe, made only for jobs
/// with votes or failures: as NOT EXISTS, Postgres hashes it from a scan
/// of all results.
fn open_to(worker: &str, max_failures: u32) -> String {
    format!(
        "CASE WHEN j.votes = 0 THEN 1 = 1
              ELSE (SELECT COUNT(*) FROM results x
                    WHERE x.job_id = j.id AND x.worker = {worker} AND x.round = j.round) = 0 END
         AND CASE WHEN j.failures = 0 THEN 1 = 1
              ELSE (SELECT COUNT(*) FROM failures f
                    WHERE f.job_id = j.id AND f.worker = {worker} AND f.epoch = j.failure_epoch) < {max_failures} END"
    )
}

#[async_trait]
impl QueueStorage for SqlBackend {
    async fn open_runs(&self, tx: Option<&mut SqlTx>, run: Option<RunId>) -> Result<Vec<OpenRun>, StoreError> {
        let query = sqlx::query_as::<_, OpenRunRow>(
            "SELECT id, max_lease_ms FROM runs WHERE finished_at IS NULL AND cancelled_at IS NULL AND ($1 < 0 OR id = $1)
             ORDER BY priority DESC, id",
        )
        .bind(run.unwrap_or(-1));
        let rows = match tx {
            Some(tx) => query.fetch_all(&mut **tx).await.db()?,
            None => query.fetch_all(&self.pool).await.db()?,
        };
        Ok(rows.into_iter().map(|row| OpenRun { id: row.id, max_lease_ms: row.max_lease_ms }).collect())
    }

    async fn held_leases(&self, tx: &mut SqlTx, worker: &str, run: Option<RunId>, now: i64) -> Result<i64, StoreError> {
        sqlx::query_scalar(
            "SELECT COUNT(*) FROM jobs WHERE state = 'leased' AND lease_owner = $1 AND lease_expires_at >= $2
             AND ($3 < 0 OR run_id = $3)",
        )
        .bind(worker)
        .bind(now)
        .bind(run.unwrap_or(-1))
        .fetch_one(&mut **tx)
        .await
        .db()
    }

    async fn leases_counted(&self, tx: &mut SqlTx, worker: &str) -> Result<i64, StoreError> {
        sqlx::query_scalar("SELECT CAST(COALESCE(SUM(leased), 0) AS BIGINT) FROM owner_leases WHERE owner = $1")
            .bind(worker)
            .fetch_one(&mut **tx)
            .await
            .db()
    }

    async fn lease_jobs(&self, tx: &mut SqlTx, lease: &LeaseJobs<'_>) -> Result<Vec<LeasedJob>, StoreError> {
        // Expired leases along their own index, oldest first (migration
        // jobs_lease_expiry): a run's leased rows may be hundreds of
        // thousands, its expired ones are few. Pending jobs in id order.
        // Pending jobs from the run's front (`store/fronts.rs`), past the
        // entries earlier leases left in the index.
        let (waiting, order) = match lease.waiting {
            // The identity's own leases only once they expired before $6
            // (another identity waits: `store/shares.rs`).
            Waiting::Expired if lease.own_expired_by.is_some() => (
                "j.run_id = $5 AND j.state = 'leased' AND j.lease_expires_at < $3
                 AND (j.lease_owner <> $1 OR j.lease_expires_at < $6)"
                    .to_string(),
                "j.lease_expires_at, j.id",
            ),
            Waiting::Expired => (
                "j.run_id = $5 AND j.state = 'leased' AND j.lease_expires_at < $3".to_string(),
                "j.lease_expires_at, j.id",
            ),
            Waiting::Pending => self.dialect.queue_scan("$5", "pending", Some("$6"), lease.stage.is_some()),
        };
        // Literal like the limit: the stage picks the index of staged jobs.
        let stage = lease.stage.map_or(String::new(), |stage| format!("AND j.stage = {stage}"));
        let sql = format!(
            "UPDATE jobs SET state = 'leased', attempt = attempt + 1, lease_owner = $1, lease_expires_at = $2,
                    lease_started_at = $3, updated_at = $3,
                    lease_token = $4 || '-' || CAST(id AS TEXT) || '-' || CAST(attempt + 1 AS TEXT)
             WHERE {}
             RETURNING id, run_id, key, attempt, lease_token",
            self.dialect.id_among(&format!(
                // The limit is literal: with a parameter there, Postgres's
                // generic plan sorts every pending job of the run.
                "SELECT j.id FROM jobs j
                 WHERE {waiting} {stage} AND {}
                 ORDER BY {order} LIMIT {} {}",
                open_to("$1", lease.max_failures),
                lease.wanted,
                self.dialect.skip_locked()
            ))
        );
        let mut query = sqlx::query_as::<_, LeasedRow>(&sql)
            .bind(lease.worker)
            .bind(lease.expires_at)
            .bind(lease.now)
            .bind(lease.token_salt)
            .bind(lease.run);
        match (lease.waiting, lease.own_expired_by) {
            (Waiting::Pending, _) => query = query.bind(lease.from),
            (Waiting::Expired, Some(by)) => query = query.bind(by),
            (Waiting::Expired, None) => {}
        }
        let rows = query.fetch_all(&mut **tx).await.db()?;
        Ok(rows
            .into_iter()
            .map(|row| LeasedJob {
                id: row.id,
                run: row.run_id,
                key: row.key,
                attempt: row.attempt as u32,
                token: row.lease_token,
            })
            .collect())
    }

    async fn has_expired_leases(&self, tx: &mut SqlTx, run: RunId, now: i64) -> Result<bool, StoreError> {
        // Along the expiry index, as the look itself (migration jobs_lease_expiry).
        let expired =
            sqlx::query("SELECT id FROM jobs WHERE run_id = $1 AND state = 'leased' AND lease_expires_at < $2 LIMIT 1")
                .bind(run)
                .bind(now)
                .fetch_optional(&mut **tx)
                .await
                .db()?;
        Ok(expired.is_some())
    }

    async fn first_pending_below(
        &self,
        tx: &mut SqlTx,
        run: RunId,
        stage: Option<u32>,
        below: JobId,
    ) -> Result<Option<JobId>, StoreError> {
        // Along the queue's index (`Dialect::queue_scan`), as the scan it
        // follows. Not a job another lease is taking (locked): that one is
        // not left behind, and as a job put back it would start every scan
        // for PUT_BACK_KEPT below all the entries its neighbours leave.
        let (pending, order) = self.dialect.queue_scan("$1", "pending", None, stage.is_some());
        let stage = stage.map_or(String::new(), |stage| format!("AND j.stage = {stage}"));
        let sql = format!(
            "SELECT j.id FROM jobs j WHERE {pending} {stage} AND j.id < $2 ORDER BY {order} LIMIT 1 {}",
            self.dialect.skip_locked()
        );
        sqlx::query_scalar(&sql).bind(run).bind(below).fetch_optional(&mut **tx).await.db()
    }

    async fn has_job_open_to(&self, open: &OpenTo<'_>) -> Result<bool, StoreError> {
        // Along the queue's index (`Dialect::queue_scan`), past the entries
        // the run's jobs left in it since the last vacuum.
        let (state, order) = self.dialect.queue_scan("$2", open.state.as_str(), None, false);
        let sql = format!(
            "SELECT j.id FROM jobs j WHERE {state} AND {} ORDER BY {order} LIMIT 1",
            open_to("$1", open.max_failures)
        );
        Ok(sqlx::query(&sql).bind(open.worker).bind(open.run).fetch_optional(&self.pool).await.db()?.is_some())
    }

    async fn lowest_stages(&self, tx: Option<&mut SqlTx>, run: RunId) -> Result<LowestStages, StoreError> {
        // One statement, so one snapshot; each state's least stage is one
        // probe of the staged index.
        let states = [JobState::Pending, JobState::Leased, JobState::Failed];
        let lowest: Vec<String> = states
            .iter()
            .map(|state| {
                format!(
                    "SELECT '{0}' AS state, MIN(stage) AS stage FROM jobs
                     WHERE run_id = $1 AND state = '{0}' AND stage IS NOT NULL",
                    state.as_str()
                )
            })
            .collect();
        let sql = lowest.join(" UNION ALL ");
        let query = sqlx::query_as::<_, LowestRow>(&sql).bind(run);
        let rows = match tx {
            Some(tx) => query.fetch_all(&mut **tx).await.db()?,
            None => query.fetch_all(&self.pool).await.db()?,
        };
        let mut lowest = LowestStages::default();
        for row in rows {
            let stage = row
                .stage
                .map(|stage| u32::try_from(stage).map_err(|_| StoreError::Internal(format!("stage {stage}"))))
                .transpose()?;
            match row.state.parse::<JobState>()? {
                JobState::Pending => lowest.pending = stage,
                JobState::Leased => lowest.leased = stage,
                JobState::Failed => lowest.failed = stage,
                JobState::Done => {}
            }
        }
        Ok(lowest)
    }

    async fn extend_leases(&self, extend: &ExtendLeases<'_>) -> Result<HashSet<String>, StoreError> {
        let mut extended = HashSet::with_capacity(extend.leases.len());
        for chunk in extend.leases.chunks(self.dialect.rows_per_statement(1000, 2)) {
            // A lease is extended while it is held, never past its maximum
            // lifetime (the coordinator's, or its run's own where that is
            // longer), and never for a cancelled run. Found by the jobs'
            // ids, a lookup each along the primary key, with every other
            // condition inside a CASE, where no index can serve it: on
            // creation-time statistics (no job leased) any index of leased
            // jobs looks empty, and the heartbeat was planned along one,
            // reading every lease of the run or of the identity (33,000 to
            // 48,000 buffers a call at 10,000 workers, BENCHMARKS.md). A
            // token names its job, so a row whose token is in the list is
            // the row that token names.
            // Runs another identity waits for: their leases live
            // $5 at most, unless the run's own lifetime is longer.
            let fixed = 5 + usize::from(!extend.contended.is_empty()) * (1 + extend.contended.len());
            let limit = if extend.contended.is_empty() {
                "$4".to_string()
            } else {
                format!("CASE WHEN jobs.run_id IN ({}) THEN $5 ELSE $4 END", placeholders(6, extend.contended.len()))
            };
            let lifetime = self
                .dialect
                .greatest(&limit, "COALESCE((SELECT r.max_lease_ms FROM runs r WHERE r.id = jobs.run_id), 0)");
            let sql = format!(
                "UPDATE jobs SET lease_expires_at = {}, updated_at = $2
                 WHERE id IN ({})
                   AND CASE WHEN state = 'leased' AND lease_owner = $3 AND lease_expires_at >= $2
                                 AND lease_token IN ({})
                                 AND lease_started_at + {lifetime} > $2
                                 AND run_id IN (SELECT id FROM runs WHERE cancelled_at IS NULL)
                            THEN 1 ELSE 0 END = 1
                 RETURNING lease_token",
                self.dialect.least("$1", &format!("lease_started_at + {lifetime}")),
                placeholders(fixed, chunk.len()),
                placeholders(fixed + chunk.len(), chunk.len())
            );
            let mut query = sqlx::query_scalar(&sql)
                .bind(extend.expires_at)
                .bind(extend.now)
                .bind(extend.worker)
                .bind(extend.max_lifetime_ms);
            if !extend.contended.is_empty() {
                query = query.bind(extend.contended_lifetime_ms);
                for run in extend.contended {
                    query = query.bind(*run);
                }
            }
            for (job, _) in chunk {
                query = query.bind(job);
            }
            for (_, token) in chunk {
                query = query.bind(*token);
            }
            extended.extend(query.fetch_all(&self.pool).await.db()?);
        }
        Ok(extended)
    }

    async fn release_leases(&self, tx: &mut SqlTx, held_by: HeldBy<'_>, now: i64) -> Result<(), StoreError> {
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
        query.bind(now).execute(&mut **tx).await.db()?;
        Ok(())
    }

    async fn leases_of(&self, jobs: &[JobId]) -> Result<Vec<LeaseRecord>, StoreError> {
        let mut connection = self.pool.acquire().await.db()?;
        let rows = self
            .select_by_ids(&mut connection, jobs, |ids| {
                format!(
                    "SELECT id, run_id, state, attempt, lease_token, lease_owner, lease_expires_at FROM jobs WHERE id IN ({ids})"
                )
            })
            .await?;
        drop(connection);
        rows.iter()
            .map(|row| {
                let row = FenceRow::from_row(row).db()?;
                Ok(LeaseRecord { id: row.id, run: row.run_id, attempt: row.attempt, lease: row.lease.fields()? })
            })
            .collect()
    }
}
