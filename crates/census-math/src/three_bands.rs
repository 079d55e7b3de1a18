//! Grids with boxes of r rows x 3 columns (side n = 3r, r = 2, 3, 4) by
//! three bands: the plan of Felgenhauer and Jarvis one size up, as
//! Pettersen and Silver counted 4 x 3 boxes (`/work/shared/twelve.md`).
//!
//! The grid is three bands of r rows (r boxes side by side) and r stacks of
//! 3 columns. In a band every box holds the n digits once, so the three
//! columns of a stack split the digits into three r-sets: a band's *column
//! sets*. Down one stack every digit takes one column in each band, a
//! permutation of the three. So:
//!
//! - a band's count given its column sets, b, is the number of ways to
//!   order each column so every row holds the n digits (the ordered
//!   decompositions of an r-regular bipartite graph, columns to digits, into
//!   r perfect matchings);
//! - given the top band's column sets T, the middle band's M puts each digit
//!   of each stack in one of the two other columns, and the bottom band's L
//!   is then forced (the third column). In one stack the choices keep r
//!   digits per column exactly when the same number k of digits moves "one
//!   column right" from each column of T: sum over k of C(r, k)^3 choices
//!   (10, 56, 346 for r = 2, 3, 4);
//! - the number of completions of a top band is G(T) = sum over the
//!   aligned M of b(M) x b(L), and the grids number sum over T of b(T) G(T).
//!
//! b and G do not change when digits are relabelled, stacks permuted, or the
//! columns of one stack permuted (the same in all three bands). Up to digit
//! relabelling, column sets are a *pattern*: for each digit its column
//! vector (its column in each stack), a multiset of n vectors of
//! {0,1,2}^r with r digits per (stack, column). [`gangsters`] lists the
//! classes of patterns under stack and column permutations (Silver and
//! Pettersen's gangsters: 144,578 for r = 4) with their exact sizes, by
//! orderly generation (each class is met once, as its least pattern).
//!
//! Everything here is pure and starts no threads: the caller spreads
//! classes over cores and machines. The one table a count needs
//! ([`SharedTable`]) is shared by all the counts of a process, on any
//! number of threads.

use std::sync::atomic::{AtomicBool, Ordering as AtomicOrdering};
use std::sync::{Arc, Mutex, Weak};

pub mod stack_pairs;

/// The smallest and largest r handled (the stacks' vectors fit 3^4 = 81 codes).
pub const MIN_R: usize = 2;
/// See [`MIN_R`].
pub const MAX_R: usize = 4;
const MAX_CODES: usize = 81;
const MAX_DIGITS: usize = 3 * MAX_R;

/// The six orders of a stack's three columns.
const PERMUTATIONS: [[u8; 3]; 6] = [[0, 1, 2], [0, 2, 1], [1, 0, 2], [1, 2, 0], [2, 0, 1], [2, 1, 0]];

/// Column sets up to digit relabelling: each digit's column in each stack
/// (a code: the columns as base-3 digits, stack 0 the most significant),
/// as distinct codes with how many digits have them, codes ascending.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Pattern {
    r: u8,
    stacks: u8,
    rows: Vec<(u8, u8)>,
}

/// Why a pattern or a count was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ThreeBandError {
    /// r is outside [`MIN_R`]..=[`MAX_R`].
    UnsupportedShape { r: usize },
    /// A pattern's text does not describe column sets of a band.
    BadPattern { text: String, reason: String },
    /// The cancellation flag was raised.
    Cancelled,
}

impl std::fmt::Display for ThreeBandError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ThreeBandError::UnsupportedShape { r } => {
                write!(f, "{r} x 3 boxes are not supported by three bands (r must be {MIN_R}..={MAX_R})")
            }
            ThreeBandError::BadPattern { text, reason } => write!(f, "bad column-set pattern {text:?}: {reason}"),
            ThreeBandError::Cancelled => write!(f, "cancelled"),
        }
    }
}

impl std::error::Error for ThreeBandError {}

fn check_r(r: usize) -> Result<(), ThreeBandError> {
    if (MIN_R..=MAX_R).contains(&r) { Ok(()) } else { Err(ThreeBandError::UnsupportedShape { r }) }
}

impl Pattern {
    /// The boxes' rows: each column holds r digits.
    pub fn r(&self) -> usize {
        usize::from(self.r)
    }

    /// (code, number of digits) pairs, codes ascending.
    pub fn rows(&self) -> &[(u8, u8)] {
        &self.rows
    }

    /// Each digit's column vector, one per digit (n of them), ascending.
    pub fn digit_vectors(&self) -> Vec<[u8; MAX_R]> {
        let mut out = Vec::with_capacity(3 * self.r());
        for &(code, count) in &self.rows {
            let vector = self.vector(code);
            out.extend(std::iter::repeat_n(vector, usize::from(count)));
        }
        out
    }

    fn vector(&self, code: u8) -> [u8; MAX_R] {
        let mut vector = [0u8; MAX_R];
        let mut rest = code;
        for s in (0..usize::from(self.stacks)).rev() {
            vector[s] = rest % 3;
            rest /= 3;
        }
        vector
    }

    /// A full pattern from each digit's column vector (any order).
    pub fn from_vectors(r: usize, vectors: &[[u8; MAX_R]]) -> Result<Pattern, ThreeBandError> {
        check_r(r)?;
        let bad = |reason: String| ThreeBandError::BadPattern { text: format!("{vectors:?}"), reason };
        if vectors.len() != 3 * r {
            return Err(bad(format!("{} digits, not {}", vectors.len(), 3 * r)));
        }
        let mut per_column = [[0usize; 3]; MAX_R];
        let mut counts = [0u8; MAX_CODES];
        for vector in vectors {
            let mut code = 0usize;
            for (s, &column) in vector.iter().take(r).enumerate() {
                if column > 2 {
                    return Err(bad(format!("column {column} is not 0, 1 or 2")));
                }
                per_column[s][usize::from(column)] += 1;
                code = code * 3 + usize::from(column);
            }
            counts[code] += 1;
        }
        if per_column.iter().take(r).any(|columns| columns.iter().any(|&k| k != r)) {
            return Err(bad(format!("a column does not hold {r} digits")));
        }
        Ok(Pattern { r: r as u8, stacks: r as u8, rows: rows_of(&counts) })
    }

