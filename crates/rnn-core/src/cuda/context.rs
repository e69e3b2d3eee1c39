//! One opened CUDA device: its context and stream (one stream per device, so kernels run in
//! order), properties, buffer pool and the loaded kernels. Opened on first use; lives for the
//! rest of the process.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::driver::sys::{CUdevice_attribute, CUresult};
use cudarc::driver::{CudaContext, CudaFunction, CudaStream, DriverError};

use super::libs;
use super::pool::BufferPool;
use crate::{Error, Result};

pub(crate) struct CudaDevice {
    pub ordinal: usize,
    pub name: String,
    /// (major, minor) compute capability.
    pub compute_capability: (u32, u32),
    pub total_memory: u64,
    /// Shared memory one block may use without opting in (48 KiB), and with.
    pub shared_per_block: u32,
    pub shared_per_block_optin: u32,
    pub ctx: Arc<CudaContext>,
    pub stream: Arc<CudaStream>,
    pub pool: BufferPool,
    functions: Mutex<HashMap<String, CudaFunction>>,
    pub debug: bool,
}

impl std::fmt::Debug for CudaDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "cuda:{} ({})", self.ordinal, self.name)
    }
}

/// Turns a driver error into an `Error` naming the device and what failed.
pub(crate) fn driver_err(ordinal: usize, what: &str) -> impl Fn(DriverError) -> Error + '_ {
    move |e| Error::Msg(format!("cuda:{ordinal}: {what}: {}", describe(e)))
}

/// A driver error in words: its name, the driver's description when a driver is loaded, and
/// what to do when the error is sticky (the context is lost after a fault inside a kernel,
/// and every later call on it fails the same way).
pub(crate) fn describe(e: DriverError) -> String {
    use cudarc::driver::sys::CUresult::*;
    let mut text = format!("{:?}", e.0);
    // cuGetErrorString needs libcuda; without one (unit tests) the name alone is given.
    if libs::driver().is_ok() {
        if let Ok(Ok(s)) = libs::guarded("cuGetErrorString", || e.error_string()) {
            text += &format!(" ({})", s.to_string_lossy());
        }
    }
    let sticky = [
        CUDA_ERROR_ILLEGAL_ADDRESS,
        CUDA_ERROR_LAUNCH_FAILED,
        CUDA_ERROR_ILLEGAL_INSTRUCTION,
        CUDA_ERROR_MISALIGNED_ADDRESS,
        CUDA_ERROR_INVALID_ADDRESS_SPACE,
        CUDA_ERROR_INVALID_PC,
        CUDA_ERROR_HARDWARE_STACK_ERROR,
        CUDA_ERROR_ASSERT,
    ];
    if sticky.contains(&e.0) {
        text += "; a kernel faulted earlier and the device's context is unusable: restart the process \
                 (compute-sanitizer, or CUDA_LAUNCH_BLOCKING=1, finds the kernel)";
    }
    text
}

/// The number of CUDA devices (0 without a driver).
pub fn device_count() -> usize {
    if libs::driver().is_err() {
        return 0;
    }
    libs::guarded("cuDeviceGetCount", CudaContext::device_count)
        .ok()
        .and_then(|r| r.ok())
        .map_or(0, |n| n.max(0) as usize)
}

/// The device `cuda:ordinal`, opened on first use.
pub(crate) fn device(ordinal: usize) -> Result<Arc<CudaDevice>> {
    static OPEN: OnceLock<Mutex<HashMap<usize, Arc<CudaDevice>>>> = OnceLock::new();
    libs::driver()?;
    let open = OPEN.get_or_init(Default::default);
    let mut open = open.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(d) = open.get(&ordinal) {
        return Ok(d.clone());
    }
    let count = device_count();
    if ordinal >= count {
        return Err(Error::DeviceNotAvailable(format!("cuda:{ordinal}: {count} CUDA device(s) found")));
    }
    let dev = Arc::new(CudaDevice::open(ordinal)?);
    open.insert(ordinal, dev.clone());
    Ok(dev)
}

