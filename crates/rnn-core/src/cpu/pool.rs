//! 2-D max and average pooling on the CPU (`Tensor::max_pool2d`, `Tensor::avg_pool2d`), one
//! `[H, W]` plane at a time, straight from the input (no unfolded copy). Each kernel offset
//! visits a run of windows at once (`Plane::for_each_run`), updating their running max or
//! sum with selects rather than data-dependent branches. The max-pool backward recomputes
//! each window's argmax the same way and adds the gradient to it: the forward saves nothing.

use std::mem::MaybeUninit;

use super::window::{build_planes, Plane};
use crate::num::Float;
use crate::{Result, Window2d};

/// Pooling planes: `planes` planes of `plane` geometry.
pub(crate) struct Pooling<'a> {
    plane: Plane<'a>,
    planes: usize,
}

/// Per-window scratch of one thread: running max and where it is.
struct Windows<T> {
    max: Vec<T>,
    at: Vec<u32>,
}

/// No window element seen yet (every window has one: padding is at most half the kernel).
const NONE: u32 = u32::MAX;

impl<'a> Pooling<'a> {
    /// `planes` input planes of `h x w` with `ho x wo` windows of `window`.
    pub(crate) fn new((h, w): (usize, usize), (ho, wo): (usize, usize), planes: usize, window: &'a Window2d) -> Self {
        Pooling { plane: Plane { h, w, ho, wo, window }, planes }
    }

    fn in_len(&self) -> usize {
        self.plane.h * self.plane.w
    }

    fn out_len(&self) -> usize {
        self.plane.ho * self.plane.wo
    }

    /// Calls `f(tap, first_window, input_run)` for every run of windows whose element at
    /// kernel offset `tap` lies inside the input: windows `first_window..` (plane order)
    /// read `input_run[k * stride]`, `k` counting the run's windows.
    fn for_each_input_run<T>(&self, src: &[T], mut f: impl FnMut(u32, usize, usize, &[T])) {
        let p = &self.plane;
        let (w, wo, sw) = (p.w, p.wo, p.window.stride.1);
        p.for_each_run(|tap, oh, row, (lo, hi), first| {
            let Some(r) = row.filter(|_| lo < hi) else { return };
            // Exactly the elements the run reads: indexing it needs no bounds checks.
            let input = &src[r * w + first..][..(hi - lo - 1) * sw + 1];
            f(tap as u32, oh * wo + lo, hi - lo, input);
        });
    }

    /// The max of every window of `src` in `max`; a NaN wins the window, as in PyTorch.
    /// `nans` is scratch. Branch-free: a running `if v > m` (a max instruction) and a NaN
    /// count, merged at the end (a branch on the data here cost most of the pool's time).
    fn window_max<T: Float>(&self, src: &[T], max: &mut [T], nans: &mut [u32]) {
        let sw = self.plane.window.stride.1;
        max.fill(T::neg_infinity());
        nans.fill(0);
        self.for_each_input_run(src, |_, o, n, input| {
            let (m, nan) = (&mut max[o..o + n], &mut nans[o..o + n]);
            for k in 0..n {
                let v = input[k * sw];
                m[k] = if v > m[k] { v } else { m[k] };
                nan[k] += num_traits::Float::is_nan(v) as u32;
            }
        });
        for (m, &nan) in max.iter_mut().zip(nans.iter()) {
            if nan > 0 {
                *m = T::nan();
            }
        }
    }

    /// The kernel offset of each window's max (`window_max`'s result) in `at`: the first
    /// element equal to it in scan order (the first NaN in a NaN window; a window of -inf
    /// picks its first element inside the input), as in PyTorch. Branch-free too.
    fn window_argmax<T: Float>(&self, src: &[T], max: &[T], at: &mut [u32]) {
        let sw = self.plane.window.stride.1;
        at.fill(NONE);
        self.for_each_input_run(src, |tap, o, n, input| {
            let (m, a) = (&max[o..o + n], &mut at[o..o + n]);
            for k in 0..n {
                let (v, m) = (input[k * sw], m[k]);
                let both_nan = num_traits::Float::is_nan(v) & num_traits::Float::is_nan(m);
                let hit = ((v == m) | both_nan) as u32;
                // tap where hit, NONE elsewhere; the first hit is the smallest tap.
                a[k] = a[k].min(tap | hit.wrapping_sub(1));
            }
        });
    }

