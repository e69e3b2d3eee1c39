//! CUDA buffers through the shared caching allocator (`gpu_pool.rs`). Out of memory frees
//! the cache and retries once before reporting `Error::OutOfMemory`.

use std::sync::Arc;

use cudarc::driver::CudaSlice;

use super::context::CudaDevice;
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
    // SAFETY: the contents are undefined until a kernel or copy writes them; every op writes
    // its whole output before it is read.
    let create = || unsafe { dev.stream.alloc::<u8>(class as usize) };
    let slice = match create() {
        Ok(s) => s,
        Err(_) => {
            dev.pool.empty_cache();
            create().map_err(|_| {
                let (free, total) = dev.mem_info();
                Error::OutOfMemory { requested: class as usize, free: free as usize, total: total as usize }
            })?
        }
    };
    dev.pool.record(class, true);
    Ok(PooledBuffer { slice: Some(slice), class, dev: dev.clone() })
}
