//! The layer recurrence: F for every column-set class of the 2 x c shape at
//! once, built a row of the band at a time.
//!
//! The method is the one documented by the public repository
//! linche89/sudoku-enumeration (`docs/reports/og2/c6-standalone-research-prompt-20260905.md`,
//! read for its definitions; nothing here is copied from it). Boxes are c rows
//! x 2 columns (the transposed shape), so a band row has n = 2c *slots* (b, s):
//! box b, side s, bit `2b + s` of a mask.
//!
//! - After L rows of a band, digit d has an *occurrence mask*: the L slots it
//!   holds, at most one per box. A *state* is the multiset of the n masks
//!   (digit names forgotten): every slot lies in exactly L masks.
//! - The group G of box permutations and side swaps (|G| = 2^c c!) keeps the
//!   number of ways to finish a band, so a state is stored as its orbit under
//!   G, by a canonical representative, with the orbit total
//!   T_L(x) = m_x F_L(x) (m_x the orbit size, F_L the number of ordered
//!   decompositions of the digit-slot incidence graph into L perfect
//!   matchings, i.e. of ways to write the L rows).
//! - A new row gives each slot to one digit whose mask misses that slot's box:
//!   an *emission* picks, for each distinct mask u of multiplicity a_u, a set
//!   S_u of a_u slots, the sets partitioning the n slots. The child holds
//!   u + v for every v in S_u. Copies of a mask are not ordered, so the child
//!   is reached prod_w d_w! times over the labelled digits (d_w the
//!   multiplicities of the child's masks): T_(L+1)(can z) += T_L(x) prod_w d_w!.
//! - At L = c every mask has one slot per box: the state is a column-set class
//!   q of [`super::classes()`] (bit b of its c-bit *word* is the digit's side in
//!   box b). F(q) = T_c(q) / m_q, the class holds m_q ell_q tuples
//!   (ell_q = (2c)! / prod_u c_u! labellings of the digits), and the number of
//!   grids is the sum over q of m_q ell_q F(q)^2.
//!
//! Everything here is pure and single-threaded. [`emit`] expands one parent
//! state, so a caller can shard a layer's parents over cores or machines and
//! sum the children by key; [`next_layer`] is that loop on one core.

use std::cmp::Ordering;
use std::collections::HashMap;
use std::sync::atomic::{self, AtomicBool};

use num_bigint::BigUint;
use rustc_hash::FxBuildHasher;

use super::{ShapeError, check_c};

/// The most slots (and digits) a state has: 2 x 6.
pub const MAX_SLOTS: usize = 2 * super::MAX_C;

/// A state's masks, ascending in the first n = 2c entries, zero after. Bit
/// `2b + s` of a mask is slot (box b, side s).
pub type Masks = [u16; MAX_SLOTS];

/// Why the recurrence stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LayerError {
    /// A shape, layer or state that does not exist.
    Shape(ShapeError),
    /// The cancellation flag was set.
    Cancelled,
}

impl std::fmt::Display for LayerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LayerError::Shape(error) => error.fmt(f),
            LayerError::Cancelled => f.write_str("the layer recurrence was cancelled"),
        }
    }
}

impl std::error::Error for LayerError {}

impl From<ShapeError> for LayerError {
    fn from(error: ShapeError) -> LayerError {
        LayerError::Shape(error)
    }
}

/// One layer: every state (canonical masks) of L rows with its orbit total
/// T_L, sorted by masks so that shards and output are reproducible.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layer {
    c: usize,
    rows: usize,
    states: Vec<(Masks, u128)>,
    emissions: u64,
}

impl Layer {
    /// The shape's c.
    pub fn c(&self) -> usize {
        self.c
    }

    /// L, the number of band rows written (1..=c).
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// The states (canonical masks) and their orbit totals T_L.
    pub fn states(&self) -> &[(Masks, u128)] {
        &self.states
    }

    /// How many emissions built this layer from the one before (0 for the
    /// first layer).
    pub fn emissions(&self) -> u64 {
        self.emissions
    }

