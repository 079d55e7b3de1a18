//! The essentially different count as independent jobs: one or more per
//! conjugacy class of G, each named by a text key that a worker can count
//! from alone, and a fold that checks and combines the counts.
//!
//! Keys (`ed1` is the algorithm version; change it whenever a count could change):
//!
//! ```text
//! ed1 identity
//! ed1 rows=012345678 columns=120453786 transposed=no part=3/16 depth=5
//! ```
//!
//! The first is A(1) = N0 / 9! = 72 x 72 x S, with S computed by the 9x9
//! census's own code (the Russell class stage and the `column-sets` counter,
//! exactly as the total test does). It is one job rather than the census's
//! 440 seed jobs because the whole stage counts in well under a second; the
//! census run itself remains the audited source of S.
//!
//! The second is part 3 of 16 of A(g) for the g that transposes (if
//! `transposed=yes`) and then sends row r to `rows[r]` and column c to
//! `columns[c]`: the nodes of g's search at `depth`, numbered across cycle
//! types, whose number is 3 mod 16 (see [`super::fixed`]). Parts of one class
//! add up to A of that class exactly; a class counted whole is
//! `part=0/1 depth=0`. g is the class's least-numbered element (any element
//! of the class gives the same A). A key carries no class number or size:
//! those are in [`FixedJob`], for the fold and for auditing.
//!
//! A job takes at most about 6 s on one core and up to about 100 MB (the
//! search's memo); a worker needs nothing but the key.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};

use num_bigint::BigUint;
use num_traits::Zero;

use super::fixed::{FixedCounter, Split};
use super::group::{GROUP_ORDER, Group, Rearrangement};
use crate::ClassTable;
use crate::counter::CounterKind;
use crate::stage::Stage;
use crate::total::s_from_classes;

/// The algorithm version that starts every key.
pub const KEY_VERSION: &str = "ed1";

/// How many parts each slow class is cut into, by its representative, so
/// that every job takes at most a few seconds on one core. Tuning only:
/// any number of parts gives the same total. The times (one core, whole
/// class) are from the `essentially_different` example.
const PARTS: [(&str, u64); 1] = [
    // The transpose: 30 million fixed grids, about 25 s whole.
    ("rows 012345678 columns 012345678 transposed", 8),
];

/// The classes whose count takes more than a millisecond, and what it
/// takes (CPU-milliseconds, whole class, one core: `census bench --census
/// essentially-different --sample 282 --threads 1 --json`, 2026-11-28):
/// what progress and its ETA weigh their jobs by ([`job_cost`]). Every
/// other class takes under a millisecond. Estimates only: they weigh
/// progress, never a count.
const COSTS: [(&str, u64); 12] = [
    ("rows 012345678 columns 012345678 transposed", 25_250),
    ("rows 021678345 columns 021678345", 5_070),
    ("rows 021354786 columns 012678345", 420),
    ("rows 021354687 columns 012678345", 400),
    ("rows 345678012 columns 345678012", 250),
    ("rows 012453786 columns 120453786", 130),
    ("rows 012345786 columns 120453786", 130),
    ("rows 012345678 columns 120453786", 125),
    ("rows 012345687 columns 120453786", 120),
    ("rows 120453786 columns 345678012", 50),
    ("rows 120453786 columns 120453786", 40),
    ("identity", 25),
];

/// The expected cost of a job, in CPU-milliseconds (at least 1): its
/// class's from `COSTS` (1 where the class is not listed), shared
/// equally by the class's parts. The essentially different jobs differ in
/// cost by four orders of magnitude, so progress by jobs misleads.
pub fn job_cost(key: &str) -> Result<u64, ParseError> {
    let (class, parts) = match parse_key(key)? {
        JobKey::Identity => ("identity".to_string(), 1),
        JobKey::Part(g, split) => (g.to_string(), split.parts),
    };
    let whole = COSTS.iter().find(|(name, _)| *name == class).map_or(1, |&(_, cost)| cost);
    Ok((whole / parts.max(1)).max(1))
}

/// A split is cut at the shallowest depth with at least this many nodes per
/// part, so the parts come out of similar size.
const NODES_PER_PART: u64 = 32;

