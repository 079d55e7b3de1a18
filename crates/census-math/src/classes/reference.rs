//! The class tables as they were first built, kept to test the fast
//! builder against: every move of the stage from every catalogue band (the
//! same-column-sets join by walking orbits of keys, or by its definition).

use std::collections::HashMap;

use rustc_hash::{FxHashMap, FxHashSet};

use super::moves::{Moves, for_each_column_swap, for_each_rectangle, for_each_row_subset_swap, swap_columns};
use super::{Class, ClassTable, UnionFind};
use crate::band::Band;
use crate::catalogue::{self, normalize_cells};
use crate::stage::Stage;

/// The table of a stage by the first builder.
pub(super) fn build(stage: Stage) -> ClassTable {
    build_with(stage, join_same_column_sets)
}

/// `join_same_sets` joins the bands of the same-column-sets move and
/// returns the bands that the stage's other moves must start from. The
/// fast join returns one band per class it made: a stack, column or row
/// move maps bands of one such class into one class again (their images
/// differ by a relabelling inside B1's columns), so the other members'
/// edges add nothing. The reference returns every band.
pub(super) fn build_with(stage: Stage, join_same_sets: fn(&[Band], &mut UnionFind) -> Vec<usize>) -> ClassTable {
    let catalogue = catalogue::catalogue();
    let mut components = UnionFind::new(catalogue.len());
    let moves = Moves::of(stage);
    let leaders: Vec<usize> = if moves.same_column_sets {
        join_same_sets(&catalogue, &mut components)
    } else {
        (0..catalogue.len()).collect()
    };
    // A few hundred leaders find their moves' bands by binary search in
    // the sorted catalogue; for every band, a hash index pays for itself.
    let index: Option<FxHashMap<[u8; 27], u32>> = (leaders.len() > catalogue.len() / 64)
        .then(|| catalogue.iter().enumerate().map(|(i, band)| (*band.cells(), i as u32)).collect());
    let locate = |cells: &[u8; 27]| match &index {
        Some(index) => index[cells],
        None => catalogue
            .binary_search_by(|band| band.cells().cmp(cells))
            .expect("a moved band normalizes into the catalogue") as u32,
    };

    let mut join = |from: usize, moved: &[u8; 27]| {
        let target = locate(&normalize_cells(moved));
        components.union(from as u32, target);
    };
    for i in leaders {
        let cells = catalogue[i].cells();
        if moves.stacks {
            for_each_stack_generator(cells, |moved| join(i, moved));
        }
        if moves.columns {
            for_each_column_generator(cells, |moved| join(i, moved));
        }
        if moves.rows {
            for_each_row_generator(cells, |moved| join(i, moved));
        }
        if moves.rectangles {
            for_each_rectangle(cells, |moved| join(i, moved));
        }
        if moves.row_subsets {
            for_each_row_subset_swap(cells, |moved| join(i, moved));
        }
        if moves.column_swaps {
            for_each_column_swap(cells, |moved| join(i, moved));
        }
    }

    // The catalogue is sorted, so a component's least index is its representative.
    let mut class_of_root = HashMap::new();
    let mut classes: Vec<Class> = Vec::new();
    let mut class_of_index = Vec::with_capacity(catalogue.len());
    for (i, band) in catalogue.iter().enumerate() {
        let root = components.find(i as u32);
        let id = *class_of_root.entry(root).or_insert_with(|| {
            classes.push(Class { id: classes.len() as u32, representative: *band, size: 0 });
            classes.len() as u32 - 1
        });
        classes[id as usize].size += 1;
        class_of_index.push(id);
    }
    ClassTable { stage, catalogue, class_of_index, classes }
}

/// Adjacent transpositions of the three stacks generate every stack order.
fn for_each_stack_generator(cells: &[u8; 27], mut visit: impl FnMut(&[u8; 27])) {
    for (a, b) in [(0, 1), (1, 2)] {
        let mut moved = *cells;
        for i in 0..3 {
            swap_columns(&mut moved, a * 3 + i, b * 3 + i);
        }
        visit(&moved);
    }
}

