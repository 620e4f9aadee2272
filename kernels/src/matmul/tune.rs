//! The matmul tuner: times every candidate tile on one problem and keeps the fastest in the
//! tuning table (tuning.rs), which [`crate::matmul::gpu::matmul`] consults before the cost
//! model.

use crate::cuda::{copies_beyond_l2, invalid, DevPtr, DeviceBuffer, Gpu, KernelError, Timer};
use crate::matmul::gpu::matmul_with_tile;
use crate::matmul::problem::{MatmulProblem, WeightLayout};
use crate::matmul::selection::{matmul_tile_for, MatmulTile};
use crate::matmul::tuning::{
    matmul_candidates, matmul_source_hash, with_tuning_table, MatmulStorage, TunedChoice, TuningKey,
};
use crate::types::DType;
use std::path::PathBuf;

/// One matmul to tune: the problem and the storage of its C and residual.
#[derive(Clone, Debug)]
pub struct MatmulCase {
    pub dtype: DType,
    pub problem: MatmulProblem,
    pub storage: MatmulStorage,
}

/// How long to time each candidate.
#[derive(Clone, Copy, Debug)]
pub struct TuneSettings {
    /// Untimed launches first (the first also compiles).
    pub warmup: usize,
    /// Timed launches; the median counts.
    pub reps: usize,
}

/// One candidate's time.
#[derive(Clone, Debug)]
pub struct CandidateTime {
    pub tile: MatmulTile,
    pub median_ms: f64,
}

/// What tuning one matmul found.
#[derive(Clone, Debug)]
pub struct MatmulTuning {
    pub key: TuningKey,
    pub source_hash: String,
    pub heuristic: MatmulTile,
    pub heuristic_ms: f64,
    pub best: MatmulTile,
    pub best_ms: f64,
    /// Every candidate timed, in candidate order.
    pub times: Vec<CandidateTime>,
}

/// Device time each timed launch waits behind (see [`Gpu::spin`]), so that the start event
/// does not fire on an idle GPU while the host is still queuing the launch.
const SPIN_NANOSECONDS: u64 = 50_000;

/// Times every candidate tile on `case` (random operands, enough copies to exceed L2
/// twice, `settings.warmup` untimed launches, the median of `settings.reps` timed ones)
/// and returns the times; nothing is stored (see [`store_matmul_tuning`]).
pub fn tune_matmul(
    gpu: &Gpu,
    case: &MatmulCase,
    settings: TuneSettings,
) -> Result<MatmulTuning, KernelError> {
    if settings.reps == 0 {
        return Err(invalid!("tuning needs at least one timed launch"));
    }
    let (dtype, p) = (case.dtype, &case.problem);
    let candidates = matmul_candidates(gpu, dtype);
    if candidates.is_empty() {
        return Err(invalid!(
            "no {dtype} matmul tiles to tune on {}",
            gpu.name()
        ));
    }
    let heuristic = matmul_tile_for(gpu, dtype, p)?;
    let operands = TuningOperands::new(gpu, case)?;
    let mut times = Vec::with_capacity(candidates.len());
    let mut timed = candidates.clone();
    if !timed.contains(&heuristic) {
        timed.push(heuristic);
    }
    let medians = medians_in_rounds(timed.len(), settings, |candidate, timer| {
        timer.samples_ms(gpu, operands.copies, |copy| {
            let (a, b, bias, residual) = operands.inputs(copy);
            let tile = timed[candidate];
            matmul_with_tile(gpu, dtype, p, tile, a, b, bias, residual, operands.c)
        })
    })?;
    for (&tile, median_ms) in timed.iter().zip(medians) {
        times.push(CandidateTime { tile, median_ms });
    }
    let heuristic_ms = times
        .iter()
        .find(|t| t.tile == heuristic)
        .map_or(f64::NAN, |t| t.median_ms);
    // The best among the candidates (the heuristic's tile is timed for comparison even if
    // it is not one).
    let best = times
        .iter()
        .filter(|t| candidates.contains(&t.tile))
        .min_by(|x, y| x.median_ms.total_cmp(&y.median_ms))
        .cloned()
        .ok_or_else(|| invalid!("no candidate was timed"))?;
    Ok(MatmulTuning {
        key: TuningKey::matmul(p, dtype, case.storage, gpu.compute_capability(), gpu.name()),
        source_hash: matmul_source_hash(&candidates),
        heuristic,
        heuristic_ms,
        best: best.tile,
        best_ms: best.median_ms,
        times,
    })
}

