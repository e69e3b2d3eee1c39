//! Per-kernel device time from timestamp queries, for profiling (`super::set_kernel_timing`):
//! while it is on, each dispatch runs in a compute pass of its own whose start and end the
//! device stamps, and each submitted batch is waited for and its stamps read back, so a
//! timed program runs slower than an untimed one; the sum of the kernels' own times is
//! what it measures (`super::kernel_time`), e.g. to compare a training step with the work
//! its kernels do.

use std::sync::mpsc;

use super::batch::MAX_BATCH_DISPATCHES;
use crate::{Error, Result};

/// The queries and buffers of one device's timed batches.
pub(crate) struct KernelTimer {
    queries: ::wgpu::QuerySet,
    resolved: ::wgpu::Buffer,
    readback: ::wgpu::Buffer,
    /// Dispatches stamped in the batch being recorded.
    pub stamped: u32,
}

impl KernelTimer {
    pub fn new(device: &::wgpu::Device) -> KernelTimer {
        let count = 2 * MAX_BATCH_DISPATCHES as u32;
        let queries = device.create_query_set(&::wgpu::QuerySetDescriptor {
            label: Some("rnn kernel timing"),
            ty: ::wgpu::QueryType::Timestamp,
            count,
        });
        let bytes = u64::from(count) * 8;
        let buffer = |usage| {
            device.create_buffer(&::wgpu::BufferDescriptor {
                label: None,
                size: bytes,
                usage,
                mapped_at_creation: false,
            })
        };
        let resolved = buffer(::wgpu::BufferUsages::QUERY_RESOLVE | ::wgpu::BufferUsages::COPY_SRC);
        let readback = buffer(::wgpu::BufferUsages::MAP_READ | ::wgpu::BufferUsages::COPY_DST);
        KernelTimer { queries, resolved, readback, stamped: 0 }
    }

    /// The stamps of the next dispatch's pass (its start and end).
    pub fn next_writes(&mut self) -> ::wgpu::ComputePassTimestampWrites<'_> {
        let first = 2 * self.stamped;
        self.stamped += 1;
        ::wgpu::ComputePassTimestampWrites {
            query_set: &self.queries,
            beginning_of_pass_write_index: Some(first),
            end_of_pass_write_index: Some(first + 1),
        }
    }

    /// Records the copy of this batch's stamps to the host-readable buffer; returns how many
    /// dispatches they cover.
    pub fn resolve(&mut self, encoder: &mut ::wgpu::CommandEncoder) -> u32 {
        let stamped = std::mem::take(&mut self.stamped);
        if stamped > 0 {
            encoder.resolve_query_set(&self.queries, 0..2 * stamped, &self.resolved, 0);
            encoder.copy_buffer_to_buffer(&self.resolved, 0, &self.readback, 0, u64::from(stamped) * 16);
        }
        stamped
    }

    /// Waits for the submitted batch and returns the sum of its `stamped` dispatches' times in
    /// nanoseconds (`period`: nanoseconds per tick).
    pub fn read(&self, device: &::wgpu::Device, stamped: u32, period: f32) -> Result<f64> {
        let slice = self.readback.slice(..u64::from(stamped) * 16);
        let (tx, rx) = mpsc::channel();
        slice.map_async(::wgpu::MapMode::Read, move |r| drop(tx.send(r)));
        device
            .poll(::wgpu::PollType::wait_indefinitely())
            .map_err(|e| Error::DeviceNotAvailable(format!("wgpu kernel timing: {e}")))?;
        let mapped = rx.recv().map_err(|_| Error::Msg("wgpu kernel timing: read-back never completed".into()))?;
        mapped.map_err(|e| Error::Msg(format!("wgpu kernel timing: {e}")))?;
        let view = slice.get_mapped_range().map_err(|e| Error::Msg(format!("wgpu kernel timing: {e}")))?;
        let ticks: &[u64] = bytemuck::cast_slice(&view);
        // A stamp pair out of order (a clock that went backwards) counts as zero.
        let total: u64 = ticks.chunks_exact(2).map(|p| p[1].saturating_sub(p[0])).sum();
        drop(view);
        self.readback.unmap();
        Ok(total as f64 * f64::from(period))
    }
}
