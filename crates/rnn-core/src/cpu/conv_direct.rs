//! The weight gradient and the forward of a 3x3 stride-1 convolution without unfolding
//! its input, on AVX-512.
//!
//! Each image's input planes are copied once with their zero padding, `pitch` elements per
//! padded row. Output position `(y, x)` reads, at kernel offset `(i, j)`, input element
//! `y * pitch + x + i * dh * pitch + j * dw` of the padded plane: every weight gradient
//! `dw[o, c, i, j]` is a dot product of the gradient's row `o` with the input plane `c`
//! shifted by the offset, and every output a sum of shifted input rows. The kernels walk
//! the output positions 16 at a time (one AVX-512 register), in one of two ways:
//! - [`Walk::Rows`], when the output rows are a whole number of registers wide (`wo` a
//!   multiple of 16, as 32x32 and 16x16 planes): each register holds 16 positions of one
//!   row. The output gradient is read as it is, and the forward writes straight into the
//!   output.
//! - [`Walk::Padded`], for other widths: positions run over padded rows of `pitch`
//!   (`q = y * pitch + x`), gap columns included. The output gradient is copied with zero
//!   gap columns (they add nothing to the weight gradient), and the forward writes padded
//!   rows whose gap columns are dropped when copied out.
//!
//! The weight gradient's register tile holds 3 output channels x the 9 offsets of a 3x3
//! kernel on one input channel (27 accumulators of 16 lanes); the forward's (and the input
//! gradient's, a convolution of the output gradient with the flipped weight) 6 output
//! channels x 64 positions, each tap of each input channel adding a broadcast weight times
//! 16 shifted inputs.
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

/// How the kernels walk an image's output positions (see the module's doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Walk {
    Rows,
    Padded,
}

/// The output positions of one image as the kernels step through them: `rows` rows of
/// `width` positions (a multiple of [`LANES`]), position `x` of row `y` at `y * width + x`
/// in the output (gradient) rows and at `y * x_pitch + x` in the padded input planes.
/// [`Walk::Padded`] is one row of `span` positions read at the same place in both.
#[derive(Clone, Copy, Debug)]
struct Steps {
    rows: usize,
    width: usize,
    x_pitch: usize,
}

impl Steps {
    /// Where output position `q` (the start of a register) reads the padded input.
    fn input_at(&self, q: usize) -> usize {
        q / self.width * self.x_pitch + q % self.width
    }
}

/// Where an image's padded operands live and which offsets its taps read.
pub(super) struct DirectConv {
    walk: Walk,
    /// Elements per padded input row.
    pitch: usize,
    /// Elements per padded input plane: its rows, and zeros up to the furthest element that
    /// the last step at the largest offset reads.
    plane: usize,
    /// Elements per output (gradient) row `o` as the kernels see it: `ho * wo` for
    /// [`Walk::Rows`]; `ho * pitch` rounded up to whole steps for [`Walk::Padded`].
    span: usize,
    steps: Steps,
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
    /// (any padding and dilation) of stride 1 with output rows of at least 32, and either
    /// at least 16 input channels per group or rows a multiple of 16 wide ([`Walk::Rows`]);
    /// f32, and a CPU with AVX-512. Per backward of 128 images against the product path on
    /// a 2-core Xeon (bench/results/2026-11-29-train-direct-conv-2core-intel-r-xeon-r-processor.md
    /// and 2026-11-29-conv-rows-2core-intel-r-xeon-r-processor.md): 16 -> 16 channels
    /// at 32x32 ran 1.1-1.2x as fast padded, and a further 1.07x by rows; 3 -> 16 at 32x32
    /// ran 0.9x padded (few tiles for the copies) but 1.4x by rows. 32 -> 32 at 16x16 ran
    /// 0.85x padded and 1.0x by rows, 64 -> 64 at 8x8 0.75x (gap columns of 20% of the
    /// positions, and more steps of reductions): both keep the product.
    pub(super) fn for_weight_grad(s: &ConvShape, is_f32: bool) -> Option<Self> {
        let pays = s.out_hw.1 >= 32 && (s.in_c / s.groups >= 16 || walk_of(s) == Walk::Rows);
        Self::layout(s, is_f32 && pays)
    }

