//! The bounds of the protocol, one home for both sides: the coordinator
//! refuses a request past them (so that no request can exhaust the database,
//! the coordinator or the fleet), and a client stays within them.

/// The most jobs one lease call hands out, the most results or tokens one
/// call carries, and the most accepted counts one answer carries.
pub const MAX_BATCH: u32 = 10_000;
/// The longest lease token accepted back.
pub const MAX_TOKEN_LEN: usize = 128;
/// The longest failure reason stored.
pub const MAX_REASON_LEN: usize = 1024;
/// The longest counter version or stage name.
pub const MAX_NAME_LEN: usize = 64;
/// The longest count in decimal: a `u128` has at most 39 digits.
pub const MAX_COUNT_DIGITS: usize = 39;
/// The longest time one job may report having taken: 30 days.
pub const MAX_ELAPSED_SECONDS: f64 = 30.0 * 86_400.0;
/// The longest a progress stream waits between messages.
pub const MAX_WATCH_INTERVAL_MS: u32 = 60_000;
/// How long a worker's batch takes to count unless the coordinator asks for
/// longer (`LeaseJobsResponse.batch_millis`), and the least it ever asks:
/// long enough that round trips are a small part of a job's cost.
pub const SHORTEST_BATCH_TIME: std::time::Duration = std::time::Duration::from_secs(1);
