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
        if let Some(name) = Device::env_request() {
            let device = Device::parse(&name)?;
            device.check_available()?;
            return Ok(device);
        }
        if Device::Cuda(0).is_available() {
            return Ok(Device::Cuda(0));
        }
        Ok(Device::best_wgpu().filter(|d| d.is_available()).unwrap_or(Device::Cpu))
    }

    /// The value of `RNN_GPU_DEVICE`; `None` when it is unset or blank (`RNN_GPU_DEVICE=`
    /// is the usual way to clear a variable in a script, so it means "no request").
    pub fn env_request() -> Option<String> {
        std::env::var("RNN_GPU_DEVICE").ok().filter(|v| !v.trim().is_empty())
    }

    /// The first hardware wgpu adapter (software ones such as llvmpipe are never "the GPU").
    fn best_wgpu() -> Option<Device> {
        #[cfg(feature = "wgpu")]
        return crate::wgpu::best_ordinal().map(Device::Wgpu);
        #[cfg(not(feature = "wgpu"))]
        None
    }

    /// The wgpu adapter whose name contains `name`, for `wgpu:<name>`.
    fn wgpu_named(name: &str) -> Result<usize> {
        #[cfg(feature = "wgpu")]
        if let Some(i) = crate::wgpu::find_adapter(name) {
            return Ok(i);
        }
        Err(Error::invalid("device", format!("no wgpu adapter is named like '{name}' (see `rnn devices`)")))
    }

    /// Parses `cpu`, `cpu:0`, `cuda`, `cuda:N`, `wgpu`, `wgpu:N` or `wgpu:<part of an adapter
    /// name>`. There is one CPU device, so `cpu:N` with N > 0 is an error.
    pub fn parse(name: &str) -> Result<Device> {
        let name = name.trim().to_ascii_lowercase();
        let (kind, index) = match name.split_once(':') {
            Some(("wgpu", i)) if i.parse::<usize>().is_err() && !i.is_empty() => {
                ("wgpu".to_string(), Device::wgpu_named(i)?)
            }
            Some((k, i)) => {
                let i = i.parse().map_err(|_| Error::invalid("device", format!("bad device index in '{name}'")))?;
                (k.to_string(), i)
            }
            None => (name.clone(), 0),
        };
        match kind.as_str() {
            "cpu" if index == 0 => Ok(Device::Cpu),
            "cpu" => {
                Err(Error::invalid("device", format!("there is one CPU device: use cpu (or cpu:0), not '{name}'")))
            }
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

    /// Blocks until every kernel queued on this device has finished (a no-op on the CPU,
    /// whose ops finish before they return). Benchmarks call it to time GPU work. On a GPU it
    /// is a sync point: a bad id of an earlier index op on this thread is returned here as
    /// `Error::IndexOutOfRange` (see the README's "GPU execution").
    pub fn synchronize(&self) -> Result<()> {
        match self {
            Device::Cpu => Ok(()),
            #[cfg(feature = "cuda")]
            Device::Cuda(i) => crate::cuda::synchronize(*i),
            #[cfg(feature = "wgpu")]
            Device::Wgpu(i) => crate::wgpu::synchronize(*i),
            #[allow(unreachable_patterns)]
            d => d.check_available(),
        }
    }

    /// `Ok` when tensors can be created on this device in this build, on this machine.
    pub fn check_available(&self) -> Result<()> {
        match self {
            Device::Cpu => Ok(()),
            Device::Cuda(i) => crate::backend_stubs::CudaStorage::check_device(*i),
            Device::Wgpu(i) => crate::backend_stubs::WgpuStorage::check_device(*i),
        }
    }
}

impl Device {
    /// Whether tests must fail, rather than report themselves skipped, when this device is
    /// missing: `RNN_REQUIRE_GPU` is `1` / `all`, or a comma list naming the backend
    /// (`cuda`, `wgpu`). CI sets it so that a missing GPU never passes silently.
    pub fn is_required_by_env(&self) -> bool {
        let Ok(list) = std::env::var("RNN_REQUIRE_GPU") else { return false };
        let kind = match self {
            Device::Cpu => return false,
            Device::Cuda(_) => "cuda",
            Device::Wgpu(_) => "wgpu",
        };
        list.split(',').map(str::trim).any(|v| v == "1" || v == "all" || v == kind)
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
