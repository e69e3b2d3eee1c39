//! NVRTC compilation of kernel sources to CUBIN, the machine code of one real GPU
//! architecture (`sm_90`), cached in memory and on disk.
//!
//! CUBIN, not PTX: the driver JIT-compiles PTX and refuses PTX made by an NVRTC newer than
//! itself (`CUDA_ERROR_UNSUPPORTED_PTX_VERSION`), and CI and `pip` install the newest NVRTC of
//! a major version while a machine's driver may be older. A CUBIN for the device's own
//! architecture needs no JIT, so the driver only has to understand the ELF it is given.
//!
//! The disk cache (`RNN_CUDA_CACHE_PATH`, default `~/.cache/rnn/cuda`) is keyed by a hash of
//! the source, the architecture, the NVRTC version and the driver version (each also in the
//! file name). A file is one header line (`rnn-cubin-cache-v1 <key> <length> <hash>`) and
//! the CUBIN's bytes: a file that is corrupt, truncated, made for another key or not an ELF
//! image is recompiled, never trusted.
//!
//! f16 / bf16 kernels include `cuda_fp16.h` / `cuda_bf16.h`, which NVRTC does not carry: the
//! folders in [`header_candidates`] are searched for headers of NVRTC's own CUDA major
//! version (CUDA 13's need their `cccl` subfolder too). Kernels on other dtypes include no
//! header and compile with none found.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

use cudarc::nvrtc::{result as nvrtc_result, sys as nvrtc_sys};

use super::libs;
use crate::{Error, Result};

/// The NVRTC version (major, minor).
pub fn nvrtc_version() -> Result<(i32, i32)> {
    libs::nvrtc()?;
    let (mut major, mut minor) = (0, 0);
    // SAFETY: nvrtcVersion writes two ints through valid pointers.
    let status = libs::guarded("nvrtcVersion", || unsafe { nvrtc_sys::nvrtcVersion(&mut major, &mut minor) })?;
    if status != nvrtc_sys::nvrtcResult::NVRTC_SUCCESS {
        return Err(Error::Msg(format!("cuda: nvrtcVersion failed: {status:?}")));
    }
    Ok((major, minor))
}

/// The CUDA version the driver supports, as the driver reports it (`13000` for CUDA 13.0);
/// `None` without a driver.
pub fn driver_version() -> Option<i32> {
    static VERSION: OnceLock<Option<i32>> = OnceLock::new();
    *VERSION.get_or_init(|| {
        libs::driver().ok()?;
        let mut version = 0;
        // SAFETY: cuDriverGetVersion writes one int through a valid pointer; it needs no cuInit.
        let status =
            libs::guarded("cuDriverGetVersion", || unsafe { cudarc::driver::sys::cuDriverGetVersion(&mut version) })
                .ok()?;
        (status == cudarc::driver::sys::CUresult::CUDA_SUCCESS && version > 0).then_some(version)
    })
}

/// A CUDA version number as the driver and the headers write it (`13050`) in words (`13.5`).
pub(crate) fn version_text(version: i32) -> String {
    format!("{}.{}", version / 1000, version % 1000 / 10)
}

// ---------------------------------------------------------------------------------------
// Header discovery

/// The CUDA headers found for NVRTC: what is passed to it, and what was skipped and why.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Headers {
    /// The `--include-path` folders: the first folder with `cuda_fp16.h` of NVRTC's CUDA
    /// major version, then its `cccl` subfolder when it has one.
    pub include: Vec<PathBuf>,
    /// Folders with `cuda_fp16.h` of another CUDA major version, with that version.
    pub skipped: Vec<(PathBuf, (i32, i32))>,
    /// Every folder looked at, in order.
    pub searched: Vec<PathBuf>,
}

