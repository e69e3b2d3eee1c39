//! Plans of `unfold2d` (im2col) and its adjoint `fold2d`, one thread per output element.
//! `fold2d` is a gather (each output pixel sums the window elements taken from it, in
//! kernel-offset order, as the CPU adds them), so it needs no atomics and is deterministic.

use super::elementwise::template;
use super::plan::{Arg, Grid, KernelSource, Program};
use super::target::{Lang, Target};
use crate::window::Window2d;
use crate::{DType, Error, Layout, Result};

/// The info word holding the padding value of unfold2d (after the geometry words).
pub(crate) const PAD_WORD: usize = 13;

/// The geometry words shared by both kernels: count, h, w, ho, wo, kh, kw, sh, sw, ph, pw,
/// dh, dw. WGSL indexes in 32 bits: an error when a padded size does not fit.
fn geometry(
    target: &Target,
    op: &'static str,
    count: usize,
    (h, w): (usize, usize),
    (ho, wo): (usize, usize),
    win: &Window2d,
) -> Result<Vec<usize>> {
    let Window2d { kernel: k, stride: s, padding: p, dilation: d } = *win;
    let fits = |size: usize, pad: usize| {
        pad.checked_mul(2).and_then(|x| x.checked_add(size)).is_some_and(|x| x as u64 <= target.word_max())
    };
    if !fits(h, p.0) || !fits(w, p.1) {
        return Err(Error::invalid(op, format!("{win:?} over {h}x{w} exceeds the wgpu backend's 32-bit indexing")));
    }
    Ok(vec![count, h, w, ho, wo, k.0, k.1, s.0, s.1, p.0, p.1, d.0, d.1])
}

pub(crate) fn unfold2d_source(target: &Target, dtype: DType, pad_expr: &str) -> Result<KernelSource> {
    let t = target.elem_type("unfold2d", dtype)?;
    let tmpl = template(target, rnn_kernels::cuda::UNFOLD2D, rnn_kernels::wgsl::UNFOLD2D);
    Ok(KernelSource::new(target, tmpl, &[("T", t), ("pad", pad_expr)], target.needs_half(&[dtype])))
}

/// `[N, C, H, W]` (input 0, seen through `l`) -> `[N, C, kh * kw, Ho * Wo]`, padding
/// reading `pad`.
pub(crate) fn unfold2d(target: &Target, dtype: DType, l: &Layout, window: &Window2d, pad: f64) -> Result<Program> {
    let &[n, c, h, w] = l.dims() else {
        return Err(Error::invalid("unfold2d", format!("expected a [N, C, H, W] layout, got {l:?}")));
    };
    let (ho, wo) = window.output_size("unfold2d", (h, w))?;
    let count = n * c * window.taps() * ho * wo;
    let mut scalars = geometry(target, "unfold2d", count, (h, w), (ho, wo), window)?;
    let (bits, pad_expr) = target.value_word("unfold2d", pad, dtype, PAD_WORD)?;
    scalars.push(bits as usize);
    let source = unfold2d_source(target, dtype, &pad_expr)?;
    let mut p = Program::new(target, "unfold2d", dtype, count);
    let info = target.info("unfold2d", &scalars, &[l])?;
    p.kernel(source, format!("unfold2d/{dtype}"), Grid::Threads(count), &[Arg::Input(0), Program::OUT], info)?;
    Ok(p)
}

pub(crate) fn fold2d_source(target: &Target, dtype: DType) -> Result<KernelSource> {
    let t = target.elem_type("fold2d", dtype)?;
    let half = target.needs_half(&[dtype]);
    Ok(match target.lang {
        Lang::Cuda => KernelSource::new(target, rnn_kernels::cuda::FOLD2D, &[("T", t)], half),
        Lang::Wgsl => {
            // Floats sum in f32, integers in their stored type (u8 kept to 8 bits).
            let store = if dtype == DType::U8 { "sum & 255u".to_string() } else { format!("{t}(sum)") };
            let subs = [("T", t), ("C", target.compute_type(dtype)), ("store", store.as_str())];
            KernelSource::new(target, rnn_kernels::wgsl::FOLD2D, &subs, half)
        }
    })
}

/// `[N, C, kh * kw, Ho * Wo]` (input 0, seen through `l`) -> `[N, C, H, W]`, summing every
/// window element into the input position it was taken from.
pub(crate) fn fold2d(
    target: &Target,
    dtype: DType,
    l: &Layout,
    (h, w): (usize, usize),
    window: &Window2d,
) -> Result<Program> {
    let (ho, wo) = window.output_size("fold2d", (h, w))?;
    let &[n, c, taps, positions] = l.dims() else {
        return Err(Error::invalid("fold2d", format!("expected a [N, C, kh * kw, L] layout, got {l:?}")));
    };
    if taps != window.taps() || positions != ho * wo {
        return Err(Error::invalid("fold2d", format!("layout {l:?} does not match {window:?} over {h}x{w}")));
    }
    let count = n * c * h * w;
    let source = fold2d_source(target, dtype)?;
    let mut p = Program::new(target, "fold2d", dtype, count);
    let info = target.info("fold2d", &geometry(target, "fold2d", count, (h, w), (ho, wo), window)?, &[l])?;
    p.kernel(source, format!("fold2d/{dtype}"), Grid::Threads(count), &[Arg::Input(0), Program::OUT], info)?;
    Ok(p)
}