/// One job: a class of G, or a part of one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FixedJob {
    /// What a worker counts, alone (see the module doc).
    pub key: String,
    /// The class's position in [`super::ConjugacyClasses::classes`]; 0 is the identity.
    pub class: usize,
    /// The number of elements in the class: the weight of its A.
    pub weight: u64,
}

/// The jobs of the whole count: the split classes' parts first, then the
/// other classes, class by class (1 to 2 seconds: the conjugacy classes are
/// computed, and slow classes' split depths found).
pub fn jobs() -> Vec<FixedJob> {
    let classes = Group::new().conjugacy_classes();
    let (mut split, mut jobs) = (Vec::new(), Vec::new());
    for class in classes.classes() {
        let g = class.representative;
        if g == Rearrangement::IDENTITY {
            jobs.push(FixedJob { key: format!("{KEY_VERSION} identity"), class: class.index, weight: class.size });
            continue;
        }
        let parts = PARTS.iter().find(|(name, _)| *name == g.to_string()).map_or(1, |&(_, parts)| parts);
        let depth = if parts == 1 {
            0
        } else {
            let counter = FixedCounter::new(g);
            (0..counter.depth()).find(|&d| counter.nodes_at(d) >= NODES_PER_PART * parts).unwrap_or(0)
        };
        let list = if parts == 1 { &mut jobs } else { &mut split };
        for part in 0..parts {
            list.push(FixedJob {
                key: job_key(g, Split { depth, part, parts }),
                class: class.index,
                weight: class.size,
            });
        }
    }
    // The queue leases jobs in this order, and a worker sizes its next
    // batch by its last: the split classes' parts (seconds each, most of
    // the work) go first, so they are handed out a few at a time to every
    // worker, and the many fast jobs follow in big batches.
    split.append(&mut jobs);
    split
}

/// The key of one part of A(g).
pub fn job_key(g: Rearrangement, split: Split) -> String {
    let digits = |lines: [u8; 9]| lines.iter().map(|l| char::from(b'0' + l)).collect::<String>();
    format!(
        "{KEY_VERSION} rows={} columns={} transposed={} part={}/{} depth={}",
        digits(g.rows()),
        digits(g.columns()),
        if g.transposes() { "yes" } else { "no" },
        split.part,
        split.parts,
        split.depth
    )
}

/// What a key asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JobKey {
    /// A(1), from the 9x9 census.
    Identity,
    /// One part of A(g), g not the identity.
    Part(Rearrangement, Split),
}

/// A key that is not one [`jobs`] makes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseError(pub String);

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "bad essentially-different job key: {}", self.0)
    }
}

impl std::error::Error for ParseError {}

/// Reads a key (see the module doc).
pub fn parse_key(key: &str) -> Result<JobKey, ParseError> {
    let bad = |why: &str| ParseError(format!("{key:?}: {why}"));
    let mut words = key.split(' ');
    if words.next() != Some(KEY_VERSION) {
        return Err(bad(&format!("does not start with {KEY_VERSION}")));
    }
    let fields: Vec<&str> = words.collect();
    if fields == ["identity"] {
        return Ok(JobKey::Identity);
    }
    let names = ["rows", "columns", "transposed", "part", "depth"];
    if fields.len() != names.len() {
        return Err(bad("expected identity or rows=, columns=, transposed=, part=, depth="));
    }
    let mut values = [""; 5];
    for (value, (field, name)) in values.iter_mut().zip(fields.iter().zip(names)) {
        *value = field
            .strip_prefix(name)
            .and_then(|v| v.strip_prefix('='))
            .ok_or_else(|| bad(&format!("expected {name}=")))?;
    }
    let [rows, columns, transposed, part, depth] = values;
    let lines = |text: &str| -> Result<[u8; 9], ParseError> {
        let bytes = text.as_bytes();
        if bytes.len() != 9 || !bytes.iter().all(u8::is_ascii_digit) {
            return Err(bad("rows and columns are 9 digits"));
        }
        Ok(std::array::from_fn(|i| bytes[i] - b'0'))
    };
    let transposed = match transposed {
        "yes" => true,
        "no" => false,
        _ => return Err(bad("transposed is yes or no")),
    };
    let g = Rearrangement::new(lines(rows)?, lines(columns)?, transposed)
        .ok_or_else(|| bad("rows and columns must permute 0-8 keeping bands (stacks) together"))?;
    if g == Rearrangement::IDENTITY {
        return Err(bad("the identity is the job `ed1 identity`"));
    }
    let (part, parts) = part.split_once('/').ok_or_else(|| bad("part is i/n"))?;
    let number = |text: &str| text.parse::<u64>().map_err(|_| bad("part and depth are numbers"));
    let (part, parts) = (number(part)?, number(parts)?);
    if part >= parts {
        return Err(bad("part i/n needs i < n"));
    }
    let depth = usize::try_from(number(depth)?).map_err(|_| bad("depth too large"))?;
    Ok(JobKey::Part(g, Split { depth, part, parts }))
}

