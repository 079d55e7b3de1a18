//! Talking to a coordinator as a user: the CensusService client and the
//! printing of results, shared by `run`, `submit`, `status` and `verify`.

use std::path::PathBuf;

use census_math::total::thousands;
use census_proto::client::{AuthChannel, ClientConfig};
use census_proto::v1::census_service_client::CensusServiceClient;
use census_proto::v1::{Progress, RunResult};

use super::UsageError;

pub type Client = CensusServiceClient<AuthChannel>;

/// How a command proves who it is to a coordinator.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct Credentials {
    /// The token to present (`census token create` makes one).
    #[arg(long, env = "CENSUS_TOKEN", hide_env_values = true, conflicts_with = "token_file")]
    pub token: Option<String>,
    /// A file holding the token (a mounted secret).
    #[arg(long, env = "CENSUS_TOKEN_FILE")]
    pub token_file: Option<PathBuf>,
    /// The CA certificate (PEM) that signed an https:// coordinator's certificate.
    #[arg(long, env = "CENSUS_TLS_CA")]
    pub tls_ca: Option<PathBuf>,
    /// This client's certificate (PEM), for a coordinator that requires one.
    #[arg(long, env = "CENSUS_TLS_CLIENT_CERT", requires = "tls_client_key")]
    pub tls_client_cert: Option<PathBuf>,
    /// This client's private key (PEM).
    #[arg(long, env = "CENSUS_TLS_CLIENT_KEY", requires = "tls_client_cert")]
    pub tls_client_key: Option<PathBuf>,
    /// Send the token over plain http:// to a host that is not this machine
    /// (a network you trust; otherwise use https://).
    #[arg(long, env = "CENSUS_ALLOW_PLAINTEXT_TOKEN")]
    pub allow_plaintext_token: bool,
}

/// Reads a file the user named, saying which one when it cannot be read.
pub fn read_named(flag: &str, path: &std::path::Path) -> anyhow::Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| UsageError(format!("{flag} {}: {e}", path.display())).into())
}

impl Credentials {
    /// The client settings for the coordinator at `address`.
    pub fn client_config(&self, address: &str) -> anyhow::Result<ClientConfig> {
        let token = match (&self.token, &self.token_file) {
            (Some(token), _) => Some(token.trim().to_string()),
            (None, Some(path)) => {
                let text = String::from_utf8(read_named("--token-file", path)?)
                    .map_err(|_| UsageError(format!("--token-file {}: not text", path.display())))?;
                Some(text.trim().to_string())
            }
            (None, None) => None,
        };
        let tls_ca_pem = self.tls_ca.as_deref().map(|p| read_named("--tls-ca", p)).transpose()?;
        let tls_identity_pem = match (&self.tls_client_cert, &self.tls_client_key) {
            (Some(cert), Some(key)) => {
                Some((read_named("--tls-client-cert", cert)?, read_named("--tls-client-key", key)?))
            }
            _ => None,
        };
        Ok(ClientConfig {
            url: coordinator_url(address),
            token,
            tls_ca_pem,
            tls_identity_pem,
            allow_plaintext_token: self.allow_plaintext_token,
        })
    }
}

/// Accepts `host:port` as well as `http://host:port`.
pub fn coordinator_url(address: &str) -> String {
    if address.contains("://") { address.to_string() } else { format!("http://{address}") }
}

pub async fn connect(address: &str, credentials: &Credentials) -> anyhow::Result<Client> {
    connect_with(&credentials.client_config(address)?).await
}

pub async fn connect_with(config: &ClientConfig) -> anyhow::Result<Client> {
    // The error stays typed: `exit_code_for` makes bad settings (a URL,
    // token or TLS option, an http:// URL of a TLS port) exit code 2.
    let channel = census_proto::client::connect(config).await?;
    Ok(CensusServiceClient::new(channel).max_decoding_message_size(64 << 20))
}

/// A gRPC status as an error with its message.
pub fn status_error(status: tonic::Status) -> anyhow::Error {
    if matches!(status.code(), tonic::Code::InvalidArgument | tonic::Code::NotFound) {
        return super::UsageError(status.message().to_string()).into();
    }
    // tonic's own failures of the connection (the coordinator died or went
    // away mid-call) come as UNKNOWN or UNAVAILABLE "transport error": say
    // what happened, not "error: error: transport error".
    let lost =
        status.message().starts_with("transport error") || status.message().starts_with("error trying to connect");
    if lost && matches!(status.code(), tonic::Code::Unknown | tonic::Code::Unavailable) {
        return anyhow::anyhow!("lost the connection to the coordinator ({}); is it running?", status.message());
    }
    anyhow::anyhow!("{}: {}", status_name(status.code()), status.message())
}

fn status_name(code: tonic::Code) -> &'static str {
    match code {
        tonic::Code::Unavailable => "unavailable",
        tonic::Code::FailedPrecondition => "failed precondition",
        tonic::Code::Unauthenticated => "not authenticated",
        tonic::Code::PermissionDenied => "permission denied",
        tonic::Code::ResourceExhausted => "busy",
        tonic::Code::DeadlineExceeded => "timed out",
        tonic::Code::Cancelled => "cancelled",
        tonic::Code::Internal => "the coordinator failed",
        _ => "the call failed",
    }
}

/// The closing lines of a finished (or provisional) census: for the 9x9
/// count S, N0 and Kilfoil's estimate, for another census its terms and
/// answer.
pub fn print_result(result: &RunResult) {
    print!("{}", result_lines(result));
}

