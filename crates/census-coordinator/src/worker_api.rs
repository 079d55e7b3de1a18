//! WorkerService: leasing, heartbeats, results, failures, and what a stage
//! accepted. The caller's identity is its token's name; results are
//! checked against an independent count before the store sees them.

use census_proto::v1::job_outcome::Status as OutcomeStatus;
use census_proto::v1::worker_service_server::WorkerService;
use census_proto::v1::{
    AcceptedCountsRequest, AcceptedCountsResponse, CompleteJobRequest, CompleteJobsRequest, CompleteJobsResponse,
    FailJobRequest, FailJobResponse, HeartbeatRequest, HeartbeatResponse, Job, JobOutcome, LeaseJobsRequest,
    LeaseJobsResponse,
};
use census_store::{CompleteOutcome, Completion, LeaseCheck, StoreError};
use tonic::{Request, Response, Status};

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::admission::Admitted;
use crate::auth::Caller;
use crate::convert::{accepted_message, completion_of, job_message, outcome_of};
use crate::limits::{self, MAX_BATCH, MAX_REASON_LEN, MAX_TOKEN_LEN};
use crate::{Api, Coordinator, ReportsInProgress, status_of};

impl Api {
    /// Records results: the store fences them first (cheap), then only the
    /// results whose leases their sender holds are counted again
    /// ([`crate::checking`]); a late one goes to the store unchecked (it
    /// can only be a repeat or refused), a forged one is refused here and
    /// recorded against the sender. One outcome a completion, in order.
    /// The call leaves its admission slot while its results are counted
    /// again, which uses no connection and may take long.
    ///
    /// All of it runs in a task of its own, which keeps the call's slot:
    /// once begun, a report's results whose leases its sender holds are
    /// checked and written to their end even if the caller goes away (its
    /// deadline passes), and a repeated report finds them recorded. A
    /// run's last batch folds the whole run in its transaction, longer than
    /// a worker's call may take at 10^7 jobs; cancelled with the call, it
    /// was rolled back and begun again by every retry. And at a congested
    /// coordinator every caller's deadline passed while the reports before
    /// its own were counted again: each retry began again at the back, and
    /// nothing was recorded at all (BENCHMARKS.md, "A run that stops at
    /// 10,000 workers"). The rest of a report whose caller has gone (results
    /// of leases not held, which could only be refused or found repeated)
    /// is dropped: a flood of stale reports whose callers gave up kept the
    /// store busy for 18 s after it ended (issue 44).
    async fn record(
        &self,
        caller: &Caller,
        admitted: &Admitted,
        completions: Vec<Completion>,
    ) -> Result<Vec<Result<CompleteOutcome, StoreError>>, Status> {
        let (coordinator, caller, admitted) = (self.0.clone(), caller.clone(), admitted.clone());
        // The caller is there while this call's future is: its leaving drops it.
        let present = std::sync::Arc::new(());
        let waits = std::sync::Arc::downgrade(&present);
        let counted = Recorded::begin(&coordinator, completions.len());
        let recording = tokio::spawn(async move {
            let _counted = counted;
            Api(coordinator).record_to_the_end(&caller, &admitted, completions, waits).await
        });
        let recorded = recording.await.map_err(|e| Status::internal(format!("recording the results panicked: {e}")))?;
        drop(present);
        recorded
    }

    /// [`Api::record`]'s work, whoever waits for it (`caller_waits`: while
    /// anyone does).
    async fn record_to_the_end(
        &self,
        caller: &Caller,
        admitted: &Admitted,
        completions: Vec<Completion>,
        caller_waits: std::sync::Weak<()>,
    ) -> Result<Vec<Result<CompleteOutcome, StoreError>>, Status> {
        if caller_waits.strong_count() == 0 {
            // Gone before anything was looked at: nothing of it was begun.
            return Err(Status::cancelled("the caller gave up before its report was looked at"));
        }
        let checks = self.0.store.check_leases(&completions).await.map_err(status_of)?;
        let mut outcomes: Vec<Option<Result<CompleteOutcome, StoreError>>> = Vec::with_capacity(completions.len());
        let (mut held, mut late, mut held_at, mut late_at) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for (i, (completion, check)) in completions.into_iter().zip(checks).enumerate() {
            let refused = match check {
                LeaseCheck::Held => {
                    held.push(completion);
                    held_at.push(i);
                    None
                }
                LeaseCheck::NotHeld => {
                    late.push(completion);
                    late_at.push(i);
                    None
                }
                LeaseCheck::Forged { reason } => Some(StoreError::Rejected { job: completion.job_id, reason }),
                LeaseCheck::UnknownJob => Some(StoreError::UnknownJob(completion.job_id)),
            };
            outcomes.push(refused.map(Err));
        }
        if caller_waits.strong_count() == 0 {
            // Nobody waits for what the late results would be told.
            for (i, completion) in late_at.drain(..).zip(late.drain(..)) {
                outcomes[i] = Some(Err(StoreError::StaleToken { job: completion.job_id }));
            }
        }
        if held.is_empty() && late.is_empty() {
            return Ok(outcomes.into_iter().map(|o| o.expect("every completion has an outcome")).collect());
        }
        let mut checked = if held.is_empty() { held } else { admitted.outside(self.0.validate(caller, held)).await? };
        checked.append(&mut late);
        held_at.append(&mut late_at);
        let recorded = self.0.store.complete_many(&checked).await.map_err(status_of)?;
        if recorded.iter().any(|o| matches!(o, Ok(CompleteOutcome::Recorded))) {
            self.0.announce_finished_runs().await;
        }
        for (i, outcome) in held_at.into_iter().zip(recorded) {
            outcomes[i] = Some(outcome);
        }
        Ok(outcomes.into_iter().map(|o| o.expect("every completion has an outcome")).collect())
    }
}

