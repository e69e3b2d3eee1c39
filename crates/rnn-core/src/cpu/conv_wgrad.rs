//! The weight gradient of an f32 convolution from broadcasts, on AVX-512, for any kernel,
//! stride, padding and dilation with a multiple of 16 output channels per group.
//!
//! `dw[o, c, t] = sum over output positions p of g[o, p] * x[c, start(p) + offset(t)]`, where
//! `x` is the image's input planes copied once with their zero padding, `start(p)` the
//! element where the window of position `p` begins and `offset(t)` that of tap `t` within
//! a window. With the output gradient transposed to `[position, out_c]`, a register holds
//! 16 output channels of one position: each position adds its registers times broadcast
//! input values into accumulators that are the weight gradient itself, `[group, in_c /
//! groups * taps, out_c / groups]` (the transposed sums of `conv.rs`). Nothing is reduced
//! across lanes, and the positions are walked by their window starts, so small planes
//! (8x8) and strided windows cost no more per product than large ones: the unfolded
//! product's path pays an unfold of `taps` copies of the input per image instead.
//!
//! Each product is one of the unfolded path's (padding zeros included), so inf and NaN
//! propagate as there.

use super::conv::ConvShape;
use super::conv_direct::place_planes;

/// Output channels per register.
const LANES: usize = 16;
/// Accumulators per register tile: `OV` registers of output channels x `18 / OV`
/// (input channel, tap) pairs.
const TILE: usize = 18;

/// The windows of one convolution over its padded planes, as the broadcast kernels (this
/// weight gradient and the forward of `conv_bcast_fwd.rs`) walk them.
pub(super) struct Windows {
    /// Elements per padded input row and plane.
    pub pitch: usize,
    pub plane: usize,
    /// The element of the padded plane where each output position's window begins.
    pub starts: Vec<usize>,
    /// Each tap's element within a window.
    pub offsets: Vec<usize>,
}

impl Windows {
    /// The windows of `s` where the broadcast kernels apply: f32, output channels per
    /// group a multiple of 16, a non-empty input and output, and a CPU with AVX-512 (and a
    /// build with its intrinsics, rustc 1.89 or later).
    pub(super) fn new(s: &ConvShape, is_f32: bool) -> Option<Self> {
        let avx512 = super::runs_avx512_kernels();
        let og = s.out_c / s.groups;
        // An empty input with enough padding still has windows (of padding only): the
        // product takes those.
        let empty = s.out_hw.0 * s.out_hw.1 == 0 || s.in_c == 0 || s.hw.0 * s.hw.1 == 0;
        if !is_f32 || !avx512 || og == 0 || og % LANES != 0 || empty {
            return None;
        }
        let w = &s.window;
        let pitch = s.hw.1 + 2 * w.padding.1;
        let plane = (s.hw.0 + 2 * w.padding.0) * pitch;
        let (ho, wo) = s.out_hw;
        let starts: Vec<usize> =
            (0..ho).flat_map(|y| (0..wo).map(move |x| y * w.stride.0 * pitch + x * w.stride.1)).collect();
        let (kh, kw) = w.kernel;
        let offsets: Vec<usize> = (0..kh * kw).map(|t| t / kw * w.dilation.0 * pitch + t % kw * w.dilation.1).collect();
        // The output size keeps every window inside the padded planes, which the kernels
        // rely on.
        let furthest = starts.last().copied().unwrap_or(0) + offsets.last().copied().unwrap_or(0);
        assert!(furthest < plane, "a window of {s:?} reaches past its padded plane");
        Some(Windows { pitch, plane, starts, offsets })
    }

    /// Image `xi`'s input planes (`[in_c, h, w]`) with their zero padding, `plane`
    /// elements apart, in `dst`.
    pub(super) fn pad_input(&self, s: &ConvShape, xi: &[f32], dst: &mut Vec<f32>) {
        let ((h, w), (ph, pw)) = (s.hw, s.window.padding);
        let first = ph * self.pitch + pw;
        place_planes(xi, (h * w, w), dst, (0, s.in_c * self.plane), (self.plane, self.pitch, first));
    }

    /// Where (input channel `k / taps`, tap `k % taps`) reads the padded planes, from the
    /// first plane.
    pub(super) fn pair_at(&self, k: usize) -> usize {
        let taps = self.offsets.len();
        k / taps * self.plane + self.offsets[k % taps]
    }
}

/// The layout of one convolution's broadcast weight gradient.
pub(super) struct BroadcastWeightGrad {
    windows: Windows,
}

/// One thread's buffers: the padded input and the transposed output gradient of an image.
#[derive(Default)]
pub(super) struct Buffers {
    x: Vec<f32>,
    gt: Vec<f32>,
}

