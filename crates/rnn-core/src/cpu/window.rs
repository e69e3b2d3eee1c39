//! `unfold2d` (im2col) and its adjoint `fold2d`, one `[H, W]` plane at a time. Every kernel
//! offset `(i, j)` maps a window row to one input row, and a run of window columns to input
//! columns `stride` apart: the runs are copied (or added) whole, `copy_from_slice` when the
//! stride is 1, and only the ends of each run that fall in the padding are filled.

use rayon::prelude::*;

use super::parallel::{zeroed_vec, PAR_WORK};
use super::unary::contiguous_slice;
use super::CpuStorage;
use crate::num::Elem;
use crate::window::Window2d;
use crate::{Error, Layout, Result, WithDType};

/// Sizes of one plane: input `h x w`, `ho x wo` windows of `window`.
struct Plane<'a> {
    h: usize,
    w: usize,
    ho: usize,
    wo: usize,
    window: &'a Window2d,
}

/// The positions `o` in `0..out_len` whose input index `o * stride + offset - pad` lies in
/// `0..in_len`: one range, since the index grows with `o`.
fn valid_range(out_len: usize, in_len: usize, stride: usize, offset: usize, pad: usize) -> (usize, usize) {
    let lo = pad.saturating_sub(offset).div_ceil(stride);
    let hi = (pad + in_len).saturating_sub(offset).div_ceil(stride).min(out_len);
    (lo.min(hi), hi)
}

impl Plane<'_> {
    /// Calls `f(tap, oh, input_row, lo..hi, first_col)` for each kernel offset `tap = i * kw + j`
    /// and window row `oh` whose input row lies inside the input; window columns `lo..hi` map
    /// to input columns `first_col, first_col + sw, ..` of that row. Rows in the padding are
    /// passed with `input_row = None`; `first_col` is meaningful only when `lo < hi`.
    fn for_each_run(&self, mut f: impl FnMut(usize, usize, Option<usize>, (usize, usize), usize)) {
        let Window2d { kernel: k, stride: s, padding: p, dilation: d } = *self.window;
        for i in 0..k.0 {
            let rows = valid_range(self.ho, self.h, s.0, i * d.0, p.0);
            for j in 0..k.1 {
                let cols = valid_range(self.wo, self.w, s.1, j * d.1, p.1);
                // In range by construction: cols.0 * s.1 + j * d.1 >= p.1 when cols is non-empty.
                let first_col = (cols.0 * s.1 + j * d.1).saturating_sub(p.1);
                for oh in 0..self.ho {
                    let row = (rows.0..rows.1).contains(&oh).then(|| oh * s.0 + i * d.0 - p.0);
                    f(i * k.1 + j, oh, row, cols, first_col);
                }
            }
        }
    }

    /// Writes the windows of one input plane (`h * w`) into `dst` (`kh * kw * ho * wo`).
    fn unfold<T: Copy>(&self, src: &[T], dst: &mut [T], pad: T) {
        let (w, wo, sw) = (self.w, self.wo, self.window.stride.1);
        let positions = self.ho * wo;
        self.for_each_run(|tap, oh, row, (lo, hi), first| {
            let out = &mut dst[tap * positions + oh * wo..][..wo];
            let Some(r) = row else {
                out.fill(pad);
                return;
            };
            out[..lo].fill(pad);
            out[hi..].fill(pad);
            if lo == hi {
                return;
            }
            let input = &src[r * w..][..w];
            if sw == 1 {
                out[lo..hi].copy_from_slice(&input[first..first + (hi - lo)]);
            } else {
                for (o, &x) in out[lo..hi].iter_mut().zip(input[first..].iter().step_by(sw)) {
                    *o = x;
                }
            }
        });
    }

    /// Adds the window elements `src` (`kh * kw * ho * wo`) into the plane `dst` (`h * w`).
    fn fold<T: Elem>(&self, src: &[T], dst: &mut [T]) {
        let (w, wo, sw) = (self.w, self.wo, self.window.stride.1);
        let positions = self.ho * wo;
        self.for_each_run(|tap, oh, row, (lo, hi), first| {
            let Some(r) = row.filter(|_| lo < hi) else { return };
            let values = &src[tap * positions + oh * wo..][lo..hi];
            let out = &mut dst[r * w..][..w];
            if sw == 1 {
                for (o, &v) in out[first..first + (hi - lo)].iter_mut().zip(values) {
                    *o = o.add(v);
                }
            } else {
                for (o, &v) in out[first..].iter_mut().step_by(sw).zip(values) {
                    *o = o.add(v);
                }
            }
        });
    }
}

