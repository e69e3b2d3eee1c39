//! Splitting elementwise work over threads. Small tensors run serially: spawning tasks
//! costs more than a few thousand additions.

use rayon::prelude::*;

/// Below this many elements a loop runs on the calling thread.
pub const PAR_THRESHOLD: usize = 1 << 15;

/// Calls `f(chunk, first_index)` on chunks of `out`, in parallel when `out` is large.
pub fn par_fill<T: Send>(out: &mut [T], f: impl Fn(&mut [T], usize) + Sync + Send) {
    let n = out.len();
    if n < PAR_THRESHOLD {
        f(out, 0);
        return;
    }
    let threads = rayon::current_num_threads().max(1);
    // A few chunks per thread balances uneven cores without tiny tasks.
    let chunk = n.div_ceil(threads * 4).max(PAR_THRESHOLD / 4);
    out.par_chunks_mut(chunk).enumerate().for_each(|(i, c)| f(c, i * chunk));
}

/// A vector of `n` elements whose every element the caller overwrites before reading.
pub fn uninit_vec<T: Copy + Default>(n: usize) -> Vec<T> {
    // Zero-filling is memory traffic as large as the op itself; `Default` keeps this safe
    // for every dtype while the allocator hands back zeroed pages for large sizes.
    vec![T::default(); n]
}