impl BroadcastWeightGrad {
    /// The layout for `s` where this path applies ([`Windows::new`]) and was measured to
    /// pay: a kernel of more than one tap. Per weight gradient of 128 images on a 2-core
    /// Xeon against the previous paths
    /// (bench/results/2026-11-29-conv-rows-2core-intel-r-xeon-r-processor.md): the
    /// ResNet-8's 3x3 layers ran 1.07x (16 -> 16 at 32x32, against the direct tiles of
    /// `conv_direct.rs`) to 1.36x as fast (strided, 16x16 and 8x8, against the unfolded
    /// product); its 1x1 strided projections, which unfold nothing, ran 0.88-1.19x and
    /// keep the product.
    pub(super) fn new(s: &ConvShape, is_f32: bool) -> Option<Self> {
        if s.window.taps() == 1 {
            return None;
        }
        Some(BroadcastWeightGrad { windows: Windows::new(s, is_f32)? })
    }

    /// Adds the weight gradient of image `xi` (`gz` its output gradient, `[out_c, ho * wo]`)
    /// to `sums`, `[groups, in_c / groups * taps, out_c / groups]`.
    pub(super) fn add_image(&self, s: &ConvShape, xi: &[f32], gz: &[f32], sums: &mut [f32], buf: &mut Buffers) {
        let win = &self.windows;
        let (og, cg, taps) = (s.out_c / s.groups, s.in_c / s.groups, win.offsets.len());
        let (l, kg) = (win.starts.len(), cg * taps);
        assert!(xi.len() == s.image_len() && gz.len() == s.out_c * l && sums.len() == s.groups * kg * og);
        win.pad_input(s, xi, &mut buf.x);
        buf.gt.resize(l * s.out_c, 0.0);
        let (src, dst): (&[u32], &mut [u32]) = (bytemuck::cast_slice(gz), bytemuck::cast_slice_mut(&mut buf.gt));
        super::transpose::words(src, l, (s.out_c, l), dst, s.out_c);
        for g in 0..s.groups {
            self.add_group(s, g, buf, &mut sums[g * kg * og..][..kg * og]);
        }
    }

    /// Adds group `g`'s share of the image in `buf` to the group's sums, `[kg, og]`.
    fn add_group(&self, s: &ConvShape, g: usize, buf: &Buffers, sums: &mut [f32]) {
        let win = &self.windows;
        let (og, cg, taps) = (s.out_c / s.groups, s.in_c / s.groups, win.offsets.len());
        let kg = cg * taps;
        let mut o = 0;
        while o < og {
            let vecs = if og - o >= 2 * LANES { 2 } else { 1 };
            let pairs = TILE / vecs;
            for k0 in (0..kg).step_by(pairs) {
                let n = pairs.min(kg - k0);
                // Pair `j` reads input channel `k / taps` at tap `k % taps`; unused pairs
                // of a tail repeat the last one.
                let at: [usize; TILE] = std::array::from_fn(|j| g * cg * win.plane + win.pair_at(k0 + j.min(n - 1)));
                let tile = Tile { gt: &buf.gt, out_c: s.out_c, o: g * og + o, x: &buf.x, at: &at, starts: &win.starts };
                let sums = &mut sums[k0 * og + o..];
                // SAFETY: `new` checked AVX-512; `gt` holds a row of `out_c` per position,
                // the registers' outputs `o..o + 16 * vecs` lie within the group's `og`,
                // every window (`start + offset`) within its padded plane, and the sums'
                // rows `k0..k0 + n` of `og` within the group's.
                unsafe {
                    match (vecs, n) {
                        (2, _) => tile_kernel::<2, 9>(&tile, sums, og, n),
                        (_, 10..) => tile_kernel::<1, 18>(&tile, sums, og, n),
                        _ => tile_kernel::<1, 9>(&tile, sums, og, n),
                    }
                }
            }
            o += vecs * LANES;
        }
    }
}

/// The operands of one register tile: the transposed gradient `gt` (`[positions, out_c]`)
/// from output channel `o`, and the padded input `x` read at `at[j] + start` for pair `j`.
struct Tile<'a> {
    gt: &'a [f32],
    out_c: usize,
    o: usize,
    x: &'a [f32],
    at: &'a [usize; TILE],
    starts: &'a [usize],
}

