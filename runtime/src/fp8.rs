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
//! With calibrated static scales ([`use_static_scales`], a `vitrt calibrate` file), an
//! activation is quantised with one scale for the whole tensor, fixed beforehand, so its
//! producer can write the codes itself: a layernorm feeding FP8 layers becomes
//! [`Op::LayerNormE4m3`], and an FP8 layer whose output only FP8 layers read (fc1 with its GELU
//! for fc2) writes e4m3 from its epilogue ([`Fp8Io::e4m3_output`]). Elsewhere (the attention's
//! output for its projection, a 16-bit layer's output) the reader quantises with the static
//! scale in a pass of its own, element-wise: no row reduction.
//!
//! Attention stays in the compute type: in e4m3 it cost the real DINOv2 three times the
//! embedding error of the linear layers (same NOTES entry).

use crate::graph::{Fp8Io, Graph, Op, ParamSource, ValueKind};
use std::collections::{BTreeMap, BTreeSet};
use vitrt_kernels::quantize::{self, ActivationScale, QuantizeProblem};
use vitrt_kernels::{e4m3, matmul, DType, Epilogue, MatmulProblem};

/// The largest e4m3 magnitude: a scale is an amax over it.
pub const E4M3_MAX: f32 = vitrt_kernels::e4m3::MAX;

/// The smallest scale the kernels give (a row of zeros'); a static scale is kept above it too.
pub const MIN_SCALE: f32 = quantize::MIN_SCALE;

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
    /// Every candidate but the attention output projections (those reading an attention's
    /// context).
    ExceptAttentionOutputs,
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

    /// The choice used with calibrated static scales when no report has made one:
    /// [`Fp8Layers::ExceptAttentionOutputs`]. Static scales make the second MLP layer's input
    /// quantisation free ([`use_static_scales`]: the first MLP layer's epilogue writes it in
    /// e4m3, its GELU output times the reciprocal of the static scale), and that layer is
    /// where they gain most. The attention output projection would only need an element-wise
    /// pass with its scale, but it gains little in FP8 (0.108 ms with a dynamic pass against
    /// 0.112 in f16 on ViT-B/16 at batch 256) and costs the most accuracy: on the real DINOv2
    /// ViT-S/14 (emulated, 26 pictures, scales calibrated on other images), every layer in FP8
    /// keeps a mean cosine of 0.99741 to f32, every one but the attention outputs 0.99825
    /// (benchmarks/NOTES.md, 2026-11-28 "A safe default with static scales").
    pub fn default_choice_with_static_scales() -> Fp8Layers {
        Fp8Layers::ExceptAttentionOutputs
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

/// Whether candidate `node` reads an attention's context (the attention output projection).
pub fn reads_attention(graph: &Graph, node: usize) -> bool {
    let x = graph.nodes[node].inputs[0];
    graph.nodes.iter().any(|n| {
        n.output == x && matches!(n.op, Op::Attention { .. } | Op::AttentionContext { .. })
    })
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
            Fp8Layers::ExceptAttentionOutputs => !reads_attention(graph, id),
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
        node.op = Op::Fp8Linear {
            epilogue,
            io: Fp8Io::default(),
        };
        rewritten.push(name);
    }
    graph.validate().map_err(|e| e.to_string())?;
    Ok(rewritten)
}

/// Which input of an [`Op::Fp8Linear`] holds what: x, the weight's codes and its scales
/// (slots 0, 1, 2), then the static input scale, the output scale, the bias and the
/// residual, each where the node has it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fp8Slots {
    pub input_scale: Option<usize>,
    pub output_scale: Option<usize>,
    pub bias: Option<usize>,
    pub residual: Option<usize>,
    /// How many inputs the node has.
    pub count: usize,
}

