//! `WgpuStorage`: a tensor's elements in a pooled wgpu buffer, and the primitives the shared
//! GPU layer (`gpu/`) runs programs with: allocation, transfers, launches.

use std::sync::{mpsc, Arc};
use std::thread::LocalKey;

use ::wgpu::util::DeviceExt;

use super::context::{context, WgpuContext};
use super::pool::{alloc, PooledBuffer};
use super::{dtype, launch};
use crate::cpu::CpuStorage;
use crate::gpu::deferred::Deferred;
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

    /// Reads the buffers of `all` (on one device) back to the host: their copies join the
    /// recorded batch, which is submitted and waited for once.
    fn read_back(all: &[&WgpuStorage]) -> Result<Vec<Vec<u8>>> {
        let Some(first) = all.first() else { return Ok(Vec::new()) };
        let ctx = first.ctx();
        let sizes: Vec<u64> = all.iter().map(|s| dtype::stored_bytes(s.dtype, s.len)).collect();
        let total: u64 = sizes.iter().sum();
        let staging = (total > 0).then(|| {
            ctx.device.create_buffer(&::wgpu::BufferDescriptor {
                label: None,
                size: total,
                usage: ::wgpu::BufferUsages::MAP_READ | ::wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            })
        });
        {
            let mut batch = ctx.batch();
            if let Some(staging) = &staging {
                let encoder = batch.encoder(&ctx.device);
                let mut at = 0;
                for (s, &size) in all.iter().zip(&sizes) {
                    if size > 0 {
                        encoder.copy_buffer_to_buffer(s.buffer(), 0, staging, at, size);
                    }
                    at += size;
                }
            }
            ctx.submit_batch(&mut batch);
        }
        let Some(staging) = staging else {
            ctx.wait()?;
            return Ok(vec![Vec::new(); all.len()]);
        };
        let (tx, rx) = mpsc::channel();
        staging.slice(..).map_async(::wgpu::MapMode::Read, move |r| drop(tx.send(r)));
        ctx.wait()?;
        let mapped = rx.recv().map_err(|_| Error::Msg(format!("wgpu:{}: read-back never completed", ctx.ordinal)))?;
        mapped.map_err(|e| {
            Error::DeviceNotAvailable(format!("wgpu:{} ({}): read-back failed: {e}", ctx.ordinal, ctx.name))
        })?;
        let view = staging.slice(..).get_mapped_range().map_err(|e| Error::Msg(format!("wgpu: read-back: {e}")))?;
        let mut out = Vec::with_capacity(all.len());
        let mut at = 0;
        for &size in &sizes {
            out.push(view[at as usize..(at + size) as usize].to_vec());
            at += size;
        }
        drop(view);
        staging.unmap();
        Ok(out)
    }

    /// Writes `bytes` to the start of this buffer, in order with the recorded ops: through
    /// `queue.write_buffer` while nothing is recorded (it runs before the next submit's
    /// commands), else as a copy from a staging buffer recorded in the batch, since a
    /// recorded op may still read this (recycled) buffer.
    fn write(&self, bytes: &[u8]) {
        let ctx = self.ctx();
        let mut batch = ctx.batch();
        if batch.is_empty() {
            ctx.queue.write_buffer(self.buffer(), 0, bytes);
            return;
        }
        let staging = ctx.device.create_buffer_init(&::wgpu::util::BufferInitDescriptor {
            label: None,
            contents: bytes,
            usage: ::wgpu::BufferUsages::COPY_SRC,
        });
        batch.encoder(&ctx.device).copy_buffer_to_buffer(&staging, 0, self.buffer(), 0, bytes.len() as u64);
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
            s.write(&bytes);
        }
        ctx.check()?;
        Ok(s)
    }
    fn download(&self) -> Result<CpuStorage> {
        let bytes = WgpuStorage::read_back(&[self])?;
        dtype::from_stored_bytes(&bytes[0], self.dtype, self.len)
    }
    fn download_all(all: &[&Self]) -> Result<Vec<CpuStorage>> {
        let bytes = WgpuStorage::read_back(all)?;
        all.iter().zip(&bytes).map(|(s, b)| dtype::from_stored_bytes(b, s.dtype, s.len)).collect()
    }
    fn deferred() -> &'static LocalKey<Deferred<Self>> {
        thread_local!(static PENDING: Deferred<WgpuStorage> = Deferred::default());
        &PENDING
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
