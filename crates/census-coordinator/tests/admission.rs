//! Admission over gRPC, with a store whose leases and heartbeats wait at a
//! gate until the test opens it: a coordinator at its limit of calls in
//! flight lets a short queue wait for slots (the store stuck, the queue's
//! bound is its length), refuses every call past it at
//! once with UNAVAILABLE and a retry hint, never lets more than the limit
//! reach the store, still answers reads and an operator, and every call it
//! admitted completes once the store answers. Counts only, no timing: a
//! call that queued instead of being refused would hang the test.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use census_coordinator::admission::BODIES_AN_IDENTITY;
use census_coordinator::auth::{generate_token, hash_token};
use census_coordinator::{AdmissionLimits, Coordinator, CoordinatorConfig};
use census_math::census::Census;
use census_proto::client::{AuthChannel, ClientConfig};
use census_proto::v1::census_service_client::CensusServiceClient;
use census_proto::v1::worker_service_client::WorkerServiceClient;
use census_proto::v1::*;
use census_store::{
    ClassTotal, CompleteOutcome, Completion, HeartbeatOutcome, JobId, JobStore, JobStream, Lease, LeaseCheck,
    QuarantineEntry, Role, RunId, RunSpec, RunSummary, RunTotal, StoreConfig, StoreError, TokenRecord,
};
use tonic::Code;

/// A detector of hangs only, never a measure of speed.
const HANG: Duration = Duration::from_secs(120);

/// A store whose `lease` and `heartbeat` wait until the gate is opened,
/// and whose `complete_many` waits at a gate of its own; everything else
/// goes straight to the store inside.
struct Gated {
    inner: Arc<dyn JobStore>,
    gate: tokio::sync::Semaphore,
    /// Calls that reached `lease` or `heartbeat`.
    entered: AtomicUsize,
    came: tokio::sync::Notify,
    reports: tokio::sync::Semaphore,
    /// Calls that reached `complete_many`.
    reported: tokio::sync::Notify,
    /// The results that reached `complete_many`.
    written: AtomicUsize,
    /// `check_leases` waits here (open unless asked).
    fences: tokio::sync::Semaphore,
    /// Calls that reached `check_leases`.
    fenced: tokio::sync::Notify,
}

impl Gated {
    /// A store at `inner` whose leases and heartbeats wait, and whose
    /// reports wait too when `reports_wait`.
    fn new(inner: Arc<dyn JobStore>, reports_wait: bool) -> Gated {
        Gated::waiting(inner, reports_wait, false)
    }

    /// [`Gated::new`], whose reports' lease checks wait too when `fences_wait`.
    fn waiting(inner: Arc<dyn JobStore>, reports_wait: bool, fences_wait: bool) -> Gated {
        let open = if reports_wait { 0 } else { tokio::sync::Semaphore::MAX_PERMITS / 2 };
        let fences = if fences_wait { 0 } else { tokio::sync::Semaphore::MAX_PERMITS / 2 };
        Gated {
            fences: tokio::sync::Semaphore::new(fences),
            fenced: tokio::sync::Notify::new(),
            inner,
            gate: tokio::sync::Semaphore::new(0),
            entered: AtomicUsize::new(0),
            came: tokio::sync::Notify::new(),
            reports: tokio::sync::Semaphore::new(open),
            reported: tokio::sync::Notify::new(),
            written: AtomicUsize::new(0),
        }
    }
}

impl Gated {
    async fn pass(&self) {
        self.entered.fetch_add(1, Ordering::SeqCst);
        self.came.notify_waiters();
        drop(self.gate.acquire().await.unwrap());
    }

    async fn wait_for_entered(&self, calls: usize) {
        tokio::time::timeout(HANG, async {
            loop {
                let came = self.came.notified();
                if self.entered.load(Ordering::SeqCst) >= calls {
                    return;
                }
                came.await;
            }
        })
        .await
        .unwrap_or_else(|_| panic!("{calls} calls never reached the store"));
    }

