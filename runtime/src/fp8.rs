//! FP8 linear layers: which linear layers of a graph run their product in e4m3
//! ([`Fp8Layers`]), the rewrite that makes them [`Op::Fp8Linear`] ([`quantize_linears`]), and
//! the quantisation both backends share.
//!
//! Scales (benchmarks/NOTES.md, 2026-11-28 "What FP8 would cost the real DINOv2, predicted by
//! emulation"): a weight `[N, K]` gets one scale per output channel, its row's largest
//! magnitude over 448, computed once at load from the checkpoint's values; an activation row
//! gets its own scale the same way as the node runs (per-token dynamic scales, which need no
//! calibration). A value `x` of a row of scale `s` is stored as `e4m3(x · (1 / s))`.
//!
//! Attention stays in the compute type: in e4m3 it cost the real DINOv2 three times the
//! embedding error of the linear layers (same NOTES entry).

use crate::graph::{Graph, Op, ParamSource, ValueKind};
use std::collections::BTreeSet;
use vitrt_kernels::quantize::{self, ActivationScale, QuantizeProblem};
use vitrt_kernels::{e4m3, matmul, DType, Epilogue, MatmulProblem};

/// K must be a multiple of this for an FP8 product (rows of e4m3 start on 16-byte
/// boundaries, as the device's tensor maps read them).
pub const K_MULTIPLE: usize = vitrt_kernels::matmul::FP8_K_MULTIPLE;

/// Rows of `x` (`rows` of `k` values stored as `input`) as the FP8 matmul reads them: each
/// row's e4m3 values (its codes, decoded) and its scale, by the kernels' quantiser
/// (`vitrt_kernels::quantize`: scale `max(amax / 448, 1e-12)`, codes `e4m3(x · (1 / scale))`),
/// which the device runs too, so both backends round every value alike.
/// An error where `k` is not a positive multiple of [`K_MULTIPLE`].
pub fn quantize_rows(x: &[f32], k: usize, input: DType) -> Result<(Vec<f32>, Vec<f32>), String> {
    let rows = x.len() / k.max(1);
    let problem = QuantizeProblem {
        rows,
        cols: k,
        input,
        scale: ActivationScale::PerRow,
    };
    problem.check()?;
    let mut codes = vec![0u8; rows * k];
    let mut scales = vec![0f32; rows];
    quantize::cpu::quantize_rows(&problem, x, &mut codes, &mut scales);
    Ok((e4m3::decode_slice(&codes), scales))
}

/// A weight `[n, k]` as e4m3 values and its `n` per-row (per output channel) scales, from the
/// checkpoint's values: what [`ParamSource::Fp8Weight`] and [`ParamSource::Fp8Scale`] load.
pub fn quantize_weight(values: &[f32], n: usize, k: usize) -> Result<(Vec<f32>, Vec<f32>), String> {
    if values.len() != n * k {
        return Err(format!(
            "{} values for an FP8 weight [{n}, {k}]",
            values.len()
        ));
    }
    quantize_rows(values, k, DType::F32)
}

/// Which linear layers run in FP8. A candidate is a linear layer of a transformer block (its
/// node named `<...>.<layer|layers|blocks|resblocks>.<i>.<...>`) whose weight is a parameter
/// and whose K is a multiple of [`K_MULTIPLE`]; the patch embedding, the heads and the
/// projections outside the blocks are never candidates.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fp8Layers {
    /// The candidates whose input is a layernorm's output (each block's QKV and first MLP
    /// layer), which that layernorm writes quantised ([`quantized_by_producer`]). The others
    /// (attention output, second MLP layer) spend on their input's quantisation pass most of
    /// what FP8 saves them: ViT-B/16 at batch 256 on an H200, the attention output 0.108 ms
    /// in FP8 against 0.112 in f16, the second MLP layer 0.350 against 0.355, while QKV took
    /// 0.171 against 0.274 and the first MLP layer 0.333 against 0.440; on the real DINOv2
    /// ViT-S/14 these 24 layers keep a mean cosine of 0.99886 to f32, all 48 only 0.99750.
    /// Wider models gain from the others (DINOv2-L/14: 1.35x our f16 with them, 1.22x
    /// without), which `vitrt quantize-report --all-layers` weighs (benchmarks/NOTES.md,
    /// 2026-11-28 "FP8 linear layers in the runtime").
    LayernormInputs,
    /// Every candidate.
    All,
    /// These candidates, by node name (a choice `vitrt quantize-report` made).
    Only(BTreeSet<String>),
}

