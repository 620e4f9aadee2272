//! The key padding mask of sequences padded at the end to a common length (SigLIP 2's NaFlex
//! images, each its own number of patches), as the graph carries it: two graph inputs made
//! from one list of per-item lengths.
//!
//! - the key lengths, [B]: what the fused attention kernels read (an i32 per item, read from
//!   device memory). Graph inputs are 4-byte f32 slots, so each length is stored as the bit
//!   pattern of its i32 ([`KeyPadding::lengths_input`]); the backends hand the slots to the
//!   kernels unconverted and the CPU backend reads them back with [`lengths_from_input`].
//! - the additive mask, [B, T]: 0 for a valid key, -inf for a padded one, added to the scores
//!   of the unfused chain before its softmax (so padded keys get probability exactly 0, as
//!   transformers' additive mask gives them).

use crate::error::RuntimeError;

/// Per-item key lengths over sequences of `tokens` keys, each in `1..=tokens`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyPadding {
    lengths: Vec<usize>,
    tokens: usize,
}

impl KeyPadding {
    /// Checks every length is in `1..=tokens` (an item with no valid key has no softmax).
    pub fn new(lengths: Vec<usize>, tokens: usize) -> Result<KeyPadding, RuntimeError> {
        if let Some((item, &len)) = lengths
            .iter()
            .enumerate()
            .find(|(_, &len)| len == 0 || len > tokens)
        {
            return Err(RuntimeError::Input {
                name: "key_lengths".into(),
                message: format!(
                    "item {item} has {len} valid keys; each needs 1 to {tokens} (the padded \
                     length)"
                ),
            });
        }
        Ok(KeyPadding { lengths, tokens })
    }

    /// The lengths of a `[B, T]` attention mask of 1s then 0s (transformers'
    /// `pixel_attention_mask`, 1 for a real patch). A mask with a 1 after a 0 is refused: the
    /// kernels mask a suffix only.
    pub fn from_mask(mask: &[f32], tokens: usize) -> Result<KeyPadding, RuntimeError> {
        if tokens == 0 || !mask.len().is_multiple_of(tokens) {
            return Err(RuntimeError::Input {
                name: "pixel_attention_mask".into(),
                message: format!(
                    "{} values are no whole number of rows of {tokens}",
                    mask.len()
                ),
            });
        }
        let mut lengths = Vec::with_capacity(mask.len() / tokens);
        for (item, row) in mask.chunks(tokens).enumerate() {
            let len = row.iter().take_while(|&&m| m != 0.0).count();
            if let Some(offset) = row[len..].iter().position(|&m| m != 0.0) {
                return Err(RuntimeError::Input {
                    name: "pixel_attention_mask".into(),
                    message: format!(
                        "item {item} has a valid position ({}) after a padded one ({len}); only \
                         padding at the end of a sequence is supported",
                        len + offset
                    ),
                });
            }
            lengths.push(len);
        }
        KeyPadding::new(lengths, tokens)
    }

    pub fn lengths(&self) -> &[usize] {
        &self.lengths
    }

    pub fn tokens(&self) -> usize {
        self.tokens
    }

    /// The key lengths graph input, [B]: each length's i32 bit pattern in an f32 slot.
    pub fn lengths_input(&self) -> Vec<f32> {
        self.lengths
            .iter()
            .map(|&len| f32::from_bits(len as i32 as u32))
            .collect()
    }

    /// The additive mask graph input, [B, T]: 0 for a valid key, -inf past the length.
    pub fn mask_input(&self) -> Vec<f32> {
        let mut mask = vec![f32::NEG_INFINITY; self.lengths.len() * self.tokens];
        for (row, &len) in mask.chunks_mut(self.tokens).zip(&self.lengths) {
            row[..len].fill(0.0);
        }
        mask
    }
}

