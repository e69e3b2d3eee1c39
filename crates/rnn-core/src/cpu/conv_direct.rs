//! The weight gradient and the forward of a 3x3 stride-1 convolution without unfolding
//! its input, on AVX-512.
//!
//! Each image's input planes are copied once with their zero padding, `pitch` elements per
//! padded row, and its output gradient with zero columns up to the same pitch. Output
//! position `(y, x)` is then `q = y * pitch + x` in both, and kernel offset `(i, j)` reads
//! input element `q + i * dh * pitch + j * dw` of the padded plane: every weight gradient
//! `dw[o, c, i, j]` is a dot product of two contiguous runs, the gradient's row `o` and the
//! input plane `c` shifted by the offset. A register tile of 3 output channels x the 9
//! offsets of a 3x3 kernel on one input channel (27 accumulators of 16 lanes) runs over the
//! positions 16 at a time; the gap columns hold zero gradient, so they add nothing.
//!
//! The forward (and the input gradient, a convolution of the output gradient with the
//! flipped weight) runs in the same layout: register tiles of 6 output channels x 64
//! positions, each tap of each input channel adding a broadcast weight times 16 shifted
//! inputs, into padded output rows whose gap columns are dropped when copied out.
//!
//! The product path (`conv.rs`) unfolds `kh * kw` copies of the input (im2col), which the
//! gemm crate then packs once more; here the input is copied once.

use super::conv::ConvShape;

/// Positions per step: one AVX-512 register of f32.
const LANES: usize = 16;
/// Output channels per register tile.
const TILE_OUT: usize = 3;
/// Kernel offsets of a 3x3 kernel, the one this path runs.
const TAPS: usize = 9;

/// Where an image's padded operands live and which offsets its taps read.
pub(super) struct DirectConv {
    /// Elements per padded row, of the input and of the gradient.
    pitch: usize,
    /// Elements per padded input plane: its rows, and zeros up to the furthest element that
    /// the last step at the largest offset reads.
    plane: usize,
    /// Elements per padded gradient row `o`: `ho * pitch` rounded up to whole steps.
    span: usize,
    /// Input offset of each tap `i * kw + j`.
    offsets: [usize; TAPS],
    /// Elements of one image's padded input (`in_c` planes) and gradient (`out_c` rows).
    image: (usize, usize),
    /// Images per block: the tiles run over a block's images before their sums leave the
    /// registers, which matters for small planes (an 8x8 plane is 5 steps per tile).
    block: usize,
}

/// Padded f32 elements of the images of one block, at most (about 384 KiB, within L2).
const BLOCK_ELEMENTS: usize = 96 * 1024;
/// Images per block, at most.
const MAX_BLOCK: usize = 16;

/// The buffers of one thread: the padded inputs and output gradients of a block of images.
#[derive(Default)]
pub(super) struct Padded {
    x: Vec<f32>,
    g: Vec<f32>,
    images: usize,
}

impl DirectConv {
    /// The layout for `s` where this path applies and was measured to pay: a 3x3 kernel
    /// (any padding and dilation) of stride 1 with at least 16 input channels per group and
    /// output rows of at least 32, f32, and a CPU with AVX-512. Per backward of 128 images
    /// against the product path on a 2-core Xeon (numbers in
    /// bench/results/2026-11-29-train-direct-conv-2core-intel-r-xeon-r-processor.md):
    /// 16 -> 16 channels at 32x32 ran 1.1-1.2x as fast, while 3 -> 16 at 32x32 (few tiles
    /// for the copies), 32 -> 32 at 16x16 and 64 -> 64 at 8x8 (gap columns of 11% and 20%
    /// of the positions, and more steps of reductions) ran 0.75-0.9x.
    pub(super) fn for_weight_grad(s: &ConvShape, is_f32: bool) -> Option<Self> {
        let pays = s.in_c / s.groups >= 16 && s.out_hw.1 >= 32;
        Self::layout(s, is_f32 && pays)
    }

