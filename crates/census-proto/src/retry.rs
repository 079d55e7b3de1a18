//! The retry hint, one home for both sides: a coordinator too busy to take
//! a call refuses it at once with UNAVAILABLE and the standard gRPC
//! pushback, `grpc-retry-pushback-ms` (gRFC A6, "gRPC Retry Design"), the
//! milliseconds the caller should wait before it tries again; a client
//! waits that long (plus jitter) instead of its own backoff.
//!
//! ```
//! use std::time::Duration;
//! use census_proto::retry::{pushback, refused};
//! let status = refused("the coordinator is busy", Duration::from_millis(250));
//! assert_eq!(status.code(), tonic::Code::Unavailable);
//! assert_eq!(pushback(&status), Some(Duration::from_millis(250)));
//! assert_eq!(pushback(&tonic::Status::unavailable("the database is down")), None);
//! ```

use std::time::Duration;

use tonic::metadata::MetadataMap;
use tonic::{Code, Status};

/// The metadata key of the hint (a response trailer; a whole number of milliseconds).
pub const PUSHBACK_KEY: &str = "grpc-retry-pushback-ms";

/// The longest pause a hint may ask for: a hint past it is read as this.
pub const LONGEST_PUSHBACK: Duration = Duration::from_secs(60);

/// A refusal with a hint: UNAVAILABLE, `message`, and `wait` in milliseconds.
pub fn refused(message: &str, wait: Duration) -> Status {
    let mut metadata = MetadataMap::new();
    let millis = wait.min(LONGEST_PUSHBACK).as_millis();
    metadata.insert(PUSHBACK_KEY, millis.to_string().parse().expect("digits are a valid header value"));
    Status::with_metadata(Code::Unavailable, message, metadata)
}

/// The pause a refusal asks for, if it carries a hint: only an UNAVAILABLE
/// status with a whole number of milliseconds (gRFC A6 says a hint that
/// cannot be read means "do not retry"; a client here then falls back to
/// its own backoff, as for any UNAVAILABLE).
pub fn pushback(status: &Status) -> Option<Duration> {
    if status.code() != Code::Unavailable {
        return None;
    }
    let millis: u64 = status.metadata().get(PUSHBACK_KEY)?.to_str().ok()?.trim().parse().ok()?;
    Some(Duration::from_millis(millis).min(LONGEST_PUSHBACK))
}
