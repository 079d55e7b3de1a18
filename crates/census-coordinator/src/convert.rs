//! Translation between the store's types and the protocol's messages, in
//! both directions, with the checks of form that need no store: a result's
//! fields, and which gRPC status a store error becomes.

use census_math::census::Census;
use census_proto::v1::job_outcome::Status as OutcomeStatus;
use census_proto::v1::{AcceptedCount, Job, JobOutcome, JobResult, Run};
use census_store::{CompleteOutcome, Completion, Lease, RunSummary, StoreError};
use tonic::Status;

use crate::limits::{self, MAX_NAME_LEN, MAX_TOKEN_LEN};

/// Maps a store error to the gRPC status a client can act on: permanent
/// refusals are INVALID_ARGUMENT, NOT_FOUND or FAILED_PRECONDITION, and only
/// what may pass is UNAVAILABLE.
pub fn status_of(error: StoreError) -> Status {
    let message = error.report();
    if matches!(
        error,
        StoreError::Database(_)
            | StoreError::Unavailable(_)
            | StoreError::Storage { .. }
            | StoreError::Connect { .. }
            | StoreError::Internal(_)
    ) {
        metrics::counter!("census_store_errors_total", "retryable" => if error.is_retryable() { "yes" } else { "no" })
            .increment(1);
    }
    match error {
        StoreError::UnknownRun(_) | StoreError::UnknownJob(_) => Status::not_found(message),
        StoreError::StaleToken { .. } | StoreError::RunCancelled(_) => Status::failed_precondition(message),
        StoreError::Invalid(_) | StoreError::Rejected { .. } => Status::invalid_argument(message),
        StoreError::TotalMismatch { .. } | StoreError::Fold(_) | StoreError::UnreadableCensus { .. } => {
            Status::data_loss(message)
        }
        // A full disk, a read-only file: the store's fault, never the
        // caller's; the call is retried once the operator has mended it.
        StoreError::Connect { .. } | StoreError::Unavailable(_) | StoreError::Storage { .. } => {
            Status::unavailable(message)
        }
        StoreError::Database(_) | StoreError::Internal(_) | StoreError::BadLocation { .. } => Status::internal(message),
    }
}

pub(crate) fn run_message(run: RunSummary) -> Run {
    // The stage and counter fields are the 9x9 count's alone.
    let (stage, counter) = match run.spec.census {
        Census::Sudoku { stage, counter } => (stage.name().to_string(), counter.name().to_string()),
        _ => Default::default(),
    };
    Run {
        run_id: run.run_id,
        census: run.spec.census.to_string(),
        stage,
        counter,
        counter_version: run.spec.counter_version,
        redundancy: run.spec.redundancy,
        classes: run.classes,
        jobs_total: run.jobs_total,
        jobs_done: run.jobs_done,
        r#final: run.is_final,
        priority: run.priority,
        cancelled: run.cancelled,
    }
}

/// A lease as the worker receives it.
pub(crate) fn job_message(lease: Lease) -> Job {
    Job {
        job_id: lease.job_id,
        run_id: lease.run_id,
        census: lease.census.to_string(),
        key: lease.key,
        token: lease.token,
        attempt: lease.attempt,
    }
}

/// A stage's accepted count as a worker reads it.
pub(crate) fn accepted_message(accepted: census_store::AcceptedCount) -> AcceptedCount {
    AcceptedCount { job_id: accepted.job_id, key: accepted.key, count: accepted.count.to_string() }
}

/// Checks a reported result's form; the store checks it against the job.
pub(crate) fn completion_of(worker: &str, result: &JobResult) -> Result<Completion, Status> {
    let job = result.job_id;
    if job <= 0 {
        return Err(Status::invalid_argument(format!("job_id {job} is not a job")));
    }
    if result.token.is_empty() {
        return Err(Status::invalid_argument(format!("job {job}: the lease token is missing")));
    }
    limits::bounded("the lease token", &result.token, MAX_TOKEN_LEN)?;
    limits::bounded("counter_version", &result.counter_version, MAX_NAME_LEN)?;
    if result.key.is_empty() {
        return Err(Status::invalid_argument(format!("job {job}: the counted key is missing")));
    }
    limits::bounded("key", &result.key, census_store::MAX_KEY_LEN)?;
    limits::bounded("count", &result.count, limits::MAX_COUNT_DIGITS)?;
    let count: u128 = result.count.parse().map_err(|_| {
        Status::invalid_argument(format!("job {job}: count {:?} is not a whole number below 2^128", result.count))
    })?;
    let elapsed =
        limits::elapsed(result.elapsed_seconds).map_err(|e| Status::invalid_argument(format!("job {job}: {e}")))?;
    Ok(Completion {
        job_id: job,
        token: result.token.clone(),
        worker: worker.to_string(),
        key: result.key.clone(),
        counter_version: result.counter_version.clone(),
        count,
        elapsed,
        checked_count: None,
    })
}

pub(crate) fn outcome_of(job_id: i64, outcome: Result<CompleteOutcome, StoreError>) -> JobOutcome {
    let label = match &outcome {
        Ok(CompleteOutcome::Recorded) => "recorded",
        Ok(CompleteOutcome::AlreadyDone) => "repeat",
        Ok(CompleteOutcome::Conflict { .. }) => "conflict",
        Err(StoreError::StaleToken { .. } | StoreError::RunCancelled(_)) => "stale",
        Err(_) => "rejected",
    };
    metrics::counter!("census_results_total", "outcome" => label).increment(1);
    let (status, message) = match outcome {
        Ok(CompleteOutcome::Recorded) => (OutcomeStatus::Recorded, String::new()),
        Ok(CompleteOutcome::AlreadyDone) => (OutcomeStatus::AlreadyDone, String::new()),
        Ok(CompleteOutcome::Conflict { stored }) => (
            OutcomeStatus::Conflict,
            format!("job {job_id}: the identities disagree ({stored} first); an operator must recount it"),
        ),
        Err(error @ (StoreError::StaleToken { .. } | StoreError::RunCancelled(_))) => {
            (OutcomeStatus::LeaseLost, error.report())
        }
        Err(error) => (OutcomeStatus::Rejected, error.report()),
    };
    JobOutcome { job_id, status: status as i32, message }
}
