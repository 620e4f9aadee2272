//! Timing the cases on the GPU: random operands in enough copies to defeat L2, a spin before
//! every repetition, one CUDA event pair per repetition, and the yardstick of each case timed
//! right after ours in the same run.

use super::cases::{Case, Kind, CHANNELS, HEADS, HEAD_DIM, HIDDEN, IMAGE, PATCH, TOKENS};
use crate::report::schema::{DeviceInfo, KernelRow, Skipped};
use crate::report::stats::Stats;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use vitrt_kernels::cuda::{
    copies_beyond_l2, slot_offset, Cublas, CublasLt, DevPtr, DeviceBuffer, Gpu, KernelError, Timer,
};
use vitrt_kernels::matmul::{
    E4m3Ptr, Fp8Destination, Fp8Operands, Fp8Problem, LayernormMatmulProblem,
};
use vitrt_kernels::patchify::gpu::PrefixRows;
use vitrt_kernels::rope::{self, RopeGrid};
use vitrt_kernels::{
    activation, add, attention, e4m3, layernorm, matmul, patchify, rmsnorm, softmax,
};
use vitrt_kernels::{Activation, DType, Epilogue, MatmulProblem};
use vitrt_runtime::lowering::{self, HeadSource};
use vitrt_runtime::{HeadSlice, Op};

/// Device time every repetition waits behind (see `Gpu::spin`): far longer than the host takes
/// to queue one repetition's launches (a few, microseconds each), so the start event never
/// fires on an idle GPU while the work is still being queued.
const SPIN_NANOSECONDS: u64 = 200_000;
/// Operands are random but the same from run to run.
const SEED: u64 = 0x76_69_74_72_74;
/// ViT-B/16's layer-norm epsilon.
const LAYER_NORM_EPS: f32 = 1e-12;

/// What to time and how often.
pub struct Settings {
    pub dtype: DType,
    pub reps: usize,
    pub warmup: usize,
    pub cases: Vec<Case>,
}

/// Everything a run produced, for the report.
pub struct Results {
    pub kernels: Vec<KernelRow>,
    pub skipped: Vec<Skipped>,
}

/// The device facts of the report: the driver release from the kernel module where it can
/// be read, else the CUDA version of the driver's API.
pub fn device_info(gpu: &Gpu) -> Result<DeviceInfo, KernelError> {
    let driver = std::fs::read_to_string("/proc/driver/nvidia/version")
        .ok()
        .and_then(|text| crate::report::schema::driver_release(&text))
        .or_else(|| {
            gpu.driver_version()
                .ok()
                .map(|(major, minor)| format!("CUDA {major}.{minor}"))
        })
        .unwrap_or_else(|| "unknown".into());
    let (major, minor) = gpu.compute_capability();
    Ok(DeviceInfo {
        name: gpu.name().into(),
        driver,
        compute_capability: format!("{major}.{minor}"),
        l2_bytes: gpu.l2_cache_bytes()? as u64,
    })
}

/// Times every case of `settings` on `gpu`. Cases that cannot run are recorded as skipped
/// with the reason (and a line on stderr); only a failure to start at all is an error.
pub fn run(gpu: &Gpu, settings: &Settings) -> Result<Results, KernelError> {
    let l2_bytes = gpu.l2_cache_bytes()?;
    let cublas = gpu.cublas();
    // cuBLASLt only where an FP8 case runs (it allocates a workspace).
    let fp8_cases = settings
        .cases
        .iter()
        .any(|c| matches!(c.kind, Kind::Fp8Matmul { .. }));
    let cublaslt = if fp8_cases {
        gpu.cublaslt()
    } else {
        Err(KernelError::Cuda("no FP8 case runs".into()))
    };
    let total: usize = settings.cases.iter().map(Case::measurements).sum();
    let mut bench = Bench {
        gpu,
        cublas: cublas.as_ref().ok(),
        cublas_missing: cublas.as_ref().err().map(|e| e.to_string()),
        cublaslt: cublaslt.as_ref().ok(),
        cublaslt_missing: cublaslt.as_ref().err().map(|e| e.to_string()),
        dtype: settings.dtype,
        reps: settings.reps,
        warmup: settings.warmup,
        l2_bytes,
        rng: SmallRng::seed_from_u64(SEED),
        progress: progress_bar(total as u64),
        kernels: Vec::new(),
        skipped: Vec::new(),
        cublas_missing_said: false,
    };
    for case in &settings.cases {
        bench
            .progress
            .set_message(format!("{} {}", case.op(), case.name));
        match case.kind {
            Kind::Matmul { m, n, k } => bench.matmul(case, m, n, k),
            Kind::Fp8Matmul { m, n, k } => bench.fp8_matmul(case, m, n, k),
            Kind::LayernormMatmul { m, n, k, gelu } => bench.layernorm_matmul(case, m, n, k, gelu),
            Kind::RowStatsMatmul { m, n, k } => bench.row_stats_matmul(case, m, n, k),
            _ => bench.memory_bound(case),
        }
    }
    bench.progress.finish_and_clear();
    Ok(Results {
        kernels: bench.kernels,
        skipped: bench.skipped,
    })
}

