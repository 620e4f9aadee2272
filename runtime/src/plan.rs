//! The memory plan: every input and activation gets a byte range in one arena, and two
//! values share bytes only when their lifetimes do not overlap. Node workspaces (scratch a
//! node needs while it runs, such as patch rows) are planned the same way.
//!
//! Placement is greedy by size: the largest buffers are placed first, each at the lowest
//! offset that does not collide with an already placed buffer alive at the same time.
//!
//! The plan also fixes each value's storage type ([`Precision`]): inputs f32 unless a matmul
//! reads them (then the type it reads them in), the residual stream in the residual type, a
//! layernorm's gamma and beta f32, everything else in the compute type.

use crate::error::RuntimeError;
use crate::graph::{Graph, Op, ParamSource, ValueKind};
use vitrt_kernels::DType;

/// The storage types of a run. Every kernel's operands (weights, normalised activations,
/// attention scores, MLP activations) are stored in `compute`; the residual stream, the values
/// each transformer block adds into, in `residual`.
///
/// A half-precision run keeps the stream in f32 by default: stored in bf16 it is rounded after
/// every block (8 bits of mantissa), and the error grows with depth. Measured on ViT-B/16 with
/// random weights (H200, per-layer worst relative error against PyTorch fp32): 1.37e-2 with a
/// bf16 stream, PyTorch's own bf16 1.68e-2. The cost is the stream's bytes: a residual add
/// reads and writes f32, a layernorm reads f32.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Precision {
    pub compute: DType,
    pub residual: DType,
}

impl Precision {
    /// The residual stream in `residual`, which must be f32 or `compute`.
    pub fn new(compute: DType, residual: DType) -> Result<Precision, RuntimeError> {
        if residual != DType::F32 && residual != compute {
            return Err(RuntimeError::Unsupported(format!(
                "the residual stream is stored as f32 or as the run's dtype ({compute}), not {residual}"
            )));
        }
        Ok(Precision { compute, residual })
    }

    /// The default for runs in `compute`: the residual stream in f16 for f16 runs, as PyTorch
    /// stores it (f16 parity of ViT-B/16 against float64: 2.0e-3 with an f16 stream, 1.2e-3
    /// with an f32 one; batch 256 4-6% faster on an H200), in f32 for bf16 runs, whose 8-bit
    /// mantissa rounded after every block costs too much (1.4e-2 against 9.3e-3), and for f32.
    pub fn default_for(compute: DType) -> Precision {
        match compute {
            DType::F16 => Precision::uniform(DType::F16),
            _ => Precision::with_f32_residual(compute),
        }
    }

    /// The residual stream in f32.
    pub fn with_f32_residual(compute: DType) -> Precision {
        Precision {
            compute,
            residual: DType::F32,
        }
    }

    /// Every value in `compute` (apart from the f32 inputs).
    pub fn uniform(compute: DType) -> Precision {
        Precision {
            compute,
            residual: compute,
        }
    }
}

/// Every offset is a multiple of this, so vector loads and `cp.async` see aligned bases.
pub const ALIGNMENT: usize = 256;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Region {
    pub offset: usize,
    pub bytes: usize,
}

#[derive(Clone, Debug)]
pub struct Plan {
    pub precision: Precision,
    /// Per value: its storage type (parameters too: the compute type, or f32 for a layernorm's
    /// gamma and beta).
    pub dtypes: Vec<DType>,
    /// Per value: its region in the arena (None for parameters).
    pub values: Vec<Option<Region>>,
    /// Per node: its workspace, if it needs one.
    pub workspaces: Vec<Option<Region>>,
    pub arena_bytes: usize,
}

/// Bytes a value takes in the arena: its elements in `dtype`, or for an e4m3 activation its
/// codes and row scales ([`crate::fp8::InputWorkspace`]).
pub fn value_bytes(value: &crate::graph::Value, dtype: DType) -> usize {
    let cols = value.shape.last().copied().unwrap_or(0);
    let rows = value.numel() / cols.max(1);
    match dtype {
        DType::E4M3 => crate::fp8::InputWorkspace::new(rows, cols).bytes,
        _ if value.row_statistics => {
            crate::layernorm_fold::StatisticsLayout::new(rows, cols, dtype).bytes
        }
        _ => value.numel() * dtype.size_bytes(),
    }
}

