//! The census's gRPC coordinator.
//!
//! It serves `census.v1.WorkerService` (lease, heartbeat, complete, fail,
//! what a stage of a run accepted) and
//! `census.v1.CensusService` (runs, progress, results, classes, operator
//! actions), plus the standard health and reflection services. Every call is
//! authenticated ([`auth`]), every request field is bounded ([`limits`]),
//! results are validated by an independent count where one exists, and the
//! request is translated into a [`JobStore`] call and the answer back.
//!
//! It is *not* where state lives: everything is in the store, so a
//! coordinator can be killed and restarted at any moment, and several can
//! serve the same Postgres database.

pub mod admission;
pub mod auth;
mod census_api;
mod checking;
mod conflicts;
mod convert;
pub mod limits;
mod metrics_page;
mod server;
mod status_page;
mod worker_api;

use std::sync::Arc;
use std::time::Duration;

use census_math::census::Census;
use census_store::{JobStore, RunId, RunSpec, RunSummary, StoreError};
use tonic::Status;

pub use admission::{AdmissionCounts, AdmissionLimits};
pub use auth::AuthConfig;
pub use checking::CheckingLimits;
pub use convert::status_of;
pub use metrics_page::{RenderMetrics, without_identities};

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
    /// The share of results counted again by the coordinator, 0 to 1;
    /// `None` (the default): each census's own
    /// ([`Census::default_check`]: every result of a kind whose jobs are
    /// cheap, one in a hundred where a quorum of workers checks instead).
    pub validate_fraction: Option<f64>,
    /// Seeds the draws that pick which results are checked when
    /// the share is below 1, so that a test can replay the same
    /// choices. `None` (the default, and what the command line uses) seeds
    /// from the operating system: a worker cannot predict which of its
    /// results will be checked.
    pub validation_seed: Option<u64>,
    /// Results of this process's own workers (tokens in [`AuthConfig::local`],
    /// as `census run` makes them) are recounted only where the check is
    /// another counter ([`Census::has_independent_check`]): the same counter
    /// in the same process could not disagree with them. Anyone else's
    /// results are checked as `validate_fraction` says.
    pub trust_local_workers: bool,
    /// How many recounts run at once, in all and for one identity.
    pub checking: CheckingLimits,
    /// How many reads (runs, progress, results, classes, the status page)
    /// use the store at once. Reads beyond it wait their turn, so they can
    /// never hold every connection of the store's pool (16 on Postgres
    /// unless `--database-connections` says otherwise)
    /// while workers wait to lease and report.
    pub concurrent_reads: usize,
    /// How many workers' calls use the store at once; more are refused at
    /// once with UNAVAILABLE and a retry hint, new leases first
    /// ([`admission`]: the priorities and the hint). The default,
    /// [`AdmissionLimits::for_pool`] of 16 connections, is for Postgres's
    /// default pool; `census coordinator` makes it from the pool it opens
    /// (`--database-connections`), or takes `--max-calls-in-flight`.
    pub admission: AdmissionLimits,
    /// How long a job in conflict (distinct identities disagree and no
    /// quorum has decided) waits, unchanged and with nobody counting it,
    /// for another identity to make a quorum; then the coordinator counts
    /// it itself and its count decides (`conflicts.rs`). The way a
    /// volunteer-computing server sends a disputed job to more hosts, a
    /// bounded number, and then decides.
    pub conflict_wait: Duration,
    /// `/metrics` answers without a credential too (for a Prometheus
    /// scraper), leaving out the series that name worker identities.
    /// Off: it needs a reader or operator token, like every read.
    pub public_metrics: bool,
    pub tls: Option<TlsFiles>,
}

impl CoordinatorConfig {
    /// Said at start-up and, for a run whose quorum is below 3 identities,
    /// in its progress ([`CoordinatorConfig::collusion_warning`]).
    pub const COLLUSION_WARNING: &str = "--validate-fraction 0: the coordinator recounts no result, so a run's \
        answer rests on its quorum alone: at redundancy 1 one identity, at redundancy 2 two colluding identities \
        can change it unseen";

    /// Whether the coordinator counts no result again
    /// (`--validate-fraction 0`), whatever each census's own check.
    pub fn recounts_nothing(&self) -> bool {
        self.validate_fraction.is_some_and(|fraction| fraction <= 0.0)
    }

