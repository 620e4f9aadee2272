//! The storage types the plan gives a ViT's values: with the residual stream in f32, the stream
//! (patch embedding, every hidden state, every add into it) is f32 and every kernel operand is
//! in the compute type, fused and unfused; with a uniform precision everything but the pixels is
//! in the compute type. Checked on graphs of committed fixtures, no GPU needed.

use std::path::Path;
use vitrt_model::{GraphOptions, VisionModel};
use vitrt_runtime::passes::Fusion;
use vitrt_runtime::plan::value_dtypes;
use vitrt_runtime::{DType, Graph, Op, Precision, ValueKind};

fn graph(fixture: &str, fusion: Fusion) -> Graph {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/models")
        .join(fixture);
    let model = VisionModel::load(&dir).unwrap();
    model
        .build_graph(
            2,
            GraphOptions {
                hidden_states: true,
                fusion,
                ..Default::default()
            },
        )
        .unwrap()
}

#[test]
fn the_residual_stream_is_f32_and_every_operand_is_in_the_compute_type() {
    for fixture in ["tiny-gelu", "vitmodel-relu", "headdim18-nobias-gelunew"] {
        for fusion in [Fusion::ALL, Fusion::NONE] {
            let g = graph(fixture, fusion);
            let compute = DType::BF16;
            let dtypes = value_dtypes(&g, Precision::with_f32_residual(compute));
            let case = format!("{fixture} {fusion:?}");
            for (name, v) in &g.outputs {
                if name.starts_with("hidden_states.") {
                    assert_eq!(dtypes[*v], DType::F32, "{case}: {name}");
                }
            }
            let readers = g.consumers();
            let (mut stream_adds, mut layernorms) = (0, 0);
            for node in &g.nodes {
                let out = dtypes[node.output];
                let ins: Vec<DType> = node.inputs.iter().map(|&v| dtypes[v]).collect();
                let what = format!("{case}: node {} {:?} {ins:?} -> {out}", node.name, node.op);
                match &node.op {
                    Op::PatchEmbed { .. } => assert_eq!(out, DType::F32, "{what}"),
                    Op::LayerNorm { .. } => {
                        layernorms += 1;
                        assert_eq!((ins[0], out), (DType::F32, compute), "{what}");
                        assert_eq!((ins[1], ins[2]), (DType::F32, DType::F32), "{what}");
                    }
                    Op::Linear { epilogue } if epilogue.residual => {
                        stream_adds += 1;
                        assert_eq!(ins[0], compute, "{what}");
                        assert_eq!(
                            (*ins.last().unwrap(), out),
                            (DType::F32, DType::F32),
                            "{what}"
                        );
                    }
                    // Unfused, the branch added into the stream is f32 too (below).
                    Op::Add => {
                        stream_adds += 1;
                        assert_eq!(out, DType::F32, "{what}");
                        assert!(ins.contains(&DType::F32), "{what}");
                    }
                    Op::SelectToken { .. } => assert_eq!(out, ins[0], "{what}"),
                    // The unfused attention's scores stay f32 up to the softmax.
                    Op::AttentionScores { .. } => {
                        assert_eq!(
                            (ins[0], ins[1], out),
                            (compute, compute, DType::F32),
                            "{what}"
                        )
                    }
                    Op::Softmax { .. } => {
                        assert_eq!((ins[0], out), (DType::F32, compute), "{what}")
                    }
                    // The logits leave the graph unrounded, and a branch that is only added
                    // into the stream (the unfused attention and MLP outputs) is not rounded
                    // before the add.
                    Op::Linear { .. }
                        if g.outputs.iter().any(|(_, v)| *v == node.output)
                            || (!readers[node.output].is_empty()
                                && readers[node.output]
                                    .iter()
                                    .all(|&r| matches!(g.nodes[r].op, Op::Add))) =>
                    {
                        assert_eq!((ins[0], out), (compute, DType::F32), "{what}");
                    }
                    _ => {
                        assert_eq!(out, compute, "{what}");
                        for (&v, &d) in node.inputs.iter().zip(&ins) {
                            if matches!(g.values[v].kind, ValueKind::Activation) {
                                assert_eq!(d, compute, "{what}");
                            }
                        }
                    }
                }
            }
            let layers = g
                .outputs
                .iter()
                .filter(|(n, _)| n.starts_with("hidden_states."))
                .count()
                - 1;
            assert_eq!(stream_adds, 2 * layers, "{case}: two adds per block");
            assert_eq!(layernorms, 2 * layers + 1, "{case}");
        }
    }
}

#[test]
fn a_uniform_precision_stores_everything_but_the_pixels_and_layernorm_parameters_in_the_compute_type(
) {
    let g = graph("tiny-gelu", Fusion::ALL);
    let dtypes = value_dtypes(&g, Precision::uniform(DType::F16));
    let readers = g.consumers();
    for (v, value) in g.values.iter().enumerate() {
        let layernorm_parameter = matches!(value.kind, ValueKind::Param(_))
            && !readers[v].is_empty()
            && readers[v]
                .iter()
                .all(|&r| matches!(g.nodes[r].op, Op::LayerNorm { .. }));
        let want = match value.kind {
            ValueKind::Input => DType::F32,
            _ if layernorm_parameter => DType::F32,
            _ => DType::F16,
        };
        assert_eq!(dtypes[v], want, "{}", value.name);
    }
}

#[test]
fn the_residual_stream_is_f32_or_the_compute_type() {
    assert!(Precision::new(DType::BF16, DType::F32).is_ok());
    assert!(Precision::new(DType::BF16, DType::BF16).is_ok());
    let e = Precision::new(DType::BF16, DType::F16).unwrap_err();
    assert!(
        e.to_string().contains("f32 or as the run's dtype (bf16)"),
        "{e}"
    );
}
