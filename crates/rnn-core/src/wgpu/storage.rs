//! `WgpuStorage`: a tensor's elements in a pooled wgpu buffer. The ops live in the sibling
//! modules; this file holds the type, transfers and the `BackendStorage` dispatch.

use std::sync::{mpsc, Arc};

use super::context::{context, WgpuContext};
use super::pool::{alloc, PooledBuffer};
use super::{dtype, elementwise, index, matmul, reduce, window};
use crate::cpu::CpuStorage;
use crate::op::{BinaryOp, CmpOp, ReduceOp, UnaryOp};
use crate::storage::{BackendStorage, Storage};
use crate::window::Window2d;
use crate::{DType, Device, Error, Layout, Result};

#[derive(Clone)]
pub struct WgpuStorage {
    buf: Arc<PooledBuffer>,
    len: usize,
    dtype: DType,
    ctx: Arc<WgpuContext>,
}

impl std::fmt::Debug for WgpuStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "WgpuStorage({} x {} on {:?})", self.len, self.dtype, self.ctx)
    }
}

impl WgpuStorage {
    /// Whether device `wgpu:ordinal` can be used, with the reason when it cannot.
    pub fn check_device(ordinal: usize) -> Result<()> {
        context(ordinal).map(|_| ())
    }

    /// An uninitialized storage of `len` elements on the same device as `self`.
    pub(crate) fn alloc_like(&self, dtype: DType, len: usize) -> Result<WgpuStorage> {
        WgpuStorage::alloc(&self.ctx, dtype, len)
    }

    pub(crate) fn alloc(ctx: &Arc<WgpuContext>, dtype: DType, len: usize) -> Result<WgpuStorage> {
        dtype::wgsl_type("alloc", dtype, ctx.shader_f16)?;
        let buf = alloc(ctx, dtype::stored_bytes(dtype, len))?;
        Ok(WgpuStorage { buf: Arc::new(buf), len, dtype, ctx: ctx.clone() })
    }

    pub(crate) fn ctx(&self) -> &Arc<WgpuContext> {
        &self.ctx
    }

    pub(crate) fn buffer(&self) -> &::wgpu::Buffer {
        self.buf.buffer()
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The WGSL type of this storage's elements.
    pub(crate) fn wgsl_type(&self, op: &'static str) -> Result<&'static str> {
        dtype::wgsl_type(op, self.dtype, self.ctx.shader_f16)
    }

    /// Whether kernels reading or writing this storage need `enable f16;`.
    pub(crate) fn is_f16(&self) -> bool {
        self.dtype == DType::F16
    }

    /// Reads the whole buffer back to the host (waits for queued kernels).
    fn read_back(&self) -> Result<Vec<u8>> {
        let ctx = &self.ctx;
        let size = dtype::stored_bytes(self.dtype, self.len);
        if size == 0 {
            return Ok(Vec::new());
        }
        let staging = ctx.device.create_buffer(&::wgpu::BufferDescriptor {
            label: None,
            size,
            usage: ::wgpu::BufferUsages::MAP_READ | ::wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let mut encoder = ctx.device.create_command_encoder(&Default::default());
        encoder.copy_buffer_to_buffer(self.buffer(), 0, &staging, 0, size);
        ctx.queue.submit([encoder.finish()]);
        let (tx, rx) = mpsc::channel();
        staging.slice(..).map_async(::wgpu::MapMode::Read, move |r| drop(tx.send(r)));
        ctx.wait()?;
        let mapped = rx.recv().map_err(|_| Error::Msg(format!("wgpu:{}: read-back never completed", ctx.ordinal)))?;
        mapped.map_err(|e| {
            Error::DeviceNotAvailable(format!("wgpu:{} ({}): read-back failed: {e}", ctx.ordinal, ctx.name))
        })?;
        let view = staging.slice(..).get_mapped_range().map_err(|e| Error::Msg(format!("wgpu: read-back: {e}")))?;
        let bytes = view.to_vec();
        drop(view);
        staging.unmap();
        Ok(bytes)
    }
}

impl BackendStorage for WgpuStorage {
    fn dtype(&self) -> DType {
        self.dtype
    }
    fn device(&self) -> Device {
        Device::Wgpu(self.ctx.ordinal)
    }
    fn to_cpu(&self) -> Result<CpuStorage> {
        dtype::from_stored_bytes(&self.read_back()?, self.dtype, self.len)
    }
    fn from_cpu(cpu: &CpuStorage, ordinal: usize) -> Result<Self> {
        let ctx = context(ordinal)?;
        let bytes = dtype::to_stored_bytes(cpu)?;
        let s = WgpuStorage::alloc(&ctx, cpu.dtype(), cpu.len())?;
        if !bytes.is_empty() {
            ctx.queue.write_buffer(s.buffer(), 0, &bytes);
        }
        ctx.check()?;
        Ok(s)
    }
    fn full(value: f64, n: usize, dtype: DType, ordinal: usize) -> Result<Self> {
        elementwise::fill(&context(ordinal)?, value, n, dtype)
    }
    crate::gpu_shared::forward_gpu_ops!();
}

crate::gpu_shared::impl_gpu_storage!(WgpuStorage, Wgpu);
