//! Where a tensor lives. The device is a runtime value; `Device::best()` picks CUDA, then a
//! real wgpu GPU, then the CPU, and `RNN_GPU_DEVICE` (e.g. `cpu`, `cuda:0`, `wgpu:1`)
//! overrides the choice.

use crate::{Error, Result};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Device {
    Cpu,
    Cuda(usize),
    Wgpu(usize),
}

impl Device {
    /// The fastest available device, or the one `RNN_GPU_DEVICE` names (an error if that
    /// device is not available, so a request for a GPU is never silently ignored).
    pub fn best() -> Result<Device> {
        if let Ok(name) = std::env::var("RNN_GPU_DEVICE") {
            let device = Device::parse(&name)?;
            device.check_available()?;
            return Ok(device);
        }
        Ok([Device::Cuda(0), Device::Wgpu(0)].into_iter().find(|d| d.is_available()).unwrap_or(Device::Cpu))
    }

    /// Parses `cpu`, `cuda`, `cuda:N`, `wgpu`, `wgpu:N`.
    pub fn parse(name: &str) -> Result<Device> {
        let name = name.trim().to_ascii_lowercase();
        let (kind, index) = match name.split_once(':') {
            Some((k, i)) => {
                let i = i.parse().map_err(|_| Error::invalid("device", format!("bad device index in '{name}'")))?;
                (k.to_string(), i)
            }
            None => (name.clone(), 0),
        };
        match kind.as_str() {
            "cpu" => Ok(Device::Cpu),
            "cuda" | "gpu" => Ok(Device::Cuda(index)),
            "wgpu" => Ok(Device::Wgpu(index)),
            _ => Err(Error::invalid("device", format!("unknown device '{name}' (expected cpu, cuda:N or wgpu:N)"))),
        }
    }

    pub fn is_cpu(&self) -> bool {
        matches!(self, Device::Cpu)
    }

    pub fn is_available(&self) -> bool {
        self.check_available().is_ok()
    }

    /// `Ok` when tensors can be created on this device in this build, on this machine.
    pub fn check_available(&self) -> Result<()> {
        match self {
            Device::Cpu => Ok(()),
            Device::Cuda(i) => crate::backends::CudaStorage::check_device(*i),
            Device::Wgpu(i) => crate::backends::WgpuStorage::check_device(*i),
        }
    }
}

impl std::fmt::Display for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Device::Cpu => write!(f, "cpu"),
            Device::Cuda(i) => write!(f, "cuda:{i}"),
            Device::Wgpu(i) => write!(f, "wgpu:{i}"),
        }
    }
}