impl Fp8Slots {
    pub fn of(epilogue: Epilogue, io: Fp8Io) -> Fp8Slots {
        let mut next = 3;
        let mut take = |present: bool| {
            present.then(|| {
                next += 1;
                next - 1
            })
        };
        let input_scale = take(io.static_input);
        let output_scale = take(io.e4m3_output);
        let bias = take(epilogue.bias);
        let residual = take(epilogue.residual);
        Fp8Slots {
            input_scale,
            output_scale,
            bias,
            residual,
            count: next,
        }
    }
}

/// Calibrated static input scales of FP8 linear layers, by node name: what a `vitrt
/// calibrate` file holds once read and checked against the model.
pub type StaticScales = BTreeMap<String, f32>;

/// Gives every [`Op::Fp8Linear`] of `graph` its static input scale from `scales` (an input
/// [`ParamSource::Fp8InputScale`]), then lets the producers write e4m3 where they can: a
/// layernorm whose every reader is such a layer with one scale becomes
/// [`Op::LayerNormE4m3`]; an FP8 layer without residual whose output only such layers read
/// writes e4m3 with their scale ([`Fp8Io::e4m3_output`]). The others' inputs are quantised
/// by their reader with the static scale. A layer without a scale in `scales`, or a scale
/// that is not positive and finite, is an error.
pub fn use_static_scales(graph: &mut Graph, scales: &StaticScales) -> Result<(), String> {
    let mut scale_of_value = BTreeMap::new();
    for id in 0..graph.nodes.len() {
        let Op::Fp8Linear { epilogue, io } = graph.nodes[id].op else {
            continue;
        };
        let name = graph.nodes[id].name.clone();
        let Some(&scale) = scales.get(&name) else {
            return Err(format!(
                "the FP8 scales have no scale for the layer {name:?}, which runs in FP8 (were \
                 they calibrated for this model?)"
            ));
        };
        if !(scale > 0.0 && scale.is_finite()) {
            return Err(format!(
                "the FP8 scale of {name:?} is {scale}; a scale is positive and finite"
            ));
        }
        let param = graph.add_param_source(ParamSource::Fp8InputScale { layer: name, scale }, &[1]);
        scale_of_value.insert(param, scale);
        let io = Fp8Io {
            static_input: true,
            ..io
        };
        let slot = Fp8Slots::of(epilogue, io)
            .input_scale
            .expect("static input");
        let node = &mut graph.nodes[id];
        node.inputs.insert(slot, param);
        node.op = Op::Fp8Linear { epilogue, io };
    }
    let users = graph.consumers();
    for id in 0..graph.nodes.len() {
        let v = graph.nodes[id].output;
        let k = graph.values[v].shape.last().copied().unwrap_or(0);
        if graph.is_output(v) || users[v].is_empty() || k == 0 || !k.is_multiple_of(K_MULTIPLE) {
            continue;
        }
        // The scale param every reader takes x with, if they are all static FP8 layers
        // reading v only as x and their scales are one value.
        let mut param = None;
        let mut one_scale = true;
        for &u in &users[v] {
            let reader = &graph.nodes[u];
            let Op::Fp8Linear { epilogue, io } = reader.op else {
                one_scale = false;
                break;
            };
            let slot = Fp8Slots::of(epilogue, io).input_scale;
            let reads_only_x = reader.inputs[0] == v && reader.inputs[1..].iter().all(|&i| i != v);
            let Some(slot) = slot.filter(|_| reads_only_x) else {
                one_scale = false;
                break;
            };
            let p = reader.inputs[slot];
            match param {
                None => param = Some(p),
                Some(first) if scale_of_value[&first] == scale_of_value[&p] => {}
                Some(_) => one_scale = false,
            }
        }
        let Some(param) = param.filter(|_| one_scale) else {
            continue;
        };
        let node = &mut graph.nodes[id];
        match node.op {
            Op::LayerNorm { eps } => {
                node.op = Op::LayerNormE4m3 { eps };
                node.inputs.push(param);
            }
            Op::Fp8Linear { epilogue, io } if !epilogue.residual && !io.e4m3_output => {
                let io = Fp8Io {
                    e4m3_output: true,
                    ..io
                };
                let slot = Fp8Slots::of(epilogue, io)
                    .output_scale
                    .expect("e4m3 output");
                node.inputs.insert(slot, param);
                node.op = Op::Fp8Linear { epilogue, io };
            }
            _ => {}
        }
    }
    graph.validate().map_err(|e| e.to_string())
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
            matches!(
                reader.op,
                Op::Fp8Linear {
                    io: Fp8Io {
                        static_input: false,
                        ..
                    },
                    ..
                }
            ) && reader.inputs[0] == v
                && reader.inputs[1..].iter().all(|&i| i != v)
        })
}

