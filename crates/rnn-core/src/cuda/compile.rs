//! NVRTC compilation of kernel sources to PTX for one GPU architecture, cached in memory and
//! on disk. The disk cache (`RNN_CUDA_CACHE_PATH`, default `~/.cache/rnn/cuda`) is keyed by a
//! hash of the source, the architecture and the NVRTC version; each file starts with a header
//! repeating that key, so a corrupt, truncated or foreign file is recompiled, never trusted.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};

use super::libs;
use crate::{Error, Result};

/// The NVRTC version (major, minor).
pub fn nvrtc_version() -> Result<(i32, i32)> {
    libs::nvrtc()?;
    let (mut major, mut minor) = (0, 0);
    // SAFETY: nvrtcVersion writes two ints through valid pointers.
    let status = libs::guarded("nvrtcVersion", || unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut major, &mut minor) })?;
    if status != cudarc::nvrtc::sys::nvrtcResult::NVRTC_SUCCESS {
        return Err(Error::Msg(format!("cuda: nvrtcVersion failed: {status:?}")));
    }
    Ok((major, minor))
}

/// Folders searched for `cuda_fp16.h` / `cuda_bf16.h`: `RNN_CUDA_INCLUDE_PATH`, `$CUDA_HOME`,
/// `$CUDA_PATH`, /usr/local/cuda.
fn include_paths() -> Vec<String> {
    let mut dirs: Vec<PathBuf> = std::env::var_os("RNN_CUDA_INCLUDE_PATH").map(PathBuf::from).into_iter().collect();
    for var in ["CUDA_HOME", "CUDA_PATH"] {
        dirs.extend(std::env::var_os(var).map(|p| PathBuf::from(p).join("include")));
    }
    dirs.push(PathBuf::from("/usr/local/cuda/include"));
    dirs.into_iter().filter(|d| d.join("cuda_fp16.h").exists()).map(|d| d.display().to_string()).collect()
}

/// Compiles `source` to PTX for `arch` (e.g. `sm_90`), with no cache.
pub fn compile_ptx_uncached(source: &str, arch: &str) -> Result<String> {
    libs::nvrtc()?;
    let mut options = vec![format!("--gpu-architecture={arch}"), "--std=c++17".to_string()];
    options.extend(include_paths().into_iter().map(|p| format!("--include-path={p}")));
    let opts = cudarc::nvrtc::CompileOptions { options, ..Default::default() };
    let ptx = libs::guarded("NVRTC", || cudarc::nvrtc::compile_ptx_with_opts(source, opts))?
        .map_err(|e| Error::Msg(format!("cuda: kernel failed to compile for {arch}: {e}")))?;
    Ok(ptx.to_src())
}

fn cache_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("RNN_CUDA_CACHE_PATH") {
        return Some(PathBuf::from(dir));
    }
    std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/rnn/cuda"))
}

/// The cache key of one compilation.
fn cache_key(source: &str, arch: &str, version: (i32, i32)) -> String {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (source, arch, version).hash(&mut h);
    format!("{:016x}-{arch}-nvrtc{}.{}", h.finish(), version.0, version.1)
}

/// PTX of `source` for `arch`: from memory, else from `disk_cached_ptx`.
pub fn compile_ptx(source: &str, arch: &str) -> Result<String> {
    static MEMORY: OnceLock<Mutex<HashMap<(String, String), String>>> = OnceLock::new();
    let memory = MEMORY.get_or_init(Default::default);
    let key = (source.to_string(), arch.to_string());
    if let Some(ptx) = memory.lock().unwrap_or_else(|p| p.into_inner()).get(&key) {
        return Ok(ptx.clone());
    }
    let ptx = disk_cached_ptx(source, arch)?;
    memory.lock().unwrap_or_else(|p| p.into_inner()).insert(key, ptx.clone());
    Ok(ptx)
}

/// PTX of `source` for `arch` from the disk cache when its file is intact and for this
/// source, architecture and NVRTC version; else compiled and written to the cache (a cache
/// that cannot be written is skipped).
pub fn disk_cached_ptx(source: &str, arch: &str) -> Result<String> {
    let key = cache_key(source, arch, nvrtc_version()?);
    let file = cache_dir().map(|d| d.join(format!("{key}.ptx")));
    let cached = file.as_ref().and_then(|f| std::fs::read_to_string(f).ok()).and_then(|text| read_entry(&text, &key));
    if let Some(ptx) = cached {
        return Ok(ptx);
    }
    let ptx = compile_ptx_uncached(source, arch)?;
    if let Some(f) = &file {
        write_atomically(f, &format!("{}{ptx}", header(&key, &ptx)));
    }
    Ok(ptx)
}

/// The text of a valid cache file holding `ptx` for `source` and `arch` (for tests and tools).
pub fn cache_entry(source: &str, arch: &str, ptx: &str) -> Result<String> {
    let key = cache_key(source, arch, nvrtc_version()?);
    Ok(format!("{}{ptx}", header(&key, ptx)))
}

fn content_hash(text: &str) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    text.hash(&mut h);
    h.finish()
}

/// The first line of a cache file: its key and a hash of the PTX after it.
fn header(key: &str, ptx: &str) -> String {
    format!("// rnn ptx cache {key} {:016x}\n", content_hash(ptx))
}

/// The PTX of a cache file whose header names `key` and whose content matches its hash.
fn read_entry(text: &str, key: &str) -> Option<String> {
    let (first, ptx) = text.split_once('\n')?;
    (format!("{first}\n") == header(key, ptx)).then(|| ptx.to_string())
}

/// Writes through a temporary file and a rename, so a crash never leaves half a file under
/// the final name. Failures are ignored: the cache is an optimization.
fn write_atomically(path: &std::path::Path, text: &str) {
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let ok = path.parent().is_some_and(|d| std::fs::create_dir_all(d).is_ok()) && std::fs::write(&tmp, text).is_ok();
    if !ok || std::fs::rename(&tmp, path).is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
}

/// Where `compile_ptx` keeps the PTX of `source` for `arch` (for tests and tools).
pub fn cache_file(source: &str, arch: &str) -> Result<Option<PathBuf>> {
    let key = cache_key(source, arch, nvrtc_version()?);
    Ok(cache_dir().map(|d| d.join(format!("{key}.ptx"))))
}
