//! Exact completion counters: c(band, seed), the number of ways to fill the
//! 48 free cells below a top band whose column 1 (rows 4-9) the seed fixes.
//!
//! Three counters answer the same question in different ways, and must agree
//! job by job:
//!
//! - [`Enumerate`]: plain cell-by-cell backtracking that visits every
//!   completion. Obviously right, and slow: the reference.
//! - [`Banded`]: backtracking over the middle band only; the bottom band's
//!   column sets are then forced, and its fillings are counted once per
//!   distinct set of column sets.
//! - [`ColumnSets`]: sums ways(M) x ways(L) over the middle band's column
//!   sets, with ways() read from a table built once. Microseconds a job; the
//!   default.
//!
//! Every counter takes a band with B1 standard (123/456/789), as the
//! catalogue and the class tables produce; [`count_seeds_of`] normalizes any
//! valid band first.

mod banded;
mod column_sets;
#[cfg(test)]
mod column_sets_reference;
mod enumerate;
pub(crate) mod partitions;

use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::band::Band;
use crate::seed::{SEEDS, Seed};

pub use banded::Banded;
pub use column_sets::ColumnSets;
pub use enumerate::Enumerate;

/// The largest c(X, s) over every catalogue band X and seed s, found by
/// counting the whole catalogue (the test `max_seed_count_is_exact` counts it
/// again). A reported count above it is impossible.
pub const MAX_SEED_COUNT: u64 = 12_318_912;

/// Counts c(band, seed) exactly.
pub trait Counter: Send + Sync {
    /// c(band, seed) for a band with B1 standard.
    ///
    /// # Panics
    /// If B1 is not 123/456/789 (normalize the band first).
    fn count(&self, band: &Band, seed: &Seed) -> u64;

    /// c(band, seed), or `None` when `cancel` is set before it is done. A
    /// counter whose count can take a second or more reads the flag as it
    /// goes; the default, for the fast ones (`column-sets` in microseconds,
    /// `banded` in a tenth of a second), only looks at it after.
    fn count_cancellable(&self, band: &Band, seed: &Seed, cancel: &AtomicBool) -> Option<u64> {
        let count = self.count(band, seed);
        (!cancel.load(Ordering::Relaxed)).then_some(count)
    }

    /// c(band, s) for the 10 seeds, in [`SEEDS`] order.
    fn count_seeds(&self, band: &Band) -> [u64; 10] {
        std::array::from_fn(|i| self.count(band, &SEEDS[i]))
    }
}

/// Normalizes any valid band and counts its 10 seeds: the band's completions
/// are 72 x the sum.
pub fn count_seeds_of(counter: &dyn Counter, band: &Band) -> [u64; 10] {
    counter.count_seeds(&crate::catalogue::normalize(band))
}

/// The counters by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum CounterKind {
    Enumerate,
    Banded,
    #[default]
    ColumnSets,
}

impl CounterKind {
    pub const ALL: [CounterKind; 3] = [CounterKind::Enumerate, CounterKind::Banded, CounterKind::ColumnSets];

    /// The name used on the command line, on the wire and in the store.
    pub fn name(self) -> &'static str {
        match self {
            CounterKind::Enumerate => "enumerate",
            CounterKind::Banded => "banded",
            CounterKind::ColumnSets => "column-sets",
        }
    }

    /// Changes whenever the algorithm does, so results of different versions
    /// are never mixed.
    pub fn version(self) -> &'static str {
        match self {
            CounterKind::Enumerate => "enumerate/2",
            CounterKind::Banded => "banded/1",
            CounterKind::ColumnSets => "column-sets/1",
        }
    }

    /// Builds the counter (and its tables, for `column-sets`: under a
    /// millisecond). The counter is shareable across threads.
    pub fn build(self) -> Box<dyn Counter> {
        match self {
            CounterKind::Enumerate => Box::new(Enumerate),
            CounterKind::Banded => Box::new(Banded),
            CounterKind::ColumnSets => Box::new(ColumnSets::new()),
        }
    }
}

impl fmt::Display for CounterKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A counter name that is not one of [`CounterKind::ALL`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownCounter(pub String);

impl fmt::Display for UnknownCounter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown counter {:?}; choose one of enumerate, banded, column-sets", self.0)
    }
}

impl std::error::Error for UnknownCounter {}

impl FromStr for CounterKind {
    type Err = UnknownCounter;
    fn from_str(text: &str) -> Result<CounterKind, UnknownCounter> {
        let wanted = text.trim().to_ascii_lowercase();
        CounterKind::ALL.into_iter().find(|kind| kind.name() == wanted).ok_or_else(|| UnknownCounter(text.to_string()))
    }
}

/// Digits 1-9 as bits 1-9.
const ALL_DIGITS: u16 = 0b11_1111_1110;

/// The grid's 81 cells with the top band and the seed's column filled in.
fn seeded_grid(band: &Band, seed: &Seed) -> [u8; 81] {
    assert!(band.is_standard(), "counters take a band with B1 = 123/456/789; normalize {band} first");
    let mut grid = [0u8; 81];
    grid[..27].copy_from_slice(band.cells());
    for (i, &d) in seed.column().iter().enumerate() {
        grid[(3 + i) * 9] = d;
    }
    grid
}