impl Fp8Layers {
    /// The choice used when no report has made one: [`Fp8Layers::LayernormInputs`].
    pub fn default_choice() -> Fp8Layers {
        Fp8Layers::LayernormInputs
    }

    /// Exactly the candidates named in `layers`.
    pub fn only(layers: impl IntoIterator<Item = String>) -> Fp8Layers {
        Fp8Layers::Only(layers.into_iter().collect())
    }
}

/// Whether candidate `node` reads a layernorm's output as its input.
pub fn reads_a_layernorm(graph: &Graph, node: usize) -> bool {
    let x = graph.nodes[node].inputs[0];
    graph
        .nodes
        .iter()
        .any(|n| n.output == x && matches!(n.op, Op::LayerNorm { .. }))
}

/// The index of the transformer block a node belongs to, from its name.
pub fn block_index(name: &str) -> Option<usize> {
    let parts: Vec<&str> = name.split('.').collect();
    parts.windows(2).find_map(|w| {
        matches!(w[0], "layer" | "layers" | "blocks" | "resblocks")
            .then(|| w[1].parse().ok())
            .flatten()
    })
}

/// The candidates for FP8 (see [`Fp8Layers`]), by node id, in graph order.
pub fn candidates(graph: &Graph) -> Vec<usize> {
    graph
        .nodes
        .iter()
        .enumerate()
        .filter(|(_, node)| {
            let Op::Linear { epilogue } = node.op else {
                return false;
            };
            let weight = &graph.values[node.inputs[1]];
            matches!(weight.kind, ValueKind::Param(_))
                && weight.shape.len() == 2
                && weight.shape[1] > 0
                && weight.shape[1].is_multiple_of(K_MULTIPLE)
                && epilogue.activation.in_matmul_epilogue()
                && epilogue.alpha == 1.0
                && block_index(&node.name).is_some()
        })
        .map(|(id, _)| id)
        .collect()
}

/// Rewrites every candidate `layers` chooses into an [`Op::Fp8Linear`] reading its weight's
/// e4m3 values and scales; returns the names of the nodes rewritten, in graph order. Run it
/// after the fusion passes: it rewrites the fused linear layers (QKV, epilogues) as they are.
/// Names in an [`Fp8Layers::Only`] choice that are no candidate are an error, so that a choice
/// made for one model is not silently applied to another.
pub fn quantize_linears(graph: &mut Graph, layers: &Fp8Layers) -> Result<Vec<String>, String> {
    let candidates = candidates(graph);
    let names: BTreeSet<&str> = candidates
        .iter()
        .map(|&id| graph.nodes[id].name.as_str())
        .collect();
    if let Fp8Layers::Only(chosen) = layers {
        if let Some(unknown) = chosen.iter().find(|k| !names.contains(k.as_str())) {
            return Err(format!(
                "the FP8 choice names {unknown:?}, but this model has no such linear layer (its \
                 candidates: {})",
                names.iter().copied().collect::<Vec<_>>().join(", ")
            ));
        }
    }
    let chosen: Vec<usize> = candidates
        .into_iter()
        .filter(|&id| match layers {
            Fp8Layers::LayernormInputs => reads_a_layernorm(graph, id),
            Fp8Layers::All => true,
            Fp8Layers::Only(chosen) => chosen.contains(&graph.nodes[id].name),
        })
        .collect();
    let mut rewritten = Vec::new();
    for id in chosen {
        let name = graph.nodes[id].name.clone();
        let Op::Linear { epilogue } = graph.nodes[id].op else {
            unreachable!("candidates are linear layers")
        };
        let weight = graph.nodes[id].inputs[1];
        let (shape, source) = match &graph.values[weight].kind {
            ValueKind::Param(source) => (graph.values[weight].shape.clone(), source.clone()),
            _ => unreachable!("candidates read a parameter weight"),
        };
        let codes =
            graph.add_param_source(ParamSource::Fp8Weight(Box::new(source.clone())), &shape);
        let scales = graph.add_param_source(
            ParamSource::Fp8Scale {
                weight: Box::new(source),
                columns: shape[1],
            },
            &shape[..1],
        );
        let node = &mut graph.nodes[id];
        node.inputs[1] = codes;
        node.inputs.insert(2, scales);
        node.op = Op::Fp8Linear { epilogue };
        rewritten.push(name);
    }
    graph.validate().map_err(|e| e.to_string())?;
    Ok(rewritten)
}

