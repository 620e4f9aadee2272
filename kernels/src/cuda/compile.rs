//! NVRTC: one instantiation in, one cubin for one arch out, with ptxas's resource report.
//!
//! Programs compile straight to SASS (`--gpu-architecture=sm_XY`), so loading a module costs
//! no JIT, and the cubin is what the disk cache keeps. `--ptxas-options=--verbose` makes ptxas
//! write registers, shared memory, stack frame and spills for every entry into the program
//! log, which is how the CPU-only CI reports resources without a GPU.
//!
//! No `--use_fast_math`: the f32 paths must match their CPU twins to 1e-4, and kernels that
//! want a fast intrinsic (`__expf`) say so in their source.

use super::discovery::{cuda_include_dir, load_nvrtc, NvrtcLibrary};
use super::error::{invalid, KernelError};
use super::registry::{Arch, Instantiation, COMMON_HEADER, COMMON_HEADER_NAME};
use cudarc::nvrtc::sys::{self as nvrtc, nvrtcProgram, nvrtcResult};
use std::ffi::{c_char, CString};
use std::path::{Path, PathBuf};

/// NVRTC with the headers it needs.
#[derive(Clone, Debug)]
pub struct Compiler {
    nvrtc: NvrtcLibrary,
    include_dir: PathBuf,
}

/// A compiled instantiation.
#[derive(Clone, Debug)]
pub struct CompiledKernel {
    pub cubin: Vec<u8>,
    /// NVRTC's program log: warnings and ptxas's resource report.
    pub log: String,
}

/// What ptxas reports for one entry function.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KernelResources {
    pub function: String,
    pub registers: u32,
    /// Static shared memory, bytes.
    pub shared_bytes: u32,
    pub stack_frame_bytes: u32,
    pub spill_store_bytes: u32,
    pub spill_load_bytes: u32,
}

impl Compiler {
    /// Finds NVRTC and the CUDA headers (see `discovery`).
    pub fn new() -> Result<Compiler, KernelError> {
        let nvrtc = load_nvrtc()?;
        let include_dir = cuda_include_dir()?;
        Ok(Compiler { nvrtc, include_dir })
    }

    pub fn nvrtc_version(&self) -> (u32, u32) {
        self.nvrtc.version
    }

    /// Where libnvrtc was loaded from, when it was not found by the system loader.
    pub fn nvrtc_path(&self) -> Option<&Path> {
        self.nvrtc.path.as_deref()
    }

    pub fn include_dir(&self) -> &Path {
        &self.include_dir
    }

    /// The NVRTC options for one target. Part of the cache key.
    pub fn options(&self, arch: Arch) -> Vec<String> {
        vec![
            format!("--gpu-architecture={}", arch.sm_name()),
            "-std=c++17".into(),
            format!("--include-path={}", self.include_dir.display()),
            "--generate-line-info".into(),
            "--ptxas-options=--verbose".into(),
        ]
    }

    /// A key naming exactly what `compile` would produce: the program text, the headers,
    /// the options (arch included) and the NVRTC version.
    pub fn cache_key(&self, inst: &Instantiation, arch: Arch) -> String {
        let (major, minor) = self.nvrtc.version;
        let mut material = inst.program_source();
        material.push('\0');
        material.push_str(COMMON_HEADER);
        for (name, text) in inst.headers {
            material.push('\0');
            material.push_str(name);
            material.push('\0');
            material.push_str(text);
        }
        for option in self.options(arch) {
            material.push('\0');
            // The include path names where the headers are, not what they say: a different
            // install of the same NVRTC version yields the same code.
            if !option.starts_with("--include-path=") {
                material.push_str(&option);
            }
        }
        material.push_str(&format!("\0nvrtc {major}.{minor}"));
        let bytes = material.as_bytes();
        format!(
            "{:016x}{:016x}",
            fnv1a64(bytes, FNV_OFFSET),
            fnv1a64(bytes, FNV_OFFSET_ALT)
        )
    }

