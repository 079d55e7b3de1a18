//! Grids whose boxes are 2 x c (c = 2..6), counted by two bands.
//!
//! `docs/mathematics.md` ("Other box shapes") has the argument. Transpose the grid so its boxes are
//! c rows x 2 columns: two bands of c rows, c stacks of two columns. The top
//! band's column sets S = (A_1 .. A_c) (A_j the c digits of the stack's left
//! column) fix the bottom band's column sets (each stack's two sets swapped),
//! and swapping does not change the number F(S) of bands with those sets, so
//!
//! ```text
//! grids(2 x c) = sum over S of F(S)^2.
//! ```
//!
//! [`classes()`] groups the C(2c, c)^c tuples S under digit relabelling,
//! stack order and the swap of a stack's two columns, which all keep F (2,
//! 4, 26, 355 and 63,199 classes for c = 2..6); [`bands`] ([`band_count`])
//! counts F for one tuple; [`jobs()`] turns each class (or, for 2 x 6, each part of a class) into a job
//! for the engine (a text key, a group label and an exact weight) and
//! [`fold`]s the results back into the total.
//!
//! The transposed shape (c x 2 boxes) has the same count; the tests check
//! that by a plain whole-grid backtracker (2 x 2, 2 x 3 and 3 x 2), which
//! shares no code with the two-band path.
//!
//! Everything here is pure and single-threaded: the caller (a worker, the
//! `shapes` example) decides how jobs are spread over cores and machines.

pub mod bands;
pub mod classes;
pub mod jobs;
pub mod layer_jobs;
pub mod layers;

#[cfg(test)]
mod brute;

use std::fmt;

pub use bands::{
    PART_COLUMNS, band_count, band_count_cancellable, part_count, part_count_cancellable, parts, prefixes,
};
pub use classes::{ColumnSets, ShapeClass, classes};
pub use jobs::{SPLIT_FROM_C, ShapeJob, count_job, count_job_cancellable, fold, grids, jobs, part_keys, sub_keys};

/// The smallest and largest c handled: 2 x 2 up to 2 x 6 (side 4 to 12).
pub const MIN_C: usize = 2;
/// See [`MIN_C`]; the digit sets are `u16` masks and the patterns `u8` rows.
pub const MAX_C: usize = 6;

/// Published numbers of 2 x c grids, c = 2..6, as decimal text (the table of
/// `docs/mathematics.md`): 2x3 by hand on the Sudoku Players' Forum (2005), 2x4
/// by Ed Russell (2005), 2x5 and 2x6 by Kjell Fredrik Pettersen (2005, 2006).
pub const PUBLISHED_GRIDS: [(usize, &str); 5] = [
    (2, "288"),
    (3, "28200960"),
    (4, "29136487207403520"),
    (5, "1903816047972624930994913280000"),
    (6, "38296278920738107863746324732012492486187417600000"),
];

/// Why a shape, a set tuple or a job key was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShapeError {
    /// c is outside [`MIN_C`]..=[`MAX_C`].
    UnsupportedShape { c: usize },
    /// A tuple does not have c sets, or a set is not a c-subset of the 2c digits.
    BadSets { reason: String },
    /// A job key does not parse.
    BadKey { key: String, reason: String },
    /// The column masks of a part key do not start a factor of the band's
    /// first block of rows (`bands::parts`) through column 0.
    BadPart { reason: String },
    /// A layer plan's shards or parts out of range (`LayerPlan::new`).
    BadPlan { reason: String },
    /// Results handed to [`fold`] disagree: two parts of one class with
    /// different weights, or a key of another shape.
    BadResults { reason: String },
}

impl fmt::Display for ShapeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ShapeError::UnsupportedShape { c } => {
                write!(f, "2 x {c} boxes are not supported (c must be {MIN_C}..={MAX_C})")
            }
            ShapeError::BadSets { reason } => write!(f, "bad column sets: {reason}"),
            ShapeError::BadKey { key, reason } => write!(f, "bad shape job key {key:?}: {reason}"),
            ShapeError::BadPart { reason } => write!(f, "bad part of a shape job: {reason}"),
            ShapeError::BadPlan { reason } => write!(f, "bad layer plan: {reason}"),
            ShapeError::BadResults { reason } => write!(f, "inconsistent shape results: {reason}"),
        }
    }
}

impl std::error::Error for ShapeError {}

fn check_c(c: usize) -> Result<(), ShapeError> {
    if (MIN_C..=MAX_C).contains(&c) { Ok(()) } else { Err(ShapeError::UnsupportedShape { c }) }
}
