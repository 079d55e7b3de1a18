//! The choices of a group's first two stacks up to the relabellings of
//! the digits that keep its first r - 1 stacks.
//!
//! A relabelling σ that keeps each of those stacks' splits (exchanging
//! columns within a stack as it may) maps the choices of each of them onto
//! themselves, and leaves b unchanged. So the terms of a choice σx of the
//! first two stacks are the terms of x with each member's last stack
//! relabelled by σ⁻¹: the rows x reads are read once for its whole orbit,
//! and each orbit element only moves the members' terms
//! ([`super::group`]). The orbits are taken up to the middle / bottom
//! swap, which commutes with every σ.

use super::{MAX_DIGITS, MAX_R, Perm, Splits, stack_moves};

/// The relabelling that changes nothing.
pub(super) const IDENTITY: Perm = {
    let mut perm = [0u8; MAX_DIGITS];
    let mut d = 0;
    while d < MAX_DIGITS {
        perm[d] = d as u8;
        d += 1;
    }
    perm
};

/// Generators of the relabellings that keep the splits of each of the
/// first `stacks` stacks of `top` (each digit's columns): the exchanges of
/// two digits with the same columns there, and one relabelling for each
/// order of each stack's columns that maps the digits' column vectors onto
/// themselves.
pub(super) fn symmetries(top: &[[u8; MAX_R]], stacks: usize) -> Vec<Perm> {
    let n = top.len();
    let head = |v: &[u8; MAX_R]| -> [u8; MAX_R] { std::array::from_fn(|s| if s < stacks { v[s] } else { 0 }) };
    let mut out = Vec::new();
    for d in 0..n {
        if let Some(e) = (d + 1..n).find(|&e| head(&top[e]) == head(&top[d])) {
            let mut swap = IDENTITY;
            swap.swap(d, e);
            out.push(swap);
        }
    }
    let orders = super::super::PERMUTATIONS;
    let mut sorted: Vec<[u8; MAX_R]> = top.iter().map(head).collect();
    sorted.sort_unstable();
    for choice in 1..orders.len().pow(stacks as u32) {
        let order = |s: usize| orders[choice / orders.len().pow(s as u32) % orders.len()];
        let image = |v: &[u8; MAX_R]| -> [u8; MAX_R] {
            std::array::from_fn(|s| if s < stacks { order(s)[usize::from(v[s])] } else { 0 })
        };
        let mut images: Vec<[u8; MAX_R]> = sorted.iter().map(image).collect();
        images.sort_unstable();
        if images != sorted {
            continue;
        }
        // Digit d goes to an unused digit whose columns are d's moved.
        let mut used = [false; MAX_DIGITS];
        let mut perm = IDENTITY;
        for d in 0..n {
            let to =
                (0..n).find(|&e| !used[e] && head(&top[e]) == image(&top[d])).expect("a permutation of the vectors");
            used[to] = true;
            perm[d] = to as u8;
        }
        out.push(perm);
    }
    out
}

/// σ after τ: digit d goes to σ[τ[d]].
pub(super) fn compose(sigma: &Perm, tau: &Perm) -> Perm {
    std::array::from_fn(|d| sigma[usize::from(tau[d])])
}

/// σ⁻¹ (of the first n digits; the rest stay).
pub(super) fn inverse(sigma: &Perm, n: usize) -> Perm {
    let mut back = IDENTITY;
    for d in 0..n {
        back[usize::from(sigma[d])] = d as u8;
    }
    back
}

/// The splits reached from `met` by the relabellings `generators`
/// generate, `met` among them, ascending.
pub(super) fn closure(splits: &Splits, met: &[u16], generators: &[Perm]) -> Vec<u16> {
    let renamers: Vec<_> = generators.iter().map(|g| splits.renamer(g)).collect();
    let mut reached = vec![false; splits.count()];
    let mut queue: Vec<u16> = met.to_vec();
    for &y in met {
        reached[usize::from(y)] = true;
    }
    while let Some(y) = queue.pop() {
        for renamer in &renamers {
            let z = renamer.apply(y);
            if !reached[usize::from(z)] {
                reached[usize::from(z)] = true;
                queue.push(z);
            }
        }
    }
    (0..splits.count() as u16).filter(|&y| reached[usize::from(y)]).collect()
}