/// [`print_result`]'s lines, each ending in a newline.
pub fn result_lines(result: &RunResult) -> String {
    let number = |text: &str| thousands(&text.parse::<num_bigint::BigUint>().unwrap_or_default());
    if !result.r#final {
        // A partial sum is neither S nor an answer: no N0, no factorization
        // and no terms of it are shown, for any census.
        let sum = if result.weighted_sum.is_empty() { "0" } else { result.weighted_sum.as_str() };
        return format!(
            "(provisional: the run is not finished)\n{}: weighted sum so far = {} (a partial sum, not the answer)\n",
            result.census,
            number(sum)
        );
    }
    // The census is parsed here, at the edge; one this client does not know
    // (a newer coordinator's) is shown by its terms, which every kind has.
    let nine_by_nine = result.census.parse::<census_math::census::Census>().is_ok_and(|c| c.is_nine_by_nine());
    if !nine_by_nine {
        let terms: String = result.terms.iter().map(|term| format!("{} = {}\n", term.name, term.value)).collect();
        return format!("{terms}{}: {}\n", result.census, number(&result.answer));
    }
    let s: num_bigint::BigUint = result.s.parse().unwrap_or_default();
    let n0: num_bigint::BigUint = result.n0.parse().unwrap_or_default();
    format!(
        "S  = {} = {}\nN0 = 9! x 72^2 x S = {}\nKilfoil's estimate: {:.4e} ({:+.3}% from N0)\n",
        thousands(&s),
        result.factorization,
        thousands(&n0),
        result.kilfoil_estimate,
        result.kilfoil_relative_error * 100.0
    )
}

pub fn progress_line(progress: &Progress) -> String {
    if progress.r#final {
        return format!(
            "run {}: finished, {}/{} jobs done, {} failed, {} conflicts, {} rejected",
            progress.run_id,
            thousands(&progress.done),
            thousands(&progress.jobs_total),
            progress.failed,
            progress.conflicts,
            progress.rejected
        );
    }
    let eta = if progress.eta_seconds > 0.0 {
        format!(", ETA {:.0} s", progress.eta_seconds)
    } else if progress.conflicts > 0 && progress.leased == 0 && progress.pending <= progress.conflicts {
        // No rate ends them: say what does (issue 44: "ETA 0 s" while a
        // disagreement waited for a third identity for ever).
        format!(
            "; waiting on {} conflicts, each decided by another identity's vote or the coordinator's own count",
            progress.conflicts
        )
    } else {
        String::new()
    };
    // Where jobs differ in cost (a layers census), the share of the work
    // done is not the share of the jobs: both are said.
    let cost = if progress.cost_total > 0 && progress.cost_total != progress.jobs_total {
        format!(" ({:.1}% of the expected cost)", 100.0 * progress.fraction_done())
    } else {
        String::new()
    };
    format!(
        "run {}: {}/{} jobs done{cost}, {} leased, {} pending, {} failed, {} conflicts, {} rejected; {:.2} jobs/s{eta}",
        progress.run_id,
        thousands(&progress.done),
        thousands(&progress.jobs_total),
        thousands(&progress.leased),
        thousands(&progress.pending),
        progress.failed,
        progress.conflicts,
        progress.rejected,
        progress.jobs_per_second
    )
}

/// The command that resumes a cancelled run: the same census (its whole
/// text, counter included, for every kind) and redundancy.
pub fn resume_hint(run: &census_proto::v1::Run) -> String {
    let redundancy = if run.redundancy > 1 { format!(" --redundancy {}", run.redundancy) } else { String::new() };
    format!("census submit --census {:?}{redundancy}", run.census)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 44: two identities that disagree on both jobs of a run, both
    /// told nothing is left, showed "0/2 jobs done, ... 0 conflicts, ...
    /// 4.00 jobs/s, ETA 0 s". The line says the conflicts and what ends
    /// them, and no ETA; while jobs are still counted, the ETA stays.
    #[test]
    fn a_run_waiting_on_conflicts_says_so_instead_of_an_eta() {
        let waiting =
            Progress { run_id: 1, jobs_total: 2, pending: 2, conflicts: 2, jobs_per_second: 4.0, ..Default::default() };
        let line = progress_line(&waiting);
        assert!(line.contains("2 conflicts"), "{line}");
        assert!(line.contains("waiting on 2 conflicts, each decided by another identity's vote"), "{line}");
        assert!(!line.contains("ETA"), "{line}");
        let counting = Progress { pending: 10, jobs_total: 10, eta_seconds: 30.0, ..waiting };
        let line = progress_line(&counting);
        assert!(line.ends_with("ETA 30 s") && !line.contains("waiting"), "{line}");
    }

    /// Issue 44: a coordinator that died under `census submit` gave
    /// `error: error: transport error`.
    #[test]
    fn a_lost_connection_says_so_once() {
        for status in [tonic::Status::unknown("transport error"), tonic::Status::unavailable("transport error")] {
            let said = status_error(status).to_string();
            assert_eq!(said, "lost the connection to the coordinator (transport error); is it running?");
        }
        let said = status_error(tonic::Status::unknown("something else")).to_string();
        assert_eq!(said, "the call failed: something else");
        assert!(!said.contains("error: error"));
        let said = status_error(tonic::Status::permission_denied("quarantined")).to_string();
        assert_eq!(said, "permission denied: quarantined");
    }
}
