//! The parameters a graph reads, each made from checkpoint tensors by a [`Recipe`]: most are a
//! tensor as stored; some are prepared once at load so that the graph needs no op for them
//! (DINOv2's layer scale folded into the matmul before it, DeiT's halved heads, the prefix
//! tokens stacked, the position table assembled and resampled for the input size).

use crate::positions::{resample_grid, Resampling};
use vitrt_weights::{Checkpoint, WeightsError};

/// How a parameter is made from checkpoint tensors. Every tensor named is read as f32 in its
/// stored shape; the recipe says how the values combine.
#[derive(Clone, Debug, PartialEq)]
pub enum Recipe {
    Tensor(String),
    /// `len` zeros (CLIP's patch projection has no bias).
    Zeros(usize),
    /// Rows `start..start + len` of a tensor of rows `cols` long (a 1-D tensor: `cols` 1):
    /// one of Q, K, V out of a stacked in-projection.
    Rows {
        tensor: String,
        cols: usize,
        start: usize,
        len: usize,
    },
    /// Columns `start..start + len` of a `[rows, cols]` tensor: one half of DINOv2's
    /// classifier, which reads the CLS token and the patch mean side by side.
    Columns {
        tensor: String,
        cols: usize,
        start: usize,
        len: usize,
    },
    /// The transpose of a `[rows, cols]` tensor: open_clip's projections, stored as the
    /// `[in, out]` matrix of `x @ W`, as the `[out, in]` weight of a linear layer.
    Transposed {
        tensor: String,
        rows: usize,
        cols: usize,
    },
    /// Every value times `factor` (an exact power of two where used: DeiT's two heads halved).
    Scaled {
        tensor: String,
        factor: f32,
    },
    /// Row `r` of a tensor of rows `cols` long times `scale[r]` (1-D: element-wise):
    /// `λ·(W·x + b)` as `(diag(λ)·W)·x + λ·b`, DINOv2's layer scale folded into the matmul.
    ScaledRows {
        tensor: String,
        scale: String,
        cols: usize,
    },
    /// Tensors one after the other (the prefix tokens; SwiGLU's gate and up projections).
    Stack(Vec<String>),
    /// A projection whose output rows (Q, K or V: `heads` groups of `head_dim` rows of
    /// `cols`) get zero rows up to `padded` per head: attention then runs at a head dim its
    /// fused kernel takes, with the same scores and outputs (SigLIP so400m's 72 as 80).
    PadHeadRows {
        tensor: String,
        heads: usize,
        head_dim: usize,
        padded: usize,
        cols: usize,
    },
    /// The output projection's weight `[rows, heads·head_dim]` with zero columns up to
    /// `padded` per head, to read a context of padded heads.
    PadHeadColumns {
        tensor: String,
        heads: usize,
        head_dim: usize,
        padded: usize,
    },
    /// The position table for the input size.
    Positions(PositionTable),
    /// AIMv2's fixed position table for a `grid` of (rows, cols) patches, `hidden` wide
    /// ([`sincos_positions`]); it reads no tensor.
    SinCos2d {
        grid: (usize, usize),
        hidden: usize,
    },
    /// Another recipe's values `times` over, one after the other: a `[T, hidden]` table for
    /// each image of a batch, where it is added after the patch embedding's norm (AIMv2).
    Repeated {
        recipe: Box<Recipe>,
        times: usize,
    },
}

/// AIMv2's 2-D sin-cos position table (`build_2d_sinusoidal_position_embedding` with the
/// halves swapped, as `Aimv2VisionEmbeddings` uses it for `is_native` checkpoints): for the
/// patch at (row h, column w) of a `(rows, cols)` grid, with `D = hidden / 4` and
/// `ω_i = 10000^(-i / D)`, the row is `[sin(w·ω) | cos(w·ω) | sin(h·ω) | cos(h·ω)]`, the
/// patches in row-major order. Computed in f64 as transformers computes it, then rounded to
/// f32. `hidden` must be a multiple of 4 (the family's config reader checks).
pub fn sincos_positions((rows, cols): (usize, usize), hidden: usize) -> Vec<f32> {
    let quarter = hidden / 4;
    let omega: Vec<f64> = (0..quarter)
        .map(|i| 1.0 / 10000f64.powf(i as f64 / quarter as f64))
        .collect();
    let mut out = Vec::with_capacity(rows * cols * hidden);
    for h in 0..rows {
        for w in 0..cols {
            for position in [w as f64, h as f64] {
                out.extend(omega.iter().map(|o| (position * o).sin() as f32));
                out.extend(omega.iter().map(|o| (position * o).cos() as f32));
            }
        }
    }
    out
}

/// A position table laid out for the graph: the prefix tokens' positions, zeros for tokens
/// that have none (DINOv2's registers), then the patch grid, resampled when the input's grid
/// differs from the table's.
#[derive(Clone, Debug, PartialEq)]
pub struct PositionTable {
    pub tensor: String,
    pub hidden: usize,
    /// Rows of the table before its grid (the CLS position; DeiT's two; none in SigLIP).
    pub table_prefix: usize,
    /// Zero rows after them.
    pub zero_rows: usize,
    pub table_grid: (usize, usize),
    pub input_grid: (usize, usize),
    pub resampling: Resampling,
}

