//! The wgpu backend: one portable GPU backend for Vulkan, Metal, DX12 and WebGPU adapters
//! (AMD, Intel, Apple and NVIDIA GPUs). Ops are planned by the shared GPU layer (`gpu/`):
//! this module is the runtime that runs the plans. Kernels are WGSL templates from
//! `rnn-kernels`, compiled once per variant and found by their short key (`context.rs`);
//! buffers come from a per-device pool (`pool.rs`).
//!
//! Element types: f32 everywhere, f16 where the adapter offers `shader-f16`; integer
//! tensors are stored as 32-bit words: u8 as one u32 per element, i64 as i32 (values must
//! fit in i32; uploading a larger one is an error). f64 and bf16 are not supported.
//!
//! Submission: ops are recorded into one command encoder per device and submitted in
//! batches (`batch.rs`): at a read-back, at `synchronize` / `flush`, or after
//! `MAX_BATCH_DISPATCHES` dispatches or `MAX_BATCH_INFO_BYTES` of `Info` words. The host
//! waits for the device only at read-backs and `synchronize`; [`submission_stats`] counts
//! those waits. Index ops check their ids on the device and report a bad one at the next of
//! those sync points (`gpu/deferred.rs`).

mod adapters;
mod batch;
mod context;
mod dtype;
mod kernel_timing;
mod launch;
mod layout;
mod pool;
mod storage;
mod user_kernel;

pub use crate::gpu_memory::MemoryStats;
pub use adapters::{adapters, best_ordinal, find_adapter, WgpuAdapterInfo};
pub use batch::{SubmissionStats, MAX_BATCH_DISPATCHES, MAX_BATCH_INFO_BYTES};
pub use storage::WgpuStorage;
pub use user_kernel::{compile_user_kernel, launch_user_kernel};

/// Memory statistics of the pool of wgpu device `ordinal` (an error if it cannot be opened).
pub fn memory_stats(ordinal: usize) -> crate::Result<MemoryStats> {
    Ok(context::context(ordinal)?.pool.stats())
}

/// Frees the buffers the pool of wgpu device `ordinal` keeps for reuse (and the cached bind
/// groups that refer to them).
pub fn empty_cache(ordinal: usize) -> crate::Result<()> {
    context::context(ordinal)?.empty_cache();
    Ok(())
}

/// Submits the ops recorded on wgpu device `ordinal` and blocks until they have finished.
/// Index checks pending on this thread are evaluated in that wait (`gpu/deferred.rs`): a bad
/// id of an earlier index op is returned here as `Error::IndexOutOfRange`.
pub fn synchronize(ordinal: usize) -> crate::Result<()> {
    let ctx = context::context(ordinal)?;
    crate::gpu::deferred::synchronize::<WgpuStorage>(ordinal, || ctx.synchronize())
}

/// Submits the ops recorded on wgpu device `ordinal` without waiting for them (benchmarks
/// use it to time the host's side of ops). Ops are submitted anyway at the next read-back,
/// `synchronize`, or once a batch is full; this only submits them sooner.
pub fn flush(ordinal: usize) -> crate::Result<()> {
    context::context(ordinal)?.flush()
}

/// Submission counters of wgpu device `ordinal` since it was opened: submits, host syncs
/// (waits for the device), dispatches and bind groups created / reused.
pub fn submission_stats(ordinal: usize) -> crate::Result<SubmissionStats> {
    Ok(context::context(ordinal)?.counters.stats())
}

/// How many times the host has waited for wgpu device `ordinal` (read-backs and
/// `synchronize`) since it was opened; a training step between progress updates adds none.
pub fn sync_count(ordinal: usize) -> crate::Result<u64> {
    Ok(submission_stats(ordinal)?.syncs)
}

/// Destroys wgpu device `ordinal` now, as a driver reset would: its buffers are freed and
/// every later op on its tensors returns `Error::DeviceNotAvailable` (the device counts as
/// lost for the rest of the process).
pub fn destroy(ordinal: usize) -> crate::Result<()> {
    let ctx = context::context(ordinal)?;
    ctx.device.destroy();
    // The loss is reported through a callback when the device is next polled.
    let _ = ctx.device.poll(::wgpu::PollType::wait_indefinitely());
    Ok(())
}

/// Median seconds of one device-to-device copy of `bytes` bytes on wgpu device `ordinal`
/// (submitted and waited for, like an op): the bandwidth reference of `rnn bench gpu`.
pub fn time_buffer_copy(ordinal: usize, bytes: u64, calls: usize) -> crate::Result<f64> {
    let ctx = context::context(ordinal)?;
    let bytes = bytes.next_multiple_of(4);
    let (src, dst) = (pool::alloc(&ctx, bytes)?, pool::alloc(&ctx, bytes)?);
    ctx.flush()?;
    let mut times = Vec::with_capacity(calls);
    for _ in 0..calls.max(1) + 2 {
        let start = std::time::Instant::now();
        let mut encoder = ctx.device.create_command_encoder(&Default::default());
        encoder.copy_buffer_to_buffer(src.buffer(), 0, dst.buffer(), 0, bytes);
        ctx.queue.submit([encoder.finish()]);
        batch::Counters::bump(&ctx.counters.submits);
        ctx.wait()?;
        times.push(start.elapsed().as_secs_f64());
    }
    // The first two calls are warm-up.
    let mut timed = times.split_off(2);
    timed.sort_by(f64::total_cmp);
    Ok(timed[timed.len() / 2])
}

/// Every kernel source the backend can launch on `wgpu:ordinal`, by variant name, for compile
/// checks (the f16 ones only where the adapter has `shader-f16`).
pub fn kernel_variants(ordinal: usize) -> crate::Result<Vec<(String, String)>> {
    let target = context::context(ordinal)?.target;
    Ok(crate::gpu::variants::all(&target).into_iter().map(|(name, source)| (name, source.text())).collect())
}

/// Turns per-kernel device timing on (resetting its total) or off on wgpu device `ordinal`.
/// While it is on, every dispatch is stamped by the device at its start and end (timestamp
/// queries) and every submitted batch is waited for to read its stamps, so timed work runs
/// slower; [`kernel_time`] is the sum of the kernels' own times. For profiling, e.g. to
/// compare a training step's wall time with the time its kernels take. `Err` where the
/// adapter has no timestamp queries.
pub fn set_kernel_timing(ordinal: usize, on: bool) -> crate::Result<()> {
    context::context(ordinal)?.set_kernel_timing(on)
}

/// The summed device time of the kernels submitted on wgpu device `ordinal` since
/// [`set_kernel_timing`] turned timing on (call `synchronize` first to include queued work).
pub fn kernel_time(ordinal: usize) -> crate::Result<std::time::Duration> {
    let nanos = context::context(ordinal)?.kernel_nanos()?;
    Ok(std::time::Duration::from_nanos(nanos.round() as u64))
}
