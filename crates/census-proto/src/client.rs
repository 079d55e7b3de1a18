//! How a client reaches a coordinator: the channel (plain or TLS) and the
//! bearer credential sent with every call. Shared by the worker and the CLI
//! so that both present credentials the same way.

use std::time::Duration;

use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::Interceptor;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

/// Where a coordinator is and how to prove who we are.
#[derive(Debug, Clone, Default)]
pub struct ClientConfig {
    /// `http://host:port`, or `https://host:port` with TLS.
    pub url: String,
    /// The bearer token (`census_...`), if any.
    pub token: Option<String>,
    /// The CA that signed the coordinator's certificate (PEM); needed for `https://`.
    pub tls_ca_pem: Option<Vec<u8>>,
    /// Our client certificate and key (PEM), for a coordinator that requires one.
    pub tls_identity_pem: Option<(Vec<u8>, Vec<u8>)>,
    /// Send the token over plain `http://` to a host that is not loopback
    /// (anyone on the path can read it then): only when the user says so.
    pub allow_plaintext_token: bool,
}

/// Whether `host` (as a URI shows it) is this machine: a token sent there
/// in cleartext never crosses a network.
fn is_loopback(host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host.parse::<std::net::IpAddr>().is_ok_and(|address| address.is_loopback())
}

/// Adds `authorization: Bearer <token>` to every request.
#[derive(Debug, Clone)]
pub struct Bearer(Option<MetadataValue<Ascii>>);

impl Interceptor for Bearer {
    fn call(&mut self, mut request: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(value) = &self.0 {
            request.metadata_mut().insert("authorization", value.clone());
        }
        Ok(request)
    }
}

/// A channel that carries the credential.
pub type AuthChannel = InterceptedService<Channel, Bearer>;

/// Why a client cannot reach a coordinator: what the user must change
/// (the first two), or what may pass by itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConnectError {
    /// The settings are wrong: the URL, the token, the TLS options.
    Settings(String),
    /// An `http://` URL, and the server there answered with TLS: the URL
    /// should be `https://` (`address` is its `host:port`).
    AnsweredWithTls { address: String },
    /// The coordinator did not answer (down, refused, timed out).
    Unreachable(String),
}

impl ConnectError {
    /// Whether the user's settings are at fault (retrying cannot help).
    pub fn is_bad_settings(&self) -> bool {
        !matches!(self, ConnectError::Unreachable(_))
    }
}

impl std::fmt::Display for ConnectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConnectError::Settings(message) | ConnectError::Unreachable(message) => f.write_str(message),
            ConnectError::AnsweredWithTls { address } => write!(
                f,
                "the coordinator at {address} answered with TLS: use https://{address} (and --tls-ca with the CA \
                 that signed its certificate)"
            ),
        }
    }
}

impl std::error::Error for ConnectError {}

/// The first bytes a plaintext HTTP/2 client sends (RFC 9113, 3.4).
const HTTP2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Whether the server at `uri` (an `http://` URL) speaks TLS: it answers
/// the HTTP/2 preface with a TLS record (an alert, 0x15, or a handshake,
/// 0x16, of version 3.x), where a plaintext gRPC server answers with its
/// SETTINGS frame. Without this, the first call fails with a broken pipe
/// or an h2 protocol error, which names no cause, and a client retries it.
/// Anything else (no answer, refused, closed) is not TLS: the connection
/// itself then says what is wrong.
async fn answers_with_tls(uri: &tonic::codegen::http::Uri) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Some(host) = uri.host() else { return false };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let port = uri.port_u16().unwrap_or(80);
    let probe = async {
        let mut stream = tokio::net::TcpStream::connect((host, port)).await.ok()?;
        stream.write_all(HTTP2_PREFACE).await.ok()?;
        let mut head = [0u8; 2];
        stream.read_exact(&mut head).await.ok()?;
        Some(head)
    };
    matches!(tokio::time::timeout(Duration::from_secs(5), probe).await, Ok(Some([0x15 | 0x16, 0x03])))
}

fn endpoint(config: &ClientConfig) -> Result<(Endpoint, Bearer), ConnectError> {
    endpoint_of(config).map_err(ConnectError::Settings)
}

