//! `DeviceManager`: every device this build can run tensors on, and the one to use.

use rnn_core::{Device, Result};

use super::{GpuDevice, GpuManager};

/// The devices tensors can live on, in the order [`Device::best()`] prefers them: CUDA GPUs,
/// hardware wgpu adapters, then the CPU, which is always available. Where
/// [`GpuManager`] lists GPUs only, this also answers "what do I run on" when there is none.
///
/// ```
/// use rnn::gpu::DeviceManager;
/// # fn main() -> rnn::Result<()> {
/// let manager = DeviceManager::new()?;
/// let device = manager.select_best_device()?;
/// println!("running on {} ({device})", manager.device_name(device));
/// assert!(manager.available_devices().contains(&device));
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct DeviceManager {
    gpus: Vec<GpuDevice>,
    best: Device,
}

impl DeviceManager {
    /// Lists the devices and resolves the best one. Fails when `RNN_GPU_DEVICE` names a
    /// device that does not exist or cannot be opened (a request for a GPU is never silently
    /// replaced by the CPU).
    pub fn new() -> Result<DeviceManager> {
        let best = Device::best()?;
        Ok(DeviceManager { gpus: GpuManager::new().devices().to_vec(), best })
    }

    /// The device to run on: `RNN_GPU_DEVICE` if set, else the first CUDA GPU, else the first
    /// hardware wgpu adapter, else the CPU. Fails if that device has become unusable since
    /// [`DeviceManager::new`] (a lost GPU).
    pub fn select_best_device(&self) -> Result<Device> {
        self.best.check_available()?;
        Ok(self.best)
    }

    /// Every usable device, best first; the CPU is last. (A software wgpu adapter appears
    /// only when `RNN_GPU_DEVICE` names it, as in [`GpuManager`].)
    pub fn available_devices(&self) -> Vec<Device> {
        let mut devices: Vec<Device> = self.gpus.iter().map(|g| g.device).collect();
        if self.best != Device::Cpu && !devices.contains(&self.best) {
            devices.insert(0, self.best);
        }
        devices.push(Device::Cpu);
        devices
    }

    /// The GPUs among the available devices, with their names and memory.
    pub fn gpus(&self) -> &[GpuDevice] {
        &self.gpus
    }

    /// A readable name: the GPU's (e.g. "NVIDIA H100 80GB HBM3 (CUDA)"), or "CPU".
    pub fn device_name(&self, device: Device) -> String {
        match self.gpus.iter().find(|g| g.device == device) {
            Some(gpu) => format!("{} ({})", gpu.name, gpu.backend),
            None if device.is_cpu() => "CPU".to_string(),
            None => device.to_string(),
        }
    }
}