/// Bytes of scratch a node needs while it runs: the patch embedding's patch rows (in
/// `compute`), an FP8 linear layer's quantised input ([`crate::fp8::InputWorkspace`]) unless
/// its producer wrote it quantised (`dtypes`: the plan's value types).
pub fn workspace_bytes(graph: &Graph, node: usize, compute: DType, dtypes: &[DType]) -> usize {
    let n = &graph.nodes[node];
    match n.op {
        Op::PatchEmbed { patch, .. } => {
            let pixels = &graph.values[n.inputs[0]].shape;
            let (b, c, h, w) = (pixels[0], pixels[1], pixels[2], pixels[3]);
            b * (h / patch) * (w / patch) * c * patch * patch * compute.size_bytes()
        }
        Op::Fp8Linear { .. } if dtypes[n.inputs[0]] != DType::E4M3 => {
            let x = &graph.values[n.inputs[0]];
            let k = x.shape.last().copied().unwrap_or(0);
            crate::fp8::InputWorkspace::new(x.numel() / k.max(1), k).bytes
        }
        _ => 0,
    }
}

/// The storage type of every value under `precision`, in one pass over the nodes (which come
/// in execution order). The residual stream starts at the patch or token embedding and runs through
/// every add into it: an Add, or a Linear with a residual epilogue, whose residual is in the
/// stream stays in it. Token selections and an unfused activation keep their input's type.
/// The unfused attention's scores are stored in the residual type, and the softmax over them
/// writes the compute type (or keeps its input's type where its output leaves the graph).
/// A row normalisation read only as the residual type is (an output) writes that type.
///
/// A linear layer whose every reader takes the residual type as it is writes in that type too:
/// the logits and other outputs, directly or through activations and token selections (the
/// pooler's tanh), and the branches added into a sum (DeiT's two heads, the residual of
/// SigLIP's pooling head, the unfused graph's attention and MLP outputs). Rounding such a
/// value to `compute` would only add error (up to 2^-9 of each value in bf16) that PyTorch's
/// own bf16 also has; a matmul operand or an attention input needs `compute`, so any such
/// reader keeps the value there. Everything else is `compute`.
///
/// Graph inputs are fed as f32 and stored as their readers read them ([`input_dtype`]): one
/// read only by matmuls (NaFlex's patch rows, its resized positions and additive key mask) in
/// the type the matmul takes, so a half-precision run never hands a kernel an f32 operand it
/// reads as half; any other input in f32.
///
/// Parameters are stored in `compute`, but those read only as a layernorm's gamma and beta
/// (or an RMSNorm's weight) are f32 in every run: its kernel takes them so
/// (kernels/src/layernorm/layernorm.cu, kernels/src/rmsnorm/rmsnorm.cu), and
/// rounded to 8 mantissa bits they cost about as much as a weight matrix's rounding
/// (benchmarks/NOTES.md, 2026-11-25 "layernorm parameters in f32").
pub fn value_dtypes(graph: &Graph, precision: Precision) -> Vec<DType> {
    let is_output = |v: usize| graph.outputs.iter().any(|(_, o)| *o == v);
    let users = graph.consumers();
    let layernorm_parameter = |v: usize| {
        !users[v].is_empty()
            && users[v].iter().all(|&u| {
                let reader = &graph.nodes[u];
                matches!(
                    reader.op,
                    Op::LayerNorm { .. } | Op::LayerNormE4m3 { .. } | Op::RmsNorm { .. }
                ) && reader.inputs[0] != v
            })
    };
    let mut dtypes: Vec<DType> = graph
        .values
        .iter()
        .enumerate()
        .map(|(v, value)| match value.kind {
            ValueKind::Input => DType::F32,
            ValueKind::Param(ParamSource::Fp8Weight(_)) => DType::E4M3,
            ValueKind::Param(ParamSource::Fp8Scale { .. }) => DType::F32,
            ValueKind::Param(ParamSource::Fp8InputScale { .. }) => DType::F32,
            ValueKind::Param(ParamSource::LayernormColumnSums { .. }) => DType::F32,
            ValueKind::Param(_) if layernorm_parameter(v) => DType::F32,
            _ => precision.compute,
        })
        .collect();
    // Whether every reader of `v` takes it in the residual type as it is: an add, a token
    // mean, a layernorm's input, a matmul's residual, or an activation or token selection
    // whose own output qualifies (they keep their input's type). Readers come after their
    // producer, so walking the nodes backwards settles them first.
    let mut read_as_residual = vec![false; graph.values.len()];
    for node in graph.nodes.iter().rev() {
        let v = node.output;
        read_as_residual[v] = users[v].iter().all(|&u| {
            let reader = &graph.nodes[u];
            let only_as = |slot: usize| {
                reader
                    .inputs
                    .iter()
                    .enumerate()
                    .all(|(i, &input)| input != v || i == slot)
            };
            match &reader.op {
                Op::Add | Op::MeanTokens { .. } | Op::L2Normalize => true,
                Op::LayerNorm { .. }
                | Op::LayerNormE4m3 { .. }
                | Op::RmsNorm { .. }
                | Op::LayerNormLinear { .. } => only_as(0),
                Op::Linear { epilogue } | Op::Fp8Linear { epilogue, .. } => {
                    epilogue.residual && only_as(reader.inputs.len() - 1)
                }
                Op::Activation(_) | Op::SelectToken { .. } | Op::Softmax { causal: false } => {
                    read_as_residual[reader.output]
                }
                Op::SelectEndToken { .. } => only_as(0) && read_as_residual[reader.output],
                _ => false,
            }
        });
    }
    let in_stream = |dtypes: &[DType], v: usize| {
        matches!(graph.values[v].kind, ValueKind::Activation) && dtypes[v] == precision.residual
    };
    for node in &graph.nodes {
        let dtype = match &node.op {
            Op::PatchEmbed { .. } | Op::TokenEmbedding => precision.residual,
            Op::Add if node.inputs.iter().any(|&v| in_stream(&dtypes, v)) => precision.residual,
            // The residual is the last input (after the bias, if any).
            Op::Linear { epilogue } | Op::Fp8Linear { epilogue, .. }
                if epilogue.residual
                    && node.inputs.last().is_some_and(|&v| in_stream(&dtypes, v)) =>
            {
                precision.residual
            }
            Op::Linear { .. } | Op::Fp8Linear { .. } | Op::LayerNormLinear { .. }
                if is_output(node.output) || read_as_residual[node.output] =>
            {
                precision.residual
            }
            Op::L2Normalize if read_as_residual[node.output] => precision.residual,
            // The unfused attention's scores: rounded to bf16 before the softmax, a score of
            // 20 would move by up to 0.04, its probability by 4% (the fused kernel keeps them
            // in registers in f32). The softmax reads them so and writes the compute type.
            Op::AttentionScores { .. } => precision.residual,
            Op::Softmax { .. } if read_as_residual[node.output] => dtypes[node.inputs[0]],
            Op::Activation(_) | Op::SelectToken { .. } | Op::SelectEndToken { .. } => {
                dtypes[node.inputs[0]]
            }
            _ => precision.compute,
        };
        dtypes[node.output] = dtype;
    }
    for v in graph.inputs() {
        dtypes[v] = input_dtype(graph, &users[v], v, &dtypes, precision.compute);
    }
    // A layernorm read only as the input of FP8 linear layers writes their e4m3 codes and row
    // scales itself (`crate::fp8::quantized_by_producer`): no quantisation pass runs. With
    // static scales, the producers `crate::fp8::use_static_scales` chose write e4m3 codes.
    for node in &graph.nodes {
        let static_e4m3 = match node.op {
            Op::LayerNormE4m3 { .. } => true,
            Op::Fp8Linear { io, .. } => io.e4m3_output,
            _ => false,
        };
        if static_e4m3 || crate::fp8::quantized_by_producer(graph, &users, node) {
            dtypes[node.output] = DType::E4M3;
        }
    }
    dtypes
}