    /// The layout for `s` where the direct convolution ([`Self::convolve`]) applies and was
    /// measured to pay: a 3x3 kernel of stride 1 with at least 16 input channels per group
    /// or output rows a multiple of 16 wide ([`Walk::Rows`]), f32, and a CPU with AVX-512.
    /// It runs the forward, and the input gradient (a convolution with the flipped weight,
    /// whose input channels are the layer's outputs). Forward of 128 images against the
    /// unfolded product on the 2-core Xeon: 16 -> 16 channels at 32x32, 32 -> 32 at 16x16
    /// and 64 -> 64 at 8x8 ran 1.05-1.15x as fast padded, the first two a further 1.2x by
    /// rows; 3 -> 16 at 32x32 ran 0.95x padded (three planes: the copies weigh more) and
    /// 1.3x by rows.
    pub(super) fn for_forward(s: &ConvShape, is_f32: bool) -> Option<Self> {
        let pays = s.in_c / s.groups >= 16 || walk_of(s) == Walk::Rows;
        Self::layout(s, is_f32 && pays)
    }

    /// The layout of a 3x3 stride-1 convolution of non-empty planes on an AVX-512 CPU (and
    /// a build with the AVX-512 intrinsics, rustc 1.89 or later), when `wanted`. Empty
    /// planes (a 0-high input with enough padding still has windows) take the product.
    fn layout(s: &ConvShape, wanted: bool) -> Option<Self> {
        let w = &s.window;
        let avx512 = super::runs_avx512_kernels();
        let empty = s.hw.0 == 0 || s.hw.1 == 0;
        if !wanted || empty || w.stride != (1, 1) || w.kernel != (3, 3) || !avx512 {
            return None;
        }
        let walk = walk_of(s);
        let ((ho, wo), pitch) = (s.out_hw, s.hw.1 + 2 * w.padding.1);
        let rows = s.hw.0 + 2 * w.padding.0;
        let (span, steps) = match walk {
            Walk::Rows => (ho * wo, Steps { rows: ho, width: wo, x_pitch: pitch }),
            Walk::Padded => {
                let span = (ho * pitch).div_ceil(LANES) * LANES;
                (span, Steps { rows: 1, width: span, x_pitch: 0 })
            }
        };
        let (dh, dw) = w.dilation;
        let offsets: [usize; TAPS] = std::array::from_fn(|t| t / 3 * dh * pitch + t % 3 * dw);
        let furthest = span.checked_sub(LANES).map_or(0, |q| steps.input_at(q) + LANES);
        let plane = (furthest + offsets[TAPS - 1]).max(rows * pitch);
        let image = (s.in_c * plane, s.out_c * span);
        let block = (BLOCK_ELEMENTS / (image.0 + image.1).max(1)).clamp(1, MAX_BLOCK);
        Some(DirectConv { walk, pitch, plane, span, steps, offsets, image, block })
    }

    /// Whether the kernels walk the output rows as they are ([`Walk::Rows`]).
    pub(super) fn by_rows(&self) -> bool {
        self.walk == Walk::Rows
    }