    /// Whether every digit has a slot in every box (L = c).
    pub fn is_complete(&self) -> bool {
        self.rows == self.c
    }

    /// Builds a layer from states summed elsewhere (a reduce step): the masks
    /// must be canonical, every state L rows deep, each key once.
    pub fn from_states(
        c: usize,
        rows: usize,
        mut states: Vec<(Masks, u128)>,
        emissions: u64,
    ) -> Result<Layer, ShapeError> {
        check_c(c)?;
        if rows == 0 || rows > c {
            return Err(ShapeError::BadSets { reason: format!("a layer of 2 x {c} has 1..={c} rows, not {rows}") });
        }
        states.sort_unstable_by_key(|state| state.0);
        for pair in states.windows(2) {
            if pair[0].0 == pair[1].0 {
                return Err(ShapeError::BadSets { reason: format!("state {:?} appears twice", pair[0].0) });
            }
        }
        for (masks, _) in &states {
            check_state(c, rows, masks)?;
            if canonical(c, masks).0 != *masks {
                return Err(ShapeError::BadSets { reason: format!("state {masks:?} is not canonical") });
            }
        }
        Ok(Layer { c, rows, states, emissions })
    }
}

/// The first layer: one state, every digit in one slot, T_1 = 1.
pub fn first_layer(c: usize) -> Result<Layer, ShapeError> {
    check_c(c)?;
    let mut masks = [0u16; MAX_SLOTS];
    for (v, mask) in masks.iter_mut().enumerate().take(2 * c) {
        *mask = 1 << v;
    }
    let masks = canonical(c, &masks).0;
    Ok(Layer { c, rows: 1, states: vec![(masks, 1)], emissions: 0 })
}

/// The next layer, by emitting every state's children on this thread. Checks
/// `cancel` between parents and every few thousand emissions.
pub fn next_layer(layer: &Layer, cancel: &AtomicBool) -> Result<Layer, LayerError> {
    if layer.is_complete() {
        return Err(
            ShapeError::BadSets { reason: format!("layer {} of 2 x {} is the last", layer.rows, layer.c) }.into()
        );
    }
    let mut sums: HashMap<Masks, u128, FxBuildHasher> = HashMap::default();
    let mut emissions = 0u64;
    for (masks, weight) in &layer.states {
        if cancel.load(atomic::Ordering::Relaxed) {
            return Err(LayerError::Cancelled);
        }
        emissions += emit(layer.c, masks, *weight, cancel, &mut |child, w| *sums.entry(child).or_insert(0) += w)?;
    }
    let mut states: Vec<_> = sums.into_iter().collect();
    states.sort_unstable_by_key(|state| state.0);
    Ok(Layer { c: layer.c, rows: layer.rows + 1, states, emissions })
}

/// Layers 1 to `to_rows`, each handed to `visit` as soon as it is built (the
/// caller prints or stores it); returns the last.
pub fn layers(
    c: usize,
    to_rows: usize,
    cancel: &AtomicBool,
    visit: &mut impl FnMut(&Layer),
) -> Result<Layer, LayerError> {
    let mut layer = first_layer(c)?;
    if to_rows == 0 || to_rows > c {
        return Err(ShapeError::BadSets { reason: format!("2 x {c} has layers 1..={c}, not {to_rows}") }.into());
    }
    visit(&layer);
    while layer.rows < to_rows {
        layer = next_layer(&layer, cancel)?;
        visit(&layer);
    }
    Ok(layer)
}

/// Calls `sink(child, weight x K)` for every emission of one parent state
/// (canonical children, K = prod_w d_w!) and returns the number of emissions.
/// A child reached twice is handed over twice: the caller sums by key.
/// Checks `cancel` every [`CANCEL_CHECK`] emissions (one parent of 2 x 6's
/// first layer has 59 million).
pub fn emit(
    c: usize,
    parent: &Masks,
    weight: u128,
    cancel: &AtomicBool,
    sink: &mut impl FnMut(Masks, u128),
) -> Result<u64, LayerError> {
    emit_raw(c, parent, cancel, Some(&mut |child: &Masks, k| sink(canonical(c, child).0, weight * k)))
}