    fn open(&self) {
        self.gate.add_permits(tokio::sync::Semaphore::MAX_PERMITS / 2);
    }
}

#[tonic::async_trait]
impl JobStore for Gated {
    async fn create_run_streaming(&self, spec: &RunSpec, jobs: JobStream) -> Result<RunId, StoreError> {
        self.inner.create_run_streaming(spec, jobs).await
    }
    async fn censuses_of(&self, jobs: &[JobId]) -> Result<std::collections::HashMap<JobId, Census>, StoreError> {
        self.inner.censuses_of(jobs).await
    }
    async fn list_runs(&self) -> Result<Vec<RunSummary>, StoreError> {
        self.inner.list_runs().await
    }
    async fn run(&self, run: RunId) -> Result<RunSummary, StoreError> {
        self.inner.run(run).await
    }
    async fn lease(&self, run: Option<RunId>, worker: &str, max: u32, ttl: Duration) -> Result<Vec<Lease>, StoreError> {
        self.pass().await;
        self.inner.lease(run, worker, max, ttl).await
    }
    async fn has_work_for(&self, worker: &str, run: Option<RunId>) -> Result<bool, StoreError> {
        self.inner.has_work_for(worker, run).await
    }
    async fn heartbeat(&self, worker: &str, tokens: &[String], ttl: Duration) -> Result<HeartbeatOutcome, StoreError> {
        self.pass().await;
        self.inner.heartbeat(worker, tokens, ttl).await
    }
    async fn complete_many(
        &self,
        completions: &[Completion],
    ) -> Result<Vec<Result<CompleteOutcome, StoreError>>, StoreError> {
        self.reported.notify_one();
        self.written.fetch_add(completions.len(), Ordering::SeqCst);
        drop(self.reports.acquire().await.unwrap());
        self.inner.complete_many(completions).await
    }
    async fn check_leases(&self, completions: &[Completion]) -> Result<Vec<LeaseCheck>, StoreError> {
        self.fenced.notify_one();
        drop(self.fences.acquire().await.unwrap());
        self.inner.check_leases(completions).await
    }
    async fn recount(&self, job: JobId) -> Result<(), StoreError> {
        self.inner.recount(job).await
    }
    async fn conflicts_waiting(
        &self,
        wait: Duration,
        limit: u32,
    ) -> Result<Vec<census_store::ConflictWaiting>, StoreError> {
        self.inner.conflicts_waiting(wait, limit).await
    }
    async fn decide_conflict(&self, job: JobId, count: u128) -> Result<bool, StoreError> {
        self.inner.decide_conflict(job, count).await
    }
    async fn fail(&self, job: JobId, token: &str, worker: &str, reason: &str) -> Result<(), StoreError> {
        self.inner.fail(job, token, worker, reason).await
    }
    async fn requeue(&self, run: RunId, job: Option<JobId>) -> Result<u64, StoreError> {
        self.inner.requeue(run, job).await
    }
    async fn cancel_run(&self, run: RunId) -> Result<(), StoreError> {
        self.inner.cancel_run(run).await
    }
    async fn set_priority(&self, run: RunId, priority: i64) -> Result<(), StoreError> {
        self.inner.set_priority(run, priority).await
    }
    async fn progress(&self, run: RunId) -> Result<census_store::Progress, StoreError> {
        self.inner.progress(run).await
    }
    async fn total(&self, run: RunId) -> Result<RunTotal, StoreError> {
        self.inner.total(run).await
    }
    async fn class_totals_from(
        &self,
        run: RunId,
        first: u32,
        limit: Option<u32>,
    ) -> Result<Vec<ClassTotal>, StoreError> {
        self.inner.class_totals_from(run, first, limit).await
    }
    async fn accepted_counts(
        &self,
        run: RunId,
        stage: u32,
        after: JobId,
        limit: u32,
    ) -> Result<Vec<census_store::AcceptedCount>, StoreError> {
        self.inner.accepted_counts(run, stage, after, limit).await
    }
    fn take_finished_runs(&self) -> Vec<RunId> {
        self.inner.take_finished_runs()
    }
    async fn ping(&self) -> Result<(), StoreError> {
        self.inner.ping().await
    }
    async fn answer_version(&self, run: RunId) -> Result<Option<String>, StoreError> {
        self.inner.answer_version(run).await
    }
    async fn close(&self) {
        self.inner.close().await
    }
    async fn create_token(&self, name: &str, role: Role, hash: &str) -> Result<(), StoreError> {
        self.inner.create_token(name, role, hash).await
    }
    async fn import_token(&self, name: &str, role: Role, hash: &str) -> Result<(), StoreError> {
        self.inner.import_token(name, role, hash).await
    }
    async fn list_tokens(&self) -> Result<Vec<TokenRecord>, StoreError> {
        self.inner.list_tokens().await
    }
    async fn revoke_token(&self, name: &str) -> Result<bool, StoreError> {
        self.inner.revoke_token(name).await
    }
    async fn find_token(&self, hash: &str) -> Result<Option<TokenRecord>, StoreError> {
        self.inner.find_token(hash).await
    }
    async fn is_quarantined(&self, worker: &str) -> Result<bool, StoreError> {
        self.inner.is_quarantined(worker).await
    }
    async fn quarantined(&self) -> Result<Vec<QuarantineEntry>, StoreError> {
        self.inner.quarantined().await
    }
    async fn release_quarantine(&self, worker: &str) -> Result<bool, StoreError> {
        self.inner.release_quarantine(worker).await
    }
}

