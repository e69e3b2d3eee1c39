//! A caching allocator per device: freed buffers are kept by size class and handed out
//! again, so a training step allocates nothing new after the first. `RNN_GPU_MEMORY_POOL=0`
//! turns caching off (every buffer is freed at once).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::context::WgpuContext;
pub use crate::wgpu_memory::MemoryStats;
use crate::{Error, Result};

pub(crate) struct BufferPool {
    enabled: bool,
    free: Mutex<HashMap<u64, Vec<::wgpu::Buffer>>>,
    stats: Mutex<MemoryStats>,
}

/// The size a request of `bytes` is rounded up to: at least 256 bytes, then to an eighth of
/// the next power of two, so that at most 1/8 of a buffer is wasted.
fn size_class(bytes: u64) -> u64 {
    let bytes = bytes.max(256);
    let step = (bytes.next_power_of_two() / 8).max(256);
    bytes.div_ceil(step) * step
}

pub(crate) const USAGE: ::wgpu::BufferUsages =
    ::wgpu::BufferUsages::STORAGE.union(::wgpu::BufferUsages::COPY_SRC).union(::wgpu::BufferUsages::COPY_DST);

impl BufferPool {
    pub fn new(enabled: bool) -> Self {
        BufferPool { enabled, free: Mutex::new(HashMap::new()), stats: Mutex::new(MemoryStats::default()) }
    }

    pub fn stats(&self) -> MemoryStats {
        *self.stats.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn empty_cache(&self) {
        let dropped: u64 = {
            let mut free = self.free.lock().unwrap_or_else(|p| p.into_inner());
            free.drain().map(|(class, bufs)| class * bufs.len() as u64).sum()
        };
        self.stats.lock().unwrap_or_else(|p| p.into_inner()).reserved -= dropped;
    }

    fn take_cached(&self, class: u64) -> Option<::wgpu::Buffer> {
        self.free.lock().unwrap_or_else(|p| p.into_inner()).get_mut(&class).and_then(Vec::pop)
    }

    fn record(&self, class: u64, fresh: bool) {
        let mut s = self.stats.lock().unwrap_or_else(|p| p.into_inner());
        s.allocated += class;
        s.peak = s.peak.max(s.allocated);
        if fresh {
            s.allocations += 1;
            s.reserved += class;
        } else {
            s.cache_hits += 1;
        }
    }

    fn release(&self, class: u64, buffer: ::wgpu::Buffer) {
        let mut s = self.stats.lock().unwrap_or_else(|p| p.into_inner());
        s.allocated -= class;
        if self.enabled {
            self.free.lock().unwrap_or_else(|p| p.into_inner()).entry(class).or_default().push(buffer);
        } else {
            s.reserved -= class;
            buffer.destroy();
        }
    }
}

/// A buffer of the pool; dropping it gives it back.
pub(crate) struct PooledBuffer {
    buffer: Option<::wgpu::Buffer>,
    class: u64,
    ctx: Arc<WgpuContext>,
}

impl PooledBuffer {
    pub fn buffer(&self) -> &::wgpu::Buffer {
        self.buffer.as_ref().expect("a pooled buffer is present until it is dropped")
    }
}

impl Drop for PooledBuffer {
    fn drop(&mut self) {
        if let Some(b) = self.buffer.take() {
            self.ctx.pool.release(self.class, b);
        }
    }
}

/// The largest buffer a kernel can bind, in bytes.
pub(crate) fn buffer_limit(limits: &::wgpu::Limits) -> u64 {
    limits.max_buffer_size.min(limits.max_storage_buffer_binding_size)
}

/// A buffer of at least `bytes` bytes (contents undefined). Requests beyond the adapter's
/// storage-buffer limit are an error naming the limit; a failed allocation frees the cache
/// and retries once before reporting `Error::OutOfMemory`.
pub(crate) fn alloc(ctx: &Arc<WgpuContext>, bytes: u64) -> Result<PooledBuffer> {
    ctx.check()?;
    let limit = buffer_limit(&ctx.limits);
    let class = size_class(bytes);
    if bytes > limit {
        let msg = format!(
            "a tensor of {bytes} bytes exceeds the {limit}-byte buffer limit of wgpu:{} ({}); \
             split it into smaller tensors or use another device",
            ctx.ordinal, ctx.name
        );
        return Err(Error::invalid("wgpu alloc", msg));
    }
    let class = class.min(limit.max(bytes.next_multiple_of(4)));
    if let Some(buffer) = ctx.pool.take_cached(class) {
        ctx.pool.record(class, false);
        return Ok(PooledBuffer { buffer: Some(buffer), class, ctx: ctx.clone() });
    }
    let buffer = match create(ctx, class) {
        Some(b) => b,
        None => {
            ctx.pool.empty_cache();
            create(ctx, class).ok_or_else(|| {
                let stats = ctx.pool.stats();
                Error::OutOfMemory { requested: class as usize, free: 0, total: stats.reserved as usize }
            })?
        }
    };
    ctx.pool.record(class, true);
    Ok(PooledBuffer { buffer: Some(buffer), class, ctx: ctx.clone() })
}

/// Creates a buffer, or `None` when the device is out of memory.
fn create(ctx: &WgpuContext, size: u64) -> Option<::wgpu::Buffer> {
    let scope = ctx.device.push_error_scope(::wgpu::ErrorFilter::OutOfMemory);
    let buffer = ctx.device.create_buffer(&::wgpu::BufferDescriptor {
        label: None,
        size,
        usage: USAGE,
        mapped_at_creation: false,
    });
    match pollster::block_on(scope.pop()) {
        None => Some(buffer),
        Some(_) => None,
    }
}
