//! The GPU API: discovering the GPUs this build can use, opening a context on one, moving
//! arrays to and from it ([`GpuTensor`]), timing regions ([`GpuProfiler`]), running the
//! built-in kernels ([`CudaKernels`], [`GpuContext::execute_kernel`]) and your own CUDA C or
//! WGSL kernels on tensors ([`KernelManager`], [`GpuKernel`]), data-parallel training on
//! several devices ([`DistributedTraining`], [`MultiGpuOptimizer`]), and updating parameter
//! tensors with an optimizer ([`DeviceManager`] picks the device, [`GpuOptimizer`] runs
//! `rnn::nn::optim` on it; [`error`] maps optirs-gpu's error names). A machine without a GPU (or a
//! build without the `cuda` / `wgpu` features) lists none and everything runs on the CPU.
//!
//! ```
//! use rnn::gpu::{GpuManager, GpuTensor};
//! use rnn::ndarray::Array2;
//! # fn main() -> rnn::Result<()> {
//! let manager = GpuManager::new();
//! println!("Available GPUs: {}", manager.devices().len());
//! if let Some(device) = manager.default_device() {
//!     println!("Using GPU: {}", device.name);
//!     let context = manager.create_context(device.id)?; // a small `Copy` handle
//!     let cpu_data = Array2::<f32>::zeros((1000, 784));
//!     let gpu_tensor = GpuTensor::from_cpu(&cpu_data, device.id, context)?;
//!     // Tensor ops on the GPU: `gpu_tensor.tensor().relu()?`, `.matmul(..)?`, ...
//!     let result = gpu_tensor.to_cpu(context)?;
//!     assert_eq!(result.shape(), &[1000, 784]);
//!     let stats = context.memory_stats();
//!     println!("GPU memory: {} MiB allocated, {} MiB reserved", stats.allocated >> 20, stats.reserved >> 20);
//! } else {
//!     println!("No GPU available: running on the CPU");
//! }
//! # Ok(()) }
//! ```
//!
//! Devices are listed in the order `Device::best()` prefers them: CUDA devices (with name,
//! memory and compute capability from the driver, in builds with the `cuda` feature), then
//! hardware wgpu adapters (Vulkan, Metal, DX12; the `wgpu` feature, on by default). Software
//! wgpu adapters (llvmpipe / lavapipe, WARP) are not GPUs: they are listed only when
//! `RNN_GPU_DEVICE` names one (e.g. `RNN_GPU_DEVICE=wgpu:0` or `wgpu:llvmpipe`).
//!
//! # Environment variables
//!
//! `RNN_GPU_DEVICE`, `RNN_GPU_DEBUG`, `RNN_GPU_MEMORY_POOL`, `RNN_CUDA_CACHE_PATH`,
//! `WGPU_BACKEND` and the others are described in one table, the README's
//! [environment variables](https://github.com/rnn-rs/rnn#environment-variables).

mod builtin;
mod context;
mod device_manager;
mod distributed;
pub mod error;
mod kernel;
mod multi_gpu;
mod optimizer;
pub mod optimizers;
mod profiler;
mod tensor;

pub use builtin::{CudaKernels, GpuKernel};
pub use context::GpuContext;
pub use device_manager::DeviceManager;
pub use distributed::DistributedTraining;
pub use error::{GpuError, GpuResult};
pub use kernel::{CompiledKernel, KernelArg, KernelBackend, KernelManager, LaunchConfig};
pub use multi_gpu::{DataParallelStrategy, MultiGpuOptimizer, MultiGpuOptimizerBuilder};
pub use optimizer::{GpuOptimizer, GpuOptimizerBuilder};
pub use profiler::{GpuProfiler, ProfileEvent, ProfileSummary};
pub use tensor::{GpuTensor, HostElement, MemoryLayout};

/// Byte counts of a device's caching allocator, and its total memory where known.
pub use rnn_core::gpu_memory::MemoryStats;

use rnn_core::{Device, Error, Result};

/// The API a device is driven through. wgpu adapters report the graphics API under them;
/// `OpenCL` is never reported (this build has no OpenCL backend: wgpu's Vulkan backend drives
/// the same AMD, Intel and NVIDIA GPUs) and is kept so code matching on it compiles.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GpuDeviceType {
    /// NVIDIA, through the CUDA driver.
    Cuda,
    /// Apple GPUs, through wgpu's Metal backend.
    Metal,
    /// Through wgpu's Vulkan backend (AMD, Intel, NVIDIA; also Mesa's software lavapipe).
    Vulkan,
    /// Through wgpu's DirectX 12 backend (Windows).
    Dx12,
    /// Never reported: see the type's documentation.
    OpenCL,
    /// The CPU (`GpuDeviceType::of(Device::Cpu)`); `GpuManager` never lists it.
    Cpu,
    /// Any other wgpu backend (OpenGL ES, the browser's WebGPU).
    Generic,
}

impl GpuDeviceType {
    /// The type of a wgpu adapter from its backend's name (`WgpuAdapterInfo::backend`).
    pub fn from_wgpu_backend(backend: &str) -> GpuDeviceType {
        match backend {
            "Vulkan" => GpuDeviceType::Vulkan,
            "Metal" => GpuDeviceType::Metal,
            "Dx12" => GpuDeviceType::Dx12,
            _ => GpuDeviceType::Generic,
        }
    }

    /// The type of any device (a wgpu ordinal with no adapter is `Generic`).
    pub fn of(device: Device) -> GpuDeviceType {
        match device {
            Device::Cpu => GpuDeviceType::Cpu,
            Device::Cuda(_) => GpuDeviceType::Cuda,
            Device::Wgpu(i) => rnn_core::wgpu_adapters()
                .into_iter()
                .find(|a| a.ordinal == i)
                .map_or(GpuDeviceType::Generic, |a| GpuDeviceType::from_wgpu_backend(&a.backend)),
        }
    }
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

impl GpuManager {
    pub fn new() -> Self {
        let mut devices: Vec<GpuDevice> = Vec::new();
        #[cfg(feature = "cuda")]
        for ordinal in 0..rnn_core::cuda::device_count() {
            // A device the driver lists but cannot open is left out, as `Device::best()` would.
            let Ok(info) = rnn_core::cuda::device_info(ordinal) else { continue };
            devices.push(GpuDevice {
                id: devices.len(),
                name: info.name,
                device_type: GpuDeviceType::Cuda,
                backend: "CUDA".into(),
                total_memory: info.total_memory,
                compute_capability: Some(info.compute_capability),
                device: Device::Cuda(ordinal),
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
                device_type: GpuDeviceType::from_wgpu_backend(&a.backend),
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
        Ok(GpuContext::new(gpu))
    }
}

/// The wgpu adapter `RNN_GPU_DEVICE` names, if it names one.
fn requested_wgpu_ordinal() -> Option<usize> {
    match Device::parse(&Device::env_request()?).ok()? {
        Device::Wgpu(i) => Some(i),
        _ => None,
    }
}

impl Default for GpuManager {
    fn default() -> Self {
        Self::new()
    }
}
