//! What `vitrt bench kernels` times: the ViT-B/16 shapes at batch 1, 8, 64 and 256 for every
//! op the model runs, and square matmuls for the matmul's own range. Each case knows its
//! shape, its work (FLOPs) or its traffic (bytes), and nothing about the GPU.

use vitrt_kernels::DType;

/// ViT-B/16 at 224x224: 196 patches of 16x16x3 and the CLS token, 12 heads of 64.
pub const TOKENS: usize = 197;
pub const HIDDEN: usize = 768;
pub const MLP: usize = 3072;
pub const HEADS: usize = 12;
pub const HEAD_DIM: usize = 64;
pub const IMAGE: usize = 224;
pub const PATCH: usize = 16;
pub const CHANNELS: usize = 3;

pub const BATCHES: [usize; 4] = [1, 8, 64, 256];
pub const SQUARES: [usize; 6] = [256, 512, 1024, 2048, 4096, 8192];

/// The four linear layers of a ViT-B/16 block: (name, N, K).
pub const LINEARS: [(&str, usize, usize); 4] = [
    ("qkv", 3 * HIDDEN, HIDDEN),
    ("proj", HIDDEN, HIDDEN),
    ("fc1", MLP, HIDDEN),
    ("fc2", HIDDEN, MLP),
];

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `C[m, n] = A[m, k] · W[n, k]ᵀ`, with and without bias + GELU.
    Matmul {
        m: usize,
        n: usize,
        k: usize,
    },
    /// The same product with e4m3 A and W (per-row and per-channel scales, C in the run's
    /// 16-bit dtype), with and without bias + GELU, beside cuBLASLt's FP8 GEMM and our 16-bit
    /// program on the same shape (provider `vitrt-16bit`).
    Fp8Matmul {
        m: usize,
        n: usize,
        k: usize,
    },
    /// A linear layer a layernorm feeds, with the layernorm folded in (the ping-pong
    /// program's layernorm entry: raw rows, folded weights, bias and column sums; bias, and
    /// GELU where `gelu`), beside our layernorm then our matmul on the same shape (provider
    /// `vitrt-unfused`): the two kernels it replaces.
    LayernormMatmul {
        m: usize,
        n: usize,
        k: usize,
        gelu: bool,
    },
    /// A linear layer that writes a 16-bit residual stream (proj, fc2: bias and residual)
    /// and each row's statistics beside it, for the layernorm-folded matmul that reads the
    /// stream next (`matmul::gpu::matmul_with_row_statistics`), beside the same residual
    /// matmul without them on the same tile (provider `vitrt-plain`): the statistics' cost.
    RowStatsMatmul {
        m: usize,
        n: usize,
        k: usize,
    },
    LayerNorm {
        rows: usize,
        cols: usize,
    },
    /// AIMv2's RMSNorm over the same rows as the layernorm.
    RmsNorm {
        rows: usize,
        cols: usize,
    },
    Softmax {
        rows: usize,
        cols: usize,
    },
    Add {
        n: usize,
    },
    /// Patchify + CLS rows, then the projection matmul, as the CUDA backend embeds patches.
    Patch {
        batch: usize,
    },
    /// Attention over the fused QKV activation: the fused kernel (provider `vitrt`), and
    /// scores matmul, softmax, context matmul (provider `vitrt-unfused`).
    Attention {
        batch: usize,
    },
    /// DINOv3's rotary embeddings of one of Q or K, [b, 197, 768] as 12 heads of 64 on a
    /// 14x14 grid after the CLS token.
    Rope {
        batch: usize,
    },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Case {
    /// `vit-b16/qkv/b64`, `square/4096`, `vit-b16/b64`.
    pub name: String,
    pub kind: Kind,
}

