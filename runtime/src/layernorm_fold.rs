//! A layernorm read only by linear layers, folded into them: each reader becomes an
//! [`Op::LayerNormLinear`] that takes the layernorm's input and normalises it inside its
//! matmul, so the layernorm's kernel and the write and read of its output go away (25
//! launches in ViT-B/16; at batch 256 the layernorms were 8% of the forward pass).
//!
//! For `y = LayerNorm(x; γ, β)` read by `act(y·Wᵀ + b)`:
//!
//! ```text
//!     act(y·Wᵀ + b) = act(rstd · (x·W'ᵀ − mean · colsum(W')) + b')
//!     W' = W · diag(γ),   b' = b + W·β,   colsum(W')[n] = Σ_k W'[n, k]
//! ```
//!
//! with `mean` and `rstd` the row statistics of x. x is the residual stream, written by the
//! linear layer before it (the attention output projection or the second MLP layer, with its
//! residual epilogue): that layer's epilogue also writes each row's mean and squared deviations
//! over every 64 columns after x's elements ([`StatisticsLayout`];
//! `vitrt_kernels::matmul::gpu::matmul_with_row_statistics`), and the folded matmul combines
//! them in its epilogue (`vitrt_kernels::matmul::gpu::matmul_layernorm`). Gathering them
//! instead in the folded matmul's main loop, from the A tiles it loads, made it 1.4-1.5x slower
//! than the plain matmul (benchmarks/NOTES.md, 2026-11-28 "Layernorms folded into the
//! matmul"). The first block's first layernorm, whose input the patch embedding writes, and
//! the last one stay. W', b' and the column
//! sums are made once at load ([`ParamSource::LayernormWeight`], [`ParamSource::LayernormBias`],
//! [`ParamSource::LayernormColumnSums`]); the column sums are of W' as stored, rounded to the
//! compute type, so that `mean · colsum` cancels exactly what the product adds.
//!
//! The matmul reads x as its A operand, so x must be stored in the compute type: the fold
//! applies to 16-bit runs whose residual stream is in that type (f16 runs by default), and
//! only where the backend has the kernels (`Backend::supports`). The CPU computes the same
//! statistics from x itself.

use crate::backend::{Binding, BufferRef};
use crate::graph::{Graph, Op, ParamSource, ValueKind};
use crate::passes::Supports;
use vitrt_kernels::matmul::layernorm_fold as fold;
use vitrt_kernels::matmul::LayernormMatmulProblem;
use vitrt_kernels::DType;

/// Columns a row's partial statistics cover (the last block of a row is whole: the stream's
/// width is a multiple of it wherever a layernorm is folded).
pub const STATISTICS_COLUMNS: usize = vitrt_kernels::matmul::ROW_STATISTICS_BLOCK;

/// Where a value with row statistics keeps them: its `rows x cols` elements, then, from the
/// next 256-byte boundary, `cols / 64` blocks of `rows` f32 pairs (block-major): for row r and
/// columns 64b .. 64b + 63, the mean of the stored values and the sum of their squared
/// deviations from it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StatisticsLayout {
    /// Byte offset of the statistics from the value's start.
    pub offset: usize,
    /// f32 values of the statistics.
    pub len: usize,
    /// Bytes of the whole value.
    pub bytes: usize,
}

impl StatisticsLayout {
    pub fn new(rows: usize, cols: usize, dtype: DType) -> StatisticsLayout {
        let offset = (rows * cols * dtype.size_bytes()).div_ceil(256) * 256;
        let len = vitrt_kernels::matmul::row_statistics_len(rows, cols);
        StatisticsLayout {
            offset,
            len,
            bytes: offset + len * 4,
        }
    }
}

/// The row statistics a binding's value carries, as an f32 buffer, if it carries them.
pub fn statistics_buffer(binding: &Binding) -> Option<BufferRef> {
    let BufferRef::Arena {
        offset_bytes,
        len,
        dtype,
    } = binding.buffer
    else {
        return None;
    };
    if !binding.row_statistics {
        return None;
    }
    let cols = binding.shape.last().copied().unwrap_or(0);
    let layout = StatisticsLayout::new(len / cols.max(1), cols, dtype);
    Some(BufferRef::Arena {
        offset_bytes: offset_bytes + layout.offset,
        len: layout.len,
        dtype: DType::F32,
    })
}