/// How many emissions pass between two looks at the cancellation flag: a few
/// milliseconds' worth.
pub const CANCEL_CHECK: u64 = 4096;

/// The number of emissions of one parent state, without canonicalising the
/// children: how a layer's fan-out is measured or sampled cheaply.
pub fn emission_count(c: usize, parent: &Masks, cancel: &AtomicBool) -> Result<u64, LayerError> {
    emit_raw::<fn(&Masks, u128)>(c, parent, cancel, None)
}

/// Every emission's child (sorted masks, not canonical) and K = prod_w d_w!,
/// to `sink` if there is one (else only counted).
fn emit_raw<S: FnMut(&Masks, u128)>(
    c: usize,
    parent: &Masks,
    cancel: &AtomicBool,
    mut sink: Option<S>,
) -> Result<u64, LayerError> {
    let n = 2 * c;
    // Distinct masks and their multiplicities.
    let mut distinct = [0u16; MAX_SLOTS];
    let mut left = [0u8; MAX_SLOTS];
    let mut kinds = 0;
    for &mask in &parent[..n] {
        if kinds > 0 && distinct[kinds - 1] == mask {
            left[kinds - 1] += 1;
        } else {
            distinct[kinds] = mask;
            left[kinds] = 1;
            kinds += 1;
        }
    }
    let mut walk = Emission {
        c,
        distinct,
        boxes: [0; MAX_SLOTS],
        left,
        kinds,
        child: [0; MAX_SLOTS],
        count: 0,
        cancel,
        cancelled: false,
    };
    for (bx, &mask) in walk.boxes.iter_mut().zip(&distinct[..kinds]) {
        *bx = boxes_of(mask);
    }
    walk.slot(0, &mut sink);
    if walk.cancelled { Err(LayerError::Cancelled) } else { Ok(walk.count) }
}

struct Emission<'a> {
    c: usize,
    distinct: [u16; MAX_SLOTS],
    boxes: [u16; MAX_SLOTS],
    left: [u8; MAX_SLOTS],
    kinds: usize,
    child: Masks,
    count: u64,
    cancel: &'a AtomicBool,
    cancelled: bool,
}

impl Emission<'_> {
    /// Gives slot v (and then the slots after it) to each mask kind that
    /// still needs slots and misses v's box.
    fn slot<S: FnMut(&Masks, u128)>(&mut self, v: usize, sink: &mut Option<S>) {
        let n = 2 * self.c;
        if v == n {
            self.count += 1;
            if self.count.is_multiple_of(CANCEL_CHECK) && self.cancel.load(atomic::Ordering::Relaxed) {
                self.cancelled = true;
            }
            let Some(sink) = sink else { return };
            let mut child = self.child;
            child[..n].sort_unstable();
            let mut k = 1u128;
            let mut run = 1u128;
            for i in 1..n {
                if child[i] == child[i - 1] {
                    run += 1;
                    k *= run;
                } else {
                    run = 1;
                }
            }
            sink(&child, k);
            return;
        }
        let box_bit = 1u16 << (v & !1);
        for k in 0..self.kinds {
            if self.left[k] > 0 && self.boxes[k] & box_bit == 0 {
                self.left[k] -= 1;
                self.child[v] = self.distinct[k] | (1 << v);
                self.slot(v + 1, sink);
                self.left[k] += 1;
                if self.cancelled {
                    return;
                }
            }
        }
    }
}

/// The boxes a mask occupies, as the side-0 bit of each (bit 2b).
fn boxes_of(mask: u16) -> u16 {
    (mask | (mask >> 1)) & 0x555
}

