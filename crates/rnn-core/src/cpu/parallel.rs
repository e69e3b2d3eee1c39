//! Splitting elementwise work over threads. Small tensors run serially: spawning tasks
//! costs more than a few thousand additions.

use rayon::prelude::*;

/// Work below which a loop runs on the calling thread, in units of one cheap elementwise
/// operation (an add, a relu: about 0.1 ns of memory-bound work). Handing work to the
/// thread pool from outside it costs 10-30 us (a futex wake-up and wait each way);
/// measured on 2 cores, relu / add gain from threads only above ~1M elements.
pub const PAR_WORK: usize = 1 << 21;

/// The work of one element of an op that computes a transcendental function (exp, tanh,
/// erf ...): measured about 30x a relu, so exp goes parallel from ~64K elements.
pub const HEAVY: usize = 32;

/// `PAR_WORK` on a thread whose pool's other workers are looking for work already (inside
/// `on_cpu_workers`, see `cpu_workers`): handing them a chunk then costs a push onto a
/// queue they are polling (about a microsecond), not a wake-up call, so a job of 64K adds
/// is worth splitting. Measured on 2 cores, with the ops of a training step at 128 x 512
/// or 2048 x 128 (a ReLU gradient, a bias sum, a LayerNorm): the char-GPT step of
/// `rnn train --model gpt` takes about 7% less time than with `PAR_WORK` there
/// (`bench/results/2026-11-30-cpu-awake-split-2core-intel-r-xeon-r-processor-2-80ghz.md`).
pub const AWAKE_PAR_WORK: usize = 1 << 16;

thread_local! {
    /// Whether this thread runs an `on_cpu_workers` job while the other workers loop.
    static OTHERS_AWAKE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// The work from which a job on this thread splits over the thread pool: `PAR_WORK`, or
/// `AWAKE_PAR_WORK` while the pool's other workers are awake.
pub fn par_work() -> usize {
    if OTHERS_AWAKE.with(std::cell::Cell::get) {
        AWAKE_PAR_WORK
    } else {
        PAR_WORK
    }
}

/// Marks whether the pool's other workers are awake for this thread's job; returns the
/// previous mark (to restore).
pub(crate) fn mark_others_awake(awake: bool) -> bool {
    OTHERS_AWAKE.with(|c| c.replace(awake))
}

/// Calls `f(chunk, first_index)` on chunks of `out`, in parallel when the whole job (each
/// item costing `work_per_item` units, see `par_work`) is worth it.
pub fn par_fill<T: Send>(out: &mut [T], work_per_item: usize, f: impl Fn(&mut [T], usize) + Sync + Send) {
    let n = out.len();
    let work_per_item = work_per_item.max(1);
    let par_work = par_work();
    if n.saturating_mul(work_per_item) < par_work {
        f(out, 0);
        return;
    }
    let threads = rayon::current_num_threads().max(1);
    // A few chunks per thread balances uneven cores without tiny tasks.
    let chunk = n.div_ceil(threads * 4).max(par_work / 4 / work_per_item).max(1);
    out.par_chunks_mut(chunk).enumerate().for_each(|(i, c)| f(c, i * chunk));
}

/// An output block shared by the tasks that write it, each its own disjoint part (a stripe,
/// a rectangle): the raw pointer the tasks offset into.
#[derive(Clone, Copy)]
pub(super) struct SharedOut<T>(pub(super) *mut T);

impl<T> SharedOut<T> {
    /// The element `offset` places in (a method, so that closures capture the whole
    /// `SharedOut`, which is `Send`, not its raw pointer field).
    ///
    /// SAFETY: `offset` must lie inside the block.
    pub(super) unsafe fn at(self, offset: usize) -> *mut T {
        // SAFETY: the caller's guarantee.
        unsafe { self.0.add(offset) }
    }
}

// SAFETY: the tasks write disjoint elements (values of a `Send` type), and the block
// outlives them (their owners join them before returning).
unsafe impl<T: Send> Send for SharedOut<T> {}
// SAFETY: as for `Send`: shared only to hand each task its own part.
unsafe impl<T: Send> Sync for SharedOut<T> {}

/// `n` zeros, or `Error::OutOfMemory` when the machine cannot hold them (an op's output
/// size comes from user shapes, so a failed allocation must be an error, not an abort).
/// From the host buffer cache (see `host_pool`).
pub fn zeroed_vec<T: bytemuck::Zeroable>(n: usize) -> crate::Result<Vec<T>> {
    crate::host_pool::zeros(n)
}

/// `n` elements for an output the caller overwrites in full, from the host buffer cache:
/// for a tensor dtype, of unspecified value (a reused buffer's old contents: no zeroing
/// pass); for other types (bool masks, pairs), zeros.
pub fn output_vec<T: bytemuck::Zeroable + 'static>(n: usize) -> crate::Result<Vec<T>> {
    use half::{bf16, f16};
    use std::any::TypeId;
    macro_rules! overwrite_as {
        ($($dtype:ty),*) => {$(
            if TypeId::of::<T>() == TypeId::of::<$dtype>() {
                let v = std::mem::ManuallyDrop::new(crate::host_pool::for_overwrite::<$dtype>(n)?);
                // SAFETY: `T` is `$dtype` (the same TypeId): this only renames the type.
                return Ok(unsafe { Vec::from_raw_parts(v.as_ptr() as *mut T, v.len(), v.capacity()) });
            }
        )*};
    }
    overwrite_as!(u8, u32, i64, f16, bf16, f32, f64);
    zeroed_vec(n)
}