async fn sqlite_store() -> Arc<dyn JobStore> {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let dir = census_testpg::scratch_dir("census-admission");
    let path = dir.join(format!("store-{}.db", NEXT.fetch_add(1, Ordering::SeqCst)));
    let _ = std::fs::remove_file(&path);
    census_store::connect(path.to_str().unwrap(), StoreConfig::default()).await.unwrap()
}

/// A refusal of a busy coordinator: UNAVAILABLE with a retry hint.
fn assert_busy(refused: tonic::Status) {
    assert_eq!(refused.code(), Code::Unavailable, "{refused:?}");
    let hint = census_proto::retry::pushback(&refused).unwrap_or_else(|| panic!("no retry hint: {refused:?}"));
    assert!(hint > Duration::ZERO && hint <= census_proto::retry::LONGEST_PUSHBACK, "{hint:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_saturated_coordinator_refuses_with_a_hint_and_completes_what_it_admitted() {
    const CALLS: usize = 4;
    let inner = sqlite_store().await;
    let store = Arc::new(Gated::new(inner.clone(), false));
    const QUEUE: usize = 4 * CALLS;
    let admission = AdmissionLimits { calls: CALLS, waiting: QUEUE };
    let config = CoordinatorConfig { admission, ..CoordinatorConfig::default() };
    let coordinator = Coordinator::new(store.clone(), config);
    let run = coordinator.create_run("synthetic jobs=100 salt=7".parse().unwrap(), 1).await.unwrap().run_id;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(coordinator.clone().serve(listener, std::future::pending()));
    let token = |name: &'static str, role: Role| {
        let inner = inner.clone();
        async move {
            let token = generate_token();
            inner.create_token(name, role, &hash_token(&token)).await.unwrap();
            token
        }
    };
    let channel = |token: &str| -> AuthChannel {
        let config = ClientConfig { url: url.clone(), token: Some(token.to_string()), ..ClientConfig::default() };
        census_proto::client::connect_lazy(&config).unwrap()
    };
    let worker = WorkerServiceClient::new(channel(&token("w", Role::Worker).await));
    let lease = |mut client: WorkerServiceClient<AuthChannel>| async move {
        client.lease_jobs(LeaseJobsRequest { worker_id: String::new(), max_jobs: 2, run_id: run }).await
    };
    let heartbeat = |mut client: WorkerServiceClient<AuthChannel>| async move {
        client.heartbeat(HeartbeatRequest { worker_id: String::new(), tokens: vec!["no-such-lease".into()] }).await
    };

    // New leases take three of the four slots (a quarter stays for held leases).
    let new_leases = admission.new_leases();
    assert_eq!(new_leases, 3);
    let mut leasing: Vec<_> = (0..new_leases).map(|_| tokio::spawn(lease(worker.clone()))).collect();
    store.wait_for_entered(new_leases).await;
    // A heartbeat takes the slot kept for held leases.
    let mut beating = vec![tokio::spawn(heartbeat(worker.clone()))];
    store.wait_for_entered(CALLS).await;
    // Sixteen calls may wait for a slot (the store stuck, the calls' past
    // times say nothing: the bound is the count); then calls are refused at once.
    // The lease first, and only then the heartbeats: a new lease may wait
    // only while fewer than half the queue wait, so a lease that reached
    // the coordinator after the fifteen heartbeats would be refused.
    leasing.push(tokio::spawn(lease(worker.clone())));
    tokio::time::timeout(HANG, async {
        while coordinator.admission().waiting < 1 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the lease waits for a slot");
    beating.extend((1..QUEUE).map(|_| tokio::spawn(heartbeat(worker.clone()))));
    tokio::time::timeout(HANG, async {
        while coordinator.admission().waiting < QUEUE {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("sixteen calls wait for a slot");
    assert_busy(lease(worker.clone()).await.expect_err("past the queue, a lease is refused"));
    assert_busy(heartbeat(worker.clone()).await.expect_err("past the queue, a heartbeat is refused"));
    let mut reporter = worker.clone();
    let refused = reporter.complete_jobs(CompleteJobsRequest { worker_id: String::new(), results: Vec::new() }).await;
    assert_busy(refused.expect_err("a report is refused too"));

    // Reads and an operator are not bound by the workers' slots.
    let mut reader = CensusServiceClient::new(channel(&token("r", Role::Reader).await));
    let progress = reader.get_progress(GetProgressRequest { run_id: run }).await.unwrap().into_inner();
    assert_eq!(progress.jobs_total, 100);
    let mut operator = CensusServiceClient::new(channel(&token("o", Role::Operator).await));
    operator.set_run_priority(SetRunPriorityRequest { run_id: run, priority: 1 }).await.unwrap();

    assert_eq!(store.entered.load(Ordering::SeqCst), CALLS, "no more than the limit reached the store");
    let counts = coordinator.admission();
    assert_eq!((counts.admitted, counts.waiting), (CALLS as u64, QUEUE), "{counts:?}");
    assert_eq!((counts.refused_leases, counts.refused_held), (1, 2), "{counts:?}");
    assert_eq!(counts.most_in_flight, CALLS, "{counts:?}");

    // Every admitted call completes once the store answers.
    store.open();
    let mut leased = std::collections::HashSet::new();
    for call in leasing {
        let jobs =
            tokio::time::timeout(HANG, call).await.unwrap().unwrap().expect("an admitted lease").into_inner().jobs;
        assert_eq!(jobs.len(), 2);
        leased.extend(jobs.into_iter().map(|job| job.job_id));
    }
    assert_eq!(leased.len(), 2 * (new_leases + 1), "distinct jobs");
    for call in beating {
        let lost = tokio::time::timeout(HANG, call).await.unwrap().unwrap().expect("an admitted heartbeat");
        assert_eq!(lost.into_inner().cancel_tokens, vec!["no-such-lease".to_string()]);
    }
    assert_eq!(store.entered.load(Ordering::SeqCst), CALLS + QUEUE);
    // The slots are free again.
    assert_eq!(lease(worker.clone()).await.expect("a slot is free").into_inner().jobs.len(), 2);
    assert_eq!(coordinator.admission().most_in_flight, CALLS);
}

/// A report that reached the store is recorded even if its caller gives
/// up meanwhile (its deadline passes, or it goes away): the batch's
/// transaction runs to its end. A run's last report folds the whole run
/// in its transaction, which for a run of 10^7 jobs takes longer than a
/// worker's call may; cancelled with the call, it was rolled back and
/// tried again by every retry, and the run never finished.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_report_is_recorded_though_its_caller_gives_up() {
    report_and_give_up(GiveUp::WhileWritten).await;
}

/// Nor is a report lost, or its check wasted, when its caller gives up
/// before its leases were checked and its results counted again. At a
/// congested coordinator every report's caller did (its deadline passed
/// while the results of the reports before it were counted again), and
/// each retry began again at the back: runs of 10,000 simulated workers
/// stopped recording anything (BENCHMARKS.md, "A run that stops at 10,000
/// workers").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_report_is_recorded_though_its_caller_gives_up_before_it_is_checked() {
    report_and_give_up(GiveUp::WhileFenced).await;
}

/// Where in a report's path its caller goes away.
#[derive(Clone, Copy, PartialEq)]
enum GiveUp {
    /// While its leases are checked, before its results are counted again.
    WhileFenced,
    /// While the store writes it.
    WhileWritten,
}

async fn report_and_give_up(when: GiveUp) {
    let inner = sqlite_store().await;
    let store = Arc::new(Gated::waiting(inner.clone(), when == GiveUp::WhileWritten, when == GiveUp::WhileFenced));
    store.open();
    let coordinator = Coordinator::new(store.clone(), CoordinatorConfig::default());
    let run = coordinator.create_run("synthetic jobs=1 salt=5".parse().unwrap(), 1).await.unwrap().run_id;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(coordinator.clone().serve(listener, std::future::pending()));
    let token = generate_token();
    inner.create_token("w", Role::Worker, &hash_token(&token)).await.unwrap();
    let config = ClientConfig { url, token: Some(token), ..ClientConfig::default() };
    let mut worker = WorkerServiceClient::new(census_proto::client::connect_lazy(&config).unwrap());
    let mut leased = worker
        .lease_jobs(LeaseJobsRequest { worker_id: String::new(), max_jobs: 1, run_id: run })
        .await
        .unwrap()
        .into_inner();
    // An idle coordinator asks for the worker's own pace: batches of a second.
    assert_eq!(leased.batch_millis, 1000);
    let job = leased.jobs.remove(0);
    let census: Census = job.census.parse().unwrap();
    let result = JobResult {
        job_id: job.job_id,
        token: job.token.clone(),
        count: census.job_counter().count(&job.key).unwrap().to_string(),
        key: job.key.clone(),
        counter_version: census.counter_version(),
        ..JobResult::default()
    };
    let reached = match when {
        GiveUp::WhileFenced => store.fenced.notified(),
        GiveUp::WhileWritten => store.reported.notified(),
    };
    let call = tokio::spawn(async move {
        worker.complete_jobs(CompleteJobsRequest { worker_id: String::new(), results: vec![result] }).await
    });
    tokio::time::timeout(HANG, reached).await.expect("the report reaches the store");
    // The caller goes away while the store is at work.
    call.abort();
    assert!(call.await.unwrap_err().is_cancelled());
    match when {
        GiveUp::WhileFenced => store.fences.add_permits(1),
        GiveUp::WhileWritten => store.reports.add_permits(1),
    }
    tokio::time::timeout(HANG, async {
        while !inner.run(run).await.unwrap().is_final {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the report is recorded and the run finished");
    assert_eq!(inner.total(run).await.unwrap().answer, Some(census_math::synthetic::expected_answer(1, 5)));
}

/// The result a worker reports for `job`: its true count.
fn result_of(job: &Job) -> JobResult {
    let census: Census = job.census.parse().unwrap();
    JobResult {
        job_id: job.job_id,
        token: job.token.clone(),
        count: census.job_counter().count(&job.key).unwrap().to_string(),
        key: job.key.clone(),
        counter_version: census.counter_version(),
        ..JobResult::default()
    }
}

/// A report whose caller has given up is finished for the leases it held
/// only: its results of leases not held, which could only be refused or
/// found repeated, are dropped, not written (issue 44: a flood of stale
/// reports whose callers had given up kept the store busy for 18 s after
/// it ended, and the coordinator's memory with it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_report_whose_caller_gave_up_drops_its_results_of_leases_not_held() {
    let inner = sqlite_store().await;
    let store = Arc::new(Gated::waiting(inner.clone(), false, true));
    store.open();
    let coordinator = Coordinator::new(store.clone(), CoordinatorConfig::default());
    let run = coordinator.create_run("synthetic jobs=2 salt=5".parse().unwrap(), 1).await.unwrap().run_id;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(coordinator.clone().serve(listener, std::future::pending()));
    let token = generate_token();
    inner.create_token("w", Role::Worker, &hash_token(&token)).await.unwrap();
    let config = ClientConfig { url, token: Some(token), ..ClientConfig::default() };
    let mut worker = WorkerServiceClient::new(census_proto::client::connect_lazy(&config).unwrap());
    let leased = worker
        .lease_jobs(LeaseJobsRequest { worker_id: String::new(), max_jobs: 2, run_id: run })
        .await
        .unwrap()
        .into_inner();
    let results: Vec<JobResult> = leased.jobs.iter().map(result_of).collect();
    assert_eq!(results.len(), 2);
    // The first is recorded: reported again, it is a result of a lease not held.
    let first = &results[0];
    let recorded = Completion {
        job_id: first.job_id,
        token: first.token.clone(),
        worker: "w".into(),
        key: first.key.clone(),
        counter_version: first.counter_version.clone(),
        count: first.count.parse().unwrap(),
        elapsed: Duration::from_millis(1),
        checked_count: None,
    };
    assert_eq!(inner.complete(&recorded).await.unwrap(), CompleteOutcome::Recorded);

    // The report of both waits at its check until its caller's deadline
    // has passed (the coordinator answers once the call is dropped).
    let mut report = tonic::Request::new(CompleteJobsRequest { worker_id: String::new(), results });
    report.set_timeout(Duration::from_secs(2));
    let reached = store.fenced.notified();
    let call = tokio::spawn(async move { worker.complete_jobs(report).await });
    tokio::time::timeout(HANG, reached).await.expect("the report reaches its check");
    let gave_up = tokio::time::timeout(HANG, call).await.unwrap().unwrap().expect_err("the caller's deadline passed");
    assert!(matches!(gave_up.code(), Code::Cancelled | Code::DeadlineExceeded), "{gave_up:?}");
    store.fences.add_permits(1);
    tokio::time::timeout(HANG, async {
        while !inner.run(run).await.unwrap().is_final || coordinator.reports_in_progress().reports > 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the held lease's result is recorded and the report ends");
    assert_eq!(store.written.load(Ordering::SeqCst), 1, "the held lease's result only");
}

/// A slot is never held while a body is on its way: a caller that opens
/// more reports than there are slots on one connection and holds back
/// their bodies (or whose bodies, queued, fill the connection's
/// flow-control window, as a flood of 1 MB reports did) waits for them
/// outside the slots, and another worker's call is served meanwhile.
/// Admitted on their headers and held while their bodies came, the reports
/// held every slot until their caller gave up, and the other worker's
/// heartbeat waited behind them (issue 44).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_whose_body_has_not_come_holds_no_slot() {
    const CALLS: usize = 4;
    const FLOOD: usize = CALLS + 2;
    let (coordinator, address, inner) = serve_with_calls(CALLS).await;
    let flooder = worker_token(&inner, "flooder").await;
    let honest = worker_token(&inner, "honest").await;

    // The flooder's reports, on one connection: headers sent, bodies held back.
    let mut client = RawClient::connect(address).await;
    let mut reports = Vec::new();
    for _ in 0..FLOOD {
        reports.push(client.report(Some(&format!("Bearer {flooder}"))).await);
    }
    // Each is admitted on its headers, its credential checked, and waits
    // for its body outside the slots.
    wait_until(|| coordinator.admission().reading == FLOOD).await;

    // Another worker's heartbeat is served meanwhile.
    let mut worker = worker_client(address, honest);
    let beat = worker.heartbeat(HeartbeatRequest { worker_id: String::new(), tokens: vec!["no-such-lease".into()] });
    let lost = tokio::time::timeout(HANG, beat).await.expect("the heartbeat waited behind reports without bodies");
    assert_eq!(lost.unwrap().into_inner().cancel_tokens, vec!["no-such-lease".to_string()]);

    // The bodies come (an empty report, one gRPC frame), and every report is answered.
    for (_, send) in &mut reports {
        send.send_data(vec![0u8; 5].into(), true).unwrap();
    }
    for (response, _) in reports {
        let response = tokio::time::timeout(HANG, response).await.expect("a report is answered").unwrap();
        assert_eq!(grpc_status(response).await, "0", "an empty report is accepted");
    }
    let counts = coordinator.admission();
    assert_eq!((counts.admitted, counts.reading), (1 + FLOOD as u64, 0), "each call admitted once: {counts:?}");
}

/// A worker's call that presents no credential, a malformed one or a
/// made-up one is refused on its headers: the coordinator never reads its
/// body, so a flood of them with large bodies costs no memory. Before,
/// every worker call's body (up to 4 MiB) was read before its credential
/// was looked at: these calls, bodies held back, waited for them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_without_a_known_credential_is_refused_before_its_body_is_read() {
    const EACH: usize = 20;
    let (coordinator, address, _) = serve_with_calls(4).await;
    let made_up = generate_token();
    let credentials = [None, Some("Bearer census_not-a-token".to_string()), Some(format!("Bearer {made_up}"))];
    let mut client = RawClient::connect(address).await;
    let mut calls = Vec::new();
    for credential in &credentials {
        for _ in 0..EACH {
            calls.push(client.report(credential.as_deref()).await);
        }
    }
    for (response, _) in calls {
        let response = tokio::time::timeout(HANG, response).await.expect("refused without its body").unwrap();
        assert_eq!(grpc_status(response).await, "16", "UNAUTHENTICATED");
    }
    let counts = coordinator.admission();
    assert_eq!(counts.reading, 0, "{counts:?}");
    assert_eq!(counts.admitted, EACH as u64, "only the well-formed made-up token reached admission: {counts:?}");
}

/// An identity has at most [`BODIES_AN_IDENTITY`] bodies on their way at
/// once, however many calls it opens: past it they are refused unread,
/// with a retry hint, and another identity's calls are still read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_identity_has_a_bounded_number_of_bodies_on_their_way() {
    const PAST: usize = 3;
    let (coordinator, address, inner) = serve_with_calls(4).await;
    let flooder = worker_token(&inner, "flooder").await;
    let honest = worker_token(&inner, "honest").await;
    let mut client = RawClient::connect(address).await;
    let (statuses, mut answered) = tokio::sync::mpsc::unbounded_channel();
    let mut bodies = Vec::new();
    for _ in 0..BODIES_AN_IDENTITY + PAST {
        let (response, body) = client.report(Some(&format!("Bearer {flooder}"))).await;
        bodies.push(body);
        let statuses = statuses.clone();
        tokio::spawn(async move {
            let status = match response.await {
                Ok(response) => grpc_status(response).await,
                Err(error) => format!("{error}"),
            };
            let _ = statuses.send(status);
        });
    }
    for _ in 0..PAST {
        let status = tokio::time::timeout(HANG, answered.recv()).await.expect("refused unread").unwrap();
        assert_eq!(status, "14", "UNAVAILABLE, past the identity's bound");
    }
    wait_until(|| coordinator.admission().reading == BODIES_AN_IDENTITY).await;

    let mut worker = worker_client(address, honest);
    let beat = worker.heartbeat(HeartbeatRequest { worker_id: String::new(), tokens: vec!["no-such-lease".into()] });
    tokio::time::timeout(HANG, beat).await.expect("another identity is read").unwrap();

    // The bodies come; the streams already refused take none.
    for body in &mut bodies {
        let _ = body.send_data(vec![0u8; 5].into(), true);
    }
    for _ in 0..BODIES_AN_IDENTITY {
        let status = tokio::time::timeout(HANG, answered.recv()).await.expect("answered").unwrap();
        assert_eq!(status, "0", "an empty report is accepted");
    }
    assert_eq!(coordinator.admission().reading, 0);
}

/// A coordinator over SQLite with `calls` slots, serving on a port of its
/// own: it, its address, and its store (to make tokens in).
async fn serve_with_calls(calls: usize) -> (Arc<Coordinator>, std::net::SocketAddr, Arc<dyn JobStore>) {
    let inner = sqlite_store().await;
    let store = Arc::new(Gated::new(inner.clone(), false));
    store.open();
    let admission = AdmissionLimits { calls, waiting: 16 * calls };
    let coordinator = Coordinator::new(store, CoordinatorConfig { admission, ..CoordinatorConfig::default() });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(coordinator.clone().serve(listener, std::future::pending()));
    (coordinator, address, inner)
}

async fn worker_token(store: &Arc<dyn JobStore>, name: &str) -> String {
    let token = generate_token();
    store.create_token(name, Role::Worker, &hash_token(&token)).await.unwrap();
    token
}

fn worker_client(address: std::net::SocketAddr, token: String) -> WorkerServiceClient<AuthChannel> {
    let config = ClientConfig { url: format!("http://{address}"), token: Some(token), ..ClientConfig::default() };
    WorkerServiceClient::new(census_proto::client::connect_lazy(&config).unwrap())
}

/// Waits (up to [`HANG`]) until `done` holds.
async fn wait_until(done: impl Fn() -> bool) {
    tokio::time::timeout(HANG, async {
        while !done() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("waited for the coordinator");
}

/// An HTTP/2 client below gRPC, that can send a call's headers and hold
/// back its body.
struct RawClient {
    address: std::net::SocketAddr,
    client: h2::client::SendRequest<bytes::Bytes>,
}

impl RawClient {
    async fn connect(address: std::net::SocketAddr) -> RawClient {
        let (client, connection) =
            h2::client::handshake(tokio::net::TcpStream::connect(address).await.unwrap()).await.unwrap();
        tokio::spawn(connection);
        RawClient { address, client }
    }

    /// Opens a report presenting `authorization`, its body not sent.
    async fn report(
        &mut self,
        authorization: Option<&str>,
    ) -> (h2::client::ResponseFuture, h2::SendStream<bytes::Bytes>) {
        let mut request = http::Request::post(format!("http://{}/census.v1.WorkerService/CompleteJobs", self.address))
            .header("content-type", "application/grpc")
            .header("te", "trailers");
        if let Some(authorization) = authorization {
            request = request.header("authorization", authorization);
        }
        let mut client = self.client.clone().ready().await.unwrap();
        let sent = client.send_request(request.body(()).unwrap(), false).unwrap();
        self.client = client;
        sent
    }
}

/// The gRPC status of an answer: in its headers (an answer with no
/// message) or its trailers.
async fn grpc_status(response: http::Response<h2::RecvStream>) -> String {
    if let Some(status) = response.headers().get("grpc-status") {
        return status.to_str().unwrap().to_string();
    }
    let mut body = response.into_body();
    while let Some(data) = body.data().await {
        let data = data.unwrap();
        body.flow_control().release_capacity(data.len()).unwrap();
    }
    let trailers = body.trailers().await.unwrap().expect("trailers");
    trailers.get("grpc-status").expect("a status").to_str().unwrap().to_string()
}
