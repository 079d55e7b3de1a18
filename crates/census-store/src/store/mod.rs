//! [`Store`]: the rules of the store, written once above the seam
//! ([`crate::backend::StorageBackend`]) and free of any database. It
//! implements [`JobStore`] by calling the backend's named operations and
//! the rules: what a report does and what a batch changes (`decision`,
//! pure), who holds a lease (`fencing`), leasing within the caps (`queue`),
//! creating runs (`runs`), the fold at finish and its checks, progress and
//! answers (`totals`), recounts, failures, requeues and quarantine
//! reaching back (`remedies`), the open stage of a run of stages and what
//! a stage accepted (`stages`), tokens (`tokens`), fair shares of a run's
//! jobs and the budget of reports of leases not held (`shares`). A batch of reports is
//! load -> decide -> apply in one transaction (`completion`), with the
//! reports of other callers that waited meanwhile (`groups`).
//!
//! This file holds the store, its caches, and the trait's table of contents.

mod completion;
mod decision;
mod fencing;
mod fronts;
mod groups;
mod queue;
mod remedies;
mod runs;
mod shares;
mod stages;
mod tokens;
mod totals;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use census_math::census::Census;

pub use decision::ARBITER;

use crate::backend::{RunState, StorageBackend};
use crate::{
    AcceptedCount, ClassTotal, CompleteOutcome, Completion, ConflictWaiting, HeartbeatOutcome, JobId, JobSpec,
    JobStore, JobStream, Lease, LeaseCheck, Progress, QuarantineEntry, Role, RunId, RunSpec, RunSummary, RunTotal,
    StoreConfig, StoreError, TokenRecord,
};

/// Immutable facts about a run, cached so a lease needs no join.
struct RunFacts {
    /// The run's census, handed to workers with each lease.
    census: Census,
    classes: u64,
    /// The census's stages (`Census::stage_count`): 1 for every kind but layers.
    stages: u32,
}

/// The job store over any [`StorageBackend`]: the rules, written once.
pub struct Store<B> {
    backend: B,
    config: StoreConfig,
    runs: Mutex<HashMap<RunId, Arc<RunFacts>>>,
    /// Each census's own jobs, which a fold compares a run's jobs with.
    expected: Mutex<HashMap<Census, Arc<Vec<JobSpec>>>>,
    /// Runs finished by this value's committed transactions, not yet taken.
    finished: Mutex<Vec<RunId>>,
    /// Finished runs' answers, folded again from the accepted results and
    /// found equal to the stored answer and sum (which key them): a status
    /// poll of a finished run reads its row, not its every result.
    verified_finals: Mutex<HashMap<RunId, totals::VerifiedFinal>>,
    /// Where each run's fresh pending jobs begin, for the lease scan.
    fronts: fronts::QueueFronts,
    /// Reports waiting to be written together (`groups`).
    report_groups: groups::ReportGroups,
    /// Writes failing for a fault of the database's storage (full,
    /// read-only): said once when it begins and once when it ends.
    storage_fault: Mutex<Option<FaultEpisode>>,
    /// Who waits for which run, and what each identity recorded, was
    /// granted and reported of leases it did not hold lately (`shares`).
    shares: shares::Shares,
}

/// Writes failing for a fault of the database's storage, since `began`;
/// the last refused at `last`.
struct FaultEpisode {
    began: std::time::Instant,
    last: std::time::Instant,
    refused: u64,
}

/// How long writes must go without a fault before an episode is over: on a
/// nearly full disk some small writes still fit, between failures.
const FAULT_OVER_AFTER: Duration = Duration::from_secs(2);

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).expect("the clock is after 1970").as_millis() as i64
}

/// A run's census as stored, read once at the row: text this code cannot
/// read is an error naming the run, never a default census.
fn read_census(run: RunId, text: &str) -> Result<Census, StoreError> {
    text.parse().map_err(|source| StoreError::UnreadableCensus { run, source })
}

impl<B: StorageBackend> Store<B> {
    /// The store over `backend` (opened and migrated). What every
    /// quarantined identity counted is reopened at once (a database written
    /// before quarantines reached back may hold a finished run that
    /// includes it).
    pub async fn open(backend: B, config: StoreConfig) -> Result<Store<B>, StoreError> {
        let store = Store {
            backend,
            shares: shares::Shares::new(config.max_lease_lifetime),
            config,
            runs: Mutex::new(HashMap::new()),
            expected: Mutex::new(HashMap::new()),
            finished: Mutex::new(Vec::new()),
            verified_finals: Mutex::new(HashMap::new()),
            fronts: fronts::QueueFronts::default(),
            report_groups: groups::ReportGroups::default(),
            storage_fault: Mutex::new(None),
        };
        store.reopen_quarantined_results().await?;
        Ok(store)
    }