/// Counts one job: its share of A for its class.
pub fn count_job(key: &str) -> Result<u128, ParseError> {
    Ok(match parse_key(key)? {
        JobKey::Identity => fixed_by_identity(),
        JobKey::Part(g, split) => u128::from(FixedCounter::new(g).count(split)),
    })
}

/// [`count_job`], or `Ok(None)` when `cancel` is set before the count is
/// done. (The identity's job takes a fraction of a second and is not cut.)
pub fn count_job_cancellable(key: &str, cancel: &AtomicBool) -> Result<Option<u128>, ParseError> {
    Ok(match parse_key(key)? {
        JobKey::Identity => Some(fixed_by_identity()).filter(|_| !cancel.load(Ordering::Relaxed)),
        JobKey::Part(g, split) => FixedCounter::new(g).count_cancellable(split, cancel).map(u128::from),
    })
}

/// A(1) = N0 / 9! = 72 x 72 x S, S from the census's own classes and counter.
fn fixed_by_identity() -> u128 {
    let counter = CounterKind::ColumnSets.build();
    let table = ClassTable::build(Stage::Russell);
    let s = s_from_classes(
        table.classes().iter().map(|class| (class.size, counter.count_seeds(&class.representative).iter().sum())),
    );
    u128::try_from(s * 72u32 * 72u32).expect("A(1) is about 1.8 x 10^16")
}

/// One class's term of Burnside's sum.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClassTerm {
    pub class: usize,
    /// The class size.
    pub size: u64,
    /// A(g) for g in the class: the sum of the class's job counts.
    pub fixed: u128,
}

/// The essentially different count and the terms it came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fold {
    /// (sum of size x A) / |G|.
    pub answer: BigUint,
    /// sum of size x A.
    pub sum: BigUint,
    /// One term per class, in class order.
    pub terms: Vec<ClassTerm>,
}

/// Why counts cannot be folded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FoldError {
    /// Not one count per job.
    CountsDoNotMatchJobs { jobs: usize, counts: usize },
    /// Two jobs of one class disagree on its size.
    SizesDisagree { class: usize },
    /// The sum is not a multiple of |G|, so some count is wrong.
    NotDivisible { sum: BigUint },
}

impl fmt::Display for FoldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FoldError::CountsDoNotMatchJobs { jobs, counts } => {
                write!(f, "{counts} counts for {jobs} jobs")
            }
            FoldError::SizesDisagree { class } => {
                write!(f, "jobs of class {class} disagree on its size")
            }
            FoldError::NotDivisible { sum } => {
                write!(f, "sum of size x A = {sum} is not a multiple of |G| = {GROUP_ORDER}")
            }
        }
    }
}

impl std::error::Error for FoldError {}