/// How many more untimed passes make about `warmup_ms` at the pace of the fastest of `probe_ms`
/// (passes timed just before): `bench model` runs them back to back with the timed ones, as a
/// pause lets the GPU start fast again (benchmarks/NOTES.md, 2026-11-28 "The first passes
/// after idle run fast").
pub(super) fn warmup_passes(probe_ms: &[f32], warmup_ms: f64) -> usize {
    let pace_ms = probe_ms.iter().copied().fold(f32::INFINITY, f32::min) as f64;
    (warmup_ms / pace_ms.max(1e-3)).ceil().min(1e6) as usize
}

/// Progress on stderr, drawn only when stderr is a terminal (indicatif hides it otherwise).
pub(super) fn progress_bar(total: u64) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
    if let Ok(style) =
        ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} {msg}")
    {
        bar.set_style(style.progress_chars("=> "));
    }
    bar
}

/// `copies` copies of one operand, in one allocation, each in its own 256-byte-aligned slot
/// (see `slot_offset`); every copy holds the same values.
struct Rotated {
    buffer: DeviceBuffer,
    len: usize,
    dtype: DType,
}

impl Rotated {
    /// The copies, uninitialised when `values` is `None` (outputs).
    fn new(
        gpu: &Gpu,
        dtype: DType,
        len: usize,
        copies: usize,
        values: Option<&[f32]>,
    ) -> Result<Rotated, KernelError> {
        let bytes = len * dtype.size_bytes();
        let buffer = gpu.alloc(slot_offset(copies, bytes).max(1))?;
        if let Some(values) = values {
            let encoded = dtype.encode(values);
            for i in 0..copies {
                gpu.upload(&buffer, slot_offset(i, bytes), &encoded)?;
            }
        }
        Ok(Rotated { buffer, len, dtype })
    }

    fn view(&self, copy: usize) -> Result<DevPtr, KernelError> {
        let offset = slot_offset(copy, self.len * self.dtype.size_bytes());
        self.buffer.view(offset, self.len, self.dtype)
    }
}

/// `copies` copies of e4m3 codes, as `Rotated` holds values.
struct RotatedE4m3 {
    buffer: DeviceBuffer,
    len: usize,
}

impl RotatedE4m3 {
    fn new(gpu: &Gpu, codes: &[u8], copies: usize) -> Result<RotatedE4m3, KernelError> {
        let buffer = gpu.alloc(slot_offset(copies, codes.len()).max(1))?;
        for i in 0..copies {
            gpu.upload(&buffer, slot_offset(i, codes.len()), codes)?;
        }
        Ok(RotatedE4m3 {
            buffer,
            len: codes.len(),
        })
    }

    fn view(&self, copy: usize) -> Result<E4m3Ptr, KernelError> {
        E4m3Ptr::of(&self.buffer, slot_offset(copy, self.len), self.len)
    }
}

struct Bench<'g> {
    gpu: &'g Gpu,
    cublas: Option<&'g Cublas<'g>>,
    /// Why cuBLAS could not be opened, when it could not.
    cublas_missing: Option<String>,
    /// cuBLASLt, the FP8 cases' yardstick, and why it could not be opened.
    cublaslt: Option<&'g CublasLt<'g>>,
    cublaslt_missing: Option<String>,
    dtype: DType,
    reps: usize,
    warmup: usize,
    l2_bytes: usize,
    rng: SmallRng,
    progress: ProgressBar,
    kernels: Vec<KernelRow>,
    skipped: Vec<Skipped>,
    /// Whether the line saying cuBLAS is missing has been printed.
    cublas_missing_said: bool,
}

