//! G of a group of top bands that share their first r - 1 stacks digit for
//! digit, counted together on one [`StackPairTable`].
//!
//! The choices of the first two stacks (halved by the middle / bottom swap)
//! are the outer loop; each is renamed once to its two nodes. For r = 2 and
//! 3 the node rows are the rows a term reads, summed row by row. For r = 4
//! the rows of the third stack's choices are read a few at a time into
//! blocks, and the members' terms are dense products of blocks
//! ([`super::blocks`]); the choices are taken up to the relabellings that
//! keep the group's first three stacks ([`super::symmetry`]), so the rows
//! are read once for each orbit of choices, and the terms of each of its
//! choices are the members' terms moved.

use std::sync::atomic::{AtomicBool, Ordering};

use super::blocks::{self, Blocks, WIDTH};
use super::values::{CAPACITY, Known};
use super::{Perm, ROW_ORDERS, Renamer, StackPairTable, row_sum, stack_choices, symmetry};
use crate::three_bands::{MAX_R, Pattern, ThreeBandError};

/// One choice of the middle band's columns in a stack: the middle band's
/// split, the bottom band's, and whether the middle's columns come first.
type Choice = (u16, u16, bool);

/// The choices a group's count runs over.
struct Group {
    r: usize,
    /// The first member's top band: each digit's columns.
    top: Vec<[u8; MAX_R]>,
    /// The choices of each of the first r - 1 stacks (the same for every member).
    shared: Vec<Vec<Choice>>,
    /// Per member, the choices of its last stack.
    last: Vec<Vec<Choice>>,
    /// The last stack's splits some member meets, in the middle band and
    /// in the bottom band, ascending.
    met_m: Vec<u16>,
    met_l: Vec<u16>,
}

/// A choice of the first two stacks, renamed: the middle and bottom bands'
/// nodes and the relabellings that take their first two stacks there.
struct FirstTwo {
    node_m: usize,
    node_l: usize,
    perm_m: Perm,
    perm_l: Perm,
}

impl StackPairTable {
    /// G of each pattern of a group whose top bands share the first r - 1
    /// stacks digit for digit ([`StackPairTable::completions_of_many`]), or
    /// part `part` of `parts` of it ([`StackPairTable::completions_in_part`]).
    pub(super) fn completions_of_group(
        &self,
        patterns: &[Pattern],
        part: usize,
        parts: usize,
        cancel: &AtomicBool,
    ) -> Result<Vec<u128>, ThreeBandError> {
        let r = self.r;
        if let Some(other) = patterns.iter().find(|p| p.r() != r) {
            return Err(ThreeBandError::UnsupportedShape { r: other.r() });
        }
        if r == 2 && patterns.len() > 1 {
            // Two stacks: the members differ in the stack the pairs are made of.
            let mut out = Vec::with_capacity(patterns.len());
            for pattern in patterns {
                out.push(self.completions_of_group(std::slice::from_ref(pattern), part, parts, cancel)?[0]);
            }
            return Ok(out);
        }
        let group = self.group(patterns)?;
        let firsts = || self.first_two(&group).into_iter().skip(part).step_by(parts);
        let totals = match r {
            2 => self.sum_two_stacks(firsts(), cancel)?,
            3 => self.sum_by_rows(&group, firsts(), cancel)?,
            _ => self.sum_by_blocks(&group, part, parts, cancel)?,
        };
        // The table holds b / r!, and each term stands for itself and its swap.
        let rows_ordered = u128::from(ROW_ORDERS[r]).pow(2);
        Ok(totals.into_iter().map(|total| 2 * rows_ordered * total).collect())
    }