    /// Compiles one instantiation to a cubin for `arch`.
    pub fn compile(&self, inst: &Instantiation, arch: Arch) -> Result<CompiledKernel, KernelError> {
        let nul = |what: &str| invalid!("{what} of kernel {} contains a NUL byte", inst.name);
        let source = CString::new(inst.program_source()).map_err(|_| nul("source"))?;
        let file_name = CString::new(format!("{}.cu", inst.name)).map_err(|_| nul("name"))?;
        let mut header_texts = vec![CString::new(COMMON_HEADER).map_err(|_| nul("common header"))?];
        let mut header_names =
            vec![CString::new(COMMON_HEADER_NAME).map_err(|_| nul("header name"))?];
        for (name, text) in inst.headers {
            header_texts.push(CString::new(*text).map_err(|_| nul("a header"))?);
            header_names.push(CString::new(*name).map_err(|_| nul("a header name"))?);
        }
        let options: Vec<CString> = self
            .options(arch)
            .into_iter()
            .map(CString::new)
            .collect::<Result<_, _>>()
            .map_err(|_| nul("options"))?;
        let option_ptrs: Vec<*const c_char> = options.iter().map(|o| o.as_ptr()).collect();
        let headers: Vec<*const c_char> = header_texts.iter().map(|h| h.as_ptr()).collect();
        let header_names: Vec<*const c_char> = header_names.iter().map(|h| h.as_ptr()).collect();

        let mut raw: nvrtcProgram = std::ptr::null_mut();
        let created = unsafe {
            nvrtc::nvrtcCreateProgram(
                &mut raw,
                source.as_ptr(),
                file_name.as_ptr(),
                headers.len() as i32,
                headers.as_ptr(),
                header_names.as_ptr(),
            )
        };
        check(created, "nvrtcCreateProgram")?;
        let program = Program(raw);

        let compiled = unsafe {
            nvrtc::nvrtcCompileProgram(program.0, option_ptrs.len() as i32, option_ptrs.as_ptr())
        };
        let log = program.log()?;
        if compiled != nvrtcResult::NVRTC_SUCCESS {
            return Err(KernelError::Compile {
                kernel: format!("{} for {}", inst.name, arch.sm_name()),
                log: format!("{compiled:?}\n{log}"),
            });
        }

        let mut size = 0usize;
        check(
            unsafe { nvrtc::nvrtcGetCUBINSize(program.0, &mut size) },
            "nvrtcGetCUBINSize",
        )?;
        let mut cubin = vec![0u8; size];
        check(
            unsafe { nvrtc::nvrtcGetCUBIN(program.0, cubin.as_mut_ptr().cast()) },
            "nvrtcGetCUBIN",
        )?;
        Ok(CompiledKernel { cubin, log })
    }
}

impl CompiledKernel {
    /// ptxas's report, one entry per entry function in the program.
    pub fn resources(&self) -> Vec<KernelResources> {
        parse_ptxas_report(&self.log)
    }
}

/// Owns an nvrtcProgram so every path out of `compile` destroys it.
struct Program(nvrtcProgram);

impl Program {
    fn log(&self) -> Result<String, KernelError> {
        let mut size = 0usize;
        check(
            unsafe { nvrtc::nvrtcGetProgramLogSize(self.0, &mut size) },
            "nvrtcGetProgramLogSize",
        )?;
        let mut log = vec![0u8; size.max(1)];
        check(
            unsafe { nvrtc::nvrtcGetProgramLog(self.0, log.as_mut_ptr().cast()) },
            "nvrtcGetProgramLog",
        )?;
        let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
        Ok(String::from_utf8_lossy(&log[..end]).into_owned())
    }
}

impl Drop for Program {
    fn drop(&mut self) {
        // A failure here leaks one program; there is nothing better to do with it.
        let _ = unsafe { nvrtc::nvrtcDestroyProgram(&mut self.0) };
    }
}

fn check(status: nvrtcResult, call: &str) -> Result<(), KernelError> {
    if status == nvrtcResult::NVRTC_SUCCESS {
        Ok(())
    } else {
        Err(KernelError::Cuda(format!("{call} failed: {status:?}")))
    }
}

