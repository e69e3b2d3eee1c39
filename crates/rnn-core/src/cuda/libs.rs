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