    /// The choices of each stack, after checking that the patterns share
    /// their first r - 1 stacks.
    fn group(&self, patterns: &[Pattern]) -> Result<Group, ThreeBandError> {
        let r = self.r;
        let tops: Vec<Vec<[u8; MAX_R]>> = patterns.iter().map(Pattern::digit_vectors).collect();
        for (pattern, top) in patterns.iter().zip(&tops) {
            if top.iter().zip(&tops[0]).any(|(a, b)| a[..r - 1] != b[..r - 1]) {
                return Err(ThreeBandError::BadPattern {
                    text: pattern.key(),
                    reason: format!("does not share its first {} stacks with {}", r - 1, patterns[0].key()),
                });
            }
        }
        let stack_of = |top: &[[u8; MAX_R]], s: usize| -> Vec<Choice> {
            let column: Vec<u8> = top.iter().map(|v| v[s]).collect();
            stack_choices(r, &column, &self.splits)
        };
        let shared: Vec<Vec<Choice>> = (0..r - 1).map(|s| stack_of(&tops[0], s)).collect();
        let last: Vec<Vec<Choice>> = tops.iter().map(|top| stack_of(top, r - 1)).collect();
        let k = self.splits.count();
        let (mut met_m, mut met_l) = (vec![false; k], vec![false; k]);
        for &(m, l, _) in last.iter().flatten() {
            met_m[usize::from(m)] = true;
            met_l[usize::from(l)] = true;
        }
        let met = |flags: &[bool]| -> Vec<u16> { (0..k as u16).filter(|&x| flags[usize::from(x)]).collect() };
        Ok(Group { r, top: tops[0].clone(), met_m: met(&met_m), met_l: met(&met_l), shared, last })
    }

    /// The choices of the first two stacks whose middle columns come first
    /// in the first stack (the others are their swaps), renamed, ordered by
    /// the nodes of the middle and bottom bands: consecutive choices then
    /// read the same two node slabs of the table (2 x 133 MB for r = 4)
    /// instead of all nine (1.2 GB). For r = 2 the second stack is the last
    /// (a group of one).
    fn first_two(&self, group: &Group) -> Vec<FirstTwo> {
        let second = if group.r == 2 { &group.last[0] } else { &group.shared[1] };
        let mut firsts = Vec::with_capacity(group.shared[0].len() * second.len() / 2);
        for &(m0, l0, first) in &group.shared[0] {
            if !first {
                continue;
            }
            for &(m1, l1, _) in second {
                firsts.push(self.renamed((m0, l0), (m1, l1)));
            }
        }
        firsts.sort_unstable_by_key(|first| (first.node_m, first.node_l));
        firsts
    }

    /// A choice of the first two stacks (middle and bottom splits of each), renamed.
    fn renamed(&self, (m0, l0): (u16, u16), (m1, l1): (u16, u16)) -> FirstTwo {
        let (node_m, perm_m) = self.splits.renaming(m0, m1);
        let (node_l, perm_l) = self.splits.renaming(l0, l1);
        FirstTwo { node_m, node_l, perm_m, perm_l }
    }

    /// r = 2: a term is the two node rows' one value each.
    fn sum_two_stacks(
        &self,
        firsts: impl Iterator<Item = FirstTwo>,
        cancel: &AtomicBool,
    ) -> Result<Vec<u128>, ThreeBandError> {
        let (mut total, mut known) = (0u128, Known::new());
        for first in firsts {
            if cancel.load(Ordering::Relaxed) {
                return Err(ThreeBandError::Cancelled);
            }
            let (b_m, b_l) = (self.row(first.node_m, cancel)?[0], self.row(first.node_l, cancel)?[0]);
            self.values.update(&mut known);
            let value = |number: u16| u64::from(known.values()[usize::from(number)]);
            total += u128::from(value(b_m) * value(b_l));
        }
        Ok(vec![total])
    }