    /// The warning for a run that needs `redundancy` identities to agree,
    /// when no result is recounted and fewer than 3 can change its answer.
    pub fn collusion_warning(&self, redundancy: u32) -> Option<&'static str> {
        (self.recounts_nothing() && redundancy < 3).then_some(Self::COLLUSION_WARNING)
    }
}

impl Default for CoordinatorConfig {
    fn default() -> CoordinatorConfig {
        CoordinatorConfig {
            lease_ttl: Duration::from_secs(30),
            auth: AuthConfig::default(),
            validate_fraction: None,
            validation_seed: None,
            trust_local_workers: false,
            checking: CheckingLimits::default(),
            concurrent_reads: 4,
            admission: AdmissionLimits::for_pool(16),
            conflict_wait: Duration::from_secs(300),
            public_metrics: false,
            tls: None,
        }
    }
}

/// The coordinator: a store and how it serves it.
pub struct Coordinator {
    store: Arc<dyn JobStore>,
    config: CoordinatorConfig,
    /// Counting results again, within bounds.
    checking: checking::Checking,
    /// The reads' share of the store ([`CoordinatorConfig::concurrent_reads`]).
    reads: Arc<tokio::sync::Semaphore>,
    /// The workers' calls' slots at the store.
    admission: Arc<admission::Admission>,
    /// The most reads that held a permit at once.
    reads_peak: std::sync::atomic::AtomicUsize,
    /// What was folded from finished runs, by the store's answer version:
    /// a finished run's answer changes only through a recount or
    /// quarantine, which change the version.
    finished: std::sync::Mutex<std::collections::HashMap<RunId, (String, census_proto::v1::RunResult)>>,
    /// Held while a finished run's answer is folded: one fold at a time,
    /// so memory holds one run's results, however many read at once.
    folding: tokio::sync::Mutex<()>,
    /// How many times an answer was folded from the results for a reader.
    answers_folded: std::sync::atomic::AtomicU64,
    /// The reports being recorded now.
    recording: worker_api::Recording,
}

/// The reports a coordinator is recording now, and the results they hold
/// ([`Coordinator::reports_in_progress`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReportsInProgress {
    pub reports: usize,
    pub results: usize,
}

/// The most finished runs whose folded answers are kept.
const FINISHED_RUNS_KEPT: usize = 64;

impl Coordinator {
    pub fn new(store: Arc<dyn JobStore>, config: CoordinatorConfig) -> Arc<Coordinator> {
        if config.recounts_nothing() {
            tracing::warn!("{}", CoordinatorConfig::COLLUSION_WARNING);
        }
        let checking = checking::Checking::new(config.checking, config.validation_seed);
        let reads = Arc::new(tokio::sync::Semaphore::new(config.concurrent_reads.max(1)));
        let admission = admission::Admission::new(config.admission, config.lease_ttl);
        Arc::new(Coordinator {
            store,
            config,
            checking,
            reads,
            admission,
            reads_peak: Default::default(),
            finished: Default::default(),
            folding: Default::default(),
            answers_folded: Default::default(),
            recording: Default::default(),
        })
    }

    /// Waits for a read's turn at the store; the turn lasts as long as the permit.
    pub(crate) async fn read_turn(&self) -> tokio::sync::OwnedSemaphorePermit {
        let permit = self.reads.clone().acquire_owned().await.expect("the read semaphore is never closed");
        let in_use = self.config.concurrent_reads.max(1) - self.reads.available_permits();
        self.reads_peak.fetch_max(in_use, std::sync::atomic::Ordering::Relaxed);
        permit
    }