    /// The sum of every window of `src` in `sums` (padding counts as 0).
    fn window_sum<T: Float>(&self, src: &[T], sums: &mut [T]) {
        let sw = self.plane.window.stride.1;
        sums.fill(T::zero());
        self.for_each_input_run(src, |_, o, n, input| {
            for (k, s) in sums[o..o + n].iter_mut().enumerate() {
                *s = *s + input[k * sw];
            }
        });
    }

    /// Adds `share(tap, window)`, the part of window `window`'s gradient that goes to its
    /// element at kernel offset `tap`, to that element of the input gradient plane `gx`.
    fn scatter<T: Float>(&self, gx: &mut [T], share: impl Fn(usize, usize) -> T) {
        let p = &self.plane;
        let (w, wo, sw) = (p.w, p.wo, p.window.stride.1);
        gx.fill(T::zero());
        p.for_each_run(|tap, oh, row, (lo, hi), first| {
            let Some(r) = row.filter(|_| lo < hi) else { return };
            let out = &mut gx[r * w + first..];
            for o in oh * wo + lo..oh * wo + hi {
                let e = &mut out[(o - oh * wo - lo) * sw];
                *e = *e + share(tap, o);
            }
        });
    }

    /// Runs `f(plane_index, out_plane_scratch, window_scratch)` for every plane, in parallel
    /// when worth it, and copies each plane's result from the scratch into the output.
    fn map_planes<T: Float>(
        &self,
        out_len: usize,
        work: usize,
        f: impl Fn(usize, &mut [T], &mut Windows<T>) + Sync + Send,
    ) -> Result<Vec<T>> {
        let windows = self.out_len();
        let init = || (vec![T::zero(); out_len], Windows { max: vec![T::zero(); windows], at: vec![NONE; windows] });
        build_planes(
            (self.planes, out_len),
            work,
            init,
            |i, dst: &mut [MaybeUninit<T>], (buf, extra): &mut (Vec<T>, Windows<T>)| {
                f(i, buf, extra);
                for (o, &v) in dst.iter_mut().zip(buf.iter()) {
                    o.write(v);
                }
            },
        )
    }

    /// Whether the windows tile the input (kernel = stride, no padding, no dilation, as in
    /// the common 2x2 pool): each input element is in at most one window, read in place.
    fn is_tiled(&self) -> bool {
        let win = self.plane.window;
        win.kernel == win.stride && win.padding == (0, 0) && win.dilation == (1, 1)
    }

    /// Max pooling of one plane with tiling windows, straight loops over each window's
    /// elements: the max of each in `max` (a NaN wins). With `grad = Some((g, gx))` it also
    /// writes the input gradient `gx`: each window's gradient at its first max (or first
    /// NaN), zeros elsewhere. The scan keeps the max's input index as it goes, with selects
    /// rather than branches, and no division per window (a division and a second search per
    /// window made this half of a small CNN's epoch).
    fn tiled_max<T: Float>(&self, x: &[T], max: &mut [T], mut grad: Option<(&[T], &mut [T])>) {
        let (w, wo, (kh, kw)) = (self.plane.w, self.plane.wo, self.plane.window.kernel);
        if let Some((_, gx)) = grad.as_mut() {
            gx.fill(T::zero());
        }
        if wo == 0 {
            return;
        }
        for (oh, row) in max.chunks_mut(wo).enumerate() {
            for (ow, m) in row.iter_mut().enumerate() {
                let start = oh * kh * w + ow * kw;
                let (value, at) = window_max_at(x, start, (kh, kw), w);
                *m = value;
                if let Some((g, gx)) = grad.as_mut() {
                    gx[at] = g[oh * wo + ow];
                }
            }
        }
    }