/// The folders that may hold the CUDA headers, in the order they are tried:
/// `RNN_CUDA_INCLUDE_PATH` (one folder or a list), `$CUDA_HOME` and `$CUDA_PATH` (their
/// `include` and `targets/<arch>-linux/include`), /usr/local/cuda likewise, the `include`
/// folder beside the loaded libnvrtc (the pip wheels' `nvidia/cu13/{lib,include}`), and
/// /usr/include (Debian's and Ubuntu's toolkit packages).
pub(crate) fn header_candidates() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> =
        std::env::var_os("RNN_CUDA_INCLUDE_PATH").map(|v| std::env::split_paths(&v).collect()).unwrap_or_default();
    let target = if cfg!(target_arch = "aarch64") { "sbsa-linux" } else { "x86_64-linux" };
    let roots = ["CUDA_HOME", "CUDA_PATH"].into_iter().filter_map(std::env::var_os).map(PathBuf::from);
    for root in roots.chain([PathBuf::from("/usr/local/cuda")]) {
        dirs.push(root.join("include"));
        dirs.push(root.join("targets").join(target).join("include"));
    }
    if let Some(lib_dir) = libs::nvrtc_library_path().as_deref().and_then(Path::parent) {
        dirs.push(lib_dir.join("../include"));
    }
    dirs.push(PathBuf::from("/usr/include"));
    dirs
}

/// The CUDA version of the headers in `dir` (major, minor): `CUDA_VERSION` from cuda.h, else
/// `CUDART_VERSION` from cuda_runtime_api.h; `None` when neither says.
pub(crate) fn headers_version(dir: &Path) -> Option<(i32, i32)> {
    let define = |file: &str, name: &str| {
        let text = std::fs::read_to_string(dir.join(file)).ok()?;
        text.lines().find_map(|line| {
            let mut words = line.split_whitespace();
            (words.next() == Some("#define") && words.next() == Some(name))
                .then(|| words.next()?.parse::<i32>().ok())
                .flatten()
        })
    };
    let version = define("cuda.h", "CUDA_VERSION").or_else(|| define("cuda_runtime_api.h", "CUDART_VERSION"))?;
    Some((version / 1000, version % 1000 / 10))
}

/// The headers among `candidates` that NVRTC of major version `nvrtc_major` can use (see
/// [`Headers`]). A folder whose version cannot be read is used: nothing says it is wrong.
pub(crate) fn find_headers(candidates: &[PathBuf], nvrtc_major: i32) -> Headers {
    let mut found = Headers::default();
    for dir in candidates {
        if found.searched.contains(dir) {
            continue;
        }
        found.searched.push(dir.clone());
        if !found.include.is_empty() || !dir.join("cuda_fp16.h").is_file() {
            continue;
        }
        match headers_version(dir) {
            Some(version) if version.0 != nvrtc_major => found.skipped.push((dir.clone(), version)),
            _ => {
                found.include.push(dir.clone());
                let cccl = dir.join("cccl");
                if cccl.is_dir() {
                    found.include.push(cccl);
                }
            }
        }
    }
    found
}

/// What to add to a failed compile's log when it could not find the CUDA headers.
fn header_hint(log: &str, headers: &Headers, nvrtc: (i32, i32)) -> String {
    let missing = log.contains("cuda_fp16.h")
        || log.contains("cuda_bf16.h")
        || log.contains("nv/target")
        || log.contains("mma.h");
    if !missing {
        return String::new();
    }
    let (major, minor) = nvrtc;
    let install = format!(
        "install the CUDA {major} headers (the CUDA {major} toolkit, or `pip install \"nvidia-cuda-runtime>={major},<{0}\" \"nvidia-cuda-crt>={major},<{0}\"`) \
         or set RNN_CUDA_INCLUDE_PATH to their folder",
        major + 1
    );
    if !headers.include.is_empty() {
        let used: Vec<String> = headers.include.iter().map(|d| d.display().to_string()).collect();
        return format!(
            "\nf16/bf16 kernels need the CUDA headers; those used ({}) are incomplete: {install}",
            used.join(", ")
        );
    }
    if !headers.skipped.is_empty() {
        let skipped: Vec<String> =
            headers.skipped.iter().map(|(d, (a, b))| format!("CUDA {a}.{b} in {}", d.display())).collect();
        return format!(
            "\nf16/bf16 kernels need CUDA headers of NVRTC's version: NVRTC is {major}.{minor}, but only headers of \
             another CUDA version were found ({}), which NVRTC {major}.{minor} cannot use: {install}",
            skipped.join(", ")
        );
    }
    let searched: Vec<String> = headers.searched.iter().map(|d| d.display().to_string()).collect();
    format!(
        "\nf16/bf16 kernels need the CUDA headers (cuda_fp16.h), found in none of: {}; {install}",
        searched.join(", ")
    )
}