impl CudaDevice {
    fn open(ordinal: usize) -> Result<CudaDevice> {
        let unavailable = |e: cudarc::driver::DriverError| Error::DeviceNotAvailable(format!("cuda:{ordinal}: {e}"));
        let ctx = libs::guarded("cuCtxCreate", || CudaContext::new(ordinal))?.map_err(unavailable)?;
        // One stream per device: kernels are ordered by the stream, so cudarc's per-buffer
        // events are not needed.
        // SAFETY: every buffer of this context is only used on `stream`.
        unsafe { ctx.disable_event_tracking() };
        let (major, minor) = ctx.compute_capability().map_err(unavailable)?;
        let name = ctx.name().map_err(unavailable)?;
        let total_memory = ctx.total_mem().map_err(unavailable)? as u64;
        let attribute = |a| ctx.attribute(a).map(|v| v.max(0) as u32).map_err(unavailable);
        let shared_per_block = attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK)?;
        let shared_per_block_optin =
            attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)?.max(shared_per_block);
        tracing::debug!(ordinal, %name, major, minor, total_memory, "cuda device opened");
        Ok(CudaDevice {
            ordinal,
            name,
            compute_capability: (major as u32, minor as u32),
            total_memory,
            shared_per_block,
            shared_per_block_optin,
            stream: ctx.default_stream(),
            ctx,
            pool: BufferPool::new(crate::gpu_pool::pool_enabled()),
            functions: Mutex::new(HashMap::new()),
            debug: std::env::var("RNN_GPU_DEBUG").is_ok_and(|v| v != "0"),
        })
    }

    /// The device's own architecture for NVRTC, e.g. `sm_90`.
    pub fn arch(&self) -> String {
        format!("sm_{}{}", self.compute_capability.0, self.compute_capability.1)
    }

    /// The kernel `name` of `source` (a user kernel), compiled (or read from the CUBIN cache)
    /// and loaded on first use.
    pub fn function(&self, source: &str, name: &str) -> Result<CudaFunction> {
        self.function_keyed(&format!("user\n{name}\n{source}"), name, || source.to_string(), |_| Ok(()))
    }

    /// The kernel `name` of the source `key` stands for (`text` builds it), compiled and
    /// loaded the first time `key` is seen, when `prepare` also runs on it (once).
    pub(crate) fn function_keyed(
        &self,
        key: &str,
        name: &str,
        text: impl FnOnce() -> String,
        prepare: impl FnOnce(&CudaFunction) -> Result<()>,
    ) -> Result<CudaFunction> {
        let mut cache = self.functions.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(f) = cache.get(key) {
            return Ok(f.clone());
        }
        let source = text();
        if self.debug {
            tracing::info!(ordinal = self.ordinal, kernel = name, "compiling CUDA kernel:\n{source}");
        }
        let arch = self.arch();
        let cubin = super::compile::compile_cubin(&source, &arch)?;
        let module = self.ctx.load_module(cudarc::nvrtc::Ptx::from_binary(cubin)).map_err(|e| {
            let nvrtc = super::compile::nvrtc_version().ok();
            Error::Msg(image_rejected(self.ordinal, &arch, e, nvrtc, super::compile::driver_version()))
        })?;
        let f = module.load_function(name).map_err(driver_err(self.ordinal, "load kernel"))?;
        prepare(&f)?;
        cache.insert(key.to_string(), f.clone());
        Ok(f)
    }

    /// Blocks until the device's stream is idle.
    pub fn synchronize(&self) -> Result<()> {
        self.stream.synchronize().map_err(driver_err(self.ordinal, "synchronize"))
    }

    /// (free, total) bytes of device memory.
    pub fn mem_info(&self) -> (u64, u64) {
        self.ctx.mem_get_info().map_or((0, self.total_memory), |(f, t)| (f as u64, t as u64))
    }
}

