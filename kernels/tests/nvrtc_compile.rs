//! Compiles every registered kernel instantiation for sm_80 and sm_90 with NVRTC, on a machine
//! with no GPU, and prints ptxas's resource report (registers, shared memory, stack, spills).
//!
//! NVRTC and the CUDA headers come from a CUDA toolkit or from the pip wheels
//! `nvidia-cuda-nvrtc` and `nvidia-cuda-runtime` (see .ci/install-cuda-wheels.sh). Without
//! them the test skips, except when the environment variable `CI` is set: there it fails.
//! Run with `-- --nocapture` to see the table; set VITRT_COMPILE_FILTER to a part of a name to
//! compile only the instantiations that contain it, and VITRT_COMPILE_DUMP to a directory to
//! keep their cubins, sources and logs there.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;
use vitrt_kernels::all_instantiations;
use vitrt_kernels::cuda::{Arch, Compiler, Instantiation, KernelResources};

/// What ptxas's advisories say when it serialised a kernel's wgmma pipeline, whatever the
/// reason (C7514: accumulators read while a wgmma runs; C7518: a compiler-inserted wait in a
/// divergent path; others).
const WGMMA_SERIALIZED: &str = "wgmma.mma_async instructions are serialized";

/// Compute capabilities CI compiles for: Ampere (A100) and Hopper (H100, H200).
const TARGETS: [(u32, u32); 2] = [(8, 0), (9, 0)];

fn running_in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "0" && v != "false")
}

fn compile_one(compiler: &Compiler, inst: &Instantiation, arch: Arch) -> Outcome {
    let started = Instant::now();
    let mut warnings = Vec::new();
    let result = compiler
        .compile(inst, arch)
        .map(|compiled| {
            // VITRT_COMPILE_DUMP=<dir> keeps each cubin (for nvdisasm), program source and compile log.
            if let Some(dir) = std::env::var_os("VITRT_COMPILE_DUMP") {
                let path = std::path::Path::new(&dir).join(format!(
                    "{}.sm_{}{}.cubin",
                    inst.name, arch.major, arch.minor
                ));
                let written = std::fs::write(&path, &compiled.cubin)
                    .and_then(|()| std::fs::write(path.with_extension("log"), &compiled.log))
                    .and_then(|()| {
                        std::fs::write(path.with_extension("cu"), inst.program_source())
                    });
                if let Err(e) = written {
                    eprintln!("cannot write {}: {e}", path.display());
                }
            }
            // Warnings and ptxas's performance advisories (C75xx: an injected warpgroup.wait, a
            // serialised wgmma) are shown; a serialised wgmma pipeline fails the test below.
            warnings.extend(
                compiled
                    .log
                    .lines()
                    .filter(|line| line.contains("warning") || line.contains("(C75"))
                    .map(str::to_owned),
            );
            compiled
                .resources()
                .into_iter()
                .find(|r| r.function == inst.name)
        })
        .map_err(|e| e.to_string());
    Outcome {
        name: inst.name.clone(),
        arch,
        millis: started.elapsed().as_millis(),
        result,
        warnings,
    }
}

struct Outcome {
    name: String,
    arch: Arch,
    millis: u128,
    /// The resources, or `None` when the log held no ptxas report for the kernel.
    result: Result<Option<KernelResources>, String>,
    /// Warning lines of the compile log.
    warnings: Vec<String>,
}