    /// The text form: each digit's columns, stack by stack, digits
    /// separated by `.` (e.g. `0000.0000.1111...` for r = 4).
    pub fn key(&self) -> String {
        let stacks = usize::from(self.stacks);
        self.digit_vectors()
            .iter()
            .map(|v| v[..stacks].iter().map(|c| char::from(b'0' + c)).collect::<String>())
            .collect::<Vec<_>>()
            .join(".")
    }

    /// Reads [`Pattern::key`].
    pub fn parse(r: usize, text: &str) -> Result<Pattern, ThreeBandError> {
        check_r(r)?;
        let bad = |reason: String| ThreeBandError::BadPattern { text: text.to_string(), reason };
        let mut vectors = Vec::new();
        for word in text.split('.') {
            if word.len() != r {
                return Err(bad(format!("{word:?} is not {r} columns")));
            }
            let mut vector = [0u8; MAX_R];
            for (s, c) in word.bytes().enumerate() {
                vector[s] = match c {
                    b'0'..=b'2' => c - b'0',
                    _ => return Err(bad(format!("{word:?} holds a column other than 0, 1, 2"))),
                };
            }
            vectors.push(vector);
        }
        Pattern::from_vectors(r, &vectors).map_err(|e| match e {
            ThreeBandError::BadPattern { reason, .. } => bad(reason),
            other => other,
        })
    }

    /// The column sets as digit masks, column 3s + c for column c of stack s.
    fn columns(&self) -> [u16; MAX_DIGITS] {
        let mut columns = [0u16; MAX_DIGITS];
        for (digit, vector) in self.digit_vectors().iter().enumerate() {
            for (s, &c) in vector.iter().take(self.r()).enumerate() {
                columns[3 * s + usize::from(c)] |= 1 << digit;
            }
        }
        columns
    }
}

fn rows_of(counts: &[u8; MAX_CODES]) -> Vec<(u8, u8)> {
    counts.iter().enumerate().filter(|&(_, &k)| k > 0).map(|(code, &k)| (code as u8, k)).collect()
}

/// The canonicity search: is `pattern` the least of its class (in the
/// order below), and how many stack-and-column permutations fix it?
///
/// The order compares patterns stack by stack: first the numbers of
/// digits per column vector over stacks 0..1, then over 0..2, and so on;
/// at the first vector (ascending) where two patterns differ, the one with
/// more digits there is less. That is the plain order of the patterns'
/// digit lists read column by column, and its point is that the least
/// pattern of a class on k + 1 stacks, cut to its first k stacks, is the
/// least of its own class: orderly generation can extend only least
/// patterns.
struct Canonicity<'a> {
    stacks: usize,
    columns: Vec<[u8; MAX_R]>,
    weights: &'a [(u8, u8)],
    /// target[k][code]: the pattern's own digits per vector of stacks 0..=k.
    target: Vec<[u8; MAX_CODES]>,
    automorphisms: u64,
}

impl<'a> Canonicity<'a> {
    fn new(pattern: &'a Pattern) -> Canonicity<'a> {
        let stacks = usize::from(pattern.stacks);
        let columns: Vec<[u8; MAX_R]> = pattern.rows.iter().map(|&(code, _)| pattern.vector(code)).collect();
        let mut target = vec![[0u8; MAX_CODES]; stacks];
        for (k, level) in target.iter_mut().enumerate() {
            for (vector, &(_, count)) in columns.iter().zip(&pattern.rows) {
                let code = vector[..=k].iter().fold(0usize, |code, &c| code * 3 + usize::from(c));
                level[code] += count;
            }
        }
        Canonicity { stacks, columns, weights: &pattern.rows, target, automorphisms: 0 }
    }

    /// False as soon as some permutation gives a lesser pattern; else
    /// counts the permutations that give the pattern itself.
    fn search(&mut self, depth: usize, used: u8, prefix: &[u8]) -> bool {
        if depth == self.stacks {
            self.automorphisms += 1;
            return true;
        }
        let width = 3usize.pow(depth as u32 + 1);
        let mut next = [0u8; MAX_DIGITS];
        let next = &mut next[..prefix.len()];
        for s in 0..self.stacks {
            if used & (1 << s) != 0 {
                continue;
            }
            for permutation in &PERMUTATIONS {
                let mut counts = [0u8; MAX_CODES];
                for (i, vector) in self.columns.iter().enumerate() {
                    next[i] = prefix[i] * 3 + permutation[usize::from(vector[s])];
                    counts[usize::from(next[i])] += self.weights[i].1;
                }
                let target = &self.target[depth];
                match (0..width).find(|&code| counts[code] != target[code]) {
                    Some(code) if counts[code] > target[code] => return false,
                    Some(_) => continue,
                    None => {
                        if !self.search(depth + 1, used | (1 << s), next) {
                            return false;
                        }
                    }
                }
            }
        }
        true
    }
}

/// Whether `pattern` is the least of its class, and if so how many stack
/// and column permutations fix it.
fn least_with_automorphisms(pattern: &Pattern) -> Option<u64> {
    let mut search = Canonicity::new(pattern);
    let prefix = vec![0u8; pattern.rows.len()];
    search.search(0, 0, &prefix).then_some(search.automorphisms)
}

/// One class of top-band column sets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gangster {
    /// The least pattern of the class.
    pub pattern: Pattern,
    /// How many column-set tuples (labelled digits, ordered columns) the
    /// class holds: n! 6^r r! / (automorphisms x product of the vectors'
    /// digit counts factorial).
    pub size: u128,
}

