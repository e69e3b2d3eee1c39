//! Launching kernel plans and products on a CUDA device. Every kernel is
//! `extern "C" __global__ void kernel(const Info info, ...buffers)`: `info` (sizes and
//! layouts, see `Target::info` and common.cuh) is passed by value, so a launch needs no
//! host-to-device copy.

use cudarc::driver::{DevicePtr, LaunchConfig, PushKernelArg};

use super::blaslt::{self, Pointers};
use super::context::driver_err;
use super::storage::CudaStorage;
use crate::gpu::gemm::GemmLaunch;
use crate::gpu::plan::KernelPlan;
use crate::gpu::target::CUDA_INFO_WORDS;
use crate::gpu::{GemmBuffers, GemmOutcome};
use crate::{Error, Result};

/// The kernel argument holding sizes and layouts.
#[repr(C)]
#[derive(Clone, Copy)]
struct Info([u64; CUDA_INFO_WORDS]);

// SAFETY: a plain array of u64, laid out as the C struct `Info` in common.cuh.
unsafe impl cudarc::driver::DeviceRepr for Info {}

/// Queues `plan` on the device of `args[0]`.
pub(crate) fn launch(plan: &KernelPlan, args: &[&CudaStorage]) -> Result<()> {
    let dev = args.first().ok_or_else(|| Error::Msg(format!("internal: {} launch without buffers", plan.op)))?.dev();
    // A plan's shared memory is a function of its source, so the cap is raised once.
    let what = (plan.op, plan.variant.as_str());
    let f = dev.function_keyed(
        plan.source.key(),
        "kernel",
        || plan.source.text(),
        |f| dev.allow_dynamic_shared(f, plan.dims.shared_bytes, what),
    )?;
    let mut words = [0u64; CUDA_INFO_WORDS];
    // `Target::info` keeps CUDA plans within CUDA_INFO_WORDS.
    words[..plan.info.len()].copy_from_slice(&plan.info);
    let info = Info(words);
    let mut builder = dev.stream.launch_builder(&f);
    builder.arg(&info);
    for b in args {
        builder.arg(b.slice());
    }
    let d = plan.dims;
    let config = LaunchConfig {
        grid_dim: (d.grid[0], d.grid[1], d.grid[2]),
        block_dim: (d.block[0], d.block[1], d.block[2]),
        shared_mem_bytes: d.shared_bytes,
    };
    if dev.debug {
        tracing::debug!(ordinal = dev.ordinal, variant = %plan.variant, grid = ?config.grid_dim, block = ?config.block_dim, "cuda launch");
    }
    // SAFETY: every template's parameter list is (Info, buffers...) in the plan's order, and
    // the buffers are at least as large as the layouts in `info` reach (checked by the plan
    // builders against the storages).
    unsafe { builder.launch(config) }.map_err(driver_err(dev.ordinal, "kernel launch"))?;
    Ok(())
}

/// The device address of `s`'s element `offset`.
pub(crate) fn address(s: &CudaStorage, offset: usize) -> u64 {
    // Event tracking is off on every device (one stream each), so the returned guard records
    // nothing and may be dropped at once.
    let (ptr, _) = s.slice().device_ptr(&s.dev().stream);
    ptr + (offset * s.dtype_size()) as u64
}

/// Queues the product `g` through cuBLASLt.
pub(crate) fn gemm(g: &GemmLaunch, b: GemmBuffers<'_, CudaStorage>) -> Result<GemmOutcome> {
    let pointers = Pointers {
        a: address(b.a, g.a.offset),
        b: address(b.b, g.b.offset),
        d: address(b.d, g.d.offset),
        bias: g.bias.zip(b.bias).map(|((_, _, offset), s)| address(s, offset)),
    };
    // The operands stay alive until the product is enqueued; later reuse of their buffers is
    // ordered after it by the device's single stream.
    blaslt::run(b.a.dev(), g, &pointers)
}
