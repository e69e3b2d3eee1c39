//! The caching allocator the GPU backends share: freed buffers are kept by size class and
//! handed out again, so a training step allocates nothing new after the first.
//! `RNN_GPU_MEMORY_POOL=0` turns caching off (every buffer is freed at once).

use std::collections::HashMap;
use std::sync::Mutex;

pub use crate::gpu_memory::MemoryStats;

/// The host cache's size classes, shared.
pub(crate) use crate::host_pool::size_class;

pub(crate) struct BufferPool<B> {
    enabled: bool,
    free: Mutex<HashMap<u64, Vec<B>>>,
    stats: Mutex<MemoryStats>,
}

impl<B> BufferPool<B> {
    pub fn new(enabled: bool) -> Self {
        BufferPool { enabled, free: Mutex::new(HashMap::new()), stats: Mutex::new(MemoryStats::default()) }
    }

    pub fn stats(&self) -> MemoryStats {
        *self.stats.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn empty_cache(&self) {
        let dropped: u64 = {
            let mut free = self.free.lock().unwrap_or_else(|p| p.into_inner());
            free.drain().map(|(class, bufs)| class * bufs.len() as u64).sum()
        };
        self.stats.lock().unwrap_or_else(|p| p.into_inner()).reserved -= dropped;
    }

    pub fn take_cached(&self, class: u64) -> Option<B> {
        self.free.lock().unwrap_or_else(|p| p.into_inner()).get_mut(&class).and_then(Vec::pop)
    }

    pub fn record(&self, class: u64, fresh: bool) {
        let mut s = self.stats.lock().unwrap_or_else(|p| p.into_inner());
        s.allocated += class;
        s.peak = s.peak.max(s.allocated);
        if fresh {
            s.allocations += 1;
            s.reserved += class;
        } else {
            s.cache_hits += 1;
        }
    }

    pub fn release(&self, class: u64, buffer: B) {
        let mut s = self.stats.lock().unwrap_or_else(|p| p.into_inner());
        s.allocated -= class;
        if self.enabled {
            self.free.lock().unwrap_or_else(|p| p.into_inner()).entry(class).or_default().push(buffer);
        } else {
            // Dropping a buffer frees it.
            s.reserved -= class;
            drop(buffer);
        }
    }
}

/// Whether `RNN_GPU_MEMORY_POOL` allows caching (anything but `0`).
pub(crate) fn pool_enabled() -> bool {
    std::env::var("RNN_GPU_MEMORY_POOL").map_or(true, |v| v.trim() != "0")
}