    /// The layout for `s` where the direct convolution ([`Self::convolve`]) applies and was
    /// measured to pay: a 3x3 kernel of stride 1 with at least 16 input channels per group,
    /// f32, and a CPU with AVX-512. It runs the forward, and the input gradient (a
    /// convolution with the flipped weight, whose input channels are the layer's outputs).
    /// Forward of 128 images against the unfolded product on the 2-core Xeon: 16 -> 16
    /// channels at 32x32, 32 -> 32 at 16x16 and 64 -> 64 at 8x8 ran 1.05-1.15x as fast;
    /// 3 -> 16 at 32x32 ran 0.95x (three planes: the copies weigh more).
    pub(super) fn for_forward(s: &ConvShape, is_f32: bool) -> Option<Self> {
        let pays = s.in_c / s.groups >= 16;
        Self::layout(s, is_f32 && pays)
    }

    /// The layout of a 3x3 stride-1 convolution of non-empty planes on an AVX-512 CPU (and
    /// a build with the AVX-512 intrinsics, rustc 1.89 or later), when `wanted`. Empty
    /// planes (a 0-high input with enough padding still has windows) take the product.
    fn layout(s: &ConvShape, wanted: bool) -> Option<Self> {
        let w = &s.window;
        let avx512 = super::matmul_half_kernels::HAS_AVX512_KERNELS && super::simd::has_avx512();
        let empty = s.hw.0 == 0 || s.hw.1 == 0;
        if !wanted || empty || w.stride != (1, 1) || w.kernel != (3, 3) || !avx512 {
            return None;
        }
        let pitch = s.hw.1 + 2 * w.padding.1;
        let rows = s.hw.0 + 2 * w.padding.0;
        let span = (s.out_hw.0 * pitch).div_ceil(LANES) * LANES;
        let (dh, dw) = w.dilation;
        let offsets: [usize; TAPS] = std::array::from_fn(|t| t / 3 * dh * pitch + t % 3 * dw);
        let plane = (span + offsets[TAPS - 1]).max(rows * pitch);
        let image = (s.in_c * plane, s.out_c * span);
        let block = (BLOCK_ELEMENTS / (image.0 + image.1).max(1)).clamp(1, MAX_BLOCK);
        Some(DirectConv { pitch, plane, span, offsets, image, block })
    }

    /// Adds image `xi` (`gz` its output gradient, `[out_c, ho * wo]`) to the block in `buf`,
    /// first adding the full block's weight gradient to `sums` (`[out_c, in_c / groups, 3,
    /// 3]`). Returns false, adding nothing, when the image holds inf or NaN: the gap columns
    /// would multiply them by zero (NaN) where the definition has no product, so the caller
    /// takes the product path.
    pub(super) fn push(&self, s: &ConvShape, xi: &[f32], gz: &[f32], sums: &mut [f32], buf: &mut Padded) -> bool {
        if !xi.iter().all(|v| v.is_finite()) {
            return false;
        }
        if buf.images == self.block {
            self.flush(s, sums, buf);
        }
        self.pad_input(s, xi, &mut buf.x, buf.images);
        self.pad_grad(s, gz, &mut buf.g, buf.images);
        buf.images += 1;
        true
    }

    /// Adds the weight gradient of the images in `buf` to `sums` and empties it.
    pub(super) fn flush(&self, s: &ConvShape, sums: &mut [f32], buf: &mut Padded) {
        if buf.images == 0 {
            return;
        }
        let (og, cg) = (s.out_c / s.groups, s.in_c / s.groups);
        for g in 0..s.groups {
            for o0 in (g * og..(g + 1) * og).step_by(TILE_OUT) {
                let outs = TILE_OUT.min((g + 1) * og - o0);
                for c in 0..cg {
                    let tile =
                        self.tile(&buf.g[o0 * self.span..], &buf.x[(g * cg + c) * self.plane..], outs, buf.images);
                    for (k, dots) in tile.iter().take(outs).enumerate() {
                        let at = ((o0 + k) * cg + c) * TAPS;
                        sums[at..][..TAPS].iter_mut().zip(dots).for_each(|(s, v)| *s += v);
                    }
                }
            }
        }
        buf.images = 0;
    }