/// The reports being recorded now, and the results they hold: what the
/// coordinator keeps in memory for its callers' reports.
#[derive(Debug, Default)]
pub(crate) struct Recording {
    reports: AtomicUsize,
    results: AtomicUsize,
}

impl Recording {
    pub(crate) fn now(&self) -> ReportsInProgress {
        ReportsInProgress { reports: self.reports.load(Ordering::SeqCst), results: self.results.load(Ordering::SeqCst) }
    }
}

/// A report being recorded, counted in [`Recording`] until it is dropped.
struct Recorded {
    coordinator: Arc<Coordinator>,
    results: usize,
}

impl Recorded {
    fn begin(coordinator: &Arc<Coordinator>, results: usize) -> Recorded {
        coordinator.recording.reports.fetch_add(1, Ordering::SeqCst);
        coordinator.recording.results.fetch_add(results, Ordering::SeqCst);
        Recorded { coordinator: coordinator.clone(), results }
    }
}

impl Drop for Recorded {
    fn drop(&mut self) {
        self.coordinator.recording.reports.fetch_sub(1, Ordering::SeqCst);
        self.coordinator.recording.results.fetch_sub(self.results, Ordering::SeqCst);
    }
}

#[tonic::async_trait]
impl WorkerService for Api {
    async fn lease_jobs(&self, request: Request<LeaseJobsRequest>) -> Result<Response<LeaseJobsResponse>, Status> {
        let started = std::time::Instant::now();
        let caller = Self::caller(&request)?;
        let request = request.into_inner();
        if request.max_jobs == 0 {
            return Err(Status::invalid_argument("max_jobs must be at least 1"));
        }
        if request.run_id < 0 {
            return Err(Status::invalid_argument(format!("run_id {} is not a run", request.run_id)));
        }
        let run = (request.run_id > 0).then_some(request.run_id);
        let max = request.max_jobs.min(MAX_BATCH);
        let ttl = self.0.config.lease_ttl;
        let leases = self.0.store.lease(run, &caller.name, max, ttl).await.map_err(status_of)?;
        // Idle means nothing is left for this caller: every job still open
        // waits for other identities, for an operator, or for nobody.
        let idle = leases.is_empty() && !self.0.store.has_work_for(&caller.name, run).await.map_err(status_of)?;
        let jobs = leases.into_iter().map(job_message).collect::<Vec<Job>>();
        self.0.admission.leased(jobs.len());
        metrics::counter!("census_jobs_leased_total").increment(jobs.len() as u64);
        metrics::histogram!("census_lease_seconds").record(started.elapsed().as_secs_f64());
        Ok(Response::new(LeaseJobsResponse {
            jobs,
            lease_ttl_seconds: ttl.as_secs().clamp(1, u64::from(u32::MAX)) as u32,
            idle,
            batch_millis: self.0.admission.batch_pace().as_millis().min(u128::from(u32::MAX)) as u32,
        }))
    }

    async fn heartbeat(&self, request: Request<HeartbeatRequest>) -> Result<Response<HeartbeatResponse>, Status> {
        let caller = Self::caller(&request)?;
        let request = request.into_inner();
        limits::at_most("tokens", request.tokens.len(), MAX_BATCH)?;
        for token in &request.tokens {
            limits::bounded("a lease token", token, MAX_TOKEN_LEN)?;
        }
        let outcome =
            self.0.store.heartbeat(&caller.name, &request.tokens, self.0.config.lease_ttl).await.map_err(status_of)?;
        // Only leases the caller still held count for the pace: made-up
        // tokens must not make the fleet look backlogged.
        self.0.admission.heartbeated(outcome.extended.len());
        Ok(Response::new(HeartbeatResponse { cancel_tokens: outcome.lost }))
    }