    /// r = 3: the node rows hold b for every split of the last stack; each
    /// member reads them at its renamed choices.
    fn sum_by_rows(
        &self,
        group: &Group,
        firsts: impl Iterator<Item = FirstTwo>,
        cancel: &AtomicBool,
    ) -> Result<Vec<u128>, ThreeBandError> {
        let k = self.splits.count();
        let (mut last_m, mut last_l) = (vec![0u16; k], vec![0u16; k]);
        // Per member, its last stack's choices as index pairs into the two
        // rows a term reads: the middle band's renamed split in the low 16
        // bits, the bottom band's in the high (one load a term).
        let width = group.last[0].len();
        let mut reads = vec![0u32; group.last.len() * width];
        let mut totals = vec![0u128; group.last.len()];
        let mut known = Known::new();
        for first in firsts {
            if cancel.load(Ordering::Relaxed) {
                return Err(ThreeBandError::Cancelled);
            }
            let (rename_m, rename_l) = (self.splits.renamer(&first.perm_m), self.splits.renamer(&first.perm_l));
            for &y in &group.met_m {
                last_m[usize::from(y)] = rename_m.apply(y);
            }
            for &y in &group.met_l {
                last_l[usize::from(y)] = rename_l.apply(y);
            }
            for (member_reads, choices) in reads.chunks_exact_mut(width).zip(&group.last) {
                for (read, &(m, l, _)) in member_reads.iter_mut().zip(choices) {
                    *read = u32::from(last_m[usize::from(m)]) | u32::from(last_l[usize::from(l)]) << 16;
                }
            }
            let (row_m, row_l) = (self.row(first.node_m, cancel)?, self.row(first.node_l, cancel)?);
            self.values.update(&mut known);
            let value = |number: &u16| known.values()[usize::from(*number)];
            let (row_m, row_l): (Vec<u32>, Vec<u32>) =
                (row_m.iter().map(value).collect(), row_l.iter().map(value).collect());
            for (total, member_reads) in totals.iter_mut().zip(reads.chunks_exact(width)) {
                *total += u128::from(row_sum(&row_m, &row_l, member_reads));
            }
        }
        Ok(totals)
    }

    /// r = 4: the choices of the first two stacks up to the group's
    /// symmetries ([`symmetry`]): for each orbit's standing choice, the
    /// rows of the third stack's choices are read [`WIDTH`] at a time into
    /// blocks, one block per last-stack split the members or their images
    /// meet, and the terms of each choice of the orbit are the products of
    /// the members' pairs of blocks, moved by its relabelling.
    fn sum_by_blocks(
        &self,
        group: &Group,
        part: usize,
        parts: usize,
        cancel: &AtomicBool,
    ) -> Result<Vec<u128>, ThreeBandError> {
        let k = self.splits.count();
        let generators = symmetry::symmetries(&group.top, group.r - 1);
        let first_flags: Vec<bool> = group.shared[0].iter().map(|&(_, _, first)| first).collect();
        let mut orbits: Vec<(FirstTwo, Vec<Perm>)> = symmetry::orbits(group.r, &group.top, &first_flags, &generators)
            .into_iter()
            .skip(part)
            .step_by(parts)
            .map(|orbit| {
                let (m0, l0, _) = group.shared[0][orbit.first];
                let (m1, l1, _) = group.shared[1][orbit.second];
                (self.renamed((m0, l0), (m1, l1)), orbit.images)
            })
            .collect();
        // Consecutive choices then read the same two node slabs of the
        // table (2 x 133 MB) instead of all nine (1.2 GB).
        orbits.sort_unstable_by_key(|(first, _)| (first.node_m, first.node_l));
        // Blocks are kept for every split a relabelled member meets.
        let closed_m = symmetry::closure(&self.splits, &group.met_m, &generators);
        let closed_l = symmetry::closure(&self.splits, &group.met_l, &generators);
        let mut terms = TermsOf::new(group, &closed_m, &closed_l, &self.splits);
        let third = &group.shared[2];
        let mut sums = blocks::sums();
        let mut known = Known::new();
        let (mut middle, mut bottom) = (Side::new(k, &closed_m), Side::new(k, &closed_l));
        let (mut by_split, missing) = (vec![0u16; k], vec![blocks::ZERO; k]);
        let mut totals = vec![0u128; group.last.len()];
        for (first, images) in &orbits {
            if cancel.load(Ordering::Relaxed) {
                return Err(ThreeBandError::Cancelled);
            }
            let (rename_m, rename_l) = (self.splits.renamer(&first.perm_m), self.splits.renamer(&first.perm_l));
            middle.rename(&closed_m, &rename_m, &mut by_split);
            bottom.rename(&closed_l, &rename_l, &mut by_split);
            let x_m: Vec<u16> = third.iter().map(|&(m, _, _)| rename_m.apply(m)).collect();
            let x_l: Vec<u16> = third.iter().map(|&(_, l, _)| rename_l.apply(l)).collect();
            for batch in terms.batches(images) {
                let batch = terms.of(batch);
                for (x_m, x_l) in x_m.chunks(WIDTH).zip(x_l.chunks(WIDTH)) {
                    let (mut rows_m, mut rows_l) = ([missing.as_slice(); WIDTH], [missing.as_slice(); WIDTH]);
                    for (i, (&row_m, &row_l)) in x_m.iter().zip(x_l).enumerate() {
                        rows_m[i] = self.row(self.row_of(first.node_m, row_m), cancel)?;
                        rows_l[i] = self.row(self.row_of(first.node_l, row_l), cancel)?;
                    }
                    self.values.update(&mut known);
                    middle.read(&rows_m, known.values());
                    bottom.read(&rows_l, known.values());
                    for terms in &batch {
                        blocks::term_sums(&middle.blocks, &bottom.blocks, terms, &mut sums);
                    }
                }
            }
            for (total, member) in totals.iter_mut().zip(sums.iter_mut()) {
                *total += member.0.iter().map(|&lane| u128::from(lane)).sum::<u128>();
                member.0 = [0; WIDTH];
            }
        }
        Ok(totals)
    }
}

