//! The CPU twin of add.cu: one program per chunk.

use rayon::prelude::*;

/// `out = a + b`, element by element.
pub fn add(a: &[f32], b: &[f32], out: &mut [f32]) {
    assert!(a.len() == b.len() && out.len() == a.len());
    out.par_chunks_mut(1 << 14)
        .zip(a.par_chunks(1 << 14).zip(b.par_chunks(1 << 14)))
        .for_each(|(o, (a, b))| {
            for ((o, x), y) in o.iter_mut().zip(a).zip(b) {
                *o = x + y;
            }
        });
}
