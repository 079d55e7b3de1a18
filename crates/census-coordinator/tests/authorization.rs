//! The authorization table against the protocol: every method of both
//! services, read from the protocol's file descriptor (so a new RPC is
//! walked as soon as it is declared), is called with every role and with
//! no token. A method without an entry in `auth::POLICY` fails here; a
//! method whose layer lets the wrong role through fails here.

use std::sync::Arc;

use census_coordinator::auth::{Need, POLICY, generate_token, hash_token, need_of};
use census_coordinator::{AuthConfig, Coordinator, CoordinatorConfig};
use census_proto::client::{AuthChannel, ClientConfig};
use census_store::{JobStore, Role, StoreConfig};
use prost::Message;
use tonic::Code;

/// Every method of the census services: (full path, server streaming).
fn protocol_methods() -> Vec<(String, bool)> {
    let set = prost_types::FileDescriptorSet::decode(census_proto::FILE_DESCRIPTOR_SET).unwrap();
    let mut methods = Vec::new();
    for file in &set.file {
        let package = file.package();
        if !package.starts_with("census.") {
            continue;
        }
        for service in &file.service {
            for method in &service.method {
                methods.push((format!("/{package}.{}/{}", service.name(), method.name()), method.server_streaming()));
            }
        }
    }
    methods
}

/// Calls `path` with an empty request (every protobuf message's fields
/// may be absent), and returns the status code it ends with.
async fn call(channel: AuthChannel, path: &str, streaming: bool) -> Code {
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.unwrap();
    let path = path.parse::<tonic::codegen::http::uri::PathAndQuery>().unwrap();
    let codec = tonic_prost::ProstCodec::<(), ()>::default();
    if streaming {
        match grpc.server_streaming(tonic::Request::new(()), path, codec).await {
            Ok(mut stream) => match stream.get_mut().message().await {
                Ok(_) => Code::Ok,
                Err(status) => status.code(),
            },
            Err(status) => status.code(),
        }
    } else {
        match grpc.unary(tonic::Request::new(()), path, codec).await {
            Ok(_) => Code::Ok,
            Err(status) => status.code(),
        }
    }
}

async fn start(public_read: bool) -> (String, Vec<(Role, String)>) {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let dir = census_testpg::scratch_dir("census-authorization");
    let path = dir.join(format!("{}.db", NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)));
    let _ = std::fs::remove_file(&path);
    let store: Arc<dyn JobStore> = census_store::connect(path.to_str().unwrap(), StoreConfig::default()).await.unwrap();
    let mut tokens = Vec::new();
    for role in [Role::Worker, Role::Operator, Role::Reader] {
        let token = generate_token();
        store.create_token(role.as_str(), role, &hash_token(&token)).await.unwrap();
        tokens.push((role, token));
    }
    let config =
        CoordinatorConfig { auth: AuthConfig { public_read, ..AuthConfig::default() }, ..CoordinatorConfig::default() };
    let coordinator = Coordinator::new(store, config);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(coordinator.serve(listener, std::future::pending()));
    (url, tokens)
}

fn channel(url: &str, token: Option<&str>) -> AuthChannel {
    let config = ClientConfig { url: url.to_string(), token: token.map(str::to_string), ..ClientConfig::default() };
    census_proto::client::connect_lazy(&config).unwrap()
}

#[test]
fn every_method_of_the_protocol_has_one_entry_and_no_entry_is_stale() {
    let methods = protocol_methods();
    assert!(methods.len() >= 15, "both services are in the descriptor: {methods:?}");
    for (path, _) in &methods {
        assert_eq!(POLICY.iter().filter(|(method, _)| method == path).count(), 1, "{path}: one entry in auth::POLICY");
    }
    for (method, _) in POLICY {
        assert!(methods.iter().any(|(path, _)| path == method), "{method} is in auth::POLICY but not in the protocol");
    }
    let unknown = need_of("/census.v1.CensusService/NoSuchMethod").unwrap_err();
    assert_eq!(unknown.code(), Code::Unimplemented, "a method without an entry is refused as one the server lacks");
    assert_eq!(need_of("/grpc.health.v1.Health/Check").unwrap(), None, "health is open");
}

