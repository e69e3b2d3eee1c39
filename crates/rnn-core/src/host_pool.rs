//! The caching allocator of host tensor buffers. A CPU tensor's buffer goes back to a
//! per-size-class free list when the tensor is dropped and is handed out again to the next
//! request of that class, so a training step after the first asks the system for no new
//! memory: no page faults, no zeroing by the kernel, no `munmap`. This is the host twin of
//! the GPU pool (`gpu_pool.rs`), with the same size classes.
//!
//! `RNN_CPU_CACHE_MB` caps the cached bytes (default 1024 MiB); `0` turns caching off.
//! Buffers under `MIN_POOLED_BYTES` bypass the cache: the system allocator's own free lists
//! serve them as fast.

use std::alloc::Layout;
use std::collections::HashMap;
use std::ptr::NonNull;
use std::sync::{Mutex, OnceLock};

use crate::{Error, Result, WithDType};

/// Byte counts and request counts of the host buffer cache.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HostMemoryStats {
    /// Requests served from the cache.
    pub hits: u64,
    /// Requests that allocated a new buffer from the system.
    pub misses: u64,
    /// Buffers taken back into the cache when their tensor was dropped.
    pub returned: u64,
    /// Bytes in free buffers kept for reuse now.
    pub cached: u64,
    /// The largest `cached` seen.
    pub peak_cached: u64,
    /// The most bytes the cache keeps (`RNN_CPU_CACHE_MB`); 0 when caching is off.
    pub cap: u64,
}

/// Smaller buffers come straight from the system allocator.
pub const MIN_POOLED_BYTES: usize = 4096;
const DEFAULT_CAP_MB: u64 = 1024;

/// The size a request of `bytes` is rounded up to: at least 256 bytes, then to an eighth of
/// the next power of two, so that at most 1/8 of a buffer is wasted.
pub(crate) fn size_class(bytes: u64) -> u64 {
    let bytes = bytes.max(256);
    let step = (bytes.next_power_of_two() / 8).max(256);
    bytes.div_ceil(step) * step
}

/// A free block of `(align, class)` bytes, owned by the pool, whose first `init` bytes are
/// known to be initialized (the length of the vector it came from).
struct Block {
    ptr: NonNull<u8>,
    init: usize,
}
// SAFETY: a free block is plain memory that no one else references.
unsafe impl Send for Block {}

/// `(alignment, class bytes)`: the allocation layout of every block in one free list.
type Key = (usize, usize);

#[derive(Default)]
struct State {
    free: HashMap<Key, Vec<Block>>,
    stats: HostMemoryStats,
}

/// One cache. The library uses a single global one (`global()`); tests make their own.
pub(crate) struct HostPool {
    cap: u64,
    // One lock for the free lists and the counters: an op takes it once for its output
    // (on the thread that runs the op, not inside parallel loops) and holds it for a hash
    // lookup, so rayon's threads do not queue on it.
    state: Mutex<State>,
}

/// What a request wants in the buffer it gets.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Fill {
    /// `n` zeros.
    Zeros,
    /// `n` valid elements of unspecified value (a reused buffer's old contents, or zeros):
    /// for callers that overwrite every element.
    Overwrite,
    /// Length 0, capacity >= `n`: for callers that push or write the spare capacity.
    Empty,
}

fn out_of_memory<T>(n: usize) -> Error {
    Error::host_out_of_memory(n.saturating_mul(std::mem::size_of::<T>()))
}

/// Whether `Vec<T>` can live in a pooled block: the block's size is a multiple of 256, so
/// types whose size equals their alignment (every tensor dtype) fill it exactly.
fn poolable<T>() -> bool {
    let size = std::mem::size_of::<T>();
    size > 0 && size == std::mem::align_of::<T>()
}

