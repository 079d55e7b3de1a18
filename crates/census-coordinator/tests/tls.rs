//! TLS through tonic and rustls: a coordinator with a certificate, and one
//! that also requires client certificates. The certificates are made here
//! with rcgen, for this test only.

use std::sync::Arc;

use census_coordinator::auth::{generate_token, hash_token};
use census_coordinator::{Coordinator, CoordinatorConfig, TlsFiles};
use census_proto::client::ClientConfig;
use census_proto::v1::ListRunsRequest;
use census_proto::v1::census_service_client::CensusServiceClient;
use census_store::{JobStore, Role, StoreConfig};
use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};

struct Pki {
    ca_pem: String,
    server: (String, String),
    client: (String, String),
}

fn pki() -> Pki {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let issue = |names: Vec<String>| {
        let key = KeyPair::generate().unwrap();
        let cert = CertificateParams::new(names).unwrap().signed_by(&key, &ca, &ca_key).unwrap();
        (cert.pem(), key.serialize_pem())
    };
    Pki { ca_pem: ca.pem(), server: issue(vec!["localhost".into()]), client: issue(vec!["node-7".into()]) }
}

async fn serve(require_client_certificates: bool, pki: &Pki) -> (String, String) {
    let tls = TlsFiles {
        certificate_pem: pki.server.0.clone().into_bytes(),
        key_pem: pki.server.1.clone().into_bytes(),
        client_ca_pem: require_client_certificates.then(|| pki.ca_pem.clone().into_bytes()),
    };
    serve_with(Some(tls), &format!("{require_client_certificates}")).await
}

/// A coordinator with `tls` (or plaintext): its URL and an operator token.
async fn serve_with(tls: Option<TlsFiles>, name: &str) -> (String, String) {
    let dir = std::env::temp_dir().join(format!("census-tls-{}-{name}.db", std::process::id()));
    let _ = std::fs::remove_file(&dir);
    let store: Arc<dyn JobStore> = census_store::connect(dir.to_str().unwrap(), StoreConfig::default()).await.unwrap();
    let token = generate_token();
    store.create_token("ops", Role::Operator, &hash_token(&token)).await.unwrap();
    let scheme = if tls.is_some() { "https" } else { "http" };
    let coordinator = Coordinator::new(store, CoordinatorConfig { tls, ..CoordinatorConfig::default() });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("{scheme}://localhost:{}", listener.local_addr().unwrap().port());
    tokio::spawn(coordinator.serve(listener, std::future::pending()));
    (url, token)
}

async fn list_runs(config: &ClientConfig) -> Result<usize, String> {
    let channel = census_proto::client::connect(config).await.map_err(|e| e.to_string())?;
    let runs = CensusServiceClient::new(channel).list_runs(ListRunsRequest {}).await.map_err(|s| s.to_string())?;
    Ok(runs.into_inner().runs.len())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_serves_and_client_certificates_are_required_when_asked() {
    let pki = pki();
    let (url, token) = serve(false, &pki).await;
    let with_ca = ClientConfig {
        url: url.clone(),
        token: Some(token.clone()),
        tls_ca_pem: Some(pki.ca_pem.clone().into_bytes()),
        ..ClientConfig::default()
    };
    assert_eq!(list_runs(&with_ca).await, Ok(0));
    let plain = ClientConfig { url: url.replace("https://", "http://"), ..with_ca.clone() };
    assert!(list_runs(&plain).await.is_err(), "TLS options with http:// are refused");
    // http:// to the TLS port, without TLS options: refused at once, the
    // fix named, instead of a broken pipe at the first call and retries.
    let address = url.trim_start_matches("https://").to_string();
    let wrong_scheme =
        ClientConfig { url: format!("http://{address}"), token: Some(token.clone()), ..ClientConfig::default() };
    let refused = census_proto::client::connect(&wrong_scheme).await.map(drop).unwrap_err();
    assert_eq!(refused, census_proto::client::ConnectError::AnsweredWithTls { address: address.clone() });
    assert!(refused.is_bad_settings());
    assert!(
        refused.to_string().contains(&format!("the coordinator at {address} answered with TLS: use https://{address}")),
        "{refused}"
    );
    assert_eq!(census_proto::client::check_scheme(&wrong_scheme).await, Err(refused));
    // A plaintext coordinator passes the same check, and answers.
    let (plaintext, plaintext_token) = serve_with(None, "plaintext").await;
    let plain = ClientConfig { url: plaintext, token: Some(plaintext_token), ..ClientConfig::default() };
    assert_eq!(census_proto::client::check_scheme(&plain).await, Ok(()));
    assert_eq!(list_runs(&plain).await, Ok(0));
    let no_ca = ClientConfig { tls_ca_pem: None, ..with_ca.clone() };
    let refused = list_runs(&no_ca).await.unwrap_err();
    assert!(refused.contains("--tls-ca"), "{refused}");

    let (url, token) = serve(true, &pki).await;
    let anonymous_tls = ClientConfig {
        url: url.clone(),
        token: Some(token.clone()),
        tls_ca_pem: Some(pki.ca_pem.clone().into_bytes()),
        ..ClientConfig::default()
    };
    assert!(list_runs(&anonymous_tls).await.is_err(), "no client certificate, no connection");
    let mutual = ClientConfig {
        tls_identity_pem: Some((pki.client.0.clone().into_bytes(), pki.client.1.clone().into_bytes())),
        ..anonymous_tls
    };
    assert_eq!(list_runs(&mutual).await, Ok(0));
    // TLS does not replace the token.
    let no_token = ClientConfig { token: None, ..mutual };
    let refused = list_runs(&no_token).await.unwrap_err();
    assert!(refused.contains("credential"), "{refused}");
}