/// Adds to the first `n` of `PAIRS` rows of `sums` (`ld` apart, `VECS` registers of
/// output channels each) the dot products of the tile's gradient registers with its
/// pairs' broadcast inputs over every position.
///
/// SAFETY: the CPU must have AVX-512 (F); `gt` must hold `o + VECS * 16` elements of every
/// position's row, `x` every element `at[j] + start`, and `sums` `(n - 1) * ld + VECS *
/// 16` elements, with `n <= PAIRS` and `VECS * PAIRS <= TILE`.
#[cfg(target_arch = "x86_64")]
#[rustversion::since(1.89)]
#[allow(clippy::incompatible_msrv)] // only built by rustc >= 1.89, see `BroadcastWeightGrad::new`
#[target_feature(enable = "avx512f,avx512vl,avx512bw,avx512dq,avx2,fma")]
unsafe fn tile_kernel<const VECS: usize, const PAIRS: usize>(t: &Tile, sums: &mut [f32], ld: usize, n: usize) {
    use std::arch::x86_64::{
        __m512, _mm512_fmadd_ps, _mm512_loadu_ps, _mm512_set1_ps, _mm512_setzero_ps, _mm512_storeu_ps,
    };
    let mut acc: [[__m512; VECS]; PAIRS] = [[_mm512_setzero_ps(); VECS]; PAIRS];
    let mut gv: [__m512; VECS] = [_mm512_setzero_ps(); VECS];
    let (gt, x) = (t.gt.as_ptr(), t.x.as_ptr());
    for (p, &start) in t.starts.iter().enumerate() {
        for (v, r) in gv.iter_mut().enumerate() {
            // SAFETY: within position `p`'s row of `gt`, by the caller's bound.
            *r = unsafe { _mm512_loadu_ps(gt.add(p * t.out_c + t.o + v * LANES)) };
        }
        for (row, &at) in acc.iter_mut().zip(t.at) {
            // SAFETY: inside the padded planes, by the caller's bound.
            let xv = _mm512_set1_ps(unsafe { *x.add(at + start) });
            for (a, &g) in row.iter_mut().zip(&gv) {
                *a = _mm512_fmadd_ps(g, xv, *a);
            }
        }
    }
    for (j, row) in acc.iter().enumerate().take(n) {
        for (v, &a) in row.iter().enumerate() {
            let dst = sums.as_mut_ptr().wrapping_add(j * ld + v * LANES);
            // SAFETY: row `j < n` of the sums, by the caller's bound.
            unsafe { _mm512_storeu_ps(dst, std::arch::x86_64::_mm512_add_ps(_mm512_loadu_ps(dst), a)) };
        }
    }
}

/// Never called without the AVX-512 kernels (`BroadcastWeightGrad::new` checks for them).
#[rustversion::attr(since(1.89), cfg(not(target_arch = "x86_64")))]
unsafe fn tile_kernel<const VECS: usize, const PAIRS: usize>(_: &Tile, _: &mut [f32], _: usize, _: usize) {
    unreachable!("the broadcast weight gradient runs on AVX-512 only")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Window2d;

    fn shape(in_c: usize, out_c: usize, groups: usize, hw: (usize, usize), kernel: (usize, usize)) -> ConvShape {
        let window = Window2d { kernel, stride: (2, 2), padding: (1, 1), dilation: (1, 1) };
        let out = |n: usize, k: usize| (n + 2).saturating_sub(k) / 2 + 1;
        ConvShape { batch: 2, in_c, out_c, groups, hw, out_hw: (out(hw.0, kernel.0), out(hw.1, kernel.1)), window }
    }

    /// `tests/conv_pool.rs`'s wide configs with 16s of output channels run this path on
    /// AVX-512 CPUs, so that its comparison with the composition covers it.
    #[test]
    fn which_weight_gradients_take_broadcasts() {
        let avx512 = super::super::runs_avx512_kernels();
        for taken in [shape(3, 16, 1, (32, 32), (3, 3)), shape(8, 64, 2, (5, 7), (2, 3))] {
            assert_eq!(BroadcastWeightGrad::new(&taken, true).is_some(), avx512, "{taken:?}");
            assert!(BroadcastWeightGrad::new(&taken, false).is_none(), "f64 keeps the product");
        }
        for kept in [
            shape(16, 10, 1, (32, 32), (3, 3)),
            shape(16, 32, 4, (32, 32), (3, 3)),
            shape(16, 32, 1, (32, 32), (1, 1)),
            shape(16, 32, 1, (0, 32), (3, 3)),
        ] {
            assert!(BroadcastWeightGrad::new(&kept, true).is_none(), "{kept:?}");
        }
    }

    /// Windows start at the strided positions of the padded plane, taps at the dilated
    /// offsets.
    #[test]
    fn window_starts_and_tap_offsets() {
        let mut s = shape(3, 16, 1, (5, 6), (2, 3));
        s.window.dilation = (2, 1);
        s.out_hw = (2, 3);
        let Some(b) = BroadcastWeightGrad::new(&s, true) else { return };
        let b = &b.windows;
        assert_eq!((b.pitch, b.plane), (8, 56));
        assert_eq!(b.starts, [0, 2, 4, 16, 18, 20]);
        assert_eq!(b.offsets, [0, 1, 2, 16, 17, 18]);
    }
}