// ---------------------------------------------------------------------------------------
// Compilation

/// Compiles `source` to CUBIN for the real architecture `arch` (e.g. `sm_90`), with no cache.
pub fn compile_cubin_uncached(source: &str, arch: &str) -> Result<Vec<u8>> {
    let version = nvrtc_version()?;
    compile_with_headers(source, arch, &find_headers(&header_candidates(), version.0), &[])
}

/// Checks that `source` compiles to a CUBIN for `arch` as [`compile_cubin_uncached`] does,
/// with NVRTC's `--Ofast-compile=max` (NVRTC 12.8 and later): the same front end, headers and
/// assembler, about four times faster, with less optimization. For compile checks in CI;
/// the CUBIN it returns is not the one the backend would run.
pub fn compile_cubin_for_check(source: &str, arch: &str) -> Result<Vec<u8>> {
    let version = nvrtc_version()?;
    let fast = if version >= (12, 8) { &["--Ofast-compile=max"][..] } else { &[] };
    compile_with_headers(source, arch, &find_headers(&header_candidates(), version.0), fast)
}

/// Compiles `source` for `arch` as [`compile_cubin_uncached`] does, and returns with the
/// CUBIN the assembler's resource report (`ptxas --verbose`: registers, spill stores and
/// loads, shared memory per kernel), for checks of resource use without a GPU.
pub fn compile_cubin_with_report(source: &str, arch: &str) -> Result<(Vec<u8>, String)> {
    let version = nvrtc_version()?;
    let headers = find_headers(&header_candidates(), version.0);
    compile_logged(source, arch, &headers, &["--ptxas-options=--verbose"])
}

/// Whether `bytes` look like a CUBIN (an ELF image).
pub fn is_cubin(bytes: &[u8]) -> bool {
    bytes.starts_with(b"\x7fELF")
}

