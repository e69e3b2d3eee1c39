//! Compiling CUDA kernel sources for the host: each batch of kernels becomes one C++
//! translation unit (every kernel in a namespace of its own, compiled against
//! `shim/cuda_shim.h`, which includes the other headers of `shim/`), built by the system C++
//! compiler into a shared library that is loaded with `dlopen`. Libraries are cached on disk
//! by a hash of their text, every shim header and the compiler command, so a second run
//! compiles nothing.

use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex, OnceLock};

use crate::gpu::plan::KernelSource;
use crate::{Error, Result};

/// The shim's headers, by file name: `cuda_shim.h` (the one a translation unit includes), its
/// parts, and the stubs of CUDA's 16-bit float headers. The entry point comes last, as
/// `shim_dir` writes them in this order and takes its presence for a complete folder.
const SHIM_HEADERS: &[(&str, &str)] = &[
    ("shim_types.h", include_str!("shim/shim_types.h")),
    ("shim_half.h", include_str!("shim/shim_half.h")),
    ("shim_math.h", include_str!("shim/shim_math.h")),
    ("shim_atomics.h", include_str!("shim/shim_atomics.h")),
    ("shim_fibers.h", include_str!("shim/shim_fibers.h")),
    ("shim_launch.h", include_str!("shim/shim_launch.h")),
    ("shim_sync.h", include_str!("shim/shim_sync.h")),
    ("shim_mma.h", include_str!("shim/shim_mma.h")),
    ("cuda_fp16.h", include_str!("shim/cuda_fp16.h")),
    ("cuda_bf16.h", include_str!("shim/cuda_bf16.h")),
    ("cuda_shim.h", include_str!("shim/cuda_shim.h")),
];

/// The flags the shim is written for.
pub(super) const FLAGS: &[&str] = &["-std=c++17", "-O1", "-fno-strict-aliasing", "-fPIC", "-shared", "-pthread", "-w"];

/// Launch dimensions as `rnn_emu::LaunchDims` (cuda_shim.h).
#[repr(C)]
pub(crate) struct LaunchDims {
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared_bytes: u32,
    pub os_threads: u32,
}

/// `rnn_emu_vN` of a compiled batch: runs one kernel (see cuda_shim.h).
pub(crate) type Entry = unsafe extern "C" fn(
    words: *const u64,
    n_words: std::ffi::c_ulong,
    buffers: *const *mut std::ffi::c_void,
    n_buffers: std::ffi::c_ulong,
    dims: *const LaunchDims,
    err: *mut std::ffi::c_char,
    err_cap: std::ffi::c_ulong,
) -> std::ffi::c_int;

/// A loaded kernel: its entry point, and the library that must outlive it.
#[derive(Clone)]
pub(crate) struct Kernel {
    pub entry: Entry,
    _library: Arc<libloading::Library>,
}

/// The kernels loaded so far, by `KernelSource::key`.
fn loaded() -> &'static Mutex<HashMap<String, Kernel>> {
    static LOADED: OnceLock<Mutex<HashMap<String, Kernel>>> = OnceLock::new();
    LOADED.get_or_init(Default::default)
}

/// The loaded kernel of `source`, compiling it alone on a miss (`precompile` compiles many
/// at once, much faster).
pub(crate) fn kernel(source: &KernelSource) -> Result<Kernel> {
    if let Some(k) = loaded().lock().unwrap_or_else(|p| p.into_inner()).get(source.key()) {
        return Ok(k.clone());
    }
    precompile(std::slice::from_ref(source), 1)?;
    loaded()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(source.key())
        .cloned()
        .ok_or_else(|| Error::Msg(format!("cuda emulator: kernel {} did not load", source.key())))
}