/// Folds every layernorm whose output only linear layers read (as their input, with no
/// residual and an alpha of 1, their weight and bias parameters) and is no named output, and
/// whose input a linear layer with a residual epilogue writes (which then writes the row
/// statistics too; its K a multiple of 8 and its N of 64), where `supports` accepts each
/// reader's [`Op::LayerNormLinear`]. `compute` is the type W' is stored in (its column sums
/// are of the rounded values). Returns the layernorms folded.
pub fn fold_layernorms(graph: &mut Graph, compute: DType, supports: Supports) -> usize {
    let users = graph.consumers();
    let producer = crate::passes::producers(graph);
    let writes_statistics = |x: usize| {
        let Some(p) = producer[x] else {
            return false;
        };
        let node = &graph.nodes[p];
        let Op::Linear { epilogue } = node.op else {
            return false;
        };
        let k = graph.values[node.inputs[1]]
            .shape
            .get(1)
            .copied()
            .unwrap_or(0);
        let n = graph.values[x].shape.last().copied().unwrap_or(0);
        epilogue.residual && k % 8 == 0 && n > 0 && n % STATISTICS_COLUMNS == 0
    };
    let mut rewrites = Vec::new();
    for (norm_id, node) in graph.nodes.iter().enumerate() {
        let Op::LayerNorm { eps } = node.op else {
            continue;
        };
        let (x, y) = (node.inputs[0], node.output);
        if !writes_statistics(x) {
            continue;
        }
        let param = |v: usize| match &graph.values[v].kind {
            ValueKind::Param(source) => Some(source.clone()),
            _ => None,
        };
        let (Some(gamma), Some(beta)) = (param(node.inputs[1]), param(node.inputs[2])) else {
            continue;
        };
        if users[y].is_empty() || graph.is_output(y) {
            continue;
        }
        let mut readers = Vec::new();
        for &reader_id in &users[y] {
            let reader = &graph.nodes[reader_id];
            let Op::Linear { epilogue } = reader.op else {
                break;
            };
            let only_as_input = reader.inputs[0] == y && !reader.inputs[1..].contains(&y);
            if epilogue.residual || epilogue.alpha != 1.0 || !only_as_input {
                break;
            }
            let Some(weight) = param(reader.inputs[1]) else {
                break;
            };
            let bias = if epilogue.bias {
                match param(reader.inputs[2]) {
                    Some(source) => Some(source),
                    None => break,
                }
            } else {
                None
            };
            let op = Op::LayerNormLinear {
                eps,
                activation: epilogue.activation,
            };
            let weight_shape = graph.values[reader.inputs[1]].shape.clone();
            let n = weight_shape[0];
            let shapes: [&[usize]; 4] = [&graph.values[x].shape, &weight_shape, &[n], &[n]];
            if supports(&op, &shapes).is_err() {
                break;
            }
            readers.push((reader_id, op, weight, bias, weight_shape));
        }
        if readers.len() == users[y].len() {
            rewrites.push((norm_id, x, gamma, beta, readers));
        }
    }
    let folded = rewrites.len();
    let mut dead = vec![false; graph.nodes.len()];
    for (norm_id, x, gamma, beta, readers) in rewrites {
        for (reader_id, op, weight, bias, weight_shape) in readers {
            let (n, k) = (weight_shape[0], weight_shape[1]);
            let folded_weight = graph.add_param_source(
                ParamSource::LayernormWeight {
                    weight: Box::new(weight.clone()),
                    gamma: Box::new(gamma.clone()),
                },
                &weight_shape,
            );
            let folded_bias = graph.add_param_source(
                ParamSource::LayernormBias {
                    weight: Box::new(weight.clone()),
                    bias: bias.map(Box::new),
                    beta: Box::new(beta.clone()),
                    columns: k,
                },
                &[n],
            );
            let column_sums = graph.add_param_source(
                ParamSource::LayernormColumnSums {
                    weight: Box::new(weight),
                    gamma: Box::new(gamma.clone()),
                    columns: k,
                    dtype: compute,
                },
                &[n],
            );
            let reader = &mut graph.nodes[reader_id];
            reader.op = op;
            reader.inputs = vec![x, folded_weight, folded_bias, column_sums];
        }
        graph.values[x].row_statistics = true;
        dead[norm_id] = true;
    }
    let mut id = 0;
    graph.nodes.retain(|_| {
        id += 1;
        !dead[id - 1]
    });
    folded
}