fn factorial(k: usize) -> u128 {
    (1..=k as u128).product()
}

/// The number of top-band column-set tuples: each stack splits the n
/// digits into three ordered r-sets, (n! / r!^3)^r.
pub fn column_set_tuples(r: usize) -> u128 {
    (factorial(3 * r) / factorial(r).pow(3)).pow(r as u32)
}

/// Every class of top-band column sets for r x 3 boxes, as its least
/// pattern, sorted by the patterns' (vector code, digits) lists.
pub fn gangsters(r: usize) -> Result<Vec<Gangster>, ThreeBandError> {
    check_r(r)?;
    let first = Pattern { r: r as u8, stacks: 1, rows: vec![(0, r as u8), (1, r as u8), (2, r as u8)] };
    let mut level = vec![(first, 1)];
    for stacks in 2..=r {
        let mut next = Vec::new();
        for (pattern, _) in &level {
            extend(pattern, stacks, &mut next);
        }
        level = next;
    }
    level.sort_unstable();
    let group = factorial(3 * r) * 6u128.pow(r as u32) * factorial(r);
    Ok(level
        .into_iter()
        .map(|(pattern, automorphisms)| {
            let repeats: u128 = pattern.rows.iter().map(|&(_, k)| factorial(usize::from(k))).product();
            Gangster { size: group / (u128::from(automorphisms) * repeats), pattern }
        })
        .collect())
}

/// Adds to `out` every least pattern on `stacks` stacks that cuts to
/// `pattern`, with its automorphisms (the search that finds it least
/// counts them: searching again for the count took half the listing).
fn extend(pattern: &Pattern, stacks: usize, out: &mut Vec<(Pattern, u64)>) {
    let r = pattern.r;
    let mut rows = Vec::with_capacity(3 * usize::from(r));
    split_rows(pattern, 0, [r; 3], &mut rows, stacks, ALL_BUT_IDENTITY, out);
}

/// Every permutation of [`PERMUTATIONS`] but the identity, a bit each.
const ALL_BUT_IDENTITY: u8 = 0b11_1110;

/// Splits rows `i..` of `pattern` over the new stack's three columns
/// (`room` digits left in each). Only splits that no permutation of the
/// new stack's columns alone makes lesser are kept: the new stack is the
/// last, so such a permutation changes only the last vectors' counts, in
/// the order the rows are split, and a least pattern's triples there
/// are at least their permutations' (`tied`: the permutations whose
/// triples equalled them so far). A necessary condition, cheap to test
/// here (without it the search rejected 34 candidates of 35); the
/// search still decides.
fn split_rows(
    pattern: &Pattern,
    i: usize,
    room: [u8; 3],
    rows: &mut Vec<(u8, u8)>,
    stacks: usize,
    tied: u8,
    out: &mut Vec<(Pattern, u64)>,
) {
    if i == pattern.rows.len() {
        let child = Pattern { r: pattern.r, stacks: stacks as u8, rows: rows.clone() };
        if let Some(automorphisms) = least_with_automorphisms(&child) {
            out.push((child, automorphisms));
        }
        return;
    }
    let (code, count) = pattern.rows[i];
    for a0 in 0..=count.min(room[0]) {
        for a1 in 0..=(count - a0).min(room[1]) {
            let a2 = count - a0 - a1;
            if a2 > room[2] {
                continue;
            }
            let split = [a0, a1, a2];
            let mut still_tied = tied;
            let mut lesser = false;
            for (p, permutation) in PERMUTATIONS.iter().enumerate().filter(|&(p, _)| tied & (1 << p) != 0) {
                let mut permuted = [0u8; 3];
                for (c, &k) in split.iter().enumerate() {
                    permuted[usize::from(permutation[c])] = k;
                }
                match permuted.cmp(&split) {
                    // More digits at the first code that differs: lesser.
                    std::cmp::Ordering::Greater => lesser = true,
                    std::cmp::Ordering::Less => still_tied &= !(1 << p),
                    std::cmp::Ordering::Equal => {}
                }
            }
            if lesser {
                continue;
            }
            let before = rows.len();
            for (column, k) in [a0, a1, a2].into_iter().enumerate() {
                if k > 0 {
                    rows.push((code * 3 + column as u8, k));
                }
            }
            let room = [room[0] - a0, room[1] - a1, room[2] - a2];
            split_rows(pattern, i + 1, room, rows, stacks, still_tied, out);
            rows.truncate(before);
        }
    }
}

/// b: the number of bands whose column sets are the pattern's.
pub fn band_count(pattern: &Pattern) -> u128 {
    let r = pattern.r();
    let mut columns = pattern.columns();
    factorizations(&mut columns[..3 * r], r)
}

/// The ordered decompositions of a k-regular bipartite graph (column i
/// joined to the digits of `columns[i]`) into k perfect matchings. The rows
/// play equal parts, so the row that takes column 0's least digit is fixed
/// to the first and the count multiplied by k.
fn factorizations(columns: &mut [u16], k: usize) -> u128 {
    match k {
        0 | 1 => 1,
        2 => 1u128 << cycles(columns),
        _ => {
            let mut sum = 0u128;
            let first = columns[0] & columns[0].wrapping_neg();
            columns[0] &= !first;
            matchings(columns, 1, first, &mut |rest| sum += factorizations(rest, k - 1));
            columns[0] |= first;
            sum * k as u128
        }
    }
}

/// Calls `found` with the graph minus each perfect matching that agrees
/// with the choices made for columns before `column` (their digits `used`,
/// already removed from `columns`).
fn matchings(columns: &mut [u16], column: usize, used: u16, found: &mut dyn FnMut(&mut [u16])) {
    if column == columns.len() {
        found(columns);
        return;
    }
    let mut free = columns[column] & !used;
    while free != 0 {
        let digit = free & free.wrapping_neg();
        free &= !digit;
        columns[column] &= !digit;
        matchings(columns, column + 1, used | digit, found);
        columns[column] |= digit;
    }
}

