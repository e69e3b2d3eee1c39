//! A host emulator of the CUDA backend, so that the CUDA kernels run in CI on machines
//! without a GPU (feature `cuda-emu`, Linux).
//!
//! `EmuStorage` is a GPU runtime like the CUDA one: the shared GPU layer (`gpu/`) builds the
//! same programs for it (`Target` with the CUDA language; only the grid is capped at
//! `MAX_GRID` blocks, so that small tensors already cross grid boundaries and every
//! grid-stride loop iterates), and it runs them. It is compiled for the crate's tests only
//! (`cargo test -p rnn-core --features cuda-emu --lib emu::`). Kernel plans are the real `.cu` sources
//! compiled by the system C++ compiler against `shim/cuda_shim.h` (grid and block loops,
//! `__shared__` per block, `__syncthreads` as a barrier of the block's threads, warp
//! shuffles over 32-lane groups, atomics, f16 / bf16 conversions; see that header for what
//! it emulates). Products (`GemmLaunch`) run through `gemm::execute`, the reference of
//! cuBLASLt's contract, which also checks the alignment promises made to cuBLASLt. Buffers
//! are fenced by inaccessible pages (`buffer.rs`).
//!
//! The tensor-core primitives of `mma.cuh` (mma.sync, ldmatrix, cp.async) are modelled in
//! `shim/shim_mma.h` with PTX's fragment layouts; a cp.async copy lands only when the wait
//! that retires its group runs, so a kernel that reads a tile before waiting for it fails.
//!
//! What it cannot see: data races and the GPU memory model (threads of a block run as one
//! interleaving, so a missing barrier or fence usually goes unnoticed), coalescing, bank
//! conflicts, occupancy and real timing, other inline PTX, CUDA's own
//! math library (glibc's replaces it, last-ulp differences), NVRTC itself (the kernels are
//! compiled by g++; `tests/cuda_kernels.rs` compiles them with NVRTC), and cuBLASLt's own
//! kernels. On a real GPU, `scripts/gpu/run.sh` (the suite under compute-sanitizer) stays
//! the check for those.

mod buffer;
mod compile;
mod gemm;
#[cfg(test)]
mod selftest;
#[cfg(test)]
mod tests;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use self::buffer::EmuBuffer;
use crate::cpu::CpuStorage;
use crate::gpu::deferred::Deferred;
use crate::gpu::gemm::GemmLaunch;
use crate::gpu::plan::{Arg, KernelPlan, KernelSource};
use crate::gpu::target::{Lang, Target};
use crate::gpu::{GemmBuffers, GemmOutcome, GpuStorage};
use crate::storage::Storage;
use crate::{DType, Device, Error, Result};

/// Blocks of one emulated launch, at most: grid-stride loops then iterate from a few
/// thousand elements on.
pub(crate) const MAX_GRID: usize = 8;

thread_local! {
    /// The compute capability of the device the emulator plays on this thread (a recent one
    /// unless a test asks for an older one with `as_device_of`).
    static COMPUTE_CAPABILITY: std::cell::Cell<(u32, u32)> = const { std::cell::Cell::new((9, 0)) };
}

/// The target the emulator plans for: CUDA's, with a small grid.
pub(crate) fn target() -> Target {
    Target { max_grid: MAX_GRID, ..Target::cuda_on(COMPUTE_CAPABILITY.get()) }
}

/// Runs `f` with the emulator playing a device of this compute capability on this thread,
/// so that the plans are those of that device (Turing's 16-bit attention: the scalar kernels).
#[cfg(test)]
pub(crate) fn as_device_of<R>(compute_capability: (u32, u32), f: impl FnOnce() -> R) -> R {
    struct Restore((u32, u32));
    impl Drop for Restore {
        fn drop(&mut self) {
            COMPUTE_CAPABILITY.set(self.0);
        }
    }
    let _restore = Restore(COMPUTE_CAPABILITY.replace(compute_capability));
    f()
}