fn endpoint_of(config: &ClientConfig) -> Result<(Endpoint, Bearer), String> {
    let bearer = match &config.token {
        Some(token) => {
            let value = format!("Bearer {}", token.trim())
                .parse::<MetadataValue<Ascii>>()
                .map_err(|_| "the token holds characters that cannot be sent in a header".to_string())?;
            Bearer(Some(value))
        }
        None => Bearer(None),
    };
    let mut endpoint = Endpoint::from_shared(config.url.clone())
        .map_err(|e| format!("{:?} is not a coordinator URL: {e}", config.url))?
        .connect_timeout(Duration::from_secs(5))
        .tcp_nodelay(true);
    let https = config.url.starts_with("https://");
    let host = endpoint.uri().host().unwrap_or_default();
    if config.token.is_some() && !https && !config.allow_plaintext_token && !is_loopback(host) {
        return Err(format!(
            "refusing to send the token in cleartext to {:?}: use https:// (with --tls-ca), or allow it on a network \
             you trust with --allow-plaintext-token (CENSUS_ALLOW_PLAINTEXT_TOKEN=true)",
            config.url
        ));
    }
    if (config.tls_ca_pem.is_some() || config.tls_identity_pem.is_some()) && !https {
        return Err(format!("TLS options were given but {:?} is not an https:// URL", config.url));
    }
    if https {
        let Some(ca) = &config.tls_ca_pem else {
            return Err(format!(
                "{:?} is https://: give the CA that signed its certificate (--tls-ca FILE)",
                config.url
            ));
        };
        let mut tls = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(ca));
        if let Some((certificate, key)) = &config.tls_identity_pem {
            tls = tls.identity(Identity::from_pem(certificate, key));
        }
        endpoint = endpoint.tls_config(tls).map_err(|e| format!("the TLS settings do not work: {e}"))?;
    }
    Ok((endpoint, bearer))
}

/// A channel that connects on first use (a worker keeps retrying it).
pub fn connect_lazy(config: &ClientConfig) -> Result<AuthChannel, ConnectError> {
    let (endpoint, bearer) = endpoint(config)?;
    Ok(InterceptedService::new(endpoint.connect_lazy(), bearer))
}

/// Refuses an `http://` URL whose server answers with TLS
/// ([`ConnectError::AnsweredWithTls`]); any other URL, or a server that
/// does not answer, passes (the calls then say what is wrong).
pub async fn check_scheme(config: &ClientConfig) -> Result<(), ConnectError> {
    let (endpoint, _) = endpoint(config)?;
    let uri = endpoint.uri();
    if uri.scheme_str() == Some("http") && answers_with_tls(uri).await {
        let address = uri.authority().map(|a| a.to_string()).unwrap_or_default();
        return Err(ConnectError::AnsweredWithTls { address });
    }
    Ok(())
}

/// A channel connected now, or an error saying why not.
pub async fn connect(config: &ClientConfig) -> Result<AuthChannel, ConnectError> {
    check_scheme(config).await?;
    let (endpoint, bearer) = endpoint(config)?;
    let channel = endpoint.connect().await.map_err(|e| {
        let mut message = format!("cannot reach the coordinator at {}: {e}", config.url);
        let mut source = std::error::Error::source(&e);
        while let Some(cause) = source {
            message.push_str(&format!(": {cause}"));
            source = cause.source();
        }
        ConnectError::Unreachable(message)
    })?;
    Ok(InterceptedService::new(channel, bearer))
}

#[cfg(test)]
mod tests {
    use super::{ClientConfig, endpoint_of as endpoint};
    use proptest::prelude::*;

    #[test]
    fn bad_settings_are_named() {
        let config = |url: &str, token: &str| ClientConfig {
            url: url.into(),
            token: Some(token.into()),
            ..ClientConfig::default()
        };
        assert!(endpoint(&config("http://127.0.0.1:50051", "census_abc")).is_ok());
        assert!(endpoint(&config("not a url", "t")).unwrap_err().contains("is not a coordinator URL"));
        assert!(endpoint(&config("http://h:1", "line\nbreak")).unwrap_err().contains("cannot be sent in a header"));
        assert!(endpoint(&config("https://h:1", "t")).unwrap_err().contains("--tls-ca"));
        // A token goes in cleartext only to this machine, unless allowed.
        for url in ["http://localhost:1", "http://127.0.0.2:1", "http://[::1]:1"] {
            assert!(endpoint(&config(url, "t")).is_ok(), "{url}");
        }
        let remote = config("http://coordinator:50051", "t");
        assert!(endpoint(&remote).unwrap_err().contains("--allow-plaintext-token"));
        assert!(endpoint(&ClientConfig { allow_plaintext_token: true, ..remote.clone() }).is_ok());
        assert!(endpoint(&ClientConfig { token: None, ..remote }).is_ok(), "no token, nothing to leak");
    }

    proptest! {
        /// Whatever is typed as a coordinator URL, a token or a PEM file, the
        /// client refuses it with a message or builds an endpoint: no panic.
        #[test]
        fn any_client_settings_are_accepted_or_refused(
            scheme in prop::sample::select(vec!["", "http://", "https://"]),
            url in ".{0,60}",
            token in proptest::option::of(".{0,80}"),
            ca in proptest::option::of(proptest::collection::vec(any::<u8>(), 0..200)),
        ) {
            let config = ClientConfig { url: format!("{scheme}{url}"), token, tls_ca_pem: ca, ..ClientConfig::default() };
            let _ = endpoint(&config);
        }
    }
}