impl Case {
    pub fn op(&self) -> &'static str {
        match self.kind {
            Kind::Matmul { .. } => "matmul",
            Kind::Fp8Matmul { .. } => "matmul-fp8",
            Kind::LayernormMatmul { .. } => "matmul-layernorm",
            Kind::RowStatsMatmul { .. } => "matmul-row-stats",
            Kind::LayerNorm { .. } => "layernorm",
            Kind::RmsNorm { .. } => "rmsnorm",
            Kind::Softmax { .. } => "softmax",
            Kind::Add { .. } => "add",
            Kind::Patch { .. } => "patch",
            Kind::Attention { .. } => "attention",
            Kind::Rope { .. } => "rope",
        }
    }

    /// The `shape` of the JSON rows: [m, n, k], [rows, cols], [n], [b, 3, 224, 224, 16],
    /// [b, heads, tokens, head_dim].
    pub fn shape(&self) -> Vec<u64> {
        let shape = match self.kind {
            Kind::Matmul { m, n, k }
            | Kind::Fp8Matmul { m, n, k }
            | Kind::LayernormMatmul { m, n, k, .. }
            | Kind::RowStatsMatmul { m, n, k } => vec![m, n, k],
            Kind::LayerNorm { rows, cols }
            | Kind::RmsNorm { rows, cols }
            | Kind::Softmax { rows, cols } => vec![rows, cols],
            Kind::Add { n } => vec![n],
            Kind::Patch { batch } => vec![batch, CHANNELS, IMAGE, IMAGE, PATCH],
            Kind::Attention { batch } | Kind::Rope { batch } => {
                vec![batch, HEADS, TOKENS, HEAD_DIM]
            }
        };
        shape.into_iter().map(|d| d as u64).collect()
    }

    /// 2·M·N·K for a matmul; `None` for the memory-bound ops, which are measured in bytes.
    pub fn flops(&self) -> Option<f64> {
        match self.kind {
            Kind::Matmul { m, n, k }
            | Kind::Fp8Matmul { m, n, k }
            | Kind::LayernormMatmul { m, n, k, .. }
            | Kind::RowStatsMatmul { m, n, k } => Some(2.0 * m as f64 * n as f64 * k as f64),
            _ => None,
        }
    }

    /// The bytes a memory-bound op must move at least (each input read once, each output
    /// written once), in `dtype`; `None` for a matmul.
    /// - layernorm, rmsnorm, softmax: read x, write out: 2·rows·cols·size (gamma and beta,
    ///   a row's worth, are left out).
    /// - add: read a and b, write out: 3·n·size.
    /// - patch: read the f32 pixels, write the tokens [b, 197, 768] (the patch rows between
    ///   the two kernels and the weights are left out).
    /// - attention: read Q, K and V, write the context: 4·b·197·768·size (the scores and
    ///   probabilities between the kernels are left out: a fused kernel would not move them).
    /// - rope: read Q, write it rotated: 2·b·197·768·size.
    pub fn bytes(&self, dtype: DType) -> Option<u64> {
        let size = dtype.size_bytes();
        let bytes = match self.kind {
            Kind::Matmul { .. }
            | Kind::Fp8Matmul { .. }
            | Kind::LayernormMatmul { .. }
            | Kind::RowStatsMatmul { .. } => return None,
            Kind::LayerNorm { rows, cols }
            | Kind::RmsNorm { rows, cols }
            | Kind::Softmax { rows, cols } => 2 * rows * cols * size,
            Kind::Add { n } => 3 * n * size,
            Kind::Patch { batch } => {
                batch * CHANNELS * IMAGE * IMAGE * 4 + batch * TOKENS * HIDDEN * size
            }
            Kind::Attention { batch } => 4 * batch * TOKENS * HIDDEN * size,
            Kind::Rope { batch } => 2 * batch * TOKENS * HIDDEN * size,
        };
        Some(bytes as u64)
    }

    /// Timings the case makes: ours and cuBLAS, each without and with the epilogue, for a
    /// matmul (and our 16-bit program for an FP8 matmul); ours folded and our layernorm plus
    /// matmul for a layernorm-folded matmul; ours fused and unfused and the copy for attention;
    /// ours and the copy otherwise.
    pub fn measurements(&self) -> usize {
        match self.kind {
            Kind::Matmul { .. } => 4,
            Kind::Fp8Matmul { .. } => 6,
            Kind::LayernormMatmul { .. } => 2,
            // Fused, unfused, the copy.
            Kind::Attention { .. } => 3,
            _ => 2,
        }
    }

    /// `--filter` keeps the cases whose `op/name` contains the text: `qkv`, `softmax`,
    /// `b64`, `square/8192`, `matmul/vit-b16`.
    pub fn matches(&self, filter: Option<&str>) -> bool {
        filter.is_none_or(|f| format!("{}/{}", self.op(), self.name).contains(f))
    }
}

/// The layers a layernorm feeds in a ViT-B/16 block, for the layernorm-folded matmul: (name,
/// N, K, GELU).
pub const LAYERNORM_LINEARS: [(&str, usize, usize, bool); 2] = [
    ("qkv", 3 * HIDDEN, HIDDEN, false),
    ("fc1", MLP, HIDDEN, true),
];