/// A graph input's storage type: the type its readers' kernels read it in, where each reader
/// reads it as a matmul operand or residual (the caller's f32 values are converted as they are
/// written, rounded as the GPU stores them): patch rows as the patch embedding's A in
/// `compute`, a position table or an additive mask as a residual in the type the node writes
/// (the pair of residual and output types the matmul programs take). Every other input, and
/// one whose readers want different types, stays f32: pixels, token ids and key lengths (i32
/// bit patterns in f32 slots, which a conversion would destroy) are read as f32.
fn input_dtype(
    graph: &Graph,
    readers: &[usize],
    v: usize,
    dtypes: &[DType],
    compute: DType,
) -> DType {
    let mut wanted = None;
    for &u in readers {
        let node = &graph.nodes[u];
        for (slot, _) in node.inputs.iter().enumerate().filter(|(_, &i)| i == v) {
            let Some(dtype) = matmul_slot_dtype(&node.op, slot, dtypes[node.output], compute)
            else {
                return DType::F32;
            };
            if wanted.is_some_and(|w| w != dtype) {
                return DType::F32;
            }
            wanted = Some(dtype);
        }
    }
    wanted.unwrap_or(DType::F32)
}

/// The type a matmul-backed op reads its input `slot` in, given the type `output` it writes:
/// operands (A, B) and a bias in `compute`, a residual in the output's type. `None` for any
/// other op or slot (the key lengths of an attention).
fn matmul_slot_dtype(op: &Op, slot: usize, output: DType, compute: DType) -> Option<DType> {
    match op {
        Op::Linear { epilogue } => {
            let residual_slot = 2 + epilogue.bias as usize;
            if epilogue.residual && slot == residual_slot {
                Some(output)
            } else {
                Some(compute)
            }
        }
        // x in `compute` (the weight and its scales are parameters).
        Op::Fp8Linear { epilogue, io } => {
            let residual_slot = crate::fp8::Fp8Slots::of(*epilogue, *io).residual;
            if residual_slot == Some(slot) {
                Some(output)
            } else {
                Some(compute)
            }
        }
        Op::AttentionScores { key_padding, .. } => match slot {
            0 | 1 => Some(compute),
            2 if *key_padding => Some(output),
            _ => None,
        },
        Op::AttentionContext { .. } => Some(compute),
        Op::Attention { .. } if slot < 3 => Some(compute),
        // x, its A operand (the rest are parameters).
        Op::LayerNormLinear { .. } if slot == 0 => Some(compute),
        _ => None,
    }
}

