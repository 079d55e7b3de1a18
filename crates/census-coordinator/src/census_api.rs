//! CensusService: runs, progress, results and classes for readers; run and
//! job actions for operators.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use census_math::census::Census;
use census_math::total::{factorize, kilfoil_estimate, n0_from_s, relative_error};
use census_math::{CounterKind, Stage};
use census_proto::v1::census_service_server::CensusService;
use census_proto::v1::{
    CancelRunRequest, ClassLine, CreateRunRequest, GetProgressRequest, GetResultRequest, ListClassesRequest,
    ListClassesResponse, ListRunsRequest, ListRunsResponse, Progress, RecountJobRequest, RecountJobResponse,
    RequeueJobsRequest, RequeueJobsResponse, Run, RunResult, SetRunPriorityRequest, Term, WatchProgressRequest,
    WorkerLine,
};
use census_store::{MAX_REDUNDANCY, RunId};
use num_bigint::BigUint;
use tokio_stream::Stream;
use tonic::{Request, Response, Status};

use crate::auth::Need;
use crate::convert::run_message;
use crate::limits::{self, MAX_NAME_LEN, MAX_WATCH_INTERVAL_MS};
use crate::{Api, Coordinator, status_of};

fn positive(field: &str, id: i64) -> Result<i64, Status> {
    if id <= 0 {
        return Err(Status::invalid_argument(format!("{field} {id} is not an id")));
    }
    Ok(id)
}

impl Coordinator {
    /// A run's answer, folded again by the store, with its terms; for
    /// finished 9x9 runs also S, N0, the factorization and Kilfoil's
    /// estimate (a partial sum is not S: until final only `weighted_sum`).
    ///
    /// A finished run's result is kept by its answer version
    /// ([`census_store::JobStore::answer_version`]): it is folded again only
    /// when that changes (a recount, a conflict, a stored sum that differs),
    /// so polling a finished run costs one row, not a fold of every result.
    pub(crate) async fn result(&self, run: RunId) -> Result<RunResult, Status> {
        let kept = |version: &Option<String>| self.kept_result(run, version);
        let version = self.store.answer_version(run).await.map_err(status_of)?;
        if let Some((_, result)) = kept(&version) {
            return Ok(result);
        }
        // One fold of a finished run at a time (it reads every result):
        // readers that arrive meanwhile wait, then find it kept.
        let _folding = match version {
            Some(_) => Some(self.folding.lock().await),
            None => None,
        };
        let version = self.store.answer_version(run).await.map_err(status_of)?;
        if let Some((_, result)) = kept(&version) {
            return Ok(result);
        }
        let result = self.fold_result(run).await?;
        if let Some(version) = version {
            let mut finished = self.finished.lock().expect("never poisoned");
            if finished.len() >= crate::FINISHED_RUNS_KEPT && !finished.contains_key(&run) {
                let oldest = *finished.keys().min().expect("not empty");
                finished.remove(&oldest);
            }
            finished.insert(run, (version, result.clone()));
        }
        Ok(result)
    }

    /// The result kept of a finished run at its answer `version`.
    fn kept_result(&self, run: RunId, version: &Option<String>) -> Option<(String, RunResult)> {
        let finished = self.finished.lock().expect("never poisoned");
        version.as_ref().and_then(|version| finished.get(&run).filter(|(kept, _)| kept == version)).cloned()
    }

    /// [`Coordinator::result`] without waiting for a fold: `None` for a
    /// finished run whose answer is not kept yet, which is then folded in
    /// the background (one fold at a time, as `result` does). What the
    /// status page polls: a coordinator's first read of a finished run
    /// folds every result again (about 45 s at 10^7 jobs), which would
    /// hold a poll that long.
    pub(crate) async fn result_unless_folding(self: &Arc<Self>, run: RunId) -> Result<Option<RunResult>, Status> {
        let version = self.store.answer_version(run).await.map_err(status_of)?;
        if version.is_none() {
            return self.result(run).await.map(Some);
        }
        if let Some((_, result)) = self.kept_result(run, &version) {
            return Ok(Some(result));
        }
        // A fold under way will keep its result; otherwise one begins.
        if self.folding.try_lock().is_ok() {
            let coordinator = self.clone();
            tokio::spawn(async move {
                if let Err(error) = coordinator.result(run).await {
                    tracing::error!(run, error = %error.message(), "the finished run's total does not check");
                }
            });
        }
        Ok(None)
    }