    /// The dot products of `outs` gradient rows (from the start of `g`) with the plane at
    /// the start of `x`, at each offset, summed over `images` images, as `[output][tap]`.
    fn tile(&self, g: &[f32], x: &[f32], outs: usize, images: usize) -> [[f32; TAPS]; TILE_OUT] {
        let last = images.saturating_sub(1);
        assert!(g.len() >= last * self.image.1 + outs * self.span && x.len() >= last * self.image.0 + self.plane);
        let strides = (self.image.1, self.image.0);
        // SAFETY: `DirectConv::layout` checked AVX-512; `plane` covers `span` plus the
        // largest offset, the assert the rest.
        unsafe {
            match outs {
                3 => tile_kernel::<3>(g, x, images, strides, self.span, &self.offsets),
                2 => tile_kernel::<2>(g, x, images, strides, self.span, &self.offsets),
                _ => tile_kernel::<1>(g, x, images, strides, self.span, &self.offsets),
            }
        }
    }

    /// `out = conv(xi, w) + bias` for one image (`[out_c, ho * wo]`), from its padded
    /// planes: register tiles of 6 output channels x 64 positions, each kernel offset of
    /// each input channel adding 24 products of a broadcast weight and 16 shifted inputs.
    /// Unlike the weight gradient's, its gap columns are never read back: every output it
    /// keeps is the sum of the same products as the unfolded path's, inf and NaN included.
    pub(super) fn convolve(
        &self,
        s: &ConvShape,
        xi: &[f32],
        w: &[f32],
        bias: Option<&[f32]>,
        out: &mut [f32],
        buf: &mut Padded,
    ) {
        self.pad_input(s, xi, &mut buf.x, 0);
        // Every element is written by the tiles: no need to clear it.
        buf.g.resize(s.out_c * self.span, 0.0);
        let (og, cg) = (s.out_c / s.groups, s.in_c / s.groups);
        for g in 0..s.groups {
            let x = &buf.x[g * cg * self.plane..][..cg * self.plane];
            for o0 in (g * og..(g + 1) * og).step_by(CONV_OUT) {
                let outs = CONV_OUT.min((g + 1) * og - o0);
                let wt = &w[o0 * cg * TAPS..][..outs * cg * TAPS];
                self.conv_rows(x, wt, cg, &mut buf.g[o0 * self.span..][..outs * self.span]);
            }
        }
        let ((ho, wo), l) = (s.out_hw, s.out_hw.0 * s.out_hw.1);
        for (o, (dst, src)) in out.chunks_exact_mut(l).zip(buf.g.chunks_exact(self.span)).enumerate() {
            let b = bias.map_or(0.0, |b| b[o]);
            for (y, row) in dst.chunks_exact_mut(wo).enumerate().take(ho) {
                row.iter_mut().zip(&src[y * self.pitch..][..wo]).for_each(|(d, &v)| *d = v + b);
            }
        }
    }

    /// The padded output rows `rows` (`outs` rows of `span`) of the weights `wt` (`[outs,
    /// cg, 3, 3]`) on the `cg` padded planes `x`.
    fn conv_rows(&self, x: &[f32], wt: &[f32], cg: usize, rows: &mut [f32]) {
        let outs = wt.len() / (cg * TAPS).max(1);
        assert!(x.len() == cg * self.plane && rows.len() == outs * self.span && (1..=CONV_OUT).contains(&outs));
        let geometry = ConvGeometry { plane: self.plane, span: self.span, planes: cg, at: self.offsets };
        let wide = self.span / (CONV_VECS * LANES) * CONV_VECS * LANES;
        macro_rules! run {
            ($vecs:literal, $range:expr) => {
                for q in $range.step_by($vecs * LANES) {
                    // SAFETY: `layout` checked AVX-512; the assert and `plane >= span +
                    // max(at)` bound every read and write (`q + vecs * LANES <= span`).
                    unsafe {
                        match outs {
                            6 => conv_tile::<6, $vecs>(x, wt, q, &geometry, rows),
                            5 => conv_tile::<5, $vecs>(x, wt, q, &geometry, rows),
                            4 => conv_tile::<4, $vecs>(x, wt, q, &geometry, rows),
                            3 => conv_tile::<3, $vecs>(x, wt, q, &geometry, rows),
                            2 => conv_tile::<2, $vecs>(x, wt, q, &geometry, rows),
                            _ => conv_tile::<1, $vecs>(x, wt, q, &geometry, rows),
                        }
                    }
                }
            };
        }
        run!(4, 0..wide);
        run!(1, wide..self.span);
    }