/// Checks a state's shape: n masks, L slots each, at most one per box, every
/// slot in exactly L masks, ascending.
fn check_state(c: usize, rows: usize, masks: &Masks) -> Result<(), ShapeError> {
    let n = 2 * c;
    let bad = |reason: String| Err(ShapeError::BadSets { reason: format!("state {masks:?}: {reason}") });
    if masks[n..].iter().any(|&m| m != 0) || masks[..n].windows(2).any(|w| w[0] > w[1]) {
        return bad("masks not ascending or not zero past the 2c digits".into());
    }
    for &mask in &masks[..n] {
        if mask >> n != 0 || mask.count_ones() as usize != rows || boxes_of(mask).count_ones() as usize != rows {
            return bad(format!("mask {mask:#x} is not {rows} slots in distinct boxes"));
        }
    }
    for v in 0..n {
        if masks[..n].iter().filter(|&&m| (m >> v) & 1 == 1).count() != rows {
            return bad(format!("slot {v} is not in {rows} masks"));
        }
    }
    Ok(())
}

/// Fixed random numbers for the (shared slots, shared boxes) pairs, indexed
/// by `slots << 3 | boxes`.
const OVERLAP_COLOURS: [u64; 64] = {
    let mut table = [0u64; 64];
    let mut i = 0;
    while i < 64 {
        table[i] = mix(0x1234_5678_9abc_def0 ^ i as u64);
        i += 1;
    }
    table
};