/// Compiles and loads every source not loaded yet, in batches, running up to `jobs`
/// compilers at once.
pub(crate) fn precompile(sources: &[KernelSource], jobs: usize) -> Result<()> {
    let mut todo: Vec<&KernelSource> = {
        let loaded = loaded().lock().unwrap_or_else(|p| p.into_inner());
        sources.iter().filter(|s| !loaded.contains_key(s.key())).collect()
    };
    todo.sort_by(|a, b| a.key().cmp(b.key()));
    todo.dedup_by(|a, b| a.key() == b.key());
    if todo.is_empty() {
        return Ok(());
    }
    // Batches of about 40 kernels: the shim costs ~0.4 s to parse, each kernel ~30 ms.
    let batches: Vec<&[&KernelSource]> = todo.chunks(todo.len().div_ceil(jobs.max(1)).clamp(1, 40)).collect();
    let results: Vec<Result<()>> = std::thread::scope(|scope| {
        let mut results = Vec::new();
        for group in batches.chunks(batches.len().div_ceil(jobs.max(1))) {
            results.push(scope.spawn(move || group.iter().try_for_each(|batch| load_batch(batch))));
        }
        results
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err(Error::Msg("compile worker panicked".into()))))
            .collect()
    });
    results.into_iter().collect()
}

/// The translation unit of a batch: kernel `i` in namespace `rnn_v{i}`, run by `rnn_emu_v{i}`.
/// Each kernel's macros are undefined after it, so the next kernel starts from the shim's,
/// as NVRTC compiles each alone (a macro left over would rename the next kernel's
/// identifiers).
fn translation_unit(batch: &[&KernelSource]) -> String {
    let mut tu = String::from("#include \"cuda_shim.h\"\n");
    for (i, source) in batch.iter().enumerate() {
        // C linkage would make the batch's kernels one function: each keeps its namespace's.
        let text = source.text().replace("extern \"C\" __global__", "__global__");
        let undefs: String = defined_macros(&text)
            .filter(|name| !SHIM_MACROS.contains(name))
            .map(|name| format!("#undef {name}\n"))
            .collect();
        tu.push_str(&format!(
            "namespace rnn_v{i} {{\n{text}\n{undefs}}}\n\
             extern \"C\" int rnn_emu_v{i}(const unsigned long long* w, unsigned long nw, void* const* b, \
             unsigned long nb, const rnn_emu::LaunchDims* d, char* e, unsigned long ec) {{\n    \
             return rnn_emu::launch(rnn_v{i}::kernel, w, nw, b, nb, d, e, ec);\n}}\n"
        ));
    }
    tu
}

/// Macros the shim defines and common.cuh defines only where they are not (`#ifndef`): kept
/// for every kernel of a batch.
const SHIM_MACROS: [&str; 1] = ["RNN_DYNAMIC_SHARED"];

/// The names of the macros a source defines (`#define NAME` or `#  define NAME(...)`).
fn defined_macros(text: &str) -> impl Iterator<Item = &str> {
    text.lines().filter_map(|line| {
        let rest = line.trim_start().strip_prefix('#')?.trim_start().strip_prefix("define")?;
        let name = rest.trim_start().split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).next()?;
        (!name.is_empty() && rest.starts_with(char::is_whitespace)).then_some(name)
    })
}

fn hash_of(value: impl Hash) -> u64 {
    let mut h = DefaultHasher::new();
    value.hash(&mut h);
    h.finish()
}

/// The C++ compiler: `$CXX`, else `g++`.
pub(super) fn compiler() -> String {
    std::env::var("CXX").ok().filter(|c| !c.trim().is_empty()).unwrap_or_else(|| "g++".to_string())
}

/// The cache folder: `$RNN_CUDA_EMU_CACHE`, else a folder in the system's temporary folder.
fn cache_dir() -> PathBuf {
    match std::env::var_os("RNN_CUDA_EMU_CACHE") {
        Some(dir) => PathBuf::from(dir),
        None => std::env::temp_dir().join("rnn-cuda-emu"),
    }
}

/// The shim's headers, written once into the cache folder (named by their hash).
fn shim_dir() -> Result<PathBuf> {
    let dir = cache_dir().join(format!("shim-{:016x}", hash_of(SHIM_HEADERS)));
    if !dir.join("cuda_shim.h").exists() {
        write_shim(&dir)?;
    }
    Ok(dir)
}

/// Writes every header of the shim into `dir` (created if needed), the entry point last.
/// Each file is written atomically, so concurrent writers (other test processes) are safe.
pub(super) fn write_shim(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| io_error(dir, e))?;
    for (name, text) in SHIM_HEADERS {
        write_atomically(&dir.join(name), text.as_bytes())?;
    }
    Ok(())
}