/// Where an FP8 linear layer's quantised input lies in its node's workspace: the e4m3 codes
/// `[rows, k]` first, then one f32 scale a row, at an offset aligned for the device's vector
/// loads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InputWorkspace {
    pub codes_bytes: usize,
    pub scales_offset: usize,
    pub bytes: usize,
}

impl InputWorkspace {
    pub fn new(rows: usize, k: usize) -> InputWorkspace {
        let codes_bytes = rows * k;
        let scales_offset = codes_bytes.div_ceil(crate::plan::ALIGNMENT) * crate::plan::ALIGNMENT;
        InputWorkspace {
            codes_bytes,
            scales_offset,
            bytes: scales_offset + 4 * rows,
        }
    }
}

/// Whether `node` writes its output as e4m3 codes and row scales for FP8 linear layers: a
/// layernorm whose every reader is an FP8 linear layer reading it as x (its rows a multiple of
/// [`K_MULTIPLE`]), and which is no graph output (`users`: `Graph::consumers`). The layernorm
/// then quantises its normalised rows in f32 as it writes them
/// (`vitrt_kernels::layernorm::gpu::layernorm_e4m3`), instead of storing them in the compute
/// type for a quantisation pass to read back.
pub fn quantized_by_producer(
    graph: &Graph,
    users: &[Vec<usize>],
    node: &crate::graph::Node,
) -> bool {
    let v = node.output;
    let k = graph.values[v].shape.last().copied().unwrap_or(0);
    matches!(node.op, Op::LayerNorm { .. })
        && k > 0
        && k.is_multiple_of(K_MULTIPLE)
        && !graph.is_output(v)
        && !users[v].is_empty()
        && users[v].iter().all(|&u| {
            let reader = &graph.nodes[u];
            matches!(reader.op, Op::Fp8Linear { .. })
                && reader.inputs[0] == v
                && reader.inputs[1..].iter().all(|&i| i != v)
        })
}

/// Refuses, as the GPU's FP8 matmul does, operands it does not read: x, the bias, the
/// residual and the output in the run's 16-bit `compute` type, the weight in e4m3 and its
/// scales in f32. `inputs` are the node's input types in order.
pub fn check_storage(
    compute: DType,
    epilogue: Epilogue,
    inputs: &[DType],
    output: DType,
) -> Result<(), String> {
    if compute == DType::F32 {
        return Err("FP8 linear layers run in f16 or bf16 runs, not f32".into());
    }
    // x in the compute type, or already quantised by its producer (e4m3 codes and scales).
    let x = if inputs.first() == Some(&DType::E4M3) {
        DType::E4M3
    } else {
        compute
    };
    let mut wanted = vec![
        ("x", x),
        ("the weight", DType::E4M3),
        ("the scales", DType::F32),
    ];
    if epilogue.bias {
        wanted.push(("the bias", compute));
    }
    if epilogue.residual {
        wanted.push(("the residual", compute));
    }
    if inputs.len() != wanted.len() {
        return Err(format!(
            "an FP8 linear layer takes {} inputs, got {}",
            wanted.len(),
            inputs.len()
        ));
    }
    for ((what, want), &got) in wanted.iter().zip(inputs) {
        if got != *want {
            return Err(format!(
                "an FP8 linear layer reads {what} as {want}, not {got} (FP8 runs keep the \
                 residual stream in the compute type)"
            ));
        }
    }
    if output != compute {
        return Err(format!(
            "an FP8 linear layer writes {compute}, not {output} (FP8 runs keep the residual \
             stream in the compute type)"
        ));
    }
    Ok(())
}

