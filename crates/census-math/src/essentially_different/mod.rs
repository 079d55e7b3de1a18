//! Essentially different 9x9 grids, by Burnside's lemma (Russell and Jarvis, 2006).

pub mod group;

pub use group::{ConjugacyClass, ConjugacyClasses, GROUP_ORDER, Group, Rearrangement};