    /// The most reads that used the store at once so far: never more than
    /// [`CoordinatorConfig::concurrent_reads`].
    pub fn most_concurrent_reads(&self) -> usize {
        self.reads_peak.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// What admission has done so far: calls admitted and refused, and the
    /// most in flight at once (never more than [`CoordinatorConfig::admission`]).
    pub fn admission(&self) -> AdmissionCounts {
        self.admission.counts()
    }

    /// How many times a reader's request made the store fold an answer
    /// from the results (a finished run's is folded once, then kept until
    /// its answer version changes).
    pub fn answers_folded(&self) -> u64 {
        self.answers_folded.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The reports being recorded now and the results they hold: what the
    /// coordinator keeps in memory for its workers' reports (a report whose
    /// caller has gone keeps only the results whose leases it held).
    pub fn reports_in_progress(&self) -> ReportsInProgress {
        self.recording.now()
    }

    /// How many results this coordinator has counted again (checked), so
    /// far: what its callers have made it spend.
    pub fn results_recounted(&self) -> u64 {
        self.checking.recounted()
    }

    pub fn store(&self) -> &Arc<dyn JobStore> {
        &self.store
    }

    /// Creates (or finds, or resumes) the run of a census: its jobs are
    /// made (for the 9x9 count, the stage's class table is built) and
    /// stored a chunk at a time, never all in memory.
    ///
    /// `redundancy` is the number of distinct identities that must agree on
    /// each job; 0 takes the census's own ([`Census::default_check`]).
    pub async fn create_run(self: &Arc<Self>, census: Census, redundancy: u32) -> Result<RunSummary, StoreError> {
        let redundancy = if redundancy == 0 { census.default_check().quorum } else { redundancy };
        // Made as the store reads them, a chunk at a time (a 9x9 stage's
        // class table is built here, off the async threads).
        let jobs = tokio::task::spawn_blocking(move || census.job_stream())
            .await
            .map_err(|e| StoreError::Internal(format!("listing the census's jobs panicked: {e}")))?
            .map_err(|e| StoreError::Invalid(e.to_string()))?;
        // The checker's tables are built while the first jobs are counted.
        let coordinator = self.clone();
        tokio::task::spawn_blocking(move || coordinator.checking.prepare(census));
        let spec = RunSpec { census, counter_version: census.counter_version(), redundancy };
        let run = self.store.create_run_streaming(&spec, jobs).await?;
        if let Some(warning) = self.config.collusion_warning(redundancy) {
            tracing::warn!(run, redundancy, "{warning}");
        }
        self.store.run(run).await
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
            // Through the cache: the fold made here serves the readers.
            match self.result(run).await {
                Ok(total) => {
                    let answer = total.answer;
                    tracing::info!(run, census = %total.census, %answer, "census finished: {answer}")
                }
                Err(error) => {
                    tracing::error!(run, error = %error.message(), "the finished run's total does not check")
                }
            }
        }
    }
}

/// The services, sharing one coordinator.
#[derive(Clone)]
struct Api(Arc<Coordinator>);

impl Api {
    /// Who is calling, as the authorization layer found it (`server.rs`,
    /// from the table [`auth::POLICY`]); a call that did not pass it is refused.
    fn caller<T>(request: &tonic::Request<T>) -> Result<auth::Caller, Status> {
        request
            .extensions()
            .get::<auth::Caller>()
            .cloned()
            .ok_or_else(|| Status::internal("the call was not authorized: the authorization layer did not see it"))
    }

    /// The call's admission slot, as the authorization layer admitted it
    /// (empty for the calls admission does not bound).
    fn admitted<T>(request: &tonic::Request<T>) -> admission::Admitted {
        request.extensions().get::<admission::Admitted>().cloned().unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::CoordinatorConfig;

    /// Issue 44: `--validate-fraction 0` leaves a run's answer to its
    /// quorum; below 3 identities that is said, at start-up, at each run's
    /// creation and in its progress. A census's own check, or a quorum of
    /// 3 or more, is no cause for it.
    #[test]
    fn no_recount_below_a_quorum_of_three_is_warned_of() {
        let unchecked = CoordinatorConfig { validate_fraction: Some(0.0), ..CoordinatorConfig::default() };
        assert!(unchecked.recounts_nothing());
        for redundancy in [1, 2] {
            assert_eq!(unchecked.collusion_warning(redundancy), Some(CoordinatorConfig::COLLUSION_WARNING));
        }
        assert_eq!(unchecked.collusion_warning(3), None);
        for fraction in [None, Some(0.01), Some(1.0)] {
            let checked = CoordinatorConfig { validate_fraction: fraction, ..CoordinatorConfig::default() };
            assert!(!checked.recounts_nothing());
            assert_eq!(checked.collusion_warning(1), None, "{fraction:?}");
        }
        assert!(CoordinatorConfig::COLLUSION_WARNING.contains("two colluding identities can change it"));
    }
}
