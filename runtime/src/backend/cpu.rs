//! The CPU backend: every op through the kernels' CPU twins, in f32, on all cores.
//!
//! It can also emulate a half-precision run ([`CpuBackend::emulating`]): arithmetic stays f32
//! (as the GPU kernels' accumulation), and every stored value is rounded to the storage type
//! the plan gives it, weights included. That is how the GPU path rounds, short of summation
//! order, so precision policies can be studied and tested without a GPU.

use super::{Backend, Binding, BufferRef, MemoryAccount};
use crate::error::RuntimeError;
use crate::graph::Op;
use crate::key_padding;
use crate::lowering;
use std::collections::HashMap;
use std::ops::Range;
use vitrt_kernels::DType;
use vitrt_kernels::{
    activation, add, attention, gather, layernorm, matmul, normalize, patchify, pool, rmsnorm,
    rope, softmax,
};

pub struct CpuBackend {
    /// The run's storage type: f32, or the half type being emulated.
    dtype: DType,
    params: Vec<Vec<f32>>,
    param_ids: HashMap<(String, DType), usize>,
    arena: Vec<f32>,
    /// Values stored as e4m3 (a layernorm's output quantised for FP8 linear layers), by their
    /// arena offset: their e4m3 values and row scales. They live beside the arena, whose f32
    /// slots are wider than an e4m3 value's byte (the plan gives such a value its codes' and
    /// scales' bytes); the plan's lifetimes still decide when an offset is rewritten.
    e4m3_values: HashMap<usize, (Vec<f32>, Vec<f32>)>,
    marks: Vec<std::time::Instant>,
}

impl Default for CpuBackend {
    fn default() -> Self {
        CpuBackend::new()
    }
}

impl CpuBackend {
    pub fn new() -> CpuBackend {
        CpuBackend::emulating(DType::F32)
    }

    /// A backend that computes in f32 but stores every value as the plan says (`dtype` for
    /// weights and activations), rounding it as the GPU would.
    pub fn emulating(dtype: DType) -> CpuBackend {
        CpuBackend {
            dtype,
            params: Vec::new(),
            param_ids: HashMap::new(),
            arena: Vec::new(),
            e4m3_values: HashMap::new(),
            marks: Vec::new(),
        }
    }

    /// Bytes of the plan's arena per f32 slot of ours. The plan lays values out in their
    /// storage size; with every size at least `slot_bytes`, a value at byte offset o of n
    /// elements keeps to slots o / slot_bytes .. + n, inside its own bytes.
    fn slot_bytes(&self) -> usize {
        if self.dtype == DType::F32 {
            4
        } else {
            2
        }
    }

    fn arena_range(&self, buffer: BufferRef) -> Result<Range<usize>, String> {
        match buffer {
            BufferRef::Arena {
                offset_bytes,
                len,
                dtype,
            } => {
                if dtype.size_bytes() < self.slot_bytes() {
                    return Err(format!(
                        "the CPU backend running in {} does not store {dtype}",
                        self.dtype
                    ));
                }
                let start = offset_bytes / self.slot_bytes();
                Ok(start..start + len)
            }
            BufferRef::Param { .. } => Err("a parameter cannot be written".into()),
        }
    }

    /// A layernorm writing e4m3 codes: with a scale a row (`crate::fp8::quantized_by_producer`)
    /// or with its static scale ([`Op::LayerNormE4m3`]), as the kernels' twins compute them,
    /// kept in [`CpuBackend::e4m3_values`] (a static value's scales are its one scale).
    fn layernorm_e4m3(
        &mut self,
        op: &Op,
        inputs: &[Binding],
        output: &Binding,
    ) -> Result<(), String> {
        let (Op::LayerNorm { eps } | Op::LayerNormE4m3 { eps }) = op else {
            return Err(format!("{} does not write e4m3", op.kind_name()));
        };
        let BufferRef::Arena { offset_bytes, .. } = output.buffer else {
            return Err("a parameter cannot be written".into());
        };
        let cols = *inputs[0].shape.last().unwrap_or(&1);
        let rows = output.buffer.len() / cols.max(1);
        let mut codes = vec![0u8; rows * cols];
        let scales = {
            let bufs: Vec<BufferRef> = inputs.iter().map(|i| i.buffer).collect();
            // No arena output: its codes and scales go beside the arena.
            let (ins, _) = split(self, &bufs, 0..0)?;
            if ins[0].len() != rows * cols {
                return Err(format!(
                    "an e4m3 layernorm of {} values into {rows} x {cols}",
                    ins[0].len()
                ));
            }
            let input = inputs[0].buffer.dtype();
            if let Op::LayerNormE4m3 { .. } = op {
                let scale = *ins[3].first().ok_or("an empty static scale")?;
                layernorm::cpu::layernorm_e4m3_static(
                    ins[0], ins[1], ins[2], input, cols, *eps, scale, &mut codes,
                );
                vec![scale]
            } else {
                let mut scales = vec![0f32; rows];
                layernorm::cpu::layernorm_e4m3(
                    ins[0],
                    ins[1],
                    ins[2],
                    input,
                    cols,
                    *eps,
                    &mut codes,
                    &mut scales,
                );
                scales
            }
        };
        let units = vitrt_kernels::e4m3::decode_slice(&codes);
        self.e4m3_values.insert(offset_bytes, (units, scales));
        Ok(())
    }