fn io_error(path: &Path, e: std::io::Error) -> Error {
    Error::Msg(format!("cuda emulator: {}: {e}", path.display()))
}

fn write_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = path.with_extension(format!("tmp{}-{:?}", std::process::id(), std::thread::current().id()));
    std::fs::write(&tmp, bytes).map_err(|e| io_error(&tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| io_error(path, e))
}

/// Compiles (or finds in the cache) and loads one batch, registering its kernels.
fn load_batch(batch: &[&KernelSource]) -> Result<()> {
    let tu = translation_unit(batch);
    let cxx = compiler();
    // Every header's name and text are part of the key: editing any of them rebuilds.
    let lib = cache_dir().join(format!("batch-{:016x}.so", hash_of((&tu, SHIM_HEADERS, &cxx, FLAGS))));
    if !lib.exists() {
        build_library(&tu, &cxx, &lib)?;
    }
    // SAFETY: the library was built from our translation unit; loading runs only the shim's
    // static initializers.
    let library = unsafe { libloading::Library::new(&lib) }.map_err(|e| Error::Msg(format!("cuda emulator: {e}")))?;
    let library = Arc::new(library);
    let mut loaded = loaded().lock().unwrap_or_else(|p| p.into_inner());
    for (i, source) in batch.iter().enumerate() {
        // SAFETY: `rnn_emu_v{i}` is defined by the translation unit with the `Entry` signature.
        let symbol = unsafe { library.get::<Entry>(format!("rnn_emu_v{i}\0").as_bytes()) }
            .map_err(|e| Error::Msg(format!("cuda emulator: {e}")))?;
        let entry: Entry = *symbol;
        loaded.insert(source.key().to_string(), Kernel { entry, _library: library.clone() });
    }
    Ok(())
}

/// Compiles the translation unit `tu` into the shared library `lib`. Other processes may
/// build the same library at once: each writes files of its own and renames the result.
fn build_library(tu: &str, cxx: &str, lib: &Path) -> Result<()> {
    let include = shim_dir()?;
    let cpp = lib.with_extension(format!("{}.cpp", std::process::id()));
    write_atomically(&cpp, tu.as_bytes())?;
    let out = lib.with_extension(format!("{}.so", std::process::id()));
    let mut command = Command::new(cxx);
    command.args(FLAGS).arg("-I").arg(&include).arg("-o").arg(&out).arg(&cpp);
    let status = command.output().map_err(|e| {
        Error::DeviceNotAvailable(format!("cuda emulator: cannot run the C++ compiler `{cxx}` ({e}); set CXX"))
    })?;
    if !status.status.success() {
        let log = String::from_utf8_lossy(&status.stderr);
        let first: String = log.lines().take(40).collect::<Vec<_>>().join("\n");
        let kept = cpp.display();
        return Err(Error::Msg(format!("cuda emulator: {cxx} failed to compile (kept at {kept}):\n{first}")));
    }
    let _ = std::fs::remove_file(&cpp);
    std::fs::rename(&out, lib).map_err(|e| io_error(lib, e))
}

#[cfg(test)]
mod tests {
    use super::{defined_macros, translation_unit};
    use crate::gpu::plan::KernelSource;

    #[test]
    fn the_macros_a_kernel_defines_are_found_for_undefining() {
        let text = "#define MT (ROWS / 16)\n  #  define LDS(x) x\n#if MT\n#undef OLD\n#defined_not\nint MT2;\n";
        assert_eq!(defined_macros(text).collect::<Vec<_>>(), ["MT", "LDS"]);
    }

    #[test]
    fn a_batch_keeps_the_shims_own_macros_and_undefines_the_kernels() {
        let source = |rows: &str| {
            let subs = [("rows", rows)];
            let template = "#define ROWS {{rows}}\nextern \"C\" __global__ void kernel() {}\n";
            KernelSource::new(&crate::emu::target(), template, &subs, false)
        };
        let (a, b) = (source("1"), source("2"));
        let tu = translation_unit(&[&a, &b]);
        assert_eq!(tu.matches("#undef ROWS").count(), 2, "{tu}");
        assert!(a.text().contains("#define RNN_DYNAMIC_SHARED"), "common.cuh defines it");
        assert!(!tu.contains("#undef RNN_DYNAMIC_SHARED"), "{tu}");
    }
}