struct Interval {
    first: usize,
    last: usize,
    bytes: usize,
    owner: Owner,
}

#[derive(Clone, Copy)]
enum Owner {
    Value(usize),
    Workspace(usize),
}

impl Plan {
    pub fn new(graph: &Graph, precision: Precision) -> Plan {
        let dtypes = value_dtypes(graph, precision);
        let steps = graph.nodes.len();
        // Lifetimes in node steps: inputs live from step 0; outputs to the end.
        let mut first = vec![usize::MAX; graph.values.len()];
        let mut last = vec![0usize; graph.values.len()];
        for v in graph.inputs() {
            first[v] = 0;
        }
        for (step, node) in graph.nodes.iter().enumerate() {
            first[node.output] = step;
            last[node.output] = last[node.output].max(step);
            for &v in &node.inputs {
                last[v] = last[v].max(step);
            }
        }
        for (_, v) in &graph.outputs {
            last[*v] = steps;
        }

        let mut intervals = Vec::new();
        for (v, value) in graph.values.iter().enumerate() {
            if matches!(value.kind, ValueKind::Param(_)) || first[v] == usize::MAX {
                continue;
            }
            let bytes = value_bytes(value, dtypes[v]);
            intervals.push(Interval {
                first: first[v],
                last: last[v].max(first[v]),
                bytes,
                owner: Owner::Value(v),
            });
        }
        for step in 0..steps {
            let bytes = workspace_bytes(graph, step, precision.compute, &dtypes);
            if bytes > 0 {
                intervals.push(Interval {
                    first: step,
                    last: step,
                    bytes,
                    owner: Owner::Workspace(step),
                });
            }
        }

        let mut order: Vec<usize> = (0..intervals.len()).collect();
        order.sort_by(|&a, &b| intervals[b].bytes.cmp(&intervals[a].bytes).then(a.cmp(&b)));
        let mut placed: Vec<(usize, Region)> = Vec::new();
        let mut values = vec![None; graph.values.len()];
        let mut workspaces = vec![None; steps];
        let mut arena_bytes = 0;
        for i in order {
            let iv = &intervals[i];
            let size = iv.bytes.div_ceil(ALIGNMENT).max(1) * ALIGNMENT;
            let mut busy: Vec<Region> = placed
                .iter()
                .filter(|(j, _)| intervals[*j].first <= iv.last && iv.first <= intervals[*j].last)
                .map(|(_, r)| *r)
                .collect();
            busy.sort_by_key(|r| r.offset);
            let mut offset = 0;
            for r in busy {
                if offset + size <= r.offset {
                    break;
                }
                offset = offset.max((r.offset + r.bytes).div_ceil(ALIGNMENT) * ALIGNMENT);
            }
            let region = Region {
                offset,
                bytes: iv.bytes,
            };
            arena_bytes = arena_bytes.max(offset + size);
            placed.push((
                i,
                Region {
                    offset,
                    bytes: size,
                },
            ));
            match iv.owner {
                Owner::Value(v) => values[v] = Some(region),
                Owner::Workspace(n) => workspaces[n] = Some(region),
            }
        }
        Plan {
            precision,
            dtypes,
            values,
            workspaces,
            arena_bytes,
        }
    }

