//! The live status page: one HTML file with a little script, and the JSON
//! it polls (`/api/status`), served over plain HTTP next to gRPC. No build
//! step, no framework: the page renders what the JSON says every second.
//!
//! The JSON needs the same credential as the gRPC reads (a reader or
//! operator token, unless `--public-read`); the page takes it from the URL's
//! fragment (`/#token=census_...`), which browsers never send to a server.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use serde::Serialize;

use crate::auth::Need;
use crate::convert::run_message;
use crate::{Coordinator, status_of};

const PAGE: &str = include_str!("page.html");

/// The most runs the page shows, newest first.
const RECENT_RUNS: usize = 10;
/// Runs with more classes show only a summary of them.
const MAX_CLASS_ROWS: usize = 200;

#[derive(Serialize)]
struct StatusJson {
    runs: Vec<RunJson>,
}

#[derive(Serialize)]
struct RunJson {
    run_id: i64,
    census: String,
    /// Whether the run is the 9x9 count (`Census::is_nine_by_nine`): the
    /// page then shows S and N0, and classes as bands with seeds.
    nine_by_nine: bool,
    /// Empty for censuses other than the 9x9 count.
    stage: String,
    classes_in_stage: u64,
    counter: String,
    redundancy: u32,
    cancelled: bool,
    jobs_total: u64,
    done: u64,
    leased: u64,
    pending: u64,
    failed: u64,
    conflicts: u64,
    rejected: u64,
    jobs_per_second: f64,
    /// The expected cost of all the jobs and of the done ones
    /// (`Census::job_cost`), and the share done: what the bar shows.
    cost_total: u64,
    cost_done: u64,
    cost_fraction_done: f64,
    /// Whether the census's jobs differ in cost (`Census::knows_job_costs`),
    /// so that the share of the cost done differs from that of the jobs.
    costs_known: bool,
    /// The cost left at the cost done a second (0 when unknown).
    eta_seconds: f64,
    r#final: bool,
    /// The run is finished and this coordinator is checking its stored
    /// answer against the accepted results (its first read of the run folds
    /// them all again): `final` stays false and no answer is shown until
    /// the check is done.
    verifying: bool,
    s: String,
    n0: String,
    factorization: String,
    /// The exact answer once final, and its named terms.
    answer: String,
    terms: Vec<(String, String)>,
    weighted_sum: String,
    quarantined: Vec<String>,
    /// What the operator should know of how the run is checked (`Progress::warnings`).
    warnings: Vec<String>,
    /// The workers with the most jobs, at most 100 (`Progress::workers`).
    workers: Vec<WorkerJson>,
    workers_total: u64,
    classes: Vec<ClassJson>,
    classes_total: usize,
}

#[derive(Serialize)]
struct WorkerJson {
    worker: String,
    jobs: u64,
    completions: String,
    last_seen_unix: i64,
}

#[derive(Serialize)]
struct ClassJson {
    class_id: u32,
    representative: String,
    size: u64,
    weight: String,
    seeds_done: u32,
    jobs_total: u32,
    count_sum: String,
    completions: String,
    contribution: String,
    complete: bool,
}

/// The page and its API.
pub(crate) fn router(coordinator: Arc<Coordinator>) -> axum::Router {
    axum::Router::new()
        .route("/", get(|| async { Html(PAGE) }))
        .route("/api/status", get(status))
        .with_state(coordinator)
}

async fn status(State(coordinator): State<Arc<Coordinator>>, headers: HeaderMap) -> Response {
    match status_json(&coordinator, headers).await {
        Ok(json) => ([(header::CACHE_CONTROL, "no-store")], Json(json)).into_response(),
        Err(status) => {
            let code = match status.code() {
                tonic::Code::Unauthenticated => StatusCode::UNAUTHORIZED,
                tonic::Code::PermissionDenied => StatusCode::FORBIDDEN,
                tonic::Code::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
                _ => StatusCode::INTERNAL_SERVER_ERROR,
            };
            (code, status.message().to_string()).into_response()
        }
    }
}

async fn status_json(coordinator: &Arc<Coordinator>, headers: HeaderMap) -> Result<StatusJson, tonic::Status> {
    let metadata = tonic::metadata::MetadataMap::from_headers(headers);
    crate::auth::authorize(&coordinator.config.auth, coordinator.store.as_ref(), &metadata, Need::Read).await?;
    let _turn = coordinator.read_turn().await;
    let summaries = coordinator.store.list_runs().await.map_err(status_of)?;
    let mut runs = Vec::new();
    for summary in summaries.into_iter().rev().take(RECENT_RUNS) {
        let nine_by_nine = summary.spec.census.is_nine_by_nine();
        let costs_known = summary.spec.census.knows_job_costs();
        let classes_total = summary.classes as usize;
        let run = run_message(summary);
        let progress = coordinator.progress(run.run_id).await?;
        // Never waits for a fold of every result: a finished run not yet
        // checked by this coordinator shows that it is being checked.
        let result = coordinator.result_unless_folding(run.run_id).await?;
        let verifying = result.is_none();
        let result = result.unwrap_or_default();
        // The first classes only: a run may have 10^6.
        let lines = coordinator.class_lines(run.run_id, 0, Some(MAX_CLASS_ROWS as u32)).await?;
        runs.push(RunJson {
            run_id: run.run_id,
            census: run.census,
            nine_by_nine,
            stage: run.stage,
            classes_in_stage: run.classes,
            counter: run.counter,
            redundancy: run.redundancy,
            cancelled: run.cancelled,
            jobs_total: progress.jobs_total,
            done: progress.done,
            leased: progress.leased,
            pending: progress.pending,
            failed: progress.failed,
            conflicts: progress.conflicts,
            rejected: progress.rejected,
            jobs_per_second: progress.jobs_per_second,
            cost_total: progress.cost_total,
            cost_done: progress.cost_done,
            cost_fraction_done: progress.fraction_done(),
            costs_known,
            eta_seconds: progress.eta_seconds,
            r#final: result.r#final,
            verifying,
            s: result.s,
            n0: result.n0,
            factorization: result.factorization,
            answer: result.answer,
            terms: result.terms.into_iter().map(|term| (term.name, term.value)).collect(),
            weighted_sum: result.weighted_sum,
            quarantined: progress.quarantined,
            warnings: progress.warnings,
            workers: progress
                .workers
                .into_iter()
                .map(|w| WorkerJson {
                    worker: w.worker_id,
                    jobs: w.jobs,
                    completions: w.completions,
                    last_seen_unix: w.last_seen_unix,
                })
                .collect(),
            workers_total: progress.workers_total,
            classes: lines
                .into_iter()
                .map(|c| ClassJson {
                    class_id: c.class_id,
                    representative: c.representative,
                    size: c.size,
                    weight: c.weight,
                    seeds_done: c.seeds_done,
                    jobs_total: c.jobs_total,
                    count_sum: c.seed_sum,
                    completions: c.completions,
                    contribution: c.contribution,
                    complete: c.complete,
                })
                .collect(),
            classes_total,
        });
    }
    Ok(StatusJson { runs })
}
