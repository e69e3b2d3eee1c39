//! `GpuContext`: an opened GPU, as a small `Copy` handle passed by value or by reference.

use rnn_core::{Device, Result};

use super::builtin::{self, GpuKernel};
use super::{GpuDevice, GpuDeviceType, KernelArg, MemoryStats};

/// An opened GPU: the device tensors go to, its allocator, and kernel launches on it. A
/// handle (`Copy`): every copy refers to the same device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GpuContext {
    id: usize,
    device: Device,
    device_type: GpuDeviceType,
    total_memory: u64,
}

impl GpuContext {
    pub(crate) fn new(gpu: &GpuDevice) -> GpuContext {
        GpuContext { id: gpu.id, device: gpu.device, device_type: gpu.device_type, total_memory: gpu.total_memory }
    }

    /// The id of the GPU in `GpuManager::devices()`.
    pub fn id(&self) -> usize {
        self.id
    }

    /// The device to create tensors on (`Tensor::zeros(.., ctx.device())`).
    pub fn device(&self) -> Device {
        self.device
    }

    pub fn device_type(&self) -> GpuDeviceType {
        self.device_type
    }

    /// What the device's caching allocator holds now, with the device's total memory in
    /// `total` (0 where the backend does not report it: wgpu). All zeros when the device
    /// cannot be read any more (a lost GPU, whose buffers are gone);
    /// [`GpuContext::try_memory_stats`] says why.
    pub fn memory_stats(&self) -> MemoryStats {
        self.try_memory_stats().unwrap_or_default()
    }

    /// [`GpuContext::memory_stats`], or the error that prevents reading them.
    pub fn try_memory_stats(&self) -> Result<MemoryStats> {
        let stats = rnn_core::gpu_memory::memory_stats(self.device)?;
        Ok(MemoryStats { total: stats.total.max(self.total_memory), ..stats })
    }

    /// Frees the buffers the allocator keeps for reuse.
    pub fn empty_cache(&self) -> Result<()> {
        rnn_core::gpu_memory::empty_cache(self.device)
    }

    /// Waits until every queued kernel has finished.
    pub fn synchronize(&self) -> Result<()> {
        self.device.synchronize()
    }

    /// Runs `kernel` on this GPU with `args`, queued after the work already queued there.
    ///
    /// A kernel whose source is one of [`CudaKernels`](super::CudaKernels)' built-in sources
    /// runs as the library's own op on every GPU (cuBLASLt or the WGSL tiled matmul for
    /// `matmul`, the element-wise kernels for the others), taking the arguments of that
    /// source's signature. Any other source is compiled for this GPU (CUDA C on CUDA, WGSL on
    /// wgpu; `backend_handle` or `compiled_binary` can name the language) and launched with
    /// one thread per element of the largest output, in blocks of `work_group_size`; for
    /// another grid use [`KernelManager::execute`](super::KernelManager::execute).
    pub fn execute_kernel(&self, kernel: &GpuKernel, args: &[KernelArg<'_>]) -> Result<()> {
        builtin::execute(self, kernel, args)
    }
}
