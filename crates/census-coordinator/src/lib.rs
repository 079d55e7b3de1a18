//! The census's gRPC coordinator.
//!
//! It serves `census.v1.WorkerService` (lease, heartbeat, complete, fail) and
//! `census.v1.CensusService` (runs, progress, results, classes), plus the
//! standard health and reflection services. Every request is validated,
//! translated into a [`JobStore`] call, and the answer translated back.
//!
//! It is *not* where state lives: everything is in the store, so a
//! coordinator can be killed and restarted at any moment, and several can
//! serve the same Postgres database.

use std::collections::HashSet;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use census_math::total::{factorize, kilfoil_estimate, relative_error};
use census_math::{Band, ClassTable, CounterKind, SEEDS, Stage};
use census_proto::v1::census_service_server::{CensusService, CensusServiceServer};
use census_proto::v1::job_outcome::Status as OutcomeStatus;
use census_proto::v1::worker_service_server::{WorkerService, WorkerServiceServer};
use census_proto::v1::{
    ClassLine, CompleteJobRequest, CompleteJobsRequest, CompleteJobsResponse, CreateRunRequest, FailJobRequest,
    FailJobResponse, GetProgressRequest, GetResultRequest, HeartbeatRequest, HeartbeatResponse, Job, JobOutcome,
    JobResult, LeaseJobsRequest, LeaseJobsResponse, ListClassesRequest, ListClassesResponse, ListRunsRequest,
    ListRunsResponse, Progress, RecountJobRequest, RecountJobResponse, Run, RunResult, WatchProgressRequest, WorkerLine,
};
use census_store::{ClassSpec, CompleteOutcome, Completion, JobStore, RunId, RunSpec, RunSummary, StoreError};
use num_bigint::BigUint;
use tokio_stream::Stream;
use tonic::{Request, Response, Status};

/// The most jobs one lease call hands out.
pub const MAX_LEASE_BATCH: u32 = 10_000;

/// The coordinator: a store and the lease time it grants.
pub struct Coordinator {
    store: Arc<dyn JobStore>,
    lease_ttl: Duration,
    /// Runs whose final total this process has already logged (a log nicety,
    /// not state: a restarted coordinator may log a total again).
    announced: Mutex<HashSet<RunId>>,
}

/// Maps a store error to the gRPC status a client can act on.
pub fn status_of(error: StoreError) -> Status {
    let message = error.to_string();
    match error {
        StoreError::UnknownRun(_) | StoreError::UnknownJob(_) => Status::not_found(message),
        StoreError::StaleToken { .. } => Status::failed_precondition(message),
        StoreError::AbsurdCount { .. } | StoreError::InvalidBand { .. } | StoreError::Invalid(_) => {
            Status::invalid_argument(message)
        }
        StoreError::TotalMismatch { .. } => Status::data_loss(message),
        StoreError::Connect { .. } | StoreError::Database(_) => Status::unavailable(message),
    }
}

impl Coordinator {
    pub fn new(store: Arc<dyn JobStore>, lease_ttl: Duration) -> Arc<Coordinator> {
        Arc::new(Coordinator { store, lease_ttl, announced: Mutex::new(HashSet::new()) })
    }

    pub fn store(&self) -> &Arc<dyn JobStore> {
        &self.store
    }

    /// Creates (or finds) the run of a stage: its class table is built here,
    /// and one job per (class, seed) is stored.
    pub async fn create_run(&self, stage: Stage, counter: CounterKind, redundancy: u32) -> Result<RunSummary, StoreError> {
        let table = tokio::task::spawn_blocking(move || ClassTable::build(stage))
            .await
            .map_err(|e| StoreError::Invalid(format!("building the class table failed: {e}")))?;
        let classes: Vec<ClassSpec> = table
            .classes()
            .iter()
            .map(|c| ClassSpec { class_id: c.id, representative: c.representative.to_string(), size: c.size })
            .collect();
        let spec = RunSpec {
            stage: stage.name().to_string(),
            counter: counter.name().to_string(),
            counter_version: counter.version().to_string(),
            redundancy: redundancy.max(1),
        };
        let run = self.store.create_run(&spec, &classes).await?;
        self.store.run(run).await
    }

