//! CUDA buffers through the shared caching allocator (`gpu_pool.rs`). Out of memory frees
//! the cache and retries once before reporting `Error::OutOfMemory`; any other allocation
//! error is the driver error it is.

use std::sync::Arc;

use cudarc::driver::sys::CUresult;
use cudarc::driver::{CudaSlice, DriverError};

use super::context::{driver_err, CudaDevice};
use crate::gpu_pool::size_class;
use crate::{Error, Result};

pub(crate) type BufferPool = crate::gpu_pool::BufferPool<CudaSlice<u8>>;

/// A buffer of the pool; dropping it gives it back.
pub(crate) struct PooledBuffer {
    slice: Option<CudaSlice<u8>>,
    class: u64,
    dev: Arc<CudaDevice>,
}

impl PooledBuffer {
    pub fn slice(&self) -> &CudaSlice<u8> {
        self.slice.as_ref().expect("a pooled buffer is present until it is dropped")
    }
    pub fn slice_mut(&mut self) -> &mut CudaSlice<u8> {
        self.slice.as_mut().expect("a pooled buffer is present until it is dropped")
    }
}

impl Drop for PooledBuffer {
    fn drop(&mut self) {
        if let Some(s) = self.slice.take() {
            self.dev.pool.release(self.class, s);
        }
    }
}

/// A buffer of at least `bytes` bytes (contents undefined).
pub(crate) fn alloc(dev: &Arc<CudaDevice>, bytes: u64) -> Result<PooledBuffer> {
    let class = size_class(bytes);
    if let Some(slice) = dev.pool.take_cached(class) {
        dev.pool.record(class, false);
        return Ok(PooledBuffer { slice: Some(slice), class, dev: dev.clone() });
    }
    let slice = allocate_or_free_cache(
        // SAFETY: the contents are undefined until a kernel or copy writes them; every op
        // writes its whole output before it is read.
        || unsafe { dev.stream.alloc::<u8>(class as usize) },
        || dev.pool.empty_cache(),
        || dev.mem_info(),
        dev.ordinal,
        class,
    )?;
    dev.pool.record(class, true);
    Ok(PooledBuffer { slice: Some(slice), class, dev: dev.clone() })
}

/// Runs `create` (one device allocation of `requested` bytes on `cuda:ordinal`). Only
/// `CUDA_ERROR_OUT_OF_MEMORY` means the memory is short: then the cache is emptied and
/// `create` tried once more, and a second failure is `Error::OutOfMemory` with the device's
/// free and total memory. Any other error (a sticky error after a kernel fault, a lost
/// device) is a driver error naming the device and the call, and leaves the cache alone:
/// freeing memory cannot cure it.
fn allocate_or_free_cache<T>(
    mut create: impl FnMut() -> std::result::Result<T, DriverError>,
    empty_cache: impl FnOnce(),
    mem_info: impl FnOnce() -> (u64, u64),
    ordinal: usize,
    requested: u64,
) -> Result<T> {
    let failed = |e| driver_err(ordinal, &format!("allocating {requested} bytes (cuMemAllocAsync / cuMemAlloc)"))(e);
    let out_of_memory = |e: &DriverError| e.0 == CUresult::CUDA_ERROR_OUT_OF_MEMORY;
    match create() {
        Ok(s) => return Ok(s),
        Err(e) if !out_of_memory(&e) => return Err(failed(e)),
        Err(_) => empty_cache(),
    }
    create().map_err(|e| {
        if out_of_memory(&e) {
            let (free, total) = mem_info();
            Error::OutOfMemory { requested: requested as usize, free: free as usize, total: total as usize }
        } else {
            failed(e)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    /// Runs `allocate_or_free_cache` with allocations answering `results` in turn; returns
    /// its result, the number of tries and of cache flushes.
    fn run(results: &[std::result::Result<u32, CUresult>]) -> (Result<u32>, usize, usize) {
        let (tries, flushes) = (Cell::new(0), Cell::new(0));
        let create = || {
            tries.set(tries.get() + 1);
            results[tries.get() - 1].map_err(DriverError)
        };
        let result = allocate_or_free_cache(create, || flushes.set(flushes.get() + 1), || (100, 1000), 3, 4096);
        (result, tries.get(), flushes.get())
    }

    #[test]
    fn only_out_of_memory_empties_the_cache_and_is_reported_as_such() {
        use CUresult::*;
        assert!(matches!(run(&[Ok(7)]), (Ok(7), 1, 0)));
        // Out of memory: the cache is emptied and the allocation tried once more.
        assert!(matches!(run(&[Err(CUDA_ERROR_OUT_OF_MEMORY), Ok(7)]), (Ok(7), 2, 1)));
        let (result, tries, flushes) = run(&[Err(CUDA_ERROR_OUT_OF_MEMORY), Err(CUDA_ERROR_OUT_OF_MEMORY)]);
        assert!(matches!(result, Err(Error::OutOfMemory { requested: 4096, free: 100, total: 1000 })), "{result:?}");
        assert_eq!((tries, flushes), (2, 1));
        // A sticky error after a kernel fault is no shortage of memory: reported as it is,
        // with the device and the call, and the cache is kept.
        let (result, tries, flushes) = run(&[Err(CUDA_ERROR_ILLEGAL_ADDRESS)]);
        let msg = result.unwrap_err().to_string();
        assert!(
            msg.contains("cuda:3") && msg.contains("cuMemAlloc") && msg.contains("CUDA_ERROR_ILLEGAL_ADDRESS"),
            "{msg}"
        );
        assert_eq!((tries, flushes), (1, 0));
        // One that appears on the retry is not called out of memory either.
        let (result, _, flushes) = run(&[Err(CUDA_ERROR_OUT_OF_MEMORY), Err(CUDA_ERROR_LAUNCH_FAILED)]);
        assert!(matches!(&result, Err(Error::Msg(m)) if m.contains("CUDA_ERROR_LAUNCH_FAILED")), "{result:?}");
        assert_eq!(flushes, 1);
    }
}
