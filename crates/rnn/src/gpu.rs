//! The seed GPU API: discovering the GPUs this build can use and opening a context on one.
//! A machine without a GPU (or a build without the `cuda` / `wgpu` features) lists none and
//! everything runs on the CPU.
//!
//! Software wgpu adapters (llvmpipe / lavapipe, WARP) are not GPUs: they are listed only
//! when `RNN_GPU_DEVICE` names one (e.g. `RNN_GPU_DEVICE=wgpu:0` or `wgpu:llvmpipe`).

use rnn_core::{Device, Error, Result};

/// The kind of GPU backend behind a device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GpuDeviceType {
    /// NVIDIA, through the CUDA driver.
    Cuda,
    /// Vulkan, Metal, DX12 or WebGPU adapters through wgpu.
    Wgpu,
    Generic,
}

/// A GPU that tensors can be created on.
#[derive(Clone, Debug, PartialEq)]
pub struct GpuDevice {
    /// Index into `GpuManager::devices()`.
    pub id: usize,
    pub name: String,
    pub device_type: GpuDeviceType,
    /// The graphics API under a wgpu device ("Vulkan", "Metal", "Dx12", "Gl",
    /// "BrowserWebGpu"), or "CUDA".
    pub backend: String,
    /// Bytes of device memory, when the backend reports it (0 when unknown: wgpu does not).
    pub total_memory: u64,
    /// CUDA compute capability (major, minor), for CUDA devices.
    pub compute_capability: Option<(u32, u32)>,
    /// The device as tensors name it.
    pub device: Device,
}

/// Lists the usable GPUs, in the order `Device::best()` prefers them.
pub struct GpuManager {
    devices: Vec<GpuDevice>,
}

/// The most CUDA devices probed.
const MAX_CUDA: usize = 16;

impl GpuManager {
    pub fn new() -> Self {
        let mut devices: Vec<GpuDevice> = Vec::new();
        for device in (0..MAX_CUDA).map(Device::Cuda).take_while(|d| d.is_available()) {
            let name = device.to_string();
            devices.push(GpuDevice {
                id: devices.len(),
                name,
                device_type: GpuDeviceType::Cuda,
                backend: "CUDA".into(),
                total_memory: 0,
                compute_capability: None,
                device,
            });
        }
        let requested = requested_wgpu_ordinal();
        let mut adapters: Vec<_> =
            rnn_core::wgpu_adapters().into_iter().filter(|a| !a.is_software || Some(a.ordinal) == requested).collect();
        // Discrete GPUs first, as `Device::best()` prefers them.
        adapters.sort_by_key(|a| (a.device_type != "DiscreteGpu", a.ordinal));
        for a in adapters {
            devices.push(GpuDevice {
                id: devices.len(),
                name: a.name,
                device_type: GpuDeviceType::Wgpu,
                backend: a.backend,
                total_memory: 0,
                compute_capability: None,
                device: Device::Wgpu(a.ordinal),
            });
        }
        GpuManager { devices }
    }

    pub fn devices(&self) -> &[GpuDevice] {
        &self.devices
    }

    /// The first (preferred) GPU, if any.
    pub fn default_device(&self) -> Option<&GpuDevice> {
        self.devices.first()
    }

    /// Whether any GPU is usable by this build on this machine.
    pub fn is_gpu_available() -> bool {
        !GpuManager::new().devices.is_empty()
    }

    /// Opens device `id` of `devices()` (an error naming the valid ids when there is none).
    pub fn create_context(&self, id: usize) -> Result<GpuContext> {
        let gpu = self.devices.get(id).ok_or_else(|| {
            let msg = format!("no GPU with id {id}: {} GPU(s) found (see `rnn devices`)", self.devices.len());
            Error::DeviceNotAvailable(msg)
        })?;
        gpu.device.check_available()?;
        Ok(GpuContext { gpu: gpu.clone() })
    }
}

/// The wgpu adapter `RNN_GPU_DEVICE` names, if it names one.
fn requested_wgpu_ordinal() -> Option<usize> {
    match Device::parse(&std::env::var("RNN_GPU_DEVICE").ok()?).ok()? {
        Device::Wgpu(i) => Some(i),
        _ => None,
    }
}

impl Default for GpuManager {
    fn default() -> Self {
        Self::new()
    }
}

/// Byte counts of a device's caching allocator.
pub use rnn_core::gpu_memory::MemoryStats;

/// An opened GPU: the device tensors go to, and its allocator.
#[derive(Clone, Debug)]
pub struct GpuContext {
    gpu: GpuDevice,
}

impl GpuContext {
    pub fn gpu(&self) -> &GpuDevice {
        &self.gpu
    }

    /// The device to create tensors on (`Tensor::zeros(.., ctx.device())`).
    pub fn device(&self) -> Device {
        self.gpu.device
    }

    /// What the device's caching allocator holds now.
    pub fn memory_stats(&self) -> Result<MemoryStats> {
        rnn_core::gpu_memory::memory_stats(self.gpu.device)
    }

    /// Frees the buffers the allocator keeps for reuse.
    pub fn empty_cache(&self) -> Result<()> {
        rnn_core::gpu_memory::empty_cache(self.gpu.device)
    }

    /// Waits until every queued kernel has finished.
    pub fn synchronize(&self) -> Result<()> {
        self.gpu.device.synchronize()
    }
}