/// A fixed 64-bit mixer (splitmix64's finaliser): colours here, the parts
/// of a layer in [`super::layer_jobs::partition_of`].
pub(super) const fn mix(x: u64) -> u64 {
    let x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    let x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// The canonical representative of a state's orbit under box permutations
/// and side swaps, and the order of its stabilizer in G.
///
/// Colours are refined from invariants (each digit's overlaps with the
/// others, then each slot's digits' colours, then once more), all computed
/// the same way for every member of the orbit. The transforms tried are the
/// ones that list boxes by ascending colour pair and put the lower-coloured
/// side first: all orders and sides among ties. That set is a coset of the
/// colour-preserving subgroup, which contains the stabilizer, so its minimum
/// image is the same for the whole orbit, and exactly |Stab| transforms reach it.
pub fn canonical(c: usize, masks: &Masks) -> (Masks, u64) {
    let n = 2 * c;
    let digits = &masks[..n];
    // A digit's first colour: how many digits share k of its slots and j of
    // its boxes, for every (k, j), as a sum of fixed random numbers.
    let mut boxes = [0u16; MAX_SLOTS];
    for (bx, &u) in boxes.iter_mut().zip(digits) {
        *bx = boxes_of(u);
    }
    let mut digit_colour = [0u64; MAX_SLOTS];
    for i in 0..n {
        for j in 0..n {
            let shared = ((digits[i] & digits[j]).count_ones() << 3) | (boxes[i] & boxes[j]).count_ones();
            digit_colour[i] = digit_colour[i].wrapping_add(OVERLAP_COLOURS[shared as usize]);
        }
    }
    let mut slot_base = [0u64; MAX_SLOTS];
    if digits[0].count_ones() == 2 {
        two_row_cycles(digits, &mut digit_colour, &mut slot_base);
    }
    let mut slot_colour = [0u64; MAX_SLOTS];
    let refine_slots = |digit_colour: &[u64; MAX_SLOTS], slot_colour: &mut [u64; MAX_SLOTS]| {
        *slot_colour = slot_base;
        for (&u, &d) in digits.iter().zip(digit_colour) {
            let mixed = mix(d ^ 0x5555);
            let mut bits = u;
            while bits != 0 {
                let v = bits.trailing_zeros() as usize;
                slot_colour[v] = slot_colour[v].wrapping_add(mixed);
                bits &= bits - 1;
            }
        }
    };
    refine_slots(&digit_colour, &mut slot_colour);
    // More rounds: a digit's colour learns its slots' colours, each with the
    // colour of the other side of its box, and the slots learn again.
    for _ in 0..REFINEMENTS {
        let mut seen = [0u64; MAX_SLOTS];
        for (v, s) in seen.iter_mut().enumerate().take(n) {
            *s = mix(slot_colour[v] ^ slot_colour[v ^ 1].rotate_left(17));
        }
        for (colour, &u) in digit_colour.iter_mut().zip(digits) {
            let mut acc = mix(*colour);
            let mut bits = u;
            while bits != 0 {
                acc = acc.wrapping_add(seen[bits.trailing_zeros() as usize]);
                bits &= bits - 1;
            }
            *colour = acc;
        }
        refine_slots(&digit_colour, &mut slot_colour);
    }

    // Box keys: the unordered pair of its sides' colours.
    let mut keys = [(0u64, 0u64); super::MAX_C];
    for (b, key) in keys.iter_mut().enumerate().take(c) {
        let (s0, s1) = (slot_colour[2 * b], slot_colour[2 * b + 1]);
        *key = (s0.min(s1), s0.max(s1));
    }
    let mut sorted = keys;
    sorted[..c].sort_unstable();
    if sorted[..c].windows(2).all(|w| w[0] < w[1]) && keys[..c].iter().all(|k| k.0 != k.1) {
        // One transform only (most states past the second row): no search.
        let mut image = [0u16; MAX_SLOTS];
        for (p, key) in sorted[..c].iter().enumerate() {
            let b = keys[..c].iter().position(|k| k == key).expect("a key of a box");
            let swap = slot_colour[2 * b] > slot_colour[2 * b + 1];
            let shift = 2 * (c - 1 - p);
            for (out, &u) in image.iter_mut().zip(digits) {
                let field = (u >> (2 * b)) & 3;
                let field = if swap { ((field & 1) << 1) | (field >> 1) } else { field };
                *out |= field << shift;
            }
        }
        image[..n].sort_unstable();
        return (image, 1);
    }
    let mut search = Search {
        c,
        digits,
        keys: &keys[..c],
        sorted: &sorted[..c],
        slot_colour: &slot_colour,
        path: [[0; MAX_SLOTS]; super::MAX_C],
        blocks: [[0; MAX_SLOTS]; super::MAX_C],
        best: [[0; MAX_SLOTS]; super::MAX_C],
        found: false,
        ties: 0,
    };
    search.place(0, 0);
    let mut best = search.best[c - 1];
    best[n..].fill(0);
    (best, search.ties)
}

/// After two rows each digit joins two slots, so the digits are the edges of
/// a graph on the slots in which every slot has degree 2: a union of cycles.
/// Colour refinement cannot tell a long cycle from two short ones, so each
/// digit's colour also gets the length of its cycle.
fn two_row_cycles(digits: &[u16], digit_colour: &mut [u64; MAX_SLOTS], slot_base: &mut [u64; MAX_SLOTS]) {
    let n = digits.len();
    // The two digits at each slot.
    let mut at = [[usize::MAX; 2]; MAX_SLOTS];
    for (i, &u) in digits.iter().enumerate() {
        let mut bits = u;
        while bits != 0 {
            let v = bits.trailing_zeros() as usize;
            let side = usize::from(at[v][0] != usize::MAX);
            at[v][side] = i;
            bits &= bits - 1;
        }
    }
    // Each digit's cycle length; each slot's cycle and place along it.
    let mut length = [0usize; MAX_SLOTS];
    let mut slot_cycle = [usize::MAX; MAX_SLOTS];
    let mut slot_place = [0usize; MAX_SLOTS];
    for start in 0..n {
        if length[start] != 0 {
            continue;
        }
        let mut members = [0usize; MAX_SLOTS];
        let mut count = 0;
        let (mut digit, mut slot) = (start, digits[start].trailing_zeros() as usize);
        loop {
            members[count] = digit;
            slot_cycle[slot] = start;
            slot_place[slot] = count;
            count += 1;
            // Leave `digit` by its other slot, then take the other digit there.
            slot = (digits[digit] & !(1 << slot)).trailing_zeros() as usize;
            digit = if at[slot][0] == digit { at[slot][1] } else { at[slot][0] };
            if digit == start {
                break;
            }
        }
        for &m in &members[..count] {
            length[m] = count;
        }
    }
    let cycle_length = |v: usize| length[slot_cycle[v]];
    for (colour, &l) in digit_colour.iter_mut().zip(&length[..n]) {
        *colour = colour.wrapping_add(mix(0xc0ff_ee00 + l as u64));
    }
    // A slot also knows how far along its cycle the other side of its box
    // is (or that it is on another cycle, and that cycle's length).
    for (v, base) in slot_base.iter_mut().enumerate().take(n) {
        let (l, partner) = (cycle_length(v), v ^ 1);
        let relation = if slot_cycle[partner] == slot_cycle[v] {
            let d = slot_place[v].abs_diff(slot_place[partner]);
            d.min(l - d)
        } else {
            100 + cycle_length(partner)
        };
        *base = mix(0xbeef_0000 + (l << 8 | relation) as u64);
    }
}

/// Rounds of colour refinement after the first: each costs about as much as
/// a few transforms, and saves many on states whose boxes look alike.
const REFINEMENTS: usize = 1;

/// The search for the least image over the allowed transforms.
///
/// Position p of the image takes one old box (its sides swapped or not), as
/// the field of bits 2(c - 1 - p), so position 0 is most significant. What is
/// minimised is the sequence of blocks, block p being the image's masks cut
/// to positions 0..=p, sorted: cutting keeps order, so block p is fixed once
/// positions 0..=p are, and a branch whose block exceeds the best one's is
/// dropped. The last block is the sorted image itself.
struct Search<'a> {
    c: usize,
    digits: &'a [u16],
    keys: &'a [(u64, u64)],
    sorted: &'a [(u64, u64)],
    slot_colour: &'a [u64; MAX_SLOTS],
    /// The branch being walked: each digit's image cut to positions 0..=p,
    /// in digit order, and the same sorted (block p).
    path: [[u16; MAX_SLOTS]; super::MAX_C],
    blocks: [[u16; MAX_SLOTS]; super::MAX_C],
    best: [[u16; MAX_SLOTS]; super::MAX_C],
    found: bool,
    ties: u64,
}

