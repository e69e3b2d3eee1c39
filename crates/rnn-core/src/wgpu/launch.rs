//! Launching kernel plans on a wgpu device. A kernel's binding 0 is `info` (u32 sizes and
//! layouts, see `Target::info` and common.wgsl); bindings 1.. are the plan's buffers, in order.

use ::wgpu::util::DeviceExt;

use super::storage::WgpuStorage;
use crate::gpu::plan::KernelPlan;
use crate::{Error, Result};

/// Queues `plan` on the device of `args[0]` (submitted at once; the queue keeps kernels in
/// order).
pub(crate) fn launch(plan: &KernelPlan, args: &[&WgpuStorage]) -> Result<()> {
    let ctx = args.first().ok_or_else(|| Error::Msg(format!("internal: {} launch without buffers", plan.op)))?.ctx();
    ctx.check()?;
    let [x, y, z] = plan.dims.grid;
    let pipeline = ctx.pipeline(plan.source.key(), || plan.source.text())?;
    // `Target::info` keeps WGSL words within u32. An empty info array cannot be bound; one
    // spare word keeps it valid.
    let mut words: Vec<u32> = plan.info.iter().map(|&w| w as u32).collect();
    if words.is_empty() {
        words.push(0);
    }
    let info_buf = ctx.device.create_buffer_init(&::wgpu::util::BufferInitDescriptor {
        label: None,
        contents: bytemuck::cast_slice(&words),
        usage: ::wgpu::BufferUsages::STORAGE,
    });
    let entries: Vec<::wgpu::BindGroupEntry> = std::iter::once(&info_buf)
        .chain(args.iter().map(|s| s.buffer()))
        .enumerate()
        .map(|(i, b)| ::wgpu::BindGroupEntry { binding: i as u32, resource: b.as_entire_binding() })
        .collect();
    let layout = pipeline.get_bind_group_layout(0);
    let bind_group =
        ctx.device.create_bind_group(&::wgpu::BindGroupDescriptor { label: None, layout: &layout, entries: &entries });
    let mut encoder = ctx.device.create_command_encoder(&Default::default());
    {
        let mut pass = encoder.begin_compute_pass(&Default::default());
        pass.set_pipeline(&pipeline);
        pass.set_bind_group(0, &bind_group, &[]);
        pass.dispatch_workgroups(x, y, z);
    }
    ctx.queue.submit([encoder.finish()]);
    if ctx.debug() {
        tracing::debug!(ordinal = ctx.ordinal, variant = %plan.variant, grid = ?(x, y, z), "wgpu launch");
    }
    ctx.check()
}
