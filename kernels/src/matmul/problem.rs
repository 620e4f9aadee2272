//! What a matmul computes: [`MatmulProblem`] (extents, operand views, B's layout) and its
//! fused [`Epilogue`]. Shared by the CPU twin and the GPU launcher.

use crate::types::{Activation, Operand};

/// What a matmul does to its fp32 accumulator before the store:
/// `out = act(alpha * acc + bias[col]) + residual[row, col]`, then a cast to the output dtype.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Epilogue {
    pub alpha: f32,
    pub bias: bool,
    pub activation: Activation,
    pub residual: bool,
}

impl Epilogue {
    pub const NONE: Epilogue = Epilogue {
        alpha: 1.0,
        bias: false,
        activation: Activation::None,
        residual: false,
    };

    pub fn apply(&self, acc: f32, bias: Option<f32>, residual: Option<f32>) -> f32 {
        let mut v = self.alpha * acc + bias.unwrap_or(0.0);
        v = self.activation.apply(v);
        v + residual.unwrap_or(0.0)
    }
}

/// How the second operand is stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WeightLayout {
    /// `B[n, k]`: an nn.Linear weight, or K in `Q·Kᵀ`. C = A·Bᵀ.
    NK,
    /// `B[k, n]`: V in `P·V`. C = A·B.
    KN,
}

/// A batched, strided matmul: for every (batch, head),
/// `C[m, n] = epilogue(sum_k A[m, k] * B(k, n))`, where B is read as its layout says.
/// `bias` (length n) and `residual` (read through the operand `r`, which may broadcast over
/// batch with a zero stride) are optional epilogue inputs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MatmulProblem {
    pub batch: usize,
    pub heads: usize,
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub a: Operand,
    pub b: Operand,
    pub b_layout: WeightLayout,
    pub c: Operand,
    /// Where the residual is read, when `epilogue.residual` is set.
    pub r: Operand,
    pub epilogue: Epilogue,
}

impl MatmulProblem {
    /// `C[m, n] = epilogue(A[m, k] · W[n, k]ᵀ)`, all contiguous: an nn.Linear.
    pub fn linear(m: usize, n: usize, k: usize, epilogue: Epilogue) -> MatmulProblem {
        MatmulProblem {
            batch: 1,
            heads: 1,
            m,
            n,
            k,
            a: Operand::contiguous(k),
            b: Operand::contiguous(k),
            b_layout: WeightLayout::NK,
            c: Operand::contiguous(n),
            r: Operand::contiguous(n),
            epilogue,
        }
    }

    /// Checks that every operand fits its buffer, so kernels can index without bounds checks.
    pub fn check_bounds(
        &self,
        a_len: usize,
        b_len: usize,
        c_len: usize,
        bias_len: Option<usize>,
        residual_len: Option<usize>,
    ) -> Result<(), String> {
        let (b_rows, b_cols) = match self.b_layout {
            WeightLayout::NK => (self.n, self.k),
            WeightLayout::KN => (self.k, self.n),
        };
        let checks = [
            (
                "A",
                self.a.extent(self.batch, self.heads, self.m, self.k),
                Some(a_len),
            ),
            (
                "B",
                self.b.extent(self.batch, self.heads, b_rows, b_cols),
                Some(b_len),
            ),
            (
                "C",
                self.c.extent(self.batch, self.heads, self.m, self.n),
                Some(c_len),
            ),
        ];
        for (name, need, have) in checks {
            if let Some(have) = have {
                if need > have {
                    return Err(format!(
                        "matmul operand {name} needs {need} elements, buffer has {have}"
                    ));
                }
            }
        }
        if self.epilogue.bias {
            match bias_len {
                Some(len) if len >= self.n => {}
                Some(len) => {
                    return Err(format!("matmul bias needs {} elements, has {len}", self.n))
                }
                None => return Err("matmul epilogue wants a bias and none was given".into()),
            }
        }
        if self.epilogue.residual {
            let need = self.r.extent(self.batch, self.heads, self.m, self.n);
            match residual_len {
                Some(len) if len >= need => {}
                Some(len) => {
                    return Err(format!("matmul residual needs {need} elements, has {len}"))
                }
                None => return Err("matmul epilogue wants a residual and none was given".into()),
            }
        }
        Ok(())
    }

    /// The patch-embedding projection: patch rows `[B, N, C·P·P]` times the conv weight
    /// `[hidden, C·P·P]`, with the bias and the position embeddings of tokens S.. (the
    /// residual, broadcast over the batch) added in the epilogue, written straight into token
    /// rows S.. of `[B, S+N, hidden]`; the S prefix rows of each image (CLS and the like) are
    /// left alone.
    pub fn patch_projection(
        batch: usize,
        prefix_rows: usize,
        patches: usize,
        patch_len: usize,
        hidden: usize,
    ) -> MatmulProblem {
        let tokens = prefix_rows + patches;
        let token_rows = |batch_stride| Operand {
            offset: prefix_rows * hidden,
            row_stride: hidden,
            batch_stride,
            head_stride: 0,
        };
        MatmulProblem {
            batch,
            heads: 1,
            m: patches,
            n: hidden,
            k: patch_len,
            a: Operand {
                offset: 0,
                row_stride: patch_len,
                batch_stride: patches * patch_len,
                head_stride: 0,
            },
            b: Operand::contiguous(patch_len),
            b_layout: WeightLayout::NK,
            c: token_rows(tokens * hidden),
            r: token_rows(0),
            epilogue: Epilogue {
                bias: true,
                residual: true,
                ..Epilogue::NONE
            },
        }
    }

    pub fn flops(&self) -> f64 {
        2.0 * (self.batch * self.heads * self.m * self.n * self.k) as f64
    }
}
