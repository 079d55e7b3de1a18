//! Serving: the gRPC server (TLS, health, reflection, the two services),
//! the status page's HTTP server, and the background tasks that keep health
//! and the job gauges true. Tower layers and server options go here.

use std::sync::Arc;
use std::time::Duration;

use census_proto::v1::census_service_server::CensusServiceServer;
use census_proto::v1::worker_service_server::WorkerServiceServer;
use census_store::JobStore;
use tonic::transport::{Certificate, Identity, ServerTlsConfig};

use crate::admission::{self, Admitted, CallerKey};
use crate::auth::{self, Need};
use crate::{Api, Coordinator, status_page};

impl Coordinator {
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
        let conflicts = tokio::spawn(self.clone().decide_conflicts());
        // Both versions of reflection: grpcurl and current clients speak v1,
        // Python's grpcio-reflection and older GUI clients only v1alpha, and
        // a client refused one does not fall back to the other.
        let reflection = || {
            tonic_reflection::server::Builder::configure()
                .register_encoded_file_descriptor_set(census_proto::FILE_DESCRIPTOR_SET)
        };
        let reflection_v1 = reflection().build_v1()?;
        let reflection_v1alpha = reflection().build_v1alpha()?;
        let mut builder = tonic::transport::Server::builder();
        if let Some(tls) = &self.config.tls {
            let mut config = ServerTlsConfig::new().identity(Identity::from_pem(&tls.certificate_pem, &tls.key_pem));
            if let Some(ca) = &tls.client_ca_pem {
                config = config.client_ca_root(Certificate::from_pem(ca));
            }
            builder = builder.tls_config(config)?;
        }
        let coordinator = self.clone();
        let shutdown = async move {
            shutdown.await;
            // Requests waiting for recounts end now instead of holding the
            // graceful shutdown until the counts finish.
            coordinator.checking.stop();
        };
        let authorize = AuthorizeLayer(self.clone());
        let api = Api(self);
        let served = builder
            .max_concurrent_streams(STREAMS_A_CONNECTION)
            .layer(authorize)
            .add_service(health)
            .add_service(reflection_v1)
            .add_service(reflection_v1alpha)
            .add_service(WorkerServiceServer::new(api.clone()))
            .add_service(CensusServiceServer::new(api))
            // TCP_NODELAY: without it every small reply waits for the
            // peer's delayed ACK (40 ms a lease on Linux; BENCHMARKS.md).
            .serve_with_incoming_shutdown(
                tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true)),
                shutdown,
            )
            .await;
        watcher.abort();
        gauges.abort();
        conflicts.abort();
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
}

/// The most calls a connection may have open at once (hyper's own
/// default, which tonic replaces with none): each holds a task and its
/// headers until its credential is checked, so one connection cannot hold
/// more than this many.
const STREAMS_A_CONNECTION: u32 = 200;

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

/// Applies the authorization table ([`auth::POLICY`]) to every call, in
/// one place, before any handler runs: the caller it finds goes into the
/// request's extensions ([`crate::Api::caller`]). A worker's call is first
/// admitted or refused ([`crate::admission`]), and its slot goes into the
/// extensions too, so that a report can leave it while it is checked; a
/// read first waits for its turn at the store
/// ([`crate::CoordinatorConfig::concurrent_reads`]), so even the
/// credential checks of a flood of reads cannot take every connection.
#[derive(Clone)]
struct AuthorizeLayer(Arc<Coordinator>);

impl<S> tower::Layer<S> for AuthorizeLayer {
    type Service = Authorize<S>;
    fn layer(&self, inner: S) -> Authorize<S> {
        Authorize { inner, coordinator: self.0.clone() }
    }
}

#[derive(Clone)]
struct Authorize<S> {
    inner: S,
    coordinator: Arc<Coordinator>,
}

type BoxFuture<T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send>>;

