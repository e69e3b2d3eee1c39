//! User-written CUDA C kernels run on tensors' buffers.
//!
//! The source is compiled as given by NVRTC for the device's own architecture (through the
//! same memory and disk CUBIN cache as the built-in kernels; `common.cuh` is not prepended) and
//! launched on the device's stream, so it runs after every op already queued there.
//!
//! Arguments are passed in order: a tensor as a pointer to its first element (`float*` for
//! f32, `double*`, `__half*`, `__nv_bfloat16*`, `unsigned int*` for u32, `unsigned char*` for
//! u8, `long long*` for i64), scalars by value (`unsigned int`, `int`, `float`).
//!
//! ```cuda
//! extern "C" __global__ void add(const float* a, const float* b, float* out, unsigned int n) {
//!     unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
//!     if (i < n) out[i] = a[i] + b[i];
//! }
//! ```

use cudarc::driver::{LaunchConfig, PushKernelArg};

use super::context::{device, driver_err};
use super::storage::CudaStorage;
use crate::gpu::user_kernel::bound_storage;
use crate::{Device, Error, KernelArg, Result};

const OP: &str = "user kernel";

/// Compiles the kernel `entry` of the CUDA C `source` for `cuda:ordinal` and loads it
/// (cached), returning NVRTC's log when it does not compile. Without a CUDA driver this is
/// `Error::DeviceNotAvailable`.
pub fn compile_user_kernel(ordinal: usize, source: &str, entry: &str) -> Result<()> {
    device(ordinal)?.function(source, entry).map(|_| ())
}

/// One kernel parameter, owned until the launch.
enum Param {
    Buffer(usize),
    U32(u32),
    I32(i32),
    F32(f32),
}

/// Launches the kernel `entry` of the CUDA C `source` on `cuda:ordinal` with `grid` blocks of
/// `block` threads and `shared_mem_bytes` of dynamic shared memory, passing `args` in order
/// (see the module documentation). More than 48 KiB of shared memory per block (dynamic plus
/// the kernel's static) is allowed up to the device's opt-in maximum (227 KiB on Hopper);
/// more than that is `Error::InvalidArgument`. Asynchronous, like every op: launch errors are
/// returned here, errors inside the kernel at the next synchronizing call.
pub fn launch_user_kernel(
    ordinal: usize,
    source: &str,
    entry: &str,
    args: &[KernelArg<'_>],
    grid: (u32, u32, u32),
    block: (u32, u32, u32),
    shared_mem_bytes: u32,
) -> Result<()> {
    let dev = device(ordinal)?;
    let mut storages = Vec::new();
    let mut params = Vec::with_capacity(args.len());
    for arg in args {
        params.push(match *arg {
            KernelArg::Input(t) | KernelArg::Output(t) => {
                storages.push(bound_storage::<CudaStorage>(
                    t,
                    matches!(arg, KernelArg::Output(_)),
                    Device::Cuda(ordinal),
                )?);
                Param::Buffer(storages.len() - 1)
            }
            KernelArg::U32(v) => Param::U32(v),
            KernelArg::I32(v) => Param::I32(v),
            KernelArg::F32(v) => Param::F32(v),
        });
    }
    let dims = [grid.0, grid.1, grid.2, block.0, block.1, block.2];
    if dims.contains(&0) {
        let msg = format!("grid {grid:?} and block {block:?} must have no zero dimension");
        return Err(Error::invalid(OP, msg));
    }
    let f = dev.function(source, entry)?;
    dev.allow_dynamic_shared(&f, shared_mem_bytes, (OP, entry))?;
    let mut builder = dev.stream.launch_builder(&f);
    for p in &params {
        match p {
            Param::Buffer(i) => builder.arg(storages[*i].slice()),
            Param::U32(v) => builder.arg(v),
            Param::I32(v) => builder.arg(v),
            Param::F32(v) => builder.arg(v),
        };
    }
    let config = LaunchConfig { grid_dim: grid, block_dim: block, shared_mem_bytes };
    if dev.debug {
        tracing::debug!(ordinal, entry, grid = ?grid, block = ?block, "cuda user kernel launch");
    }
    // SAFETY: the parameter list is the caller's contract with its kernel (documented above).
    // Every buffer is alive when the launch is queued (`storages`); one given back to the pool
    // afterwards is only reused by later work on the same stream, which runs after this kernel.
    unsafe { builder.launch(config) }.map_err(driver_err(ordinal, "user kernel launch"))?;
    Ok(())
}

/// Hands `work` the stream of `cuda:ordinal` and the device addresses of the tensors' first
/// elements, for libraries that queue their own work on the device (NCCL collectives): what
/// `work` queues on that stream runs after every op already queued and before every later
/// one, like a kernel launch. `args` are checked as by [`launch_user_kernel`] (an input view
/// is first copied to a contiguous buffer; an output is a whole fresh tensor). Using the
/// addresses is the caller's unsafe contract: only on this stream, only inside `work`.
pub fn with_device_buffers<R>(
    ordinal: usize,
    args: &[KernelArg<'_>],
    work: impl FnOnce(&cudarc::driver::CudaStream, &[cudarc::driver::sys::CUdeviceptr]) -> R,
) -> Result<R> {
    use cudarc::driver::DevicePtr;
    let dev = device(ordinal)?;
    let storages = args
        .iter()
        .map(|arg| match *arg {
            KernelArg::Input(t) => bound_storage::<CudaStorage>(t, false, Device::Cuda(ordinal)),
            KernelArg::Output(t) => bound_storage::<CudaStorage>(t, true, Device::Cuda(ordinal)),
            _ => Err(Error::invalid(OP, "with_device_buffers takes tensors only")),
        })
        .collect::<Result<Vec<_>>>()?;
    // The guards record the buffers' use on the stream when dropped, after `work`.
    let (addresses, _guards): (Vec<_>, Vec<_>) = storages.iter().map(|s| s.slice().device_ptr(&dev.stream)).unzip();
    Ok(work(&dev.stream, &addresses))
}
