//! The worker against a coordinator of the test's own (a mock of
//! `census.v1.WorkerService`): it renews every lease it holds in one
//! heartbeat call, not one a batch, and a busy coordinator's refusal with
//! a retry hint is waited out, not taken as the end.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use census_proto::client::ClientConfig;
use census_proto::v1::job_outcome::Status as Outcome;
use census_proto::v1::worker_service_server::{WorkerService, WorkerServiceServer};
use census_proto::v1::*;
use census_worker::{Stop, WorkerConfig, run_worker};
use tonic::{Request, Response, Status};

/// How long the test waits for what must happen before it calls it a
/// hang: a detector of hangs only, never a measure of speed.
const HANG: Duration = Duration::from_secs(120);

const CENSUS: &str = "synthetic jobs=10 salt=1";

/// Hands out two batches of two jobs (after refusing the first lease as
/// busy), then says no work is left. The first batch's report is answered
/// only once one heartbeat has renewed all four leases: the worker holds
/// them all then (it counts the second batch while the first is reported).
#[derive(Default)]
struct Coordinator {
    leases: AtomicU32,
    heartbeats: Mutex<Vec<Vec<String>>>,
    all_renewed: tokio::sync::Notify,
}

fn batch(name: &str, first: u64) -> Vec<Job> {
    (first..first + 2)
        .map(|index| Job {
            job_id: index as i64 + 1,
            run_id: 1,
            census: CENSUS.into(),
            key: format!("synthetic:{index}"),
            token: format!("{name}{index}"),
            attempt: 1,
        })
        .collect()
}

/// The mock as served (tonic serves a type of this crate).
struct Served(Arc<Coordinator>);

const ALL: [&str; 4] = ["a0", "a1", "b2", "b3"];

#[tonic::async_trait]
impl WorkerService for Served {
    async fn lease_jobs(&self, _: Request<LeaseJobsRequest>) -> Result<Response<LeaseJobsResponse>, Status> {
        let jobs = match self.0.leases.fetch_add(1, Ordering::SeqCst) {
            0 => return Err(census_proto::retry::refused("busy", Duration::from_millis(20))),
            1 => batch("a", 0),
            2 => batch("b", 2),
            _ => Vec::new(),
        };
        let idle = jobs.is_empty();
        // A short TTL, so that a heartbeat is due soon (a third of it).
        Ok(Response::new(LeaseJobsResponse { jobs, lease_ttl_seconds: 1, idle, batch_millis: 0 }))
    }

    async fn heartbeat(&self, request: Request<HeartbeatRequest>) -> Result<Response<HeartbeatResponse>, Status> {
        let mut tokens = request.into_inner().tokens;
        tokens.sort();
        if tokens == ALL {
            self.0.all_renewed.notify_one();
        }
        self.0.heartbeats.lock().unwrap().push(tokens);
        Ok(Response::new(HeartbeatResponse { cancel_tokens: Vec::new() }))
    }

    async fn complete_jobs(
        &self,
        request: Request<CompleteJobsRequest>,
    ) -> Result<Response<CompleteJobsResponse>, Status> {
        let results = request.into_inner().results;
        if results.iter().any(|result| result.token.starts_with('a')) {
            self.0.all_renewed.notified().await;
        }
        let outcomes = results
            .iter()
            .map(|result| JobOutcome {
                job_id: result.job_id,
                status: Outcome::Recorded as i32,
                message: String::new(),
            })
            .collect();
        Ok(Response::new(CompleteJobsResponse { outcomes }))
    }

    async fn complete_job(&self, _: Request<CompleteJobRequest>) -> Result<Response<JobOutcome>, Status> {
        Err(Status::unimplemented("reports come in batches"))
    }

    async fn fail_job(&self, _: Request<FailJobRequest>) -> Result<Response<FailJobResponse>, Status> {
        Err(Status::internal("no job here fails"))
    }

    async fn accepted_counts(
        &self,
        _: Request<AcceptedCountsRequest>,
    ) -> Result<Response<AcceptedCountsResponse>, Status> {
        Err(Status::unimplemented("no job here reads a stage before it"))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_heartbeat_renews_every_lease_the_worker_holds() {
    let coordinator = Arc::new(Coordinator::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(WorkerServiceServer::new(Served(coordinator.clone())))
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
    );
    let config = WorkerConfig {
        coordinator: ClientConfig { url, ..ClientConfig::default() },
        worker_id: "test".into(),
        threads: 1,
        batch: Some(2),
        exit_when_done: true,
        run: None,
        max_jobs: None,
        layers_dir: None,
    };
    let (_stop, stop) = tokio::sync::watch::channel(Stop::No);
    let report = tokio::time::timeout(HANG, run_worker(config, stop))
        .await
        .expect("the first batch's report is answered only after one heartbeat renewed all four leases")
        .unwrap();
    assert_eq!(report.jobs_recorded, 4, "{report:?}");
    assert_eq!(coordinator.leases.load(Ordering::SeqCst), 4, "the busy refusal, two batches, then none left");
    let heartbeats = coordinator.heartbeats.lock().unwrap();
    assert!(heartbeats.iter().any(|tokens| tokens == &ALL), "{heartbeats:?}");
    // While both batches were held, no call renewed one of them alone.
    let both_held = heartbeats.iter().position(|tokens| tokens == &ALL).unwrap();
    assert!(heartbeats[..both_held].iter().all(|tokens| tokens.iter().all(|t| t.starts_with('a'))), "{heartbeats:?}");
}
