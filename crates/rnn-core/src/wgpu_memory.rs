//! The wgpu devices' caching allocators and queues, in an API that exists in every build
//! (without the `wgpu` feature every call reports `Error::NotCompiledWith`).

use crate::Result;

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
}

/// The allocator statistics of wgpu device `ordinal` (opened if need be).
pub fn memory_stats(ordinal: usize) -> Result<MemoryStats> {
    #[cfg(feature = "wgpu")]
    return crate::wgpu::memory_stats(ordinal);
    #[cfg(not(feature = "wgpu"))]
    Err(crate::Error::NotCompiledWith("wgpu"))
}

/// Frees the buffers wgpu device `ordinal` keeps for reuse.
pub fn empty_cache(ordinal: usize) -> Result<()> {
    #[cfg(feature = "wgpu")]
    return crate::wgpu::empty_cache(ordinal);
    #[cfg(not(feature = "wgpu"))]
    Err(crate::Error::NotCompiledWith("wgpu"))
}

/// Blocks until every kernel queued on wgpu device `ordinal` has finished.
pub fn synchronize(ordinal: usize) -> Result<()> {
    #[cfg(feature = "wgpu")]
    return crate::wgpu::synchronize(ordinal);
    #[cfg(not(feature = "wgpu"))]
    Err(crate::Error::NotCompiledWith("wgpu"))
}

/// Median seconds of one device-to-device copy of `bytes` bytes on wgpu device `ordinal`,
/// submitted and waited for like an op: the bandwidth reference of GPU benchmarks.
pub fn time_buffer_copy(ordinal: usize, bytes: u64, calls: usize) -> Result<f64> {
    #[cfg(feature = "wgpu")]
    return crate::wgpu::time_buffer_copy(ordinal, bytes, calls);
    #[cfg(not(feature = "wgpu"))]
    Err(crate::Error::NotCompiledWith("wgpu"))
}
