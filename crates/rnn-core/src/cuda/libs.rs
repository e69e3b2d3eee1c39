//! cudarc loads the CUDA libraries on first use and panics when one is missing. Every entry
//! into cudarc first asks here whether the library can be loaded, so that a machine without
//! a driver gets `Error::DeviceNotAvailable`, never a panic.

use std::sync::OnceLock;

use crate::{Error, Result};

/// Whether one of the file names cudarc would try for `lib` loads on this machine.
fn loadable(lib: &str) -> bool {
    cudarc::get_lib_name_candidates(lib).iter().any(|name| {
        // SAFETY: loading a CUDA library runs only its initializers, the same ones cudarc
        // runs when it loads the library itself.
        unsafe { libloading::Library::new(name) }.is_ok()
    })
}

/// `Ok` when the CUDA driver library (libcuda) can be loaded.
pub(crate) fn driver() -> Result<()> {
    static PRESENT: OnceLock<bool> = OnceLock::new();
    if *PRESENT.get_or_init(|| loadable("cuda") || loadable("nvcuda")) {
        Ok(())
    } else {
        Err(Error::DeviceNotAvailable("cuda: no CUDA driver (libcuda) found on this machine".into()))
    }
}

/// `Ok` when NVRTC, the run-time CUDA compiler, can be loaded.
pub(crate) fn nvrtc() -> Result<()> {
    static PRESENT: OnceLock<bool> = OnceLock::new();
    if *PRESENT.get_or_init(|| loadable("nvrtc")) {
        Ok(())
    } else {
        let hint =
            "install the CUDA toolkit or `pip install nvidia-cuda-nvrtc` and add its lib folder to LD_LIBRARY_PATH";
        Err(Error::DeviceNotAvailable(format!("cuda: NVRTC (libnvrtc) not found: {hint}")))
    }
}

/// `Ok` when cuBLASLt can be loaded.
pub(crate) fn cublaslt() -> Result<()> {
    static PRESENT: OnceLock<bool> = OnceLock::new();
    if *PRESENT.get_or_init(|| loadable("cublasLt")) {
        Ok(())
    } else {
        Err(Error::DeviceNotAvailable("cuda: cuBLASLt (libcublasLt) not found".into()))
    }
}

/// Runs a cudarc call, turning a panic inside it (a missing symbol in an old driver) into an
/// error naming `what`.
pub(crate) fn guarded<T>(what: &str, f: impl FnOnce() -> T) -> Result<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
        .map_err(|_| Error::DeviceNotAvailable(format!("cuda: {what} failed inside the CUDA library loader")))
}

/// The file NVRTC was loaded from (the first of cudarc's candidate names that loads, the one
/// cudarc itself uses), so that the headers installed beside it can be found (the pip wheels
/// put them in `nvidia/cu13/include`, next to `nvidia/cu13/lib`). `None` when NVRTC is not
/// installed or its path cannot be told.
pub(crate) fn nvrtc_library_path() -> Option<std::path::PathBuf> {
    nvrtc().ok()?;
    let name = cudarc::get_lib_name_candidates("nvrtc").into_iter().find(|name| {
        // SAFETY: as in `loadable`.
        unsafe { libloading::Library::new(name) }.is_ok()
    })?;
    loaded_path(&name, b"nvrtcVersion\0").or_else(|| mapped_path("libnvrtc"))
}

/// The path of the shared library that defines `symbol`, as the dynamic loader found it.
#[cfg(target_os = "linux")]
fn loaded_path(name: &str, symbol: &[u8]) -> Option<std::path::PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    // SAFETY: as in `loadable`; the library stays loaded while `lib` lives.
    let lib = unsafe { libloading::Library::new(name) }.ok()?;
    // SAFETY: the symbol is only used as an address, never called.
    let address = unsafe { lib.get::<unsafe extern "C" fn()>(symbol) }.ok().map(|f| *f as *const libc::c_void)?;
    // SAFETY: Dl_info is a plain C struct of pointers, for which all zeros is valid.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: `address` lies in a loaded library and `info` is a valid out-pointer.
    if unsafe { libc::dladdr(address, &mut info) } == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dladdr set `dli_fname` to a NUL-terminated string owned by the loader, valid
    // while the library stays loaded (`lib` is alive); it is copied at once.
    let file = unsafe { std::ffi::CStr::from_ptr(info.dli_fname) };
    let path = std::path::PathBuf::from(std::ffi::OsStr::from_bytes(file.to_bytes()));
    path.is_absolute().then_some(path)
}

#[cfg(not(target_os = "linux"))]
fn loaded_path(_name: &str, _symbol: &[u8]) -> Option<std::path::PathBuf> {
    None
}

/// The first file mapped into this process whose name starts with `prefix` (from
/// /proc/self/maps; `None` elsewhere).
fn mapped_path(prefix: &str) -> Option<std::path::PathBuf> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines()
        .filter_map(|line| line.find('/').map(|start| std::path::PathBuf::from(&line[start..])))
        .find(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with(prefix)))
}