/// Why NVRTC gave no CUBIN.
enum Failure {
    /// The source did not compile: NVRTC's log.
    Compile(String),
    /// An NVRTC call failed.
    Call(&'static str, nvrtc_sys::nvrtcResult),
    /// NVRTC compiled but made no machine code (a virtual architecture like `compute_90`).
    NoCubin,
}

/// Compiles `source` for `arch` with the include folders of `headers` (none is fine for
/// kernels that include no CUDA header) and the `extra` NVRTC options.
pub(crate) fn compile_with_headers(source: &str, arch: &str, headers: &Headers, extra: &[&str]) -> Result<Vec<u8>> {
    compile_logged(source, arch, headers, extra).map(|(cubin, _)| cubin)
}

/// [`compile_with_headers`], with NVRTC's log of the successful compilation.
fn compile_logged(source: &str, arch: &str, headers: &Headers, extra: &[&str]) -> Result<(Vec<u8>, String)> {
    let version = nvrtc_version()?;
    // Unannotated functions (the attention kernels' generic lambdas) are device functions:
    // NVRTC 13.0 takes them for host functions and refuses them, later versions do not.
    let mut options = vec![
        format!("--gpu-architecture={arch}"),
        "--std=c++17".to_string(),
        "--device-as-default-execution-space".to_string(),
    ];
    options.extend(extra.iter().map(|o| o.to_string()));
    options.extend(headers.include.iter().map(|p| format!("--include-path={}", p.display())));
    let source = std::ffi::CString::new(source)
        .map_err(|_| Error::Msg("cuda: a kernel source must not contain a NUL byte".into()))?;
    let nvrtc = format!("NVRTC {}.{}", version.0, version.1);
    match libs::guarded("NVRTC", || nvrtc_cubin(&source, &options))? {
        Ok(cubin) => Ok(cubin),
        Err(Failure::Compile(log)) => {
            let arch_hint = if log.contains("--gpu-architecture") { arch_hint(arch, version) } else { String::new() };
            Err(Error::Msg(format!(
                "cuda: kernel failed to compile for {arch} with {nvrtc}:\n{log}{}{arch_hint}",
                header_hint(&log, headers, version)
            )))
        }
        Err(Failure::Call(call, status)) => Err(Error::Msg(format!("cuda: {call} failed for {arch}: {status:?}"))),
        Err(Failure::NoCubin) => {
            Err(Error::Msg(format!("cuda: {nvrtc} made no CUBIN for {arch}: name a real architecture such as sm_90")))
        }
    }
}

/// Why NVRTC rejected `--gpu-architecture={arch}`: the GPU is older than the oldest
/// architecture this NVRTC compiles for (sm_75 from CUDA 13 on, sm_50 in CUDA 12), or newer
/// than it knows.
fn arch_hint(arch: &str, version: (i32, i32)) -> String {
    let nvrtc = format!("NVRTC {}.{}", version.0, version.1);
    let oldest = if version.0 >= 13 { 75 } else { 50 };
    match arch.trim_start_matches("sm_").parse::<u32>() {
        Ok(n) if n < oldest => format!(
            "\n{nvrtc} cannot compile for {arch}: its oldest architecture is sm_{oldest}; put the NVRTC of \
             an older CUDA (CUDA 12 compiles for sm_50 and later) first on LD_LIBRARY_PATH"
        ),
        _ => format!("\n{nvrtc} cannot compile for {arch}: the GPU is newer than this NVRTC; install a newer one"),
    }
}

/// Destroys an NVRTC program when dropped.
struct Program(nvrtc_sys::nvrtcProgram);

impl Drop for Program {
    fn drop(&mut self) {
        // SAFETY: the program was created by nvrtcCreateProgram and is destroyed once.
        let _ = unsafe { nvrtc_result::destroy_program(self.0) };
    }
}

/// NVRTC's log of `program`'s compilation.
fn program_log(program: &Program) -> String {
    // SAFETY: `program` is a live program (destroyed only by its guard).
    let log = unsafe { nvrtc_result::get_program_log(program.0) }.unwrap_or_default();
    let bytes: Vec<u8> = log.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
    String::from_utf8_lossy(&bytes).trim_end().to_string()
}

/// The CUBIN of `source` and NVRTC's log.
fn nvrtc_cubin(source: &std::ffi::CStr, options: &[String]) -> std::result::Result<(Vec<u8>, String), Failure> {
    let program =
        Program(nvrtc_result::create_program(source, None).map_err(|e| Failure::Call("nvrtcCreateProgram", e.0))?);
    // SAFETY: `program` is a live program (destroyed only by its guard).
    if let Err(e) = unsafe { nvrtc_result::compile_program(program.0, options) } {
        let log = program_log(&program);
        return Err(if log.is_empty() { Failure::Call("nvrtcCompileProgram", e.0) } else { Failure::Compile(log) });
    }
    let mut size = 0usize;
    // SAFETY: the program compiled; nvrtcGetCUBINSize writes one size_t.
    let status = unsafe { nvrtc_sys::nvrtcGetCUBINSize(program.0, &mut size) };
    if status != nvrtc_sys::nvrtcResult::NVRTC_SUCCESS {
        return Err(Failure::Call("nvrtcGetCUBINSize", status));
    }
    if size == 0 {
        return Err(Failure::NoCubin);
    }
    let mut cubin = vec![0u8; size];
    // SAFETY: `cubin` has the size NVRTC reported.
    let status = unsafe { nvrtc_sys::nvrtcGetCUBIN(program.0, cubin.as_mut_ptr().cast()) };
    if status != nvrtc_sys::nvrtcResult::NVRTC_SUCCESS {
        return Err(Failure::Call("nvrtcGetCUBIN", status));
    }
    if !is_cubin(&cubin) {
        return Err(Failure::NoCubin);
    }
    Ok((cubin, program_log(&program)))
}

// ---------------------------------------------------------------------------------------
// Caches

fn cache_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("RNN_CUDA_CACHE_PATH") {
        return Some(PathBuf::from(dir));
    }
    std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/rnn/cuda"))
}

/// The format of the cache files, first word of their header line.
const FORMAT: &str = "rnn-cubin-cache-v1";

/// The cache key of one compilation.
fn cache_key(source: &str, arch: &str, nvrtc: (i32, i32), driver: Option<i32>) -> String {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (FORMAT, source, arch, nvrtc, driver).hash(&mut h);
    let driver = driver.map_or_else(|| "nodriver".to_string(), |d| format!("driver{d}"));
    format!("{:016x}-{arch}-nvrtc{}.{}-{driver}", h.finish(), nvrtc.0, nvrtc.1)
}