/// The problem an [`Op::LayerNormLinear`] on inputs of `shapes` (x, W', b', column sums)
/// poses, or None where the shapes do not fit one.
pub fn problem_for(op: &Op, shapes: &[&[usize]]) -> Option<LayernormMatmulProblem> {
    let Op::LayerNormLinear { eps, activation } = *op else {
        return None;
    };
    let k = *shapes.first()?.last()?;
    let n = *shapes.get(1)?.first()?;
    if k == 0 {
        return None;
    }
    let rows = shapes[0].iter().product::<usize>() / k;
    Some(LayernormMatmulProblem {
        m: rows,
        n,
        k,
        activation,
        eps,
    })
}

/// Refuses, as the device's launcher does, operands stored in types the kernel does not read:
/// x, W', b' and the output in `compute` (16-bit), the column sums in f32.
pub fn check_storage(compute: DType, inputs: &[DType], output: DType) -> Result<(), String> {
    if compute == DType::F32 || compute == DType::E4M3 {
        return Err(format!(
            "a layernorm folded into a linear layer runs in f16 or bf16, not {compute}"
        ));
    }
    let expected = [compute, compute, compute, DType::F32];
    if inputs.len() != expected.len() {
        return Err(format!(
            "a layernorm folded into a linear layer takes 4 inputs, got {}",
            inputs.len()
        ));
    }
    for ((what, got), want) in [
        "x",
        "the folded weight",
        "the folded bias",
        "the column sums",
    ]
    .iter()
    .zip(inputs)
    .zip(expected)
    {
        if *got != want {
            return Err(format!(
                "a layernorm folded into a linear layer reads {what} as {want}, not {got}"
            ));
        }
    }
    if output != compute {
        return Err(format!(
            "a layernorm folded into a linear layer writes {compute}, not {output}"
        ));
    }
    Ok(())
}

/// The column sums of the folded weight `[n, k]` (the weight times γ) as stored in `dtype`:
/// each value rounded to `dtype` first, then summed by the kernels' helper
/// (`vitrt_kernels::matmul::layernorm_fold`), so that `mean · colsum` cancels exactly what the
/// product adds.
pub fn column_sums(weight: &[f32], gamma: &[f32], n: usize, k: usize, dtype: DType) -> Vec<f32> {
    let rounded: Vec<f32> = fold::fold_weight(weight, gamma, n, k)
        .into_iter()
        .map(|w| dtype.round(w))
        .collect();
    fold::column_sums(&rounded, n, k)
}

#[cfg(test)]
mod tests {
    use super::*;
    use vitrt_kernels::{Activation, Epilogue};

    const K: usize = 64;