    /// Adds image `xi` (`gz` its output gradient, `[out_c, ho * wo]`) to the block in `buf`,
    /// first adding the full block's weight gradient to `sums` (`[out_c, in_c / groups, 3,
    /// 3]`). With [`Walk::Padded`], returns false, adding nothing, when the image holds inf
    /// or NaN: the gap columns would multiply them by zero (NaN) where the definition has no
    /// product, so the caller takes the product path. [`Walk::Rows`] has no gap columns:
    /// each of its products is one of the unfolded path's.
    pub(super) fn push(&self, s: &ConvShape, xi: &[f32], gz: &[f32], sums: &mut [f32], buf: &mut Padded) -> bool {
        if self.walk == Walk::Padded && !xi.iter().all(|v| v.is_finite()) {
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
        let geo = TileGeometry { span: self.span, steps: self.steps, at: self.offsets };
        // SAFETY: `DirectConv::layout` checked AVX-512; `plane` covers the furthest step
        // plus the largest offset, the assert the rest.
        unsafe {
            match outs {
                3 => tile_kernel::<3>(g, x, images, strides, &geo),
                2 => tile_kernel::<2>(g, x, images, strides, &geo),
                _ => tile_kernel::<1>(g, x, images, strides, &geo),
            }
        }
    }

    /// `out = conv(xi, w) + bias` for one image (`[out_c, ho * wo]`), from its padded
    /// planes: register tiles of 6 output channels x 64 positions, each kernel offset of
    /// each input channel adding 24 products of a broadcast weight and 16 shifted inputs.
    /// [`Walk::Rows`] writes the tiles straight into `out`; [`Walk::Padded`] into padded
    /// rows whose gap columns are never read back. Every output kept is the sum of the
    /// same products as the unfolded path's, inf and NaN included.
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
        let padded = self.walk == Walk::Padded;
        if padded {
            // Every element is written by the tiles: no need to clear it.
            buf.g.resize(s.out_c * self.span, 0.0);
        }
        let (og, cg) = (s.out_c / s.groups, s.in_c / s.groups);
        let rows = if padded { &mut buf.g[..] } else { &mut out[..] };
        for g in 0..s.groups {
            let x = &buf.x[g * cg * self.plane..][..cg * self.plane];
            for o0 in (g * og..(g + 1) * og).step_by(CONV_OUT) {
                let outs = CONV_OUT.min((g + 1) * og - o0);
                let wt = &w[o0 * cg * TAPS..][..outs * cg * TAPS];
                let init: [f32; CONV_OUT] =
                    std::array::from_fn(|k| bias.and_then(|b| b.get(o0 + k)).map_or(0.0, |&b| b));
                self.conv_rows(x, wt, cg, &init, &mut rows[o0 * self.span..][..outs * self.span]);
            }
        }
        if !padded {
            return;
        }
        let ((ho, wo), l) = (s.out_hw, s.out_hw.0 * s.out_hw.1);
        for (dst, src) in out.chunks_exact_mut(l).zip(buf.g.chunks_exact(self.span)) {
            for (y, row) in dst.chunks_exact_mut(wo).enumerate().take(ho) {
                row.copy_from_slice(&src[y * self.pitch..][..wo]);
            }
        }
    }