impl HostPool {
    pub fn new(cap_bytes: u64) -> Self {
        let stats = HostMemoryStats { cap: cap_bytes, ..Default::default() };
        HostPool { cap: cap_bytes, state: Mutex::new(State { stats, ..Default::default() }) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn stats(&self) -> HostMemoryStats {
        self.lock().stats
    }

    /// `n` zeros.
    pub fn zeros<T: bytemuck::Zeroable>(&self, n: usize) -> Result<Vec<T>> {
        // SAFETY: all-zero bytes are a valid `T` (Zeroable).
        unsafe { self.take(n, Fill::Zeros) }
    }

    /// `n` elements of unspecified value (old contents of a reused buffer, or zeros).
    pub fn for_overwrite<T: bytemuck::Pod>(&self, n: usize) -> Result<Vec<T>> {
        // SAFETY: every initialized bit pattern is a valid `T` (Pod).
        unsafe { self.take(n, Fill::Overwrite) }
    }

    /// An empty vector with room for at least `n` elements.
    pub fn with_capacity<T>(&self, n: usize) -> Result<Vec<T>> {
        // SAFETY: `Empty` exposes no element.
        unsafe { self.take(n, Fill::Empty) }
    }

    /// A vector for `n` elements, filled as `fill` says; `Error::OutOfMemory` when the
    /// machine cannot hold it.
    ///
    /// SAFETY: for `Fill::Zeros` all-zero bytes must be a valid `T`; for `Fill::Overwrite`
    /// every initialized bit pattern must be (zeros included).
    unsafe fn take<T>(&self, n: usize, fill: Fill) -> Result<Vec<T>> {
        let size = std::mem::size_of::<T>();
        let bytes = n.checked_mul(size).ok_or_else(|| out_of_memory::<T>(n))?;
        if self.cap == 0 || !poolable::<T>() || bytes < MIN_POOLED_BYTES {
            // SAFETY: the caller's contract is `system_vec`'s.
            return unsafe { system_vec(n, fill) };
        }
        let key = (std::mem::align_of::<T>(), size_class(bytes as u64) as usize);
        let (block, fresh) = match self.pop_free(key) {
            Some(block) => (block, false),
            // A new block is zeroed: all its bytes are initialized.
            None => (Block { ptr: self.allocate(key)?, init: key.1 }, true),
        };
        // Bytes that must hold zeros: all `n` elements for `Zeros`; for `Overwrite`, those
        // past what the block's last owner initialized (never read uninitialized memory).
        let zero_from = match fill {
            Fill::Empty => bytes,
            Fill::Zeros if fresh => bytes,
            Fill::Zeros => 0,
            Fill::Overwrite => block.init.min(bytes),
        };
        // SAFETY: the block has layout `(key.1 bytes, align_of::<T>())` from the global
        // allocator (size == align for T: exactly `key.1 / size` elements) and no other
        // owner. Its first `init` bytes are initialized (values a tensor dtype wrote, see
        // `release`), the rest up to `n` elements is zeroed here before `set_len` exposes
        // it, and the caller vouches that such bytes are valid `T`s.
        unsafe {
            let base = block.ptr.as_ptr();
            if zero_from < bytes {
                std::ptr::write_bytes(base.add(zero_from), 0, bytes - zero_from);
            }
            let mut v = Vec::from_raw_parts(base as *mut T, 0, key.1 / size);
            if fill != Fill::Empty {
                v.set_len(n);
            }
            Ok(v)
        }
    }

    fn pop_free(&self, key: Key) -> Option<Block> {
        let mut st = self.lock();
        let block = st.free.get_mut(&key).and_then(Vec::pop)?;
        st.stats.cached -= key.1 as u64;
        st.stats.hits += 1;
        Some(block)
    }

    /// A new, zeroed block of layout `key` from the system (a large zeroed block maps fresh
    /// pages without writing them).
    fn allocate(&self, key: Key) -> Result<NonNull<u8>> {
        let layout = Layout::from_size_align(key.1, key.0).map_err(|_| Error::host_out_of_memory(key.1))?;
        // SAFETY: the layout has a non-zero size (at least MIN_POOLED_BYTES).
        let raw = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).ok_or_else(|| Error::host_out_of_memory(key.1))?;
        advise_huge_pages(raw, key.1);
        self.lock().stats.misses += 1;
        Ok(ptr)
    }

    /// Takes back `v`'s buffer for reuse, or frees it (not of a size class, caching off, or
    /// the cap reached). Any vector of a tensor dtype whose capacity is exactly a size class
    /// has the layout of that class's blocks, wherever it was allocated; its bytes are all
    /// initialized (see `take`).
    pub fn release<T: WithDType>(&self, v: Vec<T>) {
        let bytes = v.capacity() * std::mem::size_of::<T>();
        let pooled = poolable::<T>() && bytes >= MIN_POOLED_BYTES && size_class(bytes as u64) == bytes as u64;
        if self.cap == 0 || !pooled {
            return;
        }
        let mut st = self.lock();
        if st.stats.cached + bytes as u64 > self.cap {
            return;
        }
        st.stats.cached += bytes as u64;
        st.stats.peak_cached = st.stats.peak_cached.max(st.stats.cached);
        st.stats.returned += 1;
        let mut v = std::mem::ManuallyDrop::new(v);
        // SAFETY: a Vec's pointer is non-null; the block is the pool's from here on.
        let ptr = unsafe { NonNull::new_unchecked(v.as_mut_ptr() as *mut u8) };
        let block = Block { ptr, init: v.len() * std::mem::size_of::<T>() };
        st.free.entry((std::mem::align_of::<T>(), bytes)).or_default().push(block);
    }

    /// Frees every cached block.
    pub fn empty_cache(&self) {
        let free = std::mem::take(&mut self.lock().free);
        let mut freed = 0u64;
        for ((align, bytes), blocks) in free {
            for block in blocks {
                // SAFETY: every free block was allocated with exactly this layout.
                unsafe { std::alloc::dealloc(block.ptr.as_ptr(), Layout::from_size_align_unchecked(bytes, align)) };
                freed += bytes as u64;
            }
        }
        self.lock().stats.cached -= freed;
    }
}

impl Drop for HostPool {
    fn drop(&mut self) {
        self.empty_cache();
    }
}

/// A vector from the system allocator, for requests the cache does not serve.
///
/// SAFETY: as `HostPool::take` (the elements it exposes are zeros).
unsafe fn system_vec<T>(n: usize, fill: Fill) -> Result<Vec<T>> {
    if fill == Fill::Empty {
        let mut v = Vec::new();
        v.try_reserve_exact(n).map_err(|_| out_of_memory::<T>(n))?;
        return Ok(v);
    }
    if n == 0 || std::mem::size_of::<T>() == 0 {
        return Ok(Vec::new());
    }
    let layout = Layout::array::<T>(n).map_err(|_| out_of_memory::<T>(n))?;
    // SAFETY: the layout has non-zero size; the caller vouches that zeros are valid `T`s; a
    // non-null block of `Layout::array::<T>(n)` from the global allocator is exactly what
    // `Vec::from_raw_parts` with length and capacity `n` takes ownership of.
    unsafe {
        let ptr = std::alloc::alloc_zeroed(layout) as *mut T;
        if ptr.is_null() {
            return Err(out_of_memory::<T>(n));
        }
        advise_huge_pages(ptr as *mut u8, layout.size());
        Ok(Vec::from_raw_parts(ptr, n, n))
    }
}

/// Asks the kernel to back the 2 MiB-aligned part of a large block with huge pages: a
/// 64 MiB buffer then takes 32 page faults instead of 16384 (the faults, not the
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

/// The cap from `RNN_CPU_CACHE_MB` (MiB; `0` turns caching off), or the default.
fn cap_from_env() -> u64 {
    let mb = std::env::var("RNN_CPU_CACHE_MB").ok().and_then(|v| v.trim().parse::<u64>().ok());
    mb.unwrap_or(DEFAULT_CAP_MB).saturating_mul(1 << 20)
}

fn global() -> &'static HostPool {
    static POOL: OnceLock<HostPool> = OnceLock::new();
    POOL.get_or_init(|| HostPool::new(cap_from_env()))
}

/// `n` zeros from the host cache.
pub(crate) fn zeros<T: bytemuck::Zeroable>(n: usize) -> Result<Vec<T>> {
    global().zeros(n)
}

/// `n` elements of unspecified value from the host cache, for a caller that overwrites them.
pub(crate) fn for_overwrite<T: bytemuck::Pod>(n: usize) -> Result<Vec<T>> {
    global().for_overwrite(n)
}

/// An empty vector with room for `n` elements from the host cache.
pub(crate) fn with_capacity<T>(n: usize) -> Result<Vec<T>> {
    global().with_capacity(n)
}

/// Hands a tensor buffer back to the host cache.
pub(crate) fn release<T: WithDType>(v: Vec<T>) {
    global().release(v)
}

/// The host buffer cache's statistics (see `HostMemoryStats`).
pub fn cpu_memory_stats() -> HostMemoryStats {
    global().stats()
}

/// Frees the host buffers kept for reuse (buffers in use are not affected).
pub fn cpu_empty_cache() {
    global().empty_cache()
}

#[cfg(test)]
mod tests;