    /// An FP8 linear layer, its input read as its producer quantised it
    /// ([`CpuBackend::e4m3_values`]) or from the arena, its output written to the arena or,
    /// with `io.e4m3_output`, as e4m3 values beside it.
    fn fp8_linear(
        &mut self,
        epilogue: vitrt_kernels::Epilogue,
        io: crate::graph::Fp8Io,
        inputs: &[Binding],
        output: &Binding,
    ) -> Result<(), String> {
        let tiles = matmul::cpu::MatmulTiles::default();
        let (k, n) = (*inputs[0].shape.last().unwrap_or(&1), inputs[1].shape[0]);
        let rows = inputs[0].buffer.len() / k.max(1);
        // A quantised input is taken out while the arena is borrowed, and put back (other
        // layers may read the same value).
        let quantized_input = match inputs[0].buffer {
            BufferRef::Arena { offset_bytes, .. } if inputs[0].buffer.dtype() == DType::E4M3 => {
                let values = self
                    .e4m3_values
                    .remove(&offset_bytes)
                    .ok_or("an FP8 linear layer's e4m3 input was never written")?;
                Some((offset_bytes, values))
            }
            _ => None,
        };
        let e4m3_out = match output.buffer {
            BufferRef::Arena { offset_bytes, .. } if io.e4m3_output => Some(offset_bytes),
            _ if io.e4m3_output => return Err("a parameter cannot be written".into()),
            _ => None,
        };
        let out_range = match e4m3_out {
            Some(_) => 0..0,
            None => self.arena_range(output.buffer)?,
        };
        let mut e4m3_result = vec![0f32; if e4m3_out.is_some() { rows * n } else { 0 }];
        let bufs: Vec<BufferRef> = inputs
            .iter()
            .enumerate()
            .map(|(slot, i)| match (slot, &quantized_input) {
                // Not read: an empty view in x's place.
                (0, Some(_)) => BufferRef::Arena {
                    offset_bytes: 0,
                    len: 0,
                    dtype: DType::F32,
                },
                _ => i.buffer,
            })
            .collect();
        let result = split(self, &bufs, out_range.clone()).and_then(|(ins, arena_out)| {
            let quantized = quantized_input
                .as_ref()
                .map(|(_, (units, scales))| (units.as_slice(), scales.as_slice()));
            let out = if e4m3_out.is_some() {
                e4m3_result.as_mut_slice()
            } else {
                arena_out
            };
            crate::fp8::emulate_linear(epilogue, io, k, n, &ins, quantized, out, tiles)
        });
        if let Some((offset_bytes, values)) = quantized_input {
            self.e4m3_values.insert(offset_bytes, values);
        }
        result?;
        match e4m3_out {
            Some(offset_bytes) => {
                let slots = crate::fp8::Fp8Slots::of(epilogue, io);
                let scale_slot = slots.output_scale.ok_or("no output scale")?;
                let (ins, _) = split(self, &[inputs[scale_slot].buffer], 0..0)?;
                let scale = *ins[0].first().ok_or("an empty output scale")?;
                self.e4m3_values
                    .insert(offset_bytes, (e4m3_result, vec![scale]));
            }
            None => {
                if let BufferRef::Arena { dtype, .. } = output.buffer {
                    Self::store_as(dtype, &mut self.arena[out_range]);
                }
            }
        }
        Ok(())
    }

    /// Rounds `values` to what storing them as `dtype` keeps.
    fn store_as(dtype: DType, values: &mut [f32]) {
        if dtype != DType::F32 {
            values.iter_mut().for_each(|v| *v = dtype.round(*v));
        }
    }
}