/// The CPU's FP8 linear layer, on f32 slots: `ins` are x `[M, k]`, the weight's e4m3 values
/// `[n, k]`, their scales `[n]`, then the bias and the residual as `epilogue` says. Each row
/// of x is quantised with its own scale ([`quantize_rows`]); the product of the e4m3 values
/// accumulates in f32 and is scaled back, `acc · (x_scale · w_scale) + bias`, then the
/// activation and the residual, as the device's epilogue applies them
/// (`vitrt_kernels::matmul::Fp8Problem`).
/// With `quantized`, x comes as its producer quantised it (e4m3 values and row scales) and
/// `ins[0]` is not read.
pub fn emulate_linear(
    epilogue: Epilogue,
    k: usize,
    n: usize,
    ins: &[&[f32]],
    quantized: Option<(&[f32], &[f32])>,
    out: &mut [f32],
    tiles: matmul::cpu::MatmulTiles,
) -> Result<(), String> {
    let (weight, w_scales) = (ins[1], ins[2]);
    // x holds the compute type's values already (the CPU stores them rounded).
    let quantized_here;
    let (units, x_scales) = match quantized {
        Some(given) => given,
        None => {
            quantized_here = quantize_rows(ins[0], k, DType::F32)?;
            (quantized_here.0.as_slice(), quantized_here.1.as_slice())
        }
    };
    let m = units.len() / k.max(1);
    if units.len() != m * k
        || x_scales.len() != m
        || weight.len() != n * k
        || w_scales.len() != n
        || out.len() != m * n
    {
        return Err(format!(
            "fp8_linear operands of {} / {} / {} / {} values for M {m}, N {n}, K {k}",
            units.len(),
            weight.len(),
            w_scales.len(),
            out.len()
        ));
    }
    let bias = epilogue.bias.then(|| ins[3]);
    let residual = epilogue.residual.then(|| ins[3 + epilogue.bias as usize]);
    let product = MatmulProblem::linear(m, n, k, Epilogue::NONE);
    matmul::cpu::matmul(&product, tiles, units, weight, None, None, out);
    for (row, (values, x_scale)) in out.chunks_mut(n.max(1)).zip(x_scales).enumerate() {
        for (col, v) in values.iter_mut().enumerate() {
            let mut y = *v * (x_scale * w_scales[col]);
            if let Some(bias) = bias {
                y += bias[col];
            }
            y = epilogue.activation.apply(y);
            if let Some(residual) = residual {
                y += residual[row * n + col];
            }
            *v = y;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::passes::{self, Fusion};

    #[test]
    fn scales_are_the_row_maximum_over_448() {
        let mut w = vec![0f32; 32];
        w[..3].copy_from_slice(&[1.0, -2.0, 0.5]);
        let (units, scales) = quantize_weight(&w, 2, 16).unwrap();
        assert_eq!(scales, vec![2.0 / 448.0, quantize::MIN_SCALE]);
        assert_eq!(&units[..3], &[224.0, -448.0, 112.0]);
        assert!(units[3..].iter().all(|&u| u == 0.0));
        // A value between two e4m3 values rounds to one of them.
        let mut w = vec![0f32; 16];
        w[..2].copy_from_slice(&[448.0, 17.0]);
        assert_eq!(quantize_weight(&w, 1, 16).unwrap().0[1], 16.0);
        assert!(quantize_weight(&w[..8], 1, 8).is_err());
    }

    #[test]
    fn block_indices_come_from_the_names() {
        assert_eq!(block_index("encoder.layer.11.attention.qkv"), Some(11));
        assert_eq!(
            block_index("vision_model.encoder.layers.3.mlp.fc1"),
            Some(3)
        );
        assert_eq!(block_index("blocks.0.mlp.fc2"), Some(0));
        assert_eq!(block_index("classifier"), None);
        assert_eq!(block_index("encoder.layernorm"), None);
    }

    /// Three blocks of `x · W`, each a linear layer named after its block (the second after a
    /// layernorm), then a head.
    fn two_block_graph() -> Graph {
        let mut g = Graph::default();
        let x = g.add_input("x", &[2, 32]);
        let mut h = x;
        for block in 0..3 {
            if block == 1 {
                let gamma = g.add_param("gamma", &[32]);
                let beta = g.add_param("beta", &[32]);
                h = g
                    .add_node(
                        "encoder.layer.1.norm",
                        Op::LayerNorm { eps: 1e-6 },
                        &[h, gamma, beta],
                    )
                    .unwrap();
            }
            let w = g.add_param(&format!("w{block}"), &[32, 32]);
            h = g
                .add_node(
                    &format!("encoder.layer.{block}.dense"),
                    Op::Linear {
                        epilogue: Epilogue::NONE,
                    },
                    &[h, w],
                )
                .unwrap();
        }
        let w = g.add_param("head", &[5, 32]);
        let out = g
            .add_node(
                "classifier",
                Op::Linear {
                    epilogue: Epilogue::NONE,
                },
                &[h, w],
            )
            .unwrap();
        g.mark_output("logits", out);
        passes::apply(&mut g, Fusion::ALL);
        g
    }

    #[test]
    fn the_choice_rewrites_block_layers_only() {
        let mut g = two_block_graph();
        let all = quantize_linears(&mut g, &Fp8Layers::All).unwrap();
        assert_eq!(
            all,
            [
                "encoder.layer.0.dense",
                "encoder.layer.1.dense",
                "encoder.layer.2.dense"
            ]
        );
        assert!(matches!(g.nodes.last().unwrap().op, Op::Linear { .. }));

        let mut g = two_block_graph();
        let normalized = quantize_linears(&mut g, &Fp8Layers::default_choice()).unwrap();
        assert_eq!(normalized, ["encoder.layer.1.dense"]);

        let mut g = two_block_graph();
        let chosen = Fp8Layers::only(["encoder.layer.0.dense".to_string()]);
        assert_eq!(
            quantize_linears(&mut g, &chosen).unwrap(),
            ["encoder.layer.0.dense"]
        );

        let mut g = two_block_graph();
        let wrong = Fp8Layers::only(["encoder.layer.7.dense".to_string()]);
        let err = quantize_linears(&mut g, &wrong).unwrap_err();
        assert!(err.contains("encoder.layer.7.dense"), "{err}");
    }

    /// Parameters by name from a map.
    struct MapParams(std::collections::HashMap<String, Vec<f32>>);

    impl crate::ParamStore for MapParams {
        fn load(&self, name: &str, _shape: &[usize]) -> Result<Vec<f32>, crate::RuntimeError> {
            Ok(self.0[name].clone())
        }
    }

    /// `g`'s first output on a CPU emulating f16 (the residual stream f16), and the plan's
    /// value types.
    fn run_on_f16_cpu(
        g: Graph,
        params: &[(&str, Vec<f32>)],
        inputs: &[(&str, &[f32])],
    ) -> (Vec<f32>, Vec<DType>) {
        let params = MapParams(
            params
                .iter()
                .map(|(name, values)| (name.to_string(), values.clone()))
                .collect(),
        );
        let mut backend = crate::CpuBackend::emulating(DType::F16);
        let exec = crate::Executor::new(
            g,
            &mut backend,
            &params,
            crate::Precision::uniform(DType::F16),
        )
        .unwrap();
        let dtypes = exec.plan().dtypes.clone();
        let out = exec.run(&mut backend, inputs).unwrap().remove(0).data;
        (out, dtypes)
    }

    /// ‖a - b‖ / ‖b‖.
    fn relative_error(a: &[f32], b: &[f32]) -> f32 {
        let diff: f32 = a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum();
        let norm: f32 = b.iter().map(|y| y * y).sum();
        (diff / norm).sqrt()
    }

    /// `gelu(x · wᵀ + b) + r` as one block's linear layer, in FP8 or not, on a CPU emulating
    /// f16.
    fn run_block_linear(fp8: bool, x: &[f32], w: &[f32], b: &[f32], r: &[f32]) -> Vec<f32> {
        let (m, n, k) = (x.len() / 32, b.len(), 32);
        let mut g = Graph::default();
        let xv = g.add_input("x", &[m, k]);
        let rv = g.add_input("r", &[m, n]);
        let wv = g.add_param("w", &[n, k]);
        let bv = g.add_param("b", &[n]);
        let epilogue = Epilogue {
            bias: true,
            activation: vitrt_kernels::Activation::Gelu,
            residual: true,
            ..Epilogue::NONE
        };
        let y = g
            .add_node(
                "encoder.layer.0.mlp",
                Op::Linear { epilogue },
                &[xv, wv, bv, rv],
            )
            .unwrap();
        g.mark_output("y", y);
        if fp8 {
            let done = quantize_linears(&mut g, &Fp8Layers::All).unwrap();
            assert_eq!(done, ["encoder.layer.0.mlp"]);
        }
        let params = [("w", w.to_vec()), ("b", b.to_vec())];
        run_on_f16_cpu(g, &params, &[("x", x), ("r", r)]).0
    }

    #[test]
    fn values_e4m3_holds_exactly_give_the_16_bit_result() {
        // Every row's largest magnitude is 2 (scale 2/448), every value a power of two or 0:
        // each is an e4m3 value once divided by its row's scale (2^a · 224 = 1.75 · 2^(a+7)).
        // The scales themselves are f32 roundings, so the results agree to f16's rounding.
        let pick = |i: usize| [2.0, -1.0, 0.5, 1.0, -0.25, 0.0][i % 6];
        let x: Vec<f32> = (0..3 * 32).map(|i| pick(i * 7 + 1)).collect();
        let mut x = x;
        for row in x.chunks_mut(32) {
            row[0] = 2.0;
        }
        let w: Vec<f32> = (0..8 * 32).map(|i| pick(i * 5 + 2) / 64.0).collect();
        let mut w = w;
        for row in w.chunks_mut(32) {
            row[3] = -2.0 / 64.0;
        }
        let b: Vec<f32> = (0..8).map(|i| i as f32 / 8.0).collect();
        let r: Vec<f32> = (0..3 * 8).map(|i| 1.0 - i as f32 / 16.0).collect();
        let fp8 = run_block_linear(true, &x, &w, &b, &r);
        let half = run_block_linear(false, &x, &w, &b, &r);
        for (a, b) in fp8.iter().zip(&half) {
            assert!(
                (a - b).abs() <= b.abs() * 2f32.powi(-10),
                "{fp8:?}\n{half:?}"
            );
        }
    }

    #[test]
    fn other_values_round_to_e4m3_and_stay_close() {
        let x: Vec<f32> = (0..4 * 32)
            .map(|i| (i * 37 % 101) as f32 / 50.0 - 1.0)
            .collect();
        let w: Vec<f32> = (0..16 * 32)
            .map(|i| (i * 53 % 97) as f32 / 480.0 - 0.1)
            .collect();
        let b = vec![0.05; 16];
        let r = vec![0.0; 4 * 16];
        let fp8 = run_block_linear(true, &x, &w, &b, &r);
        let half = run_block_linear(false, &x, &w, &b, &r);
        assert_ne!(fp8, half);
        let relative = relative_error(&fp8, &half);
        // Two e4m3 roundings of 2^-4 at worst each, averaging far less over a sum of 32.
        assert!(relative < 3e-2, "relative error {relative}");
    }

    /// `fc(layernorm(x))` with the layer in FP8 or not, on a CPU emulating f16, and the plan's
    /// type for the layernorm's output.
    fn run_normalized_linear(fp8: bool, x: &[f32]) -> (Vec<f32>, DType) {
        let (m, k, n) = (x.len() / 32, 32, 16);
        let mut g = Graph::default();
        let xv = g.add_input("x", &[m, k]);
        let gamma = g.add_param("gamma", &[k]);
        let beta = g.add_param("beta", &[k]);
        let w = g.add_param("w", &[n, k]);
        let normed = g
            .add_node(
                "encoder.layer.0.norm",
                Op::LayerNorm { eps: 1e-6 },
                &[xv, gamma, beta],
            )
            .unwrap();
        let y = g
            .add_node(
                "encoder.layer.0.fc",
                Op::Linear {
                    epilogue: Epilogue::NONE,
                },
                &[normed, w],
            )
            .unwrap();
        g.mark_output("y", y);
        if fp8 {
            quantize_linears(&mut g, &Fp8Layers::All).unwrap();
        }
        let ramp = |len: usize, scale: f32| -> Vec<f32> {
            (0..len)
                .map(|i| ((i * 29 % 31) as f32 / 15.0 - 1.0) * scale)
                .collect()
        };
        let params = [
            (
                "gamma",
                ramp(k, 1.0).iter().map(|v| 1.0 + v / 2.0).collect(),
            ),
            ("beta", ramp(k, 0.1)),
            ("w", ramp(n * k, 0.2)),
        ];
        let (out, dtypes) = run_on_f16_cpu(g, &params, &[("x", x)]);
        (out, dtypes[normed])
    }

    #[test]
    fn a_layernorm_read_only_by_fp8_layers_writes_their_codes() {
        let x: Vec<f32> = (0..5 * 32)
            .map(|i| (i * 13 % 37) as f32 / 9.0 - 2.0)
            .collect();
        let (fp8, dtype) = run_normalized_linear(true, &x);
        assert_eq!(dtype, DType::E4M3);
        let (half, dtype) = run_normalized_linear(false, &x);
        assert_eq!(dtype, DType::F16);
        assert_ne!(fp8, half);
        let relative = relative_error(&fp8, &half);
        // Each operand rounded to e4m3 (2^-4 apart): about 2% RMS each.
        assert!(relative < 6e-2, "relative error {relative}");
    }
}