/// The terms of a group's members relabelled by the elements of orbits
/// ([`StackPairTable::sum_by_blocks`]): made once for each relabelling and
/// kept while they fit [`TermsOf::KEEP`], made again each time past it.
struct TermsOf<'a> {
    splits: &'a super::Splits,
    /// Per member, its last stack's choices as positions in the met lists.
    pairs: Vec<Vec<(u16, u16)>>,
    met_m: &'a [u16],
    met_l: &'a [u16],
    /// Each split's position in the blocks (among the closed lists), or
    /// [`UNMET`].
    at_m: Vec<u16>,
    at_l: Vec<u16>,
    tile_m: usize,
    tile_l: usize,
    /// The terms made so far, by relabelling, and their size in bytes.
    kept: std::collections::HashMap<Perm, blocks::Terms>,
    kept_bytes: usize,
    /// The bytes of one relabelling's terms.
    bytes: usize,
}

impl<'a> TermsOf<'a> {
    /// Terms kept across orbits, in bytes.
    const KEEP: usize = 64 << 20;
    /// Terms of one batch of an orbit's elements (the blocks are read
    /// again for each batch), in bytes.
    const BATCH: usize = 16 << 20;

    fn new(group: &'a Group, closed_m: &[u16], closed_l: &[u16], splits: &'a super::Splits) -> TermsOf<'a> {
        let k = splits.count();
        let positions = |list: &[u16]| -> Vec<u16> {
            let mut at = vec![UNMET; k];
            for (p, &y) in list.iter().enumerate() {
                at[usize::from(y)] = p as u16;
            }
            at
        };
        let (met_at_m, met_at_l) = (positions(&group.met_m), positions(&group.met_l));
        let pairs: Vec<Vec<(u16, u16)>> = group
            .last
            .iter()
            .map(|choices| {
                choices.iter().map(|&(m, l, _)| (met_at_m[usize::from(m)], met_at_l[usize::from(l)])).collect()
            })
            .collect();
        let bytes = 4 * pairs.iter().map(Vec::len).sum::<usize>() + 64;
        // A tile's blocks, half of each band's, fit in the second-level
        // cache with the terms streaming past.
        let tile = |list: &[u16]| list.len().div_ceil(TILES);
        TermsOf {
            splits,
            pairs,
            met_m: &group.met_m,
            met_l: &group.met_l,
            at_m: positions(closed_m),
            at_l: positions(closed_l),
            tile_m: tile(closed_m),
            tile_l: tile(closed_l),
            kept: std::collections::HashMap::new(),
            kept_bytes: 0,
            bytes,
        }
    }

    /// The orbit's elements in batches of [`TermsOf::BATCH`] bytes of terms.
    fn batches<'b>(&self, images: &'b [Perm]) -> std::slice::Chunks<'b, Perm> {
        images.chunks((Self::BATCH / self.bytes).max(1))
    }

    /// The terms of each relabelling of `batch`: a member's choice (y_m,
    /// y_l) relabelled by σ⁻¹, at the positions of its blocks.
    fn of(&mut self, batch: &[Perm]) -> Vec<std::borrow::Cow<'_, blocks::Terms>> {
        let mut made: Vec<Option<blocks::Terms>> = Vec::with_capacity(batch.len());
        for sigma in batch {
            if self.kept.contains_key(sigma) {
                made.push(None);
                continue;
            }
            let terms = self.make(sigma);
            if self.kept_bytes + self.bytes <= Self::KEEP {
                self.kept.insert(*sigma, terms);
                self.kept_bytes += self.bytes;
                made.push(None);
            } else {
                made.push(Some(terms));
            }
        }
        batch
            .iter()
            .zip(made)
            .map(|(sigma, made)| match made {
                Some(terms) => std::borrow::Cow::Owned(terms),
                None => std::borrow::Cow::Borrowed(&self.kept[sigma]),
            })
            .collect()
    }

    fn make(&self, sigma: &Perm) -> blocks::Terms {
        let back = self.splits.renamer(&symmetry::inverse(sigma, self.splits.n));
        let moved =
            |met: &[u16], at: &[u16]| -> Vec<u16> { met.iter().map(|&y| at[usize::from(back.apply(y))]).collect() };
        let (to_m, to_l) = (moved(self.met_m, &self.at_m), moved(self.met_l, &self.at_l));
        blocks::Terms::tiled(
            &self.pairs,
            |(m, l)| (to_m[usize::from(m)], to_l[usize::from(l)]),
            self.tile_m,
            self.tile_l,
        )
    }
}