/// Adjacent transpositions inside each block generate every column order.
fn for_each_column_generator(cells: &[u8; 27], mut visit: impl FnMut(&[u8; 27])) {
    for block in 0..3 {
        for (a, b) in [(0, 1), (1, 2)] {
            let mut moved = *cells;
            swap_columns(&mut moved, block * 3 + a, block * 3 + b);
            visit(&moved);
        }
    }
}

fn for_each_row_generator(cells: &[u8; 27], mut visit: impl FnMut(&[u8; 27])) {
    for (a, b) in [(0, 1), (1, 2)] {
        let mut moved = *cells;
        for c in 0..9 {
            moved.swap(a * 9 + c, b * 9 + c);
        }
        visit(&moved);
    }
}

/// Same column sets (Ed Russell). A valid band Y with the column sets of a
/// catalogue band X normalizes to a catalogue band Z exactly when Y is Z with
/// B2 and B3's columns reordered and its digits permuted inside each of B1's
/// columns ({1,4,7}, {2,5,8}, {3,6,9}: the only relabellings that keep B1's
/// column sets). So X and Z are joined exactly when the column sets of B2 and
/// B3 agree up to those 216 relabellings and the 72 column orders.
///
/// Bands with the same six sets up to column order are joined directly; the
/// keys are then joined by walking each orbit of three maps that generate
/// the 216 relabellings, about 360 orbits of at most 216 keys,
/// instead of minimizing over all 216 for each of about 29,000 keys. Returns
/// the first band of each orbit.
fn join_same_column_sets(catalogue: &[Band], components: &mut UnionFind) -> Vec<usize> {
    let generators: Vec<Vec<u16>> = b1_column_generators()
        .iter()
        .map(|map| (0u16..512).map(|set| relabel_mask(set << 1, map) >> 1).collect())
        .collect();
    let mut first_with_key: FxHashMap<u64, u32> = FxHashMap::default();
    let mut leaders = Vec::new();
    for (i, band) in catalogue.iter().enumerate() {
        let key = column_order_key(std::array::from_fn(|k| band.column_mask(3 + k) >> 1));
        let first = *first_with_key.entry(key).or_insert_with(|| {
            leaders.push(i);
            i as u32
        });
        components.union(first, i as u32);
    }
    // Each orbit of keys under the relabellings, explored once from its
    // first band through every key it reaches (also keys of no catalogue
    // band: an orbit can be connected only through them).
    let mut seen: FxHashSet<u64> = FxHashSet::default();
    let mut orbit_leaders = Vec::new();
    for &i in &leaders {
        let masks: [u16; 6] = std::array::from_fn(|k| catalogue[i].column_mask(3 + k) >> 1);
        if !seen.insert(column_order_key(masks)) {
            continue;
        }
        orbit_leaders.push(i);
        let mut stack = vec![masks];
        while let Some(masks) = stack.pop() {
            if let Some(&other) = first_with_key.get(&column_order_key(masks)) {
                components.union(i as u32, other);
            }
            for image in &generators {
                let moved = masks.map(|m| image[usize::from(m)]);
                if seen.insert(column_order_key(moved)) {
                    stack.push(moved);
                }
            }
        }
    }
    orbit_leaders
}

/// Three digit maps that generate the 216 relabellings keeping B1's column
/// sets, the group S3 x S3 x S3 on {1,4,7}, {2,5,8}, {3,6,9}, so that an
/// orbit walk tries 3 moves a key instead of 6. g and h act on every
/// column; column by column they are a generating pair of S3 of a different
/// kind (two transpositions; a transposition and a 3-cycle; a 3-cycle and a
/// transposition). Two maps cannot be enough: the signs of the three
/// columns' permutations are three independent bits. k, one transposition,
/// supplies the third (the test checks the 216).
fn b1_column_generators() -> [[u8; 10]; 3] {
    let identity: [u8; 10] = std::array::from_fn(|d| d as u8);
    let (mut g, mut h, mut k) = (identity, identity, identity);
    // Column {1,4,7}: the transpositions 1<->4 and 1<->7.
    g.swap(1, 4);
    h.swap(1, 7);
    // Column {2,5,8}: the transposition 2<->5 and the cycle 2->5->8->2.
    g.swap(2, 5);
    (h[2], h[5], h[8]) = (5, 8, 2);
    // Column {3,6,9}: the cycle 3->6->9->3 and the transposition 3<->6.
    (g[3], g[6], g[9]) = (6, 9, 3);
    h.swap(3, 6);
    k.swap(1, 4);
    [g, h, k]
}

