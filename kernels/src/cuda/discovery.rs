//! Finding what NVRTC needs at run time: the library itself and the CUDA headers that
//! `#include <cuda_fp16.h>` reads.
//!
//! Both may come from a CUDA toolkit (`/usr/local/cuda`, `CUDA_HOME`, `CUDA_PATH`) or from the
//! pip wheels `nvidia-cuda-nvrtc` and `nvidia-cuda-runtime`, which CUDA 13 lays out as
//! `site-packages/nvidia/cu13/{lib,include}` (CUDA 12 used `nvidia/cuda_nvrtc/lib` and
//! `nvidia/cuda_runtime/include`). Overrides: `VITRT_NVRTC_LIB` (a path to libnvrtc.so) and
//! `VITRT_CUDA_INCLUDE` (a directory holding cuda_fp16.h).

use super::error::KernelError;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The NVRTC library that was loaded, and its version.
#[derive(Clone, Debug)]
pub struct NvrtcLibrary {
    /// Where it was loaded from; `None` when the system loader found it by name.
    pub path: Option<PathBuf>,
    pub version: (u32, u32),
}

/// Makes libnvrtc loadable by cudarc (which opens it by name), once per process.
///
/// cudarc looks the library up by its file name only, so a copy outside the loader's search
/// path (a pip wheel) is opened here first by its full path and kept open: the dynamic loader
/// then hands that same object back when cudarc asks for `libnvrtc.so.13` by name.
pub fn load_nvrtc() -> Result<NvrtcLibrary, KernelError> {
    static LOADED: OnceLock<Result<NvrtcLibrary, String>> = OnceLock::new();
    LOADED
        .get_or_init(find_and_load_nvrtc)
        .clone()
        .map_err(KernelError::NvrtcNotFound)
}

fn find_and_load_nvrtc() -> Result<NvrtcLibrary, String> {
    let mut path = None;
    if let Some(explicit) = std::env::var_os("VITRT_NVRTC_LIB") {
        let explicit = PathBuf::from(explicit);
        keep_loaded_with_builtins(&explicit)
            .map_err(|e| format!("VITRT_NVRTC_LIB={}: {e}", explicit.display()))?;
        path = Some(explicit);
    } else if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        let candidates = nvrtc_candidates();
        let found = candidates.iter().find(|p| p.is_file()).ok_or_else(|| {
            format!(
                "libnvrtc is not on the loader's path (LD_LIBRARY_PATH, ldconfig) and no pip wheel \
                 nvidia-cuda-nvrtc was found; looked in: {}. Install the CUDA toolkit, or \
                 `pip install nvidia-cuda-nvrtc==13.0.*`, or set VITRT_NVRTC_LIB",
                list_paths(&candidates)
            )
        })?;
        keep_loaded_with_builtins(found).map_err(|e| format!("{}: {e}", found.display()))?;
        path = Some(found.clone());
    }
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        return Err(format!(
            "{} was opened, but cudarc could not then find libnvrtc by name (is its soname \
             libnvrtc.so.{{12,13}}?)",
            path.as_deref()
                .map(Path::display)
                .map(|d| d.to_string())
                .unwrap_or_default()
        ));
    }
    let (mut major, mut minor) = (0, 0);
    let status = unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut major, &mut minor) };
    if status != cudarc::nvrtc::sys::nvrtcResult::NVRTC_SUCCESS {
        return Err(format!("nvrtcVersion failed: {status:?}"));
    }
    Ok(NvrtcLibrary {
        path,
        version: (major as u32, minor as u32),
    })
}

/// Opens libnvrtc and, first, the libnvrtc-builtins beside it: libnvrtc opens its builtins by
/// name at compile time, which fails outside the loader's path unless it is already open.
fn keep_loaded_with_builtins(nvrtc: &Path) -> Result<(), String> {
    let dir = nvrtc.parent().unwrap_or(Path::new("."));
    let mut builtins: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok())
                .map(|e| e.path())
                .filter(|p| {
                    let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
                    name.starts_with("libnvrtc-builtins.so.")
                })
                .collect()
        })
        .unwrap_or_default();
    builtins.sort();
    for library in &builtins {
        keep_loaded(library).map_err(|e| format!("{}: {e}", library.display()))?;
    }
    keep_loaded(nvrtc)
}