/// The cycles of a 2-regular bipartite graph given by its columns' masks.
fn cycles(columns: &[u16]) -> u32 {
    // Each digit's two columns.
    let mut holders = [[0u8; 2]; MAX_DIGITS];
    let mut seen_once = 0u16;
    for (column, &mask) in columns.iter().enumerate() {
        let mut digits = mask;
        while digits != 0 {
            let digit = digits.trailing_zeros() as usize;
            digits &= digits - 1;
            let slot = usize::from(seen_once & (1 << digit) != 0);
            holders[digit][slot] = column as u8;
            seen_once |= 1 << digit;
        }
    }
    let mut seen = 0u32;
    let mut cycles = 0;
    for start in 0..columns.len() {
        if seen & (1 << start) != 0 {
            continue;
        }
        cycles += 1;
        let mut column = start;
        let mut digit = columns[start].trailing_zeros() as usize;
        loop {
            seen |= 1 << column;
            let [a, b] = holders[digit];
            let other = usize::from(if usize::from(a) == column { b } else { a });
            if other == start {
                break;
            }
            digit = (columns[other] & !(1 << digit)).trailing_zeros() as usize;
            column = other;
        }
    }
    cycles
}

/// The middle band's choices in one stack: for each digit (by its index in
/// `top`'s digit order) the column it takes, such that each column gets r
/// digits and no digit keeps its top column.
fn stack_choices(top: &[[u8; MAX_R]], stack: usize, r: usize) -> Vec<Vec<u8>> {
    let n = top.len();
    let mut out = Vec::new();
    for moves in 0u32..(1 << n) {
        let mut per_column = [0usize; 3];
        let columns: Vec<u8> = (0..n)
            .map(|d| {
                let shift = if moves & (1 << d) != 0 { 1 } else { 2 };
                let column = (top[d][stack] + shift) % 3;
                per_column[usize::from(column)] += 1;
                column
            })
            .collect();
        if per_column == [r; 3] {
            out.push(columns);
        }
    }
    out
}

/// G: the number of ways to complete a top band with the pattern's column
/// sets into a grid, by the plain sum over every aligned middle band of
/// b(middle) x b(bottom). Checks `cancel` once per choice of the first
/// stack.
pub fn completions_by_sum(pattern: &Pattern, cancel: &AtomicBool) -> Result<u128, ThreeBandError> {
    let r = pattern.r();
    let top = pattern.digit_vectors();
    let n = top.len();
    let choices: Vec<Vec<Vec<u8>>> = (0..r).map(|s| stack_choices(&top, s, r)).collect();
    let mut middle = vec![[0u8; MAX_R]; n];
    let mut bottom = vec![[0u8; MAX_R]; n];
    let mut total = 0u128;
    for first in &choices[0] {
        if cancel.load(AtomicOrdering::Relaxed) {
            return Err(ThreeBandError::Cancelled);
        }
        set_stack(&top, first, 0, &mut middle, &mut bottom);
        total += sum_stacks(r, &top, &choices, 1, &mut middle, &mut bottom);
    }
    Ok(total)
}

fn set_stack(top: &[[u8; MAX_R]], choice: &[u8], s: usize, middle: &mut [[u8; MAX_R]], bottom: &mut [[u8; MAX_R]]) {
    for d in 0..top.len() {
        middle[d][s] = choice[d];
        bottom[d][s] = 3 - top[d][s] - choice[d];
    }
}

fn sum_stacks(
    r: usize,
    top: &[[u8; MAX_R]],
    choices: &[Vec<Vec<u8>>],
    s: usize,
    middle: &mut [[u8; MAX_R]],
    bottom: &mut [[u8; MAX_R]],
) -> u128 {
    if s == r {
        let b = |vectors: &[[u8; MAX_R]]| band_count(&Pattern::from_vectors(r, vectors).expect("aligned"));
        return b(middle) * b(bottom);
    }
    let mut total = 0;
    for choice in &choices[s] {
        set_stack(top, choice, s, middle, bottom);
        total += sum_stacks(r, top, choices, s + 1, middle, bottom);
    }
    total
}

/// The least pattern of `pattern`'s class (in the order orderly generation uses),
/// by branch and bound over the stack and column permutations.
pub fn least(pattern: &Pattern) -> Pattern {
    let stacks = usize::from(pattern.stacks);
    let columns: Vec<[u8; MAX_R]> = pattern.rows.iter().map(|&(code, _)| pattern.vector(code)).collect();
    let mut best: Vec<[u8; MAX_CODES]> = Vec::with_capacity(stacks);
    let prefix = vec![0u8; columns.len()];
    least_search(&columns, &pattern.rows, stacks, 0, 0, &prefix, &mut best);
    Pattern { r: pattern.r, stacks: pattern.stacks, rows: rows_of(&best[stacks - 1]) }
}

/// Extends the permutation chosen so far (its images of stacks 0..depth,
/// `prefix` per row) in every way, keeping in `best` the least level
/// vectors met; on entry the path's levels below `depth` equal best's.
fn least_search(
    columns: &[[u8; MAX_R]],
    rows: &[(u8, u8)],
    stacks: usize,
    depth: usize,
    used: u8,
    prefix: &[u8],
    best: &mut Vec<[u8; MAX_CODES]>,
) {
    if depth == stacks {
        return;
    }
    let width = 3usize.pow(depth as u32 + 1);
    let mut next = [0u8; MAX_DIGITS];
    let next = &mut next[..prefix.len()];
    for s in 0..stacks {
        if used & (1 << s) != 0 {
            continue;
        }
        for permutation in &PERMUTATIONS {
            let mut counts = [0u8; MAX_CODES];
            for (i, vector) in columns.iter().enumerate() {
                next[i] = prefix[i] * 3 + permutation[usize::from(vector[s])];
                counts[usize::from(next[i])] += rows[i].1;
            }
            if best.len() > depth {
                let known = &best[depth];
                match (0..width).find(|&code| counts[code] != known[code]) {
                    // Greater: nothing below can be least.
                    Some(code) if counts[code] < known[code] => continue,
                    // Less: a new best from this level on.
                    Some(_) => {
                        best.truncate(depth);
                        best.push(counts);
                    }
                    None => {}
                }
            } else {
                best.push(counts);
            }
            least_search(columns, rows, stacks, depth + 1, used | (1 << s), next, best);
        }
    }
}

