//! Class tables: the catalogue bands joined by a stage's moves.
//!
//! A class is a connected component of the graph on the 36,288 catalogue
//! bands with an edge from X to normalize(move(X)) for every move of the
//! stage. Every move keeps the number of completions, so one representative
//! per class is counted.
//!
//! The components are found without walking every edge (the first builder,
//! which did, is kept in `reference` and the tests compare every stage's
//! table with it, band by band):
//!
//! - stacks, columns and rows form a group, so their components are orbits:
//!   each found whole from its first band, by the 108 (18 without rows)
//!   choices of B1's stack, column order and row order that normalization
//!   does not undo (`classes/orbits.rs`);
//! - a rectangle, row-subset or column-swap move seen from another band of
//!   an orbit is the same kind of move from the first band, moved; so these
//!   moves are made from the first band of each orbit only;
//! - same column sets (Russell) depends only on the column sets of B2 and
//!   B3, so its classes are orbits on the 280 x 280 pairs of partitions
//!   (`classes/russell.rs`).

use crate::band::Band;
use crate::catalogue::{self, Indexed};
use crate::stage::Stage;

mod moves;
mod orbits;
#[cfg(test)]
mod reference;
mod russell;

/// One class of a stage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Class {
    /// The class's number: its position in the order of representatives.
    pub id: u32,
    /// The least band of the class in string order.
    pub representative: Band,
    /// The number of catalogue bands in the class.
    pub size: u64,
}

/// The classes of a stage, and a lookup from any valid band to its class.
///
/// ```
/// use census_math::{Band, ClassTable, Stage};
/// let table = ClassTable::build(Stage::Russell);
/// assert_eq!(table.classes().len(), 44);
/// let band: Band = "123478569456139278789256134".parse().unwrap();
/// assert_eq!(table.classes()[table.class_of(&band) as usize].size, 2_484);
/// ```
#[derive(Debug, Clone)]
pub struct ClassTable {
    stage: Stage,
    catalogue: Vec<Band>,
    class_of_index: Vec<u32>,
    classes: Vec<Class>,
}

impl ClassTable {
    /// Builds the class table of a stage from scratch.
    pub fn build(stage: Stage) -> ClassTable {
        let catalogue = Indexed::new();
        let components = match stage {
            Stage::Catalogue => (0..catalogue.bands.len() as u32).collect(),
            Stage::Russell => russell::components(&catalogue.bands),
            _ => orbits::components(&catalogue, &moves::Moves::of(stage)),
        };
        ClassTable::from_components(stage, catalogue.bands, &components)
    }

    /// The table whose classes are the catalogue's components (`components[i]`
    /// names band i's, below 36,288), numbered by their least bands: the
    /// catalogue is sorted, so in order of first appearance.
    fn from_components(stage: Stage, catalogue: Vec<Band>, components: &[u32]) -> ClassTable {
        let mut class_of_component = vec![u32::MAX; catalogue.len()];
        let mut classes: Vec<Class> = Vec::new();
        let mut class_of_index = Vec::with_capacity(catalogue.len());
        for (band, &component) in catalogue.iter().zip(components) {
            let id = &mut class_of_component[component as usize];
            if *id == u32::MAX {
                *id = classes.len() as u32;
                classes.push(Class { id: *id, representative: *band, size: 0 });
            }
            classes[*id as usize].size += 1;
            class_of_index.push(*id);
        }
        ClassTable { stage, catalogue, class_of_index, classes }
    }

    /// The stage this table belongs to.
    pub fn stage(&self) -> Stage {
        self.stage
    }

    /// The classes, in order of their representatives (`classes()[i].id == i`).
    pub fn classes(&self) -> &[Class] {
        &self.classes
    }

    /// The catalogue (36,288 normal-form bands, in string order).
    pub fn catalogue(&self) -> &[Band] {
        &self.catalogue
    }

    /// The class of any valid band: it is normalized, then looked up.
    pub fn class_of(&self, band: &Band) -> u32 {
        let normal = catalogue::normalize(band);
        let i = catalogue::catalogue_index(&self.catalogue, &normal)
            .expect("the normal form of a valid band is in the catalogue");
        self.class_of_index[i]
    }

    /// The catalogue bands of a class, in string order.
    pub fn members(&self, id: u32) -> impl Iterator<Item = &Band> + '_ {
        self.catalogue.iter().zip(&self.class_of_index).filter(move |&(_, &class)| class == id).map(|(band, _)| band)
    }
}

/// Components by union-find; a root is the least member of its component.
struct UnionFind {
    parent: Vec<u32>,
}

impl UnionFind {
    fn new(n: usize) -> UnionFind {
        UnionFind { parent: (0..n as u32).collect() }
    }

    fn find(&mut self, mut x: u32) -> u32 {
        while self.parent[x as usize] != x {
            let grandparent = self.parent[self.parent[x as usize] as usize];
            self.parent[x as usize] = grandparent;
            x = grandparent;
        }
        x
    }

    fn union(&mut self, a: u32, b: u32) {
        let (ra, rb) = (self.find(a), self.find(b));
        // The smaller index stays the root, so roots are least members.
        if ra < rb {
            self.parent[rb as usize] = ra;
        } else if rb < ra {
            self.parent[ra as usize] = rb;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every stage's classes, and every band's class, are the first builder's.
    #[test]
    fn every_stage_is_the_first_builders() {
        for stage in Stage::ALL {
            let fast = ClassTable::build(stage);
            let plain = reference::build(stage);
            assert_eq!(fast.classes, plain.classes, "{stage}");
            assert_eq!(fast.class_of_index, plain.class_of_index, "{stage}");
            assert_eq!(fast.catalogue, plain.catalogue, "{stage}");
        }
    }
}
