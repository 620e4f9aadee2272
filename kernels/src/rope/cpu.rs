//! The CPU twin of rope.cu (the formulas: [`super`]).

use super::RopeGrid;
use rayon::prelude::*;

/// `out` = `x` ([batch, tokens, heads · head_dim]) with every head of every patch token
/// rotated; prefix tokens copied.
pub fn rope(
    x: &[f32],
    tokens: usize,
    heads: usize,
    head_dim: usize,
    grid: &RopeGrid,
    out: &mut [f32],
) {
    let width = heads * head_dim;
    assert!(width > 0 && x.len() == out.len() && x.len().is_multiple_of(tokens * width));
    let half = head_dim / 2;
    out.par_chunks_mut(width)
        .zip(x.par_chunks(width))
        .enumerate()
        .for_each(|(row, (o, r))| {
            let token = row % tokens;
            if token < grid.prefix_tokens {
                o.copy_from_slice(r);
                return;
            }
            let patch = token - grid.prefix_tokens;
            for head in 0..heads {
                let base = head * head_dim;
                for d in 0..half {
                    let angle = grid.angle(head_dim, patch, d);
                    let (sin, cos) = (angle.sin(), angle.cos());
                    let (a, b) = (r[base + d], r[base + d + half]);
                    o[base + d] = a * cos - b * sin;
                    o[base + d + half] = b * cos + a * sin;
                }
            }
        });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grid(rows: usize, cols: usize) -> RopeGrid {
        RopeGrid {
            prefix_tokens: 1,
            rows,
            cols,
            theta: 100.0,
        }
    }

    #[test]
    fn the_first_frequency_follows_rows_then_columns() {
        // D = 8: frequencies 1 and 1/10; dims 0-1 take the row, 2-3 the column.
        let g = grid(2, 4);
        let tau = std::f32::consts::TAU;
        // Patch 5 = row 1, column 1: y = 2·1.5/2 − 1 = 0.5, x = 2·1.5/4 − 1 = −0.25.
        assert!((g.angle(8, 5, 0) - tau * 0.5).abs() < 1e-6);
        assert!((g.angle(8, 5, 1) - tau * 0.5 * 0.1).abs() < 1e-6);
        assert!((g.angle(8, 5, 2) + tau * 0.25).abs() < 1e-6);
        assert!((g.angle(8, 5, 3) + tau * 0.25 * 0.1).abs() < 1e-6);
        // The second half of the head repeats the first's angles.
        for d in 0..4 {
            assert_eq!(g.angle(8, 5, d), g.angle(8, 5, d + 4));
        }
    }

    #[test]
    fn patches_rotate_and_the_prefix_stays() {
        let g = grid(1, 2);
        let (tokens, heads, head_dim) = (3, 2, 8);
        let x: Vec<f32> = (0..tokens * heads * head_dim)
            .map(|i| i as f32 * 0.1 - 1.0)
            .collect();
        let mut out = vec![0.0; x.len()];
        rope(&x, tokens, heads, head_dim, &g, &mut out);
        assert_eq!(out[..16], x[..16], "the CLS token is copied");
        // A rotation keeps each pair's length.
        for token in 1..tokens {
            for head in 0..heads {
                let base = token * 16 + head * 8;
                for d in 0..4 {
                    let before = x[base + d].hypot(x[base + d + 4]);
                    let after = out[base + d].hypot(out[base + d + 4]);
                    assert!((before - after).abs() < 1e-5);
                }
                assert_ne!(out[base..base + 8], x[base..base + 8]);
            }
        }
    }

    #[test]
    fn the_grid_must_match_the_sequence() {
        let g = grid(2, 3);
        assert!(g.check(7, 64).is_ok());
        let e = g.check(8, 64).unwrap_err();
        assert!(e.contains("7") && e.contains("8"), "{e}");
        assert!(g.check(7, 66).unwrap_err().contains("divisible by 4"));
    }
}