/// b of every class met so far, keyed by least pattern: built up once per
/// process and shared by the jobs it counts (b is the costly part of a
/// term, and the same few classes come back in every gangster).
#[derive(Default)]
pub struct BandCounts {
    known: rustc_hash::FxHashMap<Pattern, u128>,
}

impl BandCounts {
    /// An empty table.
    pub fn new() -> BandCounts {
        BandCounts::default()
    }

    /// b of the pattern's class.
    pub fn get(&mut self, pattern: &Pattern) -> u128 {
        let key = least(pattern);
        if let Some(&b) = self.known.get(&key) {
            return b;
        }
        let b = band_count(&key);
        self.known.insert(key, b);
        b
    }

    /// How many classes the table holds.
    pub fn len(&self) -> usize {
        self.known.len()
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.known.is_empty()
    }
}

/// G, summed over the middle bands up to relabelling the top band's equal
/// digits: digits with the same column vector in the top band play equal
/// parts, so a middle band is chosen as, for each top vector, a multiset of
/// moves (bit s set: the digit moves one column right in stack s, else
/// two), and counted with the number of labelled middle bands it stands
/// for. Much shorter than [`completions_by_sum`] for patterns with repeated
/// vectors (1.6 million terms for the 4 x 3 gangster whose stacks split
/// the digits alike, against 1.4 x 10^10); the same for patterns without.
pub fn completions(pattern: &Pattern, bands: &mut BandCounts, cancel: &AtomicBool) -> Result<u128, ThreeBandError> {
    let r = pattern.r();
    let rows: Vec<([u8; MAX_R], u8)> = pattern.rows.iter().map(|&(code, k)| (pattern.vector(code), k)).collect();
    // After which row each (stack, top column) has all its digits.
    let mut last = [[0usize; 3]; MAX_R];
    for (i, (vector, _)) in rows.iter().enumerate() {
        for s in 0..r {
            last[s][usize::from(vector[s])] = i;
        }
    }
    let mut search = MoveSearch {
        r,
        rows: &rows,
        last,
        chosen: Vec::new(),
        moved: [[0; 3]; MAX_R],
        bands,
        cancel,
        terms: 0,
        total: 0,
    };
    search.row(0)?;
    Ok(search.total)
}

struct MoveSearch<'a> {
    r: usize,
    rows: &'a [([u8; MAX_R], u8)],
    last: [[usize; 3]; MAX_R],
    /// Per row so far: (moves mask, digits) pairs.
    chosen: Vec<Vec<(u8, u8)>>,
    /// moved[s][g]: digits of top column g in stack s that move one right.
    moved: [[u8; 3]; MAX_R],
    bands: &'a mut BandCounts,
    cancel: &'a AtomicBool,
    terms: u64,
    total: u128,
}

impl MoveSearch<'_> {
    fn row(&mut self, i: usize) -> Result<(), ThreeBandError> {
        if i == self.rows.len() {
            // A term costs microseconds, or milliseconds when it meets a
            // class whose b is not yet known: look at the flag every 64.
            self.terms += 1;
            if self.terms.is_multiple_of(64) && self.cancel.load(AtomicOrdering::Relaxed) {
                return Err(ThreeBandError::Cancelled);
            }
            self.leaf();
            return Ok(());
        }
        let mut multiset = Vec::new();
        self.multisets(i, 0, self.rows[i].1, &mut multiset)
    }

    /// Chooses the multiset of moves of row i's digits, mask by mask from `from`.
    fn multisets(&mut self, i: usize, from: u8, left: u8, multiset: &mut Vec<(u8, u8)>) -> Result<(), ThreeBandError> {
        let r = self.r;
        if left == 0 {
            // Stacks whose top columns are complete must move as many digits right from each.
            let vector = self.rows[i].0;
            for (s, &column) in vector.iter().enumerate().take(r) {
                let g = usize::from(column);
                if self.moved[s][g] > r as u8 {
                    return Ok(());
                }
                if self.last[s][g] == i {
                    for other in 0..3 {
                        if self.last[s][other] <= i && self.moved[s][other] != self.moved[s][g] {
                            return Ok(());
                        }
                    }
                }
            }
            self.chosen.push(multiset.clone());
            let result = self.row(i + 1);
            self.chosen.pop();
            return result;
        }
        let vector = self.rows[i].0;
        for mask in from..(1u8 << r) {
            for take in 1..=left {
                for (s, &column) in vector.iter().enumerate().take(r) {
                    if mask & (1 << s) != 0 {
                        self.moved[s][usize::from(column)] += take;
                    }
                }
                multiset.push((mask, take));
                let result = self.multisets(i, mask + 1, left - take, multiset);
                multiset.pop();
                for (s, &column) in vector.iter().enumerate().take(r) {
                    if mask & (1 << s) != 0 {
                        self.moved[s][usize::from(column)] -= take;
                    }
                }
                result?;
            }
        }
        Ok(())
    }

    fn leaf(&mut self) {
        let r = self.r;
        let mut middle = [0u8; MAX_CODES];
        let mut bottom = [0u8; MAX_CODES];
        let mut labelled = 1u128;
        for ((vector, k), multiset) in self.rows.iter().zip(&self.chosen) {
            labelled *= factorial(usize::from(*k));
            for &(mask, take) in multiset {
                labelled /= factorial(usize::from(take));
                let (mut m, mut l) = (0usize, 0usize);
                for (s, &column) in vector.iter().enumerate().take(r) {
                    let right = u8::from(mask & (1 << s) != 0);
                    m = m * 3 + usize::from((column + 2 - right) % 3);
                    l = l * 3 + usize::from((column + 1 + right) % 3);
                }
                middle[m] += take;
                bottom[l] += take;
            }
        }
        let pattern = |counts: &[u8; MAX_CODES]| Pattern { r: r as u8, stacks: r as u8, rows: rows_of(counts) };
        let b = self.bands.get(&pattern(&middle)) * self.bands.get(&pattern(&bottom));
        self.total += labelled * b;
    }
}

