//! Credentials: bearer tokens, their hashes, and who may call what.
//!
//! A token is `census_` followed by 64 hexadecimal digits: 256 random bits
//! from the operating system. The database keeps only its SHA-256, so a
//! leaked database grants nothing; a slow password hash would buy nothing
//! for a secret this long and would cost on every call.
//!
//! ```
//! use census_coordinator::auth::{generate_token, hash_token, parse_token};
//! let token = generate_token();
//! assert!(parse_token(&token).is_ok());
//! assert_eq!(hash_token(&token).len(), 64);
//! assert!(parse_token("Bearer census_123").is_err());
//! ```

use std::collections::HashMap;

use census_store::{JobStore, Role, TokenRecord};
use sha2::{Digest, Sha256};
use tonic::Status;
use tonic::metadata::MetadataMap;

use crate::status_of;

const PREFIX: &str = "census_";
const SECRET_HEX_DIGITS: usize = 64;

/// A new random token, to be shown once and stored only as its hash.
pub fn generate_token() -> String {
    let bytes: [u8; 32] = rand::random();
    let mut token = String::with_capacity(PREFIX.len() + SECRET_HEX_DIGITS);
    token.push_str(PREFIX);
    for byte in bytes {
        token.push_str(&format!("{byte:02x}"));
    }
    token
}

/// The SHA-256 of a token, in hex: what the database keeps.
pub fn hash_token(token: &str) -> String {
    Sha256::digest(token.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

/// Checks a token's form, so that nothing malformed reaches the database.
pub fn parse_token(token: &str) -> Result<&str, String> {
    let Some(secret) = token.strip_prefix(PREFIX) else {
        return Err(format!("a token starts with {PREFIX:?}"));
    };
    if secret.len() != SECRET_HEX_DIGITS || !secret.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(format!("a token is {PREFIX:?} and {SECRET_HEX_DIGITS} hexadecimal digits"));
    }
    Ok(token)
}

/// What a call needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// Leasing and reporting jobs.
    Worker,
    /// Changing runs and jobs.
    Operator,
    /// Reading runs, progress and results (also without a credential
    /// under [`AuthConfig::public_read`]).
    Read,
}

impl Need {
    /// The roles a call with this need accepts.
    pub fn roles(self) -> &'static [Role] {
        match self {
            Need::Worker => &[Role::Worker],
            Need::Operator => &[Role::Operator],
            Need::Read => &[Role::Operator, Role::Reader],
        }
    }
}

/// Who may call what: every method of `census.v1.WorkerService` and
/// `census.v1.CensusService`, by its full gRPC path, and what it needs.
/// One layer applies it to every call before any handler runs
/// (`server.rs`); a method missing here is refused, and the test
/// `tests/authorization.rs` walks every method of the protocol's
/// descriptor, so a new RPC without an entry fails it. A new RPC: one line here.
pub const POLICY: &[(&str, Need)] = &[
    ("/census.v1.WorkerService/LeaseJobs", Need::Worker),
    ("/census.v1.WorkerService/Heartbeat", Need::Worker),
    ("/census.v1.WorkerService/CompleteJobs", Need::Worker),
    ("/census.v1.WorkerService/CompleteJob", Need::Worker),
    ("/census.v1.WorkerService/FailJob", Need::Worker),
    ("/census.v1.WorkerService/AcceptedCounts", Need::Worker),
    ("/census.v1.CensusService/CreateRun", Need::Operator),
    ("/census.v1.CensusService/ListRuns", Need::Read),
    ("/census.v1.CensusService/GetProgress", Need::Read),
    ("/census.v1.CensusService/WatchProgress", Need::Read),
    ("/census.v1.CensusService/GetResult", Need::Read),
    ("/census.v1.CensusService/ListClasses", Need::Read),
    ("/census.v1.CensusService/RecountJob", Need::Operator),
    ("/census.v1.CensusService/RequeueJobs", Need::Operator),
    ("/census.v1.CensusService/CancelRun", Need::Operator),
    ("/census.v1.CensusService/SetRunPriority", Need::Operator),
];

/// Services anyone may call: health (for load balancers and Kubernetes)
/// and reflection, both versions (the protocol is public).
pub const OPEN_SERVICES: &[&str] =
    &["/grpc.health.v1.Health/", "/grpc.reflection.v1.ServerReflection/", "/grpc.reflection.v1alpha.ServerReflection/"];