/// Borrows the output region mutably and the inputs immutably from one arena, after checking
/// that the output overlaps none of them (the plan guarantees it; this makes it a checked fact).
fn split<'a>(
    backend: &'a mut CpuBackend,
    inputs: &[BufferRef],
    output: Range<usize>,
) -> Result<(Vec<&'a [f32]>, &'a mut [f32]), String> {
    let input_ranges: Vec<Result<Range<usize>, (usize, usize)>> = inputs
        .iter()
        .map(|&input| match input {
            BufferRef::Param { id, len, .. } => Ok(Err((id, len))),
            BufferRef::Arena { .. } => backend.arena_range(input).map(Ok),
        })
        .collect::<Result<_, String>>()?;
    let (arena, params) = (&mut backend.arena, &backend.params);
    if output.end > arena.len() {
        return Err(format!(
            "output {output:?} lies outside the arena of {}",
            arena.len()
        ));
    }
    let mut ranges = Vec::with_capacity(inputs.len());
    for input in input_ranges {
        ranges.push(match input {
            Err(param) => Err(param),
            Ok(r) => {
                if r.end > arena.len() {
                    return Err(format!(
                        "input {r:?} lies outside the arena of {}",
                        arena.len()
                    ));
                }
                if r.start < output.end
                    && output.start < r.end
                    && !r.is_empty()
                    && !output.is_empty()
                {
                    return Err(format!("input {r:?} overlaps output {output:?}"));
                }
                Ok(r)
            }
        });
    }
    let base = arena.as_mut_ptr();
    // SAFETY: every range lies inside `arena` and none overlaps `output` (checked above), so
    // the mutable output slice aliases no shared input slice; the inputs only alias each
    // other immutably. All borrows live no longer than `arena`.
    let out = unsafe { std::slice::from_raw_parts_mut(base.add(output.start), output.len()) };
    let mut views = Vec::with_capacity(ranges.len());
    for r in ranges {
        views.push(match r {
            Ok(r) => unsafe {
                std::slice::from_raw_parts(base.add(r.start) as *const f32, r.len())
            },
            Err((id, len)) => {
                let p = params
                    .get(id)
                    .ok_or_else(|| format!("unknown parameter {id}"))?;
                &p[..len.min(p.len())]
            }
        });
    }
    Ok((views, out))
}

impl Backend for CpuBackend {
    fn describe(&self) -> String {
        "cpu".into()
    }

    fn dtype(&self) -> DType {
        self.dtype
    }

    fn has_param(&self, key: &str, dtype: DType) -> bool {
        self.param_ids.contains_key(&(key.to_string(), dtype))
    }

    fn load_param(
        &mut self,
        key: &str,
        shape: &[usize],
        dtype: DType,
        load: &mut dyn FnMut() -> Result<Vec<f32>, RuntimeError>,
    ) -> Result<usize, RuntimeError> {
        if let Some(&id) = self.param_ids.get(&(key.to_string(), dtype)) {
            return Ok(id);
        }
        let mut data = load()?;
        Self::store_as(dtype, &mut data);
        if data.len() != shape.iter().product::<usize>() {
            return Err(RuntimeError::Param {
                name: key.into(),
                message: format!("{} values for shape {shape:?}", data.len()),
            });
        }
        self.params.push(data);
        self.param_ids
            .insert((key.to_string(), dtype), self.params.len() - 1);
        Ok(self.params.len() - 1)
    }

    fn param_count(&self) -> usize {
        self.params.len()
    }

    fn truncate_params(&mut self, count: usize) {
        self.params.truncate(count);
        self.param_ids.retain(|_, id| *id < count);
    }

    fn memory_account(&self) -> MemoryAccount {
        // Host memory, as held: every value is an f32 slot here, emulated types included.
        let f32_bytes = std::mem::size_of::<f32>();
        MemoryAccount {
            params_bytes: self.params.iter().map(|p| p.len() * f32_bytes).sum(),
            arena_bytes: self.arena.len() * f32_bytes,
            ..MemoryAccount::default()
        }
    }

    fn reserve_arena(&mut self, bytes: usize) -> Result<(), RuntimeError> {
        let elems = bytes.div_ceil(self.slot_bytes());
        if self.arena.len() < elems {
            self.arena
                .try_reserve_exact(elems - self.arena.len())
                .map_err(|_| {
                    RuntimeError::Backend(format!(
                        "cannot allocate {bytes} bytes of host memory for activations"
                    ))
                })?;
            self.arena.resize(elems, 0.0);
        }
        Ok(())
    }