/// Rounds the timed launches of every candidate are spread over (at most; fewer when there
/// are fewer launches): with the default 20 launches, two a round, so that a slow spell as
/// long as one candidate's launches leaves each candidate fewer than half of its samples.
const ROUNDS: usize = 10;

/// The median time of each of `candidates` candidates over `settings.reps` timed launches,
/// taken in rounds: every round times every candidate in turn (`sample(candidate, timer)`
/// returns its launches' times), so that a slow spell of the GPU (a clock change, another
/// process) falls on all of them rather than on the one timed then. One candidate timed after
/// another once showed batch-1 proj's deep tile at 4.4 times its time, a reading that did not
/// come back (benchmarks/NOTES.md, 2026-11-25 "The tuner's false 4.4x"). The first round
/// warms each candidate up with `settings.warmup` launches (the first compiles it); later
/// rounds with one.
fn medians_in_rounds(
    candidates: usize,
    settings: TuneSettings,
    mut sample: impl FnMut(usize, Timer) -> Result<Vec<f64>, KernelError>,
) -> Result<Vec<f64>, KernelError> {
    let rounds = ROUNDS.min(settings.reps).max(1);
    let mut samples = vec![Vec::with_capacity(settings.reps); candidates];
    for round in 0..rounds {
        // Round r takes its share of the launches: the reps split as evenly as they go.
        let reps = settings.reps * (round + 1) / rounds - settings.reps * round / rounds;
        let timer = Timer {
            warmup: if round == 0 { settings.warmup } else { 1 },
            reps,
            spin_nanoseconds: SPIN_NANOSECONDS,
        };
        for (candidate, times) in samples.iter_mut().enumerate() {
            times.extend(sample(candidate, timer)?);
        }
    }
    samples
        .into_iter()
        .map(|mut times| {
            times.sort_by(f64::total_cmp);
            times
                .get(times.len() / 2)
                .copied()
                .ok_or_else(|| invalid!("tuning needs at least one timed launch"))
        })
        .collect()
}

/// Keeps `tuning`'s best tile in this Gpu's table (so the next launch of the problem uses
/// it) and writes the table to its file; returns the file.
pub fn store_matmul_tuning(gpu: &Gpu, tuning: &MatmulTuning) -> Result<PathBuf, KernelError> {
    with_tuning_table(gpu, |table| {
        table.insert(
            tuning.key.clone(),
            &tuning.source_hash,
            TunedChoice {
                choice: tuning.best.name(),
                median_ms: tuning.best_ms,
            },
        );
        table.save().map_err(KernelError::File)
    })
}

/// Random operands for timing one matmul: `copies` sets of A, B, bias and residual, enough
/// to exceed twice the L2 cache, so that no launch finds its inputs left there by the last.
struct TuningOperands {
    _buffers: Vec<DeviceBuffer>,
    sets: Vec<(DevPtr, DevPtr, Option<DevPtr>, Option<DevPtr>)>,
    c: DevPtr,
    copies: usize,
}