/// The error of a kernel image the driver would not load. When the driver rejects the image
/// itself (an unsupported PTX version, no binary for this GPU, an invalid image) the likely
/// cause is an NVRTC newer than the driver, and the message says so and what to do.
pub(crate) fn image_rejected(
    ordinal: usize,
    arch: &str,
    e: DriverError,
    nvrtc: Option<(i32, i32)>,
    driver: Option<i32>,
) -> String {
    use CUresult::*;
    let what = format!("cuda:{ordinal}: loading the kernel compiled for {arch} failed: {}", describe(e));
    let image_errors = [
        CUDA_ERROR_UNSUPPORTED_PTX_VERSION,
        CUDA_ERROR_NO_BINARY_FOR_GPU,
        CUDA_ERROR_INVALID_IMAGE,
        CUDA_ERROR_INVALID_PTX,
    ];
    if !image_errors.contains(&e.0) {
        return what;
    }
    let driver_text = driver.map_or_else(|| "unknown".to_string(), super::compile::version_text);
    let cache = "RNN_CUDA_CACHE_PATH, default ~/.cache/rnn/cuda";
    match (nvrtc, driver) {
        (Some((major, minor)), Some(d)) if major * 1000 + minor * 10 > d => format!(
            "{what}. NVRTC {major}.{minor} is newer than the driver (CUDA driver version {driver_text}): update the \
             NVIDIA driver to one for CUDA {major}.{minor} or newer, or use an NVRTC no newer than {driver_text} (e.g. \
             `pip install \"nvidia-cuda-nvrtc=={driver_text}.*\"` with its lib folder first on LD_LIBRARY_PATH), then \
             delete the kernel cache ({cache})"
        ),
        (Some((major, minor)), _) => format!(
            "{what}. The image was made by NVRTC {major}.{minor} for {arch} and the driver (CUDA driver version \
             {driver_text}) rejected it: delete the kernel cache ({cache}) and retry; if it fails again, use the NVRTC \
             of the driver's CUDA version"
        ),
        (None, _) => what,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_image_the_driver_rejects_names_nvrtc_and_driver_versions() {
        let e = DriverError(CUresult::CUDA_ERROR_UNSUPPORTED_PTX_VERSION);
        let msg = image_rejected(0, "sm_90", e, Some((13, 5)), Some(13000));
        assert!(msg.contains("NVRTC 13.5 is newer than the driver (CUDA driver version 13.0)"), "{msg}");
        assert!(msg.contains("cuda:0") && msg.contains("sm_90") && msg.contains("update the NVIDIA driver"), "{msg}");
        assert!(msg.contains("nvidia-cuda-nvrtc==13.0.*"), "{msg}");
        for code in [CUresult::CUDA_ERROR_NO_BINARY_FOR_GPU, CUresult::CUDA_ERROR_INVALID_IMAGE] {
            let msg = image_rejected(1, "sm_80", DriverError(code), Some((13, 2)), Some(13010));
            assert!(msg.contains("NVRTC 13.2 is newer than the driver (CUDA driver version 13.1)"), "{msg}");
        }
        // Not newer: no such claim, but the versions and what to do.
        let msg =
            image_rejected(0, "sm_90", DriverError(CUresult::CUDA_ERROR_INVALID_IMAGE), Some((13, 0)), Some(13000));
        assert!(!msg.contains("newer than the driver") && msg.contains("NVRTC 13.0"), "{msg}");
        assert!(msg.contains("CUDA driver version 13.0") && msg.contains("kernel cache"), "{msg}");
        // Another error is reported as it is.
        let msg =
            image_rejected(0, "sm_90", DriverError(CUresult::CUDA_ERROR_OUT_OF_MEMORY), Some((13, 5)), Some(13000));
        assert!(msg.contains("CUDA_ERROR_OUT_OF_MEMORY") && !msg.contains("newer"), "{msg}");
    }

    #[test]
    fn sticky_errors_say_the_context_is_lost() {
        let text = describe(DriverError(CUresult::CUDA_ERROR_ILLEGAL_ADDRESS));
        assert!(text.starts_with("CUDA_ERROR_ILLEGAL_ADDRESS") && text.contains("restart the process"), "{text}");
        assert!(!describe(DriverError(CUresult::CUDA_ERROR_INVALID_VALUE)).contains("restart"));
    }
}