    /// The output rows `rows` (`outs` rows of `span`, starting from `init`) of the weights
    /// `wt` (`[outs, cg, 3, 3]`) on the `cg` padded planes `x`.
    fn conv_rows(&self, x: &[f32], wt: &[f32], cg: usize, init: &[f32; CONV_OUT], rows: &mut [f32]) {
        let outs = wt.len() / (cg * TAPS).max(1);
        assert!(x.len() == cg * self.plane && rows.len() == outs * self.span && (1..=CONV_OUT).contains(&outs));
        let geometry = ConvGeometry { plane: self.plane, span: self.span, planes: cg, at: self.offsets };
        let wide = self.span / (CONV_VECS * LANES) * CONV_VECS * LANES;
        macro_rules! run {
            ($vecs:literal, $range:expr) => {
                for q in $range.step_by($vecs * LANES) {
                    let qx: [usize; $vecs] = std::array::from_fn(|v| self.steps.input_at(q + v * LANES));
                    // SAFETY: `layout` checked AVX-512; the assert and `plane >= input_at(q)
                    // + LANES + max(at)` for every step bound every read, `q + vecs * LANES
                    // <= span` every write.
                    unsafe {
                        match outs {
                            6 => conv_tile::<6, $vecs>(x, wt, (&qx, q), &geometry, init, rows),
                            5 => conv_tile::<5, $vecs>(x, wt, (&qx, q), &geometry, init, rows),
                            4 => conv_tile::<4, $vecs>(x, wt, (&qx, q), &geometry, init, rows),
                            3 => conv_tile::<3, $vecs>(x, wt, (&qx, q), &geometry, init, rows),
                            2 => conv_tile::<2, $vecs>(x, wt, (&qx, q), &geometry, init, rows),
                            _ => conv_tile::<1, $vecs>(x, wt, (&qx, q), &geometry, init, rows),
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
        place_planes(xi, (h * w, w), dst, (slot, self.image.0), (self.plane, self.pitch, first));
    }

    /// Image slot `slot`'s gradient rows, `span` elements apart: as they are for
    /// [`Walk::Rows`], with zero columns up to `pitch` for [`Walk::Padded`].
    fn pad_grad(&self, s: &ConvShape, gz: &[f32], dst: &mut Vec<f32>, slot: usize) {
        let (ho, wo) = s.out_hw;
        let pitch = if self.walk == Walk::Rows { wo } else { self.pitch };
        place_planes(gz, (ho * wo, wo), dst, (slot, self.image.1), (self.span, pitch, 0));
    }
}

/// Slot `slot` (of `slot_len` elements) of `dst`, zeros except for the planes of `src`
/// (`src_plane` elements each, rows of `width`): plane `k` starts at `k * stride`, its row
/// `y` at `first + y * pitch`.
pub(super) fn place_planes(
    src: &[f32],
    (src_plane, width): (usize, usize),
    dst: &mut Vec<f32>,
    (slot, slot_len): (usize, usize),
    (stride, pitch, first): (usize, usize, usize),
) {
    dst.truncate(slot * slot_len);
    dst.resize((slot + 1) * slot_len, 0.0);
    for (plane, src) in dst[slot * slot_len..].chunks_exact_mut(stride).zip(src.chunks_exact(src_plane)) {
        for (y, row) in src.chunks_exact(width).enumerate() {
            plane[first + y * pitch..][..width].copy_from_slice(row);
        }
    }
}

/// [`Walk::Rows`] where the output rows are a whole number of registers wide.
fn walk_of(s: &ConvShape) -> Walk {
    let wo = s.out_hw.1;
    if wo > 0 && wo % LANES == 0 {
        Walk::Rows
    } else {
        Walk::Padded
    }
}

/// What [`tile_kernel`] needs of the layout: elements per gradient row, how the steps
/// walk the positions, and the taps' offsets.
struct TileGeometry {
    span: usize,
    steps: Steps,
    at: [usize; TAPS],
}

/// The tile of [`DirectConv::tile`] for `OUTS` outputs: all its accumulators stay
/// in registers over every image.
///
/// SAFETY: the CPU must have AVX-512 (F); for every image `b < images`, `g` must hold
/// `OUTS` rows of `geo.span` from `b * strides.0`, and `x`, from `b * strides.1`, every
/// element that a step reads (`steps.input_at(q) + LANES + max(at)` for the steps `q`,
/// each `LANES` positions of the `steps.rows x steps.width <= span` walked).
#[cfg(target_arch = "x86_64")]
#[rustversion::since(1.89)]
#[allow(clippy::incompatible_msrv)] // only built by rustc >= 1.89, see `DirectConv::layout`
#[target_feature(enable = "avx512f,avx512vl,avx512bw,avx512dq,avx2,fma")]
unsafe fn tile_kernel<const OUTS: usize>(
    g: &[f32],
    x: &[f32],
    images: usize,
    strides: (usize, usize),
    geo: &TileGeometry,
) -> [[f32; TAPS]; TILE_OUT] {
    use std::arch::x86_64::{__m512, _mm512_fmadd_ps, _mm512_loadu_ps, _mm512_reduce_add_ps, _mm512_setzero_ps};
    let mut acc: [[__m512; TAPS]; OUTS] = [[_mm512_setzero_ps(); TAPS]; OUTS];
    let mut gv: [__m512; OUTS] = [_mm512_setzero_ps(); OUTS];
    let (span, steps) = (geo.span, geo.steps);
    for b in 0..images {
        let (g, x) = (&g[b * strides.0..], &x[b * strides.1..]);
        for y in 0..steps.rows {
            for x0 in (0..steps.width).step_by(LANES) {
                let (qg, qx) = (y * steps.width + x0, y * steps.x_pitch + x0);
                for (k, v) in gv.iter_mut().enumerate() {
                    // SAFETY: `k * span + qg + LANES <= OUTS * span`, the caller's bound on `g`.
                    *v = unsafe { _mm512_loadu_ps(g.as_ptr().add(k * span + qg)) };
                }
                for (t, &offset) in geo.at.iter().enumerate() {
                    // SAFETY: `qx = input_at(qg)`, within the caller's bound on `x`.
                    let xv = unsafe { _mm512_loadu_ps(x.as_ptr().add(qx + offset)) };
                    for k in 0..OUTS {
                        acc[k][t] = _mm512_fmadd_ps(gv[k], xv, acc[k][t]);
                    }
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

/// Output positions `qo..qo + VECS * LANES` of `OUTS` rows (`span` apart in `rows`),
/// register `v` reading the padded planes from `qx[v]`: `init[k]` plus the sum over the
/// planes of `x` and the taps of `w[k][c][t] * x[c][qx[v] + at[t] + lane]`, all in
/// registers until stored.
///
/// SAFETY: the CPU must have AVX-512 (F); `x` must hold `planes` planes of `plane` elements
/// with `qx[v] + LANES + max(at) <= plane`, `w` `OUTS * planes * TAPS` weights, and
/// `rows` `OUTS` rows of `span` with `qo + VECS * LANES <= span`.
#[cfg(target_arch = "x86_64")]
#[rustversion::since(1.89)]
#[allow(clippy::incompatible_msrv)] // only built by rustc >= 1.89, see `DirectConv::layout`
#[target_feature(enable = "avx512f,avx512vl,avx512bw,avx512dq,avx2,fma")]
unsafe fn conv_tile<const OUTS: usize, const VECS: usize>(
    x: &[f32],
    w: &[f32],
    (qx, qo): (&[usize; VECS], usize),
    geo: &ConvGeometry,
    init: &[f32; CONV_OUT],
    rows: &mut [f32],
) {
    use std::arch::x86_64::{__m512, _mm512_fmadd_ps, _mm512_loadu_ps, _mm512_set1_ps, _mm512_storeu_ps};
    let mut acc: [[__m512; VECS]; OUTS] = std::array::from_fn(|k| [_mm512_set1_ps(init[k]); VECS]);
    let mut xv: [__m512; VECS] = [_mm512_set1_ps(0.0); VECS];
    let w_row = geo.planes * TAPS;
    for c in 0..geo.planes {
        let (xc, wc) = (x.as_ptr().wrapping_add(c * geo.plane), w.as_ptr().wrapping_add(c * TAPS));
        for (t, &offset) in geo.at.iter().enumerate() {
            for (r, &q) in xv.iter_mut().zip(qx) {
                // SAFETY: inside plane `c`, by the caller's bound.
                *r = unsafe { _mm512_loadu_ps(xc.add(q + offset)) };
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
            unsafe { _mm512_storeu_ps(rows.as_mut_ptr().add(k * geo.span + qo + v * LANES), a) };
        }
    }
}

/// Never called without the AVX-512 kernels (`DirectConv::layout` checks for them).
#[rustversion::attr(since(1.89), cfg(not(target_arch = "x86_64")))]
unsafe fn conv_tile<const OUTS: usize, const VECS: usize>(
    _: &[f32],
    _: &[f32],
    _: (&[usize; VECS], usize),
    _: &ConvGeometry,
    _: &[f32; CONV_OUT],
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
    _: &TileGeometry,
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

    /// `tests/conv_pool.rs`'s wide configs run this path on AVX-512 CPUs, both walks, so
    /// that its comparison with the composition covers it; the shapes measured slower keep
    /// the product.
    #[test]
    fn which_convolutions_take_the_direct_path() {
        let avx512 = super::super::runs_avx512_kernels();
        let walk = |s: &ConvShape| DirectConv::for_forward(s, true).map(|d| d.walk);
        // Weight gradient: rows of 32 or more, with 16 input channels per group or by rows.
        for wide in [
            shape(16, 7, 1, (3, 32), (1, 1), (1, 1)),
            shape(32, 10, 2, (2, 33), (1, 2), (1, 2)),
            shape(3, 5, 1, (4, 32), (1, 1), (1, 1)),
        ] {
            assert_eq!(DirectConv::for_weight_grad(&wide, true).is_some(), avx512, "{wide:?}");
            assert!(DirectConv::for_weight_grad(&wide, false).is_none(), "f64 keeps the product");
        }
        for narrow in [
            shape(32, 32, 1, (16, 16), (1, 1), (1, 1)),
            shape(64, 64, 1, (8, 8), (1, 1), (1, 1)),
            shape(3, 5, 1, (4, 33), (1, 1), (1, 1)),
        ] {
            assert!(DirectConv::for_weight_grad(&narrow, true).is_none(), "{narrow:?}");
        }
        // The forward and the input gradient (the flipped convolution, outputs and inputs
        // swapped): 16 input channels per group whatever the width, or rows of 16s.
        let rows = avx512.then_some(Walk::Rows);
        let padded = avx512.then_some(Walk::Padded);
        assert_eq!(walk(&shape(16, 7, 1, (3, 32), (1, 1), (1, 1))), rows);
        assert_eq!(walk(&shape(32, 32, 1, (16, 16), (1, 1), (1, 1))), rows);
        assert_eq!(walk(&shape(3, 16, 1, (32, 32), (1, 1), (1, 1))), rows);
        assert_eq!(walk(&shape(20, 16, 1, (5, 30), (2, 3), (2, 2))), rows);
        assert_eq!(walk(&shape(64, 64, 1, (8, 8), (1, 1), (1, 1))), padded);
        assert_eq!(walk(&shape(16, 16, 1, (28, 28), (1, 1), (1, 1))), padded);
        assert_eq!(walk(&shape(3, 16, 1, (28, 28), (1, 1), (1, 1))), None);
        // A 0-high input padded by 2 has two rows of windows, all padding: the product.
        let empty = shape(16, 16, 1, (0, 32), (2, 1), (1, 1));
        assert!(DirectConv::for_forward(&empty, true).is_none() && DirectConv::for_weight_grad(&empty, true).is_none());
    }

    /// Padding puts each input row at its pitch with zeros around, in the image's slot of
    /// the block; the gradient rows stay as they are by rows, and get zero gap columns up to
    /// the pitch when padded.
    #[test]
    fn padded_layout() {
        let s = shape(16, 3, 1, (2, 32), (1, 1), (1, 1));
        let Some(d) = DirectConv::for_weight_grad(&s, true) else { return };
        assert_eq!((d.walk, d.pitch, d.span), (Walk::Rows, 34, 64));
        let x: Vec<f32> = (0..16 * 64).map(|v| v as f32 + 1.0).collect();
        let mut buf = Vec::new();
        d.pad_input(&s, &x, &mut buf, 1);
        let plane = &buf[d.image.0..][..d.plane];
        assert!(plane[..35].iter().all(|&v| v == 0.0));
        assert_eq!(&plane[35..67], &x[..32]);
        assert_eq!(&plane[67..69], &[0.0, 0.0]);
        assert_eq!(&plane[69..101], &x[32..64]);
        assert!(plane[101..].iter().all(|&v| v == 0.0));
        let g: Vec<f32> = (0..3 * 64).map(|v| v as f32 + 1.0).collect();
        d.pad_grad(&s, &g, &mut buf, 0);
        assert_eq!(&buf[..3 * 64], &g[..]);
        // 33 wide: padded rows of 35, 70 positions rounded up to 80.
        let s = shape(16, 3, 1, (2, 33), (1, 1), (1, 1));
        let d = DirectConv::for_weight_grad(&s, true).expect("AVX-512, as above");
        assert_eq!((d.walk, d.pitch, d.span), (Walk::Padded, 35, 80));
        let g: Vec<f32> = (0..3 * 66).map(|v| v as f32 + 1.0).collect();
        d.pad_grad(&s, &g, &mut buf, 0);
        assert_eq!(&buf[..33], &g[..33]);
        assert_eq!(&buf[33..35], &[0.0, 0.0]);
        assert_eq!(&buf[35..68], &g[33..66]);
        assert!(buf[68..d.span].iter().all(|&v| v == 0.0));
    }

    /// Both walks step through every output position once, reading the padded input where
    /// the position's window starts.
    #[test]
    fn steps_read_each_window_start() {
        for (s, walk) in [
            (shape(16, 3, 1, (3, 32), (1, 1), (1, 1)), Walk::Rows),
            (shape(16, 3, 1, (3, 33), (1, 1), (1, 1)), Walk::Padded),
        ] {
            let Some(d) = DirectConv::for_forward(&s, true) else { return };
            assert_eq!(d.walk, walk);
            let (ho, wo) = s.out_hw;
            let starts: Vec<usize> = (0..d.span).step_by(LANES).map(|q| d.steps.input_at(q)).collect();
            let want: Vec<usize> = match walk {
                Walk::Rows => (0..ho).flat_map(|y| (0..wo).step_by(LANES).map(move |x| y * d.pitch + x)).collect(),
                Walk::Padded => (0..d.span).step_by(LANES).collect(),
            };
            assert_eq!(starts, want, "{walk:?}");
            let last = starts.last().unwrap() + LANES + d.offsets[TAPS - 1];
            assert!(last <= d.plane, "{walk:?}: the last step reads inside the plane");
        }
    }
}