    async fn complete_jobs(
        &self,
        request: Request<CompleteJobsRequest>,
    ) -> Result<Response<CompleteJobsResponse>, Status> {
        let started = std::time::Instant::now();
        let caller = Self::caller(&request)?;
        let admitted = Self::admitted(&request);
        let request = request.into_inner();
        limits::at_most("results", request.results.len(), MAX_BATCH)?;
        let mut outcomes: Vec<Option<JobOutcome>> = vec![None; request.results.len()];
        let mut valid = Vec::new();
        let mut positions = Vec::new();
        for (i, result) in request.results.iter().enumerate() {
            match completion_of(&caller.name, result) {
                Ok(completion) => {
                    valid.push(completion);
                    positions.push(i);
                }
                Err(status) => {
                    metrics::counter!("census_results_total", "outcome" => "malformed").increment(1);
                    tracing::warn!(worker = %caller.name, job = result.job_id, error = %status.message(), "malformed result refused");
                    outcomes[i] = Some(JobOutcome {
                        job_id: result.job_id,
                        status: OutcomeStatus::Rejected as i32,
                        message: status.message().to_string(),
                    })
                }
            }
        }
        let job_ids: Vec<i64> = valid.iter().map(|c| c.job_id).collect();
        let recorded = self.record(&caller, &admitted, valid).await?;
        let recorded_count = recorded.iter().filter(|o| matches!(o, Ok(CompleteOutcome::Recorded))).count();
        metrics::counter!("census_worker_results_total", "worker" => caller.name.clone())
            .increment(recorded_count as u64);
        for ((position, job_id), outcome) in positions.into_iter().zip(job_ids).zip(recorded) {
            outcomes[position] = Some(outcome_of(job_id, outcome));
        }
        metrics::histogram!("census_complete_seconds").record(started.elapsed().as_secs_f64());
        Ok(Response::new(CompleteJobsResponse {
            outcomes: outcomes.into_iter().map(|o| o.expect("every result has an outcome")).collect(),
        }))
    }

    async fn complete_job(&self, request: Request<CompleteJobRequest>) -> Result<Response<JobOutcome>, Status> {
        let caller = Self::caller(&request)?;
        let admitted = Self::admitted(&request);
        let request = request.into_inner();
        let result = request.result.ok_or_else(|| Status::invalid_argument("result is missing"))?;
        let completion = completion_of(&caller.name, &result)?;
        let outcome =
            self.record(&caller, &admitted, vec![completion]).await?.pop().expect("one outcome").map_err(status_of)?;
        Ok(Response::new(outcome_of(result.job_id, Ok(outcome))))
    }

    async fn fail_job(&self, request: Request<FailJobRequest>) -> Result<Response<FailJobResponse>, Status> {
        let caller = Self::caller(&request)?;
        let request = request.into_inner();
        if request.token.is_empty() {
            return Err(Status::invalid_argument("the lease token is missing"));
        }
        limits::bounded("the lease token", &request.token, MAX_TOKEN_LEN)?;
        limits::bounded("reason", &request.reason, MAX_REASON_LEN)?;
        self.0.store.fail(request.job_id, &request.token, &caller.name, &request.reason).await.map_err(status_of)?;
        Ok(Response::new(FailJobResponse {}))
    }

    async fn accepted_counts(
        &self,
        request: Request<AcceptedCountsRequest>,
    ) -> Result<Response<AcceptedCountsResponse>, Status> {
        Self::caller(&request)?;
        let request = request.into_inner();
        if request.run_id <= 0 {
            return Err(Status::invalid_argument(format!("run_id {} is not a run", request.run_id)));
        }
        if request.after_job_id < 0 {
            return Err(Status::invalid_argument(format!("after_job_id {} is not a job", request.after_job_id)));
        }
        // One more than a page tells whether more follow.
        let mut counts = self
            .0
            .store
            .accepted_counts(request.run_id, request.stage, request.after_job_id, MAX_BATCH + 1)
            .await
            .map_err(status_of)?;
        let more = counts.len() > MAX_BATCH as usize;
        counts.truncate(MAX_BATCH as usize);
        Ok(Response::new(AcceptedCountsResponse { counts: counts.into_iter().map(accepted_message).collect(), more }))
    }
}