/// One job: a gangster, counted as b(T) x G(T), the grids whose top band
/// has one given column-set tuple T of the class.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ThreeBandJob {
    /// `<r>x3:` and the class's least pattern ([`Pattern::key`]): all a
    /// worker needs.
    pub key: String,
    /// `<r>x3 gangster <i>`, i in the order of [`gangsters`].
    pub group: String,
    /// The class size: column-set tuples T in the class.
    pub weight: u128,
}

/// The jobs of r x 3 boxes, one per gangster: the gangsters of
/// [`gangsters`] with those that share their first r - 1 stacks next to
/// each other (otherwise in the order listed), so that a worker counting a
/// run of neighbouring jobs together ([`SharedTable::count_many`]) reads each
/// pair of table rows once for all of them.
pub fn jobs(r: usize) -> Result<Vec<ThreeBandJob>, ThreeBandError> {
    let mut listed = gangsters(r)?;
    // Stable: within a group, the listed order.
    listed.sort_by_cached_key(|gangster| first_stacks(&gangster.pattern));
    Ok(listed
        .into_iter()
        .enumerate()
        .map(|(index, gangster)| ThreeBandJob {
            key: format!("{r}x3:{}", gangster.pattern.key()),
            group: format!("{r}x3 gangster {index}"),
            weight: gangster.size,
        })
        .collect())
}

/// Each digit's columns in the first r - 1 stacks (the last stack's set
/// to 0), in the pattern's digit order: equal for gangsters that are
/// counted together.
fn first_stacks(pattern: &Pattern) -> Vec<[u8; MAX_R]> {
    let last = pattern.r() - 1;
    pattern
        .digit_vectors()
        .into_iter()
        .map(|mut vector| {
            vector[last] = 0;
            vector
        })
        .collect()
}

/// Reads a job key back into its r and pattern.
pub fn parse_key(key: &str) -> Result<Pattern, ThreeBandError> {
    let bad = |reason: &str| ThreeBandError::BadPattern { text: key.to_string(), reason: reason.to_string() };
    let (shape, pattern) = key.split_once(':').ok_or_else(|| bad("not <r>x3:<pattern>"))?;
    let r = shape.strip_suffix("x3").and_then(|r| r.parse::<usize>().ok()).ok_or_else(|| bad("not <r>x3:<pattern>"))?;
    Pattern::parse(r, pattern)
}

/// A job's count, b(T) x G(T), with G by table reads over stack pairs
/// ([`stack_pairs`]) on the process's table ([`SharedTable`]).
///
/// ```
/// use census_math::three_bands::count_job;
/// use std::sync::atomic::AtomicBool;
/// // 3 x 2 boxes: both stacks split the digits alike; b = 2^3 (each pair
/// // of digits is ordered in one column per stack), G = 1,408.
/// let never = AtomicBool::new(false);
/// assert_eq!(count_job("2x3:00.00.11.11.22.22", &never), Ok(8 * 1_408));
/// ```
pub fn count_job(key: &str, cancel: &AtomicBool) -> Result<u128, ThreeBandError> {
    let pattern = parse_key(key)?;
    SharedTable::new(pattern.r())?.count(&pattern, cancel)
}

/// The stack-pair table of one r that every count of the process shares
/// ([`stack_pairs::StackPairTable`]: a table is filled as it is read and
/// then serves every gangster; 600 MB at most for r = 4), on every thread.
/// Counters made with [`SharedTable::new`] for the same r while one is alive
/// hold the same table, so a worker's counting threads, the coordinator's
/// checking threads and any other counter in the process together hold one
/// table; it is freed when the last of them is dropped.
#[derive(Clone)]
pub struct SharedTable {
    r: usize,
    table: Arc<stack_pairs::StackPairTable>,
}

/// The tables alive in this process, by r - [`MIN_R`].
static PROCESS_TABLES: Mutex<[Weak<stack_pairs::StackPairTable>; MAX_R - MIN_R + 1]> =
    Mutex::new([Weak::new(), Weak::new(), Weak::new()]);

impl SharedTable {
    /// The process's table for r, made (empty) if no counter holds one.
    pub fn new(r: usize) -> Result<SharedTable, ThreeBandError> {
        check_r(r)?;
        // Made under the lock: threads that ask at once wait for one table.
        let mut tables = PROCESS_TABLES.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let slot = &mut tables[r - MIN_R];
        let table = match slot.upgrade() {
            Some(table) => table,
            None => {
                let table = Arc::new(stack_pairs::StackPairTable::new(r)?);
                *slot = Arc::downgrade(&table);
                table
            }
        };
        Ok(SharedTable { r, table })
    }

    /// The table itself.
    pub fn table(&self) -> &stack_pairs::StackPairTable {
        &self.table
    }

    /// The count of a job key, b(T) x G(T), or [`ThreeBandError::Cancelled`]
    /// once `cancel` is set (read every few thousand terms).
    pub fn count_job(&self, key: &str, cancel: &AtomicBool) -> Result<u128, ThreeBandError> {
        self.count(&parse_key(key)?, cancel)
    }

    /// b(T) x G(T) for the pattern's class.
    pub fn count(&self, pattern: &Pattern, cancel: &AtomicBool) -> Result<u128, ThreeBandError> {
        Ok(self.count_many(std::slice::from_ref(pattern), cancel)?[0])
    }

