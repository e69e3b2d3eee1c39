//! The CUDA backend (NVIDIA GPUs) through cudarc with dynamic loading: the crate builds and
//! runs on machines without CUDA, where device listing finds no devices and creating a CUDA
//! tensor returns `Error::DeviceNotAvailable`.
//!
//! Ops are planned by the shared GPU layer (`gpu/`): this module is the runtime that runs
//! the plans. Kernels are CUDA C templates from `rnn-kernels`, compiled by NVRTC to CUBIN
//! for the device's own architecture at first use and cached in memory and on disk
//! (`compile.rs`);
//! products run through cuBLASLt (`blaslt.rs`). Buffers come from the shared caching
//! allocator. Every dtype is stored natively; f16 / bf16 compute in f32.

mod blaslt;
mod compile;
mod context;
mod launch;
mod libs;
mod pool;
mod profile;
mod shared_memory;
mod storage;
mod user_kernel;

pub use compile::{
    cache_entry, cache_file, compile_cubin, compile_cubin_for_check, compile_cubin_uncached, compile_cubin_with_report,
    disk_cached_cubin, driver_version, is_cubin, nvrtc_version,
};
pub use context::device_count;
pub use profile::{record_timing_event, CudaTimingEvent};
pub use storage::CudaStorage;
pub use user_kernel::{compile_user_kernel, launch_user_kernel, with_device_buffers};

/// What the driver reports about one CUDA device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CudaDeviceInfo {
    pub ordinal: usize,
    pub name: String,
    pub total_memory: u64,
    pub compute_capability: (u32, u32),
}

/// The properties of `cuda:ordinal` (opening it).
pub fn device_info(ordinal: usize) -> crate::Result<CudaDeviceInfo> {
    let d = context::device(ordinal)?;
    Ok(CudaDeviceInfo {
        ordinal,
        name: d.name.clone(),
        total_memory: d.total_memory,
        compute_capability: d.compute_capability,
    })
}

/// The caching allocator's statistics of `cuda:ordinal`, with the device's total memory.
pub fn memory_stats(ordinal: usize) -> crate::Result<crate::gpu_memory::MemoryStats> {
    let device = context::device(ordinal)?;
    Ok(crate::gpu_memory::MemoryStats { total: device.total_memory, ..device.pool.stats() })
}

/// Frees the buffers `cuda:ordinal` keeps for reuse.
pub fn empty_cache(ordinal: usize) -> crate::Result<()> {
    context::device(ordinal)?.pool.empty_cache();
    Ok(())
}

/// Blocks until every kernel queued on `cuda:ordinal` has finished. Index checks pending on
/// this thread are evaluated in that wait (`gpu/deferred.rs`): a bad id of an earlier
/// index op is returned here as `Error::IndexOutOfRange`.
pub fn synchronize(ordinal: usize) -> crate::Result<()> {
    let device = context::device(ordinal)?;
    crate::gpu::deferred::synchronize::<CudaStorage>(ordinal, || device.synchronize())
}

/// Median seconds of one device-to-device copy of `bytes` bytes (waited for, like an op).
pub fn time_buffer_copy(ordinal: usize, bytes: u64, calls: usize) -> crate::Result<f64> {
    let d = context::device(ordinal)?;
    let (src, mut dst) = (pool::alloc(&d, bytes)?, pool::alloc(&d, bytes)?);
    let mut times = Vec::with_capacity(calls + 2);
    for _ in 0..calls.max(1) + 2 {
        let start = std::time::Instant::now();
        let from = src.slice().slice(..bytes as usize);
        let mut to = dst.slice_mut().slice_mut(..bytes as usize);
        d.stream.memcpy_dtod(&from, &mut to).map_err(context::driver_err(ordinal, "copy"))?;
        d.synchronize()?;
        times.push(start.elapsed().as_secs_f64());
    }
    let mut timed = times.split_off(2);
    timed.sort_by(f64::total_cmp);
    Ok(timed[timed.len() / 2])
}

/// Every kernel source the backend can launch on a device of this compute capability
/// (major, minor), by variant name, for compile checks (CI compiles those of (8, 0) with
/// NVRTC for sm_80 and sm_90, and those of (7, 5) for sm_75, with no GPU).
pub fn kernel_variants(compute_capability: (u32, u32)) -> Vec<(String, String)> {
    crate::gpu::variants::all(&crate::gpu::target::Target::cuda_on(compute_capability))
        .into_iter()
        .map(|(name, source)| (name, source.text()))
        .collect()
}
