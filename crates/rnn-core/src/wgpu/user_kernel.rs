//! User-written WGSL compute shaders run on tensors' buffers.
//!
//! Binding convention (group 0):
//! - every tensor argument, in the order given, at bindings `0, 1, ..`, bound to exactly its
//!   elements (`arrayLength` gives the element count). Elements are in the stored type of
//!   their dtype: `f32`, `f16` (with shader-f16; the source must `enable f16;`), `u32` (u32
//!   and u8 tensors, one word per element) or `i32` (i64 tensors);
//! - when there are scalar arguments, one more binding right after the tensors holds them
//!   all, in order, one 32-bit word each (`u32`, `i32` or `f32`), padded to 16 bytes. The
//!   buffer can be declared `var<uniform>` or `var<storage, read>` as a struct of scalars.
//!
//! Every binding must be used by the entry point (unused ones are dropped from the shader's
//! layout and binding them is an error). Tensors a kernel writes must be declared
//! `var<storage, read_write>` and passed as outputs.
//!
//! ```wgsl
//! @group(0) @binding(0) var<storage, read> a: array<f32>;
//! @group(0) @binding(1) var<storage, read> b: array<f32>;
//! @group(0) @binding(2) var<storage, read_write> out: array<f32>;
//! struct Params { n: u32, scale: f32 }
//! @group(0) @binding(3) var<uniform> params: Params;
//!
//! @compute @workgroup_size(64)
//! fn main(@builtin(global_invocation_id) id: vec3<u32>) {
//!     if (id.x < params.n) { out[id.x] = (a[id.x] + b[id.x]) * params.scale; }
//! }
//! ```

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use ::wgpu::util::DeviceExt;

use super::batch::Counters;
use super::context::{context, WgpuContext};
use super::dtype::stored_bytes;
use super::storage::WgpuStorage;
use crate::gpu::user_kernel::bound_storage;
use crate::gpu::GpuStorage;
use crate::storage::BackendStorage;
use crate::{Device, Error, KernelArg, Result};

const OP: &str = "user kernel";

/// The compiled pipelines of user kernels, by (device, entry point, source).
type PipelineCache = Mutex<HashMap<(usize, String, String), Arc<::wgpu::ComputePipeline>>>;

fn pipelines() -> &'static PipelineCache {
    static CACHE: OnceLock<PipelineCache> = OnceLock::new();
    CACHE.get_or_init(Default::default)
}

/// Compiles the WGSL compute shader `source` with entry point `entry` on `wgpu:ordinal`
/// (cached), returning the compiler's message when it does not compile.
pub fn compile_user_kernel(ordinal: usize, source: &str, entry: &str) -> Result<()> {
    pipeline(&*context(ordinal)?, source, entry).map(|_| ())
}

fn pipeline(ctx: &WgpuContext, source: &str, entry: &str) -> Result<Arc<::wgpu::ComputePipeline>> {
    let key = (ctx.ordinal, entry.to_string(), source.to_string());
    if let Some(p) = pipelines().lock().unwrap_or_else(|p| p.into_inner()).get(&key) {
        return Ok(p.clone());
    }
    ctx.check()?;
    if ctx.debug() {
        tracing::info!(ordinal = ctx.ordinal, entry, "compiling user WGSL kernel:\n{source}");
    }
    let scope = ctx.device.push_error_scope(::wgpu::ErrorFilter::Validation);
    let module = ctx.device.create_shader_module(::wgpu::ShaderModuleDescriptor {
        label: Some(entry),
        source: ::wgpu::ShaderSource::Wgsl(source.into()),
    });
    let pipeline = ctx.device.create_compute_pipeline(&::wgpu::ComputePipelineDescriptor {
        label: Some(entry),
        layout: None,
        module: &module,
        entry_point: Some(entry),
        compilation_options: Default::default(),
        cache: None,
    });
    if let Some(e) = pollster::block_on(scope.pop()) {
        let msg = format!("WGSL kernel '{entry}' failed to compile on wgpu:{} ({}): {e}", ctx.ordinal, ctx.name);
        return Err(Error::Msg(msg));
    }
    let pipeline = Arc::new(pipeline);
    pipelines().lock().unwrap_or_else(|p| p.into_inner()).insert(key, pipeline.clone());
    Ok(pipeline)
}