    /// b(T) x G(T) for each pattern's class, counted together where their
    /// first r - 1 stacks agree ([`stack_pairs::StackPairTable::completions_of_many`]):
    /// the table rows a term reads are brought into the cache once per
    /// group, so for r = 4 a gangster in a group of 30 costs about an eighth
    /// of one counted alone (BENCHMARKS.md).
    pub fn count_many(&self, patterns: &[Pattern], cancel: &AtomicBool) -> Result<Vec<u128>, ThreeBandError> {
        self.count_part(patterns, 0, 1, cancel)
    }

    /// Part `part` of `parts` of [`SharedTable::count_many`]
    /// ([`stack_pairs::StackPairTable::completions_in_part`]): the parts
    /// 0 .. parts add up to the counts, so several threads can share the
    /// count of one group. Panics unless part < parts.
    pub fn count_part(
        &self,
        patterns: &[Pattern],
        part: usize,
        parts: usize,
        cancel: &AtomicBool,
    ) -> Result<Vec<u128>, ThreeBandError> {
        if let Some(other) = patterns.iter().find(|p| p.r() != self.r) {
            return Err(ThreeBandError::UnsupportedShape { r: other.r() });
        }
        // A cancelled count leaves only whole rows behind: the table stays good.
        let gs = self.table.completions_in_part(patterns, part, parts, cancel)?;
        Ok(patterns.iter().zip(gs).map(|(pattern, g)| band_count(pattern) * g).collect())
    }
}

/// The number of grids: the sum of weight x count over the jobs of
/// [`jobs`] (the caller checks that the results are exactly those jobs).
pub fn fold<'a>(results: impl IntoIterator<Item = (&'a ThreeBandJob, u128)>) -> num_bigint::BigUint {
    results.into_iter().map(|(job, count)| num_bigint::BigUint::from(job.weight) * count).sum()
}

/// The gangsters of 4 x 3 boxes, the jobs of [`jobs`]`(4)` (Silver's
/// 144,578): known before they are listed, so that a slice past them is
/// refused before the list (seconds of work) is made.
pub const GANGSTERS_4X3: usize = 144_578;

/// Published totals: 4 x 3 (and 3 x 4) boxes, Pettersen and Silver (2006),
/// re-verified by Silver (2022, github.com/GizmoBill/Sudoku4x3).
pub const PUBLISHED_4X3: &str = "81171437193104932746936103027318645818654720000";