impl Search<'_> {
    /// Chooses position p (positions 0..p are chosen).
    fn place(&mut self, p: usize, used: u32) {
        let n = self.digits.len();
        for b in 0..self.c {
            if used & (1 << b) != 0 || self.keys[b] != self.sorted[p] {
                continue;
            }
            let (s0, s1) = (self.slot_colour[2 * b], self.slot_colour[2 * b + 1]);
            for swap in [false, true] {
                if s0 != s1 && swap != (s0 > s1) {
                    continue;
                }
                // Digit i's image cut to positions 0..=p, in digit order.
                let mut cut = [0u16; MAX_SLOTS];
                for (i, &u) in self.digits.iter().enumerate() {
                    let mut field = (u >> (2 * b)) & 3;
                    if swap {
                        field = ((field & 1) << 1) | (field >> 1);
                    }
                    let before = if p == 0 { 0 } else { self.path[p - 1][i] };
                    cut[i] = (before << 2) | field;
                }
                let mut block = cut;
                block[..n].sort_unstable();
                self.blocks[p] = block;
                // Compared with the best as it is now (a deeper branch may
                // have replaced it since this branch's prefix was checked).
                let order = if self.found { self.blocks[..=p].cmp(&self.best[..=p]) } else { Ordering::Less };
                if order == Ordering::Greater {
                    continue;
                }
                self.path[p] = cut;
                if p + 1 == self.c {
                    if order == Ordering::Less {
                        self.best = self.blocks;
                        self.found = true;
                        self.ties = 1;
                    } else {
                        self.ties += 1;
                    }
                } else {
                    self.place(p + 1, used | (1 << b));
                }
            }
        }
    }
}

/// The order of G = (side swaps) x (box permutations): 2^c c!.
pub fn group_order(c: usize) -> u64 {
    (1..=c as u64).product::<u64>() << c
}

/// A complete mask's c-bit word: bit b is the digit's side in box b.
pub fn word_of(c: usize, mask: u16) -> u16 {
    (0..c).map(|b| ((mask >> (2 * b + 1)) & 1) << b).sum()
}