/// What a call to the gRPC method at `path` needs: `Ok(None)` for the
/// open services, UNIMPLEMENTED for a method with no entry in [`POLICY`].
/// The server has no method that is missing here (`tests/authorization.rs`
/// walks the protocol), so a path without an entry is one it does not
/// serve: UNIMPLEMENTED, as gRPC answers an unknown method, never
/// PERMISSION_DENIED, which would tell a client that probes for a service
/// (reflection's versions, say) to stop instead of trying the next.
pub fn need_of(path: &str) -> Result<Option<Need>, Status> {
    if OPEN_SERVICES.iter().any(|service| path.starts_with(service)) {
        return Ok(None);
    }
    POLICY
        .iter()
        .find(|(method, _)| *method == path)
        .map(|(_, need)| Some(*need))
        .ok_or_else(|| Status::unimplemented(format!("{path}: this server has no such method")))
}

/// Who is calling: the token's name and role.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub name: String,
    pub role: Option<Role>,
    /// The token is one of this process's own ([`AuthConfig::local`]).
    pub local: bool,
}

/// Who may call what.
#[derive(Debug, Clone, Default)]
pub struct AuthConfig {
    /// Reads need no credential.
    pub public_read: bool,
    /// Credentials that live only in this process (hash -> name, role):
    /// `census run` makes its own, so it needs no set-up.
    pub local: HashMap<String, (String, Role)>,
}

const HOW_TO_GET_ONE: &str = "an operator creates one with `census token create --role ROLE --name NAME --database URL` \
     (`--role reader` to read progress and results, `--role worker` to count, `--role operator` to manage runs) \
     and passes it as `--token` (or CENSUS_TOKEN)";

fn bearer(metadata: &MetadataMap) -> Result<Option<&str>, Status> {
    let Some(value) = metadata.get("authorization") else { return Ok(None) };
    let text = value.to_str().map_err(|_| Status::unauthenticated("the authorization header is not text"))?;
    let token = text
        .strip_prefix("Bearer ")
        .ok_or_else(|| Status::unauthenticated("the authorization header is not `Bearer <token>`"))?;
    parse_token(token.trim()).map(Some).map_err(|e| Status::unauthenticated(format!("malformed token: {e}")))
}

/// The token a request presents, checked for its form only, without the
/// store: UNAUTHENTICATED for a call that needs a credential and has none,
/// or a malformed one; `None` for a read that needs none
/// ([`AuthConfig::public_read`]). What it costs to refuse a call that
/// presents nothing, or nothing well formed: no slot, no store, no body.
pub fn presented<'m>(config: &AuthConfig, metadata: &'m MetadataMap, need: Need) -> Result<Option<&'m str>, Status> {
    match bearer(metadata)? {
        Some(token) => Ok(Some(token)),
        None if need == Need::Read && config.public_read => Ok(None),
        None => Err(Status::unauthenticated(format!(
            "this call needs a credential (authorization: Bearer <token>); {HOW_TO_GET_ONE}"
        ))),
    }
}

/// Decides whether the caller of a request may do what it needs.
pub async fn authorize(
    config: &AuthConfig,
    store: &dyn JobStore,
    metadata: &MetadataMap,
    need: Need,
) -> Result<Caller, Status> {
    let Some(token) = presented(config, metadata, need)? else {
        return Ok(Caller { name: "anonymous".into(), role: None, local: false });
    };
    let hash = hash_token(token);
    let own = config.local.get(&hash);
    let local = own.is_some();
    let record = match own {
        Some((name, role)) => TokenRecord {
            name: name.clone(),
            role: *role,
            created_unix: 0,
            revoked: false,
            quarantined: store.is_quarantined(name).await.map_err(status_of)?,
            rejected: 0,
        },
        None => store
            .find_token(&hash)
            .await
            .map_err(status_of)?
            .ok_or_else(|| Status::unauthenticated(format!("unknown token; {HOW_TO_GET_ONE}")))?,
    };
    if record.revoked {
        return Err(Status::unauthenticated(format!("the token {:?} is revoked", record.name)));
    }
    if !need.roles().contains(&record.role) {
        let wanted = match need {
            Need::Worker => "worker",
            Need::Operator => "operator",
            Need::Read => "reader or operator",
        };
        return Err(Status::permission_denied(format!(
            "the token {:?} has the role {}; this call needs {wanted}",
            record.name, record.role
        )));
    }
    if record.role == Role::Worker && record.quarantined {
        return Err(Status::permission_denied(format!(
            "{:?} is quarantined (too many rejected results or failed jobs); an operator lifts it with `census token release {}`",
            record.name, record.name
        )));
    }
    Ok(Caller { name: record.name, role: Some(record.role), local })
}
