//! The census's gRPC coordinator.
//!
//! It serves `census.v1.WorkerService` (lease, heartbeat, complete, fail) and
//! `census.v1.CensusService` (runs, progress, results, classes, operator
//! actions), plus the standard health and reflection services. Every call is
//! authenticated ([`auth`]), every request field is bounded ([`limits`]),
//! results are validated by an independent count where one exists, and the
//! request is translated into a [`JobStore`] call and the answer back.
//!
//! It is *not* where state lives: everything is in the store, so a
//! coordinator can be killed and restarted at any moment, and several can
//! serve the same Postgres database.

pub mod auth;
mod census_api;
pub mod limits;
mod status_page;
mod worker_api;

use std::sync::Arc;
use std::time::Duration;

use census_math::census::{Census, JobCounter};
use census_proto::v1::census_service_server::CensusServiceServer;
use census_proto::v1::worker_service_server::WorkerServiceServer;
use census_store::{JobStore, RunId, RunSpec, RunSummary, StoreError};
use tonic::Status;
use tonic::transport::{Certificate, Identity, ServerTlsConfig};

pub use auth::AuthConfig;

/// The most jobs one lease call hands out.
pub const MAX_LEASE_BATCH: u32 = limits::MAX_BATCH;

/// TLS for the coordinator: its certificate and key (PEM), and optionally
/// a CA whose client certificates it then requires.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    pub certificate_pem: Vec<u8>,
    pub key_pem: Vec<u8>,
    pub client_ca_pem: Option<Vec<u8>>,
}

/// How a coordinator runs.
#[derive(Debug, Clone)]
pub struct CoordinatorConfig {
    /// How long a lease lasts without a heartbeat.
    pub lease_ttl: Duration,
    /// Who may call what.
    pub auth: AuthConfig,
    /// The share of results checked by an independent count, 0 to 1.
    pub validate_fraction: f64,
    pub tls: Option<TlsFiles>,
}

impl Default for CoordinatorConfig {
    fn default() -> CoordinatorConfig {
        CoordinatorConfig {
            lease_ttl: Duration::from_secs(30),
            auth: AuthConfig::default(),
            validate_fraction: 1.0,
            tls: None,
        }
    }
}

/// The coordinator: a store and how it serves it.
pub struct Coordinator {
    store: Arc<dyn JobStore>,
    config: CoordinatorConfig,
    /// The counters that check results, one per census, built on first
    /// use (`Census::checking_counter`: for 9x9 runs the column-sets
    /// counter, whatever counter the run uses).
    checkers: std::sync::Mutex<std::collections::HashMap<String, Arc<JobCounter>>>,
}

/// Maps a store error to the gRPC status a client can act on: permanent
/// refusals are INVALID_ARGUMENT, NOT_FOUND or FAILED_PRECONDITION, and only
/// what may pass is UNAVAILABLE.
pub fn status_of(error: StoreError) -> Status {
    let message = error.report();
    if matches!(error, StoreError::Database(_) | StoreError::Unavailable(_) | StoreError::Connect { .. } | StoreError::Internal(_)) {
        metrics::counter!("census_store_errors_total", "retryable" => if error.is_retryable() { "yes" } else { "no" })
            .increment(1);
    }
    match error {
        StoreError::UnknownRun(_) | StoreError::UnknownJob(_) => Status::not_found(message),
        StoreError::StaleToken { .. } | StoreError::RunCancelled(_) => Status::failed_precondition(message),
        StoreError::CountTooLarge { .. } | StoreError::Invalid(_) | StoreError::Rejected { .. } => {
            Status::invalid_argument(message)
        }
        StoreError::TotalMismatch { .. } | StoreError::Fold(_) => Status::data_loss(message),
        StoreError::Connect { .. } | StoreError::Unavailable(_) => Status::unavailable(message),
        StoreError::Database(_) | StoreError::Internal(_) => Status::internal(message),
    }
}

impl Coordinator {
    pub fn new(store: Arc<dyn JobStore>, config: CoordinatorConfig) -> Arc<Coordinator> {
        Arc::new(Coordinator { store, config, checkers: Default::default() })
    }

    pub fn store(&self) -> &Arc<dyn JobStore> {
        &self.store
    }

    /// Creates (or finds, or resumes) the run of a census: its jobs are
    /// listed here (for the 9x9 count, the stage's class table is built)
    /// and stored.
    pub async fn create_run(self: &Arc<Self>, census: Census, redundancy: u32) -> Result<RunSummary, StoreError> {
        let jobs = tokio::task::spawn_blocking(move || census.jobs())
            .await
            .map_err(|e| StoreError::Internal(format!("listing the census's jobs panicked: {e}")))?
            .map_err(|e| StoreError::Invalid(e.to_string()))?;
        // The checker's tables are built while the first jobs are counted.
        let coordinator = self.clone();
        tokio::task::spawn_blocking(move || coordinator.checker(&census.to_string()));
        let spec = RunSpec {
            census: census.to_string(),
            counter_version: census.counter_version(),
            redundancy: redundancy.max(1),
        };
        let run = self.store.create_run(&spec, &jobs).await?;
        self.store.run(run).await
    }