    /// x = z·w0ᵀ + r (a linear layer with a residual, as the stream's writers are) →
    /// layernorm → two linear layers (one with bias and GELU, one bare) summed (as the fusion
    /// passes leave them: no pass runs here, so the sum stays an add); with `extra`, a second
    /// layernorm whose output is also a named output, a third read by a linear layer with a
    /// residual, and a fourth whose input is a graph input (none of them foldable).
    fn block_graph(rows: usize, extra: bool) -> Graph {
        let mut g = Graph::default();
        let z = g.add_input("z", &[rows, K]);
        let r = g.add_input("r", &[rows, K]);
        let w0 = g.add_param("w0", &[K, K]);
        let with_residual = Op::Linear {
            epilogue: Epilogue {
                residual: true,
                ..Epilogue::NONE
            },
        };
        let x = g
            .add_node("stream", with_residual.clone(), &[z, w0, r])
            .unwrap();
        let gamma = g.add_param("gamma", &[K]);
        let beta = g.add_param("beta", &[K]);
        let y = g
            .add_node("norm", Op::LayerNorm { eps: 1e-6 }, &[x, gamma, beta])
            .unwrap();
        let w1 = g.add_param("w1", &[48, K]);
        let b1 = g.add_param("b1", &[48]);
        let w2 = g.add_param("w2", &[48, K]);
        let gelu = Epilogue {
            bias: true,
            activation: Activation::Gelu,
            ..Epilogue::NONE
        };
        let a = g
            .add_node("fc1", Op::Linear { epilogue: gelu }, &[y, w1, b1])
            .unwrap();
        let bare = Op::Linear {
            epilogue: Epilogue::NONE,
        };
        let b = g.add_node("fc2", bare.clone(), &[y, w2]).unwrap();
        let mut out = g.add_node("sum", Op::Add, &[a, b]).unwrap();
        if extra {
            let w3 = g.add_param("w3", &[K, 48]);
            let h = g.add_node("down", bare.clone(), &[out, w3]).unwrap();
            let h = g
                .add_node("down_res", with_residual.clone(), &[h, w0, x])
                .unwrap();
            let seen = g
                .add_node("norm_seen", Op::LayerNorm { eps: 1e-6 }, &[h, gamma, beta])
                .unwrap();
            g.mark_output("seen", seen);
            let w4 = g.add_param("w4", &[K, K]);
            let n3 = g
                .add_node("norm_res", Op::LayerNorm { eps: 1e-6 }, &[h, gamma, beta])
                .unwrap();
            out = g.add_node("res", with_residual, &[n3, w4, h]).unwrap();
            let n4 = g
                .add_node("norm_input", Op::LayerNorm { eps: 1e-6 }, &[z, gamma, beta])
                .unwrap();
            let from_input = g.add_node("from_input", bare, &[n4, w4]).unwrap();
            g.mark_output("from_input", from_input);
        }
        g.mark_output("out", out);
        g
    }

    fn count(g: &Graph, kind: &str) -> usize {
        g.nodes.iter().filter(|n| n.op.kind_name() == kind).count()
    }

    #[test]
    fn a_layernorm_read_only_by_linear_layers_is_folded_into_each() {
        let mut g = block_graph(3, true);
        assert_eq!(fold_layernorms(&mut g, DType::F16, &|_, _| Ok(())), 1);
        g.validate().unwrap();
        // The named one, the one a residual linear reads and the one on a graph input stay.
        assert_eq!(count(&g, "layernorm"), 3);
        assert_eq!(count(&g, "layernorm_linear"), 2);
        let fc1 = g.nodes.iter().find(|n| n.name == "fc1").unwrap();
        assert_eq!(
            fc1.op,
            Op::LayerNormLinear {
                eps: 1e-6,
                activation: Activation::Gelu
            }
        );
        let stream = g.nodes.iter().find(|n| n.name == "stream").unwrap().output;
        assert_eq!(fc1.inputs[0], stream, "reads the layernorm's input");
        // Its producer writes the statistics after it: the plan makes room for them.
        assert!(g.values[stream].row_statistics);
        let layout = StatisticsLayout::new(3, K, DType::F16);
        assert_eq!((layout.offset, layout.len), (512, 2 * 3));
        assert_eq!(
            crate::plan::value_bytes(&g.values[stream], DType::F16),
            512 + 6 * 4
        );
        let sums = &g.values[fc1.inputs[3]];
        assert_eq!(sums.shape, [48]);
        assert!(matches!(
            sums.kind,
            ValueKind::Param(ParamSource::LayernormColumnSums {
                columns: K,
                dtype: DType::F16,
                ..
            })
        ));
        let plan_dtypes = crate::plan::value_dtypes(&g, crate::Precision::uniform(DType::F16));
        assert_eq!(plan_dtypes[fc1.inputs[3]], DType::F32);
        assert_eq!(plan_dtypes[fc1.inputs[1]], DType::F16);
    }

