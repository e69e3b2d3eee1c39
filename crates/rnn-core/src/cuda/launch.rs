//! Filling CUDA kernel templates and launching them. Every kernel is
//! `extern "C" __global__ void kernel(const Info info, ...buffers)`: `info` (sizes and
//! layouts, see `gpu_pool::info_words` and common.cuh) is passed by value, so a launch needs
//! no host-to-device copy.

use cudarc::driver::{CudaSlice, LaunchConfig, PushKernelArg};

use super::context::{driver_err, CudaDevice};
use crate::{Error, Layout, Result};

/// Words of `Info` (`INFO_WORDS` in common.cuh).
pub(crate) const INFO_WORDS: usize = 96;
/// Threads per block of the 1-D kernels.
pub(crate) const BLOCK: u32 = 256;

/// The kernel argument holding sizes and layouts.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct Info([u64; INFO_WORDS]);

// SAFETY: a plain array of u64, laid out as the C struct `Info` in common.cuh.
unsafe impl cudarc::driver::DeviceRepr for Info {}

/// The `Info` of a kernel: `scalars`, then the layouts (see `gpu_pool::info_words`).
pub(crate) fn info(op: &'static str, scalars: &[usize], layouts: &[&Layout]) -> Result<Info> {
    let words = crate::gpu_pool::info_words(scalars, layouts);
    if words.len() > INFO_WORDS {
        let msg = format!("too many dims for a CUDA kernel ({} info words, at most {INFO_WORDS})", words.len());
        return Err(Error::invalid(op, msg));
    }
    let mut info = [0u64; INFO_WORDS];
    info[..words.len()].copy_from_slice(&words);
    Ok(Info(info))
}

/// A kernel: a template of rnn-kernels and the values of its `{{key}}` placeholders.
///
/// `key` names it exactly (the template's address and length, and every substitution with
/// its length), so a launch finds the loaded function by a short string and the source text,
/// several KiB, is only filled in when the key is new.
pub(crate) struct KernelSource {
    template: &'static str,
    subs: Vec<(&'static str, String)>,
    key: String,
}

impl KernelSource {
    pub(crate) fn key(&self) -> &str {
        &self.key
    }

    /// `common.cuh` plus the template with every placeholder replaced.
    pub(crate) fn text(&self) -> String {
        let mut body = self.template.to_string();
        for (key, value) in &self.subs {
            body = body.replace(&format!("{{{{{key}}}}}"), value);
        }
        debug_assert!(!body.contains("{{"), "unfilled placeholder in kernel:\n{body}");
        format!("{}\n{body}", rnn_kernels::cuda::COMMON)
    }
}

/// `template` with the substitutions `subs` (placeholder name, value).
pub(crate) fn kernel_source(template: &'static str, subs: &[(&'static str, &str)]) -> KernelSource {
    use std::fmt::Write;
    let mut key = format!("{:x}+{}", template.as_ptr() as usize, template.len());
    for (name, value) in subs {
        // The length makes the key unambiguous whatever characters the values hold.
        let _ = write!(key, "|{name}={}:{value}", value.len());
    }
    KernelSource { template, subs: subs.iter().map(|(k, v)| (*k, v.to_string())).collect(), key }
}

/// The CUDA function that maps an element index to a storage position under `l`:
/// `contiguous_offset` when `l` is contiguous, else `strided_offset`.
pub(crate) fn index_fn(l: &Layout) -> &'static str {
    if l.is_contiguous() {
        "contiguous_offset"
    } else {
        "strided_offset"
    }
}

/// How many blocks to launch.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Grid {
    /// One thread per element (grid-stride loops cover the rest), `BLOCK` threads per block.
    Threads(usize),
    /// An explicit launch configuration.
    Config(LaunchConfig),
}

impl Grid {
    fn config(self) -> LaunchConfig {
        match self {
            Grid::Threads(n) => {
                let blocks = n.div_ceil(BLOCK as usize).clamp(1, 65535 * 32) as u32;
                LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (BLOCK, 1, 1), shared_mem_bytes: 0 }
            }
            Grid::Config(c) => c,
        }
    }
}

impl CudaDevice {
    /// Launches `kernel` of `source` on the device's stream with `info` and `buffers`.
    pub(crate) fn launch(
        &self,
        source: &KernelSource,
        info: &Info,
        buffers: &[&CudaSlice<u8>],
        grid: Grid,
    ) -> Result<()> {
        if matches!(grid, Grid::Threads(0)) {
            return Ok(());
        }
        let f = self.function_keyed(source.key(), "kernel", || source.text())?;
        let mut args = self.stream.launch_builder(&f);
        args.arg(info);
        for b in buffers {
            args.arg(*b);
        }
        let config = grid.config();
        if self.debug {
            tracing::debug!(ordinal = self.ordinal, grid = ?config.grid_dim, block = ?config.block_dim, "cuda launch");
        }
        // SAFETY: every template's parameter list is (Info, buffers...) in this order, and the
        // buffers are at least as large as the layouts in `info` reach (checked by the ops).
        unsafe { args.launch(config) }.map_err(driver_err(self.ordinal, "kernel launch"))?;
        Ok(())
    }
}