/// Where the blocks of the splits no member meets are written: past every
/// position a term reads (positions are below 2^14, [`blocks::Terms`]).
const UNMET: u16 = u16::MAX;

/// The slices of the positions of each band that the terms are tiled by
/// ([`blocks::Terms::tiled`]): a tile's blocks, half of each band's, fit in
/// the second-level cache with the terms streaming past.
const TILES: usize = 2;

/// The blocks of one band (middle or bottom) in [`StackPairTable::sum_by_blocks`].
///
/// A position's block is at the position: when the group meets most of the
/// last stack's splits, the rows are transposed whole, each renamed split's
/// block written at its position (the others' at [`UNMET`]); when it meets
/// few, only their values are gathered.
struct Side {
    /// Whether the rows are transposed whole.
    whole: bool,
    /// Each renamed split's position, or [`UNMET`], when transposed whole.
    place: Vec<u16>,
    /// The met splits' renamed splits with their positions, ascending in
    /// the renamed split (so rows are read front to back), when gathered.
    order: Vec<(u16, u16)>,
    blocks: Box<Blocks>,
}

impl Side {
    fn new(k: usize, met: &[u16]) -> Side {
        // Positions are 16 bits.
        assert!(met.len() <= 1 << 16, "more than 2^16 splits met");
        // Gathering a split costs more than transposing one, but below half
        // of them it does less work: a run of ten small groups (jobs
        // 144,384 on) took 0.91 x the time with this bound as with a
        // quarter; runs of larger groups transpose whole either way.
        Side { whole: 2 * met.len() >= k, place: vec![UNMET; k], order: Vec::new(), blocks: blocks::blocks() }
    }

    /// Follows a choice's renaming: where each position's block is, or
    /// the order in which to gather them. `by_split` is all 0, and left so.
    fn rename(&mut self, met: &[u16], rename: &Renamer<'_>, by_split: &mut [u16]) {
        if self.whole {
            self.place.fill(UNMET);
            for (p, &y) in met.iter().enumerate() {
                self.place[usize::from(rename.apply(y))] = p as u16;
            }
            return;
        }
        for (p, &y) in met.iter().enumerate() {
            by_split[usize::from(rename.apply(y))] = p as u16 + 1;
        }
        self.order.clear();
        for (y, slot) in by_split.iter_mut().enumerate() {
            if *slot != 0 {
                self.order.push((y as u16, *slot - 1));
                *slot = 0;
            }
        }
    }

    /// The blocks of these rows.
    fn read(&mut self, rows: &[&[u16]; WIDTH], values: &[u32; CAPACITY]) {
        if self.whole {
            let place = &self.place;
            blocks::transpose_to(rows, values, |y| usize::from(place[y]), &mut self.blocks);
        } else {
            blocks::gather(rows, values, &self.order, &mut self.blocks);
        }
    }
}