impl TuningOperands {
    fn new(gpu: &Gpu, case: &MatmulCase) -> Result<TuningOperands, KernelError> {
        let (dtype, p) = (case.dtype, &case.problem);
        let (batch, heads) = (p.batch, p.heads);
        let b_rows_cols = match p.b_layout {
            WeightLayout::NK => (p.n, p.k),
            WeightLayout::KN => (p.k, p.n),
        };
        let a_len = p.a.extent(batch, heads, p.m, p.k);
        let b_len = p.b.extent(batch, heads, b_rows_cols.0, b_rows_cols.1);
        let c_len = p.c.extent(batch, heads, p.m, p.n);
        let bias_len = p.epilogue.bias.then_some(p.n);
        let residual = p.epilogue.residual.then(|| {
            let dtype = case.storage.residual.unwrap_or(case.storage.output);
            (p.r.extent(batch, heads, p.m, p.n), dtype)
        });
        let set_bytes = (a_len + b_len + bias_len.unwrap_or(0)) * dtype.size_bytes()
            + residual.map_or(0, |(len, d)| len * d.size_bytes());
        let l2 = gpu.l2_cache_bytes().unwrap_or(50 << 20);
        let copies = copies_beyond_l2(set_bytes, l2).min(64);
        let mut random = Xorshift(0x7475_6e65 ^ (set_bytes as u64).rotate_left(17));
        let mut buffers = Vec::new();
        let mut upload = |len: usize, dtype: DType, scale: f32| -> Result<DevPtr, KernelError> {
            let values: Vec<f32> = (0..len).map(|_| random.uniform() * scale).collect();
            let buffer = gpu.alloc((len * dtype.size_bytes()).max(1))?;
            gpu.upload(&buffer, 0, &dtype.encode(&values))?;
            let view = buffer.view(0, len, dtype)?;
            buffers.push(buffer);
            Ok(view)
        };
        // Sums of k products of values in [-1, 1] · 1/√k stay near 1: no overflow in f16.
        let b_scale = 1.0 / (p.k.max(1) as f32).sqrt();
        let mut sets = Vec::with_capacity(copies);
        for _ in 0..copies {
            let a = upload(a_len, dtype, 1.0)?;
            let b = upload(b_len, dtype, b_scale)?;
            let bias = bias_len.map(|len| upload(len, dtype, 1.0)).transpose()?;
            let residual = residual.map(|(len, d)| upload(len, d, 1.0)).transpose()?;
            sets.push((a, b, bias, residual));
        }
        let c = upload(c_len, case.storage.output, 0.0)?;
        Ok(TuningOperands {
            _buffers: buffers,
            sets,
            c,
            copies,
        })
    }

    fn inputs(&self, copy: usize) -> (DevPtr, DevPtr, Option<DevPtr>, Option<DevPtr>) {
        self.sets[copy % self.sets.len()]
    }
}

/// A small deterministic generator: the kernels crate has no `rand`.
struct Xorshift(u64);

impl Xorshift {
    /// Uniform in [-1, 1).
    fn uniform(&mut self) -> f32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        ((self.0 >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A slow spell that lasts as long as one candidate's launches would, timed one after
    /// another, make that candidate look slow (its 20 launches all 4.4x); in rounds it
    /// touches every candidate's samples a little and no median.
    #[test]
    fn a_slow_spell_moves_no_median_when_candidates_are_timed_in_rounds() {
        let settings = TuneSettings {
            warmup: 5,
            reps: 20,
        };
        let (mut launches, mut warmups) = (0usize, Vec::new());
        let medians = medians_in_rounds(3, settings, |candidate, timer| {
            warmups.push(timer.warmup);
            let times = (0..timer.reps)
                .map(|_| {
                    launches += 1;
                    // Launches 21-40 run 4.4x slow: candidate 1's whole window, timed in turn.
                    let slow = (21..=40).contains(&launches);
                    (candidate + 1) as f64 * if slow { 4.4 } else { 1.0 }
                })
                .collect();
            Ok(times)
        })
        .unwrap();
        assert_eq!(medians, [1.0, 2.0, 3.0]);
        assert_eq!(launches, 60, "every candidate timed reps times");
        assert_eq!(warmups.len(), 3 * ROUNDS);
        assert_eq!(warmups[..3], [5, 5, 5], "the first round warms up as asked");
        assert!(warmups[3..].iter().all(|&w| w == 1), "{warmups:?}");
    }

    #[test]
    fn fewer_launches_than_rounds_take_one_round_each() {
        let settings = TuneSettings { warmup: 1, reps: 2 };
        let mut rounds = Vec::new();
        let medians = medians_in_rounds(1, settings, |_, timer| {
            rounds.push(timer.reps);
            Ok(vec![0.5; timer.reps])
        })
        .unwrap();
        assert_eq!(medians, [0.5]);
        assert_eq!(rounds, [1, 1]);
    }
}
