//! Bounds on every field a client sends, so that no request can exhaust
//! the database, the coordinator or the fleet.

use tonic::Status;

/// The most jobs one lease call hands out, and the most results or tokens one call carries.
pub const MAX_BATCH: u32 = 10_000;
/// The longest lease token accepted back.
pub const MAX_TOKEN_LEN: usize = 128;
/// The longest failure reason stored.
pub const MAX_REASON_LEN: usize = 1024;
/// The longest counter version or stage name.
pub const MAX_NAME_LEN: usize = 64;
/// The longest time one job may report having taken: 30 days.
pub const MAX_ELAPSED_SECONDS: f64 = 30.0 * 86_400.0;
/// The longest a progress stream waits between messages.
pub const MAX_WATCH_INTERVAL_MS: u32 = 60_000;

/// Refuses text longer than `max` bytes, naming the field.
pub fn bounded(field: &str, text: &str, max: usize) -> Result<(), Status> {
    if text.len() > max {
        return Err(Status::invalid_argument(format!("{field} is {} bytes; at most {max}", text.len())));
    }
    Ok(())
}

/// Refuses more than `max` items, naming the field.
pub fn at_most(field: &str, items: usize, max: u32) -> Result<(), Status> {
    if items > max as usize {
        return Err(Status::invalid_argument(format!("{field} has {items} entries; at most {max}")));
    }
    Ok(())
}

/// A reported duration, or why it is not one.
pub fn elapsed(seconds: f64) -> Result<std::time::Duration, String> {
    if !seconds.is_finite() || !(0.0..=MAX_ELAPSED_SECONDS).contains(&seconds) {
        return Err(format!("elapsed time {seconds} s is not between 0 and {MAX_ELAPSED_SECONDS} s"));
    }
    Ok(std::time::Duration::from_secs_f64(seconds))
}