/// The layers that write the residual stream in a ViT-B/16 block, for the row-statistics
/// matmul: (name, N, K), at batches 1, 64 and 256.
pub const ROW_STATS_LINEARS: [(&str, usize, usize); 2] =
    [("proj", HIDDEN, HIDDEN), ("fc2", HIDDEN, MLP)];
pub const ROW_STATS_BATCHES: [usize; 3] = [1, 64, 256];

/// Every case, in the order they run: matmuls (ViT layers by layer, then squares), the FP8
/// matmuls (ViT layers), the layernorm-folded matmuls (qkv, fc1), then the memory-bound ops,
/// each from the smallest batch up.
pub fn catalogue() -> Vec<Case> {
    let mut cases = Vec::new();
    for (layer, n, k) in LINEARS {
        for b in BATCHES {
            cases.push(Case {
                name: format!("vit-b16/{layer}/b{b}"),
                kind: Kind::Matmul {
                    m: b * TOKENS,
                    n,
                    k,
                },
            });
        }
    }
    for s in SQUARES {
        cases.push(Case {
            name: format!("square/{s}"),
            kind: Kind::Matmul { m: s, n: s, k: s },
        });
    }
    for (layer, n, k) in LINEARS {
        for b in BATCHES {
            cases.push(Case {
                name: format!("vit-b16/{layer}/b{b}"),
                kind: Kind::Fp8Matmul {
                    m: b * TOKENS,
                    n,
                    k,
                },
            });
        }
    }
    for (layer, n, k, gelu) in LAYERNORM_LINEARS {
        for b in BATCHES {
            cases.push(Case {
                name: format!("vit-b16/{layer}/b{b}"),
                kind: Kind::LayernormMatmul {
                    m: b * TOKENS,
                    n,
                    k,
                    gelu,
                },
            });
        }
    }
    for (layer, n, k) in ROW_STATS_LINEARS {
        for b in ROW_STATS_BATCHES {
            cases.push(Case {
                name: format!("vit-b16/{layer}/b{b}"),
                kind: Kind::RowStatsMatmul {
                    m: b * TOKENS,
                    n,
                    k,
                },
            });
        }
    }
    let memory_bound: [fn(usize) -> Kind; 7] = [
        |b| Kind::LayerNorm {
            rows: b * TOKENS,
            cols: HIDDEN,
        },
        |b| Kind::RmsNorm {
            rows: b * TOKENS,
            cols: HIDDEN,
        },
        |b| Kind::Softmax {
            rows: b * HEADS * TOKENS,
            cols: TOKENS,
        },
        |b| Kind::Add {
            n: b * TOKENS * HIDDEN,
        },
        |batch| Kind::Patch { batch },
        |batch| Kind::Attention { batch },
        |batch| Kind::Rope { batch },
    ];
    for kind in memory_bound {
        for b in BATCHES {
            cases.push(Case {
                name: format!("vit-b16/b{b}"),
                kind: kind(b),
            });
        }
    }
    cases
}

#[cfg(test)]
mod tests {
    use super::*;

    fn find(name: &str, op: &str) -> Case {
        catalogue()
            .into_iter()
            .find(|c| c.name == name && c.op() == op)
            .unwrap_or_else(|| panic!("no {op} {name}"))
    }

    #[test]
    fn the_catalogue_covers_the_issue() {
        let all = catalogue();
        let count = |op: &str| all.iter().filter(|c| c.op() == op).count();
        assert_eq!(count("matmul"), 4 * 4 + 6);
        assert_eq!(count("matmul-fp8"), 4 * 4);
        assert_eq!(count("matmul-layernorm"), 2 * 4);
        assert_eq!(count("matmul-row-stats"), 2 * 3);
        for op in [
            "layernorm",
            "rmsnorm",
            "softmax",
            "add",
            "patch",
            "attention",
            "rope",
        ] {
            assert_eq!(count(op), 4, "{op}");
        }
        let names: Vec<String> = all
            .iter()
            .map(|c| format!("{}/{}", c.op(), c.name))
            .collect();
        let unique: std::collections::HashSet<&String> = names.iter().collect();
        assert_eq!(unique.len(), names.len(), "every case has its own name");
        assert_eq!(
            all.iter().map(Case::measurements).sum::<usize>(),
            // Matmuls 4 each, FP8 matmuls 6, layernorm-folded matmuls 2; attention (4
            // batches) 3; the other 24 memory-bound cases 2.
            22 * 4 + 16 * 6 + 8 * 2 + 6 * 2 + 4 * 3 + 24 * 2
        );
    }