fn current_key(source: &str, arch: &str) -> Result<String> {
    Ok(cache_key(source, arch, nvrtc_version()?, driver_version()))
}

/// CUBIN of `source` for `arch`: from memory, else from [`disk_cached_cubin`].
pub fn compile_cubin(source: &str, arch: &str) -> Result<Vec<u8>> {
    /// CUBIN by (source, architecture).
    type Compiled = HashMap<(String, String), Vec<u8>>;
    static MEMORY: OnceLock<Mutex<Compiled>> = OnceLock::new();
    let memory = MEMORY.get_or_init(Default::default);
    let key = (source.to_string(), arch.to_string());
    if let Some(cubin) = memory.lock().unwrap_or_else(|p| p.into_inner()).get(&key) {
        return Ok(cubin.clone());
    }
    let cubin = disk_cached_cubin(source, arch)?;
    memory.lock().unwrap_or_else(|p| p.into_inner()).insert(key, cubin.clone());
    Ok(cubin)
}

/// CUBIN of `source` for `arch` from the disk cache when its file is intact and for this
/// source, architecture, NVRTC and driver; else compiled and written to the cache (a cache
/// that cannot be written is skipped).
pub fn disk_cached_cubin(source: &str, arch: &str) -> Result<Vec<u8>> {
    let key = current_key(source, arch)?;
    let file = cache_dir().map(|d| d.join(format!("{key}.cubin")));
    if let Some(cubin) = file.as_ref().and_then(|f| std::fs::read(f).ok()).and_then(|bytes| read_entry(&bytes, &key)) {
        return Ok(cubin);
    }
    let cubin = compile_cubin_uncached(source, arch)?;
    if let Some(f) = &file {
        write_atomically(f, &entry(&key, &cubin));
    }
    Ok(cubin)
}

/// The bytes of a valid cache file holding `cubin` for `source` and `arch` (for tests and
/// tools).
pub fn cache_entry(source: &str, arch: &str, cubin: &[u8]) -> Result<Vec<u8>> {
    Ok(entry(&current_key(source, arch)?, cubin))
}

/// Where [`compile_cubin`] keeps the CUBIN of `source` for `arch` (for tests and tools).
pub fn cache_file(source: &str, arch: &str) -> Result<Option<PathBuf>> {
    let key = current_key(source, arch)?;
    Ok(cache_dir().map(|d| d.join(format!("{key}.cubin"))))
}

fn content_hash(bytes: &[u8]) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    bytes.hash(&mut h);
    h.finish()
}

/// The header line of a cache file: the format, the key, and the length and a hash of the
/// CUBIN after it.
fn header(key: &str, cubin: &[u8]) -> String {
    format!("{FORMAT} {key} {} {:016x}\n", cubin.len(), content_hash(cubin))
}

fn entry(key: &str, cubin: &[u8]) -> Vec<u8> {
    let mut bytes = header(key, cubin).into_bytes();
    bytes.extend_from_slice(cubin);
    bytes
}

/// The CUBIN of a cache file whose header names `key` and matches what follows it.
fn read_entry(bytes: &[u8], key: &str) -> Option<Vec<u8>> {
    let end = bytes.iter().position(|&b| b == b'\n')?;
    let (head, cubin) = (&bytes[..=end], &bytes[end + 1..]);
    (is_cubin(cubin) && head == header(key, cubin).as_bytes()).then(|| cubin.to_vec())
}

