//! Essentially different 9x9 grids, by Burnside's lemma (Russell and Jarvis,
//! "Mathematics of Sudoku II", 2006): 5,472,730,538.
//!
//! Two grids are equivalent when a rearrangement g in G (rows within bands,
//! bands, columns within stacks, stacks, transpose; |G| = 3,359,232) and a
//! relabelling of the digits take one to the other. With
//! A(g) = #{grids X : g(X) is a relabelling of X} / 9!, constant on the
//! conjugacy classes of G, Burnside's lemma gives
//!
//! ```text
//! essentially different grids = (sum over classes C of |C| x A(C)) / |G|.
//! ```
//!
//! - [`group`]: G, its multiplication and its 275 conjugacy classes, computed
//!   by a flood fill (about a second).
//! - [`fixed`]: A(g) for g ≠ 1, by a search over g's cell orbits, one cycle
//!   type of relabelling at a time (the method is in that module's doc).
//!   A is non-zero on 26 classes besides the identity.
//! - A(1) = N0 / 9! = 72 x 72 x S, from the 9x9 census's own classes and
//!   counter, never typed in.
//! - [`jobs`](mod@jobs): the count as independent jobs with text keys: one per class,
//!   except the transpose's class, cut into 8 parts; and the checked fold.
//!   All 282 jobs take about 36 s on one core; the longest about 5.5 s.

pub mod fixed;
pub mod group;
pub mod jobs;

pub use fixed::{FixedCounter, Split};
pub use group::{ConjugacyClass, ConjugacyClasses, GROUP_ORDER, Group, Rearrangement};
pub use jobs::{
    ClassTerm, FixedJob, Fold, FoldError, JobKey, ParseError, count_job, count_job_cancellable, fold, job_key, jobs,
    parse_key,
};
