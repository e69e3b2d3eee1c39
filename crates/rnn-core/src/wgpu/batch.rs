//! Batched submission: ops are recorded into one shared command encoder (inside one open
//! compute pass) and submitted together at a read-back, an explicit `synchronize` / `flush`,
//! or once a batch reaches `MAX_BATCH_DISPATCHES` dispatches or `MAX_BATCH_INFO_BYTES` of
//! `Info` words. The `Info` words of a batch are staged on the host and written into one
//! ring buffer right before the batch is submitted; each op binds its slice of the ring
//! through a dynamic offset, so no buffer is created per op and a bind group can be reused
//! whenever an op binds the same buffers again.
//!
//! Ordering: commands of one encoder run in recording order (wgpu inserts the barriers), so a
//! buffer that goes back to the pool while a recorded dispatch still reads it can be handed to
//! a later op. `queue.write_buffer`, however, runs at the next submit *before* that submit's
//! command buffers; uploads into a buffer therefore go through the encoder (a copy from a
//! staging buffer) whenever the batch already holds commands (`storage.rs`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use super::kernel_timing::KernelTimer;

/// Dispatches after which a batch is submitted: bounds the latency of work nobody waits for
/// and the number of buffers a pending batch keeps alive.
pub const MAX_BATCH_DISPATCHES: usize = 256;
/// Bytes of staged `Info` after which a batch is submitted: the ring holds one batch.
pub const MAX_BATCH_INFO_BYTES: usize = 256 * 1024;
/// Bytes of the ring each op binds. Larger `Info` arrays (very high ranks) get a buffer of
/// their own.
pub(crate) const INFO_WINDOW: usize = 4096;
/// Cached bind groups per device; the cache is emptied when it grows past this.
const MAX_BIND_GROUPS: usize = 4096;

/// The batch being recorded on one device.
pub(crate) struct Batch {
    /// Dropped (ending the pass) before the encoder records a copy or is finished.
    pass: Option<::wgpu::ComputePass<'static>>,
    encoder: Option<::wgpu::CommandEncoder>,
    pub dispatches: usize,
    /// The ring's contents for this batch, written just before it is submitted.
    info: Vec<u8>,
    pub ring: ::wgpu::Buffer,
    /// The ring offset alignment the adapter requires.
    align: usize,
    /// Stamps every dispatch while kernel timing is on (`kernel_timing.rs`).
    pub timer: Option<KernelTimer>,
}