    #[test]
    fn nothing_is_folded_where_the_backend_has_no_kernel() {
        let mut g = block_graph(3, false);
        let refuse: Supports = &|op, _| match op {
            Op::LayerNormLinear { .. } => Err("no kernel".into()),
            _ => Ok(()),
        };
        assert_eq!(fold_layernorms(&mut g, DType::F16, refuse), 0);
        assert_eq!(count(&g, "layernorm"), 1);
        // One reader refused keeps the layernorm for both.
        let only_gelu: Supports = &|op, _| match op {
            Op::LayerNormLinear {
                activation: Activation::None,
                ..
            } => Err("no kernel".into()),
            _ => Ok(()),
        };
        assert_eq!(fold_layernorms(&mut g, DType::F16, only_gelu), 0);
        assert_eq!(count(&g, "layernorm_linear"), 0);
    }

    struct MapParams(std::collections::HashMap<String, Vec<f32>>);

    impl crate::ParamStore for MapParams {
        fn load(&self, name: &str, shape: &[usize]) -> Result<Vec<f32>, crate::RuntimeError> {
            let values = self.0[name].clone();
            assert_eq!(values.len(), shape.iter().product::<usize>(), "{name}");
            Ok(values)
        }
    }

    /// A deterministic value in [-1, 1).
    fn noise(i: usize, salt: usize) -> f32 {
        let h = (i as u64 * 2654435761 + salt as u64 * 40503).wrapping_mul(0x9E3779B97F4A7C15);
        ((h >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }

    fn run(g: Graph, dtype: DType, z: &[f32], r: &[f32]) -> Vec<f32> {
        let mut params = std::collections::HashMap::new();
        for (name, len, salt, scale, offset) in [
            ("w0", K * K, 6, 0.1, 0.0),
            ("gamma", K, 1, 0.5, 1.0),
            ("beta", K, 2, 0.3, 0.0),
            ("w1", 48 * K, 3, 0.2, 0.0),
            ("b1", 48, 4, 0.5, 0.0),
            ("w2", 48 * K, 5, 0.2, 0.0),
        ] {
            let values = (0..len).map(|i| noise(i, salt) * scale + offset).collect();
            params.insert(name.to_string(), values);
        }
        let mut backend = crate::CpuBackend::emulating(dtype);
        let exec = crate::Executor::new(
            g,
            &mut backend,
            &MapParams(params),
            crate::Precision::uniform(dtype),
        )
        .unwrap();
        exec.run(&mut backend, &[("z", z), ("r", r)])
            .unwrap()
            .remove(0)
            .data
    }

    #[test]
    fn the_folded_layers_give_the_layernorms_result() {
        let rows = 5;
        let z: Vec<f32> = (0..rows * K).map(|i| noise(i, 8)).collect();
        // Rows far from zero mean too: the statistics must not cancel.
        let r: Vec<f32> = (0..rows * K)
            .map(|i| noise(i, 9) * 2.0 + if i / K % 2 == 1 { 40.0 } else { 0.0 })
            .collect();
        for (dtype, tolerance) in [(DType::F16, 4e-3), (DType::BF16, 3e-2)] {
            let unfolded = run(block_graph(rows, false), dtype, &z, &r);
            let mut g = block_graph(rows, false);
            assert_eq!(fold_layernorms(&mut g, dtype, &|_, _| Ok(())), 1);
            let folded = run(g, dtype, &z, &r);
            let scale = unfolded.iter().fold(0f32, |m, v| m.max(v.abs()));
            for (i, (a, b)) in folded.iter().zip(&unfolded).enumerate() {
                assert!(
                    (a - b).abs() <= tolerance * scale,
                    "{dtype}: element {i}: folded {a}, unfolded {b} (scale {scale})"
                );
            }
        }
    }

    #[test]
    fn storage_the_kernel_does_not_read_is_refused() {
        let f16 = DType::F16;
        let good = [f16, f16, f16, DType::F32];
        assert!(check_storage(f16, &good, f16).is_ok());
        let e = check_storage(f16, &[DType::F32, f16, f16, DType::F32], f16).unwrap_err();
        assert!(e.contains("reads x as f16, not f32"), "{e}");
        let e = check_storage(DType::F32, &good, f16).unwrap_err();
        assert!(e.contains("f16 or bf16"), "{e}");
        let e = check_storage(f16, &good, DType::F32).unwrap_err();
        assert!(e.contains("writes f16"), "{e}");
    }
}
