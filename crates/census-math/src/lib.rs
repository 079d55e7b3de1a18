//! The mathematics of the Sudoku census, as a pure library.
//!
//! This crate is the band catalogue, the class stages, the job seeds and the
//! exact completion counters described in `docs/mathematics.md` (Felgenhauer and
//! Jarvis, 2006). It is *not* a job queue, a server or a command line: it does
//! no I/O, spawns no threads of its own and knows nothing of async, so every
//! other crate can trust it and test it in isolation.

pub mod band;
pub mod catalogue;
pub mod census;
pub mod classes;
pub mod counter;
pub mod essentially_different;
pub mod seed;
pub mod shapes;
pub mod stage;
pub mod synthetic;
pub mod three_bands;
pub mod total;

pub use band::{Band, BandError};
pub use classes::{Class, ClassTable};
pub use counter::{Counter, CounterKind, MAX_SEED_COUNT};
pub use seed::{SEEDS, Seed};
pub use stage::{Stage, UnknownStage};