    /// Image slot `slot`'s input planes with their zero padding, `plane` elements apart.
    fn pad_input(&self, s: &ConvShape, xi: &[f32], dst: &mut Vec<f32>, slot: usize) {
        let ((h, w), (ph, pw)) = (s.hw, s.window.padding);
        let first = ph * self.pitch + pw;
        self.place_planes(xi, (h * w, w), dst, (slot, self.image.0), (self.plane, first));
    }

    /// Image slot `slot`'s gradient rows with zero columns up to `pitch`, `span` elements
    /// apart.
    fn pad_grad(&self, s: &ConvShape, gz: &[f32], dst: &mut Vec<f32>, slot: usize) {
        let (ho, wo) = s.out_hw;
        self.place_planes(gz, (ho * wo, wo), dst, (slot, self.image.1), (self.span, 0));
    }

    /// Slot `slot` (of `slot_len` elements) of `dst`, zeros except for the planes of `src`
    /// (`src_plane` elements each, rows of `width`): plane `k` starts at `k * stride`, its
    /// row `y` at `first + y * pitch`.
    fn place_planes(
        &self,
        src: &[f32],
        (src_plane, width): (usize, usize),
        dst: &mut Vec<f32>,
        (slot, slot_len): (usize, usize),
        (stride, first): (usize, usize),
    ) {
        dst.truncate(slot * slot_len);
        dst.resize((slot + 1) * slot_len, 0.0);
        for (plane, src) in dst[slot * slot_len..].chunks_exact_mut(stride).zip(src.chunks_exact(src_plane)) {
            for (y, row) in src.chunks_exact(width).enumerate() {
                plane[first + y * self.pitch..][..width].copy_from_slice(row);
            }
        }
    }
}

/// The tile of [`DirectConv::tile`] for `OUTS` outputs: all its accumulators stay
/// in registers over every image.
///
/// SAFETY: the CPU must have AVX-512 (F); for every image `b < images`, `g` must hold
/// `OUTS` rows of `span` from `b * strides.0` and `x` `span + max(at)` elements from
/// `b * strides.1`, with `span` a multiple of `LANES`.
#[cfg(target_arch = "x86_64")]
#[rustversion::since(1.89)]
#[allow(clippy::incompatible_msrv)] // only built by rustc >= 1.89, see `DirectConv::layout`
#[target_feature(enable = "avx512f,avx512vl,avx512bw,avx512dq,avx2,fma")]
unsafe fn tile_kernel<const OUTS: usize>(
    g: &[f32],
    x: &[f32],
    images: usize,
    strides: (usize, usize),
    span: usize,
    at: &[usize; TAPS],
) -> [[f32; TAPS]; TILE_OUT] {
    use std::arch::x86_64::{__m512, _mm512_fmadd_ps, _mm512_loadu_ps, _mm512_reduce_add_ps, _mm512_setzero_ps};
    let mut acc: [[__m512; TAPS]; OUTS] = [[_mm512_setzero_ps(); TAPS]; OUTS];
    let mut gv: [__m512; OUTS] = [_mm512_setzero_ps(); OUTS];
    for b in 0..images {
        let (g, x) = (&g[b * strides.0..], &x[b * strides.1..]);
        for q in (0..span).step_by(LANES) {
            for (k, v) in gv.iter_mut().enumerate() {
                // SAFETY: `k * span + q + LANES <= OUTS * span`, the caller's bound on `g`.
                *v = unsafe { _mm512_loadu_ps(g.as_ptr().add(k * span + q)) };
            }
            for (t, &offset) in at.iter().enumerate() {
                // SAFETY: `q + offset + LANES <= span + max(at)`, the caller's bound on `x`.
                let xv = unsafe { _mm512_loadu_ps(x.as_ptr().add(q + offset)) };
                for k in 0..OUTS {
                    acc[k][t] = _mm512_fmadd_ps(gv[k], xv, acc[k][t]);
                }
            }
        }
    }
    let mut out = [[0f32; TAPS]; TILE_OUT];
    for k in 0..OUTS {
        for t in 0..TAPS {
            out[k][t] = _mm512_reduce_add_ps(acc[k][t]);
        }
    }
    out
}

