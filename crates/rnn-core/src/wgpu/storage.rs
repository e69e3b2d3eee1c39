//! `WgpuStorage`: a tensor's elements in a pooled wgpu buffer, and the primitives the shared
//! GPU layer (`gpu/`) runs programs with: allocation, transfers, launches.

use std::sync::{mpsc, Arc};

use super::context::{context, WgpuContext};
use super::pool::{alloc, PooledBuffer};
use super::{dtype, launch};
use crate::cpu::CpuStorage;
use crate::gpu::plan::KernelPlan;
use crate::gpu::target::{wgsl_type, Target};
use crate::gpu::GpuStorage;
use crate::storage::Storage;
use crate::{DType, Device, Error, Result};

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

    pub(crate) fn alloc_on(ctx: &Arc<WgpuContext>, dtype: DType, len: usize) -> Result<WgpuStorage> {
        wgsl_type("alloc", dtype, ctx.shader_f16)?;
        let buf = alloc(ctx, dtype::stored_bytes(dtype, len))?;
        Ok(WgpuStorage { buf: Arc::new(buf), len, dtype, ctx: ctx.clone() })
    }

    pub(crate) fn ctx(&self) -> &Arc<WgpuContext> {
        &self.ctx
    }

    pub(crate) fn buffer(&self) -> &::wgpu::Buffer {
        self.buf.buffer()
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

impl GpuStorage for WgpuStorage {
    fn elem_dtype(&self) -> DType {
        self.dtype
    }
    fn len(&self) -> usize {
        self.len
    }
    fn ordinal(&self) -> usize {
        self.ctx.ordinal
    }
    fn device_of(ordinal: usize) -> Device {
        Device::Wgpu(ordinal)
    }
    fn target_of(ordinal: usize) -> Result<Target> {
        Ok(context(ordinal)?.target)
    }
    fn alloc(ordinal: usize, dtype: DType, len: usize) -> Result<Self> {
        WgpuStorage::alloc_on(&context(ordinal)?, dtype, len)
    }
    fn upload(cpu: &CpuStorage, ordinal: usize) -> Result<Self> {
        let ctx = context(ordinal)?;
        let bytes = dtype::to_stored_bytes(cpu)?;
        let s = WgpuStorage::alloc_on(&ctx, cpu.dtype(), cpu.len())?;
        if !bytes.is_empty() {
            ctx.queue.write_buffer(s.buffer(), 0, &bytes);
        }
        ctx.check()?;
        Ok(s)
    }
    fn download(&self) -> Result<CpuStorage> {
        dtype::from_stored_bytes(&self.read_back()?, self.dtype, self.len)
    }
    fn launch(plan: &KernelPlan, args: &[&Self]) -> Result<()> {
        launch::launch(plan, args)
    }
    fn of(s: &Storage) -> Option<&Self> {
        match s {
            Storage::Wgpu(s) => Some(s),
            _ => None,
        }
    }
}
