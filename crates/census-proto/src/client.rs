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

fn endpoint(config: &ClientConfig) -> Result<(Endpoint, Bearer), String> {
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
pub fn connect_lazy(config: &ClientConfig) -> Result<AuthChannel, String> {
    let (endpoint, bearer) = endpoint(config)?;
    Ok(InterceptedService::new(endpoint.connect_lazy(), bearer))
}

/// A channel connected now, or an error saying why not.
pub async fn connect(config: &ClientConfig) -> Result<AuthChannel, String> {
    let (endpoint, bearer) = endpoint(config)?;
    let channel = endpoint.connect().await.map_err(|e| {
        let mut message = format!("cannot reach the coordinator at {}: {e}", config.url);
        let mut source = std::error::Error::source(&e);
        while let Some(cause) = source {
            message.push_str(&format!(": {cause}"));
            source = cause.source();
        }
        message
    })?;
    Ok(InterceptedService::new(channel, bearer))
}

#[cfg(test)]
mod tests {
    use super::{ClientConfig, endpoint};
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
            let config = ClientConfig { url: format!("{scheme}{url}"), token, tls_ca_pem: ca, tls_identity_pem: None };
            let _ = endpoint(&config);
        }
    }
}