/// Runs the entry point `entry` of the WGSL shader `source` on `wgpu:ordinal` over
/// `workgroups` (x, y, z) workgroups, with `args` bound as the module documentation says.
/// The kernel is queued after every op already queued on the device; reading an output
/// back waits for it.
pub fn launch_user_kernel(
    ordinal: usize,
    source: &str,
    entry: &str,
    args: &[KernelArg<'_>],
    workgroups: (u32, u32, u32),
) -> Result<()> {
    let ctx = context(ordinal)?;
    let mut storages = Vec::new();
    let mut words: Vec<u32> = Vec::new();
    for arg in args {
        match *arg {
            KernelArg::Input(t) => storages.push(bound_storage::<WgpuStorage>(t, false, Device::Wgpu(ordinal))?),
            KernelArg::Output(t) => storages.push(bound_storage::<WgpuStorage>(t, true, Device::Wgpu(ordinal))?),
            KernelArg::U32(v) => words.push(v),
            KernelArg::I32(v) => words.push(v as u32),
            KernelArg::F32(v) => words.push(v.to_bits()),
        }
    }
    let pipeline = pipeline(&ctx, source, entry)?;
    let (x, y, z) = workgroups;
    if x == 0 || y == 0 || z == 0 {
        return Ok(());
    }
    ctx.check()?;
    let scalars = (!words.is_empty()).then(|| {
        words.resize(words.len().next_multiple_of(4), 0);
        ctx.device.create_buffer_init(&::wgpu::util::BufferInitDescriptor {
            label: Some("user kernel scalars"),
            contents: bytemuck::cast_slice(&words),
            usage: ::wgpu::BufferUsages::UNIFORM | ::wgpu::BufferUsages::STORAGE,
        })
    });
    let mut entries: Vec<::wgpu::BindGroupEntry> = storages
        .iter()
        .enumerate()
        .map(|(i, s)| ::wgpu::BindGroupEntry {
            binding: i as u32,
            resource: ::wgpu::BindingResource::Buffer(::wgpu::BufferBinding {
                buffer: s.buffer(),
                offset: 0,
                size: ::wgpu::BufferSize::new(stored_bytes(s.dtype(), s.len())),
            }),
        })
        .collect();
    if let Some(buf) = &scalars {
        entries.push(::wgpu::BindGroupEntry { binding: storages.len() as u32, resource: buf.as_entire_binding() });
    }
    let scope = ctx.device.push_error_scope(::wgpu::ErrorFilter::Validation);
    let bind_group = (!entries.is_empty()).then(|| {
        ctx.device.create_bind_group(&::wgpu::BindGroupDescriptor {
            label: Some(entry),
            layout: &pipeline.get_bind_group_layout(0),
            entries: &entries,
        })
    });
    let mut encoder = ctx.device.create_command_encoder(&Default::default());
    {
        let mut pass = encoder.begin_compute_pass(&Default::default());
        pass.set_pipeline(&pipeline);
        if let Some(group) = &bind_group {
            pass.set_bind_group(0, group, &[]);
        }
        pass.dispatch_workgroups(x, y, z);
    }
    let commands = encoder.finish();
    if let Some(e) = pollster::block_on(scope.pop()) {
        let msg = format!("WGSL kernel '{entry}' cannot run with these arguments on wgpu:{}: {e}", ctx.ordinal);
        return Err(Error::invalid(OP, msg));
    }
    // After the recorded ops, which may write its inputs (the batch is submitted first).
    let mut batch = ctx.batch();
    ctx.submit_batch(&mut batch);
    ctx.queue.submit([commands]);
    drop(batch);
    Counters::bump(&ctx.counters.submits);
    Counters::bump(&ctx.counters.dispatches);
    if ctx.debug() {
        tracing::debug!(ordinal = ctx.ordinal, entry, grid = ?(x, y, z), "wgpu user kernel launch");
    }
    ctx.check()
}