/// Output channels per register tile of the direct forward.
const CONV_OUT: usize = 6;
/// Registers of 16 positions per register tile of the direct forward.
const CONV_VECS: usize = 4;

/// What [`conv_tile`] needs of the layout: elements per padded plane and per padded output
/// row, input planes, and the taps' offsets.
struct ConvGeometry {
    plane: usize,
    span: usize,
    planes: usize,
    at: [usize; TAPS],
}

/// Padded output positions `q..q + VECS * LANES` of `OUTS` rows (`span` apart in `rows`):
/// the sum over the planes of `x` and the taps of `w[o][c][t] * x[c][q + at[t]]`, all in
/// registers until stored.
///
/// SAFETY: the CPU must have AVX-512 (F); `x` must hold `planes` planes of `plane` elements
/// with `q + VECS * LANES + max(at) <= plane`, `w` `OUTS * planes * TAPS` weights, and
/// `rows` `OUTS` rows of `span` with `q + VECS * LANES <= span`.
#[cfg(target_arch = "x86_64")]
#[rustversion::since(1.89)]
#[allow(clippy::incompatible_msrv)] // only built by rustc >= 1.89, see `DirectConv::layout`
#[target_feature(enable = "avx512f,avx512vl,avx512bw,avx512dq,avx2,fma")]
unsafe fn conv_tile<const OUTS: usize, const VECS: usize>(
    x: &[f32],
    w: &[f32],
    q: usize,
    geo: &ConvGeometry,
    rows: &mut [f32],
) {
    use std::arch::x86_64::{
        __m512, _mm512_fmadd_ps, _mm512_loadu_ps, _mm512_set1_ps, _mm512_setzero_ps, _mm512_storeu_ps,
    };
    let mut acc: [[__m512; VECS]; OUTS] = [[_mm512_setzero_ps(); VECS]; OUTS];
    let mut xv: [__m512; VECS] = [_mm512_setzero_ps(); VECS];
    let w_row = geo.planes * TAPS;
    for c in 0..geo.planes {
        let (xc, wc) = (x.as_ptr().wrapping_add(c * geo.plane + q), w.as_ptr().wrapping_add(c * TAPS));
        for (t, &offset) in geo.at.iter().enumerate() {
            for (v, r) in xv.iter_mut().enumerate() {
                // SAFETY: inside plane `c`, by the caller's bound.
                *r = unsafe { _mm512_loadu_ps(xc.add(offset + v * LANES)) };
            }
            for (k, row) in acc.iter_mut().enumerate() {
                // SAFETY: weight `(k, c, t)`, inside `w` by the caller's bound.
                let wb = _mm512_set1_ps(unsafe { *wc.add(k * w_row + t) });
                for (a, &xr) in row.iter_mut().zip(&xv) {
                    *a = _mm512_fmadd_ps(wb, xr, *a);
                }
            }
        }
    }
    for (k, row) in acc.iter().enumerate() {
        for (v, &a) in row.iter().enumerate() {
            // SAFETY: row `k`, positions inside `span`, by the caller's bound.
            unsafe { _mm512_storeu_ps(rows.as_mut_ptr().add(k * geo.span + q + v * LANES), a) };
        }
    }
}

/// Never called without the AVX-512 kernels (`DirectConv::layout` checks for them).
#[rustversion::attr(since(1.89), cfg(not(target_arch = "x86_64")))]
unsafe fn conv_tile<const OUTS: usize, const VECS: usize>(
    _: &[f32],
    _: &[f32],
    _: usize,
    _: &ConvGeometry,
    _: &mut [f32],
) {
    unreachable!("the direct convolution runs on AVX-512 only")
}