async fn every_method_with_every_role(public_read: bool) {
    let (url, tokens) = start(public_read).await;
    for (path, streaming) in protocol_methods() {
        let need = need_of(&path).unwrap().expect("a census method needs something");
        for (role, token) in &tokens {
            let code = call(channel(&url, Some(token)), &path, streaming).await;
            if need.roles().contains(role) {
                assert!(
                    !matches!(code, Code::Unauthenticated | Code::PermissionDenied),
                    "{path} refused the role {role} it allows: {code:?}"
                );
            } else {
                assert_eq!(code, Code::PermissionDenied, "{path} with the role {role}");
            }
        }
        let anonymous = call(channel(&url, None), &path, streaming).await;
        if public_read && need == Need::Read {
            assert!(!matches!(anonymous, Code::Unauthenticated | Code::PermissionDenied), "{path}: {anonymous:?}");
        } else {
            assert_eq!(anonymous, Code::Unauthenticated, "{path} without a token");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_method_refuses_every_role_it_does_not_allow() {
    every_method_with_every_role(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn public_read_opens_the_reads_and_nothing_else() {
    every_method_with_every_role(true).await;
}

/// The services a reflection client lists, without a credential, through
/// `list_services` of either version of the protocol.
async fn reflected_services(url: &str, alpha: bool) -> Vec<String> {
    use tokio_stream::StreamExt as _;
    use tonic_reflection::pb::{v1, v1alpha};
    let channel = channel(url, None);
    if alpha {
        let mut client = v1alpha::server_reflection_client::ServerReflectionClient::new(channel);
        let request = v1alpha::ServerReflectionRequest {
            host: String::new(),
            message_request: Some(v1alpha::server_reflection_request::MessageRequest::ListServices(String::new())),
        };
        let mut answers = client.server_reflection_info(tokio_stream::iter([request])).await.unwrap().into_inner();
        match answers.next().await.unwrap().unwrap().message_response.unwrap() {
            v1alpha::server_reflection_response::MessageResponse::ListServicesResponse(list) => {
                list.service.into_iter().map(|service| service.name).collect()
            }
            other => panic!("v1alpha answered list_services with {other:?}"),
        }
    } else {
        let mut client = v1::server_reflection_client::ServerReflectionClient::new(channel);
        let request = v1::ServerReflectionRequest {
            host: String::new(),
            message_request: Some(v1::server_reflection_request::MessageRequest::ListServices(String::new())),
        };
        let mut answers = client.server_reflection_info(tokio_stream::iter([request])).await.unwrap().into_inner();
        match answers.next().await.unwrap().unwrap().message_response.unwrap() {
            v1::server_reflection_response::MessageResponse::ListServicesResponse(list) => {
                list.service.into_iter().map(|service| service.name).collect()
            }
            other => panic!("v1 answered list_services with {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_versions_of_reflection_list_the_services_without_a_credential() {
    let (url, _) = start(false).await;
    for alpha in [false, true] {
        let services = reflected_services(&url, alpha).await;
        for service in ["census.v1.WorkerService", "census.v1.CensusService"] {
            assert!(services.iter().any(|name| name == service), "v1alpha {alpha}: {service} in {services:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_method_or_service_the_server_does_not_have_is_unimplemented() {
    let (url, tokens) = start(false).await;
    let operator = &tokens.iter().find(|(role, _)| *role == Role::Operator).unwrap().1;
    for path in [
        "/census.v1.CensusService/NoSuchMethod",
        "/census.v2.CensusService/ListRuns",
        "/grpc.reflection.v2.ServerReflection/Info",
    ] {
        for token in [None, Some(operator.as_str())] {
            let code = call(channel(&url, token), path, false).await;
            assert_eq!(code, Code::Unimplemented, "{path} with a token: {}", token.is_some());
        }
    }
}
