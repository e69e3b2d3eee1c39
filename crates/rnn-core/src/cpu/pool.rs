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

    /// The max of every window of `src` in `max`, and the kernel offset it sits at in `at`.
    /// Ties go to the first in scan order and a NaN wins (the first NaN), as in PyTorch; the
    /// padding never counts, so a window of -inf has its first element inside the input.
    fn window_max<T: Float>(&self, src: &[T], max: &mut [T], at: &mut [u32]) {
        let p = &self.plane;
        let (w, wo, sw) = (p.w, p.wo, p.window.stride.1);
        max.fill(T::neg_infinity());
        at.fill(NONE);
        p.for_each_run(|tap, oh, row, (lo, hi), first| {
            let Some(r) = row.filter(|_| lo < hi) else { return };
            let input = &src[r * w + first..];
            let (m, a) = (&mut max[oh * wo..][lo..hi], &mut at[oh * wo..][lo..hi]);
            for (k, (m, a)) in m.iter_mut().zip(a.iter_mut()).enumerate() {
                let v = input[k * sw];
                let take = *a == NONE || v > *m || (num_traits::Float::is_nan(v) && !num_traits::Float::is_nan(*m));
                *m = if take { v } else { *m };
                *a = if take { tap as u32 } else { *a };
            }
        });
    }

    /// The sum of every window of `src` in `sums` (padding counts as 0).
    fn window_sum<T: Float>(&self, src: &[T], sums: &mut [T]) {
        let p = &self.plane;
        let (w, wo, sw) = (p.w, p.wo, p.window.stride.1);
        sums.fill(T::zero());
        p.for_each_run(|_, oh, row, (lo, hi), first| {
            let Some(r) = row.filter(|_| lo < hi) else { return };
            let input = &src[r * w + first..];
            for (k, s) in sums[oh * wo..][lo..hi].iter_mut().enumerate() {
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

    /// Max pooling of contiguous `[planes, h, w]` input `x`: `[planes, ho, wo]`.
    pub(crate) fn max_forward<T: Float>(&self, x: &[T]) -> Result<Vec<T>> {
        let (il, ol) = (self.in_len(), self.out_len());
        let work = self.planes * ol * self.plane.window.taps();
        self.map_planes(ol, work, |i, max, windows| self.window_max(&x[i * il..][..il], max, &mut windows.at))
    }

    /// The input gradient of max pooling: each window's gradient `g` goes to its max.
    pub(crate) fn max_backward<T: Float>(&self, x: &[T], g: &[T]) -> Result<Vec<T>> {
        let (il, ol) = (self.in_len(), self.out_len());
        let work = self.planes * ol * self.plane.window.taps() * 2;
        self.map_planes(il, work, |i, gx, Windows { max, at }| {
            self.window_max(&x[i * il..][..il], max, at);
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
