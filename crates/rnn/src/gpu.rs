//! The seed GPU API, first part: discovering the GPUs this build can use. A build without
//! the `cuda` / `wgpu` features, or a machine without a GPU, lists none and everything runs
//! on the CPU.

use rnn_core::Device;

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
    /// Bytes of device memory, when the backend reports it (0 when unknown).
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

/// The most devices of one backend probed.
const MAX_PER_BACKEND: usize = 16;

impl GpuManager {
    pub fn new() -> Self {
        let mut devices = Vec::new();
        let kinds = [(GpuDeviceType::Cuda, Device::Cuda as fn(usize) -> Device), (GpuDeviceType::Wgpu, Device::Wgpu)];
        for (device_type, make) in kinds {
            let available = (0..MAX_PER_BACKEND).map(make).take_while(|d| d.is_available());
            for device in available {
                let id = devices.len();
                let name = device.to_string();
                devices.push(GpuDevice { id, name, device_type, total_memory: 0, compute_capability: None, device });
            }
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
}

impl Default for GpuManager {
    fn default() -> Self {
        Self::new()
    }
}