impl<S, R> tower::Service<http::Request<tonic::body::Body>> for Authorize<S>
where
    S: tower::Service<http::Request<tonic::body::Body>, Response = http::Response<R>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    R: Default,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<Result<S::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
        // The clone that was made ready serves this call (tower's rule).
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let coordinator = self.coordinator.clone();
        Box::pin(async move {
            let need = match auth::need_of(request.uri().path()) {
                Ok(Some(need)) => need,
                Ok(None) => return inner.call(request).await,
                Err(refused) => return Ok(refused.into_http()),
            };
            let metadata = tonic::metadata::MetadataMap::from_headers(request.headers().clone());
            // A call that presents no credential, or a malformed one, is
            // refused on its headers: no slot, no store, no body.
            if let Err(refused) = auth::presented(&coordinator.config.auth, &metadata, need) {
                return Ok(refused.into_http());
            }
            // Admitted (or refused) before anything touches the store, the
            // credential's check included: a refusal costs no connection.
            // The caller is its credential as presented, unchecked: its
            // calls wait their turn behind each other, not before others'.
            let caller = CallerKey::of(request.headers().get(http::header::AUTHORIZATION).map(|v| v.as_bytes()));
            let kind = admission::Kind::of(request.uri().path(), need);
            let admitted = match kind {
                Some(kind) => match coordinator.admission.admit(kind, caller).await {
                    Ok(admitted) => admitted,
                    Err(refused) => return Ok(refused.into_http()),
                },
                None => Admitted::default(),
            };
            let turn = if need == Need::Read { Some(coordinator.read_turn().await) } else { None };
            let response =
                match auth::authorize(&coordinator.config.auth, coordinator.store.as_ref(), &metadata, need).await {
                    Ok(caller) => {
                        // The body only now, outside the slot (`admission`,
                        // "Headers first"): a made-up credential never made
                        // the coordinator read one, and a body that does
                        // not come holds no slot.
                        let request = match kind {
                            Some(kind) => read_body_outside(&coordinator, kind, &caller, &admitted, request).await,
                            None => Ok(request),
                        };
                        match request {
                            Ok(mut request) => {
                                request.extensions_mut().insert(caller);
                                request.extensions_mut().insert(admitted.clone());
                                inner.call(request).await
                            }
                            Err(refused) => Ok(refused.into_http()),
                        }
                    }
                    Err(refused) => Ok(refused.into_http()),
                };
            drop(turn);
            admitted.release();
            response
        })
    }
}

/// `request` of `caller` (a worker's call of `kind`, `admitted`) with its
/// whole body read, out of its slot and within its identity's bound
/// ([`admission::BODIES_AN_IDENTITY`]), then back in its slot.
async fn read_body_outside(
    coordinator: &Coordinator,
    kind: admission::Kind,
    caller: &auth::Caller,
    admitted: &Admitted,
    request: http::Request<tonic::body::Body>,
) -> Result<http::Request<tonic::body::Body>, tonic::Status> {
    let place = coordinator.admission.body_place(kind, &caller.name)?;
    let request = admitted.outside(with_body_read(request)).await;
    drop(place);
    request
}

/// The largest worker's request read: tonic's limit on a decoded message
/// (4 MiB, which the services keep) and its frame's 5-byte header. A
/// larger one would be refused by the service anyway.
const LARGEST_WORKER_REQUEST: usize = 4 * 1024 * 1024 + 5;

/// `request` with its whole body read into memory, at most
/// [`LARGEST_WORKER_REQUEST`] bytes: reading it releases its share of the
/// connection's flow-control window, so the other calls on the same
/// connection get their bodies. Worker calls are unary, one message a body.
async fn with_body_read(
    request: http::Request<tonic::body::Body>,
) -> Result<http::Request<tonic::body::Body>, tonic::Status> {
    use http_body_util::BodyExt;
    let (parts, body) = request.into_parts();
    let body = http_body_util::Limited::new(body, LARGEST_WORKER_REQUEST).collect().await.map_err(|error| {
        if error.is::<http_body_util::LengthLimitError>() {
            tonic::Status::out_of_range(format!("a worker's request is larger than {LARGEST_WORKER_REQUEST} bytes"))
        } else {
            tonic::Status::cancelled(format!("the request's body did not arrive: {error}"))
        }
    })?;
    Ok(http::Request::from_parts(parts, tonic::body::Body::new(http_body_util::Full::new(body.to_bytes()))))
}