/// Reads lines like
/// ```text
/// ptxas info    : Compiling entry function 'layernorm_f16_v8' for 'sm_90'
/// ptxas info    : Function properties for layernorm_f16_v8
///     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
/// ptxas info    : Used 30 registers, used 1 barriers, 128 bytes smem, 400 bytes cmem[0]
/// ```
pub fn parse_ptxas_report(log: &str) -> Vec<KernelResources> {
    fn select(name: &str, found: &mut Vec<KernelResources>) -> usize {
        match found.iter().position(|r| r.function == name) {
            Some(i) => i,
            None => {
                found.push(KernelResources {
                    function: name.to_string(),
                    ..Default::default()
                });
                found.len() - 1
            }
        }
    }
    let mut found: Vec<KernelResources> = Vec::new();
    let mut current: Option<usize> = None;
    for line in log.lines() {
        let line = line.trim();
        if let Some(rest) = line.split("Compiling entry function '").nth(1) {
            let name = rest.split('\'').next().unwrap_or_default();
            current = Some(select(name, &mut found));
        } else if let Some(rest) = line.split("Function properties for ").nth(1) {
            current = Some(select(rest.trim(), &mut found));
        } else if let Some(i) = current {
            let entry = &mut found[i];
            for part in line.trim_start_matches("ptxas info    :").split(',') {
                let part = part.trim();
                let number = || {
                    part.split_whitespace()
                        .find_map(|w| w.parse::<u32>().ok())
                        .unwrap_or(0)
                };
                if part.ends_with("bytes stack frame") {
                    entry.stack_frame_bytes = number();
                } else if part.ends_with("bytes spill stores") {
                    entry.spill_store_bytes = number();
                } else if part.ends_with("bytes spill loads") {
                    entry.spill_load_bytes = number();
                } else if part.starts_with("Used ") && part.ends_with(" registers") {
                    entry.registers = number();
                } else if part.ends_with("bytes smem") {
                    entry.shared_bytes = number();
                }
            }
        }
    }
    found
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
/// A second, independent starting point: two 64-bit FNV-1a hashes make a 128-bit key.
const FNV_OFFSET_ALT: u64 = 0x6c62_272e_07bb_0142;

pub(crate) fn fnv1a64(bytes: &[u8], offset: u64) -> u64 {
    bytes.iter().fold(offset, |hash, &b| {
        (hash ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

pub(crate) fn fnv_checksum(bytes: &[u8]) -> u64 {
    fnv1a64(bytes, FNV_OFFSET)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ptxas_report_is_read_per_function() {
        let log = "ptxas info    : 0 bytes gmem\n\
            ptxas info    : Compiling entry function 'add_f16_v8' for 'sm_90'\n\
            ptxas info    : Function properties for add_f16_v8\n\
            \x20   8 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads\n\
            ptxas info    : Used 30 registers, used 1 barriers, 128 bytes smem, 400 bytes cmem[0]\n\
            ptxas info    : Compiling entry function 'add_f32_v1' for 'sm_90'\n\
            ptxas info    : Function properties for add_f32_v1\n\
            \x20   0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n\
            ptxas info    : Used 12 registers, used 0 barriers, 384 bytes cmem[0]\n";
        let report = parse_ptxas_report(log);
        assert_eq!(
            report,
            vec![
                KernelResources {
                    function: "add_f16_v8".into(),
                    registers: 30,
                    shared_bytes: 128,
                    stack_frame_bytes: 8,
                    spill_store_bytes: 4,
                    spill_load_bytes: 12,
                },
                KernelResources {
                    function: "add_f32_v1".into(),
                    registers: 12,
                    ..Default::default()
                },
            ]
        );
    }

    #[test]
    fn fnv_matches_its_reference_values() {
        // The FNV-1a 64 test vectors published with the algorithm.
        assert_eq!(fnv1a64(b"", FNV_OFFSET), 0xcbf29ce484222325);
        assert_eq!(fnv1a64(b"a", FNV_OFFSET), 0xaf63dc4c8601ec8c);
        assert_eq!(fnv1a64(b"foobar", FNV_OFFSET), 0x85944171f73967e8);
    }
}