    /// `written`, the outcome of a call that writes, said in the log when
    /// it is the first to fail for a fault of the database's storage (a full
    /// disk, a read-only file), and when writes succeed again after one
    /// (for [`FAULT_OVER_AFTER`]): the operator learns once why the run
    /// waits, and that it goes on.
    fn watched<T>(&self, written: Result<T, StoreError>) -> Result<T, StoreError> {
        let now = std::time::Instant::now();
        let mut episode = self.storage_fault.lock().expect("never poisoned");
        match (&written, episode.as_mut()) {
            (Err(error), None) => {
                if let Some(fault) = error.storage_fault() {
                    *episode = Some(FaultEpisode { began: now, last: now, refused: 1 });
                    tracing::error!(
                        error = %error.report(),
                        "the database cannot be written: {fault}; nothing of a refused call is stored, workers \
                         wait and retry (UNAVAILABLE), and the run goes on once it takes writes again"
                    );
                }
            }
            (Err(error), Some(faulted)) if error.storage_fault().is_some() => {
                (faulted.last, faulted.refused) = (now, faulted.refused + 1);
            }
            (Ok(_), Some(faulted)) if now - faulted.last >= FAULT_OVER_AFTER => {
                let (refused, seconds) = (faulted.refused, (faulted.last - faulted.began).as_secs());
                tracing::warn!(refused, seconds, "the database takes writes again: the run goes on");
                *episode = None;
            }
            _ => {}
        }
        drop(episode);
        written
    }

    /// The run's counters and answer, or [`StoreError::UnknownRun`].
    async fn ensure_run(&self, run: RunId) -> Result<RunState, StoreError> {
        self.backend.run_state(None, run).await?.ok_or(StoreError::UnknownRun(run))
    }
}

#[async_trait]
impl<B: StorageBackend> JobStore for Store<B> {
    async fn create_run_streaming(&self, spec: &RunSpec, jobs: JobStream) -> Result<RunId, StoreError> {
        self.insert_run(spec, jobs).await
    }

    async fn censuses_of(&self, jobs: &[JobId]) -> Result<HashMap<JobId, Census>, StoreError> {
        let mut censuses = HashMap::with_capacity(jobs.len());
        for job in self.backend.job_censuses(jobs).await? {
            censuses.insert(job.job, read_census(job.run, &job.census)?);
        }
        Ok(censuses)
    }

    async fn list_runs(&self) -> Result<Vec<RunSummary>, StoreError> {
        self.summaries(None).await
    }

    async fn run(&self, run: RunId) -> Result<RunSummary, StoreError> {
        self.summaries(Some(run)).await?.pop().ok_or(StoreError::UnknownRun(run))
    }

    async fn lease(&self, run: Option<RunId>, worker: &str, max: u32, ttl: Duration) -> Result<Vec<Lease>, StoreError> {
        self.watched(self.lease_jobs(run, worker, max, ttl).await)
    }

    async fn has_work_for(&self, worker: &str, run: Option<RunId>) -> Result<bool, StoreError> {
        self.work_left_for(worker, run).await
    }

    async fn heartbeat(&self, worker: &str, tokens: &[String], ttl: Duration) -> Result<HeartbeatOutcome, StoreError> {
        self.watched(self.extend_leases(worker, tokens, ttl).await)
    }

    async fn complete_many(
        &self,
        completions: &[Completion],
    ) -> Result<Vec<Result<CompleteOutcome, StoreError>>, StoreError> {
        self.watched(self.complete_in_group(completions).await)
    }

    async fn check_leases(&self, completions: &[Completion]) -> Result<Vec<LeaseCheck>, StoreError> {
        self.watched(self.fence(completions).await)
    }

    async fn recount(&self, job: JobId) -> Result<(), StoreError> {
        let mut tx = self.backend.begin().await?;
        self.recount_in(&mut tx, job).await?;
        self.backend.commit(tx).await?;
        self.fronts.forget_all();
        Ok(())
    }

