//! CUDA graph replay against eager launches on the GPU: a forward pass replayed from a
//! captured graph must give exactly the bits of the same pass launched kernel by kernel, for
//! plans that alternate on one backend and after the arena has grown under them. Run on the
//! GPU machine (scripts/gpu/gpu-check.sh).

mod common;

use common::{bits, fixture, pixels};
use vitrt_model::{Runner, VisionModel};
use vitrt_runtime::backend::cuda::CudaBackend;
use vitrt_runtime::passes::Fusion;
use vitrt_runtime::{DType, ReplayState};

fn runner(dtype: DType, graph_replay: bool) -> Runner {
    let model = VisionModel::load(&fixture("tiny-gelu")).unwrap();
    let backend = CudaBackend::new(0, dtype).unwrap();
    Runner::new(model, Box::new(backend), Fusion::ALL).with_graph_replay(graph_replay)
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn replayed_forward_passes_match_eager_ones_bitwise() {
    for dtype in [DType::F16, DType::F32] {
        let mut replayed = runner(dtype, true);
        let mut eager = runner(dtype, false);
        // Batch 2 and 5 alternate; 9 joins halfway and grows the arena under both, whose
        // graphs are then dropped and captured again.
        let schedule = [2, 5, 2, 5, 2, 9, 2, 5, 9, 2, 5];
        for (pass, &batch) in schedule.iter().enumerate() {
            let len: usize = replayed.input_shape(batch).iter().product();
            let input = pixels(len, pass as u64);
            let ours = replayed.run(&input, batch, false).unwrap();
            let reference = eager.run(&input, batch, false).unwrap();
            assert_eq!(
                bits(&ours),
                bits(&reference),
                "{dtype} pass {pass} (batch {batch}): replay differs from eager launches"
            );
            let executor = replayed.executor(batch, false).unwrap();
            assert_ne!(
                executor.replay_state(),
                ReplayState::Failed,
                "{dtype} batch {batch}: capture failed (see stderr)"
            );
        }
        // Every plan has run at least twice since the last arena growth (batch 9), so each
        // holds its graph now.
        for batch in [2, 5, 9] {
            let executor = replayed.executor(batch, false).unwrap();
            assert!(
                executor.has_captured_graph(replayed.backend()),
                "{dtype} batch {batch}: no graph captured"
            );
        }
        let eager_executor = eager.executor(2, false).unwrap();
        assert!(!eager_executor.has_captured_graph(eager.backend()));
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn dependent_launches_give_the_bits_of_serialized_ones() {
    // Programmatic dependent launch lets each kernel start before the previous one ends and
    // wait in its wrapper: a kernel that touched memory before that wait would read stale
    // activations or overwrite ones still being read. Replayed graphs with dependent
    // launches against eager, fully serialised launches, over every op family the fixtures
    // use (patch embedding, layernorm, fused and unfused attention, every epilogue).
    for name in [
        "tiny-gelu",
        "headdim80-silu-1ch",
        "headdim18-nobias-gelunew",
    ] {
        for fusion in [Fusion::ALL, Fusion::NONE] {
            let make = |dependent: bool, replay: bool| {
                let model = VisionModel::load(&fixture(name)).unwrap();
                let backend = CudaBackend::new(0, DType::F16).unwrap();
                backend.gpu().set_dependent_launch(dependent);
                Runner::new(model, Box::new(backend), fusion).with_graph_replay(replay)
            };
            let mut dependent = make(true, true);
            let mut serialized = make(false, false);
            for (pass, batch) in [3usize, 3, 3, 7].into_iter().enumerate() {
                let len: usize = dependent.input_shape(batch).iter().product();
                let input = pixels(len, 100 + pass as u64);
                assert_eq!(
                    bits(&dependent.run(&input, batch, true).unwrap()),
                    bits(&serialized.run(&input, batch, true).unwrap()),
                    "{name} {fusion:?} pass {pass} (batch {batch}): dependent launches differ"
                );
            }
        }
    }
}
