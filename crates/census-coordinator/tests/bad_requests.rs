//! Bad requests over gRPC get the status codes a client can act on.

use std::time::Duration;

use census_coordinator::Coordinator;
use census_math::{CounterKind, Stage};
use census_proto::v1::census_service_client::CensusServiceClient;
use census_proto::v1::worker_service_client::WorkerServiceClient;
use census_proto::v1::{CompleteJobRequest, CreateRunRequest, FailJobRequest, GetProgressRequest, JobResult, LeaseJobsRequest};
use census_store::StoreConfig;
use tonic::Code;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_the_right_status_codes() {
    let path = std::env::temp_dir().join(format!("census-bad-requests-{}.db", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let store = census_store::connect(path.to_str().unwrap(), StoreConfig::default()).await.unwrap();
    let coordinator = Coordinator::new(store, Duration::from_secs(30));
    coordinator.create_run(Stage::Russell, CounterKind::ColumnSets, 1).await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(coordinator.serve(listener, std::future::pending()));

    let mut workers = WorkerServiceClient::connect(url.clone()).await.unwrap();
    let mut census = CensusServiceClient::connect(url).await.unwrap();
    let job = workers
        .lease_jobs(LeaseJobsRequest { worker_id: "w".into(), max_jobs: 1, run_id: 0 })
        .await
        .unwrap()
        .into_inner()
        .jobs
        .remove(0);
    let result = |change: &dyn Fn(&mut JobResult)| {
        let mut result = JobResult {
            job_id: job.job_id,
            token: job.token.clone(),
            band: job.band.clone(),
            seed: job.seed,
            count: 1,
            elapsed_seconds: 0.001,
            counter_version: "column-sets/1".into(),
        };
        change(&mut result);
        CompleteJobRequest { worker_id: "w".into(), result: Some(result) }
    };
    let code = |outcome: Result<tonic::Response<_>, tonic::Status>| outcome.map(|_: tonic::Response<census_proto::v1::JobOutcome>| ()).unwrap_err();

    let stale = code(workers.complete_job(result(&|r| r.token = format!("{}x", r.token))).await);
    assert_eq!(stale.code(), Code::FailedPrecondition, "{stale:?}");
    let wrong_job = code(workers.complete_job(result(&|r| r.job_id = 999_999)).await);
    assert_eq!(wrong_job.code(), Code::NotFound, "{wrong_job:?}");
    let absurd = code(workers.complete_job(result(&|r| r.count = u64::MAX)).await);
    assert_eq!(absurd.code(), Code::InvalidArgument, "{absurd:?}");
    assert!(absurd.message().contains("impossible"), "{absurd:?}");
    let empty_band = code(workers.complete_job(result(&|r| r.band.clear())).await);
    assert_eq!(empty_band.code(), Code::InvalidArgument, "{empty_band:?}");
    let bad_band = code(workers.complete_job(result(&|r| r.band = "123456789123456789123456789".into())).await);
    assert_eq!(bad_band.code(), Code::InvalidArgument);
    assert!(bad_band.message().contains("block B1"), "{bad_band:?}");
    let mut missing = result(&|_| {});
    missing.result = None;
    assert_eq!(code(workers.complete_job(missing).await).code(), Code::InvalidArgument);
    let no_worker = workers.lease_jobs(LeaseJobsRequest { worker_id: String::new(), max_jobs: 1, run_id: 0 }).await.unwrap_err();
    assert_eq!(no_worker.code(), Code::InvalidArgument);
    let unknown_run = workers.lease_jobs(LeaseJobsRequest { worker_id: "w".into(), max_jobs: 1, run_id: 77 }).await.unwrap_err();
    assert_eq!(unknown_run.code(), Code::NotFound);
    let stale_fail = workers
        .fail_job(FailJobRequest { worker_id: "w".into(), job_id: job.job_id, token: "nope".into(), reason: "x".into() })
        .await
        .unwrap_err();
    assert_eq!(stale_fail.code(), Code::FailedPrecondition);
    let bad_stage = census.create_run(CreateRunRequest { stage: "45".into(), counter: String::new(), redundancy: 1 }).await.unwrap_err();
    assert_eq!(bad_stage.code(), Code::InvalidArgument);
    assert!(bad_stage.message().contains("44 (russell)"), "{bad_stage:?}");
    let bad_counter = census.create_run(CreateRunRequest { stage: "44".into(), counter: "fast".into(), redundancy: 1 }).await.unwrap_err();
    assert_eq!(bad_counter.code(), Code::InvalidArgument);
    assert_eq!(census.get_progress(GetProgressRequest { run_id: 77 }).await.unwrap_err().code(), Code::NotFound);

    // The right report still counts after all the refused ones.
    let counted = census_math::CounterKind::ColumnSets
        .build()
        .count(&job.band.parse().unwrap(), &census_math::SEEDS[job.seed as usize]);
    let ok = workers.complete_job(result(&|r| r.count = counted)).await.unwrap().into_inner();
    assert_eq!(ok.status, census_proto::v1::job_outcome::Status::Recorded as i32);
    let _ = std::fs::remove_file(&path);
}
