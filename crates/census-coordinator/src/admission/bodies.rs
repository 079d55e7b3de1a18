//! The bodies being read: how many requests of each identity the
//! coordinator is receiving at once, outside any slot.
//!
//! A worker's call steps out of its slot while its body comes (`server.rs`):
//! a slot held while a body is on its way is held for as long as its caller
//! likes. Outside a slot, what bounds a caller's bodies is this count, per
//! identity (the credential already checked, so a caller cannot be many by
//! presenting many made-up tokens): past [`BODIES_AN_IDENTITY`] its calls are
//! refused with a retry hint, unread, so the memory its bodies take is at
//! most that many times the largest request, however many connections and
//! streams it opens.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The most requests of one identity whose bodies are read at once. An
/// honest worker process has a few calls in flight (a lease, a heartbeat,
/// a report) and a body takes milliseconds on a network, so even a fleet
/// sharing one identity rarely has a handful; 32 bodies of 4 MiB, the
/// largest request, bound an identity's to 128 MiB.
pub const BODIES_AN_IDENTITY: usize = 32;

/// The bodies being read now, by identity.
#[derive(Default)]
pub(crate) struct Bodies {
    reading: Arc<Mutex<HashMap<String, usize>>>,
}

/// One body being read: its place is given back when this is dropped.
pub(crate) struct Reading {
    reading: Arc<Mutex<HashMap<String, usize>>>,
    identity: String,
}

impl Bodies {
    /// A place to read a body of `identity`'s, or `None` past its bound.
    pub(crate) fn place(&self, identity: &str) -> Option<Reading> {
        let mut reading = self.reading.lock().expect("never poisoned");
        let now = reading.entry(identity.to_string()).or_default();
        if *now >= BODIES_AN_IDENTITY {
            return None;
        }
        *now += 1;
        Some(Reading { reading: self.reading.clone(), identity: identity.to_string() })
    }

    /// How many bodies are being read now, every identity's.
    pub(crate) fn now(&self) -> usize {
        self.reading.lock().expect("never poisoned").values().sum()
    }
}

impl Drop for Reading {
    fn drop(&mut self) {
        let mut reading = self.reading.lock().expect("never poisoned");
        if let Some(now) = reading.get_mut(&self.identity) {
            *now -= 1;
            if *now == 0 {
                reading.remove(&self.identity);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_identity_reads_at_most_its_bound_and_others_are_not_counted_against_it() {
        let bodies = Bodies::default();
        let flood: Vec<Reading> = (0..BODIES_AN_IDENTITY).map(|_| bodies.place("flooder").expect("a place")).collect();
        assert!(bodies.place("flooder").is_none(), "past its bound");
        let honest = bodies.place("honest").expect("another identity's place");
        assert_eq!(bodies.now(), BODIES_AN_IDENTITY + 1);
        drop(flood);
        assert!(bodies.place("flooder").is_some(), "places given back");
        drop(honest);
        assert_eq!(bodies.now(), 0);
        assert!(bodies.reading.lock().unwrap().is_empty(), "no identity is kept once it reads nothing");
    }
}