/// Opens a shared library and never closes it.
pub(super) fn keep_loaded(path: &Path) -> Result<(), String> {
    let library = unsafe { libloading::Library::new(path) }.map_err(|e| e.to_string())?;
    std::mem::forget(library);
    Ok(())
}

fn nvrtc_candidates() -> Vec<PathBuf> {
    let mut candidates = Vec::new();
    for root in toolkit_roots() {
        for lib in ["lib64", "lib", "targets/x86_64-linux/lib"] {
            candidates.push(root.join(lib).join("libnvrtc.so.13"));
            candidates.push(root.join(lib).join("libnvrtc.so"));
        }
    }
    for site in python_site_dirs() {
        candidates.push(site.join("nvidia/cu13/lib/libnvrtc.so.13"));
        candidates.push(site.join("nvidia/cuda_nvrtc/lib/libnvrtc.so.12"));
    }
    candidates
}

/// The directory holding cuda_fp16.h and cuda_bf16.h, found once per process.
pub fn cuda_include_dir() -> Result<PathBuf, KernelError> {
    static FOUND: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    FOUND
        .get_or_init(find_include_dir)
        .clone()
        .map_err(KernelError::HeadersNotFound)
}

fn has_headers(dir: &Path) -> bool {
    dir.join("cuda_fp16.h").is_file() && dir.join("cuda_bf16.h").is_file()
}

fn find_include_dir() -> Result<PathBuf, String> {
    if let Some(explicit) = std::env::var_os("VITRT_CUDA_INCLUDE") {
        let explicit = PathBuf::from(explicit);
        return if has_headers(&explicit) {
            Ok(explicit)
        } else {
            Err(format!(
                "VITRT_CUDA_INCLUDE={} holds no cuda_fp16.h and cuda_bf16.h",
                explicit.display()
            ))
        };
    }
    let mut candidates: Vec<PathBuf> = toolkit_roots()
        .into_iter()
        .map(|r| r.join("include"))
        .collect();
    for site in python_site_dirs() {
        candidates.push(site.join("nvidia/cu13/include"));
        candidates.push(site.join("nvidia/cuda_runtime/include"));
    }
    candidates.iter().find(|d| has_headers(d)).cloned().ok_or_else(|| {
        format!(
            "looked in: {}. Install the CUDA toolkit, or `pip install nvidia-cuda-runtime==13.0.*`, \
             or set VITRT_CUDA_INCLUDE",
            list_paths(&candidates)
        )
    })
}

pub(super) fn toolkit_roots() -> Vec<PathBuf> {
    let mut roots: Vec<PathBuf> = ["CUDA_HOME", "CUDA_PATH"]
        .iter()
        .filter_map(std::env::var_os)
        .map(PathBuf::from)
        .collect();
    roots.push(PathBuf::from("/usr/local/cuda"));
    roots
}

/// Where pip may have put the nvidia wheels: PYTHONPATH entries, the active virtual or conda
/// environment, the user site, the system site directories and pyenv's interpreters.
pub(super) fn python_site_dirs() -> Vec<PathBuf> {
    let mut sites: Vec<PathBuf> = Vec::new();
    if let Some(paths) = std::env::var_os("PYTHONPATH") {
        sites.extend(std::env::split_paths(&paths));
    }
    let mut prefixes: Vec<PathBuf> = ["VIRTUAL_ENV", "CONDA_PREFIX"]
        .iter()
        .filter_map(std::env::var_os)
        .map(PathBuf::from)
        .collect();
    if let Some(home) = std::env::var_os("HOME").map(PathBuf::from) {
        prefixes.push(home.join(".local"));
        prefixes.extend(subdirs(&home.join(".pyenv/versions")));
    }
    prefixes.extend(["/usr/local", "/usr"].map(PathBuf::from));
    for prefix in prefixes {
        for lib in subdirs(&prefix.join("lib")) {
            let is_python = lib
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("python3"));
            if is_python {
                sites.push(lib.join("site-packages"));
                sites.push(lib.join("dist-packages"));
            }
        }
    }
    sites.push(PathBuf::from("/usr/lib/python3/dist-packages"));
    sites
}

fn subdirs(dir: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok())
                .map(|e| e.path())
                .filter(|p| p.is_dir())
                .collect()
        })
        .unwrap_or_default();
    found.sort();
    found
}

pub(super) fn list_paths(paths: &[PathBuf]) -> String {
    paths
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}