/// Burnside's lemma: adds the counts of each class's jobs into its A, then
/// returns (sum of size x A) / |G|, refusing a sum that |G| does not divide.
/// `counts[i]` is the count of `jobs[i]`.
pub fn fold(jobs: &[FixedJob], counts: &[u128]) -> Result<Fold, FoldError> {
    if jobs.len() != counts.len() {
        return Err(FoldError::CountsDoNotMatchJobs { jobs: jobs.len(), counts: counts.len() });
    }
    let mut terms: Vec<ClassTerm> = Vec::new();
    for (job, &count) in jobs.iter().zip(counts) {
        match terms.iter_mut().find(|term| term.class == job.class) {
            Some(term) if term.size != job.weight => {
                return Err(FoldError::SizesDisagree { class: job.class });
            }
            Some(term) => term.fixed += count,
            None => terms.push(ClassTerm { class: job.class, size: job.weight, fixed: count }),
        }
    }
    terms.sort_by_key(|term| term.class);
    let sum = terms.iter().fold(BigUint::zero(), |sum, term| sum + BigUint::from(term.size) * term.fixed);
    let order = BigUint::from(GROUP_ORDER);
    if !(&sum % &order).is_zero() {
        return Err(FoldError::NotDivisible { sum });
    }
    Ok(Fold { answer: &sum / &order, sum, terms })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip() {
        let g = Rearrangement::new([0, 2, 1, 3, 5, 4, 6, 8, 7], [0, 1, 2, 6, 7, 8, 3, 4, 5], false).unwrap();
        let split = Split { depth: 5, part: 3, parts: 64 };
        let key = job_key(g, split);
        assert_eq!(key, "ed1 rows=021354687 columns=012678345 transposed=no part=3/64 depth=5");
        assert_eq!(parse_key(&key), Ok(JobKey::Part(g, split)));
        assert_eq!(parse_key("ed1 identity"), Ok(JobKey::Identity));
    }

    #[test]
    fn bad_keys_are_refused() {
        for key in [
            "",
            "ed0 identity",
            "ed1 identity x",
            "ed1 rows=021354687 columns=012678345 transposed=no part=3/64",
            "ed1 rows=021354687 columns=012678345 transposed=no part=64/64 depth=5",
            "ed1 rows=021354687 columns=012678345 transposed=maybe part=3/64 depth=5",
            "ed1 rows=031254687 columns=012678345 transposed=no part=3/64 depth=5",
            "ed1 rows=02135468 columns=012678345 transposed=no part=3/64 depth=5",
            "ed1 rows=012345678 columns=012345678 transposed=no part=0/1 depth=0",
            "ed1 columns=012678345 rows=021354687 transposed=no part=3/64 depth=5",
        ] {
            assert!(parse_key(key).is_err(), "{key}");
            assert!(count_job(key).is_err(), "{key}");
        }
    }

    #[test]
    fn every_split_class_is_a_class_representative() {
        let classes = Group::new().conjugacy_classes();
        for (name, _) in PARTS.iter().chain(&COSTS[..COSTS.len() - 1]) {
            assert!(classes.classes().iter().any(|class| class.representative.to_string() == *name), "{name}");
        }
    }

    /// A job's cost is its class's, shared by its parts; the jobs of the
    /// listed classes are what their costs say (and they are most of it).
    #[test]
    fn job_costs_are_their_classes_shared_by_parts() {
        let jobs = jobs();
        let costs: Vec<u64> = jobs.iter().map(|job| job_cost(&job.key).unwrap()).collect();
        assert_eq!(job_cost("ed1 identity"), Ok(25));
        let transposed = "ed1 rows=012345678 columns=012345678 transposed=yes part=3/8 depth=10";
        assert_eq!(job_cost(transposed), Ok(25_250 / 8));
        assert_eq!(costs.iter().filter(|&&cost| cost > 1).count(), 8 + 11);
        let listed: u64 = COSTS.iter().map(|&(_, cost)| cost).sum();
        assert_eq!(costs.iter().sum::<u64>(), listed - 25_250 % 8 + (jobs.len() as u64 - 19));
        assert!(job_cost("ed1 nothing").is_err());
    }

    #[test]
    fn fold_refuses_a_sum_that_g_does_not_divide() {
        let jobs = [
            FixedJob { key: "a".into(), class: 0, weight: 1 },
            FixedJob { key: "b".into(), class: 1, weight: 3 },
            FixedJob { key: "c".into(), class: 1, weight: 3 },
        ];
        let fold = fold(&jobs, &[GROUP_ORDER as u128 - 6, 1, 1]).unwrap();
        assert_eq!(fold.answer, BigUint::from(1u32));
        assert_eq!(fold.terms[1], ClassTerm { class: 1, size: 3, fixed: 2 });
        assert!(matches!(super::fold(&jobs, &[1, 1, 1]), Err(FoldError::NotDivisible { .. })));
        assert!(matches!(super::fold(&jobs, &[1, 1]), Err(FoldError::CountsDoNotMatchJobs { .. })));
    }
}