/// Whether products run their fused epilogue (off: the runtime reports it unsupported, as
/// cuBLASLt does for f64 on most devices, and the fallback program runs instead).
static EPILOGUES: AtomicBool = AtomicBool::new(true);

pub(crate) fn set_epilogues(on: bool) {
    EPILOGUES.store(on, Ordering::SeqCst);
}

/// The variants (`KernelPlan::variant`) launched so far in this process.
fn executed() -> &'static Mutex<BTreeSet<String>> {
    static EXECUTED: OnceLock<Mutex<BTreeSet<String>>> = OnceLock::new();
    EXECUTED.get_or_init(Default::default)
}

pub(crate) fn executed_variants() -> BTreeSet<String> {
    executed().lock().unwrap_or_else(|p| p.into_inner()).clone()
}

/// Compiles every source in `sources` not loaded yet, `jobs` compilers at a time.
pub(crate) fn precompile(sources: &[KernelSource], jobs: usize) -> Result<()> {
    compile::precompile(sources, jobs)
}

/// A buffer of the emulated device.
#[derive(Clone)]
pub(crate) struct EmuStorage {
    buf: Arc<EmuBuffer>,
    len: usize,
    dtype: DType,
}

impl std::fmt::Debug for EmuStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "EmuStorage({} x {})", self.len, self.dtype)
    }
}

impl EmuStorage {
    fn byte_len(&self) -> usize {
        self.len * self.dtype.size_in_bytes()
    }

    /// Element `i` as f64 (for products).
    fn get(&self, i: usize) -> Result<f64> {
        let size = self.dtype.size_in_bytes();
        if i >= self.len {
            return Err(Error::Msg(format!("gemm contract: element {i} read past a buffer of {} elements", self.len)));
        }
        let b = &self.buf.read((i + 1) * size)[i * size..];
        Ok(match self.dtype {
            DType::F32 => f64::from(f32::from_ne_bytes([b[0], b[1], b[2], b[3]])),
            DType::F64 => f64::from_ne_bytes(b[..8].try_into().unwrap_or_default()),
            DType::F16 => half::f16::from_ne_bytes([b[0], b[1]]).to_f64(),
            DType::BF16 => half::bf16::from_ne_bytes([b[0], b[1]]).to_f64(),
            d => return Err(Error::UnsupportedDType { op: "matmul", dtype: d, hint: ": use a float dtype" }),
        })
    }

    /// Stores `v` rounded once to the dtype as element `i` (for products).
    fn set(&self, i: usize, v: f64) -> Result<()> {
        if i >= self.len {
            return Err(Error::Msg(format!(
                "gemm contract: element {i} written past a buffer of {} elements",
                self.len
            )));
        }
        let bytes: Vec<u8> = match self.dtype {
            DType::F32 => (v as f32).to_ne_bytes().to_vec(),
            DType::F64 => v.to_ne_bytes().to_vec(),
            DType::F16 => half::f16::from_f64(v).to_ne_bytes().to_vec(),
            DType::BF16 => half::bf16::from_f64(v).to_ne_bytes().to_vec(),
            d => return Err(Error::UnsupportedDType { op: "matmul", dtype: d, hint: ": use a float dtype" }),
        };
        let size = bytes.len();
        // SAFETY: element i lies inside the buffer (checked above); no reference to it exists.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.buf.ptr().add(i * size), size) };
        Ok(())
    }
}