/// Never called without the AVX-512 kernels (`DirectConv::layout` checks for them).
#[rustversion::attr(since(1.89), cfg(not(target_arch = "x86_64")))]
unsafe fn tile_kernel<const OUTS: usize>(
    _: &[f32],
    _: &[f32],
    _: usize,
    _: (usize, usize),
    _: usize,
    _: &[usize; TAPS],
) -> [[f32; TAPS]; TILE_OUT] {
    unreachable!("the direct weight gradient runs on AVX-512 only")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Window2d;

    fn shape(
        in_c: usize,
        out_c: usize,
        groups: usize,
        hw: (usize, usize),
        padding: (usize, usize),
        dilation: (usize, usize),
    ) -> ConvShape {
        let window = Window2d { kernel: (3, 3), stride: (1, 1), padding, dilation };
        let out_hw = (hw.0 + 2 * padding.0 - 2 * dilation.0, hw.1 + 2 * padding.1 - 2 * dilation.1);
        ConvShape { batch: 4, in_c, out_c, groups, hw, out_hw, window }
    }

    /// `tests/conv_pool.rs`'s wide configs run this path on AVX-512 CPUs, so that its
    /// comparison with the composition covers it; the shapes measured slower keep the product.
    #[test]
    fn which_convolutions_take_the_direct_path() {
        let avx512 = super::super::matmul_half_kernels::HAS_AVX512_KERNELS && super::super::simd::has_avx512();
        for wide in [shape(16, 7, 1, (3, 32), (1, 1), (1, 1)), shape(32, 10, 2, (2, 33), (1, 2), (1, 2))] {
            assert_eq!(DirectConv::for_weight_grad(&wide, true).is_some(), avx512, "{wide:?}");
            assert!(DirectConv::for_weight_grad(&wide, false).is_none(), "f64 keeps the product");
        }
        for narrow in [shape(3, 16, 1, (32, 32), (1, 1), (1, 1)), shape(32, 32, 1, (16, 16), (1, 1), (1, 1))] {
            assert!(DirectConv::for_weight_grad(&narrow, true).is_none(), "{narrow:?}");
        }
        // The forward and the input gradient (the flipped convolution, outputs and inputs
        // swapped): 16 input channels per group, whatever the width.
        for wide in [
            shape(16, 7, 1, (3, 32), (1, 1), (1, 1)),
            shape(32, 32, 1, (16, 16), (1, 1), (1, 1)),
            shape(20, 16, 1, (5, 32), (2, 1), (2, 1)),
        ] {
            assert_eq!(DirectConv::for_forward(&wide, true).is_some(), avx512, "{wide:?}");
        }
        assert!(DirectConv::for_forward(&shape(3, 16, 1, (32, 32), (1, 1), (1, 1)), true).is_none());
        // A 0-high input padded by 2 has two rows of windows, all padding: the product.
        let empty = shape(16, 16, 1, (0, 32), (2, 1), (1, 1));
        assert!(DirectConv::for_forward(&empty, true).is_none() && DirectConv::for_weight_grad(&empty, true).is_none());
    }

    /// Padding puts each row at its pitch with zeros around, for input and gradient alike,
    /// in the image's slot of the block.
    #[test]
    fn padded_layout() {
        let s = shape(16, 3, 1, (2, 32), (1, 1), (1, 1));
        let Some(d) = DirectConv::for_weight_grad(&s, true) else { return };
        let x: Vec<f32> = (0..16 * 64).map(|v| v as f32 + 1.0).collect();
        let mut buf = Vec::new();
        d.pad_input(&s, &x, &mut buf, 1);
        let plane = &buf[d.image.0..][..d.plane];
        assert_eq!(d.pitch, 34);
        assert!(plane[..35].iter().all(|&v| v == 0.0));
        assert_eq!(&plane[35..67], &x[..32]);
        assert_eq!(&plane[67..69], &[0.0, 0.0]);
        assert_eq!(&plane[69..101], &x[32..64]);
        assert!(plane[101..].iter().all(|&v| v == 0.0));
        let g: Vec<f32> = (0..3 * 64).map(|v| v as f32 + 1.0).collect();
        d.pad_grad(&s, &g, &mut buf, 0);
        assert_eq!(&buf[..32], &g[..32]);
        assert_eq!(&buf[32..34], &[0.0, 0.0]);
        assert_eq!(&buf[34..66], &g[32..64]);
        assert!(buf[66..d.span].iter().all(|&v| v == 0.0));
    }
}