/// Reads lines of Silver's published gangster counts (`2022 Data/gridCount_*.txt`
/// in github.com/GizmoBill/Sudoku4x3): index, count, thread, seconds, where a
/// count `*N` stands for 64 x N. Lines starting with `#` and blank lines are
/// skipped. Returns (Silver's index, count) pairs, or the first bad line.
pub fn parse_published_counts(text: &str) -> Result<Vec<(u32, u128)>, String> {
    let mut out = Vec::new();
    for (number, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let bad = || format!("line {}: {line:?} is not INDEX COUNT THREAD SECONDS", number + 1);
        let mut words = line.split_whitespace();
        let index = words.next().and_then(|w| w.parse::<u32>().ok()).ok_or_else(bad)?;
        let count = words.next().ok_or_else(bad)?;
        let count = match count.strip_prefix('*') {
            Some(short) => short.parse::<u128>().ok().and_then(|n| n.checked_mul(64)),
            None => count.parse::<u128>().ok(),
        }
        .ok_or_else(bad)?;
        if words.count() != 2 {
            return Err(bad());
        }
        out.push((index, count));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The jobs of a group (gangsters with the same first r - 1 stacks,
    /// counted together) are neighbours: 359 groups for r = 4, each one
    /// run of the job list, every gangster once.
    #[test]
    fn gangsters_counted_together_are_neighbours_in_the_job_list() {
        let listed = jobs(4).unwrap();
        assert_eq!(listed.len(), GANGSTERS_4X3);
        let prefixes: Vec<Vec<[u8; MAX_R]>> =
            listed.iter().map(|job| first_stacks(&parse_key(&job.key).unwrap())).collect();
        let runs = 1 + prefixes.windows(2).filter(|pair| pair[0] != pair[1]).count();
        let distinct: std::collections::HashSet<_> = prefixes.iter().collect();
        assert_eq!((runs, distinct.len()), (359, 359));
        let keys: std::collections::HashSet<_> = listed.iter().map(|job| &job.key).collect();
        assert_eq!(keys.len(), listed.len());
    }

    fn plain(r: usize) -> Vec<[u8; MAX_R]> {
        (0..3 * r).map(|d| [(d / r) as u8; MAX_R]).collect()
    }

    #[test]
    fn aligned_choices_per_stack() {
        for (r, expected) in [(2, 10), (3, 56), (4, 346)] {
            assert_eq!(stack_choices(&plain(r), 0, r).len(), expected, "r = {r}");
        }
    }

    /// The same counter through the job keys: 3 x 2 boxes (the transpose
    /// of 2 x 3) give 28,200,960 grids and 3 x 3 boxes N0 (published, see
    /// /work/shared/shapes.md); the class sizes add up to the column-set
    /// tuples. r = 3 has 44 classes, as many as Russell's column-set stage
    /// of the 9x9 count (the same symmetries).
    #[test]
    fn grids_of_2_and_3_rows() {
        for (r, classes, grids) in [(2usize, 3, 28_200_960u128), (3, 44, 6_670_903_752_021_072_936_960)] {
            let jobs = jobs(r).unwrap();
            assert_eq!(jobs.len(), classes);
            assert_eq!(jobs.iter().map(|job| job.weight).sum::<u128>(), column_set_tuples(r));
            let never = AtomicBool::new(false);
            let counts: Vec<u128> = jobs.iter().map(|job| count_job(&job.key, &never).unwrap()).collect();
            assert_eq!(fold(jobs.iter().zip(counts)).to_string(), grids.to_string(), "r = {r}");
        }
    }

    /// Counters of one r made anywhere in the process hold one table, and
    /// counts on several threads at once, filling its rows as they go, are
    /// the counts: the 44 classes of 3 x 3 boxes on two threads (in
    /// opposite orders, each its own counter) fold to N0.
    #[test]
    fn the_counters_of_a_process_share_one_table() {
        let (a, b) = (SharedTable::new(3).unwrap(), SharedTable::new(3).unwrap());
        assert!(Arc::ptr_eq(&a.table, &b.table));
        assert!(!Arc::ptr_eq(&a.table, &SharedTable::new(2).unwrap().table));
        let jobs = jobs(3).unwrap();
        let never = AtomicBool::new(false);
        let count_all = |table: SharedTable, reversed: bool| -> Vec<u128> {
            let mut order: Vec<usize> = (0..jobs.len()).collect();
            if reversed {
                order.reverse();
            }
            let mut counts = vec![0u128; jobs.len()];
            for i in order {
                counts[i] = table.count_job(&jobs[i].key, &never).unwrap();
            }
            counts
        };
        let (forward, backward) = std::thread::scope(|scope| {
            let forward = scope.spawn(|| count_all(a, false));
            let backward = count_all(b, true);
            (forward.join().unwrap(), backward)
        });
        assert_eq!(forward, backward);
        assert_eq!(fold(jobs.iter().zip(forward)).to_string(), "6670903752021072936960");
    }

    /// The sum over moves up to equal digits agrees with the plain sum,
    /// for every class of r = 2 and every eleventh of r = 3 (the grids test
    /// counts all of them by moves); the b table ends up holding only least
    /// patterns of classes.
    #[test]
    fn completions_by_moves_agree_with_the_plain_sum() {
        let never = AtomicBool::new(false);
        for (r, step) in [(2, 1), (3, 11)] {
            let classes = gangsters(r).unwrap();
            let mut bands = BandCounts::new();
            for class in classes.iter().step_by(step) {
                let plain = completions_by_sum(&class.pattern, &never).unwrap();
                assert_eq!(completions(&class.pattern, &mut bands, &never).unwrap(), plain, "{}", class.pattern.key());
            }
            assert!(bands.len() <= classes.len());
            assert!(bands.known.keys().all(|key| classes.iter().any(|class| &class.pattern == key)));
        }
    }

    /// least() finds a class's listed pattern from any member: the stacks
    /// reversed and each stack's columns rotated by its index.
    #[test]
    fn least_finds_the_listed_pattern() {
        for r in [2, 3, 4] {
            for class in gangsters(r).unwrap().iter().step_by(if r == 4 { 1009 } else { 1 }) {
                assert_eq!(least(&class.pattern), class.pattern);
                let moved: Vec<[u8; MAX_R]> = class
                    .pattern
                    .digit_vectors()
                    .iter()
                    .map(|v| {
                        let mut w = [0u8; MAX_R];
                        for s in 0..r {
                            w[r - 1 - s] = (v[s] + s as u8) % 3;
                        }
                        w
                    })
                    .collect();
                assert_eq!(least(&Pattern::from_vectors(r, &moved).unwrap()), class.pattern);
            }
        }
    }

    #[test]
    fn a_raised_flag_cancels_a_count() {
        let raised = AtomicBool::new(true);
        for job in jobs(3).unwrap() {
            assert_eq!(count_job(&job.key, &raised), Err(ThreeBandError::Cancelled), "{}", job.key);
        }
        let pattern = &gangsters(3).unwrap()[0].pattern;
        assert_eq!(completions_by_sum(pattern, &raised), Err(ThreeBandError::Cancelled));
    }

    #[test]
    fn bad_keys_are_refused_with_a_reason() {
        let never = AtomicBool::new(false);
        for (key, says) in [
            ("00.00.11.11.22.22", "not <r>x3"),
            ("5x3:00", "5 x 3 boxes are not supported"),
            ("2x3:00.00.11.11.22", "5 digits"),
            ("2x3:00.00.11.11.22.23", "other than 0, 1, 2"),
            ("2x3:00.00.11.11.22.2", "not 2 columns"),
            ("2x3:00.00.00.11.22.22", "does not hold 2 digits"),
        ] {
            let error = count_job(key, &never).unwrap_err().to_string();
            assert!(error.contains(says), "{key:?}: {error}");
        }
    }

    /// b against a count of all pairs of rows (permutations that fit the
    /// column sets, disjoint in every column), for 2-row bands.
    #[test]
    fn band_count_agrees_with_brute_force() {
        for key in ["00.00.11.11.22.22", "00.01.10.12.21.22", "01.02.10.12.20.21"] {
            let pattern = Pattern::parse(2, key).unwrap();
            assert_eq!(band_count(&pattern), brute_band_count(&pattern), "{key}");
        }
    }

    /// Rows of a 2-row band: permutations of the 6 digits with column i's
    /// digit in its set, the two rows disjoint per column.
    fn brute_band_count(pattern: &Pattern) -> u128 {
        let columns = pattern.columns();
        let n = 3 * pattern.r();
        let mut rows = Vec::new();
        permutations(&columns[..n], 0, 0, &mut vec![0u8; n], &mut rows);
        let mut count = 0;
        for a in &rows {
            for b in &rows {
                if a.iter().zip(b).all(|(x, y)| x != y) {
                    count += 1;
                }
            }
        }
        count
    }

    fn permutations(columns: &[u16], i: usize, used: u16, row: &mut Vec<u8>, out: &mut Vec<Vec<u8>>) {
        if i == columns.len() {
            out.push(row.clone());
            return;
        }
        for digit in 0..columns.len() {
            if columns[i] & (1 << digit) != 0 && used & (1 << digit) == 0 {
                row[i] = digit as u8;
                permutations(columns, i + 1, used | (1 << digit), row, out);
            }
        }
    }
}
