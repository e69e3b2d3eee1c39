//! Host buffers standing in for device allocations: 256-byte aligned, sized to the pool's
//! size classes like the CUDA backend's, filled with a NaN pattern (so a kernel reading
//! what nobody wrote shows up in comparisons), and fenced by inaccessible pages, so a
//! kernel that reads or writes past either end faults instead of corrupting memory.

use crate::gpu_pool::size_class;
use crate::{Error, Result};

/// What fresh buffers hold: every byte 0xff, NaN in every float dtype.
const UNWRITTEN: u8 = 0xff;

pub(crate) struct EmuBuffer {
    /// The whole mapping: a guard page, the pages holding the buffer, a guard page.
    map: *mut libc::c_void,
    map_len: usize,
    /// The buffer's first byte: its end touches the last guard page.
    ptr: *mut u8,
    bytes: usize,
}

// SAFETY: the mapping is owned by this value; kernels write it only during a launch, which
// the emulator runs to completion before returning (no aliasing Rust references exist).
unsafe impl Send for EmuBuffer {}
// SAFETY: as for Send: shared references only read through `read`, outside launches.
unsafe impl Sync for EmuBuffer {}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(page).unwrap_or(4096).max(4096)
}

impl EmuBuffer {
    /// A buffer of at least `bytes` bytes (rounded to the allocator's size class).
    pub fn new(bytes: u64) -> Result<EmuBuffer> {
        let oom = || Error::OutOfMemory { requested: bytes as usize, free: 0, total: 0 };
        let class = usize::try_from(size_class(bytes)).map_err(|_| oom())?;
        let page = page_size();
        let body = class.div_ceil(page).checked_mul(page).ok_or_else(oom)?;
        let map_len = body.checked_add(2 * page).ok_or_else(oom)?;
        // SAFETY: an anonymous private mapping; the result is checked below.
        let map = unsafe {
            libc::mmap(std::ptr::null_mut(), map_len, libc::PROT_NONE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0)
        };
        if map == libc::MAP_FAILED {
            return Err(oom());
        }
        // SAFETY: the range lies inside the mapping just made.
        let ok = unsafe { libc::mprotect(map.cast::<u8>().add(page).cast(), body, libc::PROT_READ | libc::PROT_WRITE) };
        // The end of the class is the end of the writable pages: 256-aligned, since the class
        // is a multiple of 256.
        // SAFETY: `page + body - class` lies inside the mapping (`class <= body`).
        let ptr = unsafe { map.cast::<u8>().add(page + body - class) };
        let buffer = EmuBuffer { map, map_len, ptr, bytes: class };
        if ok != 0 {
            return Err(oom());
        }
        // SAFETY: `bytes` writable bytes start at `ptr`.
        unsafe { std::ptr::write_bytes(buffer.ptr, UNWRITTEN, class) };
        Ok(buffer)
    }

    pub fn ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// The first `len` bytes.
    pub fn read(&self, len: usize) -> &[u8] {
        // SAFETY: `len` is at most the buffer's size (callers pass their element bytes).
        unsafe { std::slice::from_raw_parts(self.ptr, len.min(self.bytes)) }
    }

    /// Copies `data` to the start of the buffer.
    pub fn write(&self, data: &[u8]) {
        let len = data.len().min(self.bytes);
        // SAFETY: the buffer holds `len` bytes; `data` is a different allocation.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr, len) };
    }
}

impl Drop for EmuBuffer {
    fn drop(&mut self) {
        // SAFETY: the mapping was made by `new` with this length and is unmapped once.
        unsafe { libc::munmap(self.map, self.map_len) };
    }
}