/// An orbit of the choices of the first two stacks: the choice standing
/// for it (its index among each stack's choices, the first stack's
/// choice with its middle columns first) and, for each choice of the
/// orbit, a relabelling that takes the standing one there (identity first).
pub(super) struct Orbit {
    pub(super) first: usize,
    pub(super) second: usize,
    pub(super) images: Vec<Perm>,
}

/// The orbits of the choices of stacks 0 and 1 of `top` (each digit's
/// columns) under `generators`, up to the middle / bottom swap, in the
/// order of their standing choices; `first[i]` says whether stack 0's
/// choice i (in the order of [`stack_moves`]) has its middle columns
/// first.
pub(super) fn orbits(r: usize, top: &[[u8; MAX_R]], first: &[bool], generators: &[Perm]) -> Vec<Orbit> {
    let n = top.len();
    let all = ((1u32 << n) - 1) as u16;
    let stack = |s: usize| -> Vec<u8> { top.iter().map(|v| v[s]).collect() };
    let (columns, moves): (Vec<Vec<u8>>, Vec<Vec<u16>>) = (0..2)
        .map(|s| {
            let column = stack(s);
            let moves = stack_moves(r, &column);
            (column, moves)
        })
        .unzip();
    let index: Vec<Vec<u16>> = moves
        .iter()
        .map(|list| {
            let mut index = vec![u16::MAX; 1 << n];
            for (i, &m) in list.iter().enumerate() {
                index[usize::from(m)] = i as u16;
            }
            index
        })
        .collect();
    // Each generator's action on each stack's choices, by index: digit d's
    // move goes to σ(d), reversed when σ exchanges two of the stack's
    // columns (one right becomes two right).
    let act = |g: &Perm, s: usize| -> Vec<u16> {
        let column = &columns[s];
        let to = |c: u8| column[usize::from(g[column.iter().position(|&x| x == c).expect("r digits a column")])];
        let fixed = (0..3u8).filter(|&c| to(c) == c).count();
        let flip = if fixed == 1 { all } else { 0 };
        moves[s]
            .iter()
            .map(|&m| {
                let moved = (0..n).filter(|&d| m & (1 << d) != 0).fold(0u16, |acc, d| acc | 1 << g[d]);
                index[s][usize::from(moved ^ flip)]
            })
            .collect()
    };
    let actions: Vec<[Vec<u16>; 2]> = generators.iter().map(|g| [act(g, 0), act(g, 1)]).collect();
    let (n0, n1) = (moves[0].len(), moves[1].len());
    let swap = |s: usize, i: usize| index[s][usize::from(moves[s][i] ^ all)];
    let canonical = |i0: usize, i1: usize| -> (usize, usize) {
        if first[i0] { (i0, i1) } else { (usize::from(swap(0, i0)), usize::from(swap(1, i1))) }
    };
    let mut seen = vec![false; n0 * n1];
    let mut out = Vec::new();
    for i0 in (0..n0).filter(|&i| first[i]) {
        for i1 in 0..n1 {
            if seen[i0 * n1 + i1] {
                continue;
            }
            seen[i0 * n1 + i1] = true;
            let mut members = vec![(i0, i1, IDENTITY)];
            let mut at = 0;
            while at < members.len() {
                let (a, b, sigma) = members[at];
                at += 1;
                for (g, [act0, act1]) in generators.iter().zip(&actions) {
                    let (c, d) = canonical(usize::from(act0[a]), usize::from(act1[b]));
                    if !seen[c * n1 + d] {
                        seen[c * n1 + d] = true;
                        members.push((c, d, compose(g, &sigma)));
                    }
                }
            }
            out.push(Orbit { first: i0, second: i1, images: members.into_iter().map(|(_, _, sigma)| sigma).collect() });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::three_bands::Pattern;

    /// The middle band's columns of stack `s` for a choice's moves.
    fn middle(top: &[[u8; MAX_R]], s: usize, moves: u16) -> Vec<u8> {
        top.iter().enumerate().map(|(d, v)| (v[s] + super::super::shift(moves, d)) % 3).collect()
    }

    /// For tops with many symmetries and few: each generator keeps the
    /// first three stacks' splits; the orbits cover every choice of the
    /// first two stacks once up to the swap; and each image, applied to the
    /// standing choice's columns digit by digit, gives a choice of the
    /// orbit (checked on the columns, not on the moves the orbits follow).
    #[test]
    fn orbits_cover_the_choices_once_by_their_images() {
        let keys = [
            "0000.0000.0000.0000.1111.1111.1111.1111.2222.2222.2222.2222",
            "0000.0000.0111.0222.1012.1111.1120.1201.2021.2102.2210.2222",
            "0000.0011.0102.0221.1012.1101.1110.1222.2020.2122.2201.2210",
        ];
        let mut sizes = Vec::new();
        for key in keys {
            let top = Pattern::parse(4, key).unwrap().digit_vectors();
            let generators = symmetries(&top, 3);
            for g in &generators {
                // Digits sharing a column go to digits sharing a column.
                let column = |d: usize, s: usize| top[d][s];
                let kept = |s: usize| {
                    (0..12).all(|d| {
                        (0..12).all(|e| {
                            let (a, b) = (usize::from(g[d]), usize::from(g[e]));
                            (column(d, s) == column(e, s)) == (column(a, s) == column(b, s))
                        })
                    })
                };
                assert!((0..3).all(kept), "{key}: {g:?}");
            }
            let moves: Vec<Vec<u16>> =
                (0..2).map(|s| stack_moves(4, &top.iter().map(|v| v[s]).collect::<Vec<_>>())).collect();
            let first: Vec<bool> = moves[0].iter().map(|&m| middle(&top, 0, m) < middle(&top, 0, m ^ 0xfff)).collect();
            let orbits = orbits(4, &top, &first, &generators);
            let mut covered = std::collections::HashSet::new();
            for orbit in &orbits {
                let standing = [moves[0][orbit.first], moves[1][orbit.second]];
                assert_eq!(orbit.images[0], IDENTITY);
                for sigma in &orbit.images {
                    // σ moves digit d, with its middle column, to σ(d) in
                    // σ's order of the stack's columns.
                    let image: Vec<Vec<u8>> = (0..2)
                        .map(|s| {
                            let columns = middle(&top, s, standing[s]);
                            let to = |c: u8| {
                                let d = top.iter().position(|v| v[s] == c).unwrap();
                                top[usize::from(sigma[d])][s]
                            };
                            let mut out = vec![0u8; 12];
                            for d in 0..12 {
                                out[usize::from(sigma[d])] = to(columns[d]);
                            }
                            out
                        })
                        .collect();
                    let index = |s: usize, columns: &[u8]| {
                        moves[s].iter().position(|&m| middle(&top, s, m) == columns).expect("a choice")
                    };
                    let (mut i0, mut i1) = (index(0, &image[0]), index(1, &image[1]));
                    if !first[i0] {
                        let swapped = |s: usize, i: usize| index(s, &middle(&top, s, moves[s][i] ^ 0xfff));
                        (i0, i1) = (swapped(0, i0), swapped(1, i1));
                    }
                    assert!(covered.insert((i0, i1)), "{key}: choice ({i0}, {i1}) met twice");
                }
            }
            assert_eq!(covered.len(), 346 * 346 / 2, "{key}");
            sizes.push(orbits.len());
        }
        // The alike top has the most symmetries, the other two few.
        assert!(sizes[0] < sizes[1] && sizes[0] < sizes[2], "{sizes:?}");
    }

    /// The closure of two splits holds them and is closed under each generator.
    #[test]
    fn closure_is_closed() {
        let splits = Splits::new(4);
        let top =
            Pattern::parse(4, "0000.0011.0102.0221.1012.1101.1110.1222.2020.2122.2201.2210").unwrap().digit_vectors();
        let generators = symmetries(&top, 3);
        let closed = closure(&splits, &[5, 77], &generators);
        assert!(closed.contains(&5) && closed.contains(&77));
        for g in &generators {
            let renamer = splits.renamer(g);
            assert!(closed.iter().all(|&y| closed.binary_search(&renamer.apply(y)).is_ok()));
        }
    }
}
