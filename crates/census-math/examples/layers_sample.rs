//! Measures the layer recurrence's emission rate on a sample of parents deep
//! in a layer that is too big to build here (2 x 6, layers 3 and 4):
//! `cargo run --release -p census-math --example layers_sample -- C LAYER PARENTS [SEED]`.
//!
//! Parents are drawn by random descent from the first layer (each step a
//! random emission, made canonical), so they are not uniform over the
//! layer's states: the mean fan-out is an estimate to compare with published
//! emission totals, not a count. For each parent it runs `layers::emit` and
//! sums the children by key (what a worker does) and reports the emissions,
//! the distinct children and the time, then the rate in emissions a second
//! on this one core; and the time of enumerating the same emissions without
//! canonicalising them (`layers::emission_count`), what a job that routes
//! children before canonicalising would repeat (docs/layers.md).

use std::collections::HashMap;
use std::time::Instant;

use census_math::shapes::layers::{self, MAX_SLOTS, Masks};

struct Rng(u64);

impl Rng {
    fn below(&mut self, m: usize) -> usize {
        self.0 = self.0.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        ((self.0 >> 33) % m as u64) as usize
    }
}

/// One random emission of `parent` (retried until no slot is left without
/// a mask to take it), canonical.
fn random_child(c: usize, parent: &Masks, rng: &mut Rng) -> Masks {
    let n = 2 * c;
    'retry: loop {
        let mut taken = [false; MAX_SLOTS];
        let mut child = [0u16; MAX_SLOTS];
        for v in 0..n {
            let box_bits = 3u16 << (v & !1);
            let free: Vec<usize> = (0..n).filter(|&i| !taken[i] && parent[i] & box_bits == 0).collect();
            if free.is_empty() {
                continue 'retry;
            }
            let i = free[rng.below(free.len())];
            taken[i] = true;
            child[i] = parent[i] | (1 << v);
        }
        child[..n].sort_unstable();
        return layers::canonical(c, &child).0;
    }
}

fn main() {
    let args: Vec<u64> = std::env::args().skip(1).map(|a| a.parse().expect("numbers")).collect();
    let [c, layer, parents] = args[..3] else { panic!("usage: layers_sample C LAYER PARENTS [SEED]") };
    let (c, layer) = (c as usize, layer as usize);
    assert!(layer >= 1 && layer < c, "LAYER must be 1..C-1: its children are what is timed");
    let mut rng = Rng(args.get(3).copied().unwrap_or(1));
    let first = layers::first_layer(c).unwrap().states()[0].0;
    let (mut emissions, mut distinct, mut seconds, mut enumerating) = (0u64, 0usize, 0f64, 0f64);
    for p in 0..parents {
        let mut parent = first;
        for _ in 1..layer {
            parent = random_child(c, &parent, &mut rng);
        }
        let started = Instant::now();
        let mut sums: HashMap<Masks, u128, rustc_hash::FxBuildHasher> = HashMap::default();
        let never = std::sync::atomic::AtomicBool::new(false);
        let count = layers::emit(c, &parent, 1, &never, &mut |child, w| *sums.entry(child).or_insert(0) += w).unwrap();
        let elapsed = started.elapsed().as_secs_f64();
        println!("parent {p}: {count} emissions, {} distinct children, {elapsed:.3} s", sums.len());
        emissions += count;
        distinct += sums.len();
        seconds += elapsed;
        let started = Instant::now();
        assert_eq!(layers::emission_count(c, &parent, &never), Ok(count));
        enumerating += started.elapsed().as_secs_f64();
    }
    println!(
        "2x{c} layer {layer} -> {}: {parents} parents, mean fan-out {:.0}, {:.0} distinct children a parent, \
         {:.0} ns an emission, {:.3e} emissions a second on one core",
        layer + 1,
        emissions as f64 / parents as f64,
        distinct as f64 / parents as f64,
        seconds * 1e9 / emissions as f64,
        emissions as f64 / seconds
    );
    println!(
        "enumerating alone (no canonical form): {:.0} ns an emission, {:.1} % of an emission",
        enumerating * 1e9 / emissions as f64,
        100.0 * enumerating / seconds
    );
}
