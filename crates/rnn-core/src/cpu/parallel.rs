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

/// Calls `f(chunk, first_index)` on chunks of `out`, in parallel when the whole job (each
/// item costing `work_per_item` units, see `PAR_WORK`) is worth it.
pub fn par_fill<T: Send>(out: &mut [T], work_per_item: usize, f: impl Fn(&mut [T], usize) + Sync + Send) {
    let n = out.len();
    let work_per_item = work_per_item.max(1);
    if n.saturating_mul(work_per_item) < PAR_WORK {
        f(out, 0);
        return;
    }
    let threads = rayon::current_num_threads().max(1);
    // A few chunks per thread balances uneven cores without tiny tasks.
    let chunk = n.div_ceil(threads * 4).max(PAR_WORK / 4 / work_per_item).max(1);
    out.par_chunks_mut(chunk).enumerate().for_each(|(i, c)| f(c, i * chunk));
}

/// `n` zeros, or `Error::OutOfMemory` when the machine cannot hold them (an op's output
/// size comes from user shapes, so a failed allocation must be an error, not an abort).
/// Zeroed allocation hands back fresh pages for large sizes without writing them twice.
pub fn zeroed_vec<T: bytemuck::Zeroable>(n: usize) -> crate::Result<Vec<T>> {
    let oom = || crate::Error::host_out_of_memory(n.saturating_mul(std::mem::size_of::<T>()));
    if n == 0 || std::mem::size_of::<T>() == 0 {
        return Ok(Vec::new());
    }
    let layout = std::alloc::Layout::array::<T>(n).map_err(|_| oom())?;
    // SAFETY: the layout has non-zero size; all-zero bytes are a valid `T` (Zeroable); a
    // non-null block of `Layout::array::<T>(n)` from the global allocator is exactly what
    // `Vec::from_raw_parts` with length and capacity `n` takes ownership of.
    unsafe {
        let ptr = std::alloc::alloc_zeroed(layout) as *mut T;
        if ptr.is_null() {
            return Err(oom());
        }
        advise_huge_pages(ptr as *mut u8, layout.size());
        Ok(Vec::from_raw_parts(ptr, n, n))
    }
}

/// Asks the kernel to back the 2 MiB-aligned part of a large block with huge pages: a
/// 64 MiB op output then takes 32 page faults instead of 16384 (the faults, not the
/// arithmetic, were most of an elementwise op's time). Only a hint; failure is harmless.
fn advise_huge_pages(ptr: *mut u8, len: usize) {
    #[cfg(target_os = "linux")]
    {
        const HUGE: usize = 2 << 20;
        if len < 4 * HUGE {
            return;
        }
        let start = (ptr as usize).next_multiple_of(HUGE);
        let end = (ptr as usize + len) / HUGE * HUGE;
        // SAFETY: the range lies inside the block just allocated; MADV_HUGEPAGE changes
        // only how pages are backed, never their contents.
        unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE) };
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (ptr, len);
}
