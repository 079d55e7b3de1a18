//! The distinct values of a [`super::StackPairTable`], numbered as they are
//! met: a row holds the numbers (2 bytes an entry) and the values are read
//! back through this list.
//!
//! For r = 4 the table's 300 million entries take only 5,240 values
//! (BENCHMARKS.md), so the list is 21 KB and stays in the first-level
//! cache, and the table takes 600 MB instead of 1.2 GB.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

/// At most this many values: numbers are 16 bits.
pub(super) const CAPACITY: usize = 1 << 16;

/// The values met so far, each with its number, shared by all threads.
pub(super) struct Values {
    /// Value to number, for the rows being coloured.
    numbers: Mutex<rustc_hash::FxHashMap<u32, u16>>,
    /// Number to value: the first `len` are set.
    values: Box<[AtomicU32]>,
    len: AtomicUsize,
}

impl Values {
    pub(super) fn new() -> Values {
        Values {
            numbers: Mutex::new(rustc_hash::FxHashMap::default()),
            values: (0..CAPACITY).map(|_| AtomicU32::new(0)).collect(),
            len: AtomicUsize::new(0),
        }
    }

    /// The numbers of `values`, numbering the values not met before. Panics
    /// past 65,535 distinct values (r = 4 has 5,240).
    pub(super) fn numbers_of(&self, values: &[u32]) -> Box<[u16]> {
        let mut numbers = self.numbers.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        values
            .iter()
            .map(|&value| {
                *numbers.entry(value).or_insert_with(|| {
                    let number = self.len.load(Ordering::Relaxed);
                    // The last number is kept for blocks' missing rows (`blocks::ZERO`).
                    assert!(
                        number < CAPACITY - 1,
                        "a three-band table with more than {} distinct values",
                        CAPACITY - 1
                    );
                    self.values[number].store(value, Ordering::Relaxed);
                    // Released after the value: whoever sees the length sees the value.
                    self.len.store(number + 1, Ordering::Release);
                    number as u16
                })
            })
            .collect()
    }

    /// Updates `known` to every value numbered so far: at least every
    /// number in the rows this thread has read.
    pub(super) fn update(&self, known: &mut Known) {
        let len = self.len.load(Ordering::Acquire);
        for (slot, value) in known.values[known.len..len].iter_mut().zip(&self.values[known.len..len]) {
            *slot = value.load(Ordering::Relaxed);
        }
        known.len = len;
    }
}

/// One thread's copy of [`Values`], by number: a list as long as numbers
/// go, so that reading it by a number needs no check (0 past the values
/// numbered when it was last updated).
pub(super) struct Known {
    values: Box<[u32; CAPACITY]>,
    len: usize,
}

impl Known {
    pub(super) fn new() -> Known {
        Known { values: vec![0; CAPACITY].into_boxed_slice().try_into().expect("CAPACITY values"), len: 0 }
    }

    /// The values, by number.
    pub(super) fn values(&self) -> &[u32; CAPACITY] {
        &self.values
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_numbered_once_and_read_back() {
        let values = Values::new();
        assert_eq!(*values.numbers_of(&[70, 5, 70, 9]), [0, 1, 0, 2]);
        let mut known = Known::new();
        values.update(&mut known);
        assert_eq!(known.values()[..4], [70, 5, 9, 0]);
        assert_eq!(*values.numbers_of(&[9, 11]), [2, 3]);
        values.update(&mut known);
        assert_eq!(known.values()[..5], [70, 5, 9, 11, 0]);
    }
}
