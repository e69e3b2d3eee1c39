//! Filling kernel templates and launching them. A kernel's binding 0 is `info` (u32 sizes
//! and layouts, see `common.wgsl`); bindings 1.. are the buffers passed to `launch`, in order.

use ::wgpu::util::DeviceExt;

use super::context::WgpuContext;
use crate::{Error, Layout, Result};

/// Threads per workgroup of the 1-D kernels (`WG` in common.wgsl).
pub(crate) const WG: usize = 256;

/// `COMMON` plus `template` with every `{{key}}` replaced; `enable f16;` first when `f16`.
pub(crate) fn kernel_source(template: &str, subs: &[(&str, &str)], f16: bool) -> String {
    let mut src = String::with_capacity(template.len() + rnn_kernels::wgsl::COMMON.len() + 16);
    if f16 {
        src.push_str("enable f16;\n");
    }
    src.push_str(rnn_kernels::wgsl::COMMON);
    let mut body = template.to_string();
    for (key, value) in subs {
        body = body.replace(&format!("{{{{{key}}}}}"), value);
    }
    debug_assert!(!body.contains("{{"), "unfilled placeholder in kernel:\n{body}");
    src.push_str(&body);
    src
}

/// The WGSL function that maps a thread's element index to a storage position under `l`:
/// `contiguous_offset` when `l` is contiguous, else the general `strided_offset`.
pub(crate) fn index_fn(l: &Layout) -> &'static str {
    if l.is_contiguous() {
        "contiguous_offset"
    } else {
        "strided_offset"
    }
}

/// The `info` words of a kernel (see `gpu_pool::info_words`) as WGSL's u32s.
pub(crate) fn info(op: &'static str, scalars: &[usize], layouts: &[&Layout]) -> Result<Vec<u32>> {
    crate::gpu_pool::info_words(scalars, layouts)
        .into_iter()
        .map(|w| {
            u32::try_from(w)
                .map_err(|_| Error::invalid(op, format!("size {w} exceeds the wgpu backend's 32-bit indexing")))
        })
        .collect()
}

/// How many workgroups to launch.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Grid {
    /// One thread per element, `WG` threads per workgroup.
    Threads(usize),
    /// This many workgroups (kernels find their number with `group_id`).
    Groups(usize),
    /// An explicit 3-D grid.
    Xyz(u32, u32, u32),
}

impl Grid {
    /// The grid as (x, y, z) within the per-dimension limit, spilling into y.
    fn dims(self, max: u32) -> Result<(u32, u32, u32)> {
        let groups = match self {
            Grid::Threads(n) => n.div_ceil(WG),
            Grid::Groups(g) => g,
            Grid::Xyz(x, y, z) => return Ok((x, y, z)),
        };
        let x = groups.min(max as usize).max(1);
        let y = groups.div_ceil(x);
        if y > max as usize {
            return Err(Error::invalid("wgpu launch", format!("{groups} workgroups exceed the device's grid")));
        }
        Ok((x as u32, y as u32, 1))
    }
}

impl WgpuContext {
    /// Runs the kernel `source` over `grid` with `info` at binding 0 and `buffers` at
    /// bindings 1.. (submitted at once; the queue keeps kernels in order).
    pub(crate) fn launch(&self, source: &str, info: &[u32], buffers: &[&::wgpu::Buffer], grid: Grid) -> Result<()> {
        self.check()?;
        let (x, y, z) = grid.dims(self.limits.max_compute_workgroups_per_dimension)?;
        if x == 0 || y == 0 || z == 0 {
            return Ok(());
        }
        let pipeline = self.pipeline(source)?;
        // An empty info array cannot be bound; one spare word keeps it valid.
        let words: Vec<u32> = if info.is_empty() { vec![0] } else { info.to_vec() };
        let info_buf = self.device.create_buffer_init(&::wgpu::util::BufferInitDescriptor {
            label: None,
            contents: bytemuck::cast_slice(&words),
            usage: ::wgpu::BufferUsages::STORAGE,
        });
        let entries: Vec<::wgpu::BindGroupEntry> = std::iter::once(&info_buf)
            .chain(buffers.iter().copied())
            .enumerate()
            .map(|(i, b)| ::wgpu::BindGroupEntry { binding: i as u32, resource: b.as_entire_binding() })
            .collect();
        let layout = pipeline.get_bind_group_layout(0);
        let bind_group = self.device.create_bind_group(&::wgpu::BindGroupDescriptor {
            label: None,
            layout: &layout,
            entries: &entries,
        });
        let mut encoder = self.device.create_command_encoder(&Default::default());
        {
            let mut pass = encoder.begin_compute_pass(&Default::default());
            pass.set_pipeline(&pipeline);
            pass.set_bind_group(0, &bind_group, &[]);
            pass.dispatch_workgroups(x, y, z);
        }
        self.queue.submit([encoder.finish()]);
        if self.debug() {
            tracing::debug!(ordinal = self.ordinal, grid = ?(x, y, z), "wgpu launch");
        }
        self.check()
    }
}