    async fn fold_result(&self, run: RunId) -> Result<RunResult, Status> {
        self.answers_folded.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let total = self.store.total(run).await.map_err(status_of)?;
        let mut result = RunResult {
            run_id: run,
            r#final: total.is_final,
            answer: total.answer.as_ref().map(ToString::to_string).unwrap_or_default(),
            terms: total.terms.into_iter().map(|(name, value)| Term { name, value }).collect(),
            weighted_sum: total.weighted_sum.to_string(),
            ..RunResult::default()
        };
        if total.is_final && total.census.is_nine_by_nine() {
            let s = total.weighted_sum;
            let n0 = total.answer.unwrap_or_else(|| n0_from_s(&s));
            let estimate = kilfoil_estimate();
            result.factorization = factorize(&s).to_string();
            result.kilfoil_estimate = estimate;
            result.kilfoil_relative_error = if n0 == BigUint::default() { 0.0 } else { relative_error(estimate, &n0) };
            result.s = s.to_string();
            result.n0 = n0.to_string();
        }
        result.census = total.census.to_string();
        Ok(result)
    }

    /// A run's classes with their sums so far, numbered `first` on, at most
    /// `limit` of them (all with `None`).
    pub(crate) async fn class_lines(
        &self,
        run: RunId,
        first: u32,
        limit: Option<u32>,
    ) -> Result<Vec<ClassLine>, Status> {
        let census = self.store.run(run).await.map_err(status_of)?.spec.census;
        let power = census.class_power();
        let classes = self.store.class_totals_from(run, first, limit).await.map_err(status_of)?;
        Ok(classes
            .into_iter()
            .map(|class| ClassLine {
                class_id: class.class_id,
                complete: class.complete(),
                size: u64::try_from(class.weight).unwrap_or(u64::MAX),
                weight: class.weight.to_string(),
                seeds_done: class.jobs_done,
                jobs_total: class.jobs_total,
                completions: census.group_completions(&class.count_sum).map(|n| n.to_string()).unwrap_or_default(),
                contribution: (class.count_sum.pow(power) * class.weight).to_string(),
                seed_sum: class.count_sum.to_string(),
                representative: class.label,
            })
            .collect())
    }

    pub(crate) async fn progress(&self, run: RunId) -> Result<Progress, Status> {
        let progress = self.store.progress(run).await.map_err(status_of)?;
        let summary = self.store.run(run).await.map_err(status_of)?;
        let quarantined = self.store.quarantined().await.map_err(status_of)?;
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
                .map(|w| WorkerLine {
                    worker_id: w.worker,
                    jobs: w.jobs,
                    completions: w.completions,
                    last_seen_unix: w.last_seen_unix,
                })
                .collect(),
            r#final: summary.is_final,
            rejected: progress.rejected,
            quarantined: quarantined.iter().map(|q| q.worker.clone()).collect(),
            quarantine_reasons: quarantined.into_iter().map(|q| q.reason).collect(),
            cost_total: progress.cost_total,
            cost_done: progress.cost_done,
            cost_per_second: progress.cost_per_second,
            workers_total: progress.workers_total,
            warnings: self.config.collusion_warning(summary.spec.redundancy).into_iter().map(String::from).collect(),
        })
    }
}

type ProgressStream = Pin<Box<dyn Stream<Item = Result<Progress, Status>> + Send>>;

#[tonic::async_trait]
impl CensusService for Api {
    async fn create_run(&self, request: Request<CreateRunRequest>) -> Result<Response<Run>, Status> {
        let caller = Self::caller(&request)?;
        let request = request.into_inner();
        limits::bounded("stage", &request.stage, MAX_NAME_LEN)?;
        limits::bounded("counter", &request.counter, MAX_NAME_LEN)?;
        limits::bounded("census", &request.census, census_store::MAX_KEY_LEN)?;
        let census = if request.census.is_empty() {
            let stage: Stage = request
                .stage
                .parse()
                .map_err(|e: census_math::UnknownStage| Status::invalid_argument(e.to_string()))?;
            let counter = if request.counter.is_empty() {
                CounterKind::default()
            } else {
                request
                    .counter
                    .parse()
                    .map_err(|e: census_math::counter::UnknownCounter| Status::invalid_argument(e.to_string()))?
            };
            Census::sudoku(stage, counter)
        } else if !request.stage.is_empty() || !request.counter.is_empty() {
            return Err(Status::invalid_argument(
                "give a census, or a stage and counter for the 9x9 count, not both (put them in the census: \
                 \"sudoku stage=44 counter=banded\")",
            ));
        } else {
            request
                .census
                .parse()
                .map_err(|e: census_math::census::CensusError| Status::invalid_argument(e.to_string()))?
        };
        if request.redundancy > MAX_REDUNDANCY {
            return Err(Status::invalid_argument(format!(
                "redundancy {} is more than {MAX_REDUNDANCY} identities",
                request.redundancy
            )));
        }
        let run = self.0.create_run(census, request.redundancy).await.map_err(status_of)?;
        if request.priority != 0 && request.priority != run.priority {
            self.0.store.set_priority(run.run_id, request.priority).await.map_err(status_of)?;
        }
        tracing::info!(operator = %caller.name, run = run.run_id, census = %run.spec.census, "run submitted");
        let run = self.0.store.run(run.run_id).await.map_err(status_of)?;
        Ok(Response::new(run_message(run)))
    }