    async fn conflicts_waiting(&self, wait: Duration, limit: u32) -> Result<Vec<ConflictWaiting>, StoreError> {
        let now = now_ms();
        let unchanged_since = now - wait.as_millis().min(i64::MAX as u128) as i64;
        let mut waiting = Vec::new();
        for conflict in self.backend.conflicts_waiting(unchanged_since, now, limit).await? {
            let census = read_census(conflict.run, &conflict.census)?;
            waiting.push(ConflictWaiting { job_id: conflict.job, run_id: conflict.run, census, key: conflict.key });
        }
        Ok(waiting)
    }

    async fn decide_conflict(&self, job: JobId, count: u128) -> Result<bool, StoreError> {
        self.watched(self.decide_by_count(job, count).await)
    }

    async fn fail(&self, job: JobId, token: &str, worker: &str, reason: &str) -> Result<(), StoreError> {
        self.watched(self.fail_job(job, token, worker, reason).await)
    }

    async fn requeue(&self, run: RunId, job: Option<JobId>) -> Result<u64, StoreError> {
        let requeued = self.requeue_jobs(run, job).await;
        self.fronts.forget_all();
        requeued
    }

    async fn cancel_run(&self, run: RunId) -> Result<(), StoreError> {
        self.cancel(run).await
    }

    async fn set_priority(&self, run: RunId, priority: i64) -> Result<(), StoreError> {
        self.ensure_run(run).await?;
        self.backend.set_priority(run, priority).await?;
        tracing::info!(run, priority, "run priority set");
        Ok(())
    }

    async fn progress(&self, run: RunId) -> Result<Progress, StoreError> {
        self.read_progress(run).await
    }

    async fn total(&self, run: RunId) -> Result<RunTotal, StoreError> {
        self.read_total(run).await
    }

    async fn class_totals_from(
        &self,
        run: RunId,
        first: u32,
        limit: Option<u32>,
    ) -> Result<Vec<ClassTotal>, StoreError> {
        self.ensure_run(run).await?;
        let page =
            crate::backend::ClassPage { run, after: i64::from(first) - 1, limit: limit.map_or(i64::MAX, i64::from) };
        self.backend.class_totals(&page).await
    }

    async fn accepted_counts(
        &self,
        run: RunId,
        stage: u32,
        after: JobId,
        limit: u32,
    ) -> Result<Vec<AcceptedCount>, StoreError> {
        self.read_accepted_counts(run, stage, after, limit).await
    }

    fn take_finished_runs(&self) -> Vec<RunId> {
        std::mem::take(&mut *self.finished.lock().expect("never poisoned"))
    }

    async fn ping(&self) -> Result<(), StoreError> {
        self.backend.ping().await
    }

    async fn answer_version(&self, run: RunId) -> Result<Option<String>, StoreError> {
        let row = self.ensure_run(run).await?;
        let Some(finished) = row.finished_at else { return Ok(None) };
        let (weighted_sum, answer) = (row.weighted_sum.unwrap_or_default(), row.answer.unwrap_or_default());
        Ok(Some(format!("{finished}/{}/{weighted_sum}/{answer}", row.open_conflicts)))
    }

    async fn close(&self) {
        self.backend.close().await
    }

    async fn create_token(&self, name: &str, role: Role, hash: &str) -> Result<(), StoreError> {
        self.insert_token(name, role, hash).await
    }

    async fn import_token(&self, name: &str, role: Role, hash: &str) -> Result<(), StoreError> {
        self.upsert_token(name, role, hash).await
    }

    async fn list_tokens(&self) -> Result<Vec<TokenRecord>, StoreError> {
        self.backend.tokens(crate::backend::TokenFilter::All).await
    }

    async fn revoke_token(&self, name: &str) -> Result<bool, StoreError> {
        self.revoke(name).await
    }

    async fn find_token(&self, hash: &str) -> Result<Option<TokenRecord>, StoreError> {
        Ok(self.backend.tokens(crate::backend::TokenFilter::Hash(hash)).await?.pop())
    }

    async fn is_quarantined(&self, worker: &str) -> Result<bool, StoreError> {
        self.backend.is_quarantined(None, worker).await
    }

    async fn quarantined(&self) -> Result<Vec<QuarantineEntry>, StoreError> {
        self.backend.quarantined().await
    }

    async fn release_quarantine(&self, worker: &str) -> Result<bool, StoreError> {
        let released = self.backend.release_quarantine(worker).await?;
        if released {
            tracing::warn!(worker, "released from quarantine");
        }
        Ok(released)
    }
}