/// The complete mask of a c-bit word (slot 2b + bit b of the word).
pub fn mask_of_word(c: usize, word: u16) -> u16 {
    (0..c).map(|b| 1u16 << (2 * b + ((word >> b) & 1) as usize)).sum()
}

/// The canonical complete state of a class given by its 2c words (in any
/// order), checked: every box side holds c digits.
pub fn class_state(c: usize, words: &[u16]) -> Result<Masks, ShapeError> {
    check_c(c)?;
    if words.len() != 2 * c || words.iter().any(|&w| w >> c != 0) {
        return Err(ShapeError::BadSets { reason: format!("{words:?} is not {} words of {c} bits", 2 * c) });
    }
    let mut masks = [0u16; MAX_SLOTS];
    for (mask, &word) in masks.iter_mut().zip(words) {
        *mask = mask_of_word(c, word);
    }
    masks[..2 * c].sort_unstable();
    check_state(c, c, &masks)?;
    Ok(canonical(c, &masks).0)
}

/// One complete class out of the last layer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LayerClass {
    /// The canonical complete state.
    pub masks: Masks,
    /// The order of its stabilizer in G.
    pub stabilizer: u64,
    /// m = |G| / stabilizer: the states in its orbit.
    pub orbit: u64,
    /// ell = (2c)! / prod_u c_u!: the labellings of the digits.
    pub labellings: u128,
    /// F: the number of bands with these column sets.
    pub bands: u128,
}

/// A complete state's stabilizer order, orbit m and F = T / m from its
/// orbit total T, checked integral.
pub fn bands_of_class(c: usize, masks: &Masks, total: u128) -> Result<(u64, u64, u128), ShapeError> {
    let (_, stabilizer) = canonical(c, masks);
    let orbit = group_order(c) / stabilizer;
    if !total.is_multiple_of(u128::from(orbit)) {
        return Err(ShapeError::BadResults {
            reason: format!("T = {total} of class {masks:?} is not a multiple of its orbit {orbit}"),
        });
    }
    Ok((stabilizer, orbit, total / u128::from(orbit)))
}