/// Refuses, as the GPU's FP8 matmul does, operands it does not read: x, the bias, the
/// residual and the output in the run's 16-bit `compute` type (x and the output may be e4m3
/// codes, x from its producer, the output with `io.e4m3_output`), the weight in e4m3, its
/// scales and the static scales in f32. `inputs` are the node's input types in order.
pub fn check_storage(
    compute: DType,
    epilogue: Epilogue,
    io: Fp8Io,
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
    if io.static_input {
        wanted.push(("the static input scale", DType::F32));
    }
    if io.e4m3_output {
        wanted.push(("the output scale", DType::F32));
    }
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
    let written = if io.e4m3_output { DType::E4M3 } else { compute };
    if output != written {
        return Err(format!(
            "this FP8 linear layer writes {written}, not {output} (FP8 runs keep the residual \
             stream in the compute type)"
        ));
    }
    Ok(())
}

/// The e4m3 values of `values` quantised with one static `scale`, as the device writes them
/// (`vitrt_kernels::quantize`'s per-tensor mode, the FP8 matmul's e4m3 C and the static
/// e4m3 layernorm all take `e4m3(v · (1 / scale))`).
pub fn round_static(values: &[f32], scale: f32) -> Vec<f32> {
    let inverse = quantize::inverse_scale(scale);
    values
        .iter()
        .map(|&v| e4m3::decode(e4m3::encode(v * inverse)))
        .collect()
}

