//! `unfold2d` (im2col) and its adjoint `fold2d`, one thread per output element. `fold2d` is
//! a gather (each output pixel sums the window elements taken from it, in kernel-offset
//! order, as the CPU adds them), so it needs no atomics and is deterministic.

use rnn_kernels::cuda;

use super::dtype::c_type;
use super::launch::{index_fn, info, kernel_source, Grid, KernelSource};
use super::storage::CudaStorage;
use crate::cpu::CpuStorage;
use crate::storage::BackendStorage;
use crate::window::Window2d;
use crate::{DType, Error, Layout, Result};

/// The info word holding the padding value of unfold2d (after the geometry words).
const PAD_WORD: usize = 13;

/// The geometry words shared by both kernels: count, h, w, ho, wo, kh, kw, sh, sw, ph, pw,
/// dh, dw.
fn geometry(count: usize, (h, w): (usize, usize), (ho, wo): (usize, usize), win: &Window2d) -> Vec<usize> {
    let Window2d { kernel: k, stride: s, padding: p, dilation: d } = *win;
    vec![count, h, w, ho, wo, k.0, k.1, s.0, s.1, p.0, p.1, d.0, d.1]
}

/// `value` converted to `dtype` exactly as the CPU converts it, as the bits of one word.
fn value_bits(value: f64, dtype: DType) -> Result<usize> {
    let one = CpuStorage::full(value, 1, dtype)?;
    let mut bits = [0u8; 8];
    crate::cpu_each!(&one, v => {
        let bytes: &[u8] = bytemuck::cast_slice(v);
        bits[..bytes.len()].copy_from_slice(bytes);
    });
    Ok(u64::from_le_bytes(bits) as usize)
}

/// The CUDA C expression of the stored value whose bits are in `info.w[word]`.
fn value_expr(dtype: DType, word: usize) -> String {
    match dtype {
        DType::F16 => format!("__ushort_as_half((unsigned short)info.w[{word}])"),
        DType::BF16 => format!("__ushort_as_bfloat16((unsigned short)info.w[{word}])"),
        DType::F32 => format!("__int_as_float((int)info.w[{word}])"),
        DType::F64 => format!("__longlong_as_double((long long)info.w[{word}])"),
        _ => format!("({})info.w[{word}]", c_type(dtype)),
    }
}

fn unfold2d_source(dtype: DType, index_x: &str) -> KernelSource {
    let pad = value_expr(dtype, PAD_WORD);
    kernel_source(cuda::UNFOLD2D, &[("T", c_type(dtype)), ("pad", pad.as_str()), ("index_x", index_x)])
}

/// `[N, C, H, W]` seen through `l` -> `[N, C, kh * kw, Ho * Wo]`, padding reading `pad`.
pub(crate) fn unfold2d(x: &CudaStorage, l: &Layout, window: &Window2d, pad: f64) -> Result<CudaStorage> {
    let &[n, c, h, w] = l.dims() else {
        return Err(Error::invalid("unfold2d", format!("expected a [N, C, H, W] layout, got {l:?}")));
    };
    let (ho, wo) = window.output_size("unfold2d", (h, w))?;
    let count = n * c * window.taps() * ho * wo;
    let out = x.alloc_like(x.dtype(), count)?;
    if count == 0 {
        return Ok(out);
    }
    let mut scalars = geometry(count, (h, w), (ho, wo), window);
    scalars.push(value_bits(pad, x.dtype())?);
    let source = unfold2d_source(x.dtype(), index_fn(l));
    let words = info("unfold2d", &scalars, &[l])?;
    x.dev().launch(&source, &words, &[x.slice(), out.slice()], Grid::Threads(count))?;
    Ok(out)
}

fn fold2d_source(dtype: DType, index_cols: &str) -> KernelSource {
    kernel_source(cuda::FOLD2D, &[("T", c_type(dtype)), ("index_cols", index_cols)])
}

/// `[N, C, kh * kw, Ho * Wo]` seen through `l` -> `[N, C, H, W]`, summing every window
/// element into the input position it was taken from.
pub(crate) fn fold2d(cols: &CudaStorage, l: &Layout, (h, w): (usize, usize), window: &Window2d) -> Result<CudaStorage> {
    let (ho, wo) = window.output_size("fold2d", (h, w))?;
    let &[n, c, taps, positions] = l.dims() else {
        return Err(Error::invalid("fold2d", format!("expected a [N, C, kh * kw, L] layout, got {l:?}")));
    };
    if taps != window.taps() || positions != ho * wo {
        return Err(Error::invalid("fold2d", format!("layout {l:?} does not match {window:?} over {h}x{w}")));
    }
    let count = n * c * h * w;
    let out = cols.alloc_like(cols.dtype(), count)?;
    if count == 0 {
        return Ok(out);
    }
    let source = fold2d_source(cols.dtype(), index_fn(l));
    let words = info("fold2d", &geometry(count, (h, w), (ho, wo), window), &[l])?;
    cols.dev().launch(&source, &words, &[cols.slice(), out.slice()], Grid::Threads(count))?;
    Ok(out)
}

/// Every kernel source this module can launch, named, for compile checks.
pub(crate) fn variants() -> Vec<(String, KernelSource)> {
    let mut v = Vec::new();
    for &d in &DType::ALL {
        for index in ["strided_offset", "contiguous_offset"] {
            v.push((format!("unfold2d_{d}_{index}"), unfold2d_source(d, index)));
            v.push((format!("fold2d_{d}_{index}"), fold2d_source(d, index)));
        }
    }
    v
}