    async fn list_runs(&self, request: Request<ListRunsRequest>) -> Result<Response<ListRunsResponse>, Status> {
        Self::caller(&request)?;
        let runs = self.0.store.list_runs().await.map_err(status_of)?;
        Ok(Response::new(ListRunsResponse { runs: runs.into_iter().map(run_message).collect() }))
    }

    async fn get_progress(&self, request: Request<GetProgressRequest>) -> Result<Response<Progress>, Status> {
        Self::caller(&request)?;
        let run = self.0.latest_run(request.into_inner().run_id).await?;
        Ok(Response::new(self.0.progress(run).await?))
    }

    type WatchProgressStream = ProgressStream;

    /// Streams progress until the run is final. The credential is checked
    /// again before every message: a token revoked (or a reader
    /// quarantined) while it watches ends its stream at the next tick.
    async fn watch_progress(&self, request: Request<WatchProgressRequest>) -> Result<Response<ProgressStream>, Status> {
        Self::caller(&request)?;
        let metadata = request.metadata().clone();
        let request = request.into_inner();
        let run = self.0.latest_run(request.run_id).await?;
        let interval = Duration::from_millis(u64::from(request.interval_ms.clamp(100, MAX_WATCH_INTERVAL_MS)));
        let coordinator = self.0.clone();
        // One message ahead at most: a revoked credential ends the stream
        // within two messages of the revocation.
        let (sender, receiver) = tokio::sync::mpsc::channel(1);
        tokio::spawn(async move {
            let mut first = true;
            loop {
                let turn = coordinator.read_turn().await;
                // The first tick was authorized by the layer a moment ago.
                let allowed = if first {
                    Ok(())
                } else {
                    crate::auth::authorize(&coordinator.config.auth, coordinator.store.as_ref(), &metadata, Need::Read)
                        .await
                        .map(drop)
                };
                first = false;
                let progress = match allowed {
                    Ok(()) => coordinator.progress(run).await,
                    Err(refused) => Err(refused),
                };
                drop(turn);
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
        Self::caller(&request)?;
        let run = self.0.latest_run(request.into_inner().run_id).await?;
        Ok(Response::new(self.0.result(run).await?))
    }

    async fn list_classes(
        &self,
        request: Request<ListClassesRequest>,
    ) -> Result<Response<ListClassesResponse>, Status> {
        Self::caller(&request)?;
        let request = request.into_inner();
        let run = self.0.latest_run(request.run_id).await?;
        let limit = (request.limit > 0).then_some(request.limit);
        Ok(Response::new(ListClassesResponse {
            classes: self.0.class_lines(run, request.first_class_id, limit).await?,
        }))
    }

    async fn recount_job(&self, request: Request<RecountJobRequest>) -> Result<Response<RecountJobResponse>, Status> {
        let caller = Self::caller(&request)?;
        let job = positive("job_id", request.into_inner().job_id)?;
        self.0.store.recount(job).await.map_err(status_of)?;
        tracing::warn!(operator = %caller.name, job, "job recounted");
        Ok(Response::new(RecountJobResponse {}))
    }

    async fn requeue_jobs(
        &self,
        request: Request<RequeueJobsRequest>,
    ) -> Result<Response<RequeueJobsResponse>, Status> {
        let caller = Self::caller(&request)?;
        let request = request.into_inner();
        let run = positive("run_id", request.run_id)?;
        let job = if request.job_id == 0 { None } else { Some(positive("job_id", request.job_id)?) };
        let requeued = self.0.store.requeue(run, job).await.map_err(status_of)?;
        tracing::warn!(operator = %caller.name, run, requeued, "failed jobs requeued");
        Ok(Response::new(RequeueJobsResponse { requeued }))
    }

    async fn cancel_run(&self, request: Request<CancelRunRequest>) -> Result<Response<Run>, Status> {
        let caller = Self::caller(&request)?;
        let run = positive("run_id", request.into_inner().run_id)?;
        self.0.store.cancel_run(run).await.map_err(status_of)?;
        tracing::warn!(operator = %caller.name, run, "run cancelled");
        Ok(Response::new(run_message(self.0.store.run(run).await.map_err(status_of)?)))
    }

    async fn set_run_priority(&self, request: Request<SetRunPriorityRequest>) -> Result<Response<Run>, Status> {
        let caller = Self::caller(&request)?;
        let request = request.into_inner();
        let run = positive("run_id", request.run_id)?;
        self.0.store.set_priority(run, request.priority).await.map_err(status_of)?;
        tracing::info!(operator = %caller.name, run, priority = request.priority, "run priority set");
        Ok(Response::new(run_message(self.0.store.run(run).await.map_err(status_of)?)))
    }
}