impl GpuStorage for EmuStorage {
    fn elem_dtype(&self) -> DType {
        self.dtype
    }
    fn len(&self) -> usize {
        self.len
    }
    fn ordinal(&self) -> usize {
        0
    }
    fn device_of(ordinal: usize) -> Device {
        Device::Cuda(ordinal)
    }
    fn target_of(_: usize) -> Result<Target> {
        Ok(target())
    }
    fn alloc(_: usize, dtype: DType, len: usize) -> Result<Self> {
        let bytes = (len as u64).checked_mul(dtype.size_in_bytes() as u64);
        let bytes = bytes.ok_or(Error::OutOfMemory { requested: usize::MAX, free: 0, total: 0 })?;
        Ok(EmuStorage { buf: Arc::new(EmuBuffer::new(bytes)?), len, dtype })
    }
    fn upload(cpu: &CpuStorage, ordinal: usize) -> Result<Self> {
        let s = Self::alloc(ordinal, cpu.dtype(), cpu.len())?;
        s.buf.write(cpu.as_bytes());
        Ok(s)
    }
    fn download(&self) -> Result<CpuStorage> {
        Ok(CpuStorage::from_bytes(self.buf.read(self.byte_len()), self.dtype))
    }
    fn launch(plan: &KernelPlan, args: &[&Self]) -> Result<()> {
        if plan.source.lang() != Lang::Cuda {
            return Err(Error::Msg("internal: the CUDA emulator got a WGSL plan".into()));
        }
        let kernel = compile::kernel(&plan.source)?;
        let pointers: Vec<*mut std::ffi::c_void> = args.iter().map(|s| s.buf.ptr().cast()).collect();
        let d = plan.dims;
        let blocks = d.grid.iter().map(|&g| g as usize).product::<usize>();
        // Small grids run on the calling thread: spawning threads costs more than they save.
        let os_threads = if blocks > 2 { 0 } else { 1 };
        let dims = compile::LaunchDims { grid: d.grid, block: d.block, shared_bytes: d.shared_bytes, os_threads };
        let mut err = vec![0 as std::ffi::c_char; 512];
        // SAFETY: the entry point was compiled from `plan.source`; the pointers are live
        // buffers (held by `args`) in the kernel's parameter order, as the plan lists them,
        // each at least as large as the plan's layouts reach (checked by the plan builders).
        let status = unsafe {
            (kernel.entry)(
                plan.info.as_ptr(),
                plan.info.len() as std::ffi::c_ulong,
                pointers.as_ptr(),
                pointers.len() as std::ffi::c_ulong,
                &dims,
                err.as_mut_ptr(),
                err.len() as std::ffi::c_ulong,
            )
        };
        executed().lock().unwrap_or_else(|p| p.into_inner()).insert(plan.variant.clone());
        if status != 0 {
            // SAFETY: the shim writes a NUL-terminated message into `err`.
            let msg = unsafe { std::ffi::CStr::from_ptr(err.as_ptr()) }.to_string_lossy().into_owned();
            return Err(Error::Msg(format!("cuda emulator: {} ({}): {msg}", plan.op, plan.variant)));
        }
        Ok(())
    }
    fn gemm(g: &GemmLaunch, b: GemmBuffers<'_, Self>) -> Result<GemmOutcome> {
        if g.bias.is_some() && !EPILOGUES.load(Ordering::SeqCst) {
            return Ok(GemmOutcome::EpilogueUnsupported);
        }
        let pick = |arg: Arg| -> Result<&EmuStorage> {
            match arg {
                a if a == g.a.arg => Ok(b.a),
                a if a == g.b.arg => Ok(b.b),
                a if a == g.d.arg => Ok(b.d),
                a => b
                    .bias
                    .filter(|_| g.bias.is_some_and(|(_, bias, _)| bias == a))
                    .ok_or_else(|| Error::Msg(format!("gemm contract: no buffer for {a:?}"))),
            }
        };
        let base = |arg: Arg| pick(arg).map_or(0, |s| s.buf.ptr() as u64);
        gemm::execute(g, base, |arg, i| pick(arg)?.get(i), |arg, i, v| pick(arg)?.set(i, v))?;
        executed().lock().unwrap_or_else(|p| p.into_inner()).insert(format!("gemm/{}", g.dtype));
        Ok(GemmOutcome::Done)
    }
    fn deferred() -> &'static std::thread::LocalKey<Deferred<Self>> {
        thread_local!(static PENDING: Deferred<EmuStorage> = Deferred::default());
        &PENDING
    }
    fn of(_: &Storage) -> Option<&Self> {
        None
    }
    fn device_address(&self) -> Option<u64> {
        // Kernels run on the host: a device address is a host pointer.
        Some(self.buf.ptr() as u64)
    }
}
