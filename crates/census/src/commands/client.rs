//! Talking to a coordinator as a user: the CensusService client and the
//! printing of results, shared by `run`, `submit`, `status` and `verify`.

use std::time::Duration;

use census_math::total::thousands;
use census_proto::v1::census_service_client::CensusServiceClient;
use census_proto::v1::{Progress, RunResult};
use tonic::transport::{Channel, Endpoint};

pub type Client = CensusServiceClient<Channel>;

/// Accepts `host:port` as well as `http://host:port`.
pub fn coordinator_url(address: &str) -> String {
    if address.contains("://") { address.to_string() } else { format!("http://{address}") }
}

pub async fn connect(address: &str) -> anyhow::Result<Client> {
    let url = coordinator_url(address);
    let endpoint = Endpoint::from_shared(url.clone())
        .map_err(|e| super::UsageError(format!("{address:?} is not a coordinator address: {e}")))?
        .connect_timeout(Duration::from_secs(5));
    let channel = endpoint
        .connect()
        .await
        .map_err(|e| anyhow::anyhow!("cannot reach the coordinator at {url}: {e}"))?;
    Ok(CensusServiceClient::new(channel))
}

/// A gRPC status as an error with its message.
pub fn status_error(status: tonic::Status) -> anyhow::Error {
    if status.code() == tonic::Code::InvalidArgument {
        super::UsageError(status.message().to_string()).into()
    } else {
        anyhow::anyhow!("{}: {}", status_name(status.code()), status.message())
    }
}

fn status_name(code: tonic::Code) -> &'static str {
    match code {
        tonic::Code::NotFound => "not found",
        tonic::Code::Unavailable => "unavailable",
        tonic::Code::FailedPrecondition => "failed precondition",
        _ => "error",
    }
}

/// The closing lines of a finished (or provisional) census.
pub fn print_result(result: &RunResult) {
    let s: num_bigint::BigUint = result.s.parse().unwrap_or_default();
    let n0: num_bigint::BigUint = result.n0.parse().unwrap_or_default();
    if !result.r#final {
        println!("(provisional: the run is not finished)");
    }
    println!("S  = {} = {}", thousands(&s), result.factorization);
    println!("N0 = 9! x 72^2 x S = {}", thousands(&n0));
    println!(
        "Kilfoil's estimate: {:.4e} ({:+.3}% from N0)",
        result.kilfoil_estimate,
        result.kilfoil_relative_error * 100.0
    );
}

pub fn progress_line(progress: &Progress) -> String {
    let eta = if progress.eta_seconds > 0.0 { format!(", ETA {:.0} s", progress.eta_seconds) } else { String::new() };
    format!(
        "run {}: {}/{} jobs done, {} leased, {} pending, {} failed, {} conflicts; {:.0} jobs/s{eta}",
        progress.run_id,
        progress.done,
        progress.jobs_total,
        progress.leased,
        progress.pending,
        progress.failed,
        progress.conflicts,
        progress.jobs_per_second
    )
}