    /// Serves every service on `listener` until `shutdown` completes.
    pub async fn serve(
        self: Arc<Self>,
        listener: tokio::net::TcpListener,
        shutdown: impl std::future::Future<Output = ()> + Send,
    ) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        let (reporter, health) = tonic_health::server::health_reporter();
        reporter.set_service_status("", tonic_health::ServingStatus::Serving).await;
        reporter.set_serving::<WorkerServiceServer<Api>>().await;
        reporter.set_serving::<CensusServiceServer<Api>>().await;
        let reflection = tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(census_proto::FILE_DESCRIPTOR_SET)
            .build_v1()?;
        let api = Api(self);
        tonic::transport::Server::builder()
            .add_service(health)
            .add_service(reflection)
            .add_service(WorkerServiceServer::new(api.clone()))
            .add_service(CensusServiceServer::new(api))
            .serve_with_incoming_shutdown(tokio_stream::wrappers::TcpListenerStream::new(listener), shutdown)
            .await?;
        Ok(())
    }

    async fn latest_run(&self, run: i64) -> Result<RunId, Status> {
        if run > 0 {
            return Ok(run);
        }
        let runs = self.store.list_runs().await.map_err(status_of)?;
        runs.last().map(|r| r.run_id).ok_or_else(|| Status::not_found("there are no runs yet; create one with `census submit`"))
    }

    /// Logs the exact total of every run that has become final.
    async fn announce_finished_runs(&self) {
        let Ok(runs) = self.store.list_runs().await else { return };
        for run in runs.into_iter().filter(|r| r.is_final) {
            if !self.announced.lock().expect("never poisoned").insert(run.run_id) {
                continue;
            }
            if let Ok(total) = self.store.total(run.run_id).await {
                tracing::info!(run = run.run_id, stage = %run.spec.stage, s = %total.s, n0 = %total.n0, "census finished: N0 = {}", total.n0);
            }
        }
    }

    async fn progress(&self, run: RunId) -> Result<Progress, Status> {
        let progress = self.store.progress(run).await.map_err(status_of)?;
        let summary = self.store.run(run).await.map_err(status_of)?;
        Ok(Progress {
            run_id: run,
            jobs_total: progress.jobs_total,
            pending: progress.pending,
            leased: progress.leased,
            done: progress.done,
            failed: progress.failed,
            conflicts: progress.conflicts,
            completions_counted: progress.completions_counted,
            jobs_per_second: progress.jobs_per_second,
            eta_seconds: progress.eta.map(|d| d.as_secs_f64()).unwrap_or(0.0),
            workers: progress
                .workers
                .into_iter()
                .map(|w| WorkerLine { worker_id: w.worker, jobs: w.jobs, completions: w.completions, last_seen_unix: w.last_seen_unix })
                .collect(),
            r#final: summary.is_final,
        })
    }
}

fn run_message(run: RunSummary) -> Run {
    Run {
        run_id: run.run_id,
        stage: run.spec.stage,
        counter: run.spec.counter,
        counter_version: run.spec.counter_version,
        redundancy: run.spec.redundancy,
        classes: run.classes,
        jobs_total: run.jobs_total,
        jobs_done: run.jobs_done,
        r#final: run.is_final,
    }
}

fn require_worker(worker: &str) -> Result<(), Status> {
    if worker.trim().is_empty() {
        return Err(Status::invalid_argument("worker_id is missing"));
    }
    Ok(())
}

/// Checks a reported result's form; the store checks it against the job.
fn completion_of(worker: &str, result: &JobResult) -> Result<Completion, Status> {
    if result.job_id <= 0 {
        return Err(Status::invalid_argument(format!("job_id {} is not a job", result.job_id)));
    }
    if result.token.is_empty() {
        return Err(Status::invalid_argument(format!("job {}: the lease token is missing", result.job_id)));
    }
    if result.band.is_empty() {
        return Err(Status::invalid_argument(format!("job {}: the counted band is missing", result.job_id)));
    }
    Band::parse(&result.band).map_err(|e| Status::invalid_argument(format!("job {}: band {:?}: {e}", result.job_id, result.band)))?;
    if result.seed as usize >= SEEDS.len() {
        return Err(Status::invalid_argument(format!("job {}: seed {} is not 0-9", result.job_id, result.seed)));
    }
    if !result.elapsed_seconds.is_finite() || result.elapsed_seconds < 0.0 {
        return Err(Status::invalid_argument(format!("job {}: elapsed time {} is not a duration", result.job_id, result.elapsed_seconds)));
    }
    Ok(Completion {
        job_id: result.job_id,
        token: result.token.clone(),
        worker: worker.to_string(),
        count: result.count,
        elapsed: Duration::from_secs_f64(result.elapsed_seconds),
        counter_version: result.counter_version.clone(),
    })
}