    /// Max pooling of contiguous `[planes, h, w]` input `x`: `[planes, ho, wo]`.
    pub(crate) fn max_forward<T: Float>(&self, x: &[T]) -> Result<Vec<T>> {
        let (il, ol) = (self.in_len(), self.out_len());
        let work = self.planes * ol * self.plane.window.taps();
        if self.is_tiled() {
            return self.map_planes(ol, work, |i, max, _| self.tiled_max(&x[i * il..][..il], max, None));
        }
        // `at` serves as the NaN counts.
        self.map_planes(ol, work, |i, max, windows| self.window_max(&x[i * il..][..il], max, &mut windows.at))
    }

    /// The input gradient of max pooling: each window's gradient `g` goes to its max.
    pub(crate) fn max_backward<T: Float>(&self, x: &[T], g: &[T]) -> Result<Vec<T>> {
        let (il, ol) = (self.in_len(), self.out_len());
        let work = self.planes * ol * self.plane.window.taps() * 2;
        if self.is_tiled() {
            return self.map_planes(il, work, |i, gx, Windows { max, .. }| {
                self.tiled_max(&x[i * il..][..il], max, Some((&g[i * ol..][..ol], gx)))
            });
        }
        self.map_planes(il, work, |i, gx, Windows { max, at }| {
            let x = &x[i * il..][..il];
            self.window_max(x, max, at);
            self.window_argmax(x, max, at);
            let g = &g[i * ol..][..ol];
            // A select, not a product with 0/1: an inf or NaN gradient must not leak into
            // the window's other elements.
            self.scatter(gx, |tap, o| if at[o] == tap as u32 { g[o] } else { T::zero() });
        })
    }

    /// Average pooling (every window divides by `kh * kw`, padding counted as zeros).
    pub(crate) fn avg_forward<T: Float>(&self, x: &[T]) -> Result<Vec<T>> {
        let (il, ol) = (self.in_len(), self.out_len());
        let inv = T::one() / T::from_f64(self.plane.window.taps() as f64);
        self.map_planes(ol, self.planes * ol * self.plane.window.taps(), |i, sums, _| {
            self.window_sum(&x[i * il..][..il], sums);
            sums.iter_mut().for_each(|s| *s = *s * inv);
        })
    }

    /// The input gradient of average pooling.
    pub(crate) fn avg_backward<T: Float>(&self, g: &[T]) -> Result<Vec<T>> {
        let (il, ol) = (self.in_len(), self.out_len());
        let inv = T::one() / T::from_f64(self.plane.window.taps() as f64);
        self.map_planes(il, self.planes * ol * self.plane.window.taps(), |i, gx, _| {
            let g = &g[i * ol..][..ol];
            self.scatter(gx, |_, o| g[o] * inv);
        })
    }
}

/// The max of the `kh x kw` window at `start` of a plane `w` wide, and the input index of its
/// first max: the first NaN when there is one (a NaN wins, as in PyTorch), else the first
/// element equal to the max (the first one, also when every element is -inf).
#[inline(always)]
fn window_max_at<T: Float>(x: &[T], start: usize, (kh, kw): (usize, usize), w: usize) -> (T, usize) {
    let (mut best, mut at, mut nan_at) = (T::neg_infinity(), start, usize::MAX);
    for i in 0..kh {
        let first = start + i * w;
        for (j, &v) in x[first..first + kw].iter().enumerate() {
            let greater = v > best;
            best = if greater { v } else { best };
            at = if greater { first + j } else { at };
            let first_nan = num_traits::Float::is_nan(v) && nan_at == usize::MAX;
            nan_at = if first_nan { first + j } else { nan_at };
        }
    }
    if nan_at == usize::MAX {
        (best, at)
    } else {
        (T::nan(), nan_at)
    }
}