/// The classes of a complete layer, with F = T / m (checked integral), and
/// the number of grids, the sum of m ell F^2.
pub fn finish(layer: &Layer) -> Result<(Vec<LayerClass>, BigUint), ShapeError> {
    if !layer.is_complete() {
        return Err(ShapeError::BadResults {
            reason: format!("layer {} of 2 x {} is not complete", layer.rows, layer.c),
        });
    }
    let n = 2 * layer.c;
    let factorial = |m: usize| (1..=m as u128).product::<u128>();
    let mut classes = Vec::with_capacity(layer.states.len());
    let mut grids = BigUint::default();
    for &(masks, total) in &layer.states {
        let (stabilizer, orbit, bands) = bands_of_class(layer.c, &masks, total)?;
        let labellings = masks[..n].chunk_by(|a, b| a == b).fold(factorial(n), |l, run| l / factorial(run.len()));
        grids += BigUint::from(bands) * bands * labellings * orbit;
        classes.push(LayerClass { masks, stabilizer, orbit, labellings, bands });
    }
    Ok((classes, grids))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn next(layer: &Layer) -> Layer {
        next_layer(layer, &AtomicBool::new(false)).unwrap()
    }

    /// A random element of G applied to a state (sorted again).
    fn transform(c: usize, masks: &Masks, seed: &mut u64) -> Masks {
        let mut random = |m: u64| {
            *seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            (*seed >> 33) % m
        };
        let mut perm: Vec<usize> = (0..c).collect();
        for i in (1..c).rev() {
            perm.swap(i, random(i as u64 + 1) as usize);
        }
        let swaps: Vec<bool> = (0..c).map(|_| random(2) == 1).collect();
        let mut out = [0u16; MAX_SLOTS];
        for (o, &u) in out.iter_mut().zip(&masks[..2 * c]) {
            for b in 0..c {
                for s in 0..2 {
                    if (u >> (2 * b + s)) & 1 == 1 {
                        *o |= 1 << (2 * perm[b] + (s ^ usize::from(swaps[b])));
                    }
                }
            }
        }
        out[..2 * c].sort_unstable();
        out
    }

    #[test]
    fn canonical_form_ignores_box_order_and_sides() {
        let mut seed = 7;
        for c in 2..=4 {
            let mut layer = first_layer(c).unwrap();
            while !layer.is_complete() {
                layer = next(&layer);
                for (masks, _) in layer.states().iter().step_by(3) {
                    let (canon, stabilizer) = canonical(c, masks);
                    assert_eq!(canon, *masks);
                    for _ in 0..4 {
                        let moved = transform(c, masks, &mut seed);
                        assert_eq!(canonical(c, &moved), (canon, stabilizer), "c = {c}, {masks:?} -> {moved:?}");
                    }
                }
            }
        }
    }

    /// The stabilizer by brute force over all of G, for the 2 x 3 states.
    #[test]
    fn stabilizer_is_counted_over_the_whole_group() {
        let c = 3;
        let mut layer = first_layer(c).unwrap();
        loop {
            for (masks, _) in layer.states() {
                let mut fixed = 0;
                for perm in [[0, 1, 2], [0, 2, 1], [1, 0, 2], [1, 2, 0], [2, 0, 1], [2, 1, 0]] {
                    for swaps in 0..8u16 {
                        let mut image = [0u16; MAX_SLOTS];
                        for (o, &u) in image.iter_mut().zip(&masks[..6]) {
                            for (b, &to) in perm.iter().enumerate() {
                                for s in 0..2 {
                                    if (u >> (2 * b + s)) & 1 == 1 {
                                        *o |= 1 << (2 * to + (s ^ usize::from((swaps >> b) & 1)));
                                    }
                                }
                            }
                        }
                        image[..6].sort_unstable();
                        fixed += u64::from(image == *masks);
                    }
                }
                assert_eq!(canonical(c, masks).1, fixed, "{masks:?}");
            }
            if layer.is_complete() {
                break;
            }
            layer = next(&layer);
        }
    }

    #[test]
    fn cancelled_before_the_first_parent() {
        let layer = first_layer(4).unwrap();
        assert_eq!(next_layer(&layer, &AtomicBool::new(true)), Err(LayerError::Cancelled));
    }

    /// The flag is seen inside one parent's emissions, after at most
    /// CANCEL_CHECK of them (the 4,752 of 2 x 4's first layer).
    #[test]
    fn cancelled_within_a_parent() {
        let parent = first_layer(4).unwrap().states()[0].0;
        let (cancel, mut seen) = (AtomicBool::new(false), 0u64);
        let result = emit(4, &parent, 1, &cancel, &mut |_, _| {
            seen += 1;
            cancel.store(true, atomic::Ordering::Relaxed);
        });
        assert_eq!(result, Err(LayerError::Cancelled));
        assert_eq!(seen, CANCEL_CHECK);
        assert_eq!(emission_count(4, &parent, &AtomicBool::new(false)), Ok(4752));
    }

    #[test]
    fn words_and_masks_round_trip() {
        for word in 0..64u16 {
            assert_eq!(word_of(6, mask_of_word(6, word)), word);
        }
        assert!(class_state(2, &[0, 0, 3]).is_err());
        assert!(class_state(2, &[0, 0, 0, 3]).is_err(), "box 0 side 0 holds three digits");
    }

    #[test]
    fn from_states_refuses_what_a_layer_cannot_hold() {
        let layer = next(&first_layer(3).unwrap());
        let mut states = layer.states().to_vec();
        assert_eq!(Layer::from_states(3, 2, states.clone(), layer.emissions()).unwrap(), layer);
        states.push(states[0]);
        assert!(Layer::from_states(3, 2, states.clone(), 0).is_err(), "a key twice");
        states.pop();
        assert!(Layer::from_states(3, 3, states.clone(), 0).is_err(), "wrong depth");
        let mut moved = states[0].0;
        moved[..6].reverse();
        states[0].0 = moved;
        assert!(Layer::from_states(3, 2, states, 0).is_err(), "not ascending");
    }
}