fn outcome_of(job_id: i64, outcome: Result<CompleteOutcome, StoreError>) -> JobOutcome {
    let (status, message) = match outcome {
        Ok(CompleteOutcome::Recorded) => (OutcomeStatus::Recorded, String::new()),
        Ok(CompleteOutcome::AlreadyDone) => (OutcomeStatus::AlreadyDone, String::new()),
        Ok(CompleteOutcome::Conflict { stored }) => {
            (OutcomeStatus::Conflict, format!("job {job_id} was already counted as {stored}; the disagreement is recorded"))
        }
        Err(error @ StoreError::StaleToken { .. }) => (OutcomeStatus::LeaseLost, error.to_string()),
        Err(error) => (OutcomeStatus::Rejected, error.to_string()),
    };
    JobOutcome { job_id, status: status as i32, message }
}

/// The services, sharing one coordinator.
#[derive(Clone)]
struct Api(Arc<Coordinator>);

#[tonic::async_trait]
impl WorkerService for Api {
    async fn lease_jobs(&self, request: Request<LeaseJobsRequest>) -> Result<Response<LeaseJobsResponse>, Status> {
        let request = request.into_inner();
        require_worker(&request.worker_id)?;
        if request.max_jobs == 0 {
            return Err(Status::invalid_argument("max_jobs must be at least 1"));
        }
        let run = (request.run_id > 0).then_some(request.run_id);
        let max = request.max_jobs.min(MAX_LEASE_BATCH);
        let leases = self.0.store.lease(run, &request.worker_id, max, self.0.lease_ttl).await.map_err(status_of)?;
        let idle = leases.is_empty()
            && self.0.store.list_runs().await.map_err(status_of)?.iter().all(|r| r.jobs_done == r.jobs_total);
        let jobs = leases
            .into_iter()
            .map(|lease| Job {
                job_id: lease.job_id,
                run_id: lease.run_id,
                class_id: lease.class_id,
                band: lease.band,
                seed: u32::from(lease.seed),
                seed_text: SEEDS[lease.seed as usize].to_string(),
                counter: lease.counter,
                token: lease.token,
                attempt: lease.attempt,
            })
            .collect();
        Ok(Response::new(LeaseJobsResponse { jobs, lease_ttl_seconds: self.0.lease_ttl.as_secs().max(1) as u32, idle }))
    }

    async fn heartbeat(&self, request: Request<HeartbeatRequest>) -> Result<Response<HeartbeatResponse>, Status> {
        let request = request.into_inner();
        require_worker(&request.worker_id)?;
        let outcome = self.0.store.heartbeat(&request.worker_id, &request.tokens, self.0.lease_ttl).await.map_err(status_of)?;
        Ok(Response::new(HeartbeatResponse { cancel_tokens: outcome.lost }))
    }

    async fn complete_jobs(&self, request: Request<CompleteJobsRequest>) -> Result<Response<CompleteJobsResponse>, Status> {
        let request = request.into_inner();
        require_worker(&request.worker_id)?;
        let mut outcomes: Vec<Option<JobOutcome>> = vec![None; request.results.len()];
        let mut valid = Vec::new();
        let mut positions = Vec::new();
        for (i, result) in request.results.iter().enumerate() {
            match completion_of(&request.worker_id, result) {
                Ok(completion) => {
                    valid.push(completion);
                    positions.push(i);
                }
                Err(status) => {
                    outcomes[i] = Some(JobOutcome {
                        job_id: result.job_id,
                        status: OutcomeStatus::Rejected as i32,
                        message: status.message().to_string(),
                    })
                }
            }
        }
        let recorded = self.0.store.complete_many(&valid).await.map_err(status_of)?;
        let any_recorded = recorded.iter().any(|o| matches!(o, Ok(CompleteOutcome::Recorded)));
        for ((position, completion), outcome) in positions.into_iter().zip(&valid).zip(recorded) {
            outcomes[position] = Some(outcome_of(completion.job_id, outcome));
        }
        if any_recorded {
            self.0.announce_finished_runs().await;
        }
        Ok(Response::new(CompleteJobsResponse { outcomes: outcomes.into_iter().map(|o| o.expect("every result has an outcome")).collect() }))
    }

    async fn complete_job(&self, request: Request<CompleteJobRequest>) -> Result<Response<JobOutcome>, Status> {
        let request = request.into_inner();
        require_worker(&request.worker_id)?;
        let result = request.result.ok_or_else(|| Status::invalid_argument("result is missing"))?;
        let completion = completion_of(&request.worker_id, &result)?;
        let outcome = self.0.store.complete(&completion).await.map_err(status_of)?;
        if outcome == CompleteOutcome::Recorded {
            self.0.announce_finished_runs().await;
        }
        Ok(Response::new(outcome_of(result.job_id, Ok(outcome))))
    }

