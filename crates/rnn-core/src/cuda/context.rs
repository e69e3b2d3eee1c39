//! One opened CUDA device: its context and stream (one stream per device, so kernels run in
//! order), properties, buffer pool and the loaded kernels. Opened on first use; lives for the
//! rest of the process.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::driver::{CudaContext, CudaFunction, CudaStream};

use super::libs;
use super::pool::BufferPool;
use crate::{Error, Result};

pub(crate) struct CudaDevice {
    pub ordinal: usize,
    pub name: String,
    /// (major, minor) compute capability.
    pub compute_capability: (u32, u32),
    pub total_memory: u64,
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
pub(crate) fn driver_err(ordinal: usize, what: &str) -> impl Fn(cudarc::driver::DriverError) -> Error + '_ {
    move |e| Error::Msg(format!("cuda:{ordinal}: {what}: {e}"))
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
        tracing::debug!(ordinal, %name, major, minor, total_memory, "cuda device opened");
        Ok(CudaDevice {
            ordinal,
            name,
            compute_capability: (major as u32, minor as u32),
            total_memory,
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

    /// The kernel `name` of `source` (a user kernel), compiled (or read from the PTX cache)
    /// and loaded on first use.
    pub fn function(&self, source: &str, name: &str) -> Result<CudaFunction> {
        self.function_keyed(&format!("user\n{name}\n{source}"), name, || source.to_string())
    }

    /// The kernel `name` of the source `key` stands for (`text` builds it), compiled and
    /// loaded the first time `key` is seen.
    pub(crate) fn function_keyed(&self, key: &str, name: &str, text: impl FnOnce() -> String) -> Result<CudaFunction> {
        let mut cache = self.functions.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(f) = cache.get(key) {
            return Ok(f.clone());
        }
        let source = text();
        if self.debug {
            tracing::info!(ordinal = self.ordinal, kernel = name, "compiling CUDA kernel:\n{source}");
        }
        let ptx = super::compile::compile_ptx(&source, &self.arch())?;
        let module =
            self.ctx.load_module(cudarc::nvrtc::Ptx::from_src(ptx)).map_err(driver_err(self.ordinal, "load PTX"))?;
        let f = module.load_function(name).map_err(driver_err(self.ordinal, "load kernel"))?;
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
