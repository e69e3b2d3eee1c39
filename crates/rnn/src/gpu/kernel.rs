//! `KernelManager`: your own CUDA C or WGSL kernels, compiled for a device and run on tensors.
//!
//! Arguments ([`KernelArg`]) are tensors and 32-bit scalars. A tensor the kernel reads is an
//! `Input`; one it writes is an `Output`, which must be a whole contiguous tensor created for
//! it (e.g. [`GpuTensor::zeros`](super::GpuTensor::zeros) or `Tensor::zeros`), never a view or
//! the result of an op recorded for gradients; every tensor sharing its storage sees the
//! writes. Inputs that are strided views are passed as contiguous copies. Elements are in the
//! tensor's dtype (`float` / `f32` for f32 tensors).
//!
//! **CUDA** (`"cuda"`, `--features cuda`): an `extern "C" __global__` function, compiled by
//! NVRTC for the device's own architecture (cached in memory and on disk). Arguments are
//! passed in order: tensors as pointers to their first element, scalars by value
//! (`unsigned int`, `int`, `float`). The launch uses [`LaunchConfig`]'s grid, block and
//! dynamic shared memory. The entry point defaults to the kernel's name.
//!
//! **WGSL** (`"wgsl"`, wgpu devices): a compute shader; the entry point defaults to `main`.
//! Tensors are bound in order at `@group(0) @binding(0)`, `@binding(1)`, ... (exactly their
//! elements, so `arrayLength` is the element count; f32 tensors as `array<f32>`, u32 / u8 as
//! `array<u32>`, i64 as `array<i32>`). When there are scalars, they are all in one buffer at
//! the next binding, in order, one 32-bit word each: declare it as a struct of `u32` / `i32`
//! / `f32` fields, `var<uniform>` or `var<storage, read>`. Every binding must be used by the
//! entry point. [`LaunchConfig::grid`] is the number of workgroups; the workgroup size is the
//! shader's `@workgroup_size`, so `block` and `shared_mem_bytes` are not used.
//!
//! ```
//! use rnn::gpu::{GpuManager, GpuTensor, KernelArg, KernelManager, LaunchConfig};
//! use rnn::ndarray::Array1;
//! # fn main() -> rnn::Result<()> {
//! let manager = GpuManager::new();
//! let Some(gpu) = manager.default_device() else {
//!     println!("no GPU: custom kernels need one");
//!     return Ok(());
//! };
//! let context = manager.create_context(gpu.id)?;
//! let (source, backend) = match gpu.device {
//!     rnn::Device::Cuda(_) => (
//!         r#"extern "C" __global__ void square_plus_one(const float* x, float* y, unsigned int n) {
//!             unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
//!             if (i < n) y[i] = x[i] * x[i] + 1.0f;
//!         }"#,
//!         "cuda",
//!     ),
//!     _ => (
//!         r#"@group(0) @binding(0) var<storage, read> x: array<f32>;
//!         @group(0) @binding(1) var<storage, read_write> y: array<f32>;
//!         struct Params { n: u32 }
//!         @group(0) @binding(2) var<uniform> params: Params;
//!         @compute @workgroup_size(256)
//!         fn main(@builtin(global_invocation_id) id: vec3<u32>) {
//!             if (id.x < params.n) { y[id.x] = x[id.x] * x[id.x] + 1.0; }
//!         }"#,
//!         "wgsl",
//!     ),
//! };
//! let mut kernels = KernelManager::for_context(&context);
//! let kernel = kernels.compile_kernel("square_plus_one", source, backend)?;
//! let x = GpuTensor::from_cpu(&Array1::<f32>::linspace(0.0, 1.0, 1000), gpu.id, context)?;
//! let y = GpuTensor::zeros(&[1000], &context)?;
//! let args = [KernelArg::input(&x), KernelArg::output(&y), KernelArg::U32(1000)];
//! kernels.execute(&kernel, &args, LaunchConfig::linear(1000, 256))?;
//! assert_eq!(y.to_cpu(context)?[[999]], 2.0);
//! # Ok(()) }
//! ```

use std::collections::HashMap;
use std::sync::Arc;

use rnn_core::{Device, Error, Result};

use super::{GpuContext, GpuManager};