/// The CPU's FP8 linear layer, on f32 slots: `ins` are the node's inputs in the order
/// [`Fp8Slots`] gives (x `[M, k]`, the weight's e4m3 values `[n, k]`, their scales `[n]`, the
/// static scales `io` asks for, the bias and the residual `epilogue` asks for). x is quantised
/// with a scale a row ([`quantize_rows`]) or, with `io.static_input`, with its static scale;
/// the product of the e4m3 values accumulates in f32 and is scaled back, `acc · (x_scale ·
/// w_scale) + bias`, then the activation and the residual, as the device's epilogue applies
/// them (`vitrt_kernels::matmul::Fp8Problem`). With `io.e4m3_output`, `out` gets the e4m3
/// values of the result over the output scale ([`round_static`]), not rounded to 16 bits first.
/// With `quantized`, x comes as its producer quantised it (e4m3 values, and row scales unless
/// the input is static) and `ins[0]` is not read.
#[allow(clippy::too_many_arguments)]
pub fn emulate_linear(
    epilogue: Epilogue,
    io: Fp8Io,
    k: usize,
    n: usize,
    ins: &[&[f32]],
    quantized: Option<(&[f32], &[f32])>,
    out: &mut [f32],
    tiles: matmul::cpu::MatmulTiles,
) -> Result<(), String> {
    let slots = Fp8Slots::of(epilogue, io);
    if ins.len() != slots.count {
        return Err(format!(
            "fp8_linear takes {} operands, got {}",
            slots.count,
            ins.len()
        ));
    }
    let (weight, w_scales) = (ins[1], ins[2]);
    let one = |slot: Option<usize>| -> Result<Option<f32>, String> {
        slot.map(|s| {
            ins[s]
                .first()
                .copied()
                .ok_or_else(|| "fp8_linear: an empty static scale".to_string())
        })
        .transpose()
    };
    let (static_scale, out_scale) = (one(slots.input_scale)?, one(slots.output_scale)?);
    // x holds the compute type's values already (the CPU stores them rounded).
    let quantized_here;
    let (units, x_scales) = match (quantized, static_scale) {
        (Some((units, _)), Some(scale)) => (units, vec![scale]),
        (Some((units, scales)), None) => (units, scales.to_vec()),
        (None, Some(scale)) => {
            quantized_here = quantize_static(ins[0], k, scale)?;
            (quantized_here.as_slice(), vec![scale])
        }
        (None, None) => {
            let (units, scales) = quantize_rows(ins[0], k, DType::F32)?;
            quantized_here = units;
            (quantized_here.as_slice(), scales)
        }
    };
    let m = units.len() / k.max(1);
    let scale_of_row = |row: usize| x_scales[if static_scale.is_some() { 0 } else { row }];
    if units.len() != m * k
        || x_scales.len() != if static_scale.is_some() { 1 } else { m }
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
    let bias = slots.bias.map(|s| ins[s]);
    let residual = slots.residual.map(|s| ins[s]);
    let product = MatmulProblem::linear(m, n, k, Epilogue::NONE);
    matmul::cpu::matmul(&product, tiles, units, weight, None, None, out);
    for (row, values) in out.chunks_mut(n.max(1)).enumerate() {
        let x_scale = scale_of_row(row);
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
    if let Some(scale) = out_scale {
        let rounded = round_static(out, scale);
        out.copy_from_slice(&rounded);
    }
    Ok(())
}

/// `x` (rows of `k` values) as the e4m3 values of the static quantisation with `scale`, by the
/// kernels' twin (`vitrt_kernels::quantize::cpu`, per tensor).
pub fn quantize_static(x: &[f32], k: usize, scale: f32) -> Result<Vec<f32>, String> {
    let problem = QuantizeProblem {
        rows: x.len() / k.max(1),
        cols: k,
        input: DType::F32,
        scale: ActivationScale::PerTensor,
    };
    problem.check()?;
    let mut codes = vec![0u8; problem.rows * k];
    quantize::cpu::quantize_rows(&problem, x, &mut codes, &mut [scale]);
    Ok(e4m3::decode_slice(&codes))
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

    /// One block's MLP, `fc2(gelu(fc1(layernorm(x)))) + r`, named as a ViT's, with every layer
    /// in FP8 and the static scales given (none: per-row scales).
    fn mlp_block(scales: Option<&StaticScales>) -> Graph {
        let (m, k, hidden) = (5, 32, 64);
        let mut g = Graph::default();
        let x = g.add_input("x", &[m, k]);
        let r = g.add_input("r", &[m, k]);
        let gamma = g.add_param("gamma", &[k]);
        let beta = g.add_param("beta", &[k]);
        let w1 = g.add_param("w1", &[hidden, k]);
        let b1 = g.add_param("b1", &[hidden]);
        let w2 = g.add_param("w2", &[k, hidden]);
        let b2 = g.add_param("b2", &[k]);
        let normed = g
            .add_node(
                "encoder.layer.0.norm",
                Op::LayerNorm { eps: 1e-6 },
                &[x, gamma, beta],
            )
            .unwrap();
        let gelu = Epilogue {
            bias: true,
            activation: vitrt_kernels::Activation::Gelu,
            ..Epilogue::NONE
        };
        let h = g
            .add_node(
                "encoder.layer.0.fc1",
                Op::Linear { epilogue: gelu },
                &[normed, w1, b1],
            )
            .unwrap();
        let residual = Epilogue {
            bias: true,
            residual: true,
            ..Epilogue::NONE
        };
        let y = g
            .add_node(
                "encoder.layer.0.fc2",
                Op::Linear { epilogue: residual },
                &[h, w2, b2, r],
            )
            .unwrap();
        g.mark_output("y", y);
        quantize_linears(&mut g, &Fp8Layers::All).unwrap();
        if let Some(scales) = scales {
            use_static_scales(&mut g, scales).unwrap();
        }
        g
    }

    fn mlp_scales() -> StaticScales {
        [
            ("encoder.layer.0.fc1".to_string(), 3.5 / 448.0),
            ("encoder.layer.0.fc2".to_string(), 0.75 / 448.0),
        ]
        .into_iter()
        .collect()
    }

    fn ramp(len: usize, scale: f32, offset: f32) -> Vec<f32> {
        (0..len)
            .map(|i| ((i * 29 % 31) as f32 / 15.0 - 1.0) * scale + offset)
            .collect()
    }

    fn mlp_params() -> Vec<(&'static str, Vec<f32>)> {
        vec![
            ("gamma", ramp(32, 0.5, 1.0)),
            ("beta", ramp(32, 0.1, 0.0)),
            ("w1", ramp(64 * 32, 0.2, 0.0)),
            ("b1", ramp(64, 0.05, 0.0)),
            ("w2", ramp(32 * 64, 0.1, 0.0)),
            ("b2", ramp(32, 0.05, 0.0)),
        ]
    }

    #[test]
    fn static_scales_let_the_producers_write_e4m3() {
        let g = mlp_block(Some(&mlp_scales()));
        let ops: Vec<&Op> = g.nodes.iter().map(|n| &n.op).collect();
        assert!(matches!(ops[0], Op::LayerNormE4m3 { .. }), "{ops:?}");
        let io = |i: usize| match ops[i] {
            Op::Fp8Linear { io, .. } => *io,
            other => panic!("{other:?}"),
        };
        // fc1 reads the layernorm's codes and writes fc2's with fc2's scale.
        assert_eq!(
            io(1),
            Fp8Io {
                static_input: true,
                e4m3_output: true
            }
        );
        let fc1_out_scale =
            g.nodes[1].inputs[Fp8Slots::of(Epilogue::NONE, io(1)).output_scale.unwrap()];
        assert_eq!(
            g.values[fc1_out_scale].kind,
            ValueKind::Param(ParamSource::Fp8InputScale {
                layer: "encoder.layer.0.fc2".into(),
                scale: 0.75 / 448.0
            })
        );
        // fc2 adds the residual: it writes the compute type.
        assert_eq!(
            io(2),
            Fp8Io {
                static_input: true,
                e4m3_output: false
            }
        );
        let plan = crate::Plan::new(&g, crate::Precision::uniform(DType::F16));
        assert_eq!(plan.dtypes[g.nodes[0].output], DType::E4M3);
        assert_eq!(plan.dtypes[g.nodes[1].output], DType::E4M3);
        // Neither FP8 layer needs a quantisation pass.
        assert!(plan.workspaces[1].is_none() && plan.workspaces[2].is_none());
    }

    #[test]
    fn the_static_emulation_is_the_twins_chained() {
        let x: Vec<f32> = (0..5 * 32)
            .map(|i| DType::F16.round((i * 13 % 37) as f32 / 9.0 - 2.0))
            .collect();
        let params = mlp_params();
        let r: Vec<f32> = (0..5 * 32)
            .map(|i| DType::F16.round(i as f32 / 64.0))
            .collect();
        let inputs = [("x", x.as_slice()), ("r", r.as_slice())];
        let (out, _) = run_on_f16_cpu(mlp_block(Some(&mlp_scales())), &params, &inputs);

        // The same chain by hand from the kernels' twins.
        let p = |name: &str| params.iter().find(|(n, _)| *n == name).unwrap().1.clone();
        let (s1, s2) = (3.5f32 / 448.0, 0.75f32 / 448.0);
        let mut codes = vec![0u8; x.len()];
        vitrt_kernels::layernorm::cpu::layernorm_e4m3_static(
            &x,
            &p("gamma"),
            &p("beta"),
            DType::F16,
            32,
            1e-6,
            s1,
            &mut codes,
        );
        let units = e4m3::decode_slice(&codes);
        let f16 = |v: Vec<f32>| {
            v.into_iter()
                .map(|x| DType::F16.round(x))
                .collect::<Vec<_>>()
        };
        let (w1, w1_scales) = quantize_weight(&p("w1"), 64, 32).unwrap();
        let (w2, w2_scales) = quantize_weight(&p("w2"), 32, 64).unwrap();
        let tiles = matmul::cpu::MatmulTiles::default();
        let mut acc1 = vec![0f32; 5 * 64];
        matmul::cpu::matmul(
            &MatmulProblem::linear(5, 64, 32, Epilogue::NONE),
            tiles,
            &units,
            &w1,
            None,
            None,
            &mut acc1,
        );
        let b1 = f16(p("b1"));
        let h: Vec<f32> = acc1
            .iter()
            .enumerate()
            .map(|(i, &a)| {
                let v = a * (s1 * w1_scales[i % 64]) + b1[i % 64];
                let v = vitrt_kernels::Activation::Gelu.apply(v);
                e4m3::decode(e4m3::encode(v * quantize::inverse_scale(s2)))
            })
            .collect();
        let mut acc2 = vec![0f32; 5 * 32];
        matmul::cpu::matmul(
            &MatmulProblem::linear(5, 32, 64, Epilogue::NONE),
            tiles,
            &h,
            &w2,
            None,
            None,
            &mut acc2,
        );
        let b2 = f16(p("b2"));
        let want: Vec<f32> = acc2
            .iter()
            .enumerate()
            .map(|(i, &a)| DType::F16.round(a * (s2 * w2_scales[i % 32]) + b2[i % 32] + r[i]))
            .collect();
        assert_eq!(out, want);

        // Per-row scales give other values: the static ones were used.
        let (dynamic, _) = run_on_f16_cpu(mlp_block(None), &params, &inputs);
        assert_ne!(out, dynamic);
        assert!(relative_error(&out, &dynamic) < 0.1);
    }

    #[test]
    fn a_missing_or_bad_static_scale_is_an_error() {
        let mut g = two_block_graph();
        quantize_linears(&mut g, &Fp8Layers::All).unwrap();
        let mut scales: StaticScales = [
            ("encoder.layer.0.dense".to_string(), 0.1),
            ("encoder.layer.1.dense".to_string(), 0.1),
        ]
        .into_iter()
        .collect();
        let err = use_static_scales(&mut g.clone(), &scales).unwrap_err();
        assert!(
            err.contains("no scale for the layer \"encoder.layer.2.dense\""),
            "{err}"
        );
        scales.insert("encoder.layer.2.dense".into(), f32::INFINITY);
        let err = use_static_scales(&mut g.clone(), &scales).unwrap_err();
        assert!(err.contains("positive and finite"), "{err}");
        scales.insert("encoder.layer.2.dense".into(), 0.2);
        use_static_scales(&mut g, &scales).unwrap();
        // Layer 1's layernorm writes its codes; layer 0's output is read by that layernorm, so
        // it stays 16-bit; layer 1 writes layer 2's codes with layer 2's scale.
        let kinds: Vec<&str> = g.nodes.iter().map(|n| n.op.kind_name()).collect();
        assert_eq!(
            kinds,
            [
                "fp8_linear",
                "layernorm_e4m3",
                "fp8_linear",
                "fp8_linear",
                "linear"
            ]
        );
        let e4m3_output =
            |i: usize| matches!(g.nodes[i].op, Op::Fp8Linear { io, .. } if io.e4m3_output);
        assert_eq!(
            (0..4).map(e4m3_output).collect::<Vec<_>>(),
            [false, false, true, false]
        );
        let out_scale = *g.nodes[2].inputs.last().unwrap();
        assert!(matches!(
            &g.values[out_scale].kind,
            ValueKind::Param(ParamSource::Fp8InputScale { scale, .. }) if *scale == 0.2
        ));
    }
}
