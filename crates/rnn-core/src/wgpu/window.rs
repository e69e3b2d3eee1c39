//! `unfold2d` (im2col) and its adjoint `fold2d`, one thread per output element. `fold2d` is
//! a gather (each output pixel sums the window elements taken from it, in kernel-offset
//! order), so it needs no atomics and is deterministic.

use half::f16;
use rnn_kernels::wgsl;

use super::dtype::compute_type;
use super::launch::{info, kernel_source, Grid};
use super::storage::WgpuStorage;
use crate::storage::BackendStorage;
use crate::window::Window2d;
use crate::{DType, Error, Layout, Result};

/// The geometry words shared by both kernels: count, h, w, ho, wo, kh, kw, sh, sw, ph, pw,
/// dh, dw. An error when a padded size exceeds 32-bit indexing.
fn geometry(
    op: &'static str,
    count: usize,
    (h, w): (usize, usize),
    (ho, wo): (usize, usize),
    win: &Window2d,
) -> Result<Vec<usize>> {
    let Window2d { kernel: k, stride: s, padding: p, dilation: d } = *win;
    let fits = |size: usize, pad: usize| {
        pad.checked_mul(2).and_then(|x| x.checked_add(size)).is_some_and(|x| x <= u32::MAX as usize)
    };
    if !fits(h, p.0) || !fits(w, p.1) {
        return Err(Error::invalid(op, format!("{win:?} over {h}x{w} exceeds the wgpu backend's 32-bit indexing")));
    }
    Ok(vec![count, h, w, ho, wo, k.0, k.1, s.0, s.1, p.0, p.1, d.0, d.1])
}

/// `value` converted to `dtype` as the CPU converts it, as the bits of one 32-bit word, and
/// the WGSL expression of the stored element reading them from `info[word]`.
fn pad_bits(value: f64, dtype: DType, t: &str, word: usize) -> Result<(usize, String)> {
    let float = |bits: u32| (bits as usize, format!("{t}(bitcast<f32>(info[{word}]))"));
    Ok(match dtype {
        DType::F32 => float((value as f32).to_bits()),
        // Exact in f32, so the kernel's f16 conversion does not round it again.
        DType::F16 => float(f16::from_f64(value).to_f32().to_bits()),
        DType::U8 => (usize::from(value as u8), format!("info[{word}]")),
        DType::U32 => (value as u32 as usize, format!("info[{word}]")),
        _ => {
            let v = i32::try_from(value as i64).map_err(|_| {
                Error::invalid("unfold2d", format!("padding {value} does not fit the wgpu backend's 32-bit integers"))
            })?;
            (v as u32 as usize, format!("bitcast<i32>(info[{word}])"))
        }
    })
}

/// `[N, C, H, W]` seen through `l` -> `[N, C, kh * kw, Ho * Wo]`, padding reading `pad`.
pub(crate) fn unfold2d(x: &WgpuStorage, l: &Layout, window: &Window2d, pad: f64) -> Result<WgpuStorage> {
    let &[n, c, h, w] = l.dims() else {
        return Err(Error::invalid("unfold2d", format!("expected a [N, C, H, W] layout, got {l:?}")));
    };
    let t = x.wgsl_type("unfold2d")?;
    let (ho, wo) = window.output_size("unfold2d", (h, w))?;
    let count = n * c * window.taps() * ho * wo;
    let mut scalars = geometry("unfold2d", count, (h, w), (ho, wo), window)?;
    let (bits, pad_expr) = pad_bits(pad, x.dtype(), t, scalars.len())?;
    scalars.push(bits);
    let source = kernel_source(wgsl::UNFOLD2D, &[("T", t), ("pad", &pad_expr)], x.is_f16());
    let out = x.alloc_like(x.dtype(), count)?;
    let words = info("unfold2d", &scalars, &[l])?;
    x.ctx().launch(&source, &words, &[x.buffer(), out.buffer()], Grid::Threads(count))?;
    Ok(out)
}

/// `[N, C, kh * kw, Ho * Wo]` seen through `l` -> `[N, C, H, W]`, summing every window
/// element into the input position it was taken from.
pub(crate) fn fold2d(cols: &WgpuStorage, l: &Layout, (h, w): (usize, usize), window: &Window2d) -> Result<WgpuStorage> {
    let (ho, wo) = window.output_size("fold2d", (h, w))?;
    let &[n, c, taps, positions] = l.dims() else {
        return Err(Error::invalid("fold2d", format!("expected a [N, C, kh * kw, L] layout, got {l:?}")));
    };
    if taps != window.taps() || positions != ho * wo {
        return Err(Error::invalid("fold2d", format!("layout {l:?} does not match {window:?} over {h}x{w}")));
    }
    let t = cols.wgsl_type("fold2d")?;
    let store = if cols.dtype() == DType::U8 { "sum & 255u".to_string() } else { format!("{t}(sum)") };
    let subs = [("T", t), ("C", compute_type(cols.dtype(), t)), ("store", store.as_str())];
    let source = kernel_source(wgsl::FOLD2D, &subs, cols.is_f16());
    let count = n * c * h * w;
    let out = cols.alloc_like(cols.dtype(), count)?;
    let words = info("fold2d", &geometry("fold2d", count, (h, w), (ho, wo), window)?, &[l])?;
    cols.ctx().launch(&source, &words, &[cols.buffer(), out.buffer()], Grid::Threads(count))?;
    Ok(out)
}