impl Bench<'_> {
    /// `len` random values of the run's dtype, never zero: magnitudes in [1/64, 1) times
    /// `scale`, either sign. Zeros could take fast paths (and hide unwritten outputs).
    fn values(&mut self, len: usize, scale: f32) -> Vec<f32> {
        (0..len)
            .map(|_| {
                let magnitude = self.rng.random_range(1.0 / 64.0..1.0f32) * scale;
                if self.rng.random_bool(0.5) {
                    magnitude
                } else {
                    -magnitude
                }
            })
            .collect()
    }

    /// An input of `len` random values of `dtype` in `copies` copies.
    fn input(
        &mut self,
        dtype: DType,
        len: usize,
        copies: usize,
        scale: f32,
    ) -> Result<Rotated, KernelError> {
        let values = self.values(len, scale);
        Rotated::new(self.gpu, dtype, len, copies, Some(&values))
    }

    fn output(&self, len: usize, copies: usize) -> Result<Rotated, KernelError> {
        Rotated::new(self.gpu, self.dtype, len, copies, None)
    }

    /// How many copies of inputs totalling `bytes` to rotate through.
    fn copies(&self, bytes: usize) -> usize {
        copies_beyond_l2(bytes, self.l2_bytes)
    }

    /// The statistics of `reps` timed repetitions of `work`, after the warm-up ones.
    /// Repetition `rep` reads copy `rep % copies` of the inputs.
    fn measure(
        &self,
        copies: usize,
        work: impl FnMut(usize) -> Result<(), KernelError>,
    ) -> Result<Stats, KernelError> {
        let timer = Timer {
            warmup: self.warmup,
            reps: self.reps,
            spin_nanoseconds: SPIN_NANOSECONDS,
        };
        let samples = timer.samples_ms(self.gpu, copies, work)?;
        Stats::from_samples(&samples)
            .ok_or_else(|| KernelError::Cuda("the CUDA events gave no usable time".into()))
    }

    /// Records one timing, or the reason it could not be taken.
    #[allow(clippy::too_many_arguments)]
    fn record(
        &mut self,
        op: &str,
        case: &str,
        provider: &str,
        epilogue: Option<&str>,
        shape: Vec<u64>,
        timing: Result<Stats, KernelError>,
        flops: Option<f64>,
        bytes: Option<f64>,
    ) {
        match timing {
            Ok(stats) => self.kernels.push(KernelRow::new(
                op, case, provider, epilogue, shape, &stats, flops, bytes,
            )),
            Err(e) => self.skip(op, case, provider, epilogue, e.to_string()),
        }
        self.progress.inc(1);
    }

    fn skip(
        &mut self,
        op: &str,
        case: &str,
        provider: &str,
        epilogue: Option<&str>,
        reason: String,
    ) {
        // A missing cuBLAS is said once, not once per case. Compile errors carry NVRTC's whole
        // log, kept in the JSON: on stderr, the first line says what failed.
        let first_line = reason.lines().next().unwrap_or_default();
        let line = if self.cublas_missing.as_deref() == Some(reason.as_str()) {
            let said_before = std::mem::replace(&mut self.cublas_missing_said, true);
            (!said_before).then(|| format!("skipped every cuBLAS timing: {first_line}"))
        } else {
            Some(match epilogue {
                Some(e) => format!("skipped {op} {case} {provider} ({e}): {first_line}"),
                None => format!("skipped {op} {case} {provider}: {first_line}"),
            })
        };
        if let Some(line) = line {
            self.progress.suspend(|| eprintln!("{line}"));
        }
        self.skipped.push(Skipped {
            op: op.into(),
            case: case.into(),
            provider: provider.into(),
            epilogue: epilogue.map(Into::into),
            reason,
        });
    }

    /// Ours and cuBLAS, each without and with bias + GELU, on the same rotated operands.
    /// Ours fuses the epilogue; cuBLAS is followed by our `bias_activation` kernel, in place
    /// on its output, inside the same timed span.
    fn matmul(&mut self, case: &Case, m: usize, n: usize, k: usize) {
        let d = self.dtype;
        let epilogues = [
            ("none", Epilogue::NONE),
            (
                "bias+gelu",
                Epilogue {
                    bias: true,
                    activation: Activation::Gelu,
                    ..Epilogue::NONE
                },
            ),
        ];
        let copies = self.copies((m * k + n * k + n) * d.size_bytes());
        let operands = (|| {
            Ok::<_, KernelError>((
                self.input(d, m * k, copies, 1.0)?,
                self.input(d, n * k, copies, 1.0)?,
                self.input(d, n, copies, 1.0)?,
                self.output(m * n, copies)?,
            ))
        })();
        let (a, w, bias, c) = match operands {
            Ok(operands) => operands,
            Err(e) => {
                for (name, _) in epilogues {
                    for provider in ["vitrt", "cublas"] {
                        self.skip("matmul", &case.name, provider, Some(name), e.to_string());
                        self.progress.inc(1);
                    }
                }
                return;
            }
        };
        let (gpu, flops) = (self.gpu, case.flops());
        for (name, epilogue) in epilogues {
            let p = MatmulProblem::linear(m, n, k, epilogue);
            let ours = self.measure(copies, |i| {
                let bias = if epilogue.bias {
                    Some(bias.view(i)?)
                } else {
                    None
                };
                matmul::gpu::matmul(gpu, d, &p, a.view(i)?, w.view(i)?, bias, None, c.view(i)?)
            });
            self.record(
                "matmul",
                &case.name,
                "vitrt",
                Some(name),
                case.shape(),
                ours,
                flops,
                None,
            );

            let Some(cublas) = self.cublas else {
                let reason = self.cublas_missing.clone().unwrap_or_default();
                self.skip("matmul", &case.name, "cublas", Some(name), reason);
                self.progress.inc(1);
                continue;
            };
            let theirs = self.measure(copies, |i| {
                let out = c.view(i)?;
                cublas.gemm_nt(d, m, n, k, a.view(i)?, w.view(i)?, out)?;
                if epilogue.bias {
                    activation::gpu::bias_activation(
                        gpu,
                        d,
                        Activation::Gelu,
                        out,
                        bias.view(i)?,
                        m,
                        n,
                        out,
                    )?;
                }
                Ok(())
            });
            self.record(
                "matmul",
                &case.name,
                "cublas",
                Some(name),
                case.shape(),
                theirs,
                flops,
                None,
            );
        }
    }

    /// The FP8 matmul (e4m3 A and W, per-row activation scales and per-channel weight scales,
    /// C in the run's 16-bit dtype) and cuBLASLt's FP8 GEMM (provider `cublas`: per-tensor
    /// scales, its fast accumulation, followed by our `bias_activation` as the 16-bit cuBLAS
    /// rows are), without and with bias + GELU, on the same e4m3 operands; then our 16-bit
    /// program on the same shape and epilogues (provider `vitrt-16bit`) on rotated operands of
    /// its own.
    fn fp8_matmul(&mut self, case: &Case, m: usize, n: usize, k: usize) {
        let d = self.dtype;
        let epilogues = [("none", false), ("bias+gelu", true)];
        let providers = ["vitrt", "cublas", "vitrt-16bit"];
        let skip_all = |bench: &mut Self, reason: String| {
            for (name, _) in epilogues {
                for provider in providers {
                    bench.skip(
                        "matmul-fp8",
                        &case.name,
                        provider,
                        Some(name),
                        reason.clone(),
                    );
                    bench.progress.inc(1);
                }
            }
        };
        if d == DType::F32 {
            skip_all(
                self,
                "the FP8 matmul writes f16 or bf16: run with --dtype f16 or bf16".into(),
            );
            return;
        }
        let (gpu, flops) = (self.gpu, case.flops());
        // FP8 operands: values of either sign across e4m3's range, scales of the size a
        // quantiser would pick.
        let fp8 = (|| {
            let copies = self.copies(m * k + n * k + (m + 2 * n) * 4);
            let codes = |bench: &mut Self, len: usize| -> Vec<u8> {
                bench
                    .values(len, e4m3::MAX)
                    .into_iter()
                    .map(e4m3::encode)
                    .collect()
            };
            let (a_codes, w_codes) = (codes(self, m * k), codes(self, n * k));
            Ok::<_, KernelError>((
                copies,
                RotatedE4m3::new(gpu, &a_codes, copies)?,
                RotatedE4m3::new(gpu, &w_codes, copies)?,
                self.input(DType::F32, m, copies, 1.0 / 64.0)?,
                self.input(DType::F32, n, copies, 1.0 / 4096.0)?,
                self.input(d, n, copies, 1.0)?,
                self.output(m * n, copies)?,
                // cuBLASLt's per-tensor scales.
                self.input(DType::F32, 1, copies, 1.0 / 64.0)?,
                self.input(DType::F32, 1, copies, 1.0 / 4096.0)?,
            ))
        })();
        let (copies, a, w, a_scale, w_scale, bias, c, a_tensor_scale, w_tensor_scale) = match fp8 {
            Ok(operands) => operands,
            Err(e) => return skip_all(self, e.to_string()),
        };
        for (name, fused) in epilogues {
            let p = Fp8Problem {
                bias: fused,
                activation: if fused {
                    Activation::Gelu
                } else {
                    Activation::None
                },
                ..Fp8Problem::linear(m, n, k, d)
            };
            let ours = self.measure(copies, |i| {
                let ops = Fp8Operands {
                    a: a.view(i)?,
                    b: w.view(i)?,
                    a_scale: a_scale.view(i)?,
                    b_scale: w_scale.view(i)?,
                    bias: Some(bias.view(i)?),
                    residual: None,
                    c: Fp8Destination::Half(c.view(i)?),
                };
                matmul::gpu::matmul_fp8(gpu, &p, &ops)
            });
            self.record(
                "matmul-fp8",
                &case.name,
                "vitrt",
                Some(name),
                case.shape(),
                ours,
                flops,
                None,
            );

            let Some(lt) = self.cublaslt else {
                let reason = self.cublaslt_missing.clone().unwrap_or_default();
                self.skip("matmul-fp8", &case.name, "cublas", Some(name), reason);
                self.progress.inc(1);
                continue;
            };
            let theirs = lt.plan_fp8_nt(m, n, k, d).and_then(|plan| {
                self.measure(copies, |i| {
                    let out = c.view(i)?;
                    plan.run(
                        a.view(i)?,
                        w.view(i)?,
                        a_tensor_scale.view(i)?,
                        w_tensor_scale.view(i)?,
                        out,
                    )?;
                    if fused {
                        activation::gpu::bias_activation(
                            gpu,
                            d,
                            Activation::Gelu,
                            out,
                            bias.view(i)?,
                            m,
                            n,
                            out,
                        )?;
                    }
                    Ok(())
                })
            });
            self.record(
                "matmul-fp8",
                &case.name,
                "cublas",
                Some(name),
                case.shape(),
                theirs,
                flops,
                None,
            );
        }
        drop((
            a,
            w,
            a_scale,
            w_scale,
            bias,
            c,
            a_tensor_scale,
            w_tensor_scale,
        ));

        // Our 16-bit program on the same shape, as the `matmul` cases run it.
        let copies = self.copies((m * k + n * k + n) * d.size_bytes());
        let half = (|| {
            Ok::<_, KernelError>((
                self.input(d, m * k, copies, 1.0)?,
                self.input(d, n * k, copies, 1.0)?,
                self.input(d, n, copies, 1.0)?,
                self.output(m * n, copies)?,
            ))
        })();
        let (a, w, bias, c) = match half {
            Ok(operands) => operands,
            Err(e) => {
                for (name, _) in epilogues {
                    self.skip(
                        "matmul-fp8",
                        &case.name,
                        "vitrt-16bit",
                        Some(name),
                        e.to_string(),
                    );
                    self.progress.inc(1);
                }
                return;
            }
        };
        for (name, fused) in epilogues {
            let epilogue = Epilogue {
                bias: fused,
                activation: if fused {
                    Activation::Gelu
                } else {
                    Activation::None
                },
                ..Epilogue::NONE
            };
            let p = MatmulProblem::linear(m, n, k, epilogue);
            let theirs = self.measure(copies, |i| {
                let bias = if fused { Some(bias.view(i)?) } else { None };
                matmul::gpu::matmul(gpu, d, &p, a.view(i)?, w.view(i)?, bias, None, c.view(i)?)
            });
            self.record(
                "matmul-fp8",
                &case.name,
                "vitrt-16bit",
                Some(name),
                case.shape(),
                theirs,
                flops,
                None,
            );
        }
    }

    /// The layernorm-folded matmul (raw rows x, their row statistics, folded weights, bias and
    /// column sums; bias, and GELU where `gelu`: epilogue `bias` or `bias+gelu`), then the two
    /// kernels it replaces on the same rotated operands (provider `vitrt-unfused`): our
    /// layernorm of x into a rotated intermediate, then our matmul with its bias and
    /// activation. The row statistics, which x's producer writes in a model
    /// (`matmul::gpu::matmul_with_row_statistics`), are the twin's of x, filled once before
    /// timing: the timed kernel is the folded matmul alone.
    fn layernorm_matmul(&mut self, case: &Case, m: usize, n: usize, k: usize, gelu: bool) {
        let d = self.dtype;
        let op = "matmul-layernorm";
        let (epilogue, activation) = if gelu {
            ("bias+gelu", Activation::Gelu)
        } else {
            ("bias", Activation::None)
        };
        let providers = ["vitrt", "vitrt-unfused"];
        let skip_all = |bench: &mut Self, reason: String| {
            for provider in providers {
                bench.skip(op, &case.name, provider, Some(epilogue), reason.clone());
                bench.progress.inc(1);
            }
        };
        let (gpu, flops) = (self.gpu, case.flops());
        let p = LayernormMatmulProblem {
            m,
            n,
            k,
            activation,
            eps: LAYER_NORM_EPS,
        };
        if let Err(reason) = matmul::layernorm_matmul_support(gpu, d, &p) {
            return skip_all(self, reason);
        }
        let size = d.size_bytes();
        // x in the run's type, and its row statistics as its producer would write them.
        let x_values: Vec<f32> = self
            .values(m * k, 4.0)
            .into_iter()
            .map(|v| d.round(v))
            .collect();
        let mut stats = vec![0.0f32; p.row_stats_len()];
        matmul::cpu::row_statistics(&x_values, m, k, &mut stats);
        let operands = (|| {
            let copies =
                self.copies((m * k + n * k + n) * size + n * 4 + 2 * k * 4 + stats.len() * 4);
            Ok::<_, KernelError>((
                copies,
                Rotated::new(gpu, d, m * k, copies, Some(&x_values))?,
                Rotated::new(gpu, DType::F32, stats.len(), copies, Some(&stats))?,
                self.input(d, n * k, copies, 1.0)?,
                self.input(d, n, copies, 1.0)?,
                self.input(DType::F32, n, copies, 1.0)?,
                self.input(DType::F32, k, copies, 1.5)?,
                self.input(DType::F32, k, copies, 0.5)?,
                self.output(m * k, copies)?,
                self.output(m * n, copies)?,
            ))
        })();
        let (copies, x, row_stats, w, bias, column_sums, gamma, beta, y, out) = match operands {
            Ok(operands) => operands,
            Err(e) => return skip_all(self, e.to_string()),
        };
        let folded = self.measure(copies, |i| {
            matmul::gpu::matmul_layernorm(
                gpu,
                d,
                &p,
                x.view(i)?,
                row_stats.view(i)?,
                w.view(i)?,
                bias.view(i)?,
                column_sums.view(i)?,
                out.view(i)?,
            )
        });
        self.record(
            op,
            &case.name,
            "vitrt",
            Some(epilogue),
            case.shape(),
            folded,
            flops,
            None,
        );
        let product = MatmulProblem::linear(
            m,
            n,
            k,
            Epilogue {
                bias: true,
                activation,
                ..Epilogue::NONE
            },
        );
        let unfused = self.measure(copies, |i| {
            let y = y.view(i)?;
            layernorm::gpu::layernorm(
                gpu,
                d,
                x.view(i)?,
                gamma.view(i)?,
                beta.view(i)?,
                m,
                k,
                LAYER_NORM_EPS,
                y,
            )?;
            matmul::gpu::matmul(
                gpu,
                d,
                &product,
                y,
                w.view(i)?,
                Some(bias.view(i)?),
                None,
                out.view(i)?,
            )
        });
        self.record(
            op,
            &case.name,
            "vitrt-unfused",
            Some(epilogue),
            case.shape(),
            unfused,
            flops,
            None,
        );
    }

    /// The residual matmul that writes a 16-bit stream with its rows' statistics (bias and
    /// residual: epilogue `bias+residual`), then the same residual matmul without them on the
    /// same tile and rotated operands (provider `vitrt-plain`).
    fn row_stats_matmul(&mut self, case: &Case, m: usize, n: usize, k: usize) {
        let d = self.dtype;
        let op = "matmul-row-stats";
        let epilogue_name = "bias+residual";
        let providers = ["vitrt", "vitrt-plain"];
        let skip_all = |bench: &mut Self, reason: String| {
            for provider in providers {
                bench.skip(
                    op,
                    &case.name,
                    provider,
                    Some(epilogue_name),
                    reason.clone(),
                );
                bench.progress.inc(1);
            }
        };
        let (gpu, flops) = (self.gpu, case.flops());
        let p = MatmulProblem::linear(
            m,
            n,
            k,
            Epilogue {
                bias: true,
                residual: true,
                ..Epilogue::NONE
            },
        );
        if let Err(reason) = matmul::row_statistics_support(gpu, d, &p) {
            return skip_all(self, reason);
        }
        let stats_len = 2 * (n / 64) * m;
        let operands = (|| {
            let copies =
                self.copies((m * k + n * k + n + 2 * m * n) * d.size_bytes() + stats_len * 4);
            Ok::<_, KernelError>((
                copies,
                self.input(d, m * k, copies, 1.0)?,
                self.input(d, n * k, copies, 0.05)?,
                self.input(d, n, copies, 1.0)?,
                self.input(d, m * n, copies, 2.0)?,
                self.output(m * n, copies)?,
                Rotated::new(gpu, DType::F32, stats_len, copies, None)?,
            ))
        })();
        let (copies, a, w, bias, residual, c, stats) = match operands {
            Ok(operands) => operands,
            Err(e) => return skip_all(self, e.to_string()),
        };
        let tile = match (|| {
            matmul::gpu::row_statistics_tile_for(gpu, d, &p, residual.view(0)?, c.view(0)?)
        })() {
            Ok(tile) => tile,
            Err(e) => return skip_all(self, e.to_string()),
        };
        let with_statistics = self.measure(copies, |i| {
            matmul::gpu::matmul_with_row_statistics_with_tile(
                gpu,
                d,
                &p,
                tile,
                a.view(i)?,
                w.view(i)?,
                Some(bias.view(i)?),
                residual.view(i)?,
                c.view(i)?,
                stats.view(i)?,
            )
        });
        self.record(
            op,
            &case.name,
            "vitrt",
            Some(epilogue_name),
            case.shape(),
            with_statistics,
            flops,
            None,
        );
        let plain = self.measure(copies, |i| {
            matmul::gpu::matmul_with_tile(
                gpu,
                d,
                &p,
                tile,
                a.view(i)?,
                w.view(i)?,
                Some(bias.view(i)?),
                Some(residual.view(i)?),
                c.view(i)?,
            )
        });
        self.record(
            op,
            &case.name,
            "vitrt-plain",
            Some(epilogue_name),
            case.shape(),
            plain,
            flops,
            None,
        );
    }

    /// Ours, then a device-to-device copy moving the same traffic (half of it read, half
    /// written), each on its own rotated buffers (ours freed before the copy's are made).
    fn memory_bound(&mut self, case: &Case) {
        let d = self.dtype;
        let op = case.op();
        let bytes = case.bytes(d).unwrap_or(0);
        let ours = self.time_memory_bound(case);
        self.record(
            op,
            &case.name,
            "vitrt",
            None,
            case.shape(),
            ours,
            None,
            Some(bytes as f64),
        );
        if let Kind::Attention { batch } = case.kind {
            // The three unfused kernels on the same traffic, as the second row of the case.
            let unfused = self.time_attention(batch, false);
            self.record(
                op,
                &case.name,
                "vitrt-unfused",
                None,
                case.shape(),
                unfused,
                None,
                Some(bytes as f64),
            );
        }

        let elements = (bytes / 2) as usize / d.size_bytes();
        let copied = (elements * d.size_bytes()) as u64;
        let copy = self.time_copy(elements);
        self.record(
            "copy",
            &format!("{op}/{}", case.name),
            "copy",
            None,
            vec![copied],
            copy,
            None,
            Some(2.0 * copied as f64),
        );
    }

    /// Attention over the fused-QKV activation as the runtime lowers it, Q, K and V read in
    /// place from the [B, T, 3·hidden] tensor: fused (the one kernel; f16 and bf16 only), or
    /// unfused (scores = scale·Q·Kᵀ per head, softmax over each row, context = P·V).
    fn time_attention(&mut self, batch: usize, fused: bool) -> Result<Stats, KernelError> {
        let (d, size, gpu) = (self.dtype, self.dtype.size_bytes(), self.gpu);
        let width = 3 * HIDDEN;
        let copies = self.copies(batch * TOKENS * width * size);
        let qkv = self.input(d, batch * TOKENS * width, copies, 1.0)?;
        let context = self.output(batch * TOKENS * HIDDEN, copies)?;
        let scale = 1.0 / (HEAD_DIM as f32).sqrt();
        let slice = |column_offset| HeadSlice { column_offset };
        let shape = [batch, TOKENS, width];
        if fused {
            let op = Op::Attention {
                heads: HEADS,
                head_dim: HEAD_DIM,
                scale,
                q: slice(0),
                k: slice(HIDDEN),
                v: slice(2 * HIDDEN),
                causal: false,
                key_padding: false,
            };
            let problem = lowering::attention_for(&op, &[&shape, &shape, &shape])
                .ok_or_else(|| KernelError::InvalidArgument("attention did not lower".into()))?;
            return self.measure(copies, |i| {
                let qkv = qkv.view(i)?;
                attention::gpu::attention(gpu, d, &problem, qkv, qkv, qkv, context.view(i)?)
            });
        }
        let score_len = batch * HEADS * TOKENS * TOKENS;
        let scores = self.output(score_len, 1)?;
        let probs = self.output(score_len, 1)?;
        let heads_at = |offset| HeadSource {
            tokens: TOKENS,
            width,
            offset,
        };
        let scores_problem = lowering::attention_scores(
            batch,
            HEADS,
            HEAD_DIM,
            scale,
            (heads_at(0), false),
            heads_at(HIDDEN),
            false,
        );
        let context_problem =
            lowering::attention_context(batch, TOKENS, HEADS, HEAD_DIM, heads_at(2 * HIDDEN));
        self.measure(copies, |i| {
            let (qkv, s, p) = (qkv.view(i)?, scores.view(0)?, probs.view(0)?);
            matmul::gpu::matmul(gpu, d, &scores_problem, qkv, qkv, None, None, s)?;
            softmax::gpu::softmax(gpu, d, s, batch * HEADS * TOKENS, TOKENS, 1.0, p)?;
            matmul::gpu::matmul(
                gpu,
                d,
                &context_problem,
                p,
                qkv,
                None,
                None,
                context.view(i)?,
            )
        })
    }

    fn time_copy(&mut self, elements: usize) -> Result<Stats, KernelError> {
        let d = self.dtype;
        let copies = self.copies(elements * d.size_bytes());
        let src = self.input(d, elements, copies, 1.0)?;
        let dst = self.output(elements, copies)?;
        let gpu = self.gpu;
        self.measure(copies, |i| {
            gpu.copy(d, src.view(i)?, elements, dst.view(i)?)
        })
    }

    fn time_memory_bound(&mut self, case: &Case) -> Result<Stats, KernelError> {
        let (d, size, gpu) = (self.dtype, self.dtype.size_bytes(), self.gpu);
        match case.kind {
            Kind::LayerNorm { rows, cols } => {
                // gamma and beta are f32 in every run (kernels/src/layernorm/layernorm.cu).
                let copies = self.copies(rows * cols * size + 2 * cols * 4);
                let x = self.input(d, rows * cols, copies, 4.0)?;
                let gamma = self.input(DType::F32, cols, copies, 1.5)?;
                let beta = self.input(DType::F32, cols, copies, 0.5)?;
                let out = self.output(rows * cols, copies)?;
                self.measure(copies, |i| {
                    let (x, g, b, o) = (x.view(i)?, gamma.view(i)?, beta.view(i)?, out.view(i)?);
                    layernorm::gpu::layernorm(gpu, d, x, g, b, rows, cols, LAYER_NORM_EPS, o)
                })
            }
            Kind::RmsNorm { rows, cols } => {
                // The weight is f32 in every run (kernels/src/rmsnorm/rmsnorm.cu).
                let copies = self.copies(rows * cols * size + cols * 4);
                let x = self.input(d, rows * cols, copies, 4.0)?;
                let weight = self.input(DType::F32, cols, copies, 1.5)?;
                let out = self.output(rows * cols, copies)?;
                self.measure(copies, |i| {
                    let (x, w, o) = (x.view(i)?, weight.view(i)?, out.view(i)?);
                    rmsnorm::gpu::rmsnorm(gpu, d, x, w, rows, cols, LAYER_NORM_EPS, o)
                })
            }
            Kind::Softmax { rows, cols } => {
                let copies = self.copies(rows * cols * size);
                let x = self.input(d, rows * cols, copies, 8.0)?;
                let out = self.output(rows * cols, copies)?;
                // Scale 1: the attention scores arrive already scaled (by their matmul's alpha).
                self.measure(copies, |i| {
                    softmax::gpu::softmax(gpu, d, x.view(i)?, rows, cols, 1.0, out.view(i)?)
                })
            }
            Kind::Add { n } => {
                let copies = self.copies(2 * n * size);
                let a = self.input(d, n, copies, 4.0)?;
                let b = self.input(d, n, copies, 4.0)?;
                let out = self.output(n, copies)?;
                self.measure(copies, |i| {
                    add::gpu::add(gpu, d, a.view(i)?, b.view(i)?, n, out.view(i)?)
                })
            }
            Kind::Patch { batch } => {
                // As the CUDA backend runs Op::PatchEmbed: patch rows into a workspace and the
                // CLS rows into the tokens, then the projection matmul writes token rows 1..
                // with the bias and the position embeddings in its epilogue.
                let patches = (IMAGE / PATCH) * (IMAGE / PATCH);
                let patch_len = CHANNELS * PATCH * PATCH;
                let pixel_count = batch * CHANNELS * IMAGE * IMAGE;
                let copies = self.copies(
                    pixel_count * 4 + (HIDDEN * patch_len + 2 * HIDDEN + TOKENS * HIDDEN) * size,
                );
                let pixels = self.input(DType::F32, pixel_count, copies, 2.0)?;
                let weight = self.input(d, HIDDEN * patch_len, copies, 0.1)?;
                let bias = self.input(d, HIDDEN, copies, 1.0)?;
                let cls = self.input(d, HIDDEN, copies, 1.0)?;
                let pos = self.input(d, TOKENS * HIDDEN, copies, 1.0)?;
                let workspace = self.output(batch * patches * patch_len, 1)?;
                let tokens = self.output(batch * TOKENS * HIDDEN, copies)?;
                let problem = MatmulProblem::patch_projection(batch, 1, patches, patch_len, HIDDEN);
                self.measure(copies, |i| {
                    let (ws, out, pos) = (workspace.view(0)?, tokens.view(i)?, pos.view(i)?);
                    let cls = PrefixRows {
                        rows: cls.view(i)?,
                        count: 1,
                    };
                    patchify::gpu::patchify_with_prefix(
                        gpu,
                        d,
                        pixels.view(i)?,
                        batch,
                        CHANNELS,
                        IMAGE,
                        IMAGE,
                        PATCH,
                        cls,
                        pos,
                        HIDDEN,
                        TOKENS,
                        ws,
                        out,
                    )?;
                    let (w, b) = (weight.view(i)?, bias.view(i)?);
                    matmul::gpu::matmul(gpu, d, &problem, ws, w, Some(b), Some(pos), out)
                })
            }
            Kind::Attention { batch } => self.time_attention(batch, true),
            Kind::Rope { batch } => {
                let n = batch * TOKENS * HIDDEN;
                let copies = self.copies(2 * n * size);
                let x = self.input(d, n, copies, 3.0)?;
                let out = self.output(n, copies)?;
                let grid = RopeGrid {
                    prefix_tokens: 1,
                    rows: IMAGE / PATCH,
                    cols: IMAGE / PATCH,
                    theta: 100.0,
                };
                self.measure(copies, |i| {
                    rope::gpu::rope(
                        gpu,
                        d,
                        x.view(i)?,
                        batch,
                        TOKENS,
                        HEADS,
                        HEAD_DIM,
                        &grid,
                        out.view(i)?,
                    )
                })
            }
            Kind::Matmul { .. }
            | Kind::Fp8Matmul { .. }
            | Kind::LayernormMatmul { .. }
            | Kind::RowStatsMatmul { .. } => Err(KernelError::InvalidArgument(
                "matmuls are timed by Bench::matmul, Bench::fp8_matmul, \
                 Bench::layernorm_matmul and Bench::row_stats_matmul"
                    .into(),
            )),
        }
    }
}