    fn write(&mut self, dst: BufferRef, data: &[f32]) -> Result<(), RuntimeError> {
        let r = self.arena_range(dst).map_err(RuntimeError::Backend)?;
        if r.len() != data.len() || r.end > self.arena.len() {
            return Err(RuntimeError::Backend(format!(
                "write of {} values into {r:?}",
                data.len()
            )));
        }
        self.arena[r.clone()].copy_from_slice(data);
        if let BufferRef::Arena { dtype, .. } = dst {
            Self::store_as(dtype, &mut self.arena[r]);
        }
        Ok(())
    }

    fn read(&mut self, src: BufferRef) -> Result<Vec<f32>, RuntimeError> {
        match src {
            BufferRef::Param { id, len, .. } => Ok(self.params[id][..len].to_vec()),
            _ => {
                let r = self.arena_range(src).map_err(RuntimeError::Backend)?;
                self.arena
                    .get(r.clone())
                    .map(<[f32]>::to_vec)
                    .ok_or_else(|| {
                        RuntimeError::Backend(format!("read of {r:?} outside the arena"))
                    })
            }
        }
    }

    fn execute(
        &mut self,
        op: &Op,
        inputs: &[Binding],
        output: &Binding,
        workspace: Option<BufferRef>,
    ) -> Result<(), String> {
        check_storage(op, inputs, output, self.dtype)?;
        if let Op::Fp8Linear { epilogue, io } = op {
            return self.fp8_linear(*epilogue, *io, inputs, output);
        }
        if output.buffer.dtype() == DType::E4M3 {
            return self.layernorm_e4m3(op, inputs, output);
        }
        let out_range = self.arena_range(output.buffer)?;
        let tiles = matmul::cpu::MatmulTiles::default();
        match op {
            Op::PatchEmbed {
                patch,
                prefix_tokens,
            } => {
                let workspace = workspace.ok_or("patch embedding needs a workspace")?;
                let ws = self.arena_range(workspace)?;
                let px = &inputs[0].shape;
                let (b, c, h, w) = (px[0], px[1], px[2], px[3]);
                let hidden = output.shape[2];
                let tokens = output.shape[1];
                let problem = lowering::patch_projection(op, px, &output.shape)
                    .ok_or("not a patch embedding")?;
                // Patch rows into the workspace first, then the projection reads them.
                {
                    let dtype = self.dtype;
                    let (ins, rows) = split(self, &[inputs[0].buffer], ws.clone())?;
                    patchify::cpu::patchify(ins[0], b, c, h, w, *patch, rows);
                    Self::store_as(dtype, rows);
                }
                let bufs: Vec<BufferRef> = std::iter::once(workspace)
                    .chain(inputs[1..].iter().map(|i| i.buffer))
                    .collect();
                let (ins, out) = split(self, &bufs, out_range.clone())?;
                let (rows, weight, bias, pos) = (ins[0], ins[1], ins[2], ins[3]);
                let prefix = if *prefix_tokens > 0 { ins[4] } else { &[] };
                patchify::cpu::write_prefix_rows(prefix, pos, b, tokens, hidden, out);
                matmul::cpu::matmul(&problem, tiles, rows, weight, Some(bias), Some(pos), out);
            }
            _ => {
                let bufs: Vec<BufferRef> = inputs.iter().map(|i| i.buffer).collect();
                let (ins, out) = split(self, &bufs, out_range.clone())?;
                run_simple(op, inputs, &ins, out, tiles)?;
            }
        }
        if let BufferRef::Arena { dtype, .. } = output.buffer {
            Self::store_as(dtype, &mut self.arena[out_range]);
        }
        Ok(())
    }

    fn synchronize(&mut self) -> Result<(), RuntimeError> {
        Ok(())
    }

    fn mark(&mut self) -> Result<(), RuntimeError> {
        self.marks.push(std::time::Instant::now());
        Ok(())
    }

    fn take_mark_intervals(&mut self) -> Result<Vec<f32>, RuntimeError> {
        let marks = std::mem::take(&mut self.marks);
        Ok(marks
            .windows(2)
            .map(|pair| (pair[1] - pair[0]).as_secs_f32() * 1e3)
            .collect())
    }
}