    /// The counter that checks results of `census` (text as stored),
    /// built once (under the lock, so that concurrent checks wait for one
    /// build instead of making their own).
    fn checker(&self, census: &str) -> Option<Arc<JobCounter>> {
        let mut checkers = self.checkers.lock().expect("never poisoned");
        if let Some(checker) = checkers.get(census) {
            return Some(checker.clone());
        }
        let parsed: Census = census.parse().ok()?;
        let checker = Arc::new(parsed.checking_counter());
        checkers.insert(census.to_string(), checker.clone());
        Some(checker)
    }

    /// Serves every service on `listener` until `shutdown` completes.
    /// Health is NOT_SERVING while the database does not answer.
    pub async fn serve(
        self: Arc<Self>,
        listener: tokio::net::TcpListener,
        shutdown: impl std::future::Future<Output = ()> + Send,
    ) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        let (reporter, health) = tonic_health::server::health_reporter();
        let watcher = tokio::spawn(watch_database(self.store.clone(), reporter));
        let gauges = tokio::spawn(publish_job_gauges(self.store.clone()));
        let reflection = tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(census_proto::FILE_DESCRIPTOR_SET)
            .build_v1()?;
        let mut builder = tonic::transport::Server::builder();
        if let Some(tls) = &self.config.tls {
            let mut config = ServerTlsConfig::new().identity(Identity::from_pem(&tls.certificate_pem, &tls.key_pem));
            if let Some(ca) = &tls.client_ca_pem {
                config = config.client_ca_root(Certificate::from_pem(ca));
            }
            builder = builder.tls_config(config)?;
        }
        let api = Api(self);
        let served = builder
            .add_service(health)
            .add_service(reflection)
            .add_service(WorkerServiceServer::new(api.clone()))
            .add_service(CensusServiceServer::new(api))
            .serve_with_incoming_shutdown(tokio_stream::wrappers::TcpListenerStream::new(listener), shutdown)
            .await;
        watcher.abort();
        gauges.abort();
        served?;
        Ok(())
    }

    /// Serves the live status page (`/`) and its JSON (`/api/status`) over
    /// HTTP on `listener` until `shutdown` completes.
    pub async fn serve_status_page(
        self: Arc<Self>,
        listener: tokio::net::TcpListener,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        axum::serve(listener, status_page::router(self)).with_graceful_shutdown(shutdown).await
    }

    async fn latest_run(&self, run: i64) -> Result<RunId, Status> {
        if run > 0 {
            return Ok(run);
        }
        let runs = self.store.list_runs().await.map_err(status_of)?;
        runs.last()
            .map(|r| r.run_id)
            .ok_or_else(|| Status::not_found("there are no runs yet; create one with `census submit`"))
    }

    /// Logs the exact total of every run that has become final.
    /// Logs the answer of every run that this coordinator's completions
    /// finished: the store says which, so nothing is asked of every run.
    async fn announce_finished_runs(&self) {
        for run in self.store.take_finished_runs() {
            match self.store.total(run).await {
                Ok(total) => {
                    let answer = total.answer.map(|answer| answer.to_string()).unwrap_or_default();
                    tracing::info!(run, census = %total.census, %answer, "census finished: {answer}")
                }
                Err(error) => tracing::error!(run, error = %error.report(), "the finished run's total does not check"),
            }
        }
    }
}

/// Keeps the health service true: SERVING while the database answers,
/// NOT_SERVING while it does not, checked every two seconds.
async fn watch_database(store: Arc<dyn JobStore>, reporter: tonic_health::server::HealthReporter) {
    let mut serving = None;
    loop {
        let up = matches!(tokio::time::timeout(Duration::from_secs(6), store.ping()).await, Ok(Ok(())));
        if serving != Some(up) {
            let status =
                if up { tonic_health::ServingStatus::Serving } else { tonic_health::ServingStatus::NotServing };
            reporter.set_service_status("", status).await;
            reporter.set_service_status("census.v1.WorkerService", status).await;
            reporter.set_service_status("census.v1.CensusService", status).await;
            if up {
                tracing::info!("the database answers: serving");
            } else {
                tracing::error!("the database does not answer: health is NOT_SERVING");
            }
            serving = Some(up);
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// Publishes the jobs of the most recent runs by state, as gauges for
/// Prometheus (`census_jobs{run, state}`), every few seconds. Without a
/// metrics exporter installed the gauges go nowhere.
async fn publish_job_gauges(store: Arc<dyn JobStore>) {
    const RECENT_RUNS: usize = 20;
    loop {
        if let Ok(runs) = store.list_runs().await {
            for run in runs.iter().rev().take(RECENT_RUNS) {
                let Ok(progress) = store.progress(run.run_id).await else { continue };
                let id = run.run_id.to_string();
                for (state, jobs) in [
                    ("pending", progress.pending),
                    ("leased", progress.leased),
                    ("done", progress.done),
                    ("failed", progress.failed),
                ] {
                    metrics::gauge!("census_jobs", "run" => id.clone(), "state" => state).set(jobs as f64);
                }
                metrics::gauge!("census_conflicts", "run" => id.clone()).set(progress.conflicts as f64);
                metrics::gauge!("census_rejected_results", "run" => id).set(progress.rejected as f64);
            }
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// The services, sharing one coordinator.
#[derive(Clone)]
struct Api(Arc<Coordinator>);

impl Api {
    async fn authorize(
        &self,
        metadata: &tonic::metadata::MetadataMap,
        need: auth::Need,
    ) -> Result<auth::Caller, Status> {
        auth::authorize(&self.0.config.auth, self.0.store.as_ref(), metadata, need).await
    }
}
