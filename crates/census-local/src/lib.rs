//! The census system in one process.
//!
//! [`LocalCluster`] is the real coordinator (`census_coordinator`) serving
//! a store on a loopback port, with credentials made for this process
//! alone, and [`LocalCluster::start_workers`] starts real workers
//! (`census_worker::run_worker`) that reach it over gRPC as a cluster's
//! workers do: one code path, in one process. `census run` is a local
//! cluster and its workers; `census status --database` reads a database
//! through a local cluster with no credentials (reads only); `census
//! simulate` loads a local cluster with the simulated workers of
//! [`simulate`], the load test of the coordinator and its store.
//!
//! It is *not* a coordinator or a worker of its own: it assembles theirs
//! and adds nothing to what they do. It does not open databases (the
//! caller opens the store, by its own policy, and hands it over), and it
//! prints nothing.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use census_local::{Identities, LocalCluster};
//! let store = census_store::connect("census.db", census_store::StoreConfig::default()).await?;
//! let cluster = LocalCluster::start(store, Default::default(), Identities::named("local", 2)).await?;
//! let run = cluster.coordinator().create_run("synthetic jobs=100".parse()?, 1).await?;
//! let workers = cluster.start_workers(run.run_id, None);
//! // ... poll progress with cluster.operator() ...
//! workers.stop(census_worker::Stop::Now).await;
//! cluster.stop().await;
//! # Ok(()) }
//! ```

pub mod simulate;

use std::path::PathBuf;
use std::sync::Arc;

use census_coordinator::auth::{generate_token, hash_token};
use census_coordinator::{Coordinator, CoordinatorConfig};
use census_proto::client::ClientConfig;
use census_store::{JobStore, Role, RunId};
use census_worker::{Stop, WorkerConfig, WorkerError, WorkerReport};
use tokio::sync::{oneshot, watch};
use tokio::task::{JoinError, JoinHandle};

/// The credentials a local cluster makes: none (reads only, under
/// `AuthConfig::public_read`), or an operator `{prefix}-operator` and
/// workers `{prefix}-worker-{i}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identities {
    prefix: String,
    operator: bool,
    workers: usize,
}

impl Identities {
    /// No credentials: the cluster serves reads, if its configuration makes
    /// them public, and refuses everything else.
    pub fn none() -> Identities {
        Identities { prefix: String::new(), operator: false, workers: 0 }
    }

    /// An operator and `workers` workers, named after `prefix`.
    pub fn named(prefix: &str, workers: usize) -> Identities {
        Identities { prefix: prefix.to_string(), operator: true, workers }
    }
}

/// A credential made for this process: an identity and its token.
#[derive(Clone, PartialEq, Eq)]
pub struct Credential {
    /// The identity the coordinator counts the calls under.
    pub name: String,
    /// The bearer token, registered with the coordinator by its hash only.
    pub token: String,
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credential").field("name", &self.name).finish_non_exhaustive()
    }
}

type ServeResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

/// The real coordinator, serving a store on a loopback port of this
/// process, with credentials that exist only here: nothing outside the
/// process can present them.
pub struct LocalCluster {
    coordinator: Arc<Coordinator>,
    address: String,
    operator: Option<Credential>,
    workers: Vec<Credential>,
    stop: oneshot::Sender<()>,
    server: JoinHandle<ServeResult>,
}

impl LocalCluster {
    /// Serves `store` on `127.0.0.1` (a free port) with a coordinator of
    /// `config`, to which the credentials of `identities` are added.
    pub async fn start(
        store: Arc<dyn JobStore>,
        mut config: CoordinatorConfig,
        identities: Identities,
    ) -> std::io::Result<LocalCluster> {
        let mut register = |name: String, role: Role| {
            let token = generate_token();
            config.auth.local.insert(hash_token(&token), (name.clone(), role));
            Credential { name, token }
        };
        let operator = identities.operator.then(|| register(format!("{}-operator", identities.prefix), Role::Operator));
        let workers: Vec<Credential> = (0..identities.workers)
            .map(|i| register(format!("{}-worker-{i}", identities.prefix), Role::Worker))
            .collect();
        let coordinator = Coordinator::new(store, config);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let address = format!("http://{}", listener.local_addr()?);
        let (stop, stopped) = oneshot::channel::<()>();
        let server = tokio::spawn(coordinator.clone().serve(listener, async move {
            let _ = stopped.await;
        }));
        Ok(LocalCluster { coordinator, address, operator, workers, stop, server })
    }

    /// The coordinator: to create runs, serve its status page, read its
    /// admission counts and its store.
    pub fn coordinator(&self) -> &Arc<Coordinator> {
        &self.coordinator
    }

    /// `http://127.0.0.1:PORT`, where the coordinator serves gRPC.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// How a client reaches the coordinator as the operator (with no token
    /// when the cluster has none: a reader of public reads).
    pub fn operator(&self) -> ClientConfig {
        self.client(self.operator.as_ref())
    }

    /// The workers' credentials, in order.
    pub fn workers(&self) -> &[Credential] {
        &self.workers
    }

    fn client(&self, credential: Option<&Credential>) -> ClientConfig {
        ClientConfig {
            url: self.address.clone(),
            token: credential.map(|credential| credential.token.clone()),
            ..ClientConfig::default()
        }
    }

