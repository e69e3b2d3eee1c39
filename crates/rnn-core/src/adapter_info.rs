//! What a GPU adapter reports, in a type that exists in every build (a build without the
//! `wgpu` feature simply lists no adapters).

/// What the wgpu instance reports about one adapter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WgpuAdapterInfo {
    /// The ordinal of `Device::Wgpu(ordinal)`.
    pub ordinal: usize,
    pub name: String,
    /// "Vulkan", "Metal", "Dx12", "Gl" or "BrowserWebGpu".
    pub backend: String,
    /// "DiscreteGpu", "IntegratedGpu", "VirtualGpu", "Cpu" or "Other".
    pub device_type: String,
    pub driver: String,
    /// A CPU implementation (llvmpipe / lavapipe, WARP, SwiftShader): never picked
    /// automatically.
    pub is_software: bool,
    pub vendor: u32,
    pub device: u32,
    /// Whether f16 tensors can live on this adapter.
    pub shader_f16: bool,
    /// The largest buffer one tensor may occupy, in bytes.
    pub max_buffer_bytes: u64,
}

/// The wgpu adapters of this machine, software ones included (none without the `wgpu`
/// feature). `Device::Wgpu(i)` is the adapter with `ordinal == i`.
pub fn wgpu_adapters() -> Vec<WgpuAdapterInfo> {
    #[cfg(feature = "wgpu")]
    return crate::wgpu::adapters();
    #[cfg(not(feature = "wgpu"))]
    Vec::new()
}
