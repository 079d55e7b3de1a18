//! WorkerService: leasing, heartbeats, results and failures. The caller's
//! identity is its token's name; results are checked against an
//! independent count before the store sees them.

use census_proto::v1::job_outcome::Status as OutcomeStatus;
use census_proto::v1::worker_service_server::WorkerService;
use census_proto::v1::{
    CompleteJobRequest, CompleteJobsRequest, CompleteJobsResponse, FailJobRequest, FailJobResponse, HeartbeatRequest,
    HeartbeatResponse, Job, JobOutcome, LeaseJobsRequest, LeaseJobsResponse,
};
use census_store::{CompleteOutcome, Completion};
use tonic::{Request, Response, Status};

use crate::auth::{Caller, Need};
use crate::convert::{completion_of, job_message, outcome_of};
use crate::limits::{self, MAX_BATCH, MAX_REASON_LEN, MAX_TOKEN_LEN};
use crate::{Api, status_of};

impl Api {
    /// Counts a share of the completions again with their census's
    /// checking counter, on a blocking thread, and attaches the checked
    /// counts. A key the counter cannot read is not the job's: the store
    /// rejects it. The coordinator's own workers are checked only by an
    /// independent counter ([`crate::CoordinatorConfig::trust_local_workers`]).
    async fn validate(&self, caller: &Caller, mut completions: Vec<Completion>) -> Result<Vec<Completion>, Status> {
        let fraction = self.0.config.validate_fraction;
        let only_independent = self.0.config.trust_local_workers && caller.local;
        if fraction <= 0.0 || completions.is_empty() {
            return Ok(completions);
        }
        let ids: Vec<i64> = completions.iter().map(|c| c.job_id).collect();
        let censuses = std::sync::Arc::new(self.0.store.censuses_of(&ids).await.map_err(status_of)?);
        // One blocking task per core: a batch of slow jobs is checked in
        // parallel, as it was counted.
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let per_task = completions.len().div_ceil(cores);
        let mut tasks = Vec::new();
        while !completions.is_empty() {
            let mut chunk = completions.split_off(completions.len().saturating_sub(per_task));
            let (coordinator, censuses) = (self.0.clone(), censuses.clone());
            tasks.push(tokio::task::spawn_blocking(move || {
                for completion in &mut chunk {
                    if fraction < 1.0 && rand::random::<f64>() >= fraction {
                        continue;
                    }
                    let Some(checker) = censuses.get(&completion.job_id).and_then(|census| coordinator.checker(census))
                    else {
                        continue;
                    };
                    if only_independent && !checker.independent {
                        continue;
                    }
                    if let Ok(count) = checker.counter.count(&completion.key) {
                        completion.checked_count = Some(count);
                    }
                }
                chunk
            }));
        }
        let mut checked = Vec::with_capacity(ids.len());
        // The chunks were split off the end: put them back in order.
        for task in tasks.into_iter().rev() {
            checked.extend(task.await.map_err(|e| Status::internal(format!("validating results failed: {e}")))?);
        }
        Ok(checked)
    }
}

#[tonic::async_trait]
impl WorkerService for Api {
    async fn lease_jobs(&self, request: Request<LeaseJobsRequest>) -> Result<Response<LeaseJobsResponse>, Status> {
        let started = std::time::Instant::now();
        let caller = self.authorize(request.metadata(), Need::Worker).await?;
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
        metrics::counter!("census_jobs_leased_total").increment(jobs.len() as u64);
        metrics::histogram!("census_lease_seconds").record(started.elapsed().as_secs_f64());
        Ok(Response::new(LeaseJobsResponse {
            jobs,
            lease_ttl_seconds: ttl.as_secs().clamp(1, u64::from(u32::MAX)) as u32,
            idle,
        }))
    }

    async fn heartbeat(&self, request: Request<HeartbeatRequest>) -> Result<Response<HeartbeatResponse>, Status> {
        let caller = self.authorize(request.metadata(), Need::Worker).await?;
        let request = request.into_inner();
        limits::at_most("tokens", request.tokens.len(), MAX_BATCH)?;
        for token in &request.tokens {
            limits::bounded("a lease token", token, MAX_TOKEN_LEN)?;
        }
        let outcome =
            self.0.store.heartbeat(&caller.name, &request.tokens, self.0.config.lease_ttl).await.map_err(status_of)?;
        Ok(Response::new(HeartbeatResponse { cancel_tokens: outcome.lost }))
    }

    async fn complete_jobs(
        &self,
        request: Request<CompleteJobsRequest>,
    ) -> Result<Response<CompleteJobsResponse>, Status> {
        let started = std::time::Instant::now();
        let caller = self.authorize(request.metadata(), Need::Worker).await?;
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
        let valid = self.validate(&caller, valid).await?;
        let recorded = self.0.store.complete_many(&valid).await.map_err(status_of)?;
        let recorded_count = recorded.iter().filter(|o| matches!(o, Ok(CompleteOutcome::Recorded))).count();
        let any_recorded = recorded_count > 0;
        metrics::counter!("census_worker_results_total", "worker" => caller.name.clone())
            .increment(recorded_count as u64);
        for ((position, completion), outcome) in positions.into_iter().zip(&valid).zip(recorded) {
            outcomes[position] = Some(outcome_of(completion.job_id, outcome));
        }
        if any_recorded {
            self.0.announce_finished_runs().await;
        }
        metrics::histogram!("census_complete_seconds").record(started.elapsed().as_secs_f64());
        Ok(Response::new(CompleteJobsResponse {
            outcomes: outcomes.into_iter().map(|o| o.expect("every result has an outcome")).collect(),
        }))
    }

    async fn complete_job(&self, request: Request<CompleteJobRequest>) -> Result<Response<JobOutcome>, Status> {
        let caller = self.authorize(request.metadata(), Need::Worker).await?;
        let request = request.into_inner();
        let result = request.result.ok_or_else(|| Status::invalid_argument("result is missing"))?;
        let completion = completion_of(&caller.name, &result)?;
        let mut validated = self.validate(&caller, vec![completion]).await?;
        let outcome = self.0.store.complete(&validated.pop().expect("one completion")).await.map_err(status_of)?;
        if outcome == CompleteOutcome::Recorded {
            self.0.announce_finished_runs().await;
        }
        Ok(Response::new(outcome_of(result.job_id, Ok(outcome))))
    }

    async fn fail_job(&self, request: Request<FailJobRequest>) -> Result<Response<FailJobResponse>, Status> {
        let caller = self.authorize(request.metadata(), Need::Worker).await?;
        let request = request.into_inner();
        if request.token.is_empty() {
            return Err(Status::invalid_argument("the lease token is missing"));
        }
        limits::bounded("the lease token", &request.token, MAX_TOKEN_LEN)?;
        limits::bounded("reason", &request.reason, MAX_REASON_LEN)?;
        self.0.store.fail(request.job_id, &request.token, &caller.name, &request.reason).await.map_err(status_of)?;
        Ok(Response::new(FailJobResponse {}))
    }
}
