//! wgpu buffers through the shared caching allocator (`gpu_pool.rs`).

use std::sync::Arc;

use super::context::WgpuContext;
use crate::gpu_pool::size_class;
use crate::{Error, Result};

pub(crate) const USAGE: ::wgpu::BufferUsages =
    ::wgpu::BufferUsages::STORAGE.union(::wgpu::BufferUsages::COPY_SRC).union(::wgpu::BufferUsages::COPY_DST);

pub(crate) type BufferPool = crate::gpu_pool::BufferPool<::wgpu::Buffer>;

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
            ctx.empty_cache();
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