#[test]
fn every_instantiation_compiles_for_sm80_and_sm90() {
    // NVRTC (12.9+) keeps its own cache of compiled programs (~/.nv/ComputeCache) and returns
    // an empty log when it serves one from there: seen on the GPU machine, where 81 of 216
    // reports were missing after the GPU tests had compiled the same programs, and none with
    // CUDA_CACHE_DISABLE=1. This test wants ptxas to run, so it turns that cache off.
    // Set before NVRTC is loaded, and before any thread exists.
    if std::env::var_os("CUDA_CACHE_DISABLE").is_none() {
        std::env::set_var("CUDA_CACHE_DISABLE", "1");
    }
    let compiler = match Compiler::new() {
        Ok(compiler) => compiler,
        Err(e) if running_in_ci() => panic!(
            "CI is set but NVRTC cannot run: {e}\n\
             Install the wheels with .ci/install-cuda-wheels.sh and export what it prints."
        ),
        Err(e) => {
            eprintln!("SKIPPED: NVRTC is not available here ({e})");
            return;
        }
    };
    let (major, minor) = compiler.nvrtc_version();
    println!(
        "NVRTC {major}.{minor} from {}, headers from {}",
        compiler
            .nvrtc_path()
            .map(|p| p.display().to_string())
            .unwrap_or_else(|| "the loader's path".into()),
        compiler.include_dir().display()
    );

    // VITRT_COMPILE_FILTER=<text> compiles only the instantiations whose name contains it (for
    // a quick check while writing a kernel; CI compiles everything).
    let filter = std::env::var("VITRT_COMPILE_FILTER").unwrap_or_default();
    let registry = all_instantiations();
    let jobs: Vec<(Instantiation, Arch)> = registry
        .iter()
        .filter(|inst| inst.name.contains(&filter))
        .flat_map(|inst| {
            TARGETS
                .iter()
                .filter_map(|&cc| inst.arch.target_for(cc))
                .map(|arch| (inst.clone(), arch))
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(!jobs.is_empty(), "the registry lists no instantiation");

    // NVRTC is thread-safe across programs: one worker per core.
    let next = AtomicUsize::new(0);
    let outcomes = Mutex::new(Vec::new());
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get());
    let started = Instant::now();
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some((inst, arch)) = jobs.get(i) else {
                    break;
                };
                let outcome = compile_one(&compiler, inst, *arch);
                outcomes.lock().unwrap().push(outcome);
            });
        }
    });
    let mut outcomes: Vec<Outcome> = outcomes.into_inner().unwrap();
    // Should NVRTC's cache still answer (a CUDA_CACHE_DISABLE=0 in the environment), a missing
    // report is shown as "-"; a report missing everywhere means the verbose option broke.
    let unreported = outcomes
        .iter()
        .filter(|o| matches!(o.result, Ok(None)))
        .count();
    assert!(
        unreported < outcomes.len(),
        "ptxas reported on no kernel at all: is --ptxas-options=--verbose still honoured?"
    );
    outcomes.sort_by(|a, b| (&a.name, a.arch.sm_name()).cmp(&(&b.name, b.arch.sm_name())));

    println!(
        "\n{:<44} {:>7} {:>5} {:>6} {:>6} {:>8} {:>8} {:>6}",
        "instantiation", "arch", "regs", "smem", "stack", "spill_st", "spill_ld", "ms"
    );
    let mut failures = Vec::new();
    for o in &outcomes {
        match &o.result {
            Ok(Some(r)) => println!(
                "{:<44} {:>7} {:>5} {:>6} {:>6} {:>8} {:>8} {:>6}",
                o.name,
                o.arch.sm_name(),
                r.registers,
                r.shared_bytes,
                r.stack_frame_bytes,
                r.spill_store_bytes,
                r.spill_load_bytes,
                o.millis
            ),
            Ok(None) => println!(
                "{:<44} {:>7} {:>5} {:>6} {:>6} {:>8} {:>8} {:>6}",
                o.name,
                o.arch.sm_name(),
                "-",
                "-",
                "-",
                "-",
                "-",
                o.millis
            ),
            Err(e) => failures.push(e.clone()),
        }
    }
    println!(
        "\n{} compiles ({} instantiations, targets sm_80 and sm_90) in {:.1} s on {workers} threads",
        outcomes.len(),
        registry.len(),
        started.elapsed().as_secs_f64()
    );
    if unreported > 0 {
        println!("{unreported} compiles came back without a ptxas report (shown as -)");
    }
    for o in outcomes.iter().filter(|o| !o.warnings.is_empty()) {
        println!("\n{} ({}):", o.name, o.arch.sm_name());
        for line in &o.warnings {
            println!("    {line}");
        }
    }
    // ptxas serialises a kernel's wgmmas (each waits for the previous one) when it cannot prove
    // the accumulators untouched while they run: correct, but the tensor cores idle between
    // them. A kernel that compiles that way is a regression, as much as one that does not compile.
    for o in &outcomes {
        if o.warnings.iter().any(|w| w.contains(WGMMA_SERIALIZED)) {
            failures.push(format!(
                "{} ({}): ptxas serialised its wgmmas: {}",
                o.name,
                o.arch.sm_name(),
                o.warnings.join(" | ")
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} compiles failed:\n{}",
        failures.len(),
        jobs.len(),
        failures.join("\n\n")
    );
}