impl Recipe {
    /// The parameter's values.
    pub fn make(&self, checkpoint: &Checkpoint) -> Result<Vec<f32>, WeightsError> {
        let load = |name: &str| checkpoint.load_f32(name);
        Ok(match self {
            Recipe::Tensor(t) => load(t)?,
            Recipe::Zeros(len) => vec![0.0; *len],
            Recipe::Rows {
                tensor,
                cols,
                start,
                len,
            } => load(tensor)?[start * cols..(start + len) * cols].to_vec(),
            Recipe::Columns {
                tensor,
                cols,
                start,
                len,
            } => load(tensor)?
                .chunks(*cols)
                .flat_map(|row| row[*start..start + len].iter().copied())
                .collect(),
            Recipe::Transposed { tensor, rows, cols } => {
                let values = load(tensor)?;
                (0..*cols)
                    .flat_map(|c| (0..*rows).map(move |r| (r, c)))
                    .map(|(r, c)| values[r * cols + c])
                    .collect()
            }
            Recipe::Scaled { tensor, factor } => {
                load(tensor)?.into_iter().map(|v| v * factor).collect()
            }
            Recipe::ScaledRows {
                tensor,
                scale,
                cols,
            } => {
                let scale = load(scale)?;
                let mut values = load(tensor)?;
                for (row, s) in values.chunks_mut(*cols).zip(&scale) {
                    row.iter_mut().for_each(|v| *v *= s);
                }
                values
            }
            Recipe::Stack(tensors) => {
                let mut values = Vec::new();
                for t in tensors {
                    values.extend(load(t)?);
                }
                values
            }
            Recipe::Positions(p) => p.make(&load(&p.tensor)?),
            Recipe::SinCos2d { grid, hidden } => sincos_positions(*grid, *hidden),
            Recipe::Repeated { recipe, times } => recipe.make(checkpoint)?.repeat(*times),
            Recipe::PadHeadRows {
                tensor,
                heads,
                head_dim,
                padded,
                cols,
            } => {
                let values = load(tensor)?;
                let mut out = vec![0.0; heads * padded * cols];
                for h in 0..*heads {
                    let from = &values[h * head_dim * cols..(h + 1) * head_dim * cols];
                    out[h * padded * cols..][..head_dim * cols].copy_from_slice(from);
                }
                out
            }
            Recipe::PadHeadColumns {
                tensor,
                heads,
                head_dim,
                padded,
            } => {
                let values = load(tensor)?;
                let width = heads * head_dim;
                let mut out = Vec::with_capacity(values.len() / width * heads * padded);
                for row in values.chunks(width) {
                    for head in row.chunks(*head_dim) {
                        out.extend_from_slice(head);
                        out.resize(out.len() + padded - head_dim, 0.0);
                    }
                }
                out
            }
        })
    }
}

impl PositionTable {
    pub fn rows(&self) -> usize {
        self.table_prefix + self.zero_rows + self.input_grid.0 * self.input_grid.1
    }

    fn make(&self, table: &[f32]) -> Vec<f32> {
        let d = self.hidden;
        let (prefix, grid) = table.split_at(self.table_prefix * d);
        let mut out = prefix.to_vec();
        out.resize(out.len() + self.zero_rows * d, 0.0);
        if self.input_grid == self.table_grid {
            out.extend_from_slice(grid);
        } else {
            out.extend(resample_grid(
                grid,
                self.table_grid,
                self.input_grid,
                d,
                self.resampling,
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transposed_tensors_swap_rows_and_columns() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.safetensors");
        let values: Vec<f32> = (0..6).map(|v| v as f32).collect();
        vitrt_weights::write_f32_tensors(&path, &[("w".into(), vec![2, 3], values)]).unwrap();
        let checkpoint = Checkpoint::open(&path).unwrap();
        let recipe = Recipe::Transposed {
            tensor: "w".into(),
            rows: 2,
            cols: 3,
        };
        assert_eq!(
            recipe.make(&checkpoint).unwrap(),
            vec![0.0, 3.0, 1.0, 4.0, 2.0, 5.0]
        );
    }

    /// The table at a few points against its definition: the column's sines and cosines
    /// first, then the row's; patch (0, 0) is [0, 1] per frequency.
    #[test]
    fn sincos_positions_put_the_column_first() {
        let (rows, cols, hidden) = (3, 5, 16);
        let table = sincos_positions((rows, cols), hidden);
        assert_eq!(table.len(), rows * cols * hidden);
        let quarter = hidden / 4;
        assert_eq!(&table[..quarter], &[0.0; 4]);
        assert_eq!(&table[quarter..2 * quarter], &[1.0; 4]);
        let (h, w) = (2usize, 3usize);
        let row = &table[(h * cols + w) * hidden..][..hidden];
        for i in 0..quarter {
            let omega = 10000f64.powf(-(i as f64) / quarter as f64);
            let want = [
                (w as f64 * omega).sin(),
                (w as f64 * omega).cos(),
                (h as f64 * omega).sin(),
                (h as f64 * omega).cos(),
            ];
            for (part, want) in want.into_iter().enumerate() {
                assert_eq!(row[part * quarter + i], want as f32, "part {part}, i {i}");
            }
        }
    }

    #[test]
    fn position_tables_keep_the_prefix_and_zero_the_registers() {
        let table = PositionTable {
            tensor: String::new(),
            hidden: 2,
            table_prefix: 1,
            zero_rows: 2,
            table_grid: (2, 2),
            input_grid: (2, 2),
            resampling: Resampling::Bicubic,
        };
        let values: Vec<f32> = (0..10).map(|v| v as f32).collect();
        let made = table.make(&values);
        assert_eq!(made.len(), table.rows() * 2);
        assert_eq!(&made[..2], &[0.0, 1.0]);
        assert_eq!(&made[2..6], &[0.0; 4]);
        assert_eq!(&made[6..], &values[2..]);
    }
}