    /// Starts a real worker (`census_worker::run_worker`, one counting
    /// thread) for each worker credential, on run `run` only, with a
    /// `layers` census's files in `layers_dir`. They work until told to
    /// stop: a worker that ends before is an error ([`LocalWorkers::ended`]).
    pub fn start_workers(&self, run: RunId, layers_dir: Option<PathBuf>) -> LocalWorkers {
        let (stop, told) = watch::channel(Stop::No);
        let tasks = self
            .workers
            .iter()
            .enumerate()
            .map(|(i, credential)| {
                let config = WorkerConfig {
                    coordinator: self.client(Some(credential)),
                    worker_id: format!("{}-{i}", census_worker::default_worker_id()),
                    threads: 1,
                    batch: None,
                    exit_when_done: false,
                    run: Some(run),
                    max_jobs: None,
                    layers_dir: layers_dir.clone(),
                };
                tokio::spawn(census_worker::run_worker(config, told.clone()))
            })
            .collect();
        LocalWorkers { stop, tasks }
    }

    /// Stops serving, waits for the server to end, and closes the store
    /// (which folds SQLite's write-ahead log into the file, so that the
    /// file alone is the census).
    pub async fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.server.await;
        self.coordinator.store().close().await;
    }
}

/// The workers of a [`LocalCluster`], as tasks of this process.
pub struct LocalWorkers {
    stop: watch::Sender<Stop>,
    tasks: Vec<JoinHandle<Result<WorkerReport, WorkerError>>>,
}

/// Why a local worker ended before it was told to stop.
#[derive(Debug, thiserror::Error)]
pub enum WorkerEnded {
    #[error("a worker stopped")]
    Failed(#[source] WorkerError),
    #[error("a worker stopped before the run was finished")]
    Early,
    #[error("a worker task failed")]
    Panicked(#[source] JoinError),
}

impl LocalWorkers {
    /// A worker that has ended, if one has: local workers end early only
    /// on an error, and without them a run would wait forever.
    pub async fn ended(&mut self) -> Option<WorkerEnded> {
        let ended = self.tasks.iter().position(JoinHandle::is_finished)?;
        Some(match self.tasks.swap_remove(ended).await {
            Ok(Err(error)) => WorkerEnded::Failed(error),
            Ok(Ok(_)) => WorkerEnded::Early,
            Err(error) => WorkerEnded::Panicked(error),
        })
    }

    /// Tells every worker to stop `how` (drain: report what is counted;
    /// now: leases in hand expire) and waits until they have.
    pub async fn stop(self, how: Stop) {
        let _ = self.stop.send(how);
        for task in self.tasks {
            let _ = task.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use census_coordinator::{AuthConfig, CoordinatorConfig};
    use census_math::census::Census;
    use census_proto::v1::census_service_client::CensusServiceClient;
    use census_proto::v1::{GetProgressRequest, GetResultRequest, ListRunsRequest};
    use census_worker::Stop;

    use super::{Identities, LocalCluster};

    async fn store(dir: &tempfile::TempDir) -> std::sync::Arc<dyn census_store::JobStore> {
        let location = census_store::DatabaseLocation::Sqlite(dir.path().join("census.db"));
        census_store::open(&location, census_store::StoreConfig::default(), None).await.unwrap()
    }

    /// A local cluster's own workers count a run to its exact answer, over
    /// gRPC, each under its own identity.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn local_workers_count_a_run_to_its_exact_answer() {
        let dir = tempfile::tempdir().unwrap();
        let config = CoordinatorConfig { trust_local_workers: true, ..CoordinatorConfig::default() };
        let cluster = LocalCluster::start(store(&dir).await, config, Identities::named("test", 3)).await.unwrap();
        let names: Vec<&str> = cluster.workers().iter().map(|worker| worker.name.as_str()).collect();
        assert_eq!(names, ["test-worker-0", "test-worker-1", "test-worker-2"]);
        let census: Census = "synthetic jobs=300 salt=7".parse().unwrap();
        let run = cluster.coordinator().create_run(census, 1).await.unwrap();
        let mut workers = cluster.start_workers(run.run_id, None);
        let mut client = CensusServiceClient::new(census_proto::client::connect(&cluster.operator()).await.unwrap());
        loop {
            let progress = client.get_progress(GetProgressRequest { run_id: run.run_id }).await.unwrap().into_inner();
            if progress.r#final {
                break;
            }
            assert!(workers.ended().await.is_none(), "a worker ended early");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        workers.stop(Stop::Now).await;
        let result = client.get_result(GetResultRequest { run_id: run.run_id }).await.unwrap().into_inner();
        assert_eq!(result.answer, census_math::synthetic::expected_answer(300, 7).to_string());
        cluster.stop().await;
    }

    /// A cluster with no credentials serves public reads and nothing else.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_cluster_without_credentials_only_reads() {
        let dir = tempfile::tempdir().unwrap();
        let auth = AuthConfig { public_read: true, ..AuthConfig::default() };
        let config = CoordinatorConfig { auth, ..CoordinatorConfig::default() };
        let cluster = LocalCluster::start(store(&dir).await, config, Identities::none()).await.unwrap();
        assert!(cluster.workers().is_empty());
        assert_eq!(cluster.operator().token, None);
        let channel = census_proto::client::connect(&cluster.operator()).await.unwrap();
        let mut client = CensusServiceClient::new(channel);
        assert!(client.list_runs(ListRunsRequest {}).await.unwrap().into_inner().runs.is_empty());
        let created = client.create_run(census_proto::v1::CreateRunRequest::default()).await.unwrap_err();
        assert_eq!(created.code(), tonic::Code::Unauthenticated, "an operator's call without a token: {created}");
        cluster.stop().await;
    }
}
