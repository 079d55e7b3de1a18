//! A plain backtracker over whole grids, to cross-check the two-band count
//! on the small shapes by a path that shares nothing with it.

/// Grids with boxes of `rows` x `cols` cells (side rows x cols): the first row
/// is fixed to 1..n and the completions are multiplied by the n! relabellings.
pub(super) fn grids(rows: usize, cols: usize) -> u128 {
    let n = rows * cols;
    let mut grid = vec![0usize; n * n];
    for (i, cell) in grid.iter_mut().take(n).enumerate() {
        *cell = i;
    }
    let mut row_used = vec![0u32; n];
    let mut col_used = vec![0u32; n];
    let mut box_used = vec![0u32; n];
    let box_of = |r: usize, c: usize| (r / rows) * rows + c / cols;
    for c in 0..n {
        row_used[0] |= 1 << c;
        col_used[c] |= 1 << c;
        box_used[box_of(0, c)] |= 1 << c;
    }
    let mut count = 0u128;
    let mut stack = vec![(n, 0usize)];
    // An explicit stack: (cell, next digit to try at that cell).
    while let Some((cell, digit)) = stack.pop() {
        if cell == n * n {
            count += 1;
            continue;
        }
        let (r, c) = (cell / n, cell % n);
        if digit > 0 {
            let old = grid[cell];
            row_used[r] &= !(1 << old);
            col_used[c] &= !(1 << old);
            box_used[box_of(r, c)] &= !(1 << old);
        }
        let taken = row_used[r] | col_used[c] | box_used[box_of(r, c)];
        if let Some(d) = (digit..n).find(|d| taken & (1 << d) == 0) {
            grid[cell] = d;
            row_used[r] |= 1 << d;
            col_used[c] |= 1 << d;
            box_used[box_of(r, c)] |= 1 << d;
            stack.push((cell, d + 1));
            stack.push((cell + 1, 0));
        }
    }
    count * (1..=n as u128).product::<u128>()
}

#[cfg(test)]
mod tests {
    use super::super::grids as two_band_grids;
    use super::*;

    #[test]
    fn brute_force_agrees_with_two_bands() {
        assert_eq!(grids(2, 2), 288);
        assert_eq!(grids(2, 2).to_string(), two_band_grids(2).unwrap().to_string());
        let six = two_band_grids(3).unwrap().to_string();
        assert_eq!(grids(2, 3).to_string(), six);
        assert_eq!(grids(3, 2).to_string(), six);
    }
}