/// Runs `f(plane_index, out_plane)` over the `out_len`-element planes of `out`, on the
/// thread pool when the whole job (`work` elements moved) is worth it.
fn for_each_plane<T: Send>(out: &mut [T], out_len: usize, work: usize, f: impl Fn(usize, &mut [T]) + Sync + Send) {
    if out.is_empty() || out_len == 0 {
        return;
    }
    if work < PAR_WORK {
        out.chunks_mut(out_len).enumerate().for_each(|(i, plane)| f(i, plane));
    } else {
        out.par_chunks_mut(out_len).enumerate().for_each(|(i, plane)| f(i, plane));
    }
}

fn unfold_typed<T: WithDType>(x: &[T], plane: &Plane, planes: usize, pad: f64) -> Result<Vec<T>> {
    let (in_len, out_len) = (plane.h * plane.w, plane.window.taps() * plane.ho * plane.wo);
    let mut out = zeroed_vec(planes * out_len)?;
    let pad = T::from_f64(pad);
    if in_len == 0 {
        // An empty input plane (H or W is 0, the padding is not): every element is padding.
        out.fill(pad);
        return Ok(out);
    }
    for_each_plane(&mut out, out_len, out_len * planes, |i, dst| plane.unfold(&x[i * in_len..][..in_len], dst, pad));
    Ok(out)
}

fn fold_typed<T: Elem>(cols: &[T], plane: &Plane, planes: usize) -> Result<Vec<T>> {
    let (in_len, out_len) = (plane.window.taps() * plane.ho * plane.wo, plane.h * plane.w);
    let mut out = zeroed_vec(planes * out_len)?;
    for_each_plane(&mut out, out_len, in_len * planes, |i, dst| plane.fold(&cols[i * in_len..][..in_len], dst));
    Ok(out)
}

impl CpuStorage {
    /// `[N, C, H, W]` seen through `l` -> `[N, C, kh * kw, Ho * Wo]`, padding reading `pad`.
    pub fn unfold2d(&self, l: &Layout, window: &Window2d, pad: f64) -> Result<CpuStorage> {
        let &[_, _, h, w] = l.dims() else {
            return Err(Error::invalid("unfold2d", format!("expected a [N, C, H, W] layout, got {l:?}")));
        };
        let (ho, wo) = window.output_size("unfold2d", (h, w))?;
        let plane = Plane { h, w, ho, wo, window };
        let planes = l.dims()[0] * l.dims()[1];
        Ok(cpu_map_same!(self, v => unfold_typed(&contiguous_slice(v, l)?, &plane, planes, pad)?))
    }

    /// `[N, C, kh * kw, Ho * Wo]` seen through `l` -> `[N, C, H, W]`, summing every window
    /// element into the input position it was taken from.
    pub fn fold2d(&self, l: &Layout, (h, w): (usize, usize), window: &Window2d) -> Result<CpuStorage> {
        let (ho, wo) = window.output_size("fold2d", (h, w))?;
        let &[n, c, taps, positions] = l.dims() else {
            return Err(Error::invalid("fold2d", format!("expected a [N, C, kh * kw, L] layout, got {l:?}")));
        };
        if taps != window.taps() || positions != ho * wo {
            return Err(Error::invalid("fold2d", format!("layout {l:?} does not match {window:?} over {h}x{w}")));
        }
        let plane = Plane { h, w, ho, wo, window };
        Ok(cpu_map_same!(self, v => fold_typed(&contiguous_slice(v, l)?, &plane, n * c)?))
    }
}