/// Writes through a temporary file and a rename, so a crash never leaves half a file under
/// the final name. Failures are ignored: the cache is an optimization.
fn write_atomically(path: &Path, bytes: &[u8]) {
    static SERIAL: AtomicU64 = AtomicU64::new(0);
    let serial = SERIAL.fetch_add(1, Ordering::Relaxed);
    let tmp = path.with_extension(format!("tmp{}-{serial}", std::process::id()));
    let ok = path.parent().is_some_and(|d| std::fs::create_dir_all(d).is_ok()) && std::fs::write(&tmp, bytes).is_ok();
    if !ok || std::fs::rename(&tmp, path).is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh empty folder for one test.
    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("rnn-cuda-headers-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("scratch folder");
        dir
    }

    /// A fake CUDA include folder of CUDA `version` (`13000`), with a `cccl` folder or not.
    fn fake_headers(dir: &Path, version: i32, cccl: bool) {
        std::fs::create_dir_all(dir).expect("folder");
        std::fs::write(dir.join("cuda_fp16.h"), "// fp16\n").expect("write");
        std::fs::write(dir.join("cuda.h"), format!("#pragma once\n#define CUDA_VERSION {version}\n")).expect("write");
        if cccl {
            std::fs::create_dir_all(dir.join("cccl")).expect("cccl");
        }
    }

    /// Whether NVRTC can be used here; fails when `RNN_REQUIRE_NVRTC=1` (CI) and it cannot.
    fn nvrtc_available() -> bool {
        match nvrtc_version() {
            Ok(_) => true,
            Err(e) => {
                assert!(std::env::var("RNN_REQUIRE_NVRTC").as_deref() != Ok("1"), "NVRTC required: {e}");
                eprintln!("SKIPPED: {e}");
                false
            }
        }
    }

    /// A kernel variant of the backend with (`half`) or without `#define RNN_HALF`.
    fn variant(half: bool) -> (String, String) {
        crate::cuda::kernel_variants((8, 0))
            .into_iter()
            .find(|(_, source)| source.starts_with("#define RNN_HALF") == half)
            .expect("a variant of that kind")
    }

    #[test]
    fn header_versions_come_from_cuda_h_or_the_runtime_header() {
        let dir = scratch("version");
        assert_eq!(headers_version(&dir), None);
        std::fs::write(dir.join("cuda_runtime_api.h"), "#define CUDART_VERSION  12040\n").expect("write");
        assert_eq!(headers_version(&dir), Some((12, 4)));
        std::fs::write(dir.join("cuda.h"), "#define CUDA_VERSION_X 1\n#define CUDA_VERSION 13050\n").expect("write");
        assert_eq!(headers_version(&dir), Some((13, 5)));
        assert_eq!(version_text(13050), "13.5");
        assert_eq!(version_text(12040), "12.4");
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn headers_of_another_major_version_are_skipped_and_cccl_is_added() {
        let dir = scratch("search");
        let (empty, old, new, other) = (dir.join("empty"), dir.join("old"), dir.join("new"), dir.join("other"));
        std::fs::create_dir_all(&empty).expect("folder");
        fake_headers(&old, 12040, false);
        fake_headers(&new, 13000, true);
        fake_headers(&other, 13050, false);
        let candidates = vec![empty.clone(), old.clone(), new.clone(), other.clone(), old.clone()];
        let found = find_headers(&candidates, 13);
        assert_eq!(found.include, vec![new.clone(), new.join("cccl")]);
        assert_eq!(found.skipped, vec![(old.clone(), (12, 4))]);
        assert_eq!(found.searched, vec![empty.clone(), old.clone(), new, other.clone()]);
        // A folder whose version cannot be read is used; one without a cccl folder alone.
        std::fs::remove_file(other.join("cuda.h")).expect("remove");
        assert_eq!(find_headers(std::slice::from_ref(&other), 13).include, vec![other]);
        assert!(find_headers(&[empty], 13).include.is_empty());
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn the_search_covers_the_toolkit_layouts() {
        let candidates = header_candidates();
        for dir in ["/usr/local/cuda/include", "/usr/local/cuda/targets", "/usr/include"] {
            assert!(candidates.iter().any(|c| c.starts_with(dir)), "{dir} not searched: {candidates:?}");
        }
    }

    #[test]
    fn the_headers_beside_libnvrtc_are_searched() {
        if !nvrtc_available() {
            return;
        }
        let lib = libs::nvrtc_library_path();
        if lib.is_none() && cfg!(not(target_os = "linux")) {
            return;
        }
        let lib = lib.expect("the path of the loaded libnvrtc is known on Linux");
        assert!(lib.file_name().is_some_and(|n| n.to_string_lossy().contains("nvrtc")), "{lib:?}");
        let beside = lib.parent().expect("a folder").join("../include");
        assert!(header_candidates().contains(&beside), "{beside:?}");
    }

    #[test]
    fn a_kernel_without_half_types_compiles_with_no_include_folder() -> Result<()> {
        if !nvrtc_available() {
            return Ok(());
        }
        let (name, source) = variant(false);
        let cubin = compile_with_headers(&source, "sm_80", &Headers::default(), &[])?;
        assert!(is_cubin(&cubin), "{name}: no ELF image");
        Ok(())
    }

    #[test]
    fn a_half_kernel_with_only_headers_of_another_version_names_both_versions() -> Result<()> {
        if !nvrtc_available() {
            return Ok(());
        }
        let (major, minor) = nvrtc_version()?;
        let dir = scratch("mismatch");
        let old = dir.join("old");
        fake_headers(&old, (major - 1) * 1000 + 20, false);
        let found = find_headers(std::slice::from_ref(&old), major);
        assert_eq!(found.skipped, vec![(old.clone(), (major - 1, 2))]);
        let (name, source) = variant(true);
        let err = compile_with_headers(&source, "sm_80", &found, &[]).expect_err("no usable headers").to_string();
        for words in [format!("NVRTC is {major}.{minor}"), format!("CUDA {}.2 in {}", major - 1, old.display())] {
            assert!(err.contains(&words), "{name}: `{words}` missing from: {err}");
        }
        let err = compile_with_headers(&source, "sm_80", &Headers::default(), &[]).expect_err("no headers").to_string();
        assert!(err.contains("found in none of") && err.contains("RNN_CUDA_INCLUDE_PATH"), "{err}");
        std::fs::remove_dir_all(&dir).ok();
        Ok(())
    }

    #[test]
    fn a_virtual_or_unknown_architecture_or_a_nul_byte_is_a_clear_error() {
        if !nvrtc_available() {
            return;
        }
        let source = "extern \"C\" __global__ void k(float* x) { x[0] = 1.0f; }";
        let err = compile_with_headers(source, "compute_80", &Headers::default(), &[]).unwrap_err().to_string();
        assert!(err.contains("no CUBIN for compute_80"), "{err}");
        let err = compile_with_headers("\0", "sm_80", &Headers::default(), &[]).unwrap_err().to_string();
        assert!(err.contains("NUL"), "{err}");
        let err = compile_with_headers(source, "sm_200", &Headers::default(), &[]).unwrap_err().to_string();
        assert!(err.contains("cannot compile for sm_200") && err.contains("install a newer one"), "{err}");
        // A Volta GPU (sm_70) is older than NVRTC 13's oldest architecture.
        if nvrtc_version().is_ok_and(|v| v.0 >= 13) {
            let err = compile_with_headers(source, "sm_70", &Headers::default(), &[]).unwrap_err().to_string();
            assert!(err.contains("its oldest architecture is sm_75") && err.contains("CUDA 12"), "{err}");
        }
    }

    #[test]
    fn an_architecture_nvrtc_rejects_is_named_older_or_newer() {
        assert!(arch_hint("sm_70", (13, 5)).contains("oldest architecture is sm_75"));
        assert!(arch_hint("sm_70", (12, 8)).contains("newer than this NVRTC"));
        assert!(arch_hint("sm_35", (12, 8)).contains("oldest architecture is sm_50"));
        assert!(arch_hint("sm_120", (13, 0)).contains("newer than this NVRTC"));
    }

    #[test]
    fn cache_entries_are_checked_before_use() {
        let cubin = b"\x7fELF and the rest".to_vec();
        let key = cache_key("source", "sm_90", (13, 0), Some(13000));
        assert!(key.ends_with("-sm_90-nvrtc13.0-driver13000"), "{key}");
        assert_ne!(key, cache_key("source", "sm_90", (13, 0), Some(13020)));
        assert_ne!(key, cache_key("source", "sm_90", (13, 0), None));
        let good = entry(&key, &cubin);
        assert_eq!(read_entry(&good, &key), Some(cubin.clone()));
        assert_eq!(read_entry(&good[..good.len() - 1], &key), None, "truncated");
        assert_eq!(read_entry(&good, &cache_key("source", "sm_80", (13, 0), Some(13000))), None, "foreign");
        let mut flipped = good.clone();
        *flipped.last_mut().expect("bytes") ^= 1;
        assert_eq!(read_entry(&flipped, &key), None, "corrupt");
        assert_eq!(read_entry(&entry(&key, b"not an ELF image"), &key), None, "not a cubin");
        assert_eq!(read_entry(b"", &key), None);
    }
}
