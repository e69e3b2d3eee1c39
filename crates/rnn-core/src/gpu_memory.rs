//! The GPU devices' caching allocators, in an API that exists in every build: a device whose
//! backend is not compiled in reports `Error::NotCompiledWith`, the CPU reports that it has
//! no GPU allocator.

use crate::{Device, Error, Result};

/// Byte counts of one device's pool.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryStats {
    /// Bytes in buffers that tensors hold now.
    pub allocated: u64,
    /// Bytes held from the device: allocated plus cached for reuse.
    pub reserved: u64,
    /// The largest `allocated` seen.
    pub peak: u64,
    /// Buffers created on the device.
    pub allocations: u64,
    /// Requests served from the cache.
    pub cache_hits: u64,
    /// Bytes of memory the device has in all, where its backend reports it (CUDA); 0 where it
    /// does not (wgpu exposes no memory size).
    pub total: u64,
}

fn no_allocator(device: Device) -> Error {
    match device {
        Device::Cpu => Error::invalid("memory_stats", "the CPU has no GPU allocator"),
        Device::Cuda(_) => Error::NotCompiledWith("cuda"),
        Device::Wgpu(_) => Error::NotCompiledWith("wgpu"),
    }
}

/// The allocator statistics of a GPU device (opened if need be).
pub fn memory_stats(device: Device) -> Result<MemoryStats> {
    match device {
        #[cfg(feature = "wgpu")]
        Device::Wgpu(i) => crate::wgpu::memory_stats(i),
        #[cfg(feature = "cuda")]
        Device::Cuda(i) => crate::cuda::memory_stats(i),
        #[allow(unreachable_patterns)]
        d => Err(no_allocator(d)),
    }
}

/// Frees the buffers a GPU device keeps for reuse (a no-op on the CPU).
pub fn empty_cache(device: Device) -> Result<()> {
    match device {
        Device::Cpu => {
            crate::cpu_empty_cache();
            Ok(())
        }
        #[cfg(feature = "wgpu")]
        Device::Wgpu(i) => crate::wgpu::empty_cache(i),
        #[cfg(feature = "cuda")]
        Device::Cuda(i) => crate::cuda::empty_cache(i),
        #[allow(unreachable_patterns)]
        d => Err(no_allocator(d)),
    }
}

/// Median seconds of one device-to-device copy of `bytes` bytes on a GPU, submitted and
/// waited for like an op: the bandwidth reference of GPU benchmarks.
pub fn time_buffer_copy(device: Device, bytes: u64, calls: usize) -> Result<f64> {
    match device {
        #[cfg(feature = "wgpu")]
        Device::Wgpu(i) => crate::wgpu::time_buffer_copy(i, bytes, calls),
        #[cfg(feature = "cuda")]
        Device::Cuda(i) => crate::cuda::time_buffer_copy(i, bytes, calls),
        #[allow(unreachable_patterns)]
        d => {
            let _ = (bytes, calls);
            Err(no_allocator(d))
        }
    }
}