/// The definition of the same-column-sets join, kept to test
/// [`join_same_column_sets`] against: bands whose least key over all 216
/// relabellings agree are one class.
fn join_same_column_sets_by_least_key(catalogue: &[Band], components: &mut UnionFind) -> Vec<usize> {
    // Each relabelling as a table from a 9-bit set (digits 1-9 as bits 0-8) to its image.
    let relabellings: Vec<Vec<u16>> = b1_column_relabellings()
        .iter()
        .map(|map| (0u16..512).map(|set| relabel_mask(set << 1, map) >> 1).collect())
        .collect();
    let mut first_with_key: HashMap<u64, u32> = HashMap::with_capacity(catalogue.len());
    for (i, band) in catalogue.iter().enumerate() {
        let masks: [usize; 6] = std::array::from_fn(|k| usize::from(band.column_mask(3 + k) >> 1));
        let key = relabellings
            .iter()
            .map(|image| column_order_key(masks.map(|m| image[m])))
            .min()
            .expect("there are 216 relabellings");
        let first = *first_with_key.entry(key).or_insert(i as u32);
        components.union(first, i as u32);
    }
    (0..catalogue.len()).collect()
}

/// The 216 digit maps that permute digits only inside {1,4,7}, {2,5,8}, {3,6,9}.
fn b1_column_relabellings() -> Vec<[u8; 10]> {
    const PERMUTATIONS: [[usize; 3]; 6] = [[0, 1, 2], [0, 2, 1], [1, 0, 2], [1, 2, 0], [2, 0, 1], [2, 1, 0]];
    let mut maps = Vec::with_capacity(216);
    for p in PERMUTATIONS {
        for q in PERMUTATIONS {
            for s in PERMUTATIONS {
                let mut map = [0u8; 10];
                for (column, perm) in [p, q, s].iter().enumerate() {
                    let digits = [column + 1, column + 4, column + 7];
                    for k in 0..3 {
                        map[digits[k]] = digits[perm[k]] as u8;
                    }
                }
                maps.push(map);
            }
        }
    }
    maps
}

fn relabel_mask(mask: u16, map: &[u8; 10]) -> u16 {
    (1..=9).filter(|&d| mask & 1 << d != 0).fold(0, |m, d| m | 1 << map[d])
}

/// A key for six column sets (B2's, then B3's, as 9-bit sets) that ignores
/// the order of the columns inside each block and the order of the two blocks.
fn column_order_key(masks: [u16; 6]) -> u64 {
    let mut b2 = [masks[0], masks[1], masks[2]];
    let mut b3 = [masks[3], masks[4], masks[5]];
    b2.sort_unstable();
    b3.sort_unstable();
    let (first, second) = if b2 <= b3 { (b2, b3) } else { (b3, b2) };
    first.iter().chain(&second).fold(0u64, |key, &m| key << 10 | u64::from(m))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The three generators reach all 216 relabellings, and nothing else.
    #[test]
    fn three_maps_generate_the_216_relabellings() {
        let generators = b1_column_generators();
        let compose = |a: &[u8; 10], b: &[u8; 10]| -> [u8; 10] { std::array::from_fn(|d| b[usize::from(a[d])]) };
        let identity: [u8; 10] = std::array::from_fn(|d| d as u8);
        let mut reached = std::collections::BTreeSet::from([identity]);
        let mut stack = vec![identity];
        while let Some(map) = stack.pop() {
            for generator in &generators {
                let next = compose(&map, generator);
                if reached.insert(next) {
                    stack.push(next);
                }
            }
        }
        let all: std::collections::BTreeSet<[u8; 10]> = b1_column_relabellings().into_iter().collect();
        assert_eq!(reached, all);
    }

    /// Walking orbits of six generators and moving orbit leaders only finds
    /// exactly the classes of the definition (least key over 216
    /// relabellings, every move from every band).
    #[test]
    fn russell_by_generators_equals_russell_by_definition() {
        let fast = build(Stage::Russell);
        let plain = build_with(Stage::Russell, join_same_column_sets_by_least_key);
        assert_eq!(fast.classes, plain.classes);
        assert_eq!(fast.class_of_index, plain.class_of_index);
    }
}
