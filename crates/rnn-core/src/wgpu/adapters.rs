//! Adapter discovery. The instance honors `WGPU_BACKEND` (e.g. `vulkan`, `metal`, `dx12`,
//! `gl`); by default it asks the primary backends (Vulkan, Metal, DX12, WebGPU). Device
//! `wgpu:N` is the N-th adapter listed here, software ones included; `Device::best()` only
//! ever picks hardware adapters.

use std::sync::OnceLock;

pub use crate::adapter_info::WgpuAdapterInfo;

pub(crate) struct Registry {
    /// Kept alive for as long as its adapters.
    _instance: ::wgpu::Instance,
    pub adapters: Vec<::wgpu::Adapter>,
}

/// The process-wide instance and its adapters, enumerated once.
pub(crate) fn registry() -> &'static Registry {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    REGISTRY.get_or_init(|| {
        // Reads WGPU_BACKEND (and wgpu's other environment settings).
        let mut desc = ::wgpu::InstanceDescriptor::new_without_display_handle_from_env();
        desc.backends = ::wgpu::Backends::from_env().unwrap_or(::wgpu::Backends::PRIMARY);
        let instance = ::wgpu::Instance::new(desc);
        let adapters = pollster::block_on(instance.enumerate_adapters(::wgpu::Backends::all()));
        Registry { _instance: instance, adapters }
    })
}

fn describe(ordinal: usize, adapter: &::wgpu::Adapter) -> WgpuAdapterInfo {
    let info = adapter.get_info();
    let limits = adapter.limits();
    WgpuAdapterInfo {
        ordinal,
        name: info.name.clone(),
        backend: format!("{:?}", info.backend),
        device_type: format!("{:?}", info.device_type),
        driver: format!("{} {}", info.driver, info.driver_info).trim().to_string(),
        is_software: info.device_type == ::wgpu::DeviceType::Cpu,
        vendor: info.vendor,
        device: info.device,
        shader_f16: adapter.features().contains(::wgpu::Features::SHADER_F16),
        max_buffer_bytes: super::pool::buffer_limit(&limits),
    }
}

/// Every adapter the instance sees, software ones included.
pub fn adapters() -> Vec<WgpuAdapterInfo> {
    registry().adapters.iter().enumerate().map(|(i, a)| describe(i, a)).collect()
}

/// The ordinal `Device::best()` uses: the first discrete GPU, else the first other hardware
/// adapter. `None` when there are only software adapters or none.
pub fn best_ordinal() -> Option<usize> {
    let all = adapters();
    let hardware = || all.iter().filter(|a| !a.is_software);
    hardware().find(|a| a.device_type == "DiscreteGpu").or_else(|| hardware().next()).map(|a| a.ordinal)
}

/// The first adapter whose name contains `needle` (case-insensitive).
pub fn find_adapter(needle: &str) -> Option<usize> {
    let needle = needle.to_ascii_lowercase();
    adapters().into_iter().find(|a| a.name.to_ascii_lowercase().contains(&needle)).map(|a| a.ordinal)
}