/// The language of a kernel's source.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KernelBackend {
    /// CUDA C, for CUDA devices.
    Cuda,
    /// WGSL, for wgpu devices.
    Wgsl,
}

impl KernelBackend {
    /// `"cuda"` or `"wgsl"` (`"wgpu"` is accepted too), in any case.
    pub fn parse(name: &str) -> Result<KernelBackend> {
        match name.trim().to_ascii_lowercase().as_str() {
            "cuda" => Ok(KernelBackend::Cuda),
            "wgsl" | "wgpu" => Ok(KernelBackend::Wgsl),
            _ => Err(Error::invalid(
                "compile_kernel",
                format!("unknown kernel backend '{name}' (expected cuda or wgsl)"),
            )),
        }
    }

    /// Whether kernels in this language run on `device`.
    pub fn runs_on(self, device: Device) -> bool {
        matches!((self, device), (KernelBackend::Cuda, Device::Cuda(_)) | (KernelBackend::Wgsl, Device::Wgpu(_)))
    }
}

impl std::str::FromStr for KernelBackend {
    type Err = Error;
    fn from_str(s: &str) -> Result<KernelBackend> {
        KernelBackend::parse(s)
    }
}

impl std::fmt::Display for KernelBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            KernelBackend::Cuda => "cuda",
            KernelBackend::Wgsl => "wgsl",
        })
    }
}

/// A kernel compiled for one device, to pass to [`KernelManager::execute`].
#[derive(Clone, Debug, PartialEq)]
pub struct CompiledKernel {
    name: String,
    backend: KernelBackend,
    entry_point: String,
    source: Arc<str>,
    device: Device,
}

impl CompiledKernel {
    pub fn name(&self) -> &str {
        &self.name
    }
    pub fn backend(&self) -> KernelBackend {
        self.backend
    }
    pub fn entry_point(&self) -> &str {
        &self.entry_point
    }
    pub fn source(&self) -> &str {
        &self.source
    }
    /// The device it was compiled for and runs on.
    pub fn device(&self) -> Device {
        self.device
    }
}

/// How many threads run a kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaunchConfig {
    /// Blocks (CUDA) or workgroups (WGSL) along x, y, z.
    pub grid: (u32, u32, u32),
    /// Threads per block (CUDA only: a WGSL kernel's workgroup size is in its source).
    pub block: (u32, u32, u32),
    /// Dynamic shared memory per block in bytes (CUDA only).
    pub shared_mem_bytes: u32,
}

impl LaunchConfig {
    pub fn new(grid: (u32, u32, u32), block: (u32, u32, u32)) -> LaunchConfig {
        LaunchConfig { grid, block, shared_mem_bytes: 0 }
    }

    /// Enough blocks of `block` threads along x for `n` threads: `ceil(n / block)` blocks
    /// (at least one). For WGSL, `block` must be the shader's `@workgroup_size`.
    pub fn linear(n: usize, block: u32) -> LaunchConfig {
        let block = block.max(1);
        let blocks = n.div_ceil(block as usize).clamp(1, u32::MAX as usize) as u32;
        LaunchConfig::new((blocks, 1, 1), (block, 1, 1))
    }

    pub fn with_shared_mem(self, bytes: u32) -> LaunchConfig {
        LaunchConfig { shared_mem_bytes: bytes, ..self }
    }
}

/// One kernel argument (see the module documentation for how each backend passes it).
pub use rnn_core::KernelArg;

/// Compiles user kernels and runs them on tensors.
#[derive(Debug, Default)]
pub struct KernelManager {
    device: Option<Device>,
    kernels: HashMap<String, CompiledKernel>,
}

impl KernelManager {
    /// A manager compiling each kernel for the preferred device of its language: the device
    /// `Device::best()` picks when it fits, else the first listed GPU that does.
    pub fn new() -> KernelManager {
        KernelManager::default()
    }

    /// A manager compiling every kernel for `device`.
    pub fn for_device(device: Device) -> KernelManager {
        KernelManager { device: Some(device), kernels: HashMap::new() }
    }

    /// A manager compiling every kernel for the context's GPU.
    pub fn for_context(context: &GpuContext) -> KernelManager {
        KernelManager::for_device(context.device())
    }