impl Batch {
    pub fn new(device: &::wgpu::Device, align: u32) -> Batch {
        let ring = device.create_buffer(&::wgpu::BufferDescriptor {
            label: Some("rnn info ring"),
            size: (MAX_BATCH_INFO_BYTES + INFO_WINDOW) as u64,
            usage: ::wgpu::BufferUsages::STORAGE | ::wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let align = (align as usize).max(4);
        Batch { pass: None, encoder: None, dispatches: 0, info: Vec::new(), ring, align, timer: None }
    }

    /// Whether nothing has been recorded since the last submit.
    pub fn is_empty(&self) -> bool {
        self.encoder.is_none()
    }

    /// Whether one more op with `info_bytes` of `Info` must go into a new batch.
    pub fn is_full(&self, info_bytes: usize) -> bool {
        let ring_end = match info_bytes <= INFO_WINDOW {
            true => self.info.len().next_multiple_of(self.align) + info_bytes,
            false => 0,
        };
        self.dispatches >= MAX_BATCH_DISPATCHES || ring_end > MAX_BATCH_INFO_BYTES
    }

    /// Stages `words` in the ring; returns their offset.
    pub fn stage_info(&mut self, words: &[u32]) -> u32 {
        let offset = self.info.len().next_multiple_of(self.align);
        self.info.resize(offset, 0);
        self.info.extend(words.iter().flat_map(|w| w.to_ne_bytes()));
        offset as u32
    }

    /// The encoder, with no pass open (to record a copy).
    pub fn encoder(&mut self, device: &::wgpu::Device) -> &mut ::wgpu::CommandEncoder {
        self.pass = None;
        self.encoder.get_or_insert_with(|| device.create_command_encoder(&Default::default()))
    }

    /// The compute pass of the next dispatch: the open one (opened on first use), or a new one
    /// stamped at its start and end while kernel timing is on.
    pub fn pass(&mut self, device: &::wgpu::Device) -> &mut ::wgpu::ComputePass<'static> {
        if self.timer.is_some() {
            self.pass = None;
        }
        if self.pass.is_none() {
            let encoder = self.encoder.get_or_insert_with(|| device.create_command_encoder(&Default::default()));
            let timestamp_writes = self.timer.as_mut().map(|t| t.next_writes());
            let desc = ::wgpu::ComputePassDescriptor { label: None, timestamp_writes };
            self.pass = Some(encoder.begin_compute_pass(&desc).forget_lifetime());
        }
        self.pass.as_mut().expect("the pass was just opened")
    }

    /// Ends the batch: writes its `Info` into the ring and returns the commands to submit,
    /// with the number of dispatches they stamp (kernel timing).
    pub fn finish(&mut self, queue: &::wgpu::Queue) -> Option<(::wgpu::CommandBuffer, u32)> {
        self.pass = None;
        let mut encoder = self.encoder.take()?;
        let stamped = self.timer.as_mut().map_or(0, |t| t.resolve(&mut encoder));
        if !self.info.is_empty() {
            queue.write_buffer(&self.ring, 0, &self.info);
        }
        self.info.clear();
        self.dispatches = 0;
        Some((encoder.finish(), stamped))
    }
}

/// What a bind group binds: its layout and buffers (binding 0 is the `Info` ring or an own
/// buffer).
#[derive(Clone, PartialEq, Eq, Hash)]
pub(crate) struct BindKey {
    pub layout: ::wgpu::BindGroupLayout,
    pub buffers: Vec<::wgpu::Buffer>,
}

/// Bind groups by what they bind. A cached group keeps its buffers alive, so the cache is
/// emptied with the buffer pool (`WgpuContext::empty_cache`) and is not used when the pool is
/// off (buffers must then be freed when their tensors are).
pub(crate) struct BindGroups {
    enabled: bool,
    groups: HashMap<BindKey, ::wgpu::BindGroup>,
}

impl BindGroups {
    pub fn new(enabled: bool) -> BindGroups {
        BindGroups { enabled, groups: HashMap::new() }
    }

    /// The group binding `key` (made by `create` when not cached), and whether it was cached.
    pub fn get(
        &mut self,
        key: BindKey,
        create: impl FnOnce(&BindKey) -> ::wgpu::BindGroup,
    ) -> (::wgpu::BindGroup, bool) {
        if !self.enabled {
            return (create(&key), false);
        }
        if let Some(g) = self.groups.get(&key) {
            return (g.clone(), true);
        }
        if self.groups.len() >= MAX_BIND_GROUPS {
            self.groups.clear();
        }
        let group = create(&key);
        self.groups.insert(key, group.clone());
        (group, false)
    }

    pub fn clear(&mut self) {
        self.groups.clear();
    }
}

/// Counters of one device's submissions, for tests and benchmarks (`super::submission_stats`).
#[derive(Default)]
pub(crate) struct Counters {
    pub submits: AtomicU64,
    pub syncs: AtomicU64,
    pub dispatches: AtomicU64,
    pub bind_groups_created: AtomicU64,
    pub bind_groups_reused: AtomicU64,
}

impl Counters {
    pub fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub fn stats(&self) -> SubmissionStats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        SubmissionStats {
            submits: get(&self.submits),
            syncs: get(&self.syncs),
            dispatches: get(&self.dispatches),
            bind_groups_created: get(&self.bind_groups_created),
            bind_groups_reused: get(&self.bind_groups_reused),
        }
    }
}

/// Counts since a wgpu device was opened (`rnn_core::wgpu::submission_stats`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SubmissionStats {
    /// Command buffers submitted to the queue (batches, read-backs, user kernels).
    pub submits: u64,
    /// Times the host waited for the device: read-backs (`to_vec`, `to_cpu`, ...) and
    /// `synchronize`. A training step makes none; a progress update makes one.
    pub syncs: u64,
    /// Kernel dispatches recorded (plans and user kernels).
    pub dispatches: u64,
    /// Bind groups created, and dispatches that reused a cached one.
    pub bind_groups_created: u64,
    pub bind_groups_reused: u64,
}
