//! Bounds on every field a client sends, so that no request can exhaust
//! the database, the coordinator or the fleet: the protocol's limits
//! ([`census_proto::limits`]) and the checks that apply them.

use tonic::Status;

pub use census_proto::limits::*;

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