/// The i32 lengths back out of a key lengths input's slots (the CPU backend's reading of what
/// the GPU kernels read directly).
pub fn lengths_from_input(slots: &[f32]) -> Vec<i32> {
    slots.iter().map(|s| s.to_bits() as i32).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mask_of_ones_then_zeros_gives_its_lengths_in_both_forms() {
        let mask = [1.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0];
        let padding = KeyPadding::from_mask(&mask, 4).unwrap();
        assert_eq!(padding.lengths(), [3, 1]);
        assert_eq!(lengths_from_input(&padding.lengths_input()), [3, 1]);
        let inf = f32::NEG_INFINITY;
        assert_eq!(
            padding.mask_input(),
            [0.0, 0.0, 0.0, inf, 0.0, inf, inf, inf]
        );
    }

    #[test]
    fn holes_empty_items_and_ragged_masks_are_refused() {
        let hole = KeyPadding::from_mask(&[1.0, 0.0, 1.0, 0.0], 4).unwrap_err();
        assert!(hole.to_string().contains("after a padded one"), "{hole}");
        let empty = KeyPadding::from_mask(&[0.0; 4], 4).unwrap_err();
        assert!(empty.to_string().contains("has 0 valid keys"), "{empty}");
        let ragged = KeyPadding::from_mask(&[1.0; 5], 4).unwrap_err();
        assert!(ragged.to_string().contains("rows of 4"), "{ragged}");
        assert!(KeyPadding::new(vec![5], 4).is_err());
    }

    use crate::executor::{Executor, ParamStore};
    use crate::graph::{Graph, HeadSlice, Op, ValueId};
    use crate::passes::{self, Fusion};
    use crate::{CpuBackend, DType, Epilogue, Precision};

    const WIDTH: usize = 8;
    const HEADS: usize = 2;

    /// Weights that differ by name, so Q, K and V differ.
    struct NamedRamps;

    impl ParamStore for NamedRamps {
        fn load(&self, name: &str, shape: &[usize]) -> Result<Vec<f32>, RuntimeError> {
            let seed = name.bytes().map(usize::from).sum::<usize>();
            let n: usize = shape.iter().product();
            Ok((0..n)
                .map(|i| ((i * 37 + seed * 11) as f32 * 0.61).sin() * 0.7)
                .collect())
        }
    }

    /// Masked scores → softmax → context, as a model builds them.
    fn masked_attention(
        g: &mut Graph,
        name: &str,
        (q, k, v): (ValueId, ValueId, ValueId),
        padding: Option<(ValueId, ValueId)>,
    ) -> ValueId {
        let slice = HeadSlice { column_offset: 0 };
        let mut inputs = vec![q, k];
        inputs.extend(padding.iter().flat_map(|&(mask, lengths)| [mask, lengths]));
        let scores = g
            .add_node(
                &format!("{name}.scores"),
                Op::AttentionScores {
                    heads: HEADS,
                    head_dim: WIDTH / HEADS,
                    scale: 0.5,
                    q: slice,
                    k: slice,
                    key_padding: padding.is_some(),
                },
                &inputs,
            )
            .unwrap();
        let probs = g
            .add_node(
                &format!("{name}.softmax"),
                Op::Softmax { causal: false },
                &[scores],
            )
            .unwrap();
        g.add_node(
            &format!("{name}.context"),
            Op::AttentionContext {
                heads: HEADS,
                head_dim: WIDTH / HEADS,
                v: slice,
            },
            &[probs, v],
        )
        .unwrap()
    }

    /// Self-attention over projections of x (which QKV fusion and attention fusion take),
    /// then a learned probe of batch 1 attending to its output (SigLIP's pooling head, which
    /// stays unfused): outputs "tokens" [B, T, 8] and "pooled" [B, 1, 8]. `masked`: with the
    /// key padding inputs.
    fn graph(batch: usize, tokens: usize, masked: bool) -> Graph {
        let mut g = Graph::default();
        let x = g.add_input("x", &[batch, tokens, WIDTH]);
        let padding = masked.then(|| {
            (
                g.add_input("key_mask", &[batch, tokens]),
                g.add_input("key_lengths", &[batch]),
            )
        });
        let project = |g: &mut Graph, name: &str| {
            let w = g.add_param(name, &[WIDTH, WIDTH]);
            let linear = Op::Linear {
                epilogue: Epilogue::NONE,
            };
            g.add_node(name, linear, &[x, w]).unwrap()
        };
        let (q, k, v) = (
            project(&mut g, "q"),
            project(&mut g, "k"),
            project(&mut g, "v"),
        );
        let tokens_out = masked_attention(&mut g, "self", (q, k, v), padding);
        let probe = g.add_param("probe", &[1, 1, WIDTH]);
        let pooled = masked_attention(&mut g, "pool", (probe, tokens_out, tokens_out), padding);
        g.mark_output("tokens", tokens_out);
        g.mark_output("pooled", pooled);
        g
    }

    fn run(graph: Graph, inputs: &[(&str, &[f32])]) -> Vec<Vec<f32>> {
        let mut cpu = CpuBackend::new();
        let executor =
            Executor::new(graph, &mut cpu, &NamedRamps, Precision::uniform(DType::F32)).unwrap();
        let outputs = executor.run(&mut cpu, inputs).unwrap();
        outputs.into_iter().map(|t| t.data).collect()
    }

    /// A padded batch with the mask gives, for each item, what that item alone gives unpadded
    /// (its valid rows and its pooled vector), unfused and fused alike; padded query rows stay
    /// finite. Without the mask the padding changes the answer, so the test can fail.
    #[test]
    fn masked_attention_matches_each_item_run_alone_fused_or_not() {
        let (batch, tokens) = (3, 7);
        let padding = KeyPadding::new(vec![7, 3, 5], tokens).unwrap();
        let x: Vec<f32> = (0..batch * tokens * WIDTH)
            .map(|i| ((i * 13) % 29) as f32 / 14.0 - 1.0)
            .collect();
        let (mask, lengths) = (padding.mask_input(), padding.lengths_input());
        let inputs = [
            ("x", x.as_slice()),
            ("key_mask", mask.as_slice()),
            ("key_lengths", lengths.as_slice()),
        ];
        let unfused = run(graph(batch, tokens, true), &inputs);
        let mut fused_graph = graph(batch, tokens, true);
        passes::apply(&mut fused_graph, Fusion::ALL);
        let fused_nodes = fused_graph
            .nodes
            .iter()
            .filter(|n| {
                matches!(
                    n.op,
                    Op::Attention {
                        key_padding: true,
                        ..
                    }
                )
            })
            .count();
        assert_eq!(
            fused_nodes, 1,
            "the self-attention fuses; the probe does not"
        );
        let fused = run(fused_graph, &inputs);
        let unmasked = run(graph(batch, tokens, false), &[("x", x.as_slice())]);

        let mut unmasked_differs = false;
        for (b, &len) in padding.lengths().iter().enumerate() {
            let item = &x[b * tokens * WIDTH..(b * tokens + len) * WIDTH];
            let alone = run(graph(1, len, false), &[("x", item)]);
            let rows = b * tokens * WIDTH..(b * tokens + len) * WIDTH;
            let pooled = b * WIDTH..(b + 1) * WIDTH;
            for (what, got) in [("unfused", &unfused), ("fused", &fused)] {
                for (out, range) in [(0, rows.clone()), (1, pooled.clone())] {
                    for (i, (g, w)) in got[out][range.clone()].iter().zip(&alone[out]).enumerate() {
                        assert!(
                            (g - w).abs() <= 1e-5 * (1.0 + w.abs()),
                            "{what} output {out} item {b} value {i}: {g} vs {w} alone"
                        );
                    }
                }
            }
            let moved = |range: std::ops::Range<usize>| {
                unmasked[1][range.clone()]
                    .iter()
                    .zip(&alone[1])
                    .any(|(u, w)| (u - w).abs() > 1e-3)
            };
            unmasked_differs |= len < tokens && moved(pooled);
        }
        assert!(
            unmasked_differs,
            "padding without the mask moves the pooled vector"
        );
        assert!(
            unfused[0].iter().chain(&fused[0]).all(|v| v.is_finite()),
            "padded query rows are finite"
        );
    }

    #[test]
    fn graph_shapes_of_the_key_padding_inputs_are_checked() {
        let mut g = Graph::default();
        let qkv = g.add_input("qkv", &[2, 5, 3 * WIDTH]);
        let lengths = g.add_input("key_lengths", &[3]);
        let slice = |column_offset| HeadSlice { column_offset };
        let attention = |causal| Op::Attention {
            heads: HEADS,
            head_dim: WIDTH / HEADS,
            scale: 1.0,
            q: slice(0),
            k: slice(WIDTH),
            v: slice(2 * WIDTH),
            causal,
            key_padding: true,
        };
        let e = g
            .add_node("a", attention(false), &[qkv, qkv, qkv, lengths])
            .unwrap_err();
        assert!(e.to_string().contains("key lengths must be [2]"), "{e}");
        let lengths = g.add_input("key_lengths_2", &[2]);
        let e = g
            .add_node("a", attention(true), &[qkv, qkv, qkv, lengths])
            .unwrap_err();
        assert!(e.to_string().contains("causal"), "{e}");
        g.add_node("a", attention(false), &[qkv, qkv, qkv, lengths])
            .unwrap();
        let mask = g.add_input("key_mask", &[2, 4]);
        let scores = Op::AttentionScores {
            heads: HEADS,
            head_dim: WIDTH / HEADS,
            scale: 1.0,
            q: slice(0),
            k: slice(WIDTH),
            key_padding: true,
        };
        let e = g
            .add_node("s", scores, &[qkv, qkv, mask, lengths])
            .unwrap_err();
        assert!(e.to_string().contains("must be [2, 5]"), "{e}");
    }
}