    async fn fail_job(&self, request: Request<FailJobRequest>) -> Result<Response<FailJobResponse>, Status> {
        let request = request.into_inner();
        require_worker(&request.worker_id)?;
        if request.token.is_empty() {
            return Err(Status::invalid_argument("the lease token is missing"));
        }
        self.0.store.fail(request.job_id, &request.token, &request.worker_id, &request.reason).await.map_err(status_of)?;
        Ok(Response::new(FailJobResponse {}))
    }
}

type ProgressStream = Pin<Box<dyn Stream<Item = Result<Progress, Status>> + Send>>;

#[tonic::async_trait]
impl CensusService for Api {
    async fn create_run(&self, request: Request<CreateRunRequest>) -> Result<Response<Run>, Status> {
        let request = request.into_inner();
        let stage: Stage = request.stage.parse().map_err(|e: census_math::UnknownStage| Status::invalid_argument(e.to_string()))?;
        let counter = if request.counter.is_empty() {
            CounterKind::default()
        } else {
            request.counter.parse().map_err(|e: census_math::counter::UnknownCounter| Status::invalid_argument(e.to_string()))?
        };
        let run = self.0.create_run(stage, counter, request.redundancy.max(1)).await.map_err(status_of)?;
        Ok(Response::new(run_message(run)))
    }

    async fn list_runs(&self, _request: Request<ListRunsRequest>) -> Result<Response<ListRunsResponse>, Status> {
        let runs = self.0.store.list_runs().await.map_err(status_of)?;
        Ok(Response::new(ListRunsResponse { runs: runs.into_iter().map(run_message).collect() }))
    }

    async fn get_progress(&self, request: Request<GetProgressRequest>) -> Result<Response<Progress>, Status> {
        let run = self.0.latest_run(request.into_inner().run_id).await?;
        Ok(Response::new(self.0.progress(run).await?))
    }

    type WatchProgressStream = ProgressStream;

    async fn watch_progress(&self, request: Request<WatchProgressRequest>) -> Result<Response<ProgressStream>, Status> {
        let request = request.into_inner();
        let run = self.0.latest_run(request.run_id).await?;
        let interval = Duration::from_millis(u64::from(request.interval_ms.max(100)));
        let coordinator = self.0.clone();
        let (sender, receiver) = tokio::sync::mpsc::channel(4);
        tokio::spawn(async move {
            loop {
                let progress = coordinator.progress(run).await;
                let last = progress.as_ref().map(|p| p.r#final).unwrap_or(true);
                if sender.send(progress).await.is_err() || last {
                    break;
                }
                tokio::time::sleep(interval).await;
            }
        });
        Ok(Response::new(Box::pin(tokio_stream::wrappers::ReceiverStream::new(receiver))))
    }

    async fn get_result(&self, request: Request<GetResultRequest>) -> Result<Response<RunResult>, Status> {
        let run = self.0.latest_run(request.into_inner().run_id).await?;
        let total = self.0.store.total(run).await.map_err(status_of)?;
        let s: BigUint = total.s.parse().map_err(|_| Status::internal("the stored S is not a number"))?;
        let n0: BigUint = total.n0.parse().map_err(|_| Status::internal("the stored N0 is not a number"))?;
        let estimate = kilfoil_estimate();
        Ok(Response::new(RunResult {
            run_id: run,
            r#final: total.is_final,
            factorization: factorize(&s).to_string(),
            kilfoil_estimate: estimate,
            kilfoil_relative_error: if n0 == BigUint::default() { 0.0 } else { relative_error(estimate, &n0) },
            s: total.s,
            n0: total.n0,
        }))
    }

    async fn list_classes(&self, request: Request<ListClassesRequest>) -> Result<Response<ListClassesResponse>, Status> {
        let run = self.0.latest_run(request.into_inner().run_id).await?;
        let classes = self.0.store.class_totals(run).await.map_err(status_of)?;
        let lines = classes
            .into_iter()
            .map(|class| {
                let seed_sum: BigUint = class.seed_sum.parse().unwrap_or_default();
                ClassLine {
                    class_id: class.class_id,
                    representative: class.representative,
                    size: class.size,
                    seeds_done: class.seeds_done,
                    completions: (&seed_sum * 72u32).to_string(),
                    contribution: (&seed_sum * class.size).to_string(),
                    seed_sum: class.seed_sum,
                    complete: class.complete,
                }
            })
            .collect();
        Ok(Response::new(ListClassesResponse { classes: lines }))
    }

    async fn recount_job(&self, request: Request<RecountJobRequest>) -> Result<Response<RecountJobResponse>, Status> {
        self.0.store.recount(request.into_inner().job_id).await.map_err(status_of)?;
        Ok(Response::new(RecountJobResponse {}))
    }
}