    /// Compiles `source` (`backend` is `"cuda"` or `"wgsl"`), with the entry point `name`
    /// for CUDA and `main` for WGSL. Compile errors carry the compiler's message.
    pub fn compile_kernel(&mut self, name: &str, source: &str, backend: &str) -> Result<CompiledKernel> {
        let backend = KernelBackend::parse(backend)?;
        let entry = match backend {
            KernelBackend::Cuda => name,
            KernelBackend::Wgsl => "main",
        };
        self.compile(name, source, backend, entry)
    }

    /// Compiles `source` with the given entry point (the `__global__` function or the WGSL
    /// `@compute` function).
    pub fn compile_kernel_with_entry(
        &mut self,
        name: &str,
        source: &str,
        backend: &str,
        entry_point: &str,
    ) -> Result<CompiledKernel> {
        self.compile(name, source, KernelBackend::parse(backend)?, entry_point)
    }

    fn compile(&mut self, name: &str, source: &str, backend: KernelBackend, entry: &str) -> Result<CompiledKernel> {
        let device = self.device_for(backend)?;
        match device {
            #[cfg(feature = "cuda")]
            Device::Cuda(i) => rnn_core::cuda::compile_user_kernel(i, source, entry)?,
            #[cfg(feature = "wgpu")]
            Device::Wgpu(i) => rnn_core::wgpu::compile_user_kernel(i, source, entry)?,
            #[allow(unreachable_patterns)]
            d => return Err(not_compiled(d)),
        }
        let kernel = CompiledKernel {
            name: name.to_string(),
            backend,
            entry_point: entry.to_string(),
            source: source.into(),
            device,
        };
        self.kernels.insert(name.to_string(), kernel.clone());
        Ok(kernel)
    }

    /// The device kernels in `backend`'s language are compiled for.
    fn device_for(&self, backend: KernelBackend) -> Result<Device> {
        if let Some(d) = self.device {
            if backend.runs_on(d) {
                return Ok(d);
            }
            return Err(Error::invalid("compile_kernel", format!("a {backend} kernel cannot run on {d}")));
        }
        if let Some(d) = Device::best().ok().filter(|d| backend.runs_on(*d)) {
            return Ok(d);
        }
        if let Some(gpu) = GpuManager::new().devices().iter().find(|g| backend.runs_on(g.device)) {
            return Ok(gpu.device);
        }
        match backend {
            // Let the backend say why cuda:0 cannot be used (no driver, not compiled in).
            KernelBackend::Cuda => Ok(Device::Cuda(0)),
            KernelBackend::Wgsl if cfg!(feature = "wgpu") => Err(Error::DeviceNotAvailable(
                "no wgpu GPU found (set RNN_GPU_DEVICE=wgpu:N to use a software adapter)".into(),
            )),
            KernelBackend::Wgsl => Ok(Device::Wgpu(0)),
        }
    }

    /// The kernel last compiled under `name`.
    pub fn kernel(&self, name: &str) -> Option<&CompiledKernel> {
        self.kernels.get(name)
    }

    /// Runs `kernel` on its device with `args`, queued after the work already queued there
    /// (asynchronous: reading an output back waits for it). Every tensor must be on the
    /// kernel's device.
    pub fn execute(&self, kernel: &CompiledKernel, args: &[KernelArg<'_>], launch: LaunchConfig) -> Result<()> {
        match kernel.device {
            #[cfg(feature = "cuda")]
            Device::Cuda(i) => {
                let LaunchConfig { grid, block, shared_mem_bytes } = launch;
                rnn_core::cuda::launch_user_kernel(
                    i,
                    &kernel.source,
                    &kernel.entry_point,
                    args,
                    grid,
                    block,
                    shared_mem_bytes,
                )
            }
            #[cfg(feature = "wgpu")]
            Device::Wgpu(i) => {
                rnn_core::wgpu::launch_user_kernel(i, &kernel.source, &kernel.entry_point, args, launch.grid)
            }
            #[allow(unreachable_patterns)]
            d => Err(not_compiled(d)),
        }
    }
}

/// The error for a device whose backend this build lacks.
fn not_compiled(device: Device) -> Error {
    match device {
        Device::Cuda(_) => Error::NotCompiledWith("cuda"),
        Device::Wgpu(_) => Error::NotCompiledWith("wgpu"),
        Device::Cpu => Error::invalid("KernelManager", "custom kernels run on a GPU, not on the CPU"),
    }
}
