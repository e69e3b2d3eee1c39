//! Launching kernel plans on a wgpu device. A kernel's binding 0 is `info` (u32 sizes and
//! layouts, see `Target::info` and common.wgsl); bindings 1.. are the plan's buffers, in order.
//! Launches are recorded into the device's batch (`batch.rs`), not submitted one by one.

use ::wgpu::util::DeviceExt;

use super::batch::{BindKey, Counters, INFO_WINDOW};
use super::context::{Kernel, WgpuContext};
use super::storage::WgpuStorage;
use crate::gpu::plan::KernelPlan;
use crate::{Error, Result};

/// Records `plan` on the device of `args[0]` (the batch keeps kernels in order).
pub(crate) fn launch(plan: &KernelPlan, args: &[&WgpuStorage]) -> Result<()> {
    let ctx = args.first().ok_or_else(|| Error::Msg(format!("internal: {} launch without buffers", plan.op)))?.ctx();
    ctx.check()?;
    let [x, y, z] = plan.dims.grid;
    let kernel = ctx.pipeline(plan.source.key(), || plan.source.text())?;
    // `Target::info` keeps WGSL words within u32. An empty info array cannot be bound; one
    // spare word keeps it valid.
    let mut words: Vec<u32> = plan.info.iter().map(|&w| w as u32).collect();
    if words.is_empty() {
        words.push(0);
    }
    let mut batch = ctx.batch();
    if batch.is_full(words.len() * 4) {
        ctx.submit_batch(&mut batch);
    }
    let (group, offsets) = match &kernel.layout {
        Some(layout) if words.len() * 4 <= INFO_WINDOW => {
            let offset = batch.stage_info(&words);
            (ring_group(ctx, layout, &batch.ring, args), vec![offset])
        }
        _ => (own_info_group(ctx, &kernel, &words, args), own_info_offsets(&kernel)),
    };
    let pass = batch.pass(&ctx.device);
    pass.set_pipeline(&kernel.pipeline);
    pass.set_bind_group(0, &group, &offsets);
    pass.dispatch_workgroups(x, y, z);
    batch.dispatches += 1;
    Counters::bump(&ctx.counters.dispatches);
    if ctx.debug() {
        tracing::debug!(ordinal = ctx.ordinal, variant = %plan.variant, grid = ?(x, y, z), "wgpu launch");
    }
    Ok(())
}

/// The (cached) bind group of the ring's window at binding 0 and `args` after it.
fn ring_group(
    ctx: &WgpuContext,
    layout: &::wgpu::BindGroupLayout,
    ring: &::wgpu::Buffer,
    args: &[&WgpuStorage],
) -> ::wgpu::BindGroup {
    let buffers = std::iter::once(ring.clone()).chain(args.iter().map(|s| s.buffer().clone())).collect();
    let key = BindKey { layout: layout.clone(), buffers };
    let mut groups = ctx.bind_groups.lock().unwrap_or_else(|p| p.into_inner());
    let (group, reused) = groups.get(key, |key| {
        let window = ::wgpu::BufferSize::new(INFO_WINDOW as u64);
        let info = ::wgpu::BindingResource::Buffer(::wgpu::BufferBinding { buffer: ring, offset: 0, size: window });
        create_group(ctx, &key.layout, info, args)
    });
    Counters::bump(match reused {
        true => &ctx.counters.bind_groups_reused,
        false => &ctx.counters.bind_groups_created,
    });
    group
}

/// A bind group with `words` in a buffer of their own (for kernels without an explicit
/// layout, and `Info` larger than the ring's window).
fn own_info_group(ctx: &WgpuContext, kernel: &Kernel, words: &[u32], args: &[&WgpuStorage]) -> ::wgpu::BindGroup {
    let info = ctx.device.create_buffer_init(&::wgpu::util::BufferInitDescriptor {
        label: None,
        contents: bytemuck::cast_slice(words),
        usage: ::wgpu::BufferUsages::STORAGE,
    });
    Counters::bump(&ctx.counters.bind_groups_created);
    let layout = kernel.layout.clone().unwrap_or_else(|| kernel.pipeline.get_bind_group_layout(0));
    create_group(ctx, &layout, info.as_entire_binding(), args)
}

/// The dynamic offsets an own-`Info` bind group takes: 0 where the layout has a dynamic one.
fn own_info_offsets(kernel: &Kernel) -> Vec<u32> {
    kernel.layout.as_ref().map(|_| vec![0]).unwrap_or_default()
}

fn create_group(
    ctx: &WgpuContext,
    layout: &::wgpu::BindGroupLayout,
    info: ::wgpu::BindingResource<'_>,
    args: &[&WgpuStorage],
) -> ::wgpu::BindGroup {
    let entries: Vec<::wgpu::BindGroupEntry> = std::iter::once(info)
        .chain(args.iter().map(|s| s.buffer().as_entire_binding()))
        .enumerate()
        .map(|(i, resource)| ::wgpu::BindGroupEntry { binding: i as u32, resource })
        .collect();
    ctx.device.create_bind_group(&::wgpu::BindGroupDescriptor { label: None, layout, entries: &entries })
}