    #[test]
    fn shapes_and_work() {
        let qkv = find("vit-b16/qkv/b64", "matmul");
        assert_eq!(qkv.shape(), [12608, 2304, 768]);
        assert_eq!(qkv.flops(), Some(2.0 * 12608.0 * 2304.0 * 768.0));
        assert_eq!(qkv.bytes(DType::F16), None);
        assert_eq!(find("vit-b16/fc2/b1", "matmul").shape(), [197, 768, 3072]);
        assert_eq!(find("square/8192", "matmul").shape(), [8192, 8192, 8192]);
        let fc1 = find("vit-b16/fc1/b8", "matmul-fp8");
        assert_eq!(fc1.shape(), [8 * 197, 3072, 768]);
        assert_eq!(fc1.flops(), Some(2.0 * 8.0 * 197.0 * 3072.0 * 768.0));
        let folded_qkv = find("vit-b16/qkv/b256", "matmul-layernorm");
        assert_eq!(folded_qkv.shape(), [256 * 197, 2304, 768]);
        assert_eq!(
            folded_qkv.flops(),
            Some(2.0 * 256.0 * 197.0 * 2304.0 * 768.0)
        );
        assert_eq!(folded_qkv.bytes(DType::BF16), None);
        assert!(matches!(
            folded_qkv.kind,
            Kind::LayernormMatmul { gelu: false, .. }
        ));
        let folded_fc1 = find("vit-b16/fc1/b1", "matmul-layernorm");
        assert_eq!(folded_fc1.shape(), [197, 3072, 768]);
        assert!(matches!(
            folded_fc1.kind,
            Kind::LayernormMatmul { gelu: true, .. }
        ));
        assert_eq!(folded_fc1.measurements(), 2);

        let ln = find("vit-b16/b8", "layernorm");
        assert_eq!(ln.shape(), [8 * 197, 768]);
        assert_eq!(ln.bytes(DType::F16), Some(2 * 8 * 197 * 768 * 2));
        assert_eq!(ln.flops(), None);
        let rms = find("vit-b16/b8", "rmsnorm");
        assert_eq!(rms.shape(), [8 * 197, 768]);
        assert_eq!(rms.bytes(DType::BF16), Some(2 * 8 * 197 * 768 * 2));
        let softmax = find("vit-b16/b1", "softmax");
        assert_eq!(softmax.shape(), [12 * 197, 197]);
        assert_eq!(softmax.bytes(DType::F32), Some(2 * 12 * 197 * 197 * 4));
        let add = find("vit-b16/b256", "add");
        assert_eq!(add.shape(), [256 * 197 * 768]);
        assert_eq!(add.bytes(DType::BF16), Some(3 * 256 * 197 * 768 * 2));
        let patch = find("vit-b16/b64", "patch");
        assert_eq!(patch.shape(), [64, 3, 224, 224, 16]);
        assert_eq!(
            patch.bytes(DType::F16),
            Some(64 * 3 * 224 * 224 * 4 + 64 * 197 * 768 * 2)
        );
        let attention = find("vit-b16/b64", "attention");
        assert_eq!(attention.shape(), [64, 12, 197, 64]);
        assert_eq!(attention.bytes(DType::F16), Some(4 * 64 * 197 * 768 * 2));
        let rope = find("vit-b16/b256", "rope");
        assert_eq!(rope.shape(), [256, 12, 197, 64]);
        assert_eq!(rope.bytes(DType::BF16), Some(2 * 256 * 197 * 768 * 2));
    }

    #[test]
    fn the_filter_matches_op_and_name() {
        let keep = |f: &str| {
            catalogue()
                .into_iter()
                .filter(|c| c.matches(Some(f)))
                .count()
        };
        assert_eq!(keep("qkv"), 12);
        assert_eq!(keep("matmul-fp8/"), 16);
        assert_eq!(keep("matmul-layernorm/"), 8);
        assert_eq!(keep("matmul-layernorm/vit-b16/fc1"), 4);
        assert_eq!(keep("softmax"), 4);
        assert_eq!(keep("square/8192"), 1);
        assert_eq!(keep("b64"), 4 + 4 + 2 + 2 + 7);
        assert_eq!(keep("matmul-row-stats/vit-b16/fc2"), 3);
        assert_eq!(keep("matmul/vit-b16"), 16);
        assert_eq!(keep("no such case"), 0);
        assert!(catalogue().iter().all(|c| c.matches(None)));
    }
}