/// Refuses, as the GPU launchers do, an operand stored in a type the op's kernel does not read
/// in a `compute` run: a matmul's (`vitrt_kernels::matmul::check_storage`), an attention's
/// Q, K and V (`compute`) and key lengths (f32 slots). The CPU computes on f32 whatever the
/// type, so without this a plan the GPU refuses would pass every CPU test.
fn check_storage(
    op: &Op,
    inputs: &[Binding],
    output: &Binding,
    compute: DType,
) -> Result<(), String> {
    let dtype = |i: usize| inputs[i].buffer.dtype();
    match op {
        Op::Linear { .. } | Op::AttentionScores { .. } | Op::AttentionContext { .. } => {
            let shapes: Vec<&[usize]> = inputs.iter().map(|b| b.shape.as_slice()).collect();
            let problem = lowering::matmul_for(op, &shapes).ok_or("not a matmul")?;
            let epilogue = problem.epilogue;
            matmul::check_storage(
                compute,
                &problem,
                dtype(0),
                dtype(1),
                epilogue.bias.then(|| dtype(2)),
                epilogue.residual.then(|| dtype(2 + epilogue.bias as usize)),
                output.buffer.dtype(),
            )
        }
        Op::LayerNormLinear { .. } => crate::layernorm_fold::check_storage(
            compute,
            &inputs.iter().map(|b| b.buffer.dtype()).collect::<Vec<_>>(),
            output.buffer.dtype(),
        ),
        Op::Fp8Linear { epilogue, io } => crate::fp8::check_storage(
            compute,
            *epilogue,
            *io,
            &inputs.iter().map(|b| b.buffer.dtype()).collect::<Vec<_>>(),
            output.buffer.dtype(),
        ),
        Op::Attention { key_padding, .. } => {
            for (what, slot) in [("Q", 0), ("K", 1), ("V", 2)] {
                if dtype(slot) != compute {
                    return Err(format!(
                        "attention {what} holds {}, the op wants {compute}",
                        dtype(slot)
                    ));
                }
            }
            if *key_padding && dtype(3) != DType::F32 {
                return Err(format!(
                    "attention key lengths hold {}; they are i32 bit patterns in f32 slots",
                    dtype(3)
                ));
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

fn run_simple(
    op: &Op,
    bindings: &[Binding],
    ins: &[&[f32]],
    out: &mut [f32],
    tiles: matmul::cpu::MatmulTiles,
) -> Result<(), String> {
    let last = |s: &[usize]| *s.last().unwrap_or(&1);
    match op {
        Op::PatchEmbed { .. } => unreachable!("handled by the caller"),
        Op::LayerNorm { eps } => {
            layernorm::cpu::layernorm(ins[0], ins[1], ins[2], last(&bindings[0].shape), *eps, out)
        }
        Op::RmsNorm { eps } => {
            rmsnorm::cpu::rmsnorm(ins[0], ins[1], last(&bindings[0].shape), *eps, out)
        }
        Op::Linear { .. } | Op::AttentionScores { .. } | Op::AttentionContext { .. } => {
            let shapes: Vec<&[usize]> = bindings.iter().map(|b| b.shape.as_slice()).collect();
            let problem = lowering::matmul_for(op, &shapes).ok_or("not a matmul")?;
            let epilogue = problem.epilogue;
            let bias = epilogue.bias.then(|| ins[2]);
            let residual = epilogue.residual.then(|| ins[2 + epilogue.bias as usize]);
            problem.check_bounds(
                ins[0].len(),
                ins[1].len(),
                out.len(),
                bias.map(<[f32]>::len),
                residual.map(<[f32]>::len),
            )?;
            matmul::cpu::matmul(&problem, tiles, ins[0], ins[1], bias, residual, out);
        }
        Op::Fp8Linear { .. } | Op::LayerNormE4m3 { .. } => {
            unreachable!("handled by the caller")
        }
        Op::LayerNormLinear { .. } => {
            let shapes: Vec<&[usize]> = bindings.iter().map(|b| b.shape.as_slice()).collect();
            let problem = crate::layernorm_fold::problem_for(op, &shapes)
                .ok_or("not a layernorm folded into a linear layer")?;
            problem.check_bounds(
                ins[0].len(),
                ins[1].len(),
                ins[2].len(),
                ins[3].len(),
                out.len(),
            )?;
            matmul::cpu::matmul_layernorm(&problem, ins[0], ins[1], ins[2], ins[3], out);
        }
        Op::Activation(act) => {
            for (o, &x) in out.iter_mut().zip(ins[0]) {
                *o = act.apply(x);
            }
        }
        Op::Attention { .. } => {
            let shapes: Vec<&[usize]> = bindings.iter().map(|b| b.shape.as_slice()).collect();
            let problem = lowering::attention_for(op, &shapes).ok_or("not an attention")?;
            problem.check_bounds(ins[0].len(), ins[1].len(), ins[2].len(), out.len())?;
            // Scores and probabilities stay f32 inside; only the output is stored (and
            // rounded by the caller when emulating half precision), as on the GPU.
            let tiles = attention::cpu::AttentionTiles::default();
            if problem.key_padding {
                problem.check_masks()?;
                let lengths = key_padding::lengths_from_input(ins[3]);
                if lengths.len() != problem.batch {
                    return Err(format!(
                        "{} key lengths for a batch of {}",
                        lengths.len(),
                        problem.batch
                    ));
                }
                attention::cpu::attention_with_key_lengths(
                    &problem, tiles, ins[0], ins[1], ins[2], out, &lengths,
                );
            } else {
                attention::cpu::attention(&problem, tiles, ins[0], ins[1], ins[2], out);
            }
        }
        Op::Add => add::cpu::add(ins[0], ins[1], out),
        Op::Softmax { causal: false } => {
            softmax::cpu::softmax(ins[0], last(&bindings[0].shape), 1.0, out)
        }
        Op::L2Normalize => normalize::cpu::l2_normalize(ins[0], last(&bindings[0].shape), out),
        Op::Softmax { causal: true } => {
            let cols = last(&bindings[0].shape);
            softmax::cpu::softmax_causal(ins[0], cols, cols, 1.0, out)
        }
        Op::SelectToken { index } => {
            let s = &bindings[0].shape;
            let (t, c) = (s[1], s[2]);
            for (b, row) in out.chunks_mut(c).enumerate() {
                let start = (b * t + index) * c;
                row.copy_from_slice(&ins[0][start..start + c]);
            }
        }
        Op::MeanTokens { start } => {
            let s = &bindings[0].shape;
            pool::cpu::token_mean(ins[0], s[1], *start, s[2], out);
        }
        Op::SwiGlu => activation::cpu::swiglu(ins[0], last(&bindings[0].shape) / 2, out),
        Op::Rope {
            heads,
            head_dim,
            grid,
        } => rope::cpu::rope(ins[0], bindings[0].shape[1], *heads, *head_dim, grid, out),
        Op::TokenEmbedding => {
            let (ids, table) = (&bindings[0].shape, &bindings[1].shape);
            let (tokens, vocab, dim) = (ids[1], table[0], table[1]);
            gather::cpu::token_embedding(ins[0], ins[1], ins[2], tokens, dim, vocab, out);
        }
        Op::SelectEndToken { rule } => {
            let s = &bindings[0].shape;
            gather::cpu::end_token_rows(ins[0], ins[1], s[0], s[1], s[2], *rule, out);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use vitrt_kernels::Epilogue;

    /// The CPU computes on f32 whatever the storage type, but refuses, as the GPU launcher
    /// does, an f16 run's matmul whose A is stored as f32 (what NaFlex's patch rows were before
    /// the plan stored graph inputs as their matmuls read them).
    #[test]
    fn a_matmul_operand_in_a_type_its_kernel_does_not_read_is_refused() {
        let mut cpu = CpuBackend::emulating(DType::F16);
        cpu.reserve_arena(4096).unwrap();
        let w = cpu
            .load_param("w", &[4, 8], DType::F16, &mut || Ok(vec![0.5; 32]))
            .unwrap();
        let arena = |offset_bytes, len, dtype, shape: &[usize]| Binding {
            buffer: BufferRef::Arena {
                offset_bytes,
                len,
                dtype,
            },
            shape: shape.to_vec(),
            row_statistics: false,
        };
        let weight = Binding {
            buffer: BufferRef::Param {
                id: w,
                len: 32,
                dtype: DType::F16,
            },
            shape: vec![4, 8],
            row_statistics: false,
        };
        let out = arena(1024, 8, DType::F16, &[2, 4]);
        let linear = Op::Linear {
            epilogue: Epilogue::NONE,
        };
        let f32_rows = arena(0, 16, DType::F32, &[2, 8]);
        let refused = cpu
            .execute(&linear, &[f32_rows, weight.clone()], &out, None)
            .unwrap_err();
        assert!(
            refused.contains("matmul A holds f32, the op wants f16"),
            "{refused}"
        );
        let f16_rows = arena(0, 16, DType::F16, &[2, 8]);
        cpu.execute(&linear, &[f16_rows, weight], &out, None)
            .unwrap();
    }
}