    /// What the arena would take without any reuse: the figure the plan is measured against.
    pub fn unshared_bytes(&self) -> usize {
        self.values
            .iter()
            .chain(&self.workspaces)
            .flatten()
            .map(|r| r.bytes.div_ceil(ALIGNMENT) * ALIGNMENT)
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{Graph, Op};
    use vitrt_kernels::Activation;

    /// A chain of element-wise nodes with a skip connection, like a residual block.
    fn chain(len: usize) -> Graph {
        let mut g = Graph::default();
        let x = g.add_input("x", &[64, 100]);
        let mut h = x;
        let mut skip = x;
        for i in 0..len {
            let a = g
                .add_node(&format!("act{i}"), Op::Activation(Activation::Relu), &[h])
                .unwrap();
            h = g.add_node(&format!("add{i}"), Op::Add, &[a, skip]).unwrap();
            skip = h;
        }
        g.mark_output("out", h);
        g
    }

    fn assert_no_live_overlap(g: &Graph, plan: &Plan) {
        let steps = g.nodes.len();
        let mut life = vec![(usize::MAX, 0usize); g.values.len()];
        for v in g.inputs() {
            life[v].0 = 0;
        }
        for (s, n) in g.nodes.iter().enumerate() {
            life[n.output].0 = s;
            life[n.output].1 = life[n.output].1.max(s);
            for &v in &n.inputs {
                life[v].1 = life[v].1.max(s);
            }
        }
        for (_, v) in &g.outputs {
            life[*v].1 = steps;
        }
        for a in 0..g.values.len() {
            for b in a + 1..g.values.len() {
                let (Some(ra), Some(rb)) = (plan.values[a], plan.values[b]) else {
                    continue;
                };
                let alive_together = life[a].0 <= life[b].1 && life[b].0 <= life[a].1;
                let bytes_overlap =
                    ra.offset < rb.offset + rb.bytes && rb.offset < ra.offset + ra.bytes;
                assert!(
                    !(alive_together && bytes_overlap),
                    "values {a} and {b} collide"
                );
            }
        }
    }

    #[test]
    fn long_chains_reuse_a_few_buffers() {
        let g = chain(12);
        let plan = Plan::new(&g, Precision::uniform(DType::F32));
        assert_no_live_overlap(&g, &plan);
        let one: usize = 64 * 100 * 4;
        assert!(
            plan.arena_bytes <= 4 * one.div_ceil(ALIGNMENT) * ALIGNMENT,
            "arena {}",
            plan.arena_bytes
        );
        assert!(plan.unshared_bytes() > 20 * one);
    }

    #[test]
    fn outputs_stay_live_to_the_end() {
        let mut g = chain(6);
        let early = g.nodes[1].output;
        g.mark_output("early", early);
        let plan = Plan::new(&g, Precision::uniform(DType::F16));
        assert_no_live_overlap(&g, &plan);
        // Input stays f32 while activations take the run dtype.
        assert_eq!(plan.values[0].unwrap().bytes, 64 * 100 * 4);
        assert_eq!(plan.values[early].unwrap().bytes, 64 * 100 * 2);
    }

    /// A head like SigLIP's pooling head: a projection `a` read by a layernorm and added after
    /// an MLP branch `b`; a third projection `c` of the normalised value feeds a matmul.
    #[test]
    fn branches_added_into_an_output_are_written_in_the_residual_type() {
        use vitrt_kernels::Epilogue;
        let mut g = Graph::default();
        let x = g.add_input("x", &[4, 16]);
        let w = g.add_param("w", &[16, 16]);
        let gamma = g.add_param("gamma", &[16]);
        let beta = g.add_param("beta", &[16]);
        let linear = Op::Linear {
            epilogue: Epilogue::NONE,
        };
        let a = g.add_node("a", linear.clone(), &[x, w]).unwrap();
        let normed = g
            .add_node("norm", Op::LayerNorm { eps: 1e-6 }, &[a, gamma, beta])
            .unwrap();
        let c = g.add_node("c", linear.clone(), &[normed, w]).unwrap();
        let act = g
            .add_node("act", Op::Activation(Activation::Relu), &[c])
            .unwrap();
        let b = g.add_node("b", linear.clone(), &[act, w]).unwrap();
        let sum = g.add_node("sum", Op::Add, &[b, a]).unwrap();
        g.mark_output("out", sum);
        let dtypes = value_dtypes(&g, Precision::with_f32_residual(DType::BF16));
        assert_eq!(dtypes[a], DType::F32, "a: read by a layernorm and an add");
        assert_eq!(dtypes[b], DType::F32, "b: read by an add");
        assert_eq!(dtypes[sum], DType::F32);
        assert_eq!(dtypes[normed], DType::BF16, "a matmul operand");
        assert_eq!(dtypes[c], DType::BF16, "its activation feeds a matmul");
        assert_eq!(dtypes[act], DType::BF16);
        // A uniform bf16 run keeps every activation in bf16.
        let uniform = value_dtypes(&g, Precision::uniform(DType::BF16));
        assert!(uniform[a..].iter().all(|&d| d == DType::BF16));
    }

    /// A layernorm's gamma and beta are f32 in every run; a weight stays in the compute type,
    /// and so does a parameter that some other node reads too.
    #[test]
    fn layernorm_parameters_are_f32() {
        use vitrt_kernels::Epilogue;
        let mut g = Graph::default();
        let x = g.add_input("x", &[4, 16]);
        let w = g.add_param("w", &[16, 16]);
        let gamma = g.add_param("gamma", &[16]);
        let beta = g.add_param("beta", &[16]);
        let shared = g.add_param("shared", &[16]);
        let unread = g.add_param("unread", &[16]);
        let normed = g
            .add_node("norm", Op::LayerNorm { eps: 1e-6 }, &[x, gamma, beta])
            .unwrap();
        let again = g
            .add_node(
                "norm2",
                Op::LayerNorm { eps: 1e-6 },
                &[normed, gamma, shared],
            )
            .unwrap();
        let linear = Op::Linear {
            epilogue: Epilogue {
                bias: true,
                ..Epilogue::NONE
            },
        };
        let out = g.add_node("out", linear, &[again, w, shared]).unwrap();
        g.mark_output("out", out);
        for dtype in DType::ALL {
            for precision in [Precision::uniform(dtype), Precision::default_for(dtype)] {
                let dtypes = value_dtypes(&g, precision);
                assert_eq!(dtypes[gamma], DType::F32, "{precision:?}");
                assert_eq!(dtypes[beta], DType::F32, "{precision:?}");
                assert_eq!(dtypes[w], dtype, "{precision:?}");
                assert_eq!(dtypes[shared], dtype, "{precision:?}: a bias too");
                assert_eq!(dtypes[unread], dtype, "{precision:?}");
            }
        }
    }

    /// NaFlex's embedding and unfused scores: patch rows as a matmul's A, positions and an
    /// additive key mask as residuals, key lengths carried for the fused kernel. In a half
    /// run each is stored as its matmul reads it; the lengths stay f32 bit patterns.
    #[test]
    fn inputs_read_by_matmuls_are_stored_as_the_matmul_reads_them() {
        use crate::graph::HeadSlice;
        use vitrt_kernels::Epilogue;
        let mut g = Graph::default();
        let rows = g.add_input("pixel_values", &[2, 4, 12]);
        let positions = g.add_input("positions", &[2, 4, 8]);
        let mask = g.add_input("key_mask", &[2, 4]);
        let lengths = g.add_input("key_lengths", &[2]);
        let w = g.add_param("w", &[8, 12]);
        let b = g.add_param("b", &[8]);
        let embedding = Op::Linear {
            epilogue: Epilogue {
                bias: true,
                residual: true,
                ..Epilogue::NONE
            },
        };
        let x = g
            .add_node("embeddings", embedding, &[rows, w, b, positions])
            .unwrap();
        let scores = Op::AttentionScores {
            heads: 2,
            head_dim: 4,
            scale: 0.5,
            q: HeadSlice { column_offset: 0 },
            k: HeadSlice { column_offset: 0 },
            key_padding: true,
        };
        let s = g
            .add_node("scores", scores, &[x, x, mask, lengths])
            .unwrap();
        let p = g
            .add_node("probs", Op::Softmax { causal: false }, &[s])
            .unwrap();
        let context = Op::AttentionContext {
            heads: 2,
            head_dim: 4,
            v: HeadSlice { column_offset: 0 },
        };
        let o = g.add_node("context", context, &[p, x]).unwrap();
        let sum = g.add_node("residual", Op::Add, &[o, x]).unwrap();
        g.mark_output("out", sum);
        for compute in DType::ALL {
            for precision in [Precision::uniform(compute), Precision::default_for(compute)] {
                let dtypes = value_dtypes(&g, precision);
                assert_eq!(dtypes[rows], compute, "{precision:?}: the matmul's A");
                assert_eq!(
                    dtypes[positions], dtypes[x],
                    "{precision:?}: residual as written"
                );
                assert_eq!(
                    dtypes[mask], dtypes[s],
                    "{precision:?}: residual as written"
                );
                assert_eq!(
                    dtypes[lengths],
                    DType::F32,
                    "{precision:?}: i32 bit patterns"
                );
            }
        }
        // An input read by a matmul and by another op stays f32.
        let mut g = Graph::default();
        let input = g.add_input("x", &[1, 4, 12]);
        let w = g.add_param("w", &[8, 12]);
        let linear = Op::Linear {
            epilogue: Epilogue::NONE,
        };
        let y = g.add_node("y", linear, &[input, w]).unwrap();
        let z = g
            .add_node("z", Op::MeanTokens { start: 0 }, &[input])
            .unwrap();
        g.mark_output("y", y);
        g.mark_output("z", z);
        let dtypes = value_dtypes(&g, Precision::uniform(DType::BF16));
        assert_eq!(dtypes[input], DType::F32);
    }

    #[test]
    fn offsets_are_aligned() {
        let g = chain(5);
        let plan = Plan::new(&g, Precision::uniform(DType::BF16));
        for r in plan.values.iter().flatten() {
            assert_eq!(r.offset % ALIGNMENT, 0);
        }
    }
}
